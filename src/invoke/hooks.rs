//! `ANY /<hooks_url_prefix>/<id>`: the hooks of adnanh/webhook hooks files
//! (`[server] hooks_files`), answered as webhook 2.8 answers — its
//! statuses and texts — and run by trigd's runner (slots, timeout, process
//! group, run record, metrics).
//!
//! The steps are the receive steps of every endpoint, in webhook's order:
//! method → read the request (`receive::webhook`) → rule → values → run →
//! answer. Only the answer's shape is webhook's own; a limit trigd adds
//! (body size, busy, shutting down) keeps trigd's JSON error.

use std::sync::Arc;

use base64::Engine as _;

use crate::app::App;
use crate::config::{Config, Hook};
use crate::http::{ApiError, Request, Response};
use crate::receive::body_file::BodyFile;
use crate::receive::values::Source;
use crate::receive::webhook::{Fault, WebhookRequest};
use crate::runner::step::{Outcome, StepError};
use crate::runner::Job;
use crate::store::Origin;

/// webhook's answer to a rule that does not match.
pub const NOT_SATISFIED: &str = "Hook rules were not satisfied.";
/// webhook's answer to a rule that could not be evaluated.
pub const RULE_ERROR: &str = "Error occurred while evaluating hook rules.";
/// webhook's answer to a failed command (without output on error).
pub const COMMAND_ERROR: &str =
    "Error occurred while executing the hook's command. Please check your logs for more details.";

/// Answer a request for hook `id`.
///
/// # Errors
/// Only trigd's own limits (`busy`, `storage_unavailable`,
/// `shutting_down`); every webhook outcome is a response.
pub fn call(app: &App, cfg: &Arc<Config>, req: &Request, id: &str) -> Result<Response, ApiError> {
    let Some(hook) = cfg.hooks.by_id.get(id) else {
        return Ok(text(404, "Hook not found."));
    };
    if !hook.methods.is_empty() && !hook.methods.contains(&req.method) {
        return Ok(text(405, ""));
    }
    let json_parts: Vec<String> = hook
        .json_params
        .iter()
        .filter_map(|s| match s {
            Source::Payload(p) => Some(p.to_string()),
            _ => None,
        })
        .collect();
    let Ok(mut wr) = WebhookRequest::new(
        req.method.as_str(),
        req.remote,
        &req.headers,
        &req.query,
        &req.body,
        hook.content_type.as_deref(),
        &json_parts,
    ) else {
        return Ok(text(500, "Error occurred while parsing multipart form."));
    };
    wr.parse_json_params(&hook.json_params);
    if let Some(rule) = &hook.rule {
        match wr.eval(rule, hook.soft_signatures) {
            (_, Some(f)) if f != Fault::Missing => {
                log::warn!("hook {id}: error evaluating the trigger rule ({f:?})");
                app.runner.metrics.webhook("hooks", id, "rule_error");
                return Ok(text(500, RULE_ERROR));
            }
            (false, _) => {
                log::info!("hook {id} got matched, but the trigger rule was not satisfied");
                app.runner.metrics.webhook("hooks", id, "ignored");
                return Ok(text(hook.answer.mismatch.unwrap_or(200), NOT_SATISFIED));
            }
            (true, _) => {}
        }
    }
    let job = job(cfg, hook, &wr);
    let answer = if hook.answer.output {
        let (run, outcome) = app.runner.run_sync(job).map_err(super::run_error)?;
        with_output(hook, outcome).with_run(&run)
    } else {
        let run = app.runner.start_async(job).map_err(super::run_error)?;
        let status = hook.answer.success.unwrap_or(200);
        text(status, &hook.answer.message).with_run(&run)
    };
    Ok(with_headers(hook, answer))
}

