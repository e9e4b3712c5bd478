//! Why telemetry could not be set up.

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
    /// `[telemetry.prometheus]` cannot be served as it says.
    #[error("{0}")]
    Scrape(String),
}
