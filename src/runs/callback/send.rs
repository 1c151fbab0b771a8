//! One delivery attempt: check the URL against the allow list in force,
//! resolve its host, check every address it
//! resolves to, connect only to those checked addresses (ureq is given
//! them through its resolver, so DNS cannot answer differently between
//! the check and the connection), and POST the signed body. TLS is rustls
//! with the bundled webpki roots plus `[callbacks] ca_file`.
//!
//! Signed the Standard Webhooks way (standardwebhooks.com): `webhook-id`
//! (the delivery id, the same on every attempt), `webhook-timestamp` (unix
//! seconds of this attempt) and `webhook-signature: v1,<base64 HMAC-SHA256
//! of "<id>.<timestamp>.<body>">`, one signature per secret in use (two
//! during a rotation), separated by a space. Besides: `Content-Type:
//! application/json`, `User-Agent: trigd/<v>`, `Trigd-Delivery: <id>`,
//! `Trigd-Run: <run>`, `Trigd-Attempt: <n>`, `Trigd-Outcome: <outcome>`.
//! The body's type follows the callback's format (`format.rs`).

use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use url::Url;

use crate::config::callbacks::{Callbacks, Secret};
use crate::state::spool::Pending;

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A 2xx answer.
    Delivered(u16),
    /// Worth another try: no answer (connection, DNS, TLS, timeout), or 408,
    /// 429 or 5xx. The status, when there was one, and what happened.
    Retry(Option<u16>, Option<String>),
    /// Not worth another try: another status (redirects are not followed),
    /// or an address that may not be called.
    Failed(Option<u16>, Option<String>),
}

/// The `webhook-signature` value for delivery `id` of `body` at unix time
/// `t`: `v1,<base64>` per key of `secret`, space-separated (the current
/// key first).
pub fn signature(secret: &Secret, id: &str, t: u64, body: &[u8]) -> String {
    let signed = |key: &[u8]| {
        // HMAC takes a key of any length: `new_from_slice` cannot fail.
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
            return String::new();
        };
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(t.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        let b64 = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
        format!("v1,{b64}")
    };
    let sigs: Vec<String> = secret.keys().map(signed).collect();
    sigs.join(" ")
}

