//! The run endpoint `POST /api` and the run status `GET /api/runs/<id>`.
//!
//! `POST /api` is one endpoint of the config (`Config::run_endpoint`); the
//! request goes through `invoke` like every other run request.

use std::sync::Arc;

use crate::config::Config;
use crate::http::app::App;
use crate::http::{ApiError, Request, Response};
use crate::invoke::invoke;
use crate::runs::{self, Takes};

/// `POST /api`: run a program's triggered function, sync or async.
///
/// # Errors
/// Those of `invoke::invoke`.
pub fn run(app: &App, cfg: &Arc<Config>, req: &mut Request) -> Result<Response, ApiError> {
    invoke(app, cfg, req, &cfg.run_endpoint)
}

/// `GET /api/runs/<id>`: a run's record, for a key that may see it
/// (`runs::authorize`: authenticated before the run is looked up).
///
/// # Errors
/// 429 `rate_limited`, 401 for a missing or invalid key; `run_not_found`
/// otherwise, also for a run outside the key's scope; 421
/// `run_on_other_instance`.
pub fn run_status(app: &App, cfg: &Config, req: &Request, id: &str) -> Result<Response, ApiError> {
    let (rec, _) = runs::authorize(app, cfg, req, id, Takes::Keys)?;
    let body = serde_json::to_value(rec.public()).map_err(|_| ApiError::Internal)?;
    Ok(Response::json(200, &body))
}
