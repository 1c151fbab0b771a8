//! Browser access over plain HTTP: login and its throttle, session cookies
//! and their expiry, CSRF checks, the settings page and application keys,
//! the HTML endpoint view, escaping and security headers.

use std::time::Duration;

use crate::util::{cheap_hash, wait_until, Explain, Reply, TestDir, Trigd};

/// The CSP every page must carry.
pub const CSP: &str = "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; \
                       form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// A members-only JSON page: 200 with a valid session, 401 without.
const VIEW: &str = "/tools/inventory/endpoints";

/// A browser's `Accept`.
pub const HTML: (&str, &str) = ("Accept", "text/html,application/xhtml+xml;q=0.9,*/*;q=0.8");
/// A User-Agent for bearer requests.
pub const UA: (&str, &str) = ("User-Agent", "trigd-tests/1.0");

/// A config with users alice (ops), bob (dev), carol and dave (no
/// workspace), each with password `<name>-pw`; tool `inventory` in `ops`
/// with a protected `production` and a public `staging` environment, and
/// triggers `list` (GET) and `add` (POST, value `item`).
pub fn ui_config(server: &str) -> String {
    let users: String = ["alice", "bob", "carol", "dave"]
        .iter()
        .map(|u| {
            format!(
                "[[users]]\nname = \"{u}\"\npassword = \"{}\"\n\n",
                cheap_hash(&format!("{u}-pw"))
            )
        })
        .collect();
    format!(
        r#"[server]
{server}

{users}
[[workspaces]]
name = "ops"
members = ["alice"]

[[workspaces]]
name = "dev"
members = ["bob"]

[[tools]]
name = "inventory"
workspace = "ops"
[tools.environments.production]
public = false
[tools.environments.staging]
public = true
[[tools.triggers]]
kind = "endpoint"
name = "list"
method = "GET"
program = 1
function = "list"
[[tools.triggers]]
kind = "endpoint"
name = "add"
method = "POST"
program = 1
function = "add"
"#
    )
}

/// Program 1 of the `inventory` tool: `list` prints `[1,2]`, `add` its
/// `item`.
pub const INV: &str = r#"id = 1
name = "inv"
workspace = "ops"

[[functions]]
name = "list"
command = ["printf", "[1,2]"]

[[functions]]
name = "add"
command = ["printf", "%s", "{item}"]
[functions.webhook]
outputs = ["item"]
"#;

/// A directory with [`ui_config`]`(server)` and the program, and a server.
pub fn start(name: &str, server: &str) -> (TestDir, Trigd) {
    let dir = TestDir::new(name);
    dir.write("config.toml", &ui_config(server));
    dir.write("programs/inv.toml", INV);
    let t = Trigd::start(&dir);
    (dir, t)
}

/// `GET` the protected `list` endpoint with the application key `key`.
pub fn list_with_key(t: &Trigd, key: &str) -> Reply {
    let auth = format!("Bearer {key}");
    t.request(
        "GET",
        "/tools/inventory/production/list",
        &[("Authorization", auth.as_str()), UA],
        b"",
    )
}

/// `POST /login` as a non-browser client; the reply.
fn post_login(t: &Trigd, user: &str, password: &str, extra: &[(&str, &str)]) -> Reply {
    let mut h = vec![("Content-Type", "application/x-www-form-urlencoded")];
    h.extend_from_slice(extra);
    let body = format!("username={user}&password={password}");
    t.request("POST", "/login", &h, body.as_bytes())
}

/// Log in and return the session token from `Set-Cookie`.
pub fn login(t: &Trigd, user: &str) -> String {
    let r = post_login(t, user, &format!("{user}-pw"), &[]);
    r.ok();
    let c = r.header("set-cookie").unwrap_or("").to_string();
    let token = c
        .strip_prefix("trigd_session=")
        .and_then(|rest| rest.split(';').next())
        .unwrap_or_else(|| r.fail("no trigd_session cookie"));
    r.check(token.len() == 64, "the token is 256 bits in hex");
    token.to_string()
}

/// The `Cookie` header value for `token`.
pub fn cookie(token: &str) -> String {
    format!("trigd_session={token}")
}

