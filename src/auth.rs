//! Who is calling: API keys of the run endpoint, and workspace members
//! (bearer application keys) on generated endpoints.
//!
//! Keys are never stored or compared in clear: the config holds the sha256
//! of each key, and a presented key is hashed and looked up by its hash. The
//! lookup's timing depends only on the hash, which an attacker cannot steer
//! toward a stored one, so it leaks nothing about the key.

use sha2::{Digest, Sha256};

use crate::app::App;
use crate::config::{ApiKey, Config};
use crate::http::{ApiError, Request};

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

/// Authenticate a member of `workspace` on a protected endpoint; returns
/// who it is for the run record (`app_key:<member>`).
///
/// # Errors
/// 403 `user_agent_required` for a bearer request without a valid
/// User-Agent; 401 `unauthorized` without credentials or with an unknown
/// key; 403 `forbidden` for a valid key of another workspace or of a user
/// who is no longer a member.
pub fn member(app: &App, cfg: &Config, req: &Request, workspace: &str) -> Result<String, ApiError> {
    let Some(token) = req.bearer() else {
        return Err(ApiError::Unauthorized);
    };
    if !valid_user_agent(req.header("user-agent")) {
        return Err(ApiError::UserAgentRequired);
    }
    let info = app.app_keys.lookup(token).ok_or(ApiError::Unauthorized)?;
    let is_member = cfg
        .workspaces
        .get(workspace)
        .is_some_and(|w| w.members.contains(&info.member));
    if info.workspace != workspace || !is_member {
        return Err(ApiError::Forbidden);
    }
    Ok(format!("app_key:{}", info.member))
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
