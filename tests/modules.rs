//! The structure of `src/`, checked from the sources (not the binary):
//!
//! - **No module cycles:** a module never depends, through other modules,
//!   on itself. Every `use` and every `crate::`/`super::` path outside tests
//!   is an edge to the module that defines what it names. A name
//!   re-exported by `pub use` counts as a use of the module that defines it
//!   (so `crate::config::load` is a use of `config::validate`); the
//!   re-export itself, and `mod` declarations, are not edges. `lib.rs` is
//!   the root of the graph; `main.rs` is a crate of its own when there is a
//!   `lib.rs` (the root only in a binary-only crate).
//! - **A narrow root:** at most [`MAX_ROOT_ENTRIES`] entries in `src/`,
//!   `lib.rs` and `main.rs` included.
//! - **A thin `main.rs`:** it declares no module, defines `fn main` alone
//!   and names nothing but `trigd::` and `std::` paths.
//! - **`unsafe` only under `src/sys/`:** the word appears in no other file
//!   (tests included), the crate root denies `unsafe_code`, and only `sys`
//!   allows it.
//!
//! Each check is a function of a source tree that returns its problems, so
//! that [`every_check_fails_on_a_broken_tree`] can show each one failing.
//! To add a check: read the tree once with [`sources`] (every `.rs` file,
//! its module, its text and its [`code_of`]), return one line per problem
//! naming the file, and add a broken tree for it to that test.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use crate::util::TestDir;

/// The most entries `src/` may hold, `lib.rs` and `main.rs` included
/// (15 since `schedule/`: an entry kind with a timer thread of its own).
const MAX_ROOT_ENTRIES: usize = 15;

/// The crate's `src/`.
fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// One `.rs` file of a source tree.
struct Source {
    /// Its path under the tree's root, `/`-separated (`state/mod.rs`).
    rel: String,
    /// Its module in the library's graph (`["config", "validate"]`, `[]` for
    /// the root); `None` for test files (`*_tests.rs`) and for `main.rs`
    /// next to a `lib.rs` (a crate of its own).
    module: Option<Vec<String>>,
    /// The whole text.
    text: String,
    /// The text without test code and comment lines ([`code_of`]).
    code: String,
}

/// Every `.rs` file under `root`, in path order.
fn sources(root: &Path) -> Vec<Source> {
    let has_lib = root.join("lib.rs").is_file();
    let mut out = Vec::new();
    read_tree(root, &[], has_lib, &mut out);
    out
}

fn read_tree(dir: &Path, prefix: &[String], has_lib: bool, out: &mut Vec<Source>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        if path.is_dir() {
            let mut p = prefix.to_vec();
            p.push(name);
            read_tree(&path, &p, has_lib, out);
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let file = path.file_name().unwrap().to_string_lossy();
        let rel: String = prefix.iter().map(|p| format!("{p}/")).collect::<String>() + &file;
        let root_file = prefix.is_empty();
        let module = match name.as_str() {
            _ if name.ends_with("_tests") => None,
            "main" if root_file && has_lib => None,
            "lib" | "main" if root_file => Some(Vec::new()),
            "mod" => Some(prefix.to_vec()),
            _ => Some([prefix, std::slice::from_ref(&name)].concat()),
        };
        let text = fs::read_to_string(&path).unwrap();
        let code = code_of(&text);
        out.push(Source {
            rel,
            module,
            text,
            code,
        });
    }
}

/// `text` without its `#[cfg(test)] mod tests` and its comment lines.
fn code_of(text: &str) -> String {
    let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
    code.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Module path → code, for the library's module graph.
fn library(sources: &[Source]) -> BTreeMap<Vec<String>, String> {
    sources
        .iter()
        .filter_map(|s| Some((s.module.clone()?, s.code.clone())))
        .collect()
}

/// The 1-based numbers of the lines of `text`, comment lines left out,
/// where `word` stands as a whole word (not inside a longer identifier
/// such as `unsafe_code`).
fn lines_with_word(text: &str, word: &str) -> Vec<usize> {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim_start().starts_with("//"))
        .filter(|(_, line)| {
            line.match_indices(word).any(|(i, _)| {
                let before = line[..i].chars().next_back();
                let after = line[i + word.len()..].chars().next();
                !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
            })
        })
        .map(|(n, _)| n + 1)
        .collect()
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

/// The module cycles of the library of the tree `root`, one line each.
fn cycles(root: &Path) -> Vec<String> {
    let all = library(&sources(root));
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
    cycles
}

/// More than [`MAX_ROOT_ENTRIES`] entries directly in `root`.
fn wide_root(root: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(root)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", root.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    if names.len() <= MAX_ROOT_ENTRIES {
        return Vec::new();
    }
    vec![format!(
        "{} entries in src/, at most {MAX_ROOT_ENTRIES}: {}",
        names.len(),
        names.join(" ")
    )]
}

