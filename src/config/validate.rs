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
use std::ffi::OsStr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use sha2::{Digest, Sha256};
use toml::Spanned;

use super::callbacks::{self, Callbacks};
use super::raw::{self, defaults, RawConfig};
use super::stamp::{self, Source};
use super::types::{
    self, config_dir, count, error, par_map, parse, workspace_ref, Errors, Known, Src,
};
use super::{file, program, server, tools};
use super::{
    resolve, ApiKey, Config, ConfigError, Endpoint, Program, Server, Stamp, User, Workspace,
};
use crate::state::passwords as generated;

/// Load `config.toml` at `path` and every `*.toml` in its programs dir,
/// validate everything, and return the snapshot or every error found.
///
/// # Errors
/// Every problem found, each with file, line, column and key.
pub fn load(path: &Path) -> Result<Config, Vec<ConfigError>> {
    check_apart(read_all(path)?)
}

/// What a server's first load ([`load_first`]) is about to read.
pub enum Before<'a> {
    /// `config.toml`.
    Config,
    /// The programs directory and the hooks files that `config.toml`
    /// names, with its `[server]` settings (only when they have no error:
    /// otherwise the load fails anyway).
    Files(&'a Server),
}

/// Like [`load`], telling `before` what is read next, before it is read:
/// a server watches each directory then, so that an edit made after the
/// read always has an event.
///
/// # Errors
/// As [`load`].
pub fn load_first(path: &Path, before: &mut dyn FnMut(Before)) -> Result<Config, Vec<ConfigError>> {
    before(Before::Config);
    let text = read_config(path)?;
    check_apart(read_programs_of(path, text, None, None, Some(before)))
}

/// A `config.toml` at least this long is checked on a thread of its own.
const CHECK_APART: usize = 64 * 1024;

/// [`check`] `files`; for a long `config.toml`, on a thread of its own.
///
/// While `config.toml` is parsed, its TOML document takes many times the
/// size of the text (7.5 MB for 240 KB of 1,000 tools), and the parsed
/// structs stay until the check ends. Built on the same thread, the config
/// that stays would be scattered among them, and the pages it shares with
/// freed memory stay in RSS (`malloc_trim` gives back only whole free
/// pages). Another thread is served by another malloc arena (glibc), so
/// the config is built there in one piece and what the parse used is freed
/// whole, here.
fn check_apart(files: Files) -> Result<Config, Vec<ConfigError>> {
    if files.text.len() < CHECK_APART {
        return check(files, None);
    }
    let files = std::sync::Mutex::new(Some(files));
    let take = || files.lock().ok().and_then(|mut f| f.take());
    let apart = std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("load".into())
            .spawn_scoped(scope, || take().map(|f| check(f, None)))
            .ok()
            .map(|h| h.join())
    });
    match apart {
        Some(Ok(Some(done))) => done,
        Some(Err(panic)) => std::panic::resume_unwind(panic),
        // No thread: check here.
        _ => match take() {
            Some(f) => check(f, None),
            None => unreachable!("the files were checked or are still here"),
        },
    }
}

