//! The schema: versioned migrations, applied by trigd itself at start.
//!
//! `trigd_schema` holds one row per applied version. Every instance runs
//! [`migrate`] at start inside one transaction that first takes an
//! advisory lock, so instances starting at once migrate once: the others
//! wait, then find the versions applied. A database whose newest version
//! is past [`VERSION`] belongs to a newer trigd: this one refuses it with
//! both versions named, rather than write rows the newer one does not
//! expect.
//!
//! Migration 1 is every table of this round, one `.sql` file per concern
//! (`runs.sql`, `cluster.sql`, `shared.sql`); migration 2 the columns of
//! concurrency groups (`groups.sql`); migration 3 leaves `trigd_runs`
//! fewer indexes, which every run write pays for (`indexes.sql`);
//! migration 4 two index entries fewer an async run write
//! (`entries.sql`); migration 5 the indexes that let a take skip the
//! runs of keys at their limit without reading them all
//! (`group_queues.sql`). A later change is a new entry of
//! [`MIGRATIONS`], never an edit of an applied one.

use postgres::{Client, Transaction};

use super::DbError;

/// The migrations, in order: (version, SQL).
pub const MIGRATIONS: &[(i32, &str)] = &[
    (
        1,
        concat!(
            include_str!("runs.sql"),
            include_str!("cluster.sql"),
            include_str!("shared.sql")
        ),
    ),
    (2, include_str!("groups.sql")),
    (3, include_str!("indexes.sql")),
    (4, include_str!("entries.sql")),
    (5, include_str!("group_queues.sql")),
];

/// The schema version this trigd writes and reads.
pub const VERSION: i32 = MIGRATIONS[MIGRATIONS.len() - 1].0;

/// The advisory lock serializing migrations ("trigd" in ASCII).
const LOCK: i64 = 0x74_7269_6764;

/// Bring the schema up to [`VERSION`], under the advisory lock.
///
/// # Errors
/// The database failed ([`DbError::from_pg`]), or its schema is newer than
/// [`VERSION`] ([`DbError::Schema`]).
pub fn migrate(client: &mut Client) -> Result<(), DbError> {
    let mut tx = client.transaction().map_err(DbError::from_pg)?;
    let found = current(&mut tx).map_err(DbError::from_pg)?;
    if found > VERSION {
        return Err(DbError::Schema(format!(
            "the database's schema is version {found}, newer than this trigd's version \
             {VERSION}: it was migrated by a newer trigd; run that version (or newer) here too"
        )));
    }
    for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > found) {
        tx.batch_execute(sql).map_err(DbError::from_pg)?;
        tx.execute(
            "INSERT INTO trigd_schema (version, by_trigd) VALUES ($1, $2)",
            &[version, &env!("CARGO_PKG_VERSION")],
        )
        .map_err(DbError::from_pg)?;
        log::info!("state: database schema migrated to version {version}");
    }
    tx.commit().map_err(DbError::from_pg)
}

/// Take the lock, create `trigd_schema` if needed, and read its newest
/// version (0: a new database).
fn current(tx: &mut Transaction<'_>) -> Result<i32, postgres::Error> {
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK])?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS trigd_schema (
             version integer PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT now(),
             by_trigd text NOT NULL
         )",
    )?;
    let row = tx.query_one("SELECT coalesce(max(version), 0) FROM trigd_schema", &[])?;
    row.try_get(0)
}
