//! Who is calling: API keys of the run endpoint.
//!
//! Keys are never stored or compared in clear: the config holds the sha256
//! of each key, and a presented key is hashed and looked up by its hash. The
//! lookup's timing depends only on the hash, which an attacker cannot steer
//! toward a stored one, so it leaks nothing about the key.

use sha2::{Digest, Sha256};

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
    let token = token.filter(|t| !t.is_empty()).ok_or(ApiError::MissingApiKey)?;
    cfg.api_keys.get(&sha256(token)).ok_or(ApiError::InvalidApiKey)
}
