//! Cron expressions as crontab(5) writes them, and their occurrences in a
//! time zone.
//!
//! Written here rather than taken from a crate: `jiff-cron` (on jiff, which
//! trigd has) reads Quartz-style expressions — seconds required, weekdays
//! 1-7 from Sunday, day of month *and* day of week — so a crontab line
//! would change its meaning when moved; `croner` reads crontab but works on
//! chrono, a second time library. The crontab grammar is small; what is
//! subtle is the calendar, and that is jiff's.
//!
//! Grammar: five fields (minute hour day-of-month month day-of-week), or
//! six with seconds first; each a comma list of `*`, `N`, `N-M`, each with
//! an optional `/step` (`N/step` is `N-max/step`); months `jan`–`dec` and
//! weekdays `sun`–`sat` by name; weekday 7 is Sunday as 0 is. `@yearly`
//! (`@annually`), `@monthly`, `@weekly`, `@daily` (`@midnight`),
//! `@hourly`. As in Vixie cron, when both day fields are restricted (
//! neither starts with `*`) a day matches either; otherwise both.
//!
//! Daylight saving: an occurrence's wall-clock time is looked up in the
//! zone. A time that does not exist (skipped by a spring-forward change)
//! fires at the first instant after the gap, once however many skipped
//! times there were; a time that exists twice (repeated by a fall-back
//! change) fires once, at its first instance.

use jiff::civil::{Date, DateTime, Time};
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::Timestamp;

/// The longest expression read (longer text is refused before parsing).
const MAX_LEN: usize = 512;

/// Days searched for the next occurrence: the Gregorian calendar's whole
/// 400-year cycle, within which every date and weekday recurs (a date on
/// one weekday can be decades apart; `Cron::next_after`).
const SEARCH_DAYS: i32 = 146_097;

/// A parsed expression: one bit per allowed value of each field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    seconds: u64,
    minutes: u64,
    hours: u32,
    days: u32,
    months: u16,
    weekdays: u8,
    /// The day-of-month field starts with `*` (Vixie's rule).
    days_star: bool,
    /// The day-of-week field starts with `*`.
    weekdays_star: bool,
}

/// One field's name and range.
struct Field {
    name: &'static str,
    min: u8,
    max: u8,
    names: &'static [&'static str],
    /// The value of the first name (months count from 1).
    first_name: u8,
}

const SECOND: Field = Field {
    name: "second",
    min: 0,
    max: 59,
    names: &[],
    first_name: 0,
};
const MINUTE: Field = Field {
    name: "minute",
    min: 0,
    max: 59,
    names: &[],
    first_name: 0,
};
const HOUR: Field = Field {
    name: "hour",
    min: 0,
    max: 23,
    names: &[],
    first_name: 0,
};
const DAY: Field = Field {
    name: "day of month",
    min: 1,
    max: 31,
    names: &[],
    first_name: 1,
};
const MONTH: Field = Field {
    name: "month",
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
    first_name: 1,
};
const WEEKDAY: Field = Field {
    name: "day of week",
    min: 0,
    max: 7,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
    first_name: 0,
};

impl Cron {
    /// Parse `text`.
    ///
    /// # Errors
    /// What is wrong and in which field, one line.
    pub fn parse(text: &str) -> Result<Cron, String> {
        if text.len() > MAX_LEN {
            return Err(format!("longer than {MAX_LEN} bytes"));
        }
        let text = text.trim();
        if let Some(name) = text.strip_prefix('@') {
            return Cron::named(name);
        }
        let fields: Vec<&str> = text.split_ascii_whitespace().collect();
        let (seconds, rest) = match fields.len() {
            5 => ("0", &fields[..]),
            6 => (fields[0], &fields[1..]),
            n => {
                return Err(format!(
                    "{n} fields; a cron expression has 5 (minute hour day-of-month month \
                     day-of-week) or 6 (seconds first)"
                ))
            }
        };
        let weekdays = bits(rest[4], &WEEKDAY)?;
        Ok(Cron {
            seconds: bits(seconds, &SECOND)?,
            minutes: bits(rest[0], &MINUTE)?,
            hours: bits(rest[1], &HOUR)? as u32,
            days: bits(rest[2], &DAY)? as u32,
            months: bits(rest[3], &MONTH)? as u16,
            // Weekday 7 is Sunday, as 0 is.
            weekdays: ((weekdays | (weekdays >> 7)) & 0x7f) as u8,
            days_star: rest[2].starts_with('*'),
            weekdays_star: rest[4].starts_with('*'),
        })
    }

