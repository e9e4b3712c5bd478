//! `[telemetry]`: where traces and metrics go. Nothing leaves the process
//! unless this table or the standard `OTEL_*` variables name a receiver.

use serde::Deserialize;

/// The `[telemetry]` table. Each key has a standard `OTEL_*` variable, which
/// wins over it (as flags win over the file), so an operator's existing
/// OpenTelemetry set-up works unchanged.
#[derive(Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct TelemetryTable {
    /// The OTLP receiver's base URL, such as `http://127.0.0.1:4318`
    /// (`OTEL_EXPORTER_OTLP_ENDPOINT` wins). Unset: nothing is exported.
    pub endpoint: Option<String>,
    /// The service name in every exported resource (`OTEL_SERVICE_NAME`
    /// wins; default `nexo`).
    pub service_name: Option<String>,
    /// Export message and tool contents (prompts, answers, tool arguments
    /// and results) on spans. Off by default: only names, ids, counts and
    /// verdicts leave the process.
    #[serde(default)]
    pub capture_content: bool,
    /// The `[telemetry.prometheus]` table: serve metrics for scraping.
    pub prometheus: Option<PrometheusTable>,
}

/// `[telemetry.prometheus]`: a `/metrics` endpoint for Prometheus, on its
/// own address so that the tenants' API never serves it.
#[derive(Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PrometheusTable {
    /// The address `/metrics` listens on, such as `127.0.0.1:9464`.
    pub listen: Option<String>,
    /// The environment variable holding the bearer token a scraper must
    /// send; unset, the endpoint needs none (bind it to a private address).
    pub token_env: Option<String>,
}
