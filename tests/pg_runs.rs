//! Runs not tied to a host (the PostgreSQL backend): two real trigd
//! instances on one database of the harness's PostgreSQL — a run accepted
//! on a busy instance executed by the other, `kill -9` of an instance with
//! running and queued runs (its lease lapses, the other ends or queues
//! them again and runs the queued ones), a cancel and the kept output
//! through the other instance, also after the owner is killed, a take
//! from the cluster queue whose COMMIT answer was lost, and a lease renewal
//! answered late that must not make a live instance look dead.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::util::*;

/// `brief` prints a little on both streams, `large` 6,000 bytes (past
/// the 4 KiB a record keeps instead of a file), `slow` sleeps long (killed
/// or cancelled in the tests), `again` is a
/// `retry_on_restart` run that takes a few seconds, `quick` answers at
/// once, `gated` is a `retry_on_restart` run that ends once its instance's
/// `work/go` exists (at most 60 s), `own` answers after 4 s, `left` writes
/// its pid (its process group) to `work/left` and runs until its instance's
/// directory is removed (at most 60 s), `gap` prints `one `, `two ` once
/// `work/go` exists and `three` once `work/go2` does (at most 60 s each),
/// `nul` prints `a`, a NUL byte and
/// `b`, `talk` prints a line, prints the next
/// once the test creates `work/go` (at most 60 s later), then sleeps.
const WORK: &str = r#"
id = 1
name = "work"
workspace = "ops"

[[functions]]
name = "slow"
steps = [{ shell = "sleep 60" }]
[functions.webhook]

[[functions]]
name = "again"
retry_on_restart = true
steps = [{ shell = "sleep 3; printf again" }]
[functions.webhook]

[[functions]]
name = "gated"
retry_on_restart = true
steps = [{ shell = "i=0; while [ ! -e ../work/go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; printf again" }]
[functions.webhook]

[[functions]]
name = "quick"
steps = [{ shell = "printf ok" }]
[functions.webhook]

[[functions]]
name = "own"
steps = [{ shell = "sleep 4; printf own" }]
[functions.webhook]

[[functions]]
name = "brief"
steps = [{ shell = "printf 'brief out'; printf 'brief err' >&2" }]
[functions.webhook]

[[functions]]
name = "large"
steps = [{ shell = "head -c 6000 /dev/zero | tr '\\0' z" }]
[functions.webhook]

[[functions]]
name = "left"
steps = [{ shell = "echo $$ > ../work/left; i=0; while [ -e ../work ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done" }]
[functions.webhook]

[[functions]]
name = "gap"
steps = [{ shell = "printf 'one '; i=0; while [ ! -e ../work/go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; printf 'two '; i=0; while [ ! -e ../work/go2 ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; printf three" }]
[functions.webhook]

[[functions]]
name = "nul"
steps = [{ shell = "printf 'a\\000b'" }]
[functions.webhook]

[[functions]]
name = "talk"
steps = [{ shell = "printf 'hello from the owner'; printf 'to stderr' >&2; i=0; while [ ! -e ../work/go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; printf ' again'; sleep 60" }]
[functions.webhook]
"#;

/// The lease of the test instances: short, so that a killed instance's
/// runs are taken over quickly.
const LEASE: &str = r#"lease = "2s""#;

/// An instance named `name` on `db`, with `slots` run slots.
fn instance(db: &PgDb, test: &str, name: &str, slots: usize) -> (TestDir, Trigd) {
    instance_via(db, db.port, test, name, slots)
}

/// [`instance`] reaching `db` at `port` (a test proxy in front of it).
fn instance_via(db: &PgDb, port: u16, test: &str, name: &str, slots: usize) -> (TestDir, Trigd) {
    let dir = configured(db, port, &format!("{test}_{name}"), name, slots, LEASE);
    let t = Trigd::start(&dir);
    (dir, t)
}

/// The directory `dir_name` of an instance named `name` with `slots`
/// slots, reaching `db` at `port`, with `[state]` `extra`: not started.
fn configured(
    db: &PgDb,
    port: u16,
    dir_name: &str,
    name: &str,
    slots: usize,
    extra: &str,
) -> TestDir {
    let server = format!("instance = {name:?}\nmax_concurrent_runs = {slots}\nmax_concurrent_async_runs = {slots}\nkill_grace = \"1s\"");
    let dir = setup(dir_name, &server, &[("w.toml", WORK)]);
    let mut via = db.clone();
    via.port = port;
    via.configure(&dir, extra);
    dir
}

fn accept(t: &Trigd, function: &str) -> String {
    let r = t.post(&format!(
        "/api?api_key={KEY}&program_id=1&function={function}&run_async=true"
    ));
    r.run_id(&r.ok())
}

/// The instance holding run `id` (`trigd_runs.instance`), "" for none.
fn held_by(db: &PgDb, id: &str) -> String {
    db.psql(&format!(
        "SELECT coalesce(instance, '') FROM trigd_runs WHERE id = '{id}'"
    ))
}

/// Wait until `t` says run `id` is in `state` (read from the database,
/// whichever instance is asked).
fn wait_state(t: &Trigd, id: &str, state: &str, bound: Duration) -> Value {
    let mut last = Value::Null;
    let ok = wait_until(bound, || {
        last = run_record(t, id);
        last["State"] == json!(state)
    });
    t.check(
        ok,
        format!("run {id} did not reach {state} within {bound:?}: {last}"),
    );
    last
}

#[test]
fn a_run_accepted_on_a_busy_instance_runs_on_the_other() {
    let db = pg_database("pgrun_busy");
    let (_da, a) = instance(&db, "pgrun_busy", "a", 1);
    let first = accept(&a, "slow");
    wait_state(&a, &first, "running", WAIT);
    let (_db, b) = instance(&db, "pgrun_busy", "b", 1);
    // A has no free slot: B takes the next run A accepts.
    let second = accept(&a, "quick");
    let rec = wait_state(&b, &second, "finished", WAIT);
    b.check_eq(rec["Result"].clone(), json!(["ok"]), "the run's Result");
    b.check_eq(held_by(&db, &second), "b".to_string(), "executed by b");
    a.check_eq(
        held_by(&db, &first),
        "a".to_string(),
        "the first one is a's",
    );
    a.post(&format!("/api/runs/{first}/cancel?api_key={KEY}"));
}

#[test]
fn kill9_of_an_instance_ends_its_runs_and_its_queued_runs_run_elsewhere() {
    let db = pg_database("pgrun_kill");
    let (_da, mut a) = instance(&db, "pgrun_kill", "a", 2);
    let lost = accept(&a, "slow");
    // Not a fixed 3 s: under load a's kill came after it ended, a's slot
    // was free and a took a queued run ("run on b: got a").
    let retried = accept(&a, "gated");
    wait_state(&a, &lost, "running", WAIT);
    wait_state(&a, &retried, "running", WAIT);
    let (db_dir, b) = instance(&db, "pgrun_kill", "b", 1);
    db_dir.write("work/go", "");
    let busy = accept(&b, "slow");
    wait_state(&b, &busy, "running", WAIT);
    // Every slot is taken: these wait in the cluster queue.
    let queued: Vec<String> = (0..3).map(|_| accept(&a, "quick")).collect();
    for id in &queued {
        a.check_eq(held_by(&db, id), String::new(), "in the cluster queue");
    }
    a.kill9();
    let killed = Instant::now();
    // Within the lease (2 s) and a heartbeat, b ends a's running run …
    let rec = wait_state(&b, &lost, "interrupted", Duration::from_secs(20));
    let took = killed.elapsed();
    b.check(
        rec["Error"]
            .as_str()
            .is_some_and(|e| e.contains("instance a")),
        format!("the error names the instance: {rec}"),
    );
    // … and runs the retry_on_restart one again, then the queued ones.
    b.post(&format!("/api/runs/{busy}/cancel?api_key={KEY}"));
    let rec = wait_state(&b, &retried, "finished", Duration::from_secs(30));
    b.check_eq(rec["Result"].clone(), json!(["again"]), "run again on b");
    for id in &queued {
        wait_state(&b, id, "finished", Duration::from_secs(30));
        b.check_eq(held_by(&db, id), "b".to_string(), "run on b");
    }
    // Not a timed check: the bound of the wait for `interrupted` above
    // (20 s) is the guard; a loaded machine can add seconds to the lease.
    eprintln!("a's running run was ended {took:?} after the kill (lease 2s)");
}

#[test]
fn a_cancel_through_the_other_instance_stops_the_process() {
    let db = pg_database("pgrun_cancel");
    let (_da, a) = instance(&db, "pgrun_cancel", "a", 2);
    let id = accept(&a, "slow");
    wait_state(&a, &id, "running", WAIT);
    let (_db, b) = instance(&db, "pgrun_cancel", "b", 2);
    let r = b.post(&format!("/api/runs/{id}/cancel?api_key={KEY}"));
    let v = r.json();
    r.check(
        r.status == 200 || r.status == 202,
        format!("the cancel is accepted: {v}"),
    );
    let rec = wait_state(&b, &id, "cancelled", WAIT);
    a.check_eq(rec["State"].clone(), json!("cancelled"), "ended cancelled");
    a.check_eq(held_by(&db, &id), "a".to_string(), "it ran on a");
    // A queued run is cancelled from the cluster queue, wherever asked.
    let hold = accept(&a, "slow");
    wait_state(&a, &hold, "running", WAIT);
    let busy_b: Vec<String> = (0..2).map(|_| accept(&b, "slow")).collect();
    for id in &busy_b {
        wait_state(&b, id, "running", WAIT);
    }
    let last = accept(&a, "slow");
    let waiting = accept(&a, "quick");
    b.check_eq(
        run_record(&b, &waiting)["State"].clone(),
        json!("queued"),
        "queued",
    );
    let r = b.post(&format!("/api/runs/{waiting}/cancel?api_key={KEY}"));
    r.check_eq(r.json()["State"].clone(), json!("cancelled"), "dequeued");
    for id in busy_b.iter().chain([&hold, &last]) {
        b.post(&format!("/api/runs/{id}/cancel?api_key={KEY}"));
    }
}

