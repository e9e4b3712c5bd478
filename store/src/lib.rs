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
mod approvals;
mod batch;
mod error;
mod events;
mod ids;
mod jobs;
mod journal;
mod latency;
mod location;
mod memory;
mod postgres;
mod refusal;
mod relational;
mod rows;
mod runs;
mod schedules;
mod sessions;
mod signals;
mod sql;
mod sqlite;
mod tenants;
mod traits;
mod transition;
mod writer;

pub use anchor::{AnchorError, Anchored, Anchors, AuditAnchor, is_anchorable_tenant, read_anchors, verify_anchored};
pub use approvals::{Approval, Decision, PendingCall};
pub use batch::{Batch, NewChild, ThreadAppend};
pub use error::{StoreError, StoreResult};
pub use events::{NewEvent, StoredEvent};
pub use ids::now_ms;
pub use jobs::{
    Job, JobKind, JobLease, JobStatus, JobWatch, MAX_RETRY_DELAY_MS, NewJob, Retry, next_turn, retry_delay_ms,
};
pub use journal::Entry;
pub use location::Location;
pub use memory::MemoryStore;
pub use postgres::{PgDatabase, PgStore};
pub use relational::SqlStore;
pub use runs::{Claim, Lease, NewRun, Run, RunStatus, new_run_id, wake_token};
pub use schedules::{Firing, Missed, NewSchedule, RunTemplate, Schedule, new_schedule_id};
pub use sessions::{Session, new_session_id};
pub use signals::{
    MAX_SIGNAL_DATA_BYTES, MAX_SIGNAL_NAME_BYTES, MAX_SIGNALS_PER_RUN, NEVER_MS, RESERVED_SIGNAL_PREFIX, Signal,
    SignalWait, check_name_and_data, child_outcome, child_signal,
};
pub use sql::{JOBS_CHANNEL, SCHEMA_VERSION};
pub use sqlite::{ConnectionSettings, Settings, SqliteFile, SqliteStore};
pub use tenants::{
    AUDIT_GENESIS, ApiKey, AuditBreak, AuditEntry, NewApiKey, NewPlugin, NewTenant, PluginAcceptance, RunUsage, SignIn,
    StoredPlugin, Tenant, USAGE_PERIOD_MS, Usage, Waiting, audit_hash, is_sha256_hex, new_key_id, new_tenant_id,
    sha256_hex, usage_period, verify_audit,
};
pub use traits::{Backend, FireOutcome, Jobs, Ledger, Plugins, Runs, Schedules, Sessions, SignIns, Store, Tenants};
pub use transition::Transition;
pub use writer::WriteCounts;

/// Opens the store at `location`, creating it (and running migrations) if
/// needed.
pub async fn open(location: &Location) -> StoreResult<std::sync::Arc<dyn Store>> {
    match location {
        Location::Memory => Ok(std::sync::Arc::new(MemoryStore::new())),
        Location::Sqlite(path) => Ok(std::sync::Arc::new(SqliteStore::open(path).await?)),
        Location::Postgres(url) => Ok(std::sync::Arc::new(PgStore::open(url).await?)),
    }
}
