//! The landing page `GET /` and a workspace's settings page with its item
//! "Application Key" (generate, regenerate, show once).

use serde_json::json;

use super::{
    csrf_field, error_page, escape, field, finish, form, html, login_required, no_store, page,
    top_bar, wants_html,
};
use crate::app::App;
use crate::auth;
use crate::config::Config;
use crate::http::{percent_encode, ApiError, Request, Response};
use crate::sessions::{self, Session};

/// `GET /`: the signed-in user's workspaces and their tools.
///
/// # Errors
/// 404 `not_found` for a non-browser client without a session (`/` is not
/// part of the API).
pub fn home(app: &App, cfg: &Config, req: &Request) -> Result<Response, ApiError> {
    let Some((_, s)) = app.sessions.of_request(cfg, req) else {
        if !wants_html(req) {
            return Err(ApiError::NotFound);
        }
        return login_required(req, "/");
    };
    let mut items = String::new();
    for (name, ws) in &cfg.workspaces {
        if !ws.members.contains(&s.user) {
            continue;
        }
        let tools: String = cfg
            .tools
            .values()
            .filter(|t| &t.workspace == name)
            .map(|t| {
                format!(
                    "<li><a href=\"/tools/{0}/endpoints\">{1}</a> <span class=\"muted\">endpoints</span></li>\n",
                    percent_encode(&t.name),
                    escape(&t.name)
                )
            })
            .collect();
        let tools = if tools.is_empty() {
            "<p class=\"muted\">No tools.</p>".to_string()
        } else {
            format!("<ul>\n{tools}</ul>")
        };
        items.push_str(&format!(
            "<section class=\"card\">\n<h2>Workspace {0}</h2>\n\
             <p><a href=\"/workspaces/{1}/settings\">Settings</a> (Application Key)</p>\n\
             <h3>Tools</h3>\n{tools}\n</section>\n",
            escape(name),
            percent_encode(name)
        ));
    }
    if items.is_empty() {
        items = "<p>You are not a member of any workspace yet.</p>".into();
    }
    let body = format!(
        "{}\n<main>\n<h1>Your workspaces</h1>\n{items}</main>",
        top_bar(&s)
    );
    Ok(html(200, page("Workspaces", &body)))
}

/// The signed-in member of workspace `ws`, or the response to give instead.
fn member_session(
    app: &App,
    cfg: &Config,
    req: &Request,
    ws: &str,
) -> Result<Result<(String, Session), Response>, ApiError> {
    let Some((token, s)) = app.sessions.of_request(cfg, req) else {
        let next = format!("/workspaces/{}/settings", percent_encode(ws));
        return login_required(req, &next).map(Err);
    };
    let Some(w) = cfg.workspaces.get(ws) else {
        if wants_html(req) {
            let msg = format!("There is no workspace named \u{201c}{ws}\u{201d}.");
            return Ok(Err(error_page(&ApiError::NotFound, &msg)));
        }
        return Err(ApiError::NotFound);
    };
    if !w.members.contains(&s.user) {
        return Err(ApiError::Forbidden);
    }
    Ok(Ok((token, s)))
}

/// `GET /workspaces/<ws>/settings`: the item "Application Key".
///
/// # Errors
/// 401 for a non-browser client without a session; 404 for an unknown
/// workspace; 403 for a non-member.
pub fn settings(app: &App, cfg: &Config, req: &Request, ws: &str) -> Result<Response, ApiError> {
    finish(
        req,
        member_session(app, cfg, req, ws).map(|m| match m {
            Ok((_, s)) => settings_page(app, ws, &s, None),
            Err(r) => r,
        }),
    )
}

/// `POST /workspaces/<ws>/settings/application-key`: (re)generate the
/// caller's key. With a session (form field `csrf` required) the settings
/// page shows the new key once; with a bearer application key of the
/// member the answer is JSON `{"ApplicationKey", "Hint", "CreatedAt"}`.
///
/// # Errors
/// 401/403 as for the settings page or `auth::authenticate`; 403
/// `csrf_rejected` without the session's CSRF token; 500 when the state
/// dir cannot be written.
pub fn regenerate(app: &App, cfg: &Config, req: &Request, ws: &str) -> Result<Response, ApiError> {
    finish(req, regenerate_inner(app, cfg, req, ws))
}

