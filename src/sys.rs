//! The only module with `unsafe`: process groups, signals, poll, rlimits.
//! Each unsafe block carries a `// SAFETY:` comment.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::RawFd;

/// A one-shot, process-wide "stop now" flag that can also be `poll`ed: a
/// pipe whose write end is closed by [`AbortSignal::trigger`], which makes
/// the read end readable (EOF) for every poller at once.
#[derive(Debug)]
pub struct AbortSignal {
    _private: (),
}

impl AbortSignal {
    /// Create the pipe.
    pub fn new() -> io::Result<AbortSignal> {
        unimplemented!()
    }
    /// Close the write end: every poller of [`AbortSignal::fd`] wakes. Idempotent.
    pub fn trigger(&self) {
        unimplemented!()
    }
    /// Whether [`AbortSignal::trigger`] was called.
    pub fn is_triggered(&self) -> bool {
        unimplemented!()
    }
    /// The read end, to include in a `poll` set (POLLIN/POLLHUP when triggered).
    pub fn fd(&self) -> RawFd {
        unimplemented!()
    }
}

/// Send `sig` (e.g. `libc::SIGTERM`) to the process group `pgid`; errors
/// (ESRCH: group already gone) are ignored.
pub fn kill_group(pgid: u32, sig: i32) {
    let _ = (pgid, sig);
    unimplemented!()
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

/// Block SIGTERM, SIGINT and SIGHUP in the calling thread. Call in `main`
/// before any thread is spawned, so every thread inherits the mask and only
/// [`wait_signal`] receives them.
pub fn block_signals() {
    unimplemented!()
}

/// Wait (sigwait) for one of the blocked signals.
pub fn wait_signal() -> Signal {
    unimplemented!()
}

/// Raise RLIMIT_NOFILE's soft limit to its hard limit; returns the new soft limit.
pub fn raise_nofile_limit() -> u64 {
    unimplemented!()
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
