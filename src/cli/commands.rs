//! The small subcommands: `check`, `keygen`, `hash-password` and `run`.
//! (`serve` lives in `server.rs`.)

use std::io::{self, BufRead, Write};
use std::path::Path;
use std::sync::Arc;

use argon2::password_hash::{PasswordHasher, SaltString};
use argon2::Argon2;
use serde_json::Value;

use crate::access::{random_hex, sha256, AppKeys, StoreError};
use crate::cli::error::Error;
use crate::config::{self, Values};
use crate::http::ApiError;
use crate::invoke;
use crate::runner::Runner;
use crate::state::pg::Db;
use crate::state::record::Origin;
use crate::state::store::new_run_id;
use crate::state::{Kept, State};

/// `trigd check`: load everything, print a summary or every error; warn
/// (on stderr) about what loads but will likely fail at run time.
///
/// # Errors
/// [`Error::Config`] with every problem found.
pub fn check(path: &Path) -> Result<(), Error> {
    let cfg = config::load(path).map_err(Error::Config)?;
    let mut warnings = crate::cli::lint::warnings(&cfg, &path_env());
    warnings.extend(crate::http::tls::check(&cfg.server).map_err(Error::Other)?);
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    let hooks = match cfg.hooks.by_id.len() {
        0 if cfg.server.hooks.files.is_empty() => String::new(),
        n => format!(", {}", count(n, "hook")),
    };
    println!(
        "ok: {}, {}{hooks}{}",
        count(cfg.programs.len(), "program"),
        count(cfg.tools.len(), "tool"),
        if warnings.is_empty() {
            String::new()
        } else {
            format!(", {}", count(warnings.len(), "warning"))
        }
    );
    print_schedules(&cfg, jiff::Timestamp::now());
    Ok(())
}

/// One line per schedule: its id, expression and zone, and its next
/// three occurrences in its zone (before jitter).
fn print_schedules(cfg: &config::Config, now: jiff::Timestamp) {
    for (id, _, _, s) in crate::schedule::timer::schedules(cfg) {
        let mut at = now;
        let mut next = Vec::new();
        for _ in 0..3 {
            let Some(t) = s.cron.next_after(at, &s.zone) else {
                break;
            };
            next.push(crate::http::api::local(t, &s.zone));
            at = t;
        }
        let inactive = if s.active { "" } else { " (inactive)" };
        println!(
            "schedule {id}: \"{}\" in {}{inactive}; next: {}",
            s.expression,
            s.zone_name,
            next.join(", ")
        );
    }
}

/// `1 program`, `2 programs`.
fn count(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// The `PATH` runs get: trigd's own, or the default.
fn path_env() -> String {
    std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into())
}

/// `trigd app-key`: (re)generate a member's application key and print it.
/// A running server honours it at once: it re-reads the key file, or, with
/// `[state] url`, the key is written to the database, whose notification
/// reaches every instance.
///
/// # Errors
/// The config does not load, the workspace or member is unknown, the
/// state dir cannot be written or the database used.
pub fn app_key(path: &Path, workspace: &str, member: &str) -> Result<(), Error> {
    let cfg = config::load(path).map_err(Error::Config)?;
    let ws = cfg
        .workspaces
        .get(workspace)
        .ok_or_else(|| Error::Other(format!("no workspace '{workspace}' in {}", path.display())))?;
    if !ws.members.iter().any(|m| m == member) {
        return Err(Error::Other(format!(
            "'{member}' is not a member of workspace '{workspace}'"
        )));
    }
    let (state, keys) = app_keys_of(&cfg);
    let (key, _) = keys
        .regenerate(workspace, member)
        .map_err(|e| keys_error(&cfg, &state, e))?;
    println!("{key}");
    eprintln!("Application key for {member} in {workspace}: shown only once; the previous key no longer works.");
    Ok(())
}

/// `trigd revoke-app-key`: delete a member's application key. A running
/// server stops taking it at once (as after `trigd app-key`). The member
/// need not be in the workspace any more.
///
/// # Errors
/// The config does not load, the state dir cannot be written or the
/// database used.
pub fn revoke_app_key(path: &Path, workspace: &str, member: &str) -> Result<(), Error> {
    let cfg = config::load(path).map_err(Error::Config)?;
    let (state, keys) = app_keys_of(&cfg);
    let had = keys
        .revoke(workspace, member)
        .map_err(|e| keys_error(&cfg, &state, e))?;
    if had {
        eprintln!("Application key for {member} in {workspace} revoked: it no longer works.");
    } else {
        eprintln!("{member} has no application key in {workspace}: nothing to revoke.");
    }
    Ok(())
}

/// The state of `cfg` and its application keys.
fn app_keys_of(cfg: &config::Config) -> (State, AppKeys) {
    let mut state = State::new(&cfg.server.state_dir, &cfg.server.shared_state_dir);
    if let Some(settings) = &cfg.server.state_db {
        state = state.with_db(Arc::new(Db::new(Arc::clone(settings))));
    }
    let keys = AppKeys::new(&state);
    (state, keys)
}

/// The command's error for a failure to keep the keys.
fn keys_error(cfg: &config::Config, state: &State, e: StoreError) -> Error {
    match e {
        StoreError::Io(source) => Error::Io {
            path: state.path(Kept::AppKeys),
            source,
        },
        StoreError::Db(e) => Error::Other(format!(
            "cannot keep the key in the database ({}): {e}",
            cfg.server.state_db.as_ref().map_or("", |s| s.url.as_str())
        )),
    }
}

