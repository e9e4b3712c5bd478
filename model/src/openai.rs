//! OpenAI-compatible chat completions (`POST {base}/chat/completions`):
//! OpenAI, Ollama's `/v1`, vLLM, llama.cpp's `llama-server`, LM Studio,
//! OpenRouter.
//!
//! The wire format has no error flag on tool results, so a failed tool's
//! result is sent as `Error: {content}`.

use std::collections::BTreeMap;

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::{Value, json};

use crate::endpoint::Endpoint;
use crate::http::{Auth, Http, Limits, Reach, is_event_stream, quote};
use crate::wire::{Display, Each, Schema};
use crate::{
    Answered, BoxFuture, DeltaSink, Message, ModelError, Provider, ProviderKind, Request, Response, StopReason,
    ToolCall, ToolChoice, ToolSpec, Usage,
};

/// A provider speaking the chat completions API.
#[derive(Debug)]
pub(crate) struct OpenAiProvider {
    kind: ProviderKind,
    model: String,
    url: Endpoint,
    http: Http,
    temperature: Option<f64>,
    tool_choice: Option<ToolChoice>,
}

impl OpenAiProvider {
    /// A provider of `kind` for `model` at `base_url` (which ends before
    /// `/chat/completions`), sending `key` as a bearer token when given, to
    /// a server whose addresses `reach` allows.
    pub(crate) fn new(
        kind: ProviderKind,
        model: &str,
        base_url: &str,
        key: Option<String>,
        limits: Limits,
        reach: Reach,
    ) -> Result<Self, ModelError> {
        let name = kind.name();
        // OpenRouter's attribution header; harmless elsewhere, so only sent there.
        let headers: &[(&str, &str)] = if kind == ProviderKind::Openrouter { &[("x-title", "nexo")] } else { &[] };
        let url = Endpoint::new(base_url, name, "/chat/completions", None)?;
        let auth = Auth { header: "authorization", prefix: "Bearer " };
        let http = Http::new(name, &url, reach, auth, key, headers, limits)?;
        Ok(OpenAiProvider { kind, model: model.into(), url, http, temperature: None, tool_choice: None })
    }

    /// Sends `temperature` with every request, and `tool_choice` as
    /// [`ToolChoice::for_request`] says.
    pub(crate) fn sampling(mut self, temperature: Option<f64>, tool_choice: Option<ToolChoice>) -> Self {
        (self.temperature, self.tool_choice) = (temperature, tool_choice);
        self
    }

    /// The request body, serialized straight from the request: the
    /// conversation is borrowed, never copied into a JSON tree first.
    fn body(&self, request: &Request, stream: bool) -> Vec<u8> {
        let model = if request.model.is_empty() { &self.model } else { &request.model };
        let max_tokens = (request.max_tokens > 0).then_some(request.max_tokens);
        // OpenAI deprecated `max_tokens` and its reasoning models reject it; other servers
        // (Ollama, vLLM, llama.cpp, OpenRouter) know `max_tokens` best.
        let (max_completion_tokens, max_tokens) =
            if self.kind == ProviderKind::Openai { (max_tokens, None) } else { (None, max_tokens) };
        let body = Body {
            max_completion_tokens,
            max_tokens,
            messages: Each(&request.messages, WireMessage),
            model,
            stream: stream.then_some(true),
            stream_options: stream.then_some(StreamOptions { include_usage: true }),
            temperature: self.temperature,
            tool_choice: ToolChoice::for_request(self.tool_choice, request).map(|choice| match choice {
                ToolChoice::Auto => "auto",
                ToolChoice::Required => "required",
                ToolChoice::None => "none",
            }),
            tools: Each(&request.tools, WireTool),
        };
        // Serializing borrowed strings and JSON values cannot fail.
        serde_json::to_vec(&body).unwrap_or_default()
    }
}

/// The chat completions request body. Fields are in the order a JSON
/// object's keys sort in, so the bytes are those of the equivalent
/// `serde_json::Value`.
#[derive(Serialize)]
struct Body<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    messages: Each<'a, Message, WireMessage<'a>>,
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'static str>,
    #[serde(skip_serializing_if = "Each::is_empty")]
    tools: Each<'a, ToolSpec, WireTool<'a>>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// One message of the conversation in the chat completions format; keys
