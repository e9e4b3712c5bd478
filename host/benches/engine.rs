//! Engine benchmarks: compiling a component, loading it from the compile
//! cache, and instantiating it through its `InstancePre`, with and without
//! the pooling allocator.
//!
//! Run with `cargo bench -p nexo --bench engine`. The plugins come from
//! `nexo-tests`, whose build script builds them; the Python and JavaScript
//! example agents need `scripts/python-deps.sh` and `scripts/js-deps.sh`
//! (`make bench` runs them).
#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use nexo::settings::RunOptions;
use nexo::{Engine, EngineConfig, Plugin};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime")
}

fn engine(pooling: bool, cache: Option<&std::path::Path>) -> Engine {
    Engine::new(EngineConfig { pooling, cache_dir: cache.map(Into::into), ..EngineConfig::default() }).expect("engine")
}

fn compile(c: &mut Criterion) {
    let bytes = std::fs::read(nexo_tests::HELLO).expect("hello.wasm");
    let engine = engine(true, None);
    let mut group = c.benchmark_group("compile");
    group.sample_size(10).measurement_time(Duration::from_secs(10));
    group.bench_function("hello (cranelift, no cache)", |b| {
        b.iter(|| black_box(engine.compile(&bytes).expect("compile")))
    });
    group.finish();
}

fn cache_hit(c: &mut Criterion) {
    let bytes = std::fs::read(nexo_tests::HELLO).expect("hello.wasm");
    let dir = tempfile::tempdir().expect("temp dir");
    let engine = engine(true, Some(dir.path()));
    engine.compile(&bytes).expect("warm the cache");
    let rt = runtime();
    let mut group = c.benchmark_group("cache-hit");
    group.bench_function("compile() from the cache", |b| {
        b.iter(|| {
            let (component, outcome) = engine.compile(&bytes).expect("load");
            assert_eq!(outcome, nexo::engine::CacheOutcome::Hit);
            black_box(component)
        })
    });
    group.bench_function("Plugin::load (read, cache, link, describe)", |b| {
        b.iter(|| black_box(rt.block_on(Plugin::load(&engine, nexo_tests::HELLO)).expect("load")))
    });
    group.finish();
}

fn instantiate(c: &mut Criterion) {
    let rt = runtime();
    let options = RunOptions::default();
    let mut group = c.benchmark_group("instantiate");
    for pooling in [true, false] {
        let label = if pooling { "pooling" } else { "on-demand" };
        let engine = engine(pooling, None);
        let hello = rt.block_on(Plugin::load(&engine, nexo_tests::HELLO)).expect("load hello");
        group.bench_function(format!("agent, store + WASI + instance ({label})"), |b| {
            b.iter(|| black_box(rt.block_on(hello.instantiate_agent(&options)).expect("instantiate")))
        });
        let name: std::sync::Arc<str> = std::sync::Arc::from("hello");
        // The same, with the instance's teardown (returning pool slots)
        // outside the timing.
        group.bench_function(format!("agent, store + WASI + instance, teardown excluded ({label})"), |b| {
            // Batches stay below the pool's 128 live instances.
            b.iter_batched(
                || (),
                |()| rt.block_on(hello.instantiate_agent(&options)).expect("instantiate"),
                BatchSize::NumIterations(64),
            )
        });
        group.bench_function(format!("store + WASI context only ({label})"), |b| {
            b.iter(|| {
                black_box(
                    nexo::instance::new_store(
                        &engine,
                        name.clone(),
                        &nexo::instance::Wasi::default(),
                        Duration::from_secs(60),
                        (),
                    )
                    .expect("store"),
                )
            })
        });
        let stats = rt.block_on(Plugin::load(&engine, nexo_tests::TEXT_STATS)).expect("load text-stats");
        group.bench_function(format!("agent, instantiate + one run ({label})"), |b| {
            b.iter(|| {
                let mut instance = rt.block_on(stats.instantiate_agent(&options)).expect("instantiate");
                black_box(rt.block_on(instance.run("one two three")).expect("run"))
            })
        });
    }
    group.finish();
}

/// The Python and JavaScript example agents next to the Rust ones: loading
/// from a warm cache, instantiating, and one run (the no-model path: `glob`
/// and `read-file` on an empty virtual sandbox). Compiling them is timed once,
/// not sampled: it takes seconds.
fn guests(c: &mut Criterion) {
    let rt = runtime();
    let options = RunOptions::default();
    let dir = tempfile::tempdir().expect("temp dir");
    let engine = engine(true, Some(dir.path()));
    let agents = [
        ("python-agent", nexo_tests::guests::python_agent().to_path_buf()),
        ("js-agent", nexo_tests::guests::js_agent().to_path_buf()),
        ("hello (Rust)", nexo_tests::HELLO.into()),
    ];
    let mut group = c.benchmark_group("guests");
    group.sample_size(20);
    for (name, path) in &agents {
        let bytes = std::fs::read(path).expect("read component");
        let started = std::time::Instant::now();
        engine.compile(&bytes).expect("compile");
        eprintln!("{name}: {} bytes, first compile {:?}", bytes.len(), started.elapsed());
        group.bench_function(format!("{name}: Plugin::load from the cache"), |b| {
            b.iter(|| black_box(rt.block_on(Plugin::load(&engine, path)).expect("load")))
        });
        let plugin = rt.block_on(Plugin::load(&engine, path)).expect("load");
        group.bench_function(format!("{name}: instantiate (pooling)"), |b| {
            b.iter(|| black_box(rt.block_on(plugin.instantiate_agent(&options)).expect("instantiate")))
        });
        if plugin.name() != "hello" {
            group.bench_function(format!("{name}: instantiate + run"), |b| {
                b.iter(|| {
                    let mut instance = rt.block_on(plugin.instantiate_agent(&options)).expect("instantiate");
                    black_box(rt.block_on(instance.run("survey")).expect("run"))
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, compile, cache_hit, instantiate, guests);
criterion_main!(benches);
