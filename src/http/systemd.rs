//! systemd's notify protocol (sd_notify(3)), when systemd starts trigd with
//! `NOTIFY_SOCKET`: `READY=1` once the first load is done and the socket
//! bound; `RELOADING=1` with `MONOTONIC_USEC=` at the start of every reload
//! (SIGHUP, a changed file, the public switch), then `READY=1`;
//! `STOPPING=1` when the drain starts; `STATUS=` a one-line summary (sent
//! when it changed: looked at every 10 s, or at every ping); and
//! `WATCHDOG=1` every half `WATCHDOG_USEC` while the server answers.
//!
//! "Answers" means: a connection to the listener, made by the watchdog
//! thread like any client, gets a reply to `GET /healthz` within a quarter
//! of `WATCHDOG_USEC` (at most 5 s). That takes the accept loop, a
//! connection thread and the request handler, with the locks `/healthz`
//! takes (config, runner, store). Any status counts, `503 busy` and
//! `draining` included: a server that says it is full is not hung, and
//! restarting it would lose the runs it holds. The check is not
//! access-logged (`User-Agent: trigd-watchdog` on `/healthz`).
//!
//! The variables are read once and removed from the environment, so that
//! the programs trigd runs cannot speak for it.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::thread;
use std::time::Duration;

use crate::http::app::App;
use crate::http::listen::Reach;

/// The `User-Agent` of the watchdog's own check.
pub const WATCHDOG_AGENT: &str = "trigd-watchdog";

/// How often `STATUS=` is refreshed without a watchdog.
const STATUS_EVERY: Duration = Duration::from_secs(10);

/// The shortest time between two pings, and the shortest check.
const MIN_TICK: Duration = Duration::from_millis(20);

/// The longest wait for the watchdog's check.
const MAX_CHECK: Duration = Duration::from_secs(5);

/// What systemd asked for, read once at start.
struct Manager {
    /// `NOTIFY_SOCKET`: a path, or `@name` in the abstract namespace.
    socket: OsString,
    /// `WATCHDOG_USEC`, when `WATCHDOG_PID` is unset or names trigd.
    watchdog: Option<Duration>,
    /// The last `STATUS=` sent.
    status: Mutex<String>,
    /// `STOPPING=1` was sent: no more pings or status.
    stopping: AtomicBool,
}

static MANAGER: OnceLock<Option<Manager>> = OnceLock::new();

/// Read `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID` and remove them
/// from the environment. Call once, before any other thread starts.
pub fn init() {
    let socket = std::env::var_os("NOTIFY_SOCKET").filter(|s| !s.is_empty());
    let usec = std::env::var("WATCHDOG_USEC").ok();
    let pid = std::env::var("WATCHDOG_PID").ok();
    for name in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"] {
        std::env::remove_var(name);
    }
    let manager = socket.map(|socket| Manager {
        socket,
        watchdog: watchdog(usec.as_deref(), pid.as_deref()),
        status: Mutex::default(),
        stopping: AtomicBool::new(false),
    });
    let _ = MANAGER.set(manager);
}

/// The watchdog interval of `WATCHDOG_USEC`, unless `WATCHDOG_PID` names
/// another process; nothing for a value that is not a positive number.
fn watchdog(usec: Option<&str>, pid: Option<&str>) -> Option<Duration> {
    let usec: u64 = usec?.trim().parse().ok().filter(|&u| u > 0)?;
    let ours = pid.is_none_or(|p| p.trim().parse::<u32>().ok() == Some(std::process::id()));
    if !ours {
        log::info!("WATCHDOG_USEC is for another process (WATCHDOG_PID): no watchdog pings");
        return None;
    }
    Some(Duration::from_micros(usec))
}

fn manager() -> Option<&'static Manager> {
    MANAGER.get().and_then(Option::as_ref)
}

/// Send one message (lines `KEY=VALUE`); a failure is logged, never fatal.
fn send(m: &Manager, msg: &str) {
    if let Err(e) = send_to(&m.socket, msg.as_bytes()) {
        log::warn!("cannot notify systemd ({msg:?}): {e}");
    }
}

/// One datagram to the notify socket at `socket` (`@` starts an abstract
/// name).
fn send_to(socket: &OsString, msg: &[u8]) -> std::io::Result<usize> {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::ffi::OsStrExt;
    let sock = UnixDatagram::unbound()?;
    let bytes = socket.as_bytes();
    match bytes.strip_prefix(b"@") {
        Some(name) => {
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
            sock.send_to_addr(msg, &addr)
        }
        None => sock.send_to(msg, socket),
    }
}

/// `READY=1` with the status: the first load is done and the socket bound,
/// or a reload ended (whether it was applied or refused).
pub fn ready(app: &App) {
    if let Some(m) = manager() {
        let status = summary(app);
        send(m, &format!("READY=1\nSTATUS={status}"));
        *m.status.lock().unwrap_or_else(PoisonError::into_inner) = status;
    }
}

