//! Per-tenant quotas, checked before a run starts, and the metering of
//! what each pass of a run used, persisted in the store.
//!
//! Usage is counted per UTC hour in the store, so it survives suspension,
//! restarts and the node that drove the run; every node sees the same
//! counts. A refusal is HTTP 429 with `Retry-After`: the seconds until a
//! running run may have ended (concurrency) or until the next hour begins
//! (the hourly quotas).

use std::sync::Arc;
use std::time::Duration;

use nexo_egress::Meter;
use nexo_store::{RunStatus, Store, StoreResult};

pub use super::policy::Quotas;
use serde_json::json;

/// Each tenant's memory and CPU budgets on this node, shared by its runs.
#[derive(Debug, Default)]
pub struct Budgets(std::sync::Mutex<std::collections::HashMap<String, TenantBudgets>>);

#[derive(Debug, Default)]
struct TenantBudgets {
    memory: Option<std::sync::Arc<nexo::instance::MemoryBudget>>,
    cpu: Option<std::sync::Arc<nexo::instance::CpuBudget>>,
}

type Shared<T> = Option<std::sync::Arc<T>>;

impl Budgets {
    /// The tenant's budgets under its current `quotas` (`memory-mib`,
    /// `cpu-cores`); `None` where it has no such quota, or its policy could
    /// not be read. A changed quota starts a new budget; runs of the old
    /// one give theirs back to it.
    pub fn budgets(
        &self,
        tenant: &str,
        quotas: Option<&Quotas>,
        tick: Duration,
    ) -> (Shared<nexo::instance::MemoryBudget>, Shared<nexo::instance::CpuBudget>) {
        let Some(quotas) = quotas else { return (None, None) };
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let entry = map.entry(tenant.to_string()).or_default();
        let memory = quotas.memory_mib.and_then(|m| usize::try_from(m).ok()).map(|m| m.saturating_mul(1 << 20));
        entry.memory = match (memory, entry.memory.take()) {
            (Some(cap), Some(b)) if b.cap() == cap => Some(b),
            (Some(cap), _) => Some(nexo::instance::MemoryBudget::new(cap)),
            (None, _) => None,
        };
        entry.cpu = match (quotas.cpu_cores, entry.cpu.take()) {
            (Some(cores), Some(b)) if b.cores() == cores.max(0.01) => Some(b),
            (Some(cores), _) => Some(nexo::instance::CpuBudget::new(cores, tick)),
            (None, _) => None,
        };
        (entry.memory.clone(), entry.cpu.clone())
    }
}

/// The tenant's quotas now, from its stored policy; `None` if the tenant
/// or its policy cannot be read. A pass reads them once.
pub async fn quotas(store: &dyn Store, tenant: &str) -> Option<Quotas> {
    let stored = store.tenant(tenant).await.ok().flatten()?;
    super::policy::Policy::from_stored(&stored.policy).ok().map(|p| p.quotas)
}

/// Why a run may not start now.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// What is used up, and what to do.
    pub message: String,
    /// When to try again, in seconds.
    pub retry_after: u64,
}

/// What a run that may start gets: the tokens left in this hour, if the
/// tenant has a token quota.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Allowance {
    /// The run's token budget.
    pub tokens: Option<u64>,
}

fn until_next_hour(now_ms: i64) -> u64 {
    let next = nexo_store::usage_period(now_ms) + nexo_store::USAGE_PERIOD_MS;
    u64::try_from((next - now_ms + 999) / 1000).unwrap_or(1).max(1)
}

