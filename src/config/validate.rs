//! raw → [`Config`]: reads the files ([`load`]), then checks and normalises
//! everything ([`load_str`]), collecting every problem as a located
//! [`ConfigError`].
//!
//! It never stops at the first error: a file that fails to parse is reported
//! and the other files are still checked. References into a program file that
//! could not be read as a program are not reported as dangling, because the
//! real problem is already reported in that file. Positions come from
//! `toml::Spanned` fields; keys are written like `functions[1].webhook`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use toml::Spanned;

use super::program;
use super::raw::{self, defaults, RawConfig, RawDuration};
use super::types::{self, count, duration, env_vars, error, Errors, Src};
use super::{
    resolve, ApiKey, Config, ConfigError, Environment, Program, Server, Tool, Trigger, User,
    Workspace,
};

/// Load `config.toml` at `path` and every `*.toml` in its programs dir,
/// validate everything, and return the snapshot or every error found.
///
/// # Errors
/// Every problem found, each with file, line, column and key.
pub fn load(path: &Path) -> Result<Config, Vec<ConfigError>> {
    let files = read_all(path)?;
    check(
        path,
        &files.text,
        &files.programs,
        files.errs,
        files.complete,
    )
}

/// Like [`load`], but when every file reads fine and the content
/// fingerprint equals `current`, return `Ok(None)` without parsing: a
/// reload of an unchanged set of files costs only the reads and one hash.
///
/// # Errors
/// As [`load`].
pub fn load_changed(path: &Path, current: &[u8; 32]) -> Result<Option<Config>, Vec<ConfigError>> {
    let files = read_all(path)?;
    if files.complete && files.errs.0.is_empty() {
        let mut sorted: Vec<&(PathBuf, String)> = files.programs.iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        if fingerprint(path, &files.text, &sorted) == *current {
            return Ok(None);
        }
    }
    check(
        path,
        &files.text,
        &files.programs,
        files.errs,
        files.complete,
    )
    .map(Some)
}

/// Everything [`load`] reads, with the read errors so far.
struct Files {
    text: String,
    programs: Vec<(PathBuf, String)>,
    errs: Errors,
    complete: bool,
}

/// Read `config.toml` and the program files it points at.
fn read_all(path: &Path) -> Result<Files, Vec<ConfigError>> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        let hint = missing_config_hint(path, &e);
        vec![error(
            path,
            "",
            format!("cannot read {}: {e}{hint}", path.display()),
        )]
    })?;
    Ok(read_programs_of(path, text))
}

/// Like [`load`], with `text` standing for the content of `path` (the
/// program files are read from disk): checks an edit before it is written.
///
/// # Errors
/// As [`load`].
pub fn load_text(path: &Path, text: String) -> Result<Config, Vec<ConfigError>> {
    let files = read_programs_of(path, text);
    check(
        path,
        &files.text,
        &files.programs,
        files.errs,
        files.complete,
    )
}

/// The program files that `text`, the content of `path`, points at.
fn read_programs_of(path: &Path, text: String) -> Files {
    let raw = raw::parse::<RawConfig>(&text).unwrap_or_default();
    let dir_value = raw.server.programs_dir.as_ref();
    let rel = dir_value.map_or(defaults::PROGRAMS_DIR, |d| d.get_ref());
    let dir = resolve(&config_dir(path), Path::new(rel));
    let mut errs = Errors::default();
    let mut complete = true;
    let programs = read_programs(&dir).unwrap_or_else(|e| {
        let msg = format!("cannot read programs directory {}: {e}", dir.display());
        let src = Src {
            file: path,
            text: &text,
        };
        match dir_value {
            Some(v) => errs.at(&src, v.span(), "server.programs_dir", msg),
            None => errs.0.push(error(path, "server.programs_dir", msg)),
        }
        complete = false;
        Vec::new()
    });
    let programs = programs
        .into_iter()
        .filter_map(|(file, text)| match text {
            Ok(text) => Some((file, text)),
            Err(e) => {
                errs.0.push(error(
                    &file,
                    "",
                    format!("cannot read {}: {e}", file.display()),
                ));
                complete = false;
                None
            }
        })
        .collect::<Vec<_>>();
    Files {
        text,
        programs,
        errs,
        complete,
    }
}

