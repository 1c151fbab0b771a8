//! Tools (docs/tools.md):
//! generated endpoints per environment, values by output name, public and protected access with bearer application keys
//! and the User-Agent rule, `trigd app-key` against a running server, the
//! key file, the endpoint view, and traversal attempts in names.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use serde_json::{json, Value};

use crate::util::*;

/// Any argon2 PHC string passes validation; nobody logs in here.
const HASH: &str = "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA";

/// A User-Agent that passes the rule.
const UA: (&str, &str) = ("User-Agent", "tools-test/1.0");

/// Users alice and bob (workspace ops) and carol (workspace dev); tool
/// `inventory` of ops with a protected `production` and a public `staging`;
/// tool `notes` of dev; the key [`KEY`] for `/api/runs`.
fn tools_config(server: &str) -> String {
    format!(
        r#"[server]
max_variable_bytes = 16
{server}

[[users]]
name = "alice"
password = "{HASH}"

[[users]]
name = "bob"
password = "{HASH}"

[[users]]
name = "carol"
password = "{HASH}"

[[workspaces]]
name = "ops"
members = ["alice", "bob"]

[[workspaces]]
name = "dev"
members = ["carol"]

[[api_keys]]
name = "all"
sha256 = "{all}"

[[tools]]
name = "inventory"
workspace = "ops"
[tools.environments.production]
public = false
vars = {{ DB_PATH = "/var/lib/inv.db" }}
[tools.environments.staging]
public = true
vars = {{ DB_PATH = "/tmp/inv.db" }}
[[tools.triggers]]
kind = "endpoint"
name = "list-items"
method = "GET"
program = 2
function = "list"
[[tools.triggers]]
kind = "endpoint"
name = "add-item"
method = "POST"
program = 2
function = "add"
[[tools.triggers]]
kind = "endpoint"
name = "record"
method = "POST"
program = 2
function = "record"

[[tools]]
name = "notes"
workspace = "dev"
[tools.environments.main]
[[tools.triggers]]
kind = "endpoint"
name = "list"
method = "GET"
program = 2
function = "list"
"#,
        all = sha256_hex(KEY),
    )
}

/// Program 2: `list` prints `$DB_PATH`; `add` prints it with its two values;
/// `record` writes `$DB_PATH` to `work/out-<tag>`.
const INV: &str = r#"
id = 2
name = "inv"
workspace = "ops"

[[functions]]
name = "list"
steps = [{ shell = 'printf "%s" "$DB_PATH"' }]

[[functions]]
name = "add"
steps = [{ shell = 'printf "%s|%s|%s" "$DB_PATH" "$item" "$qty"' }]
[functions.webhook]
active = false
outputs = ["item", "qty"]

[[functions]]
name = "record"
workdir = "../work"
steps = [{ shell = 'printf "%s" "$DB_PATH" > "out-$tag.tmp" && mv "out-$tag.tmp" "out-$tag"' }]
[functions.webhook]
active = false
outputs = ["tag"]
"#;

/// A test dir with [`tools_config`]`(server)` and program 2, and a server.
fn start(name: &str, server: &str) -> (TestDir, Trigd) {
    let dir = TestDir::new(name);
    dir.write("config.toml", &tools_config(server));
    dir.write("programs/inv.toml", INV);
    dir.mkdir("work");
    let t = Trigd::start(&dir);
    (dir, t)
}

/// `trigd app-key` for `member` of `workspace`; the key it prints.
fn app_key(dir: &TestDir, workspace: &str, member: &str) -> String {
    let config = dir.path_str("config.toml");
    let out = trigd(
        &[
            "app-key",
            "--workspace",
            workspace,
            "--member",
            member,
            "--config",
            &config,
        ],
        None,
    );
    out.code_is(0);
    let key = out.stdout.trim().to_string();
    out.check(
        !key.is_empty() && !key.contains(char::is_whitespace) && out.stdout.lines().count() == 1,
        "stdout is one line holding the key",
    );
    key
}

fn bearer(key: &str) -> String {
    format!("Bearer {key}")
}

