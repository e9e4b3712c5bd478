//! MCP through the `nexo` binary: servers configured as `[mcp.NAME]` in a
//! real config file, the orphan guard under `kill -9`, `nexo inspect`, and
//! `nexo mcp serve` driven by a real MCP client (rmcp's, through
//! `nexo-mcp`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use nexo_mcp::{ClientOptions, Clients, Server, ServerConfig};
use nexo_model::mock::{MockServer, MockToolCall, Reply};
use nexo_tests as built;
use serde_json::json;

mod common;

use common::{stderr, stdout};

struct Scene {
    dir: tempfile::TempDir,
    model: MockServer,
}

impl Scene {
    async fn new() -> Scene {
        let dir = tempfile::Builder::new().prefix("mcp-cli-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        std::fs::create_dir(dir.path().join("ws")).unwrap();
        Scene { dir, model: MockServer::start().await.unwrap() }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes the config file and returns its path.
    fn config(&self, text: &str) -> String {
        let path = self.path("nexo.toml");
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = common::nexo_command(&self.path("cache"));
        cmd.env("OPENAI_API_KEY", "sk-mcp-cli-key").args(args).stdin(Stdio::null());
        cmd
    }

    fn nexo(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run nexo")
    }

    fn model_args(&self) -> Vec<String> {
        let base = self.model.openai_base_url();
        ["--provider", "openai-compatible", "--base-url", &base, "--model", "test-model"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }
}

/// The processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if !entry.file_name().to_string_lossy().chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if text.contains(marker) {
                found.push(format!("{}: {text}", entry.file_name().to_string_lossy()));
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_servers_and_everything_they_started_die_with_a_killed_nexo() {
    let scene = Scene::new().await;
    let marker = format!("nexo-orphan-{}", std::process::id());
    // A server that leaves a background child and a `setsid` one behind;
    // each carries the marker in its command line, for /proc to show.
    let script = scene.path("server.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/bash\nbash -c 'sleep 300; : {marker}-bg' &\nsetsid bash -c 'sleep 300; : {marker}-setsid' &\nexec {} stdio {marker}-server\n",
            common::mcp_test_server().display()
        ),
    )
    .unwrap();
    let config = scene.config(&format!(
        "[mcp.tests]\ncommand = \"bash\"\nargs = [\"{}\"]\ncwd = \"{}\"\n",
        script.display(),
        scene.path("ws").display()
    ));
    // The model calls a tool that hangs, so nexo is mid-call when it dies.
    scene.model.push(Reply::tool_calls(vec![MockToolCall::new("h", "mcp__tests__hang", json!({"seconds": 300}))]));
    let mut args = vec!["run", built::MCP_PROBE, "prompt go", "--config", &config, "--mode", "auto", "--ephemeral"]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>();
    args.extend(scene.model_args());
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child = KillOnDrop(scene.command(&argv).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap());
    let deadline = Instant::now() + Duration::from_secs(60);
    while processes_with(&format!("{marker}-server")).is_empty()
        || processes_with(&format!("{marker}-setsid")).is_empty()
        || scene.model.requests().is_empty()
    {
        assert!(Instant::now() < deadline, "the server never started: {:?}", processes_with(&marker));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Let the hanging call reach the server.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(processes_with(&marker).len(), 3, "{:?}", processes_with(&marker));
    child.0.kill().unwrap(); // SIGKILL: nexo runs no cleanup
    child.0.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !processes_with(&marker).is_empty() {
        assert!(Instant::now() < deadline, "orphans outlived nexo: {:?}", processes_with(&marker));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_requested_configured_and_effective_servers_and_never_a_token() {
    let scene = Scene::new().await;
    let config = scene.config(&format!(
        "[mcp.tests]\ncommand = \"{}\"\n\n[mcp.remote]\nurl = \"https://mcp.example.com/mcp\"\ntoken = \"tok-inspect-5521\"\n\n[grant]\nmcp-allow = [\"echo\"]\n",
        common::mcp_test_server().display()
    ));
    let out = scene.nexo(&["inspect", built::MCP_PROBE, "--config", &config]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("mcp requested  tests, everything"), "{text}");
    assert!(text.contains("mcp configured remote (http: https://mcp.example.com/mcp"), "{text}");
    assert!(text.contains("mcp effective  tests\n"), "{text}");
    assert!(text.contains("mcp allow      echo, tests/image, tests/fetch (narrowed by the operator's echo)"), "{text}");
    assert!(text.contains("agents         helper (a request:"), "the agent-children export: {text}");
    let out = scene.nexo(&["inspect", built::MCP_PROBE, "--config", &config, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["mcp"]["effective"], json!(["tests"]));
    assert_eq!(v["mcp"]["requested"], json!(["tests", "everything"]));
    for text in [stdout(&out), stderr(&out), text] {
        assert!(!text.contains("tok-inspect-5521"), "the token leaked: {text}");
    }
    // A bad table is refused with its name and key.
    let config = scene.config("[mcp.tests]\ncommand = \"x\"\nurl = \"https://a.example/mcp\"\n");
    let out = scene.nexo(&["inspect", built::MCP_PROBE, "--config", &config]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("[mcp.tests]"), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_run_calls_one_allowed_tool_and_is_denied_another() {
    let scene = Scene::new().await;
    // A marker of this test's own, so a server another test runs meanwhile is not counted.
    let marker = format!("nexo-cli-run-{}", std::process::id());
    let config = scene.config(&format!(
        "[mcp.tests]\ncommand = \"{}\"\nargs = [\"stdio\", \"{marker}\"]\ncwd = \"{}\"\n",
        common::mcp_test_server().display(),
        scene.path("ws").display()
    ));
    scene.model.push(Reply::tool_calls(vec![
        MockToolCall::new("a", "mcp__tests__echo", json!({"text": "cli echo"})),
        MockToolCall::new("b", "mcp__tests__write", json!({"path": "no.txt", "text": "x"})),
    ]));
    scene.model.push(Reply::text("finished"));
    let mut args = vec!["run", built::MCP_PROBE, "prompt go", "--config", &config, "--json"]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>();
    args.extend(scene.model_args());
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = scene.nexo(&argv);
    assert!(out.status.success(), "{}", stderr(&out));
    let events: Vec<serde_json::Value> = stdout(&out).lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let verdicts: Vec<(String, String)> = events
        .iter()
        .filter(|e| e["event"] == "tool-result")
        .map(|e| (e["name"].as_str().unwrap().to_string(), e["verdict"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(
        verdicts,
        [("mcp__tests__echo".to_string(), "allowed".to_string()), ("mcp__tests__write".into(), "denied".into())]
    );
    assert!(!scene.path("ws/no.txt").exists());
    assert!(processes_with(&marker).is_empty(), "close ended the server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_approval_survives_the_process_and_the_resume_reads_the_servers_again() {
    let scene = Scene::new().await;
    // A static token in the config file: the store must never hold it.
    let config = scene.config(&format!(
        "[mcp.tests]\ncommand = \"{}\"\ncwd = \"{}\"\n\n[mcp.remote]\nurl = \"https://mcp.example.com/mcp\"\ntoken = \"tok-store-9931\"\n",
        common::mcp_test_server().display(),
        scene.path("ws").display()
    ));
    scene.model.push(Reply::tool_calls(vec![MockToolCall::new(
        "w",
        "mcp__tests__write",
        json!({"path": "approved.txt", "text": "written after approval"}),
    )]));
    scene.model.push(Reply::text("all done"));
    let mut args = vec!["run", built::MCP_PROBE, "prompt go", "--config", &config, "--mode", "approve", "--json"]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>();
    args.extend(scene.model_args());
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = scene.nexo(&argv);
    assert_eq!(out.status.code(), Some(4), "suspended: {}", stderr(&out));
    let end: serde_json::Value = serde_json::from_str(stdout(&out).lines().last().unwrap()).unwrap();
    let run = end["run"].as_str().unwrap().to_string();
    assert_eq!(end["approval"]["capability"], "mcp", "{end}");
    assert!(!scene.path("ws/approved.txt").exists());
    // Another process approves; its config file gives the server again.
    let out = scene.nexo(&["runs", "approve", &run, "--config", &config, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(scene.path("ws/approved.txt")).unwrap(), "written after approval");
    assert_eq!(scene.model.requests().len(), 2, "the first model turn was replayed, not paid again");
    // The store (its file, the WAL) never saw the token.
    let store = scene.path("cache").with_extension("store.db");
    for suffix in ["", "-wal"] {
        if let Ok(bytes) = std::fs::read(format!("{}{suffix}", store.display())) {
            assert!(!String::from_utf8_lossy(&bytes).contains("tok-store-9931"), "the token is in the store{suffix}");
        }
    }
}

/// A client of `nexo mcp serve` over stdio, through the same MCP client nexo
/// uses for its own servers.
fn serve_client(scene: &Scene, args: &[&str]) -> Clients {
    let mut all = vec!["mcp".to_string(), "serve".into()];
    all.extend(args.iter().map(|s| s.to_string()));
    let mut env = std::collections::BTreeMap::new();
    env.insert("NEXO_CACHE_DIR".to_string(), scene.path("cache").display().to_string());
    env.insert("NEXO_STORE".to_string(), scene.path("serve.db").display().to_string());
    // The client gives the server only this environment: no HOME to find the acceptance file by.
    env.insert("NEXO_ACCEPTED_PLUGINS".to_string(), scene.path("accepted-plugins.json").display().to_string());
    let config = ServerConfig {
        command: Some(env!("CARGO_BIN_EXE_nexo").to_string()),
        args: all,
        env,
        cwd: Some(scene.path("ws")),
        timeout: Some(30),
        connect_timeout: Some(60),
        ..ServerConfig::default()
    };
    Clients::new(vec![Server::new("nexo", config).unwrap()], ClientOptions::default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_serve_offers_the_agents_tools_under_its_gate() {
    let scene = Scene::new().await;
    std::fs::write(scene.path("ws/notes.txt"), "served through nexo").unwrap();
    std::fs::write(scene.path("outside.txt"), "not for agents").unwrap();
    let agent = scene.path("agent.toml");
    std::fs::write(
        &agent,
        "name = \"served\"\ndescription = \"An agent whose tools are served\"\ncapabilities = [\"read\", \"glob\", \"write\"]\n",
    )
    .unwrap();
    let ws = scene.path("ws").display().to_string();
    let client =
        serve_client(&scene, &[agent.to_str().unwrap(), "--sandbox", "local", "--cwd", &ws, "--allow", "write"]);
    let tools = client.list_tools("nexo").await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    // read-only (the default mode) could never allow a write, so write_file is not offered.
    assert_eq!(names, ["read_file", "glob"], "{tools:?}");
    let read = client.call_tool("nexo", "read_file", obj(json!({"path": "notes.txt"}))).await.unwrap();
    assert!(!read.is_error && read.text.contains("served through nexo"), "{read:?}");
    // A client that calls it anyway gets an error naming the tools there are.
    let write = client.call_tool("nexo", "write_file", obj(json!({"path": "new.txt", "content": "x"}))).await.unwrap();
    assert!(write.is_error && write.text.contains("there is no tool `write_file`"), "{write:?}");
    assert!(!scene.path("ws/new.txt").exists());
    // A path escape is refused, whatever the mode.
    let escape = client.call_tool("nexo", "read_file", obj(json!({"path": "../outside.txt"}))).await.unwrap();
    assert!(escape.is_error && !escape.text.contains("not for agents"), "{escape:?}");
    client.close().await;

    // Under `auto`, the same write goes through.
    let client = serve_client(
        &scene,
        &[agent.to_str().unwrap(), "--sandbox", "local", "--cwd", &ws, "--allow", "write", "--mode", "auto"],
    );
    let write = client.call_tool("nexo", "write_file", obj(json!({"path": "new.txt", "content": "x"}))).await.unwrap();
    assert!(!write.is_error, "{write:?}");
    assert_eq!(std::fs::read_to_string(scene.path("ws/new.txt")).unwrap(), "x");
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_serve_over_http_needs_the_token_and_serves_the_agent_as_one_run_tool() {
    let scene = Scene::new().await;
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let addr = format!("127.0.0.1:{port}");
    scene.model.push(Reply::text("the agent's answer"));
    let mut args = vec!["mcp", "serve", built::HELLO, "--agent", "--http", &addr, "--token-env", "SERVE_TOKEN"]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>();
    args.extend(scene.model_args());
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let child = scene.command(&argv).env("SERVE_TOKEN", "serve-token-8812").stderr(Stdio::null()).spawn().unwrap();
    let mut child = KillOnDrop(child);
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(Instant::now() < deadline, "nexo mcp serve never listened");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let http = |token: Option<&str>| {
        let config = ServerConfig {
            url: Some(format!("http://{addr}/mcp")),
            token: token.map(String::from),
            allow_private: true,
            timeout: Some(30),
            ..ServerConfig::default()
        };
        Clients::new(vec![Server::new("nexo", config).unwrap()], ClientOptions::default())
    };
    let limit = Duration::from_secs(30);
    let wrong = tokio::time::timeout(limit, http(Some("not-the-token")).list_tools("nexo"))
        .await
        .expect("a refused token fails at once")
        .unwrap_err()
        .to_string();
    assert!(wrong.contains("401") && wrong.contains("check the token source"), "{wrong}");
    assert!(!wrong.contains("serve-token-8812") && !wrong.contains("not-the-token"), "{wrong}");
    let client = http(Some("serve-token-8812"));
    let tools = tokio::time::timeout(limit, client.list_tools("nexo")).await.expect("listing answers").unwrap();
    assert_eq!(tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["run"]);
    let answer = tokio::time::timeout(limit, client.call_tool("nexo", "run", obj(json!({"input": "hello?"}))))
        .await
        .expect("the run answers")
        .unwrap();
    assert!(!answer.is_error && answer.text.contains("the agent's answer"), "{answer:?}");
    client.close().await;
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    // A non-loopback address is never served without a token.
    let out = scene.nexo(&["mcp", "serve", built::HELLO, "--http", "0.0.0.0:0"]);
    assert!(!out.status.success() && stderr(&out).contains("--token-env"), "{}", stderr(&out));
}

/// A child process that a failing test does not leave behind (it would
/// hold the test harness's output open).
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn obj(v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    match v {
        serde_json::Value::Object(m) => m,
        _ => unreachable!(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_without_the_config_that_defined_its_mcp_server_leaves_the_run_as_it_is() {
    let scene = Scene::new().await;
    let config = scene.config(&format!(
        "[mcp.tests]\ncommand = \"{}\"\ncwd = \"{}\"\n",
        common::mcp_test_server().display(),
        scene.path("ws").display()
    ));
    scene.model.push(Reply::tool_calls(vec![MockToolCall::new(
        "w",
        "mcp__tests__write",
        json!({"path": "approved.txt", "text": "written after approval"}),
    )]));
    scene.model.push(Reply::text("all done"));
    let mut args = vec!["run", built::MCP_PROBE, "prompt go", "--config", &config, "--mode", "approve", "--json"]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>();
    args.extend(scene.model_args());
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = scene.nexo(&argv);
    assert_eq!(out.status.code(), Some(4), "suspended: {}", stderr(&out));
    let end: serde_json::Value = serde_json::from_str(stdout(&out).lines().last().unwrap()).unwrap();
    let run = end["run"].as_str().unwrap().to_string();

    // Without the config file, the resume would not behave as the run did: refused, naming what is missing.
    for command in [vec!["runs", "approve", &run], vec!["runs", "recover"], vec!["runs", "resume", &run]] {
        let out = scene.nexo(&command);
        let err = stderr(&out);
        if command[1] != "recover" {
            assert_eq!(out.status.code(), Some(2), "{command:?}: {err}");
            assert!(err.contains("`tests`") && err.contains("[mcp.tests]") && err.contains("NEXO_CONFIG"), "{err}");
            assert!(err.contains("left as it is"), "{err}");
        }
        let shown = scene.nexo(&["runs", "show", &run, "--json"]);
        let shown: serde_json::Value = serde_json::from_str(&stdout(&shown)).unwrap();
        assert_eq!(shown["run"]["status"], "suspended", "{command:?} left the run as it was: {shown}");
        assert!(!scene.path("ws/approved.txt").exists());
    }
    // With it, the run goes on: the decision the refused approve recorded stands.
    let out = scene.nexo(&["runs", "resume", &run, "--config", &config, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(scene.path("ws/approved.txt")).unwrap(), "written after approval");
    assert_eq!(scene.model.requests().len(), 2, "the first model turn was replayed, not paid again");
    // The run's timeline has the MCP call, with the model's arguments and the server's whole answer.
    let shown: serde_json::Value =
        serde_json::from_str(&stdout(&scene.nexo(&["runs", "show", &run, "--json"]))).unwrap();
    let steps: Vec<&serde_json::Value> =
        shown["timeline"]["passes"].as_array().unwrap().iter().flat_map(|p| p["steps"].as_array().unwrap()).collect();
    let call = steps.iter().find(|s| s["name"] == "mcp__tests__write").unwrap_or_else(|| panic!("the call in {shown}"));
    assert_eq!((&call["kind"], &call["id"], &call["verdict"]), (&json!("mcp_call"), &json!("w"), &json!("allowed")));
    assert_eq!(call["arguments"], json!({"path": "approved.txt", "text": "written after approval"}), "{call}");
    assert!(call["result"].as_str().is_some_and(|r| !r.is_empty()) && call["duration_ms"].is_i64(), "{call}");
}
