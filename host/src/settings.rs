//! The operator's settings for one agent run, as typed values, grouped by
//! concern in [`RunOptions`]. They flow one way: the CLI (or an embedding
//! program) builds them once, the run turns the grant and permissions with
//! the manifest into an [`Authority`](crate::authority::Authority), and
//! each capability unit reads its own part when it prepares the instance.
//! The tenant's budget is [`RunBudget`], at home with the other quota
//! logic in [`crate::quota`]. Search backends and sandbox providers take
//! their own, smaller settings ([`EgressGrant`](crate::egress::EgressGrant)).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use nexo_model::Provider;
use nexo_sandbox::Sandbox;

use crate::agent_loop::{Loop, LoopLimits};
use crate::authority::Permissions;
use crate::events::EventSink;
use crate::grant::Grant;
use crate::instance::Preopen;
use crate::quota::RunBudget;
use crate::search::SearchBackend;
use crate::truncate::Truncation;

/// A skill component an agent may name, as a run reads it (a loaded
/// [`crate::world::skill::Skill`]).
pub trait SkillComponent: Send + Sync + std::fmt::Debug {
    /// The skill's name.
    fn name(&self) -> &str;
    /// Its metadata.
    fn metadata(&self) -> &crate::manifest::SkillMetadata;
    /// Its instructions (the SKILL.md body).
    fn instructions(&self) -> nexo_model::BoxFuture<'_, Result<String, crate::error::RunError>>;
}

/// Per-run tool settings.
#[derive(Debug, Clone, Copy)]
pub struct ToolLimits {
    /// Time limit for one shell command. Default: 120 s.
    pub shell_timeout: Duration,
    /// Truncation of shell output.
    pub shell_output: Truncation,
}

impl Default for ToolLimits {
    fn default() -> Self {
        ToolLimits { shell_timeout: Duration::from_secs(120), shell_output: Truncation::default() }
    }
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

/// Per-run settings chosen by the operator, by concern: what the authority
/// is built from (at the top), the providers the run uses, its limits, the
/// tenant's budget it draws on, and the context the run lifecycle builds
/// for each pass. The defaults are the safe ones: the in-memory sandbox,
/// `read-only`, and a grant of `read` and `glob`.
#[derive(Clone, Default)]
pub struct RunOptions {
    /// The permission mode and its hooks.
    pub permissions: Permissions,
    /// What the operator grants; the agent gets this ∩ what it requested.
    pub grant: Grant,
    /// Extra directories preopened into the component. A local sandbox's
    /// directory is preopened on its own; otherwise the component sees no
    /// filesystem at all.
    pub preopens: Vec<Preopen>,
    /// Environment variables for the component. Empty by default: it sees
    /// only what the operator passes.
    pub env: Vec<(String, String)>,
    /// The directory holding skill packages an agent names in its manifest.
    /// `None`: `skills` in the current directory.
    pub skills_path: Option<PathBuf>,
    /// How named skills reach the model. Default: eagerly, in the system
    /// instructions.
    pub skill_mode: SkillMode,
    /// What the run's capabilities act through: its sandbox, model, loop,
    /// search backend, web client, MCP servers and skill components.
    pub providers: Providers,
    /// How far the run may go: its tools, each prompt, its time and memory.
    pub limits: RunLimits,
    /// The tenant's shares and meters the run draws on.
    pub budget: RunBudget,
    /// What the run lifecycle sets for each pass.
    pub context: RunContext,
}

/// What a run's capabilities act through. Whoever builds them closes those
/// that hold live resources ([`RunOptions::close`]).
#[derive(Clone, Default)]
pub struct Providers {
    /// Where the agent's tools act. `None`: a fresh in-memory sandbox.
    pub sandbox: Option<Arc<dyn Sandbox>>,
    /// The model. `None`: `prompt` answers `not-configured`.
    pub model: Option<Arc<dyn Provider>>,
    /// The loop that runs each prompt. `None`: the host loop.
    pub agent_loop: Option<Arc<dyn Loop>>,
    /// The backend behind the `web_search` tool. `None`: agents get no
    /// search tool, even with `search` granted.
    pub search: Option<Arc<dyn SearchBackend>>,
    /// The guarded client for the `fetch` tool. `None`: the process-wide one.
    /// A client that exempts private addresses is refused: the fetch tool
    /// never reaches one.
    pub http: Option<nexo_egress::GuardedClient>,
    /// The operator's MCP servers, with their live connections. An agent
    /// reaches those its manifest requests whose names are also in
    /// [`McpGrant::servers`](crate::grant::McpGrant::servers). Whoever builds the clients closes them
    /// ([`nexo_mcp::Clients::close`]); runs and prompts that share them
    /// share their connections. `None`: no MCP servers.
    pub mcp: Option<nexo_mcp::Clients>,
    /// Skill components an agent may name; they are looked up before the
    /// skills path. Each runs with zero capabilities.
    pub skill_components: Vec<Arc<dyn SkillComponent>>,
    /// The operator's hooks, asked about each gated call in this order
    /// ([`crate::hooks`]). Each run gets its own instances.
    pub hooks: Vec<Arc<dyn crate::hooks::HookComponent>>,
}

/// How far one run may go.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunLimits {
    /// The agent's tools: a shell command's time and output.
    pub tools: ToolLimits,
    /// Each prompt: turn cap, token budget, streaming. The agent's own
    /// `max-turns` can only lower the cap.
    pub prompt: LoopLimits,
    /// The wall-clock limit of the whole run. `None`: the engine's
    /// [`Limits::run_timeout`](crate::Limits::run_timeout).
    pub timeout: Option<Duration>,
    /// The run's memory cap, within the engine's. `None`: the engine's
    /// [`Limits::memory_bytes`](crate::Limits::memory_bytes).
    pub memory_bytes: Option<usize>,
}

