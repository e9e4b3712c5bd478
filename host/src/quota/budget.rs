//! The budgets a tenant's runs draw on together, and what one run draws
//! on: the memory and CPU shares its instances hold while they run (each
//! store's limiter takes from them, [`crate::instance::RunLimiter`]), the
//! share of the egress proxy's connections its confined programs hold, and
//! the meters that count what each pass uses ([`super::Meters`]).

use std::sync::Arc;
use std::time::Duration;

use nexo_egress::{ConnectionShare, Meter};

use super::quotas::Quotas;

/// What one run draws on besides its own limits: the shares it holds with
/// the tenant's other runs and the meters that count what it uses. `nexo
/// serve` gives each pass of a tenant's run the tenant's shares and meters
/// holding what is left of its quotas; the default draws on nothing and
/// counts nothing.
#[derive(Debug, Clone, Default)]
pub struct RunBudget {
    /// A memory total the run's instance shares with others: `nexo serve`
    /// gives every run of one tenant the same budget. `None`: only the
    /// engine's per-instance cap applies.
    pub memory: Option<Arc<MemoryBudget>>,
    /// A CPU share the run's guest draws on with others: `nexo serve` gives
    /// every run of one tenant the same one. `None`: no share applies.
    pub cpu: Option<Arc<CpuBudget>>,
    /// Where the run's web bytes are counted: the bodies the `fetch` tool
    /// sends and receives, and what its confined programs' connections
    /// through the egress proxy carry. With a limit, fetches past it are refused
    /// ([`nexo_egress::EgressError::QuotaExhausted`]): `nexo serve` gives
    /// each pass of a tenant's run a meter holding the bytes left of the
    /// tenant's hourly quota. `None`: nothing is counted.
    pub egress: Option<Arc<Meter>>,
    /// Where the agent's CPU ticks are counted
    /// ([`crate::instance::Wasi::cpu_meter`]); with a limit, the guest is
    /// stopped past it. `nexo serve` gives each pass of a tenant's run one.
    /// `None`: nothing is counted.
    pub cpu_ticks: Option<Arc<Meter>>,
    /// Where the model tokens of the run's live turns are counted, one
    /// counter for every prompt of the run; with a limit, a prompt ends
    /// with `token-budget` once it is reached (the turn under way may pass
    /// it), and later prompts call no model. `nexo serve` gives each pass
    /// of a tenant's run one. `None`: nothing is counted.
    pub tokens: Option<Arc<Meter>>,
    /// Where what the run's live model turns cost is counted, in
    /// nano-dollars, at its model's price; with a limit (what is left of
    /// the tenant's `usd-per-day`), a turn that may pass it waits for a
    /// decision ([`crate::spend::Spend`]). `nexo serve` gives each pass of a
    /// tenant's run one. `None`: nothing is counted.
    pub cost: Option<Arc<Meter>>,
    /// The connections the run's confined commands and servers may hold
    /// open through the egress proxy, with the tenant's other runs on this
    /// node (`net-connections`). `None`: only each proxy's own cap and the
    /// node's apply.
    pub connections: Option<Arc<ConnectionShare>>,
}

/// Each tenant's shares of this node, held by its runs together.
#[derive(Debug, Default)]
pub struct Budgets(std::sync::Mutex<std::collections::HashMap<String, Shares>>);

/// A tenant's shares of this node: what all its runs here hold together.
#[derive(Debug, Default, Clone)]
pub struct Shares {
    /// Its instances' memory (`memory-mib`); `None`: no such quota.
    pub memory: Option<Arc<MemoryBudget>>,
    /// Its guests' CPU (`cpu-cores`); `None`: no such quota.
    pub cpu: Option<Arc<CpuBudget>>,
    /// Its connections through the egress proxy (`net-connections`, which
    /// has a default).
    pub connections: Option<Arc<ConnectionShare>>,
}

impl Budgets {
    /// The tenant's shares under its current `quotas`; none when its
    /// policy could not be read. A changed memory or CPU quota starts a
    /// new budget (runs of the old one give theirs back to it); a changed
    /// `net-connections` changes the one share's cap.
    pub fn budgets(&self, tenant: &str, quotas: Option<&Quotas>, tick: Duration) -> Shares {
        let Some(quotas) = quotas else { return Shares::default() };
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let entry = map.entry(tenant.to_string()).or_default();
        let memory = quotas.memory_mib.and_then(|m| usize::try_from(m).ok()).map(|m| m.saturating_mul(1 << 20));
        entry.memory = match (memory, entry.memory.take()) {
            (Some(cap), Some(b)) if b.cap() == cap => Some(b),
            (Some(cap), _) => Some(MemoryBudget::new(cap)),
            (None, _) => None,
        };
        entry.cpu = match (quotas.cpu_cores, entry.cpu.take()) {
            (Some(cores), Some(b)) if b.cores() == cores.max(0.01) => Some(b),
            (Some(cores), _) => Some(CpuBudget::new(cores, tick)),
            (None, _) => None,
        };
        // One share for good: a changed quota applies to the connections open under the old one too.
        let connections = usize::try_from(quotas.net_connections_cap()).unwrap_or(usize::MAX);
        match &entry.connections {
            Some(share) => share.set_cap(connections),
            None => entry.connections = Some(ConnectionShare::new(connections)),
        }
        entry.clone()
    }
}

