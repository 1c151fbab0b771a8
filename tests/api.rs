//! `POST /api`: the success shapes of the original interface, every error
//! row of the manual (docs/http-api.md; rate limiting is in `limits.rs`), busy/queue bounds, timeouts and the
//! guarantee that a caller's value can never be spliced into a command.

use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::util::*;

/// Program 1: two outputs echoed back through argv.
const ECHO: &str = r#"
id = 1
name = "echo"

[[functions]]
name = "echo"
command = ["printf", "%s|%s", "{a}", "{b}"]
[functions.webhook]
outputs = ["a", "b"]
"#;

/// Program 2 in workspace `ops`: `f` prints "ops".
pub const IN_OPS: &str = r#"
id = 2
name = "in-ops"
workspace = "ops"

[[functions]]
name = "f"
command = ["printf", "ops"]
[functions.webhook]
"#;

/// Program 1: no outputs, prints "ok".
pub const OK: &str = r#"
id = 1
name = "ok"

[[functions]]
name = "ok"
command = ["printf", "ok"]
[functions.webhook]
"#;

/// Program 3: one triggered function among a helper and an inactive one.
const MULTI: &str = r#"
id = 3
name = "multi"

[[functions]]
name = "helper"
command = ["printf", "helper"]

[[functions]]
name = "off"
command = ["printf", "off"]
[functions.webhook]
active = false
outputs = ["x"]

[[functions]]
name = "main"
command = ["printf", "main"]
[functions.webhook]
"#;

/// Program 4: two triggered functions and a helper.
const TWO: &str = r#"
id = 4
name = "two"

[[functions]]
name = "a"
command = ["printf", "a"]
[functions.webhook]

[[functions]]
name = "c"
command = ["printf", "c"]

[[functions]]
name = "b"
command = ["printf", "b"]
[functions.webhook]
"#;

/// Program 5: nothing triggered.
const DEAD: &str = r#"
id = 5
name = "dead"

[[functions]]
name = "helper"
command = ["printf", "helper"]

[[functions]]
name = "off"
command = ["printf", "off"]
[functions.webhook]
active = false
"#;

/// Program 1: `gate` holds its run slot until `work/release` exists; `quick`
/// returns at once.
pub const GATE: &str = r#"
id = 1
name = "gate"

[[functions]]
name = "gate"
workdir = "../work"
timeout = "30s"
steps = [{ shell = 'echo "$$" >> started; while [ ! -e release ] && [ -e "$PWD" ]; do sleep 0.02; done; printf released' }]
[functions.webhook]

[[functions]]
name = "quick"
command = ["printf", "quick"]
[functions.webhook]
"#;

fn api(key: &str, program: &str) -> String {
    format!("/api?api_key={}&program_id={program}", enc(key))
}

#[test]
fn sync_run_returns_program_finished_with_result_and_run_id() {
    let (_dir, t) = serve("api_sync", "", &[("echo.toml", ECHO)]);
    let r = t.post(&format!("{}{}", api(KEY, "1"), vars(&["x", "y"])));
    let v = r.ok();
    r.check_eq(&v["Success"], &json!("Program finished."), "Success");
    r.check_eq(&v["Result"], &json!(["x|y"]), "Result");
    r.run_id(&v);
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort();
    r.check_eq(
        keys,
        vec!["Result", "Run", "Success"],
        "keys of the sync response",
    );
}

#[test]
fn async_run_returns_program_started_without_result() {
    let (_dir, t) = serve("api_async", "", &[("echo.toml", ECHO)]);
    let r = t.post(&format!(
        "{}{}&run_async=true",
        api(KEY, "1"),
        vars(&["x", "y"])
    ));
    let v = r.ok();
    r.check_eq(&v["Success"], &json!("Program started."), "Success");
    r.check(
        v.get("Result").is_none(),
        "an async response must have no Result key",
    );
    r.run_id(&v);
}

#[test]
fn two_runs_get_different_run_ids() {
    let (_dir, t) = serve("api_run_ids", "", &[("ok.toml", OK)]);
    let r1 = t.post(&api(KEY, "1"));
    let r2 = t.post(&api(KEY, "1"));
    let (a, b) = (r1.run_id(&r1.ok()), r2.run_id(&r2.ok()));
    r2.check(a != b, format!("both runs got id {a}"));
}

