//! MCP through the library: the `mcp-probe` component and the loopback model
//! server, against real MCP servers (nexo's rmcp test server over stdio and
//! streamable HTTP, and the npm reference servers). Each test asserts what
//! the gate let through, what the server actually did, and what the model
//! and the component read.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nexo::Plugin;
use nexo::authority::Permissions;
use nexo::events::Event;
use nexo::grant::Grant;
use nexo::manifest::PermissionMode;
use nexo::runs::{Runs, Subject};
use nexo::settings::{Providers, RunContext, RunOptions};
use nexo_mcp::{ClientOptions, Clients, Server, ServerConfig};
use nexo_model::mock::{MockServer, MockToolCall, Reply};
use nexo_model::{ModelConfig, ProviderKind, resolve};
use nexo_store::{Decision, RunStatus, Store};
use nexo_tests as built;
use serde_json::json;

use crate::engine;

/// `target/debug`, where cargo puts the workspace's binaries.
fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(|deps| deps.parent()).unwrap().to_path_buf()
}

/// nexo's rmcp test server (a binary of the `nexo-mcp` crate).
pub fn test_server() -> String {
    let path = bin_dir().join("nexo-mcp-test-server");
    assert!(
        path.is_file(),
        "{} is missing: build it with `cargo build -p nexo-mcp` (cargo test --workspace does)",
        path.display()
    );
    path.display().to_string()
}

/// An npm reference server's entry point, installed by scripts/mcp-deps.sh.
pub fn npm_server(package: &str) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let path = root.join("target/mcp-npm/node_modules/@modelcontextprotocol").join(package).join("dist/index.js");
    assert!(path.is_file(), "{} is missing: run scripts/mcp-deps.sh", path.display());
    path
}

fn provider(server: &MockServer) -> Arc<dyn nexo_model::Provider> {
    let config = ModelConfig {
        model: Some("test-model".into()),
        provider: Some(ProviderKind::OpenaiCompatible),
        base_url: Some(server.openai_base_url()),
        api_key: Some("sk-mcp-model-key".into()),
        retry_base_delay: Some(Duration::from_millis(1)),
        ..ModelConfig::default()
    };
    resolve(&config).unwrap()
}

/// One test's world: a directory for the servers, the model server, and
/// the MCP clients.
struct Scene {
    dir: tempfile::TempDir,
    model: MockServer,
    clients: Clients,
    events: Arc<Mutex<Vec<Event>>>,
}

impl Scene {
    async fn new(servers: Vec<(&str, ServerConfig)>) -> Scene {
        let dir = tempfile::Builder::new().prefix("mcp-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let servers = servers
            .into_iter()
            .map(|(name, mut config)| {
                if config.command.is_some() {
                    config.cwd.get_or_insert_with(|| dir.path().to_path_buf());
                }
                Server::new(name, config).unwrap()
            })
            .collect();
        let clients = Clients::new(servers, ClientOptions::default());
        Scene { dir, model: MockServer::start().await.unwrap(), clients, events: Arc::default() }
    }

    /// The test server over stdio, as `[mcp.tests]`.
    async fn tests_server() -> Scene {
        Scene::new(vec![("tests", stdio(&test_server(), &[]))]).await
    }

    fn options(&self, permissions: Permissions) -> RunOptions {
        let grant = Grant::default().with_mcp_servers(self.clients.servers().map(|s| s.name().to_string()));
        let events = self.events.clone();
        RunOptions {
            permissions,
            grant,
            providers: Providers {
                model: Some(provider(&self.model)),
                mcp: Some(self.clients.clone()),
                ..Providers::default()
            },
            context: RunContext {
                events: Some(Arc::new(move |e: &Event| events.lock().unwrap().push(e.clone()))),
                ..RunContext::default()
            },
            ..RunOptions::default()
        }
    }

    /// The tool results the model read, by call id, from its next request.
    fn results(&self, request: usize) -> Vec<(String, String)> {
        let body = &self.model.requests()[request].body;
        body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| (m["tool_call_id"].as_str().unwrap().to_string(), m["content"].as_str().unwrap().to_string()))
            .collect()
    }

    fn offered(&self, request: usize) -> Vec<String> {
        let body = &self.model.requests()[request].body;
        body["tools"]
            .as_array()
            .map(|t| t.iter().map(|t| t["function"]["name"].as_str().unwrap().into()).collect())
            .unwrap_or_default()
    }
}

