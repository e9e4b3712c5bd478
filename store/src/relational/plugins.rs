//! [`Plugins`] over SQL: tenants' plugins, bytes included.

use serde_json::Value;

use super::{Arg, Dialect, SqlStore, to_i64};
use crate::rows;
use crate::sql;
use crate::tenants::check_new_plugin;
use crate::{NewPlugin, PluginAcceptance, Plugins, StoreError, StoreResult, StoredPlugin};

#[async_trait::async_trait]
impl<D: Dialect> Plugins for SqlStore<D> {
    async fn put_plugin(&self, new: NewPlugin) -> StoreResult<(StoredPlugin, bool)> {
        if let Some(reason) = check_new_plugin(&new) {
            return Err(StoreError::Conflict(reason));
        }
        let plugin = new.to_stored();
        let mut tx = self.db.begin().await?;
        let result = async {
            // A concurrent upload of the same plugin waits for this insert,
            // then inserts nothing and reads the row this one wrote.
            let args: &[Arg<'_>] = &[
                (&plugin.tenant).into(),
                (&plugin.sha256).into(),
                (&plugin.name).into(),
                (&plugin.world).into(),
                to_i64(plugin.size, "plugin size")?.into(),
                plugin.created_ms.into(),
                plugin.origin.as_deref().into(),
            ];
            let inserted = match super::run::<D>(&mut tx, sql::INSERT_PLUGIN, args).await {
                Ok(rows) => rows,
                // The one foreign key: the plugin's tenant.
                Err(sqlx::Error::Database(db)) if db.is_foreign_key_violation() => {
                    return Err(StoreError::NoTenant(plugin.tenant.clone()));
                }
                Err(e) => return Err(self.error(&e)),
            };
            let key: [Arg<'_>; 2] = [(&plugin.tenant).into(), (&plugin.sha256).into()];
            if inserted == 0 {
                // The tenant has it: the bytes are the same, by their hash.
                if let Some(origin) = &plugin.origin {
                    self.execute(&mut tx, sql::SET_PLUGIN_ORIGIN, &[key[0], key[1], origin.into()]).await?;
                }
                let row = self.one(&mut tx, sql::SELECT_PLUGIN, &key).await?;
                return Ok((self.decode_plugin(&row)?, false));
            }
            self.execute(&mut tx, sql::INSERT_PLUGIN_BLOB, &[key[0], key[1], (&new.bytes).into()]).await?;
            Ok((plugin, true))
        }
        .await;
        self.db.end(tx, result).await
    }

    async fn plugin(&self, tenant: &str, sha256: &str) -> StoreResult<Option<StoredPlugin>> {
        let row = self.read_optional(sql::SELECT_PLUGIN, &[tenant.into(), sha256.into()]).await?;
        row.map(|r| self.decode_plugin(&r)).transpose()
    }

    async fn plugin_bytes(&self, tenant: &str, sha256: &str) -> StoreResult<Option<Vec<u8>>> {
        let row = self.read_optional(sql::PLUGIN_BYTES, &[tenant.into(), sha256.into()]).await?;
        row.map(|r| self.decode(|errors| rows::plugin_bytes(&r, errors))).transpose()
    }

    async fn plugins(&self, tenant: &str) -> StoreResult<Vec<StoredPlugin>> {
        let rows = self.read_all(sql::LIST_PLUGINS, &[tenant.into()]).await?;
        rows.iter().map(|r| self.decode_plugin(r)).collect()
    }

    async fn plugin_acceptance(&self, tenant: &str, reference: &str) -> StoreResult<Option<PluginAcceptance>> {
        let row = self.read_optional(sql::SELECT_PLUGIN_ACCEPTANCE, &[tenant.into(), reference.into()]).await?;
        row.map(|r| self.decode(|errors| rows::plugin_acceptance(&r, errors))).transpose()
    }

    async fn record_plugin_acceptance(
        &self,
        new: PluginAcceptance,
        was: Option<&str>,
        audit: (&str, &Value),
    ) -> StoreResult<bool> {
        let mut tx = self.db.begin().await?;
        let result = async {
            // The audit log's head first: the lock every append takes, in the same order.
            let head = self.audit_head_to_write(&mut tx, &new.tenant).await?;
            let mut args: Vec<Arg<'_>> = vec![
                (&new.tenant).into(),
                (&new.reference).into(),
                (&new.digest).into(),
                (&new.authority).into(),
                new.accepted_ms.into(),
                (&new.accepted_by).into(),
            ];
            let statement = match was {
                None => sql::INSERT_PLUGIN_ACCEPTANCE,
                Some(digest) => {
                    args.push(digest.into());
                    sql::UPDATE_PLUGIN_ACCEPTANCE
                }
            };
            let recorded = match super::run::<D>(&mut tx, statement, &args).await {
                Ok(rows) => rows == 1,
                Err(sqlx::Error::Database(db)) if db.is_foreign_key_violation() => {
                    return Err(StoreError::NoTenant(new.tenant.clone()));
                }
                Err(e) => return Err(self.error(&e)),
            };
            if recorded {
                let (kind, data) = audit;
                self.append_audit_after(&mut tx, &new.tenant, head, kind, data, new.accepted_ms).await?;
            }
            Ok(recorded)
        }
        .await;
        self.db.end(tx, result).await
    }
}
