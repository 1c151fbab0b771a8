//! The handle of one executing run: stop it, and wait for the output it
//! prints while it still runs.
//!
//! The runner creates a [`RunHandle`] when a run starts executing and
//! closes it when the run's end is recorded; `Runner::handle` finds the
//! handle of a live run by id. Stopping goes through the run's own
//! [`AbortSignal`]: the step being executed gets SIGTERM on its process
//! group, then SIGKILL after `kill_grace`, and the run ends as aborted.
//!
//! Live output is a notification, not a copy: the bytes go to the run's
//! output file (`output.rs`; a small output is held in memory for at most
//! `output::HOLD` first, and its writing out counts as a write), and the
//! handle counts the writes. A follower
//! (`follow.rs`) notes the count, reads the file from its own offset, and
//! when there is nothing new waits on the handle for the next write or the
//! run's end. The handle holds no output, so a slow follower cannot make
//! it grow.

use std::io;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::sys::AbortSignal;

pub use crate::state::output::Stream;

/// What followers wait for.
#[derive(Debug, Default)]
struct Written {
    /// Output writes so far.
    count: u64,
    /// The run's end is recorded: nothing more will be written.
    closed: bool,
}

/// Whether a cancel was accepted and whether the run's end is decided:
/// both under one lock, so that a cancel is accepted exactly when the run
/// will end `cancelled` (a cancel racing the run's own end never answers
/// "cancelled" for a run recorded `finished`).
#[derive(Debug, Default)]
struct Fate {
    cancelled: bool,
    ended: bool,
    /// The newer run of its concurrency group the cancel made room for.
    superseded_by: Option<String>,
}

/// One executing run, shared by the thread executing it and anyone who
/// wants to stop or follow it.
#[derive(Debug)]
pub struct RunHandle {
    abort: AbortSignal,
    fate: Mutex<Fate>,
    written: Mutex<Written>,
    changed: Condvar,
}

impl RunHandle {
    /// A handle for a run about to execute.
    ///
    /// # Errors
    /// The abort pipe cannot be created (out of file descriptors).
    pub fn new() -> io::Result<RunHandle> {
        Ok(RunHandle {
            abort: AbortSignal::new()?,
            fate: Mutex::default(),
            written: Mutex::default(),
            changed: Condvar::new(),
        })
    }

    /// Stop the run: its current step gets SIGTERM on its process group
    /// and SIGKILL after `kill_grace`; no further step starts. Idempotent.
    pub fn abort(&self) {
        self.abort.trigger();
    }

    /// Stop the run on request: like [`RunHandle::abort`], and the run
    /// ends `cancelled`, whatever its steps do meanwhile. False, and
    /// nothing done, once the run's end is decided ([`RunHandle::end`]).
    pub fn cancel(&self) -> bool {
        self.cancel_for(None)
    }

    /// [`RunHandle::cancel`], for run `by` of its concurrency group
    /// (`policy = "cancel_running"`) when given: the record names it.
    pub(super) fn cancel_for(&self, by: Option<&str>) -> bool {
        let mut fate = lock(&self.fate);
        if fate.ended {
            return false;
        }
        fate.cancelled = true;
        if fate.superseded_by.is_none() {
            fate.superseded_by = by.map(str::to_string);
        }
        drop(fate);
        self.abort();
        true
    }

    /// The run a cancel made room for, once the run's end is decided.
    pub(super) fn superseded_by(&self) -> Option<String> {
        lock(&self.fate).superseded_by.clone()
    }

    /// Decide the run's end: no cancel is accepted from now on. Whether
    /// one was (the run then ends `cancelled`). Called by the runner once
    /// the steps are over, before the end state is chosen.
    pub(super) fn end(&self) -> bool {
        let mut fate = lock(&self.fate);
        fate.ended = true;
        fate.cancelled
    }

    /// The signal the executing steps poll.
    pub(super) fn signal(&self) -> &AbortSignal {
        &self.abort
    }

    /// The run wrote output (already in its output file): wake followers.
    /// Called by the runner as it writes.
    pub(crate) fn wrote(&self) {
        lock(&self.written).count += 1;
        self.changed.notify_all();
    }

    /// The run's end is recorded: wake followers for the last time.
    /// Called by the runner.
    pub(crate) fn close(&self) {
        lock(&self.written).closed = true;
        self.changed.notify_all();
    }

    /// Output writes so far. A follower notes this before it reads the
    /// output file, then passes it to [`RunHandle::wait_output`].
    pub fn writes(&self) -> u64 {
        lock(&self.written).count
    }

    /// Wait at most `timeout` for a write after the first `seen` ones, or
    /// for the run's end; false once the run has ended (waiting again
    /// returns at once).
    pub fn wait_output(&self, seen: u64, timeout: Duration) -> bool {
        let w = lock(&self.written);
        let (w, _) = self
            .changed
            .wait_timeout_while(w, timeout, |w| w.count == seen && !w.closed)
            .unwrap_or_else(|e| e.into_inner());
        !w.closed
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::thread;

    #[test]
    fn a_waiting_follower_wakes_on_a_write_and_on_the_end() {
        let h = Arc::new(RunHandle::new().unwrap());
        // Nothing new: the wait times out and the run is still on.
        assert!(h.wait_output(0, Duration::from_millis(1)));
        let seen = h.writes();
        let writer = Arc::clone(&h);
        let t = thread::spawn(move || writer.wrote());
        // An hour-long wait that only a write can end in time.
        assert!(h.wait_output(seen, Duration::from_secs(3600)));
        t.join().unwrap();
        assert_eq!(h.writes(), seen + 1);
        let closer = Arc::clone(&h);
        let t = thread::spawn(move || closer.close());
        assert!(!h.wait_output(h.writes(), Duration::from_secs(3600)));
        t.join().unwrap();
        assert!(!h.wait_output(h.writes(), Duration::from_secs(3600)));
    }

    #[test]
    fn a_cancel_is_accepted_only_before_the_end_is_decided() {
        let h = RunHandle::new().unwrap();
        assert!(h.cancel());
        assert!(h.signal().is_triggered());
        assert!(h.end(), "the accepted cancel decides the end");
        let late = RunHandle::new().unwrap();
        assert!(!late.end());
        assert!(!late.cancel(), "a cancel after the end is refused");
        assert!(!late.signal().is_triggered());
    }

    #[test]
    fn abort_triggers_the_signal_once() {
        let h = RunHandle::new().unwrap();
        assert!(!h.signal().is_triggered());
        h.abort();
        h.abort();
        assert!(h.signal().is_triggered());
    }
}
