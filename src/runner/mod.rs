//! Where a run starts: run slots, the wait queue, and the run records
//! written along the way.
//!
//! `max_concurrent_runs` slots are shared by sync and async runs. A run that
//! finds no free slot (or its function at its `concurrency`) waits in one
//! FIFO queue of at most `max_queued_runs` places, sync and async together,
//! so neither kind can overtake the other. A sync run waits and executes on
//! the caller's (HTTP worker's) thread (a streamed one executes on a thread
//! of its own): while it waits it holds that thread and a [`Ticket`], no
//! slot, is recorded `queued` under its id, and gives up after
//! `queue_timeout`. An async run is
//! first recorded durably, with its input, then started on a detached thread
//! or queued: in memory a queued run is only its id and shared pointers
//! ([`Queued`]); its values are read back from the run log when it starts.
//!
//! A run that ends hands its slot straight to the first runnable waiter (a
//! sync ticket is woken, an async run continues on the same thread), so no
//! dispatcher thread is needed. A [`SlotGuard`] frees or hands on the slot
//! on every path, a panic included.
//!
//! [`Runner::cancel`] takes a waiting run off the queue (it holds no slot,
//! so nothing is freed) and records it `cancelled` (a waiting sync caller
//! is woken and answered `run_cancelled`); a running one is stopped through
//! its [`RunHandle`]. Every executed run keeps its output in the state dir
//! (`output.rs`), whether it started at once, from the queue or after a
//! restart.
//!
//! The queue's bookkeeping (slots, waiters, drain rate) lives in
//! [`queue`]; the execution of one function (processes, timeouts, output)
//! in [`step`].

pub mod ahead;
pub mod cluster;
pub mod handle;
pub mod orphans;
mod queue;
pub mod step;

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::config::group::Policy;
use crate::config::{Config, Program};
use crate::http::metrics::Metrics;
use crate::runs::callback::{Chain, Service as Callbacks};
use crate::state::delivery::{waiting, DeliveryState, Target};
use crate::state::output::{Held, Inline, OutputFile};
use crate::state::record::{
    AttemptReport, Origin, Owner, RunInput, RunRecord, RunState, SkipReason, ToolEnv,
};
use crate::state::store::{new_run_id, RunStore};
use crate::state::time::Time;
use handle::{RunHandle, Stream};
use queue::{Drain, Granted, GroupClaim, Kind, Queued, Room, SlotKey, Slots, Ticket, Waiter};
use step::{Outcome, StepError};

/// Everything needed to execute one run, owned, so that a detached thread can
/// take it. `cfg` is the snapshot the run was accepted under: a reload does
/// not change a run in progress.
pub struct Job {
    /// The config snapshot.
    pub cfg: Arc<Config>,
    /// The program.
    pub program: Arc<Program>,
    /// Name of the function (it exists in `program`).
    pub function: String,
    /// Values bound by position to the function's inputs.
    pub values: Vec<String>,
    /// Tool environment variables (empty for `/api` runs).
    pub vars: BTreeMap<String, String>,
    /// Who started it, for the record; never a secret.
    pub by: Origin,
    /// Where to send its completion callbacks.
    pub callbacks: Vec<Target>,
    /// The run id to use (chosen ahead by an idempotency key); `None`: a
    /// new one.
    pub id: Option<String>,
    /// The tool environment it was started through.
    pub tool: Option<ToolEnv>,
    /// The raw request body in a temporary file, kept until the job is
    /// dropped (after the run), when the trigger reads it as a file.
    pub body_file: Option<Arc<crate::state::bodies::BodyFile>>,
    /// Give `body_file` to every step on stdin (else stdin is empty).
    pub stdin_body: bool,
    /// Temporary files the run reads (a hook's `pass-file-to-command`),
    /// removed when the job is dropped, after the run.
    pub files: Vec<crate::state::bodies::BodyFile>,
    /// The occurrence a schedule's run is, and the missed ones it stands
    /// for (`RunRecord::scheduled_at`, `RunRecord::missed`).
    pub occurrence: Option<(Time, Option<u64>)>,
    /// The run this one re-runs (`RunRecord::rerun_of`).
    pub rerun_of: Option<String>,
    /// The concurrency group of the trigger it came through, in place of
    /// the function's.
    pub group: Option<crate::config::group::Group>,
}

/// What an async run `job` in `group` starts with, kept in its record.
fn run_input(job: &Job, group: Option<&GroupClaim>) -> RunInput {
    RunInput {
        values: job.values.clone(),
        vars: job.vars.clone(),
        body: job.body_file.is_some() || !job.files.is_empty(),
        // Its group as decided now, for a restart.
        group_limit: group.map(|g| g.limit),
        group_policy: group.map(|g| g.policy.name().to_string()),
    }
}

/// A copy of `e` for each of the runs one failed write or sync concerns
/// (the OS error kept: `disk_full` is told from it).
fn copy_error(e: &io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::new(e.kind(), e.to_string()),
    }
}

/// An async run recorded but not yet durable nor started
/// ([`Runner::start_async_all`]).
struct Staged {
    job: Job,
    rec: RunRecord,
    key: SlotKey,
    n: usize,
    group: Option<GroupClaim>,
    held: usize,
    in_memory: bool,
    place: Place,
}

/// Why [`Runner::reserve_in`] gave an async run neither a slot nor a
/// queue place: shutting down, or the queue (`max_queued_runs`) or the
/// memory budget (`max_waiting_bytes`) full, with the runs waiting.
enum Refusal {
    ShuttingDown,
    QueueFull(usize, usize),
    WaitingBytesFull(usize, usize),
}

/// Where an async run goes once recorded ([`Runner::reserve`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// A slot is taken for it.
    Slot,
    /// A queue place is promised to it.
    Queue,
    /// Its concurrency group is at its limit (`skip`): it ends `skipped`.
    Skip,
}

impl Job {
    fn slot_key(&self) -> SlotKey {
        (self.program.owner(), self.function.clone())
    }

    fn concurrency(&self) -> usize {
        concurrency(&self.program, &self.function)
    }

    /// The run's concurrency group (its trigger's, else its function's),
    /// its key rendered from the values.
    fn group(&self) -> Option<GroupClaim> {
        if let Some(g) = &self.group {
            return Some(claim(g, g.key_of(&self.values)));
        }
        group_claim(&self.program, &self.function, |g| g.key_of(&self.values))
    }

    /// Bytes of request data this job holds in memory while it waits:
    /// its values and variables (its body and parsed payload are gone).
    fn held_bytes(&self) -> usize {
        let values: usize = self.values.iter().map(String::len).sum();
        let vars: usize = self.vars.iter().map(|(k, v)| k.len() + v.len()).sum();
        values + vars
    }

    /// Whether a queued async run of this job is kept whole in memory
    /// (`Runner::unrecorded`): its temporary files live as long as the job,
    /// and without a run log there is nowhere else to keep it.
    fn kept_in_memory(&self, stored: bool) -> bool {
        !stored || self.body_file.is_some() || !self.files.is_empty()
    }

    /// Bytes a queued async run kept in memory holds: the job's values and
    /// variables, and the copy of them in its record's `Input`.
    fn kept_bytes(&self) -> usize {
        2 * self.held_bytes()
    }
}

/// The program of a run of `function` of `owner` under `cfg`: a program
/// file's, or a hooks-file hook's (its one function named like the hook).
/// `None` when it is gone.
pub fn program_of<'c>(cfg: &'c Config, owner: Owner, function: &str) -> Option<&'c Arc<Program>> {
    let program = match owner {
        Owner::Program(id) => cfg.program(id),
        Owner::Hook => cfg.hooks.program(function),
    };
    program.filter(|p| p.function(function).is_some())
}

/// The group of a run of `function` in `program` whose key `key` gives.
fn group_claim(
    program: &Program,
    function: &str,
    key: impl FnOnce(&crate::config::group::Group) -> String,
) -> Option<GroupClaim> {
    let g = program.function(function)?.concurrency_group.as_ref()?;
    Some(claim(g, key(g)))
}

/// Group `g`, its key rendered as `key`.
fn claim(g: &crate::config::group::Group, key: String) -> GroupClaim {
    GroupClaim {
        key,
        limit: g.limit,
        policy: g.policy,
    }
}

/// Queue `rec` of `program` again at start-up, making room in its group
/// as when it was accepted: a newer run of a key replaces the one waiting
/// before it, but not one of `retrying` (between two attempts, it held its
/// place in the group before the restart; it stays, in front). The room
/// made, and the run's id.
fn requeue(
    s: &mut Slots,
    cfg: &Arc<Config>,
    program: &Arc<Program>,
    rec: RunRecord,
    retrying: &std::collections::HashSet<String>,
) -> (Room, String) {
    let group = resumed_group(program, &rec);
    let mut room = s.make_room(group.as_ref(), &rec.run);
    let (kept, gone) = std::mem::take(&mut room.superseded)
        .into_iter()
        .partition::<Vec<_>, _>(|w| retrying.contains(w.run()));
    room.superseded = gone;
    for w in kept.into_iter().rev() {
        s.push_front(w);
    }
    s.push_back(Waiter::Async(Queued {
        concurrency: concurrency(program, &rec.function),
        key: (rec.owner, rec.function),
        run: rec.run.clone(),
        program: Arc::clone(program),
        cfg: Arc::clone(cfg),
        group,
        taken: None,
    }));
    (room, rec.run)
}

