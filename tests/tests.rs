//! Integration tests: every test drives the real `trigd` binary.

mod api; // POST /api: success shapes, every SPEC §3.3 error row, limits, injection safety
mod cli; // subcommands: check, keygen, hash-password, run, --help/--version, usage errors
mod reload; // hot reload: every edit style, ConfigMap symlink swap, invalid edits, SIGHUP, 10k files
mod runs; // run records: GET /api/runs/<id>, output caps, crash recovery, SIGTERM, per-function concurrency
mod tools; // generated tool endpoints: environments, values by name, bearer app keys, User-Agent rule, endpoint view
mod util; // harness: per-test dirs, the trigd child process, a raw HTTP client, polling, CLI runner
