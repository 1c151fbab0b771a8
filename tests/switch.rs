//! The environment-wide public switch flipped from trigd: the operation for
//! scripts (`PUT /tools/<tool>/environments/<env>/public`), the form and
//! confirmation page of the endpoint view, the config file rewritten with
//! its layout kept, a read-only config, `admins`, CSRF, racing flips, the
//! log line and the metric; and the endpoint view for a bearer key that
//! asks for HTML.

use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Barrier};
use std::thread;

use crate::ui::{cookie, hidden, key_on, login, ui_config, HTML, INV, UA};
use crate::util::{Explain, Reply, TestDir, Trigd};

/// The endpoint view of the `inventory` tool.
const VIEW: &str = "/tools/inventory/endpoints";
const SWITCH: &str = "/tools/inventory/environments/production/public";
const FORM: (&str, &str) = ("Content-Type", "application/x-www-form-urlencoded");
/// The protected line of [`commented_config`], and the same line switched on.
const OFF_LINE: &str = "public = false   # flipped from the endpoint view";
const ON_LINE: &str = "public = true   # flipped from the endpoint view";

/// [`ui_config`] with comments, blank lines and odd spacing around the
/// production environment, and `ops` given `extra` lines (e.g. `admins`).
fn commented_config(ops: &str) -> String {
    ui_config("")
        .replacen(
            "[server]\n",
            "# Operator's config: keep these comments.\n\n[server]\n",
            1,
        )
        .replacen(
            "members = [\"alice\"]\n",
            &format!("members = [\"alice\", \"carol\"] # ops team\n{ops}"),
            1,
        )
        .replacen(
            "[tools.environments.production]\npublic = false\n",
            &format!(
                "[tools.environments.production]\n# Production: protected unless someone flips it.\n{OFF_LINE}\n\n\
                 vars = {{ DB = \"/var/lib/inv.db\" }}  # kept\n"
            ),
            1,
        )
}

fn start(name: &str, ops: &str) -> (TestDir, Trigd, String) {
    let dir = TestDir::new(name);
    let text = commented_config(ops);
    dir.write("config.toml", &text);
    dir.write("programs/inv.toml", INV);
    let t = Trigd::start(&dir);
    (dir, t, text)
}

/// Log `user` in and give them an application key for `ops`.
fn app_key(t: &Trigd, user: &str) -> String {
    app_key_in(t, user, "ops")
}

/// `GET path` as a browser with the session cookie `c`.
fn page(t: &Trigd, path: &str, c: &str) -> Reply {
    t.request("GET", path, &[("Cookie", c), HTML], b"")
}

fn put(t: &Trigd, key: &str, body: &str) -> Reply {
    let auth = format!("Bearer {key}");
    t.request(
        "PUT",
        SWITCH,
        &[
            ("Authorization", &auth),
            UA,
            ("Content-Type", "application/json"),
        ],
        body.as_bytes(),
    )
}

/// An anonymous call to a production endpoint: its status.
fn anonymous(t: &Trigd) -> u16 {
    t.get("/tools/inventory/production/list").status
}

/// The switch state the server serves, from the JSON endpoint view.
fn served_public(t: &Trigd, key: &str) -> bool {
    let auth = format!("Bearer {key}");
    let v = t
        .request(
            "GET",
            "/tools/inventory/endpoints",
            &[("Authorization", &auth), UA],
            b"",
        )
        .ok();
    let env = v["Environments"]
        .as_array()
        .and_then(|a| a.iter().find(|e| e["Name"] == "production"))
        .cloned()
        .unwrap_or_default();
    env["Public"].as_bool().expect("Public is a bool")
}

fn flips_metric(t: &Trigd, to: &str) -> u64 {
    let text = t.get("/metrics").text();
    let want = format!("trigd_public_switch_flips_total{{to=\"{to}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(want.as_str()))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {want} in /metrics:\n{text}"))
}

