//! The only module with `unsafe`: starting a child process, process groups,
//! signals, poll, rlimits, and opening or `stat`ing a directory's entry by
//! its descriptor.
//! Each unsafe block carries a `// SAFETY:` comment.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Duration;

/// A one-shot "stop now" flag that can also be `poll`ed: an `eventfd`
/// that [`AbortSignal::trigger`] makes readable for every poller at once
/// (nobody reads it, so it stays readable). One descriptor: the pipe it
/// was before took two, and three system calls per run to create and
/// close (`bench/README.md`, "Round six").
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

/// Initial buffer size for the `get*_r` lookups; doubled on ERANGE up to
/// [`MAX_LOOKUP_BUF`].
const LOOKUP_BUF: usize = 1024;
/// Largest buffer a user or group lookup may use.
const MAX_LOOKUP_BUF: usize = 1 << 20;

/// Call a `get*_r` function with a growing buffer. `f(buf, len)` returns
/// the function's result code (0 or an errno) and whether an entry was
/// found; the entry's fields must be copied out by `f` itself while `buf`
/// is alive.
fn with_lookup_buf(mut f: impl FnMut(*mut libc::c_char, usize) -> (libc::c_int, bool)) -> bool {
    let mut len = LOOKUP_BUF;
    loop {
        let mut buf = vec![0 as libc::c_char; len];
        let (rc, found) = f(buf.as_mut_ptr(), buf.len());
        if rc == libc::ERANGE && len < MAX_LOOKUP_BUF {
            len *= 2;
            continue;
        }
        return rc == 0 && found;
    }
}

/// The uid and primary gid of the user called `name`, from the system's
/// user database (`getpwnam_r`); `None` when there is no such user.
pub fn user_by_name(name: &str) -> Option<(u32, u32)> {
    let cname = std::ffi::CString::new(name).ok()?;
    let mut ids = None;
    let found = with_lookup_buf(|buf, len| {
        // SAFETY: passwd is plain data, valid when zeroed; it is only read
        // after getpwnam_r reports an entry.
        let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
        let mut out: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: `cname` is NUL-terminated; `pw`, `buf` (of `len` bytes,
        // alive for this call) and `out` are valid and writable.
        let rc = unsafe { libc::getpwnam_r(cname.as_ptr(), &mut pw, buf, len, &mut out) };
        if rc == 0 && !out.is_null() {
            ids = Some((pw.pw_uid, pw.pw_gid));
        }
        (rc, !out.is_null())
    });
    ids.filter(|_| found)
}

/// The primary gid of the user with `uid` (`getpwuid_r`); `None` when the
/// user database has no such user.
pub fn primary_group_of(uid: u32) -> Option<u32> {
    let mut gid = None;
    let found = with_lookup_buf(|buf, len| {
        // SAFETY: passwd is plain data, valid when zeroed.
        let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
        let mut out: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: `pw`, `buf` (of `len` bytes, alive for this call) and
        // `out` are valid and writable.
        let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf, len, &mut out) };
        if rc == 0 && !out.is_null() {
            gid = Some(pw.pw_gid);
        }
        (rc, !out.is_null())
    });
    gid.filter(|_| found)
}

