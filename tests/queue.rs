//! Calls from cron and scripts: sync runs wait for a slot (bounded by
//! `queue_timeout`), a full queue answers 503 with `Retry-After`, every
//! request of a connection flood gets a complete answer, idempotency keys
//! start one run per key (also across `kill -9`), accepted async runs run
//! after a crash in their order, and a full state disk refuses new runs
//! without losing accepted ones.

use std::collections::BTreeSet;
use std::fs;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::Duration;

use serde_json::{json, Value};

use crate::api::GATE;
use crate::util::*;

fn api(extra: &str) -> String {
    format!("/api?api_key={KEY}&program_id=1{extra}")
}

/// A program whose only function appends its value `v` to `work/ran`.
const APPEND: &str = r#"
id = 1
name = "append"
[[functions]]
name = "append"
workdir = "../work"
steps = [{ shell = 'echo "$v" >> ran; sleep 0.2; printf "%s" "$v"' }]
[functions.webhook]
outputs = ["v"]
"#;

/// Lines of `work/ran`.
fn ran(dir: &TestDir) -> Vec<String> {
    dir.lines("work/ran")
}

/// [`APPEND`] without its pause, and `gate`, which holds its slot until
/// `work/release` exists.
fn append_behind_gate() -> String {
    let mut programs = APPEND.replace("sleep 0.2; ", "");
    programs.push_str(
        r#"
[[functions]]
name = "gate"
workdir = "../work"
timeout = "30s"
steps = [{ shell = 'echo "$$" >> started; while [ ! -e release ] && [ -e "$PWD" ]; do sleep 0.02; done' }]
[functions.webhook]
"#,
    );
    programs
}

/// Start program 1's `gate` (async) and wait until it runs, holding its
/// slot until `work/release` exists; its run id.
fn hold_slot(t: &Trigd, dir: &TestDir) -> String {
    let r = t.post(&api("&function=gate&run_async=true"));
    let id = r.run_id(&r.ok());
    t.wait_for(WAIT, "the gate run to start", || dir.exists("work/started"));
    id
}

/// Accept `n` async runs of `append` with the values `0`, `1`, …; their ids.
fn queue_appends(t: &Trigd, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let r = t.post(&api(&format!(
                "&function=append&run_async=true&variables={i}"
            )));
            r.run_id(&r.ok())
        })
        .collect()
}

/// A reply, or why the exchange failed.
pub type Exchange = Result<Reply, String>;

