//! The command line: one help text per subcommand and a parser into
//! [`Command`] built on `lexopt` (the small, dependency-free parser ripgrep
//! uses; the help texts are written by hand so each explains every option).

pub mod commands;
pub mod error;
pub mod firststart;
pub mod generate;
pub mod lint;
pub mod spec;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use lexopt::prelude::*;

use crate::cli::error::Error;
use spec::{find, help_of, usage_text, Sub, COMMANDS, GENERATE_KINDS};

/// A parsed command line.
#[derive(Debug, PartialEq, Eq)]
pub enum Command {
    /// `trigd [serve]`.
    Serve {
        /// Config file.
        config: PathBuf,
        /// Listen address override.
        listen: Option<String>,
    },
    /// `trigd check`.
    Check {
        /// Config file.
        config: PathBuf,
    },
    /// `trigd run`.
    Run {
        /// Config file.
        config: PathBuf,
        /// Program id or name.
        program: String,
        /// Function name.
        function: Option<String>,
        /// Values, by position.
        values: Vec<String>,
    },
    /// `trigd keygen`.
    Keygen {
        /// Name for the config entry.
        name: String,
        /// Workspace line, when given.
        workspace: Option<String>,
    },
    /// `trigd hash-password`.
    HashPassword,
    /// `trigd app-key`.
    AppKey {
        /// Config file.
        config: PathBuf,
        /// Workspace.
        workspace: String,
        /// Member.
        member: String,
        /// `trigd revoke-app-key`: delete the key instead.
        revoke: bool,
    },
    /// `trigd import-webhook`.
    ImportWebhook {
        /// The hooks file.
        file: PathBuf,
        /// Id of the printed program.
        program_id: u64,
        /// Where to write inline secrets, when given.
        write_secrets: Option<PathBuf>,
    },
    /// `trigd generate KIND`: a man page or a completion script.
    Generate(String),
    /// `--help`: the text to print.
    Help(String),
    /// `--version`.
    Version,
}

/// Parse `args` (without the program name).
///
/// # Errors
/// [`Error::Usage`] naming the unknown command, flag, stray argument or
/// missing value, and the help to read.
pub fn parse<I: IntoIterator<Item = OsString>>(args: I) -> Result<Command, Error> {
    let mut args: Vec<OsString> = args.into_iter().collect();
    // The command is the first argument unless that is an option (then the
    // default `serve`); `trigd --help` and `trigd --version` stand alone.
    let sub = match args.first().and_then(|a| a.to_str()) {
        Some(flag @ ("--help" | "-h" | "--version" | "-V")) => {
            if let Some(extra) = args.get(1) {
                let extra = extra.to_string_lossy();
                return Err(bad("trigd", format!("{flag} takes no argument '{extra}'")));
            }
            return Ok(match flag {
                "--help" | "-h" => Command::Help(usage_text()),
                _ => Command::Version,
            });
        }
        Some(a) if !a.starts_with('-') => a.to_string(),
        Some(_) | None => "serve".to_string(),
    };
    if args.first().and_then(|a| a.to_str()) == Some(sub.as_str()) {
        args.remove(0);
    }
    let mut p = lexopt::Parser::from_args(args);
    match sub.as_str() {
        "help" => help_for(&mut p),
        "version" => match p.next().map_err(|e| usage("version", &e))? {
            None => Ok(Command::Version),
            Some(extra) => Err(usage("version", &extra.unexpected())),
        },
        sub => parse_sub(&mut p, sub),
    }
}

/// `trigd help [COMMAND]`.
fn help_for(p: &mut lexopt::Parser) -> Result<Command, Error> {
    let Some(Value(v)) = p.next().map_err(|e| usage("help", &e))? else {
        return Ok(Command::Help(usage_text()));
    };
    let name = string(v, "help")?;
    find(&name)
        .map(|sub| Command::Help(help_of(sub)))
        .ok_or_else(|| unknown_command(&name))
}

fn unknown_command(name: &str) -> Error {
    let names: Vec<&str> = COMMANDS.iter().map(|s| s.name).collect();
    bad(
        "trigd",
        format!("unknown command '{name}' (commands: {})", names.join(", ")),
    )
}

