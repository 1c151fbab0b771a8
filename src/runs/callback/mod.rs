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

pub mod redeliver;
pub mod send;

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, RwLock};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::config::callbacks::Callbacks;
use crate::http::metrics::label;
use crate::http::{ApiError, Request};
use crate::state::delivery::{Attempt, DeliveryState, Source, Target};
use crate::state::record::RunRecord;
use crate::state::spool::{Pending, Spool};
use crate::state::store::RunStore;
use crate::state::time::Time;
use crate::state::State;
use send::Outcome;

/// The callback URL a request names: the `callback` query parameter (when
/// `query` is set: `POST /api`) or the `Trigd-Callback` header.
///
/// # Errors
/// `invalid_parameter` for a repeated parameter; `callback_refused` when the
/// parameter and the header name different URLs.
pub fn requested(req: &Request, query: bool) -> Result<Option<&str>, ApiError> {
    let from_query = if query {
        req.query_one("callback")?
    } else {
        None
    };
    match (from_query, req.header("trigd-callback")) {
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
    fixed: &[(Option<&String>, Source)],
    requested: Option<&str>,
    permitted: bool,
) -> Result<Vec<Target>, ApiError> {
    let mut out: Vec<Target> = fixed
        .iter()
        .filter_map(|(url, source)| {
            url.map(|u| Target {
                url: u.clone(),
                source: *source,
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
        store: Arc<RunStore>,
        cb: &Arc<Callbacks>,
        interrupted: &[String],
    ) -> io::Result<Arc<Service>> {
        let (spool, found) = state.open_spool()?;
        let service = Arc::new(Service {
            store,
            spool,
            settings: RwLock::new(Arc::new(settings(cb))),
            queue: Mutex::new(Queue::default()),
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

    /// Queue pending deliveries read from disk, one chain per run.
    fn resume(&self, found: Vec<Pending>) {
        let mut chains: Vec<(String, Chain)> = Vec::new();
        let mut q = lock(&self.queue);
        for p in &found {
            q.next_seq = q.next_seq.max(p.seq + 1);
            match chains.iter_mut().find(|(run, _)| *run == p.run) {
                Some((_, c)) => c.0.push_back(p.seq),
                None => chains.push((p.run.clone(), Chain(VecDeque::from([p.seq])))),
            }
        }
        q.backlog = found.len();
        let now = Instant::now();
        for (_, c) in chains {
            let head = c.0[0];
            q.due.insert((now, head), c);
        }
        if !found.is_empty() {
            log::info!("callbacks: {} pending deliveries resumed", found.len());
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
    /// waiting delivery durably and mark it `pending` in `rec` (or `failed`
    /// when the backlog is full or the disk refuses). Returns the chain to
    /// [`submit`](Self::submit) once `rec` is written.
    pub fn ended(&self, rec: &mut RunRecord) -> Option<Chain> {
        if !rec
            .callbacks
            .iter()
            .any(|d| d.state == DeliveryState::Waiting)
        {
            return None;
        }
        let body = payload(rec);
        let max = self.current().cb.max_pending;
        let mut chain = VecDeque::new();
        for (index, d) in rec.callbacks.iter_mut().enumerate() {
            if d.state != DeliveryState::Waiting {
                continue;
            }
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
                log::warn!(
                    "run {}: callback to {} dropped: backlog full",
                    rec.run,
                    d.url
                );
                continue;
            };
            d.state = DeliveryState::Pending;
            let p = Pending {
                seq,
                run: rec.run.clone(),
                index,
                delivery: d.clone(),
                first_attempt_ms: None,
                body: body.clone(),
            };
            if let Err(e) = self.spool.write(&p) {
                lock(&self.queue).backlog -= 1;
                d.state = DeliveryState::Failed;
                d.error = Some(format!("not sent: the delivery could not be stored ({e})"));
                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
                log::error!("run {}: cannot store a callback delivery: {e}", rec.run);
                continue;
            }
            chain.push_back(seq);
        }
        (!chain.is_empty()).then_some(Chain(chain))
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
        let outcome = send::attempt(&s.cb, s.tls(), &p, n);
        let (status, error) = match &outcome {
            Outcome::Delivered(c) => (Some(*c), None),
            Outcome::Retry(c, e) | Outcome::Failed(c, e) => (*c, e.clone()),
        };
        let duration_ms = send::elapsed_ms(start);
        p.delivery.push_attempt(Attempt {
            at,
            status,
            error,
            duration_ms,
        });
        match outcome {
            Outcome::Delivered(_) => {
                self.stats.attempts_ok.fetch_add(1, Ordering::Relaxed);
                self.finish(p, DeliveryState::Delivered, None);
                None
            }
            Outcome::Failed(c, e) => {
                self.stats.attempts_failed.fetch_add(1, Ordering::Relaxed);
                let why = e.unwrap_or_else(|| answered(c));
                self.finish(p, DeliveryState::Failed, Some(why));
                None
            }
            Outcome::Retry(..) => {
                self.stats.attempts_retry.fetch_add(1, Ordering::Relaxed);
                self.retry_later(p, &s.cb, first, n)
            }
        }
    }

    /// After a retryable attempt: wait with backoff, or give up when the
    /// wait would end past `retry_for`.
    fn retry_later(&self, p: Pending, cb: &Callbacks, first: u64, n: u32) -> Option<Instant> {
        let wait = backoff(cb, n);
        let spent = Duration::from_millis(unix_ms().saturating_sub(first));
        if spent + wait > cb.retry_for {
            let why = format!(
                "gave up after {n} attempt(s): no success within retry_for ({}s)",
                cb.retry_for.as_secs()
            );
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
        let fixed = String::from("https://f.example/");
        let fx = [(Some(&fixed), Source::Function), (None, Source::Trigger)];
        let t = targets(&cb, &fx, None, false).unwrap();
        assert_eq!(t.len(), 1);
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
    }
}
