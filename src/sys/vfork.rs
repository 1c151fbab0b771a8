//! The x86_64 Linux spawner behind `Exec::spawn`: `clone(CLONE_VM |
//! CLONE_VFORK | CLONE_PIDFD)` on a small stack in the caller's frame,
//! the child making only raw system calls until `execve`. Written for the
//! x86_64 kernel's `struct sigaction` and 8-byte signal set; every other
//! target uses `std::process::Command` (see `Exec::spawn` for the
//! figure that keeps this file).

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};

use super::{pidfd_open, wait_child, Ids};

/// Start `program` (see `Exec::spawn`): no stack is mapped and unmapped per
/// child (glibc's `posix_spawn` does, under the address-space lock that
/// every thread of trigd shares), the pidfd comes from the clone
/// (`CLONE_PIDFD`), and the child resets only the signals whose
/// disposition is not the default (glibc's queries and resets all 64).
pub(super) fn spawn(
    program: &CStr,
    argv: &[CString],
    envp: &[CString],
    dir: &CStr,
    ids: Ids,
    stdio: [BorrowedFd<'_>; 3],
) -> io::Result<(u32, Option<OwnedFd>)> {
    let argv = nul_terminated(argv);
    let envp = nul_terminated(envp);
    let reset = reset_signals();
    let mut child = ChildArgs {
        program: program.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        dir: dir.as_ptr(),
        stdio: stdio.map(|fd| fd.as_raw_fd()),
        ids,
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
    Ok((pid, pidfd))
}

/// Pointers to `strings` followed by NULL, as `execve` takes them.
fn nul_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    let mut ptrs: Vec<*const libc::c_char> = strings.iter().map(|s| s.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    ptrs
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
