//! [`Jobs`] over SQL: the job queue.

use super::{Arg, Dialect, Queue, SqlStore, limit};
use crate::jobs::check_new_job;
use crate::refusal::job_exists;
use crate::rows::Columns as _;
use crate::sql;
use crate::{Job, JobLease, JobStatus, Jobs, NewJob, Retry, StoreError, StoreResult, now_ms};

/// The most timers' wakes one claim queues: a claim stays short however
/// many fell due at once; the next claims queue the rest.
const WAKES_PER_CLAIM: i64 = 64;

/// A new job's columns (`$1…$15` of [`sql::INSERT_SLEEPING_JOB`] and the
/// dialects' `insert_job`), unclaimed, as `status`.
fn new_job_args<'a>(new: &'a NewJob, payload: &'a str, status: JobStatus) -> [Arg<'a>; 15] {
    [
        (&new.id).into(),
        (&new.run).into(),
        new.kind.as_str().into(),
        payload.into(),
        status.as_str().into(),
        0_i64.into(),
        i64::from(new.max_attempts).into(),
        new.backoff_ms.into(),
        new.not_before_ms.into(),
        Arg::MaybeText(None),
        Arg::MaybeInt(None),
        Arg::MaybeInt(None),
        Arg::MaybeText(None),
        new.created_ms.into(),
        new.created_ms.into(),
    ]
}

impl<D: Dialect> SqlStore<D> {
    /// Places a new job at its queue's next turn, its queue held
    /// ([`Dialect::hold_queue`]) until the transaction ends.
    pub(super) async fn enqueue_in(&self, conn: &mut D::Conn, new: NewJob) -> StoreResult<Job> {
        self.db.hold_queue(conn, Queue::OfRun(&new.run)).await?;
        let payload = new.payload.to_string();
        let args = &new_job_args(&new, &payload, JobStatus::Queued);
        let placed = self.optional(conn, D::SQL.insert_job, args).await?;
        let Some(row) = placed else {
            // The id is taken, or the run is not there.
            return match self.optional(conn, sql::RUN_EXISTS, &[(&new.run).into()]).await? {
                None => Err(StoreError::NoRun(new.run)),
                Some(_) => Err(StoreError::Conflict(job_exists(&new.id))),
            };
        };
        let (queue, turn) = (row.text_at(0), row.int_at(1));
        let (queue, turn) = queue.and_then(|q| Ok((q, turn?))).map_err(|e| self.error(&e))?;
        if new.not_before_ms <= now_ms() {
            self.notify_jobs_in(conn).await?;
        }
        Ok(new.into_job(Some(queue).filter(|q| !q.is_empty()), turn))
    }

    /// Tells listening workers that a job may be due, when `conn`'s
    /// transaction commits (where the backend has listeners).
    pub(super) async fn notify_jobs_in(&self, conn: &mut D::Conn) -> StoreResult<()> {
        if let Some(notify) = D::SQL.notify_jobs {
            self.execute(conn, notify, &[]).await?;
        }
        Ok(())
    }

    /// Records a timer's wake, sleeping until it is due (no queue's turn
    /// is taken, so no queue is held).
    pub(super) async fn sleep_in(&self, conn: &mut D::Conn, new: NewJob) -> StoreResult<Job> {
        let payload = new.payload.to_string();
        let args = &new_job_args(&new, &payload, JobStatus::Sleeping);
        let Some(row) = self.optional(conn, sql::INSERT_SLEEPING_JOB, args).await? else {
            return Err(StoreError::Conflict(job_exists(&new.id)));
        };
        let queue = row.text_at(0).map_err(|e| self.error(&e))?;
        Ok(new.into_job(Some(queue).filter(|q| !q.is_empty()), 0))
    }

    /// Ends run `id`'s wakes not yet taken, `done` with `why`.
    pub(super) async fn end_wakes_in(&self, conn: &mut D::Conn, id: &str, why: &str, now: i64) -> StoreResult<()> {
        self.execute(conn, sql::END_WAKES_OF_RUN, &[id.into(), why.into(), now.into()]).await?;
        Ok(())
    }

