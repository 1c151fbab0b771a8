//! The PostgreSQL backend (`[state] url`) with real parts: the harness's
//! PostgreSQL (`tests/util/pg.rs`: Debian's server in a temp dir), trigd
//! instances sharing one database, three of them behind a real HAProxy
//! started from `dist/haproxy.cfg` as shipped for database mode (plain
//! round robin, no run-id routing, no sticky sessions).
//!
//! Issue 32's four checks (an `Idempotency-Key` retry runs once across
//! instances; `/output` and `/cancel` through the balancer never 421; a dead
//! instance's runs are answered by the survivors and its queued runs run
//! elsewhere; application keys, sessions, sign-in throttling and key rate
//! limits cluster-wide), `kill -9` under load, PostgreSQL stopped and
//! started under load, and the database round trips of a sync run.
//!
//! `#[ignore]`d like the other tests that need a system package
//! (PostgreSQL, HAProxy): `cargo test -- --include-ignored` runs them, as
//! `.ci/run` does, and they fail with install advice when one is missing.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::cluster::{
    accept_runs, accept_slow, app_key, async_url, bearer_call, haproxy_bin, owner, run_url,
    wait_terminal, Haproxy, Load, Node,
};
use crate::util::*;

/// An API key limited to 6 requests a minute.
const KEY_LIMITED: &str = "trigd-test-key-limited-4b9e77d0";

/// How long an instance's lease lasts in these tests: a dead instance's
/// runs are taken over within it (plus a heartbeat and a poll).
const LEASE: &str = "3s";

/// Program 2 of the cluster tests: `once` appends a line to `count` (an
/// absolute path shared by the instances) each time it really runs.
fn counting_program(count: &Path) -> String {
    format!(
        r#"
id = 2
name = "count"
workspace = "ops"

[[functions]]
name = "once"
steps = [{{ shell = "echo ran >> '{}'; sleep 1; printf once" }}]
[functions.webhook]
"#,
        count.display()
    )
}

/// The tail of an instance's config: program 2, the rate-limited key and
/// the `[state]` table of `db` with the test lease.
fn db_tail(db: &PgDb, count: &Path, dir: &Path) -> String {
    fs::write(dir.join("programs/count.toml"), counting_program(count)).unwrap();
    format!(
        "\n[[api_keys]]\nname = \"limited\"\nsha256 = \"{}\"\nrate_per_minute = 6\n{}",
        sha256_hex(KEY_LIMITED),
        db.state_toml(dir, &format!("lease = {LEASE:?}"))
    )
}

/// Three instances on `db` (and their shared `count` file).
fn db_nodes(root: &TestDir, db: &PgDb) -> Vec<Node> {
    let count = root.path("count");
    ["t1", "t2", "t3"]
        .iter()
        .map(|n| Node::with_config(root, n, "", |dir| db_tail(db, &count, dir)))
        .collect()
}

fn lines_in(path: &Path) -> usize {
    fs::read_to_string(path).map_or(0, |s| s.lines().count())
}

#[test]
#[ignore = "needs PostgreSQL: cargo test -- --include-ignored (as .ci/run does)"]
fn the_harness_starts_postgresql_and_gives_each_test_a_database() {
    let a = pg_database("harness_a");
    let b = pg_database("harness_b");
    assert_ne!(a.name, b.name);
    a.psql("CREATE TABLE t (x int); INSERT INTO t VALUES (1), (2)");
    assert_eq!(a.count("SELECT count(*) FROM t"), 2);
    assert!(
        b.try_psql("SELECT count(*) FROM t").is_err(),
        "databases are separate"
    );
    assert_eq!(a.psql("SHOW fsync"), "on");
    if shared().stat_statements {
        let before = a.statement_calls().expect("pg_stat_statements is readable");
        a.psql("SELECT 1");
        let after = a.statement_calls().expect("pg_stat_statements");
        assert!(
            after > before,
            "pg_stat_statements counts: {before} then {after}"
        );
    }

    let own = Pg::start("harness_own");
    let db = own.database("x");
    db.psql("CREATE TABLE k (v text); INSERT INTO k VALUES ('kept')");
    own.stop(true);
    assert!(db.try_psql("SELECT 1").is_err(), "stopped");
    own.start_again();
    assert_eq!(
        db.psql("SELECT v FROM k"),
        "kept",
        "committed rows survive a crash"
    );
}

