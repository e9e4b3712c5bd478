//! The in-memory backend: for ephemeral runs and tests. It keeps the same
//! rules as SQLite (leases, claims, write-once checkpoints) so code that
//! works against one works against the other.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use serde_json::Value;

use crate::jobs::check_new_job;
use crate::refusal::{
    check_decision, claim_refusal, duplicate_entry, job_exists, key_exists, key_hash_taken, not_final, not_owned,
    nothing_to_cancel, run_exists, sign_in_taken, tenant_exists, tenant_name_taken,
};
use crate::sessions::{
    check_expected, check_latest, check_no_prompt_in_progress, check_own_session, in_progress, touched,
};
use crate::signals::{check_signal, waits_for};
use crate::tenants::{check_new_key, check_new_plugin, next_audit_entry};
use crate::{
    ApiKey, Approval, AuditEntry, Backend, Batch, Claim, Decision, Entry, FireOutcome, Firing, Job, JobLease,
    JobStatus, Jobs, Lease, Ledger, NewApiKey, NewJob, NewPlugin, NewRun, NewSchedule, NewTenant, PendingCall,
    PluginAcceptance, Plugins, Retry, Run, RunStatus, RunUsage, Runs, Schedule, Schedules, Session, Sessions, SignIn,
    SignIns, Signal, StoreError, StoreResult, StoredEvent, StoredPlugin, Tenant, Tenants, ThreadAppend, Transition,
    Usage, Waiting, new_session_id, now_ms, usage_period,
};

