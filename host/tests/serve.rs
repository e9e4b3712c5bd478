//! `nexo serve` as its users meet it: the real binary on loopback, a real
//! SQLite file (and two nodes over one PostgreSQL), real components, a
//! loopback model server, and an HTTP client.
//!
//! - every endpoint refuses a missing, unknown or revoked key, and answers
//!   another tenant's ids with 404;
//! - a run within the policy suspends for an approval, is approved over
//!   the API and finishes, its events streamed as SSE (with resume);
//! - a request never widens the policy;
//! - the audit log verifies, and `nexo audit verify` catches an edit;
//! - SIGTERM stops the server cleanly;
//! - a plugin uploaded to one node runs on another.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nexo_model::mock::{MockToolCall, Reply};
use nexo_tests as built;
use reqwest::StatusCode;
use serde_json::{Value, json};

mod common;

use common::scene::{PROVIDER_KEY, Scene};
use common::{Node, stderr, stdout};

/// A policy that lets its runs write in their local workspace, each write
/// waiting for an approval, with the operator's `test` model.
fn writer_policy() -> Value {
    json!({"allow": ["write"], "mode": "approve", "sandboxes": ["local", "virtual"], "models": ["test"]})
}

/// Every route under `/v1` with a tenant's or the admin's key, with the
/// method and a body it accepts.
fn routes(run: &str, plugin: &str) -> Vec<(reqwest::Method, String, Option<Value>)> {
    use reqwest::Method;
    vec![
        (Method::GET, "/v1/plugins".into(), None),
        (Method::GET, format!("/v1/plugins/{plugin}"), None),
        (Method::POST, "/v1/runs".into(), Some(json!({"plugin": plugin, "input": "x"}))),
        (Method::GET, "/v1/runs".into(), None),
        (Method::GET, format!("/v1/runs/{run}"), None),
        (Method::GET, format!("/v1/runs/{run}/events"), None),
        (Method::POST, format!("/v1/runs/{run}/approve"), Some(json!({}))),
        (Method::POST, format!("/v1/runs/{run}/deny"), Some(json!({}))),
        (Method::POST, format!("/v1/runs/{run}/resume"), Some(json!({}))),
        (Method::POST, format!("/v1/runs/{run}/cancel"), Some(json!({}))),
        (Method::GET, "/v1/sessions".into(), None),
        (Method::POST, "/v1/sessions/prompt".into(), Some(json!({"plugin": plugin, "instance": "x", "input": "x"}))),
        (Method::GET, "/v1/sessions/snothing".into(), None),
        (Method::DELETE, "/v1/sessions/snothing".into(), None),
        (Method::GET, "/v1/usage".into(), None),
        (Method::GET, "/v1/audit".into(), None),
        (Method::POST, "/v1/tenants".into(), Some(json!({"name": "zed"}))),
        (Method::GET, "/v1/tenants".into(), None),
        (Method::PUT, "/v1/tenants/alice/policy".into(), Some(json!({}))),
        (Method::POST, "/v1/tenants/alice/keys".into(), Some(json!({}))),
        (Method::POST, "/v1/tenants/alice/disable".into(), Some(json!({}))),
        (Method::POST, "/v1/tenants/alice/enable".into(), Some(json!({}))),
        (Method::DELETE, "/v1/keys/knothing".into(), None),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_are_isolated_and_an_approved_run_finishes() {
    let scene = Scene::new(None).await;
    let alice = scene.tenant("alice", Some(writer_policy()));
    let bob = scene.tenant("bob", Some(writer_policy()));
    let out = scene.nexo(&["tenant", "admin-key"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let admin = stdout(&out).trim().to_string();
    let node = scene.node("a");

    let (status, health) = scene.call(reqwest::Method::GET, &node.url("/healthz"), None, None).await;
    assert_eq!((status, health), (StatusCode::OK, Value::String("ok\n".into())));
    let (status, _) = scene.call(reqwest::Method::GET, &node.url("/readyz"), None, None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, doc) = scene.call(reqwest::Method::GET, &node.url("/v1/openapi.json"), None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(doc["openapi"], "3.1.0");

    // Upload: validated, content-addressed, shown against the policy.
    let (status, plugin) = scene.upload(&node, &alice, built::WORKFLOW_PROBE).await;
    assert_eq!(status, StatusCode::CREATED, "{plugin}");
    let sha = plugin["id"].as_str().unwrap().to_string();
    assert_eq!(sha.len(), 64);
    let (status, again) = scene.upload(&node, &alice, built::WORKFLOW_PROBE).await;
    assert_eq!((status, &again["id"], &again["created"]), (StatusCode::OK, &plugin["id"], &json!(false)));
    let resp = scene.http.post(node.url("/v1/plugins")).bearer_auth(&alice).body("not wasm").send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_plugin", "{body}");

    // A request never widens the policy.
    for (widen, needle) in [
        (json!({"mode": "auto"}), "less strict"),
        (json!({"allow": ["shell"]}), "`shell`"),
        (json!({"model": "gpt-9"}), "gpt-9"),
    ] {
        let mut body = json!({"plugin": sha, "input": "prompt hi"});
        body.as_object_mut().unwrap().extend(widen.as_object().unwrap().clone());
        let (status, refused) = scene.post(&node.url("/v1/runs"), &alice, body).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
        assert_eq!(refused["error"]["code"], "beyond_policy");
        assert!(refused["error"]["message"].as_str().unwrap().contains(needle), "{refused}");
    }

    // A run within the policy suspends at the write, waiting for approval.
    scene.model.push(Reply::tool_calls(vec![MockToolCall::new(
        "c1",
        "write_file",
        json!({"path": "notes.txt", "content": "hi from alice"}),
    )]));
    scene.model.push(Reply::text("done writing"));
    let (status, run) = scene
        .post(
            &node.url("/v1/runs"),
            &alice,
            json!({"plugin": sha, "input": "prompt write notes", "sandbox": "local", "wait": true}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{run}\n{}", node.log());
    assert_eq!(run["status"], "suspended", "{run}\n{}", node.log());
    assert_eq!(run["approval"]["tool"], "write-file", "{run}");
    assert_eq!(run["approval"]["arguments"]["path"], "notes.txt");
    let id = run["id"].as_str().unwrap().to_string();

    // Bob sees nothing of Alice's: every verb on her run and plugin is 404.
    for (method, path, body) in routes(&id, &sha) {
        let (status, answer) = scene.call(method.clone(), &node.url(&path), None, body.clone()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path} without a key: {answer}");
        let (status, _) = scene.call(method.clone(), &node.url(&path), Some("nexo_sk_forged"), body.clone()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path} with an unknown key");
        let admin_path = path.starts_with("/v1/tenants") || path.starts_with("/v1/keys");
        let (status, answer) = scene.call(method.clone(), &node.url(&path), Some(&bob), body.clone()).await;
        if admin_path {
            assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}: a tenant learns nothing of the admin API");
        } else if path.contains(&id)
            || path.contains(&sha)
            || path.contains("snothing")
            || method == reqwest::Method::POST && (path == "/v1/runs" || path == "/v1/sessions/prompt")
        {
            assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path} as bob: {answer}");
        } else {
            assert_eq!(status, StatusCode::OK, "{method} {path} as bob: {answer}");
            assert!(!answer.to_string().contains(&id) && !answer.to_string().contains(&sha), "{path}: {answer}");
        }
        if !admin_path {
            let (status, _) = scene.call(method.clone(), &node.url(&path), Some(&admin), body.clone()).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path} with the admin key");
        }
    }
    assert_eq!(scene.settle(&node, &alice, &id).await["status"], "suspended", "bob's attempts changed nothing");

    // Alice approves in the API, naming the call she was shown; the write happens in her workspace only.
    let shown = json!({"seq": run["approval"]["seq"], "args-hash": run["approval"]["args_hash"]});
    let (status, decided) = scene.post(&node.url(&format!("/v1/runs/{id}/approve")), &alice, shown.clone()).await;
    assert_eq!(status, StatusCode::OK, "{decided}");
    let done = scene.finish(&node, &alice, &id).await;
    assert_eq!(done["status"], "done", "{done}\n{}", node.log());
    let tenant_dir = std::fs::read_dir(scene.data("a").join("tenants")).unwrap().next().unwrap().unwrap().path();
    assert_eq!(std::fs::read_to_string(tenant_dir.join("workspace/notes.txt")).unwrap(), "hi from alice");
    assert_eq!(scene.model.requests().len(), 2, "the turn that asked is not asked again");
    let (status, again) = scene.post(&node.url(&format!("/v1/runs/{id}/approve")), &alice, shown).await;
    assert_eq!(status, StatusCode::CONFLICT, "nothing is pending any more: {again}");
    assert_eq!(again["error"]["code"], "stale_approval", "{again}");

    // Its events, as SSE, end with the run; Last-Event-ID resumes after an event.
    let all = scene.events(&node, &alice, &id, None).await;
    let kinds: Vec<&str> = all.iter().map(|(_, e, _)| e.as_str()).collect();
    assert!(kinds.contains(&"suspended") && kinds.contains(&"tool_call"), "{kinds:?}");
    assert_eq!(all.last().unwrap().1, "end");
    assert_eq!(all.last().unwrap().2["status"], "done");
    let (mid, _, _) = &all[all.len() / 2];
    let rest = scene.events(&node, &alice, &id, Some(mid)).await;
    assert_eq!(rest.len(), all.len() - all.len() / 2 - 1, "only the events after {mid}");
    assert!(rest.iter().all(|(i, _, _)| i.is_empty() || i.parse::<i64>().unwrap() > mid.parse::<i64>().unwrap()));

    // Listing: each tenant sees its own runs only.
    let (_, mine) = scene.get(&node.url("/v1/runs"), &alice).await;
    assert_eq!(mine["runs"].as_array().unwrap().len(), 1);
    let (_, theirs) = scene.get(&node.url("/v1/runs"), &bob).await;
    assert_eq!(theirs["runs"], json!([]));
    let (_, usage) = scene.get(&node.url("/v1/usage"), &alice).await;
    assert_eq!(usage["total"]["runs"], 1, "{usage}");
    // Two model turns of 10 + 5 tokens: the replayed one is not paid, or counted, twice.
    assert_eq!(usage["total"]["tokens"], 30, "{usage}");
    // CPU ticks are sampled while the guest runs: this short run may take
    // none (a_run_past_its_cpu_ticks_is_stopped_and_metered counts them).
    assert!(usage["total"]["cpu_ticks"].is_u64(), "{usage}");
    let out = scene.nexo(&["usage", "alice", "--json"]);
    assert!(stdout(&out).contains("\"tokens\":30"), "{}", stdout(&out));

    // A revoked key is refused at once.
    let out = scene.nexo(&["tenant", "key", "bob"]);
    let bob2 = stdout(&out).trim().to_string();
    assert_eq!(scene.get(&node.url("/v1/runs"), &bob2).await.0, StatusCode::OK);
    let out = scene.nexo(&["tenant", "keys", "bob"]);
    let second = stdout(&out).lines().nth(1).unwrap().split('\t').next().unwrap().to_string();
    assert!(scene.nexo(&["tenant", "revoke", &second]).status.success());
    assert_eq!(scene.get(&node.url("/v1/runs"), &bob2).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(scene.get(&node.url("/v1/runs"), &bob).await.0, StatusCode::OK, "the first key still works");

    // The audit log: the decision is there, no key or secret is, and the chain verifies.
    let (_, log) = scene.get(&node.url("/v1/audit"), &alice).await;
    let kinds: Vec<&str> = log["entries"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    let used: Vec<&Value> =
        log["entries"].as_array().unwrap().iter().filter(|e| e["kind"] == "capability.used").collect();
    // The model's one write: asked for (the run suspended), then allowed once approved.
    let verdicts: Vec<(Value, Value, Value)> = used
        .iter()
        .map(|e| serde_json::from_str::<Value>(e["data"].as_str().unwrap()).unwrap())
        .map(|d| (d["tool"].clone(), d["origin"].clone(), d["verdict"].clone()))
        .collect();
    assert_eq!(
        verdicts,
        [
            (json!("write_file"), json!("model"), json!("approval-required")),
            (json!("write_file"), json!("model"), json!("allowed"))
        ],
        "{log}"
    );
    for kind in ["tenant.created", "key.created", "plugin.uploaded", "run.started", "approval.decided"] {
        assert!(kinds.contains(&kind), "{kind} in {kinds:?}");
    }
    let text = log.to_string();
    assert!(!text.contains(&alice) && !text.contains(PROVIDER_KEY), "the audit log holds no key");
    let out = scene.nexo(&["audit", "verify"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("alice: ok"), "{}", stdout(&out));

    // A disabled tenant's keys are refused.
    assert!(scene.nexo(&["tenant", "disable", "bob"]).status.success());
    assert_eq!(scene.get(&node.url("/v1/runs"), &bob).await.0, StatusCode::FORBIDDEN);

    // Nothing the server logged holds a key.
    let log = node.log();
    assert!(!log.contains(&alice) && !log.contains(&bob) && !log.contains(PROVIDER_KEY), "{log}");
    assert!(log.contains("answered"), "requests are logged with their ids: {log}");
    drop(node);

    // An edited entry breaks the chain, and `nexo audit verify` says so.
    tamper(Path::new(&scene.store)).await;
    let out = scene.nexo(&["audit", "verify", "alice"]);
    assert_eq!(out.status.code(), Some(1), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("BROKEN"), "{}", stdout(&out));
}

/// Rewrites one audit entry's data behind the store's back.
async fn tamper(store: &Path) {
    use sqlx::Connection;
    let url = format!("sqlite://{}", store.display());
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let done = sqlx::query("UPDATE audit_log SET data = '{\"decision\":\"denied\"}' WHERE kind = 'approval.decided'")
        .execute(&mut conn)
        .await
        .unwrap();
    assert_eq!(done.rows_affected(), 1);
    conn.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_remembers_and_is_the_tenants_own() {
    let scene = Scene::new(None).await;
    let policy = json!({"models": ["test"]});
    let frank = scene.tenant("frank", Some(policy.clone()));
    let grace = scene.tenant("grace", Some(policy));
    let node = scene.node("a");
    let (_, plugin) = scene.upload(&node, &frank, built::WORKFLOW_PROBE).await;
    let sha = plugin["id"].as_str().unwrap();
    scene.model.push(Reply::text("Nice to meet you, Frank."));
    scene.model.push(Reply::text("Your name is Frank."));
    let prompt = |input: &str| json!({"plugin": sha, "instance": "chat-1", "input": input, "wait": true});
    let (status, first) = scene.post(&node.url("/v1/sessions/prompt"), &frank, prompt("prompt I am Frank")).await;
    assert_eq!(status, StatusCode::OK, "{first}\n{}", node.log());
    assert_eq!(first["run"]["status"], "done", "{first}");
    let id = first["session"]["id"].as_str().unwrap().to_string();
    assert_eq!(first["session"]["instance"], "chat-1");
    let (_, second) = scene.post(&node.url("/v1/sessions/prompt"), &frank, prompt("prompt who am I")).await;
    assert_eq!(second["session"]["id"], id.as_str(), "the same session");
    assert_eq!(second["run"]["status"], "done", "{second}");
    // The second prompt's request carried the first exchange: the session remembers.
    let sent = scene.model.requests()[1].raw_body.clone();
    assert!(sent.contains("I am Frank") && sent.contains("Nice to meet you, Frank."), "{sent}");
    let (_, shown) = scene.get(&node.url(&format!("/v1/sessions/{id}")), &frank).await;
    assert_eq!(shown["runs"].as_array().unwrap().len(), 2, "{shown}");
    assert_eq!(shown["thread"].as_array().unwrap().len(), 4, "two exchanges: {shown}");

    // Grace sees none of it, and cannot delete it.
    let (_, hers) = scene.get(&node.url("/v1/sessions"), &grace).await;
    assert_eq!(hers["sessions"], json!([]));
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let (status, _) = scene.call(method, &node.url(&format!("/v1/sessions/{id}")), Some(&grace), None).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
    let (_, mine) = scene.get(&node.url("/v1/sessions"), &frank).await;
    assert_eq!(mine["sessions"][0]["id"], id.as_str());

    let (status, _) =
        scene.call(reqwest::Method::DELETE, &node.url(&format!("/v1/sessions/{id}")), Some(&frank), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = scene.get(&node.url(&format!("/v1/sessions/{id}")), &frank).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "deleted");
}

/// `[serve] max-plugin-bytes` end to end: a larger upload is refused with the
/// API's own error (413, a code, the limit and the fix), and nothing is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_over_max_plugin_bytes_is_refused_with_the_limit_and_the_fix() {
    let scene = Scene::new(None).await;
    let size = std::fs::metadata(built::TEXT_STATS).unwrap().len();
    let small = std::fs::metadata(built::SPIN).unwrap().len();
    assert!(small < size, "the test needs a plugin smaller than text-stats ({small} >= {size} bytes)");
    let limit = size - 1;
    scene.configure(&format!("[serve]\nmax-plugin-bytes = {limit}\n"));
    let key = scene.tenant("erin", None);
    let node = scene.node("a");
    let (status, refused) = scene.upload(&node, &key, built::TEXT_STATS).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{refused}");
    assert_eq!(refused["error"]["code"], "plugin_too_large", "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains(&limit.to_string()) && message.contains("max-plugin-bytes"), "{message}");
    let (status, plugins) = scene.get(&node.url("/v1/plugins"), &key).await;
    assert_eq!(status, StatusCode::OK, "{plugins}");
    assert_eq!(plugins["plugins"], json!([]), "nothing was stored: {plugins}");
    // Within the limit, the same server takes a plugin.
    let (status, plugin) = scene.upload(&node, &key, built::SPIN).await;
    assert_eq!(status, StatusCode::CREATED, "{plugin}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotas_refuse_with_429_and_retry_after() {
    let scene = Scene::new(None).await;
    let key = scene.tenant("dave", Some(json!({"quotas": {"runs-per-hour": 2}})));
    let node = scene.node("a");
    let (_, plugin) = scene.upload(&node, &key, built::TEXT_STATS).await;
    let body = json!({"plugin": plugin["id"], "input": "a b c", "wait": true});
    for _ in 0..2 {
        let (status, run) = scene.post(&node.url("/v1/runs"), &key, body.clone()).await;
        assert_eq!((status, &run["status"]), (StatusCode::OK, &json!("done")), "{run}");
    }
    let resp = scene.http.post(node.url("/v1/runs")).bearer_auth(&key).json(&body).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    let wait: u64 = resp.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=3600).contains(&wait), "until the next hour: {wait}");
    let refused: Value = resp.json().await.unwrap();
    assert_eq!(refused["error"]["code"], "quota_exceeded");
    assert!(refused["error"]["message"].as_str().unwrap().contains("2 runs this hour"), "{refused}");
    let (_, usage) = scene.get(&node.url("/v1/usage"), &key).await;
    assert_eq!(usage["total"]["runs"], 2, "a refused run is not counted: {usage}");
    assert_eq!(usage["total"]["egress_bytes"], 0, "{usage}");
    // An egress quota with nothing left refuses the same way.
    let key = scene.tenant("dana", Some(json!({"quotas": {"egress-bytes-per-hour": 0}})));
    let (_, plugin) = scene.upload(&node, &key, built::TEXT_STATS).await;
    let body = json!({"plugin": plugin["id"], "input": "a b c", "wait": true});
    let (status, refused) = scene.post(&node.url("/v1/runs"), &key, body).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("egress bytes this hour"), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_instances_share_one_memory_total() {
    let scene = Scene::new(None).await;
    let key = scene.tenant("erin", Some(json!({"quotas": {"memory-mib": 40}})));
    let node = scene.node("a");
    let (_, hog) = scene.upload(&node, &key, built::HOG).await;
    let (_, stats) = scene.upload(&node, &key, built::TEXT_STATS).await;
    // The server's own cap per instance is 256 MiB: the tenant's total stops the hog first.
    let (status, run) =
        scene.post(&node.url("/v1/runs"), &key, json!({"plugin": hog["id"], "input": "eat", "wait": true})).await;
    assert_eq!(status, StatusCode::OK, "{run}");
    let failed = scene.finish(&node, &key, run["id"].as_str().unwrap()).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    let error = failed["error"].as_str().unwrap();
    assert!(error.contains("total of 41943040 bytes") && error.contains("memory-mib"), "{error}");
    // The hog's memory went back to the budget with its instance.
    let (status, run) =
        scene.post(&node.url("/v1/runs"), &key, json!({"plugin": stats["id"], "input": "a b", "wait": true})).await;
    assert_eq!((status, &run["status"]), (StatusCode::OK, &json!("done")), "{run}");
}

/// CPU is metered as the epoch ticks the tenant's guests run for: a
/// spinning run is stopped at its per-run allowance, its ticks are in the
/// usage, and the hour's quota, once used up, refuses the next run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_past_its_cpu_ticks_is_stopped_and_metered() {
    let scene = Scene::new(None).await;
    let quotas = json!({"quotas": {"cpu-ticks-per-run": 20, "cpu-ticks-per-hour": 30}});
    let key = scene.tenant("gina", Some(quotas));
    let node = scene.node("a");
    let (_, spin) = scene.upload(&node, &key, built::SPIN).await;
    let (status, run) =
        scene.post(&node.url("/v1/runs"), &key, json!({"plugin": spin["id"], "input": "go", "wait": true})).await;
    assert_eq!(status, StatusCode::OK, "{run}");
    let failed = scene.finish(&node, &key, run["id"].as_str().unwrap()).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    let error = failed["error"].as_str().unwrap();
    assert!(error.contains("ran for 21 CPU ticks, its allowance of 20"), "{error}");
    let (_, usage) = scene.get(&node.url("/v1/usage"), &key).await;
    assert_eq!(usage["total"]["cpu_ticks"], 21, "{usage}");
    // The second run gets what is left of the hour (9 ticks), and then the hour is used up.
    let (_, run) =
        scene.post(&node.url("/v1/runs"), &key, json!({"plugin": spin["id"], "input": "go", "wait": true})).await;
    let failed = scene.finish(&node, &key, run["id"].as_str().unwrap()).await;
    assert!(failed["error"].as_str().unwrap().contains("its allowance of 9"), "{failed}");
    let (status, refused) =
        scene.post(&node.url("/v1/runs"), &key, json!({"plugin": spin["id"], "input": "go", "wait": true})).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("CPU ticks this hour"), "{refused}");
    threads_put_the_api_before_the_runs(&node);
}

/// After runs have gone, the threads that drove them are nicer than the
/// process, and every other thread (the API's, the store's) asks for a
/// shorter time slice than theirs: a busy guest cannot hold up a request.
fn threads_put_the_api_before_the_runs(node: &Node) {
    // The niceness is the 19th field of `stat`, after the name in parentheses.
    let nice = |dir: &Path| -> i32 {
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap();
        stat.rsplit(')').next().unwrap().split_whitespace().nth(16).unwrap().parse().unwrap()
    };
    let process = PathBuf::from(format!("/proc/{}", node.child.id()));
    // The niceness the process was started with (CI may start it nicer).
    let base = nice(&process);
    let (mut runs, mut others) = (Vec::new(), Vec::new());
    for task in std::fs::read_dir(process.join("task")).unwrap() {
        let task = task.unwrap().path();
        let name = std::fs::read_to_string(task.join("comm")).unwrap().trim().to_string();
        let sched = std::fs::read_to_string(task.join("sched")).unwrap_or_default();
        let slice = sched
            .lines()
            .find(|l| l.starts_with("se.slice"))
            .map(|l| l.split(':').nth(1).unwrap().trim().parse::<u64>().unwrap());
        if name.starts_with("nexo-runs") { &mut runs } else { &mut others }.push((name, nice(&task), slice));
    }
    assert!(!runs.is_empty(), "no nexo-runs threads: {others:?}");
    assert!(others.iter().any(|(n, ..)| n.starts_with("sqlx-sqlite")), "the store's threads: {others:?}");
    for (name, nice, _) in &runs {
        assert_eq!(*nice, (base + nexo::priority::RUN_NICENESS).min(19), "{name}");
    }
    let Some(run_slice) = runs[0].2 else {
        eprintln!("this kernel does not show se.slice: only the niceness was checked");
        return;
    };
    for (name, nice, slice) in &others {
        assert_eq!(*nice, base, "{name}");
        assert!(slice.unwrap() < run_slice, "{name}: {slice:?} against the runs' {run_slice}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_the_server_and_it_says_so() {
    let scene = Scene::new(None).await;
    let mut node = scene.node("a");
    let pid = rustix::process::Pid::from_raw(node.child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = node.child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "nexo serve did not stop: {}", node.log());
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{}", node.log());
    std::thread::sleep(Duration::from_millis(200));
    assert!(node.log().contains("stopping") && node.log().contains("stopped"), "{}", node.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_over_one_postgres_share_tenants_plugins_and_runs() {
    let Some(url) = common::postgres_database("two_nodes_over_one_postgres_share_tenants_plugins_and_runs").await
    else {
        return;
    };
    let scene = Scene::new(Some(url)).await;
    let key = scene.tenant("carol", None);
    let one = scene.node("one");
    let two = scene.node("two");
    let (status, plugin) = scene.upload(&one, &key, built::TEXT_STATS).await;
    assert_eq!(status, StatusCode::CREATED, "{plugin}");
    let sha = plugin["id"].as_str().unwrap();
    // Started on the node that never saw the upload: it takes the plugin from the store.
    let (status, run) =
        scene.post(&two.url("/v1/runs"), &key, json!({"plugin": sha, "input": "one two three", "wait": true})).await;
    assert_eq!(status, StatusCode::OK, "{run}\n{}", two.log());
    let id = run["id"].as_str().unwrap();
    let done = scene.finish(&one, &key, id).await;
    assert_eq!(done["status"], "done", "{done}\n{}\n{}", one.log(), two.log());
    assert!(done["result"].as_str().unwrap().contains('3'), "{done}");
    let (_, listed) = scene.get(&one.url("/v1/runs"), &key).await;
    assert_eq!(listed["runs"][0]["id"], id, "either node answers for the tenant");
}
