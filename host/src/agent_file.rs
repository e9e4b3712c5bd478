//! Declarative agents: a TOML file with the manifest's fields, run by the
//! host loop with no component at all. For agents that need no code.
//!
//! ```toml
//! name = "reviewer"
//! description = "Reviews code for bugs"
//! instructions = "You are a careful code reviewer."
//! capabilities = ["read", "glob"]
//! max-turns = 10
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use nexo_sandbox::{Sandbox, VirtualSandbox};

use crate::agent_loop::Outcome;
use crate::error::PluginError;
use crate::manifest::AgentManifest;
use crate::plugin::{PluginKind, validate};
use crate::state::{Prompting, RunOptions};

/// A declarative agent, loaded and checked.
#[derive(Debug, Clone)]
pub struct AgentFile {
    path: PathBuf,
    manifest: AgentManifest,
}

impl AgentFile {
    /// Reads and validates the file.
    pub fn load(path: impl AsRef<Path>) -> Result<AgentFile, PluginError> {
        let path = path.as_ref().to_path_buf();
        let text = crate::files::read_regular_text(&path, crate::files::MAX_TOML_BYTES)
            .map_err(|source| PluginError::Read { path: path.clone(), source })?;
        Self::parse(&text, path)
    }

    /// Parses and validates the TOML `text`; `path` names it in errors.
    pub fn parse(text: &str, path: impl Into<PathBuf>) -> Result<AgentFile, PluginError> {
        let path = path.into();
        let manifest: AgentManifest = toml::from_str(text).map_err(|e| PluginError::BadManifest {
            path: path.clone(),
            kind: PluginKind::Agent,
            field: "file",
            problem: crate::files::toml_problem(text, &e),
        })?;
        validate::agent_manifest(&manifest).map_err(|(field, problem)| PluginError::BadManifest {
            path: path.clone(),
            kind: PluginKind::Agent,
            field,
            problem,
        })?;
        Ok(AgentFile { path, manifest })
    }

    /// The manifest.
    pub fn manifest(&self) -> &AgentManifest {
        &self.manifest
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs one prompt with the host loop, under the operator's options.
    pub async fn run(&self, input: &str, options: &RunOptions) -> Result<Outcome, PluginError> {
        let sandbox: Arc<dyn Sandbox> = options.sandbox.clone().unwrap_or_else(|| Arc::new(VirtualSandbox::new()));
        let toolbox = crate::agent::toolbox_with(&self.manifest, sandbox, options);
        let skills = crate::state::resolve_skills(&self.manifest, options).await?;
        let prompting = Prompting::new(&self.manifest, toolbox.sandbox().instructions(), skills, options);
        let failed = |reason: String| PluginError::AgentFailed { plugin: self.manifest.name.clone(), reason };
        let run = prompting.run(&toolbox, input);
        let timeout = options.timeout.unwrap_or(std::time::Duration::from_secs(300));
        match tokio::time::timeout(timeout, run).await {
            Ok(Ok(outcome)) => Ok(outcome),
            Ok(Err(e @ nexo_model::ModelError::Config(_))) => Err(failed(format!("model not configured: {e}"))),
            Ok(Err(e)) => Err(failed(e.to_string())),
            Err(_) => Err(PluginError::Deadline {
                plugin: self.manifest.name.clone(),
                function: "prompt".into(),
                limit: timeout,
            }),
        }
    }
}
