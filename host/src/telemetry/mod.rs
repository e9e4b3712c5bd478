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
//! ([`Telemetry::shutdown`]), which sends what is still buffered. The
//! logging subscriber it set up before carries [`traces::layer`], the slot
//! the exporting layer is put into.

pub mod context;
mod http;
pub mod metrics;
pub mod scrape;
pub mod spans;
mod table;
pub mod traces;

use opentelemetry_sdk::Resource;

// The `[telemetry]` table lives here, beneath `config`, which reads it:
// the runs' layers record metrics, and `config` sits above them.
pub use table::{PrometheusTable, TelemetryTable};

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

/// The standard variables read here; the exporter reads the rest
/// (`OTEL_EXPORTER_OTLP_HEADERS`, `…_TIMEOUT`) and the SDK the sampler's
/// (`OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`).
const SDK_DISABLED: &str = "OTEL_SDK_DISABLED";
const ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
const TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
const SERVICE_NAME: &str = "OTEL_SERVICE_NAME";

/// What the operator asked for, the `OTEL_*` variables over the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `OTEL_SDK_DISABLED=true`: nothing is exported, metrics neither.
    pub disabled: bool,
    /// The traces receiver's URL, when the table names one and no variable
    /// does (a variable's the exporter reads itself); `None` with
    /// [`Settings::traces`] set means the variables name it.
    pub traces_url: Option<String>,
    /// Whether spans are exported at all.
    pub traces: bool,
    /// The resource's `service.name`.
    pub service_name: String,
    /// Export message and tool contents on spans.
    pub capture_content: bool,
}

impl Settings {
    /// The settings from `table` and the environment: a variable wins over
    /// the table, and `OTEL_SDK_DISABLED=true` turns everything off.
    pub fn resolve(table: &TelemetryTable) -> Settings {
        Settings::from(table, |name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()))
    }

    fn from(table: &TelemetryTable, var: impl Fn(&str) -> Option<String>) -> Settings {
        let disabled = var(SDK_DISABLED).is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        let from_env = var(TRACES_ENDPOINT).is_some() || var(ENDPOINT).is_some();
        let table_url = table.endpoint.as_deref().map(str::trim).filter(|e| !e.is_empty());
        let traces_url = if from_env { None } else { table_url.map(|base| signal_url(base, "v1/traces")) };
        Settings {
            disabled,
            traces: !disabled && (from_env || traces_url.is_some()),
            traces_url,
            service_name: var(SERVICE_NAME).or_else(|| table.service_name.clone()).unwrap_or_else(|| "nexo".into()),
            capture_content: table.capture_content,
        }
    }

    /// The resource every signal shares: the service's name and version,
    /// and `OTEL_RESOURCE_ATTRIBUTES`.
    pub fn resource(&self) -> Resource {
        Resource::builder()
            .with_service_name(self.service_name.clone())
            .with_attribute(opentelemetry::KeyValue::new(
                opentelemetry_semantic_conventions::resource::SERVICE_VERSION,
                env!("CARGO_PKG_VERSION"),
            ))
            .build()
    }
}

/// A base URL with a signal's path appended, as OTLP/HTTP defines it.
fn signal_url(base: &str, path: &str) -> String {
    format!("{}/{path}", base.trim_end_matches('/'))
}

/// Telemetry as installed in this process: shut it down to send what is
/// still buffered.
#[derive(Debug, Default)]
#[must_use = "shut telemetry down on the way out, or buffered spans are lost"]
pub struct Telemetry {
    tracer: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn settings(table: &TelemetryTable, vars: &[(&str, &str)]) -> Settings {
        Settings::from(table, |name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string()))
    }

    #[test]
    fn nothing_configured_exports_nothing() {
        let s = settings(&TelemetryTable::default(), &[]);
        assert!(!s.traces);
        assert_eq!(s.service_name, "nexo");
    }

    #[test]
    fn the_variables_win_over_the_table() {
        let table = TelemetryTable {
            endpoint: Some("http://table:4318/".into()),
            service_name: Some("from-table".into()),
            ..Default::default()
        };
        let s = settings(&table, &[]);
        assert_eq!((s.traces, s.traces_url.as_deref()), (true, Some("http://table:4318/v1/traces")));
        assert_eq!(s.service_name, "from-table");
        let s = settings(&table, &[(ENDPOINT, "http://env:4318"), (SERVICE_NAME, "from-env")]);
        assert_eq!((s.traces, s.traces_url), (true, None), "the exporter reads the variable itself");
        assert_eq!(s.service_name, "from-env");
        let s = settings(&TelemetryTable::default(), &[(TRACES_ENDPOINT, "http://env:4318/v1/traces")]);
        assert!(s.traces);
        let s = settings(&table, &[(SDK_DISABLED, "TRUE")]);
        assert!(!s.traces);
    }
}
