//! Hot reload: watch the config, rebuild everything, swap it in whole.
//!
//! We watch **directories**, never single files: the directory holding
//! `config.toml`, the programs directory, those of the hooks files and
//! those of the secret files (a rotated secret is applied without SIGHUP;
//! an event there matters only when it names a secret file or a `..data`
//! link). An inotify watch on a file
//! follows the inode, so an editor that saves by writing a new file and
//! renaming it over the old one (vim, `sed -i`), or a `git pull` that deletes
//! and recreates files, leaves a file watch on a dead inode — the failure
//! behind adnanh/webhook #171 and #499. A directory watch sees every create,
//! rename and delete inside it, and a Kubernetes ConfigMap's `..data` symlink
//! swap is a rename in the config directory. After each reload a directory
//! that now resolves to another inode (a swapped symlink, or a directory
//! deleted and made again) is watched anew; one that did not move keeps its
//! watch, since re-adding it would open a gap in which events are lost.
//!
//! No edit may fall between reading the files and watching them: at start
//! each directory is watched before its files are read ([`Watch`]), so an
//! edit made after a read has an event and the files need no second look;
//! after any new watch at a reload the files are checked once more.
//!
//! The notify callback notes the paths it was told about ([`Changes`]),
//! counts the change ([`Applied`]: a call that arrives while a change the
//! watcher has seen is still to be reloaded waits for that reload, at most
//! [`crate::http::app::WAIT_APPLIED`], so that a caller who writes a
//! program file and then calls it gets the program, not a `404` from the
//! configuration before the write) and wakes the reload thread. That
//! thread waits for a quiet moment (debounce), then loads and validates
//! **everything**, reading again only the files that changed
//! (`config::load_changed`): when the events named
//! only program files (and `config.toml` or a hooks file, which are read
//! at every reload anyway), only those program files are looked at — the
//! programs directory is not listed and the other files are not `stat`ed,
//! so a reload costs in proportion to the change. When the events cannot
//! vouch for that — an overflow of the event queue, a watcher error, a
//! directory renamed or replaced, a `..data` symlink swapped, SIGHUP, a
//! new watch, a reload refused before — the directory is listed and every
//! file `stat`ed (one whose device, inode, size and times are unchanged
//! keeps its parsed program). The new snapshot replaces the old one only
//! when all of it is valid, and only when something changed. On error the
//! last good config keeps serving and the errors go to the log and
//! `/healthz`.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use notify::event::{AccessKind, AccessMode, ModifyKind, RenameMode};
use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};

use crate::config;
use crate::http::app::{App, Applied};

/// How long the files must be quiet before a reload.
/// How long to wait after an event that may leave a file half-written
/// (create, write): an editor's save is a burst of events microseconds
/// apart. Events that end a change (a rename into place, a close after
/// writing) reload at once; a removal waits, as a new file often follows
/// (git). A reload that still catches a
/// half-written file is refused and simply redone at the next event.
const QUIET: Duration = Duration::from_millis(3);
/// A burst of events delays a reload at most this long.
const MAX_DELAY: Duration = Duration::from_millis(100);

/// Time without events after the reload thread's start when start-up is
/// taken to have settled: the code pages are given back then.
const SETTLED: Duration = Duration::from_millis(200);

/// Paths noted for one reload at most; past it (a burst of writes during
/// a long reload) the next reload looks at every file instead, and the
/// list takes no more memory.
const MAX_PATHS: usize = 10_000;

/// Ends the waits of [`Applied`] for good when the reload thread ends (a
/// panic) or cannot start: no reload is coming, so no call may wait for
/// one.
struct NoMoreReloads(Arc<Applied>);

impl Drop for NoMoreReloads {
    fn drop(&mut self) {
        self.0.reloaded(u64::MAX);
    }
}

/// Why the reload thread wakes up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// A relevant file is changing (created, being written, removed).
    Changed,
    /// A relevant file has changed completely: renamed into place or closed
    /// after writing.
    Settled,
    /// SIGHUP: reload even if no event was seen.
    Signal,
}

