//! The OpenAI-compatible provider against a real llama.cpp `llama-server`
//! with a small real model (SmolLM2 135M), built by `scripts/llama-deps.sh`:
//!
//! ```sh
//! ./scripts/llama-deps.sh
//! NEXO_LIVE_LLAMA=1 cargo test -p nexo-model --test llama
//! ```
//!
//! Without the server the tests are skipped (listed by `make test`); with
//! `NEXO_LIVE_LLAMA=1` they fail instead. The model is weak: they assert the
//! protocol (fields, shapes, counts, typed errors), never its wording. The
//! server answers greedily, so the same request gets the same answer.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

mod common;

use std::time::{Duration, Instant};

use common::{provider, run};
use nexo_model::{Message, ModelConfig, ModelError, Provider, ProviderKind, Request, StopReason, ToolCall, ToolSpec};
use nexo_testkit::llama::LlamaServer;
use serde_json::json;

const MODES: [bool; 2] = [false, true];

/// The provider nexo builds for `--provider openai-compatible --base-url`,
/// with no key (llama-server wants none) and no retries to wait through.
fn llama_provider(server: &LlamaServer) -> std::sync::Arc<dyn Provider> {
    provider(&ModelConfig {
        model: Some("smollm2".into()),
        provider: Some(ProviderKind::OpenaiCompatible),
        base_url: Some(server.base_url()),
        timeout: Some(Duration::from_secs(300)),
        max_retries: Some(0),
        ..ModelConfig::default()
    })
}

fn chat(messages: Vec<Message>, tools: Vec<ToolSpec>, max_tokens: u32) -> Request {
    Request { model: "smollm2".into(), messages, tools, max_tokens }
}

fn weather_tool() -> ToolSpec {
    ToolSpec {
        name: "get_weather".into(),
        description: "Gets the current weather in a city.".into(),
        parameters: json!({
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city's name"}},
            "required": ["city"],
        }),
    }
}

/// Plain chat and streaming: text arrives (in several deltas when
/// streamed), usage is parsed from both answers, `max_tokens` goes out in
/// the field llama.cpp reads, and its `length` finish is a `MaxTokens` stop.
#[tokio::test]
async fn llama_server_chats_plain_and_streamed_with_usage() {
    let Some(server) = LlamaServer::start("llama_server_chats_plain_and_streamed_with_usage", 2048) else { return };
    let p = llama_provider(&server);
    let story = chat(
        vec![
            Message::System { text: "You are a storyteller.".into() },
            Message::User { text: "Tell me a long story about a dragon and a lighthouse keeper.".into() },
        ],
        vec![],
        12,
    );
    let mut prompt_tokens = Vec::new();
    for stream in MODES {
        let (result, pieces) = run(p.as_ref(), &story, stream).await;
        let response = result.unwrap_or_else(|e| panic!("stream {stream}: {e}\n{}", server.log()));
        assert!(!response.text.trim().is_empty(), "stream {stream}: {response:?}");
        assert!(response.tool_calls.is_empty(), "{response:?}");
        // A story is longer than 12 tokens: the server stops at the cap.
        assert_eq!(response.stop, StopReason::MaxTokens, "stream {stream}: {response:?}");
        assert_eq!(response.usage.output_tokens, 12, "stream {stream}: {response:?}");
        assert!(response.usage.input_tokens > 10, "stream {stream}: {response:?}");
        prompt_tokens.push(response.usage.input_tokens);
        if stream {
            assert!(pieces.len() > 1, "the text should arrive in deltas: {pieces:?}");
            assert_eq!(pieces.concat(), response.text);
        } else {
            assert!(pieces.is_empty());
        }
    }
    // The same prompt, tokenized the same way, counted by both answers.
    assert_eq!(prompt_tokens[0], prompt_tokens[1]);

    // A short answer ends on its own.
    let hello = chat(vec![Message::User { text: "Say hello.".into() }], vec![], 100);
    for stream in MODES {
        let response = run(p.as_ref(), &hello, stream).await.0.unwrap();
        assert_eq!(response.stop, StopReason::EndTurn, "stream {stream}: {response:?}");
        assert!(response.usage.output_tokens > 0 && response.usage.output_tokens < 100, "{response:?}");
    }
}

