//! The command line: usage texts and a small hand-written parser into
//! [`Command`]. No clap: five subcommands and a handful of flags do not need
//! it.

use std::path::PathBuf;

use crate::error::Error;

/// The main usage text (`trigd --help`).
pub const USAGE: &str = "\
trigd — run user-defined programs over HTTP

Usage:
  trigd [serve] [--config PATH] [--listen ADDR]   serve HTTP (default command)
  trigd check [--config PATH]                      validate config and programs; exit 1 on error
  trigd run PROGRAM [--config PATH] [--function F] [--] [VALUE...]
                                                   run a program locally, print its JSON result
  trigd keygen [--name NAME] [--workspace W]       new API key + the config lines to paste
  trigd hash-password                              argon2id hash of a password read from stdin
  trigd app-key --workspace W --member M [--config PATH]
                                                   (re)generate M's application key in W
  trigd --help | --version

Options:
  --config PATH   config file (default ./config.toml); relative paths in it
                  resolve against its directory
  --listen ADDR   override [server] listen, e.g. 127.0.0.1:0 for any free port

Logging: RUST_LOG=info (default), debug, warn, … to stderr.
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
    /// `--help`.
    Help,
    /// `--version`.
    Version,
}

/// Parse `args` (without the program name).
///
/// # Errors
/// [`Error::Usage`] naming the unknown command, flag or missing value.
pub fn parse(args: &[String]) -> Result<Command, Error> {
    let mut it = args.iter().map(String::as_str).peekable();
    let sub = match it.peek().copied() {
        Some(s) if !s.starts_with('-') => {
            it.next();
            s
        }
        _ => "serve",
    };
    let mut config = PathBuf::from("config.toml");
    let mut listen = None;
    let (mut name, mut workspace, mut function, mut member) = (None, None, None, None);
    let mut positional = Vec::new();
    let mut only_positional = false;
    while let Some(arg) = it.next() {
        if only_positional || !arg.starts_with("--") || arg == "-" {
            positional.push(arg.to_string());
            continue;
        }
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f, Some(v.to_string())),
            None => (arg, None),
        };
        let mut value = || -> Result<String, Error> {
            inline
                .clone()
                .or_else(|| it.next().map(str::to_string))
                .ok_or_else(|| Error::Usage(format!("{flag} needs a value")))
        };
        match (sub, flag) {
            (_, "--help") => return Ok(Command::Help),
            (_, "--version") => return Ok(Command::Version),
            (_, "--") => only_positional = true,
            ("serve" | "check" | "run" | "app-key", "--config") => config = PathBuf::from(value()?),
            ("app-key", "--workspace") => workspace = Some(value()?),
            ("app-key", "--member") => member = Some(value()?),
            ("serve", "--listen") => listen = Some(value()?),
            ("run", "--function") => function = Some(value()?),
            ("keygen", "--name") => name = Some(value()?),
            ("keygen", "--workspace") => workspace = Some(value()?),
            _ => return Err(Error::Usage(format!("unknown option '{flag}' for '{sub}'"))),
        }
    }
    if args.iter().any(|a| a == "-h") && !only_positional {
        return Ok(Command::Help);
    }
    let no_positional = |cmd: Command| match positional.first() {
        Some(p) => Err(Error::Usage(format!("unexpected argument '{p}'"))),
        None => Ok(cmd),
    };
    match sub {
        "serve" => no_positional(Command::Serve { config, listen }),
        "check" => no_positional(Command::Check { config }),
        "keygen" => no_positional(Command::Keygen {
            name: name.unwrap_or_else(|| "default".into()),
            workspace,
        }),
        "hash-password" => no_positional(Command::HashPassword),
        "app-key" => {
            let need = |v: Option<String>, f: &str| {
                v.ok_or_else(|| Error::Usage(format!("app-key needs {f}")))
            };
            let (workspace, member) = (
                need(workspace, "--workspace W")?,
                need(member, "--member M")?,
            );
            no_positional(Command::AppKey {
                config,
                workspace,
                member,
            })
        }
        "run" => {
            let mut values = positional.into_iter();
            let program = values
                .next()
                .ok_or_else(|| Error::Usage("run needs a PROGRAM (id or name)".into()))?;
            Ok(Command::Run {
                config,
                program,
                function,
                values: values.collect(),
            })
        }
        "help" => Ok(Command::Help),
        "version" => Ok(Command::Version),
        other => Err(Error::Usage(format!("unknown command '{other}'"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Command, Error> {
        parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
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
    fn usage_errors() {
        assert!(matches!(p(&["bogus"]), Err(Error::Usage(_))));
        assert!(matches!(
            p(&["check", "--listen", "x"]),
            Err(Error::Usage(_))
        ));
        assert!(matches!(p(&["serve", "--config"]), Err(Error::Usage(_))));
        assert!(matches!(p(&["check", "extra"]), Err(Error::Usage(_))));
        assert_eq!(p(&["--version"]).unwrap(), Command::Version);
        assert_eq!(p(&["check", "-h"]).unwrap(), Command::Help);
    }
}
