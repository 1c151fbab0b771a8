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
