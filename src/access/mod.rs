//! Who is calling, and may they: API keys of the run endpoint (rate limits
//! inside, so no path can skip them), workspace members by bearer
//! application key or session cookie, the one CSRF rule ([`check_csrf`]),
//! logins, and the one limiter type (`limiter.rs`).
//!
//! Keys are never stored or compared in clear: the config holds the sha256
//! of each key, and a presented key is hashed and looked up by its hash. The
//! lookup's timing depends only on the hash, which an attacker cannot steer
//! toward a stored one, so it leaks nothing about the key.

pub mod cidr;

mod app_keys;
mod client;
mod csrf;
mod error;
mod limiter;
mod login;
mod secret;
mod sessions;
mod shared_limits;

use crate::receive::rules::unix_now;
use crate::receive::signature::Verifier;

pub use app_keys::AppKeys;
pub use client::client_ip;
pub use csrf::{check as check_csrf, Carrier};
pub use error::StoreError;
pub use secret::{random_hex, sha256};
pub use sessions::{clear_cookie, set_cookie, Session};

use crate::config::{ApiKey, Config};
use crate::http::{ApiError, Request};
use crate::state::record::Origin;
use crate::state::State;
use limiter::Limits;
use sessions::Sessions;

/// The credentials and limits of one server (part of `App`).
pub struct Access {
    /// Application keys of workspace members.
    pub app_keys: AppKeys,
    sessions: Sessions,
    limits: Limits,
    password_checks: login::PasswordChecks,
}

/// An authenticated member of a workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The user name.
    pub user: String,
    /// True for a bearer application key, false for a session cookie.
    pub bearer: bool,
}

impl Member {
    /// Who started a run made with these credentials.
    pub fn origin(&self) -> Origin {
        if self.bearer {
            Origin::AppKey(self.user.clone())
        } else {
            Origin::Session(self.user.clone())
        }
    }
}

/// A person authenticated by [`Access::user`], not yet checked against a
/// workspace.
#[derive(Debug, Clone)]
pub enum User {
    /// A bearer application key: its member, in its one workspace.
    AppKey {
        /// The member's user name.
        member: String,
        /// The workspace the key was made in.
        workspace: String,
    },
    /// A browser session (the CSRF rule is checked by
    /// [`User::member_of`]).
    Session(Session),
}

impl User {
    /// This person as a member of `workspace`.
    ///
    /// # Errors
    /// 403 `forbidden` for someone who is not a member (or an application
    /// key of another workspace); 403 `csrf_rejected` for a session
    /// request failing the CSRF rule (see `csrf.rs`).
    pub fn member_of(
        self,
        cfg: &Config,
        req: &Request,
        workspace: &str,
    ) -> Result<Member, ApiError> {
        match self {
            User::Session(s) => {
                if !is_member(cfg, workspace, &s.user) {
                    return Err(ApiError::Forbidden);
                }
                check_csrf(cfg, req, Some(&s), Carrier::Headers)?;
                Ok(Member {
                    user: s.user,
                    bearer: false,
                })
            }
            User::AppKey {
                member,
                workspace: ws,
            } => {
                if ws != workspace || !is_member(cfg, workspace, &member) {
                    return Err(ApiError::Forbidden);
                }
                Ok(Member {
                    user: member,
                    bearer: true,
                })
            }
        }
    }
}

/// A browser's current session and the token of its cookie.
pub struct SignedIn {
    /// The cookie's token (needed to end the session).
    pub token: String,
    /// The session.
    pub session: Session,
}

impl Access {
    /// The sessions and the application keys kept in `state`, with empty
    /// limiters (shared through the database with `[state] url`, where the
    /// watcher of application keys starts now).
    pub fn open(state: &State) -> Access {
        let app_keys = AppKeys::new(state);
        if let Err(e) = app_keys.watch() {
            // Still correct without it: every lookup asks the database.
            log::error!("cannot start the watcher of application keys: {e}");
        }
        Access {
            app_keys,
            sessions: Sessions::open(state),
            limits: Limits::new(state),
            password_checks: login::PasswordChecks::new(),
        }
    }

