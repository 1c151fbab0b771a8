//! Re-read the certificate and key when their files change.
//!
//! certbot renews by writing new files into `archive/<name>/` and then
//! re-pointing the symlinks in `live/<name>/` (a rename of a new symlink over
//! the old one); other tools rename a new file over the old one, or write
//! the file in place. So the watcher watches the directory of each
//! configured path and the directory of the file it resolves to, and reacts
//! to events naming either. A change is read once events have been quiet
//! for [`QUIET`]: certbot's two symlinks, or a key written just after its
//! certificate, are one change, not a mismatched pair in between.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use notify::{Event, RecommendedWatcher, RecursiveMode, Watcher};

use super::Certs;

/// Quiet time after the last event of a change before the files are read.
pub const QUIET: Duration = Duration::from_millis(300);

/// The longest a change waits for quiet: the files are read then even if
/// events go on.
const MAX_SETTLE: Duration = Duration::from_secs(2);

/// Start the watcher thread of `certs`' files. A watcher that cannot start
/// is logged: SIGHUP still reloads.
pub fn start(certs: Arc<Certs>) {
    let (tx, rx) = channel();
    let watcher = notify::recommended_watcher(move |res: notify::Result<Event>| {
        if let Ok(ev) = res {
            let _ = tx.send(ev);
        }
    });
    let mut watcher = match watcher {
        Ok(w) => w,
        Err(e) => {
            log::warn!("TLS files are not watched ({e}); SIGHUP reloads them");
            return;
        }
    };
    // Watched before this returns (before the server listens), then read
    // once more: a change between the first read and the watch (a renewal
    // just after the start) has no event of its own. Watched from the new
    // thread instead, a key renamed over the old one a moment after the
    // start went unnoticed on a loaded machine.
    let mut watched = BTreeSet::new();
    rewatch(&certs, &mut watcher, &mut watched);
    let _ = certs.reload();
    let spawned = thread::Builder::new()
        .name("tls-watch".into())
        .spawn(move || run(&certs, watcher, &rx, watched));
    if let Err(e) = spawned {
        log::warn!("TLS files are not watched ({e}); SIGHUP reloads them");
    }
}

/// Wait for events naming the files, then reload once they are quiet.
fn run(
    certs: &Certs,
    mut watcher: RecommendedWatcher,
    rx: &Receiver<Event>,
    mut watched: BTreeSet<PathBuf>,
) {
    // Once more: the read in `start` may have moved to other files.
    let mut names = rewatch(certs, &mut watcher, &mut watched);
    while let Ok(ev) = rx.recv() {
        if !names_any(&ev, &names) {
            continue;
        }
        settle(rx, &names);
        let _ = certs.reload();
        names = rewatch(certs, &mut watcher, &mut watched);
    }
}

/// Wait until no event has named the files for [`QUIET`], at most
/// [`MAX_SETTLE`]. Events about other files of the directories (a log
/// written next to the certificate) do not delay it.
fn settle(rx: &Receiver<Event>, names: &BTreeSet<OsString>) {
    let last = Instant::now() + MAX_SETTLE;
    let mut quiet = Instant::now() + QUIET;
    loop {
        let until = quiet.min(last);
        let Some(left) = until.checked_duration_since(Instant::now()) else {
            return;
        };
        match rx.recv_timeout(left) {
            Ok(ev) if names_any(&ev, names) => quiet = Instant::now() + QUIET,
            Ok(_) => {}
            Err(_) => return,
        }
    }
}

/// Whether `ev` names one of the files (by file name).
fn names_any(ev: &Event, names: &BTreeSet<OsString>) -> bool {
    ev.paths
        .iter()
        .any(|p| p.file_name().is_some_and(|n| names.contains(n)))
}

/// Watch the directories of the files and of the files they resolve to
/// (added as symlinks move); the file names events must name.
fn rewatch(
    certs: &Certs,
    watcher: &mut RecommendedWatcher,
    watched: &mut BTreeSet<PathBuf>,
) -> BTreeSet<OsString> {
    let (cert, key) = certs.files();
    let mut names = BTreeSet::new();
    for path in [cert, key] {
        let resolved = path.canonicalize().ok();
        for p in std::iter::once(path).chain(resolved) {
            if let Some(name) = p.file_name() {
                names.insert(name.to_os_string());
            }
            let dir = parent(&p);
            if !watched.contains(&dir) && watcher.watch(&dir, RecursiveMode::NonRecursive).is_ok() {
                watched.insert(dir);
            }
        }
    }
    names
}

/// The directory of `path` (`.` for a bare file name).
fn parent(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}