/// A store that lives only as long as the process.
#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    runs: BTreeMap<String, Run>,
    /// Per run, in sequence order.
    journal: BTreeMap<String, Vec<Entry>>,
    events: Vec<StoredEvent>,
    /// Per run, by name (the order `checkpoints` returns).
    checkpoints: BTreeMap<String, BTreeMap<String, Value>>,
    approvals: BTreeMap<String, Approval>,
    /// By id.
    schedules: BTreeMap<String, Schedule>,
    /// In the order sent, across runs.
    signals: Vec<Signal>,
    jobs: BTreeMap<String, Job>,
    /// The last fencing token a job claim got.
    last_token: i64,
    /// By id.
    sessions: BTreeMap<String, Session>,
    /// Session ids by `(agent, instance)`: the unique address.
    addresses: BTreeMap<(String, String), String>,
    /// Per session, in order.
    threads: BTreeMap<String, Vec<Value>>,
    /// By id.
    tenants: BTreeMap<String, Tenant>,
    /// Tenant ids by name: the unique name.
    tenant_names: BTreeMap<String, String>,
    /// Per tenant with audit entries, the head: last sequence number and
    /// hash (the relational backends keep it on the tenant's row).
    audit_heads: BTreeMap<String, (u64, String)>,
    /// Per tenant, in sequence order.
    audit: BTreeMap<String, Vec<AuditEntry>>,
    /// By id.
    keys: BTreeMap<String, ApiKey>,
    /// Key ids by hash: the unique hash.
    key_hashes: BTreeMap<String, String>,
    /// Console sign-ins by id hash.
    sign_ins: BTreeMap<String, SignIn>,
    /// By `(tenant, sha256)`, with the bytes.
    plugins: BTreeMap<(String, String), (StoredPlugin, Vec<u8>)>,
    plugin_acceptances: BTreeMap<(String, String), PluginAcceptance>,
    /// By `(tenant, period_ms)`.
    usage: BTreeMap<(String, i64), Usage>,
    /// Per run that used anything.
    run_usage: BTreeMap<String, RunUsage>,
    /// Per run: its passes' trace contexts, with when, in the order added.
    pass_traces: BTreeMap<String, Vec<(String, i64)>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain data behind; keep using it.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Inner {
    fn run_mut(&mut self, id: &str) -> StoreResult<&mut Run> {
        self.runs.get_mut(id).ok_or_else(|| StoreError::NoRun(id.to_string()))
    }

    fn owned(&mut self, id: &str, owner: &str) -> StoreResult<&mut Run> {
        let run = self.run_mut(id)?;
        if run.status != RunStatus::Running || run.lease.as_ref().is_none_or(|l| l.owner != owner) {
            return Err(StoreError::Conflict(not_owned(id, run.status)));
        }
        Ok(run)
    }

    /// [`Inner::owned`] for a batch: first the session its thread append
    /// names must be there, then the run must be owned and a prompt of that
    /// session (the relational backends check in the same order).
    fn owned_for(&mut self, id: &str, owner: &str, thread: Option<&ThreadAppend>) -> StoreResult<()> {
        if let Some(thread) = thread
            && !self.sessions.contains_key(&thread.session)
        {
            return Err(StoreError::NoSession(thread.session.clone()));
        }
        let run = self.owned(id, owner)?;
        if let Some(thread) = thread {
            check_own_session(run, thread)?;
        }
        Ok(())
    }

    /// Writes `batch`, or nothing if one of its journal entries is already
    /// there (as SQLite's primary key refuses the whole transaction) or its
    /// thread append is refused.
    fn apply(&mut self, id: &str, batch: Batch) -> StoreResult<()> {
        let journal = self.journal.entry(id.to_string()).or_default();
        for (i, e) in batch.journal.iter().enumerate() {
            let taken = journal.binary_search_by_key(&e.seq, |j| j.seq).is_ok();
            if taken || batch.journal[..i].iter().any(|j| j.seq == e.seq) {
                return Err(StoreError::Conflict(duplicate_entry(id, e.seq)));
            }
        }
        for child in &batch.children {
            if self.runs.contains_key(&child.run.id) {
                return Err(StoreError::Conflict(run_exists(&child.run.id)));
            }
            if let Some(tenant) = &child.run.tenant {
                self.check_tenant(tenant)?;
            }
            if let Some(reason) = check_new_job(&child.start) {
                return Err(StoreError::Conflict(reason));
            }
        }
        // Last of the checks, first of the writes: a refused append leaves
        // everything as it was.
        if let Some(thread) = batch.thread {
            self.append_thread(&thread.session, thread.expected, thread.messages, now_ms())?;
        }
        let journal = self.journal.entry(id.to_string()).or_default();
        for e in batch.journal {
            let at = journal.partition_point(|j| j.seq < e.seq);
            journal.insert(at, e);
        }
        let checkpoints = self.checkpoints.entry(id.to_string()).or_default();
        for (name, value) in batch.checkpoints {
            checkpoints.entry(name).or_insert(value);
        }
        for e in batch.events {
            self.push_event(id, e.kind, e.data, e.at_ms);
        }
        for child in batch.children {
            let mut run = child.run.into_run();
            run.parent = Some(id.to_string());
            self.runs.insert(run.id.clone(), run);
            self.enqueue(child.start)?;
        }
        Ok(())
    }

    /// Records signal `name` with `data` for run `id` and, if the run
    /// waits for it, makes its wake due now; unchecked.
    fn signal(&mut self, id: &str, name: &str, data: &str) -> Signal {
        let waits = self.runs.get(id).is_some_and(|run| waits_for(run, name));
        let at = now_ms();
        let signal = Signal {
            id: self.signals.last().map_or(1, |s| s.id + 1),
            run: id.to_string(),
            name: name.to_string(),
            data: data.to_string(),
            sent_ms: at,
        };
        self.signals.push(signal.clone());
        self.push_event(id, "signal".into(), serde_json::json!({ "name": name, "signal": signal.id }), at);
        if waits {
            for job in self.jobs.values_mut() {
                if job.run == id && job.kind == crate::JobKind::Wake && job.status == JobStatus::Sleeping {
                    job.not_before_ms = at;
                }
            }
        }
        signal
    }

    /// What a run's end does beyond its own row: a child's end is its
    /// parent's signal.
    fn ended(&mut self, run: &Run) {
        if let Some(parent) = &run.parent
            && self.runs.contains_key(parent)
        {
            self.signal(parent, &crate::signals::child_signal(&run.id), &crate::signals::child_outcome(run));
        }
    }

    /// Cancels run `id` and, first, its unfinished children (theirs too).
    fn cancel(&mut self, id: &str, reason: &str) -> StoreResult<Run> {
        let run = self.run_mut(id)?;
        if run.status.is_final() {
            return Err(StoreError::Conflict(nothing_to_cancel(id, run.status)));
        }
        let children: Vec<String> = self
            .runs
            .values()
            .filter(|r| r.parent.as_deref() == Some(id) && !r.status.is_final())
            .map(|r| r.id.clone())
            .collect();
        for child in children {
            self.cancel(&child, &crate::signals::cancelled_with_parent(id))?;
        }
        let run = self.run_mut(id)?;
        run.status = RunStatus::Cancelled;
        run.error = Some(reason.to_string());
        run.lease = None;
        run.updated_ms = now_ms();
        let slept = run.wake_ms.take();
        let waited = run.wake_job.take();
        run.signal_wait = None;
        let run = run.clone();
        if slept.is_some() || waited.is_some() {
            self.end_wakes(id, "the run was cancelled", run.updated_ms);
        }
        self.approvals.remove(id);
        self.push_event(id, "cancelled".into(), serde_json::json!({ "reason": reason }), run.updated_ms);
        self.ended(&run);
        Ok(run)
    }

    /// Appends to session `id`'s thread if it still holds `expected`
    /// messages (see [`Sessions::append_thread`]).
    fn append_thread(&mut self, id: &str, expected: u64, messages: Vec<Value>, now: i64) -> StoreResult<Session> {
        let session = self.sessions.get_mut(id).ok_or_else(|| StoreError::NoSession(id.to_string()))?;
        check_expected(session, expected)?;
        session.messages += messages.len() as u64;
        session.updated_ms = touched(session.updated_ms, now);
        let session = session.clone();
        self.threads.entry(id.to_string()).or_default().extend(messages);
        Ok(session)
    }

    /// Session `id`'s runs, oldest first (as [`Sessions::session_runs`]).
    fn session_runs(&self, id: &str) -> Vec<&Run> {
        let mut runs: Vec<&Run> = self.runs.values().filter(|r| r.session.as_deref() == Some(id)).collect();
        runs.sort_by(|a, b| a.created_ms.cmp(&b.created_ms).then_with(|| a.id.cmp(&b.id)));
        runs
    }

    /// Whether session `id` has a prompt in progress.
    fn busy(&self, id: &str) -> bool {
        self.runs.values().any(|r| r.session.as_deref() == Some(id) && in_progress(r.status))
    }

    /// Appends an entry to `tenant`'s audit log (a tenant that is there).
    fn append_audit(&mut self, tenant: &str, kind: &str, data: &Value, at_ms: i64) -> AuditEntry {
        let head = self.audit_heads.get(tenant).cloned();
        let entry = next_audit_entry(tenant, head, kind, data, at_ms);
        self.audit_heads.insert(tenant.to_string(), (entry.seq, entry.hash.clone()));
        self.audit.entry(tenant.to_string()).or_default().push(entry.clone());
        entry
    }

    /// Succeeds if tenant `id` is there.
    fn enqueue(&mut self, new: NewJob) -> StoreResult<Job> {
        if let Some(reason) = check_new_job(&new) {
            return Err(StoreError::Conflict(reason));
        }
        if !self.runs.contains_key(&new.run) {
            return Err(StoreError::NoRun(new.run));
        }
        if self.jobs.contains_key(&new.id) {
            return Err(StoreError::Conflict(job_exists(&new.id)));
        }
        let tenant = self.runs.get(&new.run).and_then(|r| r.tenant.clone());
        let own = self.jobs.values().filter(|j| j.tenant == tenant).map(|j| j.turn).max();
        let claimed = self.jobs.values().filter(|j| j.status != JobStatus::Queued).map(|j| j.turn).max();
        let job = new.into_job(tenant, crate::next_turn(own, claimed));
        self.jobs.insert(job.id.clone(), job.clone());
        Ok(job)
    }

    fn check_tenant(&self, id: &str) -> StoreResult<()> {
        if !self.tenants.contains_key(id) {
            return Err(StoreError::NoTenant(id.to_string()));
        }
        Ok(())
    }

    fn job_mut(&mut self, id: &str) -> StoreResult<&mut Job> {
        self.jobs.get_mut(id).ok_or_else(|| StoreError::NoJob(id.to_string()))
    }

    /// Deletes session `id`, its thread, and its runs with everything
    /// theirs (the relational schema's cascades); `false` if it is not
    /// there.
    fn delete_session(&mut self, id: &str) -> bool {
        let Some(session) = self.sessions.remove(id) else { return false };
        self.addresses.remove(&(session.agent, session.instance));
        self.threads.remove(id);
        let runs: BTreeSet<String> =
            self.runs.values().filter(|r| r.session.as_deref() == Some(id)).map(|r| r.id.clone()).collect();
        for run in &runs {
            self.runs.remove(run);
            self.journal.remove(run);
            self.checkpoints.remove(run);
            self.signals.retain(|s| &s.run != run);
            self.approvals.remove(run);
            self.run_usage.remove(run);
            self.pass_traces.remove(run);
        }
        self.events.retain(|e| !runs.contains(&e.run));
        self.jobs.retain(|_, j| !runs.contains(&j.run));
        true
    }

    /// Ends run `id`'s wakes not yet taken (as `sql::END_WAKES_OF_RUN`).
    fn end_wakes(&mut self, id: &str, why: &str, now: i64) {
        for job in self.jobs.values_mut() {
            if job.run == id
                && job.kind == crate::JobKind::Wake
                && matches!(job.status, JobStatus::Sleeping | JobStatus::Queued)
            {
                job.status = JobStatus::Done;
                job.error = Some(why.to_string());
                job.updated_ms = now;
            }
        }
    }

    /// Queues the wakes due by `now`, the earliest first, at most 64 (as
    /// the SQL store's claim does), each at its queue's next turn.
    fn promote_wakes(&mut self, now: i64) {
        let mut due: Vec<(i64, String)> =
            self.jobs.values().filter(|j| j.wakes(now)).map(|j| (j.not_before_ms, j.id.clone())).collect();
        due.sort();
        for (_, id) in due.into_iter().take(64) {
            let tenant = self.jobs.get(&id).and_then(|j| j.tenant.clone());
            let own = self.jobs.values().filter(|j| j.tenant == tenant).map(|j| j.turn).max();
            let claimed = self.jobs.values().filter(|j| j.status != JobStatus::Queued).map(|j| j.turn).max();
            let turn = crate::next_turn(own, claimed);
            if let Some(job) = self.jobs.get_mut(&id) {
                job.status = JobStatus::Queued;
                job.turn = turn;
                job.updated_ms = now;
            }
        }
    }

    fn next_signal(&self, id: &str, name: &str, after: i64) -> Option<&Signal> {
        self.signals.iter().find(|s| s.run == id && s.name == name && s.id > after)
    }

    fn push_event(&mut self, id: &str, kind: String, data: Value, at_ms: i64) {
        let next = self.events.last().map_or(1, |e| e.id + 1);
        self.events.push(StoredEvent { id: next, run: id.to_string(), kind, data, at_ms });
    }
}

