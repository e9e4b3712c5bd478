//! Writes that commit together: a run's journal entries, events,
//! checkpoints, and what it adds to its session's thread.

use serde_json::Value;

use crate::{Entry, NewEvent, NewJob, NewRun};

/// Writes that commit together, atomically and durably.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Batch {
    /// Journal entries, in sequence order. A sequence number the run's
    /// journal already has refuses the whole batch
    /// ([`StoreError::Conflict`](crate::StoreError::Conflict)): a call is journaled once.
    pub journal: Vec<Entry>,
    /// Events, in order.
    pub events: Vec<NewEvent>,
    /// Checkpoints: name and JSON value. A name already present is kept as
    /// it was (a checkpoint is written once).
    pub checkpoints: Vec<(String, Value)>,
    /// What a session prompt adds to its session's thread, in the same
    /// transaction: a prompt's exchange lands with the run's end, or not at
    /// all. It is checked as [`Sessions::append_thread`](crate::Sessions::append_thread) checks, and a refusal
    /// (see [`ThreadAppend`]) refuses the whole batch.
    pub thread: Option<ThreadAppend>,
    /// Child runs the run starts (`run-agent`), each recorded, linked to
    /// the run as its parent, with its start job: a child exists exactly
    /// when the journal entry that names it does.
    pub children: Vec<NewChild>,
}

/// A child run to record with its parent's batch.
#[derive(Debug, Clone, PartialEq)]
pub struct NewChild {
    /// The child, queued.
    pub run: NewRun,
    /// The job that starts it.
    pub start: NewJob,
}

impl Batch {
    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.journal.is_empty()
            && self.events.is_empty()
            && self.checkpoints.is_empty()
            && self.thread.is_none()
            && self.children.is_empty()
    }
}

/// Messages a run of a session appends to the session's thread.
///
/// The session must be the run's own ([`StoreError::Conflict`](crate::StoreError::Conflict) otherwise),
/// and its thread must still hold `expected` messages: if another prompt
/// moved it on, the whole batch is refused ([`StoreError::Conflict`](crate::StoreError::Conflict)). A
/// deleted session is [`StoreError::NoSession`](crate::StoreError::NoSession). The append touches the
/// session's `updated_ms` as [`Sessions::append_thread`](crate::Sessions::append_thread) does, with the
/// store's clock.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadAppend {
    /// The session's id.
    pub session: String,
    /// How many messages the thread held when the prompt started.
    pub expected: u64,
    /// The messages to append, in order.
    pub messages: Vec<Value>,
}
