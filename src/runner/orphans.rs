//! What a previous life of trigd left running: after a kill -9 or a crash
//! (outside systemd's `KillMode=mixed`), the process groups of the runs it
//! executed go on without it. At the next start, before any of those runs
//! is started again (`retry_on_restart`), [`stop`] finds them by the
//! `TRIGD_RUN_ID` every step's environment carries ([`RUN_ID_ENV`],
//! inherited by whatever a step starts) and stops their process groups as
//! a timeout does: SIGTERM, then SIGKILL after `kill_grace`.
//!
//! Only processes of a uid trigd starts steps as ([`step_uids`]) count, and
//! only with the id of a run the state found `running`; `/proc` is read by
//! `sys::procs` (Linux only; elsewhere nothing is found). A group counts
//! as still there while a live process in it carries such an id, and only
//! such groups get the next signal: a group whose processes all ended is
//! never signalled again, so an unrelated program given a reused pid is not
//! hit (the kernel gives no new process an id still in use as a group's;
//! only between a look and the signal right after it could the group end
//! and its id be reused). A process that cleared its environment
//! (`env -i`) or switched to another user is not found; a zombie (nothing
//! reaps it, as under a container's PID 1 that does not) counts as gone.
// Without /proc (not Linux) nothing is looked for: the policy is unused.
#![cfg_attr(not(target_os = "linux"), allow(dead_code, unused_imports))]

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
/// program function's configured `user` (hooks-file hooks have none).
pub fn step_uids(cfg: &Config) -> BTreeSet<u32> {
    let functions = cfg.programs.values().flat_map(|p| p.functions.iter());
    let mut uids: BTreeSet<u32> = functions.filter_map(|f| f.user).collect();
    uids.insert(crate::sys::effective_ids().0);
    uids
}

/// Stop the process groups that carry the id of one of `runs` (the runs a
/// previous life of trigd left `running`) and belong to one of `uids`:
/// SIGTERM to each group, SIGKILL after `grace` to the groups still there,
/// each bounded; one log line per group. Returns once every group found is
/// gone, or past those bounds (logged): how each group found ended.
pub fn stop(runs: &[String], uids: &BTreeSet<u32>, grace: Duration) -> Vec<Ended> {
    if runs.is_empty() {
        return Vec::new();
    }
    let wanted: HashSet<&str> = runs.iter().map(String::as_str).collect();
    #[cfg(target_os = "linux")]
    return stop_found(&Look { wanted, uids }, grace);
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (wanted, uids, grace);
        Vec::new()
    }
}

/// How a group found by [`stop`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Gone after SIGTERM.
    Term,
    /// Gone after SIGKILL.
    Kill,
    /// Still there after SIGKILL and [`AFTER_KILL`].
    Left,
}

impl Ended {
    /// Its label in the metric `trigd_orphan_groups_stopped_total`.
    pub fn label(self) -> &'static str {
        match self {
            Ended::Term => "term",
            Ended::Kill => "kill",
            Ended::Left => "left",
        }
    }

    /// The end of the group's log line.
    fn says(self) -> &'static str {
        match self {
            Ended::Term => "ended on SIGTERM",
            Ended::Kill => "killed (SIGKILL) after kill_grace",
            Ended::Left => "still there after SIGKILL",
        }
    }
}

/// What is looked for in `/proc`.
struct Look<'a> {
    /// The runs' ids.
    wanted: HashSet<&'a str>,
    /// The uids of the processes.
    uids: &'a BTreeSet<u32>,
}

impl Look<'_> {
    /// The groups found now, each with its run's id.
    #[cfg(target_os = "linux")]
    fn groups(&self) -> BTreeMap<u32, String> {
        crate::sys::procs::groups_with(RUN_ID_ENV, &self.wanted, self.uids)
    }
}

/// [`stop`], once the ids and uids are known.
#[cfg(target_os = "linux")]
fn stop_found(look: &Look<'_>, grace: Duration) -> Vec<Ended> {
    use crate::sys;
    let found = look.groups();
    if found.is_empty() {
        return Vec::new();
    }
    for pgid in found.keys() {
        sys::kill_group(*pgid, libc::SIGTERM);
    }
    let mut ended: BTreeMap<u32, Ended> = BTreeMap::new();
    let left = wait_gone(look, &found, grace, Ended::Term, &mut ended);
    for pgid in &left {
        sys::kill_group(*pgid, libc::SIGKILL);
    }
    let left = wait_gone(look, &found, AFTER_KILL, Ended::Kill, &mut ended);
    for pgid in left {
        ended.insert(pgid, Ended::Left);
    }
    let mut out = Vec::with_capacity(found.len());
    for (pgid, run) in &found {
        let how = ended.get(pgid).copied().unwrap_or(Ended::Left);
        out.push(how);
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
    out
}

/// Look at the groups of `found` until none is left or `bound` passed;
/// each one gone is noted `how` in `ended`. The groups still there.
#[cfg(target_os = "linux")]
fn wait_gone(
    look: &Look<'_>,
    found: &BTreeMap<u32, String>,
    bound: Duration,
    how: Ended,
    ended: &mut BTreeMap<u32, Ended>,
) -> Vec<u32> {
    let until = std::time::Instant::now() + bound;
    loop {
        let now = look.groups();
        let left = found.keys().filter(|g| !ended.contains_key(g)).copied();
        let (still, gone): (Vec<u32>, Vec<u32>) = left.partition(|g| now.contains_key(g));
        for g in gone {
            ended.insert(g, how);
        }
        if still.is_empty() || std::time::Instant::now() >= until {
            return still;
        }
        std::thread::sleep(POLL);
    }
}
