//! The one timer thread of all schedules: a heap of the next firing of
//! each, a sleep until the first (woken early by a reload), and for each
//! schedule due the actions of [`plan`](super::plan), carried out through
//! the ordinary run path (`invoke::job`, `Runner::start_async`): a firing
//! is a run like any other, whose caller is the clock.
//!
//! Durability: the records of the occurrences handled (a run accepted in
//! `runs.log`, synced; a `skipped` record, synced) are written first, then
//! the marks (`schedules.json`). A crash between the two leaves records
//! newer than their mark: at start the newest run records are read back
//! ([`Timer::marks_at_start`]), so no occurrence fires twice, and none
//! that `catch_up` should run is lost.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use super::plan::{self, Action};
use super::Clock;
use crate::config::schedules::{Overlap, Schedule};
use crate::config::{Config, Program};
use crate::http::app::App;
use crate::invoke;
use crate::runner::RunError;
use crate::runs::callback;
use crate::state::delivery::Source;
use crate::state::record::{Origin, RunRecord, RunState, SkipReason};
use crate::state::schedules::{MarkFile, Marks};
use crate::state::store::{new_run_id, RunFilter};
use crate::state::time::Time;
use crate::state::State;

/// Start the timer thread of `app`'s schedules.
///
/// # Errors
/// The thread cannot be started.
pub fn start(app: &Arc<App>, clock: Clock) -> std::io::Result<()> {
    let mut timer = Timer::new(Arc::clone(app), clock);
    std::thread::Builder::new()
        .name("schedules".into())
        .spawn(move || {
            // A bug in one firing must not stop every schedule: log it and
            // go on from the state kept (marks, records).
            while catch_unwind(AssertUnwindSafe(|| timer.run())).is_err() {
                log::error!("the schedule timer panicked; starting it again in a second");
                std::thread::sleep(Duration::from_secs(1));
                timer.generation = 0;
            }
        })
        .map(drop)
}

/// The longest sleep: a clock stepped forward is noticed within this.
const MAX_SLEEP: Duration = Duration::from_secs(5);

/// How often a schedule with a queued occurrence looks whether its
/// running one has ended.
const QUEUE_POLL: Duration = Duration::from_millis(200);

/// How long before a firing the run log is synced ahead of it
/// ([`Timer::presync`]), so that the sync of the runs accepted ahead has
/// little else to flush.
const PRESYNC: [Duration; 1] = [Duration::from_secs(1)];

/// How long before their firing runs are accepted ahead
/// ([`Timer::accept_ahead`]): more than the write and sync of 1,000
/// records take under load (up to about 110 ms measured), and less than a
/// cancel looks for a run about to be queued (`Runner::cancel`, 0.5 s).
const AHEAD: Duration = Duration::from_millis(400);

/// A run to start at the end of this wake.
struct Pending {
    id: String,
    at: Timestamp,
    missed: u64,
    delay: Duration,
    job: crate::runner::Job,
}

/// The run of an occurrence accepted ahead of its firing
/// ([`Timer::accept_ahead`]), started at its firing
/// ([`Timer::start_ahead`]).
struct Claim {
    id: Arc<str>,
    at: Timestamp,
    /// The firing: the occurrence plus the schedule's jitter delay.
    fire: Timestamp,
    run: crate::runner::ahead::Ahead,
}

/// An occurrence waiting for its schedule's running run: recorded
/// `queued` as run `run` (`Runner::record_waiting`), so that after a crash
/// it is resumed like any queued run; `None` with a shared database (held
/// in memory only).
struct Waiting {
    at: Timestamp,
    run: Option<String>,
    /// The values it was accepted with (an edit applies from the next
    /// occurrence); with `run`, its record keeps them too.
    values: Vec<String>,
}

/// Run records read back at start for occurrences newer than their mark.
const RECENT_RECORDS: usize = 1_000;

/// One schedule as the timer keeps it: where it is in its program (no
/// copy of it, so that 10,000 idle schedules cost under 1 KiB each:
/// `bench/schedules.sh`).
struct Slot {
    program: Arc<Program>,
    /// Its function's index in `program.functions`, and its own index in
    /// that function's `schedules`.
    place: (usize, usize),
    /// The last occurrence handled.
    last: Timestamp,
    /// The last run started, while it may still run.
    running: Option<String>,
    /// An occurrence waiting for the running one (`overlap = "queue"`).
    waiting: Option<Waiting>,
    /// The next firing, as pushed on the heap.
    next: Option<Timestamp>,
}

