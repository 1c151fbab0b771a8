//! The validated, immutable configuration snapshot.
//!
//! `config.toml` and every `programs/*.toml` are parsed into the serde
//! structs of [`raw`], then checked and normalised by [`validate`] into the
//! types below. Nothing here is ever mutated after loading: a reload builds a
//! whole new [`Config`] and swaps the `Arc` (see `reload.rs`), so a request or
//! a run keeps the snapshot it started with.
//!
//! Every problem found while loading becomes a [`ConfigError`] carrying the
//! file, line, column and key; loading collects all of them instead of
//! stopping at the first.

pub mod acme;
pub mod callbacks;
pub mod edit;
mod endpoint;
pub mod file;
pub mod group;
mod named;
mod program;
pub(crate) mod raw;
mod receive;
pub mod reference;
pub mod reload;
pub mod retry;
pub mod schedules;
mod server;
mod stamp;
pub mod state_db;
pub mod tls;
mod tools;
pub mod types;
mod validate;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use endpoint::{
    Credentials, Dialect, Endpoint, Entry, Hooks, Methods, Target, TriggerName, Values,
};
pub use named::Named;
pub use stamp::{Stamp, StampCell};
pub use state_db::StateDb;

use crate::http::Method;
use crate::state::record::Owner;

pub use validate::load_str;
pub use validate::{load, load_changed, load_first, load_text, Before};

/// One loaded configuration: server settings, programs, keys, users,
/// workspaces and tools.
#[derive(Debug)]
pub struct Config {
    /// Path of `config.toml` as given on the command line (the public
    /// switch writes it).
    pub path: PathBuf,
    /// `[server]` settings with every default filled in.
    pub server: Server,
    /// Programs by id.
    pub programs: BTreeMap<u64, Arc<Program>>,
    /// Run-endpoint API keys by the sha256 of the key.
    pub api_keys: HashMap<[u8; 32], ApiKey>,
    /// Browser accounts by name.
    pub users: BTreeMap<String, User>,
    /// Workspaces by name.
    pub workspaces: BTreeMap<String, Workspace>,
    /// Tools by name.
    pub tools: BTreeMap<String, Tool>,
    /// Hooks of adnanh/webhook hooks files (`hooks_files`), by id.
    pub hooks: Hooks,
    /// The run endpoint `POST /api`.
    pub run_endpoint: Endpoint,
    /// sha256 of `config.toml`'s text; with the [`Stamp`] of every program
    /// file, a reload that finds both unchanged is skipped.
    pub fingerprint: [u8; 32],
}

/// `trusted_proxies`: the peers whose `X-Forwarded-For` is believed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    /// IP addresses, canonical (IPv4-mapped IPv6 as IPv4).
    pub ips: Vec<std::net::IpAddr>,
    /// Every peer on a Unix socket (the entry `"unix"`): whoever can
    /// connect to the socket file, which `socket_mode` decides.
    pub unix: bool,
}

/// The socket file trigd creates for `listen = "unix:PATH"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketFile {
    /// Permission bits (`socket_mode`, default `0660`).
    pub mode: u32,
    /// Owner, a name or uid (`socket_user`; default trigd's user).
    pub user: Option<String>,
    /// Group, a name or gid (`socket_group`; default trigd's group).
    pub group: Option<String>,
}

