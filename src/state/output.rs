//! A run's output on disk: what its steps printed on stdout and stderr,
//! interleaved in the order it was read, in `state/output/<32 hex of the run
//! id>`.
//!
//! The file is a sequence of frames: one tag byte, a 4-byte big-endian
//! length, then that many bytes. Tag `o` is a chunk of stdout, `e` a chunk
//! of stderr; `O` and `E` (length 0) mark that stdout or stderr passed
//! `max_output_bytes` and the rest of that stream was not kept. A frame cut
//! off by a crash is ignored by readers.
//!
//! The last frame may be open: tag `p` (stdout) or `q` (stderr), its
//! length field not set, its bytes running to the end of the file. The
//! writer appends each new piece of the same stream to it, header-free, so
//! a program that writes one byte at a time costs one byte a byte, not six;
//! a frame costs its 5 header bytes only at a switch between stdout and
//! stderr (or past [`MAX_FRAME`]). Before it appends another frame the
//! writer closes the open one: the length first, then the tag (one byte,
//! so a reader sees it open or closed, never half of it). A reader trusts
//! the bytes it read of an open frame only if the tag is still open after
//! it read them ([`read_frames`]). Files written before open frames
//! existed hold closed frames only, and read the same.
//!
//! The runner writes the file while the run executes ([`OutputFile`]),
//! creating it with the run's first output: a run that printed nothing has
//! no file, which every reader takes as empty output (creating a file for
//! each run and removing it with the record was a tenth of trigd's work on
//! a sync run of a silent program). Readers ([`read_frames`]) read it from
//! any offset, so a follower only ever holds one batch in memory, however
//! far behind it is. The run store removes the file together with the
//! run's record (`run_retention`).
//!
//! ## A small output stays out of the file system
//!
//! Until a run's output passes [`INLINE_MAX`] bytes (as the file would hold
//! them, headers included) or [`HOLD`] has passed since its first byte, the
//! writer keeps the bytes the file would hold in memory instead
//! ([`OutputFile::release_due`], called by the step's supervision loop).
//! Past either, it creates the file and writes them there: from then on
//! the file is byte for byte the one it would have been. A run that ends
//! while its output is still held hands it to its end record
//! ([`OutputFile::finish`]; `RunRecord::output`, `"Output"` in `runs.log`
//! and the database's copy of the record, base64 of the frames, closed,
//! never served) and gets no file at all. So after its end a run's output
//! is in one place: its record, or its file. A reader of an ended run
//! looks at the record first; a follower reads the file while the run
//! executes and the record once it has ended without one. [`Stored`] reads
//! both alike, so every reader sees the same frames, bytes and truncation
//! marks either way.
//!
//! Why this shape, the simplest found to keep every reader as it was: what
//! is held is the file's own bytes, written by the same code, so writing
//! it out is one `write` and no reader needs a second format; the time
//! bound comes from the run's own supervision loop (it already wakes for
//! the run's deadline), so no reader has to reach the writer to make it
//! write out; and the end record is written anyway, so keeping the output
//! there costs no write of its own and is exactly as durable as the run's
//! end. The record's public JSON is unchanged (`RunRecord::public` drops
//! it).
//!
//! Why: a sync call of a program that prints a line cost trigd 0.53–0.59 ms
//! of system time against 0.11–0.13 ms with no file (8 connections, the
//! 2-core bench VM): creating an inode on ext4 without a journal skips, one
//! by one, every inode of its group freed in the last minute, and
//! `run_retention` frees one per run (`bench/README.md`, "What a sync
//! `/bin/echo` call costs"). Re-using dropped runs' files instead gained
//! less than the spread of the bench. Holding small output (interleaved
//! `bench/ab.sh -r 7 -s 4`, static builds, medians of three runs each on
//! a VM under other work; `bench/README.md` has them all): trigd's system
//! time per echo call 0.33–0.41 → 0.09–0.14 ms (lower in each of 42
//! rounds), echo8 1,526–2,036 → 2,036–2,715 req/s with p99 9.6 → 8.1 ms
//! in the quietest run, echo32 p99 30.7–41.7 → 25.5–29.2 ms. Re-measure
//! with `INLINE_MAX` at 0.
//!
//! What it costs: a follower sees a held byte at most [`HOLD`] late (it
//! reads the file, written out then, or the record at the run's end); a
//! whole-output read of a running run sees only what is in the file; a
//! kill -9 of trigd loses what was held: the output of runs whose first
//! byte came less than [`HOLD`] before it, at most [`INLINE_MAX`] bytes
//! each (a file, never fsynced, survives a kill -9 in the page cache; a
//! run whose end was not recorded is `interrupted` after the restart
//! either way). A record
//! with its output in it is at most 5,476 bytes longer (`"Output":` and
//! the base64 of [`INLINE_MAX`] bytes); listing reads it with the rest.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Largest frame a reader accepts (the writer closes an open frame before
/// it grows past it); a longer length means a damaged file.
pub const MAX_FRAME: u32 = 1 << 20;

