//! A run's kept output (`GET /api/runs/<id>/output`), followed while it is
//! written (events over chunked HTTP, and `curl -N`), streamed sync calls,
//! and cancel (`POST /api/runs/<id>/cancel`) with the process group checked
//! in `/proc`.

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::api::GATE;
use crate::util::*;

/// Program 3: `ticks` prints a line every 200 ms (ten lines);
/// `ticks_gated` the same, waiting after its second line until `work/go`
/// exists (at most 60 s: a check that it still runs cannot come too late
/// on a loaded machine); `noisy` prints untrusted text on both streams;
/// `stubborn` ignores SIGTERM and leaves a grandchild in its group; `big`
/// prints more than the bound.
pub const TICKS: &str = r#"
id = 3
name = "ticks"

[[functions]]
name = "ticks"
timeout = "60s"
steps = [{ shell = 'for i in 1 2 3 4 5 6 7 8 9 10; do echo "tick $i"; sleep 0.2; done' }]
[functions.webhook]

[[functions]]
name = "ticks_gated"
workdir = "../work"
timeout = "90s"
steps = [{ shell = 'for i in 1 2 3 4 5 6 7 8 9 10; do echo "tick $i"; sleep 0.2; if [ $i = 2 ]; then j=0; while [ ! -e go ] && [ $j -lt 600 ]; do sleep 0.1; j=$((j+1)); done; fi; done' }]
[functions.webhook]

[[functions]]
name = "silent_gated"
workdir = "../work"
timeout = "90s"
steps = [{ shell = 'j=0; while [ ! -e go ] && [ $j -lt 600 ]; do sleep 0.1; j=$((j+1)); done; echo "at last"' }]
[functions.webhook]

[[functions]]
name = "noisy"
steps = [{ shell = 'printf "<script>alert(1)</script>\n\033[31mred\033[0m\n"; echo "to stderr" >&2' }]
[functions.webhook]

[[functions]]
name = "stubborn"
workdir = "../work"
timeout = "120s"
steps = [{ shell = 'trap "" TERM; sleep 300 & echo $! > grandchild; echo $$ > leader; echo started; wait' }]
[functions.webhook]

[[functions]]
name = "big"
steps = [{ shell = 'head -c 5000 /dev/zero | tr "\0" x; echo; echo err >&2' }]
[functions.webhook]

[[functions]]
name = "flood"
timeout = "60s"
steps = [{ shell = 'head -c 33554432 /dev/zero | tr "\0" x >&2' }]
[functions.webhook]
"#;

fn api(function: &str, extra: &str) -> String {
    format!("/api?api_key={KEY}&program_id=3&function={function}{extra}")
}

fn output_url(id: &str, extra: &str) -> String {
    format!("/api/runs/{id}/output?api_key={KEY}{extra}")
}

/// A response read as it arrives: the head, then the chunked body piece by
/// piece.
struct Stream {
    r: BufReader<std::net::TcpStream>,
    head: String,
    body: Vec<u8>,
}

impl Stream {
    fn open(t: &Trigd, method: &str, path: &str, headers: &str) -> Stream {
        Stream::open_at(&t.addr, method, path, headers)
    }

    fn open_at(addr: &str, method: &str, path: &str, headers: &str) -> Stream {
        let mut s = connect(addr);
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 0\r\n{headers}\r\n"
        );
        s.write_all(req.as_bytes()).unwrap();
        let mut r = BufReader::new(s);
        let mut head = String::new();
        loop {
            let mut line = String::new();
            if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        Stream {
            r,
            head,
            body: Vec::new(),
        }
    }

    /// Read one chunk; false at the end of the body.
    fn chunk(&mut self) -> bool {
        let mut size = String::new();
        if self.r.read_line(&mut size).unwrap_or(0) == 0 {
            return false;
        }
        let n = usize::from_str_radix(size.trim(), 16)
            .unwrap_or_else(|_| panic!("bad chunk size {size:?}; head:\n{}", self.head));
        let mut data = vec![0; n + 2];
        self.r.read_exact(&mut data).unwrap();
        self.body.extend_from_slice(&data[..n]);
        n > 0
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// Read until the body holds `want`; whether it came before the end.
    fn until(&mut self, want: &str) -> bool {
        while !self.text().contains(want) {
            if !self.chunk() {
                return false;
            }
        }
        true
    }

    /// Read to the end, keeping only the last 1,000 bytes: how many bytes
    /// the body had, and its end.
    fn drain(mut self) -> (usize, String) {
        let mut total = self.body.len();
        loop {
            let before = self.body.len();
            let more = self.chunk();
            total += self.body.len() - before;
            let cut = self.body.len().saturating_sub(1000);
            self.body.drain(..cut);
            if !more {
                break;
            }
        }
        (total, self.text())
    }

    fn read_to_end(&mut self) -> String {
        while self.chunk() {}
        self.text()
    }
}

/// The `data` of the last `end` event of an event stream.
fn end_event(body: &str) -> Value {
    let data = body
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("event: end\ndata: "))
        .last()
        .unwrap_or_else(|| panic!("no end event in:\n{body}"));
    serde_json::from_str(data).unwrap_or_else(|e| panic!("end data {data:?}: {e}"))
}

/// The text of every `output` event of `stream` in order.
fn output_text(body: &str, stream: &str) -> String {
    body.split("\n\n")
        .filter_map(|e| e.strip_prefix("event: output\ndata: "))
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .filter(|v| v["Stream"] == json!(stream))
        .map(|v| v["Text"].as_str().unwrap_or("").to_string())
        .collect()
}

fn state(t: &Trigd, id: &str) -> Value {
    run_record(t, id)["State"].clone()
}

