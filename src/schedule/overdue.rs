//! Overdue functions: `expect_every` on any function says a successful run
//! is expected at least that often, whoever starts it (a schedule, cron
//! outside calling `POST /api`, a sender's webhook). Computed when asked
//! (`/metrics`, `GET /api/overdue`) from the last success the runner noted
//! (`Metrics::succeeded`, seeded from the run log at start). One small
//! thread ([`watch`]) looks once a second, only to fire the callbacks
//! whose `on` has `overdue`: once per overdue spell (a success ends the
//! spell; the spells notified are not kept, so a function still overdue
//! after a restart is notified once more).

use std::collections::HashSet;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use crate::config::{Config, Program};

/// One function with `expect_every`, as of now.
#[derive(Debug, Clone)]
pub struct Expectation {
    /// Program id.
    pub program: u64,
    /// Function name.
    pub function: String,
    /// `expect_every`.
    pub every: Duration,
    /// Its last successful run's end, if one is known.
    pub last_success: Option<Timestamp>,
    /// No success within `every` of now (counted from trigd's start when
    /// none is known).
    pub overdue: bool,
}

/// Every function of `cfg` with `expect_every` whose program `visible`
/// lets through, as of `now`; `last` gives a function's last success,
/// `started` is when trigd started.
pub fn expectations(
    cfg: &Config,
    visible: impl Fn(&Program) -> bool,
    last: impl Fn(u64, &str) -> Option<Timestamp>,
    started: Timestamp,
    now: Timestamp,
) -> Vec<Expectation> {
    let mut out = Vec::new();
    for p in cfg.programs.values().filter(|p| visible(p)) {
        for f in &p.functions {
            let Some(every) = f.expect_every else {
                continue;
            };
            let last_success = last(p.id, &f.name);
            let since = last_success.unwrap_or(started);
            let every_signed = SignedDuration::try_from(every).unwrap_or(SignedDuration::MAX);
            let overdue = now.duration_since(since) > every_signed;
            out.push(Expectation {
                program: p.id,
                function: f.name.clone(),
                every,
                last_success,
                overdue,
            });
        }
    }
    out
}

/// The Prometheus lines of `list`: last success time and overdue 0/1.
pub fn prometheus(list: &[Expectation]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# HELP trigd_function_last_success_timestamp_seconds When a function with expect_every last finished a run successfully (0: none known).\n\
         # TYPE trigd_function_last_success_timestamp_seconds gauge"
    );
    for e in list {
        let t = e.last_success.map_or(0, |t| t.as_second());
        let (p, f) = (e.program, crate::http::metrics::label(&e.function));
        let _ = writeln!(
            s,
            "trigd_function_last_success_timestamp_seconds{{program=\"{p}\",function=\"{f}\"}} {t}"
        );
    }
    let _ = writeln!(
        s,
        "# HELP trigd_function_overdue 1 when a function with expect_every has not finished a run successfully within it.\n\
         # TYPE trigd_function_overdue gauge"
    );
    for e in list {
        let (p, f) = (e.program, crate::http::metrics::label(&e.function));
        let _ = writeln!(
            s,
            "trigd_function_overdue{{program=\"{p}\",function=\"{f}\"}} {}",
            u8::from(e.overdue)
        );
    }
    s
}

/// How often [`watch`] looks.
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// Start the thread that fires the `overdue` callbacks of functions with
/// `expect_every` when they become overdue.
///
/// # Errors
/// The thread cannot be started.
pub fn watch(app: &Arc<crate::http::app::App>) -> std::io::Result<()> {
    let app = Arc::clone(app);
    std::thread::Builder::new()
        .name("overdue".into())
        .spawn(move || {
            let mut notified = HashSet::new();
            while !app.closing.load(std::sync::atomic::Ordering::Relaxed) {
                look(&app, &mut notified);
                std::thread::sleep(WATCH_EVERY);
            }
        })
        .map(|_| ())
}

/// One look: fire the callback of each function that became overdue since
/// the last look (`notified` holds those told, until their next success).
fn look(app: &crate::http::app::App, notified: &mut HashSet<(u64, String)>) {
    let cfg = app.config();
    let Some(service) = app.runner.callbacks() else {
        return;
    };
    let metrics = &app.runner.metrics;
    let last = |p: u64, f: &str| metrics.last_success(p, f);
    let now = Timestamp::now();
    for e in expectations(&cfg, |_| true, last, app.schedules.started, now) {
        let id = (e.program, e.function.clone());
        if !e.overdue {
            notified.remove(&id);
            continue;
        }
        if notified.contains(&id) {
            continue;
        }
        notified.insert(id);
        let callback = cfg
            .program(e.program)
            .and_then(|p| p.function(&e.function))
            .and_then(|f| f.callback.clone());
        if let Some(cb) =
            callback.filter(|c| c.on.contains(&crate::state::delivery::Outcome::Overdue))
        {
            let every = humantime::format_duration(e.every).to_string();
            let last = e.last_success.map(|t| format!("{t:.3}"));
            service.overdue(&cb, (e.program, &e.function), &every, last.as_deref());
        }
    }
}
