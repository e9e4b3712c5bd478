//! A tenant's approvals and files against a real `nexo serve`: the real
//! binary on loopback, a real SQLite file, real components, a loopback
//! model server.
//!
//! - a decision names the call it decides: a second approver's decision for
//!   a call the run no longer waits on is refused (409) and decides nothing;
//!   so is one that names the call's hash at another position, and an
//!   approval never lets the same call through again; a denial tells the
//!   model and cannot be overturned (409);
//! - the workspace API keeps each tenant to its own files, whatever the
//!   path (`..`, absolute, encoded), a symlink or hard link planted in the
//!   workspace, or the quota;
//! - a tenant is onboarded as docs/serve.md shows it;
//! - a run an older nexo suspended for an approval (a real database it
//!   wrote, store/tests/fixtures) is approved after the upgrade and goes on.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::time::{Duration, Instant};

use nexo_model::mock::{MockToolCall, Reply};
use nexo_tests as built;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

mod common;

use common::scene::Scene;
use common::{Node, stderr, stdout};

/// Writes in the local workspace, each write waiting for an approval.
fn writer_policy() -> Value {
    json!({"allow": ["write"], "mode": "approve", "sandboxes": ["local", "virtual"], "models": ["test"]})
}

/// Polls the run until its pending call is another than `seq`.
async fn waits_on_another_call(scene: &Scene, node: &Node, key: &str, id: &str, seq: &Value) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (status, run) = scene.get(&node.url(&format!("/v1/runs/{id}")), key).await;
        assert_eq!(status, StatusCode::OK, "{run}");
        if run["status"] == "suspended" && !run["approval"].is_null() && &run["approval"]["seq"] != seq {
            return run;
        }
        assert_ne!(run["status"], "done", "{run}");
        assert!(Instant::now() < deadline, "the run never reached its next call: {run}\n{}", node.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The console over plain HTTP, redirects not followed: signs `key` in and
/// answers the session's cookie header.
async fn console_sign_in(http: &reqwest::Client, node: &Node, key: &str) -> String {
    let resp = http.get(node.url("/login")).send().await.unwrap();
    let login = cookie(&resp, "nexo_login");
    let token = field(&resp.text().await.unwrap(), "csrf");
    let resp = http
        .post(node.url("/login"))
        .header("cookie", format!("nexo_login={login}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={token}&key={key}"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    format!("nexo_session={}", cookie(&resp, "nexo_session"))
}

fn cookie(resp: &reqwest::Response, name: &str) -> String {
    let header = resp.headers().get_all("set-cookie").iter().map(|v| v.to_str().unwrap().to_string());
    let found =
        header.into_iter().find_map(|h| Some(h.split(';').next()?.strip_prefix(&format!("{name}="))?.to_string()));
    found.unwrap_or_else(|| panic!("no {name} cookie"))
}

/// The value of the first hidden field `name` in a page.
fn field(page: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let at = page.find(&marker).unwrap_or_else(|| panic!("no {name} field in {page}")) + marker.len();
    page[at..].split('"').next().unwrap().to_string()
}

/// Posts a console form; its status and page.
async fn post_form(
    http: &reqwest::Client,
    node: &Node,
    session: &str,
    path: &str,
    form: &[(&str, String)],
) -> (StatusCode, String) {
    let body: Vec<String> = form.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let resp = http
        .post(node.url(path))
        .header("cookie", session)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body.join("&"))
        .send()
        .await
        .unwrap();
    (resp.status(), resp.text().await.unwrap())
}

/// A scene whose tenant `alice` writes with approval, on one node, with the
/// workflow probe uploaded: the scene, her key, the node and the upload.
async fn writer() -> (Scene, String, Node, Value) {
    let scene = Scene::new(None).await;
    let alice = scene.tenant("alice", Some(writer_policy()));
    let node = scene.node("a");
    let (status, plugin) = scene.upload(&node, &alice, built::WORKFLOW_PROBE).await;
    assert_eq!(status, StatusCode::CREATED, "{plugin}");
    (scene, alice, node, plugin)
}

fn shown(run: &Value) -> Value {
    json!({"seq": run["approval"]["seq"], "args-hash": run["approval"]["args_hash"]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_for_a_call_no_longer_pending_is_refused_and_decides_nothing() {
    let (scene, alice, node, plugin) = writer().await;
    let sha = plugin["id"].as_str().unwrap();
    let write = |id: &str, path: &str, content: &str| {
        Reply::tool_calls(vec![MockToolCall::new(id, "write_file", json!({"path": path, "content": content}))])
    };
    scene.model.push(write("c1", "notes.txt", "hi"));
    scene.model.push(write("c2", "dangerous.txt", "DANGEROUS"));
    scene.model.push(Reply::text("done"));
    let body = json!({"plugin": sha, "input": "prompt write", "sandbox": "local", "wait": true});
    let (status, first) = scene.post(&node.url("/v1/runs"), &alice, body).await;
    assert_eq!((status, &first["status"]), (StatusCode::OK, &json!("suspended")), "{first}\n{}", node.log());
    assert_eq!(first["approval"]["arguments"]["path"], "notes.txt", "{first}");
    assert_eq!(first["approval"]["args_hash"].as_str().unwrap().len(), 64, "{first}");
    let id = first["id"].as_str().unwrap().to_string();
    let approve = node.url(&format!("/v1/runs/{id}/approve"));

    // A decision that names no call is refused, naming what is missing.
    for (body, missing) in [
        (json!({}), "`seq`"),
        (json!({"seq": first["approval"]["seq"]}), "`args-hash`"),
        (json!({"args-hash": first["approval"]["args_hash"]}), "`seq`"),
    ] {
        let (status, refused) = scene.post(&approve, &alice, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
        assert!(refused["error"]["message"].as_str().unwrap().contains(missing), "{refused}");
    }
    let resp = scene.http.post(&approve).bearer_auth(&alice).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "no body at all");

    // Two approvers were shown call 1: one in the console, whose form names that call.
    let console = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let session = console_sign_in(&console, &node, &alice).await;
    let page = console.get(node.url(&format!("/runs/{id}"))).header("cookie", &session).send().await.unwrap();
    let page = page.text().await.unwrap();
    assert!(page.contains("notes.txt"), "the console shows call 1: {page}");
    let form = [("csrf", field(&page, "csrf")), ("seq", field(&page, "seq")), ("args-hash", field(&page, "args-hash"))];
    assert_eq!(form[1].1, first["approval"]["seq"].to_string());
    assert_eq!(form[2].1, first["approval"]["args_hash"].as_str().unwrap());
    let (status, refused) = post_form(&console, &node, &session, &format!("/runs/{id}/approve"), &form[..1]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "a form that names no call: {refused}");

    // The other approves call 1 over the API; the run moves on to call 2.
    let (status, decided) = scene.post(&approve, &alice, shown(&first)).await;
    assert_eq!(status, StatusCode::OK, "{decided}");
    let second = waits_on_another_call(&scene, &node, &alice, &id, &first["approval"]["seq"]).await;
    assert_eq!(second["approval"]["arguments"]["path"], "dangerous.txt", "{second}");
    assert!(scene.data("a").join("tenants").exists());

    // The second approver, still looking at call 1, approves: refused, naming the call pending now.
    for verb in ["approve", "deny"] {
        let url = node.url(&format!("/v1/runs/{id}/{verb}"));
        let (status, refused) = scene.post(&url, &alice, shown(&first)).await;
        assert_eq!(status, StatusCode::CONFLICT, "{refused}");
        assert_eq!(refused["error"]["code"], "stale_approval", "{refused}");
        let message = refused["error"]["message"].as_str().unwrap();
        let pending = format!("now waits on call {}", second["approval"]["seq"]);
        assert!(message.contains(&pending) && message.contains("nothing was decided"), "{message}");
    }
    // So is the console's form, still showing call 1.
    let (status, refused) = post_form(&console, &node, &session, &format!("/runs/{id}/approve"), &form).await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert!(refused.contains("nothing was decided"), "{refused}");
    // The same sequence number with other arguments is not the call shown either.
    let forged = json!({"seq": second["approval"]["seq"], "args-hash": first["approval"]["args_hash"]});
    let (status, refused) = scene.post(&approve, &alice, forged).await;
    assert_eq!((status, &refused["error"]["code"]), (StatusCode::CONFLICT, &json!("stale_approval")), "{refused}");

    // Nothing was decided: call 2 still waits, undecided, and nothing was written.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, still) = scene.get(&node.url(&format!("/v1/runs/{id}")), &alice).await;
    assert_eq!(still["status"], "suspended", "{still}");
    assert_eq!((&still["approval"]["seq"], &still["approval"]["decision"]), (&second["approval"]["seq"], &Value::Null));
    let workspace = tenant_workspace(&scene, "a");
    assert!(!workspace.join("dangerous.txt").exists(), "the stale approval wrote nothing");
    assert_eq!(std::fs::read_to_string(workspace.join("notes.txt")).unwrap(), "hi");

    // Whoever sees call 2 decides it.
    let (status, denied) = scene.post(&node.url(&format!("/v1/runs/{id}/deny")), &alice, shown(&second)).await;
    assert_eq!(status, StatusCode::OK, "{denied}");
    let done = scene.finish(&node, &alice, &id).await;
    assert_eq!(done["status"], "done", "{done}\n{}", node.log());
    assert!(!workspace.join("dangerous.txt").exists(), "denied");
    let (_, audit) = scene.get(&node.url("/v1/audit"), &alice).await;
    let entries = audit["entries"].as_array().unwrap();
    let decided: Vec<&Value> = entries.iter().filter(|e| e["kind"] == "approval.decided").collect();
    assert_eq!(decided.len(), 2, "only the two decisions that were made: {audit}");
    // Each names the key that decided, by its id (alice's only key), never the key.
    let data = |e: &Value| serde_json::from_str::<Value>(e["data"].as_str().unwrap()).unwrap();
    let created = entries.iter().find(|e| e["kind"] == "key.created").map(data).unwrap();
    for d in &decided {
        assert_eq!(data(d)["key"], created["key"], "{d}");
    }
    assert!(!audit.to_string().contains(&alice), "the audit log holds no key");
}

/// A decision binds to the call's position as well as its hash: the hash
/// shown at another `seq` decides nothing, and the same call made again
/// later waits for a decision of its own. Denied, that call fails with a
/// tool error the model is told of, and the run ends `done`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_binds_to_the_calls_position_and_a_denial_tells_the_model() {
    let (scene, alice, node, plugin) = writer().await;
    // The model makes the same call twice, then answers.
    let write = |id: &str| {
        Reply::tool_calls(vec![MockToolCall::new(id, "write_file", json!({"path": "notes.txt", "content": "hi"}))])
    };
    scene.model.push(write("c1"));
    scene.model.push(write("c2"));
    scene.model.push(Reply::text("it was refused, so I stopped"));
    let body = json!({"plugin": plugin["id"], "input": "prompt write notes", "sandbox": "local", "wait": true});
    let (status, first) = scene.post(&node.url("/v1/runs"), &alice, body).await;
    assert_eq!((status, &first["status"]), (StatusCode::OK, &json!("suspended")), "{first}\n{}", node.log());
    let id = first["id"].as_str().unwrap().to_string();
    let seq = first["approval"]["seq"].as_u64().unwrap();

    // The hash shown, at the positions either side: nothing is decided.
    for other in [seq.saturating_sub(1), seq + 1] {
        let misplaced = json!({"seq": other, "args-hash": first["approval"]["args_hash"]});
        for verb in ["approve", "deny"] {
            let (status, refused) =
                scene.post(&node.url(&format!("/v1/runs/{id}/{verb}")), &alice, misplaced.clone()).await;
            assert_eq!(
                (status, &refused["error"]["code"]),
                (StatusCode::CONFLICT, &json!("stale_approval")),
                "{refused}"
            );
            let message = refused["error"]["message"].as_str().unwrap();
            assert!(message.contains(&format!("now waits on call {seq} ")), "{message}");
        }
    }
    let (_, still) = scene.get(&node.url(&format!("/v1/runs/{id}")), &alice).await;
    assert_eq!((&still["status"], &still["approval"]["decision"]), (&json!("suspended"), &Value::Null), "{still}");

    // Approved as shown, the write happens; the same call made again waits for its own decision.
    let (status, decided) = scene.post(&node.url(&format!("/v1/runs/{id}/approve")), &alice, shown(&first)).await;
    assert_eq!(status, StatusCode::OK, "{decided}");
    let second = waits_on_another_call(&scene, &node, &alice, &id, &first["approval"]["seq"]).await;
    assert_eq!(second["approval"]["args_hash"], first["approval"]["args_hash"], "the same call: {second}");
    assert_eq!(second["approval"]["arguments"], first["approval"]["arguments"]);
    let workspace = tenant_workspace(&scene, "a");
    assert_eq!(std::fs::read_to_string(workspace.join("notes.txt")).unwrap(), "hi");
    std::fs::remove_file(workspace.join("notes.txt")).unwrap();

    // Denied; the other decision, a moment later, is refused and overturns nothing
    // (`already_decided` while the run still waits, `stale_approval` once it goes on).
    let deny = node.url(&format!("/v1/runs/{id}/deny"));
    let (status, denied) = scene.post(&deny, &alice, shown(&second)).await;
    assert_eq!(status, StatusCode::OK, "{denied}");
    let approve = node.url(&format!("/v1/runs/{id}/approve"));
    let (status, refused) = scene.post(&approve, &alice, shown(&second)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert!(["already_decided", "stale_approval"].contains(&refused["error"]["code"].as_str().unwrap()), "{refused}");
    let done = scene.finish(&node, &alice, &id).await;
    assert_eq!(done["status"], "done", "{done}\n{}", node.log());
    assert_eq!(done["result"], "it was refused, so I stopped", "{done}");
    assert!(!workspace.join("notes.txt").exists(), "the denied call wrote nothing");
    // The model's last turn carried the denial as the call's result.
    let requests = scene.model.requests();
    assert_eq!(requests.len(), 3, "no turn was asked twice");
    assert!(requests[2].raw_body.contains("the operator denied `write-file`"), "{}", requests[2].raw_body);
    let verdicts: Vec<Value> =
        scene.audit(&node, &alice, "capability.used").await.into_iter().map(|d| d["verdict"].clone()).collect();
    assert_eq!(verdicts, ["approval-required", "allowed", "approval-required", "denied"], "{verdicts:?}");
    let decisions: Vec<Value> =
        scene.audit(&node, &alice, "approval.decided").await.into_iter().map(|d| d["decision"].clone()).collect();
    assert_eq!(decisions, ["approved", "denied"], "one entry per decision made");
}

/// The databases older nexo binaries wrote (store/tests/fixtures/sqlite)
/// with a tenant's run suspended for an approval: each manifest and file.
fn fixtures_with_a_served_approval() -> Vec<(Value, std::path::PathBuf)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../store/tests/fixtures/sqlite");
    let mut out: Vec<(Value, std::path::PathBuf)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|p| (serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap(), p.with_extension("db")))
        .filter(|(m, _): &(Value, _)| !m["runs"]["serve-approval"].is_null())
        .collect();
    out.sort_by_key(|(m, _)| m["schema_version"].as_i64());
    out
}

/// Polls an approved run until it ends, or fails the test as soon as it
/// waits on an undecided approval again.
async fn approved_run_ends(scene: &Scene, node: &Node, key: &str, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, run) = scene.get(&node.url(&format!("/v1/runs/{id}")), key).await;
        if ["done", "failed", "cancelled"].contains(&run["status"].as_str().unwrap_or("")) {
            return run;
        }
        let asked_again = run["status"] == "suspended" && run["approval"]["decision"].is_null();
        assert!(!asked_again, "the approved call is asked for again: {run}\n{}", node.log());
        assert!(Instant::now() < deadline, "the run did not end: {run}\n{}", node.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A tenant's run that an older nexo suspended for an approval, approved
/// through today's API after the upgrade, goes on and makes its write
/// (approvals recorded before the hash named the whole call were asked
/// for again, and the decision was lost). The run's component comes from
/// the old store; its recorded workspace is made again where it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_an_older_nexo_suspended_for_approval_is_approved_after_the_upgrade() {
    let fixtures = fixtures_with_a_served_approval();
    assert!(fixtures.len() >= 4, "the fixtures of schema 4 on: {}", fixtures.len());
    for (manifest, file) in fixtures {
        let scene = Scene::new(None).await;
        std::fs::copy(&file, &scene.store).unwrap();
        let id = manifest["runs"]["serve-approval"]["id"].as_str().unwrap();
        let key = manifest["facts"]["acme-key"].as_str().unwrap();
        let workspace = {
            let store = nexo_store::SqliteStore::open(std::path::Path::new(&scene.store)).await.unwrap();
            let run = nexo_store::Runs::run(&store, id).await.unwrap().unwrap();
            store.close().await;
            std::path::PathBuf::from(run.grant["grant"]["cwd"].as_str().unwrap())
        };
        // The old node's workspace, which this machine does not have: a pass
        // works in its own node's workspace, never the recorded one.
        assert!(workspace.display().to_string().starts_with("/tmp/nexo-fixture."), "{}", workspace.display());
        assert!(!workspace.exists(), "{}", workspace.display());

        let node = scene.node("a");
        let (status, run) = scene.get(&node.url(&format!("/v1/runs/{id}")), key).await;
        assert_eq!((status, &run["status"]), (StatusCode::OK, &json!("suspended")), "{}: {run}", file.display());
        assert_eq!(run["approval"]["arguments"], json!(["notes.txt", "hello"]), "{}: {run}", file.display());
        let (status, decided) = scene.post(&node.url(&format!("/v1/runs/{id}/approve")), key, shown(&run)).await;
        assert_eq!(status, StatusCode::OK, "{}: {decided}", file.display());
        let done = approved_run_ends(&scene, &node, key, id).await;
        assert_eq!(done["status"], "done", "{}: {done}\n{}", file.display(), node.log());
        let written = std::fs::read_to_string(tenant_workspace(&scene, "a").join("notes.txt")).unwrap();
        assert_eq!(written, "hello", "{}: the approved write, in this node's workspace", file.display());
        assert!(!workspace.exists(), "nothing was written at the old node's path");
    }
}

/// The only tenant workspace under node `name`'s data directory.
fn tenant_workspace(scene: &Scene, name: &str) -> std::path::PathBuf {
    let tenant = std::fs::read_dir(scene.data(name).join("tenants")).unwrap().next().unwrap().unwrap().path();
    tenant.join("workspace")
}

/// The workspace of tenant `key`'s owner, found by a file it uploads.
async fn workspace_of(scene: &Scene, node: &Node, key: &str) -> std::path::PathBuf {
    let marker = format!("marker-{}", &key[key.len() - 8..]);
    let resp = scene.http.put(node.url(&format!("/v1/workspace/{marker}"))).bearer_auth(key).body("x").send().await;
    assert_eq!(resp.unwrap().status(), StatusCode::CREATED);
    for tenant in std::fs::read_dir(scene.data("a").join("tenants")).unwrap() {
        let ws = tenant.unwrap().path().join("workspace");
        if ws.join(&marker).exists() {
            return ws;
        }
    }
    panic!("no workspace holds {marker}");
}

async fn put(scene: &Scene, node: &Node, key: &str, path: &str, body: Vec<u8>) -> (StatusCode, Value) {
    let resp = scene.http.put(node.url(&format!("/v1/workspace/{path}"))).bearer_auth(key).body(body).send().await;
    let resp = resp.unwrap();
    let status = resp.status();
    let text = resp.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

async fn download(scene: &Scene, node: &Node, key: &str, path: &str) -> (StatusCode, Vec<u8>) {
    let resp = scene.http.get(node.url(&format!("/v1/workspace/{path}"))).bearer_auth(key).send().await.unwrap();
    (resp.status(), resp.bytes().await.unwrap().to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workspace_api_keeps_each_tenant_to_its_own_files_within_its_quota() {
    let scene = Scene::new(None).await;
    let alice = scene.tenant("alice", Some(json!({"quotas": {"workspace-bytes": 1000}})));
    let bob = scene.tenant("bob", None);
    // Mallory's runs have a shell in her workspace: they plant links there.
    let mallory = scene.tenant("mallory", Some(json!({"allow": ["shell"], "mode": "auto", "sandboxes": ["local"]})));
    let node = scene.node("a");

    // A new tenant's workspace is there at first use, empty.
    let (status, listed) = scene.get(&node.url("/v1/workspace"), &alice).await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert_eq!((&listed["files"], &listed["bytes"], &listed["quota_bytes"]), (&json!([]), &json!(0), &json!(1000)));

    // Upload, list, download, replace.
    let (status, stored) = put(&scene, &node, &alice, "docs/a.txt", vec![b'a'; 300]).await;
    assert_eq!((status, &stored["size"]), (StatusCode::CREATED, &json!(300)), "{stored}");
    let (_, listed) = scene.get(&node.url("/v1/workspace"), &alice).await;
    assert_eq!(
        listed["files"],
        json!([{"path": "docs", "kind": "dir"}, {"path": "docs/a.txt", "kind": "file", "size": 300}]),
        "{listed}"
    );
    assert_eq!(listed["bytes"], 300);
    assert_eq!(download(&scene, &node, &alice, "docs/a.txt").await, (StatusCode::OK, vec![b'a'; 300]));
    let (status, _) = put(&scene, &node, &alice, "docs/a.txt", vec![b'b'; 200]).await;
    assert_eq!(status, StatusCode::OK, "a replacement");
    assert_eq!(download(&scene, &node, &alice, "docs/a.txt").await, (StatusCode::OK, vec![b'b'; 200]));

    // Over the quota: larger than all of it (413), or than what is left (507); nothing is kept.
    let (status, refused) = put(&scene, &node, &alice, "big.bin", vec![0; 1001]).await;
    assert_eq!((status, &refused["error"]["code"]), (StatusCode::PAYLOAD_TOO_LARGE, &json!("workspace_quota")));
    let (status, refused) = put(&scene, &node, &alice, "b.bin", vec![0; 801]).await;
    assert_eq!(status, StatusCode::INSUFFICIENT_STORAGE, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("holds 200 of its 1000 bytes"), "{refused}");
    let (status, _) = put(&scene, &node, &alice, "b.bin", vec![0; 800]).await;
    assert_eq!(status, StatusCode::CREATED, "exactly what is left fits");
    let (status, _) = put(&scene, &node, &alice, "c.bin", vec![0; 1]).await;
    assert_eq!(status, StatusCode::INSUFFICIENT_STORAGE);
    // Streamed with no declared size: refused where it passes what is left.
    let chunks = futures::stream::iter([Ok::<_, std::io::Error>(vec![0u8; 1]), Ok(vec![0u8; 1])]);
    let body = reqwest::Body::wrap_stream(chunks);
    let resp = scene.http.put(node.url("/v1/workspace/d.bin")).bearer_auth(&alice).body(body).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::INSUFFICIENT_STORAGE);
    // Answered before the body's end: the connection is not reused for the next request.
    assert_eq!(resp.headers().get("connection").map(|v| v.as_bytes()), Some(&b"close"[..]));
    let alice_ws = workspace_of_alice(&scene);
    let names: Vec<String> = walk(&alice_ws);
    assert_eq!(names, ["b.bin", "docs", "docs/a.txt"], "no partial upload is left behind");
    let (status, _) = scene.call(Method::DELETE, &node.url("/v1/workspace/b.bin"), Some(&alice), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert!(!alice_ws.join("b.bin").exists());

    // Paths that try to leave the workspace: refused, whatever the verb (a client may
    // resolve plain `..` itself, so that the request names no workspace path at all: 404).
    let alice_id = alice_ws.parent().unwrap().file_name().unwrap().to_string_lossy().to_string();
    for (path, refused) in [
        ("../../../nexo.db".to_string(), [StatusCode::BAD_REQUEST, StatusCode::NOT_FOUND]),
        ("docs/../../x".to_string(), [StatusCode::BAD_REQUEST, StatusCode::NOT_FOUND]),
        (format!("../../{alice_id}/workspace/docs/a.txt"), [StatusCode::BAD_REQUEST, StatusCode::NOT_FOUND]),
        ("%2e%2e/%2e%2e/%2e%2e/nexo.db".to_string(), [StatusCode::BAD_REQUEST, StatusCode::NOT_FOUND]),
        ("..%2F..%2F..%2Fnexo.db".to_string(), [StatusCode::BAD_REQUEST; 2]),
        (format!("..%2F..%2F{alice_id}%2Fworkspace%2Fdocs%2Fa.txt"), [StatusCode::BAD_REQUEST; 2]),
        ("%2Fetc%2Fpasswd".to_string(), [StatusCode::BAD_REQUEST; 2]),
    ] {
        let (status, answer) = download(&scene, &node, &bob, &path).await;
        assert!(refused.contains(&status), "GET {path}: {status} {}", String::from_utf8_lossy(&answer));
        let (status, answer) = put(&scene, &node, &bob, &path, b"x".to_vec()).await;
        assert!(refused.contains(&status), "PUT {path}: {status} {answer}");
        let url = node.url(&format!("/v1/workspace/{path}"));
        let (status, answer) = scene.call(Method::DELETE, &url, Some(&bob), None).await;
        assert!(refused.contains(&status), "DELETE {path}: {status} {answer}");
    }
    assert!(scene.dir.path().join("nexo.db").exists() && alice_ws.join("docs/a.txt").exists(), "nothing was removed");

    // Another tenant's files are not there for bob, by the same path.
    let (status, _) = download(&scene, &node, &bob, "docs/a.txt").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = scene.call(Method::DELETE, &node.url("/v1/workspace/docs/a.txt"), Some(&bob), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, theirs) = scene.get(&node.url("/v1/workspace"), &bob).await;
    assert_eq!(theirs["files"], json!([]), "{theirs}");
    assert!(alice_ws.join("docs/a.txt").exists());

    // Mallory's run plants symlinks out of her workspace: the API follows none of them.
    let (status, plugin) = scene.upload(&node, &mallory, built::WORKFLOW_PROBE).await;
    assert_eq!(status, StatusCode::CREATED, "{plugin}");
    let mallory_ws = workspace_of(&scene, &node, &mallory).await;
    let command = format!(
        "shell ln -s /etc/passwd passwd && ln -s ../../.. up && ln -s {} alice && ln -s {} alice-dir && mkdir -p d && ln -s ../../../.. d/up",
        alice_ws.join("docs/a.txt").display(),
        alice_ws.display()
    );
    let body = json!({"plugin": plugin["id"], "input": command, "sandbox": "local", "wait": true});
    let (status, run) = scene.post(&node.url("/v1/runs"), &mallory, body).await;
    assert_eq!((status, &run["status"]), (StatusCode::OK, &json!("done")), "{run}\n{}", node.log());
    assert!(mallory_ws.join("passwd").is_symlink() && mallory_ws.join("d/up").is_symlink(), "{run}");
    let through_links = [
        "alice-dir/docs/a.txt".to_string(),
        format!("up/tenants/{alice_id}/workspace/docs/a.txt"),
        "up/nexo.db".to_string(),
        "d/up/nexo.db".to_string(),
    ];
    for path in ["passwd".to_string(), "alice".to_string()].iter().chain(&through_links) {
        let (status, answer) = download(&scene, &node, &mallory, path).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "GET {path}: {}", String::from_utf8_lossy(&answer));
        assert!(!answer.starts_with(b"root:") && answer != vec![b'b'; 200], "GET {path} read through the link");
    }
    for path in &through_links {
        let (status, answer) = put(&scene, &node, &mallory, path, b"overwritten".to_vec()).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "PUT {path}: {answer}");
    }
    assert_eq!(std::fs::read(alice_ws.join("docs/a.txt")).unwrap(), vec![b'b'; 200], "alice's file is untouched");
    // Listed as links, never followed.
    let (_, listed) = scene.get(&node.url("/v1/workspace"), &mallory).await;
    let kinds: Vec<(String, String)> = listed["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["path"].as_str().unwrap().to_string(), f["kind"].as_str().unwrap().to_string()))
        .collect();
    assert!(kinds.contains(&("up".into(), "symlink".into())) && kinds.contains(&("passwd".into(), "symlink".into())));
    assert!(!listed.to_string().contains("a.txt"), "nothing of alice's is listed: {listed}");
    // Deleting a link removes the link only.
    let (status, _) = scene.call(Method::DELETE, &node.url("/v1/workspace/alice"), Some(&mallory), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert!(alice_ws.join("docs/a.txt").exists());
    // A hard link to a file elsewhere (as a run with a wider view could make) is not served.
    std::fs::hard_link(alice_ws.join("docs/a.txt"), mallory_ws.join("hard")).unwrap();
    let (status, answer) = download(&scene, &node, &mallory, "hard").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{}", String::from_utf8_lossy(&answer));
}

fn workspace_of_alice(scene: &Scene) -> std::path::PathBuf {
    // Alice's is the one workspace holding `docs`.
    std::fs::read_dir(scene.data("a").join("tenants"))
        .unwrap()
        .map(|t| t.unwrap().path().join("workspace"))
        .find(|ws| ws.join("docs").exists())
        .unwrap()
}

/// Every path under `dir`, sorted, symlinks not followed.
fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            out.push(path.strip_prefix(dir).unwrap().display().to_string());
            if entry.file_type().unwrap().is_dir() {
                stack.push(path);
            }
        }
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_is_onboarded_with_the_commands_the_docs_show() {
    let scene = Scene::new(None).await;
    let without_config = |args: &[&str]| {
        let mut cmd = common::nexo_command(&scene.dir.path().join("cache"));
        cmd.env("NEXO_STORE", &scene.store).args(args).stdin(std::process::Stdio::null());
        cmd.output().unwrap()
    };
    // A policy that names no model or MCP server needs no config file.
    let plain = scene.dir.path().join("plain.toml");
    std::fs::write(&plain, "allow = [\"write\"]\nmode = \"approve\"\nsandboxes = [\"virtual\", \"local\"]\n").unwrap();
    let out = without_config(&["tenant", "create", "acme", "--policy", &plain.display().to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).trim().starts_with("nexo_sk_"));
    // One that names a model is checked against the config file, and says which one it needs.
    let named = scene.dir.path().join("named.toml");
    std::fs::write(&named, "allow = [\"write\"]\nmodels = [\"test\"]\n").unwrap();
    let out = without_config(&["tenant", "create", "globex", "--policy", &named.display().to_string()]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("[serve.models.test]") && err.contains("NEXO_CONFIG") && err.contains("--config"), "{err}");
    // With the server's config file in NEXO_CONFIG, as docs/serve.md sets it, the same command works.
    let out = scene.nexo(&["tenant", "create", "globex", "--policy", &named.display().to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
}
