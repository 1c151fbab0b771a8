//! Everything trigd keeps: the state directory (`state_dir`; application
//! keys in `shared_state_dir`, by default the same). Only this module opens
//! a path in it (`tests/modules.rs` checks); what the kept things mean (who
//! may see a run, when a callback is retried, how a session is checked)
//! stays with `runs/`, `access/` and the others, which call the functions
//! here. The manual's "State directory" table (docs/operations.md) lists the same files
//! (`tests/state_table.rs` compares the two).
//!
//! | Kind | Path | Format | Written | After `kill -9` |
//! |---|---|---|---|---|
//! | run records | `runs.log` | JSON lines, one whole record per state change, last line of a run wins | append; the line accepting an async run is `fdatasync`ed before it is answered (group commit), other lines are not (a cancel's is); compaction: temp file, fsync, rename, fsync of the dir, at about twice `run_retention` lines and once after a start that found runs past it (start-up rewrites nothing: it cuts a torn last line off and appends a line per run it changes) | every line written (a torn last line is skipped); queued runs stay queued, running ones are queued again (`retry_on_restart`) or recorded `interrupted`. Power loss: lines up to the last sync |
//! | kept output | `output/<32 hex>`, or the ending `runs.log` line's `Output` | frames: tag byte, 4-byte big-endian length, bytes; the last frame may be open | held in memory up to 4 KiB and 50 ms after its first byte (`output.rs`), then appended while the run executes, never synced; a run ending first has it in its record instead; removed with its record | every frame written; a torn frame is skipped; files of unknown runs are removed at start; output held in memory is lost |
//! | idempotency claims | `idempotency.log` | JSON lines: claim (hashes, run id, time), `C` started, `D` given back | append; a claim is `fdatasync`ed before its run starts, `C`/`D` lines are not; compaction (atomic rename) at start and at about twice the lines needed | every claim; a claim whose run is not in `runs.log` and never started is claimed anew |
//! | callback spool | `callbacks/<20-digit seq>.json` | JSON: the body to send, URL, attempts | one file per pending delivery, atomic rename and fsync of the dir per change; removed once the delivery's end is in `runs.log` | every pending delivery, sent again at start; an unreadable file is renamed `.bad` |
//! | application keys | `app_keys.json` | pretty JSON object by `<workspace>/<member>`: sha256, hint, time | atomic rename (mode 0600), under the lock below | the old or the new file |
//! | application key lock | `app_keys.lock` | empty | created once; `flock` by each writer (server, `trigd app-key`) | nothing to keep |
//! | sessions | `sessions.json` | JSON object by sha256 of the token | atomic rename (mode 0600) at login and logout, last-seen lazily | the old or the new file; last-seen up to `min(60s, session_idle / 4)` behind |
//! | request bodies | `bodies/body-<24 hex>` | the raw request body | created 0600 before the run, never synced; removed when the run's job ends | removed at the next start; a queued run that needed one is recorded `failed` |
//! | generated passwords | `passwords.json` | pretty JSON object: user → argon2 hash | temp file `.passwords.json.tmp`, fsync, rename (mode 0600), at the first start that needs one | the old or the new file |
//! | schedule marks | `schedules.json` | JSON object: schedule id → the last occurrence handled | atomic rename, after the `runs.log` lines (synced) of the occurrences it covers | the old or the new file; occurrences recorded but not yet marked are found in the newest run records at start, so none fires twice |
//! | ACME account and certificate | `acme/` (mode 0700): `account.json`, `certificate.pem`, `certificate.json` | JSON (account URL and private key, its directory); PEM (the certificate's private key and full chain, one file); JSON (domains, directory, times) | atomic rename (mode 0600) when the account is made and when a certificate is issued (the PEM before its JSON) | the old or the new file; a PEM whose JSON does not match is ordered again |
//! | server lock | `trigd.lock` | the server's pid, as text | created once (mode 0600); `flock` held by `trigd serve` from start to exit, the pid written when it is taken | nothing to keep: the kernel releases the lock with the process |
//!
//! Temporary files (`<file>.tmp`) are the half-written side of an atomic
//! rename: a crash leaves at most one per file, replaced by the next write.
//!
//! # The seam for a second backend
//!
//! [`State`] is the one door: everything kept is opened through it, and
//! nothing above `state/` names a path in the state dir ([`Kept`] names
//! every file). Each kind of thing kept has one type here whose methods are
//! the whole interface its users see: [`store::RunStore`] (run records,
//! [`record::RunRecord`]: `append`, `record`, `update`, `get`, `list` with
//! a [`store::RunFilter`] (scope, filters, a [`store::Cursor`], a limit;
//! its index in memory is [`index`]); the queue of accepted runs
//! is its `queued` records, handed to the runner by `open`),
//! [`idempotency::Log`], [`keys::KeyFile`],
//! [`sessions::SessionFile`], [`spool::Spool`], [`output`] (kept output),
//! [`bodies::BodyFile`], [`passwords`] (read by the config loader),
//! [`schedules::MarkFile`] (a database backend keeps the marks in the
//! transaction that records the occurrence, and takes a lease per
//! occurrence there so that it fires once per cluster: `schedule/`),
//! and [`acme::AcmeFiles`].
//! The second backend (PostgreSQL, [`pg`]) is a variant inside each of
//! these types (an enum of the file side and the database side, chosen
//! once at open), not a rewrite of callers and not a trait: each type has
//! exactly two sides, both here, and an enum keeps every call site a plain
//! method call with no boxing.
//! Kept output and request bodies stay files on each host whatever the
//! backend: they are read by path (`follow`, a step's stdin). With the
//! database, the executing instance also copies kept output to it
//! (`pg::output`), and another instance reads that copy into a temporary
//! `output/<hex>.<16 hex>.mirror` file, removed when its reader is done.
//! With the database, application keys, sessions and the limiters'
//! windows are its tables `trigd_app_keys`, `trigd_sessions` and
//! `trigd_limits` ([`pg::keys`], [`pg::sessions`], [`pg::limits`]; the
//! schema is `pg/shared.sql`): `access` picks the side once, when it opens
//! them, and a watcher thread ([`pg::keys::KeyTable::watch`]) keeps each
//! instance's copy of the keys current by `LISTEN`/`NOTIFY`.
//!
//! # The durable unit
//!
//! An accepted run, its idempotency claim and its queue entry must be kept
//! together or not at all. Today:
//! - the queue entry *is* the run's record: an async run is accepted by one
//!   `runs.log` line in state `queued` carrying its input, synced before the
//!   answer; at start every `queued` line is queued again in order. One line,
//!   one write: the run and its queue entry cannot part;
//! - the claim is written (and synced) to `idempotency.log` *before* that
//!   line. A crash between the two leaves a claim whose run id is in no
//!   record and never started (no `C` line): the next request with the key
//!   claims it anew (`runs::idempotency`), so the claim counts only once its
//!   run is recorded. A record never exists without its claim.
//! - where it does not hold: the two files are synced separately, so after
//!   a power loss (not `kill -9`) a `C` line may be lost while the run's
//!   line survives; the key then repeats the run only while `runs.log` still
//!   holds it (`run_retention`). A single-transaction backend commits the
//!   claim and the record together and closes that gap.
//!
//! With the database (`[state] url`, [`pg`]): the claim waits in memory
//! ([`pg::claims::Pending`]) for its run's first write, and one statement
//! inserts both or neither (`pg::runs`, the claim first: a key another
//! request holds keeps the run out, and that request's run is answered
//! instead). Concurrent writes share a statement (and a commit), as
//! concurrent async accepts share an `fdatasync` of `runs.log`.

