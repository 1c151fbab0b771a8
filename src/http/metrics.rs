//! Counters and a run-duration histogram, rendered as Prometheus text for
//! `GET /metrics`. Lock-free atomics on the request path; one small mutex
//! for the per-program run counts.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::state::record::Owner;

/// Upper bounds (seconds) of the run duration histogram buckets.
const BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0, 60.0, 300.0,
];

/// Whose ended runs a `trigd_runs_total` line counts.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum RunLabel {
    /// A program, by id (`program="<id>"`).
    Program(u64),
    /// A hooks-file hook, by id (`hook="<id>"`).
    Hook(String),
}

/// Process-wide metrics.
pub struct Metrics {
    /// HTTP responses by status code (index = status).
    http: Vec<AtomicU64>,
    /// Finished runs by (program or hook, outcome state).
    runs: Mutex<BTreeMap<(RunLabel, &'static str), u64>>,
    /// Requests of signed endpoints and hooks-file hooks that did not
    /// run, by (tool, trigger, outcome):
    /// `ignored` by rules, or the `Code` of a refused signature.
    not_run: Mutex<BTreeMap<(String, String, &'static str), u64>>,
    buckets: [AtomicU64; BUCKETS.len()],
    duration_count: AtomicU64,
    duration_sum_us: AtomicU64,
    /// Public switches flipped from trigd: [to off, to on].
    switch_flips: [AtomicU64; 2],
    /// Schedule occurrences by outcome (`started`, or a skip reason).
    firings: Mutex<BTreeMap<&'static str, u64>>,
    /// Process groups a killed trigd left running, stopped at start, by
    /// how they ended (`runner::orphans::Ended::label`).
    orphans: Mutex<BTreeMap<&'static str, u64>>,
    /// Lateness of started firings: buckets of [`LATENESS`], count, sum.
    lateness: [AtomicU64; LATENESS.len()],
    lateness_count: AtomicU64,
    lateness_sum_us: AtomicU64,
    /// When each function last finished a run successfully (a program's
    /// functions; hooks have no `expect_every`).
    last_success: Mutex<BTreeMap<(u64, String), jiff::Timestamp>>,
}

/// Upper bounds (seconds) of the schedule lateness histogram buckets.
const LATENESS: [f64; 8] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0, 5.0];

/// Gauges read at render time.
pub struct Gauges {
    /// Runs executing now.
    pub in_flight: usize,
    /// Runs that may execute at once (`max_concurrent_runs` in effect).
    pub slots: usize,
    /// Async runs that may execute at once (`max_concurrent_async_runs`).
    pub async_slots: usize,
    /// Runs (sync and async) waiting for a slot.
    pub queued: usize,
    /// Child processes alive.
    pub children: usize,
    /// Open HTTP connections.
    pub connections: usize,
    /// Successful reloads.
    pub reloads: u64,
    /// Refused reloads.
    pub reload_errors: u64,
    /// Config generation.
    pub generation: u64,
    /// `fdatasync` calls on the run log.
    pub run_log_fsyncs: u64,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            http: (0..600).map(|_| AtomicU64::new(0)).collect(),
            runs: Mutex::new(BTreeMap::new()),
            not_run: Mutex::new(BTreeMap::new()),
            buckets: Default::default(),
            duration_count: AtomicU64::new(0),
            duration_sum_us: AtomicU64::new(0),
            switch_flips: Default::default(),
            firings: Mutex::new(BTreeMap::new()),
            orphans: Mutex::new(BTreeMap::new()),
            lateness: Default::default(),
            lateness_count: AtomicU64::new(0),
            lateness_sum_us: AtomicU64::new(0),
            last_success: Mutex::new(BTreeMap::new()),
        }
    }
}

