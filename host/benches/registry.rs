//! A plugin from a registry against one from a file: a cold pull (into an
//! empty cache), its signature verified, and its first run; a warm run of a
//! cached reference by tag (the manifest and its signatures fetched and
//! verified again) and without a trust rule (the manifest only), and by
//! digest (no request: the cache remembers the trusted signer); and a run
//! of the same component from a plain file path, in one run. The component is the
//! text-stats agent (no model); the compile cache is warm in every case but
//! the cold one. The registry is scripts/registry.sh's, on loopback
//! (skipped without it). Target: a cached reference within 1.1x of a path.
//! Run with `cargo bench -p nexo --bench registry` (with `NO_PROXY=127.0.0.1`
//! if an HTTP proxy is set: the registry client honours it).
#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

use std::path::Path;
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use nexo::registry::{self, PluginReference, Registries, RegistriesTable, RegistryClient, SigningKey, TrustRule};
use nexo::settings::RunOptions;
use nexo::{Engine, EngineConfig, Plugin};
use nexo_tests as built;

/// Resolves `arg`, loads and runs it; the answer.
async fn first_run(engine: &Engine, arg: &Path, registries: &Registries, cache: &Path) -> String {
    let resolved = registry::resolve(arg, registries, Some(cache)).await.unwrap();
    let plugin = Plugin::load(engine, &resolved.path).await.unwrap();
    let outcome = plugin.agent().unwrap().run("one two three", &RunOptions::default()).await.unwrap();
    outcome.answer
}

fn registry_bench(c: &mut Criterion) {
    let Some((address, _)) = nexo_testkit::registry::registry("registry bench", false) else { return };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let insecure = vec![address.clone()];
    // A repository of this run's own: signatures of earlier runs would pile up in a shared one.
    let unique = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let repository = format!("{address}/nexo-bench/text-stats-{unique}");
    let tagged = format!("{repository}:1");
    let pushed = rt.block_on(async {
        let client = RegistryClient::new(&insecure).unwrap();
        registry::push(&client, Path::new(built::TEXT_STATS), &PluginReference::parse(&tagged).unwrap()).await.unwrap()
    });
    let by_digest = format!("{repository}@{}", pushed.manifest_digest);
    let (key, public) = SigningKey::generate(&dir.path().join("bench"), b"bench").unwrap();
    let key = SigningKey::load(&key, Some(b"bench")).unwrap();
    rt.block_on(async {
        let client = RegistryClient::new(&insecure).unwrap();
        registry::sign(&client, &PluginReference::parse(&tagged).unwrap(), &key).await.unwrap()
    });
    let table = RegistriesTable {
        insecure: insecure.clone(),
        trust: vec![TrustRule { scope: format!("{address}/nexo-bench"), keys: vec![public], require: true }],
    };
    let trusted = Registries::new(&table, &[], dir.path()).unwrap();
    let untrusted = Registries { insecure: insecure.clone(), ..Registries::default() };
    let engine = Engine::new(EngineConfig { cache_dir: Some(dir.path().join("compiled")), ..EngineConfig::default() });
    let engine = engine.unwrap();
    let warm = dir.path().join("warm");
    let answer = rt.block_on(first_run(&engine, Path::new(&tagged), &trusted, &warm));
    assert!(answer.contains("words: 3"), "{answer}");

    let mut group = c.benchmark_group("registry");
    group.sample_size(20).measurement_time(Duration::from_secs(10));
    group.bench_function("cold pull + verify + first run (empty caches)", |b| {
        b.iter_batched(
            || {
                let cold = tempfile::tempdir().unwrap();
                let config = EngineConfig { cache_dir: Some(cold.path().join("compiled")), ..EngineConfig::default() };
                (cold, Engine::new(config).unwrap())
            },
            |(cold, engine)| rt.block_on(first_run(&engine, Path::new(&tagged), &trusted, &cold.path().join("pulled"))),
            BatchSize::PerIteration,
        )
    });
    group.bench_function("cached reference by tag, verified", |b| {
        b.iter(|| rt.block_on(first_run(&engine, Path::new(&tagged), &trusted, &warm)))
    });
    group.bench_function("cached reference by tag, no trust rule", |b| {
        b.iter(|| rt.block_on(first_run(&engine, Path::new(&tagged), &untrusted, &warm)))
    });
    group.bench_function("cached reference by digest, signer cached", |b| {
        b.iter(|| rt.block_on(first_run(&engine, Path::new(&by_digest), &trusted, &warm)))
    });
    group.bench_function("cached reference by digest, no trust rule", |b| {
        b.iter(|| rt.block_on(first_run(&engine, Path::new(&by_digest), &untrusted, &warm)))
    });
    group.bench_function("file path", |b| {
        b.iter(|| rt.block_on(first_run(&engine, Path::new(built::TEXT_STATS), &trusted, &warm)))
    });
    group.finish();
}

criterion_group!(benches, registry_bench);
criterion_main!(benches);