/// What the watcher reported since the reload thread last looked.
#[derive(Debug, Default)]
struct Changes {
    /// The paths named by events that can change the config.
    paths: Vec<PathBuf>,
    /// An event named no path (a queue overflow, a watcher error), or a
    /// change may have been missed (a new watch): look at every file.
    everything: bool,
}

/// [`Changes`] as the watcher's callback and the reload thread share them.
type SharedChanges = Arc<Mutex<Changes>>;

/// The names of the secret files the config reads, as the watcher's
/// callback and the reload thread share them: an event naming one is
/// relevant in any watched directory.
type SecretNames = Arc<Mutex<Vec<OsString>>>;

/// Note that every file must be looked at.
fn note_everything(changes: &SharedChanges) {
    changes
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .everything = true;
}

/// The file watcher of a server, set up before its first load reads
/// anything: the directory of `config.toml` is watched before it is read
/// ([`Watch::new`]), the programs directory and those of the hooks files
/// before they are listed and read ([`Watch::add`]). An edit made after a
/// file was read then always has an event, so the files need no second
/// look once the server runs. What the events of the load report is
/// reloaded once [`start`] runs.
pub struct Watch {
    state: WatchState,
    tx: Sender<Trigger>,
    rx: Receiver<Trigger>,
    changes: SharedChanges,
    applied: Arc<Applied>,
    /// The name of the programs directory, once `config.toml` says it.
    programs_name: Arc<OnceLock<OsString>>,
}

impl Watch {
    /// Watch the directory of `config_path`.
    pub fn new(config_path: &Path) -> Watch {
        let (tx, rx) = mpsc::channel();
        let changes = SharedChanges::default();
        let applied = Arc::<Applied>::default();
        let programs_name = Arc::default();
        let mut state = WatchState::new(
            config_path,
            Arc::clone(&programs_name),
            tx.clone(),
            (Arc::clone(&changes), Arc::clone(&applied)),
        );
        state.watch(&[watched_config_dir(config_path).to_path_buf()]);
        Watch {
            state,
            tx,
            rx,
            changes,
            applied,
            programs_name,
        }
    }

    /// Watch the directories `server` names as well: the programs
    /// directory and those of the hooks files.
    pub fn add(&mut self, config_path: &Path, server: &config::Server) {
        if let Some(name) = server.programs_dir.file_name() {
            let _ = self.programs_name.set(name.to_os_string());
        }
        self.state.watch(&dirs_for(config_path, server));
    }
}

/// Start the reload thread; returns the sender that SIGHUP uses. `watch`:
/// the watcher set up before the configuration was loaded; without it
/// (or when a watched directory now resolves to another one) the files
/// are looked at once more, as an edit since the load has no event. If
/// watching fails (no inotify), reload still works by SIGHUP.
pub fn start(app: Arc<App>, config_path: PathBuf, watch: Option<Watch>) -> Sender<Trigger> {
    let fresh = watch.is_none();
    let Watch {
        state: mut watch_state,
        tx,
        rx,
        changes,
        applied,
        programs_name,
    } = watch.unwrap_or_else(|| Watch::new(&config_path));
    if let Some(name) = app.config().server.programs_dir.file_name() {
        let _ = programs_name.set(name.to_os_string());
    }
    let missed = watch_state.watch_config(&config_path, &app.config());
    if fresh || missed == Missed::Everything {
        note_everything(&changes);
    }
    if fresh || missed != Missed::Nothing {
        let _ = tx.send(Trigger::Changed);
    }
    let again = tx.clone();
    let ended = NoMoreReloads(Arc::clone(&applied));
    let _ = app.applied.set(Arc::clone(&applied));
    let spawned = thread::Builder::new().name("reload".into()).spawn(move || {
        let _ended = ended;
        // What the first load freed: given back here, off the path of the
        // first requests (`malloc_trim` of the heap of thousands of
        // program files takes milliseconds).
        crate::sys::trim_heap();
        let reloader = Reloader {
            app: &app,
            config_path: &config_path,
            changes,
            applied,
        };
        reloader.run(&rx, &again, watch_state);
    });
    if let Err(e) = spawned {
        log::error!("cannot start the reload thread: {e}; hot reload is off");
    }
    tx
}

