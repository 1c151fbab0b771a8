//! Small validating helpers used while turning [`super::raw`] into the model:
//! durations, names and identifiers, sha256 hex, HTTP methods, `{name}`
//! templates, byte offset → line/column, [`Errors`], the located error
//! list that `validate.rs` fills, and what the validators share: [`parse`],
//! [`Known`] programs, [`workspace_ref`], [`config_dir`] and [`par_map`].
//!
//! The parsers are pure and return a human sentence on error; [`Errors`]
//! attaches the file, position and key. Templates report the byte offset of
//! the problem inside the string so the column can point at the offending
//! brace, not just at the start of the string.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use toml::Spanned;

use super::raw::{self, RawDuration};
use super::{ConfigError, Piece, Program, Template, TriggerKind};
use crate::http::Method;

/// The longest duration a setting takes: 3650 days, about ten years. No
/// timeout, window or grace of trigd needs more, and a deadline made of a
/// longer one (`Instant::now() + d`) could overflow: with `timeout =
/// 9223372036854775807` every run of the function panicked (`500
/// internal_error`).
pub const MAX_DURATION: Duration = Duration::from_secs(3650 * 86_400);

/// `d`, unless it is longer than [`MAX_DURATION`]; `written` is how the
/// setting wrote it.
fn at_most_max(d: Duration, written: &str) -> Result<Duration, String> {
    if d > MAX_DURATION {
        return Err(format!(
            "duration {written} is too long: at most \"3650d\" (about ten years, {} seconds)",
            MAX_DURATION.as_secs()
        ));
    }
    Ok(d)
}

/// Parse a duration written as `"250ms"`, `"60s"`, `"5m"`, `"1h"` or a
/// combination like `"1m30s"` (humantime's syntax). Zero is rejected, and
/// so is a duration past [`MAX_DURATION`].
///
/// # Errors
/// A sentence saying what is accepted, when `s` is empty, malformed, zero
/// or too long.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || {
        format!(
            "invalid duration \"{s}\": write a number with a unit (\"250ms\", \"60s\", \
             \"5m\", \"1h\", \"7d\", \"1m30s\") or an integer number of seconds"
        )
    };
    if s.trim() != s {
        return Err(bad());
    }
    let total = humantime::parse_duration(s).map_err(|_| bad())?;
    if total.is_zero() {
        return Err(format!("duration \"{s}\" must be greater than zero"));
    }
    at_most_max(total, &format!("\"{s}\""))
}

/// A duration given as an integer number of seconds; must be at least 1
/// and at most [`MAX_DURATION`].
///
/// # Errors
/// When `secs` is zero, negative or too long.
pub fn duration_from_secs(secs: i64) -> Result<Duration, String> {
    match u64::try_from(secs) {
        Ok(n) if n > 0 => at_most_max(Duration::from_secs(n), &secs.to_string()),
        _ => Err(format!(
            "duration {secs} must be a positive number of seconds"
        )),
    }
}

