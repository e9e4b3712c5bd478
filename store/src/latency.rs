//! How long the store's writes take, as the `nexo.store.duration`
//! histogram (seconds, by `nexo.store.operation`), through the
//! OpenTelemetry global meter: the host installs a meter provider when the
//! operator asks for metrics, and without one the histogram is the API's
//! no-op. The store depends on the OpenTelemetry API only, never on the
//! host.

use std::sync::OnceLock;
use std::time::Instant;

use opentelemetry::KeyValue;
use opentelemetry::metrics::Histogram;

/// Seconds, from a tenth of a millisecond (a write that shared a commit)
/// to seconds (a disk or a database in trouble).
const BOUNDARIES: [f64; 14] =
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];

/// Made at the first write: after the host installed its provider, which
/// it does before it opens the store for serving.
fn histogram() -> &'static Histogram<f64> {
    static HISTOGRAM: OnceLock<Histogram<f64>> = OnceLock::new();
    HISTOGRAM.get_or_init(|| {
        opentelemetry::global::meter("nexo-store")
            .f64_histogram("nexo.store.duration")
            .with_unit("s")
            .with_description("How long a store write took, commit included")
            .with_boundaries(BOUNDARIES.to_vec())
            .build()
    })
}

/// `work`, timed as one `operation` (`commit`, `transition`, `claim`,
/// `claim_job`, `enqueue`, `create_run`), whether it succeeded or not.
pub(crate) async fn timed<T>(operation: &'static str, work: impl Future<Output = T>) -> T {
    let started = Instant::now();
    let result = work.await;
    histogram().record(started.elapsed().as_secs_f64(), &[KeyValue::new("nexo.store.operation", operation)]);
    result
}
