//! The PostgreSQL backend: one database that any number of nexo processes,
//! on any number of machines, share.
//!
//! It runs the statements in [`crate::sql`], the same text as SQLite, in
//! PostgreSQL's default `READ COMMITTED` isolation. Where SQLite's
//! `BEGIN IMMEDIATE` holds the whole file, a transaction here locks the one
//! row it reads before it writes (`SELECT … FOR UPDATE`: a claim, a
//! transition, a cancel), so of two processes claiming one run exactly one
//! wins and the other sees the run as the winner left it. Job claims take
//! `FOR UPDATE SKIP LOCKED`, so concurrent workers take different jobs
//! without waiting for each other.
//! An append to a session's thread updates the session's row only if its
//! message count is still the one the prompt started from; a racing append
//! waits for that row lock, then finds the new count and writes nothing.
//! A new prompt of a session, a retry of one, a batch that appends to a
//! thread and an expiry lock the session's row first (before any run's), so
//! the session rules hold between processes: one prompt in progress per
//! session, no retry behind a later prompt, no expiry under a live prompt.
//!
//! Opening migrates the schema in one transaction under an advisory lock
//! (`pg_advisory_xact_lock`), so processes that open a new database at once
//! migrate it once. A database may hold other programs' tables; it is
//! refused only when it holds tables with nexo's names but no
//! `nexo_schema`, or a schema from a newer nexo. The password in the URL
//! never appears in a message or in `Debug` output.

use std::str::FromStr;
use std::time::Duration;

use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions, PgRow};
use sqlx::{Connection, Postgres, Transaction};

use crate::jobs::check_new_job;
use crate::refusal::{
    check_decision, claim_refusal, duplicate_entry, job_exists, key_exists, key_hash_taken, not_final, not_owned,
    nothing_to_cancel, run_exists, sign_in_taken, tenant_exists, tenant_name_taken,
};
use crate::rows::{Errors, postgres as rows};
use crate::sessions::{check_latest, check_no_prompt_in_progress, check_own_session, counts, not_appended};
use crate::sql;
use crate::tenants::{check_new_key, check_new_plugin, next_audit_entry};
use crate::{
    AUDIT_GENESIS, ApiKey, Approval, AuditEntry, Batch, Claim, Decision, Entry, Job, JobLease, JobStatus, Lease,
    Location, NewApiKey, NewJob, NewPlugin, NewRun, NewTenant, PendingCall, Retry, Run, RunStatus, RunUsage,
    SCHEMA_VERSION, Session, SignIn, Store, StoreError, StoreResult, StoredEvent, StoredPlugin, Tenant, ThreadAppend,
    Transition, Usage, new_session_id, now_ms, usage_period,
};

/// Connections per store: a process runs a handful of runs and workers.
const CONNECTIONS: u32 = 8;

/// How long an operation waits for a free connection, and opening for the
/// server, before it fails.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// The advisory lock migrations run under ("nexo" and 1): one key for
/// every nexo, so that concurrent opens of one database migrate it once.
const MIGRATION_LOCK: i64 = 0x6e65_786f_0000_0001;

/// The class of the advisory locks that hold a queue's turns while a job
/// is placed in it ("nexo" and 2; the second key is the queue's hash).
const QUEUE_LOCK: i32 = 0x6e65_7802;

// PostgreSQL's SQLSTATE codes that the store names.
const INVALID_PASSWORD: &str = "28P01";
const INVALID_AUTHORIZATION: &str = "28000";
const NO_SUCH_DATABASE: &str = "3D000";
const INSUFFICIENT_PRIVILEGE: &str = "42501";
const TOO_MANY_CONNECTIONS: &str = "53300";
const SERIALIZATION_FAILURE: &str = "40001";
const DEADLOCK: &str = "40P01";
const DATA_CORRUPTED: &str = "XX001";
const INDEX_CORRUPTED: &str = "XX002";

/// A store in a PostgreSQL database.
pub struct PgStore {
    pool: PgPool,
    /// `postgres://USER@HOST:PORT/DATABASE`: never the password.
    location: String,
    /// The URL's password, as given and decoded, to keep out of messages.
    secrets: Vec<String>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the pool: its options hold the password.
        f.debug_struct("PgStore").field("location", &self.location).finish_non_exhaustive()
    }
}

/// What the database holds before migrations run.
enum Found {
    /// No nexo tables (other programs' tables may be there).
    Empty,
    /// A nexo store at this schema version.
    Nexo(i64),
}

impl PgStore {
    /// Connects to the database at `url` (`postgres://USER:PASSWORD@HOST:PORT/DATABASE`,
    /// with any parameter libpq's URLs take, such as `sslmode` or `host=/run/postgresql`)
    /// and migrates it to [`SCHEMA_VERSION`] as needed.
    ///
    /// A server that cannot be reached, a refused login or a missing
    /// database is [`StoreError::Open`], naming the cause and the fix; a
    /// database from a newer nexo is [`StoreError::TooNew`]; tables with
    /// nexo's names but no `nexo_schema`, or an empty one, are
    /// [`StoreError::Corrupt`]. Nothing is written to a database it refuses.
    pub async fn open(url: &str) -> StoreResult<PgStore> {
        let secrets = secrets(url);
        let shown = Location::Postgres(url.to_string()).to_string();
        let options = PgConnectOptions::from_str(url).map_err(|e| StoreError::Open {
            location: shown.clone(),
            reason: redact(
                &format!("the URL is not one PostgreSQL understands ({e}); write it as postgres://USER:PASSWORD@HOST:PORT/DATABASE"),
                &secrets,
            ),
        })?;
        let location = describe(&options);
        // One connection first, made directly: the pool would retry a
        // refused connection until its timeout and then only say it timed
        // out. It runs the migrations.
        let mut conn =
            PgConnection::connect_with(&options).await.map_err(|e| open_error(&location, &options, &e, &secrets))?;
        let migrated = migrate(&mut conn, &location, &secrets).await;
        conn.close().await.ok();
        migrated?;
        let pool = PgPoolOptions::new()
            .max_connections(CONNECTIONS)
            .min_connections(0)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_lazy_with(options);
        let store = PgStore { pool, location, secrets };
        Ok(store)
    }

    /// Closes every connection, waiting for them to finish.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// A database error as a [`StoreError`], naming the database.
    fn error(&self, e: &sqlx::Error) -> StoreError {
        let text = redact(&e.to_string(), &self.secrets);
        match sqlstate(e).as_deref() {
            Some(DATA_CORRUPTED | INDEX_CORRUPTED) => {
                StoreError::Corrupt { location: self.location.clone(), reason: text }
            }
            Some(SERIALIZATION_FAILURE | DEADLOCK) => StoreError::Backend(format!(
                "{}: {text} (another process changed the same rows at the same moment; try again)",
                self.location
            )),
            _ => StoreError::Backend(format!("{}: {text}{}", self.location, connection_hint(e))),
        }
    }