#[test]
fn variables_bind_by_position_to_outputs() {
    let prog = r#"
id = 1
name = "bind"

[[functions]]
name = "bind"
steps = [
  { command = ["printf", "zz=%s aa=%s mm=%s", "{zz}", "{aa}", "{mm}"] },
  { shell = 'printf "zz=%s aa=%s mm=%s" "$zz" "$aa" "$mm"' },
  { command = ["printf", "%s", "--out={aa}.{mm}/{{zz}}"] },
]
[functions.webhook]
outputs = ["zz", "aa", "mm"]
"#;
    let (_dir, t) = serve("api_bind", "", &[("bind.toml", prog)]);
    let r = t.post(&format!(
        "{}{}",
        api(KEY, "1"),
        vars(&["first", "second", "third"])
    ));
    let v = r.ok();
    r.check_eq(
        &v["Result"],
        &json!([
            "zz=first aa=second mm=third",
            "zz=first aa=second mm=third",
            "--out=second.third/{zz}"
        ]),
        "Result (argv, env, placeholder inside an argument, literal braces)",
    );
}

#[test]
fn result_elements_are_json_or_text_minus_one_newline() {
    let prog = r#"
id = 1
name = "shapes"

[[functions]]
name = "shapes"
steps = [
  { shell = "printf '%s' '{\"k\": [1, 2], \"s\": \"t\"}'" },
  { command = ["printf", 'hello\n'] },
  { command = ["printf", 'two\n\n'] },
  { command = ["printf", '42'] },
  { command = ["true"] },
  { call = "inner", args = ["lit-{v}"] },
]
[functions.webhook]
outputs = ["v"]

[[functions]]
name = "inner"
steps = [
  { command = ["printf", "%s", "{w}"] },
  { shell = 'printf "[%s]\n" "$w"' },
]
[functions.webhook]
active = false
outputs = ["w"]
"#;
    let (_dir, t) = serve("api_shapes", "", &[("shapes.toml", prog)]);
    let r = t.post(&format!(
        "{}{}&function=shapes",
        api(KEY, "1"),
        vars(&["val"])
    ));
    let v = r.ok();
    r.check_eq(
        &v["Result"],
        &json!([
            {"k": [1, 2], "s": "t"},
            "hello",
            "two\n",
            "42",
            "",
            ["lit-val", "[lit-val]"]
        ]),
        "Result",
    );
}

#[test]
fn function_omitted_runs_the_only_triggered_function() {
    let (_dir, t) = serve("api_only_triggered", "", &[("multi.toml", MULTI)]);
    let r = t.post(&api(KEY, "3"));
    r.check_eq(&r.ok()["Result"], &json!(["main"]), "Result");
    let r = t.post(&format!("{}&function=main", api(KEY, "3")));
    r.check_eq(
        &r.ok()["Result"],
        &json!(["main"]),
        "Result with function=main",
    );
}

#[test]
fn function_omitted_with_several_triggered_is_function_required() {
    let (_dir, t) = serve("api_function_required", "", &[("two.toml", TWO)]);
    let r = t.post(&api(KEY, "4"));
    let v = r.err(400, "function_required");
    let mut names: Vec<String> = serde_json::from_value(v["Functions"].clone())
        .unwrap_or_else(|_| r.fail("\"Functions\" is not an array of strings"));
    names.sort();
    r.check_eq(
        names,
        vec!["a".to_string(), "b".to_string()],
        "Functions (sorted)",
    );
    let r = t.post(&format!("{}&function=b", api(KEY, "4")));
    r.check_eq(&r.ok()["Result"], &json!(["b"]), "Result with function=b");
}

#[test]
fn function_without_active_trigger_is_trigger_inactive() {
    let (_dir, t) = serve("api_trigger_inactive", "", &[("multi.toml", MULTI)]);
    // Inactive webhook (it declares one output: the count is not the issue).
    t.post(&format!("{}&function=off", api(KEY, "3")))
        .err(409, "trigger_inactive");
    t.post(&format!("{}&function=off{}", api(KEY, "3"), vars(&["1"])))
        .err(409, "trigger_inactive");
    // No webhook at all.
    t.post(&format!("{}&function=helper", api(KEY, "3")))
        .err(409, "trigger_inactive");
}