/// For a config file that is not there: say where it was looked for and
/// how to name another one.
fn missing_config_hint(path: &Path, e: &std::io::Error) -> String {
    if e.kind() != std::io::ErrorKind::NotFound || path.is_absolute() {
        return String::new();
    }
    let cwd = std::env::current_dir().map_or_else(|_| ".".into(), |d| d.display().to_string());
    format!(
        " (looked for it from {cwd}; run trigd in the directory holding config.toml, \
         or pass --config PATH)"
    )
}

/// Like [`load`], from text: `config_text` is the content of `path`, and
/// `programs` are `(file path, content)` of the program files, in any order.
/// Used by unit tests so that validation never touches the disk.
///
/// # Errors
/// Every problem found, each with file, line, column and key.
#[cfg_attr(not(test), allow(dead_code))] // the entry point of unit tests
pub fn load_str(
    path: &Path,
    config_text: &str,
    programs: &[(PathBuf, String)],
) -> Result<Config, Vec<ConfigError>> {
    check(path, config_text, programs, Errors::default(), true)
}

/// The directory holding `path`; `.` when it has none.
pub(super) fn config_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Program files in `dir`: every `*.toml` directly inside whose name does not
/// start with `.`, sorted by name, each with its content or read error.
type ReadFiles = Vec<(PathBuf, std::io::Result<String>)>;

fn read_programs(dir: &Path) -> std::io::Result<ReadFiles> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or(".");
        if !name.starts_with('.') && name.ends_with(".toml") && path.is_file() {
            names.push(path);
        }
    }
    names.sort();
    Ok(par_map(&names, |p| (p.clone(), std::fs::read_to_string(p))))
}

/// `items.iter().map(f).collect()`, on as many threads as there are cores
/// (in contiguous chunks, so the order is kept). Small inputs stay on the
/// calling thread.
pub(super) fn par_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    if threads < 2 || items.len() < 64 {
        return items.iter().map(f).collect();
    }
    let chunk = items.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|part| scope.spawn(|| part.iter().map(&f).collect::<Vec<R>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}

/// What is known about the programs while checking references to them.
pub(super) struct Known<'a> {
    /// Programs loaded so far, by id.
    pub(super) programs: &'a BTreeMap<u64, Program>,
    /// Ids of files that are valid TOML but not valid programs.
    pub(super) broken: BTreeSet<u64>,
    /// False when some program file could not be read or parsed at all, so
    /// a missing id may just be hidden.
    pub(super) complete: bool,
    /// False when `config.toml` itself does not parse: its workspaces are
    /// unknown, so a program naming one is not reported.
    pub(super) workspaces_known: bool,
}

impl Known<'_> {
    /// Whether a reference to program `id` should be reported as dangling.
    pub(super) fn missing(&self, id: i64) -> bool {
        let id = u64::try_from(id).ok();
        self.complete
            && !id.is_some_and(|id| self.programs.contains_key(&id) || self.broken.contains(&id))
    }
}

/// The shared core of [`load`] and [`load_str`].
fn check(
    path: &Path,
    text: &str,
    programs: &[(PathBuf, String)],
    mut errs: Errors,
    complete: bool,
) -> Result<Config, Vec<ConfigError>> {
    let dir = config_dir(path);
    let src = Src { file: path, text };
    let parsed = parse::<RawConfig>(&src, &mut errs);
    let workspaces_known = parsed.is_some();
    let raw = parsed.unwrap_or_default();
    let server = server(&src, &raw.server, &dir, &mut errs);
    let users = users(&src, &raw, &server.state_dir, &mut errs);
    let workspaces = workspaces(&src, &raw, &users, &mut errs);
    let mut sorted: Vec<&(PathBuf, String)> = programs.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let mut known = Known {
        programs: &BTreeMap::new(),
        broken: BTreeSet::new(),
        complete,
        workspaces_known,
    };
    let progs = program::load_programs(&sorted, &server, &workspaces, &mut known, &mut errs);
    known.programs = &progs;
    let api_keys = api_keys(&src, &raw, &workspaces, &mut errs);
    let tools = tools(&src, &raw, &workspaces, &known, &mut errs);
    if !errs.0.is_empty() {
        let order = |f: &Path| sorted.iter().position(|p| p.0 == f).map_or(0, |i| i + 1);
        errs.0.sort_by_key(|e| (order(&e.file), e.line, e.col));
        return Err(errs.0);
    }
    let fingerprint = fingerprint(path, text, &sorted);
    let programs = progs.into_iter().map(|(id, p)| (id, Arc::new(p))).collect();
    let path = path.to_path_buf();
    Ok(Config {
        path,
        dir,
        server,
        programs,
        api_keys,
        users,
        workspaces,
        tools,
        fingerprint,
    })
}

