//! The [`StoreError::Conflict`](crate::StoreError::Conflict) messages, one
//! function per situation, so every backend refuses the same thing in the
//! same words.

use crate::{Approval, Claim, Decision, PendingCall, Run, RunStatus, StoreError};

/// Why a claim cannot take a run, naming what to do instead.
pub(crate) fn claim_refusal(id: &str, how: Claim, run: &Run) -> String {
    let status = run.status;
    match (how, status) {
        (Claim::Resume, RunStatus::Running) => {
            format!(
                "run `{id}` is already being resumed (it is running in another process or worker); only a suspended \
                 run can be resumed"
            )
        }
        (Claim::Resume, s) => format!("run `{id}` is {s}; only a suspended run can be resumed"),
        (Claim::Start, s) => format!("run `{id}` is {s}, not queued"),
        (Claim::Recover, RunStatus::Running) => {
            format!("run `{id}` is running and its owner's lease has not run out; it is not an orphan")
        }
        (Claim::Recover, s) => format!("run `{id}` is {s}, not an orphaned running run"),
        (Claim::Retry, s) => format!("run `{id}` is {s}; only a failed run can be retried"),
        (Claim::Wake { .. }, RunStatus::Suspended) => {
            format!("run `{id}` no longer sleeps on this timer (it was resumed early, or sleeps on another)")
        }
        (Claim::Wake { .. }, s) => format!("run `{id}` is {s}, no longer sleeping on this timer"),
    }
}

/// A write by a process that no longer holds the run's lease.
pub(crate) fn not_owned(id: &str, status: RunStatus) -> String {
    format!("run `{id}` is no longer owned by this process (it is {status}); stopping work on it")
}

/// A new run whose id is taken.
pub(crate) fn run_exists(id: &str) -> String {
    format!("a run `{id}` already exists")
}

/// A journal entry whose sequence number the run's journal already has (or
/// that a batch holds twice). The whole batch is refused.
pub(crate) fn duplicate_entry(id: &str, seq: u64) -> String {
    format!(
        "run `{id}` already has journal entry {seq}; a host call is journaled once (is another process \
         working on this run?)"
    )
}

/// A [`Transition::Finish`](crate::Transition::Finish) to a status that is
/// not final.
pub(crate) fn not_final(id: &str, status: RunStatus) -> String {
    format!("run `{id}` cannot finish as {status}: a run finishes done, failed or cancelled")
}

/// Cancelling a run that has already ended.
pub(crate) fn nothing_to_cancel(id: &str, status: RunStatus) -> String {
    format!("run `{id}` is already {status}; there is nothing to cancel")
}

/// The approval a decision for `call` may be recorded on, of run `id`,
/// which is `status` and waits on `current` (if any): the one rule every
/// backend applies.
pub(crate) fn check_decision(
    id: &str,
    call: &PendingCall,
    decision: Decision,
    status: RunStatus,
    current: Option<Approval>,
) -> Result<Approval, StoreError> {
    match current.filter(|_| status == RunStatus::Suspended) {
        Some(a) if a.seq == call.seq && a.args_hash == call.args_hash => match a.decision {
            Some(decided) if decided != decision => {
                Err(StoreError::AlreadyDecided { run: id.to_string(), seq: a.seq, decided })
            }
            _ => Ok(a),
        },
        pending => Err(StoreError::StaleApproval {
            run: id.to_string(),
            given: call.clone(),
            status,
            pending: pending.map(Box::new),
        }),
    }
}

/// A new job whose id is taken.
pub(crate) fn job_exists(id: &str) -> String {
    format!("a job `{id}` already exists")
}

/// A write for a job by a worker whose lease token is no longer the job's:
/// its lease ran out and another claim took the job (or it has ended).
pub(crate) fn job_lease_lost(id: &str, token: i64, status: impl std::fmt::Display) -> String {
    format!(
        "job `{id}` is no longer this worker's: its lease (token {token}) was lost and another worker has \
         the job, or it has ended (it is {status}); stop working on it"
    )
}

