//! Runs: a run's record, its status and owner's lease, and the rule every
//! backend applies when a run is claimed (how it leaves `running` is
//! the `transition` module's).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A run's status. There is no `resumed` status: a resumed run is
/// `running` again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Waiting for a worker.
    Queued,
    /// Owned by a process, which holds its lease.
    Running,
    /// Paused on purpose: a `suspend`, or an approval to decide.
    Suspended,
    /// Finished.
    Done,
    /// Ended with an error.
    Failed,
    /// Stopped by the operator.
    Cancelled,
}

impl RunStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [RunStatus; 6] = [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::Suspended,
        RunStatus::Done,
        RunStatus::Failed,
        RunStatus::Cancelled,
    ];

    /// The name stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Suspended => "suspended",
            RunStatus::Done => "done",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }

    /// Parses a stored or typed name.
    pub fn parse(name: &str) -> Option<RunStatus> {
        RunStatus::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// Whether the run has ended for good.
    pub fn is_final(self) -> bool {
        matches!(self, RunStatus::Done | RunStatus::Failed | RunStatus::Cancelled)
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who owns a running run, and until when (milliseconds since the Unix
/// epoch). An owner renews its lease while it works; a lease that ran out
/// marks an orphan, which the start-up sweep recovers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// `host:pid:nonce` of the owning process.
    pub owner: String,
    /// When the lease ends.
    pub until_ms: i64,
}

/// A run to record.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRun {
    /// Its id (see [`new_run_id`]).
    pub id: String,
    /// The agent's name.
    pub agent: String,
    /// `component` or `toml`.
    pub kind: String,
    /// Where the agent came from: the component's path, or the TOML file's.
    pub source: String,
    /// The SHA-256 of the component's bytes (of the TOML text for a TOML
    /// agent), as lowercase hex.
    pub component_sha256: String,
    /// The run's input.
    pub input: String,
    /// The operator's grant the run started with, as the host records it.
    /// It never holds a secret.
    pub grant: Value,
    /// `running` (with `lease`) or `queued`.
    pub status: RunStatus,
    /// The owner's lease, for a run that starts `running`.
    pub lease: Option<Lease>,
    /// When it was created.
    pub created_ms: i64,
    /// The session this run is a prompt of, which must exist
    /// ([`StoreError::NoSession`](crate::StoreError::NoSession)); `None` for a plain run.
    pub session: Option<String>,
    /// The tenant that started the run through `nexo serve`, which must
    /// exist ([`StoreError::NoTenant`](crate::StoreError::NoTenant)); `None` for a run of the CLI.
    pub tenant: Option<String>,
}

impl NewRun {
    /// The run as it is first recorded.
    pub fn into_run(self) -> Run {
        Run {
            id: self.id,
            agent: self.agent,
            kind: self.kind,
            source: self.source,
            component_sha256: self.component_sha256,
            input: self.input,
            grant: self.grant,
            status: self.status,
            suspend_reason: None,
            wake_ms: None,
            signal_wait: None,
            wake_job: None,
            resume_key: None,
            resume_input: None,
            result: None,
            error: None,
            created_ms: self.created_ms,
            updated_ms: self.created_ms,
            lease: self.lease,
            session: self.session,
            tenant: self.tenant,
            parent: None,
        }
    }
}

/// A recorded run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Run {
    /// Its id.
    pub id: String,
    /// The agent's name.
    pub agent: String,
    /// `component` or `toml`.
    pub kind: String,
    /// The component's path, or the TOML file's.
    pub source: String,
    /// The SHA-256 the run started with.
    pub component_sha256: String,
    /// The input.
    pub input: String,
    /// The operator's grant.
    pub grant: Value,
    /// Its status.
    pub status: RunStatus,
    /// Why it is suspended.
    pub suspend_reason: Option<String>,
    /// When a run suspended on a durable timer (`sleep`) is due to wake
    /// (milliseconds since the epoch); `None` otherwise.
    pub wake_ms: Option<i64>,
    /// The signal a run suspended by `wait-signal` waits for; `None`
    /// otherwise.
    pub signal_wait: Option<String>,
    /// The job that wakes a suspended run (its timer's, or its wait's),
    /// the one wake its claim is taken from; `None` otherwise.
    pub wake_job: Option<String>,
    /// The key the guest passed to `suspend`, for the application resuming it.
    pub resume_key: Option<String>,
    /// The JSON given at the latest resume.
    pub resume_input: Option<String>,
    /// The answer, once `done`.
    pub result: Option<String>,
    /// The error, once `failed` (or why it was cancelled, or why its last
    /// attempt failed while it is `queued` for a retry).
    pub error: Option<String>,
    /// When it was created.
    pub created_ms: i64,
    /// When it last changed.
    pub updated_ms: i64,
    /// The owner's lease, while `running`.
    pub lease: Option<Lease>,
    /// The session this run is a prompt of, if any.
    pub session: Option<String>,
    /// The tenant that started it through `nexo serve`; `None` for a run
    /// of the CLI.
    pub tenant: Option<String>,
    /// The run that started it with `run-agent`, for a child run; `None`
    /// otherwise.
    pub parent: Option<String>,
}

