//! The runs pages: `GET /runs`, the runs of the programs in the signed-in
//! member's workspaces (newest first, filtered by tool, program and state,
//! paged), and `GET /runs/<id>`, one run with its steps, Result and output
//! (followed live by `app.js` while the run is not over), with a Cancel
//! form (`POST /runs/<id>/cancel`, CSRF token in the form).
//!
//! Program output is untrusted: it is escaped like every other value, and
//! terminal escape sequences (ANSI colours, 7-bit or 8-bit) and
//! bidirectional controls are removed ([`strip_ansi`]).

use std::collections::BTreeSet;
use std::sync::Arc;

use maud::{html, Markup, PreEscaped};
use serde_json::Value;

use super::{
    csrf_field, field, finish, form, html_response, login_required, page, redirect, top_bar,
};
use crate::access::{check_csrf, Carrier, Session, SignedIn, User};
use crate::config::Config;
use crate::http::app::App;
use crate::http::{percent_encode, ApiError, Request, Response};
use crate::invoke;
use crate::runs;
use crate::runs::follow;
use crate::runs::{list, Asker};
use crate::state::delivery::Delivery;
use crate::state::output::{self, Frame, Stream};
use crate::state::record::{Origin, Owner, RunRecord, StepReport, ALL_STATES};
use crate::state::store::{Cursor, RunFilter};

/// The Content-Security-Policy of the page of a run that is not over: the
/// one of every page, plus `connect-src 'self'` for its event stream.
pub const CSP_FOLLOW: &str = "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; \
                              connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The signed-in user, or the answer for a request without a session.
pub(super) fn signed_in(
    app: &App,
    cfg: &Config,
    req: &Request,
    next: &str,
) -> Result<Session, Response> {
    match app.access.session(cfg, req) {
        Ok(Some(SignedIn { session, .. })) => Ok(session),
        Ok(None) => Err(login_required(req, next).unwrap_or_else(Response::from)),
        Err(e) => Err(Response::from(e)),
    }
}

/// The workspaces `user` is a member of.
pub(super) fn workspaces_of<'a>(cfg: &'a Config, user: &str) -> BTreeSet<&'a str> {
    cfg.workspaces
        .iter()
        .filter(|(_, w)| w.members.iter().any(|m| m == user))
        .map(|(n, _)| n.as_str())
        .collect()
}

/// `GET /runs`: the runs of the member's workspaces.
///
/// # Errors
/// 401 for a non-browser client without a session; 400
/// `invalid_parameter` for a bad filter.
pub fn list(app: &App, cfg: &Config, req: &Request) -> Result<Response, ApiError> {
    let s = match signed_in(app, cfg, req, "/runs") {
        Ok(s) => s,
        Err(r) => return Ok(r),
    };
    finish(req, list_page(app, cfg, req, &s))
}

fn list_page(app: &App, cfg: &Config, req: &Request, s: &Session) -> Result<Response, ApiError> {
    // The same query and scope as `GET /api/runs`: a hooks-file hook's
    // run belongs to no workspace, so it is never listed here.
    let mut filter = list::parse(req, &[])?;
    filter.scope = list::scope_of(cfg, &Asker::User(User::Session(s.clone())));
    let wss = workspaces_of(cfg, &s.user);
    let page_of = app.store.page(&filter).map_err(|e| ApiError::storage(&e))?;
    let runs = page_of.runs;
    let body = html! {
        (top_bar(s))
        main {
            h1 { "Runs" }
            (filter_form(cfg, &wss, &filter))
            table class="runs" {
                thead { tr {
                    th { "Run" } th { "State" } th { "Program" } th { "Function" }
                    th { "Origin" } th { "Started" } th { "Duration" }
                } }
                tbody {
                    @for r in &runs { (list_row(cfg, r)) }
                    @if runs.is_empty() {
                        tr { td colspan="7" class="muted" { "No runs." } }
                    }
                }
            }
            (pager(req, filter.before.is_some(), page_of.next))
        }
    };
    Ok(html_response(200, page("Runs", body)))
}

fn list_row(cfg: &Config, r: &RunRecord) -> Markup {
    let program = match r.owner {
        Owner::Program(id) => cfg
            .program(id)
            .map_or_else(|| id.to_string(), |p| p.name.clone()),
        Owner::Hook => format!("hook {}", r.function),
    };
    html! {
        tr {
            td { a href={ "/runs/" (percent_encode(&r.run)) } { code { (r.run) } } }
            td { span class={ "state state-" (r.state.name()) } { (r.state.name()) } }
            td { (program) }
            td { (r.function) }
            td { (origin(r)) }
            td { (r.started_at.unwrap_or(r.created_at)) }
            td { (duration(r)) }
        }
    }
}

