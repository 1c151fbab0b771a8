//! Runs not tied to a host (the PostgreSQL backend, `[state] url`): the
//! runner's side of `state::pg::cluster`.
//!
//! With a database, an accepted async run is a `queued` row in the cluster
//! queue, not a place in this runner's slot queue: one thread per instance
//! (the lease thread, [`Runner::share`]) takes the oldest ones while this
//! runner has a free slot (`FOR UPDATE SKIP LOCKED`) and hands them to the
//! slots like any queued run, so the slots and [`Job`](super::Job) stay
//! the one place a run starts. The thread is woken at once when this
//! instance accepts a run or frees a slot, and otherwise polls every
//! [`POLL`]: a run accepted on a busy instance starts on another one with
//! a free slot within about [`POLL`].
//!
//! The same thread renews the instance's lease every `lease / 3`
//! (`trigd_instances`), adopts the runs of instances whose lease lapsed
//! (their running runs end `interrupted`, or are queued again with
//! `retry_on_restart`; their taken-but-not-started runs go back to the
//! queue), and hands on cancel requests made through other instances. An
//! instance whose own lease has lapsed (a long stall, a partition) takes
//! nothing until it has renewed it; one that finds it was adopted stops
//! what it still runs (those runs belong to another instance now).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::queue::{GroupClaim, Queued, Waiter};
use super::{concurrency, lock, program_of, Cancel, Job, RunError, Runner};
use crate::config::group::Policy;
use crate::config::Config;
use crate::state::pg::cluster::{self as sql, Beat, CancelAt};
use crate::state::pg::deferred::DEFER;
use crate::state::pg::output::{self as kept, Shipping};
use crate::state::pg::{groups, Db, DbError};
use crate::state::record::{RunRecord, RunState};
use crate::state::time::Time;

/// How often the lease thread looks at the cluster queue and at cancel
/// requests when nothing woke it.
pub const POLL: Duration = Duration::from_millis(200);

/// How long a cancel asked through another instance looks for its run
/// here, as [`Runner::cancel`] does: a run passes from recorded to queued
/// or live without the record showing it.
const RELAYED_LOOKS: Duration = Duration::from_secs(1);

/// A cancel asked through another instance, not yet handed on to its run
/// here ([`Runner::look_relayed`]).
struct Relayed {
    id: String,
    /// The run of its concurrency group it is cancelled for
    /// (`cancel_running`), if any.
    by: Option<String>,
    /// Looked for until then.
    until: Instant,
}

/// This instance's membership of the cluster.
pub(super) struct Shared {
    db: Arc<Db>,
    me: String,
    lease: Duration,
    /// Set to wake the lease thread (a run was accepted, a slot freed).
    woken: Mutex<bool>,
    wake: Condvar,
    /// The lease is held (renewed within `lease`).
    leased: AtomicBool,
    /// The cluster queue held a run at the last look (or this instance
    /// just accepted one): a freed slot wakes the lease thread only then,
    /// so that an idle cluster costs no statement per run.
    backlog: AtomicBool,
    /// How far the output of each run executing here is copied to the
    /// database; held while a copy is sent, so one run's chunks are
    /// committed in order.
    shipping: Mutex<HashMap<String, Shipping>>,
    /// Runs taken from the cluster queue whose record could not be read
    /// when a slot started them (the database failed): given back to the
    /// queue once it answers.
    lost: Mutex<Vec<String>>,
    /// Runs whose take failed at its COMMIT ([`sql::TakeFailed`]): this
    /// instance may hold them all the same; settled once the database
    /// answers ([`Runner::settle_unsure`]).
    unsure: Mutex<Vec<String>>,
    /// Runs whose cancel failed in the database ([`Cancel::Unsure`]): the
    /// update that takes a run off the cluster queue to cancel it may have
    /// been done although its answer was lost, and then this instance
    /// holds the run `queued` and no other takes it; finished by whoever
    /// takes the id out first ([`Runner::settle_cancel`]: the lease thread
    /// once the database answers, or the cancel asked again).
    cancels_unsure: Mutex<Vec<String>>,
    /// The `started_at` (µs) of the row of `me` this process claimed
    /// ([`Beat::Claimed`]); `None` until it has one.
    mine: Mutex<Option<i64>>,
    /// The lease was let go at a clean stop ([`Runner::leave`]): no more
    /// renewals.
    left: AtomicBool,
    /// Runs executing here when another process of this instance's name
    /// claimed it (its lease had lapsed) and took them for its own: their
    /// ends are not recorded here ([`Runner::disowned`]), since the name
    /// that fences writes is the same.
    disowned: Mutex<std::collections::HashSet<String>>,
    /// The last renewal found the name held by another process
    /// ([`Beat::Held`]): not ready ([`Runner::name_held`]).
    held: AtomicBool,
    /// When the last renewal that succeeded was sent.
    renewed: Mutex<Option<Instant>>,
    /// Ends of executions that came while the lease had lapsed by this
    /// instance's clock ([`Runner::hold_end`]), with whether the run is
    /// queued again: written once it is renewed, dropped when another
    /// process took this instance's runs meanwhile.
    ends_held: Mutex<Vec<(RunRecord, bool)>>,
}

