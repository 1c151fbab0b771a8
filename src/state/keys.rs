//! Application keys on disk: `app_keys.json` in the shared state dir, one
//! pretty-printed JSON object of entries by `<workspace>/<member>` (what an
//! entry holds is `access::app_keys`'s), replaced atomically, mode 0600.
//! The file is shared by the server and `trigd app-key` (another process):
//! writers serialise on an advisory lock on `app_keys.lock`, and readers
//! notice a changed file by its [`Stamp`].

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{file, Kept};
use crate::sys;

/// (dev, inode, size, mtime ns) of the file: changes whenever it is
/// replaced or written.
pub type Stamp = (u64, u64, u64, i64);

/// The key file of one (shared) state dir.
#[derive(Debug, Clone)]
pub struct KeyFile {
    path: PathBuf,
    lock_path: PathBuf,
}

impl KeyFile {
    /// The key file in `shared_state_dir`.
    pub fn new(shared_state_dir: &Path) -> KeyFile {
        KeyFile {
            path: Kept::AppKeys.path_in(shared_state_dir),
            lock_path: Kept::AppKeysLock.path_in(shared_state_dir),
        }
    }

    /// Where the keys are kept (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's stamp now, `None` when it does not exist.
    pub fn stamp(&self) -> Option<Stamp> {
        fs::metadata(&self.path).ok().map(|m| {
            (
                m.dev(),
                m.ino(),
                m.size(),
                m.mtime() * 1_000_000_000 + m.mtime_nsec(),
            )
        })
    }

    /// Every entry; a missing file is empty.
    ///
    /// # Errors
    /// The file cannot be read or is not a JSON object of entries.
    pub fn read<T: DeserializeOwned>(&self) -> io::Result<BTreeMap<String, T>> {
        match file::read_if_exists(&self.path)? {
            Some(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
            None => Ok(BTreeMap::new()),
        }
    }

    /// Change the entries with `change`, under the writers' lock: read,
    /// change, replace the file atomically.
    ///
    /// # Errors
    /// The state dir cannot be written, or the file read.
    pub fn update<T: Serialize + DeserializeOwned>(
        &self,
        change: impl FnOnce(&mut BTreeMap<String, T>),
    ) -> io::Result<()> {
        fs::create_dir_all(self.path.parent().unwrap_or(Path::new(".")))?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&self.lock_path)?;
        let _guard = sys::FileLock::exclusive(&lock)?;
        let mut all = self.read()?;
        change(&mut all);
        let bytes = serde_json::to_vec_pretty(&all).map_err(io::Error::other)?;
        file::write_atomic(&self.path, |f| f.write_all(&bytes))
    }
}
