//! Run records: `GET /api/runs/<id>` through a run's life, bounded output
//! capture, recovery after `kill -9` and a torn `runs.log`, graceful
//! SIGTERM, and per-function `concurrency`.

use std::time::Duration;

use serde_json::{json, Value};

use crate::api::{GATE, IN_OPS};
use crate::util::*;

fn run_url(id: &str, key: &str) -> String {
    format!("/api/runs/{id}?api_key={}", enc(key))
}

/// Start an async run of `program` (`extra` appended to the query); its id.
fn start_async(t: &Trigd, program: u64, extra: &str) -> String {
    let r = t.post(&format!(
        "/api?api_key={KEY}&program_id={program}&run_async=true{extra}"
    ));
    let v = r.ok();
    r.check_eq(&v["Success"], &json!("Program started."), "Success");
    r.run_id(&v)
}

fn is_timestamp(v: &Value) -> bool {
    // RFC 3339: 2024-01-02T03:04:05Z (or an offset), optional fraction.
    v.as_str().is_some_and(|s| {
        let b = s.as_bytes();
        s.len() >= 20
            && b[4] == b'-'
            && b[7] == b'-'
            && (b[10] == b'T' || b[10] == b't')
            && b[13] == b':'
    })
}

#[test]
fn async_run_status_goes_from_queued_or_running_to_finished() {
    let (dir, t) = serve("runs_lifecycle", "", &[("gate.toml", GATE)]);
    let id = start_async(&t, 1, "&function=gate");
    let r = t.get(&run_url(&id, KEY));
    let v = r.ok();
    r.check_eq(&v["Run"], &json!(id), "Run");
    r.check(
        v["State"] == json!("queued") || v["State"] == json!("running"),
        "State right after an async start is queued or running",
    );
    r.check_eq(&v["Program"], &json!(1), "Program");
    r.check_eq(&v["Function"], &json!("gate"), "Function");
    r.check(
        is_timestamp(&v["CreatedAt"]),
        "CreatedAt is an RFC 3339 time",
    );
    r.check(
        v.get("Result").is_none_or(Value::is_null),
        "no Result before the run finished",
    );

    t.wait_for(WAIT, "the run to start", || dir.exists("work/started"));
    let r = t.get(&run_url(&id, KEY));
    r.check_eq(
        &r.ok()["State"],
        &json!("running"),
        "State while the program runs",
    );

    dir.write("work/release", "");
    let v = wait_run_state(&t, &id, "finished");
    let check = |cond: bool, msg: &str| t.check(cond, format!("{msg}; status: {v}"));
    check(
        v["Result"] == json!(["released"]),
        "Result of the finished run",
    );
    check(
        is_timestamp(&v["StartedAt"]),
        "StartedAt is an RFC 3339 time",
    );
    check(
        is_timestamp(&v["FinishedAt"]),
        "FinishedAt is an RFC 3339 time",
    );
    check(
        v.get("Error").is_none_or(Value::is_null),
        "no Error for a finished run",
    );
    let steps = v["Steps"].as_array().cloned().unwrap_or_default();
    check(steps.len() == 1, "one entry in Steps");
    check(steps[0]["ExitCode"] == json!(0), "Steps[0].ExitCode");
    check(steps[0]["Kind"].is_string(), "Steps[0].Kind");
    check(
        steps[0]["StdoutTruncated"] == json!(false),
        "Steps[0].StdoutTruncated",
    );
    check(
        steps[0]["StderrTruncated"] == json!(false),
        "Steps[0].StderrTruncated",
    );
    check(steps[0]["DurationMs"].is_u64(), "Steps[0].DurationMs");

    // A sync run is recorded as well.
    let r = t.post(&format!("/api?api_key={KEY}&program_id=1&function=quick"));
    let id = r.run_id(&r.ok());
    let r = t.get(&run_url(&id, KEY));
    let v = r.ok();
    r.check_eq(
        &v["State"],
        &json!("finished"),
        "State of a completed sync run",
    );
    r.check_eq(&v["Result"], &json!(["quick"]), "Result");
    r.check_eq(&v["Function"], &json!("quick"), "Function");
}

