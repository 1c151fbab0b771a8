//! libFuzzer entry point; the harness and its invariants: `trigd_fuzz::output_frames`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| trigd_fuzz::output_frames(data));
