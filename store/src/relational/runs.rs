//! [`Runs`] over SQL: records, leases, journal, events, checkpoints and
//! approvals.

use serde_json::Value;

use super::{Arg, Dialect, SqlStore, limit, to_i64};
use crate::refusal::{
    check_decision, claim_refusal, duplicate_entry, not_final, not_owned, nothing_to_cancel, run_exists,
};
use crate::rows::{self, Columns as _};
use crate::sessions::{check_latest, check_no_prompt_in_progress, check_own_session};
use crate::sql;
use crate::{
    Approval, Batch, Claim, Decision, Entry, Lease, NewRun, PendingCall, Run, RunStatus, Runs, Signal, StoreError,
    StoreResult, StoredEvent, ThreadAppend, Transition, now_ms,
};

/// The parameters of a journal insert of `e` for run `id`
/// ([`sql::APPEND_ENTRY`]), and with `owner` those of one that checks the
/// lease ([`sql::APPEND_ENTRY_IF_OWNER`]).
fn entry_args<'a>(id: &'a str, e: &'a Entry, owner: Option<&'a str>) -> StoreResult<Vec<Arg<'a>>> {
    let (seq, end) = (to_i64(e.seq, "sequence number")?, to_i64(e.end, "end sequence number")?);
    let mut args: Vec<Arg<'a>> = vec![
        id.into(),
        seq.into(),
        end.into(),
        (&e.interface).into(),
        (&e.function).into(),
        (&e.args_hash).into(),
        (&e.result).into(),
        e.started_ms.into(),
        e.ended_ms.into(),
    ];
    args.extend(owner.map(Arg::Text));
    Ok(args)
}

impl<D: Dialect> SqlStore<D> {
    /// Succeeds if `owner` holds the running run `id`'s lease (on
    /// PostgreSQL keeping its row locked until the transaction ends);
    /// otherwise says why not (`NoRun`, or a conflict naming its status).
    async fn check_owner(&self, conn: &mut D::Conn, id: &str, owner: &str) -> StoreResult<()> {
        let row = self.optional(conn, D::SQL.run_owner_to_write, &[id.into()]).await?;
        let Some(row) = row else { return Err(StoreError::NoRun(id.to_string())) };
        let status = self.decode_status(&row)?;
        let holder = self.decode(|errors| rows::lease_owner(&row, errors))?;
        if status != RunStatus::Running || holder.as_deref() != Some(owner) {
            return Err(StoreError::Conflict(not_owned(id, status)));
        }
        Ok(())
    }

