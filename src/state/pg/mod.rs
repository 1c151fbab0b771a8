//! The PostgreSQL backend (`[state] url`): a bounded pool of connections
//! ([`Db`]), the schema and its migrations ([`schema`]), and one module
//! per kind of thing kept there. The client is the `postgres` crate: each
//! connection runs a small current-thread tokio runtime inside; callers
//! stay synchronous.
//!
//! Nothing waits past a bound: a connection is opened within
//! `CONNECT_TIMEOUT_SECS`, a statement runs within `statement_timeout`
//! (set per connection), an unanswered socket is given up after
//! `tcp_user_timeout`, and a request waits for a free connection of the
//! pool at most the connect timeout. Any of these ends as
//! [`DbError::Unavailable`], which the HTTP layer answers with 503
//! `state_unavailable` and `Retry-After`.
//!
//! Round trips: each [`Db::with`] is counted ([`Db::round_trips`]); the
//! callers keep each one to one statement (`query_typed*`, which sends
//! parse, bind and execute together), so the count is the number of round
//! trips to the server.

pub mod claims;
pub mod cluster;
pub mod deferred;
pub mod groups;
pub mod keys;
pub mod limits;
pub mod output;
pub mod runs;
pub mod schema;
pub mod sessions;
pub mod settings;
pub mod spool;
mod tls;
pub mod unwritten;
mod watch;

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use std::collections::HashMap;

use postgres::types::{ToSql, Type};
use postgres::{Client, Row, Statement};

use settings::{defaults, SslMode, StateDb};

/// Seconds a client is told to wait (`Retry-After`) while the database is
/// unreachable.
pub const RETRY_AFTER_SECS: u64 = 2;

/// Why a use of the database failed.
#[derive(Debug)]
pub enum DbError {
    /// The database cannot be reached, or is failing over, shutting down
    /// or too slow (a timeout): try again later (503 `state_unavailable`).
    Unavailable(String),
    /// The schema is newer than this trigd knows; it refuses to use it.
    Schema(String),
    /// The statement failed for another reason (a bug or a constraint).
    Query(postgres::Error),
    /// The run was not recorded: its Idempotency-Key is held by this run
    /// (the request is answered as a repeat of it).
    Claimed(String),
}

impl fmt::Display for DbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DbError::Unavailable(why) => write!(f, "the database is unavailable: {why}"),
            DbError::Schema(why) => f.write_str(why),
            DbError::Query(e) => write!(f, "database error: {}", describe(e)),
            DbError::Claimed(run) => write!(f, "the Idempotency-Key is held by run {run}"),
        }
    }
}

impl std::error::Error for DbError {}

impl DbError {
    /// Sort a client error: lost connections, timeouts and the server's
    /// operator/connection/resource errors are [`DbError::Unavailable`].
    pub fn from_pg(e: postgres::Error) -> DbError {
        let transient = match e.code() {
            None => true,
            Some(code) => {
                let c = code.code();
                // 08: connection, 53: resources, 57: operator intervention
                // (shutdown, statement timeout), 25006: read-only (a standby
                // during failover), 55P03: lock timeout, 40001/40P01: retry.
                ["08", "53", "57"].iter().any(|p| c.starts_with(p))
                    || ["25006", "55P03", "40001", "40P01"].contains(&c)
            }
        };
        if transient {
            DbError::Unavailable(describe(&e))
        } else {
            DbError::Query(e)
        }
    }

    /// Whether a later attempt may succeed.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, DbError::Unavailable(_))
    }
}

/// One connection of the pool and the statements prepared on it.
struct Conn {
    client: Client,
    /// By their text ([`Db::with_prepared`]): parsed and planned once per
    /// connection, not at each use.
    prepared: HashMap<&'static str, Statement>,
}

