//! Execute one function of a program: its steps in order, as real child
//! processes.
//!
//! Owns: `{name}` substitution, the clean environment, the working
//! directory, the process group, the timeout (SIGTERM to the group, SIGKILL
//! after a grace), bounded capture of stdout and stderr (read concurrently
//! with `poll`, so no pipe deadlock), reaping, and building the Result array.
//! Does not own: slots, queues, run records (see `runner/mod.rs`).

use std::collections::BTreeMap;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use crate::config::{self, Function, Program, Step};
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
}

/// How one step ended, as stored in the run record.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct StepReport {
    /// `command`, `shell` or `call`.
    #[serde(rename = "Kind")]
    pub kind: &'static str,
    /// Exit code, when the process exited.
    #[serde(rename = "ExitCode", skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Signal number, when the process was killed by one.
    #[serde(rename = "Signal", skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// stdout passed `max_output_bytes`; the rest was read and discarded.
    #[serde(rename = "StdoutTruncated")]
    pub stdout_truncated: bool,
    /// stderr passed `max_output_bytes`; the rest was read and discarded.
    #[serde(rename = "StderrTruncated")]
    pub stderr_truncated: bool,
    /// Wall time of the step in milliseconds.
    #[serde(rename = "DurationMs")]
    pub duration_ms: u64,
    /// For a `call` step: the called function's steps.
    #[serde(rename = "Steps", skip_serializing_if = "Option::is_none")]
    pub steps: Option<Vec<StepReport>>,
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
}

/// The outcome of running a function.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// One element per step that finished, in order (see SPEC: JSON when the
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

