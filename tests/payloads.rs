//! Hostile and odd bodies, anonymous, on tool endpoint triggers and on
//! hooks of a hooks file: each bound of the manual's "Inputs and their bounds" (docs/security.md)
//! refuses with its Code (`payload_too_complex`), the cheap checks
//! (method, signature) come before any parsing, signature headers list at
//! most 16 entries, a form value that is not UTF-8 and a name given twice
//! (query, form, JSON key) are refused, a multipart body with LF line ends
//! is read as Go reads it, a hook's values are bounded by
//! `max_variable_bytes`, and a name a client sent cannot forge a log line.

use hmac::{Hmac, Mac};

use crate::util::*;

const SECRET: &str = "bounds-secret-5e1f";

const PROGRAM: &str = r#"
id = 1
name = "bounds"
workspace = "ops"

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
"#;

const TOOL: &str = r#"
[[tools]]
name = "t"
workspace = "ops"
[tools.environments.prod]
public = true

[[tools.triggers]]
kind = "endpoint"
name = "xml"
program = 1
function = "one"
values = { a = { xml = "r.-a" } }

[[tools.triggers]]
kind = "endpoint"
name = "signed-xml"
program = 1
function = "one"
verify = { scheme = "hmac-sha256", header = "X-Sig", prefix = "sha256=", secret_file = "secret" }
values = { a = { xml = "r.-a" } }

[[tools.triggers]]
kind = "endpoint"
name = "json"
program = 1
function = "one"
values = { a = { json = "x.a" } }

[[tools.triggers]]
kind = "endpoint"
name = "named"
program = 1
function = "two"

[[tools.triggers]]
kind = "endpoint"
name = "form"
program = 1
function = "two"
values = { a = { form = "command" }, b = { form = "text" } }

[[tools.triggers]]
kind = "endpoint"
name = "query"
program = 1
function = "one"
values = { a = { query = "x" } }

[[tools.triggers]]
kind = "endpoint"
name = "ruled"
program = 1
function = "one"
rule = { client_ip = ["0.0.0.0/0", "::/0"] }
"#;

const HOOKS: &str = r#"[
  {"id": "xml", "execute-command": "/bin/echo", "include-command-output-in-response": true,
   "pass-arguments-to-command": [{"source": "payload", "name": "r.-a"}]},
  {"id": "signed", "execute-command": "/bin/echo", "include-command-output-in-response": true,
   "pass-arguments-to-command": [{"source": "payload", "name": "r.-a"}],
   "trigger-rule": {"and": [
     {"match": {"type": "payload-hmac-sha256", "secret": "@SECRET@",
                "parameter": {"source": "header", "name": "X-Sig"}}},
     {"match": {"type": "value", "value": "x", "parameter": {"source": "payload", "name": "r.-a"}}}
   ]}},
  {"id": "plex", "execute-command": "/bin/echo", "include-command-output-in-response": true,
   "parse-parameters-as-json": [{"source": "payload", "name": "payload"}],
   "pass-arguments-to-command": [{"source": "payload", "name": "payload.Account.title"}],
   "trigger-rule": {"match": {"type": "value", "value": "media.play",
                              "parameter": {"source": "payload", "name": "payload.event"}}}},
  {"id": "env", "execute-command": "/bin/sh", "include-command-output-in-response": true,
   "pass-arguments-to-command": [{"source": "string", "name": "-c"}, {"source": "string", "name": "printf %s \"$V\""}],
   "pass-environment-to-command": [{"source": "payload", "name": "v", "envname": "V"}]}
]"#;

/// trigd with the tool above, the hooks file, and `server` in `[server]`.
fn start(name: &str, server: &str) -> (TestDir, Trigd) {
    let dir = setup(
        name,
        &format!("hooks_files = [\"hooks.json\"]\n{server}"),
        &[("bounds.toml", PROGRAM)],
    );
    dir.append("config.toml", TOOL);
    dir.write("secret", &format!("{SECRET}\n"));
    dir.write("hooks.json", &HOOKS.replace("@SECRET@", SECRET));
    let t = Trigd::start(&dir);
    (dir, t)
}

fn sign(body: &[u8]) -> String {
    let mut m = <Hmac<sha2::Sha256> as hmac::KeyInit>::new_from_slice(SECRET.as_bytes()).unwrap();
    m.update(body);
    format!("sha256={}", hex::encode(m.finalize().into_bytes()))
}

