//! The agent loop's own overhead per turn, model time excluded: the scripted
//! provider answers instantly, with one tool call per turn, and the tool runs
//! in the in-memory sandbox; and one model tool call on the host-call path.
//! Each in rounds with recording paused and on, exporting every span over OTLP/HTTP to a
//! loopback sink that accepts and discards them. Run with
//! `cargo bench -p nexo --bench agent_loop`.
#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use nexo::agent_loop::{HostLoop, Loop, LoopContext, LoopLimits, Status};
use nexo::authority::Permissions;
use nexo::grant::Grant;
use nexo::host_call::ToolContext;
use nexo::manifest::{AgentManifest, Capability, PermissionMode};
use nexo::settings::{Providers, RunOptions};
use nexo_model::ScriptedProvider;
use nexo_model::scripted::Script;
use nexo_sandbox::VirtualSandbox;

const TOOL_TURNS: usize = 10;

fn provider() -> ScriptedProvider {
    let mut turns: Vec<serde_json::Value> = (0..TOOL_TURNS)
        .map(|_| serde_json::json!({ "tool_calls": [{ "name": "glob", "arguments": { "pattern": "**/*.md" } }] }))
        .collect();
    turns.push(serde_json::json!({ "text": "done" }));
    let script: Script = serde_json::from_value(serde_json::json!({ "turns": turns })).unwrap();
    ScriptedProvider::new("bench", script)
}

/// The run's tools as a run prepares them: `caps` requested, the default grant.
fn tools(rt: &tokio::runtime::Runtime, sandbox: Arc<VirtualSandbox>, caps: &[Capability]) -> Arc<ToolContext> {
    let manifest = AgentManifest { name: "bench".into(), capabilities: caps.to_vec(), ..AgentManifest::default() };
    let options = RunOptions {
        permissions: Permissions::new(PermissionMode::ReadOnly),
        grant: Grant::default(),
        providers: Providers { sandbox: Some(sandbox), ..Providers::default() },
        ..RunOptions::default()
    };
    rt.block_on(nexo::world::agent::prepare(&manifest, &options, &[], &nexo::Limits::default())).unwrap().tools
}

/// The loop and the host-call path, under `tracing` (`off` or `exporter on`).
fn per_turn(c: &mut Criterion, tracing: &str) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let sandbox = Arc::new(VirtualSandbox::with_files([("README.md", "# hi"), ("docs/a.md", "a")]).unwrap());
    let toolbox = tools(&rt, sandbox, &[Capability::Read, Capability::Glob]);
    let instructions = vec!["You are a benchmark.".to_string()];
    let mut group = c.benchmark_group("agent-loop");
    group.bench_function(
        format!("one prompt, {TOOL_TURNS} tool turns + 1 final (scripted model), tracing {tracing}"),
        |b| {
            b.iter_batched(
                provider,
                |p| {
                    let ctx = LoopContext {
                        provider: Some(&p),
                        tools: &toolbox,
                        instructions: &instructions,
                        history: &[],
                        limits: LoopLimits::default(),
                        spend: None,
                    };
                    let outcome = rt.block_on(HostLoop.run(ctx, "list the docs")).unwrap();
                    assert_eq!(outcome.status, Status::Completed);
                    black_box(outcome)
                },
                criterion::BatchSize::SmallInput,
            )
        },
    );
    group.finish();
    let mut group = c.benchmark_group("host-call");
    let call = nexo_model::ToolCall {
        id: "c1".into(),
        name: "glob".into(),
        arguments: serde_json::json!({ "pattern": "**/*.md" }),
    };
    group.bench_function(format!("glob, the model's call through the host-call path, tracing {tracing}"), |b| {
        b.iter(|| {
            let reply = rt.block_on(toolbox.call_model(1, &call));
            assert!(!reply.is_error, "{}", reply.content);
            black_box(reply)
        })
    });
    group.finish();
}

/// The loopback OTLP sink's runtime, which answers 200 and drops the body.
/// It is up for both measurements, so both run in a process with other
/// threads, as every nexo process is (a multi-threaded tokio runtime): a
/// single-threaded process's malloc takes no locks, which would charge
/// exporting with glibc's multi-threaded allocation (about 4 µs per call).
fn sink() -> &'static tokio::runtime::Runtime {
    static SINK: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    SINK.get_or_init(|| tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap())
}

