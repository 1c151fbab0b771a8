//! adnanh/webhook hooks files (`[server] hooks_files`): reading the file as
//! webhook does — YAML, which JSON is a subset of, into JSON values, then
//! into typed hook definitions — with an error naming the file, the hook id
//! and the option for anything trigd does not carry (an unknown option, a
//! Go template, an unknown rule type or source).
//!
//! Owns: the file model ([`HookDef`], [`ArgDef`], [`RuleDef`], …) shared by
//! loading (`compile.rs` turns a definition into an endpoint) and by
//! `trigd import-webhook` (which prints it as native TOML).

use std::path::Path;

use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::yaml::{self, Pos};
use crate::config::file;

/// One hook as written in the file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct HookDef {
    /// `id`: the last part of the URL.
    #[serde(default, deserialize_with = "text")]
    pub id: String,
    /// `execute-command`.
    #[serde(default, deserialize_with = "text")]
    pub execute_command: String,
    /// `command-working-directory`.
    #[serde(default, deserialize_with = "text")]
    pub command_working_directory: String,
    /// `response-message`.
    #[serde(default, deserialize_with = "text")]
    pub response_message: String,
    /// `response-headers`.
    #[serde(default, deserialize_with = "list")]
    pub response_headers: Vec<HeaderDef>,
    /// `include-command-output-in-response`.
    #[serde(default, deserialize_with = "flag")]
    pub include_command_output_in_response: bool,
    /// `include-command-output-in-response-on-error`.
    #[serde(default, deserialize_with = "flag")]
    pub include_command_output_in_response_on_error: bool,
    /// `pass-environment-to-command`.
    #[serde(default, deserialize_with = "list")]
    pub pass_environment_to_command: Vec<ArgDef>,
    /// `pass-arguments-to-command`.
    #[serde(default, deserialize_with = "list")]
    pub pass_arguments_to_command: Vec<ArgDef>,
    /// `pass-file-to-command`.
    #[serde(default, deserialize_with = "list")]
    pub pass_file_to_command: Vec<ArgDef>,
    /// `parse-parameters-as-json`.
    #[serde(default, deserialize_with = "list")]
    pub parse_parameters_as_json: Vec<ArgDef>,
    /// `trigger-rule`.
    #[serde(default)]
    pub trigger_rule: Option<RuleDef>,
    /// `trigger-rule-mismatch-http-response-code` (0: 200).
    #[serde(default, deserialize_with = "int")]
    pub trigger_rule_mismatch_http_response_code: i64,
    /// `trigger-signature-soft-failures`.
    #[serde(default, deserialize_with = "flag")]
    pub trigger_signature_soft_failures: bool,
    /// `incoming-payload-content-type`.
    #[serde(default, deserialize_with = "text")]
    pub incoming_payload_content_type: String,
    /// `success-http-response-code` (0: 200).
    #[serde(default, deserialize_with = "int")]
    pub success_http_response_code: i64,
    /// `http-methods` (empty: any).
    #[serde(default, deserialize_with = "list")]
    pub http_methods: Vec<String>,
    /// Where the hook starts in its file (not an option).
    #[serde(skip)]
    pub at: Pos,
}

/// A `{"name": …, "value": …}` of `response-headers`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeaderDef {
    /// Header name.
    #[serde(default, deserialize_with = "text")]
    pub name: String,
    /// Header value.
    #[serde(default, deserialize_with = "text")]
    pub value: String,
}

/// A reference to a request value (webhook's "argument").
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArgDef {
    /// `source`: `header`, `url`/`query`, `payload`, `request`, `string`,
    /// `raw-request-body`, `entire-payload`, `entire-query`, `entire-headers`.
    #[serde(default, deserialize_with = "text")]
    pub source: String,
    /// `name`: key, dotted path, request field or the literal string.
    #[serde(default, deserialize_with = "text")]
    pub name: String,
    /// `envname`: environment variable name.
    #[serde(default, deserialize_with = "text")]
    pub envname: String,
    /// `base64decode` (files only).
    #[serde(default, deserialize_with = "flag")]
    pub base64decode: bool,
}

