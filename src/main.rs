//! trigd: run user-defined programs over HTTP.
#![deny(unsafe_code)]
#![allow(dead_code)]

mod config;
mod runner;
mod sys;

fn main() {
    println!("trigd {}", env!("CARGO_PKG_VERSION"));
}