/// Who started the run, and through which tool environment; for a
/// schedule's, the occurrence and why it was skipped.
fn origin(r: &RunRecord) -> String {
    let mut s = match &r.tool {
        Some(t) => format!("{} via {t}", r.by),
        None => r.by.to_string(),
    };
    if let Some(at) = r.scheduled_at {
        s.push_str(&format!(" for {at}"));
    }
    if let Some(why) = r.skipped {
        s.push_str(&format!(" (skipped: {})", why.name()));
    }
    s
}

fn filter_form(cfg: &Config, wss: &BTreeSet<&str>, f: &RunFilter) -> Markup {
    let tools: Vec<&str> = cfg
        .tools
        .values()
        .filter(|t| wss.contains(t.workspace.as_str()))
        .map(|t| t.name.as_str())
        .collect();
    let programs: Vec<(u64, &str)> = cfg
        .programs
        .values()
        .filter(|p| p.workspace.as_deref().is_some_and(|w| wss.contains(w)))
        .map(|p| (p.id, p.name.as_str()))
        .collect();
    html! {
        form method="get" action="/runs" class="filters" {
            label { "Tool " select name="tool" {
                option value="" selected[f.tool.is_none()] { "any tool" }
                @for t in &tools {
                    option value=(t) selected[f.tool.as_deref() == Some(*t)] { (t) }
                }
            } }
            label { "Program " select name="program" {
                option value="" selected[f.program.is_none()] { "any program" }
                @for (id, name) in &programs {
                    option value=(id) selected[f.program == Some(*id)] { (name) " (" (id) ")" }
                }
            } }
            label { "State " select name="state" {
                option value="" selected[f.state.is_none()] { "any state" }
                @for st in ALL_STATES {
                    option value=(st.name()) selected[f.state == Some(st)] { (st.name()) }
                }
            } }
            button type="submit" { "Filter" }
        }
    }
}

/// Links to the newest page and the next older one, keeping the filter
/// (the cursor only goes back in time: "Newest" starts again).
fn pager(req: &Request, paged: bool, next: Option<Cursor>) -> Markup {
    let link = |cursor: Option<Cursor>| {
        let mut q: String = req
            .query
            .iter()
            .filter(|(k, v)| k != "cursor" && !v.is_empty())
            .map(|(k, v)| format!("{}={}&", percent_encode(k), percent_encode(v)))
            .collect();
        if let Some(c) = cursor {
            q.push_str(&format!("cursor={c}"));
        }
        format!("/runs?{}", q.trim_end_matches('&'))
    };
    html! {
        nav class="pager" {
            @if paged { a href=(link(None)) { "\u{2190} Newest" } }
            " "
            @if let Some(c) = next { a href=(link(Some(c))) { "Older \u{2192}" } }
        }
    }
}

/// The run `id` if the session's user may see it: a member of its
/// program's workspace.
fn visible_run(app: &App, cfg: &Config, s: &Session, id: &str) -> Result<RunRecord, ApiError> {
    let rec = runs::record(app, cfg, id)?;
    let ws = rec
        .owner
        .program()
        .and_then(|id| cfg.program(id))
        .and_then(|p| p.workspace.as_deref());
    match ws {
        Some(ws) if workspaces_of(cfg, &s.user).contains(ws) => Ok(rec),
        _ => Err(ApiError::RunNotFound),
    }
}

/// `GET /runs/<id>`: one run.
///
/// # Errors
/// 401 for a non-browser client without a session; 404 for a run the
/// member may not see.
pub fn show(app: &App, cfg: &Config, req: &Request, id: &str) -> Result<Response, ApiError> {
    let s = match signed_in(app, cfg, req, &page_of(id)) {
        Ok(s) => s,
        Err(r) => return Ok(r),
    };
    finish(
        req,
        visible_run(app, cfg, &s, id).map(|rec| run_page(app, cfg, &s, &rec)),
    )
}

/// The page of run `id`.
fn page_of(id: &str) -> String {
    format!("/runs/{}", percent_encode(id))
}