    fn corrupt(&self, reason: String) -> StoreError {
        StoreError::Corrupt { location: self.location.clone(), reason }
    }

    /// Runs `decode` with this store's ways of reporting a bad row.
    fn decode<T>(&self, decode: impl FnOnce(&Errors<'_>) -> StoreResult<T>) -> StoreResult<T> {
        decode(&Errors { read: &|e| self.error(e), corrupt: &|reason| self.corrupt(reason) })
    }

    fn decode_run(&self, row: &PgRow) -> StoreResult<Run> {
        self.decode(|errors| rows::run(row, errors))
    }

    fn decode_job(&self, row: &PgRow) -> StoreResult<Job> {
        self.decode(|errors| rows::job(row, errors))
    }

    fn decode_session(&self, row: &PgRow) -> StoreResult<Session> {
        self.decode(|errors| rows::session(row, errors))
    }

    fn decode_tenant(&self, row: &PgRow) -> StoreResult<Tenant> {
        self.decode(|errors| rows::tenant(row, errors))
    }

    fn decode_key(&self, row: &PgRow) -> StoreResult<ApiKey> {
        self.decode(|errors| rows::api_key(row, errors))
    }

    fn decode_plugin(&self, row: &PgRow) -> StoreResult<StoredPlugin> {
        self.decode(|errors| rows::plugin(row, errors))
    }

    async fn append_thread_in(
        &self,
        conn: &mut PgConnection,
        id: &str,
        expected: u64,
        messages: Vec<Value>,
        now: i64,
    ) -> StoreResult<Session> {
        let (before, after) = counts(expected, messages.len())?;
        // The update locks the session's row until the transaction ends: a
        // racing append waits for it, then finds the new count and writes
        // nothing.
        let row = sqlx::query(sql::ADVANCE_THREAD)
            .bind(id)
            .bind(before)
            .bind(after)
            .bind(now)
            .fetch_optional(&mut *conn)
            .await
            .map_err(|e| self.error(&e))?;
        let Some(row) = row else {
            let row = sqlx::query(sql::SELECT_SESSION_BY_ID)
                .bind(id)
                .fetch_optional(&mut *conn)
                .await
                .map_err(|e| self.error(&e))?;
            return Err(not_appended(id, expected, row.map(|r| self.decode_session(&r)).transpose()?));
        };
        let session = self.decode_session(&row)?;
        for (seq, message) in (before..).zip(&messages) {
            sqlx::query(sql::APPEND_MESSAGE)
                .bind(id)
                .bind(seq)
                .bind(message.to_string())
                .execute(&mut *conn)
                .await
                .map_err(|e| self.error(&e))?;
        }
        Ok(session)
    }

    async fn begin(&self) -> StoreResult<Transaction<'static, Postgres>> {
        self.pool.begin().await.map_err(|e| self.error(&e))
    }

    /// Commits `tx` if `result` is a success, rolls it back otherwise.
    async fn finish<T>(&self, tx: Transaction<'_, Postgres>, result: StoreResult<T>) -> StoreResult<T> {
        match result {
            Ok(value) => {
                tx.commit().await.map_err(|e| self.error(&e))?;
                Ok(value)
            }
            Err(e) => {
                // A failed rollback closes the connection; the first error is the one to tell.
                tx.rollback().await.ok();
                Err(e)
            }
        }
    }

    /// The run, its row locked until the transaction ends.
    async fn lock_run(&self, conn: &mut PgConnection, id: &str) -> StoreResult<Run> {
        let row =
            sqlx::query(sql::SELECT_RUN_LOCKED).bind(id).fetch_optional(conn).await.map_err(|e| self.error(&e))?;
        match row {
            Some(row) => self.decode_run(&row),
            None => Err(StoreError::NoRun(id.to_string())),
        }
    }

    /// Succeeds if `owner` holds the running run `id`'s lease, and keeps the
    /// row locked until the transaction ends; otherwise says why not.
    async fn check_owner(&self, conn: &mut PgConnection, id: &str, owner: &str) -> StoreResult<RunStatus> {
        let row = sqlx::query(sql::RUN_OWNER_LOCKED).bind(id).fetch_optional(conn).await.map_err(|e| self.error(&e))?;
        let Some(row) = row else { return Err(StoreError::NoRun(id.to_string())) };
        let status = self.decode(|errors| rows::run_status(&row, errors))?;
        let holder: Option<String> = self.decode(|errors| rows::lease_owner(&row, errors))?;
        if status != RunStatus::Running || holder.as_deref() != Some(owner) {
            return Err(StoreError::Conflict(not_owned(id, status)));
        }
        Ok(status)
    }

    /// Whether session `id` is there, locking its row until the
    /// transaction ends.
    async fn lock_session(&self, conn: &mut PgConnection, id: &str) -> StoreResult<bool> {
        let row =
            sqlx::query(sql::SESSION_ID_LOCKED).bind(id).fetch_optional(conn).await.map_err(|e| self.error(&e))?;
        Ok(row.is_some())
    }

    /// The run `id` if `owner` holds it, for writing a batch with `thread`,
    /// its row locked: first the session the append names must be there
    /// (its row locked before the run's, the order every session write
    /// takes), then the run must be owned and a prompt of that session.
    async fn owned_for(
        &self,
        conn: &mut PgConnection,
        id: &str,
        owner: &str,
        thread: Option<&ThreadAppend>,
    ) -> StoreResult<Run> {
        if let Some(thread) = thread
            && !self.lock_session(conn, &thread.session).await?
        {
            return Err(StoreError::NoSession(thread.session.clone()));
        }
        let run = self.lock_run(conn, id).await?;
        if run.status != RunStatus::Running || run.lease.as_ref().is_none_or(|l| l.owner != owner) {
            return Err(StoreError::Conflict(not_owned(id, run.status)));
        }
        if let Some(thread) = thread {
            check_own_session(&run, thread)?;
        }
        Ok(run)
    }

