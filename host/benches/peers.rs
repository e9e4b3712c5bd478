//! nexo in the peer harness (`bench/peers/`): the harness's guest work,
//! timed by the harness's own loop (`hosts/common/timing.rs`), through
//! nexo's real path: engine, authority, instance and the host-call path.
//! The guest is `plugins/testing/bench-guest`.
//!
//! Prints the harness's `RESULT` lines on stdout, so `bench/peers/run.sh`
//! (`make bench-peers`) puts nexo's rows in one table with raw wasmtime's
//! and Extism's. Run alone: `cargo bench -p nexo --bench peers`; the
//! harness's knobs (`BATCHES`, `BATCH_MS`, `WARMUP_MS`, `METRICS`,
//! `N_HOST_CALLS`) apply.
#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

#[path = "../../bench/peers/hosts/common/timing.rs"]
#[allow(dead_code)]
mod timing;

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use nexo::authority::Permissions;
use nexo::events::{Event, EventSink};
use nexo::grant::Grant;
use nexo::manifest::{AgentManifest, Capability, PermissionMode};
use nexo::settings::{Providers, RunContext, RunOptions};
use nexo::{Engine, EngineConfig, Limits, Plugin};
use nexo_model::ToolCall;
use nexo_sandbox::VirtualSandbox;
use timing::{INPUT, bench};

const HOST: &str = concat!("nexo ", env!("CARGO_PKG_VERSION"), " (wasmtime 48)");
/// The small file the gated calls read.
const FILE: (&str, &str) = ("notes/small.txt", "a small file in the virtual sandbox\n");
/// Model tool calls per `block_on` in c-model: entering the runtime costs
/// about as much as the call itself.
const MODEL_CALLS: usize = 100;

/// Counts events, so the bench sees that they were emitted.
#[derive(Default)]
struct Count(AtomicU64);

impl EventSink for Count {
    fn emit(&self, _event: &Event) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

fn main() {
    let cfg = timing::Cfg::from_env();
    let n = timing::n_host_calls();
    let expected: String = INPUT.chars().rev().collect();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let sandbox = Arc::new(VirtualSandbox::with_files([FILE]).unwrap());
    let events = Arc::new(Count::default());
    let options = RunOptions {
        permissions: Permissions::new(PermissionMode::ReadOnly),
        grant: Grant::of([Capability::Read]),
        providers: Providers { sandbox: Some(sandbox.clone()), ..Providers::default() },
        context: RunContext { events: Some(events.clone()), ..RunContext::default() },
        ..RunOptions::default()
    };
    for (config, pooling) in [("on-demand", false), ("pooling", true)] {
        // Every log line is kept, as in the peers; none of them has a subscriber.
        let limits = Limits { log_lines: usize::MAX, ..Limits::default() };
        let engine = Engine::new(EngineConfig { pooling, limits, cache_dir: None, ..EngineConfig::default() }).unwrap();
        let plugin = rt.block_on(Plugin::load(&engine, nexo_tests::BENCH_GUEST)).unwrap();

        // Correctness first: the answers, and the gated read really read.
        {
            let mut instance = rt.block_on(plugin.instantiate_agent(&options)).unwrap();
            assert_eq!(rt.block_on(instance.run(INPUT)).unwrap().answer, expected);
            assert_eq!(rt.block_on(instance.run(&format!("log {n}"))).unwrap().answer, n.to_string());
            let read = rt.block_on(instance.run(&format!("read 2 {}", FILE.0))).unwrap().answer;
            assert_eq!(read, (2 * FILE.1.len()).to_string());
        }

        bench(&cfg, HOST, config, "a: new instance + 1 call", 1.0, || {
            let mut instance = rt.block_on(plugin.instantiate_agent(&options)).unwrap();
            black_box(rt.block_on(instance.run(INPUT)).unwrap());
        });
        bench(&cfg, HOST, config, "a0: new instance only (no call)", 1.0, || {
            black_box(rt.block_on(plugin.instantiate_agent(&options)).unwrap());
        });

        let mut instance = rt.block_on(plugin.instantiate_agent(&options)).unwrap();
        bench(&cfg, HOST, config, "b: warm call", 1.0, || {
            black_box(rt.block_on(instance.run(INPUT)).unwrap());
        });
        let log_n = format!("log {n}");
        bench(&cfg, HOST, config, &format!("c: host-call round trip (x{n} / {n})"), f64::from(n), || {
            black_box(rt.block_on(instance.run(&log_n)).unwrap());
        });
        let read_n = format!("read {n} {}", FILE.0);
        bench(&cfg, HOST, config, &format!("c-gated: guest read-file (x{n} / {n})"), f64::from(n), || {
            black_box(rt.block_on(instance.run(&read_n)).unwrap());
        });
    }

    // The model's read_file through the same path, with its two events
    // (tool call, tool result); no instance is involved.
    let manifest =
        AgentManifest { name: "bench".into(), capabilities: vec![Capability::Read], ..AgentManifest::default() };
    let tools = rt.block_on(nexo::world::agent::prepare(&manifest, &options, &[], &Limits::default())).unwrap().tools;
    let call = ToolCall { id: "c1".into(), name: "read_file".into(), arguments: serde_json::json!({ "path": FILE.0 }) };
    let before = events.0.load(Ordering::Relaxed);
    let reply = rt.block_on(tools.call_model(1, &call));
    assert!(!reply.is_error && reply.content.contains("small file"), "{}", reply.content);
    assert_eq!(events.0.load(Ordering::Relaxed) - before, 2, "a model call emits its call and its result");
    let metric = format!("c-model: model read_file + 2 events (x{MODEL_CALLS} / {MODEL_CALLS})");
    bench(&cfg, HOST, "pooling", &metric, MODEL_CALLS as f64, || {
        rt.block_on(async {
            for _ in 0..MODEL_CALLS {
                black_box(tools.call_model(1, &call).await);
            }
        })
    });
}
