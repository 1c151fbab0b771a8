//! Certificates from ACME (`[acme]`), end to end against Debian's `pebble`
//! (a real ACME test server) and `pebble-challtestsrv` (its DNS: every
//! name resolves to 127.0.0.1), both on loopback, validation real
//! (`PEBBLE_VA_ALWAYS_VALID` unset): first issuance, a restart that reuses
//! the account and certificate, renewal, a failed challenge (trigd answers
//! HTTP-01 on another port than the CA's) that keeps the served
//! certificate. Also, without
//! pebble: a hostile directory (never answers, answers without end) and the
//! located errors of `[acme]`.
//!
//! The pebble test is `#[ignore]`d like the HAProxy one: `.ci/run` installs
//! pebble and runs it with `--include-ignored`.

use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, UdpSocket};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, SignatureScheme};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::util::*;

/// The test's domain (resolved by pebble-challtestsrv).
const DOMAIN: &str = "acme.test";

/// How long an order may take on a loaded machine.
const ISSUE: Duration = Duration::from_secs(90);

/// A free loopback TCP port (bound then released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A free loopback UDP port, for the DNS server.
fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .expect("a free UDP port")
}

/// A private CA (`ca.pem`) and pebble's HTTPS certificate for 127.0.0.1
/// it signed (`pebble.pem`, `pebble.key`).
fn pebble_tls(dir: &TestDir) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=Test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign",
    ]);
    openssl(dir, &ca);
    let mut req = vec!["req"];
    req.extend(ec);
    req.extend([
        "-keyout",
        "pebble.key",
        "-out",
        "pebble.csr",
        "-subj",
        "/CN=localhost",
    ]);
    openssl(dir, &req);
    dir.write("ext.cnf", "subjectAltName=DNS:localhost,IP:127.0.0.1\n");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "pebble.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "pebble.pem",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ],
    );
}

/// The binary `name` in /usr/bin; panics with install advice.
fn need(name: &str) -> String {
    let path = format!("/usr/bin/{name}");
    assert!(
        Path::new(&path).exists(),
        "{name} is not installed: apt-get install pebble \
         (or leave out --include-ignored to skip this test)"
    );
    path
}

/// pebble and its DNS server, killed when dropped.
struct Pebble {
    children: Vec<Child>,
    /// `https://127.0.0.1:<port>/dir`.
    directory: String,
    /// pebble's management API (`/roots/0`).
    management: String,
    /// pebble-challtestsrv's DNS port.
    dns: u16,
}

impl Drop for Pebble {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Pebble {
    /// Start both on free ports; pebble validates HTTP-01 on `http_port`.
    fn start(dir: &TestDir, http_port: u16) -> Pebble {
        pebble_tls(dir);
        let (dns, dns_mgmt) = (free_udp_port(), free_port());
        let (acme, mgmt, tls) = (free_port(), free_port(), free_port());
        let log = |name: &str| fs::File::create(dir.path(name)).expect("log file");
        let challtestsrv = Command::new(need("pebble-challtestsrv"))
            .args([
                "-http01",
                "",
                "-https01",
                "",
                "-tlsalpn01",
                "",
                "-defaultIPv6",
                "",
            ])
            .args(["-dns01", &format!("127.0.0.1:{dns}")])
            .args(["-management", &format!("127.0.0.1:{dns_mgmt}")])
            .stdout(log("challtestsrv.log"))
            .stderr(Stdio::null())
            .spawn()
            .expect("start pebble-challtestsrv");
        let config = serde_json::json!({ "pebble": {
            "listenAddress": format!("127.0.0.1:{acme}"),
            "managementListenAddress": format!("127.0.0.1:{mgmt}"),
            "certificate": dir.path_str("pebble.pem"),
            "privateKey": dir.path_str("pebble.key"),
            "httpPort": http_port,
            "tlsPort": tls,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": false,
        }});
        dir.write("pebble.json", &config.to_string());
        let mut p = Pebble {
            children: vec![challtestsrv],
            directory: format!("https://127.0.0.1:{acme}/dir"),
            management: format!("https://127.0.0.1:{mgmt}"),
            dns,
        };
        p.spawn_pebble(dir);
        p
    }