/// The watcher and the directories it watches now, each with the
/// (device, inode) it resolved to when the watch was added.
struct WatchState {
    watcher: Option<RecommendedWatcher>,
    watched: Vec<(PathBuf, Option<(u64, u64)>)>,
    secret_names: SecretNames,
}

/// What a change of watches may have let pass unseen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Missed {
    /// Nothing: no watch was added.
    Nothing,
    /// A change to a secret file: only the directory of one was added.
    Secrets,
    /// Any change: a directory of config, programs or hooks was added.
    Everything,
}

impl WatchState {
    fn new(
        config_path: &Path,
        programs_name: Arc<OnceLock<OsString>>,
        tx: Sender<Trigger>,
        (changes, applied): (SharedChanges, Arc<Applied>),
    ) -> WatchState {
        let config_name = config_path.file_name().map(|n| n.to_os_string());
        let secret_names = SecretNames::default();
        let secrets = Arc::clone(&secret_names);
        let handler = move |res: notify::Result<Event>| match res {
            Ok(ev) => {
                let names = [
                    config_name.as_deref(),
                    programs_name.get().map(|n| n.as_os_str()),
                ];
                let secrets = secrets.lock().unwrap_or_else(PoisonError::into_inner);
                let is_secret = |p: &Path| {
                    p.file_name()
                        .is_some_and(|n| secrets.iter().any(|s| s == n))
                };
                if note(&changes, &applied, &ev, |p| {
                    relevant(p, names) || is_secret(p)
                }) {
                    let _ = tx.send(trigger_of(&ev.kind));
                }
            }
            Err(e) => {
                log::warn!("file watcher: {e}; reloading to be safe");
                note_everything(&changes);
                let _ = tx.send(Trigger::Changed);
            }
        };
        let watcher = notify::recommended_watcher(handler)
            .map_err(|e| log::error!("cannot watch config files ({e}); reload with SIGHUP"))
            .ok();
        WatchState {
            watcher,
            watched: Vec::new(),
            secret_names,
        }
    }

    /// Watch the directories `cfg` needs: those of [`dirs_for`], and the
    /// directory of each secret file (wherever it is: a rotation, by
    /// rename or in place, is then an event naming the file, and a
    /// Kubernetes Secret's `..data` swap one naming `..data`). Returns
    /// what the new watches may have let pass unseen.
    fn watch_config(&mut self, config_path: &Path, cfg: &config::Config) -> Missed {
        let files = secret_files(cfg);
        let names = files
            .iter()
            .filter_map(|f| f.file_name())
            .map(OsStr::to_os_string);
        *self
            .secret_names
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = names.collect();
        let main = dirs_for(config_path, &cfg.server);
        let mut all = main.clone();
        for dir in files.iter().filter_map(|f| f.parent()) {
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            };
            if dir.is_dir() && !all.iter().any(|d| d == dir) {
                all.push(dir.to_path_buf());
            }
        }
        let added = self.watch(&all);
        if added.iter().any(|d| main.contains(d)) {
            Missed::Everything
        } else if added.is_empty() {
            Missed::Nothing
        } else {
            Missed::Secrets
        }
    }

    /// Watch exactly `dirs`. A directory that still resolves to the same
    /// inode keeps its watch; one that moved (a swapped symlink) or is new
    /// is watched anew. Returns the directories whose watch was added:
    /// changes made before it existed were not seen, so the caller checks
    /// once more.
    fn watch(&mut self, dirs: &[PathBuf]) -> Vec<PathBuf> {
        let Some(w) = self.watcher.as_mut() else {
            return Vec::new();
        };
        let wanted: Vec<_> = dirs.iter().map(|d| (d.clone(), identity(d))).collect();
        for old in self.watched.iter().filter(|old| !wanted.contains(old)) {
            let _ = w.unwatch(&old.0);
        }
        let mut added = Vec::new();
        let mut now = Vec::with_capacity(wanted.len());
        for entry in wanted {
            if self.watched.contains(&entry) {
                now.push(entry);
                continue;
            }
            match w.watch(&entry.0, RecursiveMode::NonRecursive) {
                Ok(()) => {
                    added.push(entry.0.clone());
                    now.push(entry);
                }
                Err(e) => log::warn!("cannot watch {}: {e}", entry.0.display()),
            }
        }
        self.watched = now;
        added
    }
}

