//! The worker loop: claims due jobs from the store and makes a pass of
//! each job's run, any number of workers (`nexo worker`, every `nexo
//! serve` node) side by side.
//!
//! A job's claim holds a lease the worker renews by heartbeat. A worker
//! that loses it (it stalled, or the store says another worker has the job)
//! drops the run at once. The run itself is fenced by its own lease: every
//! write checks its owner, so a worker that lost a run can never append to
//! it, and exactly one worker runs it at a time. When a worker dies, its job
//! lease lapses, another worker claims the job and recovers the run through
//! replay, so nothing journaled runs twice.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nexo_store::{Claim, Job, JobStatus, Retry, RunStatus};

use super::Runs;
use super::changes::Changes;
use super::pass::{Narrowing, PassSettings, Resumed, Served};
use crate::Engine;
use crate::config::ConfigFile;
use crate::lease::{Keeper, Lost};
use crate::quota;
use crate::telemetry::context::TraceParent;

/// How often a worker enforces session retention.
const SWEEP_EVERY: Duration = Duration::from_secs(300);

/// How an attempt that left its run suspended ends.
const SUSPENDED: &str = "is suspended";

/// How a timer's wake ends when its run no longer sleeps on that timer
/// (it was resumed early, or cancelled).
const NOT_SLEEPING: &str = "no longer sleeps on this timer";

/// The due time a timer's wake was made for (its payload's `wake_ms`; its
/// `not_before_ms` moves when it is held or retried).
fn timer(job: &Job) -> Option<i64> {
    job.payload.get("wake_ms").and_then(serde_json::Value::as_i64)
}

/// What every job of one worker shares.
pub struct Worker {
    runs: Runs,
    engine: Engine,
    file: ConfigFile,
    config_path: Option<PathBuf>,
    lease_ms: i64,
    /// `nexo serve`'s data directory: a tenant's run loads its plugin from
    /// this node's cache there, filled from the store when missing.
    served: Option<std::path::PathBuf>,
    /// Plugins loaded for served runs, by SHA-256.
    plugins: std::sync::Mutex<std::collections::HashMap<String, crate::Plugin>>,
    /// The tenants' memory budgets on this node.
    budgets: quota::Budgets,
    /// Renews the leases of every job this worker handles, by token.
    beats: Keeper<i64>,
}

impl Worker {
    /// A worker driving `runs` on `engine` (every pass brings its run's own
    /// limits: [`super::prepare::shared_engine`]), with `lease_ms` leases on
    /// its jobs; `file` is the operator's configuration, read from
    /// `config_path`.
    pub fn new(runs: Runs, engine: Engine, file: ConfigFile, config_path: Option<PathBuf>, lease_ms: i64) -> Self {
        let store = runs.store().clone();
        let length = Duration::from_millis(u64::try_from(lease_ms).unwrap_or(1000).max(1));
        let beats = Keeper::new(
            length,
            Arc::new(move |tokens: Vec<i64>, until_ms| {
                let store = store.clone();
                Box::pin(async move {
                    let now = nexo_store::now_ms();
                    store.heartbeat_jobs(&tokens, until_ms.saturating_sub(now), now).await
                })
            }),
        )
        // Past its lease another worker may have claimed the job: stop.
        .lapse_on_error();
        Worker {
            beats,
            runs,
            engine,
            file,
            config_path,
            lease_ms,
            served: None,
            plugins: Default::default(),
            budgets: Default::default(),
        }
    }

    /// The runs it drives.
    pub fn runs(&self) -> &Runs {
        &self.runs
    }

    /// The same worker inside `nexo serve`, whose plugins live under
    /// `data_dir`.
    pub fn serving(mut self, data_dir: std::path::PathBuf) -> Self {
        self.served = Some(data_dir);
        self
    }

    /// The served run's plugin, loaded once per node.
    async fn served_plugin(&self, engine: &Engine, path: &Path, sha256: &str) -> Result<crate::Plugin, String> {
        if let Some(p) = self.plugins.lock().unwrap_or_else(|p| p.into_inner()).get(sha256) {
            return Ok(p.clone());
        }
        let plugin = crate::Plugin::load(engine, path).await.map_err(|e| e.to_string())?;
        if plugin.sha256() != sha256 {
            return Err(format!("{} does not hold the plugin {sha256}; remove it and retry", path.display()));
        }
        self.plugins.lock().unwrap_or_else(|p| p.into_inner()).insert(sha256.to_string(), plugin.clone());
        Ok(plugin)
    }
}

