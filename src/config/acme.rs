//! `[acme]` of `config.toml`: obtain and renew the HTTPS certificate from an
//! ACME directory (Let's Encrypt by default). Read at start only: the
//! renewal thread (`http::acme`) keeps the settings it started with.

use std::path::Path;
use std::time::Duration;

use rustls_pki_types::CertificateDer;
use toml::Spanned;
use url::Url;

use super::raw::RawAcme;
use super::types::{duration, Errors, Src};

/// Defaults of `[acme]`.
pub mod defaults {
    /// `directory`: Let's Encrypt's production directory.
    pub const DIRECTORY: &str = "https://acme-v02.api.letsencrypt.org/directory";
    /// `challenge`.
    pub const CHALLENGE: &str = "http-01";
    /// `timeout` of one request to the ACME server, in seconds.
    pub const TIMEOUT_SECS: u64 = 30;
    /// `retry_min`: the first wait after a failed attempt, in seconds.
    pub const RETRY_MIN_SECS: u64 = 60;
    /// `retry_max`: the longest wait between attempts, in seconds (6h).
    pub const RETRY_MAX_SECS: u64 = 6 * 3600;
}

/// Domains in one certificate at most (Let's Encrypt's limit).
pub const MAX_DOMAINS: usize = 100;

/// The validated `[acme]` settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Acme {
    /// The names of the certificate, lower case; the first is its subject.
    pub domains: Vec<String>,
    /// Contact URLs of the account (`mailto:`).
    pub contact: Vec<String>,
    /// The directory URL of the ACME server.
    pub directory: String,
    /// Certificates trusted besides the bundled roots to reach `directory`.
    pub extra_roots: Vec<CertificateDer<'static>>,
    /// Renew this long before `notAfter`; `None`: at two thirds of the
    /// certificate's lifetime.
    pub renew_before: Option<Duration>,
    /// Time one request to the ACME server may take.
    pub timeout: Duration,
    /// The first wait after a failed attempt; doubles each time.
    pub retry_min: Duration,
    /// The longest wait between two attempts.
    pub retry_max: Duration,
}

/// `[acme]` checked, or `None` when the table is absent.
pub fn acme(
    src: &Src,
    raw: Option<&Spanned<RawAcme>>,
    dir: &Path,
    errs: &mut Errors,
) -> Option<Acme> {
    let table = raw?;
    let r = table.get_ref();
    let key = |k: &str| format!("acme.{k}");
    if r.terms_accepted.as_ref().is_none_or(|t| !*t.get_ref()) {
        let span = r
            .terms_accepted
            .as_ref()
            .map_or(table.span(), Spanned::span);
        let msg = "set terms_accepted = true once you have read and accept the ACME \
                   server's terms of service (Let's Encrypt: https://letsencrypt.org/repository/)";
        errs.at(src, span, key("terms_accepted"), msg);
    }
    if let Some(c) = r.challenge.as_ref().filter(|c| c.get_ref() != "http-01") {
        let msg = format!(
            "challenge \"{}\" is not supported: the only one is \"http-01\"",
            c.get_ref()
        );
        errs.at(src, c.span(), key("challenge"), msg);
    }
    let mut d = |v: Option<&Spanned<super::raw::RawDuration>>, k: &str, default: u64| {
        duration(src, v, &key(k), Duration::from_secs(default), errs)
    };
    let timeout = d(r.timeout.as_ref(), "timeout", defaults::TIMEOUT_SECS);
    let retry_min = d(r.retry_min.as_ref(), "retry_min", defaults::RETRY_MIN_SECS);
    let retry_max = d(r.retry_max.as_ref(), "retry_max", defaults::RETRY_MAX_SECS);
    let renew_before = r
        .renew_before
        .as_ref()
        .map(|v| d(Some(v), "renew_before", 1));
    Some(Acme {
        domains: domains(src, table, errs),
        contact: contact(src, &r.contact, errs),
        directory: directory(src, r.directory.as_ref(), errs),
        extra_roots: super::callbacks::ca_file(src, r.ca_file.as_ref(), dir, "acme.ca_file", errs),
        renew_before,
        timeout,
        retry_min,
        retry_max: retry_max.max(retry_min),
    })
}

/// `domains`: 1 to [`MAX_DOMAINS`] DNS names, no wildcard (HTTP-01 cannot
/// prove one), no duplicate.
fn domains(src: &Src, table: &Spanned<RawAcme>, errs: &mut Errors) -> Vec<String> {
    let list = &table.get_ref().domains;
    if list.is_empty() || list.len() > MAX_DOMAINS {
        let msg = format!("domains must name 1 to {MAX_DOMAINS} DNS names");
        errs.at(src, table.span(), "acme.domains", msg);
    }
    let mut out: Vec<String> = Vec::new();
    for d in list {
        let name = d.get_ref().to_ascii_lowercase();
        let why = if !is_dns_name(&name) {
            Some(format!(
                "\"{}\" is not a DNS name (letters, digits, '-' and '.', no wildcard, at most 253 bytes, with a dot)",
                d.get_ref()
            ))
        } else if out.contains(&name) {
            Some(format!("\"{name}\" is listed twice"))
        } else {
            None
        };
        match why {
            Some(msg) => errs.at(src, d.span(), "acme.domains", msg),
            None => out.push(name),
        }
    }
    out
}

/// Whether `name` (lower case) is a DNS name with at least two labels of
/// `a-z`, `0-9` and inner `-`.
pub fn is_dns_name(name: &str) -> bool {
    let label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    name.len() <= 253 && name.contains('.') && name.split('.').all(label)
}

/// `contact`: `mailto:` URLs.
fn contact(src: &Src, list: &[Spanned<String>], errs: &mut Errors) -> Vec<String> {
    let mut out = Vec::new();
    for c in list {
        let v = c.get_ref();
        let ok = v
            .strip_prefix("mailto:")
            .is_some_and(|a| a.contains('@') && !a.contains([' ', ',']));
        if ok {
            out.push(v.clone());
        } else {
            let msg = format!("\"{v}\" is not a contact: write \"mailto:you@example.org\"");
            errs.at(src, c.span(), "acme.contact", msg);
        }
    }
    out
}

/// `directory`: an http(s) URL, by default Let's Encrypt's production one.
fn directory(src: &Src, raw: Option<&Spanned<String>>, errs: &mut Errors) -> String {
    let Some(v) = raw else {
        return defaults::DIRECTORY.into();
    };
    match Url::parse(v.get_ref()) {
        Ok(u) if matches!(u.scheme(), "https" | "http") && u.host_str().is_some() => {
            v.get_ref().clone()
        }
        _ => {
            let msg = format!(
                "\"{}\" is not an http(s) URL of an ACME directory",
                v.get_ref()
            );
            errs.at(src, v.span(), "acme.directory", msg);
            defaults::DIRECTORY.into()
        }
    }
}
