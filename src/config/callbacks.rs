//! `[callbacks]` of `config.toml`: where completion callbacks may go, the
//! signing secret, and the delivery policy; plus the URL and address checks
//! that every callback URL passes, at load time (fixed URLs), at request
//! time (per-request URLs) and at delivery time (every resolved address).
//!
//! A callback URL is accepted when it is `http` or `https`, carries no user
//! name or password, matches an `allow` entry (a host name, or a URL prefix),
//! and — when its host is an IP address — that address is public or listed
//! in `allow_private`. Names are resolved only when a delivery is attempted;
//! every address they resolve to must pass the same address check.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use toml::Spanned;
use url::Url;

use crate::access::cidr::Cidr;
use crate::state::delivery::{Format, Outcome};

use super::raw::{RawCallbacks, RawDuration};
use super::resolve;
use super::types::{count, count_within, duration, Errors, Src};

/// Defaults of `[callbacks]`.
pub mod defaults {
    /// `timeout` of one attempt, in seconds.
    pub const TIMEOUT_SECS: u64 = 10;
    /// `retry_for`: attempts stop this long after the first, in seconds (1h).
    pub const RETRY_FOR_SECS: u64 = 3600;
    /// `backoff`: the wait after the first failed attempt, in seconds.
    pub const BACKOFF_SECS: u64 = 1;
    /// `backoff_max`: the longest wait between attempts, in seconds (5m).
    pub const BACKOFF_MAX_SECS: u64 = 300;
    /// `workers`: delivery threads.
    pub const WORKERS: usize = 2;
    /// `max_pending`: deliveries waiting on disk at most.
    pub const MAX_PENDING: usize = 10_000;
}

/// Longest accepted callback URL, in bytes.
pub const MAX_URL_BYTES: usize = 2048;

/// Shortest accepted signing secret, in bytes.
pub const MIN_SECRET_BYTES: usize = 16;

/// Most signing secrets at once: the new one and the old one of a rotation.
pub const MAX_SECRETS: usize = 2;

/// Byte lengths of a `whsec_` secret's key, as the Standard Webhooks
/// specification sets them.
const WHSEC_BYTES: std::ops::RangeInclusive<usize> = 24..=64;

/// The signing secret: one key, or two during a rotation (each signs, so
/// a receiver that knows either accepts). Its `Debug` never shows the bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<Vec<u8>>);

