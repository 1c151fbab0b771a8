//! A run request with an `Idempotency-Key`: the key is claimed before the
//! run starts, so that however often (and however concurrently) the same
//! request is repeated, one run starts; a repeat is answered with that
//! original run — its result once it ended (a sync caller waits for the
//! end, as it would have), else its id and state.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::http::app::App;
use crate::http::{ApiError, Response};
use crate::runner::Job;
use crate::runs::idempotency::{self, Claim, Policy};
use crate::state::record::{RunRecord, RunState};

/// The response header marking an answer to a repeat.
pub use crate::http::REPLAYED;

/// Start `job` once per `key` of its caller (with `start`, which starts
/// a run now); see the module docs. `request` is the request's
/// [`idempotency::fingerprint`], taken before the run may wait for a slot
/// (so that what it was made of, a hook's file contents say, need not be
/// held while it waits).
///
/// # Errors
/// `idempotency_key_reused` for the key of another request; `busy` when
/// the original did not settle in time; the errors of `start`.
pub fn start_once(
    app: &App,
    key: &str,
    mut job: Job,
    run_async: bool,
    request: idempotency::Hash,
    start: impl FnOnce(Job) -> Result<Response, ApiError>,
) -> Result<Response, ApiError> {
    let server = &job.cfg.server;
    let policy = Policy {
        window: server.idempotency_window,
        max_keys: server.idempotency_max_keys,
        instance: &server.instance,
    };
    let deadline = Instant::now() + wait_bound(&job);
    let scope = job.by.to_string();
    loop {
        let known = |id: &str| app.store.owner_of(id).is_some();
        match app.idempotency.claim(policy, &scope, key, request, known)? {
            Claim::New(held) => {
                job.id = Some(held.run.clone());
                let answer = start(job);
                if let Some((run, first)) = held.lost() {
                    return lost_to(
                        app,
                        (&scope, key),
                        (&run, &first),
                        request,
                        run_async,
                        deadline,
                    );
                }
                if ran(&answer) {
                    held.keep();
                }
                return answer;
            }
            Claim::Repeat(run) => {
                if let Some(answer) = repeat(app, (&scope, key), &run, run_async, deadline) {
                    return replayed(answer, &run);
                }
            }
        }
        if Instant::now() >= deadline {
            return Err(still_waiting());
        }
    }
}

/// The answer when another request (with the database: perhaps on another
/// instance) claimed the key between our claim and our run's record: a
/// repeat of its run `run`, made for the request of hash `first` (hex).
fn lost_to(
    app: &App,
    key: (&str, &str),
    (run, first): (&str, &str),
    request: idempotency::Hash,
    run_async: bool,
    deadline: Instant,
) -> Result<Response, ApiError> {
    if hex::encode(request) != first {
        return Err(ApiError::IdempotencyMismatch);
    }
    match repeat(app, key, run, run_async, deadline) {
        Some(answer) => replayed(answer, run),
        None => Err(still_waiting()),
    }
}

/// The answer to a repeat: the original run's, marked
/// `Idempotent-Replayed: true` (its error too: [`ApiError::Replayed`]).
fn replayed(answer: Result<Response, ApiError>, run: &str) -> Result<Response, ApiError> {
    answer
        .map(|r| r.with_header(REPLAYED, "true").with_run(run))
        .map_err(|e| match e {
            // The original's end, as its caller got it; not a refusal of
            // this request (`busy`, `run_not_found`).
            e @ (ApiError::RunFailed { .. }
            | ApiError::RunTimeout { .. }
            | ApiError::RunInterrupted { .. }
            | ApiError::RunCancelled { .. }
            | ApiError::RunSuperseded { .. }
            | ApiError::RunSkipped { .. }) => ApiError::Replayed(Box::new(e)),
            e => e,
        })
}

