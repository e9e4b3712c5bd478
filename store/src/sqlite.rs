//! The SQLite backend, the embedded default.
//!
//! One file, in WAL mode with `synchronous=FULL` (a commit is on disk when
//! it returns, power loss included), foreign keys on and a 5 s busy
//! timeout. Writes go through one connection, in turn (SQLite has one
//! writer anyway; queuing them here keeps them off the busy handler), and
//! under load in groups that share one commit ([`crate::writer`]): the
//! connection that checked and migrated the file. Reads go
//! through a small pool of read-only connections opened on first use. The
//! writer is not pooled because sqlx's pool pings a connection on every
//! release: one more round trip to its worker thread per write, which the
//! next write waits for (see benches/journal.rs). Every transaction that
//! reads before it writes starts with `BEGIN IMMEDIATE`, which takes the
//! write lock first, so two processes sharing the file cannot both claim a
//! run.
//!
//! Opening never changes a file that is not already a nexo store or empty:
//! a file that is not SQLite, another program's database, or a database
//! from a newer nexo is refused before anything is written (not even the
//! journal mode). The statements themselves are in [`crate::sql`], shared
//! with the PostgreSQL backend.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqlitePool, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};
use sqlx::{ConnectOptions, Connection, Sqlite};

use crate::jobs::check_new_job;
use crate::refusal::{
    check_decision, claim_refusal, duplicate_entry, job_exists, key_exists, key_hash_taken, not_final, not_owned,
    nothing_to_cancel, run_exists, sign_in_taken, tenant_exists, tenant_name_taken,
};
use crate::rows::{Errors, sqlite as rows};
use crate::sessions::{check_latest, check_no_prompt_in_progress, check_own_session, counts, not_appended};
use crate::sql;
use crate::tenants::{check_new_key, check_new_plugin, next_audit_entry};
use crate::writer::{WriteCounts, Writer};
use crate::{
    AUDIT_GENESIS, ApiKey, Approval, AuditEntry, Batch, Claim, Decision, Entry, Job, JobLease, JobStatus, Lease,
    NewApiKey, NewJob, NewPlugin, NewRun, NewTenant, PendingCall, Retry, Run, RunStatus, RunUsage, SCHEMA_VERSION,
    Session, SignIn, Store, StoreError, StoreResult, StoredEvent, StoredPlugin, Tenant, ThreadAppend, Transition,
    Usage, new_session_id, now_ms, usage_period,
};

/// How long a statement waits for another process's write lock before it
/// fails.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// WAL pages after which a commit checkpoints them into the database
/// (SQLite's default is 1000). The WAL outlives a process that exits
/// without closing the store, and the next process's first connection
/// reads all of it to rebuild its index: a 4 MB WAL made that 2–3 ms of a
/// one-shot `nexo run`, 512 KB keeps it under a few tenths.
const WAL_AUTOCHECKPOINT: u32 = 128;

/// Read connections: WAL readers never block the writer or each other, and
/// a process of nexo reads from a handful of tasks at most.
const READERS: u32 = 4;

/// The first 16 bytes of every SQLite database file.
const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";

// SQLite's primary result codes (the low byte of an extended code) that
// the store names: the first two mean the file is damaged or is not a
// database.
const SQLITE_CORRUPT: i64 = 11;
const SQLITE_NOTADB: i64 = 26;
const SQLITE_BUSY: i64 = 5;
const SQLITE_READONLY: i64 = 8;
const SQLITE_FULL: i64 = 13;

/// A store in an SQLite file.
#[derive(Debug)]
pub struct SqliteStore {
    path: PathBuf,
    location: String,
    /// The one connection every write goes through, in order, committed
    /// in groups under load ([`crate::writer`]).
    writer: Writer,
    /// Read-only connections for reads that need no lock.
    reader: SqlitePool,
}

/// The settings one connection runs with, as SQLite reports them
/// ([`SqliteStore::settings`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionSettings {
    /// `PRAGMA journal_mode`: `wal`.
    pub journal_mode: String,
    /// `PRAGMA synchronous`: 2 (`FULL`).
    pub synchronous: i64,
    /// `PRAGMA foreign_keys`.
    pub foreign_keys: bool,
    /// `PRAGMA busy_timeout`, in milliseconds.
    pub busy_timeout_ms: i64,
}

/// The settings of a store's write connection and of one of its read
/// connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The connection every write goes through.
    pub writer: ConnectionSettings,
    /// A read connection.
    pub reader: ConnectionSettings,
}

/// What the file holds before migrations run.
enum Found {
    /// Nothing: a new or empty file.
    Empty,
    /// A nexo store at this schema version.
    Nexo(i64),
}

impl SqliteStore {
    /// Opens the store in the file at `path`, creating it (mode 0600, and
    /// its missing parent directories with mode 0700) and migrating it to
    /// [`SCHEMA_VERSION`] as needed.
    ///
    /// Refuses, without changing the file: one that is not an SQLite
    /// database or is damaged, or an SQLite database with tables of its own
    /// but not nexo's ([`StoreError::Corrupt`]); one with a newer schema
    /// ([`StoreError::TooNew`]).
    pub async fn open(path: impl AsRef<Path>) -> StoreResult<SqliteStore> {
        let path = path.as_ref().to_path_buf();
        let location = path.display().to_string();
        prepare_file(&path, &location)?;

        // No journal mode here: it is a property of the file, changed only
        // once the file has proved to be ours (see `migrate`).
        let options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(false)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true)
            .synchronous(SqliteSynchronous::Full)
            .pragma("wal_autocheckpoint", WAL_AUTOCHECKPOINT.to_string());

        // The connection that checked and migrated the file stays on as the
        // writer: closing it, as the file's only connection, would checkpoint
        // the WAL (three fsyncs) only for the next connection to recreate it.
        let mut writer = options.connect().await.map_err(|e| open_error(&location, &e))?;
        if let Err(e) = migrate(&mut writer, &location).await {
            // A failure to close changes nothing about what `migrate` did.
            writer.close().await.ok();
            return Err(e);
        }
        // Readers connect on first use: a one-shot run may read nothing.
        let reader = SqlitePoolOptions::new()
            .max_connections(READERS)
            .min_connections(0)
            .idle_timeout(None)
            .max_lifetime(None)
            .test_before_acquire(false)
            .connect_lazy_with(options.read_only(true));
        restrict_side_files(&path);
        let writer = Writer::new(writer, location.clone(), db_error);
        Ok(SqliteStore { path, location, writer, reader })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many writes this store has made durable, and in how many
    /// commits: under load, writes share them ([`crate::writer`]).
    pub fn write_counts(&self) -> WriteCounts {
        self.writer.counts()
    }

    /// How many read connections are open: none until the first read or
    /// [`Store::connect_all`].
    pub fn open_readers(&self) -> u32 {
        self.reader.size()
    }

    /// The settings the store's connections run with, as SQLite reports
    /// them (for `nexo doctor` and tests).
    pub async fn settings(&self) -> StoreResult<Settings> {
        let mut writer = self.writer.bare().await?;
        let mut reader = self.reader.acquire().await.map_err(|e| self.error(&e))?;
        Ok(Settings {
            writer: self.connection_settings(&mut writer).await?,
            reader: self.connection_settings(&mut reader).await?,
        })
    }

    /// Closes every connection, waiting for them to finish. The writer
    /// closes last: as the file's last connection it checkpoints the WAL
    /// into the database file and removes it (a read-only connection
    /// cannot). Dropping the store closes them too, in the background, and
    /// may leave the WAL for the next open to use: no commit is lost either
    /// way.
    pub async fn close(&self) {
        self.reader.close().await;
        self.writer.close().await;
    }

    async fn connection_settings(&self, conn: &mut SqliteConnection) -> StoreResult<ConnectionSettings> {
        let journal_mode: String = self.pragma(conn, "PRAGMA journal_mode").await?;
        let synchronous: i64 = self.pragma(conn, "PRAGMA synchronous").await?;
        let foreign_keys: i64 = self.pragma(conn, "PRAGMA foreign_keys").await?;
        let busy_timeout_ms: i64 = self.pragma(conn, "PRAGMA busy_timeout").await?;
        Ok(ConnectionSettings {
            journal_mode: journal_mode.to_ascii_lowercase(),
            synchronous,
            foreign_keys: foreign_keys != 0,
            busy_timeout_ms,
        })
    }

