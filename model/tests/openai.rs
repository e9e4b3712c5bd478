//! The OpenAI-compatible provider against the mock server, over real HTTP on
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
    let p = provider(&config(ProviderKind::Openai, &server));
    assert_eq!((p.name(), p.model()), ("openai", "test-model"));
    for stream in MODES {
        server.push(Reply::text("Hello there, how are you today?").with_usage(31, 7));
        let (result, pieces) = run(p.as_ref(), &request("hi"), stream).await;
        let response = result.unwrap();
        assert_eq!(response.text, "Hello there, how are you today?");
        assert!(response.tool_calls.is_empty());
        assert_eq!(response.stop, StopReason::EndTurn);
        assert_eq!(response.usage, Usage { input_tokens: 31, output_tokens: 7 });
        if stream {
            assert!(pieces.len() > 1, "the text should arrive in deltas: {pieces:?}");
            assert_eq!(pieces.concat(), response.text);
        } else {
            assert!(pieces.is_empty());
        }
    }
    let sent = server.requests();
    assert_eq!(sent.len(), 2);
    for (r, stream) in sent.iter().zip(MODES) {
        assert_eq!(r.method, "POST");
        assert_eq!(r.path, "/v1/chat/completions");
        assert_eq!(r.header("authorization"), Some(format!("Bearer {KEY}").as_str()));
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert_eq!(r.body["model"], "test-model");
        // OpenAI proper gets the newer field.
        assert_eq!(r.body["max_completion_tokens"], 256);
        assert!(r.body.get("max_tokens").is_none());
        assert_eq!(r.is_stream(), stream);
        if stream {
            assert_eq!(r.body["stream_options"], json!({"include_usage": true}));
            assert_eq!(r.header("accept"), Some("text/event-stream"));
        } else {
            assert!(r.body.get("stream_options").is_none());
        }
        assert_eq!(
            r.body["tools"],
            json!([{"type": "function", "function": {
                "name": "read_file", "description": "Reads a file.",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            }}])
        );
    }
}

#[tokio::test]
async fn several_fragmented_tool_calls() {
    let server = MockServer::start().await.unwrap();
    let p = provider(&config(ProviderKind::Openai, &server));
    let first = json!({"path": "src/main.rs", "range": {"start": 1, "end": 40}, "note": "naïve — ok"});
    let second = json!({"pattern": "fn main", "paths": ["a", "b", "c"], "case_sensitive": false});
    for stream in MODES {
        server.push(
            Reply::tool_calls(vec![
                MockToolCall::new("call_a", "read_file", first.clone()),
                MockToolCall::new("call_b", "grep", second.clone()),
                MockToolCall::raw_arguments("call_c", "list", ""),
            ])
            .with_text("Let me look."),
        );
        let (result, pieces) = run(p.as_ref(), &request("look"), stream).await;
        let response = result.unwrap();
        assert_eq!(response.text, "Let me look.");
        assert_eq!(response.stop, StopReason::ToolUse);
        assert_eq!(
            response.tool_calls,
            vec![
                ToolCall { id: "call_a".into(), name: "read_file".into(), arguments: first.clone() },
                ToolCall { id: "call_b".into(), name: "grep".into(), arguments: second.clone() },
                // An empty argument string means no arguments.
                ToolCall { id: "call_c".into(), name: "list".into(), arguments: json!({}) },
            ]
        );
        if stream {
            assert_eq!(pieces.concat(), "Let me look.");
        }
    }
}

#[tokio::test]
async fn arguments_as_object() {
    let server = MockServer::start().await.unwrap();
    let p = provider(&config(ProviderKind::Openai, &server));
    let args = json!({"path": "README.md"});
    for stream in MODES {
        server.push(Reply::tool_calls(vec![
            MockToolCall::new("call_1", "read_file", args.clone()).arguments_as_object(),
            MockToolCall::new("call_2", "read_file", json!({"path": "b"})),
        ]));
        let (result, _) = run(p.as_ref(), &request("read"), stream).await;
        let response = result.unwrap();
        assert_eq!(response.tool_calls[0].arguments, args);
        assert_eq!(response.tool_calls[1].arguments, json!({"path": "b"}));
    }
}

