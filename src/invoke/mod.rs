//! One path for every request that starts a run. An [`Endpoint`] (compiled
//! at config load) says what a request needs; [`invoke`] takes the request
//! through it, one step per line:
//!
//! credentials → method → signature → body refusal → function → read →
//! rule → values → callbacks → idempotency → start → answer
//!
//! Every entry point is such an endpoint: `POST /api` (`api.rs`), each
//! generated tool endpoint (`tools.rs`), and each hook of an
//! adnanh/webhook hooks file (`compat/webhook/`); those are thin adapters that
//! find the endpoint and call [`invoke`]. What differs between them is
//! data on the endpoint, matched once per step: the methods
//! ([`Methods`](crate::config::Methods)), how the request is read for the
//! rule and the values (`read.rs`, by its
//! [`Dialect`](crate::config::Dialect)), how values are made (`values.rs`,
//! by its [`Values`]), which function runs ([`Target`]) and the answer's
//! shape (`signed.rs`: the run endpoint's JSON, or for a hooks-file hook
//! webhook's texts in `compat/webhook/answer.rs`). The same fault gets the same
//! error on every path; only its wording is the shape's.
//!
//! The steps of a signed endpoint (a tool trigger with receive settings:
//! signature, sourced values, body file, the answer's status and headers)
//! are in `signed.rs`; for an endpoint without them they do nothing. With an
//! `Idempotency-Key`, "start" goes through `replay::start_once`: at most
//! one run per key, repeats answered with the original run. `answer.rs`
//! starts the run and writes the run endpoint's answer.

mod answer;
mod parse_limit;
mod read;
pub mod rerun;
mod signed;
mod values;

use std::collections::BTreeMap;
use std::sync::Arc;

pub use answer::finished_body;
pub use answer::run_error;
pub use values::check_values;
pub use values::named_values;

use crate::access::Member;
use crate::config::{
    ApiKey, Config, Credentials, Dialect, Endpoint, Entry, Function, Program, Target, Values,
};
use crate::http::app::App;
use crate::http::{ApiError, Request, Response};
use crate::receive::rules::Rule;
use crate::receive::Receive;
use crate::runner::Job;
use crate::runs::callback;
use crate::runs::idempotency;
use crate::runs::replay;
use crate::state::delivery::Source;
use crate::state::record::{Origin, ToolEnv};
use read::Read;

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
/// find the function, read the request, evaluate the rule, make and check
/// the values, start the run (sync or async) and answer in the endpoint's
/// shape (`signed::answer`).
///
/// # Errors
/// Every error of the steps, in this order: credentials (see `access`),
/// `method_not_allowed`, the signature (`signature_*`), a body where none
/// is read (`invalid_parameter`), the function (`invalid_program_id`,
/// `program_not_found`, `function_not_found`, …), a body that cannot be
/// read (`invalid_payload`, `payload_too_complex`), the rule (`Ignored`,
/// `rule_error`), the values (`invalid_payload`, `payload_too_complex`,
/// `unsupported_media_type`, `variables_mismatch`, `invalid_parameter`),
/// `run_async`, a reused `Idempotency-Key` (`idempotency_key_reused`), and
/// the run; a malformed `Idempotency-Key` (`invalid_parameter`) right after
/// the signature. A hook answers most of them in webhook's words
/// (`compat/webhook/answer.rs`).
pub fn invoke(
    app: &App,
    cfg: &Arc<Config>,
    req: &mut Request,
    endpoint: &Endpoint,
) -> Result<Response, ApiError> {
    let result = steps(app, cfg, req, endpoint);
    signed::answer(app, endpoint, result)
}