    /// The run `id` if `owner` holds it, for writing a batch with `thread`:
    /// the run must be owned and a prompt of the session the append names.
    /// A session that is not there is named first, whatever else is wrong.
    /// Where rows are locked, the session's is locked first (the order
    /// every session write takes); elsewhere it is looked up only when
    /// something is wrong.
    async fn owned_for(
        &self,
        conn: &mut D::Conn,
        id: &str,
        owner: &str,
        thread: Option<&ThreadAppend>,
    ) -> StoreResult<Run> {
        let session_first = thread.filter(|_| D::LOCKS_ROWS);
        if let Some(thread) = session_first
            && !self.session_there(conn, &thread.session).await?
        {
            return Err(StoreError::NoSession(thread.session.clone()));
        }
        let run = self.fetch_run(conn, D::SQL.select_run_to_write, id).await?;
        let owned = run
            .as_ref()
            .is_some_and(|r| r.status == RunStatus::Running && r.lease.as_ref().is_some_and(|l| l.owner == owner));
        let own_session = match (thread, &run) {
            (Some(t), Some(r)) => r.session.as_deref() == Some(t.session.as_str()),
            _ => true,
        };
        if session_first.is_none()
            && let Some(thread) = thread
            && !(owned && own_session)
            && !self.session_there(conn, &thread.session).await?
        {
            return Err(StoreError::NoSession(thread.session.clone()));
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

    /// Writes `batch` for run `id`, which [`SqlStore::owned_for`] has
    /// checked; an error leaves the transaction to be rolled back.
    async fn write_batch(&self, conn: &mut D::Conn, id: &str, batch: Batch) -> StoreResult<()> {
        for e in &batch.journal {
            let inserted = super::run::<D>(conn, sql::APPEND_ENTRY, &entry_args(id, e, None)?).await;
            self.entry_written(inserted, id, e.seq)?;
        }
        for e in &batch.events {
            let data = e.data.to_string();
            self.execute(conn, sql::APPEND_EVENT, &[id.into(), (&e.kind).into(), (&data).into(), e.at_ms.into()])
                .await?;
        }
        for (name, value) in &batch.checkpoints {
            let value = value.to_string();
            self.execute(conn, sql::PUT_CHECKPOINT, &[id.into(), name.into(), (&value).into()]).await?;
        }
        if let Some(thread) = batch.thread {
            self.append_thread_in(conn, &thread.session, thread.expected, thread.messages, now_ms()).await?;
        }
        for child in batch.children {
            if let Some(reason) = crate::jobs::check_new_job(&child.start) {
                return Err(StoreError::Conflict(reason));
            }
            let mut run = child.run.into_run();
            run.parent = Some(id.to_string());
            if !D::LOCKS_ROWS
                && let Some(tenant) = &run.tenant
            {
                self.check_tenant(conn, tenant).await?;
            }
            self.create_run_in(conn, run).await?;
            self.enqueue_in(conn, child.start).await?;
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
        conn: &mut D::Conn,
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
        let signal = match &to {
            Transition::Suspend { signal: Some(wait), .. } => Some(self.signal_came_in(conn, id, wait).await?),
            _ => None,
        };
        let (approval, mut wake) = to.apply(&mut run, now_ms());
        let leave: &[Arg<'_>] = &[
            id.into(),
            run.status.as_str().into(),
            (&run.result).into(),
            (&run.error).into(),
            (&run.suspend_reason).into(),
            (&run.resume_key).into(),
            run.updated_ms.into(),
            run.wake_ms.into(),
            (&run.signal_wait).into(),
            (&run.wake_job).into(),
        ];
        self.execute(conn, sql::LEAVE_RUNNING, leave).await?;
        if run.status.is_final() {
            self.ended_in(conn, &run).await?;
        }
        if let (Some(true), Some(wake)) = (signal, wake.as_mut()) {
            // What it waits for came before it suspended: it wakes at once.
            wake.not_before_ms = run.updated_ms;
        }
        if let Some(wake) = wake {
            self.sleep_in(conn, wake).await?;
        }
        if let Some(a) = approval {
            let arguments = a.arguments.to_string();
            let put: &[Arg<'_>] = &[
                id.into(),
                to_i64(a.seq, "approval sequence number")?.into(),
                (&a.capability).into(),
                (&a.tool).into(),
                (&arguments).into(),
                (&a.args_hash).into(),
                (&a.component_sha256).into(),
                a.decision.map(Decision::as_str).into(),
                a.created_ms.into(),
            ];
            self.execute(conn, sql::PUT_APPROVAL, put).await?;
        } else {
            // A run that ends, or pauses for another reason, waits on no older call.
            self.execute(conn, sql::DELETE_APPROVAL, &[id.into()]).await?;
        }
        Ok(run)
    }

    async fn claim_in(
        &self,
        conn: &mut D::Conn,
        id: &str,
        how: Claim,
        lease: Lease,
        resume_input: Option<String>,
        now: i64,
    ) -> StoreResult<Run> {
        if how == Claim::Retry && D::LOCKS_ROWS {
            // A retry of a prompt takes its session's row first, as a new
            // prompt does: neither can then slip in behind the other. A run's
            // session never changes, so reading it unlocked is enough.
            if let Some(session) = self.fetch_run(conn, sql::SELECT_RUN, id).await?.and_then(|r| r.session) {
                self.session_there(conn, &session).await?;
            }
        }
        // Where rows are locked, the run's lock is what makes one claimer
        // win: a second claim waits here until the first commits, then reads
        // the run as it left it.
        let mut run = self.run_to_write(conn, id).await?;
        if !how.allows(&run, now) {
            return Err(StoreError::Conflict(claim_refusal(id, how, &run)));
        }
        if how == Claim::Retry
            && let Some(session) = &run.session
        {
            let later = self
                .optional(conn, sql::LATER_SESSION_RUN, &[session.into(), run.created_ms.into(), (&run.id).into()])
                .await?;
            let later = later.map(|row| row.text_at(0)).transpose().map_err(|e| self.error(&e))?;
            check_latest(&run, later)?;
        }
        let resumed = matches!(how, Claim::Resume | Claim::Retry | Claim::Wake { .. });
        // A timer's wake keeps the resume input the run had.
        let resume_input = if matches!(how, Claim::Wake { .. }) { run.resume_input.clone() } else { resume_input };
        let claim: &[Arg<'_>] =
            &[id.into(), (&lease.owner).into(), lease.until_ms.into(), now.into(), (&resume_input).into()];
        if resumed {
            self.execute(conn, sql::CLAIM_RESUME, claim).await?;
            let data = crate::runs::resumed_event(how, run.wake_ms).to_string();
            self.execute(conn, sql::APPEND_EVENT, &[id.into(), "resumed".into(), (&data).into(), now.into()]).await?;
            if (run.wake_job.is_some() || run.wake_ms.is_some()) && !matches!(how, Claim::Wake { .. }) {
                self.end_wakes_in(conn, id, "the run was resumed before its timer was due", now).await?;
            }
            run.resume_input = resume_input;
            run.suspend_reason = None;
            run.error = None;
            run.wake_ms = None;
            run.signal_wait = None;
            run.wake_job = None;
        } else {
            self.execute(conn, sql::CLAIM, &claim[..4]).await?;
        }
        run.status = RunStatus::Running;
        run.lease = Some(lease);
        run.updated_ms = now;
        Ok(run)
    }

    /// Records `new` and, if given, queues `start` for it, in one
    /// transaction (a plain run is one autocommit statement where nothing
    /// is checked before the insert).
    async fn create_run_with(
        &self,
        new: NewRun,
        start: Option<crate::NewJob>,
    ) -> StoreResult<(Run, Option<crate::Job>)> {
        if let Some(reason) = start.as_ref().and_then(crate::jobs::check_new_job) {
            return Err(StoreError::Conflict(reason));
        }
        let run = new.into_run();
        // What is checked before the insert, in one transaction with it:
        // where rows are locked, a prompt's session; elsewhere a tenant (the
        // checked insert names a missing session itself). A taken id, then a
        // missing tenant, are named before anything about a session.
        let check_first = if D::LOCKS_ROWS { run.session.is_some() } else { run.tenant.is_some() };
        if !check_first && start.is_none() {
            let mut conn = self.db.single().await?;
            let result = self.create_run_in(&mut conn, run).await;
            return Ok((self.db.end(conn, result).await?, None));
        }
        let mut tx = self.db.begin().await?;
        let result = async {
            if check_first {
                if self.optional(&mut tx, sql::RUN_EXISTS, &[(&run.id).into()]).await?.is_some() {
                    return Err(StoreError::Conflict(run_exists(&run.id)));
                }
                if let Some(tenant) = &run.tenant {
                    self.check_tenant(&mut tx, tenant).await?;
                }
            }
            let run = self.create_run_in(&mut tx, run).await?;
            let job = match start {
                Some(start) => Some(self.enqueue_in(&mut tx, start).await?),
                None => None,
            };
            Ok((run, job))
        }
        .await;
        self.db.end(tx, result).await
    }

    /// Records `run`. Where rows are locked, a prompt's session was locked
    /// and checked for a prompt in progress first, so of two processes
    /// starting a prompt of one session at once the second sees the
    /// first's run. Elsewhere the insert itself checks the session (one
    /// statement, as for a plain run), and why nothing was written is
    /// worked out after.
    pub(super) async fn create_run_in(&self, conn: &mut D::Conn, run: Run) -> StoreResult<Run> {
        if D::LOCKS_ROWS
            && let Some(session) = &run.session
        {
            if !self.session_there(conn, session).await? {
                return Err(StoreError::NoSession(session.clone()));
            }
            // A statement of its own after the lock: it sees every run
            // committed before the lock was granted.
            let blocker = self.optional(conn, sql::PROMPT_IN_PROGRESS, &[session.into()]).await?;
            let blocker = blocker.map(|row| self.decode(|errors| rows::prompt(&row, errors))).transpose()?;
            check_no_prompt_in_progress(session, blocker)?;
        }
        let checked = !D::LOCKS_ROWS && run.session.is_some();
        let statement = if checked { sql::INSERT_SESSION_RUN } else { sql::INSERT_RUN };
        let grant = run.grant.to_string();
        let args: [Arg<'_>; 23] = [
            (&run.id).into(),
            (&run.agent).into(),
            (&run.kind).into(),
            (&run.source).into(),
            (&run.component_sha256).into(),
            (&run.input).into(),
            (&grant).into(),
            run.status.as_str().into(),
            (&run.suspend_reason).into(),
            (&run.resume_key).into(),
            (&run.resume_input).into(),
            (&run.result).into(),
            (&run.error).into(),
            run.created_ms.into(),
            run.updated_ms.into(),
            run.lease.as_ref().map(|l| l.owner.as_str()).into(),
            run.lease.as_ref().map(|l| l.until_ms).into(),
            (&run.session).into(),
            (&run.tenant).into(),
            run.wake_ms.into(),
            (&run.signal_wait).into(),
            (&run.wake_job).into(),
            (&run.parent).into(),
        ];
        let inserted = match super::run::<D>(conn, statement, &args).await {
            Ok(rows) => rows,
            // The foreign keys a run has that a caller names: its session and
            // its tenant, which `create_run` checked first if it had to. A
            // taken id inserts nothing, so it is named first here too.
            Err(sqlx::Error::Database(db)) if db.is_foreign_key_violation() => {
                return Err(match (run.session, run.tenant) {
                    (Some(session), _) => StoreError::NoSession(session),
                    (None, tenant) => StoreError::NoTenant(tenant.unwrap_or_default()),
                });
            }
            Err(e) => return Err(self.error(&e)),
        };
        match inserted {
            0 if checked => Err(self.not_created(conn, &run).await),
            0 => Err(StoreError::Conflict(run_exists(&run.id))),
            _ => Ok(run),
        }
    }

    /// Why `run` was not inserted by the checked insert: its id is taken
    /// (whatever its session), its session is gone, or a prompt of its
    /// session is in progress.
    async fn not_created(&self, conn: &mut D::Conn, run: &Run) -> StoreError {
        let taken = self.optional(conn, sql::RUN_EXISTS, &[(&run.id).into()]).await;
        match (taken, &run.session) {
            (Err(e), _) => return e,
            (Ok(Some(_)), _) | (Ok(None), None) => return StoreError::Conflict(run_exists(&run.id)),
            (Ok(None), Some(_)) => {}
        }
        let session = run.session.as_deref().unwrap_or_default();
        match self.session_there(conn, session).await {
            Err(e) => return e,
            Ok(false) => return StoreError::NoSession(session.to_string()),
            Ok(true) => {}
        }
        let blocker = match self.optional(conn, sql::PROMPT_IN_PROGRESS, &[session.into()]).await {
            Ok(row) => row.map(|row| self.decode(|errors| rows::prompt(&row, errors))).transpose(),
            Err(e) => Err(e),
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

    async fn cancel_in(&self, conn: &mut D::Conn, id: &str, reason: &str) -> StoreResult<Run> {
        // Every writer locks a child's row before its parent's (a child's
        // end locks its parent's): the unfinished runs below this one
        // first, each after those below it, then this one. A cancelled run
        // has no child left running.
        let mut below: Vec<(String, String)> = Vec::new();
        let mut frontier = vec![id.to_string()];
        while let Some(parent) = frontier.pop() {
            for row in self.all(conn, sql::UNFINISHED_CHILDREN, &[parent.as_str().into()]).await? {
                let child = row.text_at(0).map_err(|e| self.error(&e))?;
                frontier.push(child.clone());
                below.push((child, parent.clone()));
            }
        }
        for (child, parent) in below.iter().rev() {
            let run = self.run_to_write(conn, child).await?;
            // One that ended meanwhile stays as it ended.
            if !run.status.is_final() {
                self.cancel_one(conn, run, &crate::signals::cancelled_with_parent(parent)).await?;
            }
        }
        let run = self.run_to_write(conn, id).await?;
        if run.status.is_final() {
            return Err(StoreError::Conflict(nothing_to_cancel(id, run.status)));
        }
        self.cancel_one(conn, run, reason).await
    }

    /// Cancels `run`, whose row is locked and which has not ended.
    async fn cancel_one(&self, conn: &mut D::Conn, mut run: Run, reason: &str) -> StoreResult<Run> {
        let id = run.id.clone();
        let id = id.as_str();
        run.status = RunStatus::Cancelled;
        run.error = Some(reason.to_string());
        run.lease = None;
        run.updated_ms = now_ms();
        self.execute(conn, sql::CANCEL, &[id.into(), reason.into(), run.updated_ms.into()]).await?;
        if run.wake_job.take().is_some() | run.wake_ms.take().is_some() | run.signal_wait.take().is_some() {
            self.end_wakes_in(conn, id, "the run was cancelled", run.updated_ms).await?;
        }
        self.execute(conn, sql::DELETE_APPROVAL, &[id.into()]).await?;
        let data = serde_json::json!({ "reason": reason }).to_string();
        self.execute(conn, sql::APPEND_EVENT, &[id.into(), "cancelled".into(), (&data).into(), run.updated_ms.into()])
            .await?;
        self.ended_in(conn, &run).await?;
        Ok(run)
    }

    async fn decide_in(
        &self,
        conn: &mut D::Conn,
        id: &str,
        call: &PendingCall,
        decision: Decision,
    ) -> StoreResult<Approval> {
        let row = self.optional(conn, D::SQL.run_owner_to_write, &[id.into()]).await?;
        let Some(row) = row else { return Err(StoreError::NoRun(id.to_string())) };
        let status = self.decode_status(&row)?;
        let current = match self.optional(conn, sql::SELECT_APPROVAL, &[id.into()]).await? {
            Some(row) => Some(self.decode(|errors| rows::approval(id, &row, errors))?),
            None => None,
        };
        let mut approval = check_decision(id, call, decision, status, current)?;
        let seq = to_i64(call.seq, "approval sequence number")?;
        self.execute(conn, sql::DECIDE, &[id.into(), decision.as_str().into(), seq.into(), (&call.args_hash).into()])
            .await?;
        approval.decision = Some(decision);
        Ok(approval)
    }
}

#[async_trait::async_trait]
impl<D: Dialect> Runs for SqlStore<D> {
    async fn create_run(&self, new: NewRun) -> StoreResult<Run> {
        crate::latency::timed("create_run", async move { Ok(self.create_run_with(new, None).await?.0) }).await
    }

    async fn create_run_and_start(&self, new: NewRun, start: crate::NewJob) -> StoreResult<(Run, crate::Job)> {
        crate::latency::timed("create_run", async move {
            let (run, job) = self.create_run_with(new, Some(start)).await?;
            let job = job.ok_or_else(|| StoreError::Conflict("the start job was not queued".into()))?;
            Ok((run, job))
        })
        .await
    }

    async fn run(&self, id: &str) -> StoreResult<Option<Run>> {
        let mut conn = self.db.read().await?;
        self.fetch_run(&mut conn, sql::SELECT_RUN, id).await
    }

    async fn children(&self, id: &str) -> StoreResult<Vec<Run>> {
        let rows = self.read_all(sql::CHILD_RUNS, &[id.into()]).await?;
        self.decode_runs(&rows)
    }

    async fn runs(&self, status: Option<RunStatus>, count: usize) -> StoreResult<Vec<Run>> {
        let rows = match status {
            Some(s) => self.read_all(sql::LIST_RUNS_BY_STATUS, &[s.as_str().into(), limit(count).into()]).await?,
            None => self.read_all(sql::LIST_RUNS, &[limit(count).into()]).await?,
        };
        self.decode_runs(&rows)
    }

    async fn commit(&self, id: &str, owner: &str, batch: Batch) -> StoreResult<()> {
        crate::latency::timed("commit", async move {
            // The common case, one host call's entry and nothing else, is one
            // autocommit statement whose lease check (on PostgreSQL with the
            // run's row locked) rides in the insert: the same cost as a bare
            // insert (see benches/journal.rs).
            if let ([e], [], [], None, []) =
                (&batch.journal[..], &batch.events[..], &batch.checkpoints[..], &batch.thread, &batch.children[..])
            {
                let args = entry_args(id, e, Some(owner))?;
                let mut conn = self.db.single().await?;
                let inserted = super::run::<D>(&mut conn, D::SQL.append_entry_if_owner, &args).await;
                let result = match self.entry_written(inserted, id, e.seq) {
                    Ok(0) => match self.check_owner(&mut conn, id, owner).await {
                        Err(e) => Err(e),
                        // It changed hands and back between the two statements:
                        // say so rather than pretend the write happened.
                        Ok(()) => Err(StoreError::Conflict(not_owned(id, RunStatus::Running))),
                    },
                    Ok(_) => Ok(()),
                    Err(e) => Err(e),
                };
                return self.db.end(conn, result).await;
            }
            if batch.is_empty() {
                let mut conn = self.db.single().await?;
                let result = self.check_owner(&mut conn, id, owner).await;
                return self.db.end(conn, result).await;
            }
            let mut tx = self.db.begin().await?;
            let result = async {
                self.owned_for(&mut tx, id, owner, batch.thread.as_ref()).await?;
                self.write_batch(&mut tx, id, batch).await
            }
            .await;
            self.db.end(tx, result).await
        })
        .await
    }

    async fn transition(&self, id: &str, owner: &str, batch: Batch, to: Transition) -> StoreResult<Run> {
        crate::latency::timed("transition", async move {
            let mut tx = self.db.begin().await?;
            let result = self.transition_in(&mut tx, id, owner, batch, to).await;
            self.db.end(tx, result).await
        })
        .await
    }

    async fn claim(
        &self,
        id: &str,
        how: Claim,
        lease: Lease,
        resume_input: Option<String>,
        now: i64,
    ) -> StoreResult<Run> {
        crate::latency::timed("claim", async move {
            let mut tx = self.db.begin().await?;
            let result = self.claim_in(&mut tx, id, how, lease, resume_input, now).await;
            self.db.end(tx, result).await
        })
        .await
    }

    async fn renew_leases(&self, owner: &str, ids: &[String], until_ms: i64) -> StoreResult<Vec<String>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.db.single().await?;
        let result = self.texts(&mut conn, D::SQL.renew_leases, &[owner.into(), until_ms.into(), ids.into()]).await;
        self.db.end(conn, result).await
    }

    async fn orphans(&self, now: i64) -> StoreResult<Vec<Run>> {
        let rows = self.read_all(sql::ORPHANS, &[now.into()]).await?;
        self.decode_runs(&rows)
    }

    async fn cancel(&self, id: &str, reason: &str) -> StoreResult<Run> {
        let mut tx = self.db.begin().await?;
        let result = self.cancel_in(&mut tx, id, reason).await;
        self.db.end(tx, result).await
    }

    async fn send_signal(&self, id: &str, name: &str, data: &str) -> StoreResult<Signal> {
        let mut tx = self.db.begin().await?;
        let result = self.send_signal_in(&mut tx, id, name, data).await;
        self.db.end(tx, result).await
    }

    async fn next_signal(&self, id: &str, name: &str, after: i64) -> StoreResult<Option<Signal>> {
        self.next_signal_of(id, name, after).await
    }

    async fn journal(&self, id: &str) -> StoreResult<Vec<Entry>> {
        let rows = self.read_all(sql::JOURNAL, &[id.into()]).await?;
        rows.iter().map(|row| self.decode(|errors| rows::entry(id, row, errors))).collect()
    }

    async fn events(&self, id: &str, after: i64, count: usize) -> StoreResult<Vec<StoredEvent>> {
        let rows = self.read_all(sql::EVENTS, &[id.into(), after.into(), limit(count).into()]).await?;
        rows.iter().map(|row| self.decode(|errors| rows::event(row, errors))).collect()
    }

    async fn checkpoints(&self, id: &str) -> StoreResult<Vec<(String, Value)>> {
        let rows = self.read_all(sql::CHECKPOINTS, &[id.into()]).await?;
        rows.iter().map(|row| self.decode(|errors| rows::checkpoint(id, row, errors))).collect()
    }

    async fn approval(&self, id: &str) -> StoreResult<Option<Approval>> {
        let row = self.read_optional(sql::SELECT_APPROVAL, &[id.into()]).await?;
        row.map(|r| self.decode(|errors| rows::approval(id, &r, errors))).transpose()
    }

    async fn decide(&self, id: &str, call: &PendingCall, decision: Decision) -> StoreResult<Approval> {
        let mut tx = self.db.begin().await?;
        let result = self.decide_in(&mut tx, id, call, decision).await;
        self.db.end(tx, result).await
    }

    async fn decide_and_resume(
        &self,
        id: &str,
        call: &PendingCall,
        decision: Decision,
        resume: crate::NewJob,
    ) -> StoreResult<Approval> {
        if let Some(reason) = crate::jobs::check_new_job(&resume) {
            return Err(StoreError::Conflict(reason));
        }
        let mut tx = self.db.begin().await?;
        let result = async {
            let approval = self.decide_in(&mut tx, id, call, decision).await?;
            // Locked: a job of the run whose worker is completing it now is
            // waited for (it is not live once that commits). A worker that
            // completes its job after this decision commits reads the
            // decision and queues the resume itself.
            let live = self.all(&mut tx, D::SQL.live_jobs_of_run_to_write, &[id.into()]).await?;
            if live.is_empty() {
                self.enqueue_in(&mut tx, resume).await?;
            }
            Ok(approval)
        }
        .await;
        self.db.end(tx, result).await
    }

    async fn clear_approval(&self, id: &str, owner: &str) -> StoreResult<()> {
        let mut tx = self.db.begin().await?;
        let result = async {
            self.check_owner(&mut tx, id, owner).await?;
            self.execute(&mut tx, sql::DELETE_APPROVAL, &[id.into()]).await?;
            Ok(())
        }
        .await;
        self.db.end(tx, result).await
    }
    async fn add_pass_trace(&self, id: &str, context: &str, at_ms: i64) -> StoreResult<()> {
        let mut conn = self.db.single().await?;
        let result = match super::run::<D>(&mut conn, sql::ADD_PASS_TRACE, &[id.into(), context.into(), at_ms.into()])
            .await
        {
            Ok(_) => Ok(()),
            Err(sqlx::Error::Database(db)) if db.is_foreign_key_violation() => Err(StoreError::NoRun(id.to_string())),
            Err(e) => Err(self.error(&e)),
        };
        self.db.end(conn, result).await
    }

    async fn pass_traces(&self, id: &str, limit: usize) -> StoreResult<Vec<String>> {
        let rows = self.read_all(sql::PASS_TRACES, &[id.into(), super::limit(limit).into()]).await?;
        let mut contexts =
            rows.iter().map(|row| row.text_at(0).map_err(|e| self.error(&e))).collect::<StoreResult<Vec<_>>>()?;
        contexts.reverse();
        Ok(contexts)
    }
}