/// How long a repeat may wait for the original: its wait for a slot, its
/// timeout and kill grace, and some slack.
fn wait_bound(job: &Job) -> Duration {
    let timeout = job
        .program
        .function(&job.function)
        .map_or(job.cfg.server.run_timeout, |f| f.timeout);
    job.cfg.server.queue_timeout + timeout + job.cfg.server.kill_grace + Duration::from_secs(5)
}

/// Whether a run was started for this answer (then the key stays).
fn ran(answer: &Result<Response, ApiError>) -> bool {
    answer
        .as_ref()
        .map_or_else(ApiError::is_run_outcome, |_| true)
}

fn still_waiting() -> ApiError {
    ApiError::Busy {
        retry_after: 5,
        msg: "The first request with this Idempotency-Key is still running or waiting for a \
              slot. Retry after Retry-After seconds."
            .into(),
    }
}

/// The answer to a repeat of the request that claimed `run`; `None` when
/// that request was refused and gave the key back (claim it again).
fn repeat(
    app: &App,
    (scope, key): (&str, &str),
    run: &str,
    run_async: bool,
    deadline: Instant,
) -> Option<Result<Response, ApiError>> {
    // Wait until the original is recorded, or gives the key back.
    while app.store.owner_of(run).is_none() {
        match app
            .idempotency
            .pending(scope, key, run, Duration::from_millis(50))
        {
            None => return None,
            // Started long ago, and dropped from the run log since
            // (`run_retention`): it is not run again.
            Some(false) if app.store.owner_of(run).is_none() => {
                return Some(Err(ApiError::RunNotFound))
            }
            Some(_) if Instant::now() >= deadline => return Some(Err(still_waiting())),
            Some(_) => {}
        }
    }
    loop {
        let Some(rec) = app.store.get(run) else {
            return Some(Err(ApiError::RunNotFound));
        };
        if rec.state.is_terminal() {
            return Some(ended(rec));
        }
        if run_async {
            let body = json!({"Success": "Program started.", "Run": run, "State": rec.state});
            return Some(Ok(Response::json(200, &body)));
        }
        if Instant::now() >= deadline {
            return Some(Err(still_waiting()));
        }
        app.runner.wait_for_an_end(Duration::from_millis(100));
    }
}

/// The answer of an ended run, as its sync caller got it.
fn ended(rec: RunRecord) -> Result<Response, ApiError> {
    let run = rec.run;
    match rec.state {
        RunState::Finished => {
            let body = json!({"Success": "Program finished.", "Result": rec.result, "Run": run});
            Ok(Response::json(200, &body))
        }
        RunState::TimedOut => Err(ApiError::RunTimeout { run }),
        RunState::Interrupted => Err(ApiError::RunInterrupted { run }),
        RunState::Cancelled => Err(ApiError::RunCancelled { run }),
        RunState::Superseded => Err(ApiError::RunSuperseded {
            run,
            by: rec.superseded_by.unwrap_or_default(),
        }),
        RunState::Skipped if rec.group.is_some() => Err(ApiError::RunSkipped {
            run,
            group: rec.group.unwrap_or_default(),
        }),
        // A sync original that gave up waiting for a slot (it was
        // answered `busy` and gives its key back): retry.
        RunState::Failed if rec.started_at.is_none() => Err(ApiError::Busy {
            retry_after: 1,
            msg: "The first request with this Idempotency-Key was not run: no slot came free in \
                  time. Retry after Retry-After seconds."
                .into(),
        }),
        _ => {
            let last = rec.steps.last();
            Err(ApiError::RunFailed {
                step: rec.steps.len().saturating_sub(1),
                exit_code: last.and_then(|s| s.exit_code),
                signal: last.and_then(|s| s.signal),
                // `Error` for a run recorded before `Stderr` was kept.
                stderr: rec.stderr.or(rec.error).unwrap_or_default(),
                stdout: rec.stdout.unwrap_or_default(),
                run,
            })
        }
    }
}
