//! What a previous life of trigd left running: after a kill -9 or a crash
//! (outside systemd's `KillMode=mixed`), the process groups of the runs it
//! executed go on without it. At the next start, before any of those runs
//! is started again (`retry_on_restart`), [`stop`] finds them by the
//! `TRIGD_RUN_ID` every step's environment carries ([`RUN_ID_ENV`],
//! inherited by whatever a step starts) and stops their process groups as
//! a timeout does: SIGTERM, then SIGKILL after `kill_grace`.
//!
//! Only processes of a uid trigd starts steps as ([`step_uids`]) count, and
//! only with the id of a run the state found `running`. Everything is read
//! from `/proc` (Linux only): a process that ends meanwhile, an `environ`
//! that cannot be read (another user's process), a pid reused by then are
//! skipped, never an error that stops the start.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

use crate::config::Config;

/// The environment variable that names a step's run (its API id).
pub const RUN_ID_ENV: &str = "TRIGD_RUN_ID";

/// How often the process groups are looked at while they are given time
/// to end.
#[cfg(target_os = "linux")]
const POLL: Duration = Duration::from_millis(20);

/// How long the groups get to vanish after SIGKILL (their processes are
/// reaped by whoever adopted them, not by trigd).
#[cfg(target_os = "linux")]
const AFTER_KILL: Duration = Duration::from_secs(2);

/// The uids trigd starts steps as: its own effective uid, and every
/// function's configured `user` (programs and hooks-file hooks).
pub fn step_uids(cfg: &Config) -> BTreeSet<u32> {
    let hooks = cfg
        .hooks
        .by_id
        .keys()
        .filter_map(|id| cfg.hooks.program(id));
    let functions = cfg
        .programs
        .values()
        .chain(hooks)
        .flat_map(|p| p.functions.iter());
    let mut uids: BTreeSet<u32> = functions.filter_map(|f| f.user).collect();
    uids.insert(crate::sys::effective_ids().0);
    uids
}

/// Stop the process groups that carry the id of one of `runs` (the runs a
/// previous life of trigd left `running`) and belong to one of `uids`:
/// SIGTERM to each group, SIGKILL after `grace` to the groups still there,
/// each bounded; one log line per group. Returns once every group found is
/// gone, or past those bounds (logged).
pub fn stop(runs: &[String], uids: &BTreeSet<u32>, grace: Duration) {
    if runs.is_empty() {
        return;
    }
    let wanted: HashSet<&str> = runs.iter().map(String::as_str).collect();
    imp::stop(&wanted, uids, grace);
}

#[cfg(target_os = "linux")]
mod imp {
    use super::{BTreeMap, BTreeSet, Duration, HashSet, AFTER_KILL, POLL, RUN_ID_ENV};
    use crate::sys;
    use std::fs;
    use std::os::unix::fs::MetadataExt;
    use std::time::Instant;

