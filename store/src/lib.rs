//! The store: where nexo keeps durable runs.
//!
//! One trait per concept ([`Runs`], [`Jobs`], [`Sessions`], [`Tenants`],
//! [`Plugins`], [`Ledger`], and the console's [`SignIns`]), all of them
//! together [`Store`], with three backends: [`MemoryStore`] (ephemeral
//! runs, tests), [`SqliteStore`], the embedded default, and [`PgStore`],
//! PostgreSQL, which several processes on several machines can share. The
//! two relational backends are one store, [`SqlStore`], generic in its
//! dialect: the same code runs the same SQL, and only what the engines do
//! differently (locks, transactions, errors, a few statements) is each
//! one's own. All three
//! follow the same rules and refuse the same things in the same words
//! (`tests/behaviour.rs` runs one suite against each). A store holds, per
//! run:
//!
//! - the run's record ([`Run`]): agent, component hash, input, status, the
//!   operator's grant (never a secret), result or error, the owner's lease;
//! - its events ([`StoredEvent`]);
//! - its named checkpoints (JSON values);
//! - its journal of host calls ([`Entry`]), which a resume replays;
//! - its pending approval ([`Approval`]), if it waits for one;
//! - its background jobs ([`Job`]): a queue that workers claim with a
//!   fenced lease ([`Jobs::claim_job`]);
//! - the session it is a prompt of, if any.
//!
//! And per session ([`Session`]), a remembering instance of an agent
//! addressed by `(agent, instance)`: its thread, an ordered list of JSON
//! messages that a prompt appends to only if no other prompt of the session
//! appended first ([`Sessions::append_thread`]). A session has one prompt in
//! progress at a time ([`Runs::create_run`]), a failed prompt is retried
//! only while it is the session's latest ([`Runs::claim`]), and a prompt
//! appends its exchange together with its end ([`Batch::thread`]), so the
//! thread stays one line of turns. Deleting or expiring a session deletes
//! its thread and every run linked to it; expiry passes over a session
//! with a prompt in progress ([`Sessions::expire_sessions`]).
//!
//! And per tenant of `nexo serve` ([`Tenant`]), one customer of a serving
//! node, with the operator's policy for its runs and whether it is
//! disabled:
//!
//! - its API keys ([`ApiKey`]), only as SHA-256 hashes, revoked and never
//!   deleted; a key of no tenant is an operator's admin key;
//! - the plugins it uploaded ([`StoredPlugin`]), content-addressed by
//!   `(tenant, sha256)`, bytes included, so every node sharing the store
//!   loads them and no tenant sees another's;
//! - the runs it started ([`Run::tenant`], [`Tenants::tenant_runs`]);
//! - its audit log ([`AuditEntry`]), append-only and hash-chained, with its
//!   head on the tenant's row: appends are serialized per tenant, and
//!   [`verify_audit`] finds an edited, removed, reordered or relinked entry,
//!   and [`verify_anchored`] a log cut short against the heads an anchor
//!   file outside the database holds ([`AuditAnchor`]);
//! - its usage ([`Usage`]): runs, tokens, CPU ticks and egress bytes added
//!   up per UTC hour.
//!
//! Every write is one [`Batch`] committed atomically and durably: when
//! [`Runs::commit`] returns, the batch survives a crash or a power loss.

mod anchor;
mod jobs;
mod memory;
mod postgres;
mod refusal;
mod relational;
mod rows;
mod sessions;
mod sql;
mod sqlite;
mod tenants;
mod traits;
mod writer;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The first string after every string that starts with `prefix`, in byte
/// order (`"t1/"` gives `"t10"`): the end of a prefix's range in an index.
/// `None` if there is none (an empty prefix, or one of `char::MAX`s).
pub(crate) fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        // The next scalar value, past the surrogates.
        let next = (u32::from(last) + 1..=u32::from(char::MAX)).find_map(char::from_u32);
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

