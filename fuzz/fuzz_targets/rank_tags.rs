#![no_main]
// The entry and what it checks: `hvdctl::fuzz::rank_tags` (src/fuzz.rs).
libfuzzer_sys::fuzz_target!(|data: &[u8]| hvdctl::fuzz::rank_tags(data));
