//! Spans for runs, passes, model calls, tool calls, MCP calls and approval
//! waits, with the GenAI semantic conventions; W3C trace context in and out.
//!
//! Spans are `tracing` spans of one target, [`TARGET`]; the exporting layer
//! (tracing-opentelemetry) sees only that target, through a per-layer
//! filter, so no log line, a plugin's or the host's, is ever exported.
//! Until [`install`] runs the filter enables nothing, so each span macro is
//! a disabled callsite: tracing off costs a run nothing. Attributes follow
//! the OpenTelemetry semantic conventions (version [`SEMCONV_VERSION`]).
//!
//! Every span of a pass carries the run's tenant, id and component digest:
//! the pass puts [`RunLabels`] in its OpenTelemetry context, and a span
//! processor copies them onto each span started under it.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanContext, TraceContextExt, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, SpanData, SpanProcessor};
use tracing::Span;
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata};
use tracing_opentelemetry::{OpenTelemetryLayer, OpenTelemetrySpanExt};
use tracing_subscriber::Registry;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context as LayerContext, Filter, Layer};

use super::{Settings, TelemetryError};

/// The target of nexo's exported spans; nothing else is exported.
pub const TARGET: &str = "nexo::telemetry";

/// The version of the OpenTelemetry semantic conventions the spans follow.
pub const SEMCONV_VERSION: &str = "1.42.0";

/// `nexo.tenant`: the tenant that owns the run (`nexo serve` only).
pub const NEXO_TENANT: &str = "nexo.tenant";
/// `nexo.run.id`: the run.
pub const NEXO_RUN_ID: &str = "nexo.run.id";
/// `nexo.component.digest`: the SHA-256 of the component (or agent file).
pub const NEXO_COMPONENT_DIGEST: &str = "nexo.component.digest";
/// `nexo.tool.verdict`: the gate's and the handler's verdict on a tool
/// call: `allowed`, or the refusal or error's kind.
pub const NEXO_TOOL_VERDICT: &str = "nexo.tool.verdict";
/// `nexo.mcp.server`: the configured name of the MCP server called.
pub const NEXO_MCP_SERVER: &str = "nexo.mcp.server";
/// `nexo.approval.decision`: `approved` or `denied`.
pub const NEXO_APPROVAL_DECISION: &str = "nexo.approval.decision";
/// `nexo.replayed`: the call was answered from the run's journal, not run.
pub const NEXO_REPLAYED: &str = "nexo.replayed";

/// The conventions' attribute names, from opentelemetry-semantic-conventions.
/// The crate marks the GenAI ones deprecated since they moved to their own
/// repository (semantic-conventions-genai); the names are unchanged.
#[allow(deprecated)]
mod semconv {
    use opentelemetry_semantic_conventions::attribute as names;
    pub(super) const ERROR_TYPE: &str = names::ERROR_TYPE;
    pub(super) const GEN_AI_AGENT_NAME: &str = names::GEN_AI_AGENT_NAME;
    pub(super) const GEN_AI_INPUT_MESSAGES: &str = names::GEN_AI_INPUT_MESSAGES;
    pub(super) const GEN_AI_OPERATION_NAME: &str = names::GEN_AI_OPERATION_NAME;
    pub(super) const GEN_AI_OUTPUT_MESSAGES: &str = names::GEN_AI_OUTPUT_MESSAGES;
    pub(super) const GEN_AI_PROVIDER_NAME: &str = names::GEN_AI_PROVIDER_NAME;
    pub(super) const GEN_AI_REQUEST_MAX_TOKENS: &str = names::GEN_AI_REQUEST_MAX_TOKENS;
    pub(super) const GEN_AI_REQUEST_MODEL: &str = names::GEN_AI_REQUEST_MODEL;
    pub(super) const GEN_AI_RESPONSE_FINISH_REASONS: &str = names::GEN_AI_RESPONSE_FINISH_REASONS;
    pub(super) const GEN_AI_RESPONSE_MODEL: &str = names::GEN_AI_RESPONSE_MODEL;
    pub(super) const GEN_AI_TOOL_CALL_ARGUMENTS: &str = names::GEN_AI_TOOL_CALL_ARGUMENTS;
    pub(super) const GEN_AI_TOOL_CALL_ID: &str = names::GEN_AI_TOOL_CALL_ID;
    pub(super) const GEN_AI_TOOL_CALL_RESULT: &str = names::GEN_AI_TOOL_CALL_RESULT;
    pub(super) const GEN_AI_TOOL_NAME: &str = names::GEN_AI_TOOL_NAME;
    pub(super) const GEN_AI_TOOL_TYPE: &str = names::GEN_AI_TOOL_TYPE;
    pub(super) const GEN_AI_USAGE_INPUT_TOKENS: &str = names::GEN_AI_USAGE_INPUT_TOKENS;
    pub(super) const GEN_AI_USAGE_OUTPUT_TOKENS: &str = names::GEN_AI_USAGE_OUTPUT_TOKENS;
    pub(super) const MCP_METHOD_NAME: &str = names::MCP_METHOD_NAME;
    pub(super) const NETWORK_TRANSPORT: &str = names::NETWORK_TRANSPORT;
}

