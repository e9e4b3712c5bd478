//! `cargo fuzz run config_file`: see `nexo_fuzz_targets` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(init: nexo_fuzz::init(), |data: &[u8]| nexo_fuzz_targets::config::config_file(data));
