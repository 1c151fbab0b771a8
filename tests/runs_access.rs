//! Who may read, follow and cancel a run, and what a cancel answers: hook
//! runs owned by their hook (not by a program 0), authentication before
//! the run lookup (401 and the failed-authentication limiter on status,
//! output and cancel alike), a cancel's answer agreeing with the record
//! when it races the run's end, `/metrics` label escaping, and the shipped
//! demo config's Runs page.

use std::thread;

use serde_json::{json, Value};

use crate::util::*;

/// Program 7: `quick` exits at once.
const QUICK: &str = r#"
id = 7
name = "quick"

[[functions]]
name = "quick"
command = ["true"]
[functions.webhook]
"#;

/// The record of run `id` once it has ended.
#[track_caller]
fn final_record(t: &Trigd, id: &str) -> Value {
    final_record_with(t, id, KEY)
}

#[test]
fn a_cancel_racing_the_end_of_a_run_agrees_with_its_record() {
    let (_dir, t) = serve("cancel_race", "", &[("quick.toml", QUICK)]);
    let races = |n: usize| {
        let c = t.client();
        let mut seen = Vec::new();
        for _ in 0..n {
            let r = c.post(&format!("/api?api_key={KEY}&program_id=7&run_async=true"));
            let id = r.run_id(&r.ok());
            let answer = c.post(&format!("/api/runs/{id}/cancel?api_key={KEY}"));
            seen.push((id, answer.status, answer.json()));
        }
        seen
    };
    let all: Vec<_> = thread::scope(|s| {
        let hs: Vec<_> = (0..4).map(|_| s.spawn(|| races(50))).collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let (mut cancelled, mut ended) = (0, 0);
    for (id, status, answer) in &all {
        let rec = final_record(&t, id);
        let state = rec["State"].as_str().unwrap_or_default();
        match status {
            200 | 202 => {
                cancelled += 1;
                assert_eq!(answer["Success"], json!("Run cancelled."), "{answer}");
                assert_eq!(
                    state, "cancelled",
                    "answered {status} {answer}; record {rec}"
                );
            }
            409 => {
                ended += 1;
                assert_eq!(answer["Code"], json!("run_ended"), "{answer}");
                assert_eq!(
                    answer["State"],
                    json!(state),
                    "answer {answer}; record {rec}"
                );
                assert_ne!(state, "cancelled", "409 for a cancelled run: {rec}");
            }
            other => panic!("cancel of {id}: {other} {answer}"),
        }
    }
    assert_eq!(cancelled + ended, 200);
    eprintln!("200 races: {cancelled} cancelled, {ended} ended first");
}

// ---------------------------------------------------------------------------
// Hook runs: owned by their hook, seen only by unscoped API keys

/// Program 0 in workspace `ops`, with a function named like the hook
/// `deploy`: a hook run must not pass for one of its runs.
const ZERO: &str = r#"
id = 0
name = "zero"
workspace = "ops"

[[functions]]
name = "deploy"
command = ["echo", "program zero"]
[functions.webhook]
"#;

/// `deploy` echoes the payload's token (so its Result holds it); `slow`
/// prints a line and waits for a `release` file next to the hooks file.
const HOOKS: &str = r#"[
  {"id": "deploy", "execute-command": "/bin/echo", "include-command-output-in-response": true,
   "pass-arguments-to-command": [{"source": "payload", "name": "token"}]},
  {"id": "slow", "execute-command": "/bin/sh",
   "pass-arguments-to-command": [
     {"source": "string", "name": "-c"},
     {"source": "string", "name": "echo waiting; while [ ! -e release ]; do sleep 0.05; done"}]}
]"#;

/// A server with [`HOOKS`], user alice in `ops`, the keys of
/// [`config`], and `programs` (program 0 or none).
fn hook_server(name: &str, programs: &[(&str, &str)]) -> (TestDir, Trigd) {
    let dir = setup(name, "hooks_files = [\"hooks.json\"]", programs);
    let users = format!(
        "\n[[users]]\nname = \"alice\"\npassword = \"{}\"\n",
        cheap_hash("alice-pw")
    );
    let cfg = dir.read("config.toml").replace(
        "members = []\n\n[[workspaces]]\nname = \"dev\"",
        "members = [\"alice\"]\n\n[[workspaces]]\nname = \"dev\"",
    );
    dir.write("config.toml", &format!("{cfg}{users}"));
    dir.write("hooks.json", HOOKS);
    let t = Trigd::start(&dir);
    (dir, t)
}

/// The run id of the latest `POST /hooks/<hook>` in the access log.
#[track_caller]
fn hook_run(t: &Trigd, hook: &str) -> String {
    let needle = format!(" POST /hooks/{hook} ");
    let mut id = None;
    let logged = wait_until(WAIT, || {
        id = t
            .stderr_tail()
            .lines()
            .rev()
            .filter(|l| l.contains(&needle))
            .filter_map(|l| l.split(" run=").nth(1))
            .map(|r| r.split_whitespace().next().unwrap_or("").to_string())
            .find(|r| is_run_id(r));
        id.is_some()
    });
    if !logged {
        t.fail(format!("no run id logged for hook {hook}"));
    }
    id.unwrap_or_default()
}

#[test]
fn a_hook_run_is_not_a_run_of_program_0() {
    let (dir, t) = hook_server("hook_owner", &[("zero.toml", ZERO)]);
    let r = t.request(
        "POST",
        "/hooks/deploy",
        &[("Content-Type", "application/json")],
        br#"{"token": "s3cret-token"}"#,
    );
    r.status_is(200);
    r.check(r.text().contains("s3cret-token"), "the hook ran");
    let run = hook_run(&t, "deploy");
    let sealed = |key: &str| {
        for path in [
            format!("/api/runs/{run}?api_key={key}"),
            format!("/api/runs/{run}/output?api_key={key}"),
        ] {
            let r = t.get(&path);
            r.err(404, "run_not_found");
            r.check(!r.text().contains("s3cret"), "nothing of the run leaks");
        }
        t.post(&format!("/api/runs/{run}/cancel?api_key={key}"))
            .err(404, "run_not_found");
    };
    // A key scoped to the workspace of program 0, and one to program 2.
    sealed(KEY_OPS);
    sealed(KEY_P2);
    // A key without scope reads it: its owner is the hook.
    let rec = run_record(&t, &run);
    assert_eq!(rec["Owner"], json!("hook"), "{rec}");
    assert_eq!(rec["Function"], json!("deploy"), "{rec}");
    assert!(rec.get("Program").is_none(), "no program id: {rec}");
    assert_eq!(rec["Result"][0], json!("s3cret-token\n"), "{rec}");
    let out = t.get(&format!("/api/runs/{run}/output?api_key={KEY}")).ok();
    assert!(
        out["Stdout"]
            .as_str()
            .unwrap_or("")
            .contains("s3cret-token"),
        "{out}"
    );
    // A run of the real program 0 is the workspace's, and says so.
    let r = t.post(&format!(
        "/api?api_key={KEY_OPS}&program_id=0&function=deploy"
    ));
    let zero = r.run_id(&r.ok());
    let rec = t.get(&format!("/api/runs/{zero}?api_key={KEY_OPS}")).ok();
    assert_eq!(
        (&rec["Owner"], &rec["Program"]),
        (&json!("program"), &json!(0))
    );

    // A member of `ops`: neither the API nor the Runs pages show it.
    let token = crate::ui::login(&t, "alice");
    let cookie = crate::ui::cookie(&token);
    let as_alice = |path: &str, html: bool| {
        let mut h = vec![("Cookie", cookie.as_str())];
        if html {
            h.push(crate::ui::HTML);
        }
        t.request("GET", path, &h, b"")
    };
    as_alice(&format!("/api/runs/{run}/output"), false).err(404, "run_not_found");
    as_alice(&format!("/runs/{run}"), false).err(404, "run_not_found");
    let list = as_alice("/runs", true);
    list.status_is(200);
    list.check(list.text().contains(&zero), "program 0's run is listed");
    list.check(!list.text().contains(&run), "the hook's run is not listed");
    drop(dir);
}

#[test]
fn hook_runs_are_followed_and_cancelled_by_an_unscoped_key_only() {
    // No program 0 at all: the hook's run is still there for the key
    // without scope (before, every key got 404 for it).
    let (dir, t) = hook_server("hook_cancel", &[]);
    let addr = t.addr.clone();
    let log = t.stderr_log.clone();
    let caller = thread::spawn(move || {
        Client::for_addr(&addr, &log).request(
            "POST",
            "/hooks/slow",
            &[("Content-Type", "application/json")],
            b"{}",
        )
    });
    let run = hook_run_started(&t, &dir);
    t.post(&format!("/api/runs/{run}/cancel?api_key={KEY_OPS}"))
        .err(404, "run_not_found");
    let rec = run_record(&t, &run);
    assert_eq!(
        (&rec["Owner"], &rec["State"]),
        (&json!("hook"), &json!("running"))
    );
    t.get(&format!(
        "/api/runs/{run}/output?follow=1&api_key={KEY_OPS}"
    ))
    .err(404, "run_not_found");
    let out = t.get(&format!("/api/runs/{run}/output?api_key={KEY}"));
    out.check(out.text().contains("waiting"), "its output");
    // Followed until its end: the events carry what it printed and the end.
    let (addr, log) = (t.addr.clone(), t.stderr_log.clone());
    let path = format!("/api/runs/{run}/output?follow=1&api_key={KEY}");
    let follower = thread::spawn(move || Client::for_addr(&addr, &log).get(&path));
    let r = t.post(&format!("/api/runs/{run}/cancel?api_key={KEY}"));
    let v = r.ok();
    assert_eq!(v["State"], json!("cancelled"), "{v}");
    assert_eq!(final_record(&t, &run)["State"], json!("cancelled"));
    let events = follower.join().expect("the follower");
    events.status_is(200);
    let text = events.text();
    events.check(
        text.contains("waiting") && text.contains("cancelled"),
        "output and end",
    );
    // webhook answers such a hook at once; the run went on after it.
    caller.join().expect("the hook's caller").status_is(200);
    drop(dir);
}

/// The id of the `slow` hook's run once it has printed its first line.
#[track_caller]
fn hook_run_started(t: &Trigd, dir: &TestDir) -> String {
    let mut run = String::new();
    let started = wait_until(WAIT, || {
        let Some(line) = dir.read_opt("state/runs.log").and_then(|l| {
            l.lines()
                .rev()
                .find(|l| l.contains("\"running\""))
                .map(str::to_string)
        }) else {
            return false;
        };
        let rec: Value = serde_json::from_str(&line).unwrap_or_default();
        run = rec["Run"].as_str().unwrap_or_default().to_string();
        !run.is_empty()
            && t.get(&format!("/api/runs/{run}/output?api_key={KEY}"))
                .text()
                .contains("waiting")
    });
    if !started {
        t.fail("the slow hook's run did not start");
    }
    run
}

// ---------------------------------------------------------------------------
// Authentication before the run lookup

#[test]
fn a_bad_credential_is_401_then_429_on_status_output_and_cancel_alike() {
    let server = "trusted_proxies = [\"127.0.0.1\"]";
    let (_dir, t) = serve("runs_auth_first", server, &[("quick.toml", QUICK)]);
    let r = t.post(&format!("/api?api_key={KEY}&program_id=7"));
    let run = r.run_id(&r.ok());
    let missing = format!(
        "{}-{}",
        run.split('-').next().unwrap_or("x"),
        "0".repeat(32)
    );
    // Each endpoint from an address of its own (X-Forwarded-For through
    // the trusted proxy), so each has the whole failure budget (30).
    let endpoints = [
        ("GET", "", "10.0.0.1"),
        ("GET", "/output", "10.0.0.2"),
        ("POST", "/cancel", "10.0.0.3"),
    ];
    for (method, tail, client) in endpoints {
        for id in [&run, &missing] {
            // A bearer that is no key: 401 whether or not the run exists,
            // with the status endpoint's Code on all three.
            t.request(
                method,
                &format!("/api/runs/{id}{tail}"),
                &[
                    ("Authorization", "Bearer not-a-key"),
                    ("User-Agent", "probe/1.0"),
                    ("X-Forwarded-For", "10.9.9.9"),
                ],
                b"",
            )
            .err(401, "invalid_api_key");
            // Without a User-Agent too: a wrong key is a wrong key.
            t.request(
                method,
                &format!("/api/runs/{id}{tail}"),
                &[
                    ("Authorization", "Bearer not-a-key"),
                    ("X-Forwarded-For", "10.9.9.8"),
                ],
                b"",
            )
            .err(401, "invalid_api_key");
        }
        let mut statuses = Vec::new();
        for i in 0..40 {
            let id = if i % 2 == 0 { &run } else { &missing };
            let r = t.request(
                method,
                &format!("/api/runs/{id}{tail}"),
                &[
                    ("Authorization", "Bearer not-a-key"),
                    ("User-Agent", "probe/1.0"),
                    ("X-Forwarded-For", client),
                ],
                b"",
            );
            statuses.push(r.status);
        }
        let want: Vec<u16> = (0..40).map(|i| if i < 30 { 401 } else { 429 }).collect();
        assert_eq!(
            statuses, want,
            "{method} /api/runs/<id>{tail} from {client}"
        );
        // A wrong `api_key` is counted the same way (the address is over
        // its budget now).
        t.request(
            method,
            &format!("/api/runs/{run}{tail}?api_key=wrong"),
            &[("X-Forwarded-For", client)],
            b"",
        )
        .err(429, "rate_limited");
    }
}

// ---------------------------------------------------------------------------
// /metrics label values

/// A strict reader of the Prometheus text format (0.0.4): every line is a
/// `# HELP`/`# TYPE` comment or `name{label="value",…} number`, label
/// values using only the escapes `\\`, `\"` and `\n`. The samples, with
/// their labels unescaped.
/// One sample: metric name, labels, value.
type Sample = (String, Vec<(String, String)>, f64);

fn parse_exposition(text: &str) -> Result<Vec<Sample>, String> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("# HELP ") || line.starts_with("# TYPE ") {
            continue;
        }
        let bad = |why: &str| format!("{why}: {line:?}");
        let name_end = line.find(['{', ' ']).ok_or_else(|| bad("no value"))?;
        let name = &line[..name_end];
        let name_ok = name.chars().enumerate().all(|(i, c)| {
            c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
        });
        if name.is_empty() || !name_ok {
            return Err(bad("bad metric name"));
        }
        let mut rest = &line[name_end..];
        let mut labels = Vec::new();
        if let Some(r) = rest.strip_prefix('{') {
            rest = r;
            loop {
                if let Some(r) = rest.strip_prefix('}') {
                    rest = r;
                    break;
                }
                let eq = rest.find("=\"").ok_or_else(|| bad("label without =\""))?;
                let key = &rest[..eq];
                if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    return Err(bad("bad label name"));
                }
                let mut value = String::new();
                let mut chars = rest[eq + 2..].char_indices();
                let end = loop {
                    match chars.next() {
                        Some((_, '\\')) => match chars.next() {
                            Some((_, '\\')) => value.push('\\'),
                            Some((_, '"')) => value.push('"'),
                            Some((_, 'n')) => value.push('\n'),
                            _ => return Err(bad("bad escape")),
                        },
                        Some((i, '"')) => break eq + 2 + i + 1,
                        Some((_, c)) => value.push(c),
                        None => return Err(bad("unterminated label value")),
                    }
                };
                labels.push((key.to_string(), value));
                rest = &rest[end..];
                rest = rest.strip_prefix(',').unwrap_or(rest);
            }
        }
        let value = rest
            .strip_prefix(' ')
            .ok_or_else(|| bad("no space before the value"))?;
        let n: f64 = value.parse().map_err(|_| bad("value is not a number"))?;
        out.push((name.to_string(), labels, n));
    }
    Ok(out)
}

