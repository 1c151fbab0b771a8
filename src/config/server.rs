//! `[server]` → [`Server`]: every setting with its default filled in,
//! counts and durations checked, directories resolved.

use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use toml::Spanned;

use super::raw::{self, defaults, RawDuration};
use super::types::{count, count_within, duration, Errors, Src};
use super::{resolve, Server, SocketFile, TrustedProxies};

/// Reads the settings of one `[server]` table, recording errors.
struct Reader<'a, 'e> {
    src: &'a Src<'a>,
    errs: &'e mut Errors,
}

impl Reader<'_, '_> {
    /// A count of at least `min`, or `default`.
    fn count(&mut self, v: &raw::Count, key: &str, default: usize, min: i64) -> usize {
        count(
            self.src,
            v,
            &format!("server.{key}"),
            default,
            min,
            self.errs,
        )
    }

    /// A duration, or `default_secs`.
    fn duration(
        &mut self,
        v: &Option<Spanned<RawDuration>>,
        key: &str,
        default_secs: u64,
    ) -> Duration {
        let default = Duration::from_secs(default_secs);
        duration(
            self.src,
            v.as_ref(),
            &format!("server.{key}"),
            default,
            self.errs,
        )
    }
}

/// `request_timeout`: at least a second. Shorter, a request's head could
/// not arrive on any real network in time and the server answered
/// nothing but `408` (`"1ns"` was taken).
fn request_timeout(r: &mut Reader, raw: &raw::RawServer) -> Duration {
    let t = r.duration(
        &raw.request_timeout,
        "request_timeout",
        defaults::REQUEST_TIMEOUT_SECS,
    );
    if let Some(v) = raw
        .request_timeout
        .as_ref()
        .filter(|_| t < Duration::from_secs(1))
    {
        let msg = "request_timeout must be at least 1s (a whole request, head and body, must arrive within it)";
        r.errs.at(r.src, v.span(), "server.request_timeout", msg);
    }
    t
}

/// `[server]` with defaults filled in and directories resolved.
pub fn server(src: &Src, raw: &raw::RawServer, dir: &Path, errs: &mut Errors) -> Server {
    public_url(src, raw, errs);
    let trusted_proxies = trusted_proxies(src, &raw.trusted_proxies, errs);
    let socket = SocketFile {
        mode: socket_mode(src, raw.socket_mode.as_ref(), errs),
        user: socket_owner(src, raw.socket_user.as_ref(), "user", errs),
        group: socket_owner(src, raw.socket_group.as_ref(), "group", errs),
    };
    let instance = instance(src, raw.instance.as_ref(), errs);
    let drain_delay = drain_delay(src, raw, errs);
    let fire_schedules = fire_schedules(src, raw.schedules.as_ref(), errs);
    let hooks = crate::compat::webhook::settings::settings(src, raw, dir, errs);
    let tls = super::tls::tls(src, raw, dir, errs);
    let mut r = Reader { src, errs };
    let max_concurrent_runs = r.count(
        &raw.max_concurrent_runs,
        "max_concurrent_runs",
        defaults::max_concurrent_runs(),
        1,
    );
    // The key in errors is the field's name, so the two cannot drift apart.
    macro_rules! count {
        ($field:ident, $default:ident, $min:expr) => {
            r.count(&raw.$field, stringify!($field), defaults::$default, $min)
        };
    }
    macro_rules! duration {
        ($field:ident, $default:ident) => {
            r.duration(&raw.$field, stringify!($field), defaults::$default)
        };
    }
    let programs_dir = dir_of(src, raw.programs_dir.as_ref(), "programs_dir", r.errs);
    let state_dir =
        dir_of(src, raw.state_dir.as_ref(), "state_dir", r.errs).unwrap_or(defaults::STATE_DIR);
    let shared_state_dir = dir_of(
        src,
        raw.shared_state_dir.as_ref(),
        "shared_state_dir",
        r.errs,
    )
    .unwrap_or(state_dir);
    listen_address(src, raw.listen.as_ref(), r.errs);
    let https = raw
        .public_url
        .as_ref()
        .is_some_and(|u| u.get_ref().starts_with("https://"));
    Server {
        listen: raw
            .listen
            .as_ref()
            .map_or_else(|| defaults::LISTEN.into(), |l| l.get_ref().clone()),
        workers: count_within(
            src,
            &raw.workers,
            "server.workers",
            (defaults::WORKERS, 1, defaults::MAX_WORKERS),
            r.errs,
        ),
        programs_dir: resolve(
            dir,
            Path::new(programs_dir.unwrap_or(defaults::PROGRAMS_DIR)),
        ),
        state_dir: resolve(dir, Path::new(state_dir)),
        shared_state_dir: resolve(dir, Path::new(shared_state_dir)),
        instance,
        fire_schedules,
        drain_delay,
        public_url: raw.public_url.as_ref().map(|u| u.get_ref().clone()),
        max_concurrent_runs,
        max_concurrent_async_runs: async_runs(src, raw, max_concurrent_runs, r.errs),
        max_queued_runs: count!(max_queued_runs, MAX_QUEUED_RUNS, 0),
        run_timeout: duration!(run_timeout, RUN_TIMEOUT_SECS),
        kill_grace: duration!(kill_grace, KILL_GRACE_SECS),
        shutdown_grace: duration!(shutdown_grace, SHUTDOWN_GRACE_SECS),
        max_output_bytes: count!(max_output_bytes, MAX_OUTPUT_BYTES, 1),
        max_variables: count!(max_variables, MAX_VARIABLES, 1),
        max_variable_bytes: count!(max_variable_bytes, MAX_VARIABLE_BYTES, 1),
        max_body_bytes: count!(max_body_bytes, MAX_BODY_BYTES, 1),
        max_waiting_bytes: count!(max_waiting_bytes, MAX_WAITING_BYTES, 1),
        run_retention: count!(run_retention, RUN_RETENTION, 1),
        max_connections: count!(max_connections, MAX_CONNECTIONS, 1),
        request_timeout: request_timeout(&mut r, raw),
        max_header_bytes: count!(max_header_bytes, MAX_HEADER_BYTES, 256),
        max_url_bytes: count!(max_url_bytes, MAX_URL_BYTES, 64),
        cookie_secure: raw.cookie_secure.unwrap_or(false) || https,
        session_idle: duration!(session_idle, SESSION_IDLE_SECS),
        session_max: duration!(session_max, SESSION_MAX_SECS),
        auth_failures_per_minute: count!(auth_failures_per_minute, AUTH_FAILURES_PER_MINUTE, 0),
        queue_timeout: duration!(queue_timeout, QUEUE_TIMEOUT_SECS),
        idempotency_window: duration!(idempotency_window, IDEMPOTENCY_WINDOW_SECS),
        idempotency_max_keys: count!(idempotency_max_keys, IDEMPOTENCY_MAX_KEYS, 1),
        trusted_proxies,
        socket,
        callbacks: Default::default(),
        hooks,
        tls,
        acme: None,
        state_db: None,
    }
}

