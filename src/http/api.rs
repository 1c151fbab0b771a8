//! The run endpoint `POST /api`, the run status `GET /api/runs/<id>` and
//! the schedules `GET /api/schedules`.
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

/// `GET /api/runs/<id>`: a run's record, for an API key or a workspace
/// member that may see it, as the list, the output and the cancel take
/// them (`runs::authorize`: authenticated before the run is looked up).
///
/// # Errors
/// 429 `rate_limited`, 401 for a missing or invalid key; `run_not_found`
/// otherwise, also for a run outside the key's scope; 421
/// `run_on_other_instance`.
pub fn run_status(app: &App, cfg: &Config, req: &Request, id: &str) -> Result<Response, ApiError> {
    let (rec, _) = runs::authorize(app, cfg, req, id, Takes::KeysAndUsers)?;
    let body = serde_json::to_value(rec.public()).map_err(|_| ApiError::Internal)?;
    Ok(Response::json(200, &body))
}

/// One schedule as `GET /api/schedules` and the schedules page show it.
#[derive(Debug, Clone)]
pub struct ScheduleRow {
    /// `<program>/<function>/<name>`.
    pub id: String,
    /// Program id.
    pub program: u64,
    /// Program name.
    pub program_name: String,
    /// Function name.
    pub function: String,
    /// The schedule's name.
    pub name: String,
    /// Its cron expression as written.
    pub cron: String,
    /// Its IANA time zone.
    pub timezone: String,
    /// `active`.
    pub active: bool,
    /// Whether this instance fires schedules (`[server] schedules`).
    pub fires: bool,
    /// The last occurrence handled.
    pub last_at: Option<jiff::Timestamp>,
    /// What became of it: `started <run>` or `skipped: <why>`.
    pub last_outcome: Option<String>,
    /// The next occurrence (before jitter).
    pub next_at: Option<jiff::Timestamp>,
    /// `next_at` as wall-clock time in the schedule's zone ([`local`]).
    pub next_local: Option<String>,
}

impl ScheduleRow {
    /// The run the last occurrence started, if it started one.
    pub fn last_run(&self) -> Option<&str> {
        self.last_outcome.as_deref()?.strip_prefix("started ")
    }
}

/// Every schedule of the programs `visible` lets through, in program,
/// function and schedule order, as of now.
pub fn schedule_rows(
    app: &App,
    cfg: &Config,
    visible: impl Fn(&crate::config::Program) -> bool,
) -> Vec<ScheduleRow> {
    let now = jiff::Timestamp::now();
    let status = app
        .schedules
        .status
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    crate::schedule::timer::schedules(cfg)
        .filter(|(_, p, _, _)| visible(p))
        .map(|(id, p, f, s)| {
            let seen = status.get(id.as_str());
            let next = s.cron.next_after(now, &s.zone);
            ScheduleRow {
                program: p.id,
                program_name: p.name.clone(),
                function: f.to_string(),
                name: s.name.clone(),
                cron: s.expression.clone(),
                timezone: s.zone_name.clone(),
                active: s.active,
                fires: cfg.server.fire_schedules,
                last_at: seen.and_then(|x| x.last),
                last_outcome: seen.map(|x| x.outcome.clone()).filter(|o| !o.is_empty()),
                next_at: next,
                next_local: next.map(|t| local(t, &s.zone)),
                id,
            }
        })
        .collect()
}

/// `GET /api/schedules`: every schedule of the programs the API key may
/// reach, with its settings, its last occurrence and what became of it,
/// and its next occurrence.
///
/// # Errors
/// 429 `rate_limited`, 401 for a missing or invalid key; 400
/// `invalid_parameter` for any parameter but `api_key`.
pub fn schedules(app: &App, cfg: &Config, req: &Request) -> Result<Response, ApiError> {
    let key = app.access.api_key(cfg, req)?;
    crate::runs::reject_unknown(req, &["api_key"])?;
    let list: Vec<serde_json::Value> = schedule_rows(app, cfg, |p| key.may_access(p))
        .into_iter()
        .map(|r| {
            serde_json::json!({
                "Id": r.id,
                "Program": r.program,
                "Function": r.function,
                "Name": r.name,
                "Cron": r.cron,
                "Timezone": r.timezone,
                "Active": r.active,
                "Fires": r.fires,
                "LastAt": r.last_at.map(|t| format!("{t:.3}")),
                "LastOutcome": r.last_outcome,
                "NextAt": r.next_at.map(|t| format!("{t:.3}")),
                "NextLocal": r.next_local,
            })
        })
        .collect();
    Ok(Response::json(
        200,
        &serde_json::json!({ "Schedules": list }),
    ))
}

/// `t` as wall-clock time in `zone`, with its offset:
/// `2026-03-08 03:00:00 -04:00`. Written out by hand, so that jiff's
/// `strftime` (a whole format language) stays out of the binary.
pub fn local(t: jiff::Timestamp, zone: &jiff::tz::TimeZone) -> String {
    let offset = zone.to_offset(t);
    let z = offset.to_datetime(t);
    let off = offset.seconds();
    let (sign, off) = if off < 0 { ('-', -off) } else { ('+', off) };
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02} {sign}{:02}:{:02}",
        z.year(),
        z.month(),
        z.day(),
        z.hour(),
        z.minute(),
        z.second(),
        off / 3600,
        off / 60 % 60
    )
}

/// The functions with `expect_every` of programs `visible` lets through,
/// as of now.
pub fn expectations(
    app: &App,
    cfg: &Config,
    visible: impl Fn(&crate::config::Program) -> bool,
) -> Vec<crate::schedule::overdue::Expectation> {
    let metrics = &app.runner.metrics;
    crate::schedule::overdue::expectations(
        cfg,
        visible,
        |p, f| metrics.last_success(p, f),
        app.schedules.started,
        jiff::Timestamp::now(),
    )
}

/// `GET /api/overdue`: every function with `expect_every` of the programs
/// the API key may reach, with its last success and whether it is overdue.
///
/// # Errors
/// 429 `rate_limited`, 401 for a missing or invalid key; 400
/// `invalid_parameter` for any parameter but `api_key`.
pub fn overdue(app: &App, cfg: &Config, req: &Request) -> Result<Response, ApiError> {
    let key = app.access.api_key(cfg, req)?;
    crate::runs::reject_unknown(req, &["api_key"])?;
    let list: Vec<serde_json::Value> = expectations(app, cfg, |p| key.may_access(p))
        .into_iter()
        .map(|e| {
            serde_json::json!({
                "Program": e.program,
                "Function": e.function,
                "ExpectEverySeconds": e.every.as_secs(),
                "LastSuccessAt": e.last_success.map(|t| format!("{t:.3}")),
                "Overdue": e.overdue,
            })
        })
        .collect();
    Ok(Response::json(
        200,
        &serde_json::json!({ "Functions": list }),
    ))
}
