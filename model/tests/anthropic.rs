//! The Anthropic Messages provider against the mock server, over real HTTP on
//! loopback: every case both non-streaming and streaming.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

mod common;

use std::time::{Duration, Instant};

use common::{KEY, assert_clean, config, provider, request, run};
use nexo_model::mock::{MockServer, MockToolCall, Reply, long_text};
use nexo_model::{Message, ModelError, ProviderKind, Request, StopReason, ToolCall, ToolSpec, Usage};
use serde_json::json;

const MODES: [bool; 2] = [false, true];

#[tokio::test]
async fn text_answer_usage_and_request_shape() {
    let server = MockServer::start().await.unwrap();
    let p = provider(&config(ProviderKind::Anthropic, &server));
    assert_eq!((p.name(), p.model()), ("anthropic", "test-model"));
    for stream in MODES {
        server.push(Reply::text("Hello there, how are you today?").with_usage(42, 9));
        let (result, pieces) = run(p.as_ref(), &request("hi"), stream).await;
        let response = result.unwrap();
        assert_eq!(response.text, "Hello there, how are you today?");
        assert_eq!(response.stop, StopReason::EndTurn);
        assert_eq!(response.usage, Usage { input_tokens: 42, output_tokens: 9 });
        if stream {
            assert!(pieces.len() > 1, "{pieces:?}");
            assert_eq!(pieces.concat(), response.text);
        }
    }
    for (r, stream) in server.requests().iter().zip(MODES) {
        assert_eq!(r.path, "/v1/messages");
        assert_eq!(r.header("x-api-key"), Some(KEY));
        assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
        assert_eq!(r.header("authorization"), None);
        assert_eq!(r.body["model"], "test-model");
        assert_eq!(r.body["max_tokens"], 256);
        assert_eq!(r.is_stream(), stream);
        assert!(r.body.get("system").is_none());
        assert_eq!(r.body["messages"], json!([{"role": "user", "content": [{"type": "text", "text": "hi"}]}]));
        assert_eq!(
            r.body["tools"],
            json!([{"name": "read_file", "description": "Reads a file.",
                    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}])
        );
    }
}

#[tokio::test]
async fn several_fragmented_tool_calls() {
    let server = MockServer::start().await.unwrap();
    let p = provider(&config(ProviderKind::Anthropic, &server));
    let first = json!({"path": "src/main.rs", "range": {"start": 1, "end": 40}, "note": "naïve — ok"});
    let second = json!({"pattern": "fn main", "paths": ["a", "b", "c"]});
    for stream in MODES {
        server.push(
            Reply::tool_calls(vec![
                MockToolCall::new("toolu_a", "read_file", first.clone()),
                MockToolCall::new("toolu_b", "grep", second.clone()),
                MockToolCall::new("toolu_c", "list", json!({})),
            ])
            .with_text("Let me look.")
            .with_usage(100, 50),
        );
        let (result, pieces) = run(p.as_ref(), &request("look"), stream).await;
        let response = result.unwrap();
        assert_eq!(response.text, "Let me look.");
        assert_eq!(response.stop, StopReason::ToolUse);
        assert_eq!(response.usage, Usage { input_tokens: 100, output_tokens: 50 });
        assert_eq!(
            response.tool_calls,
            vec![
                ToolCall { id: "toolu_a".into(), name: "read_file".into(), arguments: first.clone() },
                ToolCall { id: "toolu_b".into(), name: "grep".into(), arguments: second.clone() },
                ToolCall { id: "toolu_c".into(), name: "list".into(), arguments: json!({}) },
            ]
        );
        if stream {
            assert_eq!(pieces.concat(), "Let me look.");
        }
    }
}

#[tokio::test]
async fn unparsable_tool_input_names_the_tool() {
    let server = MockServer::start().await.unwrap();
    let p = provider(&config(ProviderKind::Anthropic, &server));
    for stream in MODES {
        server.push(Reply::tool_calls(vec![MockToolCall::raw_arguments("toolu_1", "write_file", "{\"path\": ")]));
        let (result, _) = run(p.as_ref(), &request("write"), stream).await;
        let error = result.unwrap_err();
        assert!(
            matches!(&error, ModelError::Protocol { provider, message }
            if provider == "anthropic" && message.contains("`write_file`")),
            "{error}"
        );
    }
}