impl Shared {
    /// The cancel of run `id` failed in the database: look again once it
    /// answers (`cancels_unsure`).
    fn cancel_unsure(&self, id: &str) {
        let mut unsure = lock(&self.cancels_unsure);
        if !unsure.iter().any(|u| u == id) {
            unsure.push(id.to_string());
        }
    }

    /// A slot came free: wake the lease thread if the cluster queue may
    /// hold a run.
    pub(super) fn slot_freed(&self) {
        if self.backlog.load(Ordering::SeqCst) {
            self.wake();
        }
    }

    /// Wake the lease thread: there may be a run to take.
    pub(super) fn wake(&self) {
        *lock(&self.woken) = true;
        self.wake.notify_one();
    }

    /// Run `run` was taken but could not be started (its record could not
    /// be read): give it back to the queue at the next tick.
    pub(super) fn lost(&self, run: String) {
        log::warn!("run {run}: its record cannot be read now; back to the queue once it can");
        lock(&self.lost).push(run);
    }

    /// Give the lost runs back to the queue; those that fail stay.
    fn give_back_lost(&self) {
        let lost = std::mem::take(&mut *lock(&self.lost));
        let left: Vec<String> = lost
            .into_iter()
            .filter(|id| sql::give_back(&self.db, &self.me, id).is_err())
            .collect();
        let given = left.is_empty();
        lock(&self.lost).extend(left);
        if given {
            self.wake();
        }
    }

    /// Wait until woken, at most `limit`.
    fn wait(&self, limit: Duration) {
        let mut w = lock(&self.woken);
        if !*w {
            w = self
                .wake
                .wait_timeout(w, limit)
                .map_or_else(|e| e.into_inner().0, |r| r.0);
        }
        *w = false;
    }
}

/// The current config, as the lease thread reads it for each run it takes.
pub type ConfigFn = Box<dyn Fn() -> Arc<Config> + Send>;

impl Runner {
    /// Share the run queue with the other instances on `db` as instance
    /// `me`, holding a lease of `lease`: start the lease thread. `mine`:
    /// the row of `me` this process already claimed ([`claim`]), if any.
    ///
    /// # Errors
    /// The thread cannot be started.
    pub fn share(
        self: &Arc<Self>,
        db: Arc<Db>,
        me: &str,
        lease: Duration,
        mine: Option<i64>,
        config: ConfigFn,
    ) -> std::io::Result<()> {
        let shared = Arc::new(Shared {
            db,
            me: me.to_string(),
            lease,
            woken: Mutex::new(false),
            wake: Condvar::new(),
            leased: AtomicBool::new(false),
            backlog: AtomicBool::new(true),
            shipping: Mutex::default(),
            lost: Mutex::default(),
            unsure: Mutex::default(),
            cancels_unsure: Mutex::default(),
            mine: Mutex::new(mine),
            left: AtomicBool::new(false),
            disowned: Mutex::default(),
            held: AtomicBool::new(false),
            renewed: Mutex::default(),
            ends_held: Mutex::default(),
        });
        let _ = self.cluster.set(Arc::clone(&shared));
        let runner = Arc::clone(self);
        thread::Builder::new()
            .name("lease".into())
            .spawn(move || runner.lease_loop(&shared, &config))
            .map(drop)
    }

    /// The lease thread: renew, adopt, hand on cancels, take runs; at
    /// shutdown, the runs taken but not started go back to the queue.
    fn lease_loop(self: &Arc<Self>, shared: &Shared, config: &ConfigFn) {
        let every = shared.lease / 3;
        let mut beat = Lease::default();
        let mut next_beat = Instant::now();
        let mut next_settle = Instant::now();
        let mut next_cancels = Instant::now();
        let mut gave_back = false;
        let mut relayed = Vec::new();
        loop {
            // The lease is still renewed while a shutdown lets the runs
            // here finish: they are this instance's until they end.
            let closing = lock(&self.slots).closing;
            if closing && !gave_back {
                self.give_back_taken(shared);
                gave_back = true;
            }
            if Instant::now() >= next_beat {
                next_beat = Instant::now() + every;
                self.beat(shared, &mut beat, &config());
            }
            self.ship_live(shared);
            if Instant::now() >= next_settle {
                // At most once a POLL: each look waits for a WAL flush.
                next_settle = Instant::now() + POLL;
                if let Some(Err(e)) = self.store.as_ref().map(|s| s.settle_ends()) {
                    log::debug!("cluster: cannot confirm the run ends written unflushed: {e}");
                }
                if let Some(s) = &self.store {
                    s.trim_if_due();
                }
            }
            if beat.held(shared.lease) {
                if !lock(&shared.lost).is_empty() {
                    shared.give_back_lost();
                }
                if Instant::now() >= next_cancels {
                    // At most once a POLL (the documented bound): the
                    // thread is woken at every free slot, and under a
                    // burst the poll ran 600 times a second.
                    next_cancels = Instant::now() + POLL;
                    self.hand_on_cancels(shared, &mut relayed);
                }
                if !relayed.is_empty() {
                    self.look_relayed(&mut relayed);
                }
                if !lock(&shared.unsure).is_empty() {
                    self.settle_unsure(shared, &config());
                }
                // After the takes settled above: a run this instance took
                // is in its queue by now, and its cancel finds it there.
                let cancels = std::mem::take(&mut *lock(&shared.cancels_unsure));
                for id in cancels {
                    self.settle_cancel(shared, &id);
                }
                if !closing {
                    self.take_runs(shared, &config());
                }
            }
            // Sync runs still running DEFER after their start are written
            // `running` now; the wait ends when the next one is due.
            let due = self
                .store
                .as_ref()
                .and_then(|s| s.write_deferred(DEFER))
                .unwrap_or(POLL);
            let left = next_beat.saturating_duration_since(Instant::now());
            shared.wait(left.min(POLL).min(due));
        }
    }

