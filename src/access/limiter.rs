//! The one limiter type, [`Limiter`]: fixed one-minute windows counting
//! hits per key, with bounded memory. [`Limits`] holds every limiter of a
//! server; each answers 429 `rate_limited` with a `Retry-After` of the
//! seconds left in the window.
//!
//! - Failed authentication (`invalid_api_key` on the run endpoints, a bearer
//!   key that matches nothing on generated endpoints, a signature or token
//!   that fails in a trigger's `verify` or rule) is counted per client
//!   address. Once an address has `[server] auth_failures_per_minute`
//!   failures in its window, every authenticated request from it gets 429
//!   until the window ends, valid key or not: guessing keys costs a minute
//!   per batch. 0 turns this off.
//! - `[[api_keys]] rate_per_minute = N` lets a key make N requests per
//!   window (runs and run status reads alike); unset means unlimited.
//! - Failed logins are counted per user name ([`LOGIN_PER_USER`]) and per
//!   client address ([`LOGIN_PER_ADDRESS`]); past either, logins are refused
//!   until the window ends. A successful login clears its name.
//!
//! Memory is bounded: at most [`MAX_TRACKED`] keys per limiter; past that,
//! expired windows are dropped first, then the oldest.
//!
//! With `[state] url` the same limits hold for the whole cluster
//! (`shared_limits.rs` says how and with what bound); these local windows
//! then keep the failed authentications' block on the request path and
//! stand in for the key rates while the database is unreachable.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::secret::sha256;
use super::shared_limits::{LoginLimits, Shared};
use crate::config::{ApiKey, Server};
use crate::http::ApiError;
use crate::state::State;

/// Length of one counting window.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Most keys tracked at once by one limiter.
pub const MAX_TRACKED: usize = 10_000;
/// Failed logins allowed per user name within [`WINDOW`].
pub const LOGIN_PER_USER: u64 = 5;
/// Failed logins allowed per client address within [`WINDOW`].
pub const LOGIN_PER_ADDRESS: u64 = 10;

/// One fixed window: when it started and how many hits it holds.
#[derive(Debug, Clone, Copy)]
struct Window {
    start: Instant,
    count: u64,
}

/// Fixed windows by key, at most `cap` of them.
#[derive(Debug)]
struct Windows<K> {
    map: HashMap<K, Window>,
    cap: usize,
}

impl<K: Hash + Eq + Clone> Windows<K> {
    /// The live window of `key` (an expired one is dropped).
    fn live(&mut self, key: &K, now: Instant) -> Option<Window> {
        let w = *self.map.get(key)?;
        if now.saturating_duration_since(w.start) >= WINDOW {
            self.map.remove(key);
            return None;
        }
        Some(w)
    }

    /// Seconds left (at least 1) in `key`'s window when it already holds
    /// `limit` hits; `None` when it may go on.
    fn blocked(&mut self, key: &K, limit: u64, now: Instant) -> Option<u64> {
        let w = self.live(key, now)?;
        (w.count >= limit).then(|| retry_after(w, now))
    }

    /// Count one hit for `key`; the count of its window afterwards.
    fn hit(&mut self, key: &K, now: Instant) -> u64 {
        if let Some(w) = self.live(key, now) {
            let count = w.count + 1;
            self.map.insert(key.clone(), Window { count, ..w });
            return count;
        }
        self.make_room(now);
        let fresh = Window {
            start: now,
            count: 1,
        };
        self.map.insert(key.clone(), fresh);
        1
    }

    /// Make `key`'s window hold `count` hits and end `left` from `now`.
    fn set(&mut self, key: &K, count: u64, left: Duration, now: Instant) {
        if !self.map.contains_key(key) {
            self.make_room(now);
        }
        let start = (now + left).checked_sub(WINDOW).unwrap_or(now);
        self.map.insert(key.clone(), Window { start, count });
    }