#[tokio::test]
async fn a_whole_conversation_goes_out_in_the_wire_format() {
    let server = MockServer::start().await.unwrap();
    let p = provider(&config(ProviderKind::Anthropic, &server));
    let request = Request {
        model: "test-model".into(),
        messages: vec![
            Message::System { text: "You are terse.".into() },
            Message::System { text: "Use tools.".into() },
            Message::User { text: "What is in a and b?".into() },
            Message::Assistant {
                text: "Reading both.".into(),
                tool_calls: vec![
                    ToolCall { id: "t1".into(), name: "read_file".into(), arguments: json!({"path": "a"}) },
                    ToolCall { id: "t2".into(), name: "read_file".into(), arguments: json!({"path": "b"}) },
                ],
            },
            Message::ToolResult {
                call_id: "t1".into(),
                name: "read_file".into(),
                content: "alpha".into(),
                is_error: false,
            },
            Message::ToolResult {
                call_id: "t2".into(),
                name: "read_file".into(),
                content: "no such file".into(),
                is_error: true,
            },
            Message::Assistant {
                text: String::new(),
                tool_calls: vec![ToolCall { id: "t3".into(), name: "ls".into(), arguments: json!({}) }],
            },
            Message::ToolResult { call_id: "t3".into(), name: "ls".into(), content: "a".into(), is_error: false },
            Message::Assistant { text: "a holds alpha; b is missing.".into(), tool_calls: vec![] },
            Message::User { text: "Thanks.".into() },
        ],
        tools: vec![ToolSpec {
            name: "ls".into(),
            description: "Lists.".into(),
            parameters: json!({"type": "object"}),
        }],
        max_tokens: 100,
    };
    for stream in MODES {
        server.push(Reply::text("You're welcome."));
        run(p.as_ref(), &request, stream).await.0.unwrap();
    }
    let expected = json!([
        {"role": "user", "content": [{"type": "text", "text": "What is in a and b?"}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Reading both."},
            {"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": "a"}},
            {"type": "tool_use", "id": "t2", "name": "read_file", "input": {"path": "b"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "alpha", "is_error": false},
            {"type": "tool_result", "tool_use_id": "t2", "content": "no such file", "is_error": true},
        ]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t3", "name": "ls", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t3", "content": "a", "is_error": false}]},
        {"role": "assistant", "content": [{"type": "text", "text": "a holds alpha; b is missing."}]},
        {"role": "user", "content": [{"type": "text", "text": "Thanks."}]},
    ]);
    for sent in server.requests() {
        assert_eq!(sent.body["system"], "You are terse.\n\nUse tools.");
        assert_eq!(sent.body["messages"], expected);
        assert_eq!(sent.body["max_tokens"], 100);
        assert_eq!(
            sent.body["tools"],
            json!([{"name": "ls", "description": "Lists.", "input_schema": {"type": "object"}}])
        );
    }
}

#[tokio::test]
async fn stop_reasons() {
    let server = MockServer::start().await.unwrap();
    let p = provider(&config(ProviderKind::Anthropic, &server));
    for stream in MODES {
        for (wire, expected) in [
            ("max_tokens", StopReason::MaxTokens),
            ("end_turn", StopReason::EndTurn),
            ("stop_sequence", StopReason::EndTurn),
            ("refusal", StopReason::Other("refusal".into())),
        ] {
            server.push(Reply::text("partial").with_stop(wire));
            let (result, _) = run(p.as_ref(), &request("go"), stream).await;
            assert_eq!(result.unwrap().stop, expected, "{wire}, stream {stream}");
        }
    }
}

#[tokio::test]
async fn retry_after_429_is_honoured() {
    let server = MockServer::start().await.unwrap();
    let p = provider(&config(ProviderKind::Anthropic, &server));
    for stream in MODES {
        let before = server.requests().len();
        server.push(Reply::error(429, "Number of request tokens has exceeded your rate limit").with_retry_after(1));
        server.push(Reply::text("finally"));
        let start = Instant::now();
        let (result, _) = run(p.as_ref(), &request("go"), stream).await;
        assert_eq!(result.unwrap().text, "finally");
        let elapsed = start.elapsed();
        assert!(elapsed >= Duration::from_millis(950) && elapsed < Duration::from_secs(10), "{elapsed:?}");
        assert_eq!(server.requests().len() - before, 2);
    }
}

#[tokio::test]
async fn retry_on_500_and_529_then_success() {
    let server = MockServer::start().await.unwrap();
    let p = provider(&config(ProviderKind::Anthropic, &server));
    for stream in MODES {
        server.push(Reply::error(500, "internal"));
        server.push(Reply::error(529, "Overloaded"));
        server.push(Reply::text("recovered"));
        let (result, _) = run(p.as_ref(), &request("go"), stream).await;
        assert_eq!(result.unwrap().text, "recovered");
    }
    assert_eq!(server.requests().len(), 6);
}

