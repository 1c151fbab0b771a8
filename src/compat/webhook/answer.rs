//! The answer of a hooks-file hook ([`Dialect::HooksFile`]): the outcome of
//! `invoke`'s steps — the run endpoint's answer, or the error of the step
//! that stopped — said as webhook 2.8 says it, in plain text with its
//! statuses (Go's content sniffing for the type). trigd's own limits
//! (`busy`, `shutting_down`, `storage_unavailable`, `disk_full`, an
//! `Idempotency-Key` refused) keep trigd's JSON error.
//!
//! [`Dialect::HooksFile`]: crate::config::Dialect::HooksFile

use serde_json::Value;

use super::HookAnswer;
use crate::http::{ApiError, Response};
use crate::runs::replay::REPLAYED;

/// webhook's answer to an unknown hook id.
pub const NOT_FOUND: &str = "Hook not found.";
/// webhook's answer to a rule that does not match.
pub const NOT_SATISFIED: &str = "Hook rules were not satisfied.";
/// webhook's answer to a rule that could not be evaluated.
pub const RULE_ERROR: &str = "Error occurred while evaluating hook rules.";
/// webhook's answer to a multipart body it cannot parse.
pub const MULTIPART_ERROR: &str = "Error occurred while parsing multipart form.";
/// webhook's answer to a failed command (without output on error).
pub const COMMAND_ERROR: &str =
    "Error occurred while executing the hook's command. Please check your logs for more details.";

/// Say `result` as webhook does: 405 with an empty body for a method the
/// hook does not serve, its texts for a multipart body it cannot parse, a
/// rule that does not match (with the mismatch status) or cannot be
/// evaluated; for a run, the `response-message` with the success status
/// (the run goes on), or with `include-command-output-in-response` the
/// output — or for a failed run 500 with webhook's text or (`…-on-error`)
/// the output. A run's answer gets `response-headers`, the run id for the
/// access log, and `Idempotent-Replayed` when it answers a repeat.
///
/// # Errors
/// trigd's own refusals, unchanged.
pub fn render(h: &HookAnswer, result: Result<Response, ApiError>) -> Result<Response, ApiError> {
    let run = match result {
        Err(ApiError::MethodNotAllowed { .. }) => return Ok(text(405, "")),
        Err(ApiError::InvalidPayload { .. }) => return Ok(text(500, MULTIPART_ERROR)),
        Err(ApiError::Ignored { status, .. }) => return Ok(text(status, NOT_SATISFIED)),
        Err(ApiError::RuleError { .. }) => return Ok(text(500, RULE_ERROR)),
        Err(e) if !e.is_run_outcome() => return Err(e),
        run => run,
    };
    let (id, replayed) = match &run {
        Ok(r) => (r.run.clone(), r.headers.iter().any(|(n, _)| n == REPLAYED)),
        Err(e) => (run_of(e.unmarked()), matches!(e, ApiError::Replayed(_))),
    };
    let mut answer = match (h.output, run) {
        (false, _) => text(h.success, &h.message),
        (true, Ok(r)) => text(h.success, &output_of(&r)),
        (true, Err(e)) if h.output_on_error => text(500, &stdout_of(e)),
        (true, Err(_)) => Response::text(500, "text/plain; charset=utf-8", COMMAND_ERROR),
    };
    answer.run = id;
    if replayed {
        answer.headers.push((REPLAYED.into(), "true".into()));
    }
    // A `Content-Type` among them replaces the one guessed from the body.
    // The ones that frame the message are the server's to write: a hook's
    // `Content-Length` was sent as written before the whole body, and the
    // rest of the body read as the next answer on a kept-alive connection.
    for (name, value) in h.headers.iter().filter(|(n, _)| !is_framing(n)) {
        answer
            .headers
            .retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        answer.headers.push((name.clone(), value.clone()));
    }
    Ok(answer)
}

/// Whether header `name` frames the message or the connection (RFC 9110
/// and 9112: hop-by-hop, or the body's length): never a hook's to set.
fn is_framing(name: &str) -> bool {
    [
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "proxy-connection",
    ]
    .iter()
    .any(|f| name.eq_ignore_ascii_case(f))
}

/// The output of a finished run: the text its raw `Result` holds.
fn output_of(r: &Response) -> String {
    let body: Value = serde_json::from_slice(&r.body).unwrap_or_default();
    body["Result"][0].as_str().unwrap_or_default().to_string()
}

/// The output a failed run left (stdout and stderr as written).
fn stdout_of(e: ApiError) -> String {
    match e {
        ApiError::RunFailed { stdout, .. } => stdout,
        ApiError::Replayed(e) => stdout_of(*e),
        _ => String::new(),
    }
}

/// The run id of a run's outcome.
fn run_of(e: &ApiError) -> Option<String> {
    match e {
        ApiError::RunFailed { run, .. }
        | ApiError::RunTimeout { run }
        | ApiError::RunInterrupted { run }
        | ApiError::RunCancelled { run } => Some(run.clone()),
        _ => None,
    }
}

/// A response with `body`, typed as Go's `net/http` guesses (no type for
/// an empty body).
pub fn text(status: u16, body: &str) -> Response {
    // A 204 or 304 has no body (RFC 9110), hence no type: Go refuses the
    // write, and webhook sends neither.
    let body = if matches!(status, 204 | 304) {
        ""
    } else {
        body
    };
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

    #[test]
    fn refusals_and_runs_are_said_as_webhook_says_them() {
        let h = HookAnswer {
            message: "started".into(),
            headers: vec![("X-Hook".into(), "yes".into())],
            success: 202,
            output: true,
            output_on_error: false,
        };
        let ignored = ApiError::Ignored {
            status: 400,
            reason: String::new(),
        };
        let r = render(&h, Err(ignored)).unwrap();
        assert_eq!((r.status, &r.body[..]), (400, NOT_SATISFIED.as_bytes()));
        assert!(r.headers.iter().all(|(n, _)| n != "X-Hook"), "not matched");
        let busy = ApiError::Busy {
            retry_after: 1,
            msg: String::new(),
        };
        assert_eq!(render(&h, Err(busy.clone())).unwrap_err(), busy);
        let body = serde_json::json!({"Success": "Program finished.", "Result": ["out\n"]});
        let done = Response::json(200, &body).with_run("r1");
        let r = render(&h, Ok(done.with_header(REPLAYED, "true"))).unwrap();
        assert_eq!((r.status, &r.body[..]), (202, &b"out\n"[..]));
        assert_eq!(r.run.as_deref(), Some("r1"));
        assert!(r.headers.contains(&(REPLAYED.into(), "true".into())));
        assert!(r.headers.contains(&("X-Hook".into(), "yes".into())));
        let failed = ApiError::RunFailed {
            run: "r2".into(),
            step: 0,
            exit_code: Some(1),
            signal: None,
            stderr: String::new(),
            stdout: "partial".into(),
        };
        let r = render(&h, Err(failed.clone())).unwrap();
        assert_eq!((r.status, &r.body[..]), (500, COMMAND_ERROR.as_bytes()));
        let on_error = HookAnswer {
            output_on_error: true,
            ..h.clone()
        };
        let r = render(&on_error, Err(failed.clone())).unwrap();
        assert_eq!((r.status, &r.body[..]), (500, &b"partial"[..]));
        let quiet = HookAnswer { output: false, ..h };
        let r = render(&quiet, Err(failed)).unwrap();
        assert_eq!((r.status, &r.body[..]), (202, &b"started"[..]));
    }
}
