//! The differential test of hooks files: one hooks file (JSON) and one
//! (YAML) served by the real adnanh/webhook (the Debian `webhook` package)
//! and by trigd (`[server] hooks_files`), the same requests sent to both,
//! and the answers (status, body, Content-Type, response headers) and the
//! command invocations (argv, environment, files, working directory, seen
//! by a recording script) compared.
//!
//! `#[ignore]`d like the browser and HAProxy tests: `cargo test --
//! --include-ignored` (as `.ci/run` does) runs it and fails with install
//! advice when `webhook` is missing.
//!
//! The hooks and requests are written here for trigd, after the cases of
//! webhook's own test suite (GitHub, GitLab, Bitbucket, XML, raw body,
//! SendGrid, multipart, output on error) plus every value source, rule
//! kind and response option of its documentation.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};

use crate::util::*;

/// The recording command: writes its argv, the hook's environment, the
/// content of the files it was given and its working directory to
/// `<dir>/call` (atomically), then prints to stdout and stderr; `exit=N`
/// as first argument makes it exit N.
const RECORDER: &str = r#"#!/bin/sh
dir="$(dirname "$0")"
tmp="$dir/call.$$"
{
  printf 'argv:'; for a in "$@"; do printf ' [%s]' "$a"; done; printf '\n'
  printf 'pwd: %s\n' "$(pwd)"
  env | grep -E '^(HOOK_|X_)' | grep -v -E '^(HOOK_DATA|X_[A-Z0-9_]*FILE)=' | sort
  for v in $(env | grep -E '^(HOOK_DATA|X_[A-Z0-9_]*FILE)=' | cut -d= -f1 | sort); do
    eval "f=\$$v"
    printf 'file %s in %s: %s\n' "$v" "$(dirname "$f")" "$(cat "$f")"
  done
} > "$tmp"
mv "$tmp" "$dir/call"
printf 'out: %s\n' "$*"
printf 'err line\n' >&2
case "$1" in exit=*) exit "${1#exit=}";; esac
exit 0
"#;

const SECRET: &str = "mysecret";

