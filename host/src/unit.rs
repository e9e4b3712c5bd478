//! Capability units: each host capability (files, shell, fetch, web search,
//! skills, the model loop; later MCP and durable state) is one [`Unit`] in
//! its own module under `capability/`. A unit owns four things:
//!
//! - its slice of the grant: what it builds from it for the run options
//!   ([`Unit::configure`], the configure stage: the sandbox, the MCP
//!   clients), the capabilities its calls name, which the run's
//!   [`Authority`](crate::authority::Authority) decides, and what its
//!   configuration cannot serve ([`Setup::authority`]);
//! - its linker set-up: the WIT imports it serves ([`Unit::link`]);
//! - its per-instance state ([`Unit::prepare`], kept in [`UnitState`]);
//! - its tools ([`Unit::tools`]), each defined in one file with its spec,
//!   argument parsing, handler and WIT adapter.
//!
//! The agent world's runtime is the list of units in dependency order
//! (`world::agent::UNITS`); adding a capability is one module there plus one
//! line in that list, which registers its configure stage too.

use std::sync::Arc;

use nexo_model::BoxFuture;
use wasmtime::component::Linker;

use crate::authority::Authority;
use crate::error::{ConfigError, RunError};
use crate::grant::Grant;
use crate::host_call::{DynTool, UnitState};
use crate::instance::{Host, Preopen};
use crate::manifest::AgentManifest;
use crate::settings::RunOptions;

/// The agent world's per-instance state: the run's host-call context, and
/// how the guest's latest prompt ended (returned by the run, see
/// `world::agent::AgentOutcome`).
pub struct AgentState {
    /// The run's tools, authority and unit state.
    pub tools: Arc<crate::host_call::ToolContext>,
    /// The latest prompt's outcome.
    pub last_prompt: Option<crate::agent_loop::Outcome>,
}

/// A store of the agent world.
pub type AgentHost = Host<AgentState>;

/// One host capability.
pub trait Unit: Send + Sync + 'static {
    /// A short name, for messages.
    fn name(&self) -> &'static str;

    /// Adds the WIT imports this unit serves to the agent world's linker.
    /// Called once per engine.
    fn link(&self, _linker: &mut Linker<AgentHost>) -> wasmtime::Result<()> {
        Ok(())
    }

    /// The tools this unit contributes, offered to the model when the
    /// authority allows them.
    fn tools(&self) -> &'static [&'static dyn DynTool] {
        &[]
    }

    /// The configure stage: turns this unit's slice of the operator's
    /// [`Grant`] into what its runs use (a sandbox, MCP clients), once per
    /// set of run options and before any instance. Default: nothing to do.
    fn configure(&self, _grant: &Grant, _options: &mut RunOptions) -> Result<(), ConfigError> {
        Ok(())
    }

    /// Prepares the unit for one run: reads its settings, checks its slice
    /// of the grant, and stores its per-instance state. Most units are done
    /// at once; one that waits on I/O (a skill component's instructions)
    /// hands back the work to await.
    fn prepare<'a>(&'a self, setup: &'a mut Setup<'_>) -> Step<'a>;
}

/// What [`Unit::prepare`] returns.
pub enum Step<'a> {
    /// Prepared, or failed.
    Ready(Result<(), RunError>),
    /// Work to await before the next unit prepares.
    Wait(BoxFuture<'a, Result<(), RunError>>),
}

impl Step<'_> {
    /// The step of a unit that prepares at once.
    pub fn ready(result: Result<(), RunError>) -> Self {
        Step::Ready(result)
    }

    /// Finishes the step.
    pub async fn finish(self) -> Result<(), RunError> {
        match self {
            Step::Ready(result) => result,
            Step::Wait(work) => work.await,
        }
    }
}

/// What a unit prepares one run from and into.
pub struct Setup<'a> {
    /// The agent's manifest.
    pub manifest: &'a AgentManifest,
    /// The operator's settings for the run.
    pub options: &'a crate::settings::RunOptions,
    /// The run's authority, computed once before any unit runs. A unit may
    /// only note what its configuration cannot serve.
    pub authority: &'a mut Authority,
    /// Each unit's per-instance state.
    pub state: &'a mut UnitState,
    /// Directories to preopen into the component.
    pub preopens: &'a mut Vec<Preopen>,
    /// System instructions, in unit order after the agent's own.
    pub instructions: &'a mut Vec<String>,
}
