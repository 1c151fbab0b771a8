//! The landing page `GET /` and a workspace's settings page with its item
//! "Application Key" (generate, regenerate, show once).

use maud::html;
use serde_json::json;

use super::{
    csrf_field, error_page, field, finish, form, html_response, login_required, no_store, page,
    top_bar, wants_html,
};
use crate::access::{check_csrf, is_member, Carrier, Session, SignedIn};
use crate::config::Config;
use crate::http::app::App;
use crate::http::{percent_encode, ApiError, Request, Response};

/// `GET /`: the signed-in user's workspaces and their tools.
///
/// # Errors
/// 401 `unauthorized` for a non-browser client without a session, as on
/// every other page (a browser is sent to the sign-in page).
pub fn home(app: &App, cfg: &Config, req: &Request) -> Result<Response, ApiError> {
    let Some(SignedIn { session: s, .. }) = app.access.session(cfg, req)? else {
        return login_required(req, "/");
    };
    let mine: Vec<&String> = cfg
        .workspaces
        .iter()
        .filter(|(_, ws)| ws.members.contains(&s.user))
        .map(|(name, _)| name)
        .collect();
    let body = html! {
        (top_bar(&s))
        main {
            h1 { "Your workspaces" }
            @for name in &mine {
                section class="card" {
                    h2 { "Workspace " (name) }
                    p {
                        a href={ "/workspaces/" (percent_encode(name)) "/settings" } { "Settings" }
                        " (Application Key)"
                    }
                    h3 { "Tools" }
                    @let tools: Vec<_> = cfg.tools.values().filter(|t| &&t.workspace == name).collect();
                    @if tools.is_empty() {
                        p class="muted" { "No tools." }
                    } @else {
                        ul {
                            @for t in tools {
                                li {
                                    a href={ "/tools/" (percent_encode(&t.name)) "/endpoints" } { (t.name) }
                                    " " span class="muted" { "endpoints" }
                                }
                            }
                        }
                    }
                }
            }
            @if mine.is_empty() {
                p { "You are not a member of any workspace yet." }
            }
        }
    };
    Ok(html_response(200, page("Workspaces", body)))
}

/// The signed-in member of workspace `ws`, or the response to give instead.
fn member_session(
    app: &App,
    cfg: &Config,
    req: &Request,
    ws: &str,
) -> Result<Result<Session, Response>, ApiError> {
    let Some(SignedIn { session: s, .. }) = app.access.session(cfg, req)? else {
        let next = format!("/workspaces/{}/settings", percent_encode(ws));
        return login_required(req, &next).map(Err);
    };
    if !cfg.workspaces.contains_key(ws) {
        if wants_html(req) {
            let msg = format!("There is no workspace named \u{201c}{ws}\u{201d}.");
            return Ok(Err(error_page(&ApiError::NotFound, &msg)));
        }
        return Err(ApiError::NotFound);
    }
    if !is_member(cfg, ws, &s.user) {
        return Err(ApiError::Forbidden);
    }
    Ok(Ok(s))
}

/// `GET /workspaces/<ws>/settings`: the item "Application Key".
///
/// # Errors
/// 401 for a non-browser client without a session; 404 for an unknown
/// workspace; 403 for a non-member.
pub fn settings(app: &App, cfg: &Config, req: &Request, ws: &str) -> Result<Response, ApiError> {
    let page = member_session(app, cfg, req, ws).and_then(|m| match m {
        Ok(s) => settings_page(app, ws, &s, Shown::Plain),
        Err(r) => Ok(r),
    });
    finish(req, page)
}

/// `POST /workspaces/<ws>/settings/application-key`: (re)generate the
/// caller's key. With a session (and the form field `csrf`) the settings page shows the new key once; with a
/// bearer application key of the member the answer is JSON
/// `{"ApplicationKey", "Hint", "CreatedAt"}`.
///
/// # Errors
/// 401/403 as for the settings page or `Access::member`; 403
/// `csrf_rejected`; 500 when the state dir cannot be written; 503
/// `state_unavailable` while the database is unreachable.
pub fn regenerate(app: &App, cfg: &Config, req: &Request, ws: &str) -> Result<Response, ApiError> {
    finish(req, regenerate_inner(app, cfg, req, ws))
}

fn regenerate_inner(
    app: &App,
    cfg: &Config,
    req: &Request,
    ws: &str,
) -> Result<Response, ApiError> {
    let keys = &app.access.app_keys;
    if req.bearer().is_some() {
        let m = app.access.member(cfg, req, ws)?;
        let (key, info) = keys.regenerate(ws, &m.user)?;
        let body = json!({"ApplicationKey": key, "Hint": info.hint, "CreatedAt": info.created_at});
        return Ok(no_store(Response::json(200, &body)));
    }
    let s = match member_session(app, cfg, req, ws)? {
        Ok(s) => s,
        Err(r) => return Ok(r),
    };
    let f = form(req)?;
    check_csrf(cfg, req, Some(&s), Carrier::Form(field(&f, "csrf")))?;
    let (key, _) = keys.regenerate(ws, &s.user)?;
    log::info!("application key of {} in {ws} regenerated", s.user);
    settings_page(app, ws, &s, Shown::NewKey(&key))
}