// ---------------------------------------------------------------------------
// Three instances on one database behind HAProxy

#[test]
#[ignore = "needs PostgreSQL and HAProxy: cargo test -- --include-ignored (as .ci/run does)"]
fn three_instances_on_one_database_behind_haproxy() {
    let bin = haproxy_bin();
    let db = pg_database("pg_haproxy");
    let root = TestDir::new("pg_haproxy");
    let mut nodes = db_nodes(&root, &db);
    let hx = Haproxy::start(&bin, &root, &nodes, false);
    let lb = hx.client();

    an_idempotency_key_runs_once_across_instances(&lb, &root.path("count"));
    output_and_cancel_never_421(&lb, &nodes);
    app_keys_are_cluster_wide(&lb, &nodes);
    a_dead_instances_runs_are_answered_and_its_queue_runs_elsewhere(&hx, &lb, &mut nodes, &db);
    kill9_under_load_loses_no_accepted_run(&hx, &lb, &mut nodes);
}

/// Check 1: seven requests with one `Idempotency-Key`, one after the other
/// (round robin: every instance gets some), then four at once with
/// another: two runs in all, every answer the first run's.
fn an_idempotency_key_runs_once_across_instances(lb: &Client, count: &Path) {
    let url = format!("/api?api_key={KEY}&program_id=2&function=once");
    let mut ids = BTreeSet::new();
    for _ in 0..7 {
        let r = lb.request("POST", &url, &[("Idempotency-Key", "retry-1")], b"");
        let v = r.ok();
        r.check_eq(&v["Result"], &json!(["once"]), "the first run's answer");
        ids.insert(r.run_id(&v));
    }
    assert_eq!(ids.len(), 1, "one run for one key: {ids:?}");
    let at_once: Vec<_> = (0..4)
        .map(|_| {
            let (lb, url) = (lb.clone(), url.clone());
            thread::spawn(move || {
                let r = lb.request("POST", &url, &[("Idempotency-Key", "retry-2")], b"");
                (r.status, r.json()["Run"].as_str().unwrap_or("").to_string())
            })
        })
        .collect();
    let mut second = BTreeSet::new();
    for h in at_once {
        let (status, id) = h.join().unwrap();
        // A repeat that arrives while the first still runs may be told so
        // (409 run in progress) rather than wait; it never runs again.
        assert!(
            status == 200 || status == 409,
            "a concurrent repeat got {status}"
        );
        if status == 200 {
            second.insert(id);
        }
    }
    assert!(second.len() <= 1, "one run for one key: {second:?}");
    assert!(
        wait_until(WAIT, || lines_in(count) >= 2),
        "the two keys' runs ran"
    );
    thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        lines_in(count),
        2,
        "11 requests with 2 keys through 3 instances ran the program twice"
    );
}

/// Check 2: the output and cancel of every run, through the balancer,
/// whichever instance accepted or runs it: never 421.
fn output_and_cancel_never_421(lb: &Client, nodes: &[Node]) {
    // Gated runs: 2 s runs could all end before their cancel on a loaded
    // machine.
    let ids = accept_runs(lb, "gated", 6);
    let owners: BTreeSet<&str> = ids.iter().map(|i| owner(i)).collect();
    assert!(owners.len() >= 2, "runs spread over instances: {ids:?}");
    for _ in 0..2 {
        for id in &ids {
            let r = lb.get(&format!("/api/runs/{id}/output?api_key={KEY}"));
            r.check(r.status != 421, "output through the balancer is never 421");
            r.check(
                r.status == 200 || r.status == 404,
                "output: 200 (or 404 before any output is kept)",
            );
        }
    }
    for id in &ids {
        let r = lb.post(&format!("/api/runs/{id}/cancel?api_key={KEY}"));
        r.check(r.status != 421, "cancel through the balancer is never 421");
        r.check(
            r.status == 200 || r.status == 202 || r.status == 409,
            "cancel accepted (or the run already over)",
        );
    }
    // A run the cancel did not reach ends as a 2 s run would have.
    for n in nodes {
        fs::write(n.dir.join("go"), "").unwrap();
    }
    let states = wait_terminal(lb, &ids);
    assert!(
        states.values().all(|s| s == "cancelled" || s == "finished"),
        "cancelled through the balancer: {states:?}"
    );
    assert!(
        states.values().any(|s| s == "cancelled"),
        "some cancel reached its process: {states:?}"
    );
    // Asked directly, another instance answers for a run it did not run.
    let t1_run = ids.iter().find(|i| owner(i) != "t1").unwrap();
    let r = nodes[0].client().get(&run_url(t1_run));
    r.check_eq(
        &r.ok()["Run"],
        &json!(t1_run),
        "any instance answers for any run",
    );
}

