//! What a session adds to a prompt: a recorded run of a declarative agent
//! against an in-process model that answers at once, in a real SQLite
//! store, as a plain run and as a prompt of a session whose thread already
//! holds 100 messages (loaded, sent, and appended to with the run's end).
//! The target is ≤ 1 ms of overhead. Run with
//! `cargo bench -p nexo --bench session`.
#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use nexo::agent_file::AgentFile;
use nexo::runs::{Runs, Subject};
use nexo::settings::RunOptions;
use nexo_model::{BoxFuture, DeltaSink, ModelError, Provider, Request, Response, StopReason, Usage};
use nexo_store::{RunStatus, Store};
use serde_json::json;

/// The messages a session's thread holds before the measured prompt.
const THREAD: usize = 100;

/// A model that answers every request with the same text, at once.
struct Answers;

impl Provider for Answers {
    fn name(&self) -> &str {
        "bench"
    }

    fn model(&self) -> &str {
        "bench"
    }

    fn complete<'a>(&'a self, _: &'a Request, _: Option<DeltaSink<'a>>) -> BoxFuture<'a, Result<Response, ModelError>> {
        Box::pin(async {
            Ok(Response {
                text: "ok".into(),
                tool_calls: Vec::new(),
                stop: StopReason::EndTurn,
                usage: Usage { input_tokens: 1, output_tokens: 1 },
            })
        })
    }
}

struct Bench {
    rt: tokio::runtime::Runtime,
    store: Arc<dyn Store>,
    runs: Runs,
    agent: AgentFile,
    options: RunOptions,
    _dir: tempfile::TempDir,
}

fn setup() -> Bench {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let agent = AgentFile::parse(
        "name = \"bench\"\ndescription = \"d\"\ninstructions = \"Answer briefly.\"\n",
        dir.path().join("bench.toml"),
    )
    .unwrap();
    let store = rt.block_on(nexo_store::open(&nexo_store::Location::Sqlite(dir.path().join("nexo.db")))).unwrap();
    let options = RunOptions { model: Some(Arc::new(Answers)), ..RunOptions::default() };
    let runs = Runs::new(store.clone(), false);
    Bench { rt, store, runs, agent, options, _dir: dir }
}

impl Bench {
    /// A session whose thread holds [`THREAD`] messages of a realistic size.
    fn session(&self) -> String {
        self.rt.block_on(async {
            let instance = nexo_store::new_run_id();
            let session = self.store.open_session("bench", &instance, nexo_store::now_ms()).await.unwrap();
            let messages = (0..THREAD)
                .map(|i| {
                    let text = format!("message {i}: {}", "lorem ipsum dolor sit amet ".repeat(8));
                    if i % 2 == 0 {
                        json!({"role": "user", "text": text})
                    } else {
                        json!({"role": "assistant", "text": text, "tool_calls": []})
                    }
                })
                .collect();
            self.store.append_thread(&session.id, 0, messages, nexo_store::now_ms()).await.unwrap();
            session.id
        })
    }

    /// One prompt, in `session` if given; how long it took.
    fn prompt(&self, session: Option<&str>) -> Duration {
        let start = Instant::now();
        let end = self
            .rt
            .block_on(self.runs.start_in(session, Subject::File(&self.agent), "hello", json!({}), &self.options))
            .unwrap();
        let took = start.elapsed();
        assert_eq!(end.run.status, RunStatus::Done, "{:?}", end.run.error);
        took
    }

    fn time(&self, in_session: bool, iters: u64) -> Duration {
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            let session = in_session.then(|| self.session());
            total += self.prompt(session.as_deref());
        }
        total
    }
}

fn overhead(c: &mut Criterion) {
    let bench = setup();
    let mut group = c.benchmark_group("session");
    group.sample_size(30).measurement_time(Duration::from_secs(10));
    group.bench_function("plain_run", |b| b.iter_custom(|iters| bench.time(false, iters)));
    group.bench_function(format!("session_prompt_{THREAD}_messages"), |b| b.iter_custom(|iters| bench.time(true, iters)));
    group.finish();
    // The overhead, from medians of interleaved runs in the same process.
    let (mut plain, mut session) = (Vec::new(), Vec::new());
    for _ in 0..60 {
        plain.push(bench.time(false, 1));
        session.push(bench.time(true, 1));
    }
    plain.sort();
    session.sort();
    let (p, s) = (plain[plain.len() / 2], session[session.len() / 2]);
    println!(
        "prompt p50: plain run {p:?}, session prompt with a {THREAD}-message thread {s:?}; overhead ≈ {:?}",
        s.saturating_sub(p)
    );
}

criterion_group!(benches, overhead);
criterion_main!(benches);
