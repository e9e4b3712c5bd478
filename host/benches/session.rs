//! What a session adds to a prompt: a recorded run of a declarative agent
//! against an in-process model that answers at once, in a real SQLite
//! store, as a plain run and as a prompt of a session whose thread already
//! holds about 100 messages (loaded, sent, and appended to with the run's
//! end), each session serving a few prompts as a chat does.
//! The target is ≤ 1 ms of overhead. Run with
//! `cargo bench -p nexo --bench session`.
#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use nexo::agent_file::AgentFile;
use nexo::runs::{Runs, Subject};
use nexo::settings::{Providers, RunOptions};
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
                answered: Default::default(),
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
    let options = RunOptions {
        providers: Providers { model: Some(Arc::new(Answers)), ..Providers::default() },
        ..RunOptions::default()
    };
    let runs = Runs::new(store.clone(), false);
    Bench { rt, store, runs, agent, options, _dir: dir }
}

impl Bench {
    /// A session whose thread holds `size` messages of a realistic size.
    fn session(&self, size: usize) -> String {
        self.rt.block_on(async {
            let instance = nexo_store::new_run_id();
            let session = self.store.open_session("bench", &instance, nexo_store::now_ms()).await.unwrap();
            let messages = (0..size)
                .map(|i| {
                    let text = format!("message {i}: {}", "lorem ipsum dolor sit amet ".repeat(8));
                    if i % 2 == 0 {
                        json!({"role": "user", "text": text})
                    } else {
                        json!({"role": "assistant", "text": text, "tool_calls": []})
                    }
                })
                .collect();
            if size > 0 {
                self.store.append_thread(&session.id, 0, messages, nexo_store::now_ms()).await.unwrap();
            }
            session.id
        })
    }

    /// One prompt, in `session` if given; how long it took.
    fn prompt(&self, session: Option<&str>) -> Duration {
        let start = Instant::now();
        let end = self
            .rt
            .block_on(self.runs.start_in(
                session,
                Subject::File(&self.agent),
                "hello",
                &nexo::runs::RunSpec::default(),
                &self.options,
            ))
            .unwrap();
        let took = start.elapsed();
        assert_eq!(end.run.status, RunStatus::Done, "{:?}", end.run.error);
        took
    }

    /// `iters` prompts: plain runs (`sessions` is `None`), or prompts of
    /// the sessions `sessions` gives; the time they took.
    fn time(&self, mut sessions: Option<&mut Sessions>, iters: u64) -> Duration {
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            let session = sessions.as_deref_mut().map(|s| s.next(self));
            total += self.prompt(session.as_deref());
        }
        total
    }
}

/// Sessions of one thread size, each used for [`PROMPTS_PER_SESSION`]
/// prompts (as a chat is) before a fresh one is made, outside the timing.
struct Sessions {
    size: usize,
    current: Option<String>,
    used: usize,
}

/// How many prompts a session serves before a fresh one replaces it: its
/// thread grows by two messages a prompt, so it stays near its size.
const PROMPTS_PER_SESSION: usize = 5;

impl Sessions {
    fn new(size: usize) -> Sessions {
        Sessions { size, current: None, used: 0 }
    }

    fn next(&mut self, bench: &Bench) -> String {
        if self.used == PROMPTS_PER_SESSION || self.current.is_none() {
            self.current = Some(bench.session(self.size));
            self.used = 0;
        }
        self.used += 1;
        self.current.clone().unwrap()
    }
}

fn overhead(c: &mut Criterion) {
    let bench = setup();
    let mut group = c.benchmark_group("session");
    group.sample_size(30).measurement_time(Duration::from_secs(10));
    let (mut empty, mut full) = (Sessions::new(0), Sessions::new(THREAD));
    group.bench_function("plain_run", |b| b.iter_custom(|iters| bench.time(None, iters)));
    group.bench_function("session_prompt_empty_thread", |b| b.iter_custom(|iters| bench.time(Some(&mut empty), iters)));
    group.bench_function(format!("session_prompt_{THREAD}_messages"), |b| {
        b.iter_custom(|iters| bench.time(Some(&mut full), iters))
    });
    group.finish();
    // The overhead: the median of paired differences (a plain run, then a
    // session prompt, one after the other), which cancels the machine's drift.
    let (mut plain, mut empty_diff, mut full_diff) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..200 {
        let p = bench.time(None, 1);
        plain.push(p);
        empty_diff.push(bench.time(Some(&mut empty), 1).as_secs_f64() - p.as_secs_f64());
        let p = bench.time(None, 1);
        full_diff.push(bench.time(Some(&mut full), 1).as_secs_f64() - p.as_secs_f64());
    }
    plain.sort();
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2] * 1e3
    };
    println!(
        "plain run p50 {:?}; session prompt overhead, median of 200 paired differences: {:.3} ms with a \
         {THREAD}-message thread, {:.3} ms with an empty one",
        plain[plain.len() / 2],
        median(&mut full_diff),
        median(&mut empty_diff)
    );
}

criterion_group!(benches, overhead);
criterion_main!(benches);
