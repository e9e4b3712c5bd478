//! The jobs queue: how many jobs a second workers take through it, and how
//! long a job waits between its enqueue and its claim.
//!
//! - throughput: jobs enqueued up front, then claimed and completed
//!   (`claim_job` + `complete_job`) until none is left, by one worker on
//!   SQLite, and by three workers, each with its own store (pool), on
//!   PostgreSQL;
//! - latency: one worker polls (`claim_job`, then 1 ms of sleep when
//!   nothing is due) while another store enqueues a job every 10 ms; the
//!   time from just before `enqueue` to the claim returning it, p50 and
//!   p99.
//!
//! The PostgreSQL half needs `NEXO_TEST_POSTGRES` (a server where it may
//! create a database, see `scripts/postgres.sh`) and says so when it is
//! unset. A custom timing loop, not criterion: the numbers are rates and
//! percentiles over many concurrent operations.
//!
//! ```text
//! NEXO_TEST_POSTGRES=$(./scripts/postgres.sh) cargo bench -p nexo-store --bench jobs
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use nexo_store::{JobKind, NewJob, PgStore, SqliteStore, Store};
use serde_json::json;

const THROUGHPUT_JOBS: usize = 2_000;
const LATENCY_JOBS: usize = 300;
/// Between enqueues: well under what one worker takes, so no backlog
/// builds and the wait is the queue's own.
const LATENCY_GAP: Duration = Duration::from_millis(10);
/// How long the worker waits before polling again when nothing is due.
const POLL: Duration = Duration::from_millis(1);
const LEASE_MS: i64 = 600_000;

fn job(i: usize) -> NewJob {
    NewJob {
        id: format!("j{i:06}"),
        run: "r-bench".into(),
        kind: JobKind::Start,
        payload: json!({"run": "r-bench"}),
        max_attempts: 3,
        backoff_ms: 1_000,
        not_before_ms: 0,
        created_ms: nexo_store::now_ms(),
    }
}

/// Claims and completes until nothing is due; returns how many.
async fn drain(store: Arc<dyn Store>, worker: String) -> usize {
    let mut n = 0;
    while let Some(job) = store.claim_job(&worker, LEASE_MS, nexo_store::now_ms()).await.unwrap() {
        store.complete_job(&job.id, job.lease.as_ref().unwrap(), nexo_store::now_ms()).await.unwrap();
        n += 1;
    }
    n
}

async fn throughput(name: &str, stores: Vec<Arc<dyn Store>>) {
    stores[0].create_run(support::queued_run("r-bench")).await.unwrap();
    for i in 0..THROUGHPUT_JOBS {
        stores[0].enqueue(job(i)).await.unwrap();
    }
    let start = Instant::now();
    let tasks: Vec<_> =
        stores.iter().enumerate().map(|(w, s)| tokio::spawn(drain(s.clone(), format!("bench:{w}")))).collect();
    let mut done = 0;
    for t in tasks {
        done += t.await.unwrap();
    }
    let took = start.elapsed();
    assert_eq!(done, THROUGHPUT_JOBS);
    println!("{name}: {done} jobs claimed and completed in {took:.2?}: {:.0} jobs/s", done as f64 / took.as_secs_f64());
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn latency(name: &str, producer: Arc<dyn Store>, worker: Arc<dyn Store>) {
    producer.create_run(support::queued_run("r-latency")).await.unwrap();
    let enqueued: Arc<std::sync::Mutex<std::collections::HashMap<String, Instant>>> = Arc::default();
    let stamps = enqueued.clone();
    let feeder = tokio::spawn(async move {
        for i in 0..LATENCY_JOBS {
            let job = NewJob { id: format!("l{i:06}"), run: "r-latency".into(), ..job(i) };
            stamps.lock().unwrap().insert(job.id.clone(), Instant::now());
            producer.enqueue(job).await.unwrap();
            tokio::time::sleep(LATENCY_GAP).await;
        }
    });
    let mut waits = Vec::with_capacity(LATENCY_JOBS);
    while waits.len() < LATENCY_JOBS {
        match worker.claim_job("bench:latency", LEASE_MS, nexo_store::now_ms()).await.unwrap() {
            Some(job) => {
                let at = enqueued.lock().unwrap()[&job.id];
                waits.push(at.elapsed());
                worker.complete_job(&job.id, job.lease.as_ref().unwrap(), nexo_store::now_ms()).await.unwrap();
            }
            None => tokio::time::sleep(POLL).await,
        }
    }
    feeder.await.unwrap();
    waits.sort();
    println!(
        "{name}: enqueue to claim over {LATENCY_JOBS} jobs (one enqueue every {LATENCY_GAP:?}, the worker polling every {POLL:?} when idle): p50 {:.2?}, p99 {:.2?}",
        percentile(&waits, 0.5),
        percentile(&waits, 0.99)
    );
}

fn main() {
    // `cargo test --benches` runs this without `--bench`: do nothing then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("throughput.db");
        throughput("SQLite, 1 worker", vec![Arc::new(SqliteStore::open(&path).await.unwrap())]).await;
        let path = dir.path().join("latency.db");
        let (a, b) = (SqliteStore::open(&path).await.unwrap(), SqliteStore::open(&path).await.unwrap());
        latency("SQLite", Arc::new(a), Arc::new(b)).await;

        let Some(db) = support::fresh("bench jobs (PostgreSQL)").await else { return };
        let mut stores: Vec<Arc<dyn Store>> = Vec::new();
        for _ in 0..3 {
            stores.push(Arc::new(PgStore::open(&db.url).await.unwrap()));
        }
        throughput("PostgreSQL, 3 workers (3 stores)", stores).await;
        let (a, b) = (PgStore::open(&db.url).await.unwrap(), PgStore::open(&db.url).await.unwrap());
        latency("PostgreSQL", Arc::new(a), Arc::new(b)).await;
        db.drop().await;
    });
}