/// The JSON hooks file; `@DIR@` is the test directory.
const HOOKS_JSON: &str = r#"[
  {
    "id": "github",
    "execute-command": "@DIR@/rec.sh",
    "command-working-directory": "@DIR@/work",
    "http-methods": ["Post "],
    "include-command-output-in-response": true,
    "trigger-rule-mismatch-http-response-code": 400,
    "pass-environment-to-command": [{"source": "payload", "name": "head_commit.timestamp"}],
    "pass-arguments-to-command": [
      {"source": "payload", "name": "head_commit.id"},
      {"source": "payload", "name": "head_commit.author.email"}
    ],
    "trigger-rule": {"and": [
      {"match": {"type": "payload-hmac-sha1", "secret": "mysecret",
                 "parameter": {"source": "header", "name": "X-Hub-Signature"}}},
      {"match": {"type": "value", "value": "refs/heads/master",
                 "parameter": {"source": "payload", "name": "ref"}}}
    ]}
  },
  {
    "id": "multi-sig-soft",
    "execute-command": "@DIR@/rec.sh",
    "include-command-output-in-response": true,
    "trigger-signature-soft-failures": true,
    "pass-arguments-to-command": [{"source": "payload", "name": "ref"}],
    "trigger-rule": {"or": [
      {"match": {"type": "payload-hmac-sha256", "secret": "wrongsecret",
                 "parameter": {"source": "header", "name": "X-Hub-Signature-256"}}},
      {"match": {"type": "payload-hmac-sha256", "secret": "mysecret",
                 "parameter": {"source": "header", "name": "X-Hub-Signature-256"}}}
    ]}
  },
  {
    "id": "multi-sig-hard",
    "execute-command": "@DIR@/rec.sh",
    "include-command-output-in-response": true,
    "pass-arguments-to-command": [{"source": "payload", "name": "ref"}],
    "trigger-rule": {"or": [
      {"match": {"type": "payload-hmac-sha256", "secret": "wrongsecret",
                 "parameter": {"source": "header", "name": "X-Hub-Signature-256"}}},
      {"match": {"type": "payload-hmac-sha256", "secret": "mysecret",
                 "parameter": {"source": "header", "name": "X-Hub-Signature-256"}}}
    ]}
  },
  {
    "id": "sha512-query",
    "execute-command": "@DIR@/rec.sh",
    "include-command-output-in-response": true,
    "trigger-rule": {"match": {"type": "payload-hmac-sha512", "secret": "mysecret",
                               "parameter": {"source": "url", "name": "sig"}}}
  },
  {
    "id": "bitbucket",
    "execute-command": "@DIR@/rec.sh",
    "response-message": "success",
    "trigger-rule-mismatch-http-response-code": 999,
    "parse-parameters-as-json": [{"source": "payload", "name": "payload"}],
    "pass-arguments-to-command": [{"source": "payload", "name": "payload.commits.0.branch"},
                                  {"source": "payload", "name": "payload"}],
    "trigger-rule": {"and": [
      {"match": {"type": "value", "value": "https://bitbucket.org",
                 "parameter": {"source": "payload", "name": "payload.canon_url"}}},
      {"match": {"type": "value", "value": "master",
                 "parameter": {"source": "payload", "name": "payload.commits.0.branch"}}}
    ]}
  },
  {
    "id": "gitlab",
    "execute-command": "@DIR@/rec.sh",
    "response-message": "success",
    "include-command-output-in-response": true,
    "pass-arguments-to-command": [
      {"source": "payload", "name": "commits.0.id"},
      {"source": "payload", "name": "user_name"},
      {"source": "payload", "name": "missing.value"},
      {"source": "payload", "name": "total_commits_count"},
      {"source": "payload", "name": "nothing"},
      {"source": "payload", "name": "flag"},
      {"source": "payload", "name": "project"}
    ],
    "trigger-rule": {"match": {"type": "value", "value": "refs/heads/master",
                               "parameter": {"source": "payload", "name": "ref"}}}
  },
  {
    "id": "xml",
    "execute-command": "@DIR@/rec.sh",
    "response-message": "success",
    "include-command-output-in-response": true,
    "pass-arguments-to-command": [{"source": "payload", "name": "app.users.user.1.-name"}],
    "trigger-rule": {"and": [
      {"match": {"type": "value", "value": "Jeff",
                 "parameter": {"source": "payload", "name": "app.users.user.0.-name"}}},
      {"match": {"type": "value", "value": "Hello!!",
                 "parameter": {"source": "payload", "name": "app.messages.message.#text"}}}
    ]}
  },
  {
    "id": "txt-raw",
    "execute-command": "@DIR@/rec.sh",
    "include-command-output-in-response": true,
    "pass-arguments-to-command": [{"source": "raw-request-body"}]
  },
  {
    "id": "sendgrid",
    "execute-command": "@DIR@/rec.sh",
    "response-message": "success",
    "include-command-output-in-response": true,
    "pass-arguments-to-command": [{"source": "payload", "name": "root.1.email"}],
    "trigger-rule": {"match": {"type": "value", "value": "processed",
                               "parameter": {"source": "payload", "name": "root.0.event"}}}
  },
  {
    "id": "multipart",
    "execute-command": "@DIR@/rec.sh",
    "include-command-output-in-response": true,
    "parse-parameters-as-json": [{"source": "payload", "name": "payload"}],
    "pass-arguments-to-command": [{"source": "payload", "name": "payload.event"},
                                  {"source": "payload", "name": "title"},
                                  {"source": "payload", "name": "thumb"}],
    "trigger-rule": {"match": {"type": "value", "value": "media.play",
                               "parameter": {"source": "payload", "name": "payload.event"}}}
  },
  {
    "id": "output-on-error-default",
    "execute-command": "@DIR@/rec.sh",
    "include-command-output-in-response": true,
    "pass-arguments-to-command": [{"source": "string", "name": "exit=1"}]
  },
  {
    "id": "output-on-error",
    "execute-command": "@DIR@/rec.sh",
    "include-command-output-in-response": true,
    "include-command-output-in-response-on-error": true,
    "pass-arguments-to-command": [{"source": "string", "name": "exit=1"}]
  },
  {
    "id": "async",
    "execute-command": "@DIR@/rec.sh",
    "response-message": "started <b>it</b>",
    "success-http-response-code": 202,
    "response-headers": [{"name": "X-Hook", "value": "yes"}, {"name": "Access-Control-Allow-Origin", "value": "*"}],
    "pass-arguments-to-command": [{"source": "request", "name": "method"},
                                  {"source": "query", "name": "who"}],
    "pass-environment-to-command": [{"source": "url", "name": "who", "envname": "X_WHO"},
                                    {"source": "header", "name": "x-trace"}]
  },
  {
    "id": "no-content",
    "execute-command": "@DIR@/rec.sh",
    "response-message": "not sent",
    "success-http-response-code": 204,
    "trigger-rule-mismatch-http-response-code": 304,
    "trigger-rule": {"match": {"type": "value", "value": "yes", "parameter": {"source": "url", "name": "go"}}}
  },
  {
    "id": "unknown-success-code",
    "execute-command": "@DIR@/rec.sh",
    "response-message": "ok",
    "success-http-response-code": 299,
    "include-command-output-in-response": true
  },
  {
    "id": "entire",
    "execute-command": "@DIR@/rec.sh",
    "include-command-output-in-response": true,
    "pass-arguments-to-command": [{"source": "entire-payload"}, {"source": "entire-query"},
                                  {"source": "request", "name": "remote-addr"}],
    "pass-environment-to-command": [{"source": "entire-headers", "envname": "X_HEADERS"}]
  },
  {
    "id": "files",
    "execute-command": "@DIR@/rec.sh",
    "command-working-directory": "@DIR@/work",
    "include-command-output-in-response": true,
    "success-http-response-code": 201,
    "pass-file-to-command": [
      {"source": "payload", "name": "data", "base64decode": true},
      {"source": "payload", "name": "text", "envname": "X_TEXT_FILE"},
      {"source": "payload", "name": "absent", "envname": "X_ABSENT_FILE"}
    ]
  },
  {
    "id": "content-type",
    "execute-command": "@DIR@/rec.sh",
    "incoming-payload-content-type": "application/json",
    "include-command-output-in-response": true,
    "pass-arguments-to-command": [{"source": "payload", "name": "a"}]
  },
  {
    "id": "rules",
    "execute-command": "@DIR@/rec.sh",
    "include-command-output-in-response": true,
    "http-methods": ["POST", "put"],
    "trigger-rule": {"and": [
      {"match": {"type": "regex", "regex": "^v[0-9]+\\.[0-9]+$", "parameter": {"source": "payload", "name": "tag"}}},
      {"not": {"match": {"type": "value", "value": "draft", "parameter": {"source": "payload", "name": "state"}}}},
      {"or": [
        {"match": {"type": "ip-whitelist", "ip-range": "10.0.0.0/8"}},
        {"match": {"type": "ip-whitelist", "ip-range": "192.168.0.0/16 127.0.0.1"}}
      ]},
      {"match": {"type": "value", "value": "yes", "parameter": {"source": "header", "name": "x-ok"}}}
    ]}
  },
  {
    "id": "not-missing",
    "execute-command": "@DIR@/rec.sh",
    "include-command-output-in-response": true,
    "trigger-rule": {"not": {"match": {"type": "value", "value": "x",
                                       "parameter": {"source": "payload", "name": "absent"}}}}
  },
  {
    "id": "ip-only",
    "execute-command": "@DIR@/rec.sh",
    "response-message": "never",
    "trigger-rule": {"match": {"type": "ip-whitelist", "ip-range": "10.0.0.0/8"}}
  },
  {
    "id": "ip-mapped",
    "execute-command": "@DIR@/rec.sh",
    "response-message": "mapped range",
    "trigger-rule": {"match": {"type": "ip-whitelist", "ip-range": "::ffff:127.0.0.0/104"}}
  },
  {
    "id": "scalr",
    "execute-command": "@DIR@/rec.sh",
    "include-command-output-in-response": true,
    "trigger-rule": {"match": {"type": "scalr-signature", "secret": "mysecret"}}
  },
  {
    "id": "form",
    "execute-command": "@DIR@/rec.sh",
    "include-command-output-in-response": true,
    "pass-arguments-to-command": [{"source": "payload", "name": "text"}, {"source": "payload", "name": "user"}]
  },
  {
    "id": "no-command",
    "execute-command": "@DIR@/missing.sh",
    "include-command-output-in-response": true
  },
  {
    "id": "no-command-output",
    "execute-command": "@DIR@/missing.sh",
    "include-command-output-in-response": true,
    "include-command-output-in-response-on-error": true
  },
  {
    "id": "dir/nested",
    "execute-command": "@DIR@/rec.sh",
    "response-message": "nested id"
  }
]
"#;

