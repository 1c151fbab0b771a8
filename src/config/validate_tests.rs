//! Unit tests of config validation (kept apart from the code for size).

use std::time::Duration;

use super::*;
use crate::config::{Credentials, Piece, Step};
use crate::state::test_dir::TestDir;

const CONFIG: &str = r#"
[server]
listen = "0.0.0.0:9000"
run_timeout = "1m30s"
max_output_bytes = 4096

[[api_keys]]
name = "cron"
sha256 = "ABABABABABABABABABABABABABABABABABABABABABABABABABABABABABABABAB"
workspace = "ops"
programs = [1]

[[users]]
name = "alice"
password = "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA"

[[workspaces]]
name = "ops"
members = ["alice"]

[[tools]]
name = "inventory"
workspace = "ops"
[tools.environments.production]
vars = { DB_PATH = "/var/lib/inv.db" }
[[tools.triggers]]
kind = "endpoint"
name = "list-items"
method = "get"
program = 1
function = "snapshot"
"#;

const BACKUP: &str = r#"id = 1
name = "backup"
workspace = "ops"

[[functions]]
name = "snapshot"
command = ["/bin/snap", "--out={label}/{{x}}", "{volume}"]
timeout = "5m"
env = { RETENTION = "7" }
concurrency = 2
[functions.webhook]
outputs = ["volume", "label"]

[[functions]]
name = "all"
workdir = "/tmp"
steps = [
  { shell = "echo hi" },
  { call = "snapshot", args = ["v", "{x}"] },
]
webhook = { active = false, outputs = ["x"] }
"#;

fn run(config: &str, programs: &[(&str, &str)]) -> Result<Config, Vec<ConfigError>> {
    let progs: Vec<(PathBuf, String)> = programs
        .iter()
        .map(|(n, t)| (PathBuf::from(n), t.to_string()))
        .collect();
    load_str(Path::new("config.toml"), config, &progs)
}

fn errors(config: &str, programs: &[(&str, &str)]) -> Vec<String> {
    match run(config, programs) {
        Ok(_) => panic!("expected errors"),
        Err(errs) => errs.iter().map(ToString::to_string).collect(),
    }
}

/// `want` lines must each start one of the errors, and nothing else.
fn expect(got: &[String], want: &[&str]) {
    for w in want {
        assert!(
            got.iter().any(|g| g.starts_with(w)),
            "missing {w:?} in:\n{}",
            got.join("\n")
        );
    }
    assert_eq!(got.len(), want.len(), "got:\n{}", got.join("\n"));
}

/// A program file with one function whose body is `body`.
fn one(body: &str) -> String {
    format!("id = 1\nname = \"p\"\n[[functions]]\nname = \"f\"\n{body}")
}