impl Secret {
    /// Read the secret text of `secret_env` or `secret_file`: one secret a
    /// line (blank lines and surrounding white space ignored), the current
    /// one first, at most [`MAX_SECRETS`]. A `whsec_<base64>` secret (the
    /// Standard Webhooks form) is its decoded key; any other is its bytes.
    ///
    /// # Errors
    /// A sentence that never contains the secret.
    pub fn parse(text: &str) -> Result<Secret, String> {
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        if lines.is_empty() {
            return Err("the signing secret is empty; `echo \"whsec_$(openssl rand -base64 32)\"` makes one".into());
        }
        if lines.len() > MAX_SECRETS {
            return Err(format!(
                "{} secrets (lines); at most {MAX_SECRETS}: the new one, then the old one while receivers switch",
                lines.len()
            ));
        }
        let keys = lines
            .iter()
            .enumerate()
            .map(|(i, l)| key(l).map_err(|e| format!("secret {} (line): {e}", i + 1)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Secret(keys))
    }

    /// The HMAC keys, the current one first.
    pub fn keys(&self) -> impl Iterator<Item = &[u8]> {
        self.0.iter().map(Vec::as_slice)
    }
}

/// One secret's HMAC key.
fn key(line: &str) -> Result<Vec<u8>, String> {
    if let Some(b64) = line.strip_prefix("whsec_") {
        let k = crate::receive::signature::whsec(b64)
            .ok_or("a whsec_ secret must be base64 after the prefix")?;
        if !WHSEC_BYTES.contains(&k.len()) {
            return Err(format!(
                "a whsec_ secret holds 24 to 64 bytes (this one {}); `echo \"whsec_$(openssl rand -base64 32)\"` makes one",
                k.len()
            ));
        }
        return Ok(k);
    }
    if line.len() < MIN_SECRET_BYTES {
        return Err(format!(
            "the signing secret must be at least {MIN_SECRET_BYTES} bytes (it has {}); `echo \"whsec_$(openssl rand -base64 32)\"` makes one",
            line.len()
        ));
    }
    Ok(line.as_bytes().to_vec())
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// One `allow` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Allow {
    /// Any http(s) URL on this host (lower case), any port.
    Host(String),
    /// URLs whose normalised text starts with this normalised prefix.
    Prefix(String),
}

/// The validated `[callbacks]` settings.
#[derive(Debug, Clone)]
pub struct Callbacks {
    /// Where callbacks may go; empty: nowhere.
    pub allow: Vec<Allow>,
    /// Private, loopback or link-local addresses allowed anyway.
    pub allow_private: Vec<Cidr>,
    /// The signing secret; `None` when neither `secret_env` nor
    /// `secret_file` is set (then no callback may be configured).
    pub secret: Option<Secret>,
    /// `secret_env` or `secret_file` was set but gave no secret: its own
    /// load error says why, so no callback adds "set a secret" to it.
    pub secret_unusable: bool,
    /// The file the secret was read from (`secret_file`), watched for a
    /// rotation.
    pub secret_file: Option<std::path::PathBuf>,
    /// Certificates from `ca_file`, trusted besides the bundled roots.
    pub extra_roots: Vec<CertificateDer<'static>>,
    /// Time one attempt may take, connection included.
    pub timeout: Duration,
    /// No attempt starts later than this after the first one.
    pub retry_for: Duration,
    /// The wait after the first failed attempt; doubles each time.
    pub backoff: Duration,
    /// The longest wait between two attempts.
    pub backoff_max: Duration,
    /// Delivery threads.
    pub workers: usize,
    /// Deliveries waiting (on disk) at most; past it a delivery fails at once.
    pub max_pending: usize,
    /// `[server] public_url`: the run page links of `slack`, `discord`,
    /// `ntfy` messages start with it.
    pub public_url: Option<String>,
}

impl Callbacks {
    /// Whether the secret file now holds another secret than the one in
    /// use (or cannot be read): the config must be loaded again. (A
    /// comparison with trigd's own file, not with a request: no need for
    /// constant time.)
    pub fn secret_file_changed(&self) -> bool {
        self.secret_file.as_ref().is_some_and(|p| {
            // A file over the bound (`/dev/zero`) cannot be read: changed,
            // and the load that follows reports it.
            let now = super::file::read_secret(p)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .and_then(|v| Secret::parse(&v).ok());
            now.is_none() || now != self.secret
        })
    }

