//! A run's record, typed: what `runs.log` holds for each state change of a
//! run, what `GET /api/runs/<id>` serves and what a completion callback
//! sends. [`store`](super::store) keeps records; this module says what one
//! is and how it reads and writes as JSON. The JSON keeps the format of
//! every earlier version (field names, order, times with three decimals and
//! `Z`), so an old state dir loads and clients see the same answers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::state::delivery::Delivery;
use crate::state::output::Inline;
use crate::state::time::Time;

/// The states of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Accepted, waiting for a slot.
    Queued,
    /// Executing.
    Running,
    /// Every step succeeded.
    Finished,
    /// A step failed or could not start.
    Failed,
    /// Stopped at its timeout.
    TimedOut,
    /// Cut off by a crash or a shutdown.
    Interrupted,
    /// Stopped on request (`POST /api/runs/<id>/cancel`).
    Cancelled,
    /// Did not run: a schedule's occurrence, or a run whose concurrency
    /// group was at its limit (`policy = "skip"`); its `Skipped` says why.
    Skipped,
    /// Did not run: a newer run of its concurrency group replaced it while
    /// it waited (its `SupersededBy` names that run).
    Superseded,
}

impl RunState {
    /// Whether the run is over.
    pub fn is_terminal(self) -> bool {
        !matches!(self, RunState::Queued | RunState::Running)
    }

    /// The snake_case name, as in JSON.
    pub fn name(self) -> &'static str {
        match self {
            RunState::Queued => "queued",
            RunState::Running => "running",
            RunState::Finished => "finished",
            RunState::Failed => "failed",
            RunState::TimedOut => "timed_out",
            RunState::Interrupted => "interrupted",
            RunState::Cancelled => "cancelled",
            RunState::Skipped => "skipped",
            RunState::Superseded => "superseded",
        }
    }

    /// The state named `name` (as in JSON).
    pub fn from_name(name: &str) -> Option<RunState> {
        ALL_STATES.into_iter().find(|s| s.name() == name)
    }
}

/// Every run state, in the order a run can reach them.
pub const ALL_STATES: [RunState; 9] = [
    RunState::Queued,
    RunState::Running,
    RunState::Finished,
    RunState::Failed,
    RunState::TimedOut,
    RunState::Interrupted,
    RunState::Cancelled,
    RunState::Skipped,
    RunState::Superseded,
];

/// Why a schedule's occurrence did not run (a `skipped` record's `Skipped`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// It fell into a downtime (or a clock jump) and `catch_up` is `skip`.
    Missed,
    /// More were missed than `catch_up = "all"` runs.
    CatchUpMax,
    /// The last run of the schedule still ran (`overlap`).
    Overlap,
    /// The schedule is not `active`.
    Inactive,
    /// The run could not be started (busy, storage): its `Error` says.
    NotStarted,
    /// Its concurrency group was at its limit (`policy = "skip"`).
    Group,
}

impl SkipReason {
    /// The snake_case name, as in JSON and metrics.
    pub fn name(self) -> &'static str {
        match self {
            SkipReason::Missed => "missed",
            SkipReason::CatchUpMax => "catch_up_max",
            SkipReason::Overlap => "overlap",
            SkipReason::Inactive => "inactive",
            SkipReason::NotStarted => "not_started",
            SkipReason::Group => "group",
        }
    }
}

/// Who started a run. In records and JSON it is one string, as it always
/// was: `api_key:<name>`, `app_key:<member>`, `session:<user>`, `public`,
/// `cli` or `schedule:<program>/<function>/<name>`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(into = "String", from = "String")]
pub enum Origin {
    /// A `POST /api` caller with the `[[api_keys]]` entry of this name.
    ApiKey(String),
    /// A workspace member with a bearer application key.
    AppKey(String),
    /// A signed-in user with a browser session.
    Session(String),
    /// Anyone, through an endpoint of a public environment.
    Public,
    /// `trigd run` on the command line.
    Cli,
    /// A schedule, by id: `<program>/<function>/<name>`.
    Schedule(String),
    /// None recorded (an empty string).
    #[default]
    Unknown,
    /// A string this version does not know, kept as written.
    Other(String),
}