/// Run `n` requests over `conns` client threads released together; each
/// reply (or the exchange's failure) in request order.
pub fn burst(
    t: &Trigd,
    conns: usize,
    n: usize,
    req: impl Fn(usize) -> (String, Vec<(String, String)>) + Send + Sync + 'static,
) -> Vec<Exchange> {
    let next = Arc::new(AtomicUsize::new(0));
    let out: Arc<Mutex<Vec<Option<Exchange>>>> =
        Arc::new(Mutex::new((0..n).map(|_| None).collect()));
    let go = Arc::new(Barrier::new(conns));
    let req = Arc::new(req);
    let handles: Vec<_> = (0..conns)
        .map(|_| {
            let (c, next, out, go, req) = (
                t.client(),
                Arc::clone(&next),
                Arc::clone(&out),
                Arc::clone(&go),
                Arc::clone(&req),
            );
            thread::spawn(move || {
                go.wait();
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= n {
                        return;
                    }
                    let (path, headers) = req(i);
                    let h: Vec<(&str, &str)> = headers
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str()))
                        .collect();
                    let r = c.try_request("POST", &path, &h, b"");
                    out.lock().unwrap()[i] = Some(r);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("client thread");
    }
    let v = std::mem::take(&mut *out.lock().unwrap());
    v.into_iter()
        .map(|r| r.expect("every request was sent"))
        .collect()
}

#[test]
fn sync_burst_of_200_over_64_connections_with_4_slots_all_succeed() {
    let (dir, t) = serve(
        "queue_sync_burst",
        "max_concurrent_runs = 4\nmax_connections = 256\nqueue_timeout = \"50s\"",
        &[(
            "count.toml",
            r#"
id = 1
name = "count"
[[functions]]
name = "count"
workdir = "../work"
steps = [{ shell = 'touch running/$$; ls running | wc -l >> counts; sleep 0.05; rm running/$$; printf ok' }]
[functions.webhook]
"#,
        )],
    );
    dir.mkdir("work/running");
    let replies = burst(&t, 64, 200, |_| (api(""), vec![]));
    for r in &replies {
        match r {
            Ok(r) => {
                r.check_eq(&r.ok()["Result"], &json!(["ok"]), "Result");
            }
            Err(e) => panic!("a request got no answer: {e}"),
        }
    }
    let counts: Vec<usize> = dir
        .read("work/counts")
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(counts.len(), 200, "every request ran once");
    let most = counts.iter().max().copied().unwrap_or(0);
    assert!(most <= 4, "{most} runs at once with 4 slots");
}

#[test]
fn queue_full_is_503_busy_with_retry_after_for_sync_and_async() {
    let (dir, t) = serve(
        "queue_full",
        "max_concurrent_runs = 1\nmax_queued_runs = 2",
        &[("gate.toml", GATE)],
    );
    // 30 at once, the slot free: exactly the slot and the 2 queue places
    // are given (gate runs hold them until released).
    let replies = burst(&t, 30, 30, |_| {
        (api("&function=gate&run_async=true"), vec![])
    });
    let accepted = replies
        .iter()
        .filter(|r| r.as_ref().is_ok_and(|r| r.status == 200))
        .count();
    assert_eq!(accepted, 3, "accepted with 1 slot and 2 queue places");
    t.wait_for(WAIT, "the gate run to start", || dir.exists("work/started"));
    for extra in ["&function=quick&run_async=true", "&function=quick"] {
        let r = t.post(&api(extra));
        let v = r.err(503, "busy");
        let after: u64 = r
            .header("Retry-After")
            .and_then(|h| h.trim().parse().ok())
            .unwrap_or_else(|| r.fail("Retry-After with a number of seconds"));
        r.check(after >= 1, "Retry-After is at least 1");
        r.check_eq(&v["RetryAfter"], &json!(after), "RetryAfter field");
    }
    dir.write("work/release", "");
    let h = t.get("/healthz");
    h.ok();
    t.wait_for(WAIT, "the queue to drain", || {
        t.get("/healthz").ok()["RunsQueued"] == json!(0)
    });
}

#[test]
fn async_runs_take_half_the_slots_and_a_sync_call_starts_beside_their_backlog() {
    // 3 slots: 2 for async runs (the default, half rounded up). Without
    // the limit the third gate would take the last slot and the sync call
    // would wait until `queue_timeout` (503).
    let (dir, t) = serve(
        "async_half",
        "max_concurrent_runs = 3\nqueue_timeout = \"3s\"",
        &[("append.toml", &append_behind_gate())],
    );
    let gates: Vec<String> = (0..3)
        .map(|_| {
            let r = t.post(&api("&function=gate&run_async=true"));
            r.run_id(&r.ok())
        })
        .collect();
    t.wait_for(WAIT, "two gate runs to start", || {
        dir.lines("work/started").len() == 2
    });
    let h = t.get("/healthz").ok();
    assert_eq!(h["RunsQueued"], json!(1), "the third waits: {h}");
    let m = t.get("/metrics").status_is(200).text();
    for line in [
        "trigd_run_slots 3",
        "trigd_async_run_slots 2",
        "trigd_runs_in_flight 2",
        "trigd_runs_queued 1",
    ] {
        assert!(
            m.lines().any(|l| l == line),
            "no {line:?} in /metrics:\n{m}"
        );
    }
    let r = t.post(&api("&function=append&variables=sync"));
    let v = r.ok();
    r.check_eq(&v["Result"], &json!(["sync"]), "the sync call ran");
    assert_eq!(dir.lines("work/started").len(), 2, "still two gates");
    assert_eq!(run_record(&t, &gates[2])["State"], json!("queued"));
    dir.write("work/release", "");
    for id in &gates {
        wait_run_state(&t, id, "finished");
    }
    assert_eq!(dir.lines("work/started").len(), 3);
}

#[test]
fn sync_run_waits_for_a_function_at_its_concurrency() {
    let prog = r#"
id = 1
name = "one"
[[functions]]
name = "one"
workdir = "../work"
concurrency = 1
steps = [{ shell = 'touch running/$$; ls running | wc -l >> counts; sleep 0.2; rm running/$$; printf ok' }]
[functions.webhook]
"#;
    let (dir, t) = serve("queue_fn_concurrency", "", &[("one.toml", prog)]);
    dir.mkdir("work/running");
    let replies = burst(&t, 4, 4, |_| (api(""), vec![]));
    for r in replies {
        let r = r.unwrap_or_else(|e| panic!("{e}"));
        r.check_eq(&r.ok()["Result"], &json!(["ok"]), "Result");
    }
    let counts = dir.read("work/counts");
    assert!(counts.lines().all(|l| l.trim() == "1"), "{counts}");
}

/// The flood of the bug report: 200 async POSTs, each on a new connection
/// with `Connection: close`, from 16 threads released together, 4 slots, a
/// queue of 50 and a program that sleeps 1 s; 20 times over. Every request
/// gets a complete answer: 200, or 503 `busy` with `Retry-After`.
#[test]
fn every_request_of_a_connection_flood_is_answered() {
    let prog = r#"
id = 1
name = "sleep"
[[functions]]
name = "sleep"
command = ["sleep", "1"]
[functions.webhook]
"#;
    let (_dir, t) = serve(
        "queue_flood",
        "max_concurrent_runs = 4\nmax_queued_runs = 50\nauth_failures_per_minute = 0",
        &[("sleep.toml", prog)],
    );
    let mut counts = [0usize; 2];
    for round in 0..20 {
        let replies = burst(&t, 16, 200, |_| (api("&run_async=true"), vec![]));
        for r in replies {
            let r = r.unwrap_or_else(|e| panic!("round {round}: a request got no answer: {e}"));
            match r.status {
                200 => counts[0] += 1,
                503 => {
                    r.err(503, "busy");
                    r.check(r.header("Retry-After").is_some(), "Retry-After");
                    counts[1] += 1;
                }
                s => r.fail(format!("round {round}: status {s}")),
            }
        }
    }
    eprintln!("flood: {} accepted, {} refused", counts[0], counts[1]);
}

#[test]
fn the_same_idempotency_key_20_times_at_once_starts_one_run_also_after_kill9() {
    let (dir, mut t) = serve("queue_idempotency", "", &[("append.toml", APPEND)]);
    let send = |t: &Trigd| {
        burst(t, 20, 20, |i| {
            let extra = if i % 2 == 0 { "&run_async=true" } else { "" };
            (
                api(&format!("&variables=once{extra}")),
                vec![("Idempotency-Key".into(), "nightly-2026-11-23".into())],
            )
        })
    };
    let first = send(&t);
    let mut runs = BTreeSet::new();
    for r in &first {
        let r = r.as_ref().unwrap_or_else(|e| panic!("{e}"));
        let v = r.ok();
        runs.insert(r.run_id(&v));
    }
    assert_eq!(runs.len(), 1, "one run id for one key: {runs:?}");
    let run = runs.into_iter().next().unwrap();
    wait_run_state(&t, &run, "finished");
    assert_eq!(ran(&dir), ["once"], "the program ran once");
    // The first start after the key's run rewrites the key log with the
    // key marked started; the second reads that file (it lost every such
    // key once).
    for restart in ["kill -9", "a second kill -9"] {
        t.kill9();
        t.restart();
        for r in send(&t) {
            let r = r.unwrap_or_else(|e| panic!("{e}"));
            let v = r.ok();
            r.check_eq(
                r.run_id(&v),
                run.clone(),
                &format!("Run of a repeat after {restart}"),
            );
            r.check_eq(&v["Result"], &json!(["once"]), "Result of the original");
            r.check_eq(
                r.header("Idempotent-Replayed"),
                Some("true"),
                "replay header",
            );
        }
        assert_eq!(ran(&dir), ["once"], "nothing ran again after {restart}");
    }
    // The same key with another request is refused; another key runs.
    let other = api("&variables=twice");
    let r = t.client().request(
        "POST",
        &other,
        &[("Idempotency-Key", "nightly-2026-11-23")],
        b"",
    );
    r.err(422, "idempotency_key_reused");
    let r = t
        .client()
        .request("POST", &other, &[("Idempotency-Key", "nightly-2")], b"");
    r.check_eq(&r.ok()["Result"], &json!(["twice"]), "a new key runs");
    for bad in ["", &"x".repeat(256), "caf\u{e9}"] {
        let r = t
            .client()
            .request("POST", &other, &[("Idempotency-Key", bad)], b"");
        let v = r.err(400, "invalid_parameter");
        r.check_eq(&v["Parameter"], &json!("Idempotency-Key"), "Parameter");
    }
    // Two keys: which one was meant is not guessed.
    let two = [("Idempotency-Key", "d1"), ("Idempotency-Key", "d2")];
    let r = t.client().request("POST", &other, &two, b"");
    let v = r.err(400, "invalid_parameter");
    r.check_eq(&v["Parameter"], &json!("Idempotency-Key"), "Parameter");
    assert_eq!(ran(&dir), ["once", "twice"]);
}

/// A repeat of a failed sync call gets the failed call's answer, its
/// `Stderr` (the stderr's last lines, untrimmed) included, also after a
/// restart: it used to get the record's `Error` there.
#[test]
fn a_repeat_of_a_failed_call_gets_the_same_answer_also_after_a_restart() {
    const FAILS: &str = r#"
id = 1
name = "fails"
[[functions]]
name = "fails"
steps = [{ shell = 'echo out1; echo line-a >&2; echo line-b >&2; exit 3' }]
[functions.webhook]
"#;
    let (_dir, mut t) = serve("queue_failed_repeat", "", &[("fails.toml", FAILS)]);
    let call = |t: &Trigd| {
        t.client()
            .request("POST", &api(""), &[("Idempotency-Key", "nf1")], b"")
    };
    let first = call(&t);
    let want = first.err(500, "run_failed");
    first.check_eq(&want["Stderr"], &json!("line-a\nline-b\n"), "Stderr");
    for when in ["at once", "after kill -9"] {
        if when != "at once" {
            t.kill9();
            t.restart();
        }
        let again = call(&t);
        let got = again.err(500, "run_failed");
        again.check_eq(&got, &want, &format!("the answer of a repeat {when}"));
        again.check_eq(
            again.header("Idempotent-Replayed"),
            Some("true"),
            "replay header",
        );
    }
}

#[test]
fn kill9_with_100_queued_async_runs_runs_all_after_restart_in_order_once() {
    let programs = append_behind_gate();
    let (dir, mut t) = serve(
        "queue_kill9_100",
        "max_concurrent_runs = 1",
        &[("append.toml", &programs)],
    );
    let gate = hold_slot(&t, &dir);
    let ids = queue_appends(&t, 100);
    t.kill9();
    // Let the orphaned gate program end.
    dir.write("work/release", "");
    t.restart();
    t.wait_for(
        Duration::from_secs(50),
        "100 runs after the restart",
        || ran(&dir).len() >= 100,
    );
    for id in &ids {
        wait_run_state(&t, id, "finished");
    }
    let want: Vec<String> = (0..100).map(|i| i.to_string()).collect();
    assert_eq!(ran(&dir), want, "each run once, in the order accepted");
    let v = run_record(&t, &gate);
    assert_eq!(v["State"], json!("interrupted"), "{v}");
}

#[test]
fn retry_on_restart_runs_an_interrupted_run_again() {
    let prog = r#"
id = 1
name = "retry"
[[functions]]
name = "gate"
workdir = "../work"
retry_on_restart = true
steps = [{ shell = 'echo "$$" >> started; while [ ! -e release ] && [ -e "$PWD" ]; do sleep 0.02; done; printf done' }]
[functions.webhook]
"#;
    let (dir, mut t) = serve("queue_retry", "", &[("retry.toml", prog)]);
    let r = t.post(&api("&run_async=true"));
    let id = r.run_id(&r.ok());
    t.wait_for(WAIT, "the run to start", || dir.exists("work/started"));
    t.kill9();
    dir.write("work/release", "");
    t.restart();
    let v = wait_run_state(&t, &id, "finished");
    assert_eq!(v["Result"], json!(["done"]), "{v}");
    assert_eq!(dir.read("work/started").lines().count(), 2, "started twice");
}

/// A program whose `hold` function records its run id (`work/id`), its
/// process group (`work/pgid`: the step leads its group) and a child in
/// that group (`work/child`), then runs until `work` is removed (at most
/// 300 s): what a killed trigd leaves running.
const LEFT_RUNNING: &str = r#"
id = 1
name = "hold"
[[functions]]
name = "hold"
workdir = "../work"
timeout = "300s"
steps = [{ shell = 'echo "$TRIGD_RUN_ID" > id; (i=0; while [ $i -lt 3000 ] && [ -e "$PWD" ]; do sleep 0.1; i=$((i+1)); done) & echo $! > child; echo $$ > pgid; wait' }]
[functions.webhook]
"#;

/// The pid in `work/<name>`.
fn pid_in(dir: &TestDir, name: &str) -> u32 {
    dir.read(&format!("work/{name}")).trim().parse().unwrap()
}

#[test]
fn a_restart_stops_the_process_group_a_killed_trigd_left_running() {
    let (dir, mut t) = serve("queue_orphans", "", &[("hold.toml", LEFT_RUNNING)]);
    let r = t.post(&api("&run_async=true"));
    let id = r.run_id(&r.ok());
    // Written, not only created: the shell's `>` makes the file first.
    t.wait_for(WAIT, "the run to start", || {
        dir.exists("work/pgid") && dir.read("work/pgid").ends_with('\n')
    });
    assert_eq!(
        dir.read("work/id").trim(),
        id,
        "TRIGD_RUN_ID is the run's id"
    );
    let (pgid, child) = (pid_in(&dir, "pgid"), pid_in(&dir, "child"));
    t.kill9();
    assert!(
        pid_alive(pgid) && pid_alive(child),
        "the run outlives trigd"
    );
    t.restart();
    t.wait_for(WAIT, "the old process group to be gone", || {
        !pid_alive(pgid) && !pid_alive(child)
    });
    let v = wait_run_state(&t, &id, "interrupted");
    assert_eq!(v["State"], json!("interrupted"), "{v}");
    let line = format!("run {id}: stopped process group {pgid} that the previous trigd left");
    t.check(
        t.stderr_tail().contains(&line),
        format!("log line {line:?}"),
    );
    let metric = "trigd_orphan_groups_stopped_total{how=\"term\"} 1";
    t.check(t.get("/metrics").text().contains(metric), metric);
}

#[test]
fn a_run_retried_on_restart_never_overlaps_its_old_process() {
    // The first attempt leaves `again` and runs until stopped, logging its
    // end on SIGTERM; the second one finishes at once. (The first one's
    // stdout and stderr, pipes nobody reads once trigd is killed, are
    // /dev/null: sh reports a `sleep` ended by SIGTERM on stderr and would
    // die of SIGPIPE before its trap.)
    let prog = r#"
id = 1
name = "retry"
[[functions]]
name = "twice"
workdir = "../work"
timeout = "300s"
retry_on_restart = true
steps = [{ shell = 'echo "start $$" >> log; if [ -e again ]; then printf done; exit 0; fi; exec >/dev/null 2>&1; trap "echo end $$ >> log; exit 0" TERM; : > again; i=0; while [ $i -lt 3000 ] && [ -e "$PWD" ]; do sleep 0.1; i=$((i+1)); done' }]
[functions.webhook]
"#;
    let (dir, mut t) = serve("queue_retry_orphan", "", &[("retry.toml", prog)]);
    let r = t.post(&api("&run_async=true"));
    let id = r.run_id(&r.ok());
    t.wait_for(WAIT, "the first attempt to start", || {
        dir.exists("work/again")
    });
    let first = dir.lines("work/log");
    t.kill9();
    t.restart();
    let v = wait_run_state(&t, &id, "finished");
    assert_eq!(v["Result"], json!(["done"]), "{v}");
    let log = dir.lines("work/log");
    let old = first[0].strip_prefix("start ").unwrap();
    assert_eq!(log.len(), 3, "{log:?}");
    assert_eq!(
        log[..2],
        [format!("start {old}"), format!("end {old}")],
        "{log:?}"
    );
    assert!(log[2].starts_with("start ") && log[2] != log[0], "{log:?}");
    assert!(!pid_alive(old.parse().unwrap()), "the old process is gone");
}

/// Mount a 4 MiB tmpfs on `path`; `false` (with a message) when this
/// machine does not allow it, unless TRIGD_REQUIRE_TMPFS=1.
fn mount_tmpfs(path: &std::path::Path) -> bool {
    fs::create_dir_all(path).unwrap();
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=4m", "tmpfs"])
        .arg(path)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("TRIGD_REQUIRE_TMPFS").as_deref() != Ok("1"),
            "cannot mount a tmpfs (TRIGD_REQUIRE_TMPFS=1): run the tests as root"
        );
        eprintln!("SKIPPED full_state_disk test: cannot mount a tmpfs (not root?)");
    }
    ok
}