/// Check 4: application keys made through one instance work on all,
/// revoked on all; then sessions, sign-in throttling and rate limits.
fn app_keys_are_cluster_wide(lb: &Client, nodes: &[Node]) {
    // Each instance keeps a copy of the keys, brought up to date by the
    // database's notifications: a change reaches the others within a
    // bound, not in the same instant.
    let reaches = |key: &str, status: u16, what: &str| {
        let start = Instant::now();
        for n in nodes {
            let c = n.client();
            assert!(
                wait_until(WAIT, || bearer_call(&c, key) == status),
                "{what} on {} within {WAIT:?}",
                n.name
            );
        }
        eprintln!("{what} on every instance after {:?}", start.elapsed());
    };
    let first = app_key(&nodes[0], "alice");
    reaches(&first, 200, "a key made through t1 works");
    let second = app_key(&nodes[2], "alice");
    reaches(&first, 401, "the key regenerated through t3 is revoked");
    reaches(&second, 200, "the new key works");
    sessions_throttling_and_limits_are_cluster_wide(lb, nodes);
}

/// A session made through the balancer works on every instance; failed
/// sign-ins and a key's rate limit count across instances.
fn sessions_throttling_and_limits_are_cluster_wide(lb: &Client, nodes: &[Node]) {
    let r = lb.request(
        "POST",
        "/login",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        b"username=alice&password=alice-pw",
    );
    r.ok();
    let cookie: Vec<String> = r
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("set-cookie"))
        .filter_map(|(_, v)| v.split(';').next().map(String::from))
        .collect();
    r.check(
        !cookie.iter().any(|c| c.starts_with("trigd_lb=")),
        "no balancer cookie in database mode",
    );
    let cookie = cookie.join("; ");
    for n in nodes {
        let r = n
            .client()
            .request("GET", "/runs", &[("Cookie", &cookie)], b"");
        r.check_eq(r.status, 200, &format!("the session on {}", n.name));
    }

    // 5 failed sign-ins for alice spread over the instances: the 6th
    // attempt, on any of them, is throttled.
    for i in 0..5 {
        let r = nodes[i % 3].client().request(
            "POST",
            "/login",
            &[("Content-Type", "application/x-www-form-urlencoded")],
            b"username=alice&password=wrong",
        );
        r.check_eq(r.status, 401, "a wrong password");
    }
    for n in nodes {
        let r = n.client().request(
            "POST",
            "/login",
            &[("Content-Type", "application/x-www-form-urlencoded")],
            b"username=alice&password=alice-pw",
        );
        r.err(429, "rate_limited");
    }

    // The limited key: 6 a minute across the cluster.
    let url = format!("/api?api_key={KEY_LIMITED}&program_id=1&function=quick");
    for i in 0..6 {
        let r = nodes[i % 3].client().post(&url);
        r.check_eq(r.status, 200, "within the key's limit");
    }
    for n in nodes {
        n.client().post(&url).err(429, "rate_limited");
    }
}

