//! The process-wide WebAssembly engine: compilation, the compile cache, the
//! instance pool, and the limits every run gets.
//!
//! One [`Engine`] serves a whole process. It owns:
//!
//! - a wasmtime engine with the component model, async host calls, epoch
//!   interruption (a ticker thread advances the epoch; each store gets a
//!   deadline in ticks), and, by default, the pooling instance allocator;
//! - the on-disk compile cache ([`cache`]), keyed by the component's SHA-256 and
//!   the engine's compatibility hash;
//! - a slot per type for what is built once per engine and shared by every
//!   run ([`Engine::shared`]): each world keeps its linker there, so the
//!   engine itself knows no world.

pub mod cache;

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use wasmtime::component::Component;
use wasmtime::{Config, InstanceAllocationStrategy, PoolingAllocationConfig};

pub use cache::{CacheOutcome, ComponentCache};

const MIB: usize = 1 << 20;

/// Limits applied to every plugin run. The defaults are safe for untrusted
/// plugins; raise them per deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock limit for one `run` call, including host calls it makes.
    /// Default: 300 s.
    pub run_timeout: Duration,
    /// Wall-clock limit for describing a plugin (its manifest, metadata or
    /// info export) and other short calls. Default: 5 s.
    pub call_timeout: Duration,
    /// Largest linear memory one instance may grow to, in bytes.
    /// Default: 256 MiB.
    pub memory_bytes: usize,
    /// Largest table one instance may grow to, in elements. Default: 100 000.
    pub table_elements: usize,
    /// Most core instances, tables and memories in one store. Default: 64.
    pub instances_per_store: usize,
    /// Largest string or byte list a plugin may hand to one host call.
    /// Default: 1 MiB.
    pub host_arg_bytes: usize,
    /// Longest log line kept; longer lines are cut. Default: 4 KiB.
    pub log_line_bytes: usize,
    /// Most log lines kept per run; later lines are dropped. Default: 1 000.
    pub log_lines: usize,
    /// Bytes of the plugin's stdout and stderr kept per run. Default: 64 KiB.
    pub stdio_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            run_timeout: Duration::from_secs(300),
            call_timeout: Duration::from_secs(5),
            memory_bytes: 256 * MIB,
            table_elements: 100_000,
            instances_per_store: 64,
            host_arg_bytes: MIB,
            log_line_bytes: 4096,
            log_lines: 1000,
            stdio_bytes: 64 * 1024,
        }
    }
}

/// The smallest memory cap [`Limits::check`] accepts: below it even a small
/// Rust component (1 MiB of stack plus its data) cannot start.
pub const MIN_MEMORY_BYTES: usize = 16 * MIB;
/// The largest memory cap: all a 32-bit linear memory can address.
pub const MAX_MEMORY_BYTES: usize = 4096 * MIB;

impl Limits {
    /// Refuses limits no run could work under, before the engine is built,
    /// so a bad cap is a configuration error rather than a plugin that looks
    /// invalid.
    pub fn check(&self) -> Result<(), crate::error::ConfigError> {
        use crate::error::ConfigError;
        if !(MIN_MEMORY_BYTES..=MAX_MEMORY_BYTES).contains(&self.memory_bytes) {
            return Err(ConfigError::invalid(
                "--memory",
                format!(
                    "the memory cap of {} bytes is out of range: give 16 to 4096 MiB (`--memory MIB`)",
                    self.memory_bytes
                ),
            ));
        }
        if self.run_timeout.is_zero() || self.call_timeout.is_zero() {
            return Err(ConfigError::invalid(
                "--timeout",
                "a time limit of zero lets nothing run: give a positive one (`--timeout SECS`)",
            ));
        }
        Ok(())
    }
}

/// How the engine is built. The defaults suit a long-running host.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Per-run limits.
    pub limits: Limits,
    /// Use the pooling instance allocator (fast instantiation, memory
    /// reserved up front). Default: on.
    pub pooling: bool,
    /// With pooling: how many component instances may be live at once.
    /// Default: 128.
    pub max_live_instances: u32,
    /// Where compiled components are cached; `None` disables the cache.
    /// Default: `$NEXO_CACHE_DIR`, else `$XDG_CACHE_HOME/nexo/components`, else
    /// `~/.cache/nexo/components`. The directory must be writable only by the
    /// operator: cached artifacts are native code.
    pub cache_dir: Option<PathBuf>,
    /// How often the epoch advances; deadlines are rounded up to it.
    /// Default: 10 ms.
    pub epoch_tick: Duration,
    /// Compile a component's functions on all cores at once (wasmtime's
    /// own thread pool). Default: on. `nexo serve` turns it off, so that a
    /// compile runs on the thread that asked for it, at that thread's
    /// priority, and a tenant's upload cannot take every core from the API.
    pub parallel_compilation: bool,
    /// Told before a component is compiled rather than loaded from the
    /// cache: a large one takes seconds, which a front end says. Default:
    /// none.
    pub on_compile: Option<CompileNotice>,
}

/// What [`EngineConfig::on_compile`] is told: the component's size in
/// bytes, and whether the compiled code will be cached (so later loads are
/// quick).
#[derive(Clone)]
pub struct CompileNotice(Arc<dyn Fn(usize, bool) + Send + Sync>);

impl CompileNotice {
    /// A notice that calls `tell`.
    pub fn new(tell: impl Fn(usize, bool) + Send + Sync + 'static) -> Self {
        CompileNotice(Arc::new(tell))
    }
}

