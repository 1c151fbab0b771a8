//! Execute one function of a program: its steps in order, as real child
//! processes.
//!
//! Owns: `{name}` substitution, the clean environment, the working
//! directory, the process group, the timeout (SIGTERM to the group, SIGKILL
//! after a grace), bounded capture of stdout and stderr (read concurrently
//! with `poll`, so no pipe deadlock), reaping, and building the Result array.
//! Does not own: slots, queues, run records (see `runner/mod.rs`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use crate::config::{Function, Program};
use crate::sys::AbortSignal;

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
    let _ = (ctx, function, values, PathBuf::new());
    unimplemented!("runner::step::run_function")
}
