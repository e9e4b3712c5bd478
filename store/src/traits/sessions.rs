//! Sessions: remembering instances of agents, with their threads.

use serde_json::Value;

use crate::{Run, Session, StoreResult};

/// Sessions: remembering instances of an agent, addressed by
/// `(agent, instance)`, each with its thread of messages. Every method is
/// one transaction.
#[async_trait::async_trait]
pub trait Sessions: Send + Sync {
    /// Finds the session `(agent, instance)` or creates it with an empty
    /// thread, and touches its `updated_ms` (it never goes back: a process
    /// whose clock is behind does not make a session look older). One
    /// statement, `INSERT … ON CONFLICT (agent, instance) DO UPDATE`, so
    /// concurrent opens in any number of processes return the same session.
    async fn open_session(&self, agent: &str, instance: &str, now_ms: i64) -> StoreResult<Session>;

    /// The session at `(agent, instance)`, if any. Reading it does not touch
    /// it.
    async fn session(&self, agent: &str, instance: &str) -> StoreResult<Option<Session>>;

    /// One session, by id.
    async fn session_by_id(&self, id: &str) -> StoreResult<Option<Session>>;

    /// Sessions, most recently updated first (by `updated_ms`, then by id,
    /// largest first), optionally of one agent, at most `limit`.
    async fn sessions(&self, agent: Option<&str>, limit: usize) -> StoreResult<Vec<Session>>;

    /// The sessions whose instance name starts with `prefix` (a served
    /// tenant's, `<tenant-id>/`), most recently updated first, at most
    /// `limit`. Read through an index of instance names: the sessions of
    /// other prefixes are never read, however many there are. An empty
    /// prefix is every session.
    async fn sessions_with_prefix(&self, prefix: &str, limit: usize) -> StoreResult<Vec<Session>>;

    /// The session's thread, in order (empty for a session that is not
    /// there).
    async fn thread(&self, id: &str) -> StoreResult<Vec<Value>>;

    /// Appends `messages` to the session's thread if it still holds exactly
    /// `expected` messages, and touches `updated_ms` (as
    /// [`Sessions::open_session`] does); returns the session as it now is. The
    /// count is the version check: of two prompts that read the same thread,
    /// the first to append wins and the other gets a
    /// [`StoreError::Conflict`](crate::StoreError::Conflict) and changes nothing (it should reload the
    /// thread and retry). No such session is [`StoreError::NoSession`](crate::StoreError::NoSession).
    async fn append_thread(&self, id: &str, expected: u64, messages: Vec<Value>, now_ms: i64) -> StoreResult<Session>;

    /// The runs linked to the session, oldest first (by `created_ms`, then
    /// by id).
    async fn session_runs(&self, id: &str) -> StoreResult<Vec<Run>>;

    /// Deletes the session, its thread, and every run linked to it with
    /// that run's journal, events, checkpoints, approval and jobs. `false`
    /// if there was no such session.
    async fn delete_session(&self, id: &str) -> StoreResult<bool>;

    /// Deletes, as [`Sessions::delete_session`] does, every session whose
    /// `updated_ms` is before `updated_before_ms`, and returns their ids
    /// (sorted). Nothing else changes: a session updated at or after the
    /// cut stays, and so does every run that is not linked to a deleted
    /// session.
    ///
    /// Retention never drops live work: a session with a prompt in progress
    /// (a run `queued`, `running` or `suspended`) stays, however old its
    /// `updated_ms`, and expires once that run has ended. On PostgreSQL the
    /// expired sessions' rows are locked first, so a prompt created or
    /// retried at the same moment either keeps its session or waits and
    /// finds it gone.
    async fn expire_sessions(&self, updated_before_ms: i64) -> StoreResult<Vec<String>>;
}
