//! Background runs: the jobs queue's types and the rules every backend
//! shares.
//!
//! A job starts or resumes one run. A worker claims it with a lease that
//! carries a fencing token, renews the lease by heartbeat while it works,
//! and completes or fails it; every one of those writes is refused once the
//! token is stale, so a worker that lost its lease (it stalled, and another
//! worker reclaimed the job) learns it at its next write and stops.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a job does to its run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobKind {
    /// Starts a queued run.
    Start,
    /// Resumes a suspended run with the resume input in the payload.
    Resume,
    /// Resumes a run sleeping on a durable timer when it is due. It is born
    /// [`JobStatus::Sleeping`], with the run's suspension, and queued when due.
    Wake,
}

impl JobKind {
    /// The name stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::Start => "start",
            JobKind::Resume => "resume",
            JobKind::Wake => "wake",
        }
    }

    /// Parses a stored or typed name.
    pub fn parse(name: &str) -> Option<JobKind> {
        [JobKind::Start, JobKind::Resume, JobKind::Wake].into_iter().find(|k| k.as_str() == name)
    }
}

/// A job's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// A timer's wake, not yet due: outside the queue's order (and its
    /// turns) until a claim finds it due and queues it.
    Sleeping,
    /// Waiting until it is due and a worker claims it.
    Queued,
    /// Claimed by a worker, which holds its lease.
    Running,
    /// Finished.
    Done,
    /// Used all its attempts; `error` says why.
    Failed,
}

impl JobStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [JobStatus; 5] =
        [JobStatus::Sleeping, JobStatus::Queued, JobStatus::Running, JobStatus::Done, JobStatus::Failed];

    /// The name stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Sleeping => "sleeping",
            JobStatus::Queued => "queued",
            JobStatus::Running => "running",
            JobStatus::Done => "done",
            JobStatus::Failed => "failed",
        }
    }

    /// Parses a stored or typed name.
    pub fn parse(name: &str) -> Option<JobStatus> {
        JobStatus::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

impl std::fmt::Display for JobStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A job to enqueue.
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    /// Its id (a [`crate::new_run_id`]-style id).
    pub id: String,
    /// The run it starts or resumes; it must exist.
    pub run: String,
    /// Start or resume.
    pub kind: JobKind,
    /// JSON-safe data for the worker: the run id and the resume input. The
    /// big state stays on the run.
    pub payload: Value,
    /// How many claims it may have, at least 1.
    pub max_attempts: u32,
    /// The base delay before a retry (see [`retry_delay_ms`]).
    pub backoff_ms: i64,
    /// When it becomes due.
    pub not_before_ms: i64,
    /// When it was created.
    pub created_ms: i64,
}

impl NewJob {
    /// The job as it is first recorded, in `tenant`'s share of the queue
    /// at `turn` ([`next_turn`]); a [`JobKind::Wake`] is born sleeping, at
    /// turn 0 until it is queued.
    pub fn into_job(self, tenant: Option<String>, turn: i64) -> Job {
        let status = if self.kind == JobKind::Wake { JobStatus::Sleeping } else { JobStatus::Queued };
        Job {
            id: self.id,
            run: self.run,
            tenant,
            turn,
            kind: self.kind,
            payload: self.payload,
            status,
            attempts: 0,
            max_attempts: self.max_attempts,
            backoff_ms: self.backoff_ms,
            not_before_ms: self.not_before_ms,
            lease: None,
            error: None,
            created_ms: self.created_ms,
            updated_ms: self.created_ms,
        }
    }
}

/// A worker's hold on a running job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobLease {
    /// The worker (`host:pid:nonce`).
    pub worker: String,
    /// The fencing token: greater than every token an earlier claim of any
    /// job got. Every later write for the job names it, and is refused once
    /// another claim has a newer one.
    pub token: i64,
    /// When the lease ends unless renewed (milliseconds since the epoch).
    pub until_ms: i64,
}

/// A recorded job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Job {
    /// Its id.
    pub id: String,
    /// The run it starts or resumes.
    pub run: String,
    /// The run's tenant, whose share of the queue the job takes; `None`
    /// for the operator's own runs (the CLI's), which share one.
    pub tenant: Option<String>,
    /// Its place in the fair order ([`next_turn`]): due jobs are claimed
    /// by turn, so each tenant's next job comes around in turn, however
    /// many another tenant has queued.
    pub turn: i64,
    /// Start or resume.
    pub kind: JobKind,
    /// The worker's data.
    pub payload: Value,
    /// Its status.
    pub status: JobStatus,
    /// How many times it has been claimed.
    pub attempts: u32,
    /// How many claims it may have.
    pub max_attempts: u32,
    /// The base retry delay.
    pub backoff_ms: i64,
    /// When it is due (again, after a failure).
    pub not_before_ms: i64,
    /// The worker's lease, while `running`.
    pub lease: Option<JobLease>,
    /// The latest failure's error.
    pub error: Option<String>,
    /// When it was created.
    pub created_ms: i64,
    /// When it last changed.
    pub updated_ms: i64,
}

