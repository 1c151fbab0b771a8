//! `docs/config-reference.md`: every key of `config::reference` as a
//! Markdown page of the manual, so that the book lists the keys the parser
//! accepts and only those (a test compares the file with this text).

use crate::config::reference::{Section, SECTIONS};

/// The page: a heading per file and per table, a row per key.
pub fn config_reference() -> String {
    let mut out = String::from(HEAD);
    let mut file = "";
    for section in SECTIONS {
        if section.file != file {
            file = section.file;
            out.push_str(&format!("\n## {file}\n"));
        }
        out.push_str(&table(section));
    }
    out
}

/// One table: its header, what it is, and a row per key.
fn table(section: &Section) -> String {
    // The file's own keys are under the file's heading already.
    let title = match section.path {
        "" => "Top level".to_string(),
        _ => format!("`{}`", section.header),
    };
    let mut out = format!("\n### {title}\n\n{}\n\n", cell(section.about));
    out.push_str("| key | type | default | meaning |\n|---|---|---|---|\n");
    for key in section.keys {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            key.name,
            cell(key.ty),
            cell(&key.default_text()),
            cell(key.meaning)
        ));
    }
    out
}

/// Text for one table cell: a `|` would end the cell, and the reference
/// writes line breaks as source continuation only.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

const HEAD: &str = "\
<!-- Made by `trigd generate config-reference > docs/config-reference.md`
     from src/config/reference.rs; a test fails when the two differ. -->
# Every configuration key

Every key of `config.toml` and of the program files, with its type, default
and meaning: the same list as `man 5 trigd.toml`, made from the same source,
which a test compares with the keys the parser accepts. Unknown keys are
errors. [Configuration](config.md) explains the files with examples;
durations are written `\"250ms\"`, `\"60s\"`, `\"5m\"`, `\"1h\"`, `\"7d\"`,
`\"1m30s\"`, or as an integer number of seconds, at most `\"3650d\"`
(about ten years).
";
