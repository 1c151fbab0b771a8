//! The one CSRF rule.
//!
//! A bearer key is never sent by a browser on its own, so only requests
//! that ride on the session cookie need protection. Such a request that
//! changes something (any method but GET and HEAD) must show the session's
//! token. The forms of trigd's pages always carry it (field `csrf`), so a
//! form post must show it, in the form or the `X-CSRF-Token` header. A
//! request without a form (a script on a trigd page calling a generated
//! endpoint) shows it in the header, or else the browser's word that it is
//! same-origin (`Sec-Fetch-Site: same-origin`, or from browsers without
//! that header an `Origin` equal to ours). A login has no session yet and
//! so no token to show: it is refused only when the browser says it is
//! cross-site. Anything else is 403 `csrf_rejected`.

use super::secret;
use super::sessions::Session;
use crate::config::Config;
use crate::http::{ApiError, Method, Request};

/// Where a request carries its token.
#[derive(Debug, Clone, Copy)]
pub enum Carrier<'a> {
    /// A form of a trigd page, with the value of its `csrf` field.
    Form(Option<&'a str>),
    /// No form: only headers.
    Headers,
}

/// Apply the rule to `req`, made with `session` (none for a login).
///
/// # Errors
/// `csrf_rejected` when the request lacks the proof the rule asks for.
pub fn check(
    cfg: &Config,
    req: &Request,
    session: Option<&Session>,
    carrier: Carrier,
) -> Result<(), ApiError> {
    if matches!(req.method, Method::Get | Method::Head) {
        return Ok(());
    }
    let Some(s) = session else {
        return match cross_site(cfg, req) {
            true => Err(ApiError::CsrfRejected),
            false => Ok(()),
        };
    };
    let header = req.header("x-csrf-token").map(str::trim);
    let shown = |t: Option<&str>| t.is_some_and(|t| secret::same(t, &s.csrf));
    let proven = match carrier {
        Carrier::Form(field) => shown(field) || shown(header),
        Carrier::Headers => shown(header) || same_origin(cfg, req),
    };
    if proven {
        Ok(())
    } else {
        Err(ApiError::CsrfRejected)
    }
}

/// A run started by a GET or HEAD on the session cookie (a generated
/// endpoint with `method = "GET"`): refused when the browser says it
/// comes from another site, as a link or an image there would make it.
/// (Other methods pass [`check`] first.)
///
/// # Errors
/// `csrf_rejected` for a visibly cross-site request.
pub fn run_by_get(cfg: &Config, req: &Request) -> Result<(), ApiError> {
    let by_get = matches!(req.method, Method::Get | Method::Head);
    if by_get && cross_site(cfg, req) {
        return Err(ApiError::CsrfRejected);
    }
    Ok(())
}

/// Whether the browser says the request comes from one of our own pages:
/// `Sec-Fetch-Site: same-origin` when the header is present, otherwise an
/// `Origin` equal to ours (`public_url`, else `http(s)://<Host>`). `Origin:
/// null` does not count.
fn same_origin(cfg: &Config, req: &Request) -> bool {
    if let Some(site) = req.header("sec-fetch-site") {
        return site.eq_ignore_ascii_case("same-origin");
    }
    let Some(origin) = req.header("origin") else {
        return false;
    };
    match &cfg.server.public_url {
        Some(url) => {
            let after = url.find("://").map_or(0, |i| i + 3);
            let end = url[after..].find('/').map_or(url.len(), |i| after + i);
            url[..end].eq_ignore_ascii_case(origin)
        }
        None => req.header("host").is_some_and(|host| {
            let o = origin.to_ascii_lowercase();
            let h = host.to_ascii_lowercase();
            o == format!("http://{h}") || o == format!("https://{h}")
        }),
    }
}

/// Whether a request is visibly cross-site: `Sec-Fetch-Site` other than
/// `same-origin` or `none`, or an `Origin` that is not ours, `null`
/// included (an opaque origin: a sandboxed frame, a `data:` page; trigd's
/// own pages, sent with `Referrer-Policy: same-origin`, give a browser no
/// reason to send it). A request without either header (curl) is not.
fn cross_site(cfg: &Config, req: &Request) -> bool {
    if let Some(site) = req.header("sec-fetch-site") {
        return !(site.eq_ignore_ascii_case("same-origin") || site.eq_ignore_ascii_case("none"));
    }
    req.header("origin").is_some() && !same_origin(cfg, req)
}