    /// At a clean stop, once the runs here ended: let this instance's
    /// lease lapse now ([`sql::leave`]) and renew it no more, so that a
    /// restart under the same name claims it at once ([`claim`]).
    pub fn leave(&self) {
        let Some(shared) = self.cluster.get() else {
            return;
        };
        let mine = lock(&shared.mine);
        shared.left.store(true, Ordering::SeqCst);
        if let Some(mine) = *mine {
            if let Err(e) = sql::leave(&shared.db, &shared.me, mine) {
                log::warn!("cluster: cannot let this instance's lease go: {e}");
            }
        }
    }

    /// Renew the lease; at the first success, adopt this instance's runs
    /// of before its start; then adopt those of lapsed instances.
    fn beat(self: &Arc<Self>, shared: &Shared, lease: &mut Lease, cfg: &Arc<Config>) {
        let sent = Instant::now();
        // Held across the renewal: a clean stop's `leave` waits for it.
        let mut claimed = lock(&shared.mine);
        if shared.left.load(Ordering::SeqCst) {
            return;
        }
        let mine = *claimed;
        let renewal = sql::heartbeat(&shared.db, &shared.me, shared.lease, mine);
        if let Ok(Beat::Claimed(started)) = &renewal {
            let started = *started;
            *claimed = Some(started);
            // Claimed here, not at start: another process of the name may
            // have held it, and recorded runs, since this one started.
            lease.claimed_late |= mine.is_none();
        }
        drop(claimed);
        let held = matches!(renewal, Ok(Beat::Held));
        shared.held.store(held, Ordering::SeqCst);
        match renewal {
            Ok(Beat::Held) => {
                log::error!(
                    "cluster: the instance name {:?} is held by another process (another \
                     instance with the same `instance`, or this one's previous process until \
                     its lease lapses); taking no runs until its lease lapses",
                    shared.me
                );
                if mine.is_some() {
                    // This process's lease lapsed and another process of
                    // the name claimed it, taking its runs for its own: it
                    // claims the name again once that one's lease lapses.
                    *lock(&shared.mine) = None;
                    lease.renewed = None;
                    lease.adopted_own = false;
                    self.disown_same_name(shared);
                    drop_held_ends(shared);
                }
            }
            Ok(beat) => {
                if matches!(beat, Beat::Claimed(_)) && mine.is_some() && lease.renewed.is_some() {
                    log::error!(
                        "cluster: this instance's lease lapsed and its runs were adopted by \
                         another instance; stopping the runs it still executes"
                    );
                    self.disown();
                    drop_held_ends(shared);
                }
                *lock(&shared.renewed) = Some(sent);
                let held = std::mem::take(&mut *lock(&shared.ends_held));
                for (mut rec, retry) in held {
                    self.write_end(&mut rec, retry);
                }
                lease.renewed = Some(sent);
                // Healthy from the answer, not from the sending: a renewal
                // sent while the database was starting up can be answered
                // seconds later, and the others' renewals sent meanwhile
                // are answered no sooner than this one.
                lease.healthy_since.get_or_insert_with(Instant::now);
                if !lease.adopted_own {
                    lease.adopted_own = self.adopt(shared, &shared.me, lease.claimed_late, cfg);
                }
                if let Some(c) = self.callbacks() {
                    c.resume_unread();
                }
            }
            Err(e) => {
                lease.healthy_since = None;
                log::warn!("cluster: cannot renew this instance's lease: {e}");
            }
        }
        let held = lease.held(shared.lease);
        if held != shared.leased.swap(held, Ordering::SeqCst) {
            if held {
                log::info!("cluster: lease held; taking queued runs");
            } else {
                log::warn!(
                    "cluster: this instance's lease has lapsed (not renewed for {:?}); \
                     taking no runs until it is renewed",
                    shared.lease
                );
            }
        }
        // After an outage of the database (or at start), the others get a
        // whole lease to renew theirs before any is taken for dead.
        let settled = lease
            .healthy_since
            .is_some_and(|t| t.elapsed() >= shared.lease);
        if held && settled {
            self.adopt_lapsed(shared, cfg);
        }
    }

