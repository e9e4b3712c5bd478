//! The agent loop: one prompt, driven to completion with the agent's tools.
//!
//! [`HostLoop`] is the default [`Loop`]. Each turn it sends the conversation
//! to the model, runs the tool calls it gets back through the run's
//! host-call path ([`ToolContext::call_model`], so every call passes the one
//! gate), and feeds the results back. It stops when the model answers without tool calls, at a **hard
//! turn cap**, at the token budget, or when an action needs approval, and
//! always returns the transcript so far. Events go out in order:
//! `turn-started`, `text-delta` (when streaming), `tool-call`,
//! `tool-result`, and finally `done`.

use nexo_model::{BoxFuture, DeltaSink, Message, ModelError, Provider, Request, Response, Usage};

pub use crate::events::{Event, EventSink, Status, no_events};
use crate::host_call::{CallContext, ToolContext};

/// Limits for one prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopLimits {
    /// The most model turns. Default: 20.
    pub max_turns: u32,
    /// The most tokens (input plus output, as reported) for the whole
    /// prompt; `None` for no budget. Default: none.
    pub token_budget: Option<u64>,
    /// The most output tokens per turn. Default: 4096.
    pub max_tokens_per_turn: u32,
    /// Stream text as it arrives (emits `text-delta` events). Default: off.
    pub stream: bool,
}

impl Default for LoopLimits {
    fn default() -> Self {
        LoopLimits { max_turns: 20, token_budget: None, max_tokens_per_turn: 4096, stream: false }
    }
}

/// The result of one prompt: the last answer, how it ended, and the whole
/// transcript.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Outcome {
    /// The final (or, when cut short, the latest) text.
    pub text: String,
    /// How it ended.
    pub status: Status,
    /// Model turns taken.
    pub turns: u32,
    /// Tokens used.
    pub usage: Usage,
    /// The prompt's messages: the system prompt first, then its own
    /// exchange. The history a session's prompt continued is not repeated
    /// (it is journaled with every outcome, so it stays small).
    pub transcript: Vec<Message>,
}

/// What a loop needs for one prompt.
pub struct LoopContext<'a> {
    /// The model the operator configured, if any. The host loop needs one;
    /// a loop that drives another program may bring its own.
    pub provider: Option<&'a dyn Provider>,
    /// The run's tools: every call the model makes goes through their
    /// host-call path, and events go to their sink.
    pub tools: &'a ToolContext,
    /// System instructions in order: the agent's, the sandbox's, the skills'.
    pub instructions: &'a [String],
    /// The conversation so far, without instructions: a session's thread,
    /// which the prompt continues. Empty for a new conversation.
    pub history: &'a [Message],
    /// Limits.
    pub limits: LoopLimits,
}

/// Drives one prompt to completion. Swappable: the agent does not change.
pub trait Loop: Send + Sync {
    /// Runs `input` to completion.
    fn run<'a>(&'a self, ctx: LoopContext<'a>, input: &'a str) -> BoxFuture<'a, Result<Outcome, ModelError>>;

    /// Whether every model turn goes through [`LoopContext::provider`], so
    /// a run's token meter counts each turn and its budget stops the loop.
    /// A loop that reaches a model by other means (the claude-code CLI)
    /// says no: only its outcome's usage can be counted, after the prompt.
    fn turns_through_provider(&self) -> bool {
        true
    }
}

/// The default loop, with a hard turn cap.
#[derive(Debug, Default, Clone, Copy)]
pub struct HostLoop;