    /// `@hourly` and the other names.
    fn named(name: &str) -> Result<Cron, String> {
        let text = match name {
            "yearly" | "annually" => "0 0 1 1 *",
            "monthly" => "0 0 1 * *",
            "weekly" => "0 0 * * 0",
            "daily" | "midnight" => "0 0 * * *",
            "hourly" => "0 * * * *",
            "reboot" => {
                return Err("@reboot is not a time: run the program at start instead".into())
            }
            _ => {
                return Err(format!(
                    "unknown name @{name}; the names are @yearly, @annually, @monthly, @weekly, \
                     @daily, @midnight and @hourly"
                ))
            }
        };
        Cron::parse(text)
    }

    /// Whether no date ever matches (`0 0 30 2 *`): the day of month is
    /// restricted, the day of week is not, and no chosen month has a
    /// chosen day.
    pub fn never_fires(&self) -> bool {
        const LONGEST: [u32; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
        if self.or_days() || !self.weekdays_star {
            return false;
        }
        !(1..=12u32).any(|m| {
            self.months & (1 << m) != 0
                && (1..=LONGEST[m as usize - 1]).any(|d| self.days & (1 << d) != 0)
        })
    }

    /// Both day fields restricted: a day matches either.
    fn or_days(&self) -> bool {
        !self.days_star && !self.weekdays_star
    }

    fn day_matches(&self, d: Date) -> bool {
        if self.months & (1 << d.month()) == 0 {
            return false;
        }
        let dom = self.days & (1 << d.day()) != 0;
        let dow = self.weekdays & (1 << d.weekday().to_sunday_zero_offset()) != 0;
        if self.or_days() {
            dom || dow
        } else {
            dom && dow
        }
    }

    /// The first occurrence strictly after `after`, in `tz`; `None` when
    /// there is none within 400 years, the Gregorian calendar's whole cycle
    /// (every date and weekday an expression can name recurs within it;
    /// an expression that [`Cron::never_fires`] is refused at load). Rare
    /// days are far apart: Feb 7 on a Sunday 11 years, Feb 29 on a Monday
    /// 28; the scan is a bit test per day.
    pub fn next_after(&self, after: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        let start = tz.to_datetime(after);
        let from = (
            start.hour() as u8,
            start.minute() as u8,
            start.second() as u8,
        );
        let mut date = start.date();
        for day in 0..SEARCH_DAYS {
            if self.day_matches(date) {
                let from = (day == 0).then_some(from);
                if let Some(at) = self.first_in_day(date, from, tz, after) {
                    return Some(at);
                }
            }
            date = date.tomorrow().ok()?;
        }
        None
    }

    /// The first time of `date` after `from` (the whole day when `None`)
    /// whose instant is after `after`.
    fn first_in_day(
        &self,
        date: Date,
        from: Option<(u8, u8, u8)>,
        tz: &TimeZone,
        after: Timestamp,
    ) -> Option<Timestamp> {
        let (fh, fm, fs) = from.unwrap_or((0, 0, 0));
        for h in set_from(u64::from(self.hours), fh) {
            let same_h = from.is_some() && h == fh;
            for m in set_from(self.minutes, if same_h { fm } else { 0 }) {
                let s0 = match same_h && m == fm {
                    true => fs + 1,
                    false => 0,
                };
                for s in set_from(self.seconds, s0) {
                    let civil =
                        DateTime::from_parts(date, Time::constant(h as i8, m as i8, s as i8, 0));
                    match instant(civil, tz) {
                        Some(at) if at > after => return Some(at),
                        _ => {}
                    }
                }
            }
        }
        None
    }

    /// The shortest time between two of the next `n` occurrences after
    /// `from` (the bound a `jitter` must stay under).
    pub fn shortest_interval(
        &self,
        from: Timestamp,
        tz: &TimeZone,
        n: usize,
    ) -> Option<jiff::SignedDuration> {
        let mut prev = self.next_after(from, tz)?;
        let mut shortest: Option<jiff::SignedDuration> = None;
        for _ in 0..n {
            let Some(next) = self.next_after(prev, tz) else {
                break;
            };
            let gap = next.duration_since(prev);
            shortest = Some(shortest.map_or(gap, |s| s.min(gap)));
            prev = next;
        }
        shortest
    }
}

/// The instant of wall-clock time `civil` in `tz` by the rules above: a
/// skipped time is the end of its gap, a repeated one its first instance.
fn instant(civil: DateTime, tz: &TimeZone) -> Option<Timestamp> {
    let amb = tz.to_ambiguous_timestamp(civil);
    match amb.offset() {
        AmbiguousOffset::Unambiguous { offset } => offset.to_timestamp(civil).ok(),
        AmbiguousOffset::Fold { before, .. } => before.to_timestamp(civil).ok(),
        AmbiguousOffset::Gap { before, .. } => {
            // With the offset before the gap the time lands at or after
            // the change (at it for the gap's first missing time): the
            // change is the last transition up to that instant. `preceding`
            // yields those strictly before, hence the nanosecond.
            let past = before.to_timestamp(civil).ok()?;
            let through = past.checked_add(jiff::SignedDuration::from_nanos(1)).ok()?;
            Some(tz.preceding(through).next()?.timestamp())
        }
    }
}

/// The values set in `mask` from `from` up, in order.
fn set_from(mask: u64, from: u8) -> impl Iterator<Item = u8> {
    (from..64).filter(move |b| mask & (1u64 << b) != 0)
}

/// One field's values as a bit set.
fn bits(text: &str, f: &Field) -> Result<u64, String> {
    let mut set = 0u64;
    for item in text.split(',') {
        set |= item_bits(item, f).map_err(|e| format!("{} field `{text}`: {e}", f.name))?;
    }
    Ok(set)
}

/// One comma-separated item: `*`, `N`, `N-M`, each with `/step`.
fn item_bits(item: &str, f: &Field) -> Result<u64, String> {
    let (range, step) = match item.split_once('/') {
        Some((r, s)) => {
            let step: u8 = number(s)
                .filter(|s| *s >= 1 && *s <= f.max)
                .ok_or_else(|| format!("step `{s}` is not a number from 1 to {}", f.max))?;
            (r, Some(step))
        }
        None => (item, None),
    };
    // `*` and `N/step` run to the field's maximum: for weekdays 7, as in
    // Vixie cron (`5/1` is Friday to Sunday), folded into 0 by the caller.
    let (lo, hi) = match range {
        "*" => (f.min, f.max),
        _ => match range.split_once('-') {
            Some((a, b)) => (value(a, f)?, value(b, f)?),
            None => {
                let v = value(range, f)?;
                // `N/step` runs from N to the end of the range.
                (v, if step.is_some() { f.max } else { v })
            }
        },
    };
    if lo > hi {
        return Err(format!("range {range} runs backwards"));
    }
    let step = step.unwrap_or(1);
    Ok((lo..=hi)
        .step_by(step as usize)
        .fold(0, |s, v| s | (1u64 << v)))
}

/// One value, a number or a name, in the field's range.
fn value(text: &str, f: &Field) -> Result<u8, String> {
    let lower = text.to_ascii_lowercase();
    if let Some(i) = f.names.iter().position(|n| *n == lower) {
        return Ok(i as u8 + f.first_name);
    }
    match number(text) {
        Some(v) if (f.min..=f.max).contains(&v) => Ok(v),
        _ if text.is_empty() => Err("an empty value".into()),
        _ => Err(format!(
            "`{text}` is not a {} from {} to {}",
            f.name, f.min, f.max
        )),
    }
}

/// Digits only, as crontab(5) writes numbers: `str::parse` also takes a
/// sign (`+5`), which no cron reads.
fn number(text: &str) -> Option<u8> {
    let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    digits.then(|| text.parse().ok()).flatten()
}

#[cfg(test)]
#[path = "cron_tests.rs"]
mod tests;
