//! A run's kept output and its cancel: `GET /api/runs/<id>/output` (whole,
//! or followed as Server-Sent Events) and `POST /api/runs/<id>/cancel`, and
//! who may use them ([`authorize`]): an API key whose scope holds the run's
//! program, or a member of the program's workspace (bearer application key
//! or session cookie).

use std::time::{Duration, Instant};

use serde_json::json;

use crate::access;
use crate::app::App;
use crate::cluster;
use crate::config::Config;
use crate::follow::{self, End, Follower, Live};
use crate::http::{ApiError, Request, Response};
use crate::invoke;
use crate::output;
use crate::runner::Cancel;
use crate::store::{Origin, RunRecord, RunState};

/// Query parameters of the output endpoint.
const OUTPUT_PARAMS: [&str; 2] = ["api_key", "follow"];

/// The record of run `id` if the request may see it, and who is asking:
/// with an API key
/// (`api_key` or a bearer that is an API key), the key's scope must hold
/// the run's program; otherwise the caller must be a member of the
/// program's workspace (bearer application key or session; the CSRF rule
/// applies to a session's POST).
///
/// # Errors
/// The API key or member errors; `run_not_found` for an unknown run or one
/// the caller may not see; 421 `run_on_other_instance` for another
/// instance's run.
pub fn authorize(
    app: &App,
    cfg: &Config,
    req: &Request,
    id: &str,
) -> Result<(RunRecord, Origin), ApiError> {
    if uses_api_key(cfg, req)? {
        let key = app.access.api_key(cfg, req)?;
        let rec = record(app, cfg, id)?;
        let visible = cfg.program(rec.program).is_some_and(|p| key.may_access(p));
        if !visible {
            return Err(ApiError::RunNotFound);
        }
        return Ok((rec, Origin::ApiKey(key.name.clone())));
    }
    if req.bearer().is_none() && req.header("cookie").is_none() {
        return Err(ApiError::MissingApiKey);
    }
    if req.bearer().is_none() && app.access.session(cfg, req).is_none() {
        return Err(ApiError::Unauthorized);
    }
    let rec = record(app, cfg, id)?;
    let workspace = cfg
        .program(rec.program)
        .and_then(|p| p.workspace.clone())
        .ok_or(ApiError::RunNotFound)?;
    match app.access.member(cfg, req, &workspace) {
        Ok(m) => Ok((rec, m.origin())),
        // A member of another workspace does not learn that the run exists.
        Err(ApiError::Forbidden) => Err(ApiError::RunNotFound),
        Err(e) => Err(e),
    }
}

/// Whether the request authenticates with an API key: `api_key` in the
/// query, or a bearer token that is a configured API key.
fn uses_api_key(cfg: &Config, req: &Request) -> Result<bool, ApiError> {
    if req.query_one("api_key")?.is_some() {
        return Ok(true);
    }
    Ok(req
        .bearer()
        .is_some_and(|t| cfg.api_keys.contains_key(&access::sha256(t))))
}

/// The record of run `id`, or why there is none here.
pub fn record(app: &App, cfg: &Config, id: &str) -> Result<RunRecord, ApiError> {
    app.store
        .get(id)
        .ok_or_else(|| match cluster::foreign_owner(id, &cfg.server.instance) {
            Some(owner) => ApiError::RunOnOtherInstance {
                instance: owner.to_string(),
            },
            None => ApiError::RunNotFound,
        })
}

