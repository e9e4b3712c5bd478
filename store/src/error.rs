//! Why a store operation failed: one error for every backend, whose
//! messages name the cause and the fix.

use crate::{Approval, Decision, PendingCall, RunStatus};

/// The result of a store operation.
pub type StoreResult<T> = Result<T, StoreError>;

/// Why a store operation failed. Every message names the cause and the fix.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The location is not a path or a URL the store understands.
    #[error("cannot use `{location}` as a store: {reason}")]
    BadLocation {
        /// What was given.
        location: String,
        /// Why it cannot be used, and what to give instead.
        reason: String,
    },
    /// The store could not be opened or created.
    #[error("cannot open the store at {location}: {reason}")]
    Open {
        /// Where.
        location: String,
        /// Why, and what to do.
        reason: String,
    },
    /// The file is not a nexo store, or it is damaged. Nothing was changed.
    #[error(
        "the store at {location} is damaged or is not a nexo database ({reason}); nothing was changed: \
         move it aside and restore a backup, or point --store at another file"
    )]
    Corrupt {
        /// Where.
        location: String,
        /// What the database engine said.
        reason: String,
    },
    /// The database was written by a newer nexo. Nothing was changed.
    #[error(
        "the store at {location} has schema version {found}, written by a newer nexo; this nexo understands \
         up to version {supported}: upgrade nexo, or point --store at another file (nothing was changed)"
    )]
    TooNew {
        /// Where.
        location: String,
        /// The database's version.
        found: i64,
        /// The newest this build understands.
        supported: i64,
    },
    /// The store's disk (or its database server's) has no space left for
    /// the write. What was written before stays intact.
    #[error(
        "the store at {location} is out of disk space, so nothing more could be written ({reason}); what was \
         written before is intact: free space on its volume, or grow it, then try again"
    )]
    Full {
        /// Where.
        location: String,
        /// What the database engine said.
        reason: String,
    },
    /// No such run.
    #[error("there is no run `{0}` in this store (`nexo runs list` shows the runs there are)")]
    NoRun(String),
    /// No such job.
    #[error("there is no job `{0}` in this store")]
    NoJob(String),
    /// No such session: it was never opened, or it was deleted or expired.
    #[error(
        "there is no session `{0}` in this store (it was deleted or expired, or never opened; \
         `nexo sessions list` shows the sessions there are)"
    )]
    NoSession(String),
    /// No such tenant.
    #[error("there is no tenant `{0}` in this store (`nexo tenant list` shows the tenants there are)")]
    NoTenant(String),
    /// No such schedule.
    #[error("there is no schedule `{0}` in this store (`nexo schedule list` shows the schedules there are)")]
    NoSchedule(String),
    /// No such API key.
    #[error("there is no API key `{0}` in this store (give the key's id, which starts with `k`, not the key itself)")]
    NoKey(String),
    /// The operation does not fit the run's state, for example resuming a
    /// finished run or claiming one another process owns.
    #[error("{0}")]
    Conflict(String),
    /// A decision named a call that is not the run's pending one: another
    /// decision or a resume moved the run on since the caller looked.
    /// Nothing was decided.
    #[error("{}", stale_approval(.run, .given, *.status, .pending.as_deref()))]
    StaleApproval {
        /// The run.
        run: String,
        /// The call the decision named.
        given: PendingCall,
        /// The run's status now.
        status: RunStatus,
        /// The approval the run waits on now, if any.
        pending: Option<Box<Approval>>,
    },
    /// A decision on a call that was already decided the other way: the
    /// first decision stands (the run may already go on by it). Nothing
    /// was decided.
    #[error(
        "call {seq} of run `{run}` was already {}, so it cannot be {} as well; nothing was decided. \
         `nexo runs show {run}` (or GET /v1/runs/{run}) shows its state", .decided.as_str(), .decided.other().as_str()
    )]
    AlreadyDecided {
        /// The run.
        run: String,
        /// The call's sequence number.
        seq: u64,
        /// The decision that stands.
        decided: Decision,
    },
    /// What the caller gave cannot be stored (a signal's name or data):
    /// why, and what would do. Nothing was written.
    #[error("{0}")]
    Invalid(String),
    /// A backend this build cannot use yet.
    #[error("{0}")]
    Unsupported(String),
    /// Anything else the database reported.
    #[error("the store failed: {0}")]
    Backend(String),
}

/// A decision for a call that is not the run's pending one.
fn stale_approval(id: &str, given: &PendingCall, status: RunStatus, pending: Option<&Approval>) -> String {
    let named = format!("call {} (args-hash {})", given.seq, short(&given.args_hash));
    let now = match pending {
        None => format!("run `{id}` has no pending approval (it is {status})"),
        Some(a) => {
            let decided = match a.decision {
                None => String::new(),
                Some(d) => format!(", already {}", d.as_str()),
            };
            format!(
                "run `{id}` now waits on call {} (args-hash {}), `{}` ({}){decided}",
                a.seq,
                short(&a.args_hash),
                a.tool,
                a.capability
            )
        }
    };
    format!(
        "the decision was for {named}, which is not the call the run waits on: {now}; nothing was decided. \
         `nexo runs show {id}` (or GET /v1/runs/{id}) shows the call it waits on: decide that one"
    )
}

fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}
