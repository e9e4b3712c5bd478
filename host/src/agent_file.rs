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

use crate::agent_loop::Outcome;
use crate::capability::model::{Prompt, model_run_error, remember};
use crate::error::{LoadError, RunError};
use crate::manifest::{AgentManifest, PluginKind};
use crate::plugin::validate;
use crate::settings::RunOptions;

/// A declarative agent, loaded and checked.
#[derive(Debug, Clone)]
pub struct AgentFile {
    path: PathBuf,
    manifest: AgentManifest,
    sha256: String,
}

/// Whether `file` names a declarative agent rather than a component.
pub fn is_toml(file: &std::path::Path) -> bool {
    file.extension().is_some_and(|e| e.eq_ignore_ascii_case("toml"))
}

impl AgentFile {
    /// Reads and validates the file.
    pub fn load(path: impl AsRef<Path>) -> Result<AgentFile, LoadError> {
        let path = path.as_ref().to_path_buf();
        let text = crate::files::read_regular_text(&path, crate::files::MAX_TOML_BYTES)
            .map_err(|source| LoadError::Read { path: path.clone(), source })?;
        Self::parse(&text, path)
    }

    /// Parses and validates the TOML `text`; `path` names it in errors.
    pub fn parse(text: &str, path: impl Into<PathBuf>) -> Result<AgentFile, LoadError> {
        let path = path.into();
        let manifest: AgentManifest = toml::from_str(text).map_err(|e| LoadError::BadManifest {
            path: path.clone(),
            kind: PluginKind::Agent,
            field: "file",
            problem: crate::files::toml_problem(text, &e),
        })?;
        validate::agent_manifest(&manifest).map_err(|validate::Problem { field, problem }| LoadError::BadManifest {
            path: path.clone(),
            kind: PluginKind::Agent,
            field,
            problem,
        })?;
        use sha2::{Digest, Sha256};
        let sha256 = hex::encode(Sha256::digest(text.as_bytes()));
        Ok(AgentFile { path, manifest, sha256 })
    }

    /// The manifest.
    pub fn manifest(&self) -> &AgentManifest {
        &self.manifest
    }

    /// The SHA-256 of the file's text: a recorded run's check that it
    /// resumes the same agent.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs one prompt with the host loop, under the operator's options:
    /// the same units and host-call path as a component agent, with
    /// `options.timeout` (default 300 s) bounding the whole run.
    pub async fn run(&self, input: &str, options: &RunOptions) -> Result<Outcome, RunError> {
        let limit = options.limits.timeout.unwrap_or(crate::Limits::default().run_timeout);
        let name = &self.manifest.name;
        let run = async {
            let limits = crate::Limits::default();
            let prepared = crate::world::agent::prepare(&self.manifest, options, &[], &limits).await?;
            let outcome =
                prepared.tools.call(&Prompt, input.to_string()).await.map_err(|e| model_run_error(name, &e))?;
            remember(&prepared.tools, &outcome);
            Ok(outcome)
        };
        // A halted run (cancelled, its lease lost) may be waiting on a model
        // turn: race it against the stop, as a component's run is, so the
        // pass ends at once rather than when the model answers.
        let stop = options.context.journal.as_ref().map(|j| j.stop_signal().clone());
        let stopped = async move {
            match stop {
                Some(stop) => stop.stopped().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            timed = tokio::time::timeout(limit, run) => match timed {
                Ok(result) => result,
                Err(_) => Err(RunError::Deadline { plugin: name.clone(), function: "prompt".into(), limit }),
            },
            () = stopped => Err(RunError::AgentFailed { plugin: name.clone(), reason: "the run was stopped".into() }),
        }
    }
}
