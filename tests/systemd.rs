//! trigd on a Unix socket and under systemd, with the real pieces: the
//! socket file (mode, stale and live files, hostile paths), socket
//! activation through systemd's own `systemd-socket-activate` (and a
//! shell for malformed variables), the notify protocol read message by
//! message off a `NOTIFY_SOCKET` the test binds, the watchdog, systemd
//! credentials, and HAProxy forwarding to the socket with
//! `X-Forwarded-For`.

use std::fs;
use std::io::{BufReader, Write};
use std::net::TcpListener;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixDatagram, UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;

/// A `trigd serve` started by a test its own way; killed when dropped.
struct Served {
    child: Child,
    /// What follows `listening on ` in its first stdout line.
    shown: String,
    log: PathBuf,
}

impl Served {
    /// Spawn `cmd` (stdout piped, stderr to `log`) and wait for its
    /// `listening on` line.
    fn start(mut cmd: Command, log: &Path) -> Served {
        let err = fs::File::create(log).unwrap();
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(err);
        cmd.env("RUST_LOG", "info");
        let mut child = cmd.spawn().expect("spawn");
        let line = first_line(child.stdout.take().unwrap()).recv_timeout(WAIT);
        let shown = match line {
            Ok(Ok(l)) if l.starts_with("listening on ") => l["listening on ".len()..].trim().into(),
            other => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("no listening line ({other:?}); stderr:\n{}", read(log));
            }
        };
        Served {
            child,
            shown,
            log: log.to_path_buf(),
        }
    }

    fn sigterm(&self) {
        signal(self.child.id(), "TERM");
    }

    /// Wait (bounded) for the process to exit; its success.
    fn wait_exit(&mut self) -> bool {
        let start = Instant::now();
        while start.elapsed() < WAIT {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st.success();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("trigd did not exit; stderr:\n{}", read(&self.log));
    }

    fn log(&self) -> String {
        read(&self.log)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap_or_default()
}

fn signal(pid: u32, sig: &str) {
    let st = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
}

/// `trigd serve --config <dir>/config.toml` and any extra arguments.
fn serve_cmd(dir: &TestDir, extra: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.arg("serve")
        .arg("--config")
        .arg(dir.path("config.toml"))
        .args(extra);
    cmd
}

/// Run `cmd` to its end (bounded); its exit code and stderr.
fn run_to_end(mut cmd: Command) -> (i32, String) {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let out = wait_bounded(cmd.spawn().expect("spawn"), "trigd serve");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// One request over the Unix socket at `path`; its reply.
fn unix_request(path: &Path, head: &str) -> Reply {
    let mut s = UnixStream::connect(path).unwrap_or_else(|e| panic!("connect {path:?}: {e}"));
    s.set_read_timeout(Some(WAIT)).unwrap();
    // A connection past max_connections is answered (503) and closed before
    // the server reads anything: the write may then fail (EPIPE) while the
    // answer is still there to read.
    let _ = s.write_all(head.as_bytes());
    read_reply(&mut BufReader::new(s)).expect("a reply")
}

fn unix_get(path: &Path, target: &str) -> Reply {
    unix_request(
        path,
        &format!("GET {target} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"),
    )
}

/// A program whose function prints the environment it was started with.
const ENV: &str = r#"
id = 1
name = "env"

[[functions]]
name = "env"
command = ["env"]
[functions.webhook]
"#;

#[test]
fn unix_socket_serves_with_its_mode_and_is_gone_after_a_clean_stop() {
    let dir = setup("unix-serve", "socket_mode = \"0640\"", &[]);
    let sock = dir.path("run/trigd.sock");
    dir.mkdir("run");
    let listen = format!("unix:{}", sock.display());
    let cmd = serve_cmd(&dir, &["--listen", &listen]);
    let mut t = Served::start(cmd, &dir.path("stderr.log"));
    assert_eq!(t.shown, listen);
    let meta = fs::symlink_metadata(&sock).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o640);
    let r = unix_get(&sock, "/healthz");
    r.status_is(200);
    assert!(
        wait_until(WAIT, || t.log().contains("access] unix GET /healthz 200")),
        "{}",
        t.log()
    );
    t.sigterm();
    assert!(t.wait_exit(), "{}", t.log());
    assert!(!sock.exists(), "the socket file is left after a clean stop");
}

#[test]
fn the_socket_file_gets_its_owner_and_group() {
    let dir = setup(
        "unix-owner",
        "socket_user = \"nobody\"\nsocket_group = \"65534\"",
        &[],
    );
    let sock = dir.path("t.sock");
    let listen = format!("unix:{}", sock.display());
    let root = Command::new("id").arg("-u").output().unwrap().stdout == b"0\n";
    if !root {
        // Only root gives a file away: a clear error, no file left.
        let (code, err) = run_to_end(serve_cmd(&dir, &["--listen", &listen]));
        assert_eq!(code, 1, "{err}");
        assert!(
            err.contains("cannot give the socket to nobody:65534"),
            "{err}"
        );
        assert!(!sock.exists());
        return;
    }
    let _t = Served::start(
        serve_cmd(&dir, &["--listen", &listen]),
        &dir.path("stderr.log"),
    );
    let st = Command::new("stat")
        .args(["-c", "%U %g %a"])
        .arg(&sock)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&st.stdout).trim(),
        "nobody 65534 660"
    );
}

