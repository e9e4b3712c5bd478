//! A run's events, as appended and as stored.

use serde::Serialize;
use serde_json::Value;

/// An event to append.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    /// `tool_call`, `tool_result`, `checkpoint`, `suspended`, `resumed`,
    /// `done` or another kind the host defines.
    pub kind: String,
    /// The event's fields.
    pub data: Value,
    /// When it happened.
    pub at_ms: i64,
}

/// A stored event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredEvent {
    /// Its position in the store, increasing (for `--follow` and SSE
    /// resumption).
    pub id: i64,
    /// The run.
    pub run: String,
    /// Its kind.
    pub kind: String,
    /// Its fields.
    pub data: Value,
    /// When it happened.
    pub at_ms: i64,
}
