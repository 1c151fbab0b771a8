//! `Error`: what can stop a CLI command. Only `main` matches it, to print it
//! and choose the exit code (usage: 2, everything else: 1).

use std::fmt;
use std::io;
use std::path::PathBuf;

use crate::config::ConfigError;

/// A failure of a CLI command.
#[derive(Debug)]
pub enum Error {
    /// Bad command line; the message says what, the usage follows.
    Usage(String),
    /// The configuration does not load; every problem found.
    Config(Vec<ConfigError>),
    /// A file or directory could not be read or written.
    Io {
        /// The path involved.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The listen address cannot be resolved or bound.
    Bind {
        /// The address as configured.
        addr: String,
        /// The OS error.
        source: io::Error,
    },
    /// Anything else, as a sentence.
    Other(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage(m) | Error::Other(m) => write!(f, "{m}"),
            Error::Config(errs) => {
                for e in errs {
                    writeln!(f, "{e}")?;
                }
                let n = errs.len();
                write!(f, "{n} error{}", if n == 1 { "" } else { "s" })
            }
            Error::Io { path, source } => write!(f, "{}: {source}", path.display()),
            Error::Bind { addr, source } => write!(f, "cannot listen on {addr}: {source}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } | Error::Bind { source, .. } => Some(source),
            _ => None,
        }
    }
}