pub use anchor::{AnchorError, Anchored, Anchors, AuditAnchor, is_anchorable_tenant, read_anchors, verify_anchored};
pub use jobs::{Job, JobKind, JobLease, JobStatus, MAX_RETRY_DELAY_MS, NewJob, Retry, next_turn, retry_delay_ms};
pub use memory::MemoryStore;
pub use postgres::{PgDatabase, PgStore};
pub use relational::SqlStore;
pub use sessions::{Session, new_session_id};
pub use sqlite::{ConnectionSettings, Settings, SqliteFile, SqliteStore};
pub use tenants::{
    AUDIT_GENESIS, ApiKey, AuditBreak, AuditEntry, NewApiKey, NewPlugin, NewTenant, RunUsage, SignIn, StoredPlugin,
    Tenant, USAGE_PERIOD_MS, Usage, audit_hash, is_sha256_hex, new_key_id, new_tenant_id, sha256_hex, usage_period,
    verify_audit,
};
pub use traits::{Backend, Jobs, Ledger, Plugins, Runs, Sessions, SignIns, Store, Tenants};
pub use writer::WriteCounts;

/// The schema version this build writes. A database with a newer version
/// is refused ([`StoreError::TooNew`]).
pub const SCHEMA_VERSION: i64 = 7;

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
    #[error("{}", refusal::stale_approval(.run, .given, *.status, .pending.as_deref()))]
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
    /// A backend this build cannot use yet.
    #[error("{0}")]
    Unsupported(String),
    /// Anything else the database reported.
    #[error("the store failed: {0}")]
    Backend(String),
}

/// Where a store lives: `--store`, `NEXO_STORE` or the config file's
/// `store` key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// An SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL URL (`postgres://…`).
    Postgres(String),
    /// Nothing on disk: the run is forgotten when the process ends.
    Memory,
}

impl Location {
    /// Parses a path, a `sqlite://PATH` URL or a `postgres://` URL.
    pub fn parse(text: &str) -> StoreResult<Location> {
        let bad = |reason: &str| StoreError::BadLocation { location: text.to_string(), reason: reason.to_string() };
        if text.trim().is_empty() {
            return Err(bad("it is empty; give a file path, `sqlite://PATH` or `postgres://…`"));
        }
        if let Some(path) = text.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err(bad(
                    "`sqlite://` needs a file path after it, for example `sqlite:///var/lib/nexo/nexo.db`",
                ));
            }
            return Ok(Location::Sqlite(PathBuf::from(path)));
        }
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return Ok(Location::Postgres(text.to_string()));
        }
        if let Some((scheme, _)) = text.split_once("://") {
            return Err(bad(&format!(
                "the scheme `{scheme}` is not a store nexo knows; use a file path, `sqlite://PATH` or `postgres://…`"
            )));
        }
        Ok(Location::Sqlite(PathBuf::from(text)))
    }

    /// The default: `nexo.db` in the user's data directory
    /// (`$XDG_DATA_HOME/nexo`, else `~/.local/share/nexo`).
    pub fn default_path() -> StoreResult<PathBuf> {
        let base = match std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
            Some(dir) => PathBuf::from(dir),
            None => match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
                Some(home) => Path::new(&home).join(".local/share"),
                None => {
                    return Err(StoreError::BadLocation {
                        location: "(default)".into(),
                        reason: "neither XDG_DATA_HOME nor HOME is set; pass --store PATH or set NEXO_STORE".into(),
                    });
                }
            },
        };
        Ok(base.join("nexo").join("nexo.db"))
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Sqlite(path) => write!(f, "{}", path.display()),
            // A URL may carry a password: show only what comes after the `@`.
            Location::Postgres(url) => match url.rsplit_once('@') {
                Some((_, host)) => write!(f, "postgres://…@{host}"),
                None => f.write_str(url),
            },
            Location::Memory => f.write_str("(memory)"),
        }
    }
}

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
    /// ([`StoreError::NoSession`]); `None` for a plain run.
    pub session: Option<String>,
    /// The tenant that started the run through `nexo serve`, which must
    /// exist ([`StoreError::NoTenant`]); `None` for a run of the CLI.
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
            resume_key: None,
            resume_input: None,
            result: None,
            error: None,
            created_ms: self.created_ms,
            updated_ms: self.created_ms,
            lease: self.lease,
            session: self.session,
            tenant: self.tenant,
        }
    }
}

