//! Certificates without a human: the `[acme]` table's background thread
//! obtains a certificate for `domains` from an ACME directory (RFC 8555,
//! HTTP-01) and renews it, keeps it in the state dir (`state::acme`), and
//! hands each new one to the HTTPS certificate store ([`Acme::on_installed`]).
//!
//! The protocol (JWS, nonces, orders, the CSR) is instant-acme's; trigd
//! has no async runtime, so its futures run on this thread under
//! `pollster`, over ureq ([`client`]). [`Challenges`] holds the pending
//! HTTP-01 answers that `GET /.well-known/acme-challenge/<token>` serves.
//!
//! When: at start, a kept certificate for the same domains and directory
//! is served as is; none (or another one) is ordered at once. A certificate
//! is renewed at two thirds of its lifetime (issuance to `notAfter`), or
//! `renew_before` its end. A failed attempt is retried after `retry_min`,
//! doubling up to `retry_max`, with up to a quarter of random jitter; the
//! served certificate stays until a new one is fully written and loaded.
//! Every outcome is in the log, in `/healthz` (`Acme`) and in `/metrics`.

mod client;
mod issue;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::config::acme::Acme as Settings;
use crate::http::tls;
use crate::state::acme::AcmeFiles;

pub use issue::IssueError;

/// Pending HTTP-01 challenges: token → key authorization.
#[derive(Debug, Default)]
pub struct Challenges(Mutex<HashMap<String, String>>);

impl Challenges {
    /// The key authorization to answer for `token`, if it is pending.
    pub fn get(&self, token: &str) -> Option<String> {
        self.lock().get(token).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn insert(&self, token: String, key_authorization: String) {
        self.lock().insert(token, key_authorization);
    }

    fn remove(&self, tokens: &[String]) {
        let mut map = self.lock();
        for t in tokens {
            map.remove(t);
        }
    }
}

/// What `certificate.json` says of the kept certificate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Meta {
    domains: Vec<String>,
    directory: String,
    /// When it was issued (Unix seconds): the start of its lifetime.
    issued_at: i64,
    not_after: i64,
    /// SHA-256 of the leaf certificate (DER), hex.
    fingerprint: String,
}

/// The served certificate and how the last attempt went.
#[derive(Debug, Clone, Default)]
struct Status {
    current: Option<Meta>,
    last_error: Option<String>,
    next_attempt: Option<i64>,
}

/// What is called once a new certificate is written to
/// [`Acme::certificate_path`]: it loads it into the HTTPS store, or says
/// why not.
pub type Installer = Box<dyn Fn() -> Result<(), String> + Send + Sync>;

/// The ACME certificate manager: settings, files, challenges, status.
pub struct Acme {
    settings: Settings,
    files: AcmeFiles,
    challenges: Arc<Challenges>,
    status: Mutex<Status>,
    installer: OnceLock<Installer>,
    issued: AtomicU64,
    failed: AtomicU64,
}

impl std::fmt::Debug for Acme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acme")
            .field("domains", &self.settings.domains)
            .finish_non_exhaustive()
    }
}

/// Now, in Unix seconds.
fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

impl Acme {
    /// A manager for `settings`, keeping its files in `files`. Nothing runs
    /// until [`Acme::start`].
    pub fn new(settings: Settings, files: AcmeFiles) -> Arc<Acme> {
        Arc::new(Acme {
            settings,
            files,
            challenges: Arc::default(),
            status: Mutex::default(),
            installer: OnceLock::new(),
            issued: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        })
    }

    /// The pending HTTP-01 challenges (for the plain-HTTP listeners).
    pub fn challenges(&self) -> Arc<Challenges> {
        Arc::clone(&self.challenges)
    }

    /// Where the certificate (key and full chain, PEM) is kept.
    pub fn certificate_path(&self) -> PathBuf {
        self.files.certificate_path()
    }

    /// The HTTPS store to start with: serving the kept certificate, or
    /// until there is one a temporary self-signed certificate for the
    /// domains (browsers refuse it; `/healthz` says why). It reloads from
    /// [`Acme::certificate_path`].
    ///
    /// # Errors
    /// The temporary certificate cannot be made.
    pub fn initial_certs(&self) -> Result<Arc<tls::Certs>, String> {
        let path = self.files.certificate_path();
        if let Ok(pair) = tls::load_pair(&path, &path) {
            return Ok(tls::Certs::new(pair, &path, &path));
        }
        let made = rcgen::generate_simple_self_signed(self.settings.domains.clone())
            .map_err(|e| format!("acme: cannot make a temporary certificate: {e}"))?;
        let (cert, key) = (made.cert.pem(), made.signing_key.serialize_pem());
        let pair = tls::pair_from_pem(cert.as_bytes(), key.as_bytes(), &path, &path)
            .map_err(|e| format!("acme: the temporary certificate does not load: {e}"))?;
        Ok(tls::Certs::new(pair, &path, &path))
    }