    /// Start pebble itself (its state in memory: a new one knows no
    /// account) and wait for its directory.
    fn spawn_pebble(&mut self, dir: &TestDir) {
        let pebble = Command::new(need("pebble"))
            .args(["-config", &dir.path_str("pebble.json")])
            .args(["-dnsserver", &format!("127.0.0.1:{}", self.dns)])
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            // Every order proves its names anew: a failed challenge fails.
            .env("PEBBLE_AUTHZREUSE", "0")
            .env_remove("PEBBLE_VA_ALWAYS_VALID")
            .stdout(fs::File::create(dir.path("pebble.log")).expect("log file"))
            .stderr(Stdio::null())
            .spawn()
            .expect("start pebble");
        self.children.push(pebble);
        // A bound for a pebble that never answers (it starts slowly
        // beside a full test run on a loaded machine).
        let up = wait_until(Duration::from_secs(60), || {
            self.get(dir, &self.directory).is_ok()
        });
        assert!(up, "pebble did not answer:\n{}", dir.read("pebble.log"));
    }

    /// Stop pebble and start a new one on the same ports: a CA that has
    /// forgotten every account.
    fn restart_pebble(&mut self, dir: &TestDir) {
        if let Some(mut old) = self.children.pop() {
            let _ = old.kill();
            let _ = old.wait();
        }
        self.spawn_pebble(dir);
    }

    /// GET `url` over HTTPS trusting the test CA.
    fn get(&self, dir: &TestDir, url: &str) -> Result<String, String> {
        let ca = fs::read(dir.path("ca.pem")).map_err(|e| e.to_string())?;
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(&ca) {
            roots
                .add(c.map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let agent = ureq::AgentBuilder::new()
            .tls_config(Arc::new(tls))
            .timeout(Duration::from_secs(5))
            .build();
        agent
            .get(url)
            .call()
            .map_err(|e| e.to_string())?
            .into_string()
            .map_err(|e| e.to_string())
    }
}

/// `config.toml` with `[acme]` for [`DOMAIN`] at `directory`, HTTP-01
/// answered on `http_port`, plus `extra` lines in the table.
fn acme_config(http_port: u16, directory: &str, extra: &str) -> String {
    format!(
        "[server]\nredirect_http = \"127.0.0.1:{http_port}\"\n\n[acme]\ndomains = [\"{DOMAIN}\"]\n\
         contact = [\"mailto:ops@example.org\"]\ndirectory = \"{directory}\"\nca_file = \"ca.pem\"\n\
         terms_accepted = true\n{extra}\n"
    )
}

/// Accepts any server certificate: to read `/healthz` while trigd serves
/// its temporary self-signed one. (What is served is checked apart, by
/// [`served_leaf`].)
#[derive(Debug)]
struct AnyCert(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// `GET path` over HTTPS from `t`, any certificate accepted: status, body.
fn https_get(t: &Trigd, path: &str) -> (u16, String) {
    let verifier = Arc::new(AnyCert(provider()));
    let tls = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    let agent = ureq::AgentBuilder::new()
        .tls_config(Arc::new(tls))
        .timeout(WAIT)
        .build();
    let answer = match agent.get(&format!("https://{}{path}", t.addr)).call() {
        Ok(r) | Err(ureq::Error::Status(_, r)) => r,
        Err(e) => t.fail(format!("GET {path} over HTTPS: {e}")),
    };
    let status = answer.status();
    (status, answer.into_string().unwrap_or_default())
}

/// `/healthz`'s `Acme` object.
fn acme_health(t: &Trigd) -> Value {
    let (_, body) = https_get(t, "/healthz");
    serde_json::from_str::<Value>(&body).expect("healthz JSON")["Acme"].clone()
}

/// Roots of `pem` (pebble's root).
fn roots(pem: &str) -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(pem.as_bytes()) {
        roots.add(c.expect("root PEM")).expect("usable root");
    }
    roots
}

/// The SHA-256 (hex) of the certificate `t` serves to a client asking for
/// [`DOMAIN`] that trusts only `root_pem`: `Err` when the handshake fails
/// (the certificate does not chain to it for the name).
fn served_leaf(t: &Trigd, root_pem: &str) -> Result<String, String> {
    let tls = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots(root_pem))
        .with_no_client_auth();
    let name = ServerName::try_from(DOMAIN).map_err(|e| e.to_string())?;
    let mut conn = ClientConnection::new(Arc::new(tls), name).map_err(|e| e.to_string())?;
    let mut tcp = std::net::TcpStream::connect(&t.addr).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(WAIT))
        .map_err(|e| e.to_string())?;
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp)
            .map_err(|e| format!("handshake: {e}"))?;
    }
    let leaf = conn
        .peer_certificates()
        .and_then(|c| c.first())
        .ok_or("no certificate")?;
    Ok(hex::encode(Sha256::digest(leaf)))
}