#[test]
fn a_stale_socket_file_is_replaced_and_a_live_one_refused() {
    let dir = setup("unix-stale", "", &[]);
    let sock = dir.path("t.sock");
    // A socket file nobody listens on: what a killed server leaves.
    drop(UnixListener::bind(&sock).unwrap());
    assert!(sock.exists());
    let listen = format!("unix:{}", sock.display());
    let t = Served::start(serve_cmd(&dir, &["--listen", &listen]), &dir.path("a.log"));
    unix_get(&sock, "/healthz").status_is(200);
    assert!(t.log().contains("removing the stale socket"), "{}", t.log());
    // A second server on the live socket: refused, the first one unharmed.
    let (code, err) = run_to_end(serve_cmd(&dir, &["--listen", &listen]));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("a server is listening on this socket already"),
        "{err}"
    );
    unix_get(&sock, "/healthz").status_is(200);
}

#[test]
fn socket_paths_that_cannot_be_served_are_clear_errors() {
    let dir = setup("unix-hostile", "", &[]);
    let refused = |listen: &str, want: &str| {
        let (code, err) = run_to_end(serve_cmd(&dir, &["--listen", listen]));
        assert_eq!(code, 1, "{listen}: {err}");
        assert!(err.contains(want), "{listen}: want {want:?} in:\n{err}");
        assert!(!err.contains("panicked"), "{err}");
    };
    let long = format!("unix:/tmp/{}", "x".repeat(108));
    refused(&long, "Unix sockets allow at most 107");
    let missing = format!("unix:{}", dir.path("no/such/dir/t.sock").display());
    refused(&missing, "does not exist (create it");
    dir.write("plain", "keep me");
    refused(
        &format!("unix:{}", dir.path("plain").display()),
        "not a socket",
    );
    assert_eq!(read(&dir.path("plain")), "keep me");
    refused("unix:", "no socket path after unix:");
    let sock = format!("unix:{}", dir.path("g.sock").display());
    let with = |line: &str| {
        let text = config(line);
        dir.write("config.toml", &text);
    };
    with("socket_group = \"no-such-group-x\"");
    refused(&sock, "no group called \"no-such-group-x\"");
    assert!(
        !dir.path("g.sock").exists(),
        "a socket that could not be owned is left"
    );
    with("socket_mode = \"0999\"");
    refused(&sock, "server.socket_mode");
    with("socket_mode = \"rw\"");
    refused(&sock, "is not a file mode");
}