/// The value of the hidden field `name` on a page (the first one).
pub fn hidden(r: &Reply, name: &str) -> String {
    let text = r.text();
    let pat = format!("name=\"{name}\" value=\"");
    let at = text
        .find(&pat)
        .unwrap_or_else(|| r.fail(format!("no {name} field on the page")));
    let rest = &text[at + pat.len()..];
    rest[..rest.find('"').unwrap()].to_string()
}

/// The new key shown on a settings page.
pub fn key_on(r: &Reply) -> String {
    let text = r.text();
    let at = text
        .find("<code id=\"app-key\">")
        .unwrap_or_else(|| r.fail("no new key on the page"));
    let rest = &text[at + "<code id=\"app-key\">".len()..];
    rest[..rest.find('<').unwrap()].to_string()
}

fn get(t: &Trigd, path: &str, token: &str, html: bool) -> Reply {
    let c = cookie(token);
    let mut h = vec![("Cookie", c.as_str())];
    if html {
        h.push(HTML);
    }
    t.request("GET", path, &h, b"")
}

#[test]
fn wrong_password_and_unknown_user_get_the_same_error() {
    let (_d, t) = start("ui_wrong_password", "");
    let wrong = post_login(&t, "alice", "nope", &[]);
    let v1 = wrong.err(401, "login_failed");
    let unknown = post_login(&t, "mallory", "nope", &[]);
    let v2 = unknown.err(401, "login_failed");
    unknown.check_eq(&v2, &v1, "unknown user and wrong password answer alike");
    wrong.check(wrong.header("set-cookie").is_none(), "no cookie on failure");
    // Browsers get the form again, with the (escaped) name kept.
    let r = t.request(
        "POST",
        "/login",
        &[HTML, ("Content-Type", "application/x-www-form-urlencoded")],
        b"username=%3Cscript%3Ealert(1)%3C%2Fscript%3E&password=x&next=%2F",
    );
    r.status_is(401);
    let text = r.text();
    r.check(text.contains("Wrong user name or password."), "error shown");
    r.check(
        !text.contains("<script>alert") && text.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "the user name is escaped",
    );
}

#[test]
fn failed_logins_are_throttled_per_user_and_per_address() {
    let (_d, t) = start("ui_throttle", "");
    for _ in 0..5 {
        post_login(&t, "alice", "nope", &[]).err(401, "login_failed");
    }
    // Even the right password is refused while throttled.
    let r = post_login(&t, "alice", "alice-pw", &[]);
    r.err(429, "rate_limited");
    let secs: u64 = r
        .header("retry-after")
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| r.fail("Retry-After is not a number"));
    r.check((1..=61).contains(&secs), "Retry-After within the window");
    // Another user from the same address still gets in…
    login(&t, "carol");
    // …until the address reaches its own limit (10 failures a minute).
    for _ in 0..4 {
        post_login(&t, "bob", "nope", &[]).err(401, "login_failed");
    }
    post_login(&t, "dave", "nope", &[]).err(401, "login_failed");
    post_login(&t, "dave", "dave-pw", &[]).err(429, "rate_limited");
    // The HTML answer keeps the status and Retry-After.
    let r = t.request(
        "POST",
        "/login",
        &[HTML, ("Content-Type", "application/x-www-form-urlencoded")],
        b"username=dave&password=dave-pw",
    );
    r.status_is(429);
    r.check(r.header("retry-after").is_some(), "Retry-After on the page");
}

#[test]
fn cookie_flags() {
    let (_d, t) = start("ui_cookie_flags", "");
    let r = post_login(&t, "alice", "alice-pw", &[]);
    r.ok();
    let c = r.header("set-cookie").unwrap_or("");
    for flag in ["HttpOnly", "SameSite=Lax", "Path=/"] {
        r.check(c.contains(flag), format!("cookie has {flag}"));
    }
    r.check(
        !c.contains("Secure"),
        "no Secure over plain http by default",
    );
    r.check_eq(r.header("cache-control"), Some("no-store"), "no-store");

    let (_d2, t2) = start("ui_cookie_secure", "cookie_secure = true");
    let r = post_login(&t2, "alice", "alice-pw", &[]);
    r.ok();
    r.check(
        r.header("set-cookie").unwrap_or("").contains("; Secure"),
        "Secure when cookie_secure = true",
    );
    let (_d3, t3) = start(
        "ui_cookie_https",
        "public_url = \"https://trigd.example.com\"",
    );
    let r = post_login(&t3, "alice", "alice-pw", &[]);
    r.ok();
    r.check(
        r.header("set-cookie").unwrap_or("").contains("; Secure"),
        "Secure when public_url is https",
    );
}