/// How a claim loop paces itself.
pub struct LoopSettings {
    /// Jobs at once.
    pub max: u32,
    /// Of those, how many no tenant may take while it holds the others:
    /// the last slots wait for another tenant's run rather than go to a
    /// tenant that already holds its share ([`default_reserved`]).
    pub reserved: u32,
    /// How often an idle loop looks for due jobs.
    pub poll: Duration,
    /// Stop once nothing is queued or running.
    pub until_idle: bool,
    /// Session retention.
    pub retain: Option<Duration>,
    /// Listen for the store's notification that a job may be due (on
    /// PostgreSQL), claiming at once rather than at the next poll.
    pub notify: bool,
}

/// The run slots kept for other tenants when there are `max`: one in
/// eight, at least one, and never all of them.
pub fn default_reserved(max: u32) -> u32 {
    max.div_ceil(8).min(max.saturating_sub(1))
}

/// Claims due jobs and runs them, at most `settings.max` at once, until
/// `stop` completes (then no new claims; the jobs under way finish).
/// `wake` cuts an idle wait short; `changes` hears of each job's run.
pub async fn claim_loop(
    worker: Arc<Worker>,
    settings: LoopSettings,
    stop: impl std::future::Future<Output = ()>,
    wake: Option<Arc<tokio::sync::Notify>>,
    changes: Option<Arc<Changes>>,
) {
    let store = worker.runs.store().clone();
    let name = worker.runs.owner().to_string();
    let permits = Arc::new(tokio::sync::Semaphore::new(settings.max as usize));
    // The jobs each tenant has running here, and a signal when one ends.
    let holding: Arc<std::sync::Mutex<std::collections::HashMap<String, u32>>> = Default::default();
    let freed = Arc::new(tokio::sync::Notify::new());
    let reserved = settings.reserved.min(settings.max.saturating_sub(1));
    let share = settings.max - reserved;
    let mut tasks = tokio::task::JoinSet::new();
    tokio::pin!(stop);
    let mut swept: Option<std::time::Instant> = None;
    // Schedules' occurrences, fired here as on every node that claims
    // (exactly once across them), in a task of their own: a node whose slots
    // are all taken fires them all the same.
    let fired = Arc::new(tokio::sync::Notify::new());
    let firing = tokio::spawn(super::schedules::keep_firing(store.clone(), settings.poll, fired.clone()));
    // Another process's new job (or signal) cuts the idle wait short.
    let wake = wake.unwrap_or_default();
    let _watch = if settings.notify {
        let poke = wake.clone();
        match store.watch_jobs(Arc::new(move || poke.notify_one())).await {
            Ok(watch) => watch,
            Err(e) => {
                errln!("worker {name}: cannot listen for due jobs ({e}); polling every {:?}", settings.poll);
                None
            }
        }
    } else {
        None
    };
    loop {
        if settings.retain.is_some() && swept.is_none_or(|at| at.elapsed() >= SWEEP_EVERY) {
            swept = Some(std::time::Instant::now());
            sweep_sessions(&*store, settings.retain).await;
        }
        while tasks.try_join_next().is_some() {}
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            _ = &mut stop => break,
        };
        // Taking a reserved slot: not for a tenant holding its share.
        let held_back: Vec<String> = if permits.available_permits() < reserved as usize {
            let holding = holding.lock().unwrap_or_else(|p| p.into_inner());
            holding.iter().filter(|(_, n)| **n >= share).map(|(t, _)| t.clone()).collect()
        } else {
            Vec::new()
        };
        match store.claim_job_unless(&name, worker.lease_ms, nexo_store::now_ms(), &held_back).await {
            Ok(Some(job)) => {
                let worker = worker.clone();
                let changes = changes.clone();
                let held = Held::take(&holding, job.tenant.clone(), &freed);
                tasks.spawn(async move {
                    let run = job.run.clone();
                    worker.handle(job).await;
                    drop(permit);
                    drop(held);
                    if let Some(c) = changes {
                        c.changed(&run);
                    }
                });
                continue;
            }
            Ok(None) => {}
            Err(e) => errln!("warning: cannot claim a job: {e}"),
        }
        drop(permit);
        while tasks.try_join_next().is_some() {}
        if settings.until_idle && tasks.is_empty() && !pending(&*store).await {
            break;
        }
        let woken = wake.notified();
        let idle = idle_wait(&*store, settings.poll).await;
        tokio::select! {
            _ = tokio::time::sleep(idle) => {}
            _ = woken => {}
            // A job held back may be claimed once a slot is free again.
            _ = freed.notified(), if !held_back.is_empty() => {}
            // A schedule queued runs.
            _ = fired.notified() => {}
            _ = &mut stop => break,
        }
    }
    firing.abort();
    // Stopping: no new claims; the jobs under way finish.
    while tasks.join_next().await.is_some() {}
}

