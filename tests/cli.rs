//! The command line: `check`, `keygen`, `hash-password`, `run`, `--help`,
//! `--version` and usage errors, each through the real binary.

use serde_json::json;

use crate::api::{IN_OPS, OK};
use crate::util::*;

const ECHO: &str = r#"
id = 2
name = "echo"

[[functions]]
name = "echo"
command = ["printf", "%s|%s", "{a}", "{b}"]
[functions.webhook]
outputs = ["a", "b"]
"#;

/// An unknown field on line 3.
const BAD_A: &str = r#"id = 10
name = "bad-a"
bogus = true

[[functions]]
name = "f"
command = ["printf", "a"]
[functions.webhook]
"#;

/// A placeholder naming no output, on line 6.
const BAD_B: &str = r#"id = 11
name = "bad-b"

[[functions]]
name = "g"
command = ["printf", "{nope}"]
[functions.webhook]
outputs = ["yes"]
"#;

/// The stderr line about `file`, split as (line, col, key, message).
fn located(out: &Output, file: &str) -> (usize, usize, String, String) {
    let needle = format!("{file}:");
    let line = out
        .stderr
        .lines()
        .find(|l| l.contains(&needle))
        .unwrap_or_else(|| out.fail(format!("no error line for {file}")));
    let rest = &line[line.find(&needle).unwrap() + needle.len()..];
    let mut parts = rest.splitn(3, ':');
    let (l, c) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let tail = parts.next().unwrap_or("");
    let (l, c) = match (l.parse::<usize>(), c.parse::<usize>()) {
        (Ok(l), Ok(c)) if l > 0 && c > 0 => (l, c),
        _ => out.fail(format!("{line:?} does not start with FILE:LINE:COL:")),
    };
    let (key, msg) = tail
        .strip_prefix(' ')
        .and_then(|t| t.split_once(": "))
        .unwrap_or_else(|| out.fail(format!("{line:?} is not FILE:LINE:COL: KEY: MESSAGE")));
    out.check(
        !key.is_empty() && !key.contains(char::is_whitespace) && !msg.trim().is_empty(),
        format!("{line:?} is not FILE:LINE:COL: KEY: MESSAGE (KEY without spaces)"),
    );
    (l, c, key.to_string(), msg.to_string())
}

#[test]
fn check_valid_config_prints_ok() {
    let dir = setup("cli_check_ok", "", &[("ok.toml", OK), ("echo.toml", ECHO)]);
    let out = trigd(&["check", "--config", &dir.path_str("config.toml")], None);
    out.code_is(0);
    out.check_eq(out.stdout.trim_end(), "ok: 2 programs, 0 tools", "stdout");
}

#[test]
fn check_reports_every_error_with_location_and_count() {
    let dir = setup(
        "cli_check_errors",
        "",
        &[("ok.toml", OK), ("a.toml", BAD_A), ("b.toml", BAD_B)],
    );
    let out = trigd(&["check", "--config", &dir.path_str("config.toml")], None);
    out.code_is(1);
    let (line, col, key, msg) = located(&out, "a.toml");
    out.check_eq((line, col), (3, 1), "a.toml: location of the unknown field");
    out.check(
        key.contains("bogus") || msg.contains("bogus"),
        "a.toml: the error names the field `bogus`",
    );
    let (line, _, key, msg) = located(&out, "b.toml");
    out.check(
        (4..=6).contains(&line),
        format!("b.toml: line {line} should point at the function (lines 4-6)"),
    );
    out.check(
        key.contains("functions") || key.contains("command"),
        "b.toml: KEY names the function's command",
    );
    out.check(
        msg.contains("nope"),
        "b.toml: the message names the placeholder {nope}",
    );
    out.check_eq(
        out.stderr.lines().last().map(str::trim),
        Some("2 errors"),
        "last stderr line",
    );
    out.check(
        !out.stdout.contains("ok:"),
        "no `ok:` on stdout for an invalid config",
    );
}

