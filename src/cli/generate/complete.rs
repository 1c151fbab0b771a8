//! bash, zsh and fish completion scripts for every subcommand, flag and
//! argument of `cli::COMMANDS`.

use std::collections::BTreeMap;

use crate::cli::spec::{Flag, Sub, ValueKind, COMMANDS};

/// Every command name, `help` included.
fn names() -> Vec<&'static str> {
    let mut names: Vec<&str> = COMMANDS.iter().map(|s| s.name).collect();
    names.push("help");
    names
}

/// Each flag name once, with its value kind (a name means the same in every
/// command that takes it).
fn flags_by_name() -> BTreeMap<&'static str, ValueKind> {
    COMMANDS
        .iter()
        .flat_map(|s| s.flags.iter())
        .map(|f| (f.long, f.kind))
        .collect()
}

/// A flag's help in short, for a completion menu: its lines joined, up to
/// the first `;` when that makes it shorter.
fn short(text: &str) -> String {
    let joined: Vec<&str> = text.lines().map(str::trim).collect();
    let joined = joined.join(" ");
    match joined.split_once("; ") {
        Some((head, _)) => head.to_string(),
        None => joined,
    }
}

/// The bash script: `complete -F _trigd trigd`.
pub fn bash() -> String {
    let mut out = String::from(
        "# bash completion for trigd (made by `trigd generate complete-bash`)\n\
         _trigd() {\n\
         \x20   local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}\n",
    );
    out.push_str(&format!("    local cmds=\"{}\"\n", names().join(" ")));
    out.push_str(
        "    if ((COMP_CWORD == 1)) && [[ $cur != -* ]]; then\n\
         \x20       COMPREPLY=($(compgen -W \"$cmds\" -- \"$cur\")); return\n\
         \x20   fi\n\
         \x20   local sub=${COMP_WORDS[1]}\n\
         \x20   [[ $sub == -* ]] && sub=serve\n\
         \x20   case $prev in\n",
    );
    for (long, kind) in flags_by_name() {
        out.push_str(&format!(
            "        --{long}) {}; return ;;\n",
            bash_values(kind)
        ));
    }
    out.push_str("    esac\n    local opts args=\n    case $sub in\n");
    for sub in COMMANDS {
        let mut opts: Vec<String> = sub.flags.iter().map(|f| format!("--{}", f.long)).collect();
        opts.extend(["--help".into(), "-h".into()]);
        let args = sub
            .args
            .first()
            .map_or(String::new(), |a| bash_values(a.kind));
        out.push_str(&format!(
            "        {}) opts=\"{}\" args='{}' ;;\n",
            sub.name,
            opts.join(" "),
            args.replace('\'', "'\\''")
        ));
    }
    out.push_str(
        "        help) opts=\"--help -h\" args='COMPREPLY=($(compgen -W \"$cmds\" -- \"$cur\"))' ;;\n\
         \x20       *) return ;;\n\
         \x20   esac\n\
         \x20   if [[ $cur == -* ]]; then\n\
         \x20       [[ $sub == serve && $COMP_CWORD == 1 ]] && opts+=\" --version -V\"\n\
         \x20       COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\")); return\n\
         \x20   fi\n\
         \x20   [[ -n $args ]] && eval \"$args\"\n\
         }\n\
         complete -F _trigd trigd\n",
    );
    out
}

/// The bash command that completes a value of `kind` into COMPREPLY.
fn bash_values(kind: ValueKind) -> String {
    match kind {
        ValueKind::Text => "COMPREPLY=()".into(),
        ValueKind::File => {
            "compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- \"$cur\"))".into()
        }
        ValueKind::Dir => {
            "compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -d -- \"$cur\"))".into()
        }
        ValueKind::OneOf(words) => {
            format!(
                "COMPREPLY=($(compgen -W \"{}\" -- \"$cur\"))",
                words.join(" ")
            )
        }
    }
}

