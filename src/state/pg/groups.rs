//! Concurrency groups in the cluster queue (`groups.sql`): what a run
//! accepted into a group does to the runs of its key on every instance
//! (`runner::cluster` calls these). The limit itself is kept when a run is
//! taken ([`super::cluster::take`]). Each change of a key's runs happens
//! under a transaction-scoped advisory lock on the key, so that two
//! instances deciding for one key at once decide one after the other.

use postgres::types::Type;
use postgres::Transaction;

use super::{Db, DbError};

/// Take the advisory lock of group key `key` until `tx` ends.
///
/// # Errors
/// The database failed.
pub fn lock_key(tx: &mut Transaction<'_>, key: &str) -> Result<(), postgres::Error> {
    tx.execute_typed(
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 35))",
        &[(&key, Type::TEXT)],
    )?;
    Ok(())
}

/// Runs of key `key` queued (taken or not) or running, on any instance:
/// whether a new run under `policy = "skip"` finds its key at `limit`.
///
/// # Errors
/// The database failed.
pub fn busy(db: &Db, key: &str, limit: usize) -> Result<bool, DbError> {
    let row = db.with(|c| {
        c.query_typed_one(
            "SELECT count(*) FROM trigd_runs \
             WHERE group_key = $1 AND state IN ('queued', 'running')",
            &[(&key, Type::TEXT)],
        )
    })?;
    let n: i64 = row.get(0);
    Ok(usize::try_from(n).unwrap_or(usize::MAX) >= limit)
}

/// The record change that ends a waiting run superseded by run `$2`:
/// `FinishedAt` is `$3` (JSON), its input goes.
const SUPERSEDED: &str = "state = 'superseded', ended_at = now(), \
    record = (record - 'Input') || jsonb_build_object('State', 'superseded', \
    'SupersededBy', $2::text, 'FinishedAt', $3::jsonb, 'Error', \
    'superseded by run ' || $2::text || ', a newer run of its concurrency group; not run')";

/// Run `by` of key `key` was accepted under `replace_pending` or
/// `cancel_running`: the runs of the key accepted before it and still in
/// the cluster queue (not taken) end `superseded`. Their ids.
///
/// # Errors
/// The database failed.
pub fn supersede(db: &Db, key: &str, by: &str, at: &str) -> Result<Vec<String>, DbError> {
    db.with(|c| {
        let mut tx = c.transaction()?;
        lock_key(&mut tx, key)?;
        let rows = tx.query_typed(
            &format!(
                "UPDATE trigd_runs SET {SUPERSEDED} \
                 WHERE group_key = $1 AND state = 'queued' AND instance IS NULL \
                 AND seq < (SELECT seq FROM trigd_runs WHERE id = $2) RETURNING id"
            ),
            &[(&key, Type::TEXT), (&by, Type::TEXT), (&at, Type::TEXT)],
        )?;
        tx.commit()?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    })
}

/// End run `run`, taken from the cluster queue, `superseded` by `by`
/// (inside the take's transaction, the key's lock held).
///
/// # Errors
/// The database failed.
pub fn supersede_taken(
    tx: &mut Transaction<'_>,
    run: &str,
    by: &str,
    at: &str,
) -> Result<(), postgres::Error> {
    tx.execute_typed(
        &format!("UPDATE trigd_runs SET {SUPERSEDED}, instance = NULL WHERE id = $1"),
        &[(&run, Type::TEXT), (&by, Type::TEXT), (&at, Type::TEXT)],
    )?;
    Ok(())
}

/// Run `by` of key `key` was accepted under `cancel_running`: when the
/// key has `limit` runs taken or running, the oldest running one is to be
/// cancelled. Its id and instance; the record names `by` in
/// `SupersededBy`, and another instance than `me` is asked to cancel it
/// (it sees the request within its poll).
///
/// # Errors
/// The database failed.
pub fn cancel_oldest(
    db: &Db,
    key: &str,
    by: &str,
    limit: usize,
    me: &str,
) -> Result<Option<(String, String)>, DbError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let row = db.with(|c| {
        c.query_typed_opt(
            "UPDATE trigd_runs SET cancel_requested = (instance <> $4), \
               record = jsonb_set(record, '{SupersededBy}', to_jsonb($2::text)) \
             WHERE id = (SELECT id FROM trigd_runs WHERE group_key = $1 AND state = 'running' \
                         AND id <> $2 ORDER BY seq LIMIT 1) \
             AND state = 'running' \
             AND (SELECT count(*) FROM trigd_runs WHERE group_key = $1 AND id <> $2 \
                  AND state IN ('queued', 'running') AND instance IS NOT NULL) >= $3 \
             RETURNING id, instance",
            &[
                (&key, Type::TEXT),
                (&by, Type::TEXT),
                (&limit, Type::INT8),
                (&me, Type::TEXT),
            ],
        )
    })?;
    Ok(row.map(|r| (r.get(0), r.get(1))))
}
