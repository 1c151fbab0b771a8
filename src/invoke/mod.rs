//! One path for every request that starts a run. An [`Endpoint`] (compiled
//! at config load) says what a request needs; [`invoke`] takes the request
//! through it, one step per line:
//!
//! credentials → method → signature → function → rule → values → start → answer
//!
//! The receive steps (signature, rule, sourced values, answer shape) are
//! in `webhook.rs`; for an endpoint without receive settings they do
//! nothing.
//!
//! With an `Idempotency-Key`, "start" goes through `replay::start_once`:
//! at most one run per key, repeats answered with the original run.
//!
//! `api.rs` (`POST /api`) and `tools.rs` (generated endpoints) are thin
//! adapters that find the endpoint and call [`invoke`]; the same fault gets
//! the same error on every path. `values.rs` reads and checks the values,
//! `answer.rs` starts the run and shapes the answer.
//!
//! `hooks.rs` is the entry kind of adnanh/webhook hooks files: the same
//! receive steps (sources, rule leaves, signature checks of `receive`), read
//! the way webhook reads a request, the run put together by [`job`], and
//! webhook's answer shape (its statuses and texts).

mod answer;
pub mod hooks;
mod values;
mod webhook;

use std::collections::BTreeMap;
use std::sync::Arc;

pub use answer::{finished_body, run_error};
pub use values::check_values;
#[cfg(fuzzing)] // fuzz/src/lib.rs
pub use values::named_values;

use crate::access::Member;
use crate::app::App;
use crate::config::{ApiKey, Config, Credentials, Endpoint, Function, Program, Target, Values};
use crate::http::{ApiError, Request, Response};
use crate::idempotency;
use crate::replay;
use crate::runner::Job;
use crate::store::Origin;

/// Who is calling, once their credentials are checked.
pub enum Caller<'a> {
    /// An API key of the run endpoint.
    ApiKey(&'a ApiKey),
    /// A member of the endpoint's workspace.
    Member(Member),
    /// Anyone (a public endpoint).
    Public,
}

impl Caller<'_> {
    /// Who started a run made by this caller.
    pub fn origin(&self) -> Origin {
        match self {
            Caller::ApiKey(k) => Origin::ApiKey(k.name.clone()),
            Caller::Member(m) => m.origin(),
            Caller::Public => Origin::Public,
        }
    }
}

/// Take `req` through `endpoint`: check the credentials and the method,
/// find the function, read and check the values, start the run (sync or
/// async, `run_async`) and answer with the run endpoint's JSON, shaped by
/// the endpoint's receive settings (`webhook::answer`).
///
/// # Errors
/// Every error of the steps, in this order: credentials (see `access`),
/// `method_not_allowed`, the signature (`signature_*`), a body where none
/// is read (`invalid_parameter`), the function (`invalid_program_id`,
/// `program_not_found`, `function_not_found`, …), the rule (`Ignored`),
/// the values (`invalid_payload`, `unsupported_media_type`,
/// `variables_mismatch`, `invalid_parameter`), `run_async`, a bad or
/// reused `Idempotency-Key` (`invalid_parameter`,
/// `idempotency_key_reused`), and the run.
pub fn invoke(
    app: &App,
    cfg: &Arc<Config>,
    req: &Request,
    endpoint: &Endpoint,
) -> Result<Response, ApiError> {
    let result = steps(app, cfg, req, endpoint);
    webhook::answer(app, endpoint, result)
}

/// The steps of [`invoke`] up to the run's answer.
fn steps(
    app: &App,
    cfg: &Arc<Config>,
    req: &Request,
    endpoint: &Endpoint,
) -> Result<Response, ApiError> {
    let caller = authenticate(app, cfg, req, &endpoint.credentials)?;
    if req.method != endpoint.method {
        let allow = vec![endpoint.method.as_str()];
        return Err(ApiError::MethodNotAllowed { allow });
    }
    let rcv = &endpoint.receive;
    webhook::verify(app, cfg, rcv, req)?;
    values::reject_body(req, endpoint.values)?;
    let (program, function) = target(cfg, req, &endpoint.target, &caller)?;
    let mut inc = webhook::incoming(cfg, req);
    webhook::rule(rcv, &inc)?;
    let body_file = webhook::body_file(cfg, rcv, req)?;
    inc.body_file = body_file.as_ref().map(|f| f.path().to_path_buf());
    let values = match webhook::values(rcv, &inc, req, function.inputs())? {
        Some(values) => values,
        None => values::read(req, endpoint.values, function.inputs())?,
    };
    check_values(&cfg.server, endpoint.values, function.inputs(), &values)?;
    let run_async = match req.query_one("run_async")? {
        None => rcv.answer.run_async,
        raw => parse_bool("run_async", raw)?,
    };
    // The run endpoint may stream a sync run's output (`answer.rs`).
    let mut stream = false;
    if endpoint.values == Values::Positional {
        stream = parse_bool("stream", req.query_one("stream")?)? || wants_events(req);
        values::reject_unknown(req)?;
    }
    let origin = caller.origin();
    let mut job = job(cfg, program, function, values, &endpoint.vars, origin);
    job.body_file = body_file;
    job.stdin_body = rcv.stdin_body;
    job.tool = endpoint
        .trigger
        .as_ref()
        .map(|t| format!("{}/{}", t.tool, t.environment));
    let start = |job| {
        if stream && !run_async {
            answer::start_streamed(app, job)
        } else {
            answer::start(app, job, run_async)
        }
    };
    match idempotency::key_of(req)? {
        Some(key) => {
            let entry = format!("{}#{}", req.segments.join("/"), program.id);
            replay::start_once(app, key, job, run_async, &entry, start)
        }
        None => start(job),
    }
}

