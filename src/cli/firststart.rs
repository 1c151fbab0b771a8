//! Generated passwords: a `[[users]]` entry with `password = "generate"`
//! gets a random password the first time `trigd serve` starts. trigd prints
//! it once on stderr and keeps only its argon2 hash in
//! `<state_dir>/passwords.json`; the config loader reads the hash from there.
//! This is how the shipped config's `demo` user can sign in on a shared host
//! without a password anyone could read in the repository.

use std::path::Path;

use crate::cli::commands;
use crate::cli::error::Error;
use crate::config::{self, Config};
use crate::state::passwords::{self, read, write};

/// Load the config at `path` for `serve`; first give every user with
/// `password = "generate"` and no stored hash a new password, printed once
/// on stderr (`listen`, the address about to be served, is named there).
/// `before` is told what each load reads next (`config::load_first`).
///
/// # Errors
/// The config does not load, or the state dir cannot be written.
pub fn load_for_serve(
    path: &Path,
    listen: Option<&str>,
    before: &mut dyn FnMut(config::Before),
) -> Result<Config, Error> {
    let cfg = config::load_first(path, before).map_err(Error::Config)?;
    let pending: Vec<String> = cfg
        .users
        .values()
        .filter(|u| u.generated_password && u.password_hash.is_empty())
        .map(|u| u.name.clone())
        .collect();
    if pending.is_empty() {
        return Ok(cfg);
    }
    let file = passwords::path(&cfg.server.state_dir);
    let mut all = read(&file);
    let mut lines = Vec::new();
    for name in pending {
        let password = hex::encode(rand::random::<[u8; 12]>());
        all.insert(name.clone(), commands::hash(&password)?);
        lines.push(format!("  user: {name}   password: {password}"));
    }
    write(&file, &all).map_err(|source| Error::Io {
        path: file.clone(),
        source,
    })?;
    let listen = listen.unwrap_or(&cfg.server.listen);
    // A Unix socket has no URL of its own: the proxy in front gives one.
    let example = match listen.strip_prefix(crate::http::listen::UNIX_PREFIX) {
        Some(_) => format!("through the proxy in front of {listen}"),
        None => format!("http://{listen}/login"),
    };
    eprintln!(
        "\nFIRST START: sign in at /login (e.g. {}) with\n{}\n\
         This password is shown only once; only its argon2 hash is kept, in {}.\n\
         Lost it? Stop trigd, delete that file and start again for a new one; or give the \
         user a password of your own with `trigd hash-password`.\n",
        example,
        lines.join("\n"),
        file.display()
    );
    config::load_first(path, before).map_err(Error::Config)
}
