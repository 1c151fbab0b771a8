//! Where a run starts: run slots, the bounded async queue, and the run
//! records written along the way.
//!
//! `max_concurrent_runs` slots are shared by sync and async runs. A sync run
//! takes a free slot at once or is refused with `busy`, and executes on the
//! caller's (HTTP worker's) thread. An async run is first recorded durably,
//! then either started on a detached thread (a slot was free) or put in a
//! queue of at most `max_queued_runs`; a finishing run hands its slot straight
//! to the next runnable queued run, so no dispatcher thread is needed. A
//! function's `concurrency = N` is honoured on top of the global slots.
//!
//! A taken slot is a [`Slot`] guard: it is given back when the guard is
//! dropped, on every path out of a run, a panic included. Each executing
//! run has a [`RunHandle`] (stop it, read its output so far), found by id
//! with [`Runner::handle`].
//!
//! The execution of one function (processes, timeouts, output) lives in
//! [`step`].

pub mod handle;
pub mod step;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::config::{Config, Program};
use crate::metrics::Metrics;
use crate::output::OutputFile;
use crate::store::{new_run_id, now_rfc3339, Origin, RunRecord, RunState, RunStore};
use handle::{RunHandle, Stream};
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
    /// The tool environment it was started through, `<tool>/<environment>`.
    pub tool: Option<String>,
    /// The raw request body in a temporary file, kept until the job is
    /// dropped (after the run), when the trigger reads it as a file.
    pub body_file: Option<Arc<crate::receive::body_file::BodyFile>>,
    /// Give `body_file` to every step on stdin (else stdin is empty).
    pub stdin_body: bool,
    /// Temporary files the run reads (a hook's `pass-file-to-command`),
    /// removed when the job is dropped, after the run.
    #[allow(dead_code)] // never read: held so that its Drop removes the files
    pub files: Vec<crate::receive::body_file::BodyFile>,
}

impl Job {
    fn slot_key(&self) -> (u64, String) {
        (self.program.id, self.function.clone())
    }

    fn concurrency(&self) -> usize {
        self.program
            .function(&self.function)
            .and_then(|f| f.concurrency)
            .unwrap_or(usize::MAX)
    }
}

/// Why a run was not started. The HTTP layer words it.
#[derive(Debug)]
pub enum RunError {
    /// Every one of the `slots` run slots is in use (sync run).
    NoSlot {
        /// `max_concurrent_runs`.
        slots: usize,
    },
    /// The function already runs `limit` times, its `concurrency` (sync run).
    FunctionLimit {
        /// The function.
        function: String,
        /// Its `concurrency`.
        limit: usize,
    },
    /// Every slot is in use and the queue holds `queued` runs, its limit
    /// (async run).
    QueueFull {
        /// `max_queued_runs`.
        queued: usize,
    },
    /// The accepted run could not be recorded durably.
    Storage(io::Error),
    /// trigd is shutting down.
    ShuttingDown,
}

struct Queued {
    rec: RunRecord,
    job: Job,
}

/// What [`Runner::cancel`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancel {
    /// The run was queued: it is recorded `cancelled` and will not start.
    Dequeued,
    /// The run is executing: it is being stopped and will end `cancelled`.
    Stopping,
    /// The run is neither queued nor executing here (it has ended).
    NotActive,
}

/// A sync run holding its slot, not yet executed.
pub struct SyncRun {
    slot: Slot,
    rec: RunRecord,
    job: Job,
}

impl SyncRun {
    /// The run's id.
    pub fn id(&self) -> &str {
        &self.rec.run
    }

    /// Execute the run, record it, and give the slot back.
    pub fn execute(self) -> Outcome {
        let SyncRun { slot, rec, job } = self;
        let (_, outcome) = slot.runner.execute(rec, &job);
        drop(slot);
        outcome
    }
}

/// Slot accounting; behind one mutex.
#[derive(Default)]
struct Slots {
    used: usize,
    max: usize,
    per_fn: HashMap<(u64, String), usize>,
    queue: VecDeque<Queued>,
    /// Queue places promised to runs being recorded right now.
    reserved: usize,
    /// No new runs are accepted (shutdown started).
    closing: bool,
    /// Queued runs are no longer started (the shutdown grace is over).
    stopping: bool,
}