/// Cancels asked through another instance of runs their holder no longer
/// has (ended, their end not yet written: here, rows made to look so) do
/// not hold the holder's lease thread: it looked half a second for each,
/// and 20 of them held it 10 s, past the 2 s lease, so that the other
/// instance took the holder for dead and its running run ended
/// `interrupted`.
#[test]
fn relayed_cancels_of_runs_not_here_do_not_hold_the_lease_thread() {
    let db = pg_database("pgrun_relayed");
    let (_da, a) = instance(&db, "pgrun_relayed", "a", 2);
    let slow = accept(&a, "slow");
    wait_state(&a, &slow, "running", WAIT);
    let (_db, b) = instance(&db, "pgrun_relayed", "b", 2);
    let ghosts = db.psql(&format!(
        "INSERT INTO trigd_runs (id, state, program, function, owner, origin, instance, \
         created_at, record) \
         SELECT g, 'running', program, function, owner, origin, 'a', now(), \
                jsonb_set(record, '{{Run}}', to_jsonb(g)) \
         FROM trigd_runs, generate_series(1, 20) i, \
              LATERAL (SELECT 'a-' || md5(i::text) AS g) n \
         WHERE id = '{slow}' RETURNING id"
    ));
    let ghosts: Vec<&str> = ghosts.lines().collect();
    b.check_eq(ghosts.len(), 20, "rows held by a that a does not have");
    // What a cancel of each through b does (`state::pg::cluster::cancel`;
    // its answer waits for the run's end, here until its deadline).
    let asked = db.psql(&format!(
        "UPDATE trigd_runs SET cancel_requested = true WHERE id IN ('{}') \
         RETURNING now()",
        ghosts.join("','")
    ));
    let asked = asked.lines().next().unwrap_or_default().to_string();
    // Renewed every lease / 3; blocked, not before 10 s.
    let renewed = wait_until(Duration::from_secs(4), || {
        db.psql(&format!(
            "SELECT renewed_at > '{asked}'::timestamptz + interval '1 second' \
             FROM trigd_instances WHERE name = 'a'"
        )) == "t"
    });
    a.check(renewed, "a renewed its lease while it looked for the runs");
    a.check_eq(
        run_record(&a, &slow)["State"].clone(),
        json!("running"),
        "a's run goes on",
    );
    a.wait_for(WAIT, "the requests handed on", || {
        db.psql("SELECT count(*) FROM trigd_runs WHERE cancel_requested") == "0"
    });
    a.post(&format!("/api/runs/{slow}/cancel?api_key={KEY}"));
}

/// A run whose output holds a NUL byte is recorded in the database and
/// read through any instance, the NUL as U+FFFD: `jsonb` holds no
/// `\u0000`, and the record was refused (SQLSTATE 22P05), so that the end
/// stayed unwritten for good and the other instance answered 404.
#[test]
fn a_run_that_prints_a_nul_byte_is_recorded_for_every_instance() {
    let db = pg_database("pgrun_nul");
    let (_da, a) = instance(&db, "pgrun_nul", "a", 2);
    let (_db, b) = instance(&db, "pgrun_nul", "b", 2);
    let r = a.post(&format!("/api?api_key={KEY}&program_id=1&function=nul"));
    let id = r.run_id(&r.ok());
    let rec = wait_state(&b, &id, "finished", WAIT);
    b.check_eq(
        rec["Result"].clone(),
        json!(["a\u{fffd}b"]),
        "the other instance reads the run, the NUL as U+FFFD",
    );
    a.wait_for(WAIT, "nothing left unwritten", || {
        a.get("/healthz").json()["StatesUnwritten"] == json!(0)
    });
    // A NUL in an id or a filter finds nothing (PostgreSQL's `text` refuses
    // it: it was a 500), as without a database.
    for path in ["/api/runs/a-00%00", "/api/runs/a-00%00/output"] {
        let r = b.get(&format!("{path}?api_key={KEY}"));
        r.check_eq(r.status, 404, &format!("{path}: {}", r.text()));
    }
    let r = b.post(&format!("/api/runs/a-00%00/cancel?api_key={KEY}"));
    r.check_eq(r.status, 404, &format!("cancel: {}", r.text()));
    for filter in ["function=a%00b", "tool=a%00b", "origin=api_key:a%00b"] {
        let r = b.get(&format!("/api/runs?{filter}&api_key={KEY}"));
        r.check_eq(r.status, 200, &format!("{filter}: {}", r.text()));
        r.check_eq(r.json()["Runs"].clone(), json!([]), filter);
    }
}

#[test]
fn output_is_read_through_the_other_instance_also_after_the_owner_is_killed() {
    let db = pg_database("pgrun_output");
    let (da, mut a) = instance(&db, "pgrun_output", "a", 1);
    let id = accept(&a, "talk");
    wait_state(&a, &id, "running", WAIT);
    let (_db, b) = instance(&db, "pgrun_output", "b", 1);
    let url = format!("/api/runs/{id}/output?api_key={KEY}");
    // While a executes it: copied to the database within a tick. The
    // second line is printed only when the test says so (a fixed pause in
    // the program was shorter than b's start under load: b then never saw
    // the first line alone). The delay after a's own file shows the second
    // line is the follow latency; b's connections are open by then.
    let stdout = |t: &Trigd| t.get(&url).ok()["Stdout"].clone();
    let mut seen = Value::Null;
    let first = wait_until(WAIT, || {
        seen = stdout(&b);
        seen == json!("hello from the owner")
    });
    b.check(
        first,
        format!("the output through b while a runs it: {seen}"),
    );
    // A live follow through b, opened while a runs it: the second line
    // reaches it while the run still runs (it sleeps after that line).
    let mut live = connect(&b.addr);
    write!(live, "GET {url}&follow=1 HTTP/1.1\r\nHost: b\r\n\r\n").unwrap();
    live.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut followed = Vec::new();
    let head = read_until(&mut live, &mut followed, "hello from the owner");
    let text = String::from_utf8_lossy(&followed).into_owned();
    b.check(
        head && text.starts_with("HTTP/1.1 200") && text.contains("text/event-stream"),
        format!("a live follow through b: {text}"),
    );
    da.write("work/go", "");
    let again = read_until(&mut live, &mut followed, " again");
    b.check(
        again,
        format!(
            "the second line through b's live follow: {}",
            String::from_utf8_lossy(&followed)
        ),
    );
    b.check_eq(
        b.get(&format!("/api/runs/{id}?api_key={KEY}")).ok()["State"].clone(),
        json!("running"),
        "the state once the follow had the second line",
    );
    drop(live);
    let all = json!("hello from the owner again");
    wait_until(WAIT, || stdout(&a) == all);
    let local = Instant::now();
    let ok = wait_until(WAIT, || stdout(&b) == all);
    eprintln!("output seen through b {:?} after a had it", local.elapsed());
    b.check(ok, "the second line through b");
    let v = b.get(&url).ok();
    b.check_eq(v["Stderr"].clone(), json!("to stderr"), "stderr too");
    a.kill9();
    wait_state(&b, &id, "interrupted", Duration::from_secs(20));
    let v = b.get(&url).ok();
    b.check_eq(
        v["Stdout"].clone(),
        all,
        "the output through b after a is gone",
    );
    // Followed through b once it has ended: the events, then its end.
    let text = b.get(&format!("{url}&follow=1")).text();
    b.check(
        text.contains("hello from the owner")
            && text.contains(" again")
            && text.contains("event: end"),
        format!("the follow through b: {text}"),
    );
}

/// Read `s` into `got` until it holds `want` (true), or the connection
/// ends or `WAIT` passes (false). `s` has a short read timeout.
fn read_until(s: &mut TcpStream, got: &mut Vec<u8>, want: &str) -> bool {
    let deadline = Instant::now() + WAIT;
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(got).contains(want) {
        if Instant::now() > deadline {
            return false;
        }
        match s.read(&mut buf) {
            Ok(0) => return false,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return false,
        }
    }
    true
}

/// Program 2: `tick`, scheduled every second.
const TICK: &str = r#"
id = 2
name = "tick"

[[functions]]
name = "tick"
steps = [{ shell = "printf tick" }]
[[functions.schedules]]
name = "s"
cron = "* * * * * *"
"#;

