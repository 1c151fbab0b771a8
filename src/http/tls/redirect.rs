//! The optional plain-HTTP listener (`redirect_http`): every request gets a
//! `308 Permanent Redirect` to the same path and query over HTTPS, and
//! nothing else is served on it.
//!
//! Where it points: with `public_url = "https://…"` set, to that scheme,
//! host and port, whatever the request's `Host` says. Without it, to the
//! host name of the request's `Host` header (its port dropped) and the
//! HTTPS port trigd listens on (omitted when 443). The `Host` header is
//! the client's own claim, so it is used only when it is a plain host
//! name, IPv4 or bracketed IPv6 address (no user info, path, spaces or
//! other bytes that could change where the URL goes); anything else gets
//! `400 bad_request`. A client can only redirect itself that way, but a
//! shared cache in front could keep such an answer for others: set
//! `public_url` on a public host.
//!
//! ACME's HTTP-01 challenge (`GET /.well-known/acme-challenge/<token>`)
//! must be answered over plain HTTP, before any redirect: [`Challenges`]
//! is that hook (`None` until the acme module gives one).

use std::net::TcpListener;
use std::sync::Arc;

use crate::http::{ApiError, Response};

/// The ACME HTTP-01 hook: the key authorization to answer for a token, if
/// a challenge for it is pending.
pub type Challenges = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The path prefix of ACME HTTP-01 challenges (RFC 8555 §8.3).
pub const CHALLENGE_PREFIX: &str = "/.well-known/acme-challenge/";

/// Where redirects point.
#[derive(Debug, Clone)]
pub struct Target {
    /// `https://host[:port]` from `public_url`, without a trailing slash.
    pub fixed: Option<String>,
    /// Port of the HTTPS listener, used with a `Host` header's name.
    pub https_port: u16,
}

/// Serve redirects on `listener` until the returned server is dropped.
///
/// # Errors
/// The server cannot start (its message).
pub fn start(
    listener: TcpListener,
    limits: tiny_http::ServerLimits,
    target: Target,
    challenges: Option<Challenges>,
) -> Result<tiny_http::Server, String> {
    let handler: tiny_http::Handler = Arc::new(move |rq: tiny_http::Request| {
        let resp = answer(&target, challenges.as_ref(), rq.url(), host_header(&rq));
        let _ = rq.respond_bytes(resp.status, &resp.headers, resp.body);
    });
    tiny_http::Server::from_listener_with_handler(listener, limits, handler)
        .map_err(|e| format!("cannot start the redirect listener: {e}"))
}

/// The `Host` header of `rq`.
fn host_header(rq: &tiny_http::Request) -> Option<&str> {
    rq.headers()
        .iter()
        .find(|h| h.field.equiv("Host"))
        .map(|h| h.value.as_str())
}

/// The answer to a request for `url` with `host`: an ACME challenge's key
/// authorization, else a 308 to HTTPS (or 400 for a `Host` unfit for a URL).
pub fn answer(
    target: &Target,
    challenges: Option<&Challenges>,
    url: &str,
    host: Option<&str>,
) -> Response {
    if let (Some(token), Some(answer)) = (url.strip_prefix(CHALLENGE_PREFIX), challenges) {
        if let Some(key_authorization) = answer(token) {
            return Response::text(200, "application/octet-stream", key_authorization);
        }
    }
    let Some(location) = location(target, url, host) else {
        return ApiError::BadRequest.into();
    };
    let mut resp = Response::text(
        308,
        "text/plain; charset=utf-8",
        format!("This service is served over HTTPS: {location}\n"),
    );
    resp.headers.push(("Location".into(), location));
    resp
}

/// `https://host[:port]/path?query` for a request target `url`; `None`
/// when no host is fixed and `host` is missing or unfit.
fn location(target: &Target, url: &str, host: Option<&str>) -> Option<String> {
    // Only origin-form targets keep their path: an absolute-form or `*`
    // target goes to the root.
    let path = if url.starts_with('/') { url } else { "/" };
    if let Some(base) = &target.fixed {
        return Some(format!("{base}{path}"));
    }
    let name = host_name(host?)?;
    Some(match target.https_port {
        443 => format!("https://{name}{path}"),
        port => format!("https://{name}:{port}{path}"),
    })
}

/// The name of a `Host` header value (`name[:port]`, `[v6][:port]`), when
/// it is only letters, digits, `-` and `.` (or a bracketed IPv6 address).
fn host_name(host: &str) -> Option<&str> {
    let host = host.trim();
    let name = if host.starts_with('[') {
        let end = host.find(']')?;
        let (v6, rest) = host.split_at(end + 1);
        v6[1..end].parse::<std::net::Ipv6Addr>().ok()?;
        port_ok(rest)?;
        v6
    } else {
        let (name, rest) = host.split_at(host.find(':').unwrap_or(host.len()));
        port_ok(rest)?;
        name
    };
    let plain = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '.';
    let fits = name.starts_with('[') || (!name.is_empty() && name.chars().all(plain));
    (fits && name.len() <= 253).then_some(name)
}

/// `Some` when `rest` is empty or `:` and a port number.
fn port_ok(rest: &str) -> Option<()> {
    match rest.strip_prefix(':') {
        None if rest.is_empty() => Some(()),
        Some(port) => port.parse::<u16>().ok().map(|_| ()),
        None => None,
    }
}

/// `https://host[:port]` of `public_url` when it is an https URL.
pub fn fixed_base(public_url: Option<&str>) -> Option<String> {
    let url = url::Url::parse(public_url?).ok()?;
    if url.scheme() != "https" {
        return None;
    }
    let host = url.host_str()?;
    Some(match url.port() {
        Some(port) => format!("https://{host}:{port}"),
        None => format!("https://{host}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to(host: Option<&str>, url: &str, port: u16) -> Option<String> {
        let t = Target {
            fixed: None,
            https_port: port,
        };
        location(&t, url, host)
    }

    #[test]
    fn the_host_header_is_used_only_when_it_is_a_plain_host() {
        assert_eq!(
            to(Some("a.example:80"), "/x?y=1", 443).unwrap(),
            "https://a.example/x?y=1"
        );
        assert_eq!(
            to(Some("a.example"), "/", 8443).unwrap(),
            "https://a.example:8443/"
        );
        assert_eq!(to(Some("[::1]:80"), "/p", 443).unwrap(), "https://[::1]/p");
        assert_eq!(
            to(Some("10.0.0.1"), "http://evil/x", 443).unwrap(),
            "https://10.0.0.1/"
        );
        for bad in [
            "evil.com@a",
            "a/b",
            "a b",
            "a:x",
            "",
            "[zz]",
            "a\\b",
            "a:80:80",
            "[::1]x",
        ] {
            assert_eq!(to(Some(bad), "/", 443), None, "{bad}");
        }
        assert_eq!(to(None, "/", 443), None);
    }

    #[test]
    fn public_url_fixes_the_host() {
        let t = Target {
            fixed: fixed_base(Some("https://hooks.example:8443/base/")),
            https_port: 1,
        };
        let l = location(&t, "//evil.example/x", Some("evil.example")).unwrap();
        assert_eq!(l, "https://hooks.example:8443//evil.example/x");
        assert_eq!(fixed_base(Some("http://a.example")), None);
    }
}