/// in sorted order (see [`Body`]).
struct WireMessage<'a>(&'a Message);

impl Serialize for WireMessage<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        match self.0 {
            Message::System { text } => {
                map.serialize_entry("content", text)?;
                map.serialize_entry("role", "system")?;
            }
            Message::User { text } => {
                map.serialize_entry("content", text)?;
                map.serialize_entry("role", "user")?;
            }
            Message::Assistant { text, tool_calls } => {
                // `content: null` is the canonical form of a turn that only calls tools.
                let content = (!text.is_empty() || tool_calls.is_empty()).then_some(text);
                map.serialize_entry("content", &content)?;
                map.serialize_entry("role", "assistant")?;
                if !tool_calls.is_empty() {
                    map.serialize_entry("tool_calls", &Each(tool_calls, WireCall))?;
                }
            }
            Message::ToolResult { call_id, content, is_error, .. } => {
                if *is_error {
                    map.serialize_entry("content", &Display(format_args!("Error: {content}")))?;
                } else {
                    map.serialize_entry("content", content)?;
                }
                map.serialize_entry("role", "tool")?;
                map.serialize_entry("tool_call_id", call_id)?;
            }
        }
        map.end()
    }
}

/// A tool call: `{"function": {"arguments", "name"}, "id", "type"}`.
struct WireCall<'a>(&'a ToolCall);

impl Serialize for WireCall<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let call = self.0;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("function", &WireFunction(call))?;
        map.serialize_entry("id", &call.id)?;
        map.serialize_entry("type", "function")?;
        map.end()
    }
}

struct WireFunction<'a>(&'a ToolCall);

impl Serialize for WireFunction<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let call = self.0;
        let mut map = serializer.serialize_map(None)?;
        // The arguments travel as a JSON string, written as they are encoded.
        if call.arguments.is_null() {
            map.serialize_entry("arguments", "{}")?;
        } else {
            map.serialize_entry("arguments", &Display(&call.arguments))?;
        }
        map.serialize_entry("name", &call.name)?;
        map.end()
    }
}

/// A tool offered: `{"function": {"description", "name", "parameters"}, "type"}`.
struct WireTool<'a>(&'a ToolSpec);

impl Serialize for WireTool<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("function", &WireToolFunction(self.0))?;
        map.serialize_entry("type", "function")?;
        map.end()
    }
}

struct WireToolFunction<'a>(&'a ToolSpec);

impl Serialize for WireToolFunction<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let tool = self.0;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("description", &tool.description)?;
        map.serialize_entry("name", &tool.name)?;
        map.serialize_entry("parameters", &Schema(&tool.parameters))?;
        map.end()
    }
}

impl Provider for OpenAiProvider {
    fn name(&self) -> &str {
        self.http.provider()
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn complete<'a>(
        &'a self,
        request: &'a Request,
        deltas: Option<DeltaSink<'a>>,
    ) -> BoxFuture<'a, Result<Response, ModelError>> {
        Box::pin(async move {
            let body = self.body(request, deltas.is_some());
            let response = self.http.post(&self.url, body, deltas.is_some()).await?;
            match deltas {
                Some(sink) if is_event_stream(&response) => {
                    let mut events = self.http.events(response);
                    let mut state = StreamState::default();
                    while let Some(event) = events.next().await? {
                        if state.on_data(&self.http, &event.data, sink)? {
                            break;
                        }
                    }
                    state.finish(&self.http)
                }
                deltas => {
                    let value = self.http.read_json(response).await?;
                    let response = parse_response(&self.http, &value)?;
                    if let Some(sink) = deltas
                        && !response.text.is_empty()
                    {
                        sink(&response.text);
                    }
                    Ok(response)
                }
            }
        })
    }
}

/// Tool-call arguments: a JSON string (the standard), an object (some
/// servers), or nothing; an empty string means no arguments.
fn parse_arguments(http: &Http, tool: &str, arguments: Option<&Value>) -> Result<Value, ModelError> {
    match arguments {
        None | Some(Value::Null) => Ok(json!({})),
        Some(object @ Value::Object(_)) => Ok(object.clone()),
        Some(Value::String(text)) => parse_argument_text(http, tool, text),
        Some(other) => {
            Err(http.protocol(format!("the arguments of the `{tool}` tool call are not an object: {other}")))
        }
    }
}

