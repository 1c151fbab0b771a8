//! Moments as trigd keeps and shows them: UTC, to the millisecond.
//!
//! A [`Time`] is a `jiff` timestamp truncated to the millisecond. In JSON
//! (the run log, API answers, callbacks) and on pages it is RFC 3339 with
//! exactly three decimals and `Z`, e.g. `2026-11-22T04:14:00.123Z`: the
//! format every version of trigd has written, so old state dirs still load
//! and clients see the same strings.
//!
//! Binary size: jiff prints a time for about 4 KB of the static binary, but
//! its parsers and the text of its errors cost about 280 KB (measured with
//! a static, stripped, LTO build). So a time is read with
//! `humantime::parse_rfc3339` (humantime is already there for durations in
//! the config), and no jiff error is ever displayed or unwrapped.

use std::fmt;
use std::time::{Duration, SystemTime};

use jiff::Timestamp;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A moment, UTC, to the millisecond.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(Timestamp);

impl Time {
    /// Now, truncated to the millisecond (a system clock outside jiff's
    /// range, years -9999 to 9999, reads as the epoch).
    pub fn now() -> Time {
        Time::try_from(SystemTime::now()).unwrap_or_default()
    }

    /// The instant.
    pub fn timestamp(self) -> Timestamp {
        self.0
    }

    /// How long after `earlier` this is; `None` when it is before it.
    pub fn since(self, earlier: Time) -> Option<Duration> {
        Duration::try_from(self.0.duration_since(earlier.0)).ok()
    }
}

impl Default for Time {
    /// The Unix epoch.
    fn default() -> Time {
        Time(Timestamp::UNIX_EPOCH)
    }
}

impl TryFrom<SystemTime> for Time {
    type Error = BadTime;

    /// `t` to the millisecond; `BadTime` outside jiff's range.
    fn try_from(t: SystemTime) -> Result<Time, BadTime> {
        Timestamp::try_from(t).map(Time::from).map_err(|_| BadTime)
    }
}

impl From<Timestamp> for Time {
    /// `t` truncated to the millisecond (what three decimals can show, so
    /// that a time reads back equal to what was written).
    fn from(t: Timestamp) -> Time {
        Time(Timestamp::from_millisecond(t.as_millisecond()).unwrap_or(t))
    }
}

impl fmt::Display for Time {
    /// RFC 3339 UTC with milliseconds: `2026-11-22T04:14:00.123Z`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.3}", self.0)
    }
}

/// A text that is not an RFC 3339 UTC time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadTime;

impl fmt::Display for BadTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not an RFC 3339 UTC time like 2026-11-22T04:14:00.123Z")
    }
}

impl std::str::FromStr for Time {
    type Err = BadTime;

    /// An RFC 3339 time in UTC (`Z`); digits past the millisecond are
    /// dropped. `humantime` reads the years from 1970 (and records hold
    /// no others); a year before (a query's bound) is read 400 years
    /// later, as often as it takes, and moved back: the Gregorian
    /// calendar repeats every 400 years, 146,097 days (`jiff`'s own
    /// parser cost the static binary 14,336 bytes). The last day and
    /// hours of 9999, past what a `jiff` timestamp holds, are read as its
    /// last instant.
    fn from_str(s: &str) -> Result<Time, BadTime> {
        const CYCLE_SECS: i64 = 146_097 * 86_400;
        let year = s
            .get(..4)
            .filter(|y| y.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|y| y.parse::<i64>().ok())
            .ok_or(BadTime)?;
        let cycles = if year < 1970 {
            (1970 - year + 399) / 400
        } else {
            0
        };
        let t = if cycles == 0 {
            humantime::parse_rfc3339(s)
        } else {
            humantime::parse_rfc3339(&format!("{}{}", year + 400 * cycles, &s[4..]))
        };
        let t = t.map_err(|_| BadTime)?;
        let Ok(t) = Time::try_from(t) else {
            return Ok(Time(Timestamp::MAX));
        };
        let secs = t.0.as_second() - cycles * CYCLE_SECS;
        let ts = Timestamp::new(secs, t.0.subsec_nanosecond()).map_err(|_| BadTime)?;
        Ok(Time(ts))
    }
}

