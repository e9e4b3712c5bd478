//! What nexo adds to one MCP tool call: the same `echo` on nexo's rmcp test
//! server (stdio), called raw through `nexo_mcp::Clients` (the floor: rmcp
//! and a pipe to another process) and as the model's `mcp__tests__echo`
//! through the host-call path (decode, the MCP gate, events, execute,
//! truncate). Both in one run, so the ratio is what to read. Needs the test
//! server: `cargo build --release -p nexo-mcp` before
//! `cargo bench -p nexo --bench mcp`.
#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use nexo::authority::Permissions;
use nexo::grant::Grant;
use nexo::manifest::{AgentManifest, PermissionMode};
use nexo::settings::{Providers, RunOptions};
use nexo_mcp::{ClientOptions, Clients, Server, ServerConfig};
use nexo_model::ToolCall;
use serde_json::json;

fn test_server() -> String {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap();
    let path = dir.join("nexo-mcp-test-server");
    assert!(path.is_file(), "{} is missing: run `cargo build --release -p nexo-mcp` first", path.display());
    path.display().to_string()
}

fn calls(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let config = ServerConfig { command: Some(test_server()), ..ServerConfig::default() };
    let clients = Clients::new(vec![Server::new("tests", config).unwrap()], ClientOptions::default());
    let manifest = AgentManifest {
        name: "bench".into(),
        mcp_servers: vec!["tests".into()],
        mcp_allow: vec!["echo".into()],
        ..AgentManifest::default()
    };
    let options = RunOptions {
        permissions: Permissions::new(PermissionMode::ReadOnly),
        grant: Grant::default().with_mcp_servers(["tests"]),
        providers: Providers { mcp: Some(clients.clone()), ..Providers::default() },
        ..RunOptions::default()
    };
    let tools =
        rt.block_on(nexo::world::agent::prepare(&manifest, &options, &[], &nexo::Limits::default())).unwrap().tools;
    // Connects, and learns the model-facing names.
    let specs = rt.block_on(tools.specs());
    assert!(specs.iter().any(|s| s.name == "mcp__tests__echo"));
    let args = json!({"text": "ping"});
    let map = args.as_object().unwrap().clone();

    let mut group = c.benchmark_group("mcp");
    group.measurement_time(Duration::from_secs(4));
    group.bench_function("echo, raw Clients::call_tool (the floor)", |b| {
        b.iter(|| black_box(rt.block_on(clients.call_tool("tests", "echo", map.clone())).unwrap()))
    });
    let call = ToolCall { id: "b".into(), name: "mcp__tests__echo".into(), arguments: args.clone() };
    group.bench_function("echo, the model's call through the host-call path", |b| {
        b.iter(|| {
            let reply = rt.block_on(tools.call_model(1, &call));
            assert!(!reply.is_error, "{}", reply.content);
            black_box(reply)
        })
    });
    group.finish();
    rt.block_on(clients.close());
}

criterion_group!(benches, calls);
criterion_main!(benches);
