//! The test harness: a per-test directory, the `trigd` server as a child
//! process, a raw HTTP/1.1 client, bounded polling, and a CLI runner.
//!
//! Every assertion helper panics with everything needed to understand the
//! failure without re-running: the request, the whole reply and the tail of
//! the server's `stderr.log` (or, for the CLI, the command line with its
//! stdout and stderr). Nothing here sleeps a fixed time to wait for a state:
//! [`wait_until`] polls a condition with a bound.
#![allow(dead_code)]

use std::env;
use std::fmt::{self, Debug, Display};
use std::fs::{self, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{self, Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_trigd");

/// An API key with access to every program.
pub const KEY: &str = "trigd-test-key-all-6f1d2c9a";
/// An API key limited to workspace `ops`.
pub const KEY_OPS: &str = "trigd-test-key-ops-81ac3e57";
/// An API key limited to program 2.
pub const KEY_P2: &str = "trigd-test-key-program2-c0ffee11";

/// How long the server gets to print its `listening on` line.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// Read timeout of the HTTP client.
const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Default bound for [`wait_until`] in tests.
pub const WAIT: Duration = Duration::from_secs(15);

/// Lowercase hex sha256 of `s`, as `[[api_keys]] sha256` expects.
pub fn sha256_hex(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

/// A `config.toml` with `server` as the body of `[server]`, workspaces `ops`
/// and `dev`, and the keys [`KEY`], [`KEY_OPS`] and [`KEY_P2`].
pub fn config(server: &str) -> String {
    format!(
        r#"[server]
{server}

[[workspaces]]
name = "ops"
members = []

[[workspaces]]
name = "dev"
members = []

[[api_keys]]
name = "all"
sha256 = "{all}"

[[api_keys]]
name = "ops-only"
sha256 = "{ops}"
workspace = "ops"

[[api_keys]]
name = "program-2"
sha256 = "{p2}"
programs = [2]
"#,
        all = sha256_hex(KEY),
        ops = sha256_hex(KEY_OPS),
        p2 = sha256_hex(KEY_P2),
    )
}

/// A fresh directory with `config.toml` from [`config`]`(server)`, the given
/// `programs/<file>` contents and an empty `work/` (for functions with
/// `workdir = "../work"`), and a server started on it.
pub fn serve(name: &str, server: &str, programs: &[(&str, &str)]) -> (TestDir, Trigd) {
    let dir = setup(name, server, programs);
    let t = Trigd::start(&dir);
    (dir, t)
}

/// Like [`serve`], without starting the server.
pub fn setup(name: &str, server: &str, programs: &[(&str, &str)]) -> TestDir {
    let dir = TestDir::new(name);
    dir.write("config.toml", &config(server));
    dir.mkdir("programs");
    dir.mkdir("work");
    for (file, text) in programs {
        dir.write(&format!("programs/{file}"), text);
    }
    dir
}

// ---------------------------------------------------------------------------
// TestDir

static DIR_COUNTER: AtomicUsize = AtomicUsize::new(0);

/// `env::temp_dir()/trigd-tests/<name>/<pid>-<n>`, emptied when created and
/// removed when the test passes (kept for inspection when it fails).
pub struct TestDir {
    /// The directory.
    pub root: PathBuf,
}

impl TestDir {
    /// A new empty directory for the test `name`.
    pub fn new(name: &str) -> TestDir {
        let n = DIR_COUNTER.fetch_add(1, Ordering::SeqCst);
        let root = env::temp_dir()
            .join("trigd-tests")
            .join(name)
            .join(format!("{}-{n}", process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", root.display()));
        TestDir { root }
    }

    /// `root/rel`.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// `root/rel` as a string (for argv and TOML).
    pub fn path_str(&self, rel: &str) -> String {
        self.path(rel)
            .to_str()
            .expect("temp paths are UTF-8")
            .to_string()
    }

    /// Write `text` to `root/rel`, creating parent directories.
    pub fn write(&self, rel: &str, text: &str) {
        let p = self.path(rel);
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent)
                .unwrap_or_else(|e| panic!("cannot create {}: {e}", parent.display()));
        }
        fs::write(&p, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", p.display()));
    }

    /// Append `text` to `root/rel` (created when missing).
    pub fn append(&self, rel: &str, text: &str) {
        let p = self.path(rel);
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&p)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", p.display()));
        f.write_all(text.as_bytes())
            .unwrap_or_else(|e| panic!("cannot append to {}: {e}", p.display()));
    }

    /// Create the directory `root/rel`.
    pub fn mkdir(&self, rel: &str) {
        let p = self.path(rel);
        fs::create_dir_all(&p).unwrap_or_else(|e| panic!("cannot create {}: {e}", p.display()));
    }

    /// Content of `root/rel`, or `None` when it cannot be read.
    pub fn read_opt(&self, rel: &str) -> Option<String> {
        fs::read(self.path(rel))
            .ok()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    /// Raw bytes of `root/rel`; panics when missing.
    pub fn read_bytes(&self, rel: &str) -> Vec<u8> {
        let p = self.path(rel);
        fs::read(&p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()))
    }

    /// Content of `root/rel`; panics when missing.
    pub fn read(&self, rel: &str) -> String {
        String::from_utf8_lossy(&self.read_bytes(rel)).into_owned()
    }

    /// Whether `root/rel` exists.
    pub fn exists(&self, rel: &str) -> bool {
        self.path(rel).exists()
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        if !thread::panicking() {
            let _ = fs::remove_dir_all(&self.root);
            // Also `<name>/` when no other run of the test is left in it.
            if let Some(parent) = self.root.parent() {
                let _ = fs::remove_dir(parent);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Trigd

/// A running `trigd serve`. Dropping it kills the process and waits for it.
pub struct Trigd {
    child: Option<Child>,
    /// `IP:PORT` from the `listening on http://IP:PORT` line.
    pub addr: String,
    config: PathBuf,
    /// The server's stderr, appended to across restarts.
    pub stderr_log: PathBuf,
}

impl Trigd {
    /// Start `trigd serve --config <dir>/config.toml --listen 127.0.0.1:0`
    /// and wait (bounded) for its first stdout line.
    pub fn start(dir: &TestDir) -> Trigd {
        let mut t = Trigd {
            child: None,
            addr: String::new(),
            config: dir.path("config.toml"),
            stderr_log: dir.path("stderr.log"),
        };
        t.spawn();
        t
    }

    fn spawn(&mut self) {
        let stderr = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.stderr_log)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", self.stderr_log.display()));
        let mut cmd = Command::new(BIN);
        cmd.arg("serve")
            .arg("--config")
            .arg(&self.config)
            .arg("--listen")
            .arg("127.0.0.1:0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr);
        if env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "info");
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {BIN}: {e}"));
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            let mut line = String::new();
            let res = r.read_line(&mut line).map(|_| line);
            let _ = tx.send(res);
            // Keep draining so that the server never blocks on a full pipe.
            let _ = io::copy(&mut r, &mut io::sink());
        });
        let got = rx.recv_timeout(START_TIMEOUT);
        self.child = Some(child);
        let line = match got {
            Ok(Ok(line)) => line,
            Ok(Err(e)) => self.fail(format!("reading the server's stdout failed: {e}")),
            Err(_) => self.fail(format!(
                "no `listening on` line on stdout within {START_TIMEOUT:?}"
            )),
        };
        let addr = line
            .strip_suffix('\n')
            .and_then(|l| l.strip_prefix("listening on http://"))
            .unwrap_or_else(|| {
                self.fail(format!(
                    "first stdout line is {line:?}, want \"listening on http://IP:PORT\\n\""
                ))
            });
        match addr.parse::<SocketAddr>() {
            Ok(a) if a.port() != 0 => self.addr = addr.to_string(),
            _ => self.fail(format!("{addr:?} in the listening line is not IP:PORT")),
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server is running").id()
    }

    /// A client for this server that can be moved to another thread.
    pub fn client(&self) -> Client {
        Client {
            addr: self.addr.clone(),
            stderr_log: self.stderr_log.clone(),
        }
    }

    /// `POST path` with no body.
    #[track_caller]
    pub fn post(&self, path: &str) -> Reply {
        self.client().post(path)
    }

    /// `GET path`.
    #[track_caller]
    pub fn get(&self, path: &str) -> Reply {
        self.client().get(path)
    }

    /// Any request.
    #[track_caller]
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Reply {
        self.client().request(method, path, headers, body)
    }

    /// SIGKILL the server and reap it.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Send SIGTERM to the server (see [`Trigd::wait_exit`]).
    pub fn sigterm(&self) {
        let pid = self.pid().to_string();
        let st = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("run kill");
        assert!(st.success(), "kill -TERM {pid} failed");
    }

    /// Wait up to `bound` for the server to exit; `None` when it is still
    /// running.
    pub fn wait_exit(&mut self, bound: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        loop {
            let c = self.child.as_mut().expect("server was started");
            match c.try_wait() {
                Ok(Some(st)) => {
                    self.child = None;
                    return Some(st);
                }
                Ok(None) if start.elapsed() < bound => thread::sleep(Duration::from_millis(20)),
                Ok(None) => return None,
                Err(e) => panic!("waiting for the server: {e}"),
            }
        }
    }

    /// Start the server again on the same directory (SIGKILL first when it
    /// is still running). The address changes.
    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    /// The last lines of `stderr.log`.
    pub fn stderr_tail(&self) -> String {
        tail_of(&self.stderr_log)
    }

    /// Panic with `msg` and the tail of `stderr.log`.
    #[track_caller]
    pub fn fail(&self, msg: impl Display) -> ! {
        panic!(
            "\n{msg}\n--- server stderr.log (tail) ---\n{}\n",
            self.stderr_tail()
        )
    }

    /// Panic with `msg` unless `cond`.
    #[track_caller]
    pub fn check(&self, cond: bool, msg: impl Display) {
        if !cond {
            self.fail(msg)
        }
    }

    /// Wait up to `bound` for `cond`, failing with `what` and the log.
    #[track_caller]
    pub fn wait_for(&self, bound: Duration, what: &str, cond: impl FnMut() -> bool) {
        if !wait_until(bound, cond) {
            self.fail(format!("timed out after {bound:?} waiting for: {what}"))
        }
    }
}

impl Drop for Trigd {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn tail_of(path: &Path) -> String {
    match fs::read(path) {
        Ok(b) => {
            let text = String::from_utf8_lossy(&b);
            // Access lines of status polls (wait loops) drown the rest.
            let is_poll = |l: &&str| l.contains(" GET /api/runs/") && l.contains("access");
            let polls = text.lines().filter(is_poll).count();
            let lines: Vec<&str> = text.lines().filter(|l| !is_poll(l)).collect();
            let from = lines.len().saturating_sub(60);
            let mut out = lines[from..].join("\n");
            if polls > 0 {
                out.push_str(&format!(
                    "\n({polls} access lines of GET /api/runs/… left out)"
                ));
            }
            if out.len() > 8000 {
                out = format!("…{}", &out[floor_char(&out, out.len() - 8000)..]);
            }
            out
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

fn floor_char(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

// ---------------------------------------------------------------------------
// HTTP client

/// A raw HTTP/1.1 client for one server (`Connection: close`, one request
/// per connection).
#[derive(Clone)]
pub struct Client {
    /// `IP:PORT`.
    pub addr: String,
    stderr_log: PathBuf,
}

impl Client {
    /// A client for any HTTP server at `addr` (`IP:PORT`); failures show
    /// the tail of `log`.
    pub fn for_addr(addr: &str, log: &Path) -> Client {
        Client {
            addr: addr.to_string(),
            stderr_log: log.to_path_buf(),
        }
    }

    /// `POST path` with no body.
    #[track_caller]
    pub fn post(&self, path: &str) -> Reply {
        self.request("POST", path, &[], b"")
    }

    /// `GET path`.
    #[track_caller]
    pub fn get(&self, path: &str) -> Reply {
        self.request("GET", path, &[], b"")
    }

    /// Send a request; panics (with the log) when the exchange itself fails.
    #[track_caller]
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Reply {
        self.try_request(method, path, headers, body)
            .unwrap_or_else(|e| {
                panic!(
                    "\n{e}\n--- server stderr.log (tail) ---\n{}\n",
                    tail_of(&self.stderr_log)
                )
            })
    }

    /// Send a request; `Err` describes a connection or protocol failure.
    pub fn try_request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Reply, String> {
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
            self.addr
        );
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        if !body.is_empty() || method != "GET" {
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        head.push_str("\r\n");
        let request = format!(
            "{}{}",
            head.trim_end(),
            if body.is_empty() {
                String::new()
            } else {
                format!("\n\n{}", String::from_utf8_lossy(body))
            }
        );
        let fail = |what: String| format!("{what}\n--- request ---\n{request}");
        let mut s = TcpStream::connect(&self.addr)
            .map_err(|e| fail(format!("cannot connect to {}: {e}", self.addr)))?;
        s.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
        s.set_write_timeout(Some(READ_TIMEOUT)).unwrap();
        s.write_all(head.as_bytes())
            .and_then(|_| s.write_all(body))
            .map_err(|e| fail(format!("cannot send the request: {e}")))?;
        let mut raw = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    raw.extend_from_slice(&buf[..n]);
                    // Stop at the end of a complete reply: a server may keep
                    // the connection open despite `Connection: close`.
                    if reply_complete(&raw) {
                        break;
                    }
                }
                // A reset after a complete reply is fine; anything else is not.
                Err(e) if raw.is_empty() => {
                    return Err(fail(format!("cannot read the reply: {e}")))
                }
                Err(_) => break,
            }
        }
        let (status, headers, body) = parse_reply(&raw).map_err(|e| {
            fail(format!(
                "malformed reply ({e}):\n{}",
                String::from_utf8_lossy(&raw[..raw.len().min(4000)])
            ))
        })?;
        Ok(Reply {
            status,
            headers,
            body,
            request,
            stderr_log: self.stderr_log.clone(),
        })
    }
}

type Parsed = (u16, Vec<(String, String)>, Vec<u8>);

/// Whether `raw` holds a whole reply with a `Content-Length` body (or a
/// finished chunked body); replies without either end at EOF.
fn reply_complete(raw: &[u8]) -> bool {
    let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    let body = &raw[end + 4..];
    if head.contains("transfer-encoding: chunked") {
        return body.ends_with(b"0\r\n\r\n");
    }
    head.lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|n| n.trim().parse::<usize>().ok())
        .is_some_and(|n| body.len() >= n)
}

fn parse_reply(raw: &[u8]) -> Result<Parsed, String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no end of headers")?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| "headers are not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().ok_or("empty reply")?;
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    if !version.starts_with("HTTP/1.") {
        return Err(format!("bad status line {status_line:?}"));
    }
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let mut headers = Vec::new();
    for l in lines {
        let (k, v) = l
            .split_once(':')
            .ok_or_else(|| format!("bad header {l:?}"))?;
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    let rest = &raw[end + 4..];
    let get = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    let body =
        if get("transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked")) {
            dechunk(rest)?
        } else if let Some(len) = get("content-length") {
            let len: usize = len
                .parse()
                .map_err(|_| format!("bad content-length {len:?}"))?;
            if rest.len() < len {
                return Err(format!(
                    "body has {} bytes, content-length {len}",
                    rest.len()
                ));
            }
            rest[..len].to_vec()
        } else {
            rest.to_vec()
        };
    Ok((status, headers, body))
}

fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let eol = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("chunk size line without CRLF")?;
        let line = std::str::from_utf8(&rest[..eol]).map_err(|_| "chunk size is not UTF-8")?;
        let size_hex = line.split(';').next().unwrap_or("").trim();
        let size =
            usize::from_str_radix(size_hex, 16).map_err(|_| format!("bad chunk size {line:?}"))?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if rest.len() < size + 2 {
            return Err("truncated chunk".into());
        }
        out.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

/// A parsed HTTP reply, with what is needed to explain a failed assertion.
pub struct Reply {
    /// Status code.
    pub status: u16,
    /// Headers in order.
    pub headers: Vec<(String, String)>,
    /// Body (de-chunked).
    pub body: Vec<u8>,
    request: String,
    stderr_log: PathBuf,
}

impl Debug for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "HTTP {}", self.status)?;
        for (k, v) in &self.headers {
            writeln!(f, "{k}: {v}")?;
        }
        let text = self.text();
        if text.len() > 6000 {
            write!(
                f,
                "\n{}… ({} bytes)",
                &text[..floor_char(&text, 6000)],
                text.len()
            )
        } else {
            write!(f, "\n{text}")
        }
    }
}

impl Reply {
    /// The body as text (lossy UTF-8).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The first header called `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON; fails when it is not.
    #[track_caller]
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| self.fail(format!("the body is not JSON: {e}")))
    }

    /// Panic with `msg`, the request, this reply and the server log.
    #[track_caller]
    pub fn fail(&self, msg: impl Display) -> ! {
        panic!(
            "\n{msg}\n--- request ---\n{}\n--- reply ---\n{self:?}\n--- server stderr.log (tail) ---\n{}\n",
            self.request,
            tail_of(&self.stderr_log)
        )
    }

    /// Fail with `msg` unless `cond`.
    #[track_caller]
    pub fn check(&self, cond: bool, msg: impl Display) {
        if !cond {
            self.fail(msg)
        }
    }

    /// Fail unless `got == want`.
    #[track_caller]
    pub fn check_eq<T: PartialEq + Debug>(&self, got: T, want: T, what: &str) {
        if got != want {
            self.fail(format!("{what}:\n  got:  {got:?}\n  want: {want:?}"))
        }
    }

    /// Fail unless the status is `status`.
    #[track_caller]
    pub fn status_is(&self, status: u16) -> &Self {
        if self.status != status {
            self.fail(format!("status is {}, want {status}", self.status))
        }
        self
    }

    /// 200 with a JSON object body; returns the body.
    #[track_caller]
    pub fn ok(&self) -> Value {
        self.status_is(200);
        let v = self.json();
        self.check(v.is_object(), "the body is not a JSON object");
        v
    }

    /// An error reply: `status`, a JSON object with a non-empty `Error`
    /// sentence and `Code == code`; returns the body.
    #[track_caller]
    pub fn err(&self, status: u16, code: &str) -> Value {
        self.status_is(status);
        let v = self.json();
        self.check(v.is_object(), "the error body is not a JSON object");
        self.check(
            v["Error"].as_str().is_some_and(|s| !s.trim().is_empty()),
            "the error body has no non-empty string \"Error\"",
        );
        self.check_eq(v["Code"].as_str(), Some(code), "\"Code\"");
        v
    }

    /// The `Run` field, checked to be a 32-hex-digit run id.
    #[track_caller]
    pub fn run_id(&self, v: &Value) -> String {
        match v["Run"].as_str() {
            Some(id) if is_run_id(id) => id.to_string(),
            other => self.fail(format!(
                "\"Run\" is {other:?}, want <instance>-<32 hex digits>"
            )),
        }
    }
}

