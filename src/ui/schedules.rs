//! The schedules page: `GET /schedules`, the schedules and the functions
//! with `expect_every` of the programs in the signed-in member's
//! workspaces. A schedule shows its expression and zone, its last
//! occurrence and what became of it (the run it started, with that run's
//! state now, or why it was skipped) and its next occurrence in its zone;
//! a function with `expect_every` shows its last success and whether it is
//! overdue. The rows are those of `GET /api/schedules` and `GET
//! /api/overdue` (`http::api`), so the page and the API cannot disagree.

use maud::{html, Markup};

use super::runs::{signed_in, workspaces_of};
use super::{finish, html_response, page, top_bar};
use crate::config::{Config, Program};
use crate::http::api::{expectations, schedule_rows, ScheduleRow};
use crate::http::app::App;
use crate::http::{percent_encode, ApiError, Request, Response};
use crate::schedule::overdue::Expectation;

/// `GET /schedules`: the page for a signed-in member; the login form for a
/// browser without a session, 401 for other clients.
///
/// # Errors
/// `invalid_parameter` for any query parameter (the page takes none).
pub fn list(app: &App, cfg: &Config, req: &Request) -> Result<Response, ApiError> {
    let s = match signed_in(app, cfg, req, "/schedules") {
        Ok(s) => s,
        Err(r) => return Ok(r),
    };
    if let Some((k, _)) = req.query.first() {
        let e = ApiError::InvalidParameter {
            name: k.clone(),
            msg: format!("Unknown parameter '{k}'. The schedules page takes none."),
        };
        return finish(req, Err(e));
    }
    let wss = workspaces_of(cfg, &s.user);
    let visible = |p: &Program| p.workspace.as_deref().is_some_and(|w| wss.contains(w));
    let rows = schedule_rows(app, cfg, visible);
    let due = expectations(app, cfg, visible);
    let body = html! {
        (top_bar(&s))
        main {
            h1 { "Schedules" }
            @if !cfg.server.fire_schedules {
                p class="muted" {
                    "This instance fires no schedules ([server] schedules = \"off\")."
                }
            }
            (schedule_table(app, &rows))
            h2 { "Expected runs" }
            (overdue_table(cfg, &due))
        }
    };
    Ok(html_response(200, page("Schedules", body)))
}

fn schedule_table(app: &App, rows: &[ScheduleRow]) -> Markup {
    html! {
        table class="runs" {
            thead { tr {
                th { "Program" } th { "Function" } th { "Schedule" } th { "Cron" }
                th { "Zone" } th { "Last occurrence" } th { "Outcome" } th { "Next occurrence" }
            } }
            tbody {
                @for r in rows {
                    tr {
                        td { (r.program_name) }
                        td { (r.function) }
                        td { (r.name) @if !r.active { " " span class="muted" { "(inactive)" } } }
                        td { code { (r.cron) } }
                        td { (r.timezone) }
                        td { (or_dash(r.last_at.map(|t| format!("{t:.0}")))) }
                        td { (outcome(app, r)) }
                        td { (or_dash(r.next_local.clone())) }
                    }
                }
                @if rows.is_empty() {
                    tr { td colspan="8" class="muted" { "No schedules." } }
                }
            }
        }
    }
}

/// What became of the last occurrence: a link to the run it started and
/// that run's state now, or why it did not run.
fn outcome(app: &App, r: &ScheduleRow) -> Markup {
    let Some(run) = r.last_run() else {
        return html! { (or_dash(r.last_outcome.clone())) };
    };
    let state = app.store.get(run).map(|rec| rec.state.name());
    html! {
        a href={ "/runs/" (percent_encode(run)) } { code { (run) } }
        @if let Some(state) = state {
            " " span class={ "state state-" (state) } { (state) }
        }
    }
}

fn overdue_table(cfg: &Config, due: &[Expectation]) -> Markup {
    html! {
        table class="runs" {
            thead { tr {
                th { "Program" } th { "Function" } th { "Expected every" }
                th { "Last success" } th { "Status" }
            } }
            tbody {
                @for e in due {
                    tr {
                        td { (cfg.program(e.program).map_or_else(|| e.program.to_string(), |p| p.name.clone())) }
                        td { (e.function) }
                        td { (humantime::format_duration(e.every)) }
                        td { (or_dash(e.last_success.map(|t| format!("{t:.0}")))) }
                        td {
                            @if e.overdue {
                                span class="state state-failed" { "overdue" }
                            } @else {
                                span class="state state-finished" { "on time" }
                            }
                        }
                    }
                }
                @if due.is_empty() {
                    tr { td colspan="5" class="muted" { "No function sets expect_every." } }
                }
            }
        }
    }
}

fn or_dash(s: Option<String>) -> String {
    s.unwrap_or_else(|| "\u{2014}".into())
}