/// Note what `ev` changed; returns whether it can change the config.
fn note(
    changes: &SharedChanges,
    applied: &Applied,
    ev: &Event,
    relevant: impl Fn(&Path) -> bool,
) -> bool {
    let everything = ev.paths.is_empty() || ev.need_rescan();
    let mut paths = ev.paths.iter().filter(|p| relevant(p)).peekable();
    if !everything && paths.peek().is_none() {
        return false;
    }
    let mut changes = changes.lock().unwrap_or_else(PoisonError::into_inner);
    applied.note();
    changes.everything |= everything;
    if !changes.everything {
        changes.paths.extend(paths.cloned());
    }
    if changes.paths.len() > MAX_PATHS {
        changes.everything = true;
    }
    if changes.everything {
        changes.paths = Vec::new();
    }
    true
}

/// The (device, inode) `dir` resolves to, following symlinks.
fn identity(dir: &Path) -> Option<(u64, u64)> {
    fs::metadata(dir).ok().map(|m| (m.dev(), m.ino()))
}

/// Whether a change to `path` can change the config: a `.toml` file, one
/// of `names` (the config file, the programs directory), or a `..data`-style
/// symlink of a ConfigMap. Editor swap and backup files (`.x.swp`, `x~`,
/// `x.tmp`, vim's `4913`) and anything else (a log file kept beside the
/// config) are not.
fn relevant(path: &Path, names: [Option<&OsStr>; 2]) -> bool {
    let Some(name) = path.file_name() else {
        return true;
    };
    if names.iter().flatten().any(|n| *n == name) {
        return true;
    }
    let name = name.to_string_lossy();
    if name.starts_with("..") {
        return true;
    }
    !name.starts_with('.')
        && (name.ends_with(".toml")
            || crate::compat::webhook::file::is_hooks_name(Path::new(name.as_ref())))
}

/// The directory of `config_path` as watched (events name paths in it).
fn watched_config_dir(config_path: &Path) -> &Path {
    config_path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Directories to watch for `server`: the config file's, the programs dir
/// and those of the hooks files.
fn dirs_for(config_path: &Path, server: &config::Server) -> Vec<PathBuf> {
    let mut dirs = vec![watched_config_dir(config_path).to_path_buf()];
    if server.programs_dir.is_dir() {
        dirs.push(server.programs_dir.clone());
    }
    for dir in server.hooks.files.iter().filter_map(|f| f.parent()) {
        if dir.is_dir() && !dirs.iter().any(|d| d == dir) {
            dirs.push(dir.to_path_buf());
        }
    }
    dirs
}

/// The reload thread's view: the server, its config file and what the
/// watcher reported.
struct Reloader<'a> {
    app: &'a App,
    config_path: &'a Path,
    changes: SharedChanges,
    applied: Arc<Applied>,
}

