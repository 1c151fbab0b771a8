//! HTTPS from `tls_cert` and `tls_key` (docs/https.md): the real binary
//! with certificates made by the `openssl` command under a private CA,
//! spoken to with rustls, curl and `openssl s_client`.

use std::io::{BufReader, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, StreamOwned};

use crate::api::OK;
use crate::util::cli::trigd;
use crate::util::*;

/// A private CA in `dir`: `ca.pem`, `ca.key`.
pub(crate) fn make_ca(dir: &TestDir) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "30",
            "-subj",
            "/CN=Test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign",
        ],
    );
}

/// A certificate for `localhost` signed by the CA, valid `days`:
/// `<name>.pem` and `<name>.key`.
pub(crate) fn make_leaf(dir: &TestDir, name: &str, days: u32) {
    let (key, csr, pem) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.pem"),
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            "/CN=localhost",
        ],
    );
    dir.write(
        "leaf.ext",
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            &days.to_string(),
            "-extfile",
            "leaf.ext",
        ],
    );
}

/// A test dir with the CA, leaves `one` and `two` (valid 60 days), the
/// program `OK` and `server` as `[server]`.
fn setup_tls(name: &str, server: &str) -> TestDir {
    let dir = setup(name, server, &[("ok.toml", OK)]);
    make_ca(&dir);
    make_leaf(&dir, "one", 60);
    make_leaf(&dir, "two", 60);
    dir
}

/// `[server]` lines serving `cert` and `key` (relative to the config).
fn tls_server(cert: &str, key: &str) -> String {
    format!("tls_cert = \"{cert}\"\ntls_key = \"{key}\"\n")
}

/// The DER of the first certificate in `path`.
fn leaf_der(path: &Path) -> Vec<u8> {
    CertificateDer::pem_file_iter(path)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .to_vec()
}

/// A rustls client trusting only the test CA, offering ALPN `http/1.1`.
fn client_config(dir: &TestDir) -> Arc<ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(dir.path("ca.pem")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(cfg)
}

/// One HTTPS connection (keep-alive).
struct Https {
    stream: BufReader<StreamOwned<ClientConnection, TcpStream>>,
}

impl Https {
    /// Connect to `addr` and complete the handshake.
    fn connect(addr: &str, cfg: &Arc<ClientConfig>) -> Result<Https, String> {
        let tcp = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
        tcp.set_read_timeout(Some(WAIT)).unwrap();
        tcp.set_write_timeout(Some(WAIT)).unwrap();
        let name = ServerName::try_from("localhost").unwrap();
        let conn = ClientConnection::new(Arc::clone(cfg), name).map_err(|e| e.to_string())?;
        let mut s = StreamOwned::new(conn, tcp);
        while s.conn.is_handshaking() {
            s.conn
                .complete_io(&mut s.sock)
                .map_err(|e| format!("handshake: {e}"))?;
        }
        Ok(Https {
            stream: BufReader::new(s),
        })
    }

    /// The certificate the server presented.
    fn leaf(&self) -> Vec<u8> {
        let conn = &self.stream.get_ref().conn;
        conn.peer_certificates().unwrap()[0].to_vec()
    }

    /// The ALPN protocol agreed on.
    fn alpn(&self) -> Option<Vec<u8>> {
        self.stream
            .get_ref()
            .conn
            .alpn_protocol()
            .map(<[u8]>::to_vec)
    }

    /// `METHOD path` on this connection; its reply.
    fn request(&mut self, method: &str, path: &str) -> Result<Reply, String> {
        let req =
            format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n");
        let s = self.stream.get_mut();
        s.write_all(req.as_bytes())
            .map_err(|e| format!("send: {e}"))?;
        s.flush().map_err(|e| format!("send: {e}"))?;
        read_reply(&mut self.stream)
    }

    fn get(&mut self, path: &str) -> Result<Reply, String> {
        self.request("GET", path)
    }
}

/// `GET path` on a new HTTPS connection; panics with the server log when
/// it fails.
#[track_caller]
fn https_get(t: &Trigd, cfg: &Arc<ClientConfig>, path: &str) -> Reply {
    Https::connect(&t.addr, cfg)
        .and_then(|mut c| c.get(path))
        .unwrap_or_else(|e| t.fail(format!("GET {path} over HTTPS: {e}")))
}

/// The certificate a new connection gets.
fn served_leaf(t: &Trigd, cfg: &Arc<ClientConfig>) -> Vec<u8> {
    Https::connect(&t.addr, cfg)
        .map(|c| c.leaf())
        .unwrap_or_else(|e| t.fail(format!("handshake: {e}")))
}

