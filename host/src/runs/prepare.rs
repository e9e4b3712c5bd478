//! A run's specification made ready to run: its permissions, and what each
//! capability unit's configure stage makes of the grant (the sandbox, the
//! MCP clients); its search backend, model and loop. What a
//! front end adds (an event sink, a way to ask the user) it sets on the
//! options it gets back.

use std::sync::Arc;

use super::spec::RunSpec;
use crate::authority::Permissions;
use crate::config::SearchSetup;
use crate::error::RunError;
use crate::grant::Grant;
use crate::settings::{RunOptions, SkillMode};
use crate::{ConfigError, Engine, EngineConfig, Plugin};

/// The run options `spec` gives, on `engine`.
pub async fn options(engine: &Engine, spec: &RunSpec) -> Result<RunOptions, RunError> {
    let mut options = granted(&spec.grant)?;
    if let Some(table) = &spec.search
        && let Some(setup) = table.resolve(None)?
    {
        options.providers.search = Some(search_backend(engine, &setup).await?);
    }
    let resolved = spec.model.resolve()?;
    options.providers.model = resolved.provider;
    options.limits.prompt = resolved.limits;
    if let Some(mut claude) = resolved.agent_loop {
        claude.cwd = spec.grant.sandbox.local_dir().map(std::path::Path::to_path_buf);
        claude.view = spec.grant.sandbox.view.clone();
        if claude.builtin_tools && claude.cwd.is_none() {
            return Err(ConfigError::invalid(
                "--claude-builtin-tools",
                "the CLI's own tools act on real files, so they need the local sandbox: add `--sandbox local --cwd \
                 DIR` (nexo confines the CLI to DIR)",
            )
            .into());
        }
        claude.check().map_err(|e| ConfigError::invalid("--loop", e.to_string()))?;
        options.providers.agent_loop = Some(Arc::new(claude));
    }
    options.skills_path = Some(spec.skills_path.clone());
    options.providers.skill_components = skill_components(engine, &spec.skill_components).await?;
    if spec.progressive_skills {
        options.skill_mode = SkillMode::Progressive;
    }
    options.limits.timeout = Some(spec.timeout());
    options.limits.memory_bytes = Some(spec.memory_bytes());
    Ok(options)
}

/// Run options for `grant`: its permissions, then each unit's configure
/// stage (the sandbox, the MCP clients). No hook to ask with: a front end
/// that can ask adds its own, and without one the gate says that nobody
/// could be asked.
pub fn granted(grant: &Grant) -> Result<RunOptions, ConfigError> {
    let mut options =
        RunOptions { permissions: Permissions::new(grant.mode), grant: grant.clone(), ..RunOptions::default() };
    for unit in crate::world::agent::UNITS {
        unit.configure(grant, &mut options)?;
    }
    Ok(options)
}

/// The configured search backend, loaded; it must be a search-backend
/// component.
pub async fn search_backend(
    engine: &Engine,
    setup: &SearchSetup,
) -> Result<Arc<dyn crate::search::SearchBackend>, RunError> {
    let plugin = Plugin::load(engine, &setup.backend).await?;
    let backend = plugin.search_backend()?.clone();
    Ok(Arc::new(crate::world::search_backend::ComponentBackend::new(backend, &setup.grant)?))
}

/// The skill components at `files`, loaded; each must be a skill
/// component, and no two may share a name (an agent names a skill by it).
pub async fn skill_components(
    engine: &Engine,
    files: &[std::path::PathBuf],
) -> Result<Vec<Arc<dyn crate::settings::SkillComponent>>, RunError> {
    let mut loaded: Vec<Arc<dyn crate::settings::SkillComponent>> = Vec::with_capacity(files.len());
    for file in files {
        let plugin = Plugin::load(engine, file).await?;
        let skill = plugin.skill()?.clone();
        if let Some(same) = loaded.iter().find(|s| s.name() == skill.name()) {
            return Err(ConfigError::invalid(
                "[skills] components",
                format!(
                    "two skill components are named `{}` ({} is the second): give each skill once",
                    same.name(),
                    file.display()
                ),
            )
            .into());
        }
        loaded.push(Arc::new(skill));
    }
    Ok(loaded)
}

/// One engine for the passes of many runs: each pass brings its own
/// limits (its deadline and memory cap, from its specification), so the
/// engine's memory cap is the largest a run may have, and every run shares
/// its compiled components.
pub fn shared_engine(base: &EngineConfig) -> Result<Engine, RunError> {
    let mut config = base.clone();
    config.limits.memory_bytes = crate::engine::MAX_MEMORY_BYTES;
    Engine::new(config).map_err(|e| ConfigError::invalid("engine", format!("{e:#}")).into())
}

/// Ends what a run's options started: its MCP servers, and its sandbox (a
/// container, say). A failure is a warning: the run has ended already.
pub async fn close(options: &RunOptions) {
    if let Err(e) = options.close().await {
        errln!("warning: {e}");
    }
}
