//! Each misbehaving plugin gets its own clear error, and the host goes on.

use std::time::{Duration, Instant};

use nexo::quota::RunBudget;
use nexo::settings::{RunLimits, RunOptions};
use nexo::{LoadError, Plugin, PluginKind, RunError};
use nexo_tests as built;

use crate::{SHORT, engine, engine_with};

/// After any failure the same engine must still run a healthy plugin.
async fn host_still_works(engine: &nexo::Engine) {
    let healthy = Plugin::load(engine, built::TEXT_STATS).await.unwrap();
    let answer = healthy.run_agent("still here", &RunOptions::default()).await.unwrap();
    assert!(answer.contains("words: 2"), "{answer}");
}

#[tokio::test]
async fn a_file_that_is_not_wasm() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.wasm");
    std::fs::write(&path, "#!/bin/sh\necho not wasm\n").unwrap();
    let err = Plugin::load(engine(), &path).await.unwrap_err();
    assert!(matches!(err, LoadError::NotWasm { .. }), "{err:?}");
    assert!(err.to_string().contains("magic bytes"), "{err}");
    // An empty file and a missing file are clear too.
    std::fs::write(&path, b"").unwrap();
    assert!(matches!(Plugin::load(engine(), &path).await.unwrap_err(), LoadError::NotWasm { .. }));
    let missing = Plugin::load(engine(), dir.path().join("nope.wasm")).await.unwrap_err();
    assert!(matches!(missing, LoadError::Read { .. }), "{missing:?}");
    host_still_works(engine()).await;
}

#[tokio::test]
async fn a_core_module_instead_of_a_component() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("core.wasm");
    // The smallest valid core module: magic and version 1.
    std::fs::write(&path, b"\0asm\x01\0\0\0").unwrap();
    let err = Plugin::load(engine(), &path).await.unwrap_err();
    assert!(matches!(err, LoadError::CoreModule { .. }), "{err:?}");
    assert!(err.to_string().contains("wasm32-wasip2"), "{err}");
    host_still_works(engine()).await;
}

#[tokio::test]
async fn a_truncated_component() {
    let bytes = std::fs::read(built::HELLO).unwrap();
    let err = Plugin::from_bytes(engine(), "cut.wasm".into(), &bytes[..bytes.len() / 2]).await.unwrap_err();
    assert!(matches!(err, LoadError::Invalid { .. }), "{err:?}");
    host_still_works(engine()).await;
}

#[tokio::test]
async fn a_precompiled_artifact_is_refused() {
    let bytes = std::fs::read(built::HELLO).unwrap();
    let native = engine().wasmtime().precompile_component(&bytes).unwrap();
    let err = Plugin::from_bytes(engine(), "hello.cwasm".into(), &native).await.unwrap_err();
    assert!(matches!(err, LoadError::Precompiled { .. }), "{err:?}");
}

#[tokio::test]
async fn a_component_of_an_unknown_world() {
    let err = Plugin::load(engine(), built::NOT_A_PLUGIN).await.unwrap_err();
    match &err {
        LoadError::UnknownWorld { exports, .. } => assert_eq!(exports, &["acme:greeter/greet@1.0.0".to_string()]),
        other => panic!("expected UnknownWorld, got {other:?}"),
    }
    assert!(err.to_string().contains("nexo:plugin/agent"), "{err}");
    host_still_works(engine()).await;
}

#[tokio::test]
async fn a_missing_export() {
    let err = Plugin::load(engine(), built::NO_RUN).await.unwrap_err();
    match &err {
        LoadError::MissingExport { kind, detail, .. } => {
            assert_eq!(*kind, PluginKind::Agent);
            assert!(detail.contains("manifest"), "{detail}");
        }
        other => panic!("expected MissingExport, got {other:?}"),
    }
    host_still_works(engine()).await;
}

#[tokio::test]
async fn a_skill_that_imports_tools_is_refused() {
    let err = Plugin::load(engine(), built::GREEDY_SKILL).await.unwrap_err();
    match &err {
        LoadError::ForbiddenImport { kind, import, .. } => {
            assert_eq!(*kind, PluginKind::Skill);
            assert_eq!(import, "nexo:plugin/tools@0.1.4");
        }
        other => panic!("expected ForbiddenImport, got {other:?}"),
    }
    assert!(err.to_string().contains("holds no authority"), "{err}");
}