/// The value of the metric line starting with `name ` in `/metrics`.
fn metric(t: &Trigd, cfg: &Arc<ClientConfig>, name: &str) -> f64 {
    let text = https_get(t, cfg, "/metrics").text();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| t.fail(format!("no {name} in /metrics:\n{text}")))
}

/// Write `text` to `rel.tmp` and rename it over `rel` (how most tools
/// replace a file).
fn rename_over(dir: &TestDir, rel: &str, bytes: &[u8]) {
    let tmp = dir.path(&format!("{rel}.tmp"));
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, dir.path(rel)).unwrap();
}

/// Point the symlink `link` at `target` by renaming a new symlink over it,
/// as certbot does.
fn relink(dir: &TestDir, link: &str, target: &str) {
    let tmp = dir.path(&format!("{link}.new"));
    std::os::unix::fs::symlink(target, &tmp).unwrap();
    std::fs::rename(&tmp, dir.path(link)).unwrap();
}

/// `openssl s_client` to `addr` with `args`; whether the handshake
/// completed, and its output.
fn s_client(addr: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new("openssl")
        .arg("s_client")
        .arg("-connect")
        .arg(addr)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run openssl s_client");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let done = text.contains("Cipher is ") && !text.contains("Cipher is (NONE)");
    (done, text)
}

#[test]
fn https_serves_healthz_and_the_api_with_tls_1_2_and_1_3_only() {
    let dir = setup_tls("tls-basic", &tls_server("one.pem", "one.key"));
    let t = Trigd::start(&dir);
    let cfg = client_config(&dir);
    let mut c = Https::connect(&t.addr, &cfg).unwrap_or_else(|e| t.fail(e));
    t.check_eq(c.alpn(), Some(b"http/1.1".to_vec()), "ALPN");
    let h = c.get("/healthz").unwrap_or_else(|e| t.fail(e)).ok();
    t.check(h["Tls"]["Ok"] == true, format!("healthz Tls: {h}"));
    // The seed's run endpoint, key in the URL, over a second request of
    // the same connection.
    let run = c
        .request("POST", &format!("/api?api_key={KEY}&program_id=1"))
        .unwrap_or_else(|e| t.fail(e));
    t.check(
        run.status == 200 && run.text().contains("ok"),
        format!("POST /api: {run:?}"),
    );
    // curl with the CA file.
    let port = t.addr.rsplit(':').next().unwrap();
    let out = Command::new("curl")
        .args(["-sS", "--cacert", &dir.path_str("ca.pem"), "--resolve"])
        .arg(format!("localhost:{port}:127.0.0.1"))
        .arg(format!("https://localhost:{port}/healthz"))
        .output()
        .expect("run curl");
    let body = String::from_utf8_lossy(&out.stdout);
    t.check(
        out.status.success() && body.contains("\"Status\":\"ok\""),
        format!("curl: {out:?}"),
    );
    // Old protocols are refused by the server (the client is told to
    // allow them: SECLEVEL=0); 1.2 and 1.3 are served.
    let old = ["DEFAULT@SECLEVEL=0"];
    for (flag, want) in [
        ("-tls1", false),
        ("-tls1_1", false),
        ("-tls1_2", true),
        ("-tls1_3", true),
    ] {
        let (done, text) = s_client(&t.addr, &["-cipher", old[0], flag]);
        t.check(
            done == want,
            format!("openssl s_client {flag}: handshake {done}, want {want}:\n{text}"),
        );
    }
    let (_, text) = s_client(&t.addr, &["-alpn", "h2,http/1.1"]);
    t.check(
        text.contains("ALPN protocol: http/1.1"),
        format!("ALPN with s_client:\n{text}"),
    );
}

