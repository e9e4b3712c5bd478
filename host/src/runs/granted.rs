//! A grant made into what a run uses: its sandbox, its permissions and its
//! MCP clients.

use std::sync::Arc;

use nexo_sandbox::{Confinement, ContainerConfig, ContainerSandbox, LocalSandbox, Sandbox, ShellPolicy};

use crate::ConfigError;
use crate::authority::Permissions;
use crate::grant::{Grant, RuntimeSetting};
use crate::manifest::SandboxKind;
use crate::settings::RunOptions;

/// Run options for `grant`: its sandbox, permissions and MCP clients, and
/// the grant itself with only the MCP servers that are configured.
pub fn granted(grant: &Grant) -> Result<RunOptions, ConfigError> {
    let s = &grant.sandbox;
    let sandbox: Option<Arc<dyn Sandbox>> = match s.kind {
        // Chosen, it is the operator's: an agent that asks for another
        // sandbox then runs in memory all the same (or is refused by its floor).
        SandboxKind::Virtual if s.chosen => Some(Arc::new(nexo_sandbox::VirtualSandbox::new())),
        SandboxKind::Virtual => None,
        SandboxKind::Local => {
            let cwd = match &s.cwd {
                Some(dir) => dir.clone(),
                None => std::env::current_dir()
                    .map_err(|e| ConfigError::invalid("--cwd", format!("cannot read the current directory: {e}")))?,
            };
            let policy = s.shell_policy();
            log_confinement(&policy);
            Some(Arc::new(
                LocalSandbox::with_shell(&cwd, policy).map_err(|e| ConfigError::invalid("--cwd", e.to_string()))?,
            ))
        }
        SandboxKind::Container => {
            let Some(image) = &s.image else {
                return Err(ConfigError::invalid(
                    "--image",
                    "--sandbox container needs --image (there is no default image)",
                ));
            };
            let config = match s.container_runtime {
                RuntimeSetting::Docker => ContainerConfig::docker(image),
                RuntimeSetting::Apple => ContainerConfig::apple(image),
            };
            Some(Arc::new(ContainerSandbox::new(config).map_err(|e| ConfigError::invalid("--sandbox", e.to_string()))?))
        }
        SandboxKind::Remote => {
            return Err(ConfigError::invalid(
                "sandbox",
                "the remote sandbox comes from a sandbox-provider component that an embedding program sets, \
                 not from the grant: grant virtual, local or container",
            ));
        }
    };
    if s.cwd.is_some() && s.kind != SandboxKind::Local {
        return Err(ConfigError::invalid(
            "--cwd",
            "--cwd needs --sandbox local (only the local sandbox works in a host directory)",
        ));
    }
    if s.image.is_some() && s.kind != SandboxKind::Container {
        return Err(ConfigError::invalid("--image", "--image needs --sandbox container"));
    }
    // No hook to ask with: a front end that can ask adds its own, and
    // without one the gate says that nobody could be asked.
    let permissions = Permissions::new(grant.mode);
    let servers = grant.mcp.configs()?;
    let mcp = (!servers.is_empty()).then(|| {
        // stdio servers start under this binary's orphan guard, so they
        // end with nexo however it ends.
        let guard = std::env::current_exe().ok();
        // Confined servers get the local shell's mechanism.
        nexo_mcp::Clients::new(servers, nexo_mcp::ClientOptions { guard, ..Default::default() })
            .with_confinement(s.shell_policy().confinement)
            .with_view(s.view.clone())
    });
    // The authority reaches only servers whose settings are known.
    let mut grant = grant.clone();
    grant.mcp.servers = grant.mcp.servers.iter().filter(|n| grant.mcp.configured(n)).cloned().collect();
    Ok(RunOptions { sandbox, permissions, grant, mcp, ..RunOptions::default() })
}

/// States the confinement shell commands will run under, at info level,
/// and warns when `auto` could not use bubblewrap.
fn log_confinement(policy: &ShellPolicy) {
    match policy.effective_confinement() {
        Ok(c) => {
            tracing::info!(target: "nexo::sandbox", "{}", policy.describe());
            if policy.confinement == Confinement::Auto && c != Confinement::Bubblewrap {
                let why = ShellPolicy { confinement: Confinement::Bubblewrap, ..policy.clone() }
                    .effective_confinement()
                    .err()
                    .map(|e| e.to_string())
                    .unwrap_or_default();
                tracing::warn!(
                    target: "nexo::sandbox",
                    "bubblewrap is not usable here, so shell commands fall back to Landlock: {why}"
                );
            }
        }
        Err(e) => tracing::info!(target: "nexo::sandbox", "shell commands cannot run: {e}"),
    }
}
