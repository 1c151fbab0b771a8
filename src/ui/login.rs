//! `GET/POST /login` and `POST /logout`: the sign-in form, the password
//! check (argon2, throttled, the same answer for an unknown user), and the
//! session cookie.

use argon2::password_hash::{PasswordHash, PasswordVerifier};
use argon2::Argon2;
use serde_json::json;

use super::{escape, field, finish, form, html, no_store, page, redirect, safe_next, wants_html};
use crate::app::App;
use crate::config::Config;
use crate::http::{ApiError, Request, Response};
use crate::sessions;

/// Verified in place of a user's hash when the user does not exist, so that
/// an unknown name costs the same time as a wrong password (argon2id with
/// the parameters of `trigd hash-password`).
const DUMMY_HASH: &str =
    "$argon2id$v=19$m=19456,t=2,p=1$wLDR/CG979mPOwk9bCg5HA$HtnJpD8Z5N0e7CZ0KtKLNUOsoTDMqfpTV2WcRizfZDo";

/// `GET /login`: the login form (or, when already signed in, on to `next`).
///
/// # Errors
/// 400 for a repeated `next`.
pub fn login_form(app: &App, cfg: &Config, req: &Request) -> Result<Response, ApiError> {
    let next = safe_next(req.query_one("next")?);
    if app.sessions.of_request(cfg, req).is_some() {
        return Ok(redirect(next));
    }
    Ok(login_page(200, next, "", None, &how_to_sign_in(cfg)))
}

/// The paragraph under the form that says where accounts come from, and
/// for users with a generated password, where that password was shown.
fn how_to_sign_in(cfg: &Config) -> String {
    let generated: Vec<String> = cfg
        .users
        .values()
        .filter(|u| u.generated_password)
        .map(|u| format!("<code>{}</code>", escape(&u.name)))
        .collect();
    let first = if generated.is_empty() {
        String::new()
    } else {
        format!(
            "<p id=\"first-start\">First start? Sign in as {} with the password trigd printed \
             (once) when it first started. Lost it? Stop trigd, delete \
             <code>state/passwords.json</code> and start it again.</p>\n",
            generated.join(" or ")
        )
    };
    format!(
        "{first}<p class=\"muted\">Accounts are the <code>[[users]]</code> entries of \
         config.toml; give one a password with <code>trigd hash-password</code>.</p>\n"
    )
}

fn login_page(
    status: u16,
    next: &str,
    username: &str,
    error: Option<&str>,
    hint: &str,
) -> Response {
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
         <p><button type=\"submit\">Sign in</button></p>\n</form>\n{hint}</main>",
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
            Ok(login_page(
                401,
                next,
                user,
                Some(&msg),
                &how_to_sign_in(cfg),
            ))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dummy_hash_is_a_real_default_cost_hash() {
        // A hash that does not parse would fail fast and so tell an unknown
        // user from a known one by timing.
        let h = PasswordHash::new(DUMMY_HASH).expect("parses");
        assert_eq!(h.params.get_str("m"), Some("19456"));
        assert!(Argon2::default().verify_password(b"guess", &h).is_err());
    }
}