#[test]
fn pages_redirect_to_login_and_back() {
    let (_d, t) = start("ui_redirects", "");
    let r = t.request("GET", "/workspaces/ops/settings", &[HTML], b"");
    r.status_is(303);
    r.check_eq(
        r.header("location"),
        Some("/login?next=%2Fworkspaces%2Fops%2Fsettings"),
        "Location",
    );
    let r = t.request("GET", "/", &[HTML], b"");
    r.status_is(303);
    r.check_eq(r.header("location"), Some("/login?next=%2F"), "Location");
    // API clients get JSON errors instead.
    t.get("/workspaces/ops/settings").err(401, "unauthorized");
    t.get("/").err(401, "unauthorized");
    t.request("PUT", "/login", &[], b"")
        .err(405, "method_not_allowed");
    t.get("/logout").err(405, "method_not_allowed");
    // The login form sends the browser on to `next`.
    let r = t.request(
        "POST",
        "/login",
        &[HTML, ("Content-Type", "application/x-www-form-urlencoded")],
        b"username=alice&password=alice-pw&next=%2Fworkspaces%2Fops%2Fsettings",
    );
    r.status_is(303);
    r.check_eq(
        r.header("location"),
        Some("/workspaces/ops/settings"),
        "Location",
    );
    // Never off-site.
    let r = t.request(
        "POST",
        "/login",
        &[HTML, ("Content-Type", "application/x-www-form-urlencoded")],
        b"username=alice&password=alice-pw&next=%2F%2Fevil.example",
    );
    r.check_eq(r.header("location"), Some("/"), "Location");
    // A field given twice is refused, not its first value taken.
    let r = t.request(
        "POST",
        "/login",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        b"username=bob&username=alice&password=alice-pw",
    );
    let v = r.err(400, "invalid_parameter");
    r.check_eq(&v["Parameter"], &serde_json::json!("username"), "Parameter");
    // A visibly cross-site login post is refused (login CSRF).
    post_login(&t, "alice", "alice-pw", &[("Sec-Fetch-Site", "cross-site")])
        .err(403, "csrf_rejected");
    post_login(
        &t,
        "alice",
        "alice-pw",
        &[("Origin", "https://evil.example")],
    )
    .err(403, "csrf_rejected");
    // `Origin: null`: a sandboxed frame or a data: page of another site
    // (trigd's own pages send their origin: `Referrer-Policy: same-origin`).
    post_login(&t, "alice", "alice-pw", &[("Origin", "null")]).err(403, "csrf_rejected");
    // curl, or a browser's own same-origin post, signs in.
    post_login(&t, "alice", "alice-pw", &[]).status_is(200);
}

