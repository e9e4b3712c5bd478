//! The `nexo` binary: inspect, run and exit codes, against real plugins.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::process::{Command, Output};

use nexo_tests as built;

mod common;

use common::{stderr, stdout};

fn nexo(args: &[&str]) -> Output {
    let cache = std::env::temp_dir().join(format!("nexo-cli-test-cache-{}", std::process::id()));
    common::nexo_command(&cache).args(args).output().expect("run nexo")
}

#[test]
fn inspect_json_describes_each_first_party_plugin() {
    let cases = [
        (built::HELLO, "agent", "hello"),
        (built::TEXT_STATS, "agent", "text-stats"),
        (built::CODE_REVIEW, "skill", "code-review"),
        (built::SEARXNG, "search-backend", "searxng"),
        (built::BRAVE, "search-backend", "brave"),
    ];
    for (path, kind, name) in cases {
        let out = nexo(&["inspect", "--json", path]);
        assert!(out.status.success(), "{}", stderr(&out));
        let v: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("inspect --json prints JSON");
        assert_eq!(v["kind"], kind);
        assert_eq!(v["name"], name);
        assert_eq!(v["description"]["kind"], kind);
        assert!(v["imports"].as_array().is_some_and(|a| !a.is_empty()));
        assert_eq!(v["sha256"].as_str().map(str::len), Some(64));
    }
    let out = nexo(&["inspect", "--json", built::HELLO]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["description"]["description"]["capabilities"], serde_json::json!(["read", "glob"]));
    assert_eq!(v["description"]["description"]["max-turns"], 8);
}

#[test]
fn inspect_text_names_kind_and_requested_capabilities() {
    let out = nexo(&["inspect", built::HELLO]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("hello  (agent, nexo:plugin/agent@0.1.4)"), "{text}");
    assert!(text.contains("requested      read, glob"), "{text}");
    assert!(text.contains("nexo:plugin/model@0.1.4"), "{text}");
}

