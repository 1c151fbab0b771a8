//! The only module with `unsafe`: starting a child process (`spawn`,
//! `vfork`), process groups,
//! signals, poll, rlimits, and opening or `stat`ing a directory's entry by
//! its descriptor, and the socket systemd passes (`systemd`); the
//! machine's processes as `/proc` shows them (`procs`).
//! Each unsafe block carries a `// SAFETY:` comment.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

#[cfg(target_os = "linux")]
pub mod procs;
mod spawn;
pub mod systemd;
mod users;
#[cfg(all(target_os = "linux", target_arch = "x86_64", not(trigd_std_spawn)))]
mod vfork;

pub use spawn::{Exec, Spawned};
pub use users::{group_by_name, primary_group_of, user_by_name};

/// The ids a child switches to before it runs its program.
#[derive(Debug, Clone, Copy, Default)]
struct Ids {
    gid: Option<u32>,
    uid: Option<u32>,
    /// Drop the supplementary groups (`setgroups(0)`): switching the uid as root.
    /// (Read by `vfork` only: `std::process::Command::uid` drops them
    /// itself.)
    #[cfg_attr(
        not(all(target_os = "linux", target_arch = "x86_64", not(trigd_std_spawn))),
        allow(dead_code)
    )]
    drop_groups: bool,
}

/// Wait for the child `pid` to exit and reap it (`waitpid`, retried on
/// EINTR).
///
/// # Errors
/// `waitpid` failed (not our child, or reaped already).
pub fn wait_child(pid: u32) -> io::Result<std::process::ExitStatus> {
    use std::os::unix::process::ExitStatusExt;
    let pid =
        libc::pid_t::try_from(pid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: `status` is a valid, writable c_int.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        if rc == pid {
            return Ok(std::process::ExitStatus::from_raw(status));
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Tests that spawn take it shared; a test that counts this process's
/// descriptors takes it exclusive, so no other test's pipes are open
/// while it counts.
#[cfg(test)]
pub static SPAWN_LOCK: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// A one-shot "stop now" flag that can also be `poll`ed: an `eventfd`
/// that [`AbortSignal::trigger`] makes readable for every poller at once
/// (nobody reads it, so it stays readable). One descriptor: the pipe it
/// was before took two, and three system calls per run to create and
/// close.
#[derive(Debug)]
pub struct AbortSignal {
    /// The eventfd; polled, written once by `trigger`, never read.
    fd: OwnedFd,
    /// Set by `trigger`.
    triggered: AtomicBool,
}

impl AbortSignal {
    /// A signal not triggered yet.
    ///
    /// # Errors
    /// No eventfd can be created (out of file descriptors).
    pub fn new() -> io::Result<AbortSignal> {
        Ok(AbortSignal {
            fd: eventfd()?,
            triggered: AtomicBool::new(false),
        })
    }

    /// Make [`AbortSignal::fd`] readable: every poller wakes. Idempotent.
    pub fn trigger(&self) {
        if self.triggered.swap(true, Ordering::SeqCst) {
            return;
        }
        let one: u64 = 1;
        // SAFETY: writes the 8 bytes of `one` to the eventfd we own; it
        // cannot fail (one write cannot overflow the counter).
        unsafe {
            libc::write(self.fd.as_raw_fd(), (&raw const one).cast(), 8);
        }
    }

    /// Whether [`AbortSignal::trigger`] was called.
    pub fn is_triggered(&self) -> bool {
        self.triggered.load(Ordering::SeqCst)
    }

    /// The eventfd, to include in a `poll` set (POLLIN once triggered).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// A new eventfd at zero, close-on-exec.
fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd takes an initial value and flags; no memory is passed.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: eventfd succeeded, so `fd` is a new open fd owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A pipe, both ends close-on-exec: (read end, write end).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds: [libc::c_int; 2] = [-1, -1];
    // SAFETY: `fds` is a valid, writable array of two c_ints, as pipe2 requires.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both fds are open and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Send `sig` (e.g. `libc::SIGTERM`) to the process group `pgid`; errors
/// (ESRCH: group already gone) are ignored.
///
/// A `pgid` of 0 or 1 (own group / every process) or one that does not fit
/// a `pid_t` is refused silently: it can only be a bug.
pub fn kill_group(pgid: u32, sig: i32) {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return;
    };
    if pgid <= 1 {
        return;
    }
    // SAFETY: kill has no memory-safety preconditions; -pgid (pgid > 1)
    // addresses exactly that process group.
    unsafe {
        libc::kill(-pgid, sig);
    }
}

/// A signal trigd reacts to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM: graceful shutdown.
    Term,
    /// SIGINT: graceful shutdown.
    Int,
    /// SIGHUP: reload the config.
    Hup,
}

/// The set {SIGTERM, SIGINT, SIGHUP}.
fn handled_set() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it fully
    // before sigaddset uses it, and all pointers are to this local.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGHUP);
        set
    }
}