/// What the buttons of a run's page share: the session (or the answer
/// that asks to sign in), the form's CSRF token, and the run if the
/// user may see it; then `act` with the run and the user as its origin.
/// The answer as `finish` makes it (a redirect, or the error's page).
fn run_action(
    app: &App,
    cfg: &Config,
    req: &Request,
    id: &str,
    act: impl FnOnce(RunRecord, Origin) -> Result<Response, ApiError>,
) -> Result<Response, ApiError> {
    let s = match signed_in(app, cfg, req, &page_of(id)) {
        Ok(s) => s,
        Err(r) => return Ok(r),
    };
    let inner = || {
        let f = form(req)?;
        check_csrf(cfg, req, Some(&s), Carrier::Form(field(&f, "csrf")))?;
        let rec = visible_run(app, cfg, &s, id)?;
        act(rec, Origin::Session(s.user.clone()))
    };
    finish(req, inner())
}

/// `POST /runs/<id>/cancel`: the Cancel button; back to the run's page.
///
/// # Errors
/// 403 `csrf_rejected` without the session's token; 409 `run_ended`.
pub fn cancel(app: &App, cfg: &Config, req: &Request, id: &str) -> Result<Response, ApiError> {
    run_action(app, cfg, req, id, |rec, by| {
        runs::stop(app, cfg, rec, &by)?;
        Ok(redirect(&page_of(id)))
    })
}

/// `POST /runs/<id>/rerun`: the Re-run button; on to the new run's page.
///
/// # Errors
/// 403 `csrf_rejected` without the session's token; those of
/// `invoke::rerun::rerun`.
pub fn rerun(app: &App, cfg: &Arc<Config>, req: &Request, id: &str) -> Result<Response, ApiError> {
    run_action(app, cfg, req, id, |rec, by| {
        let started = invoke::rerun::rerun(app, cfg, &rec, by, true)?;
        Ok(redirect(&page_of(started.run.as_deref().unwrap_or(id))))
    })
}

/// `POST /runs/<id>/callbacks/<delivery>/redeliver`: the Redeliver button;
/// back to the run's page.
///
/// # Errors
/// 403 `csrf_rejected` without the session's token; those of
/// `runs::redeliver`.
pub fn redeliver(
    app: &App,
    cfg: &Config,
    req: &Request,
    id: &str,
    delivery: &str,
) -> Result<Response, ApiError> {
    run_action(app, cfg, req, id, |rec, by| {
        runs::redeliver_as(app, &rec, delivery, &by)?;
        Ok(redirect(&page_of(id)))
    })
}

/// A button that POSTs the session's CSRF token to `action`.
fn post_button(s: &Session, action: &str, id: &str, label: &str) -> Markup {
    html! {
        form method="post" action=(action) class="cancel" {
            (csrf_field(s))
            button type="submit" id=(id) { (label) }
        }
    }
}

