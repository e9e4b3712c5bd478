//! [`ContainerSandbox`]: the checked configuration, the CLI found, and the
//! slot of the running container.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use super::binary::{find_on_path, resolve_override};
use super::config::ContainerConfig;
use super::validate::validate;
use crate::SandboxError;

/// A sandbox inside a container, started on the first tool call.
///
/// [`Sandbox::close`] removes an ephemeral container. Call it: dropping the
/// sandbox, or the process ending however it ends, only lets the container
/// stop, after which the engine removes it (`--rm`). A reconnecting sandbox
/// reuses whatever container carries its label, whatever options that
/// container was created with.
///
/// [`Sandbox::close`]: crate::Sandbox::close
#[derive(Debug)]
pub struct ContainerSandbox {
    pub(crate) config: ContainerConfig,
    pub(crate) binary: PathBuf,
    pub(crate) name: String,
    /// The running container's id, once started.
    pub(crate) id: Mutex<Option<String>>,
    /// The tether of an ephemeral container (see `lifecycle.rs`).
    pub(crate) tether: Mutex<Option<Child>>,
}

impl ContainerSandbox {
    /// Checks `config` and finds the CLI; starts nothing.
    ///
    /// A missing image or CLI, or a malformed option, is a
    /// [`SandboxError::Config`].
    pub fn new(config: ContainerConfig) -> Result<Self, SandboxError> {
        let path = std::env::var_os("PATH").unwrap_or_default();
        Self::with_search_path(config, &path)
    }

    /// Like [`ContainerSandbox::new`], searching `path` (a `PATH`-style list)
    /// for the CLI instead of the process's `PATH`.
    pub fn with_search_path(mut config: ContainerConfig, path: &OsStr) -> Result<Self, SandboxError> {
        validate(&mut config)?;
        let binary = match &config.binary {
            Some(binary) => resolve_override(binary, path).ok_or_else(|| {
                SandboxError::Config(format!(
                    "the container CLI {} does not exist; fix `binary` or unset it to search PATH for `{}`",
                    binary.display(),
                    config.runtime.binary_name()
                ))
            })?,
            None => find_on_path(config.runtime.binary_name(), path).ok_or_else(|| {
                SandboxError::Config(format!(
                    "the `{}` CLI was not found on PATH; {}, or put the directory that holds it on PATH",
                    config.runtime.binary_name(),
                    config.runtime.install_hint()
                ))
            })?,
        };
        let name = config.name.clone().unwrap_or_else(unique_name);
        Ok(ContainerSandbox { config, binary, name, id: Mutex::new(None), tether: Mutex::new(None) })
    }

    /// The configuration, with `cwd` normalized.
    pub fn config(&self) -> &ContainerConfig {
        &self.config
    }

    /// The CLI executable in use.
    pub fn binary(&self) -> &Path {
        &self.binary
    }

    /// The sandbox name: the value of the `nexo.sandbox.id` label.
    pub fn container_name(&self) -> &str {
        &self.name
    }

    /// The running container's id, or `None` before the first tool call and
    /// after close.
    pub fn container_id(&self) -> Option<String> {
        self.slot().clone()
    }

    pub(crate) fn slot(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        // The slot holds a plain id; a panic elsewhere cannot leave it half-written.
        self.id.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A fresh sandbox name: the process id, the time and a counter.
fn unique_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    format!("nexo-{:x}-{:x}-{n}", std::process::id(), nanos & 0xffff_ffff_ffff)
}
