//! Fuzz harnesses for trigd's parsers, linked against the `trigd` library
//! (`trigd::testing::config::load_str`, `trigd::testing::invoke::named_values`, …).
//!
//! Each harness takes arbitrary bytes, must never panic, and asserts the
//! parser's invariants. The `fuzz_targets/` binaries feed them from
//! libFuzzer (`cargo +nightly fuzz run <target>`); `tests/random.rs` feeds
//! them random and mutated inputs on stable (`cargo test`).
#![allow(dead_code, unused_imports, clippy::all)]
#![deny(unsafe_code)]

use trigd::testing::state::output;
use trigd::testing::{compat, config, http, invoke, receive};

use std::path::{Path, PathBuf};

use http::Request;

/// Split `data` into a config text and program files: the parts separated
/// by NUL bytes; the first is `config.toml`, each other one
/// `programs/<n>.toml`. Invalid UTF-8 is replaced (trigd reads files with
/// `read_to_string`, which refuses it before parsing).
fn split_files(data: &[u8]) -> (String, Vec<(PathBuf, String)>) {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.split('\0');
    let config = parts.next().unwrap_or("").to_string();
    let programs = parts
        .take(8)
        .enumerate()
        .map(|(i, p)| (PathBuf::from(format!("programs/{i}.toml")), p.to_string()))
        .collect();
    (config, programs)
}

/// Lines in `text` as an editor counts them (a final line without newline
/// counts; an empty file has one line).
fn line_count(text: &str) -> usize {
    text.split('\n').count()
}

/// Check `config::load_str`'s result against the inputs: a loaded config
/// holds only what the files declare; every error points into a given file,
/// within its text, and says something.
fn check_load(config: &str, programs: &[(PathBuf, String)]) {
    let path = Path::new("config.toml");
    match config::load_str(path, config, programs) {
        Ok(cfg) => {
            assert!(cfg.programs.len() <= programs.len());
            for p in cfg.programs.values() {
                assert!(!p.functions.is_empty(), "program {} has no function", p.id);
                for f in &p.functions {
                    assert!(!f.steps.is_empty(), "function {} has no step", f.name);
                }
            }
            for t in cfg.tools.values() {
                for tr in &t.triggers {
                    let p = cfg
                        .program(tr.program)
                        .expect("trigger names a loaded program");
                    assert!(p.function(&tr.function).is_some());
                }
            }
        }
        Err(errs) => {
            assert!(!errs.is_empty(), "Err with no error");
            for e in &errs {
                let text = if e.file == path {
                    config
                } else {
                    let (_, t) = programs
                        .iter()
                        .find(|(f, _)| *f == e.file)
                        .unwrap_or_else(|| panic!("error names an unknown file: {e}"));
                    t.as_str()
                };
                assert!(
                    e.line <= line_count(text),
                    "line {} past the end ({} lines): {e}",
                    e.line,
                    line_count(text)
                );
                assert!(e.line > 0 || e.col == 0, "column without line: {e}");
                assert!(!e.msg.trim().is_empty(), "empty message: {e}");
                let _ = e.to_string();
            }
        }
    }
}

/// Fuzz `config::load_str`: the input as `config.toml` alone, as one
/// program file next to a minimal config, and split on NULs into a config
/// and program files.
pub fn config_load(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    check_load(&text, &[]);
    let one = [(PathBuf::from("programs/p.toml"), text.to_string())];
    check_load("", &one);
    let (config, programs) = split_files(data);
    if !programs.is_empty() {
        check_load(&config, &programs);
    }
}

/// Fuzz `http::Request::new` on an arbitrary method and target (split at
/// the first space): no panic; segments never hold a `/` or a dot segment;
/// the log form of the target parses back to the same query with `api_key`
/// values redacted; the accessors agree with the query.
pub fn http_request(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (method, target) = text.split_once(' ').unwrap_or(("GET", &text));
    let Ok(req) = Request::new(method, target) else {
        return;
    };
    assert_eq!(req.method, http::Method::of_request(method));
    for s in &req.segments {
        assert!(
            !s.is_empty() && !s.contains('/') && s != "." && s != "..",
            "{s:?}"
        );
    }
    let logged = req.log_target().to_string();
    let again = Request::new(method, &logged)
        .unwrap_or_else(|e| panic!("log target {logged:?} does not parse: {e:?}"));
    let want: Vec<(String, String)> = req
        .query
        .iter()
        .map(|(k, v)| {
            let v = if k == "api_key" {
                "[redacted]"
            } else {
                v.as_str()
            };
            (k.clone(), v.to_string())
        })
        .collect();
    assert_eq!(again.query, want, "log target {logged:?}");
    for (k, v) in &req.query {
        assert!(req.query_all(k).any(|x| x == v));
        match req.query_one(k) {
            Ok(first) => assert_eq!(first, Some(v.as_str())),
            Err(e) => assert_eq!(e.code(), "invalid_parameter"),
        }
        if k == "api_key" && !v.is_empty() && !logged.contains(&http::percent_encode(v)) {
            // fine: redacted
        }
    }
    let _ = invoke::parse_bool("run_async", req.query_one("run_async").ok().flatten());
}

/// Fuzz the value parsing of generated tool endpoints
/// (`invoke::named_values`): outputs from the first line, the target from the
/// second, the body from the rest. On success there is exactly one value per
/// output, each taken from the query or the body.
pub fn tool_values(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.splitn(3, '\n');
    let outputs: Vec<String> = lines
        .next()
        .unwrap_or("")
        .split(',')
        .filter(|s| !s.is_empty())
        .take(16)
        .map(str::to_string)
        .collect();
    let target = format!("/tools/t/e/x?{}", lines.next().unwrap_or(""));
    let Ok(mut req) = Request::new("POST", &target) else {
        return;
    };
    req.body = lines.next().unwrap_or("").as_bytes().to_vec();
    match invoke::named_values(&req, &outputs) {
        Ok(values) => {
            assert_eq!(values.len(), outputs.len());
            let body: Option<serde_json::Value> = serde_json::from_slice(&req.body).ok();
            for (o, v) in outputs.iter().zip(&values) {
                let in_query = req.query.iter().any(|(k, x)| k == o && x == v);
                let in_body = body
                    .as_ref()
                    .and_then(|b| b.get(o))
                    .is_some_and(|x| x.as_str() == Some(v.as_str()));
                assert!(in_query || in_body, "value of {o} comes from nowhere");
            }
        }
        Err(e) => {
            assert!(
                matches!(e.code(), "variables_mismatch" | "invalid_parameter"),
                "{e:?}"
            );
            assert_eq!(e.status(), 400);
            assert!(!e.message().is_empty());
        }
    }
}

