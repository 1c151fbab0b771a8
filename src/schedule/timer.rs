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

/// A run to start at the end of this wake.
struct Pending {
    id: String,
    at: Timestamp,
    missed: u64,
    delay: Duration,
    job: crate::runner::Job,
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
    waiting: Option<Timestamp>,
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
        }
    }

    /// Fire schedules until trigd closes.
    pub fn run(&mut self) {
        let mut marks = self.marks_at_start();
        while !self.app.closing.load(std::sync::atomic::Ordering::SeqCst) {
            if !self.app.config().server.fire_schedules {
                // `schedules = "off"`: another instance fires them. Taken
                // up anew (from the marks kept) when turned on.
                self.slots.clear();
                self.heap.clear();
                self.generation = 0;
                self.app.schedules.wait(MAX_SLEEP);
                continue;
            }
            if self.app.generation() != self.generation {
                self.sync(&mut marks);
            }
            let now = (self.clock.now)();
            let changed = self.fire_due(now) | self.start_waiting();
            // The records first, then the marks that name them.
            self.start_pending();
            if changed {
                self.save();
            }
            let sleep = self.sleep_for((self.clock.now)());
            self.app.schedules.wait(sleep);
        }
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
        for (id, program, place) in placed(&cfg) {
            let sched = &program.functions[place.0].schedules[place.1];
            let old = self.slots.remove(id.as_str());
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
        self.slots = slots;
        lock(&self.app.schedules.status).retain(|id, _| self.slots.contains_key(id));
        self.heap.clear();
        let ids: Vec<Arc<str>> = self.slots.keys().cloned().collect();
        for id in ids {
            self.push_next(&id);
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
                Overlap::Queue if slot.waiting.is_none() => {
                    if let Some(slot) = self.slots.get_mut(id) {
                        slot.waiting = Some(at);
                    }
                    return;
                }
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

    /// Whether run `id` has not ended.
    fn still_runs(&self, run: &str) -> bool {
        self.app
            .store
            .get(run)
            .is_some_and(|r| !r.state.is_terminal())
    }

    /// Start the run of occurrence `at`: the function's run with the
    /// schedule's values, its callback, timeout and concurrency.
    fn start(&mut self, id: &str, at: Timestamp, missed: u64) {
        let Some(slot) = self.slots.get(id) else {
            return;
        };
        if !self.marks.claim(id, Time::from(at)) {
            log::debug!("schedule {id}: the occurrence of {at} is another instance's");
            return;
        }
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
            self.started(&id, at, missed, late, accepted);
        }
    }

    /// What became of the run of occurrence `at`, accepted `late`.
    fn started(
        &mut self,
        id: &str,
        at: Timestamp,
        missed: u64,
        late: Duration,
        accepted: Result<String, RunError>,
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
                self.skip(id, at, missed, SkipReason::NotStarted, Some(why));
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
        let Some(slot) = self.slots.get(id) else {
            return;
        };
        if !self.marks.claim(id, Time::from(at)) {
            log::debug!("schedule {id}: the occurrence of {at} is another instance's");
            return;
        }
        let cfg = self.app.config();
        let now = Time::now();
        let rec = RunRecord {
            run: new_run_id(&cfg.server.instance),
            state: RunState::Skipped,
            owner: slot.program.owner(),
            function: slot.function().to_string(),
            r#async: true,
            by: Origin::Schedule(id.to_string()),
            tool: None,
            scheduled_at: Some(Time::from(at)),
            skipped: Some(reason),
            missed: (before > 0).then_some(before),
            created_at: now,
            started_at: None,
            finished_at: Some(now),
            steps: Vec::new(),
            result: None,
            error: why,
            stdout: None,
            input: None,
            callbacks: Vec::new(),
            rerun_of: None,
            reruns: Vec::new(),
            attempts: Vec::new(),
            retry_at: None,
            group: None,
            superseded_by: None,
            rerun_input: None,
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

    /// Start the occurrences that waited for a run now ended; whether any.
    fn start_waiting(&mut self) -> bool {
        let ready: Vec<(Arc<str>, Timestamp)> = self
            .slots
            .iter()
            .filter_map(|(id, s)| Some((id.clone(), s.waiting?, s.running.clone())))
            .filter(|(_, _, r)| !r.as_deref().is_some_and(|r| self.still_runs(r)))
            .map(|(id, at, _)| (id, at))
            .collect();
        for (id, at) in &ready {
            if let Some(slot) = self.slots.get_mut(id) {
                slot.waiting = None;
            }
            self.start(id, *at, 0);
        }
        !ready.is_empty()
    }

    /// How long to sleep: until the first firing, shorter while an
    /// occurrence waits, never longer than [`MAX_SLEEP`].
    fn sleep_for(&self, now: Timestamp) -> Duration {
        let mut sleep = MAX_SLEEP;
        if let Some(Reverse((at, _))) = self.heap.peek() {
            let until = at.duration_since(now);
            sleep = sleep.min(Duration::try_from(until).unwrap_or(Duration::ZERO));
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