impl Slot {
    /// The schedule, as the config this slot was taken from has it.
    fn sched(&self) -> &Schedule {
        &self.program.functions[self.place.0].schedules[self.place.1]
    }

    /// The name of its function.
    fn function(&self) -> &str {
        &self.program.functions[self.place.0].name
    }
}

/// The timer's state, owned by its thread.
pub struct Timer {
    app: Arc<App>,
    clock: Clock,
    marks: MarkFile,
    /// By schedule id; the id is shared with the heap and the status.
    slots: HashMap<Arc<str>, Slot>,
    heap: BinaryHeap<Reverse<(Timestamp, Arc<str>)>>,
    generation: u64,
    /// Runs to start at the end of this wake ([`Timer::start_pending`]).
    pending: Vec<Pending>,
    /// The firing the run log was last synced ahead of, and at how many
    /// of the [`PRESYNC`] leads.
    presynced: (Timestamp, usize),
    /// Runs accepted ahead, not yet started.
    ahead: Vec<Claim>,
    /// The firings on the heap up to this instant were looked at for
    /// accepting ahead; those left on it are started at their firing.
    ahead_upto: Timestamp,
}

impl Timer {
    /// A timer for `app`'s schedules.
    pub fn new(app: Arc<App>, clock: Clock) -> Timer {
        let cfg = app.config();
        let state = State::new(&cfg.server.state_dir, &cfg.server.shared_state_dir);
        let mut marks = state.schedule_marks();
        if let Some(db) = app.state.db() {
            marks = marks.in_cluster(Arc::clone(db), &cfg.server.instance);
        }
        Timer {
            app,
            clock,
            marks,
            slots: HashMap::new(),
            heap: BinaryHeap::new(),
            generation: 0,
            pending: Vec::new(),
            presynced: (Timestamp::MIN, 0),
            ahead: Vec::new(),
            ahead_upto: Timestamp::MIN,
        }
    }

    /// Fire schedules until trigd closes.
    pub fn run(&mut self) {
        let mut marks = self.marks_at_start();
        let mut was_off = false;
        while !self.app.closing.load(std::sync::atomic::Ordering::SeqCst) {
            if !self.app.config().server.fire_schedules {
                self.turn_off();
                was_off = true;
                self.app.schedules.wait(MAX_SLEEP);
                continue;
            }
            if std::mem::take(&mut was_off) {
                // Turned on again: from the marks kept, as at a restart,
                // so that what was due meanwhile goes by `catch_up` (the
                // marks read at start were used up by the first `sync`).
                marks = self.marks_at_start();
            }
            if self.app.generation() != self.generation {
                self.sync(&mut marks);
            }
            let now = (self.clock.now)();
            let started = self.start_ahead(now);
            // Occurrences that waited for a run now ended start first: each
            // is then its schedule's running run when the firings due now
            // are planned (`overlap`), as when the queue's look came before
            // them. Planned after them, a firing saw the ended run and
            // started beside the waiting one.
            let waited = self.start_waiting();
            if waited {
                self.start_pending();
            }
            let first = self.heap.peek().map(|Reverse((at, _))| *at);
            let t0 = std::time::Instant::now();
            let changed = started | waited | self.fire_due(now);
            let (planned, runs) = (t0.elapsed(), self.pending.len());
            // The records first, then the marks that name them.
            self.start_pending();
            if runs > 0 {
                log::debug!(
                    "schedules: woke {:?} after the first firing due, planned {runs} runs in {planned:?}, accepted and logged them in {:?}",
                    first.map(|f| now.duration_since(f)),
                    t0.elapsed() - planned
                );
            }
            if changed {
                self.save();
            }
            let now = (self.clock.now)();
            self.presync(now);
            self.accept_ahead(now);
            let now = (self.clock.now)();
            let sleep = self.sleep_for(now);
            self.app.schedules.wait(sleep);
        }
    }

    /// `schedules = "off"`: another instance fires them. Drop every
    /// schedule here (its marks stay in the mark file); taken up anew from
    /// them when turned on.
    fn turn_off(&mut self) {
        for (id, slot) in std::mem::take(&mut self.slots) {
            self.drop_waiting(&id, slot.waiting, "schedules were turned off here");
        }
        self.withdraw(|_| true, "schedules were turned off here");
        self.heap.clear();
        self.generation = 0;
    }

