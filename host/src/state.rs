//! What a store holds for one plugin instance: its WASI context (granting
//! nothing unless the run adds preopens), its resource limiter, its captured
//! stdio, and the per-kind host context.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Store};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use nexo_sandbox::Sandbox;

use nexo_model::Provider;

use crate::agent_loop::{EventSink, HostLoop, Loop, LoopLimits, Outcome};
use crate::engine::{Engine, Limits};
use crate::permissions::{Grant, Permissions};
use crate::tools::{ToolLimits, Toolbox};

/// A directory the run exposes to the component through WASI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preopen {
    /// The host directory.
    pub host: PathBuf,
    /// Where the guest sees it, for example `/workspace`.
    pub guest: String,
    /// Whether the guest may create and change files there.
    pub writable: bool,
}

/// Per-run settings chosen by the operator. The defaults are the safe ones:
/// the in-memory sandbox, `read-only`, and a grant of `read` and `glob`.
#[derive(Clone, Default)]
pub struct RunOptions {
    /// Where the agent's tools act. `None`: a fresh in-memory sandbox.
    pub sandbox: Option<Arc<dyn Sandbox>>,
    /// The permission mode and its hooks.
    pub permissions: Permissions,
    /// What the operator grants; the agent gets this ∩ what it requested.
    pub grant: Grant,
    /// Tool limits.
    pub tool_limits: ToolLimits,
    /// The model. `None`: `prompt` answers `not-configured`.
    pub model: Option<Arc<dyn Provider>>,
    /// The loop that runs each prompt. `None`: [`HostLoop`].
    pub agent_loop: Option<Arc<dyn Loop>>,
    /// Turn cap, token budget, streaming. The agent's own `max-turns` can
    /// only lower the cap.
    pub loop_limits: LoopLimits,
    /// Where loop events go. `None`: nowhere.
    pub events: Option<Arc<dyn EventSink>>,
    /// The directory holding skill packages an agent names in its manifest.
    /// `None`: `skills` in the current directory.
    pub skills_path: Option<PathBuf>,
    /// How named skills reach the model. Default: eagerly, in the system
    /// instructions.
    pub skill_mode: SkillMode,
    /// Skill components an agent may name; they are looked up before the
    /// skills path. Each runs with zero capabilities.
    pub skill_components: Vec<crate::Plugin>,
    /// Extra directories preopened into the component. A local sandbox's
    /// directory is preopened on its own; otherwise the component sees no
    /// filesystem at all.
    pub preopens: Vec<Preopen>,
    /// Overrides [`Limits::run_timeout`] for this run.
    pub timeout: Option<std::time::Duration>,
    /// Environment variables for the component. Empty by default: it sees
    /// only what the operator passes.
    pub env: Vec<(String, String)>,
    /// The backend behind the `web_search` tool. `None`: agents get no
    /// search tool, even with `search` granted.
    pub search: Option<Arc<dyn crate::search::SearchBackend>>,
    /// The guarded client for the `fetch` tool. `None`: the process-wide one
    /// ([`crate::web::shared_client`]). A client that exempts private
    /// addresses is refused: the fetch tool never reaches one.
    pub http: Option<nexo_egress::GuardedClient>,
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("sandbox", &self.sandbox.as_ref().map(|s| s.name()))
            .field("permissions", &self.permissions)
            .field("grant", &self.grant)
            .field("preopens", &self.preopens)
            .field("timeout", &self.timeout)
            .field("model", &self.model.as_ref().map(|m| format!("{}:{}", m.name(), m.model())))
            .field("loop_limits", &self.loop_limits)
            .field("search", &self.search.as_ref().map(|s| s.name().to_string()))
            .finish_non_exhaustive()
    }
}

/// Finds each skill `manifest` names: first among the skill components in
/// `options`, then in the skills path.
pub async fn resolve_skills(
    manifest: &crate::manifest::AgentManifest,
    options: &RunOptions,
) -> Result<Vec<crate::agent_loop::SkillDoc>, crate::PluginError> {
    let skills_path = options.skills_path.clone().unwrap_or_else(|| PathBuf::from("skills"));
    let fail = |reason: String| crate::PluginError::Skill { agent: manifest.name.clone(), reason };
    let mut found = Vec::new();
    for name in &manifest.skills {
        if let Some(component) = options.skill_components.iter().find(|c| c.name() == name) {
            let crate::plugin::Description::Skill(d) = component.description() else {
                return Err(fail(format!("{} is not a skill component", component.path().display())));
            };
            let body = component.skill_instructions().await.map_err(|e| fail(e.to_string()))?;
            found.push(crate::agent_loop::SkillDoc {
                name: d.metadata.name.clone(),
                description: d.metadata.description.clone(),
                body,
            });
            continue;
        }
        let skill = nexo_skills::find(&skills_path, name).map_err(|e| fail(e.to_string()))?;
        for warning in &skill.warnings {
            tracing::warn!(agent = %manifest.name, "skill `{name}`: {warning}");
        }
        found.push(crate::agent_loop::SkillDoc {
            name: skill.metadata.name,
            // The listing promises at most this much per skill.
            description: crate::truncate::head_chars(&skill.metadata.description, nexo_skills::MAX_DESCRIPTION_LEN),
            body: skill.instructions,
        });
    }
    Ok(found)
}

