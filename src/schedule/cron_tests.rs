use super::*;

fn tz(name: &str) -> TimeZone {
    TimeZone::get(name).unwrap()
}

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

/// The next `n` occurrences after `from`, as RFC 3339 UTC text.
fn next(expr: &str, zone: &str, from: &str, n: usize) -> Vec<String> {
    let c = Cron::parse(expr).unwrap();
    let tz = tz(zone);
    let mut t = at(from);
    let mut out = Vec::new();
    for _ in 0..n {
        t = c.next_after(t, &tz).unwrap();
        out.push(t.to_string());
    }
    out
}

#[test]
fn five_and_six_fields_and_names() {
    assert_eq!(
        next("*/15 * * * *", "UTC", "2026-01-05T10:07:30Z", 2),
        ["2026-01-05T10:15:00Z", "2026-01-05T10:30:00Z"]
    );
    assert_eq!(
        next("*/20 * * * * *", "UTC", "2026-01-05T10:07:30Z", 2),
        ["2026-01-05T10:07:40Z", "2026-01-05T10:08:00Z"]
    );
    assert_eq!(Cron::parse("@daily"), Cron::parse("0 0 * * *"));
    assert_eq!(Cron::parse("@midnight"), Cron::parse("0 0 * * *"));
    assert_eq!(Cron::parse("@annually"), Cron::parse("@yearly"));
    assert_eq!(Cron::parse("0 * * * *"), Cron::parse("@hourly"));
    assert_eq!(
        Cron::parse("0 0 * JAN-mar Mon-fri"),
        Cron::parse("0 0 * 1-3 1-5")
    );
    // 7 is Sunday, as 0 is.
    assert_eq!(Cron::parse("0 0 * * 7"), Cron::parse("0 0 * * 0"));
    assert_eq!(Cron::parse("0 0 * * sun"), Cron::parse("0 0 * * 0"));
    // `N/step` runs to the end of the range.
    assert_eq!(Cron::parse("50/5 * * * *"), Cron::parse("50,55 * * * *"));
}

#[test]
fn restricted_day_fields_match_either_as_in_vixie_cron() {
    // The 13th or a Friday: Friday 2026-02-06, then Friday the 13th.
    assert_eq!(
        next("0 0 13 * 5", "UTC", "2026-02-01T00:00:00Z", 3),
        [
            "2026-02-06T00:00:00Z",
            "2026-02-13T00:00:00Z",
            "2026-02-20T00:00:00Z"
        ]
    );
    // A `*` day field: both must match (every Friday in any day range).
    assert_eq!(
        next("0 0 */2 * 5", "UTC", "2026-02-01T00:00:00Z", 1),
        ["2026-02-13T00:00:00Z"]
    );
}

#[test]
fn impossible_dates_never_fire_and_leap_days_do() {
    assert!(Cron::parse("0 0 30 2 *").unwrap().never_fires());
    assert!(Cron::parse("0 0 31 4,6,9,11 *").unwrap().never_fires());
    assert!(!Cron::parse("0 0 31 4,5 *").unwrap().never_fires());
    assert!(
        !Cron::parse("0 0 30 2 1").unwrap().never_fires(),
        "or Mondays"
    );
    let leap = Cron::parse("0 0 29 2 *").unwrap();
    assert!(!leap.never_fires());
    assert_eq!(
        next("0 0 29 2 *", "UTC", "2096-03-01T00:00:00Z", 1),
        ["2104-02-29T00:00:00Z"],
        "2100 is no leap year"
    );
}

#[test]
fn bad_expressions_say_what_and_where() {
    let e = |s: &str| Cron::parse(s).unwrap_err();
    assert!(e("* * * *").starts_with("4 fields"), "{}", e("* * * *"));
    assert!(
        e("61 * * * *").contains("minute field `61`"),
        "{}",
        e("61 * * * *")
    );
    assert!(e("0 24 * * *").contains("hour"));
    assert!(e("0 0 0 * *").contains("day of month"));
    assert!(e("0 0 * 13 *").contains("month"));
    assert!(e("0 0 * * 8").contains("day of week"));
    assert!(e("*/0 * * * *").contains("step"));
    assert!(e("5-1 * * * *").contains("backwards"));
    assert!(e("@reboot").contains("not a time"));
    assert!(e("@often").contains("unknown name"));
    for hostile in [
        "",
        " ",
        ",",
        "-",
        "1-",
        "-1",
        "*/",
        "/5",
        "**",
        "1,,2",
        "fri-mon * * * *",
        "é * * * *",
        "99999999999999999999 * * * *",
        "* * * * * * *",
        "0 0 * * mon-",
        "+5 * * * *",
        "*/+5 * * * *",
        "0 0 * * +1",
        "0 0 1-+3 * *",
    ] {
        assert!(Cron::parse(hostile).is_err(), "{hostile:?}");
    }
    assert!(e(&"* ".repeat(400)).contains("longer than"));
}

#[test]
fn a_time_skipped_by_spring_forward_fires_once_right_after_the_gap() {
    // New York, 2026-03-08: 02:00 EST becomes 03:00 EDT (07:00Z).
    assert_eq!(
        next("30 2 * * *", "America/New_York", "2026-03-07T12:00:00Z", 2),
        ["2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"]
    );
    // Every quarter hour: 02:00-02:45 collapse into one firing at 03:00.
    assert_eq!(
        next(
            "*/15 * * * *",
            "America/New_York",
            "2026-03-08T06:40:00Z",
            3
        ),
        [
            "2026-03-08T06:45:00Z",
            "2026-03-08T07:00:00Z",
            "2026-03-08T07:15:00Z"
        ]
    );
    // Berlin, 2026-03-29: 02:00 CET becomes 03:00 CEST (01:00Z).
    assert_eq!(
        next("30 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z", 2),
        ["2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"]
    );
}