#[test]
fn unknown_function_is_function_not_found() {
    let (_dir, t) = serve("api_function_not_found", "", &[("multi.toml", MULTI)]);
    let r = t.post(&format!("{}&function=nope", api(KEY, "3")));
    let v = r.err(404, "function_not_found");
    r.check_eq(
        &v["Functions"],
        &json!(["main"]),
        "Functions (names with active webhooks)",
    );
}

#[test]
fn program_without_active_trigger_is_no_active_trigger() {
    let (_dir, t) = serve("api_no_active_trigger", "", &[("dead.toml", DEAD)]);
    t.post(&api(KEY, "5")).err(409, "no_active_trigger");
}

#[test]
fn missing_and_invalid_api_key_are_401() {
    let (_dir, t) = serve("api_keys_401", "", &[("ok.toml", OK)]);
    t.post("/api?program_id=1").err(401, "missing_api_key");
    t.post(&api("not-a-key", "1")).err(401, "invalid_api_key");
    // A key one character off.
    let off = format!("{}x", &KEY[..KEY.len() - 1]);
    t.post(&api(&off, "1")).err(401, "invalid_api_key");
    // Bearer with a bad key.
    t.request(
        "POST",
        "/api?program_id=1",
        &[("Authorization", "Bearer not-a-key")],
        b"",
    )
    .err(401, "invalid_api_key");
}

#[test]
fn authentication_comes_before_program_checks() {
    let (_dir, t) = serve("api_auth_first", "", &[("ok.toml", OK)]);
    t.post("/api?program_id=abc").err(401, "missing_api_key");
    t.post("/api?program_id=999").err(401, "missing_api_key");
    t.post(&api("bad", "999")).err(401, "invalid_api_key");
    t.post(&api("bad", "abc")).err(401, "invalid_api_key");
    t.post(&format!("{}&function=nope", api("bad", "1")))
        .err(401, "invalid_api_key");
}

#[test]
fn key_out_of_scope_looks_like_unknown_program() {
    let in_dev = r#"
id = 33
name = "in-dev"
workspace = "dev"

[[functions]]
name = "f"
command = ["printf", "dev"]
[functions.webhook]
"#;
    let (_dir, t) = serve(
        "api_scope",
        "",
        &[("ok.toml", OK), ("ops.toml", IN_OPS), ("dev.toml", in_dev)],
    );
    // The unrestricted key reaches everything.
    for p in ["1", "2", "33"] {
        t.post(&api(KEY, p)).ok();
    }
    // Workspace scope.
    t.post(&api(KEY_OPS, "2")).ok();
    let out = t.post(&api(KEY_OPS, "33"));
    let out_v = out.err(404, "program_not_found");
    t.post(&api(KEY_OPS, "1")).err(404, "program_not_found");
    // Program scope.
    t.post(&api(KEY_P2, "2")).ok();
    t.post(&api(KEY_P2, "1")).err(404, "program_not_found");
    t.post(&api(KEY_P2, "33")).err(404, "program_not_found");
    // Out of scope must be indistinguishable from unknown.
    let unknown = t.post(&api(KEY_OPS, "88"));
    let unknown_v = unknown.err(404, "program_not_found");
    let norm = |v: &Value, id: &str| {
        let mut v = v.clone();
        let e = v["Error"].as_str().unwrap().replace(id, "<id>");
        v["Error"] = json!(e);
        v
    };
    out.check_eq(
        norm(&out_v, "33"),
        norm(&unknown_v, "88"),
        "body for an out-of-scope program vs an unknown one (ids replaced)",
    );
    // Even a wrong function name must not reveal the program.
    t.post(&format!("{}&function=nope", api(KEY_OPS, "33")))
        .err(404, "program_not_found");
}

