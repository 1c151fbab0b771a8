//! The browser pages: login and logout, the landing page, a workspace's
//! settings (the item "Application Key") and the HTML endpoint view, plus
//! the two static files they use.
//!
//! Pages are `format!` strings wrapped by [`page`]; every interpolated value
//! goes through [`escape`], including names that validation already limits
//! to `[A-Za-z0-9_-]`. There is no inline script or style, so the
//! Content-Security-Policy ([`CSP`]) allows only our own files; JavaScript
//! is needed only for the copy buttons, which stay hidden without it.
//!
//! A request counts as a browser's when its `Accept` names `text/html`
//! ([`wants_html`]): browsers get pages, redirects to the login form and
//! HTML error pages; every other client gets the JSON errors of `http.rs`.

use argon2::password_hash::{PasswordHash, PasswordVerifier};
use argon2::Argon2;
use serde_json::{json, Value};

use crate::app::App;
use crate::auth;
use crate::config::Config;
use crate::http::{percent_decode, percent_encode, ApiError, Request, Response};
use crate::sessions::{self, Session};
use crate::tools;

/// The Content-Security-Policy of every page.
pub const CSP: &str = "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; \
                       form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Verified in place of a user's hash when the user does not exist, so that
/// an unknown name costs the same time as a wrong password (argon2id with
/// the parameters of `trigd hash-password`).
const DUMMY_HASH: &str =
    "$argon2id$v=19$m=19456,t=2,p=1$wLDR/CG979mPOwk9bCg5HA$HtnJpD8Z5N0e7CZ0KtKLNUOsoTDMqfpTV2WcRizfZDo";

/// Escape `s` for HTML text and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A whole HTML document around `body`; `title` is escaped here.
pub fn page(title: &str, body: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{} · trigd</title>\n<link rel=\"stylesheet\" href=\"/static/style.css\">\n\
         <script src=\"/static/app.js\" defer></script>\n</head>\n<body>\n{body}\n</body>\n</html>\n",
        escape(title)
    )
}

/// Whether the client is a browser asking for a page.
pub fn wants_html(req: &Request) -> bool {
    req.header("accept")
        .is_some_and(|a| a.to_ascii_lowercase().contains("text/html"))
}

/// An HTML response with the security headers every page carries.
fn html(status: u16, doc: String) -> Response {
    no_store(Response::text(status, "text/html; charset=utf-8", doc))
        .with_header("Content-Security-Policy", CSP)
        .with_header("X-Content-Type-Options", "nosniff")
        .with_header("Referrer-Policy", "no-referrer")
        .with_header("X-Frame-Options", "DENY")
}

fn no_store(r: Response) -> Response {
    r.with_header("Cache-Control", "no-store")
}

/// `303 See Other` to `location` (a local path).
fn redirect(location: &str) -> Response {
    no_store(Response::text(
        303,
        "text/plain; charset=utf-8",
        format!("See {location}\n"),
    ))
    .with_header("Location", location)
}

/// The answer to a request without a valid session: browsers go to the
/// login form (coming back to `next` afterwards), other clients get 401.
fn login_required(req: &Request, next: &str) -> Result<Response, ApiError> {
    if wants_html(req) {
        Ok(redirect(&format!("/login?next={}", percent_encode(next))))
    } else {
        Err(ApiError::Unauthorized)
    }
}

/// Turn an error into an HTML error page for browsers; JSON otherwise.
fn finish(req: &Request, r: Result<Response, ApiError>) -> Result<Response, ApiError> {
    match r {
        Err(e) if wants_html(req) => Ok(error_page(&e, &e.message())),
        r => r,
    }
}

/// An HTML page for `e` with `msg`, keeping the error's status and headers.
fn error_page(e: &ApiError, msg: &str) -> Response {
    let json: Response = e.clone().into();
    let body = format!(
        "<main class=\"narrow\">\n<h1>{}</h1>\n<p>{}</p>\n<p><a href=\"/\">Back to trigd</a></p>\n</main>",
        escape(&title_case(e.code())),
        escape(msg)
    );
    let mut r = html(e.status(), page("Error", &body));
    r.headers.extend(
        json.headers
            .into_iter()
            .filter(|(k, _)| k != "Content-Type"),
    );
    r
}