/// The group of `rec`, queued before a restart: as it was recorded (key,
/// and limit and policy in its input), else its function's (the key
/// rendered from its values when the group is new).
fn resumed_group(program: &Program, rec: &RunRecord) -> Option<GroupClaim> {
    let input = rec.input.as_ref();
    let limit = input.and_then(|i| i.group_limit);
    let policy = input.and_then(|i| i.group_policy.as_deref().and_then(Policy::from_name));
    if let (Some(key), Some(limit), Some(policy)) = (&rec.group, limit, policy) {
        let key = key.clone();
        return Some(GroupClaim { key, limit, policy });
    }
    group_claim(program, &rec.function, |g| match &rec.group {
        Some(key) => key.clone(),
        None => g.key_of(
            &rec.input
                .as_ref()
                .map(|i| i.values.clone())
                .unwrap_or_default(),
        ),
    })
}

fn concurrency(program: &Program, function: &str) -> usize {
    program
        .function(function)
        .and_then(|f| f.concurrency)
        .unwrap_or(usize::MAX)
}

/// Why a run was not started. The HTTP layer words it.
#[derive(Debug)]
pub enum RunError {
    /// Every slot is in use and the queue holds `queued` runs, its limit.
    QueueFull {
        /// `max_queued_runs`.
        queued: usize,
        /// Seconds until a place is likely free, from the drain rate.
        retry_after: u64,
    },
    /// Every slot is in use and the runs waiting for one in memory hold
    /// `budget` bytes of values or more with this one (`max_waiting_bytes`).
    WaitingBytesFull {
        /// `max_waiting_bytes`.
        budget: usize,
        /// Seconds until a slot is likely free, from the drain rate.
        retry_after: u64,
    },
    /// A sync run waited `waited` (`queue_timeout`) and no slot came free.
    WaitedTooLong {
        /// `queue_timeout`.
        waited: Duration,
        /// Runs still waiting ahead of the next caller.
        waiting: usize,
        /// Seconds until a slot is likely free, from the drain rate.
        retry_after: u64,
    },
    /// The accepted run could not be recorded durably.
    Storage(io::Error),
    /// trigd is shutting down.
    ShuttingDown,
    /// The sync run was cancelled while it waited for a slot.
    Cancelled {
        /// The run's id.
        run: String,
    },
    /// A newer run of its concurrency group replaced the sync run while
    /// it waited (`replace_pending`, `cancel_running`).
    Superseded {
        /// The run's id.
        run: String,
        /// The newer run.
        by: String,
    },
    /// The sync run's concurrency group was at its limit (`skip`).
    Skipped {
        /// The run's id.
        run: String,
        /// The group key.
        group: String,
    },
}

/// How many times [`Runner::cancel`] looks for a run here (10 ms apart:
/// half a second) before it takes the run for ended.
const LOOKS: u32 = 50;

/// What [`Runner::cancel`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancel {
    /// The run was waiting in the queue: it is off the queue, recorded
    /// `cancelled`, and will not start (also not after a restart).
    Dequeued,
    /// The run is executing: it is being stopped and will end `cancelled`.
    Stopping,
    /// The run is neither queued nor executing here (it has ended).
    NotActive,
    /// The database failed while the cancel was handed on (a shared
    /// database): it may have taken the run off the cluster queue without
    /// its answer arriving. Asked again, the cancel is finished or done;
    /// the lease thread finishes it once the database answers.
    Unsure,
}

/// A sync run holding its slot, recorded `running`, not yet executed.
pub struct SyncRun {
    slot: SlotGuard,
    rec: RunRecord,
    job: Job,
}

impl SyncRun {
    /// The run's id.
    pub fn id(&self) -> &str {
        &self.rec.run
    }

    /// Execute the run, record it, and give the slot back (or hand it on).
    /// Its end is logged at `info`.
    pub fn execute(self) -> Outcome {
        self.execute_logging_end(log::Level::Info)
    }

    /// [`SyncRun::execute`], logging the run's end at `end`.
    fn execute_logging_end(self, end: log::Level) -> Outcome {
        let SyncRun { slot, rec, job } = self;
        let runner = Arc::clone(&slot.runner);
        let (_, outcome) = runner.execute(rec, &job, end);
        if let Some(q) = slot.finish() {
            runner.spawn_worker(Work::Queued(q));
        }
        outcome
    }
}

/// A slot held by a run: dropped without [`SlotGuard::finish`] (a panic),
/// it still frees or hands on the slot.
struct SlotGuard {
    runner: Arc<Runner>,
    /// The function's key and the run's id.
    key: Option<(SlotKey, String)>,
    kind: Kind,
}

impl SlotGuard {
    /// Give the slot up; an async run handed it comes back to be executed.
    fn finish(mut self) -> Option<Queued> {
        let (key, run) = self.key.take()?;
        self.runner.release(&key, &run, self.kind)
    }
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        if let Some((key, run)) = self.key.take() {
            if let Some(q) = self.runner.release(&key, &run, self.kind) {
                self.runner.spawn_worker(Work::Queued(q));
            }
        }
    }
}

/// What a run thread executes: a run accepted with a free slot, or one
/// taken from the queue (read back from the log).
enum Work {
    Ready(Box<(RunRecord, Job)>),
    Queued(Queued),
}

impl Work {
    /// The function's key and the run's id.
    fn key(&self) -> (SlotKey, String) {
        match self {
            Work::Ready(b) => (b.1.slot_key(), b.0.run.clone()),
            Work::Queued(q) => (q.key.clone(), q.run.clone()),
        }
    }
}

/// The handles of the runs executing now.
#[derive(Default)]
struct Live {
    runs: HashMap<String, Arc<RunHandle>>,
    /// Shutdown is stopping every run: a run that starts now is stopped too.
    aborting: bool,
}

/// Keeps a run's handle in [`Live`] while it executes; dropped, also
/// closes the handle (followers learn that the run has ended).
struct Registered<'a> {
    runner: &'a Runner,
    run: String,
    handle: Arc<RunHandle>,
}

impl Registered<'_> {
    /// Make the run unfindable (it is no longer stoppable); the handle
    /// stays open for those who hold it.
    fn unlist(&self) {
        lock(&self.runner.live).runs.remove(&self.run);
    }
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.unlist();
        self.handle.close();
    }
}

/// The number of the attempt `rec` is at (1 for the first).
fn attempt_number(rec: &RunRecord) -> u32 {
    u32::try_from(rec.attempts.len())
        .unwrap_or(u32::MAX)
        .saturating_add(1)
}

/// The state an attempt with `outcome` ends in.
fn state_of(outcome: &Outcome) -> RunState {
    match &outcome.error {
        None => RunState::Finished,
        Some(StepError::TimedOut { .. }) => RunState::TimedOut,
        Some(StepError::Aborted { .. }) => RunState::Interrupted,
        Some(StepError::Cancelled { .. }) => RunState::Cancelled,
        Some(_) => RunState::Failed,
    }
}

/// Move the attempt `n` that `rec` ended (its `State` and `Error`) into its
/// `Attempts`, and make it `queued` for the next one in `wait`, with its
/// input (a sync run's too: its values are its `RerunInput`).
fn note_attempt(rec: &mut RunRecord, n: u32, wait: Duration) {
    rec.attempts.push(AttemptReport {
        attempt: n,
        state: rec.state,
        started_at: rec.started_at,
        finished_at: Time::now(),
        error: rec.error.take(),
    });
    rec.retry_at = Some(Time::try_from(std::time::SystemTime::now() + wait).unwrap_or_default());
    if rec.input.is_none() {
        rec.input.clone_from(&rec.rerun_input);
    }
    rec.state = RunState::Queued;
    (rec.started_at, rec.finished_at, rec.stdout, rec.stderr) = (None, None, None, None);
    rec.steps.clear();
}