impl Loop for HostLoop {
    fn run<'a>(&'a self, ctx: LoopContext<'a>, input: &'a str) -> BoxFuture<'a, Result<Outcome, ModelError>> {
        Box::pin(async move {
            let provider = ctx.provider.ok_or_else(no_model)?;
            let mut tools = ctx.tools.specs().await;
            let events = ctx.tools.events();
            // The instructions, the history, the prompt, and room for this turn's answer.
            let mut messages = Vec::with_capacity(ctx.history.len() + 3);
            let system: Vec<&str> = ctx.instructions.iter().map(|s| s.trim()).filter(|s| !s.is_empty()).collect();
            if !system.is_empty() {
                messages.push(Message::System { text: system.join("\n\n") });
            }
            messages.extend_from_slice(ctx.history);
            messages.push(Message::User { text: input.to_string() });
            let mut usage = Usage::default();
            let mut text = String::new();
            let mut turns = 0;
            let delta_sink = |piece: &str| events.emit(&Event::TextDelta { text: piece.to_string() });
            let history = ctx.history.len();
            let finish = |status: Status, turns: u32, usage: Usage, text: String, mut transcript: Vec<Message>| {
                let start = usize::from(!system.is_empty());
                transcript.drain(start..start + history);
                events.emit(&Event::Done {
                    status: status.clone(),
                    turns,
                    input_tokens: usage.input_tokens,
                    output_tokens: usage.output_tokens,
                    cost_usd: None,
                    transcript: cut_short(&status).then(|| transcript.clone()),
                });
                Ok(Outcome { text, status, turns, usage, transcript })
            };
            loop {
                if turns >= ctx.limits.max_turns {
                    return finish(Status::TurnLimit, turns, usage, text, messages);
                }
                turns += 1;
                events.emit(&Event::TurnStarted { turn: turns });
                // The conversation moves into the request and back: a turn
                // copies none of it, however long it has grown.
                let request = Request {
                    model: provider.model().to_string(),
                    messages: std::mem::take(&mut messages),
                    tools: std::mem::take(&mut tools),
                    max_tokens: ctx.limits.max_tokens_per_turn,
                };
                let sink: Option<&(dyn Fn(&str) + Send + Sync)> =
                    if ctx.limits.stream { Some(&delta_sink) } else { None };
                let response = complete(&ctx, provider, &request, sink).await;
                (messages, tools) = (request.messages, request.tools);
                let response = response?;
                usage.input_tokens += response.usage.input_tokens;
                usage.output_tokens += response.usage.output_tokens;
                if !response.text.is_empty() {
                    text = response.text.clone();
                }
                messages
                    .push(Message::Assistant { text: response.text.clone(), tool_calls: response.tool_calls.clone() });
                if response.tool_calls.is_empty() {
                    return finish(Status::Completed, turns, usage, text, messages);
                }
                let over_budget = ctx.limits.token_budget.is_some_and(|b| usage.input_tokens + usage.output_tokens > b);
                if turns >= ctx.limits.max_turns || over_budget {
                    // The cap covers actions too: calls from the last turn are
                    // recorded as not run, so the transcript stays well-formed.
                    let why = if over_budget { "token budget used up" } else { "turn limit reached" };
                    for call in &response.tool_calls {
                        messages.push(Message::ToolResult {
                            call_id: call.id.clone(),
                            name: call.name.clone(),
                            content: format!("error: not run: {why}"),
                            is_error: true,
                        });
                    }
                    let status = if over_budget { Status::TokenBudget } else { Status::TurnLimit };
                    return finish(status, turns, usage, text, messages);
                }
                for call in &response.tool_calls {
                    let out = ctx.tools.call_model(turns, call).await;
                    messages.push(Message::ToolResult {
                        call_id: call.id.clone(),
                        name: call.name.clone(),
                        content: out.content,
                        is_error: out.is_error,
                    });
                    if let Some(detail) = out.approval {
                        return finish(
                            Status::ApprovalRequired { tool: call.name.clone(), detail },
                            turns,
                            usage,
                            text,
                            messages,
                        );
                    }
                }
            }
        })
    }
}

/// Whether a prompt that ended with `status` was cut short (the turn cap,
/// the token budget): its `done` event then carries the partial transcript.
pub fn cut_short(status: &Status) -> bool {
    matches!(status, Status::TurnLimit | Status::TokenBudget)
}

/// The configuration error for a prompt with no model: the one that says
/// how to set one.
pub fn no_model() -> ModelError {
    match nexo_model::resolve(&nexo_model::ModelConfig::default()) {
        Err(e) => e,
        Ok(_) => ModelError::Config("no model is configured".into()),
    }
}

/// One model turn. In a recorded run it is journaled like any host call:
/// a replay answers it from the journal, so no turn is paid for twice. A
/// provider that could not be reached is not journaled: a resume tries it
/// again.
async fn complete(
    ctx: &LoopContext<'_>,
    provider: &dyn Provider,
    request: &Request,
    sink: Option<DeltaSink<'_>>,
) -> Result<Response, ModelError> {
    use crate::journal::{Begin, Effect};
    let Some(journal) = ctx.tools.journal() else {
        return provider.complete(request, sink).await;
    };
    const INTERFACE: &str = "nexo:model";
    let hash = crate::journal::hash_json(&TurnArgs(request));
    match journal.begin(INTERFACE, "complete", &hash) {
        Begin::Replay(text) => serde_json::from_str::<Result<Response, ModelError>>(&text).unwrap_or_else(|e| {
            Err(ModelError::Protocol {
                provider: "journal".into(),
                message: format!("a journaled turn cannot be read: {e}"),
            })
        }),
        Begin::Live(seq) => {
            let result = provider.complete(request, sink).await;
            if !matches!(result, Err(ModelError::Unavailable { .. })) {
                let text = serde_json::to_string(&result).unwrap_or_default();
                journal.finish(seq, INTERFACE, "complete", &hash, text, Effect::Write).await;
            }
            result
        }
        Begin::Unjournaled => provider.complete(request, sink).await,
        Begin::Halted(why) => Err(ModelError::Protocol { provider: "journal".into(), message: why }),
    }
}