#[tokio::test]
async fn unparsable_arguments_name_the_tool() {
    let server = MockServer::start().await.unwrap();
    let p = provider(&config(ProviderKind::Openai, &server));
    for stream in MODES {
        server.push(Reply::tool_calls(vec![MockToolCall::raw_arguments("call_1", "write_file", "{\"path\": \"a\", ")]));
        let (result, _) = run(p.as_ref(), &request("write"), stream).await;
        let error = result.unwrap_err();
        assert!(
            matches!(&error, ModelError::Protocol { provider, message }
            if provider == "openai" && message.contains("`write_file`")),
            "{error}"
        );
    }
}

#[tokio::test]
async fn a_whole_conversation_goes_out_in_the_wire_format() {
    let server = MockServer::start().await.unwrap();
    let p = provider(&config(ProviderKind::OpenaiCompatible, &server));
    let request = Request {
        model: "test-model".into(),
        messages: vec![
            Message::System { text: "You are terse.".into() },
            Message::User { text: "What is in a and b?".into() },
            Message::Assistant {
                text: "Reading both.".into(),
                tool_calls: vec![
                    ToolCall { id: "c1".into(), name: "read_file".into(), arguments: json!({"path": "a"}) },
                    ToolCall { id: "c2".into(), name: "read_file".into(), arguments: json!({"path": "b"}) },
                ],
            },
            Message::ToolResult {
                call_id: "c1".into(),
                name: "read_file".into(),
                content: "alpha".into(),
                is_error: false,
            },
            Message::ToolResult {
                call_id: "c2".into(),
                name: "read_file".into(),
                content: "no such file".into(),
                is_error: true,
            },
            Message::Assistant {
                text: String::new(),
                tool_calls: vec![ToolCall { id: "c3".into(), name: "ls".into(), arguments: json!({}) }],
            },
            Message::ToolResult { call_id: "c3".into(), name: "ls".into(), content: "a".into(), is_error: false },
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
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is in a and b?"},
        {"role": "assistant", "content": "Reading both.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a\"}"}},
            {"id": "c2", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"b\"}"}},
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "alpha"},
        {"role": "tool", "tool_call_id": "c2", "content": "Error: no such file"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "c3", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
        ]},
        {"role": "tool", "tool_call_id": "c3", "content": "a"},
        {"role": "assistant", "content": "a holds alpha; b is missing."},
        {"role": "user", "content": "Thanks."},
    ]);
    for sent in server.requests() {
        assert_eq!(sent.body["messages"], expected);
        // Servers other than OpenAI proper get `max_tokens`.
        assert_eq!(sent.body["max_tokens"], 100);
        assert!(sent.body.get("max_completion_tokens").is_none());
        assert_eq!(sent.body["tools"][0]["function"]["name"], "ls");
    }
}

#[tokio::test]
async fn stop_reasons() {
    let server = MockServer::start().await.unwrap();
    let p = provider(&config(ProviderKind::Openai, &server));
    for stream in MODES {
        for (wire, expected) in [
            ("length", StopReason::MaxTokens),
            ("stop", StopReason::EndTurn),
            ("content_filter", StopReason::Other("content_filter".into())),
        ] {
            server.push(Reply::text("partial").with_stop(wire));
            let (result, _) = run(p.as_ref(), &request("go"), stream).await;
            assert_eq!(result.unwrap().stop, expected, "{wire}, stream {stream}");
        }
        // `stop` after tool calls (older Ollama) still means the calls must run.
        server.push(Reply::tool_calls(vec![MockToolCall::new("c", "ls", json!({}))]).with_stop("stop"));
        let (result, _) = run(p.as_ref(), &request("go"), stream).await;
        assert_eq!(result.unwrap().stop, StopReason::ToolUse);
    }
}