    /// Whether a fixed callback URL checked against `self` would be checked
    /// the same against `other` (allow lists and whether a secret is set):
    /// a reload may then keep programs it parsed before.
    pub fn checks_like(&self, other: &Callbacks) -> bool {
        self.allow == other.allow
            && self.allow_private == other.allow_private
            && self.secret.is_some() == other.secret.is_some()
    }
}

impl Default for Callbacks {
    fn default() -> Self {
        Callbacks {
            allow: Vec::new(),
            allow_private: Vec::new(),
            secret: None,
            secret_unusable: false,
            secret_file: None,
            extra_roots: Vec::new(),
            timeout: Duration::from_secs(defaults::TIMEOUT_SECS),
            retry_for: Duration::from_secs(defaults::RETRY_FOR_SECS),
            backoff: Duration::from_secs(defaults::BACKOFF_SECS),
            backoff_max: Duration::from_secs(defaults::BACKOFF_MAX_SECS),
            workers: defaults::WORKERS,
            max_pending: defaults::MAX_PENDING,
            public_url: None,
        }
    }
}

impl Callbacks {
    /// Check a callback URL against the scheme rules, the allow list and,
    /// for an address literal, the address rules. Returns the normalised URL.
    ///
    /// # Errors
    /// A sentence saying why the URL is refused.
    pub fn check_url(&self, raw: &str) -> Result<String, String> {
        if raw.len() > MAX_URL_BYTES {
            return Err(format!("the URL is longer than {MAX_URL_BYTES} bytes"));
        }
        let url = Url::parse(raw).map_err(|e| format!("\"{raw}\" is not a URL ({e})"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("\"{raw}\": only http and https URLs are called"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err("a callback URL may not carry a user name or password".into());
        }
        if url.fragment().is_some() {
            return Err("a callback URL may not carry a #fragment".into());
        }
        let host = url
            .host_str()
            .ok_or_else(|| format!("\"{raw}\" has no host"))?
            .to_ascii_lowercase();
        let text = url.as_str();
        let allowed = self.allow.iter().any(|a| match a {
            Allow::Host(h) => *h == host,
            Allow::Prefix(p) => text.starts_with(p.as_str()),
        });
        if !allowed {
            return Err(format!(
                "{text} is not in [callbacks] allow (a host name or a URL prefix)"
            ));
        }
        if let Some(ip) = host_ip(&url) {
            self.check_address(ip)?;
        }
        Ok(text.to_string())
    }

    /// Whether trigd may connect to `ip`: public, or listed in
    /// `allow_private`.
    ///
    /// # Errors
    /// A sentence naming the address and why it is refused.
    pub fn check_address(&self, ip: IpAddr) -> Result<(), String> {
        let ip = ip.to_canonical();
        if let Some(why) = unreachable(ip) {
            return Err(format!("address {ip} is {why}"));
        }
        if self.allow_private.iter().any(|c| c.contains(ip)) {
            return Ok(());
        }
        match special(ip) {
            None => Ok(()),
            Some(kind) => Err(format!(
                "address {ip} is {kind}; list it in [callbacks] allow_private to allow it"
            )),
        }
    }
}

/// The IP address of a URL whose host is an address literal.
fn host_ip(url: &Url) -> Option<IpAddr> {
    match url.host()? {
        url::Host::Ipv4(a) => Some(IpAddr::V4(a)),
        url::Host::Ipv6(a) => Some(IpAddr::V6(a)),
        url::Host::Domain(_) => None,
    }
}

/// Why no callback may go to `ip`, whatever `allow_private` says: a
/// deprecated IPv4-compatible IPv6 address (`::a.b.c.d`, RFC 4291 2.5.5.1),
/// which URL parsers accept and no network routes; a site-local one
/// (`fec0::/10`, deprecated by RFC 3879: no scope defines where it goes);
/// the unspecified `::`, which a connect sends to this host's loopback
/// (listing it would open loopback under another name).
fn unreachable(ip: IpAddr) -> Option<&'static str> {
    let IpAddr::V6(a) = ip else { return None };
    let s = a.segments();
    if a.is_unspecified() {
        return Some("the unspecified address, which a connection sends to this host's loopback");
    }
    if s[0] & 0xffc0 == 0xfec0 {
        return Some("a deprecated site-local address (fec0::/10, RFC 3879)");
    }
    let compatible = s[..6] == [0; 6] && !a.is_loopback();
    compatible.then_some(
        "a deprecated IPv4-compatible IPv6 address (::a.b.c.d), which no network routes; \
         write the IPv4 address itself",
    )
}

/// The IPv4 address carried inside an IPv6 one that reaches it:
/// NAT64 (`64:ff9b::/96`, `64:ff9b:1::/48`), 6to4 (`2002::/16`), SIIT's
/// IPv4-translated (`::ffff:0:0:0/96`) and the IPv4-compatible form.
fn embedded_v4(a: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = a.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if (s[0] == 0x64 && s[1] == 0xff9b && (s[2..6] == [0; 4] || s[2] == 1))
        || (s[..4] == [0; 4] && s[4] == 0xffff && s[5] == 0)
        || (s[..6] == [0; 6] && !a.is_unspecified() && !a.is_loopback())
    {
        return Some(low);
    }
    (s[0] == 0x2002)
        .then(|| Ipv4Addr::new((s[1] >> 8) as u8, s[1] as u8, (s[2] >> 8) as u8, s[2] as u8))
}

/// What kind of non-public address `ip` is, if it is one: an IPv4
/// address in any IPv6 spelling (mapped, compatible, NAT64, 6to4) is
/// judged as that IPv4 address.
pub fn special(ip: IpAddr) -> Option<&'static str> {
    match ip.to_canonical() {
        IpAddr::V4(a) => special_v4(a),
        IpAddr::V6(a) => special_v6(a),
    }
}

fn special_v4(a: Ipv4Addr) -> Option<&'static str> {
    let [b0, b1, ..] = a.octets();
    if a.is_loopback() {
        Some("a loopback address")
    } else if a.is_private() || (b0 == 100 && (64..128).contains(&b1)) {
        Some("a private address")
    } else if a.is_link_local() {
        Some("a link-local address")
    } else if a.is_unspecified() || b0 == 0 || a.is_broadcast() || a.is_multicast() || b0 >= 240 {
        Some("not a unicast address")
    } else if a.is_documentation() {
        Some("a documentation address")
    } else {
        None
    }
}

