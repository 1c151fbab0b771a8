//! Warnings of `trigd check`: things that load fine but will most likely not
//! do what the author meant. They never stop a load or a reload (a command
//! file may appear later); `check` prints them on stderr.

use std::os::unix::fs::PermissionsExt;

use crate::config::{Config, Function, Piece, Program, Step};
use crate::runner::step::resolve_program;

/// Every warning for `cfg`, as `file: function `f`, step N: …` sentences.
/// `path_env` is the `PATH` runs get.
pub fn warnings(cfg: &Config, path_env: &str) -> Vec<String> {
    let mut out = Vec::new();
    for program in cfg.programs.values() {
        for function in &program.functions {
            for (i, step) in function.steps.iter().enumerate() {
                let found = match step {
                    Step::Command(argv) => missing_command(argv, function, path_env),
                    Step::Shell(script) => braces_in_shell(script, function),
                    Step::Call { .. } => None,
                };
                if let Some(msg) = found {
                    out.push(format!("{}: {msg}", at(program, function, i)));
                }
            }
        }
    }
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

fn at(program: &Program, function: &Function, step: usize) -> String {
    format!(
        "{}: function `{}`, step {step}",
        program.file.display(),
        function.name
    )
}

/// A command whose program (written without placeholders) is not an
/// executable file where a run will look for it.
fn missing_command(
    argv: &[crate::config::Template],
    function: &Function,
    path_env: &str,
) -> Option<String> {
    let argv0: String = argv
        .first()?
        .0
        .iter()
        .map(|p| match p {
            Piece::Lit(s) => Some(s.as_str()),
            Piece::Var(_) => None,
        })
        .collect::<Option<String>>()?;
    match resolve_program(&argv0, path_env, &function.workdir) {
        Err(e) => Some(e),
        Ok(path) => {
            let executable = std::fs::metadata(&path)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
            (!executable).then(|| {
                format!(
                    "command `{argv0}` is not an executable file at {} (a relative command \
                     path resolves against the function's workdir, {})",
                    path.display(),
                    function.workdir.display()
                )
            })
        }
    }
}

/// A `{name}` of one of the function's inputs inside a shell script: shell
/// steps get values only as environment variables, so it stays literal.
fn braces_in_shell(script: &str, function: &Function) -> Option<String> {
    let name = function.inputs().iter().find(|name| {
        let needle = format!("{{{name}}}");
        // `${name}` is the shell's own expansion: fine.
        script
            .match_indices(&needle)
            .any(|(i, _)| !script[..i].ends_with('$'))
    })?;
    Some(format!(
        "the shell script contains `{{{name}}}`, which stays literal text in a shell step \
         (values are never spliced into scripts): write \"${name}\" to use the value"
    ))
}
