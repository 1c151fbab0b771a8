//! Run records in the database (`trigd_runs`): the database side of
//! `state::store::RunStore`. Every write is one upsert of whole records
//! (the record as JSON beside the columns queries use), with the
//! idempotency claims waiting for those runs ([`super::claims`]) in the
//! same statement. Writes that arrive while another is in flight are sent
//! together by the next one ([`Batch`]): concurrent async accepts share a
//! round trip and a commit, as they share an `fdatasync` in `runs.log`.
//! A batch without claims goes without the claims' insert
//! ([`UPSERT_MANY`]), and a run written alone without a claim, the usual
//! write of a sync run, as a one-row statement ([`UPSERT_ONE`]): both
//! cheaper for the server.
//!
//! Fencing (for `cluster.sql`'s leases): an insert names this instance as
//! the run's executor, except an async run accepted `queued`, which waits
//! for any instance (`instance` null); an update never changes `instance`
//! and is dropped when another instance holds the run.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use postgres::types::Type;
use postgres::Client;

use super::claims::{Claim, Outcome};
use super::{Db, DbError};
use crate::state::record::{Owner, RunRecord, RunState};
use crate::state::time::Time;

/// One statement writes a batch: the runs as parallel arrays, the claims
/// first (a run whose claim lost is not written), the upsert fenced.
/// Unless `$16` (a write that must be durable is in the batch), its commit
/// does not wait for the WAL flush (`synchronous_commit = off` for this
/// transaction only, set inside the statement: no extra round trip).
/// With `$17` (ends written again after the server restarted), a run
/// already ended is left as it is.
pub const UPSERT: &str = "
WITH input AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],
                         $6::text[], $7::text[], $8::text[], $9::int8[], $10::int8[],
                         $11::text[], $12::text[], $13::text[], $14::int8[])
        AS t(id, state, program, function, tool, owner, origin, instance,
             created_ms, ended_ms, record, claim_key, claim_req, window_ms)
    WHERE CASE WHEN $16 THEN true
          ELSE set_config('synchronous_commit', 'off', true) IS NOT NULL END
), claims AS (
    INSERT INTO trigd_idempotency AS i (key_hash, request_hash, run_id, expires_at)
    SELECT claim_key, claim_req, id, now() + window_ms * interval '1 millisecond'
    FROM input WHERE claim_key IS NOT NULL
    ON CONFLICT (key_hash) DO UPDATE
        SET request_hash = excluded.request_hash, run_id = excluded.run_id,
            created_at = now(), expires_at = excluded.expires_at
        WHERE i.expires_at < now()
    RETURNING run_id
), runs AS (
    INSERT INTO trigd_runs AS r (id, state, program, function, tool, owner, origin,
                                 instance, created_at, ended_at, record)
    SELECT id, state, program, function, tool, owner, origin, instance,
           timestamptz 'epoch' + created_ms * interval '1 millisecond',
           timestamptz 'epoch' + ended_ms * interval '1 millisecond',
           record::jsonb
    FROM input
    WHERE claim_key IS NULL OR id IN (SELECT run_id FROM claims)
    ON CONFLICT (id) DO UPDATE
        SET state = excluded.state, ended_at = excluded.ended_at, record = excluded.record
        WHERE (r.instance = $15 OR r.instance IS NULL)
          AND NOT ($17 AND r.ended_at IS NOT NULL)
    RETURNING id
)
SELECT id FROM runs";

/// [`UPSERT`] for a batch in which no run makes a claim (async accepts
/// without an `Idempotency-Key`, the drain's states and ends): the same
/// fenced upsert without the claims' insert and the CTEs, which the
/// server initialises at every execution even when unused. Measured
/// 2026-11-28 (10 s of async accepts on 32 connections, PostgreSQL on
/// the same 2-core machine, `pg_stat_statements`, 9 interleaved rounds
/// each): 34–37 µs of execution a row against 39.5 with [`UPSERT`], and
/// 73,500 accepts a round against 69,400 (medians).
/// `$12` this instance, `$13` durable, `$14` written again. Prepared at
/// its first use on a connection, with the types [`Columns::runs`] gives.
pub const UPSERT_MANY: &str = "
INSERT INTO trigd_runs AS r (id, state, program, function, tool, owner, origin,
                             instance, created_at, ended_at, record)
SELECT id, state, program, function, tool, owner, origin, instance,
       timestamptz 'epoch' + created_ms * interval '1 millisecond',
       timestamptz 'epoch' + ended_ms * interval '1 millisecond',
       record::jsonb
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],
            $6::text[], $7::text[], $8::text[], $9::int8[], $10::int8[],
            $11::text[])
    AS t(id, state, program, function, tool, owner, origin, instance,
         created_ms, ended_ms, record)
