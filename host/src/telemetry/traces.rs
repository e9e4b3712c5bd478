//! The exporting machinery: a tracer provider with a batch processor and
//! the OTLP/HTTP protobuf exporter, and the tracer nexo's spans
//! ([`super::spans`]) start on.
//!
//! nexo's spans are OpenTelemetry spans, started on this tracer and carried
//! in OpenTelemetry contexts, not `tracing` spans: no log line, a plugin's or
//! the host's, can become one, and a span costs what the SDK costs (the
//! tracing-opentelemetry bridge cost several times that per span, measured
//! in `host/benches/agent_loop.rs`). Until telemetry is installed every span
//! constructor returns at one check.
//!
//! Every span of a pass carries the run's tenant, id and component digest:
//! the pass puts [`RunLabels`] in its OpenTelemetry context, and each span
//! started under it copies them (a span processor would cost each span a
//! copy of its whole record).

use std::sync::{Arc, OnceLock};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{KeyValue, StringValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

use super::error::TelemetryError;
use super::names::{NEXO_COMPONENT_DIGEST, NEXO_RUN_ID, NEXO_TENANT};
use super::settings::Settings;

/// What is installed: the tracer and the content switch.
struct Installed {
    tracer: SdkTracer,
    capture_content: bool,
}

static INSTALLED: OnceLock<Installed> = OnceLock::new();

/// Whether spans are exported.
pub fn enabled() -> bool {
    INSTALLED.get().is_some()
}

/// Whether the operator opted in to message and tool contents on spans.
pub fn capture_content() -> bool {
    INSTALLED.get().is_some_and(|i| i.capture_content)
}

/// The installed tracer, when spans are exported.
pub(super) fn tracer() -> Option<&'static SdkTracer> {
    INSTALLED.get().map(|i| &i.tracer)
}

/// The variable naming the operator's sampler, which the SDK reads itself.
const SAMPLER: &str = "OTEL_TRACES_SAMPLER";

/// The sampler when the operator names none: every span, and a remote
/// parent's "not sampled" flag does not change that. The parent is a
/// caller's `traceparent`, a tenant's text: it may join a run to its
/// trace, but not hide the run from the operator's monitoring.
fn sampler() -> opentelemetry_sdk::trace::ParentBasedSampler {
    use opentelemetry_sdk::trace::Sampler;
    Sampler::parent_based(Sampler::AlwaysOn).with_remote_parent_not_sampled(Sampler::AlwaysOn)
}

/// Installs the tracer provider (a batch processor and the OTLP/HTTP
/// protobuf exporter). `None` when a provider is
/// installed already: the first one stays.
pub(super) fn install(
    settings: &Settings,
    resource: Resource,
    client: super::http::ExportClient,
) -> Result<Option<SdkTracerProvider>, TelemetryError> {
    use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
    if enabled() {
        return Ok(None);
    }
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary);
    if let Some(url) = &settings.traces_url {
        exporter = exporter.with_endpoint(url.clone());
    }
    let exporter =
        exporter.build().map_err(|e| TelemetryError::Exporter { signal: "traces", problem: e.to_string() })?;
    let mut provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource);
    if std::env::var_os(SAMPLER).is_none() {
        provider = provider.with_sampler(sampler());
    }
    let provider = provider.build();
    let scope = opentelemetry::InstrumentationScope::builder("nexo")
        .with_version(env!("CARGO_PKG_VERSION"))
        .with_schema_url(opentelemetry_semantic_conventions::SCHEMA_URL)
        .build();
    let tracer = provider.tracer_with_scope(scope);
    let installed = Installed { tracer, capture_content: settings.capture_content };
    if INSTALLED.set(installed).is_err() {
        return Ok(None);
    }
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    Ok(Some(provider))
}

/// The run a pass works on, as every span of the pass carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunLabels {
    /// The tenant, for a run of `nexo serve`.
    tenant: Option<StringValue>,
    /// The run's id.
    run: StringValue,
    /// The component's (or agent file's) SHA-256.
    digest: StringValue,
}

impl RunLabels {
    /// The labels of `run` of `tenant`, whose component's digest is `digest`.
    pub fn new(tenant: Option<&str>, run: &str, digest: &str) -> RunLabels {
        // Shared, not copied, onto each span of the pass.
        let shared = |s: &str| StringValue::from(Arc::<str>::from(s));
        RunLabels { tenant: tenant.map(shared), run: shared(run), digest: shared(digest) }
    }

    /// The labels as attributes, for each span started under them.
    pub(super) fn attributes(&self) -> impl Iterator<Item = KeyValue> + '_ {
        let tenant = self.tenant.as_ref().map(|t| KeyValue::new(NEXO_TENANT, t.clone()));
        tenant.into_iter().chain([
            KeyValue::new(NEXO_RUN_ID, self.run.clone()),
            KeyValue::new(NEXO_COMPONENT_DIGEST, self.digest.clone()),
        ])
    }
}