fn regenerate_inner(
    app: &App,
    cfg: &Config,
    req: &Request,
    ws: &str,
) -> Result<Response, ApiError> {
    let store_err = |e: std::io::Error| {
        log::error!("cannot store an application key: {e}");
        ApiError::Internal
    };
    if req.bearer().is_some() {
        let m = auth::authenticate(app, cfg, req, ws)?;
        let key = app.app_keys.regenerate(ws, &m.user).map_err(store_err)?;
        let info = app.app_keys.info(ws, &m.user).ok_or(ApiError::Internal)?;
        let body = json!({"ApplicationKey": key, "Hint": info.hint, "CreatedAt": info.created_at});
        return Ok(no_store(Response::json(200, &body)));
    }
    let s = match member_session(app, cfg, req, ws)? {
        Ok((_, s)) => s,
        Err(r) => return Ok(r),
    };
    let f = form(req)?;
    if !field(&f, "csrf").is_some_and(|t| sessions::same_token(t, &s.csrf)) {
        return Err(ApiError::CsrfRejected);
    }
    let key = app.app_keys.regenerate(ws, &s.user).map_err(store_err)?;
    log::info!("application key of {} in {ws} regenerated", s.user);
    Ok(settings_page(app, ws, &s, Some(&key)))
}

fn settings_page(app: &App, ws: &str, s: &Session, new_key: Option<&str>) -> Response {
    let info = app.app_keys.info(ws, &s.user);
    let action = format!(
        "/workspaces/{}/settings/application-key",
        percent_encode(ws)
    );
    let (state, button) = match (new_key, &info) {
        (Some(key), _) => (
            format!(
                "<div class=\"new-key\" role=\"status\">\n\
                 <p><strong>This is your new key. Copy it now: it is shown only once.</strong></p>\n\
                 <p><code id=\"app-key\">{}</code>\n\
                 <button type=\"button\" class=\"copy\" data-copy=\"app-key\" hidden>Copy</button>\n\
                 <span id=\"app-key-status\" class=\"copy-status\" aria-live=\"polite\"></span></p>\n</div>",
                escape(key)
            ),
            "Regenerate",
        ),
        (None, Some(i)) => (
            format!(
                "<dl>\n<dt>Key</dt><dd><code id=\"app-key-hint\">{}</code></dd>\n\
                 <dt>Created</dt><dd><time datetime=\"{1}\">{1}</time></dd>\n</dl>",
                escape(&i.hint),
                escape(&i.created_at)
            ),
            "Regenerate",
        ),
        (None, None) => (
            "<p>You have no application key for this workspace yet.</p>".to_string(),
            "Generate",
        ),
    };
    let warn = if button == "Regenerate" {
        "<p class=\"muted\">Regenerating stops the current key at once.</p>\n"
    } else {
        ""
    };
    let body = format!(
        "{bar}\n<main>\n<h1>Workspace {ws} · Settings</h1>\n\
         <section class=\"card\" aria-labelledby=\"app-key-h\">\n<h2 id=\"app-key-h\">Application Key</h2>\n\
         <p>Scripts call the protected endpoints of this workspace's tools with \
         <code>Authorization: Bearer &lt;key&gt;</code> and a <code>User-Agent</code> header. \
         The key is yours ({user}) and only for workspace {ws}.</p>\n{state}\n\
         <form method=\"post\" action=\"{action}\">{csrf}\n{warn}\
         <button type=\"submit\" id=\"generate\">{button}</button>\n</form>\n</section>\n</main>",
        bar = top_bar(s),
        ws = escape(ws),
        user = escape(&s.user),
        action = escape(&action),
        csrf = csrf_field(s),
    );
    html(200, page(&format!("{ws} settings"), &body))
}