WHERE CASE WHEN $13 THEN true
      ELSE set_config('synchronous_commit', 'off', true) IS NOT NULL END
ON CONFLICT (id) DO UPDATE
    SET state = excluded.state, ended_at = excluded.ended_at, record = excluded.record
    WHERE (r.instance = $12 OR r.instance IS NULL)
      AND NOT ($14 AND r.ended_at IS NOT NULL)
RETURNING id";

/// The types of [`UPSERT`]'s parameters, as [`Columns::runs`] and
/// [`Columns::claims`] give them (prepared with them when a connection
/// opens).
pub const UPSERT_TYPES: [Type; 17] = [
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::INT8_ARRAY,
    Type::INT8_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::INT8_ARRAY,
    Type::TEXT,
    Type::BOOL,
    Type::BOOL,
];

/// [`UPSERT`] for a batch of one run that makes no claim, the usual write
/// of a sync run (its `running` state, then its end): the same fenced
/// upsert with scalar parameters, none of the arrays, the claims' insert
/// and the CTE scans, which the server initialises at every execution
/// even when unused (alone on PostgreSQL, `pgbench` with 8 clients, it
/// wrote 1.25–2.3 times as many runs per second, median 1.5). `$12` durable, `$13` written again, `$14` this instance.
pub const UPSERT_ONE: &str = "
INSERT INTO trigd_runs AS r (id, state, program, function, tool, owner, origin,
                             instance, created_at, ended_at, record)
SELECT $1, $2, $3, $4, $5, $6, $7, $8,
       timestamptz 'epoch' + $9 * interval '1 millisecond',
       timestamptz 'epoch' + $10 * interval '1 millisecond',
       $11::jsonb
WHERE CASE WHEN $12 THEN true
      ELSE set_config('synchronous_commit', 'off', true) IS NOT NULL END
ON CONFLICT (id) DO UPDATE
    SET state = excluded.state, ended_at = excluded.ended_at, record = excluded.record
    WHERE (r.instance = $14 OR r.instance IS NULL)
      AND NOT ($13 AND r.ended_at IS NOT NULL)
RETURNING id";

/// The types of [`UPSERT_ONE`]'s parameters, as [`Values::params`] gives
/// them.
pub const UPSERT_ONE_TYPES: [Type; 14] = [
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::INT8,
    Type::INT8,
    Type::TEXT,
    Type::BOOL,
    Type::BOOL,
    Type::TEXT,
];

/// One run's record, as [`DbRuns::get`] reads it.
pub const GET: &str = "SELECT record::text FROM trigd_runs WHERE id = $1";

/// The types of [`GET`]'s parameters.
pub const GET_TYPES: [Type; 1] = [Type::TEXT];

