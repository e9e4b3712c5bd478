//! nexo's spans, with the OpenTelemetry semantic conventions for generative
//! AI (version [`SEMCONV_VERSION`](super::names::SEMCONV_VERSION)): a pass of a run (`invoke_agent`), a
//! model call (`chat`), a tool call (`execute_tool`), an MCP request, and
//! the wait for an approval. Each constructor returns [`Span::off`] when
//! tracing is off, and builds no attribute then. Message and tool contents
//! go on spans only when the operator opted in ([`capture_content`]).

use std::future::Future;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{FutureExt as _, SpanKind, TraceContextExt as _};
use opentelemetry::{Context, KeyValue, Value};

use super::context::TraceParent;
pub use super::names::*;
use super::traces::{RunLabels, capture_content, enabled, start};

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

/// One of nexo's spans, open until it is dropped; or nothing, when tracing
/// is off. Work done under it ([`Span::under`]) has it as the current
/// context, so the spans that work starts are its children and the
/// requests it makes carry it as their `traceparent`.
#[derive(Debug, Default)]
#[must_use = "a span ends when it is dropped"]
pub struct Span(Option<Context>);

impl Span {
    /// No span: what every constructor returns when tracing is off.
    pub fn off() -> Span {
        Span(None)
    }

    /// Whether this is no span.
    pub fn is_off(&self) -> bool {
        self.0.is_none()
    }

    /// The context this span is the active span of.
    pub fn context(&self) -> Option<&Context> {
        self.0.as_ref()
    }

    /// Runs `work` under this span; with no span, just `work`.
    pub async fn under<F: Future>(&self, work: F) -> F::Output {
        match &self.0 {
            Some(cx) => work.with_context(cx.clone()).await,
            None => work.await,
        }
    }

    fn set(&self, key: &'static str, value: impl Into<Value>) {
        if let Some(cx) = &self.0 {
            cx.span().set_attribute(KeyValue::new(key, value));
        }
    }

    /// Marks the span failed with `error.type` (and an error status).
    fn failed(&self, kind: String) {
        if let Some(cx) = &self.0 {
            cx.span().set_status(opentelemetry::trace::Status::error(kind.clone()));
            cx.span().set_attribute(KeyValue::new(semconv::ERROR_TYPE, kind));
        }
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        // Ends it now, even while a context that names it lives on.
        if let Some(cx) = &self.0 {
            cx.span().end();
        }
    }
}

/// The span of one pass of a run: `invoke_agent {agent}`. Its parent is
/// the current context: the request that started or continued the run,
/// which the caller attached ([`TraceParent::context`]); its links are the
/// run's earlier passes, and its [`RunLabels`] go on every span under it.
pub fn pass_span(agent: &str, labels: RunLabels, earlier: &[TraceParent]) -> Span {
    if !enabled() {
        return Span::off();
    }
    let parent = Context::current().with_value(labels);
    let links = earlier.iter().filter_map(TraceParent::span_context).collect();
    Span(start(SpanKind::Internal, &parent, None, links, |f| {
        f.name(&["invoke_agent ", agent]);
        f.text(semconv::GEN_AI_OPERATION_NAME, "invoke_agent");
        f.text(semconv::GEN_AI_AGENT_NAME, agent);
    }))
}

/// The span of one model call: `chat {model}`, a client span.
pub fn chat_span(provider: &str, model: &str, request: &nexo_model::Request) -> Span {
    if !enabled() {
        return Span::off();
    }
    Span(start(SpanKind::Client, &Context::current(), None, Vec::new(), |f| {
        f.name(&["chat ", model]);
        f.text(semconv::GEN_AI_OPERATION_NAME, "chat");
        f.text(semconv::GEN_AI_PROVIDER_NAME, provider);
        f.text(semconv::GEN_AI_REQUEST_MODEL, model);
        f.int(semconv::GEN_AI_REQUEST_MAX_TOKENS, i64::from(request.max_tokens));
        if capture_content() {
            f.text(semconv::GEN_AI_INPUT_MESSAGES, &content::messages(&request.messages));
        }
    }))
}