#[tokio::test]
async fn a_bad_manifest() {
    let err = Plugin::load(engine(), built::BAD_MANIFEST).await.unwrap_err();
    match &err {
        LoadError::BadManifest { field, problem, .. } => {
            assert_eq!(*field, "name");
            assert!(problem.contains("Not A Valid Name!"), "{problem}");
        }
        other => panic!("expected BadManifest, got {other:?}"),
    }
}

#[tokio::test]
async fn a_trap_is_reported_with_the_plugin_name() {
    let plugin = Plugin::load(engine(), built::TRAP).await.unwrap();
    let err = plugin.run_agent("payload", &RunOptions::default()).await.unwrap_err();
    match &err {
        RunError::Trap { plugin, function, trap, stderr, .. } => {
            assert_eq!(plugin, "trap");
            assert_eq!(function, "run");
            assert!(trap.contains("unreachable"), "{trap}");
            assert!(stderr.contains("deliberate failure while handling \"payload\""), "{stderr}");
        }
        other => panic!("expected Trap, got {other:?}"),
    }
    assert!(err.to_string().starts_with("plugin `trap` trapped in `run`"), "{err}");
    host_still_works(engine()).await;
}

#[tokio::test]
async fn an_endless_loop_is_stopped_at_the_deadline() {
    let plugin = Plugin::load(engine(), built::SPIN).await.unwrap();
    let started = Instant::now();
    let options =
        RunOptions { limits: RunLimits { timeout: Some(SHORT), ..RunLimits::default() }, ..RunOptions::default() };
    let err = plugin.run_agent("go", &options).await.unwrap_err();
    let took = started.elapsed();
    match &err {
        RunError::Deadline { plugin, limit, .. } => {
            assert_eq!(plugin, "spin");
            assert_eq!(*limit, SHORT);
        }
        other => panic!("expected Deadline, got {other:?}"),
    }
    assert!(took >= SHORT, "stopped before the deadline: {took:?}");
    assert!(took < Duration::from_secs(10), "the deadline did not stop the loop promptly: {took:?}");
    host_still_works(engine()).await;
}

/// A run's CPU meter counts the ticks its guest runs for and stops it past
/// its allowance, well before the deadline; a guest that waits costs none.
#[tokio::test]
async fn a_guest_past_its_cpu_allowance_is_stopped_with_its_own_error() {
    let plugin = Plugin::load(engine(), built::SPIN).await.unwrap();
    let meter = std::sync::Arc::new(nexo_egress::Meter::new(Some(5)));
    let options = RunOptions {
        limits: RunLimits { timeout: Some(Duration::from_secs(30)), ..RunLimits::default() },
        budget: RunBudget { cpu_ticks: Some(meter.clone()), ..RunBudget::default() },
        ..RunOptions::default()
    };
    let started = Instant::now();
    let err = plugin.run_agent("go", &options).await.unwrap_err();
    match &err {
        RunError::CpuQuota { plugin, used, limit, .. } => {
            assert_eq!((plugin.as_str(), *used, *limit), ("spin", 6, 5), "{err}");
        }
        other => panic!("expected CpuQuota, got {other:?}"),
    }
    assert!(err.to_string().contains("cpu-ticks-per-run"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10), "stopped by the meter, not the deadline");
    // Counting only: never stops a run, and a short one uses few ticks
    // (a loaded machine can stretch it over several).
    let stats = Plugin::load(engine(), built::TEXT_STATS).await.unwrap();
    let counting = std::sync::Arc::new(nexo_egress::Meter::new(None));
    let options = RunOptions {
        budget: RunBudget { cpu_ticks: Some(counting.clone()), ..RunBudget::default() },
        ..RunOptions::default()
    };
    stats.run_agent("a b c", &options).await.unwrap();
    assert!(counting.used() < 50, "{} ticks", counting.used());
    host_still_works(engine()).await;
}

