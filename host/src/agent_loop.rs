//! The agent loop: one prompt, driven to completion with the agent's tools.
//!
//! [`HostLoop`] is the default [`Loop`]. Each turn it sends the conversation
//! to the model (a [`ModelTurn`], a host call like any other, so a recorded
//! run journals it), runs the tool calls it gets back through the run's
//! host-call path ([`ToolContext::call_model`], so every call passes the one
//! gate), and feeds the results back. It stops when the model answers without tool calls, at a **hard
//! turn cap**, at the token budget, or when an action needs approval, and
//! always returns the transcript so far. Events go out in order:
//! `turn-started`, `text-delta` (when streaming), `tool-call`,
//! `tool-result`, and finally `done`.

use nexo_model::{BoxFuture, DeltaSink, Message, ModelError, Provider, Request, Usage};

pub use crate::events::{Event, EventSink, Status, no_events};
use crate::host_call::{CallContext, ToolContext};
use crate::model_turn::{ModelTurn, Turn};

/// Limits for one prompt.
#[derive(Debug, Clone, Copy, PartialEq)]
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
    /// The model's price, when the operator gave one: turns are then
    /// counted in money, and `done` reports what the prompt cost.
    pub price: Option<crate::spend::Price>,
    /// The run's budget in dollars (needs a price): a turn that may pass it
    /// suspends the run for a decision ([`crate::spend`]). Default: none.
    pub budget_usd: Option<f64>,
}

/// How often a turn the model is still working on is said to be
/// ([`Event::Waiting`]).
pub const WAITING_EVERY: std::time::Duration = std::time::Duration::from_secs(15);

/// Runs `call`, saying every [`WAITING_EVERY`] how many seconds it has
/// taken.
async fn said_while<F: Future>(call: F, say: impl Fn(u64)) -> F::Output {
    let mut call = std::pin::pin!(call);
    let started = tokio::time::Instant::now();
    let mut every = tokio::time::interval_at(started + WAITING_EVERY, WAITING_EVERY);
    loop {
        tokio::select! {
            out = &mut call => return out,
            _ = every.tick() => say(started.elapsed().as_secs()),
        }
    }
}

impl Default for LoopLimits {
    fn default() -> Self {
        LoopLimits {
            max_turns: 20,
            token_budget: None,
            max_tokens_per_turn: 4096,
            stream: false,
            price: None,
            budget_usd: None,
        }
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
    /// The run's money, when its model is priced: each turn draws on it.
    pub spend: Option<&'a crate::spend::Spend>,
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
                    cost_usd: ctx.spend.map(|spend| crate::spend::usd(spend.cost(&usage))),
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
                let mut request = Request {
                    model: provider.model().to_string(),
                    messages: std::mem::take(&mut messages),
                    tools: std::mem::take(&mut tools),
                    max_tokens: ctx.limits.max_tokens_per_turn,
                };
                // The operator's hooks see the prompt first: a redaction stays
                // in the conversation, a refusal fails the prompt.
                ctx.tools.before_prompt(&mut request).await?;
                let deltas: Option<DeltaSink<'_>> = if ctx.limits.stream { Some(&delta_sink) } else { None };
                let turn = Turn { request: &request, deltas };
                // Under a budget, one turn of the run at a time is checked and counted.
                let counting = match ctx.spend {
                    Some(spend) => spend.turn().await,
                    None => None,
                };
                let model_turn = ModelTurn(provider, ctx.spend);
                let call = ctx.tools.call(&model_turn, turn);
                let response = said_while(call, |seconds| events.emit(&Event::Waiting { turn: turns, seconds })).await;
                drop(counting);
                (messages, tools) = (request.messages, request.tools);
                let response = match response {
                    // The operator would not pass the budget: the prompt ends
                    // with what it has, as at a token budget.
                    Err(ModelError::Refused(_)) => {
                        return finish(Status::TokenBudget, turns - 1, usage, text, messages);
                    }
                    response => response?,
                };
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
                    // A call that suspended the run (it waits for a child
                    // run) ends the prompt here; a later pass replays it.
                    if let Some(why) = ctx.tools.halted() {
                        return Err(crate::error::ToolError::Failed(why).into());
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
