//! Receiving third-party webhooks on tool endpoint triggers: requests as
//! GitHub, GitLab, Stripe and Slack send them, signed in the test with the
//! shared secret; values from nested JSON, form, multipart and XML bodies;
//! rules that match and that do not (ignored, logged, counted); the raw
//! body on stdin and in a temporary file; bad input refused before any run;
//! no secret in any log line.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};

use crate::util::*;

const GITHUB_SECRET: &str = "gh-webhook-secret-8d1f0b3e";
const GITLAB_TOKEN: &str = "gl-token-2c7e91aa";
const STRIPE_SECRET: &str = "whsec_5f0c1d2e3a4b";
const SLACK_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
const RULE_TOKEN: &str = "rule-token-77aa01";
const SECRETS: [&str; 5] = [
    GITHUB_SECRET,
    GITLAB_TOKEN,
    STRIPE_SECRET,
    SLACK_SECRET,
    RULE_TOKEN,
];

/// A GitHub push event (8.5 KB, as GitHub sends it: compact JSON).
const PUSH: &str = include_str!("data/github-push.json");

const PROGRAM: &str = r#"
id = 1
name = "hooks"
workspace = "ops"

[[functions]]
name = "deploy"
command = ["printf", "%s|%s|%s|%s", "{ref}", "{email}", "{first}", "{added}"]
[functions.webhook]
active = false
outputs = ["ref", "email", "first", "added"]

[[functions]]
name = "one"
command = ["printf", "%s", "{a}"]
[functions.webhook]
active = false
outputs = ["a"]

[[functions]]
name = "two"
command = ["printf", "%s|%s", "{a}", "{b}"]
[functions.webhook]
active = false
outputs = ["a", "b"]

[[functions]]
name = "reply"
steps = [{ shell = "printf '{\"response_type\":\"in_channel\",\"text\":\"Deploying %s\"}' \"$text\"" }]
[functions.webhook]
active = false
outputs = ["text"]

[[functions]]
name = "nothing"
command = ["true"]

[[functions]]
name = "body"
steps = [
  { shell = "printf 'stdin=%s file=%s' \"$(wc -c | tr -d ' ')\" \"$(wc -c < \"$path\" | tr -d ' ')\"" },
  { shell = "printf '%s' \"$path\"" },
]
[functions.webhook]
active = false
outputs = ["path"]
"#;

const TOOL: &str = r#"
[[tools]]
name = "hooks"
workspace = "ops"
[tools.environments.prod]
public = true

[[tools.triggers]]
kind = "endpoint"
name = "github"
program = 1
function = "deploy"
[tools.triggers.verify]
scheme = "hmac-sha256"
header = "X-Hub-Signature-256"
prefix = "sha256="
secret_file = "secrets/github"
[tools.triggers.values]
ref = { json = "ref" }
email = { json = "head_commit.author.email" }
first = { json = "commits.0.id" }
added = { json = "commits.0.added" }
[tools.triggers.rule]
and = [
  { header = "X-GitHub-Event", equals = "push" },
  { json = "ref", regex = "^refs/heads/main$" },
  { not = { json = "head_commit.message", regex = "\\[skip ci\\]" } },
]
[tools.triggers.response]
headers = { X-Hook = "github" }
ignored_status = 202

[[tools.triggers]]
kind = "endpoint"
name = "github-sha1"
program = 1
function = "one"
verify = { scheme = "hmac-sha1", header = "X-Hub-Signature", prefix = "sha1=", secret_file = "secrets/github" }
values = { a = { json = "after" } }

[[tools.triggers]]
kind = "endpoint"
name = "gitlab"
program = 1
function = "two"
verify = { scheme = "token", header = "X-Gitlab-Token", secret_file = "secrets/gitlab" }
values = { a = { header = "X-Gitlab-Event" }, b = { json = "project.path_with_namespace" } }

[[tools.triggers]]
kind = "endpoint"
name = "stripe"
program = 1
function = "one"
verify = { scheme = "stripe", secret_file = "secrets/stripe" }
values = { a = { json = "data.object.amount" } }
response = { status = 202, output = false }

[[tools.triggers]]
kind = "endpoint"
name = "slack"
program = 1
function = "two"
verify = { scheme = "slack", secret_file = "secrets/slack" }
values = { a = { form = "command" }, b = { form = "text" } }

[[tools.triggers]]
kind = "endpoint"
name = "slash"
program = 1
function = "reply"
verify = { scheme = "slack", secret_file = "secrets/slack" }
values = { text = { form = "text" } }
response = { body = "stdout_json" }

[[tools.triggers]]
kind = "endpoint"
name = "slash-later"
program = 1
function = "reply"
verify = { scheme = "slack", secret_file = "secrets/slack" }
values = { text = { form = "text" } }
response = { run_async = true, text = "Working on it…" }

[[tools.triggers]]
kind = "endpoint"
name = "slash-plain"
program = 1
function = "two"
verify = { scheme = "slack", secret_file = "secrets/slack" }
values = { a = { form = "command" }, b = { form = "text" } }
response = { body = "stdout", content_type = "text/markdown" }

[[tools.triggers]]
kind = "endpoint"
name = "slash-broken"
program = 1
function = "two"
verify = { scheme = "slack", secret_file = "secrets/slack" }
values = { a = { form = "command" }, b = { form = "text" } }
response = { body = "stdout_json", headers = { X-Hook = "slash" } }

[[tools.triggers]]
kind = "endpoint"
name = "shaped-plain"
program = 1
function = "nothing"
response = { status = 201, output = false, headers = { X-Test = "1" } }

[[tools.triggers]]
kind = "endpoint"
name = "forms"
program = 1
function = "two"
values = { a = { form = "msg" }, b = { form = "file" } }

[[tools.triggers]]
kind = "endpoint"
name = "alert"
program = 1
function = "two"
values = { a = { xml = "alert.status" }, b = { xml = "alert.labels.l.1" } }