/// `GET /api/runs/<id>/output`: the kept output, or with `follow=1` (or
/// `Accept: text/event-stream`) the output as it is written, as events.
///
/// # Errors
/// See [`authorize`]; `invalid_parameter` for a bad `follow` or an unknown
/// parameter.
pub fn output(app: &App, cfg: &Config, req: &Request, id: &str) -> Result<Response, ApiError> {
    let (rec, _) = authorize(app, cfg, req, id)?;
    let follow = invoke::parse_bool("follow", req.query_one("follow")?)?;
    reject_unknown(req, &OUTPUT_PARAMS)?;
    let path = app.store.output_path(&rec.run);
    if follow || invoke::wants_events(req) {
        let store = std::sync::Arc::clone(&app.store);
        let run = rec.run.clone();
        let end: End = Box::new(move || match store.get(&run) {
            Some(r) if r.state.is_terminal() => serde_json::to_value(r.public()).ok(),
            Some(_) => None,
            // Removed under `run_retention` while followed.
            None => Some(json!({"Run": run, "Error": "The run's record is no longer kept."})),
        });
        let runner = std::sync::Arc::clone(&app.runner);
        let run = rec.run.clone();
        let live: Live = Box::new(move || runner.handle(&run));
        return Ok(follow::events(Follower::new(path, end, live)));
    }
    let w = output::read_whole(&path);
    Ok(Response::json(
        200,
        &json!({
            "Run": rec.run,
            "State": rec.state.name(),
            "Stdout": String::from_utf8_lossy(&w.stdout),
            "Stderr": String::from_utf8_lossy(&w.stderr),
            "StdoutTruncated": w.stdout_truncated,
            "StderrTruncated": w.stderr_truncated,
        }),
    ))
}

/// `POST /api/runs/<id>/cancel`: stop a queued or running run.
///
/// # Errors
/// See [`authorize`]; 409 `run_ended` for a run that has already ended.
pub fn cancel(app: &App, cfg: &Config, req: &Request, id: &str) -> Result<Response, ApiError> {
    let (rec, by) = authorize(app, cfg, req, id)?;
    reject_unknown(req, &["api_key"])?;
    let rec = stop(app, cfg, rec, &by)?;
    let status = if rec.state.is_terminal() { 200 } else { 202 };
    let body = json!({
        "Success": "Run cancelled.",
        "Run": rec.run,
        "State": rec.state.name(),
    });
    Ok(Response::json(status, &body).with_run(&rec.run))
}

/// Stop the run of `rec` and wait (at most its kill grace and a little
/// more) until it has ended; its record then. The answer is read from the
/// record: a cancel that was accepted ends the run `cancelled` (the runner
/// decides a cancel and the run's end under one lock), and one that came
/// too late is `run_ended` with the state the run really ended in.
///
/// # Errors
/// 409 `run_ended` for a run that has already ended, or that ended before
/// the cancel reached it.
pub fn stop(app: &App, cfg: &Config, rec: RunRecord, by: &Origin) -> Result<RunRecord, ApiError> {
    let ended = |r: &RunRecord| ApiError::RunEnded {
        run: r.run.clone(),
        state: r.state.name(),
    };
    if rec.state.is_terminal() {
        return Err(ended(&rec));
    }
    let deadline = Instant::now() + cfg.server.kill_grace + Duration::from_secs(10);
    let mut accepted = false;
    loop {
        // A run between the queue and its start is not found for a moment:
        // ask again until its record says it has ended.
        if !accepted {
            accepted = app.runner.cancel(&rec.run) != Cancel::NotActive;
            if accepted {
                log::info!("run {} cancelled by {}", rec.run, String::from(by.clone()));
            }
        }
        let now = app.store.get(&rec.run).unwrap_or_else(|| rec.clone());
        let over = now.state.is_terminal();
        if over && (!accepted || now.state != RunState::Cancelled) {
            return Err(ended(&now));
        }
        if over || (accepted && Instant::now() >= deadline) {
            return Ok(now);
        }
        if Instant::now() >= deadline {
            return Err(ended(&now));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Refuse query parameters outside `known`, naming the first one.
fn reject_unknown(req: &Request, known: &[&str]) -> Result<(), ApiError> {
    match req.query.iter().find(|(k, _)| !known.contains(&k.as_str())) {
        Some((k, _)) => Err(ApiError::InvalidParameter {
            name: k.clone(),
            msg: format!("Unknown parameter '{k}'. Accepted: {}.", known.join(", ")),
        }),
        None => Ok(()),
    }
}
