//! Concurrency groups (issue 35): `[functions.concurrency_group]` with each
//! policy on the real binary and real processes, the "three pushes while
//! one deploy runs" case, sync callers of superseded and skipped runs, a
//! key shared by two programs, `kill -9` with waiting group runs, load
//! errors, and limit 1 held across two instances on one PostgreSQL
//! database.

use serde_json::{json, Value};

use crate::util::*;

/// Program `id`'s function `name`: records its value `v` in
/// `work/started`, waits until `work/release-<v>` exists, then records it
/// in `work/ran` and answers it. Its group key is `deploy-{branch}`
/// (`key` replaces it) with `policy`.
fn deploy(id: u64, name: &str, policy: &str, key: &str) -> String {
    format!(
        r#"
id = {id}
name = "{name}"
[[functions]]
name = "{name}"
workdir = "../work"
timeout = "60s"
outputs = ["branch", "v"]
steps = [{{ shell = 'echo "$v" >> started; while [ ! -e "release-$v" ] && [ -e "$PWD" ]; do sleep 0.02; done; echo "$v" >> ran; printf "%s" "$v"' }}]
[functions.webhook]
[functions.concurrency_group]
key = "{key}"
limit = 1
policy = "{policy}"
"#
    )
}

/// A server with program 1 `deploy` under `policy`.
fn start(name: &str, policy: &str) -> (TestDir, Trigd) {
    let prog = deploy(1, "deploy", policy, "deploy-{branch}");
    serve(name, "", &[("deploy.toml", &prog)])
}

/// `POST /api` of program `p` with `branch` and `v`, async: the run id.
fn push(t: &Trigd, p: u64, branch: &str, v: &str) -> String {
    let r = t.post(&push_path(p, branch, v, true));
    r.run_id(&r.ok())
}

fn push_path(p: u64, branch: &str, v: &str, run_async: bool) -> String {
    format!(
        "/api?api_key={KEY}&program_id={p}{}&run_async={run_async}",
        vars(&[branch, v])
    )
}

/// Wait until the value `v` is in `work/started`.
fn wait_started(t: &Trigd, dir: &TestDir, v: &str) {
    t.wait_for(WAIT, &format!("run {v} to start"), || {
        dir.lines("work/started").iter().any(|l| l == v)
    });
}

/// Ids of the runs in `state` (the run list, newest first).
fn runs_in(t: &Trigd, state: &str) -> Vec<String> {
    let v = t
        .get(&format!("/api/runs?api_key={KEY}&state={state}"))
        .ok();
    v["Runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["Run"].as_str().unwrap().to_string())
        .collect()
}

#[track_caller]
fn field<'a>(v: &'a Value, name: &str) -> &'a Value {
    &v[name]
}

/// The issue's case: three pushes to one branch while its deploy runs;
/// afterwards only the latest runs. The replaced ones end `superseded`,
/// each naming the run that replaced it; another branch is not held up.
#[test]
fn three_pushes_while_one_deploy_runs_only_the_latest_runs_afterwards() {
    let (dir, t) = start("groups_replace", "replace_pending");
    let a = push(&t, 1, "main", "a");
    wait_started(&t, &dir, "a");
    let b = push(&t, 1, "main", "b");
    let c = push(&t, 1, "main", "c");
    let d = push(&t, 1, "main", "d");
    let other = push(&t, 1, "dev", "x");
    wait_started(&t, &dir, "x");
    let rb = wait_run_state(&t, &b, "superseded");
    t.check_eq(field(&rb, "SupersededBy"), &json!(c), "b superseded by c");
    t.check_eq(field(&rb, "Group"), &json!("deploy-main"), "b's Group");
    let rc = wait_run_state(&t, &c, "superseded");
    t.check_eq(field(&rc, "SupersededBy"), &json!(d), "c superseded by d");
    t.check_eq(
        field(&run_record(&t, &d), "State"),
        &json!("queued"),
        "d waits",
    );
    dir.write("work/release-a", "");
    dir.write("work/release-x", "");
    wait_run_state(&t, &a, "finished");
    wait_run_state(&t, &other, "finished");
    wait_started(&t, &dir, "d");
    dir.write("work/release-d", "");
    let rd = wait_run_state(&t, &d, "finished");
    t.check_eq(field(&rd, "Result"), &json!(["d"]), "d's Result");
    let mut ran = dir.lines("work/ran");
    ran.sort();
    t.check_eq(ran, vec!["a".into(), "d".into(), "x".into()], "what ran");
}

