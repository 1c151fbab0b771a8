//! Runs not tied to a host (`cluster.sql`): the instances' leases, the
//! cluster queue taken with `FOR UPDATE SKIP LOCKED`, the adoption of a
//! lapsed instance's runs, and cancel requests to the instance executing a
//! run. Each function here is one statement (one round trip) or one short
//! transaction; what to do with the rows is the runner's
//! (`runner::cluster`).
//!
//! The `instance` column of `trigd_runs` says which instance holds a run:
//! `NULL` for an async run in the cluster queue, else the instance that
//! executes it or has taken it into its own slot queue ("queued but
//! taken"). Only the statements here change it.

use std::time::Duration;

use postgres::types::Type;
use postgres::{Client, Statement};

use super::{Db, DbError};
use crate::state::record::RunRecord;
use crate::state::spool::Pending;

/// What a heartbeat found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Beat {
    /// The lease was renewed.
    Renewed,
    /// The name was claimed anew: its row made (none was there: at the
    /// first claim, or another instance found the lease lapsed and adopted
    /// this instance's runs) or taken over from a lease that lapsed. The
    /// new row's `started_at` (µs since the epoch) tells this process's
    /// row from another's of the same name.
    Claimed(i64),
    /// Another process holds the name: a lease of its row is live that
    /// this process did not claim (a previous life of this instance whose
    /// lease has not lapsed yet, or another instance given the same name).
    Held,
}

/// Renew `me`'s lease for `lease`, the row this process claimed
/// (`started_at` µs `mine`); with `mine` `None`, claim the name: make its
/// row, or take it over when its lease lapsed. A row of the name whose
/// lease is live and that is not `mine` is left alone ([`Beat::Held`]):
/// two processes never renew one lease between them.
///
/// # Errors
/// The database failed.
pub fn heartbeat(db: &Db, me: &str, lease: Duration, mine: Option<i64>) -> Result<Beat, DbError> {
    let ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX);
    let row = db.with_background(|c| {
        c.query_typed(
            "INSERT INTO trigd_instances AS i (name, expires_at) \
             VALUES ($1, now() + $2::bigint * interval '1 millisecond') \
             ON CONFLICT (name) DO UPDATE SET renewed_at = now(), \
             expires_at = EXCLUDED.expires_at, \
             started_at = CASE WHEN $3::int8 IS NULL THEN now() ELSE i.started_at END \
             WHERE ($3::int8 IS NULL AND i.expires_at < now()) \
             OR (extract(epoch FROM i.started_at) * 1000000)::int8 = $3::int8 \
             RETURNING (xmax = 0 OR $3::int8 IS NULL) AS claimed, \
             (extract(epoch FROM started_at) * 1000000)::int8",
            &[(&me, Type::TEXT), (&ms, Type::INT8), (&mine, Type::INT8)],
        )
    })?;
    let Some(row) = row.first() else {
        return Ok(Beat::Held);
    };
    let (claimed, started): (bool, i64) = (row.get(0), row.get(1));
    Ok(if claimed {
        Beat::Claimed(started)
    } else {
        Beat::Renewed
    })
}

/// When the lease of `me`'s row was last renewed (µs since the epoch),
/// if there is a row.
///
/// # Errors
/// The database failed.
pub fn renewed_at(db: &Db, me: &str) -> Result<Option<i64>, DbError> {
    let rows = db.with_background(|c| {
        c.query_typed(
            "SELECT (extract(epoch FROM renewed_at) * 1000000)::int8 \
             FROM trigd_instances WHERE name = $1",
            &[(&me, Type::TEXT)],
        )
    })?;
    Ok(rows.first().map(|r| r.get(0)))
}

