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
    let example = login_example(listen, cfg.server.public_url.as_deref());
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

/// Where to sign in, for the banner (printed before the listener is
/// bound, so a port 0 is not known yet).
fn login_example(listen: &str, public_url: Option<&str>) -> String {
    if let Some(url) = public_url {
        return format!("{}/login", url.trim_end_matches('/'));
    }
    // A Unix socket has no URL of its own: the proxy in front gives one.
    if listen
        .strip_prefix(crate::http::listen::UNIX_PREFIX)
        .is_some()
    {
        return format!("through the proxy in front of {listen}");
    }
    match listen.strip_suffix(":0") {
        Some(host) => {
            format!("http://{host}:PORT/login, PORT being the one of the \"listening on\" line")
        }
        None => format!("http://{listen}/login"),
    }
}

#[cfg(test)]
mod tests {
    use super::login_example;

    #[test]
    fn the_banner_names_a_login_address_one_can_open() {
        let ex = |listen, url| login_example(listen, url);
        assert_eq!(ex("127.0.0.1:8080", None), "http://127.0.0.1:8080/login");
        assert_eq!(
            ex("127.0.0.1:0", None),
            "http://127.0.0.1:PORT/login, PORT being the one of the \"listening on\" line"
        );
        assert_eq!(
            ex("127.0.0.1:0", Some("https://trigd.example/")),
            "https://trigd.example/login"
        );
        assert!(ex("unix:/run/t.sock", None).starts_with("through the proxy"));
    }
}
