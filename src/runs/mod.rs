//! A run's kept output and its cancel: `GET /api/runs/<id>/output` (whole,
//! or followed as Server-Sent Events) and `POST /api/runs/<id>/cancel`, and
//! who may see a run, for these and `GET /api/runs/<id>` ([`authorize`]):
//! the caller is authenticated first, then an API key whose scope holds
//! the run's program, or a member of the program's workspace (bearer
//! application key or session cookie); a hooks-file hook's run only an API
//! key without scope.

pub mod callback;
pub mod cluster;
pub mod follow;
pub mod idempotency;
pub mod list;
pub mod replay;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::access;
use crate::config::{ApiKey, Config};
use crate::http::app::App;
use crate::http::{ApiError, Request, Response};
use crate::invoke;
use crate::runner::Cancel;
use crate::state::output::{self, Inline, Stored};
use crate::state::pg::output::Mirror;
use crate::state::pg::Db;
use crate::state::record::{Origin, Owner, RunHead, RunRecord, RunState};
use follow::{End, Follower, InRecord, Live};

/// Query parameters of the output endpoint.
const OUTPUT_PARAMS: [&str; 2] = ["api_key", "follow"];

/// Who asks about a run, authenticated before the run is looked up.
pub enum Asker<'c> {
    /// An API key (`api_key`, or a bearer that is a configured key).
    Key(&'c ApiKey),
    /// A person: a bearer application key or a session.
    User(access::User),
}

/// The credentials a run endpoint takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takes {
    /// API keys only (`GET /api/runs/<id>`).
    Keys,
    /// API keys, application keys and sessions (output, cancel).
    KeysAndUsers,
}

/// Authenticate the request before any run is looked up, so that a bad
/// credential is 401 (and counted by the failed-authentication limiter,
/// 429 past it) whatever run id it names.
///
/// # Errors
/// Those of `Access::api_key` and `Access::user`; 401 `missing_api_key`
/// without any credential.
pub fn authenticate<'c>(
    app: &App,
    cfg: &'c Config,
    req: &Request,
    takes: Takes,
) -> Result<Asker<'c>, ApiError> {
    if takes == Takes::Keys || uses_api_key(cfg, req)? {
        return Ok(Asker::Key(app.access.api_key(cfg, req)?));
    }
    if req.bearer().is_none() && req.header("cookie").is_none() {
        return Err(ApiError::MissingApiKey);
    }
    match app.access.user(cfg, req) {
        Ok(user) => Ok(Asker::User(user)),
        // A bearer that is neither kind of key: the status endpoint's
        // answer, so that the three answer one wrong key alike.
        Err(ApiError::Unauthorized) if req.bearer().is_some() => Err(ApiError::InvalidApiKey),
        Err(e) => Err(e),
    }
}

/// The record of run `id` if the request may see it, and who is asking
/// ([`authenticate`] first). A program's run: an API key whose scope
/// holds the program, or a member of the program's workspace (the CSRF
/// rule applies to a session's POST). A hooks-file hook's run: only an
/// API key without scope (its Result holds the sender's payload values,
/// and a hook belongs to no workspace).
///
/// # Errors
/// Those of [`authenticate`]; `run_not_found` for an unknown run or one
/// the caller may not see; 421 `run_on_other_instance` for another
/// instance's run.
pub fn authorize(
    app: &App,
    cfg: &Config,
    req: &Request,
    id: &str,
    takes: Takes,
) -> Result<(RunRecord, Origin), ApiError> {
    let asker = authenticate(app, cfg, req, takes)?;
    let rec = record(app, cfg, id)?;
    let origin = may_see(cfg, req, asker, rec.owner)?;
    Ok((rec, origin))
}

