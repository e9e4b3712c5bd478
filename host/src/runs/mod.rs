//! Recorded runs: every run the CLI starts (unless `--ephemeral`) is a row
//! in the store, with its grant, events, checkpoints and journal.
//!
//! [`Runs`] drives one run at a time through its lifecycle:
//!
//! ```text
//! start ──► running ──► done | failed
//!              │  ▲
//!      suspend │  │ resume / approve / deny (replays the journal)
//!              ▼  │
//!           suspended
//! ```
//!
//! While it works, the owner renews the run's lease, together with those of
//! all the other runs it drives (one store write per tick, see
//! [`crate::lease`]). A run left `running`
//! by a process that died is an orphan: [`Runs::orphans`] finds it, and
//! [`Runs::resume`] with [`Claim::Recover`] replays it to where it was.

pub mod changes;
pub mod children;
mod job;
pub mod pass;
pub mod prepare;
pub mod schedules;
pub mod spec;
pub mod timeline;
mod trace;
pub mod worker;

use std::sync::Arc;
use std::time::Duration;

use nexo_store::{
    Batch, Claim, Decision, Job, JobKind, Lease, NewEvent, NewRun, PendingCall, Run, RunStatus, Store, StoreError,
    Transition,
};
use serde_json::{Value, json};

use crate::agent_file::AgentFile;
use crate::error::RunError;
use crate::events::Status;
use crate::journal::{Halt, Journal, JournalSink, Replay};
use crate::lease::{Keeper, Lost};
use crate::settings::RunOptions;
use crate::telemetry::metrics::instruments;
use crate::thread::Thread;
use crate::world::agent::Agent;
pub use job::{JOB_ATTEMPTS, JOB_BACKOFF};
use job::{new_job, new_wake};
pub use spec::{ChildAgent, HookFile, Origin, RunSpec, SkillFile};

/// How long a lease lasts without renewal. The owner renews it every
/// third of that.
pub const LEASE: Duration = Duration::from_secs(30);

/// What a run runs: a component, or a declarative file.
#[derive(Clone, Copy)]
pub enum Subject<'a> {
    /// An agent component, with the SHA-256 of its bytes and its path.
    Component {
        /// The loaded agent.
        agent: &'a Agent,
        /// Its SHA-256.
        sha256: &'a str,
        /// Its path.
        path: &'a std::path::Path,
    },
    /// A TOML agent.
    File(&'a AgentFile),
}

impl Subject<'_> {
    /// The agent's name.
    pub fn name(&self) -> &str {
        match self {
            Subject::Component { agent, .. } => agent.name(),
            Subject::File(file) => &file.manifest().name,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Subject::Component { .. } => "component",
            Subject::File(_) => "toml",
        }
    }

    fn sha256(&self) -> String {
        match self {
            Subject::Component { sha256, .. } => sha256.to_string(),
            Subject::File(file) => file.sha256().to_string(),
        }
    }

    fn source(&self) -> String {
        let path = match self {
            Subject::Component { path, .. } => path.to_path_buf(),
            Subject::File(file) => file.path().to_path_buf(),
        };
        std::path::absolute(&path).unwrap_or(path).display().to_string()
    }

    async fn run(&self, input: &str, options: &RunOptions) -> Result<(String, Option<Status>), RunError> {
        match self {
            Subject::Component { agent, .. } => {
                let out = agent.run(input, options).await?;
                Ok((out.answer, out.last_prompt.map(|p| p.status)))
            }
            Subject::File(file) => {
                let out = file.run(input, options).await?;
                Ok((out.text, Some(out.status)))
            }
        }
    }
}

/// The record of a new run of `subject`, a prompt of `session` if given,
/// of `tenant` when `nexo serve` started it.
/// `spec` as the store records it.
fn record(spec: &RunSpec) -> Result<Value, StoreError> {
    spec.to_record().map_err(|e| StoreError::Conflict(format!("cannot record the run's settings: {e}")))
}