    /// Adopt the runs of every other instance whose lease lapsed.
    fn adopt_lapsed(self: &Arc<Self>, shared: &Shared, cfg: &Arc<Config>) {
        match sql::lapsed(&shared.db, &shared.me) {
            Ok(dead) => {
                for name in dead {
                    self.adopt(shared, &name, false, cfg);
                }
            }
            Err(e) => log::warn!("cluster: cannot look for lapsed leases: {e}"),
        }
    }

    /// Adopt the runs of `dead`; whether that was done (or not needed).
    fn adopt(self: &Arc<Self>, shared: &Shared, dead: &str, late: bool, cfg: &Arc<Config>) -> bool {
        // The name claimed after another process of it held it: every run
        // of the name is that one's but those executing here.
        let live: Option<Vec<String>> =
            (dead == shared.me && late).then(|| lock(&self.live).runs.keys().cloned().collect());
        let adopted = match sql::adopt(&shared.db, &shared.me, dead, live.as_deref()) {
            Ok(Some(a)) => a,
            Ok(None) => return true,
            Err(e) => {
                log::warn!("cluster: cannot adopt the runs of instance {dead}: {e}");
                return false;
            }
        };
        if adopted.requeued + adopted.runs.len() > 0 || dead != shared.me {
            log::warn!(
                "cluster: instance {dead} stopped holding its lease: {} of its runs went back \
                 to the queue, {} are ended or queued again here",
                adopted.requeued,
                adopted.runs.len()
            );
        }
        if dead == shared.me {
            // This instance's runs of before its start: what its previous
            // life left running on this host is stopped before any of
            // them is queued again. On this thread, which renews the
            // lease: the grace is cut to a renewal's interval.
            let grace = cfg.server.kill_grace.min(shared.lease / 3);
            let running: Vec<String> = adopted
                .runs
                .iter()
                .filter(|r| r.state == RunState::Running)
                .map(|r| r.run.clone())
                .collect();
            let uids = super::orphans::step_uids(cfg);
            for how in super::orphans::stop(&running, &uids, grace) {
                self.metrics.orphan_group_stopped(how.label());
            }
        }
        for rec in adopted.runs {
            self.end_adopted(shared, rec, dead, cfg);
        }
        if let (Some(c), false) = (self.callbacks(), adopted.callbacks.is_empty()) {
            log::warn!(
                "cluster: sending the {} pending callback deliveries of instance {dead}",
                adopted.callbacks.len()
            );
            c.resume(adopted.callbacks);
        }
        if adopted.requeued > 0 {
            shared.wake();
        }
        true
    }

    /// End a run adopted from `dead`: a running async run goes back to the
    /// queue for its next attempt (`[functions.retry]` retrying
    /// `interrupted`) or from the start (`retry_on_restart`), any other ends
    /// `interrupted` (a run whose request body file was on `dead`:
    /// `failed`).
    fn end_adopted(&self, shared: &Shared, mut rec: RunRecord, dead: &str, cfg: &Config) {
        let cut = format!("instance {dead} stopped before the run finished");
        let retry = rec.state == RunState::Running
            && rec.r#async
            && rec.input.as_ref().is_some_and(|i| !i.body)
            && crate::runner::again_after_crash(&mut rec, cfg, &cut);
        if retry {
            rec.state = RunState::Queued;
            (rec.started_at, rec.finished_at, rec.error) = (None, None, None);
            (rec.stdout, rec.stderr) = (None, None);
            rec.steps.clear();
            self.record(&rec);
            if let Err(e) = sql::give_back(&shared.db, &shared.me, &rec.run) {
                log::warn!("cluster: run {}: cannot queue it again: {e}", rec.run);
            }
            return;
        }
        let body = rec.input.as_ref().is_some_and(|i| i.body);
        let (state, why) = if body && rec.state == RunState::Queued {
            let why = format!("its request body or files were on instance {dead}, which stopped");
            (RunState::Failed, why)
        } else {
            (RunState::Interrupted, cut)
        };
        self.end_unstarted(rec, state, &why, false);
    }

    /// Why this instance should get no traffic: its name is held by
    /// another process (at the last renewal), under which its runs would
    /// be recorded.
    pub fn name_held(&self) -> Option<String> {
        let shared = self.cluster.get()?;
        shared.held.load(Ordering::SeqCst).then(|| {
            format!(
                "the instance name {:?} is held by another process on the database",
                shared.me
            )
        })
    }

    /// Keep the end of run `rec` (`retry`: queued again) for the lease
    /// thread when this instance's lease has lapsed by its own clock: it
    /// was stalled (or the database slow) past the lease, and another
    /// process may have taken the run meanwhile, one of the same name
    /// among them, whose writes the database cannot tell from this one's
    /// (a stalled instance ending a run after SIGCONT wrote `failed` over
    /// the claimer's `interrupted`). Whether it was kept.
    pub(super) fn hold_end(&self, rec: &RunRecord, retry: bool) -> bool {
        let Some(shared) = self.cluster.get() else {
            return false;
        };
        // Not while the database is known down: the store keeps the end
        // until it answers, fenced by the name (the usual outage).
        let lapsed = lock(&shared.renewed).is_some_and(|t| t.elapsed() >= shared.lease)
            && !shared.db.known_down();
        if lapsed {
            lock(&shared.ends_held).push((rec.clone(), retry));
        }
        lapsed
    }

