//! The sandbox unit: *where* the agent's tools act. It holds the run's
//! [`Sandbox`] (the operator's, or a fresh in-memory one), preopens a local
//! sandbox's directory into the component, and adds the sandbox's own
//! instructions after the agent's.
//!
//! WASI writes bypass the gate, so the preopen is writable only when the
//! authority lets `write` pass without asking, under the mode as the
//! plugin's own declaration narrows it.
//!
//! An agent's declared `sandbox` is a request, never a grant: without the
//! operator's choice of sandbox ([`Providers::sandbox`](crate::settings::Providers::sandbox)
//! unset) a run of an agent that asks for anything but the virtual sandbox
//! is refused, saying how to grant it; it does not run in memory behind the
//! agent's back. It is also a floor on isolation, as its declared mode is a
//! ceiling on authority: it may run in a sandbox at least as isolated as the
//! one it names (virtual, then container or remote, then local), never in a
//! less isolated one.

use std::sync::Arc;

use nexo_sandbox::{
    Confinement, ContainerConfig, ContainerSandbox, LocalSandbox, Sandbox, SandboxError, ShellPolicy, VirtualSandbox,
};

use crate::error::{ConfigError, ToolError};
use crate::grant::{Grant, RuntimeSetting};
use crate::hint::{Fix, Vocabulary};
use crate::instance::Preopen;
use crate::manifest::{Capability, SandboxKind};
use crate::settings::RunOptions;
use crate::unit::{Setup, Step, Unit};

/// The run's sandbox, shared by the units whose tools act in it.
#[derive(Clone)]
pub struct Workspace {
    /// The sandbox.
    pub sandbox: Arc<dyn Sandbox>,
}

/// The sandbox unit.
#[derive(Debug, Default, Clone, Copy)]
pub struct SandboxUnit;

impl Unit for SandboxUnit {
    fn name(&self) -> &'static str {
        "sandbox"
    }

    /// The operator's sandbox from the grant's sandbox slice: left unset
    /// when the operator chose none (an agent that asks for one is then
    /// refused), and a shell's confinement stated in the log.
    fn configure(&self, grant: &Grant, options: &mut RunOptions) -> Result<(), ConfigError> {
        let s = &grant.sandbox;
        // Checked first: nothing is started for a grant that cannot be used.
        if s.cwd.is_some() && s.kind != SandboxKind::Local {
            return Err(ConfigError::invalid(
                "--cwd",
                "--cwd needs --sandbox local (only the local sandbox works in a host directory)",
            ));
        }
        if s.image.is_some() && s.kind != SandboxKind::Container {
            return Err(ConfigError::invalid("--image", "--image needs --sandbox container"));
        }
        // Only the local sandbox gives commands network through the proxy; a container has none.
        if !grant.net_hosts.is_empty() && matches!(s.kind, SandboxKind::Container | SandboxKind::Remote) {
            return Err(ConfigError::invalid(
                "--allow-net",
                format!(
                    "--allow-net (`net-hosts`) gives network to the local sandbox's commands, through nexo's egress \
                     proxy; the {} sandbox's commands have none. Use --sandbox local, or drop --allow-net",
                    s.kind.as_str()
                ),
            ));
        }
        let sandbox: Option<Arc<dyn Sandbox>> = match s.kind {
            // Chosen, it is the operator's: an agent that asks for another
            // sandbox then runs in memory all the same (or is refused by its floor).
            SandboxKind::Virtual if s.chosen => Some(Arc::new(nexo_sandbox::VirtualSandbox::new())),
            SandboxKind::Virtual => None,
            SandboxKind::Local => {
                let cwd = match &s.cwd {
                    Some(dir) => dir.clone(),
                    None => std::env::current_dir().map_err(|e| {
                        ConfigError::invalid("--cwd", format!("cannot read the current directory: {e}"))
                    })?,
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
                    RuntimeSetting::Podman => ContainerConfig::podman(image),
                    RuntimeSetting::Apple => ContainerConfig::apple(image),
                };
                Some(Arc::new(
                    ContainerSandbox::new(config).map_err(|e| ConfigError::invalid("--sandbox", e.to_string()))?,
                ))
            }
            SandboxKind::Remote => {
                return Err(ConfigError::invalid(
                    "sandbox",
                    "the remote sandbox comes from a sandbox-provider component that an embedding program sets, \
                     not from the grant: grant virtual, local or container",
                ));
            }
        };
        options.providers.sandbox = sandbox;
        Ok(())
    }

    fn prepare<'a>(&'a self, setup: &'a mut Setup<'_>) -> Step<'a> {
        Step::ready((|| {
            let sandbox: Arc<dyn Sandbox> = match (&setup.options.providers.sandbox, setup.manifest.sandbox) {
                (Some(chosen), _) => chosen.clone(),
                (None, Some(asked)) if asked != SandboxKind::Virtual => {
                    let words = setup.options.permissions.vocabulary();
                    return Err(not_granted(&setup.manifest.name, asked, words).into());
                }
                (None, _) => Arc::new(VirtualSandbox::new()),
            };
            if let Some(declared) = setup.manifest.sandbox {
                let words = setup.options.permissions.vocabulary();
                check_floor(&setup.manifest.name, declared, sandbox.name(), words)?;
            }
            if let Some(root) = sandbox.host_root() {
                // A write through the preopen is asked of no hook: with hooks,
                // the agent's own writes go through `write-file`, which is.
                let hooked = !setup.options.providers.hooks.is_empty();
                setup.preopens.push(Preopen {
                    host: root.to_path_buf(),
                    guest: root.to_string_lossy().into_owned(),
                    writable: setup.authority.allows_unasked(Capability::Write) && !hooked,
                });
            }
            // The model hears of the shell only if it is offered the tool.
            let shell = sandbox.supports_shell() && setup.authority.offers(Capability::Shell);
            setup.instructions.extend(sandbox.instructions(shell));
            setup.state.insert(Workspace { sandbox });
            Ok(())
        })())
    }
}

