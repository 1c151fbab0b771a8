//! Completion callbacks: when a run ends, POST its record, signed, to each
//! callback URL of the run, retried with backoff, surviving restarts.
//!
//! What it owns: the callback targets of a request ([`targets`]), the
//! deliveries of ended runs ([`Service`]: spooled to disk by [`crate::state::spool`],
//! attempted by [`send`], reported in the run record via [`crate::state::delivery`]), and
//! the callback metrics.
//!
//! How a delivery flows: a run's targets become `Callbacks` entries of its
//! record in state `waiting` when it is accepted. When the run ends, the
//! runner calls [`Service::ended`] before it writes the end state: each
//! waiting delivery is written to `state/callbacks/` (durably) and becomes
//! `pending`. After the end state is written, [`Service::submit`] hands the
//! run's deliveries to the delivery threads, which attempt them in order,
//! one run's deliveries never in parallel. Each attempt is noted in the
//! pending file and in the run record; the final state is written to the
//! run log durably, and only then is the file removed. At start-up every
//! file left is delivered again: at least once, in order per run.
//!
//! Bounds: `[callbacks] workers` threads (never a run slot), at most
//! `max_pending` files; in memory only sequence numbers wait, the body is
//! read from disk when it is sent.

pub mod format;
pub mod redeliver;
pub mod send;

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, RwLock};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::config::callbacks::{Callbacks, Fixed};
use crate::http::metrics::label;
use crate::http::{ApiError, Request};
use crate::state::delivery::{Attempt, Delivery, DeliveryState, Format, Outcome, Source, Target};
use crate::state::record::{RunRecord, RunState};
use crate::state::spool::{Pending, Spool};
use crate::state::store::{RunFilter, RunStore, Scope};
use crate::state::time::Time;
use crate::state::State;
use send::Outcome as Attempted;

/// The callback URL a request names: the `callback` query parameter (when
/// `query` is set: `POST /api`) or the `Trigd-Callback` header.
///
/// # Errors
/// `invalid_parameter` for a repeated parameter or header (as two
/// `callback` parameters are); `callback_refused` when the parameter and
/// the header name different URLs.
pub fn requested(req: &Request, query: bool) -> Result<Option<&str>, ApiError> {
    let from_query = if query {
        req.query_one("callback")?
    } else {
        None
    };
    match (
        from_query,
        req.header_one("trigd-callback", "Trigd-Callback")?,
    ) {
        (Some(q), Some(h)) if q != h => Err(ApiError::CallbackRefused {
            msg: "the callback parameter and the Trigd-Callback header name different URLs".into(),
        }),
        (q, h) => Ok(q.or(h).filter(|u| !u.is_empty())),
    }
}

/// The callback targets of a run: the fixed URLs (function, trigger) and
/// the requested one, which needs `permitted` and must pass the checks of
/// `[callbacks]`.
///
/// # Errors
/// `callback_not_permitted` (403) or `callback_refused` (400).
pub fn targets(
    cb: &Callbacks,
    fixed: &[(Option<&Fixed>, Source)],
    requested: Option<&str>,
    permitted: bool,
) -> Result<Vec<Target>, ApiError> {
    let mut out: Vec<Target> = fixed
        .iter()
        .filter_map(|(f, source)| {
            f.map(|f| Target {
                url: f.url.clone(),
                source: *source,
                format: f.format,
                on: f.on.clone(),
            })
        })
        .collect();
    if let Some(raw) = requested {
        if !permitted {
            return Err(ApiError::CallbackNotPermitted);
        }
        let url = cb
            .check_url(raw)
            .map_err(|msg| ApiError::CallbackRefused { msg })?;
        out.push(Target {
            url,
            source: Source::Request,
            format: Format::Record,
            on: Vec::new(),
        });
    }
    Ok(out)
}

/// The deliveries of one run, in order, waiting for a delivery thread.
#[derive(Debug)]
pub struct Chain(VecDeque<u64>);

/// Settings in use, replaced on reload.
struct Settings {
    cb: Arc<Callbacks>,
    /// Built at the first delivery: a server that sends no callback never
    /// runs (nor maps the pages of) the TLS set-up.
    tls: OnceLock<Arc<rustls::ClientConfig>>,
}

