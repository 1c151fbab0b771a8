//! Writing one value back into `config.toml`: the `public` switch of a
//! tool's environment, flipped from the browser or over HTTP.
//!
//! The file stays the one source of truth. The edit goes through
//! `toml_edit`, so every comment, blank line and key order survives; only
//! the one value changes (or one `public = …` line is added where the key
//! was absent). The edited text is validated with the ordinary loader
//! before it replaces the file, atomically (`state::file::write_atomic`: temp file
//! beside, fsync, rename, fsync the directory), keeping the file's mode. A
//! process-wide lock serializes edits, so two flips at once leave one of
//! the two states, never a torn file. The watcher then reloads the file like
//! any other edit.
//!
//! Whether the file can be written at all ([`writable`]) is decided before
//! anything is tried, so the pages can show the switch disabled with the
//! reason: a read-only mount (a Kubernetes ConfigMap), a file or directory
//! without write permission, or one whose mode has no write bit (an
//! operator's "hands off", respected even when trigd runs as root).

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use toml_edit::{DocumentMut, Item, TableLike, Value};

use crate::state::file as state_file;
use crate::sys;

/// Serializes edits of the config file within this process.
static EDIT: Mutex<()> = Mutex::new(());

/// Why an edit was not made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EditError {
    /// The file (or its directory) cannot be written; the reason.
    NotWritable(String),
    /// The file does not define the environment, or the edited file would
    /// not validate; what is wrong.
    Invalid(String),
}

/// The outcome of a successful [`set_public`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flip {
    /// The value in the file before.
    pub old: bool,
    /// The value in the file now.
    pub new: bool,
}

/// The file an edit of `path` writes: `path` with symlinks resolved, so
/// that a symlinked config is edited where it lives.
///
/// # Errors
/// The reason it cannot be written, in words for the pages.
pub fn writable(path: &Path) -> Result<PathBuf, String> {
    let real = fs::canonicalize(path)
        .map_err(|e| format!("{} cannot be resolved: {e}", path.display()))?;
    let dir = real
        .parent()
        .ok_or_else(|| format!("{} has no directory", real.display()))?;
    check_target(&real, "the config file")?;
    check_target(dir, "the directory of the config file")?;
    Ok(real)
}

/// One of the two places an atomic replace writes (the file, its dir).
fn check_target(p: &Path, what: &str) -> Result<(), String> {
    let meta =
        fs::metadata(p).map_err(|e| format!("{what} {} cannot be read: {e}", p.display()))?;
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o222 == 0 {
        return Err(format!(
            "{what} {} is read-only (mode {mode:04o})",
            p.display()
        ));
    }
    sys::may_write(p).map_err(|e| match e.raw_os_error() {
        Some(libc::EROFS) => format!(
            "{what} {} is on a read-only file system (a read-only mount, e.g. a Kubernetes ConfigMap)",
            p.display()
        ),
        Some(libc::EACCES | libc::EPERM) => format!(
            "trigd (uid {}) has no permission to write {what} {}",
            sys::effective_ids().0,
            p.display()
        ),
        _ => format!("{what} {} cannot be written: {e}", p.display()),
    })
}

/// Set `public = <public>` for environment `env` of tool `tool` in the
/// config file at `path`. Unchanged files are not rewritten.
///
/// # Errors
/// [`EditError::NotWritable`] when the file cannot be written (checked
/// first, and any failure of the write itself); [`EditError::Invalid`] when
/// the file does not define the environment or the result would not load.
pub fn set_public(path: &Path, tool: &str, env: &str, public: bool) -> Result<Flip, EditError> {
    let _guard = EDIT.lock().unwrap_or_else(|e| e.into_inner());
    let real = writable(path).map_err(EditError::NotWritable)?;
    let text = super::file::read_text(&real)
        .map_err(|e| EditError::NotWritable(format!("{} cannot be read: {e}", real.display())))?;
    let (edited, old) = edit_text(&text, tool, env, public).map_err(EditError::Invalid)?;
    if old == public {
        return Ok(Flip { old, new: public });
    }
    check_edited(path, &edited, tool, env, public)?;
    let mode = fs::metadata(&real)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0o600);
    state_file::write_atomic(&real, |f| {
        f.write_all(edited.as_bytes())?;
        f.set_permissions(fs::Permissions::from_mode(mode))
    })
    .map_err(|e| EditError::NotWritable(format!("{} cannot be replaced: {e}", real.display())))?;
    Ok(Flip { old, new: public })
}

/// Load the edited text as the config at `path` would load, and make sure
/// the switch reads as intended.
fn check_edited(
    path: &Path,
    edited: &str,
    tool: &str,
    env: &str,
    public: bool,
) -> Result<(), EditError> {
    let cfg = super::load_text(path, edited.to_string()).map_err(|errs| {
        let first = errs.first().map(ToString::to_string).unwrap_or_default();
        EditError::Invalid(format!(
            "the configuration would not validate after the edit ({} errors; first: {first})",
            errs.len()
        ))
    })?;
    let got = cfg
        .tools
        .get(tool)
        .and_then(|t| t.environments.get(env))
        .map(|e| e.public);
    if got != Some(public) {
        return Err(EditError::Invalid(format!(
            "after the edit, environment {env} of tool {tool} does not read as public = {public}"
        )));
    }
    Ok(())
}

