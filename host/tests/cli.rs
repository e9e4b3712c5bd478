//! The `nexo` binary: inspect, run and exit codes, against real plugins.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::process::{Command, Output};

use nexo_tests as built;

fn nexo(args: &[&str]) -> Output {
    let cache = std::env::temp_dir().join(format!("nexo-cli-test-cache-{}", std::process::id()));
    Command::new(env!("CARGO_BIN_EXE_nexo"))
        .args(args)
        .env("NEXO_CACHE_DIR", cache)
        .env_remove("NEXO_LOG")
        .output()
        .expect("run nexo")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
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
    assert!(text.starts_with("hello  (agent, nexo:plugin/agent@0.1.0)"), "{text}");
    assert!(text.contains("requested     read, glob"), "{text}");
    assert!(text.contains("nexo:plugin/model@0.1.0"), "{text}");
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
    assert_eq!(v["status"], "ok");
    assert_eq!(v["agent"], "text-stats");
    let out = nexo(&["run", "--json", "--timeout", "1", built::SPIN, "a"]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(v["status"], "error");
    assert!(v["error"].as_str().unwrap().contains("deadline"));
}

#[test]
fn failures_have_distinct_exit_codes_and_clear_messages() {
    let out = nexo(&["run", built::TRAP, "x"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("plugin `trap` trapped in `run`"), "{}", stderr(&out));

    let out = nexo(&["run", "--memory", "32", built::HOG, "x"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("past the cap of 33554432 bytes"), "{}", stderr(&out));

    let out = nexo(&["run", built::CODE_REVIEW, "x"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("is a skill, not an agent"), "{}", stderr(&out));

    let out = nexo(&["inspect", built::NOT_A_PLUGIN]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("world nexo does not host"), "{}", stderr(&out));

    let out = nexo(&["inspect", "Cargo.toml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("not a WebAssembly file"), "{}", stderr(&out));
}

#[test]
fn wit_prints_the_contract() {
    let out = nexo(&["wit"]);
    assert!(out.status.success());
    let text = stdout(&out);
    assert!(text.contains("package nexo:plugin@0.1.0;"));
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

    // A directory that is not a crate gets a clear error.
    let out = nexo(&["build", root.join("docs").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("has no `[package] name`"), "{}", stderr(&out));
}
