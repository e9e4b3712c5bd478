//! `confine = true`: the server writes only its `cwd` and has no network
//! unless `network = true`, under bubblewrap and Landlock, spawned directly
//! and through the orphan guard (which stays outside the confinement).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::{args, stdio_config};
use nexo_egress::{Connection, ConnectionLog, EgressProxy, GuardedClient, NetHosts, ProxyPolicy};
use nexo_mcp::{ClientOptions, Clients, Confinement, Server, ServerConfig, ServerNetwork};
use nexo_sandbox::{Gateway, Serving};
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

/// Answers every request on a loopback port with `hello`, counting them.
fn hello_server() -> (String, Arc<AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let served = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&served);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            count.fetch_add(1, Ordering::SeqCst);
            let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello");
        }
    });
    (addr, served)
}

/// nexo's egress proxy for each server, allowing loopback, logging every connection.
#[derive(Default)]
struct Proxy(Arc<Mutex<Vec<(String, Connection)>>>);

struct Log(String, Arc<Mutex<Vec<(String, Connection)>>>);

impl ConnectionLog for Log {
    fn connection(&self, connection: &Connection) {
        self.1.lock().unwrap().push((self.0.clone(), connection.clone()));
    }
}

struct ProxyGateway(ProxyPolicy);

struct Served(EgressProxy);

impl Serving for Served {
    fn stop(self: Box<Self>) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        Box::pin(self.0.stop())
    }
}

impl Gateway for ProxyGateway {
    fn serve(&self, listener: std::net::TcpListener) -> std::io::Result<Box<dyn Serving>> {
        let client = GuardedClient::builder().allow_private([IpAddr::from([127, 0, 0, 1])]).build().unwrap();
        Ok(Box::new(Served(EgressProxy::serve(&client, listener, self.0.clone())?)))
    }

    fn describe(&self) -> String {
        "nexo's egress proxy".into()
    }
}

impl ServerNetwork for Proxy {
    fn gateway(&self, server: &str, hosts: &NetHosts, allow_private: bool) -> Result<Box<dyn Gateway>, String> {
        assert!(allow_private, "the test's servers allow their loopback hosts");
        let log = Arc::new(Log(server.to_string(), Arc::clone(&self.0)));
        Ok(Box::new(ProxyGateway(ProxyPolicy { hosts: hosts.clone(), log: Some(log), ..Default::default() })))
    }
}

#[tokio::test]
async fn a_server_with_net_hosts_reaches_them_through_the_proxy_and_nothing_else() {
    let (allowed, served) = hello_server();
    let (other, _) = hello_server();
    for confinement in [Confinement::Bubblewrap, Confinement::Landlock] {
        for guard in [false, true] {
            let case = format!("{confinement}, guard {guard}");
            let dir = tempfile::tempdir().unwrap();
            let config =
                ServerConfig { net_hosts: vec![allowed.clone()], allow_private: true, ..confined(dir.path(), false) };
            let clients = clients(config, guard, confinement);
            let proxy = Proxy::default();
            assert!(clients.with_network(Arc::new(Proxy(Arc::clone(&proxy.0)))));
            let before = served.load(Ordering::SeqCst);
            let (failed, text) = call(&clients, "fetch", json!({"url": format!("http://{allowed}/x")})).await;
            assert!(!failed && text == "HTTP/1.1 200 OK\nhello", "{case}: {text}");
            assert_eq!(served.load(Ordering::SeqCst), before + 1, "{case}");
            // Another port of the same host is not granted; the proxy refuses it.
            let (_, text) = call(&clients, "fetch", json!({"url": format!("http://{other}/")})).await;
            assert!(text.contains("403"), "{case}: {text}");
            // Around the proxy there is nothing: not the granted server, not the host's loopback.
            let (failed, text) = call(&clients, "connect", json!({"addr": allowed})).await;
            assert!(failed && text.contains("cannot connect"), "{case}: {text}");
            assert_eq!(served.load(Ordering::SeqCst), before + 1, "{case}: a direct connection arrived");
            clients.close().await;
            let log = proxy.0.lock().unwrap().clone();
            let shown: Vec<(&str, u16, bool)> = log.iter().map(|(by, c)| (by.as_str(), c.port, c.allowed)).collect();
            let port = |addr: &str| addr.rsplit(':').next().unwrap().parse::<u16>().unwrap();
            assert_eq!(shown, [("box", port(&allowed), true), ("box", port(&other), false)], "{case}");
        }
    }
}

/// A network whose gateways cannot serve.
struct Failing;

impl Gateway for Failing {
    fn serve(&self, _: std::net::TcpListener) -> std::io::Result<Box<dyn Serving>> {
        Err(std::io::Error::other("no room"))
    }

    fn describe(&self) -> String {
        "a failing gateway".into()
    }
}

impl ServerNetwork for Failing {
    fn gateway(&self, _: &str, _: &NetHosts, _: bool) -> Result<Box<dyn Gateway>, String> {
        Ok(Box::new(Failing))
    }
}

#[tokio::test]
async fn a_server_with_net_hosts_is_not_connected_without_its_network() {
    let dir = tempfile::tempdir().unwrap();
    let config = ServerConfig { net_hosts: vec!["a.example".into()], ..confined(dir.path(), false) };
    let without = clients(config.clone(), true, Confinement::Landlock);
    let err = without.call_tool("box", "echo", args(json!({"text": "x"}))).await.unwrap_err().to_string();
    assert!(err.contains("`net-hosts` need nexo's egress proxy"), "{err}");
    // A gateway that cannot serve: the server is not reported connected.
    let failing = clients(config.clone(), true, Confinement::Landlock);
    assert!(failing.with_network(Arc::new(Failing)));
    let err = failing.call_tool("box", "echo", args(json!({"text": "x"}))).await.unwrap_err().to_string();
    assert!(err.contains("could not be set up: its gateway could not serve it: no room"), "{err}");
    // Unconfined it would have the host's whole network: refused rather than widened.
    let unconfined = clients(config, true, Confinement::Unconfined);
    assert!(unconfined.with_network(Arc::new(Proxy::default())));
    let err = unconfined.call_tool("box", "echo", args(json!({"text": "x"}))).await.unwrap_err().to_string();
    assert!(err.contains("needs OS confinement"), "{err}");
}

#[tokio::test]
async fn describe_says_the_server_is_confined() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::new("box", confined(dir.path(), false)).unwrap();
    assert!(s.describe().contains("(confined, no network; cwd "), "{}", s.describe());
}
