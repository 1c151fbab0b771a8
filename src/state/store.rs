//! The run log: every run's record, in the state dir, surviving restarts.
//!
//! `state/runs.log` is append-only JSON lines; each line is the whole
//! [`RunRecord`] at one state change, and the last line of an id wins. In
//! memory we keep only a small index (id → offset of its latest line), so the
//! Results of thousands of runs never sit in RAM; a status read fetches the
//! line from disk.
//!
//! Durability: [`RunStore::append`] with `durable = true` returns after the
//! line is on disk (`fdatasync`). Concurrent durable appends share one sync
//! (group commit, [`GroupCommit`]): whoever syncs covers every line
//! written before it; `fsyncs` counts the syncs.
//!
//! A state change of a run already accepted ([`RunStore::record`]) that
//! cannot be written (disk full) is kept in memory, served by
//! [`RunStore::get`] meanwhile, and written again every half second until it
//! is on disk: an accepted run never loses its end.
//!
//! A queued run's line carries its [`RunInput`](super::record::RunInput)
//! (values, environment), so that it can run after a restart; the input is
//! dropped from the line that ends the run and never served.
//!
//! Start-up reads the log once into the index, cuts off a torn last line,
//! keeps `queued` runs queued (and `running` ones whose function says
//! `retry_on_restart`, which the caller decides) for the runner to start
//! again in their original order, and appends an `interrupted` line for
//! each other unfinished run: it writes only what it repairs. Compaction
//! rewrites the file with the newest `run_retention` finished runs plus
//! every unfinished one (temp file, fsync, rename) whenever the log holds
//! about twice that many lines, and once after start-up when that found
//! runs past `run_retention` or unreadable lines.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread;
use std::time::Duration;

use super::commit::GroupCommit;
use super::file::{sync_dir, tmp_path};
pub use super::filter::{Cursor, OriginFilter, RunFilter, RunPage, Scope, DEFAULT_PAGE, MAX_PAGE};
use super::index::{Index, RunId, Slot};
use crate::state::delivery::keep_progress;
use crate::state::output::{self, Inline};
use crate::state::pg::deferred::Deferred;
use crate::state::pg::runs::{DbRuns, PageQuery};
use crate::state::pg::unwritten::Unwritten;
use crate::state::pg::{Db, DbError};
use crate::state::record::{Owner, RunHead, RunRecord, RunState};
use crate::state::time::Time;
use crate::sys;

/// The run records: the run log in the state dir ([`FileRuns`]), or with
/// `[state] url` the database ([`DbRuns`]), which every instance reads.
/// Callers see one interface whatever the backend.
pub struct RunStore {
    backend: Backend,
}

/// Where the run records are.
enum Backend {
    Files(Arc<FileRuns>),
    Database {
        runs: Box<DbRuns>,
        state_dir: PathBuf,
        retention: usize,
        /// Run ends written: every [`TRIM_EVERY`]th makes a trim due.
        ends: AtomicU64,
        /// A trim of old runs is due ([`RunStore::trim_if_due`]).
        trim_due: AtomicBool,
        /// State changes made while the database was unreachable.
        unwritten: Box<Unwritten>,
        /// Held by [`RunStore::update`]: one read-modify-write at a time.
        updating: Mutex<()>,
        /// Sync runs whose `running` state is not written yet.
        deferred: Box<Deferred>,
    },
}

/// A database error as the `io::Error` the store's callers handle (its
/// source stays reachable for the 503 `state_unavailable` answer).
fn db_io(e: DbError) -> io::Error {
    io::Error::other(e)
}

/// Run ends written between two trims of the database's old runs. Ends,
/// not writes: only an ended run can be trimmed, and each trim costs the
/// server a fixed search for the retention boundary (1.5–4 ms with the
/// default `run_retention`, `pg_stat_statements`), so a burst of accepts
/// that ends few runs trimmed 108–151 times a round of 8–10 s for little
/// (0.13–0.63 s of the server's CPU, in the request threads that made
/// every 1000th write; 2 trims with ends counted; 2026-11-29). The trim
/// runs on the lease thread ([`RunStore::trim_if_due`]), not in the
/// request thread whose end made it due: a sync caller is not answered a
/// few ms late once every 1000 runs.
const TRIM_EVERY: u64 = 1000;

impl RunStore {
    /// Open the run log in `state_dir` ([`FileRuns::open`]).
    ///
    /// # Errors
    /// See [`FileRuns::open`].
    pub fn open(
        state_dir: &Path,
        retention: usize,
        retry: impl Fn(&mut RunRecord) -> bool,
    ) -> io::Result<(RunStore, Vec<String>)> {
        let (files, resumed) = FileRuns::open(state_dir, retention, retry)?;
        let backend = Backend::Files(Arc::new(files));
        Ok((RunStore { backend }, resumed))
    }

    /// The run records in `db`, written by instance `me`; kept output stays
    /// in `state_dir`. Nothing is resumed or interrupted here: the leases
    /// (`cluster.sql`) decide which runs to start again.
    pub fn database(db: Arc<Db>, me: &str, state_dir: &Path, retention: usize) -> RunStore {
        let _ = fs::create_dir_all(state_dir);
        RunStore {
            backend: Backend::Database {
                runs: Box::new(DbRuns::new(db, me)),
                state_dir: state_dir.to_path_buf(),
                retention: retention.max(1),
                ends: AtomicU64::new(0),
                trim_due: AtomicBool::new(false),
                unwritten: Box::default(),
                updating: Mutex::new(()),
                deferred: Box::default(),
            },
        }
    }

    /// Whether every instance reads these records (the database).
    pub fn is_shared(&self) -> bool {
        matches!(self.backend, Backend::Database { .. })
    }

    /// Start the file log's flush thread ([`FileRuns::start_flusher`]);
    /// with the database, the thread that writes the state changes kept
    /// while it was unreachable, every half second, once it answers.
    pub fn start_flusher(self: &Arc<Self>) {
        match &self.backend {
            Backend::Files(f) => f.start_flusher(),
            Backend::Database { .. } => {
                let weak = Arc::downgrade(self);
                let spawned = thread::Builder::new()
                    .name("store-flush".into())
                    .spawn(move || loop {
                        thread::sleep(Duration::from_millis(500));
                        let Some(store) = weak.upgrade() else { return };
                        store.flush_unwritten();
                    });
                if let Err(e) = spawned {
                    log::error!("cannot start the run store's flush thread: {e}");
                }
            }
        }
    }

    /// Write the state changes kept while the database was unreachable.
    fn flush_unwritten(&self) {
        if let Backend::Database {
            runs, unwritten, ..
        } = &self.backend
        {
            if unwritten.is_empty() {
                return;
            }
            let n = unwritten.flush(|rec| runs.write(rec, true));
            if n > 0 {
                log::info!(
                    "{n} run state changes kept while the database was unreachable are recorded"
                );
            }
        }
    }

    /// Record a state change of an accepted run (not waiting for disk).
    pub fn record(&self, rec: &RunRecord) {
        match &self.backend {
            Backend::Files(f) => f.record(rec),
            Backend::Database { .. } => self.write_logged(rec, false),
        }
    }

    /// [`RunStore::record`], on disk (committed) before it returns.
    pub fn record_synced(&self, rec: &RunRecord) {
        match &self.backend {
            Backend::Files(f) => f.record_synced(rec),
            Backend::Database { .. } => self.write_logged(rec, true),
        }
    }

    /// A database write whose failure is only logged; while the database
    /// is unreachable, the change is kept in memory and written once it
    /// answers (after any change of the same run kept before it).
    fn write_logged(&self, rec: &RunRecord, durable: bool) {
        if let Backend::Database { unwritten, .. } = &self.backend {
            if unwritten.get(&rec.run).is_some() {
                return unwritten.keep(rec);
            }
        }
        let r = self.write_db(rec, durable);
        if let (Err(e), Backend::Database { unwritten, .. }) = (&r, &self.backend) {
            let unavailable = e
                .get_ref()
                .and_then(|x| x.downcast_ref::<DbError>())
                .is_some_and(DbError::is_unavailable);
            if unavailable {
                log::warn!(
                    "run {}: state {} kept until the database answers: {e}",
                    rec.run,
                    rec.state.name()
                );
                return unwritten.keep(rec);
            }
        }
        if let Err(e) = r {
            log::error!(
                "run {}: cannot record state {}: {e}",
                rec.run,
                rec.state.name()
            );
        }
    }

