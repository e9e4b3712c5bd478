//! Anthropic Messages (`POST {base}/v1/messages`).
//!
//! System messages, wherever they are in the conversation, are joined into
//! the top-level `system` field. Tool results travel as `tool_result` blocks
//! in user messages; consecutive ones share a message, as the API expects.

use std::collections::BTreeMap;

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::{Value, json};

use crate::endpoint::Endpoint;
use crate::http::{Auth, Http, Limits, Reach, SseEvent, is_event_stream, quote};
use crate::wire::{Each, Empty, Schema};
use crate::{
    Answered, BoxFuture, DeltaSink, Message, ModelError, Provider, Request, Response, StopReason, ToolCall, ToolChoice,
    ToolSpec, Usage,
};

/// The API version the request and event formats follow.
const API_VERSION: &str = "2023-06-01";

/// `max_tokens` is required by this API; used when a request leaves it 0.
const DEFAULT_MAX_TOKENS: u32 = 4096;

/// A provider speaking the Messages API.
#[derive(Debug)]
pub(crate) struct AnthropicProvider {
    model: String,
    url: Endpoint,
    http: Http,
    temperature: Option<f64>,
    tool_choice: Option<ToolChoice>,
}

impl AnthropicProvider {
    /// A provider for `model` at `base_url` (`https://api.anthropic.com`; a
    /// base ending in `/v1` is accepted too), sending `key` as `x-api-key`,
    /// to a server whose addresses `reach` allows.
    pub(crate) fn new(
        model: &str,
        base_url: &str,
        key: Option<String>,
        limits: Limits,
        reach: Reach,
    ) -> Result<Self, ModelError> {
        let url = Endpoint::new(base_url, "anthropic", "/v1/messages", Some("/v1"))?;
        let auth = Auth { header: "x-api-key", prefix: "" };
        let headers = [("anthropic-version", API_VERSION)];
        let http = Http::new("anthropic", &url, reach, auth, key, &headers, limits)?;
        Ok(AnthropicProvider { model: model.into(), url, http, temperature: None, tool_choice: None })
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
        let max_tokens = if request.max_tokens == 0 { DEFAULT_MAX_TOKENS } else { request.max_tokens };
        let system: Vec<&str> = request
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::System { text } if !text.trim().is_empty() => Some(text.as_str()),
                _ => None,
            })
            .collect();
        let body = Body {
            max_tokens,
            messages: wire_messages(&request.messages),
            model,
            stream: stream.then_some(true),
            system: (!system.is_empty()).then(|| system.join("\n\n")),
            temperature: self.temperature,
            tool_choice: ToolChoice::for_request(self.tool_choice, request).map(|choice| WireChoice {
                kind: match choice {
                    ToolChoice::Auto => "auto",
                    ToolChoice::Required => "any",
                    ToolChoice::None => "none",
                },
            }),
            tools: Each(&request.tools, WireTool),
        };
        // Serializing borrowed strings and JSON values cannot fail.
        serde_json::to_vec(&body).unwrap_or_default()
    }
}

/// The Messages API request body. Fields are in the order a JSON object's
/// keys sort in, so the bytes are those of the equivalent `serde_json::Value`.
#[derive(Serialize)]
struct Body<'a> {
    max_tokens: u32,
    messages: Vec<Turn<'a>>,
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<WireChoice>,
    #[serde(skip_serializing_if = "Each::is_empty")]
    tools: Each<'a, ToolSpec, WireTool<'a>>,
}

/// `{"type": "auto" | "any" | "none"}`.
#[derive(Serialize)]
struct WireChoice {
    #[serde(rename = "type")]
    kind: &'static str,
}

/// One Messages API turn: `{"content": [blocks], "role"}`.
#[derive(Serialize)]
struct Turn<'a> {
    content: Vec<WireBlock<'a>>,
    role: &'static str,
}