/// Whether `s` is a run id: an instance name, `-`, then 32 hex digits
/// (or, for runs recorded before instance names, the 32 hex digits alone).
pub fn is_run_id(s: &str) -> bool {
    let hex = s
        .rsplit_once('-')
        .map_or(s, |(name, hex)| if name.is_empty() { "" } else { hex });
    hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit())
}

// ---------------------------------------------------------------------------
// Small helpers

/// Poll `cond` every 20 ms for at most `bound`; whether it became true.
pub fn wait_until(bound: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if start.elapsed() >= bound {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Percent-encode everything but the unreserved characters (RFC 3986).
pub fn enc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `&variables=<v1>&variables=<v2>…`, encoded.
pub fn vars(values: &[&str]) -> String {
    values
        .iter()
        .map(|v| format!("&variables={}", enc(v)))
        .collect()
}

/// Whether process `pid` exists and is not a zombie.
pub fn pid_alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rfind(')')
                .and_then(|i| stat[i + 1..].split_whitespace().next())
                .unwrap_or("");
            state != "Z" && state != "X"
        }
        Err(_) => false,
    }
}

/// Resident set size of `pid` in kB, from `/proc/<pid>/status`.
pub fn vm_rss_kb(pid: u32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

// ---------------------------------------------------------------------------
// CLI

/// What a `trigd` subcommand did.
pub struct Output {
    /// Exit code (`None` when killed by a signal).
    pub code: Option<i32>,
    /// stdout, lossy UTF-8.
    pub stdout: String,
    /// stderr, lossy UTF-8.
    pub stderr: String,
    cmd: String,
}

impl Output {
    /// Panic with `msg`, the command, its exit code, stdout and stderr.
    #[track_caller]
    pub fn fail(&self, msg: impl Display) -> ! {
        panic!(
            "\n{msg}\n--- command ---\n{}\n--- exit code ---\n{:?}\n--- stdout ---\n{}\n--- stderr ---\n{}\n",
            self.cmd, self.code, self.stdout, self.stderr
        )
    }

    /// Fail with `msg` unless `cond`.
    #[track_caller]
    pub fn check(&self, cond: bool, msg: impl Display) {
        if !cond {
            self.fail(msg)
        }
    }

    /// Fail unless `got == want`.
    #[track_caller]
    pub fn check_eq<T: PartialEq + Debug>(&self, got: T, want: T, what: &str) {
        if got != want {
            self.fail(format!("{what}:\n  got:  {got:?}\n  want: {want:?}"))
        }
    }

    /// Fail unless the exit code is `code`.
    #[track_caller]
    pub fn code_is(&self, code: i32) -> &Self {
        self.check_eq(self.code, Some(code), "exit code");
        self
    }

    /// stdout as JSON.
    #[track_caller]
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| self.fail(format!("stdout is not JSON: {e}")))
    }
}

/// Run `trigd ARGS…` (in the temp dir, so that no stray `./config.toml` is
/// read), feeding `stdin` when given; bounded to 30 s.
pub fn trigd(args: &[&str], stdin: Option<&str>) -> Output {
    let cmd = format!("trigd {}", args.join(" "));
    let mut child = Command::new(BIN)
        .args(args)
        .current_dir(env::temp_dir())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot spawn {cmd}: {e}"));
    if let Some(input) = stdin {
        let mut w = child.stdin.take().expect("stdin is piped");
        let input = input.to_string();
        thread::spawn(move || {
            let _ = w.write_all(input.as_bytes());
        });
    }
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Ok(out)) => Output {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            cmd,
        },
        Ok(Err(e)) => panic!("waiting for {cmd}: {e}"),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("{cmd} did not exit within 30s")
        }
    }
}
