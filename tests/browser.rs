//! End to end in a real browser: headless Chromium driven through
//! chromedriver's WebDriver HTTP API with the harness's raw HTTP client.
//!
//! The tests need Debian's `chromium` and `chromium-driver`, so they are
//! `#[ignore]`d: a plain `cargo test` lists them as `ignored` in its summary
//! (never as a pass), and `cargo test -- --include-ignored` runs them, as
//! `.ci/run` does after installing both. Run that way without Chromium they
//! fail with the command that installs it. A PNG of every page goes to
//! `<target dir>/screenshots/`.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use serde_json::{json, Value};

use crate::ui::{list_with_key, start};
use crate::util::{wait_until, Client, Explain, TestDir, Trigd};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// The W3C WebDriver element reference key.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A chromedriver process with one browser session; both end on drop.
struct Browser {
    driver: Child,
    client: Client,
    session: String,
    shots: PathBuf,
}

impl Browser {
    /// Fail, saying how to install them, unless Chromium and chromedriver
    /// are installed.
    fn require() {
        let missing: Vec<&str> = [CHROMIUM, CHROMEDRIVER]
            .into_iter()
            .filter(|bin| !Path::new(bin).exists())
            .collect();
        assert!(
            missing.is_empty(),
            "{} missing: the browser tests need Chromium and chromedriver. Install them with\n  \
             apt-get update && apt-get install -y chromium chromium-driver\n\
             (or leave out --include-ignored to skip the browser tests)",
            missing.join(" and ")
        );
    }