#[tokio::test]
async fn missing_usage_counts_as_zero() {
    let server = MockServer::start().await.unwrap();
    let p = provider(&config(ProviderKind::OpenaiCompatible, &server));
    let body =
        json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]});
    server.push(Reply::raw(200, "application/json", body.to_string()));
    let response = run(p.as_ref(), &request("go"), false).await.0.unwrap();
    assert_eq!(response.usage, Usage::default());
    // A server that ignores `stream: true` and answers with JSON still works, and the text reaches the sink.
    server.push(Reply::raw(200, "application/json", body.to_string()));
    let (result, pieces) = run(p.as_ref(), &request("go"), true).await;
    assert_eq!(result.unwrap().text, "ok");
    assert_eq!(pieces, ["ok"]);
}

#[tokio::test]
async fn retry_after_429_is_honoured() {
    let server = MockServer::start().await.unwrap();
    let p = provider(&config(ProviderKind::Openai, &server));
    for stream in MODES {
        let before = server.requests().len();
        server.push(Reply::error(429, "Rate limit reached").with_retry_after(1));
        server.push(Reply::text("finally"));
        let start = Instant::now();
        let (result, _) = run(p.as_ref(), &request("go"), stream).await;
        assert_eq!(result.unwrap().text, "finally");
        let elapsed = start.elapsed();
        // The backoff alone would be about a millisecond: the wait is the server's.
        assert!(elapsed >= Duration::from_millis(950), "{elapsed:?}");
        assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
        assert_eq!(server.requests().len() - before, 2);
    }
}

#[tokio::test]
async fn retry_after_is_capped() {
    let server = MockServer::start().await.unwrap();
    let mut cfg = config(ProviderKind::Openai, &server);
    cfg.retry_max_delay = Some(Duration::from_millis(200));
    let p = provider(&cfg);
    server.push(Reply::error(429, "come back in an hour").with_retry_after(3600));
    server.push(Reply::text("ok"));
    let start = Instant::now();
    assert_eq!(run(p.as_ref(), &request("go"), false).await.0.unwrap().text, "ok");
    let elapsed = start.elapsed();
    assert!(elapsed >= Duration::from_millis(190) && elapsed < Duration::from_secs(5), "{elapsed:?}");
}

#[tokio::test]
async fn retry_on_500_then_success() {
    let server = MockServer::start().await.unwrap();
    let p = provider(&config(ProviderKind::Openai, &server));
    for stream in MODES {
        server.push(Reply::error(500, "internal"));
        server.push(Reply::error(502, "bad gateway"));
        server.push(Reply::text("recovered"));
        let (result, pieces) = run(p.as_ref(), &request("go"), stream).await;
        assert_eq!(result.unwrap().text, "recovered");
        if stream {
            // Nothing from the failed attempts reached the sink.
            assert_eq!(pieces.concat(), "recovered");
        }
    }
    assert_eq!(server.requests().len(), 6);
    assert_eq!(server.remaining(), 0);
}

#[tokio::test]
async fn retries_exhausted() {
    let server = MockServer::start().await.unwrap();
    let mut cfg = config(ProviderKind::Openai, &server);
    cfg.max_retries = Some(2);
    let p = provider(&cfg);
    for stream in MODES {
        for _ in 0..3 {
            server.push(Reply::error(503, "The engine is currently overloaded"));
        }
        let (result, _) = run(p.as_ref(), &request("go"), stream).await;
        let error = result.unwrap_err();
        assert!(
            matches!(&error, ModelError::Provider { provider, status: 503, message }
            if provider == "openai" && message.contains("The engine is currently overloaded")),
            "{error:?}"
        );
        let text = error.to_string();
        assert!(text.contains("503") && text.contains("overloaded") && text.contains("2 retries"), "{text}");
        assert_clean(&error, "openai");
        assert_eq!(server.remaining(), 0);
    }
    assert_eq!(server.requests().len(), 6);
}