/// A rule: exactly one of its fields is used (the first set, in webhook's
/// order and, or, not, match).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleDef {
    /// `and`.
    #[serde(default)]
    pub and: Option<Vec<RuleDef>>,
    /// `or`.
    #[serde(default)]
    pub or: Option<Vec<RuleDef>>,
    /// `not`.
    #[serde(default)]
    pub not: Option<Box<RuleDef>>,
    /// `match`.
    #[serde(default, rename = "match")]
    pub matches: Option<MatchDef>,
}

/// A `match` rule.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct MatchDef {
    /// `type`.
    #[serde(default, rename = "type", deserialize_with = "text")]
    pub kind: String,
    /// `regex`.
    #[serde(default, deserialize_with = "text")]
    pub regex: String,
    /// `secret`.
    #[serde(default, deserialize_with = "text")]
    pub secret: String,
    /// `value`.
    #[serde(default, deserialize_with = "text")]
    pub value: String,
    /// `parameter`.
    #[serde(default)]
    pub parameter: ArgDef,
    /// `ip-range`.
    #[serde(default, deserialize_with = "text")]
    pub ip_range: String,
}

/// A string field: a YAML scalar of any kind reads as its text (as
/// webhook's YAML reader gives a number to a string field); null is "".
fn text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Null => String::new(),
        Value::String(s) => s,
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        // Its kind, never its content: the field may be a secret.
        Value::Array(_) => return Err(serde::de::Error::custom("expected a string, found a list")),
        Value::Object(_) => {
            return Err(serde::de::Error::custom(
                "expected a string, found a mapping",
            ))
        }
    })
}

/// A boolean field: `true`/`false`, or YAML 1.1's `yes`/`no`/`on`/`off`
/// (webhook's YAML reader takes those); null is false.
fn flag<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(false),
        Value::Bool(b) => Ok(b),
        Value::String(s) => match s.as_str() {
            "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" | "true" | "True" | "TRUE" => {
                Ok(true)
            }
            "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" | "false" | "False"
            | "FALSE" => Ok(false),
            _ => Err(serde::de::Error::custom(format!(
                "expected true or false, found \"{s}\""
            ))),
        },
        other => Err(serde::de::Error::custom(format!(
            "expected true or false, found {other}"
        ))),
    }
}

/// An integer field; null is 0.
fn int<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(0),
        Value::Number(n) => n
            .as_i64()
            .ok_or_else(|| serde::de::Error::custom(format!("expected an integer, found {n}"))),
        other => Err(serde::de::Error::custom(format!(
            "expected an integer, found {other}"
        ))),
    }
}

/// A list field; null is empty.
fn list<'de, D: Deserializer<'de>, T: serde::de::DeserializeOwned>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(Vec::new()),
        v => serde_json::from_value(v).map_err(serde::de::Error::custom),
    }
}

/// The most hooks trigd serves from its hooks files, all together (and
/// so in one file): every hook is an endpoint and a program kept in memory,
/// and every broken one an error line.
pub const MAX_HOOKS: usize = 10_000;

/// One hook of a file, or why it cannot be used.
pub type Parsed = Result<HookDef, HookError>;

/// A problem with one hook (or the whole file, without an id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookError {
    /// Where in the file: the hook's start, or the place of a problem with
    /// the whole file (`None`: the file as a whole, e.g. too big).
    pub at: Option<Pos>,
    /// Position of the hook in the file, when the problem is in one.
    pub index: Option<usize>,
    /// Its id, when it has one.
    pub id: Option<String>,
    /// What is wrong, naming the option.
    pub msg: String,
}

impl HookError {
    /// The key for messages: `hooks[2] "deploy"`.
    pub fn key(&self) -> String {
        match (&self.index, &self.id) {
            (Some(i), Some(id)) => format!("hooks[{i}] \"{id}\""),
            (Some(i), None) => format!("hooks[{i}]"),
            _ => String::new(),
        }
    }

    /// The error as a load error says it: `hooks.yaml:3:3: hooks[1]
    /// "typo": unknown field …`.
    pub fn in_file(&self, file: &str) -> String {
        let mut out = file.to_string();
        if let Some(at) = self.at {
            out.push_str(&format!(":{}:{}", at.line, at.col));
        }
        let key = self.key();
        if !key.is_empty() {
            out.push_str(&format!(": {key}"));
        }
        format!("{out}: {}", self.msg)
    }
}