    /// Start chromedriver and a headless Chromium with a profile in `dir`.
    fn start(dir: &TestDir) -> Browser {
        // chromedriver picks its own port and prints it: choosing a free
        // port here and passing it on would race with the other tests'
        // servers binding port 0 meanwhile.
        let (driver, port) = start_driver(dir);
        let log = dir.path("chromedriver-client.log");
        let client = Client::for_addr(&format!("127.0.0.1:{port}"), &log);
        let mut b = Browser {
            driver,
            client,
            session: String::new(),
            shots: Path::new(env!("CARGO_TARGET_TMPDIR"))
                .parent()
                .expect("target dir")
                .join("screenshots"),
        };
        let ready = wait_until(Duration::from_secs(30), || {
            b.client
                .try_request("GET", "/status", &[], b"")
                .ok()
                .and_then(|r| serde_json::from_slice::<Value>(&r.body).ok())
                .is_some_and(|v| v["value"]["ready"] == true)
        });
        assert!(ready, "chromedriver on port {port} did not become ready");
        let profile = dir.path_str("chromium-profile");
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu",
                    "--disable-background-networking", "--disable-dev-shm-usage",
                    "--no-first-run", "--disable-crash-reporter", "--window-size=1200,1000",
                    format!("--user-data-dir={profile}"),
                ],
            },
        }}});
        let v = b.call("POST", "/session", Some(caps));
        b.session = v["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no sessionId in {v}"))
            .to_string();
        fs::create_dir_all(&b.shots).expect("screenshots dir");
        b
    }

    /// One WebDriver command; returns `value`, panicking on a WebDriver
    /// error.
    #[track_caller]
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let body = body.map(|v| v.to_string()).unwrap_or_default();
        let r = self.client.request(
            method,
            path,
            &[("Content-Type", "application/json")],
            body.as_bytes(),
        );
        let v: Value = serde_json::from_slice(&r.body)
            .unwrap_or_else(|e| r.fail(format!("WebDriver reply is not JSON: {e}")));
        if r.status != 200 {
            r.fail(format!("WebDriver {method} {path} failed"));
        }
        v.get("value").cloned().unwrap_or(Value::Null)
    }

    fn s(&self, rest: &str) -> String {
        format!("/session/{}{rest}", self.session)
    }

    /// Navigate to `url`. A failed navigation is tried again (twice at
    /// most): on a loaded machine ChromeDriver can give up on one (seen once
    /// in five runs of the whole suite); a third failure fails the test.
    #[track_caller]
    fn go(&self, url: &str) {
        let body = json!({ "url": url }).to_string();
        for attempt in 1..=3 {
            let r = self.client.request(
                "POST",
                &self.s("/url"),
                &[("Content-Type", "application/json")],
                body.as_bytes(),
            );
            if r.status == 200 {
                return;
            }
            if attempt == 3 {
                r.fail(format!("WebDriver navigation to {url} failed 3 times"));
            }
            eprintln!(
                "WebDriver navigation to {url} failed (attempt {attempt}): {}",
                String::from_utf8_lossy(&r.body)
            );
        }
    }

    #[track_caller]
    fn url(&self) -> String {
        self.call("GET", &self.s("/url"), None)
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    /// Ask `endpoint` (`/element` or `/elements`) for what `css` selects.
    #[track_caller]
    fn select(&self, endpoint: &str, css: &str) -> Value {
        self.call(
            "POST",
            &self.s(endpoint),
            Some(json!({"using": "css selector", "value": css})),
        )
    }

    #[track_caller]
    fn find(&self, css: &str) -> String {
        let v = self.select("/element", css);
        v[ELEMENT]
            .as_str()
            .unwrap_or_else(|| panic!("no element {css:?}: {v}"))
            .to_string()
    }

    #[track_caller]
    fn exists(&self, css: &str) -> bool {
        self.select("/elements", css)
            .as_array()
            .is_some_and(|a| !a.is_empty())
    }

    /// The text of what `css` selects, or `None` when nothing does or the
    /// element went stale between the lookup and the read (the page was
    /// replaced meanwhile): for conditions polled while a page changes.
    fn text_if_there(&self, css: &str) -> Option<String> {
        let v = self.select("/elements", css);
        let e = v.as_array()?.first()?[ELEMENT].as_str()?.to_string();
        let r = self.client.request(
            "GET",
            &self.s(&format!("/element/{e}/text")),
            &[("Content-Type", "application/json")],
            b"",
        );
        let v: Value = serde_json::from_slice(&r.body).ok()?;
        (r.status == 200).then(|| v["value"].as_str().map(str::to_string))?
    }

    #[track_caller]
    fn type_into(&self, css: &str, text: &str) {
        let e = self.find(css);
        self.call(
            "POST",
            &self.s(&format!("/element/{e}/value")),
            Some(json!({ "text": text })),
        );
    }

    #[track_caller]
    fn click(&self, css: &str) {
        let e = self.find(css);
        self.call(
            "POST",
            &self.s(&format!("/element/{e}/click")),
            Some(json!({})),
        );
    }

    #[track_caller]
    fn text(&self, css: &str) -> String {
        let e = self.find(css);
        self.call("GET", &self.s(&format!("/element/{e}/text")), None)
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    /// The value of cookie `name`, if the browser has it.
    fn cookie(&self, name: &str) -> Option<String> {
        let all = self.call("GET", &self.s("/cookie"), None);
        all.as_array()?
            .iter()
            .find(|c| c["name"] == name)
            .and_then(|c| c["value"].as_str())
            .map(str::to_string)
    }

    /// Save a PNG of the page as `screenshots/<name>.png`.
    #[track_caller]
    fn screenshot(&self, name: &str) {
        let v = self.call("GET", &self.s("/screenshot"), None);
        let png = base64_decode(v.as_str().unwrap_or(""));
        assert!(png.starts_with(b"\x89PNG"), "the screenshot is not a PNG");
        let path = self.shots.join(format!("{name}.png"));
        fs::write(&path, png).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    }

    /// Wait (bounded) until `css` matches an element.
    #[track_caller]
    fn wait_for(&self, css: &str) {
        assert!(
            wait_until(Duration::from_secs(30), || self.exists(css)),
            "no {css:?} on {} within 30s",
            self.url()
        );
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let path = self.s("");
            let _ = self.client.try_request("DELETE", &path, &[], b"");
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Standard base64 (with padding) to bytes.
fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => (c - b'A') as u32,
            b'a'..=b'z' => (c - b'a' + 26) as u32,
            b'0'..=b'9' => (c - b'0' + 52) as u32,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("bad base64 byte {c}"),
        }
    };
    let clean: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    let mut out = Vec::with_capacity(clean.len() / 4 * 3);
    for chunk in clean.chunks(4) {
        let data: Vec<u8> = chunk.iter().copied().filter(|&b| b != b'=').collect();
        let mut n = 0u32;
        for (i, &c) in data.iter().enumerate() {
            n |= val(c) << (18 - 6 * i);
        }
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..data.len()]);
    }
    out
}

/// Call the protected endpoint with an application key; the status.
fn call_with_key(t: &Trigd, key: &str) -> u16 {
    list_with_key(t, key).status
}

