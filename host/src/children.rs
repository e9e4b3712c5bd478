//! Child runs as the host-call path sees them: what `run-agent` asks for,
//! and the one thing it needs from the run lifecycle ([`crate::runs`]),
//! which implements [`ChildRuns`]: the child's record, ready to be written
//! with the parent's batch.

use nexo_model::BoxFuture;
use nexo_store::NewChild;

use crate::grant::Grant;

/// How deep a tree of runs may grow: a run this many levels below its
/// root starts no child.
pub const MAX_DEPTH: u32 = 8;

/// A child run a workflow asks for.
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
}
