//! Generated tool endpoints `METHOD /tools/<tool>/<env>/<trigger>` and the
//! endpoint view `GET /tools/<tool>/endpoints`.
//!
//! Every `endpoint` trigger of a tool exists once per environment of the
//! tool; a run through it gets that environment's `vars`. Values come by
//! output name from the query string and/or a JSON object body. Access is
//! protected unless the environment's `public` switch is on (see
//! `auth::member`).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Value};

use crate::api;
use crate::app::App;
use crate::auth;
use crate::config::{Config, Tool};
use crate::http::{ApiError, Request, Response};
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
    let program = cfg.program(trigger.program).ok_or(ApiError::NotFound)?;
    let function = program
        .function(&trigger.function)
        .ok_or(ApiError::NotFound)?;
    let run_async = api::parse_bool("run_async", req.query_one("run_async")?)?;
    let values = named_values(req, function.inputs())?;
    check_lengths(cfg.server.max_variable_bytes, function.inputs(), &values)?;
    api::check_values(&cfg.server, function.inputs(), &values)?;
    let job = Job {
        cfg: Arc::clone(cfg),
        program: Arc::clone(program),
        function: function.name.clone(),
        values,
        vars: env.vars.clone(),
        by,
        id: None,
    };
    let origin = format!("tool/{}/{}/{}", tool.name, env.name, trigger.name);
    api::start(app, req, job, run_async, &origin)
}

/// Collect one string per output, by name, from the query and a JSON object
/// body. `pub(crate)` for the fuzz harness (fuzz/src/lib.rs).
pub(crate) fn named_values(req: &Request, outputs: &[String]) -> Result<Vec<String>, ApiError> {
    let mismatch = |msg: String| ApiError::ValuesMismatch {
        msg,
        outputs: outputs.to_vec(),
    };
    let mut got: BTreeMap<String, String> = BTreeMap::new();
    for (k, v) in req.query.iter().filter(|(k, _)| k != "run_async") {
        if got.insert(k.clone(), v.clone()).is_some() {
            return Err(mismatch(format!("Value '{k}' is given more than once.")));
        }
    }
    if !req.body.iter().all(u8::is_ascii_whitespace) {
        let body: Value = serde_json::from_slice(&req.body)
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
