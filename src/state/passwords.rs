//! The hashes of generated passwords (`password = "generate"` of a
//! `[[users]]` entry), kept in `<state_dir>/passwords.json`: the loader reads
//! them here, `firststart.rs` makes them.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The `password` value that asks for a generated password.
pub const MARKER: &str = "generate";

/// The file, in the state dir, that holds the hashes of generated passwords.
pub const FILE: &str = super::Kept::Passwords.name();

/// The stored hash of `user`'s generated password, if there is one.
pub fn stored_hash(state_dir: &Path, user: &str) -> Option<String> {
    read(&path(state_dir)).remove(user)
}

/// The file of generated passwords in `state_dir`.
pub fn path(state_dir: &Path) -> PathBuf {
    super::Kept::Passwords.path_in(state_dir)
}

/// The stored hashes by user name (empty when the file is missing or bad).
pub fn read(file: &Path) -> BTreeMap<String, String> {
    fs::read(file)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Write `all` to `file` (mode 0600) through a temporary file and a rename.
pub fn write(file: &Path, all: &BTreeMap<String, String>) -> std::io::Result<()> {
    let dir = file.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let tmp: PathBuf = dir.join(format!(".{FILE}.tmp"));
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(&serde_json::to_vec_pretty(all).unwrap_or_default())?;
    f.sync_all()?;
    fs::rename(&tmp, file)
}
