//! serde structs mirroring `config.toml` and the program files one to one,
//! plus [`parse`], which turns TOML text into them with a located error.
//!
//! Every struct denies unknown fields. Values that validation must point at
//! are `toml::Spanned`; values whose checks should not stop the parse of the
//! rest of the file (numbers that must be >= 1, durations, hashes, methods)
//! are kept loose here and checked in `validate.rs`, so one file can report
//! many problems. Defaults that need no check live here ([`defaults`]).
//!
//! The one non-obvious decision: `webhook` accepts a table *or* an array of
//! tables ([`WebhookSlot`]), so that `[[functions.webhook]]` written twice gets
//! the same clear "at most one" error as a repeated `[functions.webhook]`,
//! whose TOML duplicate-key message [`parse`] rewrites.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;

use serde::de::{self, DeserializeOwned, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use toml::Spanned;

/// Default values of `[server]` fields (docs/config-reference.md lists them).
pub mod defaults {
    /// `listen`.
    pub const LISTEN: &str = "127.0.0.1:8080";
    /// `socket_mode`: owner and group read and write.
    pub const SOCKET_MODE: u32 = 0o660;
    /// `workers`.
    pub const WORKERS: usize = 8;
    /// `workers` (and `[callbacks] workers`) at most: threads started at
    /// once and kept idle. More serve nothing that a thread started on
    /// demand would not, and `workers = 9223372036854775807` exhausted the
    /// thread limit at start: trigd listened and never answered.
    pub const MAX_WORKERS: usize = 1024;
    /// `programs_dir`.
    pub const PROGRAMS_DIR: &str = "programs";
    /// `state_dir`.
    pub const STATE_DIR: &str = "state";
    /// `max_concurrent_runs`: runs per core when it is not set
    /// ([`max_concurrent_runs`]).
    pub const RUNS_PER_CORE: usize = 2;
    /// `max_concurrent_runs` when it is not set, at least.
    pub const MIN_CONCURRENT_RUNS: usize = 4;
    /// `max_concurrent_runs` when it is not set, at most.
    pub const MAX_DEFAULT_CONCURRENT_RUNS: usize = 64;

    /// `max_concurrent_runs` when it is not set: [`RUNS_PER_CORE`] per core
    /// this process may use (its CPU affinity and cgroup quota), within
    /// [`MIN_CONCURRENT_RUNS`]..=[`MAX_DEFAULT_CONCURRENT_RUNS`]. Measured
    /// on 2 cores (bench/README.md, "Four slots instead of eight"): the
    /// runs beyond the slots wait in the FIFO queue instead of taking
    /// turns on the CPU, so 4 slots gave sync `/bin/true` and `/bin/echo`
    /// calls a p99 13–36 % under webhook's at 8 and at 32 connections in
    /// each of three runs alternating with three of 8 slots (8 slots: at
    /// webhook's, `/bin/true` short in two of three at 32 connections),
    /// for some of trigd's CPU a call that waits for a slot
    /// (`/bin/true` at 8 connections 1.21–1.28× webhook's req/s against
    /// 1.29–1.30×: bench/README, "Two full runs of 9d47b19"), and 1.6–1.7×
    /// webhook's async accepts (8 slots: 1.16–1.40×); 16 slots had been
    /// worse than 8.
    pub fn max_concurrent_runs() -> usize {
        concurrent_runs_for(crate::sys::cores())
    }
    /// [`max_concurrent_runs`] on a host of `cores` cores.
    pub fn concurrent_runs_for(cores: usize) -> usize {
        (cores * RUNS_PER_CORE).clamp(MIN_CONCURRENT_RUNS, MAX_DEFAULT_CONCURRENT_RUNS)
    }
    /// `max_concurrent_async_runs` when it is not set: half the run slots,
    /// rounded up. Measured on 2 cores (bench/README.md, "Async runs take
    /// half the slots"): async `sh` runs drained as fast with 4 slots as
    /// with 8 (the children keep both cores busy either way), while the
    /// accepts of a 32-connection burst went up by 30–60 % and their p99
    /// halved; sync calls keep all 8 slots, and always find room beside
    /// an async backlog.
    pub fn max_concurrent_async_runs(max_concurrent_runs: usize) -> usize {
        max_concurrent_runs.div_ceil(2)
    }
    /// `max_queued_runs`: a 10 s flood of async accepts fits with room on
    /// 2 cores. At 100,000 it did not on a faster machine of the bench's
    /// kind (2026-11-28: 11,566 accepts a second against 2,288 runs
    /// executed, 48,245 requests refused with `busy` in a round); a
    /// queued run costs about 270 bytes, so a full queue about 68 MiB,
    /// given back once it drains. With 4 slots (2 per core) the same
    /// flood peaked at about 135,000 queued (15,800 accepts a second
    /// against 2,450 runs executed).
    pub const MAX_QUEUED_RUNS: usize = 250_000;
    /// `queue_timeout`, in seconds.
    pub const QUEUE_TIMEOUT_SECS: u64 = 30;
    /// `idempotency_window`, in seconds (24 hours).
    pub const IDEMPOTENCY_WINDOW_SECS: u64 = 24 * 3600;
    /// `idempotency_max_keys`.
    pub const IDEMPOTENCY_MAX_KEYS: usize = 100_000;
    /// `run_timeout`, in seconds.
    pub const RUN_TIMEOUT_SECS: u64 = 60;
    /// `kill_grace`, in seconds.
    pub const KILL_GRACE_SECS: u64 = 5;
    /// `shutdown_grace`, in seconds.
    pub const SHUTDOWN_GRACE_SECS: u64 = 30;
    /// `drain_delay`, in seconds.
    pub const DRAIN_DELAY_SECS: u64 = 0;
    /// `max_output_bytes`.
    pub const MAX_OUTPUT_BYTES: usize = 1 << 20;
    /// `max_variables`.
    pub const MAX_VARIABLES: usize = 64;
    /// `max_variable_bytes`.
    pub const MAX_VARIABLE_BYTES: usize = 64 << 10;
    /// `max_body_bytes`.
    pub const MAX_BODY_BYTES: usize = 1 << 20;
    /// `max_waiting_bytes`.
    pub const MAX_WAITING_BYTES: usize = 64 << 20;
    /// `run_retention`.
    pub const RUN_RETENTION: usize = 10_000;
    /// `max_connections`.
    pub const MAX_CONNECTIONS: usize = 1024;
    /// `request_timeout`, in seconds.
    pub const REQUEST_TIMEOUT_SECS: u64 = 10;
    /// `max_header_bytes`.
    pub const MAX_HEADER_BYTES: usize = 32 << 10;
    /// `max_url_bytes`.
    pub const MAX_URL_BYTES: usize = 8 << 10;
    /// `session_idle`, in seconds (12 hours).
    pub const SESSION_IDLE_SECS: u64 = 12 * 3600;
    /// `session_max`, in seconds (7 days).
    pub const SESSION_MAX_SECS: u64 = 7 * 86_400;
    /// `auth_failures_per_minute` (0 turns the limit off).
    pub const AUTH_FAILURES_PER_MINUTE: usize = 30;
    /// `tls_handshake_timeout`, in seconds.
    pub const TLS_HANDSHAKE_TIMEOUT_SECS: u64 = 10;
}

/// The message for a second webhook trigger on one function.
pub const ONE_WEBHOOK: &str = "a function has at most one webhook trigger";

/// `config.toml`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// `[server]`.
    #[serde(default)]
    pub server: RawServer,
    /// `[[api_keys]]`.
    #[serde(default)]
    pub api_keys: Vec<RawApiKey>,
    /// `[[users]]`.
    #[serde(default)]
    pub users: Vec<RawUser>,
    /// `[[workspaces]]`.
    #[serde(default)]
    pub workspaces: Vec<RawWorkspace>,
    /// `[[tools]]`.
    #[serde(default)]
    pub tools: Vec<RawTool>,
    /// `[callbacks]`.
    #[serde(default)]
    pub callbacks: RawCallbacks,
    /// `[acme]`: certificates from an ACME directory.
    pub acme: Option<Spanned<RawAcme>>,
    /// `[state]`: a PostgreSQL database instead of the state directory.
    #[serde(default)]
    pub state: RawState,
}

