//! Execute one function of a program: its steps in order, as real child
//! processes.
//!
//! Owns: `{name}` substitution, the clean environment, the working
//! directory, the process group, the timeout (SIGTERM to the group, SIGKILL
//! after a grace), bounded capture of stdout and stderr (read concurrently
//! with `poll`, so no pipe deadlock), reaping, and building the Result array.
//! Does not own: slots, queues, run records (see `runner/mod.rs`).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::handle::Stream;
use crate::config::{self, Function, OutputMode, Program, Step};
use crate::state::record::{StepKind, StepReport};
use crate::sys::{self, AbortSignal};

/// What a function run may use, fixed for the whole run.
pub struct Ctx<'a> {
    /// The program the function belongs to (for `call` steps).
    pub program: &'a Program,
    /// Tool environment `vars` (empty for run-endpoint runs).
    pub vars: &'a BTreeMap<String, String>,
    /// PATH given to every step.
    pub path_env: &'a str,
    /// Bytes kept of stdout, and of stderr, per step.
    pub max_output_bytes: usize,
    /// Time between SIGTERM and SIGKILL.
    pub kill_grace: Duration,
    /// The whole run must finish by this instant.
    pub deadline: Instant,
    /// Closed when trigd shuts down past its grace: the run is stopped.
    pub abort: &'a AbortSignal,
    /// Called with the process group id right after each spawn, and with
    /// `None` once it is reaped (the runner tracks live groups).
    pub on_spawn: &'a (dyn Fn(Option<u32>) + Sync),
    /// A file every step reads as its stdin (opened afresh for each);
    /// `None`: stdin is empty.
    pub stdin: Option<&'a Path>,
    /// Called with every chunk read from a step's stdout or stderr, as it
    /// arrives (before any cap), for followers of the live run.
    pub on_output: &'a (dyn Fn(Stream, &[u8]) + Sync),
    /// Called with the time at each wake of a step's supervision: writes
    /// out the run's output held in memory once it is due
    /// (`state::output::HOLD`); when to call it again at the latest
    /// (`None`: only at the next wake).
    pub release_output: &'a (dyn Fn(Instant) -> Option<Instant> + Sync),
    /// The id of the run, given to every step as `TRIGD_RUN_ID`
    /// ([`super::orphans::RUN_ID_ENV`]); `None` (`trigd run`): no such
    /// variable.
    pub run_id: Option<&'a str>,
}

/// Why a function run did not finish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepError {
    /// The process could not be started (missing binary, bad workdir, …).
    Spawn {
        /// Index of the top-level step.
        step: usize,
        /// OS error text, with the program path.
        message: String,
    },
    /// Exited non-zero or was killed by a signal.
    Failed {
        /// Index of the top-level step.
        step: usize,
        /// Exit code, if it exited.
        exit_code: Option<i32>,
        /// Signal, if it was killed.
        signal: Option<i32>,
        /// Last bytes (at most 2 KiB) of its stderr, lossy UTF-8.
        stderr_tail: String,
        /// Last bytes (at most 2 KiB) of its stdout, lossy UTF-8.
        stdout_tail: String,
    },
    /// The deadline passed; the group got SIGTERM, then SIGKILL.
    TimedOut {
        /// Index of the top-level step.
        step: usize,
    },
    /// trigd shut down while the step ran; the group was stopped.
    Aborted {
        /// Index of the top-level step.
        step: usize,
    },
    /// The run was cancelled while the step ran (or before it started);
    /// the group was stopped. The runner turns `Aborted` into this when
    /// the stop was a cancel.
    Cancelled {
        /// Index of the top-level step.
        step: usize,
    },
}

/// The outcome of running a function.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// One element per step that finished, in order (JSON when the
    /// stdout is valid JSON, else the text minus one trailing newline; a
    /// `call` step's element is the callee's Result array).
    pub result: Vec<Value>,
    /// One report per step that was started.
    pub steps: Vec<StepReport>,
    /// `None` when every step succeeded.
    pub error: Option<StepError>,
}

/// Run `function` of `ctx.program` with `values` bound by position to
/// `function.inputs()` (the caller has checked the count).
pub fn run_function(ctx: &Ctx<'_>, function: &Function, values: &[String]) -> Outcome {
    let run = run_steps(ctx, function, values, ctx.deadline);
    Outcome {
        result: run.result,
        steps: run.steps,
        error: run.fail.map(|(step, fail)| fail.at(step)),
    }
}

