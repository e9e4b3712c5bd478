//! Quotas and metering: what a tenant's runs may use and what they used.
//!
//! - the tenant's [`Quotas`], part of its policy;
//! - the budgets its runs draw on together while they run ([`MemoryBudget`],
//!   [`CpuBudget`], one per tenant and node in [`Budgets`]) and what one run
//!   draws on ([`RunBudget`], in its [`RunOptions`](crate::settings::RunOptions));
//! - the check wherever a run starts or goes on ([`admit`]), and the
//!   metering of what each pass of a run used ([`pass_meters`],
//!   [`meter_pass`]), persisted in the store per tenant and hour and per run.
//!
//! Usage is counted in the store, so it survives suspension, restarts and
//! the node that drove the run; every node sees the same counts. A pass's
//! meters start from what is left, of the hour and of the run's own
//! budget over its earlier passes. A refusal over the API is HTTP 429 with
//! `Retry-After`: the seconds until a running run may have ended
//! (concurrency) or until the next hour begins (the hourly quotas); a run
//! that spent its own budget is refused for good (409).

use std::sync::Arc;

use nexo_egress::Meter;
use nexo_store::{RunUsage, Store, StoreResult};

use serde_json::json;

mod budget;
mod quotas;

pub use budget::{Budgets, CpuBudget, MemoryBudget, RunBudget, Shares};
pub use quotas::{
    DEFAULT_NET_CONNECTIONS, DEFAULT_OPEN_STREAMS, DEFAULT_PLUGIN_BYTES, DEFAULT_PLUGINS, DEFAULT_WORKSPACE_FILES,
    Quotas,
};

/// Why a run may not start or go on now.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// What is used up, and what to do.
    pub message: String,
    /// When to try again, in seconds; `None` when waiting will not help
    /// (the run spent its own budget).
    pub retry_after: Option<u64>,
}

/// What is about to make a tenant's run go on, for [`admit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step<'a> {
    /// A new run, or a session's prompt: it counts against `runs-per-hour`.
    Start,
    /// A run going on at the tenant's word: a resume, a retry, an approval
    /// or a denial. Not yet among the tenant's live runs.
    GoOn {
        /// The run.
        run: &'a str,
    },
    /// A worker's claim of the run's job: the run is already among the
    /// tenant's live runs (its job is queued or running).
    Claim {
        /// The run.
        run: &'a str,
    },
    /// A child run its running parent starts (`run-agent`): it counts
    /// against `runs-per-hour` as a start, and takes the place of its
    /// parent among the live runs (the parent suspends as the child is
    /// written).
    Child {
        /// The parent.
        parent: &'a str,
    },
}

fn until_next_hour(now_ms: i64) -> u64 {
    let next = nexo_store::usage_period(now_ms) + nexo_store::USAGE_PERIOD_MS;
    u64::try_from((next - now_ms + 999) / 1000).unwrap_or(1).max(1)
}

/// Whether the tenant's run may start or go on at `now_ms` under its
/// `quotas`: the one check every path that makes a run go on calls (a
/// start, a session's prompt, a resume, a retry, an approval, a denial,
/// the worker's claim of its job).
///
/// - `concurrent-runs` counts every run that runs or may run
///   ([`Tenants::live_runs`](nexo_store::Tenants::live_runs)): queued, running, and those whose resume or
///   retry is queued; at the worker's claim, only the others that run
///   ([`Tenants::running_runs`](nexo_store::Tenants::running_runs));
/// - `runs-per-hour` counts starts only;
/// - the hour's tokens, CPU ticks and egress bytes must not be used up;
/// - a run going on must not have spent its own `cpu-ticks-per-run` in
///   its earlier passes (waiting does not renew that: it is refused for
///   good).
///
/// Each refusal is counted, by quota and step, in `nexo.quota.refusals`.
pub async fn admit(
    store: &dyn Store,
    tenant: &str,
    quotas: &Quotas,
    step: Step<'_>,
    now_ms: i64,
) -> StoreResult<Result<(), Refusal>> {
    let Some((quota, refusal)) = refusal(store, tenant, quotas, step, now_ms).await? else { return Ok(Ok(())) };
    let step_name = match step {
        Step::Start => "start",
        Step::GoOn { .. } => "go-on",
        Step::Claim { .. } => "claim",
        Step::Child { .. } => "child",
    };
    crate::telemetry::metrics::instruments::quota_refused(tenant, quota, step_name);
    Ok(Err(refusal))
}

