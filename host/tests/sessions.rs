//! Sessions through the `nexo` binary: a session remembers across separate
//! processes (on SQLite and on PostgreSQL), re-applies its instructions
//! without storing them, never widens the grant of the command that
//! prompts it, allows one prompt at a time, recovers a prompt whose process
//! died, and is deleted by `nexo sessions delete` and by retention.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use nexo_model::mock::{MockServer, MockToolCall, Reply};
use serde_json::{Value, json};

mod common;

use common::{postgres_database, stderr, stdout};

struct Scene {
    dir: tempfile::TempDir,
    store: String,
    base_url: String,
}

impl Scene {
    fn new(store: Option<String>, base_url: String) -> Scene {
        let dir = tempfile::Builder::new().prefix("sessions-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        std::fs::create_dir(dir.path().join("ws")).unwrap();
        std::fs::write(dir.path().join("ws/notes.txt"), "the user's name is on file").unwrap();
        std::fs::write(
            dir.path().join("agent.toml"),
            "name = \"assistant\"\ndescription = \"Remembers\"\ninstructions = \"You are a helpful assistant.\"\n\
             capabilities = [\"read\", \"write\"]\n",
        )
        .unwrap();
        let store = store.unwrap_or_else(|| dir.path().join("nexo.db").display().to_string());
        Scene { dir, store, base_url }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = common::nexo_command(&self.path("cache"));
        cmd.env("NEXO_STORE", &self.store).env("OPENAI_API_KEY", "sk-session-test").args(args).stdin(Stdio::null());
        cmd
    }

    fn nexo(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run nexo")
    }

    /// `nexo chat` of the test agent in session `instance`, against the
    /// mock model, in the local sandbox.
    fn chat_args(&self, instance: &str, extra: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = [
            "chat",
            &self.path("agent.toml").display().to_string(),
            "--session",
            instance,
            "--provider",
            "openai-compatible",
            "--base-url",
            &self.base_url,
            "--model",
            "m",
            "--sandbox",
            "local",
            "--cwd",
            &self.path("ws").display().to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    }

    fn chat(&self, instance: &str, prompt: &str, extra: &[&str]) -> Output {
        let mut args = self.chat_args(instance, extra);
        args.push(prompt.to_string());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.nexo(&args)
    }

    fn show(&self, session: &str) -> Value {
        let o = self.nexo(&["sessions", "show", session, "--json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_str(&stdout(&o)).unwrap()
    }
}

/// The roles of a chat-completions request's messages.
fn roles(request: &Value) -> Vec<String> {
    request["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap().to_string()).collect()
}

async fn remembers_across_processes(store: Option<String>) {
    let model = MockServer::start().await.unwrap();
    let scene = Scene::new(store, model.openai_base_url());
    model
        .push(Reply::tool_calls(vec![MockToolCall::new("c1", "read_file", json!({"path": "notes.txt"}))]))
        .push(Reply::text("Nice to meet you, Mac."))
        .push(Reply::text("Your name is Mac."));

    let first = scene.chat("user-42", "My name is Mac.", &[]);
    assert!(first.status.success(), "{}", stderr(&first));
    assert_eq!(stdout(&first).trim(), "Nice to meet you, Mac.");
    // A separate process, as after a restart.
    let second = scene.chat("user-42", "What is my name?", &[]);
    assert!(second.status.success(), "{}", stderr(&second));
    assert_eq!(stdout(&second).trim(), "Your name is Mac.");

    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    let last = &requests[2].body;
    assert_eq!(
        roles(last),
        ["system", "user", "assistant", "tool", "assistant", "user"],
        "the second prompt carries the first exchange, tool call and result included: {last}"
    );
    let messages = last["messages"].as_array().unwrap();
    assert_eq!(messages.iter().filter(|m| m["role"] == "system").count(), 1, "exactly one system message");
    assert!(messages[0]["content"].as_str().unwrap().contains("You are a helpful assistant."));
    assert_eq!(messages[1]["content"], "My name is Mac.");
    assert!(messages[3]["content"].as_str().unwrap().contains("the user's name is on file"));
    assert_eq!(messages[4]["content"], "Nice to meet you, Mac.");
    assert_eq!(messages[5]["content"], "What is my name?");

    let shown = scene.show("assistant/user-42");
    let thread = shown["thread"].as_array().unwrap();
    let stored: Vec<&str> = thread.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(stored, ["user", "assistant", "tool_result", "assistant", "user", "assistant"]);
    assert!(thread.iter().all(|m| m["role"] != "system"), "instructions are re-applied, never stored");
    assert_eq!(shown["session"]["messages"], 6);
    let runs = shown["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "each prompt is a recorded run");
    assert!(runs.iter().all(|r| r["status"] == "done" && r["session"] == shown["session"]["id"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_remembers_across_two_processes_on_sqlite() {
    remembers_across_processes(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_remembers_across_two_processes_on_postgres() {
    if let Some(url) = postgres_database("a_session_remembers_across_two_processes_on_postgres").await {
        remembers_across_processes(Some(url)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_adds_memory_never_authority() {
    let model = MockServer::start().await.unwrap();
    let scene = Scene::new(None, model.openai_base_url());
    let write = |id: &str, path: &str| {
        Reply::tool_calls(vec![MockToolCall::new(id, "write_file", json!({"path": path, "content": "x"}))])
    };
    model.push(write("w1", "a.txt")).push(Reply::text("wrote a")).push(write("w2", "b.txt")).push(Reply::text("no"));

    let wide = scene.chat("u", "write a", &["--allow", "write", "--mode", "auto"]);
    assert!(wide.status.success(), "{}", stderr(&wide));
    assert_eq!(std::fs::read_to_string(scene.path("ws/a.txt")).unwrap(), "x");
    // The same session, opened with the default grant (read and glob).
    let narrow = scene.chat("u", "write b", &[]);
    assert!(narrow.status.success(), "{}", stderr(&narrow));
    assert!(!scene.path("ws/b.txt").exists(), "the narrower grant cannot write");

    let requests = model.requests();
    let tools = |r: &Value| -> Vec<String> {
        r["tools"]
            .as_array()
            .map_or(Vec::new(), |t| t.iter().map(|t| t["function"]["name"].as_str().unwrap().to_string()).collect())
    };
    assert!(tools(&requests[0].body).contains(&"write_file".to_string()));
    assert!(!tools(&requests[2].body).contains(&"write_file".to_string()), "not offered under the narrower grant");
    // The history shows the earlier write; the refusal is a tool error.
    let last = requests[3].body["messages"].as_array().unwrap().clone();
    let result = last.last().unwrap();
    assert_eq!(result["role"], "tool");
    assert!(result["content"].as_str().unwrap().contains("write_file"), "{result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_prompt_at_a_time_and_an_approved_prompt_joins_the_thread() {
    let model = MockServer::start().await.unwrap();
    let scene = Scene::new(None, model.openai_base_url());
    model
        .push(Reply::tool_calls(vec![MockToolCall::new("w", "write_file", json!({"path": "a.txt", "content": "x"}))]))
        .push(Reply::text("written"))
        .push(Reply::text("second"));
    let suspended = scene.chat("u", "write a", &["--allow", "write", "--mode", "approve", "--json"]);
    assert_eq!(suspended.status.code(), Some(4), "{}", stderr(&suspended));
    let outcome: Value = serde_json::from_str(stdout(&suspended).lines().last().unwrap()).unwrap();
    assert_eq!(outcome["status"], "suspended");
    let run = outcome["run"].as_str().unwrap().to_string();
    assert!(outcome["session"].as_str().unwrap().starts_with('s'));

    let refused = scene.chat("u", "meanwhile", &[]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    let why = stderr(&refused);
    assert!(why.contains("in progress") && why.contains(&run), "{why}");
    assert_eq!(model.requests().len(), 1, "the refused prompt called no model");

    let approved = scene.nexo(&["runs", "approve", &run]);
    assert!(approved.status.success(), "{}", stderr(&approved));
    assert_eq!(std::fs::read_to_string(scene.path("ws/a.txt")).unwrap(), "x");
    let next = scene.chat("u", "and now?", &[]);
    assert!(next.status.success(), "{}", stderr(&next));
    let last = &model.requests()[2].body;
    assert_eq!(roles(last), ["system", "user", "assistant", "tool", "assistant", "user"], "{last}");
    assert_eq!(scene.show("assistant/u")["session"]["messages"], 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_whose_process_died_is_recovered_by_the_next_chat() {
    let model = MockServer::start().await.unwrap();
    let scene = Scene::new(None, model.openai_base_url());
    model
        .push(Reply::tool_calls(vec![MockToolCall::new("w", "write_file", json!({"path": "a.txt", "content": "x"}))]))
        .push(Reply::text("too late").with_delay(Duration::from_secs(120)))
        .push(Reply::text("recovered"))
        .push(Reply::text("next"));
    let args = scene.chat_args("u", &["--allow", "write", "--mode", "auto", "write a"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut first = scene.command(&args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while model.requests().len() < 2 {
        assert!(Instant::now() < deadline, "the first chat never reached turn 2");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.kill().unwrap();
    first.wait().unwrap();

    let next = scene.chat("u", "what happened?", &["--allow", "write", "--mode", "auto"]);
    assert!(next.status.success(), "{}", stderr(&next));
    assert!(stderr(&next).contains("recovering prompt"), "{}", stderr(&next));
    assert_eq!(stdout(&next).trim(), "next");
    let requests = model.requests();
    assert_eq!(requests.len(), 4, "turn 1 was replayed from the journal, not paid again");
    assert_eq!(roles(&requests[3].body), ["system", "user", "assistant", "tool", "assistant", "user"]);
    let shown = scene.show("assistant/u");
    let runs: Vec<&str> = shown["runs"].as_array().unwrap().iter().map(|r| r["status"].as_str().unwrap()).collect();
    assert_eq!(runs, ["done", "done"]);
    assert_eq!(shown["thread"][3]["text"], "recovered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_from_stdin_share_one_session() {
    let model = MockServer::start().await.unwrap();
    let scene = Scene::new(None, model.openai_base_url());
    model.push(Reply::text("one")).push(Reply::text("two"));
    let args = scene.chat_args("lines", &[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child =
        scene.command(&args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"first\n\nsecond\n").unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).lines().collect::<Vec<_>>(), ["one", "two"]);
    assert_eq!(roles(&model.requests()[1].body), ["system", "user", "assistant", "user"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_removes_the_thread_runs_events_and_journal() {
    let model = MockServer::start().await.unwrap();
    let scene = Scene::new(None, model.openai_base_url());
    model.push(Reply::text("hi"));
    let o = scene.chat("gone", "hello", &["--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let outcome: Value = serde_json::from_str(stdout(&o).lines().last().unwrap()).unwrap();
    let run = outcome["run"].as_str().unwrap().to_string();
    let session = outcome["session"].as_str().unwrap().to_string();

    let store = nexo_store::open(&nexo_store::Location::parse(&scene.store).unwrap()).await.unwrap();
    assert!(!store.journal(&run).await.unwrap().is_empty());
    assert!(!store.events(&run, 0, 100).await.unwrap().is_empty());
    drop(store);

    let o = scene.nexo(&["sessions", "delete", "assistant/gone"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("1 run(s)"), "{}", stderr(&o));
    let o = scene.nexo(&["sessions", "show", &session]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no session"), "{}", stderr(&o));
    assert_eq!(scene.nexo(&["runs", "show", &run]).status.code(), Some(2), "its run is gone");
    let store = nexo_store::open(&nexo_store::Location::parse(&scene.store).unwrap()).await.unwrap();
    assert!(store.journal(&run).await.unwrap().is_empty(), "its journal is gone");
    assert!(store.events(&run, 0, 100).await.unwrap().is_empty(), "its events are gone");
    assert!(store.thread(&session).await.unwrap().is_empty(), "its thread is gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_expired_sessions_and_nothing_else() {
    let model = MockServer::start().await.unwrap();
    let scene = Scene::new(None, model.openai_base_url());
    let day = 86_400_000;
    let now = nexo_store::now_ms();
    let store = nexo_store::open(&nexo_store::Location::parse(&scene.store).unwrap()).await.unwrap();
    let old = store.open_session("assistant", "old", now - 40 * day).await.unwrap();
    let recent = store.open_session("assistant", "recent", now - 20 * day).await.unwrap();
    let other = store.open_session("other-agent", "old", now - 31 * day).await.unwrap();
    store.append_thread(&old.id, 0, vec![json!({"role": "user", "text": "hi"})], now - 40 * day).await.unwrap();
    drop(store);

    std::fs::write(scene.path("nexo.toml"), "[sessions]\nretain = \"30d\"\n").unwrap();
    let config = scene.path("nexo.toml").display().to_string();
    let o = scene.nexo(&["sessions", "sweep", "--config", &config]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut deleted: Vec<String> = stdout(&o).lines().map(str::to_string).collect();
    deleted.sort();
    let mut expected = vec![old.id.clone(), other.id.clone()];
    expected.sort();
    assert_eq!(deleted, expected, "only the sessions idle for more than 30 days");

    let o = scene.nexo(&["sessions", "list", "--json"]);
    let left: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let ids: Vec<&str> = left.as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [recent.id.as_str()]);

    // `nexo chat --retain` sweeps first; a session it prompts is fresh again.
    model.push(Reply::text("still here"));
    let o = scene.chat("recent", "hello", &["--retain", "10d"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let shown = scene.show("assistant/recent");
    assert_eq!(shown["session"]["messages"], 2, "expired and opened afresh: only this exchange");
    assert_ne!(shown["session"]["id"], recent.id.as_str());

    let bad = scene.nexo(&["sessions", "sweep", "--retain", "soon"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("30d"), "{}", stderr(&bad));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_session_prompt_runs_on_a_worker_and_joins_the_thread() {
    let model = MockServer::start().await.unwrap();
    let scene = Scene::new(None, model.openai_base_url());
    model.push(Reply::text("one")).push(Reply::text("two"));
    let first = scene.chat("bg", "first", &[]);
    assert!(first.status.success(), "{}", stderr(&first));
    let queued = scene.chat("bg", "second", &["--later"]);
    assert!(queued.status.success(), "{}", stderr(&queued));
    let run = stdout(&queued).trim().to_string();
    assert!(run.starts_with('r'), "{run}");
    let busy = scene.chat("bg", "third", &[]);
    assert_eq!(busy.status.code(), Some(2));
    assert!(stderr(&busy).contains("queued for a worker"), "{}", stderr(&busy));

    let worker = scene.nexo(&["worker", "--poll-ms", "20", "--until-idle"]);
    assert!(worker.status.success(), "{}", stderr(&worker));
    let shown = scene.show("assistant/bg");
    assert_eq!(shown["session"]["messages"], 4, "{shown}");
    assert_eq!(shown["thread"][3]["text"], "two");
    assert_eq!(roles(&model.requests()[1].body), ["system", "user", "assistant", "user"]);
}

/// The processes whose command line contains `marker`.
fn processes_with(marker: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().chars().all(|c| c.is_ascii_digit()))
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .filter(|cmdline| String::from_utf8_lossy(cmdline).contains(marker))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_session_closes_what_it_holds_once_and_then_refuses_prompts() {
    use nexo::authority::Permissions;
    use nexo::grant::Grant;
    use nexo::manifest::PermissionMode;
    use nexo::runs::{Runs, Subject};
    use nexo::session::OpenSession;
    use nexo::settings::{Providers, RunOptions};
    use nexo_mcp::{ClientOptions, Clients, Server, ServerConfig};

    let model = MockServer::start().await.unwrap();
    model
        .push(Reply::tool_calls(vec![MockToolCall::new("e", "mcp__tests__echo", json!({"text": "hi"}))]))
        .push(Reply::text("one"));
    let dir = tempfile::Builder::new().prefix("open-session-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let marker = format!("nexo-session-mcp-{}", std::process::id());
    let server = std::path::Path::new(env!("CARGO_BIN_EXE_nexo")).with_file_name("nexo-mcp-test-server");
    let config = ServerConfig {
        command: Some(server.display().to_string()),
        args: vec!["stdio".into(), marker.clone()],
        cwd: Some(dir.path().to_path_buf()),
        ..ServerConfig::default()
    };
    let clients = Clients::new(vec![Server::new("tests", config).unwrap()], ClientOptions::default());
    let agent = nexo::agent_file::AgentFile::parse(
        "name = \"assistant\"\ndescription = \"d\"\ninstructions = \"Use the tools.\"\nmcp-servers = [\"tests\"]\n",
        dir.path().join("agent.toml"),
    )
    .unwrap();
    let provider = nexo_model::resolve(&nexo_model::ModelConfig {
        model: Some("m".into()),
        provider: Some(nexo_model::ProviderKind::OpenaiCompatible),
        base_url: Some(model.openai_base_url()),
        ..nexo_model::ModelConfig::default()
    })
    .unwrap();
    let options = RunOptions {
        grant: Grant::default().with_mcp_servers(["tests"]),
        permissions: Permissions::new(PermissionMode::Auto),
        providers: Providers { model: Some(provider), mcp: Some(clients), ..Providers::default() },
        ..RunOptions::default()
    };
    let store = nexo_store::open(&nexo_store::Location::Sqlite(dir.path().join("nexo.db"))).await.unwrap();
    let open = OpenSession::resume(Runs::new(store, false), "assistant", "u", options, nexo::runs::RunSpec::default())
        .await
        .unwrap();

    let end = open.prompt(Subject::File(&agent), "echo hi").await.unwrap();
    assert_eq!(end.run.result.as_deref(), Some("one"), "{:?}", end.run.error);
    assert_eq!(end.run.session.as_deref(), Some(open.record().id.as_str()));
    let tool = model.requests()[1].body["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(tool["content"], "hi", "the MCP server answered: {tool}");
    assert_eq!(processes_with(&marker), 1, "the session holds its MCP server between prompts");

    open.close().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while processes_with(&marker) > 0 {
        assert!(Instant::now() < deadline, "close left the MCP server running");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    open.close().await.unwrap();
    let refused = open.prompt(Subject::File(&agent), "again").await.unwrap_err();
    assert!(refused.to_string().contains("was closed"), "{refused}");
    assert_eq!(model.requests().len(), 2, "a closed session calls no model");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_prompt_on_a_terminal_it_is_an_interactive_chat() {
    use std::io::Write;
    let model = MockServer::start().await.unwrap();
    let scene = Scene::new(None, model.openai_base_url());
    model.push(Reply::text("first answer")).push(Reply::text("second answer"));
    let mut terminal = common::Terminal::open();
    let slave = terminal.slave.try_clone().unwrap();
    let args = scene.chat_args("tty", &[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child = scene
        .command(&args)
        .stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave))
        .spawn()
        .unwrap();
    terminal.wait_for("you> ", 1);
    terminal.master.write_all(b"My name is Mac.\n").unwrap();
    terminal.wait_for("first answer", 1);
    terminal.wait_for("you> ", 2);
    terminal.master.write_all(b"What is my name?\n").unwrap();
    terminal.wait_for("second answer", 1);
    terminal.wait_for("you> ", 3);
    terminal.master.write_all(b"/exit\n").unwrap();
    let status = child.wait().unwrap();
    let shown = terminal.drain();
    assert!(status.success(), "{status:?}: {shown:?}");
    assert!(shown.contains("chatting with `assistant`"), "{shown:?}");
    assert_eq!(roles(&model.requests()[1].body), ["system", "user", "assistant", "user"]);
    assert_eq!(scene.show("assistant/tty")["session"]["messages"], 4);
}
