//! Hooks: the operator's components asked about each gated call and prompt,
//! through the real `nexo` binary, a loopback model and the hooks built from
//! `plugins/` (`house-rules`, `hook-trap`) and `examples/python-hook`.
//!
//! What a hook decides is what the model reads and what the run's events
//! show; a hook that traps or runs past its deadline fails closed; a
//! recovery after `kill -9` reads the decisions back from the journal and
//! does not ask again, so a changed hook cannot change what happened.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use nexo_model::mock::{MockServer, MockToolCall, Reply};
use nexo_tests as built;
use serde_json::{Value, json};

mod common;

use common::{stderr, stdout};

const TOKEN: &str = "sk-live-4242-hook-token";

struct Scene {
    dir: tempfile::TempDir,
    server: MockServer,
}

impl Scene {
    async fn new() -> Scene {
        // Under the target directory: bubblewrap gives commands a private /tmp.
        let dir = tempfile::Builder::new().prefix("hooks-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        std::fs::create_dir(dir.path().join("ws")).unwrap();
        let agent = "name = \"helper\"\ndescription = \"Helps\"\ncapabilities = [\"read\", \"write\", \"shell\"]\n";
        std::fs::write(dir.path().join("helper.toml"), agent).unwrap();
        Scene { dir, server: MockServer::start().await.unwrap() }
    }

    fn ws(&self) -> PathBuf {
        self.dir.path().join("ws")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = common::nexo_command(&self.dir.path().join("cache"));
        cmd.env("NEXO_STORE", self.dir.path().join("state/nexo.db")).args(args).stdin(Stdio::null());
        cmd
    }

    fn nexo(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run nexo")
    }

    /// `nexo run helper.toml` in auto mode on the local sandbox, with `hooks`.
    fn run_args(&self, hooks: &[&str]) -> Vec<String> {
        self.run_args_with("tidy the project", hooks)
    }

    fn run_args_with(&self, input: &str, hooks: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = vec![
            "run".into(),
            self.dir.path().join("helper.toml").display().to_string(),
            input.into(),
            "--provider".into(),
            "openai-compatible".into(),
            "--base-url".into(),
            self.server.openai_base_url(),
            "--model".into(),
            "test-model".into(),
            "--sandbox".into(),
            "local".into(),
            "--cwd".into(),
            self.ws().display().to_string(),
            "--allow".into(),
            "write,shell".into(),
            "--mode".into(),
            "auto".into(),
            "--json".into(),
        ];
        for hook in hooks {
            args.extend(["--hook".to_string(), hook.to_string()]);
        }
        args
    }

    fn run(&self, hooks: &[&str]) -> Output {
        let args = self.run_args(hooks);
        self.nexo(&args.iter().map(String::as_str).collect::<Vec<_>>())
    }

    /// The text of the `n`th request the model server got.
    fn sent(&self, n: usize) -> String {
        self.server.requests().get(n).map(|r| r.raw_body.clone()).unwrap_or_default()
    }

    fn call(&self, id: &str, name: &str, args: Value) {
        self.server.push(Reply::tool_calls(vec![MockToolCall::new(id, name, args)]));
    }

    /// Every byte the store holds (its files, the write-ahead log among them).
    fn store_bytes(&self) -> String {
        let mut all = String::new();
        for entry in std::fs::read_dir(self.dir.path().join("state")).unwrap().flatten() {
            all.push_str(&String::from_utf8_lossy(&std::fs::read(entry.path()).unwrap_or_default()));
        }
        all
    }
}

fn last_json(out: &Output) -> Value {
    let text = stdout(out);
    serde_json::from_str(text.lines().last().unwrap_or("null")).unwrap_or_else(|_| panic!("no JSON in {text}"))
}

/// The run's recorded events of kind `hook`, each `(hook, decision, detail)`.
fn hook_events(scene: &Scene, id: &str) -> Vec<(String, String, String)> {
    let out = scene.nexo(&["runs", "events", id]);
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["kind"] == "hook")
        .map(|e| {
            let data = if e["data"].is_string() {
                serde_json::from_str::<Value>(e["data"].as_str().unwrap()).unwrap()
            } else {
                e["data"].clone()
            };
            let field = |k: &str| data[k].as_str().unwrap_or_default().to_string();
            (field("hook"), field("decision"), field("detail"))
        })
        .collect()
}

