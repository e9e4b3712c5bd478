//! The sandbox unit: *where* the agent's tools act. It holds the run's
//! [`Sandbox`] (the operator's, or a fresh in-memory one), preopens a local
//! sandbox's directory into the component, and adds the sandbox's own
//! instructions after the agent's.
//!
//! WASI writes bypass the gate, so the preopen is writable only when the
//! authority lets `write` pass without asking, under the mode as the
//! plugin's own declaration narrows it.

use std::sync::Arc;

use nexo_model::BoxFuture;
use nexo_sandbox::{Sandbox, SandboxError, VirtualSandbox};

use crate::error::{RunError, ToolError};
use crate::instance::Preopen;
use crate::manifest::Capability;
use crate::unit::{Setup, Unit};

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

    fn prepare<'a>(&'a self, setup: &'a mut Setup<'_>) -> BoxFuture<'a, Result<(), RunError>> {
        Box::pin(async move {
            let sandbox: Arc<dyn Sandbox> =
                setup.options.sandbox.clone().unwrap_or_else(|| Arc::new(VirtualSandbox::new()));
            if let Some(root) = sandbox.host_root() {
                setup.preopens.push(Preopen {
                    host: root.to_path_buf(),
                    guest: root.to_string_lossy().into_owned(),
                    writable: setup.authority.allows_unasked(Capability::Write),
                });
            }
            setup.instructions.extend(sandbox.instructions());
            setup.state.insert(Workspace { sandbox });
            Ok(())
        })
    }
}

/// Runs a sandbox operation off the async threads.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, SandboxError> + Send + 'static,
) -> Result<T, ToolError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result.map_err(ToolError::from),
        Err(e) => Err(ToolError::Failed(format!("the sandbox operation stopped unexpectedly: {e}"))),
    }
}