fn run_page(app: &App, cfg: &Config, s: &Session, r: &RunRecord) -> Response {
    let program = match r.owner {
        Owner::Program(id) => cfg
            .program(id)
            .map_or_else(|| id.to_string(), |p| format!("{} ({})", p.name, p.id)),
        Owner::Hook => format!("hook {}", r.function),
    };
    let live = !r.state.is_terminal();
    let follow = live.then(|| format!("/api/runs/{}/output?follow=1", percent_encode(&r.run)));
    let result = r
        .result
        .as_ref()
        .map(|v| serde_json::to_string_pretty(&strip_value(v)).unwrap_or_default());
    let body = html! {
        (top_bar(s))
        main {
            p { a href="/runs" { "\u{2190} Runs" } }
            h1 { "Run " code { (r.run) } }
            p { "State: " span id="state" class={ "state state-" (r.state.name()) } { (r.state.name()) } }
            @if live {
                (post_button(s, &format!("/runs/{}/cancel", percent_encode(&r.run)), "cancel", "Cancel"))
            } @else {
                (post_button(s, &format!("/runs/{}/rerun", percent_encode(&r.run)), "rerun", "Re-run"))
            }
            dl class="facts" {
                dt { "Program" } dd { (program) }
                dt { "Function" } dd { (r.function) }
                dt { "Origin" } dd { (origin(r)) }
                dt { "Created" } dd { (r.created_at) }
                dt { "Started" } dd { (or_dash(r.started_at)) }
                dt { "Finished" } dd { (or_dash(r.finished_at)) }
                dt { "Duration" } dd { (duration(r)) }
                @if let Some(e) = &r.error { dt { "Error" } dd { (strip_ansi(e)) } }
                @if let Some(at) = r.retry_at {
                    dt { "Next attempt" } dd id="retry-at" { (at) }
                }
                @if let Some(g) = &r.group {
                    dt { "Group" } dd id="group" { code { (g) } }
                }
                @if let Some(by) = &r.superseded_by {
                    dt { "Superseded by" } dd id="superseded-by" { a href={ "/runs/" (percent_encode(by)) } { code { (by) } } }
                }
                @if let Some(of) = &r.rerun_of {
                    dt { "Re-run of" } dd { a href={ "/runs/" (percent_encode(of)) } { code { (of) } } }
                }
                @if !r.reruns.is_empty() {
                    dt { "Re-runs" } dd id="reruns" {
                        @for x in &r.reruns { a href={ "/runs/" (percent_encode(x)) } { code { (x) } } " " }
                    }
                }
            }
            h2 { "Steps" }
            (steps_table(&r.steps))
            @if !r.attempts.is_empty() {
                h2 { "Earlier attempts" }
                (attempts_table(r))
            }
            @if let Some(text) = &result {
                h2 { "Result" }
                pre id="result" { (text) }
            }
            @if !r.callbacks.is_empty() {
                h2 { "Callbacks" }
                (callbacks_table(s, &r.run, &r.callbacks))
            }
            h2 { "Output" }
            pre id="output" class="output" data-follow=[follow] {
                (output_html(r.output.clone(), &app.store.output_path(&r.run)))
            }
        }
    };
    let mut resp = html_response(200, page("Run", body));
    if live {
        // The page's own script reads the run's events from this origin;
        // everything else stays as on every page.
        for (k, v) in &mut resp.headers {
            if k == "Content-Security-Policy" {
                *v = CSP_FOLLOW.to_string();
            }
        }
    }
    resp
}

fn steps_table(steps: &[StepReport]) -> Markup {
    html! {
        @if steps.is_empty() {
            p class="muted" { "No step has run." }
        } @else {
            table class="steps" {
                thead { tr {
                    th { "Step" } th { "Kind" } th { "Exit code" } th { "Signal" } th { "Duration" }
                } }
                tbody {
                    @for (i, s) in steps.iter().enumerate() {
                        tr {
                            td { (i) }
                            td { (s.kind.name()) }
                            td { (or_dash(s.exit_code)) }
                            td { (or_dash(s.signal)) }
                            td { (s.duration_ms) " ms" }
                        }
                    }
                }
            }
        }
    }
}

/// The earlier attempts of a run with `[functions.retry]`: number, how
/// it ended, when, and why.
fn attempts_table(r: &RunRecord) -> Markup {
    html! {
        table class="steps" id="attempts" {
            thead { tr {
                th { "Attempt" } th { "State" } th { "Started" } th { "Finished" } th { "Error" }
            } }
            tbody {
                @for a in &r.attempts {
                    tr {
                        td { (a.attempt) }
                        td { span class={ "state state-" (a.state.name()) } { (a.state.name()) } }
                        td { (or_dash(a.started_at)) }
                        td { (a.finished_at) }
                        td { (a.error.as_deref().map(strip_ansi).unwrap_or_default()) }
                    }
                }
            }
        }
    }
}

/// `v`, or an em dash when there is none.
fn or_dash(v: Option<impl std::fmt::Display>) -> String {
    v.map_or_else(|| "\u{2014}".to_string(), |v| v.to_string())
}

/// The run's completion callbacks: one row per delivery (URL, state, why it
/// failed), then one row per kept attempt (time, status or error).
fn callbacks_table(s: &Session, run: &str, deliveries: &[Delivery]) -> Markup {
    html! {
        table class="steps" id="callbacks" {
            thead { tr {
                th { "URL" } th { "Source" } th { "State" } th { "Attempt" } th { "Status or error" } th {}
            } }
            tbody {
                @for d in deliveries {
                    tr class="callback" {
                        td { code { (d.url) } } td { (d.source.name()) }
                        td { span class={ "state state-" (d.state.name()) } { (d.state.name()) } }
                        td { (d.attempt_count) " attempt(s)" }
                        td { (d.error.as_deref().map(strip_ansi).unwrap_or_default()) }
                        td {
                            @if d.state.is_final() {
                                (post_button(s, &format!("/runs/{}/callbacks/{}/redeliver", percent_encode(run), percent_encode(&d.delivery)), &format!("redeliver-{}", d.delivery), "Redeliver"))
                            }
                        }
                    }
                    @for a in &d.attempts {
                        tr class="attempt" {
                            td {} td {} td {} td { (a.at) }
                            td {
                                @if let Some(c) = a.status { (c) } @else { (a.error.as_deref().unwrap_or("")) }
                                " (" (a.duration_ms) " ms)"
                            }
                            td {}
                        }
                    }
                }
            }
        }
    }
}

