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
//! 2000 samples each after a warm-up, twice: in blocks (each back to back,
//! as criterion runs them) and interleaved (one of each in turn), with two
//! operations for context, and prints p50/p90/p99 and the ratios.
//! `-- --p50` runs only that:
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
use nexo_store::{Batch, Entry, Lease, NewEvent, NewRun, RunStatus, Runs, SqliteStore};
use serde_json::json;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sqlx::{ConnectOptions, SqliteConnection};

const SAMPLES: usize = 2000;
const WARMUP: usize = 200;
const OWNER: &str = "bench-host:1:nonce";
const RUN: &str = "r0000000000bench0000000000";

/// A journal entry of about 300 bytes: the run id (27), four integers, the
/// interface and function, the 64-hex argument hash and a JSON result.
fn entry(seq: u64) -> Entry {
    Entry {
        seq,
        end: seq + 1,
        interface: "nexo:plugin/tools".into(),
        function: "read-file".into(),
        args_hash: "5f".repeat(32),
        result: format!(r#"{{"ok":"{}"}}"#, "x".repeat(170)),
        started_ms: Some(1_700_000_000_000),
        ended_ms: Some(1_700_000_000_001),
    }
}

fn entry_bytes() -> usize {
    let e = entry(0);
    RUN.len() + 32 + e.interface.len() + e.function.len() + e.args_hash.len() + e.result.len()
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
            session: None,
            tenant: None,
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

/// What the p50 run times.
const OPS: [&str; 4] = ["bare insert", "journal append", "  + 2 events", "bare, sync=OFF"];

/// The connections and the store the p50 run writes through, each on a
/// fresh file of its own.
struct Targets {
    bare: SqliteConnection,
    unsynced: SqliteConnection,
    store: SqliteStore,
    payload: String,
    next: u64,
}

impl Targets {
    /// Runs operation `op` of [`OPS`] once and times it.
    async fn time(&mut self, op: usize) -> Duration {
        self.next += 1;
        let n = self.next;
        let start = Instant::now();
        match op {
            0 => bare_insert(&mut self.bare, n as i64, &self.payload).await,
            1 => append(&self.store, n).await,
            2 => append_with_events(&self.store, n).await,
            _ => bare_insert(&mut self.unsynced, n as i64, &self.payload).await,
        }
        start.elapsed()
    }
}

/// Times every operation `SAMPLES` times after `WARMUP` untimed ones, in
/// one of two schedules: in blocks (250 of one operation, then 250 of the
/// next, round and round: each runs back to back as in criterion) or
/// interleaved (one of each in turn, the first of each round rotating, so
/// none always follows another's fsync).
async fn schedule(targets: &mut Targets, blocks: bool) -> Vec<Vec<Duration>> {
    const BLOCK: usize = 250;
    let mut times = vec![Vec::with_capacity(SAMPLES); OPS.len()];
    for op in 0..OPS.len() {
        for _ in 0..WARMUP {
            targets.time(op).await;
        }
    }
    if blocks {
        for _ in 0..SAMPLES / BLOCK {
            for (op, samples) in times.iter_mut().enumerate() {
                for _ in 0..BLOCK {
                    samples.push(targets.time(op).await);
                }
            }
        }
    } else {
        for round in 0..SAMPLES {
            for k in 0..OPS.len() {
                let op = (round + k) % OPS.len();
                let took = targets.time(op).await;
                times[op].push(took);
            }
        }
    }
    for samples in &mut times {
        samples.sort();
    }
    times
}

fn p50() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(async {
        let mut targets = Targets {
            bare: bare_connection(dir.path(), SqliteSynchronous::Full).await,
            unsynced: bare_connection(dir.path(), SqliteSynchronous::Off).await,
            store: store(dir.path()).await,
            payload: payload(),
            next: 0,
        };
        println!("p50 over {SAMPLES} samples each ({} byte rows, WAL, synchronous=FULL unless said):", entry_bytes());
        for (blocks, title) in [(true, "in blocks of 250"), (false, "interleaved")] {
            let times = schedule(&mut targets, blocks).await;
            println!("{title}:");
            for (name, samples) in OPS.iter().zip(&times) {
                println!(
                    "  {name:<15} p50 {:>9.1?}  p90 {:>9.1?}  p99 {:>9.1?}",
                    percentile(samples, 0.5),
                    percentile(samples, 0.9),
                    percentile(samples, 0.99)
                );
            }
            let ratio = percentile(&times[1], 0.5).as_secs_f64() / percentile(&times[0], 0.5).as_secs_f64();
            println!("  ratio journal append / bare insert at p50: {ratio:.3} (target ≤ 1.3)");
        }
    });
    println!("for context, not in the target: `+ 2 events` is an entry with two events in one transaction;");
    println!("`bare, sync=OFF` is the bare insert without its fsync: what sqlx and SQLite cost per statement");
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
