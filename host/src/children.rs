//! Child runs as the host-call path sees them: what `run-agent` (or an
//! agent's tool) asks for,
//! and the one thing it needs from the run lifecycle ([`crate::runs`]),
//! which implements [`ChildRuns`]: the child's record, ready to be written
//! with the parent's batch.

use nexo_model::BoxFuture;
use nexo_store::NewChild;

use crate::grant::Grant;

/// What the model tool's name of an agent made available to a run starts
/// with, before the agent's name.
pub const TOOL_PREFIX: &str = "agent__";

/// How deep a tree of runs may grow: a run this many levels below its
/// root starts no child.
pub const MAX_DEPTH: u32 = 8;

/// The most children one run may start: with [`MAX_DEPTH`], what bounds
/// a tree an agent offering agents could grow (a tenant's quotas bound it
/// further).
pub const MAX_CHILDREN: usize = 100;

/// The longest agent name, in bytes.
pub const MAX_AGENT_NAME: usize = 64;

/// The longest name of an agent offered to the model: `agent__NAME`, its
/// tool's name, then fits the 64 bytes providers allow a tool's name.
pub const MAX_TOOL_AGENT_NAME: usize = 57;

/// Whether `name` may name an agent made available to child runs, or why
/// not: letters, digits, `-` and `_`, at most [`MAX_AGENT_NAME`] bytes.
pub fn check_agent_name(name: &str) -> Result<(), String> {
    let good = !name.is_empty()
        && name.len() <= MAX_AGENT_NAME
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if good {
        Ok(())
    } else {
        Err(format!(
            "the agent name `{}` is not ASCII letters, digits, `-` and `_` (at most {MAX_AGENT_NAME} bytes); rename it",
            crate::truncate::head_chars(name, 80)
        ))
    }
}

/// Whether an agent's manifest may ask for the agent `name` as a tool:
/// an agent name ([`check_agent_name`]) short enough for its tool's name.
pub fn check_tool_agent_name(name: &str) -> Result<(), String> {
    check_agent_name(name)?;
    if name.len() > MAX_TOOL_AGENT_NAME {
        return Err(format!(
            "the agent name `{name}` is {} bytes; one offered as a tool is at most {MAX_TOOL_AGENT_NAME}, so that \
             `agent__NAME` fits the 64 bytes providers allow a tool's name",
            name.len()
        ));
    }
    Ok(())
}

/// A child run a workflow (or the model, through an agent's tool) asks for.
#[derive(Debug, Clone)]
pub struct ChildRequest {
    /// The name the operator made the agent available as.
    pub agent: String,
    /// The child's input.
    pub input: String,
    /// The child's grant: the parent's effective grant, narrowed as asked.
    pub grant: Grant,
}

/// Makes child runs' records for a recorded run.
pub trait ChildRuns: Send + Sync + std::fmt::Debug {
    /// The child run `request` asks for, queued with its start job, for the
    /// parent's journal to record with the entry that names it; or why it
    /// cannot be started (an agent not made available, too deep a tree, the
    /// tenant's quotas), in words for the workflow's author.
    fn prepare(&self, request: ChildRequest) -> BoxFuture<'_, Result<NewChild, String>>;

    /// The names of the agents the run may start now: those the operator
    /// made available to it, none once its tree is as deep as it may grow.
    fn agents(&self) -> &[String] {
        &[]
    }
}