[[tools.triggers]]
kind = "endpoint"
name = "body"
program = 1
function = "body"
stdin = "body"
values = { path = { body = "file" } }

[[tools.triggers]]
kind = "endpoint"
name = "whole"
program = 1
function = "two"
values = { a = { whole = "query" }, b = { whole = "payload" } }

[[tools.triggers]]
kind = "endpoint"
name = "facts"
method = "PUT"
program = 1
function = "deploy"
values = { ref = { request = "method" }, email = { request = "remote_addr" }, first = { payload = "alert.labels.l.0" }, added = { literal = "fixed" } }

[[tools.triggers]]
kind = "endpoint"
name = "signed-only"
program = 1
function = "nothing"
verify = { scheme = "token", header = "X-Token", secret_file = "secrets/rule" }

[[tools.triggers]]
kind = "endpoint"
name = "inside"
program = 1
function = "one"
values = { a = { query = "x", default = "none" } }
rule = { or = [ { client_ip = ["10.0.0.0/8"] }, { signature = { scheme = "token", header = "X-Token", secret_file = "secrets/rule" } } ] }
"#;

/// Start trigd with the hooks program and tool; `server` goes in `[server]`.
fn start(name: &str, server: &str) -> (TestDir, Trigd) {
    let dir = prepare(name, server);
    let t = Trigd::start(&dir);
    (dir, t)
}

/// The directory [`start`] serves, with its secrets.
fn prepare(name: &str, server: &str) -> TestDir {
    let dir = setup(name, server, &[("hooks.toml", PROGRAM)]);
    dir.append("config.toml", TOOL);
    dir.mkdir("secrets");
    for (f, s) in [
        ("github", GITHUB_SECRET),
        ("gitlab", GITLAB_TOKEN),
        ("stripe", STRIPE_SECRET),
        ("slack", SLACK_SECRET),
        ("rule", RULE_TOKEN),
    ] {
        dir.write(&format!("secrets/{f}"), &format!("{s}\n"));
    }
    dir
}

fn hmac_sha256(key: &str, parts: &[&[u8]]) -> Vec<u8> {
    let mut m = <Hmac<sha2::Sha256> as hmac::KeyInit>::new_from_slice(key.as_bytes()).unwrap();
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().to_vec()
}

