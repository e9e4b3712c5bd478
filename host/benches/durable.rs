//! What replay costs: resuming a suspended run of a real component whose
//! journal holds N calls, up to its first new host call, in a real SQLite
//! store. The probe reads a file N times, suspends, and on resume suspends
//! again at once (its first new call). Replay cost per call is the slope
//! between N = 0 and N = 50. Run with `cargo bench -p nexo --bench durable`.
#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use nexo::runs::{Runs, Subject};
use nexo::settings::{Providers, RunOptions};
use nexo::{Engine, EngineConfig, Plugin};
use nexo_store::{Claim, RunStatus, Store};
use nexo_tests as built;

struct Bench {
    rt: tokio::runtime::Runtime,
    plugin: Plugin,
    runs: Runs,
    options: RunOptions,
    _dir: tempfile::TempDir,
}

fn setup() -> Bench {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "a note").unwrap();
    let engine = Engine::new(EngineConfig { cache_dir: Some(dir.path().join("cache")), ..EngineConfig::default() });
    let engine = engine.unwrap();
    let (plugin, store) = rt.block_on(async {
        let plugin = Plugin::load(&engine, built::WORKFLOW_PROBE).await.unwrap();
        let store = nexo_store::open(&nexo_store::Location::Sqlite(dir.path().join("nexo.db"))).await.unwrap();
        (plugin, store)
    });
    let sandbox = Arc::new(nexo_sandbox::LocalSandbox::open(dir.path()).unwrap());
    let options =
        RunOptions { providers: Providers { sandbox: Some(sandbox), ..Providers::default() }, ..RunOptions::default() };
    let runs = Runs::new(store as Arc<dyn Store>, false);
    Bench { rt, plugin, runs, options, _dir: dir }
}

impl Bench {
    fn subject(&self) -> Subject<'_> {
        let path = std::path::Path::new(built::WORKFLOW_PROBE);
        Subject::Component { agent: self.plugin.agent().unwrap(), sha256: self.plugin.sha256(), path }
    }

    /// A suspended run whose journal holds `reads` file reads.
    fn suspended(&self, reads: usize) -> String {
        let mut script: Vec<String> = (0..reads).map(|_| "read notes.txt".to_string()).collect();
        script.push("suspend one".into());
        script.push("suspend two".into());
        let end = self.rt.block_on(self.runs.start(
            self.subject(),
            &script.join("; "),
            &nexo::runs::RunSpec::default(),
            &self.options,
        ));
        let end = end.unwrap();
        assert_eq!(end.run.status, RunStatus::Suspended);
        end.run.id
    }

    /// Resumes `id` up to its next suspension; returns the calls replayed.
    fn resume(&self, id: &str) -> u64 {
        let end = self.rt.block_on(self.runs.resume(id, Claim::Resume, None, self.subject(), &self.options, false));
        let end = end.unwrap();
        assert_eq!(end.run.status, RunStatus::Suspended);
        end.replayed
    }

    fn time_resume(&self, reads: usize, iters: u64) -> Duration {
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            let id = self.suspended(reads);
            let start = Instant::now();
            let replayed = self.resume(&id);
            total += start.elapsed();
            assert!(replayed as usize > reads, "{replayed} calls replayed for {reads} reads");
        }
        total
    }
}

fn resume(c: &mut Criterion) {
    let bench = setup();
    let mut group = c.benchmark_group("resume");
    group.sample_size(20).measurement_time(Duration::from_secs(10));
    for reads in [0, 50] {
        group.bench_function(format!("journal_{reads}_calls"), |b| {
            b.iter_custom(|iters| bench.time_resume(reads, iters))
        });
    }
    group.finish();
    // The per-call slope, from medians of paired runs in the same process.
    let mut zero = Vec::new();
    let mut fifty = Vec::new();
    for _ in 0..40 {
        zero.push(bench.time_resume(0, 1));
        fifty.push(bench.time_resume(50, 1));
    }
    zero.sort();
    fifty.sort();
    let (z, f) = (zero[zero.len() / 2], fifty[fifty.len() / 2]);
    let per_call = f.saturating_sub(z) / 50;
    println!("resume p50: 0-call journal {z:?}, 50-call journal {f:?}; replay per journaled call ≈ {per_call:?}");
}

/// One journaled call's cost on the host-call path, by effect: a write is
/// committed (fsync-ed) before the guest continues; a read waits in memory
/// for the next commit.
fn journal_effect(c: &mut Criterion) {
    use nexo::journal::{Begin, Effect, Journal, Replay};
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = rt.block_on(nexo_store::open(&nexo_store::Location::Sqlite(dir.path().join("nexo.db")))).unwrap();
    let owner = "bench:1:x";
    // A fresh running run and its journal.
    let journal = || {
        let new = nexo_store::NewRun {
            id: nexo_store::new_run_id(),
            agent: "bench".into(),
            kind: "component".into(),
            source: "bench.wasm".into(),
            component_sha256: "0".repeat(64),
            input: String::new(),
            grant: serde_json::json!({}),
            status: RunStatus::Running,
            lease: Some(nexo_store::Lease { owner: owner.into(), until_ms: i64::MAX }),
            created_ms: nexo_store::now_ms(),
            session: None,
            tenant: None,
        };
        let run = rt.block_on(store.create_run(new)).unwrap();
        rt.block_on(Journal::open(store.clone(), &run, owner, Replay::Journal, false)).unwrap()
    };
    let result = format!("{{\"Ok\":\"{}\"}}", "x".repeat(280));
    let mut group = c.benchmark_group("journal");
    for (name, effect) in [("read_batched", Effect::Read), ("write_durable", Effect::Write)] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let journal = journal();
                let start = Instant::now();
                rt.block_on(async {
                    for _ in 0..iters {
                        let Begin::Live(seq) = journal.begin("nexo:plugin/tools", "read-file", "h") else {
                            panic!("the journal halted: {:?}", journal.halted())
                        };
                        journal.finish(seq, "nexo:plugin/tools", "read-file", "h", result.clone(), effect).await;
                    }
                });
                start.elapsed()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, resume, journal_effect);
criterion_main!(benches);