/// chromedriver started, and the port it listens on. A chromedriver that
/// exits before it says which port is started again (twice at most): one
/// did so once in a CI run of 2026-11-28 with nothing on stdout, and
/// passed every time it was tried again. Its stderr is kept in `dir` and
/// shown if it never starts.
fn start_driver(dir: &TestDir) -> (Child, u16) {
    let mut errors = Vec::new();
    for attempt in 1..=3 {
        let stderr = dir.path(&format!("chromedriver-{attempt}.stderr"));
        let file = std::fs::File::create(&stderr).expect("chromedriver stderr file");
        let mut driver = Command::new(CHROMEDRIVER)
            .arg("--port=0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {CHROMEDRIVER}: {e}"));
        match driver_port(&mut driver) {
            Ok(port) => return (driver, port),
            Err(why) => {
                let _ = driver.kill();
                let status = driver.wait().map(|s| s.to_string()).unwrap_or_default();
                let text = std::fs::read_to_string(&stderr).unwrap_or_default();
                errors.push(format!(
                    "attempt {attempt}: {why} ({status}); stderr: {text}"
                ));
            }
        }
    }
    panic!("chromedriver did not start:\n{}", errors.join("\n"))
}

/// The port chromedriver announces on stdout ("… started successfully on
/// port N."), waiting at most 30 s; the rest of its output is drained on a
/// thread so it never blocks on a full pipe.
fn driver_port(driver: &mut Child) -> Result<u16, String> {
    let out = driver.stdout.take().expect("chromedriver stdout");
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let port = line
                .strip_prefix("ChromeDriver was started successfully on port ")
                .and_then(|p| p.trim_end_matches('.').parse::<u16>().ok());
            if let Some(port) = port {
                let _ = tx.send(port);
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(30))
        .map_err(|e| match e {
            mpsc::RecvTimeoutError::Timeout => "no port announced within 30 s".to_string(),
            mpsc::RecvTimeoutError::Disconnected => "it closed its stdout without a port".into(),
        })
}

#[test]
#[ignore = "needs Chromium: cargo test -- --include-ignored (as .ci/run does)"]
fn browser_login_key_endpoints_logout() {
    Browser::require();
    let (dir, t) = start("browser_e2e", "");
    let b = Browser::start(&dir);
    let base = format!("http://{}", t.addr);

    // Not logged in: the settings page sends the browser to the login form.
    b.go(&format!("{base}/workspaces/ops/settings"));
    b.wait_for("#username");
    assert!(b.url().contains("/login?next="), "at {}", b.url());
    b.screenshot("01-login");
    b.type_into("#username", "alice");
    b.type_into("#password", "alice-pw");
    b.click("button[type=submit]");
    b.wait_for("#generate");
    assert!(
        b.url().ends_with("/workspaces/ops/settings"),
        "at {}",
        b.url()
    );
    assert_eq!(b.text("#generate"), "Generate");
    b.screenshot("02-settings-first-visit");

    // Generate: the key is shown once, with a working Copy button.
    b.click("#generate");
    b.wait_for("#app-key");
    let k1 = b.text("#app-key");
    assert!(k1.starts_with("tk_") && k1.len() == 67, "key {k1:?}");
    b.click("button[data-copy=app-key]");
    assert!(
        wait_until(Duration::from_secs(30), || b.text("#app-key-status")
            == "Copied."),
        "the Copy button reported {:?}",
        b.text("#app-key-status")
    );
    b.screenshot("03-settings-new-key");
    assert_eq!(call_with_key(&t, &k1), 200, "the new key works");

    // A later visit shows only the hint; Regenerate replaces the key.
    b.go(&format!("{base}/workspaces/ops/settings"));
    b.wait_for("#app-key-hint");
    assert!(!b.exists("#app-key"), "the key is not shown again");
    assert_eq!(b.text("#generate"), "Regenerate");
    b.screenshot("04-settings-later-visit");
    b.click("#generate");
    b.wait_for("#app-key");
    let k2 = b.text("#app-key");
    assert_ne!(k1, k2);
    assert_eq!(call_with_key(&t, &k1), 401, "the old key stopped working");
    assert_eq!(call_with_key(&t, &k2), 200, "the new key works");

    // The landing page and the endpoint view.
    b.go(&format!("{base}/"));
    b.wait_for("a[href='/tools/inventory/endpoints']");
    b.screenshot("05-home");
    b.click("a[href='/tools/inventory/endpoints']");
    b.wait_for("button[data-copy=curl-0-0]");
    let curl = b.text("#curl-0-1");
    assert!(
        curl.contains(&format!("{base}/tools/inventory/production/add")),
        "curl command {curl:?}"
    );
    b.click("button[data-copy=curl-0-1]");
    assert!(
        wait_until(Duration::from_secs(30), || b.text("#curl-0-1-status")
            == "Copied."),
        "copy curl reported {:?}",
        b.text("#curl-0-1-status")
    );
    b.screenshot("06-endpoints");

    // Log out: the old session cookie stops working.
    let token = b.cookie("trigd_session").expect("the session cookie");
    b.click("header form button[type=submit]");
    b.wait_for("#username");
    b.screenshot("07-logged-out");
    assert!(b.cookie("trigd_session").is_none(), "the cookie is cleared");
    let c = format!("trigd_session={token}");
    let r = t.request(
        "GET",
        "/tools/inventory/production/list",
        &[("Cookie", &c)],
        b"",
    );
    r.err(401, "unauthorized");
}

