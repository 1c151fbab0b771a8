//! Telling a changed program file from an unchanged one without parsing
//! it: its [`Stamp`] (device, inode, size, modification and change times,
//! taken with `fstat` on the open file before its content is read), the
//! [`digest`] of its text, and a program file as found ([`Source`]).
//!
//! A file written in the same clock tick as it was read may keep the same
//! times after a change (the kernel's file times advance by the tick, not
//! the nanosecond), so such a file gets no stamp ([`Stamp::of`] returns
//! `None`) and is read again at the next reload, as git does with its
//! "racily clean" index entries; when its text is the same, its program is
//! kept and gets the stamp the file has then ([`StampCell`]).

use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::types::Errors;
use super::Program;

/// Longer than a clock tick of any kernel (HZ ≥ 100 gives ≤ 10 ms): a
/// change made after a read carries a change time later than the read's
/// start minus this.
const RACY: Duration = Duration::from_millis(50);

/// A program's [`Stamp`]; `None`: read the file again at the next reload.
/// Replaced when a reload reads the file again and finds the same text
/// (the program is kept): a file read too soon after its write, or only
/// touched, then gets the stamp it has now. Were it kept unstamped or
/// with its old stamp, every later reload would read it again (a reload
/// of one new program re-read each program added since the start).
#[derive(Debug, Default)]
pub struct StampCell(Mutex<Option<Stamp>>);

impl StampCell {
    /// A cell holding `stamp`.
    pub fn new(stamp: Option<Stamp>) -> StampCell {
        StampCell(Mutex::new(stamp))
    }

    /// The stamp now.
    pub fn get(&self) -> Option<Stamp> {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Replace the stamp.
    pub fn set(&self, stamp: Option<Stamp>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = stamp;
    }
}

/// The identity and times of one file's content as it was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    /// The stamp of a file read after `read_started`, or `None` when it
    /// changed too shortly before to be told apart from a later change.
    pub fn of(meta: &Metadata, read_started: SystemTime) -> Option<Stamp> {
        let ctime = UNIX_EPOCH.checked_add(Duration::new(
            u64::try_from(meta.ctime()).ok()?,
            u32::try_from(meta.ctime_nsec()).ok()?,
        ))?;
        if ctime + RACY >= read_started {
            return None;
        }
        Some(Stamp::now(meta))
    }

    /// The stamp of `meta` as it is, to compare with a recorded one.
    pub fn now(meta: &Metadata) -> Stamp {
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// The stamp of a directory entry as `fstatat` found it, to compare
    /// with a recorded one.
    pub fn of_entry(st: &crate::sys::EntryStat) -> Stamp {
        Stamp {
            dev: st.dev,
            ino: st.ino,
            size: st.size,
            mtime: st.mtime,
            ctime: st.ctime,
        }
    }
}

/// A hash of a program file's text, to tell a file read again unchanged
/// (a touched file, one written just before it was read) from a changed one.
pub fn digest(text: &str) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    std::hash::Hasher::write(&mut h, text.as_bytes());
    std::hash::Hasher::finish(&h)
}

/// One program file found in the programs directory.
pub enum Source {
    /// Read now: its text, and its stamp when a later reload may trust it.
    Text {
        /// The content.
        text: String,
        /// See [`Stamp::of`].
        stamp: Option<Stamp>,
    },
    /// Unchanged since the current snapshot loaded it.
    Loaded(Arc<Program>),
    /// Read and checked on its own by the thread that read it (a load
    /// with no current snapshot), which also freed its text: what the
    /// check found.
    Checked(Box<Checked>),
}

/// A line and column (1-based) in a program file.
pub type Pos = (usize, usize);

/// A program as [`Checked`] found it: the program, its id as written (it
/// may be negative) and where `id` and `name` are in its text (what the
/// cross-file checks point at).
pub type Found = (Arc<Program>, i64, (Pos, Pos));

/// One program file checked on its own, before the cross-file checks:
/// by the thread that read it when a load has no current snapshot
/// ([`Source::Checked`]), else while the programs are checked together.
pub struct Checked {
    /// The program; `None` when the file is not a program.
    pub program: Option<Found>,
    /// The errors found in this file alone.
    pub errs: Errors,
    /// For a file that is not a program: the id its text gives anyway,
    /// when it is TOML with a non-negative integer `id` (so that a
    /// reference to it is not reported as dangling).
    pub broken_id: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::test_dir::TestDir;

    #[test]
    fn a_file_changed_just_before_reading_has_no_stamp() {
        let dir = TestDir::new("stamp");
        let file = dir.join("a.toml");
        std::fs::write(&file, "x").unwrap();
        let meta = std::fs::metadata(&file).unwrap();
        assert_eq!(Stamp::of(&meta, SystemTime::now()), None);
        let later = SystemTime::now() + Duration::from_secs(1);
        assert_eq!(Stamp::of(&meta, later), Some(Stamp::now(&meta)));
        std::fs::write(&file, "yy").unwrap();
        let changed = Stamp::now(&std::fs::metadata(&file).unwrap());
        assert_ne!(Some(changed), Stamp::of(&meta, later), "rewritten in place");
    }

    #[test]
    fn a_stamp_by_the_directory_equals_the_stamp_by_path() {
        let dir = TestDir::new("stamp-at");
        let file = dir.join("b.toml");
        std::fs::write(&file, "id = 1").unwrap();
        let dir_fd = std::fs::File::open(dir.path()).unwrap();
        let name = std::ffi::OsStr::new("b.toml");
        let st = crate::sys::stat_in(&dir_fd, name).unwrap();
        assert!(st.is_file);
        let by_path = Stamp::now(&std::fs::metadata(&file).unwrap());
        assert_eq!(Stamp::of_entry(&st), by_path);
        let mut text = String::new();
        std::io::Read::read_to_string(&mut crate::sys::open_in(&dir_fd, name).unwrap(), &mut text)
            .unwrap();
        assert_eq!(text, "id = 1");
        let sub = crate::sys::stat_in(&dir_fd, std::ffi::OsStr::new(".")).unwrap();
        assert!(!sub.is_file, "a directory is not a file");
        let gone = crate::sys::open_in(&dir_fd, std::ffi::OsStr::new("gone.toml")).unwrap_err();
        assert_eq!(gone.kind(), std::io::ErrorKind::NotFound);
        let nul = crate::sys::stat_in(&dir_fd, std::ffi::OsStr::new("a\0b")).unwrap_err();
        assert_eq!(nul.kind(), std::io::ErrorKind::InvalidInput);
    }
}
