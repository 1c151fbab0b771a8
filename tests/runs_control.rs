//! Runs under control (issue 35): the run list API `GET /api/runs` (filters,
//! cursor, scope, hostile queries), re-runs, callback redeliveries and
//! retries, on the real binary.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::runs_pages::{run, setup_dir};
use crate::ui::{cookie, login};
use crate::util::*;

/// The runs pages' server ([`setup_dir`]) plus the key [`KEY_P2`]
/// (program 2 only) and `extra` in `[server]`.
fn start(name: &str, extra: &str) -> (TestDir, Trigd) {
    let dir = setup(name, extra);
    let t = Trigd::start(&dir);
    (dir, t)
}

/// [`start`] without starting.
fn setup(name: &str, extra: &str) -> TestDir {
    let dir = setup_dir(name, extra);
    let mut cfg = std::fs::read_to_string(dir.path("config.toml")).unwrap();
    cfg.push_str(&format!(
        "\n[[api_keys]]\nname = \"program-2\"\nsha256 = \"{}\"\nprograms = [2]\n",
        sha256_hex(KEY_P2)
    ));
    dir.write("config.toml", &cfg);
    dir
}

/// `GET /api/runs?<query>` with `key`: the answer, asserted 200.
#[track_caller]
fn list(t: &Trigd, key: &str, query: &str) -> Value {
    t.get(&format!("/api/runs?api_key={key}&{query}")).ok()
}

