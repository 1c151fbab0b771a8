use jiff::tz::TimeZone;

use super::*;
use crate::config::schedules::Overlap;
use crate::schedule::cron::Cron;

fn sched(expr: &str, catch_up: CatchUp) -> Schedule {
    Schedule {
        name: "s".into(),
        expression: expr.into(),
        cron: Cron::parse(expr).unwrap(),
        zone_name: "UTC".into(),
        zone: TimeZone::UTC,
        values: Vec::new(),
        jitter: Duration::ZERO,
        active: true,
        catch_up,
        overlap: Overlap::Skip,
    }
}

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

/// Drive `s` from `last` through each `now` in turn, as the timer does:
/// the actions of each step, with the last occurrence carried over.
fn drive(s: &Schedule, last: &str, nows: &[&str]) -> Vec<Vec<Action>> {
    let mut last = at(last);
    let mut out = Vec::new();
    for now in nows {
        match plan(s, Duration::ZERO, last, at(now)) {
            Some((actions, newest)) => {
                assert!(newest > last, "the mark only moves forward");
                last = newest;
                out.push(actions);
            }
            None => out.push(Vec::new()),
        }
    }
    out
}

fn run(t: &str) -> Action {
    Action::Run {
        at: at(t),
        missed: 0,
    }
}

#[test]
fn on_time_occurrences_run_once_each() {
    let s = sched("*/5 * * * *", CatchUp::Skip);
    let steps = drive(
        &s,
        "2026-01-01T10:00:00Z",
        &[
            "2026-01-01T10:04:59Z",
            "2026-01-01T10:05:00.2Z",
            "2026-01-01T10:05:01Z",
            "2026-01-01T10:10:03Z",
        ],
    );
    assert_eq!(
        steps,
        [
            vec![],
            vec![run("2026-01-01T10:05:00Z")],
            vec![],
            vec![run("2026-01-01T10:10:00Z")]
        ]
    );
}

#[test]
fn a_clock_set_back_fires_nothing_twice() {
    let s = sched("* * * * *", CatchUp::All);
    // 10:05 ran; the clock steps back an hour, then comes forward again.
    let steps = drive(
        &s,
        "2026-01-01T10:04:00Z",
        &[
            "2026-01-01T10:05:00Z",
            "2026-01-01T09:05:30Z",
            "2026-01-01T09:06:00Z",
            "2026-01-01T10:05:59Z",
            "2026-01-01T10:06:00Z",
        ],
    );
    assert_eq!(
        steps,
        [
            vec![run("2026-01-01T10:05:00Z")],
            vec![],
            vec![],
            vec![],
            vec![run("2026-01-01T10:06:00Z")]
        ]
    );
}

#[test]
fn a_clock_jump_forward_is_no_burst_with_skip_or_once() {
    let jump = ["2026-01-01T10:00:00Z", "2026-01-01T13:00:01Z"];
    let steps = drive(
        &sched("* * * * *", CatchUp::Skip),
        "2026-01-01T09:59:00Z",
        &jump,
    );
    let skipped = Action::Skip {
        at: at("2026-01-01T12:59:00Z"),
        before: 178,
        reason: SkipReason::Missed,
    };
    assert_eq!(steps[1], [skipped, run("2026-01-01T13:00:00Z")]);
    let steps = drive(
        &sched("* * * * *", CatchUp::Once),
        "2026-01-01T09:59:00Z",
        &jump,
    );
    assert_eq!(
        steps[1],
        [Action::Run {
            at: at("2026-01-01T13:00:00Z"),
            missed: 179
        }]
    );
}

#[test]
fn catch_up_all_is_bounded_and_keeps_the_newest() {
    let steps = drive(
        &sched("* * * * *", CatchUp::All),
        "2026-01-01T09:00:00Z",
        &["2026-01-01T12:00:30Z"],
    );
    let actions = &steps[0];
    assert_eq!(actions.len(), 1 + CATCH_UP_MAX);
    assert_eq!(
        actions[0],
        Action::Skip {
            at: at("2026-01-01T10:20:00Z"),
            before: 79,
            reason: SkipReason::CatchUpMax
        }
    );
    assert_eq!(actions[1], run("2026-01-01T10:21:00Z"));
    assert_eq!(actions[CATCH_UP_MAX], run("2026-01-01T12:00:00Z"));
}

#[test]
fn a_downtime_without_an_on_time_occurrence() {
    // Down from 10:00 to 10:30:30 (every ten minutes: 10:10, 10:20, 10:30
    // missed; 10:30 is 30 s late, past the grace).
    let steps = drive(
        &sched("*/10 * * * *", CatchUp::Skip),
        "2026-01-01T10:00:00Z",
        &["2026-01-01T10:30:30Z"],
    );
    assert_eq!(
        steps[0],
        [Action::Skip {
            at: at("2026-01-01T10:30:00Z"),
            before: 2,
            reason: SkipReason::Missed
        }]
    );
    let steps = drive(
        &sched("*/10 * * * *", CatchUp::Once),
        "2026-01-01T10:00:00Z",
        &["2026-01-01T10:30:30Z"],
    );
    assert_eq!(
        steps[0],
        [Action::Run {
            at: at("2026-01-01T10:30:00Z"),
            missed: 2
        }]
    );
}

#[test]
fn jitter_delays_the_firing_and_inactive_records_skips() {
    let mut s = sched("*/10 * * * *", CatchUp::Skip);
    let delay = Duration::from_secs(30);
    let last = at("2026-01-01T10:00:00Z");
    assert_eq!(plan(&s, delay, last, at("2026-01-01T10:10:29Z")), None);
    let (actions, _) = plan(&s, delay, last, at("2026-01-01T10:10:31Z")).unwrap();
    assert_eq!(actions, [run("2026-01-01T10:10:00Z")]);
    s.active = false;
    let (actions, _) = plan(&s, delay, last, at("2026-01-01T10:10:31Z")).unwrap();
    assert_eq!(
        actions,
        [Action::Skip {
            at: at("2026-01-01T10:10:00Z"),
            before: 0,
            reason: SkipReason::Inactive
        }]
    );
}
