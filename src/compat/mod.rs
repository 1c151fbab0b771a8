//! Compatibility with other tools' formats. Today one: adnanh/webhook's
//! *hooks files* and `trigd import-webhook` ([`webhook`]). Everything
//! specific to that tool lives under `webhook/`; the rest of trigd knows it
//! only at the sites below (`tests/modules.rs`,
//! `compat_is_known_only_at_the_documented_sites`, counts them and fails
//! on a new one).
//!
//! # Removing it
//!
//! 1. Delete `src/compat/`, and `mod compat;` and `testing::compat` in
//!    `lib.rs`.
//! 2. Delete the one variant that carries a compat value,
//!    `config::Dialect::HooksFile(Arc<compat::webhook::Hook>)`, and the
//!    one arm per pipeline stage the compiler then points at:
//!    `invoke/read.rs` (read: `Read::HooksFile`, its `new`, `rule`,
//!    `signature_failed`, `get`
//!    arms), `invoke/values.rs` (values), `invoke/mod.rs` (`run_async`;
//!    no `Trigd-Callback` for a hook), `invoke/signed.rs` (answer).
//! 3. Delete the one call per outer stage: `http/routes.rs`
//!    (`compat::webhook::route`, the URL table), `http/server.rs` (a path
//!    under the prefix that cannot be read: webhook's 404),
//!    `config/validate.rs` (read the hooks files, `compile::load`),
//!    `config/reload.rs` (a hooks file's change reloads; an empty one, or
//!    one holding only white space, comments or null, is refused), `cli/lint.rs`
//!    (`trigd check` warnings), `cli/mod.rs` (`import-webhook`),
//!    `cli/commands.rs` (`check` counts hooks), `runner/mod.rs` (a hook
//!    run's program, `cfg.hooks`).
//! 4. Delete the data the config holds for it: `config::Hooks` (beside
//!    `Endpoint`, so that `config` does not depend on this code) and
//!    `Config::hooks`; `Server::hooks` (a [`webhook::Settings`]) and its
//!    one call in `config/server.rs`; the three `[server]` keys
//!    `hooks_files`, `hooks_url_prefix`, `hooks_http_methods` in
//!    `config/raw.rs` (the TOML schema: `RawServer` denies unknown keys, so
//!    they cannot move without a second parse) and their rows in
//!    `config/reference.rs`; `import-webhook`'s help in `cli/spec.rs`.
//!
//! What stays: a run record's owner kind `hook` (`state`'s `Owner::Hook`,
//! the metrics' `hook` label, `config::Entry::Hook`): records already on
//! disk name it, and must still read.

pub mod webhook;