/// Check 3: t2 accepts four slow runs and is killed: the survivors
/// answer for all four at once; those t2 was executing at the kill end
/// `interrupted` once its lease lapses, every other one (queued on t2, or
/// taken from the cluster queue by t1 or t3 meanwhile) finishes elsewhere.
/// Which instance executes which run is the cluster queue's choice (on a
/// loaded machine t1 and t3 may take all four first), so a batch is
/// accepted again until the database shows t2 executing one of its own,
/// and the runs t2 executed are read from the database right after the
/// kill (nothing of t2's can change them until its lease lapses).
fn a_dead_instances_runs_are_answered_and_its_queue_runs_elsewhere(
    hx: &Haproxy,
    lb: &Client,
    nodes: &mut [Node],
    db: &PgDb,
) {
    let ids = slow_runs_t2_executes(lb, &nodes[1], db);
    nodes[1].kill9();
    let on_t2 = db.count(&format!(
        "SELECT count(*) FROM trigd_runs WHERE instance = 't2' AND state = 'running' AND id IN ({})",
        sql_list(&ids)
    ));
    let on_t2 = usize::try_from(on_t2).unwrap_or(0);
    assert!(on_t2 >= 1, "t2 executed at least one of its own runs");
    for id in &ids {
        let r = lb.get(&run_url(id));
        r.check_eq(&r.ok()["Run"], &json!(id), "a dead instance's run");
    }
    hx.wait_status("t2", "DOWN", PG_WAIT);
    let took = Instant::now();
    let states = wait_terminal(lb, &ids);
    eprintln!("t2's runs after kill -9 ({:?}): {states:?}", took.elapsed());
    let mut s: Vec<&str> = states.values().map(|s| s.as_str()).collect();
    s.sort();
    let mut want = vec!["finished"; 4 - on_t2];
    want.extend(vec!["interrupted"; on_t2]);
    assert_eq!(
        s, want,
        "the {on_t2} running on t2 at the kill: interrupted; the others: run elsewhere"
    );
    nodes[1].start();
    hx.wait_status("t2", "UP", WAIT);
}