    /// [`Runner::disown`], when another process of this instance's name
    /// took its runs: their ends are not recorded here either.
    fn disown_same_name(&self, shared: &Shared) {
        lock(&shared.disowned).extend(lock(&self.live).runs.keys().cloned());
        self.disown();
    }

    /// Whether run `run` was disowned when another process of this
    /// instance's name took it ([`Runner::disown_same_name`]): its end is
    /// that process's to record. Asked once, at its end.
    pub(super) fn disowned(&self, run: &str) -> bool {
        self.cluster
            .get()
            .is_some_and(|s| lock(&s.disowned).remove(run))
    }

    /// Stop everything this instance holds: its lease was lost and another
    /// instance has adopted its runs (their records are that one's now).
    fn disown(&self) {
        let dropped: std::collections::VecDeque<Waiter> = {
            let mut s = lock(&self.slots);
            let (asyncs, rest) = s
                .queue
                .drain(..)
                .partition(|w| matches!(w, Waiter::Async(_)));
            s.queue = rest;
            asyncs
        };
        for w in dropped {
            if let Waiter::Async(q) = w {
                drop(self.take_unrecorded(&q.run));
            }
        }
        for handle in lock(&self.live).runs.values() {
            handle.abort();
        }
    }

    /// Copy what the runs executing here printed since the last tick to
    /// the database, in one statement, with what earlier copies could not
    /// send (also of runs that ended since: [`Runner::ship_end`]).
    fn ship_live(&self, shared: &Shared) {
        let Some(store) = &self.store else { return };
        let live: Vec<String> = lock(&self.live).runs.keys().cloned().collect();
        let mut shipping = lock(&shared.shipping);
        shipping.retain(|run, s| live.contains(run) || s.ended);
        for run in &live {
            shipping.entry(run.clone()).or_default();
        }
        for (run, s) in shipping.iter_mut() {
            let before = s.unsent().len();
            s.collect(run, &store.output_path(run));
            if s.unsent().len() > before && !s.ended {
                // The copy refers to the run's row.
                store.write_deferred_run(run);
            }
        }
        let chunks: Vec<&kept::Chunk> = shipping.values().flat_map(|s| s.unsent()).collect();
        let shipped = kept::ship(&shared.db, &chunks, true);
        if let Err(e) = &shipped {
            log::warn!("cluster: cannot copy the output of the runs here: {e}");
        }
        if !shipped.as_ref().is_err_and(DbError::is_unavailable) {
            // Copied; or refused, which sending again would not change
            // (and would hold back every run's copy): dropped.
            shipping.values_mut().for_each(Shipping::sent);
            shipping.retain(|_, s| !s.done());
        }
    }

    /// Copy the rest of run `run`'s output to the database, at its end
    /// (before the end is recorded: a reader that sees the end finds all
    /// of it).
    pub(super) fn ship_end(&self, run: &str) {
        let (Some(shared), Some(store)) = (self.cluster.get(), &self.store) else {
            return;
        };
        let mut shipping = lock(&shared.shipping);
        let mut s = shipping.remove(run).unwrap_or_default();
        let before = s.unsent().len();
        s.collect(run, &store.output_path(run));
        if s.unsent().len() > before {
            // The copy refers to the run's row: a short run that printed
            // something is written `running` first.
            store.write_deferred_run(run);
        }
        s.ended = true;
        let chunks: Vec<&kept::Chunk> = s.unsent().iter().collect();
        let mut shipped = kept::ship(&shared.db, &chunks, false);
        if shipped.as_ref().is_err_and(DbError::is_unavailable) {
            // Once more, at once: after a restart of the database the
            // pool's first connections are dead ones (each dropped when it
            // fails), and the end, written next on a live one, would be
            // seen before the rest of the output (the copy is idempotent).
            shipped = kept::ship(&shared.db, &chunks, false);
        }
        if let Err(e) = &shipped {
            log::warn!("run {run}: cannot copy its output to the database: {e}");
        }
        if !shipped.as_ref().is_err_and(DbError::is_unavailable) {
            s.sent();
        }
        if !s.done() {
            // The lease thread sends the rest with its next copy.
            shipping.insert(run.to_string(), s);
        }
    }

    /// Read the cancels asked through other instances of runs this
    /// instance holds: they join `relayed`, which [`Runner::look_relayed`]
    /// hands on.
    fn hand_on_cancels(&self, shared: &Shared, relayed: &mut Vec<Relayed>) {
        match sql::cancels(&shared.db, &shared.me) {
            Ok(ids) => {
                let until = Instant::now() + RELAYED_LOOKS;
                relayed.extend(ids.into_iter().map(|(id, by)| Relayed { id, by, until }));
            }
            Err(e) => log::warn!("cluster: cannot read cancel requests: {e}"),
        }
    }

