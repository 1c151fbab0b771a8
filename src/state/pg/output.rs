//! Kept output in the database (`trigd_output`), readable from every
//! instance, also after the one that executed the run is gone.
//!
//! The executing instance keeps writing the run's output file on its own
//! disk ([`crate::state::output`]); what it adds there is copied to the
//! database in chunks ([`Shipping::collect`]): every lease-thread tick
//! (`runner::cluster::POLL`) one statement for all the runs executing
//! on the instance ([`ship`]), and at a run's end what is left, before its
//! end is recorded. A chunk is frames as the file holds them (closed), so
//! the copy is bounded by the same `max_output_bytes` per stream.
//!
//! A run whose output ended while it was still held in memory has no file
//! and no chunks: its output is in its record (`output.rs`, "A small
//! output stays out of the file system"), which every instance reads.
//!
//! Another instance reads them into a file of its own ([`Mirror`]), which
//! the ordinary readers (whole output, follow) then read as if the run had
//! executed there; the mirror is removed when the reader is done.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use postgres::types::Type;

use super::{Db, DbError};
use crate::state::output::{self, Pos};

/// How far the copy of one run's output file has got.
#[derive(Debug, Default)]
pub struct Shipping {
    file: Option<output::Stored>,
    pos: Pos,
    /// Number of the next chunk.
    next: i32,
    /// Chunks read but not known to be in the database (the copy failed:
    /// the database was away). Sent again as they are, same numbers and
    /// bytes, so that a copy whose answer was lost is not doubled (the
    /// insert skips a chunk already there); a failed copy was dropped, and
    /// the other instances served the output cut off at the gap.
    unsent: Vec<Chunk>,
    /// The run has ended: this is the last of its copy, retried until it
    /// is in the database.
    pub ended: bool,
    /// The last [`Shipping::collect`] left the rest of the file for later
    /// ([`MAX_UNSENT`]).
    capped: bool,
}

/// One chunk to insert: run, number, frames.
pub type Chunk = (String, i32, Vec<u8>);

/// Bytes of unsent chunks a run keeps in memory at most: past it, what
/// the file holds beyond waits there until the database takes the rest.
const MAX_UNSENT: usize = 1 << 20;

impl Shipping {
    /// Read what was added to the output file at `path` since the last
    /// call as the next chunk of run `run` ([`Shipping::unsent`]).
    pub fn collect(&mut self, run: &str, path: &Path) {
        let held: usize = self.unsent.iter().map(|c| c.2.len()).sum();
        self.capped = held >= MAX_UNSENT;
        if self.capped {
            return;
        }
        if self.file.is_none() {
            self.file = output::open(path);
        }
        let Some(file) = self.file.as_ref() else {
            return;
        };
        let mut buf = Vec::new();
        loop {
            let (frames, pos) = output::read_frames(file, self.pos);
            if frames.is_empty() {
                break;
            }
            self.pos = pos;
            output::encode(&frames, &mut buf);
        }
        if !buf.is_empty() {
            self.next += 1;
            self.unsent.push((run.to_string(), self.next - 1, buf));
        }
    }

    /// The chunks to send: read, not yet known to be in the database.
    pub fn unsent(&self) -> &[Chunk] {
        &self.unsent
    }

    /// The chunks [`Shipping::unsent`] gave are in the database.
    pub fn sent(&mut self) {
        self.unsent.clear();
    }

    /// Whether an ended run's copy is whole in the database: sent, and
    /// nothing left in its file.
    pub fn done(&self) -> bool {
        self.ended && self.unsent.is_empty() && !self.capped
    }
}

/// Insert `chunks` (of any runs) in one statement; `background`: sent by
/// the lease thread, not on a request's path (counted apart).
/// Its commit does not wait for the WAL flush (`synchronous_commit = off`
/// for this transaction): the output file on disk is not synced either.
///
/// # Errors
/// The database failed.
pub fn ship(db: &Db, chunks: &[&Chunk], background: bool) -> Result<(), DbError> {
    if chunks.is_empty() {
        return Ok(());
    }
    let mut runs = Vec::with_capacity(chunks.len());
    let mut ns = Vec::with_capacity(chunks.len());
    let mut frames = Vec::with_capacity(chunks.len());
    for (run, n, data) in chunks {
        runs.push(run.as_str());
        ns.push(*n);
        frames.push(data.as_slice());
    }
    let insert = |c: &mut postgres::Client| {
        c.execute_typed(
            "INSERT INTO trigd_output (run, n, frames) \
             SELECT * FROM unnest($1::text[], $2::integer[], $3::bytea[]) \
             WHERE set_config('synchronous_commit', 'off', true) IS NOT NULL \
             ON CONFLICT DO NOTHING",
            &[
                (&runs, Type::TEXT_ARRAY),
                (&ns, Type::INT4_ARRAY),
                (&frames, Type::BYTEA_ARRAY),
            ],
        )
    };
    match background {
        true => db.with_background(insert),
        false => db.with(insert),
    }
    .map(drop)
}

/// A copy, in a file of this instance, of a run's output kept in the
/// database; removed when dropped.
#[derive(Debug)]
pub struct Mirror {
    run: String,
    path: PathBuf,
    next: i32,
}

impl Mirror {
    /// A mirror of run `run`'s output beside `output_path` (the path its
    /// output file would have here); nothing is read yet.
    pub fn new(run: &str, output_path: &Path) -> Mirror {
        let mut name = output_path.as_os_str().to_owned();
        name.push(format!(
            ".{}.mirror",
            hex::encode(rand::random::<[u8; 8]>())
        ));
        Mirror {
            run: run.to_string(),
            path: PathBuf::from(name),
            next: 0,
        }
    }

    /// The mirror's file (it exists once a chunk was read).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append the chunks the database holds past those copied already.
    ///
    /// # Errors
    /// The database failed, or the file cannot be written.
    pub fn sync(&mut self, db: &Db) -> Result<(), DbError> {
        let rows = db.with(|c| {
            c.query_typed(
                "SELECT n, frames FROM trigd_output WHERE run = $1 AND n >= $2 ORDER BY n",
                &[(&self.run, Type::TEXT), (&self.next, Type::INT4)],
            )
        })?;
        if rows.is_empty() {
            return Ok(());
        }
        let mut file = self
            .open()
            .map_err(|e| DbError::Unavailable(e.to_string()))?;
        for row in rows {
            let n: i32 = row.get(0);
            if n != self.next {
                // A gap: the chunk before is not committed yet.
                break;
            }
            let frames: Vec<u8> = row.get(1);
            file.write_all(&frames)
                .map_err(|e| DbError::Unavailable(e.to_string()))?;
            self.next += 1;
        }
        Ok(())
    }

    fn open(&self) -> io::Result<File> {
        if let Some(d) = self.path.parent() {
            fs::create_dir_all(d)?;
        }
        OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&self.path)
    }

    /// The whole output the database keeps of the run.
    ///
    /// # Errors
    /// As [`Mirror::sync`].
    pub fn read_whole(mut self, db: &Db) -> Result<output::Whole, DbError> {
        self.sync(db)?;
        Ok(output::read_whole(&self.path))
    }
}

impl Drop for Mirror {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}
