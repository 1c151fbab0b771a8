//! Request signatures of third-party senders: HMAC-SHA1/256/512 of the raw
//! body in a header (GitHub, Gitea, Bitbucket), a shared token in a header
//! (GitLab), and the timestamped schemes of Stripe (`Stripe-Signature:
//! t=…,v1=…`) and Slack (`v0:<ts>:<body>` in `X-Slack-Signature`), which
//! refuse a replay outside a tolerance window, and Standard Webhooks
//! (`webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64>`
//! over `<id>.<timestamp>.<body>`, or the same under Svix's `svix-*`
//! names, several space-separated signatures during a key rotation).
//!
//! Owns: the schemes and their checks, [`Secret`] (which never prints).
//! Does not own: where the secret comes from (`config` resolves it at load)
//! or the HTTP answer (see [`SigError`]'s users).
//!
//! Every comparison is constant-time: HMACs with `subtle` (the MAC is
//! computed once per check, then compared with each of the at most
//! [`MAX_SIGNATURES`] signatures of a header), tokens by comparing their
//! sha256 digests with `subtle`, so neither the content nor the length of
//! the secret leaks through timing. No error message ever contains the
//! secret, the expected signature or the one sent.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha1::Sha1;
use sha2::{Digest, Sha256, Sha512};
use subtle::ConstantTimeEq;

/// A secret shared with a sender. Its `Debug` shows no content.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl Secret {
    /// Wrap the secret bytes.
    pub fn new(bytes: Vec<u8>) -> Secret {
        Secret(bytes)
    }

    /// Read a secret file: its content less one trailing newline (`\n` or
    /// `\r\n`), as `echo secret > file` writes it.
    ///
    /// # Errors
    /// The file cannot be read, or holds nothing.
    pub fn from_file(path: &Path) -> Result<Secret, String> {
        let mut b = crate::config::file::read_secret(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        if b.ends_with(b"\n") {
            b.pop();
            if b.ends_with(b"\r") {
                b.pop();
            }
        }
        if b.is_empty() {
            return Err(format!("{} is empty", path.display()));
        }
        Ok(Secret(b))
    }
}

impl Secret {
    /// The key of a Standard Webhooks secret (see [`whsec`]); `None` when
    /// the text is not one.
    pub fn standard_key(&self) -> Option<Secret> {
        let text = std::str::from_utf8(&self.0).ok()?;
        whsec(text.trim()).map(Secret)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// The HMAC hash function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algo {
    /// HMAC-SHA1 (GitHub's legacy `X-Hub-Signature`).
    Sha1,
    /// HMAC-SHA256.
    Sha256,
    /// HMAC-SHA512.
    Sha512,
}

impl Algo {
    /// The name in messages.
    fn name(self) -> &'static str {
        match self {
            Algo::Sha1 => "HMAC-SHA1",
            Algo::Sha256 => "HMAC-SHA256",
            Algo::Sha512 => "HMAC-SHA512",
        }
    }

    /// Length of the digest in bytes.
    fn len(self) -> usize {
        match self {
            Algo::Sha1 => 20,
            Algo::Sha256 => 32,
            Algo::Sha512 => 64,
        }
    }

    /// The HMAC of `parts` (concatenated) under `key`. Computed once per
    /// check however many signatures a header lists (see [`MAX_SIGNATURES`]).
    fn mac(self, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        fn run<M: Mac + hmac::digest::KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
            // HMAC takes a key of any length: `new_from_slice` cannot fail.
            let Ok(mut mac) = <M as hmac::digest::KeyInit>::new_from_slice(key) else {
                return Vec::new();
            };
            for p in parts {
                mac.update(p);
            }
            mac.finalize().into_bytes().to_vec()
        }
        #[cfg(test)]
        tests::MACS.with(|n| n.set(n.get() + 1));
        match self {
            Algo::Sha1 => run::<Hmac<Sha1>>(key, parts),
            Algo::Sha256 => run::<Hmac<Sha256>>(key, parts),
            Algo::Sha512 => run::<Hmac<Sha512>>(key, parts),
        }
    }

    /// Whether `sig` is the HMAC of `parts` (concatenated) under `key`.
    fn verify(self, key: &[u8], parts: &[&[u8]], sig: &[u8]) -> bool {
        same(&self.mac(key, parts), sig)
    }
}