    /// Before a new key is added at the cap: drop expired windows, then
    /// (when every window is live) the oldest one.
    fn make_room(&mut self, now: Instant) {
        if self.map.len() < self.cap {
            return;
        }
        self.map
            .retain(|_, w| now.saturating_duration_since(w.start) < WINDOW);
        if self.map.len() >= self.cap {
            let oldest = self
                .map
                .iter()
                .min_by_key(|(_, w)| w.start)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.map.remove(&k);
            }
        }
    }
}

fn retry_after(w: Window, now: Instant) -> u64 {
    let left = WINDOW.saturating_sub(now.saturating_duration_since(w.start));
    left.as_secs_f64().ceil().max(1.0) as u64
}

/// Hits per key in fixed one-minute windows, at most `cap` keys.
#[derive(Debug)]
pub struct Limiter<K> {
    windows: Mutex<Windows<K>>,
}

impl<K: Hash + Eq + Clone> Limiter<K> {
    /// A limiter tracking at most `cap` keys.
    pub fn new(cap: usize) -> Limiter<K> {
        let windows = Windows {
            map: HashMap::new(),
            cap: cap.max(1),
        };
        Limiter {
            windows: Mutex::new(windows),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Windows<K>> {
        self.windows.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `Err(seconds left)` when `key` already has `limit` hits in its window.
    pub fn check(&self, key: &K, limit: u64) -> Result<(), u64> {
        match self.lock().blocked(key, limit, Instant::now()) {
            Some(secs) => Err(secs),
            None => Ok(()),
        }
    }

    /// Count one hit for `key`; the count of its window afterwards.
    pub fn hit(&self, key: &K) -> u64 {
        self.lock().hit(key, Instant::now())
    }

    /// Count one hit unless `key` already has `limit`; `Err(seconds left)`
    /// when it has.
    pub fn take(&self, key: &K, limit: u64) -> Result<(), u64> {
        let now = Instant::now();
        let mut w = self.lock();
        if let Some(secs) = w.blocked(key, limit, now) {
            return Err(secs);
        }
        w.hit(key, now);
        Ok(())
    }

    /// Take back one hit of `key` (an attempt counted before its outcome
    /// was known, which did not fail).
    pub fn give_back(&self, key: &K) {
        if let Some(w) = self.lock().map.get_mut(key) {
            w.count = w.count.saturating_sub(1);
        }
    }

    /// Forget `key`.
    pub fn clear(&self, key: &K) {
        self.lock().map.remove(key);
    }

    /// Make `key`'s window hold `count` hits and end in `left` (what the
    /// cluster's window says).
    pub fn set(&self, key: &K, count: u64, left: Duration) {
        self.lock().set(key, count, left, Instant::now());
    }
}

/// Every limiter of one server.
pub struct Limits {
    failures: Limiter<IpAddr>,
    keys: Limiter<String>,
    login_users: Limiter<[u8; 32]>,
    login_addrs: Limiter<IpAddr>,
    /// The cluster's windows, with `[state] url`.
    shared: Option<Shared>,
}

impl Default for Limits {
    /// Local limiters only (the file backend).
    fn default() -> Limits {
        Limits {
            failures: Limiter::new(MAX_TRACKED),
            keys: Limiter::new(MAX_TRACKED),
            login_users: Limiter::new(MAX_TRACKED),
            login_addrs: Limiter::new(MAX_TRACKED),
            shared: None,
        }
    }
}

fn limited(retry_after: u64) -> ApiError {
    ApiError::RateLimited { retry_after }
}

impl Limits {
    /// The limiters of `state`: shared by the cluster when it has a
    /// database.
    pub fn new(state: &State) -> Limits {
        Limits {
            shared: state.db().map(|db| Shared::new(db, MAX_TRACKED)),
            ..Limits::default()
        }
    }

    /// Refuse a client that has used up its failed authentications.
    ///
    /// # Errors
    /// `rate_limited` while `client` has `auth_failures_per_minute`
    /// failures in its window.
    pub fn check_client(&self, server: &Server, client: IpAddr) -> Result<(), ApiError> {
        match server.auth_failures_per_minute as u64 {
            0 => Ok(()),
            limit => self.failures.check(&client, limit).map_err(limited),
        }
    }

    /// Count one failed authentication of `client`.
    pub fn failed(&self, server: &Server, client: IpAddr) {
        let limit = server.auth_failures_per_minute as u64;
        if limit == 0 {
            return;
        }
        let mut n = self.failures.hit(&client);
        if let Some(shared) = &self.shared {
            match shared.failed(client) {
                Ok(c) => {
                    if c.hits >= limit {
                        // Past the cluster's count: refuse here too until
                        // its window ends.
                        self.failures.set(&client, c.hits, c.left);
                    }
                    // Logged once for the cluster, where the count reached it.
                    n = c.hits;
                }
                Err(e) => log::warn!("failed authentications counted on this instance only: {e}"),
            }
        }
        if n == limit {
            log::warn!(
                "{client}: {n} failed authentications within a minute; \
                 refusing its requests until the minute is over"
            );
        }
    }

    /// Count one request of `key` against its `rate_per_minute`.
    ///
    /// # Errors
    /// `rate_limited` when the key has made `rate_per_minute` requests in
    /// its window.
    pub fn take_key(&self, key: &ApiKey) -> Result<(), ApiError> {
        let Some(limit) = key.rate_per_minute else {
            return Ok(());
        };
        if let Some(shared) = &self.shared {
            match shared.take_key(&key.name, limit) {
                Ok(r) => return r.map_err(limited),
                // The local window stands in (the request needs the
                // database for its record anyway).
                Err(e) => log::warn!(
                    "rate of API key {:?} limited on this instance only: {e}",
                    key.name
                ),
            }
        }
        self.keys.take(&key.name, limit).map_err(limited)
    }

    /// Refuse a login for `user` or from `client` past its failures; else
    /// count it as a failure now, before its password is checked
    /// ([`Limits::login_succeeded`] takes it back): attempts sent in
    /// parallel all passed a check made before any of them was counted (90
    /// of 100 parallel attempts from one address had their password
    /// checked, against a limit of 10). The cluster's windows
    /// (`[state] url`) are only checked here and counted on a failure.
    ///
    /// # Errors
    /// `rate_limited` with the longer of the two waits; 503
    /// `state_unavailable` while the cluster's windows cannot be read
    /// (fail closed).
    pub fn check_login(&self, user: &str, client: IpAddr) -> Result<(), ApiError> {
        if let Some(shared) = &self.shared {
            let limits = LoginLimits {
                per_user: LOGIN_PER_USER,
                per_address: LOGIN_PER_ADDRESS,
            };
            return match shared.take_login(user, client, limits) {
                Ok(r) => r.map_err(limited),
                Err(e) => Err(ApiError::db(&e)),
            };
        }
        let by_addr = self.login_addrs.take(&client, LOGIN_PER_ADDRESS);
        let by_user = match by_addr {
            Ok(()) => self.login_users.take(&sha256(user), LOGIN_PER_USER),
            Err(_) => self.login_users.check(&sha256(user), LOGIN_PER_USER),
        };
        match (by_user, by_addr) {
            (Ok(()), Ok(())) => Ok(()),
            (a, b) => {
                if b.is_ok() {
                    self.login_addrs.give_back(&client);
                }
                Err(limited(a.err().max(b.err()).unwrap_or(1)))
            }
        }
    }

    /// Forget the failures of `user` after a successful login from
    /// `client`, and take back the attempt counted for it (by
    /// [`Limits::check_login`], which counts every attempt as it arrives).
    pub fn login_succeeded(&self, user: &str, client: IpAddr) {
        if let Some(shared) = &self.shared {
            if let Err(e) = shared.login_succeeded(user, client) {
                log::warn!("failed logins of a user could not be cleared: {e}");
            }
            return;
        }
        self.login_addrs.give_back(&client);
        self.login_users.clear(&sha256(user));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn windows<K>(cap: usize) -> Windows<K> {
        Windows {
            map: HashMap::new(),
            cap,
        }
    }

    #[test]
    fn window_blocks_at_the_limit_and_resets_after_a_minute() {
        let mut w = windows(10);
        let t0 = Instant::now();
        let k = ip("10.0.0.1");
        for _ in 0..3 {
            assert_eq!(w.blocked(&k, 3, t0), None);
            w.hit(&k, t0);
        }
        assert_eq!(w.blocked(&k, 3, t0), Some(60));
        let late = t0 + Duration::from_millis(59_500);
        assert_eq!(w.blocked(&k, 3, late), Some(1));
        assert_eq!(w.blocked(&ip("10.0.0.2"), 3, t0), None);
        assert_eq!(w.blocked(&k, 3, t0 + WINDOW), None);
        assert_eq!(w.hit(&k, t0 + WINDOW), 1, "a new window starts at 1");
    }

    #[test]
    fn take_counts_until_the_limit() {
        let l = Limiter::new(10);
        let k = "cron".to_string();
        assert!(l.take(&k, 2).is_ok());
        assert!(l.take(&k, 2).is_ok());
        let wait = l.take(&k, 2).unwrap_err();
        assert!((1..=60).contains(&wait), "{wait}");
        l.clear(&k);
        assert!(l.take(&k, 2).is_ok());
    }

    #[test]
    fn memory_is_capped_evicting_expired_then_oldest() {
        let mut w = windows(100);
        let t0 = Instant::now();
        for i in 0..1000u32 {
            let t = t0 + Duration::from_millis(u64::from(i));
            w.hit(&IpAddr::from(i.to_be_bytes()), t);
            assert!(w.map.len() <= 100);
        }
        // The newest survive.
        assert!(w.map.contains_key(&IpAddr::from(999u32.to_be_bytes())));
        assert!(!w.map.contains_key(&IpAddr::from(0u32.to_be_bytes())));
        // After the window, one insert sweeps every expired entry.
        w.hit(&ip("1.1.1.1"), t0 + Duration::from_secs(120));
        assert_eq!(w.map.len(), 1);
    }

    #[test]
    fn logins_are_limited_per_user_and_address() {
        let l = Limits::default();
        let (a, b) = (ip("192.0.2.1"), ip("192.0.2.2"));
        for _ in 0..LOGIN_PER_USER {
            assert!(l.check_login("alice", a).is_ok());
        }
        let wait = match l.check_login("alice", b) {
            Err(ApiError::RateLimited { retry_after }) => retry_after,
            r => panic!("{r:?}"),
        };
        assert!((1..=60).contains(&wait), "{wait}");
        // Each attempt checked counts, whatever its user.
        for _ in LOGIN_PER_USER..LOGIN_PER_ADDRESS {
            assert!(
                l.check_login("bob", a).is_ok(),
                "address not yet at its limit"
            );
        }
        assert!(l.check_login("carol", a).is_err(), "address limited");
        assert!(l.check_login("carol", b).is_ok());
        l.login_succeeded("alice", b);
        assert!(l.check_login("alice", b).is_ok());
    }

    /// Attempts sent at once are counted as they are checked: no more
    /// than the address's limit get their password checked (90 of 100
    /// did when they were counted only once they had failed).
    #[test]
    fn parallel_logins_from_one_address_stop_at_its_limit() {
        let l = std::sync::Arc::new(Limits::default());
        let a = ip("192.0.2.9");
        let passed: usize = (0..100)
            .map(|i| {
                let l = std::sync::Arc::clone(&l);
                std::thread::spawn(move || l.check_login(&format!("u{i}"), a).is_ok())
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| usize::from(h.join().unwrap()))
            .sum();
        assert_eq!(passed as u64, LOGIN_PER_ADDRESS);
        // A successful login gives its count back: a user signing in
        // again and again from one address is never limited.
        let b = ip("192.0.2.10");
        for _ in 0..3 * LOGIN_PER_ADDRESS {
            assert!(l.check_login("dave", b).is_ok());
            l.login_succeeded("dave", b);
        }
    }
}
