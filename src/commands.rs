//! The small subcommands: `check`, `keygen`, `hash-password` and `run`.
//! (`serve` lives in `server.rs`.)

use std::io::{self, BufRead, Write};
use std::path::Path;
use std::sync::Arc;

use argon2::password_hash::{PasswordHasher, SaltString};
use argon2::Argon2;
use serde_json::Value;

use crate::api;
use crate::appkeys::AppKeys;
use crate::auth::sha256;
use crate::config;
use crate::error::Error;
use crate::http::ApiError;
use crate::runner::{Job, Runner};
use crate::store::new_run_id;

/// `trigd check`: load everything, print a summary or every error.
///
/// # Errors
/// [`Error::Config`] with every problem found.
pub fn check(path: &Path) -> Result<(), Error> {
    let cfg = config::load(path).map_err(Error::Config)?;
    println!(
        "ok: {} programs, {} tools",
        cfg.programs.len(),
        cfg.tools.len()
    );
    Ok(())
}

/// `trigd app-key`: (re)generate a member's application key and print it.
/// A running server honours it at once (it re-reads the key file).
///
/// # Errors
/// The config does not load, the workspace or member is unknown, or the
/// state dir cannot be written.
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
    let keys = AppKeys::new(&cfg.server.shared_state_dir);
    let key = keys
        .regenerate(workspace, member)
        .map_err(|source| Error::Io {
            path: cfg.server.shared_state_dir.join("app_keys.json"),
            source,
        })?;
    println!("{key}");
    eprintln!("Application key for {member} in {workspace}: shown only once; the previous key no longer works.");
    Ok(())
}

/// `trigd keygen`: a new random API key and the config lines holding its hash.
pub fn keygen(name: &str, workspace: Option<&str>) {
    let key = format!("tk_{}", hex::encode(rand::random::<[u8; 32]>()));
    let mut out = format!(
        "# New API key for {name:?}: give it to the caller; it is shown only once.\n\
         # api_key: {key}\n\
         [[api_keys]]\n\
         name = {name:?}\n\
         sha256 = \"{}\"\n",
        hex::encode(sha256(&key))
    );
    if let Some(ws) = workspace {
        out.push_str(&format!("workspace = {ws:?}\n"));
    }
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
/// print the same JSON as `POST /api`. Any function may be named with
/// `--function`, triggered or not; without it the single triggered function
/// runs. Returns whether the run finished.
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
    let (ok, body) = match outcome {
        Ok(v) => (true, v),
        Err(e) => {
            let resp: crate::http::Response = e.into();
            (
                false,
                serde_json::from_slice(&resp.body).unwrap_or(Value::Null),
            )
        }
    };
    let mut out = io::stdout().lock();
    let _ = writeln!(
        out,
        "{}",
        serde_json::to_string_pretty(&body).unwrap_or_default()
    );
    Ok(ok)
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
        None => api::select_function(program, None)?,
    };
    api::check_values(&cfg.server, function.inputs(), &values)?;
    let runner = Runner::new(None, Default::default()).map_err(|_| ApiError::Internal)?;
    let job = Job {
        cfg: Arc::clone(cfg),
        program: Arc::clone(program),
        function: function.name.clone(),
        values,
        vars: Default::default(),
        by: "cli".into(),
        id: None,
    };
    let outcome = runner.execute_only(&job);
    api::finished_body(&new_run_id(&cfg.server.instance), outcome)
}
