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
//! The runner writes the file while the run executes ([`OutputFile`]),
//! creating it with the run's first output: a run that printed nothing has
//! no file, which every reader takes as empty output (creating a file for
//! each run and removing it with the record was a tenth of trigd's work on
//! a sync run of a silent program).
//! readers ([`read_frames`]) read it from any offset, so a follower only
//! ever holds one batch in memory, however far behind it is. The run store
//! removes the file together with the run's record (`run_retention`).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Largest frame a reader accepts (the runner writes at most one read of a
/// pipe per frame); a longer length means a damaged file.
const MAX_FRAME: u32 = 1 << 20;

/// Bytes of frame data [`read_frames`] returns at most per call.
pub const BATCH: usize = 64 * 1024;

/// The directory of output files in `state_dir`.
pub fn dir(state_dir: &Path) -> PathBuf {
    state_dir.join("output")
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

/// Per-stream accounting of the writer.
#[derive(Debug, Default, Clone, Copy)]
struct Kept {
    bytes: usize,
    truncated: bool,
}

#[derive(Debug)]
struct Writer {
    path: PathBuf,
    /// Created at the first output.
    file: Option<File>,
    kept: [Kept; 2],
    failed: bool,
}

/// The output file of a run being executed. Shared by the threads reading
/// the step's pipes.
#[derive(Debug)]
pub struct OutputFile {
    max: usize,
    w: Mutex<Writer>,
}

impl OutputFile {
    /// The output file at `path`, keeping at most `max` bytes of each
    /// stream; the file is created (truncating) at the first output.
    pub fn new(path: &Path, max: usize) -> OutputFile {
        OutputFile {
            max,
            w: Mutex::new(Writer {
                path: path.to_path_buf(),
                file: None,
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
        let mut buf = Vec::with_capacity(take + 10);
        if take > 0 {
            frame(&mut buf, tag(stream, false), &data[..take]);
        }
        let truncated = take < data.len();
        if truncated {
            frame(&mut buf, tag(stream, true), &[]);
        }
        w.kept[i] = Kept {
            bytes: k.bytes + take,
            truncated,
        };
        if let Err(e) = w.write(&buf) {
            log::error!("cannot keep a run's output in {}: {e}", w.path.display());
            w.failed = true;
        }
    }
}

impl Writer {
    /// Append `buf`, creating the file first if this is the first output.
    fn write(&mut self, buf: &[u8]) -> io::Result<()> {
        let file = match &mut self.file {
            Some(f) => f,
            None => self.file.insert(create(&self.path)?),
        };
        file.write_all(buf)
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

/// The complete frames of `file` from `offset` on, at most about
/// [`BATCH`] bytes of them, and the offset after the last one returned.
/// A frame cut off at the end (being written, or torn by a crash) is left
/// for the next call.
pub fn read_frames(file: &File, offset: u64) -> (Vec<Frame>, u64) {
    let mut frames = Vec::new();
    let mut at = offset;
    let mut size = 0usize;
    while size < BATCH {
        let mut head = [0u8; 5];
        if file.read_exact_at(&mut head, at).is_err() {
            break;
        }
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]);
        let stream = match head[0] {
            b'o' | b'O' => Stream::Stdout,
            b'e' | b'E' => Stream::Stderr,
            _ => break,
        };
        if len > MAX_FRAME {
            break;
        }
        let mut data = vec![0u8; len as usize];
        if file.read_exact_at(&mut data, at + 5).is_err() {
            break;
        }
        at += 5 + u64::from(len);
        size += data.len() + 5;
        frames.push(if head[0].is_ascii_uppercase() {
            Frame::Truncated(stream)
        } else {
            Frame::Data(stream, data)
        });
    }
    (frames, at)
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
    let mut w = Whole::default();
    let Ok(file) = File::open(path) else {
        return w;
    };
    let mut offset = 0;
    loop {
        let (frames, next) = read_frames(&file, offset);
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

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("trigd-output-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn frames_keep_order_and_truncation() {
        let d = tmp("frames");
        let p = path(&d, "ab");
        let out = OutputFile::new(&p, 5);
        out.push(Stream::Stdout, b"one\n");
        out.push(Stream::Stderr, b"err\n");
        out.push(Stream::Stdout, b"two\n");
        out.push(Stream::Stdout, b"three\n");
        let f = File::open(&p).unwrap();
        let (frames, end) = read_frames(&f, 0);
        assert_eq!(
            frames,
            vec![
                Frame::Data(Stream::Stdout, b"one\n".to_vec()),
                Frame::Data(Stream::Stderr, b"err\n".to_vec()),
                Frame::Data(Stream::Stdout, b"t".to_vec()),
                Frame::Truncated(Stream::Stdout),
            ]
        );
        assert_eq!(end, fs::metadata(&p).unwrap().len());
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
        fs::create_dir_all(&d).unwrap();
        let p = d.join("x");
        fs::write(&p, [b'o', 0, 0, 0, 4, b'a', b'b']).unwrap();
        let f = File::open(&p).unwrap();
        assert_eq!(read_frames(&f, 0), (vec![], 0));
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
