//! The exporting machinery: a tracer provider with a batch processor and
//! the OTLP/HTTP protobuf exporter, and the slot on the logging subscriber
//! that feeds it.
//!
//! nexo's spans ([`super::spans`]) are `tracing` spans of one target,
//! [`TARGET`]; the exporting layer (tracing-opentelemetry) sees only that
//! target, through a per-layer filter, so no log line, a plugin's or the
//! host's, is ever exported. Until telemetry is installed the filter enables
//! nothing, so each span macro is a disabled callsite: tracing off costs a
//! run nothing.
//!
//! Every span of a pass carries the run's tenant, id and component digest:
//! the pass puts [`RunLabels`] in its OpenTelemetry context, and a span
//! processor copies them onto each span started under it.

use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, SpanData, SpanProcessor};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata};
use tracing_opentelemetry::OpenTelemetryLayer;
use tracing_subscriber::Registry;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context as LayerContext, Filter, Layer};

use super::error::TelemetryError;
use super::names::{NEXO_COMPONENT_DIGEST, NEXO_RUN_ID, NEXO_TENANT};
use super::settings::Settings;

/// The target of nexo's exported spans; nothing else is exported.
pub const TARGET: &str = "nexo::telemetry";

/// What is installed: the exporting layer and the content switch.
struct Installed {
    layer: OpenTelemetryLayer<Registry, SdkTracer>,
    tracer: SdkTracer,
    capture_content: bool,
}

static INSTALLED: OnceLock<Installed> = OnceLock::new();

/// The layer a front end's subscriber carries, first on the registry: the
/// slot installing telemetry fills ([`super::Telemetry::install`]). Empty, it enables nothing.
pub fn layer() -> impl Layer<Registry> + Send + Sync + 'static {
    Slot.with_filter(Exported)
}

/// Whether spans are exported.
pub fn enabled() -> bool {
    INSTALLED.get().is_some()
}

/// Whether the operator opted in to message and tool contents on spans.
pub fn capture_content() -> bool {
    INSTALLED.get().is_some_and(|i| i.capture_content)
}

/// The installed tracer, for a span written at once with its own times
/// (the approval wait).
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
/// protobuf exporter) and fills the slot. `None` when a provider is
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
    let mut provider = SdkTracerProvider::builder()
        .with_span_processor(Labeller)
        .with_batch_exporter(exporter)
        .with_resource(resource);
    if std::env::var_os(SAMPLER).is_none() {
        provider = provider.with_sampler(sampler());
    }
    let provider = provider.build();
    let scope = opentelemetry::InstrumentationScope::builder("nexo")
        .with_version(env!("CARGO_PKG_VERSION"))
        .with_schema_url(opentelemetry_semantic_conventions::SCHEMA_URL)
        .build();
    let tracer = provider.tracer_with_scope(scope);
    let layer = tracing_opentelemetry::layer::<Registry>()
        .with_tracer(tracer.clone())
        .with_location(false)
        .with_threads(false)
        .with_level(false)
        .with_target(false)
        .with_tracked_inactivity(false);
    let installed = Installed { layer, tracer, capture_content: settings.capture_content };
    if INSTALLED.set(installed).is_err() {
        return Ok(None);
    }
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    // The span callsites were registered as disabled: ask again.
    tracing::callsite::rebuild_interest_cache();
    Ok(Some(provider))
}

/// The slot: the exporting layer once installed, nothing before.
struct Slot;

impl Slot {
    fn inner() -> Option<&'static OpenTelemetryLayer<Registry, SdkTracer>> {
        INSTALLED.get().map(|i| &i.layer)
    }
}

impl Layer<Registry> for Slot {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: LayerContext<'_, Registry>) {
        if let Some(layer) = Slot::inner() {
            layer.on_new_span(attrs, id, ctx);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: LayerContext<'_, Registry>) {
        if let Some(layer) = Slot::inner() {
            layer.on_record(id, values, ctx);
        }
    }

    fn on_follows_from(&self, id: &Id, follows: &Id, ctx: LayerContext<'_, Registry>) {
        if let Some(layer) = Slot::inner() {
            layer.on_follows_from(id, follows, ctx);
        }
    }

    fn on_event(&self, _event: &Event<'_>, _ctx: LayerContext<'_, Registry>) {
        // Events are log lines, which are never exported.
    }

    fn on_enter(&self, id: &Id, ctx: LayerContext<'_, Registry>) {
        if let Some(layer) = Slot::inner() {
            layer.on_enter(id, ctx);
        }
    }

    fn on_exit(&self, id: &Id, ctx: LayerContext<'_, Registry>) {
        if let Some(layer) = Slot::inner() {
            layer.on_exit(id, ctx);
        }
    }

    fn on_close(&self, id: Id, ctx: LayerContext<'_, Registry>) {
        if let Some(layer) = Slot::inner() {
            layer.on_close(id, ctx);
        }
    }

    fn on_id_change(&self, old: &Id, new: &Id, ctx: LayerContext<'_, Registry>) {
        if let Some(layer) = Slot::inner() {
            layer.on_id_change(old, new, ctx);
        }
    }

    // SAFETY: the installed layer lives in a static and is never replaced,
    // so a pointer into it stays valid; tracing-opentelemetry finds its
    // `WithContext` this way (a span's context, its parent, its links).
    #[allow(unsafe_code)]
    unsafe fn downcast_raw(&self, id: std::any::TypeId) -> Option<*const ()> {
        if id == std::any::TypeId::of::<Self>() {
            return Some(self as *const Self as *const ());
        }
        // SAFETY: forwarded to a layer with a 'static lifetime.
        Slot::inner().and_then(|layer| unsafe { layer.downcast_raw(id) })
    }
}

/// The slot's filter: nexo's telemetry spans, once installed.
struct Exported;

impl Exported {
    fn wanted(metadata: &Metadata<'_>) -> bool {
        metadata.is_span() && metadata.target() == TARGET && enabled()
    }
}

impl<S> Filter<S> for Exported {
    fn enabled(&self, metadata: &Metadata<'_>, _cx: &LayerContext<'_, S>) -> bool {
        Exported::wanted(metadata)
    }

    fn callsite_enabled(&self, metadata: &'static Metadata<'static>) -> Interest {
        if Exported::wanted(metadata) { Interest::always() } else { Interest::never() }
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(if enabled() { LevelFilter::INFO } else { LevelFilter::OFF })
    }
}

/// The run a pass works on, as every span of the pass carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunLabels {
    /// The tenant, for a run of `nexo serve`.
    pub tenant: Option<String>,
    /// The run's id.
    pub run: String,
    /// The component's (or agent file's) SHA-256.
    pub digest: String,
}

impl RunLabels {
    fn attributes(&self) -> impl Iterator<Item = KeyValue> + '_ {
        let tenant = self.tenant.as_ref().map(|t| KeyValue::new(NEXO_TENANT, t.clone()));
        tenant.into_iter().chain([
            KeyValue::new(NEXO_RUN_ID, self.run.clone()),
            KeyValue::new(NEXO_COMPONENT_DIGEST, self.digest.clone()),
        ])
    }
}

/// Copies the [`RunLabels`] of a span's parent context onto the span.
#[derive(Debug)]
struct Labeller;

impl SpanProcessor for Labeller {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &Context) {
        use opentelemetry::trace::Span as _;
        if let Some(labels) = cx.get::<RunLabels>() {
            span.set_attributes(labels.attributes());
        }
    }

    fn on_end(&self, _span: SpanData) {}

    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> opentelemetry_sdk::error::OTelSdkResult {
        Ok(())
    }
}