    /// Write `rec` to the database (`durable`: the commit flushed, see
    /// [`DbRuns::write`]); every [`TRIM_EVERY`]th end makes a trim of old
    /// runs due.
    fn write_db(&self, rec: &RunRecord, durable: bool) -> io::Result<()> {
        let Backend::Database {
            runs,
            ends,
            trim_due,
            deferred,
            ..
        } = &self.backend
        else {
            return Ok(());
        };
        deferred.settle(&rec.run);
        runs.write(rec, durable).map_err(db_io)?;
        let trims = rec.state.is_terminal()
            && ends.fetch_add(1, Ordering::Relaxed) % TRIM_EVERY == TRIM_EVERY - 1;
        if trims {
            trim_due.store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Drop the database's ended runs past `run_retention` when a trim is
    /// due (the lease thread calls it at most once a poll). A failed trim
    /// is logged; the next [`TRIM_EVERY`] ends make one due again.
    pub fn trim_if_due(&self) {
        let Backend::Database {
            runs,
            retention,
            trim_due,
            ..
        } = &self.backend
        else {
            return;
        };
        if trim_due.swap(false, Ordering::Relaxed) {
            if let Err(e) = runs.trim(*retention) {
                log::warn!("cannot drop old runs from the database: {e}");
            }
        }
    }

    /// State changes waiting to be written.
    pub fn unwritten(&self) -> usize {
        match &self.backend {
            Backend::Files(f) => f.unwritten(),
            Backend::Database { unwritten, .. } => unwritten.len(),
        }
    }

    /// Append the record's current state; with `durable`, return once it
    /// is on disk (committed).
    ///
    /// # Errors
    /// See [`FileRuns::append`]; the database failed, or the run's
    /// idempotency claim was lost to another request (nothing written).
    pub fn append(&self, rec: &RunRecord, durable: bool) -> io::Result<()> {
        match &self.backend {
            Backend::Files(f) => f.append(rec, durable),
            Backend::Database { .. } => self.write_db(rec, durable),
        }
    }

    /// Record sync run `rec`'s state (`queued` or `running`) later, if the
    /// run is still in it [`DEFER`](crate::state::pg::deferred::DEFER)
    /// after now ([`RunStore::write_deferred`]); a run that ends first is
    /// written once, with its end. Only with the database, not for a run
    /// with an `Idempotency-Key` claim (the claim is committed with the
    /// run's first write, before the run starts), nor while the database
    /// is known to be down ([`DbRuns::may_defer`]): false when not
    /// deferred (write it with [`RunStore::append`]).
    pub fn defer_state(&self, rec: &RunRecord) -> bool {
        match &self.backend {
            Backend::Database { runs, deferred, .. } if runs.may_defer(&rec.run) => {
                deferred.defer(rec);
                true
            }
            _ => false,
        }
    }

    /// Write the states deferred at least `age` (all with zero),
    /// and return how long until the next one is due (the lease thread
    /// calls it at each tick). A failed write is logged only: the run's
    /// end makes it good.
    pub fn write_deferred(&self, age: Duration) -> Option<Duration> {
        let Backend::Database { runs, deferred, .. } = &self.backend else {
            return None;
        };
        let due = deferred.due(age);
        Self::write_states(runs, &due);
        deferred.done(&due);
        deferred.next_due()
    }

    /// Write run `run`'s deferred state now, if it waits: before its
    /// output is copied to the database (the copy refers to the row).
    pub fn write_deferred_run(&self, run: &str) {
        if let Backend::Database { runs, deferred, .. } = &self.backend {
            if let Some(rec) = deferred.take(run) {
                let recs = [rec];
                Self::write_states(runs, &recs);
                deferred.done(&recs);
            }
        }
    }

    /// Write deferred states (not through
    /// [`RunStore::write_db`], which would wait for them). Once the
    /// database is unavailable the rest are not tried: each would hold the
    /// lease thread for a timeout, and their ends make them good.
    fn write_states(runs: &DbRuns, recs: &[RunRecord]) {
        for rec in recs {
            if let Err(e) = runs.write(rec, false) {
                log::warn!(
                    "run {}: cannot record state {}: {e}",
                    rec.run,
                    rec.state.name()
                );
                if e.is_unavailable() {
                    return;
                }
            }
        }
    }

    /// Write `recs` as durable [`RunStore::append`]s and make them durable
    /// together: in the file, one write and one sync for all of them (a
    /// schedule's wake accepts up to thousands of runs at once).
    ///
    /// # Errors
    /// As [`RunStore::append`]; a failure concerns every record (none of
    /// them counts as written).
    pub fn append_all(&self, recs: &[&RunRecord]) -> io::Result<()> {
        match &self.backend {
            Backend::Files(f) => f.append_all(recs),
            Backend::Database { .. } => recs.iter().try_for_each(|rec| self.write_db(rec, true)),
        }
    }

    /// Make every record written so far durable (the schedule timer, just
    /// before a firing: its own sync then has little else to flush).
    ///
    /// # Errors
    /// The sync failed.
    pub fn sync(&self) -> io::Result<()> {
        match &self.backend {
            Backend::Files(f) => f.sync(),
            Backend::Database { .. } => Ok(()),
        }
    }

    /// With the database, forget the ends committed without waiting for
    /// the WAL flush once they are known flushed, or write them again when
    /// the server restarted meanwhile ([`DbRuns::settle_ends`]); the run
    /// log has nothing to do (its ends are not synced either, and a crash
    /// that loses them restarts trigd, which interrupts the runs).
    ///
    /// # Errors
    /// The database failed (they stay for the next call).
    pub fn settle_ends(&self) -> io::Result<()> {
        match &self.backend {
            Backend::Files(_) => Ok(()),
            Backend::Database { runs, .. } => runs.settle_ends().map_err(db_io),
        }
    }

    /// `fdatasync` calls on the run log.
    pub fn fsyncs(&self) -> u64 {
        match &self.backend {
            Backend::Files(f) => f.fsyncs(),
            Backend::Database { .. } => 0,
        }
    }

    /// Runs found cut off at open and recorded `interrupted`.
    pub fn interrupted_at_open(&self) -> &[String] {
        match &self.backend {
            Backend::Files(f) => f.interrupted_at_open(),
            Backend::Database { .. } => &[],
        }
    }

    /// Runs found `running` at open, whose processes the previous trigd
    /// may have left ([`crate::runner::orphans`]); none with the database,
    /// whose lease thread adopts this instance's runs instead.
    pub fn running_at_open(&self) -> &[String] {
        match &self.backend {
            Backend::Files(f) => f.running_at_open(),
            Backend::Database { .. } => &[],
        }
    }

    /// The record of run `id`; `None` also when the database failed
    /// (logged): see [`RunStore::fetch`].
    pub fn get(&self, id: &str) -> Option<RunRecord> {
        self.fetch(id).unwrap_or_else(|e| {
            log::warn!("run {id}: cannot read its record: {e}");
            None
        })
    }

    /// The record of run `id`, or why it cannot be read now.
    ///
    /// # Errors
    /// The database failed (a [`DbError`] inside).
    pub fn fetch(&self, id: &str) -> io::Result<Option<RunRecord>> {
        match &self.backend {
            Backend::Files(f) => Ok(f.get(id)),
            Backend::Database {
                runs,
                unwritten,
                deferred,
                ..
            } => match unwritten.get(id).or_else(|| deferred.get(id)) {
                Some(rec) => Ok(Some(rec)),
                None => runs.get(id).map_err(db_io),
            },
        }
    }

    /// The head of run `id` (its id, state and owner), or why it cannot
    /// be read now: from the file log without reading its Result into
    /// memory ([`FileRuns::head`]); from the database, of its record.
    ///
    /// # Errors
    /// The database failed (a [`DbError`] inside).
    pub fn fetch_head(&self, id: &str) -> io::Result<Option<RunHead>> {
        match &self.backend {
            Backend::Files(f) => Ok(f.head(id)),
            Backend::Database { runs, .. } => {
                Ok(runs.get(id).map_err(db_io)?.as_ref().map(RunHead::of))
            }
        }
    }

    /// Fail unless a run could be recorded now (`/healthz`).
    ///
    /// # Errors
    /// The state dir is not writable (the database is checked by `Db`).
    pub fn check_writable(&self) -> io::Result<()> {
        match &self.backend {
            Backend::Files(f) => f.check_writable(),
            Backend::Database { .. } => Ok(()),
        }
    }

    /// The owner of run `id`, without reading its record.
    pub fn owner_of(&self, id: &str) -> Option<Owner> {
        match &self.backend {
            Backend::Files(f) => f.owner_of(id),
            Backend::Database { runs, .. } => runs.owner_and_state(id).ok().flatten().map(|o| o.0),
        }
    }

    /// Whether run `id` has ended; `None` when it is not kept.
    pub fn has_ended(&self, id: &str) -> Option<bool> {
        match &self.backend {
            Backend::Files(f) => f.has_ended(id),
            Backend::Database { runs, .. } => runs
                .owner_and_state(id)
                .ok()
                .flatten()
                .map(|o| o.1.is_terminal()),
        }
    }

    /// The output run `id` keeps in its record, if it ended with it
    /// there (`output.rs`), without reading the rest of its record into
    /// memory from the file log ([`FileRuns::inline_output`]). `None` also
    /// when the database failed (logged).
    pub fn inline_output(&self, id: &str) -> Option<Inline> {
        match &self.backend {
            Backend::Files(f) => f.inline_output(id),
            Backend::Database { .. } => self.get(id)?.output,
        }
    }

    /// Where the output of run `id` is kept on this host.
    pub fn output_path(&self, id: &str) -> PathBuf {
        match &self.backend {
            Backend::Files(f) => f.output_path(id),
            Backend::Database { state_dir, .. } => output::path(state_dir, output::hex_of(id)),
        }
    }

    /// A page of runs, newest first, as `filter` says ([`FileRuns::list`];
    /// the same order, filters and cursor in SQL with the database).
    ///
    /// # Errors
    /// The database failed (a [`DbError`] inside).
    pub fn page(&self, filter: &RunFilter) -> io::Result<RunPage> {
        match &self.backend {
            Backend::Files(f) => Ok(f.list(filter)),
            Backend::Database { runs, .. } => {
                let (recs, next) = runs.page(&page_query(filter)).map_err(db_io)?;
                Ok(RunPage {
                    runs: recs.into_iter().map(RunRecord::public).collect(),
                    next: next.and_then(|(created_ms, hex)| cursor(created_ms, &hex)),
                })
            }
        }
    }

    /// [`RunStore::page`] for internal callers: empty when the database
    /// failed (logged).
    pub fn list(&self, filter: &RunFilter) -> RunPage {
        self.page(filter).unwrap_or_else(|e| {
            log::warn!("cannot list runs: {e}");
            RunPage::default()
        })
    }

    /// Record `rec` ([`RunStore::record`]; [`RunStore::record_synced`]
    /// when `durable`) with the progress of its deliveries that the
    /// delivery service recorded meanwhile taken into it
    /// ([`keep_progress`]), under [`RunStore::update`]'s lock: a runner's
    /// copy of a run whose deliveries go out while it still runs
    /// (`callbacks = "each"`) would otherwise write them back to `pending`,
    /// and a delivery's update lands either before (taken in) or after
    /// (on top of) this write, never under it.
    pub fn record_keeping_deliveries(&self, rec: &mut RunRecord, durable: bool) {
        let updating = match &self.backend {
            Backend::Files(f) => &f.updating,
            Backend::Database { updating, .. } => updating,
        };
        let _one = lock(updating);
        match self.fetch(&rec.run) {
            Ok(Some(kept)) => {
                keep_progress(&mut rec.callbacks, &kept.callbacks);
            }
            Ok(None) => {}
            // Written as it is (kept until the database answers): the
            // state change matters more than a delivery's progress.
            Err(e) => log::warn!("run {}: cannot read its deliveries: {e}", rec.run),
        }
        if durable {
            self.record_synced(rec);
        } else {
            self.record(rec);
        }
    }

    /// Change the kept record of run `id` ([`FileRuns::update`]): one
    /// change at a time on this instance. With the database a read and a
    /// write (two round trips, not atomic across instances: the changes
    /// made this way are of ended runs, by the instance acting on them).
    ///
    /// # Errors
    /// The read failed, or the write when `durable`.
    pub fn update(
        &self,
        id: &str,
        durable: bool,
        change: impl FnOnce(&mut RunRecord) -> bool,
    ) -> io::Result<Option<RunRecord>> {
        let updating = match &self.backend {
            Backend::Files(f) => return f.update(id, durable, change),
            Backend::Database { updating, .. } => updating,
        };
        let _one = lock(updating);
        let Some(mut rec) = self.fetch(id)? else {
            return Ok(None);
        };
        if change(&mut rec) {
            self.rewrite(&rec, durable)?;
        }
        Ok(Some(rec))
    }

    /// Write a record changed by [`RunStore::update`] to the database: an
    /// ended run's from any instance, another's as its executor writes.
    fn rewrite(&self, rec: &RunRecord, durable: bool) -> io::Result<()> {
        let Backend::Database {
            runs, unwritten, ..
        } = &self.backend
        else {
            return Ok(());
        };
        // A state still waiting in memory goes with it (written in order
        // once the database answers), not around it.
        if rec.state.is_terminal() && unwritten.get(&rec.run).is_none() {
            match runs.replace_ended(rec) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) if durable => return Err(db_io(e)),
                // Kept in memory below while the database is unavailable.
                Err(_) => {}
            }
        }
        if durable {
            self.write_db(rec, true)
        } else {
            self.write_logged(rec, false);
            Ok(())
        }
    }