fn special_v6(a: Ipv6Addr) -> Option<&'static str> {
    let s0 = a.segments()[0];
    if a.is_loopback() {
        Some("a loopback address")
    } else if s0 & 0xfe00 == 0xfc00 {
        Some("a private (unique local) address")
    } else if s0 & 0xffc0 == 0xfe80 {
        Some("a link-local address")
    } else if a.is_unspecified() || a.is_multicast() {
        Some("not a unicast address")
    } else if s0 == 0x2001 && a.segments()[1] == 0x0db8 {
        Some("a documentation address")
    } else if s0 & 0xffc0 == 0xfec0 {
        Some("a site-local address")
    } else {
        embedded_v4(a).and_then(special_v4)
    }
}

/// `[callbacks]` checked; `dir` is the directory of config.toml.
pub(super) fn callbacks(src: &Src, raw: &RawCallbacks, dir: &Path, errs: &mut Errors) -> Callbacks {
    let d = Callbacks::default();
    let mut dur = |v: &Option<Spanned<RawDuration>>, key: &str, default: Duration| {
        duration(src, v.as_ref(), &format!("callbacks.{key}"), default, errs)
    };
    let timeout = dur(&raw.timeout, "timeout", d.timeout);
    let retry_for = dur(&raw.retry_for, "retry_for", d.retry_for);
    let backoff = dur(&raw.backoff, "backoff", d.backoff);
    let backoff_max = dur(&raw.backoff_max, "backoff_max", d.backoff_max);
    if let Some(m) = raw.backoff_max.as_ref().filter(|_| backoff_max < backoff) {
        let msg = "backoff_max must not be shorter than backoff";
        errs.at(src, m.span(), "callbacks.backoff_max", msg);
    }
    let bounds = (d.workers, 1, super::raw::defaults::MAX_WORKERS);
    let workers = count_within(src, &raw.workers, "callbacks.workers", bounds, errs);
    let max_pending = count(
        src,
        &raw.max_pending,
        "callbacks.max_pending",
        d.max_pending,
        1,
        errs,
    );
    let secret = secret(src, raw, dir, errs);
    let given = raw.secret_env.is_some() || raw.secret_file.is_some();
    Callbacks {
        allow: allow_list(src, &raw.allow, errs),
        allow_private: private_list(src, &raw.allow_private, errs),
        secret_unusable: given && secret.is_none(),
        secret,
        secret_file: raw
            .secret_file
            .as_ref()
            .and_then(|f| super::secret_path(dir, f.get_ref()).ok()),
        extra_roots: ca_file(src, raw.ca_file.as_ref(), dir, "callbacks.ca_file", errs),
        timeout,
        retry_for,
        backoff,
        backoff_max: backoff_max.max(backoff),
        workers,
        max_pending,
        public_url: None,
    }
}

fn allow_list(src: &Src, raw: &[Spanned<String>], errs: &mut Errors) -> Vec<Allow> {
    let mut out = Vec::new();
    for (i, a) in raw.iter().enumerate() {
        let text = a.get_ref().trim();
        let entry = if text.contains("://") {
            match Url::parse(text) {
                Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {
                    Ok(Allow::Prefix(u.as_str().to_string()))
                }
                _ => Err(format!("\"{text}\" is not an http(s) URL prefix")),
            }
        } else if is_host(text) {
            Ok(Allow::Host(text.to_ascii_lowercase()))
        } else {
            Err(format!(
                "\"{text}\" is neither a host name (\"hooks.example.com\") nor a URL prefix (\"https://hooks.example.com/ci/\")"
            ))
        };
        match entry {
            Ok(e) => out.push(e),
            Err(msg) => errs.at(src, a.span(), format!("callbacks.allow[{i}]"), msg),
        }
    }
    out
}

/// A host name, an IPv4 address or a bracketed IPv6 address (`[::1]`), as
/// the host of a URL is written.
fn is_host(text: &str) -> bool {
    let v6 = text.starts_with('[') && text.ends_with(']');
    !text.is_empty() && !text.contains(['/', ' ', '@', '?', '#']) && (v6 || !text.contains(':'))
}