impl Reloader<'_> {
    /// Reload after each burst of events, then update the watches; `again`
    /// asks for one more check after a new watch.
    fn run(&self, rx: &Receiver<Trigger>, again: &Sender<Trigger>, mut ws: WatchState) {
        // Code pages are given back once start-up has settled (no event
        // for [`SETTLED`]): the server's other threads fault in code as
        // they start, and creating the state dir is an event of the
        // watched directory. Not after a reload: the reload and the first
        // request after it then faulted about 80 pages back in (64 KiB
        // each), on the time a caller waits for the new program.
        let mut release_due = true;
        loop {
            let first = if release_due {
                match rx.recv_timeout(SETTLED) {
                    Ok(t) => t,
                    Err(RecvTimeoutError::Timeout) => {
                        crate::sys::release_code_pages();
                        release_due = false;
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            } else {
                match rx.recv() {
                    Ok(t) => t,
                    Err(_) => return,
                }
            };
            let forced = wait_quiet(rx, first);
            // Taken before the files are read: what changes from now on is
            // noted for the next reload, which its event asks for.
            let (changes, upto) = {
                let mut shared = self.changes.lock().unwrap_or_else(PoisonError::into_inner);
                (std::mem::take(&mut *shared), self.applied.count())
            };
            let cfg = self.app.config();
            let only = (!forced && !changes.everything)
                .then(|| program_paths(changes.paths, self.config_path, &cfg.server))
                .flatten();
            drop(cfg);
            reload(self.app, self.config_path, forced, only.as_deref(), upto);
            match ws.watch_config(self.config_path, &self.app.config()) {
                Missed::Nothing => {}
                Missed::Secrets => {
                    let _ = again.send(Trigger::Changed);
                }
                Missed::Everything => {
                    note_everything(&self.changes);
                    let _ = again.send(Trigger::Changed);
                }
            }
        }
    }
}

/// The program files among `paths` (as the programs directory names them)
/// when the others are all files read at every reload anyway
/// (`config.toml`, the hooks files); `None` when some path may stand for
/// more than itself (the programs directory, a `..data` symlink, a file
/// beside `config.toml`) and every file must be looked at.
fn program_paths(
    paths: Vec<PathBuf>,
    config_path: &Path,
    server: &config::Server,
) -> Option<Vec<PathBuf>> {
    // The watcher names paths under the absolute form of what it watches.
    let cwd = std::env::current_dir().ok()?;
    let abs = |p: &Path| cwd.join(p);
    let config_dir = abs(watched_config_dir(config_path));
    let programs_dir = abs(&server.programs_dir);
    if programs_dir == config_dir {
        return None;
    }
    let is_config = |p: &Path| {
        p.parent() == Some(config_dir.as_path()) && p.file_name() == config_path.file_name()
    };
    let mut out = Vec::with_capacity(paths.len());
    for path in paths {
        if is_config(&path) || server.hooks.files.iter().any(|h| abs(h) == path) {
            continue;
        }
        let name = path.file_name()?;
        let lossy = name.to_string_lossy();
        let program = !lossy.starts_with('.') && lossy.ends_with(".toml");
        if path.parent() != Some(programs_dir.as_path()) || !program {
            return None;
        }
        out.push(server.programs_dir.join(name));
    }
    // A file written is named by several events (create, write, close).
    out.sort_unstable();
    out.dedup();
    Some(out)
}

/// Whether an event ends a change ([`Trigger::Settled`]) or may be
/// followed by more of the same change ([`Trigger::Changed`]).
fn trigger_of(kind: &EventKind) -> Trigger {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write))
        | EventKind::Modify(ModifyKind::Name(RenameMode::To | RenameMode::Both)) => {
            Trigger::Settled
        }
        _ => Trigger::Changed,
    }
}

/// Take the events that follow `first` until the change looks complete: at
/// once when the last one settled it (or is SIGHUP), else after [`QUIET`]
/// without events, and never later than [`MAX_DELAY`]. Returns whether any
/// of them was a signal.
fn wait_quiet(rx: &Receiver<Trigger>, first: Trigger) -> bool {
    let until = Instant::now() + MAX_DELAY;
    let (mut last, mut forced) = (first, first == Trigger::Signal);
    loop {
        while let Ok(t) = rx.try_recv() {
            (last, forced) = (t, forced || t == Trigger::Signal);
        }
        let left = until.saturating_duration_since(Instant::now());
        if last != Trigger::Changed || left.is_zero() {
            return forced;
        }
        match rx.recv_timeout(QUIET.min(left)) {
            Ok(t) => (last, forced) = (t, forced || t == Trigger::Signal),
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return forced,
        }
    }
}

/// Whether a secret file (of a signature check, or `[callbacks]`'s) now
/// holds another secret.
fn secret_files_changed(cfg: &config::Config) -> bool {
    cfg.server.callbacks.secret_file_changed()
        || cfg
            .tools
            .values()
            .flat_map(|t| &t.triggers)
            .flat_map(|t| t.receive.verifiers())
            .any(|v| v.secret_file_changed())
}

/// Every secret file `cfg` reads: each signature check's and
/// `[callbacks]`'s.
fn secret_files(cfg: &config::Config) -> Vec<PathBuf> {
    let checks = cfg
        .tools
        .values()
        .flat_map(|t| &t.triggers)
        .flat_map(|t| t.receive.verifiers())
        .filter_map(|v| v.secret_file.clone());
    let mut files: Vec<PathBuf> = checks
        .chain(cfg.server.callbacks.secret_file.clone())
        .collect();
    files.sort_unstable();
    files.dedup();
    files
}