/// The gid of the group called `name` (`getgrnam_r`); `None` when there
/// is no such group.
pub fn group_by_name(name: &str) -> Option<u32> {
    let cname = std::ffi::CString::new(name).ok()?;
    let mut gid = None;
    let found = with_lookup_buf(|buf, len| {
        // SAFETY: group is plain data, valid when zeroed.
        let mut gr: libc::group = unsafe { std::mem::zeroed() };
        let mut out: *mut libc::group = std::ptr::null_mut();
        // SAFETY: `cname` is NUL-terminated; `gr`, `buf` (of `len` bytes,
        // alive for this call) and `out` are valid and writable.
        let rc = unsafe { libc::getgrnam_r(cname.as_ptr(), &mut gr, buf, len, &mut out) };
        if rc == 0 && !out.is_null() {
            gid = Some(gr.gr_gid);
        }
        (rc, !out.is_null())
    });
    gid.filter(|_| found)
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

/// Cap glibc's malloc arenas at `n`. By default every thread that
/// allocates may get an arena of its own (up to 8 per core); with a thread
/// per connection, memory freed in one arena is not reused by the others
/// and RSS crept up with every run served (7 MB to 24 MB over 20,000 sync
/// runs). One arena per core keeps RSS flat at no measurable cost.
pub fn limit_malloc_arenas(n: usize) {
    let n = libc::c_int::try_from(n).unwrap_or(libc::c_int::MAX);
    // SAFETY: mallopt changes an allocator setting; called before the
    // server's threads start.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, n) };
}

/// Size from which glibc's malloc maps a block of its own (returned to the
/// system when freed), and free space at the top of an arena above which
/// a free gives memory back: glibc's own starting value for both.
pub const MALLOC_THRESHOLD: usize = 128 * 1024;

/// Keep glibc's mmap and trim thresholds at [`MALLOC_THRESHOLD`]. By
/// default glibc raises the mmap threshold to the size of each large block
/// freed (up to 32 MiB) and the trim threshold to twice that: after a burst
/// of async runs had freed the run queue's and the run index's old buffers
/// (1-2.5 MiB each), the second arena held 7-10 MiB resident with 4.3 MiB
/// in use, and `malloc_trim` does not give back the free top of an arena
/// other than the main one (`bench/README.md`, "Memory after load").
pub fn fix_malloc_thresholds() {
    let n = libc::c_int::try_from(MALLOC_THRESHOLD).unwrap_or(libc::c_int::MAX);
    // SAFETY: mallopt changes allocator settings; called before the
    // server's threads start.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, n);
        libc::mallopt(libc::M_TRIM_THRESHOLD, n);
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

/// The ids a child switches to before it runs its program.
#[derive(Debug, Clone, Copy, Default)]
struct Ids {
    gid: Option<u32>,
    uid: Option<u32>,
    /// Drop the supplementary groups (`setgroups(0)`): switching the uid as root.
    drop_groups: bool,
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
    /// every signal's disposition at its default.
    ///
    /// The child is made with `clone(CLONE_VM | CLONE_VFORK)` on a small
    /// stack in this function's frame: no stack is mapped and unmapped per
    /// child (glibc's `posix_spawn` does, under the address-space lock that
    /// every thread of trigd shares), the pidfd comes from the clone
    /// (`CLONE_PIDFD`), and the child resets only the signals whose
    /// disposition is not the default (glibc's queries and resets all 64).
    /// The calling thread is suspended until the child has called `execve`
    /// or failed.
    ///
    /// # Errors
    /// The error of the step that failed in the child (`execve`, `chdir`,
    /// an id switch, …), or of `clone` itself; a failed child is reaped.
    pub fn spawn(&self, stdio: [BorrowedFd<'_>; 3]) -> io::Result<Spawned> {
        let argv = nul_terminated(&self.argv);
        let envp = nul_terminated(&self.envp);
        let reset = reset_signals();
        let mut child = ChildArgs {
            program: self.program.as_ptr(),
            argv: argv.as_ptr(),
            envp: envp.as_ptr(),
            dir: self.dir.as_ptr(),
            stdio: stdio.map(|fd| fd.as_raw_fd()),
            ids: self.ids,
            reset: reset.as_ptr(),
            reset_len: reset.len(),
            errno: AtomicI32::new(0),
        };
        let (pid, pidfd) = clone_vfork(&mut child)?;
        let errno = child.errno.load(Ordering::SeqCst);
        if errno != 0 {
            // The child has exited (CLONE_VFORK returned): reap it.
            drop(pidfd);
            let _ = wait_child(pid);
            return Err(io::Error::from_raw_os_error(errno));
        }
        Ok(Spawned { pid, pidfd })
    }
}

/// Pointers to `strings` followed by NULL, as `execve` takes them.
fn nul_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    let mut ptrs: Vec<*const libc::c_char> = strings.iter().map(|s| s.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    ptrs
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

/// The child's view of an [`Exec`]: raw pointers into memory the parent
/// keeps alive (and does not touch) until the child has called `execve` or
/// exited.
struct ChildArgs {
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    dir: *const libc::c_char,
    stdio: [RawFd; 3],
    ids: Ids,
    reset: *const libc::c_int,
    reset_len: usize,
    /// Set by the child to the errno of the step that failed.
    errno: AtomicI32,
}

/// The kernel's `struct sigaction` (what `rt_sigaction` takes, unlike
/// libc's); only ever set to SIG_DFL or read.
#[repr(C)]
struct KernelSigaction {
    handler: libc::sighandler_t,
    flags: libc::c_ulong,
    restorer: usize,
    mask: u64,
}

/// Size of the kernel's signal set, as `rt_sigaction`/`rt_sigprocmask` take it.
const KERNEL_SIGSET: usize = 8;

/// The signals whose disposition is not the default (ignored, like std's
/// SIGPIPE, or handled, like std's SIGSEGV/SIGBUS), read once. trigd installs
/// no handler after start-up (it waits for its signals with `sigwait`), so
/// the list stays right.
fn reset_signals() -> &'static [libc::c_int] {
    static LIST: std::sync::OnceLock<Vec<libc::c_int>> = std::sync::OnceLock::new();
    LIST.get_or_init(|| {
        (1..=64)
            .filter(|&sig| sig != libc::SIGKILL && sig != libc::SIGSTOP)
            .filter(|&sig| {
                let mut old = KernelSigaction {
                    handler: libc::SIG_DFL,
                    flags: 0,
                    restorer: 0,
                    mask: 0,
                };
                // SAFETY: a query (NULL new action) into a valid, writable
                // struct of the kernel's layout and the kernel's sigset size.
                let rc = unsafe {
                    libc::syscall(
                        libc::SYS_rt_sigaction,
                        sig,
                        std::ptr::null::<KernelSigaction>(),
                        &mut old as *mut KernelSigaction,
                        KERNEL_SIGSET,
                    )
                };
                rc == 0 && old.handler != libc::SIG_DFL
            })
            .collect()
    })
}

/// Bytes of the child's stack (it runs [`child_main`]: system calls only).
const CHILD_STACK: usize = 8 * 1024;

/// `clone(CLONE_VM | CLONE_VFORK | CLONE_PIDFD)` running [`child_main`] on a
/// stack in this frame, with every signal blocked in this thread meanwhile
/// (a handler must not run in the child, which shares trigd's memory).
/// Returns once the child has called `execve` or exited.
fn clone_vfork(child: &mut ChildArgs) -> io::Result<(u32, Option<OwnedFd>)> {
    let mut stack = std::mem::MaybeUninit::<[u8; CHILD_STACK]>::uninit();
    // The stack grows down: the child starts at the (16-byte aligned) top.
    let top = (stack.as_mut_ptr() as usize + CHILD_STACK) & !15;
    let mut pidfd: libc::c_int = -1;
    let all: u64 = !0;
    let mut old: u64 = 0;
    let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD | libc::SIGCHLD;
    // SAFETY: rt_sigprocmask with valid pointers to 8-byte signal sets
    // (raw, so glibc's internal signals are blocked too). clone: `top` is
    // the aligned end of CHILD_STACK bytes that stay alive and unused by
    // this thread until clone returns, which with CLONE_VFORK is after the
    // child has called execve or exited; `child` and the memory its
    // pointers reach (owned by the caller's `Exec` and `spawn`) live as
    // long; `pidfd` is a valid c_int for CLONE_PIDFD to fill.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &all as *const u64,
            &mut old as *mut u64,
            KERNEL_SIGSET,
        );
        let pid = libc::clone(
            child_main,
            top as *mut libc::c_void,
            flags,
            (child as *mut ChildArgs).cast::<libc::c_void>(),
            &mut pidfd as *mut libc::c_int,
        );
        let err = io::Error::last_os_error();
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &old as *const u64,
            std::ptr::null::<u64>(),
            KERNEL_SIGSET,
        );
        if pid < 0 {
            return Err(err);
        }
        pid
    };
    let pid = u32::try_from(pid).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
    let pidfd = if pidfd >= 0 {
        // SAFETY: CLONE_PIDFD stored a new descriptor that we own.
        Some(unsafe { OwnedFd::from_raw_fd(pidfd) })
    } else {
        // A kernel before 5.2 ignores CLONE_PIDFD.
        pidfd_open(pid)
    };
    Ok((pid, pidfd))
}

