//! The ways a file of the state dir is written, in one place: replaced
//! atomically ([`write_atomic`]: temp file, fsync, rename, fsync of the
//! directory), appended a whole line at a time ([`append_line`]: a failed
//! write is cut off again), created private (mode 0600). Also used for
//! `config.toml` by `config::edit`, which is not in the state dir but
//! wants the same all-or-nothing replacement.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The temporary file beside `path` that replaces it atomically.
pub fn tmp_path(path: &Path) -> PathBuf {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    PathBuf::from(tmp)
}

/// Make a rename in the directory of `path` durable.
pub fn sync_dir(path: &Path) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    File::open(dir)?.sync_all()
}

/// Replace the file at `path` with what `write` writes, atomically and
/// durably: write a
/// temp file (mode 0600) beside it, fsync it, rename it over `path`, fsync
/// the directory. A crash leaves either the old file or the new one. The
/// state dir is created if needed.
///
/// # Errors
/// Any step failed; `path` is then unchanged.
pub fn write_atomic(
    path: &Path,
    write: impl FnOnce(&mut File) -> io::Result<()>,
) -> io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir)?;
    }
    let tmp = tmp_path(path);
    {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        write(&mut f)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    sync_dir(path)
}

/// Open `path` for appending (it must exist).
///
/// # Errors
/// It cannot be opened.
pub fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new().append(true).open(path)
}

/// Open `path` for reading, or `None` when it does not exist.
///
/// # Errors
/// It exists but cannot be opened.
pub fn open_if_exists(path: &Path) -> io::Result<Option<File>> {
    match File::open(path) {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The bytes of `path`, or `None` when it does not exist.
///
/// # Errors
/// It exists but cannot be read.
pub fn read_if_exists(path: &Path) -> io::Result<Option<Vec<u8>>> {
    match fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Append `line` to `file` opened for appending; when the write fails, cut
/// the file back to where it was, so that it never ends in half a line.
///
/// # Errors
/// The write failed.
pub fn append_line(file: &mut File, line: &[u8]) -> io::Result<()> {
    let len = file.metadata()?.len();
    if let Err(e) = file.write_all(line) {
        let _ = file.set_len(len);
        return Err(e);
    }
    Ok(())
}
