//! Counting windows shared by the instances (`trigd_limits`): one row per
//! limited thing, a one-minute window from its first hit, the hits in it.
//! What is counted and what a count means is `access::limiter`'s; here
//! each operation is one statement, timed by the database's clock so that
//! instances agree on when a window ends.

use std::sync::Arc;
use std::time::Duration;

use postgres::types::Type;
use postgres::{Client, Row};

use super::{Db, DbError};

/// A window's hits and time left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Count {
    /// The limited thing.
    pub name: String,
    /// Hits handed out in the window (after this statement's).
    pub hits: u64,
    /// Hits this statement handed out (0 when the window was full).
    pub granted: u64,
    /// Until the window ends.
    pub left: Duration,
}

/// The shared windows of a database.
#[derive(Clone)]
pub struct LimitTable {
    db: Arc<Db>,
}

/// Take up to `$2` hits, at most `$3` in the window, for each name of
/// `$1`: a window a minute old starts again at this statement.
const TAKE: &str = "INSERT INTO trigd_limits AS l (name, window_start, hits, granted) \
     SELECT n, now(), least($2, $3), least($2, $3) FROM unnest($1::text[]) AS n \
     ON CONFLICT (name) DO UPDATE SET \
       window_start = CASE WHEN l.window_start <= now() - interval '1 minute' \
                      THEN now() ELSE l.window_start END, \
       granted = CASE WHEN l.window_start <= now() - interval '1 minute' \
                 THEN least($2, $3) ELSE greatest(least($2, $3 - l.hits), 0) END, \
       hits = CASE WHEN l.window_start <= now() - interval '1 minute' \
              THEN least($2, $3) ELSE l.hits + greatest(least($2, $3 - l.hits), 0) END \
     RETURNING name, hits, granted, \
       greatest((extract(epoch FROM l.window_start + interval '1 minute' - now()) * 1000)::int8, 0)";

impl LimitTable {
    /// The windows in `db`.
    pub fn new(db: Arc<Db>) -> LimitTable {
        LimitTable { db }
    }

    /// Take up to `want` hits of `name`'s window, which holds at most
    /// `limit` (one statement, one row lock).
    ///
    /// # Errors
    /// The database cannot be used.
    pub fn take(&self, name: &str, want: u64, limit: u64) -> Result<Count, DbError> {
        let rows = self.run(TAKE, &[name], &[want, limit])?;
        Ok(rows.into_iter().next().unwrap_or(Count {
            name: name.to_string(),
            hits: 0,
            granted: 0,
            left: Duration::ZERO,
        }))
    }

    /// Take one hit back from `name`'s live window (one statement).
    ///
    /// # Errors
    /// The database cannot be used.
    pub fn give_back(&self, name: &str) -> Result<(), DbError> {
        let sql = "UPDATE trigd_limits SET hits = greatest(hits - 1, 0) \
                   WHERE name = $1 AND window_start > now() - interval '1 minute'";
        self.db
            .with(|c| c.execute_typed(sql, &[(&name, Type::TEXT)]))
            .map(drop)
    }

    /// Forget `name`'s window.
    ///
    /// # Errors
    /// The database cannot be used.
    pub fn clear(&self, name: &str) -> Result<(), DbError> {
        let sql = "DELETE FROM trigd_limits WHERE name = $1";
        self.db
            .with(|c| c.execute_typed(sql, &[(&name, Type::TEXT)]))
            .map(drop)
    }

    fn run(&self, sql: &str, names: &[&str], numbers: &[u64]) -> Result<Vec<Count>, DbError> {
        let names: Vec<&str> = names.to_vec();
        let numbers: Vec<i64> = numbers
            .iter()
            .map(|&n| n.min(i64::MAX as u64) as i64)
            .collect();
        let rows = self.db.with(|c| {
            let mut params: Vec<(&(dyn postgres::types::ToSql + Sync), Type)> =
                vec![(&names, Type::TEXT_ARRAY)];
            params.extend(numbers.iter().map(|n| (n as _, Type::INT8)));
            c.query_typed(sql, &params)
        })?;
        rows.iter().map(count).collect()
    }
}

fn count(r: &Row) -> Result<Count, DbError> {
    let n = |i: usize| -> Result<u64, DbError> {
        let v: i64 = r.try_get(i).map_err(DbError::Query)?;
        Ok(v.max(0) as u64)
    };
    Ok(Count {
        name: r.try_get(0).map_err(DbError::Query)?,
        hits: n(1)?,
        granted: n(2)?,
        left: Duration::from_millis(n(3)?),
    })
}

/// Remove the windows that ended (the watcher, once a minute, on its own
/// connection); how many.
///
/// # Errors
/// The statement failed.
pub(super) fn sweep(client: &mut Client) -> Result<u64, postgres::Error> {
    client.execute_typed(
        "DELETE FROM trigd_limits WHERE window_start <= now() - interval '1 minute'",
        &[],
    )
}