    /// The marks kept, each moved up to the newest occurrence recorded in
    /// the newest run records.
    fn marks_at_start(&self) -> Marks {
        let mut marks = self.marks.load();
        let recent = RunFilter {
            limit: RECENT_RECORDS,
            ..RunFilter::default()
        };
        for rec in self.app.store.list(&recent).runs {
            if let (Origin::Schedule(id), Some(at)) = (&rec.by, rec.scheduled_at) {
                let mark = marks.entry(id.clone()).or_insert(at);
                *mark = (*mark).max(at);
            }
        }
        marks
    }

    /// Take the current config's schedules: a new one starts from now, a
    /// changed one from now or its last occurrence, whichever is later (an
    /// edit applies to the next occurrence and never fires one twice); a
    /// removed one stops.
    fn sync(&mut self, marks: &mut Marks) {
        let cfg = self.app.config();
        self.generation = self.app.generation();
        let now = (self.clock.now)();
        let mut slots = HashMap::new();
        // Schedules whose runs accepted ahead still stand: the same times,
        // still active (an edit of values applies from the next one).
        let mut standing = std::collections::HashSet::new();
        for (id, program, place) in placed(&cfg) {
            let sched = &program.functions[place.0].schedules[place.1];
            let old = self.slots.remove(id.as_str());
            if sched.active && old.as_ref().is_some_and(|o| same_times(o.sched(), sched)) {
                standing.insert(id.clone());
            }
            let kept = marks.remove(&id).map(Time::timestamp);
            let last = match (&old, kept) {
                (Some(o), _) if same_times(o.sched(), sched) => o.last,
                (Some(o), _) => o.last.max(now),
                (None, Some(k)) => k,
                (None, None) => now,
            };
            let (running, waiting) = old.map_or((None, None), |o| (o.running, o.waiting));
            let slot = Slot {
                program: Arc::clone(program),
                place,
                last,
                running,
                waiting,
                next: None,
            };
            slots.insert(Arc::from(id), slot);
        }
        for (id, old) in std::mem::replace(&mut self.slots, slots) {
            self.drop_waiting(&id, old.waiting, "its schedule was removed");
        }
        let why = "its schedule was removed, changed or made inactive";
        self.withdraw(|c| !standing.contains(&*c.id), why);
        lock(&self.app.schedules.status).retain(|id, _| self.slots.contains_key(id));
        self.heap.clear();
        // A run accepted ahead stands for its schedule's next firing.
        let claimed: HashMap<Arc<str>, Timestamp> = self
            .ahead
            .iter()
            .map(|c| (Arc::clone(&c.id), c.fire))
            .collect();
        let ids: Vec<Arc<str>> = self.slots.keys().cloned().collect();
        for id in ids {
            match (claimed.get(&id), self.slots.get_mut(&id)) {
                (Some(fire), Some(slot)) => slot.next = Some(*fire),
                _ => self.push_next(&id),
            }
        }
        self.save();
        // The config just loaded left its parse trees freed in the
        // allocator: give them back (measured with 10,000 schedules in a
        // debug build: 0.3 MB).
        crate::sys::trim_heap();
    }

    /// Push the next firing of schedule `id` on the heap.
    fn push_next(&mut self, id: &Arc<str>) {
        let Some(slot) = self.slots.get_mut(id) else {
            return;
        };
        let sched = slot.sched();
        let delay = SignedDuration::try_from(sched.delay(id)).unwrap_or_default();
        let next = sched
            .cron
            .next_after(slot.last, &sched.zone)
            .and_then(|o| o.checked_add(delay).ok());
        slot.next = next;
        if let Some(at) = next {
            self.heap.push(Reverse((at, Arc::clone(id))));
        }
    }

    /// Handle every schedule whose firing has come; whether any was.
    fn fire_due(&mut self, now: Timestamp) -> bool {
        let mut any = false;
        while let Some(Reverse((at, id))) = self.heap.peek().cloned() {
            if at > now {
                break;
            }
            self.heap.pop();
            let Some(last) = self
                .slots
                .get(&id)
                .filter(|s| s.next == Some(at))
                .map(|s| s.last)
            else {
                continue;
            };
            self.fire(&id, now);
            any = true;
            if self.slots.get(&id).is_some_and(|s| s.last > last) {
                self.push_next(&id);
            } else if let Some(slot) = self.slots.get_mut(&id) {
                // Nothing was due after all: look again in a second
                // rather than at the same instant forever.
                let again = now.checked_add(SignedDuration::from_secs(1)).unwrap_or(now);
                slot.next = Some(again);
                self.heap.push(Reverse((again, id)));
            }
        }
        // Schedules whose next firing the clock jumped past without a heap
        // entry coming due (set back, then forward) are found by `plan`.
        any
    }