/// A request body through `receive::payload::Payload::parse` (JSON, form,
/// the hand-written multipart parser, XML) and every value source over it:
/// line 1 is the Content-Type, the rest the body. No panic; an error names
/// the kind and says something; a parsed body converts to JSON; a multipart
/// body's fields are each a part of the body.
pub fn payload(data: &[u8]) {
    use receive::payload::{Kind, Payload};
    use receive::values::{Incoming, JsonPath, Source, Whole};
    let split = data.iter().position(|&b| b == b'\n').unwrap_or(data.len());
    let ct = String::from_utf8_lossy(&data[..split]).into_owned();
    let body = data.get(split + 1..).unwrap_or(&[]);
    match Payload::parse(Some(&ct), body) {
        Ok(p) => {
            let _ = p.to_json();
            if let Payload::Form(fields) = &p {
                if Kind::of(Some(&ct)) == Kind::Multipart {
                    for (_, v) in fields {
                        assert!(v.len() <= body.len());
                    }
                }
            }
        }
        Err(e) => assert!(!e.msg.is_empty()),
    }
    let headers = vec![("content-type".to_string(), ct)];
    let inc = Incoming::new(&headers, &[], body, std::net::Ipv4Addr::LOCALHOST.into());
    let path = JsonPath::parse("a.0.b").unwrap();
    for s in [
        Source::Json(path.clone()),
        Source::Xml(path.clone()),
        Source::Payload(path),
        Source::Form("a".into()),
        Source::Whole(Whole::Payload),
        Source::BodyText,
    ] {
        if let Err(e) = inc.get(&s) {
            assert!(!e.message().is_empty());
        }
    }
}

/// An adnanh/webhook hooks file (JSON or YAML) through
/// `compat::webhook::file::parse_file` and `compat::webhook::compile::compile`, then a request
/// (the part after the first NUL: Content-Type line, body) read and every
/// compiled rule evaluated the webhook way. No panic; every error names
/// something.
pub fn hooks_file(data: &[u8]) {
    let (file, req) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let text = String::from_utf8_lossy(file);
    let defs = match adapt::hooks_file(&text) {
        Ok(defs) => defs,
        Err(msg) => return assert!(!msg.is_empty()),
    };
    let split = req.iter().position(|&b| b == b'\n').unwrap_or(req.len());
    let ct = String::from_utf8_lossy(&req[..split]).into_owned();
    let body = req.get(split + 1..).unwrap_or(&[]);
    let headers = vec![("content-type".to_string(), ct)];
    let server = config::load_str(Path::new("config.toml"), "", &[])
        .expect("an empty config loads")
        .server;
    for def in defs {
        let Ok(def) = def else { continue };
        let hook = match compat::webhook::compile::compile(&def, Path::new("."), &server) {
            Ok(h) => h,
            Err(msg) => {
                assert!(msg.contains("option"), "{msg}");
                continue;
            }
        };
        let config::Dialect::HooksFile(h) = &hook.dialect else {
            panic!("a hook carries its hooks-file dialect");
        };
        let (reading, values) = (&h.reading, &h.values);
        let remote = Some("127.0.0.1:1".parse().unwrap());
        let Ok(mut wr) = compat::webhook::receive::HookRequest::new(
            "POST",
            remote,
            &headers,
            &[],
            body,
            reading.content_type.as_deref(),
            &[],
        ) else {
            continue;
        };
        wr.parse_json_params(&reading.json_params);
        if let Some(rule) = &hook.receive.rule {
            let _ = wr.eval(rule, reading.soft_signatures);
        }
        for s in &values.args {
            let _ = wr.get(s);
        }
    }
}

/// The parsers that the hooks-file, XML, multipart and signature targets
/// call, each behind one function here. Those parsers are gaining bounds
/// (aliases, depth and size of hooks files; XML attributes; multipart
/// line endings; signature entries): when one's signature or behaviour
/// changes, only this module (and the switches in it) needs re-pointing.
pub mod adapt {
    use std::time::Duration;

    use serde_json::Value;

    use trigd::testing::compat::webhook::file::{self as hooks, Parsed};
    use trigd::testing::receive::payload::{self, Part, Payload};
    use trigd::testing::receive::signature::{Encoding, Scheme, Secret, SigError, Verifier};

    /// Whether multipart bodies whose lines end in a bare `\n` must parse
    /// like their CRLF form (Go's mime/multipart does, and so does
    /// `receive/multipart.rs`).
    pub const MULTIPART_LF: bool = true;

    /// The most comma-separated entries of a fuzzed value to which the
    /// harness adds a correct signature (one entry, two for Stripe's
    /// `t=`,`v1=`) and still expects it to be accepted. Keep it at least two
    /// below the verifier's bound on the entries of one header (16,
    /// `receive/signature.rs`).
    pub const SIGNATURE_ENTRIES: usize = 14;

    /// A hooks file's text (YAML or JSON) as its hooks, or the whole file's
    /// error message.
    pub fn hooks_file(text: &str) -> Result<Vec<Parsed>, String> {
        hooks::parse_file(text).map_err(|e| e.msg)
    }

    /// An XML body as its JSON tree; `None` for a blank body.
    pub fn xml(body: &[u8]) -> Result<Option<Value>, String> {
        match Payload::parse(Some("application/xml"), body) {
            Ok(Payload::Xml(v)) => Ok(Some(v)),
            Ok(Payload::Raw) => Ok(None),
            Ok(other) => panic!("an XML body parsed as {other:?}"),
            Err(e) => Err(e.msg),
        }
    }

    /// The deepest XML nesting accepted.
    pub const XML_MAX_DEPTH: usize = payload::MAX_DEPTH;

    /// The parts of a multipart/form-data body.
    pub fn multipart(content_type: &str, body: &[u8]) -> Result<Vec<Part>, String> {
        payload::parts(content_type, body)
    }

    /// A signature check as the config builds one.
    pub fn verifier(
        scheme: Scheme,
        header: &str,
        prefix: &str,
        encoding: Encoding,
        secret: &[u8],
    ) -> Verifier {
        Verifier {
            scheme,
            header: header.to_string(),
            prefix: prefix.to_string(),
            encoding,
            secret: Secret::new(secret.to_vec()),
            tolerance: Duration::from_secs(300),
            secret_file: None,
        }
    }

    /// Check a request's headers and body at unix time `now`.
    pub fn verify(
        v: &Verifier,
        headers: &[(String, String)],
        body: &[u8],
        now: u64,
    ) -> Result<(), SigError> {
        v.verify(headers, body, now)
    }

    /// trigd's own `webhook-signature` of a callback body (Standard
    /// Webhooks), with `secret` as `[callbacks] secret_file` holds it.
    pub fn trigd_signature(secret: &str, id: &str, t: u64, body: &[u8]) -> String {
        use trigd::testing::runs::callback::send;
        let secret = send::Secret::parse(secret).expect("a valid callback secret");
        send::signature(&secret, id, t, body)
    }
}

