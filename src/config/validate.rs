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

use sha2::{Digest, Sha256};
use toml::Spanned;

use super::callbacks::{self, Callbacks};
use super::raw::{self, defaults, RawConfig};
use super::types::{
    self, config_dir, count, error, par_map, parse, workspace_ref, Errors, Known, Src,
};
use super::{generated, program, server, tools};
use super::{resolve, ApiKey, Config, ConfigError, Endpoint, User, Workspace};

/// Load `config.toml` at `path` and every `*.toml` in its programs dir,
/// validate everything, and return the snapshot or every error found.
///
/// # Errors
/// Every problem found, each with file, line, column and key.
pub fn load(path: &Path) -> Result<Config, Vec<ConfigError>> {
    let files = read_all(path)?;
    check(path, &files)
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
        if fingerprint(path, &files.text, &sorted, &files.hooks) == *current {
            return Ok(None);
        }
    }
    check(path, &files).map(Some)
}

/// Everything [`load`] reads, with the read errors so far.
struct Files {
    text: String,
    programs: Vec<(PathBuf, String)>,
    /// The hooks files (`hooks_files`), in their order.
    hooks: Vec<(PathBuf, String)>,
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
    check(path, &files)
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
    let hooks = read_hooks(path, &raw.server, &mut errs);
    Files {
        text,
        programs,
        hooks,
        errs,
        complete,
    }
}

/// The hooks files `hooks_files` names, read (an unreadable one is an
/// error: a config whose hooks cannot be read is not served).
fn read_hooks(path: &Path, raw: &raw::RawServer, errs: &mut Errors) -> Vec<(PathBuf, String)> {
    let dir = config_dir(path);
    let mut out = Vec::new();
    for (i, f) in raw.hooks_files.iter().enumerate() {
        let file = resolve(&dir, Path::new(f.get_ref()));
        match std::fs::read_to_string(&file) {
            Ok(text) => out.push((file, text)),
            Err(e) => errs.0.push(error(
                path,
                &format!("server.hooks_files[{i}]"),
                format!("cannot read hooks file {}: {e}", file.display()),
            )),
        }
    }
    out
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
#[cfg(any(test, fuzzing))] // unit tests and fuzz/
pub fn load_str(
    path: &Path,
    config_text: &str,
    programs: &[(PathBuf, String)],
) -> Result<Config, Vec<ConfigError>> {
    let files = Files {
        text: config_text.to_string(),
        programs: programs.to_vec(),
        hooks: Vec::new(),
        errs: Errors::default(),
        complete: true,
    };
    check(path, &files)
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

/// The shared core of [`load`] and [`load_str`].
fn check(path: &Path, files: &Files) -> Result<Config, Vec<ConfigError>> {
    let (text, programs, complete) = (&files.text, &files.programs, files.complete);
    let mut errs = Errors(files.errs.0.clone());
    let dir = config_dir(path);
    let src = Src { file: path, text };
    let parsed = parse::<RawConfig>(&src, &mut errs);
    let workspaces_known = parsed.is_some();
    let raw = parsed.unwrap_or_default();
    let mut server = server::server(&src, &raw.server, &dir, &mut errs);
    server.callbacks = Arc::new(callbacks::callbacks(&src, &raw.callbacks, &dir, &mut errs));
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
    let cb = &server.callbacks;
    let api_keys = api_keys(&src, &raw, &workspaces, cb, &mut errs);
    let tools = tools::tools(&src, &raw, &workspaces, &known, cb, &dir, &mut errs);
    let hooks = match raw.server.hooks_files.is_empty() {
        true => super::Hooks::default(),
        false => super::hook_compile::load(
            &files.hooks,
            &server.hooks_url_prefix,
            path,
            &server,
            &mut errs,
        ),
    };
    if !errs.0.is_empty() {
        let order = |f: &Path| sorted.iter().position(|p| p.0 == f).map_or(0, |i| i + 1);
        errs.0.sort_by_key(|e| (order(&e.file), e.line, e.col));
        return Err(errs.0);
    }
    let fingerprint = fingerprint(path, text, &sorted, &files.hooks);
    let programs = progs.into_iter().map(|(id, p)| (id, Arc::new(p))).collect();
    Ok(Config {
        path: path.to_path_buf(),
        server,
        programs,
        api_keys,
        users,
        workspaces,
        tools,
        hooks,
        run_endpoint: Endpoint::run_endpoint(),
        fingerprint,
    })
}

/// sha256 over the name and content of every file, config first.
fn fingerprint(
    path: &Path,
    text: &str,
    programs: &[&(PathBuf, String)],
    hooks: &[(PathBuf, String)],
) -> [u8; 32] {
    let mut h = Sha256::new();
    let files = std::iter::once((path, text))
        .chain(programs.iter().map(|(p, t)| (p.as_path(), t.as_str())))
        .chain(hooks.iter().map(|(p, t)| (p.as_path(), t.as_str())));
    for (file, content) in files {
        let name = file.to_string_lossy();
        for part in [name.as_bytes(), content.as_bytes()] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part);
        }
    }
    h.finalize().into()
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
        let generated = u.password.get_ref() == generated::MARKER;
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
                    generated::stored_hash(state_dir, u.name.get_ref()).unwrap_or_default()
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
        out.insert(name, Workspace { members, admins });
    }
    out
}

/// `[[api_keys]]` by hash.
fn api_keys(
    src: &Src,
    raw: &RawConfig,
    wss: &BTreeMap<String, Workspace>,
    cb: &Callbacks,
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
        let request_callbacks = callbacks::permit(
            src,
            cb,
            k.request_callbacks.as_ref(),
            &format!("{key}.request_callbacks"),
            errs,
        );
        if let Ok(hash) = hash {
            out.insert(
                hash,
                ApiKey {
                    name: k.name.get_ref().clone(),
                    workspace,
                    programs,
                    rate_per_minute,
                    request_callbacks,
                },
            );
        }
    }
    out
}

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;