/// A raw system call's result: its value, or the errno it failed with.
/// Only async-signal-safe operations (the errno is the calling thread's,
/// here the suspended parent thread's, which nobody reads meanwhile).
fn raw_result(rc: libc::c_long) -> Result<libc::c_long, libc::c_int> {
    if rc < 0 {
        // SAFETY: __errno_location returns the (valid) thread's errno slot.
        Err(unsafe { *libc::__errno_location() })
    } else {
        Ok(rc)
    }
}

/// The child between `clone` and `execve`. It shares trigd's memory, so it
/// allocates nothing, takes no lock and calls no libc function that does
/// more than one system call (glibc's `setuid` & co. signal every thread of
/// the process: raw system calls instead). On failure it stores the errno
/// for the parent and exits with 127.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ChildArgs` that `clone_vfork` passed, alive
    // until this child execs or exits.
    let a = unsafe { &*(arg as *const ChildArgs) };
    // SAFETY: see `child_steps`.
    if let Err(errno) = unsafe { child_steps(a) } {
        a.errno.store(errno, Ordering::SeqCst);
    }
    127
}

/// What the child does, in the order of `std::process`'s own fork path:
/// descriptors (and no others), ids, directory, process group, signals,
/// `execve`. Returns
/// only on failure.
///
/// # Safety
/// `a`'s pointers are valid: C strings and NULL-terminated arrays of them,
/// and `reset_len` signal numbers at `reset`.
unsafe fn child_steps(a: &ChildArgs) -> Result<(), libc::c_int> {
    for (target, &fd) in a.stdio.iter().enumerate() {
        if fd == target as RawFd {
            // Already in place: only let it survive the exec.
            raw_result(libc::syscall(libc::SYS_fcntl, fd, libc::F_SETFD, 0))?;
        } else {
            raw_result(libc::syscall(libc::SYS_dup3, fd, target as RawFd, 0))?;
        }
    }
    // Nothing beyond stdio, also not a descriptor trigd inherited without
    // close-on-exec. A kernel before 5.9 lacks close_range: trigd's own
    // descriptors are close-on-exec all the same.
    let _ = libc::syscall(
        libc::SYS_close_range,
        3 as libc::c_uint,
        libc::c_uint::MAX,
        0 as libc::c_uint,
    );
    if a.ids.drop_groups {
        // As std: a failure here (no CAP_SETGID) is left to the setuid.
        let _ = libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>());
    }
    if let Some(gid) = a.ids.gid {
        raw_result(libc::syscall(libc::SYS_setgid, gid))?;
    }
    if let Some(uid) = a.ids.uid {
        raw_result(libc::syscall(libc::SYS_setuid, uid))?;
    }
    raw_result(libc::syscall(libc::SYS_chdir, a.dir))?;
    raw_result(libc::syscall(libc::SYS_setpgid, 0, 0))?;
    let default = KernelSigaction {
        handler: libc::SIG_DFL,
        flags: 0,
        restorer: 0,
        mask: 0,
    };
    for i in 0..a.reset_len {
        let sig = *a.reset.add(i);
        raw_result(libc::syscall(
            libc::SYS_rt_sigaction,
            sig,
            &default as *const KernelSigaction,
            std::ptr::null::<KernelSigaction>(),
            KERNEL_SIGSET,
        ))?;
    }
    let none: u64 = 0;
    raw_result(libc::syscall(
        libc::SYS_rt_sigprocmask,
        libc::SIG_SETMASK,
        &none as *const u64,
        std::ptr::null::<u64>(),
        KERNEL_SIGSET,
    ))?;
    raw_result(libc::syscall(libc::SYS_execve, a.program, a.argv, a.envp))?;
    Ok(())
}

/// A duplicate of `fd` without close-on-exec, as a descriptor trigd
/// inherited from whoever started it may be (for tests of what a child
/// inherits).
#[cfg(test)]
pub fn dup_inheritable(fd: BorrowedFd<'_>) -> OwnedFd {
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
    fn user_and_group_lookups() {
        assert_eq!(user_by_name("root"), Some((0, 0)));
        assert_eq!(primary_group_of(0), Some(0));
        assert_eq!(group_by_name("root"), Some(0));
        assert_eq!(user_by_name("no-such-user-trigd"), None);
        assert_eq!(group_by_name("no-such-group-trigd"), None);
        assert_eq!(user_by_name("nul\0byte"), None);
    }

    #[test]
    fn nofile_limit_is_positive() {
        assert!(raise_nofile_limit() > 0);
    }
}