/// Check the credentials an endpoint takes.
///
/// # Errors
/// Those of `Access::api_key` or `Access::member`.
pub fn authenticate<'c>(
    app: &App,
    cfg: &'c Config,
    req: &Request,
    credentials: &Credentials,
) -> Result<Caller<'c>, ApiError> {
    Ok(match credentials {
        Credentials::ApiKey => Caller::ApiKey(app.access.api_key(cfg, req)?),
        Credentials::Member { workspace } => {
            Caller::Member(app.access.member(cfg, req, workspace)?)
        }
        Credentials::Public => Caller::Public,
    })
}

/// The program and function an endpoint runs for this request.
fn target<'c>(
    cfg: &'c Config,
    req: &Request,
    target: &Target,
    caller: &Caller,
) -> Result<(&'c Arc<Program>, &'c Function), ApiError> {
    match target {
        Target::Fixed { program, function } => {
            let p = cfg.program(*program).ok_or(ApiError::NotFound)?;
            let f = p.function(function).ok_or(ApiError::NotFound)?;
            Ok((p, f))
        }
        Target::Chosen => {
            let p = program_param(cfg, req.query_one("program_id")?)?;
            if let Caller::ApiKey(key) = caller {
                if !key.may_access(p) {
                    return Err(ApiError::ProgramNotFound);
                }
            }
            Ok((p, select_function(p, req.query_one("function")?)?))
        }
    }
}

/// Parse `program_id` and find the program.
fn program_param<'a>(cfg: &'a Config, raw: Option<&str>) -> Result<&'a Arc<Program>, ApiError> {
    let id: u64 = raw
        .and_then(|s| s.trim().parse().ok())
        .ok_or(ApiError::InvalidProgramId)?;
    cfg.program(id).ok_or(ApiError::ProgramNotFound)
}

/// Choose the function: the named one (which must have an active API
/// trigger), or the only triggered one.
///
/// # Errors
/// `function_not_found`, `trigger_inactive`, `function_required`,
/// `no_active_trigger`.
pub fn select_function<'a>(p: &'a Program, name: Option<&str>) -> Result<&'a Function, ApiError> {
    let triggered = || p.triggered().map(|f| f.name.clone()).collect::<Vec<_>>();
    if let Some(name) = name {
        let f = p.function(name).ok_or_else(|| ApiError::FunctionNotFound {
            name: name.to_string(),
            functions: triggered(),
        })?;
        return match &f.api_trigger {
            Some(t) if t.active => Ok(f),
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

/// The run of `function` with checked `values`: the one place a [`Job`] is
/// put together (HTTP endpoints and `trigd run` alike).
pub fn job(
    cfg: &Arc<Config>,
    program: &Arc<Program>,
    function: &Function,
    values: Vec<String>,
    vars: &BTreeMap<String, String>,
    by: Origin,
) -> Job {
    Job {
        cfg: Arc::clone(cfg),
        program: Arc::clone(program),
        function: function.name.clone(),
        values,
        vars: vars.clone(),
        by,
        id: None,
        tool: None,
        body_file: None,
        stdin_body: false,
        files: Vec::new(),
    }
}

/// Whether the client asks for Server-Sent Events (`Accept:
/// text/event-stream`).
pub fn wants_events(req: &Request) -> bool {
    req.header("accept")
        .is_some_and(|a| a.to_ascii_lowercase().contains("text/event-stream"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans_follow_the_run_endpoint() {
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
}