/// Unmounts the tmpfs when the test ends, however it ends.
struct Unmount(std::path::PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Fill the file system of `dir` to the last byte.
fn fill(dir: &std::path::Path) {
    let mut f = fs::File::create(dir.join("fill")).unwrap();
    let block = vec![7u8; 64 << 10];
    let mut size = block.len();
    while size > 0 {
        if std::io::Write::write_all(&mut f, &block[..size]).is_err() {
            size /= 2;
        }
    }
}

#[test]
fn full_state_disk_refuses_new_runs_loses_none_and_recovers() {
    // The Result (5000 bytes) cannot fit in a tmpfs page left over.
    let prog = r#"
id = 1
name = "big"
[[functions]]
name = "gate"
workdir = "../work"
steps = [{ shell = 'echo "$$" >> started; while [ ! -e release ] && [ -e "$PWD" ]; do sleep 0.02; done; head -c 5000 /dev/zero | tr "\0" x' }]
[functions.webhook]
[[functions]]
name = "quick"
command = ["printf", "quick"]
[functions.webhook]
"#;
    let dir = setup("queue_disk_full", "", &[("big.toml", prog)]);
    let state = dir.path("state");
    if !mount_tmpfs(&state) {
        return;
    }
    let _unmount = Unmount(state.clone());
    let mut t = Trigd::start(&dir);
    let id = hold_slot(&t, &dir);
    fill(&state);
    // The last page of runs.log may hold a few more short lines; past
    // them, every new run is refused.
    for extra in ["&function=quick&run_async=true", "&function=quick"] {
        let mut refused = false;
        for _ in 0..40 {
            let r = t.post(&api(extra));
            if r.status == 200 {
                continue;
            }
            r.err(503, "disk_full");
            r.check(r.header("Retry-After").is_some(), "Retry-After");
            refused = true;
            break;
        }
        assert!(refused, "40 runs accepted on a full disk");
    }
    // The accepted run ends while the disk is full: its end is kept and
    // served.
    dir.write("work/release", "");
    wait_run_state(&t, &id, "finished");
    let v: Value = t.get("/healthz").ok();
    assert!(v["StatesUnwritten"].as_u64() >= Some(1), "{v}");
    assert!(!fs::read_to_string(state.join("runs.log"))
        .unwrap()
        .contains("xxxxx"));
    // Space returns: the kept state is written, new runs are accepted.
    fs::remove_file(state.join("fill")).unwrap();
    t.wait_for(WAIT, "the kept state to be written", || {
        fs::read_to_string(state.join("runs.log")).is_ok_and(|s| s.contains("xxxxx"))
    });
    let r = t.post(&api("&function=quick"));
    r.check_eq(
        &r.ok()["Result"],
        &json!(["quick"]),
        "a run after space returned",
    );
    t.kill9();
    t.restart();
    let v = run_record(&t, &id);
    assert_eq!(v["State"], json!("finished"), "{v}");
    assert_eq!(v["Result"][0].as_str().map(str::len), Some(5000));
    drop(t);
}

#[test]
fn sigterm_keeps_queued_runs_for_the_next_start() {
    let programs = append_behind_gate();
    let (dir, mut t) = serve(
        "queue_sigterm",
        "max_concurrent_runs = 1\nshutdown_grace = \"300ms\"\nkill_grace = \"1s\"",
        &[("append.toml", &programs)],
    );
    let gate = hold_slot(&t, &dir);
    let ids = queue_appends(&t, 3);
    t.sigterm();
    let status = t.wait_exit(Duration::from_secs(20));
    assert!(
        status.is_some_and(|s| s.success()),
        "exit status {status:?}"
    );
    assert!(ran(&dir).is_empty(), "nothing queued ran during the stop");
    t.restart();
    t.wait_for(WAIT, "the queued runs after the restart", || {
        ran(&dir).len() >= 3
    });
    assert_eq!(ran(&dir), ["0", "1", "2"]);
    let v = run_record(&t, &gate);
    assert_eq!(v["State"], json!("interrupted"), "{v}");
    for id in &ids {
        wait_run_state(&t, id, "finished");
    }
}

#[test]
fn sync_and_async_runs_wait_in_one_fifo_queue() {
    let programs = append_behind_gate();
    let (dir, t) = serve(
        "queue_fifo",
        "max_concurrent_runs = 1",
        &[("append.toml", &programs)],
    );
    hold_slot(&t, &dir);
    let queued = |n: usize| t.get("/healthz").ok()["RunsQueued"] == json!(n);
    t.post(&api("&function=append&run_async=true&variables=a1"))
        .ok();
    let c = t.client();
    let sync = thread::spawn(move || c.post(&api("&function=append&variables=s")));
    t.wait_for(WAIT, "the sync run to wait in the queue", || queued(2));
    t.post(&api("&function=append&run_async=true&variables=a2"))
        .ok();
    dir.write("work/release", "");
    let r = sync.join().expect("sync client");
    r.check_eq(&r.ok()["Result"], &json!(["s"]), "the sync run's Result");
    t.wait_for(WAIT, "every run", || ran(&dir).len() >= 3);
    assert_eq!(ran(&dir), ["a1", "s", "a2"], "runs in arrival order");
}

#[test]
fn a_queued_hooks_file_run_runs_after_kill9() {
    let programs = append_behind_gate();
    let server = "max_concurrent_runs = 1\nhooks_files = [\"hooks.json\"]";
    let dir = setup("queue_hook_kill9", server, &[("append.toml", &programs)]);
    let hook = json!([{
        "id": "note",
        "execute-command": "/bin/sh",
        "command-working-directory": dir.path_str("work"),
        "pass-arguments-to-command": [
            {"source": "string", "name": "-c"},
            {"source": "string", "name": "echo hook >> ran"}
        ]
    }]);
    dir.write("hooks.json", &hook.to_string());
    let mut t = Trigd::start(&dir);
    hold_slot(&t, &dir);
    let r = t.post("/hooks/note");
    r.status_is(200);
    let queued = t.get("/healthz").ok()["RunsQueued"].clone();
    assert_eq!(queued, json!(1), "the hook's run waits behind the gate");
    t.kill9();
    dir.write("work/release", "");
    t.restart();
    t.wait_for(WAIT, "the hook's run after the restart", || {
        ran(&dir) == ["hook"]
    });
}

/// Program 1 of the memory test: `hold` takes `v`, waits for
/// `work/release` (bounded by its timeout) and prints `v`.
const HOLD: &str = r#"
id = 1
name = "hold"
[[functions]]
name = "hold"
workdir = "../work"
timeout = "120s"
steps = [{ shell = 'echo "$$" >> started; while [ ! -e release ] && [ -e "$PWD" ]; do sleep 0.02; done; printf "%s" "$v"' }]
[functions.webhook]
outputs = ["v"]
"#;

/// A public tool trigger taking `v` from a JSON body.
const HOLD_TOOL: &str = r#"
[[tools]]
name = "mem"
workspace = "ops"
[tools.environments.open]
public = true

[[tools.triggers]]
kind = "endpoint"
name = "hold"
method = "POST"
program = 1
function = "hold"
[tools.triggers.values]
v = { json = "v" }
"#;

/// A JSON body of about 1 MiB: `v` and some 170,000 small numbers, whose
/// parsed tree costs about ten times the text.
fn big_json(v: &str) -> Vec<u8> {
    let mut body = format!("{{\"v\":\"{v}\",\"pad\":[");
    let mut i = 0u32;
    while body.len() < (1 << 20) - 16 {
        body.push_str(&format!("{},", 10_000 + i % 90_000));
        i += 1;
    }
    body.push_str("0]}");
    body.into_bytes()
}

#[test]
fn waiting_requests_hold_their_values_not_their_bodies() {
    // 24 requests of 1 MiB of JSON, one run slot: 23 wait. Each kept its
    // body and parsed tree while it waited (~11 MiB a request).
    let dir = setup(
        "queue_memory",
        "max_concurrent_runs = 1\nqueue_timeout = \"120s\"",
        &[("hold.toml", HOLD)],
    );
    dir.append("config.toml", HOLD_TOOL);
    let t = Trigd::start(&dir);
    let idle = vm_rss_kb(t.pid()).unwrap_or(0);
    let n = 24;
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let c = t.client();
            thread::spawn(move || {
                let body = big_json(&format!("value-{i}"));
                let json = [("Content-Type", "application/json")];
                c.try_request("POST", "/tools/mem/open/hold", &json, &body)
            })
        })
        .collect();
    t.wait_for(Duration::from_secs(120), "one run and 23 waiting", || {
        dir.exists("work/started") && t.get("/healthz").ok()["RunsQueued"] == json!(n - 1)
    });
    let waiting = vm_rss_kb(t.pid()).unwrap_or(u64::MAX);
    dir.write("work/release", "");
    for (i, h) in handles.into_iter().enumerate() {
        let r = h.join().expect("client thread");
        let r = r.unwrap_or_else(|e| t.fail(format!("request {i} got no answer: {e}")));
        r.check_eq(&r.ok()["Result"], &json!([format!("value-{i}")]), "Result");
    }
    let grown_mib = waiting.saturating_sub(idle) / 1024;
    // The peak while the bodies were read and parsed, for the figures.
    let status = fs::read_to_string(format!("/proc/{}/status", t.pid())).unwrap_or_default();
    let peak = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .unwrap_or("");
    println!(
        "VmRSS idle {idle} kB, with {} waiting {waiting} kB (+{grown_mib} MiB); {peak}",
        n - 1
    );
    t.check(
        grown_mib < 64,
        format!(
            "{} waiting 1 MiB requests grew VmRSS by {grown_mib} MiB",
            n - 1
        ),
    );
}

