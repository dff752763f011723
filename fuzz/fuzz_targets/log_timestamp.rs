#![no_main]
// The entry and what it checks: `hvdctl::fuzz::log_timestamp` (src/fuzz.rs).
libfuzzer_sys::fuzz_target!(|data: &[u8]| hvdctl::fuzz::log_timestamp(data));