/// `trigd keygen`: a new random API key (on stderr, apart from the block)
/// and the config lines holding only its hash (on stdout), so that pasting
/// the block never stores the key.
pub fn keygen(name: &str, workspace: Option<&str>) {
    let key = format!("tk_{}", random_hex());
    let mut out = format!(
        "# API key {name:?} (the key itself was printed on stderr, not here)\n\
         [[api_keys]]\n\
         name = {name:?}\n\
         sha256 = \"{}\"\n",
        hex::encode(sha256(&key))
    );
    if let Some(ws) = workspace {
        out.push_str(&format!("workspace = {ws:?}\n"));
    }
    eprintln!("New API key for {name:?}; give it to the caller, it is shown only once:");
    eprintln!("{key}");
    eprintln!("Paste the lines printed on stdout into config.toml (they hold only its sha256).");
    print!("{out}");
}

/// `trigd hash-password`: argon2id PHC string of the first line of stdin.
///
/// # Errors
/// stdin unreadable or the password empty.
pub fn hash_password() -> Result<(), Error> {
    let mut line = String::new();
    io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|source| Error::Io {
            path: "<stdin>".into(),
            source,
        })?;
    let password = line.trim_end_matches(['\n', '\r']);
    if password.is_empty() {
        return Err(Error::Other(
            "no password on stdin (give it on the first line)".into(),
        ));
    }
    println!("{}", hash(password)?);
    Ok(())
}

/// argon2id (default parameters) of `password` with a random salt.
///
/// # Errors
/// Only if argon2 rejects its own parameters.
pub fn hash(password: &str) -> Result<String, Error> {
    let salt = SaltString::encode_b64(&rand::random::<[u8; 16]>())
        .map_err(|e| Error::Other(format!("salt: {e}")))?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| Error::Other(format!("argon2: {e}")))
}

/// `trigd run`: run a program's function locally, without a server, and
/// print the same JSON as `POST /api`, with errors worded for the command
/// line. Any function may be named with `--function`, triggered or not;
/// without it the single triggered function runs. The run is not recorded
/// (the state dir may belong to a running server), so no `Run` id is
/// printed. Returns whether the run finished.
///
/// # Errors
/// The config does not load.
pub fn run(
    path: &Path,
    program: &str,
    function: Option<&str>,
    values: Vec<String>,
) -> Result<bool, Error> {
    let cfg = Arc::new(config::load(path).map_err(Error::Config)?);
    let outcome = run_local(&cfg, program, function, values);
    let (ok, mut body) = match outcome {
        Ok(v) => (true, v),
        Err(e) => {
            let sentence = cli_message(&e, program, path);
            let resp: crate::http::Response = e.into();
            let mut body = serde_json::from_slice(&resp.body).unwrap_or(Value::Null);
            if let (Some(obj), Some(s)) = (body.as_object_mut(), sentence) {
                obj.insert("Error".into(), Value::String(s));
            }
            (false, body)
        }
    };
    if let Some(obj) = body.as_object_mut() {
        obj.remove("Run");
    }
    let mut out = io::stdout().lock();
    let _ = writeln!(
        out,
        "{}",
        serde_json::to_string_pretty(&body).unwrap_or_default()
    );
    Ok(ok)
}

/// The command-line wording of the errors whose HTTP sentence names query
/// parameters or API keys; `None` keeps the HTTP sentence.
fn cli_message(e: &ApiError, program: &str, path: &Path) -> Option<String> {
    Some(match e {
        ApiError::ProgramNotFound => format!(
            "{path} has no program named or numbered '{program}' (see `trigd check --config {path}`).",
            path = path.display()
        ),
        ApiError::FunctionNotFound { name, .. } => format!(
            "program '{program}' has no function '{name}'; Functions lists the ones it has."
        ),
        ApiError::FunctionRequired { .. } => format!(
            "program '{program}' has several functions with webhook triggers: name one with \
             --function <name> (see Functions)."
        ),
        ApiError::NoActiveTrigger => format!(
            "no function of program '{program}' has an active webhook trigger: name one with \
             --function <name>."
        ),
        ApiError::VariablesMismatch { outputs, got } => format!(
            "expected {} value{} for outputs [{}], got {got}: give one VALUE per output after \
             the program, in this order (e.g. trigd run {program} {}).",
            outputs.len(),
            if outputs.len() == 1 { "" } else { "s" },
            outputs.join(", "),
            outputs
                .iter()
                .map(|o| format!("<{o}>"))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        _ => return None,
    })
}

fn run_local(
    cfg: &Arc<config::Config>,
    program: &str,
    function: Option<&str>,
    values: Vec<String>,
) -> Result<Value, ApiError> {
    let program = cfg
        .program_by_name(program)
        .ok_or(ApiError::ProgramNotFound)?;
    let function = match function {
        Some(name) => program
            .function(name)
            .ok_or_else(|| ApiError::FunctionNotFound {
                name: name.to_string(),
                functions: program.functions.iter().map(|f| f.name.clone()).collect(),
            })?,
        None => invoke::select_function(program, None)?,
    };
    invoke::check_values(&cfg.server, &Values::Positional, function.inputs(), &values)?;
    let runner = Runner::new(None, Default::default());
    let job = invoke::job(
        cfg,
        program,
        function,
        values,
        &Default::default(),
        Origin::Cli,
    );
    let outcome = runner.execute_only(&job);
    invoke::finished_body(&new_run_id(&cfg.server.instance), outcome)
}
