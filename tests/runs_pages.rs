//! The runs pages over plain HTTP: the list of a member's runs (filters,
//! paging, workspaces kept apart), a run's page (untrusted output escaped,
//! terminal escapes removed, CSP), the Cancel form and its CSRF token, and
//! a page of a state dir holding 100,000 runs.

use std::fmt::Write as _;
use std::fs;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::runs_output::group_members;
use crate::ui::{cookie, hidden, key_on, login, ui_config, CSP, HTML, INV};
use crate::util::*;

/// Program 1 (the `inventory` tool's), program 2 in `ops` with untrusted
/// output, a run that ignores SIGTERM, `ticks` (a line every 200 ms, 15
/// lines) and `ticks_gated` (the same after a line of 8-bit escape
/// sequences and a bidirectional override, waiting after its second tick
/// until `work/go-ticks` exists), program 3 in `dev`.
const PROGRAMS: [(&str, &str); 3] = [
    ("inv.toml", INV),
    (
        "show.toml",
        r#"id = 2
name = "show"
workspace = "ops"

[[functions]]
name = "noisy"
steps = [{ shell = 'printf "<script>alert(1)</script>\n\033[31mred\033[0m & more\n"; echo "warn <b>" >&2; printf "\302\2331;32mgreen\302\2330m \342\200\256olleh\342\200\254 \302\2350;t\302\234.\n"' }]
[functions.webhook]

[[functions]]
name = "stubborn"
workdir = "../work"
timeout = "120s"
steps = [{ shell = 'trap "" TERM; sleep 300 & echo $$ > leader; echo started; wait' }]
[functions.webhook]

[[functions]]
name = "ticks"
timeout = "60s"
steps = [{ shell = 'printf "\302\2331mlive\302\2330m \342\200\256evil\342\200\254 \302\2350;t\a.\n"; for i in $(seq 1 15); do echo "tick $i"; sleep 0.2; done' }]
[functions.webhook]

[[functions]]
name = "ticks_gated"
workdir = "../work"
timeout = "90s"
steps = [{ shell = 'printf "\302\2331mlive\302\2330m \342\200\256evil\342\200\254 \302\2350;t\a.\n"; for i in $(seq 1 15); do echo "tick $i"; sleep 0.2; if [ $i = 2 ]; then j=0; while [ ! -e go-ticks ] && [ $j -lt 600 ]; do sleep 0.1; j=$((j+1)); done; fi; done' }]
[functions.webhook]
"#,
    ),
    (
        "devprog.toml",
        r#"id = 3
name = "devprog"
workspace = "dev"

[[functions]]
name = "hello"
command = ["echo", "hello dev"]
[functions.webhook]
"#,
    ),
];

/// A server with [`ui_config`], the key [`KEY`] and [`PROGRAMS`].
pub fn start(name: &str, server: &str) -> (TestDir, Trigd) {
    let dir = setup_dir(name, server);
    let t = Trigd::start(&dir);
    (dir, t)
}

pub fn setup_dir(name: &str, server: &str) -> TestDir {
    let dir = TestDir::new(name);
    let key = format!(
        "\n[[api_keys]]\nname = \"all\"\nsha256 = \"{}\"\n",
        sha256_hex(KEY)
    );
    dir.write("config.toml", &(ui_config(server) + &key));
    for (file, text) in PROGRAMS {
        dir.write(&format!("programs/{file}"), text);
    }
    dir.mkdir("work");
    dir
}

/// Start a run of `function` of `program` with [`KEY`]; its id.
pub fn run(t: &Trigd, program: u64, function: &str, extra: &str) -> String {
    let r = t.post(&format!(
        "/api?api_key={KEY}&program_id={program}&function={function}{extra}"
    ));
    r.run_id(&r.ok())
}

pub fn page(t: &Trigd, path: &str, token: &str) -> Reply {
    let c = cookie(token);
    t.request("GET", path, &[HTML, ("Cookie", c.as_str())], b"")
}