    async fn pragma<T>(&self, conn: &mut SqliteConnection, pragma: &'static str) -> StoreResult<T>
    where
        T: for<'r> sqlx::Decode<'r, Sqlite> + sqlx::Type<Sqlite> + Send + Unpin,
    {
        sqlx::query_scalar(pragma).fetch_one(conn).await.map_err(|e| self.error(&e))
    }

    /// A database error as a [`StoreError`], naming the file.
    fn error(&self, e: &sqlx::Error) -> StoreError {
        db_error(&self.location, e)
    }

    fn corrupt(&self, reason: String) -> StoreError {
        StoreError::Corrupt { location: self.location.clone(), reason }
    }

    async fn fetch_run(&self, conn: &mut SqliteConnection, id: &str) -> StoreResult<Option<Run>> {
        let row = sqlx::query(sql::SELECT_RUN).bind(id).fetch_optional(conn).await.map_err(|e| self.error(&e))?;
        row.map(|r| self.decode_run(&r)).transpose()
    }

    /// Succeeds if `owner` holds the running run `id`'s lease; otherwise
    /// says why not (`NoRun`, or a conflict naming the run's status).
    async fn check_owner(&self, conn: &mut SqliteConnection, id: &str, owner: &str) -> StoreResult<()> {
        let row = sqlx::query(sql::RUN_OWNER).bind(id).fetch_optional(conn).await.map_err(|e| self.error(&e))?;
        let Some(row) = row else { return Err(StoreError::NoRun(id.to_string())) };
        let status = self.decode_status(&row)?;
        let holder = self.decode(|errors| rows::lease_owner(&row, errors))?;
        if status != RunStatus::Running || holder.as_deref() != Some(owner) {
            return Err(StoreError::Conflict(not_owned(id, status)));
        }
        Ok(())
    }

    /// Why a guarded write to `id` by `owner` wrote nothing, asked on the
    /// write connection that made it.
    async fn why_not_owned(&self, conn: &mut SqliteConnection, id: &str, owner: &str) -> StoreError {
        match self.check_owner(conn, id, owner).await {
            Err(e) => e,
            // It changed hands and back between the two statements: say so
            // rather than pretend the write happened.
            Ok(()) => StoreError::Conflict(not_owned(id, RunStatus::Running)),
        }
    }

    /// The run `id` if `owner` holds it, for writing a batch with `thread`:
    /// the run must be owned and a prompt of the session the append names.
    /// A session that is not there is named first, whatever else is wrong;
    /// it is looked up only when something is.
    async fn owned_for(
        &self,
        conn: &mut SqliteConnection,
        id: &str,
        owner: &str,
        thread: Option<&ThreadAppend>,
    ) -> StoreResult<Run> {
        let run = self.fetch_run(conn, id).await?;
        let owned = run
            .as_ref()
            .is_some_and(|r| r.status == RunStatus::Running && r.lease.as_ref().is_some_and(|l| l.owner == owner));
        let own_session = match (thread, &run) {
            (Some(t), Some(r)) => r.session.as_deref() == Some(t.session.as_str()),
            _ => true,
        };
        if let Some(thread) = thread
            && !(owned && own_session)
        {
            let found = sqlx::query(sql::SESSION_ID)
                .bind(&thread.session)
                .fetch_optional(&mut *conn)
                .await
                .map_err(|e| self.error(&e))?;
            if found.is_none() {
                return Err(StoreError::NoSession(thread.session.clone()));
            }
        }
        let run = run.ok_or_else(|| StoreError::NoRun(id.to_string()))?;
        if !owned {
            return Err(StoreError::Conflict(not_owned(id, run.status)));
        }
        if let Some(thread) = thread {
            check_own_session(&run, thread)?;
        }
        Ok(run)
    }

    /// Writes `batch` for run `id`, which [`SqliteStore::owned_for`] has
    /// checked; an error leaves the transaction to be rolled back.
    async fn write_batch(&self, conn: &mut SqliteConnection, id: &str, batch: Batch) -> StoreResult<()> {
        for e in &batch.journal {
            let inserted = sqlx::query(sql::APPEND_ENTRY)
                .bind(id)
                .bind(to_i64(e.seq, "sequence number")?)
                .bind(to_i64(e.end, "end sequence number")?)
                .bind(&e.interface)
                .bind(&e.function)
                .bind(&e.args_hash)
                .bind(&e.result)
                .execute(&mut *conn)
                .await;
            self.entry_written(inserted, id, e.seq)?;
        }
        for e in &batch.events {
            sqlx::query(sql::APPEND_EVENT)
                .bind(id)
                .bind(&e.kind)
                .bind(e.data.to_string())
                .bind(e.at_ms)
                .execute(&mut *conn)
                .await
                .map_err(|e| self.error(&e))?;
        }
        for (name, value) in &batch.checkpoints {
            sqlx::query(sql::PUT_CHECKPOINT)
                .bind(id)
                .bind(name)
                .bind(value.to_string())
                .execute(&mut *conn)
                .await
                .map_err(|e| self.error(&e))?;
        }
        if let Some(thread) = batch.thread {
            self.append_thread_in(conn, &thread.session, thread.expected, thread.messages, now_ms()).await?;
        }
        Ok(())
    }

    /// Whether a journal insert wrote its row; a taken sequence number is
    /// a conflict.
    fn entry_written(
        &self,
        inserted: Result<sqlx::sqlite::SqliteQueryResult, sqlx::Error>,
        id: &str,
        seq: u64,
    ) -> StoreResult<u64> {
        match inserted {
            Ok(done) => Ok(done.rows_affected()),
            Err(sqlx::Error::Database(db)) if db.is_unique_violation() => {
                Err(StoreError::Conflict(duplicate_entry(id, seq)))
            }
            Err(e) => Err(self.error(&e)),
        }
    }

    /// Runs `decode` with this store's ways of reporting a bad row.
    fn decode<T>(&self, decode: impl FnOnce(&Errors<'_>) -> StoreResult<T>) -> StoreResult<T> {
        decode(&Errors { read: &|e| self.error(e), corrupt: &|reason| self.corrupt(reason) })
    }

    fn decode_status(&self, row: &SqliteRow) -> StoreResult<RunStatus> {
        self.decode(|errors| rows::run_status(row, errors))
    }

    fn decode_run(&self, row: &SqliteRow) -> StoreResult<Run> {
        self.decode(|errors| rows::run(row, errors))
    }

    fn decode_approval(&self, id: &str, row: &SqliteRow) -> StoreResult<Approval> {
        self.decode(|errors| rows::approval(id, row, errors))
    }

    fn decode_job(&self, row: &SqliteRow) -> StoreResult<Job> {
        self.decode(|errors| rows::job(row, errors))
    }

    fn decode_session(&self, row: &SqliteRow) -> StoreResult<Session> {
        self.decode(|errors| rows::session(row, errors))
    }

    /// Succeeds if tenant `id` is there.
    async fn check_tenant(&self, conn: &mut SqliteConnection, id: &str) -> StoreResult<()> {
        let found = sqlx::query(sql::TENANT_ID).bind(id).fetch_optional(conn).await.map_err(|e| self.error(&e))?;
        match found {
            Some(_) => Ok(()),
            None => Err(StoreError::NoTenant(id.to_string())),
        }
    }

    fn decode_tenant(&self, row: &SqliteRow) -> StoreResult<Tenant> {
        self.decode(|errors| rows::tenant(row, errors))
    }

    fn decode_key(&self, row: &SqliteRow) -> StoreResult<ApiKey> {
        self.decode(|errors| rows::api_key(row, errors))
    }

    fn decode_plugin(&self, row: &SqliteRow) -> StoreResult<StoredPlugin> {
        self.decode(|errors| rows::plugin(row, errors))
    }

    async fn fetch_session(&self, conn: &mut SqliteConnection, id: &str) -> StoreResult<Option<Session>> {
        let row =
            sqlx::query(sql::SELECT_SESSION_BY_ID).bind(id).fetch_optional(conn).await.map_err(|e| self.error(&e))?;
        row.map(|r| self.decode_session(&r)).transpose()
    }

    async fn append_thread_in(
        &self,
        conn: &mut SqliteConnection,
        id: &str,
        expected: u64,
        messages: Vec<Value>,
        now: i64,
    ) -> StoreResult<Session> {
        let (before, after) = counts(expected, messages.len())?;
        let row = sqlx::query(sql::ADVANCE_THREAD)
            .bind(id)
            .bind(before)
            .bind(after)
            .bind(now)
            .fetch_optional(&mut *conn)
            .await
            .map_err(|e| self.error(&e))?;
        let Some(row) = row else { return Err(not_appended(id, expected, self.fetch_session(conn, id).await?)) };
        let session = self.decode_session(&row)?;
        // A few hundred rows per statement, well under SQLite's limit of
        // bound parameters.
        let numbered: Vec<(i64, &Value)> = (before..).zip(&messages).collect();
        for chunk in numbered.chunks(300) {
            let mut insert = sqlx::QueryBuilder::<sqlx::Sqlite>::new(sql::APPEND_MESSAGES);
            insert.push_values(chunk, |mut row, (seq, message)| {
                row.push_bind(id).push_bind(*seq).push_bind(message.to_string());
            });
            insert.build().execute(&mut *conn).await.map_err(|e| self.error(&e))?;
        }
        Ok(session)
    }

    async fn fetch_job(&self, conn: &mut SqliteConnection, id: &str) -> StoreResult<Option<Job>> {
        let row = sqlx::query(sql::SELECT_JOB).bind(id).fetch_optional(conn).await.map_err(|e| self.error(&e))?;
        row.map(|r| self.decode_job(&r)).transpose()
    }

    /// Writes what a claim, a completion or a failure changed in `job`.
    async fn save_job(&self, conn: &mut SqliteConnection, job: &Job) -> StoreResult<()> {
        sqlx::query(sql::UPDATE_JOB)
            .bind(&job.id)
            .bind(job.status.as_str())
            .bind(i64::from(job.attempts))
            .bind(job.not_before_ms)
            .bind(job.lease.as_ref().map(|l| l.worker.as_str()))
            .bind(job.lease.as_ref().map(|l| l.token))
            .bind(job.lease.as_ref().map(|l| l.until_ms))
            .bind(&job.error)
            .bind(job.updated_ms)
            .execute(conn)
            .await
            .map_err(|e| self.error(&e))?;
        Ok(())
    }

    async fn claim_job_in(
        &self,
        conn: &mut SqliteConnection,
        worker: &str,
        lease_ms: i64,
        now: i64,
        held_back: &[String],
    ) -> StoreResult<Option<Job>> {
        loop {
            let row =
                sqlx::query(sql::DUE_JOB).bind(now).fetch_optional(&mut *conn).await.map_err(|e| self.error(&e))?;
            let Some(row) = row else { return Ok(None) };
            let mut job = self.decode_job(&row)?;
            if job.held_back(held_back) {
                return Ok(None);
            }
            if job.exhausted() {
                job.give_up(now);
                self.save_job(conn, &job).await?;
                continue;
            }
            let token: i64 =
                sqlx::query_scalar(sql::NEXT_TOKEN).fetch_one(&mut *conn).await.map_err(|e| self.error(&e))?;
            sqlx::query(sql::FORGET_TOKEN).bind(token).execute(&mut *conn).await.map_err(|e| self.error(&e))?;
            job.take(worker, token, lease_ms, now);
            self.save_job(conn, &job).await?;
            return Ok(Some(job));
        }
    }

    /// Applies `change` to job `id` if `lease` still holds it.
    async fn change_job(
        &self,
        conn: &mut SqliteConnection,
        id: &str,
        lease: &JobLease,
        change: impl FnOnce(&mut Job),
    ) -> StoreResult<Job> {
        let mut job = self.fetch_job(conn, id).await?.ok_or_else(|| StoreError::NoJob(id.to_string()))?;
        job.check_lease(lease)?;
        change(&mut job);
        self.save_job(conn, &job).await?;
        Ok(job)
    }

    async fn transition_in(
        &self,
        conn: &mut SqliteConnection,
        id: &str,
        owner: &str,
        batch: Batch,
        to: Transition,
    ) -> StoreResult<Run> {
        let mut run = self.owned_for(conn, id, owner, batch.thread.as_ref()).await?;
        if let Transition::Finish { status, .. } = &to
            && !status.is_final()
        {
            return Err(StoreError::Conflict(not_final(id, *status)));
        }
        self.write_batch(conn, id, batch).await?;
        run.lease = None;
        run.updated_ms = now_ms();
        let mut approval = None;
        match to {
            Transition::Finish { status, result, error } => {
                run.status = status;
                run.result = result;
                run.error = error;
                run.suspend_reason = None;
                run.resume_key = None;
            }
            Transition::Suspend { reason, resume_key, approval: pending } => {
                run.status = RunStatus::Suspended;
                run.suspend_reason = Some(reason);
                run.resume_key = resume_key;
                approval = pending;
            }
            Transition::Requeue { error } => {
                run.status = RunStatus::Queued;
                run.result = None;
                run.error = Some(error);
                run.suspend_reason = None;
                run.resume_key = None;
            }
        }
        sqlx::query(sql::LEAVE_RUNNING)
            .bind(id)
            .bind(run.status.as_str())
            .bind(&run.result)
            .bind(&run.error)
            .bind(&run.suspend_reason)
            .bind(&run.resume_key)
            .bind(run.updated_ms)
            .execute(&mut *conn)
            .await
            .map_err(|e| self.error(&e))?;
        if let Some(a) = approval {
            sqlx::query(sql::PUT_APPROVAL)
                .bind(id)
                .bind(to_i64(a.seq, "approval sequence number")?)
                .bind(&a.capability)
                .bind(&a.tool)
                .bind(a.arguments.to_string())
                .bind(&a.args_hash)
                .bind(&a.component_sha256)
                .bind(a.decision.map(Decision::as_str))
                .bind(a.created_ms)
                .execute(&mut *conn)
                .await
                .map_err(|e| self.error(&e))?;
        } else {
            // A run that ends, or pauses for another reason, waits on no older call.
            sqlx::query(sql::DELETE_APPROVAL).bind(id).execute(&mut *conn).await.map_err(|e| self.error(&e))?;
        }
        Ok(run)
    }

    async fn claim_in(
        &self,
        conn: &mut SqliteConnection,
        id: &str,
        how: Claim,
        lease: Lease,
        resume_input: Option<String>,
        now: i64,
    ) -> StoreResult<Run> {
        let mut run = self.fetch_run(conn, id).await?.ok_or_else(|| StoreError::NoRun(id.to_string()))?;
        let ok = how.allows(&run, now);
        if !ok {
            return Err(StoreError::Conflict(claim_refusal(id, how, &run)));
        }
        if how == Claim::Retry {
            self.check_latest(conn, &run).await?;
        }
        let resumed = matches!(how, Claim::Resume | Claim::Retry);
        let claimed = if resumed {
            sqlx::query(sql::CLAIM_RESUME)
                .bind(id)
                .bind(&lease.owner)
                .bind(lease.until_ms)
                .bind(now)
                .bind(&resume_input)
                .execute(&mut *conn)
                .await
        } else {
            sqlx::query(sql::CLAIM).bind(id).bind(&lease.owner).bind(lease.until_ms).bind(now).execute(&mut *conn).await
        };
        claimed.map_err(|e| self.error(&e))?;
        if resumed {
            sqlx::query(sql::APPEND_EVENT)
                .bind(id)
                .bind("resumed")
                .bind("{}")
                .bind(now)
                .execute(&mut *conn)
                .await
                .map_err(|e| self.error(&e))?;
            run.resume_input = resume_input;
            run.suspend_reason = None;
            run.error = None;
        }
        run.status = RunStatus::Running;
        run.lease = Some(lease);
        run.updated_ms = now;
        Ok(run)
    }

    /// Succeeds if `run` may be retried: no later run of its session.
    async fn check_latest(&self, conn: &mut SqliteConnection, run: &Run) -> StoreResult<()> {
        let Some(session) = &run.session else { return Ok(()) };
        let later: Option<String> = sqlx::query_scalar(sql::LATER_SESSION_RUN)
            .bind(session)
            .bind(run.created_ms)
            .bind(&run.id)
            .fetch_optional(&mut *conn)
            .await
            .map_err(|e| self.error(&e))?;
        check_latest(run, later)
    }

    /// Records `run`: with a session, only if it is there and has no prompt
    /// in progress, checked by the insert itself (one autocommit statement,
    /// as for a plain run). Why nothing was written is worked out after.
    async fn create_run_in(&self, conn: &mut SqliteConnection, run: Run) -> StoreResult<Run> {
        let statement = if run.session.is_some() { sql::INSERT_SESSION_RUN } else { sql::INSERT_RUN };
        let inserted = sqlx::query(statement)
            .bind(&run.id)
            .bind(&run.agent)
            .bind(&run.kind)
            .bind(&run.source)
            .bind(&run.component_sha256)
            .bind(&run.input)
            .bind(run.grant.to_string())
            .bind(run.status.as_str())
            .bind(&run.suspend_reason)
            .bind(&run.resume_key)
            .bind(&run.resume_input)
            .bind(&run.result)
            .bind(&run.error)
            .bind(run.created_ms)
            .bind(run.updated_ms)
            .bind(run.lease.as_ref().map(|l| l.owner.as_str()))
            .bind(run.lease.as_ref().map(|l| l.until_ms))
            .bind(&run.session)
            .bind(&run.tenant)
            .execute(&mut *conn)
            .await;
        let inserted = match inserted {
            Ok(done) => done,
            // The foreign keys a run has that a caller names: its session and
            // its tenant, which `create_run` checked first if there is one.
            Err(sqlx::Error::Database(db)) if db.is_foreign_key_violation() => {
                return Err(match (run.session, run.tenant) {
                    (Some(session), _) => StoreError::NoSession(session),
                    (None, tenant) => StoreError::NoTenant(tenant.unwrap_or_default()),
                });
            }
            Err(e) => return Err(self.error(&e)),
        };
        if inserted.rows_affected() > 0 {
            return Ok(run);
        }
        Err(self.not_created(conn, &run).await)
    }

    /// Why `run` was not inserted: its id is taken (whatever its session),
    /// its session is gone, or a prompt of its session is in progress.
    async fn not_created(&self, conn: &mut SqliteConnection, run: &Run) -> StoreError {
        let taken = sqlx::query(sql::RUN_EXISTS).bind(&run.id).fetch_optional(&mut *conn).await;
        match (taken, &run.session) {
            (Err(e), _) => return self.error(&e),
            (Ok(Some(_)), _) | (Ok(None), None) => return StoreError::Conflict(run_exists(&run.id)),
            (Ok(None), Some(_)) => {}
        }
        let session = run.session.as_deref().unwrap_or_default();
        match sqlx::query(sql::SESSION_ID).bind(session).fetch_optional(&mut *conn).await {
            Err(e) => return self.error(&e),
            Ok(None) => return StoreError::NoSession(session.to_string()),
            Ok(Some(_)) => {}
        }
        let blocker = match sqlx::query(sql::PROMPT_IN_PROGRESS).bind(session).fetch_optional(&mut *conn).await {
            Ok(row) => row.map(|row| self.decode(|errors| rows::prompt(&row, errors))).transpose(),
            Err(e) => Err(self.error(&e)),
        };
        match blocker.and_then(|b| check_no_prompt_in_progress(session, b)) {
            Err(e) => e,
            // The prompt in the way ended in between: the caller may try again.
            Ok(()) => StoreError::Conflict(format!(
                "session `{session}` had a prompt in progress when run `{}` was created, which has ended since; \
                 send the prompt again",
                run.id
            )),
        }
    }

    async fn cancel_in(&self, conn: &mut SqliteConnection, id: &str, reason: &str) -> StoreResult<Run> {
        let mut run = self.fetch_run(conn, id).await?.ok_or_else(|| StoreError::NoRun(id.to_string()))?;
        if run.status.is_final() {
            return Err(StoreError::Conflict(nothing_to_cancel(id, run.status)));
        }
        run.status = RunStatus::Cancelled;
        run.error = Some(reason.to_string());
        run.lease = None;
        run.updated_ms = now_ms();
        sqlx::query(sql::CANCEL)
            .bind(id)
            .bind(reason)
            .bind(run.updated_ms)
            .execute(&mut *conn)
            .await
            .map_err(|e| self.error(&e))?;
        sqlx::query(sql::DELETE_APPROVAL).bind(id).execute(&mut *conn).await.map_err(|e| self.error(&e))?;
        sqlx::query(sql::APPEND_EVENT)
            .bind(id)
            .bind("cancelled")
            .bind(serde_json::json!({ "reason": reason }).to_string())
            .bind(run.updated_ms)
            .execute(&mut *conn)
            .await
            .map_err(|e| self.error(&e))?;
        Ok(run)
    }

    async fn decide_in(
        &self,
        conn: &mut SqliteConnection,
        id: &str,
        call: &PendingCall,
        decision: Decision,
    ) -> StoreResult<Approval> {
        let row = sqlx::query(sql::RUN_OWNER).bind(id).fetch_optional(&mut *conn).await.map_err(|e| self.error(&e))?;
        let Some(row) = row else { return Err(StoreError::NoRun(id.to_string())) };
        let status = self.decode_status(&row)?;
        let row =
            sqlx::query(sql::SELECT_APPROVAL).bind(id).fetch_optional(&mut *conn).await.map_err(|e| self.error(&e))?;
        let current = match row {
            Some(row) => Some(self.decode_approval(id, &row)?),
            None => None,
        };
        let mut approval = check_decision(id, call, decision, status, current)?;
        sqlx::query(sql::DECIDE)
            .bind(id)
            .bind(decision.as_str())
            .bind(to_i64(call.seq, "approval sequence number")?)
            .bind(&call.args_hash)
            .execute(&mut *conn)
            .await
            .map_err(|e| self.error(&e))?;
        approval.decision = Some(decision);
        Ok(approval)
    }
}

#[async_trait::async_trait]
impl Store for SqliteStore {
    fn location(&self) -> String {
        self.location.clone()
    }

    async fn connect_all(&self) -> StoreResult<()> {
        // Held together, so that each acquire must open a new connection.
        let mut held = Vec::new();
        for _ in 0..READERS {
            held.push(self.reader.acquire().await.map_err(|e| self.error(&e))?);
        }
        Ok(())
    }

    async fn create_run(&self, new: NewRun) -> StoreResult<Run> {
        let run = new.into_run();
        let Some(tenant) = run.tenant.clone() else {
            let mut conn = self.writer.single().await?;
            let result = self.create_run_in(&mut conn, run).await;
            return conn.end(result).await;
        };
        // A tenant's run: a taken id, then a missing tenant, are named before
        // anything about its session (as every backend does).
        let mut tx = self.writer.turn().await?;
        let result = async {
            let taken = sqlx::query(sql::RUN_EXISTS)
                .bind(&run.id)
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| self.error(&e))?;
            if taken.is_some() {
                return Err(StoreError::Conflict(run_exists(&run.id)));
            }
            self.check_tenant(&mut tx, &tenant).await?;
            self.create_run_in(&mut tx, run).await
        }
        .await;
        tx.end(result).await
    }

    async fn run(&self, id: &str) -> StoreResult<Option<Run>> {
        let mut conn = self.reader.acquire().await.map_err(|e| self.error(&e))?;
        self.fetch_run(&mut conn, id).await
    }

    async fn runs(&self, status: Option<RunStatus>, limit: usize) -> StoreResult<Vec<Run>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = match status {
            Some(s) => sqlx::query(sql::LIST_RUNS_BY_STATUS).bind(s.as_str()).bind(limit).fetch_all(&self.reader).await,
            None => sqlx::query(sql::LIST_RUNS).bind(limit).fetch_all(&self.reader).await,
        }
        .map_err(|e| self.error(&e))?;
        rows.iter().map(|r| self.decode_run(r)).collect()
    }