/// Whether run `rec`, found `running` after a stop of trigd it did not
/// see (`kill -9`, a lost host: start-up's repair of the run log, or the
/// adoption of a lapsed instance's runs), runs again. With
/// `[functions.retry]` retrying `interrupted` and attempts left, the cut
/// attempt goes into its `Attempts` (`why`: its Error) and the run is
/// `queued` for the next one after its backoff, as after a clean stop
/// ([`Runner::record_outcome`]); else it runs again from the start when
/// its function has `retry_on_restart`.
pub fn again_after_crash(rec: &mut RunRecord, cfg: &Config, why: &str) -> bool {
    let Some(function) =
        program_of(cfg, rec.owner, &rec.function).and_then(|p| p.function(&rec.function))
    else {
        return false;
    };
    if let Some(r) = function.retry.as_ref().filter(|r| r.on.interrupted) {
        let n = attempt_number(rec);
        if rec.state == RunState::Running && n < r.attempts {
            rec.state = RunState::Interrupted;
            rec.error = Some(why.into());
            note_attempt(rec, n, r.wait(n));
            return true;
        }
    }
    function.retry_on_restart
}

/// Whether instant `at` has come.
fn passed(at: Time) -> bool {
    at.since(Time::now()).is_none_or(|left| left.is_zero())
}

/// Wait until `at` unless the run is stopped meanwhile; whether the wait
/// ran out (not stopped).
fn wait_until(at: Time, handle: &RunHandle) -> bool {
    loop {
        if handle.signal().is_triggered() {
            return false;
        }
        let Some(left) = at.since(Time::now()) else {
            return true;
        };
        if left.is_zero() {
            return true;
        }
        thread::sleep(left.min(Duration::from_millis(50)));
    }
}

/// The output `out` still holds in memory, for the end record instead of
/// a file of its own (`state/output.rs`). A run stopped by a shutdown may
/// be queued again ([`Runner::record_outcome`]): its output goes to its
/// file, where it stays until the next attempt prints, as any output did
/// before it could be held.
fn kept_inline(out: &OutputFile, outcome: &Outcome) -> Option<Inline> {
    match outcome.error {
        Some(StepError::Aborted { .. }) => {
            out.release();
            None
        }
        _ => out.finish(),
    }
}

/// Make `outcome` that of a cancelled run: the cancel was accepted before
/// its end was decided, so it ends `cancelled` even when its last step
/// exited on its own meanwhile.
fn cancelled(outcome: &mut Outcome) {
    let step = match &outcome.error {
        Some(
            StepError::Spawn { step, .. }
            | StepError::Failed { step, .. }
            | StepError::TimedOut { step }
            | StepError::Aborted { step }
            | StepError::Cancelled { step },
        ) => *step,
        None => outcome.steps.len().saturating_sub(1),
    };
    outcome.error = Some(StepError::Cancelled { step });
}

/// The outcome of a run whose handle could not be created.
fn no_handle(e: &io::Error) -> Outcome {
    Outcome {
        result: Vec::new(),
        steps: Vec::new(),
        error: Some(StepError::Spawn {
            step: 0,
            message: format!("cannot create the run's abort pipe: {e}"),
        }),
    }
}

/// The run slots and queue of one server (or of `trigd run`).
pub struct Runner {
    store: Option<Arc<RunStore>>,
    /// Run counts and durations.
    pub metrics: Arc<Metrics>,
    slots: Mutex<Slots>,
    /// Signalled whenever `used` drops.
    freed: Condvar,
    drain: Mutex<Drain>,
    /// Queued runs kept whole in memory, by id: those of a runner without
    /// a run log (nothing to read them back from) and those holding a
    /// request body file.
    unrecorded: Mutex<HashMap<String, (RunRecord, Job)>>,
    /// Signalled whenever a run ends (the drain counter is its lock).
    ended: Condvar,
    live: Mutex<Live>,
    path_env: String,
    children: AtomicUsize,
    /// Bytes of values held in memory by the runs waiting for a slot: sync
    /// runs, and async runs kept whole in memory (bounded by
    /// `max_waiting_bytes`); added to under the slots lock.
    waiting_bytes: AtomicUsize,
    callbacks: OnceLock<Arc<Callbacks>>,
    /// The cluster queue, with the PostgreSQL backend ([`Runner::share`]).
    cluster: OnceLock<Arc<cluster::Shared>>,
}

impl Runner {
    /// A runner that records runs in `store` (`None`: records nothing, for
    /// `trigd run`).
    pub fn new(store: Option<Arc<RunStore>>, metrics: Arc<Metrics>) -> Runner {
        let path_env =
            std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
        Runner {
            store,
            metrics,
            slots: Mutex::new(Slots::default()),
            freed: Condvar::new(),
            drain: Mutex::new(Drain::new()),
            unrecorded: Mutex::default(),
            ended: Condvar::new(),
            live: Mutex::default(),
            path_env,
            children: AtomicUsize::new(0),
            waiting_bytes: AtomicUsize::new(0),
            callbacks: OnceLock::new(),
            cluster: OnceLock::new(),
        }
    }

    /// Run `job` on this thread, once a slot is free, and return its id and
    /// outcome.
    ///
    /// # Errors
    /// As [`Runner::begin_sync`].
    pub fn run_sync(self: &Arc<Self>, job: Job) -> Result<(String, Outcome), RunError> {
        let run = self.begin(job, true)?;
        let id = run.id().to_string();
        // Answered at its end: the request's access line, written then,
        // is the run's line at `info` (it names the run and its status).
        Ok((id, run.execute_logging_end(log::Level::Debug)))
    }

    /// Take a slot for `job` as a sync run, waiting in the queue for at
    /// most `queue_timeout` (recorded `queued` meanwhile), and record it
    /// `running`, to be executed with [`SyncRun::execute`] (on whichever
    /// thread; a streamed sync call executes it on its own thread while
    /// the caller follows the output).
    ///
    /// # Errors
    /// [`RunError::QueueFull`] when the queue is full,
    /// [`RunError::WaitingBytesFull`] when the waiting sync runs would hold
    /// more than `max_waiting_bytes` of values with this one,
    /// [`RunError::WaitedTooLong`] when no slot came free within
    /// `queue_timeout`, [`RunError::Cancelled`] when the run was cancelled
    /// while it waited; [`RunError::Storage`] when the run cannot be
    /// recorded (disk full): it is not started.
    pub fn begin_sync(self: &Arc<Self>, job: Job) -> Result<SyncRun, RunError> {
        // A streamed call gives the run id to its caller at once: the
        // record must be there.
        self.begin(job, false)
    }

    /// [`Runner::begin_sync`]; with `may_defer`, the `queued` and
    /// `running` states of a run nobody can know of before its answer may
    /// be deferred ([`Runner::defers`]).
    fn begin(self: &Arc<Self>, mut job: Job, may_defer: bool) -> Result<SyncRun, RunError> {
        // An id given before the run (an `Idempotency-Key` claim, a
        // re-run's) is known to someone already.
        let quiet = may_defer && job.id.is_none();
        let mut rec = self.new_record(&job, false);
        job.id = Some(rec.run.clone());
        let waited = self.acquire(&job, &rec, quiet)?;
        let slot = SlotGuard {
            runner: Arc::clone(self),
            key: Some((job.slot_key(), rec.run.clone())),
            kind: Kind::Sync,
        };
        rec.state = RunState::Running;
        rec.started_at = Some(Time::now());
        if let Some(store) = &self.store {
            let deferred = quiet && Self::defers(&rec, store);
            // Deferred: the lease thread writes it at its first tick after
            // DEFER if the run is still running (not woken for it: a wake
            // per run would cost the thread's statements per run). After a
            // wait, it replaces the `queued` state deferred the same way;
            // one the lease thread wrote meanwhile stays in the row until
            // then (a start DEFER late at most, as for any sync run).
            let written = if deferred {
                Ok(())
            } else {
                store.append(&rec, false)
            };
            if let Err(e) = written {
                if waited {
                    let why = format!("the run could not be recorded ({e}); not run");
                    self.end_unstarted(rec, RunState::Failed, &why, false);
                }
                return Err(RunError::Storage(e));
            }
        }
        if let Some(c) = self.callbacks() {
            c.started(&rec);
        }
        Ok(SyncRun { slot, rec, job })
    }

    /// Whether sync run `rec`'s state (`queued` while it waits for a
    /// slot, then `running`) is written only if it is still in it
    /// [`DEFER`](crate::state::pg::deferred::DEFER) later (the database
    /// backend): not a run of a concurrency group (the cluster counts a
    /// group's places from the rows), nor one with callbacks (a start ping
    /// names the run; deliveries refer to its row). With the queue's wait
    /// deferred too, a sync call that waits a few ms for a slot (8
    /// connections on 4 slots) writes its row once, as one that does not.
    fn defers(rec: &RunRecord, store: &RunStore) -> bool {
        rec.group.is_none() && rec.callbacks.is_empty() && store.defer_state(rec)
    }

