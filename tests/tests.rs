//! Integration tests: every test drives the real `trigd` binary.

mod api; // POST /api: success shapes, every SPEC §3.3 error row, limits, injection safety
mod cli;
mod openapi; // openapi.json against src/routes.rs and the error codes; GET /openapi.json
mod runs; // run records: GET /api/runs/<id>, output caps, crash recovery, SIGTERM, per-function concurrency
mod util; // harness: per-test dirs, the trigd child process, a raw HTTP client, polling, CLI runner // subcommands: check, keygen, hash-password, run, --help/--version, usage errors
