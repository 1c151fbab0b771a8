//! What a callback sends, by its `format`: the run record (the default),
//! or a short message in the shape a chat or monitoring service documents
//! for its incoming webhooks. Fixed fields, no templates:
//!
//! | format | URL called | body |
//! |---|---|---|
//! | `record` | the URL | the run record (JSON) |
//! | `slack` | the URL | `{"text": <line>}` (Slack incoming webhook) |
//! | `discord` | the URL | `{"content": <line>, "allowed_mentions": {"parse": []}}` |
//! | `ntfy` | the topic URL with `title`, `priority`, `tags` (and `click`) query parameters | the line, as text |
//! | `healthchecks` | `<url>/start`, then `<url>/<exit status>` or `<url>/fail`, `?rid=<run as UUID>` | the line, as text |
//!
//! The line: an emoji, the function, the program, the outcome, the
//! duration, the exit status or error, and the run (a link to its page
//! when `[server] public_url` is set; ntfy's is its `click` action, as
//! tapping the notification opens it, not in the text).

use serde_json::json;
use url::Url;

use crate::state::delivery::{Format, Outcome};
use crate::state::record::{RunRecord, RunState};

/// One message to send: where, and the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The URL to call.
    pub url: String,
    /// The exact body.
    pub body: String,
}

/// The `Content-Type` of a format's body.
pub fn content_type(format: Format) -> &'static str {
    match format {
        Format::Healthchecks | Format::Ntfy => "text/plain; charset=utf-8",
        _ => "application/json",
    }
}

/// The outcome a record's end state reports; `None` for a state that is
/// not an end of a run (queued, running, a skipped occurrence or run, a
/// superseded run: none of them ran).
pub fn outcome_of(state: RunState) -> Option<Outcome> {
    match state {
        RunState::Finished => Some(Outcome::Finished),
        RunState::Failed => Some(Outcome::Failed),
        RunState::TimedOut => Some(Outcome::TimedOut),
        RunState::Cancelled => Some(Outcome::Cancelled),
        RunState::Interrupted => Some(Outcome::Interrupted),
        RunState::Queued | RunState::Running | RunState::Skipped | RunState::Superseded => None,
    }
}

/// The message of a callback in `format` to `url` at the end of `rec`,
/// whose outcome is `outcome` (`Recovered` for a first success after a
/// failure); `record` is the run record's JSON.
pub fn at_end(
    format: Format,
    url: &str,
    rec: &RunRecord,
    outcome: Outcome,
    public_url: Option<&str>,
    record: &str,
) -> Message {
    let line = || line(rec, outcome, public_url);
    let (url, body) = match format {
        Format::Record => (url.to_string(), record.to_string()),
        Format::Slack => (url.to_string(), json!({ "text": line() }).to_string()),
        Format::Discord => (url.to_string(), discord(&line())),
        Format::Ntfy => return ntfy(url, rec, outcome, public_url),
        Format::Healthchecks => {
            let status = match exit_status(rec) {
                Some(code) => code.to_string(),
                None => "fail".to_string(),
            };
            (ping(url, &status, &rec.run), line())
        }
    };
    Message { url, body }
}

/// The `/start` ping of a `healthchecks` callback when `rec` starts.
pub fn at_start(url: &str, rec: &RunRecord) -> Message {
    Message {
        url: ping(url, "start", &rec.run),
        body: String::new(),
    }
}

/// The message when function `function` of `program` becomes overdue
/// (no success within `every`), for a callback in `format`; `record`
/// formats get a small JSON object.
pub fn overdue(
    format: Format,
    url: &str,
    (program, function): (u64, &str),
    every: &str,
    last_success: Option<&str>,
) -> Message {
    let since = last_success.map_or("no success known".to_string(), |t| {
        format!("last success {t}")
    });
    let text =
        format!("⏰ {function} (program {program}) is overdue: no success within {every}; {since}");
    let body = match format {
        Format::Slack => json!({ "text": text }).to_string(),
        Format::Discord => discord(&text),
        Format::Ntfy => {
            let title = format!("{function} overdue");
            let params = [
                ("title", title.as_str()),
                ("priority", "4"),
                ("tags", "alarm_clock"),
            ];
            return Message {
                url: with_query(url, &params),
                body: text,
            };
        }
        Format::Record | Format::Healthchecks => json!({
            "Event": "overdue",
            "Program": program,
            "Function": function,
            "ExpectEvery": every,
            "LastSuccess": last_success,
        })
        .to_string(),
    };
    Message {
        url: url.to_string(),
        body,
    }
}

/// A Discord body: the text, and no pings whatever it holds.
fn discord(text: &str) -> String {
    json!({ "content": text, "allowed_mentions": { "parse": [] } }).to_string()
}