    /// Take a slot for the sync run `rec` of `job`, waiting in the queue
    /// for at most `queue_timeout`; whether it waited. `quiet`: nobody
    /// knows of the run yet, so its `queued` state may be deferred
    /// ([`Runner::defers`]).
    fn acquire(
        self: &Arc<Self>,
        job: &Job,
        rec: &RunRecord,
        quiet: bool,
    ) -> Result<bool, RunError> {
        let (key, n, group) = (job.slot_key(), job.concurrency(), job.group());
        let server = &job.cfg.server;
        let mut s = lock(&self.slots);
        if s.closing {
            return Err(RunError::ShuttingDown);
        }
        s.set_limits(server);
        let start = s.fill();
        if !start.is_empty() {
            drop(s);
            self.start_granted(start);
            s = lock(&self.slots);
        }
        if s.skips(group.as_ref()) {
            drop(s);
            return Err(self.skip(rec.clone(), group, false));
        }
        if s.slot_free(Kind::Sync, &key, n, group.as_ref()) {
            s.take(&key, &rec.run, group.as_ref());
            return Ok(false);
        }
        if s.queue.len() + s.reserved >= server.max_queued_runs {
            let waiting = s.queue.len();
            drop(s);
            return Err(RunError::QueueFull {
                queued: server.max_queued_runs,
                retry_after: self.retry_after(waiting),
            });
        }
        let held = job.held_bytes();
        if self.waiting_bytes.load(Ordering::SeqCst) + held > server.max_waiting_bytes {
            let waiting = s.queue.len();
            drop(s);
            return Err(RunError::WaitingBytesFull {
                budget: server.max_waiting_bytes,
                retry_after: self.retry_after(waiting),
            });
        }
        self.waiting_bytes.fetch_add(held, Ordering::SeqCst);
        let room = s.make_room(group.as_ref(), &rec.run);
        let t = Arc::new(Ticket {
            run: rec.run.clone(),
            key,
            concurrency: n,
            group,
            granted: AtomicBool::new(false),
            cancelled: AtomicBool::new(false),
            superseded_by: std::sync::OnceLock::new(),
            wake: Condvar::new(),
        });
        s.push_back(Waiter::Sync(Arc::clone(&t)));
        let deadline = Instant::now() + server.queue_timeout;
        drop(s);
        // Recorded while it waits: listed, and found by a cancel (a run
        // nobody knows of yet once it has waited DEFER: `quiet`). Only
        // this thread writes its record until it runs.
        let deferred = quiet && self.store.as_ref().is_some_and(|s| Self::defers(rec, s));
        if !deferred {
            self.record(rec);
        }
        self.supersede(room, &rec.run);
        log::debug!("run {} waits for a slot", rec.run);
        let waited = self.wait_in_queue(&t, rec, server.queue_timeout, deadline);
        self.waiting_bytes.fetch_sub(held, Ordering::SeqCst);
        waited.map(|()| true)
    }

    /// Wait until ticket `t` (of run `rec`) is granted a slot, cancelled,
    /// or stopped by shutdown, or `deadline` passes; a run that does not
    /// start is recorded as such.
    fn wait_in_queue(
        &self,
        t: &Arc<Ticket>,
        rec: &RunRecord,
        waited: Duration,
        deadline: Instant,
    ) -> Result<(), RunError> {
        let mut s = lock(&self.slots);
        loop {
            if t.granted.load(Ordering::SeqCst) {
                return Ok(());
            }
            if let Some(by) = t.superseded_by.get() {
                drop(s);
                return Err(self.superseded(rec.clone(), by, false));
            }
            if t.cancelled.load(Ordering::SeqCst) {
                drop(s);
                let why = "the run was cancelled before it started";
                self.end_unstarted(rec.clone(), RunState::Cancelled, why, false);
                return Err(RunError::Cancelled {
                    run: rec.run.clone(),
                });
            }
            if s.stopping {
                s.remove_ticket(t);
                drop(s);
                let why = "trigd shut down before the run started";
                self.end_unstarted(rec.clone(), RunState::Interrupted, why, false);
                return Err(RunError::ShuttingDown);
            }
            let now = Instant::now();
            if now >= deadline {
                s.remove_ticket(t);
                let waiting = s.queue.len();
                drop(s);
                let why = "no run slot came free within queue_timeout; not run";
                self.end_unstarted(rec.clone(), RunState::Failed, why, false);
                return Err(RunError::WaitedTooLong {
                    waited,
                    waiting,
                    retry_after: self.retry_after(waiting),
                });
            }
            s = t
                .wake
                .wait_timeout(s, deadline - now)
                .map_or_else(|e| e.into_inner().0, |r| r.0);
        }
    }

    /// Send completion callbacks of ended runs through `service` (servers
    /// do; `trigd run` does not).
    pub fn attach_callbacks(&self, service: Arc<Callbacks>) {
        let _ = self.callbacks.set(service);
    }

    /// The callback service, when one is attached.
    pub fn callbacks(&self) -> Option<&Arc<Callbacks>> {
        self.callbacks.get()
    }

    /// Write the end state of `rec`, spooling its callbacks first and
    /// handing them on after, so that no ended run loses a callback and no
    /// delivery reports on a record not yet written.
    fn record_end(&self, rec: &mut RunRecord, durable: bool) {
        let sent = sent_before_the_end(rec);
        let chain = self.callbacks().and_then(|c| c.ended(rec));
        match &self.store {
            Some(store) if sent => store.record_keeping_deliveries(rec, durable),
            Some(store) if durable => store.record_synced(rec),
            Some(store) => store.record(rec),
            None => {}
        }
        if let (Some(c), Some(chain)) = (self.callbacks(), chain) {
            c.submit(chain);
        }
    }

    /// Record `rec`, a run that ends without having started, as `state`
    /// for reason `why` (`durable`: on disk before this returns).
    fn end_unstarted(&self, mut rec: RunRecord, state: RunState, why: &str, durable: bool) {
        rec.state = state;
        rec.finished_at = Some(Time::now());
        rec.error = Some(why.into());
        rec.input = None;
        self.record_end(&mut rec, durable);
        if state == RunState::Cancelled {
            self.metrics
                .run(rec.owner, &rec.function, state.name(), Duration::ZERO);
        }
        self.ended.notify_all();
    }

    /// Stop run `id`: a run waiting in the queue is taken off it (it holds
    /// no slot: nothing is freed) and recorded `cancelled` (durably, so it
    /// does not run at the next start; a waiting sync caller is answered
    /// [`RunError::Cancelled`]); a running one is stopped (SIGTERM to its
    /// process group, SIGKILL after `kill_grace`) and ends `cancelled`.
    pub fn cancel(&self, id: &str) -> Cancel {
        // With a database, the run may be in the cluster queue or held by
        // another instance.
        match self.cluster.get().and_then(|c| self.cancel_shared(c, id)) {
            // It may still be here all the same.
            Some(Cancel::Unsure) => match self.cancel_here(id, LOOKS) {
                Cancel::NotActive => Cancel::Unsure,
                done => done,
            },
            Some(done) => done,
            None => self.cancel_here(id, LOOKS),
        }
    }

    /// Stop run `id` where this instance has it: in its queue, or
    /// executing ([`Runner::cancel`]). A run passes from recorded to
    /// queued or live without the record showing it: `looks` looks, 10 ms
    /// apart, before giving up.
    fn cancel_here(&self, id: &str, looks: u32) -> Cancel {
        for look in 0..looks {
            if look > 0 {
                thread::sleep(Duration::from_millis(10));
            }
            let waiter = lock(&self.slots).remove_run(id);
            match waiter {
                Some(Waiter::Async(q)) => {
                    self.cancel_queued(&q);
                    return Cancel::Dequeued;
                }
                Some(Waiter::Sync(t)) => {
                    // Its caller records the cancel and answers it.
                    t.cancelled.store(true, Ordering::SeqCst);
                    t.wake.notify_one();
                    self.freed.notify_all();
                    return Cancel::Dequeued;
                }
                None => {}
            }
            if let Some(h) = self.handle(id) {
                // Refused once the run's end is decided: it ended.
                return if h.cancel() {
                    Cancel::Stopping
                } else {
                    Cancel::NotActive
                };
            }
        }
        Cancel::NotActive
    }

    /// The queued async run `run` kept whole in memory, taken out (its
    /// bytes no longer count against `max_waiting_bytes`).
    fn take_unrecorded(&self, run: &str) -> Option<(RunRecord, Job)> {
        let kept = lock(&self.unrecorded).remove(run)?;
        self.waiting_bytes
            .fetch_sub(kept.1.kept_bytes(), Ordering::SeqCst);
        Some(kept)
    }

    /// The record of the async run `q`, just taken off the queue; a run
    /// kept whole in memory (and its request body file) goes.
    fn unqueued_record(&self, q: &Queued) -> Option<RunRecord> {
        let kept = self.take_unrecorded(&q.run).map(|(rec, _)| rec);
        let rec = kept.or_else(|| self.store.as_ref()?.get(&q.run));
        if rec.is_none() {
            log::error!(
                "run {}: taken off the queue, but its record cannot be read",
                q.run
            );
        }
        rec
    }