fn new_run(
    subject: &Subject<'_>,
    input: &str,
    grant: Value,
    status: RunStatus,
    lease: Option<Lease>,
    (session, tenant): (Option<&str>, Option<&str>),
) -> NewRun {
    NewRun {
        id: nexo_store::new_run_id(),
        agent: subject.name().to_string(),
        kind: subject.kind().to_string(),
        source: subject.source(),
        component_sha256: subject.sha256(),
        input: input.to_string(),
        grant,
        status,
        lease,
        created_ms: nexo_store::now_ms(),
        session: session.map(str::to_string),
        tenant: tenant.map(str::to_string),
    }
}

/// How a pass of a run ended.
#[derive(Debug, Clone)]
pub struct RunEnd {
    /// The run, as the store now holds it.
    pub run: Run,
    /// How the last prompt ended, when the run finished.
    pub prompt_status: Option<Status>,
    /// How many host calls the journal answered.
    pub replayed: u64,
    /// The call a suspended run waits on a decision for.
    pub approval: Option<nexo_store::Approval>,
    /// A failed run may pass if tried again ([`RunError::may_pass_on_retry`]);
    /// `true` for every other ending.
    pub retryable: bool,
    /// The run failed before the agent ran at all (a bad skill, file or
    /// setting): the CLI's exit code 2 rather than 1.
    pub nothing_ran: bool,
}

/// Starts, resumes and recovers runs in one store, as one owner.
#[derive(Debug, Clone)]
pub struct Runs {
    store: Arc<dyn Store>,
    owner: String,
    buffer_events: bool,
    lease: Duration,
    /// Renews the leases of every run this owner drives.
    keeper: Arc<Keeper<String>>,
    /// Hears of each run whose events a pass here commits.
    changes: Option<Arc<changes::Changes>>,
    /// Why the front end was interrupted, while it is ([`Runs::interrupt`]):
    /// a run that starts being driven meanwhile is cancelled at once.
    interrupted: Arc<std::sync::Mutex<Option<String>>>,
}

/// Why a resume was refused.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    /// The store refused (no such run, not suspended, …).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The component is not the one the run started with.
    #[error(
        "run `{run}` started with a component whose SHA-256 is {recorded}, but {source_path} now has {current}; a \
         replay of another component is refused. Restore the original, or resume it by checkpoints only ({}; its \
         journal is then not replayed, and work outside checkpoints runs again)",
        words.fix(crate::hint::Fix::ChangedComponent)
    )]
    ChangedComponent {
        /// The run.
        run: String,
        /// What it started with.
        recorded: String,
        /// What is there now.
        current: String,
        /// Where.
        source_path: String,
        /// The words the fix is said in.
        words: crate::hint::Vocabulary,
    },
}

impl Runs {
    /// Runs in `store`, owned by this process. `buffer_events` keeps each
    /// run's events in memory until it ends or suspends.
    pub fn new(store: Arc<dyn Store>, buffer_events: bool) -> Self {
        let owner = owner_id();
        let keeper = Arc::new(keeper(&store, &owner, LEASE));
        Runs { store, owner, buffer_events, lease: LEASE, keeper, changes: None, interrupted: Arc::default() }
    }

