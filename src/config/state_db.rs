//! `[state]` of `config.toml`: where trigd keeps its shared state. Absent:
//! the state directory, as on one host. With `url`: a PostgreSQL database
//! that several instances share (`state::pg`). Read at start only.
//!
//! The password never appears in `url` (it would end up in logs, `ps` and
//! `/healthz`): it comes from `password_env` or `password_file`
//! (`credential:NAME` for a systemd credential), read once at load.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use url::Url;

pub use crate::state::pg::settings::{defaults, SslMode, StateDb};

use super::raw::RawState;
use super::types::{count, duration, Errors, Src};

/// `[state]` checked, or `None` when it names no database.
pub fn state_db(src: &Src, raw: &RawState, dir: &Path, errs: &mut Errors) -> Option<StateDb> {
    let Some(url) = raw.url.as_ref() else {
        if let Some((k, span)) = stray_key(raw) {
            let msg = format!("{k} needs url: without it the state is kept in state_dir");
            errs.at(src, span, format!("state.{k}"), msg);
        }
        return None;
    };
    let (shown, ssl, mut pg) = parse_url(url.get_ref())
        .map_err(|msg| errs.at(src, url.span(), "state.url", msg))
        .ok()?;
    if let Some(pw) = password(src, raw, dir, errs) {
        pg.password(pw);
    }
    pg.connect_timeout(Duration::from_secs(defaults::CONNECT_TIMEOUT_SECS));
    pg.tcp_user_timeout(Duration::from_secs(defaults::STATEMENT_TIMEOUT_SECS));
    pg.keepalives_idle(Duration::from_secs(defaults::STATEMENT_TIMEOUT_SECS));
    let options = session_options(pg.get_options());
    pg.options(&options);
    pg.application_name("trigd");
    let lease = duration(
        src,
        raw.lease.as_ref(),
        "state.lease",
        Duration::from_secs(defaults::LEASE_SECS),
        errs,
    );
    if let Some(v) = raw.lease.as_ref().filter(|_| lease < MIN_LEASE) {
        let msg = "the lease must be at least 1s: it is renewed every third of it, and a \
                   shorter one lapses at a slow round trip (other instances then end this \
                   one's runs)";
        errs.at(src, v.span(), "state.lease", msg);
    }
    Some(StateDb {
        url: shown,
        pg,
        ssl,
        roots: super::callbacks::ca_file(src, raw.ca_file.as_ref(), dir, "state.ca_file", errs),
        lease,
        pool: count(src, &raw.pool, "state.pool", defaults::POOL, 1, errs),
    })
}

/// The shortest `lease` taken (`lease = "1ms"` renewed it 3,700 times a
/// second and took the instance for lapsed again and again).
const MIN_LEASE: Duration = Duration::from_secs(1);

/// The session settings trigd needs (its bounds on statements and locks,
/// quiet notices) after those of the URL's `options` (`-c search_path=…`,
/// say): the URL's are kept, and where both set one, trigd's bound wins
/// (the later `-c` does), since requests rely on it.
fn session_options(url_options: Option<&str>) -> String {
    let ours = format!(
        "-c statement_timeout={}s -c lock_timeout={}s -c client_min_messages=warning",
        defaults::STATEMENT_TIMEOUT_SECS,
        defaults::STATEMENT_TIMEOUT_SECS
    );
    match url_options.map(str::trim).filter(|o| !o.is_empty()) {
        Some(theirs) => format!("{theirs} {ours}"),
        None => ours,
    }
}

/// A key of `[state]` that means nothing without `url`, and where it is.
fn stray_key(raw: &RawState) -> Option<(&'static str, std::ops::Range<usize>)> {
    [
        ("password_env", &raw.password_env),
        ("password_file", &raw.password_file),
        ("ca_file", &raw.ca_file),
    ]
    .into_iter()
    .find_map(|(k, v)| v.as_ref().map(|v| (k, v.span())))
}