    /// Writes `batch` for run `id`, which [`PgStore::owned_for`] has
    /// checked; an error leaves the transaction to be rolled back.
    async fn write_batch(&self, conn: &mut PgConnection, id: &str, batch: Batch) -> StoreResult<()> {
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
            self.entry_written(inserted.map(|d| d.rows_affected()), id, e.seq)?;
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

    /// How many rows a journal insert wrote; a taken sequence number is a
    /// conflict.
    fn entry_written(&self, inserted: Result<u64, sqlx::Error>, id: &str, seq: u64) -> StoreResult<u64> {
        match inserted {
            Ok(rows) => Ok(rows),
            Err(sqlx::Error::Database(db)) if db.is_unique_violation() => {
                Err(StoreError::Conflict(duplicate_entry(id, seq)))
            }
            Err(e) => Err(self.error(&e)),
        }
    }

    async fn transition_in(
        &self,
        conn: &mut PgConnection,
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
        match approval {
            Some(a) => {
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
            }
            // A run that ends, or pauses for another reason, waits on no older call.
            None => {
                sqlx::query(sql::DELETE_APPROVAL).bind(id).execute(&mut *conn).await.map_err(|e| self.error(&e))?;
            }
        }
        Ok(run)
    }

    async fn claim_in(
        &self,
        conn: &mut PgConnection,
        id: &str,
        how: Claim,
        lease: Lease,
        resume_input: Option<String>,
        now: i64,
    ) -> StoreResult<Run> {
        if how == Claim::Retry {
            // A retry of a prompt takes its session's row first, as a new
            // prompt does: neither can then slip in behind the other. A run's
            // session never changes, so reading it unlocked is enough.
            let row =
                sqlx::query(sql::SELECT_RUN).bind(id).fetch_optional(&mut *conn).await.map_err(|e| self.error(&e))?;
            if let Some(session) = row.map(|r| self.decode_run(&r)).transpose()?.and_then(|r| r.session) {
                self.lock_session(conn, &session).await?;
            }
        }
        // The row lock is what makes one claimer win: a second claim waits
        // here until the first commits, then reads the run as it left it.
        let mut run = self.lock_run(conn, id).await?;
        if !how.allows(&run, now) {
            return Err(StoreError::Conflict(claim_refusal(id, how, &run)));
        }
        if how == Claim::Retry
            && let Some(session) = &run.session
        {
            let later: Option<String> = sqlx::query_scalar(sql::LATER_SESSION_RUN)
                .bind(session)
                .bind(run.created_ms)
                .bind(&run.id)
                .fetch_optional(&mut *conn)
                .await
                .map_err(|e| self.error(&e))?;
            check_latest(&run, later)?;
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

    /// Records `run`: with a session, only if it is there and has no prompt
    /// in progress, its row locked so that of two processes starting a
    /// prompt of one session at once, the second sees the first's run.
    async fn create_run_in(&self, conn: &mut PgConnection, run: Run) -> StoreResult<Run> {
        if let Some(session) = &run.session {
            // A taken id is the conflict it always was, whatever the session.
            let taken = sqlx::query(sql::RUN_EXISTS)
                .bind(&run.id)
                .fetch_optional(&mut *conn)
                .await
                .map_err(|e| self.error(&e))?;
            if taken.is_some() {
                return Err(StoreError::Conflict(run_exists(&run.id)));
            }
            // A missing tenant is named before anything about the session.
            if let Some(tenant) = &run.tenant {
                let found = sqlx::query(sql::TENANT_ID)
                    .bind(tenant)
                    .fetch_optional(&mut *conn)
                    .await
                    .map_err(|e| self.error(&e))?;
                if found.is_none() {
                    return Err(StoreError::NoTenant(tenant.clone()));
                }
            }
            if !self.lock_session(conn, session).await? {
                return Err(StoreError::NoSession(session.clone()));
            }
            // A statement of its own after the lock: it sees every run
            // committed before the lock was granted.
            let blocker = sqlx::query(sql::PROMPT_IN_PROGRESS)
                .bind(session)
                .fetch_optional(&mut *conn)
                .await
                .map_err(|e| self.error(&e))?;
            let blocker = blocker.map(|row| self.decode(|errors| rows::prompt(&row, errors))).transpose()?;
            check_no_prompt_in_progress(session, blocker)?;
        }
        let inserted = sqlx::query(sql::INSERT_RUN)
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
            // its tenant (a prompt's tenant was checked above). A taken id
            // inserts nothing, so it is named first here too.
            Err(sqlx::Error::Database(db)) if db.is_foreign_key_violation() => {
                return Err(match (run.session, run.tenant) {
                    (Some(session), _) => StoreError::NoSession(session),
                    (None, tenant) => StoreError::NoTenant(tenant.unwrap_or_default()),
                });
            }
            Err(e) => return Err(self.error(&e)),
        };
        if inserted.rows_affected() == 0 {
            return Err(StoreError::Conflict(run_exists(&run.id)));
        }
        Ok(run)
    }

    async fn cancel_in(&self, conn: &mut PgConnection, id: &str, reason: &str) -> StoreResult<Run> {
        let mut run = self.lock_run(conn, id).await?;
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
        conn: &mut PgConnection,
        id: &str,
        call: &PendingCall,
        decision: Decision,
    ) -> StoreResult<Approval> {
        let row =
            sqlx::query(sql::RUN_OWNER_LOCKED).bind(id).fetch_optional(&mut *conn).await.map_err(|e| self.error(&e))?;
        let Some(row) = row else { return Err(StoreError::NoRun(id.to_string())) };
        let status = self.decode(|errors| rows::run_status(&row, errors))?;
        let row =
            sqlx::query(sql::SELECT_APPROVAL).bind(id).fetch_optional(&mut *conn).await.map_err(|e| self.error(&e))?;
        let current = match row {
            Some(row) => Some(self.decode(|errors| rows::approval(id, &row, errors))?),
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

    /// Places a new job at its queue's next turn, its queue held
    /// ([`sql::LOCK_RUN_QUEUE`]) until the transaction ends.
    async fn enqueue_in(&self, conn: &mut PgConnection, new: NewJob) -> StoreResult<Job> {
        sqlx::query(sql::LOCK_RUN_QUEUE)
            .bind(QUEUE_LOCK)
            .bind(&new.run)
            .execute(&mut *conn)
            .await
            .map_err(|e| self.error(&e))?;
        let placed: Option<(String, i64)> = sqlx::query_as(sql::INSERT_JOB_POSTGRES)
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
            .fetch_optional(&mut *conn)
            .await
            .map_err(|e| self.error(&e))?;
        match placed {
            Some((queue, turn)) => Ok(new.into_job(Some(queue).filter(|q| !q.is_empty()), turn)),
            // The id is taken, or the run is not there.
            None => match sqlx::query(sql::RUN_EXISTS).bind(&new.run).fetch_optional(&mut *conn).await {
                Ok(None) => Err(StoreError::NoRun(new.run)),
                Ok(Some(_)) => Err(StoreError::Conflict(job_exists(&new.id))),
                Err(e) => Err(self.error(&e)),
            },
        }
    }

    /// Writes what a claim, a completion or a failure changed in `job`.
    async fn save_job(&self, conn: &mut PgConnection, job: &Job) -> StoreResult<()> {
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
        conn: &mut PgConnection,
        worker: &str,
        lease_ms: i64,
        now: i64,
        held_back: &[String],
    ) -> StoreResult<Option<Job>> {
        loop {
            let row = sqlx::query(sql::DUE_JOB_SKIP_LOCKED)
                .bind(now)
                .fetch_optional(&mut *conn)
                .await
                .map_err(|e| self.error(&e))?;
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
        conn: &mut PgConnection,
        id: &str,
        lease: &JobLease,
        change: impl FnOnce(&mut Job),
    ) -> StoreResult<Job> {
        let row = sqlx::query(sql::SELECT_JOB_LOCKED)
            .bind(id)
            .fetch_optional(&mut *conn)
            .await
            .map_err(|e| self.error(&e))?;
        let Some(row) = row else { return Err(StoreError::NoJob(id.to_string())) };
        let mut job = self.decode_job(&row)?;
        job.check_lease(lease)?;
        change(&mut job);
        self.save_job(conn, &job).await?;
        Ok(job)
    }
}

#[async_trait::async_trait]
impl Store for PgStore {
    fn location(&self) -> String {
        self.location.clone()
    }

    async fn create_run(&self, new: NewRun) -> StoreResult<Run> {
        let run = new.into_run();
        if run.session.is_none() {
            // One autocommit insert: nothing to check first.
            let mut conn = self.pool.acquire().await.map_err(|e| self.error(&e))?;
            return self.create_run_in(&mut conn, run).await;
        }
        let mut tx = self.begin().await?;
        let result = self.create_run_in(&mut tx, run).await;
        self.finish(tx, result).await
    }

    async fn run(&self, id: &str) -> StoreResult<Option<Run>> {
        let row = sqlx::query(sql::SELECT_RUN).bind(id).fetch_optional(&self.pool).await.map_err(|e| self.error(&e))?;
        row.map(|r| self.decode_run(&r)).transpose()
    }

    async fn runs(&self, status: Option<RunStatus>, limit: usize) -> StoreResult<Vec<Run>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = match status {
            Some(s) => sqlx::query(sql::LIST_RUNS_BY_STATUS).bind(s.as_str()).bind(limit).fetch_all(&self.pool).await,
            None => sqlx::query(sql::LIST_RUNS).bind(limit).fetch_all(&self.pool).await,
        }
        .map_err(|e| self.error(&e))?;
        rows.iter().map(|r| self.decode_run(r)).collect()
    }

    async fn commit(&self, id: &str, owner: &str, batch: Batch) -> StoreResult<()> {
        // The common case, one entry and nothing else, is one autocommit
        // statement whose lease check (with the run's row locked) rides in
        // the insert.
        if let ([e], [], [], None) = (&batch.journal[..], &batch.events[..], &batch.checkpoints[..], &batch.thread) {
            let inserted = sqlx::query(sql::APPEND_ENTRY_IF_OWNER_LOCKED)
                .bind(id)
                .bind(to_i64(e.seq, "sequence number")?)
                .bind(to_i64(e.end, "end sequence number")?)
                .bind(&e.interface)
                .bind(&e.function)
                .bind(&e.args_hash)
                .bind(&e.result)
                .bind(owner)
                .execute(&self.pool)
                .await;
            if self.entry_written(inserted.map(|d| d.rows_affected()), id, e.seq)? > 0 {
                return Ok(());
            }
            let mut conn = self.pool.acquire().await.map_err(|e| self.error(&e))?;
            return match self.check_owner(&mut conn, id, owner).await {
                Err(e) => Err(e),
                // It changed hands and back between the two statements: say
                // so rather than pretend the write happened.
                Ok(_) => Err(StoreError::Conflict(not_owned(id, RunStatus::Running))),
            };
        }
        let mut tx = self.begin().await?;
        let result = async {
            self.owned_for(&mut tx, id, owner, batch.thread.as_ref()).await?;
            self.write_batch(&mut tx, id, batch).await
        }
        .await;
        self.finish(tx, result).await
    }

    async fn transition(&self, id: &str, owner: &str, batch: Batch, to: Transition) -> StoreResult<Run> {
        let mut tx = self.begin().await?;
        let result = self.transition_in(&mut tx, id, owner, batch, to).await;
        self.finish(tx, result).await
    }

    async fn claim(
        &self,
        id: &str,
        how: Claim,
        lease: Lease,
        resume_input: Option<String>,
        now: i64,
    ) -> StoreResult<Run> {
        let mut tx = self.begin().await?;
        let result = self.claim_in(&mut tx, id, how, lease, resume_input, now).await;
        self.finish(tx, result).await
    }

    async fn renew_leases(&self, owner: &str, ids: &[String], until_ms: i64) -> StoreResult<Vec<String>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        sqlx::query_scalar(sql::RENEW_LEASES_POSTGRES)
            .bind(owner)
            .bind(until_ms)
            .bind(ids)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| self.error(&e))
    }

    async fn orphans(&self, now: i64) -> StoreResult<Vec<Run>> {
        let rows = sqlx::query(sql::ORPHANS).bind(now).fetch_all(&self.pool).await.map_err(|e| self.error(&e))?;
        rows.iter().map(|r| self.decode_run(r)).collect()
    }

    async fn cancel(&self, id: &str, reason: &str) -> StoreResult<Run> {
        let mut tx = self.begin().await?;
        let result = self.cancel_in(&mut tx, id, reason).await;
        self.finish(tx, result).await
    }

    async fn journal(&self, id: &str) -> StoreResult<Vec<Entry>> {
        let rows = sqlx::query(sql::JOURNAL).bind(id).fetch_all(&self.pool).await.map_err(|e| self.error(&e))?;
        rows.iter().map(|row| self.decode(|errors| rows::entry(id, row, errors))).collect()
    }

    async fn events(&self, id: &str, after: i64, limit: usize) -> StoreResult<Vec<StoredEvent>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = sqlx::query(sql::EVENTS)
            .bind(id)
            .bind(after)
            .bind(limit)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| self.error(&e))?;
        rows.iter().map(|row| self.decode(|errors| rows::event(row, errors))).collect()
    }