impl From<Origin> for String {
    fn from(o: Origin) -> String {
        match o {
            Origin::Other(s) => s,
            o => o.to_string(),
        }
    }
}

impl From<String> for Origin {
    fn from(s: String) -> Origin {
        let tagged = |tag: &str| s.strip_prefix(tag).map(str::to_string);
        if let Some(n) = tagged("api_key:") {
            return Origin::ApiKey(n);
        }
        if let Some(n) = tagged("app_key:") {
            return Origin::AppKey(n);
        }
        if let Some(n) = tagged("session:") {
            return Origin::Session(n);
        }
        if let Some(n) = tagged("schedule:") {
            return Origin::Schedule(n);
        }
        match s.as_str() {
            "public" => Origin::Public,
            "cli" => Origin::Cli,
            "" => Origin::Unknown,
            _ => Origin::Other(s),
        }
    }
}

impl std::fmt::Display for Origin {
    /// The origin as in JSON (`api_key:<name>`, `public`, ...).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::ApiKey(n) => write!(f, "api_key:{n}"),
            Origin::AppKey(n) => write!(f, "app_key:{n}"),
            Origin::Session(n) => write!(f, "session:{n}"),
            Origin::Schedule(n) => write!(f, "schedule:{n}"),
            Origin::Public => f.write_str("public"),
            Origin::Cli => f.write_str("cli"),
            Origin::Unknown => Ok(()),
            Origin::Other(s) => f.write_str(s),
        }
    }
}

/// The tool environment a run was started through. In JSON one string,
/// `<tool>/<environment>` (neither name holds a `/`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct ToolEnv {
    /// The tool's name.
    pub tool: String,
    /// The environment's name.
    pub environment: String,
}

impl std::fmt::Display for ToolEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.tool, self.environment)
    }
}

impl From<ToolEnv> for String {
    fn from(t: ToolEnv) -> String {
        t.to_string()
    }
}

impl TryFrom<String> for ToolEnv {
    type Error = String;

    fn try_from(s: String) -> Result<ToolEnv, String> {
        match s.split_once('/') {
            Some((tool, env)) => Ok(ToolEnv {
                tool: tool.into(),
                environment: env.into(),
            }),
            None => Err(format!("tool {s:?} is not <tool>/<environment>")),
        }
    }
}

/// What a step was, as its report in the run record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    /// A command, started directly.
    Command,
    /// A `shell` script, started with `sh -c`.
    Shell,
    /// A `call` of another function of the program.
    Call,
}

impl StepKind {
    /// The snake_case name, as in JSON.
    pub fn name(self) -> &'static str {
        match self {
            StepKind::Command => "command",
            StepKind::Shell => "shell",
            StepKind::Call => "call",
        }
    }
}

/// How one step ended, as stored in the run record.
///
/// The fields are in alphabetical order on purpose: that is the order in
/// which earlier versions wrote them (through a JSON map), in `runs.log`
/// and in callback bodies, and serde writes them in declaration order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct StepReport {
    /// Wall time of the step in milliseconds.
    #[serde(default)]
    pub duration_ms: u64,
    /// Exit code, when the process exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// `command`, `shell` or `call`.
    pub kind: StepKind,
    /// Signal number, when the process was killed by one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// stderr passed `max_output_bytes`; the rest was read and discarded.
    #[serde(default)]
    pub stderr_truncated: bool,
    /// stdout passed `max_output_bytes`; the rest was read and discarded.
    #[serde(default)]
    pub stdout_truncated: bool,
    /// For a `call` step: the called function's steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<Vec<StepReport>>,
}

/// Which run a record is, its state and whose it is: what deciding who may
/// see the run needs, read without the rest of the record. A record's
/// `Result` can hold `max_output_bytes` of output, and reading it whole
/// (it was buffered twice over while `Owner` was read as a flattened
/// field) for each of 20 concurrent followers of a run that printed 10 MB
/// grew trigd's peak by 8 MB per follower. Fields not named here are skipped unread.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(from = "HeadFields")]
pub struct RunHead {
    /// Run id, as in [`RunRecord::run`].
    pub run: String,
    /// Current state.
    pub state: RunState,
    /// Whose run it is.
    pub owner: Owner,
}