    /// Carry out the actions for schedule `id` at `now`.
    fn fire(&mut self, id: &str, now: Timestamp) {
        let Some(slot) = self.slots.get(id) else {
            return;
        };
        let delay = slot.sched().delay(id);
        let Some((actions, newest)) = plan::plan(slot.sched(), delay, slot.last, now) else {
            return;
        };
        // The runs of one catch-up start together: `overlap` is about a
        // run from before them, not about each other.
        let mut started: Option<String> = None;
        for action in actions {
            match action {
                Action::Run { at, missed } if started.is_some() => self.start(id, at, missed),
                Action::Run { at, missed } => {
                    let before = self.slots.get(id).and_then(|s| s.running.clone());
                    self.run_or_overlap(id, at, missed);
                    let after = self.slots.get(id).and_then(|s| s.running.clone());
                    started = after.filter(|a| before.as_ref() != Some(a));
                }
                Action::Skip { at, before, reason } => self.skip(id, at, before, reason, None),
            }
        }
        if let Some(slot) = self.slots.get_mut(id) {
            slot.last = slot.last.max(newest);
        }
    }

    /// Start occurrence `at` unless the last run still runs, then as
    /// `overlap` says.
    fn run_or_overlap(&mut self, id: &str, at: Timestamp, missed: u64) {
        let Some(slot) = self.slots.get(id) else {
            return;
        };
        let running = slot.running.clone().filter(|r| self.still_runs(r));
        if let Some(run) = running {
            match slot.sched().overlap {
                Overlap::Skip => {
                    let why = format!("run {run} of this schedule was still running");
                    return self.skip(id, at, 0, SkipReason::Overlap, Some(why));
                }
                Overlap::Queue if slot.waiting.is_none() => return self.hold(id, at, &run),
                Overlap::Queue => {
                    let why = format!(
                        "run {run} was still running and an occurrence already waited for it"
                    );
                    return self.skip(id, at, 0, SkipReason::Overlap, Some(why));
                }
                Overlap::Replace => {
                    log::info!("schedule {id}: cancelling run {run} for the occurrence of {at}");
                    self.app.runner.cancel(&run);
                }
            }
        }
        self.start(id, at, missed);
    }

    /// Whether run `id` has not ended: from the run index, as every
    /// schedule with a run before asks at each firing (reading 1,000
    /// records back from the log took 4 to 30 ms of a wake under load).
    fn still_runs(&self, run: &str) -> bool {
        self.app.store.has_ended(run) == Some(false)
    }

    /// Start the run of occurrence `at`: the function's run with the
    /// schedule's values, its callback, timeout and concurrency.
    fn start(&mut self, id: &str, at: Timestamp, missed: u64) {
        if !self.claim(id, at) {
            return;
        }
        if let Some(job) = self.job(id, at, missed) {
            self.push_pending(id, at, missed, job);
        }
    }

    /// Whether occurrence `at` of schedule `id` is this instance's to
    /// handle (always, but with a shared database).
    fn claim(&self, id: &str, at: Timestamp) -> bool {
        let mine = self.marks.claim(id, Time::from(at));
        if !mine {
            log::debug!("schedule {id}: the occurrence of {at} is another instance's");
        }
        mine
    }

    /// The run of occurrence `at` of schedule `id`, as the current config
    /// says.
    fn job(&self, id: &str, at: Timestamp, missed: u64) -> Option<crate::runner::Job> {
        let slot = self.slots.get(id)?;
        let cfg = self.app.config();
        let function = &slot.program.functions[slot.place.0];
        let mut job = invoke::job(
            &cfg,
            &slot.program,
            function,
            slot.sched().values.clone(),
            &BTreeMap::new(),
            Origin::Schedule(id.to_string()),
        );
        job.occurrence = Some((Time::from(at), (missed > 0).then_some(missed)));
        let fixed = [(function.callback.as_ref(), Source::Function)];
        job.callbacks =
            callback::targets(&cfg.server.callbacks, &fixed, None, false).unwrap_or_default();
        Some(job)
    }