#[test]
fn full_example_loads() {
    let c = run(CONFIG, &[("programs/backup.toml", BACKUP)]).unwrap();
    assert_eq!(c.server.state_dir, PathBuf::from("./state"));
    assert_eq!(c.server.listen, "0.0.0.0:9000");
    assert_eq!(c.server.workers, 8);
    assert_eq!(c.server.run_timeout, Duration::from_secs(90));
    assert_eq!(c.server.max_output_bytes, 4096);
    assert_eq!(c.server.programs_dir, PathBuf::from("./programs"));
    assert_eq!(c.server.state_dir, PathBuf::from("./state"));
    let p = c.program(1).unwrap();
    assert_eq!(
        (p.name.as_str(), p.workspace.as_deref()),
        ("backup", Some("ops"))
    );
    let f = p.function("snapshot").unwrap();
    assert_eq!(f.inputs(), ["volume", "label"]);
    assert_eq!(f.timeout, Duration::from_secs(300));
    assert_eq!(f.workdir, PathBuf::from("programs"));
    assert_eq!(f.concurrency, Some(2));
    assert_eq!(f.env["RETENTION"], "7");
    let Step::Command(argv) = &f.steps[0] else {
        panic!("not a command")
    };
    assert_eq!(
        argv[1].0,
        [
            Piece::Lit("--out=".into()),
            Piece::Var(1),
            Piece::Lit("/{x}".into())
        ]
    );
    assert_eq!(argv[2].render(&["v".into(), "l".into()]), "v");
    let all = p.function("all").unwrap();
    assert_eq!(
        (all.timeout, all.workdir.as_path()),
        (Duration::from_secs(90), Path::new("/tmp"))
    );
    assert!(matches!(&all.steps[0], Step::Shell(s) if s == "echo hi"));
    let Step::Call { function, args } = &all.steps[1] else {
        panic!("not a call")
    };
    assert_eq!(
        (function.as_str(), args[1].0.as_slice()),
        ("snapshot", &[Piece::Var(0)][..])
    );
    assert!(!all.webhook_trigger.as_ref().unwrap().active);
    assert_eq!(p.triggered().count(), 1);
    let key = &c.api_keys[&[0xab; 32]];
    assert!(key.name == "cron" && key.may_access(p));
    assert_eq!(c.workspaces["ops"].members, ["alice"]);
    assert!(c.users["alice"].password_hash.starts_with("$argon2id"));
    let t = &c.tools["inventory"];
    let production = &t.environments["production"];
    let endpoint = &production.endpoints[&t.triggers[0].name];
    assert_eq!(endpoint.vars["DB_PATH"], "/var/lib/inv.db");
    assert_eq!(
        endpoint.credentials,
        Credentials::Member {
            workspace: "ops".into()
        }
    );
    assert_eq!(
        (t.triggers[0].method.as_str(), t.triggers[0].program),
        ("GET", 1)
    );
    let again = run(CONFIG, &[("programs/backup.toml", BACKUP)]).unwrap();
    assert_eq!(c.fingerprint, again.fingerprint);
    let other = run(
        &format!("{CONFIG}\n# a comment\n"),
        &[("programs/backup.toml", BACKUP)],
    )
    .unwrap();
    assert_ne!(c.fingerprint, other.fingerprint);
}

#[test]
fn steps_and_calls() {
    let text = r#"id = 1
name = "p"
[[functions]]
name = "a"
steps = [
  { call = "b", args = ["{x}"] },
  { call = "ghost" },
  { shell = "true", command = ["x"] },
  { },
  { command = [] },
  { shell = "true", args = ["1"] },
]
[[functions]]
name = "b"
steps = [{ call = "a" }, { call = "b" }]
env = { "BAD-NAME" = "1" }
concurrency = 0
[[functions]]
name = "c"
command = ["x"]
steps = [{ shell = "y" }]
[[functions]]
name = "d"
steps = []
timeout = "soon"
[[functions]]
name = "d"
[[functions]]
name = "e f"
command = []
"#;
    expect(&errors("", &[("programs/p.toml", text)]), &[
            "programs/p.toml:6:24: functions[0].steps[0].args: call of \"b\" passes 1 argument(s), but it has 0 input(s) []",
            "programs/p.toml:6:26: functions[0].steps[0].args[0]: placeholder `{x}` names no input of this function; this function has no inputs",
            "programs/p.toml:7:12: functions[0].steps[1].call: calls function \"ghost\", which this program does not define",
            "programs/p.toml:8:3: functions[0].steps[2]: a step needs exactly one of `command`, `shell` or `call`",
            "programs/p.toml:9:3: functions[0].steps[3]: a step needs exactly one",
            "programs/p.toml:10:15: functions[0].steps[4].command: command must not be empty",
            "programs/p.toml:11:28: functions[0].steps[5].args: `args` only goes with `call`",
            "programs/p.toml:15:19: functions[1].steps[0].call: call cycle a -> b -> a;",
            "programs/p.toml:15:35: functions[1].steps[1].call: call cycle b -> b;",
            "programs/p.toml:16:9: functions[1].env.BAD-NAME: environment variable name \"BAD-NAME\" must match",
            "programs/p.toml:17:15: functions[1].concurrency: must be at least 1, got 0",
            "programs/p.toml:21:9: functions[2].steps: give either `command` or `steps`, not both",
            "programs/p.toml:24:9: functions[3].steps: steps must not be empty",
            "programs/p.toml:25:11: functions[3].timeout: invalid duration \"soon\"",
            "programs/p.toml:27:8: functions[4]: a function needs `command` or `steps`",
            "programs/p.toml:27:8: functions[4].name: duplicate function name \"d\" (first at functions[3].name)",
            "programs/p.toml:29:8: functions[5].name: function name \"e f\" must match [A-Za-z0-9_-]+",
            "programs/p.toml:30:11: functions[5].command: command must not be empty",
        ]);
}

