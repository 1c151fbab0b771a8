//! `trigd check` warnings about hooks files (`cli::lint` adds them to its
//! own): a hook's `execute-command` that is not there.

use crate::cli::lint::missing_command;
use crate::config::{Config, Piece, Step};

/// A warning for each hook whose command is not an executable file where
/// a run will look for it. `path_env` is the `PATH` runs get.
pub fn warnings(cfg: &Config, path_env: &str) -> Vec<String> {
    let mut out = Vec::new();
    for id in cfg.hooks.by_id.keys() {
        let Some(function) = cfg.hooks.program(id).and_then(|p| p.functions.first()) else {
            continue;
        };
        if let Some(Step::Command(argv)) = function.steps.first() {
            if let Some(msg) = missing_command(argv, function, path_env) {
                let hint = space_hint(argv);
                out.push(format!("hook \"{id}\": execute-command: {msg}{hint}"));
            }
        }
    }
    out
}

/// webhook's own hint for an `execute-command` holding a space (it is
/// one file name, never split into arguments).
fn space_hint(argv: &[crate::config::Template]) -> &'static str {
    let spaced = argv.first().is_some_and(|t| {
        t.0.iter()
            .any(|p| matches!(p, Piece::Lit(s) if s.contains(' ')))
    });
    if spaced {
        "; it holds a space, and is one file name: use 'pass-arguments-to-command' to specify args"
    } else {
        ""
    }
}
