//! Following a run's output as it is written: a reader that produces
//! Server-Sent Events from the run's output file until the run has ended.
//!
//! The follower reads the file on disk from its own offset, one batch at a
//! time ([`output::read_frames`]), and turns each frame into an event; it
//! holds at most one batch however slow its reader is, and it never holds
//! a run slot. When nothing new is on disk it asks `end` whether the run is
//! over; once it is, it drains what is left and ends with an `end` event
//! carrying the final object (the run record, or a sync call's answer).
//!
//! A run that ended with its output still held in memory has no file: its
//! output is in its record (`output.rs`), which the follower reads once the
//! run is over and it found no file ([`InRecord`]). Held output reaches the
//! file at most `output::HOLD` after its first byte, so that is the most a
//! follower of a live run waits for it.
//!
//! While the run executes, the follower waits on the run's handle
//! ([`RunHandle::wait_output`]) for its next write or its end. Before the
//! run starts (queued) and in the moment between the handle's close and
//! the end being visible to `end`, it looks again every [`POLL`].
//!
//! Events (each `data` is one line of JSON):
//! - `output`: `{"Stream":"stdout"|"stderr","Text":"…"}`
//! - `truncated`: `{"Stream":…}`, the stream passed `max_output_bytes`
//! - `end`: the final object; the stream then closes.
//!
//! A comment line (`: keep-alive`) is sent after [`KEEP_ALIVE`] without
//! events, so that a client that went away is noticed.

use std::io::{self, Read};
use std::path::PathBuf;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use crate::http::Response;
use crate::runner::handle::RunHandle;
use crate::state::output::{self, Frame, Inline, Stored, Stream, Utf8Carry};

/// How often the follower looks again while the run has no handle.
const POLL: Duration = Duration::from_millis(100);

/// Silence after which a keep-alive comment is sent.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The final object once the run is over (its JSON, see [`shared`]),
/// `None` while it is not.
pub type End = Box<dyn FnMut() -> Option<Arc<[u8]>> + Send>;

/// `v` as the JSON of an `end` event. It is held behind an `Arc` so that
/// the followers of one run can share one copy: the run record of a run
/// that printed `max_output_bytes` holds that much in its Result, and a
/// copy per follower made 100 followers of a 10 MB run peak at 1.1 GB.
pub fn shared(v: &Value) -> Arc<[u8]> {
    serde_json::to_vec(v).unwrap_or_default().into()
}

/// The handle of the followed run while it executes (`Runner::handle`).
pub type Live = Box<dyn FnMut() -> Option<Arc<RunHandle>> + Send>;

/// The output the followed run keeps in its record (`RunStore::inline_output`),
/// asked once it has ended without a file.
pub type InRecord = Box<dyn FnOnce() -> Option<Inline> + Send>;

/// What the follower waits on when nothing new is on disk.
struct Wake {
    find: Live,
    handle: Option<Arc<RunHandle>>,
    /// The handle was closed: the run has ended.
    closed: bool,
}

impl Wake {
    /// The handle's write count, to note before reading the file (0 while
    /// there is no handle).
    fn seen(&mut self) -> u64 {
        if self.handle.is_none() && !self.closed {
            self.handle = (self.find)();
        }
        self.handle.as_ref().map_or(0, |h| h.writes())
    }

    /// Wait at most `timeout` for output written after `seen`.
    fn wait(&mut self, seen: u64, timeout: Duration) {
        if let Some(h) = &self.handle {
            if h.wait_output(seen, timeout) {
                return;
            }
            self.handle = None;
            self.closed = true;
        }
        thread::sleep(POLL.min(timeout));
    }
}

/// An SSE body following one run's output file.
pub struct Follower {
    path: PathBuf,
    file: Option<Stored>,
    in_record: Option<InRecord>,
    offset: output::Pos,
    out: Vec<u8>,
    pos: usize,
    text: [Utf8Carry; 2],
    end: End,
    wake: Wake,
    last: Option<Arc<[u8]>>,
    /// The `end` event's data being sent, and how much of it is sent.
    tail: Option<(Arc<[u8]>, usize)>,
    done: bool,
    quiet_since: Instant,
    keep_alive: Duration,
}

impl Follower {
    /// Follow the output file at `path`; `end` says when the run is over,
    /// `live` finds its handle while it executes, `in_record` its output
    /// once it has ended without a file.
    pub fn new(path: PathBuf, end: End, live: Live, in_record: InRecord) -> Follower {
        Follower {
            path,
            file: None,
            in_record: Some(in_record),
            offset: output::Pos::default(),
            out: Vec::new(),
            pos: 0,
            text: Default::default(),
            end,
            wake: Wake {
                find: live,
                handle: None,
                closed: false,
            },
            last: None,
            tail: None,
            done: false,
            quiet_since: Instant::now(),
            keep_alive: KEEP_ALIVE,
        }
    }

