//! The test harness: a per-test directory ([`dir`]), the `trigd` server as
//! a child process ([`server`]), one HTTP/1.1 client for every test, raw
//! bytes included ([`http`]), bounded polling, a CLI runner ([`cli`]) and
//! a real PostgreSQL in a temp dir for the database backend ([`pg`]).
//!
//! Every assertion helper panics with everything needed to understand the
//! failure without re-running: the request, the whole reply and the tail of
//! the server's `stderr.log` (or, for the CLI, the command line with its
//! stdout and stderr). Nothing here sleeps a fixed time to wait for a state:
//! [`wait_until`] polls a condition with a bound.

pub mod cli;
pub mod dir;
pub mod http;
pub mod pg;
pub mod server;

pub use cli::*;
pub use dir::*;
pub use http::*;
pub use pg::*;
pub use server::*;

use std::fmt::{Debug, Display};
use std::fs;
use std::thread;
use std::time::{Duration, Instant};

use argon2::password_hash::{PasswordHasher, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_trigd");

/// An API key with access to every program.
pub const KEY: &str = "trigd-test-key-all-6f1d2c9a";
/// An API key limited to workspace `ops`.
pub const KEY_OPS: &str = "trigd-test-key-ops-81ac3e57";
/// An API key limited to program 2.
pub const KEY_P2: &str = "trigd-test-key-program2-c0ffee11";

/// Default bound for [`wait_until`] in tests: a bound for what never
/// comes, not a measure (a debug build beside a full test run on a loaded
/// 2-core machine took over 10 s to start).
pub const WAIT: Duration = Duration::from_secs(30);

/// Lowercase hex sha256 of `s`, as `[[api_keys]] sha256` expects.
pub fn sha256_hex(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

/// An argon2id hash of `password` with tiny parameters, for `[[users]]
/// password`: the server verifies with the parameters in the hash, so tests
/// stay fast.
pub fn cheap_hash(password: &str) -> String {
    let params = Params::new(8, 1, 1, None).expect("valid argon2 params");
    let salt = SaltString::encode_b64(b"trigd-test-salt!").expect("salt");
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
        .hash_password(password.as_bytes(), &salt)
        .expect("hash")
        .to_string()
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

/// What a failed check can be explained with: a [`Reply`] (the request,
/// the reply and the server log), a CLI [`Output`] (the command line, its
/// stdout and stderr) or the [`Trigd`] server (the tail of its log).
pub trait Explain {
    /// Panic with `msg` and everything needed to understand it.
    fn fail(&self, msg: impl Display) -> !;

    /// Fail with `msg` unless `cond`.
    #[track_caller]
    fn check(&self, cond: bool, msg: impl Display) {
        if !cond {
            self.fail(msg)
        }
    }

    /// Fail unless `got == want`.
    #[track_caller]
    fn check_eq<T: PartialEq + Debug>(&self, got: T, want: T, what: &str) {
        if got != want {
            self.fail(format!("{what}:\n  got:  {got:?}\n  want: {want:?}"))
        }
    }
}

// ---------------------------------------------------------------------------
// Runs

/// `GET /api/runs/<id>` with [`KEY`]: the run's record, asserted 200 JSON.
#[track_caller]
pub fn run_record(t: &Trigd, id: &str) -> Value {
    t.get(&format!("/api/runs/{id}?api_key={KEY}")).ok()
}

/// Wait until the `State` of run `id` is `state`; its record.
#[track_caller]
pub fn wait_run_state(t: &Trigd, id: &str, state: &str) -> Value {
    let mut last = Value::Null;
    let ok = wait_until(WAIT, || {
        last = run_record(t, id);
        last["State"] == json!(state)
    });
    if !ok {
        t.fail(format!(
            "run {id} did not reach State {state:?}; last status: {last}"
        ))
    }
    last
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

/// The session id of process `pid` (`None`: gone).
pub fn session_of(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    // state ppid pgrp session …
    rest.split_whitespace().nth(3)?.parse().ok()
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

/// Run `openssl args` in `dir` (certificates for the TLS and ACME tests);
/// panics with its output when it fails.
pub fn openssl(dir: &TestDir, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .args(args)
        .current_dir(&dir.root)
        .output()
        .expect("run openssl");
    assert!(out.status.success(), "openssl {args:?}: {out:?}");
}

/// Run Python `script` in `dir` with the official `standardwebhooks`
/// library: the interpreter named by `TRIGD_STANDARDWEBHOOKS_PYTHON` (the
/// venv `.ci/run` makes), else `python3`. Its stdout, trimmed; panics with
/// its output when it fails.
pub fn standardwebhooks_py(dir: &TestDir, script: &str) -> String {
    let python =
        std::env::var("TRIGD_STANDARDWEBHOOKS_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = std::process::Command::new(&python)
        .args(["-c", script])
        .current_dir(&dir.root)
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "{python} (needs `pip install standardwebhooks==1.1.0`): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