#[test]
fn duplicate_webhook() {
    let table = one("command = [\"x\"]\n[functions.webhook]\n[functions.webhook]\n");
    let array = one("command = [\"x\"]\n[[functions.webhook]]\n[[functions.webhook]]\n");
    let single = one("command = [\"{a}\"]\n[[functions.webhook]]\noutputs = [\"a\"]\n");
    let want =
        "programs/a.toml:7:1: functions[0].webhook: a function has at most one webhook trigger";
    assert_eq!(errors("", &[("programs/a.toml", &table)]), [want]);
    assert_eq!(errors("", &[("programs/a.toml", &array)]), [want]);
    let c = run("", &[("programs/a.toml", &single)]).unwrap();
    assert_eq!(c.program(1).unwrap().functions[0].inputs(), ["a"]);
}

#[test]
fn unknown_fields_and_errors_across_files() {
    let typo = one("command = [\"x\"]\ntimout = \"5s\"\n");
    let bad_syntax = "id = 2\nname = \"q\n";
    let steps = one("steps = [{ comand = [\"x\"] }]\n");
    let config = "[server]\nworkers = 0\nlisten = 1\n";
    expect(
        &errors(
            config,
            &[
                ("programs/c.toml", &steps),
                ("programs/a.toml", &typo),
                ("programs/b.toml", bad_syntax),
            ],
        ),
        &[
            "config.toml:3:10: server.listen: invalid type: integer `1`, expected a string",
            "programs/a.toml:6:1: functions[0].timout: unknown field `timout`, expected one of",
            "programs/b.toml:2:10: invalid basic string",
            "programs/c.toml:5:12: functions[0].steps[0].comand: unknown field `comand`",
        ],
    );
    let got = errors("[server]\nworkers = 0\n", &[("programs/a.toml", &typo)]);
    assert_eq!(
        got[0],
        "config.toml:2:11: server.workers: must be at least 1, got 0"
    );
}