/// A number that must be >= 1, kept loose so validation can point at it.
pub type Count = Option<Spanned<i64>>;

/// `[server]`; absent fields take [`defaults`].
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    /// `listen`.
    pub listen: Option<Spanned<String>>,
    /// `workers`.
    pub workers: Count,
    /// `programs_dir`.
    pub programs_dir: Option<Spanned<String>>,
    /// `state_dir`.
    pub state_dir: Option<Spanned<String>>,
    /// `public_url`.
    pub public_url: Option<Spanned<String>>,
    /// `max_concurrent_runs`.
    pub max_concurrent_runs: Count,
    /// `max_concurrent_async_runs`.
    pub max_concurrent_async_runs: Count,
    /// `max_queued_runs`.
    pub max_queued_runs: Count,
    /// `run_timeout`.
    pub run_timeout: Option<Spanned<RawDuration>>,
    /// `kill_grace`.
    pub kill_grace: Option<Spanned<RawDuration>>,
    /// `shutdown_grace`.
    pub shutdown_grace: Option<Spanned<RawDuration>>,
    /// `max_output_bytes`.
    pub max_output_bytes: Count,
    /// `max_variables`.
    pub max_variables: Count,
    /// `max_variable_bytes`.
    pub max_variable_bytes: Count,
    /// `max_body_bytes`.
    pub max_body_bytes: Count,
    /// `max_waiting_bytes`.
    pub max_waiting_bytes: Count,
    /// `run_retention`.
    pub run_retention: Count,
    /// `max_connections`.
    pub max_connections: Count,
    /// `request_timeout`.
    pub request_timeout: Option<Spanned<RawDuration>>,
    /// `max_header_bytes`.
    pub max_header_bytes: Count,
    /// `max_url_bytes`.
    pub max_url_bytes: Count,
    /// `cookie_secure`, default false (true anyway when `public_url` is https).
    pub cookie_secure: Option<bool>,
    /// `session_idle`.
    pub session_idle: Option<Spanned<RawDuration>>,
    /// `session_max`.
    pub session_max: Option<Spanned<RawDuration>>,
    /// `auth_failures_per_minute`.
    pub auth_failures_per_minute: Count,
    /// `queue_timeout`.
    pub queue_timeout: Option<Spanned<RawDuration>>,
    /// `idempotency_window`.
    pub idempotency_window: Option<Spanned<RawDuration>>,
    /// `idempotency_max_keys`.
    pub idempotency_max_keys: Count,
    /// `socket_mode`: octal mode of a Unix socket file trigd creates.
    pub socket_mode: Option<Spanned<String>>,
    /// `socket_user`: owner of a Unix socket file trigd creates.
    pub socket_user: Option<Spanned<String>>,
    /// `socket_group`: group of a Unix socket file trigd creates.
    pub socket_group: Option<Spanned<String>>,
    /// `trusted_proxies`: IP addresses (and `unix`) whose
    /// `X-Forwarded-For` is believed.
    #[serde(default)]
    pub trusted_proxies: Vec<Spanned<String>>,
    /// `instance`: this instance's name, part of every run id.
    pub instance: Option<Spanned<String>>,
    /// `drain_delay`: not-ready time between SIGTERM and closing.
    pub drain_delay: Option<Spanned<RawDuration>>,
    /// `shared_state_dir`: where application keys live, shared by instances.
    pub shared_state_dir: Option<Spanned<String>>,
    /// `schedules`: `fire` (default) or `off`: whether this instance fires
    /// the schedules it loads.
    pub schedules: Option<Spanned<String>>,
    /// `hooks_files`: adnanh/webhook hooks files (JSON or YAML).
    #[serde(default)]
    pub hooks_files: Vec<Spanned<String>>,
    /// `hooks_url_prefix`: the first path segment(s) of their URLs.
    pub hooks_url_prefix: Option<Spanned<String>>,
    /// `hooks_http_methods`: methods of a hook without `http-methods`.
    #[serde(default)]
    pub hooks_http_methods: Vec<Spanned<String>>,
    /// `hooks_deduplicate`: a hook whose rule requires a signature
    /// deduplicates redeliveries by the sender's delivery id (default true).
    pub hooks_deduplicate: Option<bool>,
    /// `tls_cert`: PEM certificate chain; HTTPS with `tls_key`.
    pub tls_cert: Option<Spanned<String>>,
    /// `tls_key`: PEM private key of `tls_cert`.
    pub tls_key: Option<Spanned<String>>,
    /// `tls_handshake_timeout`.
    pub tls_handshake_timeout: Option<Spanned<RawDuration>>,
    /// `redirect_http`: plain-HTTP address redirecting to HTTPS.
    pub redirect_http: Option<Spanned<String>>,
}