/// The kept output (`inline` when the record has it, else the file at
/// `path`), interleaved as printed, stderr marked; escaped (by maud) and
/// without terminal escape sequences.
fn output_html(inline: Option<output::Inline>, path: &std::path::Path) -> Markup {
    let Some(file) = inline
        .map(output::Stored::Inline)
        .or_else(|| output::open(path))
    else {
        return PreEscaped(String::new());
    };
    let mut out = String::new();
    let mut text: [output::Utf8Carry; 2] = Default::default();
    let mut offset = output::Pos::default();
    loop {
        let (frames, next) = output::read_frames(&file, offset);
        if frames.is_empty() {
            return PreEscaped(out);
        }
        offset = next;
        for f in frames {
            let piece = match f {
                Frame::Data(Stream::Stdout, d) => html! { (strip_ansi(&text[0].feed(&d))) },
                Frame::Data(Stream::Stderr, d) => {
                    html! { span class="stderr" { (strip_ansi(&text[1].feed(&d))) } }
                }
                Frame::Truncated(s) => html! {
                    span class="note" { "[" (follow::stream_name(s)) " truncated at max_output_bytes]" } "\n"
                },
            };
            out.push_str(&piece.into_string());
        }
    }
}

/// `s` without terminal escape sequences (CSI such as colours, OSC such as
/// titles and links, DCS, SOS, PM and APC strings, and other escapes),
/// whether introduced by ESC or by their 8-bit C1 control (U+009B for CSI,
/// U+009D for OSC…), without other control characters than newline and
/// tab, and without the bidirectional embedding, override and isolate
/// controls (U+202A–U+202E, U+2066–U+2069), which would make the page show
/// the output in another order than it was written ("Trojan Source").
/// One pass, each character looked at once.
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        match introduced(c) {
            Some(mut seq) => {
                while let Some(next) = skip(seq, &mut it) {
                    seq = next;
                }
            }
            None if keep(c) => out.push(c),
            None => {}
        }
    }
    out
}

/// The characters [`strip_ansi`] reads.
type Chars<'a> = std::iter::Peekable<std::str::Chars<'a>>;

/// What a control character starts, read after it.
#[derive(Clone, Copy)]
enum Seq {
    /// After ESC: one of the others, or an escape of its own (`ESC ( B`).
    Esc,
    /// Parameters and intermediates, then one final character.
    Csi,
    /// A control string up to ST (`ESC \` or U+009C); BEL ends an OSC too.
    Str { bel: bool },
}

/// The sequence control character `c` introduces, if any.
fn introduced(c: char) -> Option<Seq> {
    match c {
        '\u{1b}' => Some(Seq::Esc),
        '\u{9b}' => Some(Seq::Csi),
        '\u{9d}' => Some(Seq::Str { bel: true }),
        // DCS, SOS, PM, APC.
        '\u{90}' | '\u{98}' | '\u{9e}' | '\u{9f}' => Some(Seq::Str { bel: false }),
        _ => None,
    }
}

/// Skip the rest of `seq`; the sequence that follows it at once (an ESC
/// that ends a control string starts one). Each call takes at least one
/// character or ends the sequence, so the caller's loop is linear.
fn skip(seq: Seq, it: &mut Chars) -> Option<Seq> {
    let within = |lo: char, hi: char| move |c: &char| (lo..=hi).contains(c);
    match seq {
        Seq::Esc => match it.peek()? {
            // ESC [ is the 7-bit form of CSI (U+009B = '[' + 0x40), and
            // so on for the others.
            '[' | ']' | 'P' | 'X' | '^' | '_' => {
                let c = it.next()?;
                introduced(char::from_u32(u32::from(c) + 0x40)?)
            }
            _ => {
                // nF escapes have intermediates before their final
                // character; anything else after a lone ESC is text.
                while it.next_if(within(' ', '/')).is_some() {}
                it.next_if(within('0', '~'));
                None
            }
        },
        Seq::Csi => {
            // A character that is neither ends the sequence and is text.
            while it.next_if(within(' ', '?')).is_some() {}
            it.next_if(within('@', '~'));
            None
        }
        Seq::Str { bel } => loop {
            match it.next()? {
                '\u{9c}' => return None,
                '\u{7}' if bel => return None,
                c => {
                    if let Some(next) = introduced(c) {
                        return Some(next);
                    }
                }
            }
        },
    }
}