/// Load everything and swap it in if it is valid and changed. With `forced`
/// (SIGHUP) an unchanged config is still reported in the log.
pub fn reload_now(app: &App, config_path: &Path, forced: bool) {
    // Every file is read after this: the changes counted so far are in.
    let upto = app.applied.get().map_or(0, |a| a.count());
    reload(app, config_path, forced, None, upto);
}

/// [`reload_now`]; with `only`, the program files that changed since the
/// current snapshot was loaded (the rest are not looked at), unless the
/// last reload was refused: the files it found wrong are in no snapshot,
/// so every file is looked at again. `upto`: the changes counted
/// ([`Applied`]) when the changes this reload reads were taken; the
/// requests waiting for them go on as soon as the outcome is in place,
/// before the heap is trimmed and the log written.
fn reload(app: &App, config_path: &Path, forced: bool, only: Option<&[PathBuf]>, upto: u64) {
    let took_in = || {
        if let Some(applied) = app.applied.get() {
            applied.reloaded(upto);
        }
    };
    // One reload at a time: the watcher, SIGHUP and the public switch may all
    // reload, and a reload that read the files earlier must not swap in its
    // older snapshot after one that read them later.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    // systemd (Type=notify): reloading until the READY=1 at the end,
    // whether the new files are applied or refused.
    crate::http::systemd::reloading();
    let started = Instant::now();
    let current = app.config();
    // Secret files are not part of the fingerprint: a changed one forces
    // a full load.
    let secrets = secret_files_changed(&current);
    let only = only.filter(|_| !secrets && app.last_reload_error().is_none());
    let looked_at = match only {
        Some([_]) => "the 1 program file the watcher named".into(),
        Some(paths) => format!("the {} program files the watcher named", paths.len()),
        None => "every program file".into(),
    };
    let loaded = if let Some(error) = half_written(config_path, &current.server) {
        Err(vec![error])
    } else if secrets {
        config::load(config_path).map(Some)
    } else {
        config::load_changed(config_path, &current, only)
    };
    match loaded {
        Ok(None) => {
            app.clear_reload_error();
            took_in();
            if only.is_none() {
                // Listing and `stat`ing every file allocated a path each.
                crate::sys::trim_heap();
            }
            if forced {
                log::info!("reload: configuration unchanged");
            }
        }
        Ok(Some(mut new)) => {
            warn_unappliable(&current.server, &new.server);
            keep_start_only(&current.server, &mut new.server);
            let (programs, tools) = (new.programs.len(), new.tools.len());
            app.set_config(new);
            took_in();
            crate::sys::trim_heap();
            log::info!(
                "reloaded: {programs} programs, {tools} tools (generation {}, {:.2} ms; \
                 looked at {looked_at})",
                app.generation(),
                started.elapsed().as_secs_f64() * 1000.0
            );
        }
        Err(errors) => {
            for e in &errors {
                log::error!("reload refused: {e}");
            }
            let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
            app.set_reload_error(text.join("\n"));
            took_in();
            let n = errors.len();
            log::error!(
                "reload refused ({n} error{}); still serving generation {}",
                if n == 1 { "" } else { "s" },
                app.generation()
            );
        }
    }
    crate::http::systemd::ready(app);
}

/// The error for the config file or a hooks file that is empty: what a
/// writer that truncates and then writes leaves between the two. Either
/// would load as valid, with no keys, users and tools or no hooks, and
/// the next event (the write) could come after the reload.
fn half_written(config_path: &Path, server: &config::Server) -> Option<config::ConfigError> {
    let error = |file: &Path, drops: &str| config::ConfigError {
        file: file.to_path_buf(),
        line: 0,
        col: 0,
        key: String::new(),
        msg: format!(
            "the file is empty, or holds only white space, comments or null (a save in \
             progress?): not swapped in for a running server, as it would drop {drops}"
        ),
    };
    if is_empty_file(config_path) {
        return Some(error(config_path, "every key, user and tool"));
    }
    let hooks = server
        .hooks
        .files
        .iter()
        .find(|f| is_empty_file(f) || is_blank_hooks_file(f))?;
    Some(error(
        hooks,
        "the file's hooks (write [] for a file with none)",
    ))
}

