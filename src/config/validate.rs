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
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use toml::Spanned;

use super::raw::{self, defaults, RawConfig, RawDuration, RawFunction, RawProgram, RawStep};
use super::types::{self, count, duration, env_vars, error, is_ident, templates, Errors, Src};
use super::{
    resolve, ApiKey, Config, ConfigError, Environment, Function, Program, Server, Step, Tool,
    Trigger, User, Webhook, Workspace,
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
        vec![error(
            path,
            "",
            format!("cannot read {}: {e}", path.display()),
        )]
    })?;
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
    Ok(Files {
        text,
        programs,
        errs,
        complete,
    })
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
fn config_dir(path: &Path) -> PathBuf {
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
    Ok(names
        .into_iter()
        .map(|p| (p.clone(), std::fs::read_to_string(p)))
        .collect())
}

/// What is known about the programs while checking references to them.
struct Known<'a> {
    programs: &'a BTreeMap<u64, Program>,
    /// Ids of files that are valid TOML but not valid programs.
    broken: BTreeSet<u64>,
    /// False when some program file could not be read or parsed at all, so
    /// a missing id may just be hidden.
    complete: bool,
}

impl Known<'_> {
    /// Whether a reference to program `id` should be reported as dangling.
    fn missing(&self, id: i64) -> bool {
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
    let raw = parse::<RawConfig>(&src, &mut errs).unwrap_or_default();
    let server = server(&src, &raw.server, &dir, &mut errs);
    let users = users(&src, &raw, &mut errs);
    let workspaces = workspaces(&src, &raw, &users, &mut errs);
    let mut sorted: Vec<&(PathBuf, String)> = programs.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let mut known = Known {
        programs: &BTreeMap::new(),
        broken: BTreeSet::new(),
        complete,
    };
    let progs = load_programs(&sorted, &server, &workspaces, &mut known, &mut errs);
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
fn parse<T: serde::de::DeserializeOwned>(src: &Src, errs: &mut Errors) -> Option<T> {
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
        state_dir: resolve(
            dir,
            Path::new(raw.state_dir.as_deref().unwrap_or(defaults::STATE_DIR)),
        ),
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
        trusted_proxies,
    }
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
fn users(src: &Src, raw: &RawConfig, errs: &mut Errors) -> BTreeMap<String, User> {
    let mut seen = HashMap::new();
    let mut out = BTreeMap::new();
    for (i, u) in raw.users.iter().enumerate() {
        let key = format!("users[{i}]");
        errs.name(src, &u.name, &format!("{key}.name"), "user");
        errs.unique(src, &mut seen, &u.name, &format!("{key}.name"), "user");
        if !u.password.get_ref().starts_with("$argon2") {
            let msg = "password must be an argon2 hash starting with \"$argon2\"; make one with `trigd hash-password`";
            errs.at(src, u.password.span(), format!("{key}.password"), msg);
        }
        let name = u.name.get_ref().clone();
        out.insert(
            name.clone(),
            User {
                name,
                password_hash: u.password.get_ref().clone(),
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
        let members = w.members.iter().map(|m| m.get_ref().clone()).collect();
        let name = w.name.get_ref().clone();
        out.insert(name.clone(), Workspace { name, members });
    }
    out
}

/// Record an error unless `ws` names a workspace.
fn workspace_ref<T>(
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

/// Every program file, checked, by id. Files that are TOML but not valid
/// programs add their id to `known.broken`; unparsable ones clear
/// `known.complete`.
fn load_programs(
    files: &[&(PathBuf, String)],
    server: &Server,
    wss: &BTreeMap<String, Workspace>,
    known: &mut Known,
    errs: &mut Errors,
) -> BTreeMap<u64, Program> {
    let mut files_by_id: HashMap<u64, &Path> = HashMap::new();
    let mut names: HashMap<String, String> = HashMap::new();
    let mut out = BTreeMap::new();
    for (file, text) in files {
        let src = Src { file, text };
        let Some(raw) = parse::<RawProgram>(&src, errs) else {
            note_broken(text, known);
            continue;
        };
        let id = u64::try_from(*raw.id.get_ref()).ok();
        match id.map(|id| files_by_id.get(&id).copied()) {
            None => errs.at(
                &src,
                raw.id.span(),
                "id",
                "program id must be a non-negative integer",
            ),
            Some(Some(first)) => {
                let msg = format!(
                    "program id {} is used by both {} and {}",
                    raw.id.get_ref(),
                    first.display(),
                    file.display()
                );
                errs.at(&src, raw.id.span(), "id", msg);
            }
            Some(None) => {}
        }
        match names.get(raw.name.get_ref()) {
            Some(first) => {
                let name = raw.name.get_ref();
                let msg = format!(
                    "program name \"{name}\" is used by both {first} and {}",
                    file.display()
                );
                errs.at(&src, raw.name.span(), "name", msg);
            }
            None => {
                names.insert(raw.name.get_ref().clone(), file.display().to_string());
            }
        }
        if let Some(ws) = &raw.workspace {
            workspace_ref(&src, ws, wss, "workspace".into(), errs);
        }
        let program = program(&src, &raw, server, errs);
        if let Some(id) = id {
            files_by_id.entry(id).or_insert(file);
            out.entry(id).or_insert(program);
        }
    }
    out
}

/// Remember what can be known about a program file that failed to load.
fn note_broken(text: &str, known: &mut Known) {
    let id = text
        .parse::<toml::Table>()
        .ok()
        .and_then(|t| t.get("id")?.as_integer());
    match id.and_then(|id| u64::try_from(id).ok()) {
        Some(id) => {
            known.broken.insert(id);
        }
        None => known.complete = false,
    }
}

/// The names a function's values bind to, as written (first webhook only).
fn raw_inputs(f: &RawFunction) -> Vec<String> {
    let w = f.webhook.as_ref().and_then(|w| match w.get_ref() {
        raw::WebhookSlot::One(w) => Some(w),
        raw::WebhookSlot::Many(all) => all.first().map(|w| w.get_ref()),
    });
    w.map(|w| w.outputs.iter().map(|o| o.get_ref().clone()).collect())
        .unwrap_or_default()
}

/// Function name → inputs, for checking calls; the first of a name wins.
type Inputs<'a> = HashMap<&'a str, Vec<String>>;

/// One program file's functions, checked.
fn program(src: &Src, raw: &RawProgram, server: &Server, errs: &mut Errors) -> Program {
    if raw.functions.is_empty() {
        let msg = "a program needs at least one [[functions]] entry";
        errs.at(src, raw.name.span(), "functions", msg);
    }
    let mut inputs = Inputs::new();
    for f in &raw.functions {
        inputs
            .entry(f.name.get_ref())
            .or_insert_with(|| raw_inputs(f));
    }
    let dir = config_dir(src.file);
    let mut seen = HashMap::new();
    let mut functions = Vec::new();
    for (i, f) in raw.functions.iter().enumerate() {
        let key = format!("functions[{i}]");
        errs.name(src, &f.name, &format!("{key}.name"), "function");
        errs.unique(
            src,
            &mut seen,
            &f.name,
            &format!("{key}.name"),
            "function name",
        );
        functions.push(function(src, f, &key, &inputs, &dir, server, errs));
    }
    cycles(src, raw, errs);
    Program {
        id: u64::try_from(*raw.id.get_ref()).unwrap_or(0),
        name: raw.name.get_ref().clone(),
        workspace: raw.workspace.as_ref().map(|w| w.get_ref().clone()),
        file: src.file.to_path_buf(),
        functions,
    }
}

/// One function, checked.
fn function(
    src: &Src,
    f: &RawFunction,
    key: &str,
    inputs: &Inputs,
    dir: &Path,
    server: &Server,
    errs: &mut Errors,
) -> Function {
    let webhook = webhook(src, f, key, errs);
    let own = raw_inputs(f);
    let steps = steps(src, f, key, (&own, inputs), errs);
    let timeout = duration(
        src,
        f.timeout.as_ref(),
        &format!("{key}.timeout"),
        server.run_timeout,
        errs,
    );
    let env = env_vars(src, &f.env, &format!("{key}.env"), errs);
    let workdir = f
        .workdir
        .as_deref()
        .map_or(dir.to_path_buf(), |w| resolve(dir, Path::new(w)));
    let concurrency = f.concurrency.as_ref().map(|_| {
        count(
            src,
            &f.concurrency,
            &format!("{key}.concurrency"),
            1,
            1,
            errs,
        )
    });
    let (user, group) = identity(src, f, key, errs);
    let name = f.name.get_ref().clone();
    Function {
        name,
        steps,
        timeout,
        env,
        workdir,
        concurrency,
        webhook,
        user,
        group,
    }
}

/// `user` and `group`, resolved to numeric ids now (so a run never looks
/// names up). A `user` without `group` takes the user's primary group from
/// the user database; a numeric `user` without an entry there needs `group`.
fn identity(
    src: &Src,
    f: &RawFunction,
    key: &str,
    errs: &mut Errors,
) -> (Option<u32>, Option<u32>) {
    let bad_id = |v: &Spanned<raw::RawId>, what: &str, errs: &mut Errors| {
        let msg = format!("{what} id must be between 0 and {}", u32::MAX - 1);
        errs.at(src, v.span(), format!("{key}.{what}"), msg);
    };
    let mut primary = None;
    let user = f.user.as_ref().and_then(|u| match u.get_ref() {
        raw::RawId::Id(n) => match u32::try_from(*n) {
            Ok(uid) if uid != u32::MAX => {
                primary = crate::sys::primary_group_of(uid);
                if primary.is_none() && f.group.is_none() {
                    let msg = format!(
                        "uid {uid} has no entry in the user database, so its group is unknown: set `group` too"
                    );
                    errs.at(src, u.span(), format!("{key}.user"), msg);
                }
                Some(uid)
            }
            _ => {
                bad_id(u, "user", errs);
                None
            }
        },
        raw::RawId::Name(name) => match crate::sys::user_by_name(name) {
            Some((uid, gid)) => {
                primary = Some(gid);
                Some(uid)
            }
            None => {
                let msg = format!("no user \"{name}\" in the user database of this system");
                errs.at(src, u.span(), format!("{key}.user"), msg);
                None
            }
        },
    });
    let group = match &f.group {
        None => primary,
        Some(g) => match g.get_ref() {
            raw::RawId::Id(n) => match u32::try_from(*n) {
                Ok(gid) if gid != u32::MAX => Some(gid),
                _ => {
                    bad_id(g, "group", errs);
                    None
                }
            },
            raw::RawId::Name(name) => {
                let gid = crate::sys::group_by_name(name);
                if gid.is_none() {
                    let msg = format!("no group \"{name}\" in the group database of this system");
                    errs.at(src, g.span(), format!("{key}.group"), msg);
                }
                gid
            }
        },
    };
    (user, group)
}

/// The webhook trigger: at most one; outputs are unique identifiers.
fn webhook(src: &Src, f: &RawFunction, key: &str, errs: &mut Errors) -> Option<Webhook> {
    let slot = f.webhook.as_ref()?;
    let key = format!("{key}.webhook");
    let w = match slot.get_ref() {
        raw::WebhookSlot::One(w) => w,
        raw::WebhookSlot::Many(all) => {
            if let Some(second) = all.get(1) {
                errs.at(src, second.span(), &key, raw::ONE_WEBHOOK);
            }
            all.first()?.get_ref()
        }
    };
    let mut seen = HashMap::new();
    for (j, o) in w.outputs.iter().enumerate() {
        let okey = format!("{key}.outputs[{j}]");
        if is_ident(o.get_ref()) {
            errs.unique(src, &mut seen, o, &okey, "output");
        } else {
            let msg = format!(
                "output \"{}\" must be an identifier [A-Za-z_][A-Za-z0-9_]*",
                o.get_ref()
            );
            errs.at(src, o.span(), okey, msg);
        }
    }
    let outputs = w.outputs.iter().map(|o| o.get_ref().clone()).collect();
    Some(Webhook {
        active: w.active,
        outputs,
    })
}

/// The function's own inputs and every function's inputs.
type Scope<'a> = (&'a [String], &'a Inputs<'a>);

/// `command` or `steps`, exactly one, not empty.
fn steps(src: &Src, f: &RawFunction, key: &str, scope: Scope, errs: &mut Errors) -> Vec<Step> {
    match (&f.command, &f.steps) {
        (Some(_), Some(s)) => {
            let msg = "give either `command` or `steps`, not both";
            errs.at(src, s.span(), format!("{key}.steps"), msg);
            Vec::new()
        }
        (None, None) => {
            errs.at(
                src,
                f.name.span(),
                key,
                "a function needs `command` or `steps`",
            );
            Vec::new()
        }
        (Some(c), None) => command(src, c, &format!("{key}.command"), scope.0, errs)
            .into_iter()
            .collect(),
        (None, Some(s)) => {
            if s.get_ref().is_empty() {
                errs.at(
                    src,
                    s.span(),
                    format!("{key}.steps"),
                    "steps must not be empty",
                );
            }
            let each = s.get_ref().iter().enumerate();
            each.filter_map(|(j, st)| step(src, st, &format!("{key}.steps[{j}]"), scope, errs))
                .collect()
        }
    }
}

/// A command step: a non-empty argv of templates.
fn command(
    src: &Src,
    argv: &raw::Argv,
    key: &str,
    inputs: &[String],
    errs: &mut Errors,
) -> Option<Step> {
    if argv.get_ref().is_empty() {
        errs.at(
            src,
            argv.span(),
            key,
            "command must not be empty: give at least the program to run",
        );
        return None;
    }
    templates(src, argv.get_ref(), key, inputs, errs).map(Step::Command)
}

/// One element of `steps`: exactly one of command, shell, call.
fn step(
    src: &Src,
    st: &Spanned<RawStep>,
    key: &str,
    scope: Scope,
    errs: &mut Errors,
) -> Option<Step> {
    let s = st.get_ref();
    let given = [s.command.is_some(), s.shell.is_some(), s.call.is_some()];
    if given.iter().filter(|g| **g).count() != 1 {
        errs.at(
            src,
            st.span(),
            key,
            "a step needs exactly one of `command`, `shell` or `call`",
        );
        return None;
    }
    if let (Some(args), None) = (&s.args, &s.call) {
        errs.at(
            src,
            args.span(),
            format!("{key}.args"),
            "`args` only goes with `call`",
        );
    }
    if let Some(c) = &s.command {
        return command(src, c, &format!("{key}.command"), scope.0, errs);
    }
    if let Some(sh) = &s.shell {
        if sh.get_ref().trim().is_empty() {
            errs.at(
                src,
                sh.span(),
                format!("{key}.shell"),
                "shell script must not be empty",
            );
        }
        return Some(Step::Shell(sh.get_ref().clone()));
    }
    call(src, s.call.as_ref()?, s.args.as_ref(), key, scope, errs)
}

/// A call step: the callee exists and gets one argument per input.
fn call(
    src: &Src,
    callee: &Spanned<String>,
    args: Option<&Spanned<Vec<Spanned<String>>>>,
    key: &str,
    (own, inputs): Scope,
    errs: &mut Errors,
) -> Option<Step> {
    let Some(wanted) = inputs.get(callee.get_ref().as_str()) else {
        let msg = format!(
            "calls function \"{}\", which this program does not define",
            callee.get_ref()
        );
        errs.at(src, callee.span(), format!("{key}.call"), msg);
        return None;
    };
    let given = args.map_or(&[][..], |a| a.get_ref().as_slice());
    if given.len() != wanted.len() {
        let msg = format!(
            "call of \"{}\" passes {} argument(s), but it has {} input(s) [{}]",
            callee.get_ref(),
            given.len(),
            wanted.len(),
            wanted.join(", ")
        );
        let span = args.map_or(callee.span(), |a| a.span());
        errs.at(src, span, format!("{key}.args"), msg);
    }
    let args = templates(src, given, &format!("{key}.args"), own, errs)?;
    Some(Step::Call {
        function: callee.get_ref().clone(),
        args,
    })
}

/// A call edge: callee index, span and key of the `call` value.
type Edge = (usize, Range<usize>, String);

/// Report every call cycle once, at the call that closes it.
fn cycles(src: &Src, raw: &RawProgram, errs: &mut Errors) {
    let names: Vec<&str> = raw
        .functions
        .iter()
        .map(|f| f.name.get_ref().as_str())
        .collect();
    let edges: Vec<Vec<Edge>> = raw
        .functions
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let steps = f.steps.as_ref().map_or(&[][..], |s| s.get_ref().as_slice());
            steps
                .iter()
                .enumerate()
                .filter_map(|(j, st)| {
                    let call = st.get_ref().call.as_ref()?;
                    let to = names.iter().position(|n| *n == call.get_ref())?;
                    Some((to, call.span(), format!("functions[{i}].steps[{j}].call")))
                })
                .collect()
        })
        .collect();
    let mut color = vec![0u8; names.len()];
    for i in 0..names.len() {
        if color[i] == 0 {
            visit(
                i,
                &edges,
                &mut color,
                &mut Vec::new(),
                &mut |stack, edge| {
                    let path: Vec<&str> =
                        stack.iter().chain([&edge.0]).map(|n| names[*n]).collect();
                    let msg = format!(
                        "call cycle {}; a function may not call itself, directly or indirectly",
                        path.join(" -> ")
                    );
                    errs.at(src, edge.1.clone(), &edge.2, msg);
                },
            );
        }
    }
}

/// Depth-first search; `found` gets the cycle's stack and closing edge.
fn visit(
    i: usize,
    edges: &[Vec<Edge>],
    color: &mut [u8],
    stack: &mut Vec<usize>,
    found: &mut dyn FnMut(&[usize], &Edge),
) {
    color[i] = 1;
    stack.push(i);
    for e in &edges[i] {
        match color[e.0] {
            0 => visit(e.0, edges, color, stack, found),
            1 => {
                let from = stack.iter().position(|n| *n == e.0).unwrap_or(0);
                found(&stack[from..], e);
            }
            _ => {}
        }
    }
    stack.pop();
    color[i] = 2;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Piece;

    const CONFIG: &str = r#"
[server]
listen = "0.0.0.0:9000"
run_timeout = "1m30s"
max_output_bytes = 4096

[[api_keys]]
name = "cron"
sha256 = "ABABABABABABABABABABABABABABABABABABABABABABABABABABABABABABABAB"
workspace = "ops"
programs = [1]

[[users]]
name = "alice"
password = "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA"

[[workspaces]]
name = "ops"
members = ["alice"]

[[tools]]
name = "inventory"
workspace = "ops"
[tools.environments.production]
vars = { DB_PATH = "/var/lib/inv.db" }
[[tools.triggers]]
kind = "endpoint"
name = "list-items"
method = "get"
program = 1
function = "snapshot"
"#;

    const BACKUP: &str = r#"id = 1
name = "backup"
workspace = "ops"

[[functions]]
name = "snapshot"
command = ["/bin/snap", "--out={label}/{{x}}", "{volume}"]
timeout = "5m"
env = { RETENTION = "7" }
concurrency = 2
[functions.webhook]
outputs = ["volume", "label"]

[[functions]]
name = "all"
workdir = "/tmp"
steps = [
  { shell = "echo hi" },
  { call = "snapshot", args = ["v", "{x}"] },
]
webhook = { active = false, outputs = ["x"] }
"#;

    fn run(config: &str, programs: &[(&str, &str)]) -> Result<Config, Vec<ConfigError>> {
        let progs: Vec<(PathBuf, String)> = programs
            .iter()
            .map(|(n, t)| (PathBuf::from(n), t.to_string()))
            .collect();
        load_str(Path::new("config.toml"), config, &progs)
    }

    fn errors(config: &str, programs: &[(&str, &str)]) -> Vec<String> {
        match run(config, programs) {
            Ok(_) => panic!("expected errors"),
            Err(errs) => errs.iter().map(ToString::to_string).collect(),
        }
    }

    /// `want` lines must each start one of the errors, and nothing else.
    fn expect(got: &[String], want: &[&str]) {
        for w in want {
            assert!(
                got.iter().any(|g| g.starts_with(w)),
                "missing {w:?} in:\n{}",
                got.join("\n")
            );
        }
        assert_eq!(got.len(), want.len(), "got:\n{}", got.join("\n"));
    }

    /// A program file with one function whose body is `body`.
    fn one(body: &str) -> String {
        format!("id = 1\nname = \"p\"\n[[functions]]\nname = \"f\"\n{body}")
    }

    #[test]
    fn full_example_loads() {
        let c = run(CONFIG, &[("programs/backup.toml", BACKUP)]).unwrap();
        assert_eq!(c.dir, PathBuf::from("."));
        assert_eq!(c.server.listen, "0.0.0.0:9000");
        assert_eq!(c.server.workers, 8);
        assert_eq!(c.server.run_timeout, Duration::from_secs(90));
        assert_eq!(c.server.max_output_bytes, 4096);
        assert_eq!(c.server.programs_dir, PathBuf::from("./programs"));
        assert_eq!(c.server.state_dir, PathBuf::from("./state"));
        let p = c.program(1).unwrap();
        assert_eq!(
            (p.name.as_str(), p.workspace.as_deref()),
            ("backup", Some("ops"))
        );
        let f = p.function("snapshot").unwrap();
        assert_eq!(f.inputs(), ["volume", "label"]);
        assert_eq!(f.timeout, Duration::from_secs(300));
        assert_eq!(f.workdir, PathBuf::from("programs"));
        assert_eq!(f.concurrency, Some(2));
        assert_eq!(f.env["RETENTION"], "7");
        let Step::Command(argv) = &f.steps[0] else {
            panic!("not a command")
        };
        assert_eq!(
            argv[1].0,
            [
                Piece::Lit("--out=".into()),
                Piece::Var(1),
                Piece::Lit("/{x}".into())
            ]
        );
        assert_eq!(argv[2].render(&["v".into(), "l".into()]), "v");
        let all = p.function("all").unwrap();
        assert_eq!(
            (all.timeout, all.workdir.as_path()),
            (Duration::from_secs(90), Path::new("/tmp"))
        );
        assert!(matches!(&all.steps[0], Step::Shell(s) if s == "echo hi"));
        let Step::Call { function, args } = &all.steps[1] else {
            panic!("not a call")
        };
        assert_eq!(
            (function.as_str(), args[1].0.as_slice()),
            ("snapshot", &[Piece::Var(0)][..])
        );
        assert!(!all.webhook.as_ref().unwrap().active);
        assert_eq!(p.triggered().count(), 1);
        let key = &c.api_keys[&[0xab; 32]];
        assert!(key.name == "cron" && key.may_access(p));
        assert_eq!(c.workspaces["ops"].members, ["alice"]);
        assert!(c.users["alice"].password_hash.starts_with("$argon2id"));
        let t = &c.tools["inventory"];
        assert_eq!(
            t.environments["production"].vars["DB_PATH"],
            "/var/lib/inv.db"
        );
        assert_eq!(
            (t.triggers[0].method.as_str(), t.triggers[0].program),
            ("GET", 1)
        );
        let again = run(CONFIG, &[("programs/backup.toml", BACKUP)]).unwrap();
        assert_eq!(c.fingerprint, again.fingerprint);
        let other = run(
            CONFIG,
            &[("programs/backup.toml", &BACKUP.replace("hi", "ho"))],
        )
        .unwrap();
        assert_ne!(c.fingerprint, other.fingerprint);
    }

    #[test]
    fn steps_and_calls() {
        let text = r#"id = 1
name = "p"
[[functions]]
name = "a"
steps = [
  { call = "b", args = ["{x}"] },
  { call = "ghost" },
  { shell = "true", command = ["x"] },
  { },
  { command = [] },
  { shell = "true", args = ["1"] },
]
[[functions]]
name = "b"
steps = [{ call = "a" }, { call = "b" }]
env = { "BAD-NAME" = "1" }
concurrency = 0
[[functions]]
name = "c"
command = ["x"]
steps = [{ shell = "y" }]
[[functions]]
name = "d"
steps = []
timeout = "soon"
[[functions]]
name = "d"
[[functions]]
name = "e f"
command = []
"#;
        expect(&errors("", &[("programs/p.toml", text)]), &[
            "programs/p.toml:6:24: functions[0].steps[0].args: call of \"b\" passes 1 argument(s), but it has 0 input(s) []",
            "programs/p.toml:6:26: functions[0].steps[0].args[0]: placeholder `{x}` names no input of this function; this function has no inputs",
            "programs/p.toml:7:12: functions[0].steps[1].call: calls function \"ghost\", which this program does not define",
            "programs/p.toml:8:3: functions[0].steps[2]: a step needs exactly one of `command`, `shell` or `call`",
            "programs/p.toml:9:3: functions[0].steps[3]: a step needs exactly one",
            "programs/p.toml:10:15: functions[0].steps[4].command: command must not be empty",
            "programs/p.toml:11:28: functions[0].steps[5].args: `args` only goes with `call`",
            "programs/p.toml:15:19: functions[1].steps[0].call: call cycle a -> b -> a;",
            "programs/p.toml:15:35: functions[1].steps[1].call: call cycle b -> b;",
            "programs/p.toml:16:9: functions[1].env.BAD-NAME: environment variable name \"BAD-NAME\" must match",
            "programs/p.toml:17:15: functions[1].concurrency: must be at least 1, got 0",
            "programs/p.toml:21:9: functions[2].steps: give either `command` or `steps`, not both",
            "programs/p.toml:24:9: functions[3].steps: steps must not be empty",
            "programs/p.toml:25:11: functions[3].timeout: invalid duration \"soon\"",
            "programs/p.toml:27:8: functions[4]: a function needs `command` or `steps`",
            "programs/p.toml:27:8: functions[4].name: duplicate function name \"d\" (first at functions[3].name)",
            "programs/p.toml:29:8: functions[5].name: function name \"e f\" must match [A-Za-z0-9_-]+",
            "programs/p.toml:30:11: functions[5].command: command must not be empty",
        ]);
    }

    #[test]
    fn duplicate_webhook() {
        let table = one("command = [\"x\"]\n[functions.webhook]\n[functions.webhook]\n");
        let array = one("command = [\"x\"]\n[[functions.webhook]]\n[[functions.webhook]]\n");
        let single = one("command = [\"{a}\"]\n[[functions.webhook]]\noutputs = [\"a\"]\n");
        let want =
            "programs/a.toml:7:1: functions[0].webhook: a function has at most one webhook trigger";
        assert_eq!(errors("", &[("programs/a.toml", &table)]), [want]);
        assert_eq!(errors("", &[("programs/a.toml", &array)]), [want]);
        let c = run("", &[("programs/a.toml", &single)]).unwrap();
        assert_eq!(c.program(1).unwrap().functions[0].inputs(), ["a"]);
    }

    #[test]
    fn unknown_fields_and_errors_across_files() {
        let typo = one("command = [\"x\"]\ntimout = \"5s\"\n");
        let bad_syntax = "id = 2\nname = \"q\n";
        let steps = one("steps = [{ comand = [\"x\"] }]\n");
        let config = "[server]\nworkers = 0\nlisten = 1\n";
        expect(
            &errors(
                config,
                &[
                    ("programs/c.toml", &steps),
                    ("programs/a.toml", &typo),
                    ("programs/b.toml", bad_syntax),
                ],
            ),
            &[
                "config.toml:3:10: server.listen: invalid type: integer `1`, expected a string",
                "programs/a.toml:6:1: functions[0].timout: unknown field `timout`, expected one of",
                "programs/b.toml:2:10: invalid basic string",
                "programs/c.toml:5:12: functions[0].steps[0].comand: unknown field `comand`",
            ],
        );
        let got = errors("[server]\nworkers = 0\n", &[("programs/a.toml", &typo)]);
        assert_eq!(
            got[0],
            "config.toml:2:11: server.workers: must be at least 1, got 0"
        );
    }

    #[test]
    fn config_references_and_names() {
        let config = r#"[server]
run_timeout = 0
public_url = "ftp://x"
[[api_keys]]
name = "k"
sha256 = "abc"
workspace = "nope"
programs = [1, 7]
[[api_keys]]
name = "k"
sha256 = "ABABABABABABABABABABABABABABABABABABABABABABABABABABABABABABABAB"
[[api_keys]]
name = "k2"
sha256 = "abababababababababababababababababababababababababababababababab"
[[users]]
name = "bob"
password = "hunter2"
[[users]]
name = "bob"
password = "$argon2id$x"
[[workspaces]]
name = "a b"
members = ["bob", "carol"]
[[workspaces]]
name = "a b"
[[tools]]
name = "t"
workspace = "ghost"
[tools.environments."pro d"]
vars = { "1X" = "" }
[[tools.triggers]]
kind = "cron"
name = "go"
method = "HEAD"
program = 9
function = "f"
[[tools.triggers]]
kind = "endpoint"
name = "go"
program = 1
function = "nope"
[[tools]]
name = "t"
workspace = "a b"
"#;
        let prog = "id = 1\nname = \"p\"\nworkspace = \"ghost\"\n[[functions]]\nname = \"f\"\ncommand = [\"x\"]\n";
        expect(&errors(config, &[("programs/a.toml", prog)]), &[
            "config.toml:2:15: server.run_timeout: duration 0 must be a positive number of seconds",
            "config.toml:3:14: server.public_url: public_url must start with http:// or https://",
            "config.toml:6:10: api_keys[0].sha256: sha256 must be 64 hex digits, got 3 characters",
            "config.toml:7:13: api_keys[0].workspace: workspace \"nope\" is not a [[workspaces]] entry",
            "config.toml:10:8: api_keys[1].name: duplicate api key name \"k\" (first at api_keys[0].name)",
            "config.toml:14:10: api_keys[2].sha256: duplicate api key sha256",
            "config.toml:17:12: users[0].password: password must be an argon2 hash",
            "config.toml:19:8: users[1].name: duplicate user \"bob\"",
            "config.toml:22:8: workspaces[0].name: workspace name \"a b\" must match [A-Za-z0-9_-]+",
            "config.toml:23:19: workspaces[0].members[1]: member \"carol\" is not a [[users]] entry",
            "config.toml:25:8: workspaces[1].name: workspace name \"a b\" must match",
            "config.toml:25:8: workspaces[1].name: duplicate workspace \"a b\"",
            "config.toml:28:13: tools[0].workspace: workspace \"ghost\" is not a [[workspaces]] entry",
            "config.toml:29:21: tools[0].environments.pro d: environment name \"pro d\" must match",
            "config.toml:30:10: tools[0].environments.pro d.vars.1X: environment variable name \"1X\" must match",
            "config.toml:32:8: tools[0].triggers[0].kind: unknown trigger kind \"cron\"; the only kind is \"endpoint\"",
            "config.toml:34:10: tools[0].triggers[0].method: unknown method \"HEAD\"; use one of GET, POST, PUT, PATCH, DELETE",
            "config.toml:35:11: tools[0].triggers[0].program: program 9 does not exist",
            "config.toml:39:8: tools[0].triggers[1].name: duplicate trigger name \"go\"",
            "config.toml:41:12: tools[0].triggers[1].function: program 1 (p) has no function \"nope\"",
            "config.toml:43:8: tools[1].name: duplicate tool \"t\"",
            "programs/a.toml:3:13: workspace: workspace \"ghost\" is not a [[workspaces]] entry",
        ]);
    }

    #[test]
    fn duplicate_programs_and_broken_files() {
        let a = one("command = [\"x\"]\n");
        let b = one("command = [\"x\"]\nbogus = 1\n").replace("\"p\"", "\"q\"");
        let c = "id = -1\nname = \"p\"\n[[functions]]\nname = \"f\"\ncommand = [\"x\"]\n";
        let config = "[[api_keys]]\nname = \"k\"\nsha256 = \"abababababababababababababababababababababababababababababababab\"\nprograms = [1, 2]\n";
        expect(&errors(config, &[("programs/b.toml", &b), ("programs/c.toml", c), ("programs/a.toml", &a), ("programs/d.toml", &a)]), &[
            "programs/b.toml:6:1: functions[0].bogus: unknown field `bogus`",
            "programs/c.toml:1:6: id: program id must be a non-negative integer",
            "programs/c.toml:2:8: name: program name \"p\" is used by both programs/a.toml and programs/c.toml",
            "programs/d.toml:1:6: id: program id 1 is used by both programs/a.toml and programs/d.toml",
            "programs/d.toml:2:8: name: program name \"p\" is used by both programs/a.toml and programs/d.toml",
        ]);
        // A file that is not even TOML may hide any id: no dangling-id errors.
        let got = errors(
            config,
            &[("programs/a.toml", &a), ("programs/z.toml", "id = ")],
        );
        assert_eq!(
            got,
            ["programs/z.toml:1:6: invalid TOML syntax (a missing value or quote?)"]
        );
    }

    #[test]
    fn load_reads_the_programs_dir() {
        let dir = std::env::temp_dir().join(format!("trigd-config-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("programs/sub")).unwrap();
        let config = dir.join("config.toml");
        std::fs::write(&config, "[server]\nprograms_dir = \"progs\"\n").unwrap();
        let got = load(&config).unwrap_err();
        assert_eq!(
            (got.len(), got[0].line, got[0].key.as_str()),
            (1, 2, "server.programs_dir")
        );
        assert!(
            got[0].msg.starts_with("cannot read programs directory"),
            "{}",
            got[0]
        );
        std::fs::write(&config, "").unwrap();
        std::fs::write(dir.join("programs/b.toml"), one("command = [\"x\"]\n")).unwrap();
        std::fs::write(dir.join("programs/.a.toml"), "junk").unwrap();
        std::fs::write(dir.join("programs/a.txt"), "junk").unwrap();
        std::fs::write(dir.join("programs/sub/c.toml"), "junk").unwrap();
        let c = load(&config).unwrap();
        assert_eq!(c.programs.len(), 1);
        assert_eq!(
            c.program(1).unwrap().functions[0].workdir,
            dir.join("programs")
        );
        assert_eq!(c.server.state_dir, dir.join("state"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