/// Rounds of tracing off and on, one after the other in one process.
const ROUNDS: usize = 3;

/// Telemetry installed as `nexo serve` installs it, exporting spans and
/// metrics to the loopback sink on its own runtime (as the server's API
/// runtime carries its exports); then, in each round, recording paused
/// (the exporters installed, nothing recorded: what a process with none
/// configured pays, see docs/telemetry.md) and recording on.
fn tracing_off_and_on(c: &mut Criterion) {
    let sink = sink();
    let listener = sink.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let exported = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = exported.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            count.fetch_add(body.len(), std::sync::atomic::Ordering::Relaxed);
            async { axum::http::StatusCode::OK }
        }),
    );
    sink.spawn(async move { axum::serve(listener, app).await });
    let table = nexo::telemetry::TelemetryTable { endpoint: Some(endpoint), ..Default::default() };
    let telemetry = {
        let _entered = sink.enter();
        nexo::telemetry::Telemetry::install(&table).unwrap()
    };
    assert!(telemetry.is_on());
    for round in 1..=ROUNDS {
        nexo::telemetry::set_paused(true);
        per_turn(c, &format!("round {round}, off"));
        nexo::telemetry::set_paused(false);
        per_turn(c, &format!("round {round}, on, exporting to a loopback sink"));
    }
    sink.block_on(telemetry.shutdown());
    assert!(exported.load(std::sync::atomic::Ordering::Relaxed) > 0, "the spans reached the sink");
}

/// The same loop against an OpenAI-compatible server given by
/// `NEXO_BENCH_OPENAI_URL` (for example the stateless fake server used to
/// measure peer harnesses, which answers tool calls until the request holds
/// N tool results). Also times one bare model call with the same client, so
/// the loop's own share per turn is the difference.
fn per_turn_http(c: &mut Criterion) {
    let Ok(url) = std::env::var("NEXO_BENCH_OPENAI_URL") else {
        eprintln!("agent-loop-http: set NEXO_BENCH_OPENAI_URL to an OpenAI-compatible fake server to run this group");
        return;
    };
    let turns: u32 = std::env::var("NEXO_BENCH_TURNS").ok().and_then(|t| t.parse().ok()).unwrap_or(10);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let config = nexo_model::ModelConfig {
        model: Some("fake-model".into()),
        provider: Some(nexo_model::ProviderKind::OpenaiCompatible),
        base_url: Some(url),
        max_retries: Some(0),
        ..nexo_model::ModelConfig::default()
    };
    let provider = nexo_model::resolve(&config).unwrap();
    let sandbox = Arc::new(VirtualSandbox::with_files([("README.md", "# hi")]).unwrap());
    // Only glob is offered, so the fake server calls glob every turn.
    let toolbox = tools(&rt, sandbox, &[Capability::Glob]);
    let instructions = vec!["You are a benchmark.".to_string()];
    let limits = LoopLimits { max_turns: turns + 5, ..LoopLimits::default() };
    let mut group = c.benchmark_group("agent-loop-http");
    group.bench_function(format!("one prompt, {turns} tool turns + 1 final (loopback fake server)"), |b| {
        b.iter(|| {
            let ctx = LoopContext {
                provider: Some(&*provider),
                tools: &toolbox,
                instructions: &instructions,
                history: &[],
                limits,
                spend: None,
            };
            let outcome = rt.block_on(HostLoop.run(ctx, "list the files")).unwrap();
            assert_eq!((outcome.status.clone(), outcome.turns), (Status::Completed, turns + 1));
            black_box(outcome)
        })
    });
    let request = nexo_model::Request {
        model: "fake-model".into(),
        messages: vec![nexo_model::Message::User { text: "list the files".into() }],
        tools: rt.block_on(toolbox.specs()),
        max_tokens: 4096,
    };
    group.bench_function("one bare model call (the same client and server)", |b| {
        b.iter(|| black_box(rt.block_on(provider.complete(&request, None)).unwrap()))
    });
    group.finish();
}

criterion_group!(benches, per_turn_http, tracing_off_and_on);
criterion_main!(benches);