/// Bytes of stderr kept for [`StepError::Failed`], and of stdout likewise.
const STDERR_TAIL: usize = 2048;

/// The last [`STDERR_TAIL`] bytes of a failed step's stdout, lossy UTF-8,
/// cut at a character boundary.
fn stdout_tail(kept: &[u8]) -> String {
    let text = String::from_utf8_lossy(&kept[kept.len().saturating_sub(STDERR_TAIL)..]);
    text.trim_start_matches('\u{FFFD}').to_string()
}
/// Poll tick when the kernel has no `pidfd_open`.
const FALLBACK_TICK: Duration = Duration::from_millis(20);
/// Size of one read from a pipe.
const READ_CHUNK: usize = 64 * 1024;
/// Size of the first reads of a run: a read that fills it grows the buffer
/// to [`READ_CHUNK`]. Most runs print little, and zeroing 64 KiB for each
/// was 40% of the instructions trigd spent on a sync run of `/bin/true`.
const FIRST_READ: usize = 4 * 1024;
/// Reads from one pipe per readiness, so one busy pipe cannot starve the other.
const READS_PER_WAKE: usize = 8;

/// A [`StepError`] before the top-level step index is known.
#[derive(Debug)]
enum Fail {
    Spawn(String),
    Failed {
        exit_code: Option<i32>,
        signal: Option<i32>,
        stderr_tail: String,
        stdout_tail: String,
    },
    TimedOut,
    Aborted,
}

impl Fail {
    fn at(self, step: usize) -> StepError {
        match self {
            Fail::Spawn(message) => StepError::Spawn { step, message },
            Fail::Failed {
                exit_code,
                signal,
                stderr_tail,
                stdout_tail,
            } => StepError::Failed {
                step,
                exit_code,
                signal,
                stderr_tail,
                stdout_tail,
            },
            Fail::TimedOut => StepError::TimedOut { step },
            Fail::Aborted => StepError::Aborted { step },
        }
    }
}

/// Result, reports and the first failure (with the index of the step of
/// *this* function that failed) of running a function's steps.
struct StepsRun {
    result: Vec<Value>,
    steps: Vec<StepReport>,
    fail: Option<(usize, Fail)>,
}

/// Run every step of `function` in order until one fails.
fn run_steps(ctx: &Ctx<'_>, function: &Function, values: &[String], deadline: Instant) -> StepsRun {
    let mut run = StepsRun {
        result: Vec::with_capacity(function.steps.len()),
        steps: Vec::with_capacity(function.steps.len()),
        fail: None,
    };
    for (i, step) in function.steps.iter().enumerate() {
        let (report, outcome) = run_step(ctx, function, step, values, deadline);
        if let Some(report) = report {
            run.steps.push(report);
        }
        match outcome {
            Ok(value) => run.result.push(value),
            Err(fail) => {
                run.fail = Some((i, fail));
                break;
            }
        }
    }
    run
}

/// Run one step; the report is `None` when nothing was started.
fn run_step(
    ctx: &Ctx<'_>,
    function: &Function,
    step: &Step,
    values: &[String],
    deadline: Instant,
) -> (Option<StepReport>, Result<Value, Fail>) {
    match step {
        Step::Command(argv) => {
            let mut argv = argv.iter().map(|t| t.render(values));
            let Some(argv0) = argv.next() else {
                return (None, Err(Fail::Spawn("empty command".to_string())));
            };
            let args: Vec<String> = argv.collect();
            let program = match resolve_program(&argv0, ctx.path_env, &function.workdir) {
                Ok(p) => p,
                Err(message) => return (None, Err(Fail::Spawn(message))),
            };
            if function.combined_output {
                return combined(ctx, function, &program, &argv0, &args, values, deadline);
            }
            run_process(
                ctx,
                function,
                Kind::Command,
                &program,
                &argv0,
                &args,
                values,
                deadline,
            )
        }
        Step::Shell(script) => {
            let args = ["-c".to_string(), script.clone()];
            run_process(
                ctx,
                function,
                Kind::Shell,
                Path::new("/bin/sh"),
                "sh",
                &args,
                values,
                deadline,
            )
        }
        Step::Call {
            function: name,
            args,
        } => {
            let Some(callee) = ctx.program.function(name) else {
                let msg = format!("call of unknown function `{name}`");
                return (None, Err(Fail::Spawn(msg)));
            };
            let callee_values: Vec<String> = args.iter().map(|t| t.render(values)).collect();
            let start = Instant::now();
            let callee_deadline = start
                .checked_add(callee.timeout)
                .map_or(deadline, |d| d.min(deadline));
            let run = run_steps(ctx, callee, &callee_values, callee_deadline);
            let report = StepReport {
                kind: StepKind::Call,
                exit_code: None,
                signal: None,
                stdout_truncated: false,
                stderr_truncated: false,
                duration_ms: millis(start.elapsed()),
                steps: Some(run.steps),
            };
            let outcome = match run.fail {
                Some((_, fail)) => Err(fail),
                None => Ok(Value::Array(run.result)),
            };
            (Some(report), outcome)
        }
    }
}

