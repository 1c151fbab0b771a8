//! The x86_64 spawner (`sys/vfork.rs`) against `std::process::Command`
//! ([`Exec::spawn_std`], what every other target uses): the same child,
//! started both ways, must see the same process.

use std::io::Read;
use std::os::fd::AsFd;

use super::*;
use crate::state::test_dir::TestDir;
use crate::sys::wait_child;

/// A shell script printing what a child gets from the spawn: argv (with
/// argv[0]), environment, working directory, ids and groups, signal mask
/// and dispositions, rlimits, open descriptors, process group and session.
///
/// The shell's own status and descriptors are read by builtins only: a
/// command (`grep`, `ls`) would read them while the shell is starting it,
/// with every signal blocked around its `vfork` and a pipe open.
const REPORT: &str = r#"p=/proc/$$
echo "argv: $(tr '\0' '|' < $p/cmdline)"
echo "environ: $(tr '\0' '|' < $p/environ)"
echo "cwd: $(readlink $p/cwd)"
while read -r key value; do
    case $key in Uid:|Gid:|Groups:|SigBlk:|SigIgn:|SigCgt:|NoNewPrivs:|CapEff:) echo "$key $value" ;; esac
done < $p/status
cat $p/limits
printf 'fds:'; for fd in $p/fd/*; do printf ' %s' "${fd##*/}"; done; echo
set -- $(cut -d' ' -f1,5,6 $p/stat)
echo "own group: $([ "$1" = "$2" ] && echo yes || echo no), session $3""#;

/// An `Exec` of `/bin/sh` running [`REPORT`] in `dir`, as `ids`.
fn report_exec(dir: &std::path::Path, ids: Option<u32>) -> Exec {
    let argv = ["trigd-step", "-c", REPORT, "name0", "a", "b c", ""];
    let env = [
        ("A", "1"),
        ("EMPTY", ""),
        ("PATH", "/usr/bin:/bin"),
        ("WITH_EQ", "x=y"),
    ];
    let mut exec = Exec::new(std::path::Path::new("/bin/sh"), argv, env, dir).unwrap();
    if ids.is_some() {
        exec.ids(ids, ids);
    }
    exec
}

/// Start `exec` one way, with a descriptor trigd inherited open without
/// close-on-exec; its output (stdout and stderr) and how it exited.
fn run(exec: &Exec, clone: bool) -> (String, Option<i32>) {
    let null = std::fs::File::open("/dev/null").unwrap();
    let (mut read, write) = crate::sys::pipe().unwrap();
    let inherited = crate::sys::dup_inheritable(std::io::stderr().as_fd());
    let stdio = [null.as_fd(), write.as_fd(), write.as_fd()];
    let spawned = if clone {
        exec.spawn_clone(stdio)
    } else {
        exec.spawn_std(stdio)
    }
    .unwrap();
    drop((write, inherited));
    assert!(spawned.pidfd.is_some(), "no pidfd");
    let mut out = String::new();
    std::fs::File::from(std::mem::replace(&mut read, crate::sys::pipe().unwrap().0))
        .read_to_string(&mut out)
        .unwrap();
    let status = wait_child(spawned.pid).unwrap();
    (out, status.code())
}

/// `report` with signals 32 and 33 taken out of its SigIgn line: std's
/// children keep what trigd inherited for these two, which glibc keeps
/// for itself (see [`Exec::spawn_std`]); this test's runner may ignore 32.
fn glibc_own_signals(report: &str) -> String {
    let line = |l: &str| match l.strip_prefix("SigIgn: ") {
        Some(mask) => {
            let mask = u64::from_str_radix(mask, 16).unwrap() & !(0b11 << 31);
            format!("SigIgn: {mask:016x}\n")
        }
        None => format!("{l}\n"),
    };
    report.lines().map(line).collect()
}

/// A directory every user may enter (a switched child starts in it).
fn shared_dir(test: &str) -> TestDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = TestDir::new(&format!("spawn-{test}"));
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