#[test]
fn failed_and_timed_out_runs_show_error_and_exit_codes() {
    let fail = r#"
id = 1
name = "fail"

[[functions]]
name = "fail"
steps = [
  { command = ["printf", "first"] },
  { shell = "echo broken >&2; exit 3" },
  { command = ["printf", "never"] },
]
[functions.webhook]
"#;
    let slow = r#"
id = 2
name = "slow"

[[functions]]
name = "slow"
timeout = "1s"
command = ["sleep", "30"]
[functions.webhook]
"#;
    let (_dir, t) = serve(
        "runs_failed",
        r#"kill_grace = "1s""#,
        &[("fail.toml", fail), ("slow.toml", slow)],
    );
    let failed = start_async(&t, 1, "");
    let timed_out = start_async(&t, 2, "");

    let v = wait_run_state(&t, &failed, "failed");
    let check = |cond: bool, msg: &str| t.check(cond, format!("{msg}; status: {v}"));
    check(!v["Error"].is_null(), "a failed run has an Error");
    let steps = v["Steps"].as_array().cloned().unwrap_or_default();
    check(steps.len() == 2, "two steps started (the third never ran)");
    check(steps[0]["ExitCode"] == json!(0), "Steps[0].ExitCode");
    check(steps[1]["ExitCode"] == json!(3), "Steps[1].ExitCode");
    check(is_timestamp(&v["FinishedAt"]), "FinishedAt");

    let v = wait_run_state(&t, &timed_out, "timed_out");
    t.check(
        !v["Error"].is_null(),
        format!("a timed-out run has an Error; status: {v}"),
    );
}

#[test]
fn run_status_needs_access_to_the_program() {
    let plain = r#"
id = 1
name = "plain"

[[functions]]
name = "f"
command = ["printf", "plain"]
[functions.webhook]
"#;
    let (_dir, t) = serve(
        "runs_access",
        "",
        &[("plain.toml", plain), ("ops.toml", IN_OPS)],
    );
    let r = t.post(&format!("/api?api_key={KEY}&program_id=1"));
    let plain_id = r.run_id(&r.ok());
    let r = t.post(&format!("/api?api_key={KEY_OPS}&program_id=2"));
    let ops_id = r.run_id(&r.ok());

    t.get(&run_url(&plain_id, KEY)).ok();
    t.get(&run_url(&plain_id, KEY_OPS))
        .err(404, "run_not_found");
    t.get(&run_url(&plain_id, KEY_P2)).err(404, "run_not_found");
    for key in [KEY, KEY_OPS, KEY_P2] {
        t.get(&run_url(&ops_id, key)).ok();
    }
    let auth = format!("Bearer {KEY}");
    let r = t.request(
        "GET",
        &format!("/api/runs/{plain_id}"),
        &[("Authorization", &auth)],
        b"",
    );
    r.check_eq(&r.ok()["Run"], &json!(plain_id), "Run (bearer)");
    // Unknown ids look the same as ids without access.
    t.get(&run_url("0123456789abcdef0123456789abcdef", KEY))
        .err(404, "run_not_found");
    t.get(&run_url("not-a-run-id", KEY))
        .err(404, "run_not_found");
    // Keys are still required.
    t.get(&format!("/api/runs/{plain_id}"))
        .err(401, "missing_api_key");
    t.get(&run_url(&plain_id, "not-a-key"))
        .err(401, "invalid_api_key");
}

