//! Config and hooks files that try to take the server down (docs/operations.md,
//! "Limits and defaults"): a YAML alias bomb, nesting 5,000 deep in YAML,
//! JSON and TOML, files over the size bound, hook ids no URL can name.
//! Each is given to a running server by hot reload, with its address
//! space capped as an operator's systemd `MemoryMax` would cap it (a
//! regression aborts the server instead of slowing the test), and to
//! `trigd check` under the same cap: the server keeps serving the last
//! good files and both name the file, line and column.

use std::fs;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::util::*;

/// The address-space cap of every server and `trigd check` here (the idle
/// server maps ~170 MiB, most of it thread stacks never touched).
const CAP: u64 = 512 << 20;

/// The size bound of every config, program and hooks file.
const MAX_FILE: usize = 1 << 20;

/// A hooks file (JSON) with one hook `id` answering `msg`.
fn hook(id: &str, msg: &str) -> String {
    format!(r#"[{{"id": "{id}", "execute-command": "/bin/true", "response-message": "{msg}"}}]"#)
}

/// "Billion laughs": hook `h` whose option `x8` is 9 aliases of 9 aliases
/// … of a list of 9 strings (9^9 strings once expanded), in ~1 KB.
fn laughs() -> String {
    let mut s = "- id: h\n  execute-command: /bin/true\n  x0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n".to_string();
    for i in 1..=8 {
        let refs = vec![format!("*a{}", i - 1); 9].join(", ");
        s.push_str(&format!("  x{i}: &a{i} [{refs}]\n"));
    }
    s
}

/// Every hostile hooks file: what it is, its text, and what the error
/// must say (the first string is the location).
fn hostile_hooks() -> Vec<(&'static str, String, Vec<&'static str>)> {
    let near_limit = format!(
        r#"[{{"id": "h", "execute-command": "/bin/true", "response-message": {}1{}}}]"#,
        "[".repeat(126),
        "]".repeat(126)
    );
    let rules = format!(
        r#"[{{"id": "h", "execute-command": "/bin/true", "trigger-rule": {}{{"match": {{"type": "value", "value": "1", "parameter": {{"source": "url", "name": "x"}}}}}}{}}}]"#,
        r#"{"not": "#.repeat(60),
        "}".repeat(60)
    );
    vec![
        (
            "billion laughs",
            laughs(),
            vec!["hooks.yaml:4:12: ", "aliases"],
        ),
        (
            "YAML nested 5,000 deep",
            format!("{}x\n", "- ".repeat(5000)),
            vec!["hooks.yaml:1:257: ", "deeper than 128"],
        ),
        (
            "JSON nested 5,000 deep",
            format!("{}{}", "[".repeat(5000), "]".repeat(5000)),
            vec!["hooks.yaml:1:", "deeper than 128"],
        ),
        (
            "JSON objects nested 5,000 deep",
            format!("{}1{}", r#"{"a": "#.repeat(5000), "}".repeat(5000)),
            vec!["hooks.yaml:1:", "deeper than 128"],
        ),
        (
            "an option nested 126 deep",
            near_limit,
            vec!["hooks.yaml:1:2: ", "expected a string"],
        ),
        (
            "rules nested 60 deep",
            rules,
            vec!["hooks.yaml:1:2: ", "nest deeper than 32"],
        ),
        (
            "a file over the size bound",
            format!("[{}]", " ".repeat(MAX_FILE)),
            vec![
                "config.toml:2:16: ",
                "server.hooks_files[0]",
                "larger than 1 MiB",
            ],
        ),
    ]
}

/// Replace `rel` by `text` as an editor does: a new file renamed over it.
fn swap(dir: &TestDir, rel: &str, text: &str) {
    let tmp = format!("{rel}.new");
    dir.write(&tmp, text);
    fs::rename(dir.path(&tmp), dir.path(rel)).expect("rename");
}

/// Wait until `/healthz` names every one of `want` in `LastReloadError`.
fn wait_reload_error(t: &Trigd, what: &str, want: &[&str]) {
    let mut last = Value::Null;
    if !wait_until(WAIT, || {
        last = t.get("/healthz").json();
        let err = last["LastReloadError"].as_str().unwrap_or_default();
        want.iter().all(|w| err.contains(w))
    }) {
        t.fail(format!(
            "{what}: LastReloadError does not say all of {want:?}: {last}"
        ))
    }
}

/// Wait until `POST /hooks/<id>` answers 200 with `body`.
fn wait_hook(t: &Trigd, id: &str, body: &str) {
    let mut last = String::new();
    if !wait_until(WAIT, || {
        let r = t.post(&format!("/hooks/{id}"));
        last = format!("{} {}", r.status, r.text());
        r.status == 200 && r.text() == body
    }) {
        t.fail(format!("hook {id} answers {last:?}, want 200 {body:?}"))
    }
}

/// `trigd check --config <config>` with its address space capped at
/// [`CAP`] and 30 s to finish: exit code and stderr.
fn check_capped(config: &str) -> (Option<i32>, String) {
    let mut cmd = Command::new(BIN);
    cmd.args(["check", "--config", config])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cap_address_space(&mut cmd, CAP);
    let child = cmd.spawn().expect("spawn trigd check");
    let out = wait_bounded(child, &format!("trigd check --config {config}"));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `trigd check` on the config of `dir`: it fails (exit 1, not a signal)
/// and stderr says every one of `want`.
#[track_caller]
fn check_refuses(dir: &TestDir, what: &str, want: &[&str]) {
    let (code, stderr) = check_capped(&dir.path_str("config.toml"));
    assert_eq!(
        code,
        Some(1),
        "{what}: trigd check exit code; stderr:\n{stderr}"
    );
    for w in want {
        assert!(stderr.contains(w), "{what}: stderr lacks {w:?}:\n{stderr}");
    }
}

#[test]
fn hostile_hooks_files_leave_the_server_serving_the_last_good_hooks() {
    let dir = setup(
        "hostile_hooks_reload",
        "hooks_files = [\"hooks.yaml\"]",
        &[],
    );
    dir.write("hooks.yaml", &hook("h", "one"));
    let t = Trigd::start_capped(&dir, CAP);
    wait_hook(&t, "h", "one");
    for (what, text, want) in hostile_hooks() {
        swap(&dir, "hooks.yaml", &text);
        wait_reload_error(&t, what, &want);
        wait_hook(&t, "h", "one");
    }
    // Reload still works, and the error is gone.
    swap(&dir, "hooks.yaml", &hook("h", "two"));
    wait_hook(&t, "h", "two");
    let last = t.get("/healthz").json();
    t.check(last["LastReloadError"].is_null(), format!("{last}"));
}

#[test]
fn trigd_check_locates_each_hostile_hooks_file() {
    let dir = setup("hostile_hooks_check", "hooks_files = [\"hooks.yaml\"]", &[]);
    for (what, text, want) in hostile_hooks() {
        dir.write("hooks.yaml", &text);
        check_refuses(&dir, what, &want);
    }
}

#[test]
fn the_same_hooks_file_named_many_times_is_bounded_together() {
    // 2,000 names of one 600 KiB file: read once each, 1.2 GB in all.
    let names = vec!["\"hooks.json\""; 2000].join(", ");
    let dir = setup(
        "hostile_hooks_many",
        &format!("hooks_files = [{names}]"),
        &[],
    );
    let big = format!(
        "[{}{}]",
        hook("h", "x").trim_matches(['[', ']']),
        " ".repeat(600 << 10)
    );
    dir.write("hooks.json", &big);
    check_refuses(
        &dir,
        "one file named 2,000 times",
        &["server.hooks_files[1]", "together larger than 1 MiB"],
    );
}

#[test]
fn hostile_toml_files_leave_the_server_serving_the_last_good_config() {
    let prog = "id = 1\nname = \"p\"\n\n[[functions]]\nname = \"f\"\ncommand = [\"printf\", \"one\"]\n[functions.webhook]\n";
    let dir = setup("hostile_toml", "", &[("a.toml", prog)]);
    let t = Trigd::start_capped(&dir, CAP);
    let served = |t: &Trigd| {
        let r = t.post(&format!("/api?api_key={KEY}&program_id=1"));
        t.check(r.status == 200, format!("program 1 answers {}", r.status));
    };
    served(&t);
    let deep_array = format!("x = {}{}\n", "[".repeat(5000), "]".repeat(5000));
    let deep_table = format!("x = {}1{}\n", "{a = ".repeat(5000), "}".repeat(5000));
    let deep_key = format!("{} = 1\n", vec!["a"; 5000].join("."));
    let deep_header = format!("[{}]\n", vec!["a"; 5000].join("."));
    let over = format!("{prog}#{}\n", "x".repeat(MAX_FILE));
    let cases: Vec<(&str, &str, String, Vec<&str>)> = vec![
        (
            "a program's array nested 5,000 deep",
            "programs/a.toml",
            format!("{deep_array}{prog}"),
            vec!["programs/a.toml:1:", "recursion"],
        ),
        (
            "a program's inline table nested 5,000 deep",
            "programs/a.toml",
            format!("{deep_table}{prog}"),
            vec!["programs/a.toml:1:", "recursion"],
        ),
        (
            "a program's dotted key 5,000 long",
            "programs/a.toml",
            format!("{deep_key}{prog}"),
            vec!["programs/a.toml:1:1: ", "recursion"],
        ),
        (
            "a program's table header 5,000 long",
            "programs/a.toml",
            format!("{prog}{deep_header}"),
            // The toml crate gives this error no span.
            vec!["programs/a.toml:1:1: ", "recursion"],
        ),
        (
            "a program file over the size bound",
            "programs/a.toml",
            over.clone(),
            vec!["programs/a.toml", "larger than 1 MiB"],
        ),
        (
            "config.toml nested 5,000 deep",
            "config.toml",
            config(&deep_array),
            vec!["config.toml:2:", "recursion"],
        ),
        (
            "config.toml over the size bound",
            "config.toml",
            format!("{}#{}\n", config(""), "x".repeat(MAX_FILE)),
            vec!["config.toml", "larger than 1 MiB"],
        ),
    ];
    for (what, rel, text, want) in cases {
        swap(&dir, rel, &text);
        wait_reload_error(&t, what, &want);
        served(&t);
        check_refuses(&dir, what, &want);
        let good = if rel == "config.toml" {
            config("")
        } else {
            prog.to_string()
        };
        swap(&dir, rel, &good);
        let mut last = Value::Null;
        t.wait_for(WAIT, &format!("{what}: the error to clear"), || {
            last = t.get("/healthz").json();
            last["LastReloadError"].is_null()
        });
    }
}

#[test]
fn hook_ids_no_url_can_name_are_refused_and_the_rest_served() {
    let dir = setup("hostile_hook_ids", "hooks_files = [\"hooks.json\"]", &[]);
    let ok = r#"[{"id": "a/b", "execute-command": "/bin/true", "response-message": "ab"},
  {"id": "x y", "execute-command": "/bin/true", "response-message": "xy"}]"#;
    dir.write("hooks.json", ok);
    let t = Trigd::start_capped(&dir, CAP);
    wait_hook(&t, "a/b", "ab");
    wait_hook(&t, "x%20y", "xy");
    let bad = r#"[{"id": "a/b", "execute-command": "/bin/true", "response-message": "ab"},
  {"id": "..", "execute-command": "/bin/true"},
  {"id": "a//b", "execute-command": "/bin/true"},
  {"id": "c/", "execute-command": "/bin/true"}]"#;
    let want = [
        "hooks.json:2:3: hooks[1] \"..\": option id \"..\" can never be reached",
        "hooks.json:3:3: hooks[2] \"a//b\": option id \"a//b\" can never be reached",
        "hooks.json:4:3: hooks[3] \"c/\"",
    ];
    swap(&dir, "hooks.json", bad);
    wait_reload_error(&t, "unreachable ids", &want);
    wait_hook(&t, "x%20y", "xy");
    check_refuses(&dir, "unreachable ids", &want);
}

#[test]
fn a_secret_file_that_never_ends_is_refused() {
    let dir = setup("hostile_secret", "", &[]);
    dir.append(
        "config.toml",
        "\n[callbacks]\nsecret_file = \"/dev/zero\"\n",
    );
    check_refuses(
        &dir,
        "secret_file = /dev/zero",
        &[
            "config.toml:",
            "callbacks.secret_file",
            "larger than 64 KiB",
        ],
    );
}

/// A `*.toml` in the programs directory that is a symlink to nothing, a
/// directory or a FIFO is an error naming it: `trigd check` fails, and a
/// reload keeps the last good programs (a program whose link broke used
/// to vanish without a word).
#[test]
fn a_program_file_that_is_no_file_is_an_error_not_silence() {
    let prog = "id = 1\nname = \"p\"\n\n[[functions]]\nname = \"f\"\ncommand = [\"printf\", \"one\"]\n[functions.webhook]\n";
    let dir = setup("hostile_not_a_file", "", &[]);
    dir.write("elsewhere/p.toml", prog);
    std::os::unix::fs::symlink("../elsewhere/p.toml", dir.path("programs/p.toml")).unwrap();
    let t = Trigd::start(&dir);
    t.post(&format!("/api?api_key={KEY}&program_id=1")).ok();
    // The link's target goes: the reload is refused, program 1 stays.
    fs::remove_file(dir.path("elsewhere/p.toml")).unwrap();
    // SAFETY: kill(2) on the child's pid.
    unsafe { libc::kill(t.pid() as i32, libc::SIGHUP) };
    wait_reload_error(
        &t,
        "a broken symlink",
        &["programs/p.toml", "does not exist"],
    );
    t.post(&format!("/api?api_key={KEY}&program_id=1")).ok();
    check_refuses(
        &dir,
        "a broken symlink",
        &["programs/p.toml", "does not exist"],
    );
    fs::remove_file(dir.path("programs/p.toml")).unwrap();
    dir.mkdir("programs/d.toml");
    check_refuses(
        &dir,
        "a directory",
        &["programs/d.toml", "not a regular file"],
    );
    fs::remove_dir(dir.path("programs/d.toml")).unwrap();
    let fifo = std::ffi::CString::new(dir.path_str("programs/f.toml")).unwrap();
    // SAFETY: mkfifo(3) on a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0, "mkfifo");
    check_refuses(&dir, "a FIFO", &["programs/f.toml", "not a regular file"]);
}
