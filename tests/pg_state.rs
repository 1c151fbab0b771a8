//! The PostgreSQL backend's foundation and run records (`[state] url`),
//! on the real binary against the harness's PostgreSQL: config errors,
//! migrations (once, refused when newer), runs and idempotency keys seen
//! by every instance, the round trips of a run, and the database down.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::util::*;

/// Quick sync functions (`quick` prints, `true` does not), `held` ends
/// once its instance's `work/go` exists (at most 60 s), `stamp` writes
/// the time it started to `work/started`, and `arg`.
const PROG: &str = r#"
id = 1
name = "p"

[[functions]]
name = "quick"
command = ["sh", "-c", "echo '{\"ok\":1}'"]
output = "json"
webhook = { active = true, outputs = [] }

[[functions]]
name = "true"
command = ["true"]
webhook = { active = true, outputs = [] }

[[functions]]
name = "held"
steps = [{ shell = "i=0; while [ ! -e ../work/go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done" }]
webhook = { active = true, outputs = [] }

[[functions]]
name = "stamp"
steps = [{ shell = "mkdir -p ../work && date +%s.%N > ../work/started" }]
webhook = { active = true, outputs = [] }

[[functions]]
name = "arg"
command = ["sh", "-c", "echo \"[\\\"$1\\\"]\"", "sh", "{v}"]
output = "json"
webhook = { active = true, outputs = ["v"] }
"#;

/// An instance named `name` on database `db`, its own state dir.
fn instance(test: &str, name: &str, db: &PgDb) -> (TestDir, Trigd) {
    let dir = setup(
        &format!("{test}_{name}"),
        &format!("instance = {name:?}"),
        &[("p.toml", PROG)],
    );
    db.configure(&dir, "");
    let t = Trigd::start(&dir);
    (dir, t)
}

fn quick() -> String {
    format!("/api?api_key={KEY}&program_id=1&function=quick")
}