/// Whether [`strip_ansi`] keeps `c` (not the start of a sequence).
fn keep(c: char) -> bool {
    let bidi = matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    matches!(c, '\n' | '\t') || !(c.is_control() || bidi)
}

/// `v` with [`strip_ansi`] applied to every string in it.
fn strip_value(v: &Value) -> Value {
    match v {
        Value::String(s) => Value::String(strip_ansi(s)),
        Value::Array(a) => Value::Array(a.iter().map(strip_value).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, v)| (strip_ansi(k), strip_value(v)))
                .collect(),
        ),
        v => v.clone(),
    }
}

/// The run's duration, `1.234 s`, from its start to its end (or `—`).
fn duration(r: &RunRecord) -> String {
    match (r.started_at, r.finished_at) {
        (Some(a), Some(b)) => or_dash(
            b.since(a)
                .map(|d| format!("{:.3} s", d.as_millis() as f64 / 1000.0)),
        ),
        _ => "\u{2014}".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ansi_sequences_and_controls_are_removed() {
        assert_eq!(strip_ansi("\u{1b}[1;31mred\u{1b}[0m ok\n"), "red ok\n");
        assert_eq!(strip_ansi("a\u{1b}]0;title\u{7}b"), "ab");
        assert_eq!(strip_ansi("a\u{1b}]8;;http://x\u{1b}\\link"), "alink");
        assert_eq!(strip_ansi("bell\u{7}\r\tx"), "bell\tx");
        assert_eq!(strip_ansi("<script>"), "<script>", "escaping is separate");
    }

    #[test]
    fn c1_sequences_go_whole_and_bidi_controls_go() {
        let cases = [
            ("\u{9b}1;31mred\u{9b}0m ok", "red ok"),
            ("a\u{9d}0;title\u{9c}b", "ab"),
            ("a\u{9d}8;;http://x\u{7}link", "alink"),
            ("a\u{90}q$p\u{1b}\\b", "ab"),
            ("a\u{1b}P1$r0m\u{9c}b\u{1b}_apc\u{1b}\\c", "abc"),
            // A string ended by the start of another sequence.
            ("a\u{9d}title\u{1b}[31mb", "ab"),
            ("a\u{1b}(Bb\u{1b}7c\u{1b}", "abc"),
            // A CSI cut short: what ends it is text.
            ("a\u{1b}[31\nb", "a\nb"),
            ("if x \u{202e}\u{2066}// y\u{2069}\u{202c} {", "if x // y {"),
        ];
        for (input, want) in cases {
            assert_eq!(strip_ansi(input), want, "{input:?}");
        }
    }

    /// Many sequences that never end, of every kind: one pass (a loop
    /// that looked for each one's end from its start would take minutes).
    #[test]
    fn hostile_output_is_stripped_in_one_pass() {
        let unit = "\u{1b}]\u{9d}\u{1b}P\u{90}\u{1b}[1;\u{9b}2;\u{1b}(x\u{202e}";
        let input = unit.repeat(200_000);
        assert_eq!(strip_ansi(&input), "", "nothing printable is left");
        let text = format!("{}\nend", "\u{9b}".repeat(500_000));
        assert_eq!(strip_ansi(&text), "\nend");
    }

    #[test]
    fn the_duration_runs_from_start_to_end() {
        let rec = |started: &str, finished: &str| {
            let line = format!(
                r#"{{"Run":"{:032x}","State":"finished","Function":"f","CreatedAt":"2026-11-22T04:20:00.000Z"{started}{finished}}}"#,
                1
            );
            serde_json::from_str::<RunRecord>(&line).unwrap()
        };
        let start = r#","StartedAt":"2026-11-22T04:20:34.567Z""#;
        let end = r#","FinishedAt":"2026-11-22T04:21:36.001Z""#;
        assert_eq!(duration(&rec(start, end)), "61.434 s");
        assert_eq!(duration(&rec(start, "")), "\u{2014}");
        // A clock set back while it ran.
        let before = r#","FinishedAt":"2026-11-22T04:20:00.000Z""#;
        assert_eq!(duration(&rec(start, before)), "\u{2014}");
    }
}