/// `RELOADING=1` with `MONOTONIC_USEC=`: a reload starts.
pub fn reloading() {
    if let Some(m) = manager() {
        let now = crate::sys::systemd::monotonic_usec();
        send(m, &format!("RELOADING=1\nMONOTONIC_USEC={now}"));
    }
}

/// `STOPPING=1`: the drain (or the stop) starts; no pings after it.
pub fn stopping() {
    if let Some(m) = manager() {
        m.stopping.store(true, Ordering::SeqCst);
        send(
            m,
            "STOPPING=1\nSTATUS=stopping: draining, then waiting for runs to finish",
        );
    }
}

/// The listen address the status names, set once bound.
static SHOWN: OnceLock<String> = OnceLock::new();

/// `serving 12 programs and 3 tools on 127.0.0.1:8080; 3 running, 0 queued`
/// (and the last reload's failure, if it failed).
fn summary(app: &App) -> String {
    let cfg = app.config();
    let on = SHOWN.get().map_or("", String::as_str);
    let mut s = format!(
        "serving {} programs and {} tools on {on}; {} running, {} queued",
        cfg.programs.len(),
        cfg.tools.len(),
        app.runner.in_flight(),
        app.runner.queued()
    );
    if app.last_reload_error().is_some() {
        s.push_str("; the last reload failed (see /healthz)");
    }
    s
}

/// Start the thread that refreshes `STATUS=` and, with a watchdog, pings
/// it while the server answers at `reach`. `shown`: the address the status
/// names.
pub fn start(app: &Arc<App>, reach: Reach, shown: &str) {
    let _ = SHOWN.set(shown.trim_start_matches("http://").to_string());
    let Some(m) = manager() else { return };
    // A tiny WATCHDOG_USEC must not make the thread spin.
    let tick = m.watchdog.map_or(STATUS_EVERY, |w| (w / 2).max(MIN_TICK));
    let wait = m
        .watchdog
        .map_or(MAX_CHECK, |w| (w / 4).clamp(MIN_TICK, MAX_CHECK));
    let app = Arc::clone(app);
    let spawned = thread::Builder::new()
        .name("systemd".into())
        .spawn(move || loop {
            thread::sleep(tick);
            if m.stopping.load(Ordering::SeqCst) {
                return;
            }
            refresh_status(m, &app);
            if m.watchdog.is_some() {
                ping(m, &reach, wait);
            }
        });
    if let Err(e) = spawned {
        log::error!("cannot start the systemd thread: {e}; no watchdog pings");
    }
}

/// Send `STATUS=` when the summary changed.
fn refresh_status(m: &Manager, app: &App) {
    let status = summary(app);
    let mut last = m.status.lock().unwrap_or_else(PoisonError::into_inner);
    if *last != status {
        send(m, &format!("STATUS={status}"));
        *last = status;
    }
}

/// `WATCHDOG=1` if the server answers its own check within `wait`.
fn ping(m: &Manager, reach: &Reach, wait: Duration) {
    match answers(reach, wait) {
        Ok(()) => send(m, "WATCHDOG=1"),
        Err(e) => log::warn!(
            "watchdog: the server did not answer its own check within {wait:?} ({e}): no \
             WATCHDOG=1 (systemd restarts trigd when WatchdogSec passes without one)"
        ),
    }
}

/// Whether a client connecting to `reach` gets a reply to `GET /healthz`
/// within `wait`: the first bytes of one.
fn answers(reach: &Reach, wait: Duration) -> std::io::Result<()> {
    const REQUEST: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nUser-Agent: trigd-watchdog\r\nConnection: close\r\n\r\n";
    let mut first = [0u8; 5];
    let n = match reach {
        Reach::Tcp(addr) => {
            let mut s = TcpStream::connect_timeout(addr, wait)?;
            s.set_read_timeout(Some(wait))?;
            s.set_write_timeout(Some(wait))?;
            s.write_all(REQUEST)?;
            s.read(&mut first)?
        }
        Reach::Unix(path) => {
            let mut s = UnixStream::connect(path)?;
            s.set_read_timeout(Some(wait))?;
            s.set_write_timeout(Some(wait))?;
            s.write_all(REQUEST)?;
            s.read(&mut first)?
        }
    };
    if n == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "closed without a reply",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watchdog_interval_is_ours_only() {
        let me = std::process::id().to_string();
        let s = Some(Duration::from_secs(2));
        assert_eq!(watchdog(Some("2000000"), None), s);
        assert_eq!(watchdog(Some("2000000"), Some(&me)), s);
        assert_eq!(watchdog(Some("2000000"), Some("1")), None);
        assert_eq!(watchdog(Some("0"), None), None);
        assert_eq!(watchdog(Some("-5"), None), None);
        assert_eq!(watchdog(Some("99999999999999999999999"), None), None);
        assert_eq!(watchdog(Some("x"), None), None);
        assert_eq!(watchdog(None, Some(&me)), None);
    }
}