/// Whether `path` is an empty file.
fn is_empty_file(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() == 0)
}

/// Whether hooks file `path` holds only white space, comments or `null`
/// (`compat::webhook::file::is_blank`): it would load as no hooks, as an
/// empty one would. One that cannot be read (too big, not a regular
/// file) is left to the load, which says why.
fn is_blank_hooks_file(path: &Path) -> bool {
    super::file::read_text(path).is_ok_and(|t| crate::compat::webhook::file::is_blank(&t))
}

/// Settings read only at start: say so when they change.
fn warn_unappliable(old: &config::Server, new: &config::Server) {
    let changed = fixed_at_start(old, new);
    if !changed.is_empty() {
        log::warn!(
            "{} changed: takes effect at the next restart",
            changed.join(", ")
        );
    }
}

/// The `[server]` settings that differ between `old` and `new` among those
/// read only at start: the listener and the bounds of the HTTP server
/// (`server.rs`), the run store and the shutdown grace. With `instance`
/// and `shared_state_dir` ([`keep_start_only`]), the manual (docs/hot-reload.md) lists the same
/// under "Hot reload".
fn fixed_at_start(old: &config::Server, new: &config::Server) -> Vec<&'static str> {
    [
        ("listen", old.listen != new.listen),
        ("socket_mode", old.socket.mode != new.socket.mode),
        ("socket_user", old.socket.user != new.socket.user),
        ("socket_group", old.socket.group != new.socket.group),
        ("workers", old.workers != new.workers),
        (
            "max_connections",
            old.max_connections != new.max_connections,
        ),
        (
            "request_timeout",
            old.request_timeout != new.request_timeout,
        ),
        (
            "max_header_bytes",
            old.max_header_bytes != new.max_header_bytes,
        ),
        ("max_url_bytes", old.max_url_bytes != new.max_url_bytes),
        ("state_dir", old.state_dir != new.state_dir),
        ("run_retention", old.run_retention != new.run_retention),
        ("shutdown_grace", old.shutdown_grace != new.shutdown_grace),
        (
            "tls_cert, tls_key, tls_handshake_timeout, redirect_http",
            old.tls != new.tls,
        ),
        ("[acme]", old.acme != new.acme),
        ("[state]", state_db_shape(old) != state_db_shape(new)),
        (
            "[callbacks] workers",
            old.callbacks.workers != new.callbacks.workers,
        ),
        // The redirect listener's target is fixed at its start.
        (
            "public_url (for redirect_http)",
            new.tls.redirect_http.is_some() && old.public_url != new.public_url,
        ),
    ]
    .into_iter()
    .filter_map(|(name, changed)| changed.then_some(name))
    .collect()
}

/// `[state]` as far as a change of it shows (its `Debug`, which leaves
/// the password out): the database is chosen at start.
fn state_db_shape(server: &config::Server) -> Option<String> {
    server.state_db.as_ref().map(|s| format!("{s:?}"))
}