/// The issue's body: one element with 111,847 distinct attributes, under
/// the default `max_body_bytes` of 1 MiB.
fn attribute_bomb() -> Vec<u8> {
    let mut body = b"<r".to_vec();
    for i in 0..111_847u32 {
        let name: String = (0..4)
            .map(|d| char::from(b'a' + (i / 26u32.pow(d) % 26) as u8))
            .collect();
        body.extend_from_slice(format!(" {name}=\"\"").as_bytes());
    }
    body.extend_from_slice(b"/>");
    assert!(body.len() <= 1024 * 1024, "{}", body.len());
    body
}

fn post(t: &Trigd, path: &str, ct: &str, body: &[u8]) -> Reply {
    t.request("POST", path, &[("Content-Type", ct)], body)
}

/// The Result of a successful run of a tool trigger.
#[track_caller]
fn result(r: &Reply) -> String {
    r.ok()["Result"][0].as_str().unwrap_or_default().to_string()
}

#[test]
fn an_xml_attribute_bomb_is_refused_at_its_bound_anonymously() {
    let (_dir, t) = start("payloads_xml_bomb", "");
    let bomb = attribute_bomb();
    let v = post(&t, "/hooks/xml", "application/xml", &bomb).err(413, "payload_too_complex");
    let msg = v["Error"].as_str().unwrap_or_default();
    assert!(msg.contains("more than 100 attributes"), "{v}");
    let r = post(&t, "/tools/t/prod/xml", "text/xml", &bomb);
    r.err(413, "payload_too_complex");
    // Elements, depth.
    let many = format!("<r>{}</r>", "<e/>".repeat(50_000));
    post(&t, "/hooks/xml", "application/xml", many.as_bytes()).err(413, "payload_too_complex");
    let deep = format!("{}{}", "<r>".repeat(101), "</r>".repeat(101));
    post(&t, "/tools/t/prod/xml", "text/xml", deep.as_bytes()).err(413, "payload_too_complex");
    // Within the bounds, the value is read (a name twice: the last).
    let ok = br#"<r b="1" a="first" a="x"/>"#;
    assert_eq!(result(&post(&t, "/tools/t/prod/xml", "text/xml", ok)), "x");
    let r = post(&t, "/hooks/xml", "application/xml", ok);
    r.status_is(200)
        .check_eq(r.text(), "x\n".to_string(), "hook output");
}

#[test]
fn method_and_signature_are_checked_before_the_body_is_parsed() {
    let (_dir, t) = start("payloads_order", "");
    let bomb = attribute_bomb();
    let xml = [("Content-Type", "text/xml"), ("X-Sig", "sha256=00")];
    t.request("GET", "/tools/t/prod/signed-xml", &xml, b"")
        .err(405, "method_not_allowed");
    let wrong = format!("sha256={}", "0".repeat(64));
    let h = [("Content-Type", "text/xml"), ("X-Sig", wrong.as_str())];
    let r = t.request("POST", "/tools/t/prod/signed-xml", &h, &bomb);
    r.err(403, "signature_mismatch");
    // Signed, the bomb is parsed and refused at its bound.
    let sig = sign(&bomb);
    let h = [("Content-Type", "text/xml"), ("X-Sig", sig.as_str())];
    let r = t.request("POST", "/tools/t/prod/signed-xml", &h, &bomb);
    r.err(413, "payload_too_complex");
    // A hook whose rule checks the signature first: refused by it, in
    // webhook's words, and not for the body it never parsed.
    let h = [
        ("Content-Type", "application/xml"),
        ("X-Sig", wrong.as_str()),
    ];
    let r = t.request("POST", "/hooks/signed", &h, &bomb);
    r.status_is(500).check_eq(
        r.text(),
        "Error occurred while evaluating hook rules.".to_string(),
        "hook answer",
    );
    let h = [("Content-Type", "application/xml"), ("X-Sig", sig.as_str())];
    let r = t.request("POST", "/hooks/signed", &h, &bomb);
    r.err(413, "payload_too_complex");
    let ok = br#"<r a="x"/>"#;
    let sig = sign(ok);
    let h = [("Content-Type", "application/xml"), ("X-Sig", sig.as_str())];
    let r = t.request("POST", "/hooks/signed", &h, ok);
    r.status_is(200)
        .check_eq(r.text(), "x\n".to_string(), "hook output");
}