fn ids(v: &Value) -> Vec<String> {
    v["Runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["Run"].as_str().unwrap().to_string())
        .collect()
}

/// [`start`] with `[state] url`: the run records in a fresh PostgreSQL
/// database (kept alive by the returned [`PgDb`]).
fn start_pg(name: &str) -> (TestDir, Trigd, PgDb) {
    let db = pg_database(name);
    let dir = setup(name, "");
    db.configure(&dir, "");
    let t = Trigd::start(&dir);
    (dir, t, db)
}

#[test]
fn the_run_list_filters_newest_first_and_scopes_by_credential() {
    let (_dir, t) = start("list_filters", "");
    check_filters(&t);
}

#[test]
fn the_run_list_cursor_is_stable_while_runs_arrive() {
    let (_dir, t) = start("list_cursor", "");
    check_cursor(&t);
}

/// The same filters, scopes and cursor with the run records in
/// PostgreSQL (`DbRuns::page`), each on a fresh database.
#[test]
fn the_run_list_filters_and_cursor_work_the_same_with_postgresql() {
    let (_dir, t, _db) = start_pg("list_filters_pg");
    check_filters(&t);
    drop(t);
    let (_dir, t, _db) = start_pg("list_cursor_pg");
    check_cursor(&t);
}

/// With the database down the list answers 503 `state_unavailable` (with
/// `Retry-After`), never an empty page; it answers again once it is back,
/// with the run whose unflushed commits the stop lost written again.
#[test]
fn the_run_list_with_the_database_down_is_503_state_unavailable() {
    let pg = Pg::start("list_down");
    let db = pg.database("list_down");
    let dir = setup("list_down", "");
    db.configure(&dir, "");
    let t = Trigd::start(&dir);
    let id = run(&t, 2, "noisy", "");
    pg.stop(true);
    let r = t.get(&format!("/api/runs?api_key={KEY}"));
    r.err(503, "state_unavailable");
    r.check(r.header("retry-after").is_some(), "Retry-After");
    pg.start_again();
    // The run's commits were not flushed (docs/cluster.md): an immediate
    // stop may lose them, and its instance writes them again at its first
    // lease tick after the server is back. Until then the list may answer
    // 200 without it.
    t.wait_for(WAIT, "the list answers again, with the run", || {
        let r = t.get(&format!("/api/runs?api_key={KEY}"));
        r.status == 200 && ids(&r.json()) == vec![id.clone()]
    });
}

/// Runs of several programs, functions, tools and origins, listed
/// with each filter, `since`/`until` and each credential's scope.
fn check_filters(t: &Trigd) {
    let noisy: Vec<String> = (0..3).map(|_| run(t, 2, "noisy", "")).collect();
    let dev = run(t, 3, "hello", "");
    let r = t.get("/tools/inventory/staging/list");
    let tool = r.run_id(&r.ok());

    let all = list(t, KEY, "");
    let want = vec![
        tool.clone(),
        dev.clone(),
        noisy[2].clone(),
        noisy[1].clone(),
        noisy[0].clone(),
    ];
    t.check_eq(ids(&all), want.clone(), "every run, newest first");
    t.check(all["Next"].is_null(), "no next page");
    t.check(all["Runs"][0].get("Input").is_none(), "no input served");

    let cases: [(&str, Vec<&String>); 9] = [
        ("program=2", noisy.iter().rev().collect()),
        ("function=hello", vec![&dev]),
        ("tool=inventory", vec![&tool]),
        ("origin=public", vec![&tool]),
        (
            "origin=api_key",
            vec![&dev, &noisy[2], &noisy[1], &noisy[0]],
        ),
        ("origin=api_key:all&program=3", vec![&dev]),
        ("origin=session", vec![]),
        ("state=failed", vec![]),
        ("state=finished&function=noisy&program=3", vec![]),
    ];
    for (q, want) in cases {
        let got = ids(&list(t, KEY, q));
        let want: Vec<String> = want.into_iter().cloned().collect();
        t.check_eq(got, want, q);
    }
    // since (inclusive) and until (exclusive), from the records' CreatedAt.
    let created = |id: &str| run_record(t, id)["CreatedAt"].as_str().unwrap().to_string();
    let from = created(&noisy[1]);
    let to = created(&dev);
    let got = ids(&list(
        t,
        KEY,
        &format!("since={}&until={}", enc(&from), enc(&to)),
    ));
    let want = vec![noisy[2].clone(), noisy[1].clone()];
    t.check_eq(got, want, "since inclusive, until exclusive");

    // Scope: the same rules as GET /api/runs/<id>.
    let p2: BTreeSet<String> = ids(&list(t, KEY_P2, "")).into_iter().collect();
    t.check_eq(
        p2,
        noisy.iter().cloned().collect(),
        "a key scoped to program 2",
    );
    t.check_eq(
        ids(&list(t, KEY_P2, "program=3")),
        vec![],
        "another program",
    );
    let alice = login(t, "alice");
    let c = cookie(&alice);
    let r = t.request("GET", "/api/runs", &[("Cookie", c.as_str())], b"");
    let mine: BTreeSet<String> = ids(&r.ok()).into_iter().collect();
    let ops: BTreeSet<String> = noisy.iter().chain([&tool]).cloned().collect();
    r.check_eq(mine, ops, "a member sees her workspace's runs");
    t.get("/api/runs").err(401, "missing_api_key");
    t.get("/api/runs?api_key=nope").err(401, "invalid_api_key");
    t.post(&format!("/api/runs?api_key={KEY}"))
        .err(405, "method_not_allowed");
}

/// Pages of 2 over 5 runs, a run arriving between pages, forged
/// cursors.
fn check_cursor(t: &Trigd) {
    let first: Vec<String> = (0..5).map(|_| run(t, 2, "noisy", "")).collect();
    let page1 = list(t, KEY, "limit=2");
    t.check_eq(
        ids(&page1),
        vec![first[4].clone(), first[3].clone()],
        "page 1",
    );
    let next = page1["Next"].as_str().unwrap().to_string();
    // New runs arrive between the pages: they are newer, not on page 2.
    let later = run(t, 2, "noisy", "");
    let page2 = list(t, KEY, &format!("limit=2&cursor={next}"));
    t.check_eq(
        ids(&page2),
        vec![first[2].clone(), first[1].clone()],
        "page 2",
    );
    let next = page2["Next"].as_str().unwrap().to_string();
    let page3 = list(t, KEY, &format!("limit=2&cursor={next}"));
    t.check_eq(ids(&page3), vec![first[0].clone()], "page 3");
    t.check(page3["Next"].is_null(), "the last page has no Next");
    t.check_eq(
        ids(&list(t, KEY, "limit=1"))[0].clone(),
        later,
        "the new run",
    );
    // A forged but well-formed cursor is only a position.
    let far = list(t, KEY, &format!("cursor=0.{}", "0".repeat(32)));
    t.check_eq(ids(&far), vec![], "nothing before the epoch");
    let all = list(t, KEY, &format!("cursor=99999999999999.{}", "f".repeat(32)));
    t.check_eq(ids(&all).len(), 6, "everything before the far future");
}

#[test]
fn hostile_run_list_queries_are_400_with_a_code() {
    let (_dir, t) = start("list_hostile", "");
    run(&t, 2, "noisy", "");
    let long = "x".repeat(3000);
    let hex = "0123456789abcdef".repeat(2);
    // Each query and the parameter its 400 names.
    let bad: Vec<(String, &str)> = vec![
        ("limit=0".into(), "limit"),
        ("limit=201".into(), "limit"),
        ("limit=-1".into(), "limit"),
        ("limit=abc".into(), "limit"),
        ("limit=99999999999999999999999".into(), "limit"),
        ("limit=%2B5".into(), "limit"),
        ("limit=%205".into(), "limit"),
        ("limit=5.0".into(), "limit"),
        ("limit=0x10".into(), "limit"),
        ("limit=5&limit=6".into(), "limit"),
        ("cursor=garbage".into(), "cursor"),
        (format!("cursor={long}"), "cursor"),
        (format!("cursor=1.{}", "g".repeat(32)), "cursor"),
        (format!("cursor=1.{}", "A".repeat(32)), "cursor"),
        (format!("cursor=1.{hex}0"), "cursor"),
        (format!("cursor=1.{}", &hex[1..]), "cursor"),
        (format!("cursor=.{hex}"), "cursor"),
        (format!("cursor=-.{hex}"), "cursor"),
        (format!("cursor=%2B1.{hex}"), "cursor"),
        (format!("cursor=1.{hex}%00"), "cursor"),
        (
            format!("cursor=99999999999999999999999.{}", "0".repeat(32)),
            "cursor",
        ),
        // One past i64::MAX milliseconds: well-formed, not a position.
        (format!("cursor=9223372036854775808.{hex}"), "cursor"),
        (format!("cursor=1.{hex}&cursor=2.{hex}"), "cursor"),
        // Not as a cursor is written: leading zeros, a signed zero.
        (format!("cursor=01795957051293.{hex}"), "cursor"),
        (format!("cursor=00.{hex}"), "cursor"),
        (format!("cursor=-0.{hex}"), "cursor"),
        (format!("cursor=-01.{hex}"), "cursor"),
        ("since=yesterday".into(), "since"),
        ("until=2026-13-01T00:00:00Z".into(), "until"),
        ("since=99999-01-01T00:00:00Z".into(), "since"),
        (format!("until={long}"), "until"),
        (
            "since=2026-02-01T00:00:00Z&until=2026-01-01T00:00:00Z".into(),
            "until",
        ),
        ("state=sleeping".into(), "state"),
        ("state=FAILED".into(), "state"),
        ("program=-1".into(), "program"),
        ("program=99999999999999999999".into(), "program"),
        ("program=1&program=2".into(), "program"),
        ("origin=bogus".into(), "origin"),
        (format!("function={long}"), "function"),
        (format!("tool={long}"), "tool"),
        (format!("origin=api_key:{long}"), "origin"),
        ("colour=red".into(), "colour"),
        ("state=failed&state=finished".into(), "state"),
        ("page=2".into(), "page"),
    ];
    for (q, name) in &bad {
        let r = t.get(&format!("/api/runs?api_key={KEY}&{q}"));
        let v = r.err(400, "invalid_parameter");
        r.check(
            v["Error"].as_str().is_some_and(|e| !e.is_empty()),
            "says why",
        );
        r.check_eq(v["Parameter"].as_str(), Some(*name), q);
    }
    // A well-formed cursor is only a position, whatever its time: with
    // several instances on one database, a page may end at a run stamped
    // by a clock ahead of this one. At the ends of the range: all, none.
    let far = format!("cursor=9223372036854775807.{}", "f".repeat(32));
    t.check_eq(ids(&list(&t, KEY, &far)).len(), 1, "a cursor far ahead");
    let past = format!("cursor=-9223372036854775808.{}", "0".repeat(32));
    t.check_eq(ids(&list(&t, KEY, &past)), vec![], "a cursor far back");
    // Any year RFC 3339 can write is a bound (those before 1970 and the
    // last one were refused as "not an RFC 3339 UTC time").
    for (q, n) in [
        ("since=1969-01-01T00:00:00Z", 1),
        ("since=0001-01-01T00:00:00Z", 1),
        ("until=9999-12-31T23:59:59Z", 1),
        ("since=9999-12-31T23:59:59Z", 0),
        ("until=1969-01-01T00:00:00Z", 0),
    ] {
        t.check_eq(ids(&list(&t, KEY, q)).len(), n, q);
    }
    // since = until is an empty window, not an error.
    let at = "2026-01-01T00:00:00Z";
    t.check_eq(
        ids(&list(&t, KEY, &format!("since={at}&until={at}"))),
        vec![],
        "an empty window",
    );
    // Empty values are no filter; the page bound is accepted.
    let v = list(&t, KEY, "state=&program=&limit=200");
    t.check_eq(v["Runs"].as_array().map(Vec::len), Some(1), "one run");
}

// ---------------------------------------------------------------------------
// Re-run

/// `POST /api/runs/<id>/rerun?<query>` with [`KEY`].
fn rerun(t: &Trigd, id: &str, query: &str) -> Reply {
    t.post(&format!("/api/runs/{id}/rerun?api_key={KEY}&{query}"))
}

#[test]
fn a_rerun_runs_the_same_function_with_the_same_values_linked_both_ways() {
    let (_dir, t) = start("rerun_api", "");
    check_rerun(&t);
}

/// The same re-runs with the run records in PostgreSQL: the original's
/// `Reruns` written through `RunStore::update`'s database arm, also by
/// an instance other than the one that ran the original.
#[test]
fn a_rerun_works_the_same_with_postgresql() {
    let (_dir, t, db) = start_pg("rerun_pg");
    check_rerun(&t);

    let dir2 = setup("rerun_pg_two", "instance = \"two\"");
    db.configure(&dir2, "");
    let t2 = Trigd::start(&dir2);
    let r = t.post(&format!(
        "/api?api_key={KEY}&program_id=1&function=add&variables=plum"
    ));
    let orig = r.run_id(&r.ok());
    let r = t2.post(&format!(
        "/api/runs/{orig}/rerun?api_key={KEY}&run_async=false"
    ));
    let again = r.run_id(&r.ok());
    t2.check(again.starts_with("two-"), "run by the second instance");
    t.check_eq(
        &run_record(&t, &orig)["Reruns"],
        &serde_json::json!([again]),
        "Reruns written by the other instance",
    );
}

/// Re-runs async and sync, of a re-run, of a tool endpoint's run.
fn check_rerun(t: &Trigd) {
    let r = t.post(&format!(
        "/api?api_key={KEY}&program_id=1&function=add&variables=apple"
    ));
    let first = r.ok();
    let orig = r.run_id(&first);

    let r = rerun(t, &orig, "");
    let again = r.run_id(&r.ok());
    t.check(again != orig, "a new run");
    let rec = wait_run_state(t, &again, "finished");
    t.check_eq(&rec["RerunOf"], &Value::from(orig.as_str()), "RerunOf");
    t.check_eq(
        &rec["Result"],
        &first["Result"],
        "the same values, the same Result",
    );
    t.check_eq(
        &rec["By"],
        &Value::from("api_key:all"),
        "started by the re-runner",
    );
    t.check(
        rec.get("RerunInput").is_none(),
        "the kept values are not served",
    );
    t.check_eq(
        &run_record(t, &orig)["Reruns"],
        &serde_json::json!([again]),
        "Reruns of the original",
    );

    // Sync on request; a re-run of a re-run links to its own original.
    let r = rerun(t, &again, "run_async=false");
    let v = r.ok();
    t.check_eq(&v["Result"], &first["Result"], "the sync answer");
    let third = r.run_id(&v);
    t.check_eq(
        &run_record(t, &third)["RerunOf"],
        &Value::from(again.as_str()),
        "RerunOf of the third",
    );
    // A tool endpoint's run: its tool environment comes along.
    let r = t.request(
        "POST",
        "/tools/inventory/staging/add",
        &[("Content-Type", "application/json")],
        br#"{"item":"pear"}"#,
    );
    let tool_run = r.run_id(&r.ok());
    let r = rerun(t, &tool_run, "run_async=false");
    let v = r.ok();
    let rec = run_record(t, &r.run_id(&v));
    t.check_eq(&rec["Tool"], &Value::from("inventory/staging"), "Tool");
    t.check_eq(
        &rec["Result"],
        &run_record(t, &tool_run)["Result"],
        "Result",
    );
}

#[test]
fn a_rerun_is_refused_with_a_code_when_it_cannot_run() {
    let (dir, t) = start("rerun_refused", "");
    let r = t.post(&format!(
        "/api?api_key={KEY}&program_id=1&function=add&variables=apple"
    ));
    let orig = r.run_id(&r.ok());
    // Gated: not ended before the re-run is asked, however slow the machine.
    let slow = run(&t, 2, "ticks_gated", "&run_async=true");
    rerun(&t, &slow, "").err(409, "run_not_ended");
    t.post(&format!("/api/runs/{slow}/cancel?api_key={KEY}"));
    // Scope: a key that may not see the run does not learn it exists.
    t.post(&format!("/api/runs/{orig}/rerun?api_key={KEY_P2}"))
        .err(404, "run_not_found");
    t.post(&format!("/api/runs/{orig}/rerun"))
        .err(401, "missing_api_key");
    rerun(&t, &orig, "run_async=maybe").err(400, "invalid_parameter");
    rerun(&t, &orig, "colour=red").err(400, "invalid_parameter");
    rerun(&t, "nope", "").err(404, "run_not_found");
    t.get(&format!("/api/runs/{orig}/rerun?api_key={KEY}"))
        .err(405, "method_not_allowed");

    // The function's inputs changed: the old values no longer fit.
    let inv = crate::ui::INV.replace(r#"outputs = ["item"]"#, r#"outputs = ["item", "count"]"#);
    dir.write("programs/inv.toml", &inv);
    let mut last = String::new();
    let changed = wait_until(WAIT, || {
        let r = rerun(&t, &orig, "");
        last = r.text();
        r.status == 400
    });
    t.check(
        changed,
        format!("variables_mismatch after the edit: {last}"),
    );
    rerun(&t, &orig, "").err(400, "variables_mismatch");
    // Its trigger is gone (the tool's trigger keeps the function).
    let gone = crate::ui::INV
        .replace("[functions.webhook]\noutputs = [\"item\"]\n", "")
        .replace(r#""%s", "{item}""#, r#""x""#);
    dir.write("programs/inv.toml", &gone);
    let ok = wait_until(WAIT, || rerun(&t, &orig, "").status == 409);
    t.check(
        ok,
        "rerun_target_gone after the webhook trigger was removed",
    );
    let v = rerun(&t, &orig, "").err(409, "rerun_target_gone");
    t.check(
        v["Error"]
            .as_str()
            .unwrap()
            .contains("webhook trigger of function 'add'"),
        "names what is gone",
    );
}

/// A run of a program since removed: an unscoped key still sees it (its
/// record, the list) and a re-run says the program is gone; a scoped key
/// sees nothing. It was 404 `run_not_found` to every key.
#[test]
fn a_run_of_a_removed_program_stays_visible_to_an_unscoped_key() {
    let (dir, t) = start("rerun_program_gone", "");
    dir.write(
        "programs/gone.toml",
        "id = 9\nname = \"gone\"\n[[functions]]\nname = \"run\"\nsteps = [{ command = [\"/bin/true\"] }]\n[functions.webhook]\n",
    );
    let ok = wait_until(WAIT, || {
        t.post(&format!("/api?api_key={KEY}&program_id=9")).status == 200
    });
    t.check(ok, "program 9 loaded");
    let r = t.post(&format!("/api?api_key={KEY}&program_id=9"));
    let id = r.run_id(&r.ok());
    std::fs::remove_file(dir.path("programs/gone.toml")).unwrap();
    let gone = wait_until(WAIT, || {
        t.post(&format!("/api?api_key={KEY}&program_id=9")).status == 404
    });
    t.check(gone, "program 9 removed");
    t.get(&format!("/api/runs/{id}?api_key={KEY}")).ok();
    t.check(
        ids(&list(&t, KEY, "program=9")).contains(&id),
        "the list holds it",
    );
    let v = rerun(&t, &id, "").err(409, "rerun_target_gone");
    t.check(
        v["Error"].as_str().is_some_and(|e| e.contains("program 9")),
        "names the program",
    );
    t.get(&format!("/api/runs/{id}?api_key={KEY_P2}"))
        .err(404, "run_not_found");
}

#[test]
fn a_run_recorded_without_its_values_cannot_be_rerun() {
    let dir = setup_dir("rerun_old", "");
    dir.mkdir("state");
    let id = format!("{:032x}", 7);
    dir.write(
        "state/runs.log",
        &format!(
            "{{\"Run\":\"{id}\",\"State\":\"finished\",\"Owner\":\"program\",\"Program\":1,\"Function\":\"add\",\
             \"By\":\"api_key:all\",\"CreatedAt\":\"2026-11-20T10:00:00.000Z\",\"Steps\":[]}}\n"
        ),
    );
    let t = Trigd::start(&dir);
    rerun(&t, &id, "").err(409, "rerun_unavailable");
}

#[test]
fn the_rerun_button_needs_the_csrf_token_and_opens_the_new_run() {
    let (_dir, t) = start("rerun_button", "");
    let r = t.post(&format!(
        "/api?api_key={KEY}&program_id=1&function=add&variables=kiwi"
    ));
    let orig = r.run_id(&r.ok());
    let alice = login(&t, "alice");
    let c = cookie(&alice);
    let page = t.request(
        "GET",
        &format!("/runs/{orig}"),
        &[crate::ui::HTML, ("Cookie", c.as_str())],
        b"",
    );
    page.check(page.text().contains("id=\"rerun\""), "a Re-run button");
    let csrf = crate::ui::hidden(&page, "csrf");
    let url = format!("/runs/{orig}/rerun");
    let form = [
        ("Cookie", c.as_str()),
        ("Content-Type", "application/x-www-form-urlencoded"),
    ];
    t.request("POST", &url, &form, b"csrf=wrong")
        .err(403, "csrf_rejected");
    t.check(run_record(&t, &orig).get("Reruns").is_none(), "nothing ran");
    let r = t.request("POST", &url, &form, format!("csrf={csrf}").as_bytes());
    r.status_is(303);
    let to = r.header("location").unwrap_or("").to_string();
    let new = to.trim_start_matches("/runs/").to_string();
    r.check(
        is_run_id(&new) && new != orig,
        format!("to the new run: {to}"),
    );
    let rec = wait_run_state(&t, &new, "finished");
    t.check_eq(&rec["By"], &Value::from("session:alice"), "By");
    let page = t.request("GET", &to, &[crate::ui::HTML, ("Cookie", c.as_str())], b"");
    page.check(
        page.text().contains(&format!("href=\"/runs/{orig}\"")),
        "links back",
    );
    // bob (another workspace) may not re-run it.
    let bob = login(&t, "bob");
    let cb = cookie(&bob);
    let page_b = t.request(
        "GET",
        "/runs",
        &[crate::ui::HTML, ("Cookie", cb.as_str())],
        b"",
    );
    let csrf_b = crate::ui::hidden(&page_b, "csrf");
    let form_b = [
        ("Cookie", cb.as_str()),
        ("Content-Type", "application/x-www-form-urlencoded"),
    ];
    t.request("POST", &url, &form_b, format!("csrf={csrf_b}").as_bytes())
        .status_is(404);
}

// ---------------------------------------------------------------------------
// Redeliver

/// A callback receiver on 127.0.0.1: answers every request with the status
/// in `status`, and keeps the `Trigd-Delivery` header of each.
struct Receiver {
    port: u16,
    status: std::sync::Arc<std::sync::atomic::AtomicU16>,
    got: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Receiver {
    fn start(status: u16) -> Receiver {
        use std::io::{BufRead, BufReader, Read, Write};
        use std::sync::atomic::{AtomicU16, Ordering};
        use std::sync::{Arc, Mutex};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let st = Arc::new(AtomicU16::new(status));
        let got = Arc::new(Mutex::new(Vec::new()));
        let (st2, got2) = (Arc::clone(&st), Arc::clone(&got));
        std::thread::spawn(move || {
            for mut s in l.incoming().flatten() {
                let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(10)));
                let mut r = BufReader::new(s.try_clone().unwrap());
                let (mut len, mut delivery) = (0usize, String::new());
                let mut line = String::new();
                while r.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                    let lower = line.to_ascii_lowercase();
                    if let Some(v) = lower.strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                    if let Some(v) = lower.strip_prefix("trigd-delivery:") {
                        delivery = v.trim().to_string();
                    }
                    line.clear();
                }
                let mut body = vec![0; len];
                let _ = r.read_exact(&mut body);
                got2.lock().unwrap().push(delivery);
                let c = st2.load(Ordering::SeqCst);
                let _ = write!(
                    s,
                    "HTTP/1.1 {c} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
            }
        });
        Receiver {
            port,
            status: st,
            got,
        }
    }

    fn got(&self) -> Vec<String> {
        self.got.lock().unwrap().clone()
    }
}

/// Wait until the callback delivery `i` of `run` is in `state`; the record.
fn wait_delivery(t: &Trigd, run: &str, i: usize, state: &str) -> Value {
    let mut last = Value::Null;
    let ok = wait_until(std::time::Duration::from_secs(30), || {
        last = run_record(t, run);
        last["Callbacks"][i]["State"] == state
    });
    t.check(ok, format!("delivery {i} of {run} not {state}: {last}"));
    last
}

#[test]
fn a_callback_is_redelivered_as_a_new_attempt() {
    use std::sync::atomic::Ordering;
    let rx = Receiver::start(410);
    let dir = setup("redeliver", "");
    dir.append(
        "config.toml",
        "\n[callbacks]\nallow = [\"127.0.0.1\"]\nallow_private = [\"127.0.0.1\"]\nbackoff = \"100ms\"\nbackoff_max = \"300ms\"\nsecret_file = \"cb.secret\"\n",
    );
    dir.write("cb.secret", "redeliver-test-secret-0a1b2c3d4e5f\n");
    let inv = crate::ui::INV.replace(
        "command = [\"printf\", \"%s\", \"{item}\"]",
        &format!(
            "command = [\"printf\", \"%s\", \"{{item}}\"]\ncallback = \"http://127.0.0.1:{}/hook\"",
            rx.port
        ),
    );
    dir.write("programs/inv.toml", &inv);
    let t = Trigd::start(&dir);
    let r = t.post(&format!(
        "/api?api_key={KEY}&program_id=1&function=add&variables=plum"
    ));
    let run_id = r.run_id(&r.ok());
    // 410: a final failure, one attempt.
    let rec = wait_delivery(&t, &run_id, 0, "failed");
    let first = rec["Callbacks"][0]["Delivery"]
        .as_str()
        .unwrap()
        .to_string();
    t.check_eq(
        rec["Callbacks"][0]["AttemptCount"].as_u64(),
        Some(1),
        "one attempt",
    );

    rx.status.store(200, Ordering::SeqCst);
    let url = format!("/api/runs/{run_id}/callbacks/{first}/redeliver?api_key={KEY}");
    let v = t.post(&url).status_is(202).json();
    t.check_eq(
        v["Delivery"].as_str(),
        Some(first.as_str()),
        "the same delivery id",
    );
    let rec = wait_delivery(&t, &run_id, 0, "delivered");
    t.check_eq(
        rec["Callbacks"][0]["AttemptCount"].as_u64(),
        Some(2),
        "a new attempt",
    );
    t.check_eq(
        rx.got(),
        vec![first.clone(), first.clone()],
        "sent twice, same id",
    );

    // A delivered one goes out again under a new id, as a new entry.
    let v = t.post(&url).status_is(202).json();
    let second = v["Delivery"].as_str().unwrap().to_string();
    t.check(second != first && second.len() == 32, "a new delivery id");
    let rec = wait_delivery(&t, &run_id, 1, "delivered");
    t.check_eq(
        rec["Callbacks"][1]["Delivery"].as_str(),
        Some(second.as_str()),
        "entry 2",
    );
    t.check_eq(rx.got().len(), 3, "three requests");

    // Refusals.
    let other = format!(
        "/api/runs/{run_id}/callbacks/{}/redeliver?api_key={KEY}",
        "0".repeat(32)
    );
    t.post(&other).err(404, "delivery_not_found");
    t.post(&format!(
        "/api/runs/{run_id}/callbacks/{first}/redeliver?api_key={KEY_P2}"
    ))
    .err(404, "run_not_found");
    t.post(&format!("/api/runs/{run_id}/callbacks/{first}/redeliver"))
        .err(401, "missing_api_key");
    t.get(&url).err(405, "method_not_allowed");

    // The button: a session with the page's CSRF token.
    let alice = login(&t, "alice");
    let c = cookie(&alice);
    let page = t.request(
        "GET",
        &format!("/runs/{run_id}"),
        &[crate::ui::HTML, ("Cookie", c.as_str())],
        b"",
    );
    page.check(
        page.text().contains(&format!("id=\"redeliver-{first}\"")),
        "a Redeliver button",
    );
    let csrf = crate::ui::hidden(&page, "csrf");
    let form = [
        ("Cookie", c.as_str()),
        ("Content-Type", "application/x-www-form-urlencoded"),
    ];
    let ui = format!("/runs/{run_id}/callbacks/{first}/redeliver");
    t.request("POST", &ui, &form, b"csrf=nope")
        .err(403, "csrf_rejected");
    t.request("POST", &ui, &form, format!("csrf={csrf}").as_bytes())
        .status_is(303);
    let ok = wait_until(std::time::Duration::from_secs(30), || rx.got().len() == 4);
    t.check(ok, "the button's redelivery arrived");
}

// ---------------------------------------------------------------------------
// Retries

/// Program 5: `flaky` fails until its `fails`-th attempt... counted in the
/// file `count` of `work/`: it fails while the count is below `ok_at`;
/// `[functions.retry]` from `retry`.
fn flaky(ok_at: u32, retry: &str) -> String {
    format!(
        r#"id = 5
name = "flaky"
workspace = "ops"

[[functions]]
name = "flaky"
workdir = "../work"
steps = [{{ shell = 'n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count; echo "attempt $n"; [ $n -ge {ok_at} ]' }}]
[functions.webhook]
[functions.retry]
{retry}
"#
    )
}

fn count(dir: &TestDir) -> u32 {
    std::fs::read_to_string(dir.path("work/count"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

fn start_flaky(name: &str, ok_at: u32, retry: &str) -> (TestDir, Trigd) {
    let dir = setup(name, "");
    dir.write("programs/flaky.toml", &flaky(ok_at, retry));
    let t = Trigd::start(&dir);
    (dir, t)
}

#[test]
fn a_failed_run_is_attempted_again_and_each_attempt_is_recorded() {
    let retry =
        "attempts = 4\nbackoff = \"100ms\"\nstrategy = \"exponential\"\nmax_backoff = \"300ms\"";
    let (dir, t) = start_flaky("retry_ok", 3, retry);
    // Sync: the caller gets the final outcome.
    let r = t.post(&format!("/api?api_key={KEY}&program_id=5&function=flaky"));
    let v = r.ok();
    let id = r.run_id(&v);
    t.check_eq(count(&dir), 3, "three attempts");
    let rec = run_record(&t, &id);
    t.check_eq(&rec["State"], &Value::from("finished"), "State");
    let attempts = rec["Attempts"].as_array().cloned().unwrap_or_default();
    t.check_eq(attempts.len(), 2, "two earlier attempts");
    for (i, a) in attempts.iter().enumerate() {
        t.check_eq(a["Attempt"].as_u64(), Some(i as u64 + 1), "Attempt");
        t.check_eq(a["State"].as_str(), Some("failed"), "State of an attempt");
        t.check(
            a["Error"].as_str().is_some_and(|e| e.contains("status 1")),
            "Error",
        );
        t.check(
            a["FinishedAt"].is_string() && a["StartedAt"].is_string(),
            "times",
        );
    }
    t.check(rec.get("RetryAt").is_none(), "no RetryAt once over");
    // The page shows them.
    let alice = login(&t, "alice");
    let c = cookie(&alice);
    let page = t.request(
        "GET",
        &format!("/runs/{id}"),
        &[crate::ui::HTML, ("Cookie", c.as_str())],
        b"",
    );
    page.check(page.text().contains("id=\"attempts\""), "an Attempts table");
    // Out of attempts: the last outcome stands.
    std::fs::remove_file(dir.path("work/count")).unwrap();
    dir.write("programs/flaky.toml", &flaky(9, retry));
    let ok = wait_until(WAIT, || {
        let r = t.post(&format!("/api?api_key={KEY}&program_id=5&function=flaky"));
        r.status == 500
    });
    t.check(ok, "a run that fails all its attempts fails");
}

/// Wait until run `id` waits for its next attempt (`RetryAt`); its record.
fn wait_retry(t: &Trigd, id: &str) -> Value {
    let mut last = Value::Null;
    let ok = wait_until(WAIT, || {
        last = run_record(t, id);
        last["State"] == "queued" && last["RetryAt"].is_string()
    });
    t.check(
        ok,
        format!("run {id} never waited for a next attempt: {last}"),
    );
    last
}

#[test]
fn a_cancel_stops_the_remaining_attempts() {
    let (dir, t) = start_flaky("retry_cancel", 99, "attempts = 5\nbackoff = \"60s\"");
    let r = t.post(&format!(
        "/api?api_key={KEY}&program_id=5&function=flaky&run_async=true"
    ));
    let id = r.run_id(&r.ok());
    // Queued at first too: wait for the wait between attempts.
    let rec = wait_retry(&t, &id);
    t.check_eq(
        rec["Attempts"].as_array().map(Vec::len),
        Some(1),
        "one attempt",
    );
    t.post(&format!("/api/runs/{id}/cancel?api_key={KEY}"))
        .status_is(200);
    let rec = wait_run_state(&t, &id, "cancelled");
    t.check_eq(
        rec["Attempts"].as_array().map(Vec::len),
        Some(1),
        "still one",
    );
    // No step was stopped: it waited for its next attempt.
    t.check_eq(
        rec["Error"].as_str(),
        Some("the run was cancelled before a step started"),
        "Error",
    );
    t.check_eq(count(&dir), 1, "no further attempt ran");
}

#[test]
fn a_pending_attempt_survives_kill_9() {
    let (dir, mut t) = start_flaky(
        "retry_kill9",
        2,
        "attempts = 3\nbackoff = \"3s\"\nstrategy = \"fixed\"\njitter = false",
    );
    let r = t.post(&format!(
        "/api?api_key={KEY}&program_id=5&function=flaky&run_async=true"
    ));
    let id = r.run_id(&r.ok());
    wait_retry(&t, &id);
    t.kill9();
    t.restart();
    let rec = wait_run_state(&t, &id, "finished");
    t.check_eq(
        rec["Attempts"].as_array().map(Vec::len),
        Some(1),
        "the first attempt kept",
    );
    t.check_eq(
        count(&dir),
        2,
        "the pending attempt ran once after the restart",
    );
}

/// An attempt a `kill -9` cut off is retried after the restart when
/// `on` has `interrupted`, as after a clean stop (it was recorded
/// `interrupted` and never attempted again).
#[test]
fn an_attempt_cut_by_kill_9_is_attempted_again_after_the_restart() {
    let dir = setup("retry_interrupted_kill9", "");
    dir.write(
        "programs/flaky.toml",
        r#"id = 5
name = "flaky"
workspace = "ops"

[[functions]]
name = "flaky"
workdir = "../work"
steps = [{ shell = 'n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count; [ $n -ge 2 ] || sleep 60' }]
[functions.webhook]
[functions.retry]
attempts = 2
backoff = "1s"
jitter = false
on = ["interrupted"]
"#,
    );
    let mut t = Trigd::start(&dir);
    let r = t.post(&format!(
        "/api?api_key={KEY}&program_id=5&function=flaky&run_async=true"
    ));
    let id = r.run_id(&r.ok());
    let started = wait_until(WAIT, || {
        count(&dir) == 1 && run_record(&t, &id)["State"] == "running"
    });
    t.check(started, "the first attempt runs");
    t.kill9();
    t.restart();
    let rec = wait_run_state(&t, &id, "finished");
    let attempts = rec["Attempts"].as_array().cloned().unwrap_or_default();
    t.check_eq(attempts.len(), 1, "the cut attempt is recorded");
    if let Some(a) = attempts.first() {
        t.check_eq(a["State"].as_str(), Some("interrupted"), "its State");
        t.check_eq(
            a["Error"].as_str(),
            Some("trigd stopped before the run finished"),
            "its Error",
        );
    }
    t.check_eq(count(&dir), 2, "attempted once more");
}

#[test]
fn bad_retry_settings_are_located_load_errors() {
    for (retry, want) in [
        ("attempts = 1", "retry.attempts"),
        ("attempts = 21", "retry.attempts"),
        ("strategy = \"linear\"", "retry.strategy"),
        ("on = [\"cancelled\"]", "retry.on"),
        ("on = []", "retry.on"),
        ("backoff = \"soon\"", "retry.backoff"),
        (
            "backoff = \"10s\"\nmax_backoff = \"1s\"",
            "retry.max_backoff",
        ),
        ("tries = 3", "tries"),
    ] {
        let dir = setup("retry_bad", "");
        dir.write("programs/flaky.toml", &flaky(1, retry));
        let out =
            crate::util::cli::trigd(&["check", "--config", &dir.path_str("config.toml")], None);
        out.code_is(1);
        out.check(
            out.stderr.contains("flaky.toml:") && out.stderr.contains(want),
            format!("{retry}: a located error naming {want}"),
        );
    }
}

#[test]
fn callbacks_each_attempt_when_asked_and_on_the_final_outcome() {
    let rx = Receiver::start(200);
    let retry = "attempts = 3\nbackoff = \"100ms\"\ncallbacks = \"each\"";
    let (_dir, t) = each_attempt_server_with("retry_each", &rx, None, (3, retry));
    let r = t.post(&format!("/api?api_key={KEY}&program_id=5&function=flaky"));
    let id = r.run_id(&r.ok());
    let ok = wait_until(std::time::Duration::from_secs(30), || rx.got().len() == 3);
    t.check(
        ok,
        format!("three callbacks (two attempts, the end): {:?}", rx.got()),
    );
    let rec = wait_delivery(&t, &id, 0, "delivered");
    let ids: BTreeSet<String> = rec["Callbacks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["Delivery"].as_str().unwrap().to_string())
        .collect();
    t.check_eq(ids.len(), 3, "three deliveries, three ids");
    t.check_eq(
        rx.got().into_iter().collect::<BTreeSet<_>>(),
        ids,
        "the ids sent",
    );
}

/// The server of the `callbacks = "each"` tests: program 5's `flaky`
/// always fails, three attempts 1 s apart, its callback to `rx`; the run
/// records in PostgreSQL when `db` is given.
fn each_attempt_server(name: &str, rx: &Receiver, db: Option<&PgDb>) -> (TestDir, Trigd) {
    let retry = "attempts = 3\nbackoff = \"1s\"\njitter = false\ncallbacks = \"each\"";
    each_attempt_server_with(name, rx, db, (99, retry))
}

/// [`each_attempt_server`] whose `flaky` succeeds at attempt `ok_at`, with
/// `[functions.retry]` `retry`.
fn each_attempt_server_with(
    name: &str,
    rx: &Receiver,
    db: Option<&PgDb>,
    (ok_at, retry): (u32, &str),
) -> (TestDir, Trigd) {
    let dir = setup(name, "");
    dir.append(
        "config.toml",
        "\n[callbacks]\nallow = [\"127.0.0.1\"]\nallow_private = [\"127.0.0.1\"]\nsecret_file = \"cb.secret\"\n",
    );
    dir.write("cb.secret", "retry-each-test-secret-0a1b2c3d4e5f\n");
    if let Some(db) = db {
        db.configure(&dir, "");
    }
    let program = flaky(ok_at, retry).replace(
        "[functions.webhook]\n[functions.retry]",
        &format!(
            "callback = \"http://127.0.0.1:{}/rt\"\n[functions.webhook]\n[functions.retry]",
            rx.port
        ),
    );
    dir.write("programs/flaky.toml", &program);
    let t = Trigd::start(&dir);
    (dir, t)
}

/// The deliveries of the attempts, sent while the run still waits for its
/// next attempt, stay recorded `delivered` when the runner writes the run
/// again (its next attempt, its end), and can be redelivered.
fn check_each_attempt_recorded(t: &Trigd, rx: &Receiver) {
    let r = t.post(&format!(
        "/api?api_key={KEY}&program_id=5&function=flaky&run_async=true"
    ));
    let id = r.run_id(&r.ok());
    let ok = wait_until(std::time::Duration::from_secs(30), || rx.got().len() == 3);
    t.check(ok, format!("three callbacks: {:?}", rx.got()));
    let rec = wait_delivery(t, &id, 0, "delivered");
    let all = rec["Callbacks"].as_array().unwrap().clone();
    t.check_eq(all.len(), 3, "the final delivery and two of attempts");
    for d in &all {
        t.check(
            d["State"] == "delivered"
                && d["AttemptCount"] == 1
                && d["Attempts"][0]["Status"] == 200,
            format!("delivered with its attempt: {d}"),
        );
    }
    let each = all[1]["Delivery"].as_str().unwrap();
    t.post(&format!(
        "/api/runs/{id}/callbacks/{each}/redeliver?api_key={KEY}"
    ))
    .status_is(202);
    let ok = wait_until(std::time::Duration::from_secs(30), || rx.got().len() == 4);
    t.check(ok, "the redelivery arrived");
}

#[test]
fn deliveries_of_attempts_stay_recorded_delivered() {
    let rx = Receiver::start(200);
    let (_dir, t) = each_attempt_server("retry_each_kept", &rx, None);
    check_each_attempt_recorded(&t, &rx);
}

#[test]
fn deliveries_of_attempts_stay_recorded_delivered_with_postgresql() {
    let rx = Receiver::start(200);
    let db = pg_database("retry_each_kept_pg");
    let (_dir, t) = each_attempt_server("retry_each_kept_pg", &rx, Some(&db));
    check_each_attempt_recorded(&t, &rx);
}
