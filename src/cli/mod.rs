//! The command line: one help text per subcommand and a parser into
//! [`Command`] built on `lexopt` (the small, dependency-free parser ripgrep
//! uses; the help texts are written by hand so each explains every option).

pub mod commands;
pub mod error;
pub mod firststart;
pub mod lint;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use lexopt::prelude::*;

use crate::cli::error::Error;

/// The main usage text (`trigd --help`).
pub const USAGE: &str = "\
trigd — run user-defined programs over HTTP

Usage:
  trigd [serve] [--config PATH] [--listen ADDR]   serve HTTP (default command)
  trigd check [--config PATH]                      validate config and programs; exit 1 on error
  trigd run PROGRAM [VALUE...] [--config PATH] [--function F]
                                                   run a program locally, print its JSON result
  trigd keygen [--name NAME] [--workspace W]       new API key + the config lines to paste
  trigd hash-password                              argon2id hash of a password read from stdin
  trigd app-key --workspace W --member M [--config PATH]
                                                   (re)generate M's application key in W
  trigd import-webhook FILE [--program-id N] [--write-secrets DIR]
                                                   print native config for an adnanh/webhook hooks file
  trigd help [COMMAND] | --help | --version

Each command explains its options with `trigd COMMAND --help`.

Options of serve, check, run and app-key:
  --config PATH   config file (default ./config.toml); relative paths in it
                  resolve against its directory

Logging: RUST_LOG=info (default), debug, warn, … to stderr.
";

const SERVE: &str = "\
trigd serve — serve HTTP (the default command)

Usage: trigd [serve] [--config PATH] [--listen ADDR]

Loads the config and every program, listens, and hot-reloads on changes.
The first stdout line is `listening on http://IP:PORT`.

Options:
  --config PATH   config file (default ./config.toml); relative paths in it
                  (programs_dir, state_dir, workdir) resolve against its directory
  --listen ADDR   override [server] listen, e.g. 127.0.0.1:0 for any free port
  -h, --help      this text
";

const CHECK: &str = "\
trigd check — validate the config and every program file

Usage: trigd check [--config PATH]

Prints `ok: N programs, M tools` and exits 0, or prints every error (file,
line, column, key) and exits 1. Warnings (a command file that does not
exist, a `{name}` placeholder inside a shell script) go to stderr and do not
change the exit code.

Options:
  --config PATH   config file (default ./config.toml)
  -h, --help      this text
";

const RUN: &str = "\
trigd run — run one function of a program here, without a server

Usage: trigd run PROGRAM [VALUE...] [--config PATH] [--function F]

PROGRAM is a program's name or id. Each VALUE binds by position to the
function's webhook outputs, as `variables` do over HTTP. Prints the same JSON
as `POST /api` (without a `Run` id: the run is not recorded, the state dir
may belong to a running server); exits 0 when the run finished, 1 otherwise.
Put VALUEs starting with `-` after `--`.

Options:
  --config PATH   config file (default ./config.toml)
  --function F    the function to run; any function of the program, with or
                  without an active webhook trigger. Needed when the program
                  has several triggered functions
  -h, --help      this text
";

const KEYGEN: &str = "\
trigd keygen — make a new API key for POST /api

Usage: trigd keygen [--name NAME] [--workspace W]

Prints the key on stderr (shown only once: give it to the caller) and, on
stdout, the [[api_keys]] block to paste into config.toml. The block holds only
the key's sha256, so the config never contains a usable key.

Options:
  --name NAME     the entry's name, shown in logs and run records (default: default)
  --workspace W   limit the key to the programs of workspace W
  -h, --help      this text
";

const HASH_PASSWORD: &str = "\
trigd hash-password — argon2id hash for a [[users]] entry

Usage: printf '%s\\n' \"$PASSWORD\" | trigd hash-password

Reads the password from the first line of stdin and prints its argon2id PHC
string, for `password = \"…\"` of a [[users]] entry.

Options:
  -h, --help      this text
";

const APP_KEY: &str = "\
trigd app-key — (re)generate a member's application key

Usage: trigd app-key --workspace W --member M [--config PATH]

Prints the new key on stdout (shown only once); the member's previous key
stops working at once, also in a running server. Keys are stored hashed in
the state dir.

Options:
  --workspace W   the workspace
  --member M      a member of W (a [[users]] name)
  --config PATH   config file (default ./config.toml)
  -h, --help      this text
";

const IMPORT_WEBHOOK: &str = "\
trigd import-webhook — native config for an adnanh/webhook hooks file

Usage: trigd import-webhook FILE [--program-id N] [--write-secrets DIR]

Prints, for the hooks file FILE (JSON or YAML), a [[workspaces]] and a
[[tools]] entry with one endpoint trigger per hook (for config.toml) and,
after the line `# ---- programs/webhook-hooks.toml ----`, a program file with
one function per hook. Each hook gets a comment. What native config cannot
carry (parse-parameters-as-json, response-message, a signature outside a
header, …) is a warning on stderr naming the hook and the option; a rule
with such a part never matches until rewritten. To serve the file as it is
instead, list it in [server] hooks_files.

Inline secrets are not printed: each is referenced as
secret_file = \"secrets/<hook>-<n>\".

Options:
  --program-id N        the program's id (default 900)
  --write-secrets DIR   write each inline secret to DIR/<hook>-<n> (mode 0600)
  -h, --help            this text