pub mod acme;
pub mod bodies;
pub mod commit;
pub mod delivery;
pub mod file;
pub mod filter;
pub mod idempotency;
pub mod index;
pub mod keys;
pub mod output;
pub mod passwords;
pub mod pg;
pub mod record;
pub mod schedules;
pub mod sessions;
pub mod spool;
pub mod store;
#[cfg(test)]
pub(crate) mod test_dir;
pub mod time;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where trigd keeps its state, and the one door every kept thing is opened
/// through: the run store, the idempotency claims, the application keys,
/// the sessions, the callback spool, request bodies. A directory
/// (`state_dir`) and the directory of application keys
/// (`shared_state_dir`), and with `[state] url` a PostgreSQL database
/// ([`Backend::Database`]) for what instances share; each `open_*`/`*_file`
/// picks its side, so nothing above `state/` changes.
#[derive(Debug, Clone)]
pub struct State {
    dir: PathBuf,
    shared: PathBuf,
    backend: Backend,
    /// `trigd.lock`, open and locked while the server holds the state dir
    /// ([`State::hold`]); dropped with the last clone.
    _held: Option<Arc<fs::File>>,
}

/// Where the shared things are kept.
#[derive(Debug, Clone)]
pub enum Backend {
    /// In `state_dir` (and `shared_state_dir`): one host.
    Files,
    /// In a PostgreSQL database several instances share; kept output of
    /// running runs and request bodies stay in `state_dir`.
    Database(Arc<pg::Db>),
}