#[tokio::test]
async fn retries_exhausted() {
    let server = MockServer::start().await.unwrap();
    let mut cfg = config(ProviderKind::Anthropic, &server);
    cfg.max_retries = Some(1);
    let p = provider(&cfg);
    for stream in MODES {
        server.push(Reply::error(529, "Overloaded"));
        server.push(Reply::error(529, "Overloaded"));
        let (result, _) = run(p.as_ref(), &request("go"), stream).await;
        let error = result.unwrap_err();
        assert!(
            matches!(&error, ModelError::Provider { provider, status: 529, message }
            if provider == "anthropic" && message.contains("Overloaded")),
            "{error:?}"
        );
        assert_clean(&error, "anthropic");
    }
    assert_eq!(server.requests().len(), 4);
}

#[tokio::test]
async fn unauthorized_is_not_retried() {
    let server = MockServer::start().await.unwrap();
    let p = provider(&config(ProviderKind::Anthropic, &server));
    for stream in MODES {
        server.push(Reply::error(401, "invalid x-api-key"));
        let (result, _) = run(p.as_ref(), &request("go"), stream).await;
        let error = result.unwrap_err();
        assert_eq!(
            error,
            ModelError::Provider { provider: "anthropic".into(), status: 401, message: "invalid x-api-key".into() }
        );
        assert_clean(&error, "anthropic");
    }
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn malformed_json_is_a_protocol_error() {
    let server = MockServer::start().await.unwrap();
    let p = provider(&config(ProviderKind::Anthropic, &server));
    for stream in MODES {
        server.push(Reply::malformed());
        let (result, _) = run(p.as_ref(), &request("go"), stream).await;
        let error = result.unwrap_err();
        assert!(matches!(&error, ModelError::Protocol { provider, .. } if provider == "anthropic"), "{error}");
    }
}

#[tokio::test]
async fn a_cut_answer_is_a_protocol_error() {
    let server = MockServer::start().await.unwrap();
    let p = provider(&config(ProviderKind::Anthropic, &server));
    for stream in MODES {
        server.push(Reply::truncated(long_text(2_000)));
        let (result, _) = run(p.as_ref(), &request("go"), stream).await;
        let error = result.unwrap_err();
        assert!(matches!(&error, ModelError::Protocol { provider, .. } if provider == "anthropic"), "{error}");
        if stream {
            assert!(error.to_string().contains("cut off"), "{error}");
        }
    }
}

#[tokio::test]
async fn error_events() {
    let server = MockServer::start().await.unwrap();
    let p = provider(&config(ProviderKind::Anthropic, &server));
    for stream in MODES {
        server.push(Reply::stream_error("overloaded_error", "Overloaded"));
        let (result, _) = run(p.as_ref(), &request("go"), stream).await;
        let error = result.unwrap_err();
        assert!(
            matches!(&error, ModelError::Unavailable { provider, message }
            if provider == "anthropic" && message.contains("Overloaded")),
            "{error}"
        );

        server.push(Reply::stream_error("invalid_request_error", "prompt is too long"));
        let (result, _) = run(p.as_ref(), &request("go"), stream).await;
        assert_eq!(
            result.unwrap_err(),
            ModelError::Provider { provider: "anthropic".into(), status: 400, message: "prompt is too long".into() }
        );
    }
}

#[tokio::test]
async fn long_output_is_assembled_intact() {
    let server = MockServer::start().await.unwrap();
    let p = provider(&config(ProviderKind::Anthropic, &server));
    let text = long_text(60_000);
    for stream in MODES {
        server.push(Reply::text(text.clone()));
        let (result, pieces) = run(p.as_ref(), &request("write a lot"), stream).await;
        assert_eq!(result.unwrap().text, text);
        if stream {
            assert_eq!(pieces.concat(), text);
        }
    }
}

#[tokio::test]
async fn connection_refused_is_unavailable() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let cfg = nexo_model::ModelConfig {
        model: Some("claude-test".into()),
        base_url: Some(format!("http://127.0.0.1:{port}")),
        api_key: Some(KEY.into()),
        max_retries: Some(0),
        ..Default::default()
    };
    let p = provider(&cfg);
    assert_eq!(p.name(), "anthropic");
    for stream in MODES {
        let (result, _) = run(p.as_ref(), &request("go"), stream).await;
        let error = result.unwrap_err();
        assert!(
            matches!(&error, ModelError::Unavailable { provider, message }
            if provider == "anthropic" && message.contains("cannot connect")),
            "{error}"
        );
        assert_clean(&error, "anthropic");
    }
}