/// `'a','b'` for an SQL `IN (…)` of run ids.
fn sql_list(ids: &[String]) -> String {
    ids.iter()
        .map(|i| format!("'{i}'"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Four slow runs accepted by t2, at least one of which t2 itself is
/// executing (per the database): up to five batches, each waited for to
/// end before the next when t1 and t3 took all of it.
fn slow_runs_t2_executes(lb: &Client, t2: &Node, db: &PgDb) -> Vec<String> {
    for _ in 0..5 {
        let ids = accept_slow(&t2.client(), 4);
        let own = format!(
            "SELECT count(*) FROM trigd_runs WHERE instance = 't2' AND state = 'running' AND id IN ({})",
            sql_list(&ids)
        );
        // Not the whole WAIT: a batch t1 and t3 took is tried again.
        if wait_until(Duration::from_secs(15), || db.count(&own) >= 1) {
            return ids;
        }
        wait_terminal(lb, &ids);
    }
    panic!("in five batches of four, t2 never executed one of its own runs");
}

/// kill -9 of t3 while clients start runs through the balancer: every run
/// that was accepted reaches an end (queued ones run elsewhere), nothing
/// sent after HAProxy marked t3 down fails.
fn kill9_under_load_loses_no_accepted_run(hx: &Haproxy, lb: &Client, nodes: &mut [Node]) {
    let load = Load::start(lb, 3);
    load.wait_accepted(15, "before the kill");
    nodes[2].kill9();
    hx.wait_status("t3", "DOWN", PG_WAIT);
    let down = Instant::now();
    load.wait_accepted(15, "after t3 was marked down");
    let seen = load.finish();
    let late: Vec<_> = seen.failed.iter().filter(|(t, _)| *t > down).collect();
    assert!(
        late.is_empty(),
        "requests after t3 was down failed: {late:?}"
    );
    let states = wait_terminal(lb, &seen.accepted);
    let lost: Vec<_> = states
        .iter()
        .filter(|(_, s)| *s != "finished" && *s != "interrupted")
        .collect();
    assert!(lost.is_empty(), "accepted runs after kill -9: {lost:?}");
    eprintln!(
        "kill -9 under load: {} accepted, {} interrupted, {} failed around the kill",
        states.len(),
        states.values().filter(|s| *s == "interrupted").count(),
        seen.failed.len()
    );
    nodes[2].start();
    hx.wait_status("t3", "UP", WAIT);
}

// ---------------------------------------------------------------------------
// PostgreSQL stopped and started under load

/// What the clients saw while PostgreSQL went away and came back.
#[derive(Default)]
struct Outage {
    accepted: Vec<String>,
    unavailable: usize,
    /// Anything else: a connection failure, a 5xx other than 503
    /// `state_unavailable`, a 503 without `Retry-After`.
    bad: Vec<String>,
    slowest: Duration,
}

/// The lock of `seen`, also after a panicking holder (a failed assertion
/// that printed it).
fn lock(seen: &Mutex<Outage>) -> std::sync::MutexGuard<'_, Outage> {
    seen.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sets the flag when dropped: the clients stop when the test fails too.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

fn outage_client(c: Client, stop: Arc<AtomicBool>, seen: Arc<Mutex<Outage>>) {
    while !stop.load(Ordering::SeqCst) {
        let sent = Instant::now();
        let r = c.try_request("POST", &async_url("quick"), &[], b"");
        let took = sent.elapsed();
        let mut s = lock(&seen);
        s.slowest = s.slowest.max(took);
        match r {
            Ok(r) if r.status == 200 => {
                let id = r.json()["Run"].as_str().unwrap_or("").to_string();
                s.accepted.push(id);
            }
            Ok(r)
                if r.status == 503
                    && r.json()["Code"] == json!("state_unavailable")
                    && r.header("Retry-After")
                        .is_some_and(|v| v.parse::<u32>().is_ok_and(|n| n > 0)) =>
            {
                s.unavailable += 1
            }
            Ok(r) => s.bad.push(format!("{} {}", r.status, r.text())),
            Err(e) => s.bad.push(e),
        }
        drop(s);
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
#[ignore = "needs PostgreSQL: cargo test -- --include-ignored (as .ci/run does)"]
fn postgresql_stopped_and_started_under_load_loses_nothing() {
    let pg = Pg::start("outage");
    let db = pg.database("outage");
    let root = TestDir::new("pg_outage");
    let count = root.path("count");
    let nodes: Vec<Node> = ["o1", "o2"]
        .iter()
        .map(|n| Node::with_config(&root, n, "", |dir| db_tail(&db, &count, dir)))
        .collect();
    let mut nodes = nodes;
    // Runs executing when the database goes: they finish, their ends are
    // recorded when it is back.
    let long = format!("/api?api_key={KEY}&program_id=1&function=slow&run_async=true");
    let executing: Vec<String> = nodes
        .iter()
        .map(|n| {
            let r = n.client().post(&long);
            r.run_id(&r.ok())
        })
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Outage::default()));
    let _stop_clients = StopOnDrop(Arc::clone(&stop));
    let clients: Vec<_> = nodes
        .iter()
        .flat_map(|n| [n.client(), n.client()])
        .map(|c| {
            let (stop, seen) = (Arc::clone(&stop), Arc::clone(&seen));
            thread::spawn(move || outage_client(c, stop, seen))
        })
        .collect();
    let accepted = || lock(&seen).accepted.len();
    assert!(wait_until(PG_WAIT, || accepted() >= 10), "runs before");
    pg.stop(false);
    let unavailable = || lock(&seen).unavailable;
    assert!(
        wait_until(PG_WAIT, || unavailable() >= 6),
        "503 state_unavailable while PostgreSQL is down; bad: {:?}",
        lock(&seen).bad
    );
    // Each instance learns it at its next use of the database (a failed
    // one), or by a ping once none came for a second.
    for n in &nodes {
        let c = n.client();
        assert!(
            wait_until(PG_WAIT, || c.get("/healthz").status == 503),
            "{} not ready while the database is down",
            n.name
        );
    }
    pg.start_again();
    let after = accepted() + 10;
    assert!(
        wait_until(PG_WAIT, || accepted() >= after),
        "runs accepted again once PostgreSQL is back"
    );
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.join().unwrap();
    }
    let seen = std::mem::take(&mut *lock(&seen));
    // On a failure, the database's side of the runs not finished (which
    // instance holds them) goes with it.
    let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        nothing_lost_after_the_outage(&mut nodes, &seen, &executing)
    }));
    if let Err(e) = checked {
        eprintln!(
            "runs not finished in the database (id|state|instance|seq|cancel_requested):\n{}",
            db.psql(
                "SELECT id, state, coalesce(instance, '-'), seq, cancel_requested \
                 FROM trigd_runs WHERE state <> 'finished' ORDER BY seq"
            )
        );
        std::panic::resume_unwind(e);
    }
}

