#![no_main]
// The entry and what it checks: `hvdctl::fuzz::app_file` (src/fuzz.rs).
libfuzzer_sys::fuzz_target!(|data: &[u8]| hvdctl::fuzz::app_file(data));