#[test]
fn plain_http_gets_a_clear_answer_and_garbage_is_closed_at_once() {
    // A long handshake timeout: closing "at once" is told apart from
    // closing at the timeout.
    let server = format!(
        "{}tls_handshake_timeout = \"60s\"\n",
        tls_server("one.pem", "one.key")
    );
    let dir = setup_tls("tls-plain", &server);
    let t = Trigd::start(&dir);
    let started = Instant::now();
    let r = send_raw(&t.addr, b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n");
    r.err(400, "https_required");
    for garbage in [
        &b"\x00\x01\x02 not TLS\r\n\r\n"[..],
        b"\x80",
        b"\x16\x03\x01\x00\x05hello",
    ] {
        let mut s = connect(&t.addr);
        s.write_all(garbage).unwrap();
        let mut got = Vec::new();
        match s.read_to_end(&mut got) {
            // Closed; at most a TLS alert record (type 21) came first.
            Ok(_) => t.check(
                got.is_empty() || got[0] == 21,
                format!("{garbage:?} got {got:?}"),
            ),
            Err(e) => t.check(
                !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
                format!("{garbage:?}: the connection hangs: {e}"),
            ),
        }
    }
    t.check(
        started.elapsed() < Duration::from_secs(30),
        format!(
            "answers took {:?}: held until the handshake timeout",
            started.elapsed()
        ),
    );
    // The server still serves.
    https_get(&t, &client_config(&dir), "/healthz").ok();
}

#[test]
fn certbot_renewal_through_symlinks_is_served_while_open_connections_go_on() {
    let dir = setup_tls("tls-certbot", "");
    for d in ["archive/site", "live/site"] {
        std::fs::create_dir_all(dir.path(d)).unwrap();
    }
    let copy = |from: &str, to: &str| std::fs::copy(dir.path(from), dir.path(to)).unwrap();
    copy("one.pem", "archive/site/fullchain1.pem");
    copy("one.key", "archive/site/privkey1.pem");
    relink(
        &dir,
        "live/site/fullchain.pem",
        "../../archive/site/fullchain1.pem",
    );
    relink(
        &dir,
        "live/site/privkey.pem",
        "../../archive/site/privkey1.pem",
    );
    let server = tls_server("live/site/fullchain.pem", "live/site/privkey.pem");
    dir.write("config.toml", &config(&server));
    let t = Trigd::start(&dir);
    let cfg = client_config(&dir);
    let mut open = Https::connect(&t.addr, &cfg).unwrap_or_else(|e| t.fail(e));
    t.check(
        open.leaf() == leaf_der(&dir.path("one.pem")),
        "first certificate served",
    );
    open.get("/healthz").unwrap_or_else(|e| t.fail(e)).ok();
    // certbot renew: new files in archive/, then the live/ symlinks moved.
    copy("two.pem", "archive/site/fullchain2.pem");
    copy("two.key", "archive/site/privkey2.pem");
    relink(
        &dir,
        "live/site/fullchain.pem",
        "../../archive/site/fullchain2.pem",
    );
    relink(
        &dir,
        "live/site/privkey.pem",
        "../../archive/site/privkey2.pem",
    );
    let two = leaf_der(&dir.path("two.pem"));
    t.wait_for(WAIT, "the renewed certificate served", || {
        served_leaf(&t, &cfg) == two
    });
    // The connection opened before goes on with its own session.
    let h = open
        .get("/healthz")
        .unwrap_or_else(|e| t.fail(format!("open connection: {e}")));
    t.check(
        h.status == 200,
        format!("open connection after the renewal: {h:?}"),
    );
    // Both symlinks move within the watcher's quiet time: one reload. (A
    // reader scheduled between the two would see a mismatched pair once
    // and keep the old one until the second: never a wrong pair served.)
    // Counted and the error cleared a moment after the new pair is
    // served: polled.
    t.wait_for(WAIT, "the reload counted", || {
        metric(&t, &cfg, "trigd_tls_reloads_total") >= 1.0
    });
    t.wait_for(WAIT, "certificate_ok 1", || {
        metric(&t, &cfg, "trigd_tls_certificate_ok") == 1.0
    });
}

#[test]
fn a_bad_new_pair_keeps_the_old_certificate_and_says_why() {
    let dir = setup_tls("tls-bad-pair", &tls_server("cert.pem", "key.pem"));
    std::fs::copy(dir.path("one.pem"), dir.path("cert.pem")).unwrap();
    std::fs::copy(dir.path("one.key"), dir.path("key.pem")).unwrap();
    let t = Trigd::start(&dir);
    let cfg = client_config(&dir);
    let one = leaf_der(&dir.path("one.pem"));
    // A key that is not the certificate's.
    rename_over(&dir, "key.pem", &dir.read_bytes("two.key"));
    t.wait_for(WAIT, "the mismatch reported", || {
        https_get(&t, &cfg, "/healthz").json()["Tls"]["Ok"] == false
    });
    let h = https_get(&t, &cfg, "/healthz").ok();
    let why = h["Tls"]["LastError"].as_str().unwrap_or("");
    t.check(
        why.contains("does not belong") && why.contains("key.pem"),
        format!("healthz: {h}"),
    );
    t.check_eq(
        metric(&t, &cfg, "trigd_tls_certificate_ok"),
        0.0,
        "certificate_ok",
    );
    t.check(
        metric(&t, &cfg, "trigd_tls_reload_failures_total") >= 1.0,
        "failures counted",
    );
    t.check(
        served_leaf(&t, &cfg) == one,
        "the old certificate is still served",
    );
    // Not PEM at all.
    rename_over(&dir, "cert.pem", b"not a certificate\n");
    t.wait_for(WAIT, "the bad file reported", || {
        let h = https_get(&t, &cfg, "/healthz").json();
        h["Tls"]["LastError"]
            .as_str()
            .is_some_and(|e| e.contains("no PEM certificate"))
    });
    t.check(
        served_leaf(&t, &cfg) == one,
        "the old certificate is still served",
    );
    // The matching certificate renamed over: served, the error gone.
    rename_over(&dir, "cert.pem", &dir.read_bytes("two.pem"));
    let two = leaf_der(&dir.path("two.pem"));
    t.wait_for(WAIT, "the new pair served", || served_leaf(&t, &cfg) == two);
    let h = https_get(&t, &cfg, "/healthz").ok();
    t.check(
        h["Tls"]["Ok"] == true && h["Tls"]["LastError"].is_null(),
        format!("healthz: {h}"),
    );
    t.check_eq(
        metric(&t, &cfg, "trigd_tls_certificate_ok"),
        1.0,
        "certificate_ok",
    );
}

#[test]
fn a_kubernetes_secret_swapped_by_its_data_symlink_is_served_without_a_signal() {
    // A secret volume: `tls.crt -> ..data/tls.crt`, `..data -> ..v1`; an
    // update writes `..v2` and renames a new `..data` over the old one
    // (the old directory is left here: only the swap tells).
    let dir = setup_tls("tls-k8s", &tls_server("secret/tls.crt", "secret/tls.key"));
    for (d, leaf) in [("secret/..v1", "one"), ("secret/..v2", "two")] {
        dir.mkdir(d);
        for (from, to) in [("pem", "tls.crt"), ("key", "tls.key")] {
            std::fs::copy(
                dir.path(&format!("{leaf}.{from}")),
                dir.path(&format!("{d}/{to}")),
            )
            .unwrap();
        }
    }
    relink(&dir, "secret/..data", "..v1");
    relink(&dir, "secret/tls.crt", "..data/tls.crt");
    relink(&dir, "secret/tls.key", "..data/tls.key");
    let t = Trigd::start(&dir);
    let cfg = client_config(&dir);
    t.check(
        served_leaf(&t, &cfg) == leaf_der(&dir.path("one.pem")),
        "first pair",
    );
    relink(&dir, "secret/..data", "..v2");
    let two = leaf_der(&dir.path("two.pem"));
    t.wait_for(WAIT, "the new pair served after the swap", || {
        served_leaf(&t, &cfg) == two
    });
}

#[test]
fn sighup_reloads_a_directory_swap() {
    // `certs` is a symlink to a directory, swapped as a whole: the watcher
    // sees it too (the test above), and SIGHUP re-reads whatever it saw.
    let dir = setup_tls("tls-sighup", &tls_server("certs/cert.pem", "certs/key.pem"));
    for (d, leaf) in [("a", "one"), ("b", "two")] {
        dir.mkdir(d);
        std::fs::copy(
            dir.path(&format!("{leaf}.pem")),
            dir.path(&format!("{d}/cert.pem")),
        )
        .unwrap();
        std::fs::copy(
            dir.path(&format!("{leaf}.key")),
            dir.path(&format!("{d}/key.pem")),
        )
        .unwrap();
    }
    relink(&dir, "certs", "a");
    let t = Trigd::start(&dir);
    let cfg = client_config(&dir);
    t.check(
        served_leaf(&t, &cfg) == leaf_der(&dir.path("one.pem")),
        "first pair",
    );
    relink(&dir, "certs", "b");
    // SAFETY: kill(2) on the child's pid.
    unsafe { libc::kill(t.pid() as i32, libc::SIGHUP) };
    let two = leaf_der(&dir.path("two.pem"));
    t.wait_for(WAIT, "the new pair served after SIGHUP", || {
        served_leaf(&t, &cfg) == two
    });
}

#[test]
fn expiry_is_in_metrics_and_healthz_and_check_warns_under_14_days() {
    let dir = setup_tls("tls-expiry", &tls_server("soon.pem", "soon.key"));
    make_leaf(&dir, "soon", 5);
    let t = Trigd::start(&dir);
    let cfg = client_config(&dir);
    let days = metric(&t, &cfg, "trigd_tls_certificate_expiry_days");
    t.check((4.9..=5.01).contains(&days), format!("expiry days {days}"));
    let h = https_get(&t, &cfg, "/healthz").ok();
    let not_after = h["Tls"]["NotAfter"].as_str().unwrap_or("");
    t.check(
        not_after.ends_with('Z') && h["Tls"]["ExpiresInDays"].as_f64().is_some(),
        format!("{h}"),
    );
    let path = dir.path_str("config.toml");
    let out = trigd(&["check", "--config", &path], None);
    out.code_is(0);
    out.check(
        out.stderr
            .contains("soon.pem: the certificate expires in 5.0 days"),
        "warning",
    );
    // 60 days: no warning.
    dir.write("config.toml", &config(&tls_server("one.pem", "one.key")));
    let out = trigd(&["check", "--config", &path], None);
    out.code_is(0);
    out.check(!out.stderr.contains("expires"), "no warning at 60 days");
    // Missing and mismatched files are errors naming them.
    dir.write(
        "config.toml",
        &config(&tls_server("one.pem", "missing.key")),
    );
    let out = trigd(&["check", "--config", &path], None);
    out.check(
        out.code != Some(0) && out.stderr.contains("missing.key"),
        "missing key",
    );
    dir.write("config.toml", &config(&tls_server("one.pem", "two.key")));
    let out = trigd(&["check", "--config", &path], None);
    out.check(
        out.code != Some(0) && out.stderr.contains("does not belong"),
        "mismatch",
    );
}

#[test]
fn idle_and_stalled_handshakes_do_not_delay_others_and_are_closed_at_the_timeout() {
    // Under a handshake on the accept thread, the first silent client
    // would hold every later one for the whole timeout.
    let timeout = Duration::from_secs(12);
    let server = format!(
        "{}tls_handshake_timeout = \"12s\"\n",
        tls_server("one.pem", "one.key")
    );
    let dir = setup_tls("tls-slow", &server);
    let t = Trigd::start(&dir);
    let cfg = client_config(&dir);
    let opened = Instant::now();
    let mut hostile: Vec<TcpStream> = (0..200).map(|_| connect(&t.addr)).collect();
    // A ClientHello's record header and the start of its body, then nothing.
    for _ in 0..20 {
        let mut s = connect(&t.addr);
        s.write_all(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
            .unwrap();
        hostile.push(s);
    }
    // A ClientHello a byte a second: the deadline counts from the
    // connection, not from the last byte (500 bytes would take 500 s).
    let drip = connect(&t.addr);
    let mut writer = drip.try_clone().unwrap();
    std::thread::spawn(move || {
        let head = [
            0x16u8, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
        ];
        for b in head.into_iter().chain(std::iter::repeat_n(0u8, 500)) {
            if writer.write_all(&[b]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    hostile.push(drip);
    // A whole ClientHello, the server's flight read, then nothing: stopped
    // in the middle of the handshake.
    let name = ServerName::try_from("localhost").unwrap();
    for _ in 0..20 {
        let mut s = connect(&t.addr);
        let mut conn = ClientConnection::new(Arc::clone(&cfg), name.clone()).unwrap();
        conn.write_tls(&mut s).unwrap();
        while conn.is_handshaking() && !conn.wants_write() {
            if conn.read_tls(&mut s).unwrap_or(0) == 0 {
                t.fail("closed in the middle of the handshake");
            }
            conn.process_new_packets().unwrap_or_else(|e| t.fail(e));
        }
        hostile.push(s);
    }
    let mut worst = Duration::ZERO;
    for _ in 0..10 {
        let start = Instant::now();
        https_get(&t, &cfg, "/healthz").ok();
        worst = worst.max(start.elapsed());
    }
    eprintln!("healthz over TLS beside 241 silent clients: worst of 10 {worst:?}");
    // Held behind a silent client, a request would wait the whole timeout
    // at least; below it is a loaded machine's delay, not a measure.
    t.check(
        worst < timeout,
        format!("healthz took {worst:?} beside silent clients (timeout {timeout:?})"),
    );
    // Every silent client is closed by the server after the timeout (the
    // stopped ones read the rest of the server's flight first).
    for (i, s) in hostile.iter_mut().enumerate() {
        s.set_read_timeout(Some(timeout * 3)).unwrap();
        let mut buf = [0u8; 4096];
        let closed = loop {
            match s.read(&mut buf) {
                Ok(0) => break true,
                Ok(_) => continue,
                Err(e) => break !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            }
        };
        t.check(
            closed,
            format!("silent client {i} still open after {:?}", opened.elapsed()),
        );
    }
    t.check(opened.elapsed() >= timeout, "closed before the timeout");
    t.wait_for(WAIT, "no connection counted open but ours", || {
        metric(&t, &cfg, "trigd_open_connections") <= 1.0
    });
}

#[test]
fn redirect_http_sends_plain_http_to_https() {
    let server = format!(
        "{}redirect_http = \"127.0.0.1:0\"\n",
        tls_server("one.pem", "one.key")
    );
    let dir = setup_tls("tls-redirect", &server);
    let t = Trigd::start(&dir);
    let log = std::fs::read_to_string(&t.stderr_log).unwrap_or_default();
    let plain = log
        .lines()
        .find_map(|l| l.split("redirecting http://").nth(1))
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| t.fail("no `redirecting http://` line in the log"))
        .to_string();
    let port = t.addr.rsplit(':').next().unwrap();
    let r = send_raw(
        &plain,
        b"GET /api/runs?x=1 HTTP/1.1\r\nHost: localhost:80\r\n\r\n",
    );
    r.status_is(308);
    let want = format!("https://localhost:{port}/api/runs?x=1");
    r.check_eq(r.header("location"), Some(want.as_str()), "Location");
    // A Host that would change where the URL points is refused.
    let r = send_raw(
        &plain,
        b"GET / HTTP/1.1\r\nHost: evil.example@localhost\r\n\r\n",
    );
    r.err(400, "bad_request");
}

/// The state letter of process `pid` (`R`, `S`, `T`…).
fn proc_state(pid: u32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit(") ")
        .next()
        .and_then(|s| s.chars().next())
        .unwrap_or('?')
}

#[test]
fn a_handshake_woken_by_a_signal_goes_on() {
    // A read with a socket timeout fails with EINTR when its thread is
    // woken by a signal (here SIGSTOP and SIGCONT): the handshake must
    // read again, not drop the client.
    let dir = setup_tls("tls-eintr", &tls_server("one.pem", "one.key"));
    let t = Trigd::start(&dir);
    let cfg = client_config(&dir);
    let mut tcp = connect(&t.addr);
    let name = ServerName::try_from("localhost").unwrap();
    let mut conn = ClientConnection::new(Arc::clone(&cfg), name).unwrap();
    conn.write_tls(&mut tcp).unwrap();
    // The server's whole flight in: it now waits for the client's answer.
    while conn.is_handshaking() && !conn.wants_write() {
        if conn.read_tls(&mut tcp).unwrap_or(0) == 0 {
            t.fail("closed in the middle of the handshake");
        }
        conn.process_new_packets().unwrap_or_else(|e| t.fail(e));
    }
    let pid = t.pid();
    // SAFETY: kill(2) on the child's pid.
    unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    let stopped = wait_until(WAIT, || proc_state(pid) == 'T');
    // SAFETY: as above.
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    t.check(stopped, "the server did not stop on SIGSTOP");
    let mut s = StreamOwned::new(conn, tcp);
    let req = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n";
    s.write_all(req)
        .unwrap_or_else(|e| t.fail(format!("after stop and continue: {e}")));
    let reply = read_reply(&mut BufReader::new(s));
    let reply = reply.unwrap_or_else(|e| t.fail(format!("no answer after stop and continue: {e}")));
    t.check(reply.status == 200, format!("{reply:?}"));
}

/// `redirect_http` names the HTTPS port it sends to: on a Unix socket there
/// is none, and trigd says so at start instead of serving without it (and
/// without `[acme]`'s HTTP-01 answers).
#[test]
fn redirect_http_on_a_unix_socket_is_a_clear_error() {
    let server = format!(
        "{}redirect_http = \"127.0.0.1:0\"\n",
        tls_server("one.pem", "one.key")
    );
    let dir = setup_tls("tls-redirect-unix", &server);
    let listen = format!("unix:{}", dir.path_str("trigd.sock"));
    let config = dir.path_str("config.toml");
    let out = crate::util::cli::trigd(&["serve", "--config", &config, "--listen", &listen], None);
    out.code_is(1);
    assert!(
        out.stderr.contains("redirect_http") && out.stderr.contains("listen on HOST:PORT"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_client_cannot_drive_the_log_with_tls_warnings() {
    // rustls warns of a client that gives an IP address as its SNI name
    // (wrk does, and some embedded clients), once per connection: written
    // once per minute, the repeats at debug (RUST_LOG=info leaves them out).
    let dir = setup_tls("tls-sni-warning", &tls_server("one.pem", "one.key"));
    let t = Trigd::start(&dir);
    for _ in 0..5 {
        let (done, text) = s_client(&t.addr, &["-servername", "127.0.0.1"]);
        t.check(
            done,
            format!("the handshake with an IP as SNI name:\n{text}"),
        );
    }
    // The server has logged what the five handshakes made it log once
    // the healthz that follows them is in the access log.
    https_get(&t, &client_config(&dir), "/healthz").ok();
    t.wait_for(
        Duration::from_secs(10),
        "the access line of /healthz",
        || std::fs::read_to_string(&t.stderr_log).is_ok_and(|log| log.contains("GET /healthz")),
    );
    let log = std::fs::read_to_string(&t.stderr_log).unwrap();
    let warned = log.lines().filter(|l| l.contains("Illegal SNI")).count();
    t.check_eq(warned, 1, "lines about the IP address as SNI name");
}

#[test]
fn a_certificate_overwritten_in_place_with_a_broken_one_keeps_the_old_one() {
    // Written in place (truncated, then written), as `cp` or an editor
    // does: a half-written file, a PEM block whose body is not a
    // certificate, an empty file. Each is refused with its reason in the
    // log, `/healthz` and `/metrics`; the old pair stays served.
    let dir = setup_tls("tls-broken-cert", &tls_server("cert.pem", "key.pem"));
    let good = dir.read_bytes("one.pem");
    std::fs::write(dir.path("cert.pem"), &good).unwrap();
    std::fs::copy(dir.path("one.key"), dir.path("key.pem")).unwrap();
    let t = Trigd::start(&dir);
    let cfg = client_config(&dir);
    let one = leaf_der(&dir.path("one.pem"));
    let junk = "-----BEGIN CERTIFICATE-----\nMIIBkTCB+wIJAKHBfpegPjMCMA0GCSqGSIb3DQEBCwUAMBExDzANBgNVBAMMBmp1\n-----END CERTIFICATE-----\n";
    for (what, bytes) in [
        ("half of the file", &good[..good.len() / 2]),
        ("a PEM block that is not a certificate", junk.as_bytes()),
        ("an empty file", &b""[..]),
    ] {
        let failures = metric(&t, &cfg, "trigd_tls_reload_failures_total");
        std::fs::write(dir.path("cert.pem"), bytes).unwrap();
        t.wait_for(WAIT, &format!("{what}: the failure counted"), || {
            metric(&t, &cfg, "trigd_tls_reload_failures_total") > failures
        });
        let h = https_get(&t, &cfg, "/healthz").ok();
        t.check(
            h["Tls"]["Ok"] == false
                && h["Tls"]["LastError"]
                    .as_str()
                    .is_some_and(|e| e.contains("cert.pem")),
            format!("{what}: healthz {h}"),
        );
        t.check_eq(
            metric(&t, &cfg, "trigd_tls_certificate_ok"),
            0.0,
            &format!("{what}: certificate_ok"),
        );
        t.check(
            served_leaf(&t, &cfg) == one,
            format!("{what}: old pair served"),
        );
    }
    let log = std::fs::read_to_string(&t.stderr_log).unwrap();
    t.check(
        log.lines().any(|l| {
            l.contains("TLS certificate not reloaded, the old one is still served: ")
                && l.contains("cert.pem")
        }),
        "the reason in the log",
    );
    // The good file back in place: served again, the error cleared.
    std::fs::write(dir.path("cert.pem"), &good).unwrap();
    t.wait_for(WAIT, "the error cleared", || {
        metric(&t, &cfg, "trigd_tls_certificate_ok") == 1.0
    });
    t.check(served_leaf(&t, &cfg) == one, "the pair served");
}

#[test]
fn the_key_from_a_systemd_credential_is_served() {
    // `tls_key = "credential:NAME"`: systemd's LoadCredential= copy in
    // $CREDENTIALS_DIRECTORY (docs/systemd.md).
    let dir = setup_tls(
        "tls-credential",
        &tls_server("one.pem", "credential:tls.key"),
    );
    dir.mkdir("creds");
    std::fs::copy(dir.path("one.key"), dir.path("creds/tls.key")).unwrap();
    let creds = dir.path_str("creds");
    let t = Trigd::start_env(&dir, &[("CREDENTIALS_DIRECTORY", &creds)]);
    let cfg = client_config(&dir);
    t.check(
        served_leaf(&t, &cfg) == leaf_der(&dir.path("one.pem")),
        "the certificate served with the credential's key",
    );
    https_get(&t, &cfg, "/healthz").ok();
    // Without the directory: a load error naming the setting.
    let config = dir.path_str("config.toml");
    let out = Command::new(BIN)
        .args(["check", "--config", &config])
        .env_remove("CREDENTIALS_DIRECTORY")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    t.check(
        out.status.code() == Some(1)
            && err.contains("server.tls_key")
            && err.contains("$CREDENTIALS_DIRECTORY is not set"),
        format!("check without the credentials: {err}"),
    );
}

#[test]
fn a_client_offering_only_h2_is_told_why() {
    // ALPN without `http/1.1`: rustls refuses the handshake with the
    // alert `no_application_protocol` (RFC 7301), which comes after the
    // ServerHello: the client must get it, not a bare close.
    let dir = setup_tls("tls-alpn-h2", &tls_server("one.pem", "one.key"));
    let t = Trigd::start(&dir);
    let mut h2 = (*client_config(&dir)).clone();
    h2.alpn_protocols = vec![b"h2".to_vec()];
    let err = match Https::connect(&t.addr, &Arc::new(h2)) {
        Ok(_) => t.fail("a handshake without http/1.1 was completed"),
        Err(e) => e,
    };
    t.check(
        err.contains("NoApplicationProtocol"),
        format!("want the alert no_application_protocol, got: {err}"),
    );
    https_get(&t, &client_config(&dir), "/healthz").ok();
}

#[test]
fn every_metric_of_an_https_trigd_is_in_the_operations_table() {
    // The manual's one list of metrics (docs/operations.md, "Health and
    // metrics") names each `# TYPE` of `/metrics`, HTTPS's included.
    let dir = setup_tls("tls-metrics-doc", &tls_server("one.pem", "one.key"));
    let t = Trigd::start(&dir);
    let text = https_get(&t, &client_config(&dir), "/metrics").text();
    let page =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operations.md"))
            .unwrap();
    let names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    t.check(
        names.contains(&"trigd_tls_certificate_ok"),
        format!("no TLS metrics:\n{text}"),
    );
    let missing: Vec<&&str> = names
        .iter()
        .filter(|n| !page.contains(&format!("| `{n}` |")))
        .collect();
    t.check(
        missing.is_empty(),
        format!("not in docs/operations.md's table: {missing:?}"),
    );
}

/// Whether `trigd serve --listen <listen>` with `server` warns that it
/// serves plain HTTP beyond loopback.
fn warns_exposed(dir: &TestDir, server: &str, listen: &str) -> bool {
    dir.write("config.toml", &config(server));
    let log = dir.path("exposed.log");
    let mut child = Command::new(BIN)
        .args(["serve", "--config", &dir.path_str("config.toml")])
        .args(["--listen", listen])
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start trigd");
    let mut line = String::new();
    let read =
        std::io::BufRead::read_line(&mut BufReader::new(child.stdout.take().unwrap()), &mut line);
    // The log line that follows the warning, when there is one.
    let logged = wait_until(WAIT, || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("(open files limit"))
    });
    let _ = child.kill();
    let _ = child.wait();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        read.is_ok() && line.starts_with("listening on ") && logged,
        "{listen}: {line:?}\n{text}"
    );
    text.contains("a non-loopback address, without TLS")
}

#[test]
fn plain_http_beyond_loopback_is_warned_about_and_https_is_not() {
    let dir = setup_tls("tls-exposed", "");
    let https = tls_server("one.pem", "one.key");
    assert!(
        warns_exposed(&dir, "", "0.0.0.0:0"),
        "plain HTTP on 0.0.0.0"
    );
    assert!(
        !warns_exposed(&dir, "", "127.0.0.1:0"),
        "plain HTTP on loopback"
    );
    assert!(
        !warns_exposed(&dir, &https, "0.0.0.0:0"),
        "HTTPS on 0.0.0.0"
    );
}

#[test]
fn a_fifo_in_place_of_the_certificate_holds_no_reload() {
    // Opening a FIFO blocks until a writer comes: the reload would wait
    // for good, and SIGHUP (which re-reads the files) with it.
    let dir = setup_tls("tls-fifo", &tls_server("cert.pem", "key.pem"));
    std::fs::copy(dir.path("one.pem"), dir.path("cert.pem")).unwrap();
    std::fs::copy(dir.path("one.key"), dir.path("key.pem")).unwrap();
    let t = Trigd::start(&dir);
    let cfg = client_config(&dir);
    std::fs::remove_file(dir.path("cert.pem")).unwrap();
    let made = Command::new("mkfifo")
        .arg(dir.path("cert.pem"))
        .status()
        .unwrap();
    assert!(made.success());
    t.wait_for(WAIT, "the FIFO refused", || {
        https_get(&t, &cfg, "/healthz").json()["Tls"]["LastError"]
            .as_str()
            .is_some_and(|e| e.contains("cert.pem") && e.contains("not a regular file"))
    });
    // `trigd check` says so too, at once.
    let out = trigd(&["check", "--config", &dir.path_str("config.toml")], None);
    out.check(
        out.code == Some(1) && out.stderr.contains("not a regular file"),
        "check with a FIFO",
    );
    // The next pair is still picked up: by SIGHUP after a swap the watcher
    // would see anyway.
    rename_over(&dir, "cert.pem", &dir.read_bytes("two.pem"));
    rename_over(&dir, "key.pem", &dir.read_bytes("two.key"));
    // SAFETY: kill(2) on the child's pid.
    unsafe { libc::kill(t.pid() as i32, libc::SIGHUP) };
    let two = leaf_der(&dir.path("two.pem"));
    t.wait_for(WAIT, "the new pair served", || served_leaf(&t, &cfg) == two);
    t.wait_for(WAIT, "the error cleared", || {
        metric(&t, &cfg, "trigd_tls_certificate_ok") == 1.0
    });
}