/// A hooks file's text alone through the file reader (`adapt::hooks_file`):
/// YAML with anchors, aliases, tags, flow and block nesting, or JSON. No
/// panic, no stack overflow, memory and time within libFuzzer's limits
/// (`-rss_limit_mb`, `-timeout`: an alias bomb or a deep nesting must be
/// refused, not expanded); a whole-file error says something; each hook
/// is either usable (an id and a command) or an error that says something.
pub fn hooks_yaml(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    match adapt::hooks_file(&text) {
        Ok(hooks) => {
            for h in hooks {
                match h {
                    Ok(def) => assert!(!def.id.is_empty() && !def.execute_command.is_empty()),
                    Err(e) => {
                        assert!(!e.msg.is_empty());
                        let _ = e.key();
                    }
                }
            }
        }
        Err(msg) => assert!(!msg.is_empty()),
    }
}

/// Depth of a JSON tree (a scalar is 1).
fn depth(v: &serde_json::Value) -> usize {
    match v {
        serde_json::Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        serde_json::Value::Object(m) => 1 + m.values().map(depth).max().unwrap_or(0),
        _ => 1,
    }
}

/// Bytes of text (keys and strings) in a JSON tree.
fn text_bytes(v: &serde_json::Value) -> usize {
    match v {
        serde_json::Value::String(s) => s.len(),
        serde_json::Value::Array(a) => a.iter().map(text_bytes).sum(),
        serde_json::Value::Object(m) => m.iter().map(|(k, x)| k.len() + text_bytes(x)).sum(),
        _ => 0,
    }
}

/// An XML body through the payload parser (`adapt::xml`). No panic; a
/// blank body is no payload; a document is an object with exactly its
/// root element; nesting within the parser's bound (an element is at most
/// two JSON levels: its object and an array of repeats); no entity
/// expansion: the tree holds at most 3 bytes of text per input byte (the
/// most a replaced invalid byte, U+FFFD, takes) plus the `#text` keys and
/// `-` prefixes the mapping adds, bounded by 5 bytes an input byte.
pub fn xml_payload(data: &[u8]) {
    match adapt::xml(data) {
        Ok(None) => assert!(data.iter().all(u8::is_ascii_whitespace)),
        Ok(Some(v)) => {
            let root = v.as_object().expect("the root is an object");
            assert_eq!(root.len(), 1, "one root element");
            assert!(depth(&v) <= 2 * adapt::XML_MAX_DEPTH + 2, "too deep");
            assert!(
                text_bytes(&v) <= 5 * data.len(),
                "{} bytes of text from {} bytes of XML",
                text_bytes(&v),
                data.len()
            );
        }
        Err(msg) => assert!(msg.contains("XML"), "{msg}"),
    }
}

/// Form fields from `data` for a multipart body: `name\0value\0…`, names
/// reduced to characters a `Content-Disposition` carries unquoted.
fn fields_of(data: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut items = data.split(|&b| b == 0);
    let mut out = Vec::new();
    while let (Some(n), Some(v)) = (items.next(), items.next()) {
        // At most 256 characters: a name of a long input could otherwise
        // pass the parser's bound on a part's headers (8 KiB), which is
        // refused on purpose.
        let name: String = String::from_utf8_lossy(n)
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || "_-.".contains(*c))
            .take(256)
            .collect();
        if !name.is_empty() && out.len() < 32 {
            out.push((name, v.to_vec()));
        }
    }
    out
}

/// `fields` as a multipart/form-data body with `boundary`, lines ending
/// in `eol`.
fn multipart_body(fields: &[(String, Vec<u8>)], boundary: &str, eol: &str) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, value) in fields {
        let head =
            format!("--{boundary}{eol}Content-Disposition: form-data; name=\"{name}\"{eol}{eol}");
        body.extend_from_slice(head.as_bytes());
        body.extend_from_slice(value);
        body.extend_from_slice(eol.as_bytes());
    }
    body.extend_from_slice(format!("--{boundary}--{eol}").as_bytes());
    body
}

/// A multipart/form-data body two ways. Raw: line 1 is the Content-Type,
/// the rest the body, through `adapt::multipart`: no panic, an error says
/// something, each part's content is a piece of the body. Round trip: the
/// input read as `name\0value\0…` fields, written as a multipart body
/// (CRLF; also bare LF once `adapt::MULTIPART_LF`) with a boundary that no
/// value holds, parses back to exactly those fields.
pub fn multipart_payload(data: &[u8]) {
    let split = data.iter().position(|&b| b == b'\n').unwrap_or(data.len());
    let ct = String::from_utf8_lossy(&data[..split]).into_owned();
    let body = data.get(split + 1..).unwrap_or(&[]);
    match adapt::multipart(&ct, body) {
        Ok(parts) => {
            let total: usize = parts.iter().map(|p| p.name.len() + p.data.len()).sum();
            assert!(total <= body.len(), "parts hold more than the body");
            // The search is linear in the body: a few parts are enough.
            for p in parts.iter().take(8) {
                assert!(
                    memchr::memmem::find(body, &p.data).is_some(),
                    "a part's content is not in the body"
                );
            }
        }
        Err(msg) => assert!(!msg.is_empty()),
    }
    let fields = fields_of(data);
    if fields.is_empty() {
        return;
    }
    let mut boundary = String::from("trigdFuzz");
    while fields
        .iter()
        .any(|(_, v)| memchr::memmem::find(v, boundary.as_bytes()).is_some())
    {
        boundary.push('x');
    }
    let eols: &[&str] = if adapt::MULTIPART_LF {
        &["\r\n", "\n"]
    } else {
        &["\r\n"]
    };
    let ct = format!("multipart/form-data; boundary={boundary}");
    for eol in eols {
        let body = multipart_body(&fields, &boundary, eol);
        let parts = adapt::multipart(&ct, &body)
            .unwrap_or_else(|e| panic!("a well-formed body ({eol:?}) is refused: {e}"));
        let got: Vec<(String, Vec<u8>)> = parts.into_iter().map(|p| (p.name, p.data)).collect();
        assert_eq!(got, fields, "round trip ({eol:?})");
    }
}

/// One sender's way of signing, as a `[…verify]` table configures it.
struct SigCase {
    scheme: receive::signature::Scheme,
    header: &'static str,
    prefix: &'static str,
    encoding: receive::signature::Encoding,
}

/// The senders the `signature_header` target plays, chosen by its first
/// byte: GitHub (`sha256=`, legacy `sha1=`), base64 HMAC-SHA512, Gitea (no
/// prefix), GitLab's token, Stripe, Slack, trigd's own callbacks
/// (Standard Webhooks), Scalr.
const SIG_CASES: [SigCase; 9] = {
    use receive::signature::{Algo, Encoding::*, Scheme::*};
    [
        SigCase {
            scheme: Hmac(Algo::Sha256),
            header: "x-hub-signature-256",
            prefix: "sha256=",
            encoding: Hex,
        },
        SigCase {
            scheme: Hmac(Algo::Sha1),
            header: "x-hub-signature",
            prefix: "sha1=",
            encoding: Hex,
        },
        SigCase {
            scheme: Hmac(Algo::Sha512),
            header: "x-signature",
            prefix: "",
            encoding: Base64,
        },
        SigCase {
            scheme: Hmac(Algo::Sha256),
            header: "x-gitea-signature",
            prefix: "",
            encoding: Hex,
        },
        SigCase {
            scheme: Token,
            header: "x-gitlab-token",
            prefix: "",
            encoding: Hex,
        },
        SigCase {
            scheme: Stripe,
            header: "stripe-signature",
            prefix: "",
            encoding: Hex,
        },
        SigCase {
            scheme: Slack,
            header: "x-slack-signature",
            prefix: "v0=",
            encoding: Hex,
        },
        SigCase {
            scheme: StandardWebhooks,
            header: "webhook-signature",
            prefix: "",
            encoding: Base64,
        },
        SigCase {
            scheme: Scalr,
            header: "x-signature",
            prefix: "",
            encoding: Hex,
        },
    ]
};

