//! `openapi.json` against the code: every route of the URL table in
//! `src/http/routes.rs` is described, every path described is routed, every
//! error code trigd can send is in the `Code` enum, and `GET /openapi.json`
//! serves the document byte for byte.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use crate::util::*;

/// Methods an OpenAPI path item can describe.
const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

fn repo_file(rel: &str) -> String {
    let path = format!("{}/{rel}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

fn document() -> Value {
    serde_json::from_str(&repo_file("openapi.json"))
        .unwrap_or_else(|e| panic!("openapi.json is not JSON: {e}"))
}

/// One arm of the URL table: its methods (lower case; empty for `_`, any
/// method) and its path shape, `{}` for a variable segment, a trailing
/// `{..}` for a rest pattern.
#[derive(Debug)]
struct Route {
    methods: Vec<String>,
    shape: String,
    line: String,
}

/// The arms `(METHODS, [SEGMENTS]) =>` of `routes::handle`.
fn routes() -> Vec<Route> {
    let text = repo_file("src/http/routes.rs");
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        // `(METHODS, [SEGMENTS])` then an optional guard, then `=>`.
        let Some(arm) = line.strip_prefix('(') else {
            continue;
        };
        if !line.contains("=>") {
            continue;
        }
        let Some((methods, rest)) = arm.split_once(", [") else {
            continue;
        };
        let Some((segs, _)) = rest.split_once(']') else {
            continue;
        };
        let methods: Vec<String> = methods
            .split('|')
            .map(|m| m.trim().trim_matches('"').to_ascii_lowercase())
            .filter(|m| m != "_" && m != "head")
            .collect();
        let mut shape = String::new();
        for seg in segs.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            shape.push('/');
            if let Some(lit) = seg.strip_prefix('"') {
                shape.push_str(lit.trim_end_matches('"'));
            } else if seg.ends_with("..") {
                shape.push_str("{..}");
            } else {
                shape.push_str("{}");
            }
        }
        if shape.is_empty() {
            shape.push('/');
        }
        out.push(Route {
            methods,
            shape,
            line: line.to_string(),
        });
    }
    assert!(
        out.len() >= 7,
        "too few routes found in src/http/routes.rs: {out:?}"
    );
    out
}

/// `/tools/{tool}/endpoints` → `/tools/{}/endpoints`.
fn shape_of(path: &str) -> String {
    let mut out = String::new();
    let mut in_var = false;
    for c in path.chars() {
        match c {
            '{' => {
                in_var = true;
                out.push_str("{}");
            }
            '}' => in_var = false,
            _ if !in_var => out.push(c),
            _ => {}
        }
    }
    out
}

fn matches(route: &str, doc_path: &str) -> bool {
    match route.strip_suffix("{..}") {
        Some(prefix) => doc_path.starts_with(prefix),
        None => route == doc_path,
    }
}

#[test]
fn every_route_is_described() {
    let doc = document();
    assert_eq!(doc["openapi"], "3.0.3");
    let paths = doc["paths"].as_object().expect("paths is an object");
    for route in routes() {
        let described: Vec<(&String, &Value)> = paths
            .iter()
            .filter(|(p, _)| matches(&route.shape, &shape_of(p)))
            .collect();
        assert!(
            !described.is_empty(),
            "route `{}` ({}) is not in openapi.json",
            route.line,
            route.shape
        );
        let ops: BTreeSet<&str> = described
            .iter()
            .flat_map(|(_, item)| METHODS.iter().copied().filter(|m| item.get(*m).is_some()))
            .collect();
        assert!(!ops.is_empty(), "{} has no operation", route.shape);
        for m in &route.methods {
            assert!(
                ops.contains(m.as_str()),
                "route `{}`: method {m} is not described for {}",
                route.line,
                route.shape
            );
        }
    }
}

#[test]
fn every_described_path_is_routed() {
    let routes = routes();
    let doc = document();
    for path in doc["paths"].as_object().unwrap().keys() {
        // Hooks files are routed before the table, under a configured prefix.
        if path == "/hooks/{id}" {
            assert!(repo_file("src/http/routes.rs").contains("compat::webhook::route("));
            continue;
        }
        let shape = shape_of(path);
        assert!(
            routes.iter().any(|r| matches(&r.shape, &shape)),
            "openapi.json describes {path}, which src/http/routes.rs does not route"
        );
    }
}

/// The codes in `ApiError::code` (the HTTP server's own answers come from it
/// too).
fn codes_in_source() -> BTreeSet<String> {
    let mut codes = BTreeSet::new();
    let http = repo_file("src/http/mod.rs");
    let start = http.find("pub fn code(&self)").expect("ApiError::code");
    let end = start + http[start..].find("\n    }\n").expect("end of code()");
    for line in http[start..end].lines() {
        if let Some((_, rhs)) = line.split_once("=> \"") {
            codes.insert(rhs.trim_end_matches(['"', ',']).to_string());
        }
    }
    assert!(codes.len() > 25, "{codes:?}");
    codes
}