#[test]
fn huge_output_is_truncated_and_memory_stays_bounded() {
    let prog = r#"
id = 1
name = "flood"

[[functions]]
name = "flood"
timeout = "60s"
steps = [
  { command = ["head", "-c", "50000000", "/dev/zero"] },
  { shell = "head -c 50000000 /dev/zero >&2; printf small" },
]
[functions.webhook]
"#;
    let (_dir, t) = serve(
        "runs_huge_output",
        "max_output_bytes = 65536",
        &[("flood.toml", prog)],
    );
    let pid = t.pid();
    let mut max_rss = vm_rss_kb(pid).unwrap_or(0);
    let id = start_async(&t, 1, "");
    let mut last = Value::Null;
    let done = wait_until(Duration::from_secs(60), || {
        if let Some(kb) = vm_rss_kb(pid) {
            max_rss = max_rss.max(kb);
        }
        last = run_record(&t, &id);
        last["State"] != json!("queued") && last["State"] != json!("running")
    });
    t.check(
        done,
        format!("the run did not end within 60s; last status: {last}"),
    );
    let v = last;
    let check = |cond: bool, msg: &str| {
        let mut shown = v.to_string();
        shown.truncate(3000);
        t.check(cond, format!("{msg}; status: {shown}"))
    };
    check(v["State"] == json!("finished"), "State");
    check(
        v["Steps"][0]["StdoutTruncated"] == json!(true),
        "Steps[0].StdoutTruncated",
    );
    check(
        v["Steps"][1]["StderrTruncated"] == json!(true),
        "Steps[1].StderrTruncated",
    );
    check(
        v["Steps"][1]["StdoutTruncated"] == json!(false),
        "Steps[1].StdoutTruncated",
    );
    check(
        v["Result"][0]
            .as_str()
            .is_some_and(|s| !s.is_empty() && s.len() <= 65536),
        "Result[0] is the captured text, at most max_output_bytes",
    );
    check(v["Result"][1] == json!("small"), "Result[1]");
    t.get("/healthz").ok();
    if let Some(kb) = vm_rss_kb(pid) {
        max_rss = max_rss.max(kb);
    }
    t.check(
        max_rss < 100 * 1024,
        format!("the server's VmRSS reached {max_rss} kB (limit 100 MB)"),
    );
}

#[test]
fn kill9_then_restart_interrupts_running_runs_and_runs_queued_ones() {
    let (dir, mut t) = serve(
        "runs_kill9",
        "max_concurrent_runs = 2\nmax_concurrent_async_runs = 2",
        &[("gate.toml", GATE)],
    );
    let ids: Vec<String> = (0..4)
        .map(|_| start_async(&t, 1, "&function=gate"))
        .collect();
    t.wait_for(WAIT, "two runs to start", || {
        dir.lines("work/started").len() >= 2
    });
    t.kill9();
    // Let the orphaned programs end.
    dir.write("work/release", "");
    t.restart();
    // The two running ones could not finish: the gate opened only after
    // the kill. The two queued ones run after the restart.
    for id in &ids[..2] {
        let r = t.get(&run_url(id, KEY));
        let v = r.ok();
        r.check_eq(
            &v["State"],
            &json!("interrupted"),
            "State, after kill -9 and restart, of a run that was running",
        );
        r.check(!v["Error"].is_null(), "an interrupted run has an Error");
    }
    for id in &ids[2..] {
        let v = wait_run_state(&t, id, "finished");
        assert_eq!(v["Result"], json!(["released"]), "{v}");
        assert!(v.get("Input").is_none(), "the input is never served: {v}");
    }
    // The restarted server works.
    let r = t.post(&format!("/api?api_key={KEY}&program_id=1&function=quick"));
    r.check_eq(&r.ok()["Result"], &json!(["quick"]), "Result after restart");
}

/// `run_retention` as large as the setting takes keeps every run: the
/// run log's compaction check overflowed at every append (a debug build
/// answered every call `500 internal_error`; a release build compacted
/// the log at every write).
#[test]
fn the_largest_run_retention_keeps_every_run() {
    let (_dir, t) = serve(
        "runs_retention_max",
        "run_retention = 9223372036854775807",
        &[("gate.toml", GATE)],
    );
    let ids: Vec<String> = (0..3)
        .map(|_| {
            let r = t.post(&format!("/api?api_key={KEY}&program_id=1&function=quick"));
            r.run_id(&r.ok())
        })
        .collect();
    let queued = start_async(&t, 1, "&function=quick");
    for id in ids.iter().chain([&queued]) {
        wait_run_state(&t, id, "finished");
    }
}