/// A content block, borrowing from the conversation.
enum WireBlock<'a> {
    Text(&'a str),
    ToolUse(&'a ToolCall),
    ToolResult { call_id: &'a str, content: &'a str, is_error: bool },
}

impl Serialize for WireBlock<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        match self {
            WireBlock::Text(text) => {
                map.serialize_entry("text", text)?;
                map.serialize_entry("type", "text")?;
            }
            WireBlock::ToolUse(call) => {
                map.serialize_entry("id", &call.id)?;
                // `input` must be an object.
                if call.arguments.is_object() {
                    map.serialize_entry("input", &call.arguments)?;
                } else {
                    map.serialize_entry("input", &Empty)?;
                }
                map.serialize_entry("name", &call.name)?;
                map.serialize_entry("type", "tool_use")?;
            }
            WireBlock::ToolResult { call_id, content, is_error } => {
                map.serialize_entry("content", content)?;
                map.serialize_entry("is_error", is_error)?;
                map.serialize_entry("tool_use_id", call_id)?;
                map.serialize_entry("type", "tool_result")?;
            }
        }
        map.end()
    }
}

/// A tool offered: `{"description", "input_schema", "name"}`.
struct WireTool<'a>(&'a ToolSpec);

impl Serialize for WireTool<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let tool = self.0;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("description", &tool.description)?;
        map.serialize_entry("input_schema", &Schema(&tool.parameters))?;
        map.serialize_entry("name", &tool.name)?;
        map.end()
    }
}

impl Provider for AnthropicProvider {
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
                        if state.on_event(&self.http, &event, sink)? {
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

/// The conversation as Messages API turns (system messages excluded).
fn wire_messages(messages: &[Message]) -> Vec<Turn<'_>> {
    let mut out: Vec<Turn<'_>> = Vec::new();
    for message in messages {
        match message {
            Message::System { .. } => {}
            Message::User { text } => {
                // The API rejects empty text blocks.
                if text.is_empty() {
                    continue;
                }
                let block = WireBlock::Text(text);
                match out.last_mut().filter(|t| t.role == "user") {
                    Some(turn) => turn.content.push(block),
                    None => out.push(Turn { content: vec![block], role: "user" }),
                }
            }
            Message::Assistant { text, tool_calls } => {
                let mut blocks = Vec::with_capacity(tool_calls.len() + 1);
                if !text.is_empty() {
                    blocks.push(WireBlock::Text(text));
                }
                blocks.extend(tool_calls.iter().map(WireBlock::ToolUse));
                if blocks.is_empty() {
                    continue;
                }
                match out.last_mut().filter(|t| t.role == "assistant") {
                    Some(turn) => turn.content.extend(blocks),
                    None => out.push(Turn { content: blocks, role: "assistant" }),
                }
            }
            Message::ToolResult { call_id, content, is_error, .. } => {
                let block = WireBlock::ToolResult { call_id, content, is_error: *is_error };
                // Results must come before any text in their user message, so they join only
                // a message that holds nothing but results.
                let only_results = |t: &&mut Turn<'_>| {
                    t.role == "user" && t.content.iter().all(|b| matches!(b, WireBlock::ToolResult { .. }))
                };
                match out.last_mut().filter(only_results) {
                    Some(turn) => turn.content.push(block),
                    None => out.push(Turn { content: vec![block], role: "user" }),
                }
            }
        }
    }
    out
}

fn stop_reason(reason: Option<&str>, has_calls: bool) -> StopReason {
    match reason {
        // A stop sequence ends the answer like end_turn does (nexo sets none).
        Some("end_turn" | "stop_sequence") => StopReason::EndTurn,
        Some("tool_use") => StopReason::ToolUse,
        Some("max_tokens") => StopReason::MaxTokens,
        Some(other) => StopReason::Other(other.into()),
        None if has_calls => StopReason::ToolUse,
        None => StopReason::EndTurn,
    }
}

/// Input tokens including cached ones (which the API counts separately), so
/// budgets see the whole prompt.
fn input_tokens(usage: &Value) -> u64 {
    ["input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"]
        .iter()
        .filter_map(|f| usage.get(*f).and_then(Value::as_u64))
        .sum()
}

fn output_tokens(usage: &Value) -> u64 {
    usage.get("output_tokens").and_then(Value::as_u64).unwrap_or(0)
}

/// An `error` object from a body or an `error` event.
fn api_error(http: &Http, error: Option<&Value>) -> ModelError {
    let kind = error.and_then(|e| e.get("type")).and_then(Value::as_str).unwrap_or("error");
    let message = error.and_then(|e| e.get("message")).and_then(Value::as_str).unwrap_or("no message").to_string();
    let status = match kind {
        "overloaded_error" => return http.unavailable(format!("overloaded: {message}")),
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        _ => 500,
    };
    http.status_error(status, message)
}