/// A superseded run's page shows its group and links the run that
/// replaced it.
#[test]
fn the_run_page_shows_the_group_and_links_the_superseding_run() {
    let dir = crate::runs_pages::setup_dir("groups_page", "");
    let prog = deploy(4, "deploy", "replace_pending", "deploy-{branch}");
    dir.write(
        "programs/deploy.toml",
        &format!("workspace = \"ops\"\n{prog}"),
    );
    let t = Trigd::start(&dir);
    let a = push(&t, 4, "main", "a");
    wait_started(&t, &dir, "a");
    let b = push(&t, 4, "main", "b");
    let c = push(&t, 4, "main", "c");
    wait_run_state(&t, &b, "superseded");
    let alice = crate::ui::login(&t, "alice");
    let r = crate::runs_pages::page(&t, &format!("/runs/{b}"), &alice);
    let html = r.text();
    r.check(
        html.contains("<code>deploy-main</code>"),
        "the group on the page",
    );
    r.check(
        html.contains(&format!("href=\"/runs/{c}\"")),
        "the link to c",
    );
    for v in ["a", "c"] {
        dir.write(&format!("work/release-{v}"), "");
    }
    wait_run_state(&t, &a, "finished");
    wait_run_state(&t, &c, "finished");
}

/// A sync caller whose waiting run a newer one replaces is answered 409
/// `run_superseded`, naming the newer run.
#[test]
fn a_sync_caller_of_a_superseded_run_gets_run_superseded() {
    let (dir, t) = start("groups_sync_superseded", "replace_pending");
    let a = push(&t, 1, "main", "a");
    wait_started(&t, &dir, "a");
    let c = t.client();
    let path = push_path(1, "main", "s", false);
    let sync = std::thread::spawn(move || c.post(&path));
    t.wait_for(WAIT, "the sync run to wait", || {
        runs_in(&t, "queued").len() == 1
    });
    let s = runs_in(&t, "queued").remove(0);
    let newer = push(&t, 1, "main", "n");
    let r = sync.join().expect("sync client");
    let v = r.err(409, "run_superseded");
    r.check_eq(&v["Run"], &json!(s), "Run");
    r.check_eq(&v["SupersededBy"], &json!(newer), "SupersededBy");
    let rec = wait_run_state(&t, &s, "superseded");
    t.check_eq(field(&rec, "SupersededBy"), &json!(newer), "the record");
    dir.write("work/release-a", "");
    dir.write("work/release-n", "");
    wait_run_state(&t, &a, "finished");
    wait_run_state(&t, &newer, "finished");
    t.check(
        !dir.lines("work/started").contains(&"s".into()),
        "s never ran",
    );
}

/// `skip`: a run whose group is at its limit ends `skipped` (async: in its
/// record; sync: 409 `run_skipped`); another key runs.
#[test]
fn skip_ends_the_new_run_skipped_and_answers_sync_callers_run_skipped() {
    let (dir, t) = start("groups_skip", "skip");
    let a = push(&t, 1, "main", "a");
    wait_started(&t, &dir, "a");
    let b = push(&t, 1, "main", "b");
    let rb = wait_run_state(&t, &b, "skipped");
    t.check_eq(field(&rb, "Skipped"), &json!("group"), "Skipped");
    t.check_eq(field(&rb, "Group"), &json!("deploy-main"), "Group");
    let r = t.post(&push_path(1, "main", "s", false));
    let v = r.err(409, "run_skipped");
    r.check_eq(&v["Group"], &json!("deploy-main"), "Group");
    let s = v["Run"].as_str().unwrap().to_string();
    wait_run_state(&t, &s, "skipped");
    let other = push(&t, 1, "dev", "x");
    wait_started(&t, &dir, "x");
    dir.write("work/release-a", "");
    dir.write("work/release-x", "");
    wait_run_state(&t, &a, "finished");
    wait_run_state(&t, &other, "finished");
    // The group has room again.
    let later = push(&t, 1, "main", "l");
    wait_started(&t, &dir, "l");
    dir.write("work/release-l", "");
    wait_run_state(&t, &later, "finished");
    let started = dir.lines("work/started");
    t.check(
        !started.iter().any(|v| v == "b" || v == "s"),
        "b and s never ran",
    );
}

