//! The wait queue's bookkeeping: run slots in use (globally and per
//! function), one FIFO queue of waiting sync callers ([`Ticket`]) and async
//! runs ([`Queued`]), and the drain rate behind `Retry-After`. Everything
//! here runs under the runner's one slots lock; threads and records are
//! the runner's.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar};
use std::time::{Duration, Instant};

use crate::config::{Config, Program};

/// Program id and function name: the unit of `concurrency`.
pub(super) type SlotKey = (u64, String);

/// An async run waiting in the queue: its record (with its input) is on
/// disk, so memory holds only what finds it again.
pub(super) struct Queued {
    pub(super) run: String,
    pub(super) cfg: Arc<Config>,
    pub(super) program: Arc<Program>,
    pub(super) key: SlotKey,
    pub(super) concurrency: usize,
}

/// A sync caller waiting for a slot, for run `run` (recorded `queued`).
/// `granted` is set (under the slots lock) when a slot is handed to it,
/// `cancelled` when the run is cancelled: it is then off the queue.
pub(super) struct Ticket {
    pub(super) run: String,
    pub(super) key: SlotKey,
    pub(super) concurrency: usize,
    pub(super) granted: AtomicBool,
    pub(super) cancelled: AtomicBool,
    pub(super) wake: Condvar,
}

/// One place in the queue.
pub(super) enum Waiter {
    Async(Queued),
    Sync(Arc<Ticket>),
}

impl Waiter {
    pub(super) fn key(&self) -> (&SlotKey, usize) {
        match self {
            Waiter::Async(q) => (&q.key, q.concurrency),
            Waiter::Sync(t) => (&t.key, t.concurrency),
        }
    }

    /// The id of the run waiting here.
    pub(super) fn run(&self) -> &str {
        match self {
            Waiter::Async(q) => &q.run,
            Waiter::Sync(t) => &t.run,
        }
    }
}

/// A waiter just handed a slot: a sync caller to wake, or an async run to
/// start. The caller wakes a sync caller only once it has released the
/// slots lock: woken under it, the caller would take the CPU only to
/// block on the lock, and wait to be scheduled a second time.
pub(super) enum Granted {
    Sync(Arc<Ticket>),
    Async(Queued),
}

/// Slot accounting; behind one mutex. Invariant at every unlock: no
/// runnable waiter while a slot is free.
#[derive(Default)]
pub(super) struct Slots {
    pub(super) used: usize,
    pub(super) max: usize,
    pub(super) per_fn: HashMap<SlotKey, usize>,
    pub(super) queue: VecDeque<Waiter>,
    /// Queue places promised to async runs being recorded right now.
    pub(super) reserved: usize,
    /// No new runs are accepted (shutdown started).
    pub(super) closing: bool,
    /// Waiting runs are no longer started (the shutdown grace is over).
    pub(super) stopping: bool,
}

impl Slots {
    pub(super) fn fn_free(&self, key: &SlotKey, concurrency: usize) -> bool {
        self.per_fn.get(key).copied().unwrap_or(0) < concurrency
    }

    pub(super) fn slot_free(&self, key: &SlotKey, concurrency: usize) -> bool {
        self.used < self.max && self.fn_free(key, concurrency)
    }

    pub(super) fn take(&mut self, key: &SlotKey) {
        self.used += 1;
        *self.per_fn.entry(key.clone()).or_default() += 1;
    }

    pub(super) fn release_fn(&mut self, key: &SlotKey) {
        if let Some(n) = self.per_fn.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                self.per_fn.remove(key);
            }
        }
    }

    /// Remove the first waiter whose function has room.
    pub(super) fn next_runnable(&mut self) -> Option<Waiter> {
        if self.stopping {
            return None;
        }
        let i = self.queue.iter().position(|w| {
            let (key, n) = w.key();
            self.fn_free(key, n)
        })?;
        self.queue.remove(i)
    }

    /// Give a slot already counted in `used` to `w` (a sync waiter is
    /// marked granted); it comes back to be woken or started.
    pub(super) fn grant(&mut self, w: Waiter) -> Granted {
        *self.per_fn.entry(w.key().0.clone()).or_default() += 1;
        match w {
            Waiter::Sync(t) => {
                t.granted.store(true, Ordering::SeqCst);
                Granted::Sync(t)
            }
            Waiter::Async(q) => Granted::Async(q),
        }
    }

    /// Hand free slots to runnable waiters (after a reload raised the
    /// limit); the waiters to wake or start.
    pub(super) fn fill(&mut self) -> Vec<Granted> {
        let mut start = Vec::new();
        while self.used < self.max {
            let Some(w) = self.next_runnable() else { break };
            self.used += 1;
            start.push(self.grant(w));
        }
        start
    }

    /// A run of `key` ended: hand its slot to the next runnable waiter
    /// (which comes back, to be woken or started), or free it (then
    /// `true`).
    pub(super) fn release(&mut self, key: &SlotKey) -> (Option<Granted>, bool) {
        self.release_fn(key);
        // Hand the slot on, unless a reload lowered the limit.
        if self.used <= self.max {
            if let Some(w) = self.next_runnable() {
                return (Some(self.grant(w)), false);
            }
        }
        self.used -= 1;
        (None, true)
    }

    /// Take run `run` off the queue (it holds no slot: nothing is freed).
    pub(super) fn remove_run(&mut self, run: &str) -> Option<Waiter> {
        let i = self.queue.iter().position(|w| w.run() == run)?;
        self.queue.remove(i)
    }

    pub(super) fn remove_ticket(&mut self, t: &Arc<Ticket>) {
        self.queue
            .retain(|w| !matches!(w, Waiter::Sync(x) if Arc::ptr_eq(x, t)));
    }
}

/// Runs ended in the last 5 to 10 seconds: the drain rate behind
/// `Retry-After`.
pub(super) struct Drain {
    pub(super) since: Instant,
    pub(super) prev: u32,
    pub(super) cur: u32,
}

pub(super) const DRAIN_WINDOW: Duration = Duration::from_secs(5);

impl Drain {
    pub(super) fn roll(&mut self) {
        let age = self.since.elapsed();
        if age >= 2 * DRAIN_WINDOW {
            (self.prev, self.cur, self.since) = (0, 0, Instant::now());
        } else if age >= DRAIN_WINDOW {
            (self.prev, self.cur) = (self.cur, 0);
            self.since += DRAIN_WINDOW;
        }
    }

    pub(super) fn tick(&mut self) {
        self.roll();
        self.cur = self.cur.saturating_add(1);
    }

    /// Seconds until `waiting` runs ahead of a caller have drained, 1 to
    /// 600.
    pub(super) fn retry_after(&mut self, waiting: usize) -> u64 {
        self.roll();
        let span = (DRAIN_WINDOW + self.since.elapsed()).as_secs_f64();
        let rate = (f64::from(self.prev + self.cur) / span).max(0.1);
        ((waiting as f64 + 1.0) / rate).ceil().clamp(1.0, 600.0) as u64
    }
}

impl Drain {
    /// A rate with nothing counted yet.
    pub(super) fn new() -> Drain {
        Drain {
            since: Instant::now(),
            prev: 0,
            cur: 0,
        }
    }
}
