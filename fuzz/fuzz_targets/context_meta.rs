#![no_main]
// The entry and what it checks: `hvdctl::fuzz::context_meta` (src/fuzz.rs).
libfuzzer_sys::fuzz_target!(|data: &[u8]| hvdctl::fuzz::context_meta(data));