/// What makes `main.rs` of the tree `root` more than a call into the
/// library: a `lib.rs` missing, a `mod`, a second item, or a path that is
/// neither `trigd::` nor `std::`.
fn thick_main(root: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    if !root.join("lib.rs").is_file() {
        problems.push("no src/lib.rs: main.rs is the whole crate".to_string());
    }
    let Ok(text) = fs::read_to_string(root.join("main.rs")) else {
        return problems;
    };
    for n in lines_with_word(&text, "mod") {
        problems.push(format!("main.rs:{n}: a module declared in the binary"));
    }
    let items: usize = ["fn", "struct", "enum", "impl", "trait", "static", "const"]
        .iter()
        .map(|w| lines_with_word(&text, w).len())
        .sum();
    if items != 1 || lines_with_word(&text, "main").is_empty() {
        problems.push(format!("main.rs: {items} items, want `fn main` alone"));
    }
    let code = code_of(&text);
    let ours = |p: &str| p.starts_with("trigd::") || p.starts_with("std::");
    // Names brought in by `use trigd::…` or `use std::…`.
    let imported: BTreeSet<String> = uses(&code)
        .into_iter()
        .filter(|(_, p)| ours(p))
        .map(|(_, p)| p.rsplit([':', ' ']).next().unwrap_or("").to_string())
        .collect();
    for path in paths(&code) {
        let first = path.split("::").next().unwrap_or("");
        if !(ours(&path) || imported.contains(first)) {
            problems.push(format!(
                "main.rs: `{path}` is not a call into trigd:: (or std::)"
            ));
        }
    }
    problems
}

/// Every `a::b` path of `code` (identifiers joined by `::`).
fn paths(code: &str) -> BTreeSet<String> {
    let is_path = |c: char| c.is_alphanumeric() || c == '_' || c == ':';
    let mut out = BTreeSet::new();
    for (i, _) in code.match_indices("::") {
        let start = code[..i].rfind(|c: char| !is_path(c)).map_or(0, |s| s + 1);
        let end = code[i..]
            .find(|c: char| !is_path(c))
            .map_or(code.len(), |e| i + e);
        out.insert(code[start..end].trim_start_matches(':').to_string());
    }
    out
}

/// `unsafe` outside `sys/`, a crate root that does not deny `unsafe_code`,
/// or an allowance of it outside `sys`.
fn unsafe_outside_sys(root: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let crate_root = ["lib.rs", "main.rs"]
        .into_iter()
        .find(|f| root.join(f).is_file())
        .unwrap_or("lib.rs");
    for s in sources(root) {
        let in_sys = s.rel.starts_with("sys/");
        if !in_sys {
            for n in lines_with_word(&s.text, "unsafe") {
                problems.push(format!("{}:{n}: unsafe outside src/sys/", s.rel));
            }
        }
        let allows: Vec<&str> = s
            .text
            .lines()
            .filter(|l| l.contains("allow(unsafe_code)") && !l.trim_start().starts_with("//"))
            .collect();
        for allow in allows {
            let allows_sys = s.rel == crate_root && allow.contains("mod sys;");
            if !(in_sys || allows_sys) {
                problems.push(format!("{}: `{}` outside sys", s.rel, allow.trim()));
            }
        }
        if s.rel == crate_root && !s.text.contains("#![deny(unsafe_code)]") {
            problems.push(format!("{}: no #![deny(unsafe_code)]", s.rel));
        }
    }
    problems
}

