//! `[[functions.schedules]]` compiled: a [`Schedule`] is an entry point
//! like an endpoint, whose caller is the clock. Its values are fixed at
//! load; `schedule/` fires it through the same `invoke::job` and runner as
//! every request.

use std::collections::HashMap;
use std::time::Duration;

use jiff::tz::TimeZone;
use jiff::Timestamp;
use toml::Spanned;

use super::raw::{RawFunction, RawSchedule};
use super::types::{duration, Errors, Src};
use crate::schedule::cron::Cron;

/// The most missed occurrences `catch_up = "all"` runs after a downtime
/// (the newest ones; the older are recorded skipped).
pub const CATCH_UP_MAX: usize = 100;

/// The longest schedule `name`, in bytes: it is part of the schedule's id,
/// which goes into every run's `By`, URLs and `schedules.json`.
pub const MAX_NAME: usize = 64;

/// How much of a value a load error quotes, in characters.
const QUOTE_MAX: usize = 64;

/// One schedule of a function.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// `name`, unique within the function.
    pub name: String,
    /// `cron` as written (for pages and `trigd check`).
    pub expression: String,
    /// `cron`, parsed.
    pub cron: Cron,
    /// `timezone` as written (`UTC` when absent).
    pub zone_name: String,
    /// The zone the expression's wall-clock times are in.
    pub zone: TimeZone,
    /// The run's values, by position of the function's inputs (an input
    /// `values` does not name is empty).
    pub values: Vec<String>,
    /// The most a firing waits after its occurrence; the delay of one
    /// schedule is always the same ([`Schedule::delay`]).
    pub jitter: Duration,
    /// `active`: an inactive schedule records its occurrences skipped.
    pub active: bool,
    /// What happens to occurrences missed while trigd was not running.
    pub catch_up: CatchUp,
    /// What happens when an occurrence comes while the last run of the
    /// schedule still runs.
    pub overlap: Overlap,
}

/// `catch_up`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatchUp {
    /// Missed occurrences are recorded skipped (default).
    Skip,
    /// One run for all of them (the newest), the rest recorded skipped.
    Once,
    /// One run each, at most [`CATCH_UP_MAX`] (the newest).
    All,
}

/// `overlap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overlap {
    /// The new occurrence is recorded skipped (default).
    Skip,
    /// The new occurrence waits until the running one ends (one waits at
    /// most; a further one is recorded skipped).
    Queue,
    /// The running one is cancelled and the new one starts.
    Replace,
}

impl Schedule {
    /// The delay of this schedule's firings: the same fraction of
    /// `jitter` every time (from a hash of `id`), so that schedules with
    /// the same expression spread out and each keeps its own rhythm.
    pub fn delay(&self, id: &str) -> Duration {
        let millis = self.jitter.as_millis() as u64;
        if millis == 0 {
            return Duration::ZERO;
        }
        // FNV-1a: stable across versions and hosts, unlike `Hash`.
        let h = id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        Duration::from_millis(h % (millis + 1))
    }
}

/// The schedules of function `f` (at `key`) whose inputs are `inputs`.
pub fn compile(
    src: &Src,
    f: &RawFunction,
    key: &str,
    inputs: &[String],
    errs: &mut Errors,
) -> Vec<Schedule> {
    let mut seen = HashMap::new();
    let mut out = Vec::with_capacity(f.schedules.len());
    for (i, raw) in f.schedules.iter().enumerate() {
        let key = format!("{key}.schedules[{i}]");
        let name_key = format!("{key}.name");
        errs.name(src, &raw.get_ref().name, &name_key, "schedule");
        long_name(src, &raw.get_ref().name, &name_key, errs);
        errs.unique(
            src,
            &mut seen,
            &raw.get_ref().name,
            &name_key,
            "schedule name",
        );
        if let Some(s) = one(src, raw.get_ref(), &key, inputs, errs) {
            out.push(s);
        }
    }
    out
}