/// Checks the tenant's quotas at `now_ms`.
pub async fn check_start(
    store: &dyn Store,
    tenant: &str,
    quotas: &Quotas,
    now_ms: i64,
) -> StoreResult<Result<Allowance, Refusal>> {
    if let Some(limit) = quotas.concurrent_runs {
        let mut live = 0u64;
        for status in [RunStatus::Queued, RunStatus::Running] {
            let cap = usize::try_from(limit).unwrap_or(usize::MAX).saturating_add(1);
            live += store.tenant_runs(tenant, Some(status), cap).await?.len() as u64;
        }
        if live >= limit {
            return Ok(Err(Refusal {
                message: format!(
                    "the tenant has {live} runs queued or running, its quota of concurrent runs ({limit}); wait for one \
                     to end, or ask the operator for a higher quota"
                ),
                retry_after: 1,
            }));
        }
    }
    let used = this_hour(store, tenant, now_ms).await?;
    let (runs, tokens, ticks, egress) = used.map_or((0, 0, 0, 0), |u| (u.runs, u.tokens, u.cpu_ticks, u.egress_bytes));
    let over = |what: &str, used: u64, limit: u64| Refusal {
        message: format!(
            "the tenant used {used} {what} this hour, its quota ({limit}); the quota renews at the top of the hour"
        ),
        retry_after: until_next_hour(now_ms),
    };
    if let Some(limit) = quotas.runs_per_hour
        && runs >= limit
    {
        return Ok(Err(over("runs", runs, limit)));
    }
    if let Some(limit) = quotas.cpu_ticks_per_hour
        && ticks >= limit
    {
        return Ok(Err(over("CPU ticks", ticks, limit)));
    }
    if let Some(limit) = quotas.egress_bytes_per_hour
        && egress >= limit
    {
        return Ok(Err(over("egress bytes", egress, limit)));
    }
    let tokens_left = match quotas.tokens_per_hour {
        Some(limit) if tokens >= limit => return Ok(Err(over("model tokens", tokens, limit))),
        Some(limit) => Some(limit - tokens),
        None => None,
    };
    Ok(Ok(Allowance { tokens: tokens_left }))
}

/// The tenant's usage in the hour of `now_ms`, if it used anything.
async fn this_hour(store: &dyn Store, tenant: &str, now_ms: i64) -> StoreResult<Option<nexo_store::Usage>> {
    let hour = nexo_store::usage_period(now_ms);
    Ok(store.usage(tenant, hour).await?.into_iter().find(|u| u.period_ms == hour))
}

/// The meters of one pass of a tenant's run: its web bytes and its CPU
/// ticks, each holding what is left of the tenant's `quotas` now (the
/// hour's bytes; the smaller of the per-run ticks and the hour's). Without
/// a quota a meter only counts. Unreadable usage or quotas give meters
/// with no room, never an unmetered pass.
pub async fn pass_meters(store: &dyn Store, tenant: &str, quotas: Option<&Quotas>) -> (Arc<Meter>, Arc<Meter>) {
    let no_room = || (Arc::new(Meter::new(Some(0))), Arc::new(Meter::new(Some(0))));
    let Some(quotas) = quotas else { return no_room() };
    let Ok(used) = this_hour(store, tenant, nexo_store::now_ms()).await else { return no_room() };
    let (bytes_used, ticks_used) = used.map_or((0, 0), |u| (u.egress_bytes, u.cpu_ticks));
    let bytes = quotas.egress_bytes_per_hour.map(|l| l.saturating_sub(bytes_used));
    let hourly = quotas.cpu_ticks_per_hour.map(|l| l.saturating_sub(ticks_used));
    let ticks = match (quotas.cpu_ticks_per_run, hourly) {
        (Some(run), Some(hour)) => Some(run.min(hour)),
        (run, hour) => run.or(hour),
    };
    (Arc::new(Meter::new(bytes)), Arc::new(Meter::new(ticks)))
}

/// What one pass of a run used besides its journal and events.
#[derive(Debug, Clone, Copy, Default)]
pub struct Pass {
    /// The CPU ticks its guest ran for ([`pass_meters`]).
    pub cpu_ticks: u64,
    /// The web bytes its fetches moved ([`pass_meters`]).
    pub egress_bytes: u64,
}

/// Where a pass's metering starts: the length of its run's journal
/// before the pass (entries from this sequence number on are the pass's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mark {
    /// The first sequence number of the pass.
    pub seq: u64,
}

/// The run's [`Mark`] now.
pub async fn mark(store: &dyn Store, run: &str) -> Mark {
    let seq = store.journal(run).await.ok().and_then(|j| j.iter().map(|e| e.end).max()).unwrap_or(0);
    Mark { seq }
}

/// The gate's decisions during one pass, held until the pass ends and
/// written to the tenant's audit log then (the host-call path only hands
/// them over). A call answered from the journal on a replay is not decided
/// again, so none is audited twice.
#[derive(Debug, Default)]
pub struct PassAudit(std::sync::Mutex<Vec<(i64, nexo::host_call::CapabilityUse)>>);

impl nexo::host_call::AuditSink for PassAudit {
    fn record(&self, used: nexo::host_call::CapabilityUse) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push((nexo_store::now_ms(), used));
    }
}