/// sha256 over the name and content of every file, config first.
fn fingerprint(path: &Path, text: &str, programs: &[&(PathBuf, String)]) -> [u8; 32] {
    let mut h = Sha256::new();
    let files = std::iter::once((path, text))
        .chain(programs.iter().map(|(p, t)| (p.as_path(), t.as_str())));
    for (file, content) in files {
        let name = file.to_string_lossy();
        for part in [name.as_bytes(), content.as_bytes()] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part);
        }
    }
    h.finalize().into()
}

/// Parse `src` into `T`, recording a located error on failure.
pub(super) fn parse<T: serde::de::DeserializeOwned>(src: &Src, errs: &mut Errors) -> Option<T> {
    match raw::parse::<T>(src.text) {
        Ok(v) => Some(v),
        Err(e) => {
            let span = e.span.unwrap_or(0..0);
            errs.at(
                src,
                span.clone(),
                raw::key_at(src.text, span.start),
                e.message,
            );
            None
        }
    }
}

/// `[server]` with defaults filled in and directories resolved.
fn server(src: &Src, raw: &raw::RawServer, dir: &Path, errs: &mut Errors) -> Server {
    let mut n = |v: &raw::Count, key: &str, default: usize, min: i64| {
        count(src, v, &format!("server.{key}"), default, min, errs)
    };
    let workers = n(&raw.workers, "workers", defaults::WORKERS, 1);
    let max_concurrent_runs = n(
        &raw.max_concurrent_runs,
        "max_concurrent_runs",
        defaults::MAX_CONCURRENT_RUNS,
        1,
    );
    let max_queued_runs = n(
        &raw.max_queued_runs,
        "max_queued_runs",
        defaults::MAX_QUEUED_RUNS,
        0,
    );
    let max_output_bytes = n(
        &raw.max_output_bytes,
        "max_output_bytes",
        defaults::MAX_OUTPUT_BYTES,
        1,
    );
    let max_variables = n(
        &raw.max_variables,
        "max_variables",
        defaults::MAX_VARIABLES,
        1,
    );
    let max_variable_bytes = n(
        &raw.max_variable_bytes,
        "max_variable_bytes",
        defaults::MAX_VARIABLE_BYTES,
        1,
    );
    let max_body_bytes = n(
        &raw.max_body_bytes,
        "max_body_bytes",
        defaults::MAX_BODY_BYTES,
        1,
    );
    let run_retention = n(
        &raw.run_retention,
        "run_retention",
        defaults::RUN_RETENTION,
        1,
    );
    let max_connections = n(
        &raw.max_connections,
        "max_connections",
        defaults::MAX_CONNECTIONS,
        1,
    );
    let max_header_bytes = n(
        &raw.max_header_bytes,
        "max_header_bytes",
        defaults::MAX_HEADER_BYTES,
        256,
    );
    let max_url_bytes = n(
        &raw.max_url_bytes,
        "max_url_bytes",
        defaults::MAX_URL_BYTES,
        64,
    );
    let auth_failures_per_minute = n(
        &raw.auth_failures_per_minute,
        "auth_failures_per_minute",
        defaults::AUTH_FAILURES_PER_MINUTE,
        0,
    );
    let idempotency_max_keys = n(
        &raw.idempotency_max_keys,
        "idempotency_max_keys",
        defaults::IDEMPOTENCY_MAX_KEYS,
        1,
    );
    let trusted_proxies = trusted_proxies(src, &raw.trusted_proxies, errs);
    let mut d = |v: &Option<Spanned<RawDuration>>, key: &str, secs: u64| {
        duration(
            src,
            v.as_ref(),
            &format!("server.{key}"),
            Duration::from_secs(secs),
            errs,
        )
    };
    let run_timeout = d(&raw.run_timeout, "run_timeout", defaults::RUN_TIMEOUT_SECS);
    let kill_grace = d(&raw.kill_grace, "kill_grace", defaults::KILL_GRACE_SECS);
    let request_timeout = d(
        &raw.request_timeout,
        "request_timeout",
        defaults::REQUEST_TIMEOUT_SECS,
    );
    let shutdown_grace = d(
        &raw.shutdown_grace,
        "shutdown_grace",
        defaults::SHUTDOWN_GRACE_SECS,
    );
    let session_idle = d(
        &raw.session_idle,
        "session_idle",
        defaults::SESSION_IDLE_SECS,
    );
    let session_max = d(&raw.session_max, "session_max", defaults::SESSION_MAX_SECS);
    let queue_timeout = d(
        &raw.queue_timeout,
        "queue_timeout",
        defaults::QUEUE_TIMEOUT_SECS,
    );
    let idempotency_window = d(
        &raw.idempotency_window,
        "idempotency_window",
        defaults::IDEMPOTENCY_WINDOW_SECS,
    );
    // 0 is allowed here (no drain), unlike other durations.
    let drain_delay = match raw.drain_delay.as_ref().map(|v| v.get_ref()) {
        Some(RawDuration::Secs(0)) => Duration::ZERO,
        Some(RawDuration::Text(t)) if matches!(t.trim(), "0" | "0s") => Duration::ZERO,
        _ => d(&raw.drain_delay, "drain_delay", defaults::DRAIN_DELAY_SECS),
    };
    let instance = instance(src, raw.instance.as_ref(), errs);
    if let Some(url) = &raw.public_url {
        if !(url.get_ref().starts_with("http://") || url.get_ref().starts_with("https://")) {
            errs.at(
                src,
                url.span(),
                "server.public_url",
                "public_url must start with http:// or https://",
            );
        }
    }
    let state_dir = resolve(
        dir,
        Path::new(raw.state_dir.as_deref().unwrap_or(defaults::STATE_DIR)),
    );
    let programs_dir = raw
        .programs_dir
        .as_ref()
        .map_or(defaults::PROGRAMS_DIR, |d| d.get_ref());
    Server {
        listen: raw
            .listen
            .clone()
            .unwrap_or_else(|| defaults::LISTEN.into()),
        workers,
        programs_dir: resolve(dir, Path::new(programs_dir)),
        shared_state_dir: raw
            .shared_state_dir
            .as_ref()
            .map_or_else(|| state_dir.clone(), |d| resolve(dir, Path::new(d))),
        state_dir,
        instance,
        drain_delay,
        public_url: raw.public_url.as_ref().map(|u| u.get_ref().clone()),
        max_concurrent_runs,
        max_queued_runs,
        run_timeout,
        kill_grace,
        shutdown_grace,
        max_output_bytes,
        max_variables,
        max_variable_bytes,
        max_body_bytes,
        run_retention,
        max_connections,
        request_timeout,
        max_header_bytes,
        max_url_bytes,
        cookie_secure: raw.cookie_secure.unwrap_or(false)
            || raw
                .public_url
                .as_ref()
                .is_some_and(|u| u.get_ref().starts_with("https://")),
        session_idle,
        session_max,
        auth_failures_per_minute,
        queue_timeout,
        idempotency_window,
        idempotency_max_keys,
        trusted_proxies,
    }
}