    /// Queues the timers' wakes due by `now` (at most [`WAKES_PER_CLAIM`]),
    /// each at its queue's next turn, as a retry is.
    async fn promote_wakes_in(&self, conn: &mut D::Conn, now: i64) -> StoreResult<()> {
        let rows = self.all(conn, D::SQL.due_wakes, &[now.into(), WAKES_PER_CLAIM.into()]).await?;
        let mut due = Vec::with_capacity(rows.len());
        for row in rows {
            let id = row.text_at(0).map_err(|e| self.error(&e))?;
            let queue = row.text_at(1).map_err(|e| self.error(&e))?;
            due.push((queue, id));
        }
        // Their queues held first, in one order by every claim (two claims
        // cannot each hold one the other waits for); then each queued, the
        // earliest first.
        let mut queues: Vec<&(String, String)> = due.iter().collect();
        queues.sort();
        queues.dedup_by(|a, b| a.0 == b.0);
        for (_, id) in queues {
            self.db.hold_queue(conn, Queue::OfJob(id)).await?;
        }
        for (_, id) in &due {
            self.execute(conn, sql::PROMOTE_WAKE, &[id.as_str().into(), now.into()]).await?;
            self.one(conn, D::SQL.retry_turn, &[id.as_str().into()]).await?;
        }
        Ok(())
    }

    async fn fetch_job(&self, conn: &mut D::Conn, sql: &'static str, id: &str) -> StoreResult<Option<Job>> {
        let row = self.optional(conn, sql, &[id.into()]).await?;
        row.map(|r| self.decode_job(&r)).transpose()
    }

    /// Writes what a claim, a completion or a failure changed in `job`.
    async fn save_job(&self, conn: &mut D::Conn, job: &Job) -> StoreResult<()> {
        let args: &[Arg<'_>] = &[
            (&job.id).into(),
            job.status.as_str().into(),
            i64::from(job.attempts).into(),
            job.not_before_ms.into(),
            job.lease.as_ref().map(|l| l.worker.as_str()).into(),
            job.lease.as_ref().map(|l| l.token).into(),
            job.lease.as_ref().map(|l| l.until_ms).into(),
            (&job.error).into(),
            job.updated_ms.into(),
        ];
        self.execute(conn, sql::UPDATE_JOB, args).await?;
        Ok(())
    }

    async fn claim_job_in(
        &self,
        conn: &mut D::Conn,
        worker: &str,
        lease_ms: i64,
        now: i64,
        held_back: &[String],
    ) -> StoreResult<Option<Job>> {
        self.promote_wakes_in(conn, now).await?;
        loop {
            let Some(row) = self.optional(conn, D::SQL.due_job, &[now.into()]).await? else { return Ok(None) };
            let mut job = self.decode_job(&row)?;
            if job.held_back(held_back) {
                return Ok(None);
            }
            if job.exhausted() {
                job.give_up(now);
                self.save_job(conn, &job).await?;
                continue;
            }
            let token = self.one(conn, sql::NEXT_TOKEN, &[]).await?.int_at(0).map_err(|e| self.error(&e))?;
            self.execute(conn, sql::FORGET_TOKEN, &[token.into()]).await?;
            job.take(worker, token, lease_ms, now);
            self.save_job(conn, &job).await?;
            return Ok(Some(job));
        }
    }

    /// Applies `change` to job `id` if `lease` still holds it.
    async fn change_job(
        &self,
        conn: &mut D::Conn,
        id: &str,
        lease: &JobLease,
        change: impl FnOnce(&mut Job) + Send,
    ) -> StoreResult<Job> {
        let job = self.fetch_job(conn, D::SQL.select_job_to_write, id).await?;
        let mut job = job.ok_or_else(|| StoreError::NoJob(id.to_string()))?;
        job.check_lease(lease)?;
        change(&mut job);
        self.save_job(conn, &job).await?;
        Ok(job)
    }
}

