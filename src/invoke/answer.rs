//! Start a run and answer in the run endpoint's JSON: `{"Success":
//! "Program started.", "Run"}` for async runs, `{"Success": "Program
//! finished.", "Result", "Run"}` for sync ones, or the error of a failed
//! run.

use serde_json::{json, Value};

use std::sync::mpsc;
use std::thread;

use crate::http::app::App;
use crate::http::{ApiError, Response};
use crate::runner::step::{Outcome, StepError};
use crate::runner::{Job, RunError, SyncRun};
use crate::runs::follow::{events, shared, End, Follower, InRecord, Live};

/// Start `job` sync or async and build the response object.
///
/// # Errors
/// `busy`, `disk_full`, `storage_unavailable`, `shutting_down`, and for sync runs
/// `run_failed`, `run_timeout`, `run_interrupted`, `run_cancelled`.
pub fn start(app: &App, job: Job, run_async: bool) -> Result<Response, ApiError> {
    if run_async {
        let id = app.runner.start_async(job).map_err(run_error)?;
        let body = json!({"Success": "Program started.", "Run": id});
        return Ok(Response::json(200, &body).with_run(&id));
    }
    let (id, outcome) = app.runner.run_sync(job).map_err(run_error)?;
    let body = finished_body(&id, outcome)?;
    Ok(Response::json(200, &body).with_run(&id))
}

/// Start `job` as a sync run on a thread of its own and answer with its
/// output as events (`follow.rs`), ending with the object the sync call
/// would have answered, success or error. A run that waits for a slot
/// does so before the answer starts.
///
/// # Errors
/// `busy`, `disk_full`, `storage_unavailable`, `shutting_down` and
/// `run_cancelled` (cancelled while it waited) as for a sync run, before
/// anything is sent.
pub fn start_streamed(app: &App, job: Job) -> Result<Response, ApiError> {
    let (run_tx, run_rx) = mpsc::channel::<SyncRun>();
    let (tx, rx) = mpsc::channel();
    // The thread exists before the run takes a slot: a run never holds a
    // slot with nobody to execute it.
    thread::Builder::new()
        .name("run".into())
        .spawn(move || {
            if let Ok(run) = run_rx.recv() {
                let _ = tx.send(run.execute());
            }
        })
        .map_err(|e| {
            log::error!("cannot start a run thread: {e}");
            ApiError::Internal
        })?;
    let run = app.runner.begin_sync(job).map_err(run_error)?;
    let id = run.id().to_string();
    let path = app.store.output_path(&id);
    if run_tx.send(run).is_err() {
        return Err(ApiError::Internal);
    }
    let run = id.clone();
    let end: End = Box::new(move || match rx.try_recv() {
        Ok(outcome) => Some(shared(&final_object(&run, outcome))),
        Err(mpsc::TryRecvError::Empty) => None,
        Err(mpsc::TryRecvError::Disconnected) => {
            Some(shared(&Response::from(ApiError::Internal).json_body()))
        }
    });
    let runner = std::sync::Arc::clone(&app.runner);
    let run = id.clone();
    let live: Live = Box::new(move || runner.handle(&run));
    let store = std::sync::Arc::clone(&app.store);
    let run = id.clone();
    let in_record: InRecord = Box::new(move || store.inline_output(&run));
    Ok(events(Follower::new(path, end, live, in_record)).with_run(&id))
}

/// The final object of a streamed sync call: the body the sync call
/// would have answered, success or error.
fn final_object(id: &str, outcome: Outcome) -> Value {
    match finished_body(id, outcome) {
        Ok(v) => v,
        Err(e) => Response::from(e).json_body(),
    }
}

/// The sync response body for a finished run, or the error for a failed one.
///
/// # Errors
/// `run_failed`, `run_timeout` or `run_interrupted` from the outcome.
pub fn finished_body(id: &str, outcome: Outcome) -> Result<Value, ApiError> {
    let run = id.to_string();
    match outcome.error {
        None => Ok(json!({"Success": "Program finished.", "Result": outcome.result, "Run": id})),
        Some(StepError::TimedOut { .. }) => Err(ApiError::RunTimeout { run }),
        Some(StepError::Aborted { .. }) => Err(ApiError::RunInterrupted { run }),
        Some(StepError::Cancelled { .. }) => Err(ApiError::RunCancelled { run }),
        Some(StepError::Spawn { step, message }) => Err(ApiError::RunFailed {
            run,
            step,
            exit_code: None,
            signal: None,
            stderr: message,
            stdout: String::new(),
        }),
        Some(StepError::Failed {
            step,
            exit_code,
            signal,
            stderr_tail,
            stdout_tail,
        }) => Err(ApiError::RunFailed {
            run,
            step,
            exit_code,
            signal,
            stderr: stderr_tail,
            stdout: stdout_tail,
        }),
    }
}

/// The answer to a run that was not started.
pub fn run_error(e: RunError) -> ApiError {
    match e {
        RunError::QueueFull {
            queued,
            retry_after,
        } => ApiError::Busy {
            retry_after,
            msg: format!(
                "All run slots are in use and the queue is full ({queued} runs). Retry after \
                 Retry-After seconds."
            ),
        },
        RunError::WaitingBytesFull {
            budget,
            retry_after,
        } => ApiError::Busy {
            retry_after,
            msg: format!(
                "All run slots are in use and the runs waiting for one hold the most values \
                 allowed ({budget} bytes, max_waiting_bytes). Retry after Retry-After seconds."
            ),
        },
        RunError::WaitedTooLong {
            waited,
            waiting,
            retry_after,
        } => ApiError::Busy {
            retry_after,
            msg: format!(
                "No run slot came free within queue_timeout ({}); {waiting} runs are waiting. \
                 Retry after Retry-After seconds.",
                humanize(waited)
            ),
        },
        RunError::Storage(err) => ApiError::storage(&err),
        RunError::ShuttingDown => ApiError::ShuttingDown,
        RunError::Cancelled { run } => ApiError::RunCancelled { run },
        RunError::Superseded { run, by } => ApiError::RunSuperseded { run, by },
        RunError::Skipped { run, group } => ApiError::RunSkipped { run, group },
    }
}

/// A duration as written in the config: `300ms`, `30s`.
fn humanize(d: std::time::Duration) -> String {
    match d.subsec_millis() {
        0 => format!("{}s", d.as_secs()),
        _ => format!("{}ms", d.as_millis()),
    }
}