#[test]
fn session_authorises_members_with_csrf_for_changes() {
    let (_d, t) = start("ui_session_endpoints", "");
    let alice = login(&t, "alice");
    let c = cookie(&alice);
    let r = t.request(
        "GET",
        "/tools/inventory/production/list",
        &[("Cookie", &c)],
        b"",
    );
    r.ok();
    // A GET endpoint runs a program: not for a link followed from another
    // site, on which a browser sends the SameSite=Lax cookie (it ran).
    let list = "/tools/inventory/production/list";
    for site in ["cross-site", "same-site"] {
        let from = [("Cookie", c.as_str()), ("Sec-Fetch-Site", site)];
        t.request("GET", list, &from, b"").err(403, "csrf_rejected");
    }
    let evil = [("Cookie", c.as_str()), ("Origin", "https://evil.example")];
    t.request("GET", list, &evil, b"").err(403, "csrf_rejected");
    for site in ["same-origin", "none"] {
        let from = [("Cookie", c.as_str()), ("Sec-Fetch-Site", site)];
        t.request("GET", list, &from, b"").ok();
    }
    let add = "/tools/inventory/production/add?item=x";
    t.request("POST", add, &[("Cookie", &c)], b"")
        .err(403, "csrf_rejected");
    let origin_evil = [("Cookie", c.as_str()), ("Origin", "https://evil.example")];
    t.request("POST", add, &origin_evil, b"")
        .err(403, "csrf_rejected");
    let cross = [("Cookie", c.as_str()), ("Sec-Fetch-Site", "same-site")];
    t.request("POST", add, &cross, b"")
        .err(403, "csrf_rejected");
    let same = [("Cookie", c.as_str()), ("Sec-Fetch-Site", "same-origin")];
    let v = t.request("POST", add, &same, b"").ok();
    assert_eq!(v["Result"], serde_json::json!(["x"]));
    let origin = format!("http://{}", t.addr);
    let same = [("Cookie", c.as_str()), ("Origin", origin.as_str())];
    t.request("POST", add, &same, b"").ok();
    let page = get(&t, "/", &alice, true);
    let token = hidden(&page, "csrf");
    let with_token = [("Cookie", c.as_str()), ("X-CSRF-Token", token.as_str())];
    t.request("POST", add, &with_token, b"").ok();
    // The JSON endpoint view accepts the session too.
    let v = get(&t, "/tools/inventory/endpoints", &alice, false).ok();
    assert_eq!(v["Tool"], "inventory");
    // A user who is not a member of ops.
    let bob = login(&t, "bob");
    get(&t, "/tools/inventory/production/list", &bob, false).err(403, "forbidden");
    get(&t, "/tools/inventory/endpoints", &bob, false).err(403, "forbidden");
    get(&t, "/workspaces/ops/settings", &bob, false).err(403, "forbidden");
    // A made-up cookie.
    get(
        &t,
        "/tools/inventory/production/list",
        &"0".repeat(64),
        false,
    )
    .err(401, "unauthorized");
}

#[test]
fn application_key_generate_and_regenerate() {
    let (_d, t) = start("ui_app_key", "");
    let alice = login(&t, "alice");
    let c = cookie(&alice);
    let r = get(&t, "/workspaces/ops/settings", &alice, true);
    r.status_is(200);
    r.check(r.text().contains("Application Key"), "the item is there");
    r.check(r.text().contains(">Generate</button>"), "a Generate button");
    let csrf = hidden(&r, "csrf");
    let post = |body: &str, html: bool| {
        let mut h = vec![
            ("Cookie", c.as_str()),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ];
        if html {
            h.push(HTML);
        }
        t.request(
            "POST",
            "/workspaces/ops/settings/application-key",
            &h,
            body.as_bytes(),
        )
    };
    // CSRF: the form token is required (same-origin headers are not enough).
    post("", false).err(403, "csrf_rejected");
    post("csrf=deadbeef", false).err(403, "csrf_rejected");
    let r = post("csrf=deadbeef", true);
    r.status_is(403);
    r.check(
        r.text().contains("<h1>Csrf rejected</h1>"),
        "an HTML error page",
    );
    let r = post(&format!("csrf={csrf}"), true);
    r.status_is(200);
    let k1 = key_on(&r);
    r.check(k1.starts_with("tk_"), "a key is shown");
    r.check(r.text().contains("shown only once"), "the once-only note");
    r.check(r.text().contains("data-copy=\"app-key\""), "a Copy button");
    let call = |key: &str| list_with_key(&t, key);
    call(&k1).ok();
    // Later visits show the hint and the time, not the key.
    let r = get(&t, "/workspaces/ops/settings", &alice, true);
    r.check(!r.text().contains(&k1), "the key is not shown again");
    r.check(r.text().contains(&k1[..7]), "the hint is shown");
    r.check(
        r.text().contains(">Regenerate</button>"),
        "a Regenerate button",
    );
    r.check(r.text().contains("<time datetime="), "the creation time");
    let k2 = key_on(&post(&format!("csrf={csrf}"), false));
    call(&k1).err(401, "unauthorized");
    call(&k2).ok();
    // Scripts regenerate with their bearer key.
    let auth = format!("Bearer {k2}");
    let r = t.request(
        "POST",
        "/workspaces/ops/settings/application-key",
        &[("Authorization", auth.as_str()), UA],
        b"",
    );
    let v = r.ok();
    let k3 = v["ApplicationKey"].as_str().unwrap_or("").to_string();
    r.check(k3.starts_with("tk_") && k3 != k2, "a new key");
    r.check(
        v["Hint"].is_string() && v["CreatedAt"].is_string(),
        "hint and time",
    );
    call(&k2).err(401, "unauthorized");
    let r = call(&k3);
    let run = r.run_id(&r.ok());
    // The key reads its run's status as it reads the list and the output
    // (the status endpoint took only API keys: 401, counted as a failed
    // authentication of the address).
    let auth = format!("Bearer {k3}");
    let status = t.request(
        "GET",
        &format!("/api/runs/{run}"),
        &[("Authorization", auth.as_str()), UA],
        b"",
    );
    status.check_eq(&status.ok()["Run"], &serde_json::json!(run), "Run");
    // Without a User-Agent the bearer request is refused.
    let auth = format!("Bearer {k3}");
    t.request(
        "POST",
        "/workspaces/ops/settings/application-key",
        &[("Authorization", auth.as_str())],
        b"",
    )
    .err(403, "user_agent_required");
}

