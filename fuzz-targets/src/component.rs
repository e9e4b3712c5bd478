//! Component loading (`Plugin::load`, `Plugin::from_bytes`, which `nexo
//! inspect` runs): mutated components, generated core modules and odd paths.

use std::sync::OnceLock;

use arbitrary::Unstructured;
use nexo::{Engine, EngineConfig, LoadError, Plugin};

use crate::runtime;

fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let _entered = runtime().enter();
        let config = EngineConfig { cache_dir: None, max_live_instances: 8, ..EngineConfig::default() };
        Engine::new(config).unwrap_or_else(|e| panic!("engine: {e}"))
    })
}

/// Input that starts with the wasm magic (`\0asm`) is loaded as it is (a
/// mutated first-party component, from the corpus); a first byte of 1
/// picks an odd path to load (a directory, a FIFO, a device, a symlink
/// loop, a missing file); anything else feeds `wasm-smith`, whose core
/// module must be refused as one. Checks: loading ends, with a plugin or a
/// typed [`LoadError`], and never panics.
pub fn component_load(data: &[u8]) {
    match data.first() {
        Some(0) => {
            let result = runtime().block_on(Plugin::from_bytes(engine(), "fuzz.wasm".into(), data));
            if let Err(e) = result {
                assert!(!e.to_string().is_empty(), "an empty error: {e:?}");
            }
        }
        Some(1) => odd_path(data.get(1).copied().unwrap_or(0)),
        _ => {
            let mut u = Unstructured::new(data);
            let Ok(module) = wasm_smith::Module::new(wasm_smith::Config::default(), &mut u) else { return };
            let bytes = module.to_bytes();
            match runtime().block_on(Plugin::from_bytes(engine(), "core.wasm".into(), &bytes)) {
                Err(LoadError::CoreModule { .. }) => {}
                Err(other) => panic!("a core module got {other:?}, not CoreModule"),
                Ok(plugin) => panic!("a core module loaded as the plugin {}", plugin.name()),
            }
        }
    }
}

fn odd_path(pick: u8) {
    let Ok(dir) = tempfile::tempdir() else { panic!("no temporary directory") };
    let d = dir.path();
    let loop_a = d.join("loop-a");
    #[cfg(unix)]
    {
        let _ = std::os::unix::fs::symlink(d.join("loop-b"), &loop_a);
        let _ = std::os::unix::fs::symlink(&loop_a, d.join("loop-b"));
        let _ = std::os::unix::fs::symlink(d.join("missing"), d.join("dangling"));
        let fifo = d.join("fifo");
        let _ = std::process::Command::new("mkfifo").arg(&fifo).status();
    }
    let paths = [
        d.to_path_buf(),
        d.join("fifo"),
        "/dev/null".into(),
        "/dev/zero".into(),
        loop_a,
        d.join("dangling"),
        d.join("missing.wasm"),
        d.join("a\u{0}b.wasm"),
        d.join("not-a-dir.wasm/x.wasm"),
    ];
    let path = &paths[usize::from(pick) % paths.len()];
    let loaded = runtime().block_on(async {
        tokio::time::timeout(std::time::Duration::from_secs(10), Plugin::load(engine(), path)).await
    });
    match loaded {
        Ok(Err(LoadError::Read { .. } | LoadError::NotWasm { .. })) => {}
        Ok(Err(other)) => panic!("loading {} got {other:?}", path.display()),
        Ok(Ok(_)) => panic!("loaded a plugin from {}", path.display()),
        Err(_) => panic!("loading {} did not end within 10 s", path.display()),
    }
}