#[test]
fn a_schedule_fires_once_per_cluster() {
    let db = pg_database("pgrun_sched");
    let start = |name: &str| {
        let server = format!("instance = {name:?}");
        let dir = setup(&format!("pgrun_sched_{name}"), &server, &[("t.toml", TICK)]);
        db.configure(&dir, LEASE);
        let t = Trigd::start(&dir);
        (dir, t)
    };
    let (_da, a) = start("a");
    let (_db, b) = start("b");
    let by = "record->>'By' = 'schedule:2/tick/s'";
    let ok = wait_until(Duration::from_secs(30), || {
        db.count(&format!(
            "SELECT count(*) FROM trigd_runs WHERE {by} AND state = 'finished'"
        )) >= 6
    });
    a.check(ok, "six occurrences ran");
    let twice = db.psql(&format!(
        "SELECT record->>'ScheduledAt' FROM trigd_runs WHERE {by} \
         GROUP BY 1 HAVING count(*) > 1"
    ));
    b.check_eq(twice, String::new(), "occurrences that ran twice");
    // One statement, one snapshot: the schedule goes on firing, and a
    // claim and its run made between two statements were counted apart.
    let counts = db.psql(&format!(
        "SELECT (SELECT count(DISTINCT occurrence) FROM trigd_occurrences) || '|' || \
         (SELECT count(*) FROM trigd_runs WHERE {by})"
    ));
    let (claimed, runs) = counts
        .split_once('|')
        .and_then(|(c, r)| Some((c.parse::<i64>().ok()?, r.parse::<i64>().ok()?)))
        .unwrap_or_else(|| b.fail(format!("counts {counts:?}")));
    b.check(
        claimed >= runs,
        format!("each run's occurrence was claimed: {claimed} >= {runs}"),
    );
}

#[test]
fn an_end_made_while_the_database_is_down_is_recorded_when_it_returns() {
    let pg = Pg::start("pgrun_down");
    let db = pg.database("down");
    let (_d, t) = instance(&db, "pgrun_down", "a", 2);
    let id = accept(&t, "again");
    wait_state(&t, &id, "running", WAIT);
    // A follow of the run goes on while the database is away (it ended at
    // once, its end event saying the record was no longer kept).
    let mut live = connect(&t.addr);
    let url = format!("/api/runs/{id}/output?api_key={KEY}&follow=1");
    write!(live, "GET {url} HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    live.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut followed = Vec::new();
    let open = read_until(&mut live, &mut followed, "text/event-stream");
    t.check(open, "the follow is open");
    pg.stop(true);
    // The run ends (3 s) while the database is down: kept in memory.
    t.wait_for(Duration::from_secs(30), "the end kept in memory", || {
        std::fs::read_to_string(&t.stderr_log)
            .is_ok_and(|l| l.contains(&format!("run {id}: state finished kept until")))
    });
    pg.start_again();
    let ok = wait_until(Duration::from_secs(30), || {
        db.try_psql(&format!("SELECT state FROM trigd_runs WHERE id = '{id}'"))
            .is_ok_and(|s| s == "finished")
    });
    t.check(ok, "the end is in the database once it is back");
    let ended = read_until(&mut live, &mut followed, "event: end");
    read_until(&mut live, &mut followed, "finished");
    let text = String::from_utf8_lossy(&followed).into_owned();
    t.check(
        ended && text.contains("again") && text.contains("finished") && !text.contains("no longer"),
        format!("the follow ends with the run's end: {text}"),
    );
    let rec = wait_state(&t, &id, "finished", WAIT);
    t.check_eq(rec["Result"].clone(), json!(["again"]), "its Result");
    let out = t.get(&format!("/api/runs/{id}/output?api_key={KEY}")).ok();
    t.check_eq(out["Stdout"].clone(), json!("again"), "its output");
}

/// Output printed while the database is away reaches it once it is back:
/// the copy that failed is sent again (it was dropped, and the other
/// instance served the output cut off at the gap, for good). A fast stop:
/// the copies committed before it are on the server's disk (an immediate
/// stop may lose the last of them: they are committed without waiting
/// for the flush, docs/cluster.md).
#[test]
fn output_printed_while_the_database_is_down_is_copied_when_it_returns() {
    let pg = Pg::start("pgrun_gap");
    let db = pg.database("gap");
    let (da, a) = instance(&db, "pgrun_gap", "a", 2);
    let id = accept(&a, "gap");
    // b starts once a runs it (b would take it too).
    wait_state(&a, &id, "running", WAIT);
    let (_db, b) = instance(&db, "pgrun_gap", "b", 2);
    let url = format!("/api/runs/{id}/output?api_key={KEY}");
    let stdout = |t: &Trigd| t.get(&url).ok()["Stdout"].clone();
    b.wait_for(WAIT, "the first part copied", || {
        stdout(&b) == json!("one ")
    });
    pg.stop(false);
    da.write("work/go", "");
    a.wait_for(WAIT, "a copy that failed", || {
        std::fs::read_to_string(&a.stderr_log)
            .is_ok_and(|l| l.contains("cannot copy the output of the runs here"))
    });
    pg.start_again();
    da.write("work/go2", "");
    wait_state(&b, &id, "finished", WAIT);
    b.check_eq(
        stdout(&b),
        json!("one two three"),
        "the whole output through b",
    );
}

/// At start an instance adopts its runs of before the start (a previous
/// life's, cut off by kill -9). A sync run this life records before that
/// adoption (the first lease renewal slow: the database busy) is not one
/// of them: it was ended `interrupted` while it ran, and when that write
/// came after the run's own end, the run stayed `interrupted` (the CI
/// flake of `pg_state::a_sync_run_costs…`: 66 of 67 runs finished).
#[test]
fn a_run_made_before_the_first_lease_renewal_is_not_taken_for_a_previous_lifes() {
    let db = pg_database("pgrun_own");
    let (_d, mut a) = instance(&db, "pgrun_own", "a", 2);
    let path = a.stderr_log.clone();
    let log = move || std::fs::read_to_string(&path).unwrap_or_default();
    a.wait_for(WAIT, "the lease held", || {
        log().contains("cluster: lease held")
    });
    // The next life's first renewal waits for this lock on a's row.
    let row = db.hold("SELECT 1 FROM trigd_instances WHERE name = 'a' FOR UPDATE");
    let from = log().len();
    a.restart();
    let since = |log: String| log.get(from..).unwrap_or_default().to_string();
    let c = a.client();
    let url = format!("/api?api_key={KEY}&program_id=1&function=own");
    // With an Idempotency-Key the `running` row is written before the run
    // starts (without one, the lease thread would write it, after the
    // renewal this test holds back).
    let sync =
        std::thread::spawn(move || c.request("POST", &url, &[("Idempotency-Key", "own-1")], b""));
    let running = "SELECT count(*) FROM trigd_runs WHERE function = 'own' AND state = 'running'";
    a.wait_for(WAIT, "the sync run running", || db.count(running) == 1);
    row.release();
    a.wait_for(PG_WAIT, "the lease held after the restart", || {
        since(log()).contains("cluster: lease held")
    });
    let adopted = since(log())
        .lines()
        .filter(|l| l.contains("stopped holding its lease"))
        .collect::<Vec<_>>()
        .join("\n");
    a.check_eq(adopted, String::new(), "runs adopted from a previous life");
    let r = sync.join().expect("the sync request");
    let v = r.ok();
    r.check_eq(&v["Result"], &json!(["own"]), "the sync run's Result");
    let state = db.psql("SELECT string_agg(state, ',') FROM trigd_runs WHERE function = 'own'");
    a.check_eq(state, "finished".to_string(), "its state in the database");
}

/// An instance restarted after kill -9 under the same name stops the
/// process group its previous life left running before it ends the run.
#[test]
fn a_restarted_instance_stops_what_its_previous_life_left_running() {
    let db = pg_database("pgrun_left");
    let (dir, mut a) = instance(&db, "pgrun_left", "a", 2);
    let id = accept(&a, "left");
    wait_state(&a, &id, "running", PG_WAIT);
    a.wait_for(WAIT, "the run's pid", || {
        dir.exists("work/left") && !dir.read("work/left").is_empty()
    });
    let pgid: u32 = dir.read("work/left").trim().parse().unwrap();
    a.kill9();
    assert!(pid_alive(pgid), "the run outlives trigd");
    a.restart();
    a.wait_for(PG_WAIT, "the old process group to be gone", || {
        !pid_alive(pgid)
    });
    wait_state(&a, &id, "interrupted", PG_WAIT);
    let line = format!("run {id}: stopped process group {pgid} that the previous trigd left");
    a.check(
        a.stderr_tail().contains(&line),
        format!("log line {line:?}"),
    );
    let metric = "trigd_orphan_groups_stopped_total{how=\"term\"} 1";
    a.check(a.get("/metrics").text().contains(metric), metric);
}

/// A TCP proxy in front of the harness's PostgreSQL that cuts the first
/// connection, once armed, whose transaction took a run from the cluster
/// queue: it passes that transaction's `COMMIT` on, and when the server
/// answers (the commit done) it closes both sides without passing the
/// answer back. That is what a database shutting down can do to a take:
/// it answers the COMMIT it did with the error that ends the connection.
/// [`CommitCut::cancels`] cuts a cancel's update instead.
struct CommitCut {
    port: u16,
    armed: Arc<AtomicBool>,
    cuts: Arc<AtomicUsize>,
}

/// The text of the update that takes a run off the cluster queue to
/// cancel it (`state::pg::cluster::cancel`): one statement, committed at
/// its `Sync`, whose answer [`CommitCut::cancels`] drops.
const CANCEL_TAKE: &str = "UPDATE trigd_runs SET instance = $1 WHERE id = $2 AND state = 'queued'";

impl CommitCut {
    fn start(pg_port: u16) -> CommitCut {
        Self::cutting(pg_port, None)
    }

    /// A proxy that cuts, once armed, the first connection that sends
    /// [`CANCEL_TAKE`]: the server executes and commits it, its answer is
    /// lost.
    fn cancels(pg_port: u16) -> CommitCut {
        Self::cutting(pg_port, Some(CANCEL_TAKE))
    }

    /// `statement`: cut at the statement with this text; `None`: at the
    /// COMMIT of a take.
    fn cutting(pg_port: u16, statement: Option<&'static str>) -> CommitCut {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("its address").port();
        let armed = Arc::new(AtomicBool::new(false));
        let cuts = Arc::new(AtomicUsize::new(0));
        let (a, n) = (Arc::clone(&armed), Arc::clone(&cuts));
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(("127.0.0.1", pg_port)) else {
                    continue;
                };
                let (a, n) = (Arc::clone(&a), Arc::clone(&n));
                std::thread::spawn(move || proxy_one(client, server, &a, &n, statement));
            }
        });
        CommitCut { port, armed, cuts }
    }
}

