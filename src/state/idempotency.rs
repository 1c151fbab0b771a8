//! Idempotency claims on disk: `idempotency.log`, JSON lines, one a claim
//! (key hash, request hash, run id, Unix seconds), a `C` line (its run
//! started) or a `D` line (the key given back). A claim is fsynced before
//! its run is started; `C` and `D` lines are not (a lost `C` is made up by
//! the run log, a lost `D` by the next claim of the key). Opening reads the
//! keys still in their window and rewrites the file with them (atomically);
//! the same compaction runs once the file holds about twice the lines it
//! needs. A torn last line is skipped. What a claim means (scopes,
//! fingerprints, repeats) is `runs::idempotency`'s.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::file;
use super::Kept;

/// A sha256: of a key with its scope (the slot), or of a request.
pub type Hash = [u8; 32];

/// One remembered key.
#[derive(Debug, Clone)]
pub struct Claim {
    /// sha256 of the request it came with.
    pub request: Hash,
    /// The id of the run it started.
    pub run: Box<str>,
    /// Unix seconds it was claimed.
    pub at: u64,
    /// Claimed by a request whose run is not recorded yet.
    pub pending: bool,
    /// Its run was started (a `C` line): a repeat never starts another,
    /// even once `run_retention` dropped the run from the run log.
    pub confirmed: bool,
}

/// A line of `idempotency.log`: a claim, (`C`) its run started, or (`D`)
/// a key given back.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Line {
    k: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    f: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    r: Option<String>,
    #[serde(default)]
    t: u64,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    c: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    d: bool,
}

impl Line {
    fn claim(slot: &Hash, c: &Claim) -> Line {
        Line {
            k: hex::encode(slot),
            f: Some(hex::encode(c.request)),
            r: Some(c.run.to_string()),
            t: c.at,
            c: c.confirmed,
            d: false,
        }
    }
}

/// The remembered keys by slot, and the slots in claim order (with their
/// claim time), as read from the file.
pub type Loaded = (HashMap<Hash, Claim>, VecDeque<(Hash, u64)>);

/// The open `idempotency.log` of one state dir.
pub struct Log {
    path: PathBuf,
    file: File,
    lines: usize,
}

impl Log {
    /// Open (creating) the log in `state_dir`, keeping the keys claimed at
    /// `oldest` (Unix seconds) or later, and compact it to them.
    ///
    /// # Errors
    /// The file cannot be read or written.
    pub fn open(state_dir: &Path, oldest: u64) -> io::Result<(Log, Loaded)> {
        let path = Kept::Idempotency.path_in(state_dir);
        let (map, order) = read(&path, oldest)?;
        let file = rewrite(&path, &map, &order)?;
        let lines = order.len();
        Ok((Log { path, file, lines }, (map, order)))
    }

    /// Append the claim of `slot`, durably (fsync) when `durable`.
    ///
    /// # Errors
    /// The write or the sync failed; a partial line is cut off again.
    pub fn claim(&mut self, slot: &Hash, c: &Claim, durable: bool) -> io::Result<()> {
        self.write(&Line::claim(slot, c), durable)
    }

    /// Append a `C` line (the run of `slot` started) or a `D` line (given
    /// back); not synced.
    ///
    /// # Errors
    /// The write failed.
    pub fn mark(&mut self, slot: &Hash, at: u64, started: bool) -> io::Result<()> {
        let line = Line {
            k: hex::encode(slot),
            f: None,
            r: None,
            t: at,
            c: started,
            d: !started,
        };
        self.write(&line, false)
    }

    /// Rewrite the file with `loaded` once it holds about twice the lines
    /// it needs.
    pub fn compact_if_needed(&mut self, map: &HashMap<Hash, Claim>, order: &VecDeque<(Hash, u64)>) {
        if self.lines <= 2 * map.len() + 1024 {
            return;
        }
        match rewrite(&self.path, map, order) {
            Ok(file) => {
                self.file = file;
                self.lines = order.len();
            }
            Err(e) => log::warn!("cannot compact {}: {e}", self.path.display()),
        }
    }

