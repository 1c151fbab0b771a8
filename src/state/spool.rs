//! Pending deliveries on disk: `state/callbacks/<seq>.json`, one file per
//! delivery of an ended run, holding the exact body to send, the URL and the
//! attempts so far. Files are written atomically (temp file, fsync, rename,
//! fsync of the directory), so after a crash (even `kill -9`) each is either
//! the old or the new version; a file is removed only once the delivery's
//! final state is in the run log. The sequence number in the name orders
//! deliveries: by run end, then by position within the run.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};

use crate::state::delivery::Delivery;
use crate::state::file::write_atomic;
use crate::state::pg::spool::DbSpool;

/// One pending delivery, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Pending {
    /// Order of delivery (unique, increasing).
    pub seq: u64,
    /// The run the delivery reports.
    pub run: String,
    /// Its position in the run record's `Callbacks`.
    pub index: usize,
    /// The delivery: id, URL, attempts so far.
    pub delivery: Delivery,
    /// Unix time (ms) of the first attempt, once made; `retry_for` counts
    /// from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_attempt_ms: Option<u64>,
    /// The URL called, when the callback's format makes another than
    /// `delivery.url` (a `healthchecks` ping, ntfy's parameters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The exact body sent on every attempt.
    pub body: String,
}

impl Pending {
    /// The URL each attempt calls.
    pub fn url(&self) -> &str {
        self.url.as_deref().unwrap_or(&self.delivery.url)
    }
}

/// The pending deliveries: a directory, or with `[state] url` the
/// database's `trigd_callbacks` ([`DbSpool`]), where every instance finds
/// those of an instance that is gone.
pub struct Spool {
    dir: PathBuf,
    db: Option<DbSpool>,
    /// With the database: the deliveries held from before the start are
    /// still to be read (it was unreachable at start).
    unread: AtomicBool,
}

fn db_io(e: crate::state::pg::DbError) -> io::Error {
    io::Error::other(e)
}

impl Spool {
    /// Open (creating) `state_dir/callbacks`; returns the spool and every
    /// pending delivery found, in sequence order. Files that cannot be read
    /// are renamed `*.bad` and reported in the log.
    ///
    /// # Errors
    /// The directory cannot be created or listed.
    pub fn open(state_dir: &Path) -> io::Result<(Spool, Vec<Pending>)> {
        let dir = super::Kept::Callbacks.path_in(state_dir);
        fs::create_dir_all(&dir)?;
        let mut names: Vec<PathBuf> = fs::read_dir(&dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        names.sort();
        let mut found = Vec::new();
        for path in names {
            match fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice::<Pending>(&b).map_err(|e| e.to_string()))
            {
                Ok(p) => found.push(p),
                Err(e) => {
                    log::error!(
                        "callbacks: cannot read {}: {e}; renamed *.bad",
                        path.display()
                    );
                    let _ = fs::rename(&path, path.with_extension("bad"));
                }
            }
        }
        found.sort_by_key(|p| p.seq);
        let spool = Spool {
            dir,
            db: None,
            unread: AtomicBool::new(false),
        };
        Ok((spool, found))
    }

    /// The spool in the database: it and the deliveries this instance
    /// holds, in order; none yet while the database is unreachable
    /// ([`Spool::read_held`] reads them once it answers).
    ///
    /// # Errors
    /// None today (the signature is the file spool's).
    pub fn database(db: DbSpool) -> io::Result<(Spool, Vec<Pending>)> {
        let found = db.held().map(|texts| parse_all(&texts));
        let spool = Spool {
            dir: PathBuf::new(),
            db: Some(db),
            unread: AtomicBool::new(found.is_err()),
        };
        match found {
            Ok(found) => Ok((spool, found)),
            Err(e) => {
                log::warn!("callbacks: pending deliveries not read yet: {e}");
                Ok((spool, Vec::new()))
            }
        }
    }

