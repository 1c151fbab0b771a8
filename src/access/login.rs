//! Password logins: argon2 verification, limited per name and address,
//! the same answer (and the same time) for an unknown user, and the
//! session that a good password starts.

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

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
        let verified = {
            let _slot = self.password_checks.enter()?;
            PasswordHash::new(hash)
                .and_then(|h| Argon2::default().verify_password(password.as_bytes(), &h))
                .is_ok()
        };
        // A failure was counted when the attempt arrived (`check_login`).
        let Some(user) = user.filter(|_| verified) else {
            log::info!("failed login for a user name from {addr}");
            return Err(ApiError::LoginFailed);
        };
        self.limits.login_succeeded(name, addr);
        let token = self.sessions.create(&cfg.server, user)?;
        Ok((user, token))
    }
}

/// Password checks under way at once, at most one a core: each holds
/// argon2's 19 MiB (`m=19456`), and parallel attempts from many addresses
/// (or through a trusted proxy) held 1.5 GB with 100 of them.
pub struct PasswordChecks {
    running: Mutex<usize>,
    freed: Condvar,
    max: usize,
    /// How long a login waits for a free check ([`CHECK_WAIT`]).
    wait: Duration,
}

/// How long a login waits for a password check to be free before `busy`.
const CHECK_WAIT: Duration = Duration::from_secs(5);

/// One password check under way ([`PasswordChecks::enter`]).
pub struct CheckSlot<'a>(&'a PasswordChecks);

impl PasswordChecks {
    /// At most one check a core this process may use.
    pub fn new() -> PasswordChecks {
        PasswordChecks {
            running: Mutex::new(0),
            freed: Condvar::new(),
            max: std::thread::available_parallelism().map_or(2, |n| n.get()),
            wait: CHECK_WAIT,
        }
    }

    /// Wait for a free check, at most [`CHECK_WAIT`].
    ///
    /// # Errors
    /// 503 `busy` when none came free in time.
    pub fn enter(&self) -> Result<CheckSlot<'_>, ApiError> {
        let deadline = Instant::now() + self.wait;
        let mut n = self.running.lock().unwrap_or_else(|e| e.into_inner());
        while *n >= self.max {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ApiError::Busy {
                    retry_after: 1,
                    msg: "Too many sign-ins are being checked at once; retry in a second.".into(),
                });
            }
            n = self
                .freed
                .wait_timeout(n, left)
                .map_or_else(|e| e.into_inner().0, |r| r.0);
        }
        *n += 1;
        Ok(CheckSlot(self))
    }
}

impl Drop for CheckSlot<'_> {
    fn drop(&mut self) {
        let mut n = self.0.running.lock().unwrap_or_else(|e| e.into_inner());
        *n = n.saturating_sub(1);
        self.0.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_checks_are_bounded_and_freed() {
        let checks = PasswordChecks {
            running: Mutex::new(0),
            freed: Condvar::new(),
            max: 1,
            wait: Duration::from_millis(50),
        };
        let first = checks.enter().expect("a free check");
        assert!(
            matches!(checks.enter(), Err(ApiError::Busy { .. })),
            "past the bound: busy"
        );
        drop(first);
        assert!(checks.enter().is_ok(), "freed");
    }

    #[test]
    fn dummy_hash_is_a_real_default_cost_hash() {
        // A hash that does not parse would fail fast and so tell an unknown
        // user from a known one by timing.
        let h = PasswordHash::new(DUMMY_HASH).expect("parses");
        assert_eq!(h.params.get_str("m"), Some("19456"));
        assert!(Argon2::default().verify_password(b"guess", &h).is_err());
    }
}