impl Settings {
    fn tls(&self) -> &Arc<rustls::ClientConfig> {
        self.tls
            .get_or_init(|| send::tls_config(&self.cb.extra_roots))
    }
}

/// Deliveries waiting for their time.
#[derive(Default)]
struct Queue {
    /// Chains by (due time, sequence number of their head).
    due: BTreeMap<(Instant, u64), Chain>,
    /// Pending files on disk.
    backlog: usize,
    next_seq: u64,
}

/// Counters for `/metrics`.
#[derive(Default)]
struct Stats {
    delivered: AtomicU64,
    failed: AtomicU64,
    dropped: AtomicU64,
    attempts_ok: AtomicU64,
    attempts_retry: AtomicU64,
    attempts_failed: AtomicU64,
}

/// The delivery service of one server.
pub struct Service {
    store: Arc<RunStore>,
    spool: Spool,
    settings: RwLock<Arc<Settings>>,
    queue: Mutex<Queue>,
    wake: Condvar,
    stats: Stats,
}

impl Service {
    /// Open the spool of `state`, queue every pending delivery found
    /// (in order), queue the waiting deliveries of `interrupted` runs (runs
    /// the run log found cut off by a crash), and start the delivery
    /// threads.
    ///
    /// # Errors
    /// The spool directory cannot be created or listed.
    pub fn start(
        state: &State,
        instance: &str,
        store: Arc<RunStore>,
        cb: &Arc<Callbacks>,
        interrupted: &[String],
    ) -> io::Result<Arc<Service>> {
        let (spool, found) = state.open_spool(instance)?;
        let queue = Queue {
            next_seq: spool.first_seq(),
            ..Queue::default()
        };
        let service = Arc::new(Service {
            store,
            spool,
            settings: RwLock::new(Arc::new(settings(cb))),
            queue: Mutex::new(queue),
            wake: Condvar::new(),
            stats: Stats::default(),
        });
        service.resume(found);
        for id in interrupted {
            service.resume_interrupted(id);
        }
        for i in 0..cb.workers {
            let me = Arc::clone(&service);
            thread::Builder::new()
                .name(format!("callback-{i}"))
                .spawn(move || me.work())?;
        }
        Ok(service)
    }

    /// Queue pending deliveries read from disk, one chain per run (also
    /// those adopted from an instance that is gone: `runner::cluster`).
    pub fn resume(&self, found: Vec<Pending>) {
        let mut chains: Vec<(String, Chain)> = Vec::new();
        let mut q = lock(&self.queue);
        for p in &found {
            q.next_seq = q.next_seq.max(p.seq + 1);
            match chains.iter_mut().find(|(run, _)| *run == p.run) {
                Some((_, c)) => c.0.push_back(p.seq),
                None => chains.push((p.run.clone(), Chain(VecDeque::from([p.seq])))),
            }
        }
        q.backlog += found.len();
        let now = Instant::now();
        for (_, c) in chains {
            let head = c.0[0];
            q.due.insert((now, head), c);
        }
        drop(q);
        if !found.is_empty() {
            log::info!("callbacks: {} pending deliveries resumed", found.len());
            // The delivery threads may be waiting with nothing due (those
            // adopted from a lapsed instance come while they run): without
            // a wake they waited for the next delivery of this instance.
            self.wake.notify_all();
        }
    }

    /// Queue the deliveries held from before the start that the spool
    /// could not read then (the database was unreachable), once it can.
    pub fn resume_unread(&self) {
        if let Some(found) = self.spool.read_held() {
            self.resume(found);
        }
    }

    /// A run cut off by a crash ended `interrupted`: send its callbacks.
    fn resume_interrupted(&self, id: &str) {
        let Some(mut rec) = self.store.get(id) else {
            return;
        };
        if let Some(chain) = self.ended(&mut rec) {
            if let Err(e) = self.store.append(&rec, true) {
                log::error!("run {id}: cannot record its callbacks: {e}");
            }
            self.submit(chain);
        }
    }

    /// Use the settings of a newly loaded config (allow lists, secret,
    /// timeouts, CA file) from the next attempt on. The number of delivery
    /// threads is fixed at start.
    pub fn configure(&self, cb: &Arc<Callbacks>) {
        let same = Arc::ptr_eq(&self.current().cb, cb);
        if !same {
            *self.settings.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(settings(cb));
        }
    }