/// Run `program` with its stderr sent into its stdout (`2>&1`: one pipe
/// is both), for a function with `combined_output` (a hook's command).
/// Without a shell in between: sh drops environment variables whose
/// names it cannot hold, such as webhook's `HOOK_head_commit.timestamp`.
#[allow(clippy::too_many_arguments)]
fn combined(
    ctx: &Ctx<'_>,
    function: &Function,
    program: &Path,
    argv0: &str,
    args: &[String],
    values: &[String],
    deadline: Instant,
) -> (Option<StepReport>, Result<Value, Fail>) {
    // Refused alike whether it is missing or not executable (webhook's
    // users read this message in the run record).
    use std::os::unix::fs::PermissionsExt;
    let runnable = std::fs::metadata(program)
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if !runnable {
        let msg = format!("cannot start {}: not an executable file", program.display());
        return (None, Err(Fail::Spawn(msg)));
    }
    run_process(
        ctx,
        function,
        Kind::Combined,
        program,
        argv0,
        args,
        values,
        deadline,
    )
}

/// What kind of process a step starts.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// The command, its stdout and stderr apart.
    Command,
    /// The command, its stderr into its stdout.
    Combined,
    /// `sh -c` of a script.
    Shell,
}

impl Kind {
    /// The step's `kind` in the run record.
    fn report(self) -> StepKind {
        match self {
            Kind::Command | Kind::Combined => StepKind::Command,
            Kind::Shell => StepKind::Shell,
        }
    }
}

/// The program to execute for `argv0`: a path with '/' resolves against
/// `workdir`; a bare name is looked up in `path_env` (done here: the spawn
/// takes a path and searches nothing). The path is made
/// absolute: the spawn changes into `workdir` before it executes the
/// program, so a relative one would be resolved against `workdir` twice.
pub fn resolve_program(argv0: &str, path_env: &str, workdir: &Path) -> Result<PathBuf, String> {
    resolve_relative(argv0, path_env, workdir).map(|p| std::path::absolute(&p).unwrap_or(p))
}

fn resolve_relative(argv0: &str, path_env: &str, workdir: &Path) -> Result<PathBuf, String> {
    if argv0.is_empty() {
        return Err("empty program name".to_string());
    }
    if argv0.contains('/') {
        return Ok(config::resolve(workdir, Path::new(argv0)));
    }
    for dir in path_env.split(':') {
        let dir = if dir.is_empty() {
            Path::new(".")
        } else {
            Path::new(dir)
        };
        let candidate = config::resolve(workdir, dir).join(argv0);
        let executable = std::fs::metadata(&candidate)
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
        if executable {
            return Ok(candidate);
        }
    }
    Err(format!(
        "cannot start `{argv0}`: not found in PATH ({path_env})"
    ))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The first `cap` bytes of a stream, and whether there were more.
struct Capture {
    kept: Vec<u8>,
    cap: usize,
    truncated: bool,
}

impl Capture {
    fn new(cap: usize) -> Capture {
        Capture {
            kept: Vec::new(),
            cap,
            truncated: false,
        }
    }

    fn push(&mut self, data: &[u8]) {
        let room = self.cap.saturating_sub(self.kept.len());
        if data.len() > room {
            self.truncated = true;
        }
        self.kept.extend_from_slice(&data[..data.len().min(room)]);
    }
}

/// The last `cap` bytes of a stream, and whether it passed `limit` bytes.
struct Tail {
    buf: Vec<u8>,
    cap: usize,
    total: usize,
    limit: usize,
}

impl Tail {
    fn new(cap: usize, limit: usize) -> Tail {
        Tail {
            buf: Vec::new(),
            cap,
            total: 0,
            limit,
        }
    }

    fn push(&mut self, data: &[u8]) {
        self.total = self.total.saturating_add(data.len());
        if self.cap == 0 {
            return;
        }
        let data = &data[data.len().saturating_sub(self.cap)..];
        self.buf.extend_from_slice(data);
        // Trim in batches so the copy is amortised.
        if self.buf.len() >= 2 * self.cap {
            let excess = self.buf.len() - self.cap;
            self.buf.drain(..excess);
        }
    }

    fn truncated(&self) -> bool {
        self.total > self.limit
    }

    /// The last `cap` bytes as lossy UTF-8, starting at a character boundary
    /// when the cut fell inside one.
    fn text(&self) -> String {
        let mut tail = &self.buf[self.buf.len().saturating_sub(self.cap)..];
        let mut skipped = 0;
        while skipped < 3 && tail.first().is_some_and(|b| b & 0xC0 == 0x80) {
            tail = &tail[1..];
            skipped += 1;
        }
        String::from_utf8_lossy(tail).into_owned()
    }
}

/// Why a running step was stopped from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    TimedOut,
    Aborted,
}

