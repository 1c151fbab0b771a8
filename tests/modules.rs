//! The module graph of `src/` has no cycles: a module never depends, through
//! other modules, on itself. Reads the sources (not the binary): every
//! `use` and every `crate::`/`super::` path outside tests is an edge to the
//! module that defines what it names. A name re-exported by `pub use`
//! counts as a use of the module that defines it (so `crate::config::load`
//! is a use of `config::validate`); the re-export itself, and `mod`
//! declarations, are not edges.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// Module path (`config::validate`) → source text, without test code.
fn modules(dir: &Path, prefix: &[String], out: &mut BTreeMap<Vec<String>, String>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        if path.is_dir() {
            let mut p = prefix.to_vec();
            p.push(name);
            modules(&path, &p, out);
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") || name.ends_with("_tests") {
            continue;
        }
        let text = fs::read_to_string(&path).unwrap();
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
        let code: String = code
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let mut m = prefix.to_vec();
        if !matches!(name.as_str(), "mod" | "main" | "lib") {
            m.push(name);
        }
        out.insert(m, code);
    }
}

/// Expand `a::{b, c::{d, e}}` into `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        return vec![tree.split(" as ").next().unwrap_or("").trim().to_string()];
    };
    let head = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let (mut depth, mut start, mut parts) = (0, 0, Vec::new());
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.trim().is_empty())
        .flat_map(expand)
        .map(|p| format!("{head}{p}"))
        .collect()
}

/// Names re-exported by `pub use`: (module, name) → the module defining it.
type Reexports = BTreeMap<(Vec<String>, String), Vec<String>>;

/// The module a path used in module `from` names, if it is one of ours.
fn target(
    from: &[String],
    path: &str,
    all: &BTreeMap<Vec<String>, String>,
    reexports: &Reexports,
) -> Option<Vec<String>> {
    let segs: Vec<&str> = path.split("::").map(str::trim).collect();
    let (mut at, mut rest): (Vec<String>, &[&str]) = match segs.first()? {
        &"crate" => (Vec::new(), &segs[1..]),
        &"super" => {
            let mut at = from.to_vec();
            let mut rest = &segs[..];
            while rest.first() == Some(&"super") {
                at.pop();
                rest = &rest[1..];
            }
            (at, rest)
        }
        &"self" => (from.to_vec(), &segs[1..]),
        first => {
            let mut child = from.to_vec();
            child.push(first.to_string());
            if !all.contains_key(&child) {
                return None; // an external crate or std
            }
            (from.to_vec(), &segs[..])
        }
    };
    while let Some(next) = rest.first() {
        let mut child = at.clone();
        child.push(next.to_string());
        if !all.contains_key(&child) {
            break;
        }
        at = child;
        rest = &rest[1..];
    }
    if let Some(name) = rest.first() {
        if let Some(defined) = reexports.get(&(at.clone(), name.to_string())) {
            return Some(defined.clone());
        }
    }
    Some(at)
}

/// Whether `path`, used in `from`, names one of our modules itself (not
/// an item in it).
fn is_module(from: &[String], path: &str, all: &BTreeMap<Vec<String>, String>) -> bool {
    let segs: Vec<&str> = path.split("::").collect();
    let mut at: Vec<String> = match segs[0] {
        "crate" => Vec::new(),
        "super" => from[..from.len().saturating_sub(1)].to_vec(),
        "self" => from.to_vec(),
        first => {
            let mut m = from.to_vec();
            m.push(first.to_string());
            m
        }
    };
    for seg in &segs[1..] {
        if *seg == "super" {
            at.pop();
        } else {
            at.push(seg.to_string());
        }
    }
    !at.is_empty() && all.contains_key(&at)
}

/// The `use` declarations of `code`: (is a `pub use`, expanded path).
fn uses(code: &str) -> Vec<(bool, String)> {
    let mut out = Vec::new();
    for stmt in code.split(';') {
        let s = stmt.trim_start();
        let s = s.strip_prefix("#[cfg(fuzzing)]").map_or(s, str::trim_start);
        let (reexport, body) = match (s.strip_prefix("pub use "), s.strip_prefix("use ")) {
            (Some(b), _) => (true, b),
            (None, Some(b)) => (false, b),
            _ => continue,
        };
        let is_path = |c: char| c.is_alphanumeric() || "_:{},* \n".contains(c);
        if !body.chars().all(is_path) {
            continue; // not a use declaration (text in a string)
        }
        for path in expand(body).into_iter().filter(|p| !p.is_empty()) {
            out.push((reexport, path));
        }
    }
    out
}