impl std::fmt::Debug for CompileNotice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CompileNotice")
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            limits: Limits::default(),
            pooling: true,
            max_live_instances: 128,
            cache_dir: cache::default_dir(),
            epoch_tick: Duration::from_millis(10),
            parallel_compilation: true,
            on_compile: None,
        }
    }
}

/// The shared engine. Cheap to clone.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    wasmtime: wasmtime::Engine,
    config: EngineConfig,
    cache: Option<ComponentCache>,
    shared: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("config", &self.inner.config).finish_non_exhaustive()
    }
}

impl Engine {
    /// Builds the engine, its linkers and its cache, and starts the epoch
    /// ticker.
    pub fn new(config: EngineConfig) -> anyhow::Result<Engine> {
        config.limits.check()?;
        let wasmtime = wasmtime::Engine::new(&wasmtime_config(&config)?)
            .map_err(anyhow::Error::from)
            .context("cannot create the WebAssembly engine")?;
        let cache = match &config.cache_dir {
            Some(dir) => Some(ComponentCache::open(dir, &wasmtime)?),
            None => None,
        };
        let engine = Engine { inner: Arc::new(Inner { shared: Mutex::new(HashMap::new()), wasmtime, config, cache }) };
        spawn_ticker(&engine.inner.wasmtime, engine.inner.config.epoch_tick);
        Ok(engine)
    }

    /// The underlying wasmtime engine.
    pub fn wasmtime(&self) -> &wasmtime::Engine {
        &self.inner.wasmtime
    }

    /// The configuration the engine was built with.
    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    /// The per-run limits.
    pub fn limits(&self) -> &Limits {
        &self.inner.config.limits
    }

    /// The value of type `T` this engine shares between runs, built by
    /// `init` on first use: a world's linker, for example. Built once; a
    /// failed `init` is returned and tried again next time.
    pub fn shared<T: Send + Sync + 'static>(
        &self,
        init: impl FnOnce(&Engine) -> wasmtime::Result<T>,
    ) -> wasmtime::Result<Arc<T>> {
        let key = TypeId::of::<T>();
        if let Some(found) = self.slots().get(&key).cloned() {
            return found.downcast::<T>().map_err(|_| wasmtime::format_err!("engine slot holds another type"));
        }
        // Built outside the lock: a linker takes a while, and `init` may use the engine.
        let value: Arc<T> = Arc::new(init(self)?);
        let mut slots = self.slots();
        let kept = slots.entry(key).or_insert_with(|| value.clone() as Arc<dyn Any + Send + Sync>).clone();
        kept.downcast::<T>().map_err(|_| wasmtime::format_err!("engine slot holds another type"))
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<TypeId, Arc<dyn Any + Send + Sync>>> {
        self.inner.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Compiles a component, or loads it from the compile cache.
    pub fn compile(&self, bytes: &[u8]) -> anyhow::Result<(Component, CacheOutcome)> {
        let tell = |cached: bool| {
            if let Some(notice) = &self.inner.config.on_compile {
                (notice.0)(bytes.len(), cached);
            }
        };
        match &self.inner.cache {
            Some(cache) => cache.load_or_compile(&self.inner.wasmtime, bytes, || tell(true)),
            None => {
                tell(false);
                Ok((Component::new(&self.inner.wasmtime, bytes)?, CacheOutcome::Disabled))
            }
        }
    }

    /// The number of epoch ticks that covers `timeout`.
    pub fn ticks_for(&self, timeout: Duration) -> u64 {
        let tick = self.inner.config.epoch_tick.as_nanos().max(1);
        // One extra tick: the first one may come right after the deadline is set.
        (timeout.as_nanos().div_ceil(tick) as u64).saturating_add(1)
    }
}

fn wasmtime_config(config: &EngineConfig) -> anyhow::Result<Config> {
    let limits = &config.limits;
    let mut c = Config::new();
    c.wasm_component_model(true);
    c.epoch_interruption(true);
    // Our guests are synchronous; the component-model-async machinery would
    // only add a host task to every call.
    c.concurrency_support(false);
    c.max_wasm_stack(MIB);
    c.parallel_compilation(config.parallel_compilation);
    if config.pooling {
        let mut pool = PoolingAllocationConfig::default();
        let live = config.max_live_instances;
        let per_store = u32::try_from(limits.instances_per_store).unwrap_or(u32::MAX);
        pool.total_component_instances(live)
            .total_core_instances(live.saturating_mul(per_store.min(8)))
            .total_memories(live.saturating_mul(4))
            .total_tables(live.saturating_mul(8))
            .max_memories_per_component(per_store.min(16))
            .max_tables_per_component(per_store.min(32))
            .max_core_instances_per_component(per_store)
            .max_memory_size(limits.memory_bytes)
            .table_elements(limits.table_elements)
            // Keeping a little memory resident avoids page faults on the
            // next instantiation; more costs a reset on every drop.
            .linear_memory_keep_resident(64 * 1024)
            .table_keep_resident(64 * 1024);
        c.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    Ok(c)
}

fn spawn_ticker(engine: &wasmtime::Engine, tick: Duration) {
    let weak = engine.weak();
    let spawned = std::thread::Builder::new().name("nexo-epoch".into()).spawn(move || {
        loop {
            std::thread::sleep(tick);
            match weak.upgrade() {
                Some(engine) => engine.increment_epoch(),
                None => break,
            }
        }
    });
    if let Err(e) = spawned {
        // Without the ticker no deadline fires; runs still end at the
        // wall-clock timeout that wraps every call.
        tracing::error!(error = %e, "cannot start the epoch ticker thread");
    }
}