#[async_trait::async_trait]
impl Backend for MemoryStore {
    fn location(&self) -> String {
        "(memory)".into()
    }
}

#[async_trait::async_trait]
impl Runs for MemoryStore {
    async fn create_run(&self, new: NewRun) -> StoreResult<Run> {
        let mut inner = self.lock();
        if inner.runs.contains_key(&new.id) {
            return Err(StoreError::Conflict(run_exists(&new.id)));
        }
        if let Some(tenant) = &new.tenant {
            inner.check_tenant(tenant)?;
        }
        if let Some(session) = &new.session {
            if !inner.sessions.contains_key(session) {
                return Err(StoreError::NoSession(session.clone()));
            }
            let blocker = inner.session_runs(session).into_iter().find(|r| in_progress(r.status));
            check_no_prompt_in_progress(session, blocker.map(|r| (r.id.clone(), r.status)))?;
        }
        let id = new.id.clone();
        let run = new.into_run();
        inner.runs.insert(id, run.clone());
        Ok(run)
    }

    async fn create_run_and_start(&self, new: NewRun, start: NewJob) -> StoreResult<(Run, Job)> {
        if let Some(reason) = check_new_job(&start) {
            return Err(StoreError::Conflict(reason));
        }
        let run = self.create_run(new).await?;
        match self.enqueue(start).await {
            Ok(job) => Ok((run, job)),
            Err(e) => {
                self.lock().runs.remove(&run.id);
                Err(e)
            }
        }
    }

    async fn run(&self, id: &str) -> StoreResult<Option<Run>> {
        Ok(self.lock().runs.get(id).cloned())
    }

    async fn children(&self, id: &str) -> StoreResult<Vec<Run>> {
        let inner = self.lock();
        let mut runs: Vec<Run> = inner.runs.values().filter(|r| r.parent.as_deref() == Some(id)).cloned().collect();
        runs.sort_by(|a, b| a.created_ms.cmp(&b.created_ms).then_with(|| a.id.cmp(&b.id)));
        Ok(runs)
    }

    async fn runs(&self, status: Option<RunStatus>, limit: usize) -> StoreResult<Vec<Run>> {
        let inner = self.lock();
        let mut runs: Vec<Run> =
            inner.runs.values().filter(|r| status.is_none_or(|s| r.status == s)).cloned().collect();
        runs.sort_by(|a, b| b.created_ms.cmp(&a.created_ms).then_with(|| b.id.cmp(&a.id)));
        runs.truncate(limit);
        Ok(runs)
    }

    async fn commit(&self, id: &str, owner: &str, batch: Batch) -> StoreResult<()> {
        let mut inner = self.lock();
        inner.owned_for(id, owner, batch.thread.as_ref())?;
        inner.apply(id, batch)
    }

    async fn transition(&self, id: &str, owner: &str, batch: Batch, to: Transition) -> StoreResult<Run> {
        let mut inner = self.lock();
        inner.owned_for(id, owner, batch.thread.as_ref())?;
        if let Transition::Finish { status, .. } = &to
            && !status.is_final()
        {
            return Err(StoreError::Conflict(not_final(id, *status)));
        }
        inner.apply(id, batch)?;
        let came = match &to {
            Transition::Suspend { signal: Some(wait), .. } => inner.next_signal(id, &wait.name, wait.after).is_some(),
            _ => false,
        };
        let run = inner.run_mut(id)?;
        let (approval_record, mut wake) = to.apply(run, now_ms());
        let run = run.clone();
        if let (true, Some(wake)) = (came, wake.as_mut()) {
            // What it waits for came before it suspended: it wakes at once.
            wake.not_before_ms = run.updated_ms;
        }
        if let Some(wake) = wake {
            let job = wake.into_job(run.tenant.clone(), 0);
            inner.jobs.insert(job.id.clone(), job);
        }
        match approval_record {
            Some(a) => {
                inner.approvals.insert(id.to_string(), a);
            }
            // A run that ends, or pauses for another reason, waits on no older call.
            None => {
                inner.approvals.remove(id);
            }
        }
        if run.status.is_final() {
            inner.ended(&run);
        }
        Ok(run)
    }