    async fn commit(&self, id: &str, owner: &str, batch: Batch) -> StoreResult<()> {
        // The common case, one host call's entry and nothing else, is one
        // autocommit statement whose lease check rides in the insert: the
        // same cost as a bare insert (see benches/journal.rs).
        if let ([e], [], [], None) = (&batch.journal[..], &batch.events[..], &batch.checkpoints[..], &batch.thread) {
            let mut conn = self.writer.single().await?;
            let inserted = sqlx::query(sql::APPEND_ENTRY_IF_OWNER)
                .bind(id)
                .bind(to_i64(e.seq, "sequence number")?)
                .bind(to_i64(e.end, "end sequence number")?)
                .bind(&e.interface)
                .bind(&e.function)
                .bind(&e.args_hash)
                .bind(&e.result)
                .bind(owner)
                .execute(&mut *conn)
                .await;
            let result = match self.entry_written(inserted, id, e.seq) {
                Ok(0) => Err(self.why_not_owned(&mut conn, id, owner).await),
                Ok(_) => Ok(()),
                Err(e) => Err(e),
            };
            return conn.end(result).await;
        }
        if batch.is_empty() {
            let mut conn = self.writer.single().await?;
            let result = self.check_owner(&mut conn, id, owner).await;
            return conn.end(result).await;
        }
        let mut tx = self.writer.turn().await?;
        let result = async {
            self.owned_for(&mut tx, id, owner, batch.thread.as_ref()).await?;
            self.write_batch(&mut tx, id, batch).await
        }
        .await;
        tx.end(result).await
    }

