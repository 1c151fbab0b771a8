//! What a newcomer trips over first, each through the real binary: relative
//! command paths under a relative `--config`, Results that keep what the
//! program printed, the stdout of a failed run, `check` warnings, the key
//! that `keygen` prints, follow-on config errors, a body on `POST /api`, the
//! per-command help and the `trigd run` wording.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use serde_json::{json, Value};

use crate::util::*;

/// `trigd ARGS…` run in `cwd`, bounded to 30 s: (exit code, stdout, stderr).
fn trigd_in(cwd: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let child = Command::new(BIN)
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot spawn trigd: {e}"));
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = rx
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("trigd {args:?} did not exit within 30s"))
        .expect("wait for trigd");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A server started in `cwd` with `args`; killed on drop.
struct Server {
    child: Child,
    client: Client,
}

impl Server {
    fn start(cwd: &Path, config: &str, log: &Path) -> Server {
        let stderr = std::fs::File::create(log).expect("stderr log");
        let mut child = Command::new(BIN)
            .args(["serve", "--config", config, "--listen", "127.0.0.1:0"])
            .current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn trigd serve");
        let out = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let mut r = BufReader::new(out);
            let mut line = String::new();
            let _ = r.read_line(&mut line);
            let _ = tx.send(line);
            let _ = std::io::copy(&mut r, &mut std::io::sink());
        });
        let line = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_default();
        let addr = line
            .trim_end()
            .strip_prefix("listening on http://")
            .unwrap_or_else(|| panic!("first stdout line {line:?}"))
            .to_string();
        Server {
            child,
            client: Client::for_addr(&addr, log),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const PAIR: &str = r#"
id = 1
name = "pair"

[[functions]]
name = "pair"
command = ["./scripts/pair.sh", "{first}", "{second}"]
[functions.webhook]
outputs = ["first", "second"]

[[functions]]
name = "missing"
command = ["./scripts/nope.sh"]
[functions.webhook]
active = false
"#;

#[test]
fn relative_command_path_works_under_a_relative_config() {
    let dir = setup("newcomer_relative", "", &[("pair.toml", PAIR)]);
    dir.mkdir("programs/scripts");
    dir.write(
        "programs/scripts/pair.sh",
        "#!/bin/sh\nprintf '%s+%s in %s' \"$1\" \"$2\" \"$(basename \"$PWD\")\"\n",
    );
    let script = dir.path("programs/scripts/pair.sh");
    let mut perm = std::fs::metadata(&script).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&script, perm).unwrap();
    // From the parent directory, with a relative --config.
    let parent = dir.root.parent().expect("parent dir");
    let name = dir.root.file_name().unwrap().to_str().unwrap();
    let config = format!("{name}/config.toml");

    let (code, stdout, stderr) = trigd_in(parent, &["run", "pair", "a", "b", "--config", &config]);
    let v: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("run stdout is not JSON ({e}): {stdout}\n{stderr}"));
    assert_eq!(code, Some(0), "trigd run: {stdout}\n{stderr}");
    assert_eq!(v["Result"], json!(["a+b in programs"]), "{stdout}");

    let server = Server::start(parent, &config, &dir.path("stderr.log"));
    let r = server.client.post(&format!(
        "/api?api_key={KEY}&program_id=1&function=pair&variables=c&variables=d"
    ));
    r.check_eq(&r.ok()["Result"], &json!(["c+d in programs"]), "Result");
    drop(server);

    // check agrees: it loads, and warns about the command that is not there.
    let (code, stdout, stderr) = trigd_in(parent, &["check", "--config", &config]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.starts_with("ok: 1 program, 0 tools, 1 warning"),
        "{stdout}"
    );
    assert!(
        stderr.contains("warning:")
            && stderr.contains("function `missing`")
            && stderr.contains("./scripts/nope.sh"),
        "check warns about the missing command: {stderr}"
    );
    assert!(!stderr.contains("pair.sh"), "pair.sh exists: {stderr}");
}

const OUTPUTS: &str = r#"
id = 1
name = "outputs"

[[functions]]
name = "auto"
steps = [
  { command = ["echo", "1.10"] },
  { command = ["echo", "12345678901234567890123"] },
  { shell = "date +%Y" },
  { command = ["echo", "true"] },
  { command = ["echo", "null"] },
  { command = ["echo", '"quoted"'] },
  { command = ["echo", '{"id": 12345678901234567890123, "v": 1.10}'] },
  { command = ["echo", '[1.10, 2]'] },
]
[functions.webhook]

