//! Integration tests: every test drives the real `trigd` binary, except
//! `vendor`, which drives the patched tiny_http through its own API.

mod acme; // [acme]: certificates from pebble (issuance, restart, renewal, failed challenge), hostile directories, config errors, the manual's five-line config
mod api; // POST /api: success shapes, every error row of the manual, limits, injection safety
mod browser; // headless Chromium through chromedriver: login, application key, endpoint view, logout, public switch
mod callbacks; // completion callbacks: signed deliveries to a local receiver, retries, kill -9, allow list
mod cli; // subcommands: check, keygen, hash-password, run, --help/--version, usage errors
mod cluster; // several instances: run ids naming their instance, 421, readiness and draining, three instances behind HAProxy, the Kubernetes recipe checked
mod docs; // the manual (docs/, an mdBook): links and anchors resolve, every page in SUMMARY.md, every Code in troubleshooting, config keys
mod groups; // concurrency groups: each policy on real processes, three pushes while a deploy runs, sync callers of superseded and skipped runs, a key shared by two programs, kill -9, load errors, two instances on PostgreSQL
mod hooks_diff; // adnanh/webhook hooks files: the real webhook and trigd given the same file and requests
mod hooks_pipeline; // a hook through the one pipeline: Idempotency-Key, busy, storage_unavailable, shutting_down
mod hostile_files; // config and hooks files that try to take the server down: alias bombs, deep nesting, huge files, unreachable hook ids
mod limits; // connections, sizes, fairness, EMFILE, overload, crash, hostile programs, rate limits, users
mod modules; // the shape of src/: no module cycles, a narrow root, a thin main.rs, unsafe only in sys/
mod newcomer; // a newcomer's first hour: relative commands, exact Results, failed stdout, check warnings, help, run wording
mod old_records; // a state dir written by an earlier version: loaded, served the same
mod openapi; // openapi.json against src/http/routes.rs and the error codes; GET /openapi.json
mod payloads; // hostile bodies: XML/JSON/form/multipart bounds, cheap checks first, signature entries, names twice, LF multipart, hook value bounds
mod pg_cluster; // the PostgreSQL backend: the harness, three instances on one database behind HAProxy, kill -9 and PostgreSQL restarts under load, round trips of a sync run
mod pg_runs; // runs not tied to a host: a busy instance's run taken by another, kill -9 and leases, cancel and output through another instance, a take whose COMMIT answer was lost, a renewal answered late after an outage
mod pg_shared; // with [state] url, what access keeps is shared: application keys (NOTIFY-kept copy), sessions, login throttling and API key rate limits over two instances
mod pg_state; // [state] url: config errors, migrations once and refused when newer, every instance's runs and idempotency keys, round trips, the database down
mod queue; // waiting for a slot, full queue, floods, idempotency keys, runs after a crash, full disk
mod reload; // hot reload: every edit style, ConfigMap symlink swap, invalid edits, SIGHUP, 10k files
mod runs; // run records: GET /api/runs/<id>, output caps, crash recovery, SIGTERM, per-function concurrency
mod runs_access; // who may read, follow and cancel a run (hook runs, auth before lookup), cancel racing the end, metrics labels, the demo Runs page
mod runs_control; // issue 35: the run list API (filters, cursor, scope, hostile queries), re-run, redeliver, retries
mod runs_output; // kept output, following it (events, curl -N), streamed sync calls, cancel and its process group
mod runs_pages; // the runs pages: list, filters, a run's page, untrusted output, the Cancel form, 100,000 runs
mod schedules; // schedule triggers: firing ordinary runs, reload, overlap, kill -9 and catch-up, load errors, zones from the host
mod standard_webhooks; // Standard Webhooks received (webhook-*/svix-*, the official library, hostile headers); redeliveries deduplicated by the sender's delivery id
mod state_table; // the state directory table of src/state/mod.rs, the manual's (docs/operations.md) and state::Kept list the same files
mod switch; // the public switch flipped from trigd: HTTP operation, form, confirmation, config rewrite, read-only, admins, CSRF, races
mod systemd; // a Unix socket (mode, stale and live files, hostile paths, HAProxy with X-Forwarded-For), socket activation, the notify protocol message by message, the watchdog, credentials, the watchdog while max_connections is full
mod tls; // HTTPS from tls_cert/tls_key: protocols, ALPN, certbot renewal, SIGHUP, bad pairs kept out (renamed or written in place), expiry, slow and hostile TLS clients, redirect_http, the key as a systemd credential, every metric in the operations table, the warning for plain HTTP beyond loopback, a FIFO at the certificate path
mod tools; // generated tool endpoints: environments, values by name, bearer app keys, User-Agent rule, endpoint view
mod ui; // browser access over HTTP: login, throttle, sessions, CSRF, settings, escaping, headers
mod util; // harness: per-test dirs, the trigd child process, one HTTP client (raw bytes too), polling, CLI runner
mod vendor; // the patched tiny_http through its own API: a failed connection thread, default answers
mod webhooks; // signed third-party webhooks: GitHub, GitLab, Stripe, Slack; payload kinds, value sources, rules, bad input
