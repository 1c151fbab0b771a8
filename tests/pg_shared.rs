//! What access keeps, shared by instances through PostgreSQL (`[state]
//! url`): application keys, sessions, login throttling and API key rate
//! limits. Two real trigd instances on one database of the harness's
//! PostgreSQL (`tests/util/pg.rs`), each with its own state dir.

use std::time::{Duration, Instant};

use crate::util::*;

/// Program 1: `quick` answers at once.
const WORK: &str = r#"
id = 1
name = "work"
workspace = "ops"

[[functions]]
name = "quick"
steps = [{ shell = "printf ok" }]
[functions.webhook]
"#;

/// An API key limited to 10 requests a minute, and one to 200.
const KEY_R10: &str = "trigd-test-key-rate10-5e1f";
const KEY_R200: &str = "trigd-test-key-rate200-77a0";

/// `config.toml` of instance `name`: alice in `ops`, the tool `jobs` with
/// the endpoint `quick`, the rate-limited keys.
fn instance_config(name: &str) -> String {
    let base = config(&format!("instance = \"{name}\"")).replace(
        "name = \"ops\"\nmembers = []",
        "name = \"ops\"\nmembers = [\"alice\"]",
    );
    format!(
        "{base}\n[[api_keys]]\nname = \"r10\"\nsha256 = \"{}\"\nrate_per_minute = 10\n\n\
         [[api_keys]]\nname = \"r200\"\nsha256 = \"{}\"\nrate_per_minute = 200\n\n\
         [[users]]\nname = \"alice\"\npassword = \"{}\"\n\n\
         [[tools]]\nname = \"jobs\"\nworkspace = \"ops\"\n[tools.environments.main]\n\
         [[tools.triggers]]\nkind = \"endpoint\"\nname = \"quick\"\nmethod = \"POST\"\n\
         program = 1\nfunction = \"quick\"\n",
        sha256_hex(KEY_R10),
        sha256_hex(KEY_R200),
        cheap_hash("alice-pw")
    )
}

/// An instance on `db`, not started.
fn instance(db: &PgDb, test: &str, name: &str) -> TestDir {
    let dir = TestDir::new(&format!("{test}_{name}"));
    dir.write("config.toml", &instance_config(name));
    dir.mkdir("programs");
    dir.write("programs/work.toml", WORK);
    // No heartbeat or queue poll between two reads of the round trips.
    db.configure(&dir, "lease = \"1h\"");
    dir
}

/// Two instances, `a` and `b`, on one fresh database.
fn two(test: &str) -> (PgDb, [(TestDir, Trigd); 2]) {
    let db = pg_database(test);
    let da = instance(&db, test, "a");
    let db_dir = instance(&db, test, "b");
    let a = Trigd::start(&da);
    let b = Trigd::start(&db_dir);
    (db, [(da, a), (db_dir, b)])
}

fn bearer_call(t: &Trigd, key: &str) -> Reply {
    let auth = format!("Bearer {key}");
    t.request(
        "POST",
        "/tools/jobs/main/quick",
        &[
            ("Authorization", &auth),
            ("User-Agent", "pg-shared-test/1.0"),
        ],
        b"",
    )
}

/// `trigd <command>` (`app-key` or `revoke-app-key`) for alice in ops with
/// `dir`'s config; it succeeds.
fn key_cli(dir: &TestDir, command: &str) -> Output {
    let config = dir.path_str("config.toml");
    let args = [
        command,
        "--workspace",
        "ops",
        "--member",
        "alice",
        "--config",
        &config,
    ];
    let out = trigd(&args, None);
    out.code_is(0);
    out
}

/// `trigd app-key` for alice in ops with `dir`'s config: the new key.
fn app_key_cli(dir: &TestDir) -> String {
    key_cli(dir, "app-key").stdout.trim().to_string()
}

/// `trigd_state_db_round_trips_total` of `t`.
fn round_trips(t: &Trigd) -> u64 {
    let text = t.get("/metrics").status_is(200).text();
    text.lines()
        .find_map(|l| l.strip_prefix("trigd_state_db_round_trips_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no round-trip counter in /metrics:\n{text}"))
}