    /// Hand each relayed cancel on to its run here, one look each: a run
    /// not found (between its record and its start, or ended with its end
    /// not yet written) is looked for again at the next tick, until its
    /// `until`. The lease thread does not wait for it: it renews the lease
    /// (a cancel of each of 20 runs it no longer had, looked for half a
    /// second each, held it 10 s, past a 2 s lease).
    fn look_relayed(&self, relayed: &mut Vec<Relayed>) {
        let now = Instant::now();
        relayed.retain(|r| {
            let done = match &r.by {
                Some(by) => self.displace(&r.id, by),
                None => match self.cancel_here(&r.id, 1) {
                    Cancel::NotActive => false,
                    done => {
                        log::info!(
                            "run {}: cancel asked through another instance: {done:?}",
                            r.id
                        );
                        true
                    }
                },
            };
            if !done && now >= r.until {
                match &r.by {
                    Some(by) => log::warn!(
                        "run {}: to be cancelled for run {by}, but it did not start in time",
                        r.id
                    ),
                    None => log::info!(
                        "run {}: cancel asked through another instance: not running here (ended)",
                        r.id
                    ),
                }
            }
            !done && now < r.until
        });
    }

    /// Take queued runs from the cluster queue while a slot is free: as
    /// many as the free room holds at once ([`sql::take`]).
    fn take_runs(self: &Arc<Self>, shared: &Shared, cfg: &Arc<Config>) {
        loop {
            let room = self.room(cfg);
            if room == 0 {
                return;
            }
            match sql::take(&shared.db, &shared.me, room) {
                Ok(runs) if runs.is_empty() => {
                    return shared.backlog.store(false, Ordering::SeqCst);
                }
                Ok(runs) => {
                    shared.backlog.store(true, Ordering::SeqCst);
                    for rec in runs {
                        log::debug!("run {} taken from the cluster queue", rec.run);
                        self.enqueue_taken(cfg, rec);
                    }
                }
                Err(failed) => {
                    log::warn!("cluster: cannot take a queued run: {}", failed.error);
                    for id in &failed.maybe_taken {
                        log::warn!(
                            "run {id}: its take failed at the commit; looked at again once \
                             the database answers"
                        );
                    }
                    lock(&shared.unsure).extend(failed.maybe_taken);
                    return;
                }
            }
        }
    }

    /// Settle the takes that failed at their COMMIT: a run this instance
    /// holds still `queued` was taken after all and goes to a slot here
    /// (no other instance takes a run that is held, and this one's lease
    /// is alive: without this it would stay `queued` for good); one it
    /// does not hold is in the cluster queue or taken by another. Those
    /// the database cannot tell about yet stay for the next tick.
    fn settle_unsure(self: &Arc<Self>, shared: &Shared, cfg: &Arc<Config>) {
        let unsure = std::mem::take(&mut *lock(&shared.unsure));
        for id in unsure {
            match sql::held_queued(&shared.db, &shared.me, &id) {
                Ok(Some(rec)) => {
                    log::warn!("run {id}: its take was committed after all; queued here");
                    self.enqueue_taken(cfg, rec);
                }
                Ok(None) => {}
                Err(e) => {
                    log::warn!("run {id}: cannot tell whether its take was committed: {e}");
                    lock(&shared.unsure).push(id);
                }
            }
        }
    }

    /// Slots free for runs taken from the cluster queue: the free slots,
    /// within `max_concurrent_async_runs`, less the async runs already
    /// waiting here for one.
    fn room(&self, cfg: &Config) -> usize {
        let mut s = lock(&self.slots);
        if s.closing {
            return 0;
        }
        s.set_limits(&cfg.server);
        let waiting = s
            .queue
            .iter()
            .filter(|w| matches!(w, Waiter::Async(_)))
            .count();
        let free = s.max.saturating_sub(s.used);
        free.min(s.async_room()).saturating_sub(waiting)
    }

    /// Queue run `rec`, just taken by this instance, for a slot.
    fn enqueue_taken(self: &Arc<Self>, cfg: &Arc<Config>, rec: RunRecord) {
        let body = rec.input.as_ref().is_some_and(|i| i.body);
        let kept = body && lock(&self.unrecorded).contains_key(&rec.run);
        match program_of(cfg, rec.owner, &rec.function) {
            Some(p) if !body || kept => {
                let group = super::resumed_group(p, &rec);
                let mut s = lock(&self.slots);
                s.push_back(Waiter::Async(Queued {
                    group,
                    concurrency: concurrency(p, &rec.function),
                    key: (rec.owner, rec.function.clone()),
                    run: rec.run.clone(),
                    program: Arc::clone(p),
                    cfg: Arc::clone(cfg),
                    taken: Some(Box::new(rec)),
                }));
                let start = s.fill();
                drop(s);
                self.start_granted(start);
            }
            _ => {
                let why = if body {
                    "its request body or files (temporary files) did not survive a restart"
                } else {
                    "its program or function no longer exists"
                };
                self.end_unstarted(rec, RunState::Failed, why, false);
            }
        }
    }