/// What [`supervise`] saw.
struct Watched {
    stdout: Capture,
    stderr: Tail,
    stop: Option<Stop>,
    /// poll itself failed (the group was killed).
    poll_error: Option<io::Error>,
}

/// Spawn one process and see it through to its reaping.
#[allow(clippy::too_many_arguments)]
fn run_process(
    ctx: &Ctx<'_>,
    function: &Function,
    kind: Kind,
    program: &Path,
    argv0: &str,
    args: &[String],
    values: &[String],
    deadline: Instant,
) -> (Option<StepReport>, Result<Value, Fail>) {
    if ctx.abort.is_triggered() {
        return (None, Err(Fail::Aborted));
    }
    if Instant::now() >= deadline {
        return (None, Err(Fail::TimedOut));
    }
    let start = Instant::now();
    let (exec, stdin) = match command(ctx, function, program, argv0, args, values) {
        Ok(prepared) => prepared,
        Err(message) => return (None, Err(Fail::Spawn(message))),
    };
    let pipes = match Pipes::new() {
        Ok(pipes) => pipes,
        Err(err) => {
            return (
                None,
                Err(Fail::Spawn(format!("cannot create pipes: {err}"))),
            )
        }
    };
    let spawned = match pipes.spawn(&exec, &stdin, kind == Kind::Combined) {
        Ok(child) => child,
        Err(err) => return (None, Err(Fail::Spawn(spawn_error(function, program, &err)))),
    };
    drop(stdin);
    (ctx.on_spawn)(Some(spawned.pid));
    let pidfd = if no_pidfd() { None } else { spawned.pidfd };
    let watched = supervise(ctx, spawned.pid, pidfd, pipes, deadline);
    let status = sys::wait_child(spawned.pid);
    (ctx.on_spawn)(None);

    let (exit_code, signal) = match &status {
        Ok(s) => (s.code(), s.signal()),
        Err(_) => (None, None),
    };
    let report = StepReport {
        kind: kind.report(),
        exit_code,
        signal,
        stdout_truncated: watched.stdout.truncated,
        stderr_truncated: watched.stderr.truncated(),
        duration_ms: millis(start.elapsed()),
        steps: None,
    };
    (Some(report), outcome(watched, status, function.output))
}

/// A step's stdin: the request body's file, or `/dev/null`.
enum Stdin {
    File(File),
    Null(BorrowedFd<'static>),
}

impl Stdin {
    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Stdin::File(f) => f.as_fd(),
            Stdin::Null(fd) => *fd,
        }
    }
}

/// `/dev/null`, opened once for every step without a request body.
fn dev_null() -> io::Result<BorrowedFd<'static>> {
    static NULL: OnceLock<OwnedFd> = OnceLock::new();
    if let Some(fd) = NULL.get() {
        return Ok(fd.as_fd());
    }
    let file = File::open("/dev/null")?;
    // A racing thread may have set it first; its descriptor is kept.
    Ok(NULL.get_or_init(|| file.into()).as_fd())
}