/// Whether `text` holds no list of hooks at all: only white space or
/// comments, or `null` (a file with no hooks says `[]`). A reload does
/// not swap such a file in (`config::reload`), as it does not an empty one.
pub fn is_blank(text: &str) -> bool {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    matches!(
        yaml::parse(text),
        Ok(None)
            | Ok(Some(yaml::Doc {
                value: Value::Null,
                ..
            }))
    )
}

/// Read the hooks of one file's text: the entry point of loading, of
/// `trigd import-webhook` and of the `hooks_file` fuzz target. Bounded
/// whatever the text: at most `file::MAX_FILE_BYTES`, no alias, lists
/// and mappings nested at most `yaml::MAX_DEPTH` deep, at most
/// [`MAX_HOOKS`] hooks.
///
/// # Errors
/// The file is too big, not YAML/JSON or not a list of hooks (one error,
/// no index, located when it can be).
pub fn parse_file(text: &str) -> Result<Vec<Parsed>, HookError> {
    let whole = |at: Option<Pos>, msg: String| HookError {
        at,
        index: None,
        id: None,
        msg,
    };
    if file::over_limit(text) {
        return Err(whole(None, file::too_big_msg()));
    }
    // A byte order mark, as editors on Windows write one: not text.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let doc = match yaml::parse(text).map_err(|e| whole(Some(e.at), e.msg))? {
        None => return Ok(Vec::new()),
        Some(doc) => doc,
    };
    let items = match doc.value {
        Value::Null => Vec::new(),
        Value::Array(items) => items,
        _ => {
            let msg = "a hooks file is a list of hooks".into();
            return Err(whole(Some(Pos { line: 1, col: 1 }), msg));
        }
    };
    if let Some(at) = doc.items.get(MAX_HOOKS) {
        let msg = format!("a hooks file holds at most {MAX_HOOKS} hooks");
        return Err(whole(Some(*at), msg));
    }
    Ok(items
        .into_iter()
        .zip(doc.items)
        .enumerate()
        .map(|(i, (v, at))| hook(i, v, at))
        .collect())
}

/// Item `index` of the list, starting at `at`, typed.
fn hook(index: usize, v: Value, at: Pos) -> Parsed {
    let id = v.get("id").and_then(|i| match i {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    });
    let err = |msg: String| HookError {
        at: Some(at),
        index: Some(index),
        id: id.clone(),
        msg,
    };
    if !v.is_object() {
        return Err(err(
            "a hook is an object with an id and an execute-command".into()
        ));
    }
    if let Some(at) = template_at(&v, "") {
        return Err(err(format!(
            "option {at} holds a Go template ({{{{ … }}}}, webhook's -template); trigd reads hooks files as they are: write the value itself, or move to native config (trigd import-webhook) and use secret_env / secret_file"
        )));
    }
    let mut def: HookDef = serde_json::from_value(v).map_err(|e| err(e.to_string()))?;
    if def.id.is_empty() {
        return Err(err("option id is missing or empty".into()));
    }
    if let Some(why) = unreachable_path(&def.id) {
        return Err(err(format!(
            "option id \"{}\" can never be reached at /<hooks_url_prefix>/<id>: {why}",
            def.id
        )));
    }
    if def.execute_command.is_empty() {
        return Err(err("option execute-command is missing or empty".into()));
    }
    def.at = at;
    Ok(def)
}

/// Why no request path can name hook `id` (or a URL prefix), if none
/// can: the router drops empty path segments and answers 404 to a `.` or
/// `..` segment (as webhook's Go router cleans them away), and joins the
/// rest with `/`. Any other character is reachable, percent-encoded when
/// it must be.
pub(super) fn unreachable_path(id: &str) -> Option<&'static str> {
    id.split('/').find_map(|seg| match seg {
        "" => Some("it has an empty segment (a leading, trailing or doubled \"/\")"),
        "." | ".." => Some("it has a \".\" or \"..\" segment"),
        _ => None,
    })
}