/// Fail with every problem, one a line.
#[track_caller]
fn assert_none(problems: Vec<String>, what: &str) {
    assert!(problems.is_empty(), "{what}:\n{}", problems.join("\n"));
}

#[test]
fn src_has_no_module_cycles() {
    let modules = library(&sources(&src())).len();
    assert!(modules > 20, "found only {modules} modules");
    assert_none(cycles(&src()), "module cycles in src/");
}

#[test]
fn src_root_has_at_most_14_entries() {
    assert_none(wide_root(&src()), "src/ is too wide");
}

#[test]
fn main_rs_only_calls_into_the_library() {
    assert_none(thick_main(&src()), "src/main.rs is not thin");
}

#[test]
fn unsafe_code_is_only_under_sys() {
    assert_none(unsafe_outside_sys(&src()), "unsafe outside src/sys/");
}

// ---------------------------------------------------------------------------
// Each check fails on a broken tree

/// A small crate laid out as issue 28 asks: it passes every check.
const GOOD: &[(&str, &str)] = &[
    (
        "lib.rs",
        r#"//! A crate.
#![deny(unsafe_code)]

pub mod a;
pub mod b;
mod sys;
"#,
    ),
    (
        "main.rs",
        r#"//! The binary.
use std::process::ExitCode;
use trigd::a;

fn main() -> ExitCode {
    a::main()
}
"#,
    ),
    (
        "a.rs",
        r#"use crate::b::helper;

pub fn main() -> std::process::ExitCode {
    helper()
}
"#,
    ),
    (
        "b.rs",
        r#"pub fn helper() -> std::process::ExitCode {
    crate::sys::exit_code()
}
"#,
    ),
    (
        "sys/mod.rs",
        r#"#![allow(unsafe_code)]
pub fn exit_code() -> std::process::ExitCode {
    // SAFETY: getpid has no preconditions.
    let _ = unsafe { libc::getpid() };
    std::process::ExitCode::SUCCESS
}
"#,
    ),
];

/// [`GOOD`]'s `b.rs` doing `line` first.
fn b_doing(line: &str) -> String {
    format!("pub fn helper() -> std::process::ExitCode {{\n    {line}\n    crate::sys::exit_code()\n}}\n")
}

/// A check of a source tree: its problems.
type Check = fn(&Path) -> Vec<String>;

/// Write [`GOOD`] with `changes` (files replaced or added) to a fresh
/// directory and run `check` on it: its problems must include `want`.
#[track_caller]
fn catches(name: &str, check: Check, changes: &[(&str, &str)], want: &str) {
    let dir = TestDir::new(name);
    for (file, text) in GOOD.iter().chain(changes) {
        dir.write(file, text);
    }
    let problems = check(&dir.root).join("\n");
    assert!(
        problems.contains(want),
        "{name}: the check says {problems:?}, want {want:?}"
    );
}

#[test]
fn a_tree_laid_out_as_asked_passes_every_check() {
    let dir = TestDir::new("modules_good");
    for (file, text) in GOOD {
        dir.write(file, text);
    }
    let checks: [(&str, Check); 4] = [
        ("cycles", cycles),
        ("wide_root", wide_root),
        ("thick_main", thick_main),
        ("unsafe_outside_sys", unsafe_outside_sys),
    ];
    for (name, check) in checks {
        assert_none(check(&dir.root), name);
    }
}

#[test]
fn the_cycle_check_catches_a_cycle_through_the_root_too() {
    let b_uses_a = b_doing("crate::a::main();");
    catches(
        "modules_cycle",
        cycles,
        &[("b.rs", &b_uses_a)],
        "a -> b -> a",
    );
    // The root uses a, which uses b, which uses the root: main.rs, read
    // after lib.rs, must not take the root's place.
    let root_uses_a = r#"#![deny(unsafe_code)]
pub mod a;
pub mod b;
mod sys;
pub fn run() {
    crate::a::main();
}
"#;
    let b_uses_root = b_doing("crate::run();");
    catches(
        "modules_root_cycle",
        cycles,
        &[("lib.rs", root_uses_a), ("b.rs", &b_uses_root)],
        "crate -> a -> b -> crate",
    );
}