#[test]
fn sync_runs_waiting_past_max_waiting_bytes_are_503_busy() {
    // One slot; the second run waits holding 60,000 bytes of values; a
    // third would make 120,000, past max_waiting_bytes.
    let dir = setup(
        "queue_waiting_bytes",
        "max_concurrent_runs = 1\nqueue_timeout = \"120s\"\nmax_waiting_bytes = 100000",
        &[("hold.toml", HOLD)],
    );
    dir.append("config.toml", HOLD_TOOL);
    let t = Trigd::start(&dir);
    let value = |c: char| c.to_string().repeat(60_000);
    let send = |v: String| {
        let c = t.client();
        thread::spawn(move || {
            let body = serde_json::to_vec(&json!({ "v": v })).unwrap();
            let json = [("Content-Type", "application/json")];
            c.try_request("POST", "/tools/mem/open/hold", &json, &body)
        })
    };
    let first = send(value('a'));
    t.wait_for(WAIT, "the first run to start", || {
        dir.exists("work/started")
    });
    let second = send(value('b'));
    t.wait_for(WAIT, "the second run to wait", || {
        t.get("/healthz").ok()["RunsQueued"] == json!(1)
    });
    let body = serde_json::to_vec(&json!({ "v": value('c') })).unwrap();
    let json = [("Content-Type", "application/json")];
    let r = t.request("POST", "/tools/mem/open/hold", &json, &body);
    let v = r.err(503, "busy");
    let after: u64 = r
        .header("Retry-After")
        .and_then(|h| h.trim().parse().ok())
        .unwrap_or_else(|| r.fail("Retry-After with a number of seconds"));
    r.check_eq(&v["RetryAfter"], &json!(after), "RetryAfter field");
    r.check(
        v["Error"]
            .as_str()
            .is_some_and(|e| e.contains("max_waiting_bytes")),
        "the answer names max_waiting_bytes",
    );
    dir.write("work/release", "");
    for (h, c) in [(first, 'a'), (second, 'b')] {
        let r = h.join().expect("client thread");
        let r = r.unwrap_or_else(|e| t.fail(format!("a request got no answer: {e}")));
        r.check_eq(&r.ok()["Result"], &json!([value(c)]), "Result");
    }
}