/// `instance`: a valid instance name, or the one derived from the host name.
fn instance(src: &Src, raw: Option<&Spanned<String>>, errs: &mut Errors) -> String {
    let Some(name) = raw else {
        return crate::cluster::default_name();
    };
    if !crate::cluster::valid_name(name.get_ref()) {
        errs.at(
            src,
            name.span(),
            "server.instance",
            "instance must be 1 to 63 of a-z, 0-9, '_' and '-', starting with a letter or digit",
        );
    }
    name.get_ref().clone()
}

/// `trusted_proxies`: each an IP address.
fn trusted_proxies(src: &Src, raw: &[Spanned<String>], errs: &mut Errors) -> Vec<std::net::IpAddr> {
    let mut out = Vec::new();
    for (i, p) in raw.iter().enumerate() {
        match p.get_ref().trim().parse::<std::net::IpAddr>() {
            Ok(ip) => out.push(ip.to_canonical()),
            Err(_) => {
                let msg = format!(
                    "\"{}\" is not an IP address (write one address per entry, like \"127.0.0.1\" or \"::1\")",
                    p.get_ref()
                );
                errs.at(src, p.span(), format!("server.trusted_proxies[{i}]"), msg);
            }
        }
    }
    out
}

/// `[[users]]` by name.
fn users(
    src: &Src,
    raw: &RawConfig,
    state_dir: &Path,
    errs: &mut Errors,
) -> BTreeMap<String, User> {
    let mut seen = HashMap::new();
    let mut out = BTreeMap::new();
    for (i, u) in raw.users.iter().enumerate() {
        let key = format!("users[{i}]");
        errs.name(src, &u.name, &format!("{key}.name"), "user");
        errs.unique(src, &mut seen, &u.name, &format!("{key}.name"), "user");
        let generated = u.password.get_ref() == crate::firststart::MARKER;
        if !generated && !u.password.get_ref().starts_with("$argon2") {
            let msg = "password must be an argon2 hash starting with \"$argon2\" (make one with `trigd hash-password`), or \"generate\" for a password trigd makes and prints at its first start";
            errs.at(src, u.password.span(), format!("{key}.password"), msg);
        }
        let name = u.name.get_ref().clone();
        out.insert(
            name.clone(),
            User {
                name,
                password_hash: if generated {
                    crate::firststart::stored_hash(state_dir, u.name.get_ref()).unwrap_or_default()
                } else {
                    u.password.get_ref().clone()
                },
                generated_password: generated,
            },
        );
    }
    out
}