/// Whether `s` matches `[A-Za-z0-9_-]+`: names that appear in URLs (tools,
/// environments, triggers, workspaces, users, functions).
pub fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Whether `s` is an identifier `[A-Za-z_][A-Za-z0-9_]*` (outputs,
/// environment variable names, placeholder names).
pub fn is_ident(s: &str) -> bool {
    let mut bytes = s.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Parse 64 hex digits (either case) into the 32 bytes of a sha256.
///
/// # Errors
/// When `s` is not exactly 64 hex digits.
pub fn parse_sha256(s: &str) -> Result<[u8; 32], String> {
    let mut out = [0u8; 32];
    if s.len() != 64 || hex::decode_to_slice(s, &mut out).is_err() {
        return Err(format!(
            "sha256 must be 64 hex digits, got {} characters; `trigd keygen` prints one",
            s.chars().count()
        ));
    }
    Ok(out)
}

/// The HTTP methods an endpoint trigger may use.
pub const METHODS: [Method; 5] = [
    Method::Get,
    Method::Post,
    Method::Put,
    Method::Patch,
    Method::Delete,
];

/// Parse an HTTP method case-insensitively.
///
/// # Errors
/// When it is not one of [`METHODS`].
pub fn parse_method(s: &str) -> Result<Method, String> {
    let m = Method::parse(s);
    if METHODS.contains(&m) {
        Ok(m)
    } else {
        let names: Vec<&str> = METHODS.iter().map(|m| m.as_str()).collect();
        Err(format!(
            "unknown method \"{s}\"; use one of {}",
            names.join(", ")
        ))
    }
}

/// Parse a tool trigger's `kind`.
///
/// # Errors
/// When it is not `endpoint`, the only kind.
pub fn parse_trigger_kind(s: &str) -> Result<TriggerKind, String> {
    match s {
        "endpoint" => Ok(TriggerKind::Endpoint),
        _ => Err(format!(
            "unknown trigger kind \"{s}\"; the only kind is \"endpoint\""
        )),
    }
}

/// A template problem: byte offset inside the string and a sentence.
pub type TemplateError = (usize, String);

/// Parse `s` as a template. Only `{name}` with `name` an identifier
/// `[A-Za-z_][A-Za-z0-9_]*` is a placeholder, and it must be one of
/// `inputs`; `{{name}}` is the literal text `{name}`. Every other brace is
/// literal, so JSON in an argument (`{"k": [1, 2]}`) needs no escaping.
///
/// # Errors
/// The byte offset of a placeholder that names no input, and why.
pub fn parse_template(s: &str, inputs: &[String]) -> Result<Template, TemplateError> {
    let mut pieces = Vec::new();
    let mut lit = String::new();
    let mut i = 0;
    while i < s.len() {
        let rest = &s[i..];
        let escaped = rest.strip_prefix("{{").and_then(ident_in_braces);
        if let Some(name) = escaped.filter(|n| rest[n.len() + 3..].starts_with('}')) {
            // `{{name}}`: the literal text `{name}`.
            lit.push_str(&rest[1..name.len() + 3]);
            i += name.len() + 4;
        } else if let Some(name) = rest.strip_prefix('{').and_then(ident_in_braces) {
            let index = inputs
                .iter()
                .position(|n| n == name)
                .ok_or_else(|| (i, no_input(name, inputs)))?;
            if !lit.is_empty() {
                pieces.push(Piece::Lit(lit.as_str().into()));
                lit.clear();
            }
            pieces.push(Piece::Var(index));
            i += name.len() + 2;
        } else {
            let c = rest.chars().next().unwrap_or_default();
            lit.push(c);
            i += c.len_utf8();
        }
    }
    if !lit.is_empty() {
        pieces.push(Piece::Lit(lit.as_str().into()));
    }
    // Kept for the life of the config: no spare capacity.
    pieces.shrink_to_fit();
    Ok(Template(pieces))
}

/// If `s` starts with `name}` where `name` is an identifier, that name.
fn ident_in_braces(s: &str) -> Option<&str> {
    let end = s.find('}')?;
    let name = &s[..end];
    is_ident(name).then_some(name)
}

fn no_input(name: &str, inputs: &[String]) -> String {
    let known = if inputs.is_empty() {
        "this function has no inputs (declare them as `outputs = [...]` on the function)"
            .to_string()
    } else {
        format!("its inputs are [{}]", inputs.join(", "))
    };
    format!("placeholder `{{{name}}}` names no input of this function; {known}; write `{{{{{name}}}}}` for the literal text")
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
/// An offset past the end, or inside a character, is clamped.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |p| p + 1);
    (line, before[line_start..].chars().count() + 1)
}

/// An error with no position.
pub fn error(file: &Path, key: &str, msg: String) -> ConfigError {
    ConfigError {
        file: file.to_path_buf(),
        line: 0,
        col: 0,
        key: key.into(),
        msg,
    }
}

/// One file being checked, for locating errors.
#[derive(Clone, Copy)]
pub struct Src<'a> {
    /// The file, as named in errors.
    pub file: &'a Path,
    /// Its text, for line and column.
    pub text: &'a str,
}

/// Errors found so far.
#[derive(Default)]
pub struct Errors(pub Vec<ConfigError>);

impl Errors {
    /// Record `msg` at byte range `span` of `src`.
    pub fn at(
        &mut self,
        src: &Src,
        span: Range<usize>,
        key: impl Into<String>,
        msg: impl Into<String>,
    ) {
        let (line, col) = line_col(src.text, span.start);
        let (file, key, msg) = (src.file.to_path_buf(), key.into(), msg.into());
        self.0.push(ConfigError {
            file,
            line,
            col,
            key,
            msg,
        });
    }

    /// Record `msg` unless `name` matches `[A-Za-z0-9_-]+`.
    pub fn name(&mut self, src: &Src, name: &Spanned<String>, key: &str, what: &str) {
        if !is_name(name.get_ref()) {
            let msg = format!(
                "{what} name \"{}\" must match [A-Za-z0-9_-]+ (it appears in URLs)",
                name.get_ref()
            );
            self.at(src, name.span(), key, msg);
        }
    }

    /// Record a duplicate unless `name` is new to `seen` (name → first key).
    pub fn unique(
        &mut self,
        src: &Src,
        seen: &mut HashMap<String, String>,
        name: &Spanned<String>,
        key: &str,
        what: &str,
    ) {
        if let Some(first) = seen.get(name.get_ref()) {
            let msg = format!("duplicate {what} \"{}\" (first at {first})", name.get_ref());
            self.at(src, name.span(), key, msg);
        } else {
            seen.insert(name.get_ref().clone(), key.to_string());
        }
    }
}

/// A count that must be at least `min`, or `default` when absent.
pub fn count(
    src: &Src,
    v: &raw::Count,
    key: &str,
    default: usize,
    min: i64,
    errs: &mut Errors,
) -> usize {
    let Some(v) = v else { return default };
    match usize::try_from(*v.get_ref()) {
        Ok(n) if *v.get_ref() >= min => n,
        _ => {
            let msg = format!("must be at least {min}, got {}", v.get_ref());
            errs.at(src, v.span(), key, msg);
            default
        }
    }
}

/// [`count`], and at most `max`: past it an error, and `default`.
pub fn count_within(
    src: &Src,
    v: &raw::Count,
    key: &str,
    (default, min, max): (usize, i64, usize),
    errs: &mut Errors,
) -> usize {
    let n = count(src, v, key, default, min, errs);
    match v {
        Some(raw) if n > max => {
            let msg = format!("must be from {min} to {max}, got {}", raw.get_ref());
            errs.at(src, raw.span(), key, msg);
            default
        }
        _ => n,
    }
}

/// A duration, or `default` when absent or invalid (invalid is recorded).
pub fn duration(
    src: &Src,
    v: Option<&Spanned<RawDuration>>,
    key: &str,
    default: Duration,
    errs: &mut Errors,
) -> Duration {
    let Some(v) = v else { return default };
    let parsed = match v.get_ref() {
        RawDuration::Secs(n) => duration_from_secs(*n),
        RawDuration::Text(s) => parse_duration(s),
    };
    parsed.unwrap_or_else(|msg| {
        errs.at(src, v.span(), key, msg);
        default
    })
}

/// Environment variables; names must be identifiers.
pub fn env_vars(
    src: &Src,
    vars: &BTreeMap<Spanned<String>, String>,
    key: &str,
    errs: &mut Errors,
) -> BTreeMap<String, String> {
    for name in vars.keys().filter(|n| !is_ident(n.get_ref())) {
        let msg = format!(
            "environment variable name \"{}\" must match [A-Za-z_][A-Za-z0-9_]*",
            name.get_ref()
        );
        errs.at(src, name.span(), format!("{key}.{}", name.get_ref()), msg);
    }
    vars.iter()
        .map(|(k, v)| (k.get_ref().clone(), v.clone()))
        .collect()
}

/// One template per argument; errors point inside the string.
pub fn templates(
    src: &Src,
    args: &[Spanned<String>],
    key: &str,
    inputs: &[String],
    errs: &mut Errors,
) -> Option<Vec<Template>> {
    let mut out = Vec::with_capacity(args.len());
    let mut ok = true;
    for (j, a) in args.iter().enumerate() {
        match parse_template(a.get_ref(), inputs) {
            Ok(t) => out.push(t),
            Err((offset, msg)) => {
                errs.at(src, inner(src.text, a, offset), format!("{key}[{j}]"), msg);
                ok = false;
            }
        }
    }
    ok.then_some(out)
}

/// The text range of byte `offset` of string value `v`: exact for a string
/// written without escapes, else the start of the string.
pub fn inner(text: &str, v: &Spanned<String>, offset: usize) -> Range<usize> {
    let start = v.span().start + 1;
    let written = text.get(start..start + offset);
    let at = if written.is_some() && written == v.get_ref().get(..offset) {
        start + offset
    } else {
        v.span().start
    };
    at..at
}

/// The directory holding `path`; `.` when it has none.
pub fn config_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// `items.iter().map(f).collect()`, on as many threads as there are cores,
/// the calling thread among them. Each thread takes the next block of
/// [`PAR_BLOCK`] items until none is left, so a thread the scheduler holds
/// back (another process on its core) leaves its share to the others
/// instead of making every thread wait for it; the results are put back in
/// the order of `items`. Small inputs stay on the calling thread.
pub fn par_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = crate::sys::cores();
    if threads < 2 || items.len() < 64 {
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let work = || {
        let mut done: Vec<(usize, Vec<R>)> = Vec::new();
        loop {
            let start = next.fetch_add(PAR_BLOCK, Ordering::Relaxed);
            if start >= items.len() {
                return done;
            }
            let block = &items[start..items.len().min(start + PAR_BLOCK)];
            done.push((start, block.iter().map(&f).collect()));
        }
    };
    let mut blocks = std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads).map(|_| scope.spawn(work)).collect();
        let mut blocks = work();
        for h in helpers {
            blocks.extend(h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)));
        }
        blocks
    });
    blocks.sort_unstable_by_key(|b| b.0);
    let mut out = Vec::with_capacity(items.len());
    out.extend(blocks.into_iter().flat_map(|b| b.1));
    out
}

