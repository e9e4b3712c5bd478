//! Tenants' uploaded plugins, bytes included.

use crate::{NewPlugin, PluginAcceptance, StoreResult, StoredPlugin};

/// The plugins tenants uploaded, content-addressed by `(tenant, sha256)`,
/// bytes included. Every method is one transaction.
#[async_trait::async_trait]
pub trait Plugins: Send + Sync {
    /// Stores a tenant's plugin, bytes and all, under `(tenant, sha256)`,
    /// unless it is there already: then the stored one is returned as it
    /// was (its first name, world and time) with `false`; `true` means it
    /// was stored now. Bytes that do not hash to `sha256` are a
    /// [`StoreError::Conflict`](crate::StoreError::Conflict); a tenant that is not there is
    /// [`StoreError::NoTenant`](crate::StoreError::NoTenant).
    async fn put_plugin(&self, plugin: NewPlugin) -> StoreResult<(StoredPlugin, bool)>;

    /// One of the tenant's plugins (never another tenant's, whatever the
    /// hash).
    async fn plugin(&self, tenant: &str, sha256: &str) -> StoreResult<Option<StoredPlugin>>;

    /// The bytes of one of the tenant's plugins.
    async fn plugin_bytes(&self, tenant: &str, sha256: &str) -> StoreResult<Option<Vec<u8>>>;

    /// The tenant's plugins, newest first (by `created_ms`, then by hash).
    async fn plugins(&self, tenant: &str) -> StoreResult<Vec<StoredPlugin>>;

    /// The tenant's acceptance of `reference`, if it has one.
    async fn plugin_acceptance(&self, tenant: &str, reference: &str) -> StoreResult<Option<PluginAcceptance>>;

    /// Records `acceptance` if the tenant's acceptance of its reference is
    /// still of digest `was` (`None`: there is none yet), with `audit` (a
    /// kind and its data) appended to the tenant's audit log in the same
    /// write, and answers whether it did: `false` means another decision
    /// came first (nothing is written), and the caller decides again on
    /// what that one recorded. A tenant that is not there is
    /// [`StoreError::NoTenant`](crate::StoreError::NoTenant).
    async fn record_plugin_acceptance(
        &self,
        acceptance: PluginAcceptance,
        was: Option<&str>,
        audit: (&str, &serde_json::Value),
    ) -> StoreResult<bool>;
}
