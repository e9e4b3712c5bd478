//! The cost of journaling one host call, against the floor SQLite sets.
//!
//! - `bare insert`: a raw sqlx `INSERT` of a ~300-byte row on one
//!   connection to a fresh file in WAL mode with `synchronous=FULL`, one
//!   autocommit statement per iteration: the least a durable write costs.
//! - `journal append`: `SqliteStore::commit` of a batch holding one
//!   ~300-byte journal entry for a running run, on a fresh file of its own.
//!
//! Both run in one process, one after the other, so their ratio means
//! something; the target is `journal append` ≤ 1.3 × `bare insert` at p50.
//! Criterion reports means and medians (on a shared virtual disk the
//! means follow fsync's long tail). After it, the p50 run times both again,
//! interleaved (one bare insert and one append, in alternating order, 2000
//! times after a warm-up), with two lines for context, and prints
//! p50/p90/p99 and the ratio. `-- --p50` runs only that:
//!
//! ```text
//! cargo bench -p nexo-store --bench journal
//! cargo bench -p nexo-store --bench journal -- --p50
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::cell::Cell;
use std::path::Path;
use std::time::{Duration, Instant};

use criterion::Criterion;
use nexo_store::{Batch, Entry, Lease, NewEvent, NewRun, RunStatus, SqliteStore, Store};
use serde_json::json;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sqlx::{ConnectOptions, SqliteConnection};

const SAMPLES: usize = 2000;
const WARMUP: usize = 200;
const OWNER: &str = "bench-host:1:nonce";
const RUN: &str = "r0000000000bench0000000000";