/// The error a job is left with when its lease ran out on its last
/// attempt: its worker died or stalled.
pub(crate) fn job_lapsed(attempts: u32, worker: &str) -> String {
    format!(
        "gave up after {attempts} attempt(s): its worker stopped renewing the lease on the last one; last worker \
         `{worker}` (did it crash or stall? its log says why)"
    )
}

/// An append to a session's thread by a prompt that started from a thread
/// another prompt has since appended to.
pub(crate) fn thread_moved(id: &str, expected: u64, found: u64) -> String {
    format!(
        "session `{id}` has moved on: its thread holds {found} message(s), not the {expected} this prompt \
         started from, because another prompt of this session finished first; nothing was appended: load \
         the thread again and retry the prompt"
    )
}

/// A batch whose thread append names a session the run is not a prompt of:
/// a run appends only to its own session's thread. The whole batch is
/// refused.
pub(crate) fn not_this_session(id: &str, session: &str, own: Option<&str>) -> String {
    let own = match own {
        Some(own) => format!("it is a prompt of session `{own}`"),
        None => "it is a prompt of no session".to_string(),
    };
    format!(
        "run `{id}` is not a prompt of session `{session}` ({own}), so it cannot append to that session's \
         thread; nothing was written"
    )
}

/// A new prompt of a session that already has one in progress: one prompt
/// at a time, so that the thread has one writer.
pub(crate) fn prompt_in_progress(session: &str, run: &str, status: RunStatus) -> String {
    let what = match status {
        RunStatus::Suspended => format!(
            "is suspended; decide it first (`nexo runs approve {run}`, `nexo runs deny {run}`, `nexo runs resume \
             {run}`) or cancel it (`nexo runs cancel {run}`)"
        ),
        RunStatus::Running => format!(
            "is running (if its process died, `nexo runs recover` replays it); wait for it to end or cancel it \
             (`nexo runs cancel {run}`)"
        ),
        RunStatus::Queued => {
            format!("is queued for a worker; wait for it to end or cancel it (`nexo runs cancel {run}`)")
        }
        // Not in progress: no refusal names a final run.
        s => format!("is {s}"),
    };
    format!("session `{session}` has a prompt in progress: run `{run}` {what}")
}

/// A retry of a session's prompt after a later prompt of the session: the
/// retried run would append to a thread that has moved past it.
pub(crate) fn retry_would_fork(id: &str, session: &str, later: &str) -> String {
    format!(
        "run `{id}` is a prompt of session `{session}`, which has had a later prompt (run `{later}`); retrying \
         it would fork the thread: send the prompt again instead"
    )
}

/// A new tenant whose id is taken.
pub(crate) fn tenant_exists(id: &str) -> String {
    format!("a tenant `{id}` already exists")
}

/// A new tenant whose name another tenant has.
pub(crate) fn tenant_name_taken(name: &str) -> String {
    format!("a tenant named `{name}` already exists; choose another name (`nexo tenant list` shows the names taken)")
}

/// A new API key whose id is taken.
pub(crate) fn key_exists(id: &str) -> String {
    format!("an API key `{id}` already exists")
}

/// A console sign-in whose id hash is recorded already: the same session id
/// twice, which a random id never is.
pub(crate) fn sign_in_taken() -> String {
    "a console sign-in with this session id is recorded already; open the session with a new random id".to_string()
}

/// A new API key whose hash another key has: the same key twice.
pub(crate) fn key_hash_taken(id: &str) -> String {
    format!(
        "API key `{id}` has the same hash as a key already stored, so it is the same key; generate a new key \
         (from a secure random source) instead"
    )
}

/// A new API key whose hash is not a SHA-256 in lowercase hex: perhaps the
/// key itself, which is never stored.
pub(crate) fn not_a_key_hash(id: &str) -> String {
    format!(
        "API key `{id}` is not given as the SHA-256 of the key (64 lowercase hex digits); the store keeps only \
         that, never the key: hash it with `nexo_store::sha256_hex` first"
    )
}

/// A plugin whose bytes do not hash to the address it is stored under.
pub(crate) fn plugin_hash_mismatch(claimed: &str, actual: &str) -> String {
    format!(
        "the plugin's bytes have the SHA-256 {actual}, not {claimed}: it was damaged or truncated on the way; \
         upload it again"
    )
}
