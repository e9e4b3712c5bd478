//! Fair service across the tenants of one `nexo serve`, against the real
//! binary on loopback with a real SQLite store and real components:
//!
//! - a tenant's plugin storage has a quota (bytes and count), refused with
//!   507 naming it;
//! - a tenant holds at most its `open-streams` quota of event streams;
//! - revoking a key, or disabling the tenant, ends its open streams at once;
//! - another tenant's sessions are listed however many a first tenant has;
//! - one tenant's flood of uploads compiles one at a time, so another
//!   tenant's upload waits for one of its compiles, not all of them;
//! - a tenant whose stored policy cannot be read is refused (409), not
//!   given the default quotas;
//! - a tenant that holds all but the node's reserved run slots does not get
//!   those: another tenant's run takes one at once.
//!
//! The fair claim order of queued runs is a store behaviour
//! (store/tests/behaviour.rs, `tenants_take_turns_at_the_queue`); the
//! latencies it and compiling off the API's threads give are measured by
//! the serve bench (docs/serve.md).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nexo_model::mock::{MockToolCall, Reply};
use nexo_tests as built;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

mod common;

use common::scene::Scene;
use common::{Node, stderr, stdout};

/// A policy whose runs suspend at a write for an approval: a run that
/// stays open (and idle) for as long as a test needs its stream.
fn writer_policy(quotas: Value) -> Value {
    json!({"allow": ["write"], "mode": "approve", "sandboxes": ["local", "virtual"], "models": ["test"], "quotas": quotas})
}

fn admin_key(scene: &Scene) -> String {
    let out = scene.nexo(&["tenant", "admin-key"]);
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out).trim().to_string()
}

/// A run of `key`'s tenant suspended at a write, waiting for approval.
async fn suspended_run(scene: &Scene, node: &Node, key: &str) -> String {
    let (status, plugin) = scene.upload(node, key, built::WORKFLOW_PROBE).await;
    assert!(status.is_success(), "{plugin}");
    scene.model.push(Reply::tool_calls(vec![MockToolCall::new(
        "c1",
        "write_file",
        json!({"path": "notes.txt", "content": "hi"}),
    )]));
    let body = json!({"plugin": plugin["id"], "input": "prompt write notes", "sandbox": "local", "wait": true});
    let (status, run) = scene.post(&node.url("/v1/runs"), key, body).await;
    assert_eq!((status, &run["status"]), (StatusCode::OK, &json!("suspended")), "{run}\n{}", node.log());
    run["id"].as_str().unwrap().to_string()
}

/// An event stream read in the background until the server ends it.
struct Stream {
    text: Arc<Mutex<String>>,
    reader: tokio::task::JoinHandle<()>,
}

impl Stream {
    /// Opens the run's stream: the refusal's status and body if it is refused.
    async fn open(scene: &Scene, node: &Node, key: &str, run: &str) -> Result<Stream, (StatusCode, Value)> {
        let resp = scene.http.get(node.url(&format!("/v1/runs/{run}/events"))).bearer_auth(key).send().await.unwrap();
        if resp.status() != StatusCode::OK {
            let status = resp.status();
            return Err((status, resp.json().await.unwrap_or(Value::Null)));
        }
        let text = Arc::new(Mutex::new(String::new()));
        let kept = text.clone();
        let reader = tokio::spawn(async move {
            let mut resp = resp;
            while let Ok(Some(chunk)) = resp.chunk().await {
                kept.lock().unwrap().push_str(&String::from_utf8_lossy(&chunk));
            }
        });
        Ok(Stream { text, reader })
    }

    fn text(&self) -> String {
        self.text.lock().unwrap().clone()
    }