/// What is installed: the exporting layer and the content switch.
struct Installed {
    layer: OpenTelemetryLayer<Registry, SdkTracer>,
    tracer: SdkTracer,
    capture_content: bool,
}

static INSTALLED: OnceLock<Installed> = OnceLock::new();

/// The layer a front end's subscriber carries, first on the registry: the
/// slot [`install`] fills. Empty, it enables nothing.
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
    let provider = SdkTracerProvider::builder()
        .with_span_processor(Labeller)
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
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

/// A W3C trace context as it travels with a run's job and its record:
/// `traceparent`, and `tracestate` when there is one.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TraceParent {
    /// The `traceparent` header's value.
    pub traceparent: String,
    /// The `tracestate` header's value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
}

impl TraceParent {
    /// The context these headers carry, if they are well formed: a
    /// `traceparent` that does not parse is ignored, as W3C says.
    pub fn from_headers(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<TraceParent> {
        let parent = TraceParent {
            traceparent: traceparent?.trim().to_string(),
            tracestate: tracestate.map(|s| s.trim().to_string()).filter(|s| !s.is_empty()),
        };
        parent.span_context().map(|_| parent)
    }

    /// The remote span this names.
    pub fn span_context(&self) -> Option<SpanContext> {
        let mut carrier = HashMap::new();
        carrier.insert("traceparent".to_string(), self.traceparent.clone());
        if let Some(state) = &self.tracestate {
            carrier.insert("tracestate".to_string(), state.clone());
        }
        let cx = TraceContextPropagator::new().extract(&carrier);
        let span = cx.span().span_context().clone();
        span.is_valid().then_some(span)
    }

    /// The OpenTelemetry context whose parent this names: a pass run under
    /// it (`opentelemetry::trace::FutureExt::with_context`) continues the
    /// trace.
    pub fn context(&self) -> Context {
        match self.span_context() {
            Some(remote) => Context::new().with_remote_span_context(remote),
            None => Context::new(),
        }
    }

    /// The span `cx` names, when it is a valid one.
    pub fn of(cx: &Context) -> Option<TraceParent> {
        if !cx.has_active_span() {
            return None;
        }
        let mut carrier = HashMap::new();
        TraceContextPropagator::new().inject_context(cx, &mut carrier);
        Some(TraceParent { traceparent: carrier.remove("traceparent")?, tracestate: carrier.remove("tracestate") })
    }

    /// The current context's, when tracing is on: what a request that
    /// starts or continues a run records with its job, so that the pass
    /// continues the caller's trace.
    pub fn current() -> Option<TraceParent> {
        if !enabled() {
            return None;
        }
        TraceParent::of(&Context::current())
    }

    /// The context a job recorded (`"trace"` in its payload).
    pub fn from_job(payload: &serde_json::Value) -> Option<TraceParent> {
        serde_json::from_value(payload.get("trace")?.clone()).ok()
    }
}

/// The span of one pass of a run: `invoke_agent {agent}`. Its parent is
/// the current context: the request that started or continued the run,
/// which the caller attached ([`TraceParent::context`]); its links are the
/// run's earlier passes, and its [`RunLabels`] go on every span under it.
pub fn pass_span(agent: &str, labels: RunLabels, earlier: &[TraceParent]) -> Span {
    let span = tracing::info_span!(target: TARGET, "invoke_agent", otel.name = tracing::field::Empty);
    if span.is_disabled() {
        return span;
    }
    span.record("otel.name", format!("invoke_agent {agent}"));
    let _ = span.set_parent(Context::current().with_value(labels));
    for link in earlier.iter().filter_map(TraceParent::span_context) {
        span.add_link(link);
    }
    span.set_attribute(semconv::GEN_AI_OPERATION_NAME, "invoke_agent");
    span.set_attribute(semconv::GEN_AI_AGENT_NAME, agent.to_string());
    span
}

/// The span of one model call: `chat {model}`, a client span.
pub fn chat_span(provider: &str, model: &str, request: &nexo_model::Request) -> Span {
    let span = tracing::info_span!(target: TARGET, "chat", otel.name = tracing::field::Empty, otel.kind = "client");
    if span.is_disabled() {
        return span;
    }
    span.record("otel.name", format!("chat {model}"));
    span.set_attribute(semconv::GEN_AI_OPERATION_NAME, "chat");
    span.set_attribute(semconv::GEN_AI_PROVIDER_NAME, provider.to_string());
    span.set_attribute(semconv::GEN_AI_REQUEST_MODEL, model.to_string());
    span.set_attribute(semconv::GEN_AI_REQUEST_MAX_TOKENS, i64::from(request.max_tokens));
    if capture_content() {
        span.set_attribute(semconv::GEN_AI_INPUT_MESSAGES, content::messages(&request.messages));
    }
    span
}

/// What a model call answered, on its span.
pub fn chat_result(span: &Span, model: &str, result: &Result<nexo_model::Response, nexo_model::ModelError>) {
    if span.is_disabled() {
        return;
    }
    match result {
        Ok(response) => {
            span.set_attribute(semconv::GEN_AI_RESPONSE_MODEL, model.to_string());
            span.set_attribute(semconv::GEN_AI_USAGE_INPUT_TOKENS, saturate(response.usage.input_tokens));
            span.set_attribute(semconv::GEN_AI_USAGE_OUTPUT_TOKENS, saturate(response.usage.output_tokens));
            span.set_attribute(
                semconv::GEN_AI_RESPONSE_FINISH_REASONS,
                opentelemetry::Value::Array(vec![opentelemetry::StringValue::from(finish_reason(&response.stop))].into()),
            );
            if capture_content() {
                span.set_attribute(semconv::GEN_AI_OUTPUT_MESSAGES, content::answer(response));
            }
        }
        Err(e) => failed(span, model_error_type(e)),
    }
}

/// The span of one tool execution: `execute_tool {tool}`. `arguments` are
/// recorded only with content capture on.
pub fn tool_span(tool: &str, call_id: Option<&str>, tool_type: &'static str, arguments: Option<&serde_json::Value>) -> Span {
    let span = tracing::info_span!(target: TARGET, "execute_tool", otel.name = tracing::field::Empty);
    if span.is_disabled() {
        return span;
    }
    span.record("otel.name", format!("execute_tool {tool}"));
    span.set_attribute(semconv::GEN_AI_OPERATION_NAME, "execute_tool");
    span.set_attribute(semconv::GEN_AI_TOOL_NAME, tool.to_string());
    span.set_attribute(semconv::GEN_AI_TOOL_TYPE, tool_type);
    if let Some(id) = call_id {
        span.set_attribute(semconv::GEN_AI_TOOL_CALL_ID, id.to_string());
    }
    if let Some(arguments) = arguments.filter(|_| capture_content()) {
        span.set_attribute(semconv::GEN_AI_TOOL_CALL_ARGUMENTS, arguments.to_string());
    }
    span
}

/// A tool call's verdict (and its result, with content capture on).
pub fn tool_result(span: &Span, verdict: &str, failed_as: Option<&str>, result: Option<&str>) {
    if span.is_disabled() {
        return;
    }
    span.set_attribute(NEXO_TOOL_VERDICT, verdict.to_string());
    if let Some(kind) = failed_as {
        failed(span, kind.to_string());
    }
    if let Some(result) = result.filter(|_| capture_content()) {
        span.set_attribute(semconv::GEN_AI_TOOL_CALL_RESULT, result.to_string());
    }
}

/// Marks the current (tool) span as answered from the journal: a replay
/// ran nothing.
pub fn replayed() {
    if enabled() {
        Span::current().set_attribute(NEXO_REPLAYED, true);
    }
}

/// The span of one MCP request: `{method} {tool}`, a client span, with
/// the MCP semantic conventions' names.
pub fn mcp_span(method: &'static str, server: &str, tool: &str, transport: &'static str) -> Span {
    let span = tracing::info_span!(target: TARGET, "mcp", otel.name = tracing::field::Empty, otel.kind = "client");
    if span.is_disabled() {
        return span;
    }
    span.record("otel.name", format!("{method} {tool}"));
    span.set_attribute(semconv::MCP_METHOD_NAME, method);
    span.set_attribute(semconv::GEN_AI_TOOL_NAME, tool.to_string());
    span.set_attribute(semconv::GEN_AI_OPERATION_NAME, "execute_tool");
    span.set_attribute(semconv::NETWORK_TRANSPORT, transport);
    span.set_attribute(NEXO_MCP_SERVER, server.to_string());
    span
}

/// An MCP request's failure, on its span.
pub fn mcp_failed(span: &Span, kind: &str) {
    if !span.is_disabled() {
        failed(span, kind.to_string());
    }
}

/// The wait for an operator's decision, recorded when the pass the
/// decision resumes starts: a span under that pass, from the suspension
/// (`asked_ms`) to the decision (`decided_ms`), linked to the pass that
/// suspended (`asked_in`). The wait spans processes, so it is written at
/// once with both times rather than held open.
pub fn approval_wait(pass: &Span, tool: &str, decision: &str, asked_ms: i64, decided_ms: i64, asked_in: Option<&TraceParent>) {
    let Some(installed) = INSTALLED.get() else { return };
    if pass.is_disabled() {
        return;
    }
    use opentelemetry::trace::Span as _;
    let at = |ms: i64| SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    let links = asked_in
        .and_then(TraceParent::span_context)
        .map(|cx| vec![opentelemetry::trace::Link::with_context(cx)])
        .unwrap_or_default();
    let mut span = installed
        .tracer
        .span_builder(format!("await_approval {tool}"))
        .with_start_time(at(asked_ms))
        .with_links(links)
        .with_attributes([
            KeyValue::new(semconv::GEN_AI_TOOL_NAME, tool.to_string()),
            KeyValue::new(NEXO_APPROVAL_DECISION, decision.to_string()),
        ])
        .start_with_context(&installed.tracer, &pass.context());
    span.end_with_timestamp(at(decided_ms.max(asked_ms)));
}

/// Marks a span failed with `error.type` (and an error status).
fn failed(span: &Span, kind: String) {
    span.set_status(opentelemetry::trace::Status::error(kind.clone()));
    span.set_attribute(semconv::ERROR_TYPE, kind);
}

fn saturate(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The conventions' finish reason for a stop reason.
fn finish_reason(stop: &nexo_model::StopReason) -> &'static str {
    use nexo_model::StopReason;
    match stop {
        StopReason::EndTurn => "stop",
        StopReason::ToolUse => "tool_call",
        StopReason::MaxTokens => "length",
        StopReason::Other(_) => "other",
    }
}

/// `error.type` for a model error: its kind, never its message (which can
/// quote a server's body).
fn model_error_type(e: &nexo_model::ModelError) -> String {
    use nexo_model::ModelError;
    match e {
        ModelError::Config(_) => "config".into(),
        ModelError::Unavailable { .. } => "unavailable".into(),
        // The conventions name an HTTP failure by its status code.
        ModelError::Provider { status, .. } => status.to_string(),
        ModelError::Protocol { .. } => "protocol".into(),
    }
}

/// Message contents in the conventions' JSON shapes, for content capture.
mod content {
    use nexo_model::{Message, Response};
    use serde_json::{Value, json};