/// `[[workspaces]]` by name; members must be users.
fn workspaces(
    src: &Src,
    raw: &RawConfig,
    users: &BTreeMap<String, User>,
    errs: &mut Errors,
) -> BTreeMap<String, Workspace> {
    let mut seen = HashMap::new();
    let mut out = BTreeMap::new();
    for (i, w) in raw.workspaces.iter().enumerate() {
        let key = format!("workspaces[{i}]");
        errs.name(src, &w.name, &format!("{key}.name"), "workspace");
        errs.unique(src, &mut seen, &w.name, &format!("{key}.name"), "workspace");
        for (j, m) in w.members.iter().enumerate() {
            if !users.contains_key(m.get_ref()) {
                let msg = format!("member \"{}\" is not a [[users]] entry", m.get_ref());
                errs.at(src, m.span(), format!("{key}.members[{j}]"), msg);
            }
        }
        for (j, a) in w.admins.iter().flatten().enumerate() {
            if !w.members.iter().any(|m| m.get_ref() == a.get_ref()) {
                let msg = format!(
                    "admin \"{}\" is not in this workspace's members",
                    a.get_ref()
                );
                errs.at(src, a.span(), format!("{key}.admins[{j}]"), msg);
            }
        }
        let members = w.members.iter().map(|m| m.get_ref().clone()).collect();
        let admins = w
            .admins
            .as_ref()
            .map(|a| a.iter().map(|m| m.get_ref().clone()).collect());
        let name = w.name.get_ref().clone();
        out.insert(
            name.clone(),
            Workspace {
                name,
                members,
                admins,
            },
        );
    }
    out
}

/// Record an error unless `ws` names a workspace.
pub(super) fn workspace_ref<T>(
    src: &Src,
    ws: &Spanned<String>,
    all: &BTreeMap<String, T>,
    key: String,
    errs: &mut Errors,
) {
    if !all.contains_key(ws.get_ref()) {
        let msg = format!(
            "workspace \"{}\" is not a [[workspaces]] entry",
            ws.get_ref()
        );
        errs.at(src, ws.span(), key, msg);
    }
}

/// `[[api_keys]]` by hash.
fn api_keys(
    src: &Src,
    raw: &RawConfig,
    wss: &BTreeMap<String, Workspace>,
    errs: &mut Errors,
) -> HashMap<[u8; 32], ApiKey> {
    let (mut names, mut hashes) = (HashMap::new(), HashMap::new());
    let mut out = HashMap::new();
    for (i, k) in raw.api_keys.iter().enumerate() {
        let key = format!("api_keys[{i}]");
        errs.unique(
            src,
            &mut names,
            &k.name,
            &format!("{key}.name"),
            "api key name",
        );
        let lower = Spanned::new(k.sha256.span(), k.sha256.get_ref().to_ascii_lowercase());
        errs.unique(
            src,
            &mut hashes,
            &lower,
            &format!("{key}.sha256"),
            "api key sha256",
        );
        let hash = types::parse_sha256(k.sha256.get_ref())
            .map_err(|msg| errs.at(src, k.sha256.span(), format!("{key}.sha256"), msg));
        if let Some(ws) = &k.workspace {
            workspace_ref(src, ws, wss, format!("{key}.workspace"), errs);
        }
        // A scope naming a program that does not exist (yet, or any more)
        // is not an error: removing a program file must not make the whole
        // config invalid. Such an id simply matches nothing.
        let programs = k.programs.as_ref().map(|ids| {
            ids.iter()
                .filter_map(|id| u64::try_from(*id.get_ref()).ok())
                .collect()
        });
        let workspace = k.workspace.as_ref().map(|w| w.get_ref().clone());
        let rate_per_minute = k.rate_per_minute.as_ref().map(|_| {
            count(
                src,
                &k.rate_per_minute,
                &format!("{key}.rate_per_minute"),
                1,
                1,
                errs,
            ) as u64
        });
        if let Ok(hash) = hash {
            out.insert(
                hash,
                ApiKey {
                    name: k.name.get_ref().clone(),
                    workspace,
                    programs,
                    rate_per_minute,
                },
            );
        }
    }
    out
}