fn private_list(src: &Src, raw: &[Spanned<String>], errs: &mut Errors) -> Vec<Cidr> {
    let mut out = Vec::new();
    for (i, c) in raw.iter().enumerate() {
        match Cidr::parse(c.get_ref().trim()) {
            Ok(c) => out.push(c),
            Err(msg) => errs.at(src, c.span(), format!("callbacks.allow_private[{i}]"), msg),
        }
    }
    out
}

/// The secret from `secret_env` or `secret_file` (exactly one; see
/// [`Secret::parse`]). Errors never show the secret.
fn secret(src: &Src, raw: &RawCallbacks, dir: &Path, errs: &mut Errors) -> Option<Secret> {
    let (value, span, key) = match (&raw.secret_env, &raw.secret_file) {
        (None, None) => return None,
        (Some(e), Some(_)) => {
            let msg = "set secret_env or secret_file, not both";
            errs.at(src, e.span(), "callbacks.secret_env", msg);
            return None;
        }
        (Some(e), None) => {
            let v = std::env::var(e.get_ref()).map_err(|_| {
                format!(
                    "environment variable {} is not set (or not UTF-8); it must hold the signing secret",
                    e.get_ref()
                )
            });
            (v, e.span(), "callbacks.secret_env")
        }
        (None, Some(f)) => {
            let v = super::secret_path(dir, f.get_ref()).and_then(|path| read_secret_text(&path));
            (v, f.span(), "callbacks.secret_file")
        }
    };
    let checked = value.and_then(|v| Secret::parse(&v));
    checked.map_err(|msg| errs.at(src, span, key, msg)).ok()
}

/// The text of the secret file at `path`.
fn read_secret_text(path: &Path) -> Result<String, String> {
    super::file::read_secret(path)
        .and_then(|b| {
            String::from_utf8(b)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
        })
        .map_err(|e| format!("cannot read the secret file {}: {e}", path.display()))
}

pub(super) fn ca_file(
    src: &Src,
    raw: Option<&Spanned<String>>,
    dir: &Path,
    key: &str,
    errs: &mut Errors,
) -> Vec<CertificateDer<'static>> {
    let Some(f) = raw else { return Vec::new() };
    let path = resolve(dir, Path::new(f.get_ref()));
    let certs: Result<Vec<_>, String> = super::file::read_ca(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))
        .and_then(|pem| {
            CertificateDer::pem_slice_iter(&pem)
                .map(|c| c.map(CertificateDer::into_owned))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("{} is not PEM: {e}", path.display()))
        });
    let usable =
        |c: &CertificateDer<'static>| rustls::RootCertStore::empty().add(c.clone()).is_ok();
    match certs {
        Ok(c) if !c.is_empty() && c.iter().all(usable) => c,
        Ok(c) if !c.is_empty() => {
            let msg = format!(
                "{} holds a certificate that cannot be used as a CA root",
                path.display()
            );
            errs.at(src, f.span(), key, msg);
            Vec::new()
        }
        Ok(_) => {
            let msg = format!("{} holds no CERTIFICATE block", path.display());
            errs.at(src, f.span(), key, msg);
            Vec::new()
        }
        Err(msg) => {
            errs.at(src, f.span(), key, msg);
            Vec::new()
        }
    }
}

/// A fixed callback of a function or trigger (`callback`): where, in
/// which shape, for which outcomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fixed {
    /// The checked, normalised URL.
    pub url: String,
    /// The body's shape (`format`).
    pub format: Format,
    /// The outcomes it is sent for (`on`); empty: every end.
    pub on: Vec<Outcome>,
}

/// Where a fixed callback is written: only a function's can be `overdue`
/// (a trigger's callback belongs to requests, and overdue has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    /// `[[functions]] callback`.
    Function,
    /// `[[tools.triggers]] callback`.
    Trigger,
}

/// The `format` names.
const FORMATS: [(&str, Format); 5] = [
    ("record", Format::Record),
    ("slack", Format::Slack),
    ("discord", Format::Discord),
    ("ntfy", Format::Ntfy),
    ("healthchecks", Format::Healthchecks),
];

