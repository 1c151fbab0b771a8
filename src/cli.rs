//! The command line: one help text per subcommand and a parser into
//! [`Command`] built on `lexopt` (the small, dependency-free parser ripgrep
//! uses; the help texts are written by hand so each explains every option).

use std::ffi::OsString;
use std::path::PathBuf;

use lexopt::prelude::*;

use crate::error::Error;

/// A value a flag or an argument takes, for shell completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// Any text.
    Text,
    /// A file path.
    File,
    /// A directory path.
    Dir,
    /// One of the listed words.
    OneOf(&'static [&'static str]),
}

/// One `--flag` of a subcommand.
#[derive(Debug)]
pub struct Flag {
    /// The long name, without `--`.
    pub long: &'static str,
    /// The value's placeholder (`PATH`); every flag takes one.
    pub value: &'static str,
    /// What the value is, for completion.
    pub kind: ValueKind,
    /// What it does; lines after the first continue the text.
    pub help: &'static str,
}

/// A positional argument of a subcommand.
#[derive(Debug)]
pub struct Arg {
    /// Its placeholder (`PROGRAM`).
    pub name: &'static str,
    /// What it is, for completion.
    pub kind: ValueKind,
}

/// One subcommand: the single source of its `--help`, its parser's flags,
/// the man page and the shell completions.
#[derive(Debug)]
pub struct Sub {
    /// The name (`check`).
    pub name: &'static str,
    /// One line for the command list and the help's title.
    pub summary: &'static str,
    /// The usage line after `Usage: `.
    pub usage: &'static str,
    /// Paragraphs explaining it.
    pub about: &'static str,
    /// Its positional arguments.
    pub args: &'static [Arg],
    /// Its flags, besides `-h, --help`.
    pub flags: &'static [Flag],
}

const CONFIG: Flag = Flag {
    long: "config",
    value: "PATH",
    kind: ValueKind::File,
    help: "config file (default ./config.toml); relative paths in it\n\
           (programs_dir, state_dir, workdir) resolve against its directory",
};

/// The kinds `trigd generate` prints.
pub const GENERATE_KINDS: [&str; 5] = [
    "man",
    "man-config",
    "complete-bash",
    "complete-zsh",
    "complete-fish",
];

/// Every subcommand, in the order of `trigd --help`.
pub const COMMANDS: &[Sub] = &[
    Sub {
        name: "serve",
        summary: "serve HTTP (the default command)",
        usage: "trigd [serve] [--config PATH] [--listen ADDR]",
        about: "Loads the config and every program, listens, and hot-reloads on changes.\n\
                The first stdout line is `listening on http://IP:PORT`.",
        args: &[],
        flags: &[
            CONFIG,
            Flag {
                long: "listen",
                value: "ADDR",
                kind: ValueKind::Text,
                help: "override [server] listen, e.g. 127.0.0.1:0 for any free port",
            },
        ],
    },
    Sub {
        name: "check",
        summary: "validate the config and every program file",
        usage: "trigd check [--config PATH]",
        about: "Prints `ok: N programs, M tools` and exits 0, or prints every error (file,\n\
                line, column, key) and exits 1. Warnings (a command file that does not\n\
                exist, a `{name}` placeholder inside a shell script) go to stderr and do not\n\
                change the exit code.",
        args: &[],
        flags: &[CONFIG],
    },
    Sub {
        name: "run",
        summary: "run one function of a program here, without a server",
        usage: "trigd run PROGRAM [VALUE...] [--config PATH] [--function F]",
        about: "PROGRAM is a program's name or id. Each VALUE binds by position to the\n\
                function's webhook outputs, as `variables` do over HTTP. Prints the same JSON\n\
                as `POST /api` (without a `Run` id: the run is not recorded, the state dir\n\
                may belong to a running server); exits 0 when the run finished, 1 otherwise.\n\
                Put VALUEs starting with `-` after `--`.",
        args: &[
            Arg {
                name: "PROGRAM",
                kind: ValueKind::Text,
            },
            Arg {
                name: "VALUE...",
                kind: ValueKind::Text,
            },
        ],
        flags: &[
            CONFIG,
            Flag {
                long: "function",
                value: "F",
                kind: ValueKind::Text,
                help: "the function to run; any function of the program, with or\n\
                       without an active webhook trigger. Needed when the program\n\
                       has several triggered functions",
            },
        ],
    },
    Sub {
        name: "keygen",
        summary: "make a new API key for POST /api",
        usage: "trigd keygen [--name NAME] [--workspace W]",
        about: "Prints the key on stderr (shown only once: give it to the caller) and, on\n\
                stdout, the [[api_keys]] block to paste into config.toml. The block holds only\n\
                the key's sha256, so the config never contains a usable key.",
        args: &[],
        flags: &[
            Flag {
                long: "name",
                value: "NAME",
                kind: ValueKind::Text,
                help: "the entry's name, shown in logs and run records (default: default)",
            },
            Flag {
                long: "workspace",
                value: "W",
                kind: ValueKind::Text,
                help: "limit the key to the programs of workspace W",
            },
        ],
    },
    Sub {
        name: "hash-password",
        summary: "argon2id hash for a [[users]] entry",
        usage: "printf '%s\\n' \"$PASSWORD\" | trigd hash-password",
        about: "Reads the password from the first line of stdin and prints its argon2id PHC\n\
                string, for `password = \"…\"` of a [[users]] entry.",
        args: &[],
        flags: &[],
    },
    Sub {
        name: "app-key",
        summary: "(re)generate a member's application key",
        usage: "trigd app-key --workspace W --member M [--config PATH]",
        about: "Prints the new key on stdout (shown only once); the member's previous key\n\
                stops working at once, also in a running server. Keys are stored hashed in\n\
                the state dir.",
        args: &[],
        flags: &[
            Flag {
                long: "workspace",
                value: "W",
                kind: ValueKind::Text,
                help: "the workspace",
            },
            Flag {
                long: "member",
                value: "M",
                kind: ValueKind::Text,
                help: "a member of W (a [[users]] name)",
            },
            CONFIG,
        ],
    },
    Sub {
        name: "import-webhook",
        summary: "native config for an adnanh/webhook hooks file",
        usage: "trigd import-webhook FILE [--program-id N] [--write-secrets DIR]",
        about: "Prints, for the hooks file FILE (JSON or YAML), a [[workspaces]] and a\n\
                [[tools]] entry with one endpoint trigger per hook (for config.toml) and,\n\
                after the line `# ---- programs/webhook-hooks.toml ----`, a program file with\n\
                one function per hook. Each hook gets a comment. What native config cannot\n\
                carry (parse-parameters-as-json, response-message, a signature outside a\n\
                header, …) is a warning on stderr naming the hook and the option; a rule\n\
                with such a part never matches until rewritten. To serve the file as it is\n\
                instead, list it in [server] hooks_files.\n\
                \n\
                Inline secrets are not printed: each is referenced as\n\
                secret_file = \"secrets/<hook>-<n>\".",
        args: &[Arg {
            name: "FILE",
            kind: ValueKind::File,
        }],
        flags: &[
            Flag {
                long: "program-id",
                value: "N",
                kind: ValueKind::Text,
                help: "the program's id (default 900)",
            },
            Flag {
                long: "write-secrets",
                value: "DIR",
                kind: ValueKind::Dir,
                help: "write each inline secret to DIR/<hook>-<n> (mode 0600)",
            },
        ],
    },
    Sub {
        name: "generate",
        summary: "print a man page or a shell completion script",
        usage: "trigd generate KIND",
        about: "Prints, made from the same definitions as the help texts and the config\n\
                parser, KIND: `man` (trigd(1)), `man-config` (trigd.toml(5)),\n\
                `complete-bash`, `complete-zsh` or `complete-fish`. Packages install\n\
                the output (docs/packaging.md).",
        args: &[Arg {
            name: "KIND",
            kind: ValueKind::OneOf(&GENERATE_KINDS),
        }],
        flags: &[],
    },
];

