//! Re-read the certificate and key when their files change.
//!
//! certbot renews by writing new files into `archive/<name>/` and then
//! re-pointing the symlinks in `live/<name>/` (a rename of a new symlink over
//! the old one); other tools rename a new file over the old one, or write
//! the file in place; Kubernetes mounts a secret as `tls.crt ->
//! ..data/tls.crt` with `..data -> ..2026_11_29_…/` and renews by swapping
//! the directory symlink `..data`. So the watcher watches the directory of
//! each configured path, of every symlink met on the way to the file, and
//! of the file it resolves to, and reacts to events naming any of them. A change is read once events have been quiet
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
        let links = links_on_the_way(&path);
        for p in std::iter::once(path).chain(links).chain(resolved) {
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

/// The most symlinks followed to resolve a path (Linux's own limit).
const MAX_LINKS: usize = 40;

/// The symlinks that resolving `path` passes through, the file's own and
/// its directories' (`..data` of a Kubernetes secret), in order; a loop
/// ends the walk at [`MAX_LINKS`], a broken link where it breaks.
fn links_on_the_way(path: &Path) -> Vec<PathBuf> {
    let mut links = Vec::new();
    let mut done = PathBuf::new();
    let mut left: Vec<OsString> = path.iter().rev().map(OsString::from).collect();
    while let Some(part) = left.pop() {
        let here = done.join(&part);
        let Ok(target) = std::fs::read_link(&here) else {
            done = here;
            continue;
        };
        if links.len() == MAX_LINKS {
            break;
        }
        links.push(here);
        // The target takes the link's place: an absolute one restarts from
        // the root, a relative one goes on from the link's directory.
        if target.is_absolute() {
            done = PathBuf::new();
        }
        left.extend(target.iter().rev().map(OsString::from));
    }
    links
}

/// The directory of `path` (`.` for a bare file name).
fn parent(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::test_dir::TestDir;
    use std::os::unix::fs::symlink;

    #[test]
    fn every_link_on_the_way_is_named_and_loops_end() {
        let dir = TestDir::new("tls-links");
        let d = dir.path();
        std::fs::create_dir_all(d.join("..v1")).unwrap();
        std::fs::write(d.join("..v1/tls.crt"), "x").unwrap();
        symlink("..v1", d.join("..data")).unwrap();
        symlink("..data/tls.crt", d.join("tls.crt")).unwrap();
        assert_eq!(
            links_on_the_way(&d.join("tls.crt")),
            [d.join("tls.crt"), d.join("..data")]
        );
        assert_eq!(
            links_on_the_way(&d.join("..v1/tls.crt")),
            Vec::<PathBuf>::new()
        );
        symlink("loop", d.join("loop")).unwrap();
        assert_eq!(links_on_the_way(&d.join("loop")).len(), MAX_LINKS);
        symlink(d.join("gone"), d.join("broken")).unwrap();
        assert_eq!(links_on_the_way(&d.join("broken/x")), [d.join("broken")]);
    }
}