impl Transition {
    /// Moves `run` out of `running` as this transition says, at `now_ms`:
    /// the one rule every backend applies. Answers the approval a
    /// suspension waits on, if any.
    pub(crate) fn apply(self, run: &mut Run, now_ms: i64) -> Option<Approval> {
        run.lease = None;
        run.updated_ms = now_ms;
        match self {
            Transition::Finish { status, result, error } => {
                run.status = status;
                run.result = result;
                run.error = error;
                run.suspend_reason = None;
                run.resume_key = None;
                None
            }
            Transition::Suspend { reason, resume_key, approval } => {
                run.status = RunStatus::Suspended;
                run.suspend_reason = Some(reason);
                run.resume_key = resume_key;
                approval
            }
            Transition::Requeue { error } => {
                run.status = RunStatus::Queued;
                run.result = None;
                run.error = Some(error);
                run.suspend_reason = None;
                run.resume_key = None;
                None
            }
        }
    }
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
}

/// One journaled host call. Sequence numbers are assigned when a call
/// starts; a call that makes calls of its own (a prompt runs the model and
/// tools) ends after them, so `end` is the next sequence number after its
/// last inner call. A replay that answers the call skips to `end`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The call's sequence number, from 0.
    pub seq: u64,
    /// The sequence number after the call and every call it made.
    pub end: u64,
    /// The interface, such as `nexo:plugin/tools` or `wasi:clocks`.
    pub interface: String,
    /// The function, such as `read-file`.
    pub function: String,
    /// The SHA-256 of the call's arguments, as lowercase hex.
    pub args_hash: String,
    /// The call's result, as JSON text.
    pub result: String,
}

/// An event to append.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    /// `tool_call`, `tool_result`, `checkpoint`, `suspended`, `resumed`,
    /// `done` or another kind the host defines.
    pub kind: String,
    /// The event's fields.
    pub data: Value,
    /// When it happened.
    pub at_ms: i64,
}

/// A stored event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredEvent {
    /// Its position in the store, increasing (for `--follow` and SSE
    /// resumption).
    pub id: i64,
    /// The run.
    pub run: String,
    /// Its kind.
    pub kind: String,
    /// Its fields.
    pub data: Value,
    /// When it happened.
    pub at_ms: i64,
}

/// An operator's answer to a pending approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// The effect may happen.
    Approved,
    /// The call fails with a tool error; the run goes on.
    Denied,
}

impl Decision {
    /// The other decision.
    pub fn other(self) -> Decision {
        match self {
            Decision::Approved => Decision::Denied,
            Decision::Denied => Decision::Approved,
        }
    }

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Approved => "approved",
            Decision::Denied => "denied",
        }
    }

    /// Parses a stored or typed name.
    pub fn parse(name: &str) -> Option<Decision> {
        [Decision::Approved, Decision::Denied].into_iter().find(|d| d.as_str() == name)
    }
}

/// A gated call waiting for an operator's decision. A decision binds to
/// exactly this call: its sequence number, capability, tool, argument hash
/// and component.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Approval {
    /// The call's sequence number in the journal.
    pub seq: u64,
    /// The capability the gate asked for.
    pub capability: String,
    /// The tool, as the model or guest named it.
    pub tool: String,
    /// The call's arguments.
    pub arguments: Value,
    /// The SHA-256 of the arguments.
    pub args_hash: String,
    /// The component that made the call.
    pub component_sha256: String,
    /// The decision, once made.
    pub decision: Option<Decision>,
    /// When it was requested.
    pub created_ms: i64,
}

impl Approval {
    /// The call this approval is for, as a decision names it.
    pub fn call(&self) -> PendingCall {
        PendingCall { seq: self.seq, args_hash: self.args_hash.clone() }
    }
}

/// The call a decision is for, as whoever decides was shown it: the
/// pending approval's sequence number and argument hash. A decision that
/// names another call than the pending one decides nothing
/// ([`StoreError::StaleApproval`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingCall {
    /// The call's sequence number ([`Approval::seq`]).
    pub seq: u64,
    /// The SHA-256 of its arguments ([`Approval::args_hash`]).
    pub args_hash: String,
}