/// `[callbacks]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCallbacks {
    /// `allow`: host names or URL prefixes callbacks may go to.
    #[serde(default)]
    pub allow: Vec<Spanned<String>>,
    /// `allow_private`: addresses or CIDR blocks allowed although private,
    /// loopback or link-local.
    #[serde(default)]
    pub allow_private: Vec<Spanned<String>>,
    /// `secret_env`: the environment variable holding the signing secret.
    pub secret_env: Option<Spanned<String>>,
    /// `secret_file`: the file holding it (relative to config.toml).
    pub secret_file: Option<Spanned<String>>,
    /// `ca_file`: PEM certificates trusted besides the bundled roots.
    pub ca_file: Option<Spanned<String>>,
    /// `timeout` of one attempt.
    pub timeout: Option<Spanned<RawDuration>>,
    /// `retry_for`: no attempt starts later than this after the first.
    pub retry_for: Option<Spanned<RawDuration>>,
    /// `backoff`: the first wait between attempts.
    pub backoff: Option<Spanned<RawDuration>>,
    /// `backoff_max`: the longest wait between attempts.
    pub backoff_max: Option<Spanned<RawDuration>>,
    /// `workers`: delivery threads.
    pub workers: Count,
    /// `max_pending`: deliveries waiting at most.
    pub max_pending: Count,
}

/// `[state]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawState {
    /// `url`: `postgres://user@host:port/db?sslmode=…`.
    pub url: Option<Spanned<String>>,
    /// `password_env`: the variable holding the database password.
    pub password_env: Option<Spanned<String>>,
    /// `password_file`: the file (or `credential:NAME`) holding it.
    pub password_file: Option<Spanned<String>>,
    /// `ca_file`: PEM roots trusted for the database's certificate.
    pub ca_file: Option<Spanned<String>>,
    /// `lease`: an instance's lease on its runs without a heartbeat.
    pub lease: Option<Spanned<RawDuration>>,
    /// `pool`: connections per instance.
    pub pool: Count,
}