impl Conn {
    /// Statement `sql` (its parameters of `types`) as this connection
    /// prepared it, prepared now at its first use here (one round trip
    /// more, once a connection).
    fn prepared(
        &mut self,
        sql: &'static str,
        types: &[Type],
    ) -> Result<Statement, postgres::Error> {
        if let Some(st) = self.prepared.get(sql) {
            return Ok(st.clone());
        }
        let st = self.client.prepare_typed(sql, types)?;
        self.prepared.insert(sql, st.clone());
        Ok(st)
    }
}

/// The statements every connection prepares as it opens: the writes of
/// run records, batched and of one run, and the read of one run's record.
const HOT: [(&str, &[Type]); 3] = [
    (runs::UPSERT, &runs::UPSERT_TYPES),
    (runs::UPSERT_ONE, &runs::UPSERT_ONE_TYPES),
    (runs::GET, &runs::GET_TYPES),
];

/// Connections open and idle.
#[derive(Default)]
struct Pool {
    idle: Vec<Conn>,
    /// Connections that exist (idle or in use).
    open: usize,
}

/// Whether the schema was checked, and the last failure seen.
#[derive(Debug, Clone, Default)]
struct Health {
    /// Set once the schema is known to be this trigd's.
    migrated: bool,
    /// The last failure and when; cleared by a success.
    down: Option<String>,
    /// A schema this trigd refuses (set for good).
    refused: Option<String>,
    /// When the database was last used, successfully or not.
    used: Option<Instant>,
}

/// How old the last use may be before `/healthz` asks the database.
const PING_EVERY: Duration = Duration::from_secs(1);

/// The database: a pool of at most `[state] pool` connections.
pub struct Db {
    settings: Arc<StateDb>,
    pool: Mutex<Pool>,
    freed: Condvar,
    round_trips: AtomicU64,
    background_trips: AtomicU64,
    health: Mutex<Health>,
    /// The newest `trigd_runs.seq` when the schema was first checked,
    /// before this process could record a run: its runs are all past it.
    seq_at_start: std::sync::OnceLock<i64>,
    /// `pg_postmaster_start_time()` (µs) when the schema was first
    /// checked: the server this process first wrote to.
    pub server_at_start: std::sync::OnceLock<i64>,
    /// Idempotency claims waiting for their run's first write.
    pub claims: claims::Pending,
    /// Connects under way on their threads ([`Db::open`]), given up on
    /// or not.
    connecting: Arc<AtomicUsize>,
}

impl fmt::Debug for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Db")
            .field("url", &self.settings.url)
            .finish()
    }
}