/// `cancel_running`: the running run is cancelled (it ends `cancelled`,
/// naming the run that superseded it; its process is stopped) and the new
/// one starts.
#[test]
fn cancel_running_stops_the_running_run_and_starts_the_new_one() {
    let (dir, t) = start("groups_cancel_running", "cancel_running");
    let a = push(&t, 1, "main", "a");
    wait_started(&t, &dir, "a");
    let b = push(&t, 1, "main", "b");
    let ra = wait_run_state(&t, &a, "cancelled");
    t.check_eq(field(&ra, "SupersededBy"), &json!(b), "a's SupersededBy");
    wait_started(&t, &dir, "b");
    dir.write("work/release-b", "");
    wait_run_state(&t, &b, "finished");
    t.check_eq(
        dir.lines("work/ran"),
        vec!["b".to_string()],
        "only b ran to its end",
    );
}

/// `queue` (the default): runs of one key run one at a time in their
/// order; a sync caller waits its turn.
#[test]
fn queue_runs_a_key_one_at_a_time_in_order() {
    let (dir, t) = start("groups_queue", "queue");
    let a = push(&t, 1, "main", "a");
    wait_started(&t, &dir, "a");
    let b = push(&t, 1, "main", "b");
    let c = push(&t, 1, "main", "c");
    t.check_eq(
        runs_in(&t, "queued"),
        vec![c.clone(), b.clone()],
        "b and c wait",
    );
    let client = t.client();
    let path = push_path(1, "main", "s", false);
    let sync = std::thread::spawn(move || client.post(&path));
    t.wait_for(WAIT, "the sync run to wait", || {
        runs_in(&t, "queued").len() == 3
    });
    dir.write("work/release-a", "");
    wait_started(&t, &dir, "b");
    t.check_eq(dir.lines("work/started").len(), 2, "c still waits");
    for v in ["b", "c", "s"] {
        dir.write(&format!("work/release-{v}"), "");
    }
    let r = sync.join().expect("sync client");
    r.check_eq(&r.ok()["Result"], &json!(["s"]), "the sync run's Result");
    wait_run_state(&t, &a, "finished");
    wait_run_state(&t, &c, "finished");
    let want: Vec<String> = ["a", "b", "c", "s"].map(String::from).to_vec();
    t.check_eq(dir.lines("work/ran"), want, "in order");
}

/// One key string is one group, whichever program's function renders it.
#[test]
fn two_functions_of_different_programs_share_a_key() {
    let p1 = deploy(1, "deploy", "queue", "site-{branch}");
    let p2 = deploy(2, "publish", "queue", "site-{branch}");
    let (dir, t) = serve("groups_shared", "", &[("p1.toml", &p1), ("p2.toml", &p2)]);
    let a = push(&t, 1, "main", "a");
    wait_started(&t, &dir, "a");
    let b = push(&t, 2, "main", "b");
    let x = push(&t, 2, "dev", "x");
    wait_started(&t, &dir, "x");
    t.check_eq(
        field(&run_record(&t, &b), "State"),
        &json!("queued"),
        "b waits for a",
    );
    t.check_eq(
        field(&run_record(&t, &b), "Group"),
        &json!("site-main"),
        "b's Group",
    );
    dir.write("work/release-a", "");
    wait_started(&t, &dir, "b");
    for v in ["b", "x"] {
        dir.write(&format!("work/release-{v}"), "");
    }
    wait_run_state(&t, &a, "finished");
    wait_run_state(&t, &b, "finished");
    wait_run_state(&t, &x, "finished");
}