#[test]
fn every_error_code_is_in_the_code_enum() {
    let doc = document();
    let listed: BTreeSet<String> = doc["components"]["schemas"]["Error"]["properties"]["Code"]
        ["enum"]
        .as_array()
        .expect("Code enum")
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    for code in codes_in_source() {
        assert!(
            listed.contains(&code),
            "code {code} is missing from Error.Code"
        );
    }
}

#[test]
fn openapi_json_is_served() {
    let (_dir, t) = serve("openapi-served", "", &[]);
    let r = t.get("/openapi.json");
    r.status_is(200);
    r.check_eq(
        r.header("Content-Type"),
        Some("application/json"),
        "Content-Type",
    );
    r.check_eq(r.json(), document(), "served document");
    // Minified: no white space between tokens, so no line breaks at all
    // (a line break inside a string is written `\n`).
    let body = r.text();
    r.check(!body.contains('\n'), "served minified");
    r.check(
        body.len() * 5 < repo_file("openapi.json").len() * 4,
        "at least a fifth smaller",
    );
}

/// The answer's described in `doc` for `method` on the concrete `path`
/// (a template's `{..}` matches one segment) and `status`, `$ref`s
/// followed; `None` when the path, method or status is not described.
fn described<'d>(doc: &'d Value, method: &str, path: &str, status: u16) -> Option<&'d Value> {
    let segs: Vec<&str> = path.split('?').next()?.split('/').collect();
    let (_, item) = doc["paths"].as_object()?.iter().find(|(tpl, _)| {
        let t: Vec<&str> = tpl.split('/').collect();
        t.len() == segs.len()
            && t.iter()
                .zip(&segs)
                .all(|(t, s)| t == s || (t.starts_with('{') && !s.is_empty()))
    })?;
    let answer = item
        .get(method)?
        .get("responses")?
        .get(status.to_string())?;
    Some(resolve(doc, answer))
}

/// `value`, or what its `$ref` (`#/components/...`) points to.
fn resolve<'d>(doc: &'d Value, value: &'d Value) -> &'d Value {
    match value["$ref"].as_str().and_then(|r| r.strip_prefix('#')) {
        Some(pointer) => doc.pointer(pointer).expect("a $ref that resolves"),
        None => value,
    }
}

/// Request headers of a sample request.
type Headers<'a> = &'a [(&'a str, &'a str)];

/// A server with a hooks file, an API key, a signed-in member, and a run.
fn sampled_server() -> (TestDir, Trigd, String, String) {
    let dir = TestDir::new("openapi-answers");
    let config = crate::ui::ui_config("hooks_files = [\"hooks.json\"]");
    let key = format!(
        "\n[[api_keys]]\nname = \"all\"\nsha256 = \"{}\"\n",
        sha256_hex(KEY)
    );
    dir.write("config.toml", &(config + &key));
    dir.write(
        "programs/inv.toml",
        "id = 1\nname = \"inv\"\nworkspace = \"ops\"\n\n[[functions]]\nname = \"list\"\n\
         command = [\"printf\", \"[1,2]\"]\n\n[[functions]]\nname = \"add\"\n\
         command = [\"printf\", \"%s\", \"{item}\"]\n[functions.webhook]\noutputs = [\"item\"]\n",
    );
    dir.write(
        "hooks.json",
        r#"[{"id": "hello", "execute-command": "/bin/echo"},
            {"id": "ruled", "execute-command": "/bin/true", "trigger-rule":
              {"match": {"type": "value", "value": "yes", "parameter": {"source": "header", "name": "X-Go"}}}}]"#,
    );
    let t = Trigd::start(&dir);
    let run = t.post(&format!(
        "/api?api_key={KEY}&program_id=1&function=add&variables=x"
    ));
    let run = run.run_id(&run.ok());
    let session = crate::ui::login(&t, "alice");
    (dir, t, run, session)
}

