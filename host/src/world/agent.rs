//! The agent world: agents as components, and the runtime every agent run
//! shares, component or declarative file alike.
//!
//! A run is prepared in one direction: the manifest and the operator's
//! [`RunOptions`] give the [`Authority`]; each capability unit of [`UNITS`]
//! then prepares its per-instance state in order; the result is the run's
//! [`ToolContext`], which every guest import and every model tool call goes
//! through.

use std::sync::Arc;
use std::time::Duration;

use wasmtime::Store;
use wasmtime::component::Component;

use super::{LinkFailure, Meta, WorldLinker};
use crate::agent_loop::Outcome;
use crate::authority::Authority;
use crate::bindings::RunError as WitRunError;
use crate::bindings::agent::{AgentPlugin, AgentPluginPre};
use crate::capability::agents::AgentsUnit;
use crate::capability::durable::DurableUnit;
use crate::capability::fetch::FetchUnit;
use crate::capability::files::FilesUnit;
use crate::capability::mcp::McpUnit;
use crate::capability::model::ModelUnit;
use crate::capability::sandbox::SandboxUnit;
use crate::capability::search::SearchUnit;
use crate::capability::shell::ShellUnit;
use crate::capability::skills::SkillsUnit;
use crate::engine::{Engine, Limits};
use crate::error::RunError;
use crate::grant::Grant;
use crate::host_call::{DynTool, ToolContext, UnitState};
use crate::instance::{Host, Preopen, Wasi, base_linker, new_store, settle};
use crate::manifest::AgentManifest;
pub use crate::settings::RunOptions;
use crate::unit::{AgentHost, AgentState, Setup, Unit};

/// The agent world's capability units, in dependency order: the sandbox
/// before the tools that act in it. Units an embedding program adds come
/// after these, and the model unit ([`MODEL`]) after all of them: its
/// instructions are everyone's.
pub static UNITS: &[&dyn Unit] =
    &[&SandboxUnit, &FilesUnit, &ShellUnit, &FetchUnit, &SearchUnit, &SkillsUnit, &McpUnit, &DurableUnit, &AgentsUnit];

/// The model unit, always last.
pub static MODEL: &dyn Unit = &ModelUnit;

/// A run, prepared: its host-call context and what the component's WASI
/// sees.
pub struct Prepared {
    /// The run's tools, authority and unit state.
    pub tools: Arc<ToolContext>,
    /// The directories preopened into the component.
    pub preopens: Vec<Preopen>,
}

/// What a run's configuration can serve, as far as the authority cares:
/// the input of [`authority`].
#[derive(Debug, Clone, Copy)]
pub struct Serving {
    /// The sandbox's name.
    pub sandbox: &'static str,
    /// Whether the sandbox runs shell commands.
    pub sandbox_has_shell: bool,
    /// Whether a search backend is configured.
    pub search: bool,
}

impl Serving {
    /// What `grant`'s sandbox serves, with a search backend or without.
    pub fn of(grant: &Grant, search: bool) -> Serving {
        Serving { sandbox: grant.sandbox.kind.as_str(), sandbox_has_shell: grant.sandbox.has_shell(), search }
    }
}

/// The authority a run of `manifest` would have under `grant` and
/// `permissions` in a configuration that serves what `serving` says:
/// [`Authority::new`], with what cannot be served noted by the same tests
/// the units make when they prepare a run. For `nexo inspect`, which
/// prepares none.
pub fn authority(
    manifest: &AgentManifest,
    grant: &Grant,
    permissions: &crate::authority::Permissions,
    serving: Serving,
) -> Authority {
    use crate::capability::{fetch, search, shell};
    use crate::manifest::Capability;
    let mut authority = Authority::new(manifest, grant, permissions);
    let unavailable = [
        (Capability::Shell, shell::refusal(serving.sandbox, serving.sandbox_has_shell)),
        (Capability::Fetch, fetch::refusal(&manifest.fetch_allow)),
        (Capability::Search, search::refusal(serving.search)),
    ];
    for (cap, why) in unavailable {
        if let Some(why) = why {
            authority.set_unavailable(cap, why);
        }
    }
    authority
}

