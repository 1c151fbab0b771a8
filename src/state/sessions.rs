//! Login sessions on disk: `sessions.json`, one compact JSON object of
//! records by the hex sha256 of their token (what a record holds and when
//! it is written is `access::sessions`'s), replaced atomically, mode 0600.

use std::collections::HashMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{file, Kept};

/// The session file of one state dir.
#[derive(Debug, Clone)]
pub struct SessionFile {
    path: PathBuf,
}

impl SessionFile {
    /// The session file in `state_dir`.
    pub fn new(state_dir: &Path) -> SessionFile {
        SessionFile {
            path: Kept::Sessions.path_in(state_dir),
        }
    }

    /// Where the sessions are kept (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The kept sessions; a missing or unreadable file is empty (the error
    /// is logged: nobody is logged in then, nothing worse).
    pub fn load<T: DeserializeOwned>(&self) -> HashMap<String, T> {
        match file::read_if_exists(&self.path) {
            Ok(Some(bytes)) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                log::error!("ignoring {}: {e}", self.path.display());
                HashMap::new()
            }),
            Ok(None) => HashMap::new(),
            Err(e) => {
                log::error!("cannot read {}: {e}", self.path.display());
                HashMap::new()
            }
        }
    }

    /// Replace the file with `all`, atomically.
    ///
    /// # Errors
    /// The state dir cannot be written.
    pub fn write<T: Serialize>(&self, all: &HashMap<String, T>) -> io::Result<()> {
        let bytes = serde_json::to_vec(all).map_err(io::Error::other)?;
        file::write_atomic(&self.path, |f| f.write_all(&bytes))
    }
}
