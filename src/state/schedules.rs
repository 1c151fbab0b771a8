//! The last occurrence each schedule handled: `schedules.json`, one JSON
//! object of times by schedule id (`<program>/<function>/<name>`),
//! replaced atomically (temp file, fsync, rename, fsync of the dir) after
//! the records of the occurrences it names are in `runs.log`. What the
//! marks mean is `schedule/`'s; this is only where they are kept.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::time::Time;
use super::{file, Kept};

/// The marks file of one state dir.
#[derive(Debug, Clone)]
pub struct MarkFile {
    path: PathBuf,
}

/// Schedule id → the last occurrence handled (run, skipped or missed).
pub type Marks = BTreeMap<String, Time>;

impl MarkFile {
    /// The marks file in `state_dir`.
    pub fn new(state_dir: &Path) -> MarkFile {
        MarkFile {
            path: Kept::Schedules.path_in(state_dir),
        }
    }

    /// The kept marks; a missing file is empty, an unreadable one too
    /// (logged: every schedule then starts from now, as a new one would).
    pub fn load(&self) -> Marks {
        match file::read_if_exists(&self.path) {
            Ok(Some(bytes)) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                log::error!("ignoring {}: {e}", self.path.display());
                Marks::new()
            }),
            Ok(None) => Marks::new(),
            Err(e) => {
                log::error!("cannot read {}: {e}", self.path.display());
                Marks::new()
            }
        }
    }

    /// Replace the file with `all`, durably.
    ///
    /// # Errors
    /// The state dir cannot be written.
    pub fn write(&self, all: &Marks) -> io::Result<()> {
        let bytes = serde_json::to_vec(all).map_err(io::Error::other)?;
        file::write_atomic(&self.path, |f| f.write_all(&bytes))
    }
}