/// The TLS settings of every attempt: the bundled webpki roots plus
/// `extra` (from `ca_file`).
pub fn tls_config(
    extra: &[rustls_pki_types::CertificateDer<'static>],
) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let (added, ignored) = roots.add_parsable_certificates(extra.iter().cloned());
    if ignored > 0 {
        log::warn!("callbacks: {ignored} certificate(s) of ca_file are not usable as roots ({added} added)");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(config)
}

/// The addresses ureq may connect to: exactly the checked ones.
struct Checked(Vec<SocketAddr>);

impl ureq::Resolver for Checked {
    fn resolve(&self, _netloc: &str) -> io::Result<Vec<SocketAddr>> {
        Ok(self.0.clone())
    }
}

/// Resolve the URL's host and check every address.
fn resolve(cfg: &Callbacks, url: &Url) -> Result<Vec<SocketAddr>, Outcome> {
    let port = url.port_or_known_default().unwrap_or(80);
    let addrs: Vec<SocketAddr> = match url.host() {
        Some(url::Host::Ipv4(a)) => vec![SocketAddr::new(IpAddr::V4(a), port)],
        Some(url::Host::Ipv6(a)) => vec![SocketAddr::new(IpAddr::V6(a), port)],
        Some(url::Host::Domain(d)) => (d, port)
            .to_socket_addrs()
            .map_err(|e| Outcome::Retry(None, Some(format!("cannot resolve {d}: {e}"))))?
            .collect(),
        None => return Err(Outcome::Failed(None, Some("the URL has no host".into()))),
    };
    if addrs.is_empty() {
        return Err(Outcome::Retry(None, Some("the host has no address".into())));
    }
    for a in &addrs {
        cfg.check_address(a.ip())
            .map_err(|msg| Outcome::Failed(None, Some(format!("refused: {msg}"))))?;
    }
    Ok(addrs)
}

/// Make attempt number `n` (1-based) of `p` and say how it ended, with
/// the wait a retryable answer asked for (`Retry-After`).
pub fn attempt(
    cfg: &Callbacks,
    tls: &Arc<rustls::ClientConfig>,
    p: &Pending,
    n: u32,
) -> (Outcome, Option<Duration>) {
    let mut asked = None;
    let outcome = call(cfg, tls, p, n, &mut asked);
    (outcome, asked)
}

/// One HTTP call of [`attempt`]; `asked` gets a retryable answer's
/// `Retry-After`.
fn call(
    cfg: &Callbacks,
    tls: &Arc<rustls::ClientConfig>,
    p: &Pending,
    n: u32,
    asked: &mut Option<Duration>,
) -> Outcome {
    let Ok(url) = Url::parse(p.url()) else {
        return Outcome::Failed(None, Some("the URL does not parse".into()));
    };
    // The allow list in force now: a reload may have narrowed it.
    if let Err(msg) = cfg.check_url(url.as_str()) {
        return Outcome::Failed(None, Some(format!("refused: {msg}")));
    }
    let Some(secret) = &cfg.secret else {
        return Outcome::Retry(None, Some("no signing secret is configured".into()));
    };
    let addrs = match resolve(cfg, &url) {
        Ok(a) => a,
        Err(o) => return o,
    };
    let agent = ureq::AgentBuilder::new()
        .resolver(Checked(addrs))
        .timeout(cfg.timeout)
        .redirects(0)
        .tls_config(Arc::clone(tls))
        .user_agent(concat!("trigd/", env!("CARGO_PKG_VERSION")))
        .build();
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let mut req = agent.post(url.as_str());
    if let Some(o) = p.delivery.outcome {
        req = req.set("Trigd-Outcome", o.name());
    }
    let result = req
        .set(
            "Content-Type",
            super::format::content_type(p.delivery.format),
        )
        .set("webhook-id", &p.delivery.delivery)
        .set("webhook-timestamp", &t.to_string())
        .set(
            "webhook-signature",
            &signature(secret, &p.delivery.delivery, t, p.body.as_bytes()),
        )
        .set("Trigd-Delivery", &p.delivery.delivery)
        .set("Trigd-Run", &p.run)
        .set("Trigd-Attempt", &n.to_string())
        .send_string(&p.body);
    match result {
        Ok(r) => classify(r.status()),
        Err(ureq::Error::Status(code, r)) => {
            let outcome = classify(code);
            if matches!(outcome, Outcome::Retry(..)) {
                *asked = r
                    .header("retry-after")
                    .and_then(|v| retry_after(v, jiff::Timestamp::now()));
            }
            outcome
        }
        Err(ureq::Error::Transport(t)) => Outcome::Retry(None, Some(transport(&t, cfg.timeout))),
    }
}

/// 2xx delivered; 408, 429 and 5xx retried; anything else failed.
pub fn classify(status: u16) -> Outcome {
    match status {
        200..=299 => Outcome::Delivered(status),
        408 | 429 | 500..=599 => Outcome::Retry(Some(status), None),
        300..=399 => Outcome::Failed(
            Some(status),
            Some("redirects are not followed; configure the final URL".into()),
        ),
        _ => Outcome::Failed(Some(status), None),
    }
}

/// The wait a `Retry-After` value asks for: delay-seconds, or an HTTP date
/// (`Wed, 21 Oct 2026 07:28:00 GMT`) less `now` (a date past is no wait).
/// `None` for anything else (the backoff applies).
pub fn retry_after(value: &str, now: jiff::Timestamp) -> Option<Duration> {
    let v = value.trim();
    if !v.is_empty() && v.len() <= 40 && v.bytes().all(|b| b.is_ascii_digit()) {
        // Too many digits for a u64: as long as can be (past retry_for).
        return Some(Duration::from_secs(v.parse().unwrap_or(u64::MAX)));
    }
    if v.len() > 64 {
        return None;
    }
    let at = jiff::fmt::rfc2822::parse(v).ok()?.timestamp();
    let wait = at.duration_since(now);
    Some(Duration::try_from(wait).unwrap_or(Duration::ZERO))
}

/// A transport error in one line; a timeout says so plainly.
fn transport(t: &ureq::Transport, timeout: Duration) -> String {
    let text = t.to_string();
    let timed_out = text.contains("timed out")
        || text.contains("Timeout")
        || std::error::Error::source(t)
            .and_then(|s| s.downcast_ref::<io::Error>())
            .is_some_and(|e| {
                matches!(
                    e.kind(),
                    io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
                )
            });
    if timed_out {
        format!(
            "timed out: no answer within {}ms (timeout)",
            timeout.as_millis()
        )
    } else {
        text
    }
}

/// Milliseconds since `start`, for an attempt's `DurationMs`.
pub fn elapsed_ms(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Standard Webhooks test vector (`TestWebhookSign` of the
    /// official Go, JavaScript, Java and PHP libraries,
    /// github.com/standard-webhooks/standard-webhooks).
    #[test]
    fn signature_matches_the_standard_webhooks_vector() {
        let secret = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = br#"{"test": 2432232314}"#;
        let s = signature(&secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330, body);
        assert_eq!(s, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        // During a rotation: one signature per key, the current one first.
        let two = Secret::parse(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\nan-older-raw-secret-of-32-bytes!",
        )
        .unwrap();
        let s2 = signature(&two, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330, body);
        let (first, second) = s2.split_once(' ').unwrap();
        assert_eq!(first, s);
        assert!(second.starts_with("v1,") && second.len() == 47, "{second}");
    }

    #[test]
    fn retry_after_takes_seconds_and_dates() {
        let now: jiff::Timestamp = "2026-10-21T07:28:00Z".parse().unwrap();
        let s = |v: &str| retry_after(v, now);
        assert_eq!(s("120"), Some(Duration::from_secs(120)));
        assert_eq!(s(" 0 "), Some(Duration::ZERO));
        assert_eq!(s(&"9".repeat(40)), Some(Duration::from_secs(u64::MAX)));
        assert_eq!(
            s("Wed, 21 Oct 2026 07:29:30 GMT"),
            Some(Duration::from_secs(90))
        );
        assert_eq!(s("Wed, 21 Oct 2026 07:00:00 GMT"), Some(Duration::ZERO));
        for bad in [
            "",
            "-5",
            "1.5",
            "soon",
            "Wed, 32 Oct 2026 07:29:30 GMT",
            &"9".repeat(41),
        ] {
            assert_eq!(s(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn statuses_are_classified() {
        assert_eq!(classify(204), Outcome::Delivered(204));
        for s in [408, 429, 500, 503] {
            assert!(matches!(classify(s), Outcome::Retry(Some(_), None)), "{s}");
        }
        for s in [301, 400, 401, 404, 410] {
            assert!(matches!(classify(s), Outcome::Failed(Some(_), _)), "{s}");
        }
    }
}