    /// Start `job`, the run of occurrence `at`, at the end of this wake.
    fn push_pending(&mut self, id: &str, at: Timestamp, missed: u64, job: crate::runner::Job) {
        let Some(slot) = self.slots.get(id) else {
            return;
        };
        let delay = slot.sched().delay(id);
        self.pending.push(Pending {
            id: id.to_string(),
            at,
            missed,
            delay,
            job,
        });
    }

    /// Start the runs of this wake together: their records share one
    /// durable write (`Runner::start_async_all`).
    fn start_pending(&mut self) {
        let pending = std::mem::take(&mut self.pending);
        if pending.is_empty() {
            return;
        }
        let (jobs, rest): (Vec<_>, Vec<_>) = pending
            .into_iter()
            .map(|p| (p.job, (p.id, p.at, p.missed, p.delay)))
            .unzip();
        let accepted = self.app.runner.start_async_all(jobs);
        let now = (self.clock.now)();
        for ((id, at, missed, delay), accepted) in rest.into_iter().zip(accepted) {
            let late = now.duration_since(at).unsigned_abs().saturating_sub(delay);
            self.started(&id, (at, missed, late), accepted, None);
        }
    }

    /// What became of the run of occurrence `at`, accepted `late`; `claim`:
    /// the run accepted ahead for it, whose record a refusal ends.
    fn started(
        &mut self,
        id: &str,
        (at, missed, late): (Timestamp, u64, Duration),
        accepted: Result<String, RunError>,
        claim: Option<String>,
    ) {
        match accepted {
            Ok(run) => {
                log::info!("schedule {id}: run {run} for the occurrence of {at}");
                self.app.runner.metrics.schedule_fired("started", late);
                self.note(id, at, &format!("started {run}"));
                if let Some(slot) = self.slots.get_mut(id) {
                    slot.running = Some(run);
                }
            }
            Err(e) => {
                let why = invoke::run_error(e).message().into_owned();
                let skip = (at, missed, SkipReason::NotStarted, Some(why));
                self.skip_as(id, skip, claim);
            }
        }
    }

    /// Record occurrence `at` (and `before` earlier ones) skipped.
    fn skip(
        &mut self,
        id: &str,
        at: Timestamp,
        before: u64,
        reason: SkipReason,
        why: Option<String>,
    ) {
        self.skip_as(id, (at, before, reason, why), None);
    }

    /// [`Timer::skip`], as the record of run `run` when given (a run
    /// accepted ahead that could not start).
    fn skip_as(
        &mut self,
        id: &str,
        (at, before, reason, why): (Timestamp, u64, SkipReason, Option<String>),
        run: Option<String>,
    ) {
        let Some(slot) = self.slots.get(id) else {
            return;
        };
        if run.is_none() && !self.marks.claim(id, Time::from(at)) {
            log::debug!("schedule {id}: the occurrence of {at} is another instance's");
            return;
        }
        let cfg = self.app.config();
        let now = Time::now();
        let rec = RunRecord {
            r#async: true,
            scheduled_at: Some(Time::from(at)),
            skipped: Some(reason),
            missed: (before > 0).then_some(before),
            created_at: now,
            finished_at: Some(now),
            error: why,
            ..RunRecord::new(
                run.unwrap_or_else(|| new_run_id(&cfg.server.instance)),
                RunState::Skipped,
                slot.program.owner(),
                slot.function().to_string(),
                Origin::Schedule(id.to_string()),
            )
        };
        if let Err(e) = self.app.store.append(&rec, true) {
            log::error!("schedule {id}: cannot record the skipped occurrence of {at}: {e}");
        }
        log::info!(
            "schedule {id}: occurrence of {at} skipped ({})",
            reason.name()
        );
        self.app
            .runner
            .metrics
            .schedule_fired(reason.name(), Duration::ZERO);
        self.note(id, at, &format!("skipped: {}", reason.name()));
    }

    /// Let occurrence `at` wait for run `running` (`overlap = "queue"`):
    /// recorded `queued` now, started when `running` ends.
    fn hold(&mut self, id: &str, at: Timestamp, running: &str) {
        if !self.claim(id, at) {
            return;
        }
        let Some(job) = self.job(id, at, 0) else {
            return;
        };
        match self.app.runner.record_waiting(&job) {
            Ok(run) => {
                let values = job.values;
                let what = run.as_deref().map(|r| format!(" as run {r}"));
                let what = what.unwrap_or_default();
                log::info!("schedule {id}: the occurrence of {at} waits{what} for run {running}");
                self.note(id, at, &format!("waiting{what} for {running}"));
                if let Some(slot) = self.slots.get_mut(id) {
                    slot.waiting = Some(Waiting { at, run, values });
                }
            }
            Err(e) => {
                let why = invoke::run_error(RunError::Storage(e))
                    .message()
                    .into_owned();
                self.skip(id, at, 0, SkipReason::NotStarted, Some(why));
            }
        }
    }

