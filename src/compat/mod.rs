//! Compatibility with other tools' formats. Today one: adnanh/webhook's
//! hooks files and `trigd import-webhook` ([`webhook`]). Everything specific
//! to that tool lives under `webhook/`.

pub mod webhook;