    /// Record the async run `q`, just taken off the queue, `cancelled`.
    fn cancel_queued(&self, q: &Queued) {
        if let Some(rec) = self.unqueued_record(q) {
            let why = "the run was cancelled before it started";
            self.end_unstarted(rec, RunState::Cancelled, why, true);
        }
        self.freed.notify_all();
    }

    /// Record `rec` `skipped`: its concurrency group `g` is at its limit
    /// (`policy = "skip"`). The answer for its sync caller.
    fn skip(&self, mut rec: RunRecord, g: Option<GroupClaim>, durable: bool) -> RunError {
        let group = g.map(|g| g.key).unwrap_or_default();
        rec.skipped = Some(SkipReason::Group);
        let why = format!("its concurrency group {group:?} was at its limit; not run");
        let run = rec.run.clone();
        self.end_unstarted(rec, RunState::Skipped, &why, durable);
        log::info!("run {run} skipped: its group {group:?} is at its limit");
        RunError::Skipped { run, group }
    }

    /// Record `rec`, a run that waited, `superseded` by run `by`. The
    /// answer for its sync caller.
    fn superseded(&self, mut rec: RunRecord, by: &str, durable: bool) -> RunError {
        rec.superseded_by = Some(by.to_string());
        let why = format!("superseded by run {by}, a newer run of its concurrency group; not run");
        let run = rec.run.clone();
        self.end_unstarted(rec, RunState::Superseded, &why, durable);
        log::info!("run {run} superseded by run {by}");
        let by = by.to_string();
        RunError::Superseded { run, by }
    }

    /// Carry out the room run `by` made in its group (the slots lock is
    /// not held): the async runs it replaced are recorded `superseded`
    /// (durably: not run after a restart; sync callers replaced are
    /// woken and record it themselves), and the running run it displaces
    /// is cancelled.
    fn supersede(&self, room: Room, by: &str) {
        for w in room.superseded {
            match w {
                Waiter::Async(q) => {
                    if let Some(rec) = self.unqueued_record(&q) {
                        self.superseded(rec, by, true);
                    }
                }
                Waiter::Sync(t) => t.wake.notify_one(),
            }
        }
        self.freed.notify_all();
        if let Some(run) = room.cancel {
            self.cancel_displaced(&run, by);
        }
    }

    /// Cancel run `run`, executing in the group of run `by`
    /// (`cancel_running`); it may not have registered its handle yet.
    fn cancel_displaced(&self, run: &str, by: &str) {
        for _ in 0..100 {
            if self.displace(run, by) {
                return;
            }
            thread::sleep(Duration::from_millis(10));
        }
        log::warn!("run {run}: to be cancelled for run {by}, but it did not start in time");
    }

    /// One look of [`Runner::cancel_displaced`]: true once done (the run
    /// is cancelled, or no longer holds a place of a group here); false
    /// while its handle is not registered yet.
    fn displace(&self, run: &str, by: &str) -> bool {
        if let Some(h) = self.handle(run) {
            h.cancel_for(Some(by));
            log::info!("run {run} cancelled: run {by} of its group supersedes it");
            return true;
        }
        !lock(&self.slots).group_of.contains_key(run)
    }

    /// Wait until some run ends, at most `limit`.
    pub fn wait_for_an_end(&self, limit: Duration) {
        let d = lock(&self.drain);
        let _ = self.ended.wait_timeout(d, limit);
    }

    /// Seconds until `waiting` runs have drained (`Retry-After`).
    fn retry_after(&self, waiting: usize) -> u64 {
        lock(&self.drain).retry_after(waiting)
    }

    /// Take a slot for run `run` of the async `job`, or else a queue
    /// place, for which it holds `held` bytes of `max_waiting_bytes`; or
    /// neither when its group skips it.
    ///
    /// # Errors
    /// As [`Runner::start_async`], but storage.
    fn reserve(&self, st: &Staged) -> Result<Place, RunError> {
        let placed = self.reserve_in(&mut lock(&self.slots), st);
        placed.map_err(|r| self.refused(r))
    }

    /// [`Runner::reserve`] under the slots lock `s`.
    fn reserve_in(&self, s: &mut Slots, st: &Staged) -> Result<Place, Refusal> {
        let (job, run) = (&st.job, &st.rec.run);
        let (key, n, g, held) = (&st.key, st.n, st.group.as_ref(), st.held);
        if s.closing {
            return Err(Refusal::ShuttingDown);
        }
        s.set_limits(&job.cfg.server);
        let max_queued = job.cfg.server.max_queued_runs;
        if s.skips(g) {
            return Ok(Place::Skip);
        }
        if s.slot_free(Kind::Async, key, n, g) {
            s.take_async(key, run, g);
            return Ok(Place::Slot);
        }
        let waiting = s.queue.len();
        let queue_full = waiting + s.reserved >= max_queued && !s.replaces(g);
        // A run that waits in memory counts like a waiting sync run.
        let budget = job.cfg.server.max_waiting_bytes;
        if !queue_full && self.waiting_bytes.load(Ordering::SeqCst) + held <= budget {
            self.waiting_bytes.fetch_add(held, Ordering::SeqCst);
            s.reserved += 1;
            return Ok(Place::Queue);
        }
        Err(match queue_full {
            true => Refusal::QueueFull(max_queued, waiting),
            false => Refusal::WaitingBytesFull(budget, waiting),
        })
    }

    /// The answer to a run refused by [`Runner::reserve_in`] (the slots
    /// lock not held: the drain rate has a lock of its own).
    fn refused(&self, r: Refusal) -> RunError {
        match r {
            Refusal::ShuttingDown => RunError::ShuttingDown,
            Refusal::QueueFull(queued, waiting) => RunError::QueueFull {
                queued,
                retry_after: self.retry_after(waiting),
            },
            Refusal::WaitingBytesFull(budget, waiting) => RunError::WaitingBytesFull {
                budget,
                retry_after: self.retry_after(waiting),
            },
        }
    }

    /// Record `job` durably (with its input), then start it or queue it,
    /// and return its id.
    ///
    /// # Errors
    /// [`RunError::QueueFull`] when no slot is free and the queue is full,
    /// [`RunError::WaitingBytesFull`] when it would wait kept in memory
    /// (a request body or a hook's file in a temporary file, or no run log)
    /// past `max_waiting_bytes`, [`RunError::Storage`] when the record
    /// cannot be written: nothing is accepted that is not recorded.
    pub fn start_async(self: &Arc<Self>, job: Job) -> Result<String, RunError> {
        let mut started = self.start_async_all(vec![job]);
        started
            .pop()
            .unwrap_or(Err(RunError::Storage(io::Error::other(
                "no run was started",
            ))))
    }

    /// [`Runner::start_async`] for several runs accepted together (a
    /// schedule's wake): each is recorded, then one durable write covers
    /// all of them, then each is started or queued; the answers in the
    /// jobs' order. 1,000 schedules firing at once were accepted in up to
    /// 1 s when each waited for a durable write of its own
    /// (`bench/schedules.sh`; issue 33 asks for 50 ms).
    pub fn start_async_all(self: &Arc<Self>, jobs: Vec<Job>) -> Vec<Result<String, RunError>> {
        if let Some(shared) = self.cluster.get() {
            return jobs
                .into_iter()
                .map(|job| self.start_shared(shared, job))
                .collect();
        }
        let staged: Vec<Result<Staged, RunError>> =
            jobs.into_iter().map(|job| self.stage(job)).collect();
        // A skipped run is recorded as it ends, in `hand_on`.
        let recs: Vec<&RunRecord> = staged
            .iter()
            .flatten()
            .filter(|st| st.place != Place::Skip)
            .map(|st| &st.rec)
            .collect();
        let written = match &self.store {
            Some(store) => store.append_all(&recs),
            None => Ok(()),
        };
        staged
            .into_iter()
            .map(|st| {
                let written = written.as_ref().map_err(copy_error).copied();
                self.hand_on(st?, written)
            })
            .collect()
    }

    /// Promise `job` a slot or a queue place, and make its record (with
    /// its input; written by the caller).
    fn stage(&self, mut job: Job) -> Result<Staged, RunError> {
        let in_memory = job.kept_in_memory(self.store.is_some());
        let rec = self.new_record(&job, true);
        job.id = Some(rec.run.clone());
        let mut st = Staged {
            key: job.slot_key(),
            n: job.concurrency(),
            group: job.group(),
            held: if in_memory { job.kept_bytes() } else { 0 },
            in_memory,
            place: Place::Queue,
            rec,
            job,
        };
        // Promise a slot or a queue place before the (slow) durable write,
        // so that concurrent requests cannot overfill the queue.
        st.place = self.reserve(&st)?;
        if st.place == Place::Skip {
            // Recorded (durably) as it ends, in `hand_on`.
            return Ok(st);
        }
        st.rec.input = Some(run_input(&st.job, st.group.as_ref()));
        Ok(st)
    }