fn parse_argument_text(http: &Http, tool: &str, text: &str) -> Result<Value, ModelError> {
    if text.trim().is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_str(text).map_err(|e| {
        http.protocol(format!(
            "the arguments of the `{tool}` tool call are not valid JSON ({e}): {}",
            quote(text.as_bytes())
        ))
    })
}

fn stop_reason(reason: Option<&str>, has_calls: bool) -> StopReason {
    match reason {
        Some("tool_calls" | "function_call") => StopReason::ToolUse,
        Some("length") => StopReason::MaxTokens,
        // Some servers (older Ollama, some llama.cpp chat templates) say `stop` after tool
        // calls; the calls are what the caller must act on.
        Some("stop") | None if has_calls => StopReason::ToolUse,
        Some("stop") | None => StopReason::EndTurn,
        Some(other) => StopReason::Other(other.into()),
    }
}

fn parse_usage(usage: Option<&Value>) -> Usage {
    let count = |field: &str| usage.and_then(|u| u.get(field)).and_then(Value::as_u64).unwrap_or(0);
    Usage { input_tokens: count("prompt_tokens"), output_tokens: count("completion_tokens") }
}

/// An error reported inside a 200 answer (OpenRouter does this, also mid-stream).
fn embedded_error(http: &Http, error: &Value) -> ModelError {
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .or_else(|| error.as_str())
        .map(str::to_string)
        .unwrap_or_else(|| error.to_string());
    match error.get("code").and_then(Value::as_u64).filter(|c| (400..600).contains(c)) {
        Some(status) => http.status_error(status as u16, message),
        None => http.unavailable(message),
    }
}

/// Message text: a string, or (some servers) an array of text parts.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect(),
        _ => String::new(),
    }
}

/// A non-streamed answer.
fn parse_response(http: &Http, value: &Value) -> Result<Response, ModelError> {
    if let Some(error) = value.get("error").filter(|_| value.get("choices").is_none()) {
        return Err(embedded_error(http, error));
    }
    let Some(choice) = value.pointer("/choices/0") else {
        return Err(http.protocol(format!("the answer has no choices: {}", quote(value.to_string().as_bytes()))));
    };
    let Some(message) = choice.get("message") else {
        return Err(http.protocol("the answer's choice has no message"));
    };
    let mut tool_calls = Vec::new();
    for (i, call) in message.get("tool_calls").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let Some(name) = call.pointer("/function/name").and_then(Value::as_str).filter(|n| !n.is_empty()) else {
            return Err(http.protocol(format!("tool call {i} has no name")));
        };
        let id = call
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map_or_else(|| format!("call_{i}"), str::to_string);
        let arguments = parse_arguments(http, name, call.pointer("/function/arguments"))?;
        tool_calls.push(ToolCall { id, name: name.into(), arguments });
    }
    let stop = stop_reason(choice.get("finish_reason").and_then(Value::as_str), !tool_calls.is_empty());
    Ok(Response {
        text: content_text(message.get("content")),
        tool_calls,
        stop,
        usage: parse_usage(value.get("usage")),
        answered: Answered::from_json(Some(value)),
    })
}

/// A tool call being assembled from stream fragments.
#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
    object: Option<Value>,
}

/// A streamed answer being assembled.
#[derive(Debug, Default)]
struct StreamState {
    text: String,
    /// By the `index` each fragment carries: fragments of several calls may interleave.
    calls: BTreeMap<u64, PartialCall>,
    finish: Option<String>,
    usage: Usage,
    answered: Answered,
    done: bool,
}

