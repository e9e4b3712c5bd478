//! One lock per tenant: a tenant's costly work (a compile, storing an
//! upload) waits behind its own, never behind another tenant's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::OwnedMutexGuard;

/// A lock per tenant, made on first use and forgotten once nobody holds or
/// waits for it.
#[derive(Default)]
pub struct TenantLocks {
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl TenantLocks {
    /// Waits for `tenant`'s lock. The guard owns it, so it can move into a
    /// task that outlives the request (a compile goes on after its client
    /// leaves, and holds the tenant's place until it ends).
    pub async fn lock(&self, tenant: &str) -> OwnedMutexGuard<()> {
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(PoisonError::into_inner);
            // A lock only the map holds is idle: the map stays as small as
            // the tenants at work.
            locks.retain(|_, l| Arc::strong_count(l) > 1);
            locks.entry(tenant.to_string()).or_default().clone()
        };
        lock.lock_owned().await
    }

    /// How many tenants hold or wait for a lock.
    #[cfg(test)]
    fn busy(&self) -> usize {
        let locks = self.locks.lock().unwrap_or_else(PoisonError::into_inner);
        locks.values().filter(|l| Arc::strong_count(l) > 1).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_tenant_waits_for_its_own_lock_only() {
        let locks = TenantLocks::default();
        let held = locks.lock("a").await;
        let again = tokio::time::timeout(Duration::from_millis(50), locks.lock("a")).await;
        assert!(again.is_err(), "a second lock of one tenant waits");
        let other = tokio::time::timeout(Duration::from_secs(5), locks.lock("b")).await;
        assert!(other.is_ok(), "another tenant does not wait");
        drop(other);
        drop(held);
        let after = tokio::time::timeout(Duration::from_secs(5), locks.lock("a")).await;
        assert!(after.is_ok(), "the lock is free once its guard drops");
        drop(after);
        let _touch = locks.lock("c").await;
        assert_eq!(locks.busy(), 1, "idle locks are forgotten");
    }
}
