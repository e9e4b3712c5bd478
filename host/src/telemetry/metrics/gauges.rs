//! What waits per tenant, as observable gauges: `nexo.queue.depth` (jobs
//! queued, due or not, not yet claimed by any node) and
//! `nexo.approvals.pending` (runs suspended on an approval no one has
//! decided). Both are the store's, shared by every node, so they are read
//! from it: by one task, every [`REFRESH`], with two grouped counts
//! ([`nexo_store::Tenants::waiting`]) and the list of tenants; a scrape or
//! an export reads the last counts and never queries the store. Every
//! tenant has a series, 0 when nothing of its waits.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::ObservableGauge;

/// How often the counts are read from the store.
pub const REFRESH: Duration = Duration::from_secs(2);

/// The last counts, by tenant id (`""` for runs of no tenant).
type Counts = Arc<Mutex<BTreeMap<String, (u64, u64)>>>;

/// Registers the gauges (once per process) and keeps their counts fresh
/// from `store` until `stop` completes. Returns at once when no metrics are
/// installed.
pub async fn keep(store: Arc<dyn nexo_store::Store>, stop: impl std::future::Future<Output = ()>) {
    let Some(counts) = registered() else { return };
    tokio::pin!(stop);
    loop {
        match tokio::try_join!(store.waiting(), store.tenants()) {
            Ok((waiting, tenants)) => {
                let mut counts = counts.lock().unwrap_or_else(|p| p.into_inner());
                for seen in counts.values_mut() {
                    *seen = (0, 0);
                }
                for tenant in tenants {
                    counts.entry(tenant.id).or_default();
                }
                for w in waiting {
                    counts.insert(w.tenant, (w.queued_jobs, w.pending_approvals));
                }
            }
            Err(e) => tracing::warn!(target: "nexo::telemetry", "cannot read the queue depth for metrics: {e}"),
        }
        tokio::select! {
            _ = tokio::time::sleep(REFRESH) => {}
            _ = &mut stop => return,
        }
    }
}

/// The counts the gauges read, their callbacks registered on first call;
/// `None` without metrics.
fn registered() -> Option<Counts> {
    static GAUGES: OnceLock<(Counts, [ObservableGauge<u64>; 2])> = OnceLock::new();
    super::instruments::enabled()?;
    let (counts, _) = GAUGES.get_or_init(|| {
        let counts: Counts = Default::default();
        let meter = opentelemetry::global::meter("nexo");
        let gauge =
            |name: &'static str, unit: &'static str, description: &'static str, pick: fn(&(u64, u64)) -> u64| {
                let counts = counts.clone();
                meter
                    .u64_observable_gauge(name)
                    .with_unit(unit)
                    .with_description(description)
                    .with_callback(move |observer| {
                        for (tenant, values) in counts.lock().unwrap_or_else(|p| p.into_inner()).iter() {
                            observer.observe(pick(values), &[KeyValue::new("nexo.tenant", tenant.clone())]);
                        }
                    })
                    .build()
            };
        let gauges = [
            gauge("nexo.queue.depth", "{job}", "Jobs queued and not yet claimed, per tenant", |c| c.0),
            gauge("nexo.approvals.pending", "{run}", "Runs waiting on an undecided approval, per tenant", |c| c.1),
        ];
        (counts.clone(), gauges)
    });
    Some(counts.clone())
}
