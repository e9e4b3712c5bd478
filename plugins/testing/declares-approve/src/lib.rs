//! Test plugin: the `cautious` probe, declaring the `approve` permission mode.

include!("../../cautious/src/probe.rs");
mode_probe!("declares-approve", PermissionMode::Approve);