#[test]
fn output_of_a_finished_run_is_kept_across_a_restart_and_bounded() {
    let server = "max_output_bytes = 1000";
    let (_dir, mut t) = serve("output_kept", server, &[("ticks.toml", TICKS)]);
    let r = t.post(&api("noisy", ""));
    let id = r.run_id(&r.ok());
    let r = t.post(&api("big", ""));
    let big = r.run_id(&r.ok());
    t.restart();
    let r = t.get(&output_url(&id, ""));
    let v = r.ok();
    r.check_eq(&v["Run"], &json!(id), "Run");
    r.check_eq(&v["State"], &json!("finished"), "State");
    r.check_eq(
        &v["Stdout"],
        &json!("<script>alert(1)</script>\n\u{1b}[31mred\u{1b}[0m\n"),
        "Stdout, as printed",
    );
    r.check_eq(&v["Stderr"], &json!("to stderr\n"), "Stderr");
    r.check_eq(&v["StdoutTruncated"], &json!(false), "StdoutTruncated");

    let r = t.get(&output_url(&big, ""));
    let v = r.ok();
    r.check_eq(
        &v["Stdout"].as_str().map(str::len),
        &Some(1000),
        "Stdout kept up to the bound",
    );
    r.check_eq(&v["StdoutTruncated"], &json!(true), "StdoutTruncated");
    r.check_eq(&v["Stderr"], &json!("err\n"), "Stderr");
    r.check_eq(&v["StderrTruncated"], &json!(false), "StderrTruncated");

    // Bad inputs.
    t.get(&format!("/api/runs/{id}/output"))
        .err(401, "missing_api_key");
    t.get(&format!("/api/runs/{id}/output?api_key={KEY_P2}"))
        .err(404, "run_not_found");
    t.get(&output_url(&id, "&follow=maybe"))
        .err(400, "invalid_parameter");
    t.get(&output_url(&id, "&colour=red"))
        .err(400, "invalid_parameter");
    let unknown = "0123456789abcdef0123456789abcdef";
    t.get(&output_url(unknown, "")).err(404, "run_not_found");
    t.post(&output_url(&id, "")).err(405, "method_not_allowed");
}

