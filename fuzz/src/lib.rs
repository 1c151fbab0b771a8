//! Fuzz harnesses for trigd's parsers, over trigd's own sources.
//!
//! trigd is a binary crate, so there is no library to link against. This
//! crate stands in for `src/main.rs`: `build.rs` lists the modules that
//! `main.rs` declares, each with a `#[path]` to the real file, so
//! `crate::config`, `crate::http`, … resolve exactly as in trigd and nothing
//! is copied. trigd itself only had to expose two private items (see
//! README.md): `config::load_str` and `invoke::named_values`, both under
//! `cfg(fuzzing)`.
//!
//! Each harness takes arbitrary bytes, must never panic, and asserts the
//! parser's invariants. The `fuzz_targets/` binaries feed them from
//! libFuzzer (`cargo +nightly fuzz run <target>`); `tests/random.rs` feeds
//! them random and mutated inputs on stable (`cargo test`).
#![allow(dead_code, unused_imports, clippy::all)]
#![deny(unsafe_code)]

include!(concat!(env!("OUT_DIR"), "/trigd_modules.rs"));

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
    assert_eq!(req.method, http::Method::parse(method));
    for s in &req.segments {
        assert!(
            !s.is_empty() && !s.contains('/') && s != "." && s != "..",
            "{s:?}"
        );
    }
    let logged = req.log_target();
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
/// `config::hooks::parse_file` and `config::compile_hook`, then a request
/// (the part after the first NUL: Content-Type line, body) read and every
/// compiled rule evaluated the webhook way. No panic; every error names
/// something.
pub fn hooks_file(data: &[u8]) {
    let (file, req) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let text = String::from_utf8_lossy(file);
    let defs = match config::hooks::parse_file(&text) {
        Ok(defs) => defs,
        Err(e) => return assert!(!e.msg.is_empty()),
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
        let hook = match config::compile_hook(&def, Path::new("."), &server) {
            Ok(h) => h,
            Err(msg) => {
                assert!(msg.contains("option"), "{msg}");
                continue;
            }
        };
        let (config::Dialect::Webhook(reading), config::Values::Hook(values)) =
            (&hook.dialect, &hook.values)
        else {
            panic!("a hook is read the webhook way and makes a hook's values");
        };
        let remote = Some("127.0.0.1:1".parse().unwrap());
        let Ok(mut wr) = receive::webhook::WebhookRequest::new(
            "POST", remote, &headers, &[], body, reading.content_type.as_deref(), &[],
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