/// Block SIGTERM, SIGINT and SIGHUP in the calling thread. Call in `main`
/// before any thread is spawned, so every thread inherits the mask and only
/// [`wait_signal`] receives them.
pub fn block_signals() {
    let set = handled_set();
    // SAFETY: `set` is an initialised sigset_t; a null old-set pointer is allowed.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    debug_assert_eq!(rc, 0, "pthread_sigmask failed");
}

/// Wait (sigwait) for one of the blocked signals.
pub fn wait_signal() -> Signal {
    let set = handled_set();
    loop {
        let mut sig: libc::c_int = 0;
        // SAFETY: `set` is an initialised sigset_t and `sig` a writable c_int.
        let rc = unsafe { libc::sigwait(&set, &mut sig) };
        if rc != 0 {
            continue;
        }
        match sig {
            libc::SIGTERM => return Signal::Term,
            libc::SIGINT => return Signal::Int,
            libc::SIGHUP => return Signal::Hup,
            _ => continue,
        }
    }
}

/// Wait (sigtimedwait) at most `limit` for one of the blocked signals;
/// `None` when none came.
pub fn wait_signal_timeout(limit: Duration) -> Option<Signal> {
    let set = handled_set();
    let deadline = std::time::Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return None;
        }
        let ts = libc::timespec {
            tv_sec: left.as_secs() as libc::time_t,
            tv_nsec: libc::c_long::from(left.subsec_nanos() as i32),
        };
        // SAFETY: `set` is an initialised sigset_t, `ts` a valid timespec,
        // and a null siginfo pointer is allowed.
        let sig = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &ts) };
        match sig {
            libc::SIGTERM => return Some(Signal::Term),
            libc::SIGINT => return Some(Signal::Int),
            libc::SIGHUP => return Some(Signal::Hup),
            _ => continue, // EAGAIN (timeout: checked above), EINTR
        }
    }
}

/// Raise RLIMIT_NOFILE's soft limit to its hard limit; returns the new soft limit.
pub fn raise_nofile_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 0;
    }
    if lim.rlim_cur < lim.rlim_max {
        let want = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: `want` is a valid rlimit, only read by setrlimit.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } == 0 {
            lim.rlim_cur = lim.rlim_max;
        }
    }
    lim.rlim_cur
}

/// `poll(2)` over `fds`, waiting at most `timeout` (`None`: no limit). A
/// timeout is rounded up to whole milliseconds so a caller waiting for an
/// instant does not spin. Returns the number of ready entries; an interrupted
/// call (EINTR) returns `Ok(0)`, as if it timed out.
pub fn poll(fds: &mut [libc::pollfd], timeout: Option<Duration>) -> io::Result<usize> {
    let ms: libc::c_int = match timeout {
        None => -1,
        Some(d) => {
            let ms = d.as_nanos().div_ceil(1_000_000);
            libc::c_int::try_from(ms).unwrap_or(libc::c_int::MAX)
        }
    };
    // SAFETY: `fds` is a valid, writable slice of pollfd of the given length.
    let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if rc < 0 {
        let err = io::Error::last_os_error();
        if err.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(err);
    }
    Ok(rc as usize)
}