/// The shared secret of every case.
const SIG_SECRET: &str = "It's a Secret to Everybody";
/// The time of every check, and the Scalr `Date` that says it.
const SIG_NOW: u64 = 1_700_000_000;
const SIG_DATE: &str = "Tue 14 Nov 2023 22:13:20 UTC";
/// The `webhook-id` of the Standard Webhooks case.
const SIG_ID: &str = "msg_fuzz";

/// HMAC of `parts` under the secret, computed here (not by trigd).
fn sig_mac(algo: receive::signature::Algo, parts: &[&[u8]]) -> Vec<u8> {
    use hmac::{Hmac, Mac};
    use receive::signature::Algo;
    fn run<M: Mac + hmac::digest::KeyInit>(parts: &[&[u8]]) -> Vec<u8> {
        let mut m = <M as hmac::digest::KeyInit>::new_from_slice(SIG_SECRET.as_bytes())
            .expect("any key length");
        for p in parts {
            m.update(p);
        }
        m.finalize().into_bytes().to_vec()
    }
    match algo {
        Algo::Sha1 => run::<Hmac<sha1::Sha1>>(parts),
        Algo::Sha256 => run::<Hmac<sha2::Sha256>>(parts),
        Algo::Sha512 => run::<Hmac<sha2::Sha512>>(parts),
    }
}

/// `value` with a correct signature of `body` at `t` added as one more
/// comma-separated entry (the only entry for token and Scalr), and the
/// timestamp header where the scheme has one.
fn sig_good(case: &SigCase, value: &str, body: &[u8], t: u64) -> Vec<(String, String)> {
    use base64::Engine as _;
    use receive::signature::{Algo, Encoding, Scheme};
    let ts = t.to_string();
    let hex256 = |parts: &[&[u8]]| hex::encode(sig_mac(Algo::Sha256, parts));
    let (sent, second) = match case.scheme {
        Scheme::Hmac(algo) => {
            let mac = sig_mac(algo, &[body]);
            let sig = match case.encoding {
                Encoding::Hex => hex::encode(mac),
                Encoding::Base64 => base64::engine::general_purpose::STANDARD.encode(mac),
            };
            (format!("{value},{}{sig}", case.prefix), None)
        }
        Scheme::Token => (SIG_SECRET.to_string(), None),
        Scheme::StandardWebhooks => {
            let own = adapt::trigd_signature(SIG_SECRET, SIG_ID, t, body);
            return vec![
                (case.header.to_string(), format!("{value} {own}")),
                ("webhook-id".to_string(), SIG_ID.to_string()),
                ("webhook-timestamp".to_string(), ts),
            ];
        }
        Scheme::Stripe => {
            let sig = hex256(&[ts.as_bytes(), b".", body]);
            (format!("{value},t={ts},v1={sig}"), None)
        }
        Scheme::Slack => {
            let sig = hex256(&[b"v0:", ts.as_bytes(), b":", body]);
            let second = (receive::signature::SLACK_TIMESTAMP, ts.clone());
            (format!("{value},v0={sig}"), Some(second))
        }
        Scheme::Scalr => {
            let sig = hex::encode(sig_mac(Algo::Sha1, &[body, SIG_DATE.as_bytes()]));
            (sig, Some(("date", SIG_DATE.to_string())))
        }
    };
    let mut headers = vec![(case.header.to_string(), sent)];
    headers.extend(second.map(|(k, v)| (k.to_string(), v)));
    headers
}

/// A refusal says which header, never the secret.
fn check_sig_error(e: &receive::signature::SigError) {
    let msg = e.message();
    assert!(!msg.is_empty());
    assert!(!msg.contains(SIG_SECRET), "the secret in a message: {msg}");
}

/// A signature header through the verifier (`adapt::verify`). The first
/// byte picks the sender ([`SIG_CASES`]); line 1 is the header's value,
/// line 2 the second header (Slack's timestamp, Scalr's `Date`), the rest
/// the body. No panic; a refusal never quotes the secret. Then, when the
/// value has at most `adapt::SIGNATURE_ENTRIES` entries, the same value
/// with a correct signature added (computed here, or by trigd's own
/// callback signer) is accepted whatever the other entries are, and the
/// same request a tolerance later is refused as expired.
pub fn signature_header(data: &[u8]) {
    use receive::signature::{Scheme, SigError};
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let case = &SIG_CASES[usize::from(pick) % SIG_CASES.len()];
    let mut lines = rest.splitn(3, |&b| b == b'\n');
    let value = String::from_utf8_lossy(lines.next().unwrap_or(&[])).into_owned();
    let second = String::from_utf8_lossy(lines.next().unwrap_or(&[])).into_owned();
    let body = lines.next().unwrap_or(&[]);
    assert_eq!(receive::signature::scalr_date(SIG_DATE), Some(SIG_NOW));
    let v = adapt::verifier(
        case.scheme,
        case.header,
        case.prefix,
        case.encoding,
        SIG_SECRET.as_bytes(),
    );
    let headers = vec![
        (case.header.to_string(), value.clone()),
        (
            receive::signature::SLACK_TIMESTAMP.to_string(),
            second.clone(),
        ),
        ("date".to_string(), second),
    ];
    if let Err(e) = adapt::verify(&v, &headers, body, SIG_NOW) {
        check_sig_error(&e);
    }
    let entries = match case.scheme {
        Scheme::StandardWebhooks => value.split(' ').filter(|e| !e.is_empty()).count(),
        _ => value.split(',').count(),
    };
    if entries > adapt::SIGNATURE_ENTRIES {
        return;
    }
    let good = sig_good(case, &value, body, SIG_NOW);
    assert_eq!(
        adapt::verify(&v, &good, body, SIG_NOW),
        Ok(()),
        "a correct signature refused: {good:?}"
    );
    if matches!(
        case.scheme,
        Scheme::Stripe | Scheme::Slack | Scheme::Scalr | Scheme::StandardWebhooks
    ) {
        let late = adapt::verify(&v, &good, body, SIG_NOW + 301);
        assert!(matches!(late, Err(SigError::Expired { .. })), "{late:?}");
    }
}