    async fn checkpoints(&self, id: &str) -> StoreResult<Vec<(String, Value)>> {
        let rows = sqlx::query(sql::CHECKPOINTS).bind(id).fetch_all(&self.pool).await.map_err(|e| self.error(&e))?;
        rows.iter().map(|row| self.decode(|errors| rows::checkpoint(id, row, errors))).collect()
    }

    async fn approval(&self, id: &str) -> StoreResult<Option<Approval>> {
        let row =
            sqlx::query(sql::SELECT_APPROVAL).bind(id).fetch_optional(&self.pool).await.map_err(|e| self.error(&e))?;
        row.map(|r| self.decode(|errors| rows::approval(id, &r, errors))).transpose()
    }

    async fn decide(&self, id: &str, call: &PendingCall, decision: Decision) -> StoreResult<Approval> {
        let mut tx = self.begin().await?;
        let result = self.decide_in(&mut tx, id, call, decision).await;
        self.finish(tx, result).await
    }

    async fn clear_approval(&self, id: &str, owner: &str) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        let result = async {
            self.check_owner(&mut tx, id, owner).await?;
            sqlx::query(sql::DELETE_APPROVAL).bind(id).execute(&mut *tx).await.map_err(|e| self.error(&e))?;
            Ok(())
        }
        .await;
        self.finish(tx, result).await
    }

    async fn enqueue(&self, new: NewJob) -> StoreResult<Job> {
        if let Some(reason) = check_new_job(&new) {
            return Err(StoreError::Conflict(reason));
        }
        let mut tx = self.begin().await?;
        let result = self.enqueue_in(&mut tx, new).await;
        self.finish(tx, result).await
    }

    async fn claim_job_unless(
        &self,
        worker: &str,
        lease_ms: i64,
        now: i64,
        held_back: &[String],
    ) -> StoreResult<Option<Job>> {
        let mut tx = self.begin().await?;
        let result = self.claim_job_in(&mut tx, worker, lease_ms, now, held_back).await;
        self.finish(tx, result).await
    }

    async fn heartbeat_jobs(&self, tokens: &[i64], lease_ms: i64, now: i64) -> StoreResult<Vec<i64>> {
        if tokens.is_empty() {
            return Ok(Vec::new());
        }
        sqlx::query_scalar(sql::HEARTBEAT_JOBS_POSTGRES)
            .bind(now.saturating_add(lease_ms))
            .bind(now)
            .bind(tokens)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| self.error(&e))
    }

    async fn complete_job(&self, id: &str, lease: &JobLease, now: i64) -> StoreResult<Job> {
        let mut tx = self.begin().await?;
        let result = self.change_job(&mut tx, id, lease, |job| job.complete(now)).await;
        self.finish(tx, result).await
    }

    async fn fail_job(&self, id: &str, lease: &JobLease, error: &str, retry: Retry, now: i64) -> StoreResult<Job> {
        let mut tx = self.begin().await?;
        let result = async {
            let mut job = self.change_job(&mut tx, id, lease, |job| job.fail(error, retry, now)).await?;
            if job.status == JobStatus::Queued {
                sqlx::query(sql::LOCK_JOB_QUEUE)
                    .bind(QUEUE_LOCK)
                    .bind(id)
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| self.error(&e))?;
                job.turn = sqlx::query_scalar(sql::RETRY_TURN_POSTGRES)
                    .bind(id)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(|e| self.error(&e))?;
            }
            Ok(job)
        }
        .await;
        self.finish(tx, result).await
    }

    async fn postpone_job(
        &self,
        id: &str,
        lease: &JobLease,
        reason: &str,
        not_before_ms: i64,
        now: i64,
    ) -> StoreResult<Job> {
        let mut tx = self.begin().await?;
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
        self.finish(tx, result).await
    }

    async fn job(&self, id: &str) -> StoreResult<Option<Job>> {
        let row = sqlx::query(sql::SELECT_JOB).bind(id).fetch_optional(&self.pool).await.map_err(|e| self.error(&e))?;
        row.map(|r| self.decode_job(&r)).transpose()
    }

    async fn jobs(&self, status: Option<JobStatus>, limit: usize) -> StoreResult<Vec<Job>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = match status {
            Some(s) => sqlx::query(sql::LIST_JOBS_BY_STATUS).bind(s.as_str()).bind(limit).fetch_all(&self.pool).await,
            None => sqlx::query(sql::LIST_JOBS).bind(limit).fetch_all(&self.pool).await,
        }
        .map_err(|e| self.error(&e))?;
        rows.iter().map(|r| self.decode_job(r)).collect()
    }

    async fn open_session(&self, agent: &str, instance: &str, now: i64) -> StoreResult<Session> {
        // One upsert: of concurrent opens one inserts, the others wait for
        // its row and then touch it, so all of them return the same session.
        let row = sqlx::query(sql::OPEN_SESSION)
            .bind(new_session_id())
            .bind(agent)
            .bind(instance)
            .bind(now)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| self.error(&e))?;
        self.decode_session(&row)
    }

    async fn session(&self, agent: &str, instance: &str) -> StoreResult<Option<Session>> {
        let row = sqlx::query(sql::SELECT_SESSION)
            .bind(agent)
            .bind(instance)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| self.error(&e))?;
        row.map(|r| self.decode_session(&r)).transpose()
    }

    async fn session_by_id(&self, id: &str) -> StoreResult<Option<Session>> {
        let row = sqlx::query(sql::SELECT_SESSION_BY_ID)
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| self.error(&e))?;
        row.map(|r| self.decode_session(&r)).transpose()
    }

    async fn sessions(&self, agent: Option<&str>, limit: usize) -> StoreResult<Vec<Session>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = match agent {
            Some(a) => sqlx::query(sql::LIST_SESSIONS_BY_AGENT).bind(a).bind(limit).fetch_all(&self.pool).await,
            None => sqlx::query(sql::LIST_SESSIONS).bind(limit).fetch_all(&self.pool).await,
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
            .fetch_all(&self.pool)
            .await
            .map_err(|e| self.error(&e))?;
        rows.iter().map(|r| self.decode_session(r)).collect()
    }

    async fn thread(&self, id: &str) -> StoreResult<Vec<Value>> {
        let rows = sqlx::query(sql::THREAD).bind(id).fetch_all(&self.pool).await.map_err(|e| self.error(&e))?;
        rows.iter().map(|row| self.decode(|errors| rows::message(id, row, errors))).collect()
    }

    async fn append_thread(&self, id: &str, expected: u64, messages: Vec<Value>, now: i64) -> StoreResult<Session> {
        let mut tx = self.begin().await?;
        let result = self.append_thread_in(&mut tx, id, expected, messages, now).await;
        self.finish(tx, result).await
    }

    async fn session_runs(&self, id: &str) -> StoreResult<Vec<Run>> {
        let rows = sqlx::query(sql::SESSION_RUNS).bind(id).fetch_all(&self.pool).await.map_err(|e| self.error(&e))?;
        rows.iter().map(|r| self.decode_run(r)).collect()
    }

    async fn delete_session(&self, id: &str) -> StoreResult<bool> {
        let deleted =
            sqlx::query(sql::DELETE_SESSION).bind(id).execute(&self.pool).await.map_err(|e| self.error(&e))?;
        Ok(deleted.rows_affected() > 0)
    }

    async fn expire_sessions(&self, updated_before_ms: i64) -> StoreResult<Vec<String>> {
        let mut tx = self.begin().await?;
        let result = async {
            // Lock the candidates first, as a new prompt or a retry locks its
            // session; the delete, a statement of its own, then sees every
            // run committed before the locks were granted.
            let candidates: Vec<String> = sqlx::query_scalar(sql::EXPIRY_CANDIDATES_LOCKED)
                .bind(updated_before_ms)
                .fetch_all(&mut *tx)
                .await
                .map_err(|e| self.error(&e))?;
            if candidates.is_empty() {
                return Ok(Vec::new());
            }
            let mut ids: Vec<String> = sqlx::query_scalar(sql::EXPIRE_IDLE_AMONG)
                .bind(&candidates)
                .fetch_all(&mut *tx)
                .await
                .map_err(|e| self.error(&e))?;
            ids.sort();
            Ok(ids)
        }
        .await;
        self.finish(tx, result).await
    }

    async fn create_tenant(&self, new: NewTenant) -> StoreResult<Tenant> {
        let tenant = new.into_tenant();
        let mut tx = self.begin().await?;
        let result = async {
            // A concurrent creation of the same id or name waits for this one
            // and then inserts nothing, and finds the row it lost to.
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
        self.finish(tx, result).await
    }

    async fn tenant(&self, id: &str) -> StoreResult<Option<Tenant>> {
        let row =
            sqlx::query(sql::SELECT_TENANT).bind(id).fetch_optional(&self.pool).await.map_err(|e| self.error(&e))?;
        row.map(|r| self.decode_tenant(&r)).transpose()
    }

    async fn tenant_by_name(&self, name: &str) -> StoreResult<Option<Tenant>> {
        let row = sqlx::query(sql::SELECT_TENANT_BY_NAME)
            .bind(name)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| self.error(&e))?;
        row.map(|r| self.decode_tenant(&r)).transpose()
    }

    async fn tenants(&self) -> StoreResult<Vec<Tenant>> {
        let rows = sqlx::query(sql::LIST_TENANTS).fetch_all(&self.pool).await.map_err(|e| self.error(&e))?;
        rows.iter().map(|r| self.decode_tenant(r)).collect()
    }

    async fn update_tenant(
        &self,
        id: &str,
        policy: Option<Value>,
        disabled: Option<bool>,
        now: i64,
    ) -> StoreResult<Tenant> {
        let row = sqlx::query(sql::UPDATE_TENANT)
            .bind(id)
            .bind(policy.map(|p| p.to_string()))
            .bind(disabled.map(i64::from))
            .bind(now)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| self.error(&e))?;
        match row {
            Some(row) => self.decode_tenant(&row),
            None => Err(StoreError::NoTenant(id.to_string())),
        }
    }

    async fn create_key(&self, new: NewApiKey) -> StoreResult<ApiKey> {
        if let Some(reason) = check_new_key(&new) {
            return Err(StoreError::Conflict(reason));
        }
        let key = new.into_key();
        let mut tx = self.begin().await?;
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
        self.finish(tx, result).await
    }

    async fn key_by_hash(&self, hash: &str) -> StoreResult<Option<ApiKey>> {
        let row = sqlx::query(sql::SELECT_KEY_BY_HASH)
            .bind(hash)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| self.error(&e))?;
        row.map(|r| self.decode_key(&r)).transpose()
    }

    async fn keys(&self, tenant: Option<&str>) -> StoreResult<Vec<ApiKey>> {
        let rows = match tenant {
            Some(t) => sqlx::query(sql::LIST_TENANT_KEYS).bind(t).fetch_all(&self.pool).await,
            None => sqlx::query(sql::LIST_ADMIN_KEYS).fetch_all(&self.pool).await,
        }
        .map_err(|e| self.error(&e))?;
        rows.iter().map(|r| self.decode_key(r)).collect()
    }

    async fn revoke_key(&self, id: &str, now: i64) -> StoreResult<ApiKey> {
        let row = sqlx::query(sql::REVOKE_KEY)
            .bind(id)
            .bind(now)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| self.error(&e))?;
        match row {
            Some(row) => self.decode_key(&row),
            None => Err(StoreError::NoKey(id.to_string())),
        }
    }

    async fn open_sign_in(&self, new: SignIn) -> StoreResult<()> {
        let mut tx = self.begin().await?;
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
        self.finish(tx, result).await
    }

    async fn sign_in(&self, id_hash: &str, now_ms: i64) -> StoreResult<Option<SignIn>> {
        let row = sqlx::query(sql::SELECT_SIGN_IN)
            .bind(id_hash)
            .bind(now_ms)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| self.error(&e))?;
        row.map(|r| self.decode(|errors| rows::sign_in(&r, errors))).transpose()
    }

    async fn end_sign_in(&self, id_hash: &str) -> StoreResult<()> {
        sqlx::query(sql::DELETE_SIGN_IN).bind(id_hash).execute(&self.pool).await.map_err(|e| self.error(&e))?;
        Ok(())
    }

    async fn put_plugin(&self, new: NewPlugin) -> StoreResult<(StoredPlugin, bool)> {
        if let Some(reason) = check_new_plugin(&new) {
            return Err(StoreError::Conflict(reason));
        }
        let plugin = new.to_stored();
        let mut tx = self.begin().await?;
        let result = async {
            // A concurrent upload of the same plugin waits for this insert,
            // then inserts nothing and reads the row this one wrote.
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
        self.finish(tx, result).await
    }

    async fn plugin(&self, tenant: &str, sha256: &str) -> StoreResult<Option<StoredPlugin>> {
        let row = sqlx::query(sql::SELECT_PLUGIN)
            .bind(tenant)
            .bind(sha256)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| self.error(&e))?;
        row.map(|r| self.decode_plugin(&r)).transpose()
    }

    async fn plugin_bytes(&self, tenant: &str, sha256: &str) -> StoreResult<Option<Vec<u8>>> {
        let row = sqlx::query(sql::PLUGIN_BYTES)
            .bind(tenant)
            .bind(sha256)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| self.error(&e))?;
        row.map(|r| self.decode(|errors| rows::plugin_bytes(&r, errors))).transpose()
    }

    async fn plugins(&self, tenant: &str) -> StoreResult<Vec<StoredPlugin>> {
        let rows =
            sqlx::query(sql::LIST_PLUGINS).bind(tenant).fetch_all(&self.pool).await.map_err(|e| self.error(&e))?;
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
                    .fetch_all(&self.pool)
                    .await
            }
            None => sqlx::query(sql::LIST_TENANT_RUNS).bind(tenant).bind(limit).fetch_all(&self.pool).await,
        }
        .map_err(|e| self.error(&e))?;
        rows.iter().map(|r| self.decode_run(r)).collect()
    }

    async fn append_audit(&self, tenant: &str, kind: &str, data: &Value, at_ms: i64) -> StoreResult<AuditEntry> {
        let mut tx = self.begin().await?;
        let result = async {
            // The tenant's row, locked until the commit: a concurrent append
            // in any process waits here, then reads the head this one wrote.
            let row = sqlx::query(sql::AUDIT_HEAD_LOCKED)
                .bind(tenant)
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| self.error(&e))?;
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
        self.finish(tx, result).await
    }

    async fn audit(&self, tenant: &str, after_seq: u64, limit: usize) -> StoreResult<Vec<AuditEntry>> {
        // Past the largest sequence number a store holds: nothing.
        let Ok(after) = i64::try_from(after_seq) else { return Ok(Vec::new()) };
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = sqlx::query(sql::AUDIT)
            .bind(tenant)
            .bind(after)
            .bind(limit)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| self.error(&e))?;
        rows.iter().map(|r| self.decode(|errors| rows::audit_entry(r, errors))).collect()
    }

    async fn audit_head(&self, tenant: &str) -> StoreResult<Option<(u64, String)>> {
        let row =
            sqlx::query(sql::AUDIT_HEAD).bind(tenant).fetch_optional(&self.pool).await.map_err(|e| self.error(&e))?;
        match row {
            Some(row) => self.decode(|errors| rows::audit_head(tenant, &row, errors)),
            None => Ok(None),
        }
    }

    async fn audit_heads(&self) -> StoreResult<Vec<(String, u64, String)>> {
        let rows = sqlx::query(sql::AUDIT_HEADS).fetch_all(&self.pool).await.map_err(|e| self.error(&e))?;
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
        // One upsert: of concurrent adds to a new hour one inserts, the
        // others wait for its row and add to it.
        let added = sqlx::query(sql::ADD_USAGE)
            .bind(tenant)
            .bind(usage_period(at_ms))
            .bind(to_i64(runs, "run count")?)
            .bind(to_i64(tokens, "token count")?)
            .bind(to_i64(cpu_ticks, "CPU tick count")?)
            .bind(to_i64(egress_bytes, "egress byte count")?)
            .execute(&self.pool)
            .await;
        match added {
            Ok(_) => Ok(()),
            // The one foreign key: the tenant.
            Err(sqlx::Error::Database(db)) if db.is_foreign_key_violation() => {
                Err(StoreError::NoTenant(tenant.to_string()))
            }
            Err(e) => Err(self.error(&e)),
        }
    }

    async fn usage(&self, tenant: &str, since_ms: i64) -> StoreResult<Vec<Usage>> {
        let rows = sqlx::query(sql::USAGE)
            .bind(tenant)
            .bind(usage_period(since_ms))
            .fetch_all(&self.pool)
            .await
            .map_err(|e| self.error(&e))?;
        rows.iter().map(|r| self.decode(|errors| rows::usage(r, errors))).collect()
    }

    async fn add_run_usage(&self, run: &str, used: RunUsage) -> StoreResult<()> {
        let added = sqlx::query(sql::ADD_RUN_USAGE)
            .bind(run)
            .bind(to_i64(used.tokens, "token count")?)
            .bind(to_i64(used.cpu_ticks, "CPU tick count")?)
            .bind(to_i64(used.egress_bytes, "egress byte count")?)
            .execute(&self.pool)
            .await;
        match added {
            Ok(_) => Ok(()),
            // The one foreign key: the run.
            Err(sqlx::Error::Database(db)) if db.is_foreign_key_violation() => Err(StoreError::NoRun(run.to_string())),
            Err(e) => Err(self.error(&e)),
        }
    }

    async fn run_usage(&self, run: &str) -> StoreResult<RunUsage> {
        let row = sqlx::query(sql::RUN_USAGE).bind(run).fetch_optional(&self.pool).await.map_err(|e| self.error(&e))?;
        match row {
            Some(row) => self.decode(|errors| rows::run_usage(&row, run, errors)),
            None => Ok(RunUsage::default()),
        }
    }

    async fn live_runs(&self, tenant: &str) -> StoreResult<u64> {
        let n: i64 =
            sqlx::query_scalar(sql::LIVE_RUNS).bind(tenant).fetch_one(&self.pool).await.map_err(|e| self.error(&e))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn has_live_job(&self, run: &str) -> StoreResult<bool> {
        let n: i64 = sqlx::query_scalar(sql::LIVE_JOBS_OF_RUN)
            .bind(run)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| self.error(&e))?;
        Ok(n > 0)
    }

    async fn running_runs(&self, tenant: &str) -> StoreResult<u64> {
        let n: i64 = sqlx::query_scalar(sql::RUNNING_RUNS)
            .bind(tenant)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| self.error(&e))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }
}