    /// Put the next events in `out`; false when there were none and the
    /// caller should wait before asking again.
    fn fill(&mut self) -> bool {
        if self.pull() {
            return true;
        }
        if let Some(last) = self.last.take() {
            // Sent from the shared copy, not copied into `out`.
            self.out.extend_from_slice(b"event: end\ndata: ");
            self.tail = Some((last, 0));
            self.done = true;
            return true;
        }
        // Once the run is over, everything it printed is on disk or in its
        // record: pull once more before the end event.
        self.last = (self.end)();
        if self.last.is_some() {
            return true;
        }
        if self.quiet_since.elapsed() >= self.keep_alive {
            self.out.extend_from_slice(b": keep-alive\n\n");
            return true;
        }
        false
    }

    /// Turn the next batch of frames on disk into events; whether any.
    fn pull(&mut self) -> bool {
        if self.file.is_none() {
            self.file = output::open(&self.path);
        }
        if self.file.is_none() && self.last.is_some() {
            // Over without a file: what it printed, if anything, is in its
            // record.
            let in_record = self.in_record.take();
            self.file = in_record.and_then(|f| f()).map(Stored::Inline);
        }
        let Some(file) = &self.file else {
            return false;
        };
        let (frames, next) = output::read_frames(file, self.offset);
        self.offset = next;
        for f in &frames {
            match f {
                Frame::Data(s, data) => {
                    let text = self.text[usize::from(*s == Stream::Stderr)].feed(data);
                    if !text.is_empty() {
                        let data = Piece {
                            stream: stream_name(*s),
                            text: Some(&text),
                        };
                        event(&mut self.out, "output", &data);
                    }
                }
                Frame::Truncated(s) => {
                    let data = Piece {
                        stream: stream_name(*s),
                        text: None,
                    };
                    event(&mut self.out, "truncated", &data);
                }
            }
        }
        !frames.is_empty()
    }
}

impl Read for Follower {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.pos < self.out.len() {
                let n = buf.len().min(self.out.len() - self.pos);
                buf[..n].copy_from_slice(&self.out[self.pos..self.pos + n]);
                self.pos += n;
                return Ok(n);
            }
            if let Some((data, at)) = &mut self.tail {
                if *at < data.len() {
                    let n = buf.len().min(data.len() - *at);
                    buf[..n].copy_from_slice(&data[*at..*at + n]);
                    *at += n;
                    return Ok(n);
                }
                self.tail = None;
                self.out.clear();
                self.out.extend_from_slice(b"\n\n");
                self.pos = 0;
                continue;
            }
            self.out.clear();
            self.pos = 0;
            if self.done {
                return Ok(0);
            }
            // Noted before the file is read: a write after the read wakes
            // the wait below.
            let seen = self.wake.seen();
            if self.fill() {
                self.quiet_since = Instant::now();
            } else {
                let quiet = self.keep_alive.saturating_sub(self.quiet_since.elapsed());
                self.wake.wait(seen, quiet);
            }
        }
    }
}

/// A `text/event-stream` response following a run.
pub fn events(f: Follower) -> Response {
    Response::streaming(200, "text/event-stream", f)
        .with_header("Cache-Control", "no-store")
        .with_header("X-Accel-Buffering", "no")
}

/// `stdout` or `stderr`.
pub fn stream_name(s: Stream) -> &'static str {
    match s {
        Stream::Stdout => "stdout",
        Stream::Stderr => "stderr",
    }
}

/// The data of an `output` event (with its text) or a `truncated` one.
#[derive(Serialize)]
struct Piece<'a> {
    #[serde(rename = "Stream")]
    stream: &'static str,
    #[serde(rename = "Text", skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
}