/// Poll `/healthz` until `cond` holds of its `Acme` object; that object.
#[track_caller]
fn wait_acme(t: &Trigd, what: &str, cond: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    let ok = wait_until(ISSUE, || {
        last = acme_health(t);
        cond(&last)
    });
    assert!(
        ok,
        "{what}: /healthz Acme is {last}\n--- stderr ---\n{}",
        fs::read_to_string(&t.stderr_log).unwrap_or_default()
    );
    last
}

/// The value of the metric line starting with `prefix`.
fn metric(t: &Trigd, prefix: &str) -> String {
    let (_, text) = https_get(t, "/metrics");
    let line = text.lines().find(|l| l.starts_with(prefix));
    let line = line.unwrap_or_else(|| panic!("no {prefix} in /metrics:\n{text}"));
    line.rsplit(' ').next().unwrap_or("").to_string()
}

/// Check that `certificate.pem` (key, then chain) chains to `root_pem` for
/// [`DOMAIN`].
fn assert_chains_to(cert_pem: &[u8], root_pem: &str) {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .expect("PEM certificates");
    assert!(
        chain.len() >= 2,
        "leaf and intermediate, got {}",
        chain.len()
    );
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
        Arc::new(roots(root_pem)),
        provider(),
    )
    .build()
    .expect("verifier");
    let name = ServerName::try_from(DOMAIN).expect("server name");
    verifier
        .verify_server_cert(&chain[0], &chain[1..], &name, &[], UnixTime::now())
        .expect("the certificate chains to pebble's root for the domain");
}

/// The mode bits of `path`.
fn mode(path: &Path) -> u32 {
    fs::metadata(path).expect("stat").permissions().mode() & 0o777
}