/// [`authorize`] for the output endpoint: the run's head only (its id,
/// state and owner, [`RunStore::fetch_head`]), not its record, whose Result can
/// hold `max_output_bytes` of output: each of 20 followers starting at
/// once held their own copy of a 10 MB Result (8 MB per follower at the
/// peak, issue 31).
///
/// [`RunStore::fetch_head`]: crate::state::store::RunStore::fetch_head
///
/// # Errors
/// Those of [`authorize`].
fn authorize_head(
    app: &App,
    cfg: &Config,
    req: &Request,
    id: &str,
    takes: Takes,
) -> Result<RunHead, ApiError> {
    let asker = authenticate(app, cfg, req, takes)?;
    let found = app
        .store
        .fetch_head(id)
        .map_err(|e| ApiError::storage(&e))?;
    let head = found.ok_or_else(|| not_here(app, cfg, id))?;
    may_see(cfg, req, asker, head.owner)?;
    Ok(head)
}

/// Whether `asker` may see a run of `owner`; who they are, for a cancel's
/// log line.
///
/// # Errors
/// `run_not_found` when they may not (a member of another workspace does
/// not learn that the run exists); `csrf_rejected`.
fn may_see(cfg: &Config, req: &Request, asker: Asker, owner: Owner) -> Result<Origin, ApiError> {
    let program = owner.program().and_then(|id| cfg.program(id));
    match asker {
        Asker::Key(key) => {
            let visible = match owner {
                // An unscoped key sees the runs of a program since removed.
                Owner::Program(_) if key.is_unscoped() => true,
                Owner::Program(_) => program.is_some_and(|p| key.may_access(p)),
                Owner::Hook => key.is_unscoped(),
            };
            if !visible {
                return Err(ApiError::RunNotFound);
            }
            Ok(Origin::ApiKey(key.name.clone()))
        }
        Asker::User(user) => {
            let workspace = program
                .and_then(|p| p.workspace.as_deref())
                .ok_or(ApiError::RunNotFound)?;
            match user.member_of(cfg, req, workspace) {
                Ok(m) => Ok(m.origin()),
                Err(ApiError::Forbidden) => Err(ApiError::RunNotFound),
                Err(e) => Err(e),
            }
        }
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
/// With the database every instance knows every run: an unknown one is
/// `run_not_found`, never another instance's.
pub fn record(app: &App, cfg: &Config, id: &str) -> Result<RunRecord, ApiError> {
    let found = app.store.fetch(id).map_err(|e| ApiError::storage(&e))?;
    found.ok_or_else(|| not_here(app, cfg, id))
}

/// Why run `id` is not found here: another instance's (file logs only),
/// or unknown.
fn not_here(app: &App, cfg: &Config, id: &str) -> ApiError {
    match cluster::foreign_owner(id, &cfg.server.instance) {
        Some(owner) if !app.store.is_shared() => ApiError::RunOnOtherInstance {
            instance: owner.to_string(),
        },
        _ => ApiError::RunNotFound,
    }
}

/// The `end` event of the run whose followers are ending now, shared by
/// all of them while one still sends it (see [`follow::shared`]).
static LAST_END: Mutex<Option<(String, Weak<[u8]>)>> = Mutex::new(None);

/// The `end` event's data of followed run `run` once it has ended: its
/// record as `GET /api/runs/<id>` shows it, read and written once for all
/// its followers.
fn end_event(store: &crate::state::store::RunStore, run: &str) -> Option<Arc<[u8]>> {
    if store.has_ended(run) == Some(false) {
        return None;
    }
    let mut last = LAST_END.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((r, held)) = last.as_ref() {
        if let Some(data) = held.upgrade().filter(|_| r == run) {
            return Some(data);
        }
    }
    let data = match store.fetch(run) {
        Ok(Some(r)) if r.state.is_terminal() => {
            follow::shared(&serde_json::to_value(r.public()).ok()?)
        }
        Ok(Some(_)) => return None,
        // The database cannot tell now (it is down): the follow goes on
        // and asks again, as for a run still going. (It ended the follow
        // as if the record were gone.)
        Err(_) => return None,
        // Removed under `run_retention` while followed.
        Ok(None) => {
            follow::shared(&json!({"Run": run, "Error": "The run's record is no longer kept."}))
        }
    };
    *last = Some((run.to_string(), Arc::downgrade(&data)));
    Some(data)
}

/// `GET /api/runs/<id>/output`: the kept output, or with `follow=1` (or
/// `Accept: text/event-stream`) the output as it is written, as events.
///
/// # Errors
/// See [`authorize`]; `invalid_parameter` for a bad `follow` or an unknown
/// parameter.
pub fn output(app: &App, cfg: &Config, req: &Request, id: &str) -> Result<Response, ApiError> {
    let rec = authorize_head(app, cfg, req, id, Takes::KeysAndUsers)?;
    let follow = invoke::parse_bool("follow", req.query_one("follow")?)?;
    reject_unknown(req, &OUTPUT_PARAMS)?;
    let path = app.store.output_path(&rec.run);
    // A run that ended with its output held in memory keeps it in its
    // record, not in a file (`state/output.rs`).
    let inline = match rec.state.is_terminal() {
        true => app.store.inline_output(&rec.run),
        false => None,
    };
    // With a database, output of a run not executed here is read from it.
    let here =
        inline.is_some() || app.runner.handle(&rec.run).is_some() || output::open(&path).is_some();
    let db = app.state.db().filter(|_| !here);
    if follow || invoke::wants_events(req) {
        return Ok(follow_output(app, &rec.run, path, db, inline));
    }
    let w = match (inline, db) {
        (Some(inline), _) => output::whole(&Stored::Inline(inline)),
        (None, Some(db)) => Mirror::new(&rec.run, &path)
            .read_whole(db)
            .map_err(|e| ApiError::db(&e))?,
        (None, None) => output::read_whole(&path),
    };
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

/// The events of run `run`'s output as it is written (`follow.rs`): from
/// its file at `path`, or with `db` from a mirror of the copy the
/// database keeps; from its record once it has ended without a file
/// (`inline` when that is known already).
fn follow_output(
    app: &App,
    run: &str,
    path: PathBuf,
    db: Option<&Arc<Db>>,
    inline: Option<Inline>,
) -> Response {
    let store = Arc::clone(&app.store);
    let id = run.to_string();
    let in_record: InRecord = match inline {
        Some(i) => Box::new(move || Some(i)),
        None => Box::new(move || store.inline_output(&id)),
    };
    let runner = Arc::clone(&app.runner);
    let id = run.to_string();
    let live: Live = Box::new(move || runner.handle(&id));
    let store = Arc::clone(&app.store);
    let id = run.to_string();
    let Some(db) = db else {
        let end: End = Box::new(move || end_event(&store, &id));
        return follow::events(Follower::new(path, end, live, in_record));
    };
    let mut mirror = Mirror::new(run, &path);
    let at = mirror.path().to_path_buf();
    let db = Arc::clone(db);
    let end: End = Box::new(move || {
        // Whether it had ended before the copy: then the copy has all.
        let ended = end_event(&store, &id);
        if let Err(e) = mirror.sync(&db) {
            log::warn!("run {id}: cannot read its output from the database: {e}");
        }
        ended
    });
    follow::events(Follower::new(at, end, live, in_record))
}

/// `POST /api/runs/<id>/cancel`: stop a queued or running run.
///
/// # Errors
/// See [`authorize`]; 409 `run_ended` for a run that has already ended.
pub fn cancel(app: &App, cfg: &Config, req: &Request, id: &str) -> Result<Response, ApiError> {
    let (rec, by) = authorize(app, cfg, req, id, Takes::KeysAndUsers)?;
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
/// the cancel reached it; 503 `state_unavailable` when the database
/// failed while the cancel was handed on and still did at the deadline.
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
    // The database failed while the cancel was handed on: asked again
    // until it answers (the lease thread finishes a cancel it did).
    let mut unsure = false;
    loop {
        // A run between the queue and its start is not found for a moment:
        // ask again until its record says it has ended.
        if !accepted {
            match app.runner.cancel(&rec.run) {
                Cancel::NotActive => {}
                Cancel::Unsure => unsure = true,
                Cancel::Dequeued | Cancel::Stopping => {
                    accepted = true;
                    log::info!("run {} cancelled by {by}", rec.run);
                }
            }
        }
        let now = app.store.get(&rec.run).unwrap_or_else(|| rec.clone());
        if now.state.is_terminal() {
            let cancelled = (accepted || unsure) && now.state == RunState::Cancelled;
            return if cancelled { Ok(now) } else { Err(ended(&now)) };
        }
        if Instant::now() >= deadline {
            // Still stopping (202); or never found live, which only a run
            // stuck between the queue and its start could be.
            return match (accepted, unsure) {
                (true, _) => Ok(now),
                (false, true) => Err(ApiError::StateUnavailable),
                (false, false) => Err(ended(&now)),
            };
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `POST /api/runs/<id>/rerun`: start the run again, same function, same
/// values (`invoke::rerun`); async unless `run_async=false`.
///
/// # Errors
/// See [`authorize`]; `invalid_parameter`; those of `invoke::rerun::rerun`.
pub fn rerun(app: &App, cfg: &Arc<Config>, req: &Request, id: &str) -> Result<Response, ApiError> {
    let (rec, by) = authorize(app, cfg, req, id, Takes::KeysAndUsers)?;
    let run_async = match req.query_one("run_async")? {
        None => true,
        raw => invoke::parse_bool("run_async", raw)?,
    };
    reject_unknown(req, &["api_key", "run_async"])?;
    invoke::rerun::rerun(app, cfg, &rec, by, run_async)
}

/// `POST /api/runs/<id>/callbacks/<delivery>/redeliver`: send a callback
/// of the run again, as a new attempt (`callback::redeliver`).
///
/// # Errors
/// See [`authorize`]; `delivery_not_found`; 409 `run_not_ended` while the
/// delivery is not over; `busy`, `storage_unavailable`; 404 `not_found`
/// without a callback service (no state dir).
pub fn redeliver(
    app: &App,
    cfg: &Config,
    req: &Request,
    id: &str,
    delivery: &str,
) -> Result<Response, ApiError> {
    let (rec, by) = authorize(app, cfg, req, id, Takes::KeysAndUsers)?;
    reject_unknown(req, &["api_key"])?;
    let sent = redeliver_as(app, &rec, delivery, &by)?;
    let body = json!({
        "Success": "Callback queued for delivery.",
        "Run": rec.run,
        "Delivery": sent,
    });
    Ok(Response::json(202, &body).with_run(&rec.run))
}

/// Redeliver `delivery` of `rec` for `by`; the id of the delivery sent.
///
/// # Errors
/// As [`redeliver`].
pub fn redeliver_as(
    app: &App,
    rec: &RunRecord,
    delivery: &str,
    by: &Origin,
) -> Result<String, ApiError> {
    let service = app.runner.callbacks().ok_or(ApiError::DeliveryNotFound)?;
    let sent = service.redeliver(&rec.run, delivery)?;
    log::info!(
        "run {} callback {delivery} redelivered by {by} (as {sent})",
        rec.run
    );
    Ok(sent)
}

/// Refuse query parameters outside `known`, naming the first one.
///
/// # Errors
/// 400 `invalid_parameter` naming it, with the parameters `known`.
pub fn reject_unknown(req: &Request, known: &[&str]) -> Result<(), ApiError> {
    match req.query.iter().find(|(k, _)| !known.contains(&k.as_str())) {
        Some((k, _)) => Err(ApiError::InvalidParameter {
            name: k.clone(),
            msg: format!("Unknown parameter '{k}'. Accepted: {}.", known.join(", ")),
        }),
        None => Ok(()),
    }
}