/// A Rust hook refuses, rewrites, redacts, replaces and asks; the model
/// reads each outcome, the events show each decision, and the token it
/// redacted reaches neither the model nor the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rust_hook_denies_rewrites_redacts_replaces_and_asks_and_the_model_sees_each() {
    house_rules_scenario(built::HOUSE_RULES, "house-rules").await;
}

/// The same rules written in Python, built with componentize-py against
/// `wit/` alone, decide the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_hook_decides_as_the_rust_one_does() {
    let hook = built::guests::python_hook();
    house_rules_scenario(&hook.display().to_string(), "python-house-rules").await;
}

async fn house_rules_scenario(hook: &str, name: &str) {
    let scene = Scene::new().await;
    let ws = scene.ws();
    std::fs::write(ws.join("notes.txt"), "keep me").unwrap();
    std::fs::create_dir_all(ws.join("reviewed")).unwrap();
    std::fs::write(ws.join("reviewed/plan.md"), "the reviewed plan").unwrap();
    std::fs::create_dir_all(ws.join("drafts")).unwrap();
    std::fs::write(ws.join("drafts/plan.md"), "the unreviewed draft").unwrap();
    std::fs::write(ws.join("key.txt"), format!("token = {TOKEN}\n")).unwrap();
    std::fs::write(ws.join("memo.txt"), "CONFIDENTIAL: the merger").unwrap();
    scene.call("c1", "shell", json!({"command": "rm notes.txt"}));
    scene.call("c2", "read_file", json!({"path": "drafts/plan.md"}));
    scene.call("c3", "read_file", json!({"path": "key.txt"}));
    scene.call("c4", "read_file", json!({"path": "memo.txt"}));
    scene.call("c5", "shell", json!({"command": "git push origin main"}));
    scene.server.push(Reply::text("tidied"));
    let out = scene.run(&[hook]);
    assert_eq!(out.status.code(), Some(4), "the push waits for a decision: {}\n{}", stderr(&out), stdout(&out));

    // deny: the model reads the reason, and nothing was deleted
    assert!(scene.sent(1).contains("the house rules forbid deleting files"), "{}", scene.sent(1));
    assert!(scene.sent(1).contains(&format!("the hook `{name}` refused the call")), "{}", scene.sent(1));
    assert_eq!(std::fs::read_to_string(ws.join("notes.txt")).unwrap(), "keep me");
    // rewrite: the read went to reviewed/
    assert!(scene.sent(2).contains("the reviewed plan"), "{}", scene.sent(2));
    assert!(!scene.sent(2).contains("the unreviewed draft"), "{}", scene.sent(2));
    // redact: the model never reads the token
    assert!(scene.sent(3).contains("token = [redacted]"), "{}", scene.sent(3));
    // replace
    assert!(scene.sent(4).contains("withheld: the file is marked confidential"), "{}", scene.sent(4));
    assert!(!scene.sent(4).contains("the merger"), "{}", scene.sent(4));
    for n in 0..scene.server.requests().len() {
        assert!(!scene.sent(n).contains(TOKEN), "request {n} carries the token");
    }
    // ask: under auto, the push waits for an approval that says why
    let v = last_json(&out);
    assert_eq!(v["approval"]["arguments"]["command"], "git push origin main", "{v}");
    let reason = v["reason"].as_str().unwrap_or_default();
    assert!(reason.contains(&format!("the hook `{name}` asks: a push leaves the machine")), "{v}");
    let id = v["run"].as_str().unwrap().to_string();
    let decisions: Vec<String> = hook_events(&scene, &id).into_iter().map(|(h, d, _)| format!("{h}:{d}")).collect();
    let want: Vec<String> =
        ["deny", "rewrite", "redact", "replace", "ask"].iter().map(|d| format!("{name}:{d}")).collect();
    assert_eq!(decisions, want, "each decision is an event, in order");

    // Denied by the operator: the run finishes, and the hook was not asked
    // again for the calls the journal holds (no second decision event).
    let out = scene.nexo(&["runs", "deny", &id, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}\n{}", stderr(&out), stdout(&out));
    assert_eq!(last_json(&out)["answer"], "tidied");
    assert!(scene.sent(5).contains("the operator denied"), "{}", scene.sent(5));
    assert_eq!(hook_events(&scene, &id).len(), 5, "the replay asked no hook again");
    let timeline = stdout(&scene.nexo(&["runs", "show", &id, "--full"]));
    assert!(timeline.contains("a push leaves the machine"), "the timeline shows why: {timeline}");
    assert!(!scene.store_bytes().contains(TOKEN), "the redacted token never reached the store");
}

/// A hook that traps, or runs past its deadline, refuses the call it was
/// asked about; the run goes on, and the next question gets a fresh
/// instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_that_traps_or_runs_past_its_deadline_fails_closed() {
    let scene = Scene::new().await;
    std::fs::write(scene.ws().join("HOOK-TRAP.txt"), "never read").unwrap();
    std::fs::write(scene.ws().join("HOOK-SPIN.txt"), "never read").unwrap();
    std::fs::write(scene.ws().join("ok.txt"), "read after the trap").unwrap();
    scene.call("c1", "read_file", json!({"path": "HOOK-TRAP.txt"}));
    scene.call("c2", "read_file", json!({"path": "ok.txt"}));
    scene.call("c3", "read_file", json!({"path": "HOOK-SPIN.txt"}));
    scene.server.push(Reply::text("done"));
    let started = Instant::now();
    let out = scene.run(&[built::HOUSE_RULES]);
    assert_eq!(out.status.code(), Some(0), "{}\n{}", stderr(&out), stdout(&out));
    let trapped = scene.sent(1);
    assert!(
        trapped.contains("the hook `house-rules` failed (it trapped), so the call was refused (hooks fail closed)"),
        "{trapped}"
    );
    assert!(!trapped.contains("never read"), "{trapped}");
    assert!(scene.sent(2).contains("read after the trap"), "a fresh instance answers: {}", scene.sent(2));
    let spun = scene.sent(3);
    assert!(spun.contains("failed (it ran past its deadline), so the call was refused"), "{spun}");
    assert!(!trapped.contains("panicked"), "the hook's own output stays in the operator's log: {trapped}");
    assert!(started.elapsed() < Duration::from_secs(60), "the deadline ended the spin");

    // A hook that traps at every question: every gated call is refused.
    let scene = Scene::new().await;
    std::fs::write(scene.ws().join("ok.txt"), "never read").unwrap();
    scene.call("c1", "read_file", json!({"path": "ok.txt"}));
    scene.server.push(Reply::text("done"));
    let out = scene.run(&[built::HOOK_TRAP]);
    assert_eq!(out.status.code(), Some(0), "{}\n{}", stderr(&out), stdout(&out));
    assert!(scene.sent(1).contains("the hook `hook-trap` failed"), "{}", scene.sent(1));
    assert!(!scene.sent(1).contains("never read"), "{}", scene.sent(1));
}

