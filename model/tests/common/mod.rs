//! Helpers shared by the provider tests: configurations pointing at the mock
//! server, requests, and a sink that records streamed text.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)] // test code; each test file uses part of it

use std::sync::{Arc, Mutex};
use std::time::Duration;

use nexo_model::mock::MockServer;
use nexo_model::{
    DeltaSink, Message, ModelConfig, ModelError, Provider, ProviderKind, Request, Response, ToolSpec, resolve_with_env,
};

/// The key the tests send; no message may contain it.
pub const KEY: &str = "sk-test-0123456789-secret";

/// A configuration for `kind` at the mock server, with a tiny backoff.
pub fn config(kind: ProviderKind, server: &MockServer) -> ModelConfig {
    let base_url = match kind {
        ProviderKind::Anthropic => server.anthropic_base_url(),
        _ => server.openai_base_url(),
    };
    ModelConfig {
        model: Some("test-model".into()),
        provider: Some(kind),
        base_url: Some(base_url),
        api_key: Some(KEY.into()),
        retry_base_delay: Some(Duration::from_millis(1)),
        ..ModelConfig::default()
    }
}

/// Resolves `config` with an empty environment.
pub fn provider(config: &ModelConfig) -> Arc<dyn Provider> {
    resolve_with_env(config, &|_| None).unwrap()
}

/// A one-message request offering one tool.
pub fn request(text: &str) -> Request {
    Request {
        model: "test-model".into(),
        messages: vec![Message::User { text: text.into() }],
        tools: vec![ToolSpec {
            name: "read_file".into(),
            description: "Reads a file.".into(),
            parameters: serde_json::json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        }],
        max_tokens: 256,
    }
}

/// Runs one turn, streaming when `stream`; returns the result and the
/// streamed pieces.
pub async fn run(
    provider: &dyn Provider,
    request: &Request,
    stream: bool,
) -> (Result<Response, ModelError>, Vec<String>) {
    let pieces = Mutex::new(Vec::new());
    let sink = |s: &str| pieces.lock().unwrap().push(s.to_string());
    let deltas: Option<DeltaSink<'_>> = if stream { Some(&sink) } else { None };
    let result = provider.complete(request, deltas).await;
    (result, pieces.into_inner().unwrap())
}

/// Checks that an error's text names the provider and leaks no key.
pub fn assert_clean(error: &ModelError, provider: &str) {
    let text = error.to_string();
    assert!(text.contains(provider), "{text}");
    assert!(!text.contains(KEY), "the key leaked: {text}");
    assert!(!format!("{error:?}").contains(KEY), "the key leaked: {error:?}");
}