/// Writes that commit together, atomically and durably.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Batch {
    /// Journal entries, in sequence order. A sequence number the run's
    /// journal already has refuses the whole batch
    /// ([`StoreError::Conflict`]): a call is journaled once.
    pub journal: Vec<Entry>,
    /// Events, in order.
    pub events: Vec<NewEvent>,
    /// Checkpoints: name and JSON value. A name already present is kept as
    /// it was (a checkpoint is written once).
    pub checkpoints: Vec<(String, Value)>,
    /// What a session prompt adds to its session's thread, in the same
    /// transaction: a prompt's exchange lands with the run's end, or not at
    /// all. It is checked as [`Sessions::append_thread`] checks, and a refusal
    /// (see [`ThreadAppend`]) refuses the whole batch.
    pub thread: Option<ThreadAppend>,
}

impl Batch {
    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.journal.is_empty() && self.events.is_empty() && self.checkpoints.is_empty() && self.thread.is_none()
    }
}

/// Messages a run of a session appends to the session's thread.
///
/// The session must be the run's own ([`StoreError::Conflict`] otherwise),
/// and its thread must still hold `expected` messages: if another prompt
/// moved it on, the whole batch is refused ([`StoreError::Conflict`]). A
/// deleted session is [`StoreError::NoSession`]. The append touches the
/// session's `updated_ms` as [`Sessions::append_thread`] does, with the
/// store's clock.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadAppend {
    /// The session's id.
    pub session: String,
    /// How many messages the thread held when the prompt started.
    pub expected: u64,
    /// The messages to append, in order.
    pub messages: Vec<Value>,
}

/// How a run leaves `running`.
#[derive(Debug, Clone, PartialEq)]
pub enum Transition {
    /// It finished: `done` with its answer, or `failed` with its error. A
    /// status that is not final is a [`StoreError::Conflict`]. A finished
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
}

/// Opens the store at `location`, creating it (and running migrations) if
/// needed.
pub async fn open(location: &Location) -> StoreResult<std::sync::Arc<dyn Store>> {
    match location {
        Location::Memory => Ok(std::sync::Arc::new(MemoryStore::new())),
        Location::Sqlite(path) => Ok(std::sync::Arc::new(SqliteStore::open(path).await?)),
        Location::Postgres(url) => Ok(std::sync::Arc::new(PgStore::open(url).await?)),
    }
}

/// A new run id: `r` then 26 characters, sortable by creation time.
pub fn new_run_id() -> String {
    new_id('r')
}

/// `prefix` then 26 characters: 10 of the time in milliseconds, 16 random.
fn new_id(prefix: char) -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    const ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0) as u64;
    let mut random = [0u8; 10];
    fill_random(&mut random);
    let mut id = String::with_capacity(27);
    id.push(prefix);
    for i in (0..10).rev() {
        id.push(ALPHABET[((now >> (i * 5)) & 31) as usize] as char);
    }
    let mut bits: u128 = 0;
    for b in random {
        bits = (bits << 8) | u128::from(b);
    }
    for i in (0..16).rev() {
        id.push(ALPHABET[((bits >> (i * 5)) & 31) as usize] as char);
    }
    id
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

fn fill_random(buf: &mut [u8]) {
    // The operating system's random source does not fail on a working
    // system; std's own hash maps panic too when it does.
    if let Err(e) = getrandom::fill(buf) {
        panic!("the operating system's random source failed: {e}");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_prefix_range_ends_at_the_next_string() {
        assert_eq!(super::prefix_end("t1/").as_deref(), Some("t10"));
        assert_eq!(super::prefix_end("a✓").as_deref(), Some("a✔"));
        assert_eq!(super::prefix_end("a\u{d7ff}").as_deref(), Some("a\u{e000}"), "past the surrogates");
        assert_eq!(super::prefix_end("a\u{10ffff}").as_deref(), Some("b"));
        assert_eq!(super::prefix_end(""), None);
        assert_eq!(super::prefix_end("\u{10ffff}"), None);
    }
}