/// The run list's page, as [`DbRuns::page`] reads it.
const PAGE: &str = "
SELECT record::text, (extract(epoch FROM created_at) * 1000)::int8, right(id, 32)
FROM trigd_runs
WHERE ($1 OR (owner = 'hook' AND $2) OR program = ANY($3))
  AND ($4::text IS NULL OR program = $4)
  AND ($5::text IS NULL OR function = $5)
  AND ($6::text IS NULL OR tool = $6)
  AND ($7::text IS NULL OR origin = $7)
  AND ($8::text IS NULL OR left(origin, length($8) + 1) = $8 || ':')
  AND ($9::text IS NULL OR state = $9)
  AND ($10::int8 IS NULL OR created_at >= timestamptz 'epoch' + $10 * interval '1 millisecond')
  AND ($11::int8 IS NULL OR created_at < timestamptz 'epoch' + $11 * interval '1 millisecond')
  AND ($12::int8 IS NULL
       OR (created_at, right(id, 32) COLLATE \"C\")
          < (timestamptz 'epoch' + $12 * interval '1 millisecond', $13 COLLATE \"C\"))
ORDER BY created_at DESC, right(id, 32) COLLATE \"C\" DESC
LIMIT $14";

/// A page of runs, and the position of its last run when more match:
/// (created ms, 32 hex digits).
pub type Page = (Vec<RunRecord>, Option<(i64, String)>);

/// Which runs a page of the run list shows (`RunFilter` of issue 35 in
/// plain values).
#[derive(Debug, Clone, Default)]
pub struct PageQuery {
    /// Every run (`Scope::All`); else only `programs` and, with `hooks`,
    /// hooks-file hooks' runs.
    pub all: bool,
    /// Program ids the caller may see.
    pub programs: Vec<u64>,
    /// Hooks' runs too.
    pub hooks: bool,
    /// Only this program.
    pub program: Option<u64>,
    /// Only this function (a hook's run: the hook id).
    pub function: Option<String>,
    /// Only this tool's endpoints.
    pub tool: Option<String>,
    /// Only this origin, exactly (`api_key:deploy`).
    pub origin: Option<String>,
    /// Only origins of this kind (`api_key`, `session`…).
    pub origin_kind: Option<String>,
    /// Only this state.
    pub state: Option<RunState>,
    /// Created at or after (ms since the epoch).
    pub since_ms: Option<i64>,
    /// Created before (ms since the epoch).
    pub until_ms: Option<i64>,
    /// Strictly older than this position: (created ms, 32 hex digits).
    pub before: Option<(i64, String)>,
    /// At most this many.
    pub limit: usize,
}

/// A record to write, with the claim it must make.
#[derive(Debug, Clone)]
struct Row {
    rec: RunRecord,
    claim: Option<Claim>,
    /// Committed with the WAL flushed before the writer goes on (an
    /// accepted async run, an end, a claim); else written, not synced.
    durable: bool,
}

/// Tickets of one batch: which ones were written, which claims lost.
#[derive(Debug, Default)]
struct Written {
    /// Run ids written.
    runs: Vec<String>,
    /// Claims lost, by key: (run, request) of the holder.
    lost: HashMap<String, (String, String)>,
}

/// Statements of writes in flight at once, at most. One: the writes that
/// arrive while it is in flight all go in the next statement, so a burst
/// makes larger batches, and a statement's fixed cost (executor start-up
/// of the upsert, the commit's flush) is paid by more runs. Measured on a
/// quiet 2-core machine (2026-11-28, static builds, 10 s of async accepts
/// on 32 connections, PostgreSQL 15 on the same machine, interleaved): 1
/// in flight accepted 84,316–87,466 runs in a round (five rounds), 2 in
/// flight 74,104–84,127 (five), 4 (the value before) 68,226–68,973 (two);
/// the server's CPU fell from 7.4–7.7 s a round to 6.1–6.4 s and trigd's
/// from 7.1–7.6 s to 6.0–6.6 s; sync runs on 8 connections were not slower
/// (2,187 and 2,373 a second against 2,174 and 2,222). The embedded
/// backend accepted 91,228–91,903 beside them. The cost: a backlog drains
/// about a sixth slower (its runs' writes no longer overlap); keeping 4 in
/// flight with only one of durable writes accepted fewer runs still
/// (docs/cluster.md).
const MAX_IN_FLIGHT: usize = 1;

/// Writes waiting for a statement, and the outcome of the last ones.
#[derive(Default)]
struct Queue {
    waiting: Vec<(u64, Row)>,
    /// Statements in flight.
    in_flight: usize,
    /// Runs with a write in flight: their next write waits for it, so a
    /// run's writes commit in the order they were made.
    flying: std::collections::HashSet<String>,
    next_ticket: u64,
    /// Outcomes by ticket, until their writer takes them.
    done: HashMap<u64, Result<Option<Outcome>, String>>,
}

/// Leaders and followers: a writer whose row waits sends every waiting row
/// in one statement, when fewer than [`MAX_IN_FLIGHT`] are in flight;
/// those that arrive meanwhile wait and are sent by the next.
#[derive(Default)]
struct Batch {
    queue: Mutex<Queue>,
    turn: Condvar,
}

/// Ends committed without waiting for the WAL flush, kept until they are
/// known to be on the server's disk, at most this many: past it, an end
/// waits for the flush (a flood of ends while the database cannot confirm
/// them keeps no more memory).
const MAX_UNFLUSHED: usize = 4096;

/// Says whether the WAL is flushed past every commit made before it, and
/// which server answered. A transactional logical message is WAL its
/// transaction wrote, so the commit (synchronous, the connection's
/// default) waits for the flush of the WAL up to its own commit record
/// (and for a synchronous standby, where one is configured), which
/// follows every commit made before the statement began. (`txid_current()`
/// alone, the first version, writes no WAL: PostgreSQL commits such a
/// transaction without waiting for any flush, so ends were forgotten that
/// an immediate stop then lost.) Any role may emit one; it needs no
/// `wal_level = logical`, only a decoder would read it.
const FLUSHED: &str = "SELECT (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::int8 \
                       FROM (SELECT pg_logical_emit_message(true, 'trigd', 'flushed')) AS t";

/// The run records of one instance in the database.
pub struct DbRuns {
    db: Arc<Db>,
    /// This instance's name (`trigd_runs.instance`).
    me: String,
    batch: Batch,
    /// Ends committed with `synchronous_commit = off`, oldest first, until
    /// [`DbRuns::settle_ends`] knows them flushed (or writes them again
    /// after a restart of the server lost them).
    unflushed: Mutex<Vec<RunRecord>>,
    /// The start of the server (`pg_postmaster_start_time()`, µs) the
    /// unflushed ends were committed to, once known.
    server: Mutex<Option<i64>>,
}

impl DbRuns {
    /// The records in `db`, written as instance `me`.
    pub fn new(db: Arc<Db>, me: &str) -> DbRuns {
        DbRuns {
            db,
            me: me.to_string(),
            batch: Batch::default(),
            unflushed: Mutex::default(),
            server: Mutex::default(),
        }
    }

    /// Write `rec` (insert or update), with the claim waiting for it. Ends
    /// once it is committed; when `durable` or `rec` makes an idempotency
    /// claim, once the commit is flushed to disk, as the run log and the
    /// key log sync them. Else (`running`, `queued`, an end: states the
    /// run log writes without a sync) the commit does not wait for the
    /// flush (`synchronous_commit = off`): PostgreSQL writes it to disk
    /// within about `3 × wal_writer_delay`. An end written so is kept
    /// ([`DbRuns::settle_ends`]) until the lease thread knows it flushed,
    /// and written again if the server restarted meanwhile (a crash of
    /// PostgreSQL alone, which the run log has no counterpart of: trigd
    /// lives on and must not leave the run `running` for good).
    ///
    /// # Errors
    /// The database failed; or the claim was lost to another request
    /// ([`Outcome::Lost`] noted in the pending claims): nothing written.
    pub fn write(&self, rec: &RunRecord, durable: bool) -> Result<(), DbError> {
        if let Some(Outcome::Lost { run, .. }) = self.db.claims.outcome(&rec.run) {
            // Its request is answered as a repeat of `run`: it must not run.
            return Err(DbError::Claimed(run));
        }
        let claim = self.db.claims.waiting(&rec.run);
        let has_claim = claim.is_some();
        // A claim is synced as the key log syncs it: a retry after a crash
        // must find it.
        let end = rec.state.is_terminal();
        let durable = durable || has_claim || (end && self.unflushed_full());
        let row = Row {
            rec: rec.clone(),
            claim,
            durable,
        };
        let ticket = self.enqueue(row);
        let outcome = self.await_ticket(ticket)?;
        if end && !durable {
            lock(&self.unflushed).push(rec.clone());
        }
        match outcome {
            Some(Outcome::Lost { run, .. }) => Err(DbError::Claimed(run)),
            Some(Outcome::Made) | Some(Outcome::Waiting) | None => {
                if has_claim {
                    self.db.claims.settle(&rec.run, Outcome::Made);
                }
                Ok(())
            }
        }
    }

    /// Whether run `run`'s `running` state may wait: it has no
    /// `Idempotency-Key` claim to commit with its first write, and the
    /// database is not known to be down (then the write is tried, and
    /// fails, before the run starts: 503 `state_unavailable`).
    pub fn may_defer(&self, run: &str) -> bool {
        self.db.claims.waiting(run).is_none() && !self.db.known_down()
    }

    /// Whether [`MAX_UNFLUSHED`] ends wait for [`DbRuns::settle_ends`].
    fn unflushed_full(&self) -> bool {
        lock(&self.unflushed).len() >= MAX_UNFLUSHED
    }

    /// Ends committed without waiting for the flush and not yet known
    /// flushed.
    pub fn unflushed(&self) -> usize {
        lock(&self.unflushed).len()
    }

    /// Forget the ends written without waiting for the flush once a
    /// flushed commit covers them (one background round trip, [`FLUSHED`]);
    /// when the server restarted since they were committed (a crash may
    /// have lost them), write them again, durably, leaving alone the runs
    /// whose end is there. Called by the lease thread at each tick.
    ///
    /// # Errors
    /// The database failed: they stay, for the next call.
    pub fn settle_ends(&self) -> Result<(), DbError> {
        let n = self.unflushed();
        if n == 0 {
            return Ok(());
        }
        let server: i64 = self
            .db
            .with_background(|c| c.query_typed_one(FLUSHED, &[])?.try_get(0))?;
        let known = *lock(&self.server).get_or_insert_with(|| {
            // Every end of this process was committed after the check.
            self.db.server_at_start.get().copied().unwrap_or(-1)
        });
        let known = Some(known).filter(|k| *k >= 0);
        if known == Some(server) {
            lock(&self.unflushed).drain(..n);
            return Ok(());
        }
        // The first look, or a restart (a failover): write them again.
        let recs: Vec<RunRecord> = lock(&self.unflushed).clone();
        let rows: Vec<(u64, Row)> = recs
            .into_iter()
            .map(|rec| {
                let row = Row {
                    rec,
                    claim: None,
                    durable: true,
                };
                (0, row)
            })
            .collect();
        self.send(&rows, true)?;
        if known.is_some() {
            log::warn!(
                "the database restarted: {} run ends committed just before are written again",
                rows.len()
            );
        }
        *lock(&self.server) = Some(server);
        lock(&self.unflushed).drain(..rows.len());
        Ok(())
    }

    /// Queue `row`, returning its ticket.
    fn enqueue(&self, row: Row) -> u64 {
        let mut q = self.lock();
        q.next_ticket += 1;
        let t = q.next_ticket;
        q.waiting.push((t, row));
        t
    }

    /// Wait for ticket `t`'s outcome, sending the waiting rows when no
    /// write is in flight.
    fn await_ticket(&self, t: u64) -> Result<Option<Outcome>, DbError> {
        let mut q = self.lock();
        loop {
            if let Some(r) = q.done.remove(&t) {
                return r.map_err(DbError::Unavailable);
            }
            let mine_waits = q.waiting.iter().any(|(w, _)| *w == t);
            if mine_waits && q.in_flight < MAX_IN_FLIGHT {
                let Queue {
                    waiting, flying, ..
                } = &mut *q;
                let rows = take_batch(waiting, flying);
                if !rows.is_empty() {
                    q.in_flight += 1;
                    drop(q);
                    let outcome = self.send(&rows, false);
                    q = self.lock();
                    q.in_flight -= 1;
                    for (_, r) in &rows {
                        q.flying.remove(&r.rec.run);
                    }
                    settle(&mut q.done, &rows, outcome, &self.db);
                    drop(q);
                    self.batch.turn.notify_all();
                    q = self.lock();
                    continue;
                }
            }
            q = self.batch.turn.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// One statement for `rows`, then, when claims were lost, one to read
    /// who holds them; `again`: ends written again, not over an end.
    fn send(&self, rows: &[(u64, Row)], again: bool) -> Result<Written, DbError> {
        if let [(_, row)] = rows {
            if row.claim.is_none() {
                return self.send_one(row, again);
            }
        }
        let cols = Columns::of(rows.iter().map(|(_, r)| r), &self.me);
        let me = self.me.clone();
        let durable = rows.iter().any(|(_, r)| r.durable);
        let claims = rows.iter().any(|(_, r)| r.claim.is_some());
        let mut p = cols.runs();
        if claims {
            p.extend(cols.claims());
        }
        p.push((&me, Type::TEXT));
        p.push((&durable, Type::BOOL));
        p.push((&again, Type::BOOL));
        let (values, types): (Vec<_>, Vec<Type>) = p.into_iter().unzip();
        let sql = if claims { UPSERT } else { UPSERT_MANY };
        let runs = self.db.query_prepared(sql, &types, &values)?;
        let runs: Vec<String> = runs
            .iter()
            .map(|r| r.try_get(0))
            .collect::<Result<_, _>>()
            .map_err(DbError::from_pg)?;
        let lost_keys: Vec<String> = rows
            .iter()
            .filter(|(_, r)| !runs.contains(&r.rec.run))
            .filter_map(|(_, r)| r.claim.as_ref().map(|c| c.key.clone()))
            .collect();
        let mut written = Written {
            runs,
            lost: HashMap::new(),
        };
        if !lost_keys.is_empty() {
            written.lost = self.db.with(|c| holders(c, &lost_keys))?;
        }
        Ok(written)
    }

    /// [`DbRuns::send`] of one row without a claim ([`UPSERT_ONE`]).
    fn send_one(&self, row: &Row, again: bool) -> Result<Written, DbError> {
        let v = Values::of(&row.rec, &self.me);
        let mut p = v.params();
        p.push((&row.durable, Type::BOOL));
        p.push((&again, Type::BOOL));
        p.push((&self.me, Type::TEXT));
        let (values, types): (Vec<_>, Vec<Type>) = p.into_iter().unzip();
        let runs = self.db.query_prepared(UPSERT_ONE, &types, &values)?;
        let runs = runs
            .iter()
            .map(|r| r.try_get(0))
            .collect::<Result<_, _>>()
            .map_err(DbError::from_pg)?;
        Ok(Written {
            runs,
            lost: HashMap::new(),
        })
    }

    /// The record of run `id` ([`GET`]).
    ///
    /// Prepared on each connection like the record writes
    /// ([`super::Db::query_prepared`], among the connection's first), not
    /// planned at every call: status queries read it, and a slot read the
    /// record of each run it started (until the take's record was kept
    /// with the run: `runner::queue::Queued::taken`), so during 10 s of
    /// async accepts on 32 connections (2026-11-27, loaded 2-core
    /// machine, `pg_stat_statements` with `track_planning`) its 2,533
    /// reads took 0.28 s of planning against 0.08 s of execution;
    /// prepared, the server plans it a few times a connection
    /// (`pg_runs::a_runs_record_is_read_by_a_prepared_statement`).
    ///
    /// # Errors
    /// The database failed.
    pub fn get(&self, id: &str) -> Result<Option<RunRecord>, DbError> {
        if has_nul(id) {
            return Ok(None);
        }
        let rows = self.db.query_prepared(GET, &GET_TYPES, &[&id])?;
        let text: Option<String> = rows
            .first()
            .map(|r| r.try_get(0))
            .transpose()
            .map_err(DbError::from_pg)?;
        Ok(text.and_then(|t| serde_json::from_slice::<RunRecord>(t.as_bytes()).ok()))
    }

    /// The owner and state of run `id`, without its record.
    ///
    /// # Errors
    /// The database failed.
    pub fn owner_and_state(&self, id: &str) -> Result<Option<(Owner, RunState)>, DbError> {
        if has_nul(id) {
            return Ok(None);
        }
        let row: Option<(String, String)> = self.db.with(|c| {
            c.query_typed_opt(
                "SELECT owner, state FROM trigd_runs WHERE id = $1",
                &[(&id, Type::TEXT)],
            )?
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .transpose()
        })?;
        Ok(row.and_then(|(o, s)| Some((parse_owner(&o)?, RunState::from_name(&s)?))))
    }

    /// Replace the record of ended run `rec.run` from any instance (a
    /// re-run's link, a delivery's bookkeeping): unlike [`DbRuns::write`]
    /// not fenced by the executing instance, since an ended run has no
    /// executor left; a run that has not ended is left alone (false). One
    /// statement.
    ///
    /// # Errors
    /// The database failed.
    pub fn replace_ended(&self, rec: &RunRecord) -> Result<bool, DbError> {
        // As `write` does: a record always serialises (no maps with
        // non-string keys).
        let text = super::jsonb_text(serde_json::to_string(rec).unwrap_or_default());
        let n = self.db.with(|c| {
            c.execute_typed(
                "UPDATE trigd_runs SET record = $2::text::jsonb
                 WHERE id = $1 AND ended_at IS NOT NULL",
                &[(&rec.run, Type::TEXT), (&text, Type::TEXT)],
            )
        })?;
        Ok(n > 0)
    }

    /// A page of the run list (issue 35's `RunFilter`, given as plain
    /// values so that this side does not depend on the list's types):
    /// newest first by (`CreatedAt` ms, the id's 32 hex digits), at most
    /// `q.limit`, and the position of the last one when more match. One
    /// statement.
    ///
    /// # Errors
    /// The database failed.
    pub fn page(&self, q: &PageQuery) -> Result<Page, DbError> {
        let texts = [&q.function, &q.tool, &q.origin, &q.origin_kind];
        if texts.iter().any(|t| t.as_deref().is_some_and(has_nul)) {
            return Ok((Vec::new(), None));
        }
        let limit = i64::try_from(q.limit.saturating_add(1)).unwrap_or(i64::MAX);
        let programs: Vec<String> = q.programs.iter().map(u64::to_string).collect();
        let program = q.program.map(|p| p.to_string());
        let state = q.state.map(|s| s.name().to_string());
        let (before_ms, before_hex) = q.before.clone().unzip();
        let rows: Vec<(String, i64, String)> = self.db.with(|c| {
            let rows = c.query_typed(
                PAGE,
                &[
                    (&q.all, Type::BOOL),
                    (&q.hooks, Type::BOOL),
                    (&programs, Type::TEXT_ARRAY),
                    (&program, Type::TEXT),
                    (&q.function, Type::TEXT),
                    (&q.tool, Type::TEXT),
                    (&q.origin, Type::TEXT),
                    (&q.origin_kind, Type::TEXT),
                    (&state, Type::TEXT),
                    (&q.since_ms, Type::INT8),
                    (&q.until_ms, Type::INT8),
                    (&before_ms, Type::INT8),
                    (&before_hex, Type::TEXT),
                    (&limit, Type::INT8),
                ],
            )?;
            rows.iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
                .collect()
        })?;
        let more = rows.len() > q.limit;
        let mut page = Vec::with_capacity(q.limit);
        let mut last = None;
        for (text, ms, hex) in rows.into_iter().take(q.limit) {
            if let Ok(r) = serde_json::from_slice::<RunRecord>(text.as_bytes()) {
                page.push(r);
            }
            last = Some((ms, hex));
        }
        Ok((page, last.filter(|_| more)))
    }

    /// How many runs the database holds.
    #[cfg(test)]
    ///
    /// # Errors
    /// The database failed.
    pub fn count(&self) -> Result<usize, DbError> {
        let n: i64 = self.db.with(|c| {
            c.query_typed_one("SELECT count(*) FROM trigd_runs", &[])?
                .try_get(0)
        })?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// Drop ended runs past the newest `retention` ones, and expired
    /// claims (one statement).
    ///
    /// # Errors
    /// The database failed.
    pub fn trim(&self, retention: usize) -> Result<(), DbError> {
        let keep = i64::try_from(retention).unwrap_or(i64::MAX);
        self.db.with(|c| {
            c.execute_typed(
                "WITH gone AS (
                     DELETE FROM trigd_runs WHERE ended_at IS NOT NULL AND seq <= (
                         SELECT seq FROM trigd_runs WHERE ended_at IS NOT NULL
                         ORDER BY seq DESC OFFSET $1 LIMIT 1)
                     RETURNING id)
                 DELETE FROM trigd_idempotency WHERE expires_at < now()",
                &[(&keep, Type::INT8)],
            )
        })?;
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        lock(&self.batch.queue)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The waiting rows to send now (noted in `flying`): one write per run
/// and none of a run with a write in flight (its next write waits, so
/// writes commit in order), and at most one claim per key (a second waits
/// for the next batch, where it finds the first's claim).
fn take_batch(
    waiting: &mut Vec<(u64, Row)>,
    flying: &mut std::collections::HashSet<String>,
) -> Vec<(u64, Row)> {
    let mut now: Vec<(u64, Row)> = Vec::with_capacity(waiting.len());
    let mut later = Vec::new();
    for (t, row) in waiting.drain(..) {
        let same_run = flying.contains(&row.rec.run);
        let same_key = row.claim.as_ref().is_some_and(|c| {
            now.iter()
                .any(|(_, r)| r.claim.as_ref().is_some_and(|d| d.key == c.key))
        });
        if same_run || same_key {
            later.push((t, row));
        } else {
            flying.insert(row.rec.run.clone());
            now.push((t, row));
        }
    }
    *waiting = later;
    now
}

/// Whether `text` (an id or a filter a client sent) holds a NUL
/// character, which no run's id or column holds and PostgreSQL's `text`
/// refuses (SQLSTATE 22021: a `500` for `/api/runs/a%00b`): such a
/// lookup finds nothing without asking the database.
fn has_nul(text: &str) -> bool {
    text.contains('\0')
}

/// Note each ticket's outcome.
fn settle(
    done: &mut HashMap<u64, Result<Option<Outcome>, String>>,
    rows: &[(u64, Row)],
    written: Result<Written, DbError>,
    db: &Db,
) {
    let written = match written {
        Ok(w) => w,
        Err(e) => {
            // Each writer gets it back as `DbError::Unavailable(why)`.
            let why = match e {
                DbError::Unavailable(why) => why,
                e => e.to_string(),
            };
            for (t, _) in rows {
                done.insert(*t, Err(why.clone()));
            }
            return;
        }
    };
    for (t, row) in rows {
        let lost = row
            .claim
            .as_ref()
            .and_then(|c| written.lost.get(&c.key).map(|h| (c, h)));
        let outcome = match lost {
            Some((_, (run, request))) if !written.runs.contains(&row.rec.run) => {
                let o = Outcome::Lost {
                    run: run.clone(),
                    request: request.clone(),
                };
                db.claims.settle(&row.rec.run, o.clone());
                Some(o)
            }
            _ if written.runs.contains(&row.rec.run) => row.claim.as_ref().map(|_| Outcome::Made),
            _ => {
                log::warn!(
                    "run {}: state {} not recorded: another instance holds the run",
                    row.rec.run,
                    row.rec.state.name()
                );
                None
            }
        };
        done.insert(*t, Ok(outcome));
    }
}

/// Who holds each claim of `keys`: key → (run, request).
fn holders(
    c: &mut Client,
    keys: &[String],
) -> Result<HashMap<String, (String, String)>, postgres::Error> {
    let rows = c.query_typed(
        "SELECT key_hash, run_id, request_hash FROM trigd_idempotency WHERE key_hash = ANY($1)",
        &[(&keys, Type::TEXT_ARRAY)],
    )?;
    rows.iter()
        .map(|r| Ok((r.try_get(0)?, (r.try_get(1)?, r.try_get(2)?))))
        .collect()
}

/// The owner column's text: the program id, or `hook`.
fn owner_text(o: Owner) -> String {
    o.to_string()
}

/// [`owner_text`] read back.
fn parse_owner(s: &str) -> Option<Owner> {
    match s {
        "hook" => Some(Owner::Hook),
        id => id.parse().ok().map(Owner::Program),
    }
}

/// Milliseconds since the epoch.
fn millis(t: Time) -> i64 {
    t.timestamp().as_millisecond()
}

/// One record's columns, as [`UPSERT_ONE`] takes them.
struct Values {
    id: String,
    state: String,
    program: Option<String>,
    function: String,
    tool: Option<String>,
    owner: String,
    origin: String,
    instance: Option<String>,
    created: i64,
    ended: Option<i64>,
    record: String,
}

impl Values {
    fn of(rec: &RunRecord, me: &str) -> Values {
        let waits = rec.r#async && rec.state == RunState::Queued;
        Values {
            id: rec.run.clone(),
            state: rec.state.name().to_string(),
            program: rec.owner.program().map(|p| p.to_string()),
            function: rec.function.clone(),
            tool: rec.tool.as_ref().map(|t| t.tool.clone()),
            owner: owner_text(rec.owner),
            origin: rec.by.to_string(),
            instance: (!waits).then(|| me.to_string()),
            created: millis(rec.created_at),
            ended: rec
                .finished_at
                .filter(|_| rec.state.is_terminal())
                .map(millis),
            // A record always serialises (no maps with non-string keys).
            record: super::jsonb_text(serde_json::to_string(rec).unwrap_or_default()),
        }
    }

    /// Parameters `$1`–`$11` of [`UPSERT_ONE`].
    fn params(&self) -> Vec<(&(dyn postgres::types::ToSql + Sync), Type)> {
        vec![
            (&self.id, Type::TEXT),
            (&self.state, Type::TEXT),
            (&self.program, Type::TEXT),
            (&self.function, Type::TEXT),
            (&self.tool, Type::TEXT),
            (&self.owner, Type::TEXT),
            (&self.origin, Type::TEXT),
            (&self.instance, Type::TEXT),
            (&self.created, Type::INT8),
            (&self.ended, Type::INT8),
            (&self.record, Type::TEXT),
        ]
    }
}

/// The batch as the statement's parallel arrays.
#[derive(Default)]
struct Columns {
    id: Vec<String>,
    state: Vec<String>,
    program: Vec<Option<String>>,
    function: Vec<String>,
    tool: Vec<Option<String>>,
    owner: Vec<String>,
    origin: Vec<String>,
    instance: Vec<Option<String>>,
    created: Vec<i64>,
    ended: Vec<Option<i64>>,
    record: Vec<String>,
    claim_key: Vec<Option<String>>,
    claim_req: Vec<Option<String>>,
    window: Vec<Option<i64>>,
}

impl Columns {
    fn of<'r>(rows: impl Iterator<Item = &'r Row>, me: &str) -> Columns {
        let mut c = Columns::default();
        for Row { rec, claim, .. } in rows {
            let v = Values::of(rec, me);
            c.id.push(v.id);
            c.state.push(v.state);
            c.program.push(v.program);
            c.function.push(v.function);
            c.tool.push(v.tool);
            c.owner.push(v.owner);
            c.origin.push(v.origin);
            c.instance.push(v.instance);
            c.created.push(v.created);
            c.ended.push(v.ended);
            c.record.push(v.record);
            c.claim_key.push(claim.as_ref().map(|k| k.key.clone()));
            c.claim_req.push(claim.as_ref().map(|k| k.request.clone()));
            let ms = |k: &Claim| i64::try_from(k.window.as_millis()).unwrap_or(i64::MAX);
            c.window.push(claim.as_ref().map(ms));
        }
        c
    }

    /// The runs' parameters, `$1`–`$11` of [`UPSERT`] and [`UPSERT_MANY`].
    fn runs(&self) -> Vec<(&(dyn postgres::types::ToSql + Sync), Type)> {
        vec![
            (&self.id, Type::TEXT_ARRAY),
            (&self.state, Type::TEXT_ARRAY),
            (&self.program, Type::TEXT_ARRAY),
            (&self.function, Type::TEXT_ARRAY),
            (&self.tool, Type::TEXT_ARRAY),
            (&self.owner, Type::TEXT_ARRAY),
            (&self.origin, Type::TEXT_ARRAY),
            (&self.instance, Type::TEXT_ARRAY),
            (&self.created, Type::INT8_ARRAY),
            (&self.ended, Type::INT8_ARRAY),
            (&self.record, Type::TEXT_ARRAY),
        ]
    }

    /// The claims' parameters, `$12`–`$14` of [`UPSERT`].
    fn claims(&self) -> Vec<(&(dyn postgres::types::ToSql + Sync), Type)> {
        vec![
            (&self.claim_key, Type::TEXT_ARRAY),
            (&self.claim_req, Type::TEXT_ARRAY),
            (&self.window, Type::INT8_ARRAY),
        ]
    }
}