    async fn claim(
        &self,
        id: &str,
        how: Claim,
        lease: Lease,
        resume_input: Option<String>,
        now: i64,
    ) -> StoreResult<Run> {
        let mut inner = self.lock();
        let run = inner.runs.get(id).ok_or_else(|| StoreError::NoRun(id.to_string()))?;
        if !how.allows(run, now) {
            return Err(StoreError::Conflict(claim_refusal(id, how, run)));
        }
        if how == Claim::Retry
            && let Some(session) = &run.session
        {
            let later =
                inner.session_runs(session).into_iter().find(|r| (r.created_ms, &r.id) > (run.created_ms, &run.id));
            check_latest(run, later.map(|r| r.id.clone()))?;
        }
        let run = inner.run_mut(id)?;
        let slept = run.wake_ms.take();
        let waited = run.wake_job.take();
        run.signal_wait = None;
        run.status = RunStatus::Running;
        run.lease = Some(lease);
        run.updated_ms = now;
        let resumed = matches!(how, Claim::Resume | Claim::Retry | Claim::Wake { .. });
        if matches!(how, Claim::Resume | Claim::Retry) {
            run.resume_input = resume_input;
        }
        if resumed {
            run.suspend_reason = None;
            run.error = None;
        }
        let run = run.clone();
        if resumed {
            inner.push_event(id, "resumed".into(), crate::runs::resumed_event(how, slept), now);
        }
        if (slept.is_some() || waited.is_some()) && matches!(how, Claim::Resume | Claim::Retry) {
            inner.end_wakes(id, "the run was resumed before its timer was due", now);
        }
        Ok(run)
    }

    async fn renew_leases(&self, owner: &str, ids: &[String], until_ms: i64) -> StoreResult<Vec<String>> {
        let mut inner = self.lock();
        let mut renewed = Vec::new();
        for id in ids {
            let Some(run) = inner.runs.get_mut(id) else { continue };
            match &mut run.lease {
                Some(l) if run.status == RunStatus::Running && l.owner == owner => {
                    l.until_ms = until_ms;
                    renewed.push(id.clone());
                }
                _ => {}
            }
        }
        Ok(renewed)
    }

    async fn orphans(&self, now: i64) -> StoreResult<Vec<Run>> {
        let inner = self.lock();
        Ok(inner
            .runs
            .values()
            .filter(|r| r.status == RunStatus::Running && r.lease.as_ref().is_none_or(|l| l.until_ms < now))
            .cloned()
            .collect())
    }

    async fn cancel(&self, id: &str, reason: &str) -> StoreResult<Run> {
        let mut inner = self.lock();
        inner.run_mut(id)?;
        inner.cancel(id, reason)
    }

    async fn send_signal(&self, id: &str, name: &str, data: &str) -> StoreResult<Signal> {
        let mut inner = self.lock();
        let run = inner.runs.get(id).ok_or_else(|| StoreError::NoRun(id.to_string()))?;
        let sent = inner
            .signals
            .iter()
            .filter(|s| s.run == id && !s.name.starts_with(crate::signals::RESERVED_SIGNAL_PREFIX))
            .count();
        check_signal(run, name, data, i64::try_from(sent).unwrap_or(i64::MAX))?;
        Ok(inner.signal(id, name, data))
    }

    async fn next_signal(&self, id: &str, name: &str, after: i64) -> StoreResult<Option<Signal>> {
        Ok(self.lock().next_signal(id, name, after).cloned())
    }

    async fn journal(&self, id: &str) -> StoreResult<Vec<Entry>> {
        Ok(self.lock().journal.get(id).cloned().unwrap_or_default())
    }

    async fn events(&self, id: &str, after: i64, limit: usize) -> StoreResult<Vec<StoredEvent>> {
        let inner = self.lock();
        Ok(inner.events.iter().filter(|e| e.run == id && e.id > after).take(limit).cloned().collect())
    }

    async fn checkpoints(&self, id: &str) -> StoreResult<Vec<(String, Value)>> {
        let inner = self.lock();
        Ok(inner
            .checkpoints
            .get(id)
            .map(|c| c.iter().map(|(n, v)| (n.clone(), v.clone())).collect())
            .unwrap_or_default())
    }

    async fn approval(&self, id: &str) -> StoreResult<Option<Approval>> {
        Ok(self.lock().approvals.get(id).cloned())
    }

    async fn decide(&self, id: &str, call: &PendingCall, decision: Decision) -> StoreResult<Approval> {
        let mut inner = self.lock();
        let status = inner.run_mut(id)?.status;
        let mut approval = check_decision(id, call, decision, status, inner.approvals.get(id).cloned())?;
        approval.decision = Some(decision);
        inner.approvals.insert(id.to_string(), approval.clone());
        Ok(approval)
    }

    async fn decide_and_resume(
        &self,
        id: &str,
        call: &PendingCall,
        decision: Decision,
        resume: NewJob,
    ) -> StoreResult<Approval> {
        if let Some(reason) = check_new_job(&resume) {
            return Err(StoreError::Conflict(reason));
        }
        // Nothing in memory outlives the process: two steps lose nothing.
        let approval = self.decide(id, call, decision).await?;
        let live = Jobs::has_live_job(self, id).await?;
        if !live {
            self.enqueue(resume).await?;
        }
        Ok(approval)
    }

    async fn clear_approval(&self, id: &str, owner: &str) -> StoreResult<()> {
        let mut inner = self.lock();
        inner.owned(id, owner)?;
        inner.approvals.remove(id);
        Ok(())
    }

    async fn add_pass_trace(&self, id: &str, context: &str, at_ms: i64) -> StoreResult<()> {
        let mut inner = self.lock();
        if !inner.runs.contains_key(id) {
            return Err(StoreError::NoRun(id.to_string()));
        }
        let traces = inner.pass_traces.entry(id.to_string()).or_default();
        if !traces.iter().any(|(c, _)| c == context) {
            traces.push((context.to_string(), at_ms));
        }
        Ok(())
    }

    async fn pass_traces(&self, id: &str, limit: usize) -> StoreResult<Vec<String>> {
        let inner = self.lock();
        let Some(traces) = inner.pass_traces.get(id) else { return Ok(Vec::new()) };
        let mut sorted: Vec<&(String, i64)> = traces.iter().collect();
        sorted.sort_by_key(|(_, at)| *at);
        let skip = sorted.len().saturating_sub(limit);
        Ok(sorted.into_iter().skip(skip).map(|(c, _)| c.clone()).collect())
    }
}

#[async_trait::async_trait]
impl Jobs for MemoryStore {
    async fn enqueue(&self, new: NewJob) -> StoreResult<Job> {
        self.lock().enqueue(new)
    }

