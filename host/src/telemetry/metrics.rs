//! The GenAI client metrics and nexo's own, exported over OTLP and served
//! for Prometheus.
//!
//! [`Metrics::install`] makes one meter provider with up to two readers: a
//! periodic reader pushing OTLP/HTTP (protobuf) when an endpoint is
//! configured, and the Prometheus exporter when `[telemetry.prometheus]
//! listen` is set ([`super::scrape`] serves it). With neither, nothing is
//! installed: the instruments stay the OpenTelemetry API's no-op, and the
//! recording functions ([`instruments`]) return before building a single
//! attribute.
//!
//! - `instruments`: the instruments, and the one function each place that
//!   measures something calls.
//! - `gauges`: what waits per tenant (queue depth, pending approvals), read
//!   from the store on a timer, not per scrape.

pub(crate) mod gauges;
pub(crate) mod instruments;

use std::net::SocketAddr;
use std::time::Duration;

use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};

use super::error::TelemetryError;
use super::table::TelemetryTable;

/// The metrics this process exports, installed as the global meter
/// provider. Dropping it does not stop them; [`Metrics::shutdown`] flushes
/// the last OTLP export.
#[derive(Debug)]
pub struct Metrics {
    provider: SdkMeterProvider,
}

/// The Prometheus endpoint of the metrics installed in this process, for
/// the front end that serves it (`nexo serve`), whoever installed them.
static SCRAPE: std::sync::OnceLock<Scrape> = std::sync::OnceLock::new();

/// What `/metrics` should serve in this process, if the operator asked for
/// it and metrics are installed.
pub fn scrape() -> Option<Scrape> {
    SCRAPE.get().cloned()
}

/// What `/metrics` serves, and where and to whom ([`super::scrape`]).
#[derive(Debug, Clone)]
pub struct Scrape {
    /// The registry the Prometheus exporter fills at each scrape.
    pub registry: prometheus::Registry,
    /// The operator's address for it, never the tenants' API's.
    pub listen: SocketAddr,
    /// The bearer token a scraper must send, if the operator set one.
    pub token: Option<String>,
}

impl Metrics {
    /// The meter provider `table` and the `OTEL_*` variables ask for, set
    /// as the global one; `None` when they ask for none. An OTLP endpoint
    /// comes from `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` (as is),
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` or `[telemetry] endpoint` (each with
    /// `/v1/metrics`), in that order; `OTEL_METRICS_EXPORTER=none` turns it
    /// off, and `OTEL_METRIC_EXPORT_INTERVAL` (ms) paces it (60 s).
    pub fn install(table: &TelemetryTable, resource: Resource) -> Result<Option<Metrics>, TelemetryError> {
        let otlp = otlp_wanted(table);
        let scrape_table = table.prometheus.as_ref().filter(|p| p.listen.is_some());
        if !otlp && scrape_table.is_none() {
            return Ok(None);
        }
        let mut builder = SdkMeterProvider::builder().with_resource(resource);
        if otlp {
            let mut exporter = opentelemetry_otlp::MetricExporter::builder()
                .with_http()
                .with_http_client(super::http::ExportClient::new()?);
            if !env_set("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
                && !env_set("OTEL_EXPORTER_OTLP_ENDPOINT")
                && let Some(base) = &table.endpoint
            {
                exporter = exporter.with_endpoint(format!("{}/v1/metrics", base.trim_end_matches('/')));
            }
            let exporter =
                exporter.build().map_err(|e| TelemetryError::Exporter { signal: "metrics", problem: e.to_string() })?;
            builder = builder.with_reader(PeriodicReader::builder(exporter).build());
        }
        let scrape = match scrape_table {
            Some(p) => {
                let registry = prometheus::Registry::new();
                let exporter = opentelemetry_prometheus::exporter()
                    .with_registry(registry.clone())
                    .build()
                    .map_err(|e| TelemetryError::Scrape(format!("cannot set up the Prometheus exporter: {e}")))?;
                builder = builder.with_reader(exporter);
                Some(Scrape { registry, listen: listen(p.listen.as_deref())?, token: token(p.token_env.as_deref())? })
            }
            None => None,
        };
        let provider = builder.build();
        opentelemetry::global::set_meter_provider(provider.clone());
        if let Some(scrape) = &scrape {
            let _ = SCRAPE.set(scrape.clone());
        }
        instruments::enable();
        Ok(Some(Metrics { provider }))
    }

    /// Whether a meter provider is installed in this process.
    pub fn installed() -> bool {
        instruments::enabled().is_some()
    }

    /// Exports what is left and stops the readers, waiting at most a few
    /// seconds for a slow receiver.
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown_with_timeout(Duration::from_secs(5)) {
            tracing::warn!(target: "nexo::telemetry", "metrics did not flush at shutdown: {e}");
        }
    }
}

/// Whether an OTLP metric exporter is asked for.
fn otlp_wanted(table: &TelemetryTable) -> bool {
    if std::env::var("OTEL_METRICS_EXPORTER").is_ok_and(|v| v.trim() == "none") {
        return false;
    }
    env_set("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
        || env_set("OTEL_EXPORTER_OTLP_ENDPOINT")
        || table.endpoint.as_deref().is_some_and(|e| !e.trim().is_empty())
}

fn env_set(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.trim().is_empty())
}

/// `[telemetry.prometheus] listen`, as an address.
fn listen(listen: Option<&str>) -> Result<SocketAddr, TelemetryError> {
    let listen = listen.unwrap_or_default();
    listen.parse().map_err(|e| {
        TelemetryError::Scrape(format!(
            "[telemetry.prometheus] listen {listen:?} is not an address such as 127.0.0.1:9464: {e}"
        ))
    })
}

/// The token in the variable `[telemetry.prometheus] token-env` names: a
/// name given for a variable that is unset or empty is an error, never an
/// endpoint left open.
fn token(variable: Option<&str>) -> Result<Option<String>, TelemetryError> {
    let Some(variable) = variable else { return Ok(None) };
    match std::env::var(variable) {
        Ok(token) if !token.trim().is_empty() => Ok(Some(token.trim().to_string())),
        _ => Err(TelemetryError::Scrape(format!(
            "[telemetry.prometheus] token-env names {variable}, which is not set: set it to the token Prometheus \
             sends, or remove token-env"
        ))),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::config::PrometheusTable;

    #[tokio::test]
    async fn nothing_configured_installs_nothing() {
        if ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"].iter().any(|v| env_set(v)) {
            return;
        }
        let table = TelemetryTable { prometheus: Some(PrometheusTable::default()), ..TelemetryTable::default() };
        assert!(Metrics::install(&table, Resource::builder_empty().build()).unwrap().is_none());
        assert!(instruments::enabled().is_none(), "the instruments stay off");
    }

    #[test]
    fn a_token_variable_that_is_not_set_is_refused_not_left_open() {
        let e = token(Some("NEXO_TEST_METRICS_TOKEN_NEVER_SET")).unwrap_err().to_string();
        assert!(e.contains("NEXO_TEST_METRICS_TOKEN_NEVER_SET, which is not set"), "{e}");
        assert_eq!(token(None).unwrap(), None);
    }

    #[test]
    fn a_listen_address_must_be_an_address() {
        let e = listen(Some("localhost:metrics")).unwrap_err().to_string();
        assert!(e.contains("[telemetry.prometheus] listen \"localhost:metrics\""), "{e}");
        assert_eq!(listen(Some("127.0.0.1:0")).unwrap().ip().to_string(), "127.0.0.1");
    }
}