#[test]
#[ignore = "needs Chromium: cargo test -- --include-ignored (as .ci/run does)"]
fn browser_public_switch_through_confirmation() {
    Browser::require();
    let (dir, t) = start("browser_switch", "");
    let original = dir.read("config.toml");
    let b = Browser::start(&dir);
    let base = format!("http://{}", t.addr);
    let anonymous = || t.get("/tools/inventory/production/list").status;
    let state = || b.text("#switch-state-production");
    // Polled while the page is replaced: a stale element is not yet.
    let state_now = || b.text_if_there("#switch-state-production");

    // Log in on the way to the endpoint view.
    b.go(&format!("{base}/tools/inventory/endpoints"));
    b.wait_for("#username");
    b.type_into("#username", "alice");
    b.type_into("#password", "alice-pw");
    b.click("button[type=submit]");
    b.wait_for("#switch-production");
    assert_eq!(state(), "off");
    assert_eq!(b.text("#switch-production"), "Turn on");
    assert_eq!(anonymous(), 401, "production starts protected");
    b.screenshot("11-switch-off");

    // Turning on asks first, in plain words, listing the endpoints.
    b.click("#switch-production");
    b.wait_for("#confirm-public");
    let warning = b.text("#public-warning");
    assert!(
        warning.contains("Anyone who can reach this server can then call every endpoint"),
        "warning {warning:?}"
    );
    let listed = b.text("#public-endpoints");
    assert!(
        listed.contains(&format!("{base}/tools/inventory/production/list")),
        "endpoints {listed:?}"
    );
    assert_eq!(
        dir.read("config.toml"),
        original,
        "nothing written before confirming"
    );
    b.screenshot("12-switch-confirm");
    b.click("#confirm-public");
    b.wait_for("#switch-state-production");
    assert!(
        wait_until(Duration::from_secs(30), || state_now().as_deref()
            == Some("on")),
        "the view shows {:?} at {}",
        state_now(),
        b.url()
    );
    assert!(
        b.url().ends_with("/tools/inventory/endpoints"),
        "at {}",
        b.url()
    );
    assert_eq!(anonymous(), 200, "public: no credentials needed");
    b.screenshot("13-switch-on");

    // Turning off needs no confirmation.
    assert_eq!(b.text("#switch-production"), "Turn off");
    b.click("#switch-production");
    assert!(
        wait_until(Duration::from_secs(30), || state_now().as_deref()
            == Some("off")),
        "the view shows {:?}",
        state_now()
    );
    assert_eq!(anonymous(), 401, "protected again");
    assert_eq!(
        dir.read("config.toml"),
        original,
        "the file is the original again, layout and all"
    );
    b.screenshot("14-switch-off-again");
}

/// The shipped `config.toml` and `programs/`, copied into `dir` (so the
/// state dir starts empty, as on a fresh clone).
pub fn shipped_setup(dir: &TestDir) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = fs::read_to_string(root.join("config.toml")).expect("shipped config.toml");
    dir.write("config.toml", &config);
    for entry in fs::read_dir(root.join("programs")).expect("shipped programs/") {
        let path = entry.expect("dir entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.ends_with(".toml") {
            let text = fs::read_to_string(&path).expect("program file");
            dir.write(&format!("programs/{name}"), &text);
        }
    }
}

/// The generated password that the first start printed on stderr.
pub fn first_start_password(dir: &TestDir, user: &str) -> String {
    let log = dir.read("stderr.log");
    let prefix = format!("user: {user}   password: ");
    log.lines()
        .find_map(|l| l.trim().strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("no `{prefix}…` line on the first start's stderr:\n{log}"))
        .trim()
        .to_string()
}

