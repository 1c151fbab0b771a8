//! The manual (`docs/`, an mdBook) holds together: every relative link and
//! `#anchor` of its pages, README.md and CONTRIBUTING.md resolves (offline:
//! http links are not fetched), every page is in `docs/SUMMARY.md`, every
//! `Code` of the one Code table has its troubleshooting entry, and the keys
//! that the configuration page's tables name are keys of the parser; the
//! page of every key is what `trigd generate config-reference` prints (from
//! `config::reference`, which a unit test compares with the parser).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The Markdown files the links are checked in: every page of docs/, the
/// README and CONTRIBUTING.md.
fn checked_files() -> Vec<String> {
    let mut files: Vec<String> = pages().into_iter().map(|p| format!("docs/{p}")).collect();
    files.extend(["README.md".to_string(), "CONTRIBUTING.md".to_string()]);
    files
}

/// The `*.md` file names directly in docs/.
fn pages() -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".md"))
        .collect();
    out.sort();
    out
}

/// The lines of a Markdown text outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push(line);
        }
    }
    out
}

/// A heading's anchor as mdbook (and, close enough, GitHub) makes it: the
/// text without markup, lower case, letters, digits, `_` and `-` kept,
/// white space as `-`.
fn slug(heading: &str) -> String {
    let text = strip_links(heading).replace('`', "");
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c),
            c if c.is_whitespace() => Some('-'),
            _ => None,
        })
        .collect()
}

/// `[text](target)` → `text`.
fn strip_links(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(at) = rest.find("](") {
        let close = rest[at..].find(')').map_or(rest.len(), |c| at + c + 1);
        out.push_str(&rest[..at].replace('[', ""));
        rest = &rest[close..];
    }
    out.push_str(&rest.replace('[', ""));
    out
}

/// The anchors of a Markdown text's headings, repeats numbered `-1`, `-2`…
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for line in prose(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[hashes..]);
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// The targets of the inline links `](target)` of a text, outside code
/// blocks and code spans.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose(text) {
        let outside: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = outside.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            out.push(rest[..end].trim().to_string());
            rest = &rest[end..];
        }
    }
    out
}

/// What is wrong with one link of `from` (a path relative to the root).
fn check_link(from: &str, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None; // external: not fetched (CI has no network)
    }
    let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
    let file: PathBuf = if path.is_empty() {
        PathBuf::from(from)
    } else {
        let dir = Path::new(from).parent().unwrap_or(Path::new(""));
        normalize(&dir.join(path))
    };
    let full = root().join(&file);
    if !full.exists() {
        return Some(format!(
            "{from}: link to {target}: {} does not exist",
            file.display()
        ));
    }
    let is_md = file.extension().is_some_and(|e| e == "md");
    if anchor.is_empty() || !is_md {
        return None;
    }
    let text = std::fs::read_to_string(&full).unwrap_or_default();
    (!anchors(&text).contains(anchor)).then(|| {
        format!(
            "{from}: link to {target}: no heading #{anchor} in {}",
            file.display()
        )
    })
}

/// `docs/../README.md` → `README.md`.
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

