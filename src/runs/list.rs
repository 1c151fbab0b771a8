//! `GET /api/runs`: the runs a credential may see, newest first, filtered
//! and paged by a cursor; the Runs page (`ui/runs.rs`) reads its query with
//! the same [`parse`] and scopes it with the same [`scope_of`].
//!
//! Who sees what follows `GET /api/runs/<id>` (`runs::authorize`): an API
//! key the programs it may access, and hooks-file hooks' runs when it has
//! no scope; a person (bearer application key or session) the programs of
//! the workspaces they are a member of (an application key: its one
//! workspace). Only programs of the current config are visible.

use std::collections::BTreeSet;

use serde::Serialize;

use super::{authenticate, Asker, Takes};
use crate::access::{self, User};
use crate::config::Config;
use crate::http::app::App;
use crate::http::{ApiError, Request, Response};
use crate::state::record::{Origin, RunRecord, RunState, ALL_STATES};
use crate::state::store::{Cursor, OriginFilter, RunFilter, Scope, DEFAULT_PAGE, MAX_PAGE};
use crate::state::time::Time;

/// The filter parameters (both the API and the Runs page take them).
pub const FILTER_PARAMS: [&str; 9] = [
    "program", "function", "tool", "origin", "state", "since", "until", "cursor", "limit",
];

/// Longest function, tool or origin text a filter takes, in bytes.
const MAX_NAME: usize = 256;

/// The origin kinds `origin=<kind>` matches all of.
const ORIGIN_KINDS: [&str; 4] = ["api_key", "app_key", "session", "schedule"];

fn bad(name: &str, msg: impl Into<String>) -> ApiError {
    ApiError::InvalidParameter {
        name: name.into(),
        msg: msg.into(),
    }
}

/// The filter a query asks for, with [`Scope::All`] (the caller narrows
/// it with [`scope_of`]). Empty values are no filter. `extra` are the other
/// parameters the endpoint takes.
///
/// # Errors
/// 400 `invalid_parameter` naming the first bad or unknown parameter.
pub fn parse(req: &Request, extra: &[&str]) -> Result<RunFilter, ApiError> {
    if let Some((k, _)) = req
        .query
        .iter()
        .find(|(k, _)| !FILTER_PARAMS.contains(&k.as_str()) && !extra.contains(&k.as_str()))
    {
        let mut known: Vec<&str> = FILTER_PARAMS.to_vec();
        known.extend(extra);
        return Err(bad(
            k,
            format!("Unknown parameter '{k}'. Accepted: {}.", known.join(", ")),
        ));
    }
    let get = |name: &'static str| -> Result<Option<&str>, ApiError> {
        Ok(req.query_one(name)?.filter(|v| !v.is_empty()))
    };
    let name = |n: &'static str| -> Result<Option<String>, ApiError> {
        match get(n)? {
            Some(v) if v.len() > MAX_NAME => {
                Err(bad(n, format!("{n} is longer than {MAX_NAME} bytes.")))
            }
            v => Ok(v.map(str::to_string)),
        }
    };
    let (since, until) = (time(get("since")?, "since")?, time(get("until")?, "until")?);
    if let (Some(s), Some(u)) = (since, until) {
        if u < s {
            return Err(bad("until", "until must not be before since."));
        }
    }
    Ok(RunFilter {
        scope: Scope::All,
        program: program(get("program")?)?,
        function: name("function")?,
        tool: name("tool")?,
        origin: origin(get("origin")?)?,
        state: state(get("state")?)?,
        since,
        until,
        before: cursor(get("cursor")?)?,
        limit: limit(get("limit")?)?,
    })
}

fn program(v: Option<&str>) -> Result<Option<u64>, ApiError> {
    let Some(v) = v else { return Ok(None) };
    let ok = v.len() <= 19 && v.bytes().all(|b| b.is_ascii_digit());
    ok.then(|| v.parse().ok())
        .flatten()
        .map(Some)
        .ok_or_else(|| bad("program", "program must be a program id (1 to 19 digits)."))
}

fn state(v: Option<&str>) -> Result<Option<RunState>, ApiError> {
    let Some(v) = v else { return Ok(None) };
    RunState::from_name(v).map(Some).ok_or_else(|| {
        let names: Vec<&str> = ALL_STATES.iter().map(|s| s.name()).collect();
        bad(
            "state",
            format!("state must be one of {}.", names.join(", ")),
        )
    })
}

