//! The processes of the machine as `/proc` shows them (Linux): which
//! process groups hold a process whose environment names one of some
//! values of a variable. Used at start-up to find what a killed trigd left
//! running (`runner::orphans`).
//!
//! A process that ends while it is read, an `environ` that cannot be read
//! (another user's process, without root), a zombie: skipped, never an
//! error.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fs;
use std::os::unix::fs::MetadataExt;

/// The process groups holding a live process of one of `uids` (its
/// effective uid, the owner of `/proc/PID`) whose environment sets `var`
/// to one of `wanted`, each with that value (the first found). trigd's
/// own process is left out.
pub fn groups_with(
    var: &str,
    wanted: &HashSet<&str>,
    uids: &BTreeSet<u32>,
) -> BTreeMap<u32, String> {
    let mut out = BTreeMap::new();
    let Ok(dir) = fs::read_dir("/proc") else {
        return out;
    };
    let me = std::process::id();
    let pids = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok());
    for pid in pids.filter(|p| *p != me) {
        if let Some((pgid, value)) = process(pid, var, wanted, uids) {
            out.entry(pgid).or_insert(value);
        }
    }
    out
}

/// Process `pid`'s group and value of `var`, when it is one of
/// [`groups_with`]; `None` for anything else, a process gone included.
fn process(
    pid: u32,
    var: &str,
    wanted: &HashSet<&str>,
    uids: &BTreeSet<u32>,
) -> Option<(u32, String)> {
    let dir = format!("/proc/{pid}");
    if !uids.contains(&fs::metadata(&dir).ok()?.uid()) {
        return None;
    }
    let environ = fs::read(format!("{dir}/environ")).ok()?;
    let value = value_of(&environ, var).filter(|v| wanted.contains(v))?;
    let value = value.to_string();
    let stat = fs::read_to_string(format!("{dir}/stat")).ok()?;
    let (state, pgid) = state_and_group(&stat)?;
    // A zombie is gone already: only its parent's wait is left.
    (state != 'Z' && pgid > 1).then_some((pgid, value))
}

/// The value of `var` in a NUL-separated environment block.
fn value_of<'a>(environ: &'a [u8], var: &str) -> Option<&'a str> {
    environ.split(|b| *b == 0).find_map(|entry| {
        let value = entry.strip_prefix(var.as_bytes())?.strip_prefix(b"=")?;
        std::str::from_utf8(value).ok()
    })
}

/// The state letter and the process group of a `/proc/PID/stat` line
/// (`pid (comm) state ppid pgrp …`; comm may hold spaces and `)`, so the
/// fields are read after its last `)`).
fn state_and_group(stat: &str) -> Option<(char, u32)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let pgid = fields.nth(1)?.parse().ok()?;
    Some((state, pgid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_read_from_an_environment_block() {
        let env = b"PATH=/bin\0TRIGD_RUN_IDX=no\0TRIGD_RUN_ID=vm-1\0A=b\0";
        assert_eq!(value_of(env, "TRIGD_RUN_ID"), Some("vm-1"));
        assert_eq!(value_of(b"PATH=/bin\0", "TRIGD_RUN_ID"), None);
        assert_eq!(value_of(b"", "TRIGD_RUN_ID"), None);
    }

    #[test]
    fn the_group_is_read_after_the_last_parenthesis() {
        let stat = "42 (a) b (c)) S 1 4242 4242 0 -1 4194560 0";
        assert_eq!(state_and_group(stat), Some(('S', 4242)));
        assert_eq!(state_and_group("7 (z) Z 1 7 7"), Some(('Z', 7)));
        assert_eq!(state_and_group("garbage"), None);
    }

    #[test]
    fn a_process_of_this_test_is_found_by_its_environment() {
        use std::os::unix::process::CommandExt;
        let _g = crate::sys::SPAWN_LOCK.read();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env("TRIGD_PROCS_TEST", "mark-1")
            .process_group(0)
            .spawn()
            .unwrap();
        let wanted = HashSet::from(["mark-1"]);
        let uids = BTreeSet::from([crate::sys::effective_ids().0]);
        // The child carries the variable once it has exec'd `sleep`:
        // until then /proc shows the environment of this test's process.
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut found = groups_with("TRIGD_PROCS_TEST", &wanted, &uids);
        while found.is_empty() && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(10));
            found = groups_with("TRIGD_PROCS_TEST", &wanted, &uids);
        }
        let others = BTreeSet::from([u32::MAX]);
        let of_others = groups_with("TRIGD_PROCS_TEST", &wanted, &others);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(found, BTreeMap::from([(child.id(), "mark-1".to_string())]));
        assert!(of_others.is_empty(), "{of_others:?}");
    }
}