/// `trigd_state_db_round_trips_total` of `t`.
fn round_trips(t: &Trigd) -> u64 {
    let r = t.get("/metrics");
    r.text()
        .lines()
        .find_map(|l| l.strip_prefix("trigd_state_db_round_trips_total "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| r.fail("no trigd_state_db_round_trips_total in /metrics"))
}

#[test]
fn every_instance_answers_for_every_run_and_never_421() {
    let db = pg_database("pg_every");
    let (_a_dir, a) = instance("pg_every", "alpha", &db);
    let (_b_dir, b) = instance("pg_every", "beta", &db);
    let r = a.post(&quick());
    let id = r.run_id(&r.ok());
    let r = b.get(&format!("/api/runs/{id}?api_key={KEY}"));
    let v = r.ok();
    r.check_eq(&v["Run"], &json!(id), "beta serves alpha's run");
    r.check_eq(&v["State"], &json!("finished"), "its state");
    r.check_eq(&v["Result"], &json!([{"ok": 1}]), "its Result");
    // An unknown id naming another instance: 404, not 421.
    let hex = "0123456789abcdef0123456789abcdef";
    b.get(&format!("/api/runs/alpha-{hex}?api_key={KEY}"))
        .err(404, "run_not_found");
    // An async run accepted by beta, read from alpha once ended.
    let r = b.post(&format!("{}&run_async=1", quick()));
    let id2 = r.run_id(&r.ok());
    a.wait_for(PG_WAIT, "beta's async run ends", || {
        a.get(&format!("/api/runs/{id2}?api_key={KEY}")).json()["State"] == json!("finished")
    });
    assert_eq!(db.count("SELECT count(*) FROM trigd_runs"), 2);
    assert_eq!(
        db.psql(&format!(
            "SELECT instance FROM trigd_runs WHERE id = '{id}'"
        )),
        "alpha"
    );
}

#[test]
fn an_idempotency_key_retried_on_another_instance_replays_the_first_run() {
    let db = pg_database("pg_idem");
    let (_a_dir, a) = instance("pg_idem", "alpha", &db);
    let (_b_dir, b) = instance("pg_idem", "beta", &db);
    let url = format!("/api?api_key={KEY}&program_id=1&function=arg&variables=x");
    let key = [("Idempotency-Key", "order-7")];
    let first = a.request("POST", &url, &key, b"");
    let id = first.run_id(&first.ok());
    for t in [&b, &a, &b] {
        let r = t.request("POST", &url, &key, b"");
        let v = r.ok();
        r.check_eq(&v["Run"], &json!(id), "the first run's id");
        r.check_eq(&v["Result"], &json!([["x"]]), "the first run's Result");
        r.check(
            r.header("idempotent-replayed") == Some("true"),
            "marked replayed",
        );
    }
    // Async: the same, answered with the run's id and state.
    let async_url = format!("{url}&run_async=1");
    let key2 = [("Idempotency-Key", "order-8")];
    let r = b.request("POST", &async_url, &key2, b"");
    let id2 = r.run_id(&r.ok());
    let r = a.request("POST", &async_url, &key2, b"");
    r.check_eq(
        &r.ok()["Run"],
        &json!(id2),
        "async repeat on the other instance",
    );
    // The same key with other values: refused on either instance.
    let other = format!("/api?api_key={KEY}&program_id=1&function=arg&variables=y");
    b.request("POST", &other, &key, b"")
        .err(422, "idempotency_key_reused");
    assert_eq!(
        db.count("SELECT count(*) FROM trigd_runs"),
        2,
        "two runs, not seven"
    );
    assert_eq!(db.count("SELECT count(*) FROM trigd_idempotency"), 2);
    // The keys are rows of the database: /healthz does not count them
    // (null), rather than say 0.
    let h = a.get("/healthz");
    h.check_eq(
        &h.json()["IdempotencyKeys"],
        &json!(null),
        "IdempotencyKeys",
    );
}

/// The same key sent to two instances at once, many times: one run per key.
#[test]
fn concurrent_retries_on_two_instances_start_one_run_per_key() {
    let db = pg_database("pg_idem_race");
    let (_a_dir, a) = instance("pg_race", "alpha", &db);
    let (_b_dir, b) = instance("pg_race", "beta", &db);
    let (ca, cb) = (a.client(), b.client());
    let url = format!("/api?api_key={KEY}&program_id=1&function=arg&variables=x&run_async=1");
    let mut handles = Vec::new();
    for k in 0..10 {
        for c in [ca.clone(), cb.clone(), ca.clone(), cb.clone()] {
            let url = url.clone();
            handles.push(thread::spawn(move || {
                let key = format!("race-{k}");
                let r = c.request("POST", &url, &[("Idempotency-Key", &key)], b"");
                let v = r.ok();
                (key, r.run_id(&v))
            }));
        }
    }
    let mut by_key = std::collections::BTreeMap::<String, Vec<String>>::new();
    for h in handles {
        let (k, id) = h.join().expect("request thread");
        by_key.entry(k).or_default().push(id);
    }
    for (k, ids) in &by_key {
        assert!(
            ids.iter().all(|i| i == &ids[0]),
            "{k}: one run id, got {ids:?}"
        );
    }
    assert_eq!(db.count("SELECT count(*) FROM trigd_runs"), 10);
}

#[test]
fn a_sync_run_costs_two_round_trips_and_async_accepts_share_them() {
    let db = pg_database("pg_trips");
    let (_dir, t) = instance("pg_trips", "alpha", &db);
    t.post(&quick()).ok(); // connections open, plans warm
    let before = round_trips(&t);
    let server_before = db.statement_calls();
    let r = t.post(&quick());
    r.ok();
    let sync = round_trips(&t) - before; // /metrics itself sends none
    r.check(
        sync <= 3,
        format!("a sync run took {sync} round trips (at most 3)"),
    );
    // The server saw them (pg_stat_statements, when installed; the first
    // count's own statement is counted too). Not an equality: the
    // instance's background work (lease and queue polls, the key
    // watcher's pings on its own connection) lands in the same window.
    if let (Some(a), Some(b)) = (server_before, db.statement_calls()) {
        let statements = b - a - 1;
        r.check(
            statements >= i64::try_from(sync).unwrap(),
            format!("pg_stat_statements saw {statements} statements, trigd counted {sync}"),
        );
    }
    // Alone, without a claim, a short run that prints nothing writes its
    // row once, with its end (its `running` is deferred), with the one-row
    // upsert, not the batched one (a count, when installed).
    let one_row = || {
        db.try_psql(
            "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements \
             WHERE query LIKE '%INSERT INTO trigd_runs AS r%' AND query NOT LIKE '%unnest%'",
        )
        .ok()
        .and_then(|n| n.parse::<i64>().ok())
    };
    if let Some(a) = one_row() {
        t.post(&format!("/api?api_key={KEY}&program_id=1&function=true"))
            .ok();
        let b = one_row().unwrap_or(a);
        assert_eq!(b - a, 1, "one-row upserts for a lone sync /bin/true run");
    }
    let key = [("Idempotency-Key", "trips-1")];
    let before = round_trips(&t);
    t.request("POST", &quick(), &key, b"").ok();
    let with_key = round_trips(&t) - before;
    assert!(
        with_key <= 3,
        "with Idempotency-Key: {with_key} round trips"
    );

    // 64 concurrent async accepts of a program that waits: their records
    // share statements.
    let c = Arc::new(t.client());
    let before = round_trips(&t);
    let url = format!("/api?api_key={KEY}&program_id=1&function=quick&run_async=1");
    let handles: Vec<_> = (0..64)
        .map(|_| {
            let (c, url) = (Arc::clone(&c), url.clone());
            thread::spawn(move || c.post(&url).ok())
        })
        .collect();
    for h in handles {
        h.join().expect("accept thread");
    }
    // The sync runs above (the one-row check's only when it counted).
    let sync_runs = if one_row().is_some() { 4 } else { 3 };
    let ended = wait_until(PG_WAIT, || {
        db.count("SELECT count(*) FROM trigd_runs WHERE state = 'finished'") == sync_runs + 64
    });
    if !ended {
        t.fail(format!(
            "timed out after {PG_WAIT:?} waiting for the 64 runs to end; runs by state/instance: {}",
            db.runs_by_state()
        ));
    }
    let used = round_trips(&t) - before;
    // Unbatched: 5 statements per run = 320: 3 writes (accepted, running,
    // ended), taking it from the cluster queue and the final copy of its
    // output (both per run, counted). Batched writes share statements
    // (243 measured on a loaded 2-core machine).
    assert!(
        used < 320,
        "64 async runs took {used} round trips: not batched"
    );
    eprintln!("sync run: {sync} round trips; with a key: {with_key}; 64 async runs: {used}");
}

#[test]
fn config_errors_of_state_are_located() {
    let dir = setup("pg_config", "", &[]);
    let cases = [
        (
            "[state]\nurl = \"postgres://u:secret@localhost/db\"\n",
            "state.url: the URL holds a password",
        ),
        (
            // Not a URL at all, a password in it: named, never echoed.
            "[state]\nurl = \"postgres://u:secret@localhost:99999/db\"\n",
            "state.url: not a URL (invalid port number)",
        ),
        (
            "[state]\nurl = \"postgres://u@localhost/db?password=secret\"\n",
            "state.url: the URL holds a password (password=",
        ),
        (
            "[state]\nurl = \"postgres://u@localhost/db?sslmode=maybe\"\n",
            "state.url: sslmode=maybe is not supported",
        ),
        (
            "[state]\nurl = \"mysql://u@localhost/db\"\n",
            "state.url: the scheme must be postgres://",
        ),
        (
            "[state]\nurl = \"postgres://u@localhost/db\"\npassword_env = \"X\"\npassword_file = \"f\"\n",
            "state.password_env: set password_env or password_file, not both",
        ),
        (
            "[state]\nurl = \"postgres://u@localhost/db\"\npassword_env = \"TRIGD_TEST_UNSET_VAR\"\n",
            "state.password_env: environment variable TRIGD_TEST_UNSET_VAR is not set",
        ),
        (
            "[state]\nurl = \"postgres://u@localhost/db\"\npassword_file = \"credential:db\"\n",
            "state.password_file: credential:db names a systemd credential",
        ),
        ("[state]\npassword_env = \"X\"\n", "state.password_env: password_env needs url"),
        (
            "[state]\nurl = \"postgres://u@localhost/db\"\npool = 0\n",
            "state.pool: must be at least 1",
        ),
        (
            "[state]\nurl = \"postgres://u@localhost/db?sslmode=verify-full&sslmode=disable\"\n",
            "state.url: sslmode is given twice: give it once",
        ),
        (
            "[state]\nurl = \"postgres://u@localhost/db?connect_timeout=3&connect_timeout=4\"\n",
            "state.url: connect_timeout is given twice",
        ),
        (
            "[state]\nurl = \"postgres://u@localhost/db\"\nlease = \"1ms\"\n",
            "state.lease: the lease must be at least 1s",
        ),
        (
            "[state]\nurl = \"postgres://u@localhost/db\"\nlease = \"999ms\"\n",
            "state.lease: the lease must be at least 1s",
        ),
    ];
    let base = config("");
    for (table, want) in cases {
        dir.write("config.toml", &format!("{base}\n{table}"));
        let out = trigd(
            &[
                "check",
                "--config",
                dir.path("config.toml").to_str().unwrap(),
            ],
            None,
        );
        out.check(out.code == Some(1), "refused");
        out.check(out.stderr.contains(want), format!("names {want:?}"));
        out.check(out.stderr.contains("config.toml:"), "located");
        out.check(
            !out.stderr.contains("secret"),
            "the password is never shown",
        );
    }
}

/// The runs of `t` listed in state `state` through `other`'s run list.
fn listed(other: &Trigd, state: &str) -> Vec<String> {
    other
        .get(&format!("/api/runs?api_key={KEY}&state={state}"))
        .json()["Runs"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|r| r["Run"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_long_sync_run_is_listed_running_on_another_instance_within_the_bound() {
    let db = pg_database("pg_deferred");
    let (a_dir, a) = instance("pg_deferred", "alpha", &db);
    let (_b_dir, b) = instance("pg_deferred", "beta", &db);
    let c = a.client();
    let url = format!("/api?api_key={KEY}&program_id=1&function=held");
    let call = thread::spawn(move || c.post(&url));
    // The `running` of a sync run is deferred by 0.1 s and written at the
    // lease thread's next tick: listed within 0.3 s; 30 s is the bound
    // for a loaded machine.
    let mut running = Vec::new();
    let seen = wait_until(PG_WAIT, || {
        running = listed(&b, "running");
        !running.is_empty()
    });
    assert!(seen, "the held sync run is not listed running on beta");
    assert_eq!(running.len(), 1, "{running:?}");
    a_dir.write("work/go", "");
    let r = call.join().expect("call thread");
    r.ok();
    // Its end is written over the deferred `running`, never under it.
    let id = running[0].clone();
    let ended = wait_until(PG_WAIT, || {
        b.get(&format!("/api/runs/{id}?api_key={KEY}")).json()["State"] == "finished"
    });
    assert!(ended, "run {id} not finished: {}", db.runs_by_state());
    assert!(listed(&b, "running").is_empty());
}

#[test]
fn a_sync_run_with_an_idempotency_key_is_written_before_it_runs() {
    let db = pg_database("pg_idem_first");
    let (a_dir, a) = instance("pg_idem_first", "alpha", &db);
    let url = format!("/api?api_key={KEY}&program_id=1&function=stamp");
    let key = [("Idempotency-Key", "first-1")];
    a.request("POST", &url, &key, b"").ok();
    // The claim is committed with the run's `running` row before the
    // process starts (a deferred write would start its transaction at
    // least 0.1 s after): the claim's transaction began before the
    // process wrote the time it started.
    let started: f64 = a_dir
        .read("work/started")
        .trim()
        .parse()
        .expect("the start time the process wrote");
    let claimed: f64 = db
        .psql("SELECT extract(epoch FROM created_at) FROM trigd_idempotency")
        .trim()
        .parse()
        .expect("the claim's time");
    assert!(
        claimed < started,
        "claim written at {claimed}, after the process started at {started}"
    );
}

#[test]
fn instances_starting_at_once_migrate_once_and_a_newer_schema_is_refused() {
    let db = pg_database("pg_migrate");
    let dirs: Vec<TestDir> = ["m1", "m2", "m3"]
        .iter()
        .map(|n| {
            let d = setup(
                &format!("pg_migrate_{n}"),
                &format!("instance = {n:?}"),
                &[],
            );
            db.configure(&d, "");
            d
        })
        .collect();
    let started: Vec<Trigd> = thread::scope(|s| {
        let hs: Vec<_> = dirs.iter().map(|d| s.spawn(|| Trigd::start(d))).collect();
        hs.into_iter().map(|h| h.join().expect("start")).collect()
    });
    for t in &started {
        t.get("/healthz").ok();
    }
    at_the_latest_version(&db);
    drop(started);
    db.psql("INSERT INTO trigd_schema (version, by_trigd) VALUES (99, 'future')");
    let child = std::process::Command::new(BIN)
        .args([
            "serve",
            "--config",
            dirs[0].path("config.toml").to_str().unwrap(),
        ])
        .args(["--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn trigd");
    let done = wait_bounded(child, "trigd serve");
    assert!(!done.status.success(), "refuses to start");
    let out = String::from_utf8_lossy(&done.stderr);
    assert!(
        out.contains("version 99") && out.contains("version 5"),
        "names both versions: {out}"
    );
}

/// The indexes of `trigd_runs` in `db`, by name, with their columns.
fn run_indexes(db: &PgDb) -> String {
    db.psql(
        "SELECT string_agg(indexname || ' ' || regexp_replace(indexdef, '^.* USING btree ', ''), \
         E'\n' ORDER BY indexname) FROM pg_indexes WHERE tablename = 'trigd_runs'",
    )
}

#[test]
fn a_version_2_database_is_migrated_to_fewer_run_indexes_and_keeps_its_runs() {
    // The schema as a trigd of migration 2 left it, holding an ended run.
    let old = pg_database("pg_mig3_old");
    old.psql(&old_schema(2));
    let id = "gone-0123456789abcdef0123456789abcdef";
    let rec = json!({
        "Run": id, "By": "api_key:all", "Async": false, "Owner": "program",
        "State": "finished", "Program": 1, "Function": "quick", "Result": [{"ok": 1}],
        "Steps": [{"Kind": "command", "ExitCode": 0, "DurationMs": 1,
                   "StdoutTruncated": false, "StderrTruncated": false}],
        "CreatedAt": "2026-01-02T03:04:05.006Z", "StartedAt": "2026-01-02T03:04:05.006Z",
        "FinishedAt": "2026-01-02T03:04:05.016Z", "RerunInput": {"Values": []}
    });
    old.psql(&format!(
        "INSERT INTO trigd_runs (id, state, program, function, owner, origin, instance, \
         created_at, ended_at, record) VALUES ('{id}', 'finished', '1', 'quick', '1', \
         'api_key:all', 'gone', '2026-01-02T03:04:05.006Z', '2026-01-02T03:04:05.016Z', '{rec}')"
    ));
    let before = run_indexes(&old);
    let (_dir, t) = instance("pg_mig3", "alpha", &old);
    at_the_latest_version(&old);
    // Its run is still served, and new runs are recorded.
    let r = t.get(&format!("/api/runs/{id}?api_key={KEY}"));
    r.check_eq(
        &r.ok()["Result"],
        &json!([{"ok": 1}]),
        "the run recorded before",
    );
    a_new_run_finishes(&t);
    // The indexes no query used are gone; the trim's index is on seq; a new
    // database gets the same set.
    let after = run_indexes(&old);
    assert_gone(
        &before,
        &after,
        &[
            "trigd_runs_queue ",
            "trigd_runs_created ",
            "trigd_runs_state ",
            "trigd_runs_owner ",
        ],
    );
    assert!(
        after.contains("trigd_runs_ended (seq) WHERE (ended_at IS NOT NULL)"),
        "{after}"
    );
    assert!(
        after.contains("trigd_runs_by_state (state, created_at DESC"),
        "{after}"
    );
    // Seven then, and migration 5 has two more (a key's queue, the runs
    // holding its places and the runs of any key in order, instead of all
    // of a key's runs).
    assert_eq!(after.lines().count(), 9, "{after}");
    let fresh = pg_database("pg_mig3_new");
    let (_dir2, _t2) = instance("pg_mig3", "beta", &fresh);
    assert_eq!(
        run_indexes(&fresh),
        after,
        "a new database and a migrated one"
    );
}

/// Migration 4 (`entries.sql`): a database of migration 3 loses the
/// unique index on `seq` and the index of the runs an instance holds, and
/// gets the cancel poll's; the runs it held stay served, a queued run
/// that a lapsed instance had taken runs (adopted through the other
/// indexes), and new runs are recorded.
#[test]
fn a_version_3_database_is_migrated_to_fewer_index_entries_a_write() {
    let old = pg_database("pg_mig4_old");
    old.psql(&old_schema(3));
    old.psql(
        "INSERT INTO trigd_instances (name, expires_at) VALUES ('gone', now() - interval '1 hour')",
    );
    // A run the lapsed instance `gone` took from the cluster queue.
    let id = "gone-00112233445566778899aabbccddeeff";
    queue_old_run(&old, id, "'gone'");
    let before = run_indexes(&old);
    let (_dir, t) = instance("pg_mig4", "alpha", &old);
    at_the_latest_version(&old);
    it_runs(&t, id, "the adopted run ran");
    a_new_run_finishes(&t);
    let after = run_indexes(&old);
    assert_gone(
        &before,
        &after,
        &["trigd_runs_seq_key ", "trigd_runs_instance "],
    );
    assert!(
        after.contains("trigd_runs_cancel (instance) WHERE cancel_requested"),
        "{after}"
    );
    let fresh = pg_database("pg_mig4_new");
    let (_dir2, _t2) = instance("pg_mig4", "beta", &fresh);
    assert_eq!(
        run_indexes(&fresh),
        after,
        "a new database and a migrated one"
    );
}

/// Migration 5 (`group_queues.sql`): a database of migration 4 trades
/// the index of a key's runs for one of its queue, one of the runs
/// holding its places and one of the runs of any key in order, and the
/// queue's index keeps to runs of no group; a run left in the cluster
/// queue before the upgrade is taken and runs, and new runs are recorded.
#[test]
fn a_version_4_database_is_migrated_to_the_indexes_of_each_keys_queue() {
    let old = pg_database("pg_mig5_old");
    old.psql(&old_schema(4));
    // An async run accepted before the upgrade, in the cluster queue.
    let id = "gone-00112233445566778899aabbccddeeff";
    queue_old_run(&old, id, "NULL");
    let before = run_indexes(&old);
    let (_dir, t) = instance("pg_mig5", "alpha", &old);
    at_the_latest_version(&old);
    it_runs(&t, id, "the queued run ran");
    a_new_run_finishes(&t);
    let after = run_indexes(&old);
    assert_gone(&before, &after, &["trigd_runs_group "]);
    for index in [
        "trigd_runs_group_free (group_key, seq) WHERE ((group_key IS NOT NULL) AND",
        "trigd_runs_group_held (group_key, seq) WHERE ((group_key IS NOT NULL) AND",
        "trigd_runs_free (seq) WHERE ((state = 'queued'::text) AND (instance IS NULL) AND (group_key IS NULL))",
        "trigd_runs_group_seq (seq) WHERE ((group_key IS NOT NULL) AND",
    ] {
        assert!(after.contains(index), "{index}: {after}");
    }
    let fresh = pg_database("pg_mig5_new");
    let (_dir2, _t2) = instance("pg_mig5", "beta", &fresh);
    assert_eq!(
        run_indexes(&fresh),
        after,
        "a new database and a migrated one"
    );
}

/// The schema as a trigd of migration `version` left it, `trigd_schema`
/// included.
fn old_schema(version: usize) -> String {
    let versions: Vec<String> = (1..=version).map(|v| format!("({v}, '0.old')")).collect();
    format!(
        "{}CREATE TABLE trigd_schema (version integer PRIMARY KEY, \
         applied_at timestamptz NOT NULL DEFAULT now(), by_trigd text NOT NULL);
         INSERT INTO trigd_schema (version, by_trigd) VALUES {};",
        schema_through(version),
        versions.join(", ")
    )
}

/// An async run `id` of function `quick` accepted by an older trigd,
/// `queued` in `db`, held by `instance` (SQL: `'gone'`, `NULL`).
fn queue_old_run(db: &PgDb, id: &str, instance: &str) {
    let rec = json!({
        "Run": id, "By": "api_key:all", "Async": true, "Owner": "program",
        "State": "queued", "Program": 1, "Function": "quick",
        "CreatedAt": "2026-01-02T03:04:05.006Z", "RerunInput": {"Values": []}
    });
    db.psql(&format!(
        "INSERT INTO trigd_runs (id, state, program, function, owner, origin, instance, \
         created_at, record) VALUES ('{id}', 'queued', '1', 'quick', '1', \
         'api_key:all', {instance}, '2026-01-02T03:04:05.006Z', '{rec}')"
    ));
}

/// Run `id` ends `finished` on `t` within [`PG_WAIT`].
fn it_runs(t: &Trigd, id: &str, what: &str) {
    let mut last = Value::Null;
    let ran = wait_until(PG_WAIT, || {
        last = t.get(&format!("/api/runs/{id}?api_key={KEY}")).ok();
        last["State"] == json!("finished")
    });
    assert!(ran, "{what}: {last}");
}

/// `db`'s schema has every migration this trigd knows.
fn at_the_latest_version(db: &PgDb) {
    assert_eq!(
        db.psql("SELECT string_agg(version::text, ',' ORDER BY version) FROM trigd_schema"),
        "1,2,3,4,5"
    );
}

/// A sync run on `t` is recorded `finished`.
fn a_new_run_finishes(t: &Trigd) {
    let r = t.post(&quick());
    let new = r.run_id(&r.ok());
    let r = t.get(&format!("/api/runs/{new}?api_key={KEY}"));
    r.check_eq(
        &r.ok()["State"],
        &json!("finished"),
        "a run after the migration",
    );
}

/// Each index of `names` is in `before` ([`run_indexes`]) and not `after`.
fn assert_gone(before: &str, after: &str, names: &[&str]) {
    for gone in names {
        assert!(
            before.contains(gone) && !after.contains(gone),
            "{gone}: before\n{before}\nafter\n{after}"
        );
    }
}

#[test]
fn the_database_down_gives_503_state_unavailable_then_trigd_recovers() {
    let pg = Pg::start("pg_down");
    let db = pg.database("down");
    let (_dir, t) = instance("pg_down", "alpha", &db);
    let r = t.post(&quick());
    let id = r.run_id(&r.ok());
    pg.stop(true);
    let started = Instant::now();
    // A sync run's `running` is deferred (docs/cluster.md): one started
    // before the instance noticed the outage runs, and its end is kept
    // until the database returns (200); the failed write is noticed, and
    // the next one is refused before it runs.
    let mut r = t.post(&quick());
    for _ in 0..3 {
        if r.status != 200 {
            break;
        }
        r = t.post(&quick());
    }
    let v = r.err(503, "state_unavailable");
    r.check(r.header("retry-after").is_some(), "Retry-After");
    r.check(
        started.elapsed() < Duration::from_secs(30),
        "answered within a bound",
    );
    let _ = v;
    t.get(&format!("/api/runs/{id}?api_key={KEY}"))
        .err(503, "state_unavailable");
    let r = t.get("/healthz");
    r.status_is(503);
    r.check_eq(&r.json()["Status"], &json!("not_ready"), "not ready");
    // Alive all the same: a liveness probe must not restart trigd for an
    // outage of the database (docs/cluster.md).
    let r = t.get("/livez");
    r.check_eq(&r.ok()["Status"], &json!("alive"), "/livez stays 200");
    pg.start_again();
    t.wait_for(Duration::from_secs(30), "ready again", || {
        t.get("/healthz").status == 200
    });
    t.post(&quick()).ok();
    // The first run's commits were not flushed: the immediate stop may
    // have lost them, and they are written again at the next lease tick.
    t.wait_for(PG_WAIT, "the first run known again", || {
        t.get(&format!("/api/runs/{id}?api_key={KEY}")).status == 200
    });
}

#[test]
fn trigd_starts_before_the_database_and_is_ready_once_it_answers() {
    let pg = Pg::start("pg_late");
    let db = pg.database("late");
    pg.stop(false);
    let dir = setup("pg_late", r#"instance = "alpha""#, &[("p.toml", PROG)]);
    db.configure(&dir, "");
    let t = Trigd::start(&dir);
    let r = t.get("/healthz");
    r.status_is(503);
    r.check(
        r.json()["Reason"]
            .as_str()
            .is_some_and(|s| s.contains("database")),
        "the reason names the database",
    );
    t.post(&quick()).err(503, "state_unavailable");
    pg.start_again();
    t.wait_for(
        Duration::from_secs(40),
        "ready once the database answers",
        || t.get("/healthz").status == 200,
    );
    t.post(&quick()).ok();
}

/// `options` in `[state] url` reach the session, beside trigd's own: with
/// `-c search_path=…`, trigd's tables are made in that schema.
#[test]
fn the_urls_options_reach_the_database_session() {
    let db = pg_database("pg_options");
    db.psql("CREATE SCHEMA trigd_own");
    let dir = setup("pg_options", r#"instance = "alpha""#, &[("p.toml", PROG)]);
    let table = db.state_toml(&dir.root, "");
    let url = db.url();
    let with = format!("{url}&options=-c%20search_path%3Dtrigd_own");
    dir.append("config.toml", &table.replacen(&url, &with, 1));
    let t = Trigd::start(&dir);
    t.wait_for(WAIT, "ready", || t.get("/healthz").status == 200);
    t.post(&quick()).ok();
    let at = db.psql("SELECT schemaname FROM pg_tables WHERE tablename = 'trigd_runs'");
    t.check_eq(at.trim(), "trigd_own", "the schema of trigd_runs");
    t.check_eq(
        db.count("SELECT count(*) FROM trigd_own.trigd_runs"),
        1,
        "the run recorded there",
    );
}

/// A wrong database password: trigd starts, is not ready, answers 503
/// `state_unavailable` with `Retry-After`, and `/healthz` and the log name
/// the server's reason (not the client's bare "db error"), never the
/// password itself.
#[test]
fn a_wrong_password_is_named_in_healthz_and_the_log_never_shown() {
    let db = pg_database("pg_wrong_pw");
    let dir = setup("pg_wrong_pw", r#"instance = "alpha""#, &[("p.toml", PROG)]);
    db.configure(&dir, "");
    let wrong = "wrong-pw-3c9d0e";
    dir.write("pg-password", &format!("{wrong}\n"));
    let t = Trigd::start(&dir);
    let mut reason = String::new();
    t.wait_for(PG_WAIT, "/healthz names the refused password", || {
        let r = t.get("/healthz");
        reason = r.json()["Reason"].as_str().unwrap_or_default().to_string();
        r.status == 503 && reason.contains("password authentication failed")
    });
    assert!(reason.contains("28P01"), "the SQLSTATE: {reason}");
    let r = t.post(&quick());
    r.err(503, "state_unavailable");
    r.check(r.header("retry-after") == Some("2"), "Retry-After: 2");
    let log = std::fs::read_to_string(dir.path("stderr.log")).unwrap_or_default();
    assert!(
        log.contains("password authentication failed for user"),
        "the log names the reason: {log}"
    );
    assert!(
        !log.contains(wrong) && !reason.contains(wrong),
        "the password is never shown: {log}"
    );
}

/// Whether every connection of trigd to `db` is TLS (and there is one).
fn all_tls(db: &PgDb) -> bool {
    db.try_psql(
        "SELECT count(*) FILTER (WHERE s.ssl) || '/' || count(*) FROM pg_stat_ssl s \
         JOIN pg_stat_activity a USING (pid) WHERE a.application_name = 'trigd'",
    )
    .is_ok_and(|n| {
        let (tls, all) = n.split_once('/').unwrap_or(("0", "0"));
        tls == all && all != "0"
    })
}

/// TLS to the database: `verify-full` with the CA in `ca_file` connects
/// over TLS (the password from `password_env`); without the CA the
/// certificate is refused, and `/healthz` says why; `require` (the
/// password as a systemd credential) encrypts without checking.
#[test]
fn tls_to_the_database_verify_full_with_ca_file_and_require() {
    let pg = Pg::start("pg_tls");
    let db = pg.database("tls");
    let certs = setup("pg_tls_certs", "", &[]);
    crate::tls::make_ca(&certs);
    crate::tls::make_leaf(&certs, "db", 30);
    pg.enable_tls(&certs.path("db.pem"), &certs.path("db.key"));
    let url = |mode: &str| {
        db.url()
            .replace("sslmode=disable", &format!("sslmode={mode}"))
    };
    let instance = |name: &str, state: String| {
        let dir = setup(
            &format!("pg_tls_{name}"),
            &format!("instance = {name:?}"),
            &[("p.toml", PROG)],
        );
        dir.append("config.toml", &format!("\n[state]\n{state}"));
        dir
    };

    let checked = instance(
        "checked",
        format!(
            "url = {:?}\npassword_env = \"TRIGD_TEST_DB_PW\"\nca_file = {:?}\n",
            url("verify-full"),
            certs.path_str("ca.pem")
        ),
    );
    let t = Trigd::start_env(&checked, &[("TRIGD_TEST_DB_PW", PG_PASSWORD)]);
    t.wait_for(PG_WAIT, "ready over verify-full", || {
        t.get("/healthz").status == 200
    });
    t.post(&quick()).ok();
    assert!(all_tls(&db), "trigd's connections are TLS");
    drop(t);

    let unknown_ca = instance(
        "unknown",
        format!(
            "url = {:?}\npassword_env = \"TRIGD_TEST_DB_PW\"\n",
            url("verify-full")
        ),
    );
    let t = Trigd::start_env(&unknown_ca, &[("TRIGD_TEST_DB_PW", PG_PASSWORD)]);
    let mut reason = String::new();
    t.wait_for(PG_WAIT, "not ready, the certificate named", || {
        let r = t.get("/healthz");
        reason = r.json()["Reason"].as_str().unwrap_or_default().to_string();
        r.status == 503 && reason.contains("certificate")
    });
    t.post(&quick()).err(503, "state_unavailable");
    drop(t);

    let creds = setup("pg_tls_creds", "", &[]);
    creds.write("db", &format!("{PG_PASSWORD}\n"));
    let require = instance(
        "require",
        format!(
            "url = {:?}\npassword_file = \"credential:db\"\n",
            url("require")
        ),
    );
    let t = Trigd::start_env(
        &require,
        &[("CREDENTIALS_DIRECTORY", &creds.root.to_string_lossy())],
    );
    t.wait_for(PG_WAIT, "ready over require", || {
        t.get("/healthz").status == 200
    });
    t.post(&quick()).ok();
    assert!(all_tls(&db), "trigd's connections are TLS");
}

/// Threads of trigd `pid` opening a database connection
/// (`state-db-open`).
fn connect_threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| {
            tasks
                .flatten()
                .filter(|t| {
                    std::fs::read_to_string(t.path().join("comm"))
                        .is_ok_and(|c| c.trim_end() == "state-db-open")
                })
                .count()
        })
        .unwrap_or(0)
}

/// A server that accepts connections and never answers (a frozen
/// PostgreSQL, a pooler waiting for its primary, a wrong port): requests
/// get 503 `state_unavailable` within the connect bound (5 s, plus the
/// wait for a pooled connection), not a hang, and the connects given up
/// on stay at most `pool`.
#[test]
fn a_server_that_accepts_and_never_answers_gives_503_within_the_bound() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = silent.local_addr().expect("addr").port();
    // Accept and hold every connection, answering nothing.
    thread::spawn(move || {
        let mut held = Vec::new();
        for s in silent.incoming().flatten() {
            held.push(s);
        }
    });
    let dir = setup("pg_silent", r#"instance = "alpha""#, &[("p.toml", PROG)]);
    dir.append(
        "config.toml",
        &format!(
            "\n[state]\nurl = \"postgres://trigd@127.0.0.1:{port}/x?sslmode=disable\"\n\
             password_env = \"TRIGD_TEST_SILENT_PW\"\npool = 2\n"
        ),
    );
    let t = Trigd::start_env(&dir, &[("TRIGD_TEST_SILENT_PW", "x")]);
    let missing = format!("/api/runs/alpha-{}?api_key={KEY}", "0".repeat(32));
    let answers: Vec<(Reply, Duration)> = thread::scope(|s| {
        let hs: Vec<_> = (0..6)
            .map(|_| {
                s.spawn(|| {
                    let began = Instant::now();
                    let r = t.get(&missing);
                    (r, began.elapsed())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("request")).collect()
    });
    for (r, took) in &answers {
        r.err(503, "state_unavailable");
        r.check(r.header("retry-after").is_some(), "Retry-After");
        // 5 s to connect, 5 s at most for a pooled connection, and the
        // loaded machine's slack.
        r.check(
            *took < Duration::from_secs(20),
            format!("answered in {took:?}"),
        );
    }
    let threads = connect_threads(t.pid());
    assert!(threads <= 2, "{threads} connects pending, pool = 2");
    let r = t.get("/healthz");
    r.status_is(503);
    r.check(
        r.json()["Reason"]
            .as_str()
            .is_some_and(|s| s.contains("did not complete the connection")),
        "the reason says the server did not answer",
    );
}

/// The runs page lists every instance's runs from the database, with its
/// filters, newest first.
#[test]
fn the_runs_page_of_one_instance_lists_the_runs_of_all() {
    use crate::runs_pages::{page, run, setup_dir};
    let db = pg_database("pg_list");
    let start = |name: &str| {
        let dir = setup_dir(&format!("pg_list_{name}"), &format!("instance = {name:?}"));
        db.configure(&dir, "");
        let t = Trigd::start(&dir);
        (dir, t)
    };
    let (_a_dir, a) = start("alpha");
    let (_b_dir, b) = start("beta");
    let on_a = run(&a, 2, "noisy", "");
    let on_b = run(&b, 2, "noisy", "");
    let dev = run(&a, 3, "hello", "");
    let alice = crate::ui::login(&b, "alice");
    let r = page(&b, "/runs", &alice);
    let text = r.text();
    for id in [&on_a, &on_b] {
        r.check(text.contains(id.as_str()), format!("run {id} listed"));
    }
    r.check(
        !text.contains(dev.as_str()),
        "another workspace's run is not",
    );
    r.check(
        text.find(on_b.as_str()) < text.find(on_a.as_str()),
        "newest first",
    );
    let r = page(&b, "/runs?program=2&state=failed", &alice);
    r.check(!r.text().contains(on_a.as_str()), "filtered by state");
    let r = page(&b, "/runs?program=2&state=finished", &alice);
    r.check(
        r.text().contains(on_a.as_str()),
        "finished runs of program 2",
    );
}
