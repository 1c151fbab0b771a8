//! Browser login sessions, their cookie, CSRF checks, and the throttle on
//! failed logins.
//!
//! A session is 256 random bits, given to the browser in the
//! `trigd_session` cookie (HttpOnly, SameSite=Lax, Path=/, Secure when
//! configured) and stored server-side only as its sha256, in
//! `state/sessions.json` (temp file, fsync, rename, mode 0600 — the style of
//! `appkeys.rs`), so a restart logs nobody out. A session ends after
//! `session_idle` without a request, `session_max` after login, at logout,
//! when its user leaves the config, or when the user's password hash
//! changes.
//!
//! The one non-obvious decision: the last-seen time is persisted lazily (at
//! most every `min(60s, session_idle / 4)` per session) so that a page view
//! does not cost an fsync; after a restart a session may therefore expire
//! up to that much earlier than it would have.
//!
//! CSRF: the token of a session is derived from the session token
//! (`sha256("trigd-csrf\0" + token)`), so it needs no storage and cannot be
//! computed without the cookie.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::auth::sha256;
use crate::config::{Config, Server, User};
use crate::http::Request;

/// Name of the session cookie.
pub const COOKIE: &str = "trigd_session";
/// Sessions kept at most; past it the least recently used one is dropped.
const MAX_SESSIONS: usize = 10_000;

/// A valid session, as a handler sees it.
#[derive(Debug, Clone)]
pub struct Session {
    /// The user it belongs to.
    pub user: String,
    /// The CSRF token bound to this session (hex).
    pub csrf: String,
}

/// What is stored per session (keyed by the hex sha256 of the token).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Record {
    user: String,
    /// Unix milliseconds of the login.
    created_ms: u64,
    /// Unix milliseconds of the last request.
    last_seen_ms: u64,
    /// Fingerprint of the user's password hash at login.
    password: String,
    /// `last_seen_ms` as last written to disk.
    #[serde(skip)]
    saved_ms: u64,
}

/// The sessions of one state dir.
pub struct Sessions {
    path: PathBuf,
    by_hash: Mutex<HashMap<String, Record>>,
}