#[test]
#[ignore = "needs Chromium: cargo test -- --include-ignored (as .ci/run does)"]
fn newcomer_first_page_names_how_to_sign_in() {
    Browser::require();
    let dir = TestDir::new("browser_first_start");
    shipped_setup(&dir);
    let t = Trigd::start(&dir);
    let password = first_start_password(&dir, "demo");
    let b = Browser::start(&dir);
    let base = format!("http://{}", t.addr);

    // The first page a newcomer opens: the login form, naming the demo user.
    b.go(&format!("{base}/"));
    b.wait_for("#first-start");
    assert!(b.url().contains("/login"), "at {}", b.url());
    let hint = b.text("#first-start");
    assert!(
        hint.contains("demo") && hint.contains("printed"),
        "the first page says how to sign in: {hint:?}"
    );
    b.screenshot("00-first-start");

    // The printed password signs in; the demo tool is listed.
    b.type_into("#username", "demo");
    b.type_into("#password", &password);
    b.click("button[type=submit]");
    b.wait_for("a[href='/tools/demo/endpoints']");
    b.screenshot("00-first-start-home");
    b.click("a[href='/tools/demo/endpoints']");
    b.wait_for("button[data-copy=curl-0-0]");
    b.screenshot("00-first-start-endpoints");
}

#[test]
#[ignore = "needs Chromium: cargo test -- --include-ignored (as .ci/run does)"]
fn browser_run_page_follows_output_and_cancels() {
    use crate::runs_output::group_members;
    use crate::runs_pages::{run, start};
    Browser::require();
    let (dir, t) = start("browser_runs", "kill_grace = \"1s\"");
    let b = Browser::start(&dir);
    let base = format!("http://{}", t.addr);
    let state = |id: &str| {
        let r = t.get(&format!("/api/runs/{id}?api_key={}", crate::util::KEY));
        r.ok()["State"].as_str().unwrap_or("").to_string()
    };

    b.go(&format!("{base}/runs"));
    b.wait_for("#username");
    b.type_into("#username", "alice");
    b.type_into("#password", "alice-pw");
    b.click("button[type=submit]");
    b.wait_for("table.runs");

    // Untrusted output shows as text.
    let noisy = run(&t, 2, "noisy", "");
    b.go(&format!("{base}/runs/{noisy}"));
    b.wait_for("#output");
    let out = b.text("#output");
    assert!(out.contains("<script>alert(1)</script>"), "{out:?}");
    assert!(
        !out.contains('\u{1b}') && out.contains("red & more"),
        "{out:?}"
    );
    b.screenshot("runs-01-untrusted-output");

    // A run printing a line every 200 ms: lines appear while it runs, and
    // the page ends by itself on the final state. It waits after its
    // second line until told: a loaded machine may take longer to load
    // the page than the run's 3 s.
    let ticks = run(&t, 2, "ticks_gated", "&run_async=true");
    b.go(&format!("{base}/runs/{ticks}"));
    b.wait_for("pre[data-follow]");
    assert!(
        wait_until(Duration::from_secs(30), || b
            .text("#output")
            .contains("tick 2")),
        "no live output: {:?}",
        b.text("#output")
    );
    let live = b.text("#output");
    assert!(
        live.contains("live evil .") && !live.contains("1m") && !live.contains('\u{202e}'),
        "8-bit escapes and bidi controls stripped from live output: {live:?}"
    );
    assert_eq!(
        state(&ticks),
        "running",
        "the page showed lines before the end"
    );
    b.screenshot("runs-02-live-output");
    dir.write("work/go-ticks", "");
    assert!(
        wait_until(Duration::from_secs(30), || b
            .exists("#state.state-finished")),
        "the page did not reach the final state"
    );
    assert!(b.text("#output").contains("tick 15"));
    assert!(
        !b.exists("pre[data-follow]"),
        "a finished run is not followed"
    );

    // Cancel from the page: no process of the group is left.
    let id = run(&t, 2, "stubborn", "&run_async=true");
    t.wait_for(Duration::from_secs(30), "the run to start", || {
        dir.read_opt("work/leader")
            .is_some_and(|s| !s.trim().is_empty())
    });
    let leader: u32 = dir.read("work/leader").trim().parse().unwrap();
    b.go(&format!("{base}/runs/{id}"));
    b.wait_for("#cancel");
    b.click("#cancel");
    assert!(
        wait_until(Duration::from_secs(30), || b
            .exists("#state.state-cancelled")),
        "the page does not show the cancel"
    );
    b.screenshot("runs-03-cancelled");
    assert_eq!(state(&id), "cancelled");
    assert!(
        wait_until(Duration::from_secs(30), || group_members(leader).is_empty()),
        "processes of the group left: {:?}",
        group_members(leader)
    );
}