    async fn transition(&self, id: &str, owner: &str, batch: Batch, to: Transition) -> StoreResult<Run> {
        let mut tx = self.writer.turn().await?;
        let result = self.transition_in(&mut tx, id, owner, batch, to).await;
        tx.end(result).await
    }

    async fn claim(
        &self,
        id: &str,
        how: Claim,
        lease: Lease,
        resume_input: Option<String>,
        now: i64,
    ) -> StoreResult<Run> {
        let mut tx = self.writer.turn().await?;
        let result = self.claim_in(&mut tx, id, how, lease, resume_input, now).await;
        tx.end(result).await
    }

    async fn renew_leases(&self, owner: &str, ids: &[String], until_ms: i64) -> StoreResult<Vec<String>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        // Strings and integers always serialize.
        let list = serde_json::to_string(ids).unwrap_or_else(|_| "[]".into());
        let mut conn = self.writer.single().await?;
        let result = sqlx::query_scalar(sql::RENEW_LEASES_SQLITE)
            .bind(owner)
            .bind(until_ms)
            .bind(list)
            .fetch_all(&mut *conn)
            .await
            .map_err(|e| self.error(&e));
        conn.end(result).await
    }

    async fn orphans(&self, now: i64) -> StoreResult<Vec<Run>> {
        let rows = sqlx::query(sql::ORPHANS).bind(now).fetch_all(&self.reader).await.map_err(|e| self.error(&e))?;
        rows.iter().map(|r| self.decode_run(r)).collect()
    }

    async fn cancel(&self, id: &str, reason: &str) -> StoreResult<Run> {
        let mut tx = self.writer.turn().await?;
        let result = self.cancel_in(&mut tx, id, reason).await;
        tx.end(result).await
    }

    async fn journal(&self, id: &str) -> StoreResult<Vec<Entry>> {
        let rows = sqlx::query(sql::JOURNAL).bind(id).fetch_all(&self.reader).await.map_err(|e| self.error(&e))?;
        rows.iter().map(|row| self.decode(|errors| rows::entry(id, row, errors))).collect()
    }

    async fn events(&self, id: &str, after: i64, limit: usize) -> StoreResult<Vec<StoredEvent>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = sqlx::query(sql::EVENTS)
            .bind(id)
            .bind(after)
            .bind(limit)
            .fetch_all(&self.reader)
            .await
            .map_err(|e| self.error(&e))?;
        rows.iter().map(|row| self.decode(|errors| rows::event(row, errors))).collect()
    }

    async fn checkpoints(&self, id: &str) -> StoreResult<Vec<(String, Value)>> {
        let rows = sqlx::query(sql::CHECKPOINTS).bind(id).fetch_all(&self.reader).await.map_err(|e| self.error(&e))?;
        rows.iter().map(|row| self.decode(|errors| rows::checkpoint(id, row, errors))).collect()
    }

    async fn approval(&self, id: &str) -> StoreResult<Option<Approval>> {
        let row = sqlx::query(sql::SELECT_APPROVAL)
            .bind(id)
            .fetch_optional(&self.reader)
            .await
            .map_err(|e| self.error(&e))?;
        row.map(|r| self.decode_approval(id, &r)).transpose()
    }

    async fn decide(&self, id: &str, call: &PendingCall, decision: Decision) -> StoreResult<Approval> {
        let mut tx = self.writer.turn().await?;
        let result = self.decide_in(&mut tx, id, call, decision).await;
        tx.end(result).await
    }

    async fn clear_approval(&self, id: &str, owner: &str) -> StoreResult<()> {
        let mut tx = self.writer.turn().await?;
        let result = async {
            self.check_owner(&mut tx, id, owner).await?;
            sqlx::query(sql::DELETE_APPROVAL).bind(id).execute(&mut *tx).await.map_err(|e| self.error(&e))?;
            Ok(())
        }
        .await;
        tx.end(result).await
    }

    async fn enqueue(&self, new: NewJob) -> StoreResult<Job> {
        if let Some(reason) = check_new_job(&new) {
            return Err(StoreError::Conflict(reason));
        }
        let mut tx = self.writer.turn().await?;
        let result = async {
            let placed: Option<(String, i64)> = sqlx::query_as(sql::INSERT_JOB_SQLITE)
                .bind(&new.id)
                .bind(&new.run)
                .bind(new.kind.as_str())
                .bind(new.payload.to_string())
                .bind(JobStatus::Queued.as_str())
                .bind(0_i64)
                .bind(i64::from(new.max_attempts))
                .bind(new.backoff_ms)
                .bind(new.not_before_ms)
                .bind(None::<String>)
                .bind(None::<i64>)
                .bind(None::<i64>)
                .bind(None::<String>)
                .bind(new.created_ms)
                .bind(new.created_ms)
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| self.error(&e))?;
            match placed {
                Some((queue, turn)) => Ok(new.into_job(Some(queue).filter(|q| !q.is_empty()), turn)),
                None => {
                    let run = sqlx::query(sql::RUN_EXISTS)
                        .bind(&new.run)
                        .fetch_optional(&mut *tx)
                        .await
                        .map_err(|e| self.error(&e))?;
                    Err(match run {
                        None => StoreError::NoRun(new.run.clone()),
                        Some(_) => StoreError::Conflict(job_exists(&new.id)),
                    })
                }
            }
        }
        .await;
        tx.end(result).await
    }

    async fn claim_job_unless(
        &self,
        worker: &str,
        lease_ms: i64,
        now: i64,
        held_back: &[String],
    ) -> StoreResult<Option<Job>> {
        let mut tx = self.writer.turn().await?;
        let result = self.claim_job_in(&mut tx, worker, lease_ms, now, held_back).await;
        tx.end(result).await
    }

    async fn heartbeat_jobs(&self, tokens: &[i64], lease_ms: i64, now: i64) -> StoreResult<Vec<i64>> {
        if tokens.is_empty() {
            return Ok(Vec::new());
        }
        let list = serde_json::to_string(tokens).unwrap_or_else(|_| "[]".into());
        let mut conn = self.writer.single().await?;
        let result = sqlx::query_scalar(sql::HEARTBEAT_JOBS_SQLITE)
            .bind(now.saturating_add(lease_ms))
            .bind(now)
            .bind(list)
            .fetch_all(&mut *conn)
            .await
            .map_err(|e| self.error(&e));
        conn.end(result).await
    }

    async fn complete_job(&self, id: &str, lease: &JobLease, now: i64) -> StoreResult<Job> {
        let mut tx = self.writer.turn().await?;
        let result = self.change_job(&mut tx, id, lease, |job| job.complete(now)).await;
        tx.end(result).await
    }

    async fn fail_job(&self, id: &str, lease: &JobLease, error: &str, retry: Retry, now: i64) -> StoreResult<Job> {
        let mut tx = self.writer.turn().await?;
        let result = async {
            let mut job = self.change_job(&mut tx, id, lease, |job| job.fail(error, retry, now)).await?;
            if job.status == JobStatus::Queued {
                job.turn = sqlx::query_scalar(sql::RETRY_TURN_SQLITE)
                    .bind(id)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(|e| self.error(&e))?;
            }
            Ok(job)
        }
        .await;
        tx.end(result).await
    }

    async fn postpone_job(
        &self,
        id: &str,
        lease: &JobLease,
        reason: &str,
        not_before_ms: i64,
        now: i64,
    ) -> StoreResult<Job> {
        let mut tx = self.writer.turn().await?;
        let result = async {
            let mut same = false;
            let job = self
                .change_job(&mut tx, id, lease, |job| {
                    same = job.error.as_deref() == Some(reason);
                    job.postpone(reason, not_before_ms, now);
                })
                .await?;
            if same {
                return Ok(job);
            }
            sqlx::query(sql::APPEND_EVENT)
                .bind(&job.run)
                .bind("held")
                .bind(serde_json::json!({"reason": reason, "until_ms": not_before_ms}).to_string())
                .bind(now)
                .execute(&mut *tx)
                .await
                .map_err(|e| self.error(&e))?;
            Ok(job)
        }
        .await;
        tx.end(result).await
    }

    async fn job(&self, id: &str) -> StoreResult<Option<Job>> {
        let mut conn = self.reader.acquire().await.map_err(|e| self.error(&e))?;
        self.fetch_job(&mut conn, id).await
    }

    async fn jobs(&self, status: Option<JobStatus>, limit: usize) -> StoreResult<Vec<Job>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = match status {
            Some(s) => sqlx::query(sql::LIST_JOBS_BY_STATUS).bind(s.as_str()).bind(limit).fetch_all(&self.reader).await,
            None => sqlx::query(sql::LIST_JOBS).bind(limit).fetch_all(&self.reader).await,
        }
        .map_err(|e| self.error(&e))?;
        rows.iter().map(|r| self.decode_job(r)).collect()
    }

    async fn open_session(&self, agent: &str, instance: &str, now: i64) -> StoreResult<Session> {
        let mut conn = self.writer.single().await?;
        let row = sqlx::query(sql::OPEN_SESSION)
            .bind(new_session_id())
            .bind(agent)
            .bind(instance)
            .bind(now)
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| self.error(&e));
        let result = row.and_then(|row| self.decode_session(&row));
        conn.end(result).await
    }

    async fn session(&self, agent: &str, instance: &str) -> StoreResult<Option<Session>> {
        let row = sqlx::query(sql::SELECT_SESSION)
            .bind(agent)
            .bind(instance)
            .fetch_optional(&self.reader)
            .await
            .map_err(|e| self.error(&e))?;
        row.map(|r| self.decode_session(&r)).transpose()
    }

    async fn session_by_id(&self, id: &str) -> StoreResult<Option<Session>> {
        let mut conn = self.reader.acquire().await.map_err(|e| self.error(&e))?;
        self.fetch_session(&mut conn, id).await
    }

    async fn sessions(&self, agent: Option<&str>, limit: usize) -> StoreResult<Vec<Session>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = match agent {
            Some(a) => sqlx::query(sql::LIST_SESSIONS_BY_AGENT).bind(a).bind(limit).fetch_all(&self.reader).await,
            None => sqlx::query(sql::LIST_SESSIONS).bind(limit).fetch_all(&self.reader).await,
        }
        .map_err(|e| self.error(&e))?;
        rows.iter().map(|r| self.decode_session(r)).collect()
    }

    async fn sessions_with_prefix(&self, prefix: &str, limit: usize) -> StoreResult<Vec<Session>> {
        let Some(end) = crate::prefix_end(prefix) else { return self.sessions(None, limit).await };
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = sqlx::query(sql::LIST_SESSIONS_IN_RANGE)
            .bind(prefix)
            .bind(end)
            .bind(limit)
            .fetch_all(&self.reader)
            .await
            .map_err(|e| self.error(&e))?;
        rows.iter().map(|r| self.decode_session(r)).collect()
    }

    async fn thread(&self, id: &str) -> StoreResult<Vec<Value>> {
        let rows = sqlx::query(sql::THREAD).bind(id).fetch_all(&self.reader).await.map_err(|e| self.error(&e))?;
        rows.iter().map(|row| self.decode(|errors| rows::message(id, row, errors))).collect()
    }

    async fn append_thread(&self, id: &str, expected: u64, messages: Vec<Value>, now: i64) -> StoreResult<Session> {
        let mut tx = self.writer.turn().await?;
        let result = self.append_thread_in(&mut tx, id, expected, messages, now).await;
        tx.end(result).await
    }

    async fn session_runs(&self, id: &str) -> StoreResult<Vec<Run>> {
        let rows = sqlx::query(sql::SESSION_RUNS).bind(id).fetch_all(&self.reader).await.map_err(|e| self.error(&e))?;
        rows.iter().map(|r| self.decode_run(r)).collect()
    }

    async fn delete_session(&self, id: &str) -> StoreResult<bool> {
        let mut conn = self.writer.single().await?;
        let deleted = sqlx::query(sql::DELETE_SESSION).bind(id).execute(&mut *conn).await.map_err(|e| self.error(&e));
        let result = deleted.map(|d| d.rows_affected() > 0);
        conn.end(result).await
    }

    async fn expire_sessions(&self, updated_before_ms: i64) -> StoreResult<Vec<String>> {
        let mut conn = self.writer.single().await?;
        // One statement: its check for prompts in progress and its delete
        // run under the same write lock.
        let ids: StoreResult<Vec<String>> = sqlx::query_scalar(sql::EXPIRE_SESSIONS)
            .bind(updated_before_ms)
            .fetch_all(&mut *conn)
            .await
            .map_err(|e| self.error(&e));
        let mut ids = conn.end(ids).await?;
        ids.sort();
        Ok(ids)
    }

    async fn create_tenant(&self, new: NewTenant) -> StoreResult<Tenant> {
        let tenant = new.into_tenant();
        let mut tx = self.writer.turn().await?;
        let result = async {
            let inserted = sqlx::query(sql::INSERT_TENANT)
                .bind(&tenant.id)
                .bind(&tenant.name)
                .bind(tenant.policy.to_string())
                .bind(AUDIT_GENESIS)
                .bind(tenant.created_ms)
                .execute(&mut *tx)
                .await
                .map_err(|e| self.error(&e))?;
            if inserted.rows_affected() == 0 {
                let taken = sqlx::query(sql::TENANT_ID)
                    .bind(&tenant.id)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(|e| self.error(&e))?;
                return Err(StoreError::Conflict(match taken {
                    Some(_) => tenant_exists(&tenant.id),
                    None => tenant_name_taken(&tenant.name),
                }));
            }
            Ok(tenant)
        }
        .await;
        tx.end(result).await
    }

    async fn tenant(&self, id: &str) -> StoreResult<Option<Tenant>> {
        let row =
            sqlx::query(sql::SELECT_TENANT).bind(id).fetch_optional(&self.reader).await.map_err(|e| self.error(&e))?;
        row.map(|r| self.decode_tenant(&r)).transpose()
    }

    async fn tenant_by_name(&self, name: &str) -> StoreResult<Option<Tenant>> {
        let row = sqlx::query(sql::SELECT_TENANT_BY_NAME)
            .bind(name)
            .fetch_optional(&self.reader)
            .await
            .map_err(|e| self.error(&e))?;
        row.map(|r| self.decode_tenant(&r)).transpose()
    }

    async fn tenants(&self) -> StoreResult<Vec<Tenant>> {
        let rows = sqlx::query(sql::LIST_TENANTS).fetch_all(&self.reader).await.map_err(|e| self.error(&e))?;
        rows.iter().map(|r| self.decode_tenant(r)).collect()
    }

    async fn update_tenant(
        &self,
        id: &str,
        policy: Option<Value>,
        disabled: Option<bool>,
        now: i64,
    ) -> StoreResult<Tenant> {
        let mut conn = self.writer.single().await?;
        let row = sqlx::query(sql::UPDATE_TENANT)
            .bind(id)
            .bind(policy.map(|p| p.to_string()))
            .bind(disabled.map(i64::from))
            .bind(now)
            .fetch_optional(&mut *conn)
            .await
            .map_err(|e| self.error(&e));
        let result = match row {
            Ok(Some(row)) => self.decode_tenant(&row),
            Ok(None) => Err(StoreError::NoTenant(id.to_string())),
            Err(e) => Err(e),
        };
        conn.end(result).await
    }

    async fn create_key(&self, new: NewApiKey) -> StoreResult<ApiKey> {
        if let Some(reason) = check_new_key(&new) {
            return Err(StoreError::Conflict(reason));
        }
        let key = new.into_key();
        let mut tx = self.writer.turn().await?;
        let result = async {
            let inserted = sqlx::query(sql::INSERT_KEY)
                .bind(&key.id)
                .bind(&key.tenant)
                .bind(&key.hash)
                .bind(key.created_ms)
                .execute(&mut *tx)
                .await;
            let inserted = match inserted {
                Ok(done) => done,
                // The one foreign key: the key's tenant.
                Err(sqlx::Error::Database(db)) if db.is_foreign_key_violation() => {
                    return Err(StoreError::NoTenant(key.tenant.clone().unwrap_or_default()));
                }
                Err(e) => return Err(self.error(&e)),
            };
            if inserted.rows_affected() == 0 {
                let taken = sqlx::query(sql::KEY_ID)
                    .bind(&key.id)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(|e| self.error(&e))?;
                return Err(StoreError::Conflict(match taken {
                    Some(_) => key_exists(&key.id),
                    None => key_hash_taken(&key.id),
                }));
            }
            Ok(key)
        }
        .await;
        tx.end(result).await
    }

    async fn key_by_hash(&self, hash: &str) -> StoreResult<Option<ApiKey>> {
        let row = sqlx::query(sql::SELECT_KEY_BY_HASH)
            .bind(hash)
            .fetch_optional(&self.reader)
            .await
            .map_err(|e| self.error(&e))?;
        row.map(|r| self.decode_key(&r)).transpose()
    }

    async fn keys(&self, tenant: Option<&str>) -> StoreResult<Vec<ApiKey>> {
        let rows = match tenant {
            Some(t) => sqlx::query(sql::LIST_TENANT_KEYS).bind(t).fetch_all(&self.reader).await,
            None => sqlx::query(sql::LIST_ADMIN_KEYS).fetch_all(&self.reader).await,
        }
        .map_err(|e| self.error(&e))?;
        rows.iter().map(|r| self.decode_key(r)).collect()
    }

    async fn revoke_key(&self, id: &str, now: i64) -> StoreResult<ApiKey> {
        let mut conn = self.writer.single().await?;
        let row = sqlx::query(sql::REVOKE_KEY)
            .bind(id)
            .bind(now)
            .fetch_optional(&mut *conn)
            .await
            .map_err(|e| self.error(&e));
        let result = match row {
            Ok(Some(row)) => self.decode_key(&row),
            Ok(None) => Err(StoreError::NoKey(id.to_string())),
            Err(e) => Err(e),
        };
        conn.end(result).await
    }

    async fn open_sign_in(&self, new: SignIn) -> StoreResult<()> {
        let mut tx = self.writer.turn().await?;
        let result = async {
            sqlx::query(sql::PURGE_SIGN_INS)
                .bind(new.created_ms)
                .execute(&mut *tx)
                .await
                .map_err(|e| self.error(&e))?;
            let inserted = sqlx::query(sql::INSERT_SIGN_IN)
                .bind(&new.id_hash)
                .bind(&new.tenant)
                .bind(&new.key_hash)
                .bind(new.created_ms)
                .bind(new.expires_ms)
                .execute(&mut *tx)
                .await;
            match inserted {
                Ok(_) => Ok(()),
                Err(sqlx::Error::Database(db)) if db.is_foreign_key_violation() => {
                    Err(StoreError::NoTenant(new.tenant.clone()))
                }
                Err(sqlx::Error::Database(db)) if db.is_unique_violation() => {
                    Err(StoreError::Conflict(sign_in_taken()))
                }
                Err(e) => Err(self.error(&e)),
            }
        }
        .await;
        tx.end(result).await
    }

    async fn sign_in(&self, id_hash: &str, now_ms: i64) -> StoreResult<Option<SignIn>> {
        let row = sqlx::query(sql::SELECT_SIGN_IN)
            .bind(id_hash)
            .bind(now_ms)
            .fetch_optional(&self.reader)
            .await
            .map_err(|e| self.error(&e))?;
        row.map(|r| self.decode(|errors| rows::sign_in(&r, errors))).transpose()
    }

    async fn end_sign_in(&self, id_hash: &str) -> StoreResult<()> {
        let mut conn = self.writer.single().await?;
        let result = sqlx::query(sql::DELETE_SIGN_IN).bind(id_hash).execute(&mut *conn).await;
        conn.end(result.map(drop).map_err(|e| self.error(&e))).await
    }

    async fn put_plugin(&self, new: NewPlugin) -> StoreResult<(StoredPlugin, bool)> {
        if let Some(reason) = check_new_plugin(&new) {
            return Err(StoreError::Conflict(reason));
        }
        let plugin = new.to_stored();
        let mut tx = self.writer.turn().await?;
        let result = async {
            let inserted = sqlx::query(sql::INSERT_PLUGIN)
                .bind(&plugin.tenant)
                .bind(&plugin.sha256)
                .bind(&plugin.name)
                .bind(&plugin.world)
                .bind(to_i64(plugin.size, "plugin size")?)
                .bind(plugin.created_ms)
                .execute(&mut *tx)
                .await;
            let inserted = match inserted {
                Ok(done) => done,
                // The one foreign key: the plugin's tenant.
                Err(sqlx::Error::Database(db)) if db.is_foreign_key_violation() => {
                    return Err(StoreError::NoTenant(plugin.tenant.clone()));
                }
                Err(e) => return Err(self.error(&e)),
            };
            if inserted.rows_affected() == 0 {
                // The tenant has it: the bytes are the same, by their hash.
                let row = sqlx::query(sql::SELECT_PLUGIN)
                    .bind(&plugin.tenant)
                    .bind(&plugin.sha256)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(|e| self.error(&e))?;
                return Ok((self.decode_plugin(&row)?, false));
            }
            sqlx::query(sql::INSERT_PLUGIN_BLOB)
                .bind(&plugin.tenant)
                .bind(&plugin.sha256)
                .bind(&new.bytes)
                .execute(&mut *tx)
                .await
                .map_err(|e| self.error(&e))?;
            Ok((plugin, true))
        }
        .await;
        tx.end(result).await
    }

    async fn plugin(&self, tenant: &str, sha256: &str) -> StoreResult<Option<StoredPlugin>> {
        let row = sqlx::query(sql::SELECT_PLUGIN)
            .bind(tenant)
            .bind(sha256)
            .fetch_optional(&self.reader)
            .await
            .map_err(|e| self.error(&e))?;
        row.map(|r| self.decode_plugin(&r)).transpose()
    }

    async fn plugin_bytes(&self, tenant: &str, sha256: &str) -> StoreResult<Option<Vec<u8>>> {
        let row = sqlx::query(sql::PLUGIN_BYTES)
            .bind(tenant)
            .bind(sha256)
            .fetch_optional(&self.reader)
            .await
            .map_err(|e| self.error(&e))?;
        row.map(|r| self.decode(|errors| rows::plugin_bytes(&r, errors))).transpose()
    }

    async fn plugins(&self, tenant: &str) -> StoreResult<Vec<StoredPlugin>> {
        let rows =
            sqlx::query(sql::LIST_PLUGINS).bind(tenant).fetch_all(&self.reader).await.map_err(|e| self.error(&e))?;
        rows.iter().map(|r| self.decode_plugin(r)).collect()
    }

    async fn tenant_runs(&self, tenant: &str, status: Option<RunStatus>, limit: usize) -> StoreResult<Vec<Run>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = match status {
            Some(s) => {
                sqlx::query(sql::LIST_TENANT_RUNS_BY_STATUS)
                    .bind(tenant)
                    .bind(s.as_str())
                    .bind(limit)
                    .fetch_all(&self.reader)
                    .await
            }
            None => sqlx::query(sql::LIST_TENANT_RUNS).bind(tenant).bind(limit).fetch_all(&self.reader).await,
        }
        .map_err(|e| self.error(&e))?;
        rows.iter().map(|r| self.decode_run(r)).collect()
    }

    async fn append_audit(&self, tenant: &str, kind: &str, data: &Value, at_ms: i64) -> StoreResult<AuditEntry> {
        // `BEGIN IMMEDIATE` holds the file's write lock from the head's read
        // to the commit: appends, in any number of processes, take turns.
        let mut tx = self.writer.turn().await?;
        let result = async {
            let row =
                sqlx::query(sql::AUDIT_HEAD).bind(tenant).fetch_optional(&mut *tx).await.map_err(|e| self.error(&e))?;
            let Some(row) = row else { return Err(StoreError::NoTenant(tenant.to_string())) };
            let head = self.decode(|errors| rows::audit_head(tenant, &row, errors))?;
            let entry = next_audit_entry(tenant, head, kind, data, at_ms);
            let seq = to_i64(entry.seq, "audit sequence number")?;
            sqlx::query(sql::APPEND_AUDIT)
                .bind(tenant)
                .bind(seq)
                .bind(&entry.kind)
                .bind(&entry.data)
                .bind(entry.at_ms)
                .bind(&entry.prev)
                .bind(&entry.hash)
                .execute(&mut *tx)
                .await
                .map_err(|e| self.error(&e))?;
            sqlx::query(sql::ADVANCE_AUDIT)
                .bind(tenant)
                .bind(seq)
                .bind(&entry.hash)
                .execute(&mut *tx)
                .await
                .map_err(|e| self.error(&e))?;
            Ok(entry)
        }
        .await;
        tx.end(result).await
    }

    async fn audit(&self, tenant: &str, after_seq: u64, limit: usize) -> StoreResult<Vec<AuditEntry>> {
        // Past the largest sequence number a store holds: nothing.
        let Ok(after) = i64::try_from(after_seq) else { return Ok(Vec::new()) };
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = sqlx::query(sql::AUDIT)
            .bind(tenant)
            .bind(after)
            .bind(limit)
            .fetch_all(&self.reader)
            .await
            .map_err(|e| self.error(&e))?;
        rows.iter().map(|r| self.decode(|errors| rows::audit_entry(r, errors))).collect()
    }

    async fn audit_head(&self, tenant: &str) -> StoreResult<Option<(u64, String)>> {
        let row =
            sqlx::query(sql::AUDIT_HEAD).bind(tenant).fetch_optional(&self.reader).await.map_err(|e| self.error(&e))?;
        match row {
            Some(row) => self.decode(|errors| rows::audit_head(tenant, &row, errors)),
            None => Ok(None),
        }
    }

    async fn audit_heads(&self) -> StoreResult<Vec<(String, u64, String)>> {
        let rows = sqlx::query(sql::AUDIT_HEADS).fetch_all(&self.reader).await.map_err(|e| self.error(&e))?;
        rows.iter().map(|r| self.decode(|errors| rows::audit_heads_row(r, errors))).collect()
    }

    async fn add_usage(
        &self,
        tenant: &str,
        at_ms: i64,
        runs: u64,
        tokens: u64,
        cpu_ticks: u64,
        egress_bytes: u64,
    ) -> StoreResult<()> {
        let (runs, tokens) = (to_i64(runs, "run count")?, to_i64(tokens, "token count")?);
        let (cpu_ticks, egress_bytes) =
            (to_i64(cpu_ticks, "CPU tick count")?, to_i64(egress_bytes, "egress byte count")?);
        let mut conn = self.writer.single().await?;
        let added = sqlx::query(sql::ADD_USAGE)
            .bind(tenant)
            .bind(usage_period(at_ms))
            .bind(runs)
            .bind(tokens)
            .bind(cpu_ticks)
            .bind(egress_bytes)
            .execute(&mut *conn)
            .await;
        let result = match added {
            Ok(_) => Ok(()),
            // The one foreign key: the tenant.
            Err(sqlx::Error::Database(db)) if db.is_foreign_key_violation() => {
                Err(StoreError::NoTenant(tenant.to_string()))
            }
            Err(e) => Err(self.error(&e)),
        };
        conn.end(result).await
    }

    async fn usage(&self, tenant: &str, since_ms: i64) -> StoreResult<Vec<Usage>> {
        let rows = sqlx::query(sql::USAGE)
            .bind(tenant)
            .bind(usage_period(since_ms))
            .fetch_all(&self.reader)
            .await
            .map_err(|e| self.error(&e))?;
        rows.iter().map(|r| self.decode(|errors| rows::usage(r, errors))).collect()
    }

    async fn add_run_usage(&self, run: &str, used: RunUsage) -> StoreResult<()> {
        let tokens = to_i64(used.tokens, "token count")?;
        let (cpu_ticks, egress_bytes) =
            (to_i64(used.cpu_ticks, "CPU tick count")?, to_i64(used.egress_bytes, "egress byte count")?);
        let mut conn = self.writer.single().await?;
        let added = sqlx::query(sql::ADD_RUN_USAGE)
            .bind(run)
            .bind(tokens)
            .bind(cpu_ticks)
            .bind(egress_bytes)
            .execute(&mut *conn)
            .await;
        let result = match added {
            Ok(_) => Ok(()),
            // The one foreign key: the run.
            Err(sqlx::Error::Database(db)) if db.is_foreign_key_violation() => Err(StoreError::NoRun(run.to_string())),
            Err(e) => Err(self.error(&e)),
        };
        conn.end(result).await
    }

    async fn run_usage(&self, run: &str) -> StoreResult<RunUsage> {
        let row =
            sqlx::query(sql::RUN_USAGE).bind(run).fetch_optional(&self.reader).await.map_err(|e| self.error(&e))?;
        match row {
            Some(row) => self.decode(|errors| rows::run_usage(&row, run, errors)),
            None => Ok(RunUsage::default()),
        }
    }

    async fn live_runs(&self, tenant: &str) -> StoreResult<u64> {
        let n: i64 = sqlx::query_scalar(sql::LIVE_RUNS)
            .bind(tenant)
            .fetch_one(&self.reader)
            .await
            .map_err(|e| self.error(&e))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn has_live_job(&self, run: &str) -> StoreResult<bool> {
        let n: i64 = sqlx::query_scalar(sql::LIVE_JOBS_OF_RUN)
            .bind(run)
            .fetch_one(&self.reader)
            .await
            .map_err(|e| self.error(&e))?;
        Ok(n > 0)
    }

    async fn running_runs(&self, tenant: &str) -> StoreResult<u64> {
        let n: i64 = sqlx::query_scalar(sql::RUNNING_RUNS)
            .bind(tenant)
            .fetch_one(&self.reader)
            .await
            .map_err(|e| self.error(&e))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }
}

