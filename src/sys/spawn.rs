//! Starting a step's process: [`Exec`] prepares everything the child
//! needs, [`Exec::spawn`] starts it (the one door: `sys/vfork.rs` on
//! x86_64 Linux, `std::process::Command` elsewhere), `sys::wait_child` reaps it.

use std::ffi::CString;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};

use super::Ids;

/// A program to start with [`Exec::spawn`]: everything the child needs,
/// prepared (as C strings and pointer arrays) before the child exists, so
/// the child itself only makes system calls.
pub struct Exec {
    program: CString,
    /// argv: the strings, and the NULL-terminated pointer array into them.
    argv: Vec<CString>,
    envp: Vec<CString>,
    dir: CString,
    ids: Ids,
}

/// A NUL byte in a program path, argument, variable or directory: such a
/// string cannot reach `execve` (the same error as `std::process`).
fn nul_error() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "nul byte found in provided data",
    )
}

fn c_bytes(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| nul_error())
}

impl Exec {
    /// Start `program` (a path; no PATH search) with `argv` (the first is
    /// the program's `argv[0]`), exactly the environment `env` (in this
    /// order), in the directory `dir`.
    ///
    /// # Errors
    /// One of the strings holds a NUL byte.
    pub fn new<'a>(
        program: &std::path::Path,
        argv: impl IntoIterator<Item = &'a str>,
        env: impl IntoIterator<Item = (&'a str, &'a str)>,
        dir: &std::path::Path,
    ) -> io::Result<Exec> {
        use std::os::unix::ffi::OsStrExt;
        let argv = argv
            .into_iter()
            .map(|a| c_bytes(a.as_bytes()))
            .collect::<io::Result<Vec<_>>>()?;
        let envp = env
            .into_iter()
            .map(|(k, v)| c_bytes(format!("{k}={v}").as_bytes()))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Exec {
            program: c_bytes(program.as_os_str().as_bytes())?,
            argv,
            envp,
            dir: c_bytes(dir.as_os_str().as_bytes())?,
            ids: Ids::default(),
        })
    }

    /// Switch the child to `gid` and/or `uid` (the caller has checked that
    /// trigd may). Switching the uid as root also drops the supplementary
    /// groups, as `std::process::Command::uid` does.
    pub fn ids(&mut self, gid: Option<u32>, uid: Option<u32>) {
        // SAFETY: getuid cannot fail and touches no memory.
        let root = unsafe { libc::getuid() } == 0;
        self.ids = Ids {
            gid,
            uid,
            drop_groups: uid.is_some() && root,
        };
    }

    /// Start the program with `stdio` as its descriptors 0, 1 and 2 and no
    /// other, in a process group of its own, with an empty signal mask and
    /// every signal's disposition at its default. The calling thread waits
    /// until the child has called `execve` or failed.
    ///
    /// On x86_64 Linux the child is made by `clone(CLONE_VM | CLONE_VFORK)`
    /// (`sys/vfork.rs`), which shares trigd's memory until the `execve`
    /// instead of copying its page tables; elsewhere, and in a build with
    /// `--cfg trigd_std_spawn`, by `std::process::Command` ([`Exec::spawn_std`]).
    ///
    /// The figure that keeps the clone: sync `/bin/true` at 8 connections,
    /// 6 interleaved rounds of 5 s on the 2-core bench VM (load 4-12 from
    /// other builds): 2,249 req/s (spread 1,643-2,536), p99 20.5 ms, with
    /// the clone; 830 req/s (701-1,123), p99 34.7 ms, with
    /// `std::process::Command` and the same `pre_exec` setup (std forks when
    /// a `pre_exec` or an id switch is set). Re-measure: build the std
    /// variant with `RUSTFLAGS="-C target-feature=+crt-static --cfg
    /// trigd_std_spawn" cargo build --release --target
    /// x86_64-unknown-linux-gnu --target-dir target/std-spawn`, then
    /// `bench/ab.sh -c true8 clone=target/x86_64-unknown-linux-gnu/release/trigd
    /// std=target/std-spawn/x86_64-unknown-linux-gnu/release/trigd`.
    ///
    /// # Errors
    /// The error of the step that failed in the child (`execve`, `chdir`,
    /// an id switch, …), or of starting the child itself; a failed child
    /// is reaped.
    pub fn spawn(&self, stdio: [BorrowedFd<'_>; 3]) -> io::Result<Spawned> {
        #[cfg(all(target_os = "linux", target_arch = "x86_64", not(trigd_std_spawn)))]
        return self.spawn_clone(stdio);
        #[cfg(not(all(target_os = "linux", target_arch = "x86_64", not(trigd_std_spawn))))]
        return self.spawn_std(stdio);
    }

    /// Start the program with `sys/vfork.rs`'s clone.
    #[cfg(all(target_os = "linux", target_arch = "x86_64", not(trigd_std_spawn)))]
    fn spawn_clone(&self, stdio: [BorrowedFd<'_>; 3]) -> io::Result<Spawned> {
        let (pid, pidfd) = super::vfork::spawn(
            &self.program,
            &self.argv,
            &self.envp,
            &self.dir,
            self.ids,
            stdio,
        )?;
        Ok(Spawned { pid, pidfd })
    }
}

#[cfg(any(
    test,
    trigd_std_spawn,
    not(all(target_os = "linux", target_arch = "x86_64"))
))]
impl Exec {
    /// Start the program as [`Exec::spawn`] does, with
    /// `std::process::Command`: the same argv, environment, directory,
    /// ids, process group, rlimits, descriptors, signal mask and
    /// dispositions (`sys/spawn_tests.rs` compares the two), through std's
    /// fork path and a `pre_exec` step for what std leaves alone. Two
    /// differences remain, both std's: a program file that the kernel
    /// cannot execute (`ENOEXEC`: a script without `#!`) is run by
    /// `/bin/sh` (`execvp`) instead of failing, and signals 32 and 33,
    /// which glibc keeps for itself, keep the disposition trigd inherited.
    ///
    /// # Errors
    /// As [`Exec::spawn`].
    pub fn spawn_std(&self, stdio: [BorrowedFd<'_>; 3]) -> io::Result<Spawned> {
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::process::CommandExt;
        let os = |c: &CString| std::ffi::OsStr::from_bytes(c.as_bytes()).to_os_string();
        let mut cmd = std::process::Command::new(os(&self.program));
        if let Some((argv0, args)) = self.argv.split_first() {
            cmd.arg0(os(argv0)).args(args.iter().map(os));
        }
        cmd.env_clear();
        for var in &self.envp {
            let bytes = var.as_bytes();
            let at = bytes.iter().position(|&b| b == b'=').unwrap_or(bytes.len());
            let value = bytes.get(at + 1..).unwrap_or_default();
            cmd.env(
                std::ffi::OsStr::from_bytes(&bytes[..at]),
                std::ffi::OsStr::from_bytes(value),
            );
        }
        cmd.current_dir(os(&self.dir)).process_group(0);
        if let Some(gid) = self.ids.gid {
            cmd.gid(gid);
        }
        if let Some(uid) = self.ids.uid {
            cmd.uid(uid);
        }
        let [stdin, stdout, stderr] = stdio;
        cmd.stdin(stdin.try_clone_to_owned()?)
            .stdout(stdout.try_clone_to_owned()?)
            .stderr(stderr.try_clone_to_owned()?);
        let reset = ignored_signals();
        // SAFETY: the closure runs in the forked child before execve;
        // `clean_child` makes only async-signal-safe calls.
        unsafe {
            cmd.pre_exec(move || clean_child(reset));
        }
        let child = cmd.spawn()?;
        let pid = child.id();
        Ok(Spawned {
            pid,
            pidfd: super::pidfd_open(pid),
        })
    }
}

/// In a child forked by std, before `execve`: descriptors beyond stdio
/// made close-on-exec (not closed: std's own error pipe to the parent
/// must stay open until the exec), no signal blocked (std 1.95 leaves the
/// forking thread's mask), `reset` back at their default.
#[cfg(any(
    test,
    trigd_std_spawn,
    not(all(target_os = "linux", target_arch = "x86_64"))
))]
fn clean_child(reset: &[libc::c_int]) -> io::Result<()> {
    // SAFETY: close_range, sigemptyset, sigprocmask and signal are
    // async-signal-safe; the set is a local, fully initialised by
    // sigemptyset before use.
    unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC as libc::c_uint,
        );
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        if libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
        for &sig in reset {
            if libc::signal(sig, libc::SIG_DFL) == libc::SIG_ERR {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

#[cfg(any(
    test,
    trigd_std_spawn,
    not(all(target_os = "linux", target_arch = "x86_64"))
))]
/// The signals ignored in trigd (std's SIGPIPE, any ignored by whoever
/// started trigd), read once: a child gets them back at their default.
/// (Handlers need no reset: `execve` resets them.)
fn ignored_signals() -> &'static [libc::c_int] {
    static LIST: std::sync::OnceLock<Vec<libc::c_int>> = std::sync::OnceLock::new();
    LIST.get_or_init(|| {
        (1..=libc::SIGRTMAX())
            .filter(|&sig| {
                // SAFETY: sigaction is plain data, valid when zeroed; a
                // query (NULL new action) only writes `old`.
                let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
                // SAFETY: see above.
                let rc = unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) };
                rc == 0 && old.sa_sigaction == libc::SIG_IGN
            })
            .collect()
    })
}

/// A child started by [`Exec::spawn`], not yet reaped.
#[derive(Debug)]
pub struct Spawned {
    /// Its process id, also its process group id.
    pub pid: u32,
    /// Readable once it has exited; `None` on a kernel without `CLONE_PIDFD`
    /// and `pidfd_open` (before 5.3).
    pub pidfd: Option<OwnedFd>,
}

#[cfg(all(
    test,
    target_os = "linux",
    target_arch = "x86_64",
    not(trigd_std_spawn)
))]
#[path = "spawn_tests.rs"]
mod tests;