/// `[acme]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAcme {
    /// `domains`: the names of the certificate.
    #[serde(default)]
    pub domains: Vec<Spanned<String>>,
    /// `contact`: `mailto:` URLs of the account.
    #[serde(default)]
    pub contact: Vec<Spanned<String>>,
    /// `directory`: the ACME directory URL.
    pub directory: Option<Spanned<String>>,
    /// `terms_accepted`: the CA's terms of service are accepted.
    pub terms_accepted: Option<Spanned<bool>>,
    /// `challenge`: `http-01`.
    pub challenge: Option<Spanned<String>>,
    /// `ca_file`: PEM certificates trusted to reach the directory.
    pub ca_file: Option<Spanned<String>>,
    /// `renew_before`: renew this long before the certificate expires.
    pub renew_before: Option<Spanned<RawDuration>>,
    /// `timeout` of one request to the ACME server.
    pub timeout: Option<Spanned<RawDuration>>,
    /// `retry_min`: the first wait after a failed attempt.
    pub retry_min: Option<Spanned<RawDuration>>,
    /// `retry_max`: the longest wait between attempts.
    pub retry_max: Option<Spanned<RawDuration>>,
}

/// A duration as written: integer seconds or text like `"1m30s"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawDuration {
    /// An integer number of seconds.
    Secs(i64),
    /// Text, parsed by `types::parse_duration`.
    Text(String),
}