/// A share of the CPU that several stores' guests draw on together (a
/// tenant's runs in `nexo serve`): a token bucket of epoch ticks, refilled
/// at `cores` ticks per tick period. A guest that finds it empty at an
/// epoch tick sleeps until its next tick is earned, so a busy loop gets its
/// share and no more, however many runs it has.
#[derive(Debug)]
pub struct CpuBudget {
    cores: f64,
    burst: f64,
    tick: Duration,
    state: std::sync::Mutex<(f64, std::time::Instant)>,
}

impl CpuBudget {
    /// A budget of `cores` CPU cores (at least 0.01), with `tick` the
    /// engine's epoch period and a burst of one second's worth.
    pub fn new(cores: f64, tick: Duration) -> Arc<CpuBudget> {
        let cores = cores.max(0.01);
        let burst = (cores / tick.as_secs_f64().max(1e-6)).max(1.0);
        Arc::new(CpuBudget { cores, burst, tick, state: std::sync::Mutex::new((burst, std::time::Instant::now())) })
    }

    /// The share, in cores.
    pub fn cores(&self) -> f64 {
        self.cores
    }

    /// Takes one tick of CPU: `None` if it was there, else how long to
    /// sleep until it is earned.
    pub(crate) fn take(&self) -> Option<Duration> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = std::time::Instant::now();
        let per_sec = self.cores / self.tick.as_secs_f64().max(1e-6);
        let (tokens, last) = *state;
        let tokens = (tokens + now.duration_since(last).as_secs_f64() * per_sec).min(self.burst) - 1.0;
        *state = (tokens, now);
        (tokens < 0.0).then(|| Duration::from_secs_f64(-tokens / per_sec))
    }
}

/// Linear memory that several stores draw on together, up to one total:
/// a tenant's instances in `nexo serve`. Wasmtime's own limits are per
/// store; each store's limiter reserves its growth here and gives it back
/// when the store is dropped.
#[derive(Debug)]
pub struct MemoryBudget {
    cap: usize,
    used: std::sync::atomic::AtomicUsize,
}

impl MemoryBudget {
    /// A budget of `cap` bytes, none of it used.
    pub fn new(cap: usize) -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget { cap, used: 0.into() })
    }

    /// The total.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// What the stores hold now.
    pub fn used(&self) -> usize {
        self.used.load(std::sync::atomic::Ordering::Acquire)
    }

    pub(crate) fn reserve(&self, bytes: usize) -> Result<(), usize> {
        use std::sync::atomic::Ordering;
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| u.checked_add(bytes).filter(|n| *n <= self.cap))
            .map(|_| ())
    }

    pub(crate) fn release(&self, bytes: usize) {
        self.used.fetch_sub(bytes, std::sync::atomic::Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_cpu_budget_lends_its_burst_then_makes_guests_wait_for_their_share() {
        let tick = Duration::from_millis(10);
        // Half a core: 50 ticks a second, a burst of one second's worth.
        let budget = CpuBudget::new(0.5, tick);
        for _ in 0..50 {
            assert_eq!(budget.take(), None);
        }
        let wait = budget.take().unwrap();
        assert!(wait > Duration::from_millis(10) && wait <= Duration::from_millis(25), "{wait:?}");
        // Debt adds up: the next tick waits longer.
        assert!(budget.take().unwrap() > wait);
    }

    #[test]
    fn a_tenant_holds_one_connection_share_until_its_quota_changes() {
        let budgets = Budgets::default();
        let tick = Duration::from_millis(10);
        let unset = Quotas::default();
        let first = budgets.budgets("t", Some(&unset), tick).connections.unwrap();
        assert_eq!(first.cap() as u64, super::super::quotas::DEFAULT_NET_CONNECTIONS);
        let again = budgets.budgets("t", Some(&unset), tick).connections.unwrap();
        assert!(Arc::ptr_eq(&first, &again), "the tenant's runs share one");
        let other = budgets.budgets("u", Some(&unset), tick).connections.unwrap();
        assert!(!Arc::ptr_eq(&first, &other), "another tenant has its own");
        let changed = Quotas { net_connections: Some(3), ..Quotas::default() };
        let lowered = budgets.budgets("t", Some(&changed), tick).connections.unwrap();
        assert!(Arc::ptr_eq(&first, &lowered), "a changed quota counts what is open under the old one");
        assert_eq!(first.cap(), 3);
        assert!(budgets.budgets("t", None, tick).connections.is_none());
    }

    #[test]
    fn a_memory_budget_reserves_up_to_its_total_and_takes_back_what_is_released() {
        let budget = MemoryBudget::new(100);
        assert!(budget.reserve(60).is_ok());
        assert_eq!(budget.reserve(50), Err(60), "it says what was in use");
        budget.release(60);
        assert!(budget.reserve(100).is_ok());
        assert_eq!(budget.used(), 100);
    }
}
