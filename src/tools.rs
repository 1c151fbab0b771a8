//! Generated tool endpoints `METHOD /tools/<tool>/<env>/<trigger>` and the
//! endpoint view `GET /tools/<tool>/endpoints`.
//!
//! Every `endpoint` trigger of a tool exists once per environment of the
//! tool; a run through it gets that environment's `vars`. Values come by
//! output name from the query string and/or a JSON object body. Access is
//! protected unless the environment's `public` switch is on (see
//! `auth::member`).
//!
//! A trigger with receive settings (see `receive`) takes a request through
//! verify → rule → values → run, and its answer through the trigger's
//! shape; without them nothing of that runs and the answer is unchanged.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Value};

use crate::api;
use crate::app::App;
use crate::auth;
use crate::config::{Config, Environment, Tool, Trigger};
use crate::http::{ApiError, Request, Response};
use crate::ratelimit;
use crate::receive::body_file::BodyFile;
use crate::receive::rules::{self, Verdict};
use crate::receive::values::{Incoming, ValueError};
use crate::receive::{read_values, Answer, Receive, ValuesError};
use crate::runner::Job;

/// Call a generated endpoint.
///
/// # Errors
/// 404 for an unknown tool, environment or trigger; 405 for another method;
/// 401/403 per SPEC §3.4; 400 `variables_mismatch` (with the outputs) for
/// missing, extra, repeated, non-string or oversized values; then the run
/// errors of `api::start`.
pub fn call(
    app: &App,
    cfg: &Arc<Config>,
    req: &Request,
    names: [&str; 3],
) -> Result<Response, ApiError> {
    let [tool, env, trigger] = names;
    let tool = cfg.tools.get(tool).ok_or(ApiError::NotFound)?;
    let env = tool.environments.get(env).ok_or(ApiError::NotFound)?;
    // Authenticate before anything else about a protected environment is
    // revealed (which triggers exist, their methods).
    let by = if env.public {
        "public".to_string()
    } else {
        auth::member(app, cfg, req, &tool.workspace)?
    };
    let trigger = tool
        .triggers
        .iter()
        .find(|t| t.name == trigger)
        .ok_or(ApiError::NotFound)?;
    // HEAD is refused like any other method: it must not start a run.
    if req.method != trigger.method {
        let allow: &'static str = match trigger.method.as_str() {
            "GET" => "GET",
            "PUT" => "PUT",
            "PATCH" => "PATCH",
            "DELETE" => "DELETE",
            _ => "POST",
        };
        return Err(ApiError::MethodNotAllowed { allow: vec![allow] });
    }
    let result = receive(app, cfg, req, env, trigger, by);
    let names = [tool.name.as_str(), env.name.as_str(), trigger.name.as_str()];
    webhook_answer(app, names, &trigger.receive, result)
}

/// Account for and shape the answer of trigger `names` (tool, environment,
/// trigger): a request that ran nothing is logged and counted in
/// `trigd_webhooks_not_run_total`; the answer gets the trigger's success
/// status, extra headers, and without `output` no `Result` (nor a failed
/// run's `Stderr`). A trigger without receive settings is untouched.
fn webhook_answer(
    app: &App,
    names: [&str; 3],
    rcv: &Receive,
    result: Result<Response, ApiError>,
) -> Result<Response, ApiError> {
    if !rcv.is_configured() {
        return result;
    }
    let [tool, env, trigger] = names;
    match &result {
        Err(ApiError::Ignored { reason, .. }) => {
            log::info!("webhook {tool}/{env}/{trigger} ignored: {reason}");
            app.runner.metrics.webhook(tool, trigger, "ignored");
        }
        Err(e) if refused_before_run(e) => {
            log::warn!(
                "webhook {tool}/{env}/{trigger} refused: {}: {}",
                e.code(),
                e.message()
            );
            app.runner.metrics.webhook(tool, trigger, e.code());
        }
        _ => {}
    }
    Ok(shape(&rcv.answer, result))
}