/// An ntfy message: the text as the body, `title`, `priority`, `tags`
/// (and `click`) as query parameters of the topic URL, as ntfy reads them.
fn ntfy(url: &str, rec: &RunRecord, outcome: Outcome, public_url: Option<&str>) -> Message {
    let (priority, tag) = match outcome {
        Outcome::Finished | Outcome::Recovered => ("3", "white_check_mark"),
        Outcome::Failed => ("4", "x"),
        Outcome::TimedOut => ("4", "hourglass"),
        Outcome::Interrupted => ("4", "warning"),
        Outcome::Cancelled => ("2", "no_entry_sign"),
        Outcome::Overdue => ("4", "alarm_clock"),
    };
    let title = format!("{} {}", rec.function, outcome.name().replace('_', " "));
    let link = run_link(rec, public_url);
    let mut params = vec![
        ("title", title.as_str()),
        ("priority", priority),
        ("tags", tag),
    ];
    if let Some(l) = &link {
        params.push(("click", l));
    }
    Message {
        url: with_query(url, &params),
        body: line(rec, outcome, None),
    }
}

/// `url` with `params` added to its query.
fn with_query(url: &str, params: &[(&str, &str)]) -> String {
    let Ok(mut u) = Url::parse(url) else {
        return url.to_string();
    };
    u.query_pairs_mut().extend_pairs(params);
    u.to_string()
}

/// `<url>/<what>?rid=<run as a UUID>`: healthchecks.io's ping URL.
fn ping(url: &str, what: &str, run: &str) -> String {
    let Ok(mut u) = Url::parse(url) else {
        return url.to_string();
    };
    if let Ok(mut segs) = u.path_segments_mut() {
        segs.pop_if_empty().push(what);
    }
    u.query_pairs_mut().append_pair("rid", &uuid_of(run));
    u.to_string()
}

/// The run id's 32 hex digits as a UUID (healthchecks.io's `rid` must be
/// one); the run id itself when it has no 32 hex digits at its end.
pub fn uuid_of(run: &str) -> String {
    let hex = run.rsplit('-').next().unwrap_or(run);
    if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return run.to_string();
    }
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// The exit status healthchecks.io is told: 0 for a success, the failed
/// step's exit code (0 to 255) for a failure; `None` (`/fail`) when no
/// step exited with a code (a timeout, a signal, a cancel, a crash).
fn exit_status(rec: &RunRecord) -> Option<u8> {
    match rec.state {
        RunState::Finished => Some(0),
        RunState::Failed => rec
            .steps
            .iter()
            .rev()
            .find_map(|s| s.exit_code.filter(|c| *c != 0))
            .and_then(|c| u8::try_from(c).ok()),
        _ => None,
    }
}

/// The run's page, when `public_url` is set.
fn run_link(rec: &RunRecord, public_url: Option<&str>) -> Option<String> {
    let base = public_url?.trim_end_matches('/');
    Some(format!("{base}/runs/{}", rec.run))
}

/// The one line of a message.
fn line(rec: &RunRecord, outcome: Outcome, public_url: Option<&str>) -> String {
    let emoji = match outcome {
        Outcome::Finished | Outcome::Recovered => "✅",
        Outcome::Failed => "❌",
        Outcome::TimedOut => "⏱️",
        Outcome::Cancelled => "🚫",
        Outcome::Interrupted => "⚠️",
        Outcome::Overdue => "⏰",
    };
    let program = rec
        .owner
        .program()
        .map_or(String::from("hook"), |p| format!("program {p}"));
    let mut s = format!(
        "{emoji} {} ({program}) {}",
        rec.function,
        outcome.name().replace('_', " ")
    );
    if let Some(d) = rec
        .started_at
        .zip(rec.finished_at)
        .and_then(|(a, b)| b.since(a))
    {
        s.push_str(&format!(" after {:.1}s", d.as_secs_f64()));
    }
    if rec.state == RunState::Failed {
        match exit_status(rec) {
            Some(c) => s.push_str(&format!(": exit status {c}")),
            None => {
                if let Some(e) = &rec.error {
                    s.push_str(&format!(": {}", e.chars().take(200).collect::<String>()));
                }
            }
        }
    }
    match run_link(rec, public_url) {
        Some(link) => s.push_str(&format!(" · run {} {link}", rec.run)),
        None => s.push_str(&format!(" · run {}", rec.run)),
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_urls_and_topics() {
        let run = "vm-523762c43aae9134dc8edbf13af3c260";
        assert_eq!(uuid_of(run), "523762c4-3aae-9134-dc8e-dbf13af3c260");
        assert_eq!(uuid_of("odd"), "odd");
        assert_eq!(
            ping("https://hc-ping.com/abc/", "start", run),
            "https://hc-ping.com/abc/start?rid=523762c4-3aae-9134-dc8e-dbf13af3c260"
        );
        assert_eq!(
            ping("https://hc-ping.com/key/slug?create=1", "0", run),
            "https://hc-ping.com/key/slug/0?create=1&rid=523762c4-3aae-9134-dc8e-dbf13af3c260"
        );
        assert_eq!(
            with_query(
                "https://ntfy.sh/backups",
                &[("title", "a b"), ("tags", "x")]
            ),
            "https://ntfy.sh/backups?title=a+b&tags=x"
        );
    }
}