#[test]
fn the_root_check_catches_a_16th_entry() {
    let more: Vec<String> = (0..11).map(|i| format!("m{i}.rs")).collect();
    let more: Vec<(&str, &str)> = more.iter().map(|f| (f.as_str(), "")).collect();
    catches("modules_wide", wide_root, &more, "16 entries in src/");
}

#[test]
fn the_main_check_catches_a_main_that_does_more_than_call_the_library() {
    let cases = [
        ("mod cli;\nfn main() {\n    cli::run();\n}\n", "main.rs:1: a module declared"),
        (
            "fn main() {\n    trigd::a::main();\n}\n\nfn helper() {}\n",
            "2 items",
        ),
        (
            "fn main() {\n    let args: Vec<String> = std::env::args().collect();\n    serde_json::to_string(&args).ok();\n}\n",
            "`serde_json::to_string` is not a call into trigd::",
        ),
        (
            "use clap::Parser;\nuse std::process::ExitCode;\n\nfn main() -> ExitCode {\n    Parser::parse();\n    ExitCode::SUCCESS\n}\n",
            "`Parser::parse` is not a call into trigd::",
        ),
    ];
    for (i, (main, want)) in cases.into_iter().enumerate() {
        catches(
            &format!("modules_main_{i}"),
            thick_main,
            &[("main.rs", main)],
            want,
        );
    }
    // A binary-only crate: its main.rs is the whole crate.
    let dir = TestDir::new("modules_no_lib");
    dir.write("main.rs", GOOD[1].1);
    assert_eq!(
        thick_main(&dir.root),
        ["no src/lib.rs: main.rs is the whole crate"]
    );
}

#[test]
fn the_unsafe_check_catches_unsafe_outside_sys_and_a_missing_deny() {
    let b_unsafe = b_doing("let _ = unsafe { libc::getpid() };");
    catches(
        "modules_unsafe",
        unsafe_outside_sys,
        &[("b.rs", &b_unsafe)],
        "b.rs:2: unsafe outside src/sys/",
    );
    let no_deny = "pub mod a;\npub mod b;\nmod sys;\n";
    catches(
        "modules_no_deny",
        unsafe_outside_sys,
        &[("lib.rs", no_deny)],
        "lib.rs: no #![deny(unsafe_code)]",
    );
    let a_allows = "#![allow(unsafe_code)]\npub fn main() -> std::process::ExitCode {\n    crate::b::helper()\n}\n";
    catches(
        "modules_allow",
        unsafe_outside_sys,
        &[("a.rs", a_allows)],
        "a.rs: `#![allow(unsafe_code)]` outside sys",
    );
}

/// Where code outside `src/compat/` may know adnanh/webhook's hooks files
/// (`compat`, `Dialect::HooksFile`, `cfg.hooks`, the `hooks_*` server
/// settings), and how many times: removing compatibility is
/// `src/compat/`, the `HooksFile` variant with one arm per pipeline stage,
/// and these sites (src/compat/mod.rs says the same). The count is of
/// words in code, comments and tests left out.
const COMPAT_SITES: &[(&str, usize, &str)] = &[
    (
        "lib.rs",
        5,
        "mod compat; and its parsers re-exported in `testing` for fuzz/",
    ),
    (
        "config/endpoint.rs",
        2,
        "Dialect::HooksFile(Arc<compat::webhook::Hook>)",
    ),
    (
        "config/mod.rs",
        1,
        "Server.hooks: compat::webhook::Settings",
    ),
    ("config/raw.rs", 3, "the three [server] hooks_* TOML keys"),
    ("config/reference.rs", 4, "those keys in trigd.toml(5)"),
    (
        "config/server.rs",
        1,
        "compat::webhook::settings (stage: load)",
    ),
    (
        "config/validate.rs",
        6,
        "read hooks files, compile::load (stage: load)",
    ),
    (
        "config/reload.rs",
        5,
        "hooks files' changes reload, an empty or blank one is refused (stage: reload)",
    ),
    (
        "http/routes.rs",
        1,
        "compat::webhook::route (stage: URL table)",
    ),
    (
        "http/server.rs",
        2,
        "a path under the prefix it cannot read: 404",
    ),
    (
        "invoke/read.rs",
        7,
        "Read::HooksFile: new, rule, signature_failed, get (stage: read)",
    ),
    (
        "invoke/values.rs",
        2,
        "compat::webhook::values (stage: values)",
    ),
    (
        "invoke/mod.rs",
        2,
        "run_async, no Trigd-Callback (stage: start)",
    ),
    (
        "invoke/signed.rs",
        2,
        "compat::webhook::answer (stage: answer)",
    ),
    (
        "runner/mod.rs",
        1,
        "a hook run's program, by id (cfg.hooks)",
    ),
    ("cli/mod.rs", 1, "import-webhook (stage: command line)"),
    ("cli/spec.rs", 1, "import-webhook's help names hooks_files"),
    ("cli/lint.rs", 1, "compat::webhook::lint (stage: check)"),
    ("cli/commands.rs", 2, "`trigd check` counts the hooks"),
];