/// What the run lifecycle ([`Runs`](crate::runs::Runs)) sets for each pass
/// of a run: where it is recorded and seen, and how a failure ends it. A
/// program that runs an agent without the lifecycle may leave it empty.
#[derive(Clone, Default)]
pub struct RunContext {
    /// The journal of a recorded run (see [`crate::runs`]): every host
    /// call, the WASI clocks and the random seed are journaled, and a
    /// resume replays them. `None`: nothing is recorded.
    pub journal: Option<Arc<crate::journal::Journal>>,
    /// The thread of the session this run is a prompt of: every prompt
    /// sees it after the instructions and adds its exchange to it. Set by
    /// [`Runs`](crate::runs::Runs) for a session's run. `None`: each prompt
    /// starts a new conversation.
    pub thread: Option<Arc<crate::thread::Thread>>,
    /// Where events go. `None`: nowhere. The lifecycle journals them on
    /// their way here.
    pub events: Option<Arc<dyn EventSink>>,
    /// Where the gate's decisions on the agent's capability and MCP calls
    /// are recorded, the guest's and the model's alike
    /// ([`crate::host_call::AuditSink`]). `nexo serve` keeps them in the
    /// tenant's audit log. `None`: not recorded.
    pub audit: Option<Arc<dyn crate::host_call::AuditSink>>,
    /// A job will try this pass again if it fails in a way that may pass
    /// ([`crate::error::RunError::may_pass_on_retry`]): such a failure leaves
    /// a recorded run `queued` for the retry, not `failed`. A worker sets it
    /// while the job has attempts left.
    pub retry_follows: bool,
    /// Makes the records of the child runs a recorded run starts
    /// (`run-agent`). Set by [`Runs`](crate::runs::Runs) with the journal.
    /// `None`: no child can be started.
    pub children: Option<Arc<dyn crate::children::ChildRuns>>,
}

impl RunOptions {
    /// Releases what these options hold: the MCP servers' connections
    /// (their processes end) and the sandbox (a container, say). Whoever
    /// built the options calls it once its runs are over. Idempotent; a
    /// sandbox that fails to close is reported, after the rest is closed.
    pub async fn close(&self) -> Result<(), String> {
        if let Some(mcp) = &self.providers.mcp {
            mcp.close().await;
        }
        if let Some(sandbox) = self.providers.sandbox.clone() {
            match tokio::task::spawn_blocking(move || sandbox.close()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(format!("closing the sandbox failed: {e}")),
                Err(e) => return Err(format!("closing the sandbox failed: {e}")),
            }
        }
        Ok(())
    }
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("sandbox", &self.providers.sandbox.as_ref().map(|s| s.name()))
            .field("permissions", &self.permissions)
            .field("grant", &self.grant)
            .field("preopens", &self.preopens)
            .field("timeout", &self.limits.timeout)
            .field("model", &self.providers.model.as_ref().map(|m| format!("{}:{}", m.name(), m.model())))
            .field("loop_limits", &self.limits.prompt)
            .field("search", &self.providers.search.as_ref().map(|s| s.name().to_string()))
            .field(
                "mcp",
                &self.providers.mcp.as_ref().map(|c| c.servers().map(|s| s.name().to_string()).collect::<Vec<_>>()),
            )
            .field("session", &self.context.thread.as_ref().map(|t| t.session().to_string()))
            .finish_non_exhaustive()
    }
}