/// What a model call answered, on its span.
pub fn chat_result(span: &Span, model: &str, result: &Result<nexo_model::Response, nexo_model::ModelError>) {
    if span.is_off() {
        return;
    }
    match result {
        Ok(response) => {
            let answered = &response.answered;
            let mut attributes = Vec::with_capacity(7);
            attributes.extend([
                KeyValue::new(
                    semconv::GEN_AI_RESPONSE_MODEL,
                    answered.model.clone().unwrap_or_else(|| model.to_string()),
                ),
                KeyValue::new(semconv::GEN_AI_USAGE_INPUT_TOKENS, saturate(response.usage.input_tokens)),
                KeyValue::new(semconv::GEN_AI_USAGE_OUTPUT_TOKENS, saturate(response.usage.output_tokens)),
                KeyValue::new(
                    semconv::GEN_AI_RESPONSE_FINISH_REASONS,
                    Value::Array(vec![opentelemetry::StringValue::from(finish_reason(&response.stop))].into()),
                ),
            ]);
            if let Some(id) = &answered.id {
                attributes.push(KeyValue::new(semconv::GEN_AI_RESPONSE_ID, id.clone()));
            }
            if capture_content() {
                attributes.push(KeyValue::new(semconv::GEN_AI_OUTPUT_MESSAGES, content::answer(response)));
            }
            // One lock of the span for all of them.
            if let Some(cx) = &span.0 {
                cx.span().set_attributes(attributes);
            }
        }
        Err(e) => span.failed(model_error_type(e)),
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
    if !enabled() {
        return Span::off();
    }
    Span(start(SpanKind::Internal, &Context::current(), None, Vec::new(), |f| {
        f.name(&["execute_tool ", tool]);
        f.text(semconv::GEN_AI_OPERATION_NAME, "execute_tool");
        f.text(semconv::GEN_AI_TOOL_NAME, tool);
        f.text(semconv::GEN_AI_TOOL_TYPE, tool_type);
        if let Some(id) = call_id {
            f.text(semconv::GEN_AI_TOOL_CALL_ID, id);
        }
        if let Some(arguments) = arguments.filter(|_| capture_content()) {
            f.text(semconv::GEN_AI_TOOL_CALL_ARGUMENTS, &arguments.to_string());
        }
    }))
}

/// A tool call's verdict (and its result, with content capture on).
pub fn tool_result(span: &Span, verdict: &'static str, failed_as: Option<&str>, result: Option<&str>) {
    if span.is_off() {
        return;
    }
    span.set(NEXO_TOOL_VERDICT, verdict);
    if let Some(kind) = failed_as {
        span.failed(kind.to_string());
    }
    if let Some(result) = result.filter(|_| capture_content()) {
        span.set(semconv::GEN_AI_TOOL_CALL_RESULT, result.to_string());
    }
}

/// Marks the current (tool) span as answered from the journal: a replay
/// ran nothing.
pub fn replayed() {
    if enabled() {
        Context::current().span().set_attribute(KeyValue::new(NEXO_REPLAYED, true));
    }
}

/// The span of one MCP request: `{method} {tool}`, a client span, with
/// the MCP semantic conventions' names.
pub fn mcp_span(method: &'static str, server: &str, tool: &str, transport: &'static str) -> Span {
    if !enabled() {
        return Span::off();
    }
    Span(start(SpanKind::Client, &Context::current(), None, Vec::new(), |f| {
        f.name(&[method, " ", tool]);
        f.text(semconv::MCP_METHOD_NAME, method);
        f.text(semconv::GEN_AI_TOOL_NAME, tool);
        f.text(semconv::GEN_AI_OPERATION_NAME, "execute_tool");
        f.text(semconv::NETWORK_TRANSPORT, transport);
        f.text(NEXO_MCP_SERVER, server);
    }))
}

/// An MCP request's failure, on its span.
pub fn mcp_failed(span: &Span, kind: &str) {
    span.failed(kind.to_string());
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
    let Some(parent) = pass.context() else { return };
    let at = |ms: i64| SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    let links = asked_in.and_then(TraceParent::span_context).into_iter().collect();
    let wait = start(SpanKind::Internal, parent, Some(at(asked_ms)), links, |f| {
        f.name(&["await_approval ", tool]);
        f.text(semconv::GEN_AI_TOOL_NAME, tool);
        f.text(NEXO_APPROVAL_DECISION, decision);
    });
    if let Some(wait) = wait {
        wait.span().end_with_timestamp(at(decided_ms.max(asked_ms)));
    }
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
        ModelError::Refused(_) => "refused".into(),
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
