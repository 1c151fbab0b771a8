//! trigd: run user-defined programs over HTTP (the library behind the
//! `trigd` binary; `main.rs` only calls [`cli::main`]).
//!
//! One binary that reads `config.toml` and `programs/*.toml`, serves HTTP
//! with a fixed pool of threads (tiny_http), and runs the configured programs
//! as real child processes, synchronously or on a detached thread. See
//! docs/ (an mdBook; README.md points into it) for the operator's guide.
//!
//! # Map
//!
//! A request, in five lines:
//!
//! ```text
//! http::server::handle   tiny_http request → http::Request (bounded body), catch_unwind, access log
//! http::routes::handle   one match on method and path → a handler
//! http::api / http::tools / compat::webhook   find the config::Endpoint (compiled at load) → invoke::invoke
//! invoke::invoke         credentials (access) → method → signature → function → read → rule → values → callbacks → idempotency → start → answer
//! schedule::timer        the clock's entry: a config::schedules::Schedule → invoke::job → Runner::accept_ahead (0.4 s before) → Runner::start_ahead (at the firing; else Runner::start_async)
//! runner                 slots and the FIFO queue → runner::step runs the processes → state records the run
//! ```
//!
//! Where each concern lives (one guess each):
//!
//! ```text
//! command line, subcommands, `trigd check` warnings  cli/ (mod.rs parsing, commands.rs, lint.rs, firststart.rs)
//! the commands and flags as data; man pages and      cli/spec.rs (→ --help, the parser's flags);
//!   completions made from them and the config keys    cli/generate/, config/reference.rs
//! HTTP: Request, Response, ApiError (the Code table) http/mod.rs
//! the server, the URL table, logs, metrics           http/ (server.rs, routes.rs, logging.rs, metrics.rs, app.rs)
//! HTTPS: certificate store, reload, redirects        http/tls/ (mod.rs Certs, watch.rs, redirect.rs, not_after.rs;
//!   (the handshake: vendor/tiny_http/src/tls.rs)      config/tls.rs the settings)
//! certificates from ACME (obtain, renew, HTTP-01)    http/acme/ (mod.rs the thread, issue.rs an order,
//!                                                     client.rs ureq under instant-acme); kept by state/acme.rs
//! where it listens (TCP, unix:PATH, systemd's       http/listen.rs; http/systemd.rs (sd_notify, watchdog);
//!   socket), systemd's notify protocol                sys/systemd.rs (LISTEN_FDS)
//! authenticate a caller, rate limits, CSRF, logins   access/ (mod.rs, limiter.rs, csrf.rs, login.rs, cidr.rs;
//!   (cluster-wide with [state] url)                   shared_limits.rs the database's windows, leases)
//! load and validate the config, hot reload           config/ (validate.rs, endpoint.rs, reload.rs, stamp.rs)
//! start a run, read and check its values            invoke/ (mod.rs, read.rs, values.rs, signed.rs, answer.rs,
//!   (a re-run too)                                    rerun.rs)
//! signed endpoints (GitHub, Stripe… requests):       receive/ (signature.rs, payload.rs, values.rs, rules.rs,
//!   signatures, payloads, rules, delivery ids        delivery.rs: the sender's id a redelivery repeats)
//! a run once accepted: status, output, follow,      runs/ (mod.rs, follow.rs, replay.rs, list.rs the run list,
//!   cancel, Idempotency-Key, callbacks, instances     idempotency.rs, callback/ (mod.rs the service, send.rs
//!   (callback formats: Slack, ntfy, healthchecks…)     Standard Webhooks signing, format.rs, redeliver.rs),
//!                                                     cluster.rs)
//! schedules: cron and time zones, catch-up,        schedule/ (cron.rs, plan.rs, timer.rs: one thread
//!   overlap, the timer thread                         for all; compiled in config/schedules.rs)
//! run slots, the wait queue, child processes        runner/ (mod.rs, queue.rs with concurrency groups,
//!   the cluster queue and leases (database)           step.rs, handle.rs; cluster.rs: the lease thread;
//!   runs accepted ahead (schedules)                   ahead.rs; orphans.rs: found by TRIGD_RUN_ID,
//!   what a killed trigd left running                  stopped at the next start;
//!                                                     config/group.rs reads [functions.concurrency_group])
//! what is kept in the state directory: one table,   state/ (mod.rs: State, Kept; store.rs the run log, index.rs
//!                                                     its index in memory, filter.rs the list's filter, record.rs
//!   one door (State), every file operation on it      a run's typed record, commit.rs the group commit, time.rs,
//!                                                     output.rs, idempotency.rs, ...)
//!   or, with [state] url, in PostgreSQL               state/pg/ (mod.rs: Db, the pool; schema.rs the
//!                                                     migrations, *.sql; settings.rs, tls.rs; keys.rs,
//!                                                     sessions.rs, limits.rs, watch.rs: what access keeps;
//!                                                     cluster.rs leases, taking, adoption; groups.rs
//!                                                     concurrency groups across instances; output.rs,
//!                                                     spool.rs, unwritten.rs: runs not tied to a host;
//!                                                     deferred.rs: a short sync run's `running` write)
//! adnanh/webhook hooks files, import-webhook        compat/webhook/ (what removing it takes: compat/mod.rs)
//! the browser pages (maud templates)                ui/ (login, settings, endpoints, runs, schedules, switch, view)
//! the only unsafe code, and each speed trick        sys/ (spawn.rs: how a step starts, the clone
//!   behind one function with its figure              spawner in vfork.rs; tune_malloc, trim_heap, release_code_pages;
//!                                                     systemd.rs: the socket systemd passes; users.rs:
//!                                                     user and group names from /etc/passwd, /etc/group;
//!                                                     procs.rs: process groups by an environment variable;
//!                                                     the run log's group commit: state/commit.rs)
//! a unit test's directory in the temp dir, removed  state/test_dir.rs (the integration tests': tests/util/dir.rs)
//!   when it passes
//! ```
#![deny(unsafe_code)]

