//! Everything trigd keeps: the state directory.

pub mod bodies;
pub mod delivery;
pub mod output;
pub mod passwords;
pub mod spool;
pub mod store;