impl Metrics {
    /// Count one HTTP response.
    pub fn http(&self, status: u16) {
        if let Some(c) = self.http.get(usize::from(status)) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Count one public switch flipped from trigd to `on`.
    pub fn switch_flip(&self, on: bool) {
        self.switch_flips[usize::from(on)].fetch_add(1, Ordering::Relaxed);
    }

    /// Count one ended run of `function` of `owner` with `outcome` (a
    /// state name).
    pub fn run(&self, owner: Owner, function: &str, outcome: &'static str, took: Duration) {
        let label = match owner {
            Owner::Program(id) => RunLabel::Program(id),
            Owner::Hook => RunLabel::Hook(function.to_string()),
        };
        *self
            .runs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((label, outcome))
            .or_default() += 1;
        let secs = took.as_secs_f64();
        for (b, c) in BUCKETS.iter().zip(&self.buckets) {
            if secs <= *b {
                c.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.duration_count.fetch_add(1, Ordering::Relaxed);
        self.duration_sum_us
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
    }

    /// Note that `function` of program `id` finished a run successfully
    /// at `at` (kept if later than what is known).
    pub fn succeeded(&self, id: u64, function: &str, at: jiff::Timestamp) {
        let mut last = self.last_success.lock().unwrap_or_else(|e| e.into_inner());
        let t = last.entry((id, function.to_string())).or_insert(at);
        *t = (*t).max(at);
    }

    /// When `function` of program `id` last finished successfully.
    pub fn last_success(&self, id: u64, function: &str) -> Option<jiff::Timestamp> {
        let last = self.last_success.lock().unwrap_or_else(|e| e.into_inner());
        last.get(&(id, function.to_string())).copied()
    }

    /// Count one process group a killed trigd left running, stopped at
    /// start, ended `how` (`term`, `kill` or `left`).
    pub fn orphan_group_stopped(&self, how: &'static str) {
        *self
            .orphans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(how)
            .or_default() += 1;
    }

    /// Count one schedule occurrence with `outcome` (`started` or a skip
    /// reason); a started one `late` after its firing time.
    pub fn schedule_fired(&self, outcome: &'static str, late: Duration) {
        *self
            .firings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(outcome)
            .or_default() += 1;
        if outcome != "started" {
            return;
        }
        let secs = late.as_secs_f64();
        for (b, c) in LATENESS.iter().zip(&self.lateness) {
            if secs <= *b {
                c.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.lateness_count.fetch_add(1, Ordering::Relaxed);
        self.lateness_sum_us
            .fetch_add(late.as_micros() as u64, Ordering::Relaxed);
    }

    /// Count one request of `tool`'s `trigger` (a signed endpoint, or
    /// `hooks` and a hook id) that did not run:
    /// `outcome` is `ignored` or the `Code` of its refusal.
    pub fn not_run(&self, tool: &str, trigger: &str, outcome: &'static str) {
        *self
            .not_run
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((tool.to_string(), trigger.to_string(), outcome))
            .or_default() += 1;
    }

    /// The Prometheus text exposition.
    pub fn render(&self, g: &Gauges) -> String {
        let mut s = String::new();
        self.render_http(&mut s);
        self.render_runs(&mut s);
        self.render_not_run(&mut s);
        self.render_durations(&mut s);
        g.render(&mut s);
        self.render_switch_flips(&mut s);
        self.render_firings(&mut s);
        self.render_orphans(&mut s);
        s
    }

    fn render_orphans(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "# HELP trigd_orphan_groups_stopped_total Process groups a killed trigd left running, stopped at start, by how they ended.\n\
             # TYPE trigd_orphan_groups_stopped_total counter"
        );
        let orphans = self.orphans.lock().unwrap_or_else(|e| e.into_inner());
        for (how, n) in orphans.iter() {
            let _ = writeln!(s, "trigd_orphan_groups_stopped_total{{how=\"{how}\"}} {n}");
        }
    }

    fn render_firings(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "# HELP trigd_schedule_firings_total Schedule occurrences by outcome: started, or why skipped.\n\
             # TYPE trigd_schedule_firings_total counter"
        );
        for (o, n) in self
            .firings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = writeln!(s, "trigd_schedule_firings_total{{outcome=\"{o}\"}} {n}");
        }
        let _ = writeln!(
            s,
            "# HELP trigd_schedule_lateness_seconds How late started firings were (after occurrence and jitter).\n\
             # TYPE trigd_schedule_lateness_seconds histogram"
        );
        for (b, c) in LATENESS.iter().zip(&self.lateness) {
            let n = c.load(Ordering::Relaxed);
            let _ = writeln!(
                s,
                "trigd_schedule_lateness_seconds_bucket{{le=\"{b}\"}} {n}"
            );
        }
        let count = self.lateness_count.load(Ordering::Relaxed);
        let _ = writeln!(
            s,
            "trigd_schedule_lateness_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let sum = self.lateness_sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(s, "trigd_schedule_lateness_seconds_sum {sum}");
        let _ = writeln!(s, "trigd_schedule_lateness_seconds_count {count}");
    }

    fn render_switch_flips(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "# HELP trigd_public_switch_flips_total Public switches flipped from trigd (browser or HTTP), by new state.\n\
             # TYPE trigd_public_switch_flips_total counter"
        );
        for (to, c) in ["off", "on"].iter().zip(&self.switch_flips) {
            let n = c.load(Ordering::Relaxed);
            let _ = writeln!(
                s,
                "trigd_public_switch_flips_total{{to=\"{}\"}} {n}",
                label(to)
            );
        }
    }

    fn render_http(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "# HELP trigd_http_requests_total HTTP responses by status code."
        );
        let _ = writeln!(s, "# TYPE trigd_http_requests_total counter");
        for (status, c) in self.http.iter().enumerate() {
            let n = c.load(Ordering::Relaxed);
            if n > 0 {
                let _ = writeln!(s, "trigd_http_requests_total{{status=\"{status}\"}} {n}");
            }
        }
    }

    fn render_runs(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "# HELP trigd_runs_total Ended runs by program (or hooks-file hook) and outcome."
        );
        let _ = writeln!(s, "# TYPE trigd_runs_total counter");
        for ((who, o), n) in self.runs.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let who = match who {
                RunLabel::Program(p) => format!("program=\"{p}\""),
                RunLabel::Hook(h) => format!("hook=\"{}\"", label(h)),
            };
            let _ = writeln!(s, "trigd_runs_total{{{who},outcome=\"{}\"}} {n}", label(o));
        }
    }

    fn render_not_run(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "# HELP trigd_webhooks_not_run_total Requests of signed endpoints and hooks-file hooks that ran nothing: ignored by rules, or refused (outcome = the error Code)."
        );
        let _ = writeln!(s, "# TYPE trigd_webhooks_not_run_total counter");
        for ((tool, trigger, o), n) in self
            .not_run
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = writeln!(
                s,
                "trigd_webhooks_not_run_total{{tool=\"{}\",trigger=\"{}\",outcome=\"{}\"}} {n}",
                label(tool),
                label(trigger),
                label(o)
            );
        }
    }

    fn render_durations(&self, s: &mut String) {
        let _ = writeln!(s, "# HELP trigd_run_duration_seconds Run duration.");
        let _ = writeln!(s, "# TYPE trigd_run_duration_seconds histogram");
        for (b, c) in BUCKETS.iter().zip(&self.buckets) {
            let _ = writeln!(
                s,
                "trigd_run_duration_seconds_bucket{{le=\"{b}\"}} {}",
                c.load(Ordering::Relaxed)
            );
        }
        let count = self.duration_count.load(Ordering::Relaxed);
        let _ = writeln!(
            s,
            "trigd_run_duration_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let sum = self.duration_sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(s, "trigd_run_duration_seconds_sum {sum}");
        let _ = writeln!(s, "trigd_run_duration_seconds_count {count}");
    }
}