#[test]
fn invalid_program_id_is_400() {
    let (_dir, t) = serve("api_program_id", "", &[("ok.toml", OK)]);
    t.post(&format!("/api?api_key={KEY}"))
        .err(400, "invalid_program_id");
    // Digits only: no sign, no white space around them.
    for bad in [
        "abc", "1.5", "", "0x1", "1abc", "%20", "+1", "%201", "1%20", "-0",
    ] {
        t.post(&format!("/api?api_key={KEY}&program_id={bad}"))
            .err(400, "invalid_program_id");
    }
    t.post(&api(KEY, "99999")).err(404, "program_not_found");
    // A method name is case-sensitive (RFC 9110 §9.1): `post` is not POST.
    let line =
        format!("post /api?api_key={KEY}&program_id=1 HTTP/1.1\r\nConnection: close\r\n\r\n");
    send_raw(&t.addr, line.as_bytes()).err(405, "method_not_allowed");
}

#[test]
fn variables_count_mismatch_is_400_with_outputs() {
    let (_dir, t) = serve(
        "api_mismatch",
        "",
        &[
            ("echo.toml", ECHO),
            ("ok.toml", &OK.replace("id = 1", "id = 2")),
        ],
    );
    for (values, got) in [(vec![], 0), (vec!["x"], 1), (vec!["x", "y", "z"], 3)] {
        let r = t.post(&format!("{}{}", api(KEY, "1"), vars(&values)));
        let v = r.err(400, "variables_mismatch");
        r.check_eq(&v["Outputs"], &json!(["a", "b"]), "Outputs");
        let want = format!("expected 2 variables for outputs [a, b], got {got}");
        r.check(
            v["Error"].as_str().unwrap().contains(&want),
            format!("Error should say {want:?}"),
        );
    }
    // A function without outputs takes no variables.
    let r = t.post(&format!("{}{}", api(KEY, "2"), vars(&["x"])));
    let v = r.err(400, "variables_mismatch");
    r.check_eq(&v["Outputs"], &json!([]), "Outputs");
}

#[test]
fn run_async_accepts_the_documented_literals() {
    let (_dir, t) = serve("api_run_async", "", &[("ok.toml", OK)]);
    for yes in ["true", "True", "1"] {
        let r = t.post(&format!("{}&run_async={yes}", api(KEY, "1")));
        let v = r.ok();
        r.check_eq(&v["Success"], &json!("Program started."), "Success");
        r.check(v.get("Result").is_none(), "no Result in an async response");
    }
    for no in ["false", "False", "0"] {
        let r = t.post(&format!("{}&run_async={no}", api(KEY, "1")));
        let v = r.ok();
        r.check_eq(&v["Success"], &json!("Program finished."), "Success");
        r.check_eq(&v["Result"], &json!(["ok"]), "Result");
    }
    for bad in ["yes", "TRUE", "2", ""] {
        let r = t.post(&format!("{}&run_async={}", api(KEY, "1"), enc(bad)));
        let v = r.err(400, "invalid_parameter");
        r.check_eq(&v["Parameter"], &json!("run_async"), "Parameter");
    }
}

#[test]
fn unknown_or_repeated_parameter_is_invalid_parameter() {
    let (_dir, t) = serve("api_params", "", &[("ok.toml", OK)]);
    let r = t.post(&format!("{}&foo=1", api(KEY, "1")));
    let v = r.err(400, "invalid_parameter");
    r.check_eq(&v["Parameter"], &json!("foo"), "Parameter");
    r.check(
        v["Error"].as_str().unwrap().contains("foo"),
        "Error should name the parameter",
    );
    // A near-miss spelling is not accepted either.
    let r = t.post(&format!("{}&variable=1", api(KEY, "1")));
    r.check_eq(
        &r.err(400, "invalid_parameter")["Parameter"],
        &json!("variable"),
        "Parameter",
    );
    for (extra, name) in [
        ("&run_async=true&run_async=true", "run_async"),
        ("&function=ok&function=ok", "function"),
        ("&program_id=1", "program_id"),
    ] {
        let r = t.post(&format!("{}{extra}", api(KEY, "1")));
        r.check_eq(
            &r.err(400, "invalid_parameter")["Parameter"],
            &json!(name),
            "Parameter",
        );
    }
    // Nothing ran for the rejected requests: the good one still works.
    t.post(&api(KEY, "1")).ok();
}