    fn write(&mut self, line: &Line, durable: bool) -> io::Result<()> {
        let mut bytes = serde_json::to_vec(line).unwrap_or_default();
        bytes.push(b'\n');
        file::append_line(&mut self.file, &bytes)?;
        self.lines += 1;
        if durable {
            self.file.sync_data()?;
        }
        Ok(())
    }
}

/// The keys of the file claimed at `oldest` or later, in claim order.
fn read(path: &Path, oldest: u64) -> io::Result<Loaded> {
    let mut map = HashMap::new();
    let mut order = VecDeque::new();
    let Some(file) = file::open_if_exists(path)? else {
        return Ok((map, order));
    };
    let mut hash = |s: &str| -> Option<Hash> {
        let mut out = [0u8; 32];
        hex::decode_to_slice(s, &mut out).ok().map(|()| out)
    };
    for line in BufReader::new(file).split(b'\n') {
        let Ok(l) = serde_json::from_slice::<Line>(&line?) else {
            continue;
        };
        let Some(k) = hash(&l.k) else { continue };
        if l.d {
            map.remove(&k);
            continue;
        }
        // A `C` line has no request: a claim line with `C` is a claim
        // whose run had started when the file was last compacted.
        if l.c && l.f.is_none() {
            if let Some(e) = map.get_mut(&k) {
                e.confirmed = true;
            }
            continue;
        }
        let (Some(f), Some(r)) = (l.f.as_deref().and_then(&mut hash), l.r) else {
            continue;
        };
        if l.t < oldest || r.is_empty() {
            continue;
        }
        let entry = Claim {
            request: f,
            run: r.into(),
            at: l.t,
            pending: false,
            confirmed: l.c,
        };
        map.insert(k, entry);
        order.push_back((k, l.t));
    }
    order.retain(|(k, at)| map.get(k).is_some_and(|e| e.at == *at));
    Ok((map, order))
}

/// Write the remembered keys to a fresh file (atomically) and open it for
/// appending.
fn rewrite(
    path: &Path,
    map: &HashMap<Hash, Claim>,
    order: &VecDeque<(Hash, u64)>,
) -> io::Result<File> {
    file::write_atomic(path, |f| {
        let mut w = io::BufWriter::new(f);
        for (k, _) in order {
            let Some(e) = map.get(k) else { continue };
            serde_json::to_writer(&mut w, &Line::claim(k, e))?;
            w.write_all(b"\n")?;
        }
        w.flush()
    })?;
    file::open_append(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::test_dir::TestDir;

    /// A key whose run started is written back as one line with `C` when
    /// the file is compacted at open; every later open must keep it
    /// (read as a `C` mark alone, it was dropped at the second restart).
    #[test]
    fn a_started_key_survives_every_reopen() {
        let dir = TestDir::new("idempotency-reopen");
        let slot = [7u8; 32];
        let claim = Claim {
            request: [9u8; 32],
            run: "vm-0123456789abcdef0123456789abcdef".into(),
            at: 1_000,
            pending: false,
            confirmed: false,
        };
        {
            let (mut log, _) = Log::open(dir.path(), 0).expect("open");
            log.claim(&slot, &claim, true).expect("claim");
            log.mark(&slot, claim.at, true).expect("mark");
        }
        for open in 1..=3 {
            let (_, (map, order)) = Log::open(dir.path(), 0).expect("reopen");
            let kept = map
                .get(&slot)
                .unwrap_or_else(|| panic!("open {open}: key lost"));
            assert!(kept.confirmed, "open {open}: still started");
            assert_eq!(kept.request, claim.request, "open {open}");
            assert_eq!(&*kept.run, &*claim.run, "open {open}");
            assert_eq!(order.len(), 1, "open {open}");
        }
        // A key given back stays given back.
        {
            let (mut log, _) = Log::open(dir.path(), 0).expect("open");
            log.mark(&slot, claim.at, false).expect("give back");
        }
        let (_, (map, _)) = Log::open(dir.path(), 0).expect("reopen");
        assert!(map.is_empty(), "given back: {map:?}");
    }
}