/// The YAML hooks file, served beside the JSON one.
const HOOKS_YAML: &str = r#"
- id: yaml-hook
  execute-command: "@DIR@/rec.sh"
  include-command-output-in-response: true
  pass-arguments-to-command:
    - source: payload
      name: a.b
    - source: string
      name: fixed text
  pass-environment-to-command:
    - source: payload
      name: num
  trigger-rule:
    match:
      type: value
      value: 42
      parameter:
        source: payload
        name: num
"#;

/// One request of the comparison.
struct Case {
    what: &'static str,
    method: &'static str,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// The command runs (wait for its record).
    runs: bool,
}

fn case(what: &'static str, path: &str, headers: &[(&str, &str)], body: &str, runs: bool) -> Case {
    Case {
        what,
        method: "POST",
        path: path.to_string(),
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        body: body.as_bytes().to_vec(),
        runs,
    }
}

fn hmac_hex<M: Mac + hmac::digest::KeyInit>(parts: &[&[u8]]) -> String {
    let mut m = <M as hmac::digest::KeyInit>::new_from_slice(SECRET.as_bytes()).unwrap();
    for p in parts {
        m.update(p);
    }
    hex::encode(m.finalize().into_bytes())
}

/// `Mon 02 Jan 2006 15:04:05 UTC` for now (Scalr's `Date`).
fn scalr_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let wd = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][days.rem_euclid(7) as usize];
    let mon = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{wd} {d:02} {} {y} {:02}:{:02}:{:02} UTC",
        mon[(m - 1) as usize],
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn cases() -> Vec<Case> {
    type S1 = Hmac<sha1::Sha1>;
    type S256 = Hmac<sha2::Sha256>;
    type S512 = Hmac<sha2::Sha512>;
    let json = ("Content-Type", "application/json");
    let push = r#"{"ref":"refs/heads/master","head_commit":{"id":"1481a2de7b2a7d02428ad93446ab166be7793fbb","timestamp":"2015-03-13T22:25:58+01:00","author":{"email":"lolo@example.com"}}}"#;
    let sig1 = format!("sha1={}", hmac_hex::<S1>(&[push.as_bytes()]));
    let dev = push.replace("master", "develop");
    let sig1_dev = format!("sha1={}", hmac_hex::<S1>(&[dev.as_bytes()]));
    let sig256 = format!("sha256={}", hmac_hex::<S256>(&[push.as_bytes()]));
    let sig512 = hmac_hex::<S512>(&[push.as_bytes()]);
    let bitbucket = format!(
        "payload={}",
        enc(
            r#"{"canon_url":"https://bitbucket.org","commits":[{"branch":"master","message":"<&>"}],"repository":{"absolute_url":"/webhook/testing/"}}"#
        )
    );
    let gitlab = r#"{"ref":"refs/heads/master","user_name":"John Smith","total_commits_count":4,"flag":true,"nothing":null,"project":{"name":"Diaspora","tags":["a","b"]},"commits":[{"id":"b6568db1bc1dcd7f8b4d5a946b0b91f9dacd7327"}]}"#;
    let xml = r#"<app><users><user id="1" name="Jeff" /><user id="2" name="Sally" /></users><messages><message id="1" from_user="1" to_user="2">Hello!!</message></messages></app>"#;
    let multipart = "--xxx\r\nContent-Disposition: form-data; name=\"title\"\r\n\r\nMy movie\r\n--xxx\r\nContent-Disposition: form-data; name=\"payload\"; filename=\"p.json\"\r\nContent-Type: application/octet-stream\r\n\r\n{\"event\":\"media.play\",\"user\":true}\r\n--xxx\r\nContent-Disposition: form-data; name=\"thumb\"; filename=\"t.jpg\"\r\nContent-Type: image/jpeg\r\n\r\nJPEGDATA\r\n--xxx--\r\n";
    let date = scalr_now();
    let scalr_sig = hmac_hex::<S1>(&[b"scalr body", date.as_bytes()]);
    let mut all = vec![
        case(
            "github: good sha1 signature, master",
            "/hooks/github",
            &[json, ("X-Hub-Signature", &sig1)],
            push,
            true,
        ),
        case(
            "github: good signature, other branch: mismatch code 400",
            "/hooks/github",
            &[json, ("X-Hub-Signature", &sig1_dev)],
            &dev,
            false,
        ),
        case(
            "github: bad signature is a rule error",
            "/hooks/github",
            &[json, ("X-Hub-Signature", &sig1_dev)],
            push,
            false,
        ),
        case(
            "github: no signature header is a mismatch",
            "/hooks/github",
            &[json],
            push,
            false,
        ),
        case(
            "github: malformed signature",
            "/hooks/github",
            &[json, ("X-Hub-Signature", "sha1=zz")],
            push,
            false,
        ),
        case(
            "multi-sig, soft failures: second secret matches",
            "/hooks/multi-sig-soft",
            &[json, ("X-Hub-Signature-256", &sig256)],
            push,
            true,
        ),
        case(
            "multi-sig, hard failures: first failure is an error",
            "/hooks/multi-sig-hard",
            &[json, ("X-Hub-Signature-256", &sig256)],
            push,
            false,
        ),
        case(
            "204: no body, no Content-Type",
            "/hooks/no-content?go=yes",
            &[],
            "",
            true,
        ),
        case(
            "304 on a mismatch: no body, no Content-Type",
            "/hooks/no-content?go=no",
            &[],
            "",
            false,
        ),
        case(
            "sha512 signature in the query, no prefix",
            &format!("/hooks/sha512-query?sig={sig512}"),
            &[json],
            push,
            true,
        ),
        case(
            "sha512 bad signature in the query",
            "/hooks/sha512-query?sig=00",
            &[json],
            push,
            false,
        ),
        case(
            "bitbucket: form payload parsed as JSON",
            "/hooks/bitbucket",
            &[("Content-Type", "application/x-www-form-urlencoded")],
            &bitbucket,
            true,
        ),
        case(
            "bitbucket: unknown mismatch code is 200",
            "/hooks/bitbucket",
            &[("Content-Type", "application/x-www-form-urlencoded")],
            "payload=%7B%7D",
            false,
        ),
        case(
            "gitlab: numbers, booleans, null, objects, missing values",
            "/hooks/gitlab",
            &[json],
            gitlab,
            true,
        ),
        case(
            "xml payload",
            "/hooks/xml",
            &[("Content-Type", "application/xml")],
            xml,
            true,
        ),
        case(
            "raw body",
            "/hooks/txt-raw",
            &[("Content-Type", "text/plain")],
            "# raw text\n  kept as is",
            true,
        ),
        case(
            "json array payload under root",
            "/hooks/sendgrid",
            &[json],
            r#"[{"event":"processed"},{"email":"a@example.com"}]"#,
            true,
        ),
        case(
            "json array payload, rule mismatch",
            "/hooks/sendgrid",
            &[json],
            r#"[{"event":"dropped"}]"#,
            false,
        ),
        case(
            "multipart: field, JSON file part, other file part",
            "/hooks/multipart",
            &[("Content-Type", "multipart/form-data; boundary=xxx")],
            multipart,
            true,
        ),
        case(
            "exit 1 without output on error",
            "/hooks/output-on-error-default",
            &[],
            "",
            true,
        ),
        case(
            "exit 1 with output on error",
            "/hooks/output-on-error",
            &[],
            "",
            true,
        ),
        case(
            "async: message, success code, headers, env by name",
            "/hooks/async?who=ann",
            &[("X-Trace", "t-1")],
            "",
            true,
        ),
        case(
            "unknown success code is 200",
            "/hooks/unknown-success-code",
            &[],
            "",
            true,
        ),
        case(
            "entire payload, query, headers, remote address",
            "/hooks/entire?b=2&a=1&a=3",
            &[json, ("X-Custom", "v<1>")],
            r#"{"z":1,"a":{"y":"<&>","x":[1,2.50]}}"#,
            true,
        ),
        case(
            "files: base64, envname, missing",
            "/hooks/files",
            &[json],
            r#"{"data":"aGVsbG8gZmlsZQ==","text":"plain text"}"#,
            true,
        ),
        case(
            "incoming-payload-content-type without a Content-Type",
            "/hooks/content-type",
            &[],
            r#"{"a":"from json"}"#,
            true,
        ),
        case(
            "rules: regex, not, or of ip ranges, header",
            "/hooks/rules",
            &[json, ("X-Ok", "yes")],
            r#"{"tag":"v1.2","state":"final"}"#,
            true,
        ),
        case(
            "rules: regex fails",
            "/hooks/rules",
            &[json, ("X-Ok", "yes")],
            r#"{"tag":"v1.2.3","state":"final"}"#,
            false,
        ),
        case(
            "rules: not fails",
            "/hooks/rules",
            &[json, ("X-Ok", "yes")],
            r#"{"tag":"v1.2","state":"draft"}"#,
            false,
        ),
        case(
            "rules: header missing",
            "/hooks/rules",
            &[json],
            r#"{"tag":"v1.2","state":"final"}"#,
            false,
        ),
        case(
            "not of a missing value triggers",
            "/hooks/not-missing",
            &[json],
            "{}",
            true,
        ),
        case("ip whitelist elsewhere", "/hooks/ip-only", &[], "", false),
        case(
            "ip whitelist written IPv4-mapped is the IPv4 range",
            "/hooks/ip-mapped",
            &[],
            "",
            true,
        ),
        case(
            "scalr: good signature and date",
            "/hooks/scalr",
            &[("X-Signature", &scalr_sig), ("Date", &date)],
            "scalr body",
            true,
        ),
        case(
            "scalr: bad signature is a rule error",
            "/hooks/scalr",
            &[("X-Signature", "00"), ("Date", &date)],
            "scalr body",
            false,
        ),
        case(
            "scalr: no headers is a mismatch",
            "/hooks/scalr",
            &[],
            "scalr body",
            false,
        ),
        case(
            "urlencoded form",
            "/hooks/form",
            &[("Content-Type", "application/x-www-form-urlencoded")],
            "text=deploy+now&user=ann&user=bob",
            true,
        ),
        case(
            "malformed form is no payload",
            "/hooks/form",
            &[("Content-Type", "application/x-www-form-urlencoded")],
            "text=%zz&user=ann",
            true,
        ),
        case(
            "invalid JSON is no payload",
            "/hooks/gitlab",
            &[json],
            "{nope",
            false,
        ),
        case(
            "yaml file: dotted raw key wins, number matched as text",
            "/hooks/yaml-hook",
            &[json],
            r#"{"a.b":"raw","a":{"b":"nested"},"num":42}"#,
            true,
        ),
        case("an id with a slash", "/hooks/dir/nested", &[], "", true),
        case(
            "a command that does not exist",
            "/hooks/no-command",
            &[],
            "",
            false,
        ),
        case(
            "a command that does not exist, output on error",
            "/hooks/no-command-output",
            &[],
            "",
            false,
        ),
        case(
            "two signatures in one header, the second good",
            "/hooks/github",
            &[json, ("X-Hub-Signature", &format!("sha1=0000,{sig1}"))],
            push,
            true,
        ),
        case("unknown hook", "/hooks/nope", &[], "", false),
        case(
            "an Idempotency-Key (webhook ignores it): the first request answers alike",
            "/hooks/async?who=key",
            &[("Idempotency-Key", "diff-1"), ("X-Trace", "t-2")],
            "",
            true,
        ),
    ];
    all.push(case(
        "a lone surrogate escape in JSON is U+FFFD, the rest of the payload read",
        "/hooks/gitlab",
        &[json],
        r#"{"ref":"refs/heads/master","user_name":"J\ud800\udc00\udc00S\ud800","commits":[{"id":"\ud83d\ude00"}]}"#,
        true,
    ));
    let mut not_utf8 = case(
        "a byte that is not UTF-8 in JSON is U+FFFD",
        "/hooks/gitlab",
        &[json],
        "",
        true,
    );
    not_utf8.body = b"{\"ref\":\"refs/heads/master\",\"user_name\":\"J\xff\xe2\x82S\"}".to_vec();
    all.push(not_utf8);
    let mut get = case("method not allowed", "/hooks/github", &[], "", false);
    get.method = "GET";
    all.push(get);
    let mut any = case(
        "GET of a hook without http-methods",
        "/hooks/dir/nested",
        &[],
        "",
        true,
    );
    any.method = "GET";
    all.push(any);
    let mut put = case(
        "second allowed method, lower case in the file",
        "/hooks/rules",
        &[("X-Ok", "yes"), json],
        r#"{"tag":"v2.0","state":"final"}"#,
        true,
    );
    put.method = "PUT";
    all.push(put);
    all
}

