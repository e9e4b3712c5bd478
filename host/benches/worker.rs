//! The latency from enqueue to start through a real `nexo worker`: runs are
//! queued one by one with `nexo run --later` (a process each, as an
//! application would), a worker process takes them from a SQLite store
//! (and from PostgreSQL when `NEXO_TEST_POSTGRES` is set), and a loopback
//! model server notes when each run's first model call arrives. Reported:
//! enqueue → claim (the worker logs the job it took), and enqueue → first model
//! call (the agent is loaded, prepared and running), p50 and p99, for a
//! worker polling every 20 ms and every 250 ms (the default). Run with
//! `cargo bench -p nexo --bench worker`.
#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

/// Runs queued per measurement.
const RUNS: usize = 60;

/// When each run's first model call arrived, by its input.
type Arrivals = Arc<Mutex<HashMap<String, i64>>>;

async fn model_server() -> (String, Arrivals) {
    let arrivals: Arrivals = Arc::default();
    let seen = arrivals.clone();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move |body: String| {
            let seen = seen.clone();
            async move {
                let at = nexo_store::now_ms();
                let body: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
                let input = body["messages"]
                    .as_array()
                    .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
                    .and_then(|m| m["content"].as_str())
                    .unwrap_or_default()
                    .to_string();
                seen.lock().unwrap().entry(input).or_insert(at);
                let reply = json!({
                    "id": "c", "object": "chat.completion", "model": "m",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
                });
                ([(axum::http::header::CONTENT_TYPE, "application/json")], reply.to_string())
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, arrivals)
}

fn nexo(dir: &std::path::Path, store: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nexo"));
    cmd.env("NEXO_CACHE_DIR", dir.join("cache"))
        .env("NEXO_STORE", store)
        .env("OPENAI_API_KEY", "sk-bench")
        .env_remove("NEXO_CONFIG")
        .env_remove("NEXO_MAX_IN_FLIGHT")
        .stdin(Stdio::null());
    cmd
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn measure(label: &str, store: &str, poll_ms: u64) {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent.toml");
    std::fs::write(&agent, "name = \"bg\"\ndescription = \"d\"\ninstructions = \"Answer.\"\n").unwrap();
    let (url, arrivals) = model_server().await;
    let mut worker = nexo(dir.path(), store)
        .args(["worker", "--poll-ms", &poll_ms.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The worker logs `job J: run R (attempt …)` as it claims a job.
    let claims: Arrivals = Arc::default();
    let stderr = worker.stderr.take().unwrap();
    let noted = claims.clone();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            let at = nexo_store::now_ms();
            if let Some(rest) = line.split_once(": run ").map(|(_, r)| r)
                && rest.contains("(attempt")
                && let Some(run) = rest.split_whitespace().next()
            {
                noted.lock().unwrap().entry(run.to_string()).or_insert(at);
            }
        }
    });
    let agent = agent.display().to_string();
    for i in 0..RUNS {
        let input = format!("{label} job {i}");
        let o = nexo(dir.path(), store)
            .args(["run", &agent, &input, "--later", "--provider", "openai-compatible", "--base-url", &url])
            .args(["--model", "m"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        // Spread the arrivals over the poll interval.
        tokio::time::sleep(Duration::from_millis(17 + (i as u64 * 7) % 40)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while arrivals.lock().unwrap().len() < RUNS {
        assert!(Instant::now() < deadline, "the worker did not start every run");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = worker.kill();
    let _ = worker.wait();

    let db = nexo_store::open(&nexo_store::Location::parse(store).unwrap()).await.unwrap();
    let jobs = db.jobs(None, 10_000).await.unwrap();
    let arrivals = arrivals.lock().unwrap().clone();
    let (mut claim, mut first_call) = (Vec::new(), Vec::new());
    for job in jobs {
        let run = db.run(&job.run).await.unwrap().unwrap();
        let Some(at) = arrivals.get(&run.input) else { continue };
        if !run.input.starts_with(label) {
            continue;
        }
        if let Some(claimed) = claims.lock().unwrap().get(&run.id) {
            claim.push(claimed - job.created_ms);
        }
        first_call.push(at - job.created_ms);
    }
    claim.sort();
    first_call.sort();
    assert_eq!(first_call.len(), RUNS);
    let show = |v: &[i64]| {
        if v.is_empty() {
            "n/a".to_string()
        } else {
            format!("p50 {} ms, p99 {} ms", percentile(v, 0.5), percentile(v, 0.99))
        }
    };
    println!(
        "{label}: poll {poll_ms} ms, {RUNS} runs: enqueue → claim {}; enqueue → first model call {}",
        show(&claim),
        show(&first_call)
    );
}

fn main() {
    // `cargo bench` passes `--bench`; a test run (`cargo test --benches`) does not.
    if !std::env::args().any(|a| a == "--bench") {
        println!("worker bench: skipped outside `cargo bench`");
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        for poll in [20, 250] {
            let store = dir.path().join(format!("poll-{poll}.db")).display().to_string();
            measure("sqlite", &store, poll).await;
        }
        match std::env::var("NEXO_TEST_POSTGRES").ok().filter(|v| !v.is_empty()) {
            Some(url) => {
                for poll in [20, 250] {
                    let db = fresh_database(&url, poll).await;
                    measure("postgres", &db, poll).await;
                }
            }
            None => println!("postgres: skipped, NEXO_TEST_POSTGRES is unset"),
        }
    });
}

/// A new database on the server `admin` points at.
async fn fresh_database(admin: &str, poll: u64) -> String {
    use sqlx::Connection;
    let name = format!("nexo_bench_worker_{}_{poll}", std::process::id());
    let mut conn = sqlx::PgConnection::connect(admin).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&mut conn).await.unwrap();
    let (base, _) = admin.rsplit_once('/').unwrap();
    format!("{base}/{name}")
}