#[test]
fn the_clone_and_std_start_the_same_process() {
    let _g = crate::sys::SPAWN_LOCK
        .read()
        .unwrap_or_else(|e| e.into_inner());
    let dir = shared_dir("same");
    // In a thread of its own: trigd's signal mask (TERM/INT/HUP blocked)
    // must not reach the child; std's ignored SIGPIPE must not either.
    let reports = std::thread::spawn(move || {
        crate::sys::block_signals();
        let mut reports = vec![];
        let root = crate::sys::effective_ids().0 == 0;
        for ids in [None].into_iter().chain(root.then_some(Some(65534))) {
            let exec = report_exec(dir.path(), ids);
            reports.push((ids, run(&exec, true), run(&exec, false)));
        }
        reports
    })
    .join()
    .unwrap();
    for (ids, (clone, clone_code), (std, std_code)) in reports {
        assert_eq!(clone_code, Some(0), "{clone}");
        assert_eq!(std_code, Some(0), "{std}");
        assert_eq!(clone, glibc_own_signals(&std), "as {ids:?}");
        let want = [
            "argv: trigd-step|-c|",
            "|name0|a|b c||\n",
            "environ: A=1|EMPTY=|PATH=/usr/bin:/bin|WITH_EQ=x=y|\n",
            "SigBlk: 0000000000000000\n",
            "SigIgn: 0000000000000000\n",
            // The shell's glob holds /proc/$$/fd open as descriptor 3.
            "fds: 0 1 2 3\n",
            "own group: yes",
        ];
        for w in want {
            assert!(clone.contains(w), "{w:?} not in {clone}");
        }
        if let Some(id) = ids {
            assert!(
                clone.contains(&format!("Uid: {id}\t{id}\t{id}\t{id}\n")),
                "{clone}"
            );
            assert!(
                clone.contains(&format!("Gid: {id}\t{id}\t{id}\t{id}\n")),
                "{clone}"
            );
            assert!(clone.contains("Groups: \n"), "{clone}");
        }
    }
}

#[test]
fn the_clone_and_std_fail_alike() {
    let _g = crate::sys::SPAWN_LOCK
        .read()
        .unwrap_or_else(|e| e.into_inner());
    use std::os::unix::fs::PermissionsExt;
    let dir = shared_dir("fail");
    let plain = dir.join("plain");
    std::fs::write(&plain, "exit 0\n").unwrap();
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
    let missing = Exec::new(
        std::path::Path::new("/nonexistent/trigd"),
        ["x"],
        [],
        dir.path(),
    )
    .unwrap();
    let bad_dir = report_exec(std::path::Path::new("/nonexistent/trigd-dir"), None);
    let not_exec = Exec::new(&plain, ["x"], [], dir.path()).unwrap();
    let nul = std::fs::File::open("/dev/null").unwrap();
    let stdio = || [nul.as_fd(), nul.as_fd(), nul.as_fd()];
    for exec in [missing, bad_dir, not_exec] {
        let clone = exec.spawn_clone(stdio()).map(|_| ()).unwrap_err();
        let std = exec.spawn_std(stdio()).map(|_| ()).unwrap_err();
        assert_eq!(clone.raw_os_error(), std.raw_os_error(), "{clone} / {std}");
        assert!(clone.raw_os_error().is_some(), "{clone}");
    }
    // The one known difference (`Exec::spawn_std`): an executable file the
    // kernel cannot run fails with the clone, std runs it with /bin/sh.
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = Exec::new(&plain, ["x"], [], dir.path()).unwrap();
    let clone = script.spawn_clone(stdio()).map(|_| ()).unwrap_err();
    assert_eq!(clone.raw_os_error(), Some(libc::ENOEXEC), "{clone}");
    let std = script.spawn_std(stdio()).unwrap();
    assert_eq!(wait_child(std.pid).unwrap().code(), Some(0));
}
