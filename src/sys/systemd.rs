//! systemd's socket activation: the listening socket it passes in
//! descriptor 3 (`LISTEN_FDS`, `LISTEN_PID`, `LISTEN_FDNAMES`; see
//! sd_listen_fds(3)). The descriptor is checked before it is owned: open,
//! a socket, listening, a stream, of a family trigd serves.

use std::fmt;
use std::net::TcpListener;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixListener;

/// The first descriptor systemd passes (`SD_LISTEN_FDS_START`).
const FIRST_FD: RawFd = 3;

/// A listening socket systemd passed.
#[derive(Debug)]
pub enum Inherited {
    /// `ListenStream=` with a port or an IP address.
    Tcp(TcpListener),
    /// `ListenStream=` with a path.
    Unix(UnixListener),
}

/// Why the passed socket cannot be served. Each says what to fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActivationError {
    /// `LISTEN_FDS` is not a number.
    NotACount(String),
    /// More than one socket: trigd serves one.
    TooMany(String),
    /// `LISTEN_PID` is not a number.
    BadPid(String),
    /// Descriptor 3 is not open, not a socket, not listening, not a stream
    /// or of another family; the reason.
    NotAListener(String),
}

impl fmt::Display for ActivationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ActivationError::NotACount(v) => write!(
                f,
                "socket activation: LISTEN_FDS={v:?} is not a number of descriptors"
            ),
            ActivationError::TooMany(v) => write!(
                f,
                "socket activation: LISTEN_FDS={v:?}, but trigd serves one socket: give \
                 trigd.socket a single ListenStream= line"
            ),
            ActivationError::BadPid(v) => {
                write!(f, "socket activation: LISTEN_PID={v:?} is not a process id")
            }
            ActivationError::NotAListener(why) => write!(
                f,
                "socket activation: descriptor {FIRST_FD} {why}; trigd.socket needs \
                 ListenStream= (a port, an address or a path) and Accept=no"
            ),
        }
    }
}

/// The socket systemd passed to this process, if any; `LISTEN_FDS`,
/// `LISTEN_PID` and `LISTEN_FDNAMES` are removed from the environment in
/// every case, so that no program trigd runs inherits them. Variables meant
/// for another process (`LISTEN_PID` names another) are ignored, as
/// sd_listen_fds(3) does; the name of the socket comes back for the log.
/// Call once, before any other thread starts (the environment changes).
///
/// # Errors
/// The variables are malformed, name more than one socket, or descriptor 3
/// is not a listening stream socket.
pub fn take_listen_fds() -> Result<Option<(Inherited, String)>, ActivationError> {
    let var = |name| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned());
    let (fds, pid, names) = (var("LISTEN_FDS"), var("LISTEN_PID"), var("LISTEN_FDNAMES"));
    for name in ["LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES"] {
        std::env::remove_var(name);
    }
    let Some(fds) = fds else { return Ok(None) };
    let Some(pid) = pid else {
        log::warn!("LISTEN_FDS is set without LISTEN_PID: ignored");
        return Ok(None);
    };
    let for_pid: u32 = pid
        .trim()
        .parse()
        .map_err(|_| ActivationError::BadPid(pid.clone()))?;
    if for_pid != std::process::id() {
        log::warn!(
            "LISTEN_FDS is for process {for_pid}, not this one ({}): ignored",
            std::process::id()
        );
        return Ok(None);
    }
    let count: u64 = fds
        .trim()
        .parse()
        .map_err(|_| ActivationError::NotACount(fds.clone()))?;
    match count {
        0 => Ok(None),
        1 => {
            let name = names.unwrap_or_else(|| "unknown".into());
            Ok(Some((take_fd(FIRST_FD)?, name)))
        }
        _ => Err(ActivationError::TooMany(fds)),
    }
}

/// Check that `fd` is a listening stream socket of a family trigd serves,
/// mark it close-on-exec, and own it.
fn take_fd(fd: RawFd) -> Result<Inherited, ActivationError> {
    let bad = |why: &str| ActivationError::NotAListener(why.into());
    // SAFETY: fcntl on a number is harmless whether or not it is open.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(bad("is not open"));
    }
    // SAFETY: as above; sets a flag of the descriptor only.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) } < 0 {
        return Err(bad("cannot be marked close-on-exec"));
    }
    if sock_opt(fd, libc::SO_ACCEPTCONN).ok_or_else(|| bad("is not a socket"))? != 1 {
        return Err(bad("is a socket that is not listening"));
    }
    if sock_opt(fd, libc::SO_TYPE) != Some(libc::SOCK_STREAM) {
        return Err(bad("is not a stream socket"));
    }
    let family = sock_opt(fd, libc::SO_DOMAIN);
    // SAFETY: LISTEN_PID names this process, so systemd passed `fd` to it;
    // it is open (checked above) and taken once, at start, before anything
    // else in trigd opens or owns descriptors: nothing else owns it.
    let owned = || unsafe { OwnedFd::from_raw_fd(fd) };
    match family {
        Some(libc::AF_INET | libc::AF_INET6) => Ok(Inherited::Tcp(owned().into())),
        Some(libc::AF_UNIX) => Ok(Inherited::Unix(owned().into())),
        _ => Err(bad("is neither an IP nor a Unix socket")),
    }
}

/// An integer socket option of `fd` (`SOL_SOCKET`); `None` when `fd` is
/// not a socket.
fn sock_opt(fd: RawFd, opt: libc::c_int) -> Option<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` are valid and writable, `len` its size.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some(value)
}

/// `CLOCK_MONOTONIC` now, in microseconds: systemd's clock for
/// `MONOTONIC_USEC=` (std's `Instant` does not show its value).
pub fn monotonic_usec() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always
    // exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let micros = u64::try_from(ts.tv_nsec).unwrap_or(0) / 1_000;
    secs.saturating_mul(1_000_000).saturating_add(micros)
}