#[test]
fn scripts_flip_the_switch_with_a_bearer_key() {
    let (dir, t, original) = start("switch_bearer", "");
    let key = app_key(&t, "alice");
    assert_eq!(anonymous(&t), 401, "production starts protected");

    let v = put(&t, &key, r#"{"Public": true}"#).ok();
    assert_eq!(v["Tool"], "inventory");
    assert_eq!(v["Environment"], "production");
    assert_eq!(
        (v["Public"].as_bool(), v["Previous"].as_bool()),
        (Some(true), Some(false))
    );
    assert_eq!(v["Changed"], true);
    assert_eq!(anonymous(&t), 200, "public now: no credentials needed");
    let on = original.replacen(OFF_LINE, ON_LINE, 1);
    assert_eq!(dir.read("config.toml"), on, "only the one value changed");
    assert!(!dir.exists("config.toml.tmp"), "no temp file left");

    // The same state again changes nothing.
    let v = put(&t, &key, r#"{"Public":true}"#).ok();
    assert_eq!(
        (v["Changed"].as_bool(), v["Previous"].as_bool()),
        (Some(false), Some(true))
    );

    let v = put(&t, &key, r#"{"Public":false}"#).ok();
    assert_eq!(v["Public"], false);
    assert_eq!(anonymous(&t), 401, "protected again");
    assert_eq!(
        dir.read("config.toml"),
        original,
        "back to the original, byte for byte"
    );

    assert_eq!(flips_metric(&t, "on"), 1);
    assert_eq!(flips_metric(&t, "off"), 1);
    let log = std::fs::read_to_string(&t.stderr_log).unwrap();
    for want in [
        "public switch of tool inventory environment production: off -> on by app_key:alice",
        "public switch of tool inventory environment production: on -> off by app_key:alice",
    ] {
        assert_eq!(
            log.matches(want).count(),
            1,
            "one log line {want:?} in:\n{log}"
        );
    }
    assert!(!log.contains(&key), "the key is never logged");
}

#[test]
fn the_operation_refuses_bad_requests() {
    let (dir, t, original) = start("switch_bad_requests", "");
    let key = app_key(&t, "alice");
    for body in [
        "",
        "true",
        r#"{"Public":"yes"}"#,
        r#"{"Public":true,"Extra":1}"#,
        "{",
    ] {
        let e = put(&t, &key, body).err(400, "invalid_parameter");
        assert_eq!(e["Parameter"], "Public", "{body:?}");
    }
    let auth = format!("Bearer {key}");
    let body = br#"{"Public":true}"#;
    t.request("PUT", SWITCH, &[], body).err(401, "unauthorized");
    t.request(
        "PUT",
        SWITCH,
        &[("Authorization", "Bearer tk_nope"), UA],
        body,
    )
    .err(401, "unauthorized");
    t.request("PUT", SWITCH, &[("Authorization", &auth)], body)
        .err(403, "user_agent_required");
    let h = [("Authorization", auth.as_str()), UA];
    t.request("PUT", "/tools/inventory/environments/nope/public", &h, body)
        .err(404, "not_found");
    t.request(
        "PUT",
        "/tools/nope/environments/production/public",
        &h,
        body,
    )
    .err(404, "not_found");
    let e = t
        .request("GET", SWITCH, &h, b"")
        .err(405, "method_not_allowed");
    assert_eq!(e["Allow"], serde_json::json!(["PUT", "POST"]));
    // bob is in another workspace: valid credentials, not a member.
    let bob = app_key_in(&t, "bob", "dev");
    put(&t, &bob, r#"{"Public":true}"#).err(403, "forbidden");
    assert_eq!(dir.read("config.toml"), original, "nothing was written");
    assert_eq!(anonymous(&t), 401);
}

/// Like [`app_key`] for workspace `ws`.
fn app_key_in(t: &Trigd, user: &str, ws: &str) -> String {
    let c = cookie(&login(t, user));
    let page = page(t, &format!("/workspaces/{ws}/settings"), &c);
    page.status_is(200);
    let body = format!("csrf={}", hidden(&page, "csrf"));
    let r = t.request(
        "POST",
        &format!("/workspaces/{ws}/settings/application-key"),
        &[("Cookie", &c), HTML, FORM],
        body.as_bytes(),
    );
    r.status_is(200);
    key_on(&r)
}

#[test]
fn the_view_form_turns_on_through_a_confirmation_and_off_at_once() {
    let (dir, t, original) = start("switch_form", "");
    let c = cookie(&login(&t, "alice"));
    let view = || page(&t, VIEW, &c);
    let r = view();
    r.status_is(200);
    let text = r.text();
    for want in [
        &format!("action=\"{SWITCH}\"") as &str,
        "<button type=\"submit\" id=\"switch-production\">Turn on</button>",
        "<button type=\"submit\" id=\"switch-staging\">Turn off</button>",
        "id=\"switch-state-production\">off<",
    ] {
        r.check(text.contains(want), format!("the view has {want:?}"));
    }
    r.check(
        !text.contains("<script>") && !text.contains("style="),
        "no inline script or style",
    );
    let csrf = hidden(&r, "csrf");
    let post = |body: String| {
        t.request(
            "POST",
            SWITCH,
            &[("Cookie", &c), HTML, FORM],
            body.as_bytes(),
        )
    };

    // Turning on asks first, and changes nothing yet.
    let r = post(format!("csrf={csrf}&public=true"));
    r.status_is(200);
    let text = r.text();
    for want in [
        "Anyone who can reach this server can then call every endpoint of environment production without credentials",
        &format!("http://{}/tools/inventory/production/list", t.addr) as &str,
        &format!("http://{}/tools/inventory/production/add", t.addr),
        "name=\"confirm\" value=\"yes\"",
        "id=\"confirm-public\"",
        "href=\"/tools/inventory/endpoints\"",
    ] {
        r.check(text.contains(want), format!("the confirmation page has {want:?}"));
    }
    r.check(
        !text.contains("/tools/inventory/staging/"),
        "only production's endpoints",
    );
    assert_eq!(dir.read("config.toml"), original, "not yet written");
    assert_eq!(anonymous(&t), 401);

    // Confirmed: written, served, and the browser goes back to the view.
    let r = post(format!("csrf={csrf}&public=true&confirm=yes"));
    r.status_is(303);
    r.check_eq(
        r.header("location"),
        Some("/tools/inventory/endpoints"),
        "Location",
    );
    assert_eq!(anonymous(&t), 200);
    assert_eq!(
        dir.read("config.toml"),
        original.replacen(OFF_LINE, ON_LINE, 1)
    );
    let r = view();
    r.check(
        r.text().contains("id=\"switch-state-production\">on<"),
        "the view shows on",
    );
    r.check(
        r.text()
            .contains("<button type=\"submit\" id=\"switch-production\">Turn off</button>"),
        "and offers to turn it off",
    );

    // Turning off needs no confirmation.
    let r = post(format!("csrf={csrf}&public=false"));
    r.status_is(303);
    assert_eq!(anonymous(&t), 401);
    assert_eq!(dir.read("config.toml"), original);
    let log = std::fs::read_to_string(&t.stderr_log).unwrap();
    assert!(
        log.contains("production: off -> on by session:alice"),
        "{log}"
    );
    assert!(
        log.contains("production: on -> off by session:alice"),
        "{log}"
    );
    post(format!("csrf={csrf}&public=maybe")).status_is(400);
}

#[test]
fn csrf_missing_or_wrong_is_refused_and_nothing_changes() {
    let (dir, t, original) = start("switch_csrf", "");
    let token = login(&t, "alice");
    let c = cookie(&token);
    let view = page(&t, VIEW, &c);
    let csrf = hidden(&view, "csrf");
    let key = app_key(&t, "alice");
    for body in [
        "public=true&confirm=yes".to_string(),
        "csrf=&public=true&confirm=yes".to_string(),
        "csrf=deadbeef&public=false".to_string(),
        format!("csrf={}x&public=true&confirm=yes", &csrf[..csrf.len() - 1]),
    ] {
        t.request("POST", SWITCH, &[("Cookie", &c), FORM], body.as_bytes())
            .err(403, "csrf_rejected");
        // Even a same-origin browser needs the form's token.
        let origin = format!("http://{}", t.addr);
        let r = t.request(
            "POST",
            SWITCH,
            &[
                ("Cookie", &c),
                FORM,
                HTML,
                ("Origin", &origin),
                ("Sec-Fetch-Site", "same-origin"),
            ],
            body.as_bytes(),
        );
        r.status_is(403);
        r.check(
            r.text().contains("<h1>Csrf rejected</h1>"),
            "an HTML error page",
        );
    }
    // The JSON operation with a cookie and no proof of origin.
    t.request("PUT", SWITCH, &[("Cookie", &c)], br#"{"Public":true}"#)
        .err(403, "csrf_rejected");
    t.request(
        "PUT",
        SWITCH,
        &[("Cookie", &c), ("X-CSRF-Token", "deadbeef")],
        br#"{"Public":true}"#,
    )
    .err(403, "csrf_rejected");
    assert_eq!(dir.read("config.toml"), original, "unchanged");
    assert!(!served_public(&t, &key), "still off");
    assert_eq!(anonymous(&t), 401);
    // With the page's token in the header, a session may use it too.
    t.request(
        "PUT",
        SWITCH,
        &[("Cookie", &c), ("X-CSRF-Token", &csrf)],
        br#"{"Public":true}"#,
    )
    .ok();
    assert_eq!(anonymous(&t), 200);
}

#[test]
fn a_read_only_config_shows_the_switch_disabled_with_the_reason() {
    let (dir, t, original) = start("switch_read_only", "");
    let key = app_key(&t, "alice");
    let c = cookie(&login(&t, "alice"));
    let cfg = dir.path("config.toml");
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o444)).unwrap();
    let r = page(&t, VIEW, &c);
    r.status_is(200);
    let text = r.text();
    r.check(
        text.contains("<button type=\"submit\" id=\"switch-production\" disabled>Turn on</button>"),
        "the control is disabled",
    );
    let reason = format!("the config file {} is read-only (mode 0444)", cfg.display());
    r.check(
        text.contains("id=\"switch-reason-production\""),
        "the reason is shown",
    );
    r.check(
        text.contains(&reason),
        format!("the reason says {reason:?}"),
    );

    let e = put(&t, &key, r#"{"Public":true}"#).err(409, "config_not_writable");
    assert_eq!(e["Reason"], reason.as_str());
    assert!(
        e["Error"]
            .as_str()
            .unwrap()
            .contains("read-only (mode 0444)"),
        "{e}"
    );
    let csrf = hidden(&r, "csrf");
    for body in [
        format!("csrf={csrf}&public=true"),
        format!("csrf={csrf}&public=true&confirm=yes"),
    ] {
        t.request("POST", SWITCH, &[("Cookie", &c), FORM], body.as_bytes())
            .err(409, "config_not_writable");
    }
    assert_eq!(dir.read("config.toml"), original);

    // A read-only directory: the atomic replace cannot create its temp file.
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(&dir.root, std::fs::Permissions::from_mode(0o555)).unwrap();
    let e = put(&t, &key, r#"{"Public":true}"#).err(409, "config_not_writable");
    std::fs::set_permissions(&dir.root, std::fs::Permissions::from_mode(0o755)).unwrap();
    let want = format!(
        "the directory of the config file {} is read-only (mode 0555)",
        dir.root.display()
    );
    assert_eq!(e["Reason"], want.as_str());
    assert_eq!(dir.read("config.toml"), original);
    assert_eq!(anonymous(&t), 401);
    // Writable again: the switch works.
    put(&t, &key, r#"{"Public":true}"#).ok();
    assert_eq!(anonymous(&t), 200);
    assert_eq!(
        std::fs::metadata(&cfg).unwrap().permissions().mode() & 0o777,
        0o644,
        "the file keeps its mode"
    );
}

#[test]
fn only_admins_flip_when_admins_is_set() {
    let (dir, t, original) = start("switch_admins", "admins = [\"carol\"]\n");
    let alice_key = app_key(&t, "alice");
    let c = cookie(&login(&t, "alice"));
    let r = page(&t, VIEW, &c);
    r.status_is(200);
    let text = r.text();
    r.check(
        text.contains("id=\"switch-state-production\">off<"),
        "alice sees the state",
    );
    r.check(
        !text.contains(&format!("action=\"{SWITCH}\"")),
        "but no control",
    );
    r.check(!text.contains("id=\"switch-production\""), "no button");
    r.check(
        text.contains("Only the workspace&#39;s admins can change this switch.")
            || text.contains("Only the workspace's admins can change this switch."),
        "and says why",
    );
    put(&t, &alice_key, r#"{"Public":true}"#).err(403, "admin_required");
    let csrf = hidden(&r, "csrf");
    let body = format!("csrf={csrf}&public=true&confirm=yes");
    t.request("POST", SWITCH, &[("Cookie", &c), FORM], body.as_bytes())
        .err(403, "admin_required");
    assert_eq!(dir.read("config.toml"), original);
    assert_eq!(anonymous(&t), 401);

    // carol is an admin.
    let carol_key = app_key(&t, "carol");
    let cc = cookie(&login(&t, "carol"));
    let r = page(&t, VIEW, &cc);
    r.check(
        r.text().contains("id=\"switch-production\">Turn on<"),
        "carol has the control",
    );
    put(&t, &carol_key, r#"{"Public":true}"#).ok();
    assert_eq!(anonymous(&t), 200);
}

#[test]
fn racing_flips_leave_a_valid_file_with_one_state() {
    let (dir, t, original) = start("switch_race", "");
    let key = app_key(&t, "alice");
    let on = original.replacen(OFF_LINE, ON_LINE, 1);
    let mut before = false;
    for round in 0..25 {
        let barrier = Arc::new(Barrier::new(6));
        let handles: Vec<_> = [true, false, true, false, true, false]
            .into_iter()
            .map(|public| {
                let (client, barrier) = (t.client(), Arc::clone(&barrier));
                let auth = format!("Bearer {key}");
                thread::spawn(move || {
                    barrier.wait();
                    let body = format!("{{\"Public\":{public}}}");
                    let h = [("Authorization", auth.as_str()), UA];
                    let v = client.request("PUT", SWITCH, &h, body.as_bytes()).ok();
                    (
                        v["Public"].as_bool().unwrap(),
                        v["Previous"].as_bool().unwrap(),
                    )
                })
            })
            .collect();
        let got: Vec<(bool, bool)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let text = dir.read("config.toml");
        assert!(
            text == original || text == on,
            "round {round}: torn or duplicated file:\n{text}"
        );
        let after = text == on;
        // The flips happened one after the other: in some order each saw
        // the state the previous one left (no lost update).
        assert!(
            serial(before, &got, after),
            "round {round}: from {before}, (new, previous) = {got:?}, file {after}"
        );
        assert_eq!(
            served_public(&t, &key),
            after,
            "round {round}: served = file"
        );
        assert_eq!(anonymous(&t) == 200, after, "round {round}");
        let r = crate::util::trigd(&["check", "--config", &dir.path_str("config.toml")], None);
        r.code_is(0);
        before = after;
    }
}

/// Whether the flips `(new, previous)` can be ordered so that the first saw
/// `from`, each next one saw the value the one before it set, and the last
/// left `to`.
fn serial(from: bool, flips: &[(bool, bool)], to: bool) -> bool {
    if flips.is_empty() {
        return from == to;
    }
    (0..flips.len()).any(|i| {
        let (new, previous) = flips[i];
        let mut rest = flips.to_vec();
        rest.remove(i);
        previous == from && serial(new, &rest, to)
    })
}

#[test]
fn a_bearer_key_asking_for_html_gets_the_view() {
    let (_d, t, _) = start("switch_bearer_html", "");
    let key = app_key(&t, "alice");
    let auth = format!("Bearer {key}");
    let r = t.request(
        "GET",
        "/tools/inventory/endpoints",
        &[("Authorization", &auth), UA, HTML],
        b"",
    );
    r.status_is(200);
    r.check_eq(
        r.header("content-type"),
        Some("text/html; charset=utf-8"),
        "HTML",
    );
    let text = r.text();
    for want in [
        "Environment production",
        "Environment staging",
        "Application key of <strong>alice</strong>",
    ] {
        r.check(text.contains(want), format!("the page shows {want:?}"));
    }
    r.check(!text.contains("<form"), "no forms without a session");
    r.check(
        text.contains(&format!("PUT {SWITCH}")),
        "points scripts at the operation",
    );
    let r = t.request(
        "GET",
        "/tools/inventory/endpoints",
        &[("Authorization", "Bearer tk_nope"), UA, HTML],
        b"",
    );
    r.status_is(401);
    r.check(
        r.header("location").is_none(),
        "no redirect to the login form",
    );
}

#[test]
fn a_symlinked_config_is_edited_where_it_lives() {
    let dir = TestDir::new("switch_symlink");
    let text = commented_config("");
    dir.write("real/config.toml", &text);
    dir.write("programs/inv.toml", INV);
    std::os::unix::fs::symlink("real/config.toml", dir.path("config.toml")).unwrap();
    let t = Trigd::start(&dir);
    let key = app_key(&t, "alice");
    put(&t, &key, r#"{"Public":true}"#).ok();
    assert_eq!(anonymous(&t), 200, "served at once");
    let link = std::fs::symlink_metadata(dir.path("config.toml")).unwrap();
    assert!(
        link.file_type().is_symlink(),
        "config.toml is still a symlink"
    );
    assert_eq!(
        dir.read("real/config.toml"),
        text.replacen(OFF_LINE, ON_LINE, 1)
    );
}