/// The lines after the command list of `trigd --help`.
const USAGE_TAIL: &str = "\
Each command explains its options with `trigd COMMAND --help`.

Options of serve, check, run and app-key:
  --config PATH   config file (default ./config.toml); relative paths in it
                  resolve against its directory

Logging: RUST_LOG=info (default), debug, warn, … to stderr.
";

/// The usage text of `trigd --help`, made from [`COMMANDS`].
pub fn usage_text() -> String {
    let mut out = String::from("trigd — run user-defined programs over HTTP\n\nUsage:\n");
    for sub in COMMANDS {
        let line = format!("  {}", sub.usage);
        if line.len() < 50 {
            out.push_str(&format!("{line:<51}{}\n", sub.summary));
        } else {
            out.push_str(&format!("{line}\n{:51}{}\n", "", sub.summary));
        }
    }
    out.push_str("  trigd help [COMMAND] | --help | --version\n\n");
    out.push_str(USAGE_TAIL);
    out
}

/// The `--help` text of one subcommand, made from its [`Sub`].
pub fn help_of(sub: &Sub) -> String {
    let mut out = format!(
        "trigd {} — {}\n\nUsage: {}\n\n{}\n\nOptions:\n",
        sub.name, sub.summary, sub.usage, sub.about
    );
    let labels: Vec<String> = sub
        .flags
        .iter()
        .map(|f| format!("--{} {}", f.long, f.value))
        .collect();
    let width = labels.iter().map(String::len).max().unwrap_or(0).max(10) + 3;
    for (flag, label) in sub.flags.iter().zip(&labels) {
        let mut lines = flag.help.lines();
        let first = lines.next().unwrap_or_default();
        out.push_str(&format!("  {label:<width$}{first}\n"));
        for line in lines {
            out.push_str(&format!("  {:width$}{}\n", "", line.trim_start()));
        }
    }
    out.push_str(&format!("  {:<width$}this text\n", "-h, --help"));
    out
}

/// `trigd --version`: the version, the commit built from (`unknown` when
/// built outside a git checkout) and whether the tree differed from it.
pub fn version_text() -> String {
    let dirty = match env!("TRIGD_DIRTY") {
        "" => "",
        _ => ", dirty",
    };
    format!(
        "trigd {} (commit {}{dirty})",
        env!("CARGO_PKG_VERSION"),
        env!("TRIGD_COMMIT")
    )
}

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
        Some("--help" | "-h") => return Ok(Command::Help(usage_text())),
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
        return Ok(Command::Help(usage_text()));
    };
    let name = string(v, "help")?;
    find(&name)
        .map(|sub| Command::Help(help_of(sub)))
        .ok_or_else(|| unknown_command(&name))
}

/// The subcommand called `name`.
pub fn find(name: &str) -> Option<&'static Sub> {
    COMMANDS.iter().find(|s| s.name == name)
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
