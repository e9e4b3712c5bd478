//! Stdio servers against the test server: real processes, no mocks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::{args, clients, no_args, stdio_config};
use nexo_mcp::{McpError, ServerConfig};
use serde_json::json;

#[tokio::test]
async fn lists_tools_with_normalized_schemas_and_calls_them() {
    let clients = clients(vec![("test", stdio_config())]);
    let tools = clients.list_tools("test").await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["echo", "fail", "hang", "large", "image", "crash", "write", "env", "connect", "fetch"]);
    let echo = &tools[0];
    assert_eq!(echo.description, "Returns `text`.");
    assert_eq!(echo.input_schema["type"], "object");
    assert_eq!(echo.input_schema["properties"]["text"]["type"], "string");
    assert!(tools.iter().all(|t| t.input_schema["properties"].is_object()));

    let r = clients.call_tool("test", "echo", args(json!({"text": "hello"}))).await.unwrap();
    assert_eq!((r.text.as_str(), r.is_error), ("hello", false));
    // The same connection serves the next call.
    let r = clients.call_tool("test", "echo", args(json!({"text": "again"}))).await.unwrap();
    assert_eq!(r.text, "again");
    clients.close().await;
}

#[tokio::test]
async fn a_tool_error_is_a_result_marked_as_error() {
    let clients = clients(vec![("test", stdio_config())]);
    let r = clients.call_tool("test", "fail", args(json!({"message": "it broke"}))).await.unwrap();
    assert_eq!((r.text.as_str(), r.is_error), ("it broke", true));
    clients.close().await;
}

#[tokio::test]
async fn large_results_are_kept_whole_and_images_summarized() {
    let clients = clients(vec![("test", stdio_config())]);
    let r = clients.call_tool("test", "large", args(json!({"bytes": 300_000}))).await.unwrap();
    assert_eq!(r.text.len(), 300_000);
    assert!(r.text.bytes().all(|b| b == b'x'));
    let r = clients.call_tool("test", "image", no_args()).await.unwrap();
    assert_eq!(r.text, "a tiny image\n\n[image image/png, 92 base64 bytes]");
    clients.close().await;
}

#[tokio::test]
async fn an_unknown_tool_is_a_server_error() {
    let clients = clients(vec![("test", stdio_config())]);
    let e = clients.call_tool("test", "nope", no_args()).await.unwrap_err();
    assert!(matches!(&e, McpError::Server { .. }), "{e:?}");
    assert!(e.to_string().contains("no tool named `nope`"), "{e}");
    // Still connected.
    assert_eq!(clients.call_tool("test", "echo", args(json!({"text": "x"}))).await.unwrap().text, "x");
    let e = clients.list_tools("other").await.unwrap_err();
    assert!(matches!(&e, McpError::UnknownServer { .. }), "{e:?}");
    assert!(e.to_string().contains("configured: test"), "{e}");
    clients.close().await;
}

#[tokio::test]
async fn a_hung_call_times_out_within_its_limit_and_the_connection_stays_usable() {
    let config = ServerConfig { timeout: Some(1), ..stdio_config() };
    let clients = clients(vec![("test", config)]);
    clients.list_tools("test").await.unwrap();
    let started = Instant::now();
    let e = clients.call_tool("test", "hang", args(json!({"seconds": 30}))).await.unwrap_err();
    let took = started.elapsed();
    assert!(matches!(&e, McpError::Timeout { limit, .. } if *limit == Duration::from_secs(1)), "{e:?}");
    assert!(took >= Duration::from_secs(1) && took < Duration::from_secs(3), "{took:?}");
    assert!(e.to_string().contains("raise `timeout` in [mcp.test]"), "{e}");
    let r = clients.call_tool("test", "echo", args(json!({"text": "still here"}))).await.unwrap();
    assert_eq!(r.text, "still here");
    clients.close().await;
}