#[tokio::test]
async fn unauthorized_is_not_retried() {
    let server = MockServer::start().await.unwrap();
    let p = provider(&config(ProviderKind::Openai, &server));
    for stream in MODES {
        server.push(Reply::error(401, "Incorrect API key provided"));
        server.push(Reply::text("must not be reached"));
        let (result, _) = run(p.as_ref(), &request("go"), stream).await;
        let error = result.unwrap_err();
        assert_eq!(
            error,
            ModelError::Provider {
                provider: "openai".into(),
                status: 401,
                message: "Incorrect API key provided".into()
            }
        );
        assert_clean(&error, "openai");
        // One request, no retry: the next reply is still queued.
        assert_eq!(server.remaining(), 1);
        run(p.as_ref(), &request("go"), false).await.0.unwrap();
    }
    assert_eq!(server.requests().len(), 4);
}

#[tokio::test]
async fn an_echoed_key_is_scrubbed() {
    let server = MockServer::start().await.unwrap();
    let p = provider(&config(ProviderKind::Openai, &server));
    server.push(Reply::error(403, format!("key {KEY} is not allowed")));
    let error = run(p.as_ref(), &request("go"), false).await.0.unwrap_err();
    assert_clean(&error, "openai");
    assert!(error.to_string().contains("<redacted>"), "{error}");
}

#[tokio::test]
async fn an_encoded_key_in_a_401_is_scrubbed() {
    let server = MockServer::start().await.unwrap();
    let p = provider(&config(ProviderKind::Openai, &server));
    let escaped: String = KEY.chars().map(|c| format!("\\x{:02x}", c as u32)).collect();
    let base32 = data_encoding::BASE32.encode(KEY.as_bytes());
    for stream in MODES {
        server.push(Reply::error(401, format!("Incorrect API key provided: {escaped} (base32 {base32})")));
        let error = run(p.as_ref(), &request("go"), stream).await.0.unwrap_err();
        assert_clean(&error, "openai");
        let text = format!("{error} {error:?}");
        assert!(text.contains("Incorrect API key provided: <redacted> (base32 <redacted>)"), "{text}");
        assert!(!text.contains("\\x73\\x6b") && !text.contains(&base32[..16]), "{text}");
    }
}

#[tokio::test]
async fn malformed_json_is_a_protocol_error() {
    let server = MockServer::start().await.unwrap();
    let p = provider(&config(ProviderKind::Openai, &server));
    for stream in MODES {
        server.push(Reply::malformed());
        let (result, _) = run(p.as_ref(), &request("go"), stream).await;
        let error = result.unwrap_err();
        assert!(
            matches!(&error, ModelError::Protocol { provider, message }
            if provider == "openai" && message.contains("not valid JSON")),
            "{error}"
        );
    }
}

#[tokio::test]
async fn a_cut_answer_is_a_protocol_error() {
    let server = MockServer::start().await.unwrap();
    let p = provider(&config(ProviderKind::Openai, &server));
    for stream in MODES {
        server.push(Reply::truncated(long_text(2_000)));
        let (result, pieces) = run(p.as_ref(), &request("go"), stream).await;
        let error = result.unwrap_err();
        assert!(matches!(&error, ModelError::Protocol { provider, .. } if provider == "openai"), "{error}");
        if stream {
            assert!(error.to_string().contains("cut off"), "{error}");
            // What arrived before the cut was streamed.
            assert!(!pieces.is_empty());
        }
    }
}

#[tokio::test]
async fn an_error_inside_the_answer() {
    let server = MockServer::start().await.unwrap();
    let p = provider(&config(ProviderKind::Openrouter, &server));
    assert_eq!(p.name(), "openrouter");
    for stream in MODES {
        server.push(Reply::stream_error("server_error", "Provider returned error"));
        let (result, _) = run(p.as_ref(), &request("go"), stream).await;
        let error = result.unwrap_err();
        assert!(
            matches!(&error, ModelError::Unavailable { provider, message }
            if provider == "openrouter" && message.contains("Provider returned error")),
            "{error}"
        );
    }
    assert!(server.requests().iter().all(|r| r.header("x-title") == Some("nexo")));
}