#[test]
fn output_goes_with_its_run_under_run_retention() {
    let (dir, mut t) = serve(
        "output_retention",
        "run_retention = 1",
        &[("ticks.toml", TICKS)],
    );
    // Past 4 KiB each: output files (a small output is kept in its record,
    // `a_small_output_is_kept_in_its_record_and_served_as_from_a_file`).
    let mut ids = Vec::new();
    for _ in 0..3 {
        let r = t.post(&api("big", ""));
        ids.push(r.run_id(&r.ok()));
    }
    t.check(
        fs::read_dir(dir.path("state/output")).unwrap().count() == 3,
        "three runs, three output files",
    );
    t.restart();
    let left: Vec<String> = fs::read_dir(dir.path("state/output"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let newest = ids[2].rsplit('-').next().unwrap().to_string();
    t.check(
        left == vec![newest],
        format!("only the kept run's output is left: {left:?}"),
    );
    t.get(&output_url(&ids[0], "")).err(404, "run_not_found");
    t.get(&output_url(&ids[2], "")).ok();
}

#[test]
fn a_followed_run_streams_lines_before_it_ends() {
    let (dir, t) = serve("output_follow", "", &[("ticks.toml", TICKS)]);
    let r = t.post(&api("ticks_gated", "&run_async=true"));
    let id = r.run_id(&r.ok());
    let mut s = Stream::open(&t, "GET", &output_url(&id, "&follow=1"), "");
    assert!(s.head.starts_with("HTTP/1.1 200"), "{}", s.head);
    assert!(s.head.contains("text/event-stream"), "{}", s.head);
    assert!(s.until("tick 2"), "stream ended early: {}", s.text());
    // The run waits after its second line until told: it is still
    // running now.
    assert_eq!(
        state(&t, &id),
        json!("running"),
        "lines arrive while it runs"
    );
    dir.write("work/go", "");
    let body = s.read_to_end();
    let end = end_event(&body);
    assert_eq!(end["State"], json!("finished"), "{body}");
    assert_eq!(end["Run"], json!(id));
    let want: String = (1..=10).map(|i| format!("tick {i}\n")).collect();
    assert_eq!(output_text(&body, "stdout"), want, "{body}");

    // The same with Accept: text/event-stream, after the end: the whole
    // output, then the end.
    let mut s = Stream::open(
        &t,
        "GET",
        &output_url(&id, ""),
        "Accept: text/event-stream\r\n",
    );
    let body = s.read_to_end();
    assert_eq!(output_text(&body, "stdout"), want);
    assert_eq!(end_event(&body)["State"], json!("finished"));
}

#[test]
fn a_follower_of_a_silent_run_gets_the_head_at_once() {
    let (dir, t) = serve("output_silent_head", "", &[("ticks.toml", TICKS)]);
    let r = t.post(&api("silent_gated", "&run_async=true"));
    let id = r.run_id(&r.ok());
    let asked = Instant::now();
    let mut s = Stream::open(&t, "GET", &output_url(&id, "&follow=1"), "");
    // The first `: keep-alive` comment comes after 15 s without events:
    // a head held back until the first piece of the body comes then.
    let waited = asked.elapsed();
    assert!(waited < Duration::from_secs(10), "head after {waited:?}");
    assert!(s.head.starts_with("HTTP/1.1 200"), "{}", s.head);
    assert!(s.head.contains("text/event-stream"), "{}", s.head);
    let now = state(&t, &id);
    assert!(
        now == json!("queued") || now == json!("running"),
        "it has printed nothing yet: {now}"
    );
    dir.write("work/go", "");
    let body = s.read_to_end();
    assert_eq!(output_text(&body, "stdout"), "at last\n", "{body}");
    assert_eq!(end_event(&body)["State"], json!("finished"), "{body}");
}

#[test]
fn curl_n_reads_lines_as_they_are_printed() {
    let (dir, t) = serve("output_curl", "", &[("ticks.toml", TICKS)]);
    let r = t.post(&api("ticks_gated", "&run_async=true"));
    let id = r.run_id(&r.ok());
    let url = format!("http://{}{}", t.addr, output_url(&id, "&follow=1"));
    let mut curl = Command::new("curl")
        .args(["-sN", "--max-time", "60", &url])
        .stdout(Stdio::piped())
        .spawn()
        .expect("curl is installed");
    let mut lines = BufReader::new(curl.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let first = line.contains("tick 1");
        seen.push(line);
        if first {
            break;
        }
    }
    assert!(seen.iter().any(|l| l.contains("tick 1")), "{seen:?}");
    assert_eq!(
        state(&t, &id),
        json!("running"),
        "curl saw a line before the end"
    );
    dir.write("work/go", "");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(curl.wait().unwrap().success());
    let last_data = rest.iter().rev().find(|l| l.starts_with("data: ")).unwrap();
    let end: Value = serde_json::from_str(&last_data["data: ".len()..]).unwrap();
    assert_eq!(end["State"], json!("finished"), "{rest:?}");
    assert!(rest.iter().any(|l| l == "event: end"), "{rest:?}");
}

#[test]
fn a_sync_call_can_stream_and_ends_with_the_sync_answer() {
    let (dir, t) = serve(
        "output_sync_stream",
        "",
        &[("ticks.toml", TICKS), ("gate.toml", GATE)],
    );
    let mut s = Stream::open(&t, "POST", &api("ticks_gated", "&stream=1"), "");
    assert!(s.head.starts_with("HTTP/1.1 200"), "{}", s.head);
    let id = s
        .head
        .lines()
        .find_map(|l| {
            l.strip_prefix("X-Run-Id: ")
                .or_else(|| l.strip_prefix("x-run-id: "))
        })
        .map(|v| v.trim().to_string());
    assert!(s.until("tick 1"), "{}", s.text());
    if let Some(id) = &id {
        assert_eq!(state(&t, id), json!("running"));
    }
    dir.write("work/go", "");
    let body = s.read_to_end();
    let end = end_event(&body);
    let result: String = (1..=10)
        .map(|i| format!("tick {i}"))
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(end["Success"], json!("Program finished."), "{body}");
    assert_eq!(end["Result"], json!([result]), "{body}");
    assert!(is_run_id(end["Run"].as_str().unwrap_or("")), "{end}");

    // Accept: text/event-stream asks the same; a failing run ends with the
    // sync call's error object.
    let mut s = Stream::open(
        &t,
        "POST",
        &format!("/api?api_key={KEY}&program_id=1&function=quick"),
        "Accept: text/event-stream\r\n",
    );
    let end = end_event(&s.read_to_end());
    assert_eq!(end["Result"], json!(["quick"]));

    // Without either, the run endpoint's JSON answer is unchanged.
    let r = t.post(&api("noisy", ""));
    r.check_eq(&r.ok()["Success"], &json!("Program finished."), "Success");
    t.post(&api("noisy", "&stream=perhaps"))
        .err(400, "invalid_parameter");
}

/// Process ids whose process group is `pgid`, from `/proc`.
pub fn group_members(pgid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        // state ppid pgrp …
        if f.get(2) == Some(&pgid.to_string().as_str()) && !matches!(f[0], "Z" | "X") {
            out.push(pid);
        }
    }
    out
}

#[test]
fn cancel_stops_the_whole_group_and_a_finished_run_is_409() {
    let server = "kill_grace = \"1s\"";
    let (dir, t) = serve("cancel_http", server, &[("ticks.toml", TICKS)]);
    let r = t.post(&api("stubborn", "&run_async=true"));
    let id = r.run_id(&r.ok());
    t.wait_for(WAIT, "the run to start its grandchild", || {
        dir.read_opt("work/grandchild")
            .is_some_and(|s| !s.trim().is_empty())
            && dir
                .read_opt("work/leader")
                .is_some_and(|s| !s.trim().is_empty())
    });
    let leader: u32 = dir.read("work/leader").trim().parse().unwrap();
    let grandchild: u32 = dir.read("work/grandchild").trim().parse().unwrap();
    assert!(pid_alive(grandchild));
    assert!(!group_members(leader).is_empty(), "the group runs");

    t.get(&format!("/api/runs/{id}/cancel?api_key={KEY}"))
        .err(405, "method_not_allowed");
    t.post(&format!("/api/runs/{id}/cancel"))
        .err(401, "missing_api_key");
    t.post(&format!("/api/runs/{id}/cancel?api_key={KEY_P2}"))
        .err(404, "run_not_found");
    let r = t.post(&format!("/api/runs/{id}/cancel?api_key={KEY}"));
    let v = r.ok();
    r.check_eq(&v["State"], &json!("cancelled"), "State after the cancel");
    r.check_eq(&v["Run"], &json!(id), "Run");
    t.wait_for(WAIT, "no process of the group left", || {
        group_members(leader).is_empty() && !pid_alive(grandchild)
    });
    let rec = run_record(&t, &id);
    assert_eq!(rec["State"], json!("cancelled"));
    let out = t.get(&output_url(&id, "")).ok();
    assert_eq!(
        out["Stdout"],
        json!("started\n"),
        "output kept up to the cancel"
    );

    let r = t.post(&format!("/api/runs/{id}/cancel?api_key={KEY}"));
    let v = r.err(409, "run_ended");
    r.check_eq(&v["State"], &json!("cancelled"), "State in the 409");
    let r = t.post(&api("noisy", ""));
    let done = r.run_id(&r.ok());
    let r = t.post(&format!("/api/runs/{done}/cancel?api_key={KEY}"));
    r.check_eq(
        &r.err(409, "run_ended")["State"],
        &json!("finished"),
        "State",
    );
}

#[test]
fn cancel_of_a_queued_run_and_of_a_sync_run() {
    let server = "max_concurrent_runs = 1\nkill_grace = \"1s\"";
    let progs = [("ticks.toml", TICKS), ("gate.toml", GATE)];
    let dir = setup("cancel_queued", server, &progs);
    // The run ids are read from the `run <id> started` lines (debug).
    let t = Trigd::start_env(&dir, &[("RUST_LOG", RUNNER_DEBUG)]);
    let gate = format!("/api?api_key={KEY}&program_id=1&function=gate");
    let r = t.post(&format!("{gate}&run_async=true"));
    let first = r.run_id(&r.ok());
    t.wait_for(WAIT, "the gate run to start", || dir.exists("work/started"));
    let r = t.post(&format!("{gate}&run_async=true"));
    let queued = r.run_id(&r.ok());
    assert_eq!(state(&t, &queued), json!("queued"));
    let r = t.post(&format!("/api/runs/{queued}/cancel?api_key={KEY}"));
    r.check_eq(&r.ok()["State"], &json!("cancelled"), "State");
    dir.write("work/release", "");
    t.wait_for(WAIT, "the first run to finish", || {
        state(&t, &first) == json!("finished")
    });
    assert_eq!(state(&t, &queued), json!("cancelled"));
    let starts = dir.read("work/started").lines().count();
    assert_eq!(starts, 1, "the cancelled run never started");

    // A sync call whose run is cancelled answers 409 run_cancelled.
    fs::remove_file(dir.path("work/release")).unwrap();
    let c = t.client();
    let caller = std::thread::spawn(move || c.post(&gate));
    t.wait_for(WAIT, "the sync run to start", || {
        dir.read("work/started").lines().count() == 2
    });
    let id = wait_running(&t);
    t.post(&format!("/api/runs/{id}/cancel?api_key={KEY}")).ok();
    let r = caller.join().unwrap();
    let v = r.err(409, "run_cancelled");
    r.check_eq(&v["Run"], &json!(id), "Run");
}

/// The log filter that writes `run <id> started` and `run <id> waits for
/// a slot` (`debug` lines).
const RUNNER_DEBUG: &str = "info,trigd::runner=debug";

/// The id of the running run, from the server log.
fn wait_running(t: &Trigd) -> String {
    wait_logged(t, "running")
}

/// The id of the run last named in the server log (`run <id> started`,
/// `run <id> waits for a slot`), once it is in `want` state.
fn wait_logged(t: &Trigd, want: &str) -> String {
    let mut id = String::new();
    t.wait_for(WAIT, &format!("a {want} run in the log"), || {
        let log = fs::read_to_string(&t.stderr_log).unwrap_or_default();
        let found = log
            .lines()
            .filter_map(|l| l.split("run ").nth(1))
            .filter_map(|r| r.split_whitespace().next())
            .filter(|r| is_run_id(r))
            .map(str::to_string)
            .collect::<Vec<_>>();
        match found.last() {
            Some(r) if state(t, r) == json!(want) => {
                id = r.clone();
                true
            }
            _ => false,
        }
    });
    id
}

#[test]
fn cancelled_queued_runs_stay_cancelled_after_kill9_and_never_run() {
    let server = "max_concurrent_runs = 1\nkill_grace = \"1s\"\nqueue_timeout = \"60s\"";
    let progs = [("ticks.toml", TICKS), ("gate.toml", GATE)];
    let dir = setup("cancel_queued_kill9", server, &progs);
    let mut t = Trigd::start_env(&dir, &[("RUST_LOG", RUNNER_DEBUG)]);
    let gate = format!("/api?api_key={KEY}&program_id=1&function=gate");
    let r = t.post(&format!("{gate}&run_async=true"));
    let first = r.run_id(&r.ok());
    t.wait_for(WAIT, "the gate run to start", || dir.exists("work/started"));
    // Behind it: an async run and a sync caller to cancel, an async run to keep.
    let r = t.post(&format!("{gate}&run_async=true"));
    let async_id = r.run_id(&r.ok());
    let c = t.client();
    let sync_url = gate.clone();
    let caller = std::thread::spawn(move || c.post(&sync_url));
    let sync_id = wait_logged(&t, "queued");
    let r = t.post(&format!("{gate}&run_async=true"));
    let kept = r.run_id(&r.ok());
    let queued = |n: usize| t.get("/healthz").ok()["RunsQueued"] == json!(n);
    t.wait_for(WAIT, "three runs waiting", || queued(3));
    for id in [&async_id, &sync_id] {
        let r = t.post(&format!("/api/runs/{id}/cancel?api_key={KEY}"));
        r.check_eq(&r.ok()["State"], &json!("cancelled"), "State");
    }
    let r = caller.join().unwrap();
    let v = r.err(409, "run_cancelled");
    r.check_eq(&v["Run"], &json!(sync_id), "Run of the waiting sync caller");
    assert!(queued(1), "only the kept run still waits");
    assert_eq!(state(&t, &first), json!("running"), "the slot stays taken");

    t.kill9();
    // Let the orphaned gate program end.
    dir.write("work/release", "");
    t.restart();
    t.wait_for(WAIT, "the kept run to run after the restart", || {
        state(&t, &kept) == json!("finished")
    });
    assert_eq!(state(&t, &first), json!("interrupted"));
    for id in [&async_id, &sync_id] {
        assert_eq!(state(&t, id), json!("cancelled"), "{id} after kill -9");
        let r = t.post(&format!("/api/runs/{id}/cancel?api_key={KEY}"));
        r.err(409, "run_ended");
    }
    let starts = dir.read("work/started").lines().count();
    assert_eq!(starts, 2, "only the first and the kept run ever started");
    let out = t.get(&output_url(&kept, "")).ok();
    assert_eq!(
        out["Stdout"],
        json!("released"),
        "output of a resumed run is kept"
    );
}

#[test]
fn a_stalled_follower_does_not_grow_memory() {
    // 32 MiB on stderr (only a tail of stderr is held by the run itself),
    // all of it kept on disk.
    let server = "max_output_bytes = 67108864";
    let (_dir, t) = serve("output_stalled", server, &[("ticks.toml", TICKS)]);
    let before = vm_rss_kb(t.pid()).expect("RSS of trigd");
    let r = t.post(&api("flood", "&run_async=true"));
    let id = r.run_id(&r.ok());
    // A follower that reads the head and then nothing.
    let mut s = Stream::open(&t, "GET", &output_url(&id, "&follow=1"), "");
    assert!(s.head.starts_with("HTTP/1.1 200"), "{}", s.head);
    // The highest RSS seen while the run writes and the follower is stuck.
    let mut peak = 0;
    t.wait_for(WAIT, "the run to finish", || {
        peak = peak.max(vm_rss_kb(t.pid()).unwrap_or(0));
        state(&t, &id) == json!("finished")
    });
    peak = peak.max(vm_rss_kb(t.pid()).unwrap_or(0));
    let grown = peak.saturating_sub(before);
    assert!(
        grown < 16 * 1024,
        "RSS grew by {grown} kB with a stalled follower of 32 MiB of output"
    );
    // Reading on gets every byte, then the end.
    let body = s.read_to_end();
    assert_eq!(output_text(&body, "stderr").len(), 33_554_432);
    assert_eq!(end_event(&body)["State"], json!("finished"));
}

#[test]
fn a_run_that_prints_nothing_keeps_empty_output_without_a_file() {
    const SILENT: &str = r#"
id = 7
name = "silent"

[[functions]]
name = "run"
command = ["/bin/true"]
[functions.webhook]
"#;
    let (dir, t) = serve("output_silent", "", &[("silent.toml", SILENT)]);
    let r = t.post(&format!("/api?api_key={KEY}&program_id=7"));
    let id = r.run_id(&r.ok());
    let r = t.get(&format!("/api/runs/{id}/output?api_key={KEY}"));
    let v = r.ok();
    r.check_eq(&v["State"], &json!("finished"), "State");
    r.check_eq(&v["Stdout"], &json!(""), "Stdout");
    r.check_eq(&v["Stderr"], &json!(""), "Stderr");
    let file = dir.path(&format!("state/output/{}", id.rsplit('-').next().unwrap()));
    r.check(
        !file.exists(),
        format!("{} was not created", file.display()),
    );
    // Following it gives its end at once.
    let r = t.get(&format!("/api/runs/{id}/output?api_key={KEY}&follow=1"));
    r.status_is(200);
    let text = r.text();
    r.check(
        text.starts_with("event: end\n") && text.matches("event: ").count() == 1,
        format!("only the end event: {text}"),
    );
}

/// Program 4: `bytes` writes 10,000 bytes to stdout one `printf` (one
/// `write`) at a time.
const BYTES: &str = r#"
id = 4
name = "bytes"

[[functions]]
name = "bytes"
timeout = "120s"
steps = [{ shell = 'i=0; while [ $i -lt 10000 ]; do printf x; i=$((i+1)); done' }]
[functions.webhook]
"#;

#[test]
fn output_written_a_byte_at_a_time_is_kept_at_about_its_size() {
    let (dir, t) = serve("output_bytes", "", &[("bytes.toml", BYTES)]);
    let r = t.post(&format!(
        "/api?api_key={KEY}&program_id=4&function=bytes&run_async=true"
    ));
    let id = r.run_id(&r.ok());
    // Followed while it is written, then read whole: every byte, once.
    let url = format!("/api/runs/{id}/output?api_key={KEY}&follow=1");
    let body = Stream::open(&t, "GET", &url, "").read_to_end();
    assert_eq!(end_event(&body)["State"], json!("finished"), "{body}");
    let want = "x".repeat(10_000);
    assert!(
        output_text(&body, "stdout") == want,
        "followed output differs"
    );
    let v = t.get(&format!("/api/runs/{id}/output?api_key={KEY}")).ok();
    assert!(v["Stdout"] == json!(want), "kept output differs");
    let file = dir.path(&format!("state/output/{}", id.rsplit('-').next().unwrap()));
    let size = fs::metadata(&file).unwrap().len();
    assert!(
        size <= 10_000 * 5 / 4 + 64,
        "the output file takes {size} bytes for 10,000 bytes of output"
    );
}

/// Peak resident set size of `pid` in kB (`VmHWM`).
fn vm_hwm_kb(pid: u32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// A run printing 32 MiB on stdout, all of it kept (`max_output_bytes` =
/// 48 MiB): the output file holds it, and trigd's peak memory grows by
/// less than twice the output. The Result is the stdout and lives in
/// memory once; it used to be copied into a string, the record's Result
/// and a whole JSON line besides (3.6× the output at the peak).
#[test]
fn a_run_printing_32_mib_keeps_it_with_a_peak_under_twice_its_size() {
    const BIG: &str = r#"
id = 1
name = "big"
[[functions]]
name = "big"
timeout = "120s"
output = "text"
steps = [{ shell = 'yes | head -c 33554432' }]
[functions.webhook]
"#;
    let (dir, t) = serve(
        "output_32mib",
        "max_output_bytes = 50331648",
        &[("big.toml", BIG)],
    );
    let before = vm_hwm_kb(t.pid());
    let r = t.post(&format!("/api?api_key={KEY}&program_id=1&run_async=true"));
    let id = r.run_id(&r.ok());
    // The state only: the record of the finished run holds the 32 MiB
    // Result, whose reading is not what is measured here.
    t.wait_for(Duration::from_secs(60), "the run to end", || {
        let log = dir.read_opt("state/runs.log").unwrap_or_default();
        log.lines()
            .any(|l| l.contains(&id) && l.contains(r#""State":"finished""#))
    });
    let grown = vm_hwm_kb(t.pid()).saturating_sub(before);
    let hex = id.rsplit('-').next().unwrap();
    let kept = fs::metadata(dir.path(&format!("state/output/{hex}")))
        .unwrap()
        .len();
    assert!(kept >= 33_554_432, "output file of {kept} bytes");
    println!("32 MiB printed: trigd's peak grew by {grown} kB");
    assert!(
        grown < 2 * 32 * 1024,
        "peak grew by {grown} kB for 32 MiB of output"
    );
}

/// 16 followers of one run printing 4 MiB (all kept): each gets the whole
/// stream and the `end` event with the record, whose Result holds the
/// 4 MiB; trigd reads and writes that record once for all of them (each
/// follower used to parse and write its own copy: the peak grew by 158 MiB
/// here, 91 MiB with the shared copy, on the debug build), so the peak
/// grows by less than 2 × 4 MiB per follower.
#[test]
fn sixteen_followers_of_a_big_run_share_its_end_event() {
    const BIG: &str = r#"
id = 1
name = "big"
[[functions]]
name = "big"
timeout = "120s"
output = "text"
steps = [{ shell = 'sleep 1; yes | head -c 4194304' }]
[functions.webhook]
"#;
    let (_dir, t) = serve(
        "output_16_followers",
        "max_output_bytes = 8388608",
        &[("big.toml", BIG)],
    );
    let before = vm_hwm_kb(t.pid());
    let r = t.post(&format!("/api?api_key={KEY}&program_id=1&run_async=true"));
    let id = r.run_id(&r.ok());
    let url = output_url(&id, "&follow=1");
    let followers: Vec<_> = (0..16)
        .map(|_| {
            let (c, url) = (t.client(), url.clone());
            std::thread::spawn(move || c.try_request("GET", &url, &[], b""))
        })
        .collect();
    for f in followers {
        let r = f.join().unwrap().expect("a follower's stream");
        let body = r.status_is(200).text();
        let end = end_event(&body);
        assert_eq!(
            end["State"],
            json!("finished"),
            "{}",
            &body[body.len() - 200..]
        );
        assert_eq!(end["Result"][0].as_str().map(str::len), Some(4_194_303));
    }
    let grown = vm_hwm_kb(t.pid()).saturating_sub(before);
    println!("16 followers of 2 MiB: trigd's peak grew by {grown} kB");
    assert!(grown < 16 * 8 * 1024, "peak grew by {grown} kB");
}

/// Reset the peak resident set size of `pid` (`VmHWM`) to its current
/// size (`clear_refs` 5), so that a later peak measures what came after;
/// whether it could.
fn reset_vm_hwm(pid: u32) -> bool {
    fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

/// 24 followers of a run that printed 2 MiB (`yes`, in frames of about
/// 1 MiB, all kept; the Result holds it too) and then waits for the test:
/// while all of them are open, each holds a bounded batch, whatever the
/// size of the output or of its frames; once the run has ended and all
/// have read to the end, the end event was built for them, not per
/// follower. Each follower used to read a whole frame (up to 1 MiB) and
/// keep the buffer of the events made of it: 24 open followers grew
/// trigd's peak by 107 MiB on the debug build, now by about 8 MiB.
/// Bounds: 1 MiB per follower while they are open; 8 times the output
/// besides once they have read the end.
#[test]
fn many_followers_of_a_big_run_hold_a_bounded_batch_each() {
    const BIG: &str = r#"
id = 1
name = "big"
[[functions]]
name = "big"
timeout = "120s"
output = "text"
workdir = "../work"
steps = [{ shell = 'yes | head -c 2097152; while [ ! -e go ]; do sleep 0.1; done' }]
[functions.webhook]
"#;
    const FOLLOWERS: u64 = 24;
    const OUTPUT_KB: u64 = 2048;
    let (dir, t) = serve(
        "output_many_followers",
        "max_output_bytes = 16777216",
        &[("big.toml", BIG)],
    );
    let r = t.post(&format!("/api?api_key={KEY}&program_id=1&run_async=true"));
    let id = r.run_id(&r.ok());
    let file = dir.path(&format!("state/output/{}", id.rsplit('-').next().unwrap()));
    t.wait_for(Duration::from_secs(60), "the output on disk", || {
        fs::metadata(&file).is_ok_and(|m| m.len() >= OUTPUT_KB * 1024)
    });
    // The run's own peak is not the followers'.
    assert!(reset_vm_hwm(t.pid()), "VmHWM of trigd could not be reset");
    let base = vm_hwm_kb(t.pid());
    let url = output_url(&id, "&follow=1");
    std::thread::scope(|scope| {
        let open: Vec<_> = (0..FOLLOWERS)
            .map(|_| {
                scope.spawn(|| {
                    let mut s = Stream::open(&t, "GET", &url, "");
                    assert!(s.head.starts_with("HTTP/1.1 200"), "{}", s.head);
                    assert!(s.until("event: output"), "{}", s.text());
                    s
                })
            })
            .collect();
        let streams: Vec<Stream> = open.into_iter().map(|h| h.join().unwrap()).collect();
        let grown = vm_hwm_kb(t.pid()).saturating_sub(base);
        println!("{FOLLOWERS} open followers of 2 MiB: trigd's peak grew by {grown} kB");
        assert!(
            grown < FOLLOWERS * 1024,
            "peak grew by {grown} kB with {FOLLOWERS} followers open"
        );
        dir.write("work/go", "");
        let drained: Vec<_> = streams
            .into_iter()
            .map(|s| scope.spawn(move || s.drain()))
            .collect();
        for d in drained {
            let (bytes, tail) = d.join().unwrap();
            // Each of the output's "y\n" is at least 3 bytes of events
            // (`y\n` escaped in `Text`), whatever the batching: a loaded
            // machine sends fewer, bigger events, with less framing.
            assert!(
                bytes as u64 >= 3 * OUTPUT_KB * 1024 / 2,
                "{bytes} bytes of events"
            );
            assert!(
                tail.contains(r#""State":"finished""#) && tail.ends_with("}\n\n"),
                "the stream ends with the end event: {tail}"
            );
        }
    });
    let grown = vm_hwm_kb(t.pid()).saturating_sub(base);
    println!("{FOLLOWERS} followers of 2 MiB read to the end: trigd's peak grew by {grown} kB");
    assert!(
        grown < 8 * OUTPUT_KB + FOLLOWERS * 1024,
        "peak grew by {grown} kB with {FOLLOWERS} followers read to the end"
    );
}

/// Program 8: the same output from `quick` (ends at once: its output stays
/// in its record) and `slow` (sleeps after it: its output goes to its
/// file once held for `output::HOLD`, 50 ms); `cut` passes
/// `max_output_bytes` (200 here); `large` prints more than
/// `output::INLINE_MAX` (4 KiB); `late` prints only once `work/go` exists,
/// then ends; `held` prints once `work/start` exists (at most 6 s), then
/// waits until `work/go` exists (at most 60 s).
const SMALL: &str = r#"
id = 8
name = "small"

[[functions]]
name = "quick"
steps = [{ shell = 'printf "a b\n<\303"; printf "warn\n" >&2; printf "\251>\n"' }]
[functions.webhook]

[[functions]]
name = "slow"
steps = [{ shell = 'printf "a b\n<\303"; printf "warn\n" >&2; printf "\251>\n"; sleep 0.5' }]
[functions.webhook]

[[functions]]
name = "cut"
steps = [{ shell = 'head -c 300 /dev/zero | tr "\0" y; echo err >&2' }]
[functions.webhook]

[[functions]]
name = "large"
steps = [{ shell = 'head -c 6000 /dev/zero | tr "\0" z' }]
[functions.webhook]

[[functions]]
name = "late"
workdir = "../work"
timeout = "90s"
steps = [{ shell = 'i=0; while [ ! -e go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; printf "late line\n"; printf "late err\n" >&2' }]
[functions.webhook]

[[functions]]
name = "held"
workdir = "../work"
timeout = "90s"
steps = [{ shell = 'i=0; while [ ! -e start ] && [ $i -lt 600 ]; do sleep 0.01; i=$((i+1)); done; printf "first\n"; i=0; while [ ! -e go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; printf "second\n"' }]
[functions.webhook]
"#;

fn small_url(function: &str, extra: &str) -> String {
    format!("/api?api_key={KEY}&program_id=8&function={function}{extra}")
}

/// Whether run `id` has an output file in `dir`'s state dir.
fn has_file(dir: &TestDir, id: &str) -> bool {
    let hex = id.rsplit('-').next().unwrap();
    dir.path(&format!("state/output/{hex}")).exists()
}

/// What `GET /api/runs/<id>/output` serves of run `id` but the id: the
/// whole output, and the text of its events (per stream, truncation marks
/// noted) followed after its end.
fn served(t: &Trigd, id: &str) -> (Value, String, String) {
    let mut v = t.get(&output_url(id, "")).ok();
    v.as_object_mut().unwrap().remove("Run");
    let body = t.get(&output_url(id, "&follow=1")).text();
    assert_eq!(end_event(&body)["Run"], json!(id), "{body}");
    let marks: String = body
        .split("\n\n")
        .filter(|e| e.starts_with("event: truncated"))
        .collect();
    let events = format!(
        "{}|{}|{marks}",
        output_text(&body, "stdout"),
        output_text(&body, "stderr")
    );
    (v, events, body)
}

#[test]
fn a_small_output_is_kept_in_its_record_and_served_as_from_a_file() {
    let (dir, mut t) = serve(
        "output_inline",
        "max_output_bytes = 200",
        &[("small.toml", SMALL)],
    );
    // The same output through a file: the reference.
    let r = t.post(&small_url("slow", ""));
    let slow = r.run_id(&r.ok());
    assert!(has_file(&dir, &slow), "held past 50 ms: in its file");
    // A run's output stays in its record unless the run lasted 50 ms past
    // its first byte: on a loaded machine that can happen, so of a few
    // quick runs one must have no file, and every one reads the same.
    let mut quick = Vec::new();
    for _ in 0..5 {
        let r = t.post(&small_url("quick", ""));
        let v = r.ok();
        r.check_eq(&v["Result"], &json!(["a b\n<\u{e9}>"]), "the sync answer");
        quick.push(r.run_id(&v));
        if !has_file(&dir, quick.last().unwrap()) {
            break;
        }
    }
    let inline = quick.iter().find(|id| !has_file(&dir, id)).cloned();
    let inline = inline.expect("a quick run without an output file");
    let (want, want_events, _) = served(&t, &slow);
    assert_eq!(want["Stdout"], json!("a b\n<\u{e9}>\n"));
    assert_eq!(want["Stderr"], json!("warn\n"));
    for id in &quick {
        let (v, events, body) = served(&t, id);
        assert_eq!(v, want, "run {id}: the whole output");
        assert_eq!(events, want_events, "run {id}: the events: {body}");
    }
    let rec = run_record(&t, &inline);
    assert!(
        rec.get("Output").is_none(),
        "not in the public record: {rec}"
    );
    let list = t.get(&format!("/api/runs?api_key={KEY}")).text();
    assert!(
        list.contains(inline.as_str()) && !list.contains("\"Output\""),
        "nor in the list: {list}"
    );

    // Past max_output_bytes: the truncation marks, kept in the record.
    let r = t.post(&small_url("cut", ""));
    let cut = r.run_id(&r.ok());
    let (v, events, _) = served(&t, &cut);
    assert_eq!(v["Stdout"], json!("y".repeat(200)));
    assert_eq!(
        (&v["StdoutTruncated"], &v["Stderr"]),
        (&json!(true), &json!("err\n"))
    );
    assert!(events.contains("truncated"), "{events}");

    // A streamed sync call: its events, then the sync answer.
    let mut s = Stream::open(&t, "POST", &small_url("quick", "&stream=1"), "");
    let body = s.read_to_end();
    assert_eq!(output_text(&body, "stdout"), "a b\n<\u{e9}>\n", "{body}");
    assert_eq!(output_text(&body, "stderr"), "warn\n", "{body}");
    assert_eq!(end_event(&body)["Result"], json!(["a b\n<\u{e9}>"]));

    // Read back from runs.log after a kill -9 and a start (`restart`):
    // the same.
    let before: Vec<_> = [&inline, &cut].iter().map(|id| served(&t, id).0).collect();
    t.restart();
    let after: Vec<_> = [&inline, &cut].iter().map(|id| served(&t, id).0).collect();
    assert_eq!(before, after, "after a kill -9 and a start");
    assert!(!has_file(&dir, &inline), "still no file");
}

#[test]
fn a_large_output_has_its_file_a_follower_sees_held_output_and_inline_output() {
    let (dir, t) = serve("output_held", "", &[("small.toml", SMALL)]);
    // Past 4 KiB: a file, as before.
    let r = t.post(&small_url("large", ""));
    let large = r.run_id(&r.ok());
    assert!(has_file(&dir, &large), "a large output has its file");
    let v = t.get(&output_url(&large, "")).ok();
    assert_eq!(v["Stdout"], json!("z".repeat(6000)));

    // Printed, then the run waits: the follower sees the line while it
    // runs, once it is written out (50 ms after it was printed; the
    // program looks for `start` every 10 ms).
    let r = t.post(&small_url("held", "&run_async=true"));
    let id = r.run_id(&r.ok());
    wait_run_state(&t, &id, "running");
    // The answer's head comes with its first event: opened on a thread.
    let url = output_url(&id, "&follow=1");
    let (tx, rx) = std::sync::mpsc::channel();
    let follower = std::thread::spawn({
        let addr = t.addr.clone();
        move || {
            let mut s = Stream::open_at(&addr, "GET", &url, "");
            let seen = s.until("first");
            tx.send(std::time::Instant::now()).unwrap();
            (s, seen)
        }
    });
    // Let the follower attach before the line is printed (if it attaches
    // later, it finds the line in the file and the bound holds too).
    std::thread::sleep(Duration::from_millis(200));
    dir.write("work/start", "");
    let start = std::time::Instant::now();
    let at = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the first line");
    let waited = at.saturating_duration_since(start);
    eprintln!("the first line reached the follower {waited:?} after `start`");
    assert_eq!(state(&t, &id), json!("running"), "seen while it runs");
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    assert!(has_file(&dir, &id), "written out to its file");
    let (mut s, seen) = follower.join().unwrap();
    assert!(seen, "{}", s.text());
    dir.write("work/go", "");
    let body = s.read_to_end();
    assert_eq!(output_text(&body, "stdout"), "first\nsecond\n", "{body}");
    fs::remove_file(dir.path("work/go")).unwrap();

    // Followed before it prints; it prints and ends at once: its output
    // ends up in its record, and the follower reads it there.
    let mut inline = 0;
    for _ in 0..5 {
        let r = t.post(&small_url("late", "&run_async=true"));
        let id = r.run_id(&r.ok());
        wait_run_state(&t, &id, "running");
        let url = output_url(&id, "&follow=1");
        let addr = t.addr.clone();
        let follower =
            std::thread::spawn(move || Stream::open_at(&addr, "GET", &url, "").read_to_end());
        // Attached before the run prints (the answer's head waits for the
        // first event).
        std::thread::sleep(Duration::from_millis(200));
        dir.write("work/go", "");
        let body = follower.join().unwrap();
        fs::remove_file(dir.path("work/go")).unwrap();
        assert_eq!(output_text(&body, "stdout"), "late line\n", "{body}");
        assert_eq!(output_text(&body, "stderr"), "late err\n", "{body}");
        assert_eq!(end_event(&body)["State"], json!("finished"), "{body}");
        if !has_file(&dir, &id) {
            inline += 1;
            break;
        }
    }
    assert!(inline > 0, "a run whose output stayed in its record");
}