#[test]
fn the_runs_page_lists_a_members_runs_with_filters() {
    let (_dir, t) = start("pages_list", "");
    let noisy: Vec<String> = (0..3).map(|_| run(&t, 2, "noisy", "")).collect();
    let dev = run(&t, 3, "hello", "");
    let r = t.get("/tools/inventory/staging/list");
    let tool_run = r.run_id(&r.ok());
    let alice = login(&t, "alice");

    let r = page(&t, "/runs", &alice);
    r.status_is(200);
    r.check_eq(r.header("content-security-policy"), Some(CSP), "CSP");
    let text = r.text();
    for id in noisy.iter().chain([&tool_run]) {
        r.check(text.contains(id.as_str()), format!("run {id} listed"));
    }
    r.check(
        !text.contains(dev.as_str()),
        "a run of another workspace is not listed",
    );
    let newest = text.find(tool_run.as_str()).unwrap();
    let oldest = text.find(noisy[0].as_str()).unwrap();
    r.check(newest < oldest, "newest first");
    r.check(
        text.contains("public via inventory/staging"),
        "origin and tool environment",
    );

    let r = page(&t, "/runs?tool=inventory&state=finished", &alice);
    let text = r.text();
    r.check(text.contains(tool_run.as_str()), "the tool's run");
    r.check(!text.contains(noisy[0].as_str()), "filtered by tool");
    let r = page(&t, "/runs?program=2&state=failed", &alice);
    r.check(!r.text().contains(noisy[0].as_str()), "filtered by state");
    let r = page(&t, "/runs?program=2&state=&tool=", &alice);
    r.check(
        r.text().contains(noisy[2].as_str()),
        "empty filters are no filter",
    );

    let r = page(&t, "/runs?state=sleeping", &alice);
    r.status_is(400);
    r.check(
        r.text().contains("state must be one of"),
        "says which states",
    );
    let c = cookie(&alice);
    t.request("GET", "/runs?page=x", &[("Cookie", c.as_str())], b"")
        .err(400, "invalid_parameter");
    t.request("GET", "/runs?color=red", &[("Cookie", c.as_str())], b"")
        .err(400, "invalid_parameter");
    t.get("/runs").err(401, "unauthorized");
    let r = t.request("GET", "/runs", &[HTML], b"");
    r.status_is(303);
    t.post("/runs").err(405, "method_not_allowed");

    let bob = login(&t, "bob");
    let text = page(&t, "/runs", &bob).text();
    assert!(text.contains(dev.as_str()) && !text.contains(noisy[0].as_str()));
    page(&t, &format!("/runs/{}", noisy[0]), &bob).status_is(404);
}