    async fn claim_job_unless(
        &self,
        worker: &str,
        lease_ms: i64,
        now: i64,
        held_back: &[String],
    ) -> StoreResult<Option<Job>> {
        let mut inner = self.lock();
        inner.promote_wakes(now);
        loop {
            // A lapsed job first, then the next in turn (as `sql::DUE_JOB`).
            let lapsed = inner
                .jobs
                .values()
                .filter(|j| j.status == JobStatus::Running && j.is_due(now))
                .min_by_key(|j| (j.lease.as_ref().map_or(i64::MIN, |l| l.until_ms), &j.id))
                .map(|j| j.id.clone());
            let due = lapsed.or_else(|| {
                inner
                    .jobs
                    .values()
                    .filter(|j| j.status == JobStatus::Queued && j.is_due(now))
                    .min_by_key(|j| (j.turn, j.not_before_ms, j.created_ms, &j.id))
                    .map(|j| j.id.clone())
            });
            let Some(id) = due else { return Ok(None) };
            let token = inner.last_token + 1;
            let job = inner.job_mut(&id)?;
            if job.held_back(held_back) {
                return Ok(None);
            }
            if job.exhausted() {
                job.give_up(now);
                continue;
            }
            job.take(worker, token, lease_ms, now);
            let job = job.clone();
            inner.last_token = token;
            return Ok(Some(job));
        }
    }

    async fn heartbeat_jobs(&self, tokens: &[i64], lease_ms: i64, now: i64) -> StoreResult<Vec<i64>> {
        let tokens: std::collections::HashSet<i64> = tokens.iter().copied().collect();
        let mut inner = self.lock();
        let mut renewed = Vec::new();
        for job in inner.jobs.values_mut() {
            let Some(held) = &mut job.lease else { continue };
            if job.status == JobStatus::Running && tokens.contains(&held.token) {
                held.until_ms = now.saturating_add(lease_ms);
                job.updated_ms = now;
                renewed.push(held.token);
            }
        }
        Ok(renewed)
    }

    async fn complete_job(&self, id: &str, lease: &JobLease, now: i64) -> StoreResult<Job> {
        let mut inner = self.lock();
        let job = inner.job_mut(id)?;
        job.check_lease(lease)?;
        job.complete(now);
        Ok(job.clone())
    }

    async fn fail_job(&self, id: &str, lease: &JobLease, error: &str, retry: Retry, now: i64) -> StoreResult<Job> {
        let mut inner = self.lock();
        let job = inner.job_mut(id)?;
        job.check_lease(lease)?;
        job.fail(error, retry, now);
        let (job, tenant) = (job.clone(), job.tenant.clone());
        if job.status != JobStatus::Queued {
            return Ok(job);
        }
        // A retry waits its turn behind the jobs queued since (as `sql::RETRY_TURN_SQLITE`).
        let own = inner.jobs.values().filter(|j| j.tenant == tenant).map(|j| j.turn).max();
        let claimed = inner.jobs.values().filter(|j| j.status != JobStatus::Queued).map(|j| j.turn).max();
        let job = inner.job_mut(id)?;
        job.turn = crate::next_turn(own, claimed);
        Ok(job.clone())
    }

    async fn postpone_job(
        &self,
        id: &str,
        lease: &JobLease,
        reason: &str,
        not_before_ms: i64,
        now: i64,
    ) -> StoreResult<Job> {
        let mut inner = self.lock();
        let job = inner.job_mut(id)?;
        job.check_lease(lease)?;
        // A `held` event says why once, not at every hold for the same reason.
        let same = job.error.as_deref() == Some(reason);
        job.postpone(reason, not_before_ms, now);
        let job = job.clone();
        if same {
            return Ok(job);
        }
        let data = serde_json::json!({"reason": reason, "until_ms": not_before_ms});
        inner.push_event(&job.run, "held".into(), data, now);
        Ok(job)
    }

    async fn job(&self, id: &str) -> StoreResult<Option<Job>> {
        Ok(self.lock().jobs.get(id).cloned())
    }

    async fn jobs(&self, status: Option<JobStatus>, limit: usize) -> StoreResult<Vec<Job>> {
        let inner = self.lock();
        let mut jobs: Vec<Job> =
            inner.jobs.values().filter(|j| status.is_none_or(|s| j.status == s)).cloned().collect();
        jobs.sort_by(|a, b| b.created_ms.cmp(&a.created_ms).then_with(|| b.id.cmp(&a.id)));
        jobs.truncate(limit);
        Ok(jobs)
    }

    async fn has_live_job(&self, run: &str) -> StoreResult<bool> {
        let inner = self.lock();
        Ok(inner.jobs.values().any(|j| j.run == run && matches!(j.status, JobStatus::Queued | JobStatus::Running)))
    }

    async fn next_wake_ms(&self) -> StoreResult<Option<i64>> {
        let inner = self.lock();
        Ok(inner.jobs.values().filter(|j| j.status == JobStatus::Sleeping).map(|j| j.not_before_ms).min())
    }
}

#[async_trait::async_trait]
impl Sessions for MemoryStore {
    async fn open_session(&self, agent: &str, instance: &str, now: i64) -> StoreResult<Session> {
        let mut inner = self.lock();
        let address = (agent.to_string(), instance.to_string());
        if let Some(id) = inner.addresses.get(&address).cloned()
            && let Some(session) = inner.sessions.get_mut(&id)
        {
            session.updated_ms = touched(session.updated_ms, now);
            return Ok(session.clone());
        }
        let session = Session {
            id: new_session_id(),
            agent: address.0.clone(),
            instance: address.1.clone(),
            messages: 0,
            created_ms: now,
            updated_ms: now,
        };
        inner.addresses.insert(address, session.id.clone());
        inner.sessions.insert(session.id.clone(), session.clone());
        Ok(session)
    }

    async fn session(&self, agent: &str, instance: &str) -> StoreResult<Option<Session>> {
        let inner = self.lock();
        let id = inner.addresses.get(&(agent.to_string(), instance.to_string()));
        Ok(id.and_then(|id| inner.sessions.get(id)).cloned())
    }

    async fn session_by_id(&self, id: &str) -> StoreResult<Option<Session>> {
        Ok(self.lock().sessions.get(id).cloned())
    }

    async fn sessions(&self, agent: Option<&str>, limit: usize) -> StoreResult<Vec<Session>> {
        let inner = self.lock();
        let mut sessions: Vec<Session> =
            inner.sessions.values().filter(|s| agent.is_none_or(|a| s.agent == a)).cloned().collect();
        sessions.sort_by(|a, b| b.updated_ms.cmp(&a.updated_ms).then_with(|| b.id.cmp(&a.id)));
        sessions.truncate(limit);
        Ok(sessions)
    }

    async fn sessions_with_prefix(&self, prefix: &str, limit: usize) -> StoreResult<Vec<Session>> {
        let inner = self.lock();
        let mut sessions: Vec<Session> =
            inner.sessions.values().filter(|s| s.instance.starts_with(prefix)).cloned().collect();
        sessions.sort_by(|a, b| b.updated_ms.cmp(&a.updated_ms).then_with(|| b.id.cmp(&a.id)));
        sessions.truncate(limit);
        Ok(sessions)
    }