/// The first option (dotted) whose text holds a Go template action.
fn template_at(v: &Value, at: &str) -> Option<String> {
    let join = |k: &str| {
        if at.is_empty() {
            k.to_string()
        } else {
            format!("{at}.{k}")
        }
    };
    match v {
        Value::String(s) => is_template(s).then(|| at.to_string()),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, x)| template_at(x, &format!("{at}[{i}]"))),
        Value::Object(m) => m.iter().find_map(|(k, x)| template_at(x, &join(k))),
        _ => None,
    }
}

/// Whether `s` holds `{{ … }}` with a Go template action inside.
fn is_template(s: &str) -> bool {
    let mut rest = s;
    while let Some(i) = rest.find("{{") {
        let after = rest[i + 2..].trim_start_matches('-').trim_start();
        let starts = [
            ".",
            "$",
            "/*",
            "getenv",
            "cat",
            "credential",
            "if ",
            "range ",
            "with ",
            "end",
            "else",
            "define ",
            "template ",
            "block ",
            "printf",
            "print ",
            "js ",
            "html ",
            "urlquery ",
            "index ",
            "len ",
        ];
        if starts.iter().any(|p| after.starts_with(p)) && after.contains("}}") {
            return true;
        }
        rest = &rest[i + 2..];
    }
    false
}

