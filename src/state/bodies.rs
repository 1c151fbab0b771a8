//! The raw body of a request in a temporary file, for `stdin = "body"` and
//! `{ body = "file" }` values: written before the run, readable only by
//! trigd's user (mode 0600), removed when the run is over — the guard's
//! `Drop`, which runs when the run's job is dropped, on every path.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// A temporary file holding a body; removed on drop.
#[derive(Debug)]
pub struct BodyFile {
    path: PathBuf,
}

impl BodyFile {
    /// Write `body` to a new file under `dir` (created 0700 if needed).
    ///
    /// # Errors
    /// The directory or file cannot be created or written.
    pub fn write(dir: &Path, body: &[u8]) -> io::Result<BodyFile> {
        fs::create_dir_all(dir)?;
        let name = format!("body-{}", hex::encode(rand::random::<[u8; 12]>()));
        BodyFile::create(dir.join(name), body)
    }

    /// Write `data` to a new file `<prefix><random digits>` in `dir` (which
    /// must exist), mode 0600, as adnanh/webhook names the files of
    /// `pass-file-to-command`.
    ///
    /// # Errors
    /// The file cannot be created or written.
    pub fn write_named(dir: &Path, prefix: &str, data: &[u8]) -> io::Result<BodyFile> {
        let name = format!("{prefix}{}", rand::random::<u32>());
        BodyFile::create(dir.join(name), data)
    }

    /// Create `path` (never an existing file), mode 0600, holding `data`;
    /// the guard removes it again if writing fails. The path kept is
    /// absolute: a program is given it and runs in its own working
    /// directory (a `state_dir` relative to a config named `config.toml`
    /// gave `./state/bodies/…`, which the program could not open).
    fn create(path: PathBuf, data: &[u8]) -> io::Result<BodyFile> {
        let path = std::path::absolute(path)?;
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        let guard = BodyFile { path };
        f.write_all(data)?;
        Ok(guard)
    }

    /// Where the file is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for BodyFile {
    fn drop(&mut self) {
        if let Err(e) = fs::remove_file(&self.path) {
            log::warn!("cannot remove body file {}: {e}", self.path.display());
        }
    }
}

/// The directory of body files in `state_dir`.
pub fn dir(state_dir: &Path) -> PathBuf {
    super::Kept::Bodies.path_in(state_dir)
}

/// Remove body files left by a process that was killed mid-run (called
/// once at start-up).
pub fn clean(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().starts_with("body-") {
            let _ = fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::test_dir::TestDir;

    #[test]
    fn written_private_and_removed_on_drop() {
        use std::os::unix::fs::PermissionsExt;
        let dir = TestDir::new("bodyfile");
        let f = BodyFile::write(dir.path(), b"{\"a\":1}").unwrap();
        let p = f.path().to_path_buf();
        assert_eq!(fs::read(&p).unwrap(), b"{\"a\":1}");
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        drop(f);
        assert!(!p.exists());
    }
}
