//! The one SQL store, over sqlx, generic in its [`Dialect`]: the SQLite
//! and PostgreSQL backends run the same code and the same statements
//! ([`crate::sql`]), and differ only where their engines do (see
//! [`Dialect`]). Each concept's trait is implemented in a file of its own;
//! this one holds what they share: running a statement, decoding a row,
//! and the checks several of them make.

mod dialect;
mod jobs;
mod ledger;
mod plugins;
mod runs;
mod schedules;
mod sessions;
mod sign_ins;
mod signals;
mod tenants;

pub use dialect::{Arg, Dialect, Executes, List, Queue};
pub(crate) use dialect::{bind, json_list};

use crate::rows::{self, Columns as _, Errors};
use crate::sql;
use crate::{ApiKey, Backend, Job, Run, RunStatus, Session, StoreError, StoreResult, StoredPlugin, Tenant};

/// A store in a relational database: SQLite's file or PostgreSQL's server,
/// as its dialect `D` says ([`crate::SqliteStore`], [`crate::PgStore`]).
#[derive(Debug)]
pub struct SqlStore<D> {
    db: D,
}

impl<D> SqlStore<D> {
    /// The store over `db`, opened and migrated.
    pub(crate) fn new(db: D) -> Self {
        SqlStore { db }
    }

    /// Its engine and connections.
    pub(crate) fn dialect(&self) -> &D {
        &self.db
    }
}

#[async_trait::async_trait]
impl<D: Dialect> Backend for SqlStore<D> {
    fn location(&self) -> String {
        self.db.location().to_string()
    }

    async fn connect_all(&self) -> StoreResult<()> {
        self.db.connect_all().await
    }

    async fn watch_jobs(&self, on_due: std::sync::Arc<dyn Fn() + Send + Sync>) -> StoreResult<Option<crate::JobWatch>> {
        self.db.watch_jobs(on_due).await
    }
}

/// Runs `sql` with `args` on `conn`: how many rows it changed, or the
/// database's error as it is (for the callers that name a refusal by it).
async fn run<D: Dialect>(conn: &mut D::Conn, sql: &'static str, args: &[Arg<'_>]) -> Result<u64, sqlx::Error> {
    let done = D::query(sql, args).execute(conn.executor()).await?;
    Ok(D::rows_affected(&done))
}

/// A count of rows as a statement's limit.
fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// An unsigned number as the store's `BIGINT`.
pub(crate) fn to_i64(n: u64, what: &str) -> StoreResult<i64> {
    i64::try_from(n).map_err(|_| StoreError::Backend(format!("the {what} {n} is too large to store")))
}

impl<D: Dialect> SqlStore<D> {
    /// A database error as a [`StoreError`], naming the store.
    fn error(&self, e: &sqlx::Error) -> StoreError {
        self.db.error(e)
    }

    fn corrupt(&self, reason: String) -> StoreError {
        StoreError::Corrupt { location: self.db.location().to_string(), reason }
    }

    /// Runs `decode` with this store's ways of reporting a bad row.
    fn decode<T>(&self, decode: impl FnOnce(&Errors<'_>) -> StoreResult<T>) -> StoreResult<T> {
        decode(&Errors { read: &|e| self.error(e), corrupt: &|reason| self.corrupt(reason) })
    }

    /// `sql`'s first row on `conn`, if any.
    async fn optional(&self, conn: &mut D::Conn, sql: &'static str, args: &[Arg<'_>]) -> StoreResult<Option<D::Row>> {
        D::query(sql, args).fetch_optional(conn.executor()).await.map_err(|e| self.error(&e))
    }