/// `rate_limited` → `Rate limited`.
fn title_case(code: &str) -> String {
    let s = code.replace('_', " ");
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

/// The bar at the top of pages for a signed-in user, with the logout form.
fn top_bar(s: &Session) -> String {
    format!(
        "<header class=\"bar\">\n<a class=\"brand\" href=\"/\">trigd</a>\n\
         <span class=\"who\">Signed in as <strong>{}</strong></span>\n\
         <form method=\"post\" action=\"/logout\">{}<button type=\"submit\">Log out</button></form>\n</header>",
        escape(&s.user),
        csrf_field(s)
    )
}

fn csrf_field(s: &Session) -> String {
    format!(
        "<input type=\"hidden\" name=\"csrf\" value=\"{}\">",
        escape(&s.csrf)
    )
}

/// The pairs of a form-urlencoded body.
fn form(req: &Request) -> Result<Vec<(String, String)>, ApiError> {
    let bad = |msg: &str| ApiError::InvalidParameter {
        name: "body".into(),
        msg: msg.into(),
    };
    if let Some(ct) = req.header("content-type") {
        if !ct
            .to_ascii_lowercase()
            .starts_with("application/x-www-form-urlencoded")
        {
            return Err(bad("Send the form as application/x-www-form-urlencoded."));
        }
    }
    let text = std::str::from_utf8(&req.body).map_err(|_| bad("The form is not UTF-8."))?;
    text.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            match (percent_decode(k, true), percent_decode(v, true)) {
                (Some(k), Some(v)) => Ok((k, v)),
                _ => Err(bad("The form is not valid percent-encoded UTF-8.")),
            }
        })
        .collect()
}

fn field<'a>(form: &'a [(String, String)], name: &str) -> Option<&'a str> {
    form.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// A `next` target that stays on this site: a local absolute path of
/// printable ASCII, not `//host` nor `/\host`; anything else is `/`.
fn safe_next(next: Option<&str>) -> &str {
    match next {
        Some(n)
            if n.starts_with('/')
                && !n.starts_with("//")
                && n.bytes().all(|b| (0x21..0x7f).contains(&b) && b != b'\\') =>
        {
            n
        }
        _ => "/",
    }
}

// ---------------------------------------------------------------------------
// Login and logout

/// `GET /login`: the login form (or, when already signed in, on to `next`).
///
/// # Errors
/// 400 for a repeated `next`.
pub fn login_form(app: &App, cfg: &Config, req: &Request) -> Result<Response, ApiError> {
    let next = safe_next(req.query_one("next")?);
    if app.sessions.of_request(cfg, req).is_some() {
        return Ok(redirect(next));
    }
    Ok(login_page(200, next, "", None))
}

fn login_page(status: u16, next: &str, username: &str, error: Option<&str>) -> Response {
    let error = error.map_or(String::new(), |e| {
        format!("<p class=\"error\" role=\"alert\">{}</p>\n", escape(e))
    });
    let body = format!(
        "<main class=\"narrow\">\n<h1>Sign in to trigd</h1>\n{error}\
         <form method=\"post\" action=\"/login\">\n\
         <input type=\"hidden\" name=\"next\" value=\"{}\">\n\
         <p><label for=\"username\">User name</label>\n\
         <input id=\"username\" name=\"username\" value=\"{}\" autocomplete=\"username\" \
         autocapitalize=\"none\" spellcheck=\"false\" required autofocus></p>\n\
         <p><label for=\"password\">Password</label>\n\
         <input id=\"password\" name=\"password\" type=\"password\" \
         autocomplete=\"current-password\" required></p>\n\
         <p><button type=\"submit\">Sign in</button></p>\n</form>\n</main>",
        escape(next),
        escape(username)
    );
    html(status, page("Sign in", &body))
}

/// `POST /login`: check the password, start a session, set its cookie.
///
/// # Errors
/// 403 `csrf_rejected` for a visibly cross-site post; 429 `rate_limited`
/// after too many failures for the name or the address; 401
/// `login_failed` for a wrong name or password (the same for both).
pub fn login(app: &App, cfg: &Config, req: &Request) -> Result<Response, ApiError> {
    let r = login_inner(app, cfg, req);
    match r {
        Err(ApiError::LoginFailed) if wants_html(req) => {
            let f = form(req).unwrap_or_default();
            let next = safe_next(field(&f, "next"));
            let user = field(&f, "username").unwrap_or("");
            let msg = ApiError::LoginFailed.message();
            Ok(login_page(401, next, user, Some(&msg)))
        }
        r => finish(req, r),
    }
}