    async fn thread(&self, id: &str) -> StoreResult<Vec<Value>> {
        Ok(self.lock().threads.get(id).cloned().unwrap_or_default())
    }

    async fn append_thread(&self, id: &str, expected: u64, messages: Vec<Value>, now: i64) -> StoreResult<Session> {
        self.lock().append_thread(id, expected, messages, now)
    }

    async fn session_runs(&self, id: &str) -> StoreResult<Vec<Run>> {
        Ok(self.lock().session_runs(id).into_iter().cloned().collect())
    }

    async fn delete_session(&self, id: &str) -> StoreResult<bool> {
        Ok(self.lock().delete_session(id))
    }

    async fn expire_sessions(&self, updated_before_ms: i64) -> StoreResult<Vec<String>> {
        let mut inner = self.lock();
        // By id (the map's order): the ids come back sorted.
        let expired: Vec<String> = inner
            .sessions
            .values()
            .filter(|s| s.updated_ms < updated_before_ms && !inner.busy(&s.id))
            .map(|s| s.id.clone())
            .collect();
        for id in &expired {
            inner.delete_session(id);
        }
        Ok(expired)
    }
}

#[async_trait::async_trait]
impl Tenants for MemoryStore {
    async fn create_tenant(&self, new: NewTenant) -> StoreResult<Tenant> {
        let mut inner = self.lock();
        if inner.tenants.contains_key(&new.id) {
            return Err(StoreError::Conflict(tenant_exists(&new.id)));
        }
        if inner.tenant_names.contains_key(&new.name) {
            return Err(StoreError::Conflict(tenant_name_taken(&new.name)));
        }
        let tenant = new.into_tenant();
        inner.tenant_names.insert(tenant.name.clone(), tenant.id.clone());
        inner.tenants.insert(tenant.id.clone(), tenant.clone());
        Ok(tenant)
    }

    async fn tenant(&self, id: &str) -> StoreResult<Option<Tenant>> {
        Ok(self.lock().tenants.get(id).cloned())
    }

    async fn tenant_by_name(&self, name: &str) -> StoreResult<Option<Tenant>> {
        let inner = self.lock();
        Ok(inner.tenant_names.get(name).and_then(|id| inner.tenants.get(id)).cloned())
    }

    async fn tenants(&self) -> StoreResult<Vec<Tenant>> {
        let inner = self.lock();
        // By name: the names map's order.
        Ok(inner.tenant_names.values().filter_map(|id| inner.tenants.get(id)).cloned().collect())
    }

    async fn update_tenant(
        &self,
        id: &str,
        policy: Option<Value>,
        disabled: Option<bool>,
        now: i64,
    ) -> StoreResult<Tenant> {
        let mut inner = self.lock();
        let tenant = inner.tenants.get_mut(id).ok_or_else(|| StoreError::NoTenant(id.to_string()))?;
        if let Some(policy) = policy {
            tenant.policy = policy;
        }
        if let Some(disabled) = disabled {
            tenant.disabled = disabled;
        }
        tenant.updated_ms = touched(tenant.updated_ms, now);
        Ok(tenant.clone())
    }

    async fn create_key(&self, new: NewApiKey) -> StoreResult<ApiKey> {
        if let Some(reason) = check_new_key(&new) {
            return Err(StoreError::Conflict(reason));
        }
        let mut inner = self.lock();
        if inner.keys.contains_key(&new.id) {
            return Err(StoreError::Conflict(key_exists(&new.id)));
        }
        if inner.key_hashes.contains_key(&new.hash) {
            return Err(StoreError::Conflict(key_hash_taken(&new.id)));
        }
        if let Some(tenant) = &new.tenant {
            inner.check_tenant(tenant)?;
        }
        let key = new.into_key();
        inner.key_hashes.insert(key.hash.clone(), key.id.clone());
        inner.keys.insert(key.id.clone(), key.clone());
        Ok(key)
    }

    async fn key_by_hash(&self, hash: &str) -> StoreResult<Option<ApiKey>> {
        let inner = self.lock();
        Ok(inner.key_hashes.get(hash).and_then(|id| inner.keys.get(id)).cloned())
    }

    async fn keys(&self, tenant: Option<&str>) -> StoreResult<Vec<ApiKey>> {
        let inner = self.lock();
        let mut keys: Vec<ApiKey> = inner.keys.values().filter(|k| k.tenant.as_deref() == tenant).cloned().collect();
        keys.sort_by(|a, b| a.created_ms.cmp(&b.created_ms).then_with(|| a.id.cmp(&b.id)));
        Ok(keys)
    }

    async fn revoke_key(&self, id: &str, now: i64) -> StoreResult<ApiKey> {
        let mut inner = self.lock();
        let key = inner.keys.get_mut(id).ok_or_else(|| StoreError::NoKey(id.to_string()))?;
        key.revoked_ms.get_or_insert(now);
        Ok(key.clone())
    }

    async fn tenant_runs(&self, tenant: &str, status: Option<RunStatus>, limit: usize) -> StoreResult<Vec<Run>> {
        let inner = self.lock();
        let mut runs: Vec<Run> = inner
            .runs
            .values()
            .filter(|r| r.tenant.as_deref() == Some(tenant) && status.is_none_or(|s| r.status == s))
            .cloned()
            .collect();
        runs.sort_by(|a, b| b.created_ms.cmp(&a.created_ms).then_with(|| b.id.cmp(&a.id)));
        runs.truncate(limit);
        Ok(runs)
    }

    async fn live_runs(&self, tenant: &str) -> StoreResult<u64> {
        let inner = self.lock();
        // As `sql::LIVE_RUNS`: a running job holds a slot whatever its run's
        // status (a cancelled run's guest runs until it stops); a queued one
        // only for a suspended or failed run (a resume, a retry).
        let running: BTreeSet<&str> =
            inner.jobs.values().filter(|j| j.status == JobStatus::Running).map(|j| j.run.as_str()).collect();
        let queued: BTreeSet<&str> =
            inner.jobs.values().filter(|j| j.status == JobStatus::Queued).map(|j| j.run.as_str()).collect();
        let live = inner
            .runs
            .values()
            .filter(|r| r.tenant.as_deref() == Some(tenant))
            .filter(|r| match r.status {
                RunStatus::Queued | RunStatus::Running => true,
                RunStatus::Suspended | RunStatus::Failed => {
                    running.contains(r.id.as_str()) || queued.contains(r.id.as_str())
                }
                RunStatus::Done | RunStatus::Cancelled => running.contains(r.id.as_str()),
            })
            .count();
        Ok(live as u64)
    }