/// Length of a frame header: tag and length.
const HEAD: u64 = 5;

/// Bytes of frame data [`read_frames`] returns at most per call.
pub const BATCH: usize = 64 * 1024;

/// Most bytes of a run's output (as its file would hold them) kept in
/// memory and then in its record instead of a file: an `echo` of a line
/// or a short report, not a log.
pub const INLINE_MAX: usize = 4096;

/// Longest time output is held in memory after its first byte before it
/// is written to the file: the delay a follower may see, and what a
/// kill -9 may lose. A sync `/bin/echo` ends well within it, also under
/// the bench's 32 connections.
pub const HOLD: Duration = Duration::from_millis(50);

/// The directory of output files in `state_dir`.
pub fn dir(state_dir: &Path) -> PathBuf {
    super::Kept::Output.path_in(state_dir)
}

/// The output file of the run whose id ends in `hex` (its 32 hex digits).
pub fn path(state_dir: &Path, hex: &str) -> PathBuf {
    dir(state_dir).join(hex)
}

/// The 32 hex digits of a run id (`<instance>-<hex>` or the hex alone).
pub fn hex_of(run: &str) -> &str {
    run.rsplit_once('-').map_or(run, |(_, hex)| hex)
}

/// Which output stream of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// One piece of a run's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// Bytes printed on a stream.
    Data(Stream, Vec<u8>),
    /// The stream passed `max_output_bytes`; nothing more of it is kept.
    Truncated(Stream),
}

fn tag(stream: Stream, truncated: bool) -> u8 {
    match (stream, truncated) {
        (Stream::Stdout, false) => b'o',
        (Stream::Stderr, false) => b'e',
        (Stream::Stdout, true) => b'O',
        (Stream::Stderr, true) => b'E',
    }
}

/// The tag of an open frame of `stream`.
fn open_tag(stream: Stream) -> u8 {
    match stream {
        Stream::Stdout => b'p',
        Stream::Stderr => b'q',
    }
}

/// What a tag byte says: the stream, and whether the frame is open or a
/// truncation mark; `None` for no tag (a damaged file).
fn parse_tag(t: u8) -> Option<(Stream, Kind)> {
    Some(match t {
        b'o' => (Stream::Stdout, Kind::Data),
        b'e' => (Stream::Stderr, Kind::Data),
        b'O' => (Stream::Stdout, Kind::Truncated),
        b'E' => (Stream::Stderr, Kind::Truncated),
        b'p' => (Stream::Stdout, Kind::Open),
        b'q' => (Stream::Stderr, Kind::Open),
        _ => return None,
    })
}

/// The kind of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Closed: its length is in its header.
    Data,
    /// Open: its bytes run to the end of the file.
    Open,
    /// A truncation mark.
    Truncated,
}

/// The frame open at the end of the file, being appended to.
#[derive(Debug, Clone, Copy)]
struct Open {
    stream: Stream,
    /// Offset of its header.
    at: u64,
    /// Its data bytes so far.
    len: u32,
}

/// Per-stream accounting of the writer.
#[derive(Debug, Default, Clone, Copy)]
struct Kept {
    bytes: usize,
    truncated: bool,
}

#[derive(Debug)]
struct Writer {
    path: PathBuf,
    /// Created once the output is no longer held in memory.
    file: Option<File>,
    /// While there is no file: the bytes it would hold.
    held: Vec<u8>,
    /// When the first of `held` came.
    held_since: Option<Instant>,
    /// The file's length (or what is held).
    end: u64,
    /// The last frame, while it is open.
    open: Option<Open>,
    kept: [Kept; 2],
    failed: bool,
}

/// The output file of a run being executed, held in memory while it is
/// small and young (see the module doc).
#[derive(Debug)]
pub struct OutputFile {
    max: usize,
    w: Mutex<Writer>,
}

impl OutputFile {
    /// The output file at `path`, keeping at most `max` bytes of each
    /// stream; the file is created (truncating) once the output is not
    /// held in memory any more.
    pub fn new(path: &Path, max: usize) -> OutputFile {
        OutputFile {
            max,
            w: Mutex::new(Writer {
                path: path.to_path_buf(),
                file: None,
                held: Vec::new(),
                held_since: None,
                end: 0,
                open: None,
                kept: [Kept::default(); 2],
                failed: false,
            }),
        }
    }