#[test]
fn a_time_repeated_by_fall_back_fires_once() {
    // New York, 2026-11-01: 02:00 EDT becomes 01:00 EST; 01:30 is twice.
    assert_eq!(
        next("30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z", 2),
        ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"]
    );
    // Berlin, 2026-10-25: 03:00 CEST becomes 02:00 CET; 02:30 is twice.
    assert_eq!(
        next("30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z", 2),
        ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]
    );
    // From inside the second 01:xx hour nothing of it fires again.
    assert_eq!(
        next(
            "*/30 * * * *",
            "America/New_York",
            "2026-11-01T06:10:00Z",
            1
        ),
        ["2026-11-01T07:00:00Z"]
    );
}

#[test]
fn the_shortest_interval_bounds_jitter() {
    let c = Cron::parse("0 0 1 * *").unwrap();
    let short = c.shortest_interval(at("2026-01-01T00:00:00Z"), &TimeZone::UTC, 24);
    assert_eq!(short, Some(jiff::SignedDuration::from_hours(28 * 24)));
}

/// A day of the month on one weekday can be 11 years apart (Feb 7 on a
/// Sunday: 2027, 2038), Feb 29 on one weekday 28 or more: the search
/// covers the calendar's whole 400-year cycle (the fuzzer found
/// `0 1 7 2 */7` with no next occurrence after 2027 in a 9-year search).
#[test]
fn rare_days_have_a_next_occurrence_years_away() {
    assert_eq!(
        next("0 1 7 2 */7", "UTC", "2026-03-07T00:00:00Z", 3),
        [
            "2027-02-07T01:00:00Z",
            "2038-02-07T01:00:00Z",
            "2044-02-07T01:00:00Z"
        ]
    );
    // `*/7` starts with `*`: the weekday field counts as unrestricted for
    // Vixie's either-day rule, so both must hold (29 February on a Sunday).
    for t in next("0 0 29 2 */7", "UTC", "2026-01-01T00:00:00Z", 3) {
        let d = at(&t).to_zoned(tz("UTC")).date();
        assert_eq!(
            (d.month(), d.day(), d.weekday()),
            (2, 29, jiff::civil::Weekday::Sunday),
            "{t}"
        );
    }
}

/// A time equal to the gap's first missing minute is in the gap too: it
/// fires at the change, not at the zone's previous transition (which
/// dropped the day, or moved it months early when that was in the future).
#[test]
fn a_time_at_the_very_start_of_a_gap_fires_right_after_it() {
    // Berlin, 2027-03-28: 02:00 CET becomes 03:00 CEST (01:00Z).
    assert_eq!(
        next("0 2 28,29 3 *", "Europe/Berlin", "2027-01-01T00:00:00Z", 2),
        ["2027-03-28T01:00:00Z", "2027-03-29T00:00:00Z"]
    );
    assert_eq!(
        next("0 2 27-31 3 *", "Europe/Berlin", "2027-01-01T00:00:00Z", 3),
        [
            "2027-03-27T01:00:00Z",
            "2027-03-28T01:00:00Z",
            "2027-03-29T00:00:00Z"
        ]
    );
    // Six fields, seconds first.
    assert_eq!(
        next("0 0 2 28 3 *", "Europe/Berlin", "2027-01-01T00:00:00Z", 1),
        ["2027-03-28T01:00:00Z"]
    );
    // New York, 2027-03-14: 02:00 EST becomes 03:00 EDT (07:00Z).
    assert_eq!(
        next("0 2 14 3 *", "America/New_York", "2027-01-01T00:00:00Z", 1),
        ["2027-03-14T07:00:00Z"]
    );
    // Santiago, 2027-09-05: 00:00 -04 becomes 01:00 -03 (04:00Z); the
    // previous transition (2027-04-04 03:00Z) is in the future from here.
    for expr in ["0 0 5 9 *", "0 0 * 9 0"] {
        assert_eq!(
            next(expr, "America/Santiago", "2027-01-01T00:00:00Z", 1),
            ["2027-09-05T04:00:00Z"],
            "{expr}"
        );
    }
}

#[test]
fn the_shortest_interval_counts_a_gap_at_its_start() {
    // Daily 02:00 in Berlin: 23 hours across the spring-forward night.
    let c = Cron::parse("0 2 * * *").unwrap();
    let short = c.shortest_interval(at("2027-03-20T00:00:00Z"), &tz("Europe/Berlin"), 100);
    assert_eq!(short, Some(jiff::SignedDuration::from_hours(23)));
}

/// The weekday range is 0-7 as in Vixie cron, so `N/step` runs to 7,
/// Sunday, which is one day with 0.
#[test]
fn weekday_n_step_runs_to_sunday() {
    assert_eq!(Cron::parse("0 0 * * 5/1"), Cron::parse("0 0 * * 5-7"));
    assert_eq!(Cron::parse("0 0 * * 5/1"), Cron::parse("0 0 * * 0,5,6"));
    assert_eq!(Cron::parse("0 0 * * 1/3"), Cron::parse("0 0 * * 0,1,4"));
    assert_eq!(Cron::parse("0 0 * * 0/3"), Cron::parse("0 0 * * 0,3,6"));
    assert_eq!(Cron::parse("0 0 * * 0/7"), Cron::parse("0 0 * * 7"));
    // Friday 2026-01-02, Saturday, Sunday, then Friday again.
    assert_eq!(
        next("0 0 * * 5/1", "UTC", "2026-01-01T12:00:00Z", 4),
        [
            "2026-01-02T00:00:00Z",
            "2026-01-03T00:00:00Z",
            "2026-01-04T00:00:00Z",
            "2026-01-09T00:00:00Z"
        ]
    );
}