/// Equal bytes, compared in constant time (the length is public: every
/// digest of one algorithm has the same).
fn same(mac: &[u8], sig: &[u8]) -> bool {
    !mac.is_empty() && mac.len() == sig.len() && bool::from(mac.ct_eq(sig))
}

/// Most signatures one header may list (comma-separated entries, Stripe's
/// `t=` included). GitHub sends one, a rotating sender two; more is refused
/// as `signature_malformed` before any HMAC is computed.
pub const MAX_SIGNATURES: usize = 16;

/// How the signature bytes are written in the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// Lower- or upper-case hex digits.
    Hex,
    /// Standard base64 with padding.
    Base64,
}

/// A verification scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// HMAC of the raw body, in `header`, after `prefix`, in `encoding`;
    /// several comma-separated signatures are allowed (any may match).
    Hmac(Algo),
    /// The header's value (after `prefix`) equals the secret.
    Token,
    /// Stripe: `t=<unix>,v1=<hex hmac-sha256 of "<t>.<body>">[,v1=…]`.
    Stripe,
    /// Slack: `v0=<hex hmac-sha256 of "v0:<ts>:<body>">` with the time in
    /// `X-Slack-Request-Timestamp`.
    Slack,
    /// Scalr: `X-Signature: <hex hmac-sha1 of body + Date header>`, the
    /// `Date` (`Mon 02 Jan 2006 15:04:05 UTC`) within `tolerance` of now
    /// (adnanh/webhook's `scalr-signature` rule).
    Scalr,
    /// Standard Webhooks: `webhook-signature: v1,<base64 hmac-sha256 of
    /// "<id>.<timestamp>.<body>">[ v1,…]` with `webhook-id` and
    /// `webhook-timestamp`, or the same three under `svix-*` names.
    StandardWebhooks,
}

/// The two header families of Standard Webhooks, tried in this order:
/// the standard names and Svix's.
pub const STANDARD_FAMILIES: [&str; 2] = ["webhook-", "svix-"];

/// Longest `webhook-id` accepted, in bytes (Svix's are 30; the id is also
/// an idempotency key).
pub const MAX_MESSAGE_ID: usize = 256;

/// The key of a Standard Webhooks secret: base64 after an optional
/// `whsec_`, padded or not (as the official libraries read it); `None`
/// when it is not base64 or empty.
pub fn whsec(text: &str) -> Option<Vec<u8>> {
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    const LENIENT: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    let b64 = text.strip_prefix("whsec_").unwrap_or(text);
    LENIENT.decode(b64).ok().filter(|k| !k.is_empty())
}

/// The header Slack sends its timestamp in (lower case).
pub const SLACK_TIMESTAMP: &str = "x-slack-request-timestamp";

/// One configured check of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verifier {
    /// The scheme.
    pub scheme: Scheme,
    /// Header holding the signature or token, lower case.
    pub header: String,
    /// Text before the signature (`sha256=`); stripped when present.
    pub prefix: String,
    /// Encoding of an HMAC signature.
    pub encoding: Encoding,
    /// The shared secret.
    pub secret: Secret,
    /// Largest accepted distance between the sender's timestamp and now
    /// (timestamped schemes only).
    pub tolerance: Duration,
    /// The file the secret was read from (`None`: an environment variable).
    pub secret_file: Option<PathBuf>,
}

/// Why a request's signature was refused. Messages name the header, never
/// a secret or a signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SigError {
    /// The header (or Slack's timestamp header) is absent or empty.
    Missing {
        /// The header, lower case.
        header: String,
    },
    /// The header is present but cannot be a signature of this scheme
    /// (not hex/base64, wrong length, no `t=` …).
    Malformed {
        /// The header, lower case.
        header: String,
        /// What is wrong, without the value.
        why: String,
    },
    /// Well-formed, but no signature (or token) matches.
    Mismatch {
        /// The header, lower case.
        header: String,
        /// It held a token (`scheme = "token"`), not a signature of the
        /// body.
        token: bool,
    },
    /// Correctly signed, but the timestamp is outside the tolerance window
    /// (a replay, or a badly set clock).
    Expired {
        /// The header, lower case.
        header: String,
        /// The window in seconds.
        tolerance: u64,
    },
}

