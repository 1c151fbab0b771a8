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
//!
//! A line costs no allocation: it is formatted into a buffer its thread
//! keeps, and the shared buffer and the one being written are swapped, not
//! reallocated (both are kept while small).

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use log::{Level, Log, Metadata, Record};

use crate::state::time::Time;
use crate::sys;

/// A warning a client can cause (a refused signature) is written once per
/// kind in this interval; the repeats go to `debug`.
pub const REPEAT_INTERVAL: Duration = Duration::from_secs(60);

/// Kinds of repeated warnings remembered at most (they come from the
/// config: endpoints × codes); past it the table starts afresh.
const MAX_REPEAT_KINDS: usize = 4096;

/// Buffered bytes past which lines are dropped.
const MAX_BUFFER: usize = 1 << 20;

/// Capacity a kept buffer (a thread's line, the spare batch) may keep.
const KEEP: usize = 1 << 16;

thread_local! {
    /// The line this thread is formatting.
    static LINE: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Filters with env_logger's `RUST_LOG` rules, writes lines to stderr.
struct StderrLog {
    filter: env_logger::Logger,
    sink: Mutex<Sink>,
}

/// Lines waiting to be written.
#[derive(Default)]
struct Sink {
    buf: Vec<u8>,
    /// The buffer of the last batch written, empty, for the next swap.
    spare: Vec<u8>,
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
                    Time::now(),
                    sink.dropped
                );
                sink.buf.extend_from_slice(note.as_bytes());
                sink.dropped = 0;
            }
            if sink.buf.is_empty() {
                sink.writing = false;
                return;
            }
            let spare = std::mem::take(&mut sink.spare);
            let mut batch = std::mem::replace(&mut sink.buf, spare);
            drop(sink);
            sys::write_stderr(&batch);
            batch.clear();
            if batch.capacity() > KEEP {
                batch = Vec::new();
            }
            sink = self.lock();
            sink.spare = batch;
        }
    }
}

impl StderrLog {
    /// Format a line into this thread's buffer with `format` and emit it
    /// if `format` says so. A line whose arguments log while they are
    /// formatted gets a buffer of its own.
    fn with_line(&self, format: impl FnOnce(&mut String) -> bool) {
        LINE.with(|cell| match cell.try_borrow_mut() {
            Ok(mut line) => {
                line.clear();
                if format(&mut line) {
                    self.emit(line.as_bytes());
                }
                if line.capacity() > KEEP {
                    *line = String::new();
                }
            }
            Err(_) => {
                let mut line = String::with_capacity(160);
                if format(&mut line) {
                    self.emit(line.as_bytes());
                }
            }
        });
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
        let (level, left_out) = match peer_caused(record) {
            None => (record.level(), 0),
            Some(kind) => match repeats_left_out(kind, Instant::now()) {
                Some(n) => (record.level(), n),
                None if self.filter.enabled(&demoted(record)) => (Level::Debug, 0),
                None => return,
            },
        };
        self.with_line(|line| {
            let _ = write!(
                line,
                "[{} {:<5} {}] {}",
                Time::now(),
                level,
                record.target(),
                record.args()
            );
            if left_out > 0 {
                let _ = write!(
                    line,
                    " ({left_out} more like it since the last such line, at debug)"
                );
            }
            line.push('\n');
            escape_controls(line);
            true
        });
    }

    fn flush(&self) {}
}

/// The repeat kind of a warning a TLS peer causes at will, or `None`:
/// rustls warns of what a peer sent (a client's IP address as its SNI
/// name, as wrk and some embedded clients send; a warning alert; a
/// message out of order) on every connection that sends it, so that a
/// client could drive the log's volume with new connections. Such lines
/// are written as [`warn_repeated`] writes a client's refused signatures:
/// once per kind (the module) and [`REPEAT_INTERVAL`], the repeats at
/// `debug`.
fn peer_caused(record: &Record<'_>) -> Option<&'static str> {
    if record.level() != Level::Warn {
        return None;
    }
    // `Record::target` borrows the record; the kinds are the few modules
    // of rustls that warn.
    let target = record.target();
    let kind = if target.starts_with("rustls::msgs") {
        "rustls: a peer's handshake message"
    } else if target.starts_with("rustls::common_state") {
        "rustls: an alert"
    } else if target.starts_with("rustls::") || target == "rustls" {
        "rustls: a peer's message"
    } else {
        return None;
    };
    Some(kind)
}

/// `record`'s metadata at `debug`, where its repeats go.
fn demoted<'a>(record: &Record<'a>) -> Metadata<'a> {
    Metadata::builder()
        .level(Level::Debug)
        .target(record.target())
        .build()
}

