//! How a run leaves `running`: the one rule every backend applies.

use crate::{Approval, NEVER_MS, NewJob, Run, RunStatus, SignalWait};

/// How a run leaves `running`.
#[derive(Debug, Clone, PartialEq)]
pub enum Transition {
    /// It finished: `done` with its answer, or `failed` with its error. A
    /// status that is not final is a [`StoreError::Conflict`](crate::StoreError::Conflict). A finished
    /// run's pending approval, if any, is removed.
    Finish {
        /// `done`, `failed` or `cancelled`.
        status: RunStatus,
        /// The answer.
        result: Option<String>,
        /// The error.
        error: Option<String>,
    },
    /// It paused: the guest called `suspend`, or a gate needs a decision.
    Suspend {
        /// Why.
        reason: String,
        /// The guest's resume key.
        resume_key: Option<String>,
        /// The pending approval, when a gate suspended it.
        approval: Option<Approval>,
        /// The job that wakes it, when it sleeps on a durable timer: a
        /// [`JobKind::Wake`](crate::JobKind::Wake) due at its time, written
        /// with the suspension.
        wake: Option<Box<NewJob>>,
        /// The signal it waits for, when `wait-signal` suspended it; its
        /// wake is then due at the wait's timeout, or at
        /// [`NEVER_MS`] with none, and a signal sent since makes it due now.
        signal: Option<SignalWait>,
    },
    /// It failed in a way that may pass the next time, and its job will try
    /// it again: it is `queued` for that retry, not finished (a final
    /// status is reported only once true). A pending approval, if any, is
    /// removed.
    Requeue {
        /// Why this attempt failed.
        error: String,
    },
}

impl Transition {
    /// Moves `run` out of `running` as this transition says, at `now_ms`:
    /// the one rule every backend applies. Answers the approval a
    /// suspension waits on, and the job that wakes it, if any.
    pub(crate) fn apply(self, run: &mut Run, now_ms: i64) -> (Option<Approval>, Option<NewJob>) {
        run.lease = None;
        run.updated_ms = now_ms;
        run.wake_ms = None;
        run.signal_wait = None;
        run.wake_job = None;
        match self {
            Transition::Finish { status, result, error } => {
                run.status = status;
                run.result = result;
                run.error = error;
                run.suspend_reason = None;
                run.resume_key = None;
                (None, None)
            }
            Transition::Suspend { reason, resume_key, approval, wake, signal } => {
                run.status = RunStatus::Suspended;
                run.suspend_reason = Some(reason);
                run.resume_key = resume_key;
                run.wake_ms = wake.as_ref().map(|w| w.not_before_ms).filter(|&at| at != NEVER_MS);
                run.signal_wait = signal.map(|s| s.name);
                run.wake_job = wake.as_ref().map(|w| w.id.clone());
                (approval, wake.map(|w| *w))
            }
            Transition::Requeue { error } => {
                run.status = RunStatus::Queued;
                run.result = None;
                run.error = Some(error);
                run.suspend_reason = None;
                run.resume_key = None;
                (None, None)
            }
        }
    }
}
