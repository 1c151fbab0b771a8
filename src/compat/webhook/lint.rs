//! `trigd check` warnings about hooks files (`cli::lint` adds them to its
//! own): a hook's `execute-command` that is not there.

use crate::config::{Config, Function, Piece, Step, Template};

/// A warning for each hook whose command is not an executable file where
/// a run will look for it, as `missing` (`cli::lint`'s check of a
/// command) says.
pub fn warnings(
    cfg: &Config,
    missing: impl Fn(&[Template], &Function) -> Option<String>,
) -> Vec<String> {
    let mut out = Vec::new();
    for id in cfg.hooks.by_id.keys() {
        let Some(function) = cfg.hooks.program(id).and_then(|p| p.functions.first()) else {
            continue;
        };
        if let Some(Step::Command(argv)) = function.steps.first() {
            if let Some(msg) = missing(argv, function) {
                let hint = space_hint(argv);
                out.push(format!("hook \"{id}\": execute-command: {msg}{hint}"));
            }
        }
    }
    out
}

/// webhook's own hint for an `execute-command` holding a space (it is
/// one file name, never split into arguments).
fn space_hint(argv: &[Template]) -> &'static str {
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
