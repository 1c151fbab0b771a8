//! The callback spool in the database (`trigd_callbacks`): the database
//! side of [`crate::state::spool::Spool`]. A pending delivery is a row held
//! by one instance, which alone sends it; when the holder's lease lapses,
//! the instance adopting its runs takes its deliveries in the same
//! transaction (`cluster::adopt`), so each is sent by one instance at a
//! time, whichever is alive. Rows are the JSON of `state::spool::Pending`,
//! which that module reads and writes (this one only moves the text).

use std::time::{SystemTime, UNIX_EPOCH};

use postgres::types::Type;

use super::{Db, DbError};

/// The callback spool of instance `me` in `db`.
#[derive(Debug)]
pub struct DbSpool {
    db: std::sync::Arc<Db>,
    me: String,
}

/// The first sequence number of an instance started now: its start time
/// in milliseconds times 2^20, so that the numbers of two instances (and
/// of two lives of one) do not meet, and an adopted delivery keeps its own.
pub fn first_seq() -> u64 {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    u64::try_from(ms).unwrap_or(0) << 20
}

fn seq_sql(seq: u64) -> i64 {
    i64::try_from(seq).unwrap_or(i64::MAX)
}

impl DbSpool {
    /// The spool of `me` in `db`.
    pub fn new(db: std::sync::Arc<Db>, me: &str) -> DbSpool {
        DbSpool {
            db,
            me: me.to_string(),
        }
    }

    /// The deliveries this instance holds (from its previous life), in
    /// order, as JSON.
    ///
    /// # Errors
    /// The database failed.
    pub fn held(&self) -> Result<Vec<String>, DbError> {
        let rows = self.db.with_background(|c| {
            c.query_typed(
                "SELECT pending::text FROM trigd_callbacks WHERE holder = $1 ORDER BY seq",
                &[(&self.me, Type::TEXT)],
            )
        })?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Write (or replace) delivery `seq` of run `run`, `text` its JSON.
    ///
    /// # Errors
    /// The database failed.
    pub fn write(&self, seq: u64, run: &str, text: &str) -> Result<(), DbError> {
        let seq = seq_sql(seq);
        let text = super::jsonb_text(text.to_string());
        self.db
            .with_background(|c| {
                c.execute_typed(
                    "INSERT INTO trigd_callbacks (holder, seq, run, pending) \
                     VALUES ($1, $2, $3, $4::text::jsonb) \
                     ON CONFLICT (holder, seq) DO UPDATE SET pending = EXCLUDED.pending",
                    &[
                        (&self.me, Type::TEXT),
                        (&seq, Type::INT8),
                        (&run, Type::TEXT),
                        (&text, Type::TEXT),
                    ],
                )
            })
            .map(drop)
    }

    /// Pending delivery `seq` as JSON, if this instance holds it.
    ///
    /// # Errors
    /// The database failed.
    pub fn read(&self, seq: u64) -> Result<Option<String>, DbError> {
        let seq = seq_sql(seq);
        let row = self.db.with_background(|c| {
            c.query_typed_opt(
                "SELECT pending::text FROM trigd_callbacks WHERE holder = $1 AND seq = $2",
                &[(&self.me, Type::TEXT), (&seq, Type::INT8)],
            )
        })?;
        Ok(row.map(|r| r.get(0)))
    }

    /// Remove pending delivery `seq`.
    ///
    /// # Errors
    /// The database failed.
    pub fn remove(&self, seq: u64) -> Result<(), DbError> {
        let seq = seq_sql(seq);
        self.db
            .with_background(|c| {
                c.execute_typed(
                    "DELETE FROM trigd_callbacks WHERE holder = $1 AND seq = $2",
                    &[(&self.me, Type::TEXT), (&seq, Type::INT8)],
                )
            })
            .map(drop)
    }
}
