//! The audit log and usage: what a tenant did and used, and what a run used.

use serde_json::Value;

use crate::{AuditEntry, RunUsage, StoreResult, Usage};

/// What is accounted for: each tenant's hash-chained audit log and its
/// usage per hour, and each run's usage over all its passes. Every method
/// is one transaction.
#[async_trait::async_trait]
pub trait Ledger: Send + Sync {
    /// Appends an entry to the tenant's audit log and returns it: its
    /// sequence number is the head's plus one, its `prev` the head's hash
    /// and its hash [`audit_hash`](crate::audit_hash) of them and the entry (`data` as
    /// `serde_json` writes it); the tenant's row then records it as the
    /// head. Read, insert and head are one transaction, serialized per
    /// tenant (on PostgreSQL the tenant's row is locked first; on SQLite
    /// the write lock is taken first), so concurrent appends in any number
    /// of processes make one chain without gaps. A tenant that is not there
    /// is [`StoreError::NoTenant`](crate::StoreError::NoTenant). There is no way to change or delete an
    /// entry.
    async fn append_audit(&self, tenant: &str, kind: &str, data: &Value, at_ms: i64) -> StoreResult<AuditEntry>;

    /// The tenant's audit entries with a sequence number above `after_seq`,
    /// in order, at most `limit`.
    async fn audit(&self, tenant: &str, after_seq: u64, limit: usize) -> StoreResult<Vec<AuditEntry>>;

    /// The last sequence number and hash of the tenant's audit log, as the
    /// tenant's row records them (what [`verify_audit`](crate::verify_audit) checks the log
    /// against); `None` if it has no entries (or there is no such tenant).
    async fn audit_head(&self, tenant: &str) -> StoreResult<Option<(u64, String)>>;

    /// Every tenant's audit head, `(tenant, seq, hash)` (`0` and
    /// [`AUDIT_GENESIS`](crate::AUDIT_GENESIS) for an empty log), ordered by tenant: what an anchor
    /// file ([`AuditAnchor`](crate::AuditAnchor)) records.
    async fn audit_heads(&self) -> StoreResult<Vec<(String, u64, String)>>;

    /// Adds to the tenant's usage in the hour that holds `at_ms`
    /// ([`usage_period`](crate::usage_period)), creating the hour's counters at zero if needed:
    /// one upsert, so concurrent adds in any number of processes all count.
    /// A tenant that is not there is [`StoreError::NoTenant`](crate::StoreError::NoTenant).
    /// `runs` counts starts; `used` what passes used.
    async fn add_usage(&self, tenant: &str, at_ms: i64, runs: u64, used: RunUsage) -> StoreResult<()>;

    /// The tenant's usage per hour, from the hour that holds `since_ms` on,
    /// oldest first. Hours with nothing added are not listed.
    async fn usage(&self, tenant: &str, since_ms: i64) -> StoreResult<Vec<Usage>>;

    /// Adds `used` to what the run has used over all its passes, creating
    /// its counters at zero if needed: one upsert, so concurrent adds in
    /// any number of processes all count. A run that is not there is
    /// [`StoreError::NoRun`](crate::StoreError::NoRun); the counters go when the run does.
    async fn add_run_usage(&self, run: &str, used: RunUsage) -> StoreResult<()>;

    /// What the run has used over all its passes; zeros if nothing was
    /// added (or there is no such run).
    async fn run_usage(&self, run: &str) -> StoreResult<RunUsage>;
}