/// The round trips to the database of one `GET` of the tool's endpoint
/// page with a bearer key (the key's lookup and nothing else).
fn lookup_cost(t: &Trigd, key: &str) -> u64 {
    let auth = format!("Bearer {key}");
    let before = round_trips(t);
    t.request(
        "GET",
        "/tools/jobs/endpoints",
        &[
            ("Authorization", &auth),
            ("User-Agent", "pg-shared-test/1.0"),
        ],
        b"",
    )
    .status_is(200);
    round_trips(t) - before
}

#[test]
fn an_application_key_made_on_one_instance_works_on_the_other_and_regenerating_stops_it_on_both() {
    let (db, [(da, a), (_db, b)]) = two("pg_app_keys");
    let first = app_key_cli(&da);
    bearer_call(&a, &first).status_is(200);
    bearer_call(&b, &first).status_is(200);
    assert_eq!(
        db.count(&format!(
            "SELECT count(*) FROM trigd_app_keys WHERE sha256 = '{}' AND member = 'alice'",
            sha256_hex(&first)
        )),
        1,
        "the table holds the key's sha256"
    );
    assert_eq!(
        db.count(&format!(
            "SELECT count(*) FROM trigd_app_keys t WHERE t::text LIKE '%{first}%'"
        )),
        0,
        "and never the key"
    );

    // Regenerated through b (the settings endpoint, with the key itself).
    let auth = format!("Bearer {first}");
    let r = b.request(
        "POST",
        "/workspaces/ops/settings/application-key",
        &[
            ("Authorization", &auth),
            ("User-Agent", "pg-shared-test/1.0"),
        ],
        b"",
    );
    let second = r.ok()["ApplicationKey"].as_str().unwrap().to_string();
    bearer_call(&b, &first).err(401, "unauthorized");
    // a learns it by NOTIFY (milliseconds); the documented bound is 5 s.
    let t0 = Instant::now();
    let refused = wait_until(PG_WAIT, || bearer_call(&a, &first).status == 401);
    assert!(refused, "the old key still works on a after {PG_WAIT:?}");
    eprintln!(
        "old key refused on a {:?} after b regenerated it",
        t0.elapsed()
    );
    bearer_call(&a, &second).status_is(200);
    bearer_call(&b, &second).status_is(200);

    // A key deleted by hand (psql) stops too: the trigger notifies.
    db.psql("DELETE FROM trigd_app_keys");
    let gone = wait_until(PG_WAIT, || {
        bearer_call(&a, &second).status == 401 && bearer_call(&b, &second).status == 401
    });
    assert!(gone, "a deleted key still works");
}

#[test]
fn a_revoked_key_and_a_leavers_key_stop_on_every_instance() {
    let (db, [(da, a), (db_dir, b)]) = two("pg_revoke");
    let key = app_key_cli(&da);
    bearer_call(&b, &key).status_is(200);
    key_cli(&da, "revoke-app-key");
    let gone = wait_until(PG_WAIT, || {
        bearer_call(&a, &key).status == 401 && bearer_call(&b, &key).status == 401
    });
    assert!(gone, "a revoked key still works");
    // alice leaves ops in b's config: b's reload deletes her key.
    let key = app_key_cli(&da);
    bearer_call(&a, &key).status_is(200);
    let without = instance_config("b").replace(
        "name = \"ops\"\nmembers = [\"alice\"]",
        "name = \"ops\"\nmembers = []",
    );
    let state = db.state_toml(&db_dir.root, "lease = \"1h\"");
    db_dir.write("config.toml", &format!("{without}{state}"));
    let rows = |db: &PgDb| db.count("SELECT count(*) FROM trigd_app_keys WHERE member = 'alice'");
    let deleted = wait_until(PG_WAIT, || {
        b.get("/healthz");
        rows(&db) == 0
    });
    assert!(deleted, "b's reload kept the leaver's key");
    let refused = wait_until(PG_WAIT, || bearer_call(&a, &key).status == 401);
    assert!(refused, "the leaver's key still works on a");
}