/// Prepares a run of `manifest` under `options`: the authority, then each
/// unit in order, then `extra` units (an embedding program's own, which
/// serve tools but no WIT import) just before the model. `limits` caps what
/// a guest hands to one call and how much it logs.
pub async fn prepare(
    manifest: &AgentManifest,
    options: &RunOptions,
    extra: &[Arc<dyn Unit>],
    limits: &Limits,
) -> Result<Prepared, RunError> {
    let mut authority = Authority::new(manifest, &options.grant, &options.permissions);
    let mut state = UnitState::default();
    let mut preopens = options.preopens.clone();
    let mut instructions = vec![manifest.instructions.clone()];
    let units = || UNITS.iter().copied().chain(extra.iter().map(|u| &**u)).chain(std::iter::once(MODEL));
    let mut setup = Setup {
        manifest,
        options,
        authority: &mut authority,
        state: &mut state,
        preopens: &mut preopens,
        instructions: &mut instructions,
    };
    for unit in units() {
        unit.prepare(&mut setup).finish().await?;
    }
    // The built-in units' tools are the same every run: one shared list
    // unless an embedder adds units.
    let tools: std::borrow::Cow<'static, [&'static dyn DynTool]> = if extra.is_empty() {
        static BUILT_IN: std::sync::OnceLock<Vec<&'static dyn DynTool>> = std::sync::OnceLock::new();
        std::borrow::Cow::Borrowed(BUILT_IN.get_or_init(|| units().flat_map(|u| u.tools().iter().copied()).collect()))
    } else {
        std::borrow::Cow::Owned(units().flat_map(|u| u.tools().iter().copied()).collect())
    };
    let events = options.context.events.clone().unwrap_or_else(crate::events::no_events);
    let tools = Arc::new(
        ToolContext::new(authority, events, limits, tools, state)
            .holding(options.grant.inherited)
            .with_journal(options.context.journal.clone())
            .with_audit(options.context.audit.clone())
            .with_hooks(crate::hooks::Hooks::for_run(&options.providers.hooks)),
    );
    Ok(Prepared { tools, preopens })
}

pub(crate) type AgentLinker = WorldLinker<AgentHost>;

/// The agent world's linker: WASI, `types` and `log`, then each unit's
/// imports.
fn linker(engine: &Engine) -> wasmtime::Result<Arc<AgentLinker>> {
    engine.shared(|engine| {
        let mut linker = base_linker::<AgentState>(engine)?;
        crate::log::link::<AgentState, ToolContext>(&mut linker, |w| &w.tools)?;
        for unit in UNITS.iter().chain(std::iter::once(&MODEL)) {
            unit.link(&mut linker)?;
        }
        Ok(WorldLinker(linker))
    })
}

/// Links `component` as an agent.
pub(crate) fn link(engine: &Engine, component: &Component) -> Result<AgentPluginPre<AgentHost>, LinkFailure> {
    super::link(linker(engine), component, AgentPluginPre::new)
}

/// Reads an agent's manifest under the short call deadline.
pub(crate) async fn describe(
    engine: &Engine,
    pre: &AgentPluginPre<AgentHost>,
    label: Arc<str>,
) -> Result<AgentManifest, RunError> {
    let timeout = engine.limits().call_timeout;
    // Describing grants nothing: no unit is prepared, so any tool call fails.
    let nameless = AgentManifest { name: label.to_string(), ..AgentManifest::default() };
    let authority = Authority::new(&nameless, &Grant::none(), &Default::default());
    let tools =
        ToolContext::new(authority, crate::events::no_events(), engine.limits(), Vec::new(), UnitState::default());
    let state = AgentState { tools: Arc::new(tools), last_prompt: None };
    let mut store = new_store(engine, label, &Wasi::default(), timeout, state)?;
    let result = tokio::time::timeout(timeout, async {
        let instance = pre.instance_pre().instantiate_async(&mut store).await?;
        let bindings = AgentPlugin::new(&mut store, &instance)?;
        let manifest = bindings.nexo_plugin_agent().call_manifest(&mut store).await?;
        let mut lists = [Vec::new(), Vec::new()];
        for (list, (interface, function)) in lists.iter_mut().zip(OPTIONAL_LISTS) {
            if let Some(func) = list_export(&instance, &mut store, interface, function) {
                *list = func?.call_async(&mut store, ()).await?.0;
            }
        }
        wasmtime::Result::Ok((manifest, lists))
    })
    .await;
    settle(&store, "describe", timeout, result).map(|(manifest, [mcp_allow, agents])| AgentManifest {
        mcp_allow,
        agents,
        ..AgentManifest::from(manifest)
    })
}

/// The lists an agent of the `mcp-agent-plugin` world exports beside its
/// manifest, as (interface, function): the MCP tools it asks to call by
/// name, and the agents it asks to have offered as tools.
const OPTIONAL_LISTS: [(&str, &str); 2] =
    [(crate::manifest::interface::AGENT_MCP, "mcp-allow"), (crate::manifest::interface::AGENT_CHILDREN, "agents")];

/// One list function of an optional export; `None` for an agent that
/// does not export its interface (of the plain world, or built before
/// it existed), which asks for nothing there. An interface without its
/// function, or a function of the wrong type, is an error, not silence.
fn list_export(
    instance: &wasmtime::component::Instance,
    store: &mut Store<AgentHost>,
    interface: &str,
    function: &str,
) -> Option<wasmtime::Result<wasmtime::component::TypedFunc<(), (Vec<String>,)>>> {
    let iface = instance.get_export_index(&mut *store, None, interface)?;
    let Some(func) = instance.get_export_index(&mut *store, Some(&iface), function) else {
        return Some(Err(wasmtime::format_err!(
            "the component exports `{interface}` without its `{function}` function; rebuild it with the current SDK"
        )));
    };
    Some(instance.get_typed_func::<(), (Vec<String>,)>(&mut *store, &func).map_err(|e| {
        wasmtime::format_err!(
            "the component's `{function}` export has the wrong type ({e:#}); rebuild it with the current SDK"
        )
    }))
}