/// How far a sandbox keeps an agent from the host: 0 is the most isolated.
fn isolation(kind: &str) -> u8 {
    match kind {
        "virtual" => 0,
        "container" | "remote" => 1,
        _ => 2,
    }
}

/// The refusal of a run whose agent asks for the `asked` sandbox when the
/// operator chose none: only the operator grants a sandbox.
fn not_granted(agent: &str, asked: SandboxKind, words: Vocabulary) -> ConfigError {
    let kind = asked.as_str();
    let grant = match asked {
        SandboxKind::Remote => "no grant gives a remote sandbox: an embedding program sets one".to_string(),
        _ => format!("choose {} to grant it", words.fix(Fix::Sandbox(kind))),
    };
    ConfigError::invalid(
        "sandbox",
        format!(
            "`{agent}` asks for the {kind} sandbox, which only the operator can grant, and no sandbox was chosen: \
             {grant}, or {} to run it in memory",
            words.fix(Fix::Sandbox("virtual"))
        ),
    )
}

/// Refuses a run in a less isolated sandbox than the agent declared.
fn check_floor(agent: &str, declared: SandboxKind, actual: &str, words: Vocabulary) -> Result<(), ConfigError> {
    if isolation(actual) <= isolation(declared.as_str()) {
        return Ok(());
    }
    Err(ConfigError::invalid(
        "sandbox",
        format!(
            "`{agent}` declares the {} sandbox, and the {actual} sandbox gives it more access to the host than \
             that; run it in {} (or a more isolated one), or ask its author to declare `{actual}`",
            declared.as_str(),
            words.fix(Fix::Sandbox(declared.as_str()))
        ),
    ))
}

/// Runs a sandbox operation: off the async threads when the sandbox may
/// block, in place when it never does (the in-memory one).
pub(crate) async fn blocking<T: Send + 'static>(
    sandbox: &Arc<dyn Sandbox>,
    f: impl FnOnce(&dyn Sandbox) -> Result<T, SandboxError> + Send + 'static,
) -> Result<T, ToolError> {
    if !sandbox.blocks() {
        return f(&**sandbox).map_err(ToolError::from);
    }
    let sandbox = sandbox.clone();
    match tokio::task::spawn_blocking(move || f(&*sandbox)).await {
        Ok(result) => result.map_err(ToolError::from),
        Err(e) => Err(ToolError::Failed(format!("the sandbox operation stopped unexpectedly: {e}"))),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_requested_sandbox_is_refused_with_how_to_grant_it() {
        let err = not_granted("a", SandboxKind::Local, Vocabulary::Flags).to_string();
        assert!(err.contains("asks for the local sandbox") && err.contains("`--sandbox local`"), "{err}");
        assert!(err.contains("`--sandbox virtual` to run it in memory"), "{err}");
        // In the settings' words (a tenant's, an embedding program's): no flag.
        let err = not_granted("a", SandboxKind::Local, Vocabulary::Settings).to_string();
        assert!(err.contains("choose the `local` sandbox to grant it") && !err.contains("--"), "{err}");
    }

    #[test]
    fn a_declared_sandbox_is_a_floor_on_isolation() {
        assert!(check_floor("a", SandboxKind::Local, "virtual", Vocabulary::Flags).is_ok());
        assert!(check_floor("a", SandboxKind::Local, "container", Vocabulary::Flags).is_ok());
        assert!(check_floor("a", SandboxKind::Container, "remote", Vocabulary::Flags).is_ok());
        assert!(check_floor("a", SandboxKind::Virtual, "virtual", Vocabulary::Flags).is_ok());
        let err = check_floor("a", SandboxKind::Virtual, "local", Vocabulary::Flags).unwrap_err().to_string();
        assert!(err.contains("declares the virtual sandbox") && err.contains("--sandbox virtual"), "{err}");
        let err = check_floor("a", SandboxKind::Virtual, "local", Vocabulary::Settings).unwrap_err().to_string();
        assert!(err.contains("run it in the `virtual` sandbox") && !err.contains("--"), "{err}");
        assert!(check_floor("a", SandboxKind::Container, "local", Vocabulary::Flags).is_err());
    }
}