/// Keep the settings that name this instance and its shared files as they
/// were at start: run ids already given out must keep their owner. The
/// database of `[state]` stays the one opened at start too (what reads
/// the config must not think it changed).
fn keep_start_only(old: &config::Server, new: &mut config::Server) {
    new.state_db.clone_from(&old.state_db);
    if old.instance != new.instance || old.shared_state_dir != new.shared_state_dir {
        log::warn!("instance and shared_state_dir changes take effect at the next restart");
        new.instance.clone_from(&old.instance);
        new.shared_state_dir.clone_from(&old.shared_state_dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_fixed_at_start_are_named_when_they_change() {
        let cfg = |server: &str| {
            let text = format!("[server]\n{server}\n");
            crate::config::load_str(Path::new("config.toml"), &text, &[])
                .unwrap_or_else(|e| panic!("{e:?}"))
                .server
        };
        let base = cfg("");
        assert!(fixed_at_start(&base, &cfg("max_body_bytes = 10")).is_empty());
        let changed = cfg(
            "max_connections = 3\nrequest_timeout = \"3s\"\nmax_url_bytes = 100\n\
             max_header_bytes = 1000\nshutdown_grace = \"1s\"\nrun_retention = 5",
        );
        assert_eq!(
            fixed_at_start(&base, &changed),
            [
                "max_connections",
                "request_timeout",
                "max_header_bytes",
                "max_url_bytes",
                "run_retention",
                "shutdown_grace"
            ]
        );
        // The redirect listener's target: only while there is one.
        let mut redirecting = base.clone();
        redirecting.tls.redirect_http = Some("127.0.0.1:80".into());
        let mut moved = redirecting.clone();
        moved.public_url = Some("https://example.org".into());
        assert_eq!(
            fixed_at_start(&redirecting, &moved),
            ["public_url (for redirect_http)"]
        );
        let mut plain = base.clone();
        plain.public_url = Some("https://example.org".into());
        assert!(fixed_at_start(&base, &plain).is_empty());
        // Tables read at start only, outside [server].
        let text = "[state]\nurl = \"postgres://u@127.0.0.1:1/db\"\n[callbacks]\nworkers = 3\n";
        let db = crate::config::load_str(Path::new("config.toml"), text, &[])
            .unwrap_or_else(|e| panic!("{e:?}"))
            .server;
        assert_eq!(
            fixed_at_start(&base, &db),
            ["[state]", "[callbacks] workers"]
        );
        let mut kept = db.clone();
        keep_start_only(&base, &mut kept);
        assert!(kept.state_db.is_none(), "the database of the start stays");
    }

    #[test]
    fn event_paths_name_program_files_however_the_config_was_named() {
        let cwd = std::env::current_dir().unwrap();
        let config = Path::new("cfg/config.toml");
        let server = crate::config::load_str(config, "", &[]).unwrap().server;
        let named = |rel: &[&str]| {
            let paths = rel.iter().map(|r| cwd.join(r)).collect();
            program_paths(paths, config, &server)
        };
        let a = PathBuf::from("cfg/programs/a.toml");
        assert_eq!(named(&[]), Some(vec![]));
        assert_eq!(
            named(&[
                "cfg/programs/a.toml",
                "cfg/config.toml",
                "cfg/programs/a.toml"
            ]),
            Some(vec![a.clone()]),
            "as the programs directory names them, once"
        );
        let abs = crate::config::load_str(&cwd.join(config), "", &[])
            .unwrap()
            .server;
        let paths = vec![cwd.join("cfg/programs/a.toml")];
        assert_eq!(
            program_paths(paths.clone(), &cwd.join(config), &abs),
            Some(paths)
        );
        for everything in [
            "cfg/programs",
            "cfg/..data",
            "cfg/other.toml",
            "cfg/programs/sub/a.toml",
            "cfg/programs/hooks.json",
            "elsewhere/a.toml",
        ] {
            assert_eq!(
                named(&["cfg/programs/a.toml", everything]),
                None,
                "{everything}"
            );
        }
    }

    #[test]
    fn editor_files_are_ignored() {
        let c = [
            Some(OsStr::new("config.toml")),
            Some(OsStr::new("programs")),
        ];
        assert!(relevant(Path::new("/x/config.toml"), c));
        assert!(relevant(Path::new("/x/programs/a.toml"), c));
        assert!(relevant(Path::new("/x/..data"), c));
        assert!(relevant(Path::new("/x/programs"), c));
        assert!(!relevant(Path::new("/x/programs/.a.toml.swp"), c));
        assert!(!relevant(Path::new("/x/programs/a.toml~"), c));
        assert!(!relevant(Path::new("/x/programs/a.toml.tmp"), c));
        assert!(!relevant(Path::new("/x/programs/notes.txt"), c));
        assert!(relevant(Path::new("/x/hooks.json"), c));
        assert!(relevant(Path::new("/x/hooks.yaml"), c));
        assert!(!relevant(Path::new("/x/.hooks.json.swp"), c));
        assert!(
            !relevant(Path::new("/x/trigd-stderr"), c),
            "a log beside the config"
        );
        assert!(!relevant(Path::new("/x/4913"), c), "vim's probe file");
    }
}
