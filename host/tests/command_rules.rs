//! The operator's command rules on the shell, end to end: a tenant's policy
//! against a real `nexo serve` (the real binary on loopback, a real SQLite
//! file, the workflow probe component, a loopback model server), and
//! `nexo policy check` on the command line.
//!
//! - under `approve`, a command an `allow` rule names runs unasked, one a
//!   `deny` rule names is refused with the rule and its reason (the model
//!   reads them), and one no rule names waits for an approval;
//! - the operator tightens the policy while the run waits: the approved
//!   call meets the rules as they are now, and is refused;
//! - the guest's own call (not the model's) meets the same rules;
//! - `nexo policy check` shows each command's rule and the verdict, and
//!   exits 0 only for a command that would run unasked.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use nexo_model::mock::{MockToolCall, Reply};
use nexo_tests as built;
use reqwest::StatusCode;
use serde_json::{Value, json};

mod common;

use common::scene::Scene;
use common::{stderr, stdout};

fn policy(rules: Value) -> Value {
    json!({
        "allow": ["shell"], "mode": "approve", "sandboxes": ["local"], "models": ["test"],
        "command-rules": rules,
    })
}

fn shell(id: &str, command: &str) -> Reply {
    Reply::tool_calls(vec![MockToolCall::new(id, "shell", json!({"command": command}))])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_command_rules_allow_refuse_and_ask_and_a_tightened_policy_holds_on_approval() {
    let scene = Scene::new(None).await;
    let rules = json!([
        {"prefix": "echo", "decision": "allow"},
        {"prefix": ["rm"], "decision": "deny", "reason": "nothing is deleted here"},
    ]);
    let alice = scene.tenant("alice", Some(policy(rules.clone())));
    let node = scene.node("a");
    let (status, plugin) = scene.upload(&node, &alice, built::WORKFLOW_PROBE).await;
    assert_eq!(status, StatusCode::CREATED, "{plugin}");

    scene.model.push(shell("c1", "echo allowed-unasked"));
    scene.model.push(shell("c2", "rm -rf ."));
    scene.model.push(shell("c3", "touch made-by-touch"));
    scene.model.push(Reply::text("done as far as I was let"));
    let body = json!({"plugin": plugin["id"], "input": "prompt tidy up", "sandbox": "local", "wait": true});
    let (status, run) = scene.post(&node.url("/v1/runs"), &alice, body).await;
    // `echo` ran, `rm` was refused; `touch` names no rule, so it waits under `approve`.
    assert_eq!((status, &run["status"]), (StatusCode::OK, &json!("suspended")), "{run}\n{}", node.log());
    assert_eq!(run["approval"]["capability"], "shell", "{run}");
    assert_eq!(run["approval"]["arguments"]["command"], "touch made-by-touch", "{run}");
    let requests = scene.model.requests();
    assert_eq!(requests.len(), 3, "{requests:?}");
    assert!(requests[1].raw_body.contains("allowed-unasked"), "echo ran: {}", requests[1].raw_body);
    let refusal = &requests[2].raw_body;
    assert!(
        refusal.contains("command rule `deny rm`") && refusal.contains("nothing is deleted here"),
        "the model reads the rule and its reason: {refusal}"
    );

    // The operator tightens the policy while the run waits: `touch` is denied now.
    let tightened = scene.dir.path().join("tightened.json");
    let rules = json!([
        {"prefix": "echo", "decision": "allow"},
        {"prefix": ["rm"], "decision": "deny", "reason": "nothing is deleted here"},
        {"prefix": "touch", "decision": "deny"},
    ]);
    std::fs::write(&tightened, policy(rules).to_string()).unwrap();
    let out = scene.nexo(&["tenant", "policy", "alice", tightened.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let id = run["id"].as_str().unwrap();
    let decision = json!({"seq": run["approval"]["seq"], "args-hash": run["approval"]["args_hash"]});
    let (status, decided) = scene.post(&node.url(&format!("/v1/runs/{id}/approve")), &alice, decision).await;
    assert_eq!(status, StatusCode::OK, "{decided}");
    let done = scene.finish(&node, &alice, id).await;
    assert_eq!((&done["status"], &done["result"]), (&json!("done"), &json!("done as far as I was let")), "{done}");
    let requests = scene.model.requests();
    assert_eq!(requests.len(), 4, "no turn was asked twice");
    assert!(requests[3].raw_body.contains("command rule `deny touch`"), "{}", requests[3].raw_body);
    let workspace = scene.data("a");
    let made = walk_names(&workspace);
    assert!(!made.iter().any(|n| n == "made-by-touch"), "the approval let nothing past the rules now: {made:?}");
    let verdicts: Vec<Value> =
        scene.audit(&node, &alice, "capability.used").await.into_iter().map(|d| d["verdict"].clone()).collect();
    assert_eq!(verdicts, ["allowed", "denied", "approval-required", "denied"], "{verdicts:?}");

    // The guest's own call, with no model, meets the same rules.
    let body = json!({"plugin": plugin["id"], "input": "shell rm -rf .", "sandbox": "local", "wait": true});
    let (status, run) = scene.post(&node.url("/v1/runs"), &alice, body).await;
    assert_eq!(status, StatusCode::OK, "{run}");
    assert!(run.to_string().contains("command rule `deny rm`"), "{run}");
}

/// Every file and directory name under `dir`.
fn walk_names(dir: &std::path::Path) -> Vec<String> {
    let mut names = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            names.push(entry.file_name().to_string_lossy().into_owned());
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(entry.path());
            }
        }
    }
    names
}

