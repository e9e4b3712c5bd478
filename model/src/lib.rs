//! Model providers: the one [`Provider`] trait and its implementations.
//!
//! - OpenAI-compatible chat completions (OpenAI, Ollama's `/v1`, vLLM,
//!   llama.cpp's `llama-server`, LM Studio, OpenRouter);
//! - Anthropic Messages;
//! - [`ScriptedProvider`], which replays a recorded conversation for tests and
//!   offline demos, and says so.
//!
//! There is no default model: [`resolve`] fails with a configuration error
//! that says how to set one. Keys come from the environment or the caller and
//! never appear in errors, logs or events.
//!
//! HTTP providers time out (default 120 s per request; for a stream, per wait
//! for the next piece, and an hour in all), cap an answer's size (default
//! 64 MiB), and retry 429, 500, 502, 503, 504, 529 and failed connections with
//! exponential backoff and jitter, honouring `retry-after` up to a cap (see
//! [`ModelConfig`]).
//!
//! Their calls go through `nexo_egress::GuardedClient`, the one HTTP stack
//! every egress path shares, under a policy that reaches only the base URL's
//! origin (scheme, host and port): a redirect elsewhere, or a POST redirect
//! other than 307 or 308, is refused, and every hop passes the address guard.
//! The base URL the operator configured (`--base-url`, `NEXO_BASE_URL`, the
//! config file), and Ollama's built-in `http://localhost:11434/v1`, may be on
//! a loopback or private address; the built-in base URLs of the hosted APIs
//! stay public-only. The key goes only to that origin, and over plain http
//! only to a private address.
//!
//! With the `mock` feature, [`mock::MockServer`] serves both wire formats on
//! loopback for tests.

mod anthropic;
mod config;
mod endpoint;
mod http;
#[cfg(feature = "mock")]
pub mod mock;
mod openai;
pub mod scripted;
mod settings;
mod wire;

use std::future::Future;
use std::pin::Pin;

use serde::{Deserialize, Serialize};

pub use config::{resolve, resolve_with_env};
pub use scripted::{Script, ScriptedCall, ScriptedProvider, ScriptedTurn};
pub use settings::{ModelConfig, ProviderKind, ToolChoice};

/// A boxed, sendable future, so [`Provider`] can be used as a trait object.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The tool's name, for example `read_file`.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// A JSON Schema object for its arguments.
    pub parameters: serde_json::Value,
}

/// One tool call the model made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's id for the call, echoed in the result.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments, as a JSON value (providers that send a JSON string
    /// have it parsed).
    pub arguments: serde_json::Value,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// System instructions.
    System {
        /// The text.
        text: String,
    },
    /// The user's input.
    User {
        /// The text.
        text: String,
    },
    /// The model's turn: text, tool calls, or both.
    Assistant {
        /// The text.
        text: String,
        /// The tool calls.
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one tool call.
    ToolResult {
        /// The call it answers.
        call_id: String,
        /// The tool's name.
        name: String,
        /// The result, or the error message.
        content: String,
        /// Whether `content` is an error.
        is_error: bool,
    },
}

/// A request for one model turn.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The model id.
    pub model: String,
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// The tools offered.
    pub tools: Vec<ToolSpec>,
    /// The most output tokens for this turn.
    pub max_tokens: u32,
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// It finished its answer.
    EndTurn,
    /// It wants tool results.
    ToolUse,
    /// It hit `max_tokens`.
    MaxTokens,
    /// Anything else the provider reported.
    Other(String),
}

/// Tokens used by one turn, as the provider reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
}

/// The model's turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// Its text.
    pub text: String,
    /// Its tool calls, in order.
    pub tool_calls: Vec<ToolCall>,
    /// Why it stopped.
    pub stop: StopReason,
    /// Token usage.
    pub usage: Usage,
    /// Who answered, when the provider said: for telemetry, never part of
    /// the conversation.
    #[serde(default, skip_serializing_if = "Answered::is_unknown")]
    pub answered: Answered,
}

/// The provider's own names for an answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answered {
    /// The answer's id, such as `chatcmpl-…` or `msg_…`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The model that answered, which may name a version of the one asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

impl Answered {
    /// From an answer's (or its first event's) `id` and `model` fields.
    pub fn from_json(value: Option<&serde_json::Value>) -> Answered {
        let field = |name: &str| {
            value
                .and_then(|v| v.get(name))
                .and_then(serde_json::Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        Answered { id: field("id"), model: field("model") }
    }

    /// Whether the provider said nothing.
    pub fn is_unknown(&self) -> bool {
        self.id.is_none() && self.model.is_none()
    }
}

/// Receives streamed text as it arrives.
pub type DeltaSink<'a> = &'a (dyn Fn(&str) + Send + Sync);

/// Why a model call failed. Messages name the provider and, for HTTP errors,
/// the status and the body's message; they never contain a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum ModelError {
    /// Nothing usable is configured; the message says how to fix it.
    #[error("{0}")]
    Config(String),
    /// The provider could not be reached, or kept failing after retries.
    #[error("{provider} is unavailable: {message}")]
    Unavailable {
        /// The provider's name.
        provider: String,
        /// What happened.
        message: String,
    },
    /// The provider answered with an error status.
    #[error("{provider} answered HTTP {status}: {message}")]
    Provider {
        /// The provider's name.
        provider: String,
        /// The HTTP status.
        status: u16,
        /// The error message from the body.
        message: String,
    },
    /// The answer could not be understood (malformed JSON, a cut stream).
    #[error("{provider} sent an answer that cannot be read: {message}")]
    Protocol {
        /// The provider's name.
        provider: String,
        /// What was wrong.
        message: String,
    },
    /// The host did not send the turn: the run's budget does not cover it
    /// and the operator denied going past it. Nothing was paid.
    #[error("the turn was not sent: {0}")]
    Refused(String),
}

/// A model provider.
pub trait Provider: Send + Sync {
    /// The provider's name, for messages and events (`openai`, `anthropic`,
    /// `scripted`, …).
    fn name(&self) -> &str;

    /// The model id requests go to.
    fn model(&self) -> &str;

    /// Runs one model turn. When `deltas` is given the provider streams and
    /// calls it with each piece of text; the returned [`Response`] is the same
    /// either way.
    fn complete<'a>(
        &'a self,
        request: &'a Request,
        deltas: Option<DeltaSink<'a>>,
    ) -> BoxFuture<'a, Result<Response, ModelError>>;

    /// A resumed run's journal already holds `turns` model turns, which the
    /// replay answers without calling the provider. A provider that plays a
    /// recorded conversation ([`ScriptedProvider`]) goes on from the turn
    /// after them, as the run would have; a model has nothing to do.
    fn resume_at(&self, turns: u64) {
        let _ = turns;
    }
}
