//! Browser login sessions and their cookie.
//!
//! A session is 256 random bits, given to the browser in the
//! `trigd_session` cookie (HttpOnly, SameSite=Lax, Path=/, Secure when
//! configured) and kept server-side only as its sha256, so a restart logs
//! nobody out: in `state/sessions.json` (temp file, fsync, rename, mode
//! 0600 — like `app_keys.rs`), or with `[state] url` in the table
//! `trigd_sessions` (`state::pg::sessions`), where every instance finds it:
//! log in through one, go on through another, log out through a third and
//! the session is gone on all (no sticky routing; one round trip per
//! request that carries the cookie). A session ends after `session_idle`
//! without a request, `session_max` after login, at logout, when its user
//! leaves the config, or when the user's password hash changes.
//!
//! The one non-obvious decision: the last-seen time is written lazily (at
//! most every `min(60s, session_idle / 4)` per session) so that a page view
//! does not cost an fsync (or, in the database, a write); a session may
//! therefore expire up to that much earlier than it would have (after a
//! restart, or when instances share it).
//!
//! CSRF: the token of a session is derived from the session token
//! (`sha256("trigd-csrf\0" + token)`), so it needs no storage and cannot be
//! computed without the cookie. The rule that uses it is in `csrf.rs`.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::error::StoreError;
use super::secret::{random_hex, sha256};
use crate::config::{Config, Server, User};
use crate::http::Request;
use crate::state::pg::sessions::{SessionRow, SessionTable};
use crate::state::sessions::SessionFile;
use crate::state::State;

/// Name of the session cookie.
pub const COOKIE: &str = "trigd_session";
/// Sessions kept at most in the file; past it the least recently used one
/// is dropped. (The database keeps every live one; ended ones are removed
/// at each login.)
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

/// The session file and its records.
struct Files {
    file: SessionFile,
    by_hash: Mutex<HashMap<String, Record>>,
}

/// Where the sessions are.
enum Backend {
    Files(Files),
    Database(SessionTable),
}

/// The sessions of one state.
pub struct Sessions {
    backend: Backend,
}

impl Sessions {
    /// The sessions kept in `state`: `sessions.json`, loaded now (a
    /// missing or unreadable file starts empty; the error is logged), or
    /// the database with `[state] url`.
    pub fn open(state: &State) -> Sessions {
        let backend = match state.db() {
            Some(db) => Backend::Database(SessionTable::new(Arc::clone(db))),
            None => Backend::Files(Files::open(state.session_file())),
        };
        Sessions { backend }
    }

    /// Start a session for `user`; returns the token for the cookie (never
    /// stored).
    ///
    /// # Errors
    /// The state dir cannot be written, or the database used.
    pub fn create(&self, server: &Server, user: &User) -> Result<String, StoreError> {
        let token = random_hex();
        let key = hex::encode(sha256(&token));
        let password = fingerprint(&user.password_hash);
        match &self.backend {
            Backend::Files(f) => f.create(server, key, &user.name, password)?,
            Backend::Database(t) => t.insert(
                &key,
                &user.name,
                &password,
                server.session_idle,
                server.session_max,
            )?,
        }
        Ok(token)
    }

    /// The session of `token`, if it is current; counts as activity.
    ///
    /// # Errors
    /// The database cannot be used (the file backend does not fail).
    pub fn lookup(&self, cfg: &Config, token: &str) -> Result<Option<Session>, StoreError> {
        let key = hex::encode(sha256(token));
        let user = match &self.backend {
            Backend::Files(f) => f.lookup(cfg, &key),
            Backend::Database(t) => {
                match t.touch(&key, save_every(&cfg.server))? {
                    Some(r) if row_valid(cfg, &r) => Some(r.user),
                    Some(_) => {
                        // Ended: removed, as the file backend does.
                        t.delete(&key)?;
                        None
                    }
                    None => None,
                }
            }
        };
        Ok(user.map(|user| Session {
            user,
            csrf: csrf_token(token),
        }))
    }

    /// End the session of `token` (logout).
    ///
    /// # Errors
    /// The state dir cannot be written, or the database used.
    pub fn remove(&self, token: &str) -> Result<(), StoreError> {
        let key = hex::encode(sha256(token));
        match &self.backend {
            Backend::Files(f) => f.remove(&key)?,
            Backend::Database(t) => t.delete(&key)?,
        }
        Ok(())
    }
}

impl Files {
    fn open(file: SessionFile) -> Files {
        let by_hash: HashMap<String, Record> = file.load();
        let by_hash = by_hash
            .into_iter()
            .map(|(k, mut r)| {
                r.saved_ms = r.last_seen_ms;
                (k, r)
            })
            .collect();
        Files {
            file,
            by_hash: Mutex::new(by_hash),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Record>> {
        self.by_hash.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn create(&self, server: &Server, key: String, user: &str, password: String) -> io::Result<()> {
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
            user: user.to_string(),
            created_ms: now,
            last_seen_ms: now,
            password,
            saved_ms: now,
        };
        all.insert(key, record);
        self.file.write(&all)
    }

    /// The user of the session `key` if it is current (its last-seen time
    /// noted); an ended one is removed.
    fn lookup(&self, cfg: &Config, key: &str) -> Option<String> {
        let now = now_ms();
        let mut all = self.lock();
        let r = all.get_mut(key)?;
        let valid = alive(&cfg.server, r, now) && password_current(cfg, &r.user, &r.password);
        if !valid {
            all.remove(key);
            self.save(&all);
            return None;
        }
        r.last_seen_ms = now;
        let user = r.user.clone();
        if now.saturating_sub(r.saved_ms) >= save_every(&cfg.server).as_millis() as u64 {
            r.saved_ms = now;
            self.save(&all);
        }
        Some(user)
    }

    fn remove(&self, key: &str) -> io::Result<()> {
        let mut all = self.lock();
        if all.remove(key).is_some() {
            self.file.write(&all)?;
        }
        Ok(())
    }

    /// Write the file, logging a failure (used where the caller cannot act
    /// on it).
    fn save(&self, all: &HashMap<String, Record>) {
        if let Err(e) = self.file.write(all) {
            log::error!("cannot write {}: {e}", self.file.path().display());
        }
    }
}

/// How often a session's last-seen time is written.
fn save_every(server: &Server) -> Duration {
    (server.session_idle / 4).min(Duration::from_secs(60))
}

/// Whether a database row is within its lifetimes and its user's password
/// is the one it was started with.
fn row_valid(cfg: &Config, r: &SessionRow) -> bool {
    r.idle < cfg.server.session_idle
        && r.age < cfg.server.session_max
        && password_current(cfg, &r.user, &r.password)
}

/// Whether `user` is still configured with the password of `fingerprint`.
fn password_current(cfg: &Config, user: &str, print: &str) -> bool {
    cfg.users
        .get(user)
        .is_some_and(|u| fingerprint(&u.password_hash) == print)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookie_parsing_and_tokens() {
        let mut r = Request::new("GET", "/").unwrap();
        r.headers
            .push(("cookie".into(), format!("a=1; {COOKIE}=abc ; b=2")));
        assert_eq!(cookie_token(&r), Some("abc"));
        assert_ne!(csrf_token("x"), csrf_token("y"));
        assert_eq!(csrf_token("x").len(), 64);
    }
}