/// The steps of [`invoke`] up to the run's answer.
fn steps(
    app: &App,
    cfg: &Arc<Config>,
    req: &mut Request,
    endpoint: &Endpoint,
) -> Result<Response, ApiError> {
    let caller = authenticate(app, cfg, req, &endpoint.credentials)?;
    if !endpoint.methods.allows(req.method) {
        let allow = endpoint.methods.allow();
        return Err(ApiError::MethodNotAllowed { allow });
    }
    let rcv = &endpoint.receive;
    signed::verify(app, cfg, rcv, req)?;
    // Before the rule: an ignored request with a malformed key is refused
    // like any other (the manual's promise for the header, docs/http-api.md).
    // Owned: the body is let go of below, while the key is still needed.
    let key = match idempotency::key_of(req)? {
        Some(k) => Some(k.to_owned()),
        None => signed::delivery_key(rcv, req),
    };
    values::reject_body(req, &endpoint.values)?;
    let (program, function) = target(cfg, req, &endpoint.target, &caller)?;
    let parse = parse_limit::permit(req.body.len());
    let mut read = Read::new(cfg, req, &endpoint.dialect)?;
    rule(app, cfg, req, &read, rcv)?;
    let body_file = signed::body_file(cfg, rcv, req)?;
    read.set_body_file(body_file.as_ref().map(|f| f.path().to_path_buf()));
    let made = values::make(&cfg.server, req, endpoint, &read, function.inputs())?;
    let run_async = run_async(req, endpoint)?;
    // The run endpoint may stream a sync run's output (`answer.rs`).
    let mut stream = false;
    if matches!(endpoint.values, Values::Positional) {
        stream = parse_bool("stream", req.query_one("stream")?)? || wants_events(req);
        values::reject_unknown(req)?;
    }
    let callbacks = callbacks(cfg, req, endpoint, function, &caller)?;
    let mut job = job(
        cfg,
        program,
        function,
        made.values,
        &made.vars,
        caller.origin(),
    );
    job.files = made.files;
    job.body_file = body_file;
    job.stdin_body = rcv.stdin_body;
    job.callbacks = callbacks;
    job.group.clone_from(&endpoint.group);
    if let Entry::Tool(t) = &endpoint.entry {
        job.tool = Some(ToolEnv {
            tool: t.tool.clone(),
            environment: t.environment.clone(),
        });
    }
    let key = key.map(|k| (k, fingerprint(req, program.id, &job, made.request)));
    // A run may wait for a slot: it keeps its values only, not the
    // parsed payload (about ten times the body) nor the body.
    drop(read);
    let_go_of_body(req);
    drop(parse);
    let start = |job| {
        if stream && !run_async {
            answer::start_streamed(app, job)
        } else {
            answer::start(app, job, run_async)
        }
    };
    match key {
        Some((key, request)) => replay::start_once(app, &key, job, run_async, request, start),
        None => start(job),
    }
}

/// The endpoint's rule. One with a signature or token check guards a
/// secret as credentials do: a client address past its failure budget is
/// refused before it is evaluated, and a check that fails counts against
/// the address (guessing a token through a rule is as slow as guessing an
/// API key). A request that fails only on other leaves (an event filter)
/// is not counted: senders send those all day.
///
/// # Errors
/// `rate_limited`, and those of [`Read::rule`].
fn rule(
    app: &App,
    cfg: &Config,
    req: &Request,
    read: &Read,
    rcv: &Receive,
) -> Result<(), ApiError> {
    if !rcv.rule.as_ref().is_some_and(Rule::checks_signatures) {
        return read.rule(rcv);
    }
    app.access.before_secret(cfg, req)?;
    let verdict = read.rule(rcv);
    if verdict.is_err() && read.signature_failed() {
        app.access.secret_failed(cfg, req);
    }
    verdict
}

/// The `Idempotency-Key` fingerprint of `req` for `job` of program `id`,
/// with `taken`, what else the run takes from the request. Taken before
/// the run may wait for a slot, and `taken` dropped: it can hold a hook's
/// file contents (up to the body's size), which `max_waiting_bytes` does
/// not count.
fn fingerprint(req: &Request, id: u64, job: &Job, taken: Vec<String>) -> idempotency::Hash {
    let entry = format!("{}#{id}", req.segments.join("/"));
    idempotency::fingerprint(&entry, &job.function, job.values.iter().chain(&taken))
}