#[test]
fn torn_last_line_of_runs_log_is_ignored() {
    let (dir, mut t) = serve("runs_torn_log", "", &[("gate.toml", GATE)]);
    let run = |t: &Trigd| {
        let r = t.post(&format!("/api?api_key={KEY}&program_id=1&function=quick"));
        r.run_id(&r.ok())
    };
    let first = run(&t);
    t.kill9();
    t.check(
        dir.exists("state/runs.log"),
        "state/runs.log exists after a run",
    );
    dir.append(
        "state/runs.log",
        r#"{"Run":"0123456789abcdef0123456789abcdef","State":"runn"#,
    );
    t.restart();
    t.get("/healthz").ok();
    let r = t.get(&run_url(&first, KEY));
    r.check_eq(
        &r.ok()["State"],
        &json!("finished"),
        "State of the run before the torn line",
    );
    // Events written after the torn line must survive another restart.
    let second = run(&t);
    t.kill9();
    t.restart();
    for id in [&first, &second] {
        let r = t.get(&run_url(id, KEY));
        r.check_eq(
            &r.ok()["State"],
            &json!("finished"),
            "State after a second restart",
        );
    }
}

#[test]
fn sigterm_lets_a_running_run_finish_then_exits_0() {
    let prog = r#"
id = 1
name = "linger"

[[functions]]
name = "linger"
workdir = "../work"
steps = [{ shell = "echo > started; sleep 1; echo done > finished; printf bye" }]
[functions.webhook]
"#;
    let (dir, mut t) = serve(
        "runs_sigterm",
        r#"shutdown_grace = "15s""#,
        &[("linger.toml", prog)],
    );
    let id = start_async(&t, 1, "");
    t.wait_for(WAIT, "the run to start", || dir.exists("work/started"));
    t.sigterm();
    let st = t
        .wait_exit(Duration::from_secs(30))
        .unwrap_or_else(|| t.fail("trigd did not exit within 30s of SIGTERM"));
    t.check(
        dir.exists("work/finished"),
        "trigd exited before the running run finished",
    );
    t.check(
        st.code() == Some(0),
        format!("exit status after SIGTERM: {st}"),
    );
    t.restart();
    let r = t.get(&run_url(&id, KEY));
    let v = r.ok();
    r.check_eq(
        &v["State"],
        &json!("finished"),
        "State after a graceful stop",
    );
    r.check_eq(&v["Result"], &json!(["bye"]), "Result");
}

#[test]
fn sigterm_stops_runs_still_going_after_shutdown_grace() {
    let prog = r#"
id = 1
name = "stubborn"

[[functions]]
name = "stubborn"
workdir = "../work"
timeout = "60s"
steps = [{ shell = "sleep 30 & echo $! > bg.pid; wait" }]
[functions.webhook]
"#;
    let (dir, mut t) = serve(
        "runs_sigterm_grace",
        "shutdown_grace = \"1s\"\nkill_grace = \"1s\"",
        &[("stubborn.toml", prog)],
    );
    let id = start_async(&t, 1, "");
    let mut pid = 0u32;
    t.wait_for(WAIT, "the run to start", || {
        dir.read_opt("work/bg.pid")
            .and_then(|s| s.trim().parse().ok())
            .map(|p| pid = p)
            .is_some()
    });
    t.sigterm();
    let st = t
        // Tells the 1 s grace (+1 s kill_grace) from the step's own 30 s.
        .wait_exit(Duration::from_secs(20))
        .unwrap_or_else(|| t.fail("trigd did not exit within 20s of SIGTERM (grace 1s)"));
    t.check(
        st.code() == Some(0),
        format!("exit status after SIGTERM: {st}"),
    );
    t.wait_for(WAIT, &format!("the run's process {pid} to be gone"), || {
        !pid_alive(pid)
    });
    t.restart();
    let r = t.get(&run_url(&id, KEY));
    r.check_eq(
        &r.ok()["State"],
        &json!("interrupted"),
        "State of a run stopped at shutdown",
    );
}

#[test]
fn function_concurrency_1_never_overlaps() {
    let prog = r#"
id = 1
name = "serial"

[[functions]]
name = "serial"
workdir = "../work"
concurrency = 1
steps = [{ shell = "echo start $$ >> log; sleep 0.4; echo end $$ >> log" }]
[functions.webhook]
"#;
    let (dir, t) = serve(
        "runs_concurrency",
        "max_concurrent_runs = 4",
        &[("serial.toml", prog)],
    );
    let ids: Vec<String> = (0..3).map(|_| start_async(&t, 1, "")).collect();
    for id in &ids {
        wait_run_state(&t, id, "finished");
    }
    let log = dir.read("work/log");
    let lines: Vec<&str> = log.lines().collect();
    t.check(lines.len() == 6, format!("three runs, six lines:\n{log}"));
    for pair in lines.chunks(2) {
        let ok = match (pair[0].strip_prefix("start "), pair[1].strip_prefix("end ")) {
            (Some(a), Some(b)) => a == b,
            _ => false,
        };
        t.check(
            ok,
            format!("runs of a concurrency = 1 function overlapped:\n{log}"),
        );
    }
}