    async fn running_runs(&self, tenant: &str) -> StoreResult<u64> {
        let inner = self.lock();
        let running: BTreeSet<&str> =
            inner.jobs.values().filter(|j| j.status == JobStatus::Running).map(|j| j.run.as_str()).collect();
        let n = inner
            .runs
            .values()
            .filter(|r| r.tenant.as_deref() == Some(tenant))
            .filter(|r| r.status == RunStatus::Running || running.contains(r.id.as_str()))
            .count();
        Ok(n as u64)
    }

    async fn waiting(&self) -> StoreResult<Vec<Waiting>> {
        let inner = self.lock();
        let mut by_tenant = BTreeMap::<String, Waiting>::new();
        fn entry<'a>(by_tenant: &'a mut BTreeMap<String, Waiting>, tenant: Option<&str>) -> &'a mut Waiting {
            let tenant = tenant.unwrap_or("");
            by_tenant
                .entry(tenant.to_string())
                .or_insert_with(|| Waiting { tenant: tenant.to_string(), ..Waiting::default() })
        }
        for job in inner.jobs.values().filter(|j| j.status == JobStatus::Queued) {
            entry(&mut by_tenant, job.tenant.as_deref()).queued_jobs += 1;
        }
        for (run, _) in inner.approvals.iter().filter(|(_, a)| a.decision.is_none()) {
            if let Some(run) = inner.runs.get(run).filter(|r| r.status == RunStatus::Suspended) {
                entry(&mut by_tenant, run.tenant.as_deref()).pending_approvals += 1;
            }
        }
        Ok(by_tenant.into_values().collect())
    }
}

#[async_trait::async_trait]
impl Plugins for MemoryStore {
    async fn put_plugin(&self, new: NewPlugin) -> StoreResult<(StoredPlugin, bool)> {
        if let Some(reason) = check_new_plugin(&new) {
            return Err(StoreError::Conflict(reason));
        }
        let mut inner = self.lock();
        inner.check_tenant(&new.tenant)?;
        let address = (new.tenant.clone(), new.sha256.clone());
        if let Some((stored, _)) = inner.plugins.get_mut(&address) {
            if stored.origin.is_none() {
                stored.origin = new.origin;
            }
            return Ok((stored.clone(), false));
        }
        let stored = new.to_stored();
        inner.plugins.insert(address, (stored.clone(), new.bytes));
        Ok((stored, true))
    }

    async fn plugin(&self, tenant: &str, sha256: &str) -> StoreResult<Option<StoredPlugin>> {
        let inner = self.lock();
        Ok(inner.plugins.get(&(tenant.to_string(), sha256.to_string())).map(|(p, _)| p.clone()))
    }

    async fn plugin_bytes(&self, tenant: &str, sha256: &str) -> StoreResult<Option<Vec<u8>>> {
        let inner = self.lock();
        Ok(inner.plugins.get(&(tenant.to_string(), sha256.to_string())).map(|(_, bytes)| bytes.clone()))
    }

    async fn plugins(&self, tenant: &str) -> StoreResult<Vec<StoredPlugin>> {
        let inner = self.lock();
        let mut plugins: Vec<StoredPlugin> =
            inner.plugins.values().filter(|(p, _)| p.tenant == tenant).map(|(p, _)| p.clone()).collect();
        plugins.sort_by(|a, b| b.created_ms.cmp(&a.created_ms).then_with(|| b.sha256.cmp(&a.sha256)));
        Ok(plugins)
    }

    async fn plugin_acceptance(&self, tenant: &str, reference: &str) -> StoreResult<Option<PluginAcceptance>> {
        Ok(self.lock().plugin_acceptances.get(&(tenant.to_string(), reference.to_string())).cloned())
    }

    async fn record_plugin_acceptance(
        &self,
        new: PluginAcceptance,
        was: Option<&str>,
        audit: (&str, &Value),
    ) -> StoreResult<bool> {
        let mut inner = self.lock();
        inner.check_tenant(&new.tenant)?;
        let key = (new.tenant.clone(), new.reference.clone());
        if inner.plugin_acceptances.get(&key).map(|a| a.digest.as_str()) != was {
            return Ok(false);
        }
        let (kind, data) = audit;
        inner.append_audit(&new.tenant, kind, data, new.accepted_ms);
        inner.plugin_acceptances.insert(key, new);
        Ok(true)
    }
}

#[async_trait::async_trait]
impl Ledger for MemoryStore {
    async fn append_audit(&self, tenant: &str, kind: &str, data: &Value, at_ms: i64) -> StoreResult<AuditEntry> {
        // Under the one lock: appends to a tenant's log are serialized.
        let mut inner = self.lock();
        inner.check_tenant(tenant)?;
        Ok(inner.append_audit(tenant, kind, data, at_ms))
    }

    async fn audit(&self, tenant: &str, after_seq: u64, limit: usize) -> StoreResult<Vec<AuditEntry>> {
        let inner = self.lock();
        let entries = inner.audit.get(tenant).map(Vec::as_slice).unwrap_or_default();
        Ok(entries.iter().filter(|e| e.seq > after_seq).take(limit).cloned().collect())
    }

    async fn audit_head(&self, tenant: &str) -> StoreResult<Option<(u64, String)>> {
        Ok(self.lock().audit_heads.get(tenant).cloned())
    }

    async fn audit_heads(&self) -> StoreResult<Vec<(String, u64, String)>> {
        let inner = self.lock();
        Ok(inner
            .tenants
            .keys()
            .map(|id| match inner.audit_heads.get(id) {
                Some((seq, hash)) => (id.clone(), *seq, hash.clone()),
                None => (id.clone(), 0, crate::AUDIT_GENESIS.to_string()),
            })
            .collect())
    }

    async fn add_usage(&self, tenant: &str, at_ms: i64, runs: u64, used: RunUsage) -> StoreResult<()> {
        let mut inner = self.lock();
        inner.check_tenant(tenant)?;
        let period_ms = usage_period(at_ms);
        let usage = inner.usage.entry((tenant.to_string(), period_ms)).or_insert_with(|| Usage {
            tenant: tenant.to_string(),
            period_ms,
            runs: 0,
            tokens: 0,
            cpu_ticks: 0,
            egress_bytes: 0,
            cost_nanos: 0,
        });
        usage.runs = usage.runs.saturating_add(runs);
        usage.tokens = usage.tokens.saturating_add(used.tokens);
        usage.cpu_ticks = usage.cpu_ticks.saturating_add(used.cpu_ticks);
        usage.egress_bytes = usage.egress_bytes.saturating_add(used.egress_bytes);
        usage.cost_nanos = usage.cost_nanos.saturating_add(used.cost_nanos);
        Ok(())
    }