#[test]
#[ignore = "needs pebble: cargo test -- --include-ignored (as .ci/run does)"]
fn pebble_issues_renews_and_a_failed_challenge_keeps_the_certificate() {
    let dir = TestDir::new("acme_pebble");
    dir.mkdir("programs");
    let http_port = free_port();
    let mut pebble = Pebble::start(&dir, http_port);
    let directory = pebble.directory.clone();
    let config = |extra: &str| acme_config(http_port, &directory, extra);
    dir.write("config.toml", &config(""));
    let mut t = Trigd::start(&dir);
    let root = pebble
        .get(&dir, &format!("{}/roots/0", pebble.management))
        .expect("pebble's root");

    // First issuance: an account, a certificate chaining to pebble's root
    // served over HTTPS, every file private.
    let first = wait_acme(&t, "first issuance", |a| a["Fingerprint"].is_string());
    assert_eq!(first["Ok"], true, "{first}");
    assert_eq!(first["LastError"], Value::Null);
    let fp1 = first["Fingerprint"].as_str().unwrap_or("").to_string();
    let served = wait_until(WAIT, || {
        served_leaf(&t, &root).as_deref() == Ok(fp1.as_str())
    });
    assert!(
        served,
        "not served over HTTPS: {:?}",
        served_leaf(&t, &root)
    );
    let acme_dir = dir.path("state/acme");
    assert_eq!(mode(&acme_dir), 0o700, "acme/ is the owner's only");
    for f in ["account.json", "certificate.pem", "certificate.json"] {
        assert_eq!(mode(&acme_dir.join(f)), 0o600, "{f} is the owner's only");
    }
    let cert1 = dir.read_bytes("state/acme/certificate.pem");
    assert_chains_to(&cert1, &root);
    assert_eq!(
        metric(&t, "trigd_acme_certificates_total{outcome=\"issued\"}"),
        "1"
    );
    let account = dir.read_bytes("state/acme/account.json");
    let key: Value = serde_json::from_slice(&account).expect("account JSON");
    let secret = key["Credentials"]["key_pkcs8"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(secret.len() > 40, "the account key is kept: {key}");
    // The challenge route answers only pending tokens.
    assert_eq!(https_get(&t, "/.well-known/acme-challenge/nope").0, 404);

    // A restart reuses the account and the certificate: served from the
    // first handshake, no new order.
    t.restart();
    assert_eq!(
        served_leaf(&t, &root),
        Ok(fp1.clone()),
        "the kept certificate at once"
    );
    let again = wait_acme(&t, "restart", |a| a["Fingerprint"].is_string());
    assert_eq!(again["Fingerprint"], fp1.as_str());
    assert_eq!(
        metric(&t, "trigd_acme_certificates_total{outcome=\"issued\"}"),
        "0"
    );
    assert_eq!(dir.read_bytes("state/acme/account.json"), account);

    // Renewal: a certificate due (renew_before longer than its lifetime) is
    // replaced by a new one from the same account, served from then on.
    dir.write(
        "config.toml",
        &config("renew_before = \"3650d\"\nretry_min = \"1h\""),
    );
    t.restart();
    let renewed = wait_acme(&t, "renewal", |a| {
        a["Fingerprint"].is_string() && a["Fingerprint"] != fp1.as_str()
    });
    let fp2 = renewed["Fingerprint"].as_str().unwrap_or("").to_string();
    let served = wait_until(WAIT, || {
        served_leaf(&t, &root).as_deref() == Ok(fp2.as_str())
    });
    assert!(
        served,
        "the new certificate is not served: {:?}",
        served_leaf(&t, &root)
    );
    assert_eq!(
        metric(&t, "trigd_acme_certificates_total{outcome=\"issued\"}"),
        "1"
    );
    assert_eq!(dir.read_bytes("state/acme/account.json"), account);
    let cert2 = dir.read_bytes("state/acme/certificate.pem");
    assert_ne!(cert2, cert1);
    assert_chains_to(&cert2, &root);

    // A failed challenge: trigd answers HTTP-01 on another port than the
    // one the CA fetches from. The renewal fails with the CA's reason; the
    // certificate stays.
    let due = "renew_before = \"3650d\"\nretry_min = \"1h\"";
    dir.write(
        "config.toml",
        &acme_config(free_port(), &pebble.directory, due),
    );
    t.restart();
    // NextAttempt is set a moment after LastError: both waited for.
    let failed = wait_acme(&t, "failed challenge", |a| {
        a["LastError"].is_string() && a["NextAttempt"].is_string()
    });
    let why = failed["LastError"].as_str().unwrap_or("");
    assert!(why.starts_with("challenge failed: acme.test:"), "{why}");
    assert!(
        why.contains("urn:ietf:params:acme:error:"),
        "the CA's reason: {why}"
    );
    assert_eq!(failed["Ok"], false);
    assert_eq!(
        failed["Fingerprint"],
        fp2.as_str(),
        "the old certificate is still kept"
    );
    assert_eq!(served_leaf(&t, &root), Ok(fp2.clone()), "and served");
    assert!(failed["NextAttempt"].is_string(), "{failed}");
    assert_eq!(
        metric(&t, "trigd_acme_certificates_total{outcome=\"failed\"}"),
        "1"
    );
    assert_eq!(metric(&t, "trigd_acme_ok"), "0");
    assert_eq!(dir.read_bytes("state/acme/certificate.pem"), cert2);

    // The CA forgets the account (pebble keeps its accounts in memory):
    // the renewal registers a new account and goes on (it failed with
    // `accountDoesNotExist` at every attempt until the certificate
    // expired).
    pebble.restart_pebble(&dir);
    dir.write("config.toml", &config(due));
    t.restart();
    let anew = wait_acme(&t, "renewal with a new account", |a| {
        a["Fingerprint"].is_string() && a["Fingerprint"] != fp2.as_str() && a["Ok"] == true
    });
    assert_eq!(anew["LastError"], Value::Null, "{anew}");
    assert_ne!(
        dir.read_bytes("state/acme/account.json"),
        account,
        "a new account is kept"
    );
    let log = fs::read_to_string(&t.stderr_log).unwrap_or_default();
    assert!(
        log.contains("the CA no longer knows the kept account"),
        "the log says why"
    );

    // The account key was never logged.
    assert!(!log.contains(&secret), "the account key is in the log");
}

/// A directory server on loopback that accepts and then does `serve` with
/// each connection; its URL.
fn hostile_directory(serve: fn(std::net::TcpStream)) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            thread::spawn(move || serve(conn));
        }
    });
    format!("http://{addr}/dir")
}