/// `[[tools]]` by name.
fn tools(
    src: &Src,
    raw: &RawConfig,
    wss: &BTreeMap<String, Workspace>,
    known: &Known,
    errs: &mut Errors,
) -> BTreeMap<String, Tool> {
    let mut seen = HashMap::new();
    let mut out = BTreeMap::new();
    for (i, t) in raw.tools.iter().enumerate() {
        let key = format!("tools[{i}]");
        errs.name(src, &t.name, &format!("{key}.name"), "tool");
        errs.unique(src, &mut seen, &t.name, &format!("{key}.name"), "tool");
        workspace_ref(src, &t.workspace, wss, format!("{key}.workspace"), errs);
        let mut environments = BTreeMap::new();
        for (name, env) in &t.environments {
            let key = format!("{key}.environments.{}", name.get_ref());
            errs.name(src, name, &key, "environment");
            let vars = env_vars(src, &env.vars, &format!("{key}.vars"), errs);
            let name = name.get_ref().clone();
            environments.insert(
                name.clone(),
                Environment {
                    name,
                    public: env.public,
                    vars,
                },
            );
        }
        let triggers = triggers(src, t, &key, known, errs);
        let (name, workspace) = (t.name.get_ref().clone(), t.workspace.get_ref().clone());
        out.insert(
            name.clone(),
            Tool {
                name,
                workspace,
                environments,
                triggers,
            },
        );
    }
    out
}

/// The triggers of one tool.
fn triggers(
    src: &Src,
    t: &raw::RawTool,
    key: &str,
    known: &Known,
    errs: &mut Errors,
) -> Vec<Trigger> {
    let mut seen = HashMap::new();
    let mut out = Vec::new();
    for (j, tr) in t.triggers.iter().enumerate() {
        let key = format!("{key}.triggers[{j}]");
        if tr.kind.get_ref() != "endpoint" {
            let msg = format!(
                "unknown trigger kind \"{}\"; the only kind is \"endpoint\"",
                tr.kind.get_ref()
            );
            errs.at(src, tr.kind.span(), format!("{key}.kind"), msg);
        }
        errs.name(src, &tr.name, &format!("{key}.name"), "trigger");
        errs.unique(
            src,
            &mut seen,
            &tr.name,
            &format!("{key}.name"),
            "trigger name",
        );
        let method = tr.method.as_ref().map_or(Ok("POST".to_string()), |m| {
            types::parse_method(m.get_ref())
                .map_err(|msg| errs.at(src, m.span(), format!("{key}.method"), msg))
        });
        let id = *tr.program.get_ref();
        let program = u64::try_from(id)
            .ok()
            .and_then(|id| known.programs.get(&id));
        if known.missing(id) {
            errs.at(
                src,
                tr.program.span(),
                format!("{key}.program"),
                format!("program {id} does not exist"),
            );
        } else if let Some(p) = program.filter(|p| p.function(tr.function.get_ref()).is_none()) {
            let msg = format!(
                "program {id} ({}) has no function \"{}\"",
                p.name,
                tr.function.get_ref()
            );
            errs.at(src, tr.function.span(), format!("{key}.function"), msg);
        }
        let (Ok(method), Ok(program)) = (method, u64::try_from(id)) else {
            continue;
        };
        out.push(Trigger {
            name: tr.name.get_ref().clone(),
            method,
            program,
            function: tr.function.get_ref().clone(),
        });
    }
    out
}

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;
