//! Shared helpers: the test server, configs, clients.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use nexo_mcp::{ClientOptions, Clients, Server, ServerConfig};
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

/// The test server binary.
pub fn test_server() -> String {
    env!("CARGO_BIN_EXE_nexo-mcp-test-server").to_string()
}

/// The host stand-in for the orphan tests.
pub fn test_host() -> String {
    env!("CARGO_BIN_EXE_nexo-mcp-test-host").to_string()
}

/// A stdio `[mcp.NAME]` table for the test server.
pub fn stdio_config() -> ServerConfig {
    ServerConfig { command: Some(test_server()), ..ServerConfig::default() }
}

/// Clients for `(name, config)` pairs, spawned directly (no guard).
pub fn clients(servers: Vec<(&str, ServerConfig)>) -> Clients {
    let servers = servers.into_iter().map(|(name, config)| Server::new(name, config).unwrap()).collect();
    Clients::new(servers, ClientOptions::default())
}

/// A JSON object from a `json!` literal.
pub fn args(value: Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap()
}

pub fn no_args() -> Map<String, Value> {
    args(json!({}))
}

/// The workspace root.
pub fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// An npm reference server's entry point; fails (no silent skip) when it is not installed.
pub fn npm_server(package: &str) -> PathBuf {
    let path =
        workspace().join("target/mcp-npm/node_modules/@modelcontextprotocol").join(package).join("dist/index.js");
    assert!(
        path.is_file(),
        "{} is missing: run scripts/mcp-deps.sh to install the npm reference MCP servers",
        path.display()
    );
    path
}

/// The test server in HTTP mode on a free loopback port; killed on drop.
pub struct HttpServer {
    pub child: tokio::process::Child,
    pub url: String,
}

impl HttpServer {
    /// With `token`: requests need it; `--token-file PATH` reads it per request.
    pub async fn start(token: &[&str]) -> HttpServer {
        let mut cmd = tokio::process::Command::new(test_server());
        cmd.args(["http", "--port", "0"])
            .args(token)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let mut child = cmd.spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let addr = tokio::time::timeout(Duration::from_secs(10), lines.next_line()).await.unwrap().unwrap().unwrap();
        HttpServer { child, url: format!("http://{addr}/mcp") }
    }
}

/// An HTTP `[mcp.NAME]` table for `url` on loopback.
pub fn http_config(url: &str) -> ServerConfig {
    ServerConfig { url: Some(url.to_string()), allow_private: true, ..ServerConfig::default() }
}