/// [`admit`]'s check: the quota (its policy key) that refuses, and why.
async fn refusal(
    store: &dyn Store,
    tenant: &str,
    quotas: &Quotas,
    step: Step<'_>,
    now_ms: i64,
) -> StoreResult<Option<(&'static str, Refusal)>> {
    if let Some(limit) = quotas.concurrent_runs {
        // At a claim only the runs that hold a worker count: the tenant's
        // other queued runs wait as this one does, and counting them would
        // hold every claim for good once more are queued than the quota
        // (two starts at once, or a quota lowered). A claimed run is among
        // the running ones already.
        let (others, what) = match step {
            Step::Claim { .. } => (store.running_runs(tenant).await?.saturating_sub(1), "running"),
            Step::Child { .. } => {
                (store.live_runs(tenant).await?.saturating_sub(1), "queued, running or about to resume")
            }
            _ => (store.live_runs(tenant).await?, "queued, running or about to resume"),
        };
        if others >= limit {
            return Ok(Some((
                "concurrent-runs",
                Refusal {
                    message: format!(
                        "the tenant has {others} runs {what}, its quota of concurrent runs ({limit}); wait for one to \
                     end, cancel one, or ask the operator for a higher quota"
                    ),
                    retry_after: Some(1),
                },
            )));
        }
    }
    let used = this_hour(store, tenant, now_ms).await?;
    let (runs, tokens, ticks, egress) = used.map_or((0, 0, 0, 0), |u| (u.runs, u.tokens, u.cpu_ticks, u.egress_bytes));
    let over = |what: &str, used: u64, limit: u64| Refusal {
        message: format!(
            "the tenant used {used} {what} this hour, its quota ({limit}); the quota renews at the top of the hour"
        ),
        retry_after: Some(until_next_hour(now_ms)),
    };
    if matches!(step, Step::Start | Step::Child { .. })
        && let Some(limit) = quotas.runs_per_hour
        && runs >= limit
    {
        return Ok(Some(("runs-per-hour", over("runs", runs, limit))));
    }
    for (quota, what, used, limit) in [
        ("tokens-per-hour", "model tokens", tokens, quotas.tokens_per_hour),
        ("cpu-ticks-per-hour", "CPU ticks", ticks, quotas.cpu_ticks_per_hour),
        ("egress-bytes-per-hour", "egress bytes", egress, quotas.egress_bytes_per_hour),
    ] {
        if let Some(limit) = limit
            && used >= limit
        {
            return Ok(Some((quota, over(what, used, limit))));
        }
    }
    if let Some(usd) = quotas.usd_per_day {
        let spent = spent_today(store, tenant, now_ms).await?;
        if spent >= crate::spend::nanos(usd) {
            return Ok(Some((
                "usd-per-day",
                Refusal {
                    message: format!(
                        "the tenant's model turns cost ${:.6} today (UTC), its quota (${usd}); the quota renews at \
                         midnight UTC, or the operator raises `usd-per-day`",
                        crate::spend::usd(spent)
                    ),
                    retry_after: Some(until_next_day(now_ms)),
                },
            )));
        }
    }
    if let (Step::GoOn { run } | Step::Claim { run }, Some(limit)) = (step, quotas.cpu_ticks_per_run) {
        let spent = store.run_usage(run).await?.cpu_ticks;
        if spent >= limit {
            return Ok(Some((
                "cpu-ticks-per-run",
                Refusal {
                    message: format!(
                        "run {run} used {spent} CPU ticks in its passes so far, its quota per run ({limit}); it cannot \
                     go on: start a new run"
                    ),
                    retry_after: None,
                },
            )));
        }
    }
    Ok(None)
}

