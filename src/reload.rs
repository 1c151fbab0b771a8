//! Hot reload: watch the config, rebuild everything, swap it in whole.
//!
//! We watch **directories**, never single files: the directory holding
//! `config.toml` and the programs directory. An inotify watch on a file
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
//! No edit may fall between reading the files and watching them: the first
//! watches are in place before `start` returns (so before the server says
//! it is listening), and after any new watch the files are checked once more.
//!
//! The notify callback only sends on a channel. One reload thread waits for
//! a quiet moment (debounce), then loads and validates **everything**,
//! reading again only the files that changed (`config::load_changed`: a
//! program file whose device, inode, size and times are unchanged keeps
//! its parsed program); the new snapshot replaces the old one only when
//! all of it is valid, and only when something changed. On error the last good config keeps
//! serving and the errors go to the log and `/healthz`.

use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use notify::event::{AccessKind, AccessMode, ModifyKind, RenameMode};
use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};

use crate::app::App;
use crate::config;

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

/// Start the watcher and the reload thread; returns the sender that SIGHUP
/// uses. If watching fails (no inotify), reload still works by SIGHUP.
pub fn start(app: Arc<App>, config_path: PathBuf) -> Sender<Trigger> {
    let (tx, rx) = mpsc::channel();
    let programs_name = app
        .config()
        .server
        .programs_dir
        .file_name()
        .map(|n| n.to_os_string());
    let mut watch_state = WatchState::new(&config_path, programs_name, tx.clone());
    if watch_state.watch(&dirs_for(&config_path, &app.config().server)) {
        // An edit made since the first load has no event: look once more.
        let _ = tx.send(Trigger::Changed);
    }
    let again = tx.clone();
    let spawned = thread::Builder::new()
        .name("reload".into())
        .spawn(move || reload_loop(&app, &config_path, &rx, &again, watch_state));
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
}

impl WatchState {
    fn new(config_path: &Path, programs_name: Option<OsString>, tx: Sender<Trigger>) -> WatchState {
        let config_name = config_path.file_name().map(|n| n.to_os_string());
        let names = [config_name, programs_name];
        let handler = move |res: notify::Result<Event>| match res {
            Ok(ev) if ev.paths.is_empty() || ev.paths.iter().any(|p| relevant(p, &names)) => {
                let _ = tx.send(trigger_of(&ev.kind));
            }
            Ok(_) => {}
            Err(e) => {
                log::warn!("file watcher: {e}; reloading to be safe");
                let _ = tx.send(Trigger::Changed);
            }
        };
        let watcher = notify::recommended_watcher(handler)
            .map_err(|e| log::error!("cannot watch config files ({e}); reload with SIGHUP"))
            .ok();
        WatchState {
            watcher,
            watched: Vec::new(),
        }
    }