impl SigError {
    /// A sentence for the caller and the log.
    pub fn message(&self) -> String {
        match self {
            SigError::Missing { header } => {
                format!("This endpoint requires a signed request: header '{header}' is missing.")
            }
            SigError::Malformed { header, why } => {
                format!("The signature in header '{header}' is malformed: {why}.")
            }
            SigError::Mismatch {
                header,
                token: false,
            } => format!(
                "The signature in header '{header}' does not match the request body and the shared secret."
            ),
            SigError::Mismatch {
                header,
                token: true,
            } => format!("The token in header '{header}' is not the shared secret."),
            SigError::Expired { header, tolerance } => format!(
                "The request signed in header '{header}' is older or newer than the tolerance of {tolerance} seconds; replays are refused (check the sender's clock)."
            ),
        }
    }
}

/// The first value of header `name` (lower case) among `headers`.
pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

impl Verifier {
    /// Whether the secret file now holds another secret than the one in
    /// use (or cannot be read): the config must be loaded again.
    pub fn secret_file_changed(&self) -> bool {
        let key = |s: Secret| match self.scheme {
            Scheme::StandardWebhooks => s.standard_key(),
            _ => Some(s),
        };
        self.secret_file.as_ref().is_some_and(|p| {
            Secret::from_file(p)
                .ok()
                .and_then(key)
                .is_none_or(|s| s != self.secret)
        })
    }

