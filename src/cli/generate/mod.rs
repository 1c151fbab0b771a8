//! `trigd generate KIND`: the man pages and shell completion scripts, made
//! from the command definitions (`cli::spec::COMMANDS`) and the config reference
//! (`config::reference`), so that they say what the code does.

mod complete;
mod man;
mod markdown;
mod roff;

/// The text of `trigd generate KIND`; `kind` is one of
/// `cli::spec::GENERATE_KINDS` (the parser checked it).
pub fn text(kind: &str) -> String {
    match kind {
        "man" => man::trigd_1(),
        "man-config" => man::trigd_toml_5(),
        "config-reference" => markdown::config_reference(),
        "complete-bash" => complete::bash(),
        "complete-zsh" => complete::zsh(),
        _ => complete::fish(),
    }
}

#[cfg(test)]
mod tests;