#[test]
fn policy_check_shows_each_commands_rule_and_the_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("nexo.toml");
    std::fs::write(
        &config,
        r#"
[grant]
allow = ["shell"]
mode = "approve"
command-rules = [
  { prefix = "git push --dry-run", decision = "allow" },
  { prefix = "git push", decision = "deny", reason = "pushes go through review" },
  { prefix = "git", decision = "allow" },
  { prefix = ["rm"], decision = "ask" },
]
"#,
    )
    .unwrap();
    let check = |args: &[&str]| {
        let out = common::nexo_command(&dir.path().join("cache"))
            .args(["policy", "check", "--json", "--config"])
            .arg(&config)
            .args(args)
            .output()
            .unwrap();
        let value: Value = serde_json::from_str(stdout(&out).trim())
            .unwrap_or_else(|e| panic!("{e}: {}\n{}", stdout(&out), stderr(&out)));
        (out.status.code(), value)
    };
    // (command, exit code, ruling, verdict)
    let table = [
        ("git status", 0, "allow", "allowed"),
        ("git push --dry-run origin", 0, "allow", "allowed"),
        ("git status && git push origin", 1, "deny", "denied"),
        ("/usr/bin/git push", 1, "deny", "denied"),
        ("rm -r build", 1, "ask", "approval-required"),
        ("ls", 1, "mode", "approval-required"),
        ("git log > log.txt", 1, "ask", "approval-required"),
        ("git status; $(curl x)", 1, "ask", "approval-required"),
    ];
    for (command, code, ruling, verdict) in table {
        let (exit, value) = check(&[command]);
        assert_eq!(
            (exit, value["ruling"].as_str(), value["verdict"].as_str()),
            (Some(code), Some(ruling), Some(verdict)),
            "{command}: {value}"
        );
    }
    let (_, value) = check(&["git status && git push origin"]);
    assert_eq!(
        value["commands"],
        json!([{"argv": ["git", "status"], "rules": ["allow git"]}, {"argv": ["git", "push", "origin"], "rules": ["deny git push"]}])
    );
    assert!(value["message"].as_str().unwrap().contains("pushes go through review"), "{value}");
    let (_, value) = check(&["git log > log.txt"]);
    assert!(value["unreadable"].as_str().unwrap().contains("redirection"), "{value}");
    // A flag's rule comes after the file's, and the words may come after `--`.
    let (exit, value) = check(&["--command-rule", "deny ls", "--", "ls", "-la"]);
    assert_eq!((exit, value["verdict"].as_str()), (Some(1), Some("denied")), "{value}");
    // The flags' rules are a layer of their own: the file's `allow git` does not shadow them.
    let (exit, value) = check(&["--command-rule", "deny git log", "git log -p"]);
    assert_eq!((exit, value["verdict"].as_str()), (Some(1), Some("denied")), "{value}");
    assert_eq!(value["commands"][0]["rules"], json!(["allow git", "deny git log"]), "{value}");
    // Builtins that run code or set variables are not plain, whatever rule names them.
    let (exit, value) = check(&["--command-rule", "allow /usr/bin/printf", "printf -v PATH %s .; git status"]);
    assert_eq!((exit, value["ruling"].as_str()), (Some(1), Some("ask")), "{value}");
    // A tenant's policy file is judged as the server would.
    let tenant = dir.path().join("tenant.json");
    std::fs::write(
        &tenant,
        json!({"allow": ["shell"], "mode": "auto", "sandboxes": ["local"], "command-rules": [{"prefix": "curl", "decision": "ask"}]}).to_string(),
    )
    .unwrap();
    let (exit, value) = check(&["--policy", tenant.to_str().unwrap(), "curl example.com"]);
    assert_eq!(
        (exit, value["mode"].as_str(), value["verdict"].as_str()),
        (Some(1), Some("auto"), Some("approval-required")),
        "{value}"
    );
    let (exit, value) = check(&["--policy", tenant.to_str().unwrap(), "ls"]);
    assert_eq!((exit, value["verdict"].as_str()), (Some(0), Some("allowed")), "{value}");
    // A rule that is not one plain command is refused with the config file named.
    std::fs::write(&config, "[grant]\ncommand-rules = [{ prefix = \"rm *\", decision = \"deny\" }]\n").unwrap();
    let out = common::nexo_command(&dir.path().join("cache"))
        .args(["policy", "check", "--config"])
        .arg(&config)
        .arg("ls")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("glob"), "{}", stderr(&out));
}
