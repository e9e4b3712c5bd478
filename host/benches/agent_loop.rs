//! The agent loop's own overhead per turn, model time excluded: the scripted
//! provider answers instantly, with one tool call per turn, and the tool runs
//! in the in-memory sandbox. Run with `cargo bench -p nexo --bench agent_loop`.
#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use nexo::agent_loop::{HostLoop, Loop, LoopContext, LoopLimits, Status};
use nexo::manifest::{Capability, PermissionMode};
use nexo::permissions::{Grant, Permissions};
use nexo::tools::{ToolLimits, Toolbox};
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

fn per_turn(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let sandbox = Arc::new(VirtualSandbox::with_files([("README.md", "# hi"), ("docs/a.md", "a")]).unwrap());
    let effective = Grant::default().effective(&[Capability::Read, Capability::Glob]);
    let toolbox =
        Toolbox::new("bench", sandbox, Permissions::new(PermissionMode::ReadOnly), effective, ToolLimits::default());
    let instructions = vec!["You are a benchmark.".to_string()];
    let events = |_: &nexo::agent_loop::Event| {};
    let mut group = c.benchmark_group("agent-loop");
    group.bench_function(format!("one prompt, {TOOL_TURNS} tool turns + 1 final (scripted model)"), |b| {
        b.iter_batched(
            provider,
            |p| {
                let ctx = LoopContext {
                    provider: &p,
                    toolbox: &toolbox,
                    instructions: &instructions,
                    limits: LoopLimits::default(),
                    events: &events,
                };
                let outcome = rt.block_on(HostLoop.run(ctx, "list the docs")).unwrap();
                assert_eq!(outcome.status, Status::Completed);
                black_box(outcome)
            },
            criterion::BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(benches, per_turn);
criterion_main!(benches);