/// Items a thread of [`par_map`] takes at a time: small enough that the
/// threads end within a few files of each other, large enough that taking
/// one costs nothing next to its files.
const PAR_BLOCK: usize = 32;

/// What is known about the programs while checking references to them.
pub struct Known<'a> {
    /// Programs loaded so far, by id.
    pub programs: &'a BTreeMap<u64, std::sync::Arc<Program>>,
    /// Ids of files that are valid TOML but not valid programs.
    pub broken: BTreeSet<u64>,
    /// False when some program file could not be read or parsed at all, so
    /// a missing id may just be hidden.
    pub complete: bool,
    /// False when `config.toml` itself does not parse: its workspaces are
    /// unknown, so a program naming one is not reported.
    pub workspaces_known: bool,
}

impl Known<'_> {
    /// Whether a reference to program `id` should be reported as dangling.
    pub fn missing(&self, id: i64) -> bool {
        let id = u64::try_from(id).ok();
        self.complete
            && !id.is_some_and(|id| self.programs.contains_key(&id) || self.broken.contains(&id))
    }
}

/// Parse `src` into `T`, recording a located error on failure.
pub fn parse<T: serde::de::DeserializeOwned>(src: &Src, errs: &mut Errors) -> Option<T> {
    match raw::parse::<T>(src.text) {
        Ok(v) => Some(v),
        Err(e) => {
            let span = e.span.unwrap_or(0..0);
            errs.at(
                src,
                span.clone(),
                raw::key_at(src.text, span.start),
                e.message,
            );
            None
        }
    }
}

