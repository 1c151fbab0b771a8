//! Application keys in the database (`trigd_app_keys`, only the sha256 of
//! each key), and the copy each instance keeps of them so that a bearer
//! request costs no round trip.
//!
//! The copy is trusted only while this instance's watcher ([`super::watch`])
//! is listening for `NOTIFY trigd_app_keys` (sent by a trigger on every
//! change of the table, whoever makes it) and has had its connection
//! confirmed within [`TRUST`]: a notification marks the copy stale and the
//! next lookup reloads the whole table (one round trip; it holds one row
//! per member and workspace). Without that confirmation (no watcher, as in
//! `trigd app-key`, its connection lost, the database down) each lookup
//! asks the database for the one key (one round trip), so a regenerated or
//! deleted key stops working on every instance as soon as the notification
//! arrives (milliseconds), and at worst [`TRUST`] after the change on an
//! instance whose watcher lost its connection without noticing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use postgres::types::Type;
use postgres::Row;

use super::watch::{self, Seen};
use super::{Db, DbError};
use crate::state::time::Time;

/// The channel the trigger of `trigd_app_keys` notifies.
const CHANNEL: &str = "trigd_app_keys";

/// How long after the watcher's last confirmed ping the copy is used.
pub const TRUST: Duration = Duration::from_secs(5);

/// One member's key as the table holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRow {
    /// Workspace name.
    pub workspace: String,
    /// Member (user) name.
    pub member: String,
    /// sha256 of the key.
    pub sha256: [u8; 32],
    /// Masked form for display.
    pub hint: String,
    /// When the key was made (the database's clock).
    pub created_at: Time,
}

/// The copy of the table, and what makes it current.
#[derive(Default)]
struct Copy {
    /// Bumped by every notification (and reconnection of the watcher).
    epoch: AtomicU64,
    /// When the watcher last knew it had every notification: the moment it
    /// sent a ping that was answered.
    confirmed: Mutex<Option<Instant>>,
    /// The rows, and the epoch they were loaded at.
    rows: Mutex<Loaded>,
}

/// The rows by sha256, as loaded at an epoch (`None`: never loaded).
type Loaded = (Option<u64>, HashMap<[u8; 32], KeyRow>);

impl Copy {
    /// The table changed (or may have): the next lookup reloads.
    fn invalidate(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
    }

    /// Every change committed before `sent` has been seen.
    fn confirm(&self, sent: Instant) {
        *lock(&self.confirmed) = Some(sent);
    }

    /// The watcher lost its connection: ask the database until it is back.
    fn distrust(&self) {
        *lock(&self.confirmed) = None;
    }

