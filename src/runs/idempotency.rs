//! Idempotency keys: a request that carries `Idempotency-Key` starts at most
//! one run per key, so a caller may retry it safely.
//!
//! A key is scoped by the caller's credential (`api_key:<name>`,
//! `app_key:<member>`, `session:<user>`, `public`) and remembered for
//! `idempotency_window` with the fingerprint of its request (entry point,
//! function, values) and the id of the run it started. The first request
//! with a key claims it ([`Keys::claim`]): the key and the run id chosen for
//! it are written durably (`state/idempotency.log`, fsync) before the run
//! is started, so a key survives `kill -9`. A request refused before its run
//! started gives the key back. A repeat with the same fingerprint starts
//! nothing and gets the original run ([`Claim::Repeat`]); with another
//! fingerprint it is refused (`idempotency_key_reused`).
//!
//! Memory and disk are bounded by `idempotency_max_keys`: past it, the
//! oldest key is forgotten early. Only hashes are kept: sha256 of scope and
//! key, sha256 of the request.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use crate::http::{ApiError, Request};
use crate::state::idempotency::{Claim as Entry, Log};
use crate::state::pg::claims::{self as db_claims, Outcome};
use crate::state::pg::Db;
use crate::state::store::new_run_id;

/// The request header.
pub const HEADER: &str = "idempotency-key";

/// Longest key accepted, in bytes.
const MAX_KEY_BYTES: usize = 255;

/// The sha256 fingerprint of a request ([`fingerprint`]).
pub use crate::state::idempotency::Hash;

/// The remembered keys behind one mutex.
struct State {
    log: Log,
    map: HashMap<Hash, Entry>,
    /// Keys in claim order, for expiry and the bound.
    order: VecDeque<(Hash, u64)>,
}

/// The key store: `idempotency.log` in the state dir, or with `[state]
/// url` the database, where a claim is made in the statement that records
/// its run (`state::pg::claims`), so every instance sees it.
pub struct Keys {
    inner: Inner,
    /// Signalled when a claim is kept or given back.
    settled: Condvar,
}

/// Where the claims are.
enum Inner {
    Files(Mutex<State>),
    Database(Arc<Db>),
}

/// How long keys are kept and how many, and whose run ids they make.
#[derive(Debug, Clone, Copy)]
pub struct Policy<'a> {
    /// `idempotency_window`.
    pub window: Duration,
    /// `idempotency_max_keys`.
    pub max_keys: usize,
    /// This instance's name, for new run ids.
    pub instance: &'a str,
}

/// The outcome of [`Keys::claim`].
pub enum Claim<'a> {
    /// The key is new: start the run with this id, then [`Held::keep`].
    New(Held<'a>),
    /// The key started (or is starting) this run.
    Repeat(String),
}

/// A claimed key. Dropped without [`Held::keep`] (the run was refused, or
/// a panic), the key is given back.
pub struct Held<'a> {
    keys: &'a Keys,
    slot: Hash,
    /// The run id to start.
    pub run: String,
    kept: bool,
}

impl Held<'_> {
    /// With the database: the run and request another request (perhaps on
    /// another instance) claimed this key for first, when it did; then
    /// this run was not recorded, and the answer is a repeat of that one.
    pub fn lost(&self) -> Option<(String, String)> {
        let Inner::Database(db) = &self.keys.inner else {
            return None;
        };
        match db.claims.outcome(&self.run) {
            Some(Outcome::Lost { run, request }) => Some((run, request)),
            _ => None,
        }
    }

    /// The run was started (or ran): the key stays.
    pub fn keep(mut self) {
        self.kept = true;
        let files = match &self.keys.inner {
            Inner::Files(files) => files,
            Inner::Database(db) => {
                db.claims.take(&self.run);
                return;
            }
        };
        let mut s = lock(files);
        if let Some(e) = s.map.get_mut(&self.slot) {
            e.pending = false;
            e.confirmed = true;
        }
        // Not synced: without it, a restart finds the run in the run log.
        if let Err(e) = s.log.mark(&self.slot, now(), true) {
            log::warn!("cannot record a started idempotency key: {e}");
        }
        drop(s);
        self.keys.settled.notify_all();
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if self.kept {
            return;
        }
        match &self.keys.inner {
            Inner::Files(_) => self.keys.give_back(&self.slot),
            Inner::Database(db) => give_back_db(db, &self.slot, &self.run),
        }
    }
}

