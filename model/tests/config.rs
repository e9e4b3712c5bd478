//! Resolving a configuration into a provider: the errors that explain what is
//! missing, keys from the (injected) environment, and keys kept out of
//! `Debug` output.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

mod common;

use common::{KEY, request, run};
use nexo_model::mock::{MockServer, Reply};
use nexo_model::{ModelConfig, ModelError, ProviderKind, resolve, resolve_with_env};

fn config_error(config: &ModelConfig, env: &dyn Fn(&str) -> Option<String>) -> String {
    match resolve_with_env(config, env) {
        Err(ModelError::Config(message)) => message,
        Err(other) => panic!("expected a configuration error, got {other:?}"),
        Ok(p) => panic!("expected a configuration error, got the provider {}", p.name()),
    }
}

fn no_env(_: &str) -> Option<String> {
    None
}

fn model(id: &str) -> ModelConfig {
    ModelConfig { model: Some(id.into()), ..ModelConfig::default() }
}

#[test]
fn no_model_says_how_to_set_one() {
    let message = config_error(&ModelConfig::default(), &no_env);
    assert!(message.contains("NEXO_MODEL"), "{message}");
    let message = config_error(&model("  "), &no_env);
    assert!(message.contains("NEXO_MODEL"), "{message}");
}

#[test]
fn an_unknown_model_needs_a_provider() {
    let message = config_error(&model("gemma3:12b"), &no_env);
    assert!(message.contains("gemma3:12b") && message.contains("--provider"), "{message}");
}

#[test]
fn assume_model_exists_needs_a_provider() {
    let config = ModelConfig { assume_model_exists: true, ..model("gpt-9") };
    let message = config_error(&config, &no_env);
    assert!(message.contains("--assume-model-exists") && message.contains("--provider"), "{message}");
    let config = ModelConfig { provider: Some(ProviderKind::Ollama), ..config };
    assert_eq!(resolve_with_env(&config, &no_env).unwrap().name(), "ollama");
}

/// OpenAI's and Anthropic's own APIs refuse an id outside their model
/// families before any request, unless the operator assumes it exists or
/// points at another base URL.
#[test]
fn an_id_the_provider_is_not_known_to_serve_is_refused_unless_assumed() {
    let env = |_: &str| Some("sk-test".to_string());
    for (kind, id) in [(ProviderKind::Openai, "llama3"), (ProviderKind::Anthropic, "gpt-4o")] {
        let config = ModelConfig { provider: Some(kind), ..model(id) };
        let message = config_error(&config, &env);
        assert!(message.contains("is not known to serve") && message.contains("--assume-model-exists"), "{message}");
        let assumed = ModelConfig { assume_model_exists: true, ..config.clone() };
        assert_eq!(resolve_with_env(&assumed, &env).unwrap().name(), kind.name());
        let gateway = ModelConfig { base_url: Some("https://gateway.example/v1".into()), ..config };
        assert_eq!(resolve_with_env(&gateway, &env).unwrap().name(), kind.name());
    }
    for id in ["gpt-4o-mini", "o3-mini", "ft:gpt-4o-mini:org::abc"] {
        let config = ModelConfig { provider: Some(ProviderKind::Openai), ..model(id) };
        assert_eq!(resolve_with_env(&config, &env).unwrap().name(), "openai", "{id}");
    }
    // Other providers serve what their servers hold: not checked.
    let config = ModelConfig { provider: Some(ProviderKind::Openrouter), ..model("meta-llama/llama-3.3-70b") };
    assert_eq!(resolve_with_env(&config, &env).unwrap().name(), "openrouter");
}