    /// Append what the run printed on `stream`, up to the stream's bound;
    /// past it, one truncation frame. A write error is logged once and
    /// the rest of the output is not kept.
    pub fn push(&self, stream: Stream, data: &[u8]) {
        let mut w = self.w.lock().unwrap_or_else(|e| e.into_inner());
        let i = usize::from(stream == Stream::Stderr);
        let k = w.kept[i];
        if w.failed || k.truncated || data.is_empty() {
            return;
        }
        let room = self.max - k.bytes;
        let take = data.len().min(room);
        let truncated = take < data.len();
        w.kept[i] = Kept {
            bytes: k.bytes + take,
            truncated,
        };
        let done = w.append(stream, &data[..take], truncated);
        w.check(done);
    }

    /// Write the output held in memory to the file once [`HOLD`] has
    /// passed since its first byte (`now`): [`Held::Released`] then; else
    /// until when it is held, or [`Held::Nothing`].
    pub fn release_due(&self, now: Instant) -> Held {
        let mut w = self.w.lock().unwrap_or_else(|e| e.into_inner());
        let Some(since) = w.held_since.filter(|_| w.file.is_none() && !w.failed) else {
            return Held::Nothing;
        };
        if now < since + HOLD {
            return Held::Until(since + HOLD);
        }
        let done = w.spill();
        w.check(done);
        Held::Released
    }

    /// Write the output held in memory to the file now (the run waits
    /// for its next attempt); whether there was any.
    pub fn release(&self) -> bool {
        let mut w = self.w.lock().unwrap_or_else(|e| e.into_inner());
        if w.held.is_empty() || w.file.is_some() || w.failed {
            return false;
        }
        let done = w.spill();
        w.check(done);
        true
    }

    /// At the run's end: the output still held in memory, as closed
    /// frames, for its record (none when it went to the file or there was
    /// none). Nothing is written after this.
    pub fn finish(&self) -> Option<Inline> {
        let mut w = self.w.lock().unwrap_or_else(|e| e.into_inner());
        if w.file.is_some() || w.held.is_empty() {
            return None;
        }
        // In memory: closing cannot fail.
        let _ = w.close();
        w.failed = true;
        Some(Inline(std::mem::take(&mut w.held)))
    }
}

/// Whether a run's output is held in memory ([`OutputFile::release_due`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// Nothing is (no output yet, or it is in the file).
    Nothing,
    /// Until this instant.
    Until(Instant),
    /// It was, and has just been written to the file.
    Released,
}

impl Writer {
    /// Log a write error once: the rest of the output is not kept.
    fn check(&mut self, done: io::Result<()>) {
        if let Err(e) = done {
            log::error!("cannot keep a run's output in {}: {e}", self.path.display());
            self.failed = true;
        }
    }

    /// Append `data` of `stream`, then, with `truncated`, the stream's
    /// truncation mark (after closing the open frame).
    fn append(&mut self, stream: Stream, data: &[u8], truncated: bool) -> io::Result<()> {
        for piece in data.chunks(MAX_FRAME as usize) {
            self.append_data(stream, piece)?;
        }
        if truncated {
            self.close()?;
            let mut buf = Vec::with_capacity(HEAD as usize);
            frame(&mut buf, tag(stream, true), &[]);
            self.write(&buf)?;
        }
        Ok(())
    }

    /// Append `data` (at most [`MAX_FRAME`] bytes) to the open frame when
    /// it is of `stream` and has room; else close it and open another.
    fn append_data(&mut self, stream: Stream, data: &[u8]) -> io::Result<()> {
        let n = data.len() as u32;
        let fits = |o: &Open| o.stream == stream && o.len <= MAX_FRAME - n;
        let mut buf = Vec::with_capacity(data.len() + HEAD as usize);
        match self.open.filter(fits) {
            Some(o) => {
                self.open = Some(Open {
                    len: o.len + n,
                    ..o
                })
            }
            None => {
                self.close()?;
                self.open = Some(Open {
                    stream,
                    at: self.end,
                    len: n,
                });
                frame(&mut buf, open_tag(stream), &[]);
            }
        }
        buf.extend_from_slice(data);
        self.write(&buf)
    }

    /// Close the open frame, if any: its length, then its tag.
    fn close(&mut self) -> io::Result<()> {
        let Some(o) = self.open.take() else {
            return Ok(());
        };
        self.patch(o.at + 1, &o.len.to_be_bytes())?;
        self.patch(o.at, &[tag(o.stream, false)])
    }