/// The token a wake job `id` claims its run with ([`crate::Claim::Wake`]):
/// a hash of its id, which the run holds (`wake_job`) while that very
/// wake is the one it waits on, so a stale wake (one the run has moved on
/// from, even to another wait due at the same time) is refused.
pub fn wake_token(id: &str) -> i64 {
    // FNV-1a: stable across versions and processes, unlike std's hasher.
    let hash = id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    i64::from_ne_bytes(hash.to_ne_bytes())
}

/// From which states a claim may take a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// A suspended run, resumed by the operator.
    Resume,
    /// A queued run, started by a worker.
    Start,
    /// A running run whose lease ran out before `now_ms`, recovered after a
    /// crash.
    Recover,
    /// A failed run, tried again (recording `resume_input` like a resume):
    /// the calls whose failure was not journaled run again.
    Retry,
    /// A run sleeping on the durable timer due at `until_ms`, or waiting
    /// for a signal (with that timeout, or none), woken by its job. Refused
    /// once the run no longer waits on that timer (it was resumed early, or
    /// cancelled).
    Wake {
        /// The timer's due time, as the wake job holds it; `None` for a
        /// wait for a signal with no timeout.
        until_ms: Option<i64>,
        /// The wake job's [`wake_token`](crate::wake_token).
        token: i64,
    },
}

impl Claim {
    /// Whether this claim may take `run` at `now_ms`: the one rule every
    /// backend applies.
    pub fn allows(self, run: &Run, now_ms: i64) -> bool {
        match self {
            Claim::Resume => run.status == RunStatus::Suspended,
            Claim::Start => run.status == RunStatus::Queued,
            Claim::Recover => {
                run.status == RunStatus::Running && run.lease.as_ref().is_none_or(|l| l.until_ms < now_ms)
            }
            Claim::Retry => run.status == RunStatus::Failed,
            Claim::Wake { until_ms, token } => {
                run.status == RunStatus::Suspended
                    && match &run.wake_job {
                        Some(job) => wake_token(job) == token,
                        // A timer's wake written before runs held their wake job.
                        None => until_ms.is_some() && run.wake_ms == until_ms,
                    }
            }
        }
    }
}

/// The data of the `resumed` event a claim `how` writes for a run that
/// slept until `wake_ms` (if it did): a timer's wake names its time, and a
/// resume that came first says it was early.
pub(crate) fn resumed_event(how: Claim, wake_ms: Option<i64>) -> Value {
    match (how, wake_ms) {
        (Claim::Wake { until_ms, .. }, _) => serde_json::json!({"woken": true, "wake_ms": until_ms}),
        (_, Some(wake_ms)) => serde_json::json!({"early": true, "wake_ms": wake_ms}),
        _ => serde_json::json!({}),
    }
}

/// A new run id: `r` then 26 characters, sortable by creation time.
pub fn new_run_id() -> String {
    crate::ids::new_id('r')
}
