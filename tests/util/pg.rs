//! A real PostgreSQL for the tests of the database backend: Debian's
//! server binaries (`postgresql` package) started by the test in a
//! temporary directory, never the packaged cluster.
//!
//! One server per test process ([`shared`], started on first use and
//! stopped when the process ends) with a fresh database per test
//! ([`Pg::database`]) keeps CI fast; a test that stops and starts
//! PostgreSQL under load gets a server of its own ([`Pg::start`]), stopped
//! and removed on drop.
//!
//! `initdb` refuses to run as root: as root (CI), `initdb` and `pg_ctl` run
//! as `nobody` (`runuser -u nobody --`) on a directory owned by nobody.
//! The server listens on `127.0.0.1:<free port>` with password
//! authentication (scram) for TCP, so the tests go through trigd's
//! `password_file`; the Unix socket lives in the temp dir (trust, for
//! `psql` from the test). `fsync` stays on (durability is measured);
//! `pg_stat_statements` is preloaded when installed.

use std::env;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{self, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use super::*;

/// The database role the tests' trigd instances log in as.
pub const PG_USER: &str = "trigd";
/// Its password (scram over TCP).
pub const PG_PASSWORD: &str = "trigd-test-db-pw-5e1f";

/// trigd's schema migrations, in order (`src/state/pg/schema.rs`'s
/// `MIGRATIONS`): version N is the first N.
const MIGRATIONS: [&str; 5] = [
    concat!(
        include_str!("../../src/state/pg/runs.sql"),
        include_str!("../../src/state/pg/cluster.sql"),
        include_str!("../../src/state/pg/shared.sql"),
    ),
    include_str!("../../src/state/pg/groups.sql"),
    include_str!("../../src/state/pg/indexes.sql"),
    include_str!("../../src/state/pg/entries.sql"),
    include_str!("../../src/state/pg/group_queues.sql"),
];

/// The tables and indexes of schema `version` (1 to the latest), as
/// trigd's migrations leave them, without `trigd_schema`.
pub fn schema_through(version: usize) -> String {
    MIGRATIONS[..version].concat()
}

/// The tables and indexes of every migration.
pub fn schema() -> String {
    schema_through(MIGRATIONS.len())
}

static SHARED: OnceLock<Pg> = OnceLock::new();
static PG_COUNTER: AtomicUsize = AtomicUsize::new(0);

/// The PostgreSQL server of this test process, started on first use and
/// stopped (by a watchdog) when the process ends.
pub fn shared() -> &'static Pg {
    SHARED.get_or_init(|| Pg::start("shared"))
}

/// A fresh database on the [`shared`] server for the test `name`.
pub fn pg_database(name: &str) -> PgDb {
    shared().database(name)
}

/// A PostgreSQL server in a temp dir. Dropping it stops it (immediate
/// shutdown) and removes its directory.
pub struct Pg {
    /// `<temp>/trigd-pg/<pid>-<n>`: `data/`, `sock/`, `server.log`.
    pub root: PathBuf,
    /// The TCP port on 127.0.0.1 (the same across [`Pg::stop`] /
    /// [`Pg::start_again`]).
    pub port: u16,
    bin: PathBuf,
    /// Whether `pg_stat_statements` is preloaded.
    pub stat_statements: bool,
    /// Serializes stop/start and database creation.
    lock: Mutex<()>,
}

/// One database of a [`Pg`] server, for one test.
#[derive(Clone, Debug)]
pub struct PgDb {
    /// Its name.
    pub name: String,
    /// The server's port on 127.0.0.1.
    pub port: u16,
    /// The server's Unix socket directory (for `psql`).
    pub socket_dir: PathBuf,
    bin: PathBuf,
}