#[test]
fn config_references_and_names() {
    let config = r#"[server]
run_timeout = 0
public_url = "ftp://x"
[[api_keys]]
name = "k"
sha256 = "abc"
workspace = "nope"
programs = [1, 7]
[[api_keys]]
name = "k"
sha256 = "ABABABABABABABABABABABABABABABABABABABABABABABABABABABABABABABAB"
[[api_keys]]
name = "k2"
sha256 = "abababababababababababababababababababababababababababababababab"
[[users]]
name = "bob"
password = "hunter2"
[[users]]
name = "bob"
password = "$argon2id$x"
[[workspaces]]
name = "a b"
members = ["bob", "carol"]
[[workspaces]]
name = "a b"
[[tools]]
name = "t"
workspace = "ghost"
[tools.environments."pro d"]
vars = { "1X" = "" }
[[tools.triggers]]
kind = "cron"
name = "go"
method = "HEAD"
program = 9
function = "f"
[[tools.triggers]]
kind = "endpoint"
name = "go"
program = 1
function = "nope"
[[tools]]
name = "t"
workspace = "a b"
"#;
    let prog = "id = 1\nname = \"p\"\nworkspace = \"ghost\"\n[[functions]]\nname = \"f\"\ncommand = [\"x\"]\n";
    expect(&errors(config, &[("programs/a.toml", prog)]), &[
            "config.toml:2:15: server.run_timeout: duration 0 must be a positive number of seconds",
            "config.toml:3:14: server.public_url: public_url must start with http:// or https://",
            "config.toml:6:10: api_keys[0].sha256: sha256 must be 64 hex digits, got 3 characters",
            "config.toml:7:13: api_keys[0].workspace: workspace \"nope\" is not a [[workspaces]] entry",
            "config.toml:10:8: api_keys[1].name: duplicate api key name \"k\" (first at api_keys[0].name)",
            "config.toml:14:10: api_keys[2].sha256: duplicate api key sha256",
            "config.toml:17:12: users[0].password: password must be an argon2 hash",
            "config.toml:19:8: users[1].name: duplicate user \"bob\"",
            "config.toml:22:8: workspaces[0].name: workspace name \"a b\" must match [A-Za-z0-9_-]+",
            "config.toml:23:19: workspaces[0].members[1]: member \"carol\" is not a [[users]] entry",
            "config.toml:25:8: workspaces[1].name: workspace name \"a b\" must match",
            "config.toml:25:8: workspaces[1].name: duplicate workspace \"a b\"",
            "config.toml:28:13: tools[0].workspace: workspace \"ghost\" is not a [[workspaces]] entry",
            "config.toml:29:21: tools[0].environments.pro d: environment name \"pro d\" must match",
            "config.toml:30:10: tools[0].environments.pro d.vars.1X: environment variable name \"1X\" must match",
            "config.toml:32:8: tools[0].triggers[0].kind: unknown trigger kind \"cron\"; the only kind is \"endpoint\"",
            "config.toml:34:10: tools[0].triggers[0].method: unknown method \"HEAD\"; use one of GET, POST, PUT, PATCH, DELETE",
            "config.toml:35:11: tools[0].triggers[0].program: program 9 does not exist",
            "config.toml:39:8: tools[0].triggers[1].name: duplicate trigger name \"go\"",
            "config.toml:41:12: tools[0].triggers[1].function: program 1 (p) has no function \"nope\"",
            "config.toml:43:8: tools[1].name: duplicate tool \"t\"",
            "programs/a.toml:3:13: workspace: workspace \"ghost\" is not a [[workspaces]] entry",
        ]);
}

#[test]
fn duplicate_programs_and_broken_files() {
    let a = one("command = [\"x\"]\n");
    let b = one("command = [\"x\"]\nbogus = 1\n").replace("\"p\"", "\"q\"");
    let c = "id = -1\nname = \"p\"\n[[functions]]\nname = \"f\"\ncommand = [\"x\"]\n";
    let config = "[[api_keys]]\nname = \"k\"\nsha256 = \"abababababababababababababababababababababababababababababababab\"\nprograms = [1, 2]\n";
    expect(&errors(config, &[("programs/b.toml", &b), ("programs/c.toml", c), ("programs/a.toml", &a), ("programs/d.toml", &a)]), &[
            "programs/b.toml:6:1: functions[0].bogus: unknown field `bogus`",
            "programs/c.toml:1:6: id: program id must be a non-negative integer",
            "programs/c.toml:2:8: name: program name \"p\" is used by both programs/a.toml and programs/c.toml",
            "programs/d.toml:1:6: id: program id 1 is used by both programs/a.toml and programs/d.toml",
            "programs/d.toml:2:8: name: program name \"p\" is used by both programs/a.toml and programs/d.toml",
        ]);
    // A file that is not even TOML may hide any id: no dangling-id errors.
    let got = errors(
        config,
        &[("programs/a.toml", &a), ("programs/z.toml", "id = ")],
    );
    assert_eq!(
        got,
        ["programs/z.toml:1:6: invalid TOML syntax (a missing value or quote?)"]
    );
}

