//! libFuzzer entry point; the harness and its invariants: `trigd_fuzz::run_list_query`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| trigd_fuzz::run_list_query(data));
