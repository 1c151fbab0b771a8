//! The environment-wide public switch, flipped from trigd: the on/off
//! control of the endpoint view, the confirmation page before turning it
//! on, the form handler `POST /tools/<tool>/environments/<env>/public`
//! (session cookie + CSRF field) and the operation for scripts
//! `PUT /tools/<tool>/environments/<env>/public` (bearer application key,
//! JSON body `{"Public": true|false}`).
//!
//! Both write `public = …` into the config file through `config::edit`, log
//! the flip (who, tool, environment, old → new; the log line carries the
//! time) and count it in `/metrics`, then wait (bounded) until the reloaded
//! config serves the new state (it reloads at once), so the page shown next already has it.
//! Who may flip: members of the tool's workspace, or only its `admins` when
//! that list is set.

use maud::{html as markup, Markup};
use serde_json::{json, Value};

use super::{field, finish, form, html_response, login_required, page, redirect, top_bar};
use crate::access::{check_csrf, is_member, Carrier, Session};
use crate::config::edit::{self, EditError, Flip};
use crate::config::reload;
use crate::config::{Config, Tool};
use crate::http::app::App;
use crate::http::{percent_encode, ApiError, Request, Response};
use crate::state::record::Origin;
use crate::ui::view::ToolView;

/// Who looks at the endpoint view, for its switch controls.
pub enum Viewer<'a> {
    /// A browser session (the forms carry its CSRF token).
    Session(&'a Session),
    /// A bearer application key of this member: no forms.
    Bearer,
}

/// What one viewer of the endpoint view may do with a tool's switches.
pub struct Controls {
    /// The user may flip (member, and admin when `admins` is set).
    allowed: bool,
    /// Why the file cannot be written, when it cannot.
    blocked: Option<String>,
}

impl Controls {
    /// Work out, once per page, what `user` can do with `tool`'s switches.
    pub fn of(cfg: &Config, tool: &Tool, user: &str) -> Controls {
        let allowed = cfg
            .workspaces
            .get(&tool.workspace)
            .is_some_and(|w| w.may_flip(user));
        let blocked = if allowed {
            edit::writable(&cfg.path).err()
        } else {
            None
        };
        Controls { allowed, blocked }
    }
}

/// The bar at the top of a page seen with a bearer application key.
pub fn bearer_bar(user: &str) -> Markup {
    markup! {
        header.bar {
            a.brand href="/" { "trigd" }
            span.who { "Application key of " strong { (user) } }
        }
    }
}

/// The path of the switch of `env` of `tool`.
fn switch_path(tool: &str, env: &str) -> String {
    format!(
        "/tools/{}/environments/{}/public",
        percent_encode(tool),
        percent_encode(env)
    )
}

/// The on/off control of one environment in the endpoint view.
pub fn control(c: &Controls, viewer: &Viewer, tool: &str, env: &str, public: bool) -> Markup {
    let (label, value) = if public {
        ("Turn off", "false")
    } else {
        ("Turn on", "true")
    };
    let id = format!("switch-{env}");
    match viewer {
        Viewer::Bearer => markup! {
            p.muted { "Log in to change this switch here; scripts use "
                code { "PUT " (switch_path(tool, env)) } "." }
        },
        Viewer::Session(_) if !c.allowed => markup! {
            p.muted id=(format!("switch-none-{env}")) {
                "Only the workspace's admins can change this switch." }
        },
        Viewer::Session(s) => markup! {
            form.switch-form method="post" action=(switch_path(tool, env)) {
                input type="hidden" name="csrf" value=(s.csrf);
                input type="hidden" name="public" value=(value);
                @if let Some(reason) = &c.blocked {
                    button type="submit" id=(id) disabled { (label) }
                    p.switch-reason id=(format!("switch-reason-{env}")) {
                        "This switch cannot be changed here: " (reason)
                        ". Change " code { "public" } " in the config file instead." }
                } @else {
                    button type="submit" id=(id) { (label) }
                }
            }
        },
    }
}