/// Tool calls as nexo sends them (the tools offered, an earlier call with
/// its arguments as a JSON string, its result, an error result) reach
/// llama-server's chat template as the canonical OpenAI body does: the prompt
/// the server renders from nexo's request has exactly as many tokens as the
/// one it renders from the hand-written body (its own `/apply-template` and
/// `/tokenize`), streamed or not. The 135M model makes no tool calls
/// reliably (not even with `tool_choice: required` on this server), so the
/// answers' calls are not asserted; the mock's tests cover their parsing.
#[tokio::test]
async fn llama_server_renders_nexos_tool_conversation_as_openais() {
    let Some(server) = LlamaServer::start("llama_server_renders_nexos_tool_conversation_as_openais", 4096) else {
        return;
    };
    let p = llama_provider(&server);
    let calls = vec![
        ToolCall { id: "call_paris".into(), name: "get_weather".into(), arguments: json!({"city": "Paris"}) },
        ToolCall { id: "call_oslo".into(), name: "get_weather".into(), arguments: json!({"city": "Oslo"}) },
    ];
    let messages = vec![
        Message::System { text: "You answer questions about the weather by calling get_weather.".into() },
        Message::User { text: "What is the weather in Paris and Oslo?".into() },
        Message::Assistant { text: String::new(), tool_calls: calls },
        Message::ToolResult {
            call_id: "call_paris".into(),
            name: "get_weather".into(),
            content: "sunny, 21 C".into(),
            is_error: false,
        },
        Message::ToolResult {
            call_id: "call_oslo".into(),
            name: "get_weather".into(),
            content: "no station in Oslo".into(),
            is_error: true,
        },
        Message::Assistant { text: "It is sunny in Paris; Oslo has no station.".into(), tool_calls: vec![] },
        Message::User { text: "And in Rome?".into() },
    ];
    let canonical = json!({
        "model": "smollm2",
        "messages": [
            {"role": "system", "content": "You answer questions about the weather by calling get_weather."},
            {"role": "user", "content": "What is the weather in Paris and Oslo?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_paris", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
                {"id": "call_oslo", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}},
            ]},
            {"role": "tool", "tool_call_id": "call_paris", "content": "sunny, 21 C"},
            {"role": "tool", "tool_call_id": "call_oslo", "content": "Error: no station in Oslo"},
            {"role": "assistant", "content": "It is sunny in Paris; Oslo has no station."},
            {"role": "user", "content": "And in Rome?"},
        ],
        "tools": [{"type": "function", "function": {
            "name": "get_weather",
            "description": "Gets the current weather in a city.",
            "parameters": weather_tool().parameters,
        }}],
    });
    let with_tools = prompt_tokens(&server, &canonical);
    let mut bare = canonical.clone();
    bare.as_object_mut().unwrap().remove("tools");
    // The control: the template renders the tools, so leaving them out shows.
    assert!(with_tools > prompt_tokens(&server, &bare) + 20, "the tools are not in the prompt");

    let request = chat(messages, vec![weather_tool()], 1);
    for stream in MODES {
        let (result, _) = run(p.as_ref(), &request, stream).await;
        let response = result.unwrap_or_else(|e| panic!("stream {stream}: {e}\n{}", server.log()));
        assert_eq!(response.usage.input_tokens, with_tools, "stream {stream}: {response:?}");
        assert_eq!(response.usage.output_tokens, 1, "stream {stream}: {response:?}");
    }
}

/// How many tokens the prompt llama-server renders from `body` has.
fn prompt_tokens(server: &LlamaServer, body: &serde_json::Value) -> u64 {
    let (status, rendered) = server.post("/apply-template", &body.to_string());
    assert_eq!(status, 200, "{rendered}");
    let prompt: serde_json::Value = serde_json::from_str(&rendered).unwrap();
    let request = json!({"content": prompt["prompt"], "add_special": true});
    let (status, tokens) = server.post("/tokenize", &request.to_string());
    assert_eq!(status, 200, "{tokens}");
    let tokens: serde_json::Value = serde_json::from_str(&tokens).unwrap();
    tokens["tokens"].as_array().unwrap().len() as u64
}

/// A prompt longer than the server's context is a typed error at once (a
/// 400 is not retried), naming the sizes and the fix.
#[tokio::test]
async fn llama_server_context_overflow_is_a_typed_error() {
    let Some(server) = LlamaServer::start("llama_server_context_overflow_is_a_typed_error", 256) else { return };
    let p = llama_provider(&server);
    let long = "the lighthouse keeper counted the waves again ".repeat(100);
    let request = chat(vec![Message::User { text: long }], vec![], 16);
    for stream in MODES {
        let started = Instant::now();
        let (result, pieces) = run(p.as_ref(), &request, stream).await;
        let error = result.unwrap_err();
        let ModelError::Provider { provider, status, message } = &error else {
            panic!("stream {stream}: not a provider error: {error:?}");
        };
        assert_eq!((provider.as_str(), *status), ("openai-compatible", 400), "{error}");
        assert!(message.contains("context size (256 tokens)"), "stream {stream}: {error}");
        assert!(message.contains("restart llama-server with a larger one (`-c`"), "the fix is named: {error}");
        assert!(pieces.is_empty());
        assert!(started.elapsed() < Duration::from_secs(30), "not retried: {:?}", started.elapsed());
    }
}
