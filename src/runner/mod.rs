//! Runs: slots, the async queue, run records (filled in by the core work).
pub mod step;
