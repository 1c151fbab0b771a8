//! Rate limits: failed authentication per client address, and an optional
//! request rate per API key. Both answer 429 `rate_limited` with a
//! `Retry-After` of the seconds left in the window.
//!
//! - Failed authentication (`invalid_api_key` on the run endpoints, a bearer
//!   key that matches nothing on generated endpoints) is counted per client
//!   address in a fixed one-minute window. Once an address has
//!   `[server] auth_failures_per_minute` failures in its window, every
//!   authenticated request from it gets 429 until the window ends, valid key
//!   or not: guessing keys costs a minute per batch. 0 turns this off.
//! - `[[api_keys]] rate_per_minute = N` lets a key make N requests per
//!   fixed one-minute window (runs and run status reads alike); unset means
//!   unlimited.
//!
//! The client address is the TCP peer, unless the peer is listed in
//! `[server] trusted_proxies`: then `X-Forwarded-For` is read right to left
//! and the first address that is not a trusted proxy is the client (so a
//! client cannot spoof its address by sending its own header through the
//! proxy). IPv6 clients are counted per /64, the block one host usually
//! controls.
//!
//! Memory is bounded: at most [`MAX_TRACKED`] addresses (and keys) are
//! tracked; past that, expired windows are dropped first, then the oldest.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::app::App;
use crate::auth;
use crate::config::{ApiKey, Config, Server};
use crate::http::{ApiError, Request};

/// Length of one counting window.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Most addresses (and, separately, API keys) tracked at once.
pub const MAX_TRACKED: usize = 10_000;

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
    fn new(cap: usize) -> Windows<K> {
        Windows {
            map: HashMap::new(),
            cap: cap.max(1),
        }
    }

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
        self.map.insert(
            key.clone(),
            Window {
                start: now,
                count: 1,
            },
        );
        1
    }

    /// Count one hit unless `key` already has `limit`; `Err(retry_after)`
    /// when it has.
    fn take(&mut self, key: &K, limit: u64, now: Instant) -> Result<(), u64> {
        match self.blocked(key, limit, now) {
            Some(secs) => Err(secs),
            None => {
                self.hit(key, now);
                Ok(())
            }
        }
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

/// The rate limiter of one server (part of [`App`]).
#[derive(Debug)]
pub struct RateLimits {
    failures: Mutex<Windows<IpAddr>>,
    keys: Mutex<Windows<String>>,
}

impl Default for RateLimits {
    fn default() -> RateLimits {
        RateLimits {
            failures: Mutex::new(Windows::new(MAX_TRACKED)),
            keys: Mutex::new(Windows::new(MAX_TRACKED)),
        }
    }
}

impl RateLimits {
    /// Refuse a client that has used up its failed authentications.
    ///
    /// # Errors
    /// `rate_limited` while `client` has `auth_failures_per_minute`
    /// failures in its window.
    pub fn check_client(&self, server: &Server, client: IpAddr) -> Result<(), ApiError> {
        let limit = server.auth_failures_per_minute as u64;
        if limit == 0 {
            return Ok(());
        }
        match lock(&self.failures).blocked(&client, limit, Instant::now()) {
            Some(retry_after) => Err(ApiError::RateLimited { retry_after }),
            None => Ok(()),
        }
    }

    /// Count one failed authentication of `client`.
    pub fn failed(&self, server: &Server, client: IpAddr) {
        let limit = server.auth_failures_per_minute as u64;
        if limit == 0 {
            return;
        }
        let n = lock(&self.failures).hit(&client, Instant::now());
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
    pub fn check_key(&self, key: &ApiKey) -> Result<(), ApiError> {
        let Some(limit) = key.rate_per_minute else {
            return Ok(());
        };
        lock(&self.keys)
            .take(&key.name, limit, Instant::now())
            .map_err(|retry_after| ApiError::RateLimited { retry_after })
    }
}

/// The API key of a run-endpoint request (see [`auth::api_key`]), with the
/// rate limits applied: a client address over its failure budget is
/// refused before its key is looked at, an unknown key counts as a
/// failure, and a known key is counted against its `rate_per_minute`.
///
/// # Errors
/// `rate_limited`, and every error of [`auth::api_key`].
pub fn api_key<'a>(app: &App, cfg: &'a Config, req: &Request) -> Result<&'a ApiKey, ApiError> {
    let client = client_addr(&cfg.server, req);
    app.limits.check_client(&cfg.server, client)?;
    let key = auth::api_key(cfg, req).inspect_err(|e| {
        if *e == ApiError::InvalidApiKey {
            app.limits.failed(&cfg.server, client);
        }
    })?;
    app.limits.check_key(key)?;
    Ok(key)
}

/// The address failures are counted under: the peer, or (behind a trusted
/// proxy) the right-most untrusted `X-Forwarded-For` entry; IPv6 reduced to
/// its /64, IPv4-mapped IPv6 to IPv4. Without a known peer, 0.0.0.0.
pub fn client_addr(server: &Server, req: &Request) -> IpAddr {
    bucket(client_ip(server, req))
}