/// What one server did for one request, with run-specific parts (ports,
/// temporary file names) replaced.
#[derive(Debug, PartialEq)]
struct Seen {
    status: u16,
    content_type: Option<String>,
    headers: Vec<(String, String)>,
    body: String,
    call: Option<String>,
}

fn sanitize(s: &str) -> String {
    // 127.0.0.1:<port> → 127.0.0.1:PORT
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("127.0.0.1:") {
        out.push_str(&rest[..i + 10]);
        rest = &rest[i + 10..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        out.push_str(if digits > 0 { "PORT" } else { "" });
        rest = &rest[digits..];
    }
    out.push_str(rest);
    out
}

fn send(addr: &str, log: &Path, dir: &TestDir, c: &Case) -> Seen {
    let _ = std::fs::remove_file(dir.path("call"));
    let headers: Vec<(&str, &str)> = c
        .headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let r = Client::for_addr(addr, log).request(c.method, &c.path, &headers, &c.body);
    let call = if c.runs {
        let found = wait_until(WAIT, || dir.exists("call"));
        if !found {
            r.fail(format!("{}: the command did not run at {addr}", c.what));
        }
        Some(sanitize(&dir.read("call")))
    } else {
        dir.read_opt("call")
    };
    let pick = ["X-Hook", "Access-Control-Allow-Origin"];
    Seen {
        status: r.status,
        content_type: r.header("Content-Type").map(str::to_string),
        headers: pick
            .iter()
            .filter_map(|h| r.header(h).map(|v| (h.to_string(), v.to_string())))
            .collect(),
        body: sanitize(&r.text()),
        call,
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Webhook(Child);

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_webhook(dir: &TestDir) -> (Webhook, String) {
    let port = free_port();
    let log = std::fs::File::create(dir.path("webhook.log")).unwrap();
    // In the test directory, which is trigd's directory for a hook
    // without command-working-directory (config.toml's).
    let child = Command::new("webhook")
        .current_dir(&dir.root)
        .args(["-ip", "127.0.0.1", "-port", &port.to_string()])
        .args([
            "-hooks",
            &dir.path_str("hooks.json"),
            "-hooks",
            &dir.path_str("hooks.yaml"),
        ])
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot start `webhook` ({e}): install the Debian package: apt-get install webhook"
            )
        });
    let addr = format!("127.0.0.1:{port}");
    let up = wait_until(WAIT, || {
        Client::for_addr(&addr, &dir.path("webhook.log"))
            .try_request("GET", "/", &[], b"")
            .is_ok_and(|r| r.status == 200)
    });
    assert!(up, "webhook did not start: {}", dir.read("webhook.log"));
    (Webhook(child), addr)
}