fn hmac_sha1(key: &str, body: &[u8]) -> Vec<u8> {
    let mut m = <Hmac<sha1::Sha1> as hmac::KeyInit>::new_from_slice(key.as_bytes()).unwrap();
    m.update(body);
    m.finalize().into_bytes().to_vec()
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A delivery as GitHub sends it, signed with `secret`.
fn github(t: &Trigd, event: &str, body: &str, secret: &str) -> Reply {
    let sig = format!(
        "sha256={}",
        hex::encode(hmac_sha256(secret, &[body.as_bytes()]))
    );
    let sig1 = format!("sha1={}", hex::encode(hmac_sha1(secret, body.as_bytes())));
    let headers = [
        ("User-Agent", "GitHub-Hookshot/a1b2c3d"),
        ("Content-Type", "application/json"),
        ("X-GitHub-Event", event),
        ("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958"),
        ("X-GitHub-Hook-ID", "292430182"),
        ("X-Hub-Signature", &sig1),
        ("X-Hub-Signature-256", &sig),
    ];
    t.request(
        "POST",
        "/tools/hooks/prod/github",
        &headers,
        body.as_bytes(),
    )
}

/// The Result of a successful sync run.
#[track_caller]
fn result(r: &Reply) -> Value {
    let v = r.ok();
    r.check_eq(&v["Success"], &json!("Program finished."), "Success");
    v["Result"].clone()
}

/// Fail if a secret appears in the server's log.
#[track_caller]
fn no_secret_logged(dir: &TestDir) {
    let log = dir.read("stderr.log");
    for s in SECRETS {
        assert!(!log.contains(s), "secret {s:?} in the log:\n{log}");
    }
}

/// The `/metrics` text.
fn metrics(t: &Trigd) -> String {
    t.get("/metrics").status_is(200).text()
}

/// Runs of program 1 counted in `/metrics` (0 when none).
fn runs_of_program_1(t: &Trigd) -> u64 {
    metrics(t)
        .lines()
        .filter(|l| l.starts_with("trigd_runs_total{program=\"1\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

// ---------------------------------------------------------------------------
// GitHub

#[test]
fn github_push_signed_with_sha256_runs_with_values_from_nested_json() {
    let (dir, t) = start("webhooks_github", "");
    let r = github(&t, "push", PUSH, GITHUB_SECRET);
    r.check_eq(r.header("x-hook"), Some("github"), "extra response header");
    let want = "refs/heads/main|mona@octo-org.example|6113728f27ae82c7b1a177c8d03f9e96e0adf246|[\"pricing/plans.html\"]";
    r.check_eq(result(&r), json!([want]), "Result");
    no_secret_logged(&dir);
}

#[test]
fn a_verified_trigger_without_values_ignores_the_payload() {
    let (_dir, t) = start("webhooks_signed_only", "");
    let h = [
        ("Content-Type", "application/json"),
        ("X-Token", RULE_TOKEN),
    ];
    let r = t.request("POST", "/tools/hooks/prod/signed-only", &h, PUSH.as_bytes());
    r.check_eq(result(&r), json!([""]), "Result");
    let h = [("Content-Type", "application/json"), ("X-Token", "wrong")];
    let r = t.request("POST", "/tools/hooks/prod/signed-only", &h, PUSH.as_bytes());
    r.err(403, "signature_mismatch");
}

/// A `[response]` table shapes a trigger that has nothing else of a
/// signed endpoint (no `verify`, `values` or `rule`): it was ignored, and
/// `output = false` still answered the `Result`.
#[test]
fn a_response_table_shapes_a_plain_trigger_too() {
    let (_dir, t) = start("wh_shaped_plain", "");
    let r = t.post("/tools/hooks/prod/shaped-plain");
    r.status_is(201);
    r.check_eq(r.header("X-Test"), Some("1"), "the extra header");
    let v = r.json();
    r.check(
        v.get("Result").is_none() && v["Success"] == "Program finished.",
        format!("output = false hides Result: {v}"),
    );
}

#[test]
fn github_legacy_sha1_header_is_verified_too() {
    let (_dir, t) = start("webhooks_github_sha1", "");
    let sig = format!(
        "sha1={}",
        hex::encode(hmac_sha1(GITHUB_SECRET, PUSH.as_bytes()))
    );
    let h = [
        ("Content-Type", "application/json"),
        ("X-Hub-Signature", sig.as_str()),
    ];
    let r = t.request("POST", "/tools/hooks/prod/github-sha1", &h, PUSH.as_bytes());
    r.check_eq(
        result(&r),
        json!(["0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c"]),
        "Result",
    );
    let bad = format!("sha1={}", hex::encode(hmac_sha1("other", PUSH.as_bytes())));
    let h = [
        ("Content-Type", "application/json"),
        ("X-Hub-Signature", bad.as_str()),
    ];
    let r = t.request("POST", "/tools/hooks/prod/github-sha1", &h, PUSH.as_bytes());
    r.err(403, "signature_mismatch");
}

#[test]
fn events_the_rule_does_not_match_are_ignored_logged_and_counted() {
    let (dir, t) = start("webhooks_ignored", "");
    let ping = r#"{"zen":"Keep it logically awesome.","hook_id":292430182,"hook":{"type":"Repository","active":true,"events":["push"]}}"#;
    let r = github(&t, "ping", ping, GITHUB_SECRET);
    let v = r.status_is(202).json();
    r.check_eq(&v["Code"], &json!("rules_not_matched"), "Code");
    let why = v["Reason"].as_str().unwrap_or_default().to_string();
    r.check_eq(
        why.as_str(),
        "rule.and[0]: header 'x-github-event' is not the expected value",
        "Reason",
    );
    r.check_eq(
        r.header("x-hook"),
        Some("github"),
        "extra header on an ignored answer",
    );
    // Another branch: the reason names the rule, not the expected pattern.
    let dev = PUSH.replace("refs/heads/main", "refs/heads/dev");
    let v = github(&t, "push", &dev, GITHUB_SECRET)
        .status_is(202)
        .json();
    let why = v["Reason"].as_str().unwrap_or_default();
    assert_eq!(
        why, "rule.and[1]: JSON path 'ref' does not match the pattern",
        "{v}"
    );
    assert!(
        !v.to_string().contains("heads/main"),
        "expected value leaked: {v}"
    );
    // `not`: a commit message with [skip ci].
    let skip = PUSH.replace("Fix a typo in the footer", "Fix a typo [skip ci]");
    let v = github(&t, "push", &skip, GITHUB_SECRET)
        .status_is(202)
        .json();
    assert_eq!(
        v["Reason"],
        json!("rule.and[2].not matched, but must not"),
        "{v}"
    );
    let m = metrics(&t);
    let line =
        "trigd_webhooks_not_run_total{tool=\"hooks\",trigger=\"github\",outcome=\"ignored\"} 3";
    assert!(m.contains(line), "{m}");
    assert_eq!(runs_of_program_1(&t), 0);
    let log = dir.read("stderr.log");
    assert!(
        log.contains("signed endpoint hooks/prod/github ignored: rule.and[0]"),
        "{log}"
    );
    no_secret_logged(&dir);
}

#[test]
fn bad_signatures_are_refused_before_anything_runs() {
    let (dir, t) = start("webhooks_bad_signatures", "");
    // Wrong secret.
    github(&t, "push", PUSH, "not-the-secret").err(403, "signature_mismatch");
    // Body changed after signing.
    let sig = format!(
        "sha256={}",
        hex::encode(hmac_sha256(GITHUB_SECRET, &[PUSH.as_bytes()]))
    );
    let tampered = PUSH.replace("monalisa", "mallory");
    let h = [
        ("Content-Type", "application/json"),
        ("X-Hub-Signature-256", sig.as_str()),
    ];
    let r = t.request("POST", "/tools/hooks/prod/github", &h, tampered.as_bytes());
    r.err(403, "signature_mismatch");
    // Missing header.
    let h = [
        ("Content-Type", "application/json"),
        ("X-GitHub-Event", "push"),
    ];
    let r = t.request("POST", "/tools/hooks/prod/github", &h, PUSH.as_bytes());
    let v = r.err(401, "signature_missing");
    assert!(
        v["Error"].as_str().unwrap().contains("x-hub-signature-256"),
        "{v}"
    );
    // Wrong length, not hex, no prefix.
    for (sig, why) in [
        (format!("sha256={}", &sig[7..47]), "wrong length"),
        ("sha256=zzzz".to_string(), "not hexadecimal"),
        ("sha256=".to_string(), "no signature after the prefix"),
    ] {
        let h = [
            ("Content-Type", "application/json"),
            ("X-Hub-Signature-256", sig.as_str()),
        ];
        let r = t.request("POST", "/tools/hooks/prod/github", &h, PUSH.as_bytes());
        let v = r.err(403, "signature_malformed");
        assert!(v["Error"].as_str().unwrap().contains(why), "{v}");
    }
    // Several signatures in one header: one valid is enough.
    let both = format!("sha256={},{sig}", "0".repeat(64));
    let h = [
        ("Content-Type", "application/json"),
        ("X-GitHub-Event", "push"),
        ("X-Hub-Signature-256", both.as_str()),
    ];
    let r = t.request("POST", "/tools/hooks/prod/github", &h, PUSH.as_bytes());
    result(&r);
    assert_eq!(runs_of_program_1(&t), 1);
    let m = metrics(&t);
    for (code, n) in [
        ("signature_mismatch", 2),
        ("signature_missing", 1),
        ("signature_malformed", 3),
    ] {
        let line = format!("trigd_webhooks_not_run_total{{tool=\"hooks\",trigger=\"github\",outcome=\"{code}\"}} {n}");
        assert!(m.contains(&line), "{line}\n{m}");
    }
    no_secret_logged(&dir);
}

// ---------------------------------------------------------------------------
// GitLab, Stripe, Slack

#[test]
fn gitlab_token_header() {
    let (dir, t) = start("webhooks_gitlab", "");
    let body = r#"{"object_kind":"push","ref":"refs/heads/main","project":{"id":15,"name":"Diaspora","path_with_namespace":"mike/diaspora"},"commits":[]}"#;
    let send = |token: Option<&str>| {
        let mut h = vec![
            ("Content-Type", "application/json"),
            ("X-Gitlab-Event", "Push Hook"),
            ("User-Agent", "GitLab/17.5.0"),
        ];
        if let Some(tok) = token {
            h.push(("X-Gitlab-Token", tok));
        }
        t.request("POST", "/tools/hooks/prod/gitlab", &h, body.as_bytes())
    };
    let r = send(Some(GITLAB_TOKEN));
    r.check_eq(result(&r), json!(["Push Hook|mike/diaspora"]), "Result");
    send(Some("gl-token-2c7e91ab")).err(403, "signature_mismatch");
    send(Some(&GITLAB_TOKEN[..10])).err(403, "signature_mismatch");
    send(None).err(401, "signature_missing");
    no_secret_logged(&dir);
}

/// A Stripe delivery signed at unix time `t`.
fn stripe(t: &Trigd, body: &str, ts: u64, secret: &str) -> Reply {
    let sig = hex::encode(hmac_sha256(
        secret,
        &[ts.to_string().as_bytes(), b".", body.as_bytes()],
    ));
    let header = format!(
        "t={ts},v1={sig},v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39"
    );
    let h = [
        ("Content-Type", "application/json; charset=utf-8"),
        (
            "User-Agent",
            "Stripe/1.0 (+https://stripe.com/docs/webhooks)",
        ),
        ("Stripe-Signature", header.as_str()),
    ];
    t.request("POST", "/tools/hooks/prod/stripe", &h, body.as_bytes())
}

#[test]
fn stripe_signature_with_replay_window_and_shaped_answer() {
    let (dir, t) = start("webhooks_stripe", "");
    let body = r#"{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","object":"event","api_version":"2023-10-16","type":"payment_intent.succeeded","data":{"object":{"id":"pi_3MtwBwLkdIwHu7ix28a3tqPa","object":"payment_intent","amount":2000,"currency":"usd"}}}"#;
    let r = stripe(&t, body, now(), STRIPE_SECRET);
    let v = r.status_is(202).json();
    r.check_eq(&v["Success"], &json!("Program finished."), "Success");
    assert!(
        v.get("Result").is_none(),
        "output = false must hide Result: {v}"
    );
    // A replay of a delivery signed ten minutes ago (tolerance 5 minutes).
    stripe(&t, body, now() - 600, STRIPE_SECRET).err(403, "signature_expired");
    stripe(&t, body, now(), "whsec_wrong").err(403, "signature_mismatch");
    let h = [
        ("Content-Type", "application/json"),
        ("Stripe-Signature", "v1=abcd"),
    ];
    let v = t
        .request("POST", "/tools/hooks/prod/stripe", &h, body.as_bytes())
        .err(403, "signature_malformed");
    assert!(v["Error"].as_str().unwrap().contains("timestamp"), "{v}");
    assert_eq!(runs_of_program_1(&t), 1);
    no_secret_logged(&dir);
}

/// A Slack slash command signed at `ts`.
fn slack(t: &Trigd, body: &str, ts: u64) -> Reply {
    slack_to(t, "slack", body, ts)
}

/// A Slack slash command signed at `ts`, to trigger `trigger`.
fn slack_to(t: &Trigd, trigger: &str, body: &str, ts: u64) -> Reply {
    let ts = ts.to_string();
    let sig = format!(
        "v0={}",
        hex::encode(hmac_sha256(
            SLACK_SECRET,
            &[b"v0:", ts.as_bytes(), b":", body.as_bytes()]
        ))
    );
    let h = [
        ("Content-Type", "application/x-www-form-urlencoded"),
        ("User-Agent", "Slackbot 1.0 (+https://api.slack.com/robots)"),
        ("X-Slack-Request-Timestamp", ts.as_str()),
        ("X-Slack-Signature", sig.as_str()),
    ];
    t.request(
        "POST",
        &format!("/tools/hooks/prod/{trigger}"),
        &h,
        body.as_bytes(),
    )
}

#[test]
fn slack_slash_command_form_with_replay_window() {
    let (dir, t) = start("webhooks_slack", "");
    let body = "token=gIkuvaNzQIHg97ATvDxqgjtO&team_id=T0001&team_domain=example&channel_id=C2147483705&channel_name=test&user_id=U2147483697&user_name=Steve&command=%2Fdeploy&text=website+to+prod&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2F1234%2F5678&trigger_id=13345224609.738474920.8088930838d88f008e0";
    let r = slack(&t, body, now());
    r.check_eq(result(&r), json!(["/deploy|website to prod"]), "Result");
    slack(&t, body, now() - 301 - 60).err(403, "signature_expired");
    // Signed for another timestamp than the one sent.
    let h = [
        ("Content-Type", "application/x-www-form-urlencoded"),
        ("X-Slack-Request-Timestamp", "1531420618"),
        (
            "X-Slack-Signature",
            "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503",
        ),
    ];
    t.request("POST", "/tools/hooks/prod/slack", &h, body.as_bytes())
        .err(403, "signature_mismatch");
    no_secret_logged(&dir);
}

#[test]
fn a_slash_command_is_answered_with_a_body_slack_shows() {
    let (_dir, t) = start("webhooks_slash", "");
    let body = "team_id=T0001&user_name=Steve&command=%2Fdeploy&text=website&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2F1234%2F5678";
    // The step's stdout as JSON: Slack's response_type and text.
    let r = slack_to(&t, "slash", body, now());
    r.status_is(200);
    r.check_eq(
        r.header("Content-Type"),
        Some("application/json"),
        "Content-Type",
    );
    r.check_eq(
        r.json(),
        json!({"response_type": "in_channel", "text": "Deploying website"}),
        "body",
    );
    // A fixed text at once, the run going on.
    let r = slack_to(&t, "slash-later", body, now());
    r.status_is(200);
    r.check_eq(r.text(), "Working on it…".to_string(), "body");
    r.check_eq(
        r.header("Content-Type"),
        Some("text/plain; charset=utf-8"),
        "Content-Type",
    );
    // The stdout as text, with the content type the trigger names.
    let r = slack_to(&t, "slash-plain", body, now());
    r.status_is(200);
    r.check_eq(r.text(), "/deploy|website".to_string(), "body");
    r.check_eq(
        r.header("Content-Type"),
        Some("text/markdown"),
        "Content-Type",
    );
    // A program's output under the trigger's type never runs as a page of
    // trigd's origin (text/html, say).
    r.check_eq(r.header("Content-Security-Policy"), Some("sandbox"), "CSP");
    r.check_eq(
        r.header("X-Content-Type-Options"),
        Some("nosniff"),
        "nosniff",
    );
    // stdout_json whose stdout is not JSON: a Code, the trigger's headers.
    let r = slack_to(&t, "slash-broken", body, now());
    r.err(500, "answer_not_json");
    r.check_eq(r.header("X-Hook"), Some("slash"), "X-Hook");
    // Refusals stay JSON errors.
    slack_to(&t, "slash", body, now() - 1000).err(403, "signature_expired");
}

// ---------------------------------------------------------------------------
// Payload kinds and value sources

#[test]
fn multipart_and_xml_payloads() {
    let (_dir, t) = start("webhooks_multipart_xml", "");
    let body = "--------------------------d74496d66958873e\r\nContent-Disposition: form-data; name=\"msg\"\r\n\r\nbuild 42 passed\r\n--------------------------d74496d66958873e\r\nContent-Disposition: form-data; name=\"file\"; filename=\"report.txt\"\r\nContent-Type: text/plain\r\n\r\nall green\r\n--------------------------d74496d66958873e--\r\n";
    let ct = "multipart/form-data; boundary=------------------------d74496d66958873e";
    let r = t.request(
        "POST",
        "/tools/hooks/prod/forms",
        &[("Content-Type", ct)],
        body.as_bytes(),
    );
    r.check_eq(result(&r), json!(["build 42 passed|all green"]), "Result");
    let cut = &body[..body.len() - 4];
    let r = t.request(
        "POST",
        "/tools/hooks/prod/forms",
        &[("Content-Type", ct)],
        cut.as_bytes(),
    );
    r.err(400, "invalid_payload");
    // The same trigger reads urlencoded forms.
    let h = [("Content-Type", "application/x-www-form-urlencoded")];
    let r = t.request("POST", "/tools/hooks/prod/forms", &h, b"msg=hi&file=x%26y");
    r.check_eq(result(&r), json!(["hi|x&y"]), "Result");

    let xml = r#"<?xml version="1.0" encoding="UTF-8"?><alert><status>firing</status><labels><l>disk</l><l>web-1</l></labels></alert>"#;
    let h = [("Content-Type", "application/xml")];
    let r = t.request("POST", "/tools/hooks/prod/alert", &h, xml.as_bytes());
    r.check_eq(result(&r), json!(["firing|web-1"]), "Result");
    let r = t.request(
        "POST",
        "/tools/hooks/prod/alert",
        &h,
        b"<alert><status>firing</alert>",
    );
    let v = r.err(400, "invalid_payload");
    assert!(v["Error"].as_str().unwrap().contains("XML"), "{v}");
    let h = [("Content-Type", "application/json")];
    let r = t.request("POST", "/tools/hooks/prod/alert", &h, br#"{"alert":{}}"#);
    r.err(415, "unsupported_media_type");
    assert_eq!(runs_of_program_1(&t), 3);
}

#[test]
fn raw_body_on_stdin_and_in_a_file_removed_after_the_run() {
    let (dir, t) = start("webhooks_body", "");
    let h = [("Content-Type", "application/octet-stream")];
    let body = b"\x00\x01binary body\xff";
    let r = t.request("POST", "/tools/hooks/prod/body", &h, body);
    let res = result(&r);
    r.check_eq(
        &res[0],
        &json!(format!("stdin={} file={}", body.len(), body.len())),
        "sizes",
    );
    let path = res[1].as_str().unwrap().to_string();
    assert!(path.starts_with(&dir.path_str("state/bodies/")), "{path}");
    assert!(
        wait_until(WAIT, || !std::path::Path::new(&path).exists()),
        "{path} still exists after the run"
    );
}

#[test]
fn whole_query_and_payload_as_json_values() {
    let (_dir, t) = start("webhooks_whole", "");
    let h = [("Content-Type", "application/json")];
    let r = t.request(
        "POST",
        "/tools/hooks/prod/whole?env=prod&tag=a&tag=b",
        &h,
        br#"{"n":1,"list":[true,null]}"#,
    );
    let res = result(&r);
    let s = res[0].as_str().unwrap();
    let (q, p) = s.split_once('|').unwrap();
    let q: Value = serde_json::from_str(q).unwrap();
    let p: Value = serde_json::from_str(p).unwrap();
    assert_eq!(q, json!({"env": "prod", "tag": ["a", "b"]}));
    assert_eq!(p, json!({"n": 1, "list": [true, null]}));
}

#[test]
fn method_client_address_any_payload_and_literal_values() {
    let (_dir, t) = start("webhooks_facts", "");
    let xml = "<alert><labels><l>disk</l><l>web-1</l></labels></alert>";
    let r = t.request(
        "PUT",
        "/tools/hooks/prod/facts",
        &[("Content-Type", "text/xml")],
        xml.as_bytes(),
    );
    r.check_eq(result(&r), json!(["PUT|127.0.0.1|disk|fixed"]), "Result");
    // A form body without that path: the value is missing.
    let h = [("Content-Type", "application/x-www-form-urlencoded")];
    let r = t.request("PUT", "/tools/hooks/prod/facts", &h, b"alert=x");
    r.err(400, "variables_mismatch");
}

#[test]
fn client_ranges_believe_forwarded_for_only_behind_trusted_proxies() {
    let (_dir, t) = start("webhooks_cidr", "");
    // 127.0.0.1 is not in 10.0.0.0/8, and X-Forwarded-For from an untrusted
    // peer is not believed.
    let h = [("X-Forwarded-For", "10.1.2.3")];
    let v = t
        .request("POST", "/tools/hooks/prod/inside", &h, b"")
        .status_is(200)
        .json();
    assert_eq!(v["Code"], json!("rules_not_matched"), "{v}");
    let why = v["Reason"].as_str().unwrap();
    assert!(
        why.contains("rule.or[0]: the client address is not in the allowed ranges"),
        "{why}"
    );
    assert!(why.contains("rule.or[1]: signature check failed"), "{why}");
    // The signature leaf of the `or` lets a caller with the token through.
    let r = t.request(
        "POST",
        "/tools/hooks/prod/inside?x=tok",
        &[("X-Token", RULE_TOKEN)],
        b"",
    );
    r.check_eq(result(&r), json!(["tok"]), "Result");
    drop(t);

    let (_dir, t) = start("webhooks_cidr_proxy", "trusted_proxies = [\"127.0.0.1\"]");
    let r = t.request("POST", "/tools/hooks/prod/inside", &h, b"");
    r.check_eq(result(&r), json!(["none"]), "Result (default value)");
    // A spoofed left part is ignored: the right-most untrusted hop counts.
    let spoof = [("X-Forwarded-For", "10.9.9.9, 203.0.113.7")];
    let v = t
        .request("POST", "/tools/hooks/prod/inside", &spoof, b"")
        .status_is(200)
        .json();
    assert_eq!(v["Code"], json!("rules_not_matched"), "{v}");
}

/// On a dual-stack listener (`[::]`) an IPv4 client is `::ffff:127.0.0.1`;
/// `client_ip` takes it as `127.0.0.1`, and a range written IPv4-mapped
/// (`::ffff:127.0.0.0/104`) as the IPv4 range it names (`127.0.0.0/8`).
#[test]
fn client_ip_reads_ipv4_mapped_clients_and_ranges_as_ipv4() {
    let dir = prepare("webhooks_cidr_mapped", "");
    dir.append(
        "config.toml",
        r#"
[[tools.triggers]]
kind = "endpoint"
name = "mapped"
program = 1
function = "one"
values = { a = { query = "x", default = "none" } }
rule = { and = [ { client_ip = ["127.0.0.0/8"] }, { client_ip = ["::ffff:127.0.0.0/104"] } ] }
"#,
    );
    let mut t = Trigd::start_listen(&dir, "[::]:0");
    let port = t.addr.rsplit(':').next().unwrap_or_default().to_string();
    t.addr = format!("127.0.0.1:{port}");
    let r = t.request("POST", "/tools/hooks/prod/mapped?x=in", &[], b"");
    r.check_eq(result(&r), json!(["in"]), "Result");
}

// ---------------------------------------------------------------------------
// Bad input

#[test]
fn bad_bodies_are_clear_errors_and_nothing_runs() {
    let (dir, t) = start("webhooks_bad_input", "max_body_bytes = 16384");
    // Invalid JSON, correctly signed.
    let r = github(&t, "push", "{\"ref\": \"refs/heads/main\", ", GITHUB_SECRET);
    let v = r.err(400, "invalid_payload");
    assert!(
        v["Error"].as_str().unwrap().contains("not valid JSON"),
        "{v}"
    );
    // A form body where the trigger reads JSON.
    let body = "payload=%7B%22ref%22%3A%22refs%2Fheads%2Fmain%22%7D";
    let sig = format!(
        "sha256={}",
        hex::encode(hmac_sha256(GITHUB_SECRET, &[body.as_bytes()]))
    );
    let h = [
        ("Content-Type", "application/x-www-form-urlencoded"),
        ("X-GitHub-Event", "push"),
        ("X-Hub-Signature-256", sig.as_str()),
    ];
    let r = t.request("POST", "/tools/hooks/prod/github", &h, body.as_bytes());
    r.err(415, "unsupported_media_type");
    // A push without head_commit (a deleted branch): the value is missing.
    let deleted =
        json!({"ref": "refs/heads/main", "deleted": true, "commits": [], "head_commit": null});
    let v = github(&t, "push", &deleted.to_string(), GITHUB_SECRET).err(400, "variables_mismatch");
    assert!(
        v["Error"]
            .as_str()
            .unwrap()
            .contains("head_commit.author.email"),
        "{v}"
    );
    // Over the body limit.
    let big = format!("{{\"pad\":\"{}\"}}", "x".repeat(20_000));
    github(&t, "push", &big, GITHUB_SECRET).err(413, "payload_too_large");
    assert_eq!(runs_of_program_1(&t), 0);
    no_secret_logged(&dir);
}

#[test]
fn check_reports_bad_receive_settings_with_locations() {
    let dir = setup("webhooks_check", "", &[("hooks.toml", PROGRAM)]);
    dir.append(
        "config.toml",
        r#"
[[tools]]
name = "hooks"
workspace = "ops"
[tools.environments.prod]

[[tools.triggers]]
kind = "endpoint"
name = "github"
program = 1
function = "two"
verify = { scheme = "hmac-sha384", header = "X-Sig", secret_file = "nope" }
values = { a = { json = "a..b" }, c = { header = "X" } }
rule = { and = [ { json = "ref", regex = "(" }, { client_ip = ["10.0.0.0/33"] }, { header = "X", equals = "a", regex = "b" } ] }
response = { status = 500 }

[[tools.triggers]]
kind = "endpoint"
name = "gitlab"
program = 1
function = "one"
verify = { scheme = "token", header = "X-Gitlab-Token", secret_file = "missing-secret" }
"#,
    );
    let out = trigd(&["check", "--config", &dir.path_str("config.toml")], None);
    out.code_is(1);
    for want in [
        "tools[0].triggers[0].verify.scheme: unknown scheme \"hmac-sha384\"",
        "tools[0].triggers[0].values.a.json: \"a..b\" is not a path",
        "tools[0].triggers[0].values.c: \"c\" is not an output of the function",
        "tools[0].triggers[0].values: output \"b\" has no source",
        "tools[0].triggers[0].rule.and[0].regex: invalid regex",
        "tools[0].triggers[0].rule.and[1].client_ip[0]: \"10.0.0.0/33\" is not an address range",
        "tools[0].triggers[0].rule.and[2]: a source in a rule needs exactly one of equals or regex",
        "tools[0].triggers[0].response.status: must be a status in 200..=299, got 500",
        "tools[0].triggers[1].verify.secret_file: cannot read",
    ] {
        out.check(
            out.stderr.contains(want) || out.stdout.contains(want),
            format!("missing {want:?}"),
        );
    }
    let text = format!("{}{}", out.stdout, out.stderr);
    out.check(text.contains("config.toml:"), "errors carry file:line:col");
}

#[test]
fn an_answer_never_echoes_the_signature_sent() {
    // An answer never echoes a signature it was sent.
    let (_dir, t) = start("webhooks_no_echo", "");
    let sent = base64::engine::general_purpose::STANDARD.encode([7u8; 32]);
    let h = [
        ("Content-Type", "application/json"),
        ("X-Hub-Signature-256", sent.as_str()),
    ];
    let r = t.request("POST", "/tools/hooks/prod/github", &h, PUSH.as_bytes());
    let v = r.err(403, "signature_malformed");
    assert!(!v.to_string().contains(&sent), "{v}");
}

#[test]
fn a_rotated_secret_file_takes_effect_on_sighup() {
    let (dir, t) = start("webhooks_rotate", "");
    let send = |token: &str| {
        let h = [
            ("Content-Type", "application/json"),
            ("X-Gitlab-Token", token),
            ("X-Gitlab-Event", "Push Hook"),
        ];
        let body = br#"{"project":{"path_with_namespace":"a/b"}}"#;
        t.request("POST", "/tools/hooks/prod/gitlab", &h, body)
    };
    result(&send(GITLAB_TOKEN));
    // SIGHUP applies it too (the watcher may be first: either way the
    // change is seen and everything is loaded again).
    dir.write("secrets/gitlab", "gl-token-rotated-5b1c\n");
    let st = std::process::Command::new("kill")
        .args(["-HUP", &t.pid().to_string()])
        .status()
        .expect("run kill");
    assert!(st.success(), "kill -HUP failed");
    assert!(
        wait_until(WAIT, || send("gl-token-rotated-5b1c").status == 200),
        "the rotated token was not accepted\n{}",
        dir.read("stderr.log")
    );
    send(GITLAB_TOKEN).err(403, "signature_mismatch");
    assert!(!dir.read("stderr.log").contains("gl-token-rotated-5b1c"));
}

/// Triggers whose token is in a file beside config.toml and in a
/// Kubernetes-style Secret directory (`token` → `..data/token`, `..data`
/// → a timestamped directory).
const MORE_TOKENS: &str = r#"
[[tools.triggers]]
kind = "endpoint"
name = "beside"
program = 1
function = "one"
verify = { scheme = "token", header = "X-Token", secret_file = "github.secret" }
values = { a = { header = "X-Token" } }

[[tools.triggers]]
kind = "endpoint"
name = "k8s"
program = 1
function = "one"
verify = { scheme = "token", header = "X-Token", secret_file = "k8s/token" }
values = { a = { header = "X-Token" } }
"#;

/// Replace `rel` as an editor or a deploy tool does: write a new file
/// beside it, then rename it over the old one.
fn replace_by_rename(dir: &TestDir, rel: &str, text: &str) {
    let tmp = format!("{rel}.new");
    dir.write(&tmp, text);
    std::fs::rename(dir.path(&tmp), dir.path(rel)).unwrap();
}

/// Swap a Kubernetes-style Secret directory to `version` holding `token`,
/// as the kubelet does: a new timestamped directory, a `..data_tmp`
/// symlink to it renamed over `..data`.
fn k8s_swap(dir: &TestDir, version: &str, token: &str) {
    use std::os::unix::fs::symlink;
    dir.write(&format!("k8s/{version}/token"), token);
    let tmp = dir.path("k8s/..data_tmp");
    symlink(version, &tmp).unwrap();
    std::fs::rename(&tmp, dir.path("k8s/..data")).unwrap();
}

#[test]
fn a_rotated_secret_file_is_picked_up_by_hot_reload() {
    // Refused tokens while polling must not trip the failed-auth limit.
    let dir = setup(
        "webhooks_rotate_watch",
        "auth_failures_per_minute = 0",
        &[("hooks.toml", PROGRAM)],
    );
    dir.append("config.toml", TOOL);
    dir.append("config.toml", MORE_TOKENS);
    for (f, s) in [
        ("github", GITHUB_SECRET),
        ("gitlab", GITLAB_TOKEN),
        ("stripe", STRIPE_SECRET),
        ("slack", SLACK_SECRET),
        ("rule", RULE_TOKEN),
    ] {
        dir.write(&format!("secrets/{f}"), &format!("{s}\n"));
    }
    dir.write("github.secret", "beside-token-0-c41d\n");
    k8s_swap(&dir, "..2026_01", "k8s-token-0-77ee");
    std::os::unix::fs::symlink("..data/token", dir.path("k8s/token")).unwrap();
    let t = Trigd::start(&dir);
    let gitlab = |token: &str| {
        let h = [
            ("Content-Type", "application/json"),
            ("X-Gitlab-Token", token),
            ("X-Gitlab-Event", "Push Hook"),
        ];
        let body = br#"{"project":{"path_with_namespace":"a/b"}}"#;
        t.request("POST", "/tools/hooks/prod/gitlab", &h, body)
            .status
    };
    let token = |trigger: &str, token: &str| {
        let path = format!("/tools/hooks/prod/{trigger}");
        t.request("POST", &path, &[("X-Token", token)], b"").status
    };
    let picked_up = |what: &str, ok: &dyn Fn() -> bool| {
        assert!(
            wait_until(WAIT, ok),
            "{what}: the new secret was not picked up\n{}",
            t.stderr_tail()
        );
    };
    assert_eq!(gitlab(GITLAB_TOKEN), 200);
    assert_eq!(token("beside", "beside-token-0-c41d"), 200);
    assert_eq!(token("k8s", "k8s-token-0-77ee"), 200);

    // secrets/ (not a directory trigd watched before): by rename, in place.
    replace_by_rename(&dir, "secrets/gitlab", "gl-token-renamed-1\n");
    picked_up("secrets/ by rename", &|| {
        gitlab("gl-token-renamed-1") == 200
    });
    assert_eq!(gitlab(GITLAB_TOKEN), 403, "the old token is refused");
    dir.write("secrets/gitlab", "gl-token-in-place-2\n");
    picked_up("secrets/ in place", &|| {
        gitlab("gl-token-in-place-2") == 200
    });
    assert_eq!(gitlab("gl-token-renamed-1"), 403);

    // Beside config.toml: by rename, in place.
    replace_by_rename(&dir, "github.secret", "beside-token-1-renamed\n");
    picked_up("beside config.toml by rename", &|| {
        token("beside", "beside-token-1-renamed") == 200
    });
    dir.write("github.secret", "beside-token-2-in-place\n");
    picked_up("beside config.toml in place", &|| {
        token("beside", "beside-token-2-in-place") == 200
    });
    assert_eq!(token("beside", "beside-token-1-renamed"), 403);

    // A Kubernetes Secret's ..data swap.
    k8s_swap(&dir, "..2026_02", "k8s-token-1-swapped");
    picked_up("a ..data swap", &|| {
        token("k8s", "k8s-token-1-swapped") == 200
    });
    assert_eq!(token("k8s", "k8s-token-0-77ee"), 403);

    let log = t.stderr_tail();
    for secret in [
        "gl-token-renamed-1",
        "beside-token-2-in-place",
        "k8s-token-1-swapped",
    ] {
        assert!(!log.contains(secret), "a secret in the log:\n{log}");
    }
}

/// A token checked by a rule (`signature` leaf) is a secret like a
/// `verify` token: wrong guesses count against the address, so guessing it
/// through the rule is as slow as through `verify`. Requests that fail on
/// another leaf (an event filter) are not counted.
#[test]
fn wrong_tokens_in_a_rule_count_as_failed_authentications() {
    let (dir, t) = start("webhooks_rule_limit", "auth_failures_per_minute = 3");
    // A correctly signed delivery of an event the rule filters out: not an
    // authentication failure, however many arrive.
    for _ in 0..5 {
        let v = github(&t, "ping", r#"{"zen":"x"}"#, GITHUB_SECRET)
            .status_is(202)
            .json();
        assert_eq!(v["Code"], json!("rules_not_matched"), "{v}");
    }
    let inside = |token: &str| {
        t.request(
            "POST",
            "/tools/hooks/prod/inside?x=1",
            &[("X-Token", token)],
            b"",
        )
    };
    r_ok(&inside(RULE_TOKEN));
    for guess in ["guess-1", "guess-2", "guess-3"] {
        let v = inside(guess).status_is(200).json();
        assert_eq!(v["Code"], json!("rules_not_matched"), "{v}");
    }
    // The address is over its budget: even the right token waits.
    let r = inside(RULE_TOKEN);
    r.err(429, "rate_limited");
    r.check(r.header("retry-after").is_some(), "Retry-After");
    no_secret_logged(&dir);
}

/// A sync run that succeeded.
#[track_caller]
fn r_ok(r: &Reply) {
    r.check_eq(result(r), json!(["1"]), "Result");
}

#[test]
fn wrong_tokens_count_as_failed_authentications() {
    let (dir, t) = start("webhooks_limit", "auth_failures_per_minute = 3");
    let send = |token: &str| {
        let h = [
            ("Content-Type", "application/json"),
            ("X-Gitlab-Token", token),
            ("X-Gitlab-Event", "Push Hook"),
        ];
        let body = br#"{"project":{"path_with_namespace":"a/b"}}"#;
        t.request("POST", "/tools/hooks/prod/gitlab", &h, body)
    };
    for guess in ["guess-1", "guess-2", "guess-3"] {
        send(guess).err(403, "signature_mismatch");
    }
    // The address is over its budget: even the right token waits.
    let r = send(GITLAB_TOKEN);
    r.err(429, "rate_limited");
    r.check(r.header("retry-after").is_some(), "Retry-After");
    assert_eq!(runs_of_program_1(&t), 0);
    let m = metrics(&t);
    let line = "trigd_webhooks_not_run_total{tool=\"hooks\",trigger=\"gitlab\",outcome=\"rate_limited\"} 1";
    assert!(m.contains(line), "{m}");
    no_secret_logged(&dir);
}