/// `method path` with a bearer key and a valid User-Agent.
fn call(t: &Trigd, method: &str, path: &str, key: &str, body: &[u8]) -> Reply {
    let auth = bearer(key);
    t.request(method, path, &[("Authorization", &auth), UA], body)
}

/// The Result of a successful sync run.
#[track_caller]
fn result(r: &Reply) -> Value {
    let v = r.ok();
    r.check_eq(&v["Success"], &json!("Program finished."), "Success");
    r.run_id(&v);
    v["Result"].clone()
}

// ---------------------------------------------------------------------------
// Environments and values

#[test]
fn each_environment_passes_its_own_vars() {
    let (dir, t) = start("tools_vars", "");
    let staging = t.get("/tools/inventory/staging/list-items");
    staging.check_eq(result(&staging), json!(["/tmp/inv.db"]), "staging Result");
    let key = app_key(&dir, "ops", "alice");
    let prod = call(
        &t,
        "GET",
        "/tools/inventory/production/list-items",
        &key,
        b"",
    );
    prod.check_eq(
        result(&prod),
        json!(["/var/lib/inv.db"]),
        "production Result",
    );
}

#[test]
fn values_come_by_name_from_query_body_or_both() {
    let (_dir, t) = start("tools_values", "");
    let url = "/tools/inventory/staging/add-item";
    let json_ct = ("Content-Type", "application/json");
    let r = t.post(&format!("{url}?item={}&qty=3", enc("a b&c")));
    r.check_eq(result(&r), json!(["/tmp/inv.db|a b&c|3"]), "query");
    let r = t.request("POST", url, &[json_ct], br#"{"qty": "4", "item": "$(id)"}"#);
    r.check_eq(result(&r), json!(["/tmp/inv.db|$(id)|4"]), "body");
    let r = t.request(
        "POST",
        &format!("{url}?item=x"),
        &[json_ct],
        br#"{"qty": "5"}"#,
    );
    r.check_eq(result(&r), json!(["/tmp/inv.db|x|5"]), "query and body");
    // run_async is not a value.
    let r = t.post(&format!("{url}?item=y&qty=6&run_async=false"));
    r.check_eq(result(&r), json!(["/tmp/inv.db|y|6"]), "run_async=false");
}

#[test]
fn wrong_values_are_400_listing_the_outputs() {
    let (_dir, t) = start("tools_bad_values", "");
    let url = "/tools/inventory/staging/add-item";
    let cases: [(&str, &str, &[u8], &str); 7] = [
        ("missing", "?item=a", b"", "qty"),
        ("none at all", "", b"", "item"),
        ("extra", "?item=a&qty=1&color=red", b"", "color"),
        ("non-string", "", br#"{"item": "a", "qty": 1}"#, "qty"),
        ("repeated in query", "?item=a&item=b&qty=1", b"", "item"),
        (
            "in query and body",
            "?item=a&qty=1",
            br#"{"item": "b"}"#,
            "item",
        ),
        ("body not an object", "", br#"["a", "1"]"#, "object"),
    ];
    for (what, query, body, named) in cases {
        let r = t.request("POST", &format!("{url}{query}"), &[], body);
        let v = r.err(400, "variables_mismatch");
        r.check_eq(
            &v["Outputs"],
            &json!(["item", "qty"]),
            &format!("{what}: Outputs"),
        );
        let msg = v["Error"].as_str().unwrap_or_default();
        r.check(
            msg.contains(named),
            format!("{what}: the message names {named:?}"),
        );
    }
}

#[test]
fn an_oversized_value_is_invalid_parameter_as_on_the_run_endpoint() {
    let (_dir, t) = start("tools_oversized", "");
    let r = t.post("/tools/inventory/staging/add-item?item=aaaaaaaaaaaaaaaaa&qty=1");
    let v = r.err(400, "invalid_parameter");
    r.check_eq(&v["Parameter"], &json!("item"), "Parameter names the value");
    let msg = v["Error"].as_str().unwrap_or_default();
    r.check(msg.contains("16 bytes"), "the message gives the limit");
}

#[test]
fn wrong_method_is_405_with_allow() {
    let (dir, t) = start("tools_method", "");
    let r = t.post("/tools/inventory/staging/list-items");
    let v = r.err(405, "method_not_allowed");
    r.check_eq(r.header("Allow"), Some("GET"), "Allow header");
    r.check_eq(&v["Allow"], &json!(["GET"]), "Allow field");
    // On a protected environment, authentication comes first: nothing about
    // its triggers is revealed to a caller without credentials.
    let r = t.request("DELETE", "/tools/inventory/production/add-item", &[], b"");
    r.err(401, "unauthorized");
    let key = app_key(&dir, "ops", "bob");
    let r = call(
        &t,
        "DELETE",
        "/tools/inventory/production/add-item",
        &key,
        b"",
    );
    r.err(405, "method_not_allowed");
    r.check_eq(r.header("Allow"), Some("POST"), "Allow header");
}

#[test]
fn unknown_tool_environment_or_trigger_is_404() {
    let (_dir, t) = start("tools_unknown", "");
    for path in [
        "/tools/nope/staging/list-items",
        "/tools/inventory/nope/list-items",
        "/tools/inventory/staging/nope",
        "/tools/nope/endpoints",
    ] {
        t.get(path).err(404, "not_found");
    }
}

#[test]
fn run_async_starts_the_program_and_it_completes() {
    let (dir, t) = start("tools_async", "");
    let key = app_key(&dir, "ops", "bob");
    let r = call(
        &t,
        "POST",
        "/tools/inventory/production/record?run_async=true",
        &key,
        br#"{"tag": "t1"}"#,
    );
    let v = r.ok();
    r.check_eq(&v["Success"], &json!("Program started."), "Success");
    r.check(v.get("Result").is_none(), "no Result for an async run");
    let id = r.run_id(&v);
    // The file is read once the run has ended: found while the shell
    // writes it, it can still be empty.
    let last = wait_run_state(&t, &id, "finished");
    assert_eq!(dir.read("work/out-t1"), "/var/lib/inv.db");
    assert_eq!(last["Program"], json!(2), "{last}");
    assert_eq!(last["Function"], json!("record"), "{last}");
}

// ---------------------------------------------------------------------------
// Access

#[test]
fn public_environment_needs_no_credentials() {
    let (_dir, t) = start("tools_public", "");
    // No Authorization, no User-Agent.
    let r = t.get("/tools/inventory/staging/list-items");
    result(&r);
}

#[test]
fn protected_environment_without_credentials_is_401() {
    let (dir, t) = start("tools_401", "");
    let url = "/tools/inventory/production/list-items";
    let key = app_key(&dir, "ops", "alice");
    let cases: [(&str, Vec<(&str, &str)>); 4] = [
        ("no credentials", vec![UA]),
        ("unknown key", vec![("Authorization", "Bearer tk_nope"), UA]),
        ("empty bearer", vec![("Authorization", "Bearer "), UA]),
        (
            "basic scheme",
            vec![("Authorization", "Basic YWxpY2U6eA=="), UA],
        ),
    ];
    for (what, headers) in cases {
        let r = t.request("GET", url, &headers, b"");
        r.err(401, "unauthorized");
        let www = r.header("WWW-Authenticate").unwrap_or_default();
        r.check(
            www.starts_with("Bearer"),
            format!("{what}: WWW-Authenticate Bearer"),
        );
        let v = r.json();
        r.check(v.get("Result").is_none(), format!("{what}: nothing ran"));
    }
    // The key itself works.
    result(&call(&t, "GET", url, &key, b""));
}

#[test]
fn bearer_without_a_valid_user_agent_is_403() {
    let (dir, t) = start("tools_ua", "");
    let url = "/tools/inventory/production/list-items";
    let key = app_key(&dir, "ops", "alice");
    let auth = bearer(&key);
    let cases: [(&str, Vec<(&str, &str)>); 3] = [
        ("no User-Agent", vec![("Authorization", &auth)]),
        ("empty", vec![("Authorization", &auth), ("User-Agent", "")]),
        (
            "blank",
            vec![("Authorization", &auth), ("User-Agent", "   ")],
        ),
    ];
    // A control byte in any header value is refused before trigd reads it.
    let bad = [
        ("Authorization", auth.as_str()),
        ("User-Agent", "bad\x01agent"),
    ];
    t.request("GET", url, &bad, b"").err(400, "bad_request");
    for (what, headers) in cases {
        let r = t.request("GET", url, &headers, b"");
        let v = r.err(403, "user_agent_required");
        let msg = v["Error"].as_str().unwrap_or_default();
        r.check(
            msg.contains("User-Agent"),
            format!("{what}: the message says to send a User-Agent"),
        );
    }
}

/// A User-Agent that is not printable ASCII gets 403 `user_agent_required`
/// (the patched tiny_http passes header bytes outside ASCII on as DEL
/// instead of closing the connection unanswered).
#[test]
fn non_ascii_user_agent_is_403() {
    let (dir, t) = start("tools_ua_utf8", "");
    let key = app_key(&dir, "ops", "alice");
    let auth = bearer(&key);
    let headers = [
        ("Authorization", auth.as_str()),
        ("User-Agent", "caf\u{e9}/1.0"),
    ];
    let r = t
        .client()
        .try_request(
            "GET",
            "/tools/inventory/production/list-items",
            &headers,
            b"",
        )
        .unwrap_or_else(|e| t.fail(format!("no reply: {e}")));
    r.err(403, "user_agent_required");
}

#[test]
fn key_of_another_workspace_is_403() {
    let (dir, t) = start("tools_403", "");
    let carol = app_key(&dir, "dev", "carol");
    let r = call(
        &t,
        "GET",
        "/tools/inventory/production/list-items",
        &carol,
        b"",
    );
    r.err(403, "forbidden");
    // Her key works on her own workspace's tool.
    let r = call(&t, "GET", "/tools/notes/main/list", &carol, b"");
    r.check_eq(result(&r), json!([""]), "notes Result (no vars)");
    // And an ops key does not reach dev.
    let alice = app_key(&dir, "ops", "alice");
    call(&t, "GET", "/tools/notes/main/list", &alice, b"").err(403, "forbidden");
}

#[test]
fn key_of_a_removed_member_stops_working_after_reload() {
    let (dir, t) = start("tools_removed_member", "");
    let url = "/tools/inventory/production/list-items";
    let bob = app_key(&dir, "ops", "bob");
    result(&call(&t, "GET", url, &bob, b""));
    let text = dir
        .read("config.toml")
        .replace(r#"members = ["alice", "bob"]"#, r#"members = ["alice"]"#);
    dir.write("config.toml", &text);
    let mut last = None;
    if !wait_until(WAIT, || {
        let r = call(&t, "GET", url, &bob, b"");
        // His key is revoked by the reload: unknown from then on.
        let done = r.status == 401;
        last = Some(r);
        done
    }) {
        last.expect("polled")
            .fail("bob still gets in after leaving the workspace")
    }
    last.expect("polled").err(401, "unauthorized");
}

// ---------------------------------------------------------------------------
// trigd app-key and the key file

#[test]
fn app_key_works_at_once_and_regenerating_revokes_the_old_key() {
    let (dir, t) = start("tools_app_key", "");
    let url = "/tools/inventory/production/list-items";
    // The server is running before any key exists.
    t.get("/healthz").ok();
    let k1 = app_key(&dir, "ops", "alice");
    result(&call(&t, "GET", url, &k1, b""));
    let k2 = app_key(&dir, "ops", "alice");
    assert_ne!(k1, k2, "a new key each time");
    call(&t, "GET", url, &k1, b"").err(401, "unauthorized");
    result(&call(&t, "GET", url, &k2, b""));
    // Another member's key is independent.
    let b1 = app_key(&dir, "ops", "bob");
    result(&call(&t, "GET", url, &b1, b""));
    result(&call(&t, "GET", url, &k2, b""));
}

#[test]
fn a_member_who_leaves_loses_the_key_for_good() {
    let (dir, mut t) = start("tools_leaver", "");
    let url = "/tools/inventory/production/list-items";
    let both = tools_config("");
    let without = |who: &str| {
        let left = if who == "alice" { "bob" } else { "alice" };
        both.replace(
            r#"members = ["alice", "bob"]"#,
            &format!("members = [\"{left}\"]"),
        )
    };
    let alice = app_key(&dir, "ops", "alice");
    let bob = app_key(&dir, "ops", "bob");
    result(&call(&t, "GET", url, &alice, b""));
    // alice leaves ops: a reload revokes her key (a call after a change
    // waits for its reload), and says so.
    dir.write("config.toml", &without("alice"));
    t.wait_for(
        std::time::Duration::from_secs(30),
        "alice's key refused as unknown",
        || call(&t, "GET", url, &alice, b"").status == 401,
    );
    t.wait_for(
        std::time::Duration::from_secs(10),
        "the revocation logged",
        || {
            t.stderr_tail()
                .contains("application key of alice in ops revoked: no longer a member")
        },
    );
    result(&call(&t, "GET", url, &bob, b""));
    // Added again, she does not get the old key back.
    dir.write("config.toml", &both);
    t.wait_for(
        std::time::Duration::from_secs(30),
        "alice a member again",
        || {
            let fresh = app_key(&dir, "ops", "alice");
            call(&t, "GET", url, &fresh, b"").status == 200
        },
    );
    call(&t, "GET", url, &alice, b"").err(401, "unauthorized");
    // bob leaves while trigd is stopped: revoked at the next start.
    t.kill9();
    dir.write("config.toml", &without("bob"));
    t.restart();
    call(&t, "GET", url, &bob, b"").err(401, "unauthorized");
    let file = dir.read("state/app_keys.json");
    assert!(!file.contains(&sha256_hex(&bob)), "bob's hash kept: {file}");
}

#[test]
fn revoke_app_key_stops_the_key_at_once() {
    let (dir, t) = start("tools_revoke", "");
    let url = "/tools/notes/main/list";
    let carol = app_key(&dir, "dev", "carol");
    result(&call(&t, "GET", url, &carol, b""));
    let config = dir.path_str("config.toml");
    let revoke = |who: &str| {
        trigd(
            &[
                "revoke-app-key",
                "--workspace",
                "dev",
                "--member",
                who,
                "--config",
                &config,
            ],
            None,
        )
    };
    let out = revoke("carol");
    out.code_is(0);
    out.check(
        out.stderr
            .contains("Application key for carol in dev revoked"),
        "says it revoked",
    );
    call(&t, "GET", url, &carol, b"").err(401, "unauthorized");
    // Nothing left to revoke: said, not an error.
    let out = revoke("carol");
    out.code_is(0);
    out.check(
        out.stderr.contains("nothing to revoke"),
        "says there was none",
    );
    // A new key works again.
    let again = app_key(&dir, "dev", "carol");
    result(&call(&t, "GET", url, &again, b""));
}

#[test]
fn key_file_holds_only_hashes_with_mode_0600() {
    let (dir, _t) = start("tools_key_file", "");
    let k = app_key(&dir, "ops", "alice");
    let old = app_key(&dir, "ops", "bob");
    let new = app_key(&dir, "ops", "bob");
    let path = dir.path("state/app_keys.json");
    let text = dir.read("state/app_keys.json");
    for key in [&k, &old, &new] {
        assert!(!text.contains(key.as_str()), "a key in clear: {text}");
        // Not even the random part without its prefix.
        let secret = key.trim_start_matches("tk_");
        assert!(
            !text.contains(&secret[..16]),
            "part of a key in clear: {text}"
        );
    }
    assert!(text.contains(&sha256_hex(&k)), "alice's hash: {text}");
    assert!(text.contains(&sha256_hex(&new)), "bob's new hash: {text}");
    assert!(
        !text.contains(&sha256_hex(&old)),
        "bob's old hash is gone: {text}"
    );
    let mode = fs::metadata(&path).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "mode of {}", path.display());
}

#[test]
fn app_key_refuses_unknown_workspace_or_member() {
    let (dir, _t) = start("tools_app_key_bad", "");
    let config = dir.path_str("config.toml");
    for (ws, member) in [("nope", "alice"), ("dev", "alice"), ("ops", "nobody")] {
        let out = trigd(
            &[
                "app-key",
                "--workspace",
                ws,
                "--member",
                member,
                "--config",
                &config,
            ],
            None,
        );
        out.code_is(1);
        out.check(out.stdout.is_empty(), "no key printed");
    }
}

// ---------------------------------------------------------------------------
// Endpoint view

/// Every environment with its switch, and every endpoint, as JSON.
fn check_view(r: &Reply, base: &str) {
    let v = r.ok();
    r.check_eq(&v["Tool"], &json!("inventory"), "Tool");
    let envs = v["Environments"].as_array().cloned().unwrap_or_default();
    let mut seen = Vec::new();
    for env in &envs {
        let name = env["Name"].as_str().unwrap_or_default();
        let public = name == "staging";
        r.check_eq(&env["Public"], &json!(public), &format!("{name}: Public"));
        let access = if public { "public" } else { "protected" };
        let eps = env["Endpoints"].as_array().cloned().unwrap_or_default();
        let mut got: Vec<(String, String, String)> = eps
            .iter()
            .map(|e| {
                r.check_eq(&e["Access"], &json!(access), &format!("{name}: Access"));
                let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
                (s("Method"), s("Url"), s("Name"))
            })
            .collect();
        got.sort();
        let want: Vec<(String, String, String)> = [
            ("GET", "list-items"),
            ("POST", "add-item"),
            ("POST", "record"),
        ]
        .iter()
        .map(|(m, n)| {
            let url = format!("{base}/tools/inventory/{name}/{n}");
            (m.to_string(), url, n.to_string())
        })
        .collect::<Vec<_>>();
        let mut want = want;
        want.sort();
        r.check_eq(got, want, &format!("{name}: endpoints (Method, Url, Name)"));
        seen.push(name.to_string());
    }
    seen.sort();
    r.check_eq(
        seen,
        vec!["production".to_string(), "staging".to_string()],
        "environments",
    );
}

#[test]
fn endpoint_view_lists_environments_and_endpoints() {
    let (dir, t) = start("tools_view", "");
    let key = app_key(&dir, "ops", "bob");
    let accept = ("Accept", "application/json");
    let auth = bearer(&key);
    let r = t.request(
        "GET",
        "/tools/inventory/endpoints",
        &[("Authorization", &auth), UA, accept],
        b"",
    );
    check_view(&r, &format!("http://{}", t.addr));
    // Each listed URL answers as listed (the public one without credentials).
    let r = t.get("/tools/inventory/staging/list-items");
    result(&r);
}

#[test]
fn endpoint_view_uses_public_url() {
    let (dir, t) = start(
        "tools_view_url",
        "public_url = \"https://trigd.example.com/base/\"",
    );
    let key = app_key(&dir, "ops", "alice");
    let r = call(&t, "GET", "/tools/inventory/endpoints", &key, b"");
    check_view(&r, "https://trigd.example.com/base");
}

#[test]
fn endpoint_view_is_for_members_only() {
    let (dir, t) = start("tools_view_access", "");
    let url = "/tools/inventory/endpoints";
    t.request("GET", url, &[UA], b"").err(401, "unauthorized");
    let carol = app_key(&dir, "dev", "carol");
    call(&t, "GET", url, &carol, b"").err(403, "forbidden");
    call(&t, "GET", url, "tk_0000", b"").err(401, "unauthorized");
}

// ---------------------------------------------------------------------------
// Names

#[test]
fn traversal_in_names_is_404_json() {
    let (dir, t) = start("tools_traversal", "");
    let key = app_key(&dir, "ops", "alice");
    for path in [
        "/tools/../api",
        &format!("/tools/../api?api_key={KEY}&program_id=2"),
        "/tools/inventory/%2e%2e/list-items",
        "/tools/inventory/staging/%2e%2e",
        "/tools/inventory/production%2Fx/list-items",
        "/tools/inventory/production/..%2f..%2fapi",
        "/tools/inventory/staging%2f..%2fproduction/list-items",
        "/tools/%2e%2e/endpoints",
        "/tools/inventory/./list-items",
    ] {
        for method in ["GET", "POST"] {
            let r = call(&t, method, path, &key, b"");
            r.err(404, "not_found");
            r.check(r.json().get("Result").is_none(), "nothing ran");
        }
    }
}

#[test]
fn idempotency_key_on_a_generated_endpoint_runs_once_per_caller() {
    let (dir, t) = start("tools_idempotency", "");
    let (alice, bob) = (app_key(&dir, "ops", "alice"), app_key(&dir, "ops", "bob"));
    let path = "/tools/inventory/production/record?tag=a";
    let send = |key: &str, path: &str| {
        let auth = bearer(key);
        t.request(
            "POST",
            path,
            &[("Authorization", &auth), UA, ("Idempotency-Key", "k-1")],
            b"",
        )
    };
    let first = send(&alice, path);
    let run = first.run_id(&first.ok());
    first.check_eq(first.header("Idempotent-Replayed"), None, "first answer");
    let again = send(&alice, path);
    again.check_eq(again.run_id(&again.ok()), run.clone(), "Run of the repeat");
    again.check_eq(
        again.header("Idempotent-Replayed"),
        Some("true"),
        "replay header",
    );
    // Keys are per credential: bob's k-1 is another key.
    let other = send(&bob, path);
    other.check(other.run_id(&other.ok()) != run, "bob's request runs");
    // The same key with other values is refused.
    send(&alice, "/tools/inventory/production/record?tag=b").err(422, "idempotency_key_reused");
    assert!(
        !dir.exists("work/out-b"),
        "nothing ran for the refused request"
    );
}

// ---------------------------------------------------------------------------
// Outputs without a webhook table

/// Program 4: `greet` declares its outputs on the function and has no
/// Webhook Trigger; `echo` declares them on the function and keeps an
/// active Webhook Trigger without outputs of its own.
const OUTPUTS: &str = r#"
id = 4
name = "outs"

[[functions]]
name = "greet"
outputs = ["who", "how"]
steps = [{ shell = 'printf "%s %s" "$how" "$who"' }]

[[functions]]
name = "echo"
outputs = ["text"]
command = ["printf", "<%s>", "{text}"]
[functions.webhook]
"#;

#[test]
fn function_level_outputs_serve_every_trigger_without_a_webhook_table() {
    let dir = TestDir::new("tools_function_outputs");
    let config = format!(
        "{}\n[[tools]]\nname = \"hello\"\nworkspace = \"ops\"\n[tools.environments.main]\npublic = true\n\
         [[tools.triggers]]\nkind = \"endpoint\"\nname = \"greet\"\nmethod = \"POST\"\n\
         program = 4\nfunction = \"greet\"\n",
        config("")
    );
    dir.write("config.toml", &config);
    dir.write("programs/outs.toml", OUTPUTS);
    let t = Trigd::start(&dir);
    let r = t.post("/tools/hello/main/greet?who=you&how=hi");
    r.check_eq(result(&r), json!(["hi you"]), "values bind by name");
    let r = t.post("/tools/hello/main/greet?who=you");
    r.err(400, "variables_mismatch");
    // Without a Webhook Trigger, POST /api does not reach `greet`...
    let api = |query: &str| {
        let auth = bearer(KEY);
        t.request(
            "POST",
            &format!("/api?program_id=4{query}"),
            &[("Authorization", &auth)],
            b"",
        )
    };
    api(&format!("&function=greet{}", vars(&["a", "b"]))).err(409, "trigger_inactive");
    // ...and `echo`'s trigger takes the function's outputs by position.
    let r = api(&format!("&function=echo{}", vars(&["x y"])));
    r.check_eq(
        result(&r),
        json!(["<x y>"]),
        "POST /api binds to the outputs",
    );
    api(&format!("&function=echo{}", vars(&["a", "b"]))).err(400, "variables_mismatch");
}