#[test]
fn non_post_on_api_is_405_with_allow() {
    let (_dir, t) = serve("api_405", "", &[("ok.toml", OK)]);
    for method in ["GET", "PUT", "DELETE", "PATCH"] {
        let r = t.request(method, &api(KEY, "1"), &[], b"");
        let v = r.err(405, "method_not_allowed");
        r.check(
            r.header("Allow")
                .is_some_and(|a| a.split(',').any(|m| m.trim() == "POST")),
            "Allow header should list POST",
        );
        r.check_eq(&v["Allow"], &json!(["POST"]), "Allow field");
    }
    // The method is checked before the key.
    t.get("/api").err(405, "method_not_allowed");
}

#[test]
fn bearer_header_replaces_api_key() {
    let (_dir, t) = serve("api_bearer", "", &[("echo.toml", ECHO)]);
    let auth = format!("Bearer {KEY}");
    let r = t.request(
        "POST",
        &format!("/api?program_id=1{}", vars(&["p", "q"])),
        &[("Authorization", &auth)],
        b"",
    );
    r.check_eq(&r.ok()["Result"], &json!(["p|q"]), "Result");
    let auth = format!("Bearer {KEY_P2}");
    t.request(
        "POST",
        "/api?program_id=1",
        &[("Authorization", &auth)],
        b"",
    )
    .err(404, "program_not_found");
}

#[test]
fn failing_step_is_run_failed_with_step_exit_code_and_stderr_tail() {
    let prog = r#"
id = 1
name = "fail"

[[functions]]
name = "fail"
workdir = "../work"
steps = [
  { command = ["printf", "first"] },
  { shell = "head -c 100000 /dev/zero | tr '\\000' x >&2; echo >&2; echo 'disk is on fire' >&2; exit 3" },
  { shell = "touch third-ran" },
]
[functions.webhook]
"#;
    let (dir, t) = serve("api_run_failed", "", &[("fail.toml", prog)]);
    let r = t.post(&api(KEY, "1"));
    let v = r.err(500, "run_failed");
    r.run_id(&v);
    r.check_eq(&v["Step"], &json!(1), "Step (0-based)");
    r.check_eq(&v["ExitCode"], &json!(3), "ExitCode");
    r.check(
        v["Stderr"]
            .as_str()
            .is_some_and(|s| s.contains("disk is on fire")),
        "Stderr should hold the tail of the step's stderr",
    );
    r.check(
        !dir.exists("work/third-ran"),
        "a step after the failed one ran",
    );
}

#[test]
fn step_killed_by_signal_is_run_failed_with_signal() {
    let prog = r#"
id = 1
name = "killed"

[[functions]]
name = "killed"
steps = [{ shell = "kill -KILL $$" }]
[functions.webhook]
"#;
    let (_dir, t) = serve("api_signal", "", &[("killed.toml", prog)]);
    let r = t.post(&api(KEY, "1"));
    let v = r.err(500, "run_failed");
    r.check_eq(&v["Step"], &json!(0), "Step");
    r.check(
        v["Signal"] == json!(9) || v["Signal"].as_str().is_some_and(|s| s.contains("KILL")),
        "Signal should be 9 (SIGKILL)",
    );
    r.check(
        v["ExitCode"].is_null(),
        "no ExitCode for a step killed by a signal",
    );
}

#[test]
fn timeout_is_504_and_background_child_is_gone() {
    // The step ignores SIGTERM and leaves a background child that does too:
    // only the SIGKILL to the whole group after kill_grace ends them.
    let prog = r#"
id = 1
name = "slow"

[[functions]]
name = "slow"
workdir = "../work"
timeout = "3s"
steps = [{ shell = "trap '' TERM; sleep 30 & echo $! > bg.pid; wait; wait" }]
[functions.webhook]
"#;
    let (dir, t) = serve(
        "api_timeout",
        r#"kill_grace = "1s""#,
        &[("slow.toml", prog)],
    );
    let start = Instant::now();
    let r = t.post(&api(KEY, "1"));
    let v = r.err(504, "run_timeout");
    r.run_id(&v);
    // Tells the 3 s timeout (+1 s grace) from the step's own 30 s; not a
    // measure (a loaded machine can take seconds more). 3 s, not 1 s: the
    // shell must write bg.pid before it, also on a loaded machine.
    r.check(
        start.elapsed() < Duration::from_secs(20),
        format!("the timeout of 3s (+1s grace) took {:?}", start.elapsed()),
    );
    let pid: u32 = dir
        .read("work/bg.pid")
        .trim()
        .parse()
        .unwrap_or_else(|_| r.fail("work/bg.pid does not hold a pid"));
    t.wait_for(
        Duration::from_secs(20),
        &format!("background child {pid} of the timed-out run to be gone"),
        || !pid_alive(pid),
    );
}