#[test]
fn a_bearer_request_costs_no_database_round_trip_once_the_watcher_listens() {
    let (_pg, [(da, a), (_db, _b)]) = two("pg_app_key_cost");
    let key = app_key_cli(&da);
    // The watcher connects within a second or so; until then each lookup
    // asks the database once.
    let mut costs = Vec::new();
    let free = wait_until(PG_WAIT, || {
        costs.push(lookup_cost(&a, &key));
        costs.len() >= 2 && costs[costs.len() - 2..] == [0, 0]
    });
    assert!(free, "bearer lookups kept costing round trips: {costs:?}");
    // A wrong key is refused from the copy too (its failure is counted
    // in the shared window: that is one statement, only on a failure).
    let before = round_trips(&a);
    bearer_call(&a, "tk_not-a-key").err(401, "unauthorized");
    assert_eq!(round_trips(&a) - before, 1, "only the failure's count");
}

/// The session token in a login's `Set-Cookie`.
fn login(t: &Trigd) -> String {
    let r = t.request(
        "POST",
        "/login",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        b"username=alice&password=alice-pw",
    );
    r.ok();
    let c = r.header("set-cookie").unwrap_or("").to_string();
    c.strip_prefix("trigd_session=")
        .and_then(|rest| rest.split(';').next())
        .unwrap_or_else(|| r.fail("no session cookie"))
        .to_string()
}

/// The settings page with the session `token`, as a browser (a missing
/// session is a 303 to the login page) or not (a 401, errors in JSON).
fn page(t: &Trigd, token: &str, browser: bool) -> Reply {
    let cookie = format!("trigd_session={token}");
    let mut h = vec![("Cookie", cookie.as_str())];
    if browser {
        h.push(("Accept", "text/html"));
    }
    t.request("GET", "/workspaces/ops/settings", &h, b"")
}

