//! Unit tests of the step runner (kept apart from the code for size).

use super::*;
use crate::config::{Piece, Template, WebhookTrigger};
use crate::state::test_dir::TestDir;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::RwLockReadGuard;

use crate::sys::SPAWN_LOCK;

fn shared() -> RwLockReadGuard<'static, ()> {
    SPAWN_LOCK.read().unwrap_or_else(|e| e.into_inner())
}

const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// `{name}` placeholders bound to `inputs`; `{{`/`}}` are not needed here.
fn tpl(s: &str, inputs: &[&str]) -> Template {
    let mut pieces = Vec::new();
    let mut rest = s;
    while let Some(open) = rest.find('{') {
        let close = open + rest[open..].find('}').expect("unclosed {");
        if open > 0 {
            pieces.push(Piece::Lit(rest[..open].to_string()));
        }
        let name = &rest[open + 1..close];
        let i = inputs
            .iter()
            .position(|n| *n == name)
            .expect("unknown input");
        pieces.push(Piece::Var(i));
        rest = &rest[close + 1..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Lit(rest.to_string()));
    }
    Template(pieces)
}

fn cmd(argv: &[&str], inputs: &[&str]) -> Step {
    Step::Command(argv.iter().map(|a| tpl(a, inputs)).collect())
}

fn sh(script: &str) -> Step {
    Step::Shell(script.to_string())
}

fn func(name: &str, inputs: &[&str], steps: Vec<Step>) -> Function {
    Function {
        name: name.to_string(),
        steps,
        timeout: Duration::from_secs(30),
        env: BTreeMap::new(),
        workdir: std::env::temp_dir(),
        concurrency: None,
        retry_on_restart: false,
        output: Default::default(),
        outputs: inputs.iter().map(|s| s.to_string()).collect(),
        webhook_trigger: Some(WebhookTrigger {
            active: true,
            lists_outputs: false,
        }),
        user: None,
        group: None,
        callback: None,
        env_inputs: true,
        combined_output: false,
        expect_every: None,
        schedules: Vec::new(),
        retry: None,
        concurrency_group: None,
    }
}

fn program(functions: Vec<Function>) -> Program {
    Program {
        id: 1,
        name: "test".to_string(),
        workspace: None,
        file: std::env::temp_dir().join("test.toml"),
        functions,
        stamp: crate::config::StampCell::default(),
        digest: 0,
        hook: false,
    }
}

struct Opts {
    timeout: Duration,
    grace: Duration,
    max_output: usize,
    vars: BTreeMap<String, String>,
    run_id: Option<&'static str>,
}

impl Default for Opts {
    fn default() -> Opts {
        Opts {
            timeout: Duration::from_secs(20),
            grace: Duration::from_millis(200),
            max_output: 1 << 20,
            vars: BTreeMap::new(),
            run_id: None,
        }
    }
}

fn run_with(
    prog: &Program,
    name: &str,
    values: &[&str],
    opts: &Opts,
    abort: &AbortSignal,
    on_spawn: &(dyn Fn(Option<u32>) + Sync),
) -> Outcome {
    let ctx = Ctx {
        program: prog,
        vars: &opts.vars,
        path_env: PATH,
        max_output_bytes: opts.max_output,
        kill_grace: opts.grace,
        deadline: Instant::now() + opts.timeout,
        abort,
        on_spawn,
        stdin: None,
        on_output: &|_, _| {},
        release_output: &|_| None,
        run_id: opts.run_id,
    };
    let values: Vec<String> = values.iter().map(|s| s.to_string()).collect();
    run_function(&ctx, prog.function(name).unwrap(), &values)
}

fn run(prog: &Program, name: &str, values: &[&str], opts: &Opts) -> Outcome {
    let abort = AbortSignal::new().unwrap();
    run_with(prog, name, values, opts, &abort, &|_| {})
}

fn run1(steps: Vec<Step>, opts: &Opts) -> Outcome {
    let prog = program(vec![func("f", &[], steps)]);
    run(&prog, "f", &[], opts)
}

/// Gone, or a zombie waiting for init: no longer running.
fn pid_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            state.starts_with('Z') || state.starts_with('X')
        }
    }
}