/// A directory with the recorder, both hooks files and a trigd config
/// serving them.
pub fn hooks_dir(name: &str) -> TestDir {
    let dir = setup(name, "hooks_files = [\"hooks.json\", \"hooks.yaml\"]", &[]);
    dir.write("rec.sh", RECORDER);
    let status = Command::new("chmod")
        .args(["+x", &dir.path_str("rec.sh")])
        .status();
    assert!(status.is_ok_and(|s| s.success()));
    let root = dir.root.display().to_string();
    dir.write("hooks.json", &HOOKS_JSON.replace("@DIR@", &root));
    dir.write("hooks.yaml", &HOOKS_YAML.replace("@DIR@", &root));
    dir
}

#[test]
#[ignore = "needs the Debian `webhook` package; run with --include-ignored"]
fn webhook_and_trigd_answer_and_run_alike() {
    let dir = hooks_dir("hooks_diff");
    let (_webhook, wh_addr) = start_webhook(&dir);
    let trigd = Trigd::start(&dir);
    let mut differences = Vec::new();
    for c in cases() {
        let want = send(&wh_addr, &dir.path("webhook.log"), &dir, &c);
        let got = send(&trigd.addr, &trigd.stderr_log, &dir, &c);
        if want != got {
            differences.push(format!(
                "{}:\n  webhook: {want:?}\n  trigd:   {got:?}",
                c.what
            ));
        }
    }
    assert!(
        differences.is_empty(),
        "{} of {} cases differ:\n{}",
        differences.len(),
        cases().len(),
        differences.join("\n")
    );
}

/// The cases whose hooks `import-webhook` carries over whole, and where
/// each is served natively.
fn import_cases() -> Vec<(Case, String)> {
    let native = |c: &Case| {
        let id = c.path.trim_start_matches("/hooks/");
        let (id, query) = id
            .split_once('?')
            .map_or((id, String::new()), |(i, q)| (i, format!("?{q}")));
        format!("/tools/webhook/hooks/{}{query}", id.replace('/', "-"))
    };
    // (Not github's good request: its HOOK_head_commit.timestamp is
    // renamed HOOK_head_commit_timestamp natively, and sh drops a variable
    // with a dot anyway.)
    let keep = [
        "github: good signature, other branch: mismatch code 400",
        "github: no signature header is a mismatch",
        "multi-sig, soft failures: second secret matches",
        "xml payload",
        "raw body",
        "json array payload under root",
        "json array payload, rule mismatch",
        "rules: regex, not, or of ip ranges, header",
        "rules: regex fails",
        "rules: not fails",
        "an id with a slash",
    ];
    cases()
        .into_iter()
        .filter(|c| keep.contains(&c.what))
        .map(|c| {
            let n = native(&c);
            (c, n)
        })
        .collect()
}

