//! Whole agent runs: real components, the host loop, and real HTTP to a
//! loopback server speaking the OpenAI and Anthropic wire formats.

use std::sync::Arc;

use nexo::agent_loop::{LoopLimits, Status};
use nexo::settings::{Providers, RunContext, RunLimits, RunOptions};
use nexo::{Plugin, RunError};
use nexo_model::mock::{MockServer, MockToolCall, Reply, long_text};
use nexo_model::{ModelConfig, ProviderKind, resolve};
use nexo_tests as built;
use serde_json::json;

use crate::engine;

fn provider(server: &MockServer, kind: ProviderKind) -> Arc<dyn nexo_model::Provider> {
    let base_url = match kind {
        ProviderKind::Anthropic => server.anthropic_base_url(),
        _ => server.openai_base_url(),
    };
    let config = ModelConfig {
        model: Some("test-model".into()),
        provider: Some(kind),
        base_url: Some(base_url),
        api_key: Some("sk-test-secret".into()),
        retry_base_delay: Some(std::time::Duration::from_millis(1)),
        ..ModelConfig::default()
    };
    resolve(&config).unwrap()
}

async fn workspace() -> (tempfile::TempDir, Arc<nexo_sandbox::LocalSandbox>) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("README.md"), "# nexo\nruns agents").unwrap();
    let sandbox = Arc::new(nexo_sandbox::LocalSandbox::open(dir.path()).unwrap());
    (dir, sandbox)
}

async fn full_run(kind: ProviderKind, stream: bool) {
    let server = MockServer::start().await.unwrap();
    server.push(Reply::tool_calls(vec![
        MockToolCall::new("call_1", "glob", json!({ "pattern": "*.md" })),
        MockToolCall::new("call_2", "read_file", json!({ "path": "README.md" })),
    ]));
    server.push(Reply::error(429, "slow down"));
    server.push(Reply::text("The readme says nexo runs agents."));
    let (_dir, sandbox) = workspace().await;
    let deltas = Arc::new(std::sync::Mutex::new(String::new()));
    let sink = {
        let deltas = deltas.clone();
        move |e: &nexo::agent_loop::Event| {
            if let nexo::agent_loop::Event::TextDelta { text } = e {
                deltas.lock().unwrap().push_str(text);
            }
        }
    };
    let options = RunOptions {
        providers: Providers { sandbox: Some(sandbox), model: Some(provider(&server, kind)), ..Providers::default() },
        limits: RunLimits { prompt: LoopLimits { stream, ..LoopLimits::default() }, ..RunLimits::default() },
        context: RunContext { events: Some(Arc::new(sink)), ..RunContext::default() },
        ..RunOptions::default()
    };
    let plugin = Plugin::load(engine(), built::HELLO).await.unwrap();
    let mut instance = plugin.instantiate_agent(&options).await.unwrap();
    let run = instance.run("What does the readme say?").await.unwrap();
    assert_eq!(run.answer, "The readme says nexo runs agents.");
    let outcome = run.last_prompt.unwrap();
    assert_eq!((outcome.status.clone(), outcome.turns), (Status::Completed, 2));
    if stream {
        assert_eq!(*deltas.lock().unwrap(), "The readme says nexo runs agents.");
    }

    // What went over the wire: the agent's instructions, its two tools, the
    // tool results, and the key only in its header.
    let sent = server.requests();
    assert_eq!(sent.len(), 3, "two turns plus one retried 429");
    let first = &sent[0].body;
    let last = &sent[2].body;
    let text = last.to_string();
    assert!(text.contains("# nexo") && text.contains("README.md"), "tool results reach the model: {text}");
    match kind {
        ProviderKind::Anthropic => {
            assert!(first["system"].as_str().unwrap().starts_with("You are a helpful assistant"));
            let tools: Vec<&str> =
                first["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
            assert_eq!(tools, ["read_file", "glob"]);
            assert_eq!(sent[0].header("x-api-key"), Some("sk-test-secret"));
        }
        _ => {
            assert_eq!(first["messages"][0]["role"], "system");
            let tools: Vec<&str> =
                first["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
            assert_eq!(tools, ["read_file", "glob"]);
            assert_eq!(sent[0].header("authorization"), Some("Bearer sk-test-secret"));
        }
    }
    for r in &sent {
        assert!(!r.body.to_string().contains("sk-test-secret"), "the key never goes into a body");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_runs_against_an_openai_compatible_server() {
    full_run(ProviderKind::OpenaiCompatible, false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_runs_against_an_openai_compatible_server_streaming() {
    full_run(ProviderKind::OpenaiCompatible, true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_runs_against_anthropic() {
    full_run(ProviderKind::Anthropic, false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_runs_against_anthropic_streaming() {
    full_run(ProviderKind::Anthropic, true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn provider_failures_end_the_run_with_a_clear_error_and_the_host_goes_on() {
    let plugin = Plugin::load(engine(), built::HELLO).await.unwrap();
    for (reply, expect) in [
        (Reply::error(500, "upstream exploded"), "HTTP 500: upstream exploded"),
        (Reply::error(401, "bad key"), "HTTP 401: bad key"),
        (Reply::malformed(), "cannot be read"),
        (Reply::truncated("half an ans"), "cut"),
    ] {
        let server = MockServer::start().await.unwrap();
        for _ in 0..4 {
            server.push(reply.clone());
        }
        let options = RunOptions {
            providers: Providers {
                model: Some(provider(&server, ProviderKind::OpenaiCompatible)),
                ..Providers::default()
            },
            limits: RunLimits {
                prompt: LoopLimits { stream: matches!(expect, "cut"), ..LoopLimits::default() },
                ..RunLimits::default()
            },
            ..RunOptions::default()
        };
        match plugin.run_agent("hi", &options).await {
            Err(RunError::AgentFailed { plugin, reason }) => {
                assert_eq!(plugin, "hello");
                assert!(reason.contains(expect), "{reason}");
                assert!(!reason.contains("sk-test-secret"), "{reason}");
            }
            other => panic!("expected AgentFailed for {expect}, got {other:?}"),
        }
    }
    // An unreachable model is a clear error too.
    let config = ModelConfig {
        model: Some("m".into()),
        provider: Some(ProviderKind::OpenaiCompatible),
        base_url: Some("http://127.0.0.1:9/v1".into()),
        max_retries: Some(0),
        ..ModelConfig::default()
    };
    let options = RunOptions {
        providers: Providers { model: Some(resolve(&config).unwrap()), ..Providers::default() },
        ..RunOptions::default()
    };
    match plugin.run_agent("hi", &options).await {
        Err(RunError::AgentFailed { reason, .. }) => assert!(reason.contains("unavailable"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn long_outputs_arrive_whole() {
    let server = MockServer::start().await.unwrap();
    let text = long_text(60_000);
    server.push(Reply::text(text.clone()));
    let options = RunOptions {
        providers: Providers { model: Some(provider(&server, ProviderKind::Anthropic)), ..Providers::default() },
        limits: RunLimits { prompt: LoopLimits { stream: true, ..LoopLimits::default() }, ..RunLimits::default() },
        ..RunOptions::default()
    };
    let plugin = Plugin::load(engine(), built::HELLO).await.unwrap();
    assert_eq!(plugin.run_agent("write a lot", &options).await.unwrap(), text);
}