#[tokio::test]
async fn a_spinning_plugin_does_not_block_other_runs() {
    let spin = Plugin::load(engine(), built::SPIN).await.unwrap();
    let stats = Plugin::load(engine(), built::TEXT_STATS).await.unwrap();
    let options = RunOptions {
        limits: RunLimits { timeout: Some(Duration::from_secs(2)), ..RunLimits::default() },
        ..RunOptions::default()
    };
    let spinning = tokio::spawn({
        let options = options.clone();
        async move { spin.run_agent("x", &options).await }
    });
    // While it spins, other runs complete.
    for _ in 0..5 {
        let answer = stats.run_agent("a b c", &RunOptions::default()).await.unwrap();
        assert!(answer.contains("words: 3"));
    }
    assert!(matches!(spinning.await.unwrap(), Err(RunError::Deadline { .. })));
}

#[tokio::test]
async fn a_memory_hog_is_refused_at_the_cap() {
    let cap = 32 << 20;
    let engine = engine_with(|c| c.limits.memory_bytes = cap);
    let plugin = Plugin::load(&engine, built::HOG).await.unwrap();
    let err = plugin.run_agent("eat", &RunOptions::default()).await.unwrap_err();
    match &err {
        RunError::MemoryLimit { plugin, requested, cap: reported, .. } => {
            assert_eq!(plugin, "hog");
            assert_eq!(*reported, cap);
            assert!(*requested > cap);
        }
        other => panic!("expected MemoryLimit, got {other:?}"),
    }
    host_still_works(&engine).await;
}

#[tokio::test]
async fn one_engine_holds_each_run_to_its_own_memory_cap() {
    // The engine's cap is the largest; a run brings its own, below it.
    let cap = 32 << 20;
    let small =
        RunOptions { limits: RunLimits { memory_bytes: Some(cap), ..RunLimits::default() }, ..RunOptions::default() };
    let hog = Plugin::load(engine(), built::HOG).await.unwrap();
    match hog.run_agent("eat", &small).await.unwrap_err() {
        RunError::MemoryLimit { cap: reported, requested, .. } => {
            assert_eq!(reported, cap);
            assert!(requested > cap);
        }
        other => panic!("expected MemoryLimit, got {other:?}"),
    }
    // A component that declares more than the run's cap is refused before
    // it instantiates, naming what it needs; with that, the same engine runs it.
    let big = Plugin::load(engine(), built::BIG_MEMORY).await.unwrap();
    let err = big.run_agent("x", &small).await.unwrap_err();
    let need = err.memory_needed_mib().unwrap_or_else(|| panic!("{err}"));
    assert!(need > 32, "{err}");
    let enough = RunOptions {
        limits: RunLimits { memory_bytes: Some((need as usize + 8) << 20), ..RunLimits::default() },
        ..RunOptions::default()
    };
    big.run_agent("x", &enough).await.unwrap();
    host_still_works(engine()).await;
}

#[tokio::test]
async fn runs_are_isolated_from_each_other() {
    // A trap in one instance leaves a second instance of the same plugin,
    // created afterwards, unaffected.
    let plugin = Plugin::load(engine(), built::TEXT_STATS).await.unwrap();
    let mut first = plugin.instantiate_agent(&RunOptions::default()).await.unwrap();
    let trap = Plugin::load(engine(), built::TRAP).await.unwrap();
    assert!(trap.run_agent("x", &RunOptions::default()).await.is_err());
    assert!(first.run("one").await.unwrap().answer.contains("words: 1"));
    assert!(first.run("one two").await.unwrap().answer.contains("words: 2"));
}

#[tokio::test]
async fn a_full_instance_pool_is_a_clear_error_not_a_crash() {
    let engine = engine_with(|c| c.max_live_instances = 2);
    let plugin = Plugin::load(&engine, built::TEXT_STATS).await.unwrap();
    let _a = plugin.instantiate_agent(&RunOptions::default()).await.unwrap();
    let _b = plugin.instantiate_agent(&RunOptions::default()).await.unwrap();
    match plugin.instantiate_agent(&RunOptions::default()).await {
        Err(RunError::Instantiate { plugin, reason }) => {
            assert_eq!(plugin, "text-stats");
            assert!(reason.contains("max_live_instances"), "{reason}");
        }
        Err(other) => panic!("expected Instantiate, got {other:?}"),
        Ok(_) => panic!("expected Instantiate, got an instance"),
    }
    drop(_a);
    // A freed slot is usable again.
    assert!(plugin.run_agent("x", &RunOptions::default()).await.is_ok());
}