#[test]
fn a_session_started_on_one_instance_works_on_the_other_and_ends_on_both_at_logout() {
    let (db, [(_da, a), (_db, b)]) = two("pg_sessions");
    let token = login(&a);
    assert_eq!(
        db.count(&format!(
            "SELECT count(*) FROM trigd_sessions WHERE token_sha256 = '{}'",
            sha256_hex(&token)
        )),
        1,
        "kept by its sha256"
    );
    assert_eq!(
        db.count(&format!(
            "SELECT count(*) FROM trigd_sessions t WHERE t::text LIKE '%{token}%'"
        )),
        0,
        "never the token"
    );
    page(&a, &token, true).status_is(200);
    let r = page(&b, &token, true);
    r.status_is(200);
    let text = r.text();
    let at = text.find("name=\"csrf\" value=\"").expect("csrf field") + 19;
    let csrf = &text[at..at + 64];
    let cookie = format!("trigd_session={token}");
    let body = format!("csrf={csrf}");
    b.request(
        "POST",
        "/logout",
        &[
            ("Cookie", &cookie),
            ("Accept", "text/html"),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        body.as_bytes(),
    )
    .status_is(303);
    // Ended in the database: no instance finds it.
    page(&a, &token, true).status_is(303);
    page(&b, &token, false).err(401, "unauthorized");
    assert_eq!(db.count("SELECT count(*) FROM trigd_sessions"), 0);
}

fn failed_login(t: &Trigd, password: &str) -> Reply {
    let body = format!("username=alice&password={password}");
    t.request(
        "POST",
        "/login",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        body.as_bytes(),
    )
}

#[test]
fn failed_logins_spread_over_two_instances_throttle_like_one() {
    let (_pg, [(_da, a), (_db, b)]) = two("pg_login_throttle");
    // Five failures for alice (the per-name limit), alternating.
    for i in 0..5 {
        let t = if i % 2 == 0 { &a } else { &b };
        failed_login(t, "wrong").err(401, "login_failed");
    }
    // Each instance saw at most three: one host's limiter would let the
    // right password in; the cluster's refuses it on both.
    for t in [&a, &b] {
        let r = failed_login(t, "alice-pw");
        r.err(429, "rate_limited");
        let wait: u64 = r.header("retry-after").unwrap().parse().unwrap();
        assert!((1..=60).contains(&wait), "Retry-After {wait}");
    }
}

/// 20 wrong passwords for alice sent at once over both instances: each
/// attempt counts when it arrives, so exactly the per-name limit (5) has
/// its password checked, as sequential ones would (all 20 were checked
/// when the cluster's count was read first and written at the failure).
#[test]
fn failed_logins_sent_at_once_over_two_instances_stop_at_the_limit() {
    let (_pg, [(_da, a), (_db, b)]) = two("pg_login_burst");
    let statuses: Vec<u16> = std::thread::scope(|s| {
        let calls: Vec<_> = (0..20)
            .map(|i| {
                let t = if i % 2 == 0 { &a } else { &b };
                s.spawn(move || failed_login(t, "wrong").status)
            })
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    let checked = statuses.iter().filter(|&&s| s == 401).count();
    let limited = statuses.iter().filter(|&&s| s == 429).count();
    assert_eq!((checked, limited), (5, 15), "{statuses:?}");
}

/// `GET /api/runs/<nobody's id>` with `key`: 404 when admitted, 429 when
/// the key's rate is spent.
fn rate_probe(t: &Trigd, key: &str) -> u16 {
    let r = t.get(&format!(
        "/api/runs/0123456789abcdef0123456789abcdef?api_key={key}"
    ));
    assert!(
        r.status == 404 || r.status == 429,
        "unexpected {}: {}",
        r.status,
        r.text()
    );
    r.status
}

/// Alternate `n` probes over both instances; how many were admitted and
/// the round trips they cost.
fn spread(a: &Trigd, b: &Trigd, key: &str, n: usize) -> (usize, u64) {
    let before = round_trips(a) + round_trips(b);
    let admitted = (0..n)
        .filter(|i| rate_probe(if i % 2 == 0 { a } else { b }, key) == 404)
        .count();
    let after = round_trips(a) + round_trips(b);
    (admitted, after - before)
}

#[test]
fn a_rate_limit_spread_over_two_instances_admits_the_rate_not_twice_it() {
    let (_pg, [(_da, a), (_db, b)]) = two("pg_rate_limits");
    // What a status read costs without a rate (the read itself).
    let (_, base) = spread(&a, &b, KEY, 10);
    let base = base / 10;
    let t0 = Instant::now();
    // R = 10: leases of one token, exact.
    let (admitted, trips) = spread(&a, &b, KEY_R10, 30);
    assert_eq!(admitted, 10, "rate_per_minute = 10 over two instances");
    // R = 200: leases of 4 tokens; at most R, at least R - 2·(4 - 1).
    let (admitted200, trips200) = spread(&a, &b, KEY_R200, 400);
    let took = t0.elapsed();
    eprintln!(
        "R=10: {admitted} of 30 admitted, {trips} round trips; \
         R=200: {admitted200} of 400 admitted, {trips200} round trips; \
         a read without a rate costs {base}; {took:?}"
    );
    if took < Duration::from_secs(55) {
        // Within one window (a slower machine would start a second one).
        assert!(
            (194..=200).contains(&admitted200),
            "rate_per_minute = 200 over two instances admitted {admitted200}"
        );
        let leases = trips200 - base * admitted200 as u64;
        assert!(
            leases <= 200 / 4 + 10,
            "a lease of 4 costs one round trip: {leases} for the rate"
        );
    }
}

#[test]
fn while_the_database_is_down_logins_and_sessions_answer_503_and_come_back() {
    let pg = Pg::start("pg_shared_down");
    let db = pg.database("down");
    let dir = instance(&db, "pg_shared_down", "a");
    let t = Trigd::start(&dir);
    let token = login(&t);
    let key = app_key_cli(&dir);
    bearer_call(&t, &key).status_is(200);
    pg.stop(true);
    let r = failed_login(&t, "alice-pw");
    r.err(503, "state_unavailable");
    r.check(r.header("retry-after").is_some(), "Retry-After");
    page(&t, &token, false).err(503, "state_unavailable");
    // Bearer keys: once the copy is unconfirmed for 5 s (fail closed: a
    // revocation could not be seen).
    let closed = wait_until(PG_WAIT, || bearer_call(&t, &key).status == 503);
    assert!(closed, "a bearer key kept working with the database down");
    let config = dir.path_str("config.toml");
    let out = trigd(
        &[
            "app-key",
            "--workspace",
            "ops",
            "--member",
            "alice",
            "--config",
            &config,
        ],
        None,
    );
    out.check(out.code != Some(0), "app-key without the database fails");
    out.check(
        out.stderr.contains("database"),
        "and says it is the database",
    );
    pg.start_again();
    // The watcher reconnects after a backoff of up to 10 s.
    let back = wait_until(PG_WAIT, || {
        page(&t, &token, false).status == 200 && bearer_call(&t, &key).status == 200
    });
    assert!(
        back,
        "the session and the key work again once the database is back"
    );
    login(&t);
}

#[test]
fn the_runs_page_of_every_instance_lists_the_runs_of_all() {
    let (_pg, [(_da, a), (_db, b)]) = two("pg_runs_page");
    let url = format!("/api?api_key={KEY}&program_id=1&function=quick");
    let on_a = a.post(&url).ok()["Run"].as_str().unwrap().to_string();
    let on_b = b.post(&url).ok()["Run"].as_str().unwrap().to_string();
    let token = login(&a);
    let cookie = format!("trigd_session={token}");
    for t in [&a, &b] {
        let r = t.request(
            "GET",
            "/runs",
            &[("Cookie", &cookie), ("Accept", "text/html")],
            b"",
        );
        r.status_is(200);
        let text = r.text();
        for id in [&on_a, &on_b] {
            r.check(text.contains(id.as_str()), format!("run {id} listed"));
        }
        for id in [&on_a, &on_b] {
            let page = format!("/runs/{id}");
            t.request(
                "GET",
                &page,
                &[("Cookie", &cookie), ("Accept", "text/html")],
                b"",
            )
            .status_is(200);
        }
    }
}

#[test]
fn a_database_session_ends_after_session_idle_and_hostile_cookies_are_refused() {
    let db = pg_database("pg_session_idle");
    let dir = instance(&db, "pg_session_idle", "a");
    let text = dir.read("config.toml").replace(
        "instance = \"a\"",
        "instance = \"a\"\nsession_idle = \"3s\"",
    );
    dir.write("config.toml", &text);
    let t = Trigd::start(&dir);
    let token = login(&t);
    page(&t, &token, false).status_is(200);
    // Idle as the database's clock counts it: never less than this sleep.
    // (3 s: the first use right after the login must come within it, also
    // on a loaded machine.)
    std::thread::sleep(Duration::from_millis(3500));
    page(&t, &token, false).err(401, "unauthorized");
    assert_eq!(
        db.count("SELECT count(*) FROM trigd_sessions"),
        0,
        "an ended session is removed when it is seen"
    );
    for bad in [
        "x".repeat(6000),
        "'; DROP TABLE trigd_sessions; --".to_string(),
        "%00%ff\\\"".to_string(),
    ] {
        page(&t, &bad, false).err(401, "unauthorized");
    }
    assert_eq!(db.count("SELECT count(*) FROM trigd_sessions"), 0);
}

#[test]
fn failed_authentications_spread_over_two_instances_are_refused_after_f_plus_one() {
    let db = pg_database("pg_auth_failures");
    let dirs: Vec<TestDir> = ["a", "b"]
        .iter()
        .map(|n| {
            let dir = instance(&db, "pg_auth_failures", n);
            let text = dir.read("config.toml").replace(
                &format!("instance = \"{n}\""),
                &format!("instance = \"{n}\"\nauth_failures_per_minute = 4"),
            );
            dir.write("config.toml", &text);
            dir
        })
        .collect();
    let (a, b) = (Trigd::start(&dirs[0]), Trigd::start(&dirs[1]));
    let probe = |t: &Trigd, key: &str| {
        t.get(&format!(
            "/api/runs/0123456789abcdef0123456789abcdef?api_key={key}"
        ))
    };
    // F = 4 failures, two on each: b counts the fourth and refuses.
    for i in 0..4 {
        let t = if i % 2 == 0 { &a } else { &b };
        probe(t, "wrong-key").err(401, "invalid_api_key");
    }
    probe(&b, KEY).err(429, "rate_limited");
    // a has seen two; it lets one more failure through (F + N - 1 for
    // the cluster), learns the count, and refuses from then on.
    probe(&a, "wrong-key").err(401, "invalid_api_key");
    probe(&a, KEY).err(429, "rate_limited");
    probe(&a, "wrong-key").err(429, "rate_limited");
}
