//! Test plugin: the `cautious` probe, declaring the `auto` permission mode.

include!("../../cautious/src/probe.rs");
mode_probe!("declares-auto", PermissionMode::Auto);