impl Sessions {
    /// Sessions kept in `state_dir/sessions.json`, loaded now (a missing or
    /// unreadable file starts empty; the error is logged).
    pub fn open(state_dir: &Path) -> Sessions {
        let path = state_dir.join("sessions.json");
        let by_hash = match fs::read(&path) {
            Ok(bytes) => {
                serde_json::from_slice::<HashMap<String, Record>>(&bytes).unwrap_or_else(|e| {
                    log::error!("ignoring {}: {e}", path.display());
                    HashMap::new()
                })
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => HashMap::new(),
            Err(e) => {
                log::error!("cannot read {}: {e}", path.display());
                HashMap::new()
            }
        };
        let by_hash = by_hash
            .into_iter()
            .map(|(k, mut r)| {
                r.saved_ms = r.last_seen_ms;
                (k, r)
            })
            .collect();
        Sessions {
            path,
            by_hash: Mutex::new(by_hash),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Record>> {
        self.by_hash.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Start a session for `user`; returns the token for the cookie (never
    /// stored).
    ///
    /// # Errors
    /// The state dir cannot be written.
    pub fn create(&self, server: &Server, user: &User) -> io::Result<String> {
        let token = hex::encode(rand::random::<[u8; 32]>());
        let now = now_ms();
        let mut all = self.lock();
        all.retain(|_, r| alive(server, r, now));
        if all.len() >= MAX_SESSIONS {
            let oldest = all
                .iter()
                .min_by_key(|(_, r)| r.last_seen_ms)
                .map(|(k, _)| k.clone());
            all.remove(&oldest.unwrap_or_default());
        }
        let record = Record {
            user: user.name.clone(),
            created_ms: now,
            last_seen_ms: now,
            password: fingerprint(&user.password_hash),
            saved_ms: now,
        };
        all.insert(hex::encode(sha256(&token)), record);
        write_file(&self.path, &all)?;
        Ok(token)
    }

    /// The session of `token`, if it is current; counts as activity.
    pub fn lookup(&self, cfg: &Config, token: &str) -> Option<Session> {
        let key = hex::encode(sha256(token));
        let now = now_ms();
        let mut all = self.lock();
        let r = all.get_mut(&key)?;
        let valid = alive(&cfg.server, r, now)
            && cfg
                .users
                .get(&r.user)
                .is_some_and(|u| fingerprint(&u.password_hash) == r.password);
        if !valid {
            all.remove(&key);
            self.save(&all);
            return None;
        }
        r.last_seen_ms = now;
        let user = r.user.clone();
        let every = (cfg.server.session_idle / 4).min(Duration::from_secs(60));
        if now.saturating_sub(r.saved_ms) >= every.as_millis() as u64 {
            r.saved_ms = now;
            self.save(&all);
        }
        Some(Session {
            user,
            csrf: csrf_token(token),
        })
    }

    /// The session of the request's cookie, if any and current.
    pub fn of_request(&self, cfg: &Config, req: &Request) -> Option<(String, Session)> {
        let token = cookie_token(req)?;
        self.lookup(cfg, token).map(|s| (token.to_string(), s))
    }

    /// End the session of `token` (logout).
    ///
    /// # Errors
    /// The state dir cannot be written.
    pub fn remove(&self, token: &str) -> io::Result<()> {
        let mut all = self.lock();
        if all.remove(&hex::encode(sha256(token))).is_some() {
            write_file(&self.path, &all)?;
        }
        Ok(())
    }

    /// Write the file, logging a failure (used where the caller cannot act
    /// on it).
    fn save(&self, all: &HashMap<String, Record>) {
        if let Err(e) = write_file(&self.path, all) {
            log::error!("cannot write {}: {e}", self.path.display());
        }
    }
}

/// Whether a record is within both its idle and its absolute lifetime.
fn alive(server: &Server, r: &Record, now: u64) -> bool {
    now.saturating_sub(r.last_seen_ms) < server.session_idle.as_millis() as u64
        && now.saturating_sub(r.created_ms) < server.session_max.as_millis() as u64
}

/// A short fingerprint of a password hash: a new password ends sessions.
fn fingerprint(password_hash: &str) -> String {
    hex::encode(&sha256(password_hash)[..8])
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Replace the file atomically (see `store::write_atomic`), mode 0600.
fn write_file(path: &Path, all: &HashMap<String, Record>) -> io::Result<()> {
    let bytes = serde_json::to_vec(all).map_err(io::Error::other)?;
    crate::store::write_atomic(path, [bytes.as_slice()])
}

// ---------------------------------------------------------------------------
// Cookie and CSRF

/// The session token from the request's `Cookie` header(s).
pub fn cookie_token(req: &Request) -> Option<&str> {
    req.headers
        .iter()
        .filter(|(k, _)| k == "cookie")
        .flat_map(|(_, v)| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, v)| v.trim())
        .filter(|v| !v.is_empty())
}

/// The `Set-Cookie` value that gives the browser `token`.
pub fn set_cookie(server: &Server, token: &str) -> String {
    let secure = if server.cookie_secure { "; Secure" } else { "" };
    format!(
        "{COOKIE}={token}; Path=/; HttpOnly; SameSite=Lax; Max-Age={}{secure}",
        server.session_max.as_secs()
    )
}

/// The `Set-Cookie` value that removes the cookie.
pub fn clear_cookie(server: &Server) -> String {
    let secure = if server.cookie_secure { "; Secure" } else { "" };
    format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0{secure}")
}

/// The CSRF token bound to the session `token`.
fn csrf_token(token: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"trigd-csrf\0");
    h.update(token.as_bytes());
    hex::encode(h.finalize())
}

/// Compare without an early exit, so timing says nothing about where two
/// tokens differ.
pub fn same_token(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// Whether the browser says the request comes from one of our own pages:
/// `Sec-Fetch-Site: same-origin` when the header is present, otherwise an
/// `Origin` equal to ours (`public_url`, else `http(s)://<Host>`). `Origin:
/// null` (sent on form posts under `Referrer-Policy: no-referrer`) does not
/// count.
pub fn same_origin(cfg: &Config, req: &Request) -> bool {
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
/// `same-origin` or `none`, or an `Origin` (not `null`) that is not ours. A
/// request without either header (curl) is not.
pub fn cross_site(cfg: &Config, req: &Request) -> bool {
    if let Some(site) = req.header("sec-fetch-site") {
        return !(site.eq_ignore_ascii_case("same-origin") || site.eq_ignore_ascii_case("none"));
    }
    match req.header("origin") {
        None | Some("null") => false,
        Some(_) => !same_origin(cfg, req),
    }
}

// ---------------------------------------------------------------------------
// Login throttle

/// Failed logins allowed per user name within [`WINDOW`].
pub const PER_USER: u32 = 5;
/// Failed logins allowed per client address within [`WINDOW`].
pub const PER_ADDRESS: u32 = 10;
/// The throttle window.
const WINDOW: Duration = Duration::from_secs(60);
/// Tracked names and addresses at most (bounded memory).
const MAX_TRACKED: usize = 10_000;

/// One tracked name or address.
struct Window {
    start: Instant,
    failures: u32,
}

/// Counts failed logins per user name and per client address; past the
/// limit, logins are refused until the window ends.
#[derive(Default)]
pub struct Throttle {
    windows: Mutex<HashMap<String, Window>>,
}

impl Throttle {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Window>> {
        self.windows.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `Err(seconds to wait)` when `user` or `addr` is throttled.
    pub fn check(&self, user: &str, addr: Option<IpAddr>) -> Result<(), u64> {
        let all = self.lock();
        let mut wait = Duration::ZERO;
        for (key, limit) in keys(user, addr) {
            if let Some(w) = all.get(&key) {
                let left = WINDOW.saturating_sub(w.start.elapsed());
                if w.failures >= limit && !left.is_zero() {
                    wait = wait.max(left);
                }
            }
        }
        if wait.is_zero() {
            Ok(())
        } else {
            Err(wait.as_secs() + 1)
        }
    }

    /// Count a failed login.
    pub fn failed(&self, user: &str, addr: Option<IpAddr>) {
        let mut all = self.lock();
        for (key, _) in keys(user, addr) {
            if !all.contains_key(&key) && all.len() >= MAX_TRACKED {
                all.retain(|_, w| w.start.elapsed() < WINDOW);
                if all.len() >= MAX_TRACKED {
                    let oldest = all
                        .iter()
                        .min_by_key(|(_, w)| w.start)
                        .map(|(k, _)| k.clone());
                    all.remove(&oldest.unwrap_or_default());
                }
            }
            let w = all.entry(key).or_insert(Window {
                start: Instant::now(),
                failures: 0,
            });
            if w.start.elapsed() >= WINDOW {
                *w = Window {
                    start: Instant::now(),
                    failures: 0,
                };
            }
            w.failures += 1;
        }
    }

    /// Forget the failures of `user` after a successful login.
    pub fn succeeded(&self, user: &str) {
        self.lock().remove(&user_key(user));
    }
}

fn user_key(user: &str) -> String {
    // Bounded size whatever the client sends.
    format!("u:{}", hex::encode(&sha256(user)[..16]))
}

fn keys(user: &str, addr: Option<IpAddr>) -> Vec<(String, u32)> {
    let mut v = vec![(user_key(user), PER_USER)];
    if let Some(a) = addr {
        v.push((format!("a:{a}"), PER_ADDRESS));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttle_per_user_and_address() {
        let t = Throttle::default();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        for _ in 0..PER_USER {
            assert!(t.check("alice", Some(a)).is_ok());
            t.failed("alice", Some(a));
        }
        let wait = t.check("alice", None).unwrap_err();
        assert!((1..=61).contains(&wait), "{wait}");
        assert!(
            t.check("bob", Some(a)).is_ok(),
            "address not yet at its limit"
        );
        for _ in PER_USER..PER_ADDRESS {
            t.failed("bob", Some(a));
        }
        assert!(t.check("carol", Some(a)).is_err(), "address throttled");
        assert!(t.check("carol", None).is_ok());
        t.succeeded("alice");
        assert!(t.check("alice", None).is_ok());
    }

    #[test]
    fn cookie_parsing_and_tokens() {
        let mut r = Request::new("GET", "/").unwrap();
        r.headers
            .push(("cookie".into(), format!("a=1; {COOKIE}=abc ; b=2")));
        assert_eq!(cookie_token(&r), Some("abc"));
        assert!(same_token("abc", "abc") && !same_token("abc", "abd") && !same_token("a", "ab"));
        assert_ne!(csrf_token("x"), csrf_token("y"));
        assert_eq!(csrf_token("x").len(), 64);
    }
}
