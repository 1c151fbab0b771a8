//! What a hook of a hooks file gains by being an endpoint like every other
//! (`invoke`): an `Idempotency-Key` starts one run and a repeat is answered
//! with it, in webhook's words; and trigd's limits (`busy`,
//! `storage_unavailable`, `shutting_down`) refuse a hook as they refuse
//! every run. `hooks_diff.rs` shows that nothing else of a hook's answer
//! changed.

use std::fs;
use std::thread;

use crate::util::*;

/// Appends `<argv> <X_VALUE>` to `<dir>/runs`, prints it; `exit=N` as first
/// argument makes it exit N.
const RECORDER: &str = r#"#!/bin/sh
line="$* ${X_VALUE:-}"
echo "$line" >> "$(dirname "$0")/runs"
printf 'out: %s\n' "$line"
case "$1" in exit=*) exit "${1#exit=}";; esac
exit 0
"#;

/// Creates `<dir>/started`, then waits for `<dir>/release`.
const GATE: &str = r#"#!/bin/sh
d="$(dirname "$0")"
: > "$d/started"
while [ ! -e "$d/release" ] && [ -e "$d" ]; do sleep 0.05; done
echo released
"#;

const HOOKS: &str = r#"[
  {"id": "out", "execute-command": "@DIR@/rec.sh", "include-command-output-in-response": true,
   "response-headers": [{"name": "X-Hook", "value": "yes"}],
   "pass-arguments-to-command": [{"source": "payload", "name": "x"}]},
  {"id": "env", "execute-command": "@DIR@/rec.sh", "include-command-output-in-response": true,
   "pass-environment-to-command": [{"source": "payload", "name": "x", "envname": "X_VALUE"}]},
  {"id": "bg", "execute-command": "@DIR@/rec.sh", "response-message": "started",
   "success-http-response-code": 202,
   "pass-arguments-to-command": [{"source": "payload", "name": "x"}]},
  {"id": "fail", "execute-command": "@DIR@/rec.sh", "include-command-output-in-response": true,
   "include-command-output-in-response-on-error": true,
   "pass-arguments-to-command": [{"source": "string", "name": "exit=3"}]},
  {"id": "gate", "execute-command": "@DIR@/gate.sh"},
  {"id": "signed", "execute-command": "@DIR@/rec.sh", "include-command-output-in-response": true,
   "pass-arguments-to-command": [{"source": "payload", "name": "x"}],
   "trigger-rule": {"match": {"type": "payload-hmac-sha256", "secret": "hook-secret-3c9a",
     "parameter": {"source": "header", "name": "X-Hub-Signature-256"}}}}
]"#;

/// A directory serving [`HOOKS`] with `server` settings.
fn hooks(name: &str, server: &str) -> TestDir {
    let dir = setup(
        name,
        &format!("hooks_files = [\"hooks.json\"]\n{server}"),
        &[],
    );
    for (file, text) in [("rec.sh", RECORDER), ("gate.sh", GATE)] {
        dir.write(file, text);
        let ok = std::process::Command::new("chmod")
            .args(["+x", &dir.path_str(file)])
            .status();
        assert!(ok.is_ok_and(|s| s.success()));
    }
    let root = dir.root.display().to_string();
    dir.write("hooks.json", &HOOKS.replace("@DIR@", &root));
    dir
}

/// `POST /hooks/<id>` with a JSON body and, when given, an
/// `Idempotency-Key`.
fn call(t: &Trigd, id: &str, key: Option<&str>, body: &str) -> Reply {
    let mut headers = vec![("Content-Type", "application/json")];
    if let Some(key) = key {
        headers.push(("Idempotency-Key", key));
    }
    t.request("POST", &format!("/hooks/{id}"), &headers, body.as_bytes())
}

/// The lines the recorder wrote: one per run.
fn runs(dir: &TestDir) -> Vec<String> {
    dir.lines("runs")
}

/// Fail unless the recorder wrote `want`, one line per run.
#[track_caller]
fn runs_are(t: &Trigd, dir: &TestDir, want: &[&str], what: &str) {
    let got = runs(dir);
    t.check(got == want, format!("{what}: runs {got:?}, want {want:?}"));
}

/// The run ids of the access-log lines of `POST /hooks/<id>`, in order,
/// once there are `n` of them: a line another thread's log write holds up
/// may come a moment after its answer.
fn logged_runs(t: &Trigd, id: &str, n: usize) -> Vec<String> {
    let needle = format!(" POST /hooks/{id} ");
    let mut ids = Vec::new();
    wait_until(WAIT, || {
        ids = t
            .stderr_tail()
            .lines()
            .filter(|l| l.contains(&needle))
            .filter_map(|l| l.split(" run=").nth(1))
            .map(|r| r.trim().to_string())
            .collect();
        ids.len() >= n
    });
    ids
}