impl Job {
    /// Whether a claim at `now_ms` may take it: queued and due, or running
    /// with a lease that ended before `now_ms`.
    pub(crate) fn is_due(&self, now_ms: i64) -> bool {
        match self.status {
            JobStatus::Queued => self.not_before_ms <= now_ms,
            JobStatus::Running => self.lease.as_ref().is_none_or(|l| l.until_ms < now_ms),
            JobStatus::Sleeping | JobStatus::Done | JobStatus::Failed => false,
        }
    }

    /// Whether it is a timer's wake whose time has come at `now_ms`, which
    /// a claim queues first ([`crate::Jobs::claim_job_unless`]).
    pub(crate) fn wakes(&self, now_ms: i64) -> bool {
        self.status == JobStatus::Sleeping && self.not_before_ms <= now_ms
    }

    /// Whether the job is one of the tenants `held_back` (by id), which a
    /// claim leaves where it is ([`crate::Jobs::claim_job_unless`]).
    pub(crate) fn held_back(&self, held_back: &[String]) -> bool {
        self.tenant.as_ref().is_some_and(|t| held_back.contains(t))
    }

    /// Whether a due job is a lapsed one with no attempt left, which a
    /// claim fails ([`Job::give_up`]) instead of taking.
    pub(crate) fn exhausted(&self) -> bool {
        self.status == JobStatus::Running && self.attempts >= self.max_attempts
    }

    /// Fails an [`exhausted`](Job::exhausted) job, naming its last worker.
    pub(crate) fn give_up(&mut self, now_ms: i64) {
        let last = self.lease.take().map_or_else(|| "(none)".to_string(), |l| l.worker);
        self.status = JobStatus::Failed;
        self.error = Some(crate::refusal::job_lapsed(self.attempts, &last));
        self.updated_ms = now_ms;
    }

    /// Gives a due job to `worker` with fencing token `token`.
    pub(crate) fn take(&mut self, worker: &str, token: i64, lease_ms: i64, now_ms: i64) {
        self.status = JobStatus::Running;
        self.attempts = self.attempts.saturating_add(1);
        self.lease = Some(JobLease { worker: worker.to_string(), token, until_ms: now_ms.saturating_add(lease_ms) });
        self.updated_ms = now_ms;
    }

    /// Succeeds if `lease` still holds the running job; otherwise the
    /// conflict to report.
    pub(crate) fn check_lease(&self, lease: &JobLease) -> crate::StoreResult<()> {
        match &self.lease {
            Some(held) if self.status == JobStatus::Running && held.token == lease.token => Ok(()),
            _ => Err(crate::StoreError::Conflict(crate::refusal::job_lease_lost(&self.id, lease.token, self.status))),
        }
    }

    /// Marks it done (the lease checked).
    pub(crate) fn complete(&mut self, now_ms: i64) {
        self.status = JobStatus::Done;
        self.lease = None;
        self.updated_ms = now_ms;
    }

    /// Puts it back in the queue (the lease checked), due at
    /// `not_before_ms`, without counting the attempt: it was not tried.
    pub(crate) fn postpone(&mut self, reason: &str, not_before_ms: i64, now_ms: i64) {
        self.status = JobStatus::Queued;
        self.attempts = self.attempts.saturating_sub(1);
        self.lease = None;
        self.error = Some(reason.to_string());
        self.not_before_ms = not_before_ms;
        self.updated_ms = now_ms;
    }

    /// Records a failed attempt (the lease checked): queued again after the
    /// retry delay while attempts are left and `retry` allows, else failed.
    pub(crate) fn fail(&mut self, error: &str, retry: Retry, now_ms: i64) {
        self.lease = None;
        self.error = Some(error.to_string());
        self.updated_ms = now_ms;
        if retry == Retry::IfAttemptsLeft && self.attempts < self.max_attempts {
            self.status = JobStatus::Queued;
            self.not_before_ms = now_ms.saturating_add(retry_delay_ms(self.backoff_ms, self.attempts));
        } else {
            self.status = JobStatus::Failed;
        }
    }
}