/// `tls::not_after` (the DER walk of the TLS certificate store) on
/// arbitrary bytes: no panic; a time it finds is in the years 0000 to 9999
/// (UTCTime spells 1950-2049, GeneralizedTime any four-digit year: RFC 5280
/// asks for UTCTime before 2050, but an earlier GeneralizedTime is read, not
/// refused); a certificate cut short anywhere in its outer header finds
/// nothing.
pub fn cert_not_after(data: &[u8]) {
    const YEAR_0: i64 = -62_167_219_200;
    const YEAR_10000: i64 = 253_402_300_800;
    if let Some(t) = trigd::testing::tls::not_after(data) {
        assert!((YEAR_0..YEAR_10000).contains(&t), "{t}");
    }
    if data.len() > 4 {
        assert_eq!(trigd::testing::tls::not_after(&data[..2]), None);
    }
}

/// A cron expression of a schedule (`schedule::cron::Cron::parse`): the
/// whole input as text. No panic; an error says something; an expression
/// that does not `never_fires` has occurrences, strictly increasing, in UTC
/// and across New York's DST changes.
pub fn cron_expr(data: &[u8]) {
    use trigd::testing::schedule::Cron;
    let text = String::from_utf8_lossy(data);
    let cron = match Cron::parse(&text) {
        Ok(c) => c,
        Err(e) => {
            assert!(!e.is_empty(), "an empty error");
            return;
        }
    };
    if cron.never_fires() {
        return;
    }
    // 2026-03-07, a day before New York's spring-forward change.
    let from = jiff::Timestamp::from_second(1_772_841_600).expect("in range");
    for zone in ["UTC", "America/New_York"] {
        let tz = jiff::tz::TimeZone::get(zone).expect("a known zone");
        let mut at = from;
        for _ in 0..3 {
            let next = cron
                .next_after(at, &tz)
                .expect("an expression that fires has a next");
            assert!(next > at, "occurrences go forward");
            at = next;
        }
    }
}

/// What the callbacks and signed endpoints of issue 34 read from outside,
/// chosen by the first byte: 0 a callback secret file's text
/// (`config::callbacks::Secret::parse`: one or two lines, `whsec_` base64
/// or raw), 1 a receiver's `Retry-After` (`send::retry_after`), 2 a
/// signed request's delivery id (`receive::delivery::id`: line 1 a header
/// value, the rest a body, every verify scheme), 3 a `whsec_` text
/// (`receive::signature::whsec`). No panic; a secret's error never quotes
/// a line of it; a delivery id is 1 to 255 printable ASCII bytes; a key
/// read from `whsec_` is read back from its own base64.
pub fn notify_inputs(data: &[u8]) {
    use base64::Engine as _;
    use receive::signature::{whsec, Algo, Encoding, Scheme};
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    match pick % 4 {
        0 => {
            if let Err(e) = trigd::testing::runs::callback::send::Secret::parse(&text) {
                assert!(!e.is_empty());
                for line in text.lines().map(str::trim).filter(|l| l.len() >= 8) {
                    assert!(!e.contains(line), "a secret in an error: {e}");
                }
            }
        }
        1 => {
            let now: jiff::Timestamp = "2026-11-27T00:00:00Z".parse().expect("a time");
            let wait = trigd::testing::runs::callback::send::retry_after(&text, now);
            let t = text.trim();
            if !t.is_empty() && t.len() <= 40 && t.bytes().all(|b| b.is_ascii_digit()) {
                assert!(wait.is_some(), "{t:?}");
            }
        }
        2 => {
            let (line, body) = text.split_once('\n').unwrap_or((&text, ""));
            for scheme in [
                Scheme::Hmac(Algo::Sha256),
                Scheme::Token,
                Scheme::Stripe,
                Scheme::Slack,
                Scheme::StandardWebhooks,
            ] {
                let v = adapt::verifier(scheme, "x", "", Encoding::Hex, b"secret");
                let headers: Vec<(String, String)> = [
                    "x-github-delivery",
                    "x-gitlab-event-uuid",
                    "webhook-id",
                    "svix-id",
                ]
                .iter()
                .map(|h| (h.to_string(), line.to_string()))
                .collect();
                let id = receive::delivery::id(&v, &headers, body.as_bytes());
                if let Some(id) = id {
                    assert!(!id.is_empty() && id.len() <= receive::delivery::MAX_ID_BYTES);
                    assert!(id.bytes().all(|b| (0x20..0x7f).contains(&b)), "{id:?}");
                }
            }
        }
        _ => {
            if let Some(key) = whsec(&text) {
                assert!(!key.is_empty());
                let again = base64::engine::general_purpose::STANDARD.encode(&key);
                assert_eq!(whsec(&format!("whsec_{again}")), Some(key));
            }
        }
    }
}

/// The query of `GET /api/runs` (issue 35): the input is the query string
/// of `/api/runs?…`, read by `runs::list::parse` (the Runs page reads its
/// query with the same function), and the raw input as a cursor. No
/// panic; a refusal is 400 `invalid_parameter` naming a parameter of the
/// query, with a message; an accepted query has a page size in
/// 1..=`MAX_PAGE` (`DEFAULT_PAGE` when not given), `since` not after
/// `until`, names of at most 256 bytes, only known parameters, each once,
/// every non-empty filter set and every empty one unset, and a cursor that
/// reads back from its own text; a cursor is at most 54 bytes
/// (`<20 digits>.<32 hex>` with a sign) and reads back from what it writes.
pub fn run_list_query(data: &[u8]) {
    use trigd::testing::runs::list::{parse, Cursor, DEFAULT_PAGE, FILTER_PARAMS, MAX_PAGE};
    let text = String::from_utf8_lossy(data);
    if let Ok(c) = text.parse::<Cursor>() {
        assert!(text.len() <= 54, "a cursor of {} bytes", text.len());
        assert_eq!(c.to_string().parse::<Cursor>(), Ok(c), "{text:?}");
    }
    let Ok(req) = Request::new("GET", &format!("/api/runs?{text}")) else {
        return;
    };
    let f = match parse(&req, &["api_key"]) {
        Ok(f) => f,
        Err(e) => {
            assert_eq!((e.status(), e.code()), (400, "invalid_parameter"), "{e:?}");
            assert!(!e.message().is_empty(), "an empty message");
            let msg = e.message();
            let named = req.query.iter().any(|(k, _)| msg.contains(k.as_str()));
            assert!(named, "the error names no parameter of the query: {msg}");
            return;
        }
    };
    assert!((1..=MAX_PAGE).contains(&f.limit), "limit {}", f.limit);
    if let (Some(s), Some(u)) = (f.since, f.until) {
        assert!(s <= u, "since after until");
    }
    for n in [&f.function, &f.tool].into_iter().flatten() {
        assert!(
            !n.is_empty() && n.len() <= 256,
            "a name of {} bytes",
            n.len()
        );
    }
    let given = |k: &'static str| req.query_one(k).ok().flatten().filter(|v| !v.is_empty());
    for (k, _) in &req.query {
        assert!(
            FILTER_PARAMS.contains(&k.as_str()) || k == "api_key",
            "unknown {k:?} accepted"
        );
        assert!(req.query_one(k).is_ok() || k == "api_key", "{k:?} twice");
    }
    let set = [
        ("program", f.program.is_some()),
        ("function", f.function.is_some()),
        ("tool", f.tool.is_some()),
        ("origin", f.origin.is_some()),
        ("state", f.state.is_some()),
        ("since", f.since.is_some()),
        ("until", f.until.is_some()),
        ("cursor", f.before.is_some()),
    ];
    for (k, is_set) in set {
        assert_eq!(given(k).is_some(), is_set, "{k}");
    }
    if given("limit").is_none() {
        assert_eq!(f.limit, DEFAULT_PAGE);
    }
    if let Some(c) = f.before {
        let text = given("cursor").unwrap_or_default();
        assert_eq!(text.parse::<Cursor>(), Ok(c), "{text:?}");
        assert_eq!(c.to_string().parse::<Cursor>(), Ok(c));
    }
}

