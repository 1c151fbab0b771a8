//! The steps a tool trigger with receive settings adds to [`invoke`]
//! (see `receive`): the signature right after the endpoint's credentials,
//! the rule before anything is read for the run, the values from their
//! sources, the raw body in a file; and the answer's shape and accounting
//! in [`answer`]. For an endpoint without receive settings every step here
//! is a no-op.
//!
//! [`invoke`]: super::invoke

use std::sync::Arc;

use serde_json::Value;

use crate::access::client_ip;
use crate::app::App;
use crate::config::{Config, Endpoint};
use crate::http::{ApiError, Request, Response};
use crate::receive::body_file::BodyFile;
use crate::receive::rules::Verdict;
use crate::receive::values::{Incoming, ValueError};
use crate::receive::{read_values, Answer, Receive, ValuesError};

/// Check the request's signature or token (`verify`).
///
/// # Errors
/// `rate_limited`; `signature_missing` (401), `signature_malformed`,
/// `signature_mismatch`, `signature_expired` (403).
pub fn verify(app: &App, cfg: &Config, rcv: &Receive, req: &Request) -> Result<(), ApiError> {
    match &rcv.verify {
        Some(v) => app.access.signature(cfg, req, v),
        None => Ok(()),
    }
}

/// The request as value sources and rules see it.
pub fn incoming<'a>(cfg: &Config, req: &'a Request) -> Incoming<'a> {
    let client = client_ip(&cfg.server, req);
    let mut inc = Incoming::new(&req.headers, &req.query, &req.body, client);
    inc.method = req.method.as_str();
    inc
}

/// Evaluate the rule (`rule`).
///
/// # Errors
/// `rules_not_matched` with the trigger's `ignored_status` when it does
/// not match; `invalid_payload` / `unsupported_media_type` when a source
/// cannot read the body.
pub fn rule(rcv: &Receive, inc: &Incoming<'_>) -> Result<(), ApiError> {
    let Some(rule) = &rcv.rule else { return Ok(()) };
    match rule.eval(inc).map_err(body_error)? {
        Verdict::Match => Ok(()),
        Verdict::NoMatch(reason) => Err(ApiError::Ignored {
            status: rcv.answer.ignored_status,
            reason,
        }),
    }
}

/// Write the raw body to a temporary file when a run needs it.
///
/// # Errors
/// `storage_unavailable` when it cannot be written.
pub fn body_file(
    cfg: &Config,
    rcv: &Receive,
    req: &Request,
) -> Result<Option<Arc<BodyFile>>, ApiError> {
    if !rcv.needs_body_file() {
        return Ok(None);
    }
    let dir = cfg.server.state_dir.join("bodies");
    match BodyFile::write(&dir, &req.body) {
        Ok(f) => Ok(Some(Arc::new(f))),
        Err(e) => {
            log::error!("cannot write the request body under {}: {e}", dir.display());
            Err(ApiError::StorageUnavailable)
        }
    }
}

/// The values from the trigger's sources (`values`); `None` when the
/// endpoint reads values its own way. A trigger with other receive
/// settings but no `values` takes values by name from the query only: its
/// body is the sender's payload.
///
/// # Errors
/// `invalid_payload`, `unsupported_media_type`, and `variables_mismatch`
/// for a value the request does not carry.
pub fn values(
    rcv: &Receive,
    inc: &Incoming<'_>,
    req: &Request,
    inputs: &[String],
) -> Result<Option<Vec<String>>, ApiError> {
    match &rcv.values {
        Some(specs) => read_values(inc, specs)
            .map(Some)
            .map_err(|e| values_error(e, inputs)),
        None if rcv.is_configured() => {
            super::values::named_values_from(&req.query, b"", inputs).map(Some)
        }
        None => Ok(None),
    }
}

fn body_error(e: ValueError) -> ApiError {
    match e {
        ValueError::WrongType { .. } => ApiError::UnsupportedMediaType { msg: e.message() },
        _ => ApiError::InvalidPayload { msg: e.message() },
    }
}

fn values_error(e: ValuesError, inputs: &[String]) -> ApiError {
    match e {
        ValuesError::Body(e) => body_error(e),
        ValuesError::Missing { output, source } => ApiError::ValuesMismatch {
            msg: format!("Value '{output}' ({source}) is not in the request."),
            outputs: inputs.to_vec(),
        },
    }
}

/// Account for and shape the answer of a tool trigger's endpoint: a
/// request that ran nothing is logged and counted in
/// `trigd_webhooks_not_run_total`; the answer gets the trigger's success
/// status, extra headers, and without `output` no `Result` (nor a failed
/// run's `Stderr`). An endpoint without receive settings is untouched.
///
/// # Errors
/// `result`'s, for an endpoint without receive settings.
pub fn answer(
    app: &App,
    endpoint: &Endpoint,
    result: Result<Response, ApiError>,
) -> Result<Response, ApiError> {
    let rcv = &endpoint.receive;
    let Some(name) = endpoint.trigger.as_ref().filter(|_| rcv.is_configured()) else {
        return result;
    };
    let (tool, env, trigger) = (&name.tool, &name.environment, &name.trigger);
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

/// Whether `e` refused the request itself (signature, body, values), as
/// opposed to a run that failed or a server that is busy.
fn refused_before_run(e: &ApiError) -> bool {
    matches!(
        e,
        ApiError::Signature(_)
            | ApiError::RateLimited { .. }
            | ApiError::InvalidPayload { .. }
            | ApiError::UnsupportedMediaType { .. }
            | ApiError::ValuesMismatch { .. }
            | ApiError::InvalidParameter { .. }
    )
}

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
                let (status, run) = (resp.status, resp.run.take());
                let headers = std::mem::take(&mut resp.headers);
                resp = Response::json(status, &Value::Object(body));
                resp.headers = headers;
                resp.run = run;
            }
        }
    }
    resp.headers.extend(answer.headers.iter().cloned());
    resp
}