    /// Record `job` `queued`, durably, without queueing it: a scheduled run
    /// that waits for its schedule's running run (`overlap = "queue"`).
    /// [`Runner::resume`] of this `id` starts it later from this record
    /// (its values, its `CreatedAt`), as after a restart it is resumed
    /// like every run recorded `queued`, so a crash does not lose it. `None`
    /// with a shared database, whose `queued` records are the cluster's
    /// queue: there the wait is kept in memory only.
    ///
    /// # Errors
    /// The record cannot be written or synced.
    pub fn record_waiting(&self, job: &Job) -> io::Result<Option<String>> {
        if self.cluster.get().is_some() {
            return Ok(None);
        }
        let mut rec = self.new_record(job, true);
        rec.input = Some(run_input(job, job.group().as_ref()));
        if let Some(store) = &self.store {
            store.append(&rec, true)?;
        }
        Ok(Some(rec.run))
    }

    /// Start or queue a staged run once its record is durable (`written`);
    /// give back what was promised when it is not.
    fn hand_on(self: &Arc<Self>, st: Staged, written: io::Result<()>) -> Result<String, RunError> {
        let Staged {
            job,
            rec,
            key,
            n,
            group,
            held,
            in_memory,
            place,
            ..
        } = st;
        let id = rec.run.clone();
        if place == Place::Skip {
            self.skip(rec, group, true);
            return Ok(id);
        }
        if place == Place::Slot {
            if let Err(e) = written {
                if let Some(q) = self.release(&key, &id, Kind::Async) {
                    self.spawn_worker(Work::Queued(q));
                }
                return Err(RunError::Storage(e));
            }
            self.spawn_worker(Work::Ready(Box::new((rec, job))));
            return Ok(id);
        }
        let mut s = lock(&self.slots);
        s.reserved -= 1;
        if let Err(e) = written {
            self.waiting_bytes.fetch_sub(held, Ordering::SeqCst);
            return Err(RunError::Storage(e));
        }
        let room = s.make_room(group.as_ref(), &id);
        s.push_back(Waiter::Async(Queued {
            run: rec.run.clone(),
            program: Arc::clone(&job.program),
            cfg: Arc::clone(&job.cfg),
            key,
            concurrency: n,
            group,
            taken: None,
        }));
        // A request body (or a hook's file) in a temporary file lives as
        // long as its job.
        if in_memory {
            lock(&self.unrecorded).insert(rec.run.clone(), (rec, job));
        }
        // A slot may have come free while the run was being recorded.
        let start = s.fill();
        drop(s);
        self.supersede(room, &id);
        self.start_granted(start);
        Ok(id)
    }

    /// Queue again, in this order and before anything new, the runs the
    /// run log kept queued at start-up (see `RunStore::open`), and start
    /// what the slots allow. A run whose program or function is gone from
    /// `cfg` is recorded `failed`.
    pub fn resume(self: &Arc<Self>, cfg: &Arc<Config>, ids: Vec<String>) {
        let Some(store) = &self.store else { return };
        let mut s = lock(&self.slots);
        s.set_limits(&cfg.server);
        let mut rooms = Vec::new();
        let mut retrying = std::collections::HashSet::new();
        for id in ids {
            let Some(mut rec) = store.get(&id) else {
                continue;
            };
            let body = rec.input.as_ref().is_some_and(|i| i.body);
            match program_of(cfg, rec.owner, &rec.function) {
                Some(p) if !body => {
                    if rec.retry_at.is_some() {
                        retrying.insert(rec.run.clone());
                    }
                    let room = requeue(&mut s, cfg, p, rec, &retrying);
                    rooms.push(room);
                }
                _ => {
                    rec.state = RunState::Failed;
                    rec.finished_at = Some(Time::now());
                    rec.error = Some(if body {
                        "its request body or files (temporary files) did not survive the restart"
                            .into()
                    } else {
                        "its program or function no longer exists".into()
                    });
                    rec.input = None;
                    store.record(&rec);
                }
            }
        }
        let start = s.fill();
        drop(s);
        // Off the queue already: nothing superseded runs.
        for (room, by) in rooms {
            self.supersede(room, &by);
        }
        self.start_granted(start);
    }

    /// Give up the slot of run `run` of `key`: handed to the next runnable
    /// waiter or freed. An async run handed the slot comes back.
    fn release(&self, key: &SlotKey, run: &str, kind: Kind) -> Option<Queued> {
        // The slots lock is released at the end of this statement, before
        // a sync caller handed the slot is woken.
        let (next, freed) = lock(&self.slots).release(key, run, kind);
        if freed {
            self.freed.notify_all();
            if let Some(shared) = self.cluster.get() {
                shared.slot_freed();
            }
        }
        wake(next?)
    }

    /// Wake the sync callers and start the async runs handed slots (the
    /// slots lock is not held).
    fn start_granted(self: &Arc<Self>, granted: Vec<Granted>) {
        for q in granted.into_iter().filter_map(wake) {
            self.spawn_worker(Work::Queued(q));
        }
    }

    /// Run `first` on a detached thread, then keep the slot for the next
    /// runnable async run handed to it, until none is.
    fn spawn_worker(self: &Arc<Self>, first: Work) {
        let (key, run) = first.key();
        let me = Arc::clone(self);
        let spawned = thread::Builder::new().name("run".into()).spawn(move || {
            let mut next = Some(first);
            while let Some(work) = next.take() {
                let slot = SlotGuard {
                    runner: Arc::clone(&me),
                    key: Some(work.key()),
                    kind: Kind::Async,
                };
                me.run_work(work);
                next = slot.finish().map(Work::Queued);
            }
        });
        if let Err(e) = spawned {
            // The run is recorded `queued` on disk and runs at the next
            // start; the slot goes on to the queue.
            log::error!("cannot start a run thread: {e}");
            if let Some(q) = self.release(&key, &run, Kind::Async) {
                lock(&self.slots).ungrant(q);
            }
        }
    }

    /// Execute one async run, recording every state; a panic is recorded
    /// as a failure.
    fn run_work(&self, work: Work) {
        let (mut rec, job) = match work {
            Work::Ready(b) => *b,
            Work::Queued(q) => match self.load(q) {
                Some(x) => x,
                None => return,
            },
        };
        // A run accepted ahead (`ahead`) whose instant has come starts with
        // this record; one resumed before its instant waits in `attempts`.
        if rec.attempts.is_empty() && rec.retry_at.is_some_and(passed) {
            rec.retry_at = None;
        }
        rec.state = RunState::Running;
        rec.started_at = Some(Time::now());
        if let Some(store) = &self.store {
            store.record(&rec);
        }
        if let Some(c) = self.callbacks() {
            c.started(&rec);
        }
        let id = rec.run.clone();
        let ran = catch_unwind(AssertUnwindSafe(|| {
            self.execute(rec, &job, log::Level::Info)
        }));
        if ran.is_err() {
            log::error!("run {id}: the run thread panicked");
            if let Some(mut rec) = self.store.as_ref().and_then(|s| s.get(&id)) {
                rec.state = RunState::Failed;
                rec.error = Some("internal error; the server log has the details".into());
                rec.input = None;
                self.record_end(&mut rec, false);
            }
        }
    }

    /// The record and job of a queued run: read back from the run log, or
    /// as the cluster queue's take returned it.
    fn load(&self, mut q: Queued) -> Option<(RunRecord, Job)> {
        if let Some(kept) = self.take_unrecorded(&q.run) {
            return Some(kept);
        }
        let rec = match q.taken.take() {
            Some(rec) => Some(*rec),
            None => self.store.as_ref()?.get(&q.run),
        };
        let Some(rec) = rec.filter(|r| r.state == RunState::Queued) else {
            match self.cluster.get() {
                // Taken from the cluster queue while the database failed:
                // it goes back there once it answers.
                Some(shared) => shared.lost(q.run),
                None => log::error!("run {}: its queued record cannot be read; not run", q.run),
            }
            return None;
        };
        let input = rec.input.clone().unwrap_or_default();
        let job = Job {
            cfg: q.cfg,
            program: q.program,
            function: q.key.1,
            values: input.values,
            vars: input.vars,
            by: rec.by.clone(),
            id: Some(rec.run.clone()),
            tool: rec.tool.clone(),
            body_file: None,
            stdin_body: false,
            files: Vec::new(),
            // Its record already names its callbacks.
            callbacks: Vec::new(),
            occurrence: rec.scheduled_at.map(|t| (t, rec.missed)),
            rerun_of: rec.rerun_of.clone(),
            // Its group is the queue's, decided when it was accepted.
            group: None,
        };
        Some((rec, job))
    }