    /// Start the occurrences that waited for a run now ended; whether any.
    fn start_waiting(&mut self) -> bool {
        let ready: Vec<Arc<str>> = self
            .slots
            .iter()
            .filter(|(_, s)| s.waiting.is_some())
            .filter(|(_, s)| !s.running.as_deref().is_some_and(|r| self.still_runs(r)))
            .map(|(id, _)| id.clone())
            .collect();
        for id in &ready {
            let Some(w) = self.slots.get_mut(id).and_then(|s| s.waiting.take()) else {
                continue;
            };
            if let Some(run) = w.run {
                self.start_recorded(id, w.at, run);
                continue;
            }
            let Some(mut job) = self.job(id, w.at, 0) else {
                continue;
            };
            // Accepted with these: an edit applies from the next occurrence.
            job.values = w.values;
            self.push_pending(id, w.at, 0, job);
        }
        !ready.is_empty()
    }

    /// Start run `run` of occurrence `at`, recorded `queued` when the
    /// occurrence came to wait: from that record, as a queued run is taken
    /// up at start (`Runner::resume`), so that it keeps the values it was
    /// accepted with and its `CreatedAt` (a new record from the edited
    /// config rewrote both); the function runs as configured now.
    fn start_recorded(&mut self, id: &str, at: Timestamp, run: String) {
        // Its record may have been ended meanwhile (cancelled).
        if !self.still_runs(&run) {
            log::info!("schedule {id}: run {run}, which waited, has ended; not started");
            return;
        }
        let Some(delay) = self.slots.get(id).map(|s| s.sched().delay(id)) else {
            return;
        };
        self.app
            .runner
            .resume(&self.app.config(), vec![run.clone()]);
        let now = (self.clock.now)();
        let late = now.duration_since(at).unsigned_abs().saturating_sub(delay);
        self.started(id, (at, 0, late), Ok(run), None);
    }

    /// End the record of an occurrence that waited for a schedule no
    /// longer fired here: `cancelled`, saying `why`.
    fn drop_waiting(&self, id: &str, waiting: Option<Waiting>, why: &str) {
        let Some(run) = waiting.and_then(|w| w.run) else {
            return;
        };
        let Some(mut rec) = self.app.store.get(&run) else {
            return;
        };
        if rec.state != RunState::Queued {
            return;
        }
        rec.state = RunState::Cancelled;
        rec.finished_at = Some(Time::now());
        rec.error = Some(format!("it waited for a run of schedule {id}, and {why}"));
        if let Err(e) = self.app.store.append(&rec, true) {
            log::error!("schedule {id}: cannot record run {run} cancelled: {e}");
        }
    }

    /// Accept ahead the runs of the firings due within [`AHEAD`]: plan
    /// them, make their jobs and write their records (`queued` until
    /// their firing, one write and one sync for all), so that at the
    /// firing only their hand-off to the runner is left
    /// ([`Timer::start_ahead`]). Only a plain on-time run of a schedule
    /// with no run of its own running or waiting is accepted ahead; every
    /// other case (catch-up, overlap, inactive) stays on the heap and is
    /// handled at its firing. With a shared database nothing is: an
    /// occurrence's lease is taken at its firing.
    fn accept_ahead(&mut self, now: Timestamp) {
        let upto = now.checked_add(AHEAD).unwrap_or(now);
        if upto <= self.ahead_upto {
            return;
        }
        if self.app.state.db().is_some() {
            // Looked at: each is started at its firing.
            self.ahead_upto = upto;
            return;
        }
        let t0 = std::time::Instant::now();
        let mut chosen = Vec::new();
        let mut later = Vec::new();
        while let Some(Reverse((fire, id))) = self.heap.peek().cloned() {
            if fire > upto {
                break;
            }
            self.heap.pop();
            match self.plan_ahead(&id, fire) {
                Ahead::Stale => {}
                Ahead::AtFiring => later.push(Reverse((fire, id))),
                Ahead::Run(at, job) => chosen.push((id, at, fire, *job)),
            }
        }
        self.heap.extend(later);
        self.ahead_upto = upto;
        if chosen.is_empty() {
            return;
        }
        let planned = t0.elapsed();
        let (jobs, claims): (Vec<_>, Vec<_>) = chosen
            .into_iter()
            .map(|(id, at, fire, job)| ((job, Time::from(fire)), (id, at, fire)))
            .unzip();
        let n = jobs.len();
        match self.app.runner.accept_ahead(jobs) {
            Some(Ok(runs)) => {
                for ((id, at, fire), run) in claims.into_iter().zip(runs) {
                    self.ahead.push(Claim { id, at, fire, run });
                }
                log::debug!(
                    "schedules: accepted {n} runs ahead (planned in {planned:?}, recorded in {:?})",
                    t0.elapsed() - planned
                );
            }
            failed => {
                if let Some(Err(e)) = failed {
                    log::warn!("cannot accept {n} scheduled runs ahead (started at their firing instead): {e}");
                }
                for (id, _, fire) in claims {
                    self.heap.push(Reverse((fire, id)));
                }
            }
        }
    }