impl<'de> Deserialize<'de> for RawDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = RawDuration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration like \"60s\" or an integer number of seconds")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<RawDuration, E> {
                Ok(RawDuration::Secs(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<RawDuration, E> {
                Ok(RawDuration::Secs(i64::try_from(v).unwrap_or(i64::MAX)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawDuration, E> {
                Ok(RawDuration::Text(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// A user or group as written: a name or a numeric id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawId {
    /// A numeric id.
    Id(i64),
    /// A name, looked up in /etc/passwd or /etc/group.
    Name(String),
}

impl<'de> Deserialize<'de> for RawId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = RawId;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a name or a numeric id")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<RawId, E> {
                Ok(RawId::Id(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<RawId, E> {
                Ok(RawId::Id(i64::try_from(v).unwrap_or(i64::MAX)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawId, E> {
                Ok(RawId::Name(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// `[[api_keys]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawApiKey {
    /// `name`, unique.
    pub name: Spanned<String>,
    /// `sha256`, 64 hex digits, unique.
    pub sha256: Spanned<String>,
    /// `workspace`.
    pub workspace: Option<Spanned<String>>,
    /// `programs`.
    pub programs: Option<Vec<Spanned<i64>>>,
    /// `rate_per_minute`, >= 1; unset: unlimited.
    pub rate_per_minute: Count,
    /// `request_callbacks`: the key may name a callback URL per request.
    pub request_callbacks: Option<Spanned<bool>>,
}

/// `[[users]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUser {
    /// `name`.
    pub name: Spanned<String>,
    /// `password`, an argon2 PHC string.
    pub password: Spanned<String>,
}

/// `[[workspaces]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWorkspace {
    /// `name`.
    pub name: Spanned<String>,
    /// `members`, user names.
    #[serde(default)]
    pub members: Vec<Spanned<String>>,
    /// `admins`, members who may flip public switches; absent: every member.
    #[serde(default)]
    pub admins: Option<Vec<Spanned<String>>>,
}

/// `[[tools]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTool {
    /// `name`.
    pub name: Spanned<String>,
    /// `workspace`, required.
    pub workspace: Spanned<String>,
    /// `[tools.environments.<name>]`.
    #[serde(default)]
    pub environments: BTreeMap<Spanned<String>, RawEnvironment>,
    /// `[[tools.triggers]]`.
    #[serde(default)]
    pub triggers: Vec<RawTrigger>,
}

/// `[tools.environments.<name>]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEnvironment {
    /// `public`, default false.
    #[serde(default)]
    pub public: bool,
    /// `vars`.
    #[serde(default)]
    pub vars: BTreeMap<Spanned<String>, String>,
}

/// `[[tools.triggers]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTrigger {
    /// `kind`, must be `"endpoint"`.
    pub kind: Spanned<String>,
    /// `name`.
    pub name: Spanned<String>,
    /// `method`, default POST.
    pub method: Option<Spanned<String>>,
    /// `program` id.
    pub program: Spanned<i64>,
    /// `function` name.
    pub function: Spanned<String>,
    /// `callback`: a URL called when a run through this trigger ends, or a
    /// table `{ url, format, on }`.
    pub callback: Option<Spanned<toml::Value>>,
    /// `request_callbacks`: callers may name a callback URL per request.
    pub request_callbacks: Option<Spanned<bool>>,
    /// `[tools.triggers.verify]`: the request's signature or token.
    pub verify: Option<Spanned<RawVerify>>,
    /// `[tools.triggers.values]`: output name → where its value comes from.
    #[serde(default)]
    pub values: BTreeMap<Spanned<String>, Spanned<RawSource>>,
    /// `[tools.triggers.rule]`: when the request runs at all.
    pub rule: Option<Spanned<RawRule>>,
    /// `stdin`: `"body"` gives the raw body to every step on stdin.
    pub stdin: Option<Spanned<String>>,
    /// `[tools.triggers.response]`: the answer's shape.
    pub response: Option<RawResponse>,
    /// `[tools.triggers.concurrency_group]`: the group of the runs through
    /// this trigger, in place of the function's.
    pub concurrency_group: Option<Spanned<RawGroup>>,
}

/// A signature or token check (`verify`, or a rule's `signature`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawVerify {
    /// `scheme`: `hmac-sha1`, `hmac-sha256`, `hmac-sha512`, `token`,
    /// `stripe`, `slack` or `standard-webhooks`.
    pub scheme: Spanned<String>,
    /// `header`; required for `hmac-*` and `token`.
    pub header: Option<Spanned<String>>,
    /// `prefix`, default none (`slack`: `v0=`).
    pub prefix: Option<String>,
    /// `encoding`: `hex` (default) or `base64`.
    pub encoding: Option<Spanned<String>>,
    /// `secret_env`: the environment variable holding the secret.
    pub secret_env: Option<Spanned<String>>,
    /// `secret_file`: the file holding the secret (relative to config.toml).
    pub secret_file: Option<Spanned<String>>,
    /// `tolerance` of `stripe` and `slack`, default 5m.
    pub tolerance: Option<Spanned<RawDuration>>,
    /// `deduplicate`: the sender's delivery id as the idempotency key
    /// (default true; `verify` only).
    pub deduplicate: Option<Spanned<bool>>,
}

/// Where a value comes from: exactly one of the source keys, and for a
/// value an optional `default`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSource {
    /// `query` parameter name.
    pub query: Option<Spanned<String>>,
    /// `header` name.
    pub header: Option<Spanned<String>>,
    /// `form` field name.
    pub form: Option<Spanned<String>>,
    /// `json` path.
    pub json: Option<Spanned<String>>,
    /// `xml` path.
    pub xml: Option<Spanned<String>>,
    /// `whole`: `payload`, `headers` or `query`.
    pub whole: Option<Spanned<String>>,
    /// `payload` path (any body kind).
    pub payload: Option<Spanned<String>>,
    /// `literal` string.
    pub literal: Option<Spanned<String>>,
    /// `request`: `method` or `remote_addr`.
    pub request: Option<Spanned<String>>,
    /// `body`: `text` or `file`.
    pub body: Option<Spanned<String>>,
    /// `default` when the request does not carry the value.
    pub default: Option<String>,
}

/// A rule: exactly one of `and`, `or`, `not`, `client_ip`, `signature`, or
/// a source key with `equals` or `regex`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRule {
    /// `and`: every rule matches.
    pub and: Option<Vec<Spanned<RawRule>>>,
    /// `or`: some rule matches.
    pub or: Option<Vec<Spanned<RawRule>>>,
    /// `not`: the rule does not match.
    pub not: Option<Box<Spanned<RawRule>>>,
    /// `query` parameter name.
    pub query: Option<Spanned<String>>,
    /// `header` name.
    pub header: Option<Spanned<String>>,
    /// `form` field name.
    pub form: Option<Spanned<String>>,
    /// `json` path.
    pub json: Option<Spanned<String>>,
    /// `xml` path.
    pub xml: Option<Spanned<String>>,
    /// `whole`: `payload`, `headers` or `query`.
    pub whole: Option<Spanned<String>>,
    /// `payload` path (any body kind).
    pub payload: Option<Spanned<String>>,
    /// `literal` string.
    pub literal: Option<Spanned<String>>,
    /// `request`: `method` or `remote_addr`.
    pub request: Option<Spanned<String>>,
    /// `body`: `text`.
    pub body: Option<Spanned<String>>,
    /// `equals`: the value must be this string.
    pub equals: Option<Spanned<String>>,
    /// `regex`: the value must match.
    pub regex: Option<Spanned<String>>,
    /// `client_ip`: address ranges the client must be in.
    pub client_ip: Option<Spanned<Vec<Spanned<String>>>>,
    /// `signature`: a check like `verify`.
    pub signature: Option<Spanned<RawVerify>>,
}

/// `[tools.triggers.response]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawResponse {
    /// `status` of a successful answer, default 200.
    pub status: Option<Spanned<i64>>,
    /// `headers` added to every answer.
    #[serde(default)]
    pub headers: BTreeMap<Spanned<String>, Spanned<String>>,
    /// `output`: whether the run's output is in the answer, default true.
    pub output: Option<bool>,
    /// `run_async` by default, default false.
    pub run_async: Option<bool>,
    /// `ignored_status` of a request the rule ignores, default 200.
    pub ignored_status: Option<Spanned<i64>>,
    /// `text`: a fixed body of a success answer.
    pub text: Option<Spanned<String>>,
    /// `body`: `stdout` or `stdout_json`.
    pub body: Option<Spanned<String>>,
    /// `content_type` of such a body.
    pub content_type: Option<Spanned<String>>,
}

/// A program file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProgram {
    /// `id`, a non-negative integer.
    pub id: Spanned<i64>,
    /// `name`.
    pub name: Spanned<String>,
    /// `workspace`.
    pub workspace: Option<Spanned<String>>,
    /// `[[functions]]`, at least one.
    #[serde(default)]
    pub functions: Vec<RawFunction>,
}

/// An argv as written: each argument with its span.
pub type Argv = Spanned<Vec<Spanned<String>>>;

/// `[[functions]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFunction {
    /// `name`.
    pub name: Spanned<String>,
    /// `command`, shorthand for one command step.
    pub command: Option<Argv>,
    /// `steps`.
    pub steps: Option<Spanned<Vec<Spanned<RawStep>>>>,
    /// `timeout`, default `server.run_timeout`.
    pub timeout: Option<Spanned<RawDuration>>,
    /// `env`.
    #[serde(default)]
    pub env: BTreeMap<Spanned<String>, String>,
    /// `workdir`, default the program file's directory.
    pub workdir: Option<String>,
    /// `concurrency`, >= 1.
    pub concurrency: Option<Spanned<i64>>,
    /// `retry_on_restart`, default false.
    #[serde(default)]
    pub retry_on_restart: bool,
    /// `output`: how stdout becomes a Result element (default `auto`).
    #[serde(default)]
    pub output: super::OutputMode,
    /// `user`: name or numeric uid to run the steps as (trigd as root).
    pub user: Option<Spanned<RawId>>,
    /// `group`: name or numeric gid to run the steps as (trigd as root).
    pub group: Option<Spanned<RawId>>,
    /// `outputs`: the names the caller's values bind to, by position, for
    /// every trigger (the Webhook Trigger's, tool triggers').
    pub outputs: Option<Spanned<Vec<Spanned<String>>>>,
    /// `[functions.webhook]`: the Webhook Trigger.
    pub webhook: Option<Spanned<WebhookSlot>>,
    /// `callback`: a URL called when a run of this function ends, or a
    /// table `{ url, format, on }`.
    pub callback: Option<Spanned<toml::Value>>,
    /// `expect_every`: a successful run is expected at least this often.
    pub expect_every: Option<Spanned<RawDuration>>,
    /// `[[functions.schedules]]`: when the clock starts it.
    #[serde(default)]
    pub schedules: Vec<Spanned<RawSchedule>>,
    /// `[functions.retry]`: attempts again after a failure.
    pub retry: Option<Spanned<RawRetry>>,
    /// `[functions.concurrency_group]`: a limit shared by every run whose
    /// group key renders the same.
    pub concurrency_group: Option<Spanned<RawGroup>>,
}

/// `[functions.concurrency_group]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGroup {
    /// `key`: a template over the function's inputs.
    pub key: Spanned<String>,
    /// `limit`, 1 to 10,000, default 1.
    pub limit: Option<Spanned<i64>>,
    /// `policy`: `queue` (default), `replace_pending`, `cancel_running`
    /// or `skip`.
    pub policy: Option<Spanned<String>>,
}

/// `[functions.retry]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRetry {
    /// `attempts`, 2 to 20, default 3.
    pub attempts: Option<Spanned<i64>>,
    /// `backoff`: the first wait, default 10s.
    pub backoff: Option<Spanned<RawDuration>>,
    /// `strategy`: `exponential` (default) or `fixed`.
    pub strategy: Option<Spanned<String>>,
    /// `max_backoff`: the longest wait, default 10m.
    pub max_backoff: Option<Spanned<RawDuration>>,
    /// `jitter`, default true.
    pub jitter: Option<bool>,
    /// `on`: the outcomes retried, default `["failed", "timed_out"]`.
    pub on: Option<Spanned<Vec<Spanned<String>>>>,
    /// `callbacks`: `final` (default) or `each` (also after every attempt
    /// that is retried).
    pub callbacks: Option<Spanned<String>>,
}

/// `[[functions.schedules]]`: a schedule trigger (`config/schedules.rs`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSchedule {
    /// `name`, unique within the function.
    pub name: Spanned<String>,
    /// `cron`: the expression.
    pub cron: Spanned<String>,
    /// `timezone`: an IANA name, default UTC.
    pub timezone: Option<Spanned<String>>,
    /// `values`: the function's inputs by name.
    #[serde(default)]
    pub values: BTreeMap<Spanned<String>, String>,
    /// `jitter`: the most a firing is delayed, default none.
    pub jitter: Option<Spanned<RawDuration>>,
    /// `active`, default true.
    #[serde(default = "yes")]
    pub active: bool,
    /// `catch_up`: `skip` (default), `once` or `all`.
    pub catch_up: Option<Spanned<String>>,
    /// `overlap`: `skip` (default), `queue` or `replace`.
    pub overlap: Option<Spanned<String>>,
}

/// One element of `steps`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStep {
    /// `command`.
    pub command: Option<Argv>,
    /// `shell`.
    pub shell: Option<Spanned<String>>,
    /// `call`, a function name.
    pub call: Option<Spanned<String>>,
    /// `args` of a `call`.
    pub args: Option<Spanned<Vec<Spanned<String>>>>,
}