    /// How many runs of the index cannot be read back.
    #[cfg(test)]
    pub fn unreadable(&self) -> usize {
        match &self.backend {
            Backend::Files(f) => f.unreadable(),
            Backend::Database { .. } => 0,
        }
    }

    /// How many runs are kept.
    #[cfg(test)]
    pub fn count(&self) -> usize {
        match &self.backend {
            Backend::Files(f) => f.count(),
            Backend::Database { runs, .. } => runs.count().unwrap_or(0),
        }
    }
}

/// `filter` in the plain values of [`DbRuns::page`].
fn page_query(filter: &RunFilter) -> PageQuery {
    let (all, programs, hooks) = match &filter.scope {
        Scope::All => (true, Vec::new(), false),
        Scope::Only { programs, hooks } => (false, programs.iter().copied().collect(), *hooks),
    };
    let (origin, origin_kind) = match &filter.origin {
        Some(OriginFilter::Exact(o)) => (Some(o.to_string()), None),
        Some(OriginFilter::Kind(k)) => (None, Some(k.clone())),
        None => (None, None),
    };
    PageQuery {
        all,
        programs,
        hooks,
        program: filter.program,
        function: filter.function.clone(),
        tool: filter.tool.clone(),
        origin,
        origin_kind,
        state: filter.state,
        since_ms: filter.since.map(|t| t.timestamp().as_millisecond()),
        until_ms: filter.until.map(|t| t.timestamp().as_millisecond()),
        before: filter.before.map(|c| (c.created_ms, hex::encode(c.id))),
        limit: filter.limit,
    }
}

/// The cursor of a database position (ms, 32 hex digits).
fn cursor(created_ms: i64, hex: &str) -> Option<Cursor> {
    let mut id = [0u8; 16];
    hex::decode_to_slice(hex, &mut id).ok()?;
    Some(Cursor { created_ms, id })
}

/// The index key of `id`, if it is a run id: the 16 bytes of its 32 hex
/// digits, with or without the instance name in front (see `cluster.rs`).
fn run_id(id: &str) -> Option<RunId> {
    let hex = id.rsplit_once('-').map_or(id, |(_, hex)| hex);
    let mut out = [0u8; 16];
    hex::decode_to_slice(hex, &mut out).ok()?;
    Some(out)
}

/// The open log and its index; behind one mutex.
struct Log {
    file: File,
    len: u64,
    index: Index,
    /// Lines in the file (compaction trigger).
    lines: usize,
    /// Sequence number of the last line written.
    seq: u64,
}

/// When to give freed memory back after a burst of runs: every run
/// accepted, started and ended writes a line of the log, so its sequence
/// number is the runs' activity clock. A burst leaves memory free in the
/// allocator (the queued runs, their records, the threads' buffers) that it
/// keeps for reuse; once a tick passes with no line written after some
/// were, [`Quiet::tick`] says to trim, once per quiet spell.
#[derive(Debug, Default)]
struct Quiet {
    /// The sequence number seen at the last tick.
    seen: u64,
    /// The sequence number at the last trim.
    trimmed: u64,
}

impl Quiet {
    /// One tick with the log at `seq`: whether to trim now.
    fn tick(&mut self, seq: u64) -> bool {
        let due = seq == self.seen && seq != self.trimmed;
        if due {
            self.trimmed = seq;
        }
        self.seen = seq;
        due
    }
}

/// The run log of one state dir (the file side of [`RunStore`]).
pub struct FileRuns {
    path: PathBuf,
    state_dir: PathBuf,
    retention: usize,
    log: Mutex<Log>,
    /// Durable appends share syncs ([`GroupCommit::sync_upto`]).
    commit: GroupCommit,
    /// State changes not yet written (disk full), latest per run, in the
    /// order they happened.
    unwritten: Mutex<Vec<(RunId, RunRecord)>>,
    /// Runs found cut off at open and recorded `interrupted`.
    interrupted: Vec<String>,
    /// Runs found `running` at open (recorded `interrupted` or queued
    /// again): their processes may have outlived the previous trigd.
    running: Vec<String>,
    /// Held by the one compaction running.
    compacting: Mutex<()>,
    /// A compaction is due whatever the log's length: start-up found
    /// finished runs past retention or lines that do not read as a run.
    compact_due: AtomicBool,
    /// Held while a kept record is read, changed and written again
    /// ([`RunStore::update`]), so that two changes never undo each other.
    updating: Mutex<()>,
}

