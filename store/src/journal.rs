//! A run's journal: its host calls, each with its result, which a resume
//! replays.

use serde::{Deserialize, Serialize};

/// One journaled host call. Sequence numbers are assigned when a call
/// starts; a call that makes calls of its own (a prompt runs the model and
/// tools) ends after them, so `end` is the next sequence number after its
/// last inner call. A replay that answers the call skips to `end`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The call's sequence number, from 0.
    pub seq: u64,
    /// The sequence number after the call and every call it made.
    pub end: u64,
    /// The interface, such as `nexo:plugin/tools` or `wasi:clocks`.
    pub interface: String,
    /// The function, such as `read-file`.
    pub function: String,
    /// The SHA-256 of the call's arguments, as lowercase hex.
    pub args_hash: String,
    /// The call's result, as JSON text.
    pub result: String,
    /// When the call started (milliseconds since the Unix epoch); `None`
    /// in a journal written before schema version 8.
    #[serde(default)]
    pub started_ms: Option<i64>,
    /// When its result was recorded; `None` before schema version 8.
    #[serde(default)]
    pub ended_ms: Option<i64>,
}
