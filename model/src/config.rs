//! Which provider serves which model, and where its key comes from.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::anthropic::AnthropicProvider;
use crate::http::{Limits, Reach};
use crate::openai::OpenAiProvider;
use crate::{ModelError, Provider, ScriptedProvider};

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

/// Guesses the provider from well-known model id prefixes.
/// How the model ids of OpenAI's own API begin (fine-tunes are `ft:gpt-…`).
const OPENAI_FAMILIES: [&str; 6] = ["gpt-", "o1", "o3", "o4", "chatgpt-", "ft:"];
/// How the model ids of Anthropic's own API begin.
const ANTHROPIC_FAMILIES: [&str; 1] = ["claude-"];

fn infer(model: &str) -> Option<ProviderKind> {
    let m = model.to_ascii_lowercase();
    if OPENAI_FAMILIES.iter().any(|p| m.starts_with(p)) {
        Some(ProviderKind::Openai)
    } else if ANTHROPIC_FAMILIES.iter().any(|p| m.starts_with(p)) {
        Some(ProviderKind::Anthropic)
    } else {
        None
    }
}

/// Refuses, before any request, a model id that `kind`'s own API is not
/// known to serve: for OpenAI and Anthropic at their built-in base URLs,
/// an id outside their model families (a typo, or another provider's
/// model). `--assume-model-exists` sends it anyway; a configured base URL
/// (a gateway, a proxy) is not checked.
fn check_known(kind: ProviderKind, model: &str, config: &ModelConfig) -> Result<(), ModelError> {
    let families: &[&str] = match kind {
        ProviderKind::Openai => &OPENAI_FAMILIES,
        ProviderKind::Anthropic => &ANTHROPIC_FAMILIES,
        _ => return Ok(()),
    };
    if config.assume_model_exists || config.base_url.is_some() || infer(model) == Some(kind) {
        return Ok(());
    }
    Err(ModelError::Config(format!(
        "{} is not known to serve `{model}` (its model ids start with {}): check the id, name the provider that \
         serves it (--provider ollama, openrouter or openai-compatible), or pass --assume-model-exists to send it \
         anyway",
        kind.name(),
        families.join(", ")
    )))
}

/// Turns the configuration into a provider, or explains what is missing.
/// Keys not in the configuration are read from the process environment.
pub fn resolve(config: &ModelConfig) -> Result<Arc<dyn Provider>, ModelError> {
    resolve_with_env(config, &|name| std::env::var(name).ok())
}

/// [`resolve`], reading environment variables through `env` instead of the
/// process environment (so tests need not change it).
pub fn resolve_with_env(
    config: &ModelConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Arc<dyn Provider>, ModelError> {
    if config.assume_model_exists && config.provider.is_none() {
        return Err(ModelError::Config(
            "--assume-model-exists (`assume-model-exists` in `[model]`) skips the model lookup, so the provider must \
             be named: set --provider (`provider` in `[model]`)"
                .into(),
        ));
    }
    if config.provider == Some(ProviderKind::Scripted) || (config.model.is_none() && config.script.is_some()) {
        let Some(script) = &config.script else {
            return Err(ModelError::Config("the scripted provider needs a script file (--script FILE)".into()));
        };
        return Ok(Arc::new(ScriptedProvider::from_file(script)?));
    }
    let Some(model) = config.model.as_deref().filter(|m| !m.trim().is_empty()) else {
        return Err(ModelError::Config(
            "no model is configured, and nexo has no default: set NEXO_MODEL, pass --model, or set `model` in the \
             config file (for a local model also name its provider, e.g. --provider ollama)"
                .into(),
        ));
    };
    let Some(kind) = config.provider.or_else(|| infer(model)) else {
        return Err(ModelError::Config(format!(
            "cannot tell which provider serves `{model}`: name it with --provider (openai, openai-compatible, \
             ollama, openrouter or anthropic)"
        )));
    };
    check_known(kind, model, config)?;
    build(kind, model, config, env)
}

fn build(
    kind: ProviderKind,
    model: &str,
    config: &ModelConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Arc<dyn Provider>, ModelError> {
    let name = kind.name();
    let key = match (config.api_key.clone().filter(|k| !k.trim().is_empty()), kind.key_variable()) {
        (Some(key), _) => Some(key),
        (None, None) => None,
        (None, Some(variable)) => match env(variable).filter(|k| !k.trim().is_empty()) {
            Some(key) => Some(key),
            None => {
                return Err(ModelError::Config(format!(
                    "{name} needs an API key: set the environment variable {variable}"
                )));
            }
        },
    };
    let (base_url, reach) = base_url(kind, config)?;
    crate::endpoint::check_base(&base_url, name)?;
    let limits = Limits::from_config(config);
    match kind {
        ProviderKind::Anthropic => Ok(Arc::new(AnthropicProvider::new(model, &base_url, key, limits, reach)?)),
        ProviderKind::Scripted => {
            Err(ModelError::Config("the scripted provider needs a script file (--script FILE)".into()))
        }
        _ => Ok(Arc::new(OpenAiProvider::new(kind, model, &base_url, key, limits, reach)?)),
    }
}

/// The base URL and which addresses its server may have. The operator's
/// base URL may be on this machine or a private network (Ollama, llama.cpp),
/// as may Ollama's built-in one; the hosted APIs' built-in ones stay
/// public-only. A plugin never sets a base URL.
fn base_url(kind: ProviderKind, config: &ModelConfig) -> Result<(String, Reach), ModelError> {
    if let Some(url) = config.base_url.as_deref().map(str::trim).filter(|u| !u.is_empty()) {
        return Ok((url.to_string(), Reach::OperatorHost));
    }
    match kind.default_base_url() {
        Some(url) if kind == ProviderKind::Ollama => Ok((url.to_string(), Reach::OperatorHost)),
        Some(url) => Ok((url.to_string(), Reach::Public)),
        None => Err(ModelError::Config(format!(
            "the {} provider needs the server's base URL, for example http://localhost:8000/v1: set --base-url (or \
             `base-url` in the config file's `[model]`)",
            kind.name()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_operators_base_url_and_ollamas_local_default_may_be_private() {
        let configured = ModelConfig { base_url: Some(" http://127.0.0.1:8080/v1 ".into()), ..ModelConfig::default() };
        for kind in [ProviderKind::Openai, ProviderKind::OpenaiCompatible, ProviderKind::Anthropic] {
            let (url, reach) = base_url(kind, &configured).unwrap();
            assert_eq!((url.as_str(), reach), ("http://127.0.0.1:8080/v1", Reach::OperatorHost), "{kind:?}");
        }
        let defaults = ModelConfig::default();
        for kind in [ProviderKind::Openai, ProviderKind::Openrouter, ProviderKind::Anthropic] {
            let (url, reach) = base_url(kind, &defaults).unwrap();
            assert!(url.starts_with("https://"), "{url}");
            assert_eq!(reach, Reach::Public, "{kind:?}");
        }
        assert_eq!(
            base_url(ProviderKind::Ollama, &defaults).unwrap(),
            ("http://localhost:11434/v1".to_string(), Reach::OperatorHost)
        );
        assert!(base_url(ProviderKind::OpenaiCompatible, &defaults).is_err());
    }
}
