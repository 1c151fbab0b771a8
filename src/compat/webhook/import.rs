//! `trigd import-webhook FILE`: an adnanh/webhook hooks file as native
//! config — a `[[tools]]` entry with one endpoint trigger per hook (for
//! config.toml) and a program file with one function per hook — so that an
//! operator can move for good. Every hook gets a comment; what native config
//! cannot carry is a warning on stderr naming the hook and the option.
//!
//! Inline secrets never go into the output: each becomes `secret_file =
//! "secrets/<hook>-<n>"`, written (mode 0600) only with `--write-secrets`.

use std::fmt::Write as _;
use std::path::Path;

use crate::cli::error::Error;
use crate::compat::webhook::file::{parse_file, ArgDef, HookDef, HookError, MatchDef, RuleDef};
use crate::config::file;

/// The line between the config.toml part and the program file.
pub const PROGRAM_MARKER: &str = "# ---- programs/webhook-hooks.toml ----";

/// What `import-webhook` makes of one file.
pub struct Imported {
    /// The native TOML (both parts, split by [`PROGRAM_MARKER`]).
    pub toml: String,
    /// One line per thing that could not be carried over.
    pub warnings: Vec<String>,
    /// Secrets to write: file (relative to config.toml) and content.
    pub secrets: Vec<(String, String)>,
}

/// Run the command: print the TOML, the warnings on stderr, and write the
/// secrets under `write_secrets` when given.
///
/// # Errors
/// The file cannot be read or parsed, or a secret cannot be written.
pub fn run(file: &Path, program_id: u64, write_secrets: Option<&Path>) -> Result<(), Error> {
    let text = file::read_text(file)
        .map_err(|e| Error::Other(format!("cannot read {}: {e}", file.display())))?;
    let imported = import(&text, &file.display().to_string(), program_id)?;
    for w in &imported.warnings {
        eprintln!("warning: {w}");
    }
    print!("{}", imported.toml);
    match write_secrets {
        Some(dir) => write(dir, &imported.secrets)?,
        None if !imported.secrets.is_empty() => eprintln!(
            "warning: {} inline secret(s) are referenced as secrets/<hook>-<n>: write each one there (or run again with --write-secrets secrets)",
            imported.secrets.len()
        ),
        None => {}
    }
    Ok(())
}

/// Write each secret to `dir/<hook>-<n>`, mode 0600: into a new file
/// beside it, then renamed over it, so that a file already there keeps
/// neither its mode (a 0644 one stayed 0644) nor a symlink its target (the
/// secret was written through one, wherever it pointed).
fn write(dir: &Path, secrets: &[(String, String)]) -> Result<(), Error> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::Other(format!("cannot create {}: {e}", dir.display())))?;
    for (rel, secret) in secrets {
        let name = Path::new(rel).file_name().unwrap_or_default();
        let path = dir.join(name);
        let fail =
            |e: std::io::Error| Error::Other(format!("cannot write {}: {e}", path.display()));
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".{}.tmp", std::process::id()));
        let tmp = dir.join(tmp_name);
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .map_err(fail)?;
        let written = f.write_all(secret.as_bytes()).and_then(|()| f.sync_all());
        drop(f);
        let replaced = path.symlink_metadata().is_ok();
        if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, &path)) {
            let _ = std::fs::remove_file(&tmp);
            return Err(fail(e));
        }
        let verb = if replaced { "replaced" } else { "wrote" };
        eprintln!("{verb} {}", path.display());
    }
    Ok(())
}

/// Convert the text of a hooks file named `file`.
///
/// # Errors
/// The file is not a hooks file, or one of its hooks cannot be read.
pub fn import(text: &str, file: &str, program_id: u64) -> Result<Imported, Error> {
    let located = |e: HookError| Error::Other(e.in_file(file));
    let defs = parse_file(text).map_err(located)?;
    let mut out = Imported {
        toml: String::new(),
        warnings: Vec::new(),
        secrets: Vec::new(),
    };
    let mut triggers = String::new();
    let mut functions = String::new();
    for d in defs {
        let d = d.map_err(located)?;
        let mut h = HookOut {
            id: &d.id,
            name: name_of(&d.id),
            lost_leaf: false,
            warnings: Vec::new(),
            secrets: Vec::new(),
        };
        let (trigger, function) = h.hook(&d, program_id);
        triggers.push_str(&trigger);
        functions.push_str(&function);
        out.warnings.extend(h.warnings);
        out.secrets.extend(h.secrets);
    }
    let _ = write!(
        out.toml,
        "# Native config for {file} (trigd import-webhook).\n\
         # Add this part to config.toml; each hook is served at\n\
         # /tools/webhook/hooks/<name> (a public environment: no credentials).\n\n\
         [[workspaces]]\nname = \"webhook\"\nmembers = []\n\n\
         [[tools]]\nname = \"webhook\"\nworkspace = \"webhook\"\n\
         [tools.environments.hooks]\npublic = true\n{triggers}\n\
         {PROGRAM_MARKER}\n\
         # Save this part as programs/webhook-hooks.toml.\n\n\
         id = {program_id}\nname = \"webhook-hooks\"\nworkspace = \"webhook\"\n{functions}"
    );
    Ok(out)
}