    /// How a group left.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Ended {
        /// Gone after SIGTERM.
        Term,
        /// Gone after SIGKILL.
        Kill,
        /// Still there after SIGKILL and [`AFTER_KILL`].
        Left,
    }

    impl Ended {
        fn says(self) -> &'static str {
            match self {
                Ended::Term => "ended on SIGTERM",
                Ended::Kill => "killed (SIGKILL) after kill_grace",
                Ended::Left => "still there after SIGKILL",
            }
        }
    }

    pub(super) fn stop(wanted: &HashSet<&str>, uids: &BTreeSet<u32>, grace: Duration) {
        let found = groups(wanted, uids);
        if found.is_empty() {
            return;
        }
        for pgid in found.keys() {
            sys::kill_group(*pgid, libc::SIGTERM);
        }
        let mut ended: BTreeMap<u32, Ended> = BTreeMap::new();
        let left = wait_gone(&found, wanted, uids, grace, Ended::Term, &mut ended);
        for pgid in &left {
            sys::kill_group(*pgid, libc::SIGKILL);
        }
        let left = wait_gone(&found, wanted, uids, AFTER_KILL, Ended::Kill, &mut ended);
        for pgid in left {
            ended.insert(pgid, Ended::Left);
        }
        for (pgid, run) in &found {
            let how = ended.get(pgid).copied().unwrap_or(Ended::Left);
            let line = format!(
                "run {run}: stopped process group {pgid} that the previous trigd left running: {}",
                how.says()
            );
            if how == Ended::Left {
                log::error!("{line}");
            } else {
                log::warn!("{line}");
            }
        }
    }

    /// Look at the groups of `found` until none is left or `bound` passed;
    /// each one gone is noted `how` in `ended`. The groups still there.
    fn wait_gone(
        found: &BTreeMap<u32, String>,
        wanted: &HashSet<&str>,
        uids: &BTreeSet<u32>,
        bound: Duration,
        how: Ended,
        ended: &mut BTreeMap<u32, Ended>,
    ) -> Vec<u32> {
        let until = Instant::now() + bound;
        loop {
            let now = groups(wanted, uids);
            let left: Vec<u32> = found
                .keys()
                .filter(|g| !ended.contains_key(g))
                .copied()
                .collect();
            let (still, gone): (Vec<u32>, Vec<u32>) =
                left.into_iter().partition(|g| now.contains_key(g));
            for g in gone {
                ended.insert(g, how);
            }
            if still.is_empty() || Instant::now() >= until {
                return still;
            }
            std::thread::sleep(POLL);
        }
    }

    /// The process groups with a live process of one of `uids` whose
    /// environment names one of the `wanted` runs, and that run's id.
    fn groups(wanted: &HashSet<&str>, uids: &BTreeSet<u32>) -> BTreeMap<u32, String> {
        let mut out = BTreeMap::new();
        let Ok(dir) = fs::read_dir("/proc") else {
            return out;
        };
        let me = std::process::id();
        let pids = dir
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok());
        for pid in pids.filter(|p| *p != me) {
            if let Some((pgid, run)) = process(pid, wanted, uids) {
                out.entry(pgid).or_insert(run);
            }
        }
        out
    }

    /// Process `pid`'s group and run, when it is one to stop; `None` for
    /// anything else, a process gone or unreadable included.
    fn process(pid: u32, wanted: &HashSet<&str>, uids: &BTreeSet<u32>) -> Option<(u32, String)> {
        let dir = format!("/proc/{pid}");
        // The owner of /proc/PID is the process's effective uid.
        if !uids.contains(&fs::metadata(&dir).ok()?.uid()) {
            return None;
        }
        let environ = fs::read(format!("{dir}/environ")).ok()?;
        let run = run_of(&environ).filter(|r| wanted.contains(r))?.to_string();
        let stat = fs::read_to_string(format!("{dir}/stat")).ok()?;
        let (state, pgid) = state_and_group(&stat)?;
        // A zombie is gone already: only its parent's wait is left.
        (state != 'Z' && pgid > 1).then_some((pgid, run))
    }

    /// The value of `TRIGD_RUN_ID` in a NUL-separated environment block.
    pub(super) fn run_of(environ: &[u8]) -> Option<&str> {
        let key = RUN_ID_ENV.as_bytes();
        environ.split(|b| *b == 0).find_map(|var| {
            let value = var.strip_prefix(key)?.strip_prefix(b"=")?;
            std::str::from_utf8(value).ok()
        })
    }

    /// The state letter and the process group of a `/proc/PID/stat` line
    /// (`pid (comm) state ppid pgrp …`; comm may hold spaces and `)`, so
    /// the fields are read after its last `)`).
    pub(super) fn state_and_group(stat: &str) -> Option<(char, u32)> {
        let rest = &stat[stat.rfind(')')? + 1..];
        let mut fields = rest.split_ascii_whitespace();
        let state = fields.next()?.chars().next()?;
        let pgid = fields.nth(1)?.parse().ok()?;
        Some((state, pgid))
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::{BTreeSet, Duration, HashSet};

    /// Without `/proc`, nothing is found: the previous life's processes go
    /// on (the operator's service manager may stop them).
    pub(super) fn stop(_: &HashSet<&str>, _: &BTreeSet<u32>, _: Duration) {}
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::imp::{run_of, state_and_group};

    #[test]
    fn the_run_id_is_read_from_an_environment_block() {
        let env = b"PATH=/bin\0TRIGD_RUN_IDX=no\0TRIGD_RUN_ID=vm-1\0A=b\0";
        assert_eq!(run_of(env), Some("vm-1"));
        assert_eq!(run_of(b"PATH=/bin\0"), None);
        assert_eq!(run_of(b""), None);
    }

    #[test]
    fn the_group_is_read_after_the_last_parenthesis() {
        let stat = "42 (a) b (c)) S 1 4242 4242 0 -1 4194560 0";
        assert_eq!(state_and_group(stat), Some(('S', 4242)));
        assert_eq!(state_and_group("7 (z) Z 1 7 7"), Some(('Z', 7)));
        assert_eq!(state_and_group("garbage"), None);
    }
}