/// Creates the file's missing parent directories (0700) and the file
/// itself (0600), or checks that an existing file starts like an SQLite
/// database, without writing to it.
fn prepare_file(path: &Path, location: &str) -> StoreResult<()> {
    let open_err = |reason: String| StoreError::Open { location: location.to_string(), reason };
    if let Some(dir) = path.parent() {
        create_private_dirs(dir)
            .map_err(|e| open_err(format!("cannot create the directory {}: {e}", dir.display())))?;
    }
    match create_private_file(path) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(open_err(format!("cannot create the file: {e}"))),
    }
    if path.is_dir() {
        return Err(open_err("it is a directory; give the path of a file in it, such as nexo.db".into()));
    }
    let mut head = Vec::with_capacity(SQLITE_HEADER.len());
    std::fs::File::open(path)
        .and_then(|f| f.take(SQLITE_HEADER.len() as u64).read_to_end(&mut head))
        .map_err(|e| open_err(format!("cannot read the file: {e}")))?;
    if !head.is_empty() && head != SQLITE_HEADER {
        return Err(StoreError::Corrupt {
            location: location.to_string(),
            reason: "the file does not begin with SQLite's header, so it is not an SQLite database".into(),
        });
    }
    Ok(())
}

/// Creates `dir` and its missing ancestors with mode 0700 whatever the
/// umask; directories that exist are left as they are.
fn create_private_dirs(dir: &Path) -> std::io::Result<()> {
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_private_dirs(parent)?;
    }
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    match builder.create(dir) {
        Ok(()) => {
            set_mode(dir, 0o700)?;
            sync_parent(dir)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(e),
    }
}