impl Slots {
    fn fn_free(&self, job: &Job) -> bool {
        self.per_fn.get(&job.slot_key()).copied().unwrap_or(0) < job.concurrency()
    }

    fn take(&mut self, job: &Job) {
        self.used += 1;
        *self.per_fn.entry(job.slot_key()).or_default() += 1;
    }

    fn release_key(&mut self, key: (u64, String)) {
        if let Some(n) = self.per_fn.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                self.per_fn.remove(&key);
            }
        }
    }

    /// Remove the first queued run whose function has room.
    fn next_runnable(&mut self) -> Option<Queued> {
        if self.stopping {
            return None;
        }
        let i = self.queue.iter().position(|q| self.fn_free(&q.job))?;
        self.queue.remove(i)
    }
}

/// A taken run slot (the global one and the function's share). Dropping it
/// gives both back, wakes [`Runner::wait_idle`] and starts the queued runs
/// that now fit: a run that ends by a panic frees its slot like any other.
struct Slot {
    runner: Arc<Runner>,
    /// The function whose share this slot holds; `None` once given back.
    key: Option<(u64, String)>,
    /// Start queued runs when dropped.
    dispatch: bool,
}

impl Slot {
    /// Count a slot for `job` as taken; the caller holds the lock on `s`
    /// and has checked that there is room.
    fn take(runner: &Arc<Runner>, s: &mut Slots, job: &Job) -> Slot {
        s.take(job);
        Slot {
            runner: Arc::clone(runner),
            key: Some(job.slot_key()),
            dispatch: true,
        }
    }

    /// The run of this slot has ended: give the function's share back and
    /// keep the slot for the next runnable queued run, if there is one
    /// (and a reload did not lower the limit below the slots in use).
    fn hand_on(&mut self) -> Option<Queued> {
        let mut s = lock(&self.runner.slots);
        if let Some(key) = self.key.take() {
            s.release_key(key);
        }
        let next = if s.used <= s.max {
            s.next_runnable()
        } else {
            None
        };
        if let Some(q) = &next {
            *s.per_fn.entry(q.job.slot_key()).or_default() += 1;
            self.key = Some(q.job.slot_key());
        }
        next
    }

