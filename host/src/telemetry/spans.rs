//! nexo's spans, with the OpenTelemetry semantic conventions for generative
//! AI (version [`SEMCONV_VERSION`](super::names::SEMCONV_VERSION)): a pass of a run (`invoke_agent`), a
//! model call (`chat`), a tool call (`execute_tool`), an MCP request, and
//! the wait for an approval. Each constructor returns a disabled span when
//! tracing is off, and builds no attribute then. Message and tool contents
//! go on spans only when the operator opted in ([`capture_content`]).

use std::time::{Duration, SystemTime};

use opentelemetry::trace::Tracer as _;
use opentelemetry::{Context, KeyValue};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::context::TraceParent;
pub use super::names::*;
use super::traces::{RunLabels, TARGET, capture_content, enabled};

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
    pub(super) const GEN_AI_RESPONSE_ID: &str = names::GEN_AI_RESPONSE_ID;
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
            let answered = &response.answered;
            span.set_attribute(
                semconv::GEN_AI_RESPONSE_MODEL,
                answered.model.clone().unwrap_or_else(|| model.to_string()),
            );
            if let Some(id) = &answered.id {
                span.set_attribute(semconv::GEN_AI_RESPONSE_ID, id.clone());
            }
            span.set_attribute(semconv::GEN_AI_USAGE_INPUT_TOKENS, saturate(response.usage.input_tokens));
            span.set_attribute(semconv::GEN_AI_USAGE_OUTPUT_TOKENS, saturate(response.usage.output_tokens));
            span.set_attribute(
                semconv::GEN_AI_RESPONSE_FINISH_REASONS,
                opentelemetry::Value::Array(
                    vec![opentelemetry::StringValue::from(finish_reason(&response.stop))].into(),
                ),
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
pub fn tool_span(
    tool: &str,
    call_id: Option<&str>,
    tool_type: &'static str,
    arguments: Option<&serde_json::Value>,
) -> Span {
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
pub fn approval_wait(
    pass: &Span,
    tool: &str,
    decision: &str,
    asked_ms: i64,
    decided_ms: i64,
    asked_in: Option<&TraceParent>,
) {
    let Some(tracer) = super::traces::tracer() else { return };
    if pass.is_disabled() {
        return;
    }
    use opentelemetry::trace::Span as _;
    let at = |ms: i64| SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    let links = asked_in
        .and_then(TraceParent::span_context)
        .map(|cx| vec![opentelemetry::trace::Link::with_context(cx)])
        .unwrap_or_default();
    let mut span = tracer
        .span_builder(format!("await_approval {tool}"))
        .with_start_time(at(asked_ms))
        .with_links(links)
        .with_attributes([
            KeyValue::new(semconv::GEN_AI_TOOL_NAME, tool.to_string()),
            KeyValue::new(NEXO_APPROVAL_DECISION, decision.to_string()),
        ])
        .start_with_context(tracer, &pass.context());
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
        value["finish_reason"] = json!(crate::telemetry::spans::finish_reason(&response.stop));
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
                parts.extend(
                    tool_calls
                        .iter()
                        .map(|c| json!({"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.arguments})),
                );
                json!({"role": "assistant", "parts": parts})
            }
            Message::ToolResult { call_id, content, .. } => {
                json!({"role": "tool", "parts": [{"type": "tool_call_response", "id": call_id, "response": content}]})
            }
        }
    }
}
