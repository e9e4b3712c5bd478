//! Test plugin: requests `read` and `write` but declares the `read-only`
//! permission mode, then writes through the tool and through WASI (see
//! `probe.rs`). The `declares-*` plugins do the same under the other modes.

include!("probe.rs");
mode_probe!("cautious", PermissionMode::ReadOnly);