    /// The deliveries held from before the start that could not be read
    /// then (the database was unreachable), once it answers; `None` when
    /// there is nothing left to read.
    pub fn read_held(&self) -> Option<Vec<Pending>> {
        let db = self.db.as_ref()?;
        if !self.unread.load(Ordering::SeqCst) {
            return None;
        }
        let found = parse_all(&db.held().ok()?);
        self.unread.store(false, Ordering::SeqCst);
        Some(found)
    }

    /// Where the sequence numbers of new deliveries start: after those
    /// found, and in the database after those of every instance.
    pub fn first_seq(&self) -> u64 {
        match &self.db {
            Some(_) => crate::state::pg::spool::first_seq(),
            None => 0,
        }
    }

    fn path(&self, seq: u64) -> PathBuf {
        self.dir.join(format!("{seq:020}.json"))
    }

    /// Write (or replace) `p` durably.
    ///
    /// # Errors
    /// The file could not be written; the old version, if any, is kept.
    pub fn write(&self, p: &Pending) -> io::Result<()> {
        if let Some(db) = &self.db {
            let text = serde_json::to_string(p).map_err(io::Error::other)?;
            return db.write(p.seq, &p.run, &text).map_err(db_io);
        }
        let bytes = serde_json::to_vec(p).map_err(io::Error::other)?;
        write_atomic(&self.path(p.seq), |f: &mut File| f.write_all(&bytes))
    }

    /// Read pending delivery `seq`, if its file exists.
    pub fn read(&self, seq: u64) -> Option<Pending> {
        if let Some(db) = &self.db {
            return db
                .read(seq)
                .inspect_err(|e| log::warn!("callbacks: cannot read delivery {seq}: {e}"))
                .ok()
                .flatten()
                .and_then(|text| parse(&text));
        }
        let bytes = fs::read(self.path(seq)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Remove pending delivery `seq` durably.
    ///
    /// # Errors
    /// The file could not be removed.
    pub fn remove(&self, seq: u64) -> io::Result<()> {
        if let Some(db) = &self.db {
            return db.remove(seq).map_err(db_io);
        }
        match fs::remove_file(self.path(seq)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        }
        File::open(&self.dir)?.sync_all()
    }
}

/// A pending delivery as the database holds it (JSON); one that does not
/// parse is logged and skipped.
pub fn parse(text: &str) -> Option<Pending> {
    serde_json::from_slice(text.as_bytes())
        .inspect_err(|e| log::error!("callbacks: a pending delivery does not parse: {e}"))
        .ok()
}

/// [`parse`] each, in sequence order.
pub fn parse_all(texts: &[String]) -> Vec<Pending> {
    let mut found: Vec<Pending> = texts.iter().filter_map(|t| parse(t)).collect();
    found.sort_by_key(|p| p.seq);
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::delivery::{Source, Target};
    use crate::state::test_dir::TestDir;

    #[test]
    fn written_files_come_back_in_order_and_bad_ones_are_set_aside() {
        let d = TestDir::new("spool");
        let (s, found) = Spool::open(d.path()).unwrap();
        assert!(found.is_empty());
        let target = Target {
            url: "http://127.0.0.1:9/".into(),
            source: Source::Request,
            format: crate::state::delivery::Format::Record,
            on: Vec::new(),
        };
        for seq in [12, 3, 7] {
            let p = Pending {
                seq,
                run: "r".into(),
                index: 0,
                delivery: Delivery::new(&target),
                first_attempt_ms: None,
                url: None,
                body: format!("{{\"n\":{seq}}}"),
            };
            s.write(&p).unwrap();
        }
        fs::write(d.join("callbacks/00000000000000000001.json"), b"{torn").unwrap();
        s.remove(7).unwrap();
        s.remove(7).unwrap();
        let (s, found) = Spool::open(d.path()).unwrap();
        let seqs: Vec<u64> = found.iter().map(|p| p.seq).collect();
        assert_eq!(seqs, [3, 12]);
        assert_eq!(s.read(12).unwrap().body, "{\"n\":12}");
        assert!(d.join("callbacks/00000000000000000001.bad").exists());
    }
}