impl RunHead {
    /// The head of `rec`.
    pub fn of(rec: &RunRecord) -> RunHead {
        RunHead {
            run: rec.run.clone(),
            state: rec.state,
            owner: rec.owner,
        }
    }
}

/// [`RunHead`] as the fields of a record (not `flatten`ed, which would
/// buffer every other field).
#[derive(Deserialize)]
struct HeadFields {
    #[serde(rename = "Run")]
    run: String,
    #[serde(rename = "State")]
    state: RunState,
    #[serde(rename = "Owner", default)]
    kind: Option<OwnerKind>,
    #[serde(rename = "Program", default)]
    program: Option<u64>,
}

impl From<HeadFields> for RunHead {
    fn from(f: HeadFields) -> RunHead {
        let owner = OwnerFields {
            kind: f.kind,
            program: f.program,
        };
        RunHead {
            run: f.run,
            state: f.state,
            owner: owner.into(),
        }
    }
}

/// Whose run it is: a program's, or a hooks-file hook's (the hook id is
/// the record's `Function`). Who may see a run follows from it (`runs.rs`).
///
/// In JSON: `"Owner": "program", "Program": <id>` or `"Owner": "hook"`. A
/// record written before `Owner` existed is its `Program`'s, except
/// `"Program": 0`, which hook runs were then recorded under: it is read as
/// a hook's, the safe side (only unscoped API keys see hook runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(from = "OwnerFields", into = "OwnerFields")]
pub enum Owner {
    /// A program file's program, by id.
    Program(u64),
    /// A hooks-file hook (`hooks_files`).
    Hook,
}

impl Owner {
    /// The program id, for a program's run.
    pub fn program(self) -> Option<u64> {
        match self {
            Owner::Program(id) => Some(id),
            Owner::Hook => None,
        }
    }
}

impl std::fmt::Display for Owner {
    /// The program id, or `hook` (log lines: `<owner>/<function>`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Owner::Program(id) => write!(f, "{id}"),
            Owner::Hook => f.write_str("hook"),
        }
    }
}

/// [`Owner`] as the fields of a record.
#[derive(Serialize, Deserialize)]
struct OwnerFields {
    #[serde(rename = "Owner", default, skip_serializing_if = "Option::is_none")]
    kind: Option<OwnerKind>,
    #[serde(rename = "Program", default, skip_serializing_if = "Option::is_none")]
    program: Option<u64>,
}

#[derive(Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum OwnerKind {
    Program,
    Hook,
}

impl From<OwnerFields> for Owner {
    fn from(f: OwnerFields) -> Owner {
        match (f.kind, f.program) {
            (Some(OwnerKind::Program), Some(id)) => Owner::Program(id),
            // Before `Owner`: program 0 was where hook runs were recorded.
            (None, Some(id)) if id != 0 => Owner::Program(id),
            _ => Owner::Hook,
        }
    }
}

impl From<Owner> for OwnerFields {
    fn from(o: Owner) -> OwnerFields {
        let kind = match o {
            Owner::Program(_) => OwnerKind::Program,
            Owner::Hook => OwnerKind::Hook,
        };
        OwnerFields {
            kind: Some(kind),
            program: o.program(),
        }
    }
}