    fn new_record(&self, job: &Job, is_async: bool) -> RunRecord {
        let run = job
            .id
            .clone()
            .unwrap_or_else(|| new_run_id(&job.cfg.server.instance));
        RunRecord {
            r#async: is_async,
            tool: job.tool.clone(),
            scheduled_at: job.occurrence.map(|o| o.0),
            missed: job.occurrence.and_then(|o| o.1),
            callbacks: waiting(&job.callbacks),
            rerun_of: job.rerun_of.clone(),
            group: job.group().map(|g| g.key),
            // What a re-run starts with; a run that read its request body
            // or files from temporary files cannot be re-run.
            rerun_input: Some(run_input(job, None)),
            ..RunRecord::new(
                run,
                RunState::Queued,
                job.program.owner(),
                job.function.clone(),
                job.by.clone(),
            )
        }
    }

    fn record(&self, rec: &RunRecord) {
        if let Some(store) = &self.store {
            store.record(rec);
        }
    }

    /// Record a state of `rec` between its attempts (`durable`: synced),
    /// keeping what the delivery service recorded of the deliveries sent
    /// for earlier attempts ([`RunStore::record_keeping_deliveries`]).
    fn record_attempt(&self, rec: &mut RunRecord, durable: bool) {
        match &self.store {
            Some(store) if sent_before_the_end(rec) => {
                store.record_keeping_deliveries(rec, durable);
            }
            Some(store) if durable => store.record_synced(rec),
            Some(store) => store.record(rec),
            None => {}
        }
    }

    /// Record the end of an execution: `rec` queued again (`retry`) or
    /// ended.
    fn write_end(&self, rec: &mut RunRecord, retry: bool) {
        if retry {
            self.record_attempt(rec, false);
        } else {
            self.record_end(rec, false);
        }
    }

    /// Execute the job's function (its `running` state is recorded) and
    /// record the end state ([`Runner::record_outcome`]). The Result is in
    /// the returned outcome, not in the returned record.
    fn execute(&self, mut rec: RunRecord, job: &Job, end: log::Level) -> (RunRecord, Outcome) {
        log::debug!("run {} started", rec.run);
        let started = Instant::now();
        let output = self.output_file(&rec.run, job);
        let live = self.register(&rec.run);
        let outcome = match &live {
            Ok(live) => {
                let mut outcome = self.attempts(&mut rec, job, &live.handle, output.as_ref());
                // The end is decided here, under the handle's lock: a
                // cancel accepted before this wins, whatever the steps
                // did; one after it is refused (`run_ended`).
                if live.handle.end() {
                    cancelled(&mut outcome);
                    rec.superseded_by = live.handle.superseded_by();
                }
                // No cancel finds the run once its end is being recorded;
                // followers waiting on the handle learn of the end once it
                // is recorded.
                live.unlist();
                outcome
            }
            Err(e) => no_handle(e),
        };
        rec.output = output.as_ref().and_then(|out| kept_inline(out, &outcome));
        drop(output);
        self.ship_end(&rec.run);
        let mut outcome = outcome;
        self.record_outcome(&mut rec, job, &mut outcome);
        drop(live);
        lock(&self.drain).tick();
        self.ended.notify_all();
        self.metrics.run(
            rec.owner,
            &rec.function,
            rec.state.name(),
            started.elapsed(),
        );
        if let (Some(id), Some(at), RunState::Finished) =
            (rec.owner.program(), rec.finished_at, rec.state)
        {
            // The same time a restart reads back from the record.
            self.metrics.succeeded(id, &rec.function, at.timestamp());
        }
        log::log!(
            end,
            "run {} {}/{} {} in {}ms",
            rec.run,
            rec.owner,
            rec.function,
            rec.state.name(),
            started.elapsed().as_millis()
        );
        (rec, outcome)
    }

    /// Record the end state of `rec` from `outcome`. An async run of a
    /// `retry_on_restart` function stopped by a shutdown is recorded
    /// `queued` again, to run at the next start.
    ///
    /// The Result moves into the record while it is written and back into
    /// `outcome` after (the sync answer is made from it): it holds up to
    /// `max_output_bytes` per step, and a copy doubled a run's peak memory.
    fn record_outcome(&self, rec: &mut RunRecord, job: &Job, outcome: &mut Outcome) {
        rec.finished_at = Some(Time::now());
        rec.steps.clone_from(&outcome.steps);
        match &outcome.error {
            None => {
                rec.state = RunState::Finished;
                rec.result = Some(Value::Array(std::mem::take(&mut outcome.result)));
            }
            Some(e) => {
                rec.state = match e {
                    StepError::TimedOut { .. } => RunState::TimedOut,
                    StepError::Aborted { .. } => RunState::Interrupted,
                    StepError::Cancelled { .. } => RunState::Cancelled,
                    _ => RunState::Failed,
                };
                // Cancelled with no step run: while it waited for its
                // next attempt (no step was stopped).
                let why = match e {
                    StepError::Cancelled { .. } if outcome.steps.is_empty() => {
                        "the run was cancelled before a step started".to_string()
                    }
                    e => describe(e),
                };
                rec.error = Some(match &rec.superseded_by {
                    Some(by) => format!("{why}, superseded by run {by} of its group"),
                    None => why,
                });
                rec.stdout = failed_stdout(e);
                rec.stderr = failed_stderr(e);
            }
        }
        let function = job.program.function(&job.function);
        if rec.state == RunState::Interrupted && rec.retry_at.is_none() {
            // `[functions.retry]` with `on` interrupted: the next attempt
            // at the next start, after its backoff.
            if let Some(r) = function.and_then(|f| f.retry.as_ref()) {
                let n = attempt_number(rec);
                if r.on.interrupted && n < r.attempts {
                    note_attempt(rec, n, r.wait(n));
                }
            }
        }
        // Interrupted while waiting for its next attempt: it waits again
        // after the restart.
        let retry = rec.input.is_some()
            && match rec.state {
                RunState::Interrupted => {
                    rec.retry_at.is_some() || function.is_some_and(|f| f.retry_on_restart)
                }
                // Noted above for its next attempt.
                RunState::Queued => true,
                _ => false,
            };
        if retry {
            rec.state = RunState::Queued;
            (rec.started_at, rec.finished_at, rec.error) = (None, None, None);
            (rec.stdout, rec.stderr) = (None, None);
            rec.steps.clear();
        } else {
            rec.input = None;
            rec.retry_at = None;
        }
        if self.disowned(&rec.run) {
            log::warn!(
                "run {}: state {} not recorded: this instance's lease lapsed and another \
                 process of its name took the run",
                rec.run,
                rec.state.name()
            );
        } else if !self.hold_end(rec, retry) {
            self.write_end(rec, retry);
        }
        if let Some(Value::Array(result)) = rec.result.take() {
            outcome.result = result;
        }
    }

    /// Execute the job's function, and again while an attempt ends in an
    /// outcome its `[functions.retry]` retries and attempts are left: each
    /// failed attempt goes into the record's `Attempts`, and the run is
    /// recorded `queued` with its `RetryAt` (durably, with its input, so a
    /// kill -9 does not lose the pending attempt) until then. The run keeps
    /// its slot and its handle meanwhile: a cancel stops the wait and the
    /// remaining attempts; a shutdown leaves it queued for the next start.
    /// The outcome of the last attempt.
    fn attempts(
        &self,
        rec: &mut RunRecord,
        job: &Job,
        handle: &RunHandle,
        output: Option<&OutputFile>,
    ) -> Outcome {
        let retry = job
            .program
            .function(&job.function)
            .and_then(|f| f.retry.clone());
        loop {
            if let Some(at) = rec.retry_at {
                // Not held in memory through the wait (`output::HOLD`).
                if output.is_some_and(OutputFile::release) {
                    handle.wrote();
                }
                if !wait_until(at, handle) {
                    return Outcome {
                        result: Vec::new(),
                        steps: Vec::new(),
                        error: Some(StepError::Aborted { step: 0 }),
                    };
                }
                rec.retry_at = None;
                rec.state = RunState::Running;
                rec.started_at = Some(Time::now());
                self.record_attempt(rec, false);
            }
            let outcome = self.execute_with(job, handle, output, Some(&rec.run));
            let Some(r) = &retry else { return outcome };
            let n = attempt_number(rec);
            let retried = match state_of(&outcome) {
                RunState::Failed => r.on.failed,
                RunState::TimedOut => r.on.timed_out,
                _ => false,
            };
            if !retried || n >= r.attempts || handle.signal().is_triggered() {
                return outcome;
            }
            rec.error = outcome.error.as_ref().map(describe);
            rec.state = state_of(&outcome);
            let wait = r.wait(n);
            let chain = r
                .each_attempt
                .then(|| self.attempt_callbacks(rec))
                .flatten();
            note_attempt(rec, n, wait);
            self.record_attempt(rec, true);
            if let (Some(c), Some(chain)) = (self.callbacks(), chain) {
                c.submit(chain);
            }
            log::info!(
                "run {} attempt {n} of {} ended {}; the next in {} ms",
                rec.run,
                r.attempts,
                rec.attempts.last().map_or("", |a| a.state.name()),
                wait.as_millis()
            );
        }
    }

