//! Runs, with their journal, events, checkpoints and pending approvals.

use serde_json::Value;

use crate::{
    Approval, Batch, Claim, Decision, Entry, Lease, NewRun, PendingCall, Run, RunStatus, Signal, StoreResult,
    StoredEvent, Transition,
};

/// Runs: their records and leases, their journal of host calls, events,
/// checkpoints and pending approvals. Every method is one transaction.
#[async_trait::async_trait]
pub trait Runs: Send + Sync {
    /// Records a new run. A taken id is a [`StoreError::Conflict`](crate::StoreError::Conflict).
    ///
    /// A run with a session is a prompt of it, and a session has one prompt
    /// in progress at a time: if the session already has a run that is
    /// `queued`, `running` or `suspended`, the new one is refused
    /// ([`StoreError::Conflict`](crate::StoreError::Conflict), naming that run and what to do about it),
    /// since two prompts at once would race for one thread. The check and
    /// the insert are one transaction, on PostgreSQL with the session's row
    /// locked, so of concurrent creations in any number of processes at
    /// most one wins. A session that is not there is
    /// [`StoreError::NoSession`](crate::StoreError::NoSession).
    ///
    /// A run with a tenant needs the tenant to be there
    /// ([`StoreError::NoTenant`](crate::StoreError::NoTenant)). Of several refusals the first in this
    /// order is reported: a taken id, a missing tenant, a missing session, a
    /// prompt in progress.
    async fn create_run(&self, run: NewRun) -> StoreResult<Run>;

    /// [`Runs::create_run`], and in the same transaction queues `start`,
    /// the job that starts the run. A queued run is so never left without
    /// its job: a process killed between two writes would leave it
    /// `queued` with nothing to take it. Refused as `create_run` refuses,
    /// or as [`Jobs::enqueue`](crate::Jobs::enqueue) refuses `start`; then nothing is written.
    async fn create_run_and_start(&self, run: NewRun, start: crate::NewJob) -> StoreResult<(Run, crate::Job)>;

    /// One run.
    async fn run(&self, id: &str) -> StoreResult<Option<Run>>;

    /// Sends run `id` the signal `name` with `data` (JSON text), kept until
    /// a `wait-signal` of the run takes it. If the run is suspended waiting
    /// for `name`, its wake is due now, in the same transaction. Refused
    /// for a finished run and past [`MAX_SIGNALS_PER_RUN`](crate::MAX_SIGNALS_PER_RUN)
    /// ([`StoreError::Conflict`](crate::StoreError::Conflict)), for a name or data
    /// [`check_name_and_data`](crate::check_name_and_data) refuses
    /// ([`StoreError::Invalid`](crate::StoreError::Invalid)), and for a run that is not there
    /// ([`StoreError::NoRun`](crate::StoreError::NoRun)); then nothing is written.
    async fn send_signal(&self, id: &str, name: &str, data: &str) -> StoreResult<Signal>;

    /// The first signal of `name` sent to run `id` after the one with id
    /// `after`, if any.
    async fn next_signal(&self, id: &str, name: &str, after: i64) -> StoreResult<Option<Signal>>;

    /// Run `id`'s child runs (those it started with `run-agent`), oldest
    /// first.
    async fn children(&self, id: &str) -> StoreResult<Vec<Run>>;

    /// Runs, newest first (by `created_ms`, then by id), optionally of one
    /// status, at most `limit`.
    async fn runs(&self, status: Option<RunStatus>, limit: usize) -> StoreResult<Vec<Run>>;

    /// Commits `batch` for the running run `id`, durably. Fails with
    /// [`StoreError::Conflict`](crate::StoreError::Conflict) if `owner` no longer holds the run's lease
    /// (it was cancelled, or another process recovered it). A
    /// [`Batch::thread`] append is part of the batch: if it is refused,
    /// nothing of the batch is written.
    async fn commit(&self, id: &str, owner: &str, batch: Batch) -> StoreResult<()>;

    /// Commits `batch` and moves the run out of `running`, in one
    /// transaction; a suspension also records its pending approval
    /// (replacing an older one), and any other transition removes an older
    /// one. Returns the run as it now is. A [`Batch::thread`] append that is
    /// refused refuses the transition: nothing is written and the run stays
    /// `running`, still `owner`'s.
    async fn transition(&self, id: &str, owner: &str, batch: Batch, to: Transition) -> StoreResult<Run>;