#[test]
fn load_reads_the_programs_dir() {
    let dir = TestDir::new("config");
    std::fs::create_dir_all(dir.join("programs/sub")).unwrap();
    let config = dir.join("config.toml");
    std::fs::write(&config, "[server]\nprograms_dir = \"progs\"\n").unwrap();
    let got = load(&config).unwrap_err();
    assert_eq!(
        (got.len(), got[0].line, got[0].key.as_str()),
        (1, 2, "server.programs_dir")
    );
    assert!(
        got[0].msg.starts_with("cannot read programs directory"),
        "{}",
        got[0]
    );
    std::fs::write(&config, "").unwrap();
    std::fs::write(dir.join("programs/b.toml"), one("command = [\"x\"]\n")).unwrap();
    std::fs::write(dir.join("programs/.a.toml"), "junk").unwrap();
    std::fs::write(dir.join("programs/a.txt"), "junk").unwrap();
    std::fs::write(dir.join("programs/sub/c.toml"), "junk").unwrap();
    let c = load(&config).unwrap();
    assert_eq!(c.programs.len(), 1);
    assert_eq!(
        c.program(1).unwrap().functions[0].workdir,
        dir.join("programs")
    );
    assert_eq!(c.server.state_dir, dir.join("state"));
}

#[test]
fn receive_settings_compile_with_secrets_from_env() {
    // HOME is set in every test environment; its value stands in for a secret.
    let home = std::env::var("HOME").unwrap_or_default();
    assert!(!home.is_empty(), "HOME must be set for this test");
    let text = format!(
        "{CONFIG}{}",
        r#"verify = { scheme = "slack", secret_env = "HOME" }
values = { volume = { json = "a.0" }, label = { header = "X-Label", default = "none" } }
rule = { not = { query = "dry", equals = "1" } }
stdin = "body"
response = { status = 202, headers = { X-A = "b" }, output = false, run_async = true, ignored_status = 204 }
"#
    );
    let cfg = load_str(
        Path::new("config.toml"),
        &text,
        &[(PathBuf::from("programs/backup.toml"), BACKUP.into())],
    )
    .unwrap();
    let r = &cfg.tools["inventory"].triggers[0].receive;
    let v = r.verify.as_ref().unwrap();
    assert_eq!(v.header, "x-slack-signature");
    assert_eq!(v.prefix, "v0=");
    assert_eq!(
        v.secret,
        crate::receive::signature::Secret::new(home.into_bytes())
    );
    let values = r.values.as_ref().unwrap();
    assert_eq!(values.len(), 2);
    assert_eq!(
        values[1].source,
        crate::receive::values::Source::Header("x-label".into())
    );
    assert_eq!(values[1].default.as_deref(), Some("none"));
    assert!(r.rule.is_some() && r.stdin_body);
    assert_eq!((r.answer.status, r.answer.ignored_status), (202, 204));
    assert!(!r.answer.output && r.answer.run_async);
    assert_eq!(r.answer.headers, [("X-A".to_string(), "b".to_string())]);
}

#[test]
fn receive_secrets_must_come_from_env_or_file_and_never_show() {
    let text = format!(
        "{CONFIG}{}",
        r#"verify = { scheme = "hmac-sha256", header = "X-Sig", secret_env = "TRIGD_SURELY_UNSET_VAR_91f2" }
rule = { signature = { scheme = "token", header = "X-T", secret_env = "HOME", secret_file = "x" } }
"#
    );
    let errs = load_str(
        Path::new("config.toml"),
        &text,
        &[(PathBuf::from("programs/backup.toml"), BACKUP.into())],
    )
    .unwrap_err();
    let all: Vec<String> = errs.iter().map(ToString::to_string).collect();
    let joined = all.join("\n");
    assert!(joined.contains("tools[0].triggers[0].verify.secret_env: environment variable TRIGD_SURELY_UNSET_VAR_91f2 is not set or empty"), "{joined}");
    assert!(
        joined.contains("tools[0].triggers[0].rule.signature: give the secret as exactly one of"),
        "{joined}"
    );
    let home = std::env::var("HOME").unwrap_or_default();
    assert!(home.is_empty() || !joined.contains(&home), "{joined}");
}

