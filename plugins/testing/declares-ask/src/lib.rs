//! Test plugin: the `cautious` probe, declaring the `ask` permission mode.

include!("../../cautious/src/probe.rs");
mode_probe!("declares-ask", PermissionMode::Ask);
