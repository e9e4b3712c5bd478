//! What leaves the process for the operator's monitoring: traces and
//! metrics over OTLP/HTTP (protobuf), and metrics for Prometheus to scrape.
//!
//! Off unless the operator names a receiver (`[telemetry]` in the config
//! file, or the standard `OTEL_*` variables): with none configured no
//! exporter, provider or layer is installed, so a run pays nothing.
//! Spans follow the OpenTelemetry semantic conventions for generative AI
//! ([`spans`]), W3C trace context comes in and goes on ([`context`]); message and tool contents are exported only when the
//! operator opts in, and secrets never (they never reach a span's fields).
//!
//! A front end installs telemetry once, after it has read its config file
//! ([`Telemetry::install`]), and shuts it down on its way out
//! ([`Telemetry::shutdown`]), which sends what is still buffered. Spans
//! are OpenTelemetry spans recorded by nexo, not the logging subscriber's
//! ([`traces`]).

pub mod context;
mod error;
mod exporter;
mod http;
pub mod metrics;
mod names;
mod pause;
mod recorder;
pub mod scrape;
mod settings;
pub mod spans;
mod table;
pub mod traces;

// The `[telemetry]` table lives here, beneath `config`, which reads it:
// the runs' layers record metrics, and `config` sits above them.
pub use error::TelemetryError;
pub use pause::set_paused;
pub use settings::Settings;
pub use table::{PrometheusTable, TelemetryTable};

/// Telemetry as installed in this process: shut it down to send what is
/// still buffered.
#[derive(Debug, Default)]
#[must_use = "shut telemetry down on the way out, or buffered spans are lost"]
pub struct Telemetry {
    tracer: Option<traces::Exporting>,
    metrics: Option<metrics::Metrics>,
}

impl Telemetry {
    /// Installs what `table` and the `OTEL_*` variables ask for, once per
    /// process (a second call installs nothing). Nothing configured:
    /// nothing installed. Call inside the tokio runtime, which carries the
    /// exports.
    pub fn install(table: &TelemetryTable) -> Result<Telemetry, TelemetryError> {
        let settings = Settings::resolve(table);
        // One resource for every signal.
        let resource = settings.resource();
        let tracer = match settings.traces {
            true => traces::install(&settings, resource.clone(), http::ExportClient::new()?)?,
            false => None,
        };
        let metrics = match settings.disabled || metrics::Metrics::installed() {
            true => None,
            false => metrics::Metrics::install(table, resource)?,
        };
        Ok(Telemetry { tracer, metrics })
    }

    /// Whether anything is exported.
    pub fn is_on(&self) -> bool {
        self.tracer.is_some() || self.metrics.is_some()
    }

    /// Sends what is buffered and stops the exporters, off the async
    /// threads (a flush blocks until the receiver answers or times out).
    pub async fn shutdown(self) {
        if let Some(metrics) = self.metrics {
            let _ = tokio::task::spawn_blocking(move || metrics.shutdown()).await;
        }
        let Some(tracer) = self.tracer else { return };
        let flushed = tokio::task::spawn_blocking(move || tracer.shutdown()).await;
        if let Ok(Err(e)) = flushed {
            tracing::warn!("telemetry: the last spans may be lost: {e}");
        }
    }
}