/// A duration too long to make a deadline of (`Instant::now() + d`
/// panicked at the first run or queued call) is refused at load, located
/// like any other mistake, in `config.toml` and in a program file.
#[test]
fn check_refuses_durations_longer_than_ten_years() {
    let long = r#"id = 12
name = "long"

[[functions]]
name = "f"
timeout = "3651d"
command = ["true"]
[functions.webhook]
"#;
    let dir = setup(
        "cli_check_long",
        "queue_timeout = 9223372036854775807",
        &[("ok.toml", OK), ("long.toml", long)],
    );
    let out = trigd(&["check", "--config", &dir.path_str("config.toml")], None);
    out.code_is(1);
    let (line, _, key, msg) = located(&out, "config.toml");
    out.check_eq(line, 2, "config.toml: the line of queue_timeout");
    out.check(
        key.contains("queue_timeout"),
        "config.toml: KEY names queue_timeout",
    );
    out.check(
        msg.contains("too long") && msg.contains("3650d"),
        "config.toml: the bound",
    );
    let (line, _, key, msg) = located(&out, "long.toml");
    out.check_eq(line, 6, "long.toml: the line of timeout");
    out.check(key.contains("timeout"), "long.toml: KEY names the timeout");
    out.check(
        msg.contains("3651d") && msg.contains("too long"),
        "long.toml: the value and the bound",
    );
    out.check_eq(
        out.stderr.lines().last().map(str::trim),
        Some("2 errors"),
        "last stderr line",
    );
    // The longest one allowed loads.
    dir.write("config.toml", &config("queue_timeout = \"3650d\""));
    dir.write(
        "programs/long.toml",
        &long.replace("\"3651d\"", "315360000"),
    );
    trigd(&["check", "--config", &dir.path_str("config.toml")], None).code_is(0);
}

/// `workers` past 1024 is refused at load: a huge one started idle
/// threads until the system refused more, and trigd listened without ever
/// answering.
#[test]
fn check_refuses_more_than_1024_workers() {
    let dir = setup(
        "cli_check_workers",
        "workers = 9223372036854775807",
        &[("ok.toml", OK)],
    );
    let out = trigd(&["check", "--config", &dir.path_str("config.toml")], None);
    out.code_is(1);
    let (line, _, key, msg) = located(&out, "config.toml");
    out.check_eq(line, 2, "config.toml: the line of workers");
    out.check(key.contains("workers"), "KEY names workers");
    out.check(msg.contains("1 to 1024"), "the message gives the bounds");
    dir.write("config.toml", &config("workers = 1024"));
    trigd(&["check", "--config", &dir.path_str("config.toml")], None).code_is(0);
}

#[test]
fn check_of_a_missing_config_exits_1_naming_it() {
    let dir = TestDir::new("cli_check_missing");
    let path = dir.path_str("nope/config.toml");
    let out = trigd(&["check", "--config", &path], None);
    out.code_is(1);
    out.check(
        out.stderr.contains("nope/config.toml"),
        "stderr names the missing file",
    );
}

#[test]
fn serve_with_an_invalid_config_exits_1() {
    let dir = setup("cli_serve_invalid", "", &[("a.toml", BAD_A)]);
    let out = trigd(
        &[
            "serve",
            "--config",
            &dir.path_str("config.toml"),
            "--listen",
            "127.0.0.1:0",
        ],
        None,
    );
    out.code_is(1);
    out.check(out.stderr.contains("a.toml"), "stderr names the bad file");
    out.check(!out.stdout.contains("listening on"), "it must not listen");
}

#[test]
fn keygen_output_pasted_into_config_works() {
    let out = trigd(&["keygen", "--name", "x"], None);
    out.code_is(0);
    let key = out.printed_key();
    out.check(
        key.len() >= 20 && !key.contains(char::is_whitespace),
        "a long key without spaces",
    );
    out.check(
        out.stdout.starts_with("# API key \"x\""),
        "first line: # API key \"x\" …",
    );
    out.check(out.stdout.contains("[[api_keys]]"), "an [[api_keys]] table");
    out.check(out.stdout.contains("name = \"x\""), "name = \"x\"");
    out.check(
        out.stdout
            .contains(&format!("sha256 = \"{}\"", sha256_hex(&key))),
        "sha256 = \"<sha256 of the key>\"",
    );
    let other = trigd(&["keygen", "--name", "y"], None);
    other.code_is(0);
    other.check(
        !other.stdout.contains(&key),
        "two keygen runs print the same key",
    );

    let scoped = trigd(&["keygen", "--name", "z", "--workspace", "ops"], None);
    scoped.code_is(0);
    scoped.check(
        scoped.stdout.contains("workspace = \"ops\""),
        "workspace line",
    );
    let scoped_key = scoped.printed_key();

    let dir = setup("cli_keygen", "", &[("ok.toml", OK), ("ops.toml", IN_OPS)]);
    let text = format!("{}\n{}\n{}", config(""), out.stdout, scoped.stdout);
    dir.write("config.toml", &text);
    let t = Trigd::start(&dir);
    let r = t.post(&format!("/api?api_key={}&program_id=1", enc(&key)));
    r.check_eq(
        &r.ok()["Result"],
        &json!(["ok"]),
        "Result with the generated key",
    );
    t.post(&format!("/api?api_key={}&program_id=2", enc(&scoped_key)))
        .ok();
    t.post(&format!("/api?api_key={}&program_id=1", enc(&scoped_key)))
        .err(404, "program_not_found");
}

