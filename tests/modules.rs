//! The module graph of `src/` has no cycles: a module never depends, through
//! other modules, on itself. Reads the sources (not the binary): every
//! `use` and every `crate::`/`super::` path outside tests is an edge to the
//! module it names; a parent's `pub use` of its own child (a re-export) and
//! `mod` declarations are not edges.

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
        if !matches!(name.as_str(), "mod" | "main") {
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

/// The module a path used in module `from` names, if it is one of ours.
fn target(from: &[String], path: &str, all: &BTreeMap<Vec<String>, String>) -> Option<Vec<String>> {
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
    Some(at)
}

/// Every edge of the graph: module → modules it uses.
fn edges(all: &BTreeMap<Vec<String>, String>) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let mut out: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (from, code) in all {
        let mut add = |path: &str, reexport: bool| {
            if let Some(to) = target(from, path, all) {
                let child = to.len() > from.len() && to.starts_with(from);
                if to != *from && !(reexport && child) {
                    out.entry(from.clone()).or_default().insert(to);
                }
            }
        };
        for stmt in code.split(';') {
            let s = stmt.trim_start();
            let s = s.strip_prefix("#[cfg(fuzzing)]").map_or(s, str::trim_start);
            let (reexport, body) = match (s.strip_prefix("pub use "), s.strip_prefix("use ")) {
                (Some(b), _) => (true, b),
                (None, Some(b)) => (false, b),
                _ => (false, ""),
            };
            let is_path = |c: char| c.is_alphanumeric() || "_:{},* \n".contains(c);
            if !body.chars().all(is_path) {
                continue; // not a use declaration (text in a string)
            }
            for path in expand(body).iter().filter(|p| !p.is_empty()) {
                add(path, reexport);
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