mod access;
pub mod cli;
mod compat;
mod config;
mod http;
mod invoke;
mod receive;
mod runner;
mod runs;
mod schedule;
mod state;
mod sys;
mod ui;

/// What `fuzz/` and the integration tests call directly, and nothing else:
/// not an API. The modules stay private because a `pub` module makes its
/// items visible while the library is optimized before LTO, which cost
/// 21 KB of the static binary (7,101,976 B with the modules `pub`,
/// 7,080,600 B private).
#[doc(hidden)]
pub mod testing {
    /// Config loading.
    pub mod config {
        pub use crate::config::{load_str, Dialect};
    }
    /// The request type and its parsing.
    pub mod http {
        pub use crate::http::{percent_encode, Method, Request};
    }
    /// Values and flags of a run request.
    pub mod invoke {
        pub use crate::invoke::{named_values, parse_bool};
    }
    /// Signed endpoints' parsers.
    pub mod receive {
        /// Bodies.
        pub mod payload {
            pub use crate::receive::payload::*;
        }
        /// Value sources.
        pub mod values {
            pub use crate::receive::values::*;
        }
        /// Signature schemes.
        pub mod signature {
            pub use crate::receive::signature::*;
        }
        /// A sender's delivery id.
        pub mod delivery {
            pub use crate::receive::delivery::*;
        }
    }
    /// The DER walk of the TLS certificate store.
    pub mod tls {
        pub use crate::http::tls::not_after;
    }
    /// Hooks files.
    pub mod compat {
        /// adnanh/webhook.
        pub mod webhook {
            /// A hook → an endpoint.
            pub mod compile {
                pub use crate::compat::webhook::compile::*;
            }
            /// The hooks file.
            pub mod file {
                pub use crate::compat::webhook::file::*;
            }
            /// webhook's reading of a request.
            pub mod receive {
                pub use crate::compat::webhook::receive::*;
            }
        }
    }
    /// Callback signatures; the run list's query.
    pub mod runs {
        /// `GET /api/runs`: its query parser and the filter it makes.
        pub mod list {
            pub use crate::runs::list::{parse, FILTER_PARAMS};
            pub use crate::state::store::{Cursor, RunFilter, DEFAULT_PAGE, MAX_PAGE};
        }
        /// Sending callbacks.
        pub mod callback {
            /// Signing.
            pub mod send {
                pub use crate::config::callbacks::Secret;
                pub use crate::runs::callback::send::{retry_after, signature};
            }
        }
    }
    /// Cron expressions of schedules.
    pub mod schedule {
        pub use crate::schedule::cron::Cron;
    }
    /// The state directory's file kinds; a run's output and its record.
    pub mod state {
        pub use crate::state::record::RunRecord;
        pub use crate::state::Kept;
        /// A run's output: its writer and its frame reader.
        pub mod output {
            pub use crate::state::output::{
                open, read_frames, whole, Frame, Inline, OutputFile, Pos, Stored, Stream, Whole,
                BATCH, INLINE_MAX, MAX_FRAME,
            };
        }
    }
}