/// One connection through [`CommitCut`]: client messages are read whole
/// (type byte, length) and passed on; the answers are copied on a thread
/// that, once the connection is cut, closes both sides at the first byte.
fn proxy_one(
    mut client: TcpStream,
    server: TcpStream,
    armed: &AtomicBool,
    cuts: &AtomicUsize,
    statement: Option<&str>,
) {
    let cut = Arc::new(AtomicBool::new(false));
    let (mut from_server, mut to_client) =
        (server.try_clone().unwrap(), client.try_clone().unwrap());
    let c = Arc::clone(&cut);
    let answers = std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        while let Ok(n @ 1..) = from_server.read(&mut buf) {
            if c.load(Ordering::SeqCst) {
                break;
            }
            if to_client.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = from_server.shutdown(Shutdown::Both);
        let _ = to_client.shutdown(Shutdown::Both);
    });
    let mut server = server;
    // The startup message: a length, no type byte.
    let mut len = [0u8; 4];
    if client.read_exact(&mut len).is_err() {
        return;
    }
    let mut body = vec![0u8; (u32::from_be_bytes(len) as usize).saturating_sub(4)];
    if client.read_exact(&mut body).is_err() || server.write_all(&len).is_err() {
        return;
    }
    let _ = server.write_all(&body);
    let mut took = false;
    // The take is prepared once a connection (`Parse` names it, with its
    // text), then bound by that name at each take (`Bind`).
    let mut take_name: Option<Vec<u8>> = None;
    loop {
        let mut head = [0u8; 5];
        if client.read_exact(&mut head).is_err() {
            break;
        }
        let n = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        let mut body = vec![0u8; n.saturating_sub(4)];
        if client.read_exact(&mut body).is_err() {
            break;
        }
        let text = String::from_utf8_lossy(&body);
        let cut_here = match statement {
            // `Parse`: the server answers nothing before the `Sync` that
            // follows, by which time it has executed and committed it.
            Some(statement) => head[0] == b'P' && text.contains(statement),
            None => head[0] == b'Q' && text.starts_with("COMMIT") && took,
        };
        if cut_here && armed.swap(false, Ordering::SeqCst) {
            cut.store(true, Ordering::SeqCst);
            cuts.fetch_add(1, Ordering::SeqCst);
        }
        if head[0] == b'Q' {
            took = false;
        }
        if head[0] == b'P' && text.contains("UPDATE trigd_runs SET instance = $1 WHERE id = (") {
            take_name = body.split(|b| *b == 0).next().map(<[u8]>::to_vec);
        }
        // `Bind`: the portal's name, then the statement's.
        if head[0] == b'B' && body.split(|b| *b == 0).nth(1) == take_name.as_deref() {
            took = true;
        }
        if server.write_all(&head).is_err() || server.write_all(&body).is_err() {
            break;
        }
    }
    let _ = server.shutdown(Shutdown::Both);
    let _ = answers.join();
}

/// A take whose COMMIT was done but whose answer was lost (the CI flake of
/// `pg_cluster::postgresql_stopped_and_started_under_load_loses_nothing`:
/// an acknowledged run stayed `queued` for good, held by a live instance
/// that did not know it had taken it) is settled once the database
/// answers: the run runs.
#[test]
fn a_take_whose_commit_answer_was_lost_still_runs() {
    let db = pg_database("pgrun_cut");
    let proxy = CommitCut::start(db.port);
    let (_dir, a) = instance_via(&db, proxy.port, "pgrun_cut", "a", 2);
    a.wait_for(WAIT, "the lease held", || {
        std::fs::read_to_string(&a.stderr_log).is_ok_and(|l| l.contains("cluster: lease held"))
    });
    proxy.armed.store(true, Ordering::SeqCst);
    let id = accept(&a, "quick");
    a.wait_for(WAIT, "the take's commit cut", || {
        proxy.cuts.load(Ordering::SeqCst) == 1
    });
    let rec = wait_state(&a, &id, "finished", WAIT);
    a.check_eq(rec["Result"].clone(), json!(["ok"]), "the run's Result");
    a.check_eq(held_by(&db, &id), "a".to_string(), "executed by a");
    let log = std::fs::read_to_string(&a.stderr_log).unwrap_or_default();
    a.check(
        log.contains(&format!("run {id}: its take was committed after all")),
        "the lost answer was settled by asking the database",
    );
}

/// A cancel whose update was done but whose answer was lost (the
/// database failing over at that moment) is finished, not left half
/// done: the run it took off the cluster queue was held `queued` by this
/// instance for good, and the cancel, asked again until the deadline,
/// answered `409 run_ended` with state `queued`. Here the instance's one
/// async slot is held by a sleeping run, so the cancelled run waits in
/// the cluster queue; the answer of the cancel's update is cut.
#[test]
fn a_cancel_whose_answer_was_lost_still_cancels_the_run() {
    let db = pg_database("pgrun_cancel_cut");
    let proxy = CommitCut::cancels(db.port);
    let (_dir, a) = instance_via(&db, proxy.port, "pgrun_cancel_cut", "a", 1);
    let slow = accept(&a, "slow");
    wait_state(&a, &slow, "running", WAIT);
    let id = accept(&a, "quick");
    a.check_eq(held_by(&db, &id), String::new(), "in the cluster queue");
    proxy.armed.store(true, Ordering::SeqCst);
    let r = a.post(&format!("/api/runs/{id}/cancel?api_key={KEY}"));
    a.check_eq(
        proxy.cuts.load(Ordering::SeqCst),
        1,
        "the cancel's answer cut",
    );
    let body = r.ok();
    r.check_eq(&body["State"], &json!("cancelled"), "the run cancelled");
    let rec = wait_state(&a, &id, "cancelled", WAIT);
    a.check(rec["StartedAt"].is_null(), "it never started");
    a.check_eq(
        db.psql(&format!("SELECT state FROM trigd_runs WHERE id = '{id}'")),
        "cancelled".to_string(),
        "recorded cancelled in the database",
    );
    let log = std::fs::read_to_string(&a.stderr_log).unwrap_or_default();
    a.check(
        log.contains(&format!(
            "run {id}: its cancel took it off the cluster queue after all"
        )),
        "the lost answer was settled by asking the database",
    );
}

/// Send `sig` to trigd `t` (SIGSTOP: a stalled instance; SIGCONT).
fn signal(t: &Trigd, sig: libc::c_int) {
    let pid = libc::pid_t::try_from(t.pid()).expect("a pid");
    // SAFETY: kill(2) on the test's own child.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0, "kill({pid}, {sig})");
}

