//! Sync runs whose `queued` or `running` state is not written yet (issue
//! 32): on the PostgreSQL backend a short sync run writes its row once,
//! with its end, instead of two or three times, whether it waited in the
//! queue for a slot or not. A run still waiting or running [`DEFER`] after
//! that state began is written by the lease thread
//! (`RunStore::write_deferred`), or at once before its output is first
//! copied to the database (the copy refers to the row). Any other write of
//! the run first settles its entry here ([`Deferred::settle`]): a state not
//! yet written is dropped (the new state covers it), one being written is
//! waited for, so a deferred state never lands after (or over) the next.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::state::record::RunRecord;

/// How long a sync run waits or runs before that state is written: a run
/// that ends sooner is written once, with its end. Another instance lists
/// a longer run about this long after its arrival (and sees it `running`
/// about this long after its start).
pub const DEFER: Duration = Duration::from_millis(100);

/// The sync runs whose `queued` or `running` state waits (or is being
/// written).
#[derive(Debug, Default)]
pub struct Deferred {
    runs: Mutex<HashMap<String, Entry>>,
    /// Notified when a write of a deferred `running` is done.
    written: Condvar,
}

#[derive(Debug)]
enum Entry {
    /// Not written; the run started at `since`.
    Waiting { rec: Box<RunRecord>, since: Instant },
    /// Being written by the lease thread (or before an output copy).
    Writing,
}

impl Deferred {
    /// Keep `rec`'s state until it is [`DEFER`] old; it replaces the
    /// run's state kept before (its `queued`), once a write of that one
    /// under way is done.
    pub fn defer(&self, rec: &RunRecord) {
        let entry = Entry::Waiting {
            rec: Box::new(rec.clone()),
            since: Instant::now(),
        };
        let mut runs = self.lock();
        while matches!(runs.get(&rec.run), Some(Entry::Writing)) {
            runs = self
                .written
                .wait(runs)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        runs.insert(rec.run.clone(), entry);
    }

    /// The unwritten record of run `run`, to answer for it meanwhile.
    pub fn get(&self, run: &str) -> Option<RunRecord> {
        match self.lock().get(run) {
            Some(Entry::Waiting { rec, .. }) => Some(RunRecord::clone(rec)),
            _ => None,
        }
    }

    /// The records waiting at least `age` (all of them with zero), marked
    /// as being written: the caller writes them, then calls
    /// [`Deferred::done`] with them.
    pub fn due(&self, age: Duration) -> Vec<RunRecord> {
        let mut runs = self.lock();
        let now = Instant::now();
        let ids: Vec<String> = runs
            .iter()
            .filter(|(_, e)| matches!(e, Entry::Waiting { since, .. } if now.duration_since(*since) >= age))
            .map(|(id, _)| id.clone())
            .collect();
        ids.into_iter()
            .filter_map(|id| match runs.insert(id, Entry::Writing) {
                Some(Entry::Waiting { rec, .. }) => Some(*rec),
                _ => None,
            })
            .collect()
    }

    /// Run `run`'s waiting record, marked as being written (as
    /// [`Deferred::due`] for one run).
    pub fn take(&self, run: &str) -> Option<RunRecord> {
        let mut runs = self.lock();
        match runs.get(run) {
            Some(Entry::Waiting { .. }) => match runs.insert(run.to_string(), Entry::Writing) {
                Some(Entry::Waiting { rec, .. }) => Some(*rec),
                _ => None,
            },
            _ => None,
        }
    }

    /// The records from [`Deferred::due`] or [`Deferred::take`] are
    /// written (or failed: the run's next write makes that good).
    pub fn done(&self, recs: &[RunRecord]) {
        let mut runs = self.lock();
        for rec in recs {
            runs.remove(&rec.run);
        }
        drop(runs);
        self.written.notify_all();
    }

    /// Before another state of run `run` is written: forget its waiting
    /// state, or wait until the write of it has been made.
    pub fn settle(&self, run: &str) {
        let mut runs = self.lock();
        loop {
            match runs.get(run) {
                None => return,
                Some(Entry::Waiting { .. }) => {
                    runs.remove(run);
                    return;
                }
                Some(Entry::Writing) => {
                    runs = self
                        .written
                        .wait(runs)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                }
            }
        }
    }

    /// How long until the oldest waiting record is [`DEFER`] old (`None`:
    /// none waits).
    pub fn next_due(&self) -> Option<Duration> {
        let now = Instant::now();
        self.lock()
            .values()
            .filter_map(|e| match e {
                Entry::Waiting { since, .. } => {
                    Some((*since + DEFER).saturating_duration_since(now))
                }
                Entry::Writing => None,
            })
            .min()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::record::{Origin, Owner, RunState};

    fn rec(run: &str) -> RunRecord {
        RunRecord::new(
            run.into(),
            RunState::Running,
            Owner::Program(1),
            "f".into(),
            Origin::Cli,
        )
    }

    #[test]
    fn an_end_drops_the_waiting_running() {
        let d = Deferred::default();
        d.defer(&rec("a"));
        assert!(d.get("a").is_some());
        d.settle("a");
        assert!(d.get("a").is_none());
        assert!(d.due(Duration::ZERO).is_empty());
    }

    #[test]
    fn an_end_waits_for_the_running_being_written() {
        let d = std::sync::Arc::new(Deferred::default());
        d.defer(&rec("a"));
        let taken = d.due(Duration::ZERO);
        assert_eq!(taken.len(), 1);
        assert!(d.take("a").is_none(), "taken once");
        let (tx, rx) = std::sync::mpsc::channel();
        let d2 = std::sync::Arc::clone(&d);
        let t = std::thread::spawn(move || {
            d2.settle("a");
            tx.send(()).unwrap();
        });
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err(), "waits");
        d.done(&taken);
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
        t.join().unwrap();
    }

    #[test]
    fn only_old_enough_records_are_due() {
        let d = Deferred::default();
        d.defer(&rec("a"));
        assert!(d.due(Duration::from_secs(3600)).is_empty());
        assert!(d.next_due().is_some_and(|t| t <= DEFER));
        assert_eq!(d.due(Duration::ZERO).len(), 1);
        assert!(d.next_due().is_none());
    }
}