impl Pg {
    /// Initialize and start a new server; `what` names it in messages.
    pub fn start(what: &str) -> Pg {
        let bin = pg_bindir();
        let n = PG_COUNTER.fetch_add(1, Ordering::SeqCst);
        let base = env::temp_dir().join("trigd-pg");
        fs::create_dir_all(&base).unwrap_or_else(|e| panic!("{}: {e}", base.display()));
        // nobody must reach its directory below it.
        let _ = fs::set_permissions(&base, fs::Permissions::from_mode(0o1777));
        let root = base.join(format!("{}-{n}-{what}", process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(root.join("sock")).expect("create the pg dir");
        let stat_statements = bin.join("../lib/pg_stat_statements.so").exists()
            || bin
                .parent()
                .and_then(|p| p.parent())
                .is_some_and(|v| v.join("lib/pg_stat_statements.so").exists());
        let pg = Pg {
            root,
            port: free_tcp_port(),
            bin,
            stat_statements,
            lock: Mutex::new(()),
        };
        pg.initdb();
        pg.start_again();
        pg.watch_this_process();
        pg
    }

    fn data(&self) -> PathBuf {
        self.root.join("data")
    }

    /// The Unix socket directory.
    pub fn socket_dir(&self) -> PathBuf {
        self.root.join("sock")
    }

    /// The server's log.
    pub fn log(&self) -> PathBuf {
        self.root.join("server.log")
    }

    /// `initdb` as the server user, with the role [`PG_USER`] /
    /// [`PG_PASSWORD`].
    fn initdb(&self) {
        let pwfile = self.root.join("pwfile");
        fs::write(&pwfile, format!("{PG_PASSWORD}\n")).expect("write pwfile");
        give_to_server_user(&self.root);
        let out = self.as_server_user(
            "initdb",
            &[
                "-D",
                &path_str(&self.data()),
                "-U",
                PG_USER,
                "--pwfile",
                &path_str(&pwfile),
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-instructions",
            ],
        );
        check_output("initdb", &out);
        let _ = fs::remove_file(&pwfile);
        let mut conf = format!(
            "\n# trigd tests\nlisten_addresses = '127.0.0.1'\nport = {}\n\
             unix_socket_directories = '{}'\nmax_connections = 300\n\
             fsync = on\nlog_min_messages = warning\n",
            self.port,
            path_str(&self.socket_dir()),
        );
        if self.stat_statements {
            conf.push_str(
                "shared_preload_libraries = 'pg_stat_statements'\n\
                 pg_stat_statements.track = all\n",
            );
        }
        let path = self.data().join("postgresql.conf");
        let mut text = fs::read_to_string(&path).expect("postgresql.conf");
        text.push_str(&conf);
        fs::write(&path, text).expect("write postgresql.conf");
    }

    /// Start the server (again, after [`Pg::stop`]) on the same port and
    /// data; waits until it accepts connections.
    pub fn start_again(&self) {
        let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let out = self.as_server_user(
            "pg_ctl",
            &[
                "start",
                "-w",
                "-t",
                "60",
                "-D",
                &path_str(&self.data()),
                "-l",
                &path_str(&self.log()),
            ],
        );
        if !out.status.success() {
            panic!(
                "pg_ctl start failed: {}\n--- server.log ---\n{}",
                describe(&out),
                fs::read_to_string(self.log()).unwrap_or_default()
            );
        }
    }

    /// Stop the server: `fast` (clients disconnected, a clean shutdown)
    /// or, with `immediate`, as a crash would (recovery at the next
    /// start).
    pub fn stop(&self, immediate: bool) {
        let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let mode = if immediate { "immediate" } else { "fast" };
        let out = self.as_server_user(
            "pg_ctl",
            &[
                "stop",
                "-w",
                "-t",
                "60",
                "-m",
                mode,
                "-D",
                &path_str(&self.data()),
            ],
        );
        check_output("pg_ctl stop", &out);
    }

    /// Serve TLS with the PEM files `cert` and `key` (copied into the
    /// data directory, owned by the server user, the key mode 0600), then
    /// reload the server. Password authentication stays as it was, so a
    /// client may still connect without TLS.
    pub fn enable_tls(&self, cert: &Path, key: &Path) {
        let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        for (from, to) in [(cert, "server.crt"), (key, "server.key")] {
            let dest = self.data().join(to);
            fs::copy(from, &dest).unwrap_or_else(|e| panic!("copy {}: {e}", from.display()));
            fs::set_permissions(&dest, fs::Permissions::from_mode(0o600)).expect("chmod");
            if is_root() {
                std::os::unix::fs::chown(&dest, Some(65534), Some(65534)).expect("chown");
            }
        }
        let path = self.data().join("postgresql.conf");
        let mut text = fs::read_to_string(&path).expect("postgresql.conf");
        text.push_str("ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n");
        fs::write(&path, text).expect("write postgresql.conf");
        let out = self.as_server_user("pg_ctl", &["reload", "-D", &path_str(&self.data())]);
        check_output("pg_ctl reload", &out);
    }

    /// A fresh database for the test `name`.
    pub fn database(&self, name: &str) -> PgDb {
        let n = PG_COUNTER.fetch_add(1, Ordering::SeqCst);
        let clean: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .take(40)
            .collect();
        let db = PgDb {
            name: format!("t{n}_{clean}"),
            port: self.port,
            socket_dir: self.socket_dir(),
            bin: self.bin.clone(),
        };
        {
            // CREATE DATABASE copies template1: one at a time.
            let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            let admin = PgDb {
                name: "postgres".into(),
                ..db.clone()
            };
            admin.psql(&format!("CREATE DATABASE {}", db.name));
        }
        if self.stat_statements {
            db.psql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
        }
        db
    }

    /// Run the server binary `tool` as the server user.
    fn as_server_user(&self, tool: &str, args: &[&str]) -> Output {
        let exe = self.bin.join(tool);
        let mut cmd = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "nobody", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        cmd.args(args)
            .current_dir(&self.root)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", exe.display()))
    }

    /// A watchdog that stops the server and removes its directory when
    /// this test process is gone (statics are never dropped; a killed
    /// test process leaves nothing running either).
    fn watch_this_process(&self) {
        let pg_ctl = self.bin.join("pg_ctl");
        let stop = format!(
            "{}'{}' stop -m immediate -D '{}' >/dev/null 2>&1",
            if is_root() {
                "runuser -u nobody -- "
            } else {
                ""
            },
            path_str(&pg_ctl),
            path_str(&self.data()),
        );
        let script = format!(
            "while [ -d /proc/{pid} ]; do sleep 1; done; {stop}; rm -rf '{root}'",
            pid = process::id(),
            root = path_str(&self.root),
        );
        let _ = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        let _ = self.as_server_user(
            "pg_ctl",
            &[
                "stop",
                "-w",
                "-m",
                "immediate",
                "-D",
                &path_str(&self.data()),
            ],
        );
        let _ = fs::remove_dir_all(&self.root);
    }
}

impl PgDb {
    /// `postgres://trigd@127.0.0.1:<port>/<db>?sslmode=disable`, the
    /// `[state] url` (no password: trigd refuses one there).
    pub fn url(&self) -> String {
        format!(
            "postgres://{PG_USER}@127.0.0.1:{}/{}?sslmode=disable",
            self.port, self.name
        )
    }

    /// Write the password to `dir/pg-password` and return the `[state]`
    /// table pointing at this database; `extra` lines go into it (e.g.
    /// `lease = "3s"`).
    pub fn state_toml(&self, dir: &Path, extra: &str) -> String {
        let pw = dir.join("pg-password");
        fs::write(&pw, format!("{PG_PASSWORD}\n")).expect("write pg-password");
        format!(
            "\n[state]\nurl = {:?}\npassword_file = {:?}\n{extra}\n",
            self.url(),
            path_str(&pw)
        )
    }

    /// Append the `[state]` table of this database to `dir`'s
    /// `config.toml` (written by [`setup`]).
    pub fn configure(&self, dir: &TestDir, extra: &str) {
        dir.append("config.toml", &self.state_toml(&dir.root, extra));
    }

    /// Run `sql` with `psql` over the Unix socket; its unaligned output
    /// (`|` between columns), panicking with the error when it fails.
    pub fn psql(&self, sql: &str) -> String {
        let out = self.try_psql(sql);
        match out {
            Ok(s) => s,
            Err(e) => panic!("psql {sql:?} on {}: {e}", self.name),
        }
    }

    /// Like [`PgDb::psql`], the error returned (the server may be down).
    pub fn try_psql(&self, sql: &str) -> Result<String, String> {
        let out = Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
            .arg("-h")
            .arg(&self.socket_dir)
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                PG_USER,
                "-d",
                &self.name,
            ])
            .args(["-c", sql])
            .env("PGCONNECT_TIMEOUT", "5")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run psql: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(describe(&out))
        }
    }

    /// A single number from `sql`.
    pub fn count(&self, sql: &str) -> i64 {
        let s = self.psql(sql);
        s.parse()
            .unwrap_or_else(|_| panic!("{sql:?} gave {s:?}, not a number"))
    }

    /// Run `sql` (a statement that takes a lock, such as `SELECT … FOR
    /// UPDATE`) in a transaction left open by a `psql` session, returning
    /// once it has run: the lock is held until [`Held::release`] (or drop).
    pub fn hold(&self, sql: &str) -> Held {
        let mut child = Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
            .arg("-h")
            .arg(&self.socket_dir)
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                PG_USER,
                "-d",
                &self.name,
            ])
            .env("PGCONNECT_TIMEOUT", "5")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run psql: {e}"));
        let mut stdin = child.stdin.take().expect("piped stdin");
        writeln!(stdin, "BEGIN;\n{sql};\nSELECT 'held';").expect("write to psql");
        let out = BufReader::new(child.stdout.take().expect("piped stdout"));
        // The statement's own rows come first; EOF: psql failed.
        let held = out
            .lines()
            .map_while(Result::ok)
            .any(|line| line.trim() == "held");
        assert!(held, "psql did not run {sql:?}");
        Held {
            child,
            stdin: Some(stdin),
        }
    }

    /// The runs per state and holder (`queued/-: 3, finished/alpha: 64`),
    /// for a test's failure message: where runs that did not end are.
    pub fn runs_by_state(&self) -> String {
        self.try_psql(
            "SELECT coalesce(string_agg(s, ', ' ORDER BY s), 'no runs') FROM ( \
             SELECT state || '/' || coalesce(instance, '-') || ': ' || count(*) AS s \
             FROM trigd_runs GROUP BY state, instance) AS t",
        )
        .unwrap_or_else(|e| format!("(cannot count the runs: {e})"))
    }

    /// Statements executed in this database so far, from
    /// `pg_stat_statements` (`None` when it is not installed); the tests'
    /// own `psql` statements are counted too: take differences.
    pub fn statement_calls(&self) -> Option<i64> {
        let sql = "SELECT coalesce(sum(calls),0)::bigint FROM pg_stat_statements \
                   WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                   AND userid = (SELECT oid FROM pg_roles WHERE rolname = current_user)";
        self.try_psql(sql).ok()?.parse().ok()
    }
}