/// Start trigd with `[acme]` at `directory` (no pebble) and the ACME
/// client's `timeout`, and wait for its first failure; the reason.
fn first_failure(name: &str, directory: &str, timeout: &str) -> String {
    let dir = TestDir::new(name);
    dir.mkdir("programs");
    let extra = format!("timeout = \"{timeout}\"\nretry_min = \"1h\"");
    let config = acme_config(free_port(), directory, &extra).replace("ca_file = \"ca.pem\"\n", "");
    dir.write("config.toml", &config);
    let t = Trigd::start(&dir);
    let failed = wait_acme(&t, name, |a| a["LastError"].is_string());
    assert_eq!(failed["Fingerprint"], Value::Null);
    assert_eq!(
        metric(&t, "trigd_acme_certificates_total{outcome=\"failed\"}"),
        "1"
    );
    // The server still answers everything else.
    assert_eq!(https_get(&t, "/livez").0, 200);
    failed["LastError"].as_str().unwrap_or("").to_string()
}

#[test]
fn a_directory_that_never_answers_times_out() {
    let url = hostile_directory(|mut conn| {
        let mut buf = [0u8; 1024];
        // Read the request and never answer (until the client gives up).
        while matches!(conn.read(&mut buf), Ok(n) if n > 0) {}
    });
    let why = first_failure("acme_silent_directory", &url, "1s");
    assert!(
        why.contains("timed out") || why.contains("Timeout"),
        "{why}"
    );
}

#[test]
fn a_directory_answering_without_end_is_cut_off() {
    let url = hostile_directory(|mut conn| {
        let mut buf = [0u8; 1024];
        let _ = conn.read(&mut buf);
        let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n[");
        let chunk = [b' '; 64 * 1024];
        // 64 MiB at most, far past the 1 MiB bound.
        for _ in 0..1024 {
            if conn.write_all(&chunk).is_err() {
                return;
            }
        }
    });
    // Not cut off by the timeout instead, however slow the machine.
    let why = first_failure("acme_endless_directory", &url, "30s");
    assert!(why.contains("larger than 1048576 bytes"), "{why}");
}

#[test]
fn acme_settings_are_checked_with_their_location() {
    let dir = TestDir::new("acme_config_errors");
    dir.mkdir("programs");
    dir.write(
        "config.toml",
        "[server]\n\n[acme]\ndomains = [\"*.example.org\", \"ok.example.org\", \"OK.example.org\"]\n\
         contact = [\"ops@example.org\"]\ndirectory = \"ftp://x\"\nchallenge = \"dns-01\"\n\
         renew_before = \"soon\"\n",
    );
    let out = trigd(&["check", "--config", &dir.path_str("config.toml")], None);
    out.code_is(1);
    for want in [
        "config.toml:4:12: acme.domains: \"*.example.org\" is not a DNS name",
        "config.toml:4:47: acme.domains: \"ok.example.org\" is listed twice",
        "config.toml:5:12: acme.contact: \"ops@example.org\" is not a contact",
        "config.toml:6:13: acme.directory: \"ftp://x\" is not an http(s) URL",
        "config.toml:7:13: acme.challenge: challenge \"dns-01\" is not supported",
        "config.toml:8:16: acme.renew_before: invalid duration \"soon\"",
        "config.toml:3:1: acme.terms_accepted: set terms_accepted = true",
        "config.toml:3:1: server.redirect_http: [acme] proves the domains over plain HTTP",
    ] {
        assert!(
            out.stderr.contains(want),
            "want {want:?} in:\n{}",
            out.stderr
        );
    }
}

/// docs/acme.md's first example, "HTTPS on a public host in five lines of
/// TOML", is a whole config that `trigd check` accepts, in five lines.
#[test]
fn the_manual_s_five_line_config_is_one() {
    let page = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/acme.md"))
        .expect("docs/acme.md");
    let section = page
        .split("## HTTPS on a public host in five lines of TOML\n")
        .nth(1)
        .expect("the five-line section");
    let toml = section
        .split("```toml\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .expect("its TOML block");
    let lines = toml.lines().filter(|l| !l.trim().is_empty()).count();
    assert!(lines <= 5, "{lines} lines:\n{toml}");
    let dir = TestDir::new("acme_five_lines");
    dir.mkdir("programs");
    dir.write("config.toml", toml);
    let out = trigd(&["check", "--config", &dir.path_str("config.toml")], None);
    out.code_is(0);
}