/// `POST /workspaces/<ws>/settings/application-key/revoke`: delete the
/// caller's key (it stops working at once; the member has none until one
/// is generated). With a session (and the form field `csrf`) the settings
/// page says so; with the member's bearer key (which this revokes) the
/// answer is JSON `{"Revoked": true}`.
///
/// # Errors
/// As [`regenerate`].
pub fn revoke_key(app: &App, cfg: &Config, req: &Request, ws: &str) -> Result<Response, ApiError> {
    finish(req, revoke_inner(app, cfg, req, ws))
}

fn revoke_inner(app: &App, cfg: &Config, req: &Request, ws: &str) -> Result<Response, ApiError> {
    let keys = &app.access.app_keys;
    if req.bearer().is_some() {
        let m = app.access.member(cfg, req, ws)?;
        let revoked = keys.revoke(ws, &m.user)?;
        log::info!(
            "application key of {} in {ws} revoked by its member",
            m.user
        );
        return Ok(no_store(Response::json(
            200,
            &json!({ "Revoked": revoked }),
        )));
    }
    let s = match member_session(app, cfg, req, ws)? {
        Ok(s) => s,
        Err(r) => return Ok(r),
    };
    let f = form(req)?;
    check_csrf(cfg, req, Some(&s), Carrier::Form(field(&f, "csrf")))?;
    if keys.revoke(ws, &s.user)? {
        log::info!(
            "application key of {} in {ws} revoked by its member",
            s.user
        );
    }
    settings_page(app, ws, &s, Shown::Revoked)
}

/// What the settings page says besides the key's state.
#[derive(Clone, Copy)]
enum Shown<'a> {
    /// Nothing more.
    Plain,
    /// The key just made, shown once.
    NewKey(&'a str),
    /// The key was just revoked.
    Revoked,
}

fn settings_page(app: &App, ws: &str, s: &Session, shown: Shown) -> Result<Response, ApiError> {
    let info = app.access.app_keys.info(ws, &s.user)?;
    let new_key = match shown {
        Shown::NewKey(k) => Some(k),
        _ => None,
    };
    let action = format!(
        "/workspaces/{}/settings/application-key",
        percent_encode(ws)
    );
    let revoke = format!("{action}/revoke");
    let button = if new_key.is_some() || info.is_some() {
        "Regenerate"
    } else {
        "Generate"
    };
    let body = html! {
        (top_bar(s))
        main {
            h1 { "Workspace " (ws) " · Settings" }
            section class="card" aria-labelledby="app-key-h" {
                h2 id="app-key-h" { "Application Key" }
                p {
                    "Scripts call the protected endpoints of this workspace's tools with "
                    code { "Authorization: Bearer <key>" } " and a " code { "User-Agent" }
                    " header. The key is yours (" (s.user) ") and only for workspace " (ws) "."
                }
                @if let Some(key) = new_key {
                    div class="new-key" role="status" {
                        p { strong { "This is your new key. Copy it now: it is shown only once." } }
                        p {
                            code id="app-key" { (key) }
                            button type="button" class="copy" data-copy="app-key" hidden { "Copy" }
                            span id="app-key-status" class="copy-status" aria-live="polite" {}
                        }
                    }
                } @else if let Some(i) = &info {
                    dl {
                        dt { "Key" } dd { code id="app-key-hint" { (i.hint) } }
                        dt { "Created" } dd { time datetime=(i.created_at) { (i.created_at) } }
                    }
                } @else if matches!(shown, Shown::Revoked) {
                    p id="app-key-revoked" role="status" { "Your key was revoked: it no longer works. You have none until you generate one." }
                } @else {
                    p { "You have no application key for this workspace yet." }
                }
                form method="post" action=(action) {
                    (csrf_field(s))
                    @if button == "Regenerate" {
                        p class="muted" { "Regenerating stops the current key at once." }
                    }
                    button type="submit" id="generate" { (button) }
                }
                @if info.is_some() {
                    form method="post" action=(revoke) {
                        (csrf_field(s))
                        p class="muted" { "Revoking stops the current key at once, and gives no new one." }
                        button type="submit" id="revoke" { "Revoke" }
                    }
                }
            }
        }
    };
    Ok(html_response(200, page(&format!("{ws} settings"), body)))
}
