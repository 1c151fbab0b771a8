//! The subcommands and their flags, as data: the one source of `--help`,
//! of the flags the parser takes (`mod.rs`), of `trigd(1)` and of the shell
//! completions (`generate/`).

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

/// `--workspace W` of `app-key` and `revoke-app-key`.
const WORKSPACE: Flag = Flag {
    long: "workspace",
    value: "W",
    kind: ValueKind::Text,
    help: "the workspace",
};

const CONFIG: Flag = Flag {
    long: "config",
    value: "PATH",
    kind: ValueKind::File,
    help: "config file (default ./config.toml); relative paths in it\n\
           (programs_dir, state_dir, workdir) resolve against its directory",
};

/// The kinds `trigd generate` prints.
pub const GENERATE_KINDS: [&str; 6] = [
    "man",
    "man-config",
    "config-reference",
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
                The first stdout line is `listening on http://IP:PORT` (`https://` with `tls_cert` or `[acme]`,\n\
                or `unix:PATH`).\n\
                Under systemd: socket activation and the notify protocol (docs/systemd.md).",
        args: &[],
        flags: &[
            CONFIG,
            Flag {
                long: "listen",
                value: "ADDR",
                kind: ValueKind::Text,
                help: "override [server] listen: HOST:PORT (127.0.0.1:0 for any free port) or unix:PATH",
            },
        ],
    },
    Sub {
        name: "check",
        summary: "validate the config and every program file",
        usage: "trigd check [--config PATH]",
        about: "Prints `ok: N programs, M tools` and exits 0, or prints every error (file,\n\
                line, column, key) and exits 1. Warnings (a command file that does not\n\
                exist, a `{name}` placeholder inside a shell script, a `tls_cert` that\n\
                expires within 14 days) go to stderr and do not change the exit code.",
        args: &[],
        flags: &[CONFIG],
    },
    Sub {
        name: "run",
        summary: "run one function of a program here, without a server",
        usage: "trigd run PROGRAM [VALUE...] [--config PATH] [--function F]",
        about: "PROGRAM is a program's name or id. Each VALUE binds by position to the\n\
                function's outputs, as `variables` do over HTTP. Prints the same JSON\n\
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
        usage: "trigd hash-password",
        about: "Reads the password from the first line of stdin and prints its argon2id PHC\n\
                string, for `password = \"…\"` of a [[users]] entry:\n\
                \n\
                printf '%s\\n' \"$PASSWORD\" | trigd hash-password",
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
            WORKSPACE,
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
        name: "revoke-app-key",
        summary: "delete a member's application key",
        usage: "trigd revoke-app-key --workspace W --member M [--config PATH]",
        about: "The key stops working at once, also in a running server, and the member has\n\
                none until one is generated again (`trigd app-key`, or the member's\n\
                workspace settings page). A member removed from a workspace in the config\n\
                loses the key by itself when trigd loads that config.",
        args: &[],
        flags: &[
            WORKSPACE,
            Flag {
                long: "member",
                value: "M",
                kind: ValueKind::Text,
                help: "the member (a [[users]] name)",
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
        summary: "print a man page, the config key list or a completion script",
        usage: "trigd generate KIND",
        about: "Prints, made from the same definitions as the help texts and the config\n\
                parser, KIND: `man` (trigd(1)), `man-config` (trigd.toml(5)),\n\
                `config-reference` (the manual's key list, Markdown),\n\
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

/// The subcommand called `name`.
pub fn find(name: &str) -> Option<&'static Sub> {
    COMMANDS.iter().find(|s| s.name == name)
}
