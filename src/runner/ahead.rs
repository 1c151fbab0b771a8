//! Runs accepted ahead of their start: a schedule's wake writes the records
//! of the runs due at an instant shortly before it — durably, `queued` with
//! `RetryAt` that instant — so that at the instant only the hand-off to a
//! slot or the queue is left (issue 33 point 10: the write and its sync
//! were most of a wake's 25–100 ms).
//!
//! Never early: the runner holds a run accepted ahead until the caller
//! starts it ([`Runner::start_ahead`]), at its instant; a run resumed after
//! a restart before its instant waits for its `RetryAt` like the next
//! attempt of a retried run. Never twice nor lost: the record is the
//! occurrence's one record, written before the instant and ended or
//! started by whatever follows (a start, a withdrawal, a restart).

use std::io;
use std::sync::Arc;

use super::queue::{Queued, Waiter};
use super::{lock, Place, Refusal, RunError, RunState, Runner, Staged};
use crate::state::time::Time;

/// A run recorded `queued` until its instant, durably, and not started:
/// [`Runner::start_ahead`] starts it, [`Runner::withdraw`] ends it.
pub struct Ahead(Staged);

impl Ahead {
    /// Its run id.
    pub fn run(&self) -> &str {
        &self.0.rec.run
    }
}

impl Runner {
    /// Record each job `queued` until its instant (`RetryAt`), with one
    /// write and one sync for all; nothing is promised a slot yet. `None`
    /// where runs are not kept in the run log (a shared database, whose
    /// `queued` records any instance may take, or no state dir): start them
    /// at their instant with [`Runner::start_async_all`].
    ///
    /// # Errors
    /// The records cannot be written or synced (none counts as written).
    pub fn accept_ahead(&self, jobs: Vec<(super::Job, Time)>) -> Option<io::Result<Vec<Ahead>>> {
        if self.cluster.get().is_some() {
            return None;
        }
        let store = self.store.as_ref()?;
        let staged: Vec<Staged> = jobs
            .into_iter()
            .map(|(mut job, at)| {
                let mut rec = self.new_record(&job, true);
                job.id = Some(rec.run.clone());
                rec.retry_at = Some(at);
                let group = job.group();
                rec.input = Some(super::run_input(&job, group.as_ref()));
                Staged {
                    key: job.slot_key(),
                    n: job.concurrency(),
                    group,
                    held: 0,
                    in_memory: false,
                    place: Place::Queue,
                    rec,
                    job,
                }
            })
            .collect();
        let recs: Vec<_> = staged.iter().map(|st| &st.rec).collect();
        Some(
            store
                .append_all(&recs)
                .map(|()| staged.into_iter().map(Ahead).collect()),
        )
    }

    /// Start runs accepted ahead, now that their instant has come: each is
    /// given a slot or a queue place as [`Runner::start_async`] would, all
    /// under one hold of the slots lock (1,000 runs taking it twice each,
    /// between sync requests wanting it too, took up to 40 ms under load);
    /// the answers in their order. A run refused (queue full, shutting
    /// down) keeps its `queued` record: the caller ends it.
    pub fn start_ahead(self: &Arc<Self>, ahead: Vec<Ahead>) -> Vec<Result<String, RunError>> {
        let mut done = Vec::with_capacity(ahead.len());
        let mut rooms = Vec::new();
        let granted = {
            let mut s = lock(&self.slots);
            for Ahead(mut st) in ahead {
                // Started now: its record says so when the run starts.
                st.rec.retry_at = None;
                done.push(match self.reserve_in(&mut s, &st) {
                    Ok(Place::Queue) => {
                        s.reserved -= 1;
                        let run = st.rec.run.clone();
                        rooms.push((s.make_room(st.group.as_ref(), &run), run.clone()));
                        s.push_back(Waiter::Async(Queued {
                            run: run.clone(),
                            program: st.job.program,
                            cfg: st.job.cfg,
                            key: st.key,
                            concurrency: st.n,
                            group: st.group,
                            taken: None,
                        }));
                        Done::Queued(run)
                    }
                    Ok(place) => {
                        st.place = place;
                        Done::Later(Box::new(st))
                    }
                    Err(r) => Done::Refused(r),
                });
            }
            s.fill()
        };
        for (room, run) in rooms {
            self.supersede(room, &run);
        }
        self.start_granted(granted);
        done.into_iter()
            .map(|d| match d {
                Done::Queued(run) => Ok(run),
                Done::Later(st) => self.hand_on(*st, Ok(())),
                Done::Refused(r) => Err(self.refused(r)),
            })
            .collect()
    }

    /// End a run accepted ahead that is not to start (its schedule was
    /// removed or changed before its instant): recorded `cancelled`,
    /// saying `why`, durably. Its `ScheduledAt` goes, so that the
    /// occurrence counts as not handled.
    pub fn withdraw(&self, ahead: Ahead, why: &str) {
        let Ahead(mut st) = ahead;
        st.rec.scheduled_at = None;
        st.rec.retry_at = None;
        self.end_unstarted(st.rec, RunState::Cancelled, why, true);
    }
}

/// What became of a run accepted ahead under the slots lock.
enum Done {
    /// Queued for a slot.
    Queued(String),
    /// Given a slot, or skipped by its group: handed on after the lock.
    Later(Box<Staged>),
    /// Refused.
    Refused(Refusal),
}