/// A turn's arguments as the journal hashes them: the JSON of
/// `{"max_tokens", "messages", "model", "tools"}`, serialized from the
/// request itself rather than from a `serde_json::Value` copy of the whole
/// conversation. Keys go in sorted order, as a `Value` writes them, so the
/// hash is the one journals have always recorded (a test checks).
struct TurnArgs<'a>(&'a Request);

impl serde::Serialize for TurnArgs<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let request = self.0;
        let mut map = serializer.serialize_map(Some(4))?;
        map.serialize_entry("max_tokens", &request.max_tokens)?;
        map.serialize_entry("messages", &Sorted(&request.messages[..]))?;
        map.serialize_entry("model", &request.model)?;
        map.serialize_entry("tools", &Sorted(&request.tools[..]))?;
        map.end()
    }
}

/// Model types as their `serde_json::Value` form writes them: keys sorted.
struct Sorted<T>(T);

impl<'a, T> serde::Serialize for Sorted<&'a [T]>
where
    Sorted<&'a T>: serde::Serialize,
{
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(Sorted))
    }
}

impl serde::Serialize for Sorted<&Message> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        // Every field named, so a new one cannot slip past the hash.
        match self.0 {
            Message::System { text } => {
                map.serialize_entry("role", "system")?;
                map.serialize_entry("text", text)?;
            }
            Message::User { text } => {
                map.serialize_entry("role", "user")?;
                map.serialize_entry("text", text)?;
            }
            Message::Assistant { text, tool_calls } => {
                map.serialize_entry("role", "assistant")?;
                map.serialize_entry("text", text)?;
                map.serialize_entry("tool_calls", &Sorted(&tool_calls[..]))?;
            }
            Message::ToolResult { call_id, name, content, is_error } => {
                map.serialize_entry("call_id", call_id)?;
                map.serialize_entry("content", content)?;
                map.serialize_entry("is_error", is_error)?;
                map.serialize_entry("name", name)?;
                map.serialize_entry("role", "tool_result")?;
            }
        }
        map.end()
    }
}

impl serde::Serialize for Sorted<&nexo_model::ToolCall> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let nexo_model::ToolCall { id, name, arguments } = self.0;
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("arguments", arguments)?;
        map.serialize_entry("id", id)?;
        map.serialize_entry("name", name)?;
        map.end()
    }
}

impl serde::Serialize for Sorted<&nexo_model::ToolSpec> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let nexo_model::ToolSpec { name, description, parameters } = self.0;
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("description", description)?;
        map.serialize_entry("name", name)?;
        map.serialize_entry("parameters", parameters)?;
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use nexo_model::{ToolCall, ToolSpec};
    use serde_json::json;

    use super::*;

    #[test]
    fn a_turn_hashes_as_the_value_it_used_to_be_built_as() {
        let call = |id: &str, arguments| ToolCall { id: id.into(), name: "glob".into(), arguments };
        let messages = vec![
            Message::System { text: "Be brief.".into() },
            Message::User { text: "Quote \"this\"\n and naïve ✓".into() },
            Message::Assistant { text: String::new(), tool_calls: vec![] },
            Message::Assistant {
                text: "Looking.".into(),
                tool_calls: vec![
                    call("c1", json!({"pattern": "*.md", "deep": {"z": 1, "a": [null]}})),
                    call("c2", json!(null)),
                ],
            },
            Message::ToolResult { call_id: "c1".into(), name: "glob".into(), content: "a.md".into(), is_error: false },
            Message::ToolResult { call_id: "c2".into(), name: "glob".into(), content: "bad".into(), is_error: true },
        ];
        let tools = vec![
            ToolSpec { name: "glob".into(), description: "Finds files.".into(), parameters: json!({"type": "object"}) },
            ToolSpec { name: "noop".into(), description: String::new(), parameters: json!(null) },
        ];
        for (messages, tools) in [(messages.clone(), tools.clone()), (messages, vec![]), (vec![], tools)] {
            let request = Request { model: "m".into(), messages, tools, max_tokens: 4096 };
            let value = json!({
                "model": request.model,
                "messages": request.messages,
                "tools": request.tools,
                "max_tokens": request.max_tokens,
            });
            assert_eq!(serde_json::to_string(&TurnArgs(&request)).unwrap(), value.to_string());
            assert_eq!(crate::journal::hash_json(&TurnArgs(&request)), crate::journal::hash_json(&value));
        }
    }
}
