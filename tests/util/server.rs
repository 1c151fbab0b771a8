//! `trigd serve` as a child process, and the tail of its log for failure
//! messages.

use std::env;
use std::fmt::Display;
use std::fs::{self, OpenOptions};
use std::io::{self, BufRead, BufReader};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use super::*;

/// How long the server gets to print its `listening on` line: a bound
/// for a server that never starts, not a measure (a debug build started
/// beside a full test run on a loaded 2-core machine took over 10 s).
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A running `trigd serve`. Dropping it kills the process and waits for it.
pub struct Trigd {
    child: Option<Child>,
    /// `IP:PORT` from the `listening on http(s)://IP:PORT` line.
    pub addr: String,
    config: PathBuf,
    /// The server's stderr, appended to across restarts.
    pub stderr_log: PathBuf,
    /// Extra environment variables of the server process.
    env: Vec<(String, String)>,
    /// How long a start may take (reading a big state dir takes longer).
    start_timeout: Duration,
    /// The server leads a session of its own ([`Trigd::start_own_session`]).
    own_session: bool,
    /// `RLIMIT_AS` of the server ([`Trigd::start_capped`]).
    mem_cap: Option<u64>,
    /// `--listen` ([`Trigd::start_listen`]; `127.0.0.1:0` by default).
    listen: String,
}

impl Trigd {
    /// Start `trigd serve --config <dir>/config.toml --listen 127.0.0.1:0`
    /// and wait (bounded) for its first stdout line.
    pub fn start(dir: &TestDir) -> Trigd {
        Trigd::start_within(dir, START_TIMEOUT)
    }

    /// Like [`Trigd::start`], with extra environment variables (kept across
    /// restarts).
    pub fn start_env(dir: &TestDir, env: &[(&str, &str)]) -> Trigd {
        let mut t = Trigd::unstarted(dir);
        t.env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        t.spawn();
        t
    }

    /// [`Trigd::start`] with a start allowed to take up to `bound` (a state
    /// dir with very many runs).
    pub fn start_within(dir: &TestDir, bound: Duration) -> Trigd {
        let mut t = Trigd::unstarted(dir);
        t.start_timeout = bound;
        t.spawn();
        t
    }

    /// Like [`Trigd::start`], with the server leading a session of its
    /// own (kept across restarts): its descendants, orphans reparented
    /// away from it included, are the processes whose session id is its
    /// pid ([`session_of`]); no other process on the machine has that
    /// session id while it lives.
    pub fn start_own_session(dir: &TestDir) -> Trigd {
        let mut t = Trigd::unstarted(dir);
        t.own_session = true;
        t.spawn();
        t
    }

    /// Like [`Trigd::start`], with the server's address space capped at
    /// `bytes` (`RLIMIT_AS`, kept across restarts), as an operator's
    /// systemd `MemoryMax` would cap it: an input that makes it allocate
    /// without bound aborts it at once instead of slowing the test down.
    pub fn start_capped(dir: &TestDir, bytes: u64) -> Trigd {
        let mut t = Trigd::unstarted(dir);
        t.mem_cap = Some(bytes);
        t.spawn();
        t
    }

    /// Like [`Trigd::start`], listening on `listen` (`[::]:0`: dual-stack,
    /// where an IPv4 client is an IPv4-mapped IPv6 address); [`Trigd::addr`]
    /// is the address printed (`[::]:PORT`).
    pub fn start_listen(dir: &TestDir, listen: &str) -> Trigd {
        let mut t = Trigd::unstarted(dir);
        t.listen = listen.to_string();
        t.spawn();
        t
    }

    /// The server of `dir` with the default settings, not started yet.
    fn unstarted(dir: &TestDir) -> Trigd {
        Trigd {
            child: None,
            addr: String::new(),
            config: dir.path("config.toml"),
            stderr_log: dir.path("stderr.log"),
            env: Vec::new(),
            start_timeout: START_TIMEOUT,
            own_session: false,
            mem_cap: None,
            listen: "127.0.0.1:0".to_string(),
        }
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
            .arg(&self.listen)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr);
        if env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "info");
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        if self.own_session {
            // SAFETY: setsid is async-signal-safe; nothing else runs
            // between fork and exec.
            unsafe {
                cmd.pre_exec(|| {
                    if libc::setsid() < 0 {
                        return Err(io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        if let Some(bytes) = self.mem_cap {
            cap_address_space(&mut cmd, bytes);
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {BIN}: {e}"));
        let stdout = child.stdout.take().expect("stdout is piped");
        let got = first_line(stdout).recv_timeout(self.start_timeout);
        self.child = Some(child);
        let line = match got {
            Ok(Ok(line)) => line,
            Ok(Err(e)) => self.fail(format!("reading the server's stdout failed: {e}")),
            Err(_) => self.fail(format!(
                "no `listening on` line on stdout within {:?}",
                self.start_timeout
            )),
        };
        let addr = line
            .strip_suffix('\n')
            .and_then(|l| {
                l.strip_prefix("listening on http://")
                    .or_else(|| l.strip_prefix("listening on https://"))
            })
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
        Client::for_addr(&self.addr, &self.stderr_log)
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

    /// Wait up to `bound` for `cond`, failing with `what` and the log.
    #[track_caller]
    pub fn wait_for(&self, bound: Duration, what: &str, cond: impl FnMut() -> bool) {
        if !wait_until(bound, cond) {
            self.fail(format!("timed out after {bound:?} waiting for: {what}"))
        }
    }
}

impl Explain for Trigd {
    /// Panic with `msg` and the tail of `stderr.log`.
    #[track_caller]
    fn fail(&self, msg: impl Display) -> ! {
        panic!(
            "\n{msg}\n--- server stderr.log (tail) ---\n{}\n",
            self.stderr_tail()
        )
    }
}

impl Drop for Trigd {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Cap the address space of the process `cmd` starts at `bytes`
/// (`RLIMIT_AS`), as an operator's systemd `MemoryMax` would cap it.
pub fn cap_address_space(cmd: &mut Command, bytes: u64) {
    let lim = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: bytes,
    };
    // SAFETY: setrlimit is async-signal-safe; `lim` is a copy.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_AS, &lim) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The first line a child prints on `stdout` (its `listening on` line),
/// read on a thread that then keeps draining the pipe so that the child
/// never blocks on it; receive it with a bound.
pub fn first_line(stdout: ChildStdout) -> mpsc::Receiver<io::Result<String>> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        let mut line = String::new();
        let _ = tx.send(r.read_line(&mut line).map(|_| line));
        let _ = io::copy(&mut r, &mut io::sink());
    });
    rx
}

/// The end of a server log, for failure messages.
pub(super) fn tail_of(path: &Path) -> String {
    if path.as_os_str().is_empty() {
        return "(no server log)".into();
    }
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

/// The first character boundary of `s` at or after `i`.
pub(super) fn floor_char(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}