/// After an outage longer than a lease, an instance gives the others a
/// whole lease from when the database answered it, not from when its
/// answered renewal was sent: a renewal sent while the database was away
/// and answered seconds later made it take a live instance for dead at
/// once and end its running run `interrupted` (the CI flake of
/// `pg_cluster::postgresql_stopped_and_started_under_load_loses_nothing`:
/// "runs executing during the outage finished": one was `interrupted`).
/// Here a's renewals wait for a held lock on its row: the first fails
/// (lock_timeout, 10 s: the database "down" for a), the next is answered
/// when the lock is released, more than a lease after it was sent; b is
/// stopped (SIGSTOP) until then: both leases have lapsed.
#[test]
fn a_renewal_answered_late_does_not_take_a_live_instance_for_dead() {
    let db = pg_database("pgrun_late");
    let start = |name: &str| {
        let server = format!("instance = {name:?}\nmax_concurrent_runs = 2\nmax_concurrent_async_runs = 2\nkill_grace = \"1s\"");
        let dir = setup(&format!("pgrun_late_{name}"), &server, &[("w.toml", WORK)]);
        db.configure(&dir, r#"lease = "6s""#);
        let t = Trigd::start(&dir);
        (dir, t)
    };
    let (_db, b) = start("b");
    let id = accept(&b, "slow");
    wait_state(&b, &id, "running", WAIT);
    b.check_eq(held_by(&db, &id), "b".to_string(), "executed by b");
    let (_da, a) = start("a");
    let path = a.stderr_log.clone();
    let log = move || std::fs::read_to_string(&path).unwrap_or_default();
    a.wait_for(WAIT, "a's lease held", || {
        log().contains("cluster: lease held")
    });
    let from = log().len();
    let since = |l: String| l.get(from..).unwrap_or_default().to_string();
    let row = db.hold("SELECT 1 FROM trigd_instances WHERE name = 'a' FOR UPDATE");
    signal(&b, libc::SIGSTOP);
    let failed = wait_until(PG_WAIT, || {
        since(log()).contains("cannot renew this instance's lease")
    });
    // The next renewal, sent at once, waits more than a lease (6 s).
    std::thread::sleep(Duration::from_secs(7));
    row.release();
    a.wait_for(PG_WAIT, "a's lease held again", || {
        since(log()).contains("cluster: lease held")
    });
    // b comes back 2 s later: within a lease of a's answer, but after
    // a's adoption when a took the renewal's sending for its answer.
    std::thread::sleep(Duration::from_secs(2));
    signal(&b, libc::SIGCONT);
    a.check(failed, "a renewal failed while the lock was held");
    // b renews within a lease of a's answer; a then finds no lapsed lease.
    let renewed = "SELECT count(*) FROM trigd_instances WHERE name = 'b' AND expires_at > now()";
    b.wait_for(PG_WAIT, "b's lease renewed", || db.count(renewed) == 1);
    std::thread::sleep(Duration::from_secs(7));
    let adopted = since(log())
        .lines()
        .filter(|l| l.contains("stopped holding its lease"))
        .collect::<Vec<_>>()
        .join("\n");
    a.check_eq(adopted, String::new(), "a live instance's runs adopted");
    let rec = run_record(&b, &id);
    b.check_eq(rec["State"].clone(), json!("running"), "b's run");
    b.check_eq(held_by(&db, &id), "b".to_string(), "still b's");
    b.post(&format!("/api/runs/{id}/cancel?api_key={KEY}"));
}

// ---------------------------------------------------------------------------
// What waits for the WAL flush: as the run log's fsyncs (docs/cluster.md)

/// Whether a backend of `db` waits for synchronous replication (every
/// flushed commit does while `synchronous_standby_names` names a standby
/// that never comes) on the statement that writes runs.
fn a_run_write_waits_for_the_flush(db: &PgDb) -> bool {
    db.try_psql(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep' \
         AND query LIKE '%INSERT INTO trigd_runs%'",
    )
    .is_ok_and(|n| n != "0")
}

/// The run log syncs an async accept but not a sync run's states: with
/// the database, a sync run's `running` and its end commit without
/// waiting for the WAL flush (its answer comes while every flushed commit
/// is held), an async accept waits for it. Held: PostgreSQL's own
/// synchronous replication to a standby that does not exist, which holds
/// exactly the commits that wait for the flush.
#[test]
fn a_sync_run_does_not_wait_for_the_wal_flush_an_async_accept_does() {
    let pg = Pg::start("pgrun_flush");
    let db = pg.database("flush");
    // A long lease: the heartbeat's commit waits for the flush as well,
    // and one due before the barrier holds the lease thread (seen under
    // load: the barrier never came). Renewed every 20 s, none falls in
    // the few seconds this test holds the flushes.
    let server = "instance = \"a\"\nmax_concurrent_runs = 4\nmax_concurrent_async_runs = 4\nkill_grace = \"1s\"";
    let _d = setup("pgrun_flush_a", server, &[("w.toml", WORK)]);
    db.configure(&_d, r#"lease = "60s""#);
    let t = Trigd::start(&_d);
    let sync = format!("/api?api_key={KEY}&program_id=1&function=quick");
    t.post(&sync).ok(); // the pool warm
                        // The first renewal made before flushes are held: made after, it
                        // would wait for the flush and hold the lease thread (seen under load,
                        // with the lease thread's start behind the first requests).
    t.wait_for(WAIT, "the lease held", || {
        std::fs::read_to_string(&t.stderr_log).is_ok_and(|l| l.contains("cluster: lease held"))
    });
    db.psql("ALTER SYSTEM SET synchronous_standby_names = 'nobody'");
    db.psql("SELECT pg_reload_conf()");
    t.wait_for(WAIT, "the server holds flushed commits", || {
        db.psql("SHOW synchronous_standby_names") == "nobody"
    });
    // A sync run: answered, and none of its writes was seen held (a held
    // end would be seen for the 10 s statement_timeout before its commit
    // is let go).
    let c = t.client();
    let call = std::thread::spawn(move || c.post(&sync));
    let held = wait_until(WAIT, || {
        call.is_finished() || a_run_write_waits_for_the_flush(&db)
    });
    t.check(
        held && !a_run_write_waits_for_the_flush(&db),
        "a sync run's writes do not wait for the WAL flush (the run log does not sync them)",
    );
    let r = call.join().expect("the sync call");
    r.check_eq(
        r.status,
        200,
        "the sync run answered while flushes are held",
    );
    // Its end, committed unflushed, is kept until a flushed commit covers
    // it: the lease thread's barrier must itself wait for the flush (a
    // barrier that wrote no WAL was committed at once, and the end was
    // forgotten before it was on disk: the CI failure of
    // pg_state::the_database_down_gives_503_state_unavailable_then_trigd_recovers).
    // A backend applies the reloaded setting at its next command, a
    // moment after a new session's SHOW saw it: a barrier made by trigd's
    // connection before that was not held (seen in CI under load). So
    // while none is seen waiting, another sync run every second leaves
    // another unflushed end, which asks for another barrier.
    let quick = format!("/api?api_key={KEY}&program_id=1&function=quick");
    let mut next_run = Instant::now() + Duration::from_secs(1);
    t.wait_for(
        WAIT,
        "the barrier for the unflushed end waits for the flush",
        || {
            let seen = db
                .try_psql(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep' \
                 AND query LIKE '%pg_logical_emit_message%'",
                )
                .is_ok_and(|n| n != "0");
            if !seen && Instant::now() >= next_run {
                next_run = Instant::now() + Duration::from_secs(1);
                t.post(&quick).ok();
            }
            seen
        },
    );
    // An async accept: held until the flush is let go.
    let c = t.client();
    let path = format!("/api?api_key={KEY}&program_id=1&function=quick&run_async=true");
    let call = std::thread::spawn(move || c.post(&path));
    t.wait_for(WAIT, "the accept's write waits for the flush", || {
        a_run_write_waits_for_the_flush(&db)
    });
    t.check(
        !call.is_finished(),
        "an async accept is not answered before its record is flushed",
    );
    db.psql("ALTER SYSTEM RESET synchronous_standby_names");
    db.psql("SELECT pg_reload_conf()");
    let r = call.join().expect("the async call");
    let id = r.run_id(&r.ok());
    wait_state(&t, &id, "finished", WAIT);
}

/// Concurrent async accepts share statements and commits (the group
/// commit of `state::pg::runs`, as the run log's share an fdatasync):
/// 320 accepts over 32 connections take at most an eighth as many
/// statements (each its own transaction: one commit) as runs, counted
/// with `pg_stat_statements` (`xact_commit` of `pg_stat_database` lags up
/// to a second). The runs
/// wait behind one slot held by a sleeping run, so the writes counted are
/// the accepts'.
#[test]
fn concurrent_async_accepts_share_commits() {
    let db = pg_database("pgrun_group_commit");
    let (_d, t) = instance(&db, "pgrun_group_commit", "a", 1);
    let slow = accept(&t, "slow");
    wait_state(&t, &slow, "running", WAIT);
    let upserts = || {
        db.try_psql(
            "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements \
             WHERE query LIKE '%INSERT INTO trigd_runs AS r%'",
        )
        .ok()
        .and_then(|n| n.parse::<i64>().ok())
    };
    let u0 = upserts();
    let n = 320;
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let clients: Vec<_> = (0..32)
        .map(|_| {
            let (c, next) = (t.client(), std::sync::Arc::clone(&next));
            std::thread::spawn(move || {
                let mut ids = Vec::new();
                while next.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < n {
                    let r = c.post(&format!(
                        "/api?api_key={KEY}&program_id=1&function=quick&run_async=true"
                    ));
                    ids.push(r.run_id(&r.ok()));
                }
                ids
            })
        })
        .collect();
    let ids: Vec<String> = clients
        .into_iter()
        .flat_map(|c| c.join().expect("a client"))
        .collect();
    let u1 = upserts();
    t.check_eq(ids.len(), n, "every accept answered");
    // Each statement is one transaction: one commit.
    let (Some(u0), Some(u1)) = (u0, u1) else {
        return eprintln!("pg_stat_statements not installed: commits not counted");
    };
    let commits = u1 - u0;
    eprintln!(
        "{n} concurrent async accepts: {commits} statements = commits ({:.2} a run)",
        commits as f64 / n as f64
    );
    t.check(commits >= 1, "the accepts were written");
    // One write statement in flight: the accepts arriving meanwhile go
    // together in the next (24-29 statements in five runs on a quiet
    // 2-core machine; with 4 in flight, the value before, 52 and 89).
    t.check(
        commits * 8 <= n as i64,
        format!("{commits} commits for {n} accepts: fewer than 8 runs a commit"),
    );
}

/// What `GET /api/runs/<id>/output` serves through `t`: the whole output
/// (without `Run`), and the text of the events of a follow after the end.
fn served(t: &Trigd, id: &str) -> (Value, String) {
    let url = format!("/api/runs/{id}/output?api_key={KEY}");
    let mut v = t.get(&url).ok();
    v.as_object_mut().unwrap().remove("Run");
    let body = t.get(&format!("{url}&follow=1")).text();
    assert!(body.contains("event: end"), "{body}");
    let events: String = body
        .split("\n\n")
        .filter(|e| e.starts_with("event: output"))
        .collect::<Vec<_>>()
        .join("|");
    (v, events)
}

#[test]
fn a_small_output_is_kept_in_the_record_and_read_through_the_other_instance() {
    let db = pg_database("pgrun_inline");
    let (da, a) = instance(&db, "pgrun_inline", "a", 2);
    let (_db, b) = instance(&db, "pgrun_inline", "b", 1);
    let sync = |f: &str| {
        let r = a.post(&format!("/api?api_key={KEY}&program_id=1&function={f}"));
        r.run_id(&r.ok())
    };
    let file = |id: &str| {
        let hex = id.rsplit('-').next().unwrap();
        da.path(&format!("state/output/{hex}")).exists()
    };
    let chunks = |id: &str| {
        db.psql(&format!(
            "SELECT count(*) FROM trigd_output WHERE run = '{id}'"
        ))
    };
    // Executed by a; on a loaded machine a run may pass 50 ms after its
    // first byte (then its output goes to a file): one of a few must not.
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(sync("brief"));
        if !file(ids.last().unwrap()) {
            break;
        }
    }
    let inline = ids
        .iter()
        .find(|id| !file(id))
        .expect("a run without a file");
    a.check_eq(chunks(inline), "0".to_string(), "no chunks in trigd_output");
    for id in &ids {
        let (v, events) = served(&b, id);
        b.check_eq(v["Stdout"].clone(), json!("brief out"), "stdout through b");
        b.check_eq(v["Stderr"].clone(), json!("brief err"), "stderr through b");
        b.check_eq(
            served(&a, id),
            (v, events.clone()),
            "a and b serve the same",
        );
        b.check(
            events.contains("brief out") && events.contains("brief err"),
            format!("the events through b: {events}"),
        );
    }
    // Past 4 KiB: a's file, copied to the database as before.
    let large = sync("large");
    a.check(file(&large), "a large output has its file");
    a.check(chunks(&large) != "0", "and its chunks");
    let (v, _) = served(&b, &large);
    b.check_eq(v["Stdout"].clone(), json!("z".repeat(6000)), "through b");
}

/// The plan of the cluster queue's take (`src/state/pg/take.sql`)
/// on a young table (never vacuumed or analysed, as in the first minutes
/// of a database): the taken run is updated through its primary key, not
/// found by filtering the whole queue (`trigd_runs_free`, whose size the
/// planner takes for the empty table's: 19 ms a take with 26,000 runs
/// queued, a hundred takes a second).
#[test]
fn cluster_take_reads_the_run_by_its_key() {
    let db = pg_database("pg_take_plan");
    db.psql(&schema());
    db.psql(
        "ALTER TABLE trigd_runs SET (autovacuum_enabled = false);
         INSERT INTO trigd_instances (name, expires_at) VALUES ('me', now() + interval '1 hour');
         INSERT INTO trigd_runs (id, state, owner, origin, created_at, record)
         SELECT 'q-' || n, 'queued', '1', 'api_key:all', now(), '{\"Async\": true}'
         FROM generate_series(1, 20000) AS n;",
    );
    let plan = db.psql(&format!(
        "PREPARE take(text, text) AS {}; EXPLAIN (COSTS OFF) EXECUTE take('me', 'me-%');",
        include_str!("../src/state/pg/take.sql")
    ));
    let outer: Vec<&str> = plan
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("->") && l.ends_with(" on trigd_runs"))
        .collect();
    assert_eq!(
        outer,
        ["->  Index Scan using trigd_runs_pkey on trigd_runs"],
        "the taken run is updated through its key:\n{plan}"
    );
}

