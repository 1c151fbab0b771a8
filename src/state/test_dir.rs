//! A per-test directory under the temp dir for unit tests, removed when the
//! test passes (the integration tests' `tests/util/dir.rs`, for `src/`).
//!
//! Our own guard rather than the `tempfile` crate: its `TempDir` removes
//! the directory on a failure too, and a failed test's files are what one
//! wants to look at.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// `temp_dir()/trigd-<name>-<pid>-<n>`, emptied when created and removed
/// when dropped, unless the thread is panicking (a failed test's files are
/// kept for inspection). Flat in the temp dir, not nested, so that a child
/// switched to another user can enter it (the temp dir is world-enterable,
/// a parent we made would have to be made so too).
pub(crate) struct TestDir {
    root: PathBuf,
}

impl TestDir {
    /// A new empty directory for the test `name`, unique in this process.
    pub(crate) fn new(name: &str) -> TestDir {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let root = std::env::temp_dir().join(format!("trigd-{name}-{}-{n}", std::process::id()));
        // Left by an earlier process with the same pid.
        let _ = fs::remove_dir_all(&root);
        fs::create_dir(&root).unwrap_or_else(|e| panic!("cannot create {}: {e}", root.display()));
        TestDir { root }
    }

    /// The directory.
    pub(crate) fn path(&self) -> &Path {
        &self.root
    }

    /// `rel` in the directory.
    pub(crate) fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.root.join(rel)
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        if !thread::panicking() {
            let _ = fs::remove_dir_all(&self.root);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_empty_and_removed_on_drop_but_kept_after_a_panic() {
        let kept = {
            let a = TestDir::new("test-dir");
            let b = TestDir::new("test-dir");
            assert_ne!(a.path(), b.path(), "unique per call");
            assert!(fs::read_dir(a.path()).unwrap().next().is_none(), "empty");
            fs::write(a.join("f"), "x").unwrap();
            fs::create_dir(b.join("sub")).unwrap();
            let gone = [a.path().to_path_buf(), b.path().to_path_buf()];
            drop((a, b));
            assert!(gone.iter().all(|p| !p.exists()), "removed with their files");
            // A panicking thread keeps its directory.
            thread::spawn(|| {
                let d = TestDir::new("test-dir-kept");
                fs::write(d.join("f"), "x").unwrap();
                std::panic::panic_any(d.path().to_path_buf());
            })
            .join()
            .unwrap_err()
            .downcast::<PathBuf>()
            .unwrap()
        };
        assert!(kept.join("f").exists(), "kept after a panic");
        fs::remove_dir_all(&*kept).unwrap();
    }
}
