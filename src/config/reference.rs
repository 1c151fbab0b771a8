//! Every key of `config.toml` and of program files, with its type, default
//! and meaning: the source of `trigd.toml(5)` (`trigd generate man-config`).
//!
//! Defaults that the loader uses are taken from its constants, so they
//! cannot differ. A test (below) parses a probe with an unknown key into
//! each table of [`SECTIONS`] and compares the keys the serde structs of
//! `raw.rs` expect with the keys listed here, both ways.

use super::acme::defaults as acme;
use super::callbacks::defaults as cb;
use super::raw::defaults as server;
use super::state_db::defaults as state;

/// A key's default, as the page shows it.
#[derive(Debug, Clone, Copy)]
pub enum Shown {
    /// Prose (`required`, `none`, a rule).
    Is(&'static str),
    /// A TOML string value, shown quoted.
    Str(&'static str),
    /// A count.
    Count(usize),
    /// A duration, in seconds.
    Secs(u64),
}

/// One key of a table.
#[derive(Debug)]
pub struct Key {
    /// The key as written.
    pub name: &'static str,
    /// Its TOML type.
    pub ty: &'static str,
    /// Its default.
    pub default: Shown,
    /// What it does.
    pub meaning: &'static str,
}

/// One table of a file.
#[derive(Debug)]
pub struct Section {
    /// `config.toml` or `program files`.
    pub file: &'static str,
    /// The table's header as written (`[[tools.triggers]]`).
    pub header: &'static str,
    /// Its place, for the test's probe: segments joined by `.`, `[]` for an
    /// array of tables, `<x>` for a name the user chooses.
    #[cfg_attr(not(test), allow(dead_code))] // read by the test only
    pub path: &'static str,
    /// What the table is.
    pub about: &'static str,
    /// Its keys.
    pub keys: &'static [Key],
}

impl Key {
    /// The default as roff-ready prose with `code` spans.
    pub fn default_text(&self) -> String {
        match self.default {
            Shown::Is(text) => text.to_string(),
            Shown::Str(s) => format!("`\"{s}\"`"),
            Shown::Count(n) => format!("`{n}`"),
            Shown::Secs(s) => format!("`\"{}\"`", duration(s)),
        }
    }
}

/// Seconds in the largest unit that divides them (`86400` → `1d`).
fn duration(secs: u64) -> String {
    match secs {
        0 => "0s".into(),
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

const fn key(name: &'static str, ty: &'static str, default: Shown, meaning: &'static str) -> Key {
    Key {
        name,
        ty,
        default,
        meaning,
    }
}

use Shown::{Count, Is, Secs, Str};

const REQUIRED: Shown = Is("required");
const NONE: Shown = Is("none");

/// Every table, `config.toml` first.
pub const SECTIONS: &[Section] = &[
    Section {
        file: "config.toml",
        header: "config.toml",
        path: "",
        about: "The top level of config.toml holds only tables.",
        keys: &[
            key("server", "table", Is("every default"), "the server's settings: `[server]`"),
            key("api_keys", "array of tables", Is("none"), "keys of `POST /api`: `[[api_keys]]`"),
            key("users", "array of tables", Is("none"), "who may sign in: `[[users]]`"),
            key("workspaces", "array of tables", Is("none"), "groups of users owning programs and tools: `[[workspaces]]`"),
            key("tools", "array of tables", Is("none"), "endpoints for programs: `[[tools]]`"),
            key("callbacks", "table", Is("no callbacks"), "where completion callbacks may go and how they are signed: `[callbacks]`"),
            key("acme", "table", Is("none (no ACME)"), "obtain and renew the HTTPS certificate from an ACME directory: `[acme]`"),
            key("state", "table", Is("none (the state directory)"), "keep the shared state in a PostgreSQL database instead of `state_dir`: `[state]`"),
        ],
    },
    Section {
        file: "config.toml",
        header: "[server]",
        path: "server",
        about: "Listening, limits and timeouts.",
        keys: SERVER,
    },
    Section {
        file: "config.toml",
        header: "[[api_keys]]",
        path: "api_keys[]",
        about: "Keys of the run endpoint `POST /api`. A program outside a key's scope \
                answers like a missing one (`404 program_not_found`).",
        keys: &[
            key("name", "string", REQUIRED, "unique; appears in logs and run records (`By`), never the key"),
            key("sha256", "string", REQUIRED, "sha256 (hex) of the key; `trigd keygen` prints a key and this entry"),
            key("workspace", "string", NONE, "when set, the key reaches only programs whose `workspace` is this"),
            key("programs", "array of integers", NONE, "when set, the key reaches only these program ids"),
            key("rate_per_minute", "integer", Is("unlimited"), "requests per minute for this key (runs and status reads); past it `429 rate_limited` with `Retry-After`"),
            key("request_callbacks", "bool", Is("`false`"), "requests with this key may name a completion callback URL (`callback` parameter or `Trigd-Callback` header); needs `[callbacks]` `secret_env` or `secret_file`"),
        ],
    },
    Section {
        file: "config.toml",
        header: "[[users]]",
        path: "users[]",
        about: "Who may sign in to the pages and hold application keys.",
        keys: &[
            key("name", "string", REQUIRED, "login name, `[A-Za-z0-9_-]+`"),
            key("password", "string", REQUIRED, "argon2 PHC hash from `trigd hash-password`, or `\"generate\"`: at its first start `trigd serve` makes a random password, prints it once on stderr and keeps only its hash in `state_dir/passwords.json`"),
        ],
    },
    Section {
        file: "config.toml",
        header: "[[workspaces]]",
        path: "workspaces[]",
        about: "Groups of users that own programs, API keys and tools.",
        keys: &[
            key("name", "string", REQUIRED, "`[A-Za-z0-9_-]+`"),
            key("members", "array of strings", Is("`[]`"), "user names; each must be a `[[users]]` entry"),
            key("admins", "array of strings", Is("every member"), "members who may flip the public switch of the workspace's tools from trigd; each must be in `members`; `[]`: nobody (edit the file)"),
        ],
    },
    Section {
        file: "config.toml",
        header: "[[tools]]",
        path: "tools[]",
        about: "A tool makes functions of programs endpoints at \
                `/tools/<tool>/<environment>/<trigger>`.",
        keys: &[
            key("name", "string", REQUIRED, "`[A-Za-z0-9_-]+`; appears in URLs"),
            key("workspace", "string", REQUIRED, "owning workspace; its members may call protected endpoints"),
            key("environments", "table of tables", Is("none"), "the tool's environments by name: `[tools.environments.<E>]`"),
            key("triggers", "array of tables", Is("none"), "the tool's endpoints: `[[tools.triggers]]`"),
        ],
    },
    Section {
        file: "config.toml",
        header: "[tools.environments.<E>]",
        path: "tools[].environments.<E>",
        about: "One environment `E` of a tool; every trigger is served in each.",
        keys: &[
            key("public", "bool", Is("`false`"), "every endpoint of `E` needs no credentials; also flipped from the endpoint view or `PUT /tools/<tool>/environments/<E>/public`, which rewrite this value in the file"),
            key("vars", "table of strings", Is("`{}`"), "environment variables given to runs through `E`"),
        ],
    },
    Section {
        file: "config.toml",
        header: "[[tools.triggers]]",
        path: "tools[].triggers[]",
        about: "One endpoint of a tool: which function it runs and how it reads the request.",
        keys: TRIGGER,
    },
    Section {
        file: "config.toml",
        header: "[tools.triggers.verify]",
        path: "tools[].triggers[].verify",
        about: "Check the request's signature or token before anything else. A rule's \
                `signature` takes the same keys.",
        keys: VERIFY,
    },
    Section {
        file: "config.toml",
        header: "[tools.triggers.values.<output>]",
        path: "tools[].triggers[].values.<output>",
        about: "Where the value of the function's output `output` comes from: exactly one \
                source key, and optionally `default`. Without `values`, outputs are read \
                by name from the query or a flat JSON object.",
        keys: VALUES,
    },
    Section {
        file: "config.toml",
        header: "[tools.triggers.rule]",
        path: "tools[].triggers[].rule",
        about: "Whether the request runs; a request that does not match gets \
                `response.ignored_status`. A rule is exactly one of `and`, `or`, `not`, \
                `client_ip`, `signature`, or a source key (as in `values`, but not \
                `body = \"file\"` or `default`) with `equals` or `regex`.",
        keys: RULE,
    },
    Section {
        file: "config.toml",
        header: "[tools.triggers.concurrency_group]",
        path: "tools[].triggers[].concurrency_group",
        about: "The concurrency group of the runs through this trigger, in place of the function's `[functions.concurrency_group]`; `{name}` in `key` takes the value of the function's output `name` (docs/runs.md).",
        keys: GROUP,
    },
    Section {
        file: "config.toml",
        header: "[tools.triggers.response]",
        path: "tools[].triggers[].response",
        about: "The shape of the trigger's answers.",
        keys: &[
            key("status", "integer", Count(200), "status of a successful answer (200\u{2013}299)"),
            key("headers", "table of strings", Is("`{}`"), "extra headers on every answer of this trigger"),
            key("output", "bool", Is("`true`"), "`false`: no `Result` in the answer (and no `Stderr` of a failed run)"),
            key("run_async", "bool", Is("`false`"), "start runs asynchronously unless the request says `run_async=false`"),
            key("ignored_status", "integer", Count(200), "status of the answer to a request the rule ignores (200\u{2013}499)"),
            key("text", "string", NONE, "a fixed body of every success answer (sync or async), instead of trigd's JSON"),
            key("body", "string", NONE, "`\"stdout\"`: a sync success is answered with the last step's stdout; `\"stdout_json\"`: the same, which must be JSON (else 500 `answer_not_json`); not with `text`"),
            key("content_type", "string", Is("`text/plain; charset=utf-8` (`stdout_json`: `application/json`)"), "`Content-Type` of a `text` or `body` answer"),
        ],
    },
    Section {
        file: "config.toml",
        header: "[callbacks]",
        path: "callbacks",
        about: "Completion callbacks: where they may go, the signing secret and the retry \
                policy. Exactly one of `secret_env` and `secret_file` is needed as soon as \
                a callback is configured.",
        keys: CALLBACKS,
    },
    Section {
        file: "config.toml",
        header: "[acme]",
        path: "acme",
        about: "Certificates without a human: an account at an ACME directory (Let's Encrypt \
                by default), one certificate for `domains` proved by HTTP-01 on port 80, \
                renewed at two thirds of its lifetime; kept in `state_dir/acme/`. Read at \
                start only.",
        keys: ACME,
    },
    Section {
        file: "config.toml",
        header: "[state]",
        path: "state",
        about: "The PostgreSQL backend: run records, idempotency claims and the other shared \
                state in one database that several instances share (docs/cluster.md). Without \
                `url` everything stays in `state_dir`. Kept output of running runs and request \
                bodies stay in `state_dir` either way. Read at start only.",
        keys: STATE,
    },
    Section {
        file: "program files",
        header: "program file",
        path: "",
        about: "Each `programs_dir/*.toml` file is one program.",
        keys: &[
            key("id", "integer", REQUIRED, "the `program_id`, at least 0; unique across files"),
            key("name", "string", REQUIRED, "unique; `trigd run NAME`"),
            key("workspace", "string", NONE, "owning workspace: scoped API keys reach it, its members see its runs and may follow and cancel them"),
            key("functions", "array of tables", Is("none (at least one is needed)"), "the program's functions: `[[functions]]`"),
        ],
    },
    Section {
        file: "program files",
        header: "[[functions]]",
        path: "functions[]",
        about: "A function runs its steps in order; a step that fails ends the run.",
        keys: FUNCTION,
    },
    Section {
        file: "program files",
        header: "steps = [ ... ]",
        path: "functions[].steps[]",
        about: "One step: exactly one of `command`, `shell` or `call`.",
        keys: &[
            key("command", "array of strings", NONE, "the argv; `{name}` as a whole argument is the value of output `name`"),
            key("shell", "string", NONE, "a script for `sh -c`; values are in the environment (`\"$name\"`), never spliced into the text"),
            key("call", "string", NONE, "another function of the program, run as this step"),
            key("args", "array of strings", Is("`[]`"), "the arguments of a `call`, one per output of the called function"),
        ],
    },
    Section {
        file: "program files",
        header: "[functions.webhook]",
        path: "functions[].webhook",
        about: "The Webhook Trigger: makes the function reachable through `POST /api`; at most one per function.",
        keys: &[
            key("active", "bool", Is("`true`"), "whether `POST /api` may run it"),
            key("outputs", "array of strings", Is("the function's `outputs`"), "the seed's place for the function's outputs; if the function's `outputs` is given too, the same list"),
        ],
    },
    Section {
        file: "program files",
        header: "[functions.retry]",
        path: "functions[].retry",
        about: "Retries: a run whose attempt ends in one of `on` is attempted again after a backoff, up to `attempts` in all; earlier attempts are in the record's `Attempts`, the run is `queued` with `RetryAt` between them (durably), a cancel stops the rest (docs/runs.md).",
        keys: &[
            key("attempts", "integer", Is("`3`"), "attempts in all, the first included: 2 to 20"),
            key("backoff", "duration", Str("10s"), "the wait after the first failed attempt"),
            key("strategy", "string", Str("exponential"), "`\"exponential\"` (each wait doubles) or `\"fixed\"` (always `backoff`)"),
            key("max_backoff", "duration", Str("10m"), "the longest wait; not shorter than `backoff`"),
            key("jitter", "bool", Is("`true`"), "multiply each wait by a random factor from 0.8 to 1.2 (then cap it)"),
            key("on", "array of strings", Is("`[\"failed\", \"timed_out\"]`"), "the outcomes retried: `failed`, `timed_out`, `interrupted` (the next attempt after a restart, also after `kill -9`)"),
            key("callbacks", "string", Str("final"), "`\"final\"`: the function's callbacks on the final outcome only; `\"each\"`: also after every attempt that is retried"),
        ],
    },
    Section {
        file: "program files",
        header: "[functions.concurrency_group]",
        path: "functions[].concurrency_group",
        about: "A concurrency group: runs whose `key` renders the same (from any function, of any program) share `limit`; `policy` says what a run finding its key at the limit does. The record's `Group` holds the key; `superseded` runs name the newer run in `SupersededBy` (docs/runs.md).",
        keys: GROUP,
    },
    Section {
        file: "program files",
        header: "[[functions.schedules]]",
        path: "functions[].schedules[]",
        about: "A schedule trigger: each occurrence is an ordinary async run of the function, recorded with `By` `schedule:<program>/<function>/<name>` and its `ScheduledAt` (docs/schedules.md).",
        keys: &[
            key("name", "string", REQUIRED, "`[A-Za-z0-9_-]+`, at most 64 bytes, unique in the function; part of the schedule's id"),
            key("cron", "string", REQUIRED, "5 fields (minute hour day-of-month month day-of-week), or 6 with seconds first, or `@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly`"),
            key("timezone", "string", Str("UTC"), "IANA zone of the expression's wall-clock times, from the host's tzdata, spelled as there (case-sensitive; UTC needs none); a time skipped by DST fires right after the gap, a repeated one once"),
            key("values", "table of strings", Is("`{}`"), "the run's values by output name; an output not named is empty"),
            key("jitter", "duration", Is("none"), "delay every firing by the same fraction of this (from the schedule's id); shorter than the shortest interval"),
            key("active", "bool", Is("`true`"), "an inactive schedule records its occurrences `skipped` (`inactive`)"),
            key("catch_up", "string", Str("skip"), "occurrences missed while trigd was down: `\"skip\"` (recorded skipped), `\"once\"` (one run for all) or `\"all\"` (one run each, the newest 100)"),
            key("overlap", "string", Str("skip"), "an occurrence while the last run still runs: `\"skip\"` (recorded skipped), `\"queue\"` (waits; one at most) or `\"replace\"` (cancels the running one)"),
        ],
    },
];

const SERVER: &[Key] = &[
    key("listen", "string", Str(server::LISTEN), "address to listen on, `HOST:PORT` (an IPv6 host in brackets: `[::]:8080`) or `unix:PATH` (a Unix socket); `--listen` overrides; port 0 picks a free port; ignored when systemd passes a socket (`LISTEN_FDS`)"),
    key("socket_mode", "string", Str("0660"), "permission bits (octal) of the socket file of `listen = \"unix:PATH\"`; read at start only"),
    key("socket_user", "string", Is("trigd's user"), "owner (name or uid) of that socket file; giving it away needs root; read at start only"),
    key("socket_group", "string", Is("trigd's group"), "group (name or gid) of that socket file, e.g. the proxy's; trigd's user must be a member; read at start only"),
    key("workers", "integer", Count(server::WORKERS), "HTTP threads kept ready while idle, 1 to 1024; each open connection is served on a thread of its own up to `max_connections`"),
    key("programs_dir", "path", Str(server::PROGRAMS_DIR), "every `*.toml` directly inside is a program"),
    key("state_dir", "path", Str(server::STATE_DIR), "written by trigd only: run log, application keys, sessions"),
    key("public_url", "string", Is("`http://<Host header>`"), "base URL shown for generated endpoints and linked from `slack`, `discord`, `ntfy` callbacks (`https://...` also marks cookies `Secure`)"),
    key("max_concurrent_runs", "integer", Is("2 per CPU core trigd may use, from 4 to 64 (`4` on 2 cores)"), "runs executing at once, sync and async together"),
    key("max_concurrent_async_runs", "integer", Is("half of `max_concurrent_runs`, rounded up (`2` on 2 cores)"), "async runs executing at once, at most (at most `max_concurrent_runs`): the other slots stay free for sync calls while async runs wait"),
    key("max_queued_runs", "integer", Count(server::MAX_QUEUED_RUNS), "runs waiting for a slot, sync and async together (0: no queue)"),
    key("queue_timeout", "duration", Secs(server::QUEUE_TIMEOUT_SECS), "how long a sync run waits in the queue for a slot before `503 busy`"),
    key("idempotency_window", "duration", Secs(server::IDEMPOTENCY_WINDOW_SECS), "how long an `Idempotency-Key` is remembered"),
    key("idempotency_max_keys", "integer", Count(server::IDEMPOTENCY_MAX_KEYS), "keys remembered at most (past it the oldest is forgotten early)"),
    key("run_timeout", "duration", Secs(server::RUN_TIMEOUT_SECS), "default timeout of a function"),
    key("kill_grace", "duration", Secs(server::KILL_GRACE_SECS), "time between SIGTERM and SIGKILL of a timed-out run"),
    key("shutdown_grace", "duration", Secs(server::SHUTDOWN_GRACE_SECS), "time runs get to finish when trigd gets SIGTERM or SIGINT"),
    key("max_output_bytes", "integer", Count(server::MAX_OUTPUT_BYTES), "stdout kept per step, and stderr likewise"),
    key("max_variables", "integer", Count(server::MAX_VARIABLES), "values accepted in one request"),
    key("max_variable_bytes", "integer", Count(server::MAX_VARIABLE_BYTES), "size of one value"),
    key("max_body_bytes", "integer", Count(server::MAX_BODY_BYTES), "request body size (413 past it)"),
    key("max_waiting_bytes", "integer", Count(server::MAX_WAITING_BYTES), "bytes of values that the runs waiting for a slot hold in memory in all; a run that would pass it gets `503 busy`"),
    key("run_retention", "integer", Count(server::RUN_RETENTION), "ended runs whose records are kept, the newest (queued and running ones are always kept): in `state_dir/runs.log`, older ones dropped once the log holds about twice as many lines; with `[state] url`, in the database, older ones dropped every 1,000 ended runs"),
    key("max_connections", "integer", Count(server::MAX_CONNECTIONS), "open HTTP connections; past it a new connection gets `503 busy` at once"),
    key("request_timeout", "duration", Secs(server::REQUEST_TIMEOUT_SECS), "time a client has to send a whole request, at least 1s; also the idle keep-alive timeout (408 past it)"),
    key("max_header_bytes", "integer", Count(server::MAX_HEADER_BYTES), "request header section (431 past it)"),
    key("max_url_bytes", "integer", Count(server::MAX_URL_BYTES), "request line: method, URL, version (414 past it)"),
    key("cookie_secure", "bool", Is("`false`"), "mark the session cookie `Secure` (also on when `public_url` is `https://...`)"),
    key("session_idle", "duration", Secs(server::SESSION_IDLE_SECS), "a login session ends after this long without a request"),
    key("session_max", "duration", Secs(server::SESSION_MAX_SECS), "a login session ends this long after login"),
    key("auth_failures_per_minute", "integer", Count(server::AUTH_FAILURES_PER_MINUTE), "failed authentications per client address and minute; past it `429 rate_limited` until the minute is over (0: off)"),
    key("trusted_proxies", "array of IP addresses", Is("`[]`"), "peers whose `X-Forwarded-For` is believed for the client address; with none, the TCP peer is the client; `\"unix\"` trusts every peer on the Unix socket (a proxy in front of it)"),
    key("instance", "string", Is("the host name's first label"), "this instance's name, part of every run id: 1\u{2013}63 of `a-z 0-9 _ -`; read at start only; with `[state] url`, unique among the instances on the database (a second live one refuses to start: docs/cluster.md)"),
    key("drain_delay", "duration", Secs(server::DRAIN_DELAY_SECS), "on SIGTERM or SIGINT, time `/healthz` answers 503 `draining` while requests are still served, before the listener closes"),
    key("schedules", "string", Str("fire"), "`\"fire\"`: this instance fires the schedules it loads; `\"off\"`: it does not (another instance of a cluster does); see docs/schedules.md"),
    key("shared_state_dir", "path", Is("`state_dir`"), "directory of `app_keys.json`, shared by several instances; read at start only; unused with `[state] url`"),
    key("hooks_files", "array of paths", Is("`[]`"), "adnanh/webhook hooks files (JSON or YAML) served as they are"),
    key("hooks_url_prefix", "string", Str("hooks"), "their hooks are at `/<hooks_url_prefix>/<id>` (webhook's `-urlprefix`); not a path trigd serves itself, and no empty, `.` or `..` segment"),
    key("hooks_http_methods", "array of strings", Is("`[]` (any)"), "the methods a hook without its own `http-methods` accepts (webhook's `-http-methods`)"),
    key("hooks_deduplicate", "bool", Is("`true`"), "a hook whose `trigger-rule` requires a `payload-hmac-*` signature runs a redelivery (same `X-GitHub-Delivery`/`X-Gitea-Delivery`, no `Idempotency-Key`) once; `false`: every delivery runs, as in webhook"),
    key("tls_cert", "path", NONE, "PEM certificate chain, leaf first; with `tls_key`, `listen` speaks HTTPS only (TLS 1.2 and 1.3); re-read when the file changes and on SIGHUP"),
    key("tls_key", "path", NONE, "PEM private key of `tls_cert` (PKCS#8, PKCS#1 or SEC1); may be `credential:NAME`, a systemd credential in `$CREDENTIALS_DIRECTORY`"),
    key("tls_handshake_timeout", "duration", Secs(server::TLS_HANDSHAKE_TIMEOUT_SECS), "time a client has, from connecting, to complete its TLS handshake; the connection is closed past it"),
    key("redirect_http", "string", NONE, "second, plain-HTTP address (`host:port`) that answers every request with `308` to the same path over HTTPS (and ACME's HTTP-01 challenges); needs `tls_cert` or `[acme]`, which needs it"),
];

const TRIGGER: &[Key] = &[
    key("kind", "string", REQUIRED, "`\"endpoint\"`"),
    key("name", "string", REQUIRED, "`[A-Za-z0-9_-]+`, unique in the tool; appears in URLs"),
    key("method", "string", Str("POST"), "`GET`, `POST`, `PUT`, `PATCH` or `DELETE`"),
    key("program", "integer", REQUIRED, "program id"),
    key("function", "string", REQUIRED, "function of that program"),
    key("callback", "URL or { url, format, on }", NONE, "completion callback of every run through this trigger: a URL, or `{ url, format, on }` (format `record`, `slack`, `discord`, `ntfy`, `healthchecks`; on: outcomes but `overdue`); checked against `[callbacks]` at load"),
    key("request_callbacks", "bool", Is("`false`"), "callers may name a callback URL with the `Trigd-Callback` header"),
    key("verify", "table", NONE, "check the request's signature or token first: `[tools.triggers.verify]`"),
    key("values", "table of tables", Is("by name from the query or a flat JSON object"), "where each output's value comes from: `[tools.triggers.values.<output>]`"),
    key("rule", "table", NONE, "must match or the request is ignored: `[tools.triggers.rule]`"),
    key("stdin", "string", NONE, "`\"body\"`: every step reads the raw request body on stdin"),
    key("response", "table", Is("every default"), "the answer's shape: `[tools.triggers.response]`"),
    key("concurrency_group", "table", Is("the function's"), "the concurrency group of runs through this trigger, in place of the function's: `[tools.triggers.concurrency_group]` (docs/runs.md)"),
];

const VERIFY: &[Key] = &[
    key("scheme", "string", REQUIRED, "`hmac-sha1`, `hmac-sha256`, `hmac-sha512`, `token`, `stripe`, `slack` or `standard-webhooks`"),
    key("header", "string", Is("`Stripe-Signature` (`stripe`), `X-Slack-Signature` (`slack`), `webhook-*` or `svix-*` (`standard-webhooks`, not settable); required otherwise"), "header holding the signature or token (any case)"),
    key("prefix", "string", Is("`\"\"` (`slack`: `\"v0=\"`)"), "text before the signature, e.g. `\"sha256=\"`; stripped when present"),
    key("encoding", "string", Str("hex"), "`hex` or `base64` (HMAC schemes)"),
    key("secret_env", "string", NONE, "environment variable holding the secret (exactly one of `secret_env` and `secret_file`)"),
    key("secret_file", "path", NONE, "file holding the secret (one trailing newline dropped); watched, so a rotated file applies at once; `credential:NAME` is systemd's credential NAME (`$CREDENTIALS_DIRECTORY/NAME`, from `LoadCredential=`)"),
    key("tolerance", "duration", Is("`\"5m\"`"), "`stripe`, `slack`, `standard-webhooks`: largest distance between the signed timestamp and now"),
    key("deduplicate", "boolean", Is("`true`"), "a request without `Idempotency-Key` whose sender's delivery id (`X-GitHub-Delivery`, `X-Gitlab-Event-UUID`, Stripe's event `id`, `webhook-id`/`svix-id`) was seen on this endpoint within `idempotency_window` starts nothing and gets the first run's answer; not in a rule's `signature`"),
];

const VALUES: &[Key] = &[
    key("query", "string", NONE, "a query parameter's name"),
    key("header", "string", NONE, "a header's name (any case)"),
    key(
        "form",
        "string",
        NONE,
        "a field of an urlencoded or multipart body",
    ),
    key(
        "json",
        "string",
        NONE,
        "a path into a JSON body (`a.b.0.c`)",
    ),
    key(
        "xml",
        "string",
        NONE,
        "a path into an XML body (`root.child.-attr`)",
    ),
    key(
        "payload",
        "string",
        NONE,
        "a path into a JSON, XML or form body alike",
    ),
    key(
        "whole",
        "string",
        NONE,
        "`payload`, `headers` (less `Authorization` and `Cookie`) or `query`, as JSON",
    ),
    key(
        "body",
        "string",
        NONE,
        "`text`: the raw body (UTF-8); `file`: the path of a temporary file holding it",
    ),
    key(
        "request",
        "string",
        NONE,
        "`method`, or `remote_addr`: the client's IP address",
    ),
    key("literal", "string", NONE, "a fixed string"),
    key(
        "default",
        "string",
        Is("none (400 when absent)"),
        "the value when the request does not carry it",
    ),
];

/// The keys of a `concurrency_group` table (a function's or a tool trigger's).
const GROUP: &[Key] = &[
    key("key", "string", REQUIRED, "the group key: a template, `{name}` takes the run's value of the function's output `name` (`\"deploy-{branch}\"`)"),
    key("limit", "integer", Is("`1`"), "runs of one key executing at once: 1 to 10000"),
    key("policy", "string", Str("queue"), "at the limit: `\"queue\"` (wait), `\"replace_pending\"` (wait, replacing the one waiting: it ends `superseded`), `\"cancel_running\"` (the oldest running one is cancelled and any waiting one superseded; this one starts next) or `\"skip\"` (this one ends `skipped`)"),
];

const RULE: &[Key] = &[
    key("and", "array of rules", NONE, "every rule matches"),
    key("or", "array of rules", NONE, "some rule matches"),
    key("not", "rule", NONE, "the rule does not match"),
    key("query", "string", NONE, "source: a query parameter"),
    key("header", "string", NONE, "source: a header"),
    key("form", "string", NONE, "source: a form field"),
    key("json", "string", NONE, "source: a JSON path"),
    key("xml", "string", NONE, "source: an XML path"),
    key("payload", "string", NONE, "source: a path into any body"),
    key("whole", "string", NONE, "source: `payload`, `headers` or `query`"),
    key("body", "string", NONE, "source: `text`, the raw body"),
    key("request", "string", NONE, "source: `method` or `remote_addr`"),
    key("literal", "string", NONE, "source: a fixed string"),
    key("equals", "string", NONE, "the source's value must be this string"),
    key("regex", "string", NONE, "the source's value must match (`regex-lite` syntax, anywhere unless anchored); a missing value does not match"),
    key("client_ip", "array of strings", NONE, "address ranges (CIDR) the client must be in"),
    key("signature", "table", NONE, "a signature or token check with the keys of `[tools.triggers.verify]`"),
];

const ACME: &[Key] = &[
    key("domains", "array of strings", REQUIRED, "the DNS names of the certificate (1 to 100, no wildcard), the first its subject; each must reach this trigd on port 80"),
    key("terms_accepted", "bool", REQUIRED, "must be `true`: you have read and accept the ACME server's terms of service"),
    key("contact", "array of strings", Is("`[]`"), "`mailto:` URLs the CA may write to about the account"),
    key("directory", "URL", Str(acme::DIRECTORY), "the ACME directory; Let's Encrypt's staging one is `https://acme-staging-v02.api.letsencrypt.org/directory`"),
    key("challenge", "string", Str(acme::CHALLENGE), "how names are proved; only `http-01` (`GET /.well-known/acme-challenge/<token>` over plain HTTP)"),
    key("ca_file", "path", NONE, "PEM file of CA certificates trusted to reach `directory` besides the bundled roots (a private ACME server)"),
    key("renew_before", "duration", Is("a third of the certificate's lifetime"), "renew this long before the certificate expires"),
    key("timeout", "duration", Secs(acme::TIMEOUT_SECS), "time one request to the ACME server may take, connection and answer included"),
    key("retry_min", "duration", Secs(acme::RETRY_MIN_SECS), "the wait after a failed attempt; doubles with each failure in a row (plus up to a quarter of jitter)"),
    key("retry_max", "duration", Secs(acme::RETRY_MAX_SECS), "the longest wait between attempts; also the least time between two issuances"),
];

const STATE: &[Key] = &[
    key("url", "string", Is("none (the state directory)"), "`postgres://USER@HOST:PORT/DATABASE?sslmode=MODE`; `sslmode` is `disable`, `prefer` (the default: TLS when offered, certificate not checked), `require` (TLS, certificate not checked) or `verify-full` (TLS, certificate and host name checked); a password in it is refused; `options=-c NAME=VALUE …` (e.g. `-c search_path=trigd`) is passed on, followed by trigd's own `statement_timeout`, `lock_timeout` and `client_min_messages`, which win where both set one"),
    key("password_env", "string", NONE, "environment variable holding the database password"),
    key("password_file", "path", NONE, "file holding the database password, or `credential:NAME` for a systemd credential; at most one of this and `password_env`"),
    key("ca_file", "path", NONE, "PEM file of the CA certificates trusted for the database's certificate under `verify-full`, instead of the bundled roots"),
    key("lease", "duration", Secs(state::LEASE_SECS), "how long an instance's lease on the runs it executes lasts without a heartbeat (one every third of it); past it other instances end or retry its runs; at least 1s"),
    key("pool", "integer", Count(state::POOL), "connections to the database per instance, at most"),
];

const CALLBACKS: &[Key] = &[
    key(
        "allow",
        "array of strings",
        Is("`[]` (no callbacks at all)"),
        "where callbacks may go: a host name (any http or https URL on it) or a URL prefix",
    ),
    key(
        "allow_private",
        "array of strings",
        Is("`[]`"),
        "addresses or CIDR blocks that may be called although loopback, private or link-local",
    ),
    key(
        "secret_env",
        "string",
        NONE,
        "environment variable holding the signing secret",
    ),
    key(
        "secret_file",
        "path",
        NONE,
        "file holding it (surrounding white space ignored; keep it mode 0600); `credential:NAME` is systemd's credential NAME (`LoadCredential=`)",
    ),
    key(
        "ca_file",
        "path",
        NONE,
        "PEM file of CA certificates trusted for https callbacks besides the bundled roots",
    ),
    key(
        "timeout",
        "duration",
        Secs(cb::TIMEOUT_SECS),
        "one attempt: connection, request and answer",
    ),
    key(
        "retry_for",
        "duration",
        Secs(cb::RETRY_FOR_SECS),
        "no attempt starts later than this after the first; then the delivery is `failed`",
    ),
    key(
        "backoff",
        "duration",
        Secs(cb::BACKOFF_SECS),
        "wait after the first failed attempt; doubles after each",
    ),
    key(
        "backoff_max",
        "duration",
        Secs(cb::BACKOFF_MAX_SECS),
        "the longest wait between attempts; not shorter than `backoff`",
    ),
    key(
        "workers",
        "integer",
        Count(cb::WORKERS),
        "delivery threads, 1 to 1024; read at start only",
    ),
    key(
        "max_pending",
        "integer",
        Count(cb::MAX_PENDING),
        "deliveries waiting on disk at most; past it a new delivery is `failed` at once",
    ),
];

const FUNCTION: &[Key] = &[
    key("name", "string", REQUIRED, "`[A-Za-z0-9_-]+`, unique in the program"),
    key("command", "array of strings", NONE, "one command step (exactly one of `command` and `steps`)"),
    key("steps", "array of tables", NONE, "the steps, in order: `{command = [...]}`, `{shell = \"...\"}`, `{call = \"f\", args = [...]}`"),
    key("timeout", "duration", Is("`server.run_timeout`"), "for the whole function, called functions included"),
    key("env", "table of strings", Is("`{}`"), "environment variables for every step"),
    key("workdir", "path", Is("the program file's directory"), "working directory (relative: against the program file's directory)"),
    key("concurrency", "integer", Is("unlimited"), "runs of this function at once; further ones wait in the queue"),
    key("retry_on_restart", "bool", Is("`false`"), "an async run that was executing when trigd died runs again at the next start instead of ending `interrupted`"),
    key("output", "string", Str("auto"), "how each step's stdout becomes its Result element: `\"auto\"`, `\"json\"`, `\"text\"` or `\"lines\"`"),
    key("user", "string or integer", Is("trigd's"), "run the steps as this user name (from /etc/passwd) or uid (trigd must run as root)"),
    key("group", "string or integer", Is("the user's primary group"), "run the steps with this group name (from /etc/group) or gid"),
    key("outputs", "array of strings", Is("`[]`"), "the names the values bind to, for every trigger: identifiers `[A-Za-z_][A-Za-z0-9_]*`, no repeats"),
    key("webhook", "table", NONE, "the Webhook Trigger: makes the function reachable through `POST /api`: `[functions.webhook]`"),
    key("callback", "URL or { url, format, on }", NONE, "completion callback of every run of this function: a URL, or `{ url, format, on }` (format `record`, `slack`, `discord`, `ntfy`, `healthchecks`; on: `finished`, `failed`, `timed_out`, `cancelled`, `interrupted`, `recovered`, `overdue`: needs `expect_every`); checked against `[callbacks]` at load"),
    key("expect_every", "duration", Is("none"), "a successful run is expected at least this often, whatever starts it; past it the function is overdue (`/metrics`, `GET /api/overdue`, a `callback` with `on = [\"overdue\"]`)"),
    key("schedules", "array of tables", Is("`[]`"), "schedule triggers: the clock runs the function: `[[functions.schedules]]`"),
    key("retry", "table", NONE, "attempt a failed run again after a backoff: `[functions.retry]` (docs/runs.md)"),
    key("concurrency_group", "table", NONE, "a limit shared by every run whose group key renders the same, with a policy at the limit: `[functions.concurrency_group]` (docs/runs.md)"),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::raw::{parse, RawConfig, RawProgram};
    use std::collections::BTreeSet;

    /// A TOML text with the unknown key `__probe` inside the table at `path`.
    fn probe(path: &str) -> String {
        let mut text = String::new();
        let mut prefix: Vec<String> = Vec::new();
        let segments: Vec<&str> = path.split('.').filter(|s| !s.is_empty()).collect();
        for (i, seg) in segments.iter().enumerate() {
            let array = seg.ends_with("[]");
            let name = seg.trim_end_matches("[]");
            let name = if name.starts_with('<') { "x" } else { name };
            prefix.push(name.to_string());
            if array {
                text.push_str(&format!("[[{}]]\n", prefix.join(".")));
            } else if i + 1 == segments.len() {
                text.push_str(&format!("[{}]\n", prefix.join(".")));
            }
        }
        text.push_str("__probe = 1\n");
        text
    }

    /// The keys serde expects in the table at `path` of `file`.
    fn keys_in_code(file: &str, path: &str) -> BTreeSet<String> {
        let text = probe(path);
        let message = match file {
            "config.toml" => parse::<RawConfig>(&text).err(),
            _ => parse::<RawProgram>(&text).err(),
        }
        .map(|e| e.message)
        .unwrap_or_default();
        assert!(
            message.starts_with("unknown field `__probe`"),
            "{path}: {message}"
        );
        let expected = message.split_once("expected").map_or("", |(_, e)| e);
        expected
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn every_key_of_the_code_is_documented_and_no_other() {
        for section in SECTIONS {
            let documented: BTreeSet<String> =
                section.keys.iter().map(|k| k.name.to_string()).collect();
            assert_eq!(
                keys_in_code(section.file, section.path),
                documented,
                "{} {}: keys of raw.rs (left) and of reference.rs (right)",
                section.file,
                section.header
            );
        }
    }

    #[test]
    fn every_table_key_has_its_section() {
        for section in SECTIONS {
            for key in section.keys.iter().filter(|k| k.ty.contains("table")) {
                let child = if key.ty.starts_with("array") {
                    format!("{}[]", key.name)
                } else if key.ty.starts_with("table of") {
                    format!("{}.<", key.name)
                } else {
                    key.name.to_string()
                };
                let full = match section.path {
                    "" => child,
                    p => format!("{p}.{child}"),
                };
                let found = SECTIONS
                    .iter()
                    .any(|s| s.file == section.file && s.path.starts_with(&full));
                // `values` of a trigger and `signature` of a rule reuse
                // tables documented elsewhere; `env`, `vars` and a
                // schedule's `values` are name → string tables whose
                // names are the user's.
                let reused = matches!(
                    key.name,
                    "signature" | "headers" | "vars" | "env" | "values"
                );
                assert!(found || reused, "{full}: no section documents it");
            }
        }
    }

    #[test]
    fn durations_use_the_largest_unit() {
        assert_eq!(duration(86_400 * 7), "7d");
        assert_eq!(duration(24 * 3600), "1d");
        assert_eq!(duration(90), "90s");
        assert_eq!(duration(300), "5m");
    }
}