/// After the outage: every answer was 200 or 503 `state_unavailable`
/// within the bound, no instance crashed, every acknowledged run and every
/// run executing during the outage finished with its end recorded.
fn nothing_lost_after_the_outage(nodes: &mut [Node], seen: &Outage, executing: &[String]) {
    eprintln!(
        "PostgreSQL outage: {} accepted, {} answered 503 state_unavailable, slowest answer {:?}",
        seen.accepted.len(),
        seen.unavailable,
        seen.slowest
    );
    assert!(seen.bad.is_empty(), "other answers: {:?}", seen.bad);
    assert!(
        seen.slowest < Duration::from_secs(20),
        "no request hangs past the bound: {:?}",
        seen.slowest
    );
    for n in nodes.iter_mut() {
        assert!(n.running(), "{} did not crash", n.name);
    }
    let c = nodes[0].client();
    let states = wait_terminal(&c, &seen.accepted);
    let lost: Vec<_> = states.iter().filter(|(_, s)| *s != "finished").collect();
    assert!(lost.is_empty(), "acknowledged runs: {lost:?}");
    let states = wait_terminal(&c, executing);
    assert!(
        states.values().all(|s| s == "finished"),
        "runs executing during the outage finished, ends recorded: {states:?}"
    );
    for id in executing {
        let v = c.get(&run_url(id)).ok();
        assert!(v["FinishedAt"].is_string(), "{id}'s end recorded: {v}");
    }
}

// ---------------------------------------------------------------------------
// Database round trips of a sync run

/// `trigd_state_db_round_trips_total` from `/metrics`.
fn round_trips(t: &Trigd) -> Option<u64> {
    let text = t.get("/metrics").text();
    text.lines()
        .find_map(|l| l.strip_prefix("trigd_state_db_round_trips_total "))
        .and_then(|v| v.trim().parse().ok())
}

/// One instance on database `name` with `server` settings and `program`
/// as its program 1, for counting round trips: a lease of an hour, so that
/// no heartbeat lands between two readings of the counter.
fn counted_instance(name: &str, server: &str, program: &str) -> (PgDb, TestDir, Trigd) {
    let db = pg_database(name);
    let dir = setup(&format!("pg_{name}"), server, &[]);
    dir.write("programs/w.toml", program);
    db.configure(&dir, "lease = \"1h\"");
    let t = Trigd::start(&dir);
    (db, dir, t)
}

#[test]
#[ignore = "needs PostgreSQL: cargo test -- --include-ignored (as .ci/run does)"]
fn a_sync_run_takes_at_most_3_database_round_trips() {
    let program = "id = 1\nname = \"w\"\nworkspace = \"ops\"\n\n[[functions]]\nname = \"quick\"\n\
         steps = [{ shell = \"true\" }]\n[functions.webhook]\n";
    let (db, _dir, t) = counted_instance("round_trips", "", program);
    let url = format!("/api?api_key={KEY}&program_id=1&function=quick");
    // Warm the pool. The instance's background work (lease, queue and
    // cancel polls) goes through the same counter now and then; it only
    // adds. The fewest round trips seen over ten runs is the sync path's
    // own count.
    t.post(&url).ok();
    let mut id = String::new();
    let mut deltas = Vec::new();
    for _ in 0..10 {
        let before = round_trips(&t).unwrap_or_else(|| {
            t.fail("no trigd_state_db_round_trips_total in /metrics with [state] url")
        });
        let r = t.post(&url);
        id = r.run_id(&r.ok());
        // /metrics itself reads no database state.
        deltas.push(round_trips(&t).unwrap_or(before) - before);
    }
    let least = deltas.iter().copied().min().unwrap_or(0);
    let measured = ("trigd_state_db_round_trips_total", least);
    eprintln!("round trips of 10 sync runs: {deltas:?}");
    eprintln!("a sync run: {} = {}", measured.0, measured.1);
    // Not vacuous: the run went through the database.
    let kept = db.count(&format!(
        "SELECT count(*) FROM trigd_runs WHERE id = '{id}' AND state = 'finished'"
    ));
    t.check(
        kept == 1,
        format!("run {id} is recorded finished in trigd_runs"),
    );
    t.check(measured.1 >= 1, "the counter counts the run's round trips");
    let sent = db
        .try_psql(
            "SELECT calls || ' x ' || left(regexp_replace(query, '\\s+', ' ', 'g'), 160) \
             FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_statements%' \
             ORDER BY calls DESC",
        )
        .unwrap_or_else(|e| format!("(pg_stat_statements: {e})"));
    eprintln!("statements of the database since the first run:\n{sent}");
    t.check(
        measured.1 <= 3,
        format!(
            "a sync run took {} database round trips ({}); statements sent meanwhile:\n{sent}",
            measured.1, measured.0
        ),
    );
}