/// How an agent's skills reach the model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SkillMode {
    /// Each skill's instructions go into the system prompt, after the
    /// agent's and the sandbox's.
    #[default]
    Eager,
    /// Only names and descriptions go into the system prompt; the model loads
    /// a skill's instructions with the `activate_skill` tool.
    Progressive,
}

/// What an agent instance's `prompt` import runs with.
#[derive(Clone)]
pub struct Prompting {
    /// The model, if one is configured.
    pub model: Option<Arc<dyn Provider>>,
    /// The loop.
    pub agent_loop: Arc<dyn Loop>,
    /// Limits, with the agent's own turn cap applied.
    pub limits: LoopLimits,
    /// Instructions in order: the agent's, then the sandbox's.
    pub instructions: Vec<String>,
    /// Where events go.
    pub events: Arc<dyn EventSink>,
    /// Skills offered through `activate_skill` (progressive mode).
    pub skills: Vec<crate::agent_loop::SkillDoc>,
}

impl Prompting {
    /// Runs one prompt with `toolbox`. Without a model, this is the
    /// configuration error that says how to set one.
    pub async fn run(&self, toolbox: &Toolbox, input: &str) -> Result<Outcome, nexo_model::ModelError> {
        let Some(provider) = self.model.clone() else {
            return Err(match nexo_model::resolve(&nexo_model::ModelConfig::default()) {
                Err(e) => e,
                Ok(_) => nexo_model::ModelError::Config("no model is configured".into()),
            });
        };
        let ctx = crate::agent_loop::LoopContext {
            provider: &*provider,
            toolbox,
            instructions: &self.instructions,
            limits: self.limits,
            events: &*self.events,
            skills: &self.skills,
        };
        self.agent_loop.run(ctx, input).await
    }

    /// The prompting setup for an agent with `manifest` under `options`,
    /// with its skills already resolved ([`resolve_skills`]). Eager skills'
    /// instructions come after the agent's and the sandbox's. A skill adds
    /// instructions only; it never widens what the agent may do.
    pub fn new(
        manifest: &crate::manifest::AgentManifest,
        sandbox_instructions: Option<String>,
        skills: Vec<crate::agent_loop::SkillDoc>,
        options: &RunOptions,
    ) -> Self {
        let mut limits = options.loop_limits;
        if let Some(cap) = manifest.max_turns {
            limits.max_turns = limits.max_turns.min(cap);
        }
        let mut instructions = vec![manifest.instructions.clone()];
        instructions.extend(sandbox_instructions);
        let mut offered = Vec::new();
        for skill in skills {
            match options.skill_mode {
                SkillMode::Eager => instructions.push(format!("# Skill: {}\n\n{}", skill.name, skill.body)),
                SkillMode::Progressive => offered.push(skill),
            }
        }
        if !offered.is_empty() {
            let list: Vec<String> = offered.iter().map(|s| format!("- {}: {}", s.name, s.description)).collect();
            instructions.push(format!(
                "Skills are available. Before a task one of them covers, load it with `activate_skill`:\n{}",
                list.join("\n")
            ));
        }
        Prompting {
            model: options.model.clone(),
            agent_loop: options.agent_loop.clone().unwrap_or_else(|| Arc::new(HostLoop)),
            limits,
            instructions,
            events: options.events.clone().unwrap_or_else(crate::agent_loop::no_events),
            skills: offered,
        }
    }
}

/// A limit a plugin ran into, recorded by the limiter so the host can
/// report it precisely after the trap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitHit {
    /// A memory wanted to grow past the cap.
    Memory {
        /// The size the guest asked for.
        requested: usize,
        /// The cap.
        cap: usize,
    },
    /// A table wanted to grow past the cap.
    Table {
        /// The size the guest asked for.
        requested: usize,
        /// The cap.
        cap: usize,
    },
}