/// The command of one step: a clean environment (PATH, the function's
/// `env`, the tool `vars`, the inputs by name; a later one of the same
/// name wins; then `TRIGD_RUN_ID`, which nothing overrides: a start-up
/// finds the processes a killed trigd left by it), the workdir, and the
/// configured user and group; and its stdin.
fn command(
    ctx: &Ctx<'_>,
    function: &Function,
    program: &Path,
    argv0: &str,
    args: &[String],
    values: &[String],
) -> Result<(sys::Exec, Stdin), String> {
    let mut env: BTreeMap<&str, &str> = BTreeMap::new();
    env.insert("PATH", ctx.path_env);
    let vars = function.env.iter().chain(ctx.vars);
    env.extend(vars.map(|(k, v)| (k.as_str(), v.as_str())));
    if function.env_inputs {
        let inputs = function.inputs().iter().zip(values);
        env.extend(inputs.map(|(k, v)| (k.as_str(), v.as_str())));
    }
    if let Some(run) = ctx.run_id {
        env.insert(super::orphans::RUN_ID_ENV, run);
    }
    let argv = std::iter::once(argv0).chain(args.iter().map(String::as_str));
    let mut exec = sys::Exec::new(program, argv, env, &function.workdir)
        .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
    if function.user.is_some() || function.group.is_some() {
        may_switch(function)?;
        exec.ids(function.group, function.user);
    }
    let stdin = match ctx.stdin.map(File::open) {
        None => dev_null().map(Stdin::Null),
        Some(file) => file.map(Stdin::File),
    }
    .map_err(|e| format!("cannot open the request body for stdin: {e}"))?;
    Ok((exec, stdin))
}

/// The message of a failed spawn, naming the workdir when it is the cause.
fn spawn_error(function: &Function, program: &Path, err: &io::Error) -> String {
    if function.workdir.is_dir() {
        format!("cannot start {}: {err}", program.display())
    } else {
        format!(
            "cannot start {}: {err} (workdir {} is not a directory)",
            program.display(),
            function.workdir.display()
        )
    }
}

/// How a supervised and reaped step ended; `output` reads its stdout.
fn outcome(
    watched: Watched,
    status: io::Result<std::process::ExitStatus>,
    output: OutputMode,
) -> Result<Value, Fail> {
    let (exit_code, signal) = match &status {
        Ok(s) => (s.code(), s.signal()),
        Err(_) => (None, None),
    };
    match (watched.stop, watched.poll_error, status) {
        (Some(Stop::TimedOut), _, _) => Err(Fail::TimedOut),
        (Some(Stop::Aborted), _, _) => Err(Fail::Aborted),
        (None, Some(err), _) => Err(Fail::Failed {
            exit_code,
            signal,
            stderr_tail: format!("trigd: poll failed: {err}"),
            stdout_tail: String::new(),
        }),
        (None, None, Err(err)) => Err(Fail::Failed {
            exit_code,
            signal,
            stderr_tail: format!("trigd: wait failed: {err}"),
            stdout_tail: String::new(),
        }),
        (None, None, Ok(s)) if s.success() => {
            element(watched.stdout.kept, output).map_err(|stderr_tail| Fail::Failed {
                exit_code,
                signal,
                stderr_tail,
                stdout_tail: String::new(),
            })
        }
        (None, None, Ok(_)) => Err(Fail::Failed {
            exit_code,
            signal,
            stderr_tail: watched.stderr.text(),
            // A function answering with its raw output (a hooks-file
            // hook) keeps all of it, bounded by max_output_bytes.
            stdout_tail: if output == OutputMode::Raw {
                String::from_utf8_lossy(&watched.stdout.kept).into_owned()
            } else {
                stdout_tail(&watched.stdout.kept)
            },
        }),
    }
}

/// Whether trigd can run `function` under its configured `user`/`group`:
/// switching needs root, unless the ids are trigd's own already. Refusing
/// here gives a clear run failure instead of a bare EPERM from the spawn.
fn may_switch(function: &Function) -> Result<(), String> {
    let (euid, egid) = sys::effective_ids();
    let other_user = function.user.is_some_and(|u| u != euid);
    let other_group = function.group.is_some_and(|g| g != egid);
    if euid == 0 || !(other_user || other_group) {
        return Ok(());
    }
    Err(format!(
        "function `{}` is configured to run as uid {} gid {}, but trigd runs as uid {euid} \
         (not root) and cannot switch: run trigd as root or remove `user`/`group`",
        function.name,
        function.user.map_or_else(|| "-".into(), |u| u.to_string()),
        function.group.map_or_else(|| "-".into(), |g| g.to_string()),
    ))
}

