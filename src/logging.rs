//! The log: `RUST_LOG` filtering by env_logger, lines written by us.
//!
//! With one access-log line per request and a thread per connection,
//! writing each line with its own `write(2)` (as env_logger does, under a
//! stderr lock) made request threads queue on the lock and, for a log file,
//! on the file's inode lock: it cost more than half the throughput of short
//! requests. Here lines are group-committed: a line is appended to a shared
//! buffer (a short lock, no system call), and the thread that finds no write
//! in progress writes everything buffered, in order, until the buffer is
//! empty. At low load every line is written at once; under load lines go out
//! in batches. The buffer is bounded: past [`MAX_BUFFER`] (stderr blocked),
//! lines are counted and dropped, and the count is logged when it drains.

use std::fmt::Write as _;
use std::sync::{Mutex, MutexGuard};

use log::{Log, Metadata, Record};

use crate::store::now_rfc3339;
use crate::sys;

/// Buffered bytes past which lines are dropped.
const MAX_BUFFER: usize = 1 << 20;

/// Filters with env_logger's `RUST_LOG` rules, writes lines to stderr.
struct StderrLog {
    filter: env_logger::Logger,
    sink: Mutex<Sink>,
}

/// Lines waiting to be written.
#[derive(Default)]
struct Sink {
    buf: Vec<u8>,
    /// A thread is writing: it will pick up what is appended meanwhile.
    writing: bool,
    dropped: u64,
}

impl StderrLog {
    fn lock(&self) -> MutexGuard<'_, Sink> {
        self.sink.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Append `line`; write the buffer unless another thread is at it.
    fn emit(&self, line: &[u8]) {
        let mut sink = self.lock();
        if sink.buf.len() + line.len() > MAX_BUFFER {
            sink.dropped += 1;
            return;
        }
        sink.buf.extend_from_slice(line);
        if sink.writing {
            return;
        }
        sink.writing = true;
        loop {
            if sink.dropped > 0 {
                let note = format!(
                    "[{} WARN  trigd] {} log lines dropped: stderr was blocked\n",
                    now_rfc3339(),
                    sink.dropped
                );
                sink.buf.extend_from_slice(note.as_bytes());
                sink.dropped = 0;
            }
            let batch = std::mem::take(&mut sink.buf);
            if batch.is_empty() {
                sink.writing = false;
                return;
            }
            drop(sink);
            sys::write_stderr(&batch);
            sink = self.lock();
        }
    }
}

impl Log for StderrLog {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        self.filter.enabled(metadata)
    }

    fn log(&self, record: &Record<'_>) {
        if !self.filter.matches(record) {
            return;
        }
        let mut line = String::with_capacity(160);
        let _ = writeln!(
            line,
            "[{} {:<5} {}] {}",
            now_rfc3339(),
            record.level(),
            record.target(),
            record.args()
        );
        self.emit(line.as_bytes());
    }

    fn flush(&self) {}
}

/// Install the logger: `RUST_LOG` as env_logger reads it, `info` by default.
pub fn init() {
    let filter =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).build();
    log::set_max_level(filter.filter());
    let sink = Mutex::new(Sink::default());
    let _ = log::set_boxed_logger(Box::new(StderrLog { filter, sink }));
}