#[test]
fn a_stalled_client_on_the_unix_socket_gets_408_at_its_deadline() {
    let dir = setup("unix-stall", "request_timeout = \"1s\"", &[]);
    let sock = dir.path("t.sock");
    let listen = format!("unix:{}", sock.display());
    let _t = Served::start(
        serve_cmd(&dir, &["--listen", &listen]),
        &dir.path("stderr.log"),
    );
    // Half a request head, then nothing: the socket timeout ends it.
    let mut held = UnixStream::connect(&sock).unwrap();
    held.write_all(b"GET /healthz HTTP/1.1\r\nHost:").unwrap();
    held.set_read_timeout(Some(WAIT)).unwrap();
    let r = read_reply(&mut BufReader::new(held)).expect("an answer to the stalled head");
    r.err(408, "request_timeout");
}

#[test]
fn past_max_connections_a_unix_client_gets_503_busy() {
    let dir = setup("unix-busy", "max_connections = 1", &[]);
    let sock = dir.path("t.sock");
    let listen = format!("unix:{}", sock.display());
    let _t = Served::start(
        serve_cmd(&dir, &["--listen", &listen]),
        &dir.path("stderr.log"),
    );
    let mut held = UnixStream::connect(&sock).unwrap();
    held.write_all(b"GET /healthz HTTP/1.1\r\nHost:").unwrap();
    // Once the first is counted, the next gets 503 busy at once.
    let busy = wait_until(WAIT, || {
        let r = unix_get(&sock, "/healthz");
        r.status == 503 && r.text().contains("busy")
    });
    assert!(busy, "no 503 busy past max_connections");
}

/// A free loopback port (bound then released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