/// Like [`load`], but reusing what `current` loaded: a program file whose
/// [`Stamp`] is unchanged is not read again, and when neither `config.toml`
/// nor any program file changed the answer is `Ok(None)` without parsing
/// anything. A reload of one changed file among thousands reads and parses
/// that file only; the rest costs a `stat` per file and the cross-file
/// checks (ids, names, tools).
///
/// With `changed` (the paths a file watcher reported), only those entries
/// of the programs directory are looked at: the directory is not listed
/// and the other files are not `stat`ed, so the rest costs only the
/// cross-file checks. The caller vouches that nothing else in the
/// directory changed since `current` was loaded; a `config.toml` that now
/// names another programs directory still lists it.
///
/// # Errors
/// As [`load`], with the positions a full load gives.
pub fn load_changed(
    path: &Path,
    current: &Config,
    changed: Option<&[PathBuf]>,
) -> Result<Option<Config>, Vec<ConfigError>> {
    let text = read_config(path)?;
    let now = Some((current, changed));
    let mut scanned = None;
    if same_config(&text, current) {
        // The programs directory is the current one: when no program file
        // changed either, nothing needs parsing (not even `config.toml`,
        // whose document takes many times its size while it is parsed).
        if changed.is_none() && programs_unchanged(current) {
            return Ok(None);
        }
        let found = scan(&current.server.programs_dir, now, None);
        let all_reused = |f: &ReadFiles| {
            f.len() == current.programs.len()
                && f.iter().all(|(_, s)| matches!(s, Ok(Source::Loaded(_))))
        };
        if found.as_ref().is_ok_and(all_reused) {
            return Ok(None);
        }
        scanned = Some(found);
    }
    let files = read_programs_of(path, text, now, scanned, None);
    let reused = files
        .programs
        .iter()
        .filter(|(_, s)| matches!(s, Source::Loaded(_)))
        .count();
    match check(files, Some(current)) {
        Ok(cfg) => Ok(Some(cfg)),
        // Errors in or between reused files have no position: say them as
        // a full load does.
        Err(_) if reused > 0 => load(path).map(Some),
        Err(errs) => Err(errs),
    }
}

/// Whether the programs directory holds exactly the program files of
/// `current`, each with its [`Stamp`] unchanged: the directory listed and
/// every file `stat`ed, without keeping anything per file (the check after
/// the first watches, at start-up, runs beside the first requests).
fn programs_unchanged(current: &Config) -> bool {
    let mut stamps: Vec<(&OsStr, Stamp)> = Vec::with_capacity(current.programs.len());
    for p in current.programs.values() {
        match p.stamp.get() {
            Some(stamp) => stamps.push((p.file.as_os_str(), stamp)),
            None => return false,
        }
    }
    stamps.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let dir = &current.server.programs_dir;
    let (Ok(entries), Ok(dir_fd)) = (std::fs::read_dir(dir), std::fs::File::open(dir)) else {
        return false;
    };
    let mut seen = 0;
    for entry in entries {
        let Ok(entry) = entry else { return false };
        let path = entry.path();
        if !is_program_file(&path) {
            continue;
        }
        let Ok(i) = stamps.binary_search_by(|(f, _)| (*f).cmp(path.as_os_str())) else {
            return false;
        };
        // By the directory's descriptor: one path component walked.
        match crate::sys::stat_in(&dir_fd, &entry.file_name()) {
            Ok(st) if st.is_file && Stamp::of_entry(&st) == stamps[i].1 => seen += 1,
            _ => return false,
        }
    }
    seen == stamps.len()
}

/// Everything [`load`] reads, with the read errors so far.
struct Files {
    path: PathBuf,
    text: String,
    raw: Option<RawConfig>,
    /// What `config.toml` says that the program files are checked
    /// against, when it was worked out before reading them.
    context: Option<Context>,
    programs: Vec<(PathBuf, Source)>,
    /// The hooks files (`hooks_files`), in their order.
    hooks: Vec<(PathBuf, String)>,
    errs: Errors,
    complete: bool,
}

/// What a reload knows: the current snapshot, and the program files that
/// may have changed since it was loaded (`None`: any of them).
type Current<'a> = Option<(&'a Config, Option<&'a [PathBuf]>)>;

/// Read `config.toml` and the program files it points at.
fn read_all(path: &Path) -> Result<Files, Vec<ConfigError>> {
    Ok(read_programs_of(path, read_config(path)?, None, None, None))
}

/// The text of `config.toml`.
fn read_config(path: &Path) -> Result<String, Vec<ConfigError>> {
    file::read_text(path).map_err(|e| {
        let hint = missing_config_hint(path, &e);
        vec![error(
            path,
            "",
            format!("cannot read {}: {e}{hint}", path.display()),
        )]
    })
}

/// Whether `text` (of `config.toml`) and the hooks files are what
/// `current` was loaded from.
fn same_config(text: &str, current: &Config) -> bool {
    let hooks: std::io::Result<Vec<(PathBuf, String)>> = current
        .server
        .hooks
        .files
        .iter()
        .map(|f| Ok((f.clone(), file::read_text(f)?)))
        .collect();
    hooks.is_ok_and(|h| fingerprint(text, &h) == current.fingerprint)
}