/// The run of a hook: arguments (a missing one is empty), environment (a
/// missing one is left out) and files (likewise), as webhook passes them.
fn job(cfg: &Arc<Config>, hook: &Hook, wr: &WebhookRequest<'_>) -> Job {
    let values: Vec<String> = hook
        .args
        .iter()
        .map(|s| wr.get(s).unwrap_or_default())
        .collect();
    let mut vars: std::collections::BTreeMap<String, String> = hook
        .env
        .iter()
        .filter_map(|(name, s)| wr.get(s).ok().map(|v| (name.clone(), v)))
        .collect();
    let mut files = Vec::new();
    for f in &hook.files {
        let Ok(v) = wr.get(&f.source) else { continue };
        let data = if f.base64 {
            base64::engine::general_purpose::STANDARD
                .decode(v.as_bytes())
                .unwrap_or_default()
        } else {
            v.into_bytes()
        };
        match BodyFile::write_named(&hook.file_dir, &f.env, &data) {
            Ok(file) => {
                vars.insert(f.env.clone(), file.path().display().to_string());
                files.push(file);
            }
            Err(e) => log::error!(
                "hook {}: cannot write a file in {}: {e}",
                hook.id,
                hook.file_dir.display()
            ),
        }
    }
    let function = &hook.program.functions[0];
    let mut job = super::job(cfg, &hook.program, function, values, &vars, Origin::Public);
    job.files = files;
    job
}

/// The answer of a hook with `include-command-output-in-response`: the
/// output (stdout and stderr as written), or webhook's error.
fn with_output(hook: &Hook, outcome: Outcome) -> Response {
    match outcome.error {
        None => {
            let out = outcome
                .result
                .first()
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_string();
            text(hook.answer.success.unwrap_or(200), &out)
        }
        Some(e) => {
            log::warn!("hook {}: {}", hook.id, crate::runner::describe(&e));
            if !hook.answer.output_on_error {
                return Response::text(500, "text/plain; charset=utf-8", COMMAND_ERROR);
            }
            let out = match e {
                StepError::Failed { stdout_tail, .. } => stdout_tail,
                _ => String::new(),
            };
            text(500, &out)
        }
    }
}

/// `response-headers` on an answer to a request that matched (a
/// `Content-Type` among them replaces the one guessed from the body).
fn with_headers(hook: &Hook, mut r: Response) -> Response {
    for (name, value) in &hook.answer.headers {
        r.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        r.headers.push((name.clone(), value.clone()));
    }
    r
}

/// A response with `body`, typed as Go's `net/http` guesses (no type for
/// an empty body).
pub fn text(status: u16, body: &str) -> Response {
    let headers = sniff(body.as_bytes())
        .map(|ct| vec![("Content-Type".to_string(), ct.to_string())])
        .unwrap_or_default();
    let mut r = Response::text(status, "", body.as_bytes());
    r.headers = headers;
    r
}

/// Go's `http.DetectContentType` for the texts a hook answers: HTML, XML,
/// binary or plain text.
fn sniff(body: &[u8]) -> Option<&'static str> {
    if body.is_empty() {
        return None;
    }
    let head = &body[..body.len().min(512)];
    let start = head
        .iter()
        .position(|b| !b" \t\n\x0c\r".contains(b))
        .map_or(&[][..], |i| &head[i..]);
    let html = [
        "<!DOCTYPE HTML",
        "<HTML",
        "<HEAD",
        "<SCRIPT",
        "<IFRAME",
        "<H1",
        "<DIV",
        "<FONT",
        "<TABLE",
        "<A",
        "<STYLE",
        "<TITLE",
        "<B",
        "<BODY",
        "<BR",
        "<P",
        "<!--",
    ];
    let is_tag = |t: &str| {
        start.len() > t.len()
            && start[..t.len()].eq_ignore_ascii_case(t.as_bytes())
            && matches!(start[t.len()], b' ' | b'>')
    };
    if html.iter().any(|t| is_tag(t)) {
        return Some("text/html; charset=utf-8");
    }
    if start.starts_with(b"<?xml") {
        return Some("text/xml; charset=utf-8");
    }
    let binary = |b: &u8| matches!(b, 0x00..=0x08 | 0x0B | 0x0E..=0x1A | 0x1C..=0x1F);
    if head.iter().any(binary) {
        return Some("application/octet-stream");
    }
    Some("text/plain; charset=utf-8")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_as_go_guesses_them() {
        assert_eq!(sniff(b""), None);
        assert_eq!(sniff(b"ok"), Some("text/plain; charset=utf-8"));
        assert_eq!(sniff(b"{\"a\":1}"), Some("text/plain; charset=utf-8"));
        assert_eq!(sniff(b"  <html><body>"), Some("text/html; charset=utf-8"));
        assert_eq!(
            sniff(b"<?xml version=\"1.0\"?>"),
            Some("text/xml; charset=utf-8")
        );
        assert_eq!(sniff(b"a\x00b"), Some("application/octet-stream"));
    }
}
