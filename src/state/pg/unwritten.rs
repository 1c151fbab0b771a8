//! State changes of accepted runs that could not be written while the
//! database was unreachable (a run that ends during an outage): kept in
//! memory, served by `RunStore::get` meanwhile, and written in order once
//! the database answers again, so an acknowledged run never loses its
//! end. The file backend does the same for a full disk.
//!
//! Bounded: at most [`MAX_RUNS`] runs (the latest state of each); past
//! that, a change is dropped and logged (an outage that long has already
//! stopped accepting runs: every accept needs the database).

use std::sync::{Mutex, MutexGuard};

use super::DbError;
use crate::state::record::RunRecord;

/// Most runs whose state changes wait in memory.
pub const MAX_RUNS: usize = 10_000;

/// The waiting state changes, latest per run, in the order they happened.
/// Each with the number of the change, to tell a newer one of the same
/// run that came while it was being written.
#[derive(Debug, Default)]
pub struct Unwritten {
    recs: Mutex<Waiting>,
}

#[derive(Debug, Default)]
struct Waiting {
    recs: Vec<(u64, RunRecord)>,
    changes: u64,
}

impl Unwritten {
    fn lock(&self) -> MutexGuard<'_, Waiting> {
        self.recs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keep `rec` until it can be written (replacing an older state of
    /// the same run, which keeps its place).
    pub fn keep(&self, rec: &RunRecord) {
        let mut w = self.lock();
        w.changes += 1;
        let n = w.changes;
        if let Some(old) = w.recs.iter_mut().find(|(_, r)| r.run == rec.run) {
            *old = (n, rec.clone());
            return;
        }
        if w.recs.len() >= MAX_RUNS {
            log::error!(
                "run {}: its state {} is lost: {MAX_RUNS} runs already wait for the database",
                rec.run,
                rec.state.name()
            );
            return;
        }
        w.recs.push((n, rec.clone()));
    }

    /// The state of run `id` waiting to be written, if any.
    pub fn get(&self, id: &str) -> Option<RunRecord> {
        let w = self.lock();
        w.recs
            .iter()
            .find(|(_, r)| r.run == id)
            .map(|(_, r)| r.clone())
    }

    /// How many runs wait.
    pub fn len(&self) -> usize {
        self.lock().recs.len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.lock().recs.is_empty()
    }

    /// Write the waiting changes with `write`, oldest first, until one
    /// fails because the database is still unreachable; how many were
    /// written. A change refused for another reason is logged and
    /// dropped (it would fail forever).
    pub fn flush(&self, write: impl Fn(&RunRecord) -> Result<(), DbError>) -> usize {
        let mut written = 0;
        loop {
            let Some((n, rec)) = self.lock().recs.first().cloned() else {
                return written;
            };
            match write(&rec) {
                Err(e) if e.is_unavailable() => return written,
                Err(e) => log::error!("run {}: cannot record its state: {e}", rec.run),
                Ok(()) => written += 1,
            }
            // Unless a newer state of the run came meanwhile.
            let mut w = self.lock();
            if let Some(i) = w.recs.iter().position(|(m, _)| *m == n) {
                w.recs.remove(i);
            }
        }
    }
}