    async fn usage(&self, tenant: &str, since_ms: i64) -> StoreResult<Vec<Usage>> {
        let inner = self.lock();
        let from = (tenant.to_string(), usage_period(since_ms));
        Ok(inner.usage.range(from..).take_while(|((t, _), _)| t == tenant).map(|(_, u)| u.clone()).collect())
    }

    async fn add_run_usage(&self, run: &str, used: RunUsage) -> StoreResult<()> {
        let mut inner = self.lock();
        if !inner.runs.contains_key(run) {
            return Err(StoreError::NoRun(run.to_string()));
        }
        let counters = inner.run_usage.entry(run.to_string()).or_default();
        counters.tokens = counters.tokens.saturating_add(used.tokens);
        counters.cpu_ticks = counters.cpu_ticks.saturating_add(used.cpu_ticks);
        counters.egress_bytes = counters.egress_bytes.saturating_add(used.egress_bytes);
        counters.cost_nanos = counters.cost_nanos.saturating_add(used.cost_nanos);
        Ok(())
    }

    async fn run_usage(&self, run: &str) -> StoreResult<RunUsage> {
        Ok(self.lock().run_usage.get(run).copied().unwrap_or_default())
    }
}

#[async_trait::async_trait]
impl SignIns for MemoryStore {
    async fn open_sign_in(&self, new: SignIn) -> StoreResult<()> {
        let mut inner = self.lock();
        inner.sign_ins.retain(|_, s| s.expires_ms > new.created_ms);
        inner.check_tenant(&new.tenant)?;
        if inner.sign_ins.contains_key(&new.id_hash) {
            return Err(StoreError::Conflict(sign_in_taken()));
        }
        inner.sign_ins.insert(new.id_hash.clone(), new);
        Ok(())
    }

    async fn sign_in(&self, id_hash: &str, now_ms: i64) -> StoreResult<Option<SignIn>> {
        Ok(self.lock().sign_ins.get(id_hash).filter(|s| s.expires_ms > now_ms).cloned())
    }

    async fn end_sign_in(&self, id_hash: &str) -> StoreResult<()> {
        self.lock().sign_ins.remove(id_hash);
        Ok(())
    }
}

#[async_trait::async_trait]
impl Schedules for MemoryStore {
    async fn add_schedule(&self, new: NewSchedule) -> StoreResult<Schedule> {
        let mut inner = self.lock();
        if inner.schedules.contains_key(&new.id) {
            return Err(StoreError::Conflict(format!("a schedule `{}` exists already", new.id)));
        }
        if let Some(tenant) = &new.tenant {
            inner.check_tenant(tenant)?;
        }
        let schedule = Schedule {
            id: new.id,
            tenant: new.tenant,
            cron: new.cron,
            timezone: new.timezone,
            missed: new.missed,
            paused: false,
            next_ms: new.next_ms,
            template: new.template,
            created_ms: new.created_ms,
            updated_ms: new.created_ms,
            started: 0,
            skipped: 0,
            last_run: None,
            note: None,
        };
        inner.schedules.insert(schedule.id.clone(), schedule.clone());
        Ok(schedule)
    }

    async fn schedule(&self, id: &str) -> StoreResult<Option<Schedule>> {
        Ok(self.lock().schedules.get(id).cloned())
    }

    async fn schedules(&self, tenant: Option<&str>, limit: usize) -> StoreResult<Vec<Schedule>> {
        let inner = self.lock();
        let mut all: Vec<Schedule> =
            inner.schedules.values().filter(|s| tenant.is_none() || s.tenant.as_deref() == tenant).cloned().collect();
        all.sort_by(|a, b| (a.created_ms, &a.id).cmp(&(b.created_ms, &b.id)));
        all.truncate(limit);
        Ok(all)
    }

    async fn set_schedule_paused(&self, id: &str, paused: bool, next_ms: i64) -> StoreResult<Schedule> {
        let mut inner = self.lock();
        let schedule = inner.schedules.get_mut(id).ok_or_else(|| StoreError::NoSchedule(id.to_string()))?;
        schedule.paused = paused;
        if !paused {
            schedule.next_ms = next_ms;
        }
        schedule.updated_ms = now_ms();
        Ok(schedule.clone())
    }

    async fn delete_schedule(&self, id: &str) -> StoreResult<()> {
        self.lock().schedules.remove(id).map(|_| ()).ok_or_else(|| StoreError::NoSchedule(id.to_string()))
    }

    async fn due_schedules(&self, now: i64, limit: usize) -> StoreResult<Vec<Schedule>> {
        let inner = self.lock();
        let mut due: Vec<Schedule> =
            inner.schedules.values().filter(|s| !s.paused && s.next_ms <= now).cloned().collect();
        due.sort_by(|a, b| (a.next_ms, &a.id).cmp(&(b.next_ms, &b.id)));
        due.truncate(limit);
        Ok(due)
    }

    async fn next_schedule_ms(&self) -> StoreResult<Option<i64>> {
        Ok(self.lock().schedules.values().filter(|s| !s.paused).map(|s| s.next_ms).min())
    }

    async fn fire_schedule(&self, id: &str, firing: Firing) -> StoreResult<FireOutcome> {
        let mut inner = self.lock();
        match inner.schedules.get(id) {
            Some(s) if !s.paused && s.next_ms == firing.due_ms => {}
            _ => return Ok(FireOutcome::Passed),
        }
        // Checked before anything changes: a refused run refuses the firing.
        let run = match firing.run {
            Some((new, start)) => {
                if let Some(tenant) = &new.tenant {
                    inner.check_tenant(tenant)?;
                }
                if inner.runs.contains_key(&new.id) {
                    return Err(StoreError::Conflict(run_exists(&new.id)));
                }
                if let Some(reason) = check_new_job(&start) {
                    return Err(StoreError::Conflict(reason));
                }
                if inner.jobs.contains_key(&start.id) {
                    return Err(StoreError::Conflict(job_exists(&start.id)));
                }
                let run = new.into_run();
                inner.runs.insert(run.id.clone(), run.clone());
                inner.enqueue(start)?;
                Some(run)
            }
            None => None,
        };
        let schedule = inner.schedules.get_mut(id).ok_or_else(|| StoreError::NoSchedule(id.to_string()))?;
        schedule.next_ms = firing.next_ms;
        schedule.started += i64::from(run.is_some());
        schedule.skipped += firing.skipped;
        if let Some(run) = &run {
            schedule.last_run = Some(run.id.clone());
        }
        schedule.note = Some(firing.note);
        schedule.updated_ms = now_ms();
        Ok(FireOutcome::Fired(run.map(Box::new)))
    }
}