/// `max_concurrent_async_runs`: at least 1, at most `max_concurrent_runs`
/// (`max`); by default half of it.
fn async_runs(src: &Src, raw: &raw::RawServer, max: usize, errs: &mut Errors) -> usize {
    let key = "server.max_concurrent_async_runs";
    let default = defaults::max_concurrent_async_runs(max);
    let n = count(src, &raw.max_concurrent_async_runs, key, default, 1, errs);
    if n > max {
        if let Some(v) = &raw.max_concurrent_async_runs {
            let msg = format!("must be at most max_concurrent_runs ({max}), got {n}");
            errs.at(src, v.span(), key, msg);
        }
        return max;
    }
    n
}

/// `drain_delay`: a duration, and unlike the others it may be 0 (no drain).
fn drain_delay(src: &Src, raw: &raw::RawServer, errs: &mut Errors) -> Duration {
    match raw.drain_delay.as_ref().map(|v| v.get_ref()) {
        Some(RawDuration::Secs(0)) => Duration::ZERO,
        Some(RawDuration::Text(t)) if matches!(t.trim(), "0" | "0s") => Duration::ZERO,
        _ => Reader { src, errs }.duration(
            &raw.drain_delay,
            "drain_delay",
            defaults::DRAIN_DELAY_SECS,
        ),
    }
}

/// `schedules`: `fire` (true, the default) or `off`.
fn fire_schedules(src: &Src, raw: Option<&Spanned<String>>, errs: &mut Errors) -> bool {
    match raw.map(|r| r.get_ref().as_str()) {
        None | Some("fire") => true,
        Some("off") => false,
        Some(other) => {
            let msg = format!("\"{other}\" is not one of fire, off");
            errs.at(
                src,
                raw.map_or(0..0, Spanned::span),
                "server.schedules",
                msg,
            );
            true
        }
    }
}

/// `instance`: a valid instance name, or the one derived from the host name.
fn instance(src: &Src, raw: Option<&Spanned<String>>, errs: &mut Errors) -> String {
    let Some(name) = raw else {
        return crate::runs::cluster::default_name();
    };
    if !crate::runs::cluster::valid_name(name.get_ref()) {
        errs.at(
            src,
            name.span(),
            "server.instance",
            "instance must be 1 to 63 of a-z, 0-9, '_' and '-', starting with a letter or digit",
        );
    }
    name.get_ref().clone()
}

