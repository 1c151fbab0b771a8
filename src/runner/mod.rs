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
//! The execution of one function (processes, timeouts, output) lives in
//! [`step`].

pub mod step;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::config::{Config, Program};
use crate::metrics::Metrics;
use crate::store::{new_run_id, now_rfc3339, RunRecord, RunState, RunStore};
use crate::sys::AbortSignal;
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
    /// Who started it, for the record (`api_key:<name>`, …); never a secret.
    pub by: String,
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

/// Why a run was not started.
#[derive(Debug)]
pub enum RunError {
    /// No slot (sync) or no room in the queue (async).
    Busy(String),
    /// The accepted run could not be recorded durably.
    Storage(io::Error),
    /// trigd is shutting down.
    ShuttingDown,
}

struct Queued {
    rec: RunRecord,
    job: Job,
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

    /// Release the function's share of a slot (the global slot is handled by
    /// the caller: it may be handed on).
    fn release_fn(&mut self, job: &Job) {
        self.release_key(job.slot_key());
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

/// The run slots and queue of one server (or of `trigd run`).
pub struct Runner {
    store: Option<Arc<RunStore>>,
    /// Run counts and durations.
    pub metrics: Arc<Metrics>,
    slots: Mutex<Slots>,
    /// Signalled whenever `used` drops.
    freed: Condvar,
    abort: AbortSignal,
    path_env: String,
    children: AtomicUsize,
}

impl Runner {
    /// A runner that records runs in `store` (`None`: records nothing, for
    /// `trigd run`).
    ///
    /// # Errors
    /// The abort pipe cannot be created (out of file descriptors).
    pub fn new(store: Option<Arc<RunStore>>, metrics: Arc<Metrics>) -> io::Result<Runner> {
        let path_env =
            std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
        Ok(Runner {
            store,
            metrics,
            slots: Mutex::new(Slots::default()),
            freed: Condvar::new(),
            abort: AbortSignal::new()?,
            path_env,
            children: AtomicUsize::new(0),
        })
    }

    /// Run `job` now on this thread and return its id and outcome.
    ///
    /// # Errors
    /// [`RunError::Busy`] when no slot (or no slot of the function) is free.
    pub fn run_sync(self: &Arc<Self>, job: Job) -> Result<(String, Outcome), RunError> {
        {
            let mut s = lock(&self.slots);
            if s.closing {
                return Err(RunError::ShuttingDown);
            }
            s.max = job.cfg.server.max_concurrent_runs;
            if s.used >= s.max {
                return Err(RunError::Busy(format!(
                    "All {} run slots are in use. Retry after Retry-After seconds.",
                    s.max
                )));
            }
            if !s.fn_free(&job) {
                return Err(RunError::Busy(format!(
                    "Function '{}' already runs {} time(s), its concurrency limit. Retry later.",
                    job.function,
                    job.concurrency()
                )));
            }
            s.take(&job);
        }
        let rec = self.new_record(&job, false);
        let id = rec.run.clone();
        let (_, outcome) = self.execute(rec, &job);
        {
            let mut s = lock(&self.slots);
            s.release_fn(&job);
            s.used -= 1;
        }
        self.freed.notify_all();
        self.dispatch();
        Ok((id, outcome))
    }

    /// Record `job` durably, then start it (or queue it) and return its id.
    ///
    /// # Errors
    /// [`RunError::Busy`] when the queue is full, [`RunError::Storage`] when
    /// the record cannot be written: nothing is accepted that is not recorded.
    pub fn start_async(self: &Arc<Self>, job: Job) -> Result<String, RunError> {
        let start_now = {
            let mut s = lock(&self.slots);
            if s.closing {
                return Err(RunError::ShuttingDown);
            }
            s.max = job.cfg.server.max_concurrent_runs;
            let max_queued = job.cfg.server.max_queued_runs;
            if s.used < s.max && s.fn_free(&job) && s.queue.is_empty() {
                s.take(&job);
                true
            } else if s.queue.len() + s.reserved < max_queued {
                s.reserved += 1;
                false
            } else {
                return Err(RunError::Busy(format!(
                    "All run slots are in use and the queue is full ({max_queued} runs). Retry later."
                )));
            }
        };
        let rec = self.new_record(&job, true);
        let id = rec.run.clone();
        if let Some(store) = &self.store {
            if let Err(e) = store.append(&rec, true) {
                self.undo(&job, start_now);
                return Err(RunError::Storage(e));
            }
        }
        if start_now {
            self.spawn_worker(Queued { rec, job });
        } else {
            {
                let mut s = lock(&self.slots);
                s.reserved -= 1;
                s.queue.push_back(Queued { rec, job });
            }
            self.dispatch();
        }
        Ok(id)
    }

    fn undo(&self, job: &Job, had_slot: bool) {
        let mut s = lock(&self.slots);
        if had_slot {
            s.release_fn(job);
            s.used -= 1;
            drop(s);
            self.freed.notify_all();
        } else {
            s.reserved -= 1;
        }
    }

    /// Start queued runs while slots are free.
    fn dispatch(self: &Arc<Self>) {
        loop {
            let next = {
                let mut s = lock(&self.slots);
                if s.used >= s.max {
                    return;
                }
                let Some(q) = s.next_runnable() else { return };
                s.take(&q.job);
                q
            };
            self.spawn_worker(next);
        }
    }

    /// Run `first` on a detached thread, then keep the slot for the next
    /// runnable queued run until the queue has none.
    fn spawn_worker(self: &Arc<Self>, first: Queued) {
        let key = first.job.slot_key();
        let me = Arc::clone(self);
        let spawned = thread::Builder::new().name("run".into()).spawn(move || {
            let mut cur = first;
            loop {
                me.execute(cur.rec, &cur.job);
                let mut s = lock(&me.slots);
                s.release_fn(&cur.job);
                // Hand the slot on, unless a reload lowered the limit.
                let next = if s.used <= s.max {
                    s.next_runnable()
                } else {
                    None
                };
                match next {
                    Some(q) => {
                        *s.per_fn.entry(q.job.slot_key()).or_default() += 1;
                        cur = q;
                    }
                    None => {
                        s.used -= 1;
                        drop(s);
                        me.freed.notify_all();
                        return;
                    }
                }
            }
        });
        if let Err(e) = spawned {
            // The closure (and the run in it) is gone; the record stays
            // `queued` on disk and becomes `interrupted` at the next start.
            log::error!("cannot start a run thread: {e}");
            let mut s = lock(&self.slots);
            s.release_key(key);
            s.used -= 1;
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
        let started = Instant::now();
        let outcome = self.execute_only(job);
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
        let ctx = step::Ctx {
            program: &job.program,
            vars: &job.vars,
            path_env: &self.path_env,
            max_output_bytes: job.cfg.server.max_output_bytes,
            kill_grace: job.cfg.server.kill_grace,
            deadline: Instant::now() + function.timeout,
            abort: &self.abort,
            on_spawn: &on_spawn,
            stdin: job
                .body_file
                .as_ref()
                .filter(|_| job.stdin_body)
                .map(|f| f.path()),
        };
        step::run_function(&ctx, function, &job.values)
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
        self.abort.trigger();
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
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