    /// The same, holding each run's lease for `lease` (default [`LEASE`]):
    /// how long a run outlives a crashed owner before another may recover it.
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease.max(Duration::from_secs(1));
        self.keeper = Arc::new(keeper(&self.store, &self.owner, self.lease));
        self
    }

    /// The same, telling `changes` of each run whose events a pass commits
    /// (a server's event streams of the run read them at once).
    pub fn with_changes(mut self, changes: Arc<changes::Changes>) -> Self {
        self.changes = Some(changes);
        self
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// This process's owner id.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    fn lease(&self) -> Lease {
        Lease { owner: self.owner.clone(), until_ms: nexo_store::now_ms() + self.lease.as_millis() as i64 }
    }

    /// Records a new run of `subject` on `input` with its specification
    /// (the operator's grant and settings: never a secret), then runs it.
    pub async fn start(
        &self,
        subject: Subject<'_>,
        input: &str,
        spec: &RunSpec,
        options: &RunOptions,
    ) -> Result<RunEnd, RunError> {
        self.start_in(None, subject, input, spec, options).await
    }

    /// [`Runs::start`] for a prompt of session `session` (its id): the run
    /// continues the session's thread and, once done, appends its exchange
    /// to it. The store refuses it while another prompt of the session is
    /// unfinished.
    pub async fn start_in(
        &self,
        session: Option<&str>,
        subject: Subject<'_>,
        input: &str,
        spec: &RunSpec,
        options: &RunOptions,
    ) -> Result<RunEnd, RunError> {
        let record = new_run(&subject, input, record(spec)?, RunStatus::Running, Some(self.lease()), (session, None));
        let run = self.store.create_run(record).await.map_err(RunError::from)?;
        self.drive(run, subject, options, Replay::New).await
    }

    /// Records a run of `subject` on `input` as `queued`, with a job that
    /// starts it: a worker (`nexo worker`) takes it from there. The job
    /// carries only the run's id; the run holds the rest.
    pub async fn queue(&self, subject: Subject<'_>, input: &str, spec: &RunSpec) -> Result<(Run, Job), StoreError> {
        self.queue_in(None, subject, input, spec).await
    }

    /// [`Runs::queue`] for a prompt of session `session`, if given.
    pub async fn queue_in(
        &self,
        session: Option<&str>,
        subject: Subject<'_>,
        input: &str,
        spec: &RunSpec,
    ) -> Result<(Run, Job), StoreError> {
        self.queue_record(new_run(&subject, input, record(spec)?, RunStatus::Queued, None, (session, None))).await
    }

    /// [`Runs::queue_in`] of a run `nexo serve` starts for `tenant`, a
    /// prompt of `session` if given.
    pub async fn queue_for(
        &self,
        tenant: Option<&str>,
        session: Option<&str>,
        subject: Subject<'_>,
        input: &str,
        spec: &RunSpec,
    ) -> Result<(Run, Job), StoreError> {
        self.queue_record(new_run(&subject, input, record(spec)?, RunStatus::Queued, None, (session, tenant))).await
    }

    async fn queue_record(&self, record: NewRun) -> Result<(Run, Job), StoreError> {
        let start = new_job(&record.id, JobKind::Start, json!({"run": record.id}));
        self.store.create_run_and_start(record, start).await
    }

    /// Queues the resume of the suspended (or failed) run `id` with
    /// `resume_input`, for a worker.
    pub async fn queue_resume(&self, id: &str, resume_input: Option<String>) -> Result<Job, StoreError> {
        let run = self.store.run(id).await?.ok_or_else(|| StoreError::NoRun(id.to_string()))?;
        if !matches!(run.status, RunStatus::Suspended | RunStatus::Failed) {
            return Err(StoreError::Conflict(format!(
                "run `{id}` is {}, so there is nothing to resume; only a suspended or failed run can be",
                run.status
            )));
        }
        self.enqueue(id, JobKind::Resume, json!({"run": id, "input": resume_input})).await
    }

    async fn enqueue(&self, run: &str, kind: JobKind, payload: Value) -> Result<Job, StoreError> {
        self.store.enqueue(new_job(run, kind, payload)).await
    }

    /// Records the decision on run `id`'s pending approval, if it is still
    /// for `call` (as [`Runs::decide`]), and queues the run's resume in the
    /// same write: a decision is never left without the job that acts on it.
    pub async fn decide_and_resume(
        &self,
        id: &str,
        call: &PendingCall,
        decision: Decision,
    ) -> Result<nexo_store::Approval, StoreError> {
        let resume = new_job(id, JobKind::Resume, json!({"run": id, "input": Value::Null}));
        self.store.decide_and_resume(id, call, decision, resume).await
    }

    /// Claims the run `id` (`how`: a resume of a suspended run, a queued
    /// start, or the recovery of an orphan) and runs it on, replaying its
    /// journal. `resume_input` is what `resume-input` returns from now on.
    /// A changed component is refused unless `allow_changed`, which resumes
    /// by checkpoints only.
    pub async fn resume(
        &self,
        id: &str,
        how: Claim,
        resume_input: Option<String>,
        subject: Subject<'_>,
        options: &RunOptions,
        allow_changed: bool,
    ) -> Result<RunEnd, ResumeOutcome> {
        let run = self.store.run(id).await.map_err(ResumeError::from)?.ok_or_else(|| StoreError::NoRun(id.into()));
        let run = run.map_err(ResumeError::from)?;
        // A child goes on only while its parent may still take its end.
        if let Some(parent) = &run.parent
            && let Some(ended) =
                self.store.run(parent).await.map_err(ResumeError::from)?.filter(|p| p.status.is_final())
        {
            let why = format!("its parent run `{parent}` has ended ({})", ended.status);
            if let Err(e) = self.cancel(id, &why).await {
                tracing::warn!(target: "nexo::runs", run = %id, "cannot cancel the child of an ended run: {e}");
            }
            return Err(ResumeError::from(StoreError::Conflict(format!("run `{id}` is cancelled: {why}"))).into());
        }
        let current = subject.sha256();
        let replay = if current == run.component_sha256 {
            Replay::Journal
        } else if allow_changed {
            Replay::CheckpointsOnly
        } else {
            return Err(ResumeError::ChangedComponent {
                run: id.to_string(),
                recorded: run.component_sha256,
                current,
                source_path: subject.source(),
                words: options.permissions.vocabulary(),
            }
            .into());
        };
        let now = if how == Claim::Recover { recovery_time(&run) } else { nexo_store::now_ms() };
        // The claim returns the record afresh; this one would stay alive (and
        // in memory) for the whole pass.
        drop(run);
        let mut run = self.store.claim(id, how, self.lease(), resume_input, now).await.map_err(ResumeError::from)?;
        if replay == Replay::CheckpointsOnly {
            // The journal records what runs now.
            run.component_sha256 = current;
        }
        Ok(self.drive(run, subject, options, replay).await?)
    }

    /// Runs that were left `running` by a process that is gone: its lease
    /// ran out, or it was this machine's and its process no longer exists.
    pub async fn orphans(&self) -> Result<Vec<Run>, StoreError> {
        let now = nexo_store::now_ms();
        let running = self.store.runs(Some(RunStatus::Running), 10_000).await?;
        Ok(running
            .into_iter()
            .filter(|r| r.lease.as_ref().is_none_or(|l| l.until_ms < now) || owner_is_dead(r))
            .collect())
    }

    /// The ids of the runs this owner drives now (a pass of each is under
    /// way here): what an interrupted front end cancels.
    pub fn driven(&self) -> Vec<String> {
        self.keeper.keys()
    }

    /// Marks this owner interrupted (Ctrl-C) for `reason` and returns the
    /// runs it drives now, for the caller to cancel ([`Runs::cancel`]). A
    /// run that starts being driven from now on, until [`Runs::resume_taking`],
    /// cancels itself for `reason`: a run created in the instant before it was
    /// driven is not left `running` by an interrupt that found nothing to cancel.
    pub fn interrupt(&self, reason: &str) -> Vec<String> {
        let mut interrupted = self.interrupted.lock().unwrap_or_else(|p| p.into_inner());
        *interrupted = Some(reason.to_string());
        self.keeper.keys()
    }

    /// Ends an interrupt ([`Runs::interrupt`]): runs started from now on go on.
    pub fn resume_taking(&self) {
        *self.interrupted.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Cancels the run `id` ([`nexo_store::Runs::cancel`]) and, if this owner drives
    /// it, stops it now: its guest is interrupted at its next epoch tick, so
    /// its pass ends and its slot is free at once. Another process driving
    /// it learns at its next lease renewal, which the store refuses.
    pub async fn cancel(&self, id: &str, reason: &str) -> Result<Run, StoreError> {
        let run = self.store.cancel(id, reason).await?;
        self.keeper.lose(&run.id, Lost::Taken);
        instruments::run_ended(run.tenant.as_deref(), run.status, run.created_ms);
        // Its children were cancelled with it: those driven here stop now too.
        let driven = self.keeper.keys();
        if !driven.is_empty() {
            for child in children::descendants(&*self.store, id).await.unwrap_or_default() {
                if driven.contains(&child.id) {
                    self.keeper.lose(&child.id, Lost::Taken);
                }
            }
        }
        Ok(run)
    }

    /// Sends run `id` the signal `name` with `data` (JSON text)
    /// ([`nexo_store::Runs::send_signal`]): kept for the run's next
    /// `wait-signal` of that name, and if the run waits for it now, its wake
    /// is due at once (a worker takes it, within the run's quotas, as any
    /// wake). Refused for a finished run.
    pub async fn signal(&self, id: &str, name: &str, data: &str) -> Result<nexo_store::Signal, StoreError> {
        self.store.send_signal(id, name, data).await
    }

    /// Records the operator's decision on a suspended run's pending
    /// approval, if it is still for `call`, the call the decider was shown
    /// ([`StoreError::StaleApproval`] otherwise, and nothing is decided).
    pub async fn decide(
        &self,
        id: &str,
        call: &PendingCall,
        decision: Decision,
    ) -> Result<nexo_store::Approval, StoreError> {
        self.store.decide(id, call, decision).await
    }

    /// Decides the call run `id` waits on now, whichever it is: for a person
    /// at a terminal who has just been shown it (the answer names the call
    /// decided, to be shown back). A decision that must bind to what a
    /// person saw elsewhere names its call ([`Runs::decide`]).
    pub async fn decide_pending(&self, id: &str, decision: Decision) -> Result<nexo_store::Approval, StoreError> {
        let run = self.store.run(id).await?.ok_or_else(|| StoreError::NoRun(id.to_string()))?;
        let pending = self.store.approval(id).await?.filter(|_| run.status == RunStatus::Suspended);
        let Some(pending) = pending else {
            return Err(StoreError::Conflict(format!(
                "run `{id}` has no pending approval (it is {}); `nexo runs show {id}` shows its state",
                run.status
            )));
        };
        self.store.decide(id, &pending.call(), decision).await
    }

    async fn drive(
        &self,
        mut run: Run,
        subject: Subject<'_>,
        options: &RunOptions,
        replay: Replay,
    ) -> Result<RunEnd, RunError> {
        let started = std::time::Instant::now();
        // The grant was read into `options` before the pass; the record's
        // copy would only take memory while the run waits.
        let agents = RunSpec::agent_names(&run.grant);
        run.grant = Value::Null;
        // A session's prompt continues its thread as the store holds it: no
        // other prompt of the session can move it on while this run is
        // unfinished, so a replay sees the same thread the first pass did.
        // Both are reads, so they overlap.
        let load_thread = async {
            match &run.session {
                Some(id) => Thread::load(&*self.store, id).await.map(Some),
                None => Ok(None),
            }
        };
        let (journal, thread) =
            tokio::join!(Journal::open(self.store.clone(), &run, &self.owner, replay, self.buffer_events), load_thread);
        let mut journal = journal.map_err(RunError::from)?;
        if let Some(changes) = &self.changes {
            let (changes, id) = (changes.clone(), run.id.clone());
            journal = journal.with_event_watch(Arc::new(move || changes.changed(&id)));
        }
        let journal = Arc::new(journal);
        journal.record_pass(&self.owner);
        let thread = thread.map_err(RunError::from)?;
        // A recorded conversation goes on after the turns the replay answers.
        // Only a replay moves the model: a new run (the next prompt of a
        // `nexo chat` sharing one scripted provider) goes on where it is.
        let recorded = journal.recorded_turns();
        if let Some(model) = options.providers.model.as_ref().filter(|_| recorded > 0) {
            model.resume_at(recorded);
        }
        let mut options = options.clone();
        options.context.thread = thread.clone();
        let display = options.context.events.clone().unwrap_or_else(crate::events::no_events);
        options.context.events = Some(Arc::new(JournalSink { journal: journal.clone(), inner: display }));
        options.context.journal = Some(journal.clone());
        options.context.children = Some(Arc::new(children::Starter {
            store: self.store.clone(),
            parent: run.id.clone(),
            tenant: run.tenant.clone(),
            agents,
        }));
        // Dropped with this future too: a worker that lost the job drops the
        // run, and its lease must then lapse for the next owner.
        let until_ms = run.lease.as_ref().map_or_else(nexo_store::now_ms, |l| l.until_ms);
        let halt = journal.clone();
        let id = run.id.clone();
        // Kept under the interrupt's lock: an interrupt either sees this run
        // among the driven ones or is seen here.
        let (renewal, interrupted) = {
            let interrupted = self.interrupted.lock().unwrap_or_else(|p| p.into_inner());
            let renewal = self.keeper.keep(
                run.id.clone(),
                until_ms,
                Box::new(move |_: Lost| {
                    halt.halt(Halt::Failed(format!("run `{id}` was cancelled or taken over by another process")))
                }),
            );
            (renewal, interrupted.clone())
        };
        if let Some(reason) = interrupted
            && let Err(e) = self.cancel(&run.id, &reason).await
        {
            tracing::warn!(target: "nexo::runs", run = %run.id, "cannot cancel the interrupted run: {e}");
        }
        let span = trace::pass_span(&self.store, &run, subject.name(), replay).await;
        let running = instruments::pass_started(run.tenant.as_deref());
        let result = span.under(subject.run(&run.input, &options)).await;
        drop(span);
        drop(running);
        drop(renewal);
        let mut batch = journal.take_final_batch();
        let at_ms = nexo_store::now_ms();
        let mut pending = None;
        let mut retryable = true;
        let nothing_ran = matches!(
            &result,
            Err(RunError::Skill { .. } | RunError::Load(_) | RunError::Config(_) | RunError::Store(_))
        );
        let (to, prompt_status) = match (journal.halted(), result) {
            (Some(Halt::Suspend { reason, resume_key, approval, wake_ms, signal }), _) => {
                let waits_for = signal.as_ref().map(|s| s.name.as_str());
                let data = json!({ "reason": reason, "resume_key": resume_key, "approval": approval,
                    "wake_ms": wake_ms, "signal": waits_for });
                batch.events.push(NewEvent { kind: "suspended".into(), data, at_ms });
                pending = approval.clone();
                // A wait for a signal with no timeout has a wake too, due
                // never until the signal makes it due.
                let wake = match (wake_ms, &signal) {
                    (Some(at), _) => Some(Box::new(new_wake(&run.id, Some(at)))),
                    (None, Some(_)) => Some(Box::new(new_wake(&run.id, None))),
                    (None, None) => None,
                };
                (Transition::Suspend { reason, resume_key, approval, wake, signal: signal.map(|s| *s) }, None)
            }
            (Some(Halt::Failed(why)), _) => {
                (failure(&mut batch, why, retryable && options.context.retry_follows, at_ms), None)
            }
            (None, Ok((answer, status))) => {
                batch.thread = thread.as_ref().and_then(|t| t.append());
                (Transition::Finish { status: RunStatus::Done, result: Some(answer), error: None }, status)
            }
            (None, Err(e)) => {
                retryable = e.may_pass_on_retry();
                let why = match &e {
                    // The setting to raise, in the words of whoever reads the run.
                    RunError::Deadline { .. } => {
                        format!("{e} ({})", options.permissions.vocabulary().fix(crate::hint::Fix::TimeLimit))
                    }
                    _ => e.to_string(),
                };
                (failure(&mut batch, why, retryable && options.context.retry_follows, at_ms), None)
            }
        };
        let fallback = batch.thread.is_some().then(|| Batch { thread: None, ..batch.clone() });
        let ended = match self.store.transition(&run.id, &self.owner, batch, to).await {
            // The thread refused the exchange: the run fails with why, its
            // events kept, rather than staying `running`.
            Err(StoreError::Conflict(why)) if fallback.is_some() => {
                let to = Transition::Finish { status: RunStatus::Failed, result: None, error: Some(why) };
                self.store.transition(&run.id, &self.owner, fallback.unwrap_or_default(), to).await
            }
            ended => ended,
        };
        let run = match ended {
            Ok(run) => {
                if run.status.is_final() {
                    instruments::run_ended(run.tenant.as_deref(), run.status, run.created_ms);
                }
                run
            }
            // Cancelled (or taken over) while it ran: the store's record stands.
            Err(StoreError::Conflict(_)) => self
                .store
                .run(&run.id)
                .await
                .map_err(RunError::from)?
                .ok_or_else(|| RunError::from(StoreError::NoRun(run.id.clone())))?,
            Err(e) => return Err(e.into()),
        };
        instruments::pass_ended(run.tenant.as_deref(), run.status, started.elapsed());
        Ok(RunEnd { run, prompt_status, replayed: journal.replayed(), approval: pending, retryable, nothing_ran })
    }

    /// Marks an orphan that cannot be replayed (its component is gone, or
    /// changed) failed, so no sweep tries it again.
    pub async fn fail_orphan(&self, id: &str, why: &str) -> Result<(), StoreError> {
        let run = self.store.run(id).await?.ok_or_else(|| StoreError::NoRun(id.to_string()))?;
        self.store.claim(id, Claim::Recover, self.lease(), None, recovery_time(&run)).await?;
        let mut batch = nexo_store::Batch::default();
        batch.events.push(NewEvent {
            kind: "failed".into(),
            data: json!({ "error": why }),
            at_ms: nexo_store::now_ms(),
        });
        let to = Transition::Finish { status: RunStatus::Failed, result: None, error: Some(why.to_string()) };
        let run = self.store.transition(id, &self.owner, batch, to).await?;
        instruments::run_ended(run.tenant.as_deref(), run.status, run.created_ms);
        Ok(())
    }
}