/// Length of an output frame's header (tag, 4-byte length), as
/// `state/output.rs` writes it.
const FRAME_HEAD: usize = 5;

/// The reads of an output file, one a call: the frames, the position.
type Reads = Vec<(Vec<output::Frame>, output::Pos)>;

/// A run's output frames, the reader of stored state that every output
/// reader goes through (`state::output::read_frames`: the follower, the
/// whole output, the run's page, the database copy). The input is the
/// bytes of an output file, met both ways a reader meets them: as a file
/// (read whole, and followed as it grows in three pieces), and as the
/// output kept in a run's record (`Inline`, through its base64 decoding
/// in JSON, and in a runs.log line read as a `RunRecord`, then written
/// back and read again); also the input itself as a record's `"Output"`
/// text. Each read goes on from the position the last returned until one
/// does not move on, as a follower does.
///
/// Invariants: a position never goes back; a call returns at most
/// `BATCH` bytes of data and `BATCH / 5 + 2` frames; a call that returns
/// frames moves on (else a reader looping until an empty batch never
/// ends), and after an empty batch no call returns frames (a reader may
/// stop at one); the data of all calls is at most the input's length and
/// the number of calls at most twice it; the frames, merged, are the
/// plain reading of the file ([`output_model`]), and so is `whole`; the
/// file and the record read alike, call for call (both are read through
/// `Stored`'s positioned reads: nothing may differ); a record keeps its
/// output through a write and a read.
pub fn output_frames(data: &[u8]) {
    use base64::Engine as _;
    use output::{whole, Inline, Pos, Stored};
    use serde_json::Value;
    use std::fs::File;
    use std::io::Write as _;
    use trigd::testing::state::RunRecord;

    let want = output_model(data);
    let whole_want = whole_of(&want);

    // An output file, read whole.
    let path = scratch("file");
    std::fs::write(&path, data).expect("write the output file");
    let file = Stored::File(File::open(&path).expect("open the output file"));
    let mut by_file = Reads::new();
    follow(&file, Pos::default(), data.len(), &mut by_file);
    assert_eq!(merged(&by_file), want, "the frames of the file");

    // The same file followed while it grows, in three pieces.
    let path = scratch("grow");
    let mut w = File::create(&path).expect("create the output file");
    let growing = Stored::File(File::open(&path).expect("open the output file"));
    let first = data
        .first()
        .map_or(0, |b| data.len() * usize::from(*b) / 256);
    let last = data
        .last()
        .map_or(0, |b| (data.len() - first) * usize::from(*b) / 256);
    let (mut pos, mut from, mut grown) = (Pos::default(), 0, Reads::new());
    for to in [first, first + last, data.len()] {
        w.write_all(&data[from..to])
            .expect("append to the output file");
        from = to;
        pos = follow(&growing, pos, data.len(), &mut grown);
    }
    assert_eq!(merged(&grown), want, "the frames of the file as it grew");
    for name in ["file", "grow"] {
        let _ = std::fs::remove_file(scratch(name));
    }
    output_live(data);

    // Kept in a record: base64 in JSON.
    let b64 = base64::engine::general_purpose::STANDARD.encode(data);
    let inline: Inline =
        serde_json::from_value(Value::String(b64.clone())).expect("base64 of any bytes reads");
    assert_eq!(inline.frames(), data);
    let inline = Stored::Inline(inline);
    let mut by_inline = Reads::new();
    follow(&inline, Pos::default(), data.len(), &mut by_inline);
    assert_eq!(by_inline, by_file, "the record reads as the file");
    // Read from memory: from the file, the same reads (just checked)
    // cost a system call a frame, 13,000 of them in 64 KiB.
    assert_eq!(whole(&inline), whole_want, "the whole output");

    // In a runs.log line, up to RECORD_INPUT bytes: the reads are those
    // just checked; what is new is the line's parsing, whose cost grows
    // with the input and under AddressSanitizer on a loaded machine
    // approached libFuzzer's -timeout of 1 s.
    if data.len() > RECORD_INPUT {
        return;
    }
    let rec: RunRecord =
        serde_json::from_str(&record_line(Value::String(b64))).expect("a run's record");
    let kept = rec.output.clone().expect("its output");
    assert_eq!(kept.frames(), data);
    let mut by_record = Reads::new();
    follow(
        &Stored::Inline(kept),
        Pos::default(),
        data.len(),
        &mut by_record,
    );
    assert_eq!(by_record, by_file, "the record's line reads as the file");
    let line = serde_json::to_string(&rec).expect("a record writes");
    let again: RunRecord = serde_json::from_str(&line).expect("a written record reads");
    assert!(again.output == rec.output, "its output read back the same");

    // The input itself as a record's "Output" text, when it can be base64
    // (else the record is refused before anything is read).
    let base64_text = |b: &u8| b.is_ascii_alphanumeric() || b"+/=".contains(b);
    if !data.iter().all(base64_text) {
        return;
    }
    let text = String::from_utf8_lossy(data).into_owned();
    if let Ok(rec) = serde_json::from_str::<RunRecord>(&record_line(Value::String(text))) {
        let kept = rec.output.expect("an output given");
        let bytes = kept.frames().to_vec();
        let mut reads = Reads::new();
        follow(
            &Stored::Inline(kept),
            Pos::default(),
            bytes.len(),
            &mut reads,
        );
        assert_eq!(
            merged(&reads),
            output_model(&bytes),
            "the frames of a record"
        );
    }
}

