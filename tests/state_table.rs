//! The state directory is described once in code and once for users, and
//! the two agree: the table in `src/state/mod.rs`'s module doc, the
//! manual's "State directory" table (docs/operations.md) and `trigd::testing::state::Kept` (the names the
//! code builds paths from) list the same files.

use std::collections::BTreeSet;
use std::path::Path;

use trigd::testing::state::Kept;

/// The rows of the first Markdown table after the line `start` (a table
/// row starts with `|`; the header and its `|---|` line are skipped), each
/// split into its cells. `prefix` is stripped from every line first (`//! `
/// for a module doc).
fn table(text: &str, start: &str, prefix: &str) -> Vec<Vec<String>> {
    let lines = text
        .lines()
        .skip_while(|l| !l.starts_with(start))
        .map(|l| l.strip_prefix(prefix).unwrap_or(l).trim())
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'));
    lines
        .skip(2)
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

/// The first `code span` of a cell: the file's path.
fn path_of(cell: &str) -> String {
    cell.split('`').nth(1).unwrap_or("").to_string()
}

/// The paths of the state table in `src/state/mod.rs`, in order.
fn code_paths(module_doc: &str) -> Vec<String> {
    table(module_doc, "//! | Kind", "//!")
        .iter()
        .map(|r| path_of(r.get(1).map_or("", String::as_str)))
        .collect()
}

/// The paths of the manual's "State directory" table (docs/operations.md).
fn readme_paths(readme: &str) -> Vec<String> {
    table(readme, "## State directory", "")
        .iter()
        .map(|r| path_of(&r[0]))
        .collect()
}

/// What differs between the two tables and [`Kept`]: empty when they agree.
fn differences(module_doc: &str, readme: &str) -> Vec<String> {
    let code = code_paths(module_doc);
    let readme: BTreeSet<String> = readme_paths(readme).into_iter().collect();
    let mut out = Vec::new();
    for p in &code {
        if !readme.contains(p) {
            out.push(format!(
                "{p}: in src/state/mod.rs, not in docs/operations.md"
            ));
        }
    }
    for p in &readme {
        if !code.contains(p) {
            out.push(format!(
                "{p}: in docs/operations.md, not in src/state/mod.rs"
            ));
        }
    }
    let first = |p: &String| p.split('/').next().unwrap_or("").to_string();
    let named: Vec<String> = code.iter().map(first).collect();
    let kept: Vec<String> = Kept::ALL.iter().map(|k| k.name().to_string()).collect();
    if named != kept {
        out.push(format!(
            "src/state/mod.rs's table names {named:?}, state::Kept {kept:?}"
        ));
    }
    out
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)).unwrap()
}

#[test]
fn the_manual_s_state_table_matches_the_one_in_state() {
    let (doc, readme) = (read("src/state/mod.rs"), read("docs/operations.md"));
    assert_eq!(code_paths(&doc).len(), Kept::ALL.len());
    let diff = differences(&doc, &readme);
    assert!(diff.is_empty(), "state tables differ:\n{}", diff.join("\n"));
}

/// The comparison catches a row missing on either side, a path spelled
/// differently, and a kind of file the code names but no table lists.
#[test]
fn the_state_table_check_catches_each_kind_of_drift() {
    let (doc, readme) = (read("src/state/mod.rs"), read("docs/operations.md"));
    let without = |text: &str, needle: &str| -> String {
        text.lines()
            .filter(|l| !(l.contains(needle) && l.contains('|')))
            .collect::<Vec<_>>()
            .join("\n")
    };
    // What README.md said before this table was checked: no callbacks/ and
    // no bodies/.
    let old_readme = without(&without(&readme, "`callbacks/"), "`bodies/");
    let diff = differences(&doc, &old_readme);
    assert!(diff.iter().any(|d| d.starts_with("callbacks/")), "{diff:?}");
    assert!(diff.iter().any(|d| d.starts_with("bodies/")), "{diff:?}");
    let renamed = readme.replace("| `sessions.json` |", "| `session.json` |");
    assert!(!differences(&doc, &renamed).is_empty());
    let short_doc = without(&doc, "`passwords.json`");
    let diff = differences(&short_doc, &readme);
    assert!(diff.iter().any(|d| d.contains("state::Kept")), "{diff:?}");
}