/// A directory setting (`programs_dir`, `state_dir`, `shared_state_dir`):
/// an empty one is refused (it would mean the config's own directory,
/// which nobody writes as `""`).
fn dir_of<'a>(
    src: &Src,
    raw: Option<&'a Spanned<String>>,
    key: &str,
    errs: &mut Errors,
) -> Option<&'a str> {
    let d = raw?;
    if d.get_ref().is_empty() {
        let msg = format!("{key} must not be empty (a directory, relative to the config's)");
        errs.at(src, d.span(), format!("server.{key}"), msg);
    }
    Some(d.get_ref().as_str())
}

/// `listen` must be `host:port` (a port number; an IPv6 address in
/// brackets) or `unix:PATH`. The host is not resolved here: a name may
/// resolve only on the host that serves.
fn listen_address(src: &Src, raw: Option<&Spanned<String>>, errs: &mut Errors) {
    let Some(l) = raw else { return };
    if let Err(why) = check_listen(l.get_ref()) {
        let msg = format!("listen must be host:port or unix:PATH ({why})");
        errs.at(src, l.span(), "server.listen", msg);
    }
}

/// Why `addr` cannot be a `listen` address.
fn check_listen(addr: &str) -> Result<(), &'static str> {
    if let Some(path) = addr.strip_prefix(crate::http::listen::UNIX_PREFIX) {
        return match path.is_empty() {
            true => Err("the socket's path is empty"),
            false => Ok(()),
        };
    }
    let Some((host, port)) = addr.rsplit_once(':') else {
        return Err("no port");
    };
    if port.parse::<u16>().is_err() {
        return Err("the port is not a number from 0 to 65535");
    }
    match host.strip_prefix('[').map(|h| h.strip_suffix(']')) {
        Some(Some(v6)) if v6.parse::<std::net::Ipv6Addr>().is_ok() => Ok(()),
        Some(_) => Err("an IPv6 address goes in brackets: [::1]:8080"),
        None if host.is_empty() => Err("no host: 0.0.0.0, 127.0.0.1 or a name"),
        None if host.contains(':') => Err("an IPv6 address goes in brackets: [::1]:8080"),
        None if host.chars().any(|c| c.is_whitespace() || c.is_control()) => {
            Err("the host holds white space")
        }
        None => Ok(()),
    }
}

/// `socket_user` / `socket_group` (`what`): a number, or a name this host
/// knows (checked here, so that `trigd check` tells what the bind would).
fn socket_owner(
    src: &Src,
    raw: Option<&Spanned<String>>,
    what: &str,
    errs: &mut Errors,
) -> Option<String> {
    let name = raw?;
    let n = name.get_ref();
    let known = n.parse::<u32>().is_ok()
        || match what {
            "user" => crate::sys::user_by_name(n).is_some(),
            _ => crate::sys::group_by_name(n).is_some(),
        };
    if !known {
        let shown: String = n.chars().take(64).collect();
        let msg = format!("no {what} called {shown:?} on this host");
        errs.at(src, name.span(), format!("server.socket_{what}"), msg);
    }
    Some(n.clone())
}

/// `public_url` must be an http(s) URL.
fn public_url(src: &Src, raw: &raw::RawServer, errs: &mut Errors) {
    if let Some(url) = &raw.public_url {
        if !(url.get_ref().starts_with("http://") || url.get_ref().starts_with("https://")) {
            let msg = "public_url must start with http:// or https://";
            errs.at(src, url.span(), "server.public_url", msg);
        }
    }
}

/// `socket_mode`: permission bits in octal, like `"0660"`.
fn socket_mode(src: &Src, raw: Option<&Spanned<String>>, errs: &mut Errors) -> u32 {
    let Some(m) = raw else {
        return defaults::SOCKET_MODE;
    };
    match u32::from_str_radix(m.get_ref().trim(), 8) {
        Ok(mode) if mode <= 0o777 => mode,
        _ => {
            let msg = format!(
                "\"{}\" is not a file mode (write permission bits in octal, like \"0660\")",
                m.get_ref()
            );
            errs.at(src, m.span(), "server.socket_mode", msg);
            defaults::SOCKET_MODE
        }
    }
}

/// `trusted_proxies`: each an IP address, or `unix` (peers on a Unix
/// socket).
fn trusted_proxies(src: &Src, raw: &[Spanned<String>], errs: &mut Errors) -> TrustedProxies {
    let mut out = TrustedProxies::default();
    for (i, p) in raw.iter().enumerate() {
        if p.get_ref().trim() == "unix" {
            out.unix = true;
            continue;
        }
        match p.get_ref().trim().parse::<IpAddr>() {
            Ok(ip) => out.ips.push(ip.to_canonical()),
            Err(_) => {
                let msg = format!(
                    "\"{}\" is not an IP address (write one address per entry, like \"127.0.0.1\" or \"::1\", or \"unix\" for a proxy on the Unix socket)",
                    p.get_ref()
                );
                errs.at(src, p.span(), format!("server.trusted_proxies[{i}]"), msg);
            }
        }
    }
    out
}