impl FileRuns {
    /// Open (creating) `state_dir/runs.log` and recover it: index its lines
    /// in place, cut off a torn last line, and record the end of every
    /// unfinished run that will not run again. A `queued` run stays queued,
    /// a `running` one is queued again when `retry` says so; their ids come
    /// back in their original order, for the runner to start. Every other
    /// unfinished run becomes `interrupted`.
    ///
    /// The log is not rewritten here: start-up reads it once and writes
    /// only the lines of the runs it changes, so that it takes about the
    /// time of a read of the file whatever the history (rewriting 1,000,000
    /// runs took 11–45 s, past a systemd start timeout). The finished runs
    /// past `retention` leave the index at once; the compaction that drops
    /// their lines (and lines that do not read as a run) runs on the flush
    /// thread once serving has started ([`FileRuns::start_flusher`]).
    ///
    /// # Errors
    /// The state dir cannot be created or the log cannot be read or written.
    pub fn open(
        state_dir: &Path,
        retention: usize,
        retry: impl Fn(&mut RunRecord) -> bool,
    ) -> io::Result<(FileRuns, Vec<String>)> {
        fs::create_dir_all(state_dir)?;
        let path = super::Kept::Runs.path_in(state_dir);
        let retention = retention.max(1);
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(&path)?;
        let Loaded {
            mut log,
            skipped,
            live,
        } = read_log(file, &path)?;
        let past_retention = drop_past_retention(&mut log.index, retention);
        let commit = GroupCommit::new(log.file.try_clone()?);
        let mut store = FileRuns {
            path,
            state_dir: state_dir.to_path_buf(),
            retention,
            log: Mutex::new(log),
            commit,
            unwritten: Mutex::new(Vec::new()),
            interrupted: Vec::new(),
            running: Vec::new(),
            compacting: Mutex::new(()),
            compact_due: AtomicBool::new(past_retention || skipped > 0),
            updating: Mutex::new(()),
        };
        let resumed = store.recover(live, retry)?;
        output::sweep(state_dir, |name| {
            run_id(name).is_some_and(|id| lock(&store.log).index.get(&id).is_some())
        });
        sys::trim_heap();
        Ok((store, resumed))
    }

    /// Start-up's repair of the runs a stop cut off (`live`, in the order
    /// they were accepted): each is queued again (the ones `retry` or its
    /// state say) or recorded `interrupted`, by a line appended for each
    /// run that changes, all synced once. The queued runs' ids, in order;
    /// the ones found `running` are kept for [`FileRuns::running_at_open`].
    fn recover(
        &mut self,
        live: Vec<RunId>,
        retry: impl Fn(&mut RunRecord) -> bool,
    ) -> io::Result<Vec<String>> {
        let now = Time::now();
        let (mut resumed, mut interrupted, mut written) = (Vec::new(), Vec::new(), false);
        for key in live {
            let Some(mut r) = self.read::<RunRecord>(key, LINE_IN_MEMORY, WINDOW) else {
                continue;
            };
            if r.state == RunState::Running {
                self.running.push(r.run.clone());
            }
            let changed = r.state != RunState::Queued || r.started_at.is_some();
            // `retry` may note the cut attempt and give the run its input.
            let again = (r.state == RunState::Queued || retry(&mut r)) && r.input.is_some();
            let changed = if again {
                resumed.push(r.run.clone());
                r.state = RunState::Queued;
                r.started_at = None;
                changed
            } else {
                interrupted.push(r.run.clone());
                r.state = RunState::Interrupted;
                r.finished_at = Some(now);
                r.error = Some(STOPPED_UNSEEN.into());
                r.input = None;
                true
            };
            if changed {
                self.write(&r, false)?;
                written = true;
            }
        }
        if written {
            self.sync()?;
        }
        self.interrupted = interrupted;
        Ok(resumed)
    }

    /// Start the thread that writes kept state changes once the disk takes
    /// them again (it ends with the store), and gives freed memory back to
    /// the system once runs have been quiet for a tick ([`Quiet`]).
    pub fn start_flusher(self: &Arc<Self>) {
        let weak: Weak<FileRuns> = Arc::downgrade(self);
        let spawned = thread::Builder::new()
            .name("store-flush".into())
            .spawn(move || {
                let mut quiet = Quiet::default();
                loop {
                    thread::sleep(Duration::from_millis(500));
                    let Some(store) = weak.upgrade() else { return };
                    store.flush_unwritten();
                    if store.compact_due.load(Ordering::Relaxed) {
                        store.compact_logged();
                    }
                    let seq = lock(&store.log).seq;
                    drop(store);
                    if quiet.tick(seq) {
                        sys::trim_heap();
                    }
                }
            });
        if let Err(e) = spawned {
            log::error!("cannot start the state flush thread: {e}");
        }
    }

    /// Record a state change of an accepted run. When it cannot be written
    /// now, it is kept, served by [`FileRuns::get`], and written later.
    pub fn record(&self, rec: &RunRecord) {
        self.flush_unwritten();
        let Some(id) = run_id(&rec.run) else { return };
        let written = self.append(rec, false);
        let mut u = lock(&self.unwritten);
        // An older kept state of this run must never be written after
        // this one.
        u.retain(|(k, _)| *k != id);
        if let Err(e) = written {
            log::error!(
                "run {}: cannot record state {} yet ({e}); kept in memory, retried every 0.5s",
                rec.run,
                rec.state.name()
            );
            u.push((id, rec.clone()));
        }
    }

    /// [`FileRuns::record`], then return once what was written is on disk
    /// (a cancel that must hold after a crash).
    pub fn record_synced(&self, rec: &RunRecord) {
        self.record(rec);
        let seq = lock(&self.log).seq;
        if let Err(e) = self.sync_upto(seq) {
            log::error!(
                "run {}: cannot sync state {}: {e}",
                rec.run,
                rec.state.name()
            );
        }
    }

    /// Write the kept state changes, oldest first, until one fails.
    fn flush_unwritten(&self) {
        let mut u = lock(&self.unwritten);
        while let Some((_, rec)) = u.first() {
            if self.append(rec, false).is_err() {
                return;
            }
            let (_, rec) = u.remove(0);
            log::info!("run {}: state {} recorded", rec.run, rec.state.name());
        }
    }

    /// State changes waiting for disk space.
    pub fn unwritten(&self) -> usize {
        lock(&self.unwritten).len()
    }

    /// Append the record's current state. With `durable`, return only after
    /// it is on disk.
    ///
    /// # Errors
    /// The write or the sync failed (disk full, state dir gone or replaced:
    /// checked before a durable append); a partial
    /// line is cut off again so the log stays readable.
    pub fn append(&self, rec: &RunRecord, durable: bool) -> io::Result<()> {
        let seq = self.write(rec, durable)?;
        if durable {
            self.sync_upto(seq)?;
        }
        self.compact_if_too_long();
        Ok(())
    }

    /// [`RunStore::append_all`] on the file: the lines are made outside
    /// the log's lock, then written with one `write(2)` (one check of the
    /// path) and synced once. 1,000 records one by one took a lock, two
    /// `stat`s and a `write` each, while sync runs wanted the same lock.
    pub fn append_all(&self, recs: &[&RunRecord]) -> io::Result<()> {
        if recs.is_empty() {
            return Ok(());
        }
        let mut lines = Vec::with_capacity(recs.len() * 512);
        let mut ends = Vec::with_capacity(recs.len());
        for rec in recs {
            serde_json::to_writer(&mut lines, rec)?;
            lines.push(b'\n');
            ends.push(lines.len());
        }
        let seq = {
            let mut log = lock(&self.log);
            self.check_path(&log.file)?;
            let offset = log.len;
            if let Err(e) = log.file.write_all(&lines) {
                let _ = log.file.set_len(offset);
                return Err(e);
            }
            let mut start = 0;
            for (rec, end) in recs.iter().zip(ends) {
                if let Some(id) = run_id(&rec.run) {
                    let len = u32::try_from(end - start).unwrap_or(u32::MAX);
                    log.index.put(id, rec, offset + start as u64, len);
                }
                start = end;
            }
            log.len += lines.len() as u64;
            log.lines += recs.len();
            log.seq += recs.len() as u64;
            log.seq
        };
        self.sync_upto(seq)?;
        self.compact_if_too_long();
        Ok(())
    }

    /// Write `rec`'s line (after checking that the log is still the state
    /// dir's, when `check`); the sequence number of the line.
    fn write(&self, rec: &RunRecord, check: bool) -> io::Result<u64> {
        let mut log = lock(&self.log);
        if check {
            self.check_path(&log.file)?;
        }
        let offset = log.len;
        let len = match write_line(&mut log.file, rec) {
            Ok(len) => len,
            Err(e) => {
                let _ = log.file.set_len(offset);
                return Err(e);
            }
        };
        log.len += len;
        log.lines += 1;
        log.seq += 1;
        if let Some(id) = run_id(&rec.run) {
            let len = u32::try_from(len).unwrap_or(u32::MAX);
            log.index.put(id, rec, offset, len);
        }
        Ok(log.seq)
    }

    /// Compact the log when it holds about twice the lines needed. The
    /// lines are written: a failed compaction (disk full) must not undo
    /// their acceptance; the next append tries again.
    fn compact_if_too_long(&self) {
        if self.too_long(&lock(&self.log)) {
            self.compact_logged();
        }
    }