    /// Whether the heap's firing `fire` of schedule `id` can be accepted
    /// ahead, and its occurrence and job when it can.
    fn plan_ahead(&self, id: &Arc<str>, fire: Timestamp) -> Ahead {
        let Some(slot) = self.slots.get(id).filter(|s| s.next == Some(fire)) else {
            return Ahead::Stale;
        };
        let busy =
            slot.waiting.is_some() || slot.running.as_deref().is_some_and(|r| self.still_runs(r));
        let delay = slot.sched().delay(id);
        let planned = plan::plan(slot.sched(), delay, slot.last, fire);
        match planned
            .as_ref()
            .map(|(actions, newest)| (actions.as_slice(), *newest))
        {
            Some(([Action::Run { at, missed: 0 }], newest)) if !busy && *at == newest => {
                match self.job(id, *at, 0) {
                    Some(job) => Ahead::Run(*at, Box::new(job)),
                    None => Ahead::AtFiring,
                }
            }
            _ => Ahead::AtFiring,
        }
    }

    /// Start the runs accepted ahead whose firing has come; whether any.
    fn start_ahead(&mut self, now: Timestamp) -> bool {
        let (due, rest): (Vec<Claim>, Vec<Claim>) = std::mem::take(&mut self.ahead)
            .into_iter()
            .partition(|c| c.fire <= now);
        self.ahead = rest;
        if due.is_empty() {
            return false;
        }
        let (runs, due): (Vec<_>, Vec<_>) = due
            .into_iter()
            .map(|c| {
                let run = c.run.run().to_string();
                (c.run, (c.id, c.at, c.fire, run))
            })
            .unzip();
        let t0 = std::time::Instant::now();
        let accepted = self.app.runner.start_ahead(runs);
        let now = (self.clock.now)();
        let late = due
            .iter()
            .map(|d| now.duration_since(d.2).unsigned_abs())
            .max();
        log::debug!(
            "schedules: started {} runs accepted ahead in {:?}, {late:?} after their firing",
            due.len(),
            t0.elapsed()
        );
        for ((id, at, fire, run), accepted) in due.into_iter().zip(accepted) {
            let late = now.duration_since(fire).unsigned_abs();
            self.started(&id, (at, 0, late), accepted, Some(run));
            if let Some(slot) = self.slots.get_mut(&id) {
                slot.last = slot.last.max(at);
            }
            self.push_next(&id);
        }
        true
    }

    /// End the runs accepted ahead that `gone` picks (`why`: what became
    /// of their schedule): their firing does not come.
    fn withdraw(&mut self, gone: impl Fn(&Claim) -> bool, why: &str) {
        let (out, keep): (Vec<Claim>, Vec<Claim>) =
            std::mem::take(&mut self.ahead).into_iter().partition(gone);
        self.ahead = keep;
        for c in out {
            log::info!(
                "schedule {}: run {} accepted ahead for the occurrence of {} withdrawn: {why}",
                c.id,
                c.run.run(),
                c.at
            );
            let why = format!(
                "accepted ahead for the occurrence of {}, withdrawn before it: {why}",
                c.at
            );
            self.app.runner.withdraw(c.run, &why);
        }
    }

