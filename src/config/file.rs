//! Reading the files a config is made of (`config.toml`, `programs/*.toml`,
//! the hooks files), bounded: a file over [`MAX_FILE_BYTES`] is refused
//! before its content is held in memory, whatever the file is (one that
//! grows while it is read, a symlink to a huge file), so that no file can
//! make a load, a reload or `trigd check` exhaust memory.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

/// The largest file a config is read from: every file of a real config
/// is far smaller (a hooks file of 100 hooks is ~50 KB). The parsers hold
/// up to ~80 bytes per byte of a hostile file (a TOML array of 500,000
/// empty arrays; a JSON hooks file, whose tokens yaml-rust2 keeps until
/// its outer `[` closes), so this bounds a load at ~100 MiB.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// The text of the file at `path`, at most [`MAX_FILE_BYTES`].
///
/// # Errors
/// The file cannot be opened or read, is not a regular file, is not
/// UTF-8, or is too big ([`too_big`]).
pub fn read_text(path: &Path) -> io::Result<String> {
    // O_NONBLOCK: opening a FIFO at the path would otherwise wait for a
    // writer for good, holding the reload thread (and every reload and
    // every call waiting for one after it).
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if meta.file_type().is_fifo() {
        return read_pipe(&mut file);
    }
    if !meta.is_file() {
        let msg = "not a regular file (a config, program or hooks file is read whole)";
        return Err(io::Error::new(io::ErrorKind::InvalidInput, msg));
    }
    read_to_end(&mut file, meta.len())
}

/// How long a FIFO's writer may take to give the whole file.
pub const PIPE_WAIT: Duration = Duration::from_secs(5);

/// The text a pipe (`--config <(…)`, a FIFO) gives until its writer
/// closes it, within [`PIPE_WAIT`] and [`MAX_FILE_BYTES`]; `file` opened
/// with `O_NONBLOCK`. A FIFO no writer holds open reads as empty at once.
///
/// # Errors
/// The writer did not finish in time; as [`read_to_end`].
fn read_pipe(file: &mut File) -> io::Result<String> {
    let deadline = Instant::now() + PIPE_WAIT;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => wait_readable(file, deadline)?,
            Err(e) => return Err(e),
        }
        if buf.len() as u64 > MAX_FILE_BYTES {
            return Err(too_big());
        }
    }
    String::from_utf8(buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.utf8_error()))
}

/// Wait until `file` can be read, at most until `deadline`.
fn wait_readable(file: &File, deadline: Instant) -> io::Result<()> {
    let left = deadline.saturating_duration_since(Instant::now());
    let mut fds = [libc::pollfd {
        fd: file.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    // Nothing ready: the time ran out (or a signal came: look again).
    if crate::sys::poll(&mut fds, Some(left))? == 0 && Instant::now() >= deadline {
        let msg = format!(
            "a pipe whose writer did not close it within {} s",
            PIPE_WAIT.as_secs()
        );
        return Err(io::Error::new(io::ErrorKind::TimedOut, msg));
    }
    Ok(())
}

/// The rest of `file`, expected to be `len` bytes long, as UTF-8, and at
/// most [`MAX_FILE_BYTES`]: one `read` for a file that did not change size
/// (`read_to_string` would ask the size again with `statx` and `lseek`,
/// and read once more for the end). A read of a regular file that returns
/// fewer bytes than asked for has reached its end; one that returns
/// exactly `len` of the `len + 1` asked for is the whole file `fstat`
/// measured.
///
/// # Errors
/// As [`read_text`].
pub fn read_to_end(file: &mut File, len: u64) -> io::Result<String> {
    if len > MAX_FILE_BYTES {
        return Err(too_big());
    }
    // Never more than one byte past the bound, whatever the file does.
    let mut file = file.take(MAX_FILE_BYTES + 1);
    let len = usize::try_from(len).unwrap_or(0);
    let mut buf = vec![0; len + 1];
    let mut n = 0;
    loop {
        match file.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        if n == len {
            break;
        }
        if n == buf.len() {
            buf.resize(n * 2, 0);
        }
    }
    if n as u64 > MAX_FILE_BYTES {
        return Err(too_big());
    }
    buf.truncate(n);
    String::from_utf8(buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.utf8_error()))
}

/// The largest secret file (`secret_file`): a secret is a few dozen bytes.
pub const MAX_SECRET_BYTES: u64 = 64 << 10;

/// The content of the secret file at `path`, at most [`MAX_SECRET_BYTES`]
/// (`secret_file = "/dev/zero"` must not fill memory).
///
/// # Errors
/// The file cannot be opened or read, or is too big.
pub fn read_secret(path: &Path) -> io::Result<Vec<u8>> {
    read_bounded(path, MAX_SECRET_BYTES, "64 KiB, the limit of a secret file")
}

/// The largest CA file (`ca_file`): Debian's whole bundle of roots is
/// ~220 KB.
pub const MAX_CA_BYTES: u64 = 1 << 20;

/// The content of the PEM CA file at `path`, at most [`MAX_CA_BYTES`].
///
/// # Errors
/// The file cannot be opened or read, or is too big.
pub fn read_ca(path: &Path) -> io::Result<Vec<u8>> {
    read_bounded(path, MAX_CA_BYTES, "1 MiB, the limit of a CA file")
}

/// At most `max` bytes of `path`; `limit` says it in the error.
fn read_bounded(path: &Path, max: u64, limit: &str) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    // O_NONBLOCK: opening a FIFO at the path would otherwise wait for a
    // writer for good, and hold the load (and every reload after it).
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?
        .take(max + 1)
        .read_to_end(&mut buf)?;
    if buf.len() as u64 > max {
        let msg = format!("the file is larger than {limit}");
        return Err(io::Error::new(io::ErrorKind::InvalidData, msg));
    }
    Ok(buf)
}