    /// Revoke the application keys of members no longer in their
    /// workspace in `cfg` (at start and whenever a reload swaps a config
    /// in; see [`AppKeys::revoke_leavers`]). Each revoked key is logged; a
    /// failure (the database down) is logged and tried again at the next
    /// load, the key refused meanwhile by [`User::member_of`].
    pub fn revoke_leavers(&self, cfg: &Config) {
        match self.app_keys.revoke_leavers(|ws, m| is_member(cfg, ws, m)) {
            Ok(gone) => {
                for (ws, member) in gone {
                    log::info!("application key of {member} in {ws} revoked: no longer a member");
                }
            }
            Err(e) => log::warn!(
                "cannot revoke the application keys of members who left their workspace \
                 (tried again at the next reload): {e}"
            ),
        }
    }

    /// The API key of a run-endpoint request: `api_key` in the query, or
    /// else an `Authorization: Bearer` header. A client address over its
    /// failure budget is refused before its key is looked at, an unknown key
    /// counts as a failure, and a known key is counted against its
    /// `rate_per_minute`.
    ///
    /// # Errors
    /// `rate_limited`; `missing_api_key` when no key is given (or it is
    /// empty), `invalid_api_key` when it matches no configured key,
    /// `invalid_parameter` when `api_key` is repeated.
    pub fn api_key<'a>(&self, cfg: &'a Config, req: &Request) -> Result<&'a ApiKey, ApiError> {
        let client = client::client_addr(&cfg.server, req);
        self.limits.check_client(&cfg.server, client)?;
        let token = match req.query_one("api_key")? {
            Some(k) => Some(k),
            None => req.bearer(),
        };
        let token = token
            .filter(|t| !t.is_empty())
            .ok_or(ApiError::MissingApiKey)?;
        let Some(key) = cfg.api_keys.get(&sha256(token)) else {
            self.limits.failed(&cfg.server, client);
            return Err(ApiError::InvalidApiKey);
        };
        self.limits.take_key(key)?;
        Ok(key)
    }

    /// Check a request's signature or token (a tool trigger's `verify`). A
    /// client address over its failure budget is refused first, and a
    /// refused signature counts as a failure, like a wrong key (guessing a
    /// token is slow).
    ///
    /// # Errors
    /// `rate_limited`; `signature_missing`, `signature_malformed`,
    /// `signature_mismatch`, `signature_expired`.
    pub fn signature(&self, cfg: &Config, req: &Request, v: &Verifier) -> Result<(), ApiError> {
        self.before_secret(cfg, req)?;
        v.verify(&req.headers, &req.body, unix_now()).map_err(|e| {
            self.secret_failed(cfg, req);
            ApiError::Signature(e)
        })
    }

    /// Refuse a client address past its failed authentications before a
    /// secret other than a key is checked (a token or signature in a rule).
    ///
    /// # Errors
    /// `rate_limited`.
    pub fn before_secret(&self, cfg: &Config, req: &Request) -> Result<(), ApiError> {
        let client = client::client_addr(&cfg.server, req);
        self.limits.check_client(&cfg.server, client)
    }

    /// Count a failed check of such a secret against the client address.
    pub fn secret_failed(&self, cfg: &Config, req: &Request) {
        let client = client::client_addr(&cfg.server, req);
        self.limits.failed(&cfg.server, client);
    }

    /// Authenticate a member of `workspace`: a bearer application key when
    /// an `Authorization: Bearer` header is present, else the session
    /// cookie, which must pass the CSRF rule.
    ///
    /// # Errors
    /// Those of [`Access::user`] and [`User::member_of`].
    pub fn member(&self, cfg: &Config, req: &Request, workspace: &str) -> Result<Member, ApiError> {
        self.user(cfg, req)?.member_of(cfg, req, workspace)
    }

    /// [`Access::member`] for a request that starts a run (a generated
    /// endpoint). A GET or HEAD on the session cookie is refused too when
    /// the browser says it comes from another site (`csrf::run_by_get`):
    /// the CSRF rule leaves those methods alone, and a browser sends a
    /// `SameSite=Lax` cookie on a link followed from any site.
    ///
    /// # Errors
    /// Those of [`Access::member`]; 403 `csrf_rejected`.
    pub fn member_to_run(
        &self,
        cfg: &Config,
        req: &Request,
        workspace: &str,
    ) -> Result<Member, ApiError> {
        let m = self.member(cfg, req, workspace)?;
        if !m.bearer {
            csrf::run_by_get(cfg, req)?;
        }
        Ok(m)
    }

    /// Authenticate a person, whatever their workspace: a bearer
    /// application key when an `Authorization: Bearer` header is present,
    /// else the session cookie. A bearer that is no application key counts
    /// as a failed authentication of the client address.
    ///
    /// # Errors
    /// 429 `rate_limited` for an address past its failed authentications;
    /// 401 `unauthorized` without credentials, with an unknown key or an
    /// expired session; 403 `user_agent_required` for a valid bearer key
    /// sent without a valid User-Agent.
    pub fn user(&self, cfg: &Config, req: &Request) -> Result<User, ApiError> {
        let client = client::client_addr(&cfg.server, req);
        self.limits.check_client(&cfg.server, client)?;
        let Some(token) = req.bearer() else {
            let s = self.session(cfg, req)?.ok_or(ApiError::Unauthorized)?;
            return Ok(User::Session(s.session));
        };
        // The key before the User-Agent: a wrong key is a failed
        // authentication (counted, 401) however the request is dressed.
        let Some(info) = self.app_keys.lookup(token)? else {
            self.limits.failed(&cfg.server, client); // a bad key counts against the address
            return Err(ApiError::Unauthorized);
        };
        if !valid_user_agent(req.header("user-agent")) {
            return Err(ApiError::UserAgentRequired);
        }
        Ok(User::AppKey {
            member: info.member,
            workspace: info.workspace,
        })
    }

    /// The session of the request's cookie, if any and current (counts as
    /// activity).
    ///
    /// # Errors
    /// 503 `state_unavailable` while the database of sessions is
    /// unreachable.
    pub fn session(&self, cfg: &Config, req: &Request) -> Result<Option<SignedIn>, ApiError> {
        let Some(token) = sessions::cookie_token(req) else {
            return Ok(None);
        };
        let session = self.sessions.lookup(cfg, token)?;
        Ok(session.map(|session| SignedIn {
            token: token.to_string(),
            session,
        }))
    }

    /// End the session of `token` (logout).
    ///
    /// # Errors
    /// `internal_error` when the state dir cannot be written; 503
    /// `state_unavailable` while the database is unreachable.
    pub fn end_session(&self, token: &str) -> Result<(), ApiError> {
        Ok(self.sessions.remove(token)?)
    }
}

/// Whether `user` is a member of `workspace`.
pub fn is_member(cfg: &Config, workspace: &str, user: &str) -> bool {
    cfg.workspaces
        .get(workspace)
        .is_some_and(|w| w.members.iter().any(|m| m == user))
}

/// Whether `ua` is a usable User-Agent: not empty, printable ASCII only.
fn valid_user_agent(ua: Option<&str>) -> bool {
    ua.is_some_and(|s| !s.trim().is_empty() && s.bytes().all(|b| (0x20..0x7f).contains(&b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_agent_rule() {
        assert!(valid_user_agent(Some("curl/8.5.0")));
        assert!(!valid_user_agent(None));
        assert!(!valid_user_agent(Some("")));
        assert!(!valid_user_agent(Some("  ")));
        assert!(!valid_user_agent(Some("bad\u{7f}")));
        assert!(!valid_user_agent(Some("caf\u{e9}")));
    }
}