impl StreamState {
    /// Takes one event's data; true once `[DONE]` arrives.
    fn on_data(&mut self, http: &Http, data: &str, sink: DeltaSink<'_>) -> Result<bool, ModelError> {
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
        }
        let chunk: Value = serde_json::from_str(data).map_err(|e| {
            http.protocol(format!("a stream event is not valid JSON ({e}): {}", quote(data.as_bytes())))
        })?;
        if let Some(error) = chunk.get("error") {
            return Err(embedded_error(http, error));
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = parse_usage(Some(usage));
        }
        if self.answered.is_unknown() {
            self.answered = Answered::from_json(Some(&chunk));
        }
        for choice in chunk.get("choices").and_then(Value::as_array).into_iter().flatten() {
            // Only one choice is asked for; others would interleave with it.
            if choice.get("index").and_then(Value::as_u64).unwrap_or(0) != 0 {
                continue;
            }
            let delta = choice.get("delta");
            if let Some(text) = delta.and_then(|d| d.get("content")).and_then(Value::as_str)
                && !text.is_empty()
            {
                self.text.push_str(text);
                sink(text);
            }
            let fragments = delta.and_then(|d| d.get("tool_calls")).and_then(Value::as_array);
            for (position, fragment) in fragments.into_iter().flatten().enumerate() {
                let index = fragment.get("index").and_then(Value::as_u64).unwrap_or(position as u64);
                let call = self.calls.entry(index).or_default();
                if let Some(id) = fragment.get("id").and_then(Value::as_str).filter(|s| !s.is_empty()) {
                    call.id = id.into();
                }
                // Servers that repeat the name in every fragment repeat it whole, so it is replaced, not appended.
                if let Some(name) = fragment.pointer("/function/name").and_then(Value::as_str).filter(|s| !s.is_empty())
                {
                    call.name = name.into();
                }
                match fragment.pointer("/function/arguments") {
                    Some(Value::String(part)) => call.arguments.push_str(part),
                    Some(object @ Value::Object(_)) => call.object = Some(object.clone()),
                    _ => {}
                }
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                self.finish = Some(reason.into());
            }
        }
        Ok(false)
    }

    /// The answer, once the stream has ended.
    fn finish(self, http: &Http) -> Result<Response, ModelError> {
        if !self.done && self.finish.is_none() {
            return Err(http.protocol("the stream was cut off: it ended without a finish reason or [DONE]"));
        }
        let mut tool_calls = Vec::with_capacity(self.calls.len());
        for (i, (index, call)) in self.calls.into_iter().enumerate() {
            if call.name.is_empty() {
                return Err(http.protocol(format!("streamed tool call {index} has no name")));
            }
            let arguments = match call.object {
                Some(object) if call.arguments.trim().is_empty() => object,
                _ => parse_argument_text(http, &call.name, &call.arguments)?,
            };
            let id = if call.id.is_empty() { format!("call_{i}") } else { call.id };
            tool_calls.push(ToolCall { id, name: call.name, arguments });
        }
        let stop = stop_reason(self.finish.as_deref(), !tool_calls.is_empty());
        Ok(Response { text: self.text, tool_calls, stop, usage: self.usage, answered: self.answered })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::http::{
        DEFAULT_MAX_BODY, DEFAULT_MAX_RETRIES, DEFAULT_RETRY_BASE_DELAY, DEFAULT_RETRY_MAX_DELAY, DEFAULT_TIMEOUT,
    };

    fn limits() -> Limits {
        Limits {
            timeout: DEFAULT_TIMEOUT,
            max_retries: DEFAULT_MAX_RETRIES,
            base_delay: DEFAULT_RETRY_BASE_DELAY,
            max_delay: DEFAULT_RETRY_MAX_DELAY,
            max_body: DEFAULT_MAX_BODY,
        }
    }

    fn provider(kind: ProviderKind) -> OpenAiProvider {
        let key = Some("sk-very-secret-key".into());
        OpenAiProvider::new(kind, "m", "http://127.0.0.1:9/v1/", key, limits(), Reach::OperatorHost).unwrap()
    }

    #[test]
    fn debug_hides_the_key() {
        let p = provider(ProviderKind::Openai);
        let debug = format!("{p:?}");
        assert!(!debug.contains("sk-very-secret-key"), "{debug}");
        assert!(debug.contains("<redacted>"), "{debug}");
        assert_eq!(p.url.url, "http://127.0.0.1:9/v1/chat/completions");
    }

    /// The body as JSON.
    fn body(p: &OpenAiProvider, request: &Request, stream: bool) -> Value {
        serde_json::from_slice(&p.body(request, stream)).unwrap()
    }

    /// The body as it was built before it was serialized straight from the
    /// request: a `Value` tree, whose keys sort.
    fn value_body(p: &OpenAiProvider, request: &Request, stream: bool) -> Value {
        let model = if request.model.is_empty() { &p.model } else { &request.model };
        let messages: Vec<Value> = request
            .messages
            .iter()
            .map(|message| match message {
                Message::System { text } => json!({"role": "system", "content": text}),
                Message::User { text } => json!({"role": "user", "content": text}),
                Message::Assistant { text, tool_calls } => {
                    let content = if text.is_empty() && !tool_calls.is_empty() { Value::Null } else { json!(text) };
                    let mut wire = json!({"role": "assistant", "content": content});
                    if !tool_calls.is_empty() {
                        let calls: Vec<Value> = tool_calls
                            .iter()
                            .map(|c| {
                                let arguments =
                                    if c.arguments.is_null() { "{}".to_string() } else { c.arguments.to_string() };
                                json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": arguments}})
                            })
                            .collect();
                        wire["tool_calls"] = Value::Array(calls);
                    }
                    wire
                }
                Message::ToolResult { call_id, content, is_error, .. } => {
                    let content = if *is_error { format!("Error: {content}") } else { content.clone() };
                    json!({"role": "tool", "tool_call_id": call_id, "content": content})
                }
            })
            .collect();
        let mut body = json!({ "model": model, "messages": messages });
        if request.max_tokens > 0 {
            let field = if p.kind == ProviderKind::Openai { "max_completion_tokens" } else { "max_tokens" };
            body[field] = json!(request.max_tokens);
        }
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request
                .tools
                .iter()
                .map(|t| {
                    let parameters = if t.parameters.is_null() {
                        json!({"type": "object", "properties": {}})
                    } else {
                        t.parameters.clone()
                    };
                    json!({"type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": parameters,
                    }})
                })
                .collect();
            body["tools"] = Value::Array(tools);
        }
        if stream {
            body["stream"] = json!(true);
            body["stream_options"] = json!({"include_usage": true});
        }
        if let Some(temperature) = p.temperature {
            body["temperature"] = json!(temperature);
        }
        if let Some(choice) = ToolChoice::for_request(p.tool_choice, request) {
            body["tool_choice"] = serde_json::to_value(choice).unwrap();
        }
        body
    }

    #[test]
    fn the_body_is_byte_for_byte_the_value_tree_it_replaced() {
        let settings = [
            (ProviderKind::Openai, None, None),
            (ProviderKind::Ollama, None, None),
            (ProviderKind::Ollama, Some(0.2), Some(ToolChoice::Required)),
            (ProviderKind::Openai, None, Some(ToolChoice::None)),
        ];
        for (kind, temperature, choice) in settings {
            let p = provider(kind).sampling(temperature, choice);
            for request in crate::wire::sample_requests() {
                for stream in [false, true] {
                    let sent = String::from_utf8(p.body(&request, stream)).unwrap();
                    assert_eq!(sent, value_body(&p, &request, stream).to_string(), "{kind:?}, stream {stream}");
                }
            }
        }
    }

    #[test]
    fn a_temperature_set_is_sent_with_every_request_and_none_is_not() {
        let request = Request { model: String::new(), messages: vec![], tools: vec![], max_tokens: 64 };
        assert!(body(&provider(ProviderKind::Ollama), &request, false).get("temperature").is_none());
        let warm = provider(ProviderKind::Openai).sampling(Some(0.7), None);
        assert_eq!(body(&warm, &request, true)["temperature"], 0.7);
    }

    #[test]
    fn a_required_tool_call_is_asked_of_a_turn_that_answers_the_user_only() {
        let tools = vec![ToolSpec { name: "t".into(), description: "d".into(), parameters: Value::Null }];
        let user = Message::User { text: "go".into() };
        let result =
            Message::ToolResult { call_id: "1".into(), name: "t".into(), content: "r".into(), is_error: false };
        let call = Message::Assistant {
            text: String::new(),
            tool_calls: vec![ToolCall { id: "1".into(), name: "t".into(), arguments: json!({}) }],
        };
        let turn = |p: &OpenAiProvider, messages: Vec<Message>, tools: Vec<ToolSpec>| {
            body(p, &Request { model: String::new(), messages, tools, max_tokens: 0 }, false)
        };
        let required = provider(ProviderKind::Ollama).sampling(None, Some(ToolChoice::Required));
        assert_eq!(turn(&required, vec![user.clone()], tools.clone())["tool_choice"], "required");
        let after = turn(&required, vec![user.clone(), call, result], tools.clone());
        assert!(after.get("tool_choice").is_none(), "after results it may answer: {after}");
        assert!(turn(&required, vec![user.clone()], vec![]).get("tool_choice").is_none(), "no choice among no tools");
        let never = provider(ProviderKind::Openai).sampling(None, Some(ToolChoice::None));
        assert_eq!(turn(&never, vec![user], tools)["tool_choice"], "none");
    }

    #[test]
    fn max_tokens_field_by_provider() {
        let request = Request { model: String::new(), messages: vec![], tools: vec![], max_tokens: 64 };
        let openai = body(&provider(ProviderKind::Openai), &request, false);
        assert_eq!(openai["max_completion_tokens"], 64);
        assert!(openai.get("max_tokens").is_none());
        assert_eq!(openai["model"], "m");
        let ollama = body(&provider(ProviderKind::Ollama), &request, false);
        assert_eq!(ollama["max_tokens"], 64);
        assert!(ollama.get("stream").is_none());
    }

    #[test]
    fn null_parameters_become_an_empty_schema() {
        let request = Request {
            model: "x".into(),
            messages: vec![],
            tools: vec![ToolSpec { name: "t".into(), description: "d".into(), parameters: Value::Null }],
            max_tokens: 0,
        };
        let body = body(&provider(ProviderKind::Ollama), &request, true);
        assert_eq!(body["tools"][0]["function"]["parameters"], json!({"type": "object", "properties": {}}));
        assert!(body.get("max_tokens").is_none());
        assert_eq!(body["stream_options"]["include_usage"], true);
    }

    fn run(events: &[&str]) -> Result<(Response, String), ModelError> {
        let p = provider(ProviderKind::Ollama);
        let seen = Mutex::new(String::new());
        let sink = |s: &str| seen.lock().unwrap().push_str(s);
        let mut state = StreamState::default();
        for event in events {
            if state.on_data(&p.http, event, &sink)? {
                break;
            }
        }
        let response = state.finish(&p.http)?;
        Ok((response, seen.into_inner().unwrap()))
    }

    #[test]
    fn stream_interleaved_calls_and_clean_eof() {
        let (response, seen) = run(&[
            r#"{"id":"chatcmpl-7","model":"m-2024","choices":[{"index":0,"delta":{"content":"Hi"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"b","function":{"name":"two","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"one","arguments":"{\"x\""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{}"}},{"index":0,"function":{"arguments":":1}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
        ])
        .unwrap();
        // No [DONE], but a finish reason: complete. `stop` with calls means tool use.
        assert_eq!(seen, "Hi");
        assert_eq!(response.stop, StopReason::ToolUse);
        assert_eq!(response.tool_calls.len(), 2);
        assert_eq!(response.tool_calls[0], ToolCall { id: "a".into(), name: "one".into(), arguments: json!({"x": 1}) });
        assert_eq!(response.tool_calls[1], ToolCall { id: "b".into(), name: "two".into(), arguments: json!({}) });
        // Who answered, from the first chunk that says.
        assert_eq!(response.answered, Answered { id: Some("chatcmpl-7".into()), model: Some("m-2024".into()) });
    }

    #[test]
    fn stream_cut_and_errors() {
        let cut = run(&[r#"{"choices":[{"index":0,"delta":{"content":"Hi"}}]}"#]).unwrap_err();
        assert!(matches!(&cut, ModelError::Protocol { message, .. } if message.contains("cut off")), "{cut}");
        let bad = run(&[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"grep","arguments":"{oops"}}]}}]}"#,
            "[DONE]",
        ])
        .unwrap_err();
        assert!(matches!(&bad, ModelError::Protocol { message, .. } if message.contains("`grep`")), "{bad}");
        let embedded = run(&[r#"{"error":{"code":502,"message":"upstream failed"}}"#]).unwrap_err();
        assert_eq!(
            embedded,
            ModelError::Provider { provider: "ollama".into(), status: 502, message: "upstream failed".into() }
        );
    }
}
