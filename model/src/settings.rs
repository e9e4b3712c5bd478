//! What a model is configured with: the provider family, the model id,
//! where its key comes from and its limits. Plain data; [`crate::resolve`]
//! turns it into a provider.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// A provider family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProviderKind {
    /// OpenAI's API.
    Openai,
    /// Any OpenAI-compatible server; needs a base URL.
    OpenaiCompatible,
    /// Ollama's OpenAI-compatible `/v1` (default `http://localhost:11434/v1`, no key).
    Ollama,
    /// OpenRouter (OpenAI-compatible).
    Openrouter,
    /// Anthropic's Messages API.
    Anthropic,
    /// A recorded conversation (`script` names the file).
    Scripted,
}

/// What the operator configured. Empty by default: there is no default model.
///
/// Its `Debug` output shows whether a key is set, never the key.
#[derive(Clone, Default)]
pub struct ModelConfig {
    /// The model id, for example `gpt-4o-mini` or `gemma3:12b`.
    pub model: Option<String>,
    /// The provider, when the id does not say.
    pub provider: Option<ProviderKind>,
    /// Skip the check that the id is one the provider is known to serve.
    /// Needs an explicit provider.
    pub assume_model_exists: bool,
    /// The API base URL. Required for `openai-compatible`; the others default
    /// to `https://api.openai.com/v1` (openai), `http://localhost:11434/v1`
    /// (ollama), `https://openrouter.ai/api/v1` (openrouter) and
    /// `https://api.anthropic.com` (anthropic).
    pub base_url: Option<String>,
    /// The API key. When unset, the provider's environment variable is read:
    /// `OPENAI_API_KEY` (openai), `OPENROUTER_API_KEY` (openrouter),
    /// `ANTHROPIC_API_KEY` (anthropic). Ollama and `openai-compatible` servers
    /// read no variable (an OpenAI key is not sent to another server) and
    /// send no key unless one is set here.
    pub api_key: Option<String>,
    /// The script for the scripted provider.
    pub script: Option<PathBuf>,
    /// The time limit for one HTTP request. Default: 120 s.
    pub timeout: Option<Duration>,
    /// Retries on 429, 500, 502, 503, 504, 529 and failed connections.
    /// Default: 3.
    pub max_retries: Option<u32>,
    /// The delay before the first retry; each further retry doubles it, and
    /// half of each delay is random jitter. Default: 1 s. Tests set it to a
    /// millisecond or so.
    pub retry_base_delay: Option<Duration>,
    /// The longest wait between two attempts; it also caps a server's
    /// `retry-after`. Default: 30 s.
    pub retry_max_delay: Option<Duration>,
    /// The most bytes one answer may have, streamed or not (for a stream,
    /// its events); a longer one fails rather than being cut. Default:
    /// 64 MiB.
    pub max_response_bytes: Option<usize>,
    /// The sampling temperature, 0 to 2, sent with every request; unset:
    /// the server's default (a small local model often calls tools more
    /// reliably near 0).
    pub temperature: Option<f64>,
    /// Whether the model may, must or must not call a tool; unset: the
    /// server's default (it decides).
    pub tool_choice: Option<ToolChoice>,
}

/// Whether the model may, must or must not call one of the tools offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ToolChoice {
    /// It decides.
    Auto,
    /// A turn that answers the user's message must call a tool; a turn
    /// after tool results may answer, so a prompt can end. A small local
    /// model that would answer without looking acts first.
    Required,
    /// It may not call any.
    None,
}

impl ToolChoice {
    /// What `request` is sent with: nothing without tools (an API refuses
    /// a choice among none), and `required` only on a turn that answers
    /// the user (its last message is theirs), the server's own choice
    /// after that.
    pub(crate) fn for_request(choice: Option<ToolChoice>, request: &crate::Request) -> Option<ToolChoice> {
        let answers_the_user = matches!(request.messages.last(), Some(crate::Message::User { .. }));
        match choice {
            _ if request.tools.is_empty() => None,
            Some(ToolChoice::Required) if !answers_the_user => None,
            choice => choice,
        }
    }
}

impl fmt::Debug for ModelConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelConfig")
            .field("model", &self.model)
            .field("provider", &self.provider)
            .field("assume_model_exists", &self.assume_model_exists)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("script", &self.script)
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .field("retry_base_delay", &self.retry_base_delay)
            .field("retry_max_delay", &self.retry_max_delay)
            .field("max_response_bytes", &self.max_response_bytes)
            .field("temperature", &self.temperature)
            .field("tool_choice", &self.tool_choice)
            .finish()
    }
}

impl ProviderKind {
    /// The name the provider goes by in messages and events.
    pub fn name(self) -> &'static str {
        match self {
            ProviderKind::Openai => "openai",
            ProviderKind::OpenaiCompatible => "openai-compatible",
            ProviderKind::Ollama => "ollama",
            ProviderKind::Openrouter => "openrouter",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Scripted => "scripted",
        }
    }

    /// The environment variable holding the key, for providers that need one.
    pub fn key_variable(self) -> Option<&'static str> {
        match self {
            ProviderKind::Openai => Some("OPENAI_API_KEY"),
            ProviderKind::Openrouter => Some("OPENROUTER_API_KEY"),
            ProviderKind::Anthropic => Some("ANTHROPIC_API_KEY"),
            ProviderKind::OpenaiCompatible | ProviderKind::Ollama | ProviderKind::Scripted => None,
        }
    }

    /// The API base URL used when none is configured.
    pub fn default_base_url(self) -> Option<&'static str> {
        match self {
            ProviderKind::Openai => Some("https://api.openai.com/v1"),
            ProviderKind::Ollama => Some("http://localhost:11434/v1"),
            ProviderKind::Openrouter => Some("https://openrouter.ai/api/v1"),
            ProviderKind::Anthropic => Some("https://api.anthropic.com"),
            ProviderKind::OpenaiCompatible | ProviderKind::Scripted => None,
        }
    }
}