fn tool_input(http: &Http, name: &str, input: Option<&Value>) -> Result<Value, ModelError> {
    match input {
        None | Some(Value::Null) => Ok(json!({})),
        Some(object @ Value::Object(_)) => Ok(object.clone()),
        Some(Value::String(text)) => parse_input_json(http, name, text, None),
        Some(other) => Err(http.protocol(format!("the input of the `{name}` tool call is not an object: {other}"))),
    }
}

fn parse_input_json(http: &Http, name: &str, text: &str, initial: Option<&Value>) -> Result<Value, ModelError> {
    if text.trim().is_empty() {
        return Ok(initial.filter(|v| v.is_object()).cloned().unwrap_or_else(|| json!({})));
    }
    serde_json::from_str(text).map_err(|e| {
        http.protocol(format!(
            "the input of the `{name}` tool call is not valid JSON ({e}): {}",
            quote(text.as_bytes())
        ))
    })
}

/// A non-streamed answer.
fn parse_response(http: &Http, value: &Value) -> Result<Response, ModelError> {
    if value.get("type").and_then(Value::as_str) == Some("error") {
        return Err(api_error(http, value.get("error")));
    }
    let Some(content) = value.get("content").and_then(Value::as_array) else {
        return Err(http.protocol(format!("the answer has no content: {}", quote(value.to_string().as_bytes()))));
    };
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for block in content {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(block.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("tool_use") => {
                let Some(name) = block.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()) else {
                    return Err(http.protocol("a tool_use block has no name"));
                };
                let id = block.get("id").and_then(Value::as_str).unwrap_or("").to_string();
                let arguments = tool_input(http, name, block.get("input"))?;
                tool_calls.push(ToolCall { id, name: name.into(), arguments });
            }
            // Thinking and other blocks carry nothing the caller uses.
            _ => {}
        }
    }
    let usage = value.get("usage").cloned().unwrap_or_default();
    let stop = stop_reason(value.get("stop_reason").and_then(Value::as_str), !tool_calls.is_empty());
    Ok(Response {
        text,
        tool_calls,
        stop,
        usage: Usage { input_tokens: input_tokens(&usage), output_tokens: output_tokens(&usage) },
        answered: Answered::from_json(Some(value)),
    })
}

/// One content block of a streamed answer.
#[derive(Debug)]
enum Block {
    Text(String),
    Tool { id: String, name: String, json: String, initial: Value },
    Other,
}

/// A streamed answer being assembled.
#[derive(Debug, Default)]
struct StreamState {
    /// By block index, which orders text and tool calls as the model wrote them.
    blocks: BTreeMap<u64, Block>,
    stop: Option<String>,
    usage: Usage,
    answered: Answered,
    stopped: bool,
}

