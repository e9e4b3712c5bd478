//! The jobs a run's lifecycle queues: a start, a resume, a wake.

use std::time::Duration;

use nexo_store::{JobKind, NewJob};
use serde_json::{Value, json};

use super::trace;

/// How many times a job is tried before it stays failed.
pub const JOB_ATTEMPTS: u32 = 5;

/// The delay before a job's first retry; each further one doubles it.
pub const JOB_BACKOFF: Duration = Duration::from_secs(2);

/// The job that wakes `run` at `at_ms`: a timer's, or a wait's timeout;
/// with none ([`nexo_store::NEVER_MS`]), only a signal makes it due.
pub(super) fn new_wake(run: &str, at_ms: Option<i64>) -> NewJob {
    let job = new_job(run, JobKind::Wake, json!({"run": run, "wake_ms": at_ms}));
    NewJob { not_before_ms: at_ms.unwrap_or(nexo_store::NEVER_MS), ..job }
}

/// A job of `kind` for `run`, due now, with the worker's attempts and
/// backoff, and the caller's trace context when tracing is on (the pass
/// continues the trace of the request that queued it).
pub(super) fn new_job(run: &str, kind: JobKind, mut payload: Value) -> NewJob {
    if let (Some(parent), Some(fields)) = (trace::caller(), payload.as_object_mut()) {
        fields.insert("trace".into(), json!(parent));
    }
    let now = nexo_store::now_ms();
    NewJob {
        id: nexo_store::new_run_id(),
        run: run.to_string(),
        kind,
        payload,
        max_attempts: JOB_ATTEMPTS,
        backoff_ms: JOB_BACKOFF.as_millis() as i64,
        not_before_ms: now,
        created_ms: now,
    }
}
