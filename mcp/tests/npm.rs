//! Against the npm reference servers (installed by scripts/mcp-deps.sh; the
//! tests fail, naming it, when they are missing): server-everything over
//! stdio and streamable HTTP, server-filesystem over stdio.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{args, clients, http_config, no_args, npm_server};
use nexo_mcp::{Clients, ServerConfig};
use serde_json::json;

fn node(script: &std::path::Path, rest: &[&str]) -> ServerConfig {
    let mut args = vec![script.to_str().unwrap().to_string()];
    args.extend(rest.iter().map(|a| a.to_string()));
    ServerConfig { command: Some("node".into()), args, ..ServerConfig::default() }
}

async fn check_everything(clients: &Clients) {
    let tools = clients.list_tools("every").await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert!(names.contains(&"echo") && names.contains(&"get-tiny-image"), "{names:?}");
    // zod's `$schema` is stripped; every schema is an object schema.
    assert!(tools.iter().all(|t| t.input_schema["type"] == "object" && t.input_schema.get("$schema").is_none()));
    let r = clients.call_tool("every", "echo", args(json!({"message": "hi from nexo"}))).await.unwrap();
    assert!(!r.is_error && r.text.contains("hi from nexo"), "{r:?}");
    let r = clients.call_tool("every", "get-tiny-image", no_args()).await.unwrap();
    assert!(r.text.contains("[image image/png, ") && r.text.contains(" base64 bytes]"), "{}", r.text);
    // A wrong argument comes back as an error, not a hang.
    let r = clients.call_tool("every", "echo", no_args()).await;
    assert!(r.as_ref().map(|r| r.is_error).unwrap_or(true), "{r:?}");
}

#[tokio::test]
async fn server_everything_over_stdio() {
    let script = npm_server("server-everything");
    let clients = clients(vec![("every", node(&script, &["stdio"]))]);
    check_everything(&clients).await;
    clients.close().await;
}

#[tokio::test]
async fn server_everything_over_streamable_http() {
    let script = npm_server("server-everything");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut server = tokio::process::Command::new("node")
        .arg(&script)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let started = Instant::now();
    while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        assert!(started.elapsed() < Duration::from_secs(15), "server-everything did not listen on {port}");
        assert!(server.try_wait().unwrap().is_none(), "server-everything exited");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let clients = clients(vec![("every", http_config(&format!("http://127.0.0.1:{port}/mcp")))]);
    check_everything(&clients).await;
    clients.close().await;
}

#[tokio::test]
async fn server_filesystem_lists_a_directory() {
    let script = npm_server("server-filesystem");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "hello").unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let root = dir.path().canonicalize().unwrap();
    let clients = clients(vec![("fs", node(&script, &[root.to_str().unwrap()]))]);
    let tools = clients.list_tools("fs").await.unwrap();
    assert!(tools.iter().any(|t| t.name == "list_directory"));
    let r = clients.call_tool("fs", "list_directory", args(json!({"path": root}))).await.unwrap();
    assert!(!r.is_error, "{}", r.text);
    assert!(r.text.contains("[FILE] notes.txt") && r.text.contains("[DIR] sub"), "{}", r.text);
    let r = clients.call_tool("fs", "read_text_file", args(json!({"path": root.join("notes.txt")}))).await.unwrap();
    assert_eq!(r.text, "hello");
    // Outside its allowed directories it refuses, as a tool error.
    let r = clients.call_tool("fs", "list_directory", args(json!({"path": "/"}))).await.unwrap();
    assert!(r.is_error, "{}", r.text);
    clients.close().await;
}