/// Enforces [`Limits`] on memories, tables and instances, and remembers what
/// it refused.
#[derive(Debug)]
pub struct RunLimiter {
    memory_cap: usize,
    table_cap: usize,
    instances: usize,
    /// The first limit the plugin hit, if any.
    pub hit: Option<LimitHit>,
}

impl ResourceLimiter for RunLimiter {
    fn memory_growing(&mut self, _current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.memory_cap {
            self.hit.get_or_insert(LimitHit::Memory { requested: desired, cap: self.memory_cap });
            // Trap rather than return -1: an allocator that sees -1 would abort
            // with a less precise message.
            wasmtime::bail!("memory cap of {} bytes exceeded (asked for {desired})", self.memory_cap);
        }
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.table_cap {
            self.hit.get_or_insert(LimitHit::Table { requested: desired, cap: self.table_cap });
            wasmtime::bail!("table cap of {} elements exceeded (asked for {desired})", self.table_cap);
        }
        Ok(true)
    }

    fn instances(&self) -> usize {
        self.instances
    }

    fn tables(&self) -> usize {
        self.instances
    }

    fn memories(&self) -> usize {
        self.instances
    }
}

/// The data of every plugin store.
pub struct HostState {
    /// The plugin's name, for logs and errors.
    pub plugin: Arc<str>,
    /// The limits of this run.
    pub limits: Limits,
    /// The resource limiter.
    pub limiter: RunLimiter,
    /// Settings for a component's `config` import.
    pub settings: BTreeMap<String, String>,
    /// A component's outbound HTTP; `None` refuses every request.
    pub egress: Option<Arc<crate::web::Egress>>,
    /// Log lines written so far.
    pub log_lines: usize,
    /// The agent's tools, for agent instances.
    pub toolbox: Option<Arc<Toolbox>>,
    /// What `prompt` needs, for agent instances.
    pub prompting: Option<Prompting>,
    /// How the latest prompt ended.
    pub last_outcome: Option<Outcome>,
    wasi: WasiCtx,
    table: ResourceTable,
    stdout: MemoryOutputPipe,
    stderr: MemoryOutputPipe,
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl HostState {
    /// What the plugin wrote to stderr (a Rust panic message, for example),
    /// lossily decoded and trimmed.
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr.contents()).trim().to_string()
    }

    /// What the plugin wrote to stdout.
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout.contents()).trim().to_string()
    }
}

/// Builds a store for one instance of `plugin`, with the engine's limits, a
/// deadline of `timeout`, and the WASI grants in `options` plus `extra`.
pub fn new_store(
    engine: &Engine,
    plugin: Arc<str>,
    options: &RunOptions,
    extra: Option<&Preopen>,
    timeout: std::time::Duration,
) -> anyhow::Result<Store<HostState>> {
    let limits = engine.limits().clone();
    let stdout = MemoryOutputPipe::new(limits.stdio_bytes);
    let stderr = MemoryOutputPipe::new(limits.stdio_bytes);
    // The builder grants nothing by default: no env, args, network or files.
    let mut wasi = WasiCtxBuilder::new();
    wasi.stdout(stdout.clone()).stderr(stderr.clone());
    // No sockets and no name lookups: the builder's defaults, stated so a
    // later change cannot loosen them by accident.
    wasi.allow_tcp(false).allow_udp(false).allow_ip_name_lookup(false);
    for (key, value) in &options.env {
        wasi.env(key, value);
    }
    for p in options.preopens.iter().chain(extra) {
        let perms = if p.writable { FsPerms::ReadWrite } else { FsPerms::ReadOnly };
        wasi.preopened_dir(&p.host, &p.guest, perms)
            .map_err(|e| anyhow::anyhow!("cannot open {} for the plugin: {e}", p.host.display()))?;
    }
    let limiter = RunLimiter {
        memory_cap: limits.memory_bytes,
        table_cap: limits.table_elements,
        instances: limits.instances_per_store,
        hit: None,
    };
    let state = HostState {
        plugin,
        limiter,
        settings: BTreeMap::new(),
        egress: None,
        log_lines: 0,
        toolbox: None,
        prompting: None,
        last_outcome: None,
        wasi: wasi.build(),
        table: ResourceTable::new(),
        stdout,
        stderr,
        limits,
    };
    let mut store = Store::new(engine.wasmtime(), state);
    store.limiter(|s| &mut s.limiter);
    store.set_epoch_deadline(engine.ticks_for(timeout));
    store.epoch_deadline_trap();
    Ok(store)
}