    /// Overwrite the bytes at `at` (of a frame header).
    fn patch(&mut self, at: u64, bytes: &[u8]) -> io::Result<()> {
        match &self.file {
            Some(file) => file.write_all_at(bytes, at),
            None => {
                let at = at as usize;
                self.held[at..at + bytes.len()].copy_from_slice(bytes);
                Ok(())
            }
        }
    }

    /// Append `buf` at the end of the file, or of what is held while that
    /// stays within [`INLINE_MAX`]: this module's speed trick, its figure
    /// in the module doc.
    fn write(&mut self, buf: &[u8]) -> io::Result<()> {
        if self.file.is_none() && self.held.len() + buf.len() > INLINE_MAX {
            self.spill()?;
        }
        match &mut self.file {
            Some(file) => file.write_all(buf)?,
            None => {
                self.held_since.get_or_insert_with(Instant::now);
                self.held.extend_from_slice(buf);
            }
        }
        self.end += buf.len() as u64;
        Ok(())
    }

    /// Create the file and write what is held to it.
    fn spill(&mut self) -> io::Result<()> {
        let mut file = create(&self.path)?;
        file.write_all(&self.held)?;
        self.file = Some(file);
        self.held = Vec::new();
        self.held_since = None;
        Ok(())
    }
}

/// Create (truncating) the output file at `path`, and its directory.
fn create(path: &Path) -> io::Result<File> {
    if let Some(d) = path.parent() {
        fs::create_dir_all(d)?;
    }
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

fn frame(buf: &mut Vec<u8>, tag: u8, data: &[u8]) {
    buf.push(tag);
    buf.extend_from_slice(&(data.len() as u32).to_be_bytes());
    buf.extend_from_slice(data);
}

/// Where a reader of an output file is: at the frame starting at `frame`,
/// of which it has read `done` data bytes (an open frame grows). Ordered
/// as a reader moves on: by frame, then by bytes read of it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Pos {
    frame: u64,
    done: u64,
}

/// The frames of `file` from `pos` on, at most [`BATCH`] bytes of them
/// (with their headers), and the position after them: complete frames,
/// of a longer closed frame its next [`BATCH`] bytes, and of an open frame
/// the bytes written so far (the rest comes at the next call). A frame cut
/// off at the end (being written, or torn by a crash) is left for the next
/// call. A damaged frame (an unknown tag, a length over [`MAX_FRAME`], a
/// truncation mark with bytes) ends the reading there: no call returns an
/// empty batch while there is more to read, so a reader may stop at one.
pub fn read_frames(file: &Stored, pos: Pos) -> (Vec<Frame>, Pos) {
    let mut frames = Vec::new();
    let mut pos = pos;
    let mut size = 0usize;
    while size < BATCH {
        let mut head = [0u8; HEAD as usize];
        if file.read_exact_at(&mut head, pos.frame).is_err() {
            break;
        }
        let Some((stream, kind)) = parse_tag(head[0]) else {
            break;
        };
        if kind == Kind::Open {
            match read_open(file, pos, head[0], BATCH - size) {
                Some(data) if data.is_empty() => break,
                Some(data) => {
                    size += data.len();
                    pos.done += data.len() as u64;
                    frames.push(Frame::Data(stream, data));
                    continue;
                }
                // Closed meanwhile: read it as a closed frame.
                None => continue,
            }
        }
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]);
        // The writer gives a truncation mark no bytes. Read as a mark, one
        // with more than a batch of them made an empty batch that was not
        // the end: what came after was lost to every reader that stops at
        // one (the whole output, the run's page, the database copy).
        let damaged = kind == Kind::Truncated && len != 0;
        if damaged || len > MAX_FRAME || u64::from(len) < pos.done {
            break;
        }
        let Some(data) = read_closed(file, pos, len, BATCH - size) else {
            break;
        };
        let first = pos.done == 0;
        let rest = u64::from(len) - pos.done - data.len() as u64;
        pos = if rest > 0 {
            Pos {
                frame: pos.frame,
                done: pos.done + data.len() as u64,
            }
        } else {
            size += HEAD as usize;
            Pos {
                frame: pos.frame + HEAD + u64::from(len),
                done: 0,
            }
        };
        size += data.len();
        match kind {
            Kind::Truncated => frames.push(Frame::Truncated(stream)),
            _ if data.is_empty() && !first => {}
            _ => frames.push(Frame::Data(stream, data)),
        }
    }
    (frames, pos)
}

