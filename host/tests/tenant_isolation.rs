//! A tenant sees only what is its own: an adversarial tenant of a real
//! `nexo serve`, allowed the shell in its local workspace with mode `auto`,
//! has the model run shell commands and file tool calls (and its component
//! read through its WASI preopen and the file tools directly) at the
//! server's store, another tenant's workspace, the operator's home,
//! `/etc/shadow` and other processes' `/proc`. Every one must come back
//! refused or empty, and its own file must be read. The server runs as root
//! in CI: the secrets must be absent from the sandbox's view, not merely
//! unreadable by mode. And the operator's `[sandbox] system-paths` is the
//! view in force.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use nexo_model::mock::{MockToolCall, Reply};
use nexo_tests as built;
use reqwest::StatusCode;
use serde_json::{Value, json};

mod common;

use common::scene::{PROVIDER_KEY, Scene};

const BOB_MARKER: &str = "bob-workspace-marker-4127";
const HOME_MARKER: &str = "operator-home-marker-9360";
const OWN_MARKER: &str = "alice-own-marker-2291";

fn shell(id: &str, command: &str) -> MockToolCall {
    MockToolCall::new(id, "shell", json!({ "command": command }))
}

fn read(id: &str, path: &str) -> MockToolCall {
    MockToolCall::new(id, "read_file", json!({ "path": path }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_shell_and_file_tools_see_only_its_workspace() {
    let scene = Scene::new(None).await;
    let shadow = std::fs::read_to_string("/etc/shadow").expect("the test runs as root, as CI does");
    let shadow_head: String = shadow.lines().next().unwrap().chars().take(12).collect();
    // The operator's home, with a key in it.
    let home = scene.dir.path().join("home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_ed25519"), HOME_MARKER).unwrap();
    let home = home.canonicalize().unwrap().display().to_string();

    let alice = scene.tenant(
        "alice",
        Some(json!({"allow": ["shell", "write"], "mode": "auto", "sandboxes": ["local"], "models": ["test"]})),
    );
    let bob = scene
        .tenant("bob", Some(json!({"allow": ["write"], "mode": "auto", "sandboxes": ["local"], "models": ["test"]})));
    let node = scene.node_with_env("a", &[("HOME", &home)]);
    let pid = node.child.id();
    let (status, plugin) = scene.upload(&node, &alice, built::WORKFLOW_PROBE).await;
    assert_eq!(status, StatusCode::CREATED, "{plugin}");
    let (status, bobs) = scene.upload(&node, &bob, built::WORKFLOW_PROBE).await;
    assert!(status.is_success(), "{bobs}");
    let sha = plugin["id"].as_str().unwrap().to_string();

    // Bob keeps a file in his workspace.
    scene.model.push(Reply::tool_calls(vec![MockToolCall::new(
        "b1",
        "write_file",
        json!({"path": "secret.txt", "content": BOB_MARKER}),
    )]));
    scene.model.push(Reply::text("kept"));
    let body = json!({"plugin": sha, "input": "prompt keep it", "sandbox": "local", "wait": true});
    let (status, run) = scene.post(&node.url("/v1/runs"), &bob, body).await;
    assert_eq!((status, &run["status"]), (StatusCode::OK, &json!("done")), "{run}\n{}", node.log());
    let tenants = scene.data("a").join("tenants").canonicalize().unwrap();
    let bob_dir = std::fs::read_dir(&tenants)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|d| d.join("workspace/secret.txt").is_file())
        .expect("bob's workspace holds his file");
    let bob_secret = bob_dir.join("workspace/secret.txt");
    assert_eq!(std::fs::read_to_string(&bob_secret).unwrap(), BOB_MARKER);
    let bob_secret = bob_secret.display().to_string();
    let bob_id = bob_dir.file_name().unwrap().to_string_lossy().into_owned();
    let store = std::path::Path::new(&scene.store).canonicalize().unwrap().display().to_string();
    let data = scene.data("a").canonicalize().unwrap().display().to_string();
    let tenants = tenants.display().to_string();

    // Alice's model tries everything, through the shell and the file tools.
    let before = scene.model.requests().len();
    scene.model.push(Reply::tool_calls(vec![
        shell("s1", "cat /etc/shadow; head -c 200 /etc/shadow"),
        shell("s2", &format!("ls -la {data} {tenants}; head -c 100 {store}; ls ~/.local/share/nexo")),
        shell("s3", &format!("cat {bob_secret}; ls {tenants}/*/workspace")),
        shell("s4", &format!("ls -A {home}; cat {home}/.ssh/id_ed25519")),
        shell("s5", &format!("cat /proc/1/environ /proc/{pid}/environ /proc/{pid}/cmdline; ls /proc/{pid}/root/")),
        shell("s6", &format!("echo {OWN_MARKER} > mine.txt; cat mine.txt")),
    ]));
    let escapes = [
        ("r1", "/etc/shadow".to_string()),
        ("r2", store.clone()),
        ("r3", bob_secret.clone()),
        ("r4", format!("../../{bob_id}/workspace/secret.txt")),
        ("r5", format!("{home}/.ssh/id_ed25519")),
        ("r6", "/proc/1/environ".to_string()),
        ("r7", format!("/proc/{pid}/environ")),
    ];
    let mut reads: Vec<MockToolCall> = escapes.iter().map(|(id, path)| read(id, path)).collect();
    reads.push(read("own", "mine.txt"));
    scene.model.push(Reply::tool_calls(reads));
    scene.model.push(Reply::text("done looking"));
    // The component itself reads through its WASI preopen and the file tools.
    let input = format!("prompt look around; branch /etc/shadow; branch {bob_secret}; read {store}; read {bob_secret}");
    let body = json!({"plugin": sha, "input": input, "sandbox": "local", "wait": true});
    let (status, run) = scene.post(&node.url("/v1/runs"), &alice, body).await;
    assert_eq!(status, StatusCode::OK, "{run}\n{}", node.log());
    let id = run["id"].as_str().unwrap().to_string();
    let run = scene.finish(&node, &alice, &id).await;
    assert_eq!(run["status"], "done", "{run}\n{}", node.log());

    // What came back to the model and the tenant: no secret anywhere.
    let requests = scene.model.requests();
    let sent: String = requests[before..].iter().map(|r| r.raw_body.clone()).collect::<Vec<_>>().join("\n");
    let events = scene.events(&node, &alice, &id, None).await;
    let seen =
        format!("{sent}\n{run}\n{}", serde_json::to_string(&events.iter().map(|e| &e.2).collect::<Vec<_>>()).unwrap());
    for (what, secret) in [
        ("/etc/shadow", shadow_head.as_str()),
        ("the store", "SQLite format 3"),
        ("bob's workspace", BOB_MARKER),
        ("the operator's home", HOME_MARKER),
        ("the server's environment", PROVIDER_KEY),
    ] {
        assert!(!seen.contains(secret), "alice's run saw {what} ({secret:?}):\n{seen}");
    }
    // Each escape by the file tools is refused as one.
    let results: Vec<&Value> =
        events.iter().filter(|e| e.1 == "tool_call" || e.1 == "tool_result").map(|e| &e.2).collect();
    let verdict = |call: &str| -> String {
        let found = events.iter().map(|e| &e.2["data"]).find(|d| d["id"] == call && d.get("verdict").is_some());
        let found = found.unwrap_or_else(|| panic!("no result of {call}: {results:?}"));
        found["verdict"].as_str().unwrap_or("").to_string()
    };
    for (call, path) in &escapes {
        assert_ne!(verdict(call), "allowed", "read_file {path} was allowed: {results:?}");
    }
    // Its own file is its to read, by the shell and by the file tools: the
    // model got it back from both.
    let last = &requests.last().unwrap().body;
    for call in ["s6", "own"] {
        assert_eq!(verdict(call), "allowed", "{results:?}");
        let answer = last["messages"].as_array().unwrap().iter().find(|m| m["tool_call_id"] == call);
        let text = answer.map(|m| m["content"].to_string()).unwrap_or_default();
        assert!(text.contains(OWN_MARKER), "{call} did not read alice's own file: {text}\n{last}");
    }
}

/// The operator's `[sandbox] system-paths` is the view in force for `nexo
/// run` too, and a path that is not absolute fails the config file.
#[test]
fn the_operators_view_is_the_one_in_force() {
    let dir = tempfile::Builder::new().prefix("view-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let agent = dir.path().join("agent.toml");
    std::fs::write(&agent, "name = \"looker\"\ndescription = \"Looks\"\ncapabilities = [\"read\", \"shell\"]\n")
        .unwrap();
    let config = dir.path().join("nexo.toml");
    let inspect = |text: &str| {
        std::fs::write(&config, text).unwrap();
        let mut cmd = common::nexo_command(&dir.path().join("cache"));
        cmd.arg("inspect").arg(&agent).arg("--config").arg(&config);
        cmd.args(["--sandbox", "local", "--allow", "shell", "--cwd"]).arg(&ws);
        cmd.output().unwrap()
    };
    let out = inspect("[sandbox]\nsystem-paths = [\"/usr\", \"/opt/nexo-tools\"]\n");
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert!(common::stdout(&out).contains("system view: /opt/nexo-tools, /usr;"), "{}", common::stdout(&out));
    let out = inspect("");
    assert!(common::stdout(&out).contains("system view: /usr, /bin, /sbin, /lib"), "{}", common::stdout(&out));
    let out = inspect("[sandbox]\nsystem-paths = [\"opt/tools\"]\n");
    let said = common::stderr(&out);
    assert!(!out.status.success() && said.contains("line 2") && said.contains("absolute"), "{said}");
}