/// The input as a script for trigd's output writer (`OutputFile`), with a
/// follower reading the file between its writes, so that reads meet open
/// frames that grow and are closed after they were read (which bytes as
/// they are never show). Byte 1 picks the bound on each stream (7, 100,
/// 5,000 bytes, 1 MiB); then each byte is an operation, bit 0 its stream:
/// bits 1-2 = 0, push the next `(byte >> 3) + 1` bytes; 1, push the next
/// byte `((byte >> 3) + 1) * 512` times (past `INLINE_MAX`, and a batch in
/// a few); 2, read; 3, write out what is held (`release`). At the end (or
/// after 1,024 operations, or once 256 KiB were pushed) the run
/// finishes and the follower reads what is left, from the
/// file or else from what the record would keep. The follower's frames,
/// merged, are what was pushed within the bounds, each stream's mark
/// where it passed its bound; each read keeps `follow`'s invariants.
fn output_live(data: &[u8]) {
    // Enough to pass a batch several times, and few enough to stay far
    // within libFuzzer's limits (a 64 KiB input is 64 Ki operations; with
    // 3 MiB and pushes of up to 64 KiB, AddressSanitizer's quarantine of
    // freed memory passed -rss_limit_mb=256 in the first seconds).
    // Passing `MAX_FRAME` (1 MiB of a stream) is left out for that.
    const LIVE_OPS: usize = 1024;
    const LIVE_BYTES: usize = 256 << 10;
    use output::{Frame, OutputFile, Pos, Stored, Stream};
    let Some((&first, mut rest)) = data.split_first() else {
        return;
    };
    let max = [7, 100, 5000, 1 << 20][usize::from(first & 3)];
    let path = scratch("live");
    let _ = std::fs::remove_file(&path);
    let out = OutputFile::new(&path, max);
    let (mut want, mut kept, mut cut) = (Vec::new(), [0usize; 2], [false; 2]);
    let (mut file, mut pos, mut reads) = (None, Pos::default(), Reads::new());
    let mut pushed = 0;
    for _ in 0..LIVE_OPS {
        let Some((&op, tail)) = rest.split_first() else {
            break;
        };
        rest = tail;
        if pushed > LIVE_BYTES {
            break;
        }
        let (stream, i) = match op & 1 {
            0 => (Stream::Stdout, 0),
            _ => (Stream::Stderr, 1),
        };
        let n = usize::from(op >> 3) + 1;
        let piece = match (op >> 1) & 3 {
            0 => {
                let (piece, tail) = rest.split_at(n.min(rest.len()));
                rest = tail;
                piece.to_vec()
            }
            1 => {
                let Some((&b, tail)) = rest.split_first() else {
                    break;
                };
                rest = tail;
                vec![b; n * 512]
            }
            2 => {
                if file.is_none() {
                    file = output::open(&path);
                }
                if let Some(f) = &file {
                    pos = follow(f, pos, pushed, &mut reads);
                }
                continue;
            }
            _ => {
                out.release();
                continue;
            }
        };
        out.push(stream, &piece);
        pushed += piece.len();
        if !cut[i] && !piece.is_empty() {
            let take = piece.len().min(max - kept[i]);
            want.push(Frame::Data(stream, piece[..take].to_vec()));
            kept[i] += take;
            if take < piece.len() {
                cut[i] = true;
                want.push(Frame::Truncated(stream));
            }
        }
    }
    let inline = out.finish();
    if file.is_none() {
        file = output::open(&path).or(inline.map(Stored::Inline));
    }
    if let Some(f) = &file {
        follow(f, pos, pushed, &mut reads);
    }
    assert_eq!(
        merged(&reads),
        merge(want),
        "what the follower read of a run"
    );
    let _ = std::fs::remove_file(&path);
}

/// The largest input [`output_frames`] also reads in a runs.log line.
const RECORD_INPUT: usize = 16 << 10;

/// A scratch file of this process for [`output_frames`], in memory when
/// `/dev/shm` is there: rewritten on ext4 (truncated, written, closed), a
/// file is flushed to disk each time, and the target ran 260 inputs a
/// second (2,000 in 7.7 s, 1 s of it CPU); on tmpfs 2,000 take 0.4 s.
fn scratch(name: &str) -> PathBuf {
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    dir.join(format!("trigd-fuzz-output-{}-{name}", std::process::id()))
}

/// A runs.log line of an ended run whose record keeps `output`.
fn record_line(output: serde_json::Value) -> String {
    serde_json::json!({
        "Run": "fuzz-0123456789abcdef0123456789abcdef",
        "State": "finished",
        "Function": "f",
        "CreatedAt": "2026-11-27T00:00:00.000Z",
        "Output": output,
    })
    .to_string()
}

/// Read `file` from `pos` as a follower does, each call from the position
/// the last one returned, until one does not move on; each call's result
/// appended to `reads` and checked (the invariants of [`output_frames`];
/// `len`: the input's length). The position reached.
fn follow(
    file: &output::Stored,
    mut pos: output::Pos,
    len: usize,
    reads: &mut Reads,
) -> output::Pos {
    use output::{read_frames, BATCH};
    let mut empty = false;
    for n in 0.. {
        assert!(n <= 2 * len + 2, "{n} calls and no end in {len} bytes");
        let (frames, next) = read_frames(file, pos);
        assert!(next >= pos, "back from {pos:?} to {next:?}");
        let bytes: usize = frames.iter().map(data_len).sum();
        assert!(bytes <= BATCH, "{bytes} bytes in one call");
        let most = BATCH / FRAME_HEAD + 2;
        assert!(frames.len() <= most, "{} frames in one call", frames.len());
        if !frames.is_empty() {
            assert!(next > pos, "frames without moving on from {pos:?}");
            assert!(!empty, "frames after an empty batch, at {pos:?}");
        }
        empty |= frames.is_empty();
        reads.push((frames, next));
        if next == pos {
            break;
        }
        pos = next;
    }
    let total: usize = reads.iter().flat_map(|(f, _)| f).map(data_len).sum();
    assert!(total <= len, "{total} bytes of data read from {len}");
    pos
}

fn data_len(f: &output::Frame) -> usize {
    match f {
        output::Frame::Data(_, d) => d.len(),
        output::Frame::Truncated(_) => 0,
    }
}

/// The frames of `reads` as a reader shows them: the data of one stream
/// in a row joined, empty data dropped.
fn merged(reads: &Reads) -> Vec<output::Frame> {
    merge(reads.iter().flat_map(|(f, _)| f).cloned())
}

fn merge(frames: impl IntoIterator<Item = output::Frame>) -> Vec<output::Frame> {
    use output::Frame;
    let mut out: Vec<Frame> = Vec::new();
    for f in frames {
        if let Frame::Data(t, d) = &f {
            if d.is_empty() {
                continue;
            }
            if let Some(Frame::Data(s, acc)) = out.last_mut() {
                if s == t {
                    acc.extend_from_slice(d);
                    continue;
                }
            }
        }
        out.push(f);
    }
    out
}