#[test]
fn run_prints_the_answer_and_exits_zero() {
    let out = nexo(&["run", built::TEXT_STATS, "one two three"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("words: 3"));
    // The plugin's log line goes to stderr, tagged with its name.
    assert!(stderr(&out).contains("measured 13 characters"), "{}", stderr(&out));
}

#[test]
fn run_json_reports_the_outcome() {
    let out = nexo(&["run", "--json", built::TEXT_STATS, "a"]);
    let v: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(v["status"], "done");
    assert_eq!(v["agent"], "text-stats");
    let out = nexo(&["run", "--json", "--timeout", "1", built::SPIN, "a"]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(v["status"], "error");
    // The command line names its own flag as the fix, recorded or not.
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("deadline. If the work is legitimate, raise the run's time limit (`--timeout SECS`)"),
        "{v}"
    );
    let out = nexo(&["run", "--ephemeral", "--timeout", "1", built::SPIN, "a"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("hint: raise `--timeout`"), "{}", stderr(&out));
}

#[test]
fn failures_have_distinct_exit_codes_and_clear_messages() {
    let out = nexo(&["run", built::TRAP, "x"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("plugin `trap` trapped in `run`"), "{err}");
    // Under the trap, wasmtime's backtrace: one numbered frame a line, then the panic message.
    let (_, frames) = err.split_once("\nwasm backtrace:\n").unwrap_or_else(|| panic!("no backtrace: {err}"));
    assert!(frames.starts_with("    0: "), "{err}");
    assert!(frames.contains("plugin stderr:") && frames.contains("deliberate failure"), "{err}");

    // A component whose memory declares more than the cap is valid: the error says how much to give it.
    let out = nexo(&["run", "--memory", "32", built::BIG_MEMORY, "x"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(!err.contains("not a valid"), "{err}");
    let (_, need) = err.split_once("raise `--memory` to at least ").unwrap_or_else(|| panic!("{err}"));
    let need: u64 = need.trim().parse().unwrap_or_else(|_| panic!("{err}"));
    assert!(need > 48 && err.contains(&format!("needs at least {need} MiB")), "{err}");
    let out = nexo(&["run", "--memory", &(need + 8).to_string(), built::BIG_MEMORY, "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let out = nexo(&["run", "--memory", "32", built::HOG, "x"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("past the cap of 33554432 bytes"), "{}", stderr(&out));

    let out = nexo(&["run", built::CODE_REVIEW, "x"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("is a skill, not an agent"), "{}", stderr(&out));

    let out = nexo(&["inspect", built::NOT_A_PLUGIN]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("world nexo does not host"), "{}", stderr(&out));

    let out = nexo(&["inspect", "src/main.rs"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("not a WebAssembly file"), "{}", stderr(&out));

    // A `.toml` file is read as a declarative agent, and its errors say where.
    let out = nexo(&["inspect", "Cargo.toml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("Cargo.toml has an invalid file: line "), "{}", stderr(&out));
}

#[test]
fn wit_prints_the_contract() {
    let out = nexo(&["wit"]);
    assert!(out.status.success());
    let text = stdout(&out);
    assert!(text.contains("package nexo:plugin@0.1.4;"));
    for world in ["world agent-plugin", "world skill-plugin", "world search-backend-plugin"] {
        assert!(text.contains(world), "missing {world}");
    }
}

#[test]
fn build_turns_the_example_crate_into_a_loadable_agent() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    // Share the plugins' target directory so the standard library is not rebuilt.
    let target = root.join("target").join("plugins");
    let example = root.join("examples").join("first-agent");
    let out = nexo(&["build", example.to_str().unwrap(), "--target-dir", target.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let artifact = stdout(&out).trim().to_string();
    assert!(artifact.ends_with("first_agent.wasm"), "{artifact}");
    assert!(stderr(&out).contains("built agent `first-agent`"), "{}", stderr(&out));
    let out = nexo(&["inspect", "--json", &artifact]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["description"]["description"]["capabilities"], serde_json::json!(["read"]));

    // A compile error is quoted with the line it points at.
    let broken = tempfile::tempdir().unwrap();
    let manifest = std::fs::read_to_string(example.join("Cargo.toml")).unwrap();
    let sdk = root.join("plugins").join("sdk");
    let manifest = manifest.replace("../../plugins/sdk", sdk.to_str().unwrap()).replace("first-agent", "broken-agent");
    std::fs::write(broken.path().join("Cargo.toml"), manifest).unwrap();
    std::fs::copy(example.join("Cargo.lock"), broken.path().join("Cargo.lock")).unwrap();
    std::fs::create_dir(broken.path().join("src")).unwrap();
    let source = std::fs::read_to_string(example.join("src").join("lib.rs")).unwrap();
    std::fs::write(
        broken.path().join("src").join("lib.rs"),
        format!("{source}\nconst BROKEN: u32 = \"not a number\";\n"),
    )
    .unwrap();
    let line = source.lines().count() + 2;
    let out = nexo(&["build", broken.path().to_str().unwrap(), "--target-dir", target.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let last = stderr(&out).lines().last().unwrap_or_default().to_string();
    assert!(last.starts_with("error: building plugin `broken-agent` failed"), "{last}");
    assert!(last.contains(&format!("mismatched types at src/lib.rs:{line}:")), "{last}");

    // A directory that is not a crate gets a clear error.
    let out = nexo(&["build", root.join("docs").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("has no `[package] name`"), "{}", stderr(&out));
}

#[test]
fn grants_on_the_command_line_reach_the_tools() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("README.md"), "# hi").unwrap();
    let cwd = dir.path().to_str().unwrap();
    let probe = built::TOOL_PROBE;

    // The default: in memory, read-only, read and glob granted.
    let out = nexo(&["run", probe, "README.md"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("read-file: other: ToolError::NotFound"), "{}", stdout(&out));

    // Local sandbox, write granted, but read-only mode: reading works, writing is refused.
    let out = nexo(&["run", probe, "README.md", "--sandbox", "local", "--cwd", cwd, "--allow", "write"]);
    let text = stdout(&out);
    assert!(text.contains("read-file: ok"), "{text}");
    assert!(text.contains("write-file: denied: `write` is not allowed in read-only mode"), "{text}");

    // Ask mode with no terminal to ask on: refused.
    let out =
        nexo(&["run", probe, "README.md", "--sandbox", "local", "--cwd", cwd, "--allow", "write", "--mode", "ask"]);
    assert!(
        stdout(&out).contains(
            "write-file: denied: `write` out.txt needs the operator's approval, and no terminal was available to ask on"
        ),
        "{}",
        stdout(&out)
    );
    assert!(!dir.path().join("out.txt").exists());

    // Auto: the write lands.
    let out =
        nexo(&["run", probe, "README.md", "--sandbox", "local", "--cwd", cwd, "--allow", "write", "--mode", "auto"]);
    assert!(stdout(&out).contains("write-file: ok"), "{}", stdout(&out));
    assert_eq!(std::fs::read_to_string(dir.path().join("out.txt")).unwrap(), "x");

    // Approve: its own outcome, neither allowed nor denied. A recorded run
    // suspends on it; an ephemeral one hands the guest the outcome.
    let approve =
        ["run", probe, "README.md", "--sandbox", "local", "--cwd", cwd, "--allow", "write", "--mode", "approve"];
    let out = nexo(&approve);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(stderr(&out).contains("waits for a decision on `write-file`"), "{}", stderr(&out));
    let out = nexo(&[&approve[..], &["--ephemeral"]].concat());
    assert!(stdout(&out).contains("write-file: other: ToolError::ApprovalRequired"), "{}", stdout(&out));

    // --cwd means nothing without a local sandbox.
    let out = nexo(&["run", probe, "x", "--cwd", cwd]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--cwd needs --sandbox local"), "{}", stderr(&out));

    // A container needs an image; there is no default.
    let out = nexo(&["run", probe, "x", "--sandbox", "container"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("needs --image"), "{}", stderr(&out));
}

#[test]
fn inspect_shows_requested_granted_and_effective() {
    let out = nexo(&["inspect", "--json", "--allow", "write,fetch", "--mode", "auto", built::TOOL_PROBE]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["requested"], serde_json::json!(["read", "glob", "write", "shell"]));
    assert_eq!(v["granted"], serde_json::json!(["read", "glob", "write", "fetch"]));
    assert_eq!(v["effective"], serde_json::json!(["read", "glob", "write"]));
    assert_eq!(v["mode"], "auto");
    assert_eq!(v["sandbox"], "virtual");

    // Effective is what the model is offered: the gate's own decision. Read-only refuses
    // write outright, and the virtual sandbox runs no shell: both withheld, with the reason.
    let out = nexo(&["inspect", "--json", "--allow", "write,shell", built::TOOL_PROBE]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["effective"], serde_json::json!(["read", "glob"]));
    let withheld: Vec<(&str, &str)> = v["withheld"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| (w["capability"].as_str().unwrap(), w["why"].as_str().unwrap()))
        .collect();
    assert_eq!(withheld.len(), 2, "{withheld:?}");
    assert!(withheld[0].0 == "write" && withheld[0].1.contains("read-only mode"), "{withheld:?}");
    assert!(withheld[1].0 == "shell" && withheld[1].1.contains("virtual sandbox runs no shell"), "{withheld:?}");
    // Ask mode would ask about write, so it is offered; the shell still is not.
    let out = nexo(&["inspect", "--allow", "write,shell", "--mode", "ask", built::TOOL_PROBE]);
    let text = stdout(&out);
    assert!(text.contains("effective      read, glob, write (mode ask, virtual sandbox)"), "{text}");
    assert!(text.contains("withheld       shell: unsupported: the virtual sandbox runs no shell commands"), "{text}");
    // An agent that requests fetch and search: no fetch-allow list, no backend, so neither.
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("web.toml");
    std::fs::write(&agent, "name = \"web\"\ndescription = \"d\"\ncapabilities = [\"fetch\", \"search\"]\n").unwrap();
    let out = nexo(&["inspect", "--json", "--allow", "fetch,search", "--mode", "auto", agent.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["effective"], serde_json::json!([]), "{v}");
    let why: Vec<&str> = v["withheld"].as_array().unwrap().iter().map(|w| w["why"].as_str().unwrap()).collect();
    assert!(why.len() == 2 && why[0].contains("fetch-allow") && why[1].contains("no search backend"), "{why:?}");
}

#[test]
fn the_config_file_sets_the_grant_and_flags_override_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("nexo.toml");
    std::fs::write(&config, "[grant]\nallow = [\"write\"]\nmode = \"auto\"\n").unwrap();
    let out = nexo(&["inspect", "--json", "--config", config.to_str().unwrap(), built::TOOL_PROBE]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["granted"], serde_json::json!(["read", "glob", "write"]));
    assert_eq!(v["mode"], "auto");
    // A flag wins over the file, and --allow adds to its list.
    let out = nexo(&[
        "inspect",
        "--json",
        "--config",
        config.to_str().unwrap(),
        "--mode",
        "ask",
        "--allow",
        "shell",
        built::TOOL_PROBE,
    ]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["mode"], "ask");
    // Shell is granted and requested, but the virtual sandbox cannot run it: withheld.
    assert_eq!(v["effective"], serde_json::json!(["read", "glob", "write"]));
    assert_eq!(v["withheld"][0]["capability"], "shell");
    // A mistake in the file names the file and the field.
    std::fs::write(&config, "[grant]\nalow = [\"write\"]\n").unwrap();
    let out = nexo(&["inspect", "--config", config.to_str().unwrap(), built::TOOL_PROBE]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("nexo.toml is invalid") && err.contains("alow"), "{err}");
}

fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

#[test]
fn the_offline_demo_runs_on_the_scripted_provider() {
    let ex = root().join("examples/offline");
    let (script, ws) = (ex.join("hello-script.json"), ex.join("workspace"));
    let out = nexo(&[
        "run",
        built::HELLO,
        "What is in this workspace?",
        "--script",
        script.to_str().unwrap(),
        "--sandbox",
        "local",
        "--cwd",
        ws.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("two files, README.md and notes/todo.md"), "{}", stdout(&out));
    // It says plainly that no model was called, and shows each tool call.
    let err = stderr(&out);
    assert!(err.contains("scripted provider: replaying"), "{err}");
    assert!(err.contains("glob: allowed") && err.contains("read_file: allowed"), "{err}");

    // The declarative agent, with events as JSON lines.
    let out = nexo(&[
        "run",
        ex.join("reviewer.toml").to_str().unwrap(),
        "Review",
        "--script",
        ex.join("reviewer-script.json").to_str().unwrap(),
        "--sandbox",
        "local",
        "--cwd",
        ws.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let lines: Vec<serde_json::Value> = stdout(&out).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let events: Vec<&str> = lines.iter().filter_map(|v| v["event"].as_str()).collect();
    assert_eq!(events, ["turn-started", "tool-call", "tool-result", "turn-started", "done"]);
    // One word for a finished prompt: the done event's, the outcome's, and the run's status.
    let done = lines.iter().find(|v| v["event"] == "done").unwrap();
    assert_eq!(done["status"], "done");
    assert!(done.get("transcript").is_none(), "only a cut-short prompt carries its transcript: {done}");
    let last = lines.last().unwrap();
    assert_eq!(last["status"], "done");
    let show = nexo(&["runs", "show", "--json", last["run"].as_str().unwrap()]);
    let shown: serde_json::Value = serde_json::from_str(&stdout(&show)).unwrap();
    assert_eq!(shown["run"]["status"], "done", "{shown}");
    assert_eq!(last["agent"], "reviewer");
}

#[test]
fn run_exit_codes_tell_turn_limits_approvals_and_missing_models_apart() {
    let dir = tempfile::tempdir().unwrap();
    let forever: Vec<_> = (0..10)
        .map(|_| serde_json::json!({ "tool_calls": [{ "name": "glob", "arguments": { "pattern": "*" } }] }))
        .collect();
    let script = dir.path().join("forever.json");
    std::fs::write(&script, serde_json::json!({ "turns": forever }).to_string()).unwrap();
    let out = nexo(&["run", built::HELLO, "x", "--script", script.to_str().unwrap(), "--max-turns", "2"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("turn limit reached"), "{}", stderr(&out));
    // The partial transcript is kept: in the done event of --json, and in the recorded run.
    let out = nexo(&["run", built::HELLO, "x", "--script", script.to_str().unwrap(), "--max-turns", "2", "--json"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let lines: Vec<serde_json::Value> = stdout(&out).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let done = lines.iter().find(|v| v["event"] == "done").unwrap();
    assert_eq!(done["status"], "turn-limit");
    let transcript = done["transcript"].as_array().unwrap_or_else(|| panic!("no transcript: {done}"));
    let roles: Vec<&str> = transcript.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert!(roles.contains(&"user") && roles.contains(&"tool_result"), "{roles:?}");
    let run = lines.last().unwrap()["run"].as_str().unwrap().to_string();
    let text = stdout(&nexo(&["runs", "show", &run]));
    assert!(text.contains("transcript (cut short") && text.contains("tool_result"), "{text}");
    // Cut short before any text: no "answer above" to speak of.
    let looper = dir.path().join("looper.toml");
    std::fs::write(&looper, "name = \"looper\"\ndescription = \"Globs\"\ncapabilities = [\"glob\"]\n").unwrap();
    let out = nexo(&["run", looper.to_str().unwrap(), "x", "--script", script.to_str().unwrap(), "--max-turns", "2"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stdout(&out).trim().is_empty(), "{}", stdout(&out));
    assert!(stderr(&out).contains("before the model gave any answer"), "{}", stderr(&out));
    assert!(!stderr(&out).contains("answer above"), "{}", stderr(&out));

    let agent = dir.path().join("writer.toml");
    std::fs::write(&agent, "name = \"writer\"\ndescription = \"Writes\"\ncapabilities = [\"write\"]\n").unwrap();
    let write = dir.path().join("write.json");
    let turn =
        serde_json::json!({ "tool_calls": [{ "name": "write_file", "arguments": { "path": "a", "content": "b" } }] });
    std::fs::write(&write, serde_json::json!({ "turns": [turn] }).to_string()).unwrap();
    let out = nexo(&[
        "run",
        agent.to_str().unwrap(),
        "x",
        "--script",
        write.to_str().unwrap(),
        "--allow",
        "write",
        "--mode",
        "approve",
    ]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(stderr(&out).contains("waits for a decision on `write-file`"), "{}", stderr(&out));

    // No model anywhere: the agent's prompt fails with how to set one.
    let out = Command::new(env!("CARGO_BIN_EXE_nexo"))
        .args(["run", built::HELLO, "hi"])
        .env("NEXO_CACHE_DIR", dir.path().join("cache"))
        .env("NEXO_ACCEPTED_PLUGINS", dir.path().join("accepted.json"))
        .env_remove("NEXO_MODEL")
        .env_remove("NEXO_PROVIDER")
        .output()
        .unwrap();
    // A configuration error, as a missing --base-url is: exit code 2.
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "`hello` prompts a model, and none is configured: nexo has no default: set NEXO_MODEL, pass --model"
        ),
        "said once, with the fix: {}",
        stderr(&out)
    );
    let out = nexo(&["run", built::HELLO, "hi", "--provider", "openai-compatible", "--model", "m"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));

    // --script replaces the model: a model setting beside it is a usage error, whichever it is.
    for extra in [["--model", "gpt-4o"], ["--provider", "openai"], ["--base-url", "http://127.0.0.1:9/v1"]] {
        let mut args = vec!["run", built::HELLO, "hi", "--script", script.to_str().unwrap()];
        args.extend(extra);
        let out = nexo(&args);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("--script replaces the model"), "{extra:?}: {}", stderr(&out));
        assert!(!stderr(&out).contains("OPENAI_API_KEY"), "{}", stderr(&out));
    }
    // ... and the config file's model gives way to it.
    let config = dir.path().join("nexo.toml");
    std::fs::write(&config, "[model]\nmodel = \"gpt-4o\"\n").unwrap();
    let args = ["run", built::HELLO, "x", "--script", script.to_str().unwrap(), "--max-turns", "1"];
    let out = nexo(&[&args[..], &["--config", config.to_str().unwrap()]].concat());
    assert_eq!(out.status.code(), Some(3), "the script ran, not gpt-4o: {}", stderr(&out));

    // OpenAI's own API is not known to serve llama3: refused before any request, unless assumed.
    let out = Command::new(env!("CARGO_BIN_EXE_nexo"))
        .args(["run", built::HELLO, "hi", "--provider", "openai", "--model", "llama3", "--ephemeral"])
        .env("NEXO_CACHE_DIR", dir.path().join("cache"))
        .env("NEXO_ACCEPTED_PLUGINS", dir.path().join("accepted.json"))
        .env("OPENAI_API_KEY", "sk-test")
        .env_remove("NEXO_MODEL")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("openai is not known to serve `llama3`"), "{}", stderr(&out));
    assert!(stderr(&out).contains("--assume-model-exists"), "{}", stderr(&out));

    // An unknown model id needs a provider; assume-model-exists needs one too.
    let out = nexo(&["run", built::HELLO, "hi", "--model", "gemma3:12b"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("cannot tell which provider serves `gemma3:12b`"), "{}", stderr(&out));
    let out = nexo(&["run", built::HELLO, "hi", "--model", "gemma3:12b", "--assume-model-exists"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("provider must be named"), "{}", stderr(&out));

    // A bad declarative agent names the field.
    std::fs::write(&agent, "name = \"Bad Name\"\ndescription = \"x\"\n").unwrap();
    let out = nexo(&["run", agent.to_str().unwrap(), "x"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("invalid name"), "{}", stderr(&out));
}

#[test]
fn skills_are_scaffolded_checked_and_loaded_into_an_agent_without_widening_it() {
    let dir = tempfile::tempdir().unwrap();
    let skills = dir.path().join("skills");
    let out = nexo(&["skill", "new", "triage", "--path", skills.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = nexo(&["skill", "check", skills.join("triage").to_str().unwrap()]);
    assert!(out.status.success() && stdout(&out).starts_with("ok  triage"), "{}", stderr(&out));
    // The scaffold's references/.keep is hidden: not a resource. A real file is.
    assert!(stdout(&out).contains("(0 resources)"), "{}", stdout(&out));
    std::fs::write(skills.join("triage/references/levels.md"), "# Levels\n").unwrap();
    let out = nexo(&["skill", "check", skills.join("triage").to_str().unwrap()]);
    assert!(stdout(&out).contains("(1 resources)"), "{}", stdout(&out));
    let out = nexo(&["skill", "new", "triage", "--path", skills.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "never overwrites");

    // A skill that claims tools: it adds instructions, and nothing else.
    std::fs::write(
        skills.join("triage/SKILL.md"),
        "---\nname: triage\ndescription: >-\n  Triage issues\n  by severity.\nallowed-tools: shell write_file\n---\n# Triage\nRank by severity.\n",
    )
    .unwrap();
    let agent = dir.path().join("triager.toml");
    std::fs::write(&agent, "name = \"triager\"\ndescription = \"Triages\"\ninstructions = \"AGENT RULES\"\ncapabilities = [\"read\"]\nskills = [\"triage\"]\n").unwrap();
    let script = dir.path().join("s.json");
    let turn = serde_json::json!({ "tool_calls": [{ "name": "shell", "arguments": { "command": "touch pwned" } }] });
    std::fs::write(&script, serde_json::json!({ "turns": [turn, { "text": "done" }] }).to_string()).unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let out = nexo(&[
        "run",
        agent.to_str().unwrap(),
        "triage",
        "--script",
        script.to_str().unwrap(),
        "--skills-path",
        skills.to_str().unwrap(),
        "--sandbox",
        "local",
        "--cwd",
        ws.to_str().unwrap(),
        "--mode",
        "auto",
        "--allow",
        "shell",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // shell was granted by the operator but not requested by the agent; the skill's allowed-tools changes nothing.
    assert!(stdout(&out).contains(r#""name":"shell","verdict":"invalid-input""#), "{}", stdout(&out));
    assert!(!ws.join("pwned").exists());

    // A missing skill names the path it looked for (another agent: a new skill would be a new ask of this one).
    let agent = dir.path().join("missing.toml");
    std::fs::write(&agent, "name = \"triager\"\ndescription = \"Triages\"\nskills = [\"nope\"]\n").unwrap();
    let out = nexo(&[
        "run",
        agent.to_str().unwrap(),
        "x",
        "--script",
        script.to_str().unwrap(),
        "--skills-path",
        skills.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("nope/SKILL.md does not exist"), "{}", stderr(&out));
}

/// `--skill-component FILE` gives a run a skill component the agent names;
/// two components with the same skill name are refused before the run.
#[test]
fn a_skill_component_given_by_flag_is_found_and_a_second_of_the_same_name_refused() {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("reviewer.toml");
    std::fs::write(&agent, "name = \"reviewer\"\ndescription = \"Reviews\"\nskills = [\"code-review\"]\n").unwrap();
    let script = dir.path().join("s.json");
    std::fs::write(&script, serde_json::json!({ "turns": [{ "text": "done" }] }).to_string()).unwrap();
    let skills = dir.path().join("skills");
    let run = |components: &[&str]| {
        let mut args = vec!["run", agent.to_str().unwrap(), "x", "--script", script.to_str().unwrap()];
        args.extend(["--skills-path", skills.to_str().unwrap()]);
        for c in components {
            args.extend(["--skill-component", c]);
        }
        nexo(&args)
    };
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(2), "no such skill: {}", stderr(&out));
    let out = run(&[built::CODE_REVIEW]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("done"), "{}", stdout(&out));
    let out = run(&[built::CODE_REVIEW, built::CODE_REVIEW]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("two skill components are named `code-review`"), "{}", stderr(&out));
    // Queued for a worker, a component that is not a skill is refused before anything is recorded.
    let store = dir.path().join("runs.db");
    let mut args = vec!["run", agent.to_str().unwrap(), "x", "--later", "--skill-component", built::HELLO];
    args.extend(["--store", store.to_str().unwrap()]);
    let out = nexo(&args);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("not a skill"), "{}", stderr(&out));
    let out = nexo(&["runs", "list", "--json", "--store", store.to_str().unwrap()]);
    assert!(!stdout(&out).contains("queued"), "nothing was queued: {}", stdout(&out));
}

/// A one-shot HTTP/1.1 server on loopback answering every request with
/// `body` as JSON; it returns the request lines it saw.
#[test]
fn a_configured_search_backend_serves_web_search_in_a_run() {
    let results: Vec<serde_json::Value> = (1..=3)
        .map(|i| serde_json::json!({"title": format!("Result {i}"), "url": format!("https://example.org/{i}"), "content": "text"}))
        .collect();
    let (port, seen) =
        built::loopback::json_server("200 OK", serde_json::json!({ "query": "rust", "results": results }).to_string());
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("nexo.toml");
    std::fs::write(
        &config,
        format!(
            "[grant]\nallow = [\"search\"]\nmode = \"auto\"\n\n[search]\nbackend = {:?}\nhosts = [\"127.0.0.1\"]\n\
             allow-private = [\"127.0.0.1\"]\nsettings = {{ base-url = \"http://127.0.0.1:{port}\" }}\n",
            built::SEARXNG
        ),
    )
    .unwrap();
    let agent = dir.path().join("researcher.toml");
    std::fs::write(
        &agent,
        "name = \"researcher\"\ndescription = \"Finds pages\"\ninstructions = \"Search first.\"\ncapabilities = [\"search\"]\n",
    )
    .unwrap();
    let script = dir.path().join("script.json");
    std::fs::write(
        &script,
        r#"{"turns": [{"tool_calls": [{"name": "web_search", "arguments": {"query": "rust"}}]}, {"text": "Found three."}]}"#,
    )
    .unwrap();
    let cfg = config.to_str().unwrap();

    // inspect shows what the backend asks for and what the operator granted.
    let out = nexo(&["inspect", "--config", cfg, built::SEARXNG]);
    let text = stdout(&out);
    assert!(text.contains("granted        127.0.0.1"), "{text}");
    assert!(text.contains("private ok     127.0.0.1"), "{text}");
    let out = nexo(&["inspect", built::BRAVE]);
    let text = stdout(&out);
    assert!(text.contains("outbound HTTP to api.search.brave.com"), "{text}");
    assert!(text.contains("(none: every request is refused"), "{text}");
    let out = nexo(&["inspect", "--json", "--config", cfg, built::SEARXNG]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["search"]["granted-hosts"], serde_json::json!(["127.0.0.1"]));

    let out = nexo(&[
        "run",
        agent.to_str().unwrap(),
        "Find rust pages",
        "--script",
        script.to_str().unwrap(),
        "--config",
        cfg,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "Found three.");
    assert!(stderr(&out).contains("web_search: allowed"), "{}", stderr(&out));
    let request = seen.recv_timeout(std::time::Duration::from_secs(5)).unwrap();
    assert!(request.starts_with("GET /search?q=rust&format=json"), "{request}");

    // Without the grant, the tool is not even offered: the scripted call is an unknown tool.
    let out = nexo(&[
        "run",
        agent.to_str().unwrap(),
        "Find rust pages",
        "--script",
        script.to_str().unwrap(),
        "--search-backend",
        built::SEARXNG,
    ]);
    assert!(stderr(&out).contains("there is no tool `web_search`"), "{}", stderr(&out));
    assert!(seen.try_recv().is_err(), "nothing reached the server");
}

#[test]
fn bad_web_settings_are_configuration_errors() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("nexo.toml");
    let cases = [
        (
            format!(
                "[search]\nbackend = {:?}\nhosts = [\"api.search.brave.com\"]\napi-key = {{ header = \"X-Subscription-Token\", env = \"NEXO_TEST_UNSET_KEY\" }}\n",
                built::BRAVE
            ),
            "NEXO_TEST_UNSET_KEY",
        ),
        (format!("[search]\nbackend = {:?}\nhosts = [\"https://api.example.com/\"]\n", built::BRAVE), "[search]"),
        ("[search]\nhosts = [\"api.example.com\"]\n".to_string(), "no backend is set"),
        ("[grant]\nfetch-hosts = [\"*.example.com\"]\n".to_string(), "fetch-hosts"),
        (format!("[search]\nbackend = {:?}\nhosts = [\"api.example.com\"]\n", built::HELLO), "not a search backend"),
    ];
    for (text, needle) in cases {
        std::fs::write(&config, &text).unwrap();
        let out = nexo(&["run", built::HELLO, "hi", "--config", config.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{text}: {}", stderr(&out));
        assert!(stderr(&out).contains(needle), "{text}: {}", stderr(&out));
    }
}

#[test]
fn inspect_shows_where_the_search_key_goes_and_a_bad_key_origin_stops_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("nexo.toml");
    let inspect = |api_key: &str, json: bool| {
        let text = format!(
            "[search]\nbackend = {:?}\nhosts = [\"api.search.brave.com\"]\napi-key = {api_key}\n",
            built::BRAVE
        );
        std::fs::write(&config, text).unwrap();
        let mut args = vec!["inspect", "--config", config.to_str().unwrap(), built::BRAVE];
        if json {
            args.insert(1, "--json");
        }
        Command::new(env!("CARGO_BIN_EXE_nexo"))
            .args(args)
            .env("NEXO_CACHE_DIR", std::env::temp_dir().join(format!("nexo-cli-test-cache-{}", std::process::id())))
            .env("NEXO_TEST_SEARCH_KEY", "sk-test-0123456789abcdef")
            .output()
            .unwrap()
    };
    let out = inspect("{ header = \"X-Subscription-Token\", env = \"NEXO_TEST_SEARCH_KEY\" }", false);
    let text = stdout(&out);
    assert!(
        text.contains(
            "X-Subscription-Token header, from $NEXO_TEST_SEARCH_KEY, sent only to https://api.search.brave.com:443"
        ),
        "{text} {}",
        stderr(&out)
    );
    assert!(!text.contains("sk-test-0123456789abcdef"), "{text}");
    let out = inspect(
        "{ header = \"X-Subscription-Token\", env = \"NEXO_TEST_SEARCH_KEY\", origins = [\"https://api.search.brave.com:8443\"] }",
        true,
    );
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["search"]["api-key-origins"], serde_json::json!(["https://api.search.brave.com:8443"]));
    for (origins, needle) in [
        ("[\"api.search.brave.com\"]", "scheme://host[:port]"),
        ("[\"http://api.search.brave.com\"]", "plain-http"),
        ("[\"https://elsewhere.example\"]", "add `elsewhere.example` to `hosts`"),
    ] {
        let out = inspect(
            &format!("{{ header = \"X-Subscription-Token\", env = \"NEXO_TEST_SEARCH_KEY\", origins = {origins} }}"),
            false,
        );
        assert_eq!(out.status.code(), Some(2), "{origins}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains("API key for `X-Subscription-Token`") && err.contains(needle), "{origins}: {err}");
    }
}

#[test]
fn the_offline_web_demo_shows_the_guard_refusing() {
    let ex = root().join("examples/offline");
    let out = nexo(&[
        "run",
        ex.join("researcher.toml").to_str().unwrap(),
        "Read the instance metadata",
        "--script",
        ex.join("researcher-script.json").to_str().unwrap(),
        "--allow",
        "fetch",
        "--mode",
        "auto",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let lines: Vec<serde_json::Value> = stdout(&out).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let verdicts: Vec<&str> =
        lines.iter().filter(|v| v["event"] == "tool-result").map(|v| v["verdict"].as_str().unwrap()).collect();
    assert_eq!(verdicts, ["security", "denied"], "{lines:?}");
    // The example configs parse, and name the backend they grant.
    let web = root().join("examples/web/searxng.toml");
    let out = nexo(&["inspect", "--json", "--config", web.to_str().unwrap(), built::SEARXNG]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["search"]["allow-private"], serde_json::json!(["10.0.0.5"]));
    assert_eq!(v["fetch-hosts"], serde_json::json!(["wikipedia.org", "example.com"]));
}

/// A TOML agent declaring each permission mode, run by an operator who
/// grants `write` under `--mode` `operator`: the stricter mode wins, for the
/// gate (the tool call) and for what `inspect` reports alike.
#[test]
fn a_toml_agent_s_declared_mode_narrows_the_operator_s() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.json");
    std::fs::write(
        &script,
        r#"{"turns": [{"tool_calls": [{"name": "write_file", "arguments": {"path": "out.txt", "content": "x"}}]},
                      {"text": "done"}]}"#,
    )
    .unwrap();
    // (declared, operator's mode) → (exit code, verdict of the write, mode inspect shows)
    let cases = [
        // Read-only refuses every write, so write_file is not offered: the model's call names no tool.
        ("auto", "auto", 0, "allowed", "auto"),
        ("read-only", "auto", 0, "invalid-input", "read-only"),
        ("ask", "auto", 0, "denied", "ask"),
        ("approve", "auto", 4, "approval-required", "approve"),
        ("auto", "read-only", 0, "invalid-input", "read-only"),
        ("auto", "approve", 4, "approval-required", "approve"),
    ];
    for (declared, operator, code, verdict, shown) in cases {
        let work = tempfile::tempdir().unwrap();
        let agent = dir.path().join(format!("{declared}-{operator}.toml"));
        std::fs::write(
            &agent,
            format!(
                "name = \"writer\"\ndescription = \"Writes a file\"\ninstructions = \"Write.\"\n\
                 capabilities = [\"read\", \"write\"]\npermissions = \"{declared}\"\n"
            ),
        )
        .unwrap();
        let (agent, cwd) = (agent.to_str().unwrap(), work.path().to_str().unwrap());
        let grant = ["--allow", "write", "--mode", operator, "--sandbox", "local", "--cwd", cwd];
        let mut args = vec!["run", agent, "go", "--script", script.to_str().unwrap(), "--json"];
        args.extend(grant);
        let out = nexo(&args);
        let case = format!("declared {declared}, operator {operator}: {}", stderr(&out));
        assert_eq!(out.status.code(), Some(code), "{case}");
        let lines: Vec<serde_json::Value> = stdout(&out).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let verdicts: Vec<&str> =
            lines.iter().filter(|v| v["event"] == "tool-result").map(|v| v["verdict"].as_str().unwrap()).collect();
        assert_eq!(verdicts, [verdict], "{case}");
        if declared == "ask" {
            // Nobody could be asked: the model and the event line are told so, and how to fix it.
            let result = lines.iter().find(|v| v["event"] == "tool-result").unwrap();
            let summary = result["summary"].as_str().unwrap();
            assert!(summary.contains("no terminal was available to ask on"), "{summary}");
            assert!(!summary.contains("declined"), "{summary}");
            let plain: Vec<&str> = args.iter().copied().filter(|a| *a != "--json").collect();
            let out = nexo(&plain);
            assert!(stderr(&out).contains("✗ write_file: denied"), "{}", stderr(&out));
            assert!(stderr(&out).contains("no terminal was available to ask on"), "{}", stderr(&out));
        }
        assert_eq!(work.path().join("out.txt").exists(), verdict == "allowed", "{case}");
        let mut args = vec!["inspect", "--json", agent];
        args.extend(grant);
        let v: serde_json::Value = serde_json::from_str(&stdout(&nexo(&args))).unwrap();
        assert_eq!(v["mode"], shown, "{case}");
    }
}

/// The manifest fields beyond capabilities are acted on: a declared sandbox
/// is a request only the operator grants and a floor on isolation, MCP
/// servers the operator did not configure are left out, and a model hint is
/// the default the operator's choice overrides.
#[test]
fn declared_sandbox_mcp_servers_and_model_hints_are_acted_on() {
    let dir = tempfile::tempdir().unwrap();
    let agent = |extra: &str| {
        let path = dir.path().join(format!("agent-{}.toml", extra.len()));
        std::fs::write(&path, format!("name = \"a\"\ndescription = \"d\"\ninstructions = \"i\"\n{extra}\n")).unwrap();
        path
    };
    let cwd = dir.path().to_str().unwrap();
    let isolated = agent("sandbox = \"virtual\"");
    let out = nexo(&["run", isolated.to_str().unwrap(), "x", "--sandbox", "local", "--cwd", cwd]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("declares the virtual sandbox") && stderr(&out).contains("--sandbox virtual"));
    // Asked for, not chosen: refused, naming the request and the fix; nothing runs in memory behind its back.
    let local = agent("sandbox = \"local\"");
    let out = nexo(&["run", local.to_str().unwrap(), "x"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("`a` asks for the local sandbox, which only the operator can grant"), "{err}");
    assert!(err.contains("`--sandbox local` to grant it, or `--sandbox virtual` to run it in memory"), "{err}");
    // The operator's choice wins: stricter than asked is fine (the agent then fails only for want of a model).
    let out = nexo(&["run", local.to_str().unwrap(), "x", "--sandbox", "virtual"]);
    assert!(stderr(&out).contains("none is configured"), "{}", stderr(&out));
    let text = stdout(&nexo(&["inspect", local.to_str().unwrap()]));
    assert!(text.contains("sandbox        local (a request: only --sandbox local grants it"), "{text}");

    // A requested server the operator did not configure is left out, with a
    // warning: the agent then fails only for want of a model.
    let mcp = agent("mcp-servers = [\"github\"]");
    let out = nexo(&["run", mcp.to_str().unwrap(), "x"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("MCP servers github are requested but not configured"), "{}", stderr(&out));
    let text = stdout(&nexo(&["inspect", mcp.to_str().unwrap()]));
    assert!(text.contains("mcp requested  github\n") && text.contains("mcp effective  (none)"), "{text}");

    // The hint is the default when the operator's environment has its key, and the log says
    // whose model it is. (The run then tries api.openai.com, unreachable here, until its deadline.)
    let hinted = agent("model = \"gpt-4o-mini\"\nprovider = \"openai\"\n# hosted");
    let text = stdout(&nexo(&["inspect", hinted.to_str().unwrap()]));
    assert!(text.contains("model          gpt-4o-mini (a hint: the default when the operator sets no model"), "{text}");
    assert!(text.contains("provider       openai"), "{text}");
    let cache = std::env::temp_dir().join(format!("nexo-cli-test-cache-{}", std::process::id()));
    let out = common::nexo_command(&cache)
        .args(["run", hinted.to_str().unwrap(), "x", "--ephemeral", "--timeout", "2"])
        .env("OPENAI_API_KEY", "sk-test-not-a-real-key-0123456789")
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(err.contains("using the agent's model hint `gpt-4o-mini` (openai)"), "{err}");
    assert_ne!(out.status.code(), Some(2), "a usable hint is no configuration error: {err}");
    // Without the key the hint cannot be used, and the warning says why.
    let out = common::nexo_command(&cache)
        .args(["run", hinted.to_str().unwrap(), "x", "--ephemeral"])
        .env_remove("OPENAI_API_KEY")
        .output()
        .unwrap();
    assert!(stderr(&out).contains("the agent's model hint `gpt-4o-mini` cannot be used"), "{}", stderr(&out));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    // A server on the operator's machine is never the agent's to choose.
    let local_hint = agent("model = \"llama3\"\nprovider = \"ollama\"");
    let out = nexo(&["run", local_hint.to_str().unwrap(), "x", "--ephemeral"]);
    assert!(stderr(&out).contains("ignoring the agent's provider hint `ollama`"), "{}", stderr(&out));
    assert_eq!(out.status.code(), Some(2), "no model, so a configuration error: {}", stderr(&out));
    // The operator's model wins over it.
    let out = nexo(&[
        "run",
        hinted.to_str().unwrap(),
        "x",
        "--provider",
        "openai-compatible",
        "--model",
        "mine",
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--ephemeral",
    ]);
    assert!(
        stderr(&out)
            .contains("using the operator's model `mine` (openai-compatible), not the agent's hint `gpt-4o-mini`"),
        "{}",
        stderr(&out)
    );
}

/// A model server on the operator's side that is not running: the error says
/// nothing listens there, and what to do.
#[test]
fn a_local_model_server_that_is_not_running_is_named() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let base = format!("http://127.0.0.1:{port}/v1");
    for (provider, hint) in
        [("ollama", "is Ollama running? (`ollama serve`)"), ("openai-compatible", "start the server or fix --base-url")]
    {
        let out = nexo(&[
            "run",
            built::HELLO,
            "hi",
            "--provider",
            provider,
            "--model",
            "m",
            "--base-url",
            &base,
            "--ephemeral",
        ]);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains(&format!("nothing is listening on http://127.0.0.1:{port}; {hint}")), "{err}");
    }
}

/// `nexo chat --script` shares one scripted provider across its prompts:
/// the second prompt goes on with the script's second turn, not the first
/// again (a new run is not a replay, so it does not move the script).
#[test]
fn a_scripted_chat_goes_on_through_the_script_prompt_after_prompt() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.json");
    std::fs::write(&script, r#"{"turns": [{"text": "answer-one"}, {"text": "answer-two"}]}"#).unwrap();
    let agent = root().join("examples/offline/reviewer.toml");
    let ws = root().join("examples/offline/workspace");
    let cache = dir.path().join("cache");
    let mut child = common::nexo_command(&cache)
        .args(["chat", agent.to_str().unwrap(), "--script", script.to_str().unwrap()])
        .args(["--sandbox", "local", "--cwd", ws.to_str().unwrap()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"first\nsecond\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let said = stdout(&out);
    assert_eq!(said.matches("answer-one").count(), 1, "{said}");
    assert!(said.contains("answer-two"), "the second prompt got the script's second turn: {said}");
}

/// `nexo run` against a real llama.cpp `llama-server` with a small real
/// model (`scripts/llama-deps.sh` builds both; skipped without them, failed
/// with `NEXO_LIVE_LLAMA=1`): one streamed turn over
/// `--provider openai-compatible --base-url`, its text in deltas and its
/// tokens counted in the done event.
#[test]
fn nexo_run_one_turn_against_llama_server() {
    let Some(server) = nexo_testkit::llama::LlamaServer::start("nexo_run_one_turn_against_llama_server", 2048) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // No capabilities: no tools to call, so the first answer ends the prompt.
    let agent = dir.path().join("greeter.toml");
    std::fs::write(&agent, "name = \"greeter\"\ndescription = \"Greets\"\ninstructions = \"Answer briefly.\"\n")
        .unwrap();
    let base = server.base_url();
    let out = nexo(&[
        "run",
        agent.to_str().unwrap(),
        "Say hello.",
        "--provider",
        "openai-compatible",
        "--base-url",
        &base,
        "--model",
        "smollm2",
        "--stream",
        "--json",
        "--ephemeral",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}\n{}\n{}", stdout(&out), stderr(&out), server.log());
    let lines: Vec<serde_json::Value> = stdout(&out).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let events: Vec<&str> = lines.iter().filter_map(|v| v["event"].as_str()).collect();
    assert_eq!(events.first(), Some(&"turn-started"), "{events:?}");
    assert_eq!(events.last(), Some(&"done"), "{events:?}");
    assert!(events[1..events.len() - 1].iter().all(|e| *e == "text-delta"), "{events:?}");
    assert!(events.len() > 3, "the answer streams in several deltas: {events:?}");
    let streamed: String = lines.iter().filter_map(|v| v["text"].as_str()).collect();
    assert!(!streamed.trim().is_empty());
    let done = lines.iter().find(|v| v["event"] == "done").unwrap();
    assert_eq!((done["status"].as_str(), done["turns"].as_u64()), (Some("done"), Some(1)), "{done}");
    assert!(done["input_tokens"].as_u64().unwrap() > 0, "{done}");
    assert!(done["output_tokens"].as_u64().unwrap() > 0, "{done}");
}

/// A compile is announced where a person waits for it, and only then: with
/// `-v`, a compile-cache miss says the component compiles once and is cached
/// after, and the hit that follows says nothing; with the cache off each load
/// says it compiles every time; off a terminal without `-v`, and on stdout
/// (`--json`) ever, nothing is said.
#[test]
fn a_compile_is_announced_on_a_cache_miss_and_not_on_a_hit() {
    let dir = tempfile::tempdir().unwrap();
    let inspect = |cache: &str, flags: &[&str]| {
        let out = common::nexo_command(&dir.path().join(cache))
            .args(flags)
            .args(["inspect", "--json", built::HELLO])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(serde_json::from_str::<serde_json::Value>(&stdout(&out)).is_ok(), "stdout is the JSON alone");
        stderr(&out)
    };
    let said = |err: &str| err.lines().filter(|l| l.starts_with("compiling component (")).map(String::from).collect();
    let miss: Vec<String> = said(&inspect("a", &["-v"]));
    assert_eq!(miss.len(), 1, "{miss:?}");
    assert!(miss[0].ends_with("kB) — first load only, cached after"), "{miss:?}");
    assert_eq!(said(&inspect("a", &["-v"])), Vec::<String>::new(), "a cache hit compiles nothing");
    let off: Vec<String> = said(&inspect("b", &["-v", "--no-cache"]));
    assert!(off.len() == 1 && off[0].contains("at every load"), "{off:?}");
    assert_eq!(said(&inspect("c", &[])), Vec::<String>::new(), "off a terminal, without -v");
}

/// A `read-only-mcp` entry that covers a confined server the operator gave
/// network is warned of (the guard trusts the tool; the server can send);
/// one of a server without network is not.
#[test]
fn a_read_only_tool_of_a_networked_confined_server_is_warned_of() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().display();
    let config = dir.path().join("nexo.toml");
    std::fs::write(
        &config,
        format!(
            "[mcp.docs]\ncommand = \"/bin/true\"\nconfine = true\ncwd = \"{cwd}\"\nnet-hosts = [\"docs.example\"]\n\n\
             [mcp.fs]\ncommand = \"/bin/true\"\nconfine = true\ncwd = \"{cwd}\"\n\n\
             [grant.data-flow]\nread-only-mcp = [\"docs/search\", \"fs/read_file\", \"lookup\"]\n"
        ),
    )
    .unwrap();
    let agent = dir.path().join("a.toml");
    std::fs::write(&agent, "name = \"a\"\ndescription = \"d\"\ninstructions = \"i\"\n").unwrap();
    let out = nexo(&["inspect", agent.to_str().unwrap(), "--config", config.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    let warned = |entry: &str| {
        err.contains(&format!("`read-only-mcp` names `{entry}`, a tool of confined MCP servers with network"))
    };
    assert!(warned("docs/search") && warned("lookup"), "{err}");
    assert!(err.contains("network` or `net-hosts`): `docs`."), "{err}");
    assert!(!err.contains("names `fs/read_file`"), "a server without network is not warned of: {err}");
}