#[test]
fn admins_are_members_and_restrict_the_switch() {
    let users = "[[users]]\nname = \"alice\"\npassword = \"$argon2id$x\"\n\
                 [[users]]\nname = \"bob\"\npassword = \"$argon2id$x\"\n";
    let bad = format!(
        "{users}[[workspaces]]\nname = \"ops\"\nmembers = [\"alice\"]\nadmins = [\"bob\"]\n"
    );
    expect(&errors(&bad, &[]), &[
        "config.toml:10:11: workspaces[0].admins[0]: admin \"bob\" is not in this workspace's members",
    ]);
    let good = format!(
        "{users}[[workspaces]]\nname = \"ops\"\nmembers = [\"alice\", \"bob\"]\nadmins = [\"bob\"]\n\
         [[workspaces]]\nname = \"dev\"\nmembers = [\"alice\"]\n\
         [[workspaces]]\nname = \"locked\"\nmembers = [\"alice\"]\nadmins = []\n"
    );
    let cfg = run(&good, &[]).expect("valid");
    let ws = |n: &str| &cfg.workspaces[n];
    assert!(ws("ops").may_flip("bob") && !ws("ops").may_flip("alice"));
    assert!(
        ws("dev").may_flip("alice") && !ws("dev").may_flip("bob"),
        "members only"
    );
    assert!(
        !ws("locked").may_flip("alice"),
        "admins = [] locks the switch"
    );
}