fn broken_links(files: &[(String, String)]) -> Vec<String> {
    files
        .iter()
        .flat_map(|(name, text)| {
            links(text)
                .into_iter()
                .filter_map(|t| check_link(name, &t))
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let files: Vec<(String, String)> = checked_files()
        .into_iter()
        .map(|f| (f.clone(), read(&f)))
        .collect();
    let total: usize = files.iter().map(|(_, t)| links(t).len()).sum();
    assert!(
        total > 100,
        "only {total} links found: is the parser broken?"
    );
    let broken = broken_links(&files);
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The check sees a missing file, a missing anchor, and an anchor of
/// another page; it does not follow http links.
#[test]
fn the_link_check_catches_each_kind_of_break() {
    let page = |text: &str| vec![("docs/tour.md".to_string(), text.to_string())];
    assert!(broken_links(&page("[a](nope.md) [b](http://example.invalid/x)")).len() == 1);
    assert!(broken_links(&page("[a](security.md#no-such-heading)")).len() == 1);
    assert!(broken_links(&page("[a](#no-such-heading)")).len() == 1);
    assert!(broken_links(&page(
        "[a](security.md#inputs-and-their-bounds) [b](../CHANGELOG.md)"
    ))
    .is_empty());
    assert!(broken_links(&page("`[a](nope.md)`\n```\n[b](nope.md)\n```")).is_empty());
    assert_eq!(slug("`[server]` (config.toml)"), "server-configtoml");
    assert_eq!(
        slug("`GET /api/runs/<id>` — run status"),
        "get-apirunsid--run-status"
    );
    let twice = anchors("# A\n## x\n## x\n```\n# not\n```");
    assert_eq!(
        twice,
        ["a", "x", "x-1"].iter().map(|s| s.to_string()).collect()
    );
}

#[test]
fn every_page_is_in_the_summary() {
    let summary = read("docs/SUMMARY.md");
    let listed: BTreeSet<String> = links(&summary).into_iter().collect();
    let missing: Vec<String> = pages()
        .into_iter()
        .filter(|p| p != "SUMMARY.md" && !listed.contains(p))
        .collect();
    assert!(
        missing.is_empty(),
        "pages not in docs/SUMMARY.md: {missing:?}"
    );
}

/// The codes of `ApiError::code` (src/http/mod.rs), the one Code table.
fn codes_in_code() -> BTreeSet<String> {
    let src = read("src/http/mod.rs");
    let body = src
        .split("pub fn code(&self) -> &'static str {")
        .nth(1)
        .expect("ApiError::code in src/http/mod.rs");
    let body = body.split("\n    }\n").next().unwrap_or("");
    body.lines()
        .filter_map(|l| l.split("=> \"").nth(1)?.split('"').next())
        .map(str::to_string)
        .collect()
}

#[test]
fn every_code_has_its_troubleshooting_entry_and_no_other() {
    let code = codes_in_code();
    assert!(code.len() > 40, "{code:?}");
    let page = read("docs/troubleshooting.md");
    let entries: BTreeSet<String> = prose(&page)
        .iter()
        .filter_map(|l| l.strip_prefix("### `")?.strip_suffix('`'))
        .map(str::to_string)
        .collect();
    let undocumented: Vec<_> = code.difference(&entries).collect();
    let unknown: Vec<_> = entries.difference(&code).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "docs/troubleshooting.md: no entry for {undocumented:?}; entries that are no Code: {unknown:?}"
    );
}

#[test]
fn the_key_list_page_is_what_trigd_generates() {
    let out = crate::util::trigd(&["generate", "config-reference"], None);
    out.code_is(0);
    assert!(
        read("docs/config-reference.md") == out.stdout,
        "docs/config-reference.md differs from the config reference: run\n  \
         cargo run -- generate config-reference > docs/config-reference.md"
    );
}

/// The keys the generated reference lists (`| \`key\` |` rows).
fn reference_keys() -> BTreeSet<String> {
    table_keys(&read("docs/config-reference.md"))
}

/// The first-column code spans of a text's table rows, last path segment
/// only (`users[].name` → `name`, `environments.<E>.public` → `public`;
/// a name the user chooses is no key: `values.<output>` → `values`).
fn table_keys(text: &str) -> BTreeSet<String> {
    prose(text)
        .iter()
        .filter(|l| l.starts_with("| `"))
        .filter_map(|l| l.split('`').nth(1))
        .filter_map(|k| {
            k.rsplit(['.', ']'])
                .find(|s| !s.is_empty() && !s.starts_with('<'))
                .map(str::to_string)
        })
        .collect()
}

#[test]
fn the_configuration_page_names_only_keys_of_the_parser() {
    let reference = reference_keys();
    assert!(reference.contains("listen") && reference.contains("outputs"));
    let page = read("docs/config.md");
    let keys = table_keys(&page);
    assert!(keys.len() > 40, "{keys:?}");
    let unknown: Vec<_> = keys.difference(&reference).collect();
    assert!(
        unknown.is_empty(),
        "docs/config.md names keys the parser does not take: {unknown:?}"
    );
    // And it covers the [server] table whole.
    let server = read("docs/config-reference.md");
    let server = server.split("### `[server]`").nth(1).unwrap_or("");
    let server = server.split("\n### ").next().unwrap_or("");
    let missing: Vec<_> = table_keys(server)
        .into_iter()
        .filter(|k| !keys.contains(k))
        .collect();
    assert!(
        missing.is_empty(),
        "[server] keys missing from docs/config.md: {missing:?}"
    );
}

/// Every operation of openapi.json: a description of one or two sentences
/// ending in a link to its manual page, the same link in `externalDocs`,
/// and both resolve (paths relative to the source tree).
#[test]
fn every_operation_is_described_briefly_with_its_manual_page() {
    let doc: serde_json::Value = serde_json::from_str(&read("openapi.json")).expect("openapi.json");
    let mut wrong = Vec::new();
    let methods = ["get", "put", "post", "delete", "patch", "head"];
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            if !methods.contains(&method.as_str()) {
                continue;
            }
            let name = format!("{} {path}", method.to_uppercase());
            let text = op["description"].as_str().unwrap_or("");
            let url = op["externalDocs"]["url"].as_str().unwrap_or("");
            let Some((prose, link)) = text.split_once(" Manual: [") else {
                wrong.push(format!("{name}: no \"Manual: [page](docs/…)\" link"));
                continue;
            };
            let sentences = prose.matches(". ").count() + 1;
            if prose.is_empty() || sentences > 2 || !prose.ends_with('.') {
                wrong.push(format!("{name}: {sentences} sentences: {prose}"));
            }
            if !url.starts_with("docs/") || !link.ends_with(&format!("]({url}).")) {
                wrong.push(format!(
                    "{name}: the link ({link}) and externalDocs ({url}) differ"
                ));
            }
            wrong.extend(check_link("openapi.json", url));
        }
    }
    assert!(wrong.is_empty(), "openapi.json:\n{}", wrong.join("\n"));
}

