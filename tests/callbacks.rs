//! Completion callbacks on the real binary, with a small HTTP receiver run
//! by the test on 127.0.0.1 (allowed explicitly in each config, as
//! loopback is refused by default): signatures, retries, 4xx, timeouts,
//! kill -9 with pending deliveries, the allow list, metrics, and no secret
//! in any log line.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

use crate::util::*;

/// The signing secret of these tests.
const SECRET: &str = "cb-test-secret-5f0e9a1c7d3b2e48";
/// A key that may name callbacks per request.
const KEY_CB: &str = "trigd-test-key-callbacks-9d1e";
/// Bound for deliveries (retries with short backoff on a loaded machine).
const LONG: Duration = Duration::from_secs(40);

/// One request the receiver got.
#[derive(Clone, Debug)]
struct Got {
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    status: Option<u16>,
}

impl Got {
    fn header(&self, name: &str) -> &str {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map_or("", |(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("callback body is JSON")
    }
}

/// How the receiver answers a request: a status, never, or by closing
/// the connection without a word (as a receiver that is down).
#[derive(Clone, Copy)]
enum Answer {
    Status(u16),
    /// A status with one more header line (`Retry-After: 2`).
    WithHeader(u16, &'static str),
    Silent,
    Close,
}

/// A tiny HTTP server: records every request, answers as told.
struct Receiver {
    port: u16,
    got: Arc<Mutex<Vec<Got>>>,
}

impl Receiver {
    fn bind() -> TcpListener {
        TcpListener::bind("127.0.0.1:0").expect("bind the receiver")
    }

    fn start(
        listener: TcpListener,
        answer: impl Fn(&str) -> Answer + Send + Sync + 'static,
    ) -> Receiver {
        let port = listener.local_addr().unwrap().port();
        let got = Arc::new(Mutex::new(Vec::new()));
        let (g, answer) = (Arc::clone(&got), Arc::new(answer));
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (g, answer) = (Arc::clone(&g), Arc::clone(&answer));
                let _ = stream.set_read_timeout(Some(Duration::from_secs(20)));
                thread::spawn(move || serve_one(stream, &g, &*answer));
            }
        });
        Receiver { port, got }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn got(&self) -> Vec<Got> {
        self.got.lock().unwrap().clone()
    }
}

fn serve_one(mut s: impl Read + Write, got: &Mutex<Vec<Got>>, answer: &dyn Fn(&str) -> Answer) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let path = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .unwrap_or("")
        .to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < len {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    let a = answer(&path);
    let status = match a {
        Answer::Status(c) | Answer::WithHeader(c, _) => Some(c),
        Answer::Silent | Answer::Close => None,
    };
    got.lock().unwrap().push(Got {
        path,
        headers,
        body,
        status,
    });
    match a {
        Answer::Status(c) => {
            let _ = write!(
                s,
                "HTTP/1.1 {c} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
        }
        Answer::WithHeader(c, h) => {
            let _ = write!(
                s,
                "HTTP/1.1 {c} X\r\n{h}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
        }
        Answer::Silent => thread::sleep(Duration::from_secs(30)),
        Answer::Close => {}
    }
}

/// A test dir whose config has `[callbacks]` with `opts` over short test
/// defaults, the key [`KEY_CB`] (request_callbacks) and `programs`.
fn setup_cb(name: &str, opts: &[(&str, &str)], programs: &[(&str, &str)]) -> TestDir {
    setup_cb_server(name, "", opts, programs)
}

/// [`setup_cb`] with `server` in `[server]`.
fn setup_cb_server(
    name: &str,
    server: &str,
    opts: &[(&str, &str)],
    programs: &[(&str, &str)],
) -> TestDir {
    let dir = setup(name, server, programs);
    let mut o: BTreeMap<&str, &str> = [
        ("allow", r#"["127.0.0.1"]"#),
        ("allow_private", r#"["127.0.0.1"]"#),
        ("secret_file", r#""cb.secret""#),
        ("backoff", r#""100ms""#),
        ("backoff_max", r#""300ms""#),
        ("retry_for", r#""5m""#),
        // Far above a local answer's time, also on a loaded machine: an
        // attempt timed out would be one attempt too many.
        ("timeout", r#""20s""#),
        ("workers", "1"),
    ]
    .into_iter()
    .collect();
    for (k, v) in opts {
        if v.is_empty() {
            o.remove(k);
        } else {
            o.insert(k, v);
        }
    }
    let table: String = o.iter().map(|(k, v)| format!("{k} = {v}\n")).collect();
    dir.append(
        "config.toml",
        &format!(
            "\n[[api_keys]]\nname = \"cb\"\nsha256 = \"{}\"\nrequest_callbacks = true\n\n[callbacks]\n{table}",
            sha256_hex(KEY_CB)
        ),
    );
    dir.write("cb.secret", &format!("{SECRET}\n"));
    dir
}

/// Program 1: `ok` (echo, fixed callback `fixed` when given), `fail`
/// (exit 3), `slow` (sleeps).
fn program(fixed: Option<&str>) -> String {
    let cb = fixed.map_or(String::new(), |u| format!("callback = \"{u}\"\n"));
    format!(
        r#"id = 1
name = "cb"

[[functions]]
name = "ok"
command = ["echo", "hello {{who}}"]
{cb}
[functions.webhook]
outputs = ["who"]

[[functions]]
name = "fail"
steps = [{{ shell = "echo oops >&2; exit 3" }}]
{cb}
[functions.webhook]

[[functions]]
name = "slow"
steps = [{{ shell = "sleep 30" }}]
{cb}
[functions.webhook]
"#
    )
}

/// Start `function` async (values `vars`, optional per-request callback).
fn start_run(t: &Trigd, key: &str, function: &str, vars: &str, callback: Option<&str>) -> String {
    let cb = callback.map_or(String::new(), |u| format!("&callback={}", enc(u)));
    let r = t.post(&format!(
        "/api?api_key={key}&program_id=1&function={function}{vars}&run_async=true{cb}"
    ));
    let v = r.ok();
    r.run_id(&v)
}

/// Wait until delivery `i` of `run` is in `state`; its record.
fn wait_delivery(t: &Trigd, run: &str, i: usize, state: &str) -> Value {
    let mut last = Value::Null;
    let ok = wait_until(LONG, || {
        last = run_record(t, run);
        last["Callbacks"][i]["State"] == state
    });
    t.check(
        ok,
        format!("delivery {i} of {run} never became {state}: {last:#}"),
    );
    last
}

/// Verify the Standard Webhooks signature the way a receiver should: the
/// HMAC-SHA256 of `<webhook-id>.<webhook-timestamp>.<body>` under `key`
/// matches one of the space-separated `v1,<base64>` signatures.
fn signature_ok(got: &Got, key: &str) -> bool {
    use base64::Engine as _;
    let (id, t) = (got.header("webhook-id"), got.header("webhook-timestamp"));
    if id.is_empty() || t.is_empty() {
        return false;
    }
    let mut mac = <Hmac<Sha256> as hmac::KeyInit>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(format!("{id}.{t}.").as_bytes());
    mac.update(&got.body);
    let want = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    got.header("webhook-signature")
        .split(' ')
        .any(|s| s.strip_prefix("v1,") == Some(want.as_str()))
}

fn metric(t: &Trigd, line_start: &str) -> Option<u64> {
    let text = t.get("/metrics").text();
    text.lines()
        .find_map(|l| l.strip_prefix(line_start))
        .and_then(|v| v.trim().parse().ok())
}

fn no_secret_logged(t: &Trigd, dir: &TestDir) {
    let log = dir.read("stderr.log");
    t.check(
        !log.contains(SECRET),
        "the signing secret appears in the log",
    );
}

#[test]
fn signed_delivery_of_the_run_record() {
    let rx = Receiver::start(Receiver::bind(), |_| Answer::Status(204));
    let fixed = rx.url("/fixed?token=abc");
    let dir = setup_cb("cb-signed", &[], &[("p.toml", &program(Some(&fixed)))]);
    let t = Trigd::start(&dir);
    let run = start_run(&t, KEY, "ok", &vars(&["world"]), None);
    let rec = wait_delivery(&t, &run, 0, "delivered");
    let got = rx.got();
    t.check(got.len() == 1, format!("one request, got {got:#?}"));
    let g = &got[0];
    t.check(g.path == "/fixed?token=abc", format!("path {}", g.path));
    t.check(
        signature_ok(g, SECRET),
        format!("signature verifies: {g:#?}"),
    );
    t.check(
        !signature_ok(g, "another-secret-of-16+"),
        "a wrong secret fails",
    );
    let d = &rec["Callbacks"][0];
    t.check(
        g.header("trigd-delivery") == d["Delivery"] && g.header("webhook-id") == d["Delivery"],
        "Trigd-Delivery and webhook-id are the delivery id",
    );
    t.check(
        g.header("trigd-signature").is_empty(),
        "one scheme: no Trigd-Signature",
    );
    t.check(g.header("trigd-run") == run, "Trigd-Run");
    t.check(g.header("trigd-attempt") == "1", "Trigd-Attempt");
    t.check(
        g.header("content-type") == "application/json",
        "Content-Type",
    );
    t.check(
        d["Source"] == "function" && d["Url"] == fixed,
        format!("{d}"),
    );
    t.check(d["AttemptCount"] == 1, format!("{d}"));
    t.check(d["Attempts"][0]["Status"] == 204, format!("{d}"));
    // The body is the run record as GET shows it, without Callbacks.
    let mut want = rec.clone();
    want.as_object_mut().unwrap().remove("Callbacks");
    t.check(
        g.json() == want,
        format!("body {} vs record {want}", g.json()),
    );
    t.check(g.json()["State"] == "finished", "finished");
    t.check(g.json()["Result"][0] == "hello world", "Result");

    // A failed run, with a second callback named by the request: both are
    // sent, the function's first.
    let per_req = rx.url("/request");
    let run = start_run(&t, KEY_CB, "fail", "", Some(&per_req));
    let rec = wait_delivery(&t, &run, 1, "delivered");
    t.check(
        rec["Callbacks"][0]["State"] == "delivered",
        format!("{rec}"),
    );
    t.check(rec["Callbacks"][1]["Source"] == "request", format!("{rec}"));
    let got = rx.got();
    let paths: Vec<&str> = got.iter().map(|g| g.path.as_str()).collect();
    t.check(
        paths == ["/fixed?token=abc", "/fixed?token=abc", "/request"],
        format!("{paths:?}"),
    );
    t.check(got[2].json()["State"] == "failed", "failed run");
    t.check(
        got[1].body == got[2].body,
        "both callbacks send the same body",
    );
    t.check(
        metric(&t, "trigd_callback_deliveries_total{outcome=\"delivered\"}") == Some(3),
        "3 delivered in /metrics",
    );
    t.check(metric(&t, "trigd_callback_backlog") == Some(0), "backlog 0");
    no_secret_logged(&t, &dir);
}

#[test]
fn receiver_down_then_up_gets_exactly_one_success() {
    // Down (connections closed without an answer), then one 503, then 200.
    let mode = Arc::new(AtomicU16::new(0));
    let m = Arc::clone(&mode);
    let rx = Receiver::start(Receiver::bind(), move |_| match m.load(Ordering::SeqCst) {
        0 => Answer::Close,
        1 => {
            m.store(2, Ordering::SeqCst);
            Answer::Status(503)
        }
        _ => Answer::Status(200),
    });
    let dir = setup_cb(
        "cb-down-up",
        &[],
        &[("p.toml", &program(Some(&rx.url("/hook"))))],
    );
    let t = Trigd::start(&dir);
    let run = start_run(&t, KEY, "ok", &vars(&["x"]), None);
    let mut rec = Value::Null;
    t.wait_for(LONG, "two failed attempts", || {
        rec = run_record(&t, &run);
        rec["Callbacks"][0]["AttemptCount"].as_u64() >= Some(2)
    });
    t.check(rec["Callbacks"][0]["State"] == "pending", format!("{rec}"));
    t.check(
        rec["Callbacks"][0]["Attempts"][0]["Error"].is_string(),
        format!("the attempt's error is recorded: {rec}"),
    );
    mode.store(1, Ordering::SeqCst);
    let rec = wait_delivery(&t, &run, 0, "delivered");
    // A second run's delivery goes through the same single delivery
    // thread: once it is delivered, nothing of the first is left to send.
    let run2 = start_run(&t, KEY, "ok", &vars(&["y"]), None);
    wait_delivery(&t, &run2, 0, "delivered");
    let got = rx.got();
    let first: Vec<&Got> = got
        .iter()
        .filter(|g| g.header("trigd-run") == run)
        .collect();
    let statuses: Vec<Option<u16>> = first.iter().map(|g| g.status).collect();
    let answered: Vec<Option<u16>> = statuses.iter().copied().filter(Option::is_some).collect();
    t.check(
        answered == [Some(503), Some(200)] && statuses.last() == Some(&Some(200)),
        format!("closed connections, one 503, then exactly one 200: {statuses:?}"),
    );
    let ids: Vec<&str> = first.iter().map(|g| g.header("trigd-delivery")).collect();
    t.check(
        ids.iter().all(|id| *id == ids[0]),
        "the same delivery id on every attempt",
    );
    let d = &rec["Callbacks"][0];
    let attempts = d["Attempts"].as_array().unwrap();
    let n = attempts.len();
    t.check(n >= 4, format!("errors, a 503 and a 200: {d}"));
    t.check(
        attempts[n - 2]["Status"] == 503 && attempts[n - 1]["Status"] == 200,
        format!("{d}"),
    );
    t.check(d["AttemptCount"] == n, format!("{d}"));
    no_secret_logged(&t, &dir);
}

#[test]
fn receiver_400_fails_without_retry() {
    let rx = Receiver::start(Receiver::bind(), |path| {
        if path.starts_with("/bad") {
            Answer::Status(400)
        } else {
            Answer::Status(200)
        }
    });
    let dir = setup_cb("cb-400", &[], &[("p.toml", &program(None))]);
    let t = Trigd::start(&dir);
    let run = start_run(&t, KEY_CB, "ok", &vars(&["x"]), Some(&rx.url("/bad")));
    let rec = wait_delivery(&t, &run, 0, "failed");
    let d = &rec["Callbacks"][0];
    t.check(d["AttemptCount"] == 1, format!("one attempt: {d}"));
    t.check(d["Attempts"][0]["Status"] == 400, format!("{d}"));
    t.check(
        d["Error"].as_str().unwrap_or("").contains("400"),
        format!("{d}"),
    );
    // Barrier: a later delivery on the single delivery thread.
    let run2 = start_run(&t, KEY_CB, "ok", &vars(&["y"]), Some(&rx.url("/good")));
    wait_delivery(&t, &run2, 0, "delivered");
    let bad = rx.got().iter().filter(|g| g.path == "/bad").count();
    t.check(bad == 1, format!("the 400 receiver was called {bad} times"));
    t.check(
        metric(&t, "trigd_callback_deliveries_total{outcome=\"failed\"}") == Some(1),
        "1 failed in /metrics",
    );
}

#[test]
fn silent_receiver_times_out_and_the_record_says_so() {
    let rx = Receiver::start(Receiver::bind(), |_| Answer::Silent);
    let opts = [
        ("timeout", r#""500ms""#),
        ("retry_for", r#""1s""#),
        ("backoff", r#""300ms""#),
    ];
    let dir = setup_cb(
        "cb-silent",
        &opts,
        &[("p.toml", &program(Some(&rx.url("/x"))))],
    );
    let t = Trigd::start(&dir);
    let run = start_run(&t, KEY, "ok", &vars(&["x"]), None);
    let rec = wait_delivery(&t, &run, 0, "failed");
    let d = &rec["Callbacks"][0];
    let first = &d["Attempts"][0];
    t.check(
        first["Error"].as_str().unwrap_or("").contains("timed out"),
        format!("the attempt timed out: {d}"),
    );
    t.check(first.get("Status").is_none(), format!("no status: {d}"));
    t.check(
        d["Error"].as_str().unwrap_or("").contains("retry_for"),
        format!("gave up within retry_for: {d}"),
    );
    t.check(!rx.got().is_empty(), "the receiver got the request");
}

/// A receiver answering the status its switch holds: 503 until the test
/// stores another.
fn switched_receiver() -> (Arc<AtomicU16>, Receiver) {
    let up = Arc::new(AtomicU16::new(503));
    let up2 = Arc::clone(&up);
    let rx = Receiver::start(Receiver::bind(), move |_| {
        Answer::Status(up2.load(Ordering::SeqCst))
    });
    (up, rx)
}

#[test]
fn pending_deliveries_survive_kill9() {
    let (up, rx) = switched_receiver();
    let fixed = rx.url("/f");
    let dir = setup_cb("cb-kill9", &[], &[("p.toml", &program(Some(&fixed)))]);
    let mut t = Trigd::start(&dir);
    let runs: Vec<String> = (0..3)
        .map(|i| {
            let r = rx.url(&format!("/r{i}"));
            start_run(&t, KEY_CB, "ok", &vars(&["x"]), Some(&r))
        })
        .collect();
    for run in &runs {
        t.wait_for(LONG, "an attempt of each run", || {
            run_record(&t, run)["Callbacks"][0]["AttemptCount"].as_u64() >= Some(1)
        });
    }
    let slow = start_run(&t, KEY, "slow", "", None);
    t.wait_for(WAIT, "the slow run to start", || {
        run_record(&t, &slow)["State"] == "running"
    });
    t.kill9();
    let spooled = std::fs::read_dir(dir.path("state/callbacks"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "json"))
        })
        .count();
    t.check(
        spooled == 6,
        format!("6 pending deliveries on disk, {spooled}"),
    );
    up.store(200, Ordering::SeqCst);
    t.restart();
    for run in &runs {
        wait_delivery(&t, run, 1, "delivered");
    }
    let rec = wait_delivery(&t, &slow, 0, "delivered");
    t.check(rec["State"] == "interrupted", format!("{rec}"));
    let got = rx.got();
    for (i, run) in runs.iter().enumerate() {
        let oks: Vec<&str> = got
            .iter()
            .filter(|g| g.header("trigd-run") == run && g.status == Some(200))
            .map(|g| g.path.as_str())
            .collect();
        let want = ["/f".to_string(), format!("/r{i}")];
        t.check(
            oks == want,
            format!("run {i}: in order, once each: {oks:?}"),
        );
    }
    let interrupted: Vec<&Got> = got
        .iter()
        .filter(|g| g.header("trigd-run") == slow)
        .collect();
    t.check(
        interrupted.len() == 1 && interrupted[0].json()["State"] == "interrupted",
        "the run cut off by kill -9 is reported interrupted",
    );
    t.check(signature_ok(interrupted[0], SECRET), "signed after restart");
    t.check(metric(&t, "trigd_callback_backlog") == Some(0), "backlog 0");
}

#[test]
fn a_rotated_signing_secret_file_is_picked_up_by_hot_reload() {
    let rx = Receiver::start(Receiver::bind(), |_| Answer::Status(204));
    let fixed = rx.url("/fixed");
    let dir = setup_cb("cb-rotate", &[], &[("p.toml", &program(Some(&fixed)))]);
    let t = Trigd::start(&dir);
    let rotated = "cb-rotated-secret-0a9b8c7d6e5f";
    // Beside config.toml, replaced by rename as a deploy tool does.
    dir.write("cb.secret.new", &format!("{rotated}\n"));
    std::fs::rename(dir.path("cb.secret.new"), dir.path("cb.secret")).unwrap();
    let signed_with_new = wait_until(WAIT, || {
        let run = start_run(&t, KEY, "ok", &vars(&["x"]), None);
        wait_delivery(&t, &run, 0, "delivered");
        let got = rx.got();
        got.iter()
            .rev()
            .find(|g| g.header("trigd-run") == run)
            .is_some_and(|g| signature_ok(g, rotated))
    });
    t.check(
        signed_with_new,
        "deliveries are signed with the rotated secret",
    );
    no_secret_logged(&t, &dir);
    t.check(
        !dir.read("stderr.log").contains(rotated),
        "the new secret is not logged",
    );
}

#[test]
fn callback_urls_outside_the_allow_list_are_refused() {
    // Fixed URL: a config load error, with its place.
    let dir = setup_cb(
        "cb-allow-fixed",
        &[],
        &[("p.toml", &program(Some("https://elsewhere.example/hook")))],
    );
    let out = trigd(&["check", "--config", &dir.path_str("config.toml")], None);
    out.code_is(1);
    out.check(
        out.stderr.contains("functions[0].callback") && out.stderr.contains("allow"),
        "the fixed URL is named with the allow list",
    );
    // Loopback needs allow_private even when the host is allowed.
    let dir = setup_cb(
        "cb-allow-private",
        &[("allow_private", "")],
        &[("p.toml", &program(Some("http://127.0.0.1:9/x")))],
    );
    let out = trigd(&["check", "--config", &dir.path_str("config.toml")], None);
    out.code_is(1);
    out.check(out.stderr.contains("allow_private"), "loopback refused");
    // Per request: permission, then the allow list.
    let opts = [
        ("allow", r#"["127.0.0.1", "10.1.2.3", "localhost"]"#),
        ("allow_private", r#"["10.9.9.9"]"#),
    ];
    let dir = setup_cb("cb-allow-request", &opts, &[("p.toml", &program(None))]);
    let t = Trigd::start(&dir);
    let api = "/api?program_id=1&function=ok&variables=x&run_async=true";
    t.post(&format!(
        "{api}&api_key={KEY}&callback={}",
        enc("http://127.0.0.1:9/")
    ))
    .err(403, "callback_not_permitted");
    for bad in [
        "http://elsewhere.example/",
        "http://10.1.2.3/",
        "ftp://127.0.0.1/",
        "http://user:pw@127.0.0.1/",
        "not a url",
    ] {
        let r = t.post(&format!("{api}&api_key={KEY_CB}&callback={}", enc(bad)));
        r.err(400, "callback_refused");
    }
    let r = t.request(
        "POST",
        &format!("{api}&api_key={KEY_CB}"),
        &[("Trigd-Callback", "https://elsewhere.example/")],
        b"",
    );
    r.err(400, "callback_refused");
    // A name that resolves to a refused address: no connection is made,
    // the delivery fails at once.
    let rx = Receiver::start(Receiver::bind(), |_| Answer::Status(200));
    let via_name = format!("http://localhost:{}/x", rx.port);
    let run = start_run(&t, KEY_CB, "ok", &vars(&["x"]), Some(&via_name));
    let rec = wait_delivery(&t, &run, 0, "failed");
    let err = rec["Callbacks"][0]["Error"]
        .as_str()
        .unwrap_or("")
        .to_string();
    t.check(
        err.contains("refused") && err.contains("loopback"),
        format!("the resolved address is refused: {rec}"),
    );
    t.check(rec["Callbacks"][0]["AttemptCount"] == 1, format!("{rec}"));
    t.check(rx.got().is_empty(), "nothing reached the receiver");
}

#[test]
fn ipv6_spellings_of_ipv4_addresses_are_refused_at_load() {
    // Each URL's host is in the allow list, and 127.0.0.1 in
    // allow_private: an IPv4 address written as IPv6 is judged as that
    // IPv4 address, and the deprecated IPv4-compatible form (which no
    // network routes: every delivery would fail) is refused outright.
    let allow = r#"["[::7f00:1]", "[::808:808]", "[::ffff:a00:1]", "[::]", "[64:ff9b::a00:1]", "[2002:a9fe:a9fe::1]"]"#;
    for (url, why) in [
        ("http://[::127.0.0.1]:9/x", "IPv4-compatible"),
        ("http://[::8.8.8.8]/x", "IPv4-compatible"),
        ("http://[::ffff:10.0.0.1]/x", "a private address"),
        ("http://[::]/x", "the unspecified address"),
        ("http://[64:ff9b::10.0.0.1]/x", "a private address"),
        ("http://[2002:a9fe:a9fe::1]/x", "a link-local address"),
    ] {
        let dir = setup_cb(
            "cb-ipv6-spellings",
            &[("allow", allow)],
            &[("p.toml", &program(Some(url)))],
        );
        let out = trigd(&["check", "--config", &dir.path_str("config.toml")], None);
        out.code_is(1);
        out.check(
            out.stderr.contains("functions[0].callback") && out.stderr.contains(why),
            format!("{url}: refused as {why}"),
        );
    }
    // The IPv4-mapped spelling of an allowed private address is that
    // address: allowed.
    let dir = setup_cb(
        "cb-ipv6-mapped-ok",
        &[("allow", r#"["[::ffff:7f00:1]"]"#)],
        &[("p.toml", &program(Some("http://[::ffff:127.0.0.1]:9/x")))],
    );
    trigd(&["check", "--config", &dir.path_str("config.toml")], None).code_is(0);
}

#[test]
fn unspecified_and_site_local_addresses_are_refused_even_when_listed() {
    // Allowed and listed in allow_private, still refused: `[::]` reaches
    // this host's loopback, site-local addresses are deprecated.
    let opts = [
        ("allow", r#"["[::]", "[fec0::1]"]"#),
        ("allow_private", r#"["::", "fec0::/10"]"#),
    ];
    for (url, why) in [
        ("http://[::]:9/x", "the unspecified address"),
        ("http://[fec0::1]/x", "site-local"),
    ] {
        for (name, o) in [
            ("cb-unspecified-listed", &opts[..]),
            ("cb-unspecified", &opts[..1]),
        ] {
            let dir = setup_cb(name, o, &[("p.toml", &program(Some(url)))]);
            let out = trigd(&["check", "--config", &dir.path_str("config.toml")], None);
            out.code_is(1);
            out.check(
                out.stderr.contains("functions[0].callback")
                    && out.stderr.contains(why)
                    && !out.stderr.contains("allow_private to allow"),
                format!("{url} ({name}): refused as {why}, without a hint"),
            );
        }
    }
    // Per request: refused, and nothing reaches a listener on ::1.
    let Ok(l) = TcpListener::bind("[::1]:0") else {
        return;
    };
    let rx = Receiver::start(l, |_| Answer::Status(200));
    let dir = setup_cb(
        "cb-unspecified-request",
        &opts,
        &[("p.toml", &program(None))],
    );
    let t = Trigd::start(&dir);
    for url in [
        format!("http://[::]:{}/x", rx.port),
        "http://[fec0::1]/x".into(),
    ] {
        let r = t.post(&format!(
            "/api?program_id=1&function=ok&variables=x&run_async=true&api_key={KEY_CB}&callback={}",
            enc(&url)
        ));
        let v = r.err(400, "callback_refused");
        let msg = v["Error"].as_str().unwrap_or("");
        t.check(
            !msg.contains("allow_private to allow"),
            format!("{url}: no hint to allow_private: {msg}"),
        );
    }
    thread::sleep(Duration::from_millis(500));
    t.check(rx.got().is_empty(), "nothing reached loopback");
}

#[test]
fn redelivering_a_pending_delivery_is_refused_naming_the_delivery() {
    // 503: retried with backoff, pending well after the run's end.
    let rx = Receiver::start(Receiver::bind(), |_| Answer::Status(503));
    let fixed = rx.url("/busy");
    let dir = setup_cb(
        "cb-redeliver-pending",
        &[],
        &[("p.toml", &program(Some(&fixed)))],
    );
    let t = Trigd::start(&dir);
    let run = start_run(&t, KEY, "ok", &vars(&["x"]), None);
    wait_run_state(&t, &run, "finished");
    let rec = wait_delivery(&t, &run, 0, "pending");
    let d = rec["Callbacks"][0]["Delivery"].as_str().unwrap();
    let v = t
        .post(&format!(
            "/api/runs/{run}/callbacks/{d}/redeliver?api_key={KEY}"
        ))
        .err(409, "run_not_ended");
    let msg = v["Error"].as_str().unwrap_or("");
    t.check(
        msg.contains("callback delivery is still pending")
            && msg.contains("redeliver it once")
            && !msg.contains("re-run")
            && v["State"] == "pending"
            && v["Run"] == run.as_str(),
        format!("the refusal names the delivery: {v}"),
    );
}

#[test]
fn two_callback_headers_are_refused_as_two_parameters_are() {
    let dir = setup_cb("cb-two-headers", &[], &[("p.toml", &program(None))]);
    let t = Trigd::start(&dir);
    let api = format!("/api?program_id=1&function=ok&variables=x&run_async=true&api_key={KEY_CB}");
    let (a, b) = ("http://127.0.0.1:9/a", "http://127.0.0.1:9/b");
    let v = t
        .request(
            "POST",
            &api,
            &[("Trigd-Callback", a), ("Trigd-Callback", b)],
            b"",
        )
        .err(400, "invalid_parameter");
    t.check(v["Parameter"] == "Trigd-Callback", format!("{v}"));
    let v = t
        .post(&format!("{api}&callback={}&callback={}", enc(a), enc(b)))
        .err(400, "invalid_parameter");
    t.check(v["Parameter"] == "callback", format!("{v}"));
}

#[test]
fn settings_that_cannot_work_are_located_load_errors() {
    // backoff_max shorter than backoff.
    let dir = setup_cb(
        "cb-backoff-max",
        &[("backoff", r#""10s""#), ("backoff_max", r#""1s""#)],
        &[("p.toml", &program(None))],
    );
    let out = trigd(&["check", "--config", &dir.path_str("config.toml")], None);
    out.code_is(1);
    out.check(
        out.stderr.contains("callbacks.backoff_max")
            && out.stderr.contains("must not be shorter than backoff"),
        format!("backoff_max: {}", out.stderr),
    );
    // on = ["overdue"] on a function without expect_every: never sent.
    let cb = r#"{ url = "http://127.0.0.1:9/x", format = "slack", on = ["overdue"] }"#;
    let dir = setup_cb("cb-overdue-never", &[], &[("n.toml", &flaky(cb))]);
    let out = trigd(&["check", "--config", &dir.path_str("config.toml")], None);
    out.code_is(1);
    out.check(
        out.stderr.contains("functions[0].callback") && out.stderr.contains("expect_every"),
        format!("overdue without expect_every: {}", out.stderr),
    );
    let with = flaky(cb).replace("callback =", "expect_every = \"1h\"\ncallback =");
    let dir = setup_cb("cb-overdue-ok", &[], &[("n.toml", &with)]);
    trigd(&["check", "--config", &dir.path_str("config.toml")], None).code_is(0);
}

#[test]
fn tool_triggers_have_fixed_and_requested_callbacks() {
    let rx = Receiver::start(Receiver::bind(), |_| Answer::Status(200));
    let dir = setup_cb("cb-tool", &[], &[("p.toml", &program(None))]);
    dir.append(
        "config.toml",
        &format!(
            r#"
[[tools]]
name = "t"
workspace = "ops"
[tools.environments.prod]
public = true
[[tools.triggers]]
kind = "endpoint"
name = "hello"
program = 1
function = "ok"
callback = "{}"
request_callbacks = true
[[tools.triggers]]
kind = "endpoint"
name = "closed"
program = 1
function = "ok"
"#,
            rx.url("/trigger")
        ),
    );
    let t = Trigd::start(&dir);
    let r = t.request(
        "POST",
        "/tools/t/prod/closed?who=a&run_async=true",
        &[("Trigd-Callback", &rx.url("/req"))],
        b"",
    );
    r.err(403, "callback_not_permitted");
    let r = t.request(
        "POST",
        "/tools/t/prod/hello?who=a&run_async=true",
        &[("Trigd-Callback", &rx.url("/req"))],
        b"",
    );
    let v = r.ok();
    let run = r.run_id(&v);
    let rec = wait_delivery(&t, &run, 1, "delivered");
    t.check(rec["Callbacks"][0]["Source"] == "trigger", format!("{rec}"));
    let paths: Vec<String> = rx.got().iter().map(|g| g.path.clone()).collect();
    t.check(paths == ["/trigger", "/req"], format!("{paths:?}"));
}

#[test]
fn secret_from_env_never_logged_even_at_trace() {
    let rx = Receiver::start(Receiver::bind(), |_| Answer::Status(200));
    let opts = [
        ("secret_file", ""),
        ("secret_env", r#""TRIGD_TEST_CB_SECRET""#),
    ];
    let dir = setup_cb(
        "cb-env",
        &opts,
        &[("p.toml", &program(Some(&rx.url("/e"))))],
    );
    let t = Trigd::start_env(
        &dir,
        &[
            ("TRIGD_TEST_CB_SECRET", SECRET),
            ("RUST_LOG", "trace,notify=off,mio=off"),
        ],
    );
    let run = start_run(&t, KEY, "ok", &vars(&["x"]), None);
    wait_delivery(&t, &run, 0, "delivered");
    t.check(
        signature_ok(&rx.got()[0], SECRET),
        "signed with the env secret",
    );
    t.check(
        dir.read("stderr.log").contains("writing prelude"),
        "the log is verbose enough to show the request headers sent",
    );
    no_secret_logged(&t, &dir);
    let state = std::fs::read_to_string(dir.path("state/runs.log")).unwrap();
    t.check(!state.contains(SECRET), "no secret in the run log");
    // Unset or short secrets are load errors that do not echo the value.
    let out = trigd(&["check", "--config", &dir.path_str("config.toml")], None);
    out.code_is(1);
    out.check(
        out.stderr.contains("TRIGD_TEST_CB_SECRET"),
        "names the variable",
    );
    let dir = setup_cb("cb-short", &[], &[("p.toml", &program(None))]);
    dir.write("cb.secret", "tooshort7");
    let out = trigd(&["check", "--config", &dir.path_str("config.toml")], None);
    out.code_is(1);
    out.check(out.stderr.contains("at least 16 bytes"), "short secret");
    out.check(
        !out.stderr.contains("tooshort7"),
        "the secret is not echoed",
    );
}

#[test]
fn a_reload_that_narrows_the_allow_list_stops_pending_deliveries() {
    let rx = Receiver::start(Receiver::bind(), |_| Answer::Status(503));
    let dir = setup_cb("cb-reload", &[], &[("p.toml", &program(None))]);
    let t = Trigd::start(&dir);
    let run = start_run(&t, KEY_CB, "ok", &vars(&["x"]), Some(&rx.url("/r")));
    t.wait_for(LONG, "a first attempt", || {
        run_record(&t, &run)["Callbacks"][0]["AttemptCount"].as_u64() >= Some(1)
    });
    let text = dir.read("config.toml").replace(
        r#"allow = ["127.0.0.1"]"#,
        r#"allow = ["hooks.example.com"]"#,
    );
    dir.write("config.toml", &text);
    t.wait_for(WAIT, "the reload", || {
        t.get("/healthz").json()["Generation"] == 2
    });
    let rec = wait_delivery(&t, &run, 0, "failed");
    let err = rec["Callbacks"][0]["Error"].as_str().unwrap_or("");
    t.check(
        err.contains("refused") && err.contains("allow"),
        format!("refused by the new allow list: {rec}"),
    );
}

#[test]
fn a_reload_that_narrows_the_allow_list_rechecks_unchanged_programs() {
    // The program file does not change: a reload that reuses programs whose
    // files are unchanged must still check their fixed callbacks again.
    let dir = setup_cb(
        "cb-reload-fixed",
        &[],
        &[("p.toml", &program(Some("http://127.0.0.1:9/done")))],
    );
    let t = Trigd::start(&dir);
    let text = dir.read("config.toml").replace(
        r#"allow = ["127.0.0.1"]"#,
        r#"allow = ["hooks.example.com"]"#,
    );
    dir.write("config.toml", &text);
    t.wait_for(WAIT, "the refused reload", || {
        t.get("/healthz").json()["LastReloadError"]
            .as_str()
            .is_some_and(|e| e.contains("callback"))
    });
    let h = t.get("/healthz").json();
    t.check(h["Generation"] == 1, format!("still the first config: {h}"));
}

/// Make a private CA and a certificate for `localhost` it signed, with the
/// openssl command; the CA's PEM path.
fn private_ca(dir: &TestDir) -> String {
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(&dir.root)
            .output()
            .expect("run openssl");
        assert!(out.status.success(), "openssl {args:?}: {out:?}");
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=Test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "srv.key",
        "-out",
        "srv.csr",
        "-subj",
        "/CN=localhost",
    ]);
    dir.write(
        "ext",
        "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    );
    run(&[
        "x509",
        "-req",
        "-in",
        "srv.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "srv.pem",
        "-days",
        "2",
        "-extfile",
        "ext",
    ]);
    dir.path_str("ca.pem")
}

/// A receiver speaking https with `srv.pem` of [`private_ca`].
fn tls_receiver(dir: &TestDir) -> Receiver {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(dir.path("srv.pem"))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(dir.path("srv.key")).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let cfg = Arc::new(cfg);
    let listener = Receiver::bind();
    let port = listener.local_addr().unwrap().port();
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = Arc::clone(&got);
    thread::spawn(move || {
        for tcp in listener.incoming().flatten() {
            let (g, cfg) = (Arc::clone(&g), Arc::clone(&cfg));
            let _ = tcp.set_read_timeout(Some(Duration::from_secs(20)));
            thread::spawn(move || {
                let Ok(conn) = rustls::ServerConnection::new(cfg) else {
                    return;
                };
                let tls = rustls::StreamOwned::new(conn, tcp);
                serve_one(tls, &g, &|_| Answer::Status(200));
            });
        }
    });
    Receiver { port, got }
}

#[test]
fn https_with_a_private_ca_needs_ca_file() {
    let dir = setup_cb("cb-https", &[], &[("p.toml", &program(None))]);
    let ca = private_ca(&dir);
    let rx = tls_receiver(&dir);
    let url = format!("https://localhost:{}/tls", rx.port);
    let allow = r#"allow = ["127.0.0.1"]"#;
    let text = dir
        .read("config.toml")
        .replace(allow, r#"allow = ["localhost"]"#);
    let text = text.replace(
        r#"allow_private = ["127.0.0.1"]"#,
        r#"allow_private = ["127.0.0.1", "::1"]"#,
    );
    dir.write("config.toml", &text);
    // Without ca_file the bundled roots do not know the CA: retried.
    let t = Trigd::start(&dir);
    let run = start_run(&t, KEY_CB, "ok", &vars(&["x"]), Some(&url));
    let mut rec = Value::Null;
    t.wait_for(LONG, "a failed TLS attempt", || {
        rec = run_record(&t, &run);
        rec["Callbacks"][0]["AttemptCount"].as_u64() >= Some(1)
    });
    let err = rec["Callbacks"][0]["Attempts"][0]["Error"]
        .as_str()
        .unwrap_or("");
    t.check(err.contains("UnknownIssuer"), format!("{rec}"));
    t.check(rx.got().is_empty(), "no request got through");
    drop(t);
    // With ca_file: delivered over TLS (the pending delivery included).
    dir.append("config.toml", &format!("ca_file = \"{ca}\"\n"));
    let t = Trigd::start(&dir);
    wait_delivery(&t, &run, 0, "delivered");
    let run2 = start_run(&t, KEY_CB, "ok", &vars(&["y"]), Some(&url));
    wait_delivery(&t, &run2, 0, "delivered");
    let got = rx.got();
    t.check(got.len() == 2, format!("{got:#?}"));
    t.check(got.iter().all(|g| signature_ok(g, SECRET)), "signed");
}

#[test]
fn the_run_page_shows_the_callbacks() {
    let rx = Receiver::start(Receiver::bind(), |_| Answer::Status(204));
    let dir = TestDir::new("cb-page");
    let config = crate::ui::ui_config("")
        + &format!(
            "\n[[api_keys]]\nname = \"all\"\nsha256 = \"{}\"\n\n[callbacks]\nallow = [\"127.0.0.1\"]\nallow_private = [\"127.0.0.1\"]\nsecret_file = \"cb.secret\"\n",
            sha256_hex(KEY)
        );
    dir.write("config.toml", &config);
    dir.write("cb.secret", SECRET);
    let url = rx.url("/page");
    dir.write(
        "programs/p.toml",
        &format!(
            "id = 1\nname = \"inv\"\nworkspace = \"ops\"\n\n[[functions]]\nname = \"list\"\ncommand = [\"echo\", \"x\"]\ncallback = \"{url}\"\n[functions.webhook]\n\n[[functions]]\nname = \"add\"\ncommand = [\"echo\", \"y\"]\n"
        ),
    );
    let t = Trigd::start(&dir);
    let run = start_run(&t, KEY, "list", "", None);
    wait_delivery(&t, &run, 0, "delivered");
    let session = crate::ui::login(&t, "alice");
    let cookie = crate::ui::cookie(&session);
    let r = t.request("GET", &format!("/runs/{run}"), &[("Cookie", &cookie)], b"");
    let html = r.text();
    r.check(r.status == 200, "the run page");
    r.check(html.contains("id=\"callbacks\""), "a Callbacks table");
    r.check(html.contains(&url), "the URL");
    r.check(html.contains("state-delivered"), "the state");
    r.check(html.contains("204 ("), "the attempt's status");
}

#[test]
fn a_cancelled_run_is_reported_cancelled() {
    let rx = Receiver::start(Receiver::bind(), |_| Answer::Status(200));
    let dir = setup_cb(
        "cb-cancel",
        &[],
        &[("p.toml", &program(Some(&rx.url("/c"))))],
    );
    let t = Trigd::start(&dir);
    let run = start_run(&t, KEY, "slow", "", None);
    t.wait_for(WAIT, "the slow run to start", || {
        run_record(&t, &run)["State"] == "running"
    });
    let r = t.post(&format!("/api/runs/{run}/cancel?api_key={KEY}"));
    r.check(r.status < 300, "cancel accepted");
    let rec = wait_delivery(&t, &run, 0, "delivered");
    t.check(rec["State"] == "cancelled", format!("{rec}"));
    let got = rx.got();
    t.check(
        got.len() == 1 && got[0].json()["State"] == "cancelled",
        format!("the callback says cancelled: {got:#?}"),
    );
}

/// Two `whsec_` secrets of a rotation (the new one first), as
/// `echo "whsec_$(openssl rand -base64 32)"` makes them.
const WHSEC_NEW: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const WHSEC_OLD: &str = "whsec_c2VjcmV0LW9mLXRoZS1vbGQta2V5LTMyLWJ5dGVzIQ==";

#[test]
#[ignore = "needs the standardwebhooks Python library: cargo test -- --include-ignored (as .ci/run does)"]
fn the_official_standardwebhooks_library_verifies_callbacks_during_a_rotation() {
    let rx = Receiver::start(Receiver::bind(), |_| Answer::Status(204));
    let fixed = rx.url("/fixed");
    let dir = setup_cb("cb-sw-lib", &[], &[("p.toml", &program(Some(&fixed)))]);
    dir.write("cb.secret", &format!("{WHSEC_NEW}\n{WHSEC_OLD}\n"));
    let t = Trigd::start(&dir);
    let run = start_run(&t, KEY, "ok", &vars(&["world"]), None);
    wait_delivery(&t, &run, 0, "delivered");
    let got = rx.got();
    let g = &got[0];
    t.check(
        g.header("webhook-signature").split(' ').count() == 2,
        format!("two signatures: {}", g.header("webhook-signature")),
    );
    dir.write("body.json", &String::from_utf8_lossy(&g.body));
    let headers: serde_json::Map<String, Value> = g
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    dir.write("headers.json", &Value::Object(headers).to_string());
    // The receiver of either side of the rotation accepts; a third refuses.
    let verdicts = standardwebhooks_py(
        &dir,
        &format!(
            r#"
import json
from standardwebhooks import Webhook
body = open("body.json").read()
headers = json.load(open("headers.json"))
for secret in ["{WHSEC_NEW}", "{WHSEC_OLD}", "whsec_b3RoZXItc2VjcmV0LXRoYXQtd2FzLW5ldmVyLXVzZWQ="]:
    try:
        print(Webhook(secret).verify(body, headers)["Run"])
    except Exception as e:
        print("refused", type(e).__name__)
"#
        ),
    );
    let want = format!("{run}\n{run}\nrefused WebhookVerificationError");
    t.check(verdicts == want, format!("library said:\n{verdicts}"));
}

#[test]
fn malformed_or_too_many_signing_secrets_are_load_errors() {
    let dir = setup_cb(
        "cb-secret-bad",
        &[],
        &[("p.toml", &program(Some("http://127.0.0.1:9/x")))],
    );
    for (text, says) in [
        ("whsec_!!not-base64!!\n", "base64"),
        ("whsec_c2hvcnQ=\n", "24 to 64 bytes"),
        (
            "a-first-secret-0123456\nsecond-secret-0123456\nthird-secret-01234567\n",
            "at most 2",
        ),
        ("short\n", "at least 16 bytes"),
        ("", "empty"),
    ] {
        dir.write("cb.secret", text);
        let out = trigd(&["check", "--config", &dir.path_str("config.toml")], None);
        out.code_is(1);
        let all = format!("{}{}", out.stdout, out.stderr);
        out.check(
            all.contains("callbacks.secret_file") && all.contains(says),
            format!("{text:?} should say {says:?}"),
        );
        // The secret was given: no callback adds "set a secret" to it.
        out.check(
            !all.contains("set [callbacks] secret_env or secret_file"),
            format!("{text:?}: a follow-on error for the callback: {all}"),
        );
        for line in text.lines() {
            out.check(!all.contains(line), "the secret is shown");
        }
    }
}

/// Program 2 for the outcome and format tests: `flaky` fails (exit 3)
/// until `programs/ok` exists, with the callback `cb` (a TOML value).
fn flaky(cb: &str) -> String {
    format!(
        r#"id = 2
name = "notify"

[[functions]]
name = "flaky"
steps = [{{ shell = "test -f ok || exit 3; echo fine" }}]
callback = {cb}
[functions.webhook]
"#
    )
}

fn start_flaky(t: &Trigd) -> String {
    let r = t.post(&format!(
        "/api?api_key={KEY}&program_id=2&function=flaky&run_async=true"
    ));
    let v = r.ok();
    r.run_id(&v)
}

/// Wait until the first delivery of `run` is final; its record.
fn wait_final(t: &Trigd, run: &str) -> Value {
    let mut last = Value::Null;
    let ok = wait_until(LONG, || {
        last = run_record(t, run);
        matches!(
            last["Callbacks"][0]["State"].as_str(),
            Some("delivered" | "failed" | "skipped")
        )
    });
    t.check(ok, format!("the callback of {run} never ended: {last:#}"));
    last
}

#[test]
fn outcome_filters_and_a_recovery_found_after_a_restart() {
    let rx = Receiver::start(Receiver::bind(), |_| Answer::Status(204));
    let cb = format!(
        r#"{{ url = "{}", on = ["failed", "recovered"] }}"#,
        rx.url("/notify")
    );
    let dir = setup_cb("cb-outcomes", &[], &[("n.toml", &flaky(&cb))]);
    let mut t = Trigd::start(&dir);
    let mut states = Vec::new();
    let mut run_and_see = |t: &Trigd| {
        let run = start_flaky(t);
        let rec = wait_final(t, &run);
        states.push(
            rec["Callbacks"][0]["State"]
                .as_str()
                .unwrap_or("")
                .to_string(),
        );
        rec
    };
    run_and_see(&t); // failed: sent
    run_and_see(&t); // failed again: sent
                     // The recovery is read from the run log: a restart changes nothing.
    t.restart();
    dir.write("programs/ok", "");
    let rec = run_and_see(&t); // the first success: recovered, sent
    t.check(
        rec["State"] == "finished" && rec["Callbacks"][0]["Outcome"] == "recovered",
        format!("{rec}"),
    );
    let skipped = run_and_see(&t); // a success after a success: skipped
    t.check(
        states == ["delivered", "delivered", "delivered", "skipped"],
        format!("{states:?}"),
    );
    let got = rx.got();
    let outcomes: Vec<&str> = got.iter().map(|g| g.header("trigd-outcome")).collect();
    t.check(
        outcomes == ["failed", "failed", "recovered"],
        format!("{outcomes:?}"),
    );
    t.check(
        got[2].json()["State"] == "finished",
        "the record of the success",
    );
    // A skipped delivery redelivered is sent for the run's outcome: in
    // the header and in its entry.
    let (run, d) = (
        skipped["Run"].as_str().unwrap(),
        skipped["Callbacks"][0]["Delivery"].as_str().unwrap(),
    );
    t.post(&format!(
        "/api/runs/{run}/callbacks/{d}/redeliver?api_key={KEY}"
    ))
    .status_is(202);
    let rec = wait_delivery(&t, run, 0, "delivered");
    t.check(
        rec["Callbacks"][0]["Outcome"] == "finished",
        format!("the entry's Outcome: {rec}"),
    );
    let got = rx.got();
    t.check(
        got.len() == 4 && got[3].header("trigd-outcome") == "finished",
        format!("Trigd-Outcome of the redelivery: {:?}", got.last()),
    );
}

#[test]
fn the_outcome_filter_and_format_are_load_errors_when_wrong() {
    for (cb, says) in [
        (
            r#"{ url = "http://127.0.0.1:9/x", on = ["broken"] }"#,
            "unknown outcome",
        ),
        (
            r#"{ url = "http://127.0.0.1:9/x", format = "teams" }"#,
            "unknown format",
        ),
        (
            r#"{ url = "http://127.0.0.1:9/x", on = [] }"#,
            "on is empty",
        ),
        (
            r#"{ url = "http://127.0.0.1:9/x", colour = "red" }"#,
            "unknown key",
        ),
        (r#"{ format = "slack" }"#, "needs url"),
        (
            r#"{ url = "http://127.0.0.1:9/x", format = "healthchecks", on = ["failed"] }"#,
            "takes no on",
        ),
        ("5", "a URL, or a table"),
    ] {
        let dir = setup_cb("cb-format-bad", &[], &[("n.toml", &flaky(cb))]);
        let out = trigd(&["check", "--config", &dir.path_str("config.toml")], None);
        out.code_is(1);
        out.check(
            out.stderr.contains("functions[0].callback") && out.stderr.contains(says),
            format!("{cb}: want {says:?}"),
        );
    }
}

#[test]
fn formats_have_the_shape_each_service_documents() {
    let rx = Receiver::start(Receiver::bind(), |_| Answer::Status(200));
    let mut programs = Vec::new();
    for (i, (format, path)) in [
        ("slack", "/slack"),
        ("discord", "/discord"),
        ("ntfy", "/ntfy/backups"),
        ("healthchecks", "/hc/5bf66975-d4c7-4bf5-bcc8-b8d8a82ea278"),
    ]
    .iter()
    .enumerate()
    {
        let cb = format!(r#"{{ url = "{}", format = "{format}" }}"#, rx.url(path));
        let text = flaky(&cb)
            .replace("id = 2", &format!("id = {}", 10 + i))
            .replace("\"notify\"", &format!("\"notify-{format}\""))
            .replace("name = \"flaky\"", &format!("name = \"{format}\""));
        programs.push((format!("{format}.toml"), text));
    }
    let programs: Vec<(&str, &str)> = programs
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let dir = setup_cb_server(
        "cb-formats",
        "public_url = \"https://trigd.example/\"",
        &[],
        &programs,
    );
    let t = Trigd::start(&dir);
    // slack, discord, ntfy succeed; healthchecks fails with exit status 3.
    dir.write("programs/ok", "");
    let mut runs = Vec::new();
    for (i, format) in ["slack", "discord", "ntfy", "healthchecks"]
        .iter()
        .enumerate()
    {
        if *format == "healthchecks" {
            std::fs::remove_file(dir.path("programs/ok")).unwrap();
        }
        let r = t.post(&format!(
            "/api?api_key={KEY}&program_id={}&function={format}&run_async=true",
            10 + i
        ));
        let v = r.ok();
        let run = r.run_id(&v);
        wait_final(&t, &run);
        runs.push(run);
    }
    let got = rx.got();
    let find = |prefix: &str| -> Vec<Got> {
        got.iter()
            .filter(|g| g.path.starts_with(prefix))
            .cloned()
            .collect()
    };
    let link = |run: &str| format!("https://trigd.example/runs/{run}");
    // Slack incoming webhook: JSON with exactly "text".
    let slack = &find("/slack")[0];
    let v = slack.json();
    t.check(
        slack.header("content-type") == "application/json"
            && v.as_object().unwrap().keys().collect::<Vec<_>>() == ["text"],
        format!("slack: {v}"),
    );
    let text = v["text"].as_str().unwrap();
    t.check(
        text.contains("slack (program 10) finished after") && text.contains(&link(&runs[0])),
        format!("slack text: {text}"),
    );
    // Discord webhook: "content", and no mention parsed.
    let v = find("/discord")[0].json();
    t.check(
        v["content"]
            .as_str()
            .is_some_and(|c| c.contains("discord (program 11) finished"))
            && v["allowed_mentions"] == serde_json::json!({"parse": []})
            && v.as_object().unwrap().len() == 2,
        format!("discord: {v}"),
    );
    // ntfy: the topic URL, title/priority/tags/click as query parameters,
    // the line as text.
    let n = &find("/ntfy/backups")[0];
    let want = format!(
        "/ntfy/backups?title=ntfy+finished&priority=3&tags=white_check_mark&click={}",
        enc(&link(&runs[2]))
    );
    t.check(n.path == want, format!("ntfy path {} want {want}", n.path));
    // The link is the click action (notifications.md), not in the text.
    let body = String::from_utf8_lossy(&n.body);
    t.check(
        n.header("content-type").starts_with("text/plain")
            && body.contains("ntfy (program 12) finished")
            && body.ends_with(&format!(" · run {}", runs[2]))
            && !body.contains("https://"),
        format!("ntfy: {n:?}"),
    );
    // healthchecks.io: /start, then /<exit status>, both with rid=<uuid>.
    let hc = find("/hc/");
    let hex = runs[3].rsplit('-').next().unwrap();
    let rid = format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    );
    let base = "/hc/5bf66975-d4c7-4bf5-bcc8-b8d8a82ea278";
    let paths: Vec<&str> = hc.iter().map(|g| g.path.as_str()).collect();
    t.check(
        paths
            == [
                format!("{base}/start?rid={rid}"),
                format!("{base}/3?rid={rid}"),
            ],
        format!("healthchecks: {paths:?}"),
    );
    t.check(
        String::from_utf8_lossy(&hc[1].body).contains("failed")
            && hc[1].header("content-type").starts_with("text/plain"),
        "the end ping's body is the line",
    );
    // Two deliveries, two ids (a receiver drops an id it has processed).
    t.check(
        hc[0].header("webhook-id") != hc[1].header("webhook-id")
            && hc[0].header("trigd-delivery") != hc[1].header("trigd-delivery")
            && hc.iter().all(|g| {
                g.header("webhook-id").len() == 32
                    && g.header("webhook-id") == g.header("trigd-delivery")
            }),
        format!(
            "healthchecks ids: {:?}",
            hc.iter()
                .map(|g| (g.header("webhook-id"), g.header("trigd-delivery")))
                .collect::<Vec<_>>()
        ),
    );
    // Every message is signed all the same.
    t.check(got.iter().all(|g| signature_ok(g, SECRET)), "signed");
}

#[test]
fn an_overdue_function_fires_its_callback_once_per_spell() {
    let rx = Receiver::start(Receiver::bind(), |_| Answer::Status(204));
    let cb = format!(
        r#"{{ url = "{}", format = "slack", on = ["overdue"] }}"#,
        rx.url("/overdue")
    );
    let text = flaky(&cb).replace("callback =", "expect_every = \"2s\"\ncallback =");
    let dir = setup_cb("cb-overdue", &[], &[("n.toml", &text)]);
    let t = Trigd::start(&dir);
    let overdue = || rx.got().iter().filter(|g| g.path == "/overdue").count();
    t.check(wait_until(LONG, || overdue() == 1), "one overdue message");
    let g = &rx.got()[0];
    let text = g.json()["text"].as_str().unwrap_or("").to_string();
    t.check(
        text.contains("flaky (program 2) is overdue: no success within 2s")
            && g.header("trigd-outcome") == "overdue"
            && signature_ok(g, SECRET),
        text.clone(),
    );
    // Still overdue: not told again (the watch looks every second).
    thread::sleep(Duration::from_millis(3500));
    t.check(overdue() == 1, format!("told {} times", overdue()));
    // A success ends the spell; without another, a new spell is told.
    dir.write("programs/ok", "");
    let run = start_flaky(&t);
    wait_run_state(&t, &run, "finished");
    t.check(
        wait_until(LONG, || overdue() == 2),
        "a second spell is told",
    );
    let rec = run_record(&t, &run);
    t.check(
        rec["Callbacks"][0]["State"] == "skipped",
        format!("an end is not overdue: {rec}"),
    );
}

#[test]
fn retry_after_is_honoured_within_retry_for_and_410_still_stops() {
    // /wait: 503 with Retry-After: 2, then 204. /long: 429 asking for two
    // hours (past retry_for). /gone: 410.
    let seen = Arc::new(AtomicU16::new(0));
    let s = Arc::clone(&seen);
    let rx = Receiver::start(Receiver::bind(), move |path| match path {
        "/wait" if s.fetch_add(1, Ordering::SeqCst) == 0 => {
            Answer::WithHeader(503, "Retry-After: 2")
        }
        "/long" => Answer::WithHeader(429, "Retry-After: 7200"),
        "/gone" => Answer::WithHeader(410, "Retry-After: 1"),
        _ => Answer::Status(204),
    });
    let dir = setup_cb("cb-retry-after", &[], &[("p.toml", &program(None))]);
    let t = Trigd::start(&dir);
    let run = start_run(&t, KEY_CB, "ok", &vars(&["x"]), Some(&rx.url("/wait")));
    let rec = wait_delivery(&t, &run, 0, "delivered");
    let d = &rec["Callbacks"][0];
    t.check(d["AttemptCount"] == 2, format!("{d}"));
    t.check(
        d["Attempts"][0]["Status"] == 503
            && d["Attempts"][0]["Error"]
                .as_str()
                .is_some_and(|e| e.contains("asked to wait 2s (Retry-After)")),
        format!("{d}"),
    );
    // Not before the 2 seconds asked (the backoff here is 100ms).
    let at = |i: usize| {
        d["Attempts"][i]["At"]
            .as_str()
            .unwrap()
            .parse::<jiff::Timestamp>()
            .unwrap()
    };
    let waited = at(1).duration_since(at(0)).as_secs_f64();
    t.check(waited >= 2.0, format!("waited {waited}s"));

    let run = start_run(&t, KEY_CB, "ok", &vars(&["x"]), Some(&rx.url("/long")));
    let rec = wait_delivery(&t, &run, 0, "failed");
    let d = &rec["Callbacks"][0];
    t.check(
        d["AttemptCount"] == 1
            && d["Error"]
                .as_str()
                .is_some_and(|e| e.contains("asked to wait 7200s (Retry-After), past retry_for")),
        format!("{d}"),
    );
    let run = start_run(&t, KEY_CB, "ok", &vars(&["x"]), Some(&rx.url("/gone")));
    let rec = wait_delivery(&t, &run, 0, "failed");
    t.check(
        rec["Callbacks"][0]["AttemptCount"] == 1,
        format!("410 ends it: {rec}"),
    );
}

/// An instance named `name` on `db` (a 2 s lease) serving `program`, in
/// test directory `test`.
fn on_database(db: &PgDb, test: &str, name: &str, program: &str) -> (TestDir, Trigd) {
    let dir = setup_cb(test, &[], &[("p.toml", program)]);
    let conf = dir.read("config.toml");
    dir.write(
        "config.toml",
        &conf.replacen("[server]", &format!("[server]\ninstance = \"{name}\""), 1),
    );
    db.configure(&dir, r#"lease = "2s""#);
    let t = Trigd::start(&dir);
    (dir, t)
}

/// The deliveries a killed instance left pending are sent by the instance
/// that adopts them at once, with nothing else to send: they were queued
/// without waking the delivery threads, which waited for this instance's
/// next delivery (two minutes and more in a black-box probe).
#[test]
fn a_dead_instances_pending_deliveries_are_sent_by_the_adopter_at_once() {
    let db = pg_database("cb_adopted");
    let (up, rx) = switched_receiver();
    let start = |name: &str| on_database(&db, &format!("cb-adopted-{name}"), name, &program(None));
    let (_da, mut a) = start("a");
    let run = start_run(&a, KEY_CB, "ok", &vars(&["x"]), Some(&rx.url("/r")));
    a.wait_for(LONG, "a first attempt", || {
        run_record(&a, &run)["Callbacks"][0]["AttemptCount"].as_u64() >= Some(1)
    });
    a.kill9();
    up.store(200, Ordering::SeqCst);
    let (_db, b) = start("b");
    wait_delivery(&b, &run, 0, "delivered");
}

/// With the PostgreSQL backend and two instances, each delivery is sent by
/// one instance (the one that ended its run); when that one is killed
/// with deliveries pending, the other adopts them with its runs and sends
/// each once, the cut-off run reported `interrupted`.
#[test]
fn two_instances_on_a_database_send_each_delivery_once_also_after_a_kill() {
    let db = pg_database("cb_two_instances");
    let (up, rx) = switched_receiver();
    let fixed = rx.url("/f");
    let start =
        |name: &str| on_database(&db, &format!("cb-two-{name}"), name, &program(Some(&fixed)));
    let (_da, mut a) = start("a");
    let runs: Vec<String> = (0..3)
        .map(|i| {
            start_run(
                &a,
                KEY_CB,
                "ok",
                &vars(&["x"]),
                Some(&rx.url(&format!("/r{i}"))),
            )
        })
        .collect();
    for run in &runs {
        a.wait_for(LONG, "an attempt of each run", || {
            run_record(&a, run)["Callbacks"][0]["AttemptCount"].as_u64() >= Some(1)
        });
    }
    let slow = start_run(&a, KEY, "slow", "", None);
    a.wait_for(WAIT, "the slow run to start", || {
        run_record(&a, &slow)["State"] == "running"
    });
    let (_db, b) = start("b");
    let done = start_run(&b, KEY_CB, "ok", &vars(&["y"]), None);
    a.kill9();
    up.store(200, Ordering::SeqCst);
    for run in runs.iter().chain([&done]) {
        wait_delivery(&b, run, 0, "delivered");
    }
    let rec = wait_delivery(&b, &slow, 0, "delivered");
    b.check(rec["State"] == "interrupted", format!("{rec}"));
    for run in &runs {
        wait_delivery(&b, run, 1, "delivered");
    }
    let got = rx.got();
    for run in runs.iter().chain([&done, &slow]) {
        let oks = got
            .iter()
            .filter(|g| g.header("trigd-run") == run && g.status == Some(200))
            .count();
        let want = if runs.contains(run) { 2 } else { 1 };
        b.check(
            oks == want,
            format!("run {run}: {oks} deliveries, want {want}: once each"),
        );
    }
    // A row goes once the delivery's end is in the run's record.
    let empty = wait_until(WAIT, || {
        db.count("SELECT count(*) FROM trigd_callbacks") == 0
    });
    b.check(empty, "no delivery left in the spool");
}