/// Brings the database to [`SCHEMA_VERSION`] in one transaction, under the
/// migration lock. Writes nothing to a database it refuses.
async fn migrate(conn: &mut PgConnection, location: &str, secrets: &[String]) -> StoreResult<()> {
    let fail = |e: sqlx::Error| StoreError::Open {
        location: location.to_string(),
        reason: redact(&format!("migrating the schema failed: {e}{}", privilege_hint(&e)), secrets),
    };
    let mut tx = conn.begin().await.map_err(fail)?;
    // Held until the transaction ends: another process opening the same
    // database waits here, then finds the schema this one created.
    sqlx::query("SELECT pg_advisory_xact_lock($1)").bind(MIGRATION_LOCK).execute(&mut *tx).await.map_err(fail)?;
    let current = match inspect(&mut tx, location).await.map_err(|e| match e {
        InspectError::Sql(e) => fail(e),
        InspectError::Store(e) => e,
    })? {
        Found::Empty => 0,
        Found::Nexo(v) if v > SCHEMA_VERSION => {
            tx.rollback().await.ok();
            return Err(StoreError::TooNew { location: location.to_string(), found: v, supported: SCHEMA_VERSION });
        }
        Found::Nexo(v) => v,
    };
    for migration in sql::MIGRATIONS.iter().filter(|m| m.version > current) {
        for statement in migration.statements {
            let statement = sql::POSTGRES.render(statement);
            sqlx::query(sqlx::AssertSqlSafe(statement)).execute(&mut *tx).await.map_err(fail)?;
        }
        sqlx::query(sql::RECORD_MIGRATION)
            .bind(migration.version)
            .bind(now_ms())
            .execute(&mut *tx)
            .await
            .map_err(fail)?;
    }
    tx.commit().await.map_err(fail)
}