    /// Have `installer` load every new certificate (set once, before
    /// [`Acme::start`]).
    pub fn on_installed(&self, installer: Installer) {
        let _ = self.installer.set(installer);
    }

    /// Start the renewal thread.
    ///
    /// # Errors
    /// The thread cannot be spawned.
    pub fn start(self: &Arc<Self>) -> std::io::Result<()> {
        let me = Arc::clone(self);
        thread::Builder::new()
            .name("acme".into())
            .spawn(move || me.run())
            .map(|_| ())
    }

    fn status(&self) -> std::sync::MutexGuard<'_, Status> {
        self.status.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Forever: make sure a current certificate is served, then sleep until
    /// it is due (or until the next retry).
    fn run(&self) {
        let mut failures = 0u32;
        loop {
            let wait = match self.step() {
                Ok(due) => {
                    failures = 0;
                    self.status().last_error = None;
                    due
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    self.failed.fetch_add(1, Ordering::Relaxed);
                    let wait = backoff(&self.settings, failures);
                    log::error!(
                        "acme: no certificate for {} ({e}); the served one stays, next attempt in {}s",
                        self.settings.domains.join(", "),
                        wait.as_secs()
                    );
                    self.status().last_error = Some(e.to_string());
                    wait
                }
            };
            let next = now().saturating_add(i64::try_from(wait.as_secs()).unwrap_or(i64::MAX));
            self.status().next_attempt = Some(next);
            thread::sleep(wait);
        }
    }

    /// Serve the kept certificate, or a new one when it is due; how long
    /// until the next look.
    fn step(&self) -> Result<Duration, IssueError> {
        let kept = self.kept();
        if let Some(meta) = &kept {
            if self.status().current.as_ref() != Some(meta) {
                self.install(meta)?;
            }
            let due = self.due(meta);
            if due > now() {
                return Ok(secs_until(due));
            }
            log::info!(
                "acme: the certificate for {} is due for renewal",
                meta.domains.join(", ")
            );
        }
        let meta = self.obtain()?;
        self.issued.fetch_add(1, Ordering::Relaxed);
        self.install(&meta)?;
        // A `renew_before` longer than the lifetime would renew at once
        // again: no sooner than `retry_max` then.
        Ok(secs_until(self.due(&meta)).max(self.settings.retry_max))
    }

    /// The kept certificate when it is for these domains and directory and
    /// still valid.
    fn kept(&self) -> Option<Meta> {
        let (pem, meta) = match self.files.certificate() {
            Ok(Some(kept)) => kept,
            Ok(None) => return None,
            Err(e) => {
                log::warn!("acme: the kept certificate cannot be read ({e}); ordering a new one");
                return None;
            }
        };
        let meta: Meta = serde_json::from_slice(&meta).ok()?;
        let same = meta.domains == self.settings.domains
            && meta.directory == self.settings.directory
            && issue::leaf_fingerprint(&pem).as_deref() == Some(meta.fingerprint.as_str());
        (same && meta.not_after > now()).then_some(meta)
    }

    /// When `meta`'s certificate is due for renewal.
    fn due(&self, meta: &Meta) -> i64 {
        match self.settings.renew_before {
            Some(before) => meta
                .not_after
                .saturating_sub(i64::try_from(before.as_secs()).unwrap_or(i64::MAX)),
            None => meta.issued_at + (meta.not_after - meta.issued_at) * 2 / 3,
        }
    }

    /// Order a certificate and keep it.
    fn obtain(&self) -> Result<Meta, IssueError> {
        let issued = issue::issue(&self.settings, &self.files, &self.challenges)?;
        let meta = Meta {
            domains: self.settings.domains.clone(),
            directory: self.settings.directory.clone(),
            issued_at: now(),
            not_after: issued.not_after,
            fingerprint: issued.fingerprint,
        };
        let json = serde_json::to_vec_pretty(&meta).map_err(|e| IssueError::Keep(e.to_string()))?;
        self.files
            .save_certificate(issued.pem.as_bytes(), &json)
            .map_err(|e| IssueError::Keep(e.to_string()))?;
        log::info!(
            "acme: new certificate for {} (expires {}, sha256 {})",
            meta.domains.join(", "),
            rfc3339(meta.not_after),
            meta.fingerprint
        );
        Ok(meta)
    }

    /// Load the kept certificate into the HTTPS store.
    fn install(&self, meta: &Meta) -> Result<(), IssueError> {
        if let Some(installer) = self.installer.get() {
            installer().map_err(IssueError::Install)?;
        }
        self.status().current = Some(meta.clone());
        Ok(())
    }

