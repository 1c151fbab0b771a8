//! The generated pages and scripts name every subcommand, flag and config
//! key of the code, and nothing else.

use std::collections::BTreeSet;

use super::text;
use crate::cli::spec::{COMMANDS, GENERATE_KINDS};
use crate::config::reference::SECTIONS;

/// The `--flag` names in a text where a hyphen is written `hyphen`.
fn flags_in(text: &str, hyphen: &str) -> BTreeSet<String> {
    let dashes = format!("{hyphen}{hyphen}");
    let mut found = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find(&dashes) {
        rest = &rest[at + dashes.len()..];
        let mut name = String::new();
        loop {
            if let Some(c) = rest.chars().next().filter(char::is_ascii_lowercase) {
                name.push(c);
                rest = &rest[1..];
            } else if rest.starts_with(hyphen) && !rest.starts_with(&dashes) {
                name.push('-');
                rest = &rest[hyphen.len()..];
            } else {
                break;
            }
        }
        if !name.is_empty() {
            found.insert(name.trim_end_matches('-').to_string());
        }
    }
    found
}

/// Every flag of the code, `help` and `version` included.
fn all_flags() -> BTreeSet<String> {
    let mut all: BTreeSet<String> = COMMANDS
        .iter()
        .flat_map(|s| s.flags.iter().map(|f| f.long.to_string()))
        .collect();
    all.extend(["help".to_string(), "version".to_string()]);
    all
}

#[test]
fn man_1_has_each_command_with_exactly_its_flags() {
    let man = text("man");
    let commands = man.split(".SH COMMANDS\n").nth(1).unwrap();
    let commands = commands.split("\n.SH ").next().unwrap();
    let sections: Vec<&str> = commands.split(".SS ").skip(1).collect();
    assert_eq!(sections.len(), COMMANDS.len());
    for (sub, section) in COMMANDS.iter().zip(sections) {
        let title = format!("\\fBtrigd {}\\fR", sub.name.replace('-', "\\-"));
        assert!(section.starts_with(&title), "{title} in {section}");
        let want: BTreeSet<String> = sub.flags.iter().map(|f| f.long.to_string()).collect();
        // Each flag has its own item (`.TP`, then the tag line) ...
        let tags: Vec<&str> = section
            .split(".TP\n")
            .skip(1)
            .filter_map(|item| item.lines().next())
            .collect();
        assert_eq!(
            flags_in(&tags.join("\n"), "\\-"),
            want,
            "items of {}",
            sub.name
        );
        assert_eq!(tags.len(), want.len(), "one item per flag of {}", sub.name);
        // ... and the section names no other.
        assert_eq!(flags_in(section, "\\-"), want, "flags of {}", sub.name);
    }
    let options = man.split(".SH OPTIONS\n").nth(1).unwrap();
    assert!(options.contains("\\-\\-help") && options.contains("\\-\\-version"));
    assert!(flags_in(&man, "\\-").is_subset(&all_flags()));
}

#[test]
fn man_5_has_each_table_with_exactly_its_keys() {
    let man = text("man-config");
    let tables: Vec<&str> = man.split(".SS ").skip(1).collect();
    assert_eq!(tables.len(), SECTIONS.len());
    for (section, table) in SECTIONS.iter().zip(tables) {
        let table = table.split("\n.SH ").next().unwrap();
        let tags: BTreeSet<&str> = table
            .split(".TP\n\\fB")
            .skip(1)
            .filter_map(|t| t.split("\\fR").next())
            .collect();
        let want: BTreeSet<String> = section
            .keys
            .iter()
            .map(|k| k.name.replace('-', "\\-"))
            .collect();
        let tags: BTreeSet<String> = tags.into_iter().map(str::to_string).collect();
        assert_eq!(tags, want, "keys of {}", section.header);
    }
}

#[test]
fn completions_offer_every_command_and_flag_and_no_other() {
    for kind in ["complete-bash", "complete-zsh", "complete-fish"] {
        let script = text(kind);
        let flags = if kind == "complete-fish" {
            script
                .split(" -l ")
                .skip(1)
                .filter_map(|t| t.split(' ').next())
                .map(str::to_string)
                .collect()
        } else {
            flags_in(&script, "-")
        };
        assert_eq!(flags, all_flags(), "{kind}");
        for sub in COMMANDS {
            assert!(script.contains(sub.name), "{kind} lacks {}", sub.name);
        }
        for word in GENERATE_KINDS {
            assert!(script.contains(word), "{kind} lacks {word}");
        }
    }
}

#[test]
fn pages_are_ascii() {
    for kind in ["man", "man-config"] {
        let page = text(kind);
        assert!(page.is_ascii(), "{kind}");
        assert!(
            page.lines().all(|l| !l.starts_with('\'')),
            "{kind}: a line read as a request"
        );
    }
}

#[test]
fn the_manual_s_key_list_has_a_row_per_key() {
    let page = text("config-reference");
    for section in SECTIONS {
        for key in section.keys {
            let row = format!("| `{}` |", key.name);
            assert!(page.contains(&row), "{} {}", section.header, key.name);
        }
    }
}
