//! Run `trigd` subcommands with a bound.

use std::env;
use std::fmt::Display;
use std::io::Write;
use std::process::{self, Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use serde_json::Value;

use super::{Explain, BIN};

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

impl Explain for Output {
    /// Panic with `msg`, the command, its exit code, stdout and stderr.
    #[track_caller]
    fn fail(&self, msg: impl Display) -> ! {
        panic!(
            "\n{msg}\n--- command ---\n{}\n--- exit code ---\n{:?}\n--- stdout ---\n{}\n--- stderr ---\n{}\n",
            self.cmd, self.code, self.stdout, self.stderr
        )
    }
}

impl Output {
    /// Fail unless the exit code is `code`.
    #[track_caller]
    pub fn code_is(&self, code: i32) -> &Self {
        self.check_eq(self.code, Some(code), "exit code");
        self
    }

    /// The key `trigd keygen` printed: its `tk_…` line on stderr.
    #[track_caller]
    pub fn printed_key(&self) -> String {
        self.stderr
            .lines()
            .find(|l| l.starts_with("tk_"))
            .unwrap_or_else(|| self.fail("no key line on stderr"))
            .trim()
            .to_string()
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
    let out = wait_bounded(child, &cmd);
    Output {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        cmd,
    }
}

/// Wait at most 30 s for `child` (described as `cmd` in failures) and
/// collect its output; SIGKILL it and panic when it takes longer.
pub fn wait_bounded(child: Child, cmd: &str) -> process::Output {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => panic!("waiting for {cmd}: {e}"),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("{cmd} did not exit within 30s")
        }
    }
}