/// The client's own address: the peer, or (behind a trusted proxy) the
/// right-most untrusted `X-Forwarded-For` entry. Without a known peer,
/// 0.0.0.0.
pub fn client_ip(server: &Server, req: &Request) -> IpAddr {
    let peer = req
        .remote
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |a| a.ip());
    forwarded_client(peer, &server.trusted_proxies, req)
}

/// Walk `X-Forwarded-For` from the right while the hop is trusted.
fn forwarded_client(peer: IpAddr, trusted: &[IpAddr], req: &Request) -> IpAddr {
    let is_trusted = |ip: IpAddr| trusted.contains(&ip.to_canonical());
    if !is_trusted(peer) {
        return peer;
    }
    let hops: Vec<&str> = req
        .headers
        .iter()
        .filter(|(k, _)| k == "x-forwarded-for")
        .flat_map(|(_, v)| v.split(','))
        .map(str::trim)
        .collect();
    let mut client = peer;
    for hop in hops.iter().rev() {
        let Some(ip) = parse_hop(hop) else {
            // Garbage: believe nothing further left than the last good hop.
            return client;
        };
        client = ip;
        if !is_trusted(ip) {
            return ip;
        }
    }
    client
}

/// An `X-Forwarded-For` entry: an address, possibly with a port.
fn parse_hop(s: &str) -> Option<IpAddr> {
    s.parse::<IpAddr>()
        .or_else(|_| s.parse::<SocketAddr>().map(|a| a.ip()))
        .ok()
}

/// The counting bucket of an address: IPv4 as is, IPv6 by its /64.
fn bucket(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn window_blocks_at_the_limit_and_resets_after_a_minute() {
        let mut w = Windows::new(10);
        let t0 = Instant::now();
        let k = ip("10.0.0.1");
        for _ in 0..3 {
            assert_eq!(w.blocked(&k, 3, t0), None);
            w.hit(&k, t0);
        }
        assert_eq!(w.blocked(&k, 3, t0), Some(60));
        assert_eq!(
            w.blocked(&k, 3, t0 + Duration::from_millis(59_500)),
            Some(1)
        );
        assert_eq!(w.blocked(&ip("10.0.0.2"), 3, t0), None);
        assert_eq!(w.blocked(&k, 3, t0 + WINDOW), None);
        assert_eq!(w.hit(&k, t0 + WINDOW), 1, "a new window starts at 1");
    }

    #[test]
    fn take_counts_until_the_limit() {
        let mut w = Windows::new(10);
        let t0 = Instant::now();
        let k = "cron".to_string();
        assert!(w.take(&k, 2, t0).is_ok());
        assert!(w.take(&k, 2, t0).is_ok());
        assert_eq!(w.take(&k, 2, t0 + Duration::from_secs(30)), Err(30));
        assert!(w.take(&k, 2, t0 + WINDOW).is_ok());
    }

    #[test]
    fn memory_is_capped_evicting_expired_then_oldest() {
        let mut w = Windows::new(100);
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

    fn req(peer: &str, xff: &[&str]) -> Request {
        let mut r = Request::new("GET", "/").unwrap();
        r.remote = Some(SocketAddr::new(ip(peer), 4000));
        r.headers = xff
            .iter()
            .map(|v| ("x-forwarded-for".to_string(), v.to_string()))
            .collect();
        r
    }

    #[test]
    fn forwarded_for_is_believed_only_from_trusted_peers() {
        let trusted = [ip("127.0.0.1"), ip("10.0.0.5")];
        // Untrusted peer: its header is ignored.
        let r = req("192.0.2.1", &["203.0.113.9"]);
        assert_eq!(
            forwarded_client(ip("192.0.2.1"), &trusted, &r),
            ip("192.0.2.1")
        );
        // Trusted peer: right-most untrusted entry; a spoofed left part is ignored.
        let r = req("127.0.0.1", &["6.6.6.6, 203.0.113.9", "10.0.0.5"]);
        assert_eq!(
            forwarded_client(ip("127.0.0.1"), &trusted, &r),
            ip("203.0.113.9")
        );
        // No header: the peer itself.
        let r = req("127.0.0.1", &[]);
        assert_eq!(
            forwarded_client(ip("127.0.0.1"), &trusted, &r),
            ip("127.0.0.1")
        );
        // Garbage stops the walk at the last good hop.
        let r = req("127.0.0.1", &["203.0.113.9, bogus, 10.0.0.5"]);
        assert_eq!(
            forwarded_client(ip("127.0.0.1"), &trusted, &r),
            ip("10.0.0.5")
        );
        // Ports are tolerated.
        let r = req("127.0.0.1", &["203.0.113.9:5555"]);
        assert_eq!(
            forwarded_client(ip("127.0.0.1"), &trusted, &r),
            ip("203.0.113.9")
        );
    }

    #[test]
    fn ipv6_counts_per_64_and_mapped_v4_as_v4() {
        assert_eq!(bucket(ip("2001:db8:1:2:3:4:5:6")), ip("2001:db8:1:2::"));
        assert_eq!(bucket(ip("::ffff:192.0.2.1")), ip("192.0.2.1"));
        assert_eq!(bucket(ip("192.0.2.1")), ip("192.0.2.1"));
    }
}
