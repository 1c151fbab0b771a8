//! Standard Webhooks received (a `verify` scheme, `webhook-*` and `svix-*`
//! names, requests signed by the official `standardwebhooks` library and
//! hostile ones), and a sender's redelivery deduplicated by its delivery id
//! (GitHub, GitLab, Stripe, Standard Webhooks): one run, the same answer
//! with `Idempotent-Replayed: true`; off by `deduplicate = false`.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde_json::Value;

use crate::util::*;

/// The secret as Svix and the official libraries print it.
const WHSEC: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const GITHUB_SECRET: &str = "gh-webhook-secret-8d1f0b3e";
const GITLAB_TOKEN: &str = "gl-token-2c7e91aa";
const STRIPE_SECRET: &str = "whsec_5f0c1d2e3a4b";

/// `count` appends a line to `runs.txt` (in the working directory) and
/// prints how many lines it has: a second run says 2.
const PROGRAM: &str = r#"
id = 1
name = "hooks"
workspace = "ops"

[[functions]]
name = "count"
steps = [{ shell = "echo \"$a\" >> runs.txt; wc -l < runs.txt | tr -d ' '" }]
[functions.webhook]
active = false
outputs = ["a"]
"#;

const TOOL: &str = r#"
[[tools]]
name = "hooks"
workspace = "ops"
[tools.environments.prod]
public = true

[[tools.triggers]]
kind = "endpoint"
name = "sw"
program = 1
function = "count"
verify = { scheme = "standard-webhooks", secret_file = "secrets/sw" }
values = { a = { json = "type" } }

[[tools.triggers]]
kind = "endpoint"
name = "sw-again"
program = 1
function = "count"
verify = { scheme = "standard-webhooks", secret_file = "secrets/sw", deduplicate = false }
values = { a = { json = "type" } }

[[tools.triggers]]
kind = "endpoint"
name = "github"
program = 1
function = "count"
verify = { scheme = "hmac-sha256", header = "X-Hub-Signature-256", prefix = "sha256=", secret_file = "secrets/github" }
values = { a = { header = "X-GitHub-Event" } }

[[tools.triggers]]
kind = "endpoint"
name = "gitlab"
program = 1
function = "count"
verify = { scheme = "token", header = "X-Gitlab-Token", secret_file = "secrets/gitlab" }
values = { a = { header = "X-Gitlab-Event" } }

[[tools.triggers]]
kind = "endpoint"
name = "stripe"
program = 1
function = "count"
verify = { scheme = "stripe", secret_file = "secrets/stripe" }
values = { a = { json = "type" } }
"#;

fn start(name: &str) -> (TestDir, Trigd) {
    let dir = setup(name, "", &[("hooks.toml", PROGRAM)]);
    dir.append("config.toml", TOOL);
    dir.mkdir("secrets");
    for (f, s) in [
        ("sw", WHSEC),
        ("github", GITHUB_SECRET),
        ("gitlab", GITLAB_TOKEN),
        ("stripe", STRIPE_SECRET),
    ] {
        dir.write(&format!("secrets/{f}"), &format!("{s}\n"));
    }
    let t = Trigd::start(&dir);
    (dir, t)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn hmac(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut m = <Hmac<sha2::Sha256> as hmac::KeyInit>::new_from_slice(key).unwrap();
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().to_vec()
}

/// `v1,<base64>` of `id.t.body` under the key of [`WHSEC`], computed
/// here (the library-signed requests are in the ignored test).
fn sw_sig(id: &str, t: u64, body: &str) -> String {
    let key = base64::engine::general_purpose::STANDARD
        .decode(WHSEC.trim_start_matches("whsec_"))
        .unwrap();
    let ts = t.to_string();
    let mac = hmac(
        &key,
        &[id.as_bytes(), b".", ts.as_bytes(), b".", body.as_bytes()],
    );
    format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac)
    )
}

fn post(t: &Trigd, trigger: &str, headers: &[(&str, &str)], body: &str) -> Reply {
    let mut h = vec![("Content-Type", "application/json")];
    h.extend_from_slice(headers);
    t.request(
        "POST",
        &format!("/tools/hooks/prod/{trigger}"),
        &h,
        body.as_bytes(),
    )
}

fn sw(t: &Trigd, trigger: &str, family: &str, id: &str, body: &str) -> Reply {
    let ts = now();
    let sig = sw_sig(id, ts, body);
    let (k_id, k_ts, k_sig) = (
        format!("{family}id"),
        format!("{family}timestamp"),
        format!("{family}signature"),
    );
    let ts = ts.to_string();
    post(
        t,
        trigger,
        &[(&k_id, id), (&k_ts, &ts), (&k_sig, &sig)],
        body,
    )
}

/// The run's `Result` line count (how many runs `count` has made).
fn count(v: &Value) -> &str {
    v["Result"][0].as_str().unwrap_or("")
}