/// Let `me`'s lease (the row this process claimed, `mine`) lapse now, at
/// a clean stop: a restart under the same name claims it at once instead
/// of waiting for it to lapse ([`Beat::Held`]).
///
/// # Errors
/// The database failed.
pub fn leave(db: &Db, me: &str, mine: i64) -> Result<(), DbError> {
    db.with_background(|c| {
        c.execute_typed(
            "UPDATE trigd_instances SET expires_at = now() \
             WHERE name = $1 AND (extract(epoch FROM started_at) * 1000000)::int8 = $2",
            &[(&me, Type::TEXT), (&mine, Type::INT8)],
        )
    })?;
    Ok(())
}

/// The instances other than `me` whose lease lapsed.
///
/// # Errors
/// The database failed.
pub fn lapsed(db: &Db, me: &str) -> Result<Vec<String>, DbError> {
    let rows = db.with_background(|c| {
        c.query_typed(
            "SELECT name FROM trigd_instances WHERE expires_at < now() AND name <> $1",
            &[(&me, Type::TEXT)],
        )
    })?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Take over the runs of instance `dead` (whose lease lapsed, or `me`
/// itself at start: its previous life's runs, those up to
/// [`Db::seq_at_start`], never a run this process recorded before the
/// lease thread got here; with `all_but`, every run of the name but
/// those, when this process claimed its name only after another process
/// of the name had held it) and delete its row, in one transaction. Its
/// async runs still queued go back to the cluster queue
/// (counted in [`Adopted::requeued`]); the others (running, sync, or
/// reading a request body file that was on `dead`) are `me`'s now, for the
/// runner to end or queue again. `None` when another instance is adopting
/// them now (its row is locked) or `dead` renewed its lease meanwhile.
///
/// # Errors
/// The database failed.
pub fn adopt(
    db: &Db,
    me: &str,
    dead: &str,
    all_but: Option<&[String]>,
) -> Result<Option<Adopted>, DbError> {
    let upto = match (dead == me, all_but) {
        (true, None) => db.seq_at_start()?,
        _ => i64::MAX,
    };
    let keep = all_but.unwrap_or_default();
    db.with_background(|c| adopt_in(c, me, dead, upto, keep))
}

/// The runs of a lapsed instance, once adopted.
#[derive(Debug, Default)]
pub struct Adopted {
    /// Async runs it had taken but not started, back in the cluster queue.
    pub requeued: usize,
    /// Runs now held by the adopting instance.
    pub runs: Vec<RunRecord>,
    /// The pending callback deliveries it held, now the adopter's to send.
    pub callbacks: Vec<Pending>,
}

fn adopt_in(
    c: &mut Client,
    me: &str,
    dead: &str,
    upto: i64,
    keep: &[String],
) -> Result<Option<Adopted>, postgres::Error> {
    let mut tx = c.transaction()?;
    if dead != me {
        let locked = tx.query_typed_opt(
            "SELECT 1 FROM trigd_instances WHERE name = $1 AND expires_at < now() \
             FOR UPDATE SKIP LOCKED",
            &[(&dead, Type::TEXT)],
        )?;
        if locked.is_none() {
            return Ok(None);
        }
    }
    let rows = tx.query_typed(
        "UPDATE trigd_runs SET instance = CASE WHEN state = 'queued' \
           AND (record->>'Async')::boolean \
           AND NOT coalesce((record->'Input'->>'Body')::boolean, false) THEN NULL ELSE $1 END \
         WHERE instance = $2 AND state IN ('queued', 'running') AND seq <= $3 \
           AND NOT (id = ANY($4)) \
         RETURNING instance IS NULL, record::text",
        &[
            (&me, Type::TEXT),
            (&dead, Type::TEXT),
            (&upto, Type::INT8),
            (&keep, Type::TEXT_ARRAY),
        ],
    )?;
    let mut adopted = Adopted::default();
    if dead != me {
        adopted.callbacks = adopt_callbacks(&mut tx, me, dead)?;
        tx.execute_typed(
            "DELETE FROM trigd_instances WHERE name = $1",
            &[(&dead, Type::TEXT)],
        )?;
    }
    tx.commit()?;
    for row in &rows {
        if row.get::<_, bool>(0) {
            adopted.requeued += 1;
        } else if let Some(rec) = parse(&row.get::<_, String>(1)) {
            adopted.runs.push(rec);
        }
    }
    Ok(Some(adopted))
}

/// Move the pending callback deliveries `dead` held to `me`, and the
/// ended runs they report with them (their records are written by the
/// sender: the delivery's attempts).
fn adopt_callbacks(
    tx: &mut postgres::Transaction<'_>,
    me: &str,
    dead: &str,
) -> Result<Vec<Pending>, postgres::Error> {
    let rows = tx.query_typed(
        "UPDATE trigd_callbacks SET holder = $1 WHERE holder = $2 RETURNING pending::text",
        &[(&me, Type::TEXT), (&dead, Type::TEXT)],
    )?;
    if !rows.is_empty() {
        tx.execute_typed(
            "UPDATE trigd_runs SET instance = $1 WHERE instance = $2 \
             AND id IN (SELECT run FROM trigd_callbacks WHERE holder = $1)",
            &[(&me, Type::TEXT), (&dead, Type::TEXT)],
        )?;
    }
    let texts: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    Ok(crate::state::spool::parse_all(&texts))
}

/// Take up to `n` of the oldest async runs of the cluster queue for `me`,
/// in one transaction: they are marked taken by `me` (still `queued`; the
/// runner records each `running` when a slot starts it). A run that reads
/// a request body from a file is taken only by the instance that accepted
/// it (the file is there). Empty: the queue holds no run to take now, or
/// `me`'s lease has lapsed (an instance that stalled must not take runs
/// until it has renewed it); fewer than `n`: the queue may hold more (the
/// caller asks again).
///
/// One transaction for the runs a free room takes: its COMMIT waits for
/// one WAL flush for all of them. With a transaction a run, the lease
/// thread waited for a flush a run, one after the other, while the slots
/// it was to fill waited for it. Draining 40,000–55,000 queued runs of
/// the bench's async program (8 slots, fsync on, the 2-core machine
/// loaded, six interleaved pairs, 2026-11-27): about 3 runs a commit,
/// 0.33 WAL flushes a run instead of 1.0–1.1, runs a second after/before
/// 248/181, 310/329, 567/682, 740/547, 555/344, 461/416 (medians 508
/// against 380); the CPU a run did not change
/// (PostgreSQL 1.15–1.36 ms, trigd with the run 1.17–1.33 ms, the
/// machine saturated): that is the drain's bound now.
///
/// # Errors
/// The database failed.
pub fn take(db: &Db, me: &str, n: usize) -> Result<Vec<RunRecord>, TakeFailed> {
    let prefix = format!("{me}-%");
    let mut maybe_taken = Vec::new();
    db.with_background_conn(|c| {
        let stmt = c.prepared(TAKE, &TAKE_TYPES)?;
        // A batch that ended without a run (a lost race for a key's last
        // place, a waiting run a newer one of its key replaces) is
        // settled and the next looked at; a few rounds, then the next poll.
        for _ in 0..8 {
            maybe_taken.clear();
            let batch = take_batch(&mut c.client, &stmt, me, &prefix, n, &mut maybe_taken)?;
            if !batch.runs.is_empty() || !batch.more {
                return Ok(batch.runs.iter().filter_map(|r| parse(r)).collect());
            }
        }
        Ok(Vec::new())
    })
    .map_err(|error| TakeFailed { error, maybe_taken })
}

/// A failed [`take`].
#[derive(Debug)]
pub struct TakeFailed {
    /// Why it failed.
    pub error: DbError,
    /// The runs the failed transaction had marked taken, if it got that
    /// far: its COMMIT may have been done although its answer was lost (a
    /// database shutting down answers a COMMIT it did with the error that
    /// ends the connection). Then `me` holds those runs, still `queued`,
    /// and no other instance takes them: [`held_queued`] tells, once the
    /// database answers.
    pub maybe_taken: Vec<String>,
}

/// The record of run `id` when `me` holds it still `queued` (a
/// [`TakeFailed::maybe_taken`] that was committed after all).
///
/// # Errors
/// The database failed.
pub fn held_queued(db: &Db, me: &str, id: &str) -> Result<Option<RunRecord>, DbError> {
    let row = db.with_background(|c| {
        c.query_typed_opt(
            "SELECT record::text FROM trigd_runs \
             WHERE id = $1 AND instance = $2 AND state = 'queued'",
            &[(&id, Type::TEXT), (&me, Type::TEXT)],
        )
    })?;
    Ok(row.and_then(|r| parse(&r.get::<_, String>(0))))
}

/// What one transaction of [`take`] took.
struct Batch {
    /// The runs taken (their records as text).
    runs: Vec<String>,
    /// The batch ended before the queue did: look again.
    more: bool,
}

/// The oldest async run of the cluster queue that `me` (`$1`) may take
/// (one reading a request body file only if `me` accepted it: `$2`, its
/// run id prefix) and whose group key (if any) has a free place on every
/// instance, marked taken by `me` (`take.sql`). Run again in the same
/// transaction, it sees the runs taken before it there (a key's count
/// holds them) and skips none of them: they are no longer `instance IS
/// NULL`.
///
/// A run of a group is taken only when no older run of its key is still
/// in the cluster queue (as the statement's snapshot shows it). `SKIP
/// LOCKED` passes over a run that another instance's take holds until its
/// COMMIT: without this, that take and this one each marked a run of the
/// key (the oldest there, the next one here), and whichever locked the
/// key first kept its run. When this one did, the younger run started and
/// the older one was given back to wait for it: under `limit = 1` a
/// deploy ran before the one accepted before it (the two-instance test
/// of `tests/groups.rs` timed out so under load, waiting for run 2 while
/// run 3 ran). An older run this instance may not take (its request body
/// file is on another one) holds the younger ones back the same way: the
/// key's runs start in the order they were accepted.
///
/// The take reads the runs of no group from their own queue and a key's
/// next run from the oldest runs of any key, else from each key's queue
/// (`group_queues.sql`), never the runs waiting behind a key's limit: it
/// used to ask of every queued run of a group whether it was its key's
/// next and whether the key had a place, from all of the key's runs, so
/// that a take past N waiting runs read N² rows (1.1 s with 6,000 waiting
/// in two full keys, 2.6 ms now; 0.8 ms among 20,000 keys with a run
/// each; `pg_runs::a_take_reads_a_full_keys_runs_once_not_once_a_run`).
/// Each take locks two runs, the oldest of no group and the oldest next
/// run of a key, and takes the older: the other stays locked until its
/// COMMIT (other instances' takes pass over it meanwhile).
///
/// The update names the run by its id alone: the subquery's row lock
/// holds it `queued` and untaken (`FOR UPDATE` rechecks the conditions on
/// its newest version). With the conditions repeated in the update, the
/// planner reached the run through `trigd_runs_free`, the index of the
/// whole queue, filtering each queued row by id, until the table was first
/// vacuumed (the partial index's size estimate stays the empty table's):
/// 19 ms and 7,000 buffers a take with 26,000 runs queued, against
/// 0.15 ms, so that one instance's takes used half a core of the server
/// during the bench's async rounds (pg_stat_statements: 5.9 s of execution
/// in a 10 s round, 0.35 s after). `pg_runs::cluster_take_reads_the_run_by_its_key`
/// checks the plan.
///
/// Prepared on the lease thread's connection ([`super::Conn::prepared`]),
/// not planned at each take: planning it cost the server more than
/// running it (10 s of async accepts on 32 connections, 2026-11-28,
/// `pg_stat_statements` with `track_planning`: 2,131 takes, 0.33 s of
/// execution, 0.88 s of planning, a sixth of the server's CPU in that
/// round; `pg_runs::the_cluster_take_and_the_cancel_poll_are_prepared`).
/// Prepared is not enough: after five executions PostgreSQL keeps
/// planning a statement for its parameters when the plan for any
/// parameters is estimated dearer, as this one is (the bench's queue:
/// 82 against 50, the same plan), and it still planned 1,296 of 3,622
/// takes in such a round. The take's transaction asks for the plan for
/// any parameters (`plan_cache_mode`, for that transaction only:
/// [`TAKE_PLAN`]).
const TAKE: &str = include_str!("take.sql");

/// The planner settings of a take's transaction (`take_plan.sql`, one
/// simple query after its `BEGIN`, one round trip): the plan for any
/// parameters ([`TAKE`] says why), no sort, no sequential scan, no JIT.
/// The queue's order is `trigd_runs_free`'s (`seq`), so the one plan
/// without a sort reads the
/// oldest runs first and stops at the first it may take (and so for a
/// key's queue in `trigd_runs_group_free`). With the sort
/// allowed, the planner chose it whenever the statistics were older than
/// the queue (analyzed while it was nearly empty, a burst then filling
/// it: `state = 'queued'` estimated at 1 row): each take read every
/// queued run through `trigd_runs_by_state` and sorted them. Measured
/// 2026-11-29 (10 s rounds of async accepts on 32 connections,
/// PostgreSQL 15 on the same 2-core machine, `pg_stat_statements`): 0.11
/// ms a take in a first round, **21.6 ms** in the second (149,353 queued
/// runs sorted on disk at each take, 9 s of the server's CPU in a 10 s
/// round, 415 runs taken); `pg_runs::the_take_reads_the_queue_in_order_whatever_the_costs`.
/// The two sorts left (of the two runs the take chooses between, and of
/// the keys' next runs: no index gives either order) each carry the
/// planner's penalty for a forbidden sort, which puts the statement's
/// estimated cost past `jit_above_cost`: PostgreSQL compiled it at each
/// execution, 256 ms a take against 0.6 ms, hence `jit = off`.
///
/// No sequential scan: the plan for any parameters is made once for the
/// connection, at its first take, and kept until the table's statistics
/// change (an analyse). Made on a new database, whose table is empty and
/// was never analysed, it found the runs of a key's next-run list (none,
/// without groups) by reading the whole table, cheapest while it was
/// empty, and kept doing so as a burst filled it until autovacuum first
/// analysed it (it looks once a minute): 6.3–7.2 ms a take and 6 s of the
/// server's CPU in the first 8 s round of async accepts after a start on
/// a new database (2026-11-29, `auto_explain`), 0.08–0.10 ms with the
/// setting;
/// `pg_runs::a_take_planned_on_an_empty_table_does_not_read_the_table_as_it_fills`.
const TAKE_PLAN: &str = include_str!("take_plan.sql");

/// The types of [`TAKE`]'s parameters: this instance, its run id prefix.
const TAKE_TYPES: [Type; 2] = [Type::TEXT, Type::TEXT];

/// One transaction of [`take`]: take up to `n` runs with [`TAKE`] (`take`,
/// prepared on `c`). One of
/// a group is kept only if, under the key's lock, its key still has a
/// free place (another instance may have taken one of the key meanwhile)
/// and no newer run of the key replaces it (`replace_pending`,
/// `cancel_running`: the decision of an accept that a crash cut short).
/// The transaction holds the lock of one key at most: a run of a second
/// key is given back and ends the batch (two instances each holding one
/// key and waiting for the other's would deadlock).
/// `maybe_taken`: the runs marked taken, set before the commit.
fn take_batch(
    c: &mut Client,
    take: &Statement,
    me: &str,
    prefix: &str,
    n: usize,
    maybe_taken: &mut Vec<String>,
) -> Result<Batch, postgres::Error> {
    let mut tx = c.transaction()?;
    // The plan prepared once, and the queue read in its order: see
    // [`TAKE_PLAN`].
    tx.batch_execute(TAKE_PLAN)?;
    let mut batch = Batch {
        runs: Vec::new(),
        more: false,
    };
    let mut locked: Option<String> = None;
    let mut wrote = false;
    let mut lost = 0;
    while batch.runs.len() < n {
        let Some(row) = tx.query_opt(take, &[&me, &prefix])? else {
            batch.more = false;
            break;
        };
        wrote = true;
        let (rec, id, key): (String, String, Option<String>) = (row.get(0), row.get(1), row.get(2));
        let Some(key) = key else {
            maybe_taken.push(id);
            batch.runs.push(rec);
            continue;
        };
        if locked.as_ref().is_some_and(|k| *k != key) {
            give_back_in(&mut tx, &id)?;
            batch.more = true;
            break;
        }
        maybe_taken.push(id.clone());
        super::groups::lock_key(&mut tx, &key)?;
        locked = Some(key.clone());
        let (limit, policy, seq): (i32, Option<String>, i64) = (row.get(3), row.get(4), row.get(5));
        if let Some(kept) = keep_grouped(&mut tx, &id, &key, limit, policy.as_deref(), seq)? {
            maybe_taken.pop();
            if kept == Lost::Full {
                give_back_in(&mut tx, &id)?;
            }
            // A few lost runs, then the next poll.
            lost += 1;
            batch.more = lost < 8;
            if batch.more {
                continue;
            }
            break;
        }
        batch.runs.push(rec);
    }
    if batch.runs.len() == n {
        batch.more = true;
    }
    if wrote {
        tx.commit()?;
    }
    Ok(batch)
}

/// Why a run of a group that [`TAKE`] marked taken is not kept.
#[derive(Debug, PartialEq, Eq)]
enum Lost {
    /// Its key has no free place (another instance took its last one).
    Full,
    /// A newer run of its key replaces it: ended `superseded`.
    Superseded,
}

/// Whether run `id` of key `key` (under the key's lock, in the take's
/// transaction) stays taken: `None`, or why not.
fn keep_grouped(
    tx: &mut postgres::Transaction<'_>,
    id: &str,
    key: &str,
    limit: i32,
    policy: Option<&str>,
    seq: i64,
) -> Result<Option<Lost>, postgres::Error> {
    let held: i64 = tx
        .query_typed_one(
            "SELECT count(*) FROM trigd_runs WHERE group_key = $1 AND id <> $2 \
             AND state IN ('queued', 'running') AND instance IS NOT NULL",
            &[(&key, Type::TEXT), (&id, Type::TEXT)],
        )?
        .get(0);
    if held >= i64::from(limit) {
        return Ok(Some(Lost::Full));
    }
    if matches!(policy, Some("replace_pending" | "cancel_running")) {
        let newer = tx.query_typed_opt(
            "SELECT id FROM trigd_runs WHERE group_key = $1 AND state = 'queued' \
             AND instance IS NULL AND seq > $2 ORDER BY seq DESC LIMIT 1",
            &[(&key, Type::TEXT), (&seq, Type::INT8)],
        )?;
        if let Some(by) = newer {
            let at = serde_json::to_string(&crate::state::time::Time::now()).unwrap_or_default();
            super::groups::supersede_taken(tx, id, &by.get::<_, String>(0), &at)?;
            return Ok(Some(Lost::Superseded));
        }
    }
    Ok(None)
}

/// Put run `id`, marked taken in `tx`, back in the cluster queue (the
/// transaction goes on: the runs it took before stay taken).
fn give_back_in(tx: &mut postgres::Transaction<'_>, id: &str) -> Result<(), postgres::Error> {
    tx.execute_typed(
        "UPDATE trigd_runs SET instance = NULL WHERE id = $1",
        &[(&id, Type::TEXT)],
    )?;
    Ok(())
}

/// Where a cancel of a run not found on this instance goes.
#[derive(Debug)]
pub enum CancelAt {
    /// The run was in the cluster queue: `me` has taken it, to record it
    /// `cancelled`.
    Taken(Box<RunRecord>),
    /// Another instance holds it: it was asked to stop it.
    Asked(String),
    /// Neither: it is this instance's, has ended, or is unknown.
    Here,
}

/// Cancel run `id` where it is: take it off the cluster queue, or flag it
/// for the instance that holds it (it sees the flag within its poll).
///
/// # Errors
/// The database failed.
pub fn cancel(db: &Db, me: &str, id: &str) -> Result<CancelAt, DbError> {
    let taken = db.with(|c| {
        c.query_typed_opt(
            "UPDATE trigd_runs SET instance = $1 \
             WHERE id = $2 AND state = 'queued' AND instance IS NULL RETURNING record::text",
            &[(&me, Type::TEXT), (&id, Type::TEXT)],
        )
    })?;
    if let Some(rec) = taken.and_then(|r| parse(&r.get::<_, String>(0))) {
        return Ok(CancelAt::Taken(Box::new(rec)));
    }
    let asked = db.with(|c| {
        c.query_typed_opt(
            "UPDATE trigd_runs SET cancel_requested = true \
             WHERE id = $1 AND state IN ('queued', 'running') AND instance <> $2 \
             RETURNING instance",
            &[(&id, Type::TEXT), (&me, Type::TEXT)],
        )
    })?;
    Ok(match asked {
        Some(r) => CancelAt::Asked(r.get(0)),
        None => CancelAt::Here,
    })
}

/// The poll of [`cancels`], prepared on the lease thread's connection as
/// [`TAKE`] is: it runs at every tick of the lease thread (913 times in
/// the round [`TAKE`] cites, 0.12 s of planning against 0.05 s of
/// execution).
const CANCELS: &str = "UPDATE trigd_runs SET cancel_requested = false \
    WHERE instance = $1 AND cancel_requested AND state IN ('queued', 'running') \
    RETURNING id, record->>'SupersededBy'";

/// The runs `me` holds that another instance asked to cancel, each with
/// the run of its concurrency group it is cancelled for (`SupersededBy`,
/// `cancel_running`), if any; the requests are cleared (each is handed
/// over once).
///
/// # Errors
/// The database failed.
pub fn cancels(db: &Db, me: &str) -> Result<Vec<(String, Option<String>)>, DbError> {
    let rows = db.with_background_conn(|c| {
        let stmt = c.prepared(CANCELS, &[Type::TEXT])?;
        c.client.query(&stmt, &[&me])
    })?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// Put run `id`, taken by `me`, back in the cluster queue (this instance
/// is stopping before it started).
///
/// # Errors
/// The database failed.
pub fn give_back(db: &Db, me: &str, id: &str) -> Result<(), DbError> {
    db.with_background(|c| {
        c.execute_typed(
            "UPDATE trigd_runs SET instance = NULL \
             WHERE id = $1 AND instance = $2 AND state = 'queued'",
            &[(&id, Type::TEXT), (&me, Type::TEXT)],
        )
    })
    .map(drop)
}

/// A record as `trigd_runs.record` holds it; a row that does not parse is
/// logged and skipped (it was not written by this trigd).
fn parse(text: &str) -> Option<RunRecord> {
    serde_json::from_slice(text.as_bytes())
        .inspect_err(|e| log::error!("state: a run record in the database does not parse: {e}"))
        .ok()
}

/// Claim occurrence `at_ms` (Unix ms) of schedule `schedule` for `me`:
/// whether this instance is the one to handle it (its insert succeeded;
/// another instance's came first otherwise).
///
/// # Errors
/// The database failed (the occurrence is not handled here then).
pub fn claim_occurrence(db: &Db, me: &str, schedule: &str, at_ms: i64) -> Result<bool, DbError> {
    let n = db.with_background(|c| {
        c.execute_typed(
            "INSERT INTO trigd_occurrences (schedule, occurrence, instance) \
             VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
            &[
                (&schedule, Type::TEXT),
                (&at_ms, Type::INT8),
                (&me, Type::TEXT),
            ],
        )
    })?;
    Ok(n == 1)
}