#[test]
fn hash_password_prints_argon2id() {
    let out = trigd(&["hash-password"], Some("correct horse battery staple\n"));
    out.code_is(0);
    let hash = out.stdout.trim().to_string();
    out.check(
        hash.starts_with("$argon2id$"),
        "stdout starts with $argon2id$",
    );
    out.check(
        !hash.contains("correct horse"),
        "the password itself is not printed",
    );
    // The hash is accepted in [[users]].
    let dir = setup("cli_hash_password", "", &[("ok.toml", OK)]);
    let text = format!(
        "{}\n[[users]]\nname = \"alice\"\npassword = '{hash}'\n",
        config("")
    );
    dir.write("config.toml", &text);
    trigd(&["check", "--config", &dir.path_str("config.toml")], None).code_is(0);
}

#[test]
fn run_executes_a_program_locally() {
    let fail = r#"
id = 4
name = "fail"

[[functions]]
name = "fail"
steps = [{ shell = "echo nope >&2; exit 5" }]
[functions.webhook]
"#;
    let dir = setup("cli_run", "", &[("echo.toml", ECHO), ("fail.toml", fail)]);
    let cfg = dir.path_str("config.toml");
    for prog in ["2", "echo"] {
        let out = trigd(&["run", prog, "--config", &cfg, "x y", "z"], None);
        out.code_is(0);
        let v = out.json();
        out.check_eq(&v["Success"], &json!("Program finished."), "Success");
        out.check_eq(&v["Result"], &json!(["x y|z"]), "Result");
        out.check(v.get("Run").is_none(), "no Run id: the run is not recorded");
    }
    let out = trigd(
        &[
            "run",
            "echo",
            "--config",
            &cfg,
            "--function",
            "echo",
            "p",
            "q",
        ],
        None,
    );
    out.code_is(0);
    out.check_eq(
        &out.json()["Result"],
        &json!(["p|q"]),
        "Result with --function",
    );

    let out = trigd(&["run", "99", "--config", &cfg], None);
    out.code_is(1);
    out.check_eq(&out.json()["Code"], &json!("program_not_found"), "Code");
    let out = trigd(&["run", "echo", "--config", &cfg, "only-one"], None);
    out.code_is(1);
    out.check_eq(&out.json()["Code"], &json!("variables_mismatch"), "Code");
    let out = trigd(&["run", "fail", "--config", &cfg], None);
    out.code_is(1);
    let v = out.json();
    out.check_eq(&v["Code"], &json!("run_failed"), "Code");
    out.check_eq(&v["ExitCode"], &json!(5), "ExitCode");
}

#[test]
fn version_and_help_exit_0() {
    let out = trigd(&["--version"], None);
    out.code_is(0);
    // The commit is HEAD's, as git says it (build.rs asks git the same).
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("git runs");
    let head = String::from_utf8_lossy(&head.stdout).trim().to_string();
    let line = out.stdout.trim_end();
    let want = format!("trigd {} (commit {head}", env!("CARGO_PKG_VERSION"));
    out.check(
        head.len() == 12 && line.starts_with(&want),
        format!("`{line}` starts with `{want}`"),
    );
    out.check(
        line.ends_with(", dirty)") || line.ends_with(&format!("{head})")),
        "ends with the dirty flag or the commit",
    );
    for flag in ["--help", "-h"] {
        let out = trigd(&[flag], None);
        out.code_is(0);
        for word in ["serve", "check", "keygen", "hash-password", "run"] {
            out.check(out.stdout.contains(word), format!("help mentions `{word}`"));
        }
    }
}

#[test]
fn usage_errors_exit_2_with_usage_on_stderr() {
    for args in [
        &["frobnicate"][..],
        &["--bogus"],
        &["check", "--bogus"],
        &["keygen", "--name"],
        &["serve", "--listen"],
    ] {
        let out = trigd(args, None);
        out.code_is(2);
        out.check(
            out.stderr.starts_with("trigd: "),
            "stderr starts with `trigd: `",
        );
        out.check(
            out.stderr.to_lowercase().contains("usage"),
            "stderr shows the short usage",
        );
        out.check(out.stdout.is_empty(), "nothing on stdout");
    }
}

