//! `nexo run --sandbox container --container-runtime podman`: an agent's
//! file and shell tools act in a real podman container, on the image
//! scripts/podman-deps.sh builds from Debian packages, and the container is
//! gone when the run ends. The sandbox's own tests (sandbox/tests/podman.rs)
//! prove the hardening; this one proves nexo's grant reaches it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{nexo_command, stderr, stdout};

#[test]
fn nexo_run_acts_in_a_podman_container_and_removes_it() {
    let Some(image) = nexo_testkit::podman::image("nexo_run_acts_in_a_podman_container_and_removes_it") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // One line, read back with read_file: a tool result's summary is its first line.
    let shell = "echo \"$(cat notes/a.txt)|$(readlink /bin/sh)|$(tr '\\0' ' ' < /proc/1/cmdline)|\
                 $(touch /etc/x 2>/dev/null || echo root-is-read-only)\" > seen.txt";
    let turns = serde_json::json!({ "turns": [
        { "tool_calls": [{ "name": "write_file", "arguments": { "path": "notes/a.txt", "content": "from the agent" } }] },
        { "tool_calls": [{ "name": "shell", "arguments": { "command": shell } }] },
        { "tool_calls": [{ "name": "read_file", "arguments": { "path": "seen.txt" } }] },
        { "text": "Tidied." }
    ]});
    let child = tidier(dir.path(), image, "write,shell", &turns)
        .arg("--json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let events: Vec<serde_json::Value> = stdout(&out).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let results: Vec<&serde_json::Value> = events.iter().filter(|e| e["event"] == "tool-result").collect();
    let verdicts: Vec<(&str, &str)> =
        results.iter().map(|r| (r["name"].as_str().unwrap(), r["verdict"].as_str().unwrap())).collect();
    assert_eq!(
        verdicts,
        [("write_file", "allowed"), ("shell", "allowed"), ("read_file", "allowed")],
        "{}",
        stdout(&out)
    );
    // The shell saw the file the write tool made, in the image's busybox
    // root, under the engine's init, with the root read-only.
    let summary = results[2]["summary"].as_str().unwrap();
    for part in ["from the agent", "busybox", "-- tail -f /dev/null", "root-is-read-only"] {
        assert!(summary.contains(part), "{part:?} is not in the shell's result: {summary}");
    }

    // The run closed its sandbox: no container named for this nexo process is left.
    let left = containers_of(pid);
    assert!(left.is_empty(), "the run left its containers: {left:?}");
}

#[test]
fn a_nexo_killed_mid_command_leaves_no_container() {
    let Some(image) = nexo_testkit::podman::image("a_nexo_killed_mid_command_leaves_no_container") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let turns = serde_json::json!({ "turns": [
        { "tool_calls": [{ "name": "shell", "arguments": { "command": "sleep 300" } }] },
        { "text": "Slept." }
    ]});
    let mut child =
        tidier(dir.path(), image, "shell", &turns).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let pid = child.id();

    // SIGKILL while the command runs in the container: nexo closes nothing,
    // and the container still goes.
    let sleeping = || {
        containers_of(pid).into_iter().find(|name| {
            let top = Command::new("podman").args(["top", &running_id(name), "args"]).output().unwrap();
            String::from_utf8_lossy(&top.stdout).contains("sleep 300")
        })
    };
    eventually(sleeping);
    child.kill().unwrap();
    child.wait().unwrap();
    eventually(|| containers_of(pid).is_empty().then_some(()));
}

/// `nexo run` of the offline tidier agent, its model replaced by `turns`,
/// with `allow` granted and its tools in a podman container of `image`.
fn tidier(dir: &Path, image: &str, allow: &str, turns: &serde_json::Value) -> Command {
    let script = dir.join("script.json");
    std::fs::write(&script, turns.to_string()).unwrap();
    let agent = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/offline/tidier.toml");
    let mut command = nexo_command(&dir.join("cache"));
    command
        .args(["run", agent.to_str().unwrap(), "Tidy the notes", "--script", script.to_str().unwrap()])
        .args(["--sandbox", "container", "--container-runtime", "podman", "--image", image])
        .args(["--allow", allow, "--mode", "auto", "--ephemeral"]);
    command
}

/// The sandbox names of the containers the nexo process `pid` started
/// (its sandboxes are named `nexo-<pid in hex>-…`).
fn containers_of(pid: u32) -> Vec<String> {
    let names = Command::new("podman")
        .args(["ps", "-a", "--filter", "label=nexo.sandbox.id", "--format", "{{index .Labels \"nexo.sandbox.id\"}}"])
        .output()
        .unwrap();
    assert!(names.status.success(), "{}", stderr(&names));
    let ours = format!("nexo-{pid:x}-");
    std::str::from_utf8(&names.stdout).unwrap().lines().filter(|n| n.starts_with(&ours)).map(str::to_string).collect()
}

/// The id of the container labeled `name`, or "" when there is none.
fn running_id(name: &str) -> String {
    let out = Command::new("podman")
        .args(["ps", "-q", "--filter", &format!("label=nexo.sandbox.id={name}")])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Polls `check` until it gives a value, for up to a minute.
fn eventually<T>(check: impl Fn() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(Instant::now() < deadline, "not within a minute");
        std::thread::sleep(Duration::from_millis(100));
    }
}
