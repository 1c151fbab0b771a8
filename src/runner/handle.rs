//! The handle of one executing run: stop it, and read the output it has
//! printed so far while it still runs.
//!
//! The runner creates a [`RunHandle`] when a run starts executing and drops
//! it when the run ends; `Runner::handle` finds the
//! handle of a live run by id. Stopping goes through the run's own
//! [`AbortSignal`]: the step being executed gets SIGTERM on its process
//! group, then SIGKILL after `kill_grace`, and the run ends as aborted.
//! Output is kept as a window of the last [`LIVE_WINDOW`] bytes of each
//! stream, addressed by absolute byte offsets, so a follower can ask for
//! "everything after offset N" and learn when it fell behind.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::sys::AbortSignal;

/// Bytes of each stream kept for followers.
pub const LIVE_WINDOW: usize = 64 * 1024;

pub use crate::output::Stream;

/// The last bytes of one stream, with the offset of the first kept byte.
#[derive(Debug, Default)]
struct Window {
    /// Bytes written to the stream so far (the offset just past `buf`).
    total: u64,
    buf: Vec<u8>,
}

impl Window {
    fn push(&mut self, data: &[u8]) {
        self.total = self.total.saturating_add(data.len() as u64);
        let data = &data[data.len().saturating_sub(LIVE_WINDOW)..];
        self.buf.extend_from_slice(data);
        // Trim in batches so the copy is amortised.
        if self.buf.len() >= 2 * LIVE_WINDOW {
            let excess = self.buf.len() - LIVE_WINDOW;
            self.buf.drain(..excess);
        }
    }

    fn since(&self, offset: u64) -> Chunk {
        let kept = self.buf.len().min(LIVE_WINDOW);
        let first = self.total - kept as u64;
        let from = offset.clamp(first, self.total);
        let skip = usize::try_from(from - first).unwrap_or(kept);
        Chunk {
            from,
            data: self.buf[self.buf.len() - kept + skip..].to_vec(),
            next: self.total,
        }
    }
}

/// Bytes of a stream from a follower's offset on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Offset of the first byte of `data`; greater than the offset asked
    /// for when those bytes have left the window.
    pub from: u64,
    /// The bytes.
    pub data: Vec<u8>,
    /// The offset to ask for next.
    pub next: u64,
}

/// One executing run, shared by the thread executing it and anyone who
/// wants to stop or follow it.
#[derive(Debug)]
pub struct RunHandle {
    abort: AbortSignal,
    cancelled: AtomicBool,
    stdout: Mutex<Window>,
    stderr: Mutex<Window>,
}

impl RunHandle {
    /// A handle for a run about to execute.
    ///
    /// # Errors
    /// The abort pipe cannot be created (out of file descriptors).
    pub fn new() -> io::Result<RunHandle> {
        Ok(RunHandle {
            abort: AbortSignal::new()?,
            cancelled: AtomicBool::new(false),
            stdout: Mutex::default(),
            stderr: Mutex::default(),
        })
    }

    /// Stop the run: its current step gets SIGTERM on its process group
    /// and SIGKILL after `kill_grace`; no further step starts. Idempotent.
    pub fn abort(&self) {
        self.abort.trigger();
    }

    /// Stop the run on request: like [`RunHandle::abort`], and the run
    /// ends `cancelled`.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        self.abort();
    }

    /// Whether [`RunHandle::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// The signal the executing steps poll.
    pub(super) fn signal(&self) -> &AbortSignal {
        &self.abort
    }

    /// Record bytes the run printed on `stream`.
    pub(super) fn push(&self, stream: Stream, data: &[u8]) {
        lock(self.window(stream)).push(data);
    }

    /// What the run has printed on `stream` from `offset` on (as far as the
    /// window still holds it).
    #[cfg_attr(not(test), allow(dead_code))] // the follower of a live run is its caller
    pub fn output_since(&self, stream: Stream, offset: u64) -> Chunk {
        lock(self.window(stream)).since(offset)
    }

    fn window(&self, stream: Stream) -> &Mutex<Window> {
        match stream {
            Stream::Stdout => &self.stdout,
            Stream::Stderr => &self.stderr,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follower_reads_from_its_offset_and_learns_what_it_missed() {
        let h = RunHandle::new().unwrap();
        h.push(Stream::Stdout, b"hello ");
        h.push(Stream::Stdout, b"world");
        let c = h.output_since(Stream::Stdout, 0);
        assert_eq!(
            (c.from, c.data.as_slice(), c.next),
            (0, &b"hello world"[..], 11)
        );
        let c = h.output_since(Stream::Stdout, 6);
        assert_eq!(c.data, b"world");
        assert_eq!(h.output_since(Stream::Stdout, 11).data, b"");
        assert_eq!(h.output_since(Stream::Stderr, 0).next, 0);

        // Past the window, the oldest bytes are gone and `from` says so.
        let big = vec![b'x'; 3 * LIVE_WINDOW];
        h.push(Stream::Stdout, &big);
        h.push(Stream::Stdout, b"end");
        let c = h.output_since(Stream::Stdout, 0);
        let total = 11 + big.len() as u64 + 3;
        assert_eq!(c.next, total);
        assert_eq!(c.from, total - LIVE_WINDOW as u64);
        assert_eq!(c.data.len(), LIVE_WINDOW);
        assert!(c.data.ends_with(b"xend"));
    }

    #[test]
    fn abort_triggers_the_signal_once() {
        let h = RunHandle::new().unwrap();
        assert!(!h.signal().is_triggered());
        h.abort();
        h.abort();
        assert!(h.signal().is_triggered());
    }
}
