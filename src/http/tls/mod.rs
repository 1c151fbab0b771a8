//! HTTPS: the certificate store the TLS listener serves from, and what
//! feeds it.
//!
//! [`Certs`] holds the served certificate chain and key
//! (`rustls::sign::CertifiedKey`) behind a lock and answers every handshake
//! with the current one ([`ResolvesServerCert`]), so a new pair is served
//! from the next handshake on while open connections keep theirs. A pair is
//! loaded by [`load_pair`], which checks that the key matches the
//! certificate; [`Certs::reload`] re-reads the configured files and keeps
//! the old pair when the new one does not load, recording why (log,
//! `/healthz` `Tls.LastError`, `trigd_tls_reload_failures_total`). The
//! files are re-read when they change ([`watch`]) and on SIGHUP. A second
//! producer (ACME) loads its own files with [`load_pair`] and swaps them in
//! with [`Certs::install`].
//!
//! The handshake itself runs in the patched tiny_http (`vendor/tiny_http`,
//! `tls.rs`) on the connection's thread under `tls_handshake_timeout`;
//! [`server_config`] gives it TLS 1.2 and 1.3 only, rustls's default
//! cipher suites of the ring provider, ALPN `http/1.1`.

mod not_after;
pub mod redirect;
pub mod watch;

use std::fmt;
use std::fs::OpenOptions;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use sha2::{Digest, Sha256};

pub use not_after::not_after;

/// A certificate or key file larger than this is refused unread: a PEM
/// chain of a few certificates is a few KiB.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// `trigd check` warns when the certificate expires in fewer days.
pub const WARN_DAYS: i64 = 14;

/// Why a certificate and key pair cannot be served.
#[derive(Debug)]
pub enum TlsError {
    /// A file cannot be read (missing, unreadable, too large).
    Read { path: PathBuf, source: io::Error },
    /// The certificate file holds no PEM `CERTIFICATE`, or a bad one.
    NoCertificate { path: PathBuf, why: String },
    /// The key file holds no PEM private key, or one rustls cannot use.
    Key { path: PathBuf, why: String },
    /// The key is not the key of the certificate (the first of the chain).
    Mismatch { cert: PathBuf, key: PathBuf },
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsError::Read { path, source } => {
                write!(f, "cannot read {}: {source}", path.display())
            }
            TlsError::NoCertificate { path, why } => {
                write!(
                    f,
                    "{}: no PEM certificate could be read: {why}",
                    path.display()
                )
            }
            TlsError::Key { path, why } => {
                write!(f, "{}: no usable PEM private key: {why}", path.display())
            }
            TlsError::Mismatch { cert, key } => write!(
                f,
                "the key in {} does not belong to the certificate in {}",
                key.display(),
                cert.display()
            ),
        }
    }
}

impl std::error::Error for TlsError {}

/// A loaded certificate chain with its key, ready to serve.
pub struct Pair {
    key: Arc<CertifiedKey>,
    /// `notAfter` of the first certificate, in Unix seconds.
    not_after: Option<i64>,
    /// SHA-256 of both files' bytes: a reload of the same files is no change.
    digest: [u8; 32],
}

impl Pair {
    /// `notAfter` of the served certificate, in Unix seconds.
    pub fn not_after(&self) -> Option<i64> {
        self.not_after
    }
}

/// Read a PEM certificate chain (leaf first) and a PEM private key (PKCS#8,
/// PKCS#1 or SEC1) and check that the key belongs to the leaf.
///
/// # Errors
/// A file is missing or unreadable, holds no usable certificate or key, or
/// the key does not match.
pub fn load_pair(cert: &Path, key: &Path) -> Result<Pair, TlsError> {
    let cert_pem = read_small(cert)?;
    let key_pem = read_small(key)?;
    pair_from_pem(&cert_pem, &key_pem, cert, key)
}