/// `[server]` settings. Every field has a default (see docs/config-reference.md).
#[derive(Debug, Clone)]
pub struct Server {
    /// Address to listen on, `host:port` (`listen`, default `127.0.0.1:8080`).
    pub listen: String,
    /// HTTP threads kept ready while idle (`workers`, default 8). Each open
    /// connection is served on a thread of its own, up to `max_connections`.
    pub workers: usize,
    /// Directory of program files, resolved (`programs_dir`, default `programs`).
    pub programs_dir: PathBuf,
    /// Directory written by trigd, resolved (`state_dir`, default `state`).
    pub state_dir: PathBuf,
    /// Base URL shown for generated endpoints (`public_url`, default none:
    /// `http://<listen>`).
    pub public_url: Option<String>,
    /// Runs executing at once, sync and async together (default 2 per CPU
    /// core, from 4 to 64: `raw::defaults::max_concurrent_runs`).
    pub max_concurrent_runs: usize,
    /// Async runs executing at once, at most (default: half of
    /// `max_concurrent_runs`, rounded up); the other slots stay free for
    /// sync calls while async runs wait.
    pub max_concurrent_async_runs: usize,
    /// Runs waiting for a slot, sync and async together (default 250000).
    pub max_queued_runs: usize,
    /// How long a sync run waits in the queue for a slot before it is
    /// refused with `busy` (`queue_timeout`, default 30s).
    pub queue_timeout: Duration,
    /// How long an `Idempotency-Key` is remembered (`idempotency_window`,
    /// default 24h).
    pub idempotency_window: Duration,
    /// Idempotency keys remembered at most; past it the oldest is forgotten
    /// (`idempotency_max_keys`, default 100000).
    pub idempotency_max_keys: usize,
    /// Default timeout of a function (`run_timeout`, default 60s).
    pub run_timeout: Duration,
    /// Time between SIGTERM and SIGKILL of a timed-out run (default 5s).
    pub kill_grace: Duration,
    /// Time runs get to finish on SIGTERM/SIGINT of trigd (default 30s).
    pub shutdown_grace: Duration,
    /// Captured stdout per step, and stderr likewise (default 1 MiB).
    pub max_output_bytes: usize,
    /// Maximum number of values in one request (default 64).
    pub max_variables: usize,
    /// Maximum size of one value in bytes (default 64 KiB).
    pub max_variable_bytes: usize,
    /// Maximum request body size in bytes (default 1 MiB).
    pub max_body_bytes: usize,
    /// Bytes of values (and variables) that the sync runs waiting for a
    /// slot may hold in all; a run that would pass it is refused with
    /// `busy` (`max_waiting_bytes`, default 64 MiB).
    pub max_waiting_bytes: usize,
    /// Run records kept in the state dir (default 10000).
    pub run_retention: usize,
    /// Open HTTP connections at most; past it a connection gets 503 at once
    /// (default 1024).
    pub max_connections: usize,
    /// Time a client has to send a request (head and body), counted from
    /// its first byte or from the end of its previous request on a
    /// keep-alive connection; also the idle keep-alive timeout (default 10s).
    pub request_timeout: Duration,
    /// Largest request header section in bytes; past it 431 (default 32 KiB).
    pub max_header_bytes: usize,
    /// Longest request line (method, URL, version) in bytes; past it 414
    /// (default 8 KiB).
    pub max_url_bytes: usize,
    /// Mark the session cookie `Secure` (`cookie_secure`, default false;
    /// also true when `public_url` starts with `https://`).
    pub cookie_secure: bool,
    /// A login session ends after this long without a request
    /// (`session_idle`, default 12h).
    pub session_idle: Duration,
    /// A login session ends this long after login, used or not
    /// (`session_max`, default 7d).
    pub session_max: Duration,
    /// Failed authentications per client address and minute before its
    /// requests get 429 for the rest of the minute (default 30; 0: off).
    pub auth_failures_per_minute: usize,
    /// Peers whose `X-Forwarded-For` header is believed when deciding the
    /// client address (default none).
    pub trusted_proxies: TrustedProxies,
    /// Owner and mode of the socket file of `listen = "unix:PATH"`.
    pub socket: SocketFile,
    /// Completion callback settings (the `[callbacks]` table).
    pub callbacks: Arc<callbacks::Callbacks>,
    /// Whether this instance fires its schedules (`schedules`: `fire`,
    /// the default, or `off`).
    pub fire_schedules: bool,
    /// This instance's name, the prefix of every run id (`instance`,
    /// default from the host name; read only at start).
    pub instance: String,
    /// Time between SIGTERM and closing the listener during which
    /// `/healthz` answers 503 `draining` while requests are still served
    /// (`drain_delay`, default 0s).
    pub drain_delay: Duration,
    /// Directory of `app_keys.json`, which instances may share
    /// (`shared_state_dir`, default: `state_dir`; read only at start).
    pub shared_state_dir: PathBuf,
    /// adnanh/webhook hooks files: `hooks_files`, `hooks_url_prefix`,
    /// `hooks_http_methods`.
    pub hooks: crate::compat::webhook::Settings,
    /// HTTPS: `tls_cert`, `tls_key`, `tls_handshake_timeout`,
    /// `redirect_http` (read only at start; the files reload by themselves).
    pub tls: tls::Tls,
    /// Certificates from an ACME directory (the `[acme]` table; read only
    /// at start).
    pub acme: Option<Arc<acme::Acme>>,
    /// The PostgreSQL database holding the shared state (`[state] url`);
    /// `None`: `state_dir` (read only at start).
    pub state_db: Option<Arc<StateDb>>,
}