/// A `name` over [`MAX_NAME`] bytes is refused.
fn long_name(src: &Src, name: &Spanned<String>, key: &str, errs: &mut Errors) {
    let len = name.get_ref().len();
    if len > MAX_NAME {
        let msg = format!(
            "schedule name {} is {len} bytes; at most {MAX_NAME}",
            quoted(name.get_ref())
        );
        errs.at(src, name.span(), key, msg);
    }
}

/// `text` quoted for a message: escaped (a NUL or another control
/// character is not written raw) and cut after [`QUOTE_MAX`] characters,
/// so that a 1 MB value does not make a 1 MB error line.
fn quoted(text: &str) -> String {
    match text.char_indices().nth(QUOTE_MAX) {
        Some((cut, _)) => format!("{:?}… ({} bytes)", &text[..cut], text.len()),
        None => format!("{text:?}"),
    }
}

/// One schedule, or `None` when its expression or zone is wrong (recorded).
fn one(
    src: &Src,
    raw: &RawSchedule,
    key: &str,
    inputs: &[String],
    errs: &mut Errors,
) -> Option<Schedule> {
    let cron = expression(src, &raw.cron, &format!("{key}.cron"), errs);
    let (zone_name, zone) = zone(src, raw.timezone.as_ref(), &format!("{key}.timezone"), errs);
    let jitter = duration(
        src,
        raw.jitter.as_ref(),
        &format!("{key}.jitter"),
        Duration::ZERO,
        errs,
    );
    let catch_up = choice(
        src,
        raw.catch_up.as_ref(),
        &format!("{key}.catch_up"),
        CATCH_UPS,
        errs,
    );
    let overlap = choice(
        src,
        raw.overlap.as_ref(),
        &format!("{key}.overlap"),
        OVERLAPS,
        errs,
    );
    let values = values(src, raw, key, inputs, errs);
    let (cron, zone) = (cron?, zone?);
    check_jitter(src, raw, key, &cron, &zone, jitter, errs);
    Some(Schedule {
        name: raw.name.get_ref().clone(),
        expression: raw.cron.get_ref().trim().to_string(),
        cron,
        zone_name,
        zone,
        values,
        jitter,
        active: raw.active,
        catch_up,
        overlap,
    })
}

/// `cron`, parsed; one that never fires is refused.
fn expression(src: &Src, raw: &Spanned<String>, key: &str, errs: &mut Errors) -> Option<Cron> {
    let text = raw.get_ref();
    match Cron::parse(text) {
        Ok(c) if c.never_fires() => {
            let msg = format!(
                "cron {} never fires: no chosen month has the chosen day",
                quoted(text)
            );
            errs.at(src, raw.span(), key, msg);
            None
        }
        Ok(c) => Some(c),
        Err(e) => {
            errs.at(
                src,
                raw.span(),
                key,
                format!("invalid cron {}: {e}", quoted(text)),
            );
            None
        }
    }
}

/// `timezone`: an IANA name known to the host's zone database
/// (`/usr/share/zoneinfo`, or `TZDIR`; trigd bundles none, see
/// docs/schedules.md). UTC needs no database.
fn zone(
    src: &Src,
    raw: Option<&Spanned<String>>,
    key: &str,
    errs: &mut Errors,
) -> (String, Option<TimeZone>) {
    let Some(raw) = raw else {
        return ("UTC".into(), Some(TimeZone::UTC));
    };
    let name = raw.get_ref().clone();
    if is_utc(&name) {
        return (name, Some(TimeZone::UTC));
    }
    match TimeZone::get(&name) {
        Ok(z) => match z.iana_name().filter(|spelled| *spelled != name) {
            None => (name, Some(z)),
            // The database's lookup ignores case; its names do not (file
            // names in tzdata, shown as written): one spelling each.
            Some(spelled) => {
                let msg = format!(
                    "time zone {} is spelled {spelled:?} (names are case-sensitive)",
                    quoted(&name)
                );
                errs.at(src, raw.span(), key, msg);
                (name, None)
            }
        },
        Err(_) => {
            errs.at(src, raw.span(), key, zone_not_found(&name));
            (name, None)
        }
    }
}

