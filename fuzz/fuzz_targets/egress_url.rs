//! `cargo fuzz run egress_url`: see `nexo_fuzz_targets` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(init: nexo_fuzz::init(), |data: &[u8]| nexo_fuzz_targets::egress::egress_url(data));