    fn current(&self) -> Arc<Settings> {
        Arc::clone(&self.settings.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// The run `rec` has reached its end state (not yet written): spool each
    /// waiting delivery whose `on` takes the run's outcome durably, in its
    /// format, and mark it `pending` in `rec` (or `failed` when the backlog
    /// is full or the disk refuses; `skipped` when `on` does not take the
    /// outcome). Returns the chain to [`submit`](Self::submit) once `rec`
    /// is written.
    pub fn ended(&self, rec: &mut RunRecord) -> Option<Chain> {
        if !rec
            .callbacks
            .iter()
            .any(|d| d.state == DeliveryState::Waiting)
        {
            return None;
        }
        let record = payload(rec);
        let outcome = format::outcome_of(rec.state);
        let recovered = outcome == Some(Outcome::Finished) && self.wants_recovery(rec);
        let mut chain = VecDeque::new();
        let mut deliveries = std::mem::take(&mut rec.callbacks);
        for (index, d) in deliveries.iter_mut().enumerate() {
            if d.state != DeliveryState::Waiting {
                continue;
            }
            let Some(o) = outcome.filter(|o| wanted(&d.on, *o, recovered)) else {
                d.state = DeliveryState::Skipped;
                continue;
            };
            d.outcome = Some(if recovered { Outcome::Recovered } else { o });
            let msg = self.message(rec, d, &record);
            if let Some(seq) = self.spool_one(&rec.run, index, d, msg) {
                chain.push_back(seq);
            }
        }
        rec.callbacks = deliveries;
        (!chain.is_empty()).then_some(Chain(chain))
    }

    /// The run `rec` has started (and is recorded): send the `/start`
    /// ping of each `healthchecks` callback. The pings are not in the run
    /// record (their delivery has no place there); the log and `/metrics`
    /// count them.
    pub fn started(&self, rec: &RunRecord) {
        let mut chain = VecDeque::new();
        for d in &rec.callbacks {
            if d.format != Format::Healthchecks || d.state != DeliveryState::Waiting {
                continue;
            }
            let msg = format::at_start(&d.url, rec);
            let mut ping = d.clone();
            // Its own delivery id: under the end ping's, a receiver that
            // drops ids it has processed (Standard Webhooks) drops the end.
            ping.delivery = hex::encode(rand::random::<[u8; 16]>());
            if let Some(seq) = self.spool_one(&rec.run, NOT_IN_RECORD, &mut ping, msg) {
                chain.push_back(seq);
            }
        }
        if !chain.is_empty() {
            self.submit(Chain(chain));
        }
    }

    /// Function `function` of `program` has become overdue: send callback
    /// `cb` (its `on` has `overdue`). The delivery belongs to no run: the
    /// log and `/metrics` count it.
    pub fn overdue(
        &self,
        cb: &Fixed,
        (program, function): (u64, &str),
        every: &str,
        last_success: Option<&str>,
    ) {
        let target = Target {
            url: cb.url.clone(),
            source: Source::Function,
            format: cb.format,
            on: cb.on.clone(),
        };
        let mut d = Delivery::new(&target);
        d.outcome = Some(Outcome::Overdue);
        let msg = format::overdue(cb.format, &cb.url, (program, function), every, last_success);
        log::warn!("function {function} of program {program} is overdue (expect_every {every}); callback {} to {}", d.delivery, cb.url);
        if let Some(seq) = self.spool_one("", NOT_IN_RECORD, &mut d, msg) {
            self.submit(Chain(VecDeque::from([seq])));
        }
    }

    /// What delivery `d` of the ended run `rec` sends: the URL (the
    /// callback's, or one its format makes: a ping, ntfy's parameters) and
    /// the body, in its format, for the outcome it reports (`d.outcome`,
    /// else the run's end state); `record` is the run record's JSON
    /// ([`payload`]). The same every time: a redelivery calls it again.
    pub fn message(&self, rec: &RunRecord, d: &Delivery, record: &str) -> format::Message {
        let reported = reported(rec, d);
        let public_url = self.current().cb.public_url.clone();
        format::at_end(
            d.format,
            &d.url,
            rec,
            reported,
            public_url.as_deref(),
            record,
        )
    }

    /// Spool delivery `d` (at `index` of run `run`'s record) with `body`:
    /// its sequence number, and `d` marked `pending`; or `None` and `d`
    /// marked `failed` (the backlog is full, the disk refuses).
    fn spool_one(
        &self,
        run: &str,
        index: usize,
        d: &mut Delivery,
        msg: format::Message,
    ) -> Option<u64> {
        let max = self.current().cb.max_pending;
        let seq = {
            let mut q = lock(&self.queue);
            if q.backlog >= max {
                None
            } else {
                q.backlog += 1;
                q.next_seq += 1;
                Some(q.next_seq - 1)
            }
        };
        let Some(seq) = seq else {
            d.state = DeliveryState::Failed;
            d.error = Some(format!(
                "not sent: {max} deliveries were already waiting ([callbacks] max_pending)"
            ));
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            log::warn!("run {run}: callback to {} dropped: backlog full", d.url);
            return None;
        };
        d.state = DeliveryState::Pending;
        let p = Pending {
            seq,
            run: run.to_string(),
            index,
            delivery: d.clone(),
            first_attempt_ms: None,
            url: (msg.url != d.url).then_some(msg.url),
            body: msg.body,
        };
        if let Err(e) = self.spool.write(&p) {
            lock(&self.queue).backlog -= 1;
            d.state = DeliveryState::Failed;
            d.error = Some(format!("not sent: the delivery could not be stored ({e})"));
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            log::error!("run {run}: cannot store a callback delivery: {e}");
            return None;
        }
        Some(seq)
    }

    /// Whether `rec`, a success, is a recovery that a waiting callback
    /// wants to know of (`on` has `recovered`, or a message says so): the
    /// function's previous ended run failed, timed out or was interrupted.
    /// Read from the run log (so a restart in between changes nothing),
    /// newest first, at most [`RECOVERY_SCAN`] runs of the same function back;
    /// cancelled runs are passed over.
    fn wants_recovery(&self, rec: &RunRecord) -> bool {
        let wanted = rec.callbacks.iter().any(|d| {
            d.state == DeliveryState::Waiting
                && (d.on.contains(&Outcome::Recovered) || d.format != Format::Record)
        });
        if !wanted {
            return false;
        }
        let mut filter = RunFilter {
            scope: Scope::Only {
                programs: rec.owner.program().into_iter().collect(),
                hooks: rec.owner.program().is_none(),
            },
            program: rec.owner.program(),
            function: Some(rec.function.clone()),
            ..RunFilter::default()
        };
        let mut scanned = 0;
        while scanned < RECOVERY_SCAN {
            let page = self.store.list(&filter);
            scanned += page.runs.len();
            let previous = page.runs.iter().find(|r| {
                r.run != rec.run
                    && !matches!(
                        r.state,
                        RunState::Queued
                            | RunState::Running
                            | RunState::Cancelled
                            | RunState::Skipped
                            | RunState::Superseded
                    )
            });
            if let Some(r) = previous {
                return r.state != RunState::Finished;
            }
            match page.next {
                Some(c) => filter.before = Some(c),
                None => return false,
            }
        }
        false
    }

    /// Hand a run's deliveries to the delivery threads.
    pub fn submit(&self, chain: Chain) {
        let head = chain.0[0];
        lock(&self.queue).due.insert((Instant::now(), head), chain);
        self.wake.notify_one();
    }

    /// Deliveries waiting on disk.
    pub fn backlog(&self) -> usize {
        lock(&self.queue).backlog
    }

    /// A delivery thread: take the run whose next delivery is due, attempt
    /// it, put the run back for a retry or its next delivery.
    fn work(&self) {
        loop {
            let mut chain = self.next_due();
            let Some(&seq) = chain.0.front() else {
                continue;
            };
            match self.deliver(seq) {
                Some(retry_at) => {
                    lock(&self.queue).due.insert((retry_at, seq), chain);
                }
                None => {
                    chain.0.pop_front();
                    if let Some(&next) = chain.0.front() {
                        lock(&self.queue).due.insert((Instant::now(), next), chain);
                    }
                }
            }
        }
    }

    fn next_due(&self) -> Chain {
        let mut q = lock(&self.queue);
        loop {
            let now = Instant::now();
            let next = q.due.first_key_value().map(|(k, _)| k.0);
            q = match next {
                Some(t) if t <= now => {
                    if let Some((_, c)) = q.due.pop_first() {
                        return c;
                    }
                    q
                }
                Some(t) => self
                    .wake
                    .wait_timeout(q, t - now)
                    .map_or_else(|e| e.into_inner().0, |r| r.0),
                None => self.wake.wait(q).unwrap_or_else(|e| e.into_inner()),
            };
        }
    }

    /// Attempt pending delivery `seq`; `Some(time)` to retry then, `None`
    /// when it is over (or gone).
    fn deliver(&self, seq: u64) -> Option<Instant> {
        let Some(mut p) = self.spool.read(seq) else {
            log::error!("callbacks: pending delivery {seq} cannot be read; skipped");
            self.forget(seq);
            return None;
        };
        if self.already_final(&p) {
            self.forget(seq);
            return None;
        }
        let s = self.current();
        let first = *p.first_attempt_ms.get_or_insert_with(unix_ms);
        let (at, start) = (Time::now(), Instant::now());
        let n = p.delivery.attempt_count.saturating_add(1);
        let (outcome, asked) = send::attempt(&s.cb, s.tls(), &p, n);
        let (status, error) = match &outcome {
            Attempted::Delivered(c) => (Some(*c), None),
            Attempted::Retry(c, e) | Attempted::Failed(c, e) => (*c, e.clone()),
        };
        let error = error.or_else(|| {
            asked.map(|a| format!("the receiver asked to wait {}s (Retry-After)", a.as_secs()))
        });
        let duration_ms = send::elapsed_ms(start);
        p.delivery.push_attempt(Attempt {
            at,
            status,
            error,
            duration_ms,
        });
        match outcome {
            Attempted::Delivered(_) => {
                self.stats.attempts_ok.fetch_add(1, Ordering::Relaxed);
                self.finish(p, DeliveryState::Delivered, None);
                None
            }
            Attempted::Failed(c, e) => {
                self.stats.attempts_failed.fetch_add(1, Ordering::Relaxed);
                let why = e.unwrap_or_else(|| answered(c));
                self.finish(p, DeliveryState::Failed, Some(why));
                None
            }
            Attempted::Retry(..) => {
                self.stats.attempts_retry.fetch_add(1, Ordering::Relaxed);
                self.retry_later(p, &s.cb, first, n, asked)
            }
        }
    }

    /// After a retryable attempt: wait with backoff, or as long as the
    /// receiver's `Retry-After` (`asked`) says when that is longer; give up
    /// when the wait would end past `retry_for`.
    fn retry_later(
        &self,
        p: Pending,
        cb: &Callbacks,
        first: u64,
        n: u32,
        asked: Option<Duration>,
    ) -> Option<Instant> {
        let wait = backoff(cb, n).max(asked.unwrap_or(Duration::ZERO));
        let spent = Duration::from_millis(unix_ms().saturating_sub(first));
        if spent.saturating_add(wait) > cb.retry_for {
            let why = match asked.filter(|a| *a == wait) {
                Some(a) => format!(
                    "gave up after {n} attempt(s): the receiver asked to wait {}s (Retry-After), past retry_for ({}s)",
                    a.as_secs(),
                    cb.retry_for.as_secs()
                ),
                None => format!(
                    "gave up after {n} attempt(s): no success within retry_for ({}s)",
                    cb.retry_for.as_secs()
                ),
            };
            self.finish(p, DeliveryState::Failed, Some(why));
            return None;
        }
        if let Err(e) = self.spool.write(&p) {
            log::error!(
                "callbacks: cannot note attempt {n} of delivery {}: {e}",
                p.seq
            );
        }
        self.update_record(&p, false);
        Some(Instant::now() + wait)
    }

    /// Record the final state durably, then drop the pending file.
    fn finish(&self, mut p: Pending, state: DeliveryState, error: Option<String>) {
        p.delivery.state = state;
        p.delivery.error = error;
        // Counted first: whoever sees the final state in the record sees
        // it in /metrics too.
        let counter = match state {
            DeliveryState::Delivered => &self.stats.delivered,
            _ => &self.stats.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.forget_count();
        self.update_record(&p, true);
        if let Err(e) = self.spool.remove(p.seq) {
            log::error!("callbacks: cannot remove delivered {}: {e}", p.seq);
        }
        log::info!(
            "run {} callback {} to {}: {} after {} attempt(s){}",
            p.run,
            p.delivery.delivery,
            p.delivery.url,
            if state == DeliveryState::Delivered {
                "delivered"
            } else {
                "failed"
            },
            p.delivery.attempt_count,
            p.delivery
                .error
                .as_deref()
                .map_or(String::new(), |e| format!(" ({e})"))
        );
    }

    /// Whether the run log already has this delivery's final state (a crash
    /// came between recording it and removing the file).
    fn already_final(&self, p: &Pending) -> bool {
        self.store
            .get(&p.run)
            .and_then(|r| r.callbacks.get(p.index).cloned())
            .is_some_and(|d| d.delivery == p.delivery.delivery && d.state.is_final())
    }

    fn forget(&self, seq: u64) {
        let _ = self.spool.remove(seq);
        self.forget_count();
    }

    fn forget_count(&self) {
        let mut q = lock(&self.queue);
        q.backlog = q.backlog.saturating_sub(1);
    }

    /// Put the delivery's progress into its run's record.
    fn update_record(&self, p: &Pending, durable: bool) {
        // Through `update`: a redelivery or a re-run's link may change the
        // same record meanwhile.
        let written = self.store.update(&p.run, durable, |rec| {
            match rec.callbacks.get_mut(p.index) {
                Some(slot) if slot.delivery == p.delivery.delivery => {
                    *slot = p.delivery.clone();
                    true
                }
                _ => false,
            }
        });
        if let Err(e) = written {
            log::error!("run {}: cannot record its callback: {e}", p.run);
        }
    }

    /// The callback part of `/metrics`.
    pub fn render_metrics(&self) -> String {
        let mut s = String::new();
        let st = &self.stats;
        let _ = writeln!(s, "# HELP trigd_callback_deliveries_total Completion callbacks by final outcome.\n# TYPE trigd_callback_deliveries_total counter");
        for (o, c) in [
            ("delivered", &st.delivered),
            ("failed", &st.failed),
            ("dropped", &st.dropped),
        ] {
            let n = c.load(Ordering::Relaxed);
            let _ = writeln!(
                s,
                "trigd_callback_deliveries_total{{outcome=\"{}\"}} {n}",
                label(o)
            );
        }
        let _ = writeln!(s, "# HELP trigd_callback_attempts_total Callback attempts by result.\n# TYPE trigd_callback_attempts_total counter");
        for (r, c) in [
            ("delivered", &st.attempts_ok),
            ("retry", &st.attempts_retry),
            ("failed", &st.attempts_failed),
        ] {
            let n = c.load(Ordering::Relaxed);
            let _ = writeln!(
                s,
                "trigd_callback_attempts_total{{result=\"{}\"}} {n}",
                label(r)
            );
        }
        let _ = writeln!(
            s,
            "# HELP trigd_callback_backlog Callback deliveries waiting on disk.\n# TYPE trigd_callback_backlog gauge\ntrigd_callback_backlog {}",
            self.backlog()
        );
        s
    }
}

/// The index of a delivery that has no place in its run's record (a
/// `healthchecks` start ping).
const NOT_IN_RECORD: usize = usize::MAX;

/// How many of an owner's newest runs are read, at most, to find whether
/// a success is a recovery.
pub const RECOVERY_SCAN: usize = 500;

/// Whether a callback with outcomes `on` is sent for a run that ended `o`
/// (a success that is a recovery when `recovered`).
fn wanted(on: &[Outcome], o: Outcome, recovered: bool) -> bool {
    on.is_empty() || on.contains(&o) || (recovered && on.contains(&Outcome::Recovered))
}

/// The outcome delivery `d` of the ended run `rec` reports: its own (set
/// when it was spooled), else the run's end state's (a delivery its `on`
/// skipped has none).
pub fn reported(rec: &RunRecord, d: &Delivery) -> Outcome {
    d.outcome
        .or_else(|| format::outcome_of(rec.state))
        .unwrap_or(Outcome::Interrupted)
}

fn settings(cb: &Arc<Callbacks>) -> Settings {
    Settings {
        cb: Arc::clone(cb),
        tls: OnceLock::new(),
    }
}

/// The body sent: the run record as `GET /api/runs/<id>` shows it at the
/// run's end, without `Callbacks` (which describes this very delivery).
pub fn payload(rec: &RunRecord) -> String {
    let mut r = rec.clone().public();
    r.callbacks.clear();
    serde_json::to_string(&r).unwrap_or_default()
}

/// The wait after attempt `n` failed: `backoff` doubled per attempt, at
/// most `backoff_max`, then a random part of up to half of it taken off
/// (jitter), so receivers that come back are not hit all at once.
pub fn backoff(cb: &Callbacks, n: u32) -> Duration {
    let factor = 2u32.saturating_pow(n.saturating_sub(1).min(30));
    let full = cb.backoff.saturating_mul(factor).min(cb.backoff_max);
    let half = full / 2;
    half + half.mul_f64(rand::random::<f64>())
}

fn answered(status: Option<u16>) -> String {
    match status {
        Some(c) => format!("the receiver answered {c}; not retried"),
        None => "not retried".into(),
    }
}

fn unix_ms() -> u64 {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_filters() {
        use Outcome::*;
        assert!(wanted(&[], Failed, false));
        assert!(wanted(&[Failed], Failed, false));
        assert!(!wanted(&[Failed], Finished, false));
        assert!(wanted(&[Failed, Recovered], Finished, true));
        assert!(!wanted(&[Recovered], Finished, false));
        assert!(!wanted(&[Overdue], Failed, false));
    }

    #[test]
    fn backoff_doubles_within_bounds() {
        let cb = Callbacks {
            backoff: Duration::from_millis(100),
            backoff_max: Duration::from_millis(1000),
            ..Callbacks::default()
        };
        for (n, full) in [
            (1, 100),
            (2, 200),
            (3, 400),
            (4, 800),
            (5, 1000),
            (40, 1000),
        ] {
            for _ in 0..50 {
                let w = backoff(&cb, n).as_millis() as u64;
                assert!(w >= full / 2 && w <= full, "attempt {n}: {w}ms");
            }
        }
    }

    #[test]
    fn requested_urls_need_permission_and_the_allow_list() {
        let cb = Callbacks {
            allow: vec![crate::config::callbacks::Allow::Host("a.example".into())],
            ..Callbacks::default()
        };
        let fixed = Fixed {
            url: "https://f.example/".into(),
            format: Format::Slack,
            on: vec![Outcome::Failed],
        };
        let fx = [(Some(&fixed), Source::Function), (None, Source::Trigger)];
        let t = targets(&cb, &fx, None, false).unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(
            (t[0].format, t[0].on.as_slice()),
            (Format::Slack, &[Outcome::Failed][..])
        );
        assert_eq!(
            targets(&cb, &fx, Some("https://a.example/x"), false).unwrap_err(),
            ApiError::CallbackNotPermitted
        );
        assert_eq!(
            targets(&cb, &fx, Some("https://a.example/x"), true)
                .unwrap()
                .len(),
            2
        );
        let e = targets(&cb, &fx, Some("https://b.example/"), true).unwrap_err();
        assert_eq!(e.code(), "callback_refused");
        let mut r = Request::new("POST", "/api?callback=https%3A%2F%2Fa.example%2F").unwrap();
        assert_eq!(requested(&r, true).unwrap(), Some("https://a.example/"));
        assert_eq!(requested(&r, false).unwrap(), None);
        r.headers
            .push(("trigd-callback".into(), "https://other.example/".into()));
        assert!(requested(&r, true).is_err());
        // Two headers: refused as two parameters are, naming the header.
        let mut r = Request::new("POST", "/hooks/x").unwrap();
        for u in ["https://a.example/", "https://a.example/"] {
            r.headers.push(("trigd-callback".into(), u.into()));
        }
        let e = requested(&r, false).unwrap_err();
        assert_eq!(
            e,
            ApiError::InvalidParameter {
                name: "Trigd-Callback".into(),
                msg: "header 'Trigd-Callback' may be given only once".into()
            }
        );
    }
}