    /// `sql`'s first row on `conn`, which must be there.
    async fn one(&self, conn: &mut D::Conn, sql: &'static str, args: &[Arg<'_>]) -> StoreResult<D::Row> {
        self.optional(conn, sql, args).await?.ok_or_else(|| self.error(&sqlx::Error::RowNotFound))
    }

    /// Every row of `sql` on `conn`.
    async fn all(&self, conn: &mut D::Conn, sql: &'static str, args: &[Arg<'_>]) -> StoreResult<Vec<D::Row>> {
        D::query(sql, args).fetch_all(conn.executor()).await.map_err(|e| self.error(&e))
    }

    /// Runs `sql` on `conn`: how many rows it changed.
    async fn execute(&self, conn: &mut D::Conn, sql: &'static str, args: &[Arg<'_>]) -> StoreResult<u64> {
        run::<D>(conn, sql, args).await.map_err(|e| self.error(&e))
    }

    /// `sql`'s first row, read without a lock.
    async fn read_optional(&self, sql: &'static str, args: &[Arg<'_>]) -> StoreResult<Option<D::Row>> {
        let mut conn = self.db.read().await?;
        self.optional(&mut conn, sql, args).await
    }

    /// `sql`'s first row, read without a lock, which must be there.
    async fn read_one(&self, sql: &'static str, args: &[Arg<'_>]) -> StoreResult<D::Row> {
        let mut conn = self.db.read().await?;
        self.one(&mut conn, sql, args).await
    }

    /// Every row of `sql`, read without a lock.
    async fn read_all(&self, sql: &'static str, args: &[Arg<'_>]) -> StoreResult<Vec<D::Row>> {
        let mut conn = self.db.read().await?;
        self.all(&mut conn, sql, args).await
    }

    /// A count `sql` answers.
    async fn read_count(&self, sql: &'static str, args: &[Arg<'_>]) -> StoreResult<i64> {
        let row = self.read_one(sql, args).await?;
        row.int_at(0).map_err(|e| self.error(&e))
    }

    /// The first column of every row of `sql` on `conn`, as text.
    async fn texts(&self, conn: &mut D::Conn, sql: &'static str, args: &[Arg<'_>]) -> StoreResult<Vec<String>> {
        let rows = self.all(conn, sql, args).await?;
        rows.iter().map(|row| row.text_at(0).map_err(|e| self.error(&e))).collect()
    }

    fn decode_run(&self, row: &D::Row) -> StoreResult<Run> {
        self.decode(|errors| rows::run(row, errors))
    }

    fn decode_status(&self, row: &D::Row) -> StoreResult<RunStatus> {
        self.decode(|errors| rows::run_status(row, errors))
    }

    fn decode_runs(&self, rows: &[D::Row]) -> StoreResult<Vec<Run>> {
        rows.iter().map(|r| self.decode_run(r)).collect()
    }

    fn decode_job(&self, row: &D::Row) -> StoreResult<Job> {
        self.decode(|errors| rows::job(row, errors))
    }

    fn decode_session(&self, row: &D::Row) -> StoreResult<Session> {
        self.decode(|errors| rows::session(row, errors))
    }

    fn decode_tenant(&self, row: &D::Row) -> StoreResult<Tenant> {
        self.decode(|errors| rows::tenant(row, errors))
    }

    fn decode_key(&self, row: &D::Row) -> StoreResult<ApiKey> {
        self.decode(|errors| rows::api_key(row, errors))
    }

    fn decode_plugin(&self, row: &D::Row) -> StoreResult<StoredPlugin> {
        self.decode(|errors| rows::plugin(row, errors))
    }

    /// Run `id`, read with `sql` ([`sql::SELECT_RUN`] or a locking
    /// variant).
    async fn fetch_run(&self, conn: &mut D::Conn, sql: &'static str, id: &str) -> StoreResult<Option<Run>> {
        let row = self.optional(conn, sql, &[id.into()]).await?;
        row.map(|r| self.decode_run(&r)).transpose()
    }

    /// Run `id` for a write that depends on it; `NoRun` if it is not there.
    async fn run_to_write(&self, conn: &mut D::Conn, id: &str) -> StoreResult<Run> {
        let run = self.fetch_run(conn, D::SQL.select_run_to_write, id).await?;
        run.ok_or_else(|| StoreError::NoRun(id.to_string()))
    }

    /// Whether session `id` is there, for a write that depends on it (on
    /// PostgreSQL its row is locked until the transaction ends).
    async fn session_there(&self, conn: &mut D::Conn, id: &str) -> StoreResult<bool> {
        Ok(self.optional(conn, D::SQL.session_id_to_write, &[id.into()]).await?.is_some())
    }

    /// Succeeds if tenant `id` is there.
    async fn check_tenant(&self, conn: &mut D::Conn, id: &str) -> StoreResult<()> {
        match self.optional(conn, sql::TENANT_ID, &[id.into()]).await? {
            Some(_) => Ok(()),
            None => Err(StoreError::NoTenant(id.to_string())),
        }
    }

    async fn fetch_session(&self, conn: &mut D::Conn, id: &str) -> StoreResult<Option<Session>> {
        let row = self.optional(conn, sql::SELECT_SESSION_BY_ID, &[id.into()]).await?;
        row.map(|r| self.decode_session(&r)).transpose()
    }
}