fn login_inner(app: &App, cfg: &Config, req: &Request) -> Result<Response, ApiError> {
    if sessions::cross_site(cfg, req) {
        return Err(ApiError::CsrfRejected);
    }
    let f = form(req)?;
    let name = field(&f, "username").unwrap_or("");
    let password = field(&f, "password").unwrap_or("");
    let addr = req.remote.map(|a| a.ip());
    app.login_throttle
        .check(name, addr)
        .map_err(|retry_after| ApiError::RateLimited { retry_after })?;
    let user = cfg.users.get(name);
    let hash = user.map_or(DUMMY_HASH, |u| u.password_hash.as_str());
    let verified = PasswordHash::new(hash)
        .and_then(|h| Argon2::default().verify_password(password.as_bytes(), &h))
        .is_ok();
    let Some(user) = user.filter(|_| verified) else {
        app.login_throttle.failed(name, addr);
        log::info!("failed login for a user name from {addr:?}");
        return Err(ApiError::LoginFailed);
    };
    app.login_throttle.succeeded(name);
    let token = app.sessions.create(&cfg.server, user).map_err(|e| {
        log::error!("cannot store a session: {e}");
        ApiError::Internal
    })?;
    let cookie = sessions::set_cookie(&cfg.server, &token);
    let r = if wants_html(req) {
        redirect(safe_next(field(&f, "next")))
    } else {
        no_store(Response::json(
            200,
            &json!({"Success": "Logged in.", "User": user.name}),
        ))
    };
    Ok(r.with_header("Set-Cookie", cookie))
}

/// `POST /logout`: end the session and clear its cookie.
///
/// # Errors
/// 403 `csrf_rejected` without the session's CSRF token (form field `csrf`
/// or `X-CSRF-Token`) or a same-origin request.
pub fn logout(app: &App, cfg: &Config, req: &Request) -> Result<Response, ApiError> {
    finish(req, logout_inner(app, cfg, req))
}

fn logout_inner(app: &App, cfg: &Config, req: &Request) -> Result<Response, ApiError> {
    if let Some((token, s)) = app.sessions.of_request(cfg, req) {
        let f = form(req).unwrap_or_default();
        let given = field(&f, "csrf").or(req.header("x-csrf-token"));
        let ok = given.is_some_and(|t| sessions::same_token(t, &s.csrf));
        if !ok && !sessions::same_origin(cfg, req) {
            return Err(ApiError::CsrfRejected);
        }
        app.sessions.remove(&token).map_err(|e| {
            log::error!("cannot store sessions: {e}");
            ApiError::Internal
        })?;
    }
    let r = if wants_html(req) {
        redirect("/login")
    } else {
        no_store(Response::json(200, &json!({"Success": "Logged out."})))
    };
    Ok(r.with_header("Set-Cookie", sessions::clear_cookie(&cfg.server)))
}

// ---------------------------------------------------------------------------
// Landing page and settings

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

// ---------------------------------------------------------------------------
// Endpoint view

/// `GET /tools/<tool>/endpoints` for browsers: environments with their
/// public switch, endpoints with method, URL, access and a curl command.
///
/// # Errors
/// 404 for an unknown tool; 401/403 for a caller who is not a member.
pub fn endpoints(app: &App, cfg: &Config, req: &Request, tool: &str) -> Result<Response, ApiError> {
    finish(req, endpoints_inner(app, cfg, req, tool))
}

fn endpoints_inner(
    app: &App,
    cfg: &Config,
    req: &Request,
    name: &str,
) -> Result<Response, ApiError> {
    let Some((_, s)) = app.sessions.of_request(cfg, req) else {
        return login_required(req, &format!("/tools/{}/endpoints", percent_encode(name)));
    };
    let tool = cfg.tools.get(name).ok_or(ApiError::NotFound)?;
    auth::authenticate(app, cfg, req, &tool.workspace)?;
    let view = tools::describe(cfg, req, tool);
    let mut sections = String::new();
    for (i, env) in view["Environments"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        sections.push_str(&env_section(cfg, i, env));
    }
    if tool.environments.is_empty() {
        sections = "<p>This tool has no environments, so no endpoints.</p>".into();
    }
    let body = format!(
        "{bar}\n<main>\n<h1>Tool {tool} <span class=\"muted\">workspace {ws}</span></h1>\n\
         <p>Protected endpoints take a member's application key \
         (<a href=\"/workspaces/{wsurl}/settings\">workspace settings</a>): the curl commands \
         read it from <code>$TRIGD_APP_KEY</code>. The public switch of an environment is set \
         in <code>config.toml</code>.</p>\n{sections}</main>",
        bar = top_bar(&s),
        tool = escape(&tool.name),
        ws = escape(&tool.workspace),
        wsurl = percent_encode(&tool.workspace),
    );
    Ok(html(200, page(&format!("{} endpoints", tool.name), &body)))
}

fn text(v: &Value) -> String {
    escape(v.as_str().unwrap_or(""))
}