/// A program that takes ~40 ms, on one slot: of two sync calls at once,
/// one waits in the queue for the other.
const QUEUED_PROGRAM: &str = "id = 1\nname = \"w\"\nworkspace = \"ops\"\n\n[[functions]]\n\
    name = \"short\"\nsteps = [{ shell = \"sleep 0.04\" }]\n[functions.webhook]\n";

/// A sync call that waits a few ms for a slot writes its row once, with
/// its end, as one that finds a slot free: its `queued` state is deferred
/// like its `running` one (`state::pg::deferred`). Written at once, the
/// two calls of a pair cost 4 writes (the waiting one's `queued` and
/// `running`, then both ends) instead of 2.
#[test]
#[ignore = "needs PostgreSQL: cargo test -- --include-ignored (as .ci/run does)"]
fn a_sync_run_that_waits_briefly_for_a_slot_is_written_once() {
    let (db, _dir, t) = counted_instance("queued_once", "max_concurrent_runs = 1", QUEUED_PROGRAM);
    let url = format!("/api?api_key={KEY}&program_id=1&function=short");
    // Warm the pool. The background work (queue and cancel polls) only
    // adds: the fewest round trips over ten pairs is the pair's own count.
    t.post(&url).ok();
    let mut deltas = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..10 {
        let before = round_trips(&t).unwrap_or_else(|| t.fail("no round trip counter"));
        let pair: Vec<Reply> = thread::scope(|s| {
            let hs: Vec<_> = (0..2).map(|_| s.spawn(|| t.post(&url))).collect();
            hs.into_iter().map(|h| h.join().expect("call")).collect()
        });
        for r in &pair {
            ids.push(r.run_id(&r.ok()));
        }
        deltas.push(round_trips(&t).unwrap_or(before) - before);
    }
    eprintln!("round trips of 10 pairs of sync runs on one slot: {deltas:?}");
    let least = deltas.iter().copied().min().unwrap_or(0);
    let finished = db.count(&format!(
        "SELECT count(*) FROM trigd_runs WHERE state = 'finished' AND id IN ('{}')",
        ids.join("','")
    ));
    t.check_eq(finished, 20, "every run of the pairs recorded finished");
    t.check(least >= 1, "the counter counts the runs' writes");
    t.check(
        least <= 2,
        format!("a pair of sync runs, one waiting for the other's slot, took {least} round trips (at most 2: one write a run)"),
    );
}

/// A sync call that waits longer than `DEFER` for a slot is in the
/// database as `queued` while it waits (listed by every instance), and
/// then runs.
#[test]
#[ignore = "needs PostgreSQL: cargo test -- --include-ignored (as .ci/run does)"]
fn a_sync_run_waiting_longer_for_a_slot_is_listed_queued() {
    let db = pg_database("queued_listed");
    let dir = setup("pg_queued_listed", "max_concurrent_runs = 1", &[]);
    dir.write(
        "programs/w.toml",
        &QUEUED_PROGRAM.replace("sleep 0.04", "sleep 2"),
    );
    db.configure(&dir, "");
    let t = Trigd::start(&dir);
    let url = format!("/api?api_key={KEY}&program_id=1&function=short");
    let queued = "SELECT count(*) FROM trigd_runs WHERE state = 'queued'";
    let replies: Vec<Reply> = thread::scope(|s| {
        let first = s.spawn(|| t.post(&url));
        let running = "SELECT count(*) FROM trigd_runs WHERE state = 'running'";
        t.wait_for(WAIT, "the first run recorded running", || {
            db.count(running) == 1
        });
        let second = s.spawn(|| t.post(&url));
        t.wait_for(WAIT, "the waiting run in the database as queued", || {
            db.count(queued) == 1
        });
        vec![first.join().expect("first"), second.join().expect("second")]
    });
    for r in &replies {
        r.ok();
    }
    t.check_eq(db.count(queued), 0, "no run left queued");
}