#[test]
fn imported_hooks_run_like_the_originals() {
    let dir = hooks_dir("hooks_import");
    let import = || {
        trigd(
            &[
                "import-webhook",
                &dir.path_str("hooks.json"),
                "--program-id",
                "77",
                "--write-secrets",
                &dir.path_str("secrets"),
            ],
            None,
        )
    };
    let out = import();
    out.code_is(0);
    out.check(
        out.stderr
            .contains("hook \"bitbucket\": parse-parameters-as-json is not carried over"),
        "a warning names the hook and the option",
    );
    out.check(out.stderr.contains("hook \"scalr\": trigger-rule.match: match type \"scalr-signature\" cannot be carried over"), "scalr is named");
    out.check(!out.stdout.contains(SECRET), "no secret in the output");
    out.check(
        out.stdout.contains("# hook \"github\""),
        "a comment per hook",
    );
    out.check(
        dir.read("secrets/github-1") == SECRET,
        "the secret file is written",
    );
    // Written again over a world-readable file and a symlink: both are
    // replaced by a 0600 file; the symlink's target is left alone.
    std::fs::set_permissions(
        dir.path("secrets/github-1"),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .expect("chmod");
    dir.write("victim", "untouched");
    let names: Vec<String> = std::fs::read_dir(dir.path("secrets"))
        .expect("secrets")
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| n != "github-1")
        .collect();
    let linked = names
        .first()
        .cloned()
        .unwrap_or_else(|| out.fail("a second secret"));
    std::fs::remove_file(dir.path(&format!("secrets/{linked}"))).expect("rm");
    std::os::unix::fs::symlink(dir.path("victim"), dir.path(&format!("secrets/{linked}")))
        .expect("symlink");
    let again = import();
    again.code_is(0);
    again.check(
        dir.read("victim") == "untouched",
        "a symlink's target is not written",
    );
    for name in ["github-1".to_string(), linked] {
        let meta = std::fs::symlink_metadata(dir.path(&format!("secrets/{name}"))).expect("stat");
        let mode = std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777;
        again.check(
            meta.is_file() && mode == 0o600,
            format!("secrets/{name}: a regular file, mode {mode:o}"),
        );
    }
    let (config_part, program_part) = out
        .stdout
        .split_once("# ---- programs/webhook-hooks.toml ----")
        .unwrap_or_else(|| out.fail("no program marker"));
    dir.append("config.toml", config_part);
    dir.write("programs/webhook-hooks.toml", program_part);
    let check = trigd(&["check", "--config", &dir.path_str("config.toml")], None);
    check.code_is(0);
    check.check(check.stdout.contains(" hooks, "), "check counts the hooks");
    check.check(
        check
            .stderr
            .contains("hook \"no-command\": execute-command: command"),
        "check warns about a hook command that is not there",
    );
    check.check(
        !check.stderr.contains("inactive webhook table"),
        "the imported functions declare their outputs the current way",
    );
    let t = Trigd::start(&dir);
    for (c, native_path) in import_cases() {
        let original = send(&t.addr, &t.stderr_log, &dir, &c);
        let mut n = case(c.what, &native_path, &[], "", c.runs);
        (n.method, n.headers, n.body) = (c.method, c.headers.clone(), c.body.clone());
        let imported = send(&t.addr, &t.stderr_log, &dir, &n);
        let what = c.what;
        assert_eq!(
            imported.call, original.call,
            "{what}: the command runs alike"
        );
        let ran = original.call.is_some();
        assert_eq!(
            imported.status, original.status,
            "{what}: the same status (ran: {ran}); native body {}",
            imported.body
        );
    }
    // A hook that is not carried over whole never runs natively.
    let r = t
        .client()
        .request("POST", "/tools/webhook/hooks/scalr", &[], b"");
    r.status_is(200);
    r.check(
        r.text().contains("rules_not_matched"),
        "an unrewritten rule never matches",
    );
}

#[test]
fn hooks_files_reload_and_refuse_what_they_cannot_serve() {
    let dir = hooks_dir("hooks_reload");
    let t = Trigd::start(&dir);
    t.client()
        .request("POST", "/hooks/dir/nested", &[], b"")
        .status_is(200);
    // A new hook appears without a restart.
    let root = dir.root.display().to_string();
    let one =
        r#"[{"id": "fresh", "execute-command": "@DIR@/rec.sh", "response-message": "fresh one"}]"#;
    dir.write("hooks.yaml", &one.replace("@DIR@", &root));
    t.wait_for(WAIT, "the new hook", || {
        t.client().request("POST", "/hooks/fresh", &[], b"").text() == "fresh one"
    });
    // An empty hooks file (a save between its truncation and its write) is
    // not swapped in: it would drop the file's hooks.
    dir.write("hooks.yaml", "");
    t.wait_for(WAIT, "the empty file refused", || {
        t.stderr_tail().contains("hooks.yaml: the file is empty")
    });
    t.client()
        .request("POST", "/hooks/fresh", &[], b"")
        .status_is(200);
    // A hook with an option trigd does not serve is refused, naming the
    // file, the hook and the option; the last good hooks stay served.
    let bad = r#"[{"id": "tpl", "execute-command": "/bin/true", "response-message": "{{ getenv \"X\" }}"},
                  {"id": "typo", "execute-command": "/bin/true", "pass-arguments-to-comand": []}]"#;
    dir.write("hooks.yaml", bad);
    t.wait_for(WAIT, "the reload error", || {
        t.stderr_tail().contains("pass-arguments-to-comand")
    });
    let log = t.stderr_tail();
    t.check(
        log.contains("hooks.yaml")
            && log.contains("hooks[0] \"tpl\"")
            && log.contains("response-message holds a Go template"),
        "template error names file, hook, option",
    );
    t.check(
        log.contains("hooks[1] \"typo\""),
        "unknown option error names the hook",
    );
    t.client()
        .request("POST", "/hooks/fresh", &[], b"")
        .status_is(200);
    let check = trigd(&["check", "--config", &dir.path_str("config.toml")], None);
    check.code_is(1);
    check.check(
        check
            .stdout
            .contains("unknown field `pass-arguments-to-comand`")
            || check
                .stderr
                .contains("unknown field `pass-arguments-to-comand`"),
        "check names the option",
    );
    // Duplicate ids across files, an unknown rule type and a bad prefix are
    // load errors too.
    dir.write("hooks.yaml", "- id: github\n  execute-command: /bin/true\n- id: r\n  execute-command: /bin/true\n  trigger-rule: {match: {type: payload-hash-md5, secret: s}}\n");
    let check = trigd(&["check", "--config", &dir.path_str("config.toml")], None);
    let all = format!("{}{}", check.stdout, check.stderr);
    check.check(
        all.contains("\"github\" is already defined"),
        "duplicate id",
    );
    check.check(
        all.contains("unknown match type \"payload-hash-md5\""),
        "unknown rule type",
    );
    let prefix = "hooks_files = [\"hooks.json\"]\nhooks_url_prefix = \"tools/webhooks\"";
    dir.write("config.toml", &config(prefix));
    let check = trigd(&["check", "--config", &dir.path_str("config.toml")], None);
    check.code_is(1);
    let all = format!("{}{}", check.stdout, check.stderr);
    check.check(
        all.contains("server.hooks_url_prefix")
            && all.contains("\"tools/webhooks\" cannot be the hooks' URL prefix"),
        "a prefix trigd serves itself",
    );
    // Nor one no request path can reach (it loaded, and every hook 404ed),
    // nor the run and schedule pages (their hooks hid them).
    for bad in [
        "..",
        ".",
        "a//b",
        "x/../api",
        "runs",
        "schedules/x",
        ".well-known",
    ] {
        let prefix = format!("hooks_files = [\"hooks.json\"]\nhooks_url_prefix = \"{bad}\"");
        dir.write("config.toml", &config(&prefix));
        let check = trigd(&["check", "--config", &dir.path_str("config.toml")], None);
        check.code_is(1);
        let all = format!("{}{}", check.stdout, check.stderr);
        check.check(
            all.contains(&format!("\"{bad}\" cannot be the hooks' URL prefix")),
            format!("an unreachable prefix {bad}"),
        );
    }
    // webhook's -http-methods, checked once, naming the option.
    let methods = "hooks_files = [\"hooks.json\"]\nhooks_http_methods = [\"post\", \"FETCH\"]";
    dir.write("config.toml", &config(methods));
    let check = trigd(&["check", "--config", &dir.path_str("config.toml")], None);
    check.code_is(1);
    let all = format!("{}{}", check.stdout, check.stderr);
    check.check(
        all.contains("config.toml:3:")
            && all
                .matches("server.hooks_http_methods[1]: \"FETCH\" is not a method")
                .count()
                == 1,
        "a bad default method, once",
    );
    dir.write("config.toml", &config("hooks_files = [\"nope.json\"]"));
    let check = trigd(&["check", "--config", &dir.path_str("config.toml")], None);
    let all = format!("{}{}", check.stdout, check.stderr);
    check.check(
        all.contains("server.hooks_files[0]") && all.contains("cannot read hooks file"),
        "a missing hooks file",
    );
}

