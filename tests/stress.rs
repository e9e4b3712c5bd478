//! Adversarial plugins at scale: 1,000 runs of the misbehaving test plugins
//! (spin, hog, trap, escape) mixed with healthy ones (hello with a scripted
//! model, text-stats) on one engine, eight at a time. Every healthy run
//! succeeds, every bad one gets its own typed error, and afterwards the
//! process's resident memory is back within 10% of what it was after a
//! warm-up batch. Its own test binary, so no other test's memory counts.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nexo::settings::{Providers, RunLimits, RunOptions};
use nexo::{Engine, EngineConfig, Plugin, RunError};
use nexo_tests as built;

/// Runs after the warm-up, and at once.
const RUNS: usize = 1000;
const WARM_UP: usize = 200;
const CONCURRENCY: usize = 8;
/// The spinning plugin's deadline.
const SPIN_DEADLINE: Duration = Duration::from_millis(60);
const MEMORY_CAP: usize = 32 << 20;

#[derive(Clone, Copy, Debug)]
enum Kind {
    Spin,
    Hog,
    Trap,
    Escape,
    Hello,
    TextStats,
}

/// The mix: one in three runs is healthy.
const MIX: [Kind; 9] = [
    Kind::Spin,
    Kind::Hog,
    Kind::Trap,
    Kind::Escape,
    Kind::Hello,
    Kind::TextStats,
    Kind::Trap,
    Kind::Hello,
    Kind::TextStats,
];

struct Plugins {
    spin: Plugin,
    hog: Plugin,
    trap: Plugin,
    escape: Plugin,
    hello: Plugin,
    text_stats: Plugin,
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn scripted() -> Arc<dyn nexo_model::Provider> {
    let script: nexo_model::scripted::Script = serde_json::from_value(serde_json::json!({
        "turns": [{ "text": "Hello from the script." }]
    }))
    .unwrap();
    Arc::new(nexo_model::ScriptedProvider::new("stress", script))
}

/// One run of `kind`, checked.
async fn run(plugins: &Plugins, kind: Kind, i: usize, probe_port: u16) {
    match kind {
        Kind::Spin => {
            let options = RunOptions {
                limits: RunLimits { timeout: Some(SPIN_DEADLINE), ..RunLimits::default() },
                ..RunOptions::default()
            };
            match plugins.spin.run_agent("go", &options).await {
                Err(RunError::Deadline { plugin, .. }) => assert_eq!(plugin, "spin"),
                other => panic!("run {i}: spin got {other:?}"),
            }
        }
        Kind::Hog => match plugins.hog.run_agent("eat", &RunOptions::default()).await {
            Err(RunError::MemoryLimit { cap, .. }) => assert_eq!(cap, MEMORY_CAP),
            other => panic!("run {i}: hog got {other:?}"),
        },
        Kind::Trap => match plugins.trap.run_agent("payload", &RunOptions::default()).await {
            Err(RunError::Trap { plugin, .. }) => assert_eq!(plugin, "trap"),
            other => panic!("run {i}: trap got {other:?}"),
        },
        Kind::Escape => {
            let probes =
                format!("/etc/passwd\n../secret\nwrite:/tmp/nexo-stress-planted\ntcp:127.0.0.1:{probe_port}\n");
            let report = plugins.escape.run_agent(&probes, &RunOptions::default()).await.unwrap();
            let refused = report.lines().filter(|l| l.contains("\terr ")).count();
            assert_eq!(refused, 4, "run {i}: escape was not refused everything: {report}");
        }
        Kind::Hello => {
            let options = RunOptions {
                providers: Providers { model: Some(scripted()), ..Providers::default() },
                ..RunOptions::default()
            };
            let answer = plugins.hello.run_agent("hi", &options).await.unwrap();
            assert_eq!(answer, "Hello from the script.", "run {i}");
        }
        Kind::TextStats => {
            let answer =
                plugins.text_stats.run_agent(&format!("run {i} of many"), &RunOptions::default()).await.unwrap();
            assert!(answer.contains("words: 4"), "run {i}: {answer}");
        }
    }
}

/// Runs `count` runs of the mix, `CONCURRENCY` at a time; returns the
/// highest resident memory seen.
async fn batch(plugins: &Arc<Plugins>, count: usize, probe_port: u16) -> u64 {
    let peak = Arc::new(AtomicU64::new(rss_kib()));
    let permits = Arc::new(tokio::sync::Semaphore::new(CONCURRENCY));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..count {
        let permit = permits.clone().acquire_owned().await.unwrap();
        let (plugins, peak) = (plugins.clone(), peak.clone());
        tasks.spawn(async move {
            run(&plugins, MIX[i % MIX.len()], i, probe_port).await;
            peak.fetch_max(rss_kib(), Ordering::Relaxed);
            drop(permit);
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    peak.load(Ordering::Relaxed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_adversarial_runs_leave_the_host_healthy() {
    let cache = tempfile::tempdir().unwrap();
    let mut config =
        EngineConfig { cache_dir: Some(cache.path().to_path_buf()), max_live_instances: 16, ..Default::default() };
    config.limits.memory_bytes = MEMORY_CAP;
    let engine = Engine::new(config).unwrap();
    let load = |path: &'static str| {
        let engine = engine.clone();
        async move { Plugin::load(&engine, path).await.unwrap() }
    };
    let plugins = Arc::new(Plugins {
        spin: load(built::SPIN).await,
        hog: load(built::HOG).await,
        trap: load(built::TRAP).await,
        escape: load(built::ESCAPE).await,
        hello: load(built::HELLO).await,
        text_stats: load(built::TEXT_STATS).await,
    });
    // Something to connect to, so a refused connection is the host's doing.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();

    batch(&plugins, WARM_UP, port).await;
    let baseline = rss_kib();
    let started = Instant::now();
    let peak = batch(&plugins, RUNS, port).await;
    let took = started.elapsed();
    // Let freed instances and tasks settle.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = rss_kib();
    eprintln!(
        "stress: {RUNS} runs in {took:.1?} ({CONCURRENCY} at a time); RSS baseline {baseline} KiB, peak {peak} KiB, \
         after {after} KiB"
    );
    assert!(!std::path::Path::new("/tmp/nexo-stress-planted").exists(), "the escape plugin wrote a file");
    assert!(after * 10 <= baseline * 11, "RSS grew from {baseline} KiB to {after} KiB after {RUNS} runs");
    // The engine still runs a healthy plugin.
    let answer = plugins.text_stats.run_agent("still here", &RunOptions::default()).await.unwrap();
    assert!(answer.contains("words: 2"), "{answer}");
}