[[functions]]
name = "json"
output = "json"
steps = [
  { command = ["echo", "1.10"] },
  { command = ["echo", "12345678901234567890123"] },
  { command = ["echo", "true"] },
  { command = ["echo", "null"] },
]
[functions.webhook]

[[functions]]
name = "text"
output = "text"
command = ["echo", '{"a": 1}']
[functions.webhook]

[[functions]]
name = "deep"
steps = [{ shell = "printf '%s' \"$deep\"" }]
[functions.webhook]
outputs = ["deep"]

[[functions]]
name = "lines"
output = "lines"
steps = [{ command = ["printf", 'x\ny\n'] }, { command = ["true"] }]
[functions.webhook]

[[functions]]
name = "notjson"
output = "json"
command = ["echo", "1.10.3"]
[functions.webhook]
"#;

#[test]
fn results_keep_what_the_program_printed() {
    let (_dir, t) = serve("newcomer_outputs", "", &[("outputs.toml", OUTPUTS)]);
    let run = |f: &str| t.post(&format!("/api?api_key={KEY}&program_id=1&function={f}"));
    let r = run("auto");
    let year = r.ok()["Result"][2].clone();
    r.check(
        year.as_str().is_some_and(|y| y.len() == 4),
        "date +%Y stays text",
    );
    // The raw body: numbers inside JSON keep their digits.
    let body = r.text();
    r.check(
        body.starts_with(&format!(
            r#"{{"Result":["1.10","12345678901234567890123",{year},"true","null","\"quoted\"",{{"id":12345678901234567890123,"v":1.10}},[1.10,2]],"#
        )),
        "auto: scalars are text, objects and arrays JSON with exact numbers",
    );
    let r = run("json");
    r.ok();
    r.check(
        r.text()
            .starts_with(r#"{"Result":[1.10,12345678901234567890123,true,null],"#),
        "json: scalars parsed, numbers exact",
    );
    let r = run("text");
    r.check_eq(&r.ok()["Result"], &json!(["{\"a\": 1}"]), "text");
    let r = run("lines");
    r.check_eq(&r.ok()["Result"], &json!([["x", "y"], []]), "lines");
    // JSON nested deeper than a run record can hold stays text, and the
    // run's record can still be read back.
    let deep = format!("{}{}", "[".repeat(120), "]".repeat(120));
    let encoded = deep.replace('[', "%5B").replace(']', "%5D");
    let r = t.post(&format!(
        "/api?api_key={KEY}&program_id=1&function=deep&variables={encoded}"
    ));
    let v = r.ok();
    r.check_eq(&v["Result"], &json!([deep]), "deep JSON stays text");
    let id = v["Run"].as_str().unwrap_or_default().to_string();
    let rec = t.get(&format!("/api/runs/{id}?api_key={KEY}"));
    rec.check_eq(&rec.ok()["State"], &json!("finished"), "record readable");
    let v = run("notjson").err(500, "run_failed");
    assert!(
        v["Stderr"].as_str().unwrap_or("").contains("not JSON"),
        "{v}"
    );

    // A bad output mode is a load error naming the key.
    let dir = setup(
        "newcomer_output_bad",
        "",
        &[(
            "p.toml",
            "id = 1\nname = \"p\"\n[[functions]]\nname = \"f\"\noutput = \"yaml\"\ncommand = [\"true\"]\n",
        )],
    );
    let out = trigd(&["check", "--config", &dir.path_str("config.toml")], None);
    out.code_is(1);
    out.check(
        out.stderr.contains("functions[0].output") || out.stderr.contains("output"),
        "names the key",
    );
    out.check(out.stderr.contains("yaml"), "names the value");
}

#[test]
fn a_failed_run_keeps_its_stdout() {
    let prog = r#"
id = 1
name = "half"

[[functions]]
name = "half"
steps = [{ shell = "echo step one done; echo oops >&2; exit 3" }]
[functions.webhook]
"#;
    let (_dir, t) = serve("newcomer_failed_stdout", "", &[("half.toml", prog)]);
    let r = t.post(&format!("/api?api_key={KEY}&program_id=1"));
    let v = r.err(500, "run_failed");
    r.check_eq(&v["Stdout"], &json!("step one done\n"), "Stdout in the 500");
    r.check_eq(&v["Stderr"], &json!("oops\n"), "Stderr in the 500");
    let run = v["Run"].as_str().expect("Run").to_string();
    let r = t.get(&format!("/api/runs/{run}?api_key={KEY}"));
    let rec = r.ok();
    r.check_eq(&rec["State"], &json!("failed"), "State");
    r.check_eq(
        &rec["Stdout"],
        &json!("step one done\n"),
        "Stdout in the record",
    );
}

#[test]
fn a_body_on_post_api_is_refused_with_a_reason() {
    let prog = r#"
id = 1
name = "hello"
[[functions]]
name = "greet"
command = ["echo", "Hello, {name}!"]
[functions.webhook]
outputs = ["name"]
"#;
    let (_dir, t) = serve("newcomer_body", "", &[("hello.toml", prog)]);
    for (ctype, body) in [
        ("application/json", &br#"{"name": "Ada"}"#[..]),
        ("application/x-www-form-urlencoded", b"variables=Ada"),
    ] {
        let r = t.request(
            "POST",
            &format!("/api?api_key={KEY}&program_id=1"),
            &[("Content-Type", ctype)],
            body,
        );
        let v = r.err(400, "invalid_parameter");
        r.check_eq(&v["Parameter"], &json!("body"), "Parameter");
        r.check(
            v["Error"]
                .as_str()
                .is_some_and(|e| e.contains("query parameters")),
            "says values go in the query string",
        );
    }
    // Authentication still comes first.
    t.request("POST", "/api?program_id=1", &[], b"{}")
        .err(401, "missing_api_key");
}

#[test]
fn check_warns_about_braces_in_a_shell_step() {
    let prog = r#"
id = 1
name = "sh"
[[functions]]
name = "f"
steps = [{ shell = 'echo "{name}"' }, { shell = 'echo "${name}" "$name"' }]
[functions.webhook]
outputs = ["name"]
"#;
    let dir = setup("newcomer_shell_braces", "", &[("sh.toml", prog)]);
    let out = trigd(&["check", "--config", &dir.path_str("config.toml")], None);
    out.code_is(0);
    out.check(
        out.stderr.contains("step 0") && out.stderr.contains("\"$name\""),
        "a warning for step 0 pointing to $name",
    );
    out.check(!out.stderr.contains("step 1"), "${name} is fine");
    out.check(
        out.stdout.trim_end() == "ok: 1 program, 0 tools, 1 warning",
        "summary",
    );
}

#[test]
fn keygen_prints_the_key_apart_from_the_block() {
    let out = trigd(&["keygen", "--name", "x"], None);
    out.code_is(0);
    let key = out.printed_key();
    out.check(!out.stdout.contains(&key), "the pasted block holds no key");
    out.check(!out.stdout.contains("tk_"), "nothing key-like on stdout");
    out.check(
        out.stdout
            .contains(&format!("sha256 = \"{}\"", sha256_hex(&key))),
        "the block holds the key's sha256",
    );
}

#[test]
fn a_syntax_error_in_config_reports_no_follow_on_errors() {
    let prog = r#"
id = 1
name = "inv"
workspace = "ops"
[[functions]]
name = "f"
command = ["true"]
"#;
    let dir = setup("newcomer_follow_on", "", &[("inv.toml", prog)]);
    dir.write(
        "config.toml",
        &config("").replace("[server]\n", "[server]\nmax_concurrent_runs = 1x\n"),
    );
    let out = trigd(&["check", "--config", &dir.path_str("config.toml")], None);
    out.code_is(1);
    out.check(
        !out.stderr.contains("is not a [[workspaces]] entry"),
        "no false workspace error",
    );
    out.check(out.stderr.trim_end().ends_with("\n1 error"), "one error");
}

#[test]
fn each_command_has_its_own_help_and_errors_name_the_flag() {
    for (cmd, word) in [
        ("run", "--function F"),
        ("keygen", "--workspace W"),
        ("check", "Warnings"),
        ("serve", "--listen ADDR"),
        ("app-key", "--member M"),
        ("hash-password", "stdin"),
    ] {
        let out = trigd(&[cmd, "--help"], None);
        out.code_is(0);
        out.check(
            out.stdout.starts_with(&format!("trigd {cmd} — ")),
            "its own help",
        );
        out.check(out.stdout.contains(word), format!("explains {word}"));
    }
    let out = trigd(&["keygen", "--bogus"], None);
    out.code_is(2);
    out.check(out.stderr.contains("'--bogus'"), "names the flag");
    out.check(
        out.stderr.contains("trigd keygen --help"),
        "points to the help",
    );
    let out = trigd(&["--version"], None);
    out.code_is(0);
    // Outside the config's directory: the error suggests --config.
    let out = trigd(&["check"], None);
    out.code_is(1);
    out.check(out.stderr.contains("--config"), "suggests --config");
}

#[test]
fn trigd_run_speaks_cli() {
    let prog = r#"
id = 4
name = "deploy"
[[functions]]
name = "plan"
command = ["echo", "{version}"]
[functions.webhook]
outputs = ["version"]
[[functions]]
name = "apply"
command = ["echo", "{version}"]
[functions.webhook]
outputs = ["version"]
"#;
    let dir = setup("newcomer_run_cli", "", &[("deploy.toml", prog)]);
    let cfg = dir.path_str("config.toml");
    let out = trigd(&["run", "deploy", "--config", &cfg, "1.2"], None);
    out.code_is(1);
    let e = out.json()["Error"].as_str().unwrap_or("").to_string();
    out.check(
        e.contains("--function") && !e.contains("function="),
        "names --function",
    );
    let out = trigd(
        &["run", "deploy", "--config", &cfg, "--function", "plan"],
        None,
    );
    out.code_is(1);
    let e = out.json()["Error"].as_str().unwrap_or("").to_string();
    out.check(
        e.contains("VALUE") && !e.contains("variables="),
        "CLI values",
    );
    let out = trigd(&["run", "nope", "--config", &cfg], None);
    out.code_is(1);
    let e = out.json()["Error"].as_str().unwrap_or("").to_string();
    out.check(!e.contains("API key"), "no API key wording");
    let out = trigd(
        &[
            "run",
            "deploy",
            "--config",
            &cfg,
            "--function",
            "plan",
            "1.10",
        ],
        None,
    );
    out.code_is(0);
    out.check_eq(&out.json()["Result"], &json!(["1.10"]), "Result");
    out.check(
        out.json().get("Run").is_none(),
        "no Run id: nothing recorded",
    );
}

#[test]
fn counts_are_spelled_right() {
    let prog = "id = 1\nname = \"p\"\n[[functions]]\nname = \"f\"\ncommand = [\"true\"]\n";
    let (dir, t) = serve("newcomer_counts", "", &[("p.toml", prog)]);
    let out = trigd(&["check", "--config", &dir.path_str("config.toml")], None);
    out.code_is(0);
    out.check_eq(out.stdout.trim_end(), "ok: 1 program, 0 tools", "summary");
    dir.write("programs/p.toml", "id = 1\nname = \"p\"\nbogus = 1\n");
    t.wait_for(WAIT, "the refused reload is logged", || {
        t.stderr_tail().contains("reload refused (")
    });
    let log = t.stderr_tail();
    t.check(
        log.contains("reload refused (1 error);"),
        format!("one error, singular: {log}"),
    );
}

// ---------------------------------------------------------------------------
// The manual's commands, run: every ```console block of the README's tour,
// docs/tour.md and the recipes of docs/webhooks.md is executed by a real
// shell against a real trigd, and what it prints is compared with what the
// page shows, run ids and times aside.

/// One `$ command` of a console block and the output the page shows.
#[derive(Debug)]
struct Shown {
    command: String,
    output: String,
}

/// The ```console blocks of a Markdown text, each as its commands. A
/// command ends at a line without a trailing `\`; its output is every line
/// up to the next `$ ` line, trailing blank lines dropped.
fn console_blocks(text: &str) -> Vec<Vec<Shown>> {
    let mut blocks = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim_end() != "```console" {
            continue;
        }
        let mut block: Vec<Shown> = Vec::new();
        let mut continued = false;
        for line in lines.by_ref().take_while(|l| !l.starts_with("```")) {
            match (line.strip_prefix("$ "), block.last_mut()) {
                (_, Some(last)) if continued => {
                    last.command.push('\n');
                    last.command.push_str(line);
                }
                (Some(command), _) => block.push(Shown {
                    command: command.to_string(),
                    output: String::new(),
                }),
                (None, Some(last)) => {
                    last.output.push_str(line);
                    last.output.push('\n');
                }
                (None, None) => panic!("console block output before any command: {line}"),
            }
            continued = line.ends_with('\\');
        }
        for shown in &mut block {
            shown.output = shown.output.trim_end().to_string();
        }
        blocks.push(block);
    }
    blocks
}

/// A bash process kept for a block, so that `body=…` and `sig=…` carry on
/// to the next command, as in a terminal.
struct Shell {
    child: Child,
    lines: mpsc::Receiver<String>,
}

const DONE: &str = "@@trigd-doc-command-done@@";

impl Shell {
    /// bash in `cwd`, with `trigd` on the PATH and `env` set.
    fn start(cwd: &Path, env: &[(&str, &str)]) -> Shell {
        let bin_dir = Path::new(BIN).parent().expect("bin dir");
        let path = format!(
            "{}:{}",
            bin_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut child = Command::new("bash")
            .args(["--noprofile", "--norc"])
            .current_dir(cwd)
            .env("PATH", path)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn bash");
        let out = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut shell = Shell { child, lines: rx };
        shell.run("exec 2>&1");
        shell
    }

    /// What `command` prints (stdout and stderr), bounded to 30 s.
    fn run(&mut self, command: &str) -> String {
        use std::io::Write;
        let stdin = self.child.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{command}\nprintf '\\n{DONE}\\n'").expect("write to bash");
        let mut out = String::new();
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|_| panic!("`{command}` did not finish within 30 s: {out}"));
            if line == DONE {
                return out.trim_end().to_string();
            }
            out.push_str(&line);
            out.push('\n');
        }
    }
}