enum InspectError {
    Sql(sqlx::Error),
    Store(StoreError),
}

/// What the database's current schema holds: no nexo tables, or a nexo
/// store of some version. Nexo's table names without `nexo_schema` are
/// [`StoreError::Corrupt`].
async fn inspect(conn: &mut PgConnection, location: &str) -> Result<Found, InspectError> {
    // PostgreSQL's own catalogue: this probe is the one backend-specific query.
    let tables: Vec<String> =
        sqlx::query_scalar("SELECT tablename::text FROM pg_catalog.pg_tables WHERE schemaname = current_schema()")
            .fetch_all(&mut *conn)
            .await
            .map_err(InspectError::Sql)?;
    let corrupt = |reason: String| InspectError::Store(StoreError::Corrupt { location: location.to_string(), reason });
    if !tables.iter().any(|t| t == sql::SCHEMA_TABLE) {
        let ours: Vec<String> =
            tables.iter().filter(|t| sql::TABLES.contains(&t.as_str())).map(|t| format!("`{t}`")).collect();
        if ours.is_empty() {
            return Ok(Found::Empty);
        }
        return Err(corrupt(format!(
            "its schema has tables named like nexo's ({}) but no `{}` table: another program's; give nexo a \
             database or schema of its own",
            ours.join(", "),
            sql::SCHEMA_TABLE
        )));
    }
    let version: Option<i64> =
        sqlx::query_scalar(sql::SCHEMA_VERSION).fetch_one(&mut *conn).await.map_err(InspectError::Sql)?;
    match version {
        Some(v) if v >= 1 => Ok(Found::Nexo(v)),
        _ => Err(corrupt(format!("its `{}` table records no schema version", sql::SCHEMA_TABLE))),
    }
}