mod handler_table;

use handler_table::{HandlerCase, HANDLER_TESTS};

/// webhook 2.8.0's `test/hookecho.go`, in sh: prints its arguments and
/// its `HOOK_` variables (`env: A=1 B=2`, read from `/proc`, since sh
/// itself drops a name it cannot hold, such as
/// `HOOK_head_commit.timestamp`), and exits N for a first argument `exit=N`.
const HOOKECHO: &str = r#"#!/bin/sh
if [ $# -gt 0 ]; then printf 'arg: %s\n' "$*"; fi
env=$(tr '\0' '\n' < /proc/$$/environ | grep '^HOOK_' | paste -sd ' ')
if [ -n "$env" ]; then printf 'env: %s\n' "$env"; fi
case "$1" in exit=*)
  code=${1#exit=}
  case "$code" in ''|*[!0-9]*) printf 'Exit code %s not an int!' "$code"; exit 255;; esac
  exit "$code";;
esac
exit 0
"#;

/// What trigd (at `RUST_LOG=debug`, as webhook runs with `-debug`) logs
/// where webhook's log matches the case's `logMatch`, in trigd's words: a
/// rule not satisfied (webhook names the missing parameter, or the
/// unsupported content type that left no payload), a run that finished
/// (its output is in the run record, not the log). webhook's warning for
/// an `execute-command` with a space is, in trigd, a `trigd check`
/// warning with the same advice (see [`check_warns_of_space`]).
fn trigd_log_match(desc: &str) -> Option<&'static str> {
    Some(match desc {
        "issue-471-and" => r"hook issue-471-and ignored",
        // (Whatever the run's owner is called in the line.)
        "static params should pass" => r"run \S+ \S*static-params-ok finished",
        "unsupported content type error" => r"hook github ignored",
        _ => return None,
    })
}

/// `trigd check` gives webhook's advice for the hook `warn-on-space`.
fn check_warns_of_space(dir: &TestDir) -> bool {
    let check = trigd(&["check", "--config", &dir.path_str("config.toml")], None);
    check
        .stderr
        .contains("hook \"warn-on-space\": execute-command:")
        && check
            .stderr
            .contains("use 'pass-arguments-to-command' to specify args")
}

/// The real webhook and trigd serving one of webhook's hooks files.
struct Pair {
    _webhook: Webhook,
    webhook_addr: String,
    trigd: Trigd,
    dir: TestDir,
}

/// Serve `tests/data/webhook-2.8.0/<file>.tmpl` rendered as webhook's
/// `genConfig` does (`{{ .Hookecho }}` → the echo script) with both
/// servers; `methods` is webhook's `-http-methods` (trigd's
/// `hooks_http_methods`), empty for none.
fn start_pair(file: &str, methods: &[&str]) -> Pair {
    let server = if methods.is_empty() {
        format!("hooks_files = [\"{file}\"]")
    } else {
        format!("hooks_files = [\"{file}\"]\nhooks_http_methods = {methods:?}")
    };
    let dir = setup("hooks_diff_handler", &server, &[]);
    dir.write("hookecho", HOOKECHO);
    let status = Command::new("chmod")
        .args(["+x", &dir.path_str("hookecho")])
        .status();
    assert!(status.is_ok_and(|s| s.success()));
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/webhook-2.8.0");
    let tmpl = std::fs::read_to_string(src.join(format!("{file}.tmpl"))).unwrap();
    dir.write(
        file,
        &tmpl.replace("{{ .Hookecho }}", &dir.path_str("hookecho")),
    );
    let port = free_port();
    let log = std::fs::File::create(dir.path("webhook.log")).unwrap();
    let mut cmd = Command::new("webhook");
    cmd.current_dir(&dir.root)
        .arg(format!("-hooks={}", dir.path_str(file)))
        .args(["-ip=127.0.0.1", &format!("-port={port}"), "-debug"]);
    if !methods.is_empty() {
        cmd.arg(format!("-http-methods={}", methods.join(",")));
    }
    // webhook_test.go's webhookEnv: no HOOK_ variable of the test's own.
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("HOOK_")) {
        cmd.env_remove(k);
    }
    let child = cmd
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start `webhook` ({e}): apt-get install webhook"));
    let webhook = Webhook(child);
    let webhook_addr = format!("127.0.0.1:{port}");
    let up = wait_until(WAIT, || {
        Client::for_addr(&webhook_addr, &dir.path("webhook.log"))
            .try_request("GET", "/", &[], b"")
            .is_ok_and(|r| r.status == 200)
    });
    assert!(up, "webhook did not start: {}", dir.read("webhook.log"));
    let trigd = Trigd::start_env(&dir, &[("RUST_LOG", "debug")]);
    Pair {
        _webhook: webhook,
        webhook_addr,
        trigd,
        dir,
    }
}