/// A `psql` session holding a transaction open ([`PgDb::hold`]).
pub struct Held {
    child: process::Child,
    stdin: Option<process::ChildStdin>,
}

impl Held {
    /// Commit the transaction (its locks are released) and end `psql`.
    pub fn release(mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = writeln!(stdin, "COMMIT;");
        }
        let _ = self.child.wait();
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.stdin.take().is_some() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The directory of the PostgreSQL server binaries: `pg_config --bindir`
/// when it holds `initdb` (Debian's libpq-dev `pg_config` says /usr/bin),
/// else the newest `/usr/lib/postgresql/<version>/bin`; panics with
/// install advice when there is none.
pub fn pg_bindir() -> PathBuf {
    let from_config = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .filter(|p| p.join("initdb").exists());
    if let Some(p) = from_config {
        return p;
    }
    let mut found: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, p)| p).expect(
        "PostgreSQL server binaries not found (pg_config --bindir, \
         /usr/lib/postgresql/*/bin): apt-get install postgresql \
         (the packaged cluster need not run)",
    )
}

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() == 0 }
}

/// As root, hand `dir` to `nobody` (initdb refuses root; the data dir
/// must belong to the server's user).
fn give_to_server_user(dir: &Path) {
    if !is_root() {
        return;
    }
    let nobody = 65534;
    for entry in [dir.to_path_buf(), dir.join("sock"), dir.join("pwfile")] {
        if entry.exists() {
            std::os::unix::fs::chown(&entry, Some(nobody), Some(nobody))
                .unwrap_or_else(|e| panic!("chown {}: {e}", entry.display()));
        }
    }
    let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o755));
}

fn free_tcp_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn path_str(p: &Path) -> String {
    p.to_str().expect("temp paths are UTF-8").to_string()
}

fn describe(out: &Output) -> String {
    format!(
        "{}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn check_output(what: &str, out: &Output) {
    assert!(out.status.success(), "{what} failed: {}", describe(out));
}

/// How long a test waits for something the database makes happen.
pub const PG_WAIT: Duration = Duration::from_secs(30);
