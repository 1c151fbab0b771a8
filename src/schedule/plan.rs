//! What a schedule's due occurrences come to, as a pure function of the
//! schedule, the last occurrence handled and the time now: the clock is an
//! argument, so tests drive it through jumps and downtimes with fixed
//! instants.
//!
//! The rules (docs/schedules.md):
//! - an occurrence is due once its firing time (occurrence + the
//!   schedule's jitter delay) has passed, and it is after the last one
//!   handled: a clock set back fires nothing until it passes that again;
//! - the newest due occurrence is *on time* when its firing is at most
//!   [`GRACE`] late; every other due one was *missed* (trigd was down, or
//!   the clock jumped forward) and goes by `catch_up`;
//! - `skip`: one `skipped` record for the missed ones; `once`: one run for
//!   all of them (the on-time one, else the newest); `all`: one run each,
//!   the newest [`CATCH_UP_MAX`], the older ones one `skipped` record;
//! - an inactive schedule records each due occurrence `skipped`.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use crate::config::schedules::{CatchUp, Schedule, CATCH_UP_MAX};
use crate::state::record::SkipReason;

/// How late a firing may be and still count as on time.
pub const GRACE: Duration = Duration::from_secs(5);

/// Missed occurrences are counted up to this many (a record says "at
/// least" by carrying the bound).
pub const COUNT_MAX: u64 = 10_000;

/// What to do with one or more occurrences.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Start a run of occurrence `at`, which stands for `missed` earlier
    /// ones too.
    Run {
        /// The occurrence.
        at: Timestamp,
        /// Earlier missed occurrences it stands for (`catch_up = "once"`).
        missed: u64,
    },
    /// Record occurrences up to `at` skipped: `at` and `before` earlier
    /// ones.
    Skip {
        /// The newest occurrence it covers.
        at: Timestamp,
        /// How many earlier ones it covers too.
        before: u64,
        /// Why.
        reason: SkipReason,
    },
}

/// The actions for the occurrences of `s` due at `now` after `last`, and
/// the new last occurrence handled; `None` when nothing is due.
pub fn plan(
    s: &Schedule,
    delay: Duration,
    last: Timestamp,
    now: Timestamp,
) -> Option<(Vec<Action>, Timestamp)> {
    let limit = now
        .checked_sub(SignedDuration::try_from(delay).ok()?)
        .ok()?;
    let newest = newest_at_or_before(s, limit)?;
    if newest <= last {
        return None;
    }
    let due = count_between(s, last, newest);
    let late = now
        .duration_since(newest)
        .unsigned_abs()
        .saturating_sub(delay);
    let on_time = late <= GRACE;
    let mut out = Vec::new();
    if !s.active {
        out.push(Action::Skip {
            at: newest,
            before: due - 1,
            reason: SkipReason::Inactive,
        });
        return Some((out, newest));
    }
    let missed = if on_time { due - 1 } else { due };
    match s.catch_up {
        CatchUp::Skip => {
            if missed > 0 {
                let at = if on_time {
                    newest_before(s, newest, last).unwrap_or(newest)
                } else {
                    newest
                };
                out.push(Action::Skip {
                    at,
                    before: missed - 1,
                    reason: SkipReason::Missed,
                });
            }
            if on_time {
                out.push(Action::Run {
                    at: newest,
                    missed: 0,
                });
            }
        }
        CatchUp::Once => {
            let missed = if on_time { missed } else { missed - 1 };
            out.push(Action::Run { at: newest, missed });
        }
        CatchUp::All => all(s, last, newest, due, &mut out),
    }
    Some((out, newest))
}

/// `catch_up = "all"`: the newest [`CATCH_UP_MAX`] of the `due`
/// occurrences up to `newest` run, oldest first; older ones are skipped.
fn all(s: &Schedule, last: Timestamp, newest: Timestamp, due: u64, out: &mut Vec<Action>) {
    let mut runs = vec![newest];
    while runs.len() < CATCH_UP_MAX {
        let Some(prev) = runs.last().and_then(|t| newest_before(s, *t, last)) else {
            break;
        };
        runs.push(prev);
    }
    let rest = due.saturating_sub(runs.len() as u64);
    if rest > 0 {
        if let Some(at) = runs.last().and_then(|t| newest_before(s, *t, last)) {
            out.push(Action::Skip {
                at,
                before: rest - 1,
                reason: SkipReason::CatchUpMax,
            });
        }
    }
    out.extend(
        runs.into_iter()
            .rev()
            .map(|at| Action::Run { at, missed: 0 }),
    );
}

/// How many occurrences are in `(last, newest]`, counted up to
/// [`COUNT_MAX`].
fn count_between(s: &Schedule, last: Timestamp, newest: Timestamp) -> u64 {
    let mut n = 0;
    let mut t = last;
    while n < COUNT_MAX {
        match s.cron.next_after(t, &s.zone) {
            Some(next) if next <= newest => {
                n += 1;
                t = next;
            }
            _ => break,
        }
    }
    n
}

/// The newest occurrence before `t` and after `last`.
fn newest_before(s: &Schedule, t: Timestamp, last: Timestamp) -> Option<Timestamp> {
    let before = t.checked_sub(SignedDuration::from_millis(1)).ok()?;
    newest_at_or_before(s, before).filter(|p| *p > last)
}

/// The newest occurrence at or before `t`: occurrences are found forward
/// only, so look forward from ever earlier starts until one is found.
pub fn newest_at_or_before(s: &Schedule, t: Timestamp) -> Option<Timestamp> {
    const SPANS: [i64; 6] = [
        60,
        3_600,
        86_400,
        32 * 86_400,
        367 * 86_400,
        9 * 367 * 86_400,
    ];
    for span in SPANS {
        let from = t.checked_sub(SignedDuration::from_secs(span)).ok()?;
        let mut found = None;
        let mut at = from;
        // Bounded: at most a span's worth of occurrences, and the spans
        // grow only while none was found in the smaller one.
        for _ in 0..100_000 {
            match s.cron.next_after(at, &s.zone) {
                Some(next) if next <= t => {
                    found = Some(next);
                    at = next;
                }
                _ => break,
            }
        }
        if found.is_some() {
            return found;
        }
    }
    None
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
