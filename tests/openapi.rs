//! `openapi.json` against the code: every route of the URL table in
//! `src/routes.rs` is described, every path described is routed, every
//! error code trigd can send is in the `Code` enum, and `GET /openapi.json`
//! serves the document byte for byte.

use std::collections::BTreeSet;

use serde_json::Value;

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
    let text = repo_file("src/routes.rs");
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
        "too few routes found in src/routes.rs: {out:?}"
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
            assert!(repo_file("src/routes.rs").contains("hooks::call("));
            continue;
        }
        let shape = shape_of(path);
        assert!(
            routes.iter().any(|r| matches(&r.shape, &shape)),
            "openapi.json describes {path}, which src/routes.rs does not route"
        );
    }
}

/// The codes in `ApiError::code` (the HTTP server's own answers come from it
/// too).
fn codes_in_source() -> BTreeSet<String> {
    let mut codes = BTreeSet::new();
    let http = repo_file("src/http.rs");
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
}
