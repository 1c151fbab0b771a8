//! The last occurrence each schedule handled: `schedules.json`, one JSON
//! object of times by schedule id (`<program>/<function>/<name>`),
//! replaced atomically (temp file, fsync, rename, fsync of the dir) after
//! the records of the occurrences it names are in `runs.log`. What the
//! marks mean is `schedule/`'s; this is only where they are kept.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use std::sync::Arc;

use super::pg::cluster::claim_occurrence;
use super::pg::Db;
use super::time::Time;
use super::{file, Kept};

/// The marks file of one state dir; with the database, also the claims
/// that make an occurrence fire on one instance of the cluster.
#[derive(Debug, Clone)]
pub struct MarkFile {
    path: PathBuf,
    /// The database and this instance's name.
    cluster: Option<(Arc<Db>, String)>,
}

/// Schedule id → the last occurrence handled (run, skipped or missed).
pub type Marks = BTreeMap<String, Time>;

impl MarkFile {
    /// The marks file in `state_dir`.
    pub fn new(state_dir: &Path) -> MarkFile {
        MarkFile {
            path: Kept::Schedules.path_in(state_dir),
            cluster: None,
        }
    }

    /// The same marks, occurrences claimed in `db` as instance `me`
    /// ([`MarkFile::claim`]).
    pub fn in_cluster(self, db: Arc<Db>, me: &str) -> MarkFile {
        MarkFile {
            cluster: Some((db, me.to_string())),
            ..self
        }
    }

    /// Whether this instance handles occurrence `at` of schedule `id`: on
    /// one host always; with the database only where the insert of the
    /// occurrence's row succeeds, so it fires once per cluster (not at all
    /// while the database is unreachable: logged).
    pub fn claim(&self, id: &str, at: Time) -> bool {
        let Some((db, me)) = &self.cluster else {
            return true;
        };
        let ms = at.timestamp().as_millisecond();
        match claim_occurrence(db, me, id, ms) {
            Ok(won) => won,
            Err(e) => {
                log::error!("schedule {id}: cannot claim the occurrence of {at}: {e}; not handled");
                false
            }
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

    /// Replace the file with `all`, durably, unless it holds `all`
    /// already: every reload of the configuration saves the marks, most
    /// often unchanged (none at all without schedules), and a durable
    /// replacement costs two `fsync`s (1.5 ms here) on the disk the first
    /// run after the reload writes to. Reading the file back is exact and
    /// keeps nothing in memory.
    ///
    /// # Errors
    /// The state dir cannot be written.
    pub fn write(&self, all: &Marks) -> io::Result<()> {
        let bytes = serde_json::to_vec(all).map_err(io::Error::other)?;
        if file::read_if_exists(&self.path).is_ok_and(|old| old.as_deref() == Some(&bytes[..])) {
            return Ok(());
        }
        file::write_atomic(&self.path, |f| f.write_all(&bytes))
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;
    use crate::state::test_dir::TestDir;

    #[test]
    fn marks_unchanged_are_not_written_again() {
        let dir = TestDir::new("marks");
        let marks = MarkFile::new(dir.path());
        let inode = || std::fs::metadata(dir.join("schedules.json")).unwrap().ino();
        marks.write(&Marks::new()).unwrap();
        let first = inode();
        marks.write(&Marks::new()).unwrap();
        assert_eq!(inode(), first, "the same marks: the file is left as it is");
        let mut one = Marks::new();
        one.insert("nightly".into(), Time::now());
        marks.write(&one).unwrap();
        assert_ne!(inode(), first, "other marks: the file is replaced");
        assert_eq!(marks.load(), one);
    }
}