/// Options every subcommand may take, gathered while parsing.
#[derive(Default)]
struct Opts {
    config: Option<PathBuf>,
    listen: Option<String>,
    name: Option<String>,
    workspace: Option<String>,
    member: Option<String>,
    function: Option<String>,
    program_id: Option<String>,
    write_secrets: Option<PathBuf>,
    positional: Vec<String>,
    /// `--help` or `--version` seen: print instead of running.
    early: Option<Command>,
}

fn parse_sub(p: &mut lexopt::Parser, sub: &str) -> Result<Command, Error> {
    let Some(spec) = find(sub) else {
        return Err(unknown_command(sub));
    };
    let mut o = options(p, spec)?;
    if let Some(early) = o.early.take() {
        return Ok(early);
    }
    match sub {
        "serve" => {
            no_positional(&o, sub)?;
            Ok(Command::Serve {
                config: config_of(o.config),
                listen: o.listen,
            })
        }
        "check" => {
            no_positional(&o, sub)?;
            Ok(Command::Check {
                config: config_of(o.config),
            })
        }
        "run" => {
            if o.positional.is_empty() {
                return Err(bad(
                    sub,
                    "run needs a PROGRAM (a program's name or id)".into(),
                ));
            }
            let program = o.positional.remove(0);
            Ok(Command::Run {
                config: config_of(o.config),
                program,
                function: o.function,
                values: o.positional,
            })
        }
        "keygen" => {
            no_positional(&o, sub)?;
            Ok(Command::Keygen {
                name: o.name.unwrap_or_else(|| "default".into()),
                workspace: o.workspace,
            })
        }
        "hash-password" => {
            no_positional(&o, sub)?;
            Ok(Command::HashPassword)
        }
        "import-webhook" => import_webhook(o),
        "generate" => generate(o),
        _ => {
            no_positional(&o, sub)?;
            let need = |v: Option<String>, flag: &str| {
                v.ok_or_else(|| bad(sub, format!("{sub} needs {flag}")))
            };
            Ok(Command::AppKey {
                workspace: need(o.workspace, "--workspace W")?,
                member: need(o.member, "--member M")?,
                config: config_of(o.config),
                revoke: sub == "revoke-app-key",
            })
        }
    }
}

/// `trigd import-webhook FILE [--program-id N] [--write-secrets DIR]`.
fn import_webhook(mut o: Opts) -> Result<Command, Error> {
    let sub = "import-webhook";
    if o.positional.len() != 1 {
        return Err(bad(
            sub,
            "import-webhook needs one FILE (a hooks.json or hooks.yaml)".into(),
        ));
    }
    let program_id = match o.program_id.as_deref() {
        None => 900,
        Some(v) => v
            .parse()
            .map_err(|_| bad(sub, format!("--program-id must be a number, got '{v}'")))?,
    };
    Ok(Command::ImportWebhook {
        file: PathBuf::from(o.positional.remove(0)),
        program_id,
        write_secrets: o.write_secrets,
    })
}

/// `trigd generate KIND`.
fn generate(mut o: Opts) -> Result<Command, Error> {
    match o.positional.as_slice() {
        [kind] if GENERATE_KINDS.contains(&kind.as_str()) => {
            Ok(Command::Generate(o.positional.remove(0)))
        }
        _ => Err(bad(
            "generate",
            format!("generate needs one KIND: {}", GENERATE_KINDS.join(", ")),
        )),
    }
}

/// Read every remaining argument of `spec`: the options it lists (an
/// option another command has is still an error here, naming it) and
/// positional values.
fn options(p: &mut lexopt::Parser, spec: &Sub) -> Result<Opts, Error> {
    let sub = spec.name;
    let mut o = Opts::default();
    while let Some(arg) = p.next().map_err(|e| usage(sub, &e))? {
        let takes = |name: &str| spec.flags.iter().any(|f| f.long == name);
        match arg {
            Short('h') | Long("help") => {
                o.early = Some(Command::Help(help_of(spec)));
                return Ok(o);
            }
            Long("version") | Short('V') => {
                o.early = Some(Command::Version);
                return Ok(o);
            }
            Long(name) if takes(name) => {
                let name = name.to_string();
                let v = value(p, sub, &name)?;
                match name.as_str() {
                    "config" => o.config = Some(PathBuf::from(v)),
                    "listen" => o.listen = Some(v),
                    "function" => o.function = Some(v),
                    "name" => o.name = Some(v),
                    "workspace" => o.workspace = Some(v),
                    "program-id" => o.program_id = Some(v),
                    "write-secrets" => o.write_secrets = Some(PathBuf::from(v)),
                    "member" => o.member = Some(v),
                    _ => return Err(bad(sub, format!("--{name} is listed but not parsed"))),
                }
            }
            Value(v) => o.positional.push(string(v, sub)?),
            other => return Err(usage(sub, &other.unexpected())),
        }
    }
    Ok(o)
}

