//! Password logins: argon2 verification, limited per name and address,
//! the same answer (and the same time) for an unknown user, and the
//! session that a good password starts.

use argon2::password_hash::{PasswordHash, PasswordVerifier};
use argon2::Argon2;

use super::{client, Access};
use crate::config::{Config, User};
use crate::http::{ApiError, Request};

/// Verified in place of a user's hash when the user does not exist, so that
/// an unknown name costs the same time as a wrong password (argon2id with
/// the parameters of `trigd hash-password`).
const DUMMY_HASH: &str =
    "$argon2id$v=19$m=19456,t=2,p=1$wLDR/CG979mPOwk9bCg5HA$HtnJpD8Z5N0e7CZ0KtKLNUOsoTDMqfpTV2WcRizfZDo";

impl Access {
    /// Check `name` and `password` and start a session; the user and the
    /// token for the cookie. (The caller applies the CSRF rule first.)
    ///
    /// # Errors
    /// 429 `rate_limited` after too many failures for the name or the address;
    /// 401 `login_failed` for a wrong name or password (the same for both);
    /// 500 when the session cannot be stored; 503 `state_unavailable`
    /// while the database is unreachable (logins fail closed: neither the
    /// throttle nor the session can be had).
    pub fn login<'a>(
        &self,
        cfg: &'a Config,
        req: &Request,
        name: &str,
        password: &str,
    ) -> Result<(&'a User, String), ApiError> {
        let addr = client::client_addr(&cfg.server, req);
        self.limits.check_login(name, addr)?;
        let user = cfg.users.get(name);
        let hash = user.map_or(DUMMY_HASH, |u| u.password_hash.as_str());
        let verified = PasswordHash::new(hash)
            .and_then(|h| Argon2::default().verify_password(password.as_bytes(), &h))
            .is_ok();
        let Some(user) = user.filter(|_| verified) else {
            self.limits.login_failed(name, addr);
            log::info!("failed login for a user name from {addr}");
            return Err(ApiError::LoginFailed);
        };
        self.limits.login_succeeded(name);
        let token = self.sessions.create(&cfg.server, user)?;
        Ok((user, token))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dummy_hash_is_a_real_default_cost_hash() {
        // A hash that does not parse would fail fast and so tell an unknown
        // user from a known one by timing.
        let h = PasswordHash::new(DUMMY_HASH).expect("parses");
        assert_eq!(h.params.get_str("m"), Some("19456"));
        assert!(Argon2::default().verify_password(b"guess", &h).is_err());
    }
}