/// The shortest idle wait, in milliseconds.
const IDLE_FLOOR_MS: i64 = 10;

/// How long an idle worker waits before it claims again: its poll, or less
/// when a timer's wake falls due sooner.
async fn idle_wait(store: &dyn nexo_store::Store, poll: std::time::Duration) -> std::time::Duration {
    match store.next_wake_ms().await {
        Ok(Some(at)) => {
            // A floor: a due wake another claim holds, or a failing claim,
            // does not make the loop spin.
            let until = at.saturating_sub(nexo_store::now_ms()).max(IDLE_FLOOR_MS).unsigned_abs();
            poll.min(std::time::Duration::from_millis(until))
        }
        Ok(None) => poll,
        Err(e) => {
            errln!("warning: cannot read when the next timer is due: {e}");
            poll
        }
    }
}

/// One running job counted against its tenant's share of the slots, for
/// as long as it lives; its end signals `freed`.
struct Held {
    holding: Arc<std::sync::Mutex<std::collections::HashMap<String, u32>>>,
    tenant: Option<String>,
    freed: Arc<tokio::sync::Notify>,
}

impl Held {
    fn take(
        holding: &Arc<std::sync::Mutex<std::collections::HashMap<String, u32>>>,
        tenant: Option<String>,
        freed: &Arc<tokio::sync::Notify>,
    ) -> Held {
        if let Some(t) = &tenant {
            *holding.lock().unwrap_or_else(|p| p.into_inner()).entry(t.clone()).or_default() += 1;
        }
        Held { holding: holding.clone(), tenant, freed: freed.clone() }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(t) = &self.tenant {
            let mut holding = self.holding.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(n) = holding.get_mut(t) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    holding.remove(t);
                }
            }
        }
        self.freed.notify_one();
    }
}

/// The meters of a job's pass, metered by [`Worker::handle`] on every
/// way out of it (the pass ended, failed, or was dropped with its lease),
/// once.
#[derive(Default)]
struct Metering(std::sync::Mutex<Option<(String, quota::Meters, Arc<quota::PassAudit>)>>);

impl Metering {
    fn start(&self, tenant: &str, meters: &quota::Meters, audit: &Arc<quota::PassAudit>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some((tenant.to_string(), meters.clone(), audit.clone()));
    }

    async fn meter(&self, store: &dyn nexo_store::Store, run: &str) {
        let taken = self.0.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some((tenant, meters, audit)) = taken {
            quota::meter_pass(store, &tenant, run, meters.pass(), &audit).await;
        }
    }
}

