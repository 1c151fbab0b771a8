//! libFuzzer entry point; the harness and its invariants: `trigd_fuzz::cert_not_after`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| trigd_fuzz::cert_not_after(data));