/// One answer: status, `Content-Type` and body (the peer's port replaced).
#[derive(Debug, PartialEq)]
struct Answer {
    status: u16,
    content_type: Option<String>,
    body: String,
}

/// Send case `c` as webhook_test.go does: its headers, then its
/// `contentType` as one more `Content-Type`, its body.
fn send_case(addr: &str, log: &Path, c: &HandlerCase) -> Answer {
    let mut headers: Vec<(&str, &str)> = c.headers.to_vec();
    headers.push(("Content-Type", c.content_type));
    let path = format!("/hooks/{}", c.id);
    let r = Client::for_addr(addr, log).request(c.method, &path, &headers, c.body.as_bytes());
    Answer {
        status: r.status,
        content_type: r.header("Content-Type").map(str::to_string),
        body: sanitize(&r.text()),
    }
}

/// Whether `got` is the table's answer: the status, and `respBody` as a
/// regular expression found in the body — as webhook_test.go reads a case
/// with `bodyIsRE` false. (With `bodyIsRE` true its check is inverted by
/// mistake — it fails only a body equal to the pattern's text — so the one
/// such case, request-source, is read as a regular expression the whole
/// body matches.)
fn answers_as_table(c: &HandlerCase, got: &Answer) -> bool {
    // A body given as a regular expression is matched whole.
    let pattern = if c.body_is_re {
        format!("^(?:{})$", c.resp_body)
    } else {
        c.resp_body.to_string()
    };
    let re = regex_lite::Regex::new(&pattern).unwrap();
    got.status == c.resp_status && re.is_match(&got.body)
}

/// Whether the log at `path` comes to match `pattern` (bounded).
/// (From byte `from` on: what was logged since the case was sent, as
/// webhook_test.go starts a webhook per case.)
fn log_matches(path: &Path, from: usize, pattern: &str) -> bool {
    let re = regex_lite::Regex::new(pattern).unwrap();
    wait_until(WAIT, || {
        std::fs::read(path)
            .is_ok_and(|b| re.is_match(&String::from_utf8_lossy(b.get(from..).unwrap_or_default())))
    })
}

/// The length of the log at `path` now.
fn log_len(path: &Path) -> usize {
    std::fs::metadata(path).map_or(0, |m| m.len() as usize)
}

/// Every problem of case `c` on `pair`, in words.
fn check_case(pair: &Pair, file: &str, c: &HandlerCase) -> Vec<String> {
    let wh_log = pair.dir.path("webhook.log");
    let (wh_from, trigd_from) = (log_len(&wh_log), log_len(&pair.trigd.stderr_log));
    let webhook = send_case(&pair.webhook_addr, &wh_log, c);
    let trigd = send_case(&pair.trigd.addr, &pair.trigd.stderr_log, c);
    let mut problems = Vec::new();
    let at = format!("{}@{file} (id {})", c.desc, c.id);
    if !answers_as_table(c, &webhook) {
        problems.push(format!(
            "{at}: webhook does not give the table's answer {} {:?}: {webhook:?}",
            c.resp_status, c.resp_body
        ));
    }
    if !answers_as_table(c, &trigd) {
        problems.push(format!(
            "{at}: trigd does not give the table's answer {} {:?}: {trigd:?}",
            c.resp_status, c.resp_body
        ));
    }
    if webhook != trigd {
        problems.push(format!(
            "{at}: the answers differ:\n  webhook: {webhook:?}\n  trigd:   {trigd:?}"
        ));
    }
    if !c.log_match.is_empty() && !log_matches(&wh_log, wh_from, c.log_match) {
        problems.push(format!(
            "{at}: webhook's log does not match {:?}",
            c.log_match
        ));
    }
    if let Some(pattern) = trigd_log_match(c.desc) {
        if !log_matches(&pair.trigd.stderr_log, trigd_from, pattern) {
            problems.push(format!("{at}: trigd's log does not match {pattern:?}"));
        }
    }
    if c.id == "warn-on-space" && !check_warns_of_space(&pair.dir) {
        problems.push(format!("{at}: trigd check gives no advice for the space"));
    }
    problems
}

/// webhook 2.8.0's `TestWebhook`: every case of `hookHandlerTests`, with
/// the JSON and then the YAML hooks file of its `test/` directory, sent to
/// the real webhook and to trigd; both give the table's answer (and
/// webhook's log its `logMatch`, trigd's log its own words for it), and
/// the same answer.
#[test]
#[ignore = "needs the Debian `webhook` package; run with --include-ignored"]
fn webhooks_own_handler_tests_pass_on_webhook_and_trigd() {
    let mut problems = Vec::new();
    let mut runs = 0;
    for file in ["hooks.json", "hooks.yaml"] {
        let mut pairs: Vec<(Vec<&str>, Pair)> = Vec::new();
        for c in HANDLER_TESTS {
            let methods = c.cli_methods.to_vec();
            if !pairs.iter().any(|(m, _)| *m == methods) {
                pairs.push((methods.clone(), start_pair(file, &methods)));
            }
            let pair = &pairs.iter().find(|(m, _)| *m == methods).unwrap().1;
            runs += 1;
            problems.extend(check_case(pair, file, c));
        }
    }
    assert_eq!(runs, 2 * HANDLER_TESTS.len());
    assert!(
        problems.is_empty(),
        "{} problems in {runs} case runs:\n{}",
        problems.len(),
        problems.join("\n")
    );
}