/// One run, as stored and as served by `GET /api/runs/<id>`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", from = "RecordFields")]
pub struct RunRecord {
    /// Run id: `<instance>-<32 hex>` (older runs: the 32 hex alone).
    pub run: String,
    /// Current state.
    pub state: RunState,
    /// Whose run it is (`Owner`, and `Program` for a program's run):
    /// written as those two fields (`flatten`), read by [`RecordFields`].
    #[serde(flatten)]
    pub owner: Owner,
    /// Function name (for a hook's run: the hook id).
    pub function: String,
    /// Whether it was started with `run_async`.
    #[serde(default)]
    pub r#async: bool,
    /// Who started it: `api_key:<name>`, `app_key:<member>`, `session:<user>`, `public`.
    #[serde(default)]
    pub by: Origin,
    /// The tool environment that started it, `<tool>/<environment>`
    /// (runs of a generated tool endpoint only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<ToolEnv>,
    /// The occurrence it is (runs of a schedule): the time its schedule
    /// named, before `jitter`; `StartedAt` says when it actually started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_at: Option<Time>,
    /// Why it did not run (state `skipped`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<SkipReason>,
    /// How many occurrences it stands for besides its own (`skipped`:
    /// all it covers, from `ScheduledAt` on; a `catch_up = "once"` run:
    /// the missed ones before it). Counted up to 10,000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missed: Option<u64>,
    /// When it was accepted.
    pub created_at: Time,
    /// When it started executing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
    /// Per-step reports (exit code, truncation, duration).
    #[serde(default)]
    pub steps: Vec<StepReport>,
    /// The Result array, when finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// What went wrong, when failed, timed out or interrupted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The last 2 KiB of the failed step's stdout, when it printed any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    /// The `Stderr` of the failed call's answer (`run_failed`: the last
    /// 2 KiB of the failed step's stderr, or why it could not start), so
    /// that a repeat with its `Idempotency-Key` is answered the same
    /// (`Error` holds it trimmed, after a description). Never served
    /// ([`RunRecord::public`] drops it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    /// What the run needs to execute, kept while it has not ended (never
    /// served: [`RunRecord::public`] drops it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<RunInput>,
    /// Completion callbacks of the run: URL, delivery id, attempts, state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub callbacks: Vec<Delivery>,
    /// The run this one re-runs (`POST /api/runs/<id>/rerun`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerun_of: Option<String>,
    /// The re-runs of this run, oldest first (the newest [`MAX_RERUNS`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reruns: Vec<String>,
    /// The values and environment a re-run starts with, kept after the
    /// run ended (never served: [`RunRecord::public`] drops it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerun_input: Option<RunInput>,
    /// The attempts before the current one, oldest first (functions with
    /// `[functions.retry]`); the record's own fields are the current one's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<AttemptReport>,
    /// When the next attempt starts (state `queued` between attempts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<Time>,
    /// The key of its concurrency group (`[functions.concurrency_group]`),
    /// as rendered from its values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// The newer run of its group that replaced it (state `superseded`) or
    /// had it cancelled (`policy = "cancel_running"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<String>,
    /// Its kept output, when the run ended with it still held in memory
    /// (at most `output::INLINE_MAX` bytes; `state/output.rs`): then it has
    /// no output file. Never served ([`RunRecord::public`] drops it); read
    /// by `GET /api/runs/<id>/output` and the run's page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Inline>,
}

/// [`RunRecord`] as read: its fields, `Owner` as the two fields it is
/// written as. A `flatten`ed field made serde buffer every other field of
/// the line (the Result too: up to `max_output_bytes`) before reading it,
/// and made reading a record twice the work: start-up reads every line of
/// the run log. Written by [`RunRecord`]'s own `Serialize` (unchanged).
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RecordFields {
    run: String,
    state: RunState,
    #[serde(rename = "Owner", default)]
    owner_kind: Option<OwnerKind>,
    #[serde(default)]
    program: Option<u64>,
    function: String,
    #[serde(default)]
    r#async: bool,
    #[serde(default)]
    by: Origin,
    #[serde(default)]
    tool: Option<ToolEnv>,
    #[serde(default)]
    scheduled_at: Option<Time>,
    #[serde(default)]
    skipped: Option<SkipReason>,
    #[serde(default)]
    missed: Option<u64>,
    created_at: Time,
    #[serde(default)]
    started_at: Option<Time>,
    #[serde(default)]
    finished_at: Option<Time>,
    #[serde(default)]
    steps: Vec<StepReport>,
    #[serde(default)]
    result: Option<Value>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    stdout: Option<String>,
    #[serde(default)]
    stderr: Option<String>,
    #[serde(default)]
    input: Option<RunInput>,
    #[serde(default)]
    callbacks: Vec<Delivery>,
    #[serde(default)]
    rerun_of: Option<String>,
    #[serde(default)]
    reruns: Vec<String>,
    #[serde(default)]
    rerun_input: Option<RunInput>,
    #[serde(default)]
    attempts: Vec<AttemptReport>,
    #[serde(default)]
    retry_at: Option<Time>,
    #[serde(default)]
    group: Option<String>,
    #[serde(default)]
    superseded_by: Option<String>,
    #[serde(default)]
    output: Option<Inline>,
}

