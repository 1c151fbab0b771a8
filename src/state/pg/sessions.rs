//! Login sessions in the database (`trigd_sessions`, by the sha256 of
//! their token), so that any instance answers for any session: what a
//! session holds and when it is valid is `access::sessions`'s. Times are
//! the database's clock. Each operation is one statement; a lookup writes
//! `last_seen` only when it is older than the caller's `every` (lazily, as
//! the file backend does).

use std::sync::Arc;
use std::time::Duration;

use postgres::types::Type;

use super::{Db, DbError};

/// A session as the table holds it, with its ages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRow {
    /// The user it belongs to.
    pub user: String,
    /// The fingerprint of the user's password hash at login.
    pub password: String,
    /// Since the last request that was written.
    pub idle: Duration,
    /// Since the login.
    pub age: Duration,
}

/// The sessions of a database.
#[derive(Clone)]
pub struct SessionTable {
    db: Arc<Db>,
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl SessionTable {
    /// The sessions in `db`.
    pub fn new(db: Arc<Db>) -> SessionTable {
        SessionTable { db }
    }

    /// Keep a new session, removing in the same statement the sessions
    /// idle for `idle` or older than `max`.
    ///
    /// # Errors
    /// The database cannot be used.
    pub fn insert(
        &self,
        token_sha256: &str,
        user: &str,
        password: &str,
        idle: Duration,
        max: Duration,
    ) -> Result<(), DbError> {
        let sql = "WITH gone AS (DELETE FROM trigd_sessions \
                     WHERE last_seen < now() - $4 * interval '1 millisecond' \
                        OR created_at < now() - $5 * interval '1 millisecond') \
                   INSERT INTO trigd_sessions (token_sha256, username, password) \
                   VALUES ($1, $2, $3)";
        let (idle, max) = (millis(idle), millis(max));
        self.db
            .with(|c| {
                c.execute_typed(
                    sql,
                    &[
                        (&token_sha256, Type::TEXT),
                        (&user, Type::TEXT),
                        (&password, Type::TEXT),
                        (&idle, Type::INT8),
                        (&max, Type::INT8),
                    ],
                )
            })
            .map(drop)
    }

    /// The session of `token_sha256`, as it was before this request, which
    /// is written as its last-seen time when that was `every` ago or more
    /// (one statement).
    ///
    /// # Errors
    /// The database cannot be used.
    pub fn touch(
        &self,
        token_sha256: &str,
        every: Duration,
    ) -> Result<Option<SessionRow>, DbError> {
        let sql = "WITH s AS (SELECT username, password, \
                     (extract(epoch FROM now() - last_seen) * 1000)::int8 AS idle, \
                     (extract(epoch FROM now() - created_at) * 1000)::int8 AS age \
                     FROM trigd_sessions WHERE token_sha256 = $1), \
                   t AS (UPDATE trigd_sessions SET last_seen = now() \
                     WHERE token_sha256 = $1 AND last_seen <= now() - $2 * interval '1 millisecond') \
                   SELECT username, password, idle, age FROM s";
        let every = millis(every);
        let row = self.db.with(|c| {
            c.query_typed_opt(sql, &[(&token_sha256, Type::TEXT), (&every, Type::INT8)])
        })?;
        let Some(r) = row else { return Ok(None) };
        let ms = |i: usize| -> Result<Duration, DbError> {
            let v: i64 = r.try_get(i).map_err(DbError::Query)?;
            Ok(Duration::from_millis(v.max(0) as u64))
        };
        Ok(Some(SessionRow {
            user: r.try_get(0).map_err(DbError::Query)?,
            password: r.try_get(1).map_err(DbError::Query)?,
            idle: ms(2)?,
            age: ms(3)?,
        }))
    }

    /// End the session of `token_sha256` (one statement).
    ///
    /// # Errors
    /// The database cannot be used.
    pub fn delete(&self, token_sha256: &str) -> Result<(), DbError> {
        let sql = "DELETE FROM trigd_sessions WHERE token_sha256 = $1";
        self.db
            .with(|c| c.execute_typed(sql, &[(&token_sha256, Type::TEXT)]))
            .map(drop)
    }
}