/// How an attempt at a job ended, short of failing.
enum Attempt {
    /// The pass ran, or there was nothing to run: the run is as it says.
    Ended(&'static str),
    /// The tenant's quotas (or the run's own budget) do not let the run go
    /// on now: it is left as it is, and the job waits, or ends if waiting
    /// would not help.
    Held(quota::Refusal),
}

/// A failure that may pass the next time.
fn again(why: impl ToString) -> (String, Retry) {
    (why.to_string(), Retry::IfAttemptsLeft)
}

/// Whether a failure that `may_pass` a second time is tried again.
fn retry(may_pass: bool) -> Retry {
    if may_pass { Retry::IfAttemptsLeft } else { Retry::Never }
}

/// Whether any job is still queued (due or not) or running, here or elsewhere.
async fn pending(store: &dyn nexo_store::Store) -> bool {
    for status in [JobStatus::Queued, JobStatus::Running] {
        match store.jobs(Some(status), 1).await {
            Ok(jobs) if jobs.is_empty() => {}
            // A store that cannot say keeps the worker up.
            _ => return true,
        }
    }
    false
}

/// The longest a job held again and again for the same reason waits
/// between claims (unless its quota says longer: the next hour).
const MAX_HOLD_MS: i64 = 30_000;

impl Worker {
    /// Runs one claimed job to its end, under a heartbeat: a lost lease
    /// drops the run on the spot.
    async fn handle(&self, job: Job) {
        let Some(lease) = job.lease.clone() else { return };
        let store = self.runs.store().clone();
        errln!("job {}: run {} (attempt {} of {})", job.id, job.run, job.attempts, job.max_attempts);
        let (lost_tx, lost_rx) = tokio::sync::oneshot::channel();
        let _beat = self.beats.keep(lease.token, lease.until_ms, Box::new(move |why| _ = lost_tx.send(why)));
        let beat = async {
            match lost_rx.await {
                Ok(Lost::Taken) => "another worker holds it now".to_string(),
                Ok(Lost::Lapsed { error }) => format!("its heartbeats failed until it ran out ({error})"),
                // The hold lives as long as this future: never.
                Err(_) => std::future::pending().await,
            }
        };
        let metering = Metering::default();
        let outcome = tokio::select! {
            done = self.attempt(&job, &metering) => done,
            lost = beat => {
                errln!("job {}: lost its lease, {lost}; run {} is left to the new holder", job.id, job.run);
                // Dropped mid-pass, what it used so far is still the tenant's.
                metering.meter(&*store, &job.run).await;
                return;
            }
        };
        metering.meter(&*store, &job.run).await;
        let now = nexo_store::now_ms();
        let outcome = match outcome {
            Ok(Attempt::Ended(how)) => Ok(how),
            Ok(Attempt::Held(refusal)) => return self.hold(&job, &lease, &refusal, now).await,
            Err(failed) => Err(failed),
        };
        match outcome {
            Ok(how) => match store.complete_job(&job.id, &lease, now).await {
                Ok(_) => {
                    errln!("job {}: run {} {how}", job.id, job.run);
                    if how == SUSPENDED {
                        self.resume_if_decided(&job.run).await;
                    }
                }
                Err(e) => errln!("warning: job {}: {e}", job.id),
            },
            Err((why, retry)) => match store.fail_job(&job.id, &lease, &why, retry, now).await {
                Ok(j) if j.status == JobStatus::Failed => {
                    let after = match retry {
                        Retry::Never => "it would fail the same way again, so it is not retried".to_string(),
                        Retry::IfAttemptsLeft => format!("after {} attempts", j.attempts),
                    };
                    errln!("job {}: failed for good ({after}): {why}", job.id);
                    self.give_up(&job.run, &why).await;
                }
                Ok(j) => errln!("job {}: failed ({why}); it is tried again in {} ms", job.id, j.not_before_ms - now),
                Err(e) => errln!("warning: job {}: {e}", job.id),
            },
        }
    }