/// Take a request through the trigger's steps: verify, rule, values, run.
fn receive(
    app: &App,
    cfg: &Arc<Config>,
    req: &Request,
    env: &Environment,
    trigger: &Trigger,
    by: String,
) -> Result<Response, ApiError> {
    let program = cfg.program(trigger.program).ok_or(ApiError::NotFound)?;
    let function = program
        .function(&trigger.function)
        .ok_or(ApiError::NotFound)?;
    let rcv = &trigger.receive;
    let run_async = match req.query_one("run_async")? {
        None => rcv.answer.run_async,
        raw => api::parse_bool("run_async", raw)?,
    };
    if let Some(v) = &rcv.verify {
        v.verify(&req.headers, &req.body, rules::unix_now())
            .map_err(ApiError::Signature)?;
    }
    let client = ratelimit::client_ip(&cfg.server, req);
    let mut inc = Incoming::new(&req.headers, &req.query, &req.body, client);
    inc.method = &req.method;
    if let Some(rule) = &rcv.rule {
        if let Verdict::NoMatch(reason) = rule.eval(&inc).map_err(body_error)? {
            let status = rcv.answer.ignored_status;
            return Err(ApiError::Ignored { status, reason });
        }
    }
    let body_file = if rcv.needs_body_file() {
        let dir = cfg.server.state_dir.join("bodies");
        let f = BodyFile::write(&dir, &req.body).map_err(|e| {
            log::error!("cannot write the request body under {}: {e}", dir.display());
            ApiError::StorageUnavailable
        })?;
        Some(Arc::new(f))
    } else {
        None
    };
    inc.body_file = body_file.as_ref().map(|f| f.path().to_path_buf());
    let values = match &rcv.values {
        Some(specs) => read_values(&inc, specs).map_err(|e| values_error(e, function.inputs()))?,
        // The body of a verified or ruled request is the sender's payload,
        // not a flat object of values: only the query names values then.
        None if rcv.is_configured() => by_name(&req.query, b"", function.inputs())?,
        None => named_values(req, function.inputs())?,
    };
    check_lengths(cfg.server.max_variable_bytes, function.inputs(), &values)?;
    api::check_values(&cfg.server, function.inputs(), &values)?;
    let job = Job {
        cfg: Arc::clone(cfg),
        program: Arc::clone(program),
        function: function.name.clone(),
        values,
        vars: env.vars.clone(),
        by,
        body_file,
        stdin_body: rcv.stdin_body,
        files: Vec::new(),
    };
    api::start(app, job, run_async)
}

/// Whether `e` refused the request itself (signature, body, values), as
/// opposed to a run that failed or a server that is busy.
fn refused_before_run(e: &ApiError) -> bool {
    matches!(
        e,
        ApiError::Signature(_)
            | ApiError::InvalidPayload { .. }
            | ApiError::UnsupportedMediaType { .. }
            | ApiError::ValuesMismatch { .. }
            | ApiError::InvalidParameter { .. }
    )
}

/// A body that cannot be read as the trigger's sources need.
fn body_error(e: ValueError) -> ApiError {
    match e {
        ValueError::WrongType { .. } => ApiError::UnsupportedMediaType { msg: e.message() },
        _ => ApiError::InvalidPayload { msg: e.message() },
    }
}

fn values_error(e: ValuesError, outputs: &[String]) -> ApiError {
    match e {
        ValuesError::Body(e) => body_error(e),
        ValuesError::Missing { output, source } => ApiError::ValuesMismatch {
            msg: format!("Value '{output}' ({source}) is not in the request."),
            outputs: outputs.to_vec(),
        },
    }
}

/// Apply the trigger's answer shape: success status, extra headers, and
/// without `output` no `Result` (nor a failed run's `Stderr`). The default
/// shape changes nothing.
fn shape(answer: &Answer, result: Result<Response, ApiError>) -> Response {
    let started = result.is_ok();
    let mut resp = result.unwrap_or_else(Response::from);
    // Only a run's success answer carries a run id with status 200.
    if started && resp.status == 200 && resp.run.is_some() {
        resp.status = answer.status;
    }
    if !answer.output {
        if let Ok(Value::Object(mut body)) = serde_json::from_slice::<Value>(&resp.body) {
            if body.remove("Result").is_some() | body.remove("Stderr").is_some() {
                let status = resp.status;
                let headers = std::mem::take(&mut resp.headers);
                let run = resp.run.take();
                resp = Response::json(status, &Value::Object(body));
                resp.headers = headers;
                resp.run = run;
            }
        }
    }
    resp.headers.extend(answer.headers.iter().cloned());
    resp
}

/// Collect one string per output, by name, from the query and a JSON object
/// body. `pub(crate)` for the fuzz harness (fuzz/src/lib.rs).
pub(crate) fn named_values(req: &Request, outputs: &[String]) -> Result<Vec<String>, ApiError> {
    by_name(&req.query, &req.body, outputs)
}