/// The tenant's usage in the hour of `now_ms`, if it used anything.
async fn this_hour(store: &dyn Store, tenant: &str, now_ms: i64) -> StoreResult<Option<nexo_store::Usage>> {
    let hour = nexo_store::usage_period(now_ms);
    Ok(store.usage(tenant, hour).await?.into_iter().find(|u| u.period_ms == hour))
}

/// One UTC day in milliseconds: the period of `usd-per-day`.
const DAY_MS: i64 = 24 * nexo_store::USAGE_PERIOD_MS;

/// What the tenant's model turns cost so far in the UTC day that holds
/// `now_ms`, in nano-dollars: the sum of the day's hours.
pub async fn spent_today(store: &dyn Store, tenant: &str, now_ms: i64) -> StoreResult<u64> {
    let day = now_ms.div_euclid(DAY_MS) * DAY_MS;
    Ok(store.usage(tenant, day).await?.iter().fold(0u64, |sum, u| sum.saturating_add(u.cost_nanos)))
}

/// A tenant's run's budget in dollars now: its `usd-per-run`, or what its
/// session's other runs left of `usd-per-session` if that is less. `None`:
/// no budget.
pub async fn run_budget(store: &dyn Store, run: &nexo_store::Run, quotas: &Quotas) -> StoreResult<Option<f64>> {
    let session_left = match (quotas.usd_per_session, &run.session) {
        (Some(usd), Some(session)) => {
            let mut others = 0u64;
            for other in store.session_runs(session).await?.iter().filter(|r| r.id != run.id) {
                others = others.saturating_add(store.run_usage(&other.id).await?.cost_nanos);
            }
            Some(crate::spend::usd(crate::spend::nanos(usd).saturating_sub(others)))
        }
        _ => None,
    };
    Ok(match (quotas.usd_per_run, session_left) {
        (Some(run), Some(session)) => Some(run.min(session)),
        (run, session) => run.or(session),
    })
}

fn until_next_day(now_ms: i64) -> u64 {
    let next = (now_ms.div_euclid(DAY_MS) + 1) * DAY_MS;
    u64::try_from((next - now_ms + 999) / 1000).unwrap_or(1).max(1)
}

/// The meters of one pass of a tenant's run, each holding what is left
/// when the pass starts: of the hour's quota, and of the run's own budget
/// over all its passes so far. Without a quota a meter only counts.
#[derive(Debug, Clone)]
pub struct Meters {
    /// Web bytes: what is left of the hour's.
    pub egress: Arc<Meter>,
    /// CPU ticks: the smaller of what is left of the run's own ticks
    /// (`cpu-ticks-per-run`, less its earlier passes') and of the hour's.
    pub ticks: Arc<Meter>,
    /// Model tokens, one counter for every prompt of the pass: what is
    /// left of the hour's.
    pub tokens: Arc<Meter>,
    /// What the pass's live turns cost, in nano-dollars: what is left of
    /// the day's `usd-per-day`.
    pub cost: Arc<Meter>,
}