/// `PUT /tools/<tool>/environments/<env>/public` with `{"Public": bool}`:
/// set the switch; answers the state in the file before and after.
///
/// # Errors
/// 404 unknown tool or environment; 401/403 as `Access::member`
/// (a session cookie needs `X-CSRF-Token` or a same-origin request); 400
/// `invalid_parameter` for a bad body; 403 `admin_required`; 409
/// `config_not_writable` / `config_invalid`.
pub fn put(app: &App, cfg: &Config, req: &Request, names: [&str; 2]) -> Result<Response, ApiError> {
    let [tool, env] = names;
    let tool = cfg.tools.get(tool).ok_or(ApiError::NotFound)?;
    let m = app.access.member(cfg, req, &tool.workspace)?;
    let public = public_of_json(&req.body)?;
    if !tool.environments.contains_key(env) {
        return Err(ApiError::NotFound);
    }
    may_flip(cfg, tool, &m.user)?;
    let f = flip(app, cfg, tool, env, public, m.origin())?;
    let body = json!({
        "Tool": tool.name,
        "Environment": env,
        "Public": f.new,
        "Previous": f.old,
        "Changed": f.old != f.new,
        "Generation": app.generation(),
    });
    Ok(Response::json(200, &body))
}

/// `POST /tools/<tool>/environments/<env>/public`, the form of the endpoint
/// view (fields `csrf`, `public=true|false`, `confirm=yes`). Turning an
/// off switch on without `confirm=yes` answers the confirmation page; otherwise
/// the switch is set and the browser goes back to the view (303).
///
/// # Errors
/// As [`put`], with 403 `csrf_rejected` for a missing or wrong `csrf`.
pub fn post(
    app: &App,
    cfg: &Config,
    req: &Request,
    names: [&str; 2],
) -> Result<Response, ApiError> {
    finish(req, post_inner(app, cfg, req, names))
}

fn post_inner(
    app: &App,
    cfg: &Config,
    req: &Request,
    names: [&str; 2],
) -> Result<Response, ApiError> {
    let [tool, env] = names;
    let tool = cfg.tools.get(tool).ok_or(ApiError::NotFound)?;
    let view = format!("/tools/{}/endpoints", percent_encode(&tool.name));
    let Some(signed_in) = app.access.session(cfg, req)? else {
        return login_required(req, &view);
    };
    let s = signed_in.session;
    if !is_member(cfg, &tool.workspace, &s.user) {
        return Err(ApiError::Forbidden);
    }
    let f = form(req)?;
    check_csrf(cfg, req, Some(&s), Carrier::Form(field(&f, "csrf")))?;
    let public = match field(&f, "public") {
        Some("true") => true,
        Some("false") => false,
        _ => return Err(bad_public("The form field public must be true or false.")),
    };
    let served = tool.environments.get(env).ok_or(ApiError::NotFound)?.public;
    may_flip(cfg, tool, &s.user)?;
    if public && !served && field(&f, "confirm") != Some("yes") {
        edit::writable(&cfg.path).map_err(|reason| ApiError::ConfigNotWritable { reason })?;
        return Ok(confirm_page(cfg, req, tool, env, &s));
    }
    flip(app, cfg, tool, env, public, Origin::Session(s.user.clone()))?;
    Ok(redirect(&view))
}

fn bad_public(msg: &str) -> ApiError {
    ApiError::InvalidParameter {
        name: "Public".into(),
        msg: msg.into(),
    }
}

/// The body of the PUT: exactly `{"Public": true|false}`.
fn public_of_json(body: &[u8]) -> Result<bool, ApiError> {
    const WANT: &str =
        "The body must be the JSON object {\"Public\": true} or {\"Public\": false}.";
    // A key twice is refused, not the last one taken (security.md).
    if crate::receive::json::check(body, true, false).is_err() {
        return Err(bad_public(WANT));
    }
    let v: Value = serde_json::from_slice(body).map_err(|_| bad_public(WANT))?;
    match v.as_object() {
        Some(o) if o.len() == 1 => o
            .get("Public")
            .and_then(Value::as_bool)
            .ok_or_else(|| bad_public(WANT)),
        _ => Err(bad_public(WANT)),
    }
}