#[tokio::test]
async fn long_output_is_assembled_intact() {
    let server = MockServer::start().await.unwrap();
    let p = provider(&config(ProviderKind::Openai, &server));
    let text = long_text(60_000);
    for stream in MODES {
        server.push(Reply::text(text.clone()).with_usage(5, 15_000));
        let (result, pieces) = run(p.as_ref(), &request("write a lot"), stream).await;
        let response = result.unwrap();
        assert_eq!(response.text, text);
        assert_eq!(response.usage.output_tokens, 15_000);
        if stream {
            assert!(pieces.len() > 1000);
            assert_eq!(pieces.concat(), text);
        }
    }
}

#[tokio::test]
async fn connection_refused_is_unavailable() {
    // A port that was free a moment ago, now closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let cfg = nexo_model::ModelConfig {
        model: Some("m".into()),
        provider: Some(ProviderKind::OpenaiCompatible),
        base_url: Some(format!("http://127.0.0.1:{port}/v1")),
        max_retries: Some(1),
        retry_base_delay: Some(Duration::from_millis(1)),
        ..Default::default()
    };
    let p = provider(&cfg);
    for stream in MODES {
        let (result, _) = run(p.as_ref(), &request("go"), stream).await;
        let error = result.unwrap_err();
        assert!(
            matches!(&error, ModelError::Unavailable { provider, message }
            if provider == "openai-compatible" && message.contains("cannot connect") && message.contains("1 retries")),
            "{error}"
        );
    }
}

#[tokio::test]
async fn a_slow_server_times_out() {
    let server = MockServer::start().await.unwrap();
    let mut cfg = config(ProviderKind::Openai, &server);
    cfg.timeout = Some(Duration::from_millis(300));
    let p = provider(&cfg);
    for stream in MODES {
        server.push(Reply::text("late").with_delay(Duration::from_secs(3)));
        let start = Instant::now();
        let (result, _) = run(p.as_ref(), &request("go"), stream).await;
        let error = result.unwrap_err();
        assert!(matches!(&error, ModelError::Unavailable { message, .. } if message.contains("timeout")), "{error}");
        assert!(start.elapsed() < Duration::from_secs(2));
        // Timeouts are not retried: a slow model stays slow.
        assert_eq!(server.remaining(), 0);
    }
}

#[tokio::test]
async fn keyless_servers_get_no_authorization() {
    let server = MockServer::start().await.unwrap();
    let mut cfg = config(ProviderKind::Ollama, &server);
    cfg.api_key = None;
    let p = provider(&cfg);
    assert_eq!(p.name(), "ollama");
    server.push(Reply::text("hi"));
    run(p.as_ref(), &request("go"), true).await.0.unwrap();
    assert_eq!(server.requests()[0].header("authorization"), None);
}

/// What the conversation benchmark relies on: each request's size and the
/// server's own time are recorded, and draining the record empties it.
#[tokio::test]
async fn the_server_records_its_own_time_and_drains_its_record() {
    let server = MockServer::start().await.unwrap();
    let p = provider(&config(ProviderKind::Openai, &server));
    server.push(Reply::text("slow").with_delay(Duration::from_millis(50)));
    server.push(Reply::text("fast"));
    let started = Instant::now();
    for _ in 0..2 {
        run(p.as_ref(), &request("hi"), false).await.0.unwrap();
    }
    let took = started.elapsed();
    let sent = server.take_requests();
    assert_eq!(sent.len(), 2);
    for r in &sent {
        assert_eq!(r.body_bytes, r.raw_body.len());
        assert!(r.received_at >= started);
        let server_time = r.server_time().expect("the reply went out");
        assert!(server_time <= took);
    }
    assert!(sent[0].server_time().unwrap() >= Duration::from_millis(50), "the delay is the server's time");
    assert!(sent[1].received_at >= sent[0].replied_at.unwrap());
    assert!(server.take_requests().is_empty(), "the record was drained");
    assert!(server.requests().is_empty());
}
