//! `App`: the state shared by every request — the current config snapshot,
//! its generation, the last reload error, the run store, the runner,
//! idempotency keys, application keys, browser sessions and rate limits.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use crate::appkeys::AppKeys;
use crate::config::Config;
use crate::idempotency::Keys;
use crate::ratelimit::RateLimits;
use crate::runner::Runner;
use crate::sessions::{Sessions, Throttle};
use crate::store::RunStore;

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
    /// Application keys of workspace members.
    pub app_keys: AppKeys,
    /// Browser login sessions.
    pub sessions: Sessions,
    /// Failed-login counters.
    pub login_throttle: Throttle,
    /// Run slots and queue.
    pub runner: Arc<Runner>,
    /// Open HTTP connections (set once the listener exists).
    pub connections: OnceLock<Arc<AtomicUsize>>,
    /// Set once shutdown starts: workers stop taking requests.
    pub closing: AtomicBool,
    /// Set at SIGTERM for `drain_delay` before `closing`: requests are
    /// still served, `/healthz` answers 503 so the balancer stops sending.
    pub draining: AtomicBool,
    /// Failed-authentication and per-key rate limits.
    pub limits: RateLimits,
}

impl App {
    /// Shared state around a first config (generation 1).
    pub fn new(
        config: Config,
        store: Arc<RunStore>,
        runner: Arc<Runner>,
        idempotency: Keys,
    ) -> App {
        let app_keys = AppKeys::new(&config.server.shared_state_dir);
        let sessions = Sessions::open(&config.server.state_dir);
        App {
            app_keys,
            sessions,
            login_throttle: Throttle::default(),
            config: RwLock::new(Arc::new(config)),
            generation: AtomicU64::new(1),
            last_reload_error: Mutex::new(None),
            reload_errors: AtomicU64::new(0),
            store,
            idempotency,
            runner,
            connections: OnceLock::new(),
            closing: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            limits: RateLimits::default(),
        }
    }

    /// The current config snapshot. Take it once per request and pass it on.
    pub fn config(&self) -> Arc<Config> {
        Arc::clone(&self.config.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Swap in a new config and clear the reload error.
    pub fn set_config(&self, config: Config) {
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(config);
        self.generation.fetch_add(1, Ordering::SeqCst);
        *self
            .last_reload_error
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
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
}