/// `kill -9` mid-run, then the hook file is swapped for one that traps at
/// every question: the recovery replays the decisions the journal holds
/// (the rewrite stands, nothing is refused) without asking, and the new
/// hook governs only the calls made after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovery_after_kill_9_reads_hook_decisions_from_the_journal() {
    let scene = Scene::new().await;
    let ws = scene.ws();
    std::fs::create_dir_all(ws.join("reviewed")).unwrap();
    std::fs::write(ws.join("reviewed/plan.md"), "the reviewed plan").unwrap();
    std::fs::create_dir_all(ws.join("drafts")).unwrap();
    std::fs::write(ws.join("drafts/plan.md"), "the unreviewed draft").unwrap();
    std::fs::write(ws.join("later.txt"), "read after the recovery").unwrap();
    let hook = scene.dir.path().join("hook.wasm");
    std::fs::copy(built::HOUSE_RULES, &hook).unwrap();
    scene.call("c1", "read_file", json!({"path": "drafts/plan.md"}));
    scene.call("c2", "write_file", json!({"path": "log.txt", "content": "step one"}));
    // The third turn is held far longer than the test takes to kill.
    scene.server.push(
        Reply::tool_calls(vec![MockToolCall::new("c3", "read_file", json!({"path": "later.txt"}))])
            .with_delay(Duration::from_secs(60)),
    );
    let args = scene.run_args(&[&hook.display().to_string()]);
    let mut child = scene
        .command(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while scene.server.requests().len() < 3 {
        assert!(Instant::now() < deadline, "the run never reached its third turn");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(scene.sent(1).contains("the reviewed plan"), "{}", scene.sent(1));
    assert_eq!(std::fs::read_to_string(ws.join("log.txt")).unwrap(), "step one");

    // The hook changes: from now on every question traps.
    std::fs::copy(built::HOOK_TRAP, &hook).unwrap();
    scene.call("c3", "read_file", json!({"path": "later.txt"}));
    scene.server.push(Reply::text("recovered"));
    let out = scene.nexo(&["runs", "recover", "--json"]);
    assert!(out.status.success(), "{}\n{}", stderr(&out), stdout(&out));
    let runs: Vec<Value> = serde_json::from_str(&stdout(&scene.nexo(&["runs", "list", "--json"]))).unwrap();
    assert_eq!(runs[0]["status"], "done", "{}", runs[0]);
    // The replayed turns asked nothing: the model got the third turn again
    // and then the read's refusal, from the new hook.
    let last = scene.sent(scene.server.requests().len() - 1);
    assert!(last.contains("the hook `hook-trap` failed"), "the new hook governs the new call: {last}");
    assert!(!last.contains("read after the recovery"), "{last}");
    assert!(last.contains("the reviewed plan"), "the replayed rewrite stands: {last}");
    assert_eq!(std::fs::read_to_string(ws.join("log.txt")).unwrap(), "step one", "the write was not refused");
}

/// A hook sees each prompt before the model does: a token in the task is
/// redacted before it is sent, and a hook that fails there keeps the
/// prompt from being sent at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_redacts_a_prompt_and_one_that_fails_there_keeps_it_from_the_model() {
    let scene = Scene::new().await;
    scene.server.push(Reply::text("noted"));
    let args = scene.run_args_with(&format!("deploy with the key {TOKEN} please"), &[built::HOUSE_RULES]);
    let out = scene.nexo(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(out.status.code(), Some(0), "{}\n{}", stderr(&out), stdout(&out));
    assert!(scene.sent(0).contains("deploy with the key [redacted] please"), "{}", scene.sent(0));
    assert!(!scene.sent(0).contains(TOKEN), "{}", scene.sent(0));

    let scene = Scene::new().await;
    scene.server.push(Reply::text("never asked"));
    let args = scene.run_args_with("HOOK-PROMPT-TRAP", &[built::HOUSE_RULES]);
    let out = scene.nexo(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_ne!(out.status.code(), Some(0), "{}\n{}", stderr(&out), stdout(&out));
    let said = format!("{}{}", stderr(&out), stdout(&out));
    assert!(
        said.contains("the hook `house-rules` failed (it trapped), so the prompt was not sent (hooks fail closed)"),
        "{said}"
    );
    assert!(scene.server.requests().is_empty(), "the model was asked nothing");
    // The failure was not recorded as a decision: a resume asks the hook again.
    let id = last_json(&out)["run"].as_str().unwrap().to_string();
    let failed = |scene: &Scene| hook_events(scene, &id).iter().filter(|(_, d, _)| d == "failed").count();
    assert_eq!(failed(&scene), 1);
    let again = scene.nexo(&["runs", "resume", &id, "--json"]);
    assert_ne!(again.status.code(), Some(0), "{}\n{}", stderr(&again), stdout(&again));
    assert_eq!(failed(&scene), 2, "the resume asked the hook again");
    assert!(scene.server.requests().is_empty(), "the model was asked nothing");
}

/// A hook is the operator's: an agent cannot name one, and a file that is
/// not a hook is refused before anything runs, naming the fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_that_is_not_a_hook_is_refused_before_the_run() {
    let scene = Scene::new().await;
    let out = scene.run(&[built::HELLO]);
    assert_eq!(out.status.code(), Some(2), "{}\n{}", stderr(&out), stdout(&out));
    let err = stderr(&out);
    assert!(err.contains("hello") && err.contains("hook"), "{err}");
    assert!(scene.server.requests().is_empty(), "nothing ran");
    // The Claude Code CLI sends its prompts where no hook sees them: refused.
    let (agent, ws) = (scene.dir.path().join("helper.toml"), scene.ws());
    let (agent, ws) = (agent.display().to_string(), ws.display().to_string());
    let out = scene.nexo(&[
        "run",
        &agent,
        "tidy the project",
        "--loop",
        "claude-code",
        "--sandbox",
        "local",
        "--cwd",
        &ws,
        "--hook",
        built::HOUSE_RULES,
    ]);
    assert_eq!(out.status.code(), Some(2), "{}\n{}", stderr(&out), stdout(&out));
    assert!(stderr(&out).contains("hooks need nexo's own loop"), "{}", stderr(&out));
    let inspect = scene.nexo(&["inspect", built::HOUSE_RULES]);
    assert!(inspect.status.success(), "{}", stderr(&inspect));
    let text = stdout(&inspect);
    assert!(text.contains("house-rules  (hook, nexo:plugin/hook@0.1.4)"), "{text}");
    assert!(text.contains("before-tool-call, after-tool-call, before-prompt"), "{text}");
    assert!(text.contains("hooks hold no capabilities"), "{text}");
}
