//! `App`: the state shared by every request — the current config snapshot,
//! its generation, the last reload error, the run store, the runner,
//! idempotency keys, and the credentials and limits of `access`.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError, RwLock};
use std::time::{Duration, Instant};

use crate::access::Access;
use crate::config::Config;
use crate::runner::Runner;
use crate::runs::cluster::Readiness;
use crate::runs::idempotency::Keys;
use crate::state::store::RunStore;
use crate::state::State;

/// How long a call waits at most for the reload of a change seen before
/// it arrived ([`Applied::wait`]): a burst of events delays a reload up
/// to 100 ms (`config::reload`), and a reload of only the changed files
/// takes well under a millisecond; past this the call is served by the
/// configuration in place.
pub const WAIT_APPLIED: Duration = Duration::from_millis(250);

/// Config changes the watcher saw and how many of them a finished reload
/// took in (applied or refused). Shared by the watcher's callback, the
/// reload thread (`config::reload`) and the requests ([`App::applied`]).
#[derive(Debug, Default)]
pub struct Applied {
    /// Relevant events noted by the watcher.
    seen: AtomicU64,
    /// Of them, those the last finished reload read the files after.
    done: AtomicU64,
    lock: Mutex<()>,
    /// Notified at the end of each reload.
    wake: Condvar,
}

impl Applied {
    /// Wait until every change seen before now is reloaded, at most
    /// `bound`. Two atomic loads when none waits.
    pub fn wait(&self, bound: Duration) {
        let target = self.seen.load(Ordering::Acquire);
        if self.done.load(Ordering::Acquire) >= target {
            return;
        }
        let until = Instant::now() + bound;
        let mut guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        while self.done.load(Ordering::Acquire) < target {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            guard = self
                .wake
                .wait_timeout(guard, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Count one change (called with the changes' lock held, so that a
    /// reload taking the changes reads a count that covers them).
    pub(crate) fn note(&self) {
        self.seen.fetch_add(1, Ordering::AcqRel);
    }

    /// The changes counted so far.
    pub(crate) fn count(&self) -> u64 {
        self.seen.load(Ordering::Acquire)
    }

    /// A reload that took the changes counted `upto` has ended.
    pub(crate) fn reloaded(&self, upto: u64) {
        let _guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        self.done.fetch_max(upto, Ordering::AcqRel);
        self.wake.notify_all();
    }
}

/// Shared server state.
pub struct App {
    config: RwLock<Arc<Config>>,
    generation: AtomicU64,
    last_reload_error: Mutex<Option<String>>,
    reload_errors: AtomicU64,
    /// The run log.
    pub store: Arc<RunStore>,
    /// Idempotency keys.
    pub idempotency: Keys,
    /// Application keys, sessions and rate limits.
    pub access: Access,
    /// Where the state is kept: the state dir, and with `[state] url` the
    /// database.
    pub state: State,
    /// Run slots and queue.
    pub runner: Arc<Runner>,
    /// Open HTTP connections (set once the listener exists).
    pub connections: OnceLock<Arc<AtomicUsize>>,
    /// The served TLS certificates (set when the listener speaks HTTPS).
    pub tls: OnceLock<Arc<crate::http::tls::Certs>>,
    /// Set once shutdown starts: workers stop taking requests.
    pub closing: AtomicBool,
    /// Set at SIGTERM for `drain_delay` before `closing`: requests are
    /// still served, `/healthz` answers 503 so the balancer stops sending.
    pub draining: AtomicBool,
    /// The schedule timer's bell and what it did (`schedule/`).
    pub schedules: crate::schedule::Board,
    /// The ACME certificate manager, with `[acme]` (set once at start).
    pub acme: OnceLock<Arc<crate::http::acme::Acme>>,
    /// The config changes the file watcher saw and the reloads took in
    /// (set when the reload thread starts): calls wait for the reload of
    /// a change seen before they arrived.
    pub applied: OnceLock<Arc<Applied>>,
}

impl App {
    /// Shared state around a first config (generation 1).
    pub fn new(
        config: Config,
        state: State,
        store: Arc<RunStore>,
        runner: Arc<Runner>,
        idempotency: Keys,
    ) -> App {
        // Body files of runs cut off by a crash or kill -9.
        crate::state::bodies::clean(&state.bodies_dir());
        let access = Access::open(&state);
        // Members removed while trigd was stopped.
        access.revoke_leavers(&config);
        App {
            idempotency,
            access,
            state,
            config: RwLock::new(Arc::new(config)),
            generation: AtomicU64::new(1),
            last_reload_error: Mutex::new(None),
            reload_errors: AtomicU64::new(0),
            store,
            runner,
            connections: OnceLock::new(),
            tls: OnceLock::new(),
            closing: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            schedules: crate::schedule::Board::default(),
            acme: OnceLock::new(),
            applied: OnceLock::new(),
        }
    }

    /// The config snapshot a request is served by: once every config
    /// change the watcher saw before now is reloaded (applied or refused),
    /// waiting at most [`WAIT_APPLIED`] for it.
    pub fn config_for_request(&self) -> Arc<Config> {
        if let Some(applied) = self.applied.get() {
            applied.wait(WAIT_APPLIED);
        }
        self.config()
    }

    /// The current config snapshot. Take it once per request and pass it on.
    pub fn config(&self) -> Arc<Config> {
        Arc::clone(&self.config.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Swap in a new config and clear the reload error.
    pub fn set_config(&self, config: Config) {
        if let Some(cb) = self.runner.callbacks() {
            cb.configure(&config.server.callbacks);
        }
        // The error first: a request served by the new config, then a
        // `/healthz`, must not see the refusal that this config ends.
        self.clear_reload_error();
        let config = Arc::new(config);
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = Arc::clone(&config);
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.schedules.ring();
        self.access.revoke_leavers(&config);
    }

    /// Record why the last reload was refused.
    pub fn set_reload_error(&self, error: String) {
        self.reload_errors.fetch_add(1, Ordering::Relaxed);
        *self
            .last_reload_error
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(error);
    }

    /// Forget the last reload error (the files are valid again).
    pub fn clear_reload_error(&self) {
        *self
            .last_reload_error
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Successful reloads and refused reloads since start.
    pub fn reload_counts(&self) -> (u64, u64) {
        (
            self.generation() - 1,
            self.reload_errors.load(Ordering::Relaxed),
        )
    }

    /// The generation of the current config: 1 at start, +1 per reload.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Why the last reload was refused, if it was.
    pub fn last_reload_error(&self) -> Option<String> {
        self.last_reload_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Whether this instance should get traffic now. The config is always
    /// loaded once the server answers (a refused reload keeps the last good
    /// one); the state dir is checked by opening `runs.log` for writing.
    pub fn readiness(&self) -> Readiness {
        if self.draining.load(Ordering::SeqCst) || self.closing.load(Ordering::SeqCst) {
            return Readiness::Draining;
        }
        if let Err(e) = self.store.check_writable() {
            return Readiness::NotReady(format!("state dir not writable: {e}"));
        }
        match self.state.db().and_then(|db| db.unreachable()) {
            None => match self.runner.name_held() {
                None => Readiness::Ready,
                Some(why) => Readiness::NotReady(why),
            },
            Some(why) => Readiness::NotReady(why),
        }
    }
}