/// Whether `path` names a hooks file by its extension (`.json`, `.yaml`,
/// `.yml`); both are read the same way, as webhook does.
pub fn is_hooks_name(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("json" | "yaml" | "yml")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_and_yaml_read_alike() {
        let json = r#"[{"id": "a", "execute-command": "/bin/true", "http-methods": ["POST"],
            "trigger-rule": {"match": {"type": "value", "value": 1, "parameter": {"source": "url", "name": "x"}}}}]"#;
        let yaml = "- id: a\n  execute-command: /bin/true\n  http-methods: [POST]\n  trigger-rule:\n    match: {type: value, value: 1, parameter: {source: url, name: x}}\n";
        for text in [json, yaml] {
            let hooks = parse_file(text).unwrap();
            let h = hooks[0].as_ref().unwrap();
            assert_eq!(h.id, "a");
            assert_eq!(h.http_methods, ["POST"]);
            let m = h.trigger_rule.as_ref().unwrap().matches.as_ref().unwrap();
            assert_eq!(m.value, "1", "a number reads as its text");
        }
    }

    /// YAML 1.2, as docs/from-webhook.md says: a plain scalar not written
    /// as JSON writes a number stays the text written (it read `0755` as
    /// `755`, `0x1F` as `31`, `1e3` as `1e+3`: a rule's value or a secret
    /// silently changed).
    #[test]
    fn number_like_yaml_text_stays_as_written() {
        for v in [
            "010", "0755", "0x1F", "0o17", "+5", "1e3", "1_000", "-0", "2.50", "007",
        ] {
            let yaml = format!(
                "- id: a\n  execute-command: /bin/true\n  trigger-rule:\n    match: {{type: value, value: {v}, parameter: {{source: url, name: x}}}}\n"
            );
            let hooks = parse_file(&yaml).unwrap();
            let h = hooks[0].as_ref().unwrap();
            let m = h.trigger_rule.as_ref().unwrap().matches.as_ref().unwrap();
            assert_eq!(m.value, v, "{v}");
        }
    }

    /// A mistyped secret (a list, a mapping) is refused by its kind: its
    /// content went into the error, which the log and `/healthz` show.
    #[test]
    fn a_mistyped_field_is_not_quoted() {
        for secret in ["[hunter2-topsecret]", "{k: hunter2-topsecret}"] {
            let yaml = format!(
                "- id: a\n  execute-command: /bin/true\n  trigger-rule:\n    match: {{type: payload-hmac-sha1, parameter: {{source: header, name: X}}, secret: {secret}}}\n"
            );
            let err = parse_file(&yaml).unwrap()[0]
                .as_ref()
                .err()
                .unwrap()
                .msg
                .clone();
            assert!(!err.contains("hunter2"), "{err}");
            assert!(err.contains("expected a string"), "{err}");
        }
    }

    #[test]
    fn webhook_lenient_json_is_read() {
        // webhook's own test file: an `or` pair inside a list, trailing commas.
        let text = r#"[{"id": "x", "execute-command": "/bin/true", "trigger-rule": {"and": [
            "or": [{"match": {"type": "value", "value": "a", "parameter": {"source": "url", "name": "q"}}}],
            {"match": {"type": "value", "value": "b", "parameter": {"source": "url", "name": "r"}}},
        ],}}]"#;
        let hooks = parse_file(text).unwrap();
        let rule = hooks[0].as_ref().unwrap().trigger_rule.clone().unwrap();
        let and = rule.and.unwrap();
        assert!(and[0].or.is_some() && and[1].matches.is_some());
    }

    #[test]
    fn unknown_options_and_templates_are_errors() {
        let hooks =
            parse_file(r#"[{"id": "a", "execute-command": "x", "respone-message": "typo"}]"#)
                .unwrap();
        let e = hooks[0].as_ref().unwrap_err();
        assert!(e.msg.contains("respone-message"), "{e:?}");
        assert_eq!(e.key(), "hooks[0] \"a\"");
        let hooks = parse_file(
            r#"[{"id": "t", "execute-command": "x", "trigger-rule": {"match": {"type": "value", "secret": "{{ getenv \"S\" }}"}}}]"#,
        )
        .unwrap();
        let e = hooks[0].as_ref().unwrap_err();
        assert!(
            e.msg.contains("trigger-rule.match.secret") && e.msg.contains("Go template"),
            "{e:?}"
        );
        assert!(parse_file("{\"id\": 1}").is_err());
        assert!(parse_file("[").is_err());
        assert!(parse_file("").unwrap().is_empty());
        // A byte order mark is not text.
        let bom = parse_file("\u{feff}[{\"id\": \"x\", \"execute-command\": \"/bin/true\"}]");
        assert_eq!(bom.map(|h| h.len()).ok(), Some(1), "a file with a BOM");
        for blank in ["", " \n", "# none\n", "null", "~", "\u{feff}"] {
            assert!(is_blank(blank), "{blank:?}");
        }
        for not_blank in ["[]", "- id: x"] {
            assert!(!is_blank(not_blank), "{not_blank:?}");
        }
        assert!(!is_template("{{name}} is not an action"));
    }

    #[test]
    fn ids_no_path_can_name_are_refused_and_others_kept() {
        for id in ["..", ".", "a//b", "/a", "a/", "a/./b", "a/../b", "/"] {
            let text = format!(r#"[{{"id": "{id}", "execute-command": "x"}}]"#);
            let e = parse_file(&text).unwrap().remove(0).unwrap_err();
            assert!(e.msg.contains("can never be reached"), "{id}: {e:?}");
            assert_eq!(e.at, Some(Pos { line: 1, col: 2 }), "{id}");
        }
        // As webhook serves them (percent-encoded where they must be).
        for id in ["a/b", "...", ".a", "a b", "x?y#z", "%41", "é"] {
            let text = format!(r#"[{{"id": "{id}", "execute-command": "x"}}]"#);
            let def = parse_file(&text).unwrap().remove(0).unwrap();
            assert_eq!(def.id, id);
        }
    }

    #[test]
    fn errors_name_the_line_and_column() {
        let text = "- id: a\n  execute-command: x\n- id: b\n  execute-comand: x\n";
        let hooks = parse_file(text).unwrap();
        assert_eq!(hooks[0].as_ref().unwrap().at, Pos { line: 1, col: 3 });
        let e = hooks[1].as_ref().unwrap_err();
        assert_eq!(e.in_file("h.yaml").split(": ").next(), Some("h.yaml:3:3"));
        let e = parse_file("- id: a\n  x: &y 1\n  z: *y\n").unwrap_err();
        assert_eq!(e.in_file("h.yaml").split(": ").next(), Some("h.yaml:3:6"));
        let big = format!("[{}]", " ".repeat(file::MAX_FILE_BYTES as usize));
        let e = parse_file(&big).unwrap_err();
        assert_eq!((e.at, e.msg.contains("larger than 1 MiB")), (None, true));
    }
}