    /// Waits up to `limit` for the server to end the stream.
    async fn ends_within(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if self.reader.is_finished() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// The id of the tenant named `name`, by the admin API.
async fn tenant_id(scene: &Scene, node: &Node, admin: &str, name: &str) -> String {
    let (_, all) = scene.get(&node.url("/v1/tenants"), admin).await;
    let found = all["tenants"].as_array().unwrap().iter().find(|t| t["name"] == name).expect("the tenant");
    found["id"].as_str().unwrap().to_string()
}

/// The id of the newest key of tenant `name`.
fn newest_key_id(scene: &Scene, name: &str) -> String {
    let out = scene.nexo(&["tenant", "keys", name]);
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out).lines().rfind(|l| l.starts_with('k')).unwrap().split('\t').next().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_storage_has_a_quota_of_bytes_and_count() {
    let scene = Scene::new(None).await;
    let stats = std::fs::metadata(built::TEXT_STATS).unwrap().len();
    let counted = scene.tenant("counted", Some(json!({"quotas": {"plugins": 1}})));
    let small = scene.tenant("small", Some(json!({"quotas": {"plugin-bytes": stats - 1}})));
    let node = scene.node("a");

    let (status, first) = scene.upload(&node, &counted, built::TEXT_STATS).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    let (status, again) = scene.upload(&node, &counted, built::TEXT_STATS).await;
    assert_eq!(status, StatusCode::OK, "the same bytes again cost nothing: {again}");
    let (status, refused) = scene.upload(&node, &counted, built::WORKFLOW_PROBE).await;
    assert_eq!(status, StatusCode::INSUFFICIENT_STORAGE, "{refused}");
    assert_eq!(refused["error"]["code"], "plugin_quota");
    assert!(refused["error"]["message"].as_str().unwrap().contains("quota `plugins` (1)"), "{refused}");

    let (status, refused) = scene.upload(&node, &small, built::TEXT_STATS).await;
    assert_eq!(status, StatusCode::INSUFFICIENT_STORAGE, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("`plugin-bytes`"), "{refused}");
    let (_, listed) = scene.get(&node.url("/v1/plugins"), &small).await;
    assert_eq!(listed["plugins"], json!([]), "nothing was stored");
    let (_, listed) = scene.get(&node.url("/v1/plugins"), &counted).await;
    assert_eq!(listed["plugins"].as_array().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_open_streams_are_capped_and_end_when_its_key_is_revoked_or_it_is_disabled() {
    let scene = Scene::new(None).await;
    let key = scene.tenant("streamer", Some(writer_policy(json!({"open-streams": 2}))));
    let out = scene.nexo(&["tenant", "key", "streamer"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let second = stdout(&out).trim().to_string();
    let second_id = newest_key_id(&scene, "streamer");
    let admin = admin_key(&scene);
    let node = scene.node("a");
    let run = suspended_run(&scene, &node, &key).await;

    let by_second = Stream::open(&scene, &node, &second, &run).await.expect("the first stream");
    let by_first = Stream::open(&scene, &node, &key, &run).await.expect("the second stream");
    let (status, refused) = Stream::open(&scene, &node, &key, &run).await.err().expect("a third is refused");
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{refused}");
    assert_eq!(refused["error"]["code"], "quota_exceeded");
    assert!(refused["error"]["message"].as_str().unwrap().contains("`open-streams` (2)"), "{refused}");

    // Revoking the second key ends its stream at once, and only its.
    let (status, revoked) =
        scene.call(Method::DELETE, &node.url(&format!("/v1/keys/{second_id}")), Some(&admin), None).await;
    assert_eq!(status, StatusCode::OK, "{revoked}");
    assert!(
        by_second.ends_within(Duration::from_secs(3)).await,
        "the revoked key's stream goes on: {}",
        by_second.text()
    );
    assert!(by_second.text().contains("event: closed"), "{}", by_second.text());
    assert!(!by_first.reader.is_finished(), "the other key's stream goes on");
    // Its place is free again.
    let deadline = Instant::now() + Duration::from_secs(10);
    let replacement = loop {
        match Stream::open(&scene, &node, &key, &run).await {
            Ok(s) => break s,
            Err((status, body)) => {
                assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
                assert!(Instant::now() < deadline, "the ended stream's place was not freed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };

    // Disabling the tenant ends the rest at once.
    let (status, _) = scene.post(&node.url("/v1/tenants/streamer/disable"), &admin, json!({})).await;
    assert_eq!(status, StatusCode::OK);
    for stream in [&by_first, &replacement] {
        assert!(stream.ends_within(Duration::from_secs(3)).await, "a disabled tenant's stream goes on");
        assert!(stream.text().contains("event: closed"), "{}", stream.text());
        assert!(!stream.text().contains("event: end"), "the run did not end: {}", stream.text());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_revoked_by_the_cli_ends_its_stream_within_the_recheck() {
    let scene = Scene::new(None).await;
    let key = scene.tenant("cli-revoked", Some(writer_policy(json!({}))));
    let key_id = newest_key_id(&scene, "cli-revoked");
    let node = scene.node("a");
    let run = suspended_run(&scene, &node, &key).await;
    let stream = Stream::open(&scene, &node, &key, &run).await.expect("a stream");
    // Another process revokes it: the node hears of it at the stream's next check.
    let out = scene.nexo(&["tenant", "revoke", &key_id]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stream.ends_within(Duration::from_secs(15)).await, "the stream goes on: {}", stream.text());
    assert!(stream.text().contains("event: closed"), "{}", stream.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_sessions_are_listed_however_many_the_first_has() {
    let scene = Scene::new(None).await;
    let busy = scene.tenant("busy", None);
    let quiet = scene.tenant("quiet", Some(json!({"models": ["test"]})));
    let admin = admin_key(&scene);
    let node = scene.node("a");
    let (_, plugin) = scene.upload(&node, &quiet, built::WORKFLOW_PROBE).await;
    scene.model.push(Reply::text("hello"));
    let body = json!({"plugin": plugin["id"], "instance": "mine", "input": "prompt hi", "wait": true});
    let (status, prompted) = scene.post(&node.url("/v1/sessions/prompt"), &quiet, body).await;
    assert_eq!((status, &prompted["run"]["status"]), (StatusCode::OK, &json!("done")), "{prompted}");

    // The busy tenant then has more sessions, all newer, than a page of all.
    let busy_id = tenant_id(&scene, &node, &admin, "busy").await;
    let mut db =
        <sqlx::SqliteConnection as sqlx::Connection>::connect(&format!("sqlite://{}", scene.store)).await.unwrap();
    let now = nexo_store::now_ms() + 60_000;
    sqlx::query(
        "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 10049) \
         INSERT INTO sessions (id, agent, instance, messages, created_ms, updated_ms) \
         SELECT 'sbusy' || i, 'text-stats', $1 || '/s' || i, 0, $2 + i, $2 + i FROM n",
    )
    .bind(&busy_id)
    .bind(now)
    .execute(&mut db)
    .await
    .unwrap();
    drop(db);

    let (status, listed) = scene.get(&node.url("/v1/sessions"), &quiet).await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    let names: Vec<&str> =
        listed["sessions"].as_array().unwrap().iter().map(|s| s["instance"].as_str().unwrap()).collect();
    assert_eq!(names, ["mine"], "{listed}");
    let (_, listed) = scene.get(&node.url("/v1/sessions"), &busy).await;
    let theirs = listed["sessions"].as_array().unwrap();
    assert_eq!(theirs.len(), 10_000, "the busy tenant's newest page");
    assert!(theirs.iter().all(|s| s["instance"].as_str().unwrap().starts_with('s')), "its own names, unprefixed");
}

/// Replaces a tenant's stored policy behind the store's back with one that
/// does not parse.
async fn break_policy(scene: &Scene, name: &str) {
    use sqlx::Connection;
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", scene.store)).await.unwrap();
    let done = sqlx::query("UPDATE tenants SET policy = '{\"allow\": 7}' WHERE name = $1")
        .bind(name)
        .execute(&mut conn)
        .await
        .unwrap();
    assert_eq!(done.rows_affected(), 1);
    conn.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_that_cannot_be_read_grants_no_default_caps() {
    let scene = Scene::new(None).await;
    let key = scene.tenant("unreadable", Some(writer_policy(json!({}))));
    let node = scene.node("a");
    let run = suspended_run(&scene, &node, &key).await;
    break_policy(&scene, "unreadable").await;

    let (status, refused) = scene.upload(&node, &key, built::TEXT_STATS).await;
    assert_eq!((status, &refused["error"]["code"]), (StatusCode::CONFLICT, &json!("policy")), "{refused}");
    let (_, listed) = scene.get(&node.url("/v1/plugins"), &key).await;
    assert_eq!(listed["plugins"].as_array().unwrap().len(), 1, "nothing more was stored: {listed}");
    let (status, refused) = Stream::open(&scene, &node, &key, &run).await.err().expect("the stream is refused");
    assert_eq!((status, &refused["error"]["code"]), (StatusCode::CONFLICT, &json!("policy")), "{refused}");
}

/// `bytes` (a component) with a custom section of `tag` appended: the same
/// component, but new bytes, so it compiles and is stored anew (as the
/// serve bench's uploads).
fn unique_copy(bytes: &[u8], tag: u8) -> Vec<u8> {
    let name = b"nexo-test";
    let mut out = bytes.to_vec();
    // Section id 0 (custom), its size, its name's length, its name, the tag.
    out.extend_from_slice(&[0, u8::try_from(name.len() + 2).unwrap(), u8::try_from(name.len()).unwrap()]);
    out.extend_from_slice(name);
    out.push(tag);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_flood_of_uploads_compiles_one_at_a_time() {
    let scene = Scene::new(None).await;
    let mut config = std::fs::read_to_string(scene.config()).unwrap();
    config.push_str("[serve]\ncompile-concurrency = 1\n");
    std::fs::write(scene.config(), config).unwrap();
    let flood = scene.tenant("flood", None);
    let quiet = scene.tenant("quiet", None);
    let node = scene.node("a");
    let bytes = std::fs::read(built::TEXT_STATS).unwrap();

    const FLOOD: u8 = 6;
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut uploads = Vec::new();
    for tag in 0..FLOOD {
        let (http, url, key, body, done) =
            (scene.http.clone(), node.url("/v1/plugins"), flood.clone(), unique_copy(&bytes, tag), done.clone());
        uploads.push(tokio::spawn(async move {
            let resp = http.post(url).bearer_auth(key).body(body).send().await.unwrap();
            let status = resp.status();
            done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            status
        }));
    }
    // Once one of the flood's compiles has ended, the rest have long arrived.
    let deadline = Instant::now() + Duration::from_secs(120);
    while done.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "no upload was answered\n{}", node.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, quiet_upload) = scene.upload(&node, &quiet, built::TEXT_STATS).await;
    let flood_done = done.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(status, StatusCode::CREATED, "{quiet_upload}");
    assert!(
        flood_done <= 3,
        "the quiet tenant's upload waited for {flood_done} of the flood's {FLOOD} compiles, not for at most one more"
    );
    for upload in uploads {
        assert_eq!(upload.await.unwrap(), StatusCode::CREATED, "{}", node.log());
    }
}

/// A tenant with no concurrency quota floods a node of four run slots with
/// spinners: it gets three, and the last one is kept for another tenant,
/// whose trivial run is done while the spinners still spin (before the
/// reserve, it waited for a spinner to end: five minutes, their limit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_tenant_leaves_the_reserved_slot_to_another() {
    let scene = Scene::new(None).await;
    let flood = scene.tenant("fay", None);
    let quiet = scene.tenant("gus", None);
    let node = scene.node_with("a", &["--max-in-flight", "4"]);
    let (_, spin) = scene.upload(&node, &flood, built::SPIN).await;
    let (_, stats) = scene.upload(&node, &quiet, built::TEXT_STATS).await;
    let mut spinners = Vec::new();
    for _ in 0..6 {
        let (status, run) =
            scene.post(&node.url("/v1/runs"), &flood, json!({"plugin": spin["id"], "input": "go"})).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{run}");
        spinners.push(run["id"].as_str().unwrap().to_string());
    }
    // Three run (the first three queued come first), the others wait.
    for id in &spinners[..3] {
        scene.until(&node, &flood, id, &["running"]).await;
    }
    let (status, run) = scene.get(&node.url(&format!("/v1/runs/{}", spinners[3])), &flood).await;
    assert_eq!((status, &run["status"]), (StatusCode::OK, &json!("queued")), "the fourth slot is kept: {run}");

    let body = json!({"plugin": stats["id"], "input": "a b c", "wait": true});
    let url = node.url("/v1/runs");
    let answered = tokio::time::timeout(Duration::from_secs(60), scene.post(&url, &quiet, body)).await;
    let (status, done) = answered.unwrap_or_else(|_| panic!("no slot for the quiet run\n{}", node.log()));
    assert_eq!((status, &done["status"]), (StatusCode::OK, &json!("done")), "{done}\n{}", node.log());
    for id in &spinners[..3] {
        let (_, run) = scene.get(&node.url(&format!("/v1/runs/{id}")), &flood).await;
        assert_eq!(run["status"], "running", "the spinners still hold their slots: {run}");
    }
    for id in &spinners {
        let (status, run) = scene.post(&node.url(&format!("/v1/runs/{id}/cancel")), &flood, json!({})).await;
        assert_eq!(status, StatusCode::OK, "{run}");
    }
}