/// [`load_pair`] of PEM text already read (`cert` and `key` name it in
/// errors): ACME's temporary self-signed pair is made in memory.
///
/// # Errors
/// No usable certificate or key, or the key does not match.
pub fn pair_from_pem(
    cert_pem: &[u8],
    key_pem: &[u8],
    cert: &Path,
    key: &Path,
) -> Result<Pair, TlsError> {
    let no_cert = |why: String| TlsError::NoCertificate {
        path: cert.to_path_buf(),
        why,
    };
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| no_cert(pem_reason(&e, CERT_BLOCK)))?;
    let leaf = chain.first().ok_or_else(|| {
        no_cert(if cert_pem.trim_ascii().is_empty() {
            "the file is empty".into()
        } else {
            format!("no {CERT_BLOCK} block in the file")
        })
    })?;
    let not_after = not_after(leaf);
    let key_err = |why: String| TlsError::Key {
        path: key.to_path_buf(),
        why,
    };
    let der =
        PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| key_err(pem_reason(&e, KEY_BLOCKS)))?;
    let signing = provider()
        .key_provider
        .load_private_key(der)
        .map_err(|e| key_err(e.to_string()))?;
    let certified = CertifiedKey::new(chain, signing);
    if certified.keys_match().is_err() {
        return Err(TlsError::Mismatch {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
        });
    }
    let digest = Sha256::new()
        .chain_update(cert_pem)
        .chain_update(key_pem)
        .finalize()
        .into();
    Ok(Pair {
        key: Arc::new(certified),
        not_after,
        digest,
    })
}

/// The PEM label of a certificate.
const CERT_BLOCK: &str = "\"-----BEGIN CERTIFICATE-----\"";

/// The PEM labels of the private keys rustls takes.
const KEY_BLOCKS: &str = "\"-----BEGIN PRIVATE KEY-----\" (or RSA PRIVATE KEY, or EC PRIVATE KEY)";

/// Why PEM text did not parse, in words an operator reads in the log and
/// `/healthz`: rustls-pki-types prints a missing END line as a list of
/// byte values. `wanted` names the blocks looked for. A base64 error's
/// detail is left out: it would quote the key file's bytes.
fn pem_reason(e: &pem::Error, wanted: &str) -> String {
    match e {
        pem::Error::MissingSectionEnd { end_marker } => format!(
            "the file ends inside a PEM block, before its \"-----END {}-----\" line (cut short, or still being written)",
            String::from_utf8_lossy(end_marker)
        ),
        pem::Error::IllegalSectionStart { .. } => "a malformed \"-----BEGIN\" line".into(),
        pem::Error::Base64Decode(_) => "a PEM block whose body is not base64".into(),
        pem::Error::NoItemsFound => format!("no {wanted} block in the file"),
        other => other.to_string(),
    }
}

/// The bytes of `path`, refused past [`MAX_FILE_BYTES`] and when it is not
/// a regular file.
fn read_small(path: &Path) -> Result<Vec<u8>, TlsError> {
    let err = |source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    };
    // O_NONBLOCK: opening a FIFO put at the path would otherwise wait for
    // a writer for good, and hold the thread that reloads (the watcher's,
    // or SIGHUP's, which then reloads nothing more).
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(err)?;
    if !file.metadata().map_err(err)?.is_file() {
        let odd = io::Error::new(io::ErrorKind::InvalidInput, "not a regular file");
        return Err(err(odd));
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(err)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        let too_big = io::Error::new(io::ErrorKind::InvalidData, "larger than 1 MiB");
        return Err(err(too_big));
    }
    Ok(bytes)
}

/// rustls's ring provider (the one trigd links for its callbacks too).
fn provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// The store the TLS listener serves certificates from.
pub struct Certs {
    current: RwLock<Arc<Pair>>,
    /// The files [`Certs::reload`] reads.
    files: Mutex<(PathBuf, PathBuf)>,
    last_error: Mutex<Option<String>>,
    reloads: AtomicU64,
    failures: AtomicU64,
}

impl fmt::Debug for Certs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Certs")
            .field("files", &self.files())
            .finish()
    }
}

/// What `/healthz` and `/metrics` show of the store.
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    /// Whether the last load of the files succeeded (the served pair is the
    /// one on disk).
    pub ok: bool,
    /// Why the last load failed.
    pub last_error: Option<String>,
    /// `notAfter` of the served certificate, in Unix seconds.
    pub not_after: Option<i64>,
    /// New pairs swapped in since start.
    pub reloads: u64,
    /// Loads that failed since start (the old pair was kept).
    pub failures: u64,
}

impl Certs {
    /// A store serving `pair`, reloaded from `cert` and `key`.
    pub fn new(pair: Pair, cert: &Path, key: &Path) -> Arc<Certs> {
        Arc::new(Certs {
            current: RwLock::new(Arc::new(pair)),
            files: Mutex::new((cert.to_path_buf(), key.to_path_buf())),
            last_error: Mutex::new(None),
            reloads: AtomicU64::new(0),
            failures: AtomicU64::new(0),
        })
    }

