//! Tenants and their API keys: what `nexo tenant …` and the admin API both
//! do, each change recorded in the tenant's audit log.
//!
//! A key is shown once, when it is made: the store keeps only its SHA-256,
//! so a leaked database holds no usable key.

use nexo_store::{ApiKey, NewApiKey, NewTenant, Store, StoreError, Tenant};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::policy::Policy;

/// Every key starts with this, so a secret scanner can find a leaked one.
pub const KEY_PREFIX: &str = "nexo_sk_";

/// A new random key (256 bits) and the hash the store keeps of it.
pub fn new_key() -> (String, String) {
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut bytes = [0u8; 32];
    rand::fill(&mut bytes);
    let mut key = String::from(KEY_PREFIX);
    let mut bits: u32 = 0;
    let mut held = 0;
    for b in bytes {
        bits = (bits << 8) | u32::from(b);
        held += 8;
        while held >= 5 {
            held -= 5;
            key.push(ALPHABET[((bits >> held) & 31) as usize] as char);
        }
    }
    if held > 0 {
        key.push(ALPHABET[((bits << (5 - held)) & 31) as usize] as char);
    }
    let hash = key_hash(&key);
    (key, hash)
}

/// The SHA-256 of a key, as the store keeps it.
pub fn key_hash(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// Why a tenant operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum TenantError {
    /// The name is not one a tenant can have.
    #[error(
        "`{0}` is not a tenant name: use 1 to 64 lowercase letters, digits, `-` or `_`, starting with a letter or digit"
    )]
    BadName(String),
    /// The policy does not parse or names what the operator has not configured.
    #[error("the policy is refused: {0}")]
    BadPolicy(String),
    /// No tenant by that name.
    #[error("there is no tenant `{0}` (`nexo tenant list` shows the tenants there are)")]
    NoTenant(String),
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Checks a tenant name: short, lowercase, safe in paths and URLs.
pub fn check_name(name: &str) -> Result<(), TenantError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && name.as_bytes()[0].is_ascii_alphanumeric();
    if ok { Ok(()) } else { Err(TenantError::BadName(name.to_string())) }
}

/// Finds a tenant by name, or by id.
pub async fn find(store: &dyn Store, name_or_id: &str) -> Result<Tenant, TenantError> {
    if let Some(t) = store.tenant_by_name(name_or_id).await? {
        return Ok(t);
    }
    store.tenant(name_or_id).await?.ok_or_else(|| TenantError::NoTenant(name_or_id.to_string()))
}

/// Creates a tenant with `policy` and its first key; returns the key, which
/// is never shown again.
pub async fn create(store: &dyn Store, name: &str, policy: &Policy) -> Result<(Tenant, ApiKey, String), TenantError> {
    check_name(name)?;
    let now = nexo_store::now_ms();
    let policy = serde_json::to_value(policy).map_err(|e| TenantError::BadPolicy(e.to_string()))?;
    let tenant = store
        .create_tenant(NewTenant {
            id: nexo_store::new_tenant_id(),
            name: name.to_string(),
            policy: policy.clone(),
            created_ms: now,
        })
        .await?;
    store.append_audit(&tenant.id, "tenant.created", &json!({"name": name, "policy": policy}), now).await?;
    let (key, secret) = add_key(store, &tenant).await?;
    Ok((tenant, key, secret))
}

/// A new key for `tenant`; returns it with the key itself, shown once.
pub async fn add_key(store: &dyn Store, tenant: &Tenant) -> Result<(ApiKey, String), TenantError> {
    let (secret, hash) = new_key();
    let now = nexo_store::now_ms();
    let key = store
        .create_key(NewApiKey { id: nexo_store::new_key_id(), tenant: Some(tenant.id.clone()), hash, created_ms: now })
        .await?;
    // The key's id, never the key or its hash.
    store.append_audit(&tenant.id, "key.created", &json!({"key": key.id}), now).await?;
    Ok((key, secret))
}

/// A new operator (admin) key; returns it with the key itself, shown once.
pub async fn add_admin_key(store: &dyn Store) -> Result<(ApiKey, String), TenantError> {
    let (secret, hash) = new_key();
    let key = store
        .create_key(NewApiKey { id: nexo_store::new_key_id(), tenant: None, hash, created_ms: nexo_store::now_ms() })
        .await?;
    Ok((key, secret))
}

/// Revokes the key `id`; a tenant's revocation is audited.
pub async fn revoke_key(store: &dyn Store, id: &str) -> Result<ApiKey, TenantError> {
    let now = nexo_store::now_ms();
    let key = store.revoke_key(id, now).await?;
    if let Some(tenant) = &key.tenant {
        store.append_audit(tenant, "key.revoked", &json!({"key": key.id}), now).await?;
    }
    Ok(key)
}

/// Replaces the tenant's policy.
pub async fn set_policy(store: &dyn Store, tenant: &Tenant, policy: &Policy) -> Result<Tenant, TenantError> {
    let now = nexo_store::now_ms();
    let value = serde_json::to_value(policy).map_err(|e| TenantError::BadPolicy(e.to_string()))?;
    let updated = store.update_tenant(&tenant.id, Some(value.clone()), None, now).await?;
    store.append_audit(&tenant.id, "policy.changed", &json!({"from": tenant.policy, "to": value}), now).await?;
    Ok(updated)
}

/// Disables or enables the tenant: a disabled tenant's keys are refused.
pub async fn set_disabled(store: &dyn Store, tenant: &Tenant, disabled: bool) -> Result<Tenant, TenantError> {
    let now = nexo_store::now_ms();
    let updated = store.update_tenant(&tenant.id, None, Some(disabled), now).await?;
    let kind = if disabled { "tenant.disabled" } else { "tenant.enabled" };
    store.append_audit(&tenant.id, kind, &json!({}), now).await?;
    Ok(updated)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_long_random_and_hashed() {
        let (a, ha) = new_key();
        let (b, hb) = new_key();
        assert!(a.starts_with(KEY_PREFIX));
        assert_eq!(a.len(), KEY_PREFIX.len() + 52, "256 bits in base32");
        assert_ne!(a, b);
        assert_ne!(ha, hb);
        assert_eq!(ha, key_hash(&a));
        assert!(!ha.contains(&a[KEY_PREFIX.len()..]));
    }

    #[test]
    fn names_are_checked() {
        for ok in ["acme", "a", "team-7_b"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Acme", "-x", "a/b", "a b", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }
}
