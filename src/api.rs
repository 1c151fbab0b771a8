//! The run endpoint `POST /api` and the run status `GET /api/runs/<id>`.
//!
//! [`run`] reads top to bottom in the order of the SPEC §3.3 table: one
//! check per line, each returning its error with `?`, so authentication
//! happens before anything that could reveal whether a program exists.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::app::App;
use crate::cluster;
use crate::config::{Config, Function, Program, Server};
use crate::http::{ApiError, Request, Response};
use crate::idempotency;
use crate::ratelimit;
use crate::runner::step::{Outcome, StepError};
use crate::runner::{Job, RunError};

/// The query parameters `POST /api` accepts (the seed's names).
const PARAMS: [&str; 5] = [
    "api_key",
    "program_id",
    "variables",
    "function",
    "run_async",
];

/// `POST /api`: run a program's triggered function, sync or async.
///
/// # Errors
/// Every row of SPEC §3.3, in its order.
pub fn run(app: &App, cfg: &Arc<Config>, req: &Request) -> Result<Response, ApiError> {
    if req.method != "POST" {
        return Err(ApiError::MethodNotAllowed {
            allow: vec!["POST"],
        });
    }
    let key = ratelimit::api_key(app, cfg, req)?;
    reject_body(req)?;
    let program = program_param(cfg, req.query_one("program_id")?)?;
    if !key.may_access(program) {
        return Err(ApiError::ProgramNotFound);
    }
    let function = select_function(program, req.query_one("function")?)?;
    let values: Vec<String> = req.query_all("variables").map(str::to_string).collect();
    check_values(&cfg.server, function.inputs(), &values)?;
    let run_async = parse_bool("run_async", req.query_one("run_async")?)?;
    reject_unknown(req, &PARAMS)?;
    let job = Job {
        cfg: Arc::clone(cfg),
        program: Arc::clone(program),
        function: function.name.clone(),
        values,
        vars: Default::default(),
        by: format!("api_key:{}", key.name),
        id: None,
    };
    let origin = format!("api/{}", program.id);
    start(app, req, job, run_async, &origin)
}

/// Start `job` sync or async and build the seed's response object. Shared
/// by `/api` and the generated tool endpoints; `origin` names the entry
/// point for the idempotency fingerprint. A request with an
/// `Idempotency-Key` goes through [`crate::replay::start_once`].
///
/// # Errors
/// `busy`, `disk_full`, `storage_unavailable`, `shutting_down`,
/// `idempotency_key_reused`, and for sync runs `run_failed`,
/// `run_timeout`, `run_interrupted`.
pub fn start(
    app: &App,
    req: &Request,
    job: Job,
    run_async: bool,
    origin: &str,
) -> Result<Response, ApiError> {
    match idempotency::key_of(req)? {
        Some(key) => crate::replay::start_once(app, key, job, run_async, origin, |job| {
            start_now(app, job, run_async)
        }),
        None => start_now(app, job, run_async),
    }
}

/// Start `job` now (no idempotency key).
fn start_now(app: &App, job: Job, run_async: bool) -> Result<Response, ApiError> {
    if run_async {
        let id = app.runner.start_async(job).map_err(run_error)?;
        let body = json!({"Success": "Program started.", "Run": id});
        return Ok(Response::json(200, &body).with_run(&id));
    }
    let (id, outcome) = app.runner.run_sync(job).map_err(run_error)?;
    let body = finished_body(&id, outcome)?;
    Ok(Response::json(200, &body).with_run(&id))
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

fn run_error(e: RunError) -> ApiError {
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
    }
}

/// A duration as written in the config: `300ms`, `30s`.
fn humanize(d: std::time::Duration) -> String {
    match d.subsec_millis() {
        0 => format!("{}s", d.as_secs()),
        _ => format!("{}ms", d.as_millis()),
    }
}

/// Parse `program_id` and find the program.
fn program_param<'a>(cfg: &'a Config, raw: Option<&str>) -> Result<&'a Arc<Program>, ApiError> {
    let id: u64 = raw
        .and_then(|s| s.trim().parse().ok())
        .ok_or(ApiError::InvalidProgramId)?;
    cfg.program(id).ok_or(ApiError::ProgramNotFound)
}

