//! The wait queue's bookkeeping: run slots in use (globally and per
//! function), one FIFO queue of waiting sync callers ([`Ticket`]) and async
//! runs ([`Queued`]), the concurrency groups' executing runs, and the
//! drain rate behind `Retry-After`. Everything here runs under the
//! runner's one slots lock; threads and records are the runner's.
//!
//! A concurrency group is one more rule of the same queue: a waiter is
//! runnable when a slot is free, its function is below its `concurrency`
//! and its group key below its `limit`; what a run finding its group full
//! does (wait, replace the waiting one, cancel the running one, skip) is
//! decided here too ([`Slots::make_room`], [`Slots::skips`]).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, OnceLock};
use std::time::{Duration, Instant};

use crate::config::group::Policy;
use crate::config::{Config, Program};
use crate::state::record::Owner;

/// Owner (a program, or the hooks) and function name (for a hook, its
/// id): the unit of `concurrency`.
pub(super) type SlotKey = (Owner, String);

/// A run's concurrency group: the key rendered from its values, and the
/// group's limit and policy.
#[derive(Debug, Clone)]
pub(super) struct GroupClaim {
    pub(super) key: String,
    pub(super) limit: usize,
    pub(super) policy: Policy,
}

/// An async run waiting in the queue: its record (with its input) is on
/// disk, so memory holds only what finds it again; except a run taken
/// from the cluster queue, which comes with the record the take returned
/// (`taken`): reading it back was one more round trip a run.
pub(super) struct Queued {
    pub(super) run: String,
    pub(super) cfg: Arc<Config>,
    pub(super) program: Arc<Program>,
    pub(super) key: SlotKey,
    pub(super) concurrency: usize,
    pub(super) group: Option<GroupClaim>,
    pub(super) taken: Option<Box<crate::state::record::RunRecord>>,
}

/// A sync caller waiting for a slot, for run `run` (recorded `queued`).
/// `granted` is set (under the slots lock) when a slot is handed to it,
/// `cancelled` when the run is cancelled, `superseded_by` when a newer run
/// of its group replaced it: it is then off the queue.
pub(super) struct Ticket {
    pub(super) run: String,
    pub(super) key: SlotKey,
    pub(super) concurrency: usize,
    pub(super) group: Option<GroupClaim>,
    pub(super) granted: AtomicBool,
    pub(super) cancelled: AtomicBool,
    pub(super) superseded_by: OnceLock<String>,
    pub(super) wake: Condvar,
}

/// Whether a run holding a slot is a sync call or an async run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Sync,
    Async,
}

/// One place in the queue.
pub(super) enum Waiter {
    Async(Queued),
    Sync(Arc<Ticket>),
}

impl Waiter {
    /// Whether the run waiting here is a sync call or an async run.
    pub(super) fn kind(&self) -> Kind {
        match self {
            Waiter::Async(_) => Kind::Async,
            Waiter::Sync(_) => Kind::Sync,
        }
    }

    pub(super) fn key(&self) -> (&SlotKey, usize) {
        match self {
            Waiter::Async(q) => (&q.key, q.concurrency),
            Waiter::Sync(t) => (&t.key, t.concurrency),
        }
    }