/// The bytes of the closed frame of `len` data bytes at `pos` past those
/// read, at most `max` of them (the rest comes at the next call), so that
/// a reader holds one batch, not a whole frame of up to [`MAX_FRAME`]: 24
/// followers of a run printed in 1 MiB frames held 1.7 MiB each. `None`
/// while the frame is not all on disk (torn, see [`read_frames`]).
fn read_closed(file: &Stored, pos: Pos, len: u32, max: usize) -> Option<Vec<u8>> {
    let end = pos.frame + HEAD + u64::from(len);
    let from = pos.frame + HEAD + pos.done;
    let n = (end - from).min(max as u64);
    // Read whole, the frame is checked by `read_exact_at` itself.
    if n < end - from && file.len().ok()? < end {
        return None;
    }
    let mut data = vec![0u8; n as usize];
    file.read_exact_at(&mut data, from).ok()?;
    Some(data)
}

/// The bytes of the open frame at `pos` past those read (at most `max`),
/// if the frame is still open once they are read (`tag` is its open tag):
/// only then are they all its own, since the writer closes a frame before
/// it appends anything after it. `None`: it was closed meanwhile.
fn read_open(file: &Stored, pos: Pos, tag: u8, max: usize) -> Option<Vec<u8>> {
    let from = pos.frame + HEAD + pos.done;
    let end = file.len().unwrap_or(from);
    let n = end.saturating_sub(from).min(max.max(1) as u64) as usize;
    let mut data = vec![0u8; n];
    let got = file.read_at(&mut data, from).unwrap_or(0);
    data.truncate(got);
    let mut now = [0u8; 1];
    file.read_exact_at(&mut now, pos.frame).ok()?;
    (now[0] == tag).then_some(data)
}

/// `frames` as closed frames, the way an output file holds them (a copy
/// kept elsewhere, e.g. in the database, reads back with [`read_frames`]).
pub fn encode(frames: &[Frame], buf: &mut Vec<u8>) {
    for f in frames {
        match f {
            Frame::Data(stream, data) => {
                for piece in data.chunks(MAX_FRAME as usize) {
                    frame(buf, tag(*stream, false), piece);
                }
            }
            Frame::Truncated(stream) => frame(buf, tag(*stream, true), &[]),
        }
    }
}

/// Open the output file at `path` for reading: `None` while the run
/// has printed nothing (it has no file then), when its output is in its
/// record, or once it is removed.
pub fn open(path: &Path) -> Option<Stored> {
    File::open(path).ok().map(Stored::File)
}

/// A run's output as its record keeps it (see the module doc): the frames
/// its file would hold, closed; base64 in JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inline(Vec<u8>);

impl Inline {
    /// The frames held.
    pub fn frames(&self) -> &[u8] {
        &self.0
    }
}

impl Serialize for Inline {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for Inline {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Inline, D::Error> {
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map(Inline)
            .map_err(serde::de::Error::custom)
    }
}

/// A run's kept output, opened for reading: its file, or the frames its
/// record holds. Both read alike ([`read_frames`]).
#[derive(Debug)]
pub enum Stored {
    /// The output file.
    File(File),
    /// Kept in the run's record.
    Inline(Inline),
}

impl Stored {
    /// Read exactly `buf.len()` bytes at `at`.
    fn read_exact_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        match self {
            Stored::File(f) => f.read_exact_at(buf, at),
            Stored::Inline(_) if self.read_at(buf, at)? < buf.len() => {
                Err(io::ErrorKind::UnexpectedEof.into())
            }
            Stored::Inline(_) => Ok(()),
        }
    }

    /// Read at most `buf.len()` bytes at `at`; how many.
    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<usize> {
        match self {
            Stored::File(f) => f.read_at(buf, at),
            Stored::Inline(b) => {
                let b = b.frames();
                let from = usize::try_from(at).map_or(b.len(), |a| a.min(b.len()));
                let n = buf.len().min(b.len() - from);
                buf[..n].copy_from_slice(&b[from..from + n]);
                Ok(n)
            }
        }
    }

    /// Its length in bytes.
    fn len(&self) -> io::Result<u64> {
        match self {
            Stored::File(f) => Ok(f.metadata()?.len()),
            Stored::Inline(b) => Ok(b.frames().len() as u64),
        }
    }
}

/// The whole kept output of a run, each stream apart.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Whole {
    /// Everything kept of stdout.
    pub stdout: Vec<u8>,
    /// Everything kept of stderr.
    pub stderr: Vec<u8>,
    /// stdout passed `max_output_bytes`.
    pub stdout_truncated: bool,
    /// stderr passed `max_output_bytes`.
    pub stderr_truncated: bool,
}

/// Read the whole output file at `path` (bounded by `max_output_bytes` per
/// stream when it was written); a missing file is empty output.
pub fn read_whole(path: &Path) -> Whole {
    open(path).map_or_else(Whole::default, |file| whole(&file))
}