impl PartialEq for State {
    fn eq(&self, other: &State) -> bool {
        let same_backend = match (&self.backend, &other.backend) {
            (Backend::Files, Backend::Files) => true,
            (Backend::Database(a), Backend::Database(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        self.dir == other.dir && self.shared == other.shared && same_backend
    }
}

impl Eq for State {}

impl State {
    /// The state kept in `state_dir`, application keys in
    /// `shared_state_dir`. Nothing is opened yet.
    pub fn new(state_dir: &Path, shared_state_dir: &Path) -> State {
        State {
            dir: state_dir.to_path_buf(),
            shared: shared_state_dir.to_path_buf(),
            backend: Backend::Files,
            _held: None,
        }
    }

    /// Hold the state dir for this server: `trigd.lock` locked (`flock`)
    /// for as long as the returned state (or a clone) lives, with this
    /// process's pid in it. Two servers on one state dir would take each
    /// other's runs for their own (one `runs.log` appended by both, the
    /// other's running runs recorded `interrupted` at start and their
    /// processes stopped), so a second one waits up to `wait` for the lock
    /// (a server just killed releases it as its process ends), then
    /// refuses, naming the holder.
    ///
    /// # Errors
    /// The lock file cannot be made or locked, or another server holds it.
    pub fn hold(self, wait: std::time::Duration) -> Result<State, HoldError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let path = Kept::ServerLock.path_in(&self.dir);
        let file = fs::create_dir_all(&self.dir)
            .and_then(|()| {
                fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .mode(0o600)
                    .open(&path)
            })
            .map_err(|e| HoldError::Io(path.clone(), e))?;
        let until = std::time::Instant::now() + wait;
        while !crate::sys::try_lock(&file).map_err(|e| HoldError::Io(path.clone(), e))? {
            if std::time::Instant::now() >= until {
                let pid = fs::read_to_string(&path).ok();
                let pid = pid.and_then(|t| t.trim().parse().ok());
                return Err(HoldError::InUse { dir: self.dir, pid });
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let mut f = &file;
        file.set_len(0)
            .and_then(|()| writeln!(f, "{}", std::process::id()))
            .map_err(|e| HoldError::Io(path, e))?;
        Ok(State {
            _held: Some(Arc::new(file)),
            ..self
        })
    }

    /// The same directories, the shared things in `db`.
    pub fn with_db(self, db: Arc<pg::Db>) -> State {
        State {
            backend: Backend::Database(db),
            ..self
        }
    }

    /// The database, with the PostgreSQL backend.
    pub fn db(&self) -> Option<&Arc<pg::Db>> {
        match &self.backend {
            Backend::Database(db) => Some(db),
            Backend::Files => None,
        }
    }

    /// Where `kept` is (for messages and for the file backend's openers).
    pub fn path(&self, kept: Kept) -> PathBuf {
        match kept {
            Kept::AppKeys | Kept::AppKeysLock => kept.path_in(&self.shared),
            _ => kept.path_in(&self.dir),
        }
    }

    /// Open the run records ([`store::RunStore::open`]): the store, and the
    /// queue of accepted runs to start again, in order. In the database
    /// (written as `instance`), nothing is queued again here: the leases
    /// decide.
    ///
    /// # Errors
    /// The run log cannot be created, read or compacted.
    pub fn open_runs(
        &self,
        retention: usize,
        instance: &str,
        retry: impl Fn(&mut record::RunRecord) -> bool,
    ) -> io::Result<(store::RunStore, Vec<String>)> {
        match &self.backend {
            Backend::Files => store::RunStore::open(&self.dir, retention, retry),
            Backend::Database(db) => {
                let runs =
                    store::RunStore::database(Arc::clone(db), instance, &self.dir, retention);
                Ok((runs, Vec::new()))
            }
        }
    }

    /// Open the idempotency claims made at `oldest` (Unix seconds) or later.
    ///
    /// # Errors
    /// The claim log cannot be read or compacted.
    pub fn open_claims(&self, oldest: u64) -> io::Result<(idempotency::Log, idempotency::Loaded)> {
        idempotency::Log::open(&self.dir, oldest)
    }

    /// Open the callback spool: it and the deliveries pending in it, in
    /// order (with the database: those instance `me` holds).
    ///
    /// # Errors
    /// The spool cannot be created or listed.
    pub fn open_spool(&self, me: &str) -> io::Result<(spool::Spool, Vec<spool::Pending>)> {
        match self.db() {
            Some(db) => spool::Spool::database(pg::spool::DbSpool::new(Arc::clone(db), me)),
            None => spool::Spool::open(&self.dir),
        }
    }

    /// The application keys.
    pub fn key_file(&self) -> keys::KeyFile {
        keys::KeyFile::new(&self.shared)
    }

    /// The login sessions.
    pub fn session_file(&self) -> sessions::SessionFile {
        sessions::SessionFile::new(&self.dir)
    }

    /// The last occurrence each schedule handled.
    pub fn schedule_marks(&self) -> schedules::MarkFile {
        schedules::MarkFile::new(&self.dir)
    }

    /// The ACME account and certificate.
    pub fn acme_files(&self) -> acme::AcmeFiles {
        acme::AcmeFiles::new(&self.dir)
    }

    /// Where request bodies read from a file are written.
    pub fn bodies_dir(&self) -> PathBuf {
        bodies::dir(&self.dir)
    }
}

/// Why [`State::hold`] did not hold the state dir.
#[derive(Debug)]
pub enum HoldError {
    /// `trigd.lock` could not be made or locked.
    Io(PathBuf, io::Error),
    /// Another server holds it (its pid, when the file says it).
    InUse {
        /// The state dir.
        dir: PathBuf,
        /// The holder's pid, from `trigd.lock`.
        pid: Option<u32>,
    },
}

impl std::fmt::Display for HoldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HoldError::Io(path, e) => write!(f, "{}: {e}", path.display()),
            HoldError::InUse { dir, pid } => {
                let who = pid.map_or("another trigd".to_string(), |p| {
                    format!("another trigd (pid {p})")
                });
                write!(
                    f,
                    "state_dir {} is in use by {who}: two servers on one state directory \
                     would take each other's runs for their own; stop the other one, or give \
                     this one a state_dir of its own",
                    dir.display()
                )
            }
        }
    }
}

/// Every kind of file in the state dir, each with its path; the rows of the
/// table above, in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// `runs.log`.
    Runs,
    /// `output/`, one file per run.
    Output,
    /// `idempotency.log`.
    Idempotency,
    /// `callbacks/`, one file per pending delivery.
    Callbacks,
    /// `app_keys.json` (in `shared_state_dir`).
    AppKeys,
    /// `app_keys.lock` (in `shared_state_dir`).
    AppKeysLock,
    /// `sessions.json`.
    Sessions,
    /// `bodies/`, one file per request body a run reads from a file.
    Bodies,
    /// `passwords.json`.
    Passwords,
    /// `schedules.json`.
    Schedules,
    /// `acme/`: the ACME account and certificate.
    Acme,
    /// `trigd.lock`: held by the server for as long as it runs.
    ServerLock,
}

