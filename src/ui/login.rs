//! `GET/POST /login` and `POST /logout`: the sign-in form and the session
//! cookie (the password check itself is `Access::login`).

use maud::{html, Markup};
use serde_json::json;

use super::{field, finish, form, html_response, no_store, page, redirect, safe_next, wants_html};
use crate::access::{check_csrf, clear_cookie, set_cookie, Carrier};
use crate::config::Config;
use crate::http::app::App;
use crate::http::{ApiError, Request, Response};

/// `GET /login`: the login form (or, when already signed in, on to `next`).
///
/// # Errors
/// 400 for a repeated `next`.
pub fn login_form(app: &App, cfg: &Config, req: &Request) -> Result<Response, ApiError> {
    let next = safe_next(req.query_one("next")?);
    if app.access.session(cfg, req)?.is_some() {
        return Ok(redirect(next));
    }
    Ok(login_page(200, next, "", None, how_to_sign_in(cfg)))
}

/// The paragraph under the form that says where accounts come from, and
/// for users with a generated password, where that password was shown.
fn how_to_sign_in(cfg: &Config) -> Markup {
    let generated: Vec<&str> = cfg
        .users
        .values()
        .filter(|u| u.generated_password)
        .map(|u| u.name.as_str())
        .collect();
    html! {
        @if !generated.is_empty() {
            p id="first-start" {
                "First start? Sign in as "
                @for (i, name) in generated.iter().enumerate() {
                    @if i > 0 { " or " }
                    code { (name) }
                }
                " with the password trigd printed (once) when it first started. Lost it? Stop \
                 trigd, delete " code { "state/passwords.json" } " and start it again."
            }
        }
        p class="muted" {
            "Accounts are the " code { "[[users]]" } " entries of config.toml; give one a \
             password with " code { "trigd hash-password" } "."
        }
    }
}

fn login_page(
    status: u16,
    next: &str,
    username: &str,
    error: Option<&str>,
    hint: Markup,
) -> Response {
    let body = html! {
        main class="narrow" {
            h1 { "Sign in to trigd" }
            @if let Some(e) = error {
                p class="error" role="alert" { (e) }
            }
            form method="post" action="/login" {
                input type="hidden" name="next" value=(next);
                p {
                    label for="username" { "User name" }
                    input id="username" name="username" value=(username) autocomplete="username"
                        autocapitalize="none" spellcheck="false" required autofocus;
                }
                p {
                    label for="password" { "Password" }
                    input id="password" name="password" type="password"
                        autocomplete="current-password" required;
                }
                p { button type="submit" { "Sign in" } }
            }
            (hint)
        }
    };
    html_response(status, page("Sign in", body))
}

/// `POST /login`: check the password, start a session, set its cookie.
///
/// # Errors
/// Those of `Access::login`; a form that does not parse.
pub fn login(app: &App, cfg: &Config, req: &Request) -> Result<Response, ApiError> {
    let r = login_inner(app, cfg, req);
    match r {
        Err(ApiError::LoginFailed) if wants_html(req) => {
            let f = form(req).unwrap_or_default();
            let next = safe_next(field(&f, "next"));
            let user = field(&f, "username").unwrap_or("");
            let msg = ApiError::LoginFailed.message();
            Ok(login_page(401, next, user, Some(&msg), how_to_sign_in(cfg)))
        }
        r => finish(req, r),
    }
}

fn login_inner(app: &App, cfg: &Config, req: &Request) -> Result<Response, ApiError> {
    // The CSRF rule first: a cross-site post is refused before its form is read.
    check_csrf(cfg, req, None, Carrier::Headers)?;
    let f = form(req)?;
    let name = field(&f, "username").unwrap_or("");
    let password = field(&f, "password").unwrap_or("");
    let (user, token) = app.access.login(cfg, req, name, password)?;
    let cookie = set_cookie(&cfg.server, &token);
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
/// 403 `csrf_rejected` (the CSRF rule of `access`).
pub fn logout(app: &App, cfg: &Config, req: &Request) -> Result<Response, ApiError> {
    finish(req, logout_inner(app, cfg, req))
}

fn logout_inner(app: &App, cfg: &Config, req: &Request) -> Result<Response, ApiError> {
    if let Some(s) = app.access.session(cfg, req)? {
        let f = form(req).unwrap_or_default();
        check_csrf(cfg, req, Some(&s.session), Carrier::Form(field(&f, "csrf")))?;
        app.access.end_session(&s.token)?;
    }
    let r = if wants_html(req) {
        redirect("/login")
    } else {
        no_store(Response::json(200, &json!({"Success": "Logged out."})))
    };
    Ok(r.with_header("Set-Cookie", clear_cookie(&cfg.server)))
}