#[test]
fn sync_run_waits_queue_timeout_for_a_slot_then_503_busy_with_retry_after() {
    let (dir, t) = serve(
        "api_busy",
        "max_concurrent_runs = 1\nqueue_timeout = \"300ms\"",
        &[("gate.toml", GATE)],
    );
    let c = t.client();
    let first = thread::spawn(move || c.post(&(api(KEY, "1") + "&function=gate")));
    t.wait_for(WAIT, "the first run to start", || {
        dir.exists("work/started")
    });
    for extra in ["&function=quick", "&function=gate"] {
        let asked = Instant::now();
        let r = t.post(&(api(KEY, "1") + extra));
        r.err(503, "busy");
        r.check(
            asked.elapsed() >= Duration::from_millis(300),
            format!("refused after {:?}, before queue_timeout", asked.elapsed()),
        );
        r.check(
            r.header("Retry-After")
                .is_some_and(|h| h.trim().parse::<u64>().is_ok()),
            "Retry-After header with a number of seconds",
        );
    }
    dir.write("work/release", "");
    let r = first.join().expect("first request thread");
    r.check_eq(
        &r.ok()["Result"],
        &json!(["released"]),
        "Result of the first run",
    );
    // The slot is free again.
    t.post(&(api(KEY, "1") + "&function=quick")).ok();
}

#[test]
fn full_queue_is_503_busy() {
    let (dir, t) = serve(
        "api_queue_full",
        "max_concurrent_runs = 1\nmax_queued_runs = 1",
        &[("gate.toml", GATE)],
    );
    let r = t.post(&(api(KEY, "1") + "&function=gate&run_async=true"));
    let running = r.run_id(&r.ok());
    t.wait_for(WAIT, "the first run to start", || {
        dir.exists("work/started")
    });
    let r = t.post(&(api(KEY, "1") + "&function=quick&run_async=true"));
    let queued = r.run_id(&r.ok());
    let r = t.post(&(api(KEY, "1") + "&function=quick&run_async=true"));
    r.err(503, "busy");
    r.check(r.header("Retry-After").is_some(), "Retry-After header");
    // A sync request finds no slot either.
    t.post(&(api(KEY, "1") + "&function=quick"))
        .err(503, "busy");
    dir.write("work/release", "");
    for id in [running, queued] {
        t.wait_for(WAIT, &format!("run {id} to finish"), || {
            t.get(&format!("/api/runs/{id}?api_key={KEY}")).json()["State"] == json!("finished")
        });
    }
}

#[test]
fn values_cannot_inject_and_arrive_byte_exact() {
    let prog = r#"
id = 1
name = "inject"

[[functions]]
name = "inject"
workdir = "../work"
steps = [
  { command = ["printf", "<%s>", "{v}"] },
  { shell = 'printf "<%s>" "$v"' },
  { command = ["sh", "-c", 'printf %s "$1" > argv.out', "sh", "{v}"] },
  { shell = 'printf %s "$v" > env.out' },
]
[functions.webhook]
outputs = ["v"]
"#;
    let (dir, t) = serve("api_injection", "", &[("inject.toml", prog)]);
    let pwned = dir.path_str("pwned");
    let long: String = (0..1000).map(|i| (b'a' + (i % 26) as u8) as char).collect();
    let values = vec![
        format!("x; touch {pwned}"),
        format!("$(touch {pwned})"),
        format!("`touch {pwned}`"),
        format!("'; touch {pwned}; echo '"),
        format!("\"; touch {pwned}; echo \""),
        format!("a\nb\ntouch {pwned}\n"),
        format!("| touch {pwned} && echo >"),
        "{v} {{v}} $v ${v} %s %n \\ \\n".to_string(),
        "héllo wörld ✓ 日本語 🎉".to_string(),
        "-n".to_string(),
        String::new(),
        long,
    ];
    for value in &values {
        let r = t.post(&format!("{}&variables={}", api(KEY, "1"), enc(value)));
        let v = r.ok();
        let want = format!("<{value}>");
        r.check_eq(&v["Result"][0], &json!(want), "value through argv ({v})");
        r.check_eq(&v["Result"][1], &json!(want), "value through env ($v)");
        r.check_eq(
            String::from_utf8_lossy(&dir.read_bytes("work/argv.out")).into_owned(),
            value.clone(),
            "bytes written from argv",
        );
        r.check_eq(
            String::from_utf8_lossy(&dir.read_bytes("work/env.out")).into_owned(),
            value.clone(),
            "bytes written from env",
        );
        r.check(
            !dir.exists("pwned"),
            format!("the value {value:?} ran a command"),
        );
    }
}