/// A journal entry of about 300 bytes: the run id (27), two integers, the
/// interface and function, the 64-hex argument hash and a JSON result.
fn entry(seq: u64) -> Entry {
    Entry {
        seq,
        end: seq + 1,
        interface: "nexo:plugin/tools".into(),
        function: "read-file".into(),
        args_hash: "5f".repeat(32),
        result: format!(r#"{{"ok":"{}"}}"#, "x".repeat(170)),
    }
}

fn entry_bytes() -> usize {
    let e = entry(0);
    RUN.len() + 16 + e.interface.len() + e.function.len() + e.args_hash.len() + e.result.len()
}

/// A row of the same size for the bare insert.
fn payload() -> String {
    "y".repeat(entry_bytes() - 8)
}

/// One connection to a fresh file in WAL mode with the bare table: a rowid
/// table, the cheapest insert SQLite has (one B-tree, no index), so the
/// floor is as low as it goes.
async fn bare_connection(dir: &Path, synchronous: SqliteSynchronous) -> SqliteConnection {
    let name = format!("bare-{synchronous:?}.db");
    let mut conn = SqliteConnectOptions::new()
        .filename(dir.join(name))
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(synchronous)
        .connect()
        .await
        .unwrap();
    sqlx::query("CREATE TABLE bare (k INTEGER PRIMARY KEY, v TEXT NOT NULL)").execute(&mut conn).await.unwrap();
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode").fetch_one(&mut conn).await.unwrap();
    assert_eq!(mode, "wal");
    conn
}

async fn bare_insert(conn: &mut SqliteConnection, k: i64, v: &str) {
    sqlx::query("INSERT INTO bare (k, v) VALUES ($1, $2)").bind(k).bind(v).execute(conn).await.unwrap();
}

/// A store on a fresh file with one running run.
async fn store(dir: &Path) -> SqliteStore {
    let store = SqliteStore::open(dir.join("nexo.db")).await.unwrap();
    store
        .create_run(NewRun {
            id: RUN.into(),
            agent: "bench".into(),
            kind: "component".into(),
            source: "/agents/bench.wasm".into(),
            component_sha256: "ab".repeat(32),
            input: "benchmark".into(),
            grant: json!({"allow": ["files"]}),
            status: RunStatus::Running,
            lease: Some(Lease { owner: OWNER.into(), until_ms: i64::MAX / 2 }),
            created_ms: nexo_store::now_ms(),
        })
        .await
        .unwrap();
    store
}

async fn append(store: &SqliteStore, seq: u64) {
    store.commit(RUN, OWNER, Batch { journal: vec![entry(seq)], ..Batch::default() }).await.unwrap();
}

/// For context, outside the target: what a host call usually commits, its
/// entry with a `tool_call` and a `tool_result` event (one transaction).
async fn append_with_events(store: &SqliteStore, seq: u64) {
    let event = |kind: &str| NewEvent { kind: kind.into(), data: json!({"tool": "read_file", "seq": seq}), at_ms: 0 };
    let batch =
        Batch { journal: vec![entry(seq)], events: vec![event("tool_call"), event("tool_result")], ..Batch::default() };
    store.commit(RUN, OWNER, batch).await.unwrap();
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn criterion_benches(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("journal");
    group.sample_size(100).measurement_time(Duration::from_secs(10));

    let dir = tempfile::tempdir().unwrap();
    let mut conn = rt.block_on(bare_connection(dir.path(), SqliteSynchronous::Full));
    let v = payload();
    let k = Cell::new(0i64);
    group.bench_function("bare insert", |b| {
        b.iter(|| {
            k.set(k.get() + 1);
            rt.block_on(bare_insert(&mut conn, k.get(), &v));
        })
    });

    let store = rt.block_on(store(dir.path()));
    let seq = Cell::new(0u64);
    group.bench_function("journal append", |b| {
        b.iter(|| {
            rt.block_on(append(&store, seq.get()));
            seq.set(seq.get() + 1);
        })
    });
    group.finish();
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn p50() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let (mut bare_times, mut append_times, mut context_times, mut unsynced_times) = rt.block_on(async {
        let mut conn = bare_connection(dir.path(), SqliteSynchronous::Full).await;
        let mut unsynced = bare_connection(dir.path(), SqliteSynchronous::Off).await;
        let store = store(dir.path()).await;
        let v = payload();
        let mut bare_times = Vec::with_capacity(SAMPLES);
        let mut append_times = Vec::with_capacity(SAMPLES);
        let mut context_times = Vec::with_capacity(SAMPLES);
        let mut unsynced_times = Vec::with_capacity(SAMPLES);
        for i in 0..WARMUP + SAMPLES {
            // Which goes first alternates, so neither always follows the
            // other's fsync.
            let (mut bare, mut appended) = (Duration::ZERO, Duration::ZERO);
            for first in [i % 2 == 0, i % 2 == 1] {
                let start = Instant::now();
                if first {
                    bare_insert(&mut conn, i as i64, &v).await;
                    bare = start.elapsed();
                } else {
                    append(&store, i as u64).await;
                    appended = start.elapsed();
                }
            }
            let start = Instant::now();
            append_with_events(&store, (WARMUP + SAMPLES + i) as u64).await;
            let context = start.elapsed();
            let start = Instant::now();
            bare_insert(&mut unsynced, i as i64, &v).await;
            let no_fsync = start.elapsed();
            if i >= WARMUP {
                bare_times.push(bare);
                append_times.push(appended);
                context_times.push(context);
                unsynced_times.push(no_fsync);
            }
        }
        (bare_times, append_times, context_times, unsynced_times)
    });
    bare_times.sort();
    append_times.sort();
    context_times.sort();
    unsynced_times.sort();
    println!("p50 over {SAMPLES} interleaved samples each ({} byte rows, WAL, synchronous=FULL):", entry_bytes());
    for (name, times) in [
        ("bare insert", &bare_times),
        ("journal append", &append_times),
        ("  + 2 events", &context_times),
        ("bare, sync=OFF", &unsynced_times),
    ] {
        println!(
            "  {name:<15} p50 {:>9.1?}  p90 {:>9.1?}  p99 {:>9.1?}",
            percentile(times, 0.5),
            percentile(times, 0.9),
            percentile(times, 0.99)
        );
    }
    let ratio = percentile(&append_times, 0.5).as_secs_f64() / percentile(&bare_times, 0.5).as_secs_f64();
    println!("  ratio journal append / bare insert at p50: {ratio:.3} (target ≤ 1.3)");
    println!("  for context, not in the target: `+ 2 events` is an entry with two events in one transaction;");
    println!("  `bare, sync=OFF` is the bare insert without its fsync: what sqlx and SQLite cost per statement");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--p50") {
        p50();
        return;
    }
    let mut criterion = Criterion::default().configure_from_args();
    criterion_benches(&mut criterion);
    criterion.final_summary();
    // `cargo bench` passes `--bench`; `cargo test --benches` does not, and
    // then criterion runs each benchmark once, as a test, and so do we not.
    if args.iter().any(|a| a == "--bench") {
        p50();
    }
}