/// A fixed `callback` of a function or trigger, checked now: a URL, or a
/// table `{ url, format, on }`. Refused URLs, unknown formats or outcomes
/// and a missing secret are load errors.
pub(super) fn fixed(
    src: &Src,
    cb: &Callbacks,
    raw: Option<&Spanned<toml::Value>>,
    key: &str,
    place: Place,
    errs: &mut Errors,
) -> Option<Fixed> {
    let raw = raw?;
    let parsed = match raw.get_ref() {
        toml::Value::String(url) => Ok((url.as_str(), Format::Record, Vec::new())),
        toml::Value::Table(t) => table(t, place),
        _ => Err(
            "a URL, or a table { url = \"https://…\", format = \"slack\", on = [\"failed\"] }"
                .into(),
        ),
    };
    let checked = parsed.and_then(|(url, format, on)| {
        need_secret(cb)?;
        let url = cb.check_url(url)?;
        Ok(Fixed { url, format, on })
    });
    checked
        .map_err(|msg| errs.at(src, raw.span(), key, msg))
        .ok()
}

/// The table form of a `callback`.
fn table(t: &toml::Table, place: Place) -> Result<(&str, Format, Vec<Outcome>), String> {
    if let Some(k) = t
        .keys()
        .find(|k| !matches!(k.as_str(), "url" | "format" | "on"))
    {
        return Err(format!(
            "unknown key \"{k}\"; a callback table has url, format and on"
        ));
    }
    let url = t
        .get("url")
        .and_then(toml::Value::as_str)
        .ok_or("a callback table needs url = \"https://…\"")?;
    let format = match t.get("format") {
        None => Format::Record,
        Some(v) => {
            let name = v.as_str().unwrap_or_default();
            FORMATS
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, f)| *f)
                .ok_or_else(|| {
                    format!("unknown format {v}; use record, slack, discord, ntfy or healthchecks")
                })?
        }
    };
    let on = match t.get("on") {
        None => Vec::new(),
        Some(toml::Value::Array(list)) => outcomes(list, place)?,
        Some(_) => {
            return Err("on is a list of outcomes, e.g. on = [\"failed\", \"recovered\"]".into())
        }
    };
    if format == Format::Healthchecks && !on.is_empty() {
        return Err("format \"healthchecks\" takes no on: healthchecks.io needs every start and end (it decides whom to alert)".into());
    }
    Ok((url, format, on))
}

/// The outcomes of an `on` list.
fn outcomes(list: &[toml::Value], place: Place) -> Result<Vec<Outcome>, String> {
    let mut out = Vec::new();
    for v in list {
        let name = v.as_str().unwrap_or_default();
        let o = Outcome::ALL
            .into_iter()
            .find(|o| o.name() == name)
            .ok_or_else(|| {
                format!("unknown outcome {v}; use finished, failed, timed_out, cancelled, interrupted, recovered or overdue")
            })?;
        if o == Outcome::Overdue && place == Place::Trigger {
            return Err("overdue is a function's, not a trigger's: put this callback on the function (with expect_every)".into());
        }
        if !out.contains(&o) {
            out.push(o);
        }
    }
    if out.is_empty() {
        return Err("on is empty: leave it out to be called at every end".into());
    }
    Ok(out)
}

/// A `request_callbacks` switch; `true` needs the signing secret.
pub(super) fn permit(
    src: &Src,
    cb: &Callbacks,
    raw: Option<&Spanned<bool>>,
    key: &str,
    errs: &mut Errors,
) -> bool {
    let Some(on) = raw.filter(|v| *v.get_ref()) else {
        return false;
    };
    match need_secret(cb) {
        Ok(()) => true,
        Err(msg) => {
            errs.at(src, on.span(), key, msg);
            false
        }
    }
}

