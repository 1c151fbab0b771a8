//! Concurrency groups (issue 35): `[functions.concurrency_group]` with each
//! policy on the real binary and real processes, the "three pushes while
//! one deploy runs" case, sync callers of superseded and skipped runs, a
//! key shared by two programs, `kill -9` with waiting group runs, load
//! errors, and limit 1 held across two instances on one PostgreSQL
//! database.

use serde_json::{json, Value};

use crate::util::*;

/// Program `id` with one function, [`function`]`(name, policy, key)`.
fn deploy(id: u64, name: &str, policy: &str, key: &str) -> String {
    format!(
        "id = {id}\nname = \"{name}\"\n{}",
        function(name, policy, key)
    )
}

/// Function `name`: records its value `v` in `work/started`, waits until
/// `work/release-<v>` exists, then records it in `work/ran` and answers
/// it. Its group key is `key` (e.g. `deploy-{branch}`), under `policy`.
fn function(name: &str, policy: &str, key: &str) -> String {
    format!(
        r#"
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

/// A full queue (`max_queued_runs`) still takes a run that replaces a
/// waiting one of its key: the queue does not grow. A run of another key
/// (no slot free either) finds it full and is answered 503 `busy`; it
/// starts once the queue has room.
#[test]
fn a_run_that_replaces_a_pending_one_is_taken_by_a_full_queue() {
    let prog = deploy(1, "deploy", "replace_pending", "deploy-{branch}");
    let (dir, t) = serve(
        "groups_replace_full",
        "max_queued_runs = 1\nmax_concurrent_runs = 1",
        &[("deploy.toml", &prog)],
    );
    let a = push(&t, 1, "main", "a");
    wait_started(&t, &dir, "a");
    let b = push(&t, 1, "main", "b");
    let c = push(&t, 1, "main", "c");
    let rb = wait_run_state(&t, &b, "superseded");
    t.check_eq(field(&rb, "SupersededBy"), &json!(c), "b superseded by c");
    let r = t.post(&push_path(1, "dev", "x", true));
    r.err(503, "busy");
    dir.write("work/release-a", "");
    wait_started(&t, &dir, "c");
    dir.write("work/release-c", "");
    wait_run_state(&t, &a, "finished");
    wait_run_state(&t, &c, "finished");
    let x = push(&t, 1, "dev", "x");
    dir.write("work/release-x", "");
    wait_run_state(&t, &x, "finished");
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
    // The group has room again once the run's slot is given back (a
    // moment after its end is recorded).
    t.wait_for(WAIT, "the slots to be free", || {
        t.get("/healthz").ok()["RunsInFlight"] == json!(0)
    });
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
    let mut waiting = runs_in(&t, "queued");
    waiting.sort();
    let mut want = vec![b.clone(), c.clone()];
    want.sort();
    t.check_eq(waiting, want, "b and c wait");
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
/// not its end (the crash came between the two writes; here the line of
/// its end is taken out of the run log): the restart takes the same
/// decision from the log (the newer one runs, the older one ends
/// superseded).
#[test]
fn a_restart_replays_a_replacement_the_log_does_not_show_yet() {
    let prog = deploy(1, "deploy", "replace_pending", "deploy-{branch}");
    let (dir, mut t) = serve("groups_replay", "", &[("deploy.toml", &prog)]);
    let a = push(&t, 1, "main", "a");
    wait_started(&t, &dir, "a");
    let b = push(&t, 1, "main", "b");
    let c = push(&t, 1, "main", "c");
    wait_run_state(&t, &b, "superseded");
    t.kill9();
    dir.write("work/release-a", "");
    let log = dir.read("state/runs.log");
    let end_of_b = format!("\"Run\":\"{b}\",\"State\":\"superseded\"");
    let kept: Vec<&str> = log.lines().filter(|l| !l.contains(&end_of_b)).collect();
    t.check_eq(kept.len() + 1, log.lines().count(), "one end line of b");
    dir.write("state/runs.log", &(kept.join("\n") + "\n"));
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
fn kill9_keeps_a_run_between_attempts_ahead_of_a_newer_run_of_its_key() {
    let prog = deploy(1, "deploy", "replace_pending", "deploy-{branch}").replace(
        r#"echo "$v" >> started; "#,
        r#"echo "$v" >> started; if [ -e "fail-$v" ]; then rm "fail-$v"; exit 1; fi; "#,
    ) + "[functions.retry]\nattempts = 2\nbackoff = \"6s\"\njitter = false\n";
    let (dir, mut t) = serve("groups_retry_kill9", "", &[("deploy.toml", &prog)]);
    dir.write("work/fail-a", "");
    let a = push(&t, 1, "main", "a");
    t.wait_for(WAIT, "a's first attempt to fail", || {
        run_record(&t, &a)["RetryAt"].is_string()
    });
    let b = push(&t, 1, "main", "b");
    t.check_eq(
        field(&run_record(&t, &b), "State"),
        &json!("queued"),
        "b waits",
    );
    t.kill9();
    t.restart();
    t.wait_for(WAIT, "a's second attempt", || {
        dir.lines("work/started") == ["a", "a"]
    });
    t.check_eq(
        field(&run_record(&t, &b), "State"),
        &json!("queued"),
        "b still waits",
    );
    dir.write("work/release-a", "");
    dir.write("work/release-b", "");
    wait_run_state(&t, &a, "finished");
    wait_run_state(&t, &b, "finished");
    t.check_eq(
        dir.lines("work/ran"),
        vec!["a".to_string(), "b".into()],
        "a, then b",
    );
}

/// A tool trigger's `concurrency_group` applies to runs through it, in
/// place of the function's (here: none): runs of the function through
/// `POST /api` are not in the group. Its decisions survive a `kill -9`
/// (the group is kept with the queued run, not looked up again).
#[test]
fn a_tool_triggers_group_applies_to_runs_through_it_also_after_kill9() {
    let plain = function("plain", "queue", "unused");
    let plain = plain.split("[functions.concurrency_group]").next().unwrap();
    let prog = format!("id = 1\nname = \"plain\"\n{plain}");
    let dir = setup("groups_trigger", "", &[("plain.toml", &prog)]);
    dir.append(
        "config.toml",
        r#"
[[tools]]
name = "ship"
workspace = "ops"
[tools.environments.open]
public = true
[[tools.triggers]]
kind = "endpoint"
name = "deploy"
program = 1
function = "plain"
[tools.triggers.concurrency_group]
key = "ship-{branch}"
policy = "replace_pending"
"#,
    );
    let mut t = Trigd::start(&dir);
    let ship = |t: &Trigd, v: &str| {
        let r = t.post(&format!(
            "/tools/ship/open/deploy?branch=main&v={v}&run_async=true"
        ));
        r.run_id(&r.ok())
    };
    let a = ship(&t, "a");
    wait_started(&t, &dir, "a");
    let b = ship(&t, "b");
    t.check_eq(
        field(&run_record(&t, &b), "Group"),
        &json!("ship-main"),
        "b's Group",
    );
    t.kill9();
    dir.write("work/release-a", "");
    t.restart();
    wait_run_state(&t, &a, "interrupted");
    wait_started(&t, &dir, "b");
    let c = ship(&t, "c");
    let d = ship(&t, "d");
    let rc = wait_run_state(&t, &c, "superseded");
    t.check_eq(field(&rc, "SupersededBy"), &json!(d), "c superseded by d");
    // The function through POST /api: no group, runs at once.
    let e = push(&t, 1, "main", "e");
    wait_started(&t, &dir, "e");
    for v in ["b", "d", "e"] {
        dir.write(&format!("work/release-{v}"), "");
    }
    for id in [&b, &d, &e] {
        wait_run_state(&t, id, "finished");
    }
    t.check(
        !dir.lines("work/started").contains(&"c".into()),
        "c never ran",
    );
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
    // A tool trigger's group, in config.toml.
    let prog = "id = 1\nname = \"d\"\n[[functions]]\nname = \"d\"\noutputs = [\"branch\"]\n\
                command = [\"true\"]\n";
    let dir = setup("groups_bad_trigger", "", &[("d.toml", prog)]);
    dir.append(
        "config.toml",
        "\n[[tools]]\nname = \"t\"\nworkspace = \"ops\"\n[tools.environments.e]\n\
         [[tools.triggers]]\nkind = \"endpoint\"\nname = \"x\"\nprogram = 1\n\
         function = \"d\"\n[tools.triggers.concurrency_group]\nkey = \"d-{nope}\"\n",
    );
    let out = crate::util::cli::trigd(&["check", "--config", &dir.path_str("config.toml")], None);
    out.code_is(1);
    let want = "tools[0].triggers[0].concurrency_group.key";
    out.check(
        out.stderr.contains("config.toml:") && out.stderr.contains(want),
        format!("a located error naming {want}"),
    );
}

/// Instance `name` of a two-instance test on `db`, running `prog` (whose
/// work directory is `work`, shared by both).
fn pg_instance(db: &PgDb, test: &str, name: &str, prog: &str) -> (TestDir, Trigd) {
    let server = format!("instance = {name:?}\nmax_concurrent_runs = 4");
    let dir = setup(&format!("{test}_{name}"), &server, &[("deploy.toml", prog)]);
    db.configure(&dir, "lease = \"2s\"");
    let t = Trigd::start(&dir);
    (dir, t)
}

/// Two instances on one PostgreSQL database: `limit = 1` holds across
/// them (a run of a key waits while the key's run executes on the other
/// instance; another key runs meanwhile), in order; `replace_pending`
/// supersedes a run waiting in the cluster queue from either instance.
#[test]
fn two_instances_on_one_database_hold_limit_1_across_instances() {
    let db = pg_database("groups_pg");
    let work = TestDir::new("groups_pg_work");
    let abs = work.path_str("");
    let prog = deploy(1, "deploy", "queue", "deploy-{branch}")
        + &function("latest", "replace_pending", "latest-{branch}");
    let prog = prog.replace("../work", &abs);
    let (_da, a) = pg_instance(&db, "groups_pg", "a", &prog);
    let (_db, b) = pg_instance(&db, "groups_pg", "b", &prog);
    let started = || work.lines("started");
    // On a timeout: both instances' logs, what started, where the runs are.
    let wait_started = |v: &str| {
        if !wait_until(WAIT, || started().iter().any(|l| l == v)) {
            panic!(
                "\ntimed out after {WAIT:?} waiting for: run {v} to start; started: {:?}; \
                 runs: {}\n--- a: stderr.log (tail) ---\n{}\n--- b: stderr.log (tail) ---\n{}\n",
                started(),
                db.runs_by_state(),
                a.stderr_tail(),
                b.stderr_tail()
            );
        }
    };
    let r1 = push_fn(&a, "deploy", "main", "1");
    wait_started("1");
    let r2 = push_fn(&b, "deploy", "main", "2");
    let r3 = push_fn(&a, "deploy", "main", "3");
    let x = push_fn(&b, "deploy", "dev", "x");
    // x was accepted after 2 and 3 and runs: they wait for their key.
    wait_started("x");
    a.check_eq(started(), vec!["1".to_string(), "x".into()], "2 and 3 wait");
    for id in [&r2, &r3] {
        b.check_eq(field(&run_record(&b, id), "State"), &json!("queued"), id);
    }
    let holding = "SELECT count(*) FROM trigd_runs WHERE group_key = 'deploy-main' \
                   AND state IN ('queued', 'running') AND instance IS NOT NULL";
    a.check_eq(
        db.count(holding),
        1,
        "one run of the key held in the cluster",
    );
    work.write("release-1", "");
    wait_started("2");
    a.check_eq(started().len(), 3, "3 still waits");
    work.write("release-2", "");
    wait_started("3");
    for v in ["3", "x"] {
        work.write(&format!("release-{v}"), "");
    }
    for id in [&r1, &r2, &r3, &x] {
        wait_run_state(&a, id, "finished");
    }
    let main: Vec<String> = started().into_iter().filter(|v| v != "x").collect();
    a.check_eq(
        main,
        vec!["1".into(), "2".into(), "3".into()],
        "in order, one at a time",
    );

    // replace_pending in the cluster queue, from either instance: 5
    // waits behind 4, 6 (through the other instance) replaces it, 7
    // replaces 6; once 4 ends only 7 runs.
    let r4 = latest(&a, "4");
    wait_started("4");
    let r5 = latest(&a, "5");
    let r6 = latest(&b, "6");
    let r7 = latest(&a, "7");
    let rec = wait_run_state(&a, &r5, "superseded");
    a.check_eq(field(&rec, "SupersededBy"), &json!(r6), "5 superseded by 6");
    let rec = wait_run_state(&b, &r6, "superseded");
    b.check_eq(field(&rec, "SupersededBy"), &json!(r7), "6 superseded by 7");
    work.write("release-4", "");
    wait_started("7");
    work.write("release-7", "");
    wait_run_state(&a, &r4, "finished");
    wait_run_state(&b, &r7, "finished");
    let all = started();
    a.check(
        !all.iter().any(|v| v == "5" || v == "6"),
        "5 and 6 never ran",
    );
}

/// An async run of function `function` of program 1 with `branch` and
/// `v`, through `t`: its id.
fn push_fn(t: &Trigd, function: &str, branch: &str, v: &str) -> String {
    let r = t.post(&format!(
        "/api?api_key={KEY}&program_id=1&function={function}{}&run_async=true",
        vars(&[branch, v])
    ));
    r.run_id(&r.ok())
}

fn latest(t: &Trigd, v: &str) -> String {
    push_fn(t, "latest", "main", v)
}

/// Two instances on one database: `cancel_running` cancels the key's run
/// executing on the other instance (it ends `cancelled`, naming the new
/// run) and the new one runs; `skip` skips a run whose key runs on the
/// other instance.
#[test]
fn two_instances_cancel_running_and_skip_across_instances() {
    let db = pg_database("groups_pg_cancel");
    let work = TestDir::new("groups_pg_cancel_work");
    let abs = work.path_str("");
    let prog = deploy(1, "deploy", "cancel_running", "deploy-{branch}")
        + &function("once", "skip", "once-{branch}");
    let prog = prog.replace("../work", &abs);
    let (_da, a) = pg_instance(&db, "groups_pg_cancel", "a", &prog);
    let (_db, b) = pg_instance(&db, "groups_pg_cancel", "b", &prog);
    let started = || work.lines("started");
    let wait_started = |t: &Trigd, v: &str| {
        t.wait_for(WAIT, &format!("run {v} to start"), || {
            started().iter().any(|l| l == v)
        })
    };
    let first = push_fn(&a, "deploy", "main", "1");
    wait_started(&a, "1");
    let runs_on = db.psql(&format!(
        "SELECT instance FROM trigd_runs WHERE id = '{first}'"
    ));
    // Through the instance that does not run it.
    let other = if runs_on == "a" { &b } else { &a };
    let second = push_fn(other, "deploy", "main", "2");
    let rec = wait_run_state(&a, &first, "cancelled");
    a.check_eq(field(&rec, "SupersededBy"), &json!(second), "1 names 2");
    wait_started(&a, "2");
    work.write("release-2", "");
    wait_run_state(&a, &second, "finished");

    let once = push_fn(&a, "once", "main", "o1");
    wait_started(&a, "o1");
    let skipped = push_fn(&b, "once", "main", "o2");
    let rec = wait_run_state(&b, &skipped, "skipped");
    b.check_eq(field(&rec, "Skipped"), &json!("group"), "Skipped");
    work.write("release-o1", "");
    wait_run_state(&a, &once, "finished");
    a.check(!started().iter().any(|v| v == "o2"), "o2 never ran");
}

/// Instance "a", alone on a database of its own named after `test`, with
/// `max_runs` slots and the `deploy` program of queued key
/// `deploy-{branch}`.
fn lone_pg_instance(test: &str, max_runs: usize) -> (PgDb, TestDir, Trigd) {
    let db = pg_database(test);
    let prog = deploy(1, "deploy", "queue", "deploy-{branch}");
    let server = format!("instance = \"a\"\nmax_concurrent_runs = {max_runs}");
    let dir = setup(test, &server, &[("deploy.toml", &prog)]);
    db.configure(&dir, "lease = \"2s\"");
    let t = Trigd::start(&dir);
    (db, dir, t)
}

/// The runs a free room takes from the cluster queue in one transaction
/// keep their keys' limits: four runs of two keys (`limit = 1`) wait
/// behind the one slot of the instance, which a reload makes seven; one
/// run of each key starts, the next of a key only once the one before it
/// ended (a run of a second key ends a take's transaction, which holds
/// one key's lock at most).
#[test]
fn a_batched_take_keeps_each_keys_limit() {
    let (_db, dir, t) = lone_pg_instance("groups_pg_batch", 1);
    let started = |v: &str| dir.lines("work/started").iter().any(|l| l == v);
    let hold = push(&t, 1, "hold", "h");
    wait_started(&t, &dir, "h");
    let runs = [
        push(&t, 1, "main", "1"),
        push(&t, 1, "main", "2"),
        push(&t, 1, "dev", "x"),
        push(&t, 1, "dev", "y"),
    ];
    let config = std::fs::read_to_string(dir.path("config.toml")).expect("config.toml");
    dir.write(
        "config.toml",
        &config.replace("max_concurrent_runs = 1", "max_concurrent_runs = 7"),
    );
    wait_started(&t, &dir, "1");
    wait_started(&t, &dir, "x");
    // Taken in queue order: 2 before x, y before 2 once 1 has ended.
    t.check(!started("2"), "run 2 waits while run 1 of its key runs");
    dir.write("work/release-1", "");
    wait_started(&t, &dir, "2");
    t.check(!started("y"), "run y waits while run x of its key runs");
    for v in ["x", "2", "y", "h"] {
        dir.write(&format!("work/release-{v}"), "");
    }
    for id in runs.iter().chain([&hold]) {
        wait_run_state(&t, id, "finished");
    }
}

/// A take does not pass an older run of its key that another instance's
/// take holds (row-locked until that take's COMMIT, which `FOR UPDATE
/// SKIP LOCKED` skips): with `limit = 1` the younger one would run first
/// and the older wait for it. Here a `psql` session holds run 2's row as
/// such a take does; once run 1 has ended, run 3 is not taken, a run of
/// another key accepted after 3 is (the take goes in queue order: 3 was
/// looked at before it), and once the lock goes 2 runs, then 3.
#[test]
fn a_take_does_not_pass_an_older_run_of_its_key_that_another_take_holds() {
    let (db, dir, t) = lone_pg_instance("groups_pg_order", 4);
    let started = |v: &str| dir.lines("work/started").iter().any(|l| l == v);
    let r1 = push(&t, 1, "main", "1");
    wait_started(&t, &dir, "1");
    let r2 = push(&t, 1, "main", "2");
    let r3 = push(&t, 1, "main", "3");
    let held = db.hold(&format!(
        "SELECT 1 FROM trigd_runs WHERE id = '{r2}' FOR UPDATE"
    ));
    dir.write("work/release-1", "");
    let ended = format!("SELECT count(*) FROM trigd_runs WHERE id = '{r1}' AND state = 'finished'");
    t.wait_for(WAIT, "run 1's end in the database", || {
        db.count(&ended) == 1
    });
    let x = push(&t, 1, "dev", "x");
    wait_started(&t, &dir, "x");
    let taken =
        format!("SELECT count(*) FROM trigd_runs WHERE id = '{r3}' AND instance IS NOT NULL");
    t.check_eq(db.count(&taken), 0, "run 3 is not taken past run 2");
    held.release();
    wait_started(&t, &dir, "2");
    t.check(!started("3"), "run 3 waits while run 2 of its key runs");
    for v in ["2", "3", "x"] {
        dir.write(&format!("work/release-{v}"), "");
    }
    for id in [&r1, &r2, &r3, &x] {
        wait_run_state(&t, id, "finished");
    }
    let order: Vec<String> = dir.lines("work/started");
    t.check_eq(
        order,
        vec!["1".to_string(), "x".into(), "2".into(), "3".into()],
        "order",
    );
}