/// A trigger of [`HOLD_TOOL`]'s tool (appended after it): `hold` with the
/// body on stdin, async. A queued run of it is kept whole in memory (its
/// temporary body file lives as long as its job).
const HELD_TRIGGER: &str = r#"
[[tools.triggers]]
kind = "endpoint"
name = "held"
method = "POST"
program = 1
function = "hold"
stdin = "body"
[tools.triggers.values]
v = { json = "v" }
[tools.triggers.response]
run_async = true
"#;

#[test]
fn async_runs_queued_in_memory_count_against_max_waiting_bytes() {
    // One slot, 100,000 bytes. A queued run with a value of 30,000 bytes
    // holds 60,000 (the value in its job and in its record's copy); a
    // second one would pass the bound, until the first has started and
    // given its bytes back (round 2).
    let dir = setup(
        "queue_waiting_async",
        "max_concurrent_runs = 1\nmax_waiting_bytes = 100000",
        &[("hold.toml", HOLD)],
    );
    dir.append("config.toml", HOLD_TOOL);
    dir.append("config.toml", HELD_TRIGGER);
    let t = Trigd::start(&dir);
    let send = |c: char| {
        let body = serde_json::to_vec(&json!({ "v": c.to_string().repeat(30_000) })).unwrap();
        let json = [("Content-Type", "application/json")];
        t.request("POST", "/tools/mem/open/held", &json, &body)
    };
    let started = || dir.lines("work/started").len();
    let idle = || {
        let h = t.get("/healthz").ok();
        h["RunsQueued"] == json!(0) && h["RunsInFlight"] == json!(0)
    };
    for round in 1..=2 {
        send('a').ok();
        t.wait_for(WAIT, "the first run to start", || {
            started() == 2 * round - 1
        });
        send('b').ok();
        let v = send('c').err(503, "busy");
        t.check(
            v["Error"]
                .as_str()
                .is_some_and(|e| e.contains("max_waiting_bytes")),
            "the answer names max_waiting_bytes",
        );
        dir.write("work/release", "");
        t.wait_for(WAIT, "both runs to end", || {
            started() == 2 * round && idle()
        });
        fs::remove_file(dir.path_str("work/release")).expect("remove release");
    }
}