fn need_secret(cb: &Callbacks) -> Result<(), String> {
    match cb.secret {
        // The load fails on the secret's own error already.
        Some(_) => Ok(()),
        None if cb.secret_unusable => Ok(()),
        None => Err(
            "callbacks are signed: set [callbacks] secret_env or secret_file in config.toml".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(allow: &[Allow], private: &[&str]) -> Callbacks {
        Callbacks {
            allow: allow.to_vec(),
            allow_private: private.iter().map(|c| Cidr::parse(c).unwrap()).collect(),
            ..Callbacks::default()
        }
    }

    #[test]
    fn cidr_blocks() {
        let c = Cidr::parse("10.1.0.0/16").unwrap();
        assert!(c.contains("10.1.200.3".parse().unwrap()));
        assert!(!c.contains("10.2.0.1".parse().unwrap()));
        assert!(Cidr::parse("127.0.0.1")
            .unwrap()
            .contains("::ffff:127.0.0.1".parse().unwrap()));
        assert!(Cidr::parse("fe80::/10")
            .unwrap()
            .contains("fe80::1".parse().unwrap()));
        assert!(Cidr::parse("0.0.0.0/0")
            .unwrap()
            .contains("8.8.8.8".parse().unwrap()));
        for bad in ["10.0.0.0/33", "x", "10.0.0/8", "::/129", ""] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn special_addresses() {
        for a in [
            "127.0.0.1",
            "10.0.0.1",
            "172.16.5.4",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:10.0.0.1",
            "::",
            "::127.0.0.1",
            "::ffff:0:127.0.0.1",
            "64:ff9b::127.0.0.1",
            "64:ff9b:1::a00:1",
            "2002:7f00:1::1",
            "2002:a9fe:a9fe::1",
            "fec0::1",
        ] {
            assert!(special(a.parse().unwrap()).is_some(), "{a}");
        }
        for a in [
            "8.8.8.8",
            "1.1.1.1",
            "2606:4700::1111",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ] {
            assert!(special(a.parse().unwrap()).is_none(), "{a}");
        }
        // Unreachable whatever allow_private says: the IPv4-compatible form.
        let all = settings(&[Allow::Prefix("http://".into())], &["0.0.0.0/0", "::/0"]);
        for u in [
            "http://[::127.0.0.1]/",
            "http://[::8.8.8.8]/",
            "http://[::7f00:1]:9/x",
        ] {
            let e = all.check_url(u).unwrap_err();
            assert!(e.contains("IPv4-compatible"), "{u}: {e}");
        }
        // So are the unspecified address and site-local ones, and the
        // refusal does not point to allow_private.
        for (u, why) in [
            ("http://[::]:9/x", "unspecified"),
            ("http://[fec0::1]/x", "site-local"),
            ("http://[feff::1]/x", "site-local"),
        ] {
            let e = all.check_url(u).unwrap_err();
            assert!(e.contains(why) && !e.contains("allow_private"), "{u}: {e}");
            let e = settings(&[Allow::Prefix("http://".into())], &[])
                .check_url(u)
                .unwrap_err();
            assert!(e.contains(why) && !e.contains("allow_private"), "{u}: {e}");
        }
        for u in [
            "http://[::ffff:127.0.0.1]/",
            "http://[::]/",
            "http://0x7f.1/",
            "http://2130706433/",
            "http://127.1/",
            "http://[64:ff9b::7f00:1]/",
        ] {
            let e = settings(&[Allow::Prefix("http://".into())], &[]).check_url(u);
            assert!(e.is_err(), "{u} accepted");
        }
    }

    #[test]
    fn urls_follow_the_allow_list() {
        let s = settings(
            &[
                Allow::Host("hooks.example.com".into()),
                Allow::Prefix("https://ci.example.org/trigd/".into()),
                Allow::Host("127.0.0.1".into()),
                Allow::Host("10.0.0.9".into()),
                Allow::Host("[::1]".into()),
            ],
            &["127.0.0.1"],
        );
        assert!(s.check_url("https://hooks.example.com/x").is_ok());
        assert!(s.check_url("http://HOOKS.example.com:8443/x?y=1").is_ok());
        assert!(s.check_url("https://ci.example.org/trigd/done").is_ok());
        assert!(s.check_url("http://127.0.0.1:9/cb").is_ok());
        assert!(s
            .check_url("http://[::1]:9/cb")
            .unwrap_err()
            .contains("loopback"));
        assert!(is_host("[::1]") && is_host("a.example") && !is_host("a:1") && !is_host(""));
        let refused = [
            "https://ci.example.org/other",
            "https://ci.example.org/trigd",
            "https://evil.example.com/",
            "https://hooks.example.com.evil.org/",
            "ftp://hooks.example.com/",
            "https://user:pw@hooks.example.com/",
            "https://hooks.example.com/#frag",
            "http://10.0.0.9/",
            "not a url",
        ];
        for u in refused {
            assert!(s.check_url(u).is_err(), "{u} accepted");
        }
        assert!(s
            .check_url("http://10.0.0.9/")
            .unwrap_err()
            .contains("allow_private"));
    }
}