    /// Watch exactly `dirs`. A directory that still resolves to the same
    /// inode keeps its watch; one that moved (a swapped symlink) or is new
    /// is watched anew. Returns whether a watch was added: changes made
    /// before it existed were not seen, so the caller checks once more.
    fn watch(&mut self, dirs: &[PathBuf]) -> bool {
        let Some(w) = self.watcher.as_mut() else {
            return false;
        };
        let wanted: Vec<_> = dirs.iter().map(|d| (d.clone(), identity(d))).collect();
        for old in self.watched.iter().filter(|old| !wanted.contains(old)) {
            let _ = w.unwatch(&old.0);
        }
        let mut added = false;
        let mut now = Vec::with_capacity(wanted.len());
        for entry in wanted {
            if self.watched.contains(&entry) {
                now.push(entry);
                continue;
            }
            match w.watch(&entry.0, RecursiveMode::NonRecursive) {
                Ok(()) => {
                    added = true;
                    now.push(entry);
                }
                Err(e) => log::warn!("cannot watch {}: {e}", entry.0.display()),
            }
        }
        self.watched = now;
        added
    }
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
fn relevant(path: &Path, names: &[Option<OsString>; 2]) -> bool {
    let Some(name) = path.file_name() else {
        return true;
    };
    if names.iter().flatten().any(|n| n == name) {
        return true;
    }
    let name = name.to_string_lossy();
    if name.starts_with("..") {
        return true;
    }
    !name.starts_with('.')
        && (name.ends_with(".toml") || config::hooks::is_hooks_name(Path::new(name.as_ref())))
}

/// Directories to watch for `server`: the config file's, the programs dir
/// and those of the hooks files.
fn dirs_for(config_path: &Path, server: &config::Server) -> Vec<PathBuf> {
    let config_dir = config_path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut dirs = vec![config_dir.to_path_buf()];
    if server.programs_dir.is_dir() {
        dirs.push(server.programs_dir.clone());
    }
    for dir in server.hooks_files.iter().filter_map(|f| f.parent()) {
        if dir.is_dir() && !dirs.iter().any(|d| d == dir) {
            dirs.push(dir.to_path_buf());
        }
    }
    dirs
}

/// Reload after each burst of events, then update the watches; `again`
/// asks for one more check after a new watch.
fn reload_loop(
    app: &App,
    config_path: &Path,
    rx: &Receiver<Trigger>,
    again: &Sender<Trigger>,
    mut ws: WatchState,
) {
    while let Ok(first) = rx.recv() {
        let forced = wait_quiet(rx, first);
        reload_now(app, config_path, forced);
        if ws.watch(&dirs_for(config_path, &app.config().server)) {
            let _ = again.send(Trigger::Changed);
        }
        // The code a reload ran (the TOML parser, the checks) is not
        // needed until the next one (bench/README.md, "Where the time goes").
        crate::sys::unmap_clean_code();
    }
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

/// Whether a secret file of a signature check now holds another secret.
fn secret_files_changed(cfg: &config::Config) -> bool {
    cfg.tools
        .values()
        .flat_map(|t| &t.triggers)
        .flat_map(|t| t.receive.verifiers())
        .any(|v| v.secret_file_changed())
}

/// Load everything and swap it in if it is valid and changed. With `forced`
/// (SIGHUP) an unchanged config is still reported in the log.
pub fn reload_now(app: &App, config_path: &Path, forced: bool) {
    // One reload at a time: the watcher, SIGHUP and the public switch may all
    // reload, and a reload that read the files earlier must not swap in its
    // older snapshot after one that read them later.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let started = Instant::now();
    let current = app.config();
    // Secret files are not part of the fingerprint: a changed one forces
    // a full load.
    let loaded = if secret_files_changed(&current) {
        config::load(config_path).map(Some)
    } else {
        config::load_changed(config_path, &current)
    };
    match loaded {
        Ok(None) => {
            app.clear_reload_error();
            if forced {
                log::info!("reload: configuration unchanged");
            }
        }
        Ok(Some(mut new)) => {
            warn_unappliable(&current.server, &new.server);
            keep_start_only(&current.server, &mut new.server);
            let (programs, tools) = (new.programs.len(), new.tools.len());
            app.set_config(new);
            crate::sys::trim_heap();
            log::info!(
                "reloaded: {programs} programs, {tools} tools (generation {}, {} ms)",
                app.generation(),
                started.elapsed().as_millis()
            );
        }
        Err(errors) => {
            for e in &errors {
                log::error!("reload refused: {e}");
            }
            let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
            app.set_reload_error(text.join("\n"));
            let n = errors.len();
            log::error!(
                "reload refused ({n} error{}); still serving generation {}",
                if n == 1 { "" } else { "s" },
                app.generation()
            );
        }
    }
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
/// and `shared_state_dir` ([`keep_start_only`]), the README lists the same
/// under "Hot reload".
fn fixed_at_start(old: &config::Server, new: &config::Server) -> Vec<&'static str> {
    [
        ("listen", old.listen != new.listen),
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
    ]
    .into_iter()
    .filter_map(|(name, changed)| changed.then_some(name))
    .collect()
}

/// Keep the settings that name this instance and its shared files as they
/// were at start: run ids already given out must keep their owner.
fn keep_start_only(old: &config::Server, new: &mut config::Server) {
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
    }

    #[test]
    fn editor_files_are_ignored() {
        let c = &[Some("config.toml".into()), Some("programs".into())];
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
