//! Everything trigd keeps: the state directory.

pub mod store;