    /// Sync the run log ahead of the next firing, at each of the
    /// [`PRESYNC`] leads before it that has come.
    ///
    /// Why: sync runs write their records without a sync (about 1.6 MB/s
    /// at 2,000 runs/s), and the kernel writes them back only every few
    /// seconds, so the one sync of a wake's records also had to flush
    /// seconds of other records: 30 to 60 ms of the 1,000 firings'
    /// lateness (`bench/schedules.sh`). Synced just before, it flushes
    /// the wake's records and little more.
    fn presync(&mut self, now: Timestamp) {
        let Some(Reverse((next, _))) = self.heap.peek() else {
            return;
        };
        let until = Duration::try_from(next.duration_since(now)).unwrap_or(Duration::ZERO);
        let due = PRESYNC.iter().filter(|lead| until <= **lead).count();
        if due == 0 || self.presynced >= (*next, due) {
            return;
        }
        self.presynced = (*next, due);
        let t0 = std::time::Instant::now();
        let synced = self.app.store.sync();
        log::debug!(
            "run log synced {:?} ahead of a firing in {until:?}",
            t0.elapsed()
        );
        if let Err(e) = synced {
            log::warn!("cannot sync the run log ahead of the next schedule firing: {e}");
        }
    }

    /// How long to sleep: until the first firing or the next lead before
    /// it ([`Timer::presync`]), shorter while an occurrence waits, never
    /// longer than [`MAX_SLEEP`].
    fn sleep_for(&self, now: Timestamp) -> Duration {
        let mut sleep = MAX_SLEEP;
        let until = |at: Timestamp| Duration::try_from(at.duration_since(now)).unwrap_or_default();
        if let Some(fire) = self.ahead.iter().map(|c| c.fire).min() {
            sleep = sleep.min(until(fire));
        }
        if let Some(Reverse((at, _))) = self.heap.peek() {
            let until = until(*at);
            sleep = sleep.min(until);
            if *at > self.ahead_upto {
                sleep = sleep.min(until.saturating_sub(AHEAD));
            }
            let done = if self.presynced.0 == *at {
                self.presynced.1
            } else {
                0
            };
            if let Some(lead) = PRESYNC.get(done).filter(|lead| until > **lead) {
                sleep = sleep.min(until - *lead);
            }
        }
        if self.slots.values().any(|s| s.waiting.is_some()) {
            sleep = sleep.min(QUEUE_POLL);
        }
        sleep
    }

    /// Keep every schedule's last occurrence, durably.
    fn save(&self) {
        let marks: Marks = self
            .slots
            .iter()
            .map(|(id, s)| (id.to_string(), Time::from(s.last)))
            .collect();
        if let Err(e) = self.marks.write(&marks) {
            log::error!("cannot write the schedule marks: {e}");
        }
    }

    /// Note what became of occurrence `at` for the schedules page.
    fn note(&self, id: &str, at: Timestamp, outcome: &str) {
        let Some((key, _)) = self.slots.get_key_value(id) else {
            return;
        };
        let mut status = lock(&self.app.schedules.status);
        let s = status.entry(Arc::clone(key)).or_default();
        s.last = Some(at);
        s.outcome = outcome.to_string();
    }
}

/// What [`Timer::plan_ahead`] makes of a firing on the heap.
enum Ahead {
    /// The schedule changed since it was pushed: dropped.
    Stale,
    /// Handled at its firing.
    AtFiring,
    /// Its occurrence and run, to accept ahead.
    Run(Timestamp, Box<crate::runner::Job>),
}

/// Whether two versions of a schedule name the same times.
fn same_times(a: &Schedule, b: &Schedule) -> bool {
    a.expression == b.expression && a.zone_name == b.zone_name && a.jitter == b.jitter
}

/// Every schedule of `cfg` with its id and its place in its program
/// ([`Slot::place`]).
fn placed(cfg: &Config) -> impl Iterator<Item = (String, &Arc<Program>, (usize, usize))> {
    cfg.programs.values().flat_map(|p| {
        p.functions.iter().enumerate().flat_map(move |(fi, f)| {
            f.schedules
                .iter()
                .enumerate()
                .map(move |(si, s)| (format!("{}/{}/{}", p.id, f.name, s.name), p, (fi, si)))
        })
    })
}

/// Every schedule of `cfg` with its id (`<program>/<function>/<name>`).
pub fn schedules(cfg: &Config) -> impl Iterator<Item = (String, &Arc<Program>, &str, &Schedule)> {
    cfg.programs.values().flat_map(|p| {
        p.functions.iter().flat_map(move |f| {
            f.schedules.iter().map(move |s| {
                (
                    format!("{}/{}/{}", p.id, f.name, s.name),
                    p,
                    f.name.as_str(),
                    s,
                )
            })
        })
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