/// The value of `--name`, as UTF-8.
fn value(p: &mut lexopt::Parser, sub: &str, name: &str) -> Result<String, Error> {
    let v = p.value().map_err(|e| usage(sub, &e))?;
    v.into_string()
        .map_err(|_| bad(sub, format!("the value of --{name} is not valid UTF-8")))
}

fn string(v: OsString, sub: &str) -> Result<String, Error> {
    v.into_string()
        .map_err(|v| bad(sub, format!("argument {v:?} is not valid UTF-8")))
}

fn no_positional(o: &Opts, sub: &str) -> Result<(), Error> {
    match o.positional.first() {
        Some(v) => Err(bad(sub, format!("{sub} takes no argument '{v}'"))),
        None => Ok(()),
    }
}

fn config_of(config: Option<PathBuf>) -> PathBuf {
    config.unwrap_or_else(|| PathBuf::from("config.toml"))
}

/// A usage error from lexopt (it names the option or argument).
fn usage(sub: &str, e: &lexopt::Error) -> Error {
    bad(sub, format!("{sub}: {e}"))
}

/// A usage error: `msg`, the command's usage line, and the help to read.
fn bad(sub: &str, msg: String) -> Error {
    let (line, help) = match find(sub) {
        Some(spec) => (
            format!("Usage: {}", spec.usage),
            format!("trigd {sub} --help"),
        ),
        None => (
            "Usage: trigd COMMAND [OPTIONS]".to_string(),
            "trigd --help".to_string(),
        ),
    };
    Error::Usage(format!(
        "{msg}\n{line}\nEvery option is explained by '{help}'."
    ))
}

/// Run the command line from the process arguments; the exit code.
pub fn main() -> ExitCode {
    // Written, not `eprintln!`ed: a stderr that cannot take it (`2>/dev/full`)
    // must not turn the exit code into a panic's 101.
    let say = |text: std::fmt::Arguments| {
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "{text}");
    };
    match run(std::env::args_os().skip(1)) {
        Ok(code) => code,
        Err(Error::Usage(msg)) => {
            say(format_args!("trigd: {msg}"));
            ExitCode::from(2)
        }
        Err(Error::Config(errs)) => {
            say(format_args!("{}", Error::Config(errs)));
            ExitCode::from(1)
        }
        Err(e) => {
            say(format_args!("trigd: {e}"));
            ExitCode::from(1)
        }
    }
}