/// The take under its transaction's planner settings
/// (`src/state/pg/take_plan.sql`) reads the queue from `trigd_runs_free`,
/// oldest first, and sorts nothing, also when the planner's estimates
/// prefer another way: statistics older than the queue (analysed while
/// it was empty, then a burst) made it read every queued run and sort
/// them at each take (21.6 ms a take with 149,353 queued, bench rounds of
/// 2026-11-29). Here `enable_indexscan = off` stands for such estimates:
/// without the settings the plan is a sort of the whole queue.
#[test]
fn the_take_reads_the_queue_in_order_whatever_the_costs() {
    let db = pg_database("pg_take_order");
    analysed_before_the_queue(&db);
    db.psql(
        "INSERT INTO trigd_runs (id, state, owner, origin, created_at, record)
         SELECT 'q-' || n, 'queued', '1', 'api_key:all', now(), '{\"Async\": true}'
         FROM generate_series(1, 20000) AS n;",
    );
    let plan = |settings: &str| {
        db.psql(&format!(
            "BEGIN; {settings} SET LOCAL enable_indexscan = off;
             PREPARE take(text, text) AS {};
             EXPLAIN (COSTS OFF) EXECUTE take('me', 'me-%'); ROLLBACK;",
            include_str!("../src/state/pg/take.sql")
        ))
    };
    // The queue of runs of no group is read in its index's order; the
    // take's sorts are of the two runs it chooses between and of the keys'
    // next runs (none here), never of the queue.
    let in_order = "Index Scan using trigd_runs_free";
    let taken = plan(include_str!("../src/state/pg/take_plan.sql"));
    assert!(
        taken.contains(in_order) && !taken.contains("trigd_runs_by_state"),
        "the take reads the queue in its index's order:\n{taken}"
    );
    let unset = plan("");
    assert!(
        !unset.contains(in_order),
        "without the settings these estimates make the planner sort the queue:\n{unset}"
    );
}

/// A take planned on a new database (its table empty and never
/// analysed, as at the lease thread's first take after a start) still
/// reads the queue through its indexes once a burst fills it: the plan
/// for any parameters is kept until an analyse, and without
/// `enable_seqscan = off` (`take_plan.sql`) that plan read the whole table
/// at each take, for the keys' next runs (none here): 294 buffers with
/// 20,000 runs queued, growing with them (6.3–7.2 ms a take in the first
/// 8 s of a burst on a new database).
#[test]
fn a_take_planned_on_an_empty_table_does_not_read_the_table_as_it_fills() {
    let db = pg_database("pg_take_empty");
    db.psql(&schema());
    // Before the session that plans: a change of the table's options in
    // the planning session makes it plan again at the next take.
    db.psql(
        "ALTER TABLE trigd_runs SET (autovacuum_enabled = false);
         INSERT INTO trigd_instances (name, expires_at) VALUES ('me', now() + interval '1 hour');",
    );
    let plan = db.psql(&format!(
        "BEGIN; {settings} PREPARE take(text, text) AS {take};
         EXECUTE take('me', 'me-%'); COMMIT;
         INSERT INTO trigd_runs (id, state, owner, origin, created_at, record)
         SELECT 'q-' || n, 'queued', '1', 'api_key:all', now(), '{{\"Async\": true}}'
         FROM generate_series(1, 20000) AS n;
         BEGIN; {settings}
         EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) EXECUTE take('me', 'me-%');
         ROLLBACK;",
        settings = include_str!("../src/state/pg/take_plan.sql"),
        take = include_str!("../src/state/pg/take.sql"),
    ));
    let buffers = top_buffers(&plan);
    eprintln!("take planned on the empty table, 20,000 queued: {buffers} buffers");
    assert!(
        !plan.contains("Seq Scan on trigd_runs"),
        "the plan made on the empty table reads the whole table:\n{plan}"
    );
    assert!(
        buffers < 100,
        "{buffers} buffers for a take with 20,000 queued runs\n{plan}"
    );
}

/// A take does not read the runs waiting behind keys at their limit
/// (migration 5, `src/state/pg/group_queues.sql`): with 3,000 runs queued
/// in each of two keys at `limit = 1` (one run of each held by another
/// instance), then one run of a third key, the take finds the third
/// key's run through the keys' own queues, a few index pages a key (after
/// the 256 oldest runs of any key). The take before read every queued run
/// of a key for each of them (471,149 buffers, 1.1 s, in a like table
/// with fresh statistics or not). The statistics here are from before the
/// queue filled, the case that made the planner read
/// `trigd_runs_by_state` for a key's runs.
#[test]
fn a_take_reads_a_full_keys_runs_once_not_once_a_run() {
    let db = pg_database("pg_take_keys");
    analysed_before_the_queue(&db);
    let run = |id: &str, key: &str| {
        format!(
            "'{id}', 'queued', '1', 'api_key:all', now(), \
             ('{{\"Async\": true, \"Group\": \"{key}\", \"Input\": {{\"GroupLimit\": 1}}}}')::jsonb"
        )
    };
    db.psql(&format!(
        "INSERT INTO trigd_runs (id, state, owner, origin, created_at, record, instance)
         VALUES ({}, 'other'), ({}, 'other');
         INSERT INTO trigd_runs (id, state, owner, origin, created_at, record)
         SELECT {} FROM generate_series(1, 3000) AS n;
         INSERT INTO trigd_runs (id, state, owner, origin, created_at, record)
         SELECT {} FROM generate_series(1, 3000) AS n;
         INSERT INTO trigd_runs (id, state, owner, origin, created_at, record) VALUES ({});",
        run("held-a", "a"),
        run("held-b", "b"),
        run("a-' || n || '", "a"),
        run("b-' || n || '", "b"),
        run("c-1", "c"),
    ));
    let take = |explain: &str| take_once(&db, explain);
    let taken = take("");
    assert!(
        taken.contains("|c-1|c|"),
        "the third key's run, past the 6,000 that wait: {taken}"
    );
    let plan = take("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF)");
    let buffers = top_buffers(&plan);
    eprintln!("take past 6,000 waiting runs: {buffers} buffers");
    assert!(
        !plan.contains("trigd_runs_by_state") && !plan.contains("Seq Scan on trigd_runs"),
        "each key's runs are read through its own indexes:\n{plan}"
    );
    assert!(
        buffers < 2_000,
        "{buffers} buffers for a take past 6,000 waiting runs: it reads them\n{plan}"
    );
}

