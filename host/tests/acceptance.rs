//! Accepting a plugin's authority: `nexo run` refuses a new version of a
//! plugin that asks for more than the accepted one, naming each new ask and
//! the fix, until `nexo plugins accept` or `--accept-authority`; a narrower
//! version passes with a note. Real components built from `plugins/`: the
//! versions are text-stats (asks for nothing) and tool-probe (`read`,
//! `glob`, `write`, `shell`, and example.com to fetch) copied in turn to one
//! path, the reference both are versions of.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::path::Path;
use std::process::Output;

use nexo_tests as built;

mod common;

use common::{stderr, stdout};

fn nexo(dir: &Path, args: &[&str]) -> Output {
    common::nexo_command(&dir.join("cache")).env("OPENAI_API_KEY", SECRET).args(args).output().expect("run nexo")
}

/// A secret in the run's environment, which the acceptance file must not hold.
const SECRET: &str = "sk-test-acceptance-0123456789";

#[test]
fn a_version_asking_for_shell_is_refused_until_accepted_and_a_narrower_one_passes_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent.wasm");
    let path = agent.to_str().unwrap();
    let reference = std::fs::canonicalize(dir.path()).unwrap().join("agent.wasm");
    let reference = reference.to_str().unwrap();
    let run = |extra: &[&str]| nexo(dir.path(), &[&["run", "--ephemeral", path, "one two"], extra].concat());

    // First use: accepted and recorded, without a word (the operator named it).
    std::fs::copy(built::TEXT_STATS, &agent).unwrap();
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("words: 2"), "{}", stdout(&out));
    assert!(!stderr(&out).contains("note:"), "{}", stderr(&out));
    let out = nexo(dir.path(), &["plugins", "list"]);
    assert!(stdout(&out).starts_with(&format!("{reference}  sha256:")), "{}", stdout(&out));

    // A new version that asks for more: refused before it runs, each new ask named, and the fix.
    std::fs::copy(built::TOOL_PROBE, &agent).unwrap();
    let out = run(&[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("asks for more authority than the one accepted"), "{err}");
    for ask in ["capability `shell`", "capability `write`", "capability `read`", "fetch host `example.com`"] {
        assert!(err.contains(ask), "{ask}: {err}");
    }
    assert!(err.contains(&format!("`nexo plugins accept {reference}`")), "{err}");
    assert!(err.contains("with `--accept-authority` on the `nexo run` or `nexo mcp serve`"), "{err}");
    assert!(!stdout(&out).contains("read-file:"), "it ran: {}", stdout(&out));
    // Refused again: a refusal records nothing.
    assert_eq!(run(&[]).status.code(), Some(2));

    // Accepted by the operator, it runs, with nothing more to note.
    let out = nexo(dir.path(), &["plugins", "accept", path]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("accepted its new asks: capability `read`"), "{}", stderr(&out));
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("shell:"), "{}", stdout(&out));
    assert!(!stderr(&out).contains("note:"), "{}", stderr(&out));

    // A narrower version passes, is recorded, and is noted.
    std::fs::copy(built::TEXT_STATS, &agent).unwrap();
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains(&format!("note: {reference} changed from sha256:")), "{err}");
    let dropped =
        "capability `read`, capability `glob`, capability `write`, capability `shell`, fetch host `example.com`";
    assert!(err.contains(&format!("it no longer asks for {dropped}")), "{err}");
    assert!(!stderr(&run(&[])).contains("note:"));

    // The flag accepts a wider version for this run and records it.
    std::fs::copy(built::TOOL_PROBE, &agent).unwrap();
    assert_eq!(run(&[]).status.code(), Some(2));
    let out = run(&["--accept-authority"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("accepted its new asks: capability `read`"), "{}", stderr(&out));
    assert_eq!(run(&[]).status.code(), Some(0));

    // What is accepted: listed, in an operator-only file that holds no secret.
    let out = nexo(dir.path(), &["plugins", "list", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let listed: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let entry = &listed[reference];
    let sha = {
        use sha2::Digest as _;
        hex::encode(sha2::Sha256::digest(std::fs::read(built::TOOL_PROBE).unwrap()))
    };
    assert_eq!(entry["digest"], format!("sha256:{sha}"), "{listed}");
    assert_eq!(entry["authority"]["capabilities"], serde_json::json!(["read", "glob", "write", "shell"]));
    let file = dir.path().join("cache").with_extension("accepted.json");
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&file).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(!text.contains(SECRET), "{text}");
    let book: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(book["plugins"], listed);
}

/// A declarative agent file is a plugin too: its reference is its path, and
/// a new `capabilities` line is a new version to accept.
#[test]
fn a_toml_agent_asking_for_an_mcp_server_is_refused_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent.toml");
    let path = agent.to_str().unwrap();
    let head = "name = \"a\"\ndescription = \"d\"\ninstructions = \"i\"\n";
    std::fs::write(&agent, format!("{head}capabilities = [\"read\"]\n")).unwrap();
    // Checked before the model is: no model is needed to be refused or accepted.
    let out = nexo(dir.path(), &["plugins", "accept", path]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    std::fs::write(&agent, format!("{head}capabilities = [\"read\"]\nmcp-servers = [\"github\"]\n")).unwrap();
    let out = nexo(dir.path(), &["run", "--ephemeral", "--json", path, "hi"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(v["status"], "refused");
    let error = v["error"].as_str().unwrap();
    assert!(error.contains(": MCP server `github`. Review it"), "{error}");
}

/// `nexo chat` runs a plugin as `nexo run` does, so a version that asks for
/// more is refused there too, before anything starts.
#[test]
fn chat_refuses_a_version_that_asks_for_more() {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent.wasm");
    let path = agent.to_str().unwrap();
    std::fs::copy(built::TEXT_STATS, &agent).unwrap();
    let out = nexo(dir.path(), &["run", "--ephemeral", path, "one two"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    std::fs::copy(built::TOOL_PROBE, &agent).unwrap();
    let command = ["chat", path];
    let out = common::nexo_command(&dir.path().join("cache"))
        .args(command)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{command:?}: {err}");
    assert!(err.contains("capability `shell`") && err.contains("nexo plugins accept"), "{command:?}: {err}");
}