#[test]
fn sessions_expire_when_idle() {
    // 3 s: the first use right after the login must come within it, also
    // on a loaded machine.
    let (_d, t) = start("ui_idle", "session_idle = \"3s\"");
    let alice = login(&t, "alice");
    get(&t, VIEW, &alice, false).status_is(200);
    // Each check is activity, so checks must be further apart than
    // session_idle: poll every 3.5s, within a bound.
    let mut expired = false;
    for _ in 0..6 {
        std::thread::sleep(Duration::from_millis(3500));
        if get(&t, VIEW, &alice, false).status == 401 {
            expired = true;
            break;
        }
    }
    assert!(
        expired,
        "the session did not expire after 3.5s of idleness (session_idle = 3s)"
    );
    let r = get(&t, "/workspaces/ops/settings", &alice, true);
    r.status_is(303);
}

#[test]
fn sessions_expire_at_session_max_even_when_used() {
    let (_d, t) = start("ui_max", "session_max = \"2s\"");
    let alice = login(&t, "alice");
    let expired = wait_until(Duration::from_secs(30), || {
        get(&t, VIEW, &alice, false).status == 401
    });
    assert!(expired, "the session outlived session_max despite use");
}

#[test]
fn logout_ends_the_session() {
    let (_d, t) = start("ui_logout", "");
    let alice = login(&t, "alice");
    let c = cookie(&alice);
    let csrf = hidden(&get(&t, "/", &alice, true), "csrf");
    t.request("POST", "/logout", &[("Cookie", &c)], b"")
        .err(403, "csrf_rejected");
    get(&t, VIEW, &alice, false).status_is(200);
    let body = format!("csrf={csrf}");
    let r = t.request(
        "POST",
        "/logout",
        &[
            ("Cookie", c.as_str()),
            HTML,
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        body.as_bytes(),
    );
    r.status_is(303);
    r.check_eq(r.header("location"), Some("/login"), "Location");
    r.check(
        r.header("set-cookie").unwrap_or("").contains("Max-Age=0"),
        "the cookie is cleared",
    );
    get(&t, VIEW, &alice, false).err(401, "unauthorized");
    get(&t, "/tools/inventory/production/list", &alice, false).err(401, "unauthorized");
}

#[test]
fn pages_escape_values_and_send_security_headers() {
    let (_d, t) = start("ui_escape", "");
    let r = t.request(
        "GET",
        "/login?next=%2Fx%22%3E%3Cscript%3Ealert(1)%3C%2Fscript%3E",
        &[HTML],
        b"",
    );
    r.status_is(200);
    let text = r.text();
    r.check(!text.contains("<script>alert"), "no injected script");
    r.check(
        text.contains("/x&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;"),
        "the value is escaped",
    );
    r.check_eq(r.header("content-security-policy"), Some(CSP), "CSP");
    r.check_eq(
        r.header("x-content-type-options"),
        Some("nosniff"),
        "nosniff",
    );
    r.check_eq(
        r.header("referrer-policy"),
        Some("same-origin"),
        "Referrer-Policy",
    );
    r.check_eq(r.header("cache-control"), Some("no-store"), "Cache-Control");
    r.check(
        r.header("content-type")
            .unwrap_or("")
            .starts_with("text/html"),
        "HTML",
    );
    r.check(!text.contains("<script>"), "no inline script at all");
    r.check(!text.contains(" style="), "no inline style");
    // A workspace name from the URL, on the 404 page.
    let alice = login(&t, "alice");
    let r = get(
        &t,
        "/workspaces/%3Cscript%3Ex%3Cb%3E/settings",
        &alice,
        true,
    );
    r.status_is(404);
    r.check(
        r.text().contains("&lt;script&gt;x&lt;b&gt;") && !r.text().contains("<script>x"),
        "the name is escaped",
    );
    r.check_eq(
        r.header("content-security-policy"),
        Some(CSP),
        "CSP on errors",
    );
    // The static files.
    let css = t.get("/static/style.css");
    css.status_is(200);
    css.check(
        css.header("content-type")
            .unwrap_or("")
            .starts_with("text/css"),
        "CSS type",
    );
    let js = t.get("/static/app.js");
    js.status_is(200);
    js.check(
        js.header("content-type")
            .unwrap_or("")
            .starts_with("text/javascript"),
        "JS type",
    );
    t.get("/static/nope.js").err(404, "not_found");
}

#[test]
fn endpoint_view_is_html_for_browsers_and_json_otherwise() {
    let (_d, t) = start("ui_endpoint_view", "");
    let r = t.request("GET", "/tools/inventory/endpoints", &[HTML], b"");
    r.status_is(303);
    r.check_eq(
        r.header("location"),
        Some("/login?next=%2Ftools%2Finventory%2Fendpoints"),
        "Location",
    );
    let alice = login(&t, "alice");
    let r = get(&t, "/tools/inventory/endpoints", &alice, true);
    r.status_is(200);
    let text = r.text();
    let url = format!("http://{}/tools/inventory/production/add", t.addr);
    for want in [
        url.as_str(),
        "Environment production",
        "Environment staging",
        "switch off",
        "switch on",
        "protected",
        "public",
        "Copy curl command",
        "-d '{&quot;item&quot;:&quot;VALUE&quot;}'",
    ] {
        r.check(text.contains(want), format!("the page shows {want:?}"));
    }
    r.check_eq(r.header("content-security-policy"), Some(CSP), "CSP");
    let v = get(&t, "/tools/inventory/endpoints", &alice, false).ok();
    assert_eq!(v["Environments"][0]["Endpoints"][1]["Url"], url.as_str());
    let r = get(&t, "/tools/nope/endpoints", &alice, true);
    r.status_is(404);
    r.check(r.text().contains("<h1>"), "an HTML 404");
    // The landing page links to both.
    let home = get(&t, "/", &alice, true);
    home.check(
        home.text().contains("href=\"/tools/inventory/endpoints\"")
            && home.text().contains("href=\"/workspaces/ops/settings\""),
        "links on the landing page",
    );
}

#[test]
fn sessions_survive_a_restart_and_store_only_hashes() {
    let (d, mut t) = start("ui_restart", "");
    let alice = login(&t, "alice");
    t.restart();
    get(&t, "/workspaces/ops/settings", &alice, true).status_is(200);
    let stored = d.read("state/sessions.json");
    assert!(!stored.contains(&alice), "the token itself is not stored");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(d.path("state/sessions.json"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    // A changed password ends the session.
    let cfg = d.read("config.toml");
    let old = cheap_hash("alice-pw");
    d.write(
        "config.toml",
        &cfg.replacen(&old, &cheap_hash("alice-new-pw"), 1),
    );
    t.wait_for(Duration::from_secs(30), "reload ends the session", || {
        get(&t, VIEW, &alice, false).status == 401
    });
}

/// The head of a `HEAD` answer, and the bytes after it (there must be none).
fn head(t: &Trigd, path: &str, extra: &str) -> (String, Vec<u8>) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(&t.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let rq = format!("HEAD {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{extra}\r\n");
    s.write_all(rq.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a whole head")
        + 4;
    let rest = raw.split_off(end);
    (String::from_utf8_lossy(&raw).to_ascii_lowercase(), rest)
}

/// Every page and read that answers `GET` answers `HEAD` alike, without a
/// body (RFC 9110 §9.3.2): monitors and link checkers probe with it.
#[test]
fn head_is_answered_wherever_get_is() {
    let (_d, t) = start("ui_head", "");
    let token = login(&t, "alice");
    let c = format!("Cookie: {}\r\nAccept: {}\r\n", cookie(&token), HTML.1);
    for (path, extra, status) in [
        ("/", "", 401),
        ("/", c.as_str(), 200),
        ("/login", "", 200),
        ("/runs", c.as_str(), 200),
        ("/workspaces/ops/settings", c.as_str(), 200),
        ("/tools/inventory/endpoints", c.as_str(), 200),
        ("/api/runs/r-0-0", "", 401),
        ("/healthz", "", 200),
    ] {
        let get = t.request("GET", path, &header_pairs(extra), b"");
        let (h, rest) = head(&t, path, extra);
        let want = format!("http/1.1 {status} ");
        assert!(h.starts_with(&want), "HEAD {path}: {h}");
        assert_eq!(get.status, status, "GET {path}");
        assert!(rest.is_empty(), "HEAD {path} sent a body: {rest:?}");
        let ct = get
            .header("content-type")
            .unwrap_or_default()
            .to_ascii_lowercase();
        assert!(
            h.contains(&format!("content-type: {ct}")),
            "HEAD {path}: {h}"
        );
    }
}

/// `Name: value\r\n` lines as request header pairs.
fn header_pairs(lines: &str) -> Vec<(&str, &str)> {
    lines
        .split("\r\n")
        .filter_map(|l| l.split_once(": "))
        .collect()
}

/// A member revokes the key: from the settings page (a form with the CSRF
/// token) or with the key itself as bearer; it stops at once and no new
/// one is made.
#[test]
fn a_member_revokes_the_application_key() {
    let (_d, t) = start("ui_revoke_key", "");
    let alice = login(&t, "alice");
    let c = cookie(&alice);
    let r = get(&t, "/workspaces/ops/settings", &alice, true);
    r.check(!r.text().contains("id=\"revoke\""), "no key, no Revoke");
    let csrf = hidden(&r, "csrf");
    let post = |path: &str, body: &str| {
        let h = [
            ("Cookie", c.as_str()),
            ("Content-Type", "application/x-www-form-urlencoded"),
            HTML,
        ];
        t.request("POST", path, &h, body.as_bytes())
    };
    let gen = "/workspaces/ops/settings/application-key";
    let revoke = format!("{gen}/revoke");
    let token = format!("csrf={csrf}");
    let key = key_on(&post(gen, &token));
    let r = get(&t, "/workspaces/ops/settings", &alice, true);
    r.check(r.text().contains("id=\"revoke\""), "a Revoke button");
    // Without the token: refused, the key still works.
    post(&revoke, "").status_is(403);
    list_with_key(&t, &key).ok();
    let r = post(&revoke, &token);
    r.status_is(200);
    r.check(
        r.text().contains("id=\"app-key-revoked\""),
        "the page says so",
    );
    r.check(!r.text().contains("id=\"revoke\""), "no key left to revoke");
    r.check(r.text().contains(">Generate</button>"), "Generate again");
    list_with_key(&t, &key).err(401, "unauthorized");
    // A script revokes its own key.
    let key = key_on(&post(gen, &token));
    let auth = format!("Bearer {key}");
    let ua = ("User-Agent", "revoke-test/1.0");
    let r = t.request(
        "POST",
        &revoke,
        &[("Authorization", auth.as_str()), ua],
        b"",
    );
    r.check_eq(&r.ok()["Revoked"], &serde_json::json!(true), "Revoked");
    list_with_key(&t, &key).err(401, "unauthorized");
}