/// `kill -9` with runs of a group waiting: after the restart the one that
/// replaced the others runs once, the superseded ones never, and the group
/// is rebuilt from the recovered queue (a new push waits for, then
/// replaces, as before).
#[test]
fn kill9_with_waiting_group_runs_keeps_the_decisions() {
    let prog = deploy(1, "deploy", "replace_pending", "deploy-{branch}");
    let (dir, mut t) = serve("groups_kill9", "", &[("deploy.toml", &prog)]);
    let a = push(&t, 1, "main", "a");
    wait_started(&t, &dir, "a");
    let b = push(&t, 1, "main", "b");
    let c = push(&t, 1, "main", "c");
    wait_run_state(&t, &b, "superseded");
    t.kill9();
    // The orphaned run a ends on its own.
    dir.write("work/release-a", "");
    t.restart();
    wait_run_state(&t, &a, "interrupted");
    wait_started(&t, &dir, "c");
    t.check_eq(
        field(&run_record(&t, &b), "State"),
        &json!("superseded"),
        "b",
    );
    let d = push(&t, 1, "main", "d");
    t.check_eq(
        field(&run_record(&t, &d), "State"),
        &json!("queued"),
        "d waits for c",
    );
    let e = push(&t, 1, "main", "e");
    let rd = wait_run_state(&t, &d, "superseded");
    t.check_eq(field(&rd, "SupersededBy"), &json!(e), "d superseded by e");
    dir.write("work/release-c", "");
    dir.write("work/release-e", "");
    wait_run_state(&t, &c, "finished");
    wait_run_state(&t, &e, "finished");
    let started = dir.lines("work/started");
    let want: Vec<String> = ["a", "c", "e"].map(String::from).to_vec();
    t.check_eq(started, want, "each once; b and d never");
}

/// A run superseded just before a `kill -9`, its replacement recorded but
/// not its end: the restart takes the same decision from the runs log
/// (the newer one runs, the older one ends superseded).
#[test]
fn a_restart_replays_a_replacement_the_log_does_not_show_yet() {
    let prog = deploy(1, "deploy", "queue", "deploy-{branch}");
    let (dir, mut t) = serve("groups_replay", "", &[("deploy.toml", &prog)]);
    let a = push(&t, 1, "main", "a");
    wait_started(&t, &dir, "a");
    // Under `queue` both wait; the restart finds them queued, as after a
    // kill -9 between the two writes of a replacement.
    let b = push(&t, 1, "main", "b");
    let c = push(&t, 1, "main", "c");
    t.kill9();
    dir.write("work/release-a", "");
    dir.write(
        "programs/deploy.toml",
        &deploy(1, "deploy", "replace_pending", "deploy-{branch}"),
    );
    t.restart();
    wait_run_state(&t, &a, "interrupted");
    let rb = wait_run_state(&t, &b, "superseded");
    t.check_eq(field(&rb, "SupersededBy"), &json!(c), "b superseded by c");
    dir.write("work/release-c", "");
    wait_run_state(&t, &c, "finished");
    let started = dir.lines("work/started");
    t.check_eq(started, vec!["a".to_string(), "c".into()], "b never ran");
}

#[test]
fn bad_group_settings_are_located_load_errors() {
    for (group, want) in [
        (
            "key = \"d-{branch}\"\npolicy = \"latest\"",
            "concurrency_group.policy",
        ),
        ("key = \"d-{branch}\"\nlimit = 0", "concurrency_group.limit"),
        ("key = \"d-{nope}\"", "concurrency_group.key"),
        ("key = \"\"", "concurrency_group.key"),
        ("limit = 1", "key"),
        ("key = \"d\"\nlimits = 2", "limits"),
    ] {
        let prog = format!(
            "id = 1\nname = \"d\"\n[[functions]]\nname = \"d\"\noutputs = [\"branch\"]\n\
             command = [\"true\"]\n[functions.concurrency_group]\n{group}\n"
        );
        let dir = setup("groups_bad", "", &[("d.toml", &prog)]);
        let out =
            crate::util::cli::trigd(&["check", "--config", &dir.path_str("config.toml")], None);
        out.code_is(1);
        out.check(
            out.stderr.contains("d.toml:") && out.stderr.contains(want),
            format!("{group}: a located error naming {want}"),
        );
    }
}