/// `text` with `public = <public>` for `env` of `tool`, and the old value
/// (absent: false). Everything else of the text is kept as it was.
///
/// # Errors
/// The text does not parse, or does not define that environment.
pub fn edit_text(
    text: &str,
    tool: &str,
    env: &str,
    public: bool,
) -> Result<(String, bool), String> {
    let mut doc: DocumentMut = text
        .parse()
        .map_err(|e| format!("the config file does not parse: {e}"))?;
    let missing = || format!("the config file defines no environment {env} of tool {tool}");
    let tool_table = find_tool(doc.as_table_mut(), tool).ok_or_else(missing)?;
    let envs = tool_table
        .get_mut("environments")
        .and_then(Item::as_table_like_mut)
        .ok_or_else(missing)?;
    let env_item = envs.get_mut(env).ok_or_else(missing)?;
    if let Some(t) = env_item.as_table_mut() {
        if !t.is_dotted() {
            t.set_implicit(false); // a header-less table gets its header
        }
    }
    let env_table = env_item.as_table_like_mut().ok_or_else(missing)?;
    let old = match env_table.get_mut("public") {
        Some(item) => {
            let v = item
                .as_value_mut()
                .ok_or_else(|| format!("public of {tool}.{env} is not a value"))?;
            let old = v
                .as_bool()
                .ok_or_else(|| format!("public of {tool}.{env} is not a boolean"))?;
            let decor = v.decor().clone();
            *v = Value::from(public);
            *v.decor_mut() = decor;
            old
        }
        None => {
            env_table.insert("public", toml_edit::value(public));
            false
        }
    };
    Ok((doc.to_string(), old))
}

/// The `[[tools]]` entry (or inline `tools = [{…}]` entry) named `name`.
fn find_tool<'a>(root: &'a mut toml_edit::Table, name: &str) -> Option<&'a mut dyn TableLike> {
    let named = |t: &dyn TableLike| t.get("name").and_then(Item::as_str) == Some(name);
    match root.get_mut("tools")? {
        Item::ArrayOfTables(a) => a
            .iter_mut()
            .find(|t| named(*t))
            .map(|t| t as &mut dyn TableLike),
        Item::Value(Value::Array(a)) => a
            .iter_mut()
            .filter_map(Value::as_inline_table_mut)
            .find(|t| named(*t))
            .map(|t| t as &mut dyn TableLike),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"# top comment

[server]
listen = "127.0.0.1:0"   # where

[[tools]]
name = "other"
workspace = "ops"
[tools.environments.prod]
public = false

[[tools]]
# the inventory
name = "inventory"
workspace = "ops"

[tools.environments.production]
public    = false   # keep me
vars = { A = "1" }

[tools.environments.staging]
# no public key here
vars = { B = "2" }
"#;

    #[test]
    fn flips_only_the_one_value() {
        let (out, old) = edit_text(FILE, "inventory", "production", true).unwrap();
        assert!(!old);
        let want = FILE.replace(
            "public    = false   # keep me",
            "public    = true   # keep me",
        );
        assert_eq!(out, want);
        let (back, old) = edit_text(&out, "inventory", "production", false).unwrap();
        assert!(old);
        assert_eq!(back, FILE);
    }

    #[test]
    fn adds_a_missing_key_in_its_table() {
        let (out, old) = edit_text(FILE, "inventory", "staging", true).unwrap();
        assert!(!old);
        let want = FILE.replace(
            "vars = { B = \"2\" }\n",
            "vars = { B = \"2\" }\npublic = true\n",
        );
        assert_eq!(out, want);
        assert!(out.contains("[tools.environments.prod]\npublic = false\n"));
    }

    #[test]
    fn implicit_dotted_and_inline_tables() {
        let implicit = "[[tools]]\nname = \"t\"\n[tools.environments.e.vars]\nA = \"1\"\n";
        let (out, _) = edit_text(implicit, "t", "e", true).unwrap();
        let doc: toml::Value = toml::from_str(&out).unwrap();
        assert_eq!(
            doc["tools"][0]["environments"]["e"]["public"],
            toml::Value::Boolean(true)
        );
        assert_eq!(
            doc["tools"][0]["environments"]["e"]["vars"]["A"].as_str(),
            Some("1")
        );

        let dotted = "[[tools]]\nname = \"t\"\nenvironments.e.public = false # c\n";
        let (out, old) = edit_text(dotted, "t", "e", true).unwrap();
        assert!(!old);
        assert_eq!(
            out,
            "[[tools]]\nname = \"t\"\nenvironments.e.public = true # c\n"
        );

        let inline = "tools = [{ name = \"t\", environments = { e = { public = true } } }]\n";
        let (out, old) = edit_text(inline, "t", "e", false).unwrap();
        assert!(old);
        assert_eq!(out, inline.replace("public = true", "public = false"));
    }

    #[test]
    fn unknown_tool_or_environment() {
        for (t, e) in [("nope", "production"), ("inventory", "nope")] {
            let err = edit_text(FILE, t, e, true).unwrap_err();
            assert!(err.contains("defines no environment"), "{err}");
        }
        assert!(edit_text("[[tools]\n", "a", "b", true).is_err());
    }
}