";

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
    /// `--help`: the text to print.
    Help(&'static str),
    /// `--version`.
    Version,
}

/// The subcommands, with their help texts.
const COMMANDS: [(&str, &str); 7] = [
    ("serve", SERVE),
    ("check", CHECK),
    ("run", RUN),
    ("keygen", KEYGEN),
    ("hash-password", HASH_PASSWORD),
    ("app-key", APP_KEY),
    ("import-webhook", IMPORT_WEBHOOK),
];

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
        Some("--help" | "-h") => return Ok(Command::Help(USAGE)),
        Some("--version" | "-V") => return Ok(Command::Version),
        Some(a) if !a.starts_with('-') => a.to_string(),
        Some(_) | None => "serve".to_string(),
    };
    if args.first().and_then(|a| a.to_str()) == Some(sub.as_str()) {
        args.remove(0);
    }
    let mut p = lexopt::Parser::from_args(args);
    match sub.as_str() {
        "help" => help_for(&mut p),
        "version" => Ok(Command::Version),
        sub => parse_sub(&mut p, sub),
    }
}

/// `trigd help [COMMAND]`.
fn help_for(p: &mut lexopt::Parser) -> Result<Command, Error> {
    let Some(Value(v)) = p.next().map_err(|e| usage("help", &e))? else {
        return Ok(Command::Help(USAGE));
    };
    let name = string(v, "help")?;
    help_text(&name)
        .map(Command::Help)
        .ok_or_else(|| unknown_command(&name))
}

fn help_text(sub: &str) -> Option<&'static str> {
    COMMANDS.iter().find(|(n, _)| *n == sub).map(|(_, h)| *h)
}

fn unknown_command(name: &str) -> Error {
    let names: Vec<&str> = COMMANDS.iter().map(|(n, _)| *n).collect();
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
    if help_text(sub).is_none() {
        return Err(unknown_command(sub));
    }
    let mut o = options(p, sub)?;
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
        _ => {
            no_positional(&o, sub)?;
            let need = |v: Option<String>, flag: &str| {
                v.ok_or_else(|| bad("app-key", format!("app-key needs {flag}")))
            };
            Ok(Command::AppKey {
                workspace: need(o.workspace, "--workspace W")?,
                member: need(o.member, "--member M")?,
                config: config_of(o.config),
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

/// Read every remaining argument of `sub`: its options (an option another
/// command has is still an error here, naming it) and positional values.
fn options(p: &mut lexopt::Parser, sub: &str) -> Result<Opts, Error> {
    let mut o = Opts::default();
    while let Some(arg) = p.next().map_err(|e| usage(sub, &e))? {
        let takes = |name: &str| -> bool {
            matches!(
                (sub, name),
                ("serve" | "check" | "run" | "app-key", "config")
                    | ("serve", "listen")
                    | ("run", "function")
                    | ("keygen", "name")
                    | ("keygen" | "app-key", "workspace")
                    | ("app-key", "member")
                    | ("import-webhook", "program-id" | "write-secrets")
            )
        };
        match arg {
            Short('h') | Long("help") => {
                o.early = Some(Command::Help(help_text(sub).unwrap_or(USAGE)));
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
                    _ => o.member = Some(v),
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
    let (line, help) = match help_text(sub) {
        Some(text) => (
            text.lines().find(|l| l.starts_with("Usage:")).unwrap_or(""),
            format!("trigd {sub} --help"),
        ),
        None => ("Usage: trigd COMMAND [OPTIONS]", "trigd --help".to_string()),
    };
    Error::Usage(format!(
        "{msg}\n{line}\nEvery option is explained by '{help}'."
    ))
}

/// Run the command line from the process arguments; the exit code.
pub fn main() -> ExitCode {
    match run(std::env::args_os().skip(1)) {
        Ok(code) => code,
        Err(Error::Usage(msg)) => {
            eprintln!("trigd: {msg}");
            ExitCode::from(2)
        }
        Err(Error::Config(errs)) => {
            eprintln!("{}", Error::Config(errs));
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("trigd: {e}");
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
        } => commands::app_key(&config, &workspace, &member)?,
        Command::ImportWebhook {
            file,
            program_id,
            write_secrets,
        } => crate::compat::webhook::import::run(&file, program_id, write_secrets.as_deref())?,
        Command::Help(text) => print!("{text}"),
        Command::Version => println!("trigd {}", env!("CARGO_PKG_VERSION")),
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Command, Error> {
        parse(args.iter().map(OsString::from))
    }

    fn usage_text(r: Result<Command, Error>) -> String {
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
        assert!(usage_text(p(&["bogus"])).contains("unknown command 'bogus'"));
        assert!(usage_text(p(&["check", "--listen", "x"])).contains("'--listen'"));
        assert!(usage_text(p(&["serve", "--config"])).contains("--config"));
        assert!(usage_text(p(&["check", "extra"])).contains("'extra'"));
        assert_eq!(p(&["--version"]).unwrap(), Command::Version);
    }

    #[test]
    fn every_command_has_its_own_help() {
        for (name, text) in COMMANDS {
            assert_eq!(p(&[name, "--help"]).unwrap(), Command::Help(text));
            assert_eq!(p(&["help", name]).unwrap(), Command::Help(text));
        }
        assert_eq!(p(&["check", "-h"]).unwrap(), Command::Help(CHECK));
        assert_eq!(p(&["--help"]).unwrap(), Command::Help(USAGE));
    }
}
