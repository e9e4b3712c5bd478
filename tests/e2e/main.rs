//! End-to-end tests: real components built from `plugins/`, loaded and run by
//! the host. One test binary, so wasmtime is linked once.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

mod durable;
mod failures;
mod loading;
mod mcp;
mod models;
mod running;
mod web;

use std::sync::OnceLock;
use std::time::Duration;

use nexo::{Engine, EngineConfig};

/// The process-wide engine most tests share, as production does. Its cache
/// lives in a private temporary directory.
pub fn engine() -> &'static Engine {
    static ENGINE: OnceLock<(Engine, tempfile::TempDir)> = OnceLock::new();
    &ENGINE
        .get_or_init(|| {
            let dir = tempfile::tempdir().expect("temp dir");
            let config = EngineConfig { cache_dir: Some(dir.path().to_path_buf()), ..EngineConfig::default() };
            (Engine::new(config).expect("engine"), dir)
        })
        .0
}

/// An engine with custom limits and no cache, for tests of the limits.
pub fn engine_with(f: impl FnOnce(&mut EngineConfig)) -> Engine {
    let mut config = EngineConfig { cache_dir: None, max_live_instances: 8, ..EngineConfig::default() };
    f(&mut config);
    Engine::new(config).expect("engine")
}

/// A short deadline for tests that expect to hit it.
pub const SHORT: Duration = Duration::from_millis(300);
