//! trigd: run user-defined programs over HTTP.
//!
//! One binary that reads `config.toml` and `programs/*.toml`, serves HTTP
//! with a fixed pool of threads (tiny_http), and runs the configured programs
//! as real child processes, synchronously or on a detached thread. See
//! README.md for the operator's guide.
//!
//! # Map
//!
//! A request, in five lines:
//!
//! ```text
//! server::handle      tiny_http request → http::Request (bounded body), catch_unwind, access log
//! routes::handle      one match on method and path → a handler
//! api / tools / hooks find the config::Endpoint (compiled at load) → invoke::invoke
//! invoke::invoke      credentials (access) → method → signature → function → read → rule → values → callbacks → idempotency → start → answer
//! runner              slots and the FIFO queue → runner::step runs the processes → store records the run
//! ```
//!
//! Where each concern lives (one guess each):
//!
//! ```text
//! authenticate a caller, rate limits, CSRF, logins   access/ (mod.rs, limiter.rs, csrf.rs, login.rs)
//! sessions, application keys at rest                access/sessions.rs, access/app_keys.rs
//! start a run, read and check its values            invoke/ (mod.rs, read.rs, values.rs, answer.rs, webhook.rs)
//! webhooks: signatures, payloads, sources, rules    receive/ (signature.rs, payload.rs, values.rs, rules.rs)
//! adnanh/webhook hooks files                        config/hooks.rs (the file), config/hook_compile.rs (→ Endpoint),
//!                                                   receive/webhook.rs (webhook's reading), invoke/hook_answer.rs (its answers)
//! load and validate the config                      config/ (validate.rs → server.rs, program.rs, tools.rs)
//! what an entry point takes, kind by kind (Endpoint) config/endpoint.rs
//! error codes and their JSON                        http.rs (ApiError)
//! run slots, the wait queue, child processes        runner/ (mod.rs, queue.rs, step.rs; handle.rs: stop, wake followers)
//! run records, who started a run (Origin)           store.rs
//! Idempotency-Key: keys at rest, answering repeats  idempotency.rs, replay.rs
//! a run's kept output, following it, cancel         output.rs (the file), follow.rs (events), runs.rs (routes)
//! the runs pages                                    ui/runs.rs
//! pages (maud templates)                            ui/ (login, settings, endpoints, switch); view.rs is the endpoint view
//! the public switch written to config.toml          ui/switch.rs, config/edit.rs
//! instance names in run ids, readiness, draining    cluster.rs
//! completion callbacks (signed, retried, spooled)   callback/ (mod.rs, send.rs, spool.rs, record.rs)
//! address ranges (client rules, allow_private)      cidr.rs
//! reload reusing unchanged program files            config/stamp.rs
//! hot reload                                        reload.rs
//! command line                                      cli.rs (parsing), commands.rs (subcommands)
//! man pages, shell completions                      generate/ (from cli.rs and config/reference.rs)
//! warnings of `trigd check`                         lint.rs
//! generated passwords at first start                firststart.rs, config/generated.rs
//! the only unsafe code                              sys.rs
//! ```
#![deny(unsafe_code)]

mod access;
mod api;
mod app;
mod callback;
mod cidr;
mod cli;
mod cluster;
mod commands;
mod config;
mod error;
mod firststart;
mod follow;
mod generate;
mod hooks;
mod http;
mod idempotency;
mod import;
mod invoke;
mod lint;
mod logging;
mod metrics;
mod output;
mod receive;
mod reload;
mod replay;
mod routes;
mod runner;
mod runs;
mod server;
mod store;
mod sys;
mod tools;
mod ui;
mod view;

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
        Command::ImportWebhook {
            file,
            program_id,
            write_secrets,
        } => import::run(&file, program_id, write_secrets.as_deref())?,
        Command::Generate(kind) => print!("{}", generate::text(&kind)),
        Command::Help(text) => print!("{text}"),
        Command::Version => println!("{}", cli::version_text()),
    }
    Ok(ExitCode::SUCCESS)
}
