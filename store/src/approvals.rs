//! Approvals: a gated call waiting for an operator's decision, and the
//! decision, bound to exactly that call.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An operator's answer to a pending approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// The effect may happen.
    Approved,
    /// The call fails with a tool error; the run goes on.
    Denied,
}

impl Decision {
    /// The other decision.
    pub fn other(self) -> Decision {
        match self {
            Decision::Approved => Decision::Denied,
            Decision::Denied => Decision::Approved,
        }
    }

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Approved => "approved",
            Decision::Denied => "denied",
        }
    }

    /// Parses a stored or typed name.
    pub fn parse(name: &str) -> Option<Decision> {
        [Decision::Approved, Decision::Denied].into_iter().find(|d| d.as_str() == name)
    }
}

/// A gated call waiting for an operator's decision. A decision binds to
/// exactly this call: its sequence number, capability, tool, argument hash
/// and component.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Approval {
    /// The call's sequence number in the journal.
    pub seq: u64,
    /// The capability the gate asked for.
    pub capability: String,
    /// The tool, as the model or guest named it.
    pub tool: String,
    /// The call's arguments.
    pub arguments: Value,
    /// The SHA-256 of the arguments.
    pub args_hash: String,
    /// The component that made the call.
    pub component_sha256: String,
    /// The decision, once made.
    pub decision: Option<Decision>,
    /// When it was requested.
    pub created_ms: i64,
}

impl Approval {
    /// The call this approval is for, as a decision names it.
    pub fn call(&self) -> PendingCall {
        PendingCall { seq: self.seq, args_hash: self.args_hash.clone() }
    }
}

/// The call a decision is for, as whoever decides was shown it: the
/// pending approval's sequence number and argument hash. A decision that
/// names another call than the pending one decides nothing
/// ([`StoreError::StaleApproval`](crate::StoreError::StaleApproval)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingCall {
    /// The call's sequence number ([`Approval::seq`]).
    pub seq: u64,
    /// The SHA-256 of its arguments ([`Approval::args_hash`]).
    pub args_hash: String,
}