    /// `gen_ai.input.messages`.
    pub(super) fn messages(messages: &[Message]) -> String {
        Value::Array(messages.iter().map(message).collect()).to_string()
    }

    /// `gen_ai.output.messages`: the answer as one assistant message.
    pub(super) fn answer(response: &Response) -> String {
        let message = Message::Assistant { text: response.text.clone(), tool_calls: response.tool_calls.clone() };
        let mut value = message_value(&message);
        value["finish_reason"] = json!(super::finish_reason(&response.stop));
        Value::Array(vec![value]).to_string()
    }

    fn message(message: &Message) -> Value {
        message_value(message)
    }

    fn message_value(message: &Message) -> Value {
        let text = |t: &str| json!({"type": "text", "content": t});
        match message {
            Message::System { text: t } => json!({"role": "system", "parts": [text(t)]}),
            Message::User { text: t } => json!({"role": "user", "parts": [text(t)]}),
            Message::Assistant { text: t, tool_calls } => {
                let mut parts: Vec<Value> = if t.is_empty() { vec![] } else { vec![text(t)] };
                parts.extend(tool_calls.iter().map(|c| {
                    json!({"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.arguments})
                }));
                json!({"role": "assistant", "parts": parts})
            }
            Message::ToolResult { call_id, content, .. } => {
                json!({"role": "tool", "parts": [{"type": "tool_call_response", "id": call_id, "response": content}]})
            }
        }
    }
}