/// The program files in `dir` (see [`read_programs`] and [`read_listed`]).
fn scan(dir: &Path, current: Current, context: Option<&Context>) -> std::io::Result<ReadFiles> {
    match current {
        Some((cur, Some(changed))) if cur.server.programs_dir == dir => {
            Ok(read_listed(dir, cur, changed))
        }
        _ => read_programs(dir, current.map(|c| c.0), context),
    }
}

/// Like [`load`], with `text` standing for the content of `path` (the
/// program files are read from disk): checks an edit before it is written.
///
/// # Errors
/// As [`load`].
pub fn load_text(path: &Path, text: String) -> Result<Config, Vec<ConfigError>> {
    check(read_programs_of(path, text, None, None, None), None)
}

/// `config.toml` parsed, and the program files that `text`, the content of
/// `path`, points at (`scanned`: already found in the programs directory
/// `current` names, which `text` names too; `before`: see [`load_first`]).
fn read_programs_of(
    path: &Path,
    text: String,
    current: Current,
    scanned: Option<std::io::Result<ReadFiles>>,
    before: Option<&mut dyn FnMut(Before)>,
) -> Files {
    let mut errs = Errors::default();
    let src = Src {
        file: path,
        text: &text,
    };
    let raw = parse::<RawConfig>(&src, &mut errs);
    let dir_value = raw.as_ref().and_then(|r| r.server.programs_dir.as_ref());
    let rel = dir_value.map_or(defaults::PROGRAMS_DIR, |d| d.get_ref());
    let dir = resolve(&config_dir(path), Path::new(rel));
    let mut complete = true;
    // With no current snapshot every file is read and checked: each by
    // the thread that reads it, against what `config.toml` says.
    let context = current
        .is_none()
        .then(|| context(&src, raw.as_ref(), &config_dir(path)));
    if let (Some(before), Some(c)) = (before, &context) {
        if c.known && c.errs.0.is_empty() {
            before(Before::Files(&c.server));
        }
    }
    let programs = scanned.unwrap_or_else(|| scan(&dir, current, context.as_ref()));
    let programs = programs.unwrap_or_else(|e| {
        let msg = format!("cannot read programs directory {}: {e}", dir.display());
        match dir_value {
            Some(v) => errs.at(&src, v.span(), "server.programs_dir", msg),
            None => errs.0.push(error(path, "server.programs_dir", msg)),
        }
        complete = false;
        Vec::new()
    });
    let programs = programs
        .into_iter()
        .filter_map(|(file, source)| match source {
            Ok(source) => Some((file, source)),
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
    let hooks = match &raw {
        Some(raw) => read_hooks(&src, &raw.server, &mut errs),
        None => Vec::new(),
    };
    Files {
        path: path.to_path_buf(),
        text,
        raw,
        context,
        programs,
        hooks,
        errs,
        complete,
    }
}

/// The hooks files `hooks_files` names, read (an unreadable one is an
/// error: a config whose hooks cannot be read is not served), together at
/// most [`file::MAX_FILE_BYTES`] (the same file named again and again
/// must not multiply it).
fn read_hooks(src: &Src, raw: &raw::RawServer, errs: &mut Errors) -> Vec<(PathBuf, String)> {
    let dir = config_dir(src.file);
    let mut out = Vec::new();
    let mut total = 0;
    for (i, f) in raw.hooks_files.iter().enumerate() {
        let key = format!("server.hooks_files[{i}]");
        let file = resolve(&dir, Path::new(f.get_ref()));
        match file::read_text(&file) {
            Ok(text) if total + text.len() as u64 > file::MAX_FILE_BYTES => {
                let msg = format!(
                    "cannot read hooks file {}: the hooks files are together larger than {} MiB",
                    file.display(),
                    file::MAX_FILE_BYTES >> 20
                );
                errs.at(src, f.span(), key, msg);
                break;
            }
            Ok(text) => {
                total += text.len() as u64;
                out.push((file, text));
            }
            Err(e) => {
                let msg = format!("cannot read hooks file {}: {e}", file.display());
                errs.at(src, f.span(), key, msg);
            }
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

/// Like `load`, from text: `config_text` is the content of `path`, and
/// `programs` are `(file path, content)` of the program files, in any order.
/// Used by unit tests so that validation never touches the disk.
///
/// # Errors
/// Every problem found, each with file, line, column and key.
pub fn load_str(
    path: &Path,
    config_text: &str,
    programs: &[(PathBuf, String)],
) -> Result<Config, Vec<ConfigError>> {
    let mut errs = Errors::default();
    let src = Src {
        file: path,
        text: config_text,
    };
    let raw = parse::<RawConfig>(&src, &mut errs);
    let mut programs: Vec<(PathBuf, Source)> = programs
        .iter()
        .map(|(p, t)| {
            let (text, stamp) = (t.clone(), None);
            (p.clone(), Source::Text { text, stamp })
        })
        .collect();
    programs.sort_by(|a, b| a.0.cmp(&b.0));
    let files = Files {
        path: path.to_path_buf(),
        text: config_text.to_string(),
        raw,
        context: None,
        programs,
        hooks: Vec::new(),
        errs,
        complete: true,
    };
    check(files, None)
}

/// Program files in `dir`: every `*.toml` directly inside whose name does not
/// start with `.`, sorted by name, each as read or taken from `current`.
type ReadFiles = Vec<(PathBuf, std::io::Result<Source>)>;

fn read_programs(
    dir: &Path,
    current: Option<&Config>,
    context: Option<&Context>,
) -> std::io::Result<ReadFiles> {
    // Keyed by the bytes: hashing a `Path` splits it into components.
    let loaded: HashMap<&OsStr, &Arc<Program>> = current
        .iter()
        .flat_map(|c| c.programs.values())
        .map(|p| (p.file.as_os_str(), p))
        .collect();
    // Each file opened by its name in the directory: one path component
    // walked by the kernel instead of the whole path (by path without it).
    let dir_fd = std::fs::File::open(dir).ok();
    let started = SystemTime::now();
    let wss = context.and_then(Context::workspaces);
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if is_program_file(&path) {
            names.push(path);
        }
    }
    // One directory: comparing the bytes orders as `Path` does, without
    // splitting every path into components. Read in this order, the
    // programs lie in memory in the order a reload walks them (handing
    // the listing to the readers as it came, in the directory's order,
    // made no start faster and a reload among 10,000 files 5 ms slower).
    names.sort_unstable_by(|a, b| a.as_os_str().cmp(b.as_os_str()));
    let read = par_map(&names, |p| {
        let loaded = loaded.get(p.as_os_str()).copied();
        let source = match read_source(p, dir_fd.as_ref(), loaded, started)? {
            Ok(Source::Text { text, stamp }) if context.is_some() => {
                // The text is freed here, on the thread that read it.
                let checked = program::check_one(p, &text, stamp, &context?.server, wss);
                Ok(Source::Checked(Box::new(checked)))
            }
            other => other,
        };
        Some((p.clone(), source))
    });
    Ok(read.into_iter().flatten().collect())
}

/// Whether `path` names a program file: `*.toml`, not starting with `.`.
fn is_program_file(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or(".");
    !name.starts_with('.') && name.ends_with(".toml")
}

/// What [`read_programs`] would find in `dir` when only the entries at
/// `changed` differ from what `current` loaded: `current`'s program files,
/// each reused without a system call, and those at `changed` (with any
/// that had no trusted stamp) looked at again — new, changed or gone.
fn read_listed(dir: &Path, current: &Config, changed: &[PathBuf]) -> ReadFiles {
    // (file, its program in `current`, whether to look at it again)
    let mut files: Vec<(PathBuf, Option<&Arc<Program>>, bool)> = current
        .programs
        .values()
        .map(|p| (p.file.clone(), Some(p), p.stamp.get().is_none()))
        .collect();
    files.sort_unstable_by(|a, b| a.0.as_os_str().cmp(b.0.as_os_str()));
    // A file written is named by several events (create, write, close).
    let mut look: Vec<&PathBuf> = changed
        .iter()
        .filter(|p| p.parent() == Some(dir) && is_program_file(p))
        .collect();
    look.sort_unstable_by(|a, b| a.as_os_str().cmp(b.as_os_str()));
    look.dedup();
    let known = files.len();
    for path in look {
        match files[..known].binary_search_by(|f| f.0.as_os_str().cmp(path.as_os_str())) {
            Ok(i) => files[i].2 = true,
            Err(_) => files.push((path.clone(), None, true)),
        }
    }
    // Stable and nearly sorted: the new files at the end are merged in.
    files.sort_by(|a, b| a.0.as_os_str().cmp(b.0.as_os_str()));
    let started = SystemTime::now();
    let mut out = Vec::with_capacity(files.len());
    out.extend(
        files
            .into_iter()
            .filter_map(|(file, loaded, again)| match (loaded, again) {
                (Some(p), false) => Some((file, Ok(Source::Loaded(Arc::clone(p))))),
                _ => {
                    let source = read_source(&file, None, loaded, started)?;
                    Some((file, source))
                }
            }),
    );
    out
}

/// One program file: `loaded` when its stamp is unchanged or its text is
/// the same, else its text. `None` when it is not a regular file (or is gone).
/// With `dir`, an open descriptor of the directory holding `path`, the file
/// is opened by its name in it.
fn read_source(
    path: &Path,
    dir: Option<&std::fs::File>,
    loaded: Option<&Arc<Program>>,
    started: SystemTime,
) -> Option<std::io::Result<Source>> {
    if let Some(p) = loaded {
        match std::fs::metadata(path) {
            Ok(m) if m.is_file() && Some(Stamp::now(&m)) == p.stamp.get() => {
                return Some(Ok(Source::Loaded(Arc::clone(p))));
            }
            Ok(m) if !m.is_file() => return Some(Err(not_regular())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return dangling(path),
            _ => {}
        }
    }
    // O_NONBLOCK: a FIFO named `x.toml` must not block the open.
    let file = match (dir, path.file_name()) {
        (Some(dir), Some(name)) => crate::sys::open_in(dir, name),
        _ => std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path),
    };
    let mut file = match file {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return dangling(path),
        Err(e) => return Some(Err(e)),
    };
    let meta = match file.metadata() {
        Ok(m) if !m.is_file() => return Some(Err(not_regular())),
        Ok(m) => m,
        Err(e) => return Some(Err(e)),
    };
    let stamp = Stamp::of(&meta, started);
    Some(
        file::read_to_end(&mut file, meta.len()).map(|text| match loaded {
            Some(p) if p.digest == stamp::digest(&text) => {
                p.stamp.set(stamp);
                Source::Loaded(Arc::clone(p))
            }
            _ => Source::Text { text, stamp },
        }),
    )
}

/// A listed `*.toml` that is not a regular file (a directory, a FIFO, a
/// device): an error of its own, not silently no program.
fn not_regular() -> std::io::Error {
    std::io::Error::other(
        "not a regular file (every *.toml in the programs directory is a program)",
    )
}

/// A listed `*.toml` that cannot be opened as not found: gone since the
/// listing (an editor's rename: no file, no error), or a symlink to a
/// file that does not exist (an error: the program it stood for would
/// vanish without a word).
fn dangling(path: &Path) -> Option<std::io::Result<Source>> {
    let link = std::fs::symlink_metadata(path).ok()?;
    let target = std::fs::read_link(path).unwrap_or_default();
    link.file_type().is_symlink().then(|| {
        Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("a symlink to {}, which does not exist", target.display()),
        ))
    })
}

/// The shared core of [`load`] and [`load_str`]; with `current`, reused
/// programs stay only when what every program depends on in `config.toml`
/// (the programs dir, `run_timeout`, the workspaces, the callback allow
/// lists) is unchanged.
fn check(files: Files, current: Option<&Config>) -> Result<Config, Vec<ConfigError>> {
    let Files {
        path,
        text,
        raw,
        context: worked_out,
        mut programs,
        hooks: hook_files,
        mut errs,
        complete,
    } = files;
    let path = path.as_path();
    let dir = config_dir(path);
    let src = Src {
        file: path,
        text: &text,
    };
    let workspaces_known = raw.is_some();
    let Context {
        server,
        users,
        workspaces,
        errs: context_errs,
        ..
    } = worked_out.unwrap_or_else(|| context(&src, raw.as_ref(), &dir));
    errs.0.extend(context_errs.0);
    let raw = raw.unwrap_or_default();
    let same_context = current.is_some_and(|c| {
        workspaces_known
            && c.server.programs_dir == server.programs_dir
            && c.server.run_timeout == server.run_timeout
            && c.workspaces.keys().eq(workspaces.keys())
            && c.server.callbacks.checks_like(&server.callbacks)
    });
    if !same_context {
        reread(&mut programs, &mut errs);
    }
    let sorted: Vec<&(PathBuf, Source)> = programs.iter().collect();
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
        false => crate::compat::webhook::compile::load(
            &hook_files,
            &server.hooks.url_prefix,
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
    Ok(Config {
        path: path.to_path_buf(),
        server,
        programs: progs,
        api_keys,
        users,
        workspaces,
        tools,
        hooks,
        run_endpoint: Endpoint::run_endpoint(),
        fingerprint: fingerprint(&text, &hook_files),
    })
}

/// What the program files are checked against, from `config.toml` alone:
/// the `[server]` settings (with `[callbacks]`), the users and the
/// workspaces, with the errors found in them. `raw`: `None` when
/// `config.toml` does not parse (every setting takes its default, and no
/// workspace is known).
struct Context {
    server: Server,
    users: BTreeMap<String, User>,
    workspaces: BTreeMap<String, Workspace>,
    /// Whether `config.toml` parsed, so that its workspaces are known.
    known: bool,
    errs: Errors,
}

impl Context {
    /// The workspaces a program may name, when they are known.
    fn workspaces(&self) -> Option<&BTreeMap<String, Workspace>> {
        self.known.then_some(&self.workspaces)
    }
}

/// Work out the [`Context`] of `config.toml` (`src`, parsed into `raw`).
fn context(src: &Src, raw: Option<&RawConfig>, dir: &Path) -> Context {
    let mut errs = Errors::default();
    let default = RawConfig::default();
    let r = raw.unwrap_or(&default);
    let mut server = server::server(src, &r.server, dir, &mut errs);
    let mut cb = callbacks::callbacks(src, &r.callbacks, dir, &mut errs);
    cb.public_url.clone_from(&server.public_url);
    server.callbacks = Arc::new(cb);
    server.acme = super::acme::acme(src, r.acme.as_ref(), dir, &mut errs).map(Arc::new);
    super::tls::check_https(src, &r.server, r.acme.as_ref(), &mut errs);
    server.state_db = super::state_db::state_db(src, &r.state, dir, &mut errs).map(Arc::new);
    let users = users(src, r, &server.state_dir, &mut errs);
    let workspaces = workspaces(src, r, &users, &mut errs);
    Context {
        server,
        users,
        workspaces,
        known: raw.is_some(),
        errs,
    }
}

/// Read again every program file that was taken from the current snapshot.
fn reread(programs: &mut Vec<(PathBuf, Source)>, errs: &mut Errors) {
    let started = SystemTime::now();
    programs.retain_mut(|(file, source)| {
        if !matches!(source, Source::Loaded(_)) {
            return true;
        }
        match read_source(file, None, None, started) {
            Some(Ok(s)) => {
                *source = s;
                true
            }
            Some(Err(e)) => {
                let msg = format!("cannot read {}: {e}", file.display());
                errs.0.push(error(file, "", msg));
                false
            }
            None => false,
        }
    });
}

/// sha256 over `config.toml`'s text and the name and content of every
/// hooks file (program files are told apart by their [`Stamp`]s).
fn fingerprint(text: &str, hooks: &[(PathBuf, String)]) -> [u8; 32] {
    let mut h = Sha256::new();
    let files = std::iter::once(("", text)).chain(
        hooks
            .iter()
            .map(|(p, t)| (p.to_str().unwrap_or(""), t.as_str())),
    );
    for (name, content) in files {
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
