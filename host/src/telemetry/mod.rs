//! What leaves the process for the operator's monitoring: traces and
//! metrics over OTLP/HTTP (protobuf), and metrics for Prometheus to scrape.
//!
//! Off unless the operator names a receiver (`[telemetry]` in the config
//! file, or the standard `OTEL_*` variables): with none configured no
//! exporter, provider or layer is installed, so a run pays nothing.
//! Spans follow the OpenTelemetry semantic conventions for generative AI
//! ([`traces`]); message and tool contents are exported only when the
//! operator opts in, and secrets never (they never reach a span's fields).

mod http;
pub mod metrics;
pub mod traces;

pub use crate::config::TelemetryTable;

/// Why telemetry could not be set up. Each names the setting to fix.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// Set up outside a tokio runtime.
    #[error("telemetry must be installed inside the async runtime")]
    NoRuntime,
    /// The exporters' HTTP client could not be built.
    #[error("cannot build the telemetry HTTP client: {0}")]
    Client(String),
    /// An exporter could not be built from the configuration.
    #[error("cannot set up the {signal} exporter: {problem} (check [telemetry] endpoint and OTEL_EXPORTER_OTLP_*)")]
    Exporter {
        /// `traces` or `metrics`.
        signal: &'static str,
        /// The exporter's error.
        problem: String,
    },
}