/// For sample requests on every surface, the answer's status is described
/// for its route and method, and its content type is one the description
/// lists for that status (a status described without content, or an empty
/// answer without a type, is not checked further). What schemathesis checks at scale
/// (`tests/schemathesis.sh`), on the answers that once disagreed.
#[test]
fn answers_have_a_described_status_and_content_type() {
    let doc = document();
    let (_dir, t, run, session) = sampled_server();
    let cookie = format!("trigd_session={session}");
    let auth = format!("Bearer {KEY}");
    let with_session: &[(&str, &str)] = &[("Cookie", &cookie)];
    let with_key: &[(&str, &str)] = &[("Authorization", &auth)];
    let other_instance = "/runs/web1-4f1c0d2e9a8b7c6d5e4f3a2b1c0d9e8f";
    let samples: Vec<(&str, String, Headers)> = vec![
        ("get", "/hooks/nope".into(), &[]),
        ("get", "/hooks/nope".into(), &[("Idempotency-Key", "a")]),
        // The prefix alone and ids no hook can have: still webhook's words.
        ("get", "/hooks/".into(), &[]),
        ("post", "/hooks/a%2Fb".into(), &[]),
        ("get", "/hooks/..".into(), &[]),
        ("get", "/hooks/hello".into(), &[]),
        // A malformed key is refused even where the rule ignores the request.
        ("post", "/hooks/ruled".into(), &[("Idempotency-Key", "")]),
        ("post", "/hooks/ruled".into(), &[]),
        ("get", "/".into(), &[]),
        ("get", "/".into(), &[("Accept", "text/html")]),
        ("get", "/".into(), with_session),
        ("get", "/runs?program=%2B1".into(), with_session),
        ("get", "/runs?page=000001".into(), with_session),
        ("get", format!("/runs/{run}"), with_session),
        ("get", other_instance.into(), with_session),
        ("post", format!("{other_instance}/cancel"), with_session),
        ("get", format!("/api/runs/{run}"), with_key),
        ("get", format!("/api/runs/{run}/output"), with_key),
        (
            "get",
            format!("/api/runs/{run}/output?follow=true"),
            with_key,
        ),
        (
            "post",
            "/api?program_id=1&function=add&variables=x&stream=true".into(),
            with_key,
        ),
    ];
    for (method, path, headers) in &samples {
        let r = t.request(&method.to_uppercase(), path, headers, b"");
        let what = format!("{method} {path} {headers:?}: {}", r.status);
        // `/hooks/` is the route of hook id "" (no template matches it).
        let lookup = match path.len() > 1 && path.ends_with('/') {
            true => format!("{path}x"),
            false => path.clone(),
        };
        let answer = described(&doc, method, &lookup, r.status)
            .unwrap_or_else(|| r.fail(format!("{what} is not described")));
        let Some(content) = answer.get("content").and_then(Value::as_object) else {
            continue;
        };
        if r.body.is_empty() && r.header("Content-Type").is_none() {
            continue;
        }
        let media = r
            .header("Content-Type")
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap();
        r.check(
            content.contains_key(media.trim()),
            format!(
                "{what}: Content-Type {media} is not among {:?}",
                content.keys()
            ),
        );
    }
    // Methods a path is not described for are refused, not "not found".
    t.request("TRACE", "/", &[], b"")
        .err(405, "method_not_allowed");
}

/// The `text/event-stream` answers are described by a schema of one event
/// (`event`, `data`), which every event they send matches: the event names
/// are in its enum and each `data` is one line of JSON.
#[test]
fn event_streams_match_the_described_event() {
    let doc = document();
    let (_dir, t, run, _) = sampled_server();
    let auth = format!("Bearer {KEY}");
    for (method, path) in [
        ("get", format!("/api/runs/{run}/output?follow=true")),
        (
            "post",
            "/api?program_id=1&function=add&variables=x&stream=true".to_string(),
        ),
    ] {
        let r = t.request(
            &method.to_uppercase(),
            &path,
            &[("Authorization", &auth)],
            b"",
        );
        r.status_is(200);
        let answer = described(&doc, method, &path, 200).expect("200 described");
        let schema = resolve(&doc, &answer["content"]["text/event-stream"]["schema"]);
        r.check_eq(schema["type"].as_str(), Some("object"), "one event's type");
        let names = schema["properties"]["event"]["enum"].as_array().cloned();
        let names = names.unwrap_or_else(|| r.fail(format!("no event names in {schema}")));
        let mut events = 0;
        for block in r.text().split("\n\n").filter(|b| !b.trim().is_empty()) {
            if block.starts_with(':') {
                continue;
            }
            let event = block.lines().find_map(|l| l.strip_prefix("event: "));
            let data = block.lines().find_map(|l| l.strip_prefix("data: "));
            let (Some(event), Some(data)) = (event, data) else {
                r.fail(format!("{path}: an event without event or data: {block:?}"));
            };
            r.check(
                names.contains(&json!(event)),
                format!("{path}: event {event}"),
            );
            r.check(
                serde_json::from_str::<Value>(data).is_ok(),
                format!("{path}: data of {event} is not one line of JSON: {data}"),
            );
            events += 1;
        }
        r.check(events >= 2, format!("{path}: output and end events"));
    }
}