/// The [`Meters`] of a pass of the tenant's `run` under its `quotas` now.
/// Unreadable usage or quotas give meters with no room, never an
/// unmetered pass.
pub async fn pass_meters(store: &dyn Store, tenant: &str, run: &str, quotas: Option<&Quotas>) -> Meters {
    let meter = |limit: Option<u64>| Arc::new(Meter::new(limit));
    let no_room =
        || Meters { egress: meter(Some(0)), ticks: meter(Some(0)), tokens: meter(Some(0)), cost: meter(Some(0)) };
    let Some(quotas) = quotas else { return no_room() };
    let now = nexo_store::now_ms();
    let (Ok(used), Ok(spent), Ok(today)) =
        (this_hour(store, tenant, now).await, store.run_usage(run).await, spent_today(store, tenant, now).await)
    else {
        return no_room();
    };
    let (bytes_used, ticks_used, tokens_used) = used.map_or((0, 0, 0), |u| (u.egress_bytes, u.cpu_ticks, u.tokens));
    let left = |limit: Option<u64>, used: u64| limit.map(|l| l.saturating_sub(used));
    let hourly = left(quotas.cpu_ticks_per_hour, ticks_used);
    let ticks = match (left(quotas.cpu_ticks_per_run, spent.cpu_ticks), hourly) {
        (Some(run), Some(hour)) => Some(run.min(hour)),
        (run, hour) => run.or(hour),
    };
    Meters {
        egress: meter(left(quotas.egress_bytes_per_hour, bytes_used)),
        ticks: meter(ticks),
        tokens: meter(left(quotas.tokens_per_hour, tokens_used)),
        cost: meter(left(quotas.usd_per_day.map(crate::spend::nanos), today)),
    }
}

/// What one pass of a run used besides its journal and events.
#[derive(Debug, Clone, Copy, Default)]
pub struct Pass {
    /// The model tokens of its live turns ([`pass_meters`]).
    pub tokens: u64,
    /// The CPU ticks its guest ran for ([`pass_meters`]).
    pub cpu_ticks: u64,
    /// The web bytes its fetches moved ([`pass_meters`]).
    pub egress_bytes: u64,
    /// What its live turns cost, in nano-dollars ([`pass_meters`]).
    pub cost_nanos: u64,
}

impl Meters {
    /// What the pass used so far, read from its meters: a turn the model
    /// answered counts even when the run was cancelled before its journal
    /// recorded it, and a replayed turn (paid for once, by the pass that
    /// journaled it) never reaches the meter.
    pub fn pass(&self) -> Pass {
        Pass {
            tokens: self.tokens.used(),
            cpu_ticks: self.ticks.used(),
            egress_bytes: self.egress.used(),
            cost_nanos: self.cost.used(),
        }
    }

    /// The budget of the pass these meters count, with the tenant's
    /// `shares` of this node ([`Budgets::budgets`]).
    pub fn budget(&self, shares: Shares) -> RunBudget {
        RunBudget {
            memory: shares.memory,
            cpu: shares.cpu,
            connections: shares.connections,
            egress: Some(self.egress.clone()),
            cpu_ticks: Some(self.ticks.clone()),
            tokens: Some(self.tokens.clone()),
            cost: Some(self.cost.clone()),
        }
    }
}

/// The gate's decisions during one pass, and the connections its shell
/// commands made through the egress proxy, held until the pass ends and
/// written to the tenant's audit log then (the host-call path only hands
/// them over). A call answered from the journal on a replay is not decided
/// again, so none is audited twice.
///
/// A pass lists at most [`MAX_CONNECTIONS_LISTED`] connections, so a command
/// that opens connections in a loop cannot fill the host's memory or the
/// log; the rest are counted in one last entry.
#[derive(Debug, Default)]
pub struct PassAudit(std::sync::Mutex<Entries>);

/// The most connections one pass lists in the audit log.
pub const MAX_CONNECTIONS_LISTED: usize = 1000;

#[derive(Debug, Default)]
struct Entries {
    listed: Vec<(i64, Audited)>,
    connections: usize,
    /// Past the most listed: how many, how many let through, bytes sent and received.
    unlisted: Option<(i64, [u64; 4])>,
}

/// One entry of a [`PassAudit`].
#[derive(Debug)]
enum Audited {
    /// `capability.used`.
    Call(crate::host_call::CapabilityUse),
    /// `net.connection`, and who made it.
    Connection(String, nexo_egress::Connection),
}

