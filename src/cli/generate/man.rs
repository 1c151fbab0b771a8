//! `trigd(1)` from the command definitions of `cli.rs` and `trigd.toml(5)`
//! from the config reference of `config/reference.rs`.

use super::roff::{bold, escape, italic, item, paragraphs, prose};
use crate::cli::spec::{Sub, COMMANDS};
use crate::config::reference::{Section, SECTIONS};

/// The `.TH` line: no date, so that the page is the same for every build
/// of a version.
fn title(name: &str, section: u8, manual: &str) -> String {
    format!(
        ".TH {} {section} \"\" \"trigd {}\" \"{manual}\"\n",
        name.to_uppercase(),
        env!("CARGO_PKG_VERSION")
    )
}

/// `trigd(1)`: every subcommand with its usage, explanation and flags.
pub fn trigd_1() -> String {
    let mut out = title("trigd", 1, "User Commands");
    out.push_str(".SH NAME\ntrigd \\- run user\\-defined programs over HTTP\n");
    out.push_str(".SH SYNOPSIS\n.nf\n");
    for sub in COMMANDS {
        out.push_str(&format!("{}\n", escape(sub.usage)));
    }
    out.push_str("trigd help [COMMAND] | \\-\\-help | \\-\\-version\n.fi\n");
    out.push_str(DESCRIPTION);
    out.push_str(".SH COMMANDS\n");
    for sub in COMMANDS {
        out.push_str(&command(sub));
    }
    out.push_str(".SH OPTIONS\n");
    out.push_str(&item(
        "\\fB\\-h\\fR, \\fB\\-\\-help\\fR",
        "the usage of trigd, or after a command that command's help",
    ));
    out.push_str(&item(
        "\\fB\\-V\\fR, \\fB\\-\\-version\\fR",
        "the version, the git commit it was built from (`unknown` outside a \
         git checkout) and `dirty` when the tree differed from that commit",
    ));
    out.push_str(TAIL_1);
    out
}

/// One subcommand as a `.SS` section.
fn command(sub: &Sub) -> String {
    let mut out = format!(".SS {}\n", bold(&format!("trigd {}", sub.name)));
    out.push_str(&format!("{}.\n", prose(sub.summary)));
    out.push_str(&format!(".PP\nUsage: {}\n", bold(sub.usage)));
    out.push_str(&paragraphs(sub.about));
    for flag in sub.flags {
        let tag = format!(
            "{} {}",
            bold(&format!("--{}", flag.long)),
            italic(flag.value)
        );
        out.push_str(&item(&tag, flag.help));
    }
    out
}

const DESCRIPTION: &str = r".SH DESCRIPTION
.B trigd
runs the programs an operator defines in TOML files as real child processes
when an HTTP request asks for them: through its JSON API with an API key,
through the endpoints of tools (with application keys, browser sessions or
without credentials), or through webhook senders whose signatures it checks.
It reloads the configuration when a file changes and keeps a record of every
run in its state directory.
.PP
Without a command,
.B trigd
serves HTTP with
.I ./config.toml
(the
.B serve
command).
";

const TAIL_1: &str = r#".SH ENVIRONMENT
.TP
.B RUST_LOG
log level of the lines on stderr: \fBinfo\fR (default), \fBdebug\fR, \fBwarn\fR, \fBerror\fR;
a filter such as \fBtrigd=debug\fR names a module.
.SH FILES
.TP
.I ./config.toml
the configuration read without \fB\-\-config\fR; see
.BR trigd.toml (5).
.TP
.I /etc/trigd/config.toml
the configuration of the packaged service (\fBtrigd.service\fR), with its
programs in \fI/etc/trigd/programs/\fR.
.TP
.I /var/lib/trigd
the state directory of the packaged service: run records, application keys,
sessions, generated passwords.
.SH EXIT STATUS
.TP
.B 0
success.
.TP
.B 1
an invalid configuration, a failed run (\fBtrigd run\fR) or another error,
printed on stderr.
.TP
.B 2
a usage error: an unknown command or flag, a missing value.
.SH SEE ALSO
.BR trigd.toml (5),
.BR systemd.exec (5)
.PP
The manual: docs/ in the source (an mdBook, start at docs/introduction.md), \fI/usr/share/doc/trigd/\fR when packaged.
"#;

/// `trigd.toml(5)`: every key of `config.toml` and of program files.
pub fn trigd_toml_5() -> String {
    let mut out = title("trigd.toml", 5, "File Formats");
    out.push_str(".SH NAME\ntrigd.toml \\- configuration and program files of trigd\n");
    out.push_str(HEAD_5);
    let mut file = "";
    for section in SECTIONS {
        if section.file != file {
            file = section.file;
            out.push_str(&format!(".SH {}\n", escape(&file.to_uppercase())));
        }
        out.push_str(&section_text(section));
    }
    out.push_str(
        ".SH SEE ALSO\n.BR trigd (1)\n.PP\n\
         The manual (docs/ in the source, an mdBook; README.md points into it)\n\
         explains each feature with examples.\n",
    );
    out
}

/// One table: its header, what it is, and every key.
fn section_text(section: &Section) -> String {
    let mut out = format!(".SS {}\n", bold(section.header));
    out.push_str(&paragraphs(section.about));
    for key in section.keys {
        let tag = format!(
            "{} ({}; default: {})",
            bold(key.name),
            escape(key.ty),
            prose(&key.default_text())
        );
        out.push_str(&item(&tag, key.meaning));
    }
    out
}

const HEAD_5: &str = r#".SH DESCRIPTION
.B trigd
reads one TOML file, \fIconfig.toml\fR (\fB\-\-config\fR, default
\fI./config.toml\fR; \fI/etc/trigd/config.toml\fR for the packaged
service), and every \fI*.toml\fR file directly inside its \fBprograms_dir\fR
(names starting with \fB.\fR are ignored), one program per file.
.PP
Relative paths resolve against the directory of \fIconfig.toml\fR (a
function's \fBworkdir\fR against its program file's directory). Unknown keys
are errors; \fBtrigd check\fR reports every error with its file, line, column
and key. A changed file is loaded again while trigd serves (hot reload);
keys marked \(lqread at start only\(rq need a restart.
.PP
Durations are written \fB"250ms"\fR, \fB"60s"\fR, \fB"5m"\fR, \fB"1h"\fR,
\fB"7d"\fR, \fB"1m30s"\fR, or as an integer number of seconds; zero is
refused, and so is anything longer than \fB"3650d"\fR (about ten years).
Counts are integers of at least 1 unless said otherwise.
"#;