impl Drop for Shell {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The run ids of a text, in order (`<32 hex>`, or `<instance>-<32 hex>`).
fn run_ids(text: &str) -> Vec<String> {
    let re = regex_lite::Regex::new(r"\b(?:[a-z0-9_-]+-)?[0-9a-f]{32}\b").expect("regex");
    re.find_iter(text).map(|m| m.as_str().to_string()).collect()
}

/// `text` with what differs from run to run masked: run ids, times,
/// durations, a disk's fill level, the instance (the host's name) and
/// application keys.
fn masked(text: &str) -> String {
    let rules = [
        (r"\b(?:[a-z0-9_-]+-)?[0-9a-f]{32}\b", "<run>"),
        (r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z", "<time>"),
        (r#""DurationMs":\d+"#, r#""DurationMs":<n>"#),
        (r#""used_percent":\d+"#, r#""used_percent":<n>"#),
        (r#""Instance":"[^"]*""#, r#""Instance":<host>"#),
        (r"\btk_[0-9a-f]{64}\b", "<app key>"),
    ];
    rules.iter().fold(text.to_string(), |t, (pattern, with)| {
        let re = regex_lite::Regex::new(pattern).expect("regex");
        re.replace_all(&t, *with).into_owned()
    })
}

/// A command that only reads (a curl without a method or a body): it may be
/// repeated until what it shows has happened (an async run has finished).
fn only_reads(command: &str) -> bool {
    command.starts_with("curl ") && !command.contains("-X ") && !command.contains(" -d ")
}

/// Runs every command of `blocks` in `cwd` against the server at `addr`
/// and compares each output with the page's. `page` names the source.
fn run_blocks(page: &str, blocks: &[Vec<Shown>], cwd: &Path, addr: &str, env: &[(&str, &str)]) {
    run_blocks_keyed(page, blocks, cwd, addr, env, None);
}

/// [`run_blocks`], where a key the page abbreviates (`tk_b91f…0a01`) stands
/// for `key`, or for the last application key a command printed.
fn run_blocks_keyed(
    page: &str,
    blocks: &[Vec<Shown>],
    cwd: &Path,
    addr: &str,
    env: &[(&str, &str)],
    mut key: Option<String>,
) {
    let full_key = regex_lite::Regex::new(r"\btk_[0-9a-f]{64}\b").expect("regex");
    let short_key = regex_lite::Regex::new(r"tk_[0-9a-f]{4}…[0-9a-f]{4}").expect("regex");
    let mut ids: Vec<(String, String)> = Vec::new();
    for block in blocks {
        let mut shell = Shell::start(cwd, env);
        for shown in block {
            let mut command = shown.command.replace("127.0.0.1:8080", addr);
            for (shown_id, real) in &ids {
                command = command.replace(shown_id, real);
            }
            if let Some(key) = &key {
                command = short_key.replace_all(&command, key.as_str()).into_owned();
            }
            let want = shown.output.replace("127.0.0.1:8080", addr);
            let mut got = shell.run(&command);
            let mut polls = 0;
            while masked(&got) != masked(&want) && only_reads(&command) && polls < 300 {
                thread::sleep(Duration::from_millis(100));
                got = shell.run(&command);
                polls += 1;
            }
            assert_eq!(
                masked(&got),
                masked(&want),
                "{page}: `$ {}` printed (left) what the page does not show (right)",
                shown.command
            );
            ids.extend(run_ids(&want).into_iter().zip(run_ids(&got)));
            if let Some(k) = full_key.find(&got) {
                key = Some(k.as_str().to_string());
            }
        }
    }
}

fn read_doc(rel: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(root.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

#[test]
fn the_tours_of_the_readme_and_the_manual_run_as_written() {
    let dir = crate::util::TestDir::new("newcomer_doc_tour");
    crate::browser::shipped_setup(&dir);
    let t = Trigd::start(&dir);
    for page in ["README.md", "docs/tour.md"] {
        let blocks = console_blocks(&read_doc(page));
        let commands: usize = blocks.iter().map(Vec::len).sum();
        assert!(commands >= 5, "{page}: only {commands} console commands");
        run_blocks(page, &blocks, &dir.root, &t.addr, &[]);
    }
}

#[test]
fn the_webhook_recipes_run_as_written() {
    let page = read_doc("docs/webhooks.md");
    let recipes = page.split("## Recipes").nth(1).expect("a Recipes section");
    let recipes = recipes.split("\n## ").next().unwrap_or("");
    // The section's two TOML blocks are the config and programs/hooks.toml.
    let toml: Vec<&str> = recipes
        .split("```toml\n")
        .skip(1)
        .filter_map(|b| b.split("\n```").next())
        .collect();
    assert_eq!(
        toml.len(),
        2,
        "docs/webhooks.md Recipes: the config and the program"
    );
    let dir = crate::util::TestDir::new("newcomer_doc_recipes");
    dir.write("config.toml", toml[0]);
    dir.write("programs/hooks.toml", toml[1]);
    for sender in ["github", "gitlab", "gitea", "slack"] {
        dir.write(
            &format!("secrets/{sender}"),
            &format!("{sender}-secret-5e1f\n"),
        );
    }
    let stripe = ("STRIPE_WEBHOOK_SECRET", "whsec_doc_test_8c2d");
    let t = Trigd::start_env(&dir, &[stripe]);
    let blocks = console_blocks(recipes);
    let commands: usize = blocks.iter().map(Vec::len).sum();
    assert!(
        commands >= 15,
        "docs/webhooks.md: only {commands} console commands"
    );
    run_blocks("docs/webhooks.md", &blocks, &dir.root, &t.addr, &[stripe]);
}

/// A section (`## title` up to the next `## `) of a page.
fn section<'p>(page: &'p str, title: &str) -> &'p str {
    let start = page
        .find(&format!("\n## {title}\n"))
        .unwrap_or_else(|| panic!("no section `## {title}`"));
    let rest = &page[start + title.len() + 5..];
    rest.find("\n## ").map_or(rest, |end| &rest[..end])
}

/// The shipped config plus the tour's user, workspace and tool (alice's
/// password hash made here: the page elides it) and its program.
fn tools_tour_setup(name: &str, tour: &str) -> crate::util::TestDir {
    let toml: Vec<&str> = tour
        .split("```toml\n")
        .skip(1)
        .filter_map(|b| b.split("\n```").next())
        .collect();
    assert_eq!(
        toml.len(),
        2,
        "docs/tools.md tour: the config and the program"
    );
    let hash = crate::util::trigd(&["hash-password"], Some("alice-password\n")).stdout;
    let config = toml[0].replace(
        "password = \"$argon2id$v=19$m=19456,t=2,p=1$…\"",
        &format!("password = \"{}\"", hash.trim()),
    );
    assert!(config.contains("$argon2id$v=19$m="), "{config}");
    let dir = crate::util::TestDir::new(name);
    crate::browser::shipped_setup(&dir);
    dir.append("config.toml", &format!("\n{config}\n"));
    dir.write("programs/inventory.toml", toml[1]);
    dir
}

#[test]
fn the_tools_tour_and_the_public_switch_run_as_written() {
    let page = read_doc("docs/tools.md");
    let tour = section(&page, "Tour: a tool with two environments");
    let dir = tools_tour_setup("newcomer_doc_tools", tour);
    let t = Trigd::start(&dir);
    let blocks = console_blocks(tour);
    assert!(
        blocks.iter().map(Vec::len).sum::<usize>() >= 8,
        "{blocks:?}"
    );
    run_blocks("docs/tools.md", &blocks, &dir.root, &t.addr, &[]);
    drop(t);

    // The switch section starts again from the tour's config, with a key.
    let switch = section(&page, "The public switch from the browser or a script");
    let dir = tools_tour_setup("newcomer_doc_switch", tour);
    let t = Trigd::start(&dir);
    let config = dir.path_str("config.toml");
    let args = [
        "app-key",
        "--config",
        &config,
        "--workspace",
        "ops",
        "--member",
        "alice",
    ];
    let key = crate::util::trigd(&args, None).stdout;
    let key = key.lines().next().unwrap_or("").to_string();
    let blocks = console_blocks(switch);
    assert!(
        blocks.iter().map(Vec::len).sum::<usize>() >= 4,
        "{blocks:?}"
    );
    run_blocks_keyed("docs/tools.md", &blocks, &dir.root, &t.addr, &[], Some(key));
}

/// The comparison sees a changed output, and the parser keeps continued
/// lines with their command.
#[test]
fn a_console_block_that_lies_is_caught() {
    let blocks = console_blocks(
        "```console\n$ printf '%s\\n' \\\n    a\na\n$ echo b\nb\n\n```\n```\n$ not run\n```\n",
    );
    assert_eq!(blocks.len(), 1);
    assert_eq!(blocks[0][0].command, "printf '%s\\n' \\\n    a");
    assert_eq!(blocks[0][1].output, "b");
    let dir = crate::util::TestDir::new("newcomer_doc_lies");
    let mut shell = Shell::start(&dir.root, &[]);
    assert_eq!(shell.run(&blocks[0][0].command), "a");
    assert_eq!(shell.run("x=1; echo $x"), "1");
    let lie = vec![vec![Shown {
        command: "echo Hello".into(),
        output: "Goodbye".into(),
    }]];
    let caught =
        std::panic::catch_unwind(|| run_blocks("lie", &lie, &dir.root, "127.0.0.1:1", &[]));
    assert!(caught.is_err(), "a wrong output passes");
    assert_eq!(
        masked(r#"{"Run":"0123456789abcdef0123456789abcdef"}"#),
        r#"{"Run":"<run>"}"#
    );
}

/// Program 1 with `body`, which prints the size of the file `$path` names.
const BODY_FILE: &str = r#"
id = 1
name = "body"
workspace = "ops"

[[functions]]
name = "body"
steps = [{ shell = "printf '%s %s' \"$(wc -c < \"$path\" | tr -d ' ')\" \"$path\"" }]
[functions.webhook]
active = false
outputs = ["path"]
"#;

/// A tool trigger whose value is `body = "file"` (the path of a file
/// holding the request body).
const BODY_TOOL: &str = r#"
[[tools]]
name = "t"
workspace = "ops"
[tools.environments.prod]
public = true
[[tools.triggers]]
kind = "endpoint"
name = "body"
program = 1
function = "body"
values = { path = { body = "file" } }
"#;

/// `body = "file"` gives the program an absolute path under a relative
/// `--config` too: the step runs in `programs/`, and the `./state/bodies/…`
/// it was given could not be opened there.
#[test]
fn a_body_file_is_named_by_an_absolute_path_under_a_relative_config() {
    let dir = setup("newcomer_body_file", "", &[("body.toml", BODY_FILE)]);
    dir.append("config.toml", BODY_TOOL);
    let server = Server::start(&dir.root, "config.toml", &dir.path("stderr.log"));
    let r = server.client.request(
        "POST",
        "/tools/t/prod/body",
        &[("Content-Type", "application/json")],
        br#"{"hello": "world"}"#,
    );
    let v = r.ok();
    let out = v["Result"][0].as_str().unwrap_or_default().to_string();
    let (size, path) = out.split_once(' ').unwrap_or_default();
    r.check_eq(size, "18", "the body's size");
    r.check(path.starts_with('/'), format!("an absolute path: {path}"));
}