    /// The certificate and key files reloads read.
    pub fn files(&self) -> (PathBuf, PathBuf) {
        self.files.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Serve `pair` from the next handshake on; clears the last error.
    pub fn install(&self, pair: Pair) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(pair);
        self.reloads.fetch_add(1, Ordering::Relaxed);
        self.set_error(None);
    }

    /// Re-read the files: a new pair is installed (`Ok(true)`), the same
    /// bytes change nothing (`Ok(false)`), and a pair that does not load
    /// keeps the served one, its reason logged and kept for `/healthz`.
    ///
    /// # Errors
    /// The new pair does not load.
    pub fn reload(&self) -> Result<bool, TlsError> {
        let (cert, key) = self.files();
        match load_pair(&cert, &key) {
            Ok(pair) if pair.digest == self.current().digest => {
                self.set_error(None);
                Ok(false)
            }
            Ok(pair) => {
                let days = pair.not_after.map(days_left);
                self.install(pair);
                log::info!(
                    "TLS certificate reloaded from {} (expires in {} days)",
                    cert.display(),
                    days.map_or("?".into(), |d| format!("{d:.1}"))
                );
                Ok(true)
            }
            Err(e) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                log::error!("TLS certificate not reloaded, the old one is still served: {e}");
                self.set_error(Some(e.to_string()));
                Err(e)
            }
        }
    }

    /// The served pair.
    fn current(&self) -> Arc<Pair> {
        Arc::clone(&self.current.read().unwrap_or_else(|e| e.into_inner()))
    }

    fn set_error(&self, error: Option<String>) {
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = error;
    }

    /// The store's state for `/healthz` and `/metrics`.
    pub fn status(&self) -> Status {
        let last_error = self
            .last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        Status {
            ok: last_error.is_none(),
            last_error,
            not_after: self.current().not_after,
            reloads: self.reloads.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
        }
    }
}

impl ResolvesServerCert for Certs {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.current().key))
    }
}

/// Days from now until `not_after` (Unix seconds); negative once expired.
pub fn days_left(not_after: i64) -> f64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs();
    (not_after as f64 - now as f64) / 86_400.0
}

/// The rustls configuration of the TLS listener: TLS 1.2 and 1.3 with the
/// ring provider's default (safe) cipher suites and groups, no client
/// certificates, certificates from `certs`, ALPN `http/1.1` only.
///
/// # Errors
/// Never with the ring provider; the message says why otherwise.
pub fn server_config(certs: &Arc<Certs>) -> Result<Arc<rustls::ServerConfig>, String> {
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(provider()))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| format!("TLS setup: {e}"))?
        .with_no_client_auth()
        .with_cert_resolver(Arc::clone(certs) as Arc<dyn ResolvesServerCert>);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The certificate store of `server`'s `tls_cert` and `tls_key`, loaded,
/// with its file watcher started; `None` without HTTPS.
///
/// # Errors
/// The pair does not load (trigd does not start without a certificate).
pub fn start_certs(
    server: &crate::config::Server,
) -> Result<Option<Arc<Certs>>, crate::cli::error::Error> {
    let Some(files) = &server.tls.files else {
        return Ok(None);
    };
    let pair = load_pair(&files.cert, &files.key)
        .map_err(|e| crate::cli::error::Error::Other(format!("HTTPS: {e}")))?;
    let certs = Certs::new(pair, &files.cert, &files.key);
    watch::start(Arc::clone(&certs));
    Ok(Some(certs))
}

/// `/healthz`'s `Tls` object: `Ok` (the last load of the files
/// succeeded), `LastError` (why not), `NotAfter` (RFC 3339) and
/// `ExpiresInDays` of the served certificate.
pub fn health(s: &Status) -> serde_json::Value {
    let not_after = s
        .not_after
        .and_then(|t| jiff::Timestamp::from_second(t).ok())
        .map(|t| t.to_string());
    serde_json::json!({
        "Ok": s.ok,
        "LastError": s.last_error,
        "NotAfter": not_after,
        "ExpiresInDays": s.not_after.map(|t| (days_left(t) * 100.0).floor() / 100.0),
    })
}