/// A TOML string.
fn q(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// A trigger/function name for a hook id (`[A-Za-z0-9_-]+`).
fn name_of(id: &str) -> String {
    let n: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if n.is_empty() {
        "hook".into()
    } else {
        n
    }
}

/// An output name for an environment variable name (an identifier).
fn ident(s: &str) -> String {
    let mut n: String = s
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if n.is_empty() || n.starts_with(|c: char| c.is_ascii_digit()) {
        n.insert(0, '_');
    }
    n
}

/// One hook being converted.
struct HookOut<'a> {
    id: &'a str,
    name: String,
    /// A rule leaf could not be carried over: the rule must never match.
    lost_leaf: bool,
    warnings: Vec<String>,
    secrets: Vec<(String, String)>,
}

impl HookOut<'_> {
    fn warn(&mut self, msg: impl Into<String>) {
        self.warnings
            .push(format!("hook \"{}\": {}", self.id, msg.into()));
    }

    /// The `[[tools.triggers]]` entry and the `[[functions]]` entry.
    fn hook(&mut self, d: &HookDef, program_id: u64) -> (String, String) {
        if self.name != d.id {
            self.warn(format!(
                "served as \"{}\" (a trigger name is letters, digits, _ and -)",
                self.name
            ));
        }
        let mut outputs: Vec<String> = Vec::new();
        let mut values = Vec::new();
        for (i, a) in d.pass_arguments_to_command.iter().enumerate() {
            let out = format!("arg{i}");
            if let Some(v) = self.value(a, &format!("pass-arguments-to-command[{i}]")) {
                values.push(format!("{out} = {{ {v}, default = \"\" }}"));
                outputs.push(out);
            }
        }
        for (i, a) in d.pass_environment_to_command.iter().enumerate() {
            let env = if a.envname.is_empty() {
                format!("HOOK_{}", a.name)
            } else {
                a.envname.clone()
            };
            let out = ident(&env);
            if out != env {
                self.warn(format!("pass-environment-to-command[{i}]: the variable {env} is named {out} (an output name is an identifier)"));
            }
            if let Some(v) = self.value(a, &format!("pass-environment-to-command[{i}]")) {
                values.push(format!("{out} = {{ {v}, default = \"\" }}"));
                outputs.push(out);
            }
        }
        self.files(d, &mut outputs, &mut values);
        self.unsupported(d);
        let trigger = self.trigger(d, program_id, &values);
        let function = self.function(d, &outputs);
        (trigger, function)
    }

    fn files(&mut self, d: &HookDef, outputs: &mut Vec<String>, values: &mut Vec<String>) {
        for (i, a) in d.pass_file_to_command.iter().enumerate() {
            let env = if a.envname.is_empty() {
                format!("HOOK_{}", a.name.to_uppercase())
            } else {
                a.envname.clone()
            };
            if a.source == "raw-request-body" && !a.base64decode {
                let out = ident(&env);
                values.push(format!("{out} = {{ body = \"file\" }}"));
                outputs.push(out);
            } else {
                self.warn(format!("pass-file-to-command[{i}]: only the raw body can be passed as a file ({{ body = \"file\" }}); pass this value as an argument or variable instead"));
            }
        }
    }

    fn unsupported(&mut self, d: &HookDef) {
        if !d.parse_parameters_as_json.is_empty() {
            self.warn("parse-parameters-as-json is not carried over: a JSON text inside a value stays text");
        }
        if !d.incoming_payload_content_type.is_empty() {
            self.warn("incoming-payload-content-type is not carried over: the body is read by its Content-Type");
        }
        if !d.response_message.is_empty() {
            self.warn("response-message is not carried over: the answer is trigd's JSON (\"Program started.\")");
        }
        if d.include_command_output_in_response_on_error {
            self.warn("include-command-output-in-response-on-error: a failed run answers run_failed with its Stdout and Stderr");
        }
        if d.http_methods.len() > 1 {
            self.warn(format!(
                "http-methods: a trigger has one method; {} is used",
                d.http_methods[0].trim()
            ));
        }
    }

    fn trigger(&mut self, d: &HookDef, program_id: u64, values: &[String]) -> String {
        let mut t = String::new();
        let _ = writeln!(t, "\n# hook \"{}\": {}", self.id, d.execute_command);
        let method = d
            .http_methods
            .first()
            .map_or("POST".to_string(), |m| m.trim().to_ascii_uppercase());
        if d.http_methods.is_empty() {
            t.push_str("# webhook took any method; a trigger takes one\n");
        }
        let _ = write!(
            t,
            "[[tools.triggers]]\nkind = \"endpoint\"\nname = {}\nmethod = {}\nprogram = {program_id}\nfunction = {}\n",
            q(&self.name),
            q(&method),
            q(&self.name)
        );
        if let Some(r) = &d.trigger_rule {
            let mut n = 0;
            let rule = self.rule(r, "trigger-rule", &mut n);
            match rule {
                // Leaving a leaf out would let more requests run than the
                // original: a rule with a lost leaf never matches.
                _ if self.lost_leaf => {
                    self.warn("its trigger-rule never matches until you rewrite it (a part could not be carried over)");
                    let _ = writeln!(
                        t,
                        "rule = {{ literal = \"rewrite this rule\", equals = \"\" }}"
                    );
                }
                Some(rule) => {
                    let _ = writeln!(t, "rule = {rule}");
                }
                None => {}
            }
        }
        if !values.is_empty() {
            let _ = writeln!(t, "values = {{ {} }}", values.join(", "));
        }
        let _ = writeln!(t, "{}", self.response(d));
        t
    }

    fn response(&mut self, d: &HookDef) -> String {
        let mut r = vec![format!(
            "run_async = {}",
            !d.include_command_output_in_response
        )];
        if let Some(s) = super::compile::known_status(d.success_http_response_code) {
            if (200..=299).contains(&s) {
                r.push(format!("status = {s}"));
            } else {
                self.warn(format!("success-http-response-code {s} is not carried over (a success status is 200-299)"));
            }
        }
        if let Some(s) = super::compile::known_status(d.trigger_rule_mismatch_http_response_code) {
            if (200..=499).contains(&s) {
                r.push(format!("ignored_status = {s}"));
            } else {
                self.warn(format!(
                    "trigger-rule-mismatch-http-response-code {s} is not carried over (200-499)"
                ));
            }
        }
        let headers: Vec<String> = d
            .response_headers
            .iter()
            .map(|h| format!("{} = {}", q(&h.name), q(&h.value)))
            .collect();
        if !headers.is_empty() {
            r.push(format!("headers = {{ {} }}", headers.join(", ")));
        }
        format!("response = {{ {} }}", r.join(", "))
    }

    fn function(&mut self, d: &HookDef, outputs: &[String]) -> String {
        let mut argv = vec![q(&d.execute_command)];
        argv.extend(
            outputs
                .iter()
                .filter(|o| o.starts_with("arg"))
                .map(|o| q(&format!("{{{o}}}"))),
        );
        let mut f = format!(
            "\n# hook \"{}\"\n[[functions]]\nname = {}\ncommand = [{}]\noutput = \"text\"\n",
            self.id,
            q(&self.name),
            argv.join(", ")
        );
        // A program file's relative paths resolve against programs/; a
        // hooks file's against config.toml's directory, one up.
        let cwd = &d.command_working_directory;
        let workdir = match cwd.as_str() {
            "" => "..".to_string(),
            c if Path::new(c).is_absolute() => c.to_string(),
            c => format!("../{c}"),
        };
        let _ = writeln!(f, "workdir = {}", q(&workdir));
        let outs: Vec<String> = outputs.iter().map(|o| q(o)).collect();
        // Outputs on the function, no Webhook Trigger: only the tool
        // trigger reaches it, not `POST /api`.
        let _ = writeln!(f, "outputs = [{}]", outs.join(", "));
        f
    }

    /// A value source as native keys (`json = "a.b"` style), or a warning.
    fn value(&mut self, a: &ArgDef, at: &str) -> Option<String> {
        Some(match a.source.as_str() {
            "header" => format!("header = {}", q(&a.name)),
            "url" | "query" => format!("query = {}", q(&a.name)),
            "payload" => match a.name.strip_prefix("root.") {
                // webhook puts a JSON array body under "root"; natively the
                // array is the payload itself.
                Some(rest) if rest.starts_with(|c: char| c.is_ascii_digit()) => {
                    self.warn(format!("{at}: payload \"{}\" is read as \"{rest}\" (a JSON array body is the payload itself)", a.name));
                    format!("payload = {}", q(rest))
                }
                _ => format!("payload = {}", q(&a.name)),
            },
            "string" => format!("literal = {}", q(&a.name)),
            "raw-request-body" => "body = \"text\"".into(),
            "entire-payload" => "whole = \"payload\"".into(),
            "entire-query" => "whole = \"query\"".into(),
            "entire-headers" => "whole = \"headers\"".into(),
            "request" if a.name.eq_ignore_ascii_case("method") => "request = \"method\"".into(),
            "request" if a.name.eq_ignore_ascii_case("remote-addr") => {
                self.warn(format!(
                    "{at}: request remote-addr is the client address without its port"
                ));
                "request = \"remote_addr\"".into()
            }
            other => {
                self.warn(format!("{at}: source \"{other}\" cannot be carried over"));
                return None;
            }
        })
    }

    /// A rule as a native inline table; `n` counts secrets.
    fn rule(&mut self, r: &RuleDef, at: &str, n: &mut usize) -> Option<String> {
        let mut list = |all: &[RuleDef], op: &str, n: &mut usize| {
            let items: Vec<String> = all
                .iter()
                .enumerate()
                .filter_map(|(i, c)| self.rule(c, &format!("{at}.{op}[{i}]"), n))
                .collect();
            format!("{{ {op} = [{}] }}", items.join(", "))
        };
        if let Some(all) = &r.and {
            return Some(list(all, "and", n));
        }
        if let Some(any) = &r.or {
            return Some(list(any, "or", n));
        }
        if let Some(inner) = &r.not {
            let inner = self.rule(inner, &format!("{at}.not"), n)?;
            return Some(format!("{{ not = {inner} }}"));
        }
        let m = r.matches.as_ref()?;
        self.leaf(m, &format!("{at}.match"), n)
    }

    fn leaf(&mut self, m: &MatchDef, at: &str, n: &mut usize) -> Option<String> {
        let hmac = |algo: &str, this: &mut Self, n: &mut usize| {
            if m.parameter.source != "header" {
                this.warn(format!(
                    "{at}: a signature is read from a header only; this one comes from {}",
                    m.parameter.source
                ));
                this.lost_leaf = true;
                return None;
            }
            *n += 1;
            let file = format!("secrets/{}-{n}", this.name);
            this.secrets.push((file.clone(), m.secret.clone()));
            Some(format!(
                "{{ signature = {{ scheme = \"hmac-{algo}\", header = {}, prefix = \"{algo}=\", secret_file = {} }} }}",
                q(&m.parameter.name),
                q(&file)
            ))
        };
        match m.kind.as_str() {
            "value" | "regex" => {
                let Some(src) = self.value(&m.parameter, at) else {
                    self.lost_leaf = true;
                    return None;
                };
                let (op, v) = if m.kind == "value" {
                    ("equals", &m.value)
                } else {
                    ("regex", &m.regex)
                };
                Some(format!("{{ {src}, {op} = {} }}", q(v)))
            }
            "payload-hmac-sha1" | "payload-hash-sha1" => hmac("sha1", self, n),
            "payload-hmac-sha256" | "payload-hash-sha256" => hmac("sha256", self, n),
            "payload-hmac-sha512" | "payload-hash-sha512" => hmac("sha512", self, n),
            "ip-whitelist" => {
                let ranges: Vec<String> = m.ip_range.split_whitespace().map(q).collect();
                Some(format!("{{ client_ip = [{}] }}", ranges.join(", ")))
            }
            other => {
                self.warn(format!(
                    "{at}: match type \"{other}\" cannot be carried over"
                ));
                self.lost_leaf = true;
                None
            }
        }
    }
}