/// A take finds the oldest next run among many keys without visiting
/// them all (`src/state/pg/take.sql`): 20,000 keys with one queued run
/// each, the statistics from before they came. It reads the oldest runs
/// of any key first; visiting every key read 184,360 buffers here (141 ms
/// a take in a like table).
#[test]
fn a_take_finds_the_next_run_among_many_keys_without_visiting_them_all() {
    let db = pg_database("pg_take_many_keys");
    analysed_before_the_queue(&db);
    db.psql(
        "INSERT INTO trigd_runs (id, state, owner, origin, created_at, record)
         SELECT 'k-' || n, 'queued', '1', 'api_key:all', now(), ('{\"Async\": true, \"Group\": \"key'
           || n || '\", \"Input\": {\"GroupLimit\": 1}}')::jsonb
         FROM generate_series(1, 20000) AS n;",
    );
    let take = |explain: &str| take_once(&db, explain);
    let taken = take("");
    assert!(taken.contains("|k-1|key1|"), "the oldest run: {taken}");
    let plan = take("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF)");
    let buffers = top_buffers(&plan);
    eprintln!("take among 20,000 keys: {buffers} buffers");
    assert!(
        buffers < 1_000,
        "{buffers} buffers for a take among 20,000 keys: it visits them all\n{plan}"
    );
}

/// Every table of the schema in `db`, instance `me` alive, and 5,000
/// ended runs analysed with autovacuum off: the planner's statistics say
/// the queue is empty whatever the test queues next (as after an
/// analyse of a drained table, then a burst).
fn analysed_before_the_queue(db: &PgDb) {
    db.psql(&schema());
    db.psql(
        "ALTER TABLE trigd_runs SET (autovacuum_enabled = false);
         INSERT INTO trigd_instances (name, expires_at) VALUES ('me', now() + interval '1 hour');
         INSERT INTO trigd_runs (id, state, owner, origin, created_at, ended_at, record)
         SELECT 'f-' || n, 'finished', '1', 'api_key:all', now(), now(), '{\"Async\": true}'
         FROM generate_series(1, 5000) AS n;
         ANALYZE trigd_runs;",
    );
}

/// One take by instance `me` in `db`, as the lease thread makes it
/// (`take_plan.sql`, the prepared `take.sql`), rolled back; `explain`: an
/// `EXPLAIN (…)` to put before it, or nothing. What psql printed.
fn take_once(db: &PgDb, explain: &str) -> String {
    db.psql(&format!(
        "BEGIN; {} PREPARE take(text, text) AS {}; {explain} EXECUTE take('me', 'me-%'); ROLLBACK;",
        include_str!("../src/state/pg/take_plan.sql"),
        include_str!("../src/state/pg/take.sql")
    ))
}

