//! The steps a *signed endpoint* (a tool trigger with receive settings:
//! GitHub, Stripe, Slack… requests) adds to [`invoke`] (see `receive`):
//! the signature right after the endpoint's credentials and the raw body
//! in a file; and the accounting and shape of every answer in [`answer`] (the rule is `read.rs`'s, the values from their
//! sources `values.rs`'s). For an endpoint without receive settings every
//! step here is a no-op.
//!
//! [`invoke`]: super::invoke

use std::sync::Arc;

use serde_json::Value;

use crate::config::{Config, Dialect, Endpoint, Entry};
use crate::http::app::App;
use crate::http::logging;
use crate::http::{ApiError, Request, Response};
use crate::receive::{Answer, AnswerBody, Receive};
use crate::state::bodies::BodyFile;
use crate::state::State;

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

/// The idempotency key a signed request gets from its sender's delivery id
/// (see `receive::delivery`) when `deduplicate` is on: scoped to the
/// endpoint (its path) and marked, so that it never meets a caller's own
/// `Idempotency-Key`.
pub fn delivery_key(rcv: &Receive, req: &Request) -> Option<String> {
    let v = match &rcv.verify {
        Some(v) => v,
        None => rcv.rule.as_ref()?.required_signature()?,
    };
    if !rcv.deduplicate {
        return None;
    }
    let id = crate::receive::delivery::id(v, &req.headers, &req.body)?;
    Some(format!("delivery\n{}\n{id}", req.segments.join("/")))
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
    let dir = State::new(&cfg.server.state_dir, &cfg.server.shared_state_dir).bodies_dir();
    match BodyFile::write(&dir, &req.body) {
        Ok(f) => Ok(Some(Arc::new(f))),
        Err(e) => {
            log::error!("cannot write the request body under {}: {e}", dir.display());
            Err(ApiError::StorageUnavailable)
        }
    }
}

/// Account for and shape the answer, by the endpoint's [`Dialect`]. A
/// request of a signed endpoint, or of a hooks-file hook, that ran nothing
/// is logged and counted in `trigd_webhooks_not_run_total` (a public name:
/// `tool="hooks"` for a hook). A signed endpoint's answer gets the
/// trigger's success status, extra headers, and without `output` no
/// `Result` (nor a failed run's `Stderr`); a hook's is said as
/// adnanh/webhook says it (`compat::webhook::answer`); a plain trigger's
/// only when it has a `[response]` table; other endpoints' are untouched.
///
/// # Errors
/// `result`'s, for an endpoint without receive settings; trigd's own
/// refusals for a hook.
pub fn answer(
    app: &App,
    endpoint: &Endpoint,
    result: Result<Response, ApiError>,
) -> Result<Response, ApiError> {
    let rcv = &endpoint.receive;
    let (label, trigger) = match &endpoint.entry {
        // A trigger with only a `[response]` table is shaped too (it was
        // answered as if it had none: `output = false` still gave `Result`).
        Entry::Tool(t) if rcv.is_configured() || rcv.answer != Answer::default() => {
            (t.tool.as_str(), t.trigger.as_str())
        }
        Entry::Hook(id) => ("hooks", id.as_str()),
        _ => return result,
    };
    let name = || match &endpoint.entry {
        Entry::Tool(t) => format!("signed endpoint {}/{}/{}", t.tool, t.environment, t.trigger),
        _ => format!("hook {trigger}"),
    };
    match &result {
        Err(ApiError::Ignored { reason, .. }) => {
            log::info!("{} ignored: {reason}", name());
            app.runner.metrics.not_run(label, trigger, "ignored");
        }
        Err(e) if refused_before_run(e) => {
            // A sender decides how often this happens: summarised.
            let name = name();
            let kind = format!("{name} {}", e.code());
            logging::warn_repeated(
                module_path!(),
                &kind,
                format_args!("{name} refused: {}: {}", e.code(), e.message()),
            );
            app.runner.metrics.not_run(label, trigger, e.code());
        }
        _ => {}
    }
    match &endpoint.dialect {
        Dialect::Native => Ok(shape(&rcv.answer, result)),
        Dialect::HooksFile(h) => crate::compat::webhook::answer::render(&h.answer, result),
    }
}

/// Whether `e` refused the request itself (signature, body, values), as
/// opposed to a run that failed or a server that is busy.
fn refused_before_run(e: &ApiError) -> bool {
    matches!(
        e,
        ApiError::Signature(_)
            | ApiError::RuleError { .. }
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
    if started && resp.run.is_some() && (200..300).contains(&resp.status) {
        if let Some(body) = &answer.body {
            resp = with_body(resp, body, answer.content_type.as_deref());
        }
    }
    resp.headers.extend(answer.headers.iter().cloned());
    resp
}

/// A run's success answer `resp` with the trigger's own `body` (a sync
/// run's stdout needs its `Result`; an async start keeps trigd's JSON
/// for `stdout` bodies, which do not exist yet).
fn with_body(resp: Response, body: &AnswerBody, content_type: Option<&str>) -> Response {
    let last = serde_json::from_slice::<Value>(&resp.body)
        .ok()
        .and_then(|v| v.get("Result")?.as_array()?.last().cloned());
    let (bytes, default_type) = match (body, last) {
        (AnswerBody::Text(t), _) => (t.clone().into_bytes(), TEXT),
        (AnswerBody::Stdout, Some(Value::String(s))) => (s.into_bytes(), TEXT),
        (AnswerBody::Stdout, Some(v)) => (v.to_string().into_bytes(), TEXT),
        (AnswerBody::StdoutJson, Some(Value::String(s))) => {
            match serde_json::from_slice::<Value>(s.as_bytes()) {
                Ok(v) => (v.to_string().into_bytes(), JSON),
                Err(_) => return not_json(resp),
            }
        }
        (AnswerBody::StdoutJson, Some(v)) => (v.to_string().into_bytes(), JSON),
        (_, None) => return resp,
    };
    let mut out = resp;
    out.headers
        .retain(|(k, _)| !k.eq_ignore_ascii_case("content-type"));
    out.headers.push((
        "Content-Type".into(),
        content_type.unwrap_or(default_type).into(),
    ));
    // A program's output (or a configured text) served as the type the
    // trigger says, `text/html` included: never with the origin of
    // trigd's pages, whose session a script there could use (read a
    // page's CSRF token, regenerate a member's application key).
    for (name, value) in SHAPED_HEADERS {
        out.headers.retain(|(k, _)| !k.eq_ignore_ascii_case(name));
        out.headers.push(((*name).into(), (*value).into()));
    }
    out.body = bytes;
    out
}

/// The headers of an answer whose body a trigger shapes ([`with_body`]):
/// a sandbox (an opaque origin, no scripts) and no type sniffing.
const SHAPED_HEADERS: &[(&str, &str)] = &[
    ("Content-Security-Policy", "sandbox"),
    ("X-Content-Type-Options", "nosniff"),
];

const TEXT: &str = "text/plain; charset=utf-8";
const JSON: &str = "application/json";

/// The answer when `stdout_json` is not JSON: the error, with the run.
fn not_json(resp: Response) -> Response {
    let mut e = Response::from(ApiError::AnswerNotJson);
    e.run = resp.run;
    e.headers.extend(
        resp.headers
            .into_iter()
            .filter(|(k, _)| !k.eq_ignore_ascii_case("content-type")),
    );
    e
}
