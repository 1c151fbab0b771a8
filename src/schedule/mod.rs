//! Schedules: functions started by the clock (`[[functions.schedules]]`,
//! docs/schedules.md). A schedule is one more entry kind, an adapter: its
//! values are compiled from the config (`config::schedules`), and each
//! firing is an ordinary run (`invoke::job` → `Runner::start_async`) whose
//! record says `"By": "schedule:<program>/<function>/<name>"` and the
//! occurrence it is (`ScheduledAt`). What is not a second engine but is
//! new here:
//!
//! ```text
//! overdue.rs expect_every: functions without a recent success, for every trigger
//! cron.rs    the expression and its occurrences in a time zone (DST rules)
//! plan.rs    what due occurrences come to: run, skip, catch up (pure; the clock is an argument)
//! timer.rs   the one thread: a heap of next firings, overlap, the marks
//! ```
//!
//! # Several instances
//!
//! Without a database every instance whose `[server] schedules` is
//! `"fire"` (the default) fires every schedule; `"off"` leaves it to
//! others (`trigd check` warns when `instance` looks like one of several
//! and `[state] url` is not set). With `[state] url` "fires once per
//! cluster" is one step in [`timer`]: before an occurrence is handled,
//! the instance inserts (schedule id, occurrence) into
//! `trigd_occurrences` (`state::schedules::MarkFile::claim`); one whose
//! insert finds the row there skips the occurrence silently, and while
//! the database fails none is handled (logged).

pub mod cron;
pub mod overdue;
pub mod plan;
pub mod timer;

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use jiff::Timestamp;

/// Where the timer reads the time: the system clock, or in tests a
/// function of their own. A function pointer, not a trait: one real clock.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    /// Now.
    pub now: fn() -> Timestamp,
}

impl Clock {
    /// The system clock.
    pub const SYSTEM: Clock = Clock {
        now: Timestamp::now,
    };
}

/// What the timer shares with the rest of trigd: a bell that wakes it (a
/// reload rings it) and what it last did per schedule, for pages,
/// `/api/schedules` and metrics.
#[derive(Debug)]
pub struct Board {
    /// When trigd started (an overdue window with no success known
    /// counts from here).
    pub started: Timestamp,
    rung: Mutex<bool>,
    bell: Condvar,
    /// By schedule id.
    pub status: Mutex<BTreeMap<Arc<str>, Status>>,
}

/// What became of one schedule lately.
#[derive(Debug, Clone, Default)]
pub struct Status {
    /// The last occurrence handled (run or skipped).
    pub last: Option<Timestamp>,
    /// What became of the last one: `started <run>` or `skipped: <why>`.
    pub outcome: String,
}

impl Default for Board {
    fn default() -> Board {
        Board {
            started: Timestamp::now(),
            rung: Mutex::new(false),
            bell: Condvar::new(),
            status: Mutex::new(BTreeMap::new()),
        }
    }
}

impl Board {
    /// Wake the timer (the config changed).
    pub fn ring(&self) {
        *self.rung.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.bell.notify_all();
    }

    /// Sleep at most `limit`, less when rung.
    pub fn wait(&self, limit: Duration) {
        let mut rung = self.rung.lock().unwrap_or_else(|e| e.into_inner());
        if !*rung {
            rung = self
                .bell
                .wait_timeout(rung, limit)
                .map_or_else(|e| e.into_inner().0, |r| r.0);
        }
        *rung = false;
    }
}