/// The turn of a job queued now: one after the last turn of its tenant's
/// jobs (`tenant_last`), and no earlier than the latest turn a claim has
/// taken (`claimed`), so a tenant that was idle joins the round under way
/// instead of starting where it left off. This is start-time fair
/// queueing: a tenant with 10,000 queued jobs holds turns far ahead, and
/// another tenant's new job waits for at most one job of each tenant with
/// work queued. A job queued again for a retry takes a new turn by the
/// same rule. Every backend uses this one rule (the SQL ones in the insert
/// itself, `sql::INSERT_JOB_SQLITE`, and in `sql::RETRY_TURN_SQLITE`).
pub fn next_turn(tenant_last: Option<i64>, claimed: Option<i64>) -> i64 {
    let next = tenant_last.map_or(0, |t| t.saturating_add(1));
    next.max(claimed.unwrap_or(0))
}

/// Whether a failed attempt of a job may be tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Yes, while it has attempts left: the failure may not recur (an
    /// unreachable model, a store error, a full instance pool).
    IfAttemptsLeft,
    /// No: the failure would recur, and each try would only cost again (a
    /// trap, a quota, a setting that cannot be used).
    Never,
}

/// The longest a retry waits.
pub const MAX_RETRY_DELAY_MS: i64 = 10 * 60 * 1000;

/// How long a job waits before its next attempt after failing attempt
/// `attempt` (from 1): `backoff_ms × 2^(attempt − 1)`, at most
/// [`MAX_RETRY_DELAY_MS`]. Every backend uses this one rule.
pub fn retry_delay_ms(backoff_ms: i64, attempt: u32) -> i64 {
    let factor = 1i64.checked_shl(attempt.saturating_sub(1)).filter(|f| *f > 0).unwrap_or(i64::MAX);
    backoff_ms.max(0).saturating_mul(factor).min(MAX_RETRY_DELAY_MS)
}

/// Why a job's fields cannot be enqueued, if they cannot.
pub(crate) fn check_new_job(job: &NewJob) -> Option<String> {
    if job.max_attempts == 0 {
        return Some(format!("job `{}` needs max_attempts of at least 1 (it has 0)", job.id));
    }
    if job.backoff_ms < 0 {
        return Some(format!("job `{}` has a negative backoff ({} ms); give 0 or more", job.id, job.backoff_ms));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_double_up_to_ten_minutes() {
        assert_eq!(retry_delay_ms(1_000, 1), 1_000);
        assert_eq!(retry_delay_ms(1_000, 2), 2_000);
        assert_eq!(retry_delay_ms(1_000, 4), 8_000);
        assert_eq!(retry_delay_ms(1_000, 30), MAX_RETRY_DELAY_MS);
        assert_eq!(retry_delay_ms(1_000, 64), MAX_RETRY_DELAY_MS);
        assert_eq!(retry_delay_ms(1_000, u32::MAX), MAX_RETRY_DELAY_MS);
        assert_eq!(retry_delay_ms(i64::MAX, 3), MAX_RETRY_DELAY_MS);
        assert_eq!(retry_delay_ms(0, 5), 0);
        assert_eq!(retry_delay_ms(-5, 1), 0);
        assert_eq!(retry_delay_ms(1_000, 0), 1_000, "attempt 0 counts as the first");
    }

    #[test]
    fn a_turn_follows_the_tenants_last_and_never_precedes_the_claims() {
        assert_eq!(next_turn(None, None), 0);
        assert_eq!(next_turn(Some(4), None), 5);
        assert_eq!(next_turn(Some(4), Some(100)), 100, "an idle tenant joins the round under way");
        assert_eq!(next_turn(Some(500), Some(100)), 501, "a busy tenant queues behind its own jobs");
        assert_eq!(next_turn(None, Some(7)), 7);
        assert_eq!(next_turn(Some(i64::MAX), None), i64::MAX);
    }

    #[test]
    fn names_round_trip() {
        for s in JobStatus::ALL {
            assert_eq!(JobStatus::parse(s.as_str()), Some(s));
        }
        for k in [JobKind::Start, JobKind::Resume] {
            assert_eq!(JobKind::parse(k.as_str()), Some(k));
            assert_eq!(serde_json::to_value(k).unwrap_or_default(), Value::String(k.as_str().into()));
        }
        assert_eq!(JobStatus::parse("resumed"), None);
    }
}

/// A watch on the jobs other processes make due ([`crate::Backend::watch_jobs`]):
/// it lasts until dropped.
#[derive(Debug)]
pub struct JobWatch {
    task: tokio::task::AbortHandle,
}

impl JobWatch {
    /// A watch kept by `task`, which is stopped when the watch drops.
    pub(crate) fn new(task: tokio::task::AbortHandle) -> Self {
        JobWatch { task }
    }
}

impl Drop for JobWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}