#[test]
fn generate_prints_man_pages_and_completions() {
    for (kind, start) in [
        ("man", ".TH TRIGD 1 "),
        ("man-config", ".TH TRIGD.TOML 5 "),
        ("complete-bash", "# bash completion for trigd"),
        ("complete-zsh", "#compdef trigd"),
        ("complete-fish", "# fish completion for trigd"),
    ] {
        let out = trigd(&["generate", kind], None);
        out.code_is(0);
        out.check(
            out.stdout.starts_with(start),
            format!("{kind} starts with {start}"),
        );
    }
    for args in [
        &["generate"][..],
        &["generate", "html"],
        &["generate", "man", "x"],
    ] {
        let out = trigd(args, None);
        out.code_is(2);
        out.check(out.stderr.contains("complete-fish"), "names the kinds");
    }
}

/// `count` declares its outputs the old way: an inactive webhook table.
const OLD_OUTPUTS: &str = r#"id = 20
name = "old"

[[functions]]
name = "count"
command = ["printf", "%s", "{text}"]
webhook = { active = false, outputs = ["text"] }
"#;

/// The same function, the new way.
const NEW_OUTPUTS: &str = r#"id = 21
name = "new"

[[functions]]
name = "count"
outputs = ["text"]
command = ["printf", "%s", "{text}"]
"#;

/// Outputs on the function and in the Webhook Trigger (line 8), not the same.
const BOTH_OUTPUTS: &str = r#"id = 22
name = "both"

[[functions]]
name = "count"
outputs = ["text"]
command = ["printf", "%s", "{text}"]
webhook = { outputs = ["text", "more"] }
"#;

#[test]
fn check_names_function_outputs_for_an_inactive_webhook_table() {
    let dir = setup("cli_check_outputs", "", &[("old.toml", OLD_OUTPUTS)]);
    let out = trigd(&["check", "--config", &dir.path_str("config.toml")], None);
    out.code_is(0);
    out.check_eq(
        out.stdout.trim_end(),
        "ok: 1 program, 0 tools, 1 warning",
        "the old form loads, with a warning",
    );
    out.check(
        out.stderr.contains("old.toml: function `count`:")
            && out
                .stderr
                .contains(r#"write `outputs = ["text"]` on the function"#),
        "the warning names the file, the function and the new form",
    );
    // The run binds to the same outputs as before.
    let cfg = dir.path_str("config.toml");
    let run = trigd(
        &["run", "20", "--config", &cfg, "--function", "count", "hi"],
        None,
    );
    run.code_is(0);
    run.check_eq(&run.json()["Result"], &json!(["hi"]), "Result");
    let dir = setup("cli_check_outputs_new", "", &[("new.toml", NEW_OUTPUTS)]);
    let out = trigd(&["check", "--config", &dir.path_str("config.toml")], None);
    out.code_is(0);
    out.check_eq(
        out.stdout.trim_end(),
        "ok: 1 program, 0 tools",
        "no warning",
    );
}

#[test]
fn outputs_given_twice_and_different_are_a_located_error() {
    let dir = setup("cli_check_outputs_both", "", &[("both.toml", BOTH_OUTPUTS)]);
    let out = trigd(&["check", "--config", &dir.path_str("config.toml")], None);
    out.code_is(1);
    let (line, _, key, msg) = located(&out, "both.toml");
    out.check_eq(line, 8, "the error points at the webhook's outputs");
    out.check_eq(key.as_str(), "functions[0].webhook.outputs", "key");
    out.check(
        msg.contains("`outputs = [...]` on the function"),
        "the message names the function-level form",
    );
}

/// A refused config is exit 1 even when stderr cannot be written
/// (`2>/dev/full`): the message is lost, the code is not (it was a
/// panic's 101).
#[test]
fn check_exits_1_when_stderr_is_full() {
    let dir = TestDir::new("cli_dev_full");
    dir.write("config.toml", "[server]\nbogus = 1\n");
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    let status = std::process::Command::new(BIN)
        .args(["check", "--config", &dir.path_str("config.toml")])
        .stdout(std::process::Stdio::null())
        .stderr(full)
        .status()
        .expect("run trigd check");
    assert_eq!(status.code(), Some(1), "{status:?}");
}