/// Free the body of `req`, whose values are made. The pages of a large
/// payload's tree (freed with its `Read`) go back to the system at once:
/// freed, they would stay in the thread's malloc arena.
fn let_go_of_body(req: &mut Request) {
    let large = req.body.len() >= parse_limit::LARGE_BODY;
    req.body = Vec::new();
    if large {
        crate::sys::trim_heap();
    }
}

/// Whether the run is async: a hooks-file hook's says so itself
/// (`Hook::run_async`); else `run_async`, by default the trigger's
/// `response.run_async`.
///
/// # Errors
/// `invalid_parameter` for a bad `run_async`.
fn run_async(req: &Request, endpoint: &Endpoint) -> Result<bool, ApiError> {
    match &endpoint.dialect {
        Dialect::HooksFile(h) => Ok(h.run_async()),
        Dialect::Native => match req.query_one("run_async")? {
            None => Ok(endpoint.receive.answer.run_async),
            raw => parse_bool("run_async", raw),
        },
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
            Caller::Member(app.access.member_to_run(cfg, req, workspace)?)
        }
        Credentials::Public => Caller::Public,
    })
}

/// The program and function an endpoint runs for this request.
fn target<'c>(
    cfg: &'c Config,
    req: &Request,
    target: &'c Target,
    caller: &Caller,
) -> Result<(&'c Arc<Program>, &'c Function), ApiError> {
    match target {
        Target::Fixed { program, function } => {
            let p = cfg.program(*program).ok_or(ApiError::NotFound)?;
            let f = p.function(function).ok_or(ApiError::NotFound)?;
            Ok((p, f))
        }
        Target::Own(p) => Ok((p, p.functions.first().ok_or(ApiError::Internal)?)),
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

/// Parse `program_id` (ASCII digits, nothing else: `u64`'s parser also
/// takes a `+`) and find the program.
fn program_param<'a>(cfg: &'a Config, raw: Option<&str>) -> Result<&'a Arc<Program>, ApiError> {
    let id: u64 = raw
        .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse().ok())
        .ok_or(ApiError::InvalidProgramId)?;
    cfg.program(id).ok_or(ApiError::ProgramNotFound)
}

/// Choose the function: the named one (which must have an active
/// Webhook Trigger), or the only triggered one.
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
        return match &f.webhook_trigger {
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
        callbacks: Vec::new(),
        id: None,
        tool: None,
        body_file: None,
        stdin_body: false,
        files: Vec::new(),
        occurrence: None,
        rerun_of: None,
        group: None,
    }
}

/// The run's completion callbacks: the function's, the endpoint's, and the
/// one the request names (`callback` on `POST /api`, `Trigd-Callback`
/// anywhere it is read natively: a hook's request is the sender's) where
/// the key or the trigger allows it.
///
/// # Errors
/// `callback_not_permitted`, `callback_refused`.
fn callbacks(
    cfg: &Config,
    req: &Request,
    endpoint: &Endpoint,
    function: &Function,
    caller: &Caller,
) -> Result<Vec<crate::state::delivery::Target>, ApiError> {
    let permitted = match caller {
        Caller::ApiKey(key) => key.request_callbacks,
        _ => endpoint.request_callbacks,
    };
    let requested = match endpoint.dialect {
        Dialect::Native => {
            let query = matches!(endpoint.values, Values::Positional);
            callback::requested(req, query)?
        }
        Dialect::HooksFile(_) => None,
    };
    callback::targets(
        &cfg.server.callbacks,
        &[
            (function.callback.as_ref(), Source::Function),
            (endpoint.callback.as_ref(), Source::Trigger),
        ],
        requested,
        permitted,
    )
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