/// `value` as a label value of the Prometheus text format: backslash,
/// double quote and line feed escaped (`\\`, `\"`, `\n`), so that any hook
/// id or trigger name keeps the exposition parseable.
pub fn label(value: &str) -> Cow<'_, str> {
    if !value.contains(['\\', '"', '\n']) {
        return Cow::Borrowed(value);
    }
    let mut out = String::with_capacity(value.len() + 8);
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

impl Gauges {
    /// One `HELP`, `TYPE` and value line per gauge.
    fn render(&self, s: &mut String) {
        let gauges = [
            (
                "trigd_runs_in_flight",
                "gauge",
                "Runs executing now.",
                self.in_flight as u64,
            ),
            (
                "trigd_run_slots",
                "gauge",
                "Runs that may execute at once (max_concurrent_runs in effect).",
                self.slots as u64,
            ),
            (
                "trigd_async_run_slots",
                "gauge",
                "Async runs that may execute at once (max_concurrent_async_runs in effect).",
                self.async_slots as u64,
            ),
            (
                "trigd_runs_queued",
                "gauge",
                "Runs (sync and async) waiting for a slot.",
                self.queued as u64,
            ),
            (
                "trigd_child_processes",
                "gauge",
                "Step processes alive now.",
                self.children as u64,
            ),
            (
                "trigd_open_connections",
                "gauge",
                "Open HTTP connections.",
                self.connections as u64,
            ),
            (
                "trigd_config_generation",
                "gauge",
                "Generation of the served config.",
                self.generation,
            ),
            (
                "trigd_reloads_total",
                "counter",
                "Successful config reloads.",
                self.reloads,
            ),
            (
                "trigd_reload_errors_total",
                "counter",
                "Refused config reloads.",
                self.reload_errors,
            ),
        ];
        for (name, kind, help, v) in gauges {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}");
        }
        let _ = writeln!(
            s,
            "# HELP trigd_state_fsyncs_total fsync/fdatasync calls on files of the state dir that wait for the disk, by file.\n\
             # TYPE trigd_state_fsyncs_total counter\n\
             trigd_state_fsyncs_total{{file=\"runs.log\"}} {}",
            self.run_log_fsyncs
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counts_and_histogram() {
        let m = Metrics::default();
        m.http(200);
        m.http(200);
        m.http(503);
        m.run(
            Owner::Program(3),
            "f",
            "finished",
            Duration::from_millis(20),
        );
        m.run(
            Owner::Hook,
            "a\"b\\c\nd",
            "failed",
            Duration::from_millis(20),
        );
        m.not_run("gh", "push", "ignored");
        m.not_run("gh", "push", "ignored");
        let g = Gauges {
            in_flight: 1,
            slots: 4,
            async_slots: 2,
            queued: 0,
            children: 1,
            connections: 2,
            reloads: 2,
            reload_errors: 1,
            generation: 3,
            run_log_fsyncs: 7,
        };
        let t = m.render(&g);
        assert!(t.contains("\ntrigd_run_slots 4\n"), "{t}");
        assert!(t.contains("\ntrigd_async_run_slots 2\n"), "{t}");
        assert!(
            t.contains("trigd_state_fsyncs_total{file=\"runs.log\"} 7"),
            "{t}"
        );
        assert!(
            t.contains("trigd_http_requests_total{status=\"200\"} 2"),
            "{t}"
        );
        assert!(t.contains("trigd_runs_total{program=\"3\",outcome=\"finished\"} 1"));
        let hook = r#"trigd_runs_total{hook="a\"b\\c\nd",outcome="failed"} 1"#;
        assert!(t.contains(hook), "{t}");
        assert!(t.contains("trigd_run_duration_seconds_bucket{le=\"0.01\"} 0"));
        assert!(t.contains("trigd_run_duration_seconds_bucket{le=\"0.025\"} 2"));
        assert!(t.contains("trigd_reload_errors_total 1"));
        assert!(t.contains("trigd_open_connections 2"));
        let w = "trigd_webhooks_not_run_total{tool=\"gh\",trigger=\"push\",outcome=\"ignored\"} 2";
        assert!(t.contains(w), "{t}");
        assert!(t.contains("trigd_public_switch_flips_total{to=\"on\"} 0"));
        m.switch_flip(true);
        let t = m.render(&g);
        assert!(
            t.contains("trigd_public_switch_flips_total{to=\"on\"} 1"),
            "{t}"
        );
        assert!(t.contains("trigd_public_switch_flips_total{to=\"off\"} 0"));
        m.orphan_group_stopped("term");
        m.orphan_group_stopped("term");
        let t = m.render(&g);
        assert!(
            t.contains("trigd_orphan_groups_stopped_total{how=\"term\"} 2"),
            "{t}"
        );
    }
}
