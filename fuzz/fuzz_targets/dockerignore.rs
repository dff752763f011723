#![no_main]
// The entry and what it checks: `hvdctl::fuzz::dockerignore` (src/fuzz.rs).
libfuzzer_sys::fuzz_target!(|data: &[u8]| hvdctl::fuzz::dockerignore(data));