    /// Takes a run for `lease.owner` (with `BEGIN IMMEDIATE` on SQLite, so
    /// two processes cannot both win): from `suspended` for [`Claim::Resume`]
    /// (recording `resume_input` and a `resumed` event), from `queued` for
    /// [`Claim::Start`], from an expired `running` for [`Claim::Recover`],
    /// from `failed` for [`Claim::Retry`] (like a resume, and clearing the
    /// error).
    /// Anything else is a [`StoreError::Conflict`](crate::StoreError::Conflict) that says what state the
    /// run is in.
    ///
    /// A retry of a session's prompt is also refused
    /// ([`StoreError::Conflict`](crate::StoreError::Conflict)) once the session has a run created after
    /// it (by `created_ms`, then id): that prompt has moved the thread on,
    /// and retrying the older one would fork it. On PostgreSQL the retry
    /// locks the session's row first, as [`Runs::create_run`] does.
    async fn claim(
        &self,
        id: &str,
        how: Claim,
        lease: Lease,
        resume_input: Option<String>,
        now_ms: i64,
    ) -> StoreResult<Run>;

    /// Extends to `until_ms` the leases `owner` still holds on the running
    /// runs among `ids`, in one write, and answers the ids it extended. An id
    /// left out is no longer this owner's (cancelled, finished, recovered
    /// elsewhere, or deleted): stop working on it.
    async fn renew_leases(&self, owner: &str, ids: &[String], until_ms: i64) -> StoreResult<Vec<String>>;

    /// Running runs whose lease ended before `now_ms`, by id.
    async fn orphans(&self, now_ms: i64) -> StoreResult<Vec<Run>>;

    /// Marks a run `cancelled` from `queued`, `suspended` or `running`
    /// (its owner notices at its next renewal), with a `cancelled` event.
    /// A final run is a conflict. Its unfinished child runs are cancelled
    /// with it, in the same write; a child's end, cancelled or not, is a
    /// signal to its parent ([`crate::child_signal`]).
    async fn cancel(&self, id: &str, reason: &str) -> StoreResult<Run>;

    /// The run's journal, in sequence order.
    async fn journal(&self, id: &str) -> StoreResult<Vec<Entry>>;

    /// The run's events with an id above `after`, in order, at most `limit`.
    async fn events(&self, id: &str, after: i64, limit: usize) -> StoreResult<Vec<StoredEvent>>;

    /// The run's checkpoints, sorted by name (byte order).
    async fn checkpoints(&self, id: &str) -> StoreResult<Vec<(String, Value)>>;

    /// The run's pending approval, if any.
    async fn approval(&self, id: &str) -> StoreResult<Option<Approval>>;

    /// Records the operator's decision on the suspended run's pending
    /// approval, if it is still for `call`, the call the decider was shown.
    /// The check and the write are one transaction (on PostgreSQL the
    /// run's row is locked first). The same decision again is answered as
    /// the first was; the other one is [`StoreError::AlreadyDecided`](crate::StoreError::AlreadyDecided) (a
    /// decider on a stale page cannot overturn one). No pending approval, or one for
    /// another call, is a [`StoreError::StaleApproval`](crate::StoreError::StaleApproval) that names the call
    /// the run waits on now, and nothing is decided.
    async fn decide(&self, id: &str, call: &PendingCall, decision: Decision) -> StoreResult<Approval>;

    /// [`Runs::decide`], and in the same transaction queues `resume`, the
    /// job that goes on with the run, unless the run has a queued or running
    /// job already. A decision is so never left without its resume: a
    /// process that died between two writes would leave the run suspended
    /// on a decided call, with nothing to take it on. The same decision
    /// again queues the resume if none is live (it heals such a run).
    async fn decide_and_resume(
        &self,
        id: &str,
        call: &PendingCall,
        decision: Decision,
        resume: crate::NewJob,
    ) -> StoreResult<Approval>;

    /// Removes the pending approval once its call has used it.
    async fn clear_approval(&self, id: &str, owner: &str) -> StoreResult<()>;

    /// Records the trace context of a pass of run `id` (opaque text, the
    /// tracer's), once: a later pass links to it. A run that is not there
    /// is [`StoreError::NoRun`](crate::StoreError::NoRun); the contexts go when the run does.
    async fn add_pass_trace(&self, id: &str, context: &str, at_ms: i64) -> StoreResult<()>;

    /// The trace contexts of run `id`'s latest `limit` passes, oldest first.
    async fn pass_traces(&self, id: &str, limit: usize) -> StoreResult<Vec<String>>;
}