#[test]
fn a_signature_header_lists_at_most_16_entries() {
    let (_dir, t) = start("payloads_signatures", "");
    let body = br#"<r a="signed"/>"#;
    let good = sign(body);
    let wrong = format!("sha256={}", "0".repeat(64));
    let mut entries = vec![wrong.as_str(); 15];
    entries.push(&good);
    let h = [("Content-Type", "text/xml"), ("X-Sig", &entries.join(","))];
    let r = t.request("POST", "/tools/t/prod/signed-xml", &h, body);
    assert_eq!(result(&r), "signed");
    entries.insert(0, &wrong);
    let h = [("Content-Type", "text/xml"), ("X-Sig", &entries.join(","))];
    let r = t.request("POST", "/tools/t/prod/signed-xml", &h, body);
    let v = r.err(403, "signature_malformed");
    assert!(
        v["Error"]
            .as_str()
            .unwrap_or_default()
            .contains("more than 16"),
        "{v}"
    );
    // 440 entries (the issue's amplification) over a large body: refused.
    let big = format!("<r a=\"x\">{}</r>", "y".repeat(1000 * 1000));
    let many = vec![wrong.as_str(); 440].join(",");
    let h = [("Content-Type", "text/xml"), ("X-Sig", many.as_str())];
    let r = t.request("POST", "/tools/t/prod/signed-xml", &h, big.as_bytes());
    r.err(403, "signature_malformed");
    // The same through a hook's payload-hmac rule: a signature error.
    let h = [
        ("Content-Type", "application/xml"),
        ("X-Sig", many.as_str()),
    ];
    let r = t.request("POST", "/hooks/signed", &h, big.as_bytes());
    r.status_is(500);
}

/// A hook's `payload-hmac-*` rule guards a secret: wrong signatures count
/// against the address like a wrong key, so it cannot be guessed at speed.
#[test]
fn wrong_signatures_in_a_hook_rule_count_as_failed_authentications() {
    let (_dir, t) = start("payloads_hook_guesses", "auth_failures_per_minute = 2");
    let body = br#"<r a="signed"/>"#;
    let send = |sig: &str| {
        let h = [("Content-Type", "application/xml"), ("X-Sig", sig)];
        t.request("POST", "/hooks/signed", &h, body)
    };
    send(&sign(body)).status_is(200);
    for guess in ['0', '1'] {
        send(&format!("sha256={}", guess.to_string().repeat(64))).status_is(500);
    }
    send(&sign(body)).status_is(429);
}