/// `[functions.webhook]`: the Webhook Trigger.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWebhook {
    /// `active`, default true.
    #[serde(default = "yes")]
    pub active: bool,
    /// `outputs`: the function's outputs as the seed declares them (a
    /// function-level `outputs` says the same for every trigger).
    pub outputs: Option<Spanned<Vec<Spanned<String>>>>,
}

fn yes() -> bool {
    true
}

/// `webhook` as written: one table, or an array of tables (which validation
/// accepts only with exactly one element).
#[derive(Debug)]
pub enum WebhookSlot {
    /// `[functions.webhook]` or `webhook = { ... }`.
    One(RawWebhook),
    /// `[[functions.webhook]]`.
    Many(Vec<Spanned<RawWebhook>>),
}

impl<'de> Deserialize<'de> for WebhookSlot {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = WebhookSlot;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a [functions.webhook] table")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<WebhookSlot, A::Error> {
                let d = de::value::MapAccessDeserializer::new(map);
                RawWebhook::deserialize(d).map(WebhookSlot::One)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<WebhookSlot, A::Error> {
                let mut all = Vec::new();
                while let Some(w) = seq.next_element()? {
                    all.push(w);
                }
                Ok(WebhookSlot::Many(all))
            }
        }
        d.deserialize_any(V)
    }
}