/// Give back a database claim whose request was refused: forgotten when
/// its run was never recorded, deleted when it was (one round trip).
fn give_back_db(db: &Db, slot: &Hash, run: &str) {
    if db.claims.take(run) == Some(Outcome::Made) {
        let key = hex::encode(slot);
        if let Err(e) = db.with(|c| db_claims::give_back(c, &key, run)) {
            log::warn!("cannot give back an idempotency key: {e}");
        }
    }
}

/// The `Idempotency-Key` of a request, if it has one.
///
/// # Errors
/// `invalid_parameter` for an empty key, one longer than 255 bytes, one
/// with bytes outside printable ASCII, or a second `Idempotency-Key`
/// header (which of two keys the caller meant is not ours to guess).
pub fn key_of(req: &Request) -> Result<Option<&str>, ApiError> {
    let Some(key) = req.header_one(HEADER, "Idempotency-Key")? else {
        return Ok(None);
    };
    let printable = key.bytes().all(|b| (0x20..0x7f).contains(&b));
    if key.is_empty() || key.len() > MAX_KEY_BYTES || !printable {
        return Err(ApiError::InvalidParameter {
            name: "Idempotency-Key".into(),
            msg: format!(
                "Idempotency-Key must be 1 to {MAX_KEY_BYTES} printable ASCII characters, \
                 e.g. a UUID."
            ),
        });
    }
    Ok(Some(key))
}