/// The buffers a plan of `EXPLAIN (ANALYZE, BUFFERS)` read, at its top.
fn top_buffers(plan: &str) -> u64 {
    plan.lines()
        .find_map(|l| l.trim().strip_prefix("Buffers: shared hit="))
        .and_then(|n| n.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no buffer count in the plan:\n{plan}"))
}

/// The runs a free room takes are taken in one transaction (one COMMIT,
/// one WAL flush: `state::pg::cluster::take`), not one each: six runs
/// queued behind the one slot of instance `a` (held by a sleeping run)
/// are taken when a reload gives it seven, and the COMMITs counted by
/// `pg_stat_statements` meanwhile are the takes' (the runs' own writes
/// are single statements, no other transaction runs on a lone instance).
#[test]
fn a_free_room_takes_its_runs_in_one_commit() {
    let db = pg_database("pgrun_batch");
    let (dir, t) = instance(&db, "pgrun_batch", "a", 1);
    let slow = accept(&t, "slow");
    wait_state(&t, &slow, "running", WAIT);
    let ids: Vec<String> = (0..6).map(|_| accept(&t, "quick")).collect();
    let commits = || {
        db.try_psql(
            "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query = 'COMMIT' \
             AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())",
        )
        .ok()
        .and_then(|n| n.parse::<i64>().ok())
    };
    let c0 = commits();
    t.check_eq(
        held_by(&db, &ids[5]),
        String::new(),
        "the runs wait in the cluster queue",
    );
    let config = std::fs::read_to_string(dir.path("config.toml")).expect("config.toml");
    dir.write(
        "config.toml",
        &config
            .replace("max_concurrent_runs = 1", "max_concurrent_runs = 7")
            .replace(
                "max_concurrent_async_runs = 1",
                "max_concurrent_async_runs = 7",
            ),
    );
    for id in &ids {
        wait_state(&t, id, "finished", WAIT);
    }
    let (Some(c0), Some(c1)) = (c0, commits()) else {
        return eprintln!("pg_stat_statements not installed: commits not counted");
    };
    eprintln!("6 runs taken with {} COMMITs", c1 - c0);
    t.check(
        c1 - c0 <= 2,
        format!("{} COMMITs to take 6 runs: one a run", c1 - c0),
    );
}

/// Plans and calls of the statements whose text is `like` (SQL `LIKE`),
/// as `pg_stat_statements` counted them in `db`.
fn plans_and_calls(db: &PgDb, like: &str) -> (i64, i64) {
    let counts = db.psql(&format!(
        "SELECT coalesce(sum(plans), 0) || ' ' || coalesce(sum(calls), 0) \
         FROM pg_stat_statements WHERE query LIKE '{like}' \
         AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
    ));
    counts
        .split_once(' ')
        .and_then(|(p, c)| Some((p.parse::<i64>().ok()?, c.parse::<i64>().ok()?)))
        .expect("plans and calls")
}

/// A database of its own with `pg_stat_statements.track_planning` on
/// (set before trigd connects), and an instance with one slot that has run
/// 60 async runs of `quick` to their end; `None` without the extension.
fn sixty_runs_with_plans_counted(test: &str) -> Option<(PgDb, TestDir, Trigd)> {
    let db = pg_database(test);
    db.try_psql(
        "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET \
         pg_stat_statements.track_planning = on', current_database()); END $$",
    )
    .ok()?;
    let (dir, t) = instance(&db, test, "a", 1);
    let ids: Vec<String> = (0..60).map(|_| accept(&t, "quick")).collect();
    for id in &ids {
        wait_state(&t, id, "finished", WAIT);
    }
    Some((db, dir, t))
}

/// The cluster queue's take and the cancel poll, which the lease thread
/// runs for every run it takes and at every tick, are prepared on its
/// connection: the server plans them a few times, not at each call (the
/// take cost more to plan than to run: `state::pg::cluster::TAKE`).
/// Sixty async runs through one slot are sixty takes at least.
#[test]
fn the_cluster_take_and_the_cancel_poll_are_prepared() {
    let Some((db, _dir, t)) = sixty_runs_with_plans_counted("pgrun_prepared_take") else {
        return eprintln!("pg_stat_statements not installed: plans not counted");
    };
    let (plans, calls) = plans_and_calls(&db, "-- The cluster queue''s take%");
    eprintln!("the take: {plans} plans for {calls} calls");
    t.check(calls >= 60, format!("{calls} takes for 60 runs"));
    // Once a connection the lease thread used (a few), not a custom plan
    // at each take (prepared, but without `force_generic_plan`: 18 plans
    // for 63 takes).
    t.check(
        plans * 4 < calls,
        format!("{plans} plans for {calls} takes: planned at each call"),
    );
    // The lease thread polls at least every 200 ms (`runner::cluster::POLL`).
    // Each connection it used plans the poll up to six times (five for
    // its parameters, then the generic plan): 48 for a pool of 8.
    let cancels = "UPDATE trigd_runs SET cancel_requested = % RETURNING id%";
    let (mut plans, mut calls) = (0, 0);
    wait_until(PG_WAIT, || {
        (plans, calls) = plans_and_calls(&db, cancels);
        calls >= 120
    });
    eprintln!("the cancel poll: {plans} plans for {calls} calls");
    t.check(calls >= 120, format!("{calls} cancel polls"));
    t.check(
        plans * 2 < calls,
        format!("{plans} plans for {calls} cancel polls: planned at each call"),
    );
}

/// A run taken from the cluster queue starts with the record the take
/// returned (`runner::queue::Queued::taken`), not one read back (a round
/// trip a run before): 60 async runs through one slot, waited for in the
/// database rather than through trigd's status queries, read no record.
#[test]
fn a_taken_run_starts_without_reading_its_record_back() {
    let db = pg_database("pgrun_taken");
    if db.statement_calls().is_none() {
        return eprintln!("pg_stat_statements not installed: reads not counted");
    }
    let (_dir, t) = instance(&db, "pgrun_taken", "a", 1);
    for _ in 0..60 {
        accept(&t, "quick");
    }
    let finished = || db.psql("SELECT count(*) FROM trigd_runs WHERE state = 'finished'");
    t.check(
        wait_until(WAIT, || finished() == "60"),
        format!("{} of 60 runs finished", finished()),
    );
    let (_, reads) = plans_and_calls(&db, "SELECT record::text FROM trigd_runs WHERE id = $1");
    t.check(
        reads == 0,
        format!("{reads} reads of a record for 60 taken runs"),
    );
}

/// A run's record is read (here by the 60 runs' status queries) through
/// a statement prepared on the connection (`DbRuns::get`), not one parsed
/// and planned at every call: over 60 runs, `pg_stat_statements` (with
/// `track_planning`, set on this database before trigd connects) counts
/// far fewer plans of the read than calls (each call its own plan
/// without the change; prepared, a few custom plans a connection, then
/// the generic one).
#[test]
fn a_runs_record_is_read_by_a_prepared_statement() {
    let Some((db, _dir, t)) = sixty_runs_with_plans_counted("pgrun_prepared_get") else {
        return eprintln!("pg_stat_statements not installed: plans not counted");
    };
    let counts = db.psql(
        "SELECT coalesce(sum(plans), 0) || ' ' || coalesce(sum(calls), 0) \
         FROM pg_stat_statements \
         WHERE query = 'SELECT record::text FROM trigd_runs WHERE id = $1' \
         AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())",
    );
    let (plans, calls) = counts
        .split_once(' ')
        .and_then(|(p, c)| Some((p.parse::<i64>().ok()?, c.parse::<i64>().ok()?)))
        .expect("plans and calls");
    eprintln!("the record read: {plans} plans for {calls} calls");
    t.check(
        calls >= 60,
        format!("{calls} reads of a record for 60 runs"),
    );
    t.check(
        plans * 2 < calls,
        format!("{plans} plans for {calls} reads of a record: planned at each call"),
    );
}

/// Accept `n` async runs of `quick` over 4 connections at once.
fn accept_many(t: &Trigd, n: usize) {
    let url = format!("/api?api_key={KEY}&program_id=1&function=quick&run_async=true");
    for r in crate::queue::burst(t, 4, n, move |_| (url.clone(), vec![])) {
        r.unwrap_or_else(|e| panic!("{e}")).ok();
    }
}

/// `run_retention` holds in the database: the newest ended runs are kept,
/// older ones dropped every 1,000 ended runs. Ends are counted, not
/// writes: an async run is written three times (accepted, `running`,
/// ended), and 600 of them (1,800 writes) drop nothing yet.
#[test]
fn the_database_keeps_the_newest_ended_runs_and_trims_every_1000_ends() {
    let db = pg_database("pgrun_trim");
    let server = "instance = \"a\"\nrun_retention = 5";
    let dir = setup("pgrun_trim", server, &[("w.toml", WORK)]);
    db.configure(&dir, LEASE);
    let t = Trigd::start(&dir);
    let ended = || db.count("SELECT count(*) FROM trigd_runs WHERE ended_at IS NOT NULL");
    let unended = || db.count("SELECT count(*) FROM trigd_runs WHERE ended_at IS NULL");
    let bound = Duration::from_secs(120);
    let mut last = (0, 0);
    // Not ended first: once none is, the count of ended runs read after
    // is final (read the other way round, a run could end in between).
    let counts = || {
        let not_ended = unended();
        (ended(), not_ended)
    };
    accept_many(&t, 600);
    let ok = wait_until(bound, || {
        last = counts();
        last.1 == 0
    });
    t.check(
        ok,
        format!("(ended, not ended) runs: {last:?}; want all ended"),
    );
    assert_eq!(last.0, 600, "600 ended runs, none trimmed yet");
    accept_many(&t, 400);
    // The 1,000th end makes a trim due; the lease thread trims.
    let ok = wait_until(bound, || {
        last = counts();
        last.1 == 0 && last.0 <= 10
    });
    t.check(
        ok && last.0 >= 5,
        format!("(ended, not ended) runs after 1,000 ends with run_retention = 5: {last:?}"),
    );
}

/// The configuration of an instance named `name` (as [`instance`] writes
/// it) with `[state]` `extra`, in a directory of its own.
fn instance_dir(db: &PgDb, test: &str, name: &str, extra: &str) -> TestDir {
    configured(db, db.port, test, name, 2, extra)
}

/// A second instance given a live instance's name refuses to start
/// (exit 1, the name and the remedy said) instead of renewing one lease
/// with it and taking its runs for its own previous life's; the first
/// serves on and still takes runs.
#[test]
fn a_second_instance_under_a_live_instances_name_refuses_to_start() {
    let db = pg_database("pgrun_twin");
    let (_da, a) = instance(&db, "pgrun_twin", "a", 2);
    let id = accept(&a, "slow");
    wait_state(&a, &id, "running", PG_WAIT);
    let twin = instance_dir(&db, "pgrun_twin_again", "a", LEASE);
    let config = twin.path_str("config.toml");
    let second = crate::util::cli::trigd(
        &["serve", "--config", &config, "--listen", "127.0.0.1:0"],
        None,
    );
    second.code_is(1);
    second.check(
        second
            .stderr
            .contains("the instance name \"a\" is in use by another trigd")
            && second.stderr.contains("its own `instance`"),
        "the refusal names the instance and the remedy",
    );
    a.check_eq(
        held_by(&db, &id),
        "a".to_string(),
        "the running run's holder",
    );
    let quick = accept(&a, "quick");
    wait_state(&a, &quick, "finished", PG_WAIT);
    wait_state(&a, &id, "running", WAIT);
}

/// A clean stop lets the instance's lease go: started again under its
/// name it serves at once, not after its lease (60 s here) lapsed, and
/// takes runs.
#[test]
fn an_instance_stopped_cleanly_claims_its_name_again_at_once() {
    let db = pg_database("pgrun_leave");
    let dir = instance_dir(&db, "pgrun_leave", "a", r#"lease = "60s""#);
    let mut a = Trigd::start(&dir);
    accept(&a, "quick");
    a.sigterm();
    let stopped = a.wait_exit(WAIT).is_some();
    a.check(stopped, "a stopped");
    let expired = db.psql("SELECT expires_at <= now() FROM trigd_instances WHERE name = 'a'");
    a.check_eq(expired, "t".to_string(), "the lease let go at the stop");
    // Bounded at 30 s: waiting for the lease to lapse would fail here.
    a.restart();
    let id = accept(&a, "quick");
    wait_state(&a, &id, "finished", PG_WAIT);
}

/// An instance stalled past its lease while a second process of its name
/// claimed the name and took its run: once it runs again, it finds the
/// name held, answers `/healthz` 503, stops the run without recording
/// its end over the other's, and claims the name again (taking runs)
/// once that process stops.
#[test]
fn a_stalled_instance_whose_name_was_claimed_defers_to_the_claimer_then_claims_it_again() {
    let db = pg_database("pgrun_stall");
    let first = instance_dir(&db, "pgrun_stall_first", "a", LEASE);
    let mut a1 = Trigd::start(&first);
    let id = accept(&a1, "slow");
    wait_state(&a1, &id, "running", PG_WAIT);
    signal(&a1, libc::SIGSTOP);
    let second = instance_dir(&db, "pgrun_stall_second", "a", LEASE);
    let mut a2 = Trigd::start(&second);
    wait_state(&a2, &id, "interrupted", PG_WAIT);
    signal(&a1, libc::SIGCONT);
    a1.wait_for(
        PG_WAIT,
        "the stalled instance's end left unrecorded",
        || {
            let log = std::fs::read_to_string(&a1.stderr_log).unwrap_or_default();
            log.contains(&format!("run {id}: state "))
                && log.contains("not recorded: this instance's lease lapsed")
        },
    );
    a1.wait_for(PG_WAIT, "/healthz 503 while the name is held", || {
        a1.get("/healthz").status == 503
    });
    let rec = wait_state(&a2, &id, "interrupted", WAIT);
    a2.check(
        rec["Error"]
            .as_str()
            .is_some_and(|e| e.contains("stopped before the run finished")),
        format!("the claimer's end stays: {rec}"),
    );
    a2.sigterm();
    let stopped = a2.wait_exit(WAIT).is_some();
    a2.check(stopped, "the claimer stopped");
    a1.wait_for(
        PG_WAIT,
        "/healthz 200 once the name is claimed again",
        || a1.get("/healthz").status == 200,
    );
    let quick = accept(&a1, "quick");
    wait_state(&a1, &quick, "finished", PG_WAIT);
    a1.kill9();
}

/// An instance started while the database was down, under the name of a
/// live one (a mistake the start cannot catch): it answers `/healthz` 503
/// while the other holds the name; when that one is killed it claims the
/// name and adopts every run held under it, also those the other
/// recorded after this one started.
#[test]
fn an_instance_that_claims_its_name_late_adopts_every_run_of_the_name() {
    let pg = Pg::start("pgrun_late");
    let db = pg.database("late");
    let first = instance_dir(&db, "pgrun_late_first", "a", LEASE);
    let mut d1 = Trigd::start(&first);
    pg.stop(false);
    let second = instance_dir(&db, "pgrun_late_second", "a", LEASE);
    let d2 = Trigd::start(&second);
    pg.start_again();
    d2.wait_for(PG_WAIT, "the name found held", || {
        std::fs::read_to_string(&d2.stderr_log)
            .is_ok_and(|l| l.contains("the instance name \"a\" is held by another process"))
    });
    d2.wait_for(PG_WAIT, "/healthz 503 while the name is held", || {
        d2.get("/healthz").status == 503
    });
    let id = accept(&d1, "slow");
    wait_state(&d1, &id, "running", PG_WAIT);
    d1.kill9();
    let rec = wait_state(&d2, &id, "interrupted", PG_WAIT);
    d2.check(
        rec["Error"]
            .as_str()
            .is_some_and(|e| e.contains("stopped before the run finished")),
        format!("ended by the claimer: {rec}"),
    );
    d2.wait_for(PG_WAIT, "/healthz 200 once the name is claimed", || {
        d2.get("/healthz").status == 200
    });
}