/// Append event `name` with `data` to `out`, the JSON written in place
/// (not built apart and copied: `out` is the one buffer of a follower
/// that holds a batch's events).
fn event(out: &mut Vec<u8>, name: &str, data: &Piece) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    // JSON text has no raw line breaks, so it is one `data` line. Writing
    // to a Vec does not fail.
    let _ = serde_json::to_writer(&mut *out, data);
    out.extend_from_slice(b"\n\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::output::OutputFile;
    use crate::state::test_dir::TestDir;
    use serde_json::json;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[test]
    fn events_in_order_then_end() {
        let d = TestDir::new("follow");
        let p = output::path(d.path(), "f");
        let out = OutputFile::new(&p, 100);
        out.push(Stream::Stdout, "a\n<b>\u{e9}".as_bytes());
        out.push(Stream::Stderr, b"warn\n");
        out.release();
        let over = Arc::new(AtomicBool::new(false));
        let o2 = Arc::clone(&over);
        let end: End = Box::new(move || {
            o2.load(Ordering::SeqCst)
                .then(|| shared(&json!({"State": "finished"})))
        });
        let mut f = Follower::new(p, end, Box::new(|| None), Box::new(|| None));
        let mut buf = [0u8; 4096];
        let n = f.read(&mut buf).unwrap();
        let first = String::from_utf8_lossy(&buf[..n]).to_string();
        assert_eq!(
            first,
            "event: output\ndata: {\"Stream\":\"stdout\",\"Text\":\"a\\n<b>\u{e9}\"}\n\n\
             event: output\ndata: {\"Stream\":\"stderr\",\"Text\":\"warn\\n\"}\n\n"
        );
        out.push(Stream::Stdout, b"late\n");
        over.store(true, Ordering::SeqCst);
        let mut rest = String::new();
        f.read_to_string(&mut rest).unwrap();
        assert_eq!(
            rest,
            "event: output\ndata: {\"Stream\":\"stdout\",\"Text\":\"late\\n\"}\n\n\
             event: end\ndata: {\"State\":\"finished\"}\n\n"
        );
    }

    #[test]
    fn a_truncated_stream_is_an_event_without_text() {
        let d = TestDir::new("follow-trunc");
        let p = output::path(d.path(), "t");
        let out = OutputFile::new(&p, 3);
        out.push(Stream::Stderr, b"abcd");
        // Read from the file, then from the record (the run ended with
        // its output held in memory): the same events.
        let inline = out.finish();
        assert!(inline.is_some() && !p.exists());
        let want = "event: output\ndata: {\"Stream\":\"stderr\",\"Text\":\"abc\"}\n\n\
                    event: truncated\ndata: {\"Stream\":\"stderr\"}\n\n\
                    event: end\ndata: null\n\n";
        let end: End = Box::new(|| Some(shared(&json!(null))));
        let mut got = String::new();
        Follower::new(p.clone(), end, Box::new(|| None), Box::new(|| inline))
            .read_to_string(&mut got)
            .unwrap();
        assert_eq!(got, want, "from the record");
        let out = OutputFile::new(&p, 3);
        out.push(Stream::Stderr, b"abcd");
        out.release();
        let end: End = Box::new(|| Some(shared(&json!(null))));
        let mut got = String::new();
        Follower::new(p, end, Box::new(|| None), Box::new(|| None))
            .read_to_string(&mut got)
            .unwrap();
        assert_eq!(got, want, "from the file");
    }

    #[test]
    fn a_follower_wakes_on_the_handle_not_on_a_clock() {
        let d = TestDir::new("follow-live");
        let p = output::path(d.path(), "g");
        let out = OutputFile::new(&p, 100);
        let h = Arc::new(RunHandle::new().unwrap());
        let h2 = Arc::clone(&h);
        let over = Arc::new(AtomicBool::new(false));
        let o2 = Arc::clone(&over);
        let end: End = Box::new(move || o2.load(Ordering::SeqCst).then(|| shared(&json!({}))));
        let mut f = Follower::new(
            p,
            end,
            Box::new(move || Some(Arc::clone(&h2))),
            Box::new(|| None),
        );
        // No keep-alive for an hour: only the handle can wake the follower
        // in time for the bounded waits below.
        f.keep_alive = Duration::from_secs(3600);
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = thread::spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                let n = f.read(&mut buf).unwrap();
                tx.send(String::from_utf8_lossy(&buf[..n]).to_string())
                    .unwrap();
                if n == 0 {
                    break;
                }
            }
        });
        let bound = Duration::from_secs(60);
        for line in ["one", "two"] {
            out.push(Stream::Stdout, format!("{line}\n").as_bytes());
            out.release();
            h.wrote();
            let got = rx.recv_timeout(bound).expect("the write woke the follower");
            assert!(got.contains(&format!("\"{line}\\n\"")), "{got}");
        }
        over.store(true, Ordering::SeqCst);
        h.close();
        // The end event comes in pieces (its data is sent from the copy
        // shared by the run's followers), then the end of the stream.
        let mut got = String::new();
        loop {
            let part = rx.recv_timeout(bound).expect("the close woke the follower");
            if part.is_empty() {
                break;
            }
            got.push_str(&part);
        }
        assert_eq!(got, "event: end\ndata: {}\n\n");
        reader.join().unwrap();
    }
}