/// Creates an empty file with mode 0600 whatever the umask, so SQLite
/// never creates it with the default mode; `AlreadyExists` if it is there.
fn create_private_file(path: &Path) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let file = options.open(path)?;
    #[cfg(unix)]
    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    file.sync_all()?;
    sync_parent(path)
}

/// Makes a new directory entry durable: SQLite syncs what it writes into
/// the file, not the directory that names the file.
fn sync_parent(path: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        std::fs::File::open(parent)?.sync_all()
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        Ok(())
    }
}

/// Gives SQLite's `-wal` and `-shm` files mode 0600 (SQLite copies the
/// database's mode, but a file left by an older process may differ).
fn restrict_side_files(path: &Path) {
    for suffix in ["-wal", "-shm"] {
        let mut side = path.as_os_str().to_owned();
        side.push(suffix);
        // Absent is fine; one we cannot chmod is not ours to fix.
        set_mode(Path::new(&side), 0o600).ok();
    }
}

fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(mode))
    }
    #[cfg(not(unix))]
    {
        let _ = (path, mode);
        Ok(())
    }
}

/// Finds what the file holds and brings it to [`SCHEMA_VERSION`]. Writes
/// nothing to a file it refuses.
async fn migrate(conn: &mut SqliteConnection, location: &str) -> StoreResult<()> {
    let found = inspect(conn, location).await?;
    if let Found::Nexo(version) = found
        && version > SCHEMA_VERSION
    {
        return Err(StoreError::TooNew { location: location.to_string(), found: version, supported: SCHEMA_VERSION });
    }
    use_wal(conn, location).await?;
    if matches!(found, Found::Nexo(SCHEMA_VERSION)) {
        return Ok(());
    }
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.map_err(|e| open_error(location, &e))?;
    // Another process may have migrated the file since `inspect`: look again
    // now that this one holds the write lock.
    let current = match inspect(&mut tx, location).await? {
        Found::Empty => 0,
        Found::Nexo(v) if v > SCHEMA_VERSION => {
            return Err(StoreError::TooNew { location: location.to_string(), found: v, supported: SCHEMA_VERSION });
        }
        Found::Nexo(v) => v,
    };
    for migration in sql::MIGRATIONS.iter().filter(|m| m.version > current) {
        for statement in migration.statements {
            let statement = sql::SQLITE.render(statement);
            sqlx::query(sqlx::AssertSqlSafe(statement))
                .execute(&mut *tx)
                .await
                .map_err(|e| open_error(location, &e))?;
        }
        sqlx::query(sql::RECORD_MIGRATION)
            .bind(migration.version)
            .bind(now_ms())
            .execute(&mut *tx)
            .await
            .map_err(|e| open_error(location, &e))?;
    }
    tx.commit().await.map_err(|e| open_error(location, &e))
}

