//! [`Ledger`] over SQL: tenants' audit logs and usage, and runs' usage.

use serde_json::Value;

use super::{Arg, Dialect, SqlStore, limit, to_i64};
use crate::rows;
use crate::sql;
use crate::tenants::next_audit_entry;
use crate::{AuditEntry, Ledger, RunUsage, StoreError, StoreResult, Usage, usage_period};

impl<D: Dialect> SqlStore<D> {
    /// Runs an upsert that adds to counters; its one foreign key, when it
    /// is not there, is `missing`.
    async fn add_counts(&self, sql: &'static str, args: &[Arg<'_>], missing: StoreError) -> StoreResult<()> {
        let mut conn = self.db.single().await?;
        let result = match super::run::<D>(&mut conn, sql, args).await {
            Ok(_) => Ok(()),
            Err(sqlx::Error::Database(db)) if db.is_foreign_key_violation() => Err(missing),
            Err(e) => Err(self.error(&e)),
        };
        self.db.end(conn, result).await
    }
}

impl<D: Dialect> SqlStore<D> {
    /// The head of `tenant`'s audit log, read for a write in this
    /// transaction (see [`Ledger::append_audit`] for the lock).
    pub(super) async fn audit_head_to_write(
        &self,
        conn: &mut D::Conn,
        tenant: &str,
    ) -> StoreResult<Option<(u64, String)>> {
        let row = self.optional(conn, D::SQL.audit_head_to_write, &[tenant.into()]).await?;
        let Some(row) = row else { return Err(StoreError::NoTenant(tenant.to_string())) };
        self.decode(|errors| rows::audit_head(tenant, &row, errors))
    }

    /// Appends an entry after `head`, which this transaction read with
    /// [`Self::audit_head_to_write`].
    pub(super) async fn append_audit_after(
        &self,
        conn: &mut D::Conn,
        tenant: &str,
        head: Option<(u64, String)>,
        kind: &str,
        data: &Value,
        at_ms: i64,
    ) -> StoreResult<AuditEntry> {
        let entry = next_audit_entry(tenant, head, kind, data, at_ms);
        let seq = to_i64(entry.seq, "audit sequence number")?;
        let args: &[Arg<'_>] = &[
            tenant.into(),
            seq.into(),
            (&entry.kind).into(),
            (&entry.data).into(),
            entry.at_ms.into(),
            (&entry.prev).into(),
            (&entry.hash).into(),
        ];
        self.execute(conn, sql::APPEND_AUDIT, args).await?;
        self.execute(conn, sql::ADVANCE_AUDIT, &[tenant.into(), seq.into(), (&entry.hash).into()]).await?;
        Ok(entry)
    }
}

#[async_trait::async_trait]
impl<D: Dialect> Ledger for SqlStore<D> {
    async fn append_audit(&self, tenant: &str, kind: &str, data: &Value, at_ms: i64) -> StoreResult<AuditEntry> {
        // The head is read for the write: on SQLite `BEGIN IMMEDIATE` holds
        // the file's write lock from the read to the commit, on PostgreSQL
        // the tenant's row is locked; either way a concurrent append in any
        // process waits, then reads the head this one wrote.
        let mut tx = self.db.begin().await?;
        let result = async {
            let head = self.audit_head_to_write(&mut tx, tenant).await?;
            self.append_audit_after(&mut tx, tenant, head, kind, data, at_ms).await
        }
        .await;
        self.db.end(tx, result).await
    }

    async fn audit(&self, tenant: &str, after_seq: u64, count: usize) -> StoreResult<Vec<AuditEntry>> {
        // Past the largest sequence number a store holds: nothing.
        let Ok(after) = i64::try_from(after_seq) else { return Ok(Vec::new()) };
        let rows = self.read_all(sql::AUDIT, &[tenant.into(), after.into(), limit(count).into()]).await?;
        rows.iter().map(|r| self.decode(|errors| rows::audit_entry(r, errors))).collect()
    }

    async fn audit_head(&self, tenant: &str) -> StoreResult<Option<(u64, String)>> {
        match self.read_optional(sql::AUDIT_HEAD, &[tenant.into()]).await? {
            Some(row) => self.decode(|errors| rows::audit_head(tenant, &row, errors)),
            None => Ok(None),
        }
    }

    async fn audit_heads(&self) -> StoreResult<Vec<(String, u64, String)>> {
        let rows = self.read_all(sql::AUDIT_HEADS, &[]).await?;
        rows.iter().map(|r| self.decode(|errors| rows::audit_heads_row(r, errors))).collect()
    }

    async fn add_usage(&self, tenant: &str, at_ms: i64, runs: u64, used: RunUsage) -> StoreResult<()> {
        // One upsert: of concurrent adds to a new hour one inserts, the
        // others wait for its row and add to it.
        let args: &[Arg<'_>] = &[
            tenant.into(),
            usage_period(at_ms).into(),
            to_i64(runs, "run count")?.into(),
            to_i64(used.tokens, "token count")?.into(),
            to_i64(used.cpu_ticks, "CPU tick count")?.into(),
            to_i64(used.egress_bytes, "egress byte count")?.into(),
            to_i64(used.cost_nanos, "cost")?.into(),
        ];
        self.add_counts(sql::ADD_USAGE, args, StoreError::NoTenant(tenant.to_string())).await
    }

    async fn usage(&self, tenant: &str, since_ms: i64) -> StoreResult<Vec<Usage>> {
        let rows = self.read_all(sql::USAGE, &[tenant.into(), usage_period(since_ms).into()]).await?;
        rows.iter().map(|r| self.decode(|errors| rows::usage(r, errors))).collect()
    }

    async fn add_run_usage(&self, run: &str, used: RunUsage) -> StoreResult<()> {
        let args: &[Arg<'_>] = &[
            run.into(),
            to_i64(used.tokens, "token count")?.into(),
            to_i64(used.cpu_ticks, "CPU tick count")?.into(),
            to_i64(used.egress_bytes, "egress byte count")?.into(),
            to_i64(used.cost_nanos, "cost")?.into(),
        ];
        self.add_counts(sql::ADD_RUN_USAGE, args, StoreError::NoRun(run.to_string())).await
    }

    async fn run_usage(&self, run: &str) -> StoreResult<RunUsage> {
        match self.read_optional(sql::RUN_USAGE, &[run.into()]).await? {
            Some(row) => self.decode(|errors| rows::run_usage(&row, run, errors)),
            None => Ok(RunUsage::default()),
        }
    }
}