/// The `trigd_tls_*` lines of `/metrics`.
pub fn render_metrics(s: &Status, out: &mut String) {
    use std::fmt::Write as _;
    let mut line = |name: &str, kind: &str, help: &str, value: String| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
        );
    };
    line(
        "trigd_tls_certificate_ok",
        "gauge",
        "1 when the last load of tls_cert and tls_key succeeded; 0 when it failed and the previous certificate is still served.",
        u8::from(s.ok).to_string(),
    );
    if let Some(t) = s.not_after {
        line(
            "trigd_tls_certificate_expiry_days",
            "gauge",
            "Days until the served certificate expires (notAfter); negative once expired.",
            format!("{:.3}", days_left(t)),
        );
        line(
            "trigd_tls_certificate_not_after_seconds",
            "gauge",
            "notAfter of the served certificate, in seconds since the Unix epoch.",
            t.to_string(),
        );
    }
    line(
        "trigd_tls_reloads_total",
        "counter",
        "New certificates swapped in since start.",
        s.reloads.to_string(),
    );
    line(
        "trigd_tls_reload_failures_total",
        "counter",
        "Certificate reloads that failed (the file did not load or the key did not match); the previous certificate was kept.",
        s.failures.to_string(),
    );
}

/// `trigd check`'s look at `tls_cert` and `tls_key`: a warning when the
/// certificate expires within [`WARN_DAYS`] days (or has expired).
///
/// # Errors
/// The pair does not load: the message says which file and why.
pub fn check(server: &crate::config::Server) -> Result<Vec<String>, String> {
    let Some(files) = &server.tls.files else {
        return Ok(Vec::new());
    };
    let pair = load_pair(&files.cert, &files.key).map_err(|e| format!("HTTPS: {e}"))?;
    let Some(t) = pair.not_after() else {
        return Ok(vec![format!(
            "{}: the certificate's expiry date cannot be read",
            files.cert.display()
        )]);
    };
    let days = days_left(t);
    Ok(match days {
        d if d < 0.0 => vec![format!(
            "{}: the certificate has expired",
            files.cert.display()
        )],
        d if d < WARN_DAYS as f64 => vec![format!(
            "{}: the certificate expires in {d:.1} days (renew it: clients refuse it once expired)",
            files.cert.display()
        )],
        _ => Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::pair_from_pem;

    /// The reason `pair_from_pem` gives for `cert` and `key`.
    fn reason(cert: &[u8], key: &[u8]) -> String {
        match pair_from_pem(cert, key, Path::new("c.pem"), Path::new("k.pem")) {
            Ok(_) => "loaded".into(),
            Err(e) => e.to_string(),
        }
    }

    /// A broken file is named with a reason in words: no byte lists, no
    /// quoted key material.
    #[test]
    fn a_broken_pem_file_is_explained_in_words() {
        let made = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let cert = made.cert.pem();
        let key = made.signing_key.serialize_pem();
        assert_eq!(reason(cert.as_bytes(), key.as_bytes()), "loaded");
        let half = &cert.as_bytes()[..cert.len() / 2];
        assert_eq!(
            reason(half, key.as_bytes()),
            "c.pem: no PEM certificate could be read: the file ends inside a PEM block, \
             before its \"-----END CERTIFICATE-----\" line (cut short, or still being written)"
        );
        assert_eq!(
            reason(key.as_bytes(), key.as_bytes()),
            "c.pem: no PEM certificate could be read: no \"-----BEGIN CERTIFICATE-----\" block in the file"
        );
        assert_eq!(
            reason(b"\n", key.as_bytes()),
            "c.pem: no PEM certificate could be read: the file is empty"
        );
        let bad64 = "-----BEGIN CERTIFICATE-----\nZm9v!!!\n-----END CERTIFICATE-----\n";
        assert_eq!(
            reason(bad64.as_bytes(), key.as_bytes()),
            "c.pem: no PEM certificate could be read: a PEM block whose body is not base64"
        );
        assert_eq!(
            reason(cert.as_bytes(), cert.as_bytes()),
            "k.pem: no usable PEM private key: no \"-----BEGIN PRIVATE KEY-----\" \
             (or RSA PRIVATE KEY, or EC PRIVATE KEY) block in the file"
        );
        let half = &key.as_bytes()[..key.len() / 2];
        let why = reason(cert.as_bytes(), half);
        assert!(
            why.starts_with("k.pem: no usable PEM private key: the file ends inside")
                && why.contains("-----END PRIVATE KEY-----"),
            "{why}"
        );
    }
}