    /// `callbacks = "each"`: spool the run's callbacks for the attempt
    /// that just ended (the record as it ended, `State` its outcome), as
    /// new entries of `Callbacks` with new ids, leaving the ones for the
    /// final outcome waiting. The chain to submit once `rec` is written.
    fn attempt_callbacks(&self, rec: &mut RunRecord) -> Option<Chain> {
        let service = self.callbacks()?;
        let finals: Vec<_> = rec
            .callbacks
            .iter()
            .filter(|d| d.state == DeliveryState::Waiting)
            .cloned()
            .collect();
        if finals.is_empty() {
            return None;
        }
        // Only the new entries wait in the copy the service sees.
        let mut ended = rec.clone();
        for d in &mut ended.callbacks {
            if d.state == DeliveryState::Waiting {
                // Any other state: the service spools waiting ones only.
                d.state = DeliveryState::Pending;
            }
        }
        for d in finals {
            let mut each = d;
            each.delivery = hex::encode(rand::random::<[u8; 16]>());
            ended.callbacks.push(each);
        }
        let chain = service.ended(&mut ended);
        // The new entries (now pending) join the record; the final ones
        // stay waiting.
        let known = rec.callbacks.len();
        rec.callbacks.extend(ended.callbacks.drain(known..));
        chain
    }

    /// Execute the job's function without slots or records (`trigd run`
    /// uses this directly).
    pub fn execute_only(&self, job: &Job) -> Outcome {
        match RunHandle::new() {
            Ok(handle) => self.execute_with(job, &handle, None, None),
            Err(e) => no_handle(&e),
        }
    }

    /// The file that keeps the output of run `run` (none for `trigd run`;
    /// created at the first output, and when it cannot be, the run goes on
    /// without it).
    fn output_file(&self, run: &str, job: &Job) -> Option<OutputFile> {
        let path = self.store.as_ref()?.output_path(run);
        Some(OutputFile::new(&path, job.cfg.server.max_output_bytes))
    }

    /// Execute the job's function under `handle` (its stop signal and its
    /// live output), keeping the output in `output`; `run` names the run
    /// to its steps (`TRIGD_RUN_ID`).
    fn execute_with(
        &self,
        job: &Job,
        handle: &RunHandle,
        output: Option<&OutputFile>,
        run: Option<&str>,
    ) -> Outcome {
        #[cfg(test)]
        tests::maybe_panic(job);
        let Some(function) = job.program.function(&job.function) else {
            return Outcome {
                result: Vec::new(),
                steps: Vec::new(),
                error: Some(StepError::Spawn {
                    step: 0,
                    message: "function vanished".into(),
                }),
            };
        };
        let on_spawn = |pgid: Option<u32>| {
            if pgid.is_some() {
                self.children.fetch_add(1, Ordering::Relaxed);
            } else {
                self.children.fetch_sub(1, Ordering::Relaxed);
            }
        };
        let on_output = |stream: Stream, data: &[u8]| {
            if let Some(out) = output {
                out.push(stream, data);
            }
            handle.wrote();
        };
        let release_output = |now: Instant| match output.map(|out| out.release_due(now)) {
            Some(Held::Until(at)) => Some(at),
            Some(Held::Released) => {
                handle.wrote();
                None
            }
            Some(Held::Nothing) | None => None,
        };
        let ctx = step::Ctx {
            program: &job.program,
            vars: &job.vars,
            path_env: &self.path_env,
            max_output_bytes: job.cfg.server.max_output_bytes,
            kill_grace: job.cfg.server.kill_grace,
            deadline: Instant::now() + function.timeout,
            abort: handle.signal(),
            on_spawn: &on_spawn,
            stdin: job
                .body_file
                .as_ref()
                .filter(|_| job.stdin_body)
                .map(|f| f.path()),
            on_output: &on_output,
            release_output: &release_output,
            run_id: run,
        };
        step::run_function(&ctx, function, &job.values)
    }

    /// Make run `run` findable by [`Runner::handle`] until the returned
    /// guard is dropped. A run that starts while shutdown is stopping the
    /// remaining runs is stopped at once.
    fn register(&self, run: &str) -> io::Result<Registered<'_>> {
        let handle = Arc::new(RunHandle::new()?);
        let mut live = lock(&self.live);
        if live.aborting {
            handle.abort();
        }
        live.runs.insert(run.to_string(), Arc::clone(&handle));
        Ok(Registered {
            runner: self,
            run: run.to_string(),
            handle,
        })
    }

    /// The handle of run `run` while it executes (`None` when it is queued,
    /// finished or unknown).
    pub fn handle(&self, run: &str) -> Option<Arc<RunHandle>> {
        lock(&self.live).runs.get(run).cloned()
    }

    /// Runs executing now.
    pub fn in_flight(&self) -> usize {
        lock(&self.slots).used
    }

    /// Async runs waiting for a slot.
    pub fn queued(&self) -> usize {
        lock(&self.slots).queue.len()
    }

    /// Child processes alive now.
    pub fn children(&self) -> usize {
        self.children.load(Ordering::Relaxed)
    }

    /// `fdatasync` calls made on the run log (0 without one).
    pub fn run_log_fsyncs(&self) -> u64 {
        self.store.as_ref().map_or(0, |s| s.fsyncs())
    }

    /// Stop accepting runs; give running and waiting runs `grace` to
    /// finish (waiting runs still start as slots free up). Then waiting
    /// sync callers get `shutting_down`, async runs still queued stay
    /// recorded `queued` (they run at the next start), and running runs'
    /// process groups are stopped (recorded `interrupted`, or `queued`
    /// again with `retry_on_restart`); wait for them to be reaped.
    pub fn shutdown(&self, grace: Duration) {
        lock(&self.slots).closing = true;
        if self.wait_idle(grace) {
            return;
        }
        {
            let mut s = lock(&self.slots);
            s.stopping = true;
            for w in s.drain_queue() {
                if let Waiter::Sync(t) = w {
                    t.wake.notify_one();
                }
            }
        }
        log::warn!("shutdown grace of {grace:?} passed; stopping the remaining runs");
        let mut live = lock(&self.live);
        live.aborting = true;
        for handle in live.runs.values() {
            handle.abort();
        }
        drop(live);
        // Steps stop within their kill grace; wait for them to record.
        self.wait_idle(Duration::from_secs(60));
    }

    /// Wait until no run executes or waits in the queue, at most `limit`;
    /// whether it got there.
    fn wait_idle(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let mut s = lock(&self.slots);
        while s.used > 0 || !s.queue.is_empty() {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            s = self
                .freed
                .wait_timeout(s, deadline - now)
                .map_or_else(|e| e.into_inner().0, |r| r.0);
        }
        true
    }
}

/// Whether deliveries of `rec` are out before its end (`callbacks =
/// "each"`): the delivery service records their progress in the kept
/// record while the runner's copy still says `pending`.
fn sent_before_the_end(rec: &RunRecord) -> bool {
    rec.callbacks
        .iter()
        .any(|d| d.state != DeliveryState::Waiting)
}

/// Wake a sync caller handed a slot; an async run handed one comes back,
/// to be started. Called without the slots lock.
fn wake(granted: Granted) -> Option<Queued> {
    match granted {
        Granted::Sync(t) => {
            t.wake.notify_one();
            None
        }
        Granted::Async(q) => Some(q),
    }
}

/// The stdout tail a failed step left, when it printed anything.
fn failed_stdout(e: &StepError) -> Option<String> {
    match e {
        StepError::Failed { stdout_tail, .. } if !stdout_tail.is_empty() => {
            Some(stdout_tail.clone())
        }
        _ => None,
    }
}

/// The `Stderr` of a failed call's answer (`invoke::answer`),
/// kept in the record for a repeat's answer.
fn failed_stderr(e: &StepError) -> Option<String> {
    match e {
        StepError::Failed { stderr_tail, .. } => Some(stderr_tail.clone()),
        StepError::Spawn { message, .. } => Some(message.clone()),
        _ => None,
    }
}

/// A one-line description of why a run did not finish, for its record.
pub fn describe(e: &StepError) -> String {
    match e {
        StepError::Spawn { step, message } => {
            format!("step {step} could not be started: {message}")
        }
        StepError::Failed {
            step,
            exit_code: Some(c),
            stderr_tail,
            ..
        } => {
            format!(
                "step {step} exited with status {c}: {}",
                stderr_tail.trim_end()
            )
        }
        StepError::Failed {
            step,
            signal,
            stderr_tail,
            ..
        } => {
            let sig = signal.map_or_else(|| "?".into(), |s| s.to_string());
            format!(
                "step {step} was killed by signal {sig}: {}",
                stderr_tail.trim_end()
            )
        }
        StepError::TimedOut { step } => format!("step {step} did not finish within the timeout"),
        StepError::Aborted { step } => format!("step {step} was stopped: trigd shut down"),
        StepError::Cancelled { step } => format!("step {step} was stopped: the run was cancelled"),
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