#[test]
fn standard_webhooks_under_both_names_and_hostile_headers_get_a_code() {
    let (dir, t) = start("sw-receive");
    let body = r#"{"type":"contact.created","data":{"id":"1f81eb52"}}"#;
    let r = sw(&t, "sw", "webhook-", "msg_1", body);
    t.check(count(&r.ok()) == "1", r.text());
    let r = sw(&t, "sw", "svix-", "msg_2", body);
    t.check(count(&r.ok()) == "2", r.text());
    // Two signatures, the right one second (a sender's key rotation).
    // One reading of the clock for the header and the signature.
    let at = now();
    let ts = at.to_string();
    let two = format!(
        "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= {}",
        sw_sig("msg_3", at, body)
    );
    let r = post(
        &t,
        "sw",
        &[
            ("webhook-id", "msg_3"),
            ("webhook-timestamp", &ts),
            ("webhook-signature", &two),
        ],
        body,
    );
    t.check(count(&r.ok()) == "3", r.text());
    // Refused, each with its Code; nothing runs.
    // One reading of the clock: two could fall on either side of a second
    // (the signature is checked before the time).
    let ten_minutes_ago = now() - 600;
    let old = ten_minutes_ago.to_string();
    let old_sig = sw_sig("msg_4", ten_minutes_ago, body);
    let huge = format!("{} ", sw_sig("msg_5", now(), "x")).repeat(100);
    type Case<'a> = (Vec<(&'a str, &'a str)>, u16, &'a str);
    let cases: Vec<Case> = vec![
        (vec![], 401, "signature_missing"),
        (
            vec![("webhook-signature", "v1,AAAA"), ("webhook-timestamp", &ts)],
            401,
            "signature_missing",
        ),
        (
            vec![
                ("webhook-id", "msg_4"),
                ("webhook-timestamp", &old),
                ("webhook-signature", &old_sig),
            ],
            403,
            "signature_expired",
        ),
        (
            vec![
                ("webhook-id", "msg_5"),
                ("webhook-timestamp", &ts),
                ("webhook-signature", "v1,%%%"),
            ],
            403,
            "signature_malformed",
        ),
        (
            vec![
                ("webhook-id", "msg_5"),
                ("webhook-timestamp", "soon"),
                ("webhook-signature", "v1,AAAA"),
            ],
            403,
            "signature_malformed",
        ),
        (
            vec![
                ("webhook-id", "msg_5"),
                ("webhook-timestamp", &ts),
                ("webhook-signature", &huge),
            ],
            403,
            "signature_malformed",
        ),
        (
            vec![
                ("webhook-id", "msg_5"),
                ("webhook-timestamp", &ts),
                ("webhook-signature", &old_sig),
            ],
            403,
            "signature_mismatch",
        ),
    ];
    for (headers, status, code) in cases {
        post(&t, "sw", &headers, body).err(status, code);
    }
    t.check(
        dir.read("programs/runs.txt").lines().count() == 3,
        "no refused request ran",
    );
    let log = dir.read("stderr.log");
    t.check(!log.contains("MfKQ9r8G"), "the secret is not logged");
}