    fn trusted(&self) -> bool {
        lock(&self.confirmed).is_some_and(|t| t.elapsed() < TRUST)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The application keys of a database.
#[derive(Clone)]
pub struct KeyTable {
    db: Arc<Db>,
    copy: Arc<Copy>,
}

const COLUMNS: &str = "workspace, member, sha256, hint, created_at";

impl KeyTable {
    /// The keys in `db`; nothing is read yet, and no copy is trusted until
    /// [`KeyTable::watch`] runs.
    pub fn new(db: Arc<Db>) -> KeyTable {
        KeyTable {
            db,
            copy: Arc::new(Copy::default()),
        }
    }

    /// Start the watcher thread that keeps the copy current (the server
    /// does; `trigd app-key` does not).
    ///
    /// # Errors
    /// The thread cannot be started.
    pub fn watch(&self) -> std::io::Result<()> {
        let copy = Arc::clone(&self.copy);
        watch::start(Arc::clone(&self.db), CHANNEL, move |seen| match seen {
            Seen::Changed => copy.invalidate(),
            Seen::Confirmed(sent) => copy.confirm(sent),
            Seen::Lost => copy.distrust(),
        })
    }

    /// The key whose sha256 is `hash`: from the copy when it is trusted
    /// (no round trip, or one to reload it after a change), else asked for.
    ///
    /// # Errors
    /// The database cannot be used.
    pub fn lookup(&self, hash: &[u8; 32]) -> Result<Option<KeyRow>, DbError> {
        if !self.copy.trusted() {
            let sql = format!("SELECT {COLUMNS} FROM trigd_app_keys WHERE sha256 = $1");
            let hex = hex::encode(hash);
            let row = self
                .db
                .with(|c| c.query_typed_opt(&sql, &[(&hex, Type::TEXT)]))?;
            return row.map(|r| key_row(&r)).transpose();
        }
        let epoch = self.copy.epoch.load(Ordering::SeqCst);
        // Held while reloading: one reload per change, the others wait for it.
        let mut rows = lock(&self.copy.rows);
        if rows.0 != Some(epoch) {
            let sql = format!("SELECT {COLUMNS} FROM trigd_app_keys");
            let all = self.db.with(|c| c.query_typed(&sql, &[]))?;
            let all: Result<HashMap<_, _>, _> = all
                .iter()
                .map(|r| key_row(r).map(|k| (k.sha256, k)))
                .collect();
            *rows = (Some(epoch), all?);
        }
        Ok(rows.1.get(hash).cloned())
    }

    /// The key of `member` in `workspace` (one round trip).
    ///
    /// # Errors
    /// The database cannot be used.
    pub fn get(&self, workspace: &str, member: &str) -> Result<Option<KeyRow>, DbError> {
        let sql =
            format!("SELECT {COLUMNS} FROM trigd_app_keys WHERE workspace = $1 AND member = $2");
        let row = self.db.with(|c| {
            c.query_typed_opt(&sql, &[(&workspace, Type::TEXT), (&member, Type::TEXT)])
        })?;
        row.map(|r| key_row(&r)).transpose()
    }

    /// Make `sha256` the key of `member` in `workspace`, replacing the one
    /// before (one statement; its trigger notifies every instance). The
    /// row as kept.
    ///
    /// # Errors
    /// The database cannot be used.
    pub fn put(
        &self,
        workspace: &str,
        member: &str,
        sha256: &[u8; 32],
        hint: &str,
    ) -> Result<KeyRow, DbError> {
        let sql = format!(
            "INSERT INTO trigd_app_keys (workspace, member, sha256, hint) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (workspace, member) DO UPDATE \
             SET sha256 = EXCLUDED.sha256, hint = EXCLUDED.hint, created_at = now() \
             RETURNING {COLUMNS}"
        );
        let hex = hex::encode(sha256);
        let row = self.db.with(|c| {
            c.query_typed_one(
                &sql,
                &[
                    (&workspace, Type::TEXT),
                    (&member, Type::TEXT),
                    (&hex, Type::TEXT),
                    (&hint, Type::TEXT),
                ],
            )
        })?;
        // This instance stops taking the old key now, not when its own
        // notification comes back.
        self.copy.invalidate();
        key_row(&row)
    }

    /// The workspace and member of every key (one round trip).
    ///
    /// # Errors
    /// The database cannot be used.
    pub fn entries(&self) -> Result<Vec<(String, String)>, DbError> {
        let rows = self
            .db
            .with(|c| c.query_typed("SELECT workspace, member FROM trigd_app_keys", &[]))?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get(0).map_err(DbError::Query)?,
                    r.try_get(1).map_err(DbError::Query)?,
                ))
            })
            .collect()
    }

    /// Delete the key of `member` in `workspace` (its trigger notifies
    /// every instance); whether there was one.
    ///
    /// # Errors
    /// The database cannot be used.
    pub fn delete(&self, workspace: &str, member: &str) -> Result<bool, DbError> {
        let sql = "DELETE FROM trigd_app_keys WHERE workspace = $1 AND member = $2";
        let n = self
            .db
            .with(|c| c.execute_typed(sql, &[(&workspace, Type::TEXT), (&member, Type::TEXT)]))?;
        self.copy.invalidate();
        Ok(n > 0)
    }
}

/// A row of `SELECT {COLUMNS}` (the table's CHECK keeps `sha256` 64 hex
/// digits; a row that still does not decode matches nothing).
fn key_row(r: &Row) -> Result<KeyRow, DbError> {
    let hex: String = r.try_get(2).map_err(DbError::Query)?;
    let mut sha256 = [0u8; 32];
    if hex::decode_to_slice(&hex, &mut sha256).is_err() {
        log::warn!("state: trigd_app_keys holds a malformed sha256; that key matches nothing");
    }
    let created: SystemTime = r.try_get(4).map_err(DbError::Query)?;
    Ok(KeyRow {
        workspace: r.try_get(0).map_err(DbError::Query)?,
        member: r.try_get(1).map_err(DbError::Query)?,
        sha256,
        hint: r.try_get(3).map_err(DbError::Query)?,
        created_at: Time::try_from(created).unwrap_or_default(),
    })
}