/// A run-endpoint API key (`[[api_keys]]`). Only its hash is known.
#[derive(Debug, Clone)]
pub struct ApiKey {
    /// Name for logs and run records; never the key itself.
    pub name: String,
    /// When set, the key reaches only programs of this workspace.
    pub workspace: Option<String>,
    /// When set, the key reaches only these program ids.
    pub programs: Option<BTreeSet<u64>>,
    /// Requests per minute this key may make (`rate_per_minute`); `None`:
    /// unlimited.
    pub rate_per_minute: Option<u64>,
    /// Whether requests with this key may name a callback URL
    /// (`request_callbacks`).
    pub request_callbacks: bool,
}

impl ApiKey {
    /// Whether this key may run (and read runs of) `program`.
    pub fn may_access(&self, program: &Program) -> bool {
        let ws_ok = match &self.workspace {
            None => true,
            Some(ws) => program.workspace.as_deref() == Some(ws.as_str()),
        };
        let id_ok = self
            .programs
            .as_ref()
            .is_none_or(|ids| ids.contains(&program.id));
        ws_ok && id_ok
    }

    /// Whether the key has no scope (`workspace` and `programs` unset):
    /// only such a key may read, follow and cancel hook runs.
    pub fn is_unscoped(&self) -> bool {
        self.workspace.is_none() && self.programs.is_none()
    }
}

/// A program file: an id and its functions.
#[derive(Debug)]
pub struct Program {
    /// The `program_id` callers send.
    pub id: u64,
    /// Human name, unique across programs (`trigd run NAME`).
    pub name: String,
    /// Owning workspace, if any.
    pub workspace: Option<String>,
    /// The file it was loaded from (`trigd check` names it in warnings).
    pub file: PathBuf,
    /// Functions in file order.
    pub functions: Vec<Function>,
    /// The file as it was read; `None`: read it again at the next reload.
    pub stamp: StampCell,
    /// Hash of the file's text: a file read again with the same text
    /// keeps this program.
    pub digest: u64,
    /// A hooks-file hook's one-function program: its runs are the hook's
    /// ([`Owner::Hook`]), not a program id's (`id` is not a program id).
    pub hook: bool,
}

impl Program {
    /// Who owns this program's runs.
    pub fn owner(&self) -> Owner {
        if self.hook {
            Owner::Hook
        } else {
            Owner::Program(self.id)
        }
    }

    /// The function called `name`.
    pub fn function(&self, name: &str) -> Option<&Function> {
        self.functions.iter().find(|f| f.name == name)
    }

    /// Functions whose Webhook Trigger is active, in file order.
    pub fn triggered(&self) -> impl Iterator<Item = &Function> {
        self.functions
            .iter()
            .filter(|f| f.webhook_trigger.as_ref().is_some_and(|w| w.active))
    }
}