/// Bytes of stderr kept for [`StepError::Failed`].
const STDERR_TAIL: usize = 2048;
/// Poll tick when the kernel has no `pidfd_open`.
const FALLBACK_TICK: Duration = Duration::from_millis(20);
/// Size of one read from a pipe.
const READ_CHUNK: usize = 64 * 1024;
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
            } => StepError::Failed {
                step,
                exit_code,
                signal,
                stderr_tail,
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
            run_process(
                ctx, function, "command", &program, &argv0, &args, values, deadline,
            )
        }
        Step::Shell(script) => {
            let args = ["-c".to_string(), script.clone()];
            run_process(
                ctx,
                function,
                "shell",
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
                kind: "call",
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

/// The program to execute for `argv0`: a path with '/' resolves against
/// `workdir`; a bare name is looked up in `path_env` (done here rather than
/// by the spawn, so std stays on its posix_spawn path).
fn resolve_program(argv0: &str, path_env: &str, workdir: &Path) -> Result<PathBuf, String> {
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
    kind: &'static str,
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
    let mut cmd = Command::new(program);
    cmd.arg0(argv0)
        .args(args)
        .env_clear()
        .env("PATH", ctx.path_env)
        .envs(&function.env)
        .envs(ctx.vars);
    for (name, value) in function.inputs().iter().zip(values) {
        cmd.env(name, value);
    }
    cmd.current_dir(&function.workdir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // Only when configured: setting an id moves std off its posix_spawn
    // path onto fork/exec.
    if function.user.is_some() || function.group.is_some() {
        if let Err(message) = may_switch(function) {
            return (None, Err(Fail::Spawn(message)));
        }
        if let Some(gid) = function.group {
            cmd.gid(gid);
        }
        if let Some(uid) = function.user {
            // As root, std also drops the supplementary groups (setgroups).
            cmd.uid(uid);
        }
    }
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(err) => {
            let message = if function.workdir.is_dir() {
                format!("cannot start {}: {err}", program.display())
            } else {
                format!(
                    "cannot start {}: {err} (workdir {} is not a directory)",
                    program.display(),
                    function.workdir.display()
                )
            };
            return (None, Err(Fail::Spawn(message)));
        }
    };
    let pid = child.id();
    (ctx.on_spawn)(Some(pid));
    let watched = supervise(ctx, &mut child, deadline);
    let status = child.wait();
    (ctx.on_spawn)(None);

    let (exit_code, signal) = match &status {
        Ok(s) => (s.code(), s.signal()),
        Err(_) => (None, None),
    };
    let report = StepReport {
        kind,
        exit_code,
        signal,
        stdout_truncated: watched.stdout.truncated,
        stderr_truncated: watched.stderr.truncated(),
        duration_ms: millis(start.elapsed()),
        steps: None,
    };
    let outcome = match (watched.stop, watched.poll_error, status) {
        (Some(Stop::TimedOut), _, _) => Err(Fail::TimedOut),
        (Some(Stop::Aborted), _, _) => Err(Fail::Aborted),
        (None, Some(err), _) => Err(Fail::Failed {
            exit_code,
            signal,
            stderr_tail: format!("trigd: poll failed: {err}"),
        }),
        (None, None, Err(err)) => Err(Fail::Failed {
            exit_code,
            signal,
            stderr_tail: format!("trigd: wait failed: {err}"),
        }),
        (None, None, Ok(s)) if s.success() => Ok(element(&watched.stdout.kept)),
        (None, None, Ok(_)) => Err(Fail::Failed {
            exit_code,
            signal,
            stderr_tail: watched.stderr.text(),
        }),
    };
    (Some(report), outcome)
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

/// A step's Result element: JSON when `stdout` is valid JSON, else the lossy
/// text minus one trailing newline.
fn element(stdout: &[u8]) -> Value {
    if let Ok(v) = serde_json::from_slice::<Value>(stdout) {
        return v;
    }
    let text = stdout.strip_suffix(b"\n").unwrap_or(stdout);
    Value::String(String::from_utf8_lossy(text).into_owned())
}

/// Read what is ready on `pipe` (non-blocking); `false` once it is at EOF
/// or broken.
fn read_ready(pipe: &mut impl Read, sink: &mut dyn FnMut(&[u8]), buf: &mut [u8]) -> bool {
    for _ in 0..READS_PER_WAKE {
        match pipe.read(buf) {
            Ok(0) => return false,
            Ok(n) => sink(&buf[..n]),
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
fn no_pidfd() -> bool {
    NO_PIDFD.with(|c| c.get())
}

#[cfg(not(test))]
fn no_pidfd() -> bool {
    false
}

/// Read stdout and stderr until the child has exited and both pipes are at
/// EOF, enforcing the deadline and the abort signal. Leaves the child
/// exited but unreaped; its group has been sent SIGKILL.
fn supervise(ctx: &Ctx<'_>, child: &mut Child, deadline: Instant) -> Watched {
    let pid = child.id();
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    for fd in [
        stdout.as_ref().map(|p| p.as_raw_fd()),
        stderr.as_ref().map(|p| p.as_raw_fd()),
    ]
    .into_iter()
    .flatten()
    {
        // Without O_NONBLOCK a read still cannot block: it only follows a
        // readiness report, and each pipe has one reader.
        let _ = sys::set_nonblocking(fd);
    }
    let pidfd = if no_pidfd() {
        None
    } else {
        sys::pidfd_open(pid)
    };

    let mut w = Watched {
        stdout: Capture::new(ctx.max_output_bytes),
        stderr: Tail::new(STDERR_TAIL.min(ctx.max_output_bytes), ctx.max_output_bytes),
        stop: None,
        poll_error: None,
    };
    let mut buf = vec![0u8; READ_CHUNK];
    let mut exited = false;
    // When SIGTERM was sent: SIGKILL is due at this instant.
    let mut kill_at: Option<Instant> = None;
    let mut killed = false;

    loop {
        let now = Instant::now();
        if exited {
            // Draining after the main process exited (and its group was killed).
            if w.stop.is_some() || (stdout.is_none() && stderr.is_none()) {
                break;
            }
            if ctx.abort.is_triggered() {
                w.stop = Some(Stop::Aborted);
                break;
            }
            if now >= deadline {
                w.stop = Some(Stop::TimedOut);
                break;
            }
        } else {
            if w.stop.is_none() {
                if ctx.abort.is_triggered() {
                    w.stop = Some(Stop::Aborted);
                } else if now >= deadline {
                    w.stop = Some(Stop::TimedOut);
                }
                if w.stop.is_some() {
                    sys::kill_group(pid, libc::SIGTERM);
                    kill_at = Some(now + ctx.kill_grace);
                }
            }
            if let Some(at) = kill_at {
                if !killed && now >= at {
                    sys::kill_group(pid, libc::SIGKILL);
                    killed = true;
                }
            }
        }

        let wake = if exited || w.stop.is_none() {
            Some(deadline)
        } else if !killed {
            kill_at
        } else {
            None
        };
        let mut timeout = wake.map(|at| at.saturating_duration_since(now));
        if pidfd.is_none() && !exited {
            timeout = Some(timeout.map_or(FALLBACK_TICK, |t| t.min(FALLBACK_TICK)));
        }

        let mut fds: Vec<libc::pollfd> = Vec::with_capacity(4);
        let out_i = stdout.as_ref().map(|p| {
            fds.push(pollfd(p.as_raw_fd()));
            fds.len() - 1
        });
        let err_i = stderr.as_ref().map(|p| {
            fds.push(pollfd(p.as_raw_fd()));
            fds.len() - 1
        });
        let pid_i = match (&pidfd, exited) {
            (Some(fd), false) => {
                fds.push(pollfd(fd.as_fd().as_raw_fd()));
                Some(fds.len() - 1)
            }
            _ => None,
        };
        if w.stop.is_none() {
            fds.push(pollfd(ctx.abort.fd()));
        }

        if let Err(err) = sys::poll(&mut fds, timeout) {
            sys::kill_group(pid, libc::SIGKILL);
            w.poll_error = Some(err);
            // Stop reading; the reap below returns once SIGKILL lands.
            break;
        }

        if let (Some(i), Some(pipe)) = (out_i, stdout.as_mut()) {
            if fds[i].revents != 0 && !read_ready(pipe, &mut |d| w.stdout.push(d), &mut buf) {
                stdout = None;
            }
        }
        if let (Some(i), Some(pipe)) = (err_i, stderr.as_mut()) {
            if fds[i].revents != 0 && !read_ready(pipe, &mut |d| w.stderr.push(d), &mut buf) {
                stderr = None;
            }
        }
        if !exited {
            let now_exited = match pid_i {
                Some(i) => fds[i].revents != 0,
                None => sys::exited_nowait(pid),
            };
            if now_exited {
                exited = true;
                // The unreaped main process still holds the pgid, so this
                // cannot hit a recycled group.
                sys::kill_group(pid, libc::SIGKILL);
            }
        }
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Piece, Template, Webhook};
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::{RwLock, RwLockReadGuard};

    /// Tests that spawn take it shared; the fd-count test takes it exclusive
    /// so no other test's pipes are open while it counts.
    static SPAWN_LOCK: RwLock<()> = RwLock::new(());

    fn shared() -> RwLockReadGuard<'static, ()> {
        SPAWN_LOCK.read().unwrap_or_else(|e| e.into_inner())
    }

    const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

    /// `{name}` placeholders bound to `inputs`; `{{`/`}}` are not needed here.
    fn tpl(s: &str, inputs: &[&str]) -> Template {
        let mut pieces = Vec::new();
        let mut rest = s;
        while let Some(open) = rest.find('{') {
            let close = open + rest[open..].find('}').expect("unclosed {");
            if open > 0 {
                pieces.push(Piece::Lit(rest[..open].to_string()));
            }
            let name = &rest[open + 1..close];
            let i = inputs
                .iter()
                .position(|n| *n == name)
                .expect("unknown input");
            pieces.push(Piece::Var(i));
            rest = &rest[close + 1..];
        }
        if !rest.is_empty() {
            pieces.push(Piece::Lit(rest.to_string()));
        }
        Template(pieces)
    }

    fn cmd(argv: &[&str], inputs: &[&str]) -> Step {
        Step::Command(argv.iter().map(|a| tpl(a, inputs)).collect())
    }

    fn sh(script: &str) -> Step {
        Step::Shell(script.to_string())
    }

    fn func(name: &str, inputs: &[&str], steps: Vec<Step>) -> Function {
        Function {
            name: name.to_string(),
            steps,
            timeout: Duration::from_secs(30),
            env: BTreeMap::new(),
            workdir: std::env::temp_dir(),
            concurrency: None,
            webhook: Some(Webhook {
                active: true,
                outputs: inputs.iter().map(|s| s.to_string()).collect(),
            }),
            user: None,
            group: None,
        }
    }

    fn program(functions: Vec<Function>) -> Program {
        Program {
            id: 1,
            name: "test".to_string(),
            workspace: None,
            file: std::env::temp_dir().join("test.toml"),
            functions,
        }
    }

    struct Opts {
        timeout: Duration,
        grace: Duration,
        max_output: usize,
        vars: BTreeMap<String, String>,
    }

    impl Default for Opts {
        fn default() -> Opts {
            Opts {
                timeout: Duration::from_secs(20),
                grace: Duration::from_millis(200),
                max_output: 1 << 20,
                vars: BTreeMap::new(),
            }
        }
    }

    fn run_with(
        prog: &Program,
        name: &str,
        values: &[&str],
        opts: &Opts,
        abort: &AbortSignal,
        on_spawn: &(dyn Fn(Option<u32>) + Sync),
    ) -> Outcome {
        let ctx = Ctx {
            program: prog,
            vars: &opts.vars,
            path_env: PATH,
            max_output_bytes: opts.max_output,
            kill_grace: opts.grace,
            deadline: Instant::now() + opts.timeout,
            abort,
            on_spawn,
        };
        let values: Vec<String> = values.iter().map(|s| s.to_string()).collect();
        run_function(&ctx, prog.function(name).unwrap(), &values)
    }

    fn run(prog: &Program, name: &str, values: &[&str], opts: &Opts) -> Outcome {
        let abort = AbortSignal::new().unwrap();
        run_with(prog, name, values, opts, &abort, &|_| {})
    }

    fn run1(steps: Vec<Step>, opts: &Opts) -> Outcome {
        let prog = program(vec![func("f", &[], steps)]);
        run(&prog, "f", &[], opts)
    }

    /// A fresh path under the temp dir (removed first).
    fn tmp(tag: &str) -> PathBuf {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "trigd-step-{}-{}-{tag}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_file(&p);
        p
    }

    /// Gone, or a zombie waiting for init: no longer running.
    fn pid_gone(pid: u32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => {
                let state = stat.rsplit(')').next().unwrap_or("").trim_start();
                state.starts_with('Z') || state.starts_with('X')
            }
        }
    }

    fn wait_gone(pid: u32) -> bool {
        let until = Instant::now() + Duration::from_secs(2);
        while Instant::now() < until {
            if pid_gone(pid) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        pid_gone(pid)
    }

    fn read_pid(path: &Path) -> u32 {
        std::fs::read_to_string(path)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    #[test]
    fn result_json_and_text() {
        let _g = shared();
        let out = run1(
            vec![
                sh(r#"echo '{"a": [1, 2]}'"#),
                sh("echo hello"),
                sh("printf 'two\\n\\n'"),
                sh("true"),
                cmd(&["printf", "42"], &[]),
            ],
            &Opts::default(),
        );
        assert_eq!(out.error, None);
        assert_eq!(
            out.result,
            vec![
                serde_json::json!({"a": [1, 2]}),
                Value::String("hello".into()),
                Value::String("two\n".into()),
                Value::String(String::new()),
                serde_json::json!(42),
            ]
        );
        assert_eq!(out.steps.len(), 5);
        assert_eq!(out.steps[0].kind, "shell");
        assert_eq!(out.steps[4].kind, "command");
        assert!(out
            .steps
            .iter()
            .all(|s| s.exit_code == Some(0) && s.signal.is_none()));
    }

    #[test]
    fn call_step_nests_result() {
        let _g = shared();
        let inner = func(
            "inner",
            &["x"],
            vec![cmd(&["printf", "in:%s", "{x}"], &["x"]), sh("echo '[1]'")],
        );
        let outer = func(
            "outer",
            &["v"],
            vec![
                sh("echo first"),
                Step::Call {
                    function: "inner".into(),
                    args: vec![tpl("<{v}>", &["v"])],
                },
                sh("printf '%s' \"$v\""),
            ],
        );
        let prog = program(vec![inner, outer]);
        let out = run(&prog, "outer", &["val"], &Opts::default());
        assert_eq!(out.error, None);
        assert_eq!(
            out.result,
            serde_json::json!(["first", ["in:<val>", [1]], "val"])
                .as_array()
                .unwrap()
                .clone()
        );
        assert_eq!(out.steps[1].kind, "call");
        assert_eq!(out.steps[1].steps.as_ref().unwrap().len(), 2);
    }

    #[test]
    fn call_failure_uses_top_level_index() {
        let _g = shared();
        let inner = func("inner", &[], vec![sh("true"), sh("echo oops >&2; exit 4")]);
        let outer = func(
            "outer",
            &[],
            vec![
                sh("true"),
                Step::Call {
                    function: "inner".into(),
                    args: vec![],
                },
                sh("echo never"),
            ],
        );
        let prog = program(vec![inner, outer]);
        let out = run(&prog, "outer", &[], &Opts::default());
        assert_eq!(
            out.error,
            Some(StepError::Failed {
                step: 1,
                exit_code: Some(4),
                signal: None,
                stderr_tail: "oops\n".into(),
            })
        );
        assert_eq!(out.result.len(), 1);
        assert_eq!(out.steps.len(), 2);
    }

    #[test]
    fn callee_timeout_applies() {
        let _g = shared();
        let mut inner = func("inner", &[], vec![sh("sleep 100")]);
        inner.timeout = Duration::from_millis(300);
        let outer = func(
            "outer",
            &[],
            vec![
                sh("true"),
                Step::Call {
                    function: "inner".into(),
                    args: vec![],
                },
            ],
        );
        let prog = program(vec![inner, outer]);
        let start = Instant::now();
        let out = run(&prog, "outer", &[], &Opts::default());
        assert_eq!(out.error, Some(StepError::TimedOut { step: 1 }));
        assert!(start.elapsed() < Duration::from_secs(3));
    }

    const NASTY: &[&str] = &[
        "a; touch MARK",
        "$(touch MARK)",
        "`touch MARK`",
        "'\"quoted\" 'single'",
        "line1\nline2\n",
        "ünïcödé ✓ 日本",
        "--flag",
        "%s %n",
        "",
    ];

    #[test]
    fn values_reach_argv_and_env_verbatim() {
        let _g = shared();
        let mark = tmp("mark");
        let long = "x".repeat(1000);
        let mut values: Vec<String> = NASTY
            .iter()
            .map(|v| v.replace("MARK", mark.to_str().unwrap()))
            .collect();
        values.push(long);
        for value in &values {
            let inputs = ["v"];
            let f = func(
                "f",
                &inputs,
                vec![
                    cmd(&["printf", "X%sX", "{v}"], &inputs),
                    cmd(&["printf", "X%sX", "pre{v}post"], &inputs),
                    sh("printf 'X%sX' \"$v\""),
                    cmd(
                        &["/bin/sh", "-c", "printf 'X%sX' \"$1\"", "sh", "{v}"],
                        &inputs,
                    ),
                ],
            );
            let prog = program(vec![f]);
            let out = run(&prog, "f", &[value.as_str()], &Opts::default());
            assert_eq!(out.error, None, "value {value:?}");
            let x = format!("X{value}X");
            let wrapped = format!("Xpre{value}postX");
            assert_eq!(
                out.result,
                vec![
                    Value::String(x.clone()),
                    Value::String(wrapped),
                    Value::String(x.clone()),
                    Value::String(x),
                ],
                "value {value:?}"
            );
        }
        assert!(!mark.exists(), "a value was executed");
    }

    #[test]
    fn clean_environment_with_precedence() {
        let _g = shared();
        std::env::set_var("TRIGD_STEP_TEST_LEAK", "leaked");
        let inputs = ["IN", "SHARED"];
        let mut f = func("f", &inputs, vec![cmd(&["env"], &inputs)]);
        f.env.insert("FENV".into(), "f".into());
        f.env.insert("SHARED".into(), "from-env".into());
        f.env.insert("OVER".into(), "from-env".into());
        let mut opts = Opts::default();
        opts.vars.insert("VAR".into(), "v".into());
        opts.vars.insert("OVER".into(), "from-vars".into());
        opts.vars.insert("SHARED".into(), "from-vars".into());
        let prog = program(vec![f]);
        let out = run(&prog, "f", &["in", "from-input"], &opts);
        assert_eq!(out.error, None);
        let text = out.result[0].as_str().unwrap().to_string();
        let mut lines: Vec<&str> = text.lines().collect();
        lines.sort();
        assert_eq!(
            lines,
            vec![
                "FENV=f",
                "IN=in",
                "OVER=from-vars",
                &format!("PATH={PATH}"),
                "SHARED=from-input",
                "VAR=v",
            ]
        );
    }

    #[test]
    fn relative_argv0_resolves_against_workdir() {
        let _g = shared();
        let dir = tmp("wd");
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        let script = dir.join("bin/hello");
        std::fs::write(&script, "#!/bin/sh\necho \"hi from $(pwd)\"\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut f = func("f", &[], vec![cmd(&["bin/hello"], &[])]);
        f.workdir = dir.clone();
        let prog = program(vec![f]);
        let out = run(&prog, "f", &[], &Opts::default());
        assert_eq!(out.error, None);
        let want = format!("hi from {}", dir.display());
        assert_eq!(out.result, vec![Value::String(want)]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn failure_stops_later_steps() {
        let _g = shared();
        let mark = tmp("after");
        let out = run1(
            vec![
                sh("echo ok"),
                sh("echo bad >&2; exit 3"),
                cmd(&["touch", mark.to_str().unwrap()], &[]),
            ],
            &Opts::default(),
        );
        assert_eq!(
            out.error,
            Some(StepError::Failed {
                step: 1,
                exit_code: Some(3),
                signal: None,
                stderr_tail: "bad\n".into(),
            })
        );
        assert_eq!(out.result, vec![Value::String("ok".into())]);
        assert_eq!(out.steps.len(), 2);
        assert_eq!(out.steps[1].exit_code, Some(3));
        assert!(!mark.exists());
    }

    #[test]
    fn killed_by_signal_fails() {
        let _g = shared();
        let out = run1(vec![sh("kill -9 $$")], &Opts::default());
        match out.error {
            Some(StepError::Failed {
                step: 0,
                exit_code: None,
                signal: Some(9),
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn stderr_tail_is_last_2k() {
        let _g = shared();
        let out = run1(
            vec![sh(
                "head -c 10000 /dev/zero | tr '\\0' a >&2; printf END >&2; exit 1",
            )],
            &Opts::default(),
        );
        match out.error {
            Some(StepError::Failed { stderr_tail, .. }) => {
                assert_eq!(stderr_tail.len(), 2048);
                assert!(stderr_tail.ends_with("aaaEND"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn timeout_kills_whole_group() {
        let _g = shared();
        let pidfile = tmp("bgpid");
        let script = format!("sleep 100 & echo $! > {}; sleep 100", pidfile.display());
        let opts = Opts {
            timeout: Duration::from_millis(300),
            ..Opts::default()
        };
        let start = Instant::now();
        let out = run1(vec![sh("true"), sh(&script)], &opts);
        let took = start.elapsed();
        assert_eq!(out.error, Some(StepError::TimedOut { step: 1 }));
        assert!(took >= Duration::from_millis(300), "{took:?}");
        assert!(took < Duration::from_millis(1500), "{took:?}");
        assert_eq!(out.steps.len(), 2);
        assert!(wait_gone(read_pid(&pidfile)));
        let _ = std::fs::remove_file(&pidfile);
    }

    #[test]
    fn term_ignoring_child_killed_after_grace() {
        let _g = shared();
        let opts = Opts {
            timeout: Duration::from_millis(300),
            grace: Duration::from_millis(200),
            ..Opts::default()
        };
        let start = Instant::now();
        let out = run1(vec![sh("trap '' TERM; sleep 100; sleep 100")], &opts);
        let took = start.elapsed();
        assert_eq!(out.error, Some(StepError::TimedOut { step: 0 }));
        assert!(took >= Duration::from_millis(500), "{took:?}");
        assert!(took < Duration::from_millis(1700), "{took:?}");
        assert_eq!(out.steps[0].signal, Some(libc::SIGKILL));
    }

    #[test]
    fn background_child_holding_stdout_is_killed() {
        let _g = shared();
        let pidfile = tmp("holder");
        let script = format!("sleep 100 & echo $! > {}; echo done", pidfile.display());
        let start = Instant::now();
        let out = run1(vec![sh(&script)], &Opts::default());
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(out.error, None);
        assert_eq!(out.result, vec![Value::String("done".into())]);
        assert!(wait_gone(read_pid(&pidfile)));
        let _ = std::fs::remove_file(&pidfile);
    }

    #[test]
    fn stdout_is_capped() {
        let _g = shared();
        let opts = Opts {
            max_output: 1024,
            ..Opts::default()
        };
        let out = run1(
            vec![sh("head -c 5000000 /dev/zero | tr '\\0' y; echo done >&2")],
            &opts,
        );
        assert_eq!(out.error, None);
        assert!(out.steps[0].stdout_truncated);
        assert!(!out.steps[0].stderr_truncated);
        assert_eq!(out.result, vec![Value::String("y".repeat(1024))]);
    }

    #[test]
    fn large_stdout_and_stderr_at_once() {
        let _g = shared();
        let opts = Opts {
            max_output: 8 << 20,
            ..Opts::default()
        };
        // stderr first: a reader that waited for stdout EOF would deadlock.
        let script = "head -c 3000000 /dev/zero | tr '\\0' e >&2; \
                      head -c 3000000 /dev/zero | tr '\\0' o & \
                      head -c 3000000 /dev/zero | tr '\\0' e >&2; wait";
        let out = run1(vec![sh(script)], &opts);
        assert_eq!(out.error, None);
        assert!(!out.steps[0].stdout_truncated);
        assert_eq!(out.result[0].as_str().unwrap().len(), 3_000_000);
        let opts = Opts {
            max_output: 1000,
            ..Opts::default()
        };
        let out = run1(vec![sh(script)], &opts);
        assert_eq!(out.error, None);
        assert!(out.steps[0].stdout_truncated && out.steps[0].stderr_truncated);
    }

    #[test]
    fn abort_stops_sleeping_run() {
        let _g = shared();
        let abort = AbortSignal::new().unwrap();
        let spawned = AtomicU32::new(0);
        let prog = program(vec![func(
            "f",
            &[],
            vec![sh("sleep 100"), sh("echo never")],
        )]);
        let start = Instant::now();
        let out = std::thread::scope(|s| {
            s.spawn(|| {
                let until = Instant::now() + Duration::from_secs(5);
                while spawned.load(Ordering::SeqCst) == 0 && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(5));
                }
                abort.trigger();
            });
            let on_spawn = |pid: Option<u32>| {
                if let Some(pid) = pid {
                    spawned.store(pid, Ordering::SeqCst);
                }
            };
            run_with(&prog, "f", &[], &Opts::default(), &abort, &on_spawn)
        });
        assert_eq!(out.error, Some(StepError::Aborted { step: 0 }));
        assert!(start.elapsed() < Duration::from_secs(3));
        assert_eq!(out.steps.len(), 1);
        assert!(wait_gone(spawned.load(Ordering::SeqCst)));
        // Already triggered: nothing more starts.
        let out = run_with(&prog, "f", &[], &Opts::default(), &abort, &|_| {});
        assert_eq!(out.error, Some(StepError::Aborted { step: 0 }));
        assert!(out.steps.is_empty());
    }

    #[test]
    fn on_spawn_brackets_each_process() {
        let _g = shared();
        let log = std::sync::Mutex::new(Vec::new());
        let prog = program(vec![func("f", &[], vec![sh("true"), sh("true")])]);
        let abort = AbortSignal::new().unwrap();
        let on_spawn = |pid: Option<u32>| log.lock().unwrap().push(pid);
        let out = run_with(&prog, "f", &[], &Opts::default(), &abort, &on_spawn);
        assert_eq!(out.error, None);
        let log = log.into_inner().unwrap();
        assert_eq!(log.len(), 4);
        assert!(log[0].is_some() && log[1].is_none() && log[2].is_some() && log[3].is_none());
    }

    #[test]
    fn spawn_errors() {
        let _g = shared();
        let out = run1(
            vec![cmd(&["/nonexistent/trigd-bin"], &[])],
            &Opts::default(),
        );
        match &out.error {
            Some(StepError::Spawn { step: 0, message }) => {
                assert!(message.contains("/nonexistent/trigd-bin"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        assert!(out.steps.is_empty());
        let out = run1(
            vec![sh("true"), cmd(&["trigd-no-such-cmd"], &[])],
            &Opts::default(),
        );
        match &out.error {
            Some(StepError::Spawn { step: 1, message }) => {
                assert!(message.contains("trigd-no-such-cmd"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        let mut f = func("f", &[], vec![sh("true")]);
        f.workdir = PathBuf::from("/nonexistent/trigd-dir");
        let out = run(&program(vec![f]), "f", &[], &Opts::default());
        assert!(matches!(out.error, Some(StepError::Spawn { step: 0, .. })));
    }

    #[test]
    fn steps_get_clean_signal_state() {
        let _g = shared();
        // trigd blocks TERM/INT/HUP in every thread; steps must not inherit
        // that, nor std's ignored SIGPIPE.
        let out = std::thread::spawn(|| {
            sys::block_signals();
            run1(
                vec![sh("grep -E '^Sig(Blk|Ign)' /proc/self/status")],
                &Opts::default(),
            )
        })
        .join()
        .unwrap();
        assert_eq!(out.error, None);
        let text = out.result[0].as_str().unwrap().to_string();
        for line in text.lines() {
            let (name, mask) = line.split_once(':').unwrap();
            let mask = u64::from_str_radix(mask.trim(), 16).unwrap();
            if name == "SigBlk" {
                assert_eq!(mask, 0, "{text}");
            } else {
                assert_eq!(mask & (1 << (libc::SIGPIPE - 1)), 0, "{text}");
            }
        }
    }

    #[test]
    fn fallback_without_pidfd() {
        let _g = shared();
        NO_PIDFD.with(|c| c.set(true));
        let pidfile = tmp("fallback");
        let script = format!("sleep 100 & echo $! > {}; echo done", pidfile.display());
        let start = Instant::now();
        let out = run1(vec![sh("echo '[true]'"), sh(&script)], &Opts::default());
        assert!(start.elapsed() < Duration::from_secs(2));
        assert_eq!(out.error, None);
        assert_eq!(
            out.result,
            serde_json::json!([[true], "done"])
                .as_array()
                .unwrap()
                .clone()
        );
        assert!(wait_gone(read_pid(&pidfile)));
        let opts = Opts {
            timeout: Duration::from_millis(300),
            ..Opts::default()
        };
        let out = run1(vec![sh("sleep 100")], &opts);
        assert_eq!(out.error, Some(StepError::TimedOut { step: 0 }));
        assert!(start.elapsed() < Duration::from_secs(3));
        NO_PIDFD.with(|c| c.set(false));
        let _ = std::fs::remove_file(&pidfile);
    }

    fn fd_count() -> usize {
        std::fs::read_dir("/proc/self/fd").unwrap().count()
    }

    #[test]
    fn no_fd_leak_over_200_runs() {
        let _g = SPAWN_LOCK.write().unwrap_or_else(|e| e.into_inner());
        let prog = program(vec![func(
            "f",
            &[],
            vec![sh("echo out; echo err >&2"), sh("exit 1")],
        )]);
        let timeout_prog = program(vec![func("f", &[], vec![sh("sleep 100")])]);
        let opts = Opts {
            timeout: Duration::from_millis(30),
            grace: Duration::from_millis(10),
            ..Opts::default()
        };
        // Warm up lazily opened fds (e.g. std's internals).
        run(&prog, "f", &[], &Opts::default());
        let before = fd_count();
        for i in 0..200 {
            let out = run(&prog, "f", &[], &Opts::default());
            assert!(matches!(out.error, Some(StepError::Failed { step: 1, .. })));
            if i % 20 == 0 {
                let out = run(&timeout_prog, "f", &[], &opts);
                assert_eq!(out.error, Some(StepError::TimedOut { step: 0 }));
            }
        }
        assert_eq!(fd_count(), before);
    }
}