    /// Accept the async `job` into the cluster queue: recorded durably
    /// (with its input), then taken by whichever instance has a free slot
    /// first (this one is woken at once).
    pub(super) fn start_shared(&self, shared: &Shared, job: Job) -> Result<String, RunError> {
        if lock(&self.slots).closing {
            return Err(RunError::ShuttingDown);
        }
        let group = job.group();
        let mut rec = self.new_record(&job, true);
        rec.input = Some(super::run_input(&job, group.as_ref()));
        let id = rec.run.clone();
        if let Some(g) = group.as_ref().filter(|g| g.policy == Policy::Skip) {
            let busy = groups::busy(&shared.db, &g.key, g.limit);
            if busy.map_err(|e| RunError::Storage(std::io::Error::other(e)))? {
                self.skip(rec, group, true);
                return Ok(id);
            }
        }
        let held = job.kept_in_memory(true).then(|| job.kept_bytes());
        if let Some(held) = held {
            self.keep_in_memory(&job, held)?;
            // Kept before it is recorded: only this instance takes it (its
            // body file is here), and it may do so at once.
            lock(&self.unrecorded).insert(id.clone(), (rec.clone(), job));
        }
        let written = match &self.store {
            Some(store) => store.append(&rec, true),
            None => Ok(()),
        };
        if let Err(e) = written {
            if held.is_some() {
                drop(self.take_unrecorded(&id));
            }
            return Err(RunError::Storage(e));
        }
        if let Some(g) = &group {
            self.make_room_shared(shared, g, &id);
        }
        shared.backlog.store(true, Ordering::SeqCst);
        shared.wake();
        Ok(id)
    }

    /// Run `by` of group `g` is in the cluster queue: under
    /// `replace_pending` and `cancel_running` the runs of its key still
    /// there end `superseded`, and under `cancel_running` the oldest
    /// running one (on whichever instance) is cancelled. A failure is
    /// logged: the take settles a replacement left undone.
    fn make_room_shared(&self, shared: &Shared, g: &GroupClaim, by: &str) {
        if !matches!(g.policy, Policy::ReplacePending | Policy::CancelRunning) {
            return;
        }
        let at = serde_json::to_string(&Time::now()).unwrap_or_default();
        match groups::supersede(&shared.db, &g.key, by, &at) {
            Ok(ids) => {
                for id in ids {
                    log::info!("run {id} superseded by run {by}");
                }
                self.ended.notify_all();
            }
            Err(e) => log::warn!("run {by}: cannot supersede the waiting runs of its group: {e}"),
        }
        if g.policy != Policy::CancelRunning {
            return;
        }
        match groups::cancel_oldest(&shared.db, &g.key, by, g.limit, &shared.me) {
            Ok(Some((run, at))) if at == shared.me => self.cancel_displaced(&run, by),
            Ok(Some((run, at))) => log::info!("run {run}: cancel for run {by} asked of {at}"),
            Ok(None) => {}
            Err(e) => log::warn!("run {by}: cannot cancel the running run of its group: {e}"),
        }
    }

    /// Count `job`, whose request body is in a file here, against
    /// `max_waiting_bytes` while it waits.
    fn keep_in_memory(&self, job: &Job, held: usize) -> Result<(), RunError> {
        let budget = job.cfg.server.max_waiting_bytes;
        if self.waiting_bytes.load(Ordering::SeqCst) + held > budget {
            let waiting = lock(&self.slots).queue.len();
            return Err(RunError::WaitingBytesFull {
                budget,
                retry_after: self.retry_after(waiting),
            });
        }
        self.waiting_bytes.fetch_add(held, Ordering::SeqCst);
        Ok(())
    }

    /// Cancel run `id` where it is held, when that is not here: taken off
    /// the cluster queue (recorded `cancelled` here) or asked of the
    /// instance that holds it. `None`: it is this instance's (or ended).
    pub(super) fn cancel_shared(&self, shared: &Shared, id: &str) -> Option<Cancel> {
        let was_unsure = {
            let mut unsure = lock(&shared.cancels_unsure);
            let at = unsure.iter().position(|u| u == id);
            at.map(|i| unsure.swap_remove(i)).is_some()
        };
        if was_unsure {
            match self.settle_cancel(shared, id) {
                Cancel::NotActive => {}
                done => return Some(done),
            }
        }
        match sql::cancel(&shared.db, &shared.me, id) {
            Ok(CancelAt::Taken(rec)) => {
                let why = "the run was cancelled before it started";
                self.end_unstarted(*rec, RunState::Cancelled, why, true);
                Some(Cancel::Dequeued)
            }
            Ok(CancelAt::Asked(at)) => {
                log::info!("run {id}: cancel handed to instance {at}");
                Some(Cancel::Stopping)
            }
            Ok(CancelAt::Here) => None,
            Err(e) => {
                log::warn!(
                    "run {id}: cannot hand its cancel on: {e}; looked at again once the \
                     database answers"
                );
                shared.cancel_unsure(id);
                Some(Cancel::Unsure)
            }
        }
    }