#[async_trait::async_trait]
impl<D: Dialect> Jobs for SqlStore<D> {
    async fn enqueue(&self, new: NewJob) -> StoreResult<Job> {
        crate::latency::timed("enqueue", async move {
            if let Some(reason) = check_new_job(&new) {
                return Err(StoreError::Conflict(reason));
            }
            let mut tx = self.db.begin().await?;
            let result = self.enqueue_in(&mut tx, new).await;
            self.db.end(tx, result).await
        })
        .await
    }

    async fn claim_job_unless(
        &self,
        worker: &str,
        lease_ms: i64,
        now: i64,
        held_back: &[String],
    ) -> StoreResult<Option<Job>> {
        crate::latency::timed("claim_job", async move {
            let mut tx = self.db.begin().await?;
            let result = self.claim_job_in(&mut tx, worker, lease_ms, now, held_back).await;
            self.db.end(tx, result).await
        })
        .await
    }

    async fn heartbeat_jobs(&self, tokens: &[i64], lease_ms: i64, now: i64) -> StoreResult<Vec<i64>> {
        if tokens.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.db.single().await?;
        let until = now.saturating_add(lease_ms);
        let rows = self.all(&mut conn, D::SQL.heartbeat_jobs, &[until.into(), now.into(), tokens.into()]).await;
        let result = rows.and_then(|rows| rows.iter().map(|r| r.int_at(0).map_err(|e| self.error(&e))).collect());
        self.db.end(conn, result).await
    }

    async fn complete_job(&self, id: &str, lease: &JobLease, now: i64) -> StoreResult<Job> {
        let mut tx = self.db.begin().await?;
        let result = self.change_job(&mut tx, id, lease, |job| job.complete(now)).await;
        self.db.end(tx, result).await
    }

    async fn fail_job(&self, id: &str, lease: &JobLease, error: &str, retry: Retry, now: i64) -> StoreResult<Job> {
        let mut tx = self.db.begin().await?;
        let result = async {
            let mut job = self.change_job(&mut tx, id, lease, |job| job.fail(error, retry, now)).await?;
            if job.status == JobStatus::Queued {
                self.db.hold_queue(&mut tx, Queue::OfJob(id)).await?;
                let turn = self.one(&mut tx, D::SQL.retry_turn, &[id.into()]).await?;
                job.turn = turn.int_at(0).map_err(|e| self.error(&e))?;
            }
            Ok(job)
        }
        .await;
        self.db.end(tx, result).await
    }

    async fn postpone_job(
        &self,
        id: &str,
        lease: &JobLease,
        reason: &str,
        not_before_ms: i64,
        now: i64,
    ) -> StoreResult<Job> {
        let mut tx = self.db.begin().await?;
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
            let data = serde_json::json!({"reason": reason, "until_ms": not_before_ms}).to_string();
            self.execute(&mut tx, sql::APPEND_EVENT, &[(&job.run).into(), "held".into(), (&data).into(), now.into()])
                .await?;
            Ok(job)
        }
        .await;
        self.db.end(tx, result).await
    }

    async fn job(&self, id: &str) -> StoreResult<Option<Job>> {
        let mut conn = self.db.read().await?;
        self.fetch_job(&mut conn, sql::SELECT_JOB, id).await
    }

    async fn jobs(&self, status: Option<JobStatus>, count: usize) -> StoreResult<Vec<Job>> {
        let rows = match status {
            Some(s) => self.read_all(sql::LIST_JOBS_BY_STATUS, &[s.as_str().into(), limit(count).into()]).await?,
            None => self.read_all(sql::LIST_JOBS, &[limit(count).into()]).await?,
        };
        rows.iter().map(|r| self.decode_job(r)).collect()
    }

    async fn has_live_job(&self, run: &str) -> StoreResult<bool> {
        Ok(self.read_count(sql::LIVE_JOBS_OF_RUN, &[run.into()]).await? > 0)
    }

    async fn next_wake_ms(&self) -> StoreResult<Option<i64>> {
        let mut conn = self.db.read().await?;
        let row = self.one(&mut conn, sql::NEXT_WAKE, &[]).await?;
        row.maybe_int("next").map_err(|e| self.error(&e))
    }
}
