//! Checks a [`ContainerConfig`] before any CLI runs: every value must stay one
//! argument and never read as a flag.

use super::config::{ContainerConfig, Network};
use crate::SandboxError;

/// Refuses options that would not parse as one flag value or would let a
/// value be read as a flag, and normalizes `cwd`.
pub(crate) fn validate(config: &mut ContainerConfig) -> Result<(), SandboxError> {
    let image = config.image.trim();
    if image.is_empty() {
        return Err(SandboxError::Config(
            "no container image is set; set `image` (for example \"alpine:3.20\")".into(),
        ));
    }
    config.image = image.to_string();
    flag_value("image", &config.image)?;

    let cwd = config.cwd.trim();
    let cwd = if cwd.len() > 1 { cwd.trim_end_matches('/') } else { cwd };
    container_dir("cwd", cwd)?;
    if cwd == "/" && config.readonly_rootfs {
        return Err(SandboxError::Config(
            "cwd `/` cannot be a tmpfs scratch over a read-only root; choose a directory such as /workspace or set \
             `readonly_rootfs: false`"
                .into(),
        ));
    }
    config.cwd = cwd.to_string();

    match &config.name {
        Some(name) => plain_name("name", name)?,
        None if config.reconnect => {
            return Err(SandboxError::Config(
                "reconnect needs a stable `name` to find the container again; set `name`".into(),
            ));
        }
        None => {}
    }
    if let Network::Named(name) = &config.network {
        plain_name("network", name)?;
    }
    for cap in &config.cap_add {
        if cap.is_empty() || !cap.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(SandboxError::Config(format!(
                "cap_add entry {cap:?} is not a capability name; use names such as NET_BIND_SERVICE"
            )));
        }
    }
    for (what, value) in [("memory", &config.memory), ("cpus", &config.cpus), ("user", &config.user)] {
        if let Some(value) = value {
            flag_value(what, value)?;
        }
    }
    for bind in &config.binds {
        let host = bind.host.to_str().ok_or_else(|| {
            SandboxError::Config(format!("bind source {} is not UTF-8; use a UTF-8 path", bind.host.display()))
        })?;
        if !bind.host.is_absolute() || host.contains([':', '\0']) {
            return Err(SandboxError::Config(format!(
                "bind source {host:?} must be an absolute host path without `:`; use a full path"
            )));
        }
        container_dir("bind target", &bind.container)?;
    }
    for (key, value) in &config.env {
        if key.is_empty() || key.contains(['=', '\0']) || value.contains('\0') {
            return Err(SandboxError::Config(format!(
                "env entry {key:?} is malformed; keys need a name without `=` and no NUL bytes"
            )));
        }
    }
    Ok(())
}

/// A value passed after a flag or as the image: not empty, no whitespace or
/// control characters, and not starting with `-` (it would read as a flag).
fn flag_value(what: &str, value: &str) -> Result<(), SandboxError> {
    if value.is_empty() || value.starts_with('-') || value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(SandboxError::Config(format!(
            "`{what}` {value:?} is malformed; it may not be empty, start with `-`, or contain spaces"
        )));
    }
    Ok(())
}

/// A container path: absolute, no `..`, nothing that would split a `-v` or
/// `--tmpfs` spec.
fn container_dir(what: &str, path: &str) -> Result<(), SandboxError> {
    if !path.starts_with('/') || path.contains([':', ',', '\0']) || path.split('/').any(|s| s == "..") {
        return Err(SandboxError::Config(format!(
            "`{what}` {path:?} must be an absolute container path without `..`, `:` or `,`; for example /workspace"
        )));
    }
    Ok(())
}

/// A Docker object name: `[A-Za-z0-9][A-Za-z0-9_.-]*`.
fn plain_name(what: &str, name: &str) -> Result<(), SandboxError> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
    if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')) {
        return Err(SandboxError::Config(format!(
            "`{what}` {name:?} is malformed; use letters, digits, `_`, `.` and `-`, starting with a letter or digit"
        )));
    }
    Ok(())
}

/// Whether a container id printed by the CLI is safe to pass back as an argument.
pub(crate) fn is_plain_id(id: &str) -> bool {
    plain_name("id", id).is_ok()
}