    /// `/healthz`'s `Acme` object.
    pub fn health(&self) -> serde_json::Value {
        let s = self.status().clone();
        let cur = s.current.as_ref();
        serde_json::json!({
            "Ok": s.last_error.is_none() && cur.is_some(),
            "Domains": self.settings.domains,
            "LastError": s.last_error,
            "NotAfter": cur.map(|m| rfc3339(m.not_after)),
            "IssuedAt": cur.map(|m| rfc3339(m.issued_at)),
            "Fingerprint": cur.map(|m| m.fingerprint.clone()),
            "NextAttempt": s.next_attempt.map(rfc3339),
        })
    }

    /// The `trigd_acme_*` lines of `/metrics`.
    pub fn render_metrics(&self, out: &mut String) {
        use std::fmt::Write as _;
        let s = self.status().clone();
        let ok = s.last_error.is_none() && s.current.is_some();
        let _ = writeln!(
            out,
            "# HELP trigd_acme_certificates_total ACME orders since start, by outcome (issued, failed).\n\
             # TYPE trigd_acme_certificates_total counter\n\
             trigd_acme_certificates_total{{outcome=\"issued\"}} {}\n\
             trigd_acme_certificates_total{{outcome=\"failed\"}} {}\n\
             # HELP trigd_acme_ok 1 when a certificate from ACME is served and the last attempt succeeded.\n\
             # TYPE trigd_acme_ok gauge\n\
             trigd_acme_ok {}",
            self.issued.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
            u8::from(ok),
        );
        if let Some(m) = &s.current {
            let _ = writeln!(
                out,
                "# HELP trigd_acme_certificate_expiry_seconds Seconds until the ACME certificate expires (notAfter); negative once expired.\n\
                 # TYPE trigd_acme_certificate_expiry_seconds gauge\n\
                 trigd_acme_certificate_expiry_seconds {}",
                m.not_after - now()
            );
        }
    }
}

/// The wait after `failures` failed attempts in a row: `retry_min`
/// doubled each time up to `retry_max`, plus up to a quarter of jitter (so
/// that many hosts do not retry together).
fn backoff(s: &Settings, failures: u32) -> Duration {
    let doubled = s
        .retry_min
        .saturating_mul(1u32 << failures.saturating_sub(1).min(20));
    let base = doubled.min(s.retry_max);
    let jitter = rand::random_range(0..=base.as_millis() as u64 / 4);
    base + Duration::from_millis(jitter)
}

/// The time from now until `t` (Unix seconds); zero when past.
fn secs_until(t: i64) -> Duration {
    Duration::from_secs(u64::try_from(t - now()).unwrap_or(0))
}

/// `t` (Unix seconds) as RFC 3339.
fn rfc3339(t: i64) -> String {
    jiff::Timestamp::from_second(t).map_or_else(|_| t.to_string(), |t| t.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(min: u64, max: u64) -> Settings {
        Settings {
            domains: vec!["a.example".into()],
            contact: Vec::new(),
            directory: "https://acme.example/dir".into(),
            extra_roots: Vec::new(),
            renew_before: None,
            timeout: Duration::from_secs(30),
            retry_min: Duration::from_secs(min),
            retry_max: Duration::from_secs(max),
        }
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_with_a_quarter_of_jitter_at_most() {
        let s = settings(60, 3600);
        for (failures, base) in [
            (1, 60),
            (2, 120),
            (3, 240),
            (6, 1920),
            (7, 3600),
            (500, 3600),
        ] {
            let wait = backoff(&s, failures).as_millis() as u64;
            let base = base * 1000;
            assert!(
                (base..=base + base / 4).contains(&wait),
                "{failures} failures: {wait} ms, want {base} ms + up to a quarter"
            );
        }
    }

    #[test]
    fn renewal_is_due_at_two_thirds_of_the_lifetime_or_renew_before_the_end() {
        let meta = Meta {
            domains: vec!["a.example".into()],
            directory: "https://acme.example/dir".into(),
            issued_at: 1_000,
            not_after: 1_000 + 90 * 86_400,
            fingerprint: String::new(),
        };
        let files = AcmeFiles::new(std::path::Path::new("/nonexistent"));
        let acme = Acme::new(settings(60, 3600), files.clone());
        assert_eq!(acme.due(&meta), 1_000 + 60 * 86_400);
        let mut s = settings(60, 3600);
        s.renew_before = Some(Duration::from_secs(7 * 86_400));
        let acme = Acme::new(s, files);
        assert_eq!(acme.due(&meta), 1_000 + 83 * 86_400);
    }
}