/// [`named_values`] over a query and a body (empty: no body values).
fn by_name(
    query: &[(String, String)],
    body: &[u8],
    outputs: &[String],
) -> Result<Vec<String>, ApiError> {
    let mismatch = |msg: String| ApiError::ValuesMismatch {
        msg,
        outputs: outputs.to_vec(),
    };
    let mut got: BTreeMap<String, String> = BTreeMap::new();
    for (k, v) in query.iter().filter(|(k, _)| k != "run_async") {
        if got.insert(k.clone(), v.clone()).is_some() {
            return Err(mismatch(format!("Value '{k}' is given more than once.")));
        }
    }
    if !body.iter().all(u8::is_ascii_whitespace) {
        let body: Value = serde_json::from_slice(body)
            .map_err(|e| mismatch(format!("The body must be a JSON object of strings: {e}.")))?;
        let Value::Object(map) = body else {
            return Err(mismatch(
                "The body must be a JSON object of strings, by output name.".into(),
            ));
        };
        for (k, v) in map {
            let Value::String(s) = v else {
                return Err(mismatch(format!("Value '{k}' must be a JSON string.")));
            };
            if got.insert(k.clone(), s).is_some() {
                return Err(mismatch(format!(
                    "Value '{k}' is given both in the query and in the body."
                )));
            }
        }
    }
    if let Some(extra) = got.keys().find(|k| !outputs.contains(k)) {
        return Err(mismatch(format!(
            "Unknown value '{extra}'. Expected outputs: [{}].",
            outputs.join(", ")
        )));
    }
    outputs
        .iter()
        .map(|o| {
            got.remove(o).ok_or_else(|| {
                mismatch(format!(
                    "Missing value '{o}'. Expected outputs: [{}].",
                    outputs.join(", ")
                ))
            })
        })
        .collect()
}

/// Refuse a value longer than `max` bytes, naming its output. (The run
/// endpoint's check names the `variables` parameter and a position, which
/// mean nothing here.)
fn check_lengths(max: usize, outputs: &[String], values: &[String]) -> Result<(), ApiError> {
    match outputs.iter().zip(values).find(|(_, v)| v.len() > max) {
        Some((name, _)) => Err(ApiError::ValuesMismatch {
            msg: format!("Value '{name}' is longer than the limit of {max} bytes."),
            outputs: outputs.to_vec(),
        }),
        None => Ok(()),
    }
}

/// `GET /tools/<tool>/endpoints` as JSON: each environment with its public
/// switch and each endpoint with method, full URL and access. Members only.
///
/// # Errors
/// 404 for an unknown tool; 401/403 for a caller who is not a member.
pub fn view(app: &App, cfg: &Config, req: &Request, tool: &str) -> Result<Response, ApiError> {
    let tool = cfg.tools.get(tool).ok_or(ApiError::NotFound)?;
    auth::member(app, cfg, req, &tool.workspace)?;
    Ok(Response::json(200, &describe(cfg, req, tool)))
}

/// The endpoint view's data.
pub fn describe(cfg: &Config, req: &Request, tool: &Tool) -> Value {
    let base = base_url(cfg, req);
    let envs: Vec<Value> = tool
        .environments
        .values()
        .map(|env| {
            let endpoints: Vec<Value> = tool
                .triggers
                .iter()
                .map(|t| {
                    json!({
                        "Name": t.name,
                        "Method": t.method,
                        "Url": format!("{base}/tools/{}/{}/{}", tool.name, env.name, t.name),
                        "Access": if env.public { "public" } else { "protected" },
                        "Program": t.program,
                        "Function": t.function,
                    })
                })
                .collect();
            json!({"Name": env.name, "Public": env.public, "Endpoints": endpoints})
        })
        .collect();
    json!({"Tool": tool.name, "Workspace": tool.workspace, "Environments": envs})
}

/// `public_url` when configured, else `http://<Host header>`, else
/// `http://<listen>`; never with a trailing slash.
pub fn base_url(cfg: &Config, req: &Request) -> String {
    let url = match (&cfg.server.public_url, req.header("host")) {
        (Some(u), _) => u.clone(),
        (None, Some(h)) if h.bytes().all(|b| b.is_ascii_graphic()) => format!("http://{h}"),
        _ => format!("http://{}", cfg.server.listen),
    };
    url.trim_end_matches('/').to_string()
}
