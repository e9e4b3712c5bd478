//! Durable timers under load, through real `nexo worker` processes and
//! real stores (SQLite, and PostgreSQL when `NEXO_TEST_POSTGRES` is set).
//!
//! - **Lateness:** runs of the workflow probe sleep 1.5 s (or wait for a
//!   signal the bench sends), and the lateness is the time from the due
//!   time (or the signal) to the resumed run's first new host call (its
//!   journaled start), p50 and p99, for a worker that only polls
//!   (`--no-notify`, every 250 ms) and one that also listens (PostgreSQL's
//!   `LISTEN`).
//! - **Sleepers:** `NEXO_SLEEPERS` (default 100,000) runs asleep at once:
//!   one real sleeping run, copied row for row (its run, journal, events and
//!   wake), the store's size per sleeper, and the time two workers take to
//!   resume them all once they are due.
//!
//! Run with `cargo bench -p nexo --bench timers`.
#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nexo_store::{Location, Store};
use nexo_tests as built;

/// Runs per lateness measurement, of each kind.
const RUNS: usize = 40;

fn nexo(dir: &std::path::Path, store: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nexo"));
    cmd.env("NEXO_CACHE_DIR", dir.join("cache"))
        .env("NEXO_STORE", store)
        .env_remove("NEXO_CONFIG")
        .env_remove("NEXO_MAX_IN_FLIGHT")
        .stdin(Stdio::null());
    cmd
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn worker(dir: &std::path::Path, store: &str, notify: bool, max: u32) -> Killed {
    let mut cmd = nexo(dir, store);
    cmd.args(["worker", "--poll-ms", "250", "--max-in-flight", &max.to_string()]);
    if !notify {
        cmd.arg("--no-notify");
    }
    Killed(cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap())
}

fn queue(dir: &std::path::Path, store: &str, script: &str) -> String {
    let o = nexo(dir, store).args(["run", built::WORKFLOW_PROBE, script, "--later", "--json"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    let v: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    v["run"].as_str().unwrap().to_string()
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn show(label: &str, mut v: Vec<i64>) {
    v.sort();
    println!("  {label}: p50 {} ms, p99 {} ms ({} runs)", percentile(&v, 0.5), percentile(&v, 0.99), v.len());
}

/// When the run's first host call after its wait started: the journaled
/// start of its `checkpoint-begin`.
async fn first_call_after(db: &dyn Store, run: &str) -> i64 {
    let journal = db.journal(run).await.unwrap();
    journal.iter().find(|e| e.function == "checkpoint-begin").and_then(|e| e.started_ms).expect("the resumed call")
}

async fn until(db: &dyn Store, ids: &[String], done: impl Fn(&nexo_store::Run) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let mut all = true;
        for id in ids {
            all &= done(&db.run(id).await.unwrap().unwrap());
        }
        if all {
            return;
        }
        assert!(Instant::now() < deadline, "the runs did not get there");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn lateness(label: &str, store: &str, notify: bool) {
    let dir = tempfile::tempdir().unwrap();
    let db = nexo_store::open(&Location::parse(store).unwrap()).await.unwrap();
    let _worker = worker(dir.path(), store, notify, 8);
    let mut sleepers = Vec::new();
    let mut waiters = Vec::new();
    for i in 0..RUNS {
        sleepers.push(queue(dir.path(), store, "sleep 1500; reserved after"));
        waiters.push(queue(dir.path(), store, &format!("signal go{i}; reserved after")));
    }
    until(&*db, &waiters, |r| r.status == nexo_store::RunStatus::Suspended).await;
    let mut sent = Vec::new();
    for (i, id) in waiters.iter().enumerate() {
        sent.push(db.send_signal(id, &format!("go{i}"), "null").await.unwrap().sent_ms);
        tokio::time::sleep(Duration::from_millis(17 + (i as u64 * 7) % 40)).await;
    }
    let all: Vec<String> = sleepers.iter().chain(&waiters).cloned().collect();
    until(&*db, &all, |r| r.status == nexo_store::RunStatus::Done).await;
    let mut timer = Vec::new();
    for id in &sleepers {
        let events = db.events(id, 0, 100).await.unwrap();
        let due = events.iter().find_map(|e| (e.kind == "suspended").then(|| e.data["wake_ms"].as_i64()).flatten());
        timer.push(first_call_after(&*db, id).await - due.expect("its due time"));
    }
    let mut signal = Vec::new();
    for (id, at) in waiters.iter().zip(sent) {
        signal.push(first_call_after(&*db, id).await - at);
    }
    let how = if notify { "poll 250 ms + notification" } else { "poll 250 ms only (--no-notify)" };
    println!("{label}, {how}:");
    show("timer due → first new host call", timer);
    show("signal sent → first new host call", signal);
}

/// Copies of the template run `tpl` (asleep, with its wake job `wake`)
/// as `sleeper-N`, row for row, their wakes due far off.
macro_rules! clone_sleepers {
    ($conn:expr, $tpl:expr, $wake:expr, $n:expr) => {{
        use sqlx::Connection;
        const BATCH: usize = 1000;
        let mut made = 0;
        while made < $n {
            let mut tx = $conn.begin().await.unwrap();
            for i in made..($n).min(made + BATCH) {
                let (id, job) = (format!("sleeper-{i:06}"), format!("wake-{i:06}"));
                let payload = serde_json::json!({"run": id, "wake_ms": i64::MAX}).to_string();
                sqlx::query(
                    "INSERT INTO runs (id, agent, kind, source, component_sha256, input, grant_json, status, \
                     suspend_reason, resume_key, resume_input, result, error, created_ms, updated_ms, lease_owner, \
                     lease_until_ms, session, tenant, wake_ms, signal_wait, wake_job, parent) SELECT $1, agent, kind, \
                     source, component_sha256, input, grant_json, status, suspend_reason, resume_key, resume_input, \
                     result, error, created_ms, updated_ms, lease_owner, lease_until_ms, session, tenant, wake_ms, \
                     signal_wait, $2, parent FROM runs WHERE id = $3",
                )
                .bind(&id)
                .bind(&job)
                .bind($tpl)
                .execute(&mut *tx)
                .await
                .unwrap();
                sqlx::query(
                    "INSERT INTO journal (run, seq, end_seq, interface, function, args_hash, result, started_ms, \
                     ended_ms) SELECT $1, seq, end_seq, interface, function, args_hash, result, started_ms, ended_ms \
                     FROM journal WHERE run = $2",
                )
                .bind(&id)
                .bind($tpl)
                .execute(&mut *tx)
                .await
                .unwrap();
                sqlx::query("INSERT INTO events (run, kind, data, at_ms) SELECT $1, kind, data, at_ms FROM events WHERE run = $2")
                    .bind(&id)
                    .bind($tpl)
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                sqlx::query(
                    "INSERT INTO jobs (id, run, kind, payload, status, attempts, max_attempts, backoff_ms, \
                     not_before_ms, error, created_ms, updated_ms, queue, turn) SELECT $1, $2, kind, $3, status, \
                     attempts, max_attempts, backoff_ms, not_before_ms, error, created_ms, updated_ms, queue, turn \
                     FROM jobs WHERE id = $4",
                )
                .bind(&job)
                .bind(&id)
                .bind(&payload)
                .bind($wake)
                .execute(&mut *tx)
                .await
                .unwrap();
            }
            tx.commit().await.unwrap();
            made = ($n).min(made + BATCH);
        }
    }};
}

/// Makes every sleeper due now, starts two workers and waits until they
/// finished all of them (or an hour passed): how many runs are done.
macro_rules! resume_all {
    ($conn:expr, $dir:expr, $store:expr, $n:expr, $started:expr) => {{
        sqlx::query("UPDATE jobs SET not_before_ms = $1 WHERE kind = 'wake' AND status = 'sleeping'")
            .bind(nexo_store::now_ms())
            .execute(&mut $conn)
            .await
            .unwrap();
        let _workers = [worker($dir, $store, true, 16), worker($dir, $store, true, 16)];
        loop {
            let (done,): (i64,) =
                sqlx::query_as("SELECT COUNT(*) FROM runs WHERE status = 'done'").fetch_one(&mut $conn).await.unwrap();
            if done as usize > $n || $started.elapsed() > Duration::from_secs(3600) {
                break done as usize;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }};
}

async fn sleepers(label: &str, store: &str, n: usize, size: impl AsyncFn() -> u64) {
    let dir = tempfile::tempdir().unwrap();
    // The template: a real run, asleep for an hour.
    let o = nexo(dir.path(), store)
        .args(["run", built::WORKFLOW_PROBE, "sleep 3600000; reserved after", "--json"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(4), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&o.stdout).lines().last().unwrap()).unwrap();
    let tpl = v["run"].as_str().unwrap().to_string();
    let db = nexo_store::open(&Location::parse(store).unwrap()).await.unwrap();
    let wake = db.run(&tpl).await.unwrap().unwrap().wake_job.expect("its wake");
    let before = size().await;
    let started = Instant::now();
    if store.starts_with("postgres") {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(store).await.unwrap();
        clone_sleepers!(conn, &tpl, &wake, n);
    } else {
        use sqlx::Connection;
        let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{store}")).await.unwrap();
        clone_sleepers!(conn, &tpl, &wake, n);
    }
    let made = started.elapsed();
    let after = size().await;
    println!(
        "{label}: {n} sleeping runs written in {:.1} s; the store grew {:.1} MiB, {} bytes per sleeping run",
        made.as_secs_f64(),
        (after - before) as f64 / (1 << 20) as f64,
        (after - before) / n as u64
    );
    let started = Instant::now();
    let done = if store.starts_with("postgres") {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(store).await.unwrap();
        resume_all!(conn, dir.path(), store, n, started)
    } else {
        use sqlx::Connection;
        let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{store}")).await.unwrap();
        resume_all!(conn, dir.path(), store, n, started)
    };
    let took = started.elapsed().as_secs_f64();
    println!(
        "{label}: two workers (16 jobs each) resumed {} of them in {took:.1} s ({:.0} runs/s)",
        done - 1,
        (done - 1) as f64 / took
    );
}

fn main() {
    // `cargo bench` passes `--bench`; a test run (`cargo test --benches`) does not.
    if !std::env::args().any(|a| a == "--bench") {
        println!("timers bench: skipped outside `cargo bench`");
        return;
    }
    let n: usize = std::env::var("NEXO_SLEEPERS").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("lateness.db").display().to_string();
        lateness("sqlite", &store, false).await;
        let postgres = std::env::var("NEXO_TEST_POSTGRES").ok().filter(|v| !v.is_empty());
        if let Some(url) = &postgres {
            for notify in [false, true] {
                lateness("postgres", &fresh_database(url, &format!("late_{notify}")).await, notify).await;
            }
        } else {
            println!("postgres: skipped, NEXO_TEST_POSTGRES is unset");
        }
        let file = dir.path().join("sleepers.db");
        let store = file.display().to_string();
        // The database file once its write-ahead log is folded in.
        let size = async || {
            use sqlx::Connection;
            let url = format!("sqlite://{}", file.display());
            if let Ok(mut conn) = sqlx::SqliteConnection::connect(&url).await {
                let _ = sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(&mut conn).await;
            }
            std::fs::metadata(&file).map_or(0, |m| m.len())
        };
        sleepers("sqlite", &store, n, size).await;
        if let Some(url) = &postgres {
            let db = fresh_database(url, "sleepers").await;
            let size = async || {
                use sqlx::Connection;
                let mut conn = sqlx::PgConnection::connect(&db).await.unwrap();
                let (bytes,): (i64,) =
                    sqlx::query_as("SELECT pg_database_size(current_database())").fetch_one(&mut conn).await.unwrap();
                bytes as u64
            };
            sleepers("postgres", &db, n, size).await;
        }
    });
}

/// A new database on the server `admin` points at.
async fn fresh_database(admin: &str, what: &str) -> String {
    use sqlx::Connection;
    let name = format!("nexo_bench_timers_{}_{what}", std::process::id());
    let mut conn = sqlx::PgConnection::connect(admin).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&mut conn).await.unwrap();
    let (base, _) = admin.rsplit_once('/').unwrap();
    format!("{base}/{name}")
}