/// The frames of the output file `b`, read the plain way, each frame
/// whole and at once, as `state/output.rs`'s module doc describes the
/// format: closed frames `o`/`e` (data), `O`/`E` (a truncation mark, no
/// data), an open frame `p`/`q` running to the end; the first damaged
/// frame (unknown tag, a length over `MAX_FRAME`, a mark with data) or
/// one cut off ends it. Merged as [`merged`].
pub fn output_model(b: &[u8]) -> Vec<output::Frame> {
    use output::{Frame, Stream, MAX_FRAME};
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(head) = b.get(at..at + FRAME_HEAD) {
        let stream = match head[0] {
            b'o' | b'O' | b'p' => Stream::Stdout,
            b'e' | b'E' | b'q' => Stream::Stderr,
            _ => break,
        };
        let body = at + FRAME_HEAD;
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]);
        match head[0] {
            b'p' | b'q' => {
                out.push(Frame::Data(stream, b[body..].to_vec()));
                break;
            }
            _ if len > MAX_FRAME || b.len() - body < len as usize => break,
            b'O' | b'E' if len != 0 => break,
            b'O' | b'E' => out.push(Frame::Truncated(stream)),
            _ => out.push(Frame::Data(stream, b[body..body + len as usize].to_vec())),
        }
        at = body + len as usize;
    }
    merge(out)
}

/// The whole output `frames` make, each stream apart.
fn whole_of(frames: &[output::Frame]) -> output::Whole {
    use output::{Frame, Stream};
    let mut w = output::Whole::default();
    for f in frames {
        match f {
            Frame::Data(Stream::Stdout, d) => w.stdout.extend_from_slice(d),
            Frame::Data(Stream::Stderr, d) => w.stderr.extend_from_slice(d),
            Frame::Truncated(Stream::Stdout) => w.stdout_truncated = true,
            Frame::Truncated(Stream::Stderr) => w.stderr_truncated = true,
        }
    }
    w
}

/// The seeds of `output_frames` (`seeds/output_frames/`), by name: what
/// trigd's own writer (`OutputFile`) makes of a few runs' output, and
/// those damaged as a crash or a bad disk would. `tests/random.rs` checks
/// that the committed seeds are these (`FUZZ_WRITE_SEEDS=1 cargo test
/// output_frames_seeds` rewrites them).
pub fn output_seeds() -> Vec<(&'static str, Vec<u8>)> {
    use base64::{engine::general_purpose::STANDARD, Engine as _};
    use output::{Stream::Stderr as E, Stream::Stdout as O, BATCH, MAX_FRAME};
    let mut lines: Vec<(output::Stream, Vec<u8>)> = Vec::new();
    for i in 0..20 {
        let s = if i % 3 == 0 { E } else { O };
        lines.push((s, format!("line {i}\n").into_bytes()));
    }
    let lines: Vec<(output::Stream, &[u8])> = lines.iter().map(|(s, l)| (*s, &l[..])).collect();
    let utf8 = written(
        "utf8",
        1 << 20,
        &[
            (O, b"h\xc3"),
            (O, b"\xa9llo w\xe2\x82"),
            (E, b"warn: \xf0\x9f"),
            (O, b"\xac\n"),
            (E, b"\x98\x80\n"),
        ],
        false,
    );
    let interleaved = written("lines", 1 << 20, &lines, false);
    let truncated = written(
        "truncated",
        16,
        &[
            (O, b"0123456789"),
            (E, b"e1\n"),
            (O, b"abcdefXYZ"),
            (E, &[b'e'; 20]),
            (O, b"lost"),
        ],
        false,
    );
    let bytes: Vec<u8> = (0..500u32).map(|i| b'a' + (i % 26) as u8).collect();
    let one_by_one: Vec<(output::Stream, &[u8])> = bytes
        .chunks(1)
        .map(|b| (O, b))
        .chain([(E, &b"!"[..])])
        .collect();
    let running = written("running", 1 << 20, &one_by_one, true);
    let (big, more) = (vec![b'x'; 3000], vec![b'y'; 2000]);
    let spilled = written(
        "spilled",
        1 << 20,
        &[(O, &big), (E, &more), (O, b"end\n")],
        false,
    );
    let long: Vec<u8> = (0..BATCH as u32 + 500)
        .map(|i| b' ' + (i % 90) as u8)
        .collect();
    let pieces: Vec<(output::Stream, &[u8])> = long
        .chunks(4096)
        .map(|c| (O, c))
        .chain([(E, &b"done\n"[..]), (O, &b"tail\n"[..])])
        .collect();
    let over_batch = written("over-batch", 1 << 20, &pieces, false);

    let frame = |tag: u8, len: u32, data: &[u8]| {
        let mut f = vec![tag];
        f.extend_from_slice(&len.to_be_bytes());
        f.extend_from_slice(data);
        f
    };
    let mut bad_tag = utf8.clone();
    let second = FRAME_HEAD + u32::from_be_bytes(utf8[1..5].try_into().unwrap()) as usize;
    bad_tag[second] = b'x';
    let mut mark_with_bytes = frame(b'O', BATCH as u32 + 10, &vec![b'm'; BATCH + 10]);
    mark_with_bytes.extend(frame(b'e', 1, b"b"));
    let mut open_in_middle = frame(b'q', 0, b"abc");
    open_in_middle.extend_from_slice(&interleaved);
    let mut empty_frames = frame(b'o', 0, b"").repeat(BATCH / FRAME_HEAD + 100);
    empty_frames.extend(frame(b'e', 1, b"!"));
    vec![
        ("utf8-split", utf8.clone()),
        ("base64-text", STANDARD.encode(&utf8).into_bytes()),
        ("interleaved", interleaved.clone()),
        ("truncated", truncated),
        ("running-open-frame", running),
        ("ended-file-open-frame", spilled),
        ("over-batch", over_batch.clone()),
        ("torn-header", interleaved[..second + 2].to_vec()),
        ("torn-body", over_batch[..FRAME_HEAD + BATCH + 100].to_vec()),
        ("torn-mark", frame(b'E', 0, b"")[..3].to_vec()),
        ("bad-tag", bad_tag),
        ("length-over-max", frame(b'o', MAX_FRAME + 1, b"0123456789")),
        ("mark-with-bytes", mark_with_bytes),
        ("open-in-middle", open_in_middle),
        ("empty-frames", empty_frames),
        ("empty", Vec::new()),
    ]
}

/// The bytes trigd's writer leaves for `pieces` (at most `max` bytes a
/// stream): with `running`, the file as a reader finds it while the run
/// executes (written out, its last frame open); else as the run's end
/// leaves them: in its record while small (closed frames), else the file.
fn written(name: &str, max: usize, pieces: &[(output::Stream, &[u8])], running: bool) -> Vec<u8> {
    let path = scratch(&format!("seed-{name}"));
    let _ = std::fs::remove_file(&path);
    let out = output::OutputFile::new(&path, max);
    for (s, d) in pieces {
        out.push(*s, d);
    }
    let kept = if running {
        out.release();
        None
    } else {
        out.finish()
    };
    let bytes = match kept {
        Some(kept) => kept.frames().to_vec(),
        None => std::fs::read(&path).expect("the output file"),
    };
    let _ = std::fs::remove_file(&path);
    bytes
}