impl PassAudit {
    fn take(&self) -> Vec<(i64, nexo::host_call::CapabilityUse)> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// The tokens a journaled model turn reports (`{"Ok": {"usage": …}}`).
fn turn_tokens(result: &str) -> u64 {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(result) else { return 0 };
    let usage = &value["Ok"]["usage"];
    usage["input_tokens"].as_u64().unwrap_or(0) + usage["output_tokens"].as_u64().unwrap_or(0)
}

/// Meters one pass of the tenant's run from its [`Mark`]: the tokens of
/// the model turns this pass paid for (journaled from `mark.seq` on; a
/// replayed turn was paid for once, by the pass that journaled it), its
/// CPU ticks and its web bytes, added to the hour's usage; and each of the
/// gate's decisions on a capability or MCP call, the guest's and the
/// model's, in the tenant's audit log (`capability.used`).
pub async fn meter_pass(store: &dyn Store, tenant: &str, run: &str, mark: Mark, pass: Pass, audit: &PassAudit) {
    let now = nexo_store::now_ms();
    let tokens: u64 = match store.journal(run).await {
        Ok(entries) => entries
            .iter()
            .filter(|e| e.seq >= mark.seq && e.interface == "nexo:model" && e.function == "complete")
            .map(|e| turn_tokens(&e.result))
            .sum(),
        Err(_) => 0,
    };
    for (at_ms, used) in audit.take() {
        let mut data = serde_json::to_value(&used).unwrap_or_default();
        data["run"] = json!(run);
        if let Err(err) = store.append_audit(tenant, "capability.used", &data, at_ms).await {
            tracing::warn!(target: "nexo::server", "cannot audit run {run}'s call `{}`: {err}", used.call);
        }
    }
    if let Err(err) = store.add_usage(tenant, now, 0, tokens, pass.cpu_ticks, pass.egress_bytes).await {
        tracing::warn!(target: "nexo::server", "cannot meter run {run}: {err}");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use nexo_store::{MemoryStore, NewTenant};

    use super::*;

    async fn store_with_tenant() -> MemoryStore {
        let store = MemoryStore::new();
        let t = NewTenant { id: "t1".into(), name: "acme".into(), policy: json!({}), created_ms: 0 };
        store.create_tenant(t).await.unwrap();
        store
    }

    #[test]
    fn a_turn_counts_its_input_and_output_tokens() {
        assert_eq!(turn_tokens(r#"{"Ok": {"text": "hi", "usage": {"input_tokens": 10, "output_tokens": 5}}}"#), 15);
        assert_eq!(turn_tokens(r#"{"Err": {"Unavailable": {}}}"#), 0);
        assert_eq!(turn_tokens("not json"), 0);
    }

    #[tokio::test]
    async fn hourly_quotas_refuse_with_the_time_to_the_next_hour() {
        let store = store_with_tenant().await;
        let hour: i64 = 500_000 * 3_600_000;
        let now = hour + 3_600_000 - 10_500;
        store.add_usage("t1", now, 3, 900, 50, 0).await.unwrap();
        let quotas = Quotas { runs_per_hour: Some(3), ..Quotas::default() };
        let refused = check_start(&store, "t1", &quotas, now).await.unwrap().unwrap_err();
        assert_eq!(refused.retry_after, 11);
        assert!(refused.message.contains("3 runs"), "{}", refused.message);
        let quotas = Quotas { tokens_per_hour: Some(1000), ..Quotas::default() };
        let allowed = check_start(&store, "t1", &quotas, now).await.unwrap().unwrap();
        assert_eq!(allowed.tokens, Some(100), "the run gets what is left of the hour");
        let quotas = Quotas { tokens_per_hour: Some(900), ..Quotas::default() };
        assert!(check_start(&store, "t1", &quotas, now).await.unwrap().is_err());
        // The next hour starts afresh.
        assert!(check_start(&store, "t1", &quotas, hour + 3_600_000).await.unwrap().is_ok());
        let quotas = Quotas { cpu_ticks_per_hour: Some(50), ..Quotas::default() };
        assert!(check_start(&store, "t1", &quotas, now).await.unwrap().is_err());
        store.add_usage("t1", now, 0, 0, 0, 4096).await.unwrap();
        let quotas = Quotas { egress_bytes_per_hour: Some(4096), ..Quotas::default() };
        let refused = check_start(&store, "t1", &quotas, now).await.unwrap().unwrap_err();
        assert!(refused.message.contains("4096 egress bytes"), "{}", refused.message);
        let quotas = Quotas { egress_bytes_per_hour: Some(4097), ..Quotas::default() };
        assert!(check_start(&store, "t1", &quotas, now).await.unwrap().is_ok());
    }
}