/// Record an error unless `ws` names a workspace.
pub fn workspace_ref<T>(
    src: &Src,
    ws: &Spanned<String>,
    all: &BTreeMap<String, T>,
    key: String,
    errs: &mut Errors,
) {
    if !all.contains_key(ws.get_ref()) {
        let msg = format!(
            "workspace \"{}\" is not a [[workspaces]] entry",
            ws.get_ref()
        );
        errs.at(src, ws.span(), key, msg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn inputs() -> Vec<String> {
        vec!["volume".into(), "label".into()]
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("1m 30s"), Ok(Duration::from_secs(90)));
        for bad in ["", "5", "s", "5x", "-1s", " 5s", "5s ", "m5"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
        assert!(parse_duration("0s")
            .unwrap_err()
            .contains("greater than zero"));
        assert_eq!(duration_from_secs(3), Ok(Duration::from_secs(3)));
        assert!(duration_from_secs(0).is_err());
        assert!(duration_from_secs(-2).is_err());
    }

    #[test]
    fn durations_past_ten_years_are_refused() {
        assert_eq!(parse_duration("3650d"), Ok(MAX_DURATION));
        assert_eq!(duration_from_secs(315_360_000), Ok(MAX_DURATION));
        for long in ["3651d", "11y", "18446744073709551615s", "5000000000000s"] {
            let e = parse_duration(long).unwrap_err();
            assert!(e.contains("too long") && e.contains("3650d"), "{long}: {e}");
        }
        for long in [315_360_001, i64::MAX] {
            let e = duration_from_secs(long).unwrap_err();
            assert!(
                e.contains(&long.to_string()) && e.contains("too long"),
                "{e}"
            );
        }
    }

    #[test]
    fn names_and_idents() {
        assert!(is_name("list-items_2"));
        assert!(!is_name("") && !is_name("a b") && !is_name("a/b") && !is_name("é"));
        assert!(is_ident("_a1") && is_ident("Volume"));
        assert!(!is_ident("1a") && !is_ident("a-b") && !is_ident(""));
    }

    #[test]
    fn sha256_and_methods() {
        let hex = "Ab".repeat(32);
        assert_eq!(parse_sha256(&hex), Ok([0xab; 32]));
        assert!(parse_sha256("abc").is_err());
        assert!(parse_sha256(&"zz".repeat(32)).is_err());
        assert_eq!(parse_method("patch"), Ok(Method::Patch));
        assert!(parse_method("HEAD").is_err());
    }

    #[test]
    fn templates() {
        let t = parse_template("--out={label}/{{x}}{volume}", &inputs()).unwrap();
        assert_eq!(
            t.0,
            vec![
                Piece::Lit("--out=".into()),
                Piece::Var(1),
                Piece::Lit("/{x}".into()),
                Piece::Var(0)
            ]
        );
        assert_eq!(t.render(&["v".into(), "l".into()]), "--out=l/{x}v");
        assert_eq!(
            parse_template("plain", &[]).unwrap().0,
            vec![Piece::Lit("plain".into())]
        );
    }

    #[test]
    fn other_braces_are_literal() {
        for s in [
            r#"{"k": [1, 2], "s": "t"}"#,
            "{a-b}",
            "{}",
            "x}y",
            "ab{volume",
            "${#1}",
            r#"{"a":{"b":1}}"#,
        ] {
            let t = parse_template(s, &inputs()).unwrap();
            assert_eq!(t.render(&[]), s, "{s}");
        }
        let t = parse_template(r#"{"v": "{volume}"}"#, &inputs()).unwrap();
        assert_eq!(t.render(&["x\"y".into(), "l".into()]), r#"{"v": "x"y"}"#);
    }

    #[test]
    fn template_errors() {
        let err = |s: &str| parse_template(s, &inputs()).unwrap_err();
        assert_eq!(err("é{nope}").0, 2);
        assert!(err("{nope}").1.contains("names no input"));
        assert!(parse_template("{x}", &[])
            .unwrap_err()
            .1
            .contains("no inputs"));
    }

    #[test]
    fn line_cols() {
        let text = "ab\ncdé\nf";
        assert_eq!(line_col(text, 0), (1, 1));
        assert_eq!(line_col(text, 3), (2, 1));
        assert_eq!(line_col(text, 7), (2, 4));
        assert_eq!(line_col(text, 8), (3, 1));
        assert_eq!(line_col(text, 100), (3, 2));
    }

    /// Placeholder and output errors point inside the string / array.
    #[test]
    fn webhook_outputs_and_placeholders() {
        let text = String::from("id = 1\nname = \"p\"\n[[functions]]\nname = \"f\"\ncommand = [\"x\", \"--a={nope}\", \"{{ok}}\", \"b}\", \"{open\"]\n[functions.webhook]\noutputs = [\n  \"volume\",\n  \"bad-name\",\n  \"volume\",\n]\n");
        let prog = [(PathBuf::from("programs/a.toml"), text)];
        let got: Vec<String> = match super::super::load_str(Path::new("config.toml"), "", &prog) {
            Ok(_) => panic!("expected errors"),
            Err(errs) => errs.iter().map(ToString::to_string).collect(),
        };
        let want = [
            "programs/a.toml:5:22: functions[0].command[1]: placeholder `{nope}` names no input of this function; its inputs are [volume, bad-name, volume]",
            "programs/a.toml:9:3: functions[0].webhook.outputs[1]: output \"bad-name\" must be an identifier",
            "programs/a.toml:10:3: functions[0].webhook.outputs[2]: duplicate output \"volume\" (first at functions[0].webhook.outputs[0])",
        ];
        assert_eq!(got.len(), want.len(), "{got:#?}");
        for (g, w) in got.iter().zip(want) {
            assert!(g.starts_with(w), "{g:?} does not start with {w:?}");
        }
    }
}