/// A loaded agent component.
#[derive(Clone)]
pub struct Agent {
    meta: Arc<Meta>,
    pre: AgentPluginPre<AgentHost>,
    manifest: Arc<AgentManifest>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent").field("name", &self.meta.name).field("path", &self.meta.path).finish_non_exhaustive()
    }
}

/// What one run of an agent produced.
#[derive(Debug, Clone)]
pub struct AgentOutcome {
    /// The agent's answer.
    pub answer: String,
    /// How its last prompt ended, with its transcript; `None` if it never
    /// prompted.
    pub last_prompt: Option<Outcome>,
}

impl Agent {
    pub(crate) fn new(meta: Arc<Meta>, pre: AgentPluginPre<AgentHost>, manifest: AgentManifest) -> Self {
        Agent { meta, pre, manifest: Arc::new(manifest) }
    }

    /// The agent's name.
    pub fn name(&self) -> &str {
        &self.meta.name
    }

    /// Its manifest.
    pub fn manifest(&self) -> &AgentManifest {
        &self.manifest
    }

    /// Instantiates the agent with a fresh store: the engine's limits, the
    /// run deadline, and the run prepared from `options`.
    pub async fn instantiate(&self, options: &RunOptions) -> Result<AgentInstance, RunError> {
        let engine = &self.meta.engine;
        let timeout = options.limits.timeout.unwrap_or(engine.limits().run_timeout);
        if let Some(cap) = options.limits.memory_bytes
            && self.meta.memory_minimum > u64::try_from(cap).unwrap_or(u64::MAX)
        {
            let (path, minimum) = (self.meta.path.clone(), self.meta.memory_minimum);
            return Err(crate::error::LoadError::MemoryTooSmall { path, minimum, cap }.into());
        }
        let prepared = prepare(&self.manifest, options, &[], engine.limits()).await?;
        let wasi = Wasi {
            preopens: prepared.preopens,
            env: options.env.clone(),
            journal: options.context.journal.clone(),
            memory: options.budget.memory.clone(),
            cpu: options.budget.cpu.clone(),
            cpu_meter: options.budget.cpu_ticks.clone(),
            memory_cap: options.limits.memory_bytes,
        };
        let state = AgentState { tools: prepared.tools, last_prompt: None };
        let mut store = new_store(engine, self.meta.name.clone(), &wasi, timeout, state)?;
        let result = tokio::time::timeout(timeout, self.pre.instantiate_async(&mut store)).await;
        let bindings = settle(&store, "instantiate", timeout, result)?;
        Ok(AgentInstance { store, bindings, timeout })
    }

    /// Instantiates the agent and runs it once on `input`, with one deadline
    /// for both (on top of the per-call ones), so `options.timeout` bounds
    /// the run as a whole.
    pub async fn run(&self, input: &str, options: &RunOptions) -> Result<AgentOutcome, RunError> {
        let limit = options.limits.timeout.unwrap_or(self.meta.engine.limits().run_timeout);
        let run = async { self.instantiate(options).await?.run(input).await };
        match tokio::time::timeout(limit, run).await {
            Ok(done) => done,
            Err(_) => Err(RunError::Deadline { plugin: self.name().to_string(), function: "run".into(), limit }),
        }
    }
}

/// One live instance of an agent, ready to run.
pub struct AgentInstance {
    store: Store<Host<AgentState>>,
    bindings: AgentPlugin,
    timeout: Duration,
}

impl AgentInstance {
    /// Calls the agent's `run` export under the run deadline.
    pub async fn run(&mut self, input: &str) -> Result<AgentOutcome, RunError> {
        let agent = self.bindings.nexo_plugin_agent();
        // A halted run's guest may be waiting inside a host call (a sleep, a
        // fetch, a model turn) where no epoch tick reaches it: race the call
        // against the stop so the pending host future is dropped and the pass
        // ends at once, freeing its worker slot.
        let stop = self.store.data().core.stop_signal();
        let stopped = async move {
            match stop {
                Some(stop) => stop.stopped().await,
                None => std::future::pending().await,
            }
        };
        let call = async {
            tokio::select! {
                done = agent.call_run(&mut self.store, input) => done,
                () = stopped => Err(wasmtime::Trap::Interrupt.into()),
            }
        };
        let result = tokio::time::timeout(self.timeout, call).await;
        self.store.data().core.log_stdio();
        let plugin = || self.store.data().core.plugin.to_string();
        let answer = match settle(&self.store, "run", self.timeout, result)? {
            Ok(answer) => answer,
            Err(WitRunError::Failed(reason)) => return Err(RunError::AgentFailed { plugin: plugin(), reason }),
            Err(WitRunError::Model(err)) => return Err(crate::capability::model::model_run_error(&plugin(), &err)),
        };
        Ok(AgentOutcome { answer, last_prompt: self.store.data_mut().world.last_prompt.take() })
    }

    /// What the agent wrote to stdout so far.
    pub fn stdout(&self) -> String {
        self.store.data().core.stdout_text()
    }
}