impl crate::host_call::AuditSink for PassAudit {
    fn record(&self, used: crate::host_call::CapabilityUse) {
        let mut entries = self.0.lock().unwrap_or_else(|p| p.into_inner());
        entries.listed.push((nexo_store::now_ms(), Audited::Call(used)));
    }

    fn connection(&self, by: &str, connection: &nexo_egress::Connection) {
        let mut entries = self.0.lock().unwrap_or_else(|p| p.into_inner());
        entries.connections += 1;
        if entries.connections <= MAX_CONNECTIONS_LISTED {
            entries.listed.push((nexo_store::now_ms(), Audited::Connection(by.to_string(), connection.clone())));
            return;
        }
        let (_, [count, allowed, sent, received]) = entries.unlisted.get_or_insert((nexo_store::now_ms(), [0; 4]));
        *count += 1;
        *allowed += u64::from(connection.allowed);
        *sent += connection.sent;
        *received += connection.received;
    }
}

impl PassAudit {
    fn take(&self) -> Vec<(i64, Audited)> {
        let mut entries = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let mut listed = std::mem::take(&mut entries.listed);
        if let Some((at_ms, [count, allowed, sent, received])) = entries.unlisted.take() {
            let reason = format!(
                "{count} more connections of this pass ({allowed} let through) are counted here, not listed: a pass \
                 lists at most {MAX_CONNECTIONS_LISTED}"
            );
            let summary = nexo_egress::Connection {
                host: "*".into(),
                port: 0,
                method: "*".into(),
                sent,
                received,
                allowed: allowed > 0,
                reason: Some(reason),
            };
            listed.push((at_ms, Audited::Connection("*".into(), summary)));
        }
        entries.connections = 0;
        listed
    }
}