    /// [`FileRuns::compact`], a failure logged (the next append or tick
    /// tries again).
    fn compact_logged(&self) {
        if let Err(e) = self.compact() {
            log::warn!("cannot compact {}: {e}", self.path.display());
        }
    }

    /// Fail unless `runs.log` in the state dir is still the file we write:
    /// when the state dir was removed or replaced, lines written to the old
    /// file would be lost at the next start, so an accepted run could not
    /// be shown after a restart.
    fn check_path(&self, file: &File) -> io::Result<()> {
        use std::os::unix::fs::MetadataExt;
        let ours = file.metadata()?;
        let gone = |why: String| {
            io::Error::other(format!(
                "{} {why}; restart trigd once the state dir is back",
                self.path.display()
            ))
        };
        match fs::metadata(&self.path) {
            Ok(m) if m.dev() == ours.dev() && m.ino() == ours.ino() => Ok(()),
            Ok(_) => Err(gone("was replaced by another file".into())),
            Err(e) => Err(gone(format!("cannot be reached any more ({e})"))),
        }
    }

    /// Make every line written so far durable.
    ///
    /// # Errors
    /// The sync failed.
    pub fn sync(&self) -> io::Result<()> {
        let seq = lock(&self.log).seq;
        self.sync_upto(seq)
    }

    /// Make every line up to `seq` durable; one fdatasync serves everyone
    /// waiting meanwhile ([`GroupCommit::sync_upto`]).
    fn sync_upto(&self, seq: u64) -> io::Result<()> {
        self.commit.sync_upto(seq, || lock(&self.log).seq)
    }

    /// `fdatasync` calls made on the run log since it was opened
    /// (`trigd_state_fsyncs_total{file="runs.log"}`).
    pub fn fsyncs(&self) -> u64 {
        self.commit.syncs()
    }

    /// The log holds about twice the lines it would after a compaction.
    fn too_long(&self, log: &Log) -> bool {
        // Saturating: `run_retention` may be as large as the setting takes
        // (9223372036854775807 wrapped to 62 here: a compaction at every
        // append once the log held 62 lines).
        let kept = self.retention.saturating_add(log.index.live());
        log.lines > kept.saturating_mul(2).saturating_add(64)
    }

    /// A compaction is due: the log is [too long](FileRuns::too_long), or
    /// start-up left lines of runs it dropped or lines it could not read.
    fn due(&self, log: &Log) -> bool {
        self.compact_due.load(Ordering::Relaxed) || self.too_long(log)
    }

    /// Rewrite the log with the newest `retention` finished runs plus every
    /// unfinished one, copying each kept line from the old file to the
    /// new one through a [`Window`] (nothing is re-parsed; at most a window
    /// and a write buffer are in memory), then give freed memory back.
    ///
    /// Appends go on meanwhile: the kept lines are copied and synced
    /// without holding the log's locks (the old file only grows, so their
    /// offsets stay valid); only the lines appended since, the rename and
    /// the swap of the index happen under them. Holding the locks for the
    /// whole rewrite stalled every run for tens of milliseconds each time
    /// the log doubled.
    /// The dropped runs' output files are removed after the locks are
    /// released.
    fn compact(&self) -> io::Result<()> {
        // One compaction at a time; an append that finds one running
        // leaves it to finish.
        let Ok(_one) = self.compacting.try_lock() else {
            return Ok(());
        };
        let (snap, kept, old) = {
            let log = lock(&self.log);
            if !self.due(&log) {
                return Ok(()); // compacted since the caller looked
            }
            (
                Snapshot::of(&log),
                kept_lines(&log, self.retention),
                log.file.try_clone()?,
            )
        };
        let tmp = tmp_path(&self.path);
        let mut new = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        let mut moved = HashMap::with_capacity(kept.len());
        let mut base = 0u64;
        let mut lines = Window::new(&old, snap.len);
        let mut out = io::BufWriter::with_capacity(WINDOW, &mut new);
        for (id, offset, len) in &kept {
            out.write_all(lines.line(*offset, *len)?)?;
            moved.insert(*id, base);
            base += u64::from(*len);
        }
        out.flush()?;
        drop((out, lines));
        new.sync_data()?;
        let dropped = self.commit.swap(|| {
            let mut log = lock(&self.log);
            copy_range(&old, snap.len, log.len, &mut new)?;
            new.sync_data()?;
            fs::rename(&tmp, &self.path)?;
            sync_dir(&self.path)?;
            let dropped = reindex(&mut log, &snap, &moved, base, kept.len());
            log.file = OpenOptions::new()
                .read(true)
                .append(true)
                .open(&self.path)?;
            // Everything written so far is in the new file, synced.
            Ok((log.file.try_clone()?, log.seq, dropped))
        })?;
        self.compact_due.store(false, Ordering::Relaxed);
        drop((moved, kept));
        remove_outputs(&self.state_dir, dropped);
        sys::trim_heap();
        Ok(())
    }

    /// The runs that were cut off (by a crash) and recorded `interrupted`
    /// when the log was opened.
    pub fn interrupted_at_open(&self) -> &[String] {
        &self.interrupted
    }

    /// The runs found `running` when the log was opened (whatever they
    /// were recorded as then).
    pub fn running_at_open(&self) -> &[String] {
        &self.running
    }

    /// The record of run `id`, if it is known (the whole id must match,
    /// instance name included): its latest state, also one still waiting
    /// to be written.
    pub fn get(&self, id: &str) -> Option<RunRecord> {
        let key = run_id(id)?;
        if let Some((_, rec)) = lock(&self.unwritten).iter().find(|(k, _)| *k == key) {
            return Some(rec.clone());
        }
        self.read::<RunRecord>(key, LINE_IN_MEMORY, WINDOW)
            .filter(|r| r.run == id)
    }

    /// The head of run `id` as [`FileRuns::get`] finds it, without reading
    /// the rest of its record into memory (its Result can be many MB).
    pub fn head(&self, id: &str) -> Option<RunHead> {
        let key = run_id(id)?;
        if let Some((_, rec)) = lock(&self.unwritten).iter().find(|(k, _)| *k == key) {
            return Some(RunHead::of(rec)).filter(|h| h.run == id);
        }
        self.read::<RunHead>(key, HEAD_WINDOW, HEAD_WINDOW)
            .filter(|h| h.run == id)
    }

    /// The output run `id` keeps in its record ([`RunStore::inline_output`]).
    pub fn inline_output(&self, id: &str) -> Option<Inline> {
        let key = run_id(id)?;
        if let Some((_, rec)) = lock(&self.unwritten).iter().find(|(k, _)| *k == key) {
            return rec.output.clone().filter(|_| rec.run == id);
        }
        self.read::<OutputOf>(key, HEAD_WINDOW, HEAD_WINDOW)
            .filter(|o| o.run == id)?
            .output
    }

    /// The last line of run `key` in the log, read as a `T`: whole up to
    /// `whole` bytes, a longer one through a buffer of `window` bytes.
    fn read<T: serde::de::DeserializeOwned>(
        &self,
        key: RunId,
        whole: usize,
        window: usize,
    ) -> Option<T> {
        let log = lock(&self.log);
        let e = *log.index.get(&key)?;
        if e.len as usize <= whole {
            let mut buf = vec![0; e.len as usize];
            log.file.read_exact_at(&mut buf, e.offset).ok()?;
            return serde_json::from_slice::<T>(&buf).ok();
        }
        // A long line (a Result of many MB) is parsed from the file a
        // window at a time, without the lock: the old file stays readable
        // through this handle if a compaction replaces it.
        let (file, at, len) = (log.file.try_clone().ok()?, e.offset, u64::from(e.len));
        drop(log);
        let line = io::BufReader::with_capacity(
            window,
            LineAt {
                file,
                at,
                left: len,
            },
        );
        serde_json::from_reader::<_, T>(line).ok()
    }

    /// Change the record of run `id` with `change` and record it (`durable`:
    /// on disk before this returns), one change at a time: the links of a
    /// re-run and the deliveries of callbacks change ended records from
    /// several threads. `change` returns whether to write; the record as
    /// written, or `None` when the run is not kept.
    ///
    /// # Errors
    /// The write failed (only reported when `durable`; else it is kept and
    /// written later, as [`RunStore::record`] does).
    pub fn update(
        &self,
        id: &str,
        durable: bool,
        change: impl FnOnce(&mut RunRecord) -> bool,
    ) -> io::Result<Option<RunRecord>> {
        let _one = lock(&self.updating);
        let Some(mut rec) = self.get(id) else {
            return Ok(None);
        };
        if change(&mut rec) {
            if durable {
                self.append(&rec, true)?;
            } else {
                self.record(&rec);
            }
        }
        Ok(Some(rec))
    }

    /// Fail unless a run could be recorded now: `runs.log` can be opened
    /// for writing and is still the file this store writes (`/healthz`
    /// readiness).
    ///
    /// # Errors
    /// The state dir is gone, replaced, read-only or not writable.
    pub fn check_writable(&self) -> io::Result<()> {
        OpenOptions::new().append(true).open(&self.path)?;
        self.check_path(&lock(&self.log).file)
    }