/// Run the command line; the exit code on success.
fn run(args: impl Iterator<Item = std::ffi::OsString>) -> Result<ExitCode, Error> {
    let command = parse(args)?;
    if matches!(command, Command::Serve { .. }) {
        // Before any thread exists, so every thread inherits the mask and
        // only the main thread's sigwait sees these signals.
        crate::sys::block_signals();
    }
    crate::http::logging::init();
    match command {
        Command::Serve { config, listen } => crate::http::server::serve(&config, listen)?,
        Command::Check { config } => commands::check(&config)?,
        Command::Run {
            config,
            program,
            function,
            values,
        } => {
            if !commands::run(&config, &program, function.as_deref(), values)? {
                return Ok(ExitCode::from(1));
            }
        }
        Command::Keygen { name, workspace } => commands::keygen(&name, workspace.as_deref()),
        Command::HashPassword => commands::hash_password()?,
        Command::AppKey {
            config,
            workspace,
            member,
            revoke: false,
        } => commands::app_key(&config, &workspace, &member)?,
        Command::AppKey {
            config,
            workspace,
            member,
            revoke: true,
        } => commands::revoke_app_key(&config, &workspace, &member)?,
        Command::ImportWebhook {
            file,
            program_id,
            write_secrets,
        } => crate::compat::webhook::import::run(&file, program_id, write_secrets.as_deref())?,
        Command::Generate(kind) => print!("{}", generate::text(&kind)),
        Command::Help(text) => print!("{text}"),
        Command::Version => println!("{}", spec::version_text()),
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Command, Error> {
        parse(args.iter().map(OsString::from))
    }

    fn usage_error(r: Result<Command, Error>) -> String {
        match r {
            Err(Error::Usage(m)) => m,
            other => panic!("want a usage error, got {other:?}"),
        }
    }

    #[test]
    fn serve_is_the_default() {
        assert_eq!(
            p(&["--listen", "127.0.0.1:0"]).unwrap(),
            Command::Serve {
                config: "config.toml".into(),
                listen: Some("127.0.0.1:0".into())
            }
        );
        assert_eq!(
            p(&["serve", "--config=/etc/t.toml"]).unwrap(),
            Command::Serve {
                config: "/etc/t.toml".into(),
                listen: None
            }
        );
    }

    #[test]
    fn run_takes_values_after_double_dash() {
        assert_eq!(
            p(&["run", "backup", "--function", "f", "--", "--x", "y"]).unwrap(),
            Command::Run {
                config: "config.toml".into(),
                program: "backup".into(),
                function: Some("f".into()),
                values: vec!["--x".into(), "y".into()],
            }
        );
    }

    #[test]
    fn usage_errors_name_what_is_wrong() {
        assert!(usage_error(p(&["bogus"])).contains("unknown command 'bogus'"));
        assert!(usage_error(p(&["check", "--listen", "x"])).contains("'--listen'"));
        assert!(usage_error(p(&["serve", "--config"])).contains("--config"));
        assert!(usage_error(p(&["check", "extra"])).contains("'extra'"));
        assert_eq!(p(&["--version"]).unwrap(), Command::Version);
        assert_eq!(p(&["version"]).unwrap(), Command::Version);
        for extra in [
            &["--version", "x"][..],
            &["-V", "x"],
            &["--help", "x"],
            &["version", "x"],
        ] {
            assert!(
                usage_error(p(extra)).contains("'x'") || usage_error(p(extra)).contains("\"x\"")
            );
        }
    }

    #[test]
    fn every_command_has_its_own_help() {
        for sub in COMMANDS {
            let text = help_of(sub);
            assert_eq!(
                p(&[sub.name, "--help"]).unwrap(),
                Command::Help(text.clone())
            );
            assert_eq!(p(&["help", sub.name]).unwrap(), Command::Help(text));
        }
        let check = help_of(find("check").unwrap());
        assert_eq!(p(&["check", "-h"]).unwrap(), Command::Help(check));
        assert_eq!(p(&["--help"]).unwrap(), Command::Help(usage_text()));
    }

    /// The definitions the help, man page and completions are made of are
    /// the parser's: each listed flag is parsed by its command and refused
    /// by every other, and each help names exactly its flags.
    #[test]
    fn the_parser_takes_exactly_the_listed_flags() {
        let all: Vec<&str> = COMMANDS
            .iter()
            .flat_map(|s| s.flags.iter().map(|f| f.long))
            .collect();
        for sub in COMMANDS {
            for long in &all {
                let flag = format!("--{long}");
                let r = p(&[sub.name, &flag, "1", "--help"]);
                let listed = sub.flags.iter().any(|f| f.long == *long);
                assert_eq!(r.is_ok(), listed, "{} {flag}: {r:?}", sub.name);
            }
            let help = help_of(sub);
            for flag in sub.flags {
                assert!(help.contains(&format!("--{} {}", flag.long, flag.value)));
            }
            assert!(usage_text().contains(sub.usage), "{}", sub.name);
        }
    }

    #[test]
    fn generate_takes_one_known_kind() {
        for kind in GENERATE_KINDS {
            assert_eq!(
                p(&["generate", kind]).unwrap(),
                Command::Generate(kind.into())
            );
        }
        assert!(usage_error(p(&["generate"])).contains("complete-zsh"));
        assert!(usage_error(p(&["generate", "man", "man"])).contains("one KIND"));
        assert!(usage_error(p(&["generate", "html"])).contains("one KIND"));
    }
}
