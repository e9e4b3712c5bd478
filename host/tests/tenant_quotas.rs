//! A tenant trying to spend past its quotas, and to slow another tenant
//! with runs it cancelled, against a real `nexo serve` (issue 36, items 3
//! and 4):
//!
//! - suspended runs resumed after the hour's tokens are spent are refused
//!   (429) and spend nothing;
//! - one run cannot get a fresh token budget by prompting again;
//! - approvals and denials are refused once the hour is spent, and decide
//!   nothing;
//! - resuming suspended runs cannot pass `concurrent-runs`;
//! - a job queued before the hour was spent waits, and says why;
//! - a cancelled spinning guest stops at once, and another tenant's run is
//!   not held up by cancelled spinners;
//! - a tenant's `cpu-cores` share slows its spinning guest to that share.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::time::{Duration, Instant};

use nexo_model::mock::Reply;
use nexo_tests as built;
use reqwest::StatusCode;
use serde_json::{Value, json};

mod common;

use common::Node;
use common::scene::Scene;

/// A tenant whose agents may prompt the operator's `test` model, with
/// `quotas`; the mock model reports 15 tokens a turn.
fn prompting(quotas: Value) -> Value {
    json!({"models": ["test"], "quotas": quotas})
}

/// A POST with its status, its `Retry-After` header and its body.
async fn post(scene: &Scene, node: &Node, path: &str, key: &str, body: Value) -> (StatusCode, Option<u64>, Value) {
    let resp = scene.http.post(node.url(path)).bearer_auth(key).json(&body).send().await.unwrap();
    let status = resp.status();
    let after = resp.headers().get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    let text = resp.text().await.unwrap();
    (status, after, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// Starts a run of `plugin` on `input` and waits until it ends or suspends.
async fn run(scene: &Scene, node: &Node, key: &str, plugin: &str, input: &str) -> Value {
    let body = json!({"plugin": plugin, "input": input, "wait": true});
    let (status, run) = scene.post(&node.url("/v1/runs"), key, body).await;
    assert_eq!(status, StatusCode::OK, "{run}\n{}", node.log());
    scene.settle(node, key, run["id"].as_str().unwrap()).await
}

/// The data of the run's first event of `kind`, read from its event
/// stream as it comes.
async fn event(scene: &Scene, node: &Node, key: &str, id: &str, kind: &str) -> Value {
    let url = node.url(&format!("/v1/runs/{id}/events"));
    let mut resp = scene.http.get(url).bearer_auth(key).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut text = String::new();
    let wanted = format!("event: {kind}\n");
    let read = async {
        loop {
            // Whole blocks only: the last may still be coming.
            let whole = &text[..text.rfind("\n\n").unwrap_or(0)];
            if let Some(block) = whole.split("\n\n").find(|b| b.contains(&wanted)) {
                let data = block.lines().find_map(|l| l.strip_prefix("data: ")).unwrap_or("null");
                let data: Value = serde_json::from_str(data).unwrap();
                return data["data"].clone();
            }
            match resp.chunk().await.unwrap() {
                Some(chunk) => text.push_str(&String::from_utf8_lossy(&chunk)),
                None => panic!("the stream ended without a `{kind}` event: {text}"),
            }
        }
    };
    match tokio::time::timeout(Duration::from_secs(30), read).await {
        Ok(data) => data,
        Err(_) => panic!("no `{kind}` event in 30 s\n{}", node.log()),
    }
}

async fn tokens_used(scene: &Scene, node: &Node, key: &str) -> u64 {
    let (_, usage) = scene.get(&node.url("/v1/usage"), key).await;
    usage["total"]["tokens"].as_u64().unwrap()
}

/// Spends the hour's 40 tokens: three prompts of 15 (the third passes the
/// quota by the one turn under way; a fourth calls no model).
async fn spend_the_hour(scene: &Scene, node: &Node, key: &str, plugin: &str) {
    for _ in 0..4 {
        scene.model.push(Reply::text("spent"));
    }
    let spender = run(scene, node, key, plugin, "prompt a;prompt b;prompt c;prompt d").await;
    assert_eq!(spender["status"], "done", "{spender}");
    assert_eq!(tokens_used(scene, node, key).await, 45);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspended_runs_resumed_after_the_hour_is_spent_are_refused_and_spend_nothing() {
    let scene = Scene::new(None).await;
    let key = scene.tenant("ivy", Some(prompting(json!({"tokens-per-hour": 40}))));
    let node = scene.node("a");
    let (_, plugin) = scene.upload(&node, &key, built::WORKFLOW_PROBE).await;
    let sha = plugin["id"].as_str().unwrap();
    // Five runs suspend before they prompt: none of them has spent anything.
    let mut waiting = Vec::new();
    for _ in 0..5 {
        let run = run(&scene, &node, &key, sha, "suspend later;prompt 1;prompt 2;prompt 3;prompt 4").await;
        assert_eq!(run["status"], "suspended", "{run}");
        waiting.push(run["id"].as_str().unwrap().to_string());
    }
    spend_the_hour(&scene, &node, &key, sha).await;
    let asked = scene.model.requests().len();

    for id in &waiting {
        let (status, after, refused) = post(&scene, &node, &format!("/v1/runs/{id}/resume"), &key, json!({})).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{refused}");
        assert!(after.is_some_and(|s| (1..=3600).contains(&s)), "Retry-After: {after:?}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains("45 model tokens this hour, its quota (40)"), "{message}");
    }
    // A session's prompt is refused the same way.
    let prompt = json!({"plugin": sha, "instance": "chat", "input": "prompt hi"});
    let (status, _, refused) = post(&scene, &node, "/v1/sessions/prompt", &key, prompt).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{refused}");

    // Nothing was queued, so nothing runs later either.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for id in &waiting {
        let (_, run) = scene.get(&node.url(&format!("/v1/runs/{id}")), &key).await;
        assert_eq!(run["status"], "suspended", "{run}");
    }
    assert_eq!(scene.model.requests().len(), asked, "no model request after the hour was spent");
    assert_eq!(tokens_used(&scene, &node, &key).await, 45);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_run_cannot_get_a_fresh_budget_by_prompting_again() {
    let scene = Scene::new(None).await;
    let key = scene.tenant("jack", Some(prompting(json!({"tokens-per-hour": 40}))));
    let node = scene.node("a");
    let (_, plugin) = scene.upload(&node, &key, built::WORKFLOW_PROBE).await;
    for _ in 0..8 {
        scene.model.push(Reply::text("more"));
    }
    let input = (1..=8).map(|n| format!("prompt {n}")).collect::<Vec<_>>().join(";");
    let done = run(&scene, &node, &key, plugin["id"].as_str().unwrap(), &input).await;
    assert_eq!(done["status"], "done", "{done}");
    // One counter for every prompt: 15 + 15 + 15 reaches 40; the other five call no model.
    assert_eq!(scene.model.requests().len(), 3, "{done}");
    assert_eq!(tokens_used(&scene, &node, &key).await, 45);
    let answer = done["result"].as_str().unwrap();
    assert_eq!(answer.lines().filter(|l| *l == "more").count(), 3, "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_and_denials_are_refused_once_the_hour_is_spent() {
    let scene = Scene::new(None).await;
    let policy = json!({
        "allow": ["write"], "mode": "approve", "sandboxes": ["local"], "models": ["test"],
        "quotas": {"tokens-per-hour": 40},
    });
    let key = scene.tenant("kim", Some(policy));
    let node = scene.node("a");
    let (_, plugin) = scene.upload(&node, &key, built::WORKFLOW_PROBE).await;
    let sha = plugin["id"].as_str().unwrap();
    let mut pending = Vec::new();
    for _ in 0..2 {
        let run = run(&scene, &node, &key, sha, "write out.txt x;prompt 1;prompt 2;prompt 3").await;
        assert_eq!(run["status"], "suspended", "{run}");
        assert_eq!(run["approval"]["tool"], "write-file", "{run}");
        pending.push(run["id"].as_str().unwrap().to_string());
    }
    spend_the_hour(&scene, &node, &key, sha).await;
    let asked = scene.model.requests().len();

    for (id, decision) in pending.iter().zip(["approve", "deny"]) {
        // The decision names the call it was shown.
        let (_, run) = scene.get(&node.url(&format!("/v1/runs/{id}")), &key).await;
        let shown = json!({"seq": run["approval"]["seq"], "args-hash": run["approval"]["args_hash"]});
        let (status, after, refused) = post(&scene, &node, &format!("/v1/runs/{id}/{decision}"), &key, shown).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{decision}: {refused}");
        assert!(after.is_some(), "{decision}: Retry-After");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    for id in &pending {
        let (_, run) = scene.get(&node.url(&format!("/v1/runs/{id}")), &key).await;
        assert_eq!(run["status"], "suspended", "{run}");
        assert_eq!(run["approval"]["tool"], "write-file", "still pending, undecided: {run}");
    }
    let (_, audit) = scene.get(&node.url("/v1/audit"), &key).await;
    let decided = audit["entries"].as_array().unwrap().iter().filter(|e| e["kind"] == "approval.decided").count();
    assert_eq!(decided, 0, "a refused decision decides nothing: {audit}");
    assert_eq!(scene.model.requests().len(), asked);
    assert_eq!(tokens_used(&scene, &node, &key).await, 45);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_suspended_runs_cannot_pass_concurrent_runs() {
    let scene = Scene::new(None).await;
    let key = scene.tenant("lou", Some(prompting(json!({"concurrent-runs": 2}))));
    let node = scene.node("a");
    let (_, plugin) = scene.upload(&node, &key, built::WORKFLOW_PROBE).await;
    let sha = plugin["id"].as_str().unwrap();
    let mut waiting = Vec::new();
    for _ in 0..3 {
        let run = run(&scene, &node, &key, sha, "suspend later;prompt slow").await;
        assert_eq!(run["status"], "suspended", "{run}");
        waiting.push(run["id"].as_str().unwrap().to_string());
    }
    // Resumed, each holds its model turn for a while: it runs, or may.
    for _ in 0..3 {
        scene.model.push(Reply::text("slow").with_delay(Duration::from_secs(3)));
    }
    for id in &waiting[..2] {
        let (status, _, resumed) = post(&scene, &node, &format!("/v1/runs/{id}/resume"), &key, json!({})).await;
        assert_eq!(status, StatusCode::OK, "{resumed}");
    }
    // Resumed twice: the second is a conflict, not a spent quota.
    let again = format!("/v1/runs/{}/resume", waiting[0]);
    let (status, _, twice) = post(&scene, &node, &again, &key, json!({})).await;
    assert_eq!((status, &twice["error"]["code"]), (StatusCode::CONFLICT, &json!("already_queued")), "{twice}");
    let third = format!("/v1/runs/{}/resume", waiting[2]);
    let (status, after, refused) = post(&scene, &node, &third, &key, json!({})).await;
    assert_eq!((status, after), (StatusCode::TOO_MANY_REQUESTS, Some(1)), "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("2 runs queued, running or about to resume"), "{message}");
    let (status, _, refused) =
        post(&scene, &node, "/v1/runs", &key, json!({"plugin": sha, "input": "prompt new"})).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{refused}");

    // Once they end, the third goes on.
    for id in &waiting[..2] {
        let done = scene.finish(&node, &key, id).await;
        assert_eq!(done["status"], "done", "{done}");
    }
    let (status, _, resumed) = post(&scene, &node, &third, &key, json!({})).await;
    assert_eq!(status, StatusCode::OK, "{resumed}");
    assert_eq!(scene.finish(&node, &key, &waiting[2]).await["status"], "done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_queued_before_the_hour_was_spent_waits_and_says_why() {
    let scene = Scene::new(None).await;
    let key = scene.tenant("max", Some(prompting(json!({"tokens-per-hour": 40}))));
    // One run at a time: the second waits in the queue behind the first.
    let node = scene.node_with("a", &["--max-in-flight", "1"]);
    let (_, plugin) = scene.upload(&node, &key, built::WORKFLOW_PROBE).await;
    let sha = plugin["id"].as_str().unwrap();
    for _ in 0..4 {
        scene.model.push(Reply::text("spent").with_delay(Duration::from_millis(500)));
    }
    let start = |input: &str| json!({"plugin": sha, "input": input});
    let (status, _, first) = post(&scene, &node, "/v1/runs", &key, start("prompt a;prompt b;prompt c;prompt d")).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{first}");
    // Accepted while the hour still had tokens.
    let (status, _, late) = post(&scene, &node, "/v1/runs", &key, start("prompt late")).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{late}");
    let late = late["id"].as_str().unwrap();
    assert_eq!(scene.finish(&node, &key, first["id"].as_str().unwrap()).await["status"], "done");

    // The worker finds the hour spent when it claims the late run: the run
    // stays queued, and its events say why.
    let held = event(&scene, &node, &key, late, "held").await;
    let (_, shown) = scene.get(&node.url(&format!("/v1/runs/{late}")), &key).await;
    assert_eq!(shown["status"], "queued", "left as it is, not failed: {shown}\n{}", node.log());
    let reason = held["reason"].as_str().unwrap();
    assert!(reason.contains("45 model tokens this hour, its quota (40)"), "{held}");
    assert!(held["until_ms"].as_i64().unwrap() > nexo_store::now_ms(), "it waits for the next hour: {held}");
    assert_eq!(scene.model.requests().len(), 3, "the late run prompted nothing");
    assert_eq!(tokens_used(&scene, &node, &key).await, 45);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_spinner_stops_at_once_and_holds_up_no_one() {
    let scene = Scene::new(None).await;
    let spinner = scene.tenant("nia", Some(json!({"quotas": {"concurrent-runs": 1}})));
    let quiet = scene.tenant("oz", None);
    let node = scene.node_with("a", &["--max-in-flight", "4"]);
    let (_, spin) = scene.upload(&node, &spinner, built::SPIN).await;
    let (_, stats) = scene.upload(&node, &quiet, built::TEXT_STATS).await;
    let ticks = |usage: &Value| usage["total"]["cpu_ticks"].as_u64().unwrap();
    // Five spinners, each cancelled once it runs. A cancelled run holds its
    // place in `concurrent-runs` (one) until its guest has stopped, so each
    // next spinner is accepted only once the last one's guest is gone: a
    // guest that ran on (for 30 s before the fix) would keep it out.
    let began = Instant::now();
    let mut cancelled_at: Option<Instant> = None;
    for n in 0..5u32 {
        let run = loop {
            let (status, _, run) =
                post(&scene, &node, "/v1/runs", &spinner, json!({"plugin": spin["id"], "input": "go"})).await;
            if status == StatusCode::ACCEPTED {
                break run;
            }
            assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "spinner {n}: {run}");
            let since = cancelled_at.unwrap_or(began).elapsed();
            assert!(since < Duration::from_secs(10), "spinner {n}'s place is still taken\n{}", node.log());
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        if let Some(at) = cancelled_at {
            eprintln!("spinner {} stopped within {:?} of its cancel", n.saturating_sub(1), at.elapsed());
        }
        let id = run["id"].as_str().unwrap();
        scene.until(&node, &spinner, id, &["running"]).await;
        let (status, _, cancelled) = post(&scene, &node, &format!("/v1/runs/{id}/cancel"), &spinner, json!({})).await;
        assert_eq!((status, &cancelled["status"]), (StatusCode::OK, &json!("cancelled")), "{cancelled}");
        cancelled_at = Some(Instant::now());
    }
    // The last one too: the tenant's own trivial run gets its place.
    let (_, own_stats) = scene.upload(&node, &spinner, built::TEXT_STATS).await;
    let body = json!({"plugin": own_stats["id"], "input": "a b", "wait": true});
    loop {
        let (status, _, run) = post(&scene, &node, "/v1/runs", &spinner, body.clone()).await;
        if status == StatusCode::OK {
            assert_eq!(run["status"], "done", "{run}");
            break;
        }
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{run}");
        let since = cancelled_at.unwrap_or(began).elapsed();
        assert!(since < Duration::from_secs(10), "spinner 4 still runs after its cancel\n{}", node.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (_, usage) = scene.get(&node.url("/v1/usage"), &spinner).await;
    let metered = ticks(&usage);
    // Stopped, they burn nothing more.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, usage) = scene.get(&node.url("/v1/usage"), &spinner).await;
    assert_eq!(ticks(&usage), metered, "{usage}");

    let at = Instant::now();
    let body = json!({"plugin": stats["id"], "input": "a b c", "wait": true});
    let (status, done) = scene.post(&node.url("/v1/runs"), &quiet, body).await;
    assert_eq!((status, &done["status"]), (StatusCode::OK, &json!("done")), "{done}");
    assert!(at.elapsed() < Duration::from_secs(5), "the quiet tenant's run took {:?}", at.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_stops_a_guest_waiting_in_a_host_call_and_frees_its_slots() {
    let scene = Scene::new(None).await;
    let waiter = scene.tenant("pia", Some(prompting(json!({"concurrent-runs": 1}))));
    let quiet = scene.tenant("oz", None);
    // One worker slot: while the cancelled guest holds it, no one else runs.
    let node = scene.node_with("a", &["--max-in-flight", "1"]);
    let (_, probe) = scene.upload(&node, &waiter, built::WORKFLOW_PROBE).await;
    let (_, stats) = scene.upload(&node, &quiet, built::TEXT_STATS).await;
    // A model turn that does not answer for a minute: no epoch tick reaches
    // a guest waiting for it.
    scene.model.push(Reply::text("late").with_delay(Duration::from_secs(60)));
    let body = json!({"plugin": probe["id"], "input": "prompt 1"});
    let (status, _, run) = post(&scene, &node, "/v1/runs", &waiter, body.clone()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{run}");
    let id = run["id"].as_str().unwrap();
    let at = Instant::now();
    while scene.model.requests().is_empty() {
        assert!(at.elapsed() < Duration::from_secs(30), "the run never prompted\n{}", node.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, _, cancelled) = post(&scene, &node, &format!("/v1/runs/{id}/cancel"), &waiter, json!({})).await;
    assert_eq!((status, &cancelled["status"]), (StatusCode::OK, &json!("cancelled")), "{cancelled}");
    let at = Instant::now();
    let body_quiet = json!({"plugin": stats["id"], "input": "a b c", "wait": true});
    let (status, done) = scene.post(&node.url("/v1/runs"), &quiet, body_quiet).await;
    assert_eq!((status, &done["status"]), (StatusCode::OK, &json!("done")), "{done}");
    assert!(at.elapsed() < Duration::from_secs(5), "the quiet tenant's run took {:?}\n{}", at.elapsed(), node.log());
    eprintln!("the worker slot was free {:?} after the cancel", at.elapsed());
    // Its concurrent-runs slot is free too, once its pass ended.
    loop {
        let (status, _, next) = post(&scene, &node, "/v1/runs", &waiter, body.clone()).await;
        if status == StatusCode::ACCEPTED {
            break;
        }
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{next}");
        assert!(at.elapsed() < Duration::from_secs(5), "the cancelled run still counts: {next}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_taken_by_another_node_stops_the_guest_at_the_next_lease_renewal() {
    let Some(url) = common::postgres_database("a_cancel_taken_by_another_node_stops_the_guest").await else {
        return;
    };
    let scene = Scene::new(Some(url)).await;
    let key = scene.tenant("pia", None);
    // Leases of 3 s, renewed every second.
    let driver = scene.node_with("driver", &["--lease-secs", "3"]);
    let (_, spin) = scene.upload(&driver, &key, built::SPIN).await;
    let (status, _, run) = post(&scene, &driver, "/v1/runs", &key, json!({"plugin": spin["id"], "input": "go"})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{run}");
    let id = run["id"].as_str().unwrap();
    scene.until(&driver, &key, id, &["running"]).await;
    // The other node takes the cancel; only the store tells the driver.
    let other = scene.node_with("other", &["--lease-secs", "3"]);
    let (status, _, cancelled) = post(&scene, &other, &format!("/v1/runs/{id}/cancel"), &key, json!({})).await;
    assert_eq!((status, &cancelled["status"]), (StatusCode::OK, &json!("cancelled")), "{cancelled}");
    let at = Instant::now();
    loop {
        let (_, usage) = scene.get(&other.url("/v1/usage"), &key).await;
        if usage["total"]["cpu_ticks"].as_u64().unwrap() > 0 {
            break;
        }
        assert!(at.elapsed() < Duration::from_secs(5), "the driver's guest still runs\n{}", driver.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("the driver stopped its guest {:?} after the other node's cancel", at.elapsed());
}

/// A spinning run of `plugin` to its per-run CPU allowance: its wall time,
/// from the request to its end, and the tenant's CPU ticks metered so far.
async fn spin_to_the_allowance(scene: &Scene, node: &Node, key: &str, plugin: &Value) -> (Duration, u64) {
    let at = Instant::now();
    let body = json!({"plugin": plugin, "input": "go", "wait": true});
    let (status, run) = scene.post(&node.url("/v1/runs"), key, body).await;
    assert_eq!(status, StatusCode::OK, "{run}");
    let failed = scene.finish(node, key, run["id"].as_str().unwrap()).await;
    let wall = at.elapsed();
    assert!(failed["error"].as_str().unwrap().contains("its allowance of 40"), "{failed}");
    let (_, usage) = scene.get(&node.url("/v1/usage"), key).await;
    (wall, usage["total"]["cpu_ticks"].as_u64().unwrap())
}

/// `cpu-cores` end to end: the same spinning run, stopped at the same
/// metered CPU (its 40-tick allowance), takes far longer in wall time for a
/// tenant whose share is a tenth of a core: 10 ticks a second after a
/// one-second burst, so about 3.1 s (asserted: over 2.5 s), while waiting
/// for its share costs no CPU ticks. Load can only lengthen the throttled run, so that bound
/// cannot flake; the unthrottled run is the positive control.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_cpu_cores_share_slows_its_guest_to_that_share() {
    let scene = Scene::new(None).await;
    let slow = scene.tenant("una", Some(json!({"quotas": {"cpu-cores": 0.1, "cpu-ticks-per-run": 40}})));
    let fast = scene.tenant("vic", Some(json!({"quotas": {"cpu-ticks-per-run": 40}})));
    let node = scene.node("a");
    let (_, spin) = scene.upload(&node, &fast, built::SPIN).await;
    let (fast_wall, fast_ticks) = spin_to_the_allowance(&scene, &node, &fast, &spin["id"]).await;
    let (_, spin) = scene.upload(&node, &slow, built::SPIN).await;
    let (slow_wall, slow_ticks) = spin_to_the_allowance(&scene, &node, &slow, &spin["id"]).await;
    eprintln!("41 CPU ticks: {fast_wall:?} without a share, {slow_wall:?} at a tenth of a core");
    assert_eq!((fast_ticks, slow_ticks), (41, 41), "the same CPU, metered alike");
    assert!(slow_wall >= Duration::from_millis(2500), "a tenth of a core ran 41 ticks in {slow_wall:?}");
    assert!(fast_wall * 2 < slow_wall, "without a share: {fast_wall:?}, with one: {slow_wall:?}");
}

/// A scene whose operator also serves `priced`, at a dollar a million
/// tokens in and out.
async fn priced_scene() -> Scene {
    let scene = Scene::new(None).await;
    scene.configure(&format!(
        "[serve.models.priced]\nprovider = \"openai-compatible\"\nbase-url = \"{}\"\nmodel = \"priced-model\"\n\
         price = {{ input = 1.0, output = 1.0 }}\n",
        scene.model.openai_base_url()
    ));
    scene
}

/// A tenant's run that would pass its `usd-per-run` quota suspends with a
/// `budget` approval; the tenant cannot approve its way past the operator's
/// budget (409, nothing decided, nothing paid), and once the operator
/// raises the quota the tenant's approval takes the run on, with the turns
/// it paid for answered from its journal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_cannot_approve_past_its_operators_budget_until_the_quota_is_raised() {
    let scene = priced_scene().await;
    let policy = |usd: f64| json!({"models": ["priced"], "quotas": {"usd-per-run": usd}});
    let key = scene.tenant("lee", Some(policy(0.15)));
    let node = scene.node("a");
    let (_, plugin) = scene.upload(&node, &key, built::WORKFLOW_PROBE).await;
    let sha = plugin["id"].as_str().unwrap();
    // $0.10 a turn at a dollar a million tokens.
    for answer in ["one", "two", "three"] {
        scene.model.push(Reply::text(answer).with_usage(90_000, 10_000));
    }
    let waiting = run(&scene, &node, &key, sha, "prompt a;prompt b;prompt c").await;
    assert_eq!(waiting["status"], "suspended", "{waiting}");
    let approval = &waiting["approval"];
    assert_eq!(approval["capability"], "budget", "{waiting}");
    assert_eq!(
        (approval["arguments"]["spent_usd"].clone(), approval["arguments"]["budget_usd"].clone()),
        (json!(0.2), json!(0.15))
    );
    assert_eq!(scene.model.requests().len(), 2, "the third turn was not sent");
    let id = waiting["id"].as_str().unwrap();
    let shown = json!({"seq": approval["seq"], "args-hash": approval["args_hash"]});
    let approve = format!("/v1/runs/{id}/approve");

    let (status, _, refused) = post(&scene, &node, &approve, &key, shown.clone()).await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert_eq!(refused["error"]["code"], "budget", "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("usd-per-run") && message.contains("at least $0.2"), "{message}");
    let (_, still) = scene.get(&node.url(&format!("/v1/runs/{id}")), &key).await;
    assert_eq!(still["status"], "suspended", "{still}");
    assert_eq!(still["approval"]["decision"], Value::Null, "nothing decided: {still}");

    let raised = scene.dir.path().join("lee-raised.json");
    std::fs::write(&raised, policy(1.0).to_string()).unwrap();
    let out = scene.nexo(&["tenant", "policy", "lee", &raised.display().to_string()]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let (status, _, decided) = post(&scene, &node, &approve, &key, shown).await;
    assert_eq!(status, StatusCode::OK, "{decided}");
    let done = scene.finish(&node, &key, id).await;
    assert_eq!(done["status"], "done", "{done}");
    assert_eq!(scene.model.requests().len(), 3, "the first two turns were not paid again");
}

/// A tenant's `usd-per-day` is shared by its runs: a turn that may pass
/// what is left of the day suspends its run, a new run is refused (429,
/// until midnight UTC), `/v1/usage` shows what the day cost, and a raised
/// quota lets the waiting run be approved and finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_day_budget_holds_its_runs_and_shows_in_its_usage() {
    let scene = priced_scene().await;
    let policy = |usd: f64| json!({"models": ["priced"], "quotas": {"usd-per-day": usd}});
    let key = scene.tenant("may", Some(policy(0.15)));
    let node = scene.node("a");
    let (_, plugin) = scene.upload(&node, &key, built::WORKFLOW_PROBE).await;
    let sha = plugin["id"].as_str().unwrap();
    for answer in ["one", "two", "three"] {
        scene.model.push(Reply::text(answer).with_usage(90_000, 10_000));
    }
    let waiting = run(&scene, &node, &key, sha, "prompt a;prompt b;prompt c").await;
    assert_eq!(waiting["status"], "suspended", "{waiting}");
    assert_eq!(waiting["approval"]["capability"], "budget", "{waiting}");
    assert_eq!(waiting["approval"]["arguments"]["day_left_usd"], 0.0, "{waiting}");
    assert_eq!(scene.model.requests().len(), 2);
    let (_, usage) = scene.get(&node.url("/v1/usage"), &key).await;
    assert_eq!(usage["total"]["cost_usd"], 0.2, "{usage}");

    let body = json!({"plugin": sha, "input": "prompt d"});
    let (status, after, refused) = post(&scene, &node, "/v1/runs", &key, body).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{refused}");
    assert!(after.is_some_and(|s| (1..=86_400).contains(&s)), "Retry-After: {after:?}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("usd-per-day"), "{refused}");

    let id = waiting["id"].as_str().unwrap();
    let approval = &waiting["approval"];
    let shown = json!({"seq": approval["seq"], "args-hash": approval["args_hash"]});
    let approve = format!("/v1/runs/{id}/approve");
    let (status, _, refused) = post(&scene, &node, &approve, &key, shown.clone()).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "the day is spent: {refused}");

    let raised = scene.dir.path().join("may-raised.json");
    std::fs::write(&raised, policy(1.0).to_string()).unwrap();
    let out = scene.nexo(&["tenant", "policy", "may", &raised.display().to_string()]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let (status, _, decided) = post(&scene, &node, &approve, &key, shown).await;
    assert_eq!(status, StatusCode::OK, "{decided}");
    let done = scene.finish(&node, &key, id).await;
    assert_eq!(done["status"], "done", "{done}");
    assert_eq!(scene.model.requests().len(), 3, "the first two turns were not paid again");
    let (_, usage) = scene.get(&node.url("/v1/usage"), &key).await;
    assert_eq!(usage["total"]["cost_usd"], 0.3, "{usage}");
}

/// A session's prompts share its `usd-per-session`: each prompt's run gets
/// what the others left, so the prompt that would pass it suspends with a
/// `budget` approval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_prompts_share_its_budget() {
    let scene = priced_scene().await;
    let key = scene.tenant("ned", Some(json!({"models": ["priced"], "quotas": {"usd-per-session": 0.15}})));
    let node = scene.node("a");
    let (_, plugin) = scene.upload(&node, &key, built::WORKFLOW_PROBE).await;
    let sha = plugin["id"].as_str().unwrap();
    for answer in ["one", "two", "three"] {
        scene.model.push(Reply::text(answer).with_usage(90_000, 10_000));
    }
    let prompt = |input: &str| json!({"plugin": sha, "instance": "chat", "input": input, "wait": true});
    for input in ["prompt a", "prompt b"] {
        let (status, done) = scene.post(&node.url("/v1/sessions/prompt"), &key, prompt(input)).await;
        assert_eq!(status, StatusCode::OK, "{done}");
        assert_eq!(done["run"]["status"], "done", "{input}: {done}");
    }
    let (_, third) = scene.post(&node.url("/v1/sessions/prompt"), &key, prompt("prompt c")).await;
    let id = third["run"]["id"].as_str().unwrap();
    let waiting = scene.settle(&node, &key, id).await;
    assert_eq!(waiting["status"], "suspended", "the session's $0.20 left nothing: {waiting}");
    assert_eq!(waiting["approval"]["capability"], "budget", "{waiting}");
    assert_eq!(waiting["approval"]["arguments"]["budget_usd"], 0.0, "{waiting}");
    assert_eq!(scene.model.requests().len(), 2, "the third prompt's turn was not sent");
}