/// Meters one pass of the tenant's run: its model tokens, CPU ticks and
/// web bytes ([`Meters::pass`]), added to the hour's usage and to the
/// run's own ([`Ledger::add_run_usage`](nexo_store::Ledger::add_run_usage)), which its next pass starts from;
/// and each of the gate's decisions on a capability or MCP call, the
/// guest's and the model's, in the tenant's audit log (`capability.used`).
pub async fn meter_pass(store: &dyn Store, tenant: &str, run: &str, pass: Pass, audit: &PassAudit) {
    let now = nexo_store::now_ms();
    let tokens = pass.tokens;
    for (at_ms, entry) in audit.take() {
        let (kind, mut data) = match &entry {
            Audited::Call(used) => ("capability.used", serde_json::to_value(used).unwrap_or_default()),
            Audited::Connection(by, c) => (
                "net.connection",
                json!({
                    "by": by, "host": c.host, "port": c.port, "method": c.method, "sent": c.sent,
                    "received": c.received, "allowed": c.allowed, "reason": c.reason,
                }),
            ),
        };
        data["run"] = json!(run);
        if let Err(err) = store.append_audit(tenant, kind, &data, at_ms).await {
            tracing::warn!(target: "nexo::server", "cannot audit run {run}'s {kind}: {err}");
        }
    }
    let used =
        RunUsage { tokens, cpu_ticks: pass.cpu_ticks, egress_bytes: pass.egress_bytes, cost_nanos: pass.cost_nanos };
    if let Err(err) = store.add_usage(tenant, now, 0, used).await {
        tracing::warn!(target: "nexo::server", "cannot meter run {run}: {err}");
    }
    if used != RunUsage::default()
        && let Err(err) = store.add_run_usage(run, used).await
    {
        tracing::warn!(target: "nexo::server", "cannot meter run {run}'s own usage: {err}");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use nexo_store::{Jobs, Ledger, MemoryStore, NewTenant, Runs, Tenants};

    use super::*;

    /// A command opening connections in a loop fills neither memory nor
    /// the log: past the most listed, they are counted in one entry.
    #[test]
    fn a_pass_lists_at_most_so_many_connections_and_counts_the_rest() {
        use crate::host_call::AuditSink;
        let audit = PassAudit::default();
        let connection = |allowed: bool| nexo_egress::Connection {
            host: "a.example".into(),
            port: 443,
            method: "CONNECT".into(),
            sent: 10,
            received: 20,
            allowed,
            reason: None,
        };
        for n in 0..MAX_CONNECTIONS_LISTED + 3 {
            audit.connection("shell", &connection(n % 2 == 0));
        }
        let entries = audit.take();
        assert_eq!(entries.len(), MAX_CONNECTIONS_LISTED + 1);
        let Some((_, Audited::Connection(_, last))) = entries.last() else { panic!("no summary: {entries:?}") };
        assert_eq!((last.sent, last.received), (30, 60), "{last:?}");
        assert!(last.reason.as_deref().unwrap_or("").starts_with("3 more connections"), "{last:?}");
        // The next pass starts listing again.
        audit.connection("mcp:files", &connection(true));
        assert_eq!(audit.take().len(), 1);
    }

    async fn store_with_tenant() -> MemoryStore {
        let store = MemoryStore::new();
        let t = NewTenant { id: "t1".into(), name: "acme".into(), policy: json!({}), created_ms: 0 };
        store.create_tenant(t).await.unwrap();
        store
    }

    #[tokio::test]
    async fn hourly_quotas_refuse_with_the_time_to_the_next_hour() {
        let store = store_with_tenant().await;
        let hour: i64 = 500_000 * 3_600_000;
        let now = hour + 3_600_000 - 10_500;
        store
            .add_usage(
                "t1",
                now,
                3,
                nexo_store::RunUsage { tokens: 900, cpu_ticks: 50, egress_bytes: 0, cost_nanos: 0 },
            )
            .await
            .unwrap();
        let check = |quotas: Quotas, step: Step<'static>, at: i64| {
            let store = &store;
            async move { admit(store, "t1", &quotas, step, at).await.unwrap() }
        };
        let runs = Quotas { runs_per_hour: Some(3), ..Quotas::default() };
        let refused = check(runs.clone(), Step::Start, now).await.unwrap_err();
        assert_eq!(refused.retry_after, Some(11));
        assert!(refused.message.contains("3 runs"), "{}", refused.message);
        // Runs per hour count starts: a run that goes on is not a new one.
        assert!(check(runs, Step::GoOn { run: "r1" }, now).await.is_ok());
        let tokens = Quotas { tokens_per_hour: Some(1000), ..Quotas::default() };
        assert!(check(tokens, Step::Start, now).await.is_ok());
        let spent = Quotas { tokens_per_hour: Some(900), ..Quotas::default() };
        for step in [Step::Start, Step::GoOn { run: "r1" }, Step::Claim { run: "r1" }] {
            let refused = check(spent.clone(), step, now).await.unwrap_err();
            assert!(refused.message.contains("900 model tokens"), "{}", refused.message);
        }
        // The next hour starts afresh.
        assert!(check(spent, Step::Start, hour + 3_600_000).await.is_ok());
        let ticks = Quotas { cpu_ticks_per_hour: Some(50), ..Quotas::default() };
        assert!(check(ticks, Step::Claim { run: "r1" }, now).await.is_err());
        store
            .add_usage(
                "t1",
                now,
                0,
                nexo_store::RunUsage { tokens: 0, cpu_ticks: 0, egress_bytes: 4096, cost_nanos: 0 },
            )
            .await
            .unwrap();
        let egress = Quotas { egress_bytes_per_hour: Some(4096), ..Quotas::default() };
        let refused = check(egress, Step::GoOn { run: "r1" }, now).await.unwrap_err();
        assert!(refused.message.contains("4096 egress bytes"), "{}", refused.message);
        let egress = Quotas { egress_bytes_per_hour: Some(4097), ..Quotas::default() };
        assert!(check(egress, Step::Start, now).await.is_ok());
        // Dollars count over the UTC day: the hours before add up.
        let earlier = RunUsage { cost_nanos: 1_500_000_000, ..RunUsage::default() };
        store.add_usage("t1", hour - 5 * 3_600_000, 0, earlier).await.unwrap();
        store.add_usage("t1", now, 0, RunUsage { cost_nanos: 500_000_000, ..RunUsage::default() }).await.unwrap();
        let day = Quotas { usd_per_day: Some(2.0), ..Quotas::default() };
        let refused = check(day.clone(), Step::GoOn { run: "r1" }, now).await.unwrap_err();
        assert!(refused.message.contains("cost $2.000000 today"), "{}", refused.message);
        let midnight = (now / 86_400_000 + 1) * 86_400_000;
        assert_eq!(refused.retry_after, Some(u64::try_from((midnight - now + 999) / 1000).unwrap()));
        assert!(check(day, Step::Start, midnight).await.is_ok(), "a new day starts afresh");
        assert!(check(Quotas { usd_per_day: Some(2.01), ..Quotas::default() }, Step::Start, now).await.is_ok());
    }

    fn run(id: &str, status: nexo_store::RunStatus) -> nexo_store::NewRun {
        nexo_store::NewRun {
            id: id.into(),
            agent: "a".into(),
            kind: "component".into(),
            source: "a.wasm".into(),
            component_sha256: "ab".repeat(32),
            input: String::new(),
            grant: json!({}),
            status,
            lease: None,
            created_ms: 1,
            session: None,
            tenant: Some("t1".into()),
        }
    }

    #[tokio::test]
    async fn concurrent_runs_count_queued_resumes_and_a_claim_counts_itself_once() {
        let store = store_with_tenant().await;
        let quotas = Quotas { concurrent_runs: Some(2), ..Quotas::default() };
        store.create_run(run("q", nexo_store::RunStatus::Queued)).await.unwrap();
        store.create_run(run("s", nexo_store::RunStatus::Suspended)).await.unwrap();
        store.create_run(run("t", nexo_store::RunStatus::Suspended)).await.unwrap();
        let now = nexo_store::now_ms();
        assert!(admit(&store, "t1", &quotas, Step::GoOn { run: "s" }, now).await.unwrap().is_ok());
        let job = nexo_store::NewJob {
            id: "j".into(),
            run: "s".into(),
            kind: nexo_store::JobKind::Resume,
            payload: json!({}),
            max_attempts: 1,
            backoff_ms: 0,
            not_before_ms: 0,
            created_ms: 0,
        };
        store.enqueue(job).await.unwrap();
        // `s` resumes: with `q`, two may run; a third may not go on.
        let refused = admit(&store, "t1", &quotas, Step::GoOn { run: "t" }, now).await.unwrap().unwrap_err();
        assert!(refused.message.contains("2 runs queued, running or about to resume"), "{}", refused.message);
        assert!(admit(&store, "t1", &quotas, Step::Start, now).await.unwrap().is_err());
        // The worker claiming `s` is one of the two.
        assert!(admit(&store, "t1", &quotas, Step::Claim { run: "s" }, now).await.unwrap().is_ok());
        // A child of `s` takes its place as `s` suspends; a third run's
        // child would not.
        assert!(admit(&store, "t1", &quotas, Step::Child { parent: "s" }, now).await.unwrap().is_ok());
        let quotas = Quotas { concurrent_runs: Some(1), ..quotas };
        assert!(admit(&store, "t1", &quotas, Step::Child { parent: "s" }, now).await.unwrap().is_err());
    }

    #[tokio::test]
    async fn more_queued_runs_than_the_quota_are_claimed_one_by_one_not_held_for_good() {
        let store = store_with_tenant().await;
        let quotas = Quotas { concurrent_runs: Some(1), ..Quotas::default() };
        // Three queued (two starts at once, or a quota lowered since).
        for (n, id) in ["a", "b", "c"].into_iter().enumerate() {
            store.create_run(run(id, nexo_store::RunStatus::Queued)).await.unwrap();
            let job = nexo_store::NewJob {
                id: format!("j{id}"),
                run: id.into(),
                kind: nexo_store::JobKind::Start,
                payload: json!({}),
                max_attempts: 1,
                backoff_ms: 0,
                not_before_ms: 0,
                created_ms: i64::try_from(n).unwrap(),
            };
            store.enqueue(job).await.unwrap();
        }
        let now = nexo_store::now_ms();
        let first = store.claim_job("w", 30_000, now).await.unwrap().unwrap();
        let admitted = admit(&store, "t1", &quotas, Step::Claim { run: &first.run }, now).await.unwrap();
        assert!(admitted.is_ok(), "the other queued runs do not hold the first claim: {admitted:?}");
        // While it runs, the next claim is held: one runs at a time.
        let second = store.claim_job("w", 30_000, now).await.unwrap().unwrap();
        let held = admit(&store, "t1", &quotas, Step::Claim { run: &second.run }, now).await.unwrap().unwrap_err();
        assert!(held.message.contains("1 runs running"), "{}", held.message);
    }

    #[tokio::test]
    async fn a_pass_is_metered_from_its_meters_even_when_its_journal_recorded_no_turn() {
        let store = store_with_tenant().await;
        store.create_run(run("r", nexo_store::RunStatus::Cancelled)).await.unwrap();
        let meters = pass_meters(&store, "t1", "r", None).await;
        // A turn answered, then the run cancelled before its journal took it.
        meters.tokens.add(15);
        meters.ticks.add(7);
        meter_pass(&store, "t1", "r", meters.pass(), &PassAudit::default()).await;
        assert_eq!(
            store.run_usage("r").await.unwrap(),
            RunUsage { tokens: 15, cpu_ticks: 7, egress_bytes: 0, cost_nanos: 0 }
        );
        let hour = this_hour(&store, "t1", nexo_store::now_ms()).await.unwrap().unwrap();
        assert_eq!((hour.tokens, hour.cpu_ticks), (15, 7));
    }

    #[tokio::test]
    async fn a_run_that_spent_its_own_ticks_goes_on_no_more_and_its_meters_start_from_what_is_left() {
        let store = store_with_tenant().await;
        store.create_run(run("r", nexo_store::RunStatus::Suspended)).await.unwrap();
        let quotas = Quotas {
            cpu_ticks_per_run: Some(100),
            cpu_ticks_per_hour: Some(1000),
            tokens_per_hour: Some(40),
            ..Quotas::default()
        };
        store.add_run_usage("r", RunUsage { tokens: 25, cpu_ticks: 70, egress_bytes: 0, cost_nanos: 0 }).await.unwrap();
        store
            .add_usage(
                "t1",
                nexo_store::now_ms(),
                1,
                nexo_store::RunUsage { tokens: 25, cpu_ticks: 70, egress_bytes: 0, cost_nanos: 0 },
            )
            .await
            .unwrap();
        let meters = pass_meters(&store, "t1", "r", Some(&quotas)).await;
        assert_eq!(meters.ticks.limit(), Some(30), "the run's own ticks left");
        assert_eq!(meters.tokens.limit(), Some(15), "the hour's tokens left");
        assert_eq!(meters.egress.limit(), None, "no quota: it only counts");
        store.add_run_usage("r", RunUsage { tokens: 0, cpu_ticks: 30, egress_bytes: 0, cost_nanos: 0 }).await.unwrap();
        let now = nexo_store::now_ms();
        let refused = admit(&store, "t1", &quotas, Step::GoOn { run: "r" }, now).await.unwrap().unwrap_err();
        assert_eq!(refused.retry_after, None, "waiting does not help");
        assert!(refused.message.contains("used 100 CPU ticks"), "{}", refused.message);
        let unreadable = pass_meters(&store, "t1", "r", None).await;
        assert!(unreadable.tokens.exhausted() && unreadable.ticks.exhausted() && unreadable.egress.exhausted());
    }
}