/// Wait (bounded by the clock) until `file` was changed longer ago than
/// a clock tick, so that a stamp of it can be trusted.
fn settled(file: &Path) {
    let changed = std::fs::metadata(file).unwrap().modified().unwrap();
    let until = changed + Duration::from_millis(60);
    while std::time::SystemTime::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_reload_reads_only_the_files_that_changed() {
    let dir = TestDir::new("reuse");
    std::fs::create_dir_all(dir.join("programs")).unwrap();
    let config = dir.join("config.toml");
    std::fs::write(&config, "").unwrap();
    let prog = |id: u64, name: &str| {
        format!("id = {id}\nname = \"{name}\"\n[[functions]]\nname = \"f\"\ncommand = [\"/bin/true\"]\n")
    };
    let write = |file: &str, text: String| {
        let path = dir.join("programs").join(file);
        std::fs::write(&path, text).unwrap();
        path
    };
    write("a.toml", prog(1, "a"));
    settled(&write("b.toml", prog(2, "b")));
    let first = load(&config).unwrap();
    assert!(first.programs.values().all(|p| p.stamp.get().is_some()));
    assert!(
        load_changed(&config, &first, None).unwrap().is_none(),
        "unchanged"
    );

    write("c.toml", prog(3, "c"));
    let second = load_changed(&config, &first, None)
        .unwrap()
        .expect("a new file");
    assert!(Arc::ptr_eq(&first.programs[&1], &second.programs[&1]));
    assert!(Arc::ptr_eq(&first.programs[&2], &second.programs[&2]));
    assert!(
        second.programs[&3].stamp.get().is_none(),
        "just written: read again"
    );
    let again = load_changed(&config, &second, None).unwrap();
    assert!(again.is_none(), "read again, the same text: unchanged");
    // Read again once settled, with the same text: the kept program now
    // has the file's stamp, so later reloads leave the file alone (it was
    // read again at every reload, each program added since the start).
    settled(&dir.join("programs/c.toml"));
    let c = dir.join("programs/c.toml");
    assert!(load_changed(&config, &second, Some(&[c]))
        .unwrap()
        .is_none());
    assert!(
        second.programs[&3].stamp.get().is_some(),
        "read again once settled: stamped"
    );
    // Touched: a new stamp, the same text: kept, and stamped anew.
    let old = second.programs[&2].stamp.get();
    let b = dir.join("programs/b.toml");
    std::fs::File::options()
        .append(true)
        .open(&b)
        .unwrap()
        .set_modified(std::time::SystemTime::now())
        .unwrap();
    settled(&b);
    assert!(load_changed(&config, &second, None).unwrap().is_none());
    let new = second.programs[&2].stamp.get();
    assert!(new.is_some() && new != old, "touched: stamped anew");

    // Rewritten in place, same size: the change time tells.
    settled(&write("b.toml", prog(2, "x")));
    let third = load_changed(&config, &second, None)
        .unwrap()
        .expect("b changed");
    assert_eq!(third.programs[&2].name, "x");
    assert!(Arc::ptr_eq(&second.programs[&1], &third.programs[&1]));

    // An error found in a reused file is located as a full load locates it.
    write("0.toml", prog(2, "zero"));
    let errs = load_changed(&config, &third, None).unwrap_err();
    let e = errs.iter().find(|e| e.file.ends_with("b.toml")).unwrap();
    assert_eq!((e.line, e.key.as_str()), (1, "id"), "{errs:?}");
    std::fs::remove_file(dir.join("programs/0.toml")).unwrap();

    // config.toml changing run_timeout re-reads every program.
    std::fs::write(&config, "[server]\nrun_timeout = \"5s\"\n").unwrap();
    let fourth = load_changed(&config, &third, None)
        .unwrap()
        .expect("config changed");
    assert!(!Arc::ptr_eq(&third.programs[&1], &fourth.programs[&1]));
    assert_eq!(
        fourth.programs[&1].functions[0].timeout,
        Duration::from_secs(5)
    );

    // A file gone is told from the listing.
    std::fs::remove_file(dir.join("programs/c.toml")).unwrap();
    let fifth = load_changed(&config, &fourth, None)
        .unwrap()
        .expect("c.toml gone");
    assert_eq!(fifth.programs.len(), 2);
    assert!(load_changed(&config, &fifth, None).unwrap().is_none());
}

#[test]
fn a_reload_told_which_files_changed_looks_at_those_only() {
    let dir = TestDir::new("named");
    let programs = dir.join("programs");
    std::fs::create_dir_all(&programs).unwrap();
    let config = dir.join("config.toml");
    std::fs::write(&config, "").unwrap();
    let prog = |id: u64, name: &str| {
        format!("id = {id}\nname = \"{name}\"\n[[functions]]\nname = \"f\"\ncommand = [\"/bin/true\"]\n")
    };
    let write = |file: &str, text: String| {
        let path = programs.join(file);
        std::fs::write(&path, text).unwrap();
        path
    };
    let a = write("a.toml", prog(1, "a"));
    let b = write("b.toml", prog(2, "b"));
    settled(&write("c.toml", prog(3, "c")));
    let first = load(&config).unwrap();
    assert!(first.programs.values().all(|p| p.stamp.get().is_some()));

    // Nothing named, nothing changed.
    assert!(load_changed(&config, &first, Some(&[])).unwrap().is_none());

    // b changed, d is new, c is gone, but only d and c are named: b keeps
    // the program it had (its file is not even looked at), d is served,
    // c is dropped; names outside the programs dir or not of program files
    // are passed over.
    settled(&write("b.toml", prog(2, "b2")));
    let d = write("d.toml", prog(4, "d"));
    let c = programs.join("c.toml");
    std::fs::remove_file(&c).unwrap();
    let named = [
        d.clone(),
        c.clone(),
        d.clone(),
        programs.join(".d.toml.swp"),
        dir.join("a.toml"),
    ];
    let second = load_changed(&config, &first, Some(&named))
        .unwrap()
        .expect("d new, c gone");
    assert_eq!(
        second.programs.keys().copied().collect::<Vec<_>>(),
        [1, 2, 4]
    );
    assert!(Arc::ptr_eq(&first.programs[&1], &second.programs[&1]));
    assert!(Arc::ptr_eq(&first.programs[&2], &second.programs[&2]));
    assert_eq!(second.programs[&2].name, "b", "b was not named");
    assert_eq!(second.programs[&4].file, d);

    // Named now: b's change is seen; the unnamed a is still not looked at
    // (its deletion is not seen either).
    std::fs::remove_file(&a).unwrap();
    let third = load_changed(&config, &second, Some(std::slice::from_ref(&b)))
        .unwrap()
        .expect("b changed");
    assert_eq!(third.programs[&2].name, "b2");
    assert!(Arc::ptr_eq(&second.programs[&1], &third.programs[&1]));

    // A full scan (nothing named) finds what the names left out.
    let fourth = load_changed(&config, &third, None)
        .unwrap()
        .expect("a gone");
    assert_eq!(fourth.programs.keys().copied().collect::<Vec<_>>(), [2, 4]);

    // A config.toml naming another programs directory lists that one,
    // whatever the names say.
    std::fs::create_dir_all(dir.join("other")).unwrap();
    std::fs::write(dir.join("other/e.toml"), prog(5, "e")).unwrap();
    std::fs::write(&config, "[server]\nprograms_dir = \"other\"\n").unwrap();
    let fifth = load_changed(&config, &fourth, Some(&[]))
        .unwrap()
        .expect("programs dir moved");
    assert_eq!(fifth.programs.keys().copied().collect::<Vec<_>>(), [5]);
}

#[test]
fn async_runs_take_half_the_slots_unless_set_and_never_more_than_all() {
    let slots = |server: &str| {
        let cfg = run(&format!("[server]\n{server}\n"), &[]).unwrap_or_else(|e| panic!("{e:?}"));
        let s = &cfg.server;
        (s.max_concurrent_runs, s.max_concurrent_async_runs)
    };
    assert_eq!(slots("max_concurrent_runs = 8"), (8, 4));
    assert_eq!(slots("max_concurrent_runs = 3"), (3, 2));
    assert_eq!(slots("max_concurrent_runs = 1"), (1, 1));
    assert_eq!(
        slots("max_concurrent_runs = 8\nmax_concurrent_async_runs = 8"),
        (8, 8)
    );
    let e = errors(
        "[server]\nmax_concurrent_runs = 2\nmax_concurrent_async_runs = 3\n",
        &[],
    );
    expect(&e, &["config.toml:3:"]);
    assert!(
        e[0].contains("at most max_concurrent_runs (2), got 3"),
        "{e:?}"
    );
    let e = errors("[server]\nmax_concurrent_async_runs = 0\n", &[]);
    assert!(e[0].contains("must be at least 1"), "{e:?}");
}

#[test]
fn listen_and_directories_are_checked_where_written() {
    for bad in [
        "nope",
        ":8080",
        "127.0.0.1:http",
        "127.0.0.1:65536",
        "::1:8080",
        "[::1:8080",
        "[nope]:8080",
        "unix:",
        "a b:80",
    ] {
        let config = format!("[server]\nlisten = {bad:?}\n");
        expect(
            &errors(&config, &[]),
            &["config.toml:2:10: server.listen: listen must be host:port or unix:PATH ("],
        );
    }
    for good in [
        "127.0.0.1:0",
        "0.0.0.0:9000",
        "[::]:8080",
        "[::1]:1",
        "localhost:8080",
        "unix:/run/trigd.sock",
        "unix:rel.sock",
    ] {
        let config = format!("[server]\nlisten = {good:?}\n");
        assert!(run(&config, &[]).is_ok(), "{good} refused");
    }
    expect(
        &errors("[server]\nrequest_timeout = \"999ms\"\n", &[]),
        &["config.toml:2:19: server.request_timeout: request_timeout must be at least 1s"],
    );
    assert!(run("[server]\nrequest_timeout = \"1s\"\n", &[]).is_ok());
    let config = "[server]\nstate_dir = \"\"\nprograms_dir = \"\"\nshared_state_dir = \"\"\n";
    expect(
        &errors(config, &[]),
        &[
            "config.toml:2:13: server.state_dir: state_dir must not be empty",
            "config.toml:3:16: server.programs_dir: programs_dir must not be empty",
            "config.toml:4:20: server.shared_state_dir: shared_state_dir must not be empty",
        ],
    );
}
