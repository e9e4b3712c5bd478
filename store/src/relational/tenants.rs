//! [`Tenants`] over SQL: tenants, their API keys and the runs they hold.

use serde_json::Value;

use super::{Arg, Dialect, SqlStore, limit};
use crate::refusal::{key_exists, key_hash_taken, tenant_exists, tenant_name_taken};
use crate::rows::Columns as _;
use crate::sql;
use crate::tenants::check_new_key;
use crate::{
    AUDIT_GENESIS, ApiKey, NewApiKey, NewTenant, Run, RunStatus, StoreError, StoreResult, Tenant, Tenants, Waiting,
};

#[async_trait::async_trait]
impl<D: Dialect> Tenants for SqlStore<D> {
    async fn create_tenant(&self, new: NewTenant) -> StoreResult<Tenant> {
        let tenant = new.into_tenant();
        let policy = tenant.policy.to_string();
        let mut tx = self.db.begin().await?;
        let result = async {
            // A concurrent creation of the same id or name waits for this one
            // and then inserts nothing, and finds the row it lost to.
            let args: &[Arg<'_>] = &[
                (&tenant.id).into(),
                (&tenant.name).into(),
                (&policy).into(),
                AUDIT_GENESIS.into(),
                tenant.created_ms.into(),
            ];
            if self.execute(&mut tx, sql::INSERT_TENANT, args).await? == 0 {
                let taken = self.optional(&mut tx, sql::TENANT_ID, &[(&tenant.id).into()]).await?;
                return Err(StoreError::Conflict(match taken {
                    Some(_) => tenant_exists(&tenant.id),
                    None => tenant_name_taken(&tenant.name),
                }));
            }
            Ok(tenant)
        }
        .await;
        self.db.end(tx, result).await
    }

    async fn tenant(&self, id: &str) -> StoreResult<Option<Tenant>> {
        let row = self.read_optional(sql::SELECT_TENANT, &[id.into()]).await?;
        row.map(|r| self.decode_tenant(&r)).transpose()
    }

    async fn tenant_by_name(&self, name: &str) -> StoreResult<Option<Tenant>> {
        let row = self.read_optional(sql::SELECT_TENANT_BY_NAME, &[name.into()]).await?;
        row.map(|r| self.decode_tenant(&r)).transpose()
    }

    async fn tenants(&self) -> StoreResult<Vec<Tenant>> {
        let rows = self.read_all(sql::LIST_TENANTS, &[]).await?;
        rows.iter().map(|r| self.decode_tenant(r)).collect()
    }

    async fn update_tenant(
        &self,
        id: &str,
        policy: Option<Value>,
        disabled: Option<bool>,
        now: i64,
    ) -> StoreResult<Tenant> {
        let policy = policy.map(|p| p.to_string());
        let mut conn = self.db.single().await?;
        let args: &[Arg<'_>] = &[id.into(), (&policy).into(), disabled.map(i64::from).into(), now.into()];
        let result = match self.optional(&mut conn, sql::UPDATE_TENANT, args).await {
            Ok(Some(row)) => self.decode_tenant(&row),
            Ok(None) => Err(StoreError::NoTenant(id.to_string())),
            Err(e) => Err(e),
        };
        self.db.end(conn, result).await
    }

    async fn create_key(&self, new: NewApiKey) -> StoreResult<ApiKey> {
        if let Some(reason) = check_new_key(&new) {
            return Err(StoreError::Conflict(reason));
        }
        let key = new.into_key();
        let mut tx = self.db.begin().await?;
        let result = async {
            let args: &[Arg<'_>] = &[(&key.id).into(), (&key.tenant).into(), (&key.hash).into(), key.created_ms.into()];
            let inserted = match super::run::<D>(&mut tx, sql::INSERT_KEY, args).await {
                Ok(rows) => rows,
                // The one foreign key: the key's tenant.
                Err(sqlx::Error::Database(db)) if db.is_foreign_key_violation() => {
                    return Err(StoreError::NoTenant(key.tenant.clone().unwrap_or_default()));
                }
                Err(e) => return Err(self.error(&e)),
            };
            if inserted == 0 {
                let taken = self.optional(&mut tx, sql::KEY_ID, &[(&key.id).into()]).await?;
                return Err(StoreError::Conflict(match taken {
                    Some(_) => key_exists(&key.id),
                    None => key_hash_taken(&key.id),
                }));
            }
            Ok(key)
        }
        .await;
        self.db.end(tx, result).await
    }

    async fn key_by_hash(&self, hash: &str) -> StoreResult<Option<ApiKey>> {
        let row = self.read_optional(sql::SELECT_KEY_BY_HASH, &[hash.into()]).await?;
        row.map(|r| self.decode_key(&r)).transpose()
    }

    async fn keys(&self, tenant: Option<&str>) -> StoreResult<Vec<ApiKey>> {
        let rows = match tenant {
            Some(t) => self.read_all(sql::LIST_TENANT_KEYS, &[t.into()]).await?,
            None => self.read_all(sql::LIST_ADMIN_KEYS, &[]).await?,
        };
        rows.iter().map(|r| self.decode_key(r)).collect()
    }

    async fn revoke_key(&self, id: &str, now: i64) -> StoreResult<ApiKey> {
        let mut conn = self.db.single().await?;
        let result = match self.optional(&mut conn, sql::REVOKE_KEY, &[id.into(), now.into()]).await {
            Ok(Some(row)) => self.decode_key(&row),
            Ok(None) => Err(StoreError::NoKey(id.to_string())),
            Err(e) => Err(e),
        };
        self.db.end(conn, result).await
    }

    async fn tenant_runs(&self, tenant: &str, status: Option<RunStatus>, count: usize) -> StoreResult<Vec<Run>> {
        let rows = match status {
            Some(s) => {
                let args: &[Arg<'_>] = &[tenant.into(), s.as_str().into(), limit(count).into()];
                self.read_all(sql::LIST_TENANT_RUNS_BY_STATUS, args).await?
            }
            None => self.read_all(sql::LIST_TENANT_RUNS, &[tenant.into(), limit(count).into()]).await?,
        };
        self.decode_runs(&rows)
    }

    async fn live_runs(&self, tenant: &str) -> StoreResult<u64> {
        Ok(u64::try_from(self.read_count(sql::LIVE_RUNS, &[tenant.into()]).await?).unwrap_or(0))
    }

    async fn running_runs(&self, tenant: &str) -> StoreResult<u64> {
        Ok(u64::try_from(self.read_count(sql::RUNNING_RUNS, &[tenant.into()]).await?).unwrap_or(0))
    }

    async fn waiting(&self) -> StoreResult<Vec<Waiting>> {
        let mut by_tenant = std::collections::BTreeMap::<String, Waiting>::new();
        let queued = self.read_all(sql::QUEUED_JOBS_BY_QUEUE, &[]).await?;
        let pending = self.read_all(sql::PENDING_APPROVALS_BY_TENANT, &[]).await?;
        for (rows, pending) in [(queued, false), (pending, true)] {
            for row in rows {
                let tenant = row.text_at(0).map_err(|e| self.error(&e))?;
                let n = u64::try_from(row.int_at(1).map_err(|e| self.error(&e))?).unwrap_or(0);
                let entry = by_tenant.entry(tenant.clone()).or_insert_with(|| Waiting { tenant, ..Waiting::default() });
                if pending {
                    entry.pending_approvals = n;
                } else {
                    entry.queued_jobs = n;
                }
            }
        }
        Ok(by_tenant.into_values().collect())
    }
}
