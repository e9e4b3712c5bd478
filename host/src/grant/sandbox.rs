//! The sandbox's slice of a grant: where tools act, and how the local
//! sandbox confines shell commands.

use std::path::{Path, PathBuf};

use clap::ValueEnum;
use nexo_sandbox::{Confinement, ShellPolicy, SystemView};
use serde::{Deserialize, Serialize};

use crate::ConfigError;
use crate::manifest::SandboxKind;

/// Where a run's tools act.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxGrant {
    /// The sandbox.
    pub kind: SandboxKind,
    /// Whether the operator chose it (a flag, the config file, a tenant's
    /// policy) rather than getting the default: an agent's own request for
    /// a sandbox is refused without that choice.
    pub chosen: bool,
    /// The local sandbox's directory (recorded grants hold it absolute).
    pub cwd: Option<PathBuf>,
    /// The container sandbox's image.
    pub image: Option<String>,
    /// The container CLI.
    pub container_runtime: RuntimeSetting,
    /// How local shell commands are confined.
    pub shell_confinement: ConfinementSetting,
    /// What confined processes may read of the host (`[sandbox]`): never
    /// recorded, read again at each pass as the operator has it then.
    pub view: SystemView,
    /// The private addresses shell commands' network may reach
    /// (`[sandbox] net-allow-private`): never recorded, read again at each
    /// pass as the operator has it then.
    pub net_private: Vec<std::net::IpAddr>,
}

impl Default for SandboxGrant {
    /// In memory, not chosen.
    fn default() -> Self {
        SandboxGrant {
            kind: SandboxKind::Virtual,
            chosen: false,
            cwd: None,
            image: None,
            container_runtime: RuntimeSetting::Docker,
            shell_confinement: ConfinementSetting::Auto,
            view: SystemView::default(),
            net_private: Vec::new(),
        }
    }
}

/// The container CLI of the container sandbox.
#[derive(ValueEnum, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum RuntimeSetting {
    /// `docker`.
    Docker,
    /// `podman`.
    Podman,
    /// Apple's `container`.
    Apple,
}

/// How the local sandbox confines shell commands.
#[derive(ValueEnum, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ConfinementSetting {
    /// The strongest that works here.
    Auto,
    /// bubblewrap.
    Bubblewrap,
    /// Landlock.
    Landlock,
    /// None: only for trusted agents.
    None,
}

impl SandboxGrant {
    /// The local sandbox's directory, when the sandbox is local.
    pub fn local_dir(&self) -> Option<&Path> {
        match self.kind {
            SandboxKind::Local => self.cwd.as_deref(),
            _ => None,
        }
    }

    /// The local sandbox's directory made absolute (the current directory
    /// when none is set), so a pass elsewhere acts in the same place.
    pub fn absolute_cwd(&self) -> Result<PathBuf, ConfigError> {
        match &self.cwd {
            Some(dir) => std::path::absolute(dir),
            None => std::env::current_dir(),
        }
        .map_err(|e| ConfigError::invalid("--cwd", format!("cannot read the current directory: {e}")))
    }

    /// Whether the sandbox runs commands (as `Sandbox::supports_shell`
    /// answers: the virtual sandbox runs none).
    pub fn has_shell(&self) -> bool {
        self.kind != SandboxKind::Virtual
    }

    /// The local sandbox's shell policy.
    pub fn shell_policy(&self) -> ShellPolicy {
        let confinement = match self.shell_confinement {
            ConfinementSetting::Auto => Confinement::Auto,
            ConfinementSetting::Bubblewrap => Confinement::Bubblewrap,
            ConfinementSetting::Landlock => Confinement::Landlock,
            ConfinementSetting::None => Confinement::Unconfined,
        };
        ShellPolicy { confinement, view: self.view.clone(), ..ShellPolicy::default() }
    }

    /// How shell commands would run in this sandbox, in one line,
    /// truthfully: the mechanism actually in force, not the one asked for.
    pub fn shell_summary(&self, shell_effective: bool) -> String {
        let how = match self.kind {
            SandboxKind::Virtual => return "(none: the virtual sandbox has no shell)".into(),
            SandboxKind::Container => "in the container".to_string(),
            SandboxKind::Remote => "in the remote sandbox".to_string(),
            SandboxKind::Local => self.shell_policy().describe(),
        };
        if shell_effective { how } else { format!("{how} (shell not granted to this agent)") }
    }
}