/// 403 `admin_required` unless `user` may flip the switches of `tool`.
fn may_flip(cfg: &Config, tool: &Tool, user: &str) -> Result<(), ApiError> {
    let ok = cfg
        .workspaces
        .get(&tool.workspace)
        .is_some_and(|w| w.may_flip(user));
    if ok {
        Ok(())
    } else {
        Err(ApiError::AdminRequired)
    }
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

/// Write the switch, log and count a change, and wait until it is served.
fn flip(
    app: &App,
    cfg: &Config,
    tool: &Tool,
    env: &str,
    public: bool,
    by: Origin,
) -> Result<Flip, ApiError> {
    let f = edit::set_public(&cfg.path, &tool.name, env, public).map_err(|e| match e {
        EditError::NotWritable(reason) => ApiError::ConfigNotWritable { reason },
        EditError::Invalid(msg) => ApiError::ConfigInvalid { msg },
    })?;
    if f.old != f.new {
        app.runner.metrics.switch_flip(f.new);
        log::info!(
            "public switch of tool {} environment {env}: {} -> {} by {by}",
            tool.name,
            on_off(f.old),
            on_off(f.new)
        );
    }
    serve_now(app, cfg);
    Ok(f)
}

/// Serve the edited file now, so the page shown next already has it.
/// Reloads are one at a time and each reads the files when it runs, so what
/// is served afterwards is this edit or a later one, never an earlier one;
/// the watcher's own reload of the same edit then finds nothing changed.
fn serve_now(app: &App, cfg: &Config) {
    reload::reload_now(app, &cfg.path, false);
}

/// The page that asks before an environment's endpoints become public.
fn confirm_page(cfg: &Config, req: &Request, tool: &Tool, env: &str, s: &Session) -> Response {
    let view = ToolView::of(cfg, req, tool);
    let endpoints: Vec<(&str, &str)> = view
        .environments
        .iter()
        .filter(|e| e.name == env)
        .flat_map(|e| &e.endpoints)
        .map(|ep| (ep.method.as_str(), ep.url.as_str()))
        .collect();
    let body = markup! {
        main.confirm {
            h1 { "Make environment " (env) " of tool " (tool.name) " public?" }
            p.warning id="public-warning" {
                strong { "Anyone who can reach this server can then call every endpoint of \
                          environment " (env) " without credentials" }
                " — no application key, no login. Each call runs its program."
            }
            @if endpoints.is_empty() {
                p { "It has no endpoints yet." }
            } @else {
                p { "These endpoints become public:" }
                ul id="public-endpoints" {
                    @for (method, url) in &endpoints {
                        li { span.method { (method) } " " code.url { (url) } }
                    }
                }
            }
            p.muted { "Endpoints added to this tool later are public too while the switch is on. \
                       The change is written to the config file." }
            form method="post" action=(switch_path(&tool.name, env)) {
                input type="hidden" name="csrf" value=(s.csrf);
                input type="hidden" name="public" value="true";
                input type="hidden" name="confirm" value="yes";
                button type="submit" id="confirm-public" { "Yes, make them public" }
                " "
                a href=(format!("/tools/{}/endpoints", percent_encode(&tool.name))) id="cancel-public" { "Cancel" }
            }
        }
    };
    let doc = markup! { (top_bar(s)) (body) };
    html_response(200, page(&format!("Make {env} public?"), doc))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_body() {
        assert_eq!(public_of_json(br#"{"Public":true}"#).ok(), Some(true));
        assert_eq!(public_of_json(br#"{"Public": false}"#).ok(), Some(false));
        for bad in [
            &b""[..],
            b"true",
            br#"{"Public":"true"}"#,
            br#"{"Public":true,"X":1}"#,
            br#"{"public":true}"#,
            br#"{"Public":false,"Public":true}"#,
        ] {
            let e = public_of_json(bad).unwrap_err();
            assert_eq!(
                e.code(),
                "invalid_parameter",
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn control_escapes_and_has_no_inline_script() {
        let s = Session {
            user: "a".into(),
            csrf: "\"><script>".into(),
        };
        let c = Controls {
            allowed: true,
            blocked: Some("dir <x> is read-only".into()),
        };
        let h = control(&c, &Viewer::Session(&s), "t", "e", false).into_string();
        assert!(
            h.contains("&lt;x&gt;") && h.contains("&quot;&gt;&lt;script&gt;"),
            "{h}"
        );
        assert!(h.contains("disabled") && !h.contains("<script") && !h.contains("style="));
    }
}
