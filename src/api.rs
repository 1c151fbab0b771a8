//! The run endpoint `POST /api` and the run status `GET /api/runs/<id>`.
//!
//! `POST /api` is one endpoint of the config (`Config::run_endpoint`); the
//! request goes through `invoke` like every other run request.

use std::sync::Arc;

use crate::app::App;
use crate::cluster;
use crate::config::Config;
use crate::http::{ApiError, Request, Response};
use crate::invoke::invoke;

/// `POST /api`: run a program's triggered function, sync or async.
///
/// # Errors
/// Those of `invoke::invoke`.
pub fn run(app: &App, cfg: &Arc<Config>, req: &mut Request) -> Result<Response, ApiError> {
    invoke(app, cfg, req, &cfg.run_endpoint)
}

/// `GET /api/runs/<id>`: a run's record, for a key that may access its
/// program.
///
/// # Errors
/// 429 `rate_limited`, 401 for a missing or invalid key; `run_not_found`
/// otherwise, also for a run of a program outside the key's scope.
pub fn run_status(app: &App, cfg: &Config, req: &Request, id: &str) -> Result<Response, ApiError> {
    let key = app.access.api_key(cfg, req)?;
    let visible = app
        .store
        .program_of(id)
        .and_then(|pid| cfg.program(pid))
        .is_some_and(|p| key.may_access(p));
    let Some(rec) = app.store.get(id) else {
        // Not recorded here: an id naming another instance is that one's.
        return Err(match cluster::foreign_owner(id, &cfg.server.instance) {
            Some(owner) => ApiError::RunOnOtherInstance {
                instance: owner.to_string(),
            },
            None => ApiError::RunNotFound,
        });
    };
    if !visible {
        return Err(ApiError::RunNotFound);
    }
    let body = serde_json::to_value(rec.public()).map_err(|_| ApiError::Internal)?;
    Ok(Response::json(200, &body))
}