/// Occurrences of the words that know hooks files in `code`.
fn compat_words(code: &str) -> usize {
    let words = [
        "compat",
        "HooksFile",
        "hooks_files",
        "hooks_url_prefix",
        "hooks_http_methods",
    ];
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut n = 0;
    for w in words {
        for (i, _) in code.match_indices(w) {
            let before = code[..i].chars().next_back();
            let after = code[i + w.len()..].chars().next();
            if !before.is_some_and(ident) && !after.is_some_and(ident) {
                n += 1;
            }
        }
    }
    n + code.matches(".hooks.").count() + code.matches(".hooks\n").count()
}

#[test]
fn compat_is_known_only_at_the_documented_sites() {
    let mut over = Vec::new();
    // Test files (`*_tests.rs`) are left out like test modules.
    for src in sources(&src()) {
        if src.rel.starts_with("compat/") || src.rel.ends_with("_tests.rs") {
            continue;
        }
        let n = compat_words(&src.code);
        let allowed = COMPAT_SITES
            .iter()
            .find(|(f, _, _)| *f == src.rel)
            .map_or(0, |(_, max, _)| *max);
        if n > allowed {
            over.push(format!("{}: {n} (allowed {allowed})", src.rel));
        }
    }
    assert!(
        over.is_empty(),
        "code outside src/compat/ knows hooks files beyond the documented sites \
         (COMPAT_SITES here, src/compat/mod.rs): move it into src/compat/webhook/ \
         or document the site:\n{}",
        over.join("\n")
    );
}

// ---------------------------------------------------------------------------
// Only `state/` touches the state dir (issue 28).

/// Modules outside `state/` allowed to open, create or change files, and
/// why: none of them touches the state dir. Every other module that does is
/// a breach, and so is an exception no longer needed (keep the list exact).
const FILE_IO_ELSEWHERE: [(&str, &str); 13] = [
    ("config::edit", "replaces config.toml (through state::file::write_atomic)"),
    ("config::file", "reads config and hooks files"),
    ("config::validate", "reads the programs directory"),
    ("config::reload", "watches the config and programs directories"),
    ("runner::step", "finds programs, opens /dev/null and a step's stdin: the request body file state::bodies wrote, by the path it gave"),
    ("compat::webhook::import", "writes secrets files to `--write-secrets DIR`"),
    ("cli::lint", "checks that programs are executable"),
    ("runs::cluster", "reads the host name from /proc"),
    ("http::tls", "reads the TLS certificate and key files (tls_cert, tls_key)"),
    ("http::tls::watch", "follows the symlinks on the way to the certificate files"),
    ("http::listen", "removes a stale or its own Unix socket file (`listen = \"unix:PATH\"`)"),
    ("sys::users", "reads /etc/passwd and /etc/group (user and group names)"),
    ("sys::procs", "reads /proc/PID/environ and stat (what a killed trigd left running)"),
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

/// [`state_dir_breaches`] of the tree at `root`.
fn state_dir_outside_state(root: &Path) -> Vec<String> {
    state_dir_breaches(&library(&sources(root)))
}

#[test]
fn only_state_touches_the_state_dir() {
    let all = library(&sources(&src()));
    assert!(all.keys().any(|m| m.first().is_some_and(|f| f == "state")));
    assert_none(
        state_dir_outside_state(&src()),
        "the state dir touched outside src/state/",
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