fn wait_gone(pid: u32) -> bool {
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        if pid_gone(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    pid_gone(pid)
}

fn read_pid(path: &Path) -> u32 {
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn result_json_and_text() {
    let _g = shared();
    let out = run1(
        vec![
            sh(r#"echo '{"a": [1, 2]}'"#),
            sh("echo hello"),
            sh("printf 'two\\n\\n'"),
            sh("true"),
            cmd(&["printf", "42"], &[]),
        ],
        &Opts::default(),
    );
    assert_eq!(out.error, None);
    assert_eq!(
        out.result,
        vec![
            serde_json::json!({"a": [1, 2]}),
            Value::String("hello".into()),
            Value::String("two\n".into()),
            Value::String(String::new()),
            // `output = "auto"` keeps a scalar as the text it is.
            Value::String("42".into()),
        ]
    );
    assert_eq!(out.steps.len(), 5);
    assert_eq!(out.steps[0].kind, StepKind::Shell);
    assert_eq!(out.steps[4].kind, StepKind::Command);
    assert!(out
        .steps
        .iter()
        .all(|s| s.exit_code == Some(0) && s.signal.is_none()));
}

#[test]
fn call_step_nests_result() {
    let _g = shared();
    let inner = func(
        "inner",
        &["x"],
        vec![cmd(&["printf", "in:%s", "{x}"], &["x"]), sh("echo '[1]'")],
    );
    let outer = func(
        "outer",
        &["v"],
        vec![
            sh("echo first"),
            Step::Call {
                function: "inner".into(),
                args: vec![tpl("<{v}>", &["v"])],
            },
            sh("printf '%s' \"$v\""),
        ],
    );
    let prog = program(vec![inner, outer]);
    let out = run(&prog, "outer", &["val"], &Opts::default());
    assert_eq!(out.error, None);
    assert_eq!(
        out.result,
        serde_json::json!(["first", ["in:<val>", [1]], "val"])
            .as_array()
            .unwrap()
            .clone()
    );
    assert_eq!(out.steps[1].kind, StepKind::Call);
    assert_eq!(out.steps[1].steps.as_ref().unwrap().len(), 2);
}

#[test]
fn call_failure_uses_top_level_index() {
    let _g = shared();
    let inner = func("inner", &[], vec![sh("true"), sh("echo oops >&2; exit 4")]);
    let outer = func(
        "outer",
        &[],
        vec![
            sh("true"),
            Step::Call {
                function: "inner".into(),
                args: vec![],
            },
            sh("echo never"),
        ],
    );
    let prog = program(vec![inner, outer]);
    let out = run(&prog, "outer", &[], &Opts::default());
    assert_eq!(
        out.error,
        Some(StepError::Failed {
            step: 1,
            exit_code: Some(4),
            signal: None,
            stderr_tail: "oops\n".into(),
            stdout_tail: String::new(),
        })
    );
    assert_eq!(out.result.len(), 1);
    assert_eq!(out.steps.len(), 2);
}

#[test]
fn callee_timeout_applies() {
    let _g = shared();
    let mut inner = func("inner", &[], vec![sh("sleep 100")]);
    inner.timeout = Duration::from_millis(300);
    let outer = func(
        "outer",
        &[],
        vec![
            sh("true"),
            Step::Call {
                function: "inner".into(),
                args: vec![],
            },
        ],
    );
    let prog = program(vec![inner, outer]);
    let start = Instant::now();
    let out = run(&prog, "outer", &[], &Opts::default());
    assert_eq!(out.error, Some(StepError::TimedOut { step: 1 }));
    assert!(start.elapsed() < Duration::from_secs(3));
}

const NASTY: &[&str] = &[
    "a; touch MARK",
    "$(touch MARK)",
    "`touch MARK`",
    "'\"quoted\" 'single'",
    "line1\nline2\n",
    "ünïcödé ✓ 日本",
    "--flag",
    "%s %n",
    "",
];

#[test]
fn values_reach_argv_and_env_verbatim() {
    let _g = shared();
    let dir = TestDir::new("step-mark");
    let mark = dir.join("mark");
    let long = "x".repeat(1000);
    let mut values: Vec<String> = NASTY
        .iter()
        .map(|v| v.replace("MARK", mark.to_str().unwrap()))
        .collect();
    values.push(long);
    for value in &values {
        let inputs = ["v"];
        let f = func(
            "f",
            &inputs,
            vec![
                cmd(&["printf", "X%sX", "{v}"], &inputs),
                cmd(&["printf", "X%sX", "pre{v}post"], &inputs),
                sh("printf 'X%sX' \"$v\""),
                cmd(
                    &["/bin/sh", "-c", "printf 'X%sX' \"$1\"", "sh", "{v}"],
                    &inputs,
                ),
            ],
        );
        let prog = program(vec![f]);
        let out = run(&prog, "f", &[value.as_str()], &Opts::default());
        assert_eq!(out.error, None, "value {value:?}");
        let x = format!("X{value}X");
        let wrapped = format!("Xpre{value}postX");
        assert_eq!(
            out.result,
            vec![
                Value::String(x.clone()),
                Value::String(wrapped),
                Value::String(x.clone()),
                Value::String(x),
            ],
            "value {value:?}"
        );
    }
    assert!(!mark.exists(), "a value was executed");
}

#[test]
fn clean_environment_with_precedence() {
    let _g = shared();
    std::env::set_var("TRIGD_STEP_TEST_LEAK", "leaked");
    let inputs = ["IN", "SHARED"];
    let mut f = func("f", &inputs, vec![cmd(&["env"], &inputs)]);
    f.env.insert("FENV".into(), "f".into());
    f.env.insert("SHARED".into(), "from-env".into());
    f.env.insert("OVER".into(), "from-env".into());
    let mut opts = Opts::default();
    opts.vars.insert("VAR".into(), "v".into());
    opts.vars.insert("OVER".into(), "from-vars".into());
    opts.vars.insert("SHARED".into(), "from-vars".into());
    let prog = program(vec![f]);
    let out = run(&prog, "f", &["in", "from-input"], &opts);
    assert_eq!(out.error, None);
    let text = out.result[0].as_str().unwrap().to_string();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        vec![
            "FENV=f",
            "IN=in",
            "OVER=from-vars",
            &format!("PATH={PATH}"),
            "SHARED=from-input",
            "VAR=v",
        ]
    );
}

#[test]
fn the_run_id_is_in_the_environment_and_wins() {
    let _g = shared();
    let inputs = ["TRIGD_RUN_ID"];
    let mut f = func("f", &inputs, vec![cmd(&["env"], &inputs)]);
    f.env.insert("TRIGD_RUN_ID".into(), "from-env".into());
    let mut opts = Opts {
        run_id: Some("vm-0123"),
        ..Opts::default()
    };
    opts.vars.insert("TRIGD_RUN_ID".into(), "from-vars".into());
    let prog = program(vec![f]);
    let out = run(&prog, "f", &["from-input"], &opts);
    assert_eq!(out.error, None);
    let text = out.result[0].as_str().unwrap().to_string();
    let ids: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("TRIGD_RUN_ID="))
        .collect();
    assert_eq!(ids, ["TRIGD_RUN_ID=vm-0123"]);
}

#[test]
fn relative_argv0_resolves_against_workdir() {
    let _g = shared();
    let dir = TestDir::new("step-wd");
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    let script = dir.join("bin/hello");
    std::fs::write(&script, "#!/bin/sh\necho \"hi from $(pwd)\"\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut f = func("f", &[], vec![cmd(&["bin/hello"], &[])]);
    f.workdir = dir.path().to_path_buf();
    let prog = program(vec![f]);
    let out = run(&prog, "f", &[], &Opts::default());
    assert_eq!(out.error, None);
    let want = format!("hi from {}", dir.path().display());
    assert_eq!(out.result, vec![Value::String(want)]);
}

#[test]
fn failure_stops_later_steps() {
    let _g = shared();
    let dir = TestDir::new("step-after");
    let mark = dir.join("mark");
    let out = run1(
        vec![
            sh("echo ok"),
            sh("echo bad >&2; exit 3"),
            cmd(&["touch", mark.to_str().unwrap()], &[]),
        ],
        &Opts::default(),
    );
    assert_eq!(
        out.error,
        Some(StepError::Failed {
            step: 1,
            exit_code: Some(3),
            signal: None,
            stderr_tail: "bad\n".into(),
            stdout_tail: String::new(),
        })
    );
    assert_eq!(out.result, vec![Value::String("ok".into())]);
    assert_eq!(out.steps.len(), 2);
    assert_eq!(out.steps[1].exit_code, Some(3));
    assert!(!mark.exists());
}

#[test]
fn killed_by_signal_fails() {
    let _g = shared();
    let out = run1(vec![sh("kill -9 $$")], &Opts::default());
    match out.error {
        Some(StepError::Failed {
            step: 0,
            exit_code: None,
            signal: Some(9),
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn stderr_tail_is_last_2k() {
    let _g = shared();
    let out = run1(
        vec![sh(
            "head -c 10000 /dev/zero | tr '\\0' a >&2; printf END >&2; exit 1",
        )],
        &Opts::default(),
    );
    match out.error {
        Some(StepError::Failed { stderr_tail, .. }) => {
            assert_eq!(stderr_tail.len(), 2048);
            assert!(stderr_tail.ends_with("aaaEND"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn timeout_kills_whole_group() {
    let _g = shared();
    let dir = TestDir::new("step-bgpid");
    let pidfile = dir.join("pid");
    let script = format!("sleep 100 & echo $! > {}; sleep 100", pidfile.display());
    let opts = Opts {
        timeout: Duration::from_millis(300),
        ..Opts::default()
    };
    let start = Instant::now();
    let out = run1(vec![sh("true"), sh(&script)], &opts);
    let took = start.elapsed();
    assert_eq!(out.error, Some(StepError::TimedOut { step: 1 }));
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert!(took < Duration::from_millis(1500), "{took:?}");
    assert_eq!(out.steps.len(), 2);
    assert!(wait_gone(read_pid(&pidfile)));
}

#[test]
fn term_ignoring_child_killed_after_grace() {
    let _g = shared();
    let opts = Opts {
        timeout: Duration::from_millis(300),
        grace: Duration::from_millis(200),
        ..Opts::default()
    };
    let start = Instant::now();
    let out = run1(vec![sh("trap '' TERM; sleep 100; sleep 100")], &opts);
    let took = start.elapsed();
    assert_eq!(out.error, Some(StepError::TimedOut { step: 0 }));
    assert!(took >= Duration::from_millis(500), "{took:?}");
    assert!(took < Duration::from_millis(1700), "{took:?}");
    assert_eq!(out.steps[0].signal, Some(libc::SIGKILL));
}

#[test]
fn background_child_holding_stdout_is_killed() {
    let _g = shared();
    let dir = TestDir::new("step-holder");
    let pidfile = dir.join("pid");
    let script = format!("sleep 100 & echo $! > {}; echo done", pidfile.display());
    let start = Instant::now();
    let out = run1(vec![sh(&script)], &Opts::default());
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(out.error, None);
    assert_eq!(out.result, vec![Value::String("done".into())]);
    assert!(wait_gone(read_pid(&pidfile)));
}

#[test]
fn stdout_is_capped() {
    let _g = shared();
    let opts = Opts {
        max_output: 1024,
        ..Opts::default()
    };
    let out = run1(
        vec![sh("head -c 5000000 /dev/zero | tr '\\0' y; echo done >&2")],
        &opts,
    );
    assert_eq!(out.error, None);
    assert!(out.steps[0].stdout_truncated);
    assert!(!out.steps[0].stderr_truncated);
    assert_eq!(out.result, vec![Value::String("y".repeat(1024))]);
}

#[test]
fn large_stdout_and_stderr_at_once() {
    let _g = shared();
    let opts = Opts {
        max_output: 8 << 20,
        ..Opts::default()
    };
    // stderr first: a reader that waited for stdout EOF would deadlock.
    let script = "head -c 3000000 /dev/zero | tr '\\0' e >&2; \
                  head -c 3000000 /dev/zero | tr '\\0' o & \
                  head -c 3000000 /dev/zero | tr '\\0' e >&2; wait";
    let out = run1(vec![sh(script)], &opts);
    assert_eq!(out.error, None);
    assert!(!out.steps[0].stdout_truncated);
    assert_eq!(out.result[0].as_str().unwrap().len(), 3_000_000);
    let opts = Opts {
        max_output: 1000,
        ..Opts::default()
    };
    let out = run1(vec![sh(script)], &opts);
    assert_eq!(out.error, None);
    assert!(out.steps[0].stdout_truncated && out.steps[0].stderr_truncated);
}

#[test]
fn abort_stops_sleeping_run() {
    let _g = shared();
    let abort = AbortSignal::new().unwrap();
    let spawned = AtomicU32::new(0);
    let prog = program(vec![func(
        "f",
        &[],
        vec![sh("sleep 100"), sh("echo never")],
    )]);
    let start = Instant::now();
    let out = std::thread::scope(|s| {
        s.spawn(|| {
            let until = Instant::now() + Duration::from_secs(5);
            while spawned.load(Ordering::SeqCst) == 0 && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
            abort.trigger();
        });
        let on_spawn = |pid: Option<u32>| {
            if let Some(pid) = pid {
                spawned.store(pid, Ordering::SeqCst);
            }
        };
        run_with(&prog, "f", &[], &Opts::default(), &abort, &on_spawn)
    });
    assert_eq!(out.error, Some(StepError::Aborted { step: 0 }));
    assert!(start.elapsed() < Duration::from_secs(3));
    assert_eq!(out.steps.len(), 1);
    assert!(wait_gone(spawned.load(Ordering::SeqCst)));
    // Already triggered: nothing more starts.
    let out = run_with(&prog, "f", &[], &Opts::default(), &abort, &|_| {});
    assert_eq!(out.error, Some(StepError::Aborted { step: 0 }));
    assert!(out.steps.is_empty());
}

#[test]
fn on_spawn_brackets_each_process() {
    let _g = shared();
    let log = std::sync::Mutex::new(Vec::new());
    let prog = program(vec![func("f", &[], vec![sh("true"), sh("true")])]);
    let abort = AbortSignal::new().unwrap();
    let on_spawn = |pid: Option<u32>| log.lock().unwrap().push(pid);
    let out = run_with(&prog, "f", &[], &Opts::default(), &abort, &on_spawn);
    assert_eq!(out.error, None);
    let log = log.into_inner().unwrap();
    assert_eq!(log.len(), 4);
    assert!(log[0].is_some() && log[1].is_none() && log[2].is_some() && log[3].is_none());
}

/// The message of the spawn error `out` ended with at step `step`.
fn spawn_message(out: &Outcome, step: usize) -> &str {
    match &out.error {
        Some(StepError::Spawn { step: s, message }) if *s == step => message,
        other => panic!("{other:?}"),
    }
}

#[test]
fn spawn_errors() {
    let _g = shared();
    let out = run1(
        vec![cmd(&["/nonexistent/trigd-bin"], &[])],
        &Opts::default(),
    );
    assert_eq!(
        spawn_message(&out, 0),
        "cannot start /nonexistent/trigd-bin: No such file or directory (os error 2)"
    );
    assert!(out.steps.is_empty());
    let dir = TestDir::new("step-not-executable");
    let plain = dir.join("plain");
    std::fs::write(&plain, "#!/bin/sh\necho never\n").unwrap();
    let out = run1(vec![cmd(&[plain.to_str().unwrap()], &[])], &Opts::default());
    let want = format!(
        "cannot start {}: Permission denied (os error 13)",
        plain.display()
    );
    assert_eq!(spawn_message(&out, 0), want);
    let out = run1(vec![cmd(&["/bin/echo", "a\0b"], &[])], &Opts::default());
    assert_eq!(
        spawn_message(&out, 0),
        "cannot start /bin/echo: nul byte found in provided data"
    );
    let out = run1(
        vec![sh("true"), cmd(&["trigd-no-such-cmd"], &[])],
        &Opts::default(),
    );
    let message = spawn_message(&out, 1);
    assert!(message.contains("trigd-no-such-cmd"), "{message}");
    let mut f = func("f", &[], vec![sh("true")]);
    f.workdir = PathBuf::from("/nonexistent/trigd-dir");
    let out = run(&program(vec![f]), "f", &[], &Opts::default());
    assert_eq!(
        spawn_message(&out, 0),
        "cannot start /bin/sh: No such file or directory (os error 2) \
         (workdir /nonexistent/trigd-dir is not a directory)"
    );
}

#[test]
fn steps_get_clean_signal_state() {
    let _g = shared();
    // trigd blocks TERM/INT/HUP in every thread; steps must not inherit
    // that, nor std's ignored SIGPIPE, nor any handler (std's SIGSEGV).
    let out = std::thread::spawn(|| {
        sys::block_signals();
        run1(
            vec![sh("grep -E '^Sig(Blk|Ign)' /proc/self/status")],
            &Opts::default(),
        )
    })
    .join()
    .unwrap();
    assert_eq!(out.error, None);
    let text = out.result[0].as_str().unwrap().to_string();
    assert_eq!(text.lines().count(), 2, "{text}");
    for line in text.lines() {
        let (_, mask) = line.split_once(':').unwrap();
        assert_eq!(u64::from_str_radix(mask.trim(), 16).unwrap(), 0, "{text}");
    }
}

#[test]
fn steps_get_only_stdio_and_their_own_process_group() {
    let _g = shared();
    // A descriptor trigd inherited without close-on-exec stays with trigd.
    let inherited = sys::dup_inheritable(std::io::stderr().as_fd());
    let script = "ls /proc/$$/fd; cut -d' ' -f1,5,6 /proc/$$/stat";
    let out = run1(vec![sh(script)], &Opts::default());
    drop(inherited);
    assert_eq!(out.error, None);
    let text = out.result[0].as_str().unwrap().to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[..3], ["0", "1", "2"], "{text}");
    assert_eq!(lines.len(), 4, "{text}");
    // pid, process group, session: its own group, in trigd's session.
    let ids: Vec<u32> = lines[3].split(' ').map(|n| n.parse().unwrap()).collect();
    assert_eq!(ids[0], ids[1], "{text}");
    let own_session = std::fs::read_to_string("/proc/self/stat").unwrap();
    let own_session: u32 = own_session
        .rsplit(')')
        .next()
        .unwrap()
        .split(' ')
        .nth(4)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(ids[2], own_session, "{text}");
}

#[test]
fn a_step_reads_dev_null_without_a_request_body() {
    let _g = shared();
    let out = run1(
        vec![
            sh("readlink /proc/$$/fd/0; wc -c"),
            sh("readlink /proc/$$/fd/0"),
        ],
        &Opts::default(),
    );
    assert_eq!(out.error, None);
    assert_eq!(out.result[0], "/dev/null\n0");
    assert_eq!(out.result[1], "/dev/null");
}

#[test]
fn fallback_without_pidfd() {
    let _g = shared();
    NO_PIDFD.with(|c| c.set(true));
    let dir = TestDir::new("step-fallback");
    let pidfile = dir.join("pid");
    let script = format!("sleep 100 & echo $! > {}; echo done", pidfile.display());
    let start = Instant::now();
    let out = run1(vec![sh("echo '[true]'"), sh(&script)], &Opts::default());
    assert!(start.elapsed() < Duration::from_secs(2));
    assert_eq!(out.error, None);
    assert_eq!(
        out.result,
        serde_json::json!([[true], "done"])
            .as_array()
            .unwrap()
            .clone()
    );
    assert!(wait_gone(read_pid(&pidfile)));
    let opts = Opts {
        timeout: Duration::from_millis(300),
        ..Opts::default()
    };
    let out = run1(vec![sh("sleep 100")], &opts);
    assert_eq!(out.error, Some(StepError::TimedOut { step: 0 }));
    assert!(start.elapsed() < Duration::from_secs(3));
    NO_PIDFD.with(|c| c.set(false));
}

/// This process's open pipes and pidfds: what a step could leak. (Other
/// tests running meanwhile open and close files of their own.)
fn fd_count() -> usize {
    let kind = |e: std::fs::DirEntry| std::fs::read_link(e.path()).ok();
    let entries = std::fs::read_dir("/proc/self/fd").unwrap();
    entries
        .filter_map(|e| kind(e.ok()?))
        .filter(|l| {
            let l = l.to_string_lossy();
            l.starts_with("pipe:") || l == "anon_inode:[pidfd]"
        })
        .count()
}

#[test]
fn no_fd_leak_over_200_runs() {
    let _g = SPAWN_LOCK.write().unwrap_or_else(|e| e.into_inner());
    let prog = program(vec![func(
        "f",
        &[],
        vec![sh("echo out; echo err >&2"), sh("exit 1")],
    )]);
    let timeout_prog = program(vec![func("f", &[], vec![sh("sleep 100")])]);
    let mut f = func("f", &[], vec![sh("true")]);
    f.workdir = PathBuf::from("/nonexistent/trigd-dir");
    let failing_prog = program(vec![f]);
    let opts = Opts {
        timeout: Duration::from_millis(30),
        grace: Duration::from_millis(10),
        ..Opts::default()
    };
    // Warm up lazily opened fds (e.g. std's internals).
    run(&prog, "f", &[], &Opts::default());
    let before = fd_count();
    for i in 0..200 {
        let out = run(&prog, "f", &[], &Opts::default());
        assert!(matches!(out.error, Some(StepError::Failed { step: 1, .. })));
        if i % 20 == 0 {
            // A child that fails before its exec is reaped, its pidfd closed.
            let out = run(&failing_prog, "f", &[], &opts);
            assert!(matches!(out.error, Some(StepError::Spawn { step: 0, .. })));
            let out = run(&timeout_prog, "f", &[], &opts);
            assert_eq!(out.error, Some(StepError::TimedOut { step: 0 }));
        }
    }
    assert_eq!(fd_count(), before);
}

#[test]
fn pipes_end_only_when_trigd_drops_its_write_ends() {
    let _g = shared();
    let argv = ["sh", "-c", "echo out; echo err >&2"];
    let exec = sys::Exec::new(Path::new("/bin/sh"), argv, [], Path::new("/")).unwrap();
    let mut pipes = Pipes::new().unwrap();
    let child = pipes
        .spawn(&exec, &Stdin::Null(dev_null().unwrap()), false)
        .unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while !sys::exited_nowait(child.pid) {
        assert!(Instant::now() < until, "the child did not exit");
        std::thread::sleep(Duration::from_millis(5));
    }
    // The child has exited and closed its ends; trigd's copies keep the
    // pipes open: what it wrote is there, then no EOF (a hangup here
    // would wake the supervisor before the child can be reaped).
    let mut buf = [0u8; 64];
    assert_eq!(pipes.stdout.read(&mut buf).unwrap(), 4);
    assert_eq!(&buf[..4], b"out\n");
    let pending = pipes.stdout.read(&mut buf).unwrap_err();
    assert_eq!(pending.kind(), io::ErrorKind::WouldBlock);
    pipes.writers = None;
    assert_eq!(read_to_eof(&mut pipes.stdout), b"");
    assert_eq!(read_to_eof(&mut pipes.stderr), b"err\n");
    assert!(sys::wait_child(child.pid).unwrap().success());
}

/// Read a non-blocking pipe until EOF (bounded). EOF may come a moment
/// after trigd's copies are closed: a child another test is starting at the
/// same time holds copies of every descriptor between its fork and exec.
fn read_to_eof(pipe: &mut std::fs::File) -> Vec<u8> {
    let until = Instant::now() + Duration::from_secs(10);
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    loop {
        match pipe.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                assert!(Instant::now() < until, "no EOF within 10 s");
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => panic!("read: {e}"),
        }
    }
}

#[test]
fn a_silent_step_is_supervised_with_one_poll() {
    let _g = shared();
    // The exit is seen by the first poll; the pipes are then read at once
    // (at EOF) instead of being polled again.
    POLLS.with(|c| c.set(0));
    let out = run1(vec![cmd(&["/bin/true"], &[])], &Opts::default());
    assert_eq!(out.error, None);
    assert_eq!(POLLS.with(std::cell::Cell::get), 1);
    // Output written just before the exit is still read whole.
    let out = run1(
        vec![sh("printf '[1,2]'; printf oops >&2")],
        &Opts::default(),
    );
    assert_eq!(out.error, None);
    assert_eq!(out.result, vec![serde_json::json!([1, 2])]);
}

#[test]
fn only_trigds_read_ends_are_non_blocking() {
    let pipes = Pipes::new().unwrap();
    // The status flags, from the "flags:" line (octal) of its fdinfo.
    let flags = |fd: std::os::fd::RawFd| {
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).unwrap();
        let octal = info.lines().find_map(|l| l.strip_prefix("flags:")).unwrap();
        i32::from_str_radix(octal.trim(), 8).unwrap()
    };
    for r in [&pipes.stdout, &pipes.stderr] {
        assert_ne!(flags(r.as_raw_fd()) & libc::O_NONBLOCK, 0);
    }
    for w in pipes.writers.as_ref().unwrap() {
        // The child's stdout and stderr block, as a program expects.
        assert_eq!(flags(w.as_raw_fd()) & libc::O_NONBLOCK, 0);
    }
}

#[test]
fn auto_output_keeps_only_objects_and_arrays_as_json() {
    let auto = |s: &str| element(s.as_bytes().to_vec(), OutputMode::Auto).unwrap();
    assert_eq!(auto(" \n\t[1, 2]\n"), serde_json::json!([1, 2]));
    assert_eq!(auto("\r\n{\"a\": null}"), serde_json::json!({"a": null}));
    for text in [
        "",
        "\n",
        "null",
        "42",
        "\"s\"",
        "{not json",
        "[1,",
        "\u{c}[1]",
    ] {
        let kept = text.strip_suffix('\n').unwrap_or(text);
        assert_eq!(auto(text), Value::String(kept.into()), "{text:?}");
    }
    let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
    assert_eq!(auto(&deep), Value::String(deep.clone()));
}