impl Serialize for Time {
    /// The text whole, then as one string: `collect_str` would escape
    /// each of the dozen pieces jiff prints separately. With the buffer
    /// order of `store::write_line`, trigd's own instructions a sync
    /// `/bin/true` call went from 107,473 to 95,622 (callgrind, static
    /// builds, 2026-11-28).
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Time, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at_ms(ms: i64) -> Time {
        Time::from(Timestamp::from_millisecond(ms).unwrap())
    }

    #[test]
    fn any_year_of_rfc_3339_reads() {
        for (text, shown) in [
            ("1969-12-31T23:59:59.5Z", "1969-12-31T23:59:59.500Z"),
            ("1968-02-29T12:00:00Z", "1968-02-29T12:00:00.000Z"),
            ("0001-01-01T00:00:00Z", "0001-01-01T00:00:00.000Z"),
            ("1570-06-15T08:30:00Z", "1570-06-15T08:30:00.000Z"),
            ("2026-11-22T04:14:00.123Z", "2026-11-22T04:14:00.123Z"),
        ] {
            let t: Time = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(t.to_string(), shown, "{text}");
        }
        assert_eq!(
            "9999-12-31T23:59:59Z".parse::<Time>(),
            Ok(Time(Timestamp::MAX))
        );
        for bad in [
            "1969-02-29T00:00:00Z",
            "+969-01-01T00:00:00Z",
            "19",
            "",
            "1969-13-01T00:00:00Z",
        ] {
            assert_eq!(bad.parse::<Time>(), Err(BadTime), "{bad}");
        }
    }

    #[test]
    fn known_dates_print_with_three_decimals_and_z() {
        assert_eq!(at_ms(0).to_string(), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            at_ms(1_795_321_234_567).to_string(),
            "2026-11-22T04:20:34.567Z"
        );
        // 2000-02-29, a leap day of a century leap year.
        assert_eq!(
            at_ms(951_782_400_000).to_string(),
            "2000-02-29T00:00:00.000Z"
        );
        assert_eq!(
            at_ms(1_795_321_234_500).to_string(),
            "2026-11-22T04:20:34.500Z"
        );
    }

    #[test]
    fn times_read_back_equal_and_sub_millisecond_digits_are_dropped() {
        for text in ["2026-11-22T04:20:34.567Z", "1970-01-01T00:00:00.000Z"] {
            let t: Time = text.parse().unwrap();
            assert_eq!(t.to_string(), text);
            let json = serde_json::to_string(&t).unwrap();
            assert_eq!(json, format!("\"{text}\""));
            assert_eq!(serde_json::from_str::<Time>(&json).unwrap(), t);
        }
        let fine: Time = "2026-11-22T04:20:34.567999Z".parse().unwrap();
        assert_eq!(fine.to_string(), "2026-11-22T04:20:34.567Z");
        let now = Time::now();
        assert_eq!(now.to_string().parse::<Time>().unwrap(), now);
        assert_eq!(now.to_string().len(), 24);
    }

    #[test]
    fn bad_times_are_refused() {
        for bad in [
            "",
            "x",
            "2026-11-22",
            "2026-11-22T04:20:34.567",
            "2026-13-01T00:00:00Z",
        ] {
            assert!(bad.parse::<Time>().is_err(), "{bad}");
        }
        assert!(serde_json::from_str::<Time>("12").is_err());
    }

    #[test]
    fn since_is_the_gap_or_none_when_earlier() {
        let (a, b) = (at_ms(1_000), at_ms(2_500));
        assert_eq!(b.since(a), Some(Duration::from_millis(1_500)));
        assert_eq!(a.since(b), None);
    }
}
