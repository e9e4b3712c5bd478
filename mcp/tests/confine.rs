//! `confine = true`: the server writes only its `cwd` and has no network
//! unless `network = true`, under bubblewrap and Landlock, spawned directly
//! and through the orphan guard (which stays outside the confinement).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;

use common::{args, stdio_config};
use nexo_mcp::{ClientOptions, Clients, Confinement, Server, ServerConfig};
use serde_json::json;

fn confined(cwd: &std::path::Path, network: bool) -> ServerConfig {
    ServerConfig { cwd: Some(cwd.to_path_buf()), confine: true, network, ..stdio_config() }
}

fn clients(config: ServerConfig, guard: bool, confinement: Confinement) -> Clients {
    let options = ClientOptions { guard: guard.then(|| PathBuf::from(common::test_host())), http_client: None };
    Clients::new(vec![Server::new("box", config).unwrap()], options).with_confinement(confinement)
}

async fn call(clients: &Clients, tool: &str, arguments: serde_json::Value) -> (bool, String) {
    let r = clients.call_tool("box", tool, args(arguments)).await.unwrap();
    (r.is_error, r.text)
}

#[tokio::test]
async fn a_confined_server_writes_only_its_directory() {
    for confinement in [Confinement::Bubblewrap, Confinement::Landlock] {
        for guard in [false, true] {
            let case = format!("{confinement}, guard {guard}");
            // Not under /tmp, which bubblewrap replaces with a private tmpfs (writable, but not the host's).
            let outer = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
            let cwd = outer.path().join("work");
            std::fs::create_dir(&cwd).unwrap();
            let clients = clients(confined(&cwd, false), guard, confinement);
            let (failed, text) = call(&clients, "write", json!({"path": "inside.txt", "text": "ok"})).await;
            assert!(!failed, "{case}: {text}");
            assert_eq!(std::fs::read_to_string(cwd.join("inside.txt")).unwrap(), "ok", "{case}");
            let escape = outer.path().join("escape.txt");
            let (failed, text) = call(&clients, "write", json!({"path": escape.to_str().unwrap(), "text": "no"})).await;
            assert!(failed, "{case}: writing outside cwd succeeded: {text}");
            assert!(!escape.exists(), "{case}: the file appeared outside cwd");
            let (failed, text) = call(&clients, "write", json!({"path": "../escape.txt", "text": "no"})).await;
            assert!(failed && !escape.exists(), "{case}: {text}");
            // The environment is still only the configured one.
            assert_eq!(call(&clients, "env", json!({"name": "CARGO_MANIFEST_DIR"})).await.1, "unset", "{case}");
            clients.close().await;
        }
    }
}

#[tokio::test]
async fn a_confined_server_has_no_network_unless_granted() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    for confinement in [Confinement::Bubblewrap, Confinement::Landlock] {
        let dir = tempfile::tempdir().unwrap();
        let off = clients(confined(dir.path(), false), true, confinement);
        let (failed, text) = call(&off, "connect", json!({"addr": addr})).await;
        assert!(failed && text.contains("cannot connect"), "{confinement} without network: {text}");
        off.close().await;
        let on = clients(confined(dir.path(), true), true, confinement);
        let (failed, text) = call(&on, "connect", json!({"addr": addr})).await;
        assert!(!failed, "{confinement} with network: {text}");
        on.close().await;
    }
}

#[tokio::test]
async fn describe_says_the_server_is_confined() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::new("box", confined(dir.path(), false)).unwrap();
    assert!(s.describe().contains("(confined, no network; cwd "), "{}", s.describe());
}
