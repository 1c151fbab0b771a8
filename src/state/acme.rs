//! What ACME keeps (`acme/` in the state dir, mode 0700): the account
//! (`account.json`: its URL and private key, as instant-acme serialises
//! them, with the directory it belongs to) and the certificate
//! (`certificate.pem`: the private key and the full chain in one file, so
//! that one atomic rename replaces both; `certificate.json`: the domains
//! and directory it was ordered for and when). Every file is mode 0600,
//! replaced atomically ([`super::file::write_atomic`]).

use std::fs::{self, DirBuilder};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::file::{read_if_exists, write_atomic};

/// Largest file read back: the account and a chain are a few KiB.
const MAX_FILE_BYTES: usize = 1 << 20;

/// The files of `acme/`.
#[derive(Debug, Clone)]
pub struct AcmeFiles {
    dir: PathBuf,
}

impl AcmeFiles {
    /// The files in `acme` of `state_dir`.
    pub fn new(state_dir: &Path) -> AcmeFiles {
        AcmeFiles {
            dir: super::Kept::Acme.path_in(state_dir),
        }
    }

    /// `account.json`'s bytes, if written.
    ///
    /// # Errors
    /// It cannot be read, or is larger than 1 MiB.
    pub fn account(&self) -> io::Result<Option<Vec<u8>>> {
        self.read("account.json")
    }

    /// Replace `account.json`.
    ///
    /// # Errors
    /// The directory or the file cannot be written.
    pub fn save_account(&self, bytes: &[u8]) -> io::Result<()> {
        self.write("account.json", bytes)
    }

    /// Where the certificate's key and chain are (one PEM file).
    pub fn certificate_path(&self) -> PathBuf {
        self.dir.join("certificate.pem")
    }

    /// `certificate.pem` and `certificate.json`, if both are written.
    ///
    /// # Errors
    /// One cannot be read, or is larger than 1 MiB.
    pub fn certificate(&self) -> io::Result<Option<(Vec<u8>, Vec<u8>)>> {
        let pem = self.read("certificate.pem")?;
        let meta = self.read("certificate.json")?;
        Ok(pem.zip(meta))
    }

    /// Replace the certificate: the PEM first, then its description (a
    /// crash in between leaves a description of the old certificate, which
    /// then does not match and is ordered again).
    ///
    /// # Errors
    /// The directory or a file cannot be written.
    pub fn save_certificate(&self, pem: &[u8], meta: &[u8]) -> io::Result<()> {
        self.write("certificate.pem", pem)?;
        self.write("certificate.json", meta)
    }

    fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        let bytes = read_if_exists(&self.dir.join(name))?;
        if bytes.as_ref().is_some_and(|b| b.len() > MAX_FILE_BYTES) {
            let msg = format!("{name} is larger than 1 MiB");
            return Err(io::Error::new(io::ErrorKind::InvalidData, msg));
        }
        Ok(bytes)
    }

    /// Write `name` atomically (0600) in the directory, made 0700 first.
    fn write(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)?;
        fs::set_permissions(&self.dir, fs::Permissions::from_mode(0o700))?;
        write_atomic(&self.dir.join(name), |f| f.write_all(bytes))
    }
}
