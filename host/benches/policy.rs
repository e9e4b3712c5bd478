//! What the operator's policy adds to one call: the data-flow guard and a
//! hook on the host-call path, against the same call without them, in one
//! run.
//!
//! - `glob` as the model calls it, through the whole host-call path, in an
//!   in-memory sandbox: with nothing private (the guard marks nothing and
//!   checks nothing: the plain gated call), with the workspace private in a
//!   clean context (its result marks the run), and in a context that holds
//!   untrusted and private content (the guard looks, and lets it through);
//! - the gate's decision on a `fetch` (a send): in a clean context, and in
//!   one that holds untrusted and private content with the guard set to
//!   allow, so the whole check runs and the verdict is the same;
//! - `read_file` through the path with one warm hook
//!   (`plugins/hooks/house-rules`, asked before and after the call, letting
//!   it pass), against the plain gated call: the cost of one hook per tool
//!   call; and the hook's two answers alone.
//!
//! Run with `cargo bench -p nexo --bench policy`.
#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use nexo::authority::{Authority, Gate, Permissions};
use nexo::flow::{Labels, Taint};
use nexo::grant::{DataFlow, FlowAction, Grant};
use nexo::host_call::ToolContext;
use nexo::manifest::{AgentManifest, Capability, PermissionMode};
use nexo::settings::{Providers, RunOptions};
use nexo_sandbox::VirtualSandbox;

/// A run's tools as a run prepares them, under `flow`.
fn tools(rt: &tokio::runtime::Runtime, flow: DataFlow) -> Arc<ToolContext> {
    hooked(rt, flow, Vec::new())
}

/// The same, asking `hooks` about each call.
fn hooked(
    rt: &tokio::runtime::Runtime,
    flow: DataFlow,
    hooks: Vec<Arc<dyn nexo::hooks::HookComponent>>,
) -> Arc<ToolContext> {
    let sandbox = Arc::new(VirtualSandbox::with_files([("README.md", "# hi"), ("docs/a.md", "a")]).unwrap());
    let caps = vec![Capability::Read, Capability::Glob];
    let manifest = AgentManifest { name: "bench".into(), capabilities: caps, ..AgentManifest::default() };
    let grant = Grant { data_flow: flow, ..Grant::default() };
    let options = RunOptions {
        permissions: Permissions::new(PermissionMode::ReadOnly),
        grant,
        providers: Providers { sandbox: Some(sandbox), hooks, ..Providers::default() },
        ..RunOptions::default()
    };
    rt.block_on(nexo::world::agent::prepare(&manifest, &options, &[], &nexo::Limits::default())).unwrap().tools
}

fn held(taint: &Taint) {
    taint.mark(Labels::UNTRUSTED, || "`fetch`".into());
    taint.mark(Labels::PRIVATE, || "`read`".into());
}

fn guard(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let call = nexo_model::ToolCall {
        id: "c1".into(),
        name: "glob".into(),
        arguments: serde_json::json!({ "pattern": "**/*.md" }),
    };
    let nothing_private = DataFlow { private_paths: Some(Vec::new()), ..DataFlow::default() };
    let cases = [
        ("nothing private: the plain gated call", tools(&rt, nothing_private)),
        ("the workspace private, a clean context", tools(&rt, DataFlow::default())),
        ("a context holding untrusted and private content", {
            let tb = tools(&rt, DataFlow::default());
            held(tb.taint());
            tb
        }),
    ];
    let mut group = c.benchmark_group("data-flow guard");
    for (name, toolbox) in &cases {
        group.bench_function(format!("glob through the host-call path, {name}"), |b| {
            b.iter(|| {
                let reply = rt.block_on(toolbox.call_model(1, &call));
                assert!(!reply.is_error, "{}", reply.content);
                black_box(reply)
            })
        });
    }
    let manifest = AgentManifest {
        name: "bench".into(),
        capabilities: vec![Capability::Fetch],
        fetch_allow: vec!["example.com".into()],
        ..AgentManifest::default()
    };
    let mut grant = Grant::of([Capability::Fetch]);
    grant.mode = PermissionMode::Auto;
    grant.data_flow = DataFlow { private: FlowAction::Allow, ..DataFlow::default() };
    let authority = Authority::new(&manifest, &grant, &Permissions::new(PermissionMode::Auto));
    let fetch = Gate::Capability(Capability::Fetch, "https://example.com/page");
    let (clean, tainted) = (Taint::new(), Taint::new());
    held(&tainted);
    for (name, taint) in [("a clean context", &clean), ("untrusted and private content, allowed", &tainted)] {
        group.bench_function(format!("the gate's decision on a fetch, {name}"), |b| {
            b.iter(|| black_box(authority.gate_in(black_box(&fetch), taint, None, "fetch")).unwrap())
        });
    }
    group.finish();
}

fn hook(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let engine = nexo::Engine::new(nexo::EngineConfig::default()).unwrap();
    let plugin = rt.block_on(nexo::Plugin::load(&engine, nexo_tests::HOUSE_RULES)).unwrap();
    let house_rules = plugin.hook().unwrap().component();
    // `read_file` of a small file in memory: a gated call whose own work is
    // small, so what the hook adds stands out of the noise.
    let call = nexo_model::ToolCall {
        id: "c1".into(),
        name: "read_file".into(),
        arguments: serde_json::json!({ "path": "README.md" }),
    };
    let nothing_private = || DataFlow { private_paths: Some(Vec::new()), ..DataFlow::default() };
    let cases = [
        ("no hook: the plain gated call", tools(&rt, nothing_private())),
        ("one warm hook, asked before and after", hooked(&rt, nothing_private(), vec![house_rules])),
    ];
    let mut group = c.benchmark_group("hooks");
    for (name, toolbox) in &cases {
        // The first call instantiates the hook: the benchmark measures warm calls.
        assert!(!rt.block_on(toolbox.call_model(1, &call)).is_error);
        group.bench_function(format!("read_file through the host-call path, {name}"), |b| {
            b.iter(|| {
                let reply = rt.block_on(toolbox.call_model(1, &call));
                assert!(!reply.is_error, "{}", reply.content);
                black_box(reply)
            })
        });
    }
    // The hook's two answers alone, on its warm instance: what a call waits for.
    let hooks = nexo::hooks::Hooks::for_run(&[plugin.hook().unwrap().component()]).unwrap();
    let view = nexo::hooks::HookCall {
        agent: "bench".into(),
        capability: "read".into(),
        call: "read-file".into(),
        tool: Some("read_file".into()),
        detail: "README.md".into(),
        arguments: r#"{"path":"README.md"}"#.into(),
        origin: nexo::hooks::Origin::Model,
        held: Vec::new(),
    };
    let silent = nexo::events::SILENT;
    group.bench_function("one warm hook's before-tool-call answer alone", |b| {
        b.iter(|| black_box(rt.block_on(hooks.before(&view, 0, silent))))
    });
    let output = serde_json::json!("# hi").to_string();
    group.bench_function("one warm hook's after-tool-call answer alone", |b| {
        b.iter(|| black_box(rt.block_on(hooks.after(&view, output.clone(), false, silent))))
    });
    group.finish();
}

criterion_group!(benches, guard, hook);
criterion_main!(benches);