/// A pidfd for the child `pid` (readable once it has exited), or `None` when
/// the kernel lacks `pidfd_open` (before 5.3) or refuses it. The fd is
/// close-on-exec.
pub fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    let pid = libc::pid_t::try_from(pid).ok()?;
    // SAFETY: pidfd_open takes (pid_t, unsigned int) and returns a new fd or -1;
    // no memory is passed.
    let rc = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0 as libc::c_uint) };
    if rc < 0 {
        return None;
    }
    let fd = RawFd::try_from(rc).ok()?;
    // SAFETY: the syscall succeeded, so `fd` is a new open fd that we own.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Whether our child `pid` has exited, without reaping it (waitid with
/// `WNOWAIT`), so it stays a zombie holding its pid and process group.
/// Also true when `pid` is not (or no longer) a waitable child.
pub fn exited_nowait(pid: u32) -> bool {
    let pid: libc::id_t = pid;
    // SAFETY: siginfo_t is plain data, valid when zeroed.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is a valid, writable siginfo_t.
    let rc = unsafe {
        libc::waitid(
            libc::P_PID,
            pid,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    if rc != 0 {
        return io::Error::last_os_error().kind() != io::ErrorKind::Interrupted;
    }
    // SAFETY: waitid filled `info` (or left it zeroed when nothing changed);
    // si_pid is valid for the CLD_* codes waitid reports.
    unsafe { info.si_pid() != 0 }
}

/// A pipe, both ends close-on-exec, the read end non-blocking: (read end,
/// write end). The write end stays blocking (a child's stdout).
pub fn pipe_nonblocking_reader() -> io::Result<(OwnedFd, OwnedFd)> {
    let (read, write) = pipe()?;
    // The read end of a new pipe has no status flag F_SETFL could change
    // but O_NONBLOCK, so it is set without reading them first (F_GETFL).
    // SAFETY: F_SETFL takes an int argument; no memory is passed.
    if unsafe { libc::fcntl(read.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((read, write))
}

/// Take the exclusive advisory lock (`flock`) on `file` if no one holds
/// it: `Ok(false)` when another open file description holds it. Held until
/// `file` (every descriptor of its description) is closed.
///
/// # Errors
/// The OS refused the lock for another reason.
pub fn try_lock(file: &std::fs::File) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    loop {
        // SAFETY: flock on a valid, open descriptor borrowed for the call.
        let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if r == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => return Ok(false),
            io::ErrorKind::Interrupted => continue,
            _ => return Err(e),
        }
    }
}

/// An exclusive advisory lock (`flock`) on an open file, released on drop.
/// Serialises writers of a state file across processes (server and CLI).
pub struct FileLock<'a> {
    file: &'a std::fs::File,
}

impl<'a> FileLock<'a> {
    /// Block until the exclusive lock on `file` is held.
    ///
    /// # Errors
    /// The OS refused the lock.
    pub fn exclusive(file: &'a std::fs::File) -> io::Result<FileLock<'a>> {
        use std::os::fd::AsRawFd;
        loop {
            // SAFETY: flock on a valid, open descriptor borrowed for 'a.
            let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
            if r == 0 {
                return Ok(FileLock { file });
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

impl Drop for FileLock<'_> {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        // SAFETY: unlocking a descriptor that is still open (borrowed).
        unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// Write `buf` to stderr with as few `write(2)` calls as possible (one for
/// a log line), without the stderr lock; errors are ignored (there is no
/// better place to report them).
pub fn write_stderr(mut buf: &[u8]) {
    while !buf.is_empty() {
        // SAFETY: writes from a valid, live slice to fd 2; no memory is
        // handed to the kernel beyond the call.
        let n = unsafe { libc::write(2, buf.as_ptr().cast(), buf.len()) };
        if n > 0 {
            buf = &buf[n as usize..];
        } else if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        } else {
            return;
        }
    }
}

/// The effective uid and gid of trigd.
pub fn effective_ids() -> (u32, u32) {
    // SAFETY: geteuid and getegid cannot fail and touch no memory.
    unsafe { (libc::geteuid(), libc::getegid()) }
}

/// Return free heap memory to the operating system (`malloc_trim`), after
/// a burst of temporary allocations such as a run log compaction.
pub fn trim_heap() {
    // SAFETY: malloc_trim only releases memory the allocator holds free.
    unsafe { libc::malloc_trim(0) };
}

/// Unmap from this process the pages of trigd's own read-only segments
/// (code, constants, unwind tables) after start-up or a reload: the code
/// that loaded the configuration stays out of the resident set until it
/// runs again, and the code that runs next maps its pages back on its
/// first use (minor faults: the pages stay in the page cache, which may
/// now reclaim the others). Each page fault maps the 64 KiB around it, so
/// start-up alone made most of the binary resident. Writable segments
/// (data, relocated constants) are left alone: `MADV_DONTNEED` would
/// revert them to the file.
///
/// The figure that keeps it (static builds of 5e5629f with trigd at
/// opt-level "s", with and without this call, on the 2-core bench VM):
/// VmRSS 0.5 s after start-up, nothing asked yet, 6,096 KiB without and
/// 3,920-3,984 with; webhook idles at 8,944 and bench/run.sh's target is
/// ≤ 0.60× (5,366). 0.5 s after a first sync run (`bench/ab.sh -c echo8
/// -r 2 -s 3 base=OLD rel=NEW`, column "idle VmRSS": that run's code is
/// resident again) 6,508 against 5,612, and after the load 7,916 against
/// 7,752. Without it trigd idles at 0.68× webhook. Called once start-up
/// has settled (`config::reload`, `SETTLED`) rather than as the reload
/// thread starts, which the other threads' start-up then undid (static
/// build of 61b0a14, `bench/ab.sh`-like start, 5 trials each): 0.6 s
/// after start 3,976-4,488 KiB → 1,720-1,728; 0.5 s after a first
/// `/healthz` 5,416-5,488 → 5,292-5,300 (that request alone faults about
/// 55 code pages back, 64 KiB each). Not called after a reload: a reload
/// trial of bench/run.sh (a new program file, then its first sync call)
/// faulted 78-83 pages back with it and 3-13 without (release build of
/// e69868c); no bench row measures memory after a reload.
/// (An earlier build released the pages after each reload.)
pub fn release_code_pages() {
    // SAFETY: the callback reads the program headers dl_iterate_phdr
    // hands it, valid during the call; it only advises the kernel about
    // whole pages inside read-only segments of the main program.
    unsafe { libc::dl_iterate_phdr(Some(release_readonly_segments), std::ptr::null_mut()) };
}

/// [`release_code_pages`] for the first object `dl_iterate_phdr` names:
/// the main program. Returns 1 to stop after it.
unsafe extern "C" fn release_readonly_segments(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    _data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: sysconf has no memory effects.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    // SAFETY: `info` is valid for the call (dl_iterate_phdr's contract)
    // and points to `dlpi_phnum` program headers.
    let (base, headers) = unsafe {
        let info = &*info;
        let phdrs = std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum));
        (info.dlpi_addr as usize, phdrs)
    };
    for h in headers {
        if h.p_type != libc::PT_LOAD || h.p_flags & libc::PF_W != 0 {
            continue;
        }
        // Only the pages wholly inside the segment: a page shared with a
        // writable neighbour keeps its contents.
        let start = (base + h.p_vaddr as usize).next_multiple_of(page);
        let end = (base + (h.p_vaddr + h.p_memsz) as usize) / page * page;
        if end > start {
            // SAFETY: [start, end) lies in a read-only, file-backed mapping
            // of the program that is never written: dropping its pages
            // only makes the next access fault them back from the file.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
        }
    }
    1
}

/// Set glibc's malloc for a server with a thread per connection: at most
/// one arena per core plus one (the file watcher's thread starts before
/// the threads that read the program files, which then each get one), and
/// the mmap and trim thresholds kept at glibc's starting 128 KiB. By
/// default every thread may get an arena of its own (up to 8 per core),
/// memory freed in one is not reused by the others, and glibc raises both
/// thresholds to the size of each large block freed (up to 32 MiB), so
/// free memory stays resident; `malloc_trim` does not give back the free
/// top of an arena other than the main one.
///
/// The figure that keeps it: VmRSS of trigd after 4 interleaved rounds of
/// 5 s of sync `/bin/true` at 8 connections (about 40,000 runs), on the
/// 2-core bench VM: 7,428 KiB with both settings, 7,720 without the arena
/// cap, 11,240 without the thresholds, 17,488 with glibc's defaults
/// (bench/run.sh's target after load is ≤ 0.10× webhook's, which holds
/// 150-175 MiB). Re-measure: build once without this call and run
/// `bench/ab.sh -c true8 -r 4 tuned=OLD default=NEW`; compare the column
/// "VmRSS at end".
pub fn tune_malloc(cores: usize) {
    let arenas = libc::c_int::try_from(cores.max(2) + 1).unwrap_or(libc::c_int::MAX);
    let threshold: libc::c_int = 128 * 1024;
    // SAFETY: mallopt changes allocator settings; called before the
    // server's threads start.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, arenas);
        libc::mallopt(libc::M_MMAP_THRESHOLD, threshold);
        libc::mallopt(libc::M_TRIM_THRESHOLD, threshold);
    }
}

/// Whether this process may write `path` (`access(2)` with `W_OK`): the
/// error is `EROFS` on a read-only file system, `EACCES` without permission.
///
/// # Errors
/// The `access` error.
pub fn may_write(path: &std::path::Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    let rc = unsafe { libc::access(c.as_ptr(), libc::W_OK) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Open `name`, one entry of the directory `dir`, for reading:
/// close-on-exec and non-blocking (a FIFO named like a program file must
/// not block the open). Relative to `dir`'s descriptor the kernel walks one
/// path component instead of the whole path.
pub fn open_in(dir: &std::fs::File, name: &std::ffi::OsStr) -> io::Result<std::fs::File> {
    let name = c_name(name)?;
    let flags = libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NONBLOCK;
    // SAFETY: `dir` is an open descriptor borrowed for the call and `name`
    // a NUL-terminated string that outlives it.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: openat succeeded, so `fd` is open and owned by nobody else.
    Ok(std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// What `fstatat` reports of `name`, one entry of the directory `dir`
/// (symbolic links followed, as `std::fs::metadata` does).
#[derive(Debug, Clone, Copy)]
pub struct EntryStat {
    /// Whether it is a regular file.
    pub is_file: bool,
    /// Device number.
    pub dev: u64,
    /// Inode number.
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// Modification time (seconds, nanoseconds).
    pub mtime: (i64, i64),
    /// Status change time (seconds, nanoseconds).
    pub ctime: (i64, i64),
}

/// `fstatat(dir, name)`: see [`EntryStat`].
pub fn stat_in(dir: &std::fs::File, name: &std::ffi::OsStr) -> io::Result<EntryStat> {
    let name = c_name(name)?;
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `dir` is an open descriptor, `name` NUL-terminated and `st`
    // a writable `stat` for the duration of the call.
    let rc = unsafe { libc::fstatat(dir.as_raw_fd(), name.as_ptr(), &mut st, 0) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(EntryStat {
        is_file: st.st_mode & libc::S_IFMT == libc::S_IFREG,
        dev: st.st_dev,
        ino: st.st_ino,
        size: u64::try_from(st.st_size).unwrap_or(0),
        mtime: (st.st_mtime, st.st_mtime_nsec),
        ctime: (st.st_ctime, st.st_ctime_nsec),
    })
}

/// `name` as a C string; a name holding a NUL byte cannot name a file.
fn c_name(name: &std::ffi::OsStr) -> io::Result<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(name.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file name holds a NUL byte"))
}

/// A duplicate of `fd` without close-on-exec, as a descriptor trigd
/// inherited from whoever started it may be (for tests of what a child
/// inherits).
#[cfg(test)]
pub fn dup_inheritable(fd: std::os::fd::BorrowedFd<'_>) -> OwnedFd {
    // SAFETY: dup of a borrowed, open descriptor; no memory is passed.
    let new = unsafe { libc::dup(fd.as_raw_fd()) };
    assert!(new >= 0, "dup: {}", io::Error::last_os_error());
    // SAFETY: dup succeeded, so `new` is open and owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(new) }
}

/// The cores this process may run on (at least 1), asked once: the
/// standard library reads the cgroup's CPU quota files at every call.
pub fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abort_signal_wakes_pollers_once() {
        // Opens descriptors: not while a test counts them.
        let _g = SPAWN_LOCK.read().unwrap_or_else(|e| e.into_inner());
        let a = AbortSignal::new().unwrap();
        assert!(!a.is_triggered());
        let mut fds = [libc::pollfd {
            fd: a.fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        assert_eq!(poll(&mut fds, Some(Duration::ZERO)).unwrap(), 0);
        a.trigger();
        a.trigger();
        assert!(a.is_triggered());
        assert_eq!(poll(&mut fds, Some(Duration::from_secs(1))).unwrap(), 1);
        assert_ne!(fds[0].revents & (libc::POLLIN | libc::POLLHUP), 0);
    }

    #[test]
    fn abort_signal_is_an_eventfd() {
        // Opens descriptors: not while a test counts them.
        let _g = SPAWN_LOCK.read().unwrap_or_else(|e| e.into_inner());
        let a = AbortSignal::new().unwrap();
        // One descriptor, an eventfd (the pipe it was took two, and three
        // system calls per run).
        let link = std::fs::read_link(format!("/proc/self/fd/{}", a.fd())).unwrap();
        assert_eq!(link.to_string_lossy(), "anon_inode:[eventfd]");
    }

    #[test]
    fn kill_group_refuses_own_and_all() {
        // Would kill the test process (0) or everything (1) if not refused.
        kill_group(0, libc::SIGKILL);
        kill_group(1, libc::SIGKILL);
        kill_group(u32::MAX, libc::SIGKILL);
    }

    #[test]
    fn nofile_limit_is_positive() {
        assert!(raise_nofile_limit() > 0);
    }

    /// Written at run time (in a writable segment) and relocated at load
    /// (a table of pointers): both would revert or break if a writable
    /// segment's pages were dropped.
    static WRITTEN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    static RELOCATED: [&str; 2] = ["code", "pages"];

    fn resident_file_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("RssFile:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    #[test]
    fn released_code_pages_leave_data_alone_and_leave_the_resident_set() {
        WRITTEN.store(41, Ordering::SeqCst);
        let before = resident_file_kib();
        release_code_pages();
        let after = resident_file_kib();
        // Other tests run meanwhile and fault their code back in, but not
        // the start-up's and the harness's several MiB.
        assert!(after < before, "RssFile {before} KiB before, {after} after");
        assert_eq!(WRITTEN.fetch_add(1, Ordering::SeqCst), 41);
        assert_eq!(RELOCATED.join(" "), "code pages");
        release_code_pages();
        assert_eq!(WRITTEN.load(Ordering::SeqCst), 42);
    }
}
