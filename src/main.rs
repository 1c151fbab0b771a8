//! trigd: run user-defined programs over HTTP.
//!
//! One binary that reads `config.toml` and `programs/*.toml`, serves HTTP
//! with a fixed pool of threads (tiny_http), and runs the configured programs
//! as real child processes, synchronously or on a detached thread. See
//! README.md for the operator's guide.
//!
//! Where things live: `cli` parses the command line; `config` loads and
//! validates; `server` owns the listener and workers; `routes` is the URL
//! table; `api` is the run endpoint; `runner` is where a run starts
//! (`runner::step` executes it); `store` is the run log; `idempotency`
//! remembers `Idempotency-Key`s and `replay` answers their repeats; `auth`
//! checks keys; `ratelimit` throttles failed authentication and busy keys;
//! `cluster` names this instance in run ids and says whether it is ready;
//! `sys` holds the only `unsafe` code.
#![deny(unsafe_code)]

mod api;
mod app;
mod appkeys;
mod auth;
mod cli;
mod cluster;
mod commands;
mod config;
mod error;
mod firststart;
mod http;
mod idempotency;
mod lint;
mod logging;
mod metrics;
mod ratelimit;
mod reload;
mod replay;
mod routes;
mod runner;
mod server;
mod sessions;
mod store;
mod sys;
mod tools;
mod ui;

use std::process::ExitCode;

use cli::Command;
use error::Error;

fn main() -> ExitCode {
    match run(std::env::args_os().skip(1)) {
        Ok(code) => code,
        Err(Error::Usage(msg)) => {
            eprintln!("trigd: {msg}");
            ExitCode::from(2)
        }
        Err(Error::Config(errs)) => {
            eprintln!("{}", Error::Config(errs));
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("trigd: {e}");
            ExitCode::from(1)
        }
    }
}

/// Run the command line; the exit code on success.
fn run(args: impl Iterator<Item = std::ffi::OsString>) -> Result<ExitCode, Error> {
    let command = cli::parse(args)?;
    if matches!(command, Command::Serve { .. }) {
        // Before any thread exists, so every thread inherits the mask and
        // only the main thread's sigwait sees these signals.
        sys::block_signals();
    }
    logging::init();
    match command {
        Command::Serve { config, listen } => server::serve(&config, listen)?,
        Command::Check { config } => commands::check(&config)?,
        Command::Run {
            config,
            program,
            function,
            values,
        } => {
            if !commands::run(&config, &program, function.as_deref(), values)? {
                return Ok(ExitCode::from(1));
            }
        }
        Command::Keygen { name, workspace } => commands::keygen(&name, workspace.as_deref()),
        Command::HashPassword => commands::hash_password()?,
        Command::AppKey {
            config,
            workspace,
            member,
        } => commands::app_key(&config, &workspace, &member)?,
        Command::Help(text) => print!("{text}"),
        Command::Version => println!("trigd {}", env!("CARGO_PKG_VERSION")),
    }
    Ok(ExitCode::SUCCESS)
}