    /// The owner of run `id`, without reading the record.
    pub fn owner_of(&self, id: &str) -> Option<Owner> {
        lock(&self.log).index.owner(&run_id(id)?)
    }

    /// Whether run `id` has ended, from the index (no read of its
    /// record); `None` when it is not kept.
    pub fn has_ended(&self, id: &str) -> Option<bool> {
        lock(&self.log)
            .index
            .state(&run_id(id)?)
            .map(RunState::is_terminal)
    }

    /// Where the output of run `id` is kept.
    pub fn output_path(&self, id: &str) -> PathBuf {
        output::path(&self.state_dir, output::hex_of(id))
    }

    /// A page of runs, newest first, as `filter` says (see [`RunFilter`]).
    /// The index is searched in memory; only the records shown are read
    /// from disk.
    pub fn list(&self, filter: &RunFilter) -> RunPage {
        let (slots, more, file) = {
            let log = lock(&self.log);
            let (slots, more) = log.index.select(filter);
            // Read through a handle of this file, without the lock: the
            // offsets stay valid in it even if a compaction replaces it.
            let Ok(file) = log.file.try_clone() else {
                return RunPage::default();
            };
            (slots, more, file)
        };
        let mut runs = Vec::with_capacity(slots.len());
        let mut buf = Vec::new();
        for e in &slots {
            buf.resize(e.len as usize, 0);
            if file.read_exact_at(&mut buf, e.offset).is_ok() {
                if let Ok(r) = serde_json::from_slice::<RunRecord>(&buf) {
                    runs.push(r.public());
                }
            }
        }
        let next = more.then(|| slots.last().map(Slot::key)).flatten();
        RunPage { runs, next }
    }

    /// How many runs of the index cannot be read back at their offset.
    #[cfg(test)]
    pub fn unreadable(&self) -> usize {
        let log = lock(&self.log);
        let ok = |e: &Slot| {
            let mut buf = vec![0; e.len as usize];
            log.file.read_exact_at(&mut buf, e.offset).is_ok()
                && serde_json::from_slice::<RunRecord>(&buf)
                    .is_ok_and(|r| run_id(&r.run) == Some(e.id))
        };
        log.index.slots().iter().filter(|e| !ok(e)).count()
    }

    /// How many runs the log knows.
    #[cfg(test)]
    pub fn count(&self) -> usize {
        lock(&self.log).index.len()
    }
}

/// The output a record keeps, read without its other fields (skipped
/// unread, as [`RunHead`] does).
#[derive(serde::Deserialize)]
struct OutputOf {
    #[serde(rename = "Run")]
    run: String,
    #[serde(rename = "Output", default)]
    output: Option<Inline>,
}

/// Lock, recovering from poisoning: the data behind these locks is always
/// left consistent before any call that could panic.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Lines up to this long are read whole and parsed in memory; longer ones
/// (a record whose Result holds many MB of output) are parsed from the
/// file through a [`WINDOW`], so that reading a run never holds its whole
/// line besides the record made of it.
const LINE_IN_MEMORY: usize = 1 << 20;

/// The buffer of a [`RunStore::head`] read: each follower of a run starts
/// with one (the whole line would be up to [`LINE_IN_MEMORY`], and
/// [`WINDOW`] a quarter of a MiB, per follower starting at once).
const HEAD_WINDOW: usize = 32 * 1024;

/// `left` bytes of `file` from `at`, read in order.
struct LineAt {
    file: File,
    at: u64,
    left: u64,
}

impl io::Read for LineAt {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.file.read_at(&mut buf[..want], self.at)?;
        self.at += n as u64;
        self.left -= n as u64;
        Ok(n)
    }
}

/// Bytes a line is written through: small lines go in one `write`, a long
/// one (a Result of many MB) a buffer at a time instead of being built
/// whole in memory first.
const LINE_BUF: usize = 8 * 1024;

/// A writer that counts the bytes written through it.
struct Counted<W> {
    inner: W,
    n: u64,
}

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.n += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Append `rec` as one JSON line to `file`; the line's length. On an error
/// part of the line may be written: the caller cuts it off.
fn write_line(file: &mut File, rec: &RunRecord) -> io::Result<u64> {
    // The buffer outermost: the JSON's many small writes take its inlined
    // path, and only what reaches the file is counted (see `Time`'s
    // `Serialize` for what the two changes saved a call).
    let mut w = io::BufWriter::with_capacity(LINE_BUF, Counted { inner: file, n: 0 });
    serde_json::to_writer(&mut w, rec)?;
    w.write_all(b"\n")?;
    w.flush()?;
    Ok(w.get_ref().n)
}

#[cfg(test)]
fn to_line(rec: &RunRecord) -> Vec<u8> {
    let mut line = serde_json::to_vec(rec).unwrap_or_default();
    line.push(b'\n');
    line
}

/// Index every line of the log `file` (opened for appending), last line
/// per id winning, reading it once through a buffer: no record is held
/// but the one being read. A last line without its newline (cut off by a
/// crash) is cut off the file, or given its newline when it reads as a
/// run; other lines that do not read as a run are skipped.
fn read_log(file: File, path: &Path) -> io::Result<Loaded> {
    let mut index = Index::default();
    let mut skipped = Skipped::default();
    let (mut len, mut lines, mut cut) = (0u64, 0usize, 0usize);
    let mut reader = BufReader::with_capacity(WINDOW, &file);
    // (the file only grows at its end, where nothing is left to read)
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line)?;
        if n == 0 {
            break;
        }
        let parsed = serde_json::from_slice::<RunRecord>(&line);
        // Only the last line can lack its newline.
        let last = !line.ends_with(b"\n");
        let mut n = n as u64;
        if last {
            if parsed.is_err() {
                file.set_len(len)?;
                skipped.note(lines + 1, parsed.err());
                cut = 1;
                break;
            }
            (&file).write_all(b"\n")?;
            n += 1;
        }
        lines += 1;
        match parsed.map(|r| (run_id(&r.run), r)) {
            Ok((Some(id), rec)) => {
                index.load(id, &rec, len, u32::try_from(n).unwrap_or(u32::MAX));
            }
            Ok((None, _)) => skipped.note(lines, None),
            Err(e) => skipped.note(lines, Some(e)),
        }
        len += n;
        if last {
            break;
        }
    }
    // Skipped lines left in the file (a torn last line is gone).
    let count = skipped.count - cut;
    skipped.report(path);
    // Before the sort the runs are in the order of their first lines, the
    // order they were accepted in (the list order ties runs created in
    // the same millisecond by id): the unfinished ones resume in it.
    let live = (0..index.len())
        .filter(|&p| index.live_at(p))
        .map(|p| index.slots()[p].id)
        .collect();
    index.sort();
    let log = Log {
        file,
        len,
        index,
        lines,
        seq: 0,
    };
    Ok(Loaded {
        log,
        skipped: count,
        live,
    })
}

/// The run log as start-up read it.
struct Loaded {
    log: Log,
    /// Lines in it that do not read as a run.
    skipped: usize,
    /// The unfinished runs, in the order they were accepted.
    live: Vec<RunId>,
}

/// Drop from `index` the oldest finished runs past `retention` (their
/// lines stay until the next compaction); whether any was dropped.
fn drop_past_retention(index: &mut Index, retention: usize) -> bool {
    let mut excess = (index.len() - index.live()).saturating_sub(retention);
    if excess == 0 {
        return false;
    }
    let old: Vec<bool> = (0..index.len())
        .map(|p| {
            let old = !index.live_at(p) && excess > 0;
            excess -= usize::from(old);
            old
        })
        .collect();
    let mut at = 0;
    index.retain(|_| {
        at += 1;
        !old[at - 1]
    });
    true
}

/// The lines of the log that did not parse when it was read: a torn last
/// line after a crash, or a line edited by hand. They are skipped; the
/// count and the first one's error are logged.
#[derive(Default)]
struct Skipped {
    count: usize,
    /// The first one's line number and error (none: not a run id).
    first: Option<(usize, Option<serde_json::Error>)>,
}

impl Skipped {
    fn note(&mut self, line: usize, e: Option<serde_json::Error>) {
        self.count += 1;
        self.first.get_or_insert((line, e));
    }

    fn report(self, path: &Path) {
        if let Some((line, e)) = self.first {
            let why = e.map_or_else(|| "its Run is not a run id".into(), |e| e.to_string());
            log::warn!(
                "{}: {} line(s) that do not read as a run skipped (the first, line {line}: {why})",
                path.display(),
                self.count
            );
        }
    }
}

/// Where the log stood when a compaction began.
struct Snapshot {
    /// File length: lines from here on are copied under the lock.
    len: u64,
    /// Lines in the file.
    lines: usize,
}

impl Snapshot {
    fn of(log: &Log) -> Snapshot {
        Snapshot {
            len: log.len,
            lines: log.lines,
        }
    }
}

