//! A tenant's audit log cut short behind the server's back, in a real
//! SQLite store: its tail deleted and its head (the tenant row's) set back
//! to an older entry, or to the genesis hash. The chain alone still
//! verifies; against the anchor file `nexo serve` wrote next to its data,
//! `nexo audit verify --anchor` fails, naming the tenant and what is gone.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::path::Path;
use std::time::{Duration, Instant};

use nexo_tests as built;
use serde_json::Value;

mod common;

use common::scene::Scene;
use common::{stderr, stdout};

/// Keeps alice's first `keep` entries, and sets her head back to match
/// (to the genesis hash when `keep` is 0), as someone with the database
/// but not the server's files could.
async fn cut(store: &Path, tenant: &str, keep: u64) {
    use sqlx::Connection;
    let url = format!("sqlite://{}", store.display());
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let keep = i64::try_from(keep).unwrap();
    sqlx::query("DELETE FROM audit_log WHERE tenant = $1 AND seq > $2")
        .bind(tenant)
        .bind(keep)
        .execute(&mut conn)
        .await
        .unwrap();
    let hash: String = if keep == 0 {
        nexo_store::AUDIT_GENESIS.to_string()
    } else {
        sqlx::query_scalar("SELECT hash FROM audit_log WHERE tenant = $1 AND seq = $2")
            .bind(tenant)
            .bind(keep)
            .fetch_one(&mut conn)
            .await
            .unwrap()
    };
    sqlx::query("UPDATE tenants SET audit_seq = $2, audit_hash = $3 WHERE id = $1")
        .bind(tenant)
        .bind(keep)
        .bind(hash)
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_cut_short_with_its_head_fails_against_the_anchor() {
    let scene = Scene::new(None).await;
    let alice = scene.tenant("alice", None);
    let bob = scene.tenant("bob", None);
    let node = scene.node("a");
    // Two more entries for alice, through the server.
    for wasm in [built::WEB_PROBE, built::MCP_PROBE] {
        assert!(scene.upload(&node, &alice, wasm).await.0.is_success());
    }
    let (_, log) = scene.get(&node.url("/v1/audit"), &alice).await;
    let entries = log["entries"].as_array().unwrap().clone();
    assert_eq!(entries.len(), 4, "{log}");
    let last: &Value = entries.last().unwrap();
    let tenant = last["tenant"].as_str().unwrap().to_string();
    // The server anchors each new head within a second.
    let anchor = scene.data("a").join("audit-anchor");
    let line = format!("{tenant} 4 {}", last["hash"].as_str().unwrap());
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&anchor).unwrap_or_default().lines().any(|l| l == line) {
        assert!(Instant::now() < deadline, "{line} is not anchored: {:?}", std::fs::read_to_string(&anchor));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(scene.get(&node.url("/v1/audit"), &bob).await.0.is_success());
    drop(node);
    let anchor_arg = anchor.display().to_string();
    let verify = |with_anchor: bool| {
        let mut args = vec!["audit", "verify"];
        if with_anchor {
            args.extend(["--anchor", anchor_arg.as_str()]);
        }
        scene.nexo(&args)
    };
    let out = verify(true);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("alice: ok, 4 entries"), "{}", stdout(&out));

    // The tail deleted and the head set back to entry 2: the chain alone still verifies.
    cut(Path::new(&scene.store), &tenant, 2).await;
    let out = verify(false);
    assert!(out.status.success(), "the gap the anchor closes: {}", stdout(&out));
    let out = verify(true);
    assert_eq!(out.status.code(), Some(1), "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("alice: BROKEN") && text.contains("ends at entry 2"), "{text}");
    assert!(text.contains("entries 3 to 4 were removed"), "{text}");
    assert!(text.contains("bob: ok"), "another tenant's log is not touched: {text}");

    // Reset to the genesis hash, no entry left.
    cut(Path::new(&scene.store), &tenant, 0).await;
    let out = verify(true);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(stdout(&out).contains("alice: BROKEN") && stdout(&out).contains("entries 1 to 4"), "{}", stdout(&out));
}

/// A crash mid-write leaves a torn last line: `nexo audit verify` leaves it
/// out with a warning, and `nexo serve` starts, cutting it off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_last_line_neither_stops_the_server_nor_fails_verify() {
    let scene = Scene::new(None).await;
    let alice = scene.tenant("alice", None);
    let node = scene.node("a");
    assert!(scene.upload(&node, &alice, built::WEB_PROBE).await.0.is_success());
    let anchor = scene.data("a").join("audit-anchor");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(&anchor).unwrap_or_default().lines().count() == 0 {
        assert!(Instant::now() < deadline, "nothing anchored");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(node);
    let whole = std::fs::read_to_string(&anchor).unwrap();
    std::fs::write(&anchor, format!("{whole}{}", &whole[..whole.len() / 2])).unwrap();

    let out = scene.nexo(&["audit", "verify", "--anchor", anchor.to_str().unwrap()]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(stderr(&out).contains("cut short"), "{}", stderr(&out));

    let node = scene.node("a");
    assert!(scene.get(&node.url("/v1/audit"), &alice).await.0.is_success(), "{}", node.log());
    assert_eq!(std::fs::read_to_string(&anchor).unwrap()[..whole.len()], whole);
    assert!(std::fs::read_to_string(&anchor).unwrap().ends_with('\n'));
    assert!(node.log().contains("cut short by a crash"), "{}", node.log());
}