/// `trigd_state_fsyncs_total{file="runs.log"}` from `/metrics`.
pub fn run_log_fsyncs(t: &Trigd) -> u64 {
    let text = t.get("/metrics").status_is(200).text();
    let line = text
        .lines()
        .find(|l| l.starts_with("trigd_state_fsyncs_total{file=\"runs.log\"} "))
        .unwrap_or_else(|| panic!("no run log fsync counter in /metrics:\n{text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// 320 async accepts over 32 connections released together, while one
/// slot is held (so they all queue): each is on disk before it is
/// answered, and concurrent accepts share syncs of the run log (group
/// commit), which `trigd_state_fsyncs_total` counts: fewer syncs than
/// accepted runs.
#[test]
fn concurrent_async_accepts_share_fsyncs() {
    let programs = append_behind_gate();
    let (dir, t) = serve(
        "queue_group_commit",
        "max_concurrent_runs = 1",
        &[("append.toml", &programs)],
    );
    hold_slot(&t, &dir);
    let before = run_log_fsyncs(&t);
    let n = 320;
    let replies = burst(&t, 32, n, |i| {
        (
            api(&format!("&function=append&run_async=true&variables={i}")),
            vec![],
        )
    });
    for r in &replies {
        let r = r.as_ref().expect("every accept is answered");
        r.run_id(&r.ok());
    }
    let syncs = run_log_fsyncs(&t) - before;
    println!("{n} concurrent async accepts: {syncs} fsyncs of runs.log");
    assert!(syncs >= 1, "accepted runs must be synced: {syncs} fsyncs");
    assert!(
        syncs < n as u64,
        "{syncs} fsyncs for {n} accepts: none shared"
    );
    dir.write("work/release", "");
}

/// `kill -9` in the middle of a burst of async accepts over 32
/// connections: every run answered "Program started." survives the
/// restart and runs once (a run written but not yet answered may run
/// too; nothing answered is lost).
#[test]
fn every_answered_async_accept_survives_kill9_during_a_burst() {
    let programs = append_behind_gate();
    let (dir, mut t) = serve(
        "queue_group_commit_kill9",
        "max_concurrent_runs = 1",
        &[("append.toml", &programs)],
    );
    let gate = hold_slot(&t, &dir);
    let answered: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let next = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..32)
        .map(|_| {
            let (c, answered, next) = (t.client(), Arc::clone(&answered), Arc::clone(&next));
            thread::spawn(move || loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let path = api(&format!("&function=append&run_async=true&variables={i}"));
                match c.try_request("POST", &path, &[], b"") {
                    Ok(r) if r.status == 200 => {
                        let id = r.run_id(&r.ok());
                        answered.lock().unwrap().push((i.to_string(), id));
                    }
                    _ => return, // the server is gone
                }
            })
        })
        .collect();
    t.wait_for(WAIT, "200 answered accepts", || {
        answered.lock().unwrap().len() >= 200
    });
    t.kill9();
    for c in clients {
        c.join().expect("client thread");
    }
    let answered = std::mem::take(&mut *answered.lock().unwrap());
    dir.write("work/release", "");
    t.restart();
    for (_, id) in &answered {
        wait_run_state(&t, id, "finished");
    }
    let lines = ran(&dir);
    let once: BTreeSet<&String> = lines.iter().collect();
    for (v, id) in &answered {
        assert!(
            once.contains(v),
            "run {id} (value {v}) was answered but never ran"
        );
    }
    assert_eq!(once.len(), lines.len(), "no run ran twice");
    let v = run_record(&t, &gate);
    assert_eq!(v["State"], json!("interrupted"), "{v}");
}

/// One state dir, one server: a second `trigd serve` on the state dir of a
/// running one exits 1 naming the holder's pid, and the first serves on;
/// a start right after a `kill -9` is not refused (the lock goes with the
/// process).
#[test]
fn a_second_server_on_one_state_dir_is_refused_and_a_restart_after_kill9_is_not() {
    let (dir, mut t) = serve("queue_state_lock", "", &[("append.toml", APPEND)]);
    let config = dir.path_str("config.toml");
    let second = crate::util::cli::trigd(
        &["serve", "--config", &config, "--listen", "127.0.0.1:0"],
        None,
    );
    second.code_is(1);
    let want = format!("is in use by another trigd (pid {})", t.pid());
    second.check(
        second.stderr.contains("state_dir") && second.stderr.contains(&want),
        format!("the refusal names the state dir and {want}"),
    );
    t.post(&api("&variables=a")).ok();
    t.restart();
    t.post(&api("&variables=b")).ok();
    assert_eq!(ran(&dir), ["a", "b"]);
}