    /// The concurrency group of the run waiting here.
    pub(super) fn group(&self) -> Option<&GroupClaim> {
        match self {
            Waiter::Async(q) => q.group.as_ref(),
            Waiter::Sync(t) => t.group.as_ref(),
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

/// Queue places whose buffer is kept when the queue drains: room for the
/// waiters of a busy moment (callers beyond the run slots), not of a burst.
pub(super) const QUEUE_KEPT: usize = 256;

/// Slot accounting; behind one mutex. Invariant at every unlock: no
/// runnable waiter while a slot is free.
#[derive(Default)]
pub(super) struct Slots {
    pub(super) used: usize,
    pub(super) max: usize,
    /// Async runs executing (of `used`), and their limit
    /// (`max_concurrent_async_runs`): an async run is runnable only below
    /// it, so the other slots stay free for sync calls.
    pub(super) async_used: usize,
    pub(super) async_max: AsyncMax,
    /// Sync callers in `queue`: when async runs are at their limit, the
    /// queue is searched only if one waits (a backlog of async runs is
    /// not walked at every run's end).
    pub(super) sync_waiting: usize,
    pub(super) per_fn: HashMap<SlotKey, usize>,
    pub(super) queue: VecDeque<Waiter>,
    /// Queue places promised to async runs being recorded right now.
    pub(super) reserved: usize,
    /// No new runs are accepted (shutdown started).
    pub(super) closing: bool,
    /// Waiting runs are no longer started (the shutdown grace is over).
    pub(super) stopping: bool,
    /// The runs executing now by concurrency group key, oldest first.
    pub(super) groups: HashMap<String, Vec<String>>,
    /// The group key of each executing run that has one.
    pub(super) group_of: HashMap<String, String>,
}

/// What a run finding its group at its limit does besides waiting: the
/// waiters it replaces, and the running run it has cancelled.
#[derive(Default)]
pub(super) struct Room {
    pub(super) superseded: Vec<Waiter>,
    pub(super) cancel: Option<String>,
}

/// `max_concurrent_async_runs`; unlimited until the runner sets it from
/// the config ([`Slots::set_limits`]).
#[derive(Clone, Copy)]
pub(super) struct AsyncMax(pub(super) usize);

impl Default for AsyncMax {
    fn default() -> AsyncMax {
        AsyncMax(usize::MAX)
    }
}

impl Slots {
    /// Take the slot limits of `server` (a reload may change them).
    pub(super) fn set_limits(&mut self, server: &crate::config::Server) {
        self.max = server.max_concurrent_runs;
        self.async_max = AsyncMax(server.max_concurrent_async_runs);
    }

    /// Async runs that may start before they reach their limit.
    pub(super) fn async_room(&self) -> usize {
        self.async_max.0.saturating_sub(self.async_used)
    }

    /// Whether a run of `kind` may take a slot as far as its kind goes: a
    /// sync call always, an async run below `max_concurrent_async_runs`.
    fn kind_free(&self, kind: Kind) -> bool {
        kind == Kind::Sync || self.async_room() > 0
    }

    /// Queue `w` last.
    pub(super) fn push_back(&mut self, w: Waiter) {
        self.sync_waiting += usize::from(matches!(w, Waiter::Sync(_)));
        self.queue.push_back(w);
    }

    /// Queue `w` first.
    pub(super) fn push_front(&mut self, w: Waiter) {
        self.sync_waiting += usize::from(matches!(w, Waiter::Sync(_)));
        self.queue.push_front(w);
    }

    /// Empty the queue (shutdown).
    pub(super) fn drain_queue(&mut self) -> Vec<Waiter> {
        self.sync_waiting = 0;
        self.queue.drain(..).collect()
    }

    pub(super) fn fn_free(&self, key: &SlotKey, concurrency: usize) -> bool {
        self.per_fn.get(key).copied().unwrap_or(0) < concurrency
    }

    /// Runs of group key `key` executing now.
    fn running(&self, key: &str) -> usize {
        self.groups.get(key).map_or(0, Vec::len)
    }

    fn group_free(&self, g: Option<&GroupClaim>) -> bool {
        g.is_none_or(|g| self.running(&g.key) < g.limit)
    }

    /// Whether a run of `kind`, `key` (at most `n` at once) and group `g`
    /// may take a slot now.
    pub(super) fn slot_free(
        &self,
        kind: Kind,
        key: &SlotKey,
        n: usize,
        g: Option<&GroupClaim>,
    ) -> bool {
        self.used < self.max && self.kind_free(kind) && self.fn_free(key, n) && self.group_free(g)
    }

    /// Take a slot for the async run `run` of `key` and group `g`.
    pub(super) fn take_async(&mut self, key: &SlotKey, run: &str, g: Option<&GroupClaim>) {
        self.async_used += 1;
        self.take(key, run, g);
    }

    /// Take a slot for run `run` of `key` and group `g`.
    pub(super) fn take(&mut self, key: &SlotKey, run: &str, g: Option<&GroupClaim>) {
        self.used += 1;
        *self.per_fn.entry(key.clone()).or_default() += 1;
        self.join(run, g);
    }

    fn join(&mut self, run: &str, g: Option<&GroupClaim>) {
        if let Some(g) = g {
            self.groups
                .entry(g.key.clone())
                .or_default()
                .push(run.to_string());
            self.group_of.insert(run.to_string(), g.key.clone());
        }
    }

    /// Run `run` no longer executes: its group has room for one more.
    pub(super) fn leave(&mut self, run: &str) {
        let Some(key) = self.group_of.remove(run) else {
            return;
        };
        if let Some(runs) = self.groups.get_mut(&key) {
            runs.retain(|r| r != run);
            if runs.is_empty() {
                self.groups.remove(&key);
            }
        }
    }

    /// Whether a new run of group `g` is skipped (`policy = "skip"`): its
    /// key has `limit` runs executing or waiting.
    pub(super) fn skips(&self, g: Option<&GroupClaim>) -> bool {
        let Some(g) = g.filter(|g| g.policy == Policy::Skip) else {
            return false;
        };
        let waiting = self.queue.iter().filter(|w| same_group(w, &g.key)).count();
        self.running(&g.key) + waiting >= g.limit
    }

    /// Whether a new run of group `g` takes the place of a run of its key
    /// waiting now (`replace_pending`, `cancel_running`: [`Slots::make_room`]
    /// takes that one out of the queue), so that it needs no room in a
    /// full queue.
    pub(super) fn replaces(&self, g: Option<&GroupClaim>) -> bool {
        g.is_some_and(|g| {
            matches!(g.policy, Policy::ReplacePending | Policy::CancelRunning)
                && self.queue.iter().any(|w| same_group(w, &g.key))
        })
    }

    /// Make room for run `by` of group `g`, about to wait: with
    /// `replace_pending` and `cancel_running` the runs of its key waiting
    /// now leave the queue, superseded by it (a sync caller's ticket says
    /// so, set under this lock so that its wait cannot miss it), and with
    /// `cancel_running` the oldest running one is to be cancelled when
    /// the key is at its limit.
    pub(super) fn make_room(&mut self, g: Option<&GroupClaim>, by: &str) -> Room {
        let Some(g) = g else {
            return Room::default();
        };
        if !matches!(g.policy, Policy::ReplacePending | Policy::CancelRunning) {
            return Room::default();
        }
        let mut room = Room::default();
        while let Some(i) = self.queue.iter().position(|w| same_group(w, &g.key)) {
            if let Some(Waiter::Sync(t)) = self.queue.get(i) {
                let _ = t.superseded_by.set(by.to_string());
            }
            room.superseded.extend(self.take_at(i));
        }
        if g.policy == Policy::CancelRunning && self.running(&g.key) >= g.limit {
            room.cancel = self.groups.get(&g.key).and_then(|r| r.first().cloned());
        }
        room
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
        if !self.kind_free(Kind::Async) && self.sync_waiting == 0 {
            return None;
        }
        let i = self.queue.iter().position(|w| {
            let (key, n) = w.key();
            self.kind_free(w.kind()) && self.fn_free(key, n) && self.group_free(w.group())
        })?;
        self.take_at(i)
    }

    /// Remove the waiter at `i`; a queue left empty gives back a buffer
    /// grown by a burst (a `VecDeque` keeps its capacity: 2.5 MiB after
    /// 32,000 queued runs, for as long as the server runs).
    fn take_at(&mut self, i: usize) -> Option<Waiter> {
        let w = self.queue.remove(i);
        if let Some(Waiter::Sync(_)) = w {
            self.sync_waiting = self.sync_waiting.saturating_sub(1);
        }
        if self.queue.is_empty() && self.queue.capacity() > QUEUE_KEPT {
            self.queue.shrink_to(QUEUE_KEPT);
        }
        w
    }

    /// Give a slot already counted in `used` to `w` (a sync waiter is
    /// marked granted); it comes back to be woken or started.
    pub(super) fn grant(&mut self, w: Waiter) -> Granted {
        *self.per_fn.entry(w.key().0.clone()).or_default() += 1;
        self.join(w.run(), w.group());
        match w {
            Waiter::Sync(t) => {
                t.granted.store(true, Ordering::SeqCst);
                Granted::Sync(t)
            }
            Waiter::Async(q) => {
                self.async_used += 1;
                Granted::Async(q)
            }
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

    /// Run `run` of `key` ended: hand its slot to the next runnable waiter
    /// (which comes back, to be woken or started), or free it (then
    /// `true`).
    pub(super) fn release(
        &mut self,
        key: &SlotKey,
        run: &str,
        kind: Kind,
    ) -> (Option<Granted>, bool) {
        if kind == Kind::Async {
            self.async_used = self.async_used.saturating_sub(1);
        }
        self.release_fn(key);
        self.leave(run);
        // Hand the slot on, unless a reload lowered the limit.
        if self.used <= self.max {
            if let Some(w) = self.next_runnable() {
                return (Some(self.grant(w)), false);
            }
        }
        self.used -= 1;
        (None, true)
    }

    /// Undo the grant of a slot to async run `q`, which could not start,
    /// and queue it first again.
    pub(super) fn ungrant(&mut self, q: Queued) {
        self.release_fn(&q.key);
        self.leave(&q.run);
        self.used -= 1;
        self.async_used = self.async_used.saturating_sub(1);
        self.push_front(Waiter::Async(q));
    }

    /// Take run `run` off the queue (it holds no slot: nothing is freed).
    pub(super) fn remove_run(&mut self, run: &str) -> Option<Waiter> {
        let i = self.queue.iter().position(|w| w.run() == run)?;
        self.take_at(i)
    }

    pub(super) fn remove_ticket(&mut self, t: &Arc<Ticket>) {
        if let Some(i) = self
            .queue
            .iter()
            .position(|w| matches!(w, Waiter::Sync(x) if Arc::ptr_eq(x, t)))
        {
            self.take_at(i);
        }
    }
}

/// Whether `w` waits in group `key`.
fn same_group(w: &Waiter, key: &str) -> bool {
    w.group().is_some_and(|g| g.key == key)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ticket(n: usize) -> Arc<Ticket> {
        Arc::new(Ticket {
            run: format!("{n:032x}"),
            key: (Owner::Program(1), "run".into()),
            concurrency: usize::MAX,
            group: None,
            granted: AtomicBool::new(false),
            cancelled: AtomicBool::new(false),
            superseded_by: OnceLock::new(),
            wake: Condvar::new(),
        })
    }

    #[test]
    fn a_drained_queue_gives_back_the_buffer_of_a_burst() {
        let mut s = Slots::default();
        for n in 0..5_000 {
            s.push_back(Waiter::Sync(ticket(n)));
        }
        let mut taken = 0;
        while let Some(w) = s.next_runnable() {
            // In their order; the buffer is kept while waiters are left.
            assert_eq!(w.run(), format!("{taken:032x}"));
            taken += 1;
            if taken < 5_000 {
                assert!(s.queue.capacity() >= 5_000 - taken);
            }
        }
        assert_eq!(taken, 5_000);
        assert!(s.queue.capacity() <= QUEUE_KEPT, "{}", s.queue.capacity());

        // The same when the last waiters leave otherwise.
        let last = ticket(3_000);
        for n in 0..3_000 {
            s.push_back(Waiter::Sync(ticket(n)));
        }
        s.push_back(Waiter::Sync(Arc::clone(&last)));
        for n in 0..3_000 {
            assert!(s.remove_run(&format!("{n:032x}")).is_some());
        }
        assert!(s.queue.capacity() > QUEUE_KEPT);
        s.remove_ticket(&last);
        assert!(s.queue.is_empty());
        assert!(s.queue.capacity() <= QUEUE_KEPT, "{}", s.queue.capacity());
    }
}