/// The lines a compaction keeps, oldest first: every unfinished run and
/// the newest `retention` finished ones (id, offset, length).
fn kept_lines(log: &Log, retention: usize) -> Vec<(RunId, u64, u32)> {
    let slots = log.index.slots();
    let finished = slots.len() - log.index.live();
    let mut excess = finished.saturating_sub(retention);
    let mut kept = Vec::with_capacity(slots.len() - excess);
    for (p, e) in slots.iter().enumerate() {
        if !log.index.live_at(p) && excess > 0 {
            excess -= 1;
            continue;
        }
        kept.push((e.id, e.offset, e.len));
    }
    kept
}

/// Point the index at the compacted file: a run with a line written
/// after the snapshot keeps that line (now at `base` + its distance from
/// the snapshot's end), a kept run moves to its offset in `moved`, and
/// every other run is dropped. Returns the dropped runs.
fn reindex(
    log: &mut Log,
    snap: &Snapshot,
    moved: &HashMap<RunId, u64>,
    base: u64,
    kept: usize,
) -> Vec<RunId> {
    let dropped = log.index.retain(|e| {
        if e.offset >= snap.len {
            e.offset = base + (e.offset - snap.len);
        } else if let Some(&at) = moved.get(&e.id) {
            e.offset = at;
        } else {
            return false;
        }
        true
    });
    log.lines = kept + (log.lines - snap.lines);
    log.len = base + (log.len - snap.len);
    dropped
}

/// Remove the output files of the runs a compaction dropped, on a thread
/// of its own and a batch at a time. Every run that prints creates its
/// file in the same directory: thousands of unlinks in one go held those
/// creates up for tens of milliseconds. A file left behind by a crash
/// meanwhile is removed at the next start (`output::sweep`).
fn remove_outputs(state_dir: &Path, dropped: Vec<RunId>) {
    if dropped.is_empty() {
        return;
    }
    let dir = state_dir.to_path_buf();
    let spawned = thread::Builder::new()
        .name("output-remove".into())
        .spawn(move || {
            for batch in dropped.chunks(64) {
                for id in batch {
                    let _ = fs::remove_file(output::path(&dir, &hex::encode(id)));
                }
                thread::sleep(Duration::from_millis(1));
            }
        });
    if let Err(e) = spawned {
        log::warn!(
            "cannot start a thread to remove old output files ({e}); they go at the next start"
        );
    }
}

/// Bytes read (and written) at a time when a compaction copies lines.
const WINDOW: usize = 256 * 1024;

/// Reads lines of the log below `end` through a buffer of [`WINDOW`]
/// bytes: the lines a compaction keeps come in about file order, so this
/// costs one read per window instead of one per line (10,000 `pread`s
/// and as many `write`s made a compaction take 100–200 ms of CPU).
struct Window<'f> {
    file: &'f File,
    end: u64,
    start: u64,
    buf: Vec<u8>,
}