    /// One attempt: the claim follows from where the run is now, so a job
    /// retried after a crash picks the run up wherever it was left. A
    /// tenant's run goes on only within the tenant's quotas and its own
    /// budget ([`quota::admit`]), checked here as on every other path: a
    /// job queued before the hour's quota was spent waits for the next hour,
    /// its run left as it is.
    async fn attempt(&self, job: &Job, metering: &Metering) -> Result<Attempt, (String, Retry)> {
        let store = self.runs.store();
        // Only these fields are kept: the record (its grant above all) would
        // otherwise stay in memory for as long as the run waits.
        // A wake goes on only with the sleep (or the wait for a signal) it
        // was made for: the claim the store will take, checked on the run.
        let wake = Claim::Wake { until_ms: timer(job), token: nexo_store::wake_token(&job.id) };
        let (status, tenant, sha256, woken) = {
            let run = store.run(&job.run).await.map_err(again)?;
            let run = run.ok_or_else(|| ("the run no longer exists".to_string(), Retry::Never))?;
            let woken = wake.allows(&run, nexo_store::now_ms());
            (run.status, run.tenant, run.component_sha256, woken)
        };
        let input = job.payload.get("input").and_then(|v| v.as_str()).map(str::to_string);
        let how = match (status, job.kind) {
            (RunStatus::Suspended, nexo_store::JobKind::Wake) if woken => wake,
            (RunStatus::Suspended, nexo_store::JobKind::Wake) => return Ok(Attempt::Ended(NOT_SLEEPING)),
            (RunStatus::Queued, _) => Claim::Start,
            (RunStatus::Suspended, nexo_store::JobKind::Resume) => Claim::Resume,
            (RunStatus::Running, _) => Claim::Recover,
            (RunStatus::Failed, _) => Claim::Retry,
            // Started before and now waits for a decision or an input.
            (RunStatus::Suspended, nexo_store::JobKind::Start) => return Ok(Attempt::Ended(SUSPENDED)),
            (RunStatus::Done, _) => return Ok(Attempt::Ended("is done")),
            (RunStatus::Cancelled, _) => return Ok(Attempt::Ended("is cancelled")),
        };
        let quotas = match (&self.served, &tenant) {
            (Some(_), Some(tenant)) => {
                let quotas = crate::policy::tenant_quotas(&**store, tenant).await;
                let refusal = match &quotas {
                    Some(q) => {
                        let step = quota::Step::Claim { run: &job.run };
                        quota::admit(&**store, tenant, q, step, nexo_store::now_ms()).await.map_err(again)?.err()
                    }
                    None => Some(quota::Refusal {
                        message: "the tenant's policy cannot be read now, so its quotas are unknown".into(),
                        retry_after: Some(60),
                    }),
                };
                if let Some(refusal) = refusal {
                    return Ok(Attempt::Held(refusal));
                }
                quotas
            }
            _ => None,
        };
        // A tenant's plugin comes from this node's cache, filled from the
        // store; its instance shares the tenant's memory budget.
        // The tenant's quotas are read once for the pass: its budgets on
        // this node, and its meters.
        let served = match (&self.served, &tenant) {
            (Some(dir), Some(tenant)) => {
                let engine = &self.engine;
                let source =
                    crate::data_dir::materialize(&**store, dir, tenant, &sha256, &tokio::runtime::Handle::current())
                        .await
                        .map_err(again)?;
                // On every path, not only a new run's: the workspace is made on first need.
                let workspace =
                    crate::data_dir::ensure_workspace(dir, tenant).map_err(|e| again(format!("its workspace: {e}")))?;
                let plugin = self.served_plugin(engine, &source, &sha256).await.map_err(again)?;
                let shares = self.budgets.budgets(tenant, quotas.as_ref(), engine.config().epoch_tick);
                let meters = quota::pass_meters(&**store, tenant, &job.run, quotas.as_ref()).await;
                let audit: Arc<quota::PassAudit> = Default::default();
                metering.start(tenant, &meters, &audit);
                let budget = meters.budget(shares);
                let served = Served { source, plugin, budget, audit, workspace, data_dir: dir.clone() };
                Some(served)
            }
            _ => None,
        };
        let pass = served.as_ref();
        // With attempts left, a failure that may pass leaves the run queued for the next one.
        let retry_follows = job.attempts < job.max_attempts;
        let narrowing = Narrowing::default();
        let settings = PassSettings {
            how,
            input,
            narrowing: &narrowing,
            config: &self.file,
            config_path: self.config_path.as_deref(),
            served: pass,
            retry_follows,
            front_end: None,
            // A worker's passes never take a changed component.
            admit_changed: None,
        };
        let pass = super::pass::pass(&self.runs, &self.engine, &job.run, settings);
        // The pass continues the trace of the request that queued the job.
        let resumed = match TraceParent::from_job(&job.payload).filter(|_| crate::telemetry::traces::enabled()) {
            Some(parent) => opentelemetry::trace::FutureExt::with_context(pass, parent.context()).await,
            None => pass.await,
        };
        match resumed {
            Resumed::End(end) => match end.run.status {
                RunStatus::Done => Ok(Attempt::Ended("is done")),
                RunStatus::Suspended => Ok(Attempt::Ended(SUSPENDED)),
                RunStatus::Cancelled => Ok(Attempt::Ended("is cancelled")),
                _ => Err((end.run.error.unwrap_or_else(|| "the run failed".into()), retry(end.retryable))),
            },
            // A refused recovery has already marked the orphan failed for
            // good: a retry would make it running again.
            Resumed::Refused(why) if how == Claim::Recover && self.failed(&job.run).await => Err((why, Retry::Never)),
            // A wake the run has moved on from (it was resumed or cancelled
            // first) is over: tried again it would act on whatever the run is
            // now. Any other refusal (a store, a policy or a plugin that could
            // not be read) may pass the next time.
            Resumed::Refused(why) if matches!(how, Claim::Wake { .. }) && !self.still_allows(&job.run, how).await => {
                Err((why, Retry::Never))
            }
            Resumed::Refused(why) => Err(again(why)),
            Resumed::Failed(e) => Err((e.to_string(), retry(e.may_pass_on_retry()))),
        }
    }

