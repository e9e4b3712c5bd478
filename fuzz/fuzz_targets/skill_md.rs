//! `cargo fuzz run skill_md`: see `nexo_fuzz_targets` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(init: nexo_fuzz::init(), |data: &[u8]| nexo_fuzz_targets::skills::skill_md(data));