/// One function of a program: steps run in order.
#[derive(Debug)]
pub struct Function {
    /// Name, unique within the program.
    pub name: String,
    /// Steps in order; never empty.
    pub steps: Vec<Step>,
    /// Timeout of the whole function (`timeout`, default `server.run_timeout`).
    pub timeout: Duration,
    /// Extra environment for every step (`env`).
    pub env: BTreeMap<String, String>,
    /// Working directory of every step, resolved (`workdir`, default the
    /// directory of the program file).
    pub workdir: PathBuf,
    /// At most this many runs of this function at once (`concurrency`).
    pub concurrency: Option<usize>,
    /// Run again after a restart when trigd died while it ran
    /// (`retry_on_restart`, default false).
    pub retry_on_restart: bool,
    /// How each step's stdout becomes its Result element (`output`).
    pub output: OutputMode,
    /// The names the caller's values bind to, by position, for every
    /// trigger: the function's `outputs`, else its Webhook Trigger's (an
    /// inactive trigger still declares them), else none.
    pub outputs: Vec<String>,
    /// The Webhook Trigger (`[functions.webhook]`), at most one: what
    /// makes the function callable through `POST /api`.
    pub webhook_trigger: Option<WebhookTrigger>,
    /// Numeric uid to run the steps as (`user`, resolved at load time);
    /// `None`: trigd's own.
    pub user: Option<u32>,
    /// Numeric gid to run the steps as (`group`, or the primary group of
    /// `user`); `None`: trigd's own.
    pub group: Option<u32>,
    /// Called when a run of this function ends (`callback`), checked
    /// against `[callbacks]`.
    pub callback: Option<callbacks::Fixed>,
    /// Give each input to the steps as an environment variable of its name
    /// (true for every program file; a hooks-file hook passes its
    /// environment by name in the job's `vars` instead).
    pub env_inputs: bool,
    /// Send each step's stderr into its stdout, in the order written (a
    /// hooks-file hook answers with the command's combined output).
    pub combined_output: bool,
    /// A successful run is expected at least this often, whatever starts
    /// it (`expect_every`); past it the function is overdue.
    pub expect_every: Option<Duration>,
    /// Its schedule triggers (`[[functions.schedules]]`).
    pub schedules: Vec<schedules::Schedule>,
    /// How its runs are attempted again (`[functions.retry]`).
    pub retry: Option<retry::Retry>,
    /// The concurrency group its runs belong to
    /// (`[functions.concurrency_group]`).
    pub concurrency_group: Option<group::Group>,
}

impl Function {
    /// The names the caller's values bind to, by position
    /// ([`Function::outputs`]).
    pub fn inputs(&self) -> &[String] {
        &self.outputs
    }
}

/// How a step's stdout becomes its Result element (`output` of a function).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputMode {
    /// A JSON object or array is parsed; anything else is the text.
    #[default]
    Auto,
    /// Any JSON value, scalars too (numbers kept digit for digit); stdout
    /// that is not JSON fails the step.
    Json,
    /// Always the text.
    Text,
    /// The text split into lines: an array of strings.
    Lines,
    /// The text exactly as printed (a hooks-file hook's answer); not
    /// written in program files.
    #[serde(skip)]
    Raw,
}

/// The seed's Webhook Trigger, what makes a function callable through
/// `POST /api`: its `[functions.webhook]` table. Its outputs are the
/// function's ([`Function::outputs`]).
#[derive(Debug)]
pub struct WebhookTrigger {
    /// Whether the run endpoint may start this function (default true).
    pub active: bool,
    /// Whether the table itself lists `outputs` (the seed's form; an
    /// inactive table that only does that gets a `trigd check` warning
    /// naming the function-level `outputs`).
    pub lists_outputs: bool,
}

