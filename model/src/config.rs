//! Which provider serves which model, and where its key comes from.

use std::sync::Arc;

use crate::anthropic::AnthropicProvider;
use crate::http::{Limits, Reach};
use crate::openai::OpenAiProvider;
use crate::settings::{ModelConfig, ProviderKind};
use crate::{ModelError, Provider, ScriptedProvider};

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
    if let Some(t) = config.temperature.filter(|t| !(0.0..=2.0).contains(t)) {
        return Err(ModelError::Config(format!(
            "the temperature is {t}: it must be from 0 to 2 (`--temperature 0.2`, `temperature` in `[model]`)"
        )));
    }
    let (temperature, choice) = (config.temperature, config.tool_choice);
    match kind {
        ProviderKind::Anthropic => {
            Ok(Arc::new(AnthropicProvider::new(model, &base_url, key, limits, reach)?.sampling(temperature, choice)))
        }
        ProviderKind::Scripted => {
            Err(ModelError::Config("the scripted provider needs a script file (--script FILE)".into()))
        }
        _ => {
            Ok(Arc::new(OpenAiProvider::new(kind, model, &base_url, key, limits, reach)?.sampling(temperature, choice)))
        }
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
