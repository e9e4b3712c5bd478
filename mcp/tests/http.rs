//! Streamable-HTTP servers against the test server on loopback, through the
//! guarded egress client: bearer tokens from each source, rotation at
//! reconnect, refusals.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{HttpServer, args, clients, http_config, no_args};
use nexo_mcp::{McpError, ServerConfig};
use serde_json::json;

const TOKEN: &str = "tok-0f3a9c2e7b51d4a8e6c0";

async fn echo(clients: &nexo_mcp::Clients, server: &str) -> Result<String, McpError> {
    clients.call_tool(server, "echo", args(json!({"text": "over http"}))).await.map(|r| r.text)
}

#[tokio::test]
async fn calls_over_http_without_a_token() {
    let server = HttpServer::start(&[]).await;
    let clients = clients(vec![("web", http_config(&server.url))]);
    assert_eq!(clients.list_tools("web").await.unwrap().len(), 10);
    assert_eq!(echo(&clients, "web").await.unwrap(), "over http");
    let r = clients.call_tool("web", "image", no_args()).await.unwrap();
    assert_eq!(r.text, "a tiny image\n\n[image image/png, 92 base64 bytes]");
    let r = clients.call_tool("web", "fail", args(json!({"message": "no"}))).await.unwrap();
    assert!(r.is_error);
    let e = clients.call_tool("web", "nope", no_args()).await.unwrap_err();
    assert!(matches!(e, McpError::Server { .. }), "{e:?}");
    clients.close().await;
}

#[tokio::test]
async fn a_hung_http_call_times_out_and_the_session_stays_usable() {
    let server = HttpServer::start(&[]).await;
    let clients = clients(vec![("web", ServerConfig { timeout: Some(1), ..http_config(&server.url) })]);
    let e = clients.call_tool("web", "hang", args(json!({"seconds": 30}))).await.unwrap_err();
    assert!(matches!(e, McpError::Timeout { .. }), "{e:?}");
    assert_eq!(echo(&clients, "web").await.unwrap(), "over http");
    clients.close().await;
}

#[tokio::test]
async fn the_bearer_token_comes_from_each_source() {
    let server = HttpServer::start(&["--token", TOKEN]).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, format!("  {TOKEN}\n")).unwrap();
    let script = dir.path().join("print-token");
    std::fs::write(&script, format!("#!/bin/sh\nprintf '{TOKEN}\\n'\n")).unwrap();
    let base = http_config(&server.url);
    let sources = [
        ("static", ServerConfig { token: Some(TOKEN.into()), ..base.clone() }),
        ("file", ServerConfig { token_file: Some(file.clone()), ..base.clone() }),
        ("command", ServerConfig { token_command: Some(format!("sh {}", script.display())), ..base.clone() }),
    ];
    let clients = clients(sources.to_vec());
    for (name, _) in &sources {
        assert_eq!(echo(&clients, name).await.unwrap(), "over http", "token from {name}");
    }
    clients.close().await;

    // token-env: a variable cargo sets in this process (setting one would need `unsafe`).
    let value = std::env::var("CARGO_PKG_NAME").unwrap();
    let server = HttpServer::start(&["--token", &value]).await;
    let config = ServerConfig { token_env: Some("CARGO_PKG_NAME".into()), ..http_config(&server.url) };
    let clients = common::clients(vec![("env", config)]);
    assert_eq!(echo(&clients, "env").await.unwrap(), "over http");
    clients.close().await;
}

#[tokio::test]
async fn a_wrong_or_missing_token_fails_clearly() {
    let server = HttpServer::start(&["--token", TOKEN]).await;
    let wrong = ServerConfig { token: Some("tok-wrong-value-123456".into()), ..http_config(&server.url) };
    let clients = clients(vec![("wrong", wrong), ("none", http_config(&server.url))]);
    for name in ["wrong", "none"] {
        let e = clients.list_tools(name).await.unwrap_err();
        assert!(matches!(e, McpError::Connect { .. }), "{name}: {e:?}");
        let shown = e.to_string();
        assert!(shown.contains("HTTP 401") && shown.contains("check the token source"), "{name}: {shown}");
        assert!(!shown.contains("tok-wrong-value-123456"), "{shown}");
    }
}

#[tokio::test]
async fn token_sources_that_fail_name_the_source() {
    let dir = tempfile::tempdir().unwrap();
    let base = http_config("http://127.0.0.1:9/mcp");
    let cases = [
        (
            ServerConfig { token_env: Some("NEXO_MCP_TEST_UNSET_VAR".into()), ..base.clone() },
            "NEXO_MCP_TEST_UNSET_VAR, which is not set",
        ),
        (ServerConfig { token_file: Some(dir.path().join("missing")), ..base.clone() }, "cannot read `token-file`"),
        (
            ServerConfig { token_command: Some("echo oops >&2; exit 3".into()), ..base.clone() },
            "`token-command` exited with exit status: 3: oops",
        ),
        (ServerConfig { token_command: Some("true".into()), ..base.clone() }, "token from token-command is empty"),
    ];
    for (config, says) in cases {
        let clients = clients(vec![("t", config)]);
        let e = clients.list_tools("t").await.unwrap_err();
        assert!(matches!(e, McpError::Token { .. }), "{e:?}");
        assert!(e.to_string().contains(says), "{e}");
    }
}

#[tokio::test]
async fn a_token_command_runs_again_at_each_connection() {
    let dir = tempfile::tempdir().unwrap();
    let (server_side, client_side, runs) =
        (dir.path().join("server"), dir.path().join("client"), dir.path().join("runs"));
    let rotate = |token: &str| {
        std::fs::write(&server_side, token).unwrap();
        std::fs::write(&client_side, token).unwrap();
    };
    rotate("tok-first-aaaaaaaaaaaa");
    let server = HttpServer::start(&["--token-file", server_side.to_str().unwrap()]).await;
    let command = format!("echo run >> {}; cat {}", runs.display(), client_side.display());
    let config = ServerConfig { token_command: Some(command), ..http_config(&server.url) };
    let clients = clients(vec![("rot", config)]);
    assert_eq!(echo(&clients, "rot").await.unwrap(), "over http");
    assert_eq!(echo(&clients, "rot").await.unwrap(), "over http");
    assert_eq!(std::fs::read_to_string(&runs).unwrap().lines().count(), 1, "once per connection, not per call");

    rotate("tok-second-bbbbbbbbbbb");
    // The live connection still sends the old token, which the server now refuses.
    let e = echo(&clients, "rot").await.unwrap_err();
    assert!(!e.to_string().contains("tok-"), "{e}");
    // A new connection runs the command again and gets the new one.
    clients.close().await;
    assert_eq!(echo(&clients, "rot").await.unwrap(), "over http");
    assert!(std::fs::read_to_string(&runs).unwrap().lines().count() >= 2);
    clients.close().await;
}

#[tokio::test]
async fn loopback_needs_allow_private() {
    let server = HttpServer::start(&[]).await;
    let localhost = server.url.replace("127.0.0.1", "localhost");
    for url in [server.url.as_str(), localhost.as_str()] {
        let config = ServerConfig { allow_private: false, ..http_config(url) };
        let clients = clients(vec![("lan", config)]);
        let e = tokio::time::timeout(Duration::from_secs(10), clients.list_tools("lan")).await.unwrap().unwrap_err();
        assert!(matches!(e, McpError::Egress { .. }), "{url}: {e:?}");
        assert!(e.to_string().contains("set `allow-private = true` in [mcp.lan]"), "{e}");
    }
}