/// The whole output `file` holds.
pub fn whole(file: &Stored) -> Whole {
    let mut w = Whole::default();
    let mut offset = Pos::default();
    loop {
        let (frames, next) = read_frames(file, offset);
        if frames.is_empty() {
            return w;
        }
        offset = next;
        for f in frames {
            match f {
                Frame::Data(Stream::Stdout, d) => w.stdout.extend_from_slice(&d),
                Frame::Data(Stream::Stderr, d) => w.stderr.extend_from_slice(&d),
                Frame::Truncated(Stream::Stdout) => w.stdout_truncated = true,
                Frame::Truncated(Stream::Stderr) => w.stderr_truncated = true,
            }
        }
    }
}

/// Turns a stream's bytes, arriving in arbitrary pieces, into text: a
/// UTF-8 sequence split between two pieces is kept for the next one;
/// invalid bytes become U+FFFD.
#[derive(Debug, Default)]
pub struct Utf8Carry {
    pending: Vec<u8>,
}

impl Utf8Carry {
    /// The text of `data` after what was held back, holding back an
    /// incomplete sequence at its end.
    pub fn feed(&mut self, data: &[u8]) -> String {
        self.pending.extend_from_slice(data);
        let keep = match std::str::from_utf8(&self.pending) {
            Ok(_) => 0,
            Err(e) if e.error_len().is_none() => self.pending.len() - e.valid_up_to(),
            Err(_) => incomplete_tail(&self.pending),
        };
        let rest = self.pending.split_off(self.pending.len() - keep);
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending = rest;
        text
    }
}

/// Length of an incomplete UTF-8 sequence at the end of `b` (0 if none).
fn incomplete_tail(b: &[u8]) -> usize {
    for back in 1..=3.min(b.len()) {
        let c = b[b.len() - back];
        let need = match c {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            0x80..=0xBF => continue,
            _ => return 0,
        };
        return if need > back { back } else { 0 };
    }
    0
}