    /// Give the slot back without starting queued runs.
    fn give_back_quietly(mut self) {
        self.dispatch = false;
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        {
            let mut s = lock(&self.runner.slots);
            if let Some(key) = self.key.take() {
                s.release_key(key);
            }
            s.used -= 1;
        }
        self.runner.freed.notify_all();
        if self.dispatch {
            self.runner.dispatch();
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

/// Keeps a run's handle in [`Live`] while it executes.
struct Registered<'a> {
    runner: &'a Runner,
    run: String,
    handle: Arc<RunHandle>,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        lock(&self.runner.live).runs.remove(&self.run);
    }
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
    live: Mutex<Live>,
    path_env: String,
    children: AtomicUsize,
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
            live: Mutex::default(),
            path_env,
            children: AtomicUsize::new(0),
        }
    }

    /// Run `job` now on this thread and return its id and outcome.
    ///
    /// # Errors
    /// [`RunError::NoSlot`] or [`RunError::FunctionLimit`] when no slot (or
    /// no slot of the function) is free.
    pub fn run_sync(self: &Arc<Self>, job: Job) -> Result<(String, Outcome), RunError> {
        let run = self.begin_sync(job)?;
        let id = run.id().to_string();
        Ok((id, run.execute()))
    }

    /// Take a slot for `job` as a sync run, to be executed with
    /// [`SyncRun::execute`] (on whichever thread; a streamed sync call
    /// executes it on its own thread while the caller follows the output).
    ///
    /// # Errors
    /// As [`Runner::run_sync`].
    pub fn begin_sync(self: &Arc<Self>, job: Job) -> Result<SyncRun, RunError> {
        let slot = {
            let mut s = lock(&self.slots);
            if s.closing {
                return Err(RunError::ShuttingDown);
            }
            s.max = job.cfg.server.max_concurrent_runs;
            if s.used >= s.max {
                return Err(RunError::NoSlot { slots: s.max });
            }
            if !s.fn_free(&job) {
                return Err(RunError::FunctionLimit {
                    function: job.function.clone(),
                    limit: job.concurrency(),
                });
            }
            Slot::take(self, &mut s, &job)
        };
        let rec = self.new_record(&job, false);
        Ok(SyncRun { slot, rec, job })
    }

    /// Stop run `id`: a queued run is taken off the queue and recorded
    /// `cancelled` at once; a running one is stopped (SIGTERM to its
    /// process group, SIGKILL after `kill_grace`) and ends `cancelled`.
    pub fn cancel(&self, id: &str) -> Cancel {
        // A run passes from recorded to queued or live without the
        // record showing it: look again for a moment before giving up.
        for _ in 0..50 {
            let queued = {
                let mut s = lock(&self.slots);
                let i = s.queue.iter().position(|q| q.rec.run == id);
                i.and_then(|i| s.queue.remove(i))
            };
            if let Some(mut q) = queued {
                q.rec.state = RunState::Cancelled;
                q.rec.finished_at = Some(now_rfc3339());
                q.rec.error = Some("the run was cancelled before it started".into());
                if let Some(store) = &self.store {
                    if let Err(e) = store.append(&q.rec, true) {
                        log::error!("run {id}: cannot record its cancel: {e}");
                    }
                }
                self.metrics
                    .run(q.rec.program, q.rec.state.name(), Duration::ZERO);
                self.freed.notify_all();
                return Cancel::Dequeued;
            }
            if let Some(h) = self.handle(id) {
                h.cancel();
                return Cancel::Stopping;
            }
            thread::sleep(Duration::from_millis(10));
        }
        Cancel::NotActive
    }

    /// Record `job` durably, then start it (or queue it) and return its id.
    ///
    /// # Errors
    /// [`RunError::QueueFull`] when the queue is full, [`RunError::Storage`]
    /// when the record cannot be written: nothing is accepted that is not
    /// recorded.
    pub fn start_async(self: &Arc<Self>, job: Job) -> Result<String, RunError> {
        let slot = {
            let mut s = lock(&self.slots);
            if s.closing {
                return Err(RunError::ShuttingDown);
            }
            s.max = job.cfg.server.max_concurrent_runs;
            let max_queued = job.cfg.server.max_queued_runs;
            if s.used < s.max && s.fn_free(&job) && s.queue.is_empty() {
                Some(Slot::take(self, &mut s, &job))
            } else if s.queue.len() + s.reserved < max_queued {
                s.reserved += 1;
                None
            } else {
                return Err(RunError::QueueFull { queued: max_queued });
            }
        };
        let rec = self.new_record(&job, true);
        let id = rec.run.clone();
        if let Some(store) = &self.store {
            if let Err(e) = store.append(&rec, true) {
                match slot {
                    Some(slot) => slot.give_back_quietly(),
                    None => lock(&self.slots).reserved -= 1,
                }
                return Err(RunError::Storage(e));
            }
        }
        match slot {
            Some(slot) => self.spawn_worker(slot, Queued { rec, job }),
            None => {
                {
                    let mut s = lock(&self.slots);
                    s.reserved -= 1;
                    s.queue.push_back(Queued { rec, job });
                }
                self.dispatch();
            }
        }
        Ok(id)
    }

    /// Start queued runs while slots are free.
    fn dispatch(self: &Arc<Self>) {
        loop {
            let (slot, next) = {
                let mut s = lock(&self.slots);
                if s.used >= s.max {
                    return;
                }
                let Some(q) = s.next_runnable() else { return };
                (Slot::take(self, &mut s, &q.job), q)
            };
            self.spawn_worker(slot, next);
        }
    }

    /// Run `first` on a detached thread, then keep the slot for the next
    /// runnable queued run until the queue has none.
    fn spawn_worker(self: &Arc<Self>, slot: Slot, first: Queued) {
        let me = Arc::clone(self);
        // The slot goes to the thread only once the thread exists, so that a
        // failed spawn gives it back without starting the next queued run
        // (which would fail the same way).
        let (give, take) = mpsc::sync_channel::<Slot>(1);
        let spawned = thread::Builder::new().name("run".into()).spawn(move || {
            let Ok(mut slot) = take.recv() else { return };
            let mut cur = first;
            loop {
                me.execute(cur.rec, &cur.job);
                match slot.hand_on() {
                    Some(q) => cur = q,
                    None => return,
                }
            }
        });
        match spawned {
            Ok(_) => {
                if let Err(mpsc::SendError(slot)) = give.send(slot) {
                    slot.give_back_quietly();
                }
            }
            Err(e) => {
                // The closure (and the run in it) is gone; the record stays
                // `queued` on disk and becomes `interrupted` at the next start.
                log::error!("cannot start a run thread: {e}");
                slot.give_back_quietly();
            }
        }
    }

    fn new_record(&self, job: &Job, is_async: bool) -> RunRecord {
        RunRecord {
            run: new_run_id(&job.cfg.server.instance),
            state: RunState::Queued,
            program: job.program.id,
            function: job.function.clone(),
            r#async: is_async,
            by: job.by.clone(),
            tool: job.tool.clone(),
            created_at: now_rfc3339(),
            started_at: None,
            finished_at: None,
            steps: Vec::new(),
            result: None,
            error: None,
            stdout: None,
        }
    }

    fn record(&self, rec: &RunRecord) {
        if let Some(store) = &self.store {
            if let Err(e) = store.append(rec, false) {
                log::error!("run {}: cannot record state {:?}: {e}", rec.run, rec.state);
            }
        }
    }

    /// Execute the job's function, recording `running` and the end state.
    fn execute(&self, mut rec: RunRecord, job: &Job) -> (RunRecord, Outcome) {
        rec.state = RunState::Running;
        rec.started_at = Some(now_rfc3339());
        self.record(&rec);
        log::info!("run {} started", rec.run);
        let started = Instant::now();
        let output = self.output_file(&rec.run, job);
        let outcome = match self.register(&rec.run) {
            Ok(live) => {
                let mut outcome = self.execute_with(job, &live.handle, output.as_ref());
                if let Some(StepError::Aborted { step }) = outcome.error {
                    if live.handle.is_cancelled() {
                        outcome.error = Some(StepError::Cancelled { step });
                    }
                }
                outcome
            }
            Err(e) => no_handle(&e),
        };
        drop(output);
        rec.finished_at = Some(now_rfc3339());
        rec.steps = outcome
            .steps
            .iter()
            .filter_map(|s| serde_json::to_value(s).ok())
            .collect();
        match &outcome.error {
            None => {
                rec.state = RunState::Finished;
                rec.result = Some(Value::Array(outcome.result.clone()));
            }
            Some(e) => {
                rec.state = match e {
                    StepError::TimedOut { .. } => RunState::TimedOut,
                    StepError::Aborted { .. } => RunState::Interrupted,
                    StepError::Cancelled { .. } => RunState::Cancelled,
                    _ => RunState::Failed,
                };
                rec.error = Some(describe(e));
                rec.stdout = failed_stdout(e);
            }
        }
        self.record(&rec);
        self.metrics
            .run(rec.program, rec.state.name(), started.elapsed());
        log::info!(
            "run {} {}/{} {}",
            rec.run,
            rec.program,
            rec.function,
            rec.state.name()
        );
        (rec, outcome)
    }

    /// Execute the job's function without slots or records (`trigd run`
    /// uses this directly).
    pub fn execute_only(&self, job: &Job) -> Outcome {
        match RunHandle::new() {
            Ok(handle) => self.execute_with(job, &handle, None),
            Err(e) => no_handle(&e),
        }
    }

    /// The file that keeps the output of run `run` (none for `trigd run`,
    /// or when it cannot be created: the run goes on without it).
    fn output_file(&self, run: &str, job: &Job) -> Option<OutputFile> {
        let path = self.store.as_ref()?.output_path(run);
        OutputFile::create(&path, job.cfg.server.max_output_bytes)
            .map_err(|e| log::error!("run {run}: cannot keep its output: {e}"))
            .ok()
    }

    /// Execute the job's function under `handle` (its stop signal and its
    /// live output), keeping the output in `output`.
    fn execute_with(&self, job: &Job, handle: &RunHandle, output: Option<&OutputFile>) -> Outcome {
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
            handle.push(stream, data);
            if let Some(out) = output {
                out.push(stream, data);
            }
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

    /// Stop accepting runs; give running and queued runs `grace` to
    /// finish (queued runs still start as slots free up); then mark the
    /// runs still queued `interrupted`, stop the process groups of running
    /// ones (recorded `interrupted` too) and wait for them to be reaped.
    pub fn shutdown(&self, grace: Duration) {
        lock(&self.slots).closing = true;
        if self.wait_idle(grace) {
            return;
        }
        let dropped: Vec<Queued> = {
            let mut s = lock(&self.slots);
            s.stopping = true;
            s.queue.drain(..).collect()
        };
        for mut q in dropped {
            q.rec.state = RunState::Interrupted;
            q.rec.finished_at = Some(now_rfc3339());
            q.rec.error = Some("trigd shut down before the run started".into());
            if let Some(store) = &self.store {
                let _ = store.append(&q.rec, true);
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

/// The stdout tail a failed step left, when it printed anything.
fn failed_stdout(e: &StepError) -> Option<String> {
    match e {
        StepError::Failed { stdout_tail, .. } if !stdout_tail.is_empty() => {
            Some(stdout_tail.clone())
        }
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
mod tests {
    use super::*;
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::path::PathBuf;

    /// The function of a run that panics when it executes (a bug inside it).
    const PANICS: &str = "panics";

    /// A bug inside a run, where a test asks for one.
    pub(super) fn maybe_panic(job: &Job) {
        if job.function == PANICS {
            panic!("a bug inside a run (test)");
        }
    }

    /// A job whose run panics.
    fn panicking(server: &str) -> Job {
        job_of(PANICS, server, "true")
    }

    fn job(server: &str, script: &str) -> Job {
        job_of("f", server, script)
    }

    /// A job of function `name`, whose one step runs `script`.
    fn job_of(name: &str, server: &str, script: &str) -> Job {
        let config = format!("[server]\n{server}\n");
        let program = format!(
            "id = 1\nname = \"p\"\n[[functions]]\nname = {name:?}\nsteps = [{{ shell = {script:?} }}]\n\
             webhook = {{ active = true, outputs = [] }}\n"
        );
        let dir = std::env::temp_dir();
        let progs = vec![(PathBuf::from("programs/p.toml"), program)];
        let cfg = crate::config::load_str(&dir.join("config.toml"), &config, &progs)
            .unwrap_or_else(|e| panic!("{e:?}"));
        let cfg = Arc::new(cfg);
        let program = Arc::clone(cfg.program(1).expect("program 1"));
        Job {
            cfg,
            program,
            function: name.into(),
            values: Vec::new(),
            vars: BTreeMap::new(),
            by: Default::default(),
            tool: None,
            body_file: None,
            stdin_body: false,
            files: Vec::new(),
        }
    }

    fn runner() -> Arc<Runner> {
        Arc::new(Runner::new(None, Arc::new(Metrics::default())))
    }

    #[test]
    fn a_panic_inside_a_run_gives_its_slot_back() {
        let r = runner();
        let j = panicking("max_concurrent_runs = 1");
        let panicked = catch_unwind(AssertUnwindSafe(|| r.run_sync(j)));
        assert!(panicked.is_err(), "the run should have panicked");
        assert_eq!(r.in_flight(), 0, "the slot was not given back");
        assert!(r.handle("any").is_none());
        assert!(lock(&r.live).runs.is_empty(), "the run's handle was left");

        // The only slot is free again: the next run starts and finishes.
        let (id, outcome) = r
            .run_sync(job("max_concurrent_runs = 1", "echo again"))
            .unwrap_or_else(|e| panic!("next run refused: {e:?}"));
        let hex = id.rsplit('-').next().unwrap_or("");
        assert!(
            hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()),
            "{id}"
        );
        assert_eq!(outcome.error, None);
        assert_eq!(outcome.result, vec![Value::String("again".into())]);
        assert_eq!(r.in_flight(), 0);
    }

    #[test]
    fn a_panic_inside_an_async_run_gives_its_slot_to_the_queued_run() {
        let r = runner();
        let server = "max_concurrent_runs = 1";
        r.start_async(panicking(server)).unwrap();
        let next = r.start_async(job(server, "echo next")).unwrap();
        // The queued run starts once the panicked one's slot is back, and
        // ends: nothing executes or waits any more.
        assert!(
            r.wait_idle(Duration::from_secs(20)),
            "slots in use {}, queued {}",
            r.in_flight(),
            r.queued()
        );
        assert!(r.handle(&next).is_none());
        let (_, outcome) = r.run_sync(job(server, "echo free")).unwrap();
        assert_eq!(outcome.result, vec![Value::String("free".into())]);
    }

    #[test]
    fn a_busy_run_says_why_in_data() {
        let r = runner();
        let slow = job("max_concurrent_runs = 1", "sleep 30");
        let r2 = Arc::clone(&r);
        let id = r.start_async(slow).unwrap();
        let until = Instant::now() + Duration::from_secs(20);
        while r.handle(&id).is_none() && Instant::now() < until {
            thread::sleep(Duration::from_millis(10));
        }
        match r2.run_sync(job("max_concurrent_runs = 1", "true")) {
            Err(RunError::NoSlot { slots: 1 }) => {}
            other => panic!("expected NoSlot, got {other:?}"),
        }
        r.handle(&id).expect("live run").abort();
        assert!(
            r.wait_idle(Duration::from_secs(20)),
            "aborted run still holds its slot"
        );
    }

    #[test]
    fn cancel_takes_a_queued_run_off_the_queue_and_stops_a_running_one() {
        let r = runner();
        let server = "max_concurrent_runs = 1\nkill_grace = \"1s\"";
        let running = r.start_async(job(server, "sleep 30")).unwrap();
        let queued = r.start_async(job(server, "echo never")).unwrap();
        assert_eq!(r.queued(), 1);
        assert_eq!(r.cancel(&queued), Cancel::Dequeued);
        assert_eq!(r.queued(), 0);
        let until = Instant::now() + Duration::from_secs(20);
        while r.handle(&running).is_none() && Instant::now() < until {
            thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(r.cancel(&running), Cancel::Stopping);
        assert!(
            r.wait_idle(Duration::from_secs(20)),
            "the cancelled run did not end"
        );
        assert_eq!(r.cancel(&running), Cancel::NotActive);

        // A sync run's outcome says it was cancelled.
        let run = r.begin_sync(job(server, "sleep 30")).unwrap();
        let id = run.id().to_string();
        let r2 = Arc::clone(&r);
        let canceller = thread::spawn(move || {
            let until = Instant::now() + Duration::from_secs(20);
            while r2.handle(&id).is_none() && Instant::now() < until {
                thread::sleep(Duration::from_millis(10));
            }
            r2.cancel(&id)
        });
        let outcome = run.execute();
        assert_eq!(canceller.join().unwrap(), Cancel::Stopping);
        assert_eq!(outcome.error, Some(StepError::Cancelled { step: 0 }));
    }

    #[test]
    fn the_handle_follows_output_and_aborts_the_run() {
        let r = runner();
        let script = "echo first; echo oops >&2; sleep 30; echo never";
        let id = r
            .start_async(job("max_concurrent_runs = 2", script))
            .unwrap();
        let until = Instant::now() + Duration::from_secs(20);
        let mut seen = Vec::new();
        while Instant::now() < until {
            if let Some(h) = r.handle(&id) {
                seen = h.output_since(Stream::Stdout, 0).data;
                if seen == b"first\n" && h.output_since(Stream::Stderr, 0).data == b"oops\n" {
                    break;
                }
            }
            thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(seen, b"first\n", "live stdout of the running step");
        // `sleep 30` outlives the bound below unless the abort stops it.
        r.handle(&id).expect("live run").abort();
        assert!(
            r.wait_idle(Duration::from_secs(20)),
            "the aborted run did not end"
        );
        assert!(r.handle(&id).is_none(), "a finished run has no handle");
    }
}