    /// Finish the cancel of run `id` that failed in the database
    /// (`cancels_unsure`, which the caller took it out of): a run this
    /// instance holds still `queued` was taken off the cluster queue by
    /// that cancel after all (or by a take of this instance since), and
    /// is cancelled here; one it does not hold was not (the cancel is not
    /// done: `NotActive`). While the database cannot tell, the id goes
    /// back for the next look (`Unsure`).
    fn settle_cancel(&self, shared: &Shared, id: &str) -> Cancel {
        match sql::held_queued(&shared.db, &shared.me, id) {
            // One look: the lease thread must not wait (its lease), and a
            // run this instance took is in its queue or running by now
            // (its take was settled before).
            Ok(Some(rec)) => match self.cancel_here(id, 1) {
                Cancel::NotActive => {
                    log::warn!("run {id}: its cancel took it off the cluster queue after all");
                    let why = "the run was cancelled before it started";
                    self.end_unstarted(rec, RunState::Cancelled, why, true);
                    Cancel::Dequeued
                }
                done => done,
            },
            Ok(None) => Cancel::NotActive,
            Err(e) => {
                log::warn!("run {id}: cannot tell whether its cancel took it: {e}");
                shared.cancel_unsure(id);
                Cancel::Unsure
            }
        }
    }

    /// At shutdown: the runs taken here but not started leave this
    /// runner's queue and go back to the cluster queue, so that other
    /// instances take them at once (a run whose request body file is here
    /// stays: only this instance can run it).
    fn give_back_taken(&self, shared: &Shared) {
        let taken: Vec<String> = {
            let mut s = lock(&self.slots);
            let kept = lock(&self.unrecorded);
            let (taken, rest) = s
                .queue
                .drain(..)
                .partition(|w| matches!(w, Waiter::Async(q) if !kept.contains_key(&q.run)));
            s.queue = rest;
            taken.iter().map(|w| w.run().to_string()).collect()
        };
        for id in &taken {
            if let Err(e) = sql::give_back(&shared.db, &shared.me, id) {
                log::warn!("run {id}: cannot give it back to the queue: {e}");
            }
        }
        if !taken.is_empty() {
            log::info!(
                "cluster: {} taken runs given back to the queue",
                taken.len()
            );
        }
    }
}

/// The lease thread's view of its lease.
#[derive(Debug, Default)]
struct Lease {
    /// When the last renewal that succeeded was sent.
    renewed: Option<Instant>,
    /// This instance's runs from before its start were adopted.
    adopted_own: bool,
    /// The lease thread claimed the name (not the start: the database
    /// did not answer then, or another process held it since).
    claimed_late: bool,
    /// Since when every renewal succeeded: when the first of them was
    /// answered (the others' leases are judged a whole lease after it).
    healthy_since: Option<Instant>,
}

impl Lease {
    /// Whether the lease still holds by this instance's clock: renewed
    /// (sent) less than `lease` ago; the database's `expires_at` is later.
    fn held(&self, lease: Duration) -> bool {
        self.adopted_own && self.renewed.is_some_and(|t| t.elapsed() < lease)
    }
}

/// Claim the instance name `me` on `db` before serving: the row of the
/// name in `trigd_instances` whose lease this process then renews, its
/// `started_at` (µs) returned. A live lease of another process on the
/// name is waited for, at most a lease, while it may be this instance's
/// previous process (killed before its lease lapsed); renewed meanwhile,
/// it is another instance's of the same name. `Ok(None)`: the database
/// does not answer (the lease thread claims the name once it does, and
/// takes no runs while another process holds it).
///
/// # Errors
/// Another live trigd holds the name: the message says so.
pub fn claim(db: &Db, me: &str, lease: Duration) -> Result<Option<i64>, String> {
    // A renewal comes every third of a lease; a lapse at most a lease on.
    let deadline = Instant::now() + lease + lease / 3 + Duration::from_secs(1);
    let in_use = |why: &str| {
        format!(
            "the instance name {me:?} is in use by another trigd on the database ({why}): \
             give each instance its own `instance` in [server]"
        )
    };
    if db.known_down() {
        return Ok(None);
    }
    let mut seen = None;
    loop {
        match sql::heartbeat(db, me, lease, None) {
            Ok(Beat::Claimed(started)) => return Ok(Some(started)),
            Ok(_) => {}
            Err(e) => {
                log::warn!("cluster: cannot claim the instance name {me:?} yet: {e}");
                return Ok(None);
            }
        }
        let renewed = sql::renewed_at(db, me).ok().flatten();
        match seen {
            None => {
                log::warn!(
                    "cluster: the instance name {me:?} has a live lease on the database: \
                     waiting up to {lease:?} for it to lapse (this instance's previous \
                     process) or be renewed (another instance of that name)"
                );
                seen = Some(renewed);
            }
            Some(before) if before != renewed && renewed.is_some() => {
                return Err(in_use("its lease was renewed meanwhile"));
            }
            Some(_) => {}
        }
        if Instant::now() >= deadline {
            return Err(in_use("its lease did not lapse"));
        }
        thread::sleep(Duration::from_millis(200));
    }
}

/// Forget the ends kept while the lease had lapsed: another process took
/// this instance's runs meanwhile, and their ends are its to record.
fn drop_held_ends(shared: &Shared) {
    for (rec, _) in std::mem::take(&mut *lock(&shared.ends_held)) {
        log::warn!(
            "run {}: state {} not recorded: this instance's lease lapsed and another process \
             took the run",
            rec.run,
            rec.state.name()
        );
    }
}
