//! The browser pages: login and logout, the landing page, the runs and
//! schedules pages, a workspace's settings (the item "Application Key")
//! and the HTML endpoint view, plus the two static files they use. This
//! file holds what every page shares; the modules below hold the pages.
//!
//! Pages are maud templates wrapped by [`page`]: maud escapes every
//! interpolated value, so no page escapes by hand. There is no inline script
//! or style, so the Content-Security-Policy ([`CSP`]) allows only our own
//! files; JavaScript is needed only for the copy buttons, which stay hidden
//! without it.
//!
//! A request counts as a browser's when its `Accept` names `text/html`
//! ([`wants_html`]): browsers get pages, redirects to the login form and
//! HTML error pages; every other client gets the JSON errors of `http.rs`.

pub mod view;

mod endpoints;
mod login;
mod runs;
mod schedules;
mod settings;
mod switch;

pub use endpoints::endpoints;
pub use login::{login, login_form, logout};
pub use runs::{
    cancel as run_cancel, list as runs_list, redeliver as run_redeliver, rerun as run_rerun,
    show as run_show,
};
pub use schedules::list as schedules_page;
pub use settings::{home, regenerate, revoke_key, settings};
pub use switch::{post as switch_post, put as switch_put};

use maud::{html, Markup, DOCTYPE};

use crate::access::Session;
use crate::http::{form_pairs, percent_encode, ApiError, Request, Response};

/// The Content-Security-Policy of every page.
pub const CSP: &str = "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; \
                       form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// A whole HTML document around `body`.
pub fn page(title: &str, body: Markup) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · trigd" }
                link rel="stylesheet" href="/static/style.css";
                script src="/static/app.js" defer {}
            }
            body { (body) }
        }
    }
    .into_string()
}

/// Whether the client is a browser asking for a page.
pub fn wants_html(req: &Request) -> bool {
    req.header("accept")
        .is_some_and(|a| a.to_ascii_lowercase().contains("text/html"))
}

/// An HTML response with the security headers every page carries.
fn html_response(status: u16, doc: String) -> Response {
    no_store(Response::text(status, "text/html; charset=utf-8", doc))
        .with_header("Content-Security-Policy", CSP)
        .with_header("X-Content-Type-Options", "nosniff")
        .with_header("Referrer-Policy", "same-origin")
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

/// The answer to a path no route serves: `404 not_found`, as a page in
/// the UI's style for a browser (`Accept: text/html`), JSON otherwise.
///
/// # Errors
/// `not_found` for clients that do not ask for HTML.
pub fn not_found(req: &Request) -> Result<Response, ApiError> {
    if wants_html(req) {
        let msg = "There is no page at this address.";
        return Ok(error_page(&ApiError::NotFound, msg));
    }
    Err(ApiError::NotFound)
}

/// An HTML page for `e` with `msg`, keeping the error's status and headers.
fn error_page(e: &ApiError, msg: &str) -> Response {
    let json: Response = e.clone().into();
    let body = html! {
        main class="narrow" {
            h1 { (title_case(e.code())) }
            p { (msg) }
            p { a href="/" { "Back to trigd" } }
        }
    };
    let mut r = html_response(e.status(), page("Error", body));
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
fn top_bar(s: &Session) -> Markup {
    html! {
        header class="bar" {
            a class="brand" href="/" { "trigd" }
            a href="/runs" { "Runs" }
            a href="/schedules" { "Schedules" }
            span class="who" { "Signed in as " strong { (s.user) } }
            form method="post" action="/logout" {
                (csrf_field(s))
                button type="submit" { "Log out" }
            }
        }
    }
}

fn csrf_field(s: &Session) -> Markup {
    html! { input type="hidden" name="csrf" value=(s.csrf); }
}

/// The fields trigd's forms send (sign-in, CSRF token, public switch).
const FORM_FIELDS: &[&str] = &["username", "password", "next", "csrf", "public", "confirm"];

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
    let pairs =
        form_pairs(text).map_err(|_| bad("The form is not valid percent-encoded UTF-8."))?;
    // trigd's forms never repeat one of their fields: which of two values
    // was meant (two `csrf`, two `public`) is not guessed (security.md).
    // Fields no form of trigd's has are ignored, repeated or not.
    let mut seen = std::collections::HashSet::new();
    for (k, _) in pairs
        .iter()
        .filter(|(k, _)| FORM_FIELDS.contains(&k.as_str()))
    {
        if !seen.insert(k.as_str()) {
            return Err(ApiError::InvalidParameter {
                name: k.clone(),
                msg: format!("The form field '{k}' is given more than once."),
            });
        }
    }
    Ok(pairs)
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
    fn page_escapes_and_has_no_inline_script() {
        let p = page("<t>", html! { p { "x" } });
        assert!(p.contains("&lt;t&gt;"));
        assert!(!p.contains("<script>"), "only <script src=…>");
        assert!(!p.contains("style="));
    }
}
