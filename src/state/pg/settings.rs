//! The settings of the PostgreSQL backend, as `[state]` of `config.toml`
//! gives them (`config::state_db` checks and fills them in): where the
//! database is, how to reach it, and the bounds of each use.

use std::fmt;
use std::time::Duration;

use rustls_pki_types::CertificateDer;

/// Defaults of `[state]`.
pub mod defaults {
    /// `lease`: how long an instance's lease lasts without a heartbeat.
    pub const LEASE_SECS: u64 = 15;
    /// `pool`: connections per instance.
    pub const POOL: usize = 8;
    /// `sslmode` when the URL names none (libpq's default).
    pub const SSLMODE: &str = "prefer";
    /// Time to open one connection (TCP, TLS, authentication).
    pub const CONNECT_TIMEOUT_SECS: u64 = 5;
    /// Time one statement may run on the server (`statement_timeout`), and
    /// the bound of an unanswered connection (`tcp_user_timeout`).
    pub const STATEMENT_TIMEOUT_SECS: u64 = 10;
}

/// How the connection to the database is protected (`sslmode` in `url`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Plain TCP (or a Unix socket).
    Disable,
    /// TLS when the server offers it, else plain; the certificate is not
    /// checked (libpq's default).
    Prefer,
    /// TLS, the certificate not checked: encryption against a passive
    /// listener only (libpq's `require` without a root file).
    Require,
    /// TLS, the certificate checked against `ca_file` (or the bundled
    /// roots) and the host name.
    VerifyFull,
}

impl SslMode {
    /// The mode named `s`, as libpq spells it.
    pub fn parse(s: &str) -> Option<SslMode> {
        Some(match s {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }
}

/// The validated `[state]` settings of the PostgreSQL backend.
#[derive(Clone)]
pub struct StateDb {
    /// `url` as written, without `sslmode`: for messages (it holds no
    /// password).
    pub url: String,
    /// The client's settings: host, port, user, database, password, with
    /// the timeouts.
    pub pg: postgres::Config,
    /// `sslmode`.
    pub ssl: SslMode,
    /// `ca_file`: roots trusted for `verify-full`; empty: the bundled ones.
    pub roots: Vec<CertificateDer<'static>>,
    /// `lease`.
    pub lease: Duration,
    /// `pool`: connections at most.
    pub pool: usize,
}

impl fmt::Debug for StateDb {
    // The password stays out of every log line and error.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateDb")
            .field("url", &self.url)
            .field("ssl", &self.ssl)
            .field("roots", &self.roots.len())
            .field("lease", &self.lease)
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}