    /// Check `body` and `headers` (names lower case) at unix time `now`.
    ///
    /// # Errors
    /// A [`SigError`] saying what is wrong (never with secret material).
    pub fn verify(
        &self,
        headers: &[(String, String)],
        body: &[u8],
        now: u64,
    ) -> Result<(), SigError> {
        if self.scheme == Scheme::StandardWebhooks {
            return self.standard(headers, body, now);
        }
        let value = header(headers, &self.header)
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| SigError::Missing {
                header: self.header.clone(),
            })?;
        match self.scheme {
            Scheme::Hmac(algo) => self.hmac(algo, value, body),
            Scheme::Token => self.token(value),
            Scheme::Stripe => self.stripe(value, body, now),
            Scheme::Slack => self.slack(headers, value, body, now),
            Scheme::Scalr => self.scalr(headers, value, body, now),
            Scheme::StandardWebhooks => self.standard(headers, body, now),
        }
    }

    /// Check a signature `value` read from anywhere in the request (an
    /// adnanh/webhook `payload-hmac-*` rule names its source) against
    /// `body`; the HMAC schemes only (others never match).
    ///
    /// # Errors
    /// As [`Verifier::verify`].
    pub fn verify_value(&self, value: &str, body: &[u8]) -> Result<(), SigError> {
        match self.scheme {
            Scheme::Hmac(algo) => self.hmac(algo, value, body),
            _ => Err(self.mismatch()),
        }
    }

    fn malformed(&self, why: impl Into<String>) -> SigError {
        SigError::Malformed {
            header: self.header.clone(),
            why: why.into(),
        }
    }

    fn mismatch(&self) -> SigError {
        SigError::Mismatch {
            header: self.header.clone(),
            token: matches!(self.scheme, Scheme::Token),
        }
    }

    /// The signatures in `value`, as adnanh/webhook reads them: one value
    /// loses `prefix` when it has it; of comma-separated values, those with
    /// the prefix count, without it.
    ///
    /// # Errors
    /// `Malformed` for more than [`MAX_SIGNATURES`] entries.
    fn candidates<'a>(&self, value: &'a str) -> Result<Vec<&'a str>, SigError> {
        let parts = self.entries(value)?;
        if parts.len() == 1 {
            let one = parts[0];
            return Ok(vec![one.strip_prefix(self.prefix.as_str()).unwrap_or(one)]);
        }
        Ok(parts
            .iter()
            .filter_map(|p| p.strip_prefix(self.prefix.as_str()))
            .collect())
    }

    /// The comma-separated entries of a header, trimmed.
    ///
    /// # Errors
    /// `Malformed` for more than [`MAX_SIGNATURES`] entries (the rest of
    /// the header is not even split).
    fn entries<'a>(&self, value: &'a str) -> Result<Vec<&'a str>, SigError> {
        let parts: Vec<&str> = value
            .split(',')
            .map(str::trim)
            .take(MAX_SIGNATURES + 1)
            .collect();
        if parts.len() > MAX_SIGNATURES {
            return Err(self.malformed(format!(
                "more than {MAX_SIGNATURES} comma-separated entries"
            )));
        }
        Ok(parts)
    }

    /// Decode one signature and check its length.
    fn decode(&self, algo: Algo, sig: &str) -> Result<Vec<u8>, SigError> {
        let bytes = match self.encoding {
            Encoding::Hex => hex::decode(sig).map_err(|_| self.malformed("not hexadecimal"))?,
            Encoding::Base64 => base64::engine::general_purpose::STANDARD
                .decode(sig)
                .map_err(|_| self.malformed("not base64"))?,
        };
        if bytes.len() != algo.len() {
            return Err(self.malformed(format!(
                "wrong length: {} bytes where {} has {}",
                bytes.len(),
                algo.name(),
                algo.len()
            )));
        }
        Ok(bytes)
    }

    /// Any of the signatures must match; a malformed one is reported only
    /// when none is well formed.
    fn any_matches(&self, algo: Algo, sigs: &[&str], parts: &[&[u8]]) -> Result<(), SigError> {
        if sigs.iter().all(|s| s.is_empty()) {
            let why = if self.prefix.is_empty() {
                "empty".to_string()
            } else {
                format!("no signature after the prefix '{}'", self.prefix)
            };
            return Err(self.malformed(why));
        }
        let mut first_error = None;
        let mut any_well_formed = false;
        let mut mac = None;
        let mut matched = false;
        for sig in sigs {
            match self.decode(algo, sig) {
                Ok(bytes) => {
                    any_well_formed = true;
                    let mac = mac.get_or_insert_with(|| algo.mac(&self.secret.0, parts));
                    // Every entry is compared (no early exit), so the time
                    // does not say which one matched.
                    matched |= same(mac, &bytes);
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            _ if matched => Ok(()),
            Some(e) if !any_well_formed => Err(e),
            _ => Err(self.mismatch()),
        }
    }

    fn hmac(&self, algo: Algo, value: &str, body: &[u8]) -> Result<(), SigError> {
        self.any_matches(algo, &self.candidates(value)?, &[body])
    }

    fn token(&self, value: &str) -> Result<(), SigError> {
        let Some(token) = value.strip_prefix(self.prefix.as_str()) else {
            return Err(self.mismatch());
        };
        // Digests have one length, so the comparison time says nothing
        // about the secret's length or content.
        let sent = Sha256::digest(token.as_bytes());
        let want = Sha256::digest(&self.secret.0);
        if bool::from(sent.ct_eq(&want)) {
            Ok(())
        } else {
            Err(self.mismatch())
        }
    }

    fn stripe(&self, value: &str, body: &[u8], now: u64) -> Result<(), SigError> {
        let mut t = None;
        let mut sigs = Vec::new();
        for item in self.entries(value)? {
            match item.split_once('=') {
                Some(("t", v)) => t = Some(v),
                Some(("v1", v)) => sigs.push(v),
                _ => {}
            }
        }
        let t = t.ok_or_else(|| self.malformed("no timestamp t=<unix seconds>"))?;
        let ts: u64 = t
            .parse()
            .map_err(|_| self.malformed("the timestamp t= is not a number"))?;
        if sigs.is_empty() {
            return Err(self.malformed("no v1= signature"));
        }
        self.any_matches(Algo::Sha256, &sigs, &[t.as_bytes(), b".", body])?;
        self.fresh(ts, now)
    }

    fn slack(
        &self,
        headers: &[(String, String)],
        value: &str,
        body: &[u8],
        now: u64,
    ) -> Result<(), SigError> {
        let t = header(headers, SLACK_TIMESTAMP)
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| SigError::Missing {
                header: SLACK_TIMESTAMP.to_string(),
            })?;
        let ts: u64 = t.parse().map_err(|_| SigError::Malformed {
            header: SLACK_TIMESTAMP.to_string(),
            why: "not a number of seconds".into(),
        })?;
        let sigs = self.candidates(value)?;
        self.any_matches(Algo::Sha256, &sigs, &[b"v0:", t.as_bytes(), b":", body])?;
        self.fresh(ts, now)
    }

    fn scalr(
        &self,
        headers: &[(String, String)],
        value: &str,
        body: &[u8],
        now: u64,
    ) -> Result<(), SigError> {
        let date = header(headers, "date").ok_or_else(|| SigError::Missing {
            header: "date".to_string(),
        })?;
        let sig = hex::decode(value).map_err(|_| self.mismatch())?;
        if !Algo::Sha1.verify(&self.secret.0, &[body, date.as_bytes()], &sig) {
            return Err(self.mismatch());
        }
        let ts = scalr_date(date).ok_or_else(|| SigError::Malformed {
            header: "date".to_string(),
            why: "not a date like 'Fri 08 Sep 2017 11:24:32 UTC'".into(),
        })?;
        self.fresh(ts, now)
    }

    /// Standard Webhooks, under the first family of header names
    /// ([`STANDARD_FAMILIES`]) whose signature header is present.
    fn standard(
        &self,
        headers: &[(String, String)],
        body: &[u8],
        now: u64,
    ) -> Result<(), SigError> {
        let present = |name: &str| {
            header(headers, name)
                .map(str::trim)
                .filter(|v| !v.is_empty())
        };
        let found = STANDARD_FAMILIES
            .iter()
            .find_map(|f| present(&format!("{f}signature")).map(|v| (*f, v)));
        let Some((family, value)) = found else {
            return Err(SigError::Missing {
                header: "webhook-signature".into(),
            });
        };
        let named = |n: &str| format!("{family}{n}");
        let missing = |n: &str| SigError::Missing { header: named(n) };
        let bad = |n: &str, why: &str| SigError::Malformed {
            header: named(n),
            why: why.into(),
        };
        let id = present(&named("id")).ok_or_else(|| missing("id"))?;
        if id.len() > MAX_MESSAGE_ID {
            return Err(bad("id", &format!("longer than {MAX_MESSAGE_ID} bytes")));
        }
        let t = present(&named("timestamp")).ok_or_else(|| missing("timestamp"))?;
        let ts: u64 = t
            .parse()
            .map_err(|_| bad("timestamp", "not a number of seconds"))?;
        let me = Verifier {
            header: named("signature"),
            encoding: Encoding::Base64,
            ..self.clone()
        };
        let entries: Vec<&str> = value
            .split(' ')
            .filter(|e| !e.is_empty())
            .take(MAX_SIGNATURES + 1)
            .collect();
        if entries.len() > MAX_SIGNATURES {
            let why = format!("more than {MAX_SIGNATURES} space-separated signatures");
            return Err(me.malformed(why));
        }
        let sigs: Vec<&str> = entries
            .iter()
            .filter_map(|e| e.strip_prefix("v1,"))
            .collect();
        if sigs.is_empty() {
            return Err(me.malformed("no v1,<base64> signature"));
        }
        let parts: [&[u8]; 5] = [id.as_bytes(), b".", t.as_bytes(), b".", body];
        me.any_matches(Algo::Sha256, &sigs, &parts)?;
        me.fresh(ts, now)
    }

    fn fresh(&self, ts: u64, now: u64) -> Result<(), SigError> {
        if ts.abs_diff(now) > self.tolerance.as_secs() {
            return Err(SigError::Expired {
                header: self.header.clone(),
                tolerance: self.tolerance.as_secs(),
            });
        }
        Ok(())
    }
}

/// Unix seconds of a Scalr `Date` header, `Fri 08 Sep 2017 11:24:32 UTC`
/// (the zone is taken as UTC, as Go does for a zone it does not know).
pub fn scalr_date(s: &str) -> Option<u64> {
    let f: Vec<&str> = s.split_whitespace().collect();
    let [_, day, month, year, time, _] = f.as_slice() else {
        return None;
    };
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let m = months.iter().position(|x| x == month)? as i64 + 1;
    let (d, y): (i64, i64) = (day.parse().ok()?, year.parse().ok()?);
    let hms: Vec<i64> = time.split(':').filter_map(|p| p.parse().ok()).collect();
    let [h, mi, sec] = hms.as_slice() else {
        return None;
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let (yy, mm) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = yy.div_euclid(400);
    let yoe = yy - era * 400;
    let doy = (153 * mm + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 86_400 + h * 3600 + mi * 60 + sec).ok()
}

#[cfg(test)]
#[path = "signature_tests.rs"]
mod tests;
