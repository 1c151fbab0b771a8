//! Who is calling: API keys of the run endpoint, and workspace members
//! (bearer application keys or browser session cookies) on generated
//! endpoints.
//!
//! CSRF: a bearer key is never sent by a browser on its own, so only
//! cookie-authenticated requests need protection. A cookie-authenticated
//! request with a method other than GET/HEAD is accepted only with proof
//! that it comes from a trigd page: the session's `X-CSRF-Token` header, or
//! `Sec-Fetch-Site: same-origin` (or, from browsers without it, an `Origin`
//! equal to ours). Anything else is 403 `csrf_rejected`.
//!
//! Keys are never stored or compared in clear: the config holds the sha256
//! of each key, and a presented key is hashed and looked up by its hash. The
//! lookup's timing depends only on the hash, which an attacker cannot steer
//! toward a stored one, so it leaks nothing about the key.

use sha2::{Digest, Sha256};

use crate::app::App;
use crate::config::{ApiKey, Config};
use crate::http::{ApiError, Request};
use crate::ratelimit;
use crate::sessions;

/// sha256 of `s`.
pub fn sha256(s: &str) -> [u8; 32] {
    Sha256::digest(s.as_bytes()).into()
}

/// The API key of a run-endpoint request: `api_key` in the query, or else an
/// `Authorization: Bearer` header.
///
/// # Errors
/// `missing_api_key` when neither is given (or empty), `invalid_api_key`
/// when it matches no configured key, `invalid_parameter` when `api_key` is
/// repeated.
pub fn api_key<'a>(cfg: &'a Config, req: &Request) -> Result<&'a ApiKey, ApiError> {
    let token = match req.query_one("api_key")? {
        Some(k) => Some(k),
        None => req.bearer(),
    };
    let token = token
        .filter(|t| !t.is_empty())
        .ok_or(ApiError::MissingApiKey)?;
    cfg.api_keys
        .get(&sha256(token))
        .ok_or(ApiError::InvalidApiKey)
}

/// Whether `ua` is a usable User-Agent: not empty, printable ASCII only.
pub fn valid_user_agent(ua: Option<&str>) -> bool {
    ua.is_some_and(|s| !s.trim().is_empty() && s.bytes().all(|b| (0x20..0x7f).contains(&b)))
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
    /// Who it is for the run record: `app_key:<user>` or `session:<user>`.
    pub fn by(&self) -> String {
        let via = if self.bearer { "app_key" } else { "session" };
        format!("{via}:{}", self.user)
    }
}

/// Authenticate a member of `workspace` on a protected endpoint; returns
/// who it is for the run record (`app_key:<member>` or `session:<member>`).
///
/// # Errors
/// See [`authenticate`].
pub fn member(app: &App, cfg: &Config, req: &Request, workspace: &str) -> Result<String, ApiError> {
    authenticate(app, cfg, req, workspace).map(|m| m.by())
}

/// Authenticate a member of `workspace`: a bearer application key when an
/// `Authorization: Bearer` header is present, else the session cookie.
///
/// # Errors
/// 429 `rate_limited` for an address past its failed authentications
/// (see `ratelimit`); 403 `user_agent_required` for a bearer request
/// without a valid User-Agent; 401 `unauthorized` without credentials, with
/// an unknown key or an expired session; 403 `forbidden` for valid
/// credentials of someone who is not a member; 403 `csrf_rejected` for a
/// cookie-authenticated request other than GET/HEAD without CSRF proof (see
/// the module doc).
pub fn authenticate(
    app: &App,
    cfg: &Config,
    req: &Request,
    workspace: &str,
) -> Result<Member, ApiError> {
    let client = ratelimit::client_addr(&cfg.server, req);
    app.limits.check_client(&cfg.server, client)?;
    let is_member = |user: &str| {
        cfg.workspaces
            .get(workspace)
            .is_some_and(|w| w.members.iter().any(|m| m == user))
    };
    let Some(token) = req.bearer() else {
        let (_, session) = app
            .sessions
            .of_request(cfg, req)
            .ok_or(ApiError::Unauthorized)?;
        if !is_member(&session.user) {
            return Err(ApiError::Forbidden);
        }
        if !matches!(req.method.as_str(), "GET" | "HEAD") {
            let token_ok = req
                .header("x-csrf-token")
                .is_some_and(|t| sessions::same_token(t.trim(), &session.csrf));
            if !token_ok && !sessions::same_origin(cfg, req) {
                return Err(ApiError::CsrfRejected);
            }
        }
        return Ok(Member {
            user: session.user,
            bearer: false,
        });
    };
    if !valid_user_agent(req.header("user-agent")) {
        return Err(ApiError::UserAgentRequired);
    }
    let failed = || {
        app.limits.failed(&cfg.server, client); // a bad key counts against the address
        ApiError::Unauthorized
    };
    let info = app.app_keys.lookup(token).ok_or_else(failed)?;
    if info.workspace != workspace || !is_member(&info.member) {
        return Err(ApiError::Forbidden);
    }
    Ok(Member {
        user: info.member,
        bearer: true,
    })
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
