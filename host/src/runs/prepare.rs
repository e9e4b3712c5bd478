//! A run's specification made ready to run: its permissions, and what each
//! capability unit's configure stage makes of the grant (the sandbox, the
//! MCP clients); its search backend, model and loop. What a
//! front end adds (an event sink, a way to ask the user) it sets on the
//! options it gets back.

use std::sync::Arc;

use std::path::{Path, PathBuf};

use super::spec::{HookFile, RunSpec, SkillFile};
use crate::authority::Permissions;
use crate::config::SearchSetup;
use crate::error::RunError;
use crate::grant::Grant;
use crate::hooks::Owner;
use crate::quota::RunBudget;
use crate::settings::{RunOptions, SkillMode};
use crate::{ConfigError, Engine, EngineConfig, Plugin};

/// The run options `spec` gives, on `engine`, drawing on `budget` (a
/// served run's tenant's; the default, nothing).
pub async fn options(engine: &Engine, spec: &RunSpec, budget: RunBudget) -> Result<RunOptions, RunError> {
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
        // Fail closed: a hook the run was given must see every prompt.
        if !spec.hooks.is_empty() {
            return Err(ConfigError::invalid(
                "--hook",
                "hooks need nexo's own loop: the Claude Code CLI sends its prompts (and runs its built-in tools) \
                 where no hook sees them; run with `--loop host`, or without hooks",
            )
            .into());
        }
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
    options.providers.hooks = hook_components(engine, &spec.hooks, &budget).await?;
    options.budget = budget;
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

/// The skill components at `paths` as a run records them ([`SkillFile`]):
/// each loaded now, so a run is refused before it is recorded (or queued)
/// for a file that is not a skill component or a skill name given twice.
pub async fn skill_files(engine: &Engine, paths: &[PathBuf]) -> Result<Vec<SkillFile>, RunError> {
    let wanted: Vec<(&Path, Option<&str>)> = paths.iter().map(|p| (p.as_path(), None)).collect();
    let loaded = load_plugins(engine, &wanted).await?;
    Ok(paths.iter().zip(loaded).map(|(path, (_, sha256))| SkillFile { path: path.clone(), sha256 }).collect())
}

/// The hook components at `paths` as a run records them ([`HookFile`]):
/// each loaded now, so a run is refused before it is recorded (or queued)
/// for a file that is not a hook, or a hook given twice.
pub async fn hook_files(engine: &Engine, paths: &[PathBuf]) -> Result<Vec<HookFile>, RunError> {
    let mut files: Vec<HookFile> = Vec::with_capacity(paths.len());
    for path in paths {
        let plugin = Plugin::load(engine, path).await?;
        plugin.hook()?;
        if files.iter().any(|f| f.sha256 == plugin.sha256()) {
            return Err(ConfigError::invalid(
                "--hook",
                format!("the hook {} is given twice: give each hook once", path.display()),
            )
            .into());
        }
        files.push(HookFile { path: path.clone(), sha256: plugin.sha256().to_string(), owner: Owner::Operator });
    }
    Ok(files)
}

/// The hook components `files` name, loaded as they are now; a tenant's
/// drawing on `budget`. A file that is gone or no longer a hook refuses the
/// pass (hooks fail closed), as does a tenant's whose copy on this node does
/// not hold the plugin the run names.
pub async fn hook_components(
    engine: &Engine,
    files: &[HookFile],
    budget: &RunBudget,
) -> Result<Vec<Arc<dyn crate::hooks::HookComponent>>, RunError> {
    let mut loaded = Vec::with_capacity(files.len());
    for file in files {
        let plugin = Plugin::load(engine, &file.path).await?;
        let hook = plugin.hook()?;
        match file.owner {
            Owner::Operator => loaded.push(hook.component()),
            Owner::Tenant if plugin.sha256() != file.sha256 => {
                return Err(ConfigError::invalid(
                    "hooks",
                    format!(
                        "{} does not hold the tenant's hook {}: remove the file, and it is fetched from the store \
                         again",
                        file.path.display(),
                        file.sha256
                    ),
                )
                .into());
            }
            Owner::Tenant => loaded.push(hook.tenants(budget).component()),
        }
    }
    Ok(loaded)
}

/// The skill components `files` name, loaded, each with the content the
/// run recorded (a file changed since is refused, naming the fix).
pub async fn skill_components(
    engine: &Engine,
    files: &[SkillFile],
) -> Result<Vec<Arc<dyn crate::settings::SkillComponent>>, RunError> {
    let expected: Vec<(&Path, Option<&str>)> =
        files.iter().map(|f| (f.path.as_path(), Some(f.sha256.as_str()))).collect();
    let mut loaded: Vec<Arc<dyn crate::settings::SkillComponent>> = Vec::with_capacity(files.len());
    for (plugin, _) in load_plugins(engine, &expected).await? {
        loaded.push(Arc::new(plugin.skill()?.clone()));
    }
    Ok(loaded)
}

/// The plugins at `paths`, each a skill component (checked against the
/// SHA-256 given with it), no two of one skill name.
async fn load_plugins(engine: &Engine, paths: &[(&Path, Option<&str>)]) -> Result<Vec<(Plugin, String)>, RunError> {
    let mut loaded: Vec<(Plugin, String)> = Vec::new();
    for &(path, expected) in paths {
        let plugin = Plugin::load(engine, path).await?;
        let sha256 = plugin.sha256().to_string();
        if let Some(expected) = expected.filter(|e| *e != sha256) {
            return Err(ConfigError::invalid(
                "[skills] components",
                format!(
                    "the skill component {} changed since the run was recorded (SHA-256 {expected}, now {sha256}): \
                     restore it, or start a new run",
                    path.display()
                ),
            )
            .into());
        }
        let name = plugin.skill()?.name().to_string();
        if loaded.iter().any(|(p, _)| p.skill().is_ok_and(|s| s.name() == name)) {
            return Err(ConfigError::invalid(
                "[skills] components",
                format!(
                    "two skill components are named `{name}` ({} is the second): give each skill once",
                    path.display()
                ),
            )
            .into());
        }
        loaded.push((plugin, sha256));
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
