//! The orphan guard: a SIGKILLed host, or a closed client, leaves no server
//! process behind, including what the server put in the background, moved to
//! a session of its own, double-forked, or made deaf to SIGTERM.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use nexo_mcp::ServerConfig;
use tokio::io::{AsyncBufReadExt, BufReader};

/// A marker unique to one test: every process of its server carries it on
/// its command line (in the sleep durations).
fn marker() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("{}{:09}", std::process::id(), nanos)
}

/// A server that starts detached helpers of every kind before exec'ing the test server.
fn forking_server(marker: &str) -> ServerConfig {
    forking_server_at(marker, &common::test_server())
}

/// The same, running the test server from `server`.
fn forking_server_at(marker: &str, server: &str) -> ServerConfig {
    let script = format!(
        "sleep 301.{marker} & setsid sleep 302.{marker} & (trap '' TERM; exec sleep 303.{marker}) & \
         ( setsid sleep 304.{marker} & ) & exec {server} stdio {marker}"
    );
    ServerConfig { command: Some("/bin/bash".into()), args: vec!["-c".into(), script], ..ServerConfig::default() }
}

/// Live (not zombie) processes whose command line holds `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().filter(|n| n.bytes().all(|b| b.is_ascii_digit())) else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(marker) {
            found.push(format!("{pid}: {cmdline}"));
        }
    }
    found
}

/// Waits up to `limit` for every process with `marker` to be gone; returns what is left.
async fn gone_within(marker: &str, limit: Duration) -> Vec<String> {
    let started = Instant::now();
    loop {
        let left = processes_with(marker);
        if left.is_empty() || started.elapsed() > limit {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn start_host(
    config: &ServerConfig,
    mode: &str,
) -> (tokio::process::Child, tokio::io::Lines<BufReader<tokio::process::ChildStdout>>) {
    let mut host = tokio::process::Command::new(common::test_host())
        .arg(serde_json::to_string(config).unwrap())
        .arg(mode)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(host.stdout.take().unwrap()).lines();
    let ready = tokio::time::timeout(Duration::from_secs(20), lines.next_line()).await.unwrap().unwrap();
    assert_eq!(ready.as_deref(), Some("ready 10"), "the host did not connect");
    (host, lines)
}

#[tokio::test]
async fn a_sigkilled_host_leaves_no_server_process() {
    let marker = marker();
    sigkill_leaves_nothing(&marker, forking_server(&marker)).await;
}

#[tokio::test]
async fn a_sigkilled_host_leaves_no_confined_server_process() {
    let marker = marker();
    let dir = tempfile::Builder::new().prefix("orphans-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    // In its cwd: a confined server reads only the system view, its command
    // (bash here, which names the test server in a script) and its cwd.
    let server = dir.path().join("nexo-mcp-test-server");
    if std::fs::hard_link(common::test_server(), &server).is_err() {
        std::fs::copy(common::test_server(), &server).unwrap();
    }
    let server = server.display().to_string();
    let config =
        ServerConfig { cwd: Some(dir.path().to_path_buf()), confine: true, ..forking_server_at(&marker, &server) };
    sigkill_leaves_nothing(&marker, config).await;
}

async fn sigkill_leaves_nothing(marker: &str, config: ServerConfig) {
    let marker = marker.to_string();
    let (mut host, _lines) = start_host(&config, "wait").await;
    // Give the background helpers a moment to start, then check the test sees them.
    let started = Instant::now();
    while processes_with(&marker).iter().filter(|p| p.contains("sleep 30")).count() < 4 {
        assert!(started.elapsed() < Duration::from_secs(5), "helpers did not start: {:?}", processes_with(&marker));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before = processes_with(&marker);
    assert!(before.iter().any(|p| p.contains("stdio")), "the server is not running: {before:?}");

    host.start_kill().unwrap();
    host.wait().await.unwrap();
    let killed = Instant::now();
    let left = gone_within(&marker, Duration::from_secs(3)).await;
    assert!(left.is_empty(), "left behind after SIGKILL of the host: {left:#?}");
    assert!(killed.elapsed() < Duration::from_millis(1500), "cleanup took {:?}", killed.elapsed());
}

#[tokio::test]
async fn close_leaves_no_server_process() {
    let marker = marker();
    let (mut host, mut lines) = start_host(&forking_server(&marker), "close").await;
    let closed = tokio::time::timeout(Duration::from_secs(15), lines.next_line()).await.unwrap().unwrap();
    assert_eq!(closed.as_deref(), Some("closed"));
    // Everything is gone when close() returns, not just eventually.
    let left: Vec<String> = processes_with(&marker).into_iter().filter(|p| !p.contains("nexo-mcp-test-host")).collect();
    assert!(left.is_empty(), "left behind after close(): {left:#?}");
    host.wait().await.unwrap();
    assert!(gone_within(&marker, Duration::from_secs(1)).await.is_empty());
}