#[test]
fn a_form_value_not_utf8_and_names_given_twice_are_refused() {
    let (_dir, t) = start("payloads_names", "");
    let form = "application/x-www-form-urlencoded";
    let ok = post(
        &t,
        "/tools/t/prod/form",
        form,
        b"command=%2Fdo&text=caf%C3%A9",
    );
    assert_eq!(result(&ok), "/do|café");
    let r = post(&t, "/tools/t/prod/form", form, b"command=%2Fdo&text=caf%E9");
    let v = r.err(400, "invalid_payload");
    assert!(
        v["Error"]
            .as_str()
            .unwrap_or_default()
            .contains("not UTF-8"),
        "{v}"
    );
    let r = post(&t, "/tools/t/prod/form", form, b"command=a&text=1&text=2");
    let v = r.err(400, "invalid_parameter");
    assert_eq!(v["Parameter"], "text", "{v}");
    let r = t.request("POST", "/tools/t/prod/query?x=1&x=2", &[], b"");
    r.err(400, "invalid_parameter");
    // A JSON key twice: refused, whether read by a path or by name.
    let json = "application/json";
    let r = post(
        &t,
        "/tools/t/prod/json",
        json,
        br#"{"x":{"a":"1","a":"2"}}"#,
    );
    let v = r.err(400, "invalid_payload");
    assert!(
        v["Error"]
            .as_str()
            .unwrap_or_default()
            .contains("'a' twice"),
        "{v}"
    );
    let r = post(
        &t,
        "/tools/t/prod/named",
        json,
        br#"{"a":"1","b":"2","a":"3"}"#,
    );
    let v = r.err(400, "variables_mismatch");
    assert!(
        v["Error"]
            .as_str()
            .unwrap_or_default()
            .contains("more than once"),
        "{v}"
    );
    assert_eq!(
        result(&post(&t, "/tools/t/prod/json", json, br#"{"x":{"a":"1"}}"#)),
        "1"
    );
}

#[test]
fn json_form_and_multipart_bounds() {
    let (_dir, t) = start("payloads_bounds", "");
    let deep = format!("{}{}", "[".repeat(101), "]".repeat(101));
    for path in ["/tools/t/prod/json", "/hooks/xml"] {
        post(&t, path, "application/json", deep.as_bytes()).err(413, "payload_too_complex");
    }
    // Values by name must be strings: a deep body is simply not that.
    let r = post(
        &t,
        "/tools/t/prod/named",
        "application/json",
        deep.as_bytes(),
    );
    r.err(400, "variables_mismatch");
    let fields = "command=a&".repeat(1001);
    let form = "application/x-www-form-urlencoded";
    post(&t, "/tools/t/prod/form", form, fields.as_bytes()).err(413, "payload_too_complex");
    post(&t, "/hooks/xml", form, fields.as_bytes()).err(413, "payload_too_complex");
    let part = "--b\r\nContent-Disposition: form-data; name=\"command\"\r\n\r\nx\r\n";
    let parts = format!("{}--b--\r\n", part.repeat(1001));
    let mp = "multipart/form-data; boundary=b";
    post(&t, "/tools/t/prod/form", mp, parts.as_bytes()).err(413, "payload_too_complex");
    post(&t, "/hooks/plex", mp, parts.as_bytes()).err(413, "payload_too_complex");
    let head = format!("--b\r\nX-Big: {}\r\n\r\nx\r\n--b--\r\n", "h".repeat(9000));
    post(&t, "/tools/t/prod/form", mp, head.as_bytes()).err(413, "payload_too_complex");
}

/// adnanh/webhook's own `multipart` test case (Plex): lines end in LF.
const PLEX: &str = "--xxx\nContent-Disposition: form-data; name=\"payload\"\n\n{\n   \"event\": \"media.play\",\n   \"user\": true,\n   \"owner\": true,\n   \"Account\": {\n      \"id\": 1,\n      \"thumb\": \"https://plex.tv/users/1022b120ffbaa/avatar?c=1465525047\",\n      \"title\": \"elan\"\n   }\n}\n\n--xxx\nContent-Disposition: form-data; name=\"thumb\"; filename=\"thumb.jpg\"\nContent-Type: application/octet-stream\nContent-Transfer-Encoding: binary\n\nbinary data\n--xxx--";

#[test]
fn a_multipart_body_with_lf_line_ends_is_read_as_go_reads_it() {
    let (_dir, t) = start("payloads_multipart_lf", "");
    let mp = "multipart/form-data; boundary=xxx";
    let r = post(&t, "/hooks/plex", mp, PLEX.as_bytes());
    r.status_is(200)
        .check_eq(r.text(), "elan\n".to_string(), "hook output");
    let body = "--xxx\nContent-Disposition: form-data; name=\"command\"\n\n/deploy\n--xxx\nContent-Disposition: form-data; name=\"text\"\n\nnow\n--xxx--\n";
    assert_eq!(
        result(&post(&t, "/tools/t/prod/form", mp, body.as_bytes())),
        "/deploy|now"
    );
}

#[test]
fn a_hook_value_over_max_variable_bytes_is_refused() {
    let (_dir, t) = start("payloads_hook_values", "max_variable_bytes = 16");
    let json = "application/json";
    let r = post(&t, "/hooks/env", json, br#"{"v":"sixteen bytes..."}"#);
    r.status_is(200)
        .check_eq(r.text(), "sixteen bytes...".to_string(), "output");
    let r = post(&t, "/hooks/env", json, br#"{"v":"seventeen bytes.."}"#);
    let v = r.err(400, "invalid_parameter");
    assert_eq!(v["Parameter"], "V", "{v}");
    let r = post(
        &t,
        "/hooks/xml",
        "text/xml",
        br#"<r a="seventeen bytes.."/>"#,
    );
    let v = r.err(400, "invalid_parameter");
    assert_eq!(v["Parameter"], "pass-arguments-to-command[0]", "{v}");
}

#[test]
fn a_name_a_client_sent_cannot_forge_a_log_line() {
    // A refused webhook is logged with its message, which names the
    // unknown value: here a query name that decodes to a newline and a
    // line of the attacker's own.
    let (dir, t) = start("payloads_log_forging", "");
    let path = "/tools/t/prod/ruled?a=1&x%0A%5B2026-01-01T00:00:00.000Z%20WARN%20%20forged%5D=1";
    t.request("POST", path, &[], b"")
        .err(400, "variables_mismatch");
    let log = || dir.read("stderr.log");
    t.wait_for(WAIT, "the refusal's log line", || {
        log().contains("refused: variables_mismatch")
    });
    let log = log();
    t.check(
        !log.lines().any(|l| l.starts_with("[2026-01-01")),
        "a line of the client's own in the log",
    );
    t.check(
        log.contains("x\\n[2026-01-01"),
        "the newline written escaped",
    );
}