/// `postgres://USER@HOST:PORT/DATABASE`, from the parsed options: the
/// password is not among them.
fn describe(options: &PgConnectOptions) -> String {
    let user = options.get_username();
    let database = options.get_database().unwrap_or(user);
    format!("postgres://{user}@{}:{}/{database}", options.get_host(), options.get_port())
}

/// The URL's password, raw and percent-decoded, from its user part or a
/// `password=` parameter.
fn secrets(url: &str) -> Vec<String> {
    let mut found = Vec::new();
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    if let Some((userinfo, _)) = authority.rsplit_once('@')
        && let Some((_, password)) = userinfo.split_once(':')
    {
        found.push(password.to_string());
    }
    if let Some((_, query)) = url.split_once('?') {
        for pair in query.split('&') {
            if let Some(password) = pair.strip_prefix("password=") {
                found.push(password.to_string());
            }
        }
    }
    let decoded: Vec<String> = found.iter().map(|p| percent_decode(p)).collect();
    found.extend(decoded);
    found.retain(|p| !p.is_empty());
    found.sort();
    found.dedup();
    found
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(byte) = text.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `text` with every secret replaced, whatever sqlx or the server put in it.
fn redact(text: &str, secrets: &[String]) -> String {
    secrets.iter().fold(text.to_string(), |text, secret| text.replace(secret.as_str(), "…"))
}

/// An error while connecting, as [`StoreError::Open`] naming the cause and
/// the fix.
fn open_error(location: &str, options: &PgConnectOptions, e: &sqlx::Error, secrets: &[String]) -> StoreError {
    let user = options.get_username();
    let database = options.get_database().unwrap_or(user);
    let server = format!("{}:{}", options.get_host(), options.get_port());
    let reason = match (e, sqlstate(e).as_deref()) {
        (_, Some(INVALID_PASSWORD | INVALID_AUTHORIZATION)) => format!(
            "PostgreSQL refused the login of user `{user}` ({e}): check the user name and password in the URL, \
             and that the server's pg_hba.conf lets this user in from here"
        ),
        (_, Some(NO_SUCH_DATABASE)) => format!(
            "the database `{database}` does not exist on {server}: create it (`createdb -h {} -p {} -U {user} \
             {database}`) or name an existing one in the URL",
            options.get_host(),
            options.get_port()
        ),
        (_, Some(TOO_MANY_CONNECTIONS)) => {
            format!("{e}: the server has no connection to spare; try again, or raise its max_connections")
        }
        (sqlx::Error::Io(io), _) if io.kind() == std::io::ErrorKind::ConnectionRefused => format!(
            "nothing accepts connections at {server} ({io}): start PostgreSQL there, or fix the host and port in \
             the URL"
        ),
        (sqlx::Error::Io(io), _) => {
            format!("cannot reach {server} ({io}): check the host and port in the URL and the network")
        }
        (sqlx::Error::Tls(tls), _) => {
            format!(
                "the TLS handshake with {server} failed ({tls}): check the server's certificate or the URL's sslmode"
            )
        }
        (sqlx::Error::PoolTimedOut, _) => format!(
            "{server} did not answer within {} s: check that PostgreSQL runs there and the network lets you in",
            ACQUIRE_TIMEOUT.as_secs()
        ),
        _ => format!("{e}{}", privilege_hint(e)),
    };
    StoreError::Open { location: location.to_string(), reason: redact(&reason, secrets) }
}

/// The SQLSTATE code of an error the server reported.
fn sqlstate(e: &sqlx::Error) -> Option<String> {
    match e {
        sqlx::Error::Database(db) => db.code().map(|c| c.into_owned()),
        _ => None,
    }
}

fn privilege_hint(e: &sqlx::Error) -> &'static str {
    match sqlstate(e).as_deref() {
        Some(INSUFFICIENT_PRIVILEGE) => {
            " (the user may not create tables here: grant it CREATE on the schema, or give nexo a database it owns)"
        }
        _ => "",
    }
}

/// What to do about a lost connection, when that is what happened.
fn connection_hint(e: &sqlx::Error) -> &'static str {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => {
            " (the connection to PostgreSQL was lost or none was free; check that the server is up, then try again)"
        }
        _ => "",
    }
}

fn to_i64(n: u64, what: &str) -> StoreResult<i64> {
    i64::try_from(n).map_err(|_| StoreError::Backend(format!("the {what} {n} is too large to store")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_found_and_redacted() {
        let url = "postgres://nexo:s%40cret@db.example:5432/nexo?password=other";
        let found = secrets(url);
        for s in ["s%40cret", "s@cret", "other"] {
            assert!(found.iter().any(|f| f == s), "{found:?}");
        }
        assert_eq!(redact("bad s@cret and s%40cret", &found), "bad … and …");
        assert!(secrets("postgres://db.example/nexo").is_empty());
        assert!(secrets("postgres://nexo@db.example/nexo").is_empty());
    }

    #[test]
    fn the_location_has_no_password() {
        let options = PgConnectOptions::from_str("postgres://nexo:hunter2@db.example:6543/runs").unwrap_or_default();
        assert_eq!(describe(&options), "postgres://nexo@db.example:6543/runs");
    }
}