#[tokio::test]
async fn a_crash_is_closed_with_the_stderr_tail_and_the_next_call_reconnects() {
    let clients = clients(vec![("test", stdio_config())]);
    clients.list_tools("test").await.unwrap();
    let e = clients.call_tool("test", "crash", no_args()).await.unwrap_err();
    match &e {
        McpError::Closed { stderr, .. } => assert!(stderr.contains("crashing as asked"), "{e}"),
        other => panic!("expected Closed, got {other:?}"),
    }
    assert!(e.to_string().contains("the next call starts it again"), "{e}");
    let r = clients.call_tool("test", "echo", args(json!({"text": "back"}))).await.unwrap();
    assert_eq!(r.text, "back");
    clients.close().await;
}

#[tokio::test]
async fn the_host_environment_does_not_reach_the_server() {
    // Cargo sets this in the test process (setting one here would need `unsafe`).
    let host_only = "CARGO_MANIFEST_DIR";
    assert!(std::env::var(host_only).is_ok_and(|v| !v.is_empty()));
    let mut config = stdio_config();
    config.env.insert("GIVEN".into(), "yes".into());
    let clients = clients(vec![("test", config)]);
    let env = |name: &str| {
        let clients = clients.clone();
        let name = name.to_string();
        async move { clients.call_tool("test", "env", args(json!({"name": name}))).await.unwrap().text }
    };
    assert_eq!(env(host_only).await, "unset");
    assert_eq!(env("HOME").await, "unset");
    assert_eq!(env("GIVEN").await, "yes");
    assert_eq!(env("PATH").await, std::env::var("PATH").unwrap(), "the host's PATH, so `node` is found");
    clients.close().await;
}

#[tokio::test]
async fn a_missing_program_fails_to_spawn_with_the_fix() {
    let config = ServerConfig { command: Some("nexo-no-such-program".into()), ..ServerConfig::default() };
    let clients = clients(vec![("gone", config)]);
    let e = clients.list_tools("gone").await.unwrap_err();
    assert!(matches!(&e, McpError::Spawn { .. }), "{e:?}");
    assert!(e.to_string().contains("`nexo-no-such-program` was not found on PATH"), "{e}");
}

#[tokio::test]
async fn a_program_that_is_not_an_mcp_server_fails_to_connect_with_its_stderr() {
    let config = ServerConfig {
        command: Some("/bin/sh".into()),
        args: vec!["-c".into(), "echo 'not an mcp server' >&2; exit 4".into()],
        ..ServerConfig::default()
    };
    let clients = clients(vec![("bad", config)]);
    let e = clients.list_tools("bad").await.unwrap_err();
    match &e {
        McpError::Connect { stderr, message, .. } => {
            assert!(stderr.contains("not an mcp server"), "{e}");
            assert!(message.contains("exited (status 4)"), "{e}");
        }
        other => panic!("expected Connect, got {other:?}"),
    }
    // One that never answers is cut off by `connect-timeout`.
    let config = ServerConfig {
        command: Some("/bin/sh".into()),
        args: vec!["-c".into(), "sleep 30".into()],
        connect_timeout: Some(1),
        ..ServerConfig::default()
    };
    let clients = common::clients(vec![("mute", config)]);
    let started = Instant::now();
    let e = clients.list_tools("mute").await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    assert!(e.to_string().contains("within 1s") && e.to_string().contains("connect-timeout"), "{e}");
}

#[tokio::test]
async fn close_is_idempotent_and_a_later_call_reconnects() {
    let clients = clients(vec![("test", stdio_config())]);
    let pid = |clients: nexo_mcp::Clients| async move {
        clients.call_tool("test", "env", args(json!({"name": "NOPE"}))).await.unwrap();
    };
    pid(clients.clone()).await;
    let started = Instant::now();
    clients.close().await;
    clients.close().await;
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    let r = clients.call_tool("test", "echo", args(json!({"text": "reconnected"}))).await.unwrap();
    assert_eq!(r.text, "reconnected");
    clients.close().await;
}