/// One step of a function.
#[derive(Debug)]
pub enum Step {
    /// argv, no shell; each element may hold `{output}` placeholders.
    Command(Vec<Template>),
    /// Script for `/bin/sh -c`; values reach it only through the environment.
    Shell(String),
    /// Another function of the same program, with arguments bound by
    /// position to its inputs.
    Call {
        /// Name of the called function (validated to exist, no cycles).
        function: String,
        /// One template per input of the called function.
        args: Vec<Template>,
    },
}

/// A string with `{output}` placeholders, resolved at load time to indices
/// into the function's inputs. `{{` and `}}` stand for literal braces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template(pub Vec<Piece>);

/// A part of a [`Template`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Literal text.
    Lit(String),
    /// The value bound to input number `n` of the function.
    Var(usize),
}

impl Template {
    /// Substitute `values` (indexed like the function's inputs). A value is
    /// inserted verbatim into this one argument; nothing is re-parsed.
    pub fn render(&self, values: &[String]) -> String {
        let mut out = String::new();
        for piece in &self.0 {
            match piece {
                Piece::Lit(s) => out.push_str(s),
                Piece::Var(i) => out.push_str(values.get(*i).map_or("", String::as_str)),
            }
        }
        out
    }
}

/// A browser account (`[[users]]`).
#[derive(Debug, Clone)]
pub struct User {
    /// Login name.
    pub name: String,
    /// argon2 PHC string (`$argon2id$…`); empty for a generated password
    /// that has not been made yet (no password matches it).
    pub password_hash: String,
    /// `password = "generate"`: the hash lives in the state dir.
    pub generated_password: bool,
}

/// A workspace (`[[workspaces]]`).
#[derive(Debug, Clone)]
pub struct Workspace {
    /// Member user names; each names a `[[users]]` entry.
    pub members: Vec<String>,
    /// Members who may flip the public switch of the workspace's tools
    /// from the browser or over HTTP; `None` (no `admins` key): every member.
    pub admins: Option<Vec<String>>,
}

impl Workspace {
    /// Whether `user` may flip the public switch of this workspace's tools.
    pub fn may_flip(&self, user: &str) -> bool {
        self.members.iter().any(|m| m == user)
            && self
                .admins
                .as_ref()
                .is_none_or(|a| a.iter().any(|m| m == user))
    }
}

/// A tool (`[[tools]]`) with its environments and triggers.
#[derive(Debug)]
pub struct Tool {
    /// Name, an identifier (appears in URLs).
    pub name: String,
    /// Owning workspace.
    pub workspace: String,
    /// Environments by name (appear in URLs).
    pub environments: Named<Environment>,
    /// Endpoint triggers in file order.
    pub triggers: Vec<Trigger>,
}

/// One environment of a tool.
#[derive(Debug)]
pub struct Environment {
    /// Name, an identifier.
    pub name: String,
    /// When true, every generated endpoint of this environment is public.
    pub public: bool,
    /// The credentials its endpoints take (from `public` and the tool's
    /// workspace).
    pub credentials: Credentials,
    /// Its endpoints by trigger name, compiled from the tool's triggers
    /// (each carries the environment's `vars`).
    pub endpoints: Named<Endpoint>,
}

/// The kinds of tool trigger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TriggerKind {
    /// `kind = "endpoint"`: one HTTP endpoint per environment.
    Endpoint,
}

/// A trigger of a tool: generates `METHOD /tools/<tool>/<env>/<name>`.
#[derive(Debug)]
pub struct Trigger {
    /// What kind of trigger it is.
    pub kind: TriggerKind,
    /// Name, an identifier (appears in URLs), unique within the tool.
    pub name: String,
    /// HTTP method (`GET`, `POST`, `PUT`, `PATCH` or `DELETE`).
    pub method: Method,
    /// Program id; validated to exist.
    pub program: u64,
    /// Function name; validated to exist in that program.
    pub function: String,
    /// Called when a run through this trigger ends (`callback`).
    pub callback: Option<callbacks::Fixed>,
    /// Whether callers may name a callback URL per request
    /// (`request_callbacks`).
    pub request_callbacks: bool,
    /// Verification, value sources, rule and answer shape (default: none,
    /// values by output name, no rule, plain answer).
    pub receive: Arc<crate::receive::Receive>,
    /// The concurrency group of runs through it, in place of the
    /// function's (`[tools.triggers.concurrency_group]`).
    pub group: Option<group::Group>,
}