/// Remove the output files in `state_dir` whose run is not `kept` (given
/// the file name, the run's 32 hex digits).
pub fn sweep(state_dir: &Path, kept: impl Fn(&str) -> bool) {
    let Ok(entries) = fs::read_dir(dir(state_dir)) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        if !name.to_str().is_some_and(&kept) {
            let _ = fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::test_dir::TestDir;

    fn tmp(name: &str) -> TestDir {
        TestDir::new(&format!("output-{name}"))
    }

    #[test]
    fn frames_keep_order_and_truncation() {
        let d = tmp("frames");
        let p = path(d.path(), "ab");
        let out = OutputFile::new(&p, 5);
        out.push(Stream::Stdout, b"one\n");
        out.push(Stream::Stderr, b"err\n");
        out.push(Stream::Stdout, b"two\n");
        out.push(Stream::Stdout, b"three\n");
        assert!(out.release(), "held in memory so far");
        let f = Stored::File(File::open(&p).unwrap());
        let (frames, end) = read_frames(&f, Pos::default());
        assert_eq!(
            frames,
            vec![
                Frame::Data(Stream::Stdout, b"one\n".to_vec()),
                Frame::Data(Stream::Stderr, b"err\n".to_vec()),
                Frame::Data(Stream::Stdout, b"t".to_vec()),
                Frame::Truncated(Stream::Stdout),
            ]
        );
        let len = fs::metadata(&p).unwrap().len();
        assert_eq!(
            end,
            Pos {
                frame: len,
                done: 0
            }
        );
        assert_eq!(read_frames(&f, end).0, vec![]);
        let w = read_whole(&p);
        assert_eq!(
            (w.stdout.as_slice(), w.stdout_truncated),
            (&b"one\nt"[..], true)
        );
        assert_eq!(
            (w.stderr.as_slice(), w.stderr_truncated),
            (&b"err\n"[..], false)
        );
    }

    #[test]
    fn a_torn_frame_waits() {
        let d = tmp("torn");
        let p = d.join("x");
        fs::write(&p, [b'o', 0, 0, 0, 4, b'a', b'b']).unwrap();
        let f = Stored::File(File::open(&p).unwrap());
        assert_eq!(read_frames(&f, Pos::default()), (vec![], Pos::default()));
    }

    #[test]
    fn a_long_frame_is_read_a_batch_at_a_time() {
        let d = tmp("long");
        let p = d.join("l");
        let data: Vec<u8> = (0..3 * BATCH as u32 / 2).map(|i| (i % 251) as u8).collect();
        let mut file = Vec::new();
        frame(&mut file, b'o', &data);
        frame(&mut file, b'E', b"");
        // A long frame torn by a crash: nothing of it is read.
        fs::write(&p, &file[..file.len() - 6]).unwrap();
        let f = Stored::File(File::open(&p).unwrap());
        assert_eq!(read_frames(&f, Pos::default()), (vec![], Pos::default()));
        fs::write(&p, &file).unwrap();
        let f = Stored::File(File::open(&p).unwrap());
        let (frames, at) = read_frames(&f, Pos::default());
        assert_eq!(
            frames,
            vec![Frame::Data(Stream::Stdout, data[..BATCH].to_vec())]
        );
        let (frames, at) = read_frames(&f, at);
        assert_eq!(
            frames,
            vec![
                Frame::Data(Stream::Stdout, data[BATCH..].to_vec()),
                Frame::Truncated(Stream::Stderr)
            ]
        );
        assert_eq!(read_frames(&f, at).0, vec![]);
        assert_eq!(read_whole(&p).stdout, data);
    }

    #[test]
    fn an_empty_batch_is_the_end_past_a_mark_with_bytes() {
        // Damage the writer never makes (its marks have no bytes): a mark
        // with more than a batch of bytes, then a frame. The fuzz target
        // `output_frames` checks the same (its seed `mark-with-bytes`).
        let d = tmp("mark");
        let p = d.join("m");
        let mut file = Vec::new();
        frame(&mut file, b'O', &vec![b'x'; BATCH + 10]);
        frame(&mut file, b'e', b"b");
        fs::write(&p, &file).unwrap();
        let f = Stored::File(File::open(&p).unwrap());
        let (frames, at) = read_frames(&f, Pos::default());
        assert_eq!(frames, vec![]);
        assert_eq!(
            read_frames(&f, at).0,
            vec![],
            "nothing after an empty batch"
        );
        assert_eq!(read_whole(&p), Whole::default());
    }

    #[test]
    fn one_byte_at_a_time_costs_a_byte_a_byte() {
        let d = tmp("bytes");
        let p = path(d.path(), "b");
        let out = OutputFile::new(&p, 1 << 20);
        let data: Vec<u8> = (0..10_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        for b in &data {
            out.push(Stream::Stdout, std::slice::from_ref(b));
        }
        out.push(Stream::Stderr, b"!");
        out.push(Stream::Stdout, b"z");
        let size = fs::metadata(&p).unwrap().len();
        assert_eq!(size, 10_000 + 2 + 3 * HEAD, "three frames' headers only");
        let w = read_whole(&p);
        assert_eq!(&w.stdout[..10_000], &data[..]);
        assert_eq!(
            (&w.stdout[10_000..], w.stderr.as_slice()),
            (&b"z"[..], &b"!"[..])
        );
    }

    #[test]
    fn a_reader_follows_an_open_frame_as_it_grows_and_closes() {
        let d = tmp("grow");
        let p = path(d.path(), "g");
        let out = OutputFile::new(&p, 100);
        out.push(Stream::Stdout, b"ab");
        out.release();
        let f = Stored::File(File::open(&p).unwrap());
        let (frames, at) = read_frames(&f, Pos::default());
        assert_eq!(frames, vec![Frame::Data(Stream::Stdout, b"ab".to_vec())]);
        assert_eq!(read_frames(&f, at).0, vec![], "nothing new yet");
        out.push(Stream::Stdout, b"cd");
        let (frames, at) = read_frames(&f, at);
        assert_eq!(frames, vec![Frame::Data(Stream::Stdout, b"cd".to_vec())]);
        out.push(Stream::Stdout, b"ef");
        out.push(Stream::Stderr, b"x");
        let (frames, at) = read_frames(&f, at);
        assert_eq!(
            frames,
            vec![
                Frame::Data(Stream::Stdout, b"ef".to_vec()),
                Frame::Data(Stream::Stderr, b"x".to_vec())
            ]
        );
        // Closed after it was read whole: no empty piece.
        out.push(Stream::Stdout, b"g");
        let (frames, _) = read_frames(&f, at);
        assert_eq!(frames, vec![Frame::Data(Stream::Stdout, b"g".to_vec())]);
        let w = read_whole(&p);
        assert_eq!(
            (w.stdout.as_slice(), w.stderr.as_slice()),
            (&b"abcdefg"[..], &b"x"[..])
        );
    }

    #[test]
    fn an_open_frame_left_by_a_crash_runs_to_the_end() {
        let d = tmp("crash");
        let p = d.join("x");
        // A closed frame (as files written before open frames), then an
        // open one cut off by a crash.
        fs::write(&p, [b'o', 0, 0, 0, 1, b'a', b'q', 0, 0, 0, 0, b'b', b'c']).unwrap();
        let w = read_whole(&p);
        assert_eq!(
            (w.stdout.as_slice(), w.stderr.as_slice()),
            (&b"a"[..], &b"bc"[..])
        );
    }

    /// What `pieces` make: frames read whole, the file's bytes (written
    /// out at once, when `release`), and what `finish` hands on.
    fn write(name: &str, max: usize, release: bool, pieces: &[(Stream, &[u8])]) -> Written {
        let d = tmp(name);
        let p = path(d.path(), "w");
        let out = OutputFile::new(&p, max);
        for (i, (stream, data)) in pieces.iter().enumerate() {
            out.push(*stream, data);
            if release && i == 0 {
                assert!(out.release());
            }
        }
        let inline = out.finish();
        let file = fs::read(&p).ok();
        let stored = match (&inline, open(&p)) {
            (Some(i), _) => Stored::Inline(i.clone()),
            (None, Some(f)) => f,
            (None, None) => Stored::Inline(Inline::default()),
        };
        let mut frames = Vec::new();
        let mut pos = Pos::default();
        loop {
            let (f, next) = read_frames(&stored, pos);
            if f.is_empty() {
                break;
            }
            frames.extend(f);
            pos = next;
        }
        Written {
            frames,
            whole: whole(&stored),
            file,
            inline,
        }
    }

    struct Written {
        frames: Vec<Frame>,
        whole: Whole,
        file: Option<Vec<u8>>,
        inline: Option<Inline>,
    }

    #[test]
    fn a_small_output_is_handed_to_the_record_and_reads_as_the_file_would() {
        let pieces: &[(Stream, &[u8])] = &[
            (Stream::Stdout, b"a b\n"),
            (Stream::Stdout, b"\xc3"),
            (Stream::Stderr, b"err\n"),
            (Stream::Stdout, b"\xa9\n"),
            (Stream::Stderr, &[b'x'; 2000]),
            (Stream::Stderr, &[b'y'; 1500]),
        ];
        let held = write("held", 3000, false, pieces);
        let filed = write("filed", 3000, true, pieces);
        assert!(held.file.is_none(), "no file");
        assert!(held.inline.is_some() && filed.inline.is_none());
        assert!(filed.file.is_some());
        assert_eq!(held.frames, filed.frames, "the same frames");
        assert_eq!(held.whole, filed.whole, "the same output");
        assert!(held.whole.stderr_truncated, "the truncation mark too");
        assert_eq!(held.frames.len(), 5);
        let json = serde_json::to_string(&held.inline).unwrap();
        let back: Option<Inline> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, held.inline, "base64 in JSON: {json}");
    }

    #[test]
    fn an_output_past_inline_max_goes_to_the_file_as_it_would_have() {
        let big = vec![b'z'; INLINE_MAX];
        let pieces: &[(Stream, &[u8])] = &[
            (Stream::Stdout, b"start\n"),
            (Stream::Stderr, b"e"),
            (Stream::Stdout, &big[..1000]),
            (Stream::Stdout, &big),
            (Stream::Stderr, b"end"),
        ];
        let held = write("past", 1 << 20, false, pieces);
        let filed = write("past-filed", 1 << 20, true, pieces);
        assert!(held.inline.is_none(), "not in the record");
        assert_eq!(held.file, filed.file, "byte for byte the same file");
        assert_eq!(held.frames, filed.frames);
    }

    #[test]
    fn held_output_is_written_out_once_hold_has_passed() {
        let d = tmp("hold");
        let p = path(d.path(), "h");
        let out = OutputFile::new(&p, 100);
        let start = Instant::now();
        assert_eq!(out.release_due(start), Held::Nothing, "nothing yet");
        out.push(Stream::Stdout, b"first");
        let Held::Until(at) = out.release_due(Instant::now()) else {
            panic!("held");
        };
        assert!(at >= start + HOLD && at <= Instant::now() + HOLD);
        assert!(!p.exists());
        assert_eq!(out.release_due(at), Held::Released);
        assert_eq!(read_whole(&p).stdout, b"first");
        out.push(Stream::Stdout, b" second");
        assert_eq!(out.release_due(at + HOLD), Held::Nothing, "in the file");
        assert_eq!(read_whole(&p).stdout, b"first second");
        assert_eq!(out.finish(), None);
    }

    #[test]
    fn utf8_split_between_pieces() {
        let mut c = Utf8Carry::default();
        let s = "é€😀".as_bytes();
        let mut text = String::new();
        for b in s {
            text.push_str(&c.feed(&[*b]));
        }
        assert_eq!(text, "é€😀");
        assert_eq!(c.feed(b"\xffok"), "\u{fffd}ok");
    }

    #[test]
    fn hex_of_ids() {
        assert_eq!(hex_of("a-1-0123"), "0123");
        assert_eq!(hex_of("0123"), "0123");
    }
}
