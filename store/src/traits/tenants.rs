//! Tenants of `nexo serve` with their API keys, and the runs they hold.

use serde_json::Value;

use crate::{ApiKey, NewApiKey, NewTenant, Run, RunStatus, StoreResult, Tenant, Waiting};

/// The tenants of `nexo serve`, with their API keys and the runs they
/// started. Every method is one transaction.
#[async_trait::async_trait]
pub trait Tenants: Send + Sync {
    /// Records a new tenant, enabled. A taken id, or a name another tenant
    /// has, is a [`StoreError::Conflict`](crate::StoreError::Conflict) (the id is checked first).
    async fn create_tenant(&self, tenant: NewTenant) -> StoreResult<Tenant>;

    /// One tenant, by id.
    async fn tenant(&self, id: &str) -> StoreResult<Option<Tenant>>;

    /// One tenant, by name.
    async fn tenant_by_name(&self, name: &str) -> StoreResult<Option<Tenant>>;

    /// Every tenant, by name (byte order).
    async fn tenants(&self) -> StoreResult<Vec<Tenant>>;

    /// Replaces the tenant's policy and sets whether it is disabled, each
    /// only if given, and touches `updated_ms` (which never goes back, as a
    /// session's does not); returns the tenant as it now is. One statement.
    /// No such tenant is [`StoreError::NoTenant`](crate::StoreError::NoTenant).
    async fn update_tenant(
        &self,
        id: &str,
        policy: Option<Value>,
        disabled: Option<bool>,
        now_ms: i64,
    ) -> StoreResult<Tenant>;

    /// Records a new API key. Its hash must be a SHA-256 in lowercase hex
    /// ([`sha256_hex`](crate::sha256_hex)), so that a key is never stored as itself; a taken
    /// id or a hash another key has is a [`StoreError::Conflict`](crate::StoreError::Conflict) (in that
    /// order, and before the tenant is looked at). A key of a tenant that
    /// is not there is [`StoreError::NoTenant`](crate::StoreError::NoTenant).
    async fn create_key(&self, key: NewApiKey) -> StoreResult<ApiKey>;

    /// The key with this hash, revoked or not: the caller checks
    /// [`ApiKey::revoked_ms`] (and the tenant's
    /// [`Tenant::disabled`]).
    async fn key_by_hash(&self, hash: &str) -> StoreResult<Option<ApiKey>>;

    /// The keys of one tenant, or with `None` the admin keys, oldest first
    /// (by `created_ms`, then by id), revoked ones included.
    async fn keys(&self, tenant: Option<&str>) -> StoreResult<Vec<ApiKey>>;

    /// Revokes a key at `now_ms` and returns it. Revoking a revoked key
    /// keeps its first `revoked_ms`. No such key is [`StoreError::NoKey`](crate::StoreError::NoKey).
    async fn revoke_key(&self, id: &str, now_ms: i64) -> StoreResult<ApiKey>;

    /// The tenant's runs, as [`Runs::runs`](crate::Runs::runs) lists runs: newest first,
    /// optionally of one status, at most `limit`.
    async fn tenant_runs(&self, tenant: &str, status: Option<RunStatus>, limit: usize) -> StoreResult<Vec<Run>>;

    /// How many of the tenant's runs are running or may run without anyone
    /// deciding anything: `queued` or `running` ones, and `suspended` or
    /// `failed` ones with a queued or running job (a resume, a retry), and
    /// any other with a running job (a cancelled run's guest holds its slot
    /// until its pass ends).
    async fn live_runs(&self, tenant: &str) -> StoreResult<u64>;

    /// How many of the tenant's runs are running now: `running` ones, and
    /// any other with a running job. Unlike [`Tenants::live_runs`], runs that
    /// only wait in the queue are not counted: a claim is held only by runs
    /// that hold a worker.
    async fn running_runs(&self, tenant: &str) -> StoreResult<u64>;

    /// Per tenant with anything waiting, its queued jobs and its runs
    /// suspended on an undecided approval, in tenant order: two grouped
    /// counts (an indexed scan of the queued jobs, and one of the pending
    /// approvals), whatever the number of finished runs.
    async fn waiting(&self) -> StoreResult<Vec<Waiting>>;
}