/// Every name re-exported by a `pub use`, with the module that defines it.
fn reexports(all: &BTreeMap<Vec<String>, String>) -> Reexports {
    let mut out = Reexports::new();
    for (module, code) in all {
        for (reexport, path) in uses(code) {
            let original = path.split(" as ").next().unwrap_or("").trim();
            let name = path.rsplit([':', ' ']).next().unwrap_or("").to_string();
            if !reexport || name == "*" || name.is_empty() {
                continue;
            }
            let defined = target(module, original, all, &out);
            if let Some(defined) = defined.filter(|d| d != module) {
                out.insert((module.clone(), name), defined);
            }
        }
    }
    out
}

/// Every edge of the graph: module → modules it uses.
fn edges(all: &BTreeMap<Vec<String>, String>) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let reexports = reexports(all);
    let mut out: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (from, code) in all {
        let mut add = |path: &str, reexport: bool| {
            if let Some(to) = target(from, path, all, &reexports) {
                let child = to.len() > from.len() && to.starts_with(from);
                if to != *from && !(reexport && child) {
                    out.entry(from.clone()).or_default().insert(to);
                }
            }
        };
        let mut aliases = Vec::new();
        for (reexport, path) in uses(code) {
            add(&path, reexport);
            // `use crate::config::{self}` or `use crate::config`: later
            // `config::load` names something of that module.
            let original = path.trim_end_matches("::self");
            if path.ends_with("::self") || is_module(from, original, all) {
                let alias = original.rsplit("::").next().unwrap_or("").to_string();
                aliases.push((alias, original.to_string()));
            }
        }
        for (alias, original) in &aliases {
            let pat = format!("{alias}::");
            for (i, _) in code.match_indices(&pat) {
                let before = code[..i].chars().next_back();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                    continue;
                }
                let end = code[i..]
                    .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .map_or(code.len(), |e| i + e);
                add(&format!("{original}{}", &code[i + alias.len()..end]), false);
            }
        }
        for (i, _) in code
            .match_indices("crate::")
            .chain(code.match_indices("super::"))
        {
            let end = code[i..]
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .map_or(code.len(), |e| i + e);
            add(&code[i..end], false);
        }
    }
    out
}

#[test]
fn src_has_no_module_cycles() {
    let mut all = BTreeMap::new();
    modules(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &[],
        &mut all,
    );
    assert!(all.len() > 20, "found only {} modules", all.len());
    let graph = edges(&all);
    let name = |m: &Vec<String>| {
        if m.is_empty() {
            "crate".to_string()
        } else {
            m.join("::")
        }
    };
    // Depth-first search; a back edge closes a cycle.
    let mut cycles = Vec::new();
    let mut done = BTreeSet::new();
    for start in all.keys() {
        let mut stack = vec![(start.clone(), 0usize)];
        let mut on_path = vec![start.clone()];
        while let Some((node, i)) = stack.pop() {
            let next: Vec<_> = graph
                .get(&node)
                .map(|s| s.iter().cloned().collect())
                .unwrap_or_default();
            if i < next.len() {
                stack.push((node, i + 1));
                let to = &next[i];
                if let Some(at) = on_path.iter().position(|m| m == to) {
                    let cycle: Vec<String> = on_path[at..].iter().chain([to]).map(name).collect();
                    cycles.push(cycle.join(" -> "));
                } else if !done.contains(to) {
                    on_path.push(to.clone());
                    stack.push((to.clone(), 0));
                }
            } else {
                on_path.pop();
                done.insert(node);
            }
        }
    }
    cycles.sort();
    cycles.dedup();
    assert!(
        cycles.is_empty(),
        "module cycles in src/:\n{}",
        cycles.join("\n")
    );
}

// ---------------------------------------------------------------------------
// Only `state/` touches the state dir (issue 28).

/// Modules outside `state/` allowed to open, create or change files, and
/// why: none of them touches the state dir. Every other module that does is
/// a breach, and so is an exception no longer needed (keep the list exact).
const FILE_IO_ELSEWHERE: [(&str, &str); 8] = [
    ("config::edit", "replaces config.toml (through state::file::write_atomic)"),
    ("config::file", "reads config and hooks files"),
    ("config::validate", "reads the programs directory"),
    ("config::reload", "watches the config and programs directories"),
    ("runner::step", "finds programs, opens /dev/null and a step's stdin: the request body file state::bodies wrote, by the path it gave"),
    ("compat::webhook::import", "writes secrets files to `--write-secrets DIR`"),
    ("cli::lint", "checks that programs are executable"),
    ("runs::cluster", "reads the host name from /proc"),
];