#[test]
fn a_missing_key_names_the_variable() {
    for (id, kind, variable) in [
        ("gpt-4o-mini", None, "OPENAI_API_KEY"),
        ("claude-sonnet-4-5", None, "ANTHROPIC_API_KEY"),
        ("meta-llama/llama-3.3-70b-instruct", Some(ProviderKind::Openrouter), "OPENROUTER_API_KEY"),
    ] {
        let config = ModelConfig { provider: kind, ..model(id) };
        let message = config_error(&config, &no_env);
        assert!(message.contains(variable), "{message}");
        // An empty variable is as good as none.
        let message = config_error(&config, &|_| Some(String::new()));
        assert!(message.contains(variable), "{message}");
    }
}

#[test]
fn keys_from_the_environment_and_providers_from_ids() {
    let env = |name: &str| (name.ends_with("_API_KEY")).then(|| format!("key-from-{name}"));
    for (id, kind, name) in [
        ("gpt-4o-mini", None, "openai"),
        ("o3-mini", None, "openai"),
        ("claude-sonnet-4-5", None, "anthropic"),
        ("x/y", Some(ProviderKind::Openrouter), "openrouter"),
        ("llama3.2", Some(ProviderKind::Ollama), "ollama"),
    ] {
        let p = resolve_with_env(&ModelConfig { provider: kind, ..model(id) }, &env).unwrap();
        assert_eq!((p.name(), p.model()), (name, id));
    }
}

#[tokio::test]
async fn the_environment_key_is_sent() {
    let server = MockServer::start().await.unwrap();
    server.push(Reply::text("ok"));
    server.push(Reply::text("ok"));
    let env = |name: &str| (name == "ANTHROPIC_API_KEY").then(|| "env-key".to_string());
    let config = ModelConfig { base_url: Some(server.anthropic_base_url()), ..model("claude-x") };
    let p = resolve_with_env(&config, &env).unwrap();
    run(p.as_ref(), &request("hi"), false).await.0.unwrap();
    // A configured key wins over the environment.
    let config = ModelConfig { api_key: Some(KEY.into()), ..config };
    let p = resolve_with_env(&config, &env).unwrap();
    run(p.as_ref(), &request("hi"), false).await.0.unwrap();
    let sent = server.requests();
    assert_eq!(sent[0].header("x-api-key"), Some("env-key"));
    assert_eq!(sent[1].header("x-api-key"), Some(KEY));
}

#[test]
fn keyless_providers_read_no_variable() {
    // An OpenAI key must not travel to an arbitrary server.
    let env = |name: &str| -> Option<String> { panic!("{name} was read") };
    let config = ModelConfig {
        provider: Some(ProviderKind::OpenaiCompatible),
        base_url: Some("http://127.0.0.1:8000/v1".into()),
        ..model("local")
    };
    assert_eq!(resolve_with_env(&config, &env).unwrap().name(), "openai-compatible");
    let config = ModelConfig { provider: Some(ProviderKind::Ollama), ..model("llama3.2") };
    assert_eq!(resolve_with_env(&config, &env).unwrap().name(), "ollama");
}

#[test]
fn openai_compatible_needs_a_base_url() {
    let config = ModelConfig { provider: Some(ProviderKind::OpenaiCompatible), ..model("local") };
    let message = config_error(&config, &no_env);
    assert!(message.contains("base URL") && message.contains("--base-url"), "{message}");
    let config = ModelConfig { base_url: Some("localhost:8000".into()), ..config };
    let message = config_error(&config, &no_env);
    assert!(message.contains("http://"), "{message}");
    let config = ModelConfig { base_url: Some("not a url".into()), ..config };
    config_error(&config, &no_env);
}

#[test]
fn debug_output_hides_the_key() {
    let config = ModelConfig { api_key: Some(KEY.into()), ..model("gpt-4o") };
    let debug = format!("{config:?}");
    assert!(!debug.contains(KEY), "{debug}");
    assert!(debug.contains("api_key: Some(\"<redacted>\")"), "{debug}");
    assert!(debug.contains("gpt-4o"), "{debug}");
    // `resolve` itself needs no environment when the key is configured.
    assert_eq!(resolve(&config).unwrap().name(), "openai");
}