#[test]
fn an_idempotency_key_on_a_hook_runs_once_and_a_repeat_gets_its_answer() {
    let dir = hooks("hooks_idempotency", "");
    let t = Trigd::start(&dir);
    // A sync hook (output in the answer): the repeat is the same answer,
    // marked, with the hook's response-headers; no second run.
    let first = call(&t, "out", Some("k-out"), r#"{"x":"a"}"#);
    first.status_is(200);
    first.check_eq(first.text(), "out: a \n".to_string(), "output");
    first.check_eq(first.header("Idempotent-Replayed"), None, "first answer");
    let again = call(&t, "out", Some("k-out"), r#"{"x":"a"}"#);
    again.status_is(200);
    again.check_eq(again.text(), first.text(), "the repeat's answer");
    again.check_eq(again.header("Idempotent-Replayed"), Some("true"), "marked");
    again.check_eq(again.header("X-Hook"), Some("yes"), "response-headers");
    again.check_eq(
        again.header("Content-Type"),
        first.header("Content-Type"),
        "Content-Type",
    );
    runs_are(&t, &dir, &["a "], "after the repeat");
    let ids = logged_runs(&t, "out", 2);
    t.check(
        ids.len() == 2 && ids[0] == ids[1],
        format!("both answers name one run: {ids:?}"),
    );
    // The same key with another request: refused in trigd's JSON.
    call(&t, "out", Some("k-out"), r#"{"x":"b"}"#).err(422, "idempotency_key_reused");
    // Another request, told apart by the environment it gives the run.
    call(&t, "env", Some("k-env"), r#"{"x":"1"}"#).status_is(200);
    call(&t, "env", Some("k-env"), r#"{"x":"2"}"#).err(422, "idempotency_key_reused");
    runs_are(&t, &dir, &["a ", " 1"], "after the refused repeats");
    // Without a key, every request runs, as in webhook.
    call(&t, "out", None, r#"{"x":"a"}"#).status_is(200);
    runs_are(&t, &dir, &["a ", " 1", "a "], "without a key");
    // A failed run with its output on error: the repeat answers it again.
    let failed = call(&t, "fail", Some("k-fail"), "{}");
    failed.status_is(500);
    failed.check_eq(failed.text(), "out: exit=3 \n".to_string(), "output");
    let again = call(&t, "fail", Some("k-fail"), "{}");
    again.status_is(500);
    again.check_eq(again.text(), failed.text(), "the repeat's answer");
    let four = ["a ", " 1", "a ", "exit=3 "];
    runs_are(&t, &dir, &four, "the failed run ran once");
    // An async hook: the repeat gets the response-message and status.
    let started = call(&t, "bg", Some("k-bg"), r#"{"x":"c"}"#);
    started.status_is(202);
    started.check_eq(started.text(), "started".to_string(), "message");
    t.wait_for(WAIT, "the async run", || runs(&dir).len() == 5);
    let again = call(&t, "bg", Some("k-bg"), r#"{"x":"c"}"#);
    again.status_is(202);
    again.check_eq(again.text(), "started".to_string(), "message");
    again.check_eq(again.header("Idempotent-Replayed"), Some("true"), "marked");
    let ids = logged_runs(&t, "bg", 2);
    t.check(
        ids.len() == 2 && ids[0] == ids[1],
        format!("both answers name one run: {ids:?}"),
    );
    // A key that cannot be one.
    let long = "k".repeat(256);
    let r = call(&t, "out", Some(&long), r#"{"x":"a"}"#);
    let v = r.err(400, "invalid_parameter");
    r.check_eq(
        v["Parameter"].as_str(),
        Some("Idempotency-Key"),
        "Parameter",
    );
    runs_are(&t, &dir, &[&four[..], &["c "]].concat(), "at the end");
}

#[test]
fn a_hook_is_refused_busy_or_storage_unavailable_like_every_run() {
    let dir = hooks(
        "hooks_limits",
        "max_concurrent_runs = 1\nmax_queued_runs = 0",
    );
    let t = Trigd::start(&dir);
    call(&t, "gate", None, "").status_is(200);
    t.wait_for(WAIT, "the gate to start", || dir.exists("started"));
    // No slot and no queue: a sync and an async hook are refused at once.
    for id in ["out", "bg"] {
        let r = call(&t, id, None, r#"{"x":"a"}"#);
        r.err(503, "busy");
        r.check(r.header("Retry-After").is_some(), "Retry-After");
    }
    dir.write("release", "");
    t.wait_for(WAIT, "a free slot", || {
        call(&t, "out", None, r#"{"x":"a"}"#).status == 200
    });
    // The state dir replaced by a file: an async run cannot be recorded
    // durably before its answer, so it is not started.
    fs::rename(dir.path("state"), dir.path("state.moved")).unwrap();
    dir.write("state", "not a directory");
    let r = call(&t, "bg", None, r#"{"x":"b"}"#);
    r.err(503, "storage_unavailable");
    r.check(r.header("Retry-After").is_some(), "Retry-After");
    fs::remove_file(dir.path("state")).unwrap();
    fs::rename(dir.path("state.moved"), dir.path("state")).unwrap();
    call(&t, "out", None, r#"{"x":"c"}"#).status_is(200);
    runs_are(&t, &dir, &["a ", "c "], "none for a refused request");
}

#[test]
fn a_hook_waiting_for_a_slot_at_shutdown_gets_shutting_down() {
    let dir = hooks(
        "hooks_shutdown",
        "max_concurrent_runs = 1\nshutdown_grace = \"1s\"",
    );
    let mut t = Trigd::start(&dir);
    call(&t, "gate", None, "").status_is(200);
    t.wait_for(WAIT, "the gate to start", || dir.exists("started"));
    let c = t.client();
    let waiting = thread::spawn(move || {
        let headers = [("Content-Type", "application/json")];
        c.request("POST", "/hooks/out", &headers, br#"{"x":"a"}"#)
    });
    t.wait_for(WAIT, "the hook's run to wait for a slot", || {
        t.get("/healthz").json()["RunsQueued"] == 1
    });
    t.sigterm();
    let r = waiting.join().expect("the waiting request");
    r.err(503, "shutting_down");
    t.wait_exit(WAIT)
        .unwrap_or_else(|| t.fail("trigd did not exit after SIGTERM"));
    runs_are(&t, &dir, &[], "the refused hook never ran");
}

/// A GitHub-style delivery to hook `id`: `body` signed with the `signed`
/// hook's secret, with delivery id `delivery`.
fn github(t: &Trigd, id: &str, delivery: &str, body: &str) -> Reply {
    use hmac::{Hmac, Mac};
    let mut m = <Hmac<sha2::Sha256> as hmac::KeyInit>::new_from_slice(b"hook-secret-3c9a").unwrap();
    m.update(body.as_bytes());
    let sig = format!("sha256={}", hex::encode(m.finalize().into_bytes()));
    let h = [
        ("Content-Type", "application/json"),
        ("X-GitHub-Delivery", delivery),
        ("X-Hub-Signature-256", sig.as_str()),
    ];
    t.request("POST", &format!("/hooks/{id}"), &h, body.as_bytes())
}

#[test]
fn a_signed_hooks_redelivery_runs_once_and_an_unsigned_one_as_webhook_does() {
    let dir = hooks("hooks_dedupe", "");
    let t = Trigd::start(&dir);
    let first = github(&t, "signed", "d-1", r#"{"x":"a"}"#);
    first.status_is(200);
    first.check(
        first.header("Idempotent-Replayed").is_none(),
        "a first delivery",
    );
    let again = github(&t, "signed", "d-1", r#"{"x":"a"}"#);
    again.status_is(200);
    again.check_eq(again.text(), first.text(), "the first answer again");
    again.check_eq(
        again.header("Idempotent-Replayed"),
        Some("true"),
        "replayed",
    );
    github(&t, "signed", "d-2", r#"{"x":"a"}"#).status_is(200);
    // A hook without a signature rule runs every delivery, as webhook.
    github(&t, "out", "d-1", r#"{"x":"b"}"#).status_is(200);
    github(&t, "out", "d-1", r#"{"x":"b"}"#).status_is(200);
    assert_eq!(
        runs(&dir),
        ["a ", "a ", "b ", "b "],
        "one run per delivery id"
    );
    // hooks_deduplicate = false: every delivery runs.
    let dir = hooks("hooks_dedupe_off", "hooks_deduplicate = false");
    let t = Trigd::start(&dir);
    github(&t, "signed", "d-1", r#"{"x":"c"}"#).status_is(200);
    github(&t, "signed", "d-1", r#"{"x":"c"}"#).status_is(200);
    assert_eq!(runs(&dir), ["c ", "c "]);
}

/// A hook's `response-headers` cannot frame the answer: its
/// `Content-Length` was sent as written before the whole body, so on a
/// kept-alive connection the rest of the body read as the next answer.
#[test]
fn a_hooks_framing_headers_are_the_servers_to_write() {
    let dir = hooks("hooks_framing", "");
    let root = dir.root.display().to_string();
    let file = r#"[{"id": "framed", "execute-command": "@DIR@/rec.sh", "response-message": "abcdef",
       "response-headers": [{"name": "Content-Length", "value": "3"},
         {"name": "Connection", "value": "close"}, {"name": "Transfer-Encoding", "value": "chunked"},
         {"name": "X-Hook", "value": "kept"}]}]"#;
    dir.write("hooks.json", &file.replace("@DIR@", &root));
    let t = Trigd::start(&dir);
    let mut s = connect(&t.addr);
    let two = "POST /hooks/framed HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n\
               GET /livez HTTP/1.1\r\nHost: x\r\n\r\n";
    std::io::Write::write_all(&mut s, two.as_bytes()).expect("send");
    let mut r = std::io::BufReader::new(s);
    let first = read_reply(&mut r).unwrap_or_else(|e| panic!("first answer: {e}"));
    first.status_is(200);
    first.check_eq(first.text(), "abcdef".to_string(), "the whole body");
    first.check_eq(first.header("X-Hook"), Some("kept"), "other headers stay");
    let second = read_reply(&mut r).unwrap_or_else(|e| panic!("second answer: {e}"));
    second.status_is(200);
}

/// A hooks file holding only white space, a comment or `null` is not
/// swapped in on a reload, as an empty one is not: it would drop every
/// hook of the file (a file with none says `[]`).
#[test]
fn a_blank_hooks_file_is_not_swapped_in() {
    let dir = hooks("hooks_blank", "");
    let t = Trigd::start(&dir);
    call(&t, "out", None, r#"{"x": "a"}"#).status_is(200);
    for (n, blank) in ["\n \n", "# nothing here\n", "null\n", "\u{feff}\n"]
        .iter()
        .enumerate()
    {
        dir.write("hooks.json", blank);
        t.wait_for(WAIT, &format!("blank file {n} refused"), || {
            t.stderr_tail()
                .matches("hooks.json: the file is empty, or holds only white space")
                .count()
                > n
        });
        call(&t, "out", None, r#"{"x": "b"}"#).status_is(200);
    }
    // `[]` is a file with no hooks.
    dir.write("hooks.json", "[]");
    t.wait_for(WAIT, "[] swapped in", || {
        call(&t, "out", None, "{}").status == 404
    });
}

/// On a dual-stack listener (`[::]`) an IPv4 client is `::ffff:127.0.0.1`:
/// `ip-whitelist` matches it against an IPv4 range and against the same
/// range written IPv4-mapped (`::ffff:127.0.0.0/104`, which webhook reads
/// as `127.0.0.0/8`), and `remote-addr` is `127.0.0.1:PORT`, as webhook
/// prints it.
#[test]
fn ipv4_mapped_clients_and_ranges_are_ipv4() {
    let dir = hooks("hooks_mapped", "");
    let root = dir.root.display().to_string();
    let file = r#"[{"id": "ip", "execute-command": "@DIR@/rec.sh", "include-command-output-in-response": true,
       "pass-arguments-to-command": [{"source": "request", "name": "remote-addr"}],
       "trigger-rule": {"and": [
         {"match": {"type": "ip-whitelist", "ip-range": "127.0.0.0/8"}},
         {"match": {"type": "ip-whitelist", "ip-range": "10.0.0.0/8 ::ffff:127.0.0.0/104"}}]}}]"#;
    dir.write("hooks.json", &file.replace("@DIR@", &root));
    let mut t = Trigd::start_listen(&dir, "[::]:0");
    let port = t.addr.rsplit(':').next().unwrap_or_default().to_string();
    t.addr = format!("127.0.0.1:{port}");
    let r = call(&t, "ip", None, "{}");
    r.status_is(200);
    let text = r.text();
    let (ip, client_port) = text
        .trim()
        .strip_prefix("out: ")
        .and_then(|a| a.trim().rsplit_once(':'))
        .unwrap_or_else(|| r.fail(format!("remote-addr in {text:?}")));
    r.check_eq(
        ip,
        "127.0.0.1",
        "remote-addr's address, as webhook prints it",
    );
    r.check(client_port.parse::<u16>().is_ok(), "remote-addr's port");
}