#[test]
fn error_bodies_are_json_objects_with_error_and_code() {
    let (_dir, t) = serve("api_error_bodies", "", &[("ok.toml", OK)]);
    // Each `err` call asserts JSON with a non-empty Error and the Code.
    for (method, path, status, code) in [
        ("GET", "/api".to_string(), 405, "method_not_allowed"),
        ("POST", "/api".to_string(), 401, "missing_api_key"),
        ("POST", api("nope", "1"), 401, "invalid_api_key"),
        (
            "POST",
            format!("/api?api_key={KEY}"),
            400,
            "invalid_program_id",
        ),
        ("POST", api(KEY, "7"), 404, "program_not_found"),
        ("GET", "/nope".to_string(), 404, "not_found"),
        ("GET", "/".to_string(), 401, "unauthorized"),
        ("POST", "/api/nope".to_string(), 404, "not_found"),
        (
            "GET",
            "/api/runs/0123456789abcdef0123456789abcdef?api_key=".to_string() + KEY,
            404,
            "run_not_found",
        ),
    ] {
        let r = t.request(method, &path, &[], b"");
        r.err(status, code);
        r.check(
            r.header("Content-Type")
                .is_some_and(|c| c.contains("application/json")),
            "Content-Type should be application/json",
        );
    }
}

#[test]
fn healthz_reports_generation() {
    let (_dir, t) = serve("api_healthz", "", &[("ok.toml", OK), ("multi.toml", MULTI)]);
    let r = t.get("/healthz");
    let v = r.ok();
    r.check_eq(&v["Status"], &json!("ok"), "Status");
    r.check(
        v["Generation"].as_u64().is_some_and(|g| g >= 1),
        "Generation should be an integer >= 1",
    );
    r.check_eq(&v["Programs"], &json!(2), "Programs");
    r.check_eq(&v["Tools"], &json!(0), "Tools");
    r.check(
        v["LastReloadError"].is_null(),
        "LastReloadError should be null",
    );
}

#[test]
fn a_nul_byte_in_a_value_is_invalid_parameter_and_runs_nothing() {
    let (_dir, t) = serve("api_nul", "", &[("echo.toml", ECHO)]);
    let r = t.post(&format!("{}&variables=a%00b&variables=c", api(KEY, "1")));
    let v = r.err(400, "invalid_parameter");
    r.check(
        v["Error"].as_str().unwrap_or_default().contains("NUL"),
        "Error should say what is wrong",
    );
    r.check(v.get("Run").is_none(), "no run is started");
}

#[test]
fn other_methods_on_known_paths_are_405_with_allow() {
    let (_dir, t) = serve("api_405", "", &[("ok.toml", OK)]);
    for (method, path, allow) in [
        ("POST", "/healthz", "GET, HEAD"),
        ("DELETE", "/metrics", "GET, HEAD"),
        ("PUT", "/openapi.json", "GET, HEAD"),
        ("POST", "/workspaces/ops/settings", "GET, HEAD"),
        ("GET", "/workspaces/ops/settings/application-key", "POST"),
    ] {
        let r = t.request(method, path, &[], b"");
        r.err(405, "method_not_allowed");
        r.check_eq(r.header("Allow"), Some(allow), "Allow header");
    }
}