fn stdio(command: &str, args: &[&str]) -> ServerConfig {
    ServerConfig {
        command: Some(command.to_string()),
        args: args.iter().map(|a| a.to_string()).collect(),
        timeout: Some(5),
        ..ServerConfig::default()
    }
}

async fn probe() -> Plugin {
    Plugin::load(engine(), built::MCP_PROBE).await.unwrap()
}

async fn run_probe(scene: &Scene, script: &str, permissions: Permissions) -> String {
    let out = probe().await.agent().unwrap().run(script, &scene.options(permissions)).await.unwrap();
    out.answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_calls_an_allowed_mcp_tool_and_is_denied_another() {
    let scene = Scene::tests_server().await;
    scene.model.push(Reply::tool_calls(vec![
        MockToolCall::new("c1", "mcp__tests__echo", json!({"text": "hello from the model"})),
        MockToolCall::new("c2", "mcp__tests__write", json!({"path": "pwned.txt", "text": "x"})),
    ]));
    scene.model.push(Reply::text("done"));
    let answer = run_probe(&scene, "prompt go", Permissions::new(PermissionMode::ReadOnly)).await;
    assert!(answer.contains("prompt: ok done"), "{answer}");
    // read-only offers only the listed tools: `echo` (any server), `tests/image` and `tests/fetch`.
    assert_eq!(scene.offered(0), ["mcp__tests__echo", "mcp__tests__image", "mcp__tests__fetch"]);
    let results = scene.results(1);
    assert_eq!(results[0], ("c1".into(), "hello from the model".into()));
    assert!(results[1].1.contains("denied") && results[1].1.contains("mcp-allow"), "{results:?}");
    assert!(!scene.dir.path().join("pwned.txt").exists(), "the denied call never reached the server");
    let verdicts: Vec<(String, String)> = scene
        .events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            Event::ToolResult { name, verdict, .. } => Some((name.clone(), verdict.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        verdicts,
        [("mcp__tests__echo".to_string(), "allowed".to_string()), ("mcp__tests__write".into(), "denied".into())]
    );
    scene.clients.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_mode_gives_its_verdict_to_the_model() {
    // (mode, does the write happen)
    for (mode, writes) in [(PermissionMode::Auto, true), (PermissionMode::Ask, true), (PermissionMode::ReadOnly, false)]
    {
        let scene = Scene::tests_server().await;
        scene.model.push(Reply::tool_calls(vec![MockToolCall::new(
            "w",
            "mcp__tests__write",
            json!({"path": "out.txt", "text": "written"}),
        )]));
        scene.model.push(Reply::text("ok"));
        let asked = Arc::new(Mutex::new(Vec::new()));
        let log = asked.clone();
        let permissions = Permissions::new(mode).on_ask_mcp(move |server, tool, args| {
            log.lock().unwrap().push(format!("{server}/{tool} {args}"));
            true
        });
        run_probe(&scene, "prompt write it", permissions).await;
        assert_eq!(scene.dir.path().join("out.txt").exists(), writes, "{mode:?}");
        let asked = asked.lock().unwrap().clone();
        if mode == PermissionMode::Ask {
            assert_eq!(asked, [r#"tests/write {"path":"out.txt","text":"written"}"#], "the hook sees the arguments");
        } else {
            assert!(asked.is_empty(), "{mode:?} asks nobody");
        }
        scene.clients.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_mode_suspends_an_mcp_call_as_a_durable_approval_with_its_arguments() {
    let scene = Scene::tests_server().await;
    scene.model.push(Reply::tool_calls(vec![MockToolCall::new(
        "w",
        "mcp__tests__write",
        json!({"path": "approved.txt", "text": "after approval"}),
    )]));
    scene.model.push(Reply::text("written"));
    let store: Arc<dyn Store> = Arc::new(nexo_store::MemoryStore::new());
    let plugin = probe().await;
    let subject = || Subject::Component {
        agent: plugin.agent().unwrap(),
        sha256: plugin.sha256(),
        path: std::path::Path::new(built::MCP_PROBE),
    };
    let options = scene.options(Permissions::new(PermissionMode::Approve));
    let end = Runs::new(store.clone(), false)
        .start(subject(), "prompt write", &nexo::runs::RunSpec::default(), &options)
        .await
        .unwrap();
    assert_eq!(end.run.status, RunStatus::Suspended, "{:?}", end.run);
    assert!(!scene.dir.path().join("approved.txt").exists(), "nothing runs before the decision");
    let approval = store.approval(&end.run.id).await.unwrap().unwrap();
    assert_eq!(approval.capability, "mcp");
    assert_eq!(approval.tool, "call-tool");
    assert_eq!(
        approval.arguments,
        json!({"server": "tests", "tool": "write", "arguments": {"path": "approved.txt", "text": "after approval"}})
    );
    let runs = Runs::new(store.clone(), false);
    runs.decide(&end.run.id, &approval.call(), Decision::Approved).await.unwrap();
    let end = runs.resume(&end.run.id, nexo_store::Claim::Resume, None, subject(), &options, false).await.unwrap();
    assert_eq!(end.run.status, RunStatus::Done, "{:?}", end.run);
    assert_eq!(std::fs::read_to_string(scene.dir.path().join("approved.txt")).unwrap(), "after approval");
    assert_eq!(scene.model.requests().len(), 2, "the resume replayed the first model call");
    scene.clients.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_calls_mcp_directly_through_the_same_gate() {
    let scene = Scene::tests_server().await;
    let script = r#"
        list tests
        call tests echo {"text":"direct"}
        call tests image {}
        call tests fail {"message":"boom"}
        call tests write {"path":"x.txt","text":"x"}
        call everything echo {}
        call other echo {}
        call tests echo not-json
    "#;
    let answer = run_probe(&scene, script, Permissions::new(PermissionMode::ReadOnly)).await;
    let lines: Vec<&str> = answer.lines().collect();
    assert!(lines[0].starts_with("list tests: ok echo,fail,hang,large,image,crash,write,env,connect"), "{answer}");
    assert_eq!(lines[1], "call tests/echo: ok direct");
    assert!(lines[2].starts_with("call tests/image: ok ") && lines[2].contains("[image image/png"), "{answer}");
    // `fail` is not on the list: read-only denies it before the server sees it.
    assert!(lines[3].starts_with("call tests/fail: denied:"), "{answer}");
    assert!(lines[4].starts_with("call tests/write: denied:") && lines[4].contains("mcp-allow"), "{answer}");
    assert!(lines[5].starts_with("call everything/echo: denied:") && lines[5].contains("[mcp.everything]"), "{answer}");
    assert!(lines[6].starts_with("call other/echo: denied:") && lines[6].contains("mcp-servers"), "{answer}");
    assert!(lines[7].starts_with("call tests/echo: other: ") && lines[7].contains("not JSON"), "{answer}");
    assert!(!scene.dir.path().join("x.txt").exists());
    scene.clients.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_error_a_hang_a_crash_and_a_flood_are_tool_errors_and_the_run_goes_on() {
    let mut config = stdio(&test_server(), &[]);
    config.timeout = Some(1);
    let scene = Scene::new(vec![("tests", config)]).await;
    let script = r#"
        call tests fail {"message":"boom"}
        call tests hang {"seconds":30}
        call tests echo {"text":"after the hang"}
        call tests crash {}
        call tests echo {"text":"after the crash"}
        call tests large {"bytes":200000}
    "#;
    let started = Instant::now();
    let answer = run_probe(&scene, script, Permissions::new(PermissionMode::Auto)).await;
    assert!(started.elapsed() < Duration::from_secs(20), "a hung server bounds the call, not the run");
    let lines: Vec<&str> = answer.lines().collect();
    assert!(lines[0].starts_with("call tests/fail: failed: boom"), "{answer}");
    assert!(lines[1].starts_with("call tests/hang: timeout:") && lines[1].contains("within 1s"), "{answer}");
    assert_eq!(lines[2], "call tests/echo: ok after the hang");
    assert!(lines[3].starts_with("call tests/crash: failed:"), "{answer}");
    assert_eq!(lines[4], "call tests/echo: ok after the crash", "the next call starts the server again");
    // The one truncation routine: cut at 64 KiB, and the cut is marked.
    assert!(
        lines[5].len() < 70_000 && lines[5].contains("[output cut at 65536 bytes]"),
        "{}",
        &lines[5][lines[5].len() - 200..]
    );
    scene.clients.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_npm_reference_servers_serve_the_model_and_the_component() {
    let everything = npm_server("server-everything");
    let scene = Scene::new(vec![("everything", stdio("node", &[everything.to_str().unwrap(), "stdio"]))]).await;
    scene.model.push(Reply::tool_calls(vec![
        MockToolCall::new("e", "mcp__everything__echo", json!({"message": "through node"})),
        MockToolCall::new("i", "mcp__everything__get-tiny-image", json!({})),
    ]));
    scene.model.push(Reply::text("seen"));
    let answer = run_probe(&scene, "prompt go\nlist everything", Permissions::new(PermissionMode::Auto)).await;
    let results = scene.results(1);
    assert!(results[0].1.contains("through node"), "{results:?}");
    assert!(results[1].1.contains("[image image/png"), "content other than text is summarized: {results:?}");
    assert!(scene.offered(0).contains(&"mcp__everything__get-tiny-image".to_string()), "{:?}", scene.offered(0));
    assert!(answer.contains("list everything: ok ") && answer.contains("get-sum"), "{answer}");
    scene.clients.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bearer_token_never_reaches_events_the_store_or_the_component() {
    const TOKEN: &str = "mcp-bearer-7f3c9a1e5b2d4f60";
    let dir = tempfile::Builder::new().prefix("mcp-token-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let mut child = tokio::process::Command::new(test_server())
        .args(["http", "--port", "0", "--token", TOKEN])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(child.stdout.take().unwrap()));
    let addr = lines.next_line().await.unwrap().unwrap();
    let config = ServerConfig {
        url: Some(format!("http://{addr}/mcp")),
        token: Some(TOKEN.into()),
        allow_private: true,
        ..ServerConfig::default()
    };
    let mut scene = Scene::new(vec![("tests", config)]).await;
    scene.dir = dir;
    scene.model.push(Reply::tool_calls(vec![MockToolCall::new("e", "mcp__tests__echo", json!({"text": "over http"}))]));
    scene.model.push(Reply::text("done"));
    let db = scene.dir.path().join("runs.db");
    let store = nexo_store::open(&nexo_store::Location::Sqlite(db.clone())).await.unwrap();
    let plugin = probe().await;
    let subject =
        Subject::Component { agent: plugin.agent().unwrap(), sha256: plugin.sha256(), path: std::path::Path::new("p") };
    let script = "prompt go\ncall tests echo {\"text\":\"direct\"}";
    let options = scene.options(Permissions::new(PermissionMode::Auto));
    let end = Runs::new(store.clone(), false)
        .start(subject, script, &nexo::runs::RunSpec::default(), &options)
        .await
        .unwrap();
    assert_eq!(end.run.status, RunStatus::Done, "{:?}", end.run);
    let answer = end.run.result.clone().unwrap_or_default();
    assert!(answer.contains("call tests/echo: ok direct"), "{answer}");
    assert_eq!(scene.results(1)[0].1, "over http");
    scene.clients.close().await;
    drop(store);
    // Everything observable: events, the answer, the model's requests, the
    // store's files, byte for byte.
    let events = serde_json::to_string(&*scene.events.lock().unwrap()).unwrap();
    let requests = format!("{:?}", scene.model.requests());
    let mut haystacks = vec![events, answer, requests];
    // The database with its WAL and shared-memory files. The pool closes in
    // the background, so a checkpoint may move the run from the WAL into the
    // database between two reads: read until the run's id shows up somewhere.
    let marker = end.run.id.to_string();
    let mut files = Vec::new();
    for _ in 0..100 {
        files.clear();
        for suffix in ["", "-wal", "-shm"] {
            if let Ok(bytes) = std::fs::read(format!("{}{suffix}", db.display())) {
                files.push(String::from_utf8_lossy(&bytes).into_owned());
            }
        }
        if files.iter().any(|text| text.contains(&marker)) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(files.iter().any(|text| text.contains(&marker)), "the run was written to {}", db.display());
    haystacks.extend(files);
    for text in &haystacks {
        assert!(!text.contains(TOKEN), "the token leaked: {}", &text[..text.len().min(300)]);
    }
    let _ = child.kill().await;
}