#[test]
#[ignore = "needs HAProxy: cargo test -- --include-ignored (as .ci/run does)"]
fn forwarded_for_from_haproxy_on_the_unix_socket_is_believed_when_unix_is_trusted() {
    for trust in [false, true] {
        let list = if trust {
            r#"["unix", "127.0.0.1"]"#
        } else {
            r#"["127.0.0.1"]"#
        };
        let dir = setup(
            "unix-haproxy",
            &format!("auth_failures_per_minute = 2\ntrusted_proxies = {list}"),
            &[],
        );
        let sock = dir.path("t.sock");
        let listen = format!("unix:{}", sock.display());
        let _t = Served::start(
            serve_cmd(&dir, &["--listen", &listen]),
            &dir.path("stderr.log"),
        );
        let addr = format!("127.0.0.1:{}", free_port());
        let cfg = format!(
            "defaults\n  mode http\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n\
             frontend web\n  bind {addr}\n  option forwardfor\n  default_backend trigd\n\
             backend trigd\n  server local unix@{}\n",
            sock.display()
        );
        dir.write("haproxy.cfg", &cfg);
        let mut haproxy = Command::new("haproxy")
            .args(["-db", "-f"])
            .arg(dir.path("haproxy.cfg"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("haproxy (apt-get install haproxy)");
        let client = Client::for_addr(&addr, &dir.path("stderr.log"));
        assert!(wait_until(WAIT, || client
            .try_request("GET", "/healthz", &[], b"")
            .is_ok_and(|r| r.status == 200)));
        // Two clients behind another proxy that HAProxy (127.0.0.1, the
        // hop it adds) forwards: each fails twice, then tries again.
        let attempt = |client_ip: &str| {
            let h = [
                ("Authorization", "Bearer wrong"),
                ("X-Forwarded-For", client_ip),
            ];
            client.request("POST", "/api?program_id=1", &h, b"").status
        };
        for _ in 0..2 {
            assert_eq!(attempt("198.51.100.1"), 401);
        }
        assert_eq!(
            attempt("198.51.100.1"),
            429,
            "the failing client is limited"
        );
        // Trusted: the other client has a count of its own. Untrusted:
        // every peer on the socket is one client (0.0.0.0), limited too.
        let other = attempt("198.51.100.2");
        let _ = haproxy.kill();
        let _ = haproxy.wait();
        assert_eq!(
            other,
            if trust { 401 } else { 429 },
            "unix trusted: {trust}"
        );
    }
}

#[test]
fn socket_activation_serves_the_passed_unix_socket_and_leaves_it_to_systemd() {
    let dir = setup("activate-unix", "", &[]);
    let sock = dir.path("a.sock");
    let mut cmd = Command::new("systemd-socket-activate");
    cmd.arg("-l")
        .arg(&sock)
        .args([
            "--fdname=web",
            "-E",
            "RUST_LOG=info",
            BIN,
            "serve",
            "--config",
        ])
        .arg(dir.path("config.toml"))
        .args(["--listen", "127.0.0.1:1"]);
    let err = fs::File::create(dir.path("stderr.log")).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(err)
        .spawn()
        .expect("systemd-socket-activate (package systemd)");
    let lines = first_line(child.stdout.take().unwrap());
    // systemd-socket-activate starts trigd at the first connection, which
    // trigd then answers.
    assert!(wait_until(WAIT, || sock.exists()));
    std::thread::spawn(move || {
        let _ = tx.send(unix_get(&sock, "/healthz").status);
    });
    let status = rx.recv_timeout(WAIT);
    let line = lines.recv_timeout(WAIT);
    let log = read(&dir.path("stderr.log"));
    let sock = dir.path("a.sock");
    signal(child.id(), "TERM");
    let exited = wait_bounded(child, "trigd");
    assert_eq!(status, Ok(200), "{log}");
    assert_eq!(
        line.unwrap().unwrap().trim(),
        format!("listening on unix:{}", sock.display())
    );
    assert!(
        log.contains("serving the socket systemd passed (web)"),
        "{log}"
    );
    assert!(exited.status.success(), "{log}");
    assert!(sock.exists(), "trigd removed the socket systemd owns");
}

#[test]
fn socket_activation_serves_a_passed_tcp_socket() {
    let dir = setup("activate-tcp", "", &[]);
    let addr = format!("127.0.0.1:{}", free_port());
    let mut cmd = Command::new("systemd-socket-activate");
    cmd.args(["-l", &addr, "-E", "RUST_LOG=info", BIN, "serve", "--config"])
        .arg(dir.path("config.toml"));
    let err = fs::File::create(dir.path("stderr.log")).unwrap();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(err)
        .spawn()
        .expect("systemd-socket-activate (package systemd)");
    let lines = first_line(child.stdout.take().unwrap());
    let client = Client::for_addr(&addr, &dir.path("stderr.log"));
    let ok = wait_until(WAIT, || {
        client
            .try_request("GET", "/healthz", &[], b"")
            .is_ok_and(|r| r.status == 200)
    });
    let line = lines.recv_timeout(WAIT);
    let _ = child.kill();
    let _ = child.wait();
    assert!(ok, "{}", read(&dir.path("stderr.log")));
    assert_eq!(
        line.unwrap().unwrap().trim(),
        format!("listening on http://{addr}")
    );
}

#[test]
fn malformed_socket_activation_is_a_clear_error() {
    let dir = setup("activate-bad", "", &[]);
    let config = dir.path("config.toml");
    // `exec` keeps the shell's pid, so LISTEN_PID=$$ names trigd.
    let with = |vars: &str, redirect: &str| {
        let script = format!(
            "LISTEN_PID=$$ {vars} exec \"$0\" serve --config \"$1\" --listen 127.0.0.1:0 {redirect}"
        );
        let mut cmd = Command::new("sh");
        cmd.args(["-c", &script, BIN]).arg(&config);
        run_to_end(cmd)
    };
    for (vars, redirect, want) in [
        (
            "LISTEN_FDS=three",
            "",
            "LISTEN_FDS=\"three\" is not a number",
        ),
        ("LISTEN_FDS=-1", "", "is not a number"),
        ("LISTEN_FDS=99999999999999999999999", "", "is not a number"),
        ("LISTEN_FDS=4294967296", "", "trigd serves one socket"),
        ("LISTEN_FDS=2", "", "trigd serves one socket"),
        ("LISTEN_FDS=1", "3<&-", "descriptor 3 is not open"),
        (
            "LISTEN_FDS=1",
            "3</etc/hostname",
            "descriptor 3 is not a socket",
        ),
    ] {
        let (code, err) = with(vars, redirect);
        assert_eq!(code, 1, "{vars} {redirect}: {err}");
        assert!(
            err.contains(want),
            "{vars} {redirect}: want {want:?} in:\n{err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
    // A socket that is not a listening stream: systemd's own tool passes
    // a datagram socket, and trigd starts at the first datagram.
    let dgram = dir.path("d.sock");
    let mut cmd = Command::new("systemd-socket-activate");
    cmd.args(["--datagram", "-l"])
        .arg(&dgram)
        .args([BIN, "serve", "--config"])
        .arg(&config);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let child = cmd.spawn().expect("systemd-socket-activate");
    assert!(wait_until(WAIT, || dgram.exists()));
    UnixDatagram::unbound()
        .unwrap()
        .send_to(b"x", &dgram)
        .unwrap();
    let out = wait_bounded(child, "systemd-socket-activate --datagram");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("descriptor 3 is a socket that is not listening"),
        "{err}"
    );
}

#[test]
fn systemd_variables_for_another_process_are_ignored_and_no_program_inherits_any() {
    let dir = setup("activate-other", "", &[("env.toml", ENV)]);
    let notify = dir.path("notify.sock");
    let _n = UnixDatagram::bind(&notify).unwrap();
    let env = [
        ("LISTEN_PID", "1"),
        ("LISTEN_FDS", "1"),
        ("LISTEN_FDNAMES", "web"),
        ("NOTIFY_SOCKET", notify.to_str().unwrap()),
        ("WATCHDOG_USEC", "60000000"),
        ("WATCHDOG_PID", "1"),
    ];
    let t = Trigd::start_env(&dir, &env);
    let r = t.request(
        "POST",
        "/api?program_id=1",
        &[("Authorization", &format!("Bearer {KEY}"))],
        b"",
    );
    let out = r.ok()["Result"].to_string();
    for (name, _) in env {
        assert!(
            !out.contains(&format!("{name}=")),
            "{name} reached a program: {out}"
        );
    }
    assert!(t.stderr_tail().contains("LISTEN_FDS is for process 1"));
}

/// `CLOCK_MONOTONIC` now in µs, read from `Instant`'s `Debug` form (Linux:
/// `Instant { tv_sec: S, tv_nsec: N }`), which is that clock.
fn monotonic_usec() -> u64 {
    let text = format!("{:?}", Instant::now());
    let num = |key: &str| -> u64 {
        let from = text.find(key).unwrap_or_else(|| panic!("{text}")) + key.len();
        text[from..]
            .trim_start()
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    num("tv_sec:") * 1_000_000 + num("tv_nsec:") / 1_000
}

/// The notify socket of a test: each datagram trigd sends, in order.
struct Notify {
    sock: UnixDatagram,
    path: PathBuf,
}

impl Notify {
    fn bind(dir: &TestDir) -> Notify {
        let path = dir.path("notify.sock");
        let sock = UnixDatagram::bind(&path).unwrap();
        Notify { sock, path }
    }

    /// The next message, within `WAIT`.
    fn next(&self) -> String {
        self.sock.set_read_timeout(Some(WAIT)).unwrap();
        let mut buf = [0u8; 4096];
        let n = self.sock.recv(&mut buf).expect("a notify message in time");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    /// The next message that is not a bare `STATUS=` or `WATCHDOG=1`.
    fn next_state(&self) -> String {
        loop {
            let m = self.next();
            if !(m.starts_with("STATUS=") || m == "WATCHDOG=1") {
                return m;
            }
        }
    }
}

/// `RELOADING=1` then `MONOTONIC_USEC=` between `before` and now.
#[track_caller]
fn assert_reloading(msg: &str, before: u64) {
    let usec: u64 = msg
        .strip_prefix("RELOADING=1\nMONOTONIC_USEC=")
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("want RELOADING=1 and MONOTONIC_USEC=, got {msg:?}"));
    let after = monotonic_usec();
    assert!(
        before <= usec && usec <= after,
        "MONOTONIC_USEC={usec} is not between {before} and {after}"
    );
}

#[test]
fn notify_protocol_message_by_message() {
    let dir = setup(
        "notify",
        "drain_delay = \"1s\"",
        &[("p.toml", crate::api::OK)],
    );
    let n = Notify::bind(&dir);
    let mut t = Trigd::start_env(&dir, &[("NOTIFY_SOCKET", n.path.to_str().unwrap())]);
    let ready = n.next();
    let want = format!(
        "READY=1\nSTATUS=serving 1 programs and 0 tools on {}; 0 running, 0 queued",
        t.addr
    );
    assert_eq!(ready, want);
    // SIGHUP: reloading, then ready with the summary.
    let before = monotonic_usec();
    signal(t.pid(), "HUP");
    assert_reloading(&n.next_state(), before);
    assert!(n
        .next_state()
        .starts_with("READY=1\nSTATUS=serving 1 programs"));
    // A changed file (renamed into place): the same pair, as often as the
    // watcher saw it change, the last one with the new program.
    let before = monotonic_usec();
    dir.write(
        "q.tmp",
        &crate::api::OK
            .replace("id = 1", "id = 2")
            .replace("name = \"ok\"\n", "name = \"ok2\"\n"),
    );
    fs::rename(dir.path("q.tmp"), dir.path("programs/q.toml")).unwrap();
    n.reloads_until(before, "serving 2 programs and 0 tools");
    // A refused reload still ends with READY=1, and says so.
    let before = monotonic_usec();
    dir.write("q.tmp", "id = ");
    fs::rename(dir.path("q.tmp"), dir.path("programs/q.toml")).unwrap();
    n.reloads_until(before, "; the last reload failed (see /healthz)");
    // SIGTERM: stopping as the drain starts, nothing after it.
    t.sigterm();
    // The watcher may have seen the refused file change twice: a reload it
    // began before the signal still ends (its pair) before the drain.
    let stopping = loop {
        let m = n.next_state();
        if !(m.starts_with("RELOADING=1\n") || m.starts_with("READY=1\n")) {
            break m;
        }
    };
    assert!(stopping.starts_with("STOPPING=1\n"), "{stopping}");
    assert!(t.wait_exit(WAIT).is_some_and(|s| s.success()));
    n.sock.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 512];
    assert!(n.sock.recv(&mut buf).is_err(), "a message after STOPPING=1");
}

/// trigd in `dir` on a Unix socket (its path returned) with a 1 s
/// watchdog, its `NOTIFY_SOCKET` past `READY=1`.
fn start_with_watchdog(dir: &TestDir) -> (Notify, std::path::PathBuf, Served) {
    let n = Notify::bind(dir);
    let sock = dir.path("t.sock");
    let listen = format!("unix:{}", sock.display());
    let mut cmd = serve_cmd(dir, &["--listen", &listen]);
    cmd.env("NOTIFY_SOCKET", &n.path)
        .env("WATCHDOG_USEC", "1000000");
    let t = Served::start(cmd, &dir.path("stderr.log"));
    assert!(n.next().starts_with("READY=1\n"));
    (n, sock, t)
}

#[test]
fn watchdog_pings_only_while_the_server_answers() {
    let dir = setup("watchdog", "", &[]);
    let (n, sock, t) = start_with_watchdog(&dir);
    // Pings come while the server answers (every 0.5 s).
    for _ in 0..3 {
        assert_eq!(n.next_state_or_ping(), "WATCHDOG=1");
    }
    // Nobody can reach the server any more (its socket file is gone, as
    // a cleanup of /run would leave it): the checks fail, pings stop.
    fs::remove_file(&sock).unwrap();
    let failures = || {
        t.log()
            .matches("watchdog: the server did not answer")
            .count()
    };
    assert!(wait_until(WAIT, || failures() >= 3), "{}", t.log());
    n.sock.set_nonblocking(true).unwrap();
    let mut pings = 0;
    let mut buf = [0u8; 512];
    while let Ok(k) = n.sock.recv(&mut buf) {
        pings += usize::from(&buf[..k] == b"WATCHDOG=1");
    }
    // At most the one whose check had passed before the file went.
    assert!(pings <= 1, "{pings} pings after the socket went away");
    // The checks are not access-logged.
    assert!(!t.log().contains("GET /healthz"), "{}", t.log());
}

impl Notify {
    /// Reload pairs (`RELOADING=1` with a valid `MONOTONIC_USEC=`, then
    /// `READY=1`) until a `READY=1` whose status contains `want`.
    #[track_caller]
    fn reloads_until(&self, before: u64, want: &str) {
        loop {
            assert_reloading(&self.next_state(), before);
            let ready = self.next_state();
            assert!(ready.starts_with("READY=1\nSTATUS="), "{ready}");
            if ready.contains(want) {
                return;
            }
        }
    }

    /// The next message that is not a bare `STATUS=`.
    fn next_state_or_ping(&self) -> String {
        loop {
            let m = self.next();
            if !m.starts_with("STATUS=") {
                return m;
            }
        }
    }
}

#[test]
fn secret_files_from_systemd_credentials() {
    let dir = setup("credentials", "", &[]);
    let creds = dir.path("creds");
    dir.mkdir("creds");
    dir.write("creds/cb", &"s".repeat(40));
    let check = |secret_file: &str, creds: Option<&Path>| {
        let text = format!(
            "{}\n[callbacks]\nsecret_file = \"{secret_file}\"\n",
            config("")
        );
        dir.write("config.toml", &text);
        let mut cmd = Command::new(BIN);
        cmd.args(["check", "--config"]).arg(dir.path("config.toml"));
        cmd.env_remove("CREDENTIALS_DIRECTORY");
        if let Some(c) = creds {
            cmd.env("CREDENTIALS_DIRECTORY", c);
        }
        let out = cmd.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = check("credential:cb", Some(&creds));
    assert_eq!(code, Some(0), "{err}");
    let (code, err) = check("credential:cb", None);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("config.toml:") && err.contains("callbacks.secret_file"),
        "{err}"
    );
    assert!(err.contains("$CREDENTIALS_DIRECTORY is not set"), "{err}");
    assert!(err.contains("LoadCredential=cb:"), "{err}");
    let (code, err) = check("credential:other", Some(&creds));
    assert_eq!(code, Some(1));
    assert!(
        err.contains("no credential \"other\" in $CREDENTIALS_DIRECTORY"),
        "{err}"
    );
    for bad in ["credential:", "credential:../cb", "credential:.."] {
        let (code, err) = check(bad, Some(&creds));
        assert_eq!(code, Some(1), "{bad}");
        assert!(
            err.contains("a credential's name is a file name"),
            "{bad}: {err}"
        );
    }
    // The secret never shows in an error.
    assert!(!err.contains(&"s".repeat(40)));
}

#[test]
fn the_watchdog_pings_on_while_idle_connections_fill_max_connections() {
    // A server that answers "full" (503 busy) is not hung: a flood of idle
    // connections must not stop the pings and get trigd restarted.
    let dir = setup(
        "watchdog-full",
        "max_connections = 4\nrequest_timeout = \"60s\"",
        &[],
    );
    let (n, sock, _t) = start_with_watchdog(&dir);
    let held: Vec<UnixStream> = (0..4)
        .map(|_| UnixStream::connect(&sock).unwrap())
        .collect();
    let full = wait_until(WAIT, || unix_get(&sock, "/healthz").status == 503);
    assert!(full, "max_connections not reached");
    // Drain what was sent while filling up, then pings go on.
    n.sock.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 512];
    while n.sock.recv(&mut buf).is_ok() {}
    n.sock.set_nonblocking(false).unwrap();
    for _ in 0..3 {
        assert_eq!(n.next_state_or_ping(), "WATCHDOG=1");
    }
    assert!(unix_get(&sock, "/healthz").status == 503, "still full");
    drop(held);
}