#[test]
fn redeliveries_run_once_for_github_gitlab_stripe_and_standard_webhooks() {
    let (dir, t) = start("sw-dedupe");
    // GitHub: X-GitHub-Delivery.
    let gh_body = r#"{"ref":"refs/heads/main"}"#;
    let gh_sig = format!(
        "sha256={}",
        hex::encode(hmac(GITHUB_SECRET.as_bytes(), &[gh_body.as_bytes()]))
    );
    let github = |delivery: &str| {
        let h = [
            ("X-GitHub-Event", "push"),
            ("X-GitHub-Delivery", delivery),
            ("X-Hub-Signature-256", gh_sig.as_str()),
        ];
        post(&t, "github", &h, gh_body)
    };
    // GitLab: X-Gitlab-Event-UUID.
    let gitlab = |uuid: &str| {
        let h = [
            ("X-Gitlab-Event", "Push Hook"),
            ("X-Gitlab-Event-UUID", uuid),
            ("X-Gitlab-Token", GITLAB_TOKEN),
        ];
        post(&t, "gitlab", &h, "{}")
    };
    // Stripe: the event's id, in the body.
    let stripe = |evt: &str| {
        let body = format!(r#"{{"id":"{evt}","object":"event","type":"invoice.paid"}}"#);
        let ts = now().to_string();
        let sig = hex::encode(hmac(
            STRIPE_SECRET.as_bytes(),
            &[ts.as_bytes(), b".", body.as_bytes()],
        ));
        let header = format!("t={ts},v1={sig}");
        post(
            &t,
            "stripe",
            &[("Stripe-Signature", header.as_str())],
            &body,
        )
    };
    let body = r#"{"type":"contact.created"}"#;
    let standard = |id: &str| sw(&t, "sw", "webhook-", id, body);
    let svix = |id: &str| sw(&t, "sw", "svix-", id, body);
    type Send<'a> = &'a dyn Fn(&str) -> Reply;
    let shapes: [(&str, Send); 5] = [
        ("github", &github),
        ("gitlab", &gitlab),
        ("stripe", &stripe),
        ("standard", &standard),
        ("svix", &svix),
    ];
    let mut runs = 0;
    for (name, send) in shapes {
        let first = send(&format!("{name}-delivery-1"));
        let v = first.ok();
        runs += 1;
        t.check(
            count(&v) == runs.to_string(),
            format!("{name}: first ran: {v}"),
        );
        t.check(
            first.header("Idempotent-Replayed").is_none(),
            format!("{name}: a first delivery is not a replay"),
        );
        // The redelivery: the first run's answer, marked, nothing run.
        let again = send(&format!("{name}-delivery-1"));
        let w = again.ok();
        t.check(
            w["Run"] == v["Run"] && w["Result"] == v["Result"],
            format!("{name}: the first answer again: {w} vs {v}"),
        );
        t.check(
            again.header("Idempotent-Replayed") == Some("true"),
            format!("{name}: Idempotent-Replayed"),
        );
        // Another delivery id runs again.
        runs += 1;
        let other = send(&format!("{name}-delivery-2")).ok();
        t.check(
            count(&other) == runs.to_string(),
            format!("{name}: {other}"),
        );
    }
    // The same webhook-id on another endpoint (scoped), and with
    // deduplicate = false: runs each time.
    for _ in 0..2 {
        runs += 1;
        let r = sw(&t, "sw-again", "webhook-", "standard-delivery-1", body).ok();
        t.check(
            count(&r) == runs.to_string(),
            format!("deduplicate = false: {r}"),
        );
    }
    // A caller's own Idempotency-Key wins over the delivery id.
    let ts = now();
    let sig = sw_sig("standard-delivery-1", ts, body);
    let ts = ts.to_string();
    let h = [
        ("webhook-id", "standard-delivery-1"),
        ("webhook-timestamp", ts.as_str()),
        ("webhook-signature", sig.as_str()),
        ("Idempotency-Key", "my-own-key"),
    ];
    runs += 1;
    let r = post(&t, "sw", &h, body).ok();
    t.check(count(&r) == runs.to_string(), format!("own key: {r}"));
    t.check(
        dir.read("programs/runs.txt").lines().count() == runs,
        "runs.txt counts every run",
    );
}

#[test]
#[ignore = "needs the standardwebhooks Python library: cargo test -- --include-ignored (as .ci/run does)"]
fn requests_signed_by_the_official_standardwebhooks_library() {
    let (dir, t) = start("sw-library");
    // The library signs: now, ten minutes ago, and with another secret.
    let out = standardwebhooks_py(
        &dir,
        &format!(
            r#"
import json
from datetime import datetime, timedelta, timezone
from standardwebhooks import Webhook
body = json.dumps({{"type": "invoice.paid", "data": {{"amount": 2000}}}})
now = datetime.now(tz=timezone.utc)
cases = [("msg_lib_1", now, "{WHSEC}"), ("msg_lib_2", now - timedelta(minutes=10), "{WHSEC}"),
         ("msg_lib_3", now, "whsec_b3RoZXItc2VjcmV0LXRoYXQtd2FzLW5ldmVyLXVzZWQ=")]
out = []
for (msg, at, secret) in cases:
    sig = Webhook(secret).sign(msg, at, body)
    out.append({{"id": msg, "t": str(int(at.timestamp())), "sig": sig}})
print(json.dumps({{"body": body, "cases": out}}))
"#
        ),
    );
    let v: Value = serde_json::from_str(&out).unwrap();
    let body = v["body"].as_str().unwrap();
    let want = [
        (200, ""),
        (403, "signature_expired"),
        (403, "signature_mismatch"),
    ];
    for (family, (c, (status, code))) in ["webhook-", "svix-", "webhook-"]
        .iter()
        .zip(v["cases"].as_array().unwrap().iter().zip(want))
    {
        let names = [
            format!("{family}id"),
            format!("{family}timestamp"),
            format!("{family}signature"),
        ];
        let h = [
            (names[0].as_str(), c["id"].as_str().unwrap()),
            (names[1].as_str(), c["t"].as_str().unwrap()),
            (names[2].as_str(), c["sig"].as_str().unwrap()),
        ];
        let r = post(&t, "sw", &h, body);
        if status == 200 {
            let v = r.ok();
            t.check(count(&v) == "1", format!("{v}"));
        } else {
            r.err(status, code);
        }
    }
    // The svix-* names, signed by the library too.
    let out = standardwebhooks_py(
        &dir,
        &format!(
            r#"
from datetime import datetime, timezone
from standardwebhooks import Webhook
now = datetime.now(tz=timezone.utc)
print(str(int(now.timestamp())) + " " + Webhook("{WHSEC}").sign("msg_svix", now, '{{"type":"svix"}}'))
"#
        ),
    );
    let (ts, sig) = out.split_once(' ').unwrap();
    let h = [
        ("svix-id", "msg_svix"),
        ("svix-timestamp", ts),
        ("svix-signature", sig),
    ];
    let r = post(&t, "sw", &h, r#"{"type":"svix"}"#).ok();
    t.check(count(&r) == "2", format!("{r}"));
}