#[test]
fn a_run_page_shows_untrusted_output_as_text() {
    let (_dir, t) = start("pages_run", "");
    let id = run(&t, 2, "noisy", "");
    let alice = login(&t, "alice");
    let r = page(&t, &format!("/runs/{id}"), &alice);
    r.status_is(200);
    r.check_eq(r.header("content-security-policy"), Some(CSP), "CSP");
    let text = r.text();
    r.check(
        text.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "the output is escaped",
    );
    r.check(!text.contains("<script>alert"), "no script from the output");
    r.check(
        text.contains("red &amp; more"),
        "the text around the colours stays",
    );
    r.check(
        !text.contains('\u{1b}') && !text.contains("[31m"),
        "no terminal escapes",
    );
    r.check(
        text.contains("green olleh .") && !text.contains("32m") && !text.contains('\u{9b}'),
        "8-bit (C1) sequences removed whole",
    );
    r.check(
        !text.contains('\u{202e}') && !text.contains('\u{202c}'),
        "no bidirectional override (Trojan Source)",
    );
    r.check(
        text.contains("<span class=\"stderr\">warn &lt;b&gt;\n</span>"),
        "stderr marked and escaped",
    );
    r.check(text.contains("<h2>Result</h2>"), "the Result");
    r.check(
        !text.contains("data-follow"),
        "a finished run is not followed",
    );
    r.check(
        !text.contains("id=\"cancel\""),
        "no Cancel for a finished run",
    );
    r.check(
        !text.contains("<script>") && text.contains("<script src=\"/static/app.js\""),
        "only the script file",
    );
    r.check(text.contains("Exit code"), "steps with exit codes");
    // The output over the API for a member: session cookie or bearer
    // application key; a session's POST needs CSRF proof.
    let c = cookie(&alice);
    let url = format!("/api/runs/{id}/output");
    let v = t.request("GET", &url, &[("Cookie", c.as_str())], b"").ok();
    assert_eq!(v["Stderr"], json!("warn <b>\n"));
    let settings = page(&t, "/workspaces/ops/settings", &alice);
    let form = format!("csrf={}", hidden(&settings, "csrf"));
    let r = t.request(
        "POST",
        "/workspaces/ops/settings/application-key",
        &[
            ("Cookie", c.as_str()),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        form.as_bytes(),
    );
    let key = key_on(&r);
    let bearer = format!("Bearer {key}");
    let ua = ("User-Agent", "trigd-tests/1.0");
    let v = t
        .request("GET", &url, &[("Authorization", bearer.as_str()), ua], b"")
        .ok();
    assert_eq!(v["Run"], json!(id));
    let cancel = format!("/api/runs/{id}/cancel");
    t.request("POST", &cancel, &[("Cookie", c.as_str())], b"")
        .err(403, "csrf_rejected");
    t.request(
        "POST",
        &cancel,
        &[("Authorization", bearer.as_str()), ua],
        b"",
    )
    .err(409, "run_ended");
    let bob = cookie(&login(&t, "bob"));
    t.request("GET", &url, &[("Cookie", bob.as_str())], b"")
        .err(404, "run_not_found");

    let js = t.get("/static/app.js");
    js.status_is(200);
    js.check(js.text().contains("EventSource"), "app.js follows runs");
}

#[test]
fn the_cancel_button_needs_the_csrf_token_and_stops_the_group() {
    let (dir, t) = start("pages_cancel", "kill_grace = \"1s\"");
    let id = run(&t, 2, "stubborn", "&run_async=true");
    t.wait_for(WAIT, "the run to start", || {
        dir.read_opt("work/leader")
            .is_some_and(|s| !s.trim().is_empty())
    });
    let leader: u32 = dir.read("work/leader").trim().parse().unwrap();
    let alice = login(&t, "alice");
    let r = page(&t, &format!("/runs/{id}"), &alice);
    r.check_eq(
        r.header("content-security-policy"),
        Some(&*CSP.replace("form-action", "connect-src 'self'; form-action")),
        "CSP of a live run: its own event stream only",
    );
    let text = r.text();
    r.check(text.contains("id=\"cancel\""), "a Cancel button");
    r.check(
        text.contains(&format!("data-follow=\"/api/runs/{id}/output?follow=1\"")),
        "the output is followed",
    );
    let csrf = hidden(&r, "csrf");
    let c = cookie(&alice);
    let form = [
        ("Cookie", c.as_str()),
        ("Content-Type", "application/x-www-form-urlencoded"),
    ];
    let url = format!("/runs/{id}/cancel");
    t.request("POST", &url, &form, b"csrf=wrong")
        .err(403, "csrf_rejected");
    t.request("POST", &url, &form, b"")
        .err(403, "csrf_rejected");
    let bob = login(&t, "bob");
    let cb = cookie(&bob);
    let bob_form = [
        ("Cookie", cb.as_str()),
        ("Content-Type", "application/x-www-form-urlencoded"),
    ];
    let bob_csrf = hidden(&page(&t, "/runs", &bob), "csrf");
    t.request(
        "POST",
        &url,
        &bob_form,
        format!("csrf={bob_csrf}").as_bytes(),
    )
    .err(404, "run_not_found");
    assert!(
        !group_members(leader).is_empty(),
        "still running after refused cancels"
    );

    let r = t.request("POST", &url, &form, format!("csrf={csrf}").as_bytes());
    r.status_is(303);
    r.check_eq(
        r.header("location"),
        Some(format!("/runs/{id}").as_str()),
        "back to the run",
    );
    t.wait_for(WAIT, "no process of the group left", || {
        group_members(leader).is_empty()
    });
    let v = run_record(&t, &id);
    assert_eq!(v["State"], json!("cancelled"));
    let text = page(&t, &format!("/runs/{id}"), &alice).text();
    assert!(text.contains("state-cancelled\">cancelled"), "{text}");
    let r = t.request("POST", &url, &form, format!("csrf={csrf}").as_bytes());
    r.err(409, "run_ended");
}

/// One `runs.log` line of a finished run.
fn record_line(i: usize) -> String {
    let states = ["finished", "failed", "timed_out", "cancelled"];
    let tool = if i % 10 == 0 {
        ",\"Tool\":\"inventory/staging\""
    } else {
        ""
    };
    format!(
        "{{\"Run\":\"{i:032x}\",\"State\":\"{}\",\"Program\":{},\"Function\":\"noisy\",\"Async\":true,\
         \"By\":\"api_key:all\"{tool},\"CreatedAt\":\"2026-11-20T10:00:00.000Z\",\
         \"StartedAt\":\"2026-11-20T10:00:00.000Z\",\"FinishedAt\":\"2026-11-20T10:00:01.500Z\",\
         \"Steps\":[{{\"Kind\":\"shell\",\"ExitCode\":0,\"StdoutTruncated\":false,\"StderrTruncated\":false,\"DurationMs\":1500}}],\
         \"Result\":[\"r{i}\"]}}\n",
        states[i % states.len()],
        2 + (i % 2),
    )
}

#[test]
fn a_page_of_runs_with_100000_runs_in_the_state_dir() {
    let dir = setup_dir("pages_100k", "run_retention = 200000");
    let mut log = String::with_capacity(100_000 * 420);
    for i in 0..100_000 {
        log.push_str(&record_line(i));
    }
    dir.mkdir("state");
    fs::write(dir.path("state/runs.log"), log).unwrap();
    let started = Instant::now();
    let t = Trigd::start_within(&dir, Duration::from_secs(120));
    let startup = started.elapsed();
    let alice = login(&t, "alice");
    let mut report = format!("start-up with 100,000 runs: {} ms\n", startup.as_millis());
    let mut slowest = Duration::ZERO;
    // Program 2 (ops) holds the even runs; alice sees only those.
    let cases = [
        ("/runs", format!("{:032x}", 99_998)),
        (
            "/runs?state=timed_out&program=2",
            format!("{:032x}", 99_998),
        ),
        // The cursor of the 150th tool run: the 4th page starts after it.
        (
            "/runs?tool=inventory&cursor=1795168800000.000000000000000000000000000180c4",
            format!("{:032x}", 99_990 - 150 * 10),
        ),
        // Far back: the cursor is a position, found by a binary search.
        (
            "/runs?cursor=1795168800000.00000000000000000000000000000064",
            format!("{:032x}", 98),
        ),
        ("/runs?state=failed", String::new()),
    ];
    for (path, first) in &cases {
        let start = Instant::now();
        let r = page(&t, path, &alice);
        let took = start.elapsed();
        slowest = slowest.max(took);
        writeln!(report, "{path}: {} ms", took.as_millis()).ok();
        r.status_is(200);
        let text = r.text();
        let rows = text.matches("<tr><td><a href=\"/runs/").count();
        if first.is_empty() {
            // Failed runs are the odd ones (program 3, dev): none visible.
            r.check_eq(rows, 0, "rows of another workspace");
        } else {
            r.check_eq(rows, 50, "rows on a page");
            let at = text.find("<tr><td><a href=\"/runs/").unwrap();
            r.check(
                text[at..].contains(first.as_str()),
                format!("{path}: first row {first}"),
            );
            let first_at = text[at..].find(first.as_str()).unwrap();
            r.check(first_at < 200, format!("{path}: {first} is the first row"));
        }
    }
    eprintln!("runs pages with 100,000 runs:\n{report}");
    // A bound, not a speed assertion: a page must not scan the log on disk.
    assert!(
        slowest < Duration::from_secs(10),
        "a page took {slowest:?}:\n{report}"
    );
}