/// A step's Result element, as the function's `output` says: `auto` parses
/// a JSON object or array and keeps anything else as the lossy text minus
/// one trailing newline; `json` parses any JSON value (numbers keep their
/// digits) and refuses anything else; `text` is always the text; `lines`
/// is the text split at newlines.
///
/// JSON nested deeper than [`MAX_RESULT_DEPTH`] is not taken as JSON (`auto`
/// keeps the text, `json` refuses it): the run record wraps the element in
/// a few more levels, and a record deeper than serde_json's limit of 128
/// could not be read back.
fn element(stdout: Vec<u8>, mode: OutputMode) -> Result<Value, String> {
    let parsed = |stdout: &[u8]| {
        let v = serde_json::from_slice::<Value>(stdout).map_err(|e| e.to_string())?;
        if depth(&v) > MAX_RESULT_DEPTH {
            return Err(format!("nested deeper than {MAX_RESULT_DEPTH} levels"));
        }
        Ok(v)
    };
    // Only an object or an array is kept as JSON by `auto`: other output
    // is not parsed (a failed parse formats an error message, which was
    // most of the cost of a silent step's element).
    let may_be_container = || {
        let first = stdout.iter().find(|b| !b.is_ascii_whitespace());
        matches!(first, Some(b'{' | b'['))
    };
    match mode {
        OutputMode::Auto => Ok(match may_be_container().then(|| parsed(&stdout)) {
            Some(Ok(v @ (Value::Object(_) | Value::Array(_)))) => v,
            _ => Value::String(text(stdout, true)),
        }),
        OutputMode::Json => parsed(&stdout).map_err(|e| {
            format!("trigd: the step's stdout is not JSON ({e}), and the function says output = \"json\"")
        }),
        OutputMode::Text => Ok(Value::String(text(stdout, true))),
        OutputMode::Raw => Ok(Value::String(text(stdout, false))),
        OutputMode::Lines => {
            let t = text(stdout, true);
            let lines = if t.is_empty() { Vec::new() } else { t.split('\n').map(|l| Value::String(l.to_string())).collect() };
            Ok(Value::Array(lines))
        }
    }
}