#[test]
fn hook_ids_with_quotes_backslashes_and_newlines_keep_metrics_parseable() {
    let ids = ["q\"uote", "back\\slash", "new\nline"];
    let hooks: Vec<Value> = ids
        .iter()
        .map(|id| {
            json!({
                "id": id,
                "execute-command": "/bin/true",
                "trigger-rule": {"match": {"type": "value", "value": "yes",
                                           "parameter": {"source": "payload", "name": "go"}}}
            })
        })
        .collect();
    let dir = setup("metrics_labels", "hooks_files = [\"hooks.json\"]", &[]);
    dir.write("hooks.json", &serde_json::to_string(&hooks).unwrap());
    let t = Trigd::start(&dir);
    for id in ids {
        let path = format!("/hooks/{}", enc(id));
        let json = [("Content-Type", "application/json")];
        t.request("POST", &path, &json, br#"{"go": "yes"}"#)
            .status_is(200);
        // Not matched: counted as ignored, under the hook id.
        let r = t.request("POST", &path, &json, br#"{"go": "no"}"#);
        r.check(r.status != 200 || !r.text().is_empty(), "answered");
    }
    // The runs end after their answer (webhook's way): poll until every
    // one is counted; every exposition read must parse.
    let counted = |samples: &[Sample], metric: &str, key: &str, id: &str| {
        samples
            .iter()
            .any(|(n, l, v)| n == metric && *v >= 1.0 && l.iter().any(|(k, x)| k == key && x == id))
    };
    let mut text = String::new();
    let all = wait_until(WAIT, || {
        text = t.get("/metrics").text();
        let samples = parse_exposition(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        ids.iter().all(|id| {
            counted(&samples, "trigd_runs_total", "hook", id)
                && counted(&samples, "trigd_webhooks_not_run_total", "trigger", id)
        })
    });
    assert!(
        all,
        "a run and an ignored request of each hook counted:\n{text}"
    );
}

// ---------------------------------------------------------------------------
// The shipped demo

#[test]
fn the_tour_s_runs_are_on_the_demo_user_s_runs_page() {
    let dir = TestDir::new("demo_runs_page");
    crate::browser::shipped_setup(&dir);
    let t = Trigd::start(&dir);
    let password = crate::browser::first_start_password(&dir, "demo");
    // The tour, as docs/tour.md writes it.
    let demo = "demo-key-REPLACE-ME";
    let mut runs = Vec::new();
    for query in [
        "program_id=1&variables=Ada",
        "program_id=2&variables=/",
        "program_id=3&variables=Bob",
        "program_id=4&function=plan&variables=1.2&variables=prod",
    ] {
        let r = t.post(&format!("/api?api_key={demo}&{query}"));
        runs.push(r.run_id(&r.ok()));
    }
    let r = t.post(&format!("/api?api_key={demo}&program_id=4&function=apply&variables=1.2&variables=prod&run_async=true"));
    let apply = r.run_id(&r.ok());
    assert_eq!(
        final_record_with(&t, &apply, demo)["State"],
        json!("finished")
    );
    runs.push(apply);
    let r = t.post("/tools/demo/sandbox/hello?name=Ada");
    let v = r.ok();
    assert_eq!(v["Result"], json!(["Hello, Ada!"]));
    runs.push(r.run_id(&v));
    t.post("/tools/demo/production/hello?name=Ada")
        .err(401, "unauthorized");

    // Signed in as demo, the Runs page lists every one of them.
    let body = format!("username=demo&password={password}");
    let r = t.request(
        "POST",
        "/login",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        body.as_bytes(),
    );
    r.ok();
    let cookie = r
        .header("set-cookie")
        .and_then(|c| c.split(';').next())
        .unwrap_or_else(|| r.fail("no session cookie"))
        .to_string();
    let page = t.request("GET", "/runs", &[("Cookie", &cookie), crate::ui::HTML], b"");
    page.status_is(200);
    let text = page.text();
    page.check(!text.contains("No runs."), "the Runs page is not empty");
    for run in &runs {
        page.check(text.contains(run.as_str()), format!("run {run} is listed"));
    }
    let one = t.request(
        "GET",
        &format!("/runs/{}", runs[0]),
        &[("Cookie", &cookie), crate::ui::HTML],
        b"",
    );
    one.status_is(200);
    one.check(
        one.text().contains("Hello, Ada!"),
        "the run's page shows its Result",
    );
}

/// [`final_record`] read with `key`.
#[track_caller]
fn final_record_with(t: &Trigd, id: &str, key: &str) -> Value {
    let mut rec = Value::Null;
    let ended = wait_until(WAIT, || {
        rec = t.get(&format!("/api/runs/{id}?api_key={key}")).ok();
        !matches!(rec["State"].as_str(), Some("queued" | "running"))
    });
    if !ended {
        t.fail(format!("run {id} did not end: {rec}"));
    }
    rec
}

#[test]
fn a_browser_asking_for_a_missing_page_gets_an_html_404() {
    let (_dir, t) = serve("html_404", "", &[]);
    for path in ["/no-such-page", "/runs/a/b/c", "/workspaces"] {
        let r = t.request("GET", path, &[crate::ui::HTML], b"");
        r.status_is(404);
        let ct = r.header("content-type").unwrap_or("");
        r.check(ct.starts_with("text/html"), format!("HTML, got {ct}"));
        let text = r.text();
        r.check(text.starts_with("<!DOCTYPE html>"), "a whole page");
        r.check(text.contains("/static/style.css"), "in the UI's style");
        r.check(text.contains("Not found"), "says what happened");
        r.check(
            r.header("content-security-policy") == Some(crate::ui::CSP),
            "with the pages' CSP",
        );
        // An API client keeps JSON.
        t.get(path).err(404, "not_found");
        t.request("GET", path, &[("Accept", "application/json")], b"")
            .err(404, "not_found");
    }
}
