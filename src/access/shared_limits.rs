//! The limits of `limiter.rs` counted for the whole cluster, with
//! `[state] url`, in the database's windows (`state::pg::limits`): a
//! client spread over N instances gets the configured limit, not N times
//! it. What each costs, and its bound:
//!
//! - **Failed logins** (per user name and per address): an attempt counts
//!   in both windows when it arrives, before its password is checked (one
//!   statement each, each taking a hit only while its window has room), so
//!   attempts sent at once, to one instance or several, stop at the limit
//!   as sequential ones do; a success takes the address's hit back and
//!   clears the name's window (two statements). Exact: at most the limit
//!   of attempts per window, whichever instances they reach. While the
//!   database is unreachable logins fail closed: 503 `state_unavailable`.
//! - **API key `rate_per_minute` = R**: each instance takes tokens from the
//!   key's window in leases of [`lease_size`] (R/50, at least 1) and spends
//!   them locally, so only one request in a lease costs a round trip. A
//!   lease never exceeds what is left in the window, so the cluster admits
//!   at most R per window; tokens leased but not spent when the window
//!   ends are lost, so it admits at least R − N·(lease − 1) when the
//!   demand is higher (exactly R for R < 100). While the database is
//!   unreachable each instance limits on its own (at most N·R then; the
//!   request needs the database for its record anyway).
//! - **Failed authentications per address** (`auth_failures_per_minute`
//!   = F): the check stays local (no round trip on the request path), a
//!   failure also counts in the shared window (one statement, only on a
//!   failure), and an instance that sees the shared count reach F refuses
//!   the address until that window ends. So the cluster admits at most
//!   F + N − 1 failures per window (each other instance lets one more
//!   through before it learns), instead of N·F.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::secret::sha256;
use crate::state::pg::limits::{Count, LimitTable};
use crate::state::pg::{Db, DbError};

/// A lease is this part of a key's `rate_per_minute`.
pub const LEASE_PARTS: u64 = 50;

/// Tokens of a key's rate this instance leased from the window, usable
/// until the window ends; or, when the window had none left to lease
/// (`spent`), the key refused until then.
#[derive(Debug, Clone, Copy)]
struct Lease {
    tokens: u64,
    until: Instant,
    spent: bool,
}

/// The shared windows and this instance's leases of them.
pub struct Shared {
    table: LimitTable,
    leases: Mutex<HashMap<String, Lease>>,
    /// Leases kept at most (past it, ended ones are dropped).
    cap: usize,
}

/// Failed logins allowed in a window: per user name, per address.
#[derive(Debug, Clone, Copy)]
pub struct LoginLimits {
    /// Per user name.
    pub per_user: u64,
    /// Per client address.
    pub per_address: u64,
}

/// Tokens taken in one lease of a rate of `limit` per window.
pub fn lease_size(limit: u64) -> u64 {
    (limit / LEASE_PARTS).max(1)
}

/// Whole seconds to wait for `d` (at least 1), for `Retry-After`.
fn seconds(d: Duration) -> u64 {
    d.as_secs_f64().ceil().max(1.0) as u64
}

fn user_window(user: &str) -> String {
    format!("login-user:{}", hex::encode(sha256(user)))
}

fn addr_window(addr: IpAddr) -> String {
    format!("login-addr:{addr}")
}

impl Shared {
    /// The windows of `db`, keeping at most `cap` leases.
    pub fn new(db: &Arc<Db>, cap: usize) -> Shared {
        Shared {
            table: LimitTable::new(Arc::clone(db)),
            leases: Mutex::new(HashMap::new()),
            cap,
        }
    }

    fn leases(&self) -> MutexGuard<'_, HashMap<String, Lease>> {
        self.leases.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Spend one token of key `name`'s rate of `limit`: from this
    /// instance's lease, or a new lease (one round trip). `Ok(Err(seconds
    /// left))` when the window is spent.
    ///
    /// # Errors
    /// The database cannot be used.
    pub fn take_key(&self, name: &str, limit: u64) -> Result<Result<(), u64>, DbError> {
        let now = Instant::now();
        if let Some(l) = self.leases().get_mut(name).filter(|l| now < l.until) {
            if l.spent {
                return Ok(Err(seconds(l.until - now)));
            }
            if l.tokens > 0 {
                l.tokens -= 1;
                return Ok(Ok(()));
            }
        }
        // Not under the lock: a slow database holds up only the requests
        // that need a lease. Concurrent ones may each lease; the window
        // grants no more than its rate whatever they ask.
        let count = self
            .table
            .take(&format!("key:{name}"), lease_size(limit), limit)?;
        // The window's end as seen from before the statement was sent: the
        // lease ends no later than the window does.
        let until = now + count.left;
        let mut leases = self.leases();
        if leases.len() >= self.cap {
            leases.retain(|_, l| now < l.until);
        }
        let mut lease = leases
            .get(name)
            .copied()
            .filter(|l| now < l.until && !l.spent)
            .map_or(
                Lease {
                    tokens: 0,
                    until,
                    spent: false,
                },
                |l| Lease {
                    until: l.until.min(until),
                    ..l
                },
            );
        lease.tokens += count.granted;
        let spent = lease.tokens == 0;
        if spent {
            lease = Lease {
                tokens: 0,
                until,
                spent,
            };
        } else {
            lease.tokens -= 1;
        }
        leases.insert(name.to_string(), lease);
        Ok(if spent {
            Err(seconds(count.left))
        } else {
            Ok(())
        })
    }

    /// Count one failed authentication of `client`: the shared window's
    /// count afterwards.
    ///
    /// # Errors
    /// The database cannot be used.
    pub fn failed(&self, client: IpAddr) -> Result<Count, DbError> {
        let name = format!("auth:{client}");
        self.table.take(&name, 1, i64::MAX as u64)
    }

    /// Count a login attempt of `user` from `client` as it arrives:
    /// `Ok(Err(seconds left))`, and nothing counted, when either window is
    /// full. The address's window first, then the name's; a refusal by the
    /// name gives the address's hit back.
    ///
    /// # Errors
    /// The database cannot be used.
    pub fn take_login(
        &self,
        user: &str,
        client: IpAddr,
        limits: LoginLimits,
    ) -> Result<Result<(), u64>, DbError> {
        let (u, a) = (user_window(user), addr_window(client));
        let by_addr = self.table.take(&a, 1, limits.per_address)?;
        if by_addr.granted == 0 {
            return Ok(Err(seconds(by_addr.left)));
        }
        let by_user = self.table.take(&u, 1, limits.per_user)?;
        if by_user.granted == 0 {
            self.table.give_back(&a)?;
            return Ok(Err(seconds(by_user.left)));
        }
        Ok(Ok(()))
    }

    /// After a successful login of `user` from `client`: take back the
    /// address's hit and clear the name's window (two statements).
    ///
    /// # Errors
    /// The database cannot be used.
    pub fn login_succeeded(&self, user: &str, client: IpAddr) -> Result<(), DbError> {
        self.table.give_back(&addr_window(client))?;
        self.table.clear(&user_window(user))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_are_a_fiftieth_of_the_rate_and_at_least_one() {
        assert_eq!(lease_size(1), 1);
        assert_eq!(lease_size(99), 1);
        assert_eq!(lease_size(100), 2);
        assert_eq!(lease_size(6000), 120);
        assert_eq!(seconds(Duration::from_millis(1)), 1);
        assert_eq!(seconds(Duration::from_millis(59_001)), 60);
    }
}
