//! Running shell commands for the local sandbox: a narrowed environment, a
//! timeout, capped output, and OS confinement where the kernel allows it.

use std::path::Path;
use std::time::Duration;

use crate::{ExecOutput, SandboxError};

/// How the local sandbox runs shell commands.
#[derive(Debug, Clone, Default)]
pub struct ShellPolicy {
    /// Variables added to the narrowed environment (`PATH`, `HOME`, `LANG`).
    pub env: Vec<(String, String)>,
    /// How commands are confined.
    pub confinement: Confinement,
}

/// How shell commands are confined by the operating system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Confinement {
    /// The strongest available mechanism; refuse to run if there is none.
    #[default]
    Auto,
    /// Bubblewrap: a read-only view of the host, the root writable, no network.
    Bubblewrap,
    /// Landlock: writes only inside the root, no TCP.
    Landlock,
    /// No OS confinement. Only when the operator explicitly opts in.
    Unconfined,
}

/// Runs `command` with `sh -c` in `root`.
pub(crate) fn run(
    root: &Path,
    command: &str,
    timeout: Duration,
    policy: &ShellPolicy,
) -> Result<ExecOutput, SandboxError> {
    let _ = (root, command, timeout, policy);
    Err(SandboxError::Unsupported("shell commands are not available in this build yet".into()))
}
