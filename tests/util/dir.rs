//! A per-test directory under the temp dir.

use std::env;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::process;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;

static DIR_COUNTER: AtomicUsize = AtomicUsize::new(0);

/// `env::temp_dir()/trigd-tests/<name>/<pid>-<n>`, emptied when created and
/// removed when the test passes (kept for inspection when it fails).
pub struct TestDir {
    /// The directory.
    pub root: PathBuf,
}

impl TestDir {
    /// A new empty directory for the test `name`.
    pub fn new(name: &str) -> TestDir {
        let n = DIR_COUNTER.fetch_add(1, Ordering::SeqCst);
        let root = env::temp_dir()
            .join("trigd-tests")
            .join(name)
            .join(format!("{}-{n}", process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", root.display()));
        TestDir { root }
    }

    /// `root/rel`.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// `root/rel` as a string (for argv and TOML).
    pub fn path_str(&self, rel: &str) -> String {
        self.path(rel)
            .to_str()
            .expect("temp paths are UTF-8")
            .to_string()
    }

    /// Write `text` to `root/rel`, creating parent directories.
    pub fn write(&self, rel: &str, text: &str) {
        let p = self.path(rel);
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent)
                .unwrap_or_else(|e| panic!("cannot create {}: {e}", parent.display()));
        }
        fs::write(&p, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", p.display()));
    }

    /// Append `text` to `root/rel` (created when missing).
    pub fn append(&self, rel: &str, text: &str) {
        let p = self.path(rel);
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&p)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", p.display()));
        f.write_all(text.as_bytes())
            .unwrap_or_else(|e| panic!("cannot append to {}: {e}", p.display()));
    }

    /// Create the directory `root/rel`.
    pub fn mkdir(&self, rel: &str) {
        let p = self.path(rel);
        fs::create_dir_all(&p).unwrap_or_else(|e| panic!("cannot create {}: {e}", p.display()));
    }

    /// Content of `root/rel`, or `None` when it cannot be read.
    pub fn read_opt(&self, rel: &str) -> Option<String> {
        fs::read(self.path(rel))
            .ok()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    /// The lines of `root/rel`; none when it cannot be read.
    pub fn lines(&self, rel: &str) -> Vec<String> {
        self.read_opt(rel)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Raw bytes of `root/rel`; panics when missing.
    pub fn read_bytes(&self, rel: &str) -> Vec<u8> {
        let p = self.path(rel);
        fs::read(&p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()))
    }

    /// Content of `root/rel`; panics when missing.
    pub fn read(&self, rel: &str) -> String {
        String::from_utf8_lossy(&self.read_bytes(rel)).into_owned()
    }

    /// Whether `root/rel` exists.
    pub fn exists(&self, rel: &str) -> bool {
        self.path(rel).exists()
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        if !thread::panicking() {
            let _ = fs::remove_dir_all(&self.root);
            // Also `<name>/` when no other run of the test is left in it.
            if let Some(parent) = self.root.parent() {
                let _ = fs::remove_dir(parent);
            }
        }
    }
}
