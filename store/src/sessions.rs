//! Sessions: the type and the rules every backend shares.
//!
//! A session is a remembering instance of an agent, addressed by
//! `(agent, instance)`. Its thread is an ordered list of JSON messages that
//! the store keeps as it was given (the host's model messages). Each prompt
//! of a session is a run linked to it; a prompt appends what it added to
//! the thread with the count of messages it started from, and the store
//! refuses the append once another prompt has moved the thread on, so two
//! prompts racing on one session cannot interleave their turns.
//!
//! Three more rules keep a thread linear, in every backend: a session has
//! one prompt in progress at a time (a run `queued`, `running` or
//! `suspended`); a failed prompt is retried only while it is the session's
//! latest; and retention never deletes a session with a prompt in
//! progress.

use serde::{Deserialize, Serialize};

use crate::{Run, RunStatus, StoreError, StoreResult, ThreadAppend};

/// A session: its address and its thread's size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// Its id (see [`new_session_id`]).
    pub id: String,
    /// The agent's name.
    pub agent: String,
    /// The instance id, unique per agent.
    pub instance: String,
    /// How many messages its thread holds.
    pub messages: u64,
    /// When it was first opened.
    pub created_ms: i64,
    /// When it was last opened or appended to: what retention measures.
    pub updated_ms: i64,
}

/// A new session id: `s` then 26 characters, sortable by creation time.
pub fn new_session_id() -> String {
    crate::ids::new_id('s')
}

/// Succeeds if `session`'s thread still holds `expected` messages;
/// otherwise the conflict to report.
pub(crate) fn check_expected(session: &Session, expected: u64) -> StoreResult<()> {
    if session.messages == expected {
        return Ok(());
    }
    Err(StoreError::Conflict(crate::refusal::thread_moved(&session.id, expected, session.messages)))
}

/// The later of a session's `updated_ms` and `now_ms`: a touch never moves
/// it back, whatever the clock of the process that touches it.
pub(crate) fn touched(updated_ms: i64, now_ms: i64) -> i64 {
    updated_ms.max(now_ms)
}

/// Why an append to session `id` that expected `expected` messages wrote
/// nothing, given the session as it is now (if it is there at all).
pub(crate) fn not_appended(id: &str, expected: u64, now: Option<Session>) -> StoreError {
    match now {
        None => StoreError::NoSession(id.to_string()),
        Some(session) => StoreError::Conflict(crate::refusal::thread_moved(id, expected, session.messages)),
    }
}

/// The count a thread of `expected` messages has once `added` more are
/// appended, and both as the database stores them.
pub(crate) fn counts(expected: u64, added: usize) -> StoreResult<(i64, i64)> {
    let too_large = || StoreError::Backend(format!("a thread of {expected} + {added} messages is too large to store"));
    let before = i64::try_from(expected).map_err(|_| too_large())?;
    let after = i64::try_from(added).ok().and_then(|n| before.checked_add(n)).ok_or_else(too_large)?;
    Ok((before, after))
}

/// Whether a run of this status is a prompt in progress: it may still
/// append to its session's thread, so it blocks another prompt and keeps
/// the session from expiring.
pub(crate) fn in_progress(status: RunStatus) -> bool {
    matches!(status, RunStatus::Queued | RunStatus::Running | RunStatus::Suspended)
}

/// Succeeds if `thread` appends to `run`'s own session.
pub(crate) fn check_own_session(run: &Run, thread: &ThreadAppend) -> StoreResult<()> {
    if run.session.as_deref() == Some(thread.session.as_str()) {
        return Ok(());
    }
    Err(StoreError::Conflict(crate::refusal::not_this_session(&run.id, &thread.session, run.session.as_deref())))
}

/// Succeeds if session `id` has no prompt in progress; `blocker` is its
/// oldest run in progress, if any (id and status).
pub(crate) fn check_no_prompt_in_progress(id: &str, blocker: Option<(String, RunStatus)>) -> StoreResult<()> {
    match blocker {
        None => Ok(()),
        Some((run, status)) => Err(StoreError::Conflict(crate::refusal::prompt_in_progress(id, &run, status))),
    }
}

/// Succeeds if `run` may be retried: it is a plain run, or its session has
/// no run created after it (`later`, the first such run, if any).
pub(crate) fn check_latest(run: &Run, later: Option<String>) -> StoreResult<()> {
    match (&run.session, later) {
        (Some(session), Some(later)) => {
            Err(StoreError::Conflict(crate::refusal::retry_would_fork(&run.id, session, &later)))
        }
        _ => Ok(()),
    }
}
