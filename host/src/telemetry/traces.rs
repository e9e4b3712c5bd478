//! The exporting machinery: nexo's span recorder ([`super::recorder`]),
//! the thread that exports what it records ([`super::exporter`]) through
//! the OTLP/HTTP protobuf exporter, and [`start`], which every span of
//! nexo's ([`super::spans`]) begins with.
//!
//! nexo's spans are OpenTelemetry spans carried in OpenTelemetry contexts,
//! not `tracing` spans: no log line, a plugin's or the host's, can become
//! one. They are recorded by nexo rather than the SDK's tracer, which cost
//! several times as much per span (measured in `host/benches/agent_loop.rs`);
//! the SDK still samples them (`OTEL_TRACES_SAMPLER`), makes their ids, and
//! exports them. Until telemetry is installed every span constructor
//! returns at one check.
//!
//! Every span of a pass carries the run's tenant, id and component digest:
//! the pass puts [`RunLabels`] in its OpenTelemetry context, and each span
//! started under it copies them.

use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use opentelemetry::Context;
use opentelemetry::trace::{SpanContext, SpanKind, TraceContextExt as _, TraceFlags};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    IdGenerator as _, RandomIdGenerator, SamplingDecision, ShouldSample, SpanExporter as _,
};

use super::error::TelemetryError;
use super::exporter::Batching;
pub use super::exporter::Exporting;
use super::names::{NEXO_COMPONENT_DIGEST, NEXO_RUN_ID, NEXO_TENANT};
use super::recorder::{Fields, Live, Queue};
use super::settings::Settings;

/// What is installed: how spans are sampled and named, and the content
/// switch.
struct Installed {
    queue: &'static Queue,
    sampler: Box<dyn ShouldSample>,
    ids: RandomIdGenerator,
    capture_content: bool,
}

static INSTALLED: OnceLock<Installed> = OnceLock::new();

/// Whether spans are recorded (installed, and not paused).
pub fn enabled() -> bool {
    INSTALLED.get().is_some() && !super::pause::paused()
}

/// Whether the operator opted in to message and tool contents on spans.
pub fn capture_content() -> bool {
    INSTALLED.get().is_some_and(|i| i.capture_content)
}

/// The variable naming the operator's sampler, which the SDK reads itself.
const SAMPLER: &str = "OTEL_TRACES_SAMPLER";

/// The sampler: the operator's (`OTEL_TRACES_SAMPLER`, read by the SDK),
/// or else every span, and a remote parent's "not sampled" flag does not
/// change that. The parent is a caller's `traceparent`, a tenant's text:
/// it may join a run to its trace, but not hide the run from the
/// operator's monitoring.
fn sampler() -> Box<dyn ShouldSample> {
    use opentelemetry_sdk::trace::Sampler;
    if std::env::var_os(SAMPLER).is_some() {
        return opentelemetry_sdk::trace::Config::default().sampler;
    }
    Box::new(Sampler::parent_based(Sampler::AlwaysOn).with_remote_parent_not_sampled(Sampler::AlwaysOn))
}

/// Installs the recorder and its exporting thread (the OTLP/HTTP protobuf
/// exporter, batched as the `OTEL_BSP_*` variables say). `None` when they
/// are installed already: the first stay.
pub(super) fn install(
    settings: &Settings,
    resource: Resource,
    client: super::http::ExportClient,
) -> Result<Option<Exporting>, TelemetryError> {
    use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
    if INSTALLED.get().is_some() {
        return Ok(None);
    }
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary);
    if let Some(url) = &settings.traces_url {
        exporter = exporter.with_endpoint(url.clone());
    }
    let mut exporter =
        exporter.build().map_err(|e| TelemetryError::Exporter { signal: "traces", problem: e.to_string() })?;
    exporter.set_resource(&resource);
    let batching = Batching::from_env();
    // Installed once per process, as the spans that go to it.
    let queue: &'static Queue = Box::leak(Box::new(Queue::new(batching.max_queue, batching.max_batch)));
    let scope = opentelemetry::InstrumentationScope::builder("nexo")
        .with_version(env!("CARGO_PKG_VERSION"))
        .with_schema_url(opentelemetry_semantic_conventions::SCHEMA_URL)
        .build();
    let installed = Installed {
        queue,
        sampler: sampler(),
        ids: RandomIdGenerator::default(),
        capture_content: settings.capture_content,
    };
    if INSTALLED.set(installed).is_err() {
        return Ok(None);
    }
    // Started once installed, so a second install starts no thread.
    let exporting = Exporting::start(queue, exporter, scope, batching)
        .map_err(|e| TelemetryError::Exporter { signal: "traces", problem: e.to_string() })?;
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    Ok(Some(exporting))
}

/// Starts a span under `parent`, named and described by what `describe`
/// writes (its name first), from `start` (now when `None`), linked to
/// `links`; the run's labels in `parent` are added. The context returned
/// has it as its active span. `None` when tracing is off.
pub(super) fn start(
    kind: SpanKind,
    parent: &Context,
    start: Option<SystemTime>,
    links: Vec<SpanContext>,
    describe: impl FnOnce(&mut Fields),
) -> Option<Context> {
    let installed = INSTALLED.get().filter(|_| !super::pause::paused())?;
    let start = start.unwrap_or_else(SystemTime::now);
    let mut fields = Fields::new();
    describe(&mut fields);
    let parent_span = parent.span();
    let parent_span = parent_span.span_context();
    let (trace_id, parent_id) = match parent_span.is_valid() {
        true => (parent_span.trace_id(), Some((parent_span.span_id(), parent_span.is_remote()))),
        false => (installed.ids.new_trace_id(), None),
    };
    let sampled = installed.sampler.should_sample(Some(parent), trace_id, fields.name_str(), &kind, &[], &[]);
    let flags = match sampled.decision {
        SamplingDecision::RecordAndSample => TraceFlags::SAMPLED,
        SamplingDecision::Drop | SamplingDecision::RecordOnly => TraceFlags::default(),
    };
    for attribute in sampled.attributes {
        fields.set(attribute);
    }
    if let Some(labels) = parent.get::<RunLabels>() {
        labels.record(&mut fields);
    }
    let context = SpanContext::new(trace_id, installed.ids.new_span_id(), flags, false, sampled.trace_state);
    Some(parent.with_span(Live::new(installed.queue, context, parent_id, kind, start, fields, links)))
}

/// The run a pass works on, as every span of the pass carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunLabels {
    /// The tenant, for a run of `nexo serve`.
    tenant: Option<Arc<str>>,
    /// The run's id.
    run: Arc<str>,
    /// The component's (or agent file's) SHA-256.
    digest: Arc<str>,
}

impl RunLabels {
    /// The labels of `run` of `tenant`, whose component's digest is `digest`.
    pub fn new(tenant: Option<&str>, run: &str, digest: &str) -> RunLabels {
        RunLabels { tenant: tenant.map(Arc::from), run: Arc::from(run), digest: Arc::from(digest) }
    }

    /// Writes the labels as attributes of a span started under them.
    pub(super) fn record(&self, fields: &mut Fields) {
        if let Some(tenant) = &self.tenant {
            fields.text(NEXO_TENANT, tenant);
        }
        fields.text(NEXO_RUN_ID, &self.run);
        fields.text(NEXO_COMPONENT_DIGEST, &self.digest);
    }
}