impl StreamState {
    /// Takes one event; true at `message_stop`.
    fn on_event(&mut self, http: &Http, event: &SseEvent, sink: DeltaSink<'_>) -> Result<bool, ModelError> {
        if event.data.trim().is_empty() {
            return Ok(false);
        }
        let data: Value = serde_json::from_str(&event.data).map_err(|e| {
            http.protocol(format!("a stream event is not valid JSON ({e}): {}", quote(event.data.as_bytes())))
        })?;
        let kind = data.get("type").and_then(Value::as_str).unwrap_or(&event.event);
        let index = data.get("index").and_then(Value::as_u64).unwrap_or(0);
        if matches!(kind, "content_block_start" | "content_block_delta") {
            // Blocks stream one after another. One going back to an earlier
            // block would make the streamed text differ from the answer's,
            // which joins the blocks by index.
            if let Some(last) = self.blocks.keys().next_back().copied().filter(|last| index < *last) {
                return Err(http.protocol(format!(
                    "content block {index} arrived after block {last}: blocks must stream in index order"
                )));
            }
        }
        match kind {
            "message_start" => {
                self.answered = Answered::from_json(data.get("message"));
                if let Some(usage) = data.pointer("/message/usage") {
                    self.usage = Usage { input_tokens: input_tokens(usage), output_tokens: output_tokens(usage) };
                }
            }
            "content_block_start" => {
                // A second start would replace a block whose text already went to the sink.
                if self.blocks.contains_key(&index) {
                    return Err(http.protocol(format!("content block {index} was started twice")));
                }
                let block = data.get("content_block").cloned().unwrap_or_default();
                let block = match block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        let text = block.get("text").and_then(Value::as_str).unwrap_or("").to_string();
                        if !text.is_empty() {
                            sink(&text);
                        }
                        Block::Text(text)
                    }
                    Some("tool_use") => Block::Tool {
                        id: block.get("id").and_then(Value::as_str).unwrap_or("").into(),
                        name: block.get("name").and_then(Value::as_str).unwrap_or("").into(),
                        json: String::new(),
                        initial: block.get("input").cloned().unwrap_or_default(),
                    },
                    _ => Block::Other,
                };
                self.blocks.insert(index, block);
            }
            "content_block_delta" => {
                let delta = data.get("delta").cloned().unwrap_or_default();
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        let text = delta.get("text").and_then(Value::as_str).unwrap_or("");
                        match self.blocks.entry(index).or_insert_with(|| Block::Text(String::new())) {
                            Block::Text(buffer) => buffer.push_str(text),
                            _ => {
                                return Err(http.protocol(format!("text arrived for block {index}, which is not text")));
                            }
                        }
                        if !text.is_empty() {
                            sink(text);
                        }
                    }
                    Some("input_json_delta") => {
                        let part = delta.get("partial_json").and_then(Value::as_str).unwrap_or("");
                        match self.blocks.get_mut(&index) {
                            Some(Block::Tool { json, .. }) => json.push_str(part),
                            _ => {
                                return Err(http.protocol(format!(
                                    "tool input arrived for block {index}, which is not a tool call"
                                )));
                            }
                        }
                    }
                    // Thinking, signatures, citations: nothing the caller uses.
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = data.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop = Some(reason.into());
                }
                if let Some(usage) = data.get("usage") {
                    // Counts here are cumulative; newer API versions repeat the input counts too.
                    if usage.get("output_tokens").is_some() {
                        self.usage.output_tokens = output_tokens(usage);
                    }
                    let input = input_tokens(usage);
                    if input > 0 {
                        self.usage.input_tokens = input;
                    }
                }
            }
            "message_stop" => {
                self.stopped = true;
                return Ok(true);
            }
            "error" => return Err(api_error(http, data.get("error"))),
            // `ping`, `content_block_stop`, and event types added later.
            _ => {}
        }
        Ok(false)
    }

    /// The answer, once the stream has ended.
    fn finish(self, http: &Http) -> Result<Response, ModelError> {
        if !self.stopped && self.stop.is_none() {
            return Err(http.protocol("the stream was cut off: it ended before message_stop"));
        }
        let mut text = String::new();
        let mut tool_calls = Vec::new();
        for block in self.blocks.into_values() {
            match block {
                Block::Text(part) => text.push_str(&part),
                Block::Tool { id, name, json, initial } => {
                    if name.is_empty() {
                        return Err(http.protocol("a streamed tool_use block has no name"));
                    }
                    let arguments = parse_input_json(http, &name, &json, Some(&initial))?;
                    tool_calls.push(ToolCall { id, name, arguments });
                }
                Block::Other => {}
            }
        }
        let stop = stop_reason(self.stop.as_deref(), !tool_calls.is_empty());
        Ok(Response { text, tool_calls, stop, usage: self.usage, answered: self.answered })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::{
        DEFAULT_MAX_BODY, DEFAULT_MAX_RETRIES, DEFAULT_RETRY_BASE_DELAY, DEFAULT_RETRY_MAX_DELAY, DEFAULT_TIMEOUT,
    };

    fn provider(base: &str) -> AnthropicProvider {
        let limits = Limits {
            timeout: DEFAULT_TIMEOUT,
            max_retries: DEFAULT_MAX_RETRIES,
            base_delay: DEFAULT_RETRY_BASE_DELAY,
            max_delay: DEFAULT_RETRY_MAX_DELAY,
            max_body: DEFAULT_MAX_BODY,
        };
        AnthropicProvider::new("claude-x", base, Some("sk-ant-very-secret".into()), limits, Reach::Public).unwrap()
    }

    #[test]
    fn debug_hides_the_key_and_urls_join() {
        let p = provider("https://api.anthropic.com/");
        let debug = format!("{p:?}");
        assert!(!debug.contains("sk-ant-very-secret"), "{debug}");
        assert_eq!(p.url.url, "https://api.anthropic.com/v1/messages");
        assert_eq!(provider("http://h/v1").url.url, "http://h/v1/messages");
    }

    // The body as it was built before it was serialized straight from the
    // request: a `Value` tree, whose keys sort.
    fn is_role(message: &Value, role: &str) -> bool {
        message.get("role").and_then(Value::as_str) == Some(role)
    }

    fn blocks_of(message: &mut Value) -> Option<&mut Vec<Value>> {
        message.get_mut("content").and_then(Value::as_array_mut)
    }

    fn value_messages(messages: &[Message]) -> Vec<Value> {
        let mut out: Vec<Value> = Vec::new();
        for message in messages {
            match message {
                Message::System { .. } => {}
                Message::User { text } => {
                    // The API rejects empty text blocks.
                    if text.is_empty() {
                        continue;
                    }
                    let block = json!({"type": "text", "text": text});
                    match out.last_mut().filter(|m| is_role(m, "user")).and_then(blocks_of) {
                        Some(blocks) => blocks.push(block),
                        None => out.push(json!({"role": "user", "content": [block]})),
                    }
                }
                Message::Assistant { text, tool_calls } => {
                    let mut blocks = Vec::new();
                    if !text.is_empty() {
                        blocks.push(json!({"type": "text", "text": text}));
                    }
                    for call in tool_calls {
                        // `input` must be an object.
                        let input = if call.arguments.is_object() { call.arguments.clone() } else { json!({}) };
                        blocks.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}));
                    }
                    if blocks.is_empty() {
                        continue;
                    }
                    match out.last_mut().filter(|m| is_role(m, "assistant")).and_then(blocks_of) {
                        Some(existing) => existing.extend(blocks),
                        None => out.push(json!({"role": "assistant", "content": blocks})),
                    }
                }
                Message::ToolResult { call_id, content, is_error, .. } => {
                    let block = json!({"type": "tool_result", "tool_use_id": call_id, "content": content, "is_error": is_error});
                    // Results must come before any text in their user message, so they join only
                    // a message that holds nothing but results.
                    let only_results = |m: &&mut Value| {
                        is_role(m, "user")
                            && m.get("content").and_then(Value::as_array).is_some_and(|blocks| {
                                blocks.iter().all(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
                            })
                    };
                    match out.last_mut().filter(only_results).and_then(blocks_of) {
                        Some(blocks) => blocks.push(block),
                        None => out.push(json!({"role": "user", "content": [block]})),
                    }
                }
            }
        }
        out
    }

    /// The body as a `Value` tree, as it was built before.
    fn value_body(p: &AnthropicProvider, request: &Request, stream: bool) -> Value {
        let model = if request.model.is_empty() { &p.model } else { &request.model };
        let max_tokens = if request.max_tokens == 0 { DEFAULT_MAX_TOKENS } else { request.max_tokens };
        let mut body = json!({"model": model, "max_tokens": max_tokens, "messages": value_messages(&request.messages)});
        let system: Vec<&str> = request
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::System { text } if !text.trim().is_empty() => Some(text.as_str()),
                _ => None,
            })
            .collect();
        if !system.is_empty() {
            body["system"] = json!(system.join("\n\n"));
        }
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request
                .tools
                .iter()
                .map(|t| {
                    let schema = if t.parameters.is_null() {
                        json!({"type": "object", "properties": {}})
                    } else {
                        t.parameters.clone()
                    };
                    json!({"name": t.name, "description": t.description, "input_schema": schema})
                })
                .collect();
            body["tools"] = Value::Array(tools);
        }
        if stream {
            body["stream"] = json!(true);
        }
        if let Some(temperature) = p.temperature {
            body["temperature"] = json!(temperature);
        }
        if let Some(choice) = ToolChoice::for_request(p.tool_choice, request) {
            let kind = match choice {
                ToolChoice::Auto => "auto",
                ToolChoice::Required => "any",
                ToolChoice::None => "none",
            };
            body["tool_choice"] = json!({"type": kind});
        }
        body
    }

    #[test]
    fn the_body_is_byte_for_byte_the_value_tree_it_replaced() {
        let settings = [(None, None), (Some(0.0), Some(ToolChoice::Required)), (Some(1.5), Some(ToolChoice::None))];
        for (temperature, choice) in settings {
            let p = provider("https://api.anthropic.com").sampling(temperature, choice);
            for request in crate::wire::sample_requests() {
                for stream in [false, true] {
                    let sent = String::from_utf8(p.body(&request, stream)).unwrap();
                    assert_eq!(sent, value_body(&p, &request, stream).to_string(), "stream {stream}, {temperature:?}");
                }
            }
        }
    }

    #[test]
    fn results_do_not_join_a_message_with_text() {
        let messages = vec![
            Message::User { text: "a".into() },
            Message::ToolResult { call_id: "1".into(), name: "t".into(), content: "r".into(), is_error: false },
            Message::ToolResult { call_id: "2".into(), name: "t".into(), content: "r".into(), is_error: true },
            Message::User { text: "b".into() },
            Message::Assistant { text: String::new(), tool_calls: vec![] },
        ];
        let wire = serde_json::to_value(wire_messages(&messages)).unwrap();
        assert_eq!(wire.as_array().unwrap().len(), 2, "{wire:#?}");
        assert_eq!(wire[1]["content"].as_array().unwrap().len(), 3);
        assert_eq!(wire[1]["content"][1]["is_error"], true);
        assert_eq!(wire[1]["content"][2]["type"], "text");
    }

    fn event(data: Value) -> SseEvent {
        SseEvent { event: String::new(), data: data.to_string() }
    }

    #[test]
    fn a_block_started_twice_is_refused() {
        let p = provider("http://h");
        let seen = std::sync::Mutex::new(String::new());
        let sink = |s: &str| seen.lock().unwrap().push_str(s);
        let start =
            event(json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": "Hi"}}));
        let mut state = StreamState::default();
        state.on_event(&p.http, &start, &sink).unwrap();
        let twice = state.on_event(&p.http, &start, &sink).unwrap_err();
        assert!(matches!(twice, ModelError::Protocol { .. }), "{twice:?}");
        assert!(twice.to_string().contains("block 0 was started twice"), "{twice}");
        assert_eq!(*seen.lock().unwrap(), "Hi", "the repeated start sent nothing to the sink");
    }

    #[test]
    fn a_block_going_back_to_an_earlier_index_is_refused() {
        let p = provider("http://h");
        let seen = std::sync::Mutex::new(String::new());
        let sink = |s: &str| seen.lock().unwrap().push_str(s);
        let delta = |index: u64, text: &str| {
            event(json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}}))
        };
        let mut state = StreamState::default();
        state.on_event(&p.http, &delta(0, "Hel"), &sink).unwrap();
        state.on_event(&p.http, &delta(1, "lo"), &sink).unwrap();
        let back = state.on_event(&p.http, &delta(0, "!"), &sink).unwrap_err();
        assert!(matches!(back, ModelError::Protocol { .. }), "{back:?}");
        assert!(back.to_string().contains("block 0 arrived after block 1"), "{back}");
        assert_eq!(*seen.lock().unwrap(), "Hello", "the late delta sent nothing to the sink");
    }

    #[test]
    fn stream_without_message_stop() {
        let p = provider("http://h");
        let sink = |_: &str| {};
        let mut state = StreamState::default();
        state
            .on_event(
                &p.http,
                &event(json!({"type": "message_start", "message": {"id": "msg_1", "model": "c-4", "usage": {"input_tokens": 5}}})),
                &sink,
            )
            .unwrap();
        let cut = StreamState { ..Default::default() }.finish(&p.http).unwrap_err();
        assert!(matches!(cut, ModelError::Protocol { .. }));
        // A stop reason without message_stop is complete enough.
        state
            .on_event(
                &p.http,
                &event(json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}})),
                &sink,
            )
            .unwrap();
        let response = state.finish(&p.http).unwrap();
        assert_eq!(response.usage, Usage { input_tokens: 5, output_tokens: 3 });
        assert_eq!(response.stop, StopReason::EndTurn);
        assert_eq!(response.answered, Answered { id: Some("msg_1".into()), model: Some("c-4".into()) });
    }
}