/// Choose the function: the named one (which must have an active webhook
/// trigger), or the only triggered one.
pub fn select_function<'a>(p: &'a Program, name: Option<&str>) -> Result<&'a Function, ApiError> {
    let triggered = || p.triggered().map(|f| f.name.clone()).collect::<Vec<_>>();
    if let Some(name) = name {
        let f = p.function(name).ok_or_else(|| ApiError::FunctionNotFound {
            name: name.to_string(),
            functions: triggered(),
        })?;
        return match &f.webhook {
            Some(w) if w.active => Ok(f),
            _ => Err(ApiError::TriggerInactive {
                name: name.to_string(),
            }),
        };
    }
    let mut it = p.triggered();
    match (it.next(), it.next()) {
        (Some(f), None) => Ok(f),
        (Some(_), Some(_)) => Err(ApiError::FunctionRequired {
            functions: triggered(),
        }),
        (None, _) => Err(ApiError::NoActiveTrigger),
    }
}

/// Check the values against the outputs and the size limits.
///
/// # Errors
/// `variables_mismatch` for a wrong count, `invalid_parameter` for a value
/// over `max_variable_bytes` or more than `max_variables` values.
pub fn check_values(
    server: &Server,
    outputs: &[String],
    values: &[String],
) -> Result<(), ApiError> {
    if values.len() != outputs.len() {
        return Err(ApiError::VariablesMismatch {
            outputs: outputs.to_vec(),
            got: values.len(),
        });
    }
    if values.len() > server.max_variables {
        return Err(ApiError::InvalidParameter {
            name: "variables".into(),
            msg: format!("At most {} variables are accepted.", server.max_variables),
        });
    }
    if let Some((i, _)) = values
        .iter()
        .enumerate()
        .find(|(_, v)| v.len() > server.max_variable_bytes)
    {
        return Err(ApiError::InvalidParameter {
            name: "variables".into(),
            msg: format!(
                "Value {} (output '{}') is longer than the limit of {} bytes.",
                i + 1,
                outputs[i],
                server.max_variable_bytes
            ),
        });
    }
    // A NUL byte cannot be passed in an argument or an environment
    // variable: refuse it here rather than fail the run.
    if let Some(i) = values.iter().position(|v| v.contains('\0')) {
        return Err(ApiError::InvalidParameter {
            name: "variables".into(),
            msg: format!(
                "Value {} (output '{}') contains a NUL byte, which a program cannot receive.",
                i + 1,
                outputs[i]
            ),
        });
    }
    Ok(())
}

/// Parse a boolean parameter: `true`, `True`, `1` / `false`, `False`, `0`;
/// absent is false.
///
/// # Errors
/// `invalid_parameter` for anything else.
pub fn parse_bool(name: &str, raw: Option<&str>) -> Result<bool, ApiError> {
    match raw {
        None | Some("false" | "False" | "0") => Ok(false),
        Some("true" | "True" | "1") => Ok(true),
        Some(other) => Err(ApiError::InvalidParameter {
            name: name.to_string(),
            msg: format!("{name} must be true, True, 1, false, False or 0; got '{other}'."),
        }),
    }
}

/// Refuse a request body: `POST /api` reads everything from the query
/// string, and a body silently ignored would surface as an unrelated error.
fn reject_body(req: &Request) -> Result<(), ApiError> {
    if req.body.is_empty() {
        return Ok(());
    }
    Err(ApiError::InvalidParameter {
        name: "body".into(),
        msg: format!(
            "POST /api takes no request body (got {} bytes): send program_id, function, \
             run_async and one variables=<value> per output as query parameters, with an \
             empty body. A JSON body of values is accepted by the tool endpoints \
             (/tools/<tool>/<environment>/<trigger>).",
            req.body.len()
        ),
    })
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

/// `GET /api/runs/<id>`: a run's record, for a key that may access its
/// program.
///
/// # Errors
/// 429 `rate_limited`, 401 for a missing or invalid key; `run_not_found` otherwise, also for a
/// run of a program outside the key's scope.
pub fn run_status(app: &App, cfg: &Config, req: &Request, id: &str) -> Result<Response, ApiError> {
    let key = ratelimit::api_key(app, cfg, req)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans_follow_the_seed() {
        for t in ["true", "True", "1"] {
            assert!(parse_bool("run_async", Some(t)).unwrap());
        }
        for f in ["false", "False", "0"] {
            assert!(!parse_bool("run_async", Some(f)).unwrap());
        }
        assert!(!parse_bool("run_async", None).unwrap());
        assert_eq!(
            parse_bool("run_async", Some("yes")).unwrap_err().code(),
            "invalid_parameter"
        );
    }

    #[test]
    fn unknown_parameter_is_named() {
        let r = Request::new("POST", "/api?api_key=k&color=red").unwrap();
        match reject_unknown(&r, &PARAMS).unwrap_err() {
            ApiError::InvalidParameter { name, .. } => assert_eq!(name, "color"),
            e => panic!("{e:?}"),
        }
    }
}