fn time(v: Option<&str>, name: &str) -> Result<Option<Time>, ApiError> {
    let Some(v) = v else { return Ok(None) };
    if v.len() > 64 {
        return Err(bad(name, format!("{name} is too long for a time.")));
    }
    v.parse()
        .map(Some)
        .map_err(|e| bad(name, format!("{name}: {e}.")))
}

fn origin(v: Option<&str>) -> Result<Option<OriginFilter>, ApiError> {
    let Some(v) = v else { return Ok(None) };
    if v.len() > MAX_NAME {
        return Err(bad(
            "origin",
            format!("origin is longer than {MAX_NAME} bytes."),
        ));
    }
    if ORIGIN_KINDS.contains(&v) {
        return Ok(Some(OriginFilter::Kind(v.into())));
    }
    match Origin::from(v.to_string()) {
        Origin::Other(_) | Origin::Unknown => Err(bad(
            "origin",
            format!(
                "origin must be public, cli, one of {} or <kind>:<name> (as a run's By).",
                ORIGIN_KINDS.join(", ")
            ),
        )),
        o => Ok(Some(OriginFilter::Exact(o))),
    }
}

fn cursor(v: Option<&str>) -> Result<Option<Cursor>, ApiError> {
    let Some(v) = v else { return Ok(None) };
    if v.len() > 64 {
        return Err(bad(
            "cursor",
            "cursor is not one this server gave (too long).",
        ));
    }
    v.parse().map(Some).map_err(|()| {
        bad(
            "cursor",
            "cursor is not one this server gave (use Next of the last page).",
        )
    })
}

fn limit(v: Option<&str>) -> Result<usize, ApiError> {
    let Some(v) = v else { return Ok(DEFAULT_PAGE) };
    let n = (v.len() <= 3 && v.bytes().all(|b| b.is_ascii_digit()))
        .then(|| v.parse::<usize>().ok())
        .flatten()
        .filter(|n| (1..=MAX_PAGE).contains(n));
    n.ok_or_else(|| {
        bad(
            "limit",
            format!("limit must be a number from 1 to {MAX_PAGE}."),
        )
    })
}

/// What `asker` may see, as a [`Scope`]: an unscoped API key every run,
/// those of programs since removed too.
pub fn scope_of(cfg: &Config, asker: &Asker) -> Scope {
    if matches!(asker, Asker::Key(k) if k.is_unscoped()) {
        return Scope::All;
    }
    let programs: BTreeSet<u64> = match asker {
        Asker::Key(key) => cfg
            .programs
            .values()
            .filter(|p| key.may_access(p))
            .map(|p| p.id)
            .collect(),
        Asker::User(user) => {
            let (name, only) = match user {
                User::AppKey { member, workspace } => (member.as_str(), Some(workspace.as_str())),
                User::Session(s) => (s.user.as_str(), None),
            };
            cfg.programs
                .values()
                .filter(|p| {
                    p.workspace.as_deref().is_some_and(|w| {
                        only.is_none_or(|o| o == w) && access::is_member(cfg, w, name)
                    })
                })
                .map(|p| p.id)
                .collect()
        }
    };
    let hooks = matches!(asker, Asker::Key(k) if k.is_unscoped());
    Scope::Only { programs, hooks }
}

/// `GET /api/runs`: a page of the runs the caller may see.
///
/// # Errors
/// 401/429 as `runs::authenticate`; 400 `invalid_parameter` for a bad
/// filter, cursor or limit; 503 `state_unavailable` while the database
/// cannot be read.
pub fn list(app: &App, cfg: &Config, req: &Request) -> Result<Response, ApiError> {
    let asker = authenticate(app, cfg, req, Takes::KeysAndUsers)?;
    let mut filter = parse(req, &["api_key"])?;
    filter.scope = scope_of(cfg, &asker);
    let page = app.store.page(&filter).map_err(|e| ApiError::storage(&e))?;
    // Written straight from the records: through a `Value` tree first, a
    // page of 200 took twice as long.
    let body = Page {
        runs: &page.runs,
        next: page.next.map(|c| c.to_string()),
    };
    let mut bytes = serde_json::to_vec(&body).map_err(|_| ApiError::Internal)?;
    bytes.push(b'\n');
    Ok(Response::json_bytes(200, bytes))
}

/// The answer of `GET /api/runs`.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Page<'a> {
    runs: &'a [RunRecord],
    next: Option<String>,
}