/// Whether `text` is longer than a file may be (text that did not come
/// from [`read_text`]: an edit checked before it is written, a fuzz input).
pub fn over_limit(text: &str) -> bool {
    text.len() as u64 > MAX_FILE_BYTES
}

/// The error of a file over [`MAX_FILE_BYTES`].
pub fn too_big() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, too_big_msg())
}

/// What is wrong with a file over [`MAX_FILE_BYTES`].
pub fn too_big_msg() -> String {
    format!(
        "the file is larger than {} MiB, the limit of a config, program or hooks file",
        MAX_FILE_BYTES >> 20
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::test_dir::TestDir;

    /// A FIFO no writer holds reads as empty at once (opening it waited
    /// for a writer for good, holding every later reload); one a writer
    /// fills is read until it closes it; a directory is refused.
    #[test]
    fn a_fifo_is_read_without_waiting_for_a_writer() {
        let dir = TestDir::new("file-fifo");
        let fifo = dir.join("config.toml");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        let started = Instant::now();
        assert_eq!(read_text(&fifo).unwrap(), "");
        assert!(started.elapsed() < PIPE_WAIT, "read at once");
        let writer = std::thread::spawn({
            let fifo = fifo.clone();
            move || std::fs::write(fifo, "[server]\n")
        });
        let mut text = String::new();
        // The writer opens once a reader has: read until it has written.
        let ok = (0..200).any(|_| {
            text = read_text(&fifo).unwrap_or_default();
            if text.is_empty() {
                std::thread::sleep(Duration::from_millis(10));
            }
            !text.is_empty()
        });
        assert!(ok && text == "[server]\n", "{text:?}");
        writer.join().unwrap().unwrap();
        let err = read_text(dir.path()).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }

    #[test]
    fn a_file_over_the_bound_is_refused_and_one_at_it_is_read() {
        let dir = TestDir::new("file");
        let at = dir.join("at.toml");
        std::fs::write(&at, vec![b'#'; MAX_FILE_BYTES as usize]).unwrap();
        assert_eq!(read_text(&at).unwrap().len() as u64, MAX_FILE_BYTES);
        let over = dir.join("over.toml");
        std::fs::write(&over, vec![b'#'; MAX_FILE_BYTES as usize + 1]).unwrap();
        let e = read_text(&over).unwrap_err();
        assert!(e.to_string().contains("larger than 1 MiB"), "{e}");
        // A length that lies (a file that grew since `fstat`): still bounded.
        let mut f = File::open(&over).unwrap();
        assert!(read_to_end(&mut f, 10).is_err());
    }

    /// `read` of a FIFO nobody writes to (made in a temp dir named after
    /// `name`) returns empty at once instead of waiting for a writer.
    fn reads_a_fifo_at_once(name: &str, read: fn(&Path) -> io::Result<Vec<u8>>) {
        let dir = TestDir::new(name);
        let fifo = dir.join(name);
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(read(&fifo).map(|b| b.len())));
        let got = rx.recv_timeout(std::time::Duration::from_secs(10));
        assert!(matches!(got, Ok(Ok(0))), "{name}: {got:?}");
    }

    /// A FIFO nobody writes to is read as empty at once, not waited on.
    #[test]
    fn a_fifo_as_a_secret_file_does_not_block() {
        reads_a_fifo_at_once("fifo-secret", read_secret);
    }

    /// A CA file is read the same way: a FIFO is empty, `/dev/zero` too
    /// big.
    #[test]
    fn a_ca_file_is_bounded_and_a_fifo_does_not_block() {
        let e = read_ca(Path::new("/dev/zero")).unwrap_err();
        assert!(e.to_string().contains("larger than 1 MiB"), "{e}");
        reads_a_fifo_at_once("fifo-ca", read_ca);
    }

    #[test]
    fn a_secret_file_is_bounded() {
        let e = read_secret(Path::new("/dev/zero")).unwrap_err();
        assert!(e.to_string().contains("larger than 64 KiB"), "{e}");
    }
}