/// `url`: a `postgres://` (or `postgresql://`) URL without a password;
/// its `sslmode` taken out. Returns the URL to show, the mode and the
/// client's settings.
fn parse_url(text: &str) -> Result<(String, SslMode, postgres::Config), String> {
    let hint = "write postgres://USER@HOST:PORT/DATABASE?sslmode=verify-full";
    let mut u = Url::parse(text).map_err(|e| format!("not a URL ({e}): {hint}"))?;
    if !matches!(u.scheme(), "postgres" | "postgresql") {
        return Err(format!(
            "the scheme must be postgres://, not {}://: {hint}",
            u.scheme()
        ));
    }
    if u.password().is_some() {
        return Err(
            "the URL holds a password, which would show in logs and `ps`: \
                    remove it and set password_env or password_file"
                .into(),
        );
    }
    let mut ssl = SslMode::parse(defaults::SSLMODE).unwrap_or(SslMode::Prefer);
    // The other parameters are passed on as written: encoded again, a
    // space would become `+`, which the client reads as a `+`.
    let mut rest = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for raw in u.query().unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let Some((k, v)) = url::form_urlencoded::parse(raw.as_bytes()).next() else {
            continue;
        };
        // The last one would win: `?sslmode=verify-full&sslmode=disable`
        // connected in plain text.
        if seen.iter().any(|s| *s == k) {
            return Err(format!("{k} is given twice: give it once"));
        }
        seen.push(k.to_string());
        match k.as_ref() {
            "sslmode" => {
                ssl = SslMode::parse(&v).ok_or_else(|| {
                    format!("sslmode={v} is not supported: write disable, prefer, require or verify-full")
                })?;
            }
            "password" => {
                return Err("the URL holds a password (password=…): \
                                      set password_env or password_file instead"
                    .into())
            }
            _ => rest.push(raw.to_string()),
        }
    }
    let query = rest.join("&");
    u.set_query((!query.is_empty()).then_some(query.as_str()));
    let pg = postgres::Config::from_str(u.as_str())
        .map_err(|e| format!("not a PostgreSQL URL: {e}: {hint}"))?;
    if pg.get_user().is_none() {
        return Err(format!("the URL names no user: {hint}"));
    }
    Ok((u.to_string(), ssl, pg))
}

/// The password from `password_env` or `password_file` (at most one;
/// surrounding white space dropped). Errors never show it.
fn password(src: &Src, raw: &RawState, dir: &Path, errs: &mut Errors) -> Option<String> {
    let (value, span, key) = match (&raw.password_env, &raw.password_file) {
        (None, None) => return None,
        (Some(e), Some(_)) => {
            let msg = "set password_env or password_file, not both";
            errs.at(src, e.span(), "state.password_env", msg);
            return None;
        }
        (Some(e), None) => {
            let v = std::env::var(e.get_ref()).map_err(|_| {
                format!(
                    "environment variable {} is not set (or not UTF-8); it must hold the database password",
                    e.get_ref()
                )
            });
            (v, e.span(), "state.password_env")
        }
        (None, Some(f)) => {
            let v = super::secret_path(dir, f.get_ref()).and_then(|path| {
                super::file::read_secret(&path)
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok())
                    .ok_or_else(|| {
                        format!(
                            "cannot read the password file {} (or it is not UTF-8)",
                            path.display()
                        )
                    })
            });
            (v, f.span(), "state.password_file")
        }
    };
    value
        .map(|v| v.trim().to_string())
        .map_err(|msg| errs.at(src, span, key, msg))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_urls_options_are_kept_before_trigds_own() {
        let (_, _, pg) =
            parse_url("postgres://trigd@db/trigd?options=-c%20search_path%3Dtrigd").unwrap();
        let o = session_options(pg.get_options());
        assert!(
            o.starts_with("-c search_path=trigd -c statement_timeout="),
            "{o}"
        );
        let (_, _, pg) = parse_url("postgres://trigd@db/trigd").unwrap();
        let o = session_options(pg.get_options());
        assert!(o.starts_with("-c statement_timeout="), "{o}");
        assert!(o.ends_with("-c client_min_messages=warning"), "{o}");
    }
}