/// The fingerprint of a request: its entry point (its path and program),
/// function and values (and what else the run takes from the request: a
/// hook's environment and files).
pub fn fingerprint<'v>(
    origin: &'v str,
    function: &'v str,
    values: impl IntoIterator<Item = &'v String>,
) -> Hash {
    let mut h = Sha256::new();
    for part in [origin, function]
        .into_iter()
        .chain(values.into_iter().map(String::as_str))
    {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    h.finalize().into()
}

impl Keys {
    /// Open (creating) the claims kept in `state`, keeping the keys
    /// claimed within `window`, and compact it.
    ///
    /// # Errors
    /// The file cannot be read or written.
    pub fn open(state: &crate::state::State, window: Duration) -> io::Result<Keys> {
        if let Some(db) = state.db() {
            return Ok(Keys {
                inner: Inner::Database(Arc::clone(db)),
                settled: Condvar::new(),
            });
        }
        let (log, (map, order)) = state.open_claims(now().saturating_sub(window.as_secs()))?;
        Ok(Keys {
            inner: Inner::Files(Mutex::new(State { log, map, order })),
            settled: Condvar::new(),
        })
    }

    /// The claims in `idempotency.log`, when that is where they are.
    fn files(&self) -> Option<&Mutex<State>> {
        match &self.inner {
            Inner::Files(files) => Some(files),
            Inner::Database(_) => None,
        }
    }

    /// Claim `key` of caller `scope` for a request with fingerprint
    /// `request`. `known` tells whether a run id is in the run log: a
    /// remembered key whose run never got recorded (trigd died in between)
    /// is claimed anew.
    ///
    /// # Errors
    /// `idempotency_key_reused` when the key came with another request;
    /// `disk_full` or `storage_unavailable` when the claim cannot be
    /// written (nothing is started then).
    pub fn claim(
        &self,
        policy: Policy<'_>,
        scope: &str,
        key: &str,
        request: Hash,
        known: impl Fn(&str) -> bool,
    ) -> Result<Claim<'_>, ApiError> {
        let slot = slot(scope, key);
        let files = match &self.inner {
            Inner::Files(files) => files,
            Inner::Database(db) => return Ok(self.claim_in_db(db, policy, slot, request)),
        };
        let mut s = lock(files);
        s.expire(now().saturating_sub(policy.window.as_secs()));
        if let Some(e) = s.map.get(&slot) {
            if e.request != request {
                return Err(ApiError::IdempotencyMismatch);
            }
            if e.pending || e.confirmed || known(&e.run) {
                return Ok(Claim::Repeat(e.run.to_string()));
            }
        }
        while s.map.len() >= policy.max_keys {
            let Some((old, _)) = s.order.pop_front() else {
                break;
            };
            s.map.remove(&old);
        }
        let run = new_run_id(policy.instance);
        let at = now();
        let entry = Entry {
            request,
            run: run.as_str().into(),
            at,
            pending: true,
            confirmed: false,
        };
        s.log
            .claim(&slot, &entry, true)
            .map_err(|e| ApiError::storage(&e))?;
        s.map.insert(slot, entry);
        s.order.retain(|(k, _)| *k != slot);
        s.order.push_back((slot, at));
        let State { log, map, order } = &mut *s;
        log.compact_if_needed(map, order);
        Ok(Claim::New(Held {
            keys: self,
            slot,
            run,
            kept: false,
        }))
    }

    /// A claim in the database: held until the run's first write, which
    /// makes it (or finds it taken: [`Held::lost`]). No round trip here.
    fn claim_in_db(&self, db: &Db, policy: Policy<'_>, slot: Hash, request: Hash) -> Claim<'_> {
        let run = new_run_id(policy.instance);
        let claim = db_claims::Claim {
            key: hex::encode(slot),
            request: hex::encode(request),
            window: policy.window,
        };
        db.claims.hold(&run, claim);
        Claim::New(Held {
            keys: self,
            slot,
            run,
            kept: false,
        })
    }

    /// Whether `key` of `scope` still stands for `run` and waits for its
    /// run to be recorded. Waits up to `wait` for a change first. (With
    /// the database a claim is recorded with its run: never waiting.)
    pub fn pending(&self, scope: &str, key: &str, run: &str, wait: Duration) -> Option<bool> {
        let slot = slot(scope, key);
        let Some(files) = self.files() else {
            return Some(false);
        };
        let s = lock(files);
        let still = |s: &State| {
            s.map
                .get(&slot)
                .filter(|e| &*e.run == run)
                .map(|e| e.pending)
        };
        if still(&s) != Some(true) {
            return still(&s);
        }
        let s = self
            .settled
            .wait_timeout(s, wait)
            .map_or_else(|e| e.into_inner().0, |r| r.0);
        still(&s)
    }

    /// Forget a claim whose run was not started.
    fn give_back(&self, slot: &Hash) {
        let Some(files) = self.files() else { return };
        let mut s = lock(files);
        if s.map.remove(slot).is_some() {
            s.order.retain(|(k, _)| k != slot);
            // Not synced: a lost line leaves a key whose run is unknown,
            // which a later claim takes over.
            if let Err(e) = s.log.mark(slot, now(), false) {
                log::warn!("cannot record a released idempotency key: {e}");
            }
        }
        drop(s);
        self.settled.notify_all();
    }

    /// Keys remembered now; `None` with the database, where they are
    /// rows of `trigd_idempotency` that `/healthz` does not count.
    pub fn count(&self) -> Option<usize> {
        self.files().map(|f| lock(f).map.len())
    }
}

impl State {
    /// Forget keys claimed before `oldest` (Unix seconds).
    fn expire(&mut self, oldest: u64) {
        while let Some(&(k, at)) = self.order.front() {
            if at >= oldest {
                break;
            }
            self.order.pop_front();
            if self.map.get(&k).is_some_and(|e| !e.pending) {
                self.map.remove(&k);
            }
        }
    }
}

/// The store key of `key` for caller `scope`.
fn slot(scope: &str, key: &str) -> Hash {
    let mut h = Sha256::new();
    h.update(scope.as_bytes());
    h.update([0]);
    h.update(key.as_bytes());
    h.finalize().into()
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::test_dir::TestDir;

    const LIMITS: Policy<'static> = Policy {
        window: Duration::from_secs(3600),
        max_keys: 3,
        instance: "test",
    };

    #[test]
    fn a_kept_key_survives_reopen_and_a_given_back_one_does_not() {
        let dir = TestDir::new("idem-reopen");
        let d = dir.path();
        let k = Keys::open(&crate::state::State::new(d, d), LIMITS.window).unwrap();
        let fp = fingerprint("api/1", "f", &["a".into()]);
        let Claim::New(held) = k.claim(LIMITS, "api_key:a", "x", fp, |_| false).unwrap() else {
            panic!("first claim is new")
        };
        let run = held.run.clone();
        held.keep();
        let Claim::New(other) = k.claim(LIMITS, "api_key:a", "y", fp, |_| false).unwrap() else {
            panic!("another key is new")
        };
        drop(other);
        drop(k);
        let k = Keys::open(&crate::state::State::new(d, d), LIMITS.window).unwrap();
        assert_eq!(k.count(), Some(1));
        match k
            .claim(LIMITS, "api_key:a", "x", fp, |id| id == run)
            .unwrap()
        {
            Claim::Repeat(r) => assert_eq!(r, run),
            Claim::New(_) => panic!("a kept key is a repeat after reopen"),
        }
        // Another scope, or another request under the same key.
        assert!(matches!(
            k.claim(LIMITS, "api_key:b", "x", fp, |_| true).unwrap(),
            Claim::New(_)
        ));
        let other = fingerprint("api/1", "f", &["b".into()]);
        assert!(matches!(
            k.claim(LIMITS, "api_key:a", "x", other, |_| true),
            Err(ApiError::IdempotencyMismatch)
        ));
    }

    #[test]
    fn an_unknown_run_is_started_again_only_if_it_never_started() {
        let dir = TestDir::new("idem-unknown");
        let d = dir.path();
        let k = Keys::open(&crate::state::State::new(d, d), LIMITS.window).unwrap();
        let fp = fingerprint("api/1", "f", &[]);
        let Claim::New(started) = k.claim(LIMITS, "s", "started", fp, |_| false).unwrap() else {
            panic!("new")
        };
        let run = started.run.clone();
        started.keep();
        // Claimed, then trigd died before the run was recorded.
        let Claim::New(lost) = k.claim(LIMITS, "s", "lost", fp, |_| false).unwrap() else {
            panic!("new")
        };
        std::mem::forget(lost);
        drop(k);
        let k = Keys::open(&crate::state::State::new(d, d), LIMITS.window).unwrap();
        // Neither run is in the run log any more.
        match k.claim(LIMITS, "s", "started", fp, |_| false).unwrap() {
            Claim::Repeat(r) => assert_eq!(r, run),
            Claim::New(_) => panic!("a started run must not start again"),
        }
        assert!(matches!(
            k.claim(LIMITS, "s", "lost", fp, |_| false).unwrap(),
            Claim::New(_)
        ));
    }

    #[test]
    fn the_number_of_keys_is_bounded() {
        let dir = TestDir::new("idem-bound");
        let d = dir.path();
        let k = Keys::open(&crate::state::State::new(d, d), LIMITS.window).unwrap();
        for i in 0..10 {
            let fp = fingerprint("api/1", "f", &[]);
            if let Claim::New(h) = k.claim(LIMITS, "s", &i.to_string(), fp, |_| false).unwrap() {
                h.keep();
            }
        }
        assert_eq!(k.count(), Some(3));
    }

    #[test]
    fn fingerprints_separate_values() {
        let a = fingerprint("api/1", "f", &["ab".into(), "c".into()]);
        let b = fingerprint("api/1", "f", &["a".into(), "bc".into()]);
        assert_ne!(a, b);
    }
}
