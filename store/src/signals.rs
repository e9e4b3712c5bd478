//! Signals: named messages for a run, kept until a `wait-signal` of the
//! run takes them, in the order they were sent.
//!
//! A signal sent while the run waits for its name makes the run's wake due
//! at once; one sent before the wait is kept for it (the suspension finds
//! it and wakes at once); one sent to a finished run is refused. Signals
//! are never changed or deleted while their run lives: which ones a run
//! took is the journal's to say, so a replay takes the same ones.

use serde::Serialize;

use crate::{Run, RunStatus, StoreError};

/// The longest signal name, in bytes.
pub const MAX_SIGNAL_NAME_BYTES: usize = 200;

/// The largest signal data (JSON text), in bytes.
pub const MAX_SIGNAL_DATA_BYTES: usize = 64 * 1024;

/// How many signals one run may be sent: a sender cannot fill the store
/// with one run's signals.
pub const MAX_SIGNALS_PER_RUN: i64 = 1000;

/// When the wake of a wait with no timeout is due: never, until a signal
/// makes it due.
pub const NEVER_MS: i64 = i64::MAX;

/// A signal sent to a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Signal {
    /// Its id, increasing in the order signals were sent.
    pub id: i64,
    /// The run it was sent to.
    pub run: String,
    /// Its name.
    pub name: String,
    /// Its data, JSON text.
    pub data: String,
    /// When it was sent.
    pub sent_ms: i64,
}

/// What a run suspended by `wait-signal` waits for: a signal of `name`
/// sent after the one with id `after` (the last of that name it took; 0
/// for none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignalWait {
    /// The signal's name.
    pub name: String,
    /// The id of the last signal of that name the run took (0 for none).
    pub after: i64,
}

/// Whether a signal of `name` with `data` may be sent to `run`: the one
/// rule every backend applies, given how many signals the run has.
pub(crate) fn check_signal(run: &Run, name: &str, data: &str, sent: i64) -> Result<(), StoreError> {
    if run.status.is_final() {
        return Err(StoreError::Conflict(format!(
            "run `{}` has finished ({}), so no signal can reach it; a signal is for a run that is queued, running or \
             suspended",
            run.id,
            run.status.as_str()
        )));
    }
    if sent >= MAX_SIGNALS_PER_RUN {
        return Err(StoreError::Conflict(format!(
            "run `{}` has been sent {sent} signals, the most one run may be sent; it can take no more",
            run.id
        )));
    }
    if name.starts_with(RESERVED_SIGNAL_PREFIX) {
        return Err(StoreError::Invalid(format!(
            "signal names starting with `{RESERVED_SIGNAL_PREFIX}` are the host's own (a child run's end is one); \
             choose another name"
        )));
    }
    check_name_and_data(name, data)
}

/// The prefix of the signals only the host sends: no one else can send
/// one, so a child's end cannot be forged.
pub const RESERVED_SIGNAL_PREFIX: &str = "nexo.";

/// The name of the signal a child run's end sends its parent.
pub fn child_signal(child: &str) -> String {
    format!("{RESERVED_SIGNAL_PREFIX}child.{child}")
}

/// Why a child run was cancelled with its parent `parent`.
pub(crate) fn cancelled_with_parent(parent: &str) -> String {
    format!("its parent run `{parent}` was cancelled")
}

/// How a child run ended, as its end's signal carries it to its parent:
/// `{"run", "status", "result", "error"}`.
pub fn child_outcome(child: &Run) -> String {
    serde_json::json!({
        "run": child.id,
        "status": child.status.as_str(),
        "result": child.result,
        "error": child.error,
    })
    .to_string()
}

/// A signal's name and data, or why they cannot be sent.
pub fn check_name_and_data(name: &str, data: &str) -> Result<(), StoreError> {
    let why = if name.is_empty() {
        "a signal needs a name".to_string()
    } else if name.len() > MAX_SIGNAL_NAME_BYTES {
        format!("a signal's name is at most {MAX_SIGNAL_NAME_BYTES} bytes; this one is {}", name.len())
    } else if name.chars().any(char::is_control) {
        "a signal's name may not hold control characters".to_string()
    } else if data.len() > MAX_SIGNAL_DATA_BYTES {
        format!("a signal's data is at most {MAX_SIGNAL_DATA_BYTES} bytes; this one is {}", data.len())
    } else if serde_json::from_str::<serde::de::IgnoredAny>(data).is_err() {
        "a signal's data must be JSON (give `null` for none)".to_string()
    } else {
        return Ok(());
    };
    Err(StoreError::Invalid(why))
}

/// Whether `run` is suspended waiting for a signal of `name`: a signal of
/// that name makes its wake due now.
pub(crate) fn waits_for(run: &Run, name: &str) -> bool {
    run.status == RunStatus::Suspended && run.signal_wait.as_deref() == Some(name)
}
