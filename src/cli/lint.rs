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
            if let Some(msg) = outputs_only_trigger(function) {
                let file = program.file.display();
                out.push(format!("{file}: function `{}`: {msg}", function.name));
            }
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
    out.extend(several_instances(cfg));
    let missing = |argv: &[_], f: &Function| missing_command(argv, f, path_env);
    out.extend(crate::compat::webhook::lint::warnings(cfg, missing));
    out
}

/// Schedules fired by an instance that looks like one of several (it
/// shares a state dir, or its `instance` name ends in a number) without a
/// database: each instance fires every schedule. With `[state] url` an
/// occurrence fires once per cluster (`state::schedules::MarkFile::claim`).
fn several_instances(cfg: &Config) -> Option<String> {
    let s = &cfg.server;
    let has = cfg
        .programs
        .values()
        .any(|p| p.functions.iter().any(|f| !f.schedules.is_empty()));
    let cluster =
        s.shared_state_dir != s.state_dir || s.instance.ends_with(|c: char| c.is_ascii_digit());
    (has && cluster && s.fire_schedules && s.state_db.is_none()).then(|| {
        format!(
            "instance `{}` looks like one of several: every instance fires every schedule; set \
             `schedules = \"off\"` in [server] on all but one (docs/schedules.md)",
            s.instance
        )
    })
}

/// An inactive `[functions.webhook]` table written only to declare the
/// function's outputs (the old form): the function-level `outputs` says
/// it without a Webhook Trigger.
fn outputs_only_trigger(function: &Function) -> Option<String> {
    let t = function.webhook_trigger.as_ref()?;
    if t.active || !t.lists_outputs {
        return None;
    }
    let list: Vec<String> = function.outputs.iter().map(|o| format!("{o:?}")).collect();
    Some(format!(
        "an inactive webhook table only declares its outputs: write `outputs = [{}]` on the \
         function and remove `webhook = {{ active = false, ... }}` (the Webhook Trigger is \
         what POST /api calls)",
        list.join(", ")
    ))
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
                // The hint only where it explains the path looked at.
                let hint = match argv0.contains('/') && !argv0.starts_with('/') {
                    true => format!(
                        " (a relative command path resolves against the function's workdir, {})",
                        function.workdir.display()
                    ),
                    false => String::new(),
                };
                format!(
                    "command `{argv0}` is not an executable file at {}{hint}",
                    path.display()
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

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    #[test]
    fn the_relative_path_hint_is_given_for_relative_paths_only() {
        let program = "id = 1\nname = \"p\"\n[[functions]]\nname = \"abs\"\n\
                       command = [\"/nonexistent/report\"]\n\
                       [[functions]]\nname = \"rel\"\ncommand = [\"./nope.sh\"]\n";
        let progs = [(PathBuf::from("programs/p.toml"), program.to_string())];
        let cfg = crate::config::load_str(Path::new("config.toml"), "", &progs).unwrap();
        let got = super::warnings(&cfg, "/usr/bin:/bin");
        let abs = got
            .iter()
            .find(|w| w.contains("/nonexistent/report"))
            .unwrap();
        let rel = got.iter().find(|w| w.contains("./nope.sh")).unwrap();
        assert!(!abs.contains("relative command path"), "{abs}");
        assert!(
            rel.contains("a relative command path resolves against"),
            "{rel}"
        );
    }
}
