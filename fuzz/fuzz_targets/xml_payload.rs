//! libFuzzer entry point; the harness and its invariants: `trigd_fuzz::xml_payload`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| trigd_fuzz::xml_payload(data));