/// A resume's failure: refused before it ran, or failed as it ran.
#[derive(Debug, thiserror::Error)]
pub enum ResumeOutcome {
    /// Refused.
    #[error(transparent)]
    Refused(#[from] ResumeError),
    /// It ran, and the host could not go on.
    #[error(transparent)]
    Run(#[from] RunError),
}

impl From<StoreError> for ResumeOutcome {
    fn from(e: StoreError) -> Self {
        ResumeOutcome::Refused(ResumeError::Store(e))
    }
}

/// How a failed pass leaves `running`: `failed`, or, when its job will try
/// it again (`retried`), `queued` for that retry with a `retrying` event, so
/// that no one is told it ended while it has not.
fn failure(batch: &mut Batch, why: String, retried: bool, at_ms: i64) -> Transition {
    if retried {
        batch.events.push(NewEvent { kind: "retrying".into(), data: json!({ "error": why }), at_ms });
        return Transition::Requeue { error: why };
    }
    batch.events.push(NewEvent { kind: "failed".into(), data: json!({ "error": why }), at_ms });
    Transition::Finish { status: RunStatus::Failed, result: None, error: Some(why) }
}

/// The keeper of `owner`'s run leases in `store`. A renewal that fails
/// is only logged: the run's later writes are fenced by its owner anyway.
fn keeper(store: &Arc<dyn Store>, owner: &str, lease: Duration) -> Keeper<String> {
    let (store, owner) = (store.clone(), owner.to_string());
    Keeper::new(
        lease,
        Arc::new(move |ids: Vec<String>, until_ms| {
            let (store, owner) = (store.clone(), owner.clone());
            Box::pin(async move { store.renew_leases(&owner, &ids, until_ms).await })
        }),
    )
}

/// `host:pid:nonce`.
fn owner_id() -> String {
    let nonce = nexo_store::new_run_id();
    format!("{}:{}:{}", hostname(), std::process::id(), &nonce[nonce.len() - 8..])
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into())
}

/// Whether the run's owner was a process on this machine that no longer
/// exists. A reused pid reads as alive, which only delays recovery until
/// the lease runs out.
fn owner_is_dead(run: &Run) -> bool {
    let Some(lease) = &run.lease else { return false };
    let mut parts = lease.owner.split(':');
    let (Some(host), Some(pid)) = (parts.next(), parts.next().and_then(|p| p.parse::<i32>().ok())) else {
        return false;
    };
    if host != hostname() || pid <= 0 {
        return false;
    }
    if pid as u32 == std::process::id() {
        return false;
    }
    !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// The time a recovery claims `run` at: now, or just past its lease when
/// its owner was a process on this machine that is gone (a dead owner
/// holds no lease, whatever its expiry says).
fn recovery_time(run: &Run) -> i64 {
    let past_lease = if owner_is_dead(run) { run.lease.as_ref().map_or(0, |l| l.until_ms + 1) } else { 0 };
    past_lease.max(nexo_store::now_ms())
}

/// A run's pending approval in one line, for the CLI.
pub fn describe_approval(a: &nexo_store::Approval) -> String {
    let at = match a.seq {
        crate::journal::UNPOSITIONED => "wherever the run makes it again".to_string(),
        seq => format!("at call {seq}"),
    };
    format!("`{}` ({}) with {} {at}", a.tool, a.capability, a.arguments)
}
