//! `--loop claude-code`, driven against a fake `claude` (the repo's
//! `nexo-fake-claude`) that checks what it is given and replays recorded
//! `stream-json` sessions of the real CLI (2.1.332), making their tool
//! calls for real over the MCP server nexo gives it. The live test against
//! the real CLI is `live_claude_code`, which runs the pinned CLI that
//! `scripts/claude-deps.sh` installs.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use nexo_tests as built;
use serde_json::{Value, json};

mod common;

use common::{stderr, stdout};

/// The key the tests hand nexo; it must reach the CLI and nothing else.
const KEY: &str = "sk-ant-claude-code-test-key";

fn fake_claude() -> PathBuf {
    let path = Path::new(env!("CARGO_BIN_EXE_nexo")).with_file_name("nexo-fake-claude");
    assert!(path.is_file(), "{} is missing: build it with `cargo build -p nexo-tests`", path.display());
    path
}

fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/claude-code").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

struct Scene {
    dir: tempfile::TempDir,
}

impl Scene {
    fn new() -> Scene {
        let dir = tempfile::Builder::new().prefix("claude-code-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        std::fs::create_dir(dir.path().join("ws")).unwrap();
        std::fs::write(dir.path().join("ws/notes.md"), "hello notes\n").unwrap();
        std::fs::write(
            dir.path().join("agent.toml"),
            "name = \"cc-test\"\ndescription = \"A test agent\"\ninstructions = \"You are a test agent.\"\n\
             capabilities = [\"read\", \"glob\", \"write\"]\nmax-turns = 5\n",
        )
        .unwrap();
        Scene { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn ws(&self) -> String {
        self.path("ws").display().to_string()
    }

    /// A `claude` that replays `script`: a wrapper, as nexo gives the CLI
    /// no environment of its own to pass the script's path in.
    fn claude(&self, script: &str) -> String {
        std::fs::write(self.path("script.jsonl"), script).unwrap();
        // Beside the wrapper: a confined CLI reads only the system view, its
        // sandbox directory and the directory it is in (with its script).
        let fake = self.path("nexo-fake-claude");
        if !fake.exists() && std::fs::hard_link(fake_claude(), &fake).is_err() {
            std::fs::copy(fake_claude(), &fake).unwrap();
        }
        let wrapper = self.path("claude");
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\nexec {} --script {} --log {} \"$@\"\n",
                fake.display(),
                self.path("script.jsonl").display(),
                self.path("ws/claude.log").display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
        wrapper.display().to_string()
    }

    /// What the fake recorded: its launch, then any permission answers. The
    /// log is in the sandbox directory, the one place a confined CLI writes.
    fn log(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.path("ws/claude.log")).unwrap_or_default();
        text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    fn nexo(&self, args: &[&str]) -> Output {
        self.nexo_with(args, &[])
    }

    /// `nexo` with `env` added to the test's environment.
    fn nexo_with(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = common::nexo_command(&self.path("cache"));
        cmd.envs(env.iter().copied());
        cmd.env("ANTHROPIC_API_KEY", KEY)
            .env("OPENAI_API_KEY", "sk-openai-must-not-pass")
            .current_dir(self.dir.path())
            .args(args)
            .stdin(Stdio::null());
        output_within(cmd, Duration::from_secs(90))
    }

    /// `nexo run` of the test agent on the Claude Code loop.
    fn run(&self, claude: &str, extra: &[&str]) -> Output {
        self.run_with(claude, extra, &[])
    }

    /// [`Scene::run`] with `env` added to nexo's environment.
    fn run_with(&self, claude: &str, extra: &[&str], env: &[(&str, &str)]) -> Output {
        let agent = self.path("agent.toml").display().to_string();
        let ws = self.ws();
        let mut args = vec![
            "run",
            &agent,
            "read the notes",
            "--loop",
            "claude-code",
            "--claude-binary",
            claude,
            "--model",
            "claude-sonnet-4-5",
            "--sandbox",
            "local",
            "--cwd",
            &ws,
            "--json",
        ];
        args.extend_from_slice(extra);
        self.nexo_with(&args, env)
    }
}

/// Runs `cmd`, killing it if it takes longer than `limit`.
fn output_within(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start nexo");
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let out = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = out.read_to_end(&mut b);
        b
    });
    let err = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = err.read_to_end(&mut b);
        b
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("nexo took longer than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output { status, stdout: out.join().unwrap(), stderr: err.join().unwrap() }
}

/// The `--json` lines.
fn lines(o: &Output) -> Vec<Value> {
    stdout(o).lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

/// The events, as `kind name verdict` (and the final status), ids and token
/// counts left out: what must agree between the loops.
fn shape(o: &Output) -> Vec<String> {
    lines(o)
        .iter()
        .filter_map(|e| {
            let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
            match s("event").as_str() {
                "" => None,
                "turn-started" => Some(format!("turn {}", e["turn"])),
                "tool-call" => Some(format!("call {} {}", s("name"), e["arguments"])),
                "tool-result" => Some(format!("result {} {}", s("name"), s("verdict"))),
                "done" => Some(format!("done {}", s("status"))),
                other => Some(other.to_string()),
            }
        })
        .collect()
}

fn answer(o: &Output) -> Value {
    lines(o).into_iter().rev().find(|l| l.get("agent").is_some()).unwrap_or(Value::Null)
}

/// The tool-use session, with its call changed to `tool` with `input`.
fn session_calling(tool: &str, input: Value) -> String {
    fixture("tool-use.jsonl")
        .replace("\"name\":\"mcp__nexo__read_file\"", &format!("\"name\":\"mcp__nexo__{tool}\""))
        .replace("\"input\":{\"path\":\"notes.md\"}", &format!("\"input\":{input}"))
}

#[test]
fn a_tool_call_reaches_nexos_gate_and_the_flags_say_so() {
    let scene = Scene::new();
    let claude = scene.claude(&fixture("tool-use.jsonl"));
    let o = scene.run(&claude, &[]);
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    assert_eq!(
        shape(&o),
        ["turn 1", "call read_file {\"path\":\"notes.md\"}", "result read_file allowed", "turn 2", "done done"]
    );
    // The tool result the CLI gave the model is nexo's, from the sandbox.
    let a = answer(&o);
    assert!(a["answer"].as_str().unwrap().starts_with("Hello from the mock"), "{a}");
    let events = lines(&o);
    let result = events.iter().find(|e| e["event"] == "tool-result").unwrap();
    assert_eq!(result["summary"], "hello notes");
    assert_eq!(result["id"], "toolu_1", "the call keeps the model's id");

    let launch = &scene.log()[0];
    let args: Vec<&str> = launch["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    let value = |flag: &str| args.iter().position(|a| *a == flag).map(|i| args[i + 1]);
    for flag in ["-p", "--verbose", "--strict-mcp-config", "--bare"] {
        assert!(args.contains(&flag), "{flag} missing from {args:?}");
    }
    assert_eq!(value("--output-format"), Some("stream-json"));
    assert_eq!(value("--input-format"), Some("stream-json"));
    assert_eq!(value("--tools"), Some(""), "no built-in tools by default");
    assert_eq!(value("--permission-mode"), Some("default"), "read-only maps to default");
    assert_eq!(value("--permission-prompt-tool"), Some("mcp__nexo__approve"));
    assert_eq!(value("--max-turns"), Some("5"), "the agent's cap");
    assert_eq!(value("--model"), Some("claude-sonnet-4-5"));
    assert!(value("--system-prompt").unwrap().contains("You are a test agent."));
    assert_eq!(launch["mcp_config_mode"], "600", "the MCP config holds a token: owner-only");
    assert_eq!(launch["cwd"], scene.ws(), "the CLI works in the local sandbox's directory");
    // The prompt arrives as one stream-json user message.
    let message: Value = serde_json::from_str(launch["stdin"].as_str().unwrap().trim()).unwrap();
    assert_eq!(message["message"]["content"][0]["text"], "read the notes");
    // The environment is nexo's narrow one: the key, no other secret, a scratch home.
    let env = launch["env"].as_object().unwrap();
    assert_eq!(env["ANTHROPIC_API_KEY"], KEY);
    assert!(!env.contains_key("OPENAI_API_KEY") && !env.contains_key("NEXO_STORE"), "{env:?}");
    assert_ne!(env["HOME"].as_str(), std::env::var("HOME").ok().as_deref());
    assert_eq!(env["DISABLE_AUTOUPDATER"], "1");
    // nexo's tools go to the model directly: the CLI's tool search, which
    // can defer MCP tools behind a search tool `--tools ""` removes, is off.
    assert_eq!(env["ENABLE_TOOL_SEARCH"], "false", "{env:?}");
    assert!(!env.contains_key("ANTHROPIC_BASE_URL"), "no base URL was given: {env:?}");
    // And the key never reaches nexo's own output.
    assert!(!stdout(&o).contains(KEY) && !stderr(&o).contains(KEY));
}

#[test]
fn the_base_url_in_nexos_environment_reaches_the_cli() {
    let scene = Scene::new();
    let claude = scene.claude(&fixture("tool-use.jsonl"));
    let url = "http://127.0.0.1:9/anthropic";
    let o = scene.run_with(&claude, &[], &[("ANTHROPIC_BASE_URL", url)]);
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    assert_eq!(scene.log()[0]["env"]["ANTHROPIC_BASE_URL"], url);
    // `--base-url` wins over the environment.
    let flag = "http://127.0.0.1:9/flag";
    let o = scene.run_with(&claude, &["--base-url", flag], &[("ANTHROPIC_BASE_URL", url)]);
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    assert_eq!(scene.log().last().unwrap()["env"]["ANTHROPIC_BASE_URL"], flag);
}

#[test]
fn the_same_agent_gives_the_same_verdicts_and_events_on_either_loop() {
    let scene = Scene::new();
    let script = scene.path("host-script.json");
    std::fs::write(
        &script,
        json!({"turns": [
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.md"}}]},
            {"text": "done"}
        ]})
        .to_string(),
    )
    .unwrap();
    let agent = scene.path("agent.toml").display().to_string();
    let ws = scene.ws();
    let script = script.display().to_string();
    let host = scene.nexo(&[
        "run",
        &agent,
        "read the notes",
        "--script",
        &script,
        "--sandbox",
        "local",
        "--cwd",
        &ws,
        "--json",
    ]);
    assert!(host.status.success(), "{}", stderr(&host));
    let claude = scene.run(&scene.claude(&fixture("tool-use.jsonl")), &[]);
    assert!(claude.status.success(), "{}", stderr(&claude));
    assert_eq!(shape(&host), shape(&claude));

    // A refused write is refused the same way, and leaves no file: read-only offers no
    // write tool on either loop, so the call names no tool.
    let write = json!({"path": "out.txt", "content": "x"});
    let claude = scene.run(&scene.claude(&session_calling("write_file", write.clone())), &["--allow", "write"]);
    std::fs::write(
        &script,
        json!({"turns": [{"tool_calls": [{"name": "write_file", "arguments": write}]}, {"text": "done"}]}).to_string(),
    )
    .unwrap();
    let host = scene.nexo(&[
        "run",
        &agent,
        "write",
        "--script",
        &script,
        "--sandbox",
        "local",
        "--cwd",
        &ws,
        "--json",
        "--allow",
        "write",
    ]);
    assert_eq!(shape(&host), shape(&claude));
    assert!(shape(&claude).contains(&"result write_file invalid-input".to_string()), "{:?}", shape(&claude));
    assert!(!scene.path("ws/out.txt").exists(), "a denied write leaves no file");
}

#[test]
fn error_max_turns_is_a_turn_limit() {
    let scene = Scene::new();
    let o = scene.run(&scene.claude(&fixture("max-turns.jsonl")), &["--max-turns", "2"]);
    let shape = shape(&o);
    assert_eq!(shape.last().map(String::as_str), Some("done turn-limit"), "{shape:?}\n{}", stderr(&o));
    assert_eq!(shape.iter().filter(|s| s.starts_with("turn ")).count(), 2, "{shape:?}");
    assert!(shape.contains(&"result glob allowed".to_string()), "the recorded calls ran through nexo: {shape:?}");
    let launch = &scene.log()[0];
    let args = launch["args"].as_array().unwrap();
    let at = args.iter().position(|a| a == "--max-turns").unwrap();
    assert_eq!(args[at + 1], "2", "the operator's cap, under the agent's 5");
}

#[test]
fn nexos_turn_cap_holds_when_the_cli_ignores_its_own() {
    let scene = Scene::new();
    // Three model turns, each a new message, and no result: a CLI that
    // ignored --max-turns 2.
    let turn = |id: &str| {
        json!({"type": "assistant", "message": {"id": id, "role": "assistant",
            "content": [{"type": "text", "text": format!("turn {id}")}]}})
        .to_string()
    };
    let script = [turn("m1"), turn("m2"), turn("m3"), json!({"fake": "sleep", "ms": 60_000}).to_string()].join("\n");
    let started = Instant::now();
    let o = scene.run(&scene.claude(&script), &["--max-turns", "2"]);
    assert_eq!(shape(&o), ["turn 1", "turn 2", "done turn-limit"], "{}", stderr(&o));
    assert!(started.elapsed() < Duration::from_secs(30), "the CLI was stopped, not waited for");
}

#[test]
fn an_error_result_is_the_providers_error() {
    let scene = Scene::new();
    let o = scene.run(&scene.claude(&fixture("error.jsonl")), &[]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("claude-code answered HTTP 400") && err.contains("Prompt is too long"), "{err}");
}

#[test]
fn a_malformed_line_is_a_protocol_error_naming_the_line() {
    let scene = Scene::new();
    let init = fixture("tool-use.jsonl").lines().next().unwrap().to_string();
    let script = [init, json!({"fake": "raw", "text": "{this is not json"}).to_string()].join("\n");
    let o = scene.run(&scene.claude(&script), &[]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("line 2 of the CLI's stream-json output cannot be read") && err.contains("{this is not json"),
        "{err}"
    );
}

#[test]
fn a_crash_mid_stream_says_how_it_ended() {
    let scene = Scene::new();
    let mut script: Vec<String> = fixture("tool-use.jsonl").lines().take(2).map(str::to_string).collect();
    script.push(json!({"fake": "exit", "code": 3, "stderr": "segfault in the CLI"}).to_string());
    let o = scene.run(&scene.claude(&script.join("\n")), &[]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("before it reported a result")
            && err.contains("exit status: 3")
            && err.contains("segfault in the CLI"),
        "{err}"
    );
}

#[test]
fn a_missing_cli_says_how_to_install_it() {
    let scene = Scene::new();
    let missing = scene.path("no-such-claude").display().to_string();
    let o = scene.run(&missing, &[]);
    assert_eq!(o.status.code(), Some(2), "a configuration error, before anything runs");
    let err = stderr(&o);
    assert!(err.contains("npm install -g @anthropic-ai/claude-code") && err.contains("--claude-binary"), "{err}");
}

#[test]
fn misconfigurations_are_refused_before_anything_runs() {
    let scene = Scene::new();
    let claude = scene.claude(&fixture("tool-use.jsonl"));
    let agent = scene.path("agent.toml").display().to_string();
    let o =
        scene.nexo(&["run", &agent, "x", "--loop", "claude-code", "--claude-binary", &claude, "--provider", "openai"]);
    assert!(stderr(&o).contains("Anthropic's Messages API"), "{}", stderr(&o));
    let o = scene.nexo(&[
        "run",
        &agent,
        "x",
        "--loop",
        "claude-code",
        "--claude-binary",
        &claude,
        "--claude-builtin-tools",
    ]);
    assert!(stderr(&o).contains("need the local sandbox"), "{}", stderr(&o));
    let o = scene.nexo(&["run", &agent, "x", "--claude-builtin-tools"]);
    assert!(stderr(&o).contains("applies to --loop claude-code only"), "{}", stderr(&o));
    let o = scene.nexo(&["run", &agent, "x", "--loop", "codex"]);
    assert!(stderr(&o).contains("unknown loop `codex`"), "{}", stderr(&o));
    let mut no_key = common::nexo_command(&scene.path("cache"));
    no_key.env_remove("ANTHROPIC_API_KEY").args([
        "run",
        &agent,
        "x",
        "--loop",
        "claude-code",
        "--claude-binary",
        &claude,
    ]);
    let o = output_within(no_key, Duration::from_secs(60));
    assert_eq!(o.status.code(), Some(2), "a configuration error");
    assert!(stderr(&o).contains("needs ANTHROPIC_API_KEY"), "{}", stderr(&o));
    assert!(scene.log().is_empty(), "the CLI never started");
}

#[test]
fn an_approval_suspends_the_run_and_binds_to_the_call_across_processes() {
    let scene = Scene::new();
    let claude = scene.claude(&session_calling("write_file", json!({"path": "out.txt", "content": "approved"})));
    let o = scene.run(&claude, &["--allow", "write", "--mode", "approve"]);
    assert!(shape(&o).contains(&"done approval-required".to_string()), "{:?}\n{}", shape(&o), stderr(&o));
    assert!(!scene.path("ws/out.txt").exists(), "nothing is written before the decision");
    let run = answer(&o)["run"].as_str().unwrap().to_string();
    // A new process decides and resumes: the prompt runs again, and the same
    // call is now allowed.
    let o = scene.nexo(&["runs", "approve", &run, "--json"]);
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    assert!(shape(&o).contains(&"result write_file allowed".to_string()), "{:?}", shape(&o));
    assert_eq!(std::fs::read_to_string(scene.path("ws/out.txt")).unwrap(), "approved");
    let done = lines(&o).into_iter().find(|e| e["event"] == "done").unwrap();
    assert!(done["cost_usd"].as_f64().is_some_and(|c| c > 0.0), "the CLI's cost is in the event: {done}");
    assert_eq!(scene.log().len(), 2, "the CLI ran once per pass");
}

#[test]
fn builtin_tools_ask_nexos_authority_through_the_permission_prompt() {
    let scene = Scene::new();
    let init = fixture("tool-use.jsonl").lines().next().unwrap().to_string();
    let result = fixture("tool-use.jsonl").lines().last().unwrap().to_string();
    let ask = |tool: &str, input: Value| json!({"fake": "approve", "tool_name": tool, "input": input}).to_string();
    // A port the confined CLI must not reach.
    let off_limits = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = off_limits.local_addr().unwrap().port();
    // A host daemon's Unix socket, a UDP listener and a file, none of them its own.
    let daemon_dir = tempfile::Builder::new().prefix("daemon-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let daemon = daemon_dir.path().join("daemon.sock");
    let _daemon = std::os::unix::net::UnixListener::bind(&daemon).unwrap();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    let secret = daemon_dir.path().join("secret.txt");
    std::fs::write(&secret, "daemon-secret").unwrap();
    let script = [
        init,
        json!({"fake": "connect", "port": port}).to_string(),
        json!({"fake": "connect-unix", "path": daemon}).to_string(),
        json!({"fake": "udp", "port": udp_port}).to_string(),
        json!({"fake": "read", "path": secret}).to_string(),
        json!({"fake": "read", "path": "/etc/shadow"}).to_string(),
        ask("Read", json!({"file_path": "notes.md"})),
        ask("Bash", json!({"command": "rm -rf ~"})),
        ask("Edit", json!({"file_path": "notes.md"})),
        ask("mcp__nexo__write_file", json!({"path": "a"})),
        ask("Task", json!({})),
        result,
    ]
    .join("\n");
    let claude = scene.claude(&script);
    let o = scene.run(&claude, &["--claude-builtin-tools", "--ephemeral"]);
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    let log = scene.log();
    let args = log[0]["args"].as_array().unwrap();
    let at = args.iter().position(|a| a == "--tools").unwrap();
    assert_eq!(args[at + 1], "default");
    assert_eq!(log[1]["connect"], port);
    for (n, what) in [(1, "another port"), (2, "a Unix socket"), (3, "UDP"), (4, "a file outside"), (5, "/etc/shadow")]
    {
        let outcome = log[n]["outcome"].as_str().unwrap();
        assert!(outcome.starts_with("refused"), "the confined CLI reached {what}: {}", log[n]);
    }
    let mut datagram = [0u8; 64];
    assert!(udp.recv(&mut datagram).is_err(), "a datagram from the confined CLI arrived");
    let answers: Vec<(String, String)> = log[6..]
        .iter()
        .map(|l| {
            let answer: Value = serde_json::from_str(l["answer"].as_str().unwrap()).unwrap();
            (l["approve"].as_str().unwrap().to_string(), answer["behavior"].as_str().unwrap().to_string())
        })
        .collect();
    let expect = |t: &str, b: &str| (t.to_string(), b.to_string());
    assert_eq!(
        answers,
        [
            expect("Read", "allow"),
            expect("Bash", "deny"),                   // no shell in the grant
            expect("Edit", "deny"),                   // read-only
            expect("mcp__nexo__write_file", "allow"), // nexo's gate decides inside the call
            expect("Task", "deny"),                   // unknown to nexo: default deny
        ]
    );
}

/// The CLI's own tools reach its model and nexo's MCP server, and nothing
/// else: not the run's `net-hosts` (the CLI holds the API key, which its
/// `Bash` could send there), which nexo's proxy refuses, and not the host
/// directly. A model on this machine is relayed in at its own port.
#[test]
fn builtin_tools_reach_the_model_alone_even_with_net_hosts() {
    let scene = Scene::new();
    let origin = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = origin.local_addr().unwrap().port();
    let model = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let model_port = model.local_addr().unwrap().port();
    let _model = model;
    let config = scene.path("nexo.toml");
    std::fs::write(&config, "[sandbox]\nnet-allow-private = [\"127.0.0.1\"]\n").unwrap();
    let tool_use = fixture("tool-use.jsonl");
    let script = [
        tool_use.lines().next().unwrap().to_string(),
        json!({"fake": "get", "url": format!("http://127.0.0.1:{port}/x")}).to_string(),
        json!({"fake": "connect", "port": port}).to_string(),
        json!({"fake": "connect", "port": model_port}).to_string(),
        tool_use.lines().last().unwrap().to_string(),
    ]
    .join("\n");
    let claude = scene.claude(&script);
    let allow = format!("127.0.0.1:{port}");
    let base_url = format!("http://127.0.0.1:{model_port}");
    let flags = ["--claude-builtin-tools", "--ephemeral", "--allow-net", &allow, "--base-url", &base_url];
    let o = scene.run_with(&claude, &flags, &[("NEXO_CONFIG", config.to_str().unwrap())]);
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    let log = scene.log();
    let outcome = |n: usize| log[n]["outcome"].as_str().unwrap().to_string();
    assert!(outcome(1).starts_with("HTTP/1.1 403"), "the run's net-hosts are not the CLI's: {log:?}");
    assert!(outcome(2).starts_with("refused"), "a direct connection reached the host: {log:?}");
    // Its listener inside; the relay behind it carries nexo's MCP calls in every test here.
    assert_eq!(outcome(3), "connected", "the model is relayed in: {log:?}");
    let env = &log[0]["env"];
    assert_eq!(env["HTTPS_PROXY"], format!("http://{}", nexo_sandbox::PROXY_ADDR), "{env}");
}

/// Under `auto` the CLI's own tools bypass its permissions, unless command
/// rules are set: then its `Bash` asks nexo's gate, which applies them.
#[test]
fn command_rules_keep_the_clis_bash_in_nexos_gate_under_auto() {
    let scene = Scene::new();
    std::fs::write(
        scene.path("agent.toml"),
        "name = \"cc-test\"\ndescription = \"A test agent\"\ninstructions = \"You are a test agent.\"\n\
         capabilities = [\"read\", \"glob\", \"shell\"]\nmax-turns = 5\n",
    )
    .unwrap();
    let init = fixture("tool-use.jsonl").lines().next().unwrap().to_string();
    let result = fixture("tool-use.jsonl").lines().last().unwrap().to_string();
    let ask =
        |command: &str| json!({"fake": "approve", "tool_name": "Bash", "input": {"command": command}}).to_string();
    let script = [init.clone(), ask("rm -rf notes.md"), ask("ls -la"), ask("ls > listing"), result.clone()].join("\n");
    let claude = scene.claude(&script);
    let flags = ["--claude-builtin-tools", "--ephemeral", "--mode", "auto", "--allow", "shell"];
    let o = scene.run(&claude, &[&flags[..], &["--command-rule", "deny rm"]].concat());
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    let log = scene.log();
    let args = log[0]["args"].as_array().unwrap();
    let value = |flag: &str| args.iter().position(|a| a == flag).map(|at| args[at + 1].clone());
    assert_eq!(value("--permission-mode"), Some(json!("default")), "{args:?}");
    assert_eq!(value("--permission-prompt-tool"), Some(json!("mcp__nexo__approve")), "{args:?}");
    let answers: Vec<String> = log[1..]
        .iter()
        .map(|l| {
            let answer: Value = serde_json::from_str(l["answer"].as_str().unwrap()).unwrap();
            answer["behavior"].as_str().unwrap().to_string()
        })
        .collect();
    // `rm` is denied by the rule; `ls` names no rule, and auto allows it; the redirection
    // cannot be read, so it waits for a decision nobody gives in an ephemeral run.
    assert_eq!(answers, ["deny", "allow", "deny"], "{log:?}");
    assert!(log[1]["answer"].as_str().unwrap().contains("deny rm"), "{}", log[1]);
    // Without rules, `auto` leaves the CLI's tools to it.
    let claude = scene.claude(&[init, result].join("\n"));
    let o = scene.run(&claude, &flags);
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    let log = scene.log();
    let args = log.iter().rev().find_map(|l| l["args"].as_array()).unwrap();
    let at = args.iter().position(|a| a == "--permission-mode").unwrap();
    assert_eq!(args[at + 1], "bypassPermissions");
}

#[test]
fn a_components_prompt_runs_on_the_claude_code_loop_and_is_journaled() {
    let scene = Scene::new();
    let claude = scene.claude(&fixture("tool-use.jsonl"));
    let ws = scene.ws();
    let o = scene.nexo(&[
        "run",
        built::DOCUMENT_APPROVAL,
        "Q3 report",
        "--loop",
        "claude-code",
        "--claude-binary",
        &claude,
        "--sandbox",
        "local",
        "--cwd",
        &ws,
        "--allow",
        "write",
        "--mode",
        "auto",
        "--json",
    ]);
    let launch = &scene.log()[0];
    let prompt: Value = serde_json::from_str(launch["stdin"].as_str().unwrap().trim()).unwrap();
    assert!(
        prompt["message"]["content"][0]["text"].as_str().unwrap().contains("Q3 report"),
        "the component's prompt reached the CLI: {prompt}"
    );
    let args = launch["args"].as_array().unwrap();
    let at = args.iter().position(|a| a == "--permission-mode").unwrap();
    assert_eq!(args[at + 1], "bypassPermissions", "auto maps to bypassPermissions");
    assert!(!args.iter().any(|a| a == "--permission-prompt-tool"), "auto needs no prompts");
    let run =
        answer(&o)["run"].as_str().map(str::to_string).unwrap_or_else(|| panic!("{}\n{}", stdout(&o), stderr(&o)));
    let store = scene.path("cache").with_extension("store.db");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let journal = rt.block_on(async {
        let store = nexo_store::SqliteStore::open(&store).await.unwrap();
        nexo_store::Runs::journal(&store, &run).await.unwrap()
    });
    assert!(
        journal.iter().any(|e| e.function == "prompt" && e.interface.starts_with("nexo:plugin/model")),
        "the prompt is journaled like any prompt: {journal:?}"
    );
}

/// The real CLI, from `NEXO_CLAUDE_BINARY` or installed from npm into
/// `target/claude-npm` (npm runs no install script; the native binary the
/// package ships runs directly).
/// The pinned Claude Code CLI that `scripts/claude-deps.sh` installs (or
/// `NEXO_CLAUDE_BINARY`); `None` when it is not installed.
fn real_claude() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("NEXO_CLAUDE_BINARY") {
        return Some(PathBuf::from(path));
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/claude-npm");
    let binary = root.join("node_modules/@anthropic-ai/claude-code-linux-x64/claude");
    binary.is_file().then_some(binary)
}

/// The real Claude Code CLI against the repo's loopback Messages server:
/// its tool calls reach nexo's gate over MCP, a denied write leaves no
/// file, and an allowed one happens. It runs when the CLI is installed
/// (`scripts/claude-deps.sh`, which `make test` and CI call); in CI a missing
/// CLI fails it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_claude_code() {
    let Some(claude) = real_claude() else {
        let why = "the Claude Code CLI is not installed (./scripts/claude-deps.sh installs it)";
        assert!(std::env::var_os("CI").is_none(), "CI runs the real CLI, but {why}");
        nexo_testkit::skipped("live_claude_code", why);
        return;
    };
    use nexo_model::mock::{MockServer, MockToolCall, Reply};
    let claude = claude.display().to_string();
    let scene = Scene::new();
    let model = MockServer::start().await.unwrap();
    let base = model.anthropic_base_url();
    let write = |content: &str| {
        Reply::tool_calls(vec![MockToolCall::new(
            "toolu_w",
            "mcp__nexo__write_file",
            json!({"path": "out.txt", "content": content}),
        )])
    };
    let run = |extra: Vec<String>| {
        let (claude, base, agent, ws) =
            (claude.clone(), base.clone(), scene.path("agent.toml").display().to_string(), scene.ws());
        let mut args: Vec<String> = [
            "run",
            &agent,
            "write the file",
            "--loop",
            "claude-code",
            "--claude-binary",
            &claude,
            "--base-url",
            &base,
            "--model",
            "claude-sonnet-4-5",
            "--sandbox",
            "local",
            "--cwd",
            &ws,
            "--json",
            "--ephemeral",
            "--allow",
            "write",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra);
        args
    };

    let tools_of = |request: &nexo_model::mock::RecordedRequest| -> Vec<String> {
        let tools = request.body["tools"].as_array().cloned().unwrap_or_default();
        tools.iter().filter_map(|t| t["name"].as_str().map(String::from)).collect()
    };

    // read-only: nexo's tools are in the model's request, but not
    // `write_file`, which the mode withholds as on the host loop; a call
    // of it reaches nothing.
    model.push(write("withheld")).push(Reply::text("I cannot write."));
    let args = run(vec![]);
    let o = {
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        scene.nexo(&argv)
    };
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    let sent = model.requests();
    let first = sent.iter().find(|r| r.path.ends_with("/v1/messages")).expect("the CLI called the model");
    let tools = tools_of(first);
    assert!(tools.contains(&"mcp__nexo__read_file".to_string()), "nexo's tools are offered: {tools:?}");
    assert!(!tools.contains(&"mcp__nexo__write_file".to_string()), "read-only withholds the write: {tools:?}");
    assert!(!tools.iter().any(|t| ["Bash", "Write", "Edit", "Read"].contains(&t.as_str())), "no built-ins: {tools:?}");
    assert_eq!(first.header("x-api-key"), Some(KEY), "the key reached the CLI through its environment");
    assert!(!scene.path("ws/out.txt").exists(), "a withheld write leaves no file");
    let seen = sent.len();

    // ask, with no terminal to ask on: the write is offered, reaches nexo's
    // gate and is denied there.
    model.push(write("denied")).push(Reply::text("I could not write it."));
    let args = run(vec!["--mode".into(), "ask".into()]);
    let o = {
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        scene.nexo(&argv)
    };
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    let sent = model.requests();
    assert!(tools_of(&sent[seen]).contains(&"mcp__nexo__write_file".to_string()), "{:?}", tools_of(&sent[seen]));
    assert!(shape(&o).contains(&"result write_file denied".to_string()), "{:?}\n{}", shape(&o), stderr(&o));
    assert!(!scene.path("ws/out.txt").exists(), "a denied write leaves no file");
    let last = sent.last().unwrap().body.to_string();
    assert!(last.contains("no terminal was available to ask on"), "the model read nexo's refusal: {last}");

    // auto: the same call is allowed and happens.
    model.push(write("written")).push(Reply::text("Done."));
    let args = run(vec!["--mode".into(), "auto".into()]);
    let o = {
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        scene.nexo(&argv)
    };
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    assert_eq!(std::fs::read_to_string(scene.path("ws/out.txt")).unwrap(), "written");
    assert_eq!(answer(&o)["answer"], "Done.");
    println!("live: {} answered through {} requests to the loopback server", claude, model.requests().len());
}