/// One `runs.log` line of run `i` (32 hex digits), `state`, created `i`
/// ms after 2026-11-20T10:00:00Z.
fn log_line(i: usize, state: &str) -> String {
    let t = format!(
        "2026-11-20T10:{:02}:{:02}.{:03}Z",
        i / 60_000,
        i / 1000 % 60,
        i % 1000
    );
    format!(
        "{{\"Run\":\"{i:032x}\",\"State\":\"{state}\",\"Owner\":\"program\",\"Program\":1,\
         \"Function\":\"quick\",\"Async\":true,\"By\":\"api_key:all\",\"CreatedAt\":\"{t}\",\
         \"StartedAt\":\"{t}\",\"Steps\":[],\"Result\":[\"r{i}\"]}}\n"
    )
}

/// The inode of `path` (a rewrite replaces the file: a new inode).
fn inode(path: &std::path::Path) -> u64 {
    std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(path).unwrap())
}

/// Start-up with 100,000 runs reads `runs.log` and writes only what it
/// repairs: the file keeps its inode and its bytes, a torn last line is
/// cut off, a run cut off by a crash gets one `interrupted` line, and the
/// next start writes nothing (start-up used to rewrite every record:
/// 11–45 s at 1,000,000 runs). A lower `run_retention` drops the oldest
/// runs at once; their lines go in a compaction after start.
#[test]
fn start_up_with_100000_runs_does_not_rewrite_runs_log() {
    let dir = setup(
        "runs_start_no_rewrite",
        "run_retention = 200000",
        &[("gate.toml", GATE)],
    );
    dir.mkdir("state");
    let n = 100_000;
    let mut log = String::with_capacity(n * 300);
    for i in 0..n {
        log.push_str(&log_line(i, "finished"));
    }
    let cut = format!("{n:032x}");
    log.push_str(&log_line(n, "running"));
    let kept = log.len();
    log.push_str(r#"{"Run":"0123456789abcdef0123456789abcdef","State":"fin"#);
    dir.write("state/runs.log", &log);
    let path = dir.path("state/runs.log");
    let ino = inode(&path);
    let mut t = Trigd::start_within(&dir, Duration::from_secs(120));
    let r = t.get(&run_url(&cut, KEY));
    r.check_eq(&r.ok()["State"], &json!("interrupted"), "the cut-off run");
    let r = t.get(&run_url(&format!("{:032x}", 12_345), KEY));
    r.check_eq(&r.ok()["Result"], &json!(["r12345"]), "an old run's Result");
    let after = dir.read_bytes("state/runs.log");
    t.check(inode(&path) == ino, "runs.log was replaced at start-up");
    t.check(
        after[..kept] == log.as_bytes()[..kept],
        "the lines before start-up are unchanged",
    );
    let added = String::from_utf8_lossy(&after[kept..]);
    t.check(
        added.lines().count() == 1 && added.contains(&cut) && added.contains("interrupted"),
        format!("start-up appended one line, the cut-off run's: {added:.300}"),
    );
    t.kill9();
    t.restart();
    t.get(&run_url(&cut, KEY)).ok();
    t.check(
        inode(&path) == ino && dir.read_bytes("state/runs.log") == after,
        "a start with nothing to repair writes nothing",
    );
    t.kill9();
    dir.write("config.toml", &config("run_retention = 1000"));
    t.restart();
    t.get(&run_url(&format!("{:032x}", n - 1), KEY)).ok();
    t.get(&run_url(&format!("{:032x}", 12_345), KEY))
        .err(404, "run_not_found");
    t.wait_for(WAIT, "the compaction to 1,000 runs", || {
        dir.lines("state/runs.log").len() == 1000
    });
}
