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
//! - a plugin uploaded to one node runs on another;
//! - the admin API's every success path, each with its effect in force;
//! - a tenant resumes and cancels its runs over the API;
//! - `[serve] run-timeout-secs` stops a run with the typed error;
//! - a node killed mid-run is replaced by another that finishes the run,
//!   with no journaled effect twice and no event lost.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nexo_model::mock::{Gate, MockToolCall, Reply};
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
        (Method::GET, format!("/v1/runs/{run}/timeline"), None),
        (Method::POST, format!("/v1/runs/{run}/approve"), Some(json!({}))),
        (Method::POST, format!("/v1/runs/{run}/deny"), Some(json!({}))),
        (Method::POST, format!("/v1/runs/{run}/resume"), Some(json!({}))),
        (Method::POST, format!("/v1/runs/{run}/cancel"), Some(json!({}))),
        (Method::POST, format!("/v1/runs/{run}/signals/go"), Some(json!({}))),
        (Method::GET, "/v1/schedules/snothing".into(), None),
        (Method::DELETE, "/v1/schedules/snothing".into(), None),
        (Method::POST, "/v1/schedules/snothing/pause".into(), Some(json!({}))),
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

    // Its timeline: the pass that suspended, the approval wait, the pass
    // that finished; each turn's tokens, the write with its full arguments
    // and result; no key.
    let (status, timeline) = scene.get(&node.url(&format!("/v1/runs/{id}/timeline")), &alice).await;
    assert_eq!(status, StatusCode::OK, "{timeline}");
    let passes = timeline["passes"].as_array().unwrap();
    let outcomes: Vec<&str> = passes.iter().map(|p| p["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["suspended", "done"], "{timeline}");
    assert!(passes.iter().all(|p| p["owner"].as_str().is_some_and(|o| o.contains(':'))), "{timeline}");
    let steps: Vec<&Value> = passes.iter().flat_map(|p| p["steps"].as_array().unwrap()).collect();
    let turns: Vec<&&Value> = steps.iter().filter(|s| s["kind"] == "turn").collect();
    assert_eq!(turns.len(), 2, "each turn once, in the pass that paid for it: {timeline}");
    assert_eq!((&turns[0]["finish"], &turns[1]["finish"]), (&json!("tool_use"), &json!("end_turn")), "{timeline}");
    assert!(turns.iter().all(|t| t["input_tokens"] == 10 && t["output_tokens"] == 5), "{timeline}");
    assert!(turns.iter().all(|t| t["duration_ms"].as_i64().is_some_and(|d| d >= 0)), "{timeline}");
    assert_eq!((&timeline["input_tokens"], &timeline["output_tokens"]), (&json!(20), &json!(10)));
    let write = steps.iter().find(|s| s["kind"] == "tool_call").expect("the write");
    assert_eq!(
        (&write["name"], &write["id"], &write["verdict"]),
        (&json!("write_file"), &json!("c1"), &json!("allowed"))
    );
    assert_eq!(write["arguments"], json!({"path": "notes.txt", "content": "hi from alice"}), "{write}");
    // Its result is the journal's entry (the tool's value), not the event's one-line summary.
    assert!(write["seq"].is_u64(), "linked to its journal entry: {write}");
    assert_eq!(
        write["result"].as_str().map(|r| r.split_whitespace().collect::<String>()),
        Some(r#"["notes.txt",13]"#.into())
    );
    let writes = steps.iter().filter(|s| s["name"] == "write_file" || s["name"] == "write-file").count();
    assert_eq!(writes, 1, "the write is listed once: {timeline}");
    let waits = timeline["waits"].as_array().unwrap();
    let approval = waits.iter().find(|w| w["kind"] == "approval").expect("the approval wait");
    assert_eq!((&approval["tool"], &approval["decision"]), (&json!("write-file"), &json!("approved")), "{timeline}");
    assert!(approval["duration_ms"].as_i64().is_some(), "{approval}");
    assert!(!timeline.to_string().contains(PROVIDER_KEY) && !timeline.to_string().contains(&alice));

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

/// The workspace of tenant `tenant` (its id) under node `node`'s data directory.
fn workspace(scene: &Scene, node: &str, tenant: &str) -> PathBuf {
    scene.data(node).join("tenants").join(tenant).join("workspace")
}

/// The admin API's success paths, each checked by its effect: the key a
/// new tenant is answered with works, a new key works and a revoked one is
/// refused, a disabled tenant is refused until it is enabled, and a
/// narrower policy binds the next run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_creates_and_governs_a_tenant_each_change_in_force() {
    let scene = Scene::new(None).await;
    let out = scene.nexo(&["tenant", "admin-key"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let admin = stdout(&out).trim().to_string();
    let node = scene.node("a");
    let writer = json!({"allow": ["write"], "mode": "auto", "sandboxes": ["local"]});
    let (status, created) =
        scene.post(&node.url("/v1/tenants"), &admin, json!({"name": "zoe", "policy": writer})).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!((&created["tenant"]["name"], &created["tenant"]["disabled"]), (&json!("zoe"), &json!(false)));
    let tenant = created["tenant"]["id"].as_str().unwrap().to_string();
    let first = created["key"]["key"].as_str().unwrap().to_string();
    assert!(first.starts_with("nexo_sk_"), "{created}");
    let (status, listed) = scene.get(&node.url("/v1/tenants"), &admin).await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert_eq!(listed["tenants"].as_array().unwrap().iter().filter(|t| t["id"] == tenant.as_str()).count(), 1);

    // The first key works: the tenant uploads and runs within its policy, which lets it write.
    let (status, plugin) = scene.upload(&node, &first, built::WORKFLOW_PROBE).await;
    assert_eq!(status, StatusCode::CREATED, "{plugin}");
    let run = |key: String, input: &str| {
        let body = json!({"plugin": plugin["id"], "input": input, "wait": true});
        let url = node.url("/v1/runs");
        let scene = &scene;
        async move { scene.post(&url, &key, body).await }
    };
    let (status, wrote) = run(first.clone(), "write a.txt one").await;
    assert_eq!((status, &wrote["status"]), (StatusCode::OK, &json!("done")), "{wrote}\n{}", node.log());
    assert_eq!(std::fs::read_to_string(workspace(&scene, "a", &tenant).join("a.txt")).unwrap(), "one");

    // A new key works; revoked, it is refused at once, and the first key still works.
    let (status, issued) = scene.post(&node.url("/v1/tenants/zoe/keys"), &admin, json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{issued}");
    let second = issued["key"].as_str().unwrap().to_string();
    assert_ne!(second, first);
    let (status, runs) = scene.get(&node.url("/v1/runs"), &second).await;
    assert_eq!((status, &runs["runs"][0]["id"]), (StatusCode::OK, &wrote["id"]), "the tenant's own runs: {runs}");
    let key_id = issued["id"].as_str().unwrap();
    let (status, revoked) =
        scene.call(reqwest::Method::DELETE, &node.url(&format!("/v1/keys/{key_id}")), Some(&admin), None).await;
    assert_eq!(status, StatusCode::OK, "{revoked}");
    assert!(revoked["revoked_ms"].as_i64().unwrap() > 0, "{revoked}");
    assert_eq!(scene.get(&node.url("/v1/runs"), &second).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(run(second.clone(), "write x.txt x").await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(scene.get(&node.url("/v1/runs"), &first).await.0, StatusCode::OK);

    // Disabled, every key of the tenant is refused; enabled, it works again.
    let (status, disabled) = scene.post(&node.url("/v1/tenants/zoe/disable"), &admin, json!({})).await;
    assert_eq!((status, &disabled["disabled"]), (StatusCode::OK, &json!(true)), "{disabled}");
    assert_eq!(scene.get(&node.url("/v1/runs"), &first).await.0, StatusCode::FORBIDDEN);
    assert_eq!(run(first.clone(), "write b.txt b").await.0, StatusCode::FORBIDDEN);
    let (status, enabled) = scene.post(&node.url("/v1/tenants/zoe/enable"), &admin, json!({})).await;
    assert_eq!((status, &enabled["disabled"]), (StatusCode::OK, &json!(false)), "{enabled}");
    let (status, again) = run(first.clone(), "write b.txt b").await;
    assert_eq!((status, &again["status"]), (StatusCode::OK, &json!("done")), "{again}");
    assert!(workspace(&scene, "a", &tenant).join("b.txt").exists(), "enabled, it runs and writes again");

    // A policy without `write`: the next run may not write, nor ask to.
    let (status, narrowed) = scene
        .call(
            reqwest::Method::PUT,
            &node.url("/v1/tenants/zoe/policy"),
            Some(&admin),
            Some(json!({"sandboxes": ["local"]})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{narrowed}");
    assert_eq!(narrowed["policy"]["allow"], json!([]), "{narrowed}");
    let (status, refused) = scene
        .post(
            &node.url("/v1/runs"),
            &first,
            json!({"plugin": plugin["id"], "input": "write c.txt c", "allow": ["write"]}),
        )
        .await;
    assert_eq!((status, &refused["error"]["code"]), (StatusCode::FORBIDDEN, &json!("beyond_policy")), "{refused}");
    let (status, denied) = run(first.clone(), "write c.txt c").await;
    assert_eq!((status, &denied["status"]), (StatusCode::OK, &json!("done")), "{denied}");
    assert!(denied["result"].as_str().unwrap().starts_with("error:"), "the write was refused: {denied}");
    assert!(!workspace(&scene, "a", &tenant).join("c.txt").exists(), "nothing was written");
    let started = scene.audit(&node, &first, "run.started").await;
    assert_eq!(started.last().unwrap()["allow"], json!([]), "{started:?}");

    // Each change is in the tenant's audit log.
    let (_, log) = scene.get(&node.url("/v1/audit"), &first).await;
    let kinds: Vec<&str> = log["entries"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    for kind in ["tenant.created", "key.created", "key.revoked", "tenant.disabled", "tenant.enabled", "policy.changed"]
    {
        assert!(kinds.contains(&kind), "{kind} in {kinds:?}");
    }
}

/// A tenant goes on with its runs over the API: a run suspended for an
/// input is resumed with one and finishes; a run waiting on its model is
/// cancelled, ends `cancelled` (its stream says so) and its slot serves the
/// next run at once. Another tenant can do none of it (404), and a run that
/// has ended is not resumed or cancelled again (409).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_resumes_and_cancels_its_runs_over_the_api() {
    let scene = Scene::new(None).await;
    let key = scene.tenant("hal", Some(json!({"models": ["test"]})));
    let other = scene.tenant("ida", None);
    // One run slot: a cancelled run that held on to it would hold up the next.
    let node = scene.node_with("a", &["--max-in-flight", "1"]);
    let (_, plugin) = scene.upload(&node, &key, built::WORKFLOW_PROBE).await;
    let start = |input: &str, wait: bool| json!({"plugin": plugin["id"], "input": input, "wait": wait});
    let verb = |id: &str, verb: &str| node.url(&format!("/v1/runs/{id}/{verb}"));

    let (status, waiting) = scene.post(&node.url("/v1/runs"), &key, start("suspend a number please", true)).await;
    assert_eq!((status, &waiting["status"]), (StatusCode::OK, &json!("suspended")), "{waiting}\n{}", node.log());
    let id = waiting["id"].as_str().unwrap().to_string();
    for action in ["resume", "cancel"] {
        let (status, answer) = scene.post(&verb(&id, action), &other, json!({})).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "another tenant's {action}: {answer}");
    }
    assert_eq!(scene.settle(&node, &key, &id).await["status"], "suspended", "the other tenant changed nothing");
    let (status, resumed) = scene.post(&verb(&id, "resume"), &key, json!({"input": 42})).await;
    assert_eq!(status, StatusCode::OK, "{resumed}");
    let done = scene.finish(&node, &key, &id).await;
    assert_eq!((&done["status"], &done["result"]), (&json!("done"), &json!("resumed with 42")), "{done}");
    for action in ["resume", "cancel"] {
        let (status, answer) = scene.post(&verb(&id, action), &key, json!({})).await;
        assert_eq!(status, StatusCode::CONFLICT, "{action} of a run that is done: {answer}");
    }

    // A run waiting on its model, cancelled.
    scene.model.push(Reply::text("too late").with_delay(Duration::from_secs(60)));
    let (status, held) = scene.post(&node.url("/v1/runs"), &key, start("prompt take your time", false)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{held}");
    let held = held["id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    while scene.model.requests().is_empty() {
        assert!(Instant::now() < deadline, "the run never asked its model\n{}", node.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, answer) = scene.post(&verb(&held, "cancel"), &other, json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "another tenant's cancel: {answer}");
    assert_eq!(scene.get(&node.url(&format!("/v1/runs/{held}")), &key).await.1["status"], "running");
    let (status, cancelled) = scene.post(&verb(&held, "cancel"), &key, json!({})).await;
    assert_eq!((status, &cancelled["status"]), (StatusCode::OK, &json!("cancelled")), "{cancelled}");
    let events = scene.events(&node, &key, &held, None).await;
    let kinds: Vec<&str> = events.iter().map(|(_, kind, _)| kind.as_str()).collect();
    assert!(kinds.contains(&"cancelled"), "{kinds:?}");
    assert_eq!(events.last().unwrap().2["status"], "cancelled", "{events:?}");
    // Its one slot is free: the next run is served at once.
    let at = Instant::now();
    let (status, next) = scene.post(&node.url("/v1/runs"), &key, start("suspend again", true)).await;
    assert_eq!((status, &next["status"]), (StatusCode::OK, &json!("suspended")), "{next}");
    assert!(at.elapsed() < Duration::from_secs(10), "the cancelled run held its slot for {:?}", at.elapsed());
    for action in ["resume", "cancel"] {
        let (status, answer) = scene.post(&verb(&held, action), &key, json!({})).await;
        assert_eq!(status, StatusCode::CONFLICT, "{action} of a cancelled run: {answer}");
    }
    let resumed = scene.audit(&node, &key, "run.resumed").await;
    let cancelled = scene.audit(&node, &key, "run.cancelled").await;
    assert_eq!((resumed.len(), cancelled.len()), (1, 1), "only what was done is audited");
}

/// A tenant signals its run over the API: a run waiting for the signal
/// (suspended, holding nothing) wakes on it and returns its data; another
/// tenant cannot signal it (404), bad data is refused (400), a finished run
/// takes no signal (409), and each signal sent is audited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_signals_its_waiting_run_over_the_api() {
    let scene = Scene::new(None).await;
    let key = scene.tenant("sal", Some(json!({"models": ["test"]})));
    let other = scene.tenant("tom", None);
    let node = scene.node("a");
    let (_, plugin) = scene.upload(&node, &key, built::WORKFLOW_PROBE).await;
    let body = json!({"plugin": plugin["id"], "input": "signal approve", "wait": true});
    let (status, waiting) = scene.post(&node.url("/v1/runs"), &key, body).await;
    assert_eq!((status, &waiting["status"]), (StatusCode::OK, &json!("suspended")), "{waiting}\n{}", node.log());
    assert_eq!(waiting["signal_wait"], "approve", "{waiting}");
    let id = waiting["id"].as_str().unwrap().to_string();
    let url = node.url(&format!("/v1/runs/{id}/signals/approve"));

    let (status, answer) = scene.post(&url, &other, json!({"ok": 1})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "another tenant's signal: {answer}");
    let resp = scene.http.post(&url).bearer_auth(&key).body("not json").send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert_eq!(scene.settle(&node, &key, &id).await["status"], "suspended", "nothing woke it");
    let (status, sent) = scene.post(&url, &key, json!({"ok": 1})).await;
    assert_eq!((status, &sent["name"]), (StatusCode::ACCEPTED, &json!("approve")), "{sent}");
    let done = scene.finish(&node, &key, &id).await;
    assert_eq!((&done["status"], &done["result"]), (&json!("done"), &json!(r#"signal approve: {"ok":1}"#)), "{done}");
    let (status, answer) = scene.post(&url, &key, json!(2)).await;
    assert_eq!(status, StatusCode::CONFLICT, "a finished run takes no signal: {answer}");
    assert_eq!(scene.audit(&node, &key, "run.signalled").await.len(), 1, "only what was sent is audited");
}

/// A tenant's run starts its own plugin as a child run: the child is the
/// tenant's, linked to its parent, shown in the parent's tree, and its end
/// resumes the parent; another tenant's plugin cannot be named as an agent,
/// and another tenant sees nothing of either run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_run_starts_its_own_plugin_as_a_child_run() {
    let scene = Scene::new(None).await;
    let key = scene.tenant("cal", Some(json!({"models": ["test"]})));
    let other = scene.tenant("dee", None);
    let node = scene.node("a");
    let (_, plugin) = scene.upload(&node, &key, built::WORKFLOW_PROBE).await;
    let (_, theirs) = scene.upload(&node, &other, built::HELLO).await;
    let refused = json!({"plugin": plugin["id"], "input": "time", "agents": {"helper": theirs["id"]}});
    let (status, answer) = scene.post(&node.url("/v1/runs"), &key, refused).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "another tenant's plugin: {answer}");
    let bad = json!({"plugin": plugin["id"], "input": "time", "agents": {"no spaces": plugin["id"]}});
    assert_eq!(scene.post(&node.url("/v1/runs"), &key, bad).await.0, StatusCode::UNPROCESSABLE_ENTITY);

    let body = json!({"plugin": plugin["id"], "input": "child helper time", "agents": {"helper": plugin["id"]}});
    let (status, started) = scene.post(&node.url("/v1/runs"), &key, body).await;
    assert!(status.is_success(), "{started}\n{}", node.log());
    let id = started["id"].as_str().unwrap().to_string();
    let done = scene.finish(&node, &key, &id).await;
    assert_eq!(done["status"], "done", "{done}\n{}", node.log());
    assert!(done["result"].as_str().unwrap_or_default().starts_with("child done: "), "{done}");
    let child = &done["children"][0];
    assert_eq!((&child["depth"], &child["status"], &child["agent"]), (&json!(1), &json!("done"), &json!("helper")));
    let child_url = node.url(&format!("/v1/runs/{}", child["id"].as_str().unwrap()));
    let (status, shown) = scene.get(&child_url, &key).await;
    assert_eq!((status, &shown["parent"]), (StatusCode::OK, &json!(id)), "{shown}");
    assert_eq!(scene.get(&child_url, &other).await.0, StatusCode::NOT_FOUND, "another tenant's child");
}

/// A tenant schedules a run over the API: each occurrence starts one run
/// of its own, audited; a request beyond its policy, with a bad expression
/// or firing more than once a minute is refused; another tenant sees
/// nothing of it; a paused schedule starts nothing; a deleted one is gone,
/// its runs stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_schedules_runs_over_the_api() {
    let scene = Scene::new(None).await;
    let key = scene.tenant("una", Some(json!({"models": ["test"]})));
    let other = scene.tenant("vic", None);
    let node = scene.node("a");
    let (_, plugin) = scene.upload(&node, &key, built::WORKFLOW_PROBE).await;
    let url = node.url("/v1/schedules");
    let request = |cron: &str, run: Value| json!({"cron": cron, "timezone": "Europe/Paris", "run": run});
    let run = json!({"plugin": plugin["id"], "input": "time"});

    let (status, refused) = scene.post(&url, &key, request("every second", run.clone())).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap_or_default().contains("five fields"), "{refused}");
    let (status, refused) = scene.post(&url, &key, request("* * * * * *", run.clone())).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "every second: {refused}");
    assert!(refused["error"]["message"].as_str().unwrap_or_default().contains("once a minute"), "{refused}");
    let wider = json!({"plugin": plugin["id"], "input": "time", "allow": ["shell"]});
    let (status, refused) = scene.post(&url, &key, request("* * * * *", wider)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "a schedule is within the policy: {refused}");

    let (status, schedule) = scene.post(&url, &key, request("* * * * *", run)).await;
    assert_eq!(status, StatusCode::CREATED, "{schedule}");
    assert_eq!((&schedule["timezone"], &schedule["missed"]), (&json!("Europe/Paris"), &json!("skip")));
    let id = schedule["id"].as_str().unwrap().to_string();
    let one = node.url(&format!("/v1/schedules/{id}"));
    assert_eq!(scene.get(&one, &other).await.0, StatusCode::NOT_FOUND, "another tenant's schedule");
    assert_eq!(scene.get(&url, &other).await.1["schedules"], json!([]));

    // Its minute comes now (rather than the test waiting for it).
    let store = nexo_store::SqliteStore::open(Path::new(&scene.store)).await.unwrap();
    nexo_store::Schedules::set_schedule_paused(&store, &id, false, nexo_store::now_ms()).await.unwrap();
    store.close().await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let started = loop {
        let (_, shown) = scene.get(&one, &key).await;
        if shown["started"].as_i64().unwrap_or(0) >= 1 || Instant::now() > deadline {
            break shown;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(started["started"].as_i64().unwrap_or(0) >= 1, "{started}\n{}", node.log());
    assert!(started["next_ms"].as_i64().unwrap() % 60_000 == 0, "on to a whole minute: {started}");
    let last = started["last_run"].as_str().unwrap().to_string();
    let (status, ran) = scene.get(&node.url(&format!("/v1/runs/{last}")), &key).await;
    assert_eq!(status, StatusCode::OK, "the scheduled run is the tenant's: {ran}");
    assert!(!scene.audit(&node, &key, "schedule.added").await.is_empty());
    assert!(scene.audit(&node, &key, "run.started").await.iter().any(|e| e["schedule"] == json!(id)));

    let (status, paused) = scene.post(&node.url(&format!("/v1/schedules/{id}/pause")), &key, json!({})).await;
    assert_eq!((status, &paused["paused"]), (StatusCode::OK, &json!(true)), "{paused}");
    let count = scene.get(&one, &key).await.1["started"].clone();
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(scene.get(&one, &key).await.1["started"], count, "a paused schedule starts nothing");

    let resp = scene.http.delete(&one).bearer_auth(&other).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    let resp = scene.http.delete(&one).bearer_auth(&key).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    assert_eq!(scene.get(&one, &key).await.0, StatusCode::NOT_FOUND);
    assert_eq!(scene.get(&node.url(&format!("/v1/runs/{last}")), &key).await.0, StatusCode::OK, "its runs stay");
}

/// A run's event stream says a model turn has started while the model
/// works: the turn's answer is held until the stream has shown
/// `turn_started`, and the run is still running then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_shows_a_turn_start_while_the_model_works() {
    let scene = Scene::new(None).await;
    let key = scene.tenant("ned", Some(json!({"models": ["test"]})));
    let node = scene.node("a");
    let (_, plugin) = scene.upload(&node, &key, built::WORKFLOW_PROBE).await;
    let gate = Gate::new();
    scene.model.push(Reply::text("worth the wait").held_by(&gate));
    let body = json!({"plugin": plugin["id"], "input": "prompt take your time", "wait": false});
    let (status, run) = scene.post(&node.url("/v1/runs"), &key, body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{run}");
    let id = run["id"].as_str().unwrap().to_string();
    let followed = follow(&scene, &node, &key, &id);
    let deadline = Instant::now() + Duration::from_secs(60);
    let text = loop {
        let text = followed.lock().unwrap().clone();
        if whole_events(&text).iter().any(|(_, kind)| kind == "turn_started") {
            break text;
        }
        assert!(Instant::now() < deadline, "the stream showed no turn start: {text}\n{}", node.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(text.contains(r#""data":{"event":"turn-started","turn":1}"#), "{text}");
    assert_eq!(scene.get(&node.url(&format!("/v1/runs/{id}")), &key).await.1["status"], "running");
    gate.open();
    let done = scene.finish(&node, &key, &id).await;
    assert_eq!((&done["status"], &done["result"]), (&json!("done"), &json!("worth the wait")), "{done}");
    let kinds: Vec<String> = scene.events(&node, &key, &id, None).await.into_iter().map(|(_, kind, _)| kind).collect();
    let at = |kind: &str| kinds.iter().position(|k| k == kind);
    assert!(matches!((at("turn_started"), at("done")), (Some(a), Some(b)) if a < b), "{kinds:?}");
}

/// `[serve] run-timeout-secs` end to end: a spinning guest, and one
/// waiting on a model turn that does not come in time, are stopped at the
/// deadline and fail with its typed error; the failed run, resumed, asks
/// its model again and finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_past_run_timeout_secs_fails_with_the_deadline_and_a_resume_finishes_it() {
    let scene = Scene::new(None).await;
    scene.configure("[serve]\nrun-timeout-secs = 2\n");
    let key = scene.tenant("kai", Some(json!({"models": ["test"]})));
    let node = scene.node("a");
    let (_, spin) = scene.upload(&node, &key, built::SPIN).await;
    let at = Instant::now();
    let (status, run) =
        scene.post(&node.url("/v1/runs"), &key, json!({"plugin": spin["id"], "input": "go", "wait": true})).await;
    assert_eq!(status, StatusCode::OK, "{run}");
    let failed = scene.finish(&node, &key, run["id"].as_str().unwrap()).await;
    let took = at.elapsed();
    assert_eq!(failed["status"], "failed", "{failed}");
    let error = failed["error"].as_str().unwrap();
    assert!(error.contains("was stopped in `run` after its 2 s deadline"), "{error}");
    assert!(error.contains("run-timeout-secs"), "the fix a tenant's operator can make: {error}");
    assert!(!error.contains("--timeout"), "no flag a tenant cannot pass: {error}");
    assert!(took >= Duration::from_secs(2), "stopped before its deadline: {took:?}");

    let (_, probe) = scene.upload(&node, &key, built::WORKFLOW_PROBE).await;
    scene.model.push(Reply::text("too late").with_delay(Duration::from_secs(30)));
    scene.model.push(Reply::text("in time"));
    let body = json!({"plugin": probe["id"], "input": "!prompt answer me", "wait": true});
    let (status, run) = scene.post(&node.url("/v1/runs"), &key, body).await;
    assert_eq!(status, StatusCode::OK, "{run}");
    let id = run["id"].as_str().unwrap();
    let failed = scene.finish(&node, &key, id).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert!(failed["error"].as_str().unwrap().contains("after its 2 s deadline"), "{failed}");
    assert_eq!(scene.model.requests().len(), 1, "a run stopped at its deadline is not retried");
    let (status, resumed) = scene.post(&node.url(&format!("/v1/runs/{id}/resume")), &key, json!({})).await;
    assert_eq!(status, StatusCode::OK, "{resumed}");
    // The queued retry leaves it failed a moment: wait for it to end again.
    let deadline = Instant::now() + Duration::from_secs(60);
    let done = loop {
        let (_, run) = scene.get(&node.url(&format!("/v1/runs/{id}")), &key).await;
        if run["status"] == "done" || run["status"] == "failed" && run["updated_ms"] != failed["updated_ms"] {
            break run;
        }
        assert!(Instant::now() < deadline, "the resumed run did not end: {run}\n{}", node.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!((&done["status"], &done["result"]), (&json!("done"), &json!("in time")), "{done}\n{}", node.log());
    assert_eq!(scene.model.requests().len(), 2, "the turn cut off was asked again, once");
}

/// The run's SSE stream on `node`, read in the background until the node
/// goes away: the text it delivered.
fn follow(scene: &Scene, node: &Node, key: &str, id: &str) -> std::sync::Arc<std::sync::Mutex<String>> {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let request = scene.http.get(node.url(&format!("/v1/runs/{id}/events"))).bearer_auth(key);
    let text = seen.clone();
    tokio::spawn(async move {
        let Ok(mut resp) = request.send().await else { return };
        while let Ok(Some(chunk)) = resp.chunk().await {
            text.lock().unwrap().push_str(&String::from_utf8_lossy(&chunk));
        }
    });
    seen
}

/// The (id, kind) of each whole event in a stream's text.
fn whole_events(text: &str) -> Vec<(String, String)> {
    let whole = &text[..text.rfind("\n\n").map_or(0, |at| at + 2)];
    whole
        .split("\n\n")
        .filter(|block| !block.trim().is_empty() && !block.starts_with(':'))
        .map(|block| {
            let field = |name: &str| {
                block.lines().find_map(|l| l.strip_prefix(&format!("{name}: ")).map(str::to_string)).unwrap_or_default()
            };
            (field("id"), field("event"))
        })
        .collect()
}

/// A node killed mid-run is replaced: two nodes over one PostgreSQL, the
/// run's node killed (SIGKILL) while it waits on a model turn, and the other
/// takes the run over once its lease lapses and finishes it. Each step's
/// shell append happened once across both nodes' workspaces, each model
/// turn was asked once but the one in flight at the kill, and a client that
/// followed the events on the dead node goes on from its last event on the
/// other, with nothing missing and nothing twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_node_is_killed_is_finished_by_another_with_no_effect_twice() {
    const STEPS: usize = 4;
    const HELD: usize = 2;
    let Some(url) = common::postgres_database("a_run_whose_node_is_killed_is_finished_by_another").await else {
        return;
    };
    let scene = Scene::new(Some(url)).await;
    let policy = json!({"allow": ["shell"], "mode": "auto", "sandboxes": ["local"], "models": ["test"]});
    let key = scene.tenant("lea", Some(policy));
    // Step HELD's first asking outlasts the test: node one dies waiting on it,
    // and node two, asking it again, gets the next reply.
    for i in 0..STEPS {
        if i == HELD {
            scene.model.push(Reply::text("never delivered").with_delay(Duration::from_secs(600)));
        }
        scene.model.push(Reply::text(format!("answer {i}")).with_delay(Duration::from_millis(50)));
    }
    let script: Vec<String> =
        (0..STEPS).map(|i| format!("checkpoint c{i} step {i}; shell echo {i} >> ledger.txt")).collect();
    let mut one = scene.node_with("one", &["--lease-secs", "2"]);
    let (_, plugin) = scene.upload(&one, &key, built::WORKFLOW_PROBE).await;
    let (status, run) =
        scene.post(&one.url("/v1/runs"), &key, json!({"plugin": plugin["id"], "input": script.join("; ")})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{run}");
    let id = run["id"].as_str().unwrap().to_string();
    let followed = follow(&scene, &one, &key, &id);
    let deadline = Instant::now() + Duration::from_secs(60);
    while scene.model.requests().len() <= HELD {
        assert!(Instant::now() < deadline, "the run never reached step {HELD}\n{}", one.log());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A client following on node one has seen the first steps (its stream reads the store
    // at most 2 s apart).
    while !whole_events(&followed.lock().unwrap()).iter().any(|(_, kind)| kind == "checkpoint") {
        assert!(Instant::now() < deadline, "node one's stream showed no step\n{}", one.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The other node is up before the kill; the run is node one's until its lease lapses.
    let two = scene.node_with("two", &["--lease-secs", "2"]);
    let (_, before) = scene.get(&two.url(&format!("/v1/runs/{id}")), &key).await;
    assert_eq!(before["status"], "running", "{before}");
    one.child.kill().unwrap(); // SIGKILL
    one.child.wait().unwrap();
    let killed = Instant::now();

    let done = scene.finish(&two, &key, &id).await;
    assert_eq!(done["status"], "done", "{done}\n{}", two.log());
    eprintln!("node two finished the run {:?} after the kill", killed.elapsed());
    let answer = done["result"].as_str().unwrap();
    for i in 0..STEPS {
        assert!(answer.contains(&format!("answer {i}")), "{answer}");
    }
    assert!(!answer.contains("never delivered"), "{answer}");
    // Model turns: each step's once, but the one in flight at the kill (asked again by node two).
    let prompts = common::prompts(&scene.model);
    let asked = |i: usize| prompts.iter().filter(|p| **p == format!("step {i}")).count();
    for i in 0..STEPS {
        assert_eq!(asked(i), if i == HELD { 2 } else { 1 }, "step {i}: {prompts:?}");
    }
    // Shell effects: steps before the kill on node one, the rest on node two, each once.
    let tenant = std::fs::read_dir(scene.data("two").join("tenants")).unwrap().next().unwrap().unwrap().file_name();
    let ledger = |node: &str| {
        let path = workspace(&scene, node, &tenant.to_string_lossy()).join("ledger.txt");
        std::fs::read_to_string(path).unwrap_or_default()
    };
    let (first, second) = (ledger("one"), ledger("two"));
    let lines: Vec<&str> = first.lines().chain(second.lines()).collect();
    let expected: Vec<String> = (0..STEPS).map(|i| i.to_string()).collect();
    assert_eq!(lines, expected, "each append once: node one {first:?}, node two {second:?}");
    assert_eq!(first.lines().count(), HELD, "node one did the steps before its turn was held");

    // Events: what the dead node delivered, then the rest from the other.
    let delivered = whole_events(&followed.lock().unwrap());
    let last = delivered.last().unwrap().0.clone();
    let rest = scene.events(&two, &key, &id, Some(&last)).await;
    let all = scene.events(&two, &key, &id, None).await;
    let joined: Vec<(String, String)> =
        delivered.into_iter().chain(rest.into_iter().map(|(i, kind, _)| (i, kind))).collect();
    let whole: Vec<(String, String)> = all.iter().map(|(i, kind, _)| (i.clone(), kind.clone())).collect();
    assert_eq!(joined, whole, "nothing missing, nothing twice");
    let checkpoints: Vec<&Value> = all.iter().filter(|(_, kind, _)| kind == "checkpoint").map(|(_, _, d)| d).collect();
    assert_eq!(checkpoints.len(), STEPS, "each checkpoint once: {checkpoints:?}");
}