/// What the file holds: nothing, or a nexo store of some version. Another
/// program's database is [`StoreError::Corrupt`].
async fn inspect(conn: &mut SqliteConnection, location: &str) -> StoreResult<Found> {
    // SQLite's own catalogue: this probe is the one backend-specific query.
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'",
    )
    .fetch_all(&mut *conn)
    .await
    .map_err(|e| open_error(location, &e))?;
    if tables.is_empty() {
        return Ok(Found::Empty);
    }
    let corrupt = |reason: String| StoreError::Corrupt { location: location.to_string(), reason };
    if !tables.iter().any(|t| t == sql::SCHEMA_TABLE) {
        let mut shown = tables.iter().take(5).map(|t| format!("`{t}`")).collect::<Vec<_>>().join(", ");
        if tables.len() > 5 {
            shown.push_str(", …");
        }
        return Err(corrupt(format!(
            "it is an SQLite database with tables of its own ({shown}) but no `{}` table: another program's",
            sql::SCHEMA_TABLE
        )));
    }
    let version: Option<i64> =
        sqlx::query_scalar(sql::SCHEMA_VERSION).fetch_one(&mut *conn).await.map_err(|e| open_error(location, &e))?;
    match version {
        Some(v) if v >= 1 => Ok(Found::Nexo(v)),
        _ => Err(corrupt(format!("its `{}` table records no schema version", sql::SCHEMA_TABLE))),
    }
}