/// A TOML syntax or shape error: where (byte range) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// Byte range in the text, when known.
    pub span: Option<Range<usize>>,
    /// The message, one line, without position.
    pub message: String,
    /// Whether the text is not even valid TOML (so no key path is known).
    pub syntax: bool,
}

/// Parse `text` into `T`. A duplicate `webhook` key gets [`ONE_WEBHOOK`];
/// other duplicate keys are named, and a duplicate table header is pointed
/// at from its `[`.
///
/// # Errors
/// The first syntax or shape error of the text.
pub fn parse<T: DeserializeOwned>(text: &str) -> Result<T, ParseError> {
    toml::from_str(text).map_err(|e| {
        let syntax = text.parse::<toml::Table>().is_err();
        let mut span = e.span();
        let message = e.message().trim_end().replace('\n', "; ");
        // `id = 1.5.3`: "invalid float, expected nothing".
        let message = match message.strip_suffix(", expected nothing") {
            Some(m) => m.to_string(),
            None => message,
        };
        let message = if message == "duplicate key" {
            let key = span.clone().and_then(|s| text.get(s)).unwrap_or_default();
            span = span.map(|s| header_start(text, s.start)..s.end);
            if key.trim_matches(['"', '\'']) == "webhook" {
                ONE_WEBHOOK.to_string()
            } else {
                format!("duplicate key `{key}`")
            }
        } else if message.is_empty() || missing_value(text, &message, span.as_ref()) {
            "invalid TOML syntax (a missing value or quote?)".to_string()
        } else {
            message
        };
        ParseError {
            span,
            message,
            syntax,
        }
    })
}

/// Whether `message` is the parser's complaint about an unquoted string
/// where nothing at all follows the `=` on the line (`id = `).
fn missing_value(text: &str, message: &str, span: Option<&Range<usize>>) -> bool {
    let rest = span.and_then(|s| text.get(s.start..)).unwrap_or_default();
    let rest = rest.split('\n').next().unwrap_or_default().trim_start();
    message.starts_with("string values must be quoted")
        && (rest.is_empty() || rest.starts_with('#'))
}

/// The offset of the `[` opening the table header that byte `at` is in, or
/// `at` when its line is not a header.
fn header_start(text: &str, at: usize) -> usize {
    let line = text
        .get(..at)
        .and_then(|t| t.rfind('\n'))
        .map_or(0, |i| i + 1);
    let indent = text[line..].len() - text[line..].trim_start_matches([' ', '\t']).len();
    let start = line + indent;
    if text[start..].starts_with('[') {
        start
    } else {
        at
    }
}

/// A generic TOML tree with spans, used only to name the key at an error
/// offset (`functions[1].steps[0].comand`).
#[derive(Debug)]
enum Node {
    Table(Vec<(Spanned<String>, Spanned<Node>)>),
    Array(Vec<Spanned<Node>>),
    Leaf,
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Node;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any TOML value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    entries.push(entry);
                }
                Ok(Node::Table(entries))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Node::Array(items))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Node, E> {
                Ok(Node::Leaf)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Node, E> {
                Ok(Node::Leaf)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Node, E> {
                Ok(Node::Leaf)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Node, E> {
                Ok(Node::Leaf)
            }
            fn visit_str<E>(self, _: &str) -> Result<Node, E> {
                Ok(Node::Leaf)
            }
        }
        d.deserialize_any(V)
    }
}