/// A problem in a config or program file, with where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file.
    pub file: PathBuf,
    /// 1-based line; 0 when not known (e.g. the file cannot be read).
    pub line: usize,
    /// 1-based column; 0 when not known.
    pub col: usize,
    /// Dotted key path, e.g. `functions[1].webhook.outputs`; may be empty.
    pub key: String,
    /// What is wrong and, where it helps, what to do.
    pub msg: String,
}

impl fmt::Display for ConfigError {
    /// `programs/backup.toml:12:3: functions[1].webhook: a function has at most one webhook`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if self.line > 0 {
            write!(f, ":{}:{}", self.line, self.col)?;
        }
        if !self.key.is_empty() {
            write!(f, ": {}", self.key)?;
        }
        write!(f, ": {}", self.msg)
    }
}

impl Config {
    /// The program with `id`.
    pub fn program(&self, id: u64) -> Option<&Arc<Program>> {
        self.programs.get(&id)
    }

    /// The program whose name or decimal id is `name_or_id`.
    pub fn program_by_name(&self, name_or_id: &str) -> Option<&Arc<Program>> {
        if let Ok(id) = name_or_id.parse::<u64>() {
            if let Some(p) = self.programs.get(&id) {
                return Some(p);
            }
        }
        self.programs.values().find(|p| p.name == name_or_id)
    }
}

/// The prefix of a systemd credential in a secret's path:
/// `secret_file = "credential:github"` is `$CREDENTIALS_DIRECTORY/github`
/// (`LoadCredential=github:/etc/trigd/github.secret` in the unit).
pub const CREDENTIAL_PREFIX: &str = "credential:";

/// The file of a secret (`secret_file`, a TLS key): `credential:NAME`, a
/// file of systemd's `$CREDENTIALS_DIRECTORY`, or a path resolved against
/// `base` unless absolute.
///
/// # Errors
/// A credential is named but `$CREDENTIALS_DIRECTORY` is unset, the name is
/// not a plain file name, or there is no such credential. Each message
/// says what to add to the unit.
pub fn secret_path(base: &Path, value: &str) -> Result<PathBuf, String> {
    let Some(name) = value.strip_prefix(CREDENTIAL_PREFIX) else {
        return Ok(resolve(base, Path::new(value)));
    };
    credential(name, std::env::var_os("CREDENTIALS_DIRECTORY"))
}

/// The file of credential `name` in `dir` (`$CREDENTIALS_DIRECTORY`).
fn credential(name: &str, dir: Option<std::ffi::OsString>) -> Result<PathBuf, String> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(format!(
            "{CREDENTIAL_PREFIX}{name}: a credential's name is a file name, without '/'"
        ));
    }
    let Some(dir) = dir.filter(|d| !d.is_empty()) else {
        return Err(format!(
            "{CREDENTIAL_PREFIX}{name} names a systemd credential, but $CREDENTIALS_DIRECTORY \
             is not set: start trigd from a unit with LoadCredential={name}:/path/to/file \
             (or give a path instead)"
        ));
    };
    let path = Path::new(&dir).join(name);
    if !path.is_file() {
        return Err(format!(
            "no credential {name:?} in $CREDENTIALS_DIRECTORY ({}): add \
             LoadCredential={name}:/path/to/file to the unit",
            path.parent().unwrap_or(Path::new("")).display()
        ));
    }
    Ok(path)
}

/// Resolve `p` against `base` unless it is absolute.
pub fn resolve(base: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}