/// `line` (ending in its newline) with every other control character
/// escaped (`\n`, `\r`, `\u{1b}`; a tab stays): a message may quote what a
/// client sent (a query name that decodes to a newline, say), which must
/// neither forge a log line of its own nor drive a terminal. The log is
/// one line per message. The bidirectional controls (U+202A–U+202E,
/// U+2066–U+2069), which are no control characters to Unicode, are
/// escaped too: shown, they reorder the rest of the line.
fn escape_controls(line: &mut String) {
    let body = line.strip_suffix('\n').unwrap_or(line);
    let bad = |c: char| {
        (c.is_control() && c != '\t')
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !body.chars().any(bad) {
        return;
    }
    let mut out = String::with_capacity(line.len() + 16);
    for c in body.chars() {
        if bad(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out.push('\n');
    *line = out;
}

/// The logger [`init`] installed.
static LOGGER: OnceLock<StderrLog> = OnceLock::new();

/// Log an access-log line: the line `log::info!(target: "access", ...)`
/// would write, filtered the same way (`RUST_LOG`), but with its text put
/// together by `text` into the line buffer directly: formatting it through
/// `log` was the largest cost of a short request after the request itself.
pub fn access(text: impl FnOnce(&mut String)) {
    let Some(logger) = LOGGER.get() else { return };
    let metadata = Metadata::builder()
        .level(Level::Info)
        .target(ACCESS)
        .build();
    if !logger.filter.enabled(&metadata) {
        return;
    }
    logger.with_line(|line| {
        let _ = write!(line, "[{} INFO  {ACCESS}] ", Time::now());
        let start = line.len();
        text(line);
        // A `RUST_LOG` filter by message (`info/regex`) sees the text.
        let keep = logger.filter.matches(
            &Record::builder()
                .metadata(metadata)
                .args(format_args!("{}", &line[start..]))
                .build(),
        );
        line.push('\n');
        keep
    });
}

/// The target of access-log lines.
const ACCESS: &str = "access";

/// Install the logger: `RUST_LOG` as env_logger reads it, `info` by default.
pub fn init() {
    let filter =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).build();
    log::set_max_level(filter.filter());
    let sink = Mutex::new(Sink::default());
    let logger = LOGGER.get_or_init(|| StderrLog { filter, sink });
    let _ = log::set_logger(logger);
}

/// The last warning of one kind written, and the repeats left out since.
struct Repeat {
    written: Instant,
    left_out: u64,
}

/// Kinds of repeated warnings, by kind.
static REPEATS: Mutex<Option<HashMap<String, Repeat>>> = Mutex::new(None);

/// A warning that senders can repeat at will (a refused signature): the
/// first of `kind` in each [`REPEAT_INTERVAL`] is written at `warn`, with
/// the number of its repeats left out since the last one written; the
/// repeats go to `debug`. Senders thus cannot drive the log's volume.
/// `target` is the log target of the line (the caller's module).
pub fn warn_repeated(target: &str, kind: &str, line: std::fmt::Arguments<'_>) {
    match repeats_left_out(kind, Instant::now()) {
        Some(0) => log::warn!(target: target, "{line}"),
        Some(n) => log::warn!(
            target: target,
            "{line} ({n} more like it since the last such line, at debug)"
        ),
        None => log::debug!(target: target, "{line}"),
    }
}

/// Whether a warning of `kind` at `now` is written: `Some(repeats left
/// out since the last one written)`, or `None` (a repeat, left out).
fn repeats_left_out(kind: &str, now: Instant) -> Option<u64> {
    let mut table = REPEATS.lock().unwrap_or_else(|e| e.into_inner());
    let table = table.get_or_insert_with(HashMap::new);
    if let Some(r) = table.get_mut(kind) {
        if now.duration_since(r.written) < REPEAT_INTERVAL {
            r.left_out += 1;
            return None;
        }
        let n = r.left_out;
        *r = Repeat {
            written: now,
            left_out: 0,
        };
        return Some(n);
    }
    if table.len() >= MAX_REPEAT_KINDS {
        table.clear();
    }
    let first = Repeat {
        written: now,
        left_out: 0,
    };
    table.insert(kind.to_string(), first);
    Some(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_inside_a_line_are_escaped() {
        let mut line = "a\nWARN forged\r\u{1b}[31m\tb\u{85}\n".to_string();
        escape_controls(&mut line);
        assert_eq!(line, "a\\nWARN forged\\r\\u{1b}[31m\tb\\u{85}\n");
        let mut plain = "plain é\n".to_string();
        escape_controls(&mut plain);
        assert_eq!(plain, "plain é\n");
        let mut bidi = "user \u{202e}nimda\u{2066}x\n".to_string();
        escape_controls(&mut bidi);
        assert_eq!(bidi, "user \\u{202e}nimda\\u{2066}x\n");
    }

    #[test]
    fn a_repeated_warning_is_written_once_an_interval_with_its_count() {
        let t0 = Instant::now();
        let kind = "test: a kind of its own";
        assert_eq!(repeats_left_out(kind, t0), Some(0));
        for i in 1..=5 {
            let at = t0 + Duration::from_secs(i);
            assert_eq!(repeats_left_out(kind, at), None);
        }
        assert_eq!(repeats_left_out("test: another kind", t0), Some(0));
        let next = t0 + REPEAT_INTERVAL;
        assert_eq!(repeats_left_out(kind, next), Some(5));
        assert_eq!(repeats_left_out(kind, next), None);
    }
}