fn env_section(cfg: &Config, i: usize, env: &Value) -> String {
    let public = env["Public"].as_bool().unwrap_or(false);
    let (switch, note) = if public {
        ("on", "anyone can call these endpoints, without credentials")
    } else {
        (
            "off",
            "calls need a member's application key or login session",
        )
    };
    let mut rows = String::new();
    for (j, ep) in env["Endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let id = format!("curl-{i}-{j}");
        rows.push_str(&format!(
            "<tr>\n<td><span class=\"method\">{m}</span></td>\n\
             <td><code class=\"url\">{url}</code>\n<code id=\"{id}\" class=\"curl\">{curl}</code>\n\
             <button type=\"button\" class=\"copy\" data-copy=\"{id}\" hidden>Copy curl command</button>\n\
             <span id=\"{id}-status\" class=\"copy-status\" aria-live=\"polite\"></span></td>\n\
             <td><span class=\"access {access}\">{access}</span></td>\n</tr>\n",
            m = text(&ep["Method"]),
            url = text(&ep["Url"]),
            access = text(&ep["Access"]),
            curl = escape(&curl_command(cfg, ep, public)),
        ));
    }
    if rows.is_empty() {
        rows = "<tr><td colspan=\"3\">No endpoint triggers.</td></tr>\n".into();
    }
    format!(
        "<section class=\"card\" aria-labelledby=\"env-{i}\">\n<h2 id=\"env-{i}\">Environment {name}</h2>\n\
         <p>Public switch: <strong class=\"switch {switch}\">{switch}</strong> — {note}.</p>\n\
         <table>\n<thead><tr><th scope=\"col\">Method</th>\
         <th scope=\"col\">URL and curl command</th><th scope=\"col\">Access</th></tr></thead>\n<tbody>\n{rows}</tbody>\n</table>\n</section>\n",
        name = text(&env["Name"]),
    )
}

/// Quote `s` for a POSIX shell.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// A curl command line for one endpoint of the view.
fn curl_command(cfg: &Config, ep: &Value, public: bool) -> String {
    let method = ep["Method"].as_str().unwrap_or("POST");
    let mut url = ep["Url"].as_str().unwrap_or("").to_string();
    let inputs: Vec<String> = ep["Program"]
        .as_u64()
        .and_then(|p| cfg.program(p))
        .and_then(|p| p.function(ep["Function"].as_str().unwrap_or("")))
        .map(|f| f.inputs().to_vec())
        .unwrap_or_default();
    let mut cmd = String::from("curl");
    if method != "GET" {
        cmd.push_str(&format!(" -X {method}"));
    }
    if !public {
        cmd.push_str(" -A 'my-script/1.0' -H \"Authorization: Bearer $TRIGD_APP_KEY\"");
    }
    if !inputs.is_empty() && method == "GET" {
        let q: Vec<String> = inputs.iter().map(|o| format!("{o}=VALUE")).collect();
        url = format!("{url}?{}", q.join("&"));
    } else if !inputs.is_empty() {
        let obj: serde_json::Map<String, Value> = inputs
            .iter()
            .map(|o| (o.clone(), Value::String("VALUE".into())))
            .collect();
        cmd.push_str(" -H 'Content-Type: application/json' -d ");
        cmd.push_str(&sh_quote(&Value::Object(obj).to_string()));
    }
    cmd.push(' ');
    cmd.push_str(&sh_quote(&url));
    cmd
}

// ---------------------------------------------------------------------------
// Static files

/// `GET /static/<name>`: the stylesheet and the copy-button script.
///
/// # Errors
/// 404 for any other name.
pub fn asset(name: &str) -> Result<Response, ApiError> {
    let (ctype, body) = match name {
        "style.css" => ("text/css; charset=utf-8", include_str!("static/style.css")),
        "app.js" => (
            "text/javascript; charset=utf-8",
            include_str!("static/app.js"),
        ),
        _ => return Err(ApiError::NotFound),
    };
    Ok(Response::text(200, ctype, body)
        .with_header("X-Content-Type-Options", "nosniff")
        .with_header("Cache-Control", "public, max-age=300"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_everything_dangerous() {
        assert_eq!(
            escape(r#"<a href="x" onclick='y'>&</a>"#),
            "&lt;a href=&quot;x&quot; onclick=&#39;y&#39;&gt;&amp;&lt;/a&gt;"
        );
        assert_eq!(escape("plain-name_1"), "plain-name_1");
    }

    #[test]
    fn next_stays_local() {
        assert_eq!(safe_next(Some("/tools/a/endpoints")), "/tools/a/endpoints");
        for bad in [
            "//evil.example",
            "/\\evil",
            "https://evil",
            "x",
            "/a b",
            "/a\r\nb",
        ] {
            assert_eq!(safe_next(Some(bad)), "/", "{bad:?}");
        }
        assert_eq!(safe_next(None), "/");
    }

    #[test]
    fn shell_quoting() {
        assert_eq!(sh_quote("it's"), "'it'\\''s'");
    }

    #[test]
    fn page_has_no_inline_script() {
        let p = page("<t>", "<p>x</p>");
        assert!(p.contains("&lt;t&gt;"));
        assert!(!p.contains("<script>"), "only <script src=…>");
        assert!(!p.contains("style="));
    }
}