/// The dotted key path at byte `offset` of `text`: the innermost key or
/// value containing it, or, when `text` is not valid TOML, the table header
/// in effect there (`functions[1].webhook`).
pub fn key_at(text: &str, offset: usize) -> String {
    match toml::from_str::<Node>(text) {
        Ok(root) => path_in(&root, "", offset).unwrap_or_default(),
        Err(_) => header_at(text, offset),
    }
}

/// The path below `node` (at `path`) of the innermost key or value whose
/// span holds `offset`. A table's span is its header only (its keys may be
/// anywhere in the text), so every branch is searched, deepest hit first.
fn path_in(node: &Node, path: &str, offset: usize) -> Option<String> {
    match node {
        Node::Table(entries) => entries.iter().find_map(|(k, v)| {
            let here = dotted(path, k.get_ref());
            path_in(v.get_ref(), &here, offset).or_else(|| {
                (k.span().contains(&offset) || v.span().contains(&offset)).then_some(here)
            })
        }),
        Node::Array(items) => items.iter().enumerate().find_map(|(i, v)| {
            let here = format!("{path}[{i}]");
            path_in(v.get_ref(), &here, offset)
                .or_else(|| v.span().contains(&offset).then_some(here))
        }),
        Node::Leaf => None,
    }
}

fn dotted(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// For text that is not valid TOML: the path of the last table header
/// starting at or before `offset`, counting `[[array]]` headers for indices.
fn header_at(text: &str, offset: usize) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut current = String::new();
    let mut start = 0;
    for line in text.split_inclusive('\n') {
        if start > offset {
            break;
        }
        start += line.len();
        let t = line.trim();
        let (inner, array) = match t.strip_prefix("[[") {
            Some(rest) => (rest.split("]]").next(), true),
            None => (t.strip_prefix('[').and_then(|r| r.split(']').next()), false),
        };
        let Some(inner) = inner else { continue };
        // A broken header such as `[[functions]` still names its table.
        let inner = inner.trim_end_matches(']');
        let segments: Vec<&str> = inner
            .split('.')
            .map(|s| s.trim().trim_matches('"'))
            .collect();
        let mut path = String::new();
        for (i, seg) in segments.iter().enumerate() {
            path = dotted(&path, seg);
            if array && i + 1 == segments.len() {
                *counts.entry(path.clone()).or_default() += 1;
            }
            if let Some(n) = counts.get(&path) {
                path = format!("{path}[{}]", n - 1);
            }
        }
        current = path;
    }
    current
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_run_slots_are_the_documented_ones() {
        // docs/config.md and docs/programs.md: 2 per core, from 4 to 64;
        // 4 on 2 cores, of which async runs take 2.
        let by_cores: Vec<usize> = [1, 2, 3, 4, 16, 32, 33, 128]
            .into_iter()
            .map(defaults::concurrent_runs_for)
            .collect();
        assert_eq!(by_cores, [4, 4, 6, 8, 32, 64, 64, 64]);
        let two_cores = defaults::concurrent_runs_for(2);
        assert_eq!(defaults::max_concurrent_async_runs(two_cores), 2);
    }

    #[test]
    fn key_of_a_syntax_error_names_the_table() {
        let text = "id = 1\n[[functions]]\nname = \"a\"\n[[functions]\nname = \"b\"\n";
        let at = text.rfind("name").unwrap();
        assert_eq!(key_at(text, at), "functions[1]");
        let text = "[server]\nworkers = \n";
        assert_eq!(key_at(text, text.len() - 1), "server");
    }

    #[test]
    fn key_of_a_shape_error_is_found_below_a_table_header() {
        // A table's span is its header: its keys are searched all the same.
        let text = "[server]\nworkers = 2\nlisten = 1\n[[api_keys]]\nname = 3\n";
        assert_eq!(key_at(text, text.find("1\n").unwrap()), "server.listen");
        assert_eq!(key_at(text, text.find("3\n").unwrap()), "api_keys[0].name");
        assert_eq!(key_at(text, 1), "server");
    }

    #[test]
    fn parse_errors_are_named_and_placed() {
        let e = |text: &str| {
            let e = parse::<toml::Table>(text).unwrap_err();
            (e.span.map(|s| s.start), e.message)
        };
        let dup = "[a]\nx = 1\n[a]\n";
        assert_eq!(
            e(dup),
            (Some(10), "duplicate key `a`".into()),
            "from the `[`"
        );
        assert_eq!(e("x = 1\nx = 2\n"), (Some(6), "duplicate key `x`".into()));
        let webhook = "[f.webhook]\n[f.webhook]\n";
        assert_eq!(e(webhook), (Some(12), ONE_WEBHOOK.into()));
        let missing = "invalid TOML syntax (a missing value or quote?)";
        assert_eq!(e("id = \n").1, missing);
        assert_eq!(e("id = # none\n").1, missing);
        assert_eq!(
            e("id = x\n").1,
            "string values must be quoted, expected literal string"
        );
        assert_eq!(e("id = 1.5.3\n").1, "invalid float");
    }
}