/// The zsh script, for a directory in `$fpath` (`#compdef trigd`).
pub fn zsh() -> String {
    let mut out = String::from(
        "#compdef trigd\n# zsh completion for trigd (made by `trigd generate complete-zsh`)\n\n\
         _trigd() {\n  local -a cmds\n  cmds=(\n",
    );
    for sub in COMMANDS {
        let summary = sub.summary.replace('\'', "'\\''").replace(':', "\\:");
        out.push_str(&format!("    '{}:{summary}'\n", sub.name));
    }
    out.push_str("    'help:the help of a command'\n  )\n");
    out.push_str(
        "  local sub=serve\n\
         \x20 if (( CURRENT == 2 )) && [[ $words[2] != -* ]]; then\n\
         \x20   _describe -t commands 'trigd command' cmds; return\n\
         \x20 fi\n\
         \x20 if [[ $words[2] != -* ]]; then\n\
         \x20   sub=$words[2]; shift words; (( CURRENT-- ))\n\
         \x20 fi\n\
         \x20 case $sub in\n",
    );
    for sub in COMMANDS {
        out.push_str(&format!("    {})\n      _arguments -s \\\n", sub.name));
        for flag in sub.flags {
            out.push_str(&format!("        {} \\\n", zsh_flag(flag)));
        }
        if sub.name == "serve" {
            out.push_str("        '(- *)'{-V,--version}'[the version and commit]' \\\n");
        }
        out.push_str(&zsh_args(sub));
        out.push_str("        '(- *)'{-h,--help}'[this command'\\''s help]' ;;\n");
    }
    out.push_str(
        "    help) _describe -t commands 'trigd command' cmds ;;\n  esac\n}\n\n_trigd \"$@\"\n",
    );
    out
}

/// One `_arguments` spec for a flag.
fn zsh_flag(flag: &Flag) -> String {
    let action = zsh_action(flag.kind);
    format!(
        "'--{}=[{}]:{}:{}'",
        flag.long,
        zsh_text(&short(flag.help)),
        flag.value,
        action
    )
}

/// `_arguments` specs for the positional arguments of `sub`.
fn zsh_args(sub: &Sub) -> String {
    sub.args
        .iter()
        .map(|arg| {
            let (count, name) = match arg.name.strip_suffix("...") {
                Some(name) => ("*", name),
                None => ("", arg.name),
            };
            format!("        '{count}:{name}:{}' \\\n", zsh_action(arg.kind))
        })
        .collect()
}

fn zsh_action(kind: ValueKind) -> String {
    match kind {
        ValueKind::Text => " ".into(),
        ValueKind::File => "_files".into(),
        ValueKind::Dir => "_files -/".into(),
        ValueKind::OneOf(words) => format!("({})", words.join(" ")),
    }
}

/// Text inside a single-quoted `_arguments` description.
fn zsh_text(text: &str) -> String {
    text.replace('\'', "'\\''")
        .replace('[', "\\[")
        .replace(']', "\\]")
        .replace(':', "\\:")
}

/// The fish script, for `vendor_completions.d/trigd.fish`.
pub fn fish() -> String {
    let mut out = String::from(
        "# fish completion for trigd (made by `trigd generate complete-fish`)\n\
         complete -c trigd -f\n\
         complete -c trigd -n __fish_use_subcommand -s h -l help -d 'the usage of trigd'\n\
         complete -c trigd -n __fish_use_subcommand -s V -l version -d 'the version and commit'\n\
         complete -c trigd -n __fish_use_subcommand -a help -d 'the help of a command'\n",
    );
    let all = names().join(" ");
    out.push_str(&format!(
        "complete -c trigd -n '__fish_seen_subcommand_from help' -a '{all}'\n"
    ));
    for sub in COMMANDS {
        out.push_str(&format!(
            "complete -c trigd -n __fish_use_subcommand -a {} -d '{}'\n",
            sub.name,
            fish_text(sub.summary)
        ));
        let when = format!("'__fish_seen_subcommand_from {}'", sub.name);
        // `trigd --config x` is `trigd serve --config x`.
        let when = if sub.name == "serve" {
            "'__fish_use_subcommand; or __fish_seen_subcommand_from serve'".to_string()
        } else {
            when
        };
        for flag in sub.flags {
            out.push_str(&format!(
                "complete -c trigd -n {when} -l {} {} -d '{}'\n",
                flag.long,
                fish_values(flag.kind),
                fish_text(&short(flag.help))
            ));
        }
        out.push_str(&format!(
            "complete -c trigd -n {when} -s h -l help -d 'this command'\\''s help'\n"
        ));
        if let Some(arg) = sub.args.first() {
            if arg.kind != ValueKind::Text {
                out.push_str(&format!(
                    "complete -c trigd -n {when} {}\n",
                    fish_values(arg.kind)
                ));
            }
        }
    }
    out
}

fn fish_values(kind: ValueKind) -> String {
    match kind {
        ValueKind::Text => "-x".into(),
        ValueKind::File => "-r -F".into(),
        ValueKind::Dir => "-x -a '(__fish_complete_directories)'".into(),
        ValueKind::OneOf(words) => format!("-x -a '{}'", words.join(" ")),
    }
}

fn fish_text(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\'', "\\'")
}