    /// Queues the resume of a suspended run whose approval is decided. A
    /// decision made while this job's pass was ending found the job still
    /// live, so it queued none (a run has one live job at a time); deciding
    /// again, the same way, queues it now unless another job is live.
    async fn resume_if_decided(&self, id: &str) {
        let Ok(Some(approval)) = self.runs.store().approval(id).await else { return };
        let Some(decision) = approval.decision else { return };
        if let Err(e) = self.runs.decide_and_resume(id, &approval.call(), decision).await {
            errln!("warning: run {id}: its approval is decided, but its resume could not be queued: {e}");
        }
    }

    /// Whether run `id` is failed now, as the store says.
    async fn failed(&self, id: &str) -> bool {
        matches!(self.runs.store().run(id).await, Ok(Some(run)) if run.status == RunStatus::Failed)
    }

    /// Leaves a run its tenant's quotas do not let go on as it is (queued,
    /// or suspended with its decision made): its job waits until the quota
    /// may allow it, without using an attempt, and the run's `held` event
    /// says why; or, when waiting would not help (the run spent its own
    /// budget), the job ends failed and the run stays suspended or failed
    /// (a recovered `running` one ends failed).
    async fn hold(&self, job: &Job, lease: &nexo_store::JobLease, refusal: &quota::Refusal, now: i64) {
        let store = self.runs.store();
        let why = &refusal.message;
        let Some(secs) = refusal.retry_after else {
            match store.fail_job(&job.id, lease, why, Retry::Never, now).await {
                Ok(_) => errln!("job {}: run {} cannot go on: {why}", job.id, job.run),
                Err(e) => errln!("warning: job {}: {e}", job.id),
            }
            // A recovered run was left `running` with no job to end it: it
            // ends failed, with the quota's reason.
            if let Ok(Some(run)) = store.run(&job.run).await
                && run.status == RunStatus::Running
                && let Err(e) = self.runs.fail_orphan(&job.run, why).await
            {
                errln!("warning: could not mark run {} failed: {e}", job.run);
            }
            return;
        };
        // Held again for the same reason: it waits longer each time, half as
        // long again as it has waited so far (to a cap), so a run held for
        // long costs a claim now and then, not one a second.
        let waited_ms = if job.error.as_deref() == Some(why.as_str()) { now.saturating_sub(job.created_ms) } else { 0 };
        let wait_ms = i64::try_from(secs).unwrap_or(3600).saturating_mul(1000).max((waited_ms / 2).min(MAX_HOLD_MS));
        let until = now.saturating_add(wait_ms);
        let secs = (wait_ms + 999) / 1000;
        match store.postpone_job(&job.id, lease, why, until, now).await {
            Ok(_) => errln!("job {}: run {} waits {secs} s: {why}", job.id, job.run),
            Err(e) => errln!("warning: job {}: {e}", job.id),
        }
    }

    /// Whether run `id` still allows claim `how` (a store that cannot say
    /// counts as yes: the job is tried again).
    async fn still_allows(&self, id: &str, how: Claim) -> bool {
        match self.runs.store().run(id).await {
            Ok(Some(run)) => how.allows(&run, nexo_store::now_ms()),
            Ok(None) => false,
            Err(_) => true,
        }
    }

    /// A job that failed for good leaves no run waiting for it.
    async fn give_up(&self, id: &str, why: &str) {
        let store = self.runs.store();
        if let Ok(Some(run)) = store.run(id).await
            && run.status == RunStatus::Queued
            && let Ok(run) = store.cancel(id, &format!("its job failed for good: {why}")).await
        {
            crate::telemetry::metrics::instruments::run_ended(run.tenant.as_deref(), run.status, run.created_ms);
        }
    }
}

/// Deletes the sessions idle longer than `retain`, if set; says how many.
/// A store that fails is reported and the command goes on.
pub async fn sweep_sessions(store: &dyn nexo_store::Store, retain: Option<Duration>) -> Option<Vec<String>> {
    let period = retain?;
    let cut = nexo_store::now_ms().saturating_sub(i64::try_from(period.as_millis()).unwrap_or(i64::MAX));
    match store.expire_sessions(cut).await {
        Ok(ids) => {
            if !ids.is_empty() {
                tracing::info!(
                    "deleted {} session(s) idle for more than {}",
                    ids.len(),
                    humantime::format_duration(period)
                );
            }
            Some(ids)
        }
        Err(e) => {
            errln!("warning: cannot delete expired sessions: {e}");
            None
        }
    }
}