impl From<RecordFields> for RunRecord {
    fn from(f: RecordFields) -> RunRecord {
        // Destructured whole: a field added to one struct and not the
        // other does not compile.
        let RecordFields {
            run,
            state,
            owner_kind,
            program,
            function,
            r#async,
            by,
            tool,
            scheduled_at,
            skipped,
            missed,
            created_at,
            started_at,
            finished_at,
            steps,
            result,
            error,
            stdout,
            stderr,
            input,
            callbacks,
            rerun_of,
            reruns,
            rerun_input,
            attempts,
            retry_at,
            group,
            superseded_by,
            output,
        } = f;
        let owner = Owner::from(OwnerFields {
            kind: owner_kind,
            program,
        });
        RunRecord {
            run,
            state,
            function,
            r#async,
            by,
            tool,
            scheduled_at,
            skipped,
            missed,
            created_at,
            started_at,
            finished_at,
            steps,
            result,
            error,
            stdout,
            stderr,
            input,
            callbacks,
            rerun_of,
            reruns,
            rerun_input,
            attempts,
            retry_at,
            group,
            superseded_by,
            output,
            owner,
        }
    }
}

/// How one earlier attempt of a run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct AttemptReport {
    /// Its number, from 1.
    pub attempt: u32,
    /// How it ended: `failed`, `timed_out` or `interrupted`.
    pub state: RunState,
    /// When it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When it ended.
    pub finished_at: Time,
    /// What went wrong.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Re-runs a record lists; older ones drop off its `Reruns` (each still
/// names this run in its own `RerunOf`).
pub const MAX_RERUNS: usize = 100;

impl RunRecord {
    /// A new run's record, created now, in `state`: every other field
    /// empty (not async, no steps, result, input, callbacks, links). The
    /// one place a record is made from nothing, so that a new field gets
    /// its default here; callers set the rest with `..RunRecord::new(..)`.
    pub fn new(
        run: String,
        state: RunState,
        owner: Owner,
        function: String,
        by: Origin,
    ) -> RunRecord {
        RunRecord {
            run,
            state,
            owner,
            function,
            r#async: false,
            by,
            tool: None,
            scheduled_at: None,
            skipped: None,
            missed: None,
            created_at: Time::now(),
            started_at: None,
            finished_at: None,
            steps: Vec::new(),
            result: None,
            error: None,
            stdout: None,
            stderr: None,
            input: None,
            callbacks: Vec::new(),
            rerun_of: None,
            reruns: Vec::new(),
            rerun_input: None,
            attempts: Vec::new(),
            retry_at: None,
            group: None,
            superseded_by: None,
            output: None,
        }
    }

    /// The record as served: without its input (nor the copy kept for a
    /// re-run) and without its output (served apart).
    pub fn public(mut self) -> RunRecord {
        self.input = None;
        self.rerun_input = None;
        self.output = None;
        self.stderr = None;
        self
    }
}

/// The values and environment of a run, stored with it until it ends, so
/// that an accepted run can execute after a restart.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct RunInput {
    /// Values bound by position to the function's inputs.
    #[serde(default)]
    pub values: Vec<String>,
    /// Tool environment variables (empty for `/api` runs).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vars: BTreeMap<String, String>,
    /// The run read its request body (or a hook's files) from temporary
    /// files, which do not survive a restart.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub body: bool,
    /// The `limit` of its concurrency group, for the cluster queue's take
    /// (`trigd_runs.group_limit`; the key is the record's `Group`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_limit: Option<usize>,
    /// The `policy` of its concurrency group, for the cluster queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_policy: Option<String>,
}
