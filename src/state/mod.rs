//! Everything trigd keeps: the state directory.

pub mod record;
pub mod store;
pub mod time;