/// `bytes` as text (invalid UTF-8 replaced), minus one trailing newline
/// with `strip`. Valid UTF-8 becomes the string in place, without a copy:
/// the kept stdout may be `max_output_bytes` long, and a second copy of it
/// doubled the peak memory of a run printing that much.
fn text(mut bytes: Vec<u8>, strip: bool) -> String {
    if strip && bytes.last() == Some(&b'\n') {
        bytes.pop();
    }
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// The deepest JSON a step's Result element may be.
const MAX_RESULT_DEPTH: usize = 64;

/// How deeply `v` nests (a scalar is 0, `[]` is 1).
fn depth(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        Value::Object(o) => 1 + o.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Read what is ready on `pipe` (non-blocking); `false` once it is at EOF
/// or broken.
fn read_ready(pipe: &mut impl Read, sink: &mut dyn FnMut(&[u8]), buf: &mut Vec<u8>) -> bool {
    for _ in 0..READS_PER_WAKE {
        match pipe.read(buf) {
            Ok(0) => return false,
            Ok(n) => {
                sink(&buf[..n]);
                if n == buf.len() && n < READ_CHUNK {
                    buf.resize(READ_CHUNK, 0);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return true,
            Err(_) => return false,
        }
    }
    true
}

fn pollfd(fd: std::os::fd::RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

#[cfg(test)]
thread_local! {
    /// Tests set this to exercise the `waitid(WNOWAIT)` fallback.
    static NO_PIDFD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[cfg(test)]
thread_local! {
    /// `poll` calls made by [`Supervisor::poll_and_read`] on this thread.
    static POLLS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
fn no_pidfd() -> bool {
    NO_PIDFD.with(|c| c.get())
}

#[cfg(not(test))]
fn no_pidfd() -> bool {
    false
}

/// A step's stdout and stderr pipes: the read ends, and the write ends,
/// which the child gets as its descriptors 1 and 2 and trigd keeps open
/// until the main process has exited.
///
/// Without trigd's write ends the child's exit woke the supervisor twice: first
/// when the exit closed the last write end (halfway through the exit: the
/// woken supervisor took the CPU, and the child, not yet reapable, then
/// waited for its turn behind every other runnable task), then once it
/// had exited. Now only the exit wakes it.
struct Pipes {
    stdout: File,
    stderr: File,
    /// Dropped (closed) once the main process has exited: the pipes then
    /// reach EOF when every process that inherited them has closed them.
    writers: Option<[OwnedFd; 2]>,
}

impl Pipes {
    /// Create the two pipes.
    fn new() -> io::Result<Pipes> {
        // The read ends are non-blocking: after the exit they are read
        // without a readiness report first (`Supervisor::read_after_exit`).
        let (out_r, out_w) = sys::pipe_nonblocking_reader()?;
        let (err_r, err_w) = sys::pipe_nonblocking_reader()?;
        Ok(Pipes {
            stdout: File::from(out_r),
            stderr: File::from(err_r),
            writers: Some([out_w, err_w]),
        })
    }

    /// Start `exec` with `stdin` and the pipes' write ends as its stdio;
    /// `combined`: stdout's pipe is its stderr too (stderr's pipe then
    /// has no writer but trigd's copy, and reads empty).
    fn spawn(&self, exec: &sys::Exec, stdin: &Stdin, combined: bool) -> io::Result<sys::Spawned> {
        let [out, err] = self
            .writers
            .as_ref()
            .ok_or_else(|| io::Error::from(io::ErrorKind::BrokenPipe))?;
        let err = if combined { out } else { err };
        exec.spawn([stdin.fd(), out.as_fd(), err.as_fd()])
    }
}

/// Read stdout and stderr until the child has exited and both pipes are at
/// EOF, enforcing the deadline and the abort signal. Leaves the child
/// exited but unreaped; its group has been sent SIGKILL.
fn supervise(
    ctx: &Ctx<'_>,
    pid: u32,
    pidfd: Option<OwnedFd>,
    pipes: Pipes,
    deadline: Instant,
) -> Watched {
    let mut sv = Supervisor::new(ctx, pid, pidfd, pipes, deadline);
    let mut buf = vec![0u8; FIRST_READ];
    loop {
        let now = Instant::now();
        if sv.exited {
            if sv.drained_or_stopped(now) {
                break;
            }
        } else {
            sv.stop_if_due(now);
        }
        sv.release_at = (ctx.release_output)(now);
        if let Err(err) = sv.poll_and_read(now, &mut buf) {
            sys::kill_group(sv.pid, libc::SIGKILL);
            sv.w.poll_error = Some(err);
            // Stop reading; the reap that follows returns once SIGKILL lands.
            break;
        }
    }
    sv.w
}

/// The state of [`supervise`]: the child's pipes, how it is being stopped,
/// and what was read.
struct Supervisor<'c, 'a> {
    ctx: &'c Ctx<'a>,
    pid: u32,
    deadline: Instant,
    stdout: Option<File>,
    stderr: Option<File>,
    /// trigd's copies of the pipes' write ends, until the main process exits.
    writers: Option<[OwnedFd; 2]>,
    pidfd: Option<OwnedFd>,
    w: Watched,
    /// The main process has exited (and its group was sent SIGKILL).
    exited: bool,
    /// When SIGTERM was sent: SIGKILL is due at this instant.
    kill_at: Option<Instant>,
    killed: bool,
    /// When the output held in memory is due to be written out
    /// ([`Ctx::release_output`]).
    release_at: Option<Instant>,
}

impl<'c, 'a> Supervisor<'c, 'a> {
    fn new(
        ctx: &'c Ctx<'a>,
        pid: u32,
        pidfd: Option<OwnedFd>,
        pipes: Pipes,
        deadline: Instant,
    ) -> Self {
        Supervisor {
            ctx,
            pid,
            deadline,
            stdout: Some(pipes.stdout),
            stderr: Some(pipes.stderr),
            writers: pipes.writers,
            pidfd,
            w: Watched {
                stdout: Capture::new(ctx.max_output_bytes),
                stderr: Tail::new(STDERR_TAIL.min(ctx.max_output_bytes), ctx.max_output_bytes),
                stop: None,
                poll_error: None,
            },
            exited: false,
            kill_at: None,
            killed: false,
            release_at: None,
        }
    }

    /// The stop that is due now, if any.
    fn due_stop(&self, now: Instant) -> Option<Stop> {
        if self.ctx.abort.is_triggered() {
            Some(Stop::Aborted)
        } else if now >= self.deadline {
            Some(Stop::TimedOut)
        } else {
            None
        }
    }

    /// After the main process exited: whether to stop draining its pipes
    /// (both at EOF, or a stop came due while a grandchild kept them open).
    fn drained_or_stopped(&mut self, now: Instant) -> bool {
        if self.w.stop.is_some() || (self.stdout.is_none() && self.stderr.is_none()) {
            return true;
        }
        self.w.stop = self.due_stop(now);
        self.w.stop.is_some()
    }

    /// While the main process runs: SIGTERM its group when a stop comes
    /// due, SIGKILL once the grace has passed.
    fn stop_if_due(&mut self, now: Instant) {
        if self.w.stop.is_none() {
            self.w.stop = self.due_stop(now);
            if self.w.stop.is_some() {
                sys::kill_group(self.pid, libc::SIGTERM);
                self.kill_at = Some(now + self.ctx.kill_grace);
            }
        }
        if let Some(at) = self.kill_at {
            if !self.killed && now >= at {
                sys::kill_group(self.pid, libc::SIGKILL);
                self.killed = true;
            }
        }
    }

    /// How long the next poll may sleep.
    fn timeout(&self, now: Instant) -> Option<Duration> {
        let wake = if self.exited || self.w.stop.is_none() {
            Some(self.deadline)
        } else if !self.killed {
            self.kill_at
        } else {
            None
        };
        let wake = match (wake, self.release_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let timeout = wake.map(|at| at.saturating_duration_since(now));
        if self.pidfd.is_none() && !self.exited {
            return Some(timeout.map_or(FALLBACK_TICK, |t| t.min(FALLBACK_TICK)));
        }
        timeout
    }

    /// Wait for output, the exit, the abort signal or the next due time;
    /// read what is ready and notice the exit.
    fn poll_and_read(&mut self, now: Instant, buf: &mut Vec<u8>) -> io::Result<()> {
        let mut fds: Vec<libc::pollfd> = Vec::with_capacity(4);
        let mut slot = |fd: Option<std::os::fd::RawFd>| {
            fd.map(|fd| {
                fds.push(pollfd(fd));
                fds.len() - 1
            })
        };
        let out_i = slot(self.stdout.as_ref().map(|p| p.as_raw_fd()));
        let err_i = slot(self.stderr.as_ref().map(|p| p.as_raw_fd()));
        let pid_fd = self.pidfd.as_ref().filter(|_| !self.exited);
        let pid_i = slot(pid_fd.map(|fd| fd.as_fd().as_raw_fd()));
        if self.w.stop.is_none() {
            fds.push(pollfd(self.ctx.abort.fd()));
        }
        #[cfg(test)]
        POLLS.with(|c| c.set(c.get() + 1));
        sys::poll(&mut fds, self.timeout(now))?;

        let ready = |i: Option<usize>| i.is_some_and(|i| fds[i].revents != 0);
        self.read_pipes(ready(out_i), ready(err_i), buf);
        let now_exited = match pid_i {
            Some(i) => fds[i].revents != 0,
            None => !self.exited && sys::exited_nowait(self.pid),
        };
        if !self.exited && now_exited {
            self.exited = true;
            // Nothing more comes from the main process: EOF once every
            // process that inherited the pipes has closed them.
            self.writers = None;
            // The unreaped main process still holds the pgid, so this
            // cannot hit a recycled group.
            sys::kill_group(self.pid, libc::SIGKILL);
            self.read_after_exit(buf);
        }
        Ok(())
    }

    /// Right after the exit: read both pipes once without polling first.
    /// Without a process left holding them (the common case) they are at
    /// EOF now, and the supervision ends without another `poll`.
    fn read_after_exit(&mut self, buf: &mut Vec<u8>) {
        let (out, err) = (self.stdout.is_some(), self.stderr.is_some());
        self.read_pipes(out, err, buf);
    }

    /// Read what is ready on the pipes marked ready; a pipe at EOF (or
    /// broken) is closed.
    fn read_pipes(&mut self, out_ready: bool, err_ready: bool, buf: &mut Vec<u8>) {
        let (w, on_output) = (&mut self.w, self.ctx.on_output);
        if let (true, Some(pipe)) = (out_ready, self.stdout.as_mut()) {
            let mut sink = |d: &[u8]| {
                on_output(Stream::Stdout, d);
                w.stdout.push(d);
            };
            if !read_ready(pipe, &mut sink, buf) {
                self.stdout = None;
            }
        }
        if let (true, Some(pipe)) = (err_ready, self.stderr.as_mut()) {
            let mut sink = |d: &[u8]| {
                on_output(Stream::Stderr, d);
                w.stderr.push(d);
            };
            if !read_ready(pipe, &mut sink, buf) {
                self.stderr = None;
            }
        }
    }
}

#[cfg(test)]
#[path = "step_tests.rs"]
mod tests;
