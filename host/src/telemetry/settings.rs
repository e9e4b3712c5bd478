//! What the operator asked for: the `[telemetry]` table under the standard
//! `OTEL_*` variables, and the resource every signal shares.

use opentelemetry_sdk::Resource;

use super::table::TelemetryTable;

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