/// Puts the file in WAL mode (a property of the file, kept across opens).
async fn use_wal(conn: &mut SqliteConnection, location: &str) -> StoreResult<()> {
    let mode: String =
        sqlx::query_scalar("PRAGMA journal_mode").fetch_one(&mut *conn).await.map_err(|e| open_error(location, &e))?;
    if mode.eq_ignore_ascii_case("wal") {
        return Ok(());
    }
    // The switch needs the file to itself, and SQLite's busy handler does
    // not wait for that: when another process opens the same new file at
    // the same moment, try again until the busy timeout runs out.
    let deadline = tokio::time::Instant::now() + BUSY_TIMEOUT;
    let mode: String = loop {
        match sqlx::query_scalar("PRAGMA journal_mode = WAL").fetch_one(&mut *conn).await {
            Ok(mode) => break mode,
            Err(e)
                if sqlite_code(&e).is_some_and(|c| c & 0xff == SQLITE_BUSY)
                    && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => return Err(open_error(location, &e)),
        }
    };
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Open {
            location: location.to_string(),
            reason: format!(
                "SQLite kept the journal mode `{mode}` instead of switching to WAL; is another process using the file?"
            ),
        });
    }
    Ok(())
}

/// An error while opening, as [`StoreError::Corrupt`] when SQLite says the
/// file is damaged or not a database, else [`StoreError::Open`].
fn open_error(location: &str, e: &sqlx::Error) -> StoreError {
    match sqlite_code(e) {
        Some(code) if is_corrupt(code) => StoreError::Corrupt { location: location.to_string(), reason: e.to_string() },
        code => StoreError::Open { location: location.to_string(), reason: format!("{e}{}", code.map_or("", hint)) },
    }
}

/// SQLite's extended result code, if `e` came from SQLite.
/// A database error as a [`StoreError`], naming the file at `location`.
fn db_error(location: &str, e: &sqlx::Error) -> StoreError {
    match sqlite_code(e) {
        Some(code) if is_corrupt(code) => StoreError::Corrupt { location: location.to_string(), reason: e.to_string() },
        Some(code) => StoreError::Backend(format!("{location}: {e}{}", hint(code))),
        None => StoreError::Backend(format!("{location}: {e}")),
    }
}

fn sqlite_code(e: &sqlx::Error) -> Option<i64> {
    match e {
        sqlx::Error::Database(db) => db.code().and_then(|c| c.parse().ok()),
        _ => None,
    }
}

fn is_corrupt(code: i64) -> bool {
    matches!(code & 0xff, SQLITE_CORRUPT | SQLITE_NOTADB)
}

/// What to do about a failure SQLite reported, when there is something.
fn hint(code: i64) -> &'static str {
    match code & 0xff {
        // Only the plain code: the busy timeout ran out (an extended one,
        // such as a stale snapshot, is not about waiting longer).
        SQLITE_BUSY if code == SQLITE_BUSY => {
            " (another process held the store's write lock for longer than the 5 s busy timeout; try again)"
        }
        SQLITE_READONLY => " (the file or its directory is read-only; give nexo write access or another --store)",
        SQLITE_FULL => " (the disk is full; free space and try again)",
        _ => "",
    }
}

fn to_i64(n: u64, what: &str) -> StoreResult<i64> {
    i64::try_from(n).map_err(|_| StoreError::Backend(format!("the {what} {n} is too large to store")))
}