impl Db {
    /// The pool for `settings`, no connection opened yet.
    pub fn new(settings: Arc<StateDb>) -> Db {
        Db {
            settings,
            pool: Mutex::new(Pool::default()),
            freed: Condvar::new(),
            round_trips: AtomicU64::new(0),
            background_trips: AtomicU64::new(0),
            health: Mutex::new(Health::default()),
            seq_at_start: std::sync::OnceLock::new(),
            server_at_start: std::sync::OnceLock::new(),
            claims: claims::Pending::default(),
            connecting: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Connect to the database and bring its schema up to this trigd's
    /// version ([`schema::migrate`]); once per process, the first success
    /// sticks. Notes the newest run then ([`Db::seq_at_start`]): every
    /// other statement waits for this, so no run of this process is older.
    ///
    /// # Errors
    /// The database cannot be reached ([`DbError::Unavailable`]), or its
    /// schema is newer than this trigd ([`DbError::Schema`]).
    pub fn migrate(&self) -> Result<(), DbError> {
        if self.health().migrated {
            return Ok(());
        }
        let r = self.use_conn(
            |Conn {
                 client: c,
                 prepared,
             }| {
                schema::migrate(c)?;
                // The sequence's last value, not max(seq): no index on seq
                // gives the latter (`entries.sql`), and a value the
                // sequence gave that no committed run holds is past every
                // run of this instance's previous life all the same.
                let newest = c
                    .query_one(
                        "SELECT CASE WHEN is_called THEN last_value ELSE 0 END \
                         FROM trigd_runs_seq_seq",
                        &[],
                    )
                    .and_then(|row| row.try_get::<_, i64>(0))
                    .map_err(DbError::from_pg)?;
                // The first to get here wins: a later read may count runs of
                // this process already.
                let _ = self.seq_at_start.set(newest);
                let server = c
                    .query_one(
                        "SELECT (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::int8",
                        &[],
                    )
                    .and_then(|row| row.try_get::<_, i64>(0))
                    .map_err(DbError::from_pg)?;
                let _ = self.server_at_start.set(server);
                // As every later connection does as it opens.
                for (sql, types) in HOT.iter().copied() {
                    if let Ok(st) = c.prepare_typed(sql, types) {
                        prepared.insert(sql, st);
                    }
                }
                Ok(())
            },
        );
        let mut h = self.health_mut();
        match &r {
            Ok(()) => h.migrated = true,
            Err(DbError::Schema(why)) => h.refused = Some(why.clone()),
            Err(_) => {}
        }
        r
    }

    /// The newest run (`trigd_runs.seq`) recorded before this process
    /// could record any: the runs of this instance up to it are its
    /// previous life's (cut off by a crash), those after it this life's.
    ///
    /// # Errors
    /// As [`Db::migrate`], which it needs first.
    pub fn seq_at_start(&self) -> Result<i64, DbError> {
        self.migrate()?;
        self.seq_at_start
            .get()
            .copied()
            .ok_or_else(|| DbError::Unavailable("the schema is not checked yet".into()))
    }

    /// Where the database is, for messages (no password).
    pub fn url(&self) -> &str {
        &self.settings.url
    }

    /// Run `f` on a connection of the pool: one round trip, if `f` sends
    /// one statement. Waits at most the connect timeout for a connection.
    ///
    /// # Errors
    /// [`DbError::Unavailable`] when no connection can be had in time, the
    /// schema is not checked yet, or the statement failed for a reason
    /// that may pass; [`DbError::Query`] for any other failure.
    pub fn with<T>(
        &self,
        f: impl FnOnce(&mut Client) -> Result<T, postgres::Error>,
    ) -> Result<T, DbError> {
        self.counted(&self.round_trips, f)
    }

    /// [`Db::with`] for a background thread's statement (heartbeats, queue
    /// polls, output copies): counted apart ([`Db::background_trips`]), so
    /// that [`Db::round_trips`] shows what requests cost.
    ///
    /// # Errors
    /// As [`Db::with`].
    pub fn with_background<T>(
        &self,
        f: impl FnOnce(&mut Client) -> Result<T, postgres::Error>,
    ) -> Result<T, DbError> {
        self.counted(&self.background_trips, f)
    }

    /// [`Db::with_background`] on the connection itself: `f` may use the
    /// statements prepared on it ([`Conn::prepared`]), for a background
    /// thread's statements that run often (the cluster queue's take, the
    /// cancel poll), which the server then plans once a connection, not at
    /// each use.
    ///
    /// # Errors
    /// As [`Db::with`].
    fn with_background_conn<T>(
        &self,
        f: impl FnOnce(&mut Conn) -> Result<T, postgres::Error>,
    ) -> Result<T, DbError> {
        self.counted_conn(&self.background_trips, f)
    }

    /// Run `f` on a connection once the schema is known to be this
    /// trigd's, counting it in `trips` ([`Db::with`] and
    /// [`Db::with_background`] differ only in their counter).
    fn counted<T>(
        &self,
        trips: &AtomicU64,
        f: impl FnOnce(&mut Client) -> Result<T, postgres::Error>,
    ) -> Result<T, DbError> {
        self.counted_conn(trips, |c| f(&mut c.client))
    }

    /// [`Db::counted`] with the whole connection given to `f`.
    fn counted_conn<T>(
        &self,
        trips: &AtomicU64,
        f: impl FnOnce(&mut Conn) -> Result<T, postgres::Error>,
    ) -> Result<T, DbError> {
        let h = self.health();
        if let Some(why) = h.refused {
            return Err(DbError::Schema(why));
        }
        if !h.migrated {
            self.migrate()?;
        }
        trips.fetch_add(1, Ordering::Relaxed);
        self.use_conn(|c| f(c).map_err(DbError::from_pg))
    }

    /// Run `sql` with `params` (of `types`) as a statement prepared once
    /// per connection: one round trip, plus one the first time on a
    /// connection (both counted in [`Db::round_trips`]). The statements
    /// of a request's path go this way: the server then plans them once,
    /// not at every use (the batched upsert of the runs cost about as
    /// much to plan as to execute).
    ///
    /// # Errors
    /// As [`Db::with`].
    pub fn query_prepared(
        &self,
        sql: &'static str,
        types: &[Type],
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, DbError> {
        let h = self.health();
        if let Some(why) = h.refused {
            return Err(DbError::Schema(why));
        }
        if !h.migrated {
            self.migrate()?;
        }
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        self.use_conn(|c| {
            let stmt = match c.prepared.get(sql) {
                Some(st) => st.clone(),
                None => {
                    self.round_trips.fetch_add(1, Ordering::Relaxed);
                    let st = c
                        .client
                        .prepare_typed(sql, types)
                        .map_err(DbError::from_pg)?;
                    c.prepared.insert(sql, st.clone());
                    st
                }
            };
            c.client.query(&stmt, params).map_err(DbError::from_pg)
        })
    }

    /// Uses of [`Db::with_background`] since start.
    pub fn background_trips(&self) -> u64 {
        self.background_trips.load(Ordering::Relaxed)
    }

    /// Uses of [`Db::with`] since start: the round trips to the database.
    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }

    /// `None` while the database answers, else why not (for `/healthz`):
    /// the last use failed, the schema is refused, or not yet checked.
    /// When no use was seen for a second, asks the database first
    /// ([`Db::ping`]), so an idle instance notices it too.
    pub fn unreachable(&self) -> Option<String> {
        let stale = self.health().used.is_none_or(|t| t.elapsed() >= PING_EVERY);
        if stale && self.health().migrated {
            self.ping();
        }
        let h = self.health();
        if let Some(why) = h.refused {
            return Some(why);
        }
        if !h.migrated {
            return Some(format!(
                "the database ({}) was not reached yet: {}",
                self.settings.url,
                h.down.unwrap_or_else(|| "connecting".into())
            ));
        }
        h.down
            .map(|why| format!("the database ({}) is unavailable: {why}", self.settings.url))
    }

    /// Whether the database is known not to answer now (the last use
    /// failed, the schema is refused or not yet checked), asking nothing.
    pub fn known_down(&self) -> bool {
        let h = self.health();
        h.refused.is_some() || !h.migrated || h.down.is_some()
    }

    /// Check that the database answers now (`SELECT 1`), recording the
    /// outcome for [`Db::unreachable`] (a background round trip).
    pub fn ping(&self) -> bool {
        self.with_background(|c| c.simple_query("SELECT 1").map(drop))
            .is_ok()
    }

    /// A copy of the health record.
    fn health(&self) -> Health {
        self.health_mut().clone()
    }

    fn health_mut(&self) -> std::sync::MutexGuard<'_, Health> {
        self.health.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Take a connection, run `f`, give it back unless it broke; note the
    /// outcome.
    fn use_conn<T>(&self, f: impl FnOnce(&mut Conn) -> Result<T, DbError>) -> Result<T, DbError> {
        let taken = self.take();
        let mut conn = match taken {
            Ok(c) => c,
            Err(e) => {
                self.note(Some(&e));
                return Err(e);
            }
        };
        let r = f(&mut conn);
        let broken = conn.client.is_closed() || matches!(&r, Err(e) if e.is_unavailable());
        self.give_back(conn, broken);
        self.note(r.as_ref().err());
        r
    }

    /// Record a use's outcome for `/healthz`.
    fn note(&self, err: Option<&DbError>) {
        let mut h = self.health_mut();
        h.used = Some(Instant::now());
        match err {
            None => h.down = None,
            Some(e) if e.is_unavailable() => h.down = Some(e.to_string()),
            Some(_) => {}
        }
    }

    /// An idle connection, a new one while fewer than `pool` exist, or the
    /// first one freed within the connect timeout.
    fn take(&self) -> Result<Conn, DbError> {
        let bound = Duration::from_secs(defaults::CONNECT_TIMEOUT_SECS);
        let until = Instant::now() + bound;
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(c) = pool.idle.pop() {
                return Ok(c);
            }
            if pool.open < self.settings.pool {
                pool.open += 1;
                drop(pool);
                return self
                    .open()
                    .map(|client| self.prepare_hot(client))
                    .inspect_err(|_| self.forget_one());
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(DbError::Unavailable(format!(
                    "all {} connections stayed busy for {}s",
                    self.settings.pool,
                    bound.as_secs()
                )));
            }
            pool = self
                .freed
                .wait_timeout(pool, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// A new connection with the statements of the requests' path
    /// prepared ([`HOT`]) as part of opening it, once the schema is there
    /// (the connection that checks it prepares them at their first use).
    /// One that fails is prepared at its first use.
    fn prepare_hot(&self, mut client: Client) -> Conn {
        let mut prepared = HashMap::new();
        if self.health().migrated {
            for (sql, types) in HOT.iter().copied() {
                if let Ok(st) = client.prepare_typed(sql, types) {
                    prepared.insert(sql, st);
                }
            }
        }
        Conn { client, prepared }
    }

    /// Back into the pool, or closed when `broken`.
    fn give_back(&self, conn: Conn, broken: bool) {
        if broken {
            drop(conn);
            self.forget_one();
            return;
        }
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        pool.idle.push(conn);
        drop(pool);
        self.freed.notify_one();
    }

    /// One connection fewer exists.
    fn forget_one(&self) {
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        pool.open = pool.open.saturating_sub(1);
        drop(pool);
        self.freed.notify_one();
    }

    /// Open a new connection with the configured TLS within the connect
    /// timeout, startup and authentication included. The client bounds
    /// only the TCP connect: a server that accepts and never answers (a
    /// frozen PostgreSQL, a pooler waiting for a primary, a wrong port)
    /// would hold the startup, and the request waiting on it, for good. So
    /// the connect runs on a thread of its own and is given up after the
    /// timeout; such a thread ends when the socket does, and at most
    /// `pool` of them exist (past that a connect fails at once).
    fn open(&self) -> Result<Client, DbError> {
        let bound = Duration::from_secs(defaults::CONNECT_TIMEOUT_SECS);
        let pending = Arc::clone(&self.connecting);
        if pending.fetch_add(1, Ordering::SeqCst) >= self.settings.pool {
            pending.fetch_sub(1, Ordering::SeqCst);
            return Err(DbError::Unavailable(format!(
                "the server did not complete the connection within {}s \
                 ({} connects still wait for it)",
                bound.as_secs(),
                self.settings.pool
            )));
        }
        let settings = Arc::clone(&self.settings);
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let spawned = std::thread::Builder::new()
            .name("state-db-open".into())
            .spawn(move || {
                let r = connect(&settings);
                pending.fetch_sub(1, Ordering::SeqCst);
                // Given up on: the connection, if any, closes as it drops.
                let _ = tx.send(r);
            });
        if let Err(e) = spawned {
            self.connecting.fetch_sub(1, Ordering::SeqCst);
            return Err(DbError::Unavailable(format!(
                "cannot start a thread to connect: {e}"
            )));
        }
        match rx.recv_timeout(bound) {
            Ok(r) => r.map_err(|e| DbError::Unavailable(describe(&e))),
            Err(_) => Err(DbError::Unavailable(format!(
                "the server did not complete the connection within {}s",
                bound.as_secs()
            ))),
        }
    }
}

/// Connect with the settings' TLS mode (blocking; [`Db::open`] bounds it).
fn connect(s: &StateDb) -> Result<Client, postgres::Error> {
    let mut pg = s.pg.clone();
    match s.ssl {
        SslMode::Disable => {
            pg.ssl_mode(postgres::config::SslMode::Disable);
            pg.connect(postgres::NoTls)
        }
        mode => {
            pg.ssl_mode(match mode {
                SslMode::Prefer => postgres::config::SslMode::Prefer,
                _ => postgres::config::SslMode::Require,
            });
            let tls = tls::client_config(mode, &s.roots);
            pg.connect(tokio_postgres_rustls::MakeRustlsConnect::new(tls))
        }
    }
}

/// A client error with its causes: the `postgres` crate's own text is only
/// the kind ("db error", "error connecting to server"); what an operator
/// needs is the server's message (`FATAL: password authentication failed
/// for user "trigd"`, with its SQLSTATE) or the socket's (`Connection
/// refused`). On one line, for the log and `/healthz` `Reason`. The server
/// never quotes the password, and the client's settings are not part of it.
fn describe(e: &postgres::Error) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string().replace('\n', " "));
        cause = c.source();
    }
    if let Some(code) = e.code() {
        text.push_str(&format!(" (SQLSTATE {})", code.code()));
    }
    text
}

/// `json` (serde_json's text of a record or a delivery) as a `jsonb` value
/// takes it: with each NUL character (`\u0000`, which serde_json writes for
/// a NUL byte of a run's output) written `\ufffd`, the replacement
/// character. PostgreSQL's `jsonb` refuses `\u0000` (SQLSTATE 22P05), so
/// that the record of a run that printed a NUL byte was never written: its
/// end stayed unwritten for good and the other instances never saw it.
/// Only escapes are read: a `\\` before `u0000` is an escaped backslash.
pub fn jsonb_text(json: String) -> String {
    if !json.contains("\\u0000") {
        return json;
    }
    let mut out = String::with_capacity(json.len());
    let mut rest = json.as_str();
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let escape = &rest[at..];
        if let Some(after) = escape.strip_prefix("\\u0000") {
            out.push_str("\\ufffd");
            rest = after;
        } else {
            // The backslash and the character it escapes.
            let end = 1 + escape[1..].chars().next().map_or(0, char::len_utf8);
            out.push_str(&escape[..end]);
            rest = &escape[end..];
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::jsonb_text;

    #[test]
    fn nul_escapes_become_replacement_characters_and_nothing_else_changes() {
        let cases = [
            (r#"{"a":"x\u0000y"}"#, r#"{"a":"x\ufffdy"}"#),
            (r#"["\u0000\u0000"]"#, r#"["\ufffd\ufffd"]"#),
            // An escaped backslash, then the text u0000: unchanged.
            (r#"["\\u0000"]"#, r#"["\\u0000"]"#),
            (r#"["\\\u0000"]"#, r#"["\\\ufffd"]"#),
            (
                r#"["\u00001","\n\"\u0001é"]"#,
                r#"["\ufffd1","\n\"\u0001é"]"#,
            ),
            (r#"{"plain":"text"}"#, r#"{"plain":"text"}"#),
        ];
        for (json, want) in cases {
            assert_eq!(jsonb_text(json.to_string()), want, "{json}");
        }
        // What serde_json writes for a NUL byte reads back as U+FFFD.
        let text = serde_json::to_string(&["a\0b"]).unwrap();
        let back: Vec<String> = serde_json::from_str(&jsonb_text(text)).unwrap();
        assert_eq!(back, ["a\u{fffd}b"]);
    }
}
