//! Receiving third-party webhooks: the building blocks that an endpoint
//! takes a request through — verify its signature, read values out of it,
//! decide from rules whether it runs.
//!
//! Each block is plain data plus a pure function of the request, so any
//! entry point (a tool's endpoint trigger, a webhook hooks file) compiles
//! its configuration into these values once, at load, and calls them in
//! order: [`signature`], then [`values`], then [`rules`].

pub mod payload;
pub mod rules;
pub mod signature;
pub mod values;