/// What opens, creates, renames, removes or inspects a file.
const FILE_IO: [&str; 11] = [
    "OpenOptions",
    "File::create",
    "File::open",
    "fs::write",
    "fs::rename",
    "fs::remove",
    "fs::create_dir",
    "fs::read",
    "fs::metadata",
    "fs::copy",
    "use std::fs;",
];

/// Names of files and directories in the state dir, as code would spell
/// them to build a path.
const STATE_NAMES: [&str; 9] = [
    "\"runs.log\"",
    "\"idempotency.log\"",
    "\"app_keys.json\"",
    "\"app_keys.lock\"",
    "\"sessions.json\"",
    "\"passwords.json\"",
    "join(\"output\")",
    "join(\"callbacks\")",
    "join(\"bodies\")",
];

/// Every way a module outside `state/` touches the state dir, as
/// `module: what`: a path joined onto `state_dir`/`shared_state_dir`, a
/// state file's name, or file I/O in a module not in [`FILE_IO_ELSEWHERE`];
/// and every listed exception that no longer does file I/O.
fn state_dir_breaches(all: &BTreeMap<Vec<String>, String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut needed = BTreeSet::new();
    for (m, code) in all
        .iter()
        .filter(|(m, _)| m.first().is_none_or(|f| f != "state"))
    {
        let name = m.join("::");
        for line in code.lines() {
            if line.contains("state_dir") && line.contains(".join(") {
                out.push(format!(
                    "{name}: joins a path onto the state dir: {}",
                    line.trim()
                ));
            }
            if let Some(n) = STATE_NAMES.iter().find(|n| line.contains(*n)) {
                out.push(format!(
                    "{name}: names {n} of the state dir: {}",
                    line.trim()
                ));
            }
            if let Some(io) = FILE_IO.iter().find(|io| line.contains(*io)) {
                match FILE_IO_ELSEWHERE.iter().find(|(e, _)| *e == name) {
                    Some((e, _)) => _ = needed.insert(*e),
                    None => out.push(format!(
                        "{name}: file I/O ({io}) outside state/: {}",
                        line.trim()
                    )),
                }
            }
        }
    }
    for (e, why) in FILE_IO_ELSEWHERE {
        if all.contains_key(&e.split("::").map(String::from).collect::<Vec<_>>())
            && !needed.contains(e)
        {
            out.push(format!(
                "{e}: listed as doing file I/O ({why}) but does none"
            ));
        }
    }
    out
}

#[test]
fn only_state_touches_the_state_dir() {
    let mut all = BTreeMap::new();
    modules(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &[],
        &mut all,
    );
    assert!(all.keys().any(|m| m.first().is_some_and(|f| f == "state")));
    let breaches = state_dir_breaches(&all);
    assert!(
        breaches.is_empty(),
        "the state dir touched outside src/state/:\n{}",
        breaches.join("\n")
    );
}

/// The check catches each way of touching the state dir it looks for, in
/// code as it was before `state/` owned the state dir.
#[test]
fn the_state_dir_check_catches_each_breach() {
    let tree = |m: &str, code: &str| -> BTreeMap<Vec<String>, String> {
        let mut all = BTreeMap::new();
        all.insert(vec!["state".to_string()], String::new());
        all.insert(m.split("::").map(String::from).collect(), code.to_string());
        all
    };
    let cases = [
        (
            "invoke::webhook",
            "let dir = cfg.server.state_dir.join(\"bodies\");",
            "joins a path",
        ),
        (
            "http::server",
            "io_error(\"runs.log\")",
            "names \"runs.log\"",
        ),
        (
            "access::sessions",
            "let by_hash = match fs::read(&path) {",
            "file I/O (fs::read)",
        ),
        (
            "runs::idempotency",
            "OpenOptions::new().append(true).open(path)",
            "file I/O (OpenOptions)",
        ),
        (
            "access::app_keys",
            "use std::fs;",
            "file I/O (use std::fs;)",
        ),
        ("cli::lint", "let x = 1;", "listed as doing file I/O"),
    ];
    for (m, code, want) in cases {
        let found = state_dir_breaches(&tree(m, code));
        assert!(
            found.iter().any(|b| b.starts_with(m) && b.contains(want)),
            "{m}: `{code}` not caught as {want}: {found:?}"
        );
    }
    // A state module may do all of it.
    let ok = tree("state::store", "fs::write(state_dir.join(\"runs.log\"), b)");
    assert!(state_dir_breaches(&ok).is_empty());
}