impl<'f> Window<'f> {
    fn new(file: &'f File, end: u64) -> Window<'f> {
        Window {
            file,
            end,
            start: 0,
            buf: Vec::new(),
        }
    }

    /// The `len` bytes at `offset` (which end at or before `end`).
    fn line(&mut self, offset: u64, len: u32) -> io::Result<&[u8]> {
        let len = len as usize;
        let held =
            offset >= self.start && offset + len as u64 <= self.start + self.buf.len() as u64;
        if !held {
            let room = usize::try_from(self.end.saturating_sub(offset)).unwrap_or(usize::MAX);
            self.buf.resize(room.min(WINDOW).max(len), 0);
            self.file.read_exact_at(&mut self.buf, offset)?;
            self.start = offset;
        }
        let at = (offset - self.start) as usize;
        Ok(&self.buf[at..at + len])
    }
}

/// Append bytes `from..to` of `src` to `dst`, a bounded chunk at a time.
fn copy_range(src: &File, from: u64, to: u64, dst: &mut File) -> io::Result<()> {
    let mut buf = vec![0; 64 * 1024];
    let mut at = from;
    while at < to {
        let n = buf
            .len()
            .min(usize::try_from(to - at).unwrap_or(usize::MAX));
        src.read_exact_at(&mut buf[..n], at)?;
        dst.write_all(&buf[..n])?;
        at += n as u64;
    }
    Ok(())
}

/// The Error of a run (or attempt) that a stop trigd did not see cut off
/// (`kill -9`, power loss), as start-up's repair records it.
pub const STOPPED_UNSEEN: &str = "trigd stopped before the run finished";

/// A new random run id of `instance`: its name, `-`, then 128 bits as 32
/// lower-case hex characters (see `cluster.rs`).
pub fn new_run_id(instance: &str) -> String {
    crate::runs::cluster::new_run_id(instance)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::record::{Origin, RunInput};
    use crate::state::test_dir::TestDir;
    use std::collections::BTreeMap;
    use std::time::Duration;

    fn tmpdir(name: &str) -> TestDir {
        TestDir::new(&format!("store-{name}"))
    }

    #[test]
    fn memory_is_trimmed_once_per_quiet_spell_after_activity() {
        let mut q = Quiet::default();
        // Nothing written yet: nothing to give back.
        assert!(!q.tick(0));
        assert!(!q.tick(0));
        // Lines written during the last tick: still busy.
        assert!(!q.tick(5));
        assert!(!q.tick(900));
        // A tick without a line: trim, once.
        assert!(q.tick(900));
        assert!(!q.tick(900));
        assert!(!q.tick(900));
        // The next burst, then quiet again.
        assert!(!q.tick(901));
        assert!(q.tick(901));
        assert!(!q.tick(901));
    }

    #[test]
    fn the_owner_round_trips_and_old_program_0_records_are_hook_runs() {
        let line = |o: Owner| {
            let mut r = rec("owner", RunState::Finished);
            r.owner = o;
            String::from_utf8(to_line(&r)).unwrap()
        };
        let hook = line(Owner::Hook);
        assert!(hook.contains(r#""Owner":"hook""#) && !hook.contains("Program"));
        let zero = line(Owner::Program(0));
        assert!(zero.contains(r#""Owner":"program","Program":0"#), "{zero}");
        for o in [Owner::Hook, Owner::Program(0), Owner::Program(7)] {
            let back: RunRecord = serde_json::from_str(&line(o)).unwrap();
            assert_eq!(back.owner, o);
        }
        // Lines written before `Owner`: program 0 was the hook runs' place.
        let old = |program: u64| {
            let text = format!(
                r#"{{"Run":"{}","State":"finished","Program":{program},"Function":"deploy","CreatedAt":"2026-01-01T00:00:00.000Z"}}"#,
                id("old")
            );
            serde_json::from_str::<RunRecord>(&text).unwrap().owner
        };
        assert_eq!(old(0), Owner::Hook);
        assert_eq!(old(3), Owner::Program(3));
    }

    /// Every line 2207e7f wrote (before the record was typed: times as
    /// strings, steps as JSON maps) reads into a typed record and is
    /// written back byte for byte: step fields, times, owner, origin, tool,
    /// callbacks and input all keep their format and order.
    #[test]
    fn lines_written_by_2207e7f_read_and_write_back_the_same() {
        let old = include_str!("../../tests/data/state-2207e7f/runs.log");
        for line in old.lines() {
            let rec: RunRecord = serde_json::from_str(line).unwrap();
            assert_eq!(
                String::from_utf8(to_line(&rec)).unwrap(),
                format!("{line}\n")
            );
        }
        for part in [
            r#""Kind":"call""#,
            r#""Signal":9"#,
            r#""Tool":"#,
            r#""At":"#,
            r#""Input":"#,
        ] {
            assert!(old.contains(part), "the old log has {part}");
        }
    }

    /// Lines as this version writes them (owner, origin, tool, schedule,
    /// steps, a Result of many kinds of values, callbacks, input, links)
    /// read into a record (through `RecordFields`, not a `flatten`) and
    /// are written back byte for byte.
    #[test]
    fn current_lines_read_and_write_back_the_same() {
        let lines = [
            concat!(
                r#"{"Run":"bench-000000000000000000000000000f4240","State":"finished","Owner":"program","Program":7,"Function":"deploy","Async":true,"#,
                r#""By":"schedule:7/deploy/nightly","Tool":"inventory/staging","ScheduledAt":"2026-11-20T10:00:00.000Z","Missed":3,"#,
                r#""CreatedAt":"2026-11-20T10:00:00.000Z","StartedAt":"2026-11-20T10:00:00.001Z","FinishedAt":"2026-11-20T10:00:01.500Z","#,
                r#""Steps":[{"DurationMs":3,"ExitCode":0,"Kind":"command","StderrTruncated":false,"StdoutTruncated":false}],"#,
                r#""Result":["ok",1,-2,1.5,18446744073709551615,null,true,{"a":{"x":"\u0000\"\\"},"b":[]}],"#,
                r#""Reruns":["00000000000000000000000000000001"],"Group":"g","SupersededBy":"00000000000000000000000000000002"}"#
            ),
            concat!(
                r#"{"Run":"00000000000000000000000000000003","State":"queued","Owner":"hook","Function":"redeploy","Async":false,"By":"public","#,
                r#""CreatedAt":"2026-11-20T10:00:00.000Z","Steps":[],"Input":{"Values":["a"],"Vars":{"K":"v"},"Body":true,"GroupLimit":2,"GroupPolicy":"queue"},"#,
                r#""RerunOf":"00000000000000000000000000000004","RerunInput":{"Values":["a"]},"RetryAt":"2026-11-20T10:00:05.000Z"}"#
            ),
        ];
        for line in lines {
            let rec: RunRecord = serde_json::from_str(line).unwrap();
            assert_eq!(
                String::from_utf8(to_line(&rec)).unwrap(),
                format!("{line}\n")
            );
        }
    }

    /// Lines a typed record refuses (a time that is not one, a step kind
    /// this version does not know, steps nested past serde_json's depth
    /// limit) are skipped at open, without a panic; the lines around them
    /// load.
    #[test]
    fn lines_with_bad_fields_are_skipped_and_the_others_load() {
        let dir = tmpdir("bad-fields");
        let d = dir.path();
        let good = |name: &str| String::from_utf8(to_line(&rec(name, RunState::Finished))).unwrap();
        // One record, its own time replaced (a second `rec` may be made in
        // another millisecond on a loaded machine).
        let t = rec("t", RunState::Finished);
        let bad_time = String::from_utf8(to_line(&t))
            .unwrap()
            .replace(&t.created_at.to_string(), "yesterday");
        assert!(bad_time.contains("yesterday"));
        let steps = r#""Steps":[{"DurationMs":1,"Kind":"teleport","StderrTruncated":false,"StdoutTruncated":false}]"#;
        let bad_kind = good("k").replace(r#""Steps":[]"#, steps);
        let deep = format!(
            r#"{{"Run":"{}","State":"finished","Function":"f","CreatedAt":"2026-01-01T00:00:00.000Z","Steps":[{}1{}]}}"#,
            id("deep"),
            r#"{"Kind":"call","Steps":["#.repeat(10_000),
            "]}".repeat(10_000)
        ) + "\n";
        let text = [good("a"), bad_time, bad_kind, deep, good("b")].concat();
        fs::write(d.join("runs.log"), text).unwrap();
        let s = open(d, 100);
        assert!(s.get(&id("a")).is_some() && s.get(&id("b")).is_some());
        for name in ["t", "k", "deep"] {
            assert!(s.get(&id(name)).is_none(), "{name}");
        }
        assert_eq!(s.count(), 2);
    }

    /// A run id (32 hex digits) made from a short test name.
    fn id(name: &str) -> String {
        format!("{:0>32}", hex::encode(name))
    }

    fn rec(name: &str, state: RunState) -> RunRecord {
        RunRecord {
            r#async: true,
            ..RunRecord::new(id(name), state, Owner::Program(1), "f".into(), Origin::Cli)
        }
    }

    fn open(d: &Path, retention: usize) -> RunStore {
        RunStore::open(d, retention, |_| false).unwrap().0
    }

    #[test]
    fn last_line_wins_and_survives_reopen() {
        let dir = tmpdir("reopen");
        let d = dir.path();
        let s = open(d, 100);
        s.append(&rec("a", RunState::Queued), true).unwrap();
        s.append(&rec("b", RunState::Running), false).unwrap();
        let mut done = rec("a", RunState::Finished);
        done.result = Some(serde_json::json!(["ok"]));
        s.append(&done, false).unwrap();
        assert_eq!(s.get(&id("a")).unwrap().state, RunState::Finished);
        drop(s);
        let s = open(d, 100);
        assert_eq!(
            s.get(&id("a")).unwrap().result,
            Some(serde_json::json!(["ok"]))
        );
        assert_eq!(s.get(&id("b")).unwrap().state, RunState::Interrupted);
        assert_eq!(s.count(), 2);
    }

    #[test]
    fn torn_last_line_is_skipped() {
        let dir = tmpdir("torn");
        let d = dir.path();
        let s = open(d, 100);
        s.append(&rec("a", RunState::Finished), true).unwrap();
        drop(s);
        let mut f = OpenOptions::new()
            .append(true)
            .open(d.join("runs.log"))
            .unwrap();
        f.write_all(b"{\"Run\":\"b\",\"Sta").unwrap();
        let s = open(d, 100);
        assert!(s.get(&id("a")).is_some());
        assert!(s.get(&id("b")).is_none());
        s.append(&rec("c", RunState::Finished), true).unwrap();
        drop(s);
        let s = open(d, 100);
        assert!(
            s.get(&id("c")).is_some(),
            "a line after a torn one must stay readable"
        );
    }

    #[test]
    fn queued_runs_outlive_retention_and_come_back_in_order() {
        let dir = tmpdir("queued");
        let d = dir.path();
        let s = open(d, 5);
        let input = Some(RunInput {
            values: vec!["v".into()],
            vars: BTreeMap::new(),
            body: false,
            ..Default::default()
        });
        let queued: Vec<RunRecord> = (0..50)
            .map(|i| RunRecord {
                input: input.clone(),
                ..rec(&format!("q{i}"), RunState::Queued)
            })
            .collect();
        for q in &queued {
            s.append(q, true).unwrap();
        }
        // Many finished runs later (compactions included), none is lost.
        for i in 0..300 {
            s.append(&rec(&format!("f{i}"), RunState::Finished), false)
                .unwrap();
        }
        let running = RunRecord {
            input: input.clone(),
            ..rec("q3", RunState::Running)
        };
        s.append(&running, false).unwrap();
        drop(s);
        let (s, resumed) = RunStore::open(d, 5, |r| r.run == id("q3")).unwrap();
        let want: Vec<String> = (0..50).map(|i| id(&format!("q{i}"))).collect();
        assert_eq!(resumed, want, "queued runs in the order accepted");
        let again = s.get(&id("q3")).unwrap();
        assert_eq!(again.state, RunState::Queued);
        assert_eq!(again.input, input);
        assert!(s.count() <= 50 + 5, "{}", s.count());
        drop(s);
        let (s, resumed) = RunStore::open(d, 5, |_| false).unwrap();
        assert_eq!(resumed.len(), 50);
        assert!(s.get(&id("f299")).is_some());
    }

    #[test]
    fn retention_bounds_the_log() {
        let dir = tmpdir("retention");
        let d = dir.path();
        let s = open(d, 10);
        for i in 0..200 {
            s.append(&rec(&format!("r{i}"), RunState::Finished), false)
                .unwrap();
        }
        assert!(s.count() <= 2 * 10 + 64 + 1, "{}", s.count());
        assert!(s.get(&id("r199")).is_some());
        assert!(s.get(&id("r0")).is_none());
        let lines = fs::read_to_string(d.join("runs.log"))
            .unwrap()
            .lines()
            .count();
        assert!(lines <= 2 * 10 + 65, "{lines}");
    }

    /// Appends from several threads while compactions run: every run in
    /// the index can be read back at its offset (its line may have been
    /// written after a compaction's snapshot, or moved by it), a reopen
    /// agrees, retention holds, and the output files of dropped runs are
    /// removed.
    #[test]
    fn appends_during_compaction_are_kept() {
        let dir = tmpdir("concurrent");
        let d = dir.path();
        let s = Arc::new(open(d, 50));
        fs::create_dir_all(output::dir(d)).unwrap();
        let writers: Vec<_> = (0..4)
            .map(|t| {
                let s = Arc::clone(&s);
                let d = d.to_path_buf();
                thread::spawn(move || {
                    for i in 0..1500 {
                        let name = format!("t{t}r{i}");
                        let _ = fs::write(output::path(&d, &id(&name)), b"x");
                        s.append(&rec(&name, RunState::Running), false).unwrap();
                        s.append(&rec(&name, RunState::Finished), i % 50 == 0)
                            .unwrap();
                        if i % 100 == 0 {
                            assert_eq!(s.unreadable(), 0, "after {name}");
                        }
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        assert_eq!(s.unreadable(), 0);
        s.append(&rec("last", RunState::Finished), true).unwrap();
        assert_eq!(s.get(&id("last")).unwrap().state, RunState::Finished);
        let known = s.count();
        assert!(known <= 2 * 50 + 64 + 4, "{known} runs kept");
        // Dropped runs' output files are removed on a thread of their own,
        // a batch at a time: wait for it (bounded).
        let until = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let outputs = fs::read_dir(output::dir(d)).unwrap().count();
            if outputs <= known + 4 {
                break;
            }
            assert!(
                std::time::Instant::now() < until,
                "{outputs} output files for {known} runs after 10 s"
            );
            thread::sleep(Duration::from_millis(5));
        }
        drop(s);
        let again = open(d, 50);
        assert_eq!(again.unreadable(), 0);
        assert_eq!(again.get(&id("last")).unwrap().state, RunState::Finished);
        assert_eq!(again.count(), 50);
    }
}