impl Kept {
    /// Every kind, in the table's order.
    pub const ALL: [Kept; 12] = [
        Kept::Runs,
        Kept::Output,
        Kept::Idempotency,
        Kept::Callbacks,
        Kept::AppKeys,
        Kept::AppKeysLock,
        Kept::Sessions,
        Kept::Bodies,
        Kept::Passwords,
        Kept::Schedules,
        Kept::Acme,
        Kept::ServerLock,
    ];

    /// Its file or directory name in the state dir.
    pub const fn name(self) -> &'static str {
        match self {
            Kept::Runs => "runs.log",
            Kept::Output => "output",
            Kept::Idempotency => "idempotency.log",
            Kept::Callbacks => "callbacks",
            Kept::AppKeys => "app_keys.json",
            Kept::AppKeysLock => "app_keys.lock",
            Kept::Sessions => "sessions.json",
            Kept::Bodies => "bodies",
            Kept::Passwords => "passwords.json",
            Kept::Schedules => "schedules.json",
            Kept::Acme => "acme",
            Kept::ServerLock => "trigd.lock",
        }
    }

    /// Its path in `state_dir` (for `AppKeys` and `AppKeysLock`: pass
    /// `shared_state_dir`).
    pub fn path_in(self, state_dir: &Path) -> PathBuf {
        state_dir.join(self.name())
    }
}