/// ```console blocks are the ones tests/newcomer.rs runs: they may appear
/// only on the pages it runs, so that a reader can trust every one.
#[test]
fn console_blocks_are_only_on_the_pages_that_are_run() {
    let run = [
        "README.md",
        "docs/tour.md",
        "docs/tools.md",
        "docs/webhooks.md",
    ];
    let elsewhere: Vec<String> = checked_files()
        .into_iter()
        .filter(|f| !run.contains(&f.as_str()))
        .filter(|f| read(f).lines().any(|l| l.trim_end() == "```console"))
        .collect();
    assert!(
        elsewhere.is_empty(),
        "```console blocks on pages tests/newcomer.rs does not run (use ```text, or run the page): {elsewhere:?}"
    );
}

/// The README opens with the two commands (serve the shipped config, run
/// the tests), and CI runs that test command.
#[test]
fn the_readme_opens_with_the_two_commands() {
    let readme = read("README.md");
    let block = readme
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .expect("README.md: a ```sh block");
    let commands: Vec<&str> = block
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .collect();
    assert_eq!(
        commands,
        [
            "cargo run --release -- serve --config config.toml",
            "cargo test"
        ]
    );
    assert!(root().join("config.toml").is_file() && root().join("programs").is_dir());
    assert!(read(".ci/run")
        .lines()
        .any(|l| l == "cargo test -- --include-ignored"));
    assert!(readme.lines().count() <= 300, "README.md is over 300 lines");
}

/// The schedules page and the notifications page agree that trigd sends
/// an `overdue` callback (the schedules page once said it did not yet).
#[test]
fn the_schedules_page_tells_of_the_overdue_callback() {
    let schedules = read("docs/schedules.md").replace('\n', " ");
    assert!(read("docs/notifications.md").contains("- `overdue`:"));
    assert!(
        schedules.contains(r#"`on = ["overdue"]`"#),
        "docs/schedules.md does not name the overdue callback"
    );
    assert!(!schedules.contains("does not yet send a callback"));
}