/// The names of UTC that must work on a host without tzdata, in any case.
fn is_utc(name: &str) -> bool {
    ["UTC", "Etc/UTC"]
        .iter()
        .any(|u| u.eq_ignore_ascii_case(name))
}

/// Why `name` did not load: no database on this host at all, or a name
/// the database does not have.
fn zone_not_found(name: &str) -> String {
    if jiff::tz::db().is_definitively_empty() {
        format!(
            "time zone {} not found: this host has no time-zone database \
             (/usr/share/zoneinfo, or TZDIR); install tzdata or set TZDIR (UTC needs none)",
            quoted(name)
        )
    } else {
        format!(
            "unknown time zone {}: not in the host's time-zone database \
             (/usr/share/zoneinfo, or TZDIR); an IANA name such as Europe/Berlin or UTC; \
             install or update tzdata, or set TZDIR",
            quoted(name)
        )
    }
}

const CATCH_UPS: &[(&str, CatchUp)] = &[
    ("skip", CatchUp::Skip),
    ("once", CatchUp::Once),
    ("all", CatchUp::All),
];
const OVERLAPS: &[(&str, Overlap)] = &[
    ("skip", Overlap::Skip),
    ("queue", Overlap::Queue),
    ("replace", Overlap::Replace),
];

/// One of `choices` by name; the first when absent or wrong (recorded).
fn choice<T: Copy>(
    src: &Src,
    raw: Option<&Spanned<String>>,
    key: &str,
    choices: &[(&str, T)],
    errs: &mut Errors,
) -> T {
    let first = choices[0].1;
    let Some(raw) = raw else { return first };
    match choices.iter().find(|(n, _)| n == raw.get_ref()) {
        Some((_, v)) => *v,
        None => {
            let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
            let msg = format!("\"{}\" is not one of {}", raw.get_ref(), names.join(", "));
            errs.at(src, raw.span(), key, msg);
            first
        }
    }
}

/// `values`, by position of `inputs`; a name that is no input is refused.
fn values(
    src: &Src,
    raw: &RawSchedule,
    key: &str,
    inputs: &[String],
    errs: &mut Errors,
) -> Vec<String> {
    let mut out = vec![String::new(); inputs.len()];
    for (name, value) in &raw.values {
        match inputs.iter().position(|i| i == name.get_ref()) {
            Some(at) => out[at].clone_from(value),
            None => {
                let msg = format!(
                    "\"{}\" is not an input of the function (its outputs: {})",
                    name.get_ref(),
                    if inputs.is_empty() {
                        "none".to_string()
                    } else {
                        inputs.join(", ")
                    }
                );
                errs.at(
                    src,
                    name.span(),
                    format!("{key}.values.{}", name.get_ref()),
                    msg,
                );
            }
        }
    }
    out
}

/// A `jitter` must be shorter than the shortest time between two
/// occurrences (over the first hundred from 2024), or firings could
/// pass each other.
fn check_jitter(
    src: &Src,
    raw: &RawSchedule,
    key: &str,
    cron: &Cron,
    zone: &TimeZone,
    jitter: Duration,
    errs: &mut Errors,
) {
    let Some(j) = raw.jitter.as_ref().filter(|_| !jitter.is_zero()) else {
        return;
    };
    let from = Timestamp::from_second(1_704_067_200).unwrap_or(Timestamp::UNIX_EPOCH);
    let Some(shortest) = cron.shortest_interval(from, zone, 100) else {
        return;
    };
    let shortest = shortest.unsigned_abs();
    if jitter >= shortest {
        let msg = format!(
            "jitter ({}s) must be shorter than the shortest time between two occurrences ({}s)",
            jitter.as_secs_f64(),
            shortest.as_secs()
        );
        errs.at(src, j.span(), format!("{key}.jitter"), msg);
    }
}
