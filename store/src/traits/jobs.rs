//! The job queue: background work for runs, claimed with fenced leases.

use crate::{Job, JobLease, JobStatus, NewJob, Retry, StoreResult};

/// The job queue: background work for runs (a start, a resume, a retry),
/// taken in fair turns by workers that hold fenced leases. Every method is
/// one transaction.
#[async_trait::async_trait]
pub trait Jobs: Send + Sync {
    /// Queues a job for its run, which must exist ([`StoreError::NoRun`](crate::StoreError::NoRun)),
    /// in the share of the queue of the run's tenant, at the turn
    /// [`next_turn`](crate::next_turn) gives. A taken id, or `max_attempts` of 0, is a
    /// [`StoreError::Conflict`](crate::StoreError::Conflict).
    async fn enqueue(&self, job: NewJob) -> StoreResult<Job>;

    /// Takes a due job for `worker` until `now_ms + lease_ms`: first one
    /// `running` whose lease ended before `now_ms` (its worker died), else
    /// the `queued` one with `not_before_ms <= now_ms` that is next in the
    /// fair order (by [`Job::turn`], then `not_before_ms`, `created_ms`
    /// and id): tenants take turns, and a tenant's own jobs come in the
    /// order they were queued. One indexed read finds it. Its attempts go up by one, and its
    /// lease's token is greater than every token an earlier claim of any
    /// job got. A lapsed job that has used all its attempts becomes
    /// `failed`, and the claim goes on to the next due job. Concurrent
    /// claims, in any number of processes, never take the same job (SQLite:
    /// `BEGIN IMMEDIATE`; PostgreSQL: `FOR UPDATE SKIP LOCKED`). `None` if
    /// nothing is due.
    ///
    /// First it queues the timers' wakes ([`JobStatus::Sleeping`]) due by
    /// `now_ms`, the earliest first and at most 64 a claim, each at its
    /// queue's next turn as a retry is: a sleeper takes no turn while it
    /// sleeps, so many sleepers hold up neither their tenant nor a claim.
    async fn claim_job(&self, worker: &str, lease_ms: i64, now_ms: i64) -> StoreResult<Option<Job>> {
        self.claim_job_unless(worker, lease_ms, now_ms, &[]).await
    }

    /// [`Jobs::claim_job`], unless the job next in turn is a job of one of
    /// the tenants `held_back` (by id): then nothing is claimed and `None`
    /// is answered. A worker keeps its last run slots for tenants other
    /// than those already holding their share of them: a job of theirs next
    /// in turn waits for a slot they may use, not for a reserved one.
    async fn claim_job_unless(
        &self,
        worker: &str,
        lease_ms: i64,
        now_ms: i64,
        held_back: &[String],
    ) -> StoreResult<Option<Job>>;

    /// Extends to `now_ms + lease_ms`, in one write, the leases of the
    /// running jobs whose claims hold one of `tokens` ([`JobLease::token`]),
    /// and answers the tokens it extended. A token left out has lost its
    /// job (another claim holds it, or it ended): stop.
    async fn heartbeat_jobs(&self, tokens: &[i64], lease_ms: i64, now_ms: i64) -> StoreResult<Vec<i64>>;

    /// Marks the job `done`. A stale token is a [`StoreError::Conflict`](crate::StoreError::Conflict):
    /// another worker has the job.
    async fn complete_job(&self, id: &str, lease: &JobLease, now_ms: i64) -> StoreResult<Job>;

    /// Records a failed attempt: with attempts left, and [`Retry::IfAttemptsLeft`],
    /// the job is `queued` again, due after [`retry_delay_ms`](crate::retry_delay_ms); otherwise it is
    /// `failed` with `error`. A stale token is a [`StoreError::Conflict`](crate::StoreError::Conflict).
    async fn fail_job(&self, id: &str, lease: &JobLease, error: &str, retry: Retry, now_ms: i64) -> StoreResult<Job>;

    /// Puts the running job back in the queue, due at `not_before_ms`,
    /// without counting the attempt (it was not tried: a tenant's quota is
    /// spent, say), with `reason` as its error; and appends a `held` event
    /// (`{"reason", "until_ms"}`) to its run, so whoever follows the run
    /// sees why it waits; not again while it is held for the same reason
    /// (the job's error already says it). One transaction. A stale token is a
    /// [`StoreError::Conflict`](crate::StoreError::Conflict).
    async fn postpone_job(
        &self,
        id: &str,
        lease: &JobLease,
        reason: &str,
        not_before_ms: i64,
        now_ms: i64,
    ) -> StoreResult<Job>;

    /// One job.
    async fn job(&self, id: &str) -> StoreResult<Option<Job>>;

    /// Jobs, newest first (by `created_ms`, then by id), optionally of one
    /// status, at most `limit`.
    async fn jobs(&self, status: Option<JobStatus>, limit: usize) -> StoreResult<Vec<Job>>;

    /// Whether the run has a job queued or running (a start, a resume, a
    /// retry): a second resume would only queue the same pass again. A
    /// timer's wake still sleeping is not one: a resume comes before it,
    /// and ends it.
    async fn has_live_job(&self, run: &str) -> StoreResult<bool>;

    /// When the earliest timer's wake still sleeping is due, if any: a
    /// worker with nothing to do waits no longer than that.
    async fn next_wake_ms(&self) -> StoreResult<Option<i64>>;
}
