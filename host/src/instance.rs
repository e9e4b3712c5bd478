//! What every plugin store holds, whatever its world: the WASI context
//! (granting nothing unless the run adds preopens), the resource limiter and
//! captured stdio ([`Core`]), next to the world's own
//! per-instance state `W` ([`Host`]). Also the one place a guarded call's
//! outcome becomes a typed error ([`settle`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::{HasData, Linker, ResourceTable};
use wasmtime::{ResourceLimiter, Store};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use crate::bindings::agent::nexo::plugin::types;
use crate::engine::{Engine, Limits};
use crate::error::RunError;
use crate::quota::{CpuBudget, MemoryBudget};
use crate::stop::Stop;

/// The linker of one world, built once per engine.
pub(crate) struct WorldLinker<T: 'static>(pub(crate) wasmtime::component::Linker<T>);

/// A directory the run exposes to the component through WASI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preopen {
    /// The host directory.
    pub host: PathBuf,
    /// Where the guest sees it, for example `/workspace`.
    pub guest: String,
    /// Whether the guest may create and change files there.
    pub writable: bool,
}

/// What a store is set up with, besides the world's own state.
#[derive(Debug, Clone, Default)]
pub struct Wasi {
    /// Directories preopened into the component.
    pub preopens: Vec<Preopen>,
    /// Environment variables; empty by default.
    pub env: Vec<(String, String)>,
    /// A recorded run's journal: the clocks and the random seed go through
    /// it, so a replay sees the times and random numbers the first pass saw.
    pub journal: Option<Arc<crate::journal::Journal>>,
    /// A memory total this store shares with others (a tenant's instances).
    pub memory: Option<Arc<MemoryBudget>>,
    /// A CPU share this store's guest draws on with others (a tenant's).
    pub cpu: Option<Arc<CpuBudget>>,
    /// Where the guest's CPU ticks are counted, with its allowance: the
    /// epoch ticks at which it was running, a sample of its CPU time taken
    /// at each tick (time spent waiting on the host is not counted). Past
    /// the allowance the guest is stopped ([`RunError::CpuQuota`]).
    pub cpu_meter: Option<Arc<nexo_egress::Meter>>,
    /// The run's own memory cap, within the engine's (`None`: the
    /// engine's): one engine serves runs with different caps.
    pub memory_cap: Option<usize>,
}

/// A limit a plugin ran into, recorded by the limiter so the host can
/// report it precisely after the trap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitHit {
    /// A memory wanted to grow past the cap.
    Memory {
        /// The size the guest asked for.
        requested: usize,
        /// The cap.
        cap: usize,
    },
    /// A memory's growth would take the shared budget past its total.
    SharedMemory {
        /// The growth asked for.
        requested: usize,
        /// What the budget's stores held then.
        in_use: usize,
        /// The budget's total.
        cap: usize,
    },
    /// A table wanted to grow past the cap.
    Table {
        /// The size the guest asked for.
        requested: usize,
        /// The cap.
        cap: usize,
    },
}

/// Enforces [`Limits`] on memories, tables and instances, and remembers what
/// it refused.
#[derive(Debug)]
pub struct RunLimiter {
    memory_cap: usize,
    table_cap: usize,
    instances: usize,
    /// The budget shared with other stores, and what this store holds of it.
    shared: Option<(Arc<MemoryBudget>, usize)>,
    /// The first limit the plugin hit, if any.
    pub hit: Option<LimitHit>,
}

impl Drop for RunLimiter {
    fn drop(&mut self) {
        if let Some((budget, held)) = &self.shared {
            budget.release(*held);
        }
    }
}

impl ResourceLimiter for RunLimiter {
    fn memory_growing(&mut self, current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.memory_cap {
            self.hit.get_or_insert(LimitHit::Memory { requested: desired, cap: self.memory_cap });
            // Trap rather than return -1: an allocator that sees -1 would abort
            // with a less precise message.
            wasmtime::bail!("memory cap of {} bytes exceeded (asked for {desired})", self.memory_cap);
        }
        if let Some((budget, held)) = &mut self.shared {
            let growth = desired.saturating_sub(current);
            if let Err(in_use) = budget.reserve(growth) {
                let cap = budget.cap();
                self.hit.get_or_insert(LimitHit::SharedMemory { requested: growth, in_use, cap });
                wasmtime::bail!(
                    "shared memory total of {cap} bytes exceeded ({in_use} in use, asked for {growth} more)"
                );
            }
            *held += growth;
        }
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.table_cap {
            self.hit.get_or_insert(LimitHit::Table { requested: desired, cap: self.table_cap });
            wasmtime::bail!("table cap of {} elements exceeded (asked for {desired})", self.table_cap);
        }
        Ok(true)
    }

    fn instances(&self) -> usize {
        self.instances
    }

    fn tables(&self) -> usize {
        self.instances
    }

    fn memories(&self) -> usize {
        self.instances
    }
}

/// The part of a store every world shares.
pub struct Core {
    /// The plugin's name, for logs and errors.
    pub plugin: Arc<str>,
    /// The limits of this run.
    pub limits: Limits,
    /// The resource limiter.
    pub limiter: RunLimiter,
    /// When the guest's current call must end: checked at every epoch tick
    /// while it runs ([`arm_deadline`] sets it again for a later call).
    pub deadline: std::time::Instant,
    /// The CPU share the guest draws on, if any.
    cpu: Option<Arc<CpuBudget>>,
    /// Where its CPU ticks are counted, if anywhere.
    cpu_meter: Option<Arc<nexo_egress::Meter>>,
    /// Set when its run is halted: the guest stops at the next tick.
    stop: Option<Arc<Stop>>,
    wasi: WasiCtx,
    table: ResourceTable,
    stdout: MemoryOutputPipe,
    stderr: MemoryOutputPipe,
}

impl Core {
    /// What the plugin wrote to stderr (a Rust panic message, for example),
    /// lossily decoded and trimmed.
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr.contents()).trim().to_string()
    }

    /// What the plugin wrote to stdout.
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout.contents()).trim().to_string()
    }

    /// Sends what the plugin printed to the log; the pipes are already bounded.
    pub fn log_stdio(&self) {
        let plugin = &*self.plugin;
        let (out, err) = (self.stdout_text(), self.stderr_text());
        if !out.is_empty() {
            tracing::info!(target: "nexo::plugin", plugin, stream = "stdout", "{out}");
        }
        if !err.is_empty() {
            tracing::info!(target: "nexo::plugin", plugin, stream = "stderr", "{err}");
        }
    }
}

/// The data of a plugin store: the shared [`Core`] and the world's state.
pub struct Host<W> {
    /// What every world has.
    pub core: Core,
    /// The world's own per-instance state.
    pub world: W,
}

impl<W: Send + 'static> WasiView for Host<W> {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.core.wasi, table: &mut self.core.table }
    }
}

/// Projects a store's data onto its [`Core`], for the imports every world
/// shares (`log`, `types`).
pub struct HasCore;

impl HasData for HasCore {
    type Data<'a> = &'a mut Core;
}

/// A linker with what every world offers: WASI 0.2 (granting nothing by
/// itself) and `types`. Worlds that import `log` add it with their context
/// (`crate::log::link`).
pub fn base_linker<W: Send + 'static>(engine: &Engine) -> wasmtime::Result<Linker<Host<W>>> {
    let mut linker = Linker::new(engine.wasmtime());
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    types::add_to_linker::<Host<W>, HasCore>(&mut linker, |h| &mut h.core)?;
    Ok(linker)
}

/// Builds a store for one instance of `plugin`: the engine's limits, a
/// deadline of `timeout`, the WASI set-up in `wasi`, and the world's state.
pub fn new_store<W: Send + 'static>(
    engine: &Engine,
    plugin: Arc<str>,
    wasi_setup: &Wasi,
    timeout: Duration,
    world: W,
) -> Result<Store<Host<W>>, RunError> {
    let limits = engine.limits().clone();
    let stdout = MemoryOutputPipe::new(limits.stdio_bytes);
    let stderr = MemoryOutputPipe::new(limits.stdio_bytes);
    // The builder grants nothing by default: no env, args, network or files.
    let mut wasi = WasiCtxBuilder::new();
    wasi.stdout(stdout.clone()).stderr(stderr.clone());
    // No sockets and no name lookups: the builder's defaults, stated so a
    // later change cannot loosen them by accident.
    wasi.allow_tcp(false).allow_udp(false).allow_ip_name_lookup(false);
    for (key, value) in &wasi_setup.env {
        wasi.env(key, value);
    }
    for p in &wasi_setup.preopens {
        let perms = if p.writable { FsPerms::ReadWrite } else { FsPerms::ReadOnly };
        wasi.preopened_dir(&p.host, &p.guest, perms).map_err(|e| RunError::Instantiate {
            plugin: plugin.to_string(),
            reason: format!("cannot open {} for the plugin: {e}", p.host.display()),
        })?;
    }
    if let Some(journal) = &wasi_setup.journal {
        journaled_sources(&mut wasi, journal);
    }
    let limiter = RunLimiter {
        memory_cap: wasi_setup.memory_cap.map_or(limits.memory_bytes, |cap| cap.min(limits.memory_bytes)),
        table_cap: limits.table_elements,
        instances: limits.instances_per_store,
        shared: wasi_setup.memory.clone().map(|b| (b, 0)),
        hit: None,
    };
    let deadline = std::time::Instant::now() + timeout;
    let core = Core {
        plugin,
        limiter,
        deadline,
        cpu: wasi_setup.cpu.clone(),
        cpu_meter: wasi_setup.cpu_meter.clone(),
        stop: wasi_setup.journal.as_ref().map(|j| j.stop_signal().clone()),
        wasi: wasi.build(),
        table: ResourceTable::new(),
        stdout,
        stderr,
        limits,
    };
    let mut store = Store::new(engine.wasmtime(), Host { core, world });
    store.limiter(|s| &mut s.core.limiter);
    // At every epoch tick the running guest yields to the executor, so a
    // busy loop holds a worker thread for one tick at most and other runs
    // (another tenant's) go on; past its deadline it traps instead.
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(|ctx| {
        let core = &ctx.data().core;
        let now = std::time::Instant::now();
        if now >= core.deadline || core.stop.as_ref().is_some_and(|s| s.is_stopped()) {
            return Ok(wasmtime::UpdateDeadline::Interrupt);
        }
        if core.cpu_meter.as_ref().is_some_and(|m| !m.add(1)) {
            return Ok(wasmtime::UpdateDeadline::Interrupt);
        }
        // Over its CPU share: sleep until the next tick is earned (never past
        // the deadline, and no longer once the run is stopped).
        if let Some(wait) = core.cpu.as_ref().and_then(|c| c.take()) {
            let wait = wait.min(core.deadline.saturating_duration_since(now));
            let stop = core.stop.clone();
            let sleep = async move {
                match stop {
                    Some(stop) => {
                        tokio::select! {
                            _ = tokio::time::sleep(wait) => {}
                            _ = stop.stopped() => {}
                        }
                    }
                    None => tokio::time::sleep(wait).await,
                }
            };
            return Ok(wasmtime::UpdateDeadline::YieldCustom(1, Box::pin(sleep)));
        }
        Ok(wasmtime::UpdateDeadline::Yield(1))
    });
    Ok(store)
}

/// Gives the store's next call `timeout` from now (a long-lived instance,
/// such as a sandbox provider's, serves many calls).
pub fn arm_deadline<W>(store: &mut Store<Host<W>>, timeout: Duration) {
    store.data_mut().core.deadline = std::time::Instant::now() + timeout;
    store.set_epoch_deadline(1);
}

/// Turns the outcome of a guarded call into a typed error: the wall-clock
/// timeout and epoch interruption become [`RunError::Deadline`], a refused
/// memory growth [`RunError::MemoryLimit`], anything else a
/// [`RunError::Trap`] with the plugin's stderr.
pub fn settle<W, T>(
    store: &Store<Host<W>>,
    function: &str,
    timeout: Duration,
    result: Result<wasmtime::Result<T>, tokio::time::error::Elapsed>,
) -> Result<T, RunError> {
    let core = &store.data().core;
    // Nothing is allocated on success: this runs after every call.
    let err = match result {
        Ok(Ok(value)) => return Ok(value),
        Ok(Err(err)) => Some(err),
        Err(_) => None,
    };
    let plugin = core.plugin.to_string();
    let deadline = || RunError::Deadline { plugin: plugin.clone(), function: function.to_string(), limit: timeout };
    let Some(err) = err else { return Err(deadline()) };
    match core.limiter.hit {
        Some(LimitHit::Memory { requested, cap }) => {
            return Err(RunError::MemoryLimit { plugin, function: function.to_string(), requested, cap });
        }
        Some(LimitHit::SharedMemory { requested, in_use, cap }) => {
            return Err(RunError::SharedMemoryLimit { plugin, function: function.to_string(), requested, in_use, cap });
        }
        _ => {}
    }
    if err.downcast_ref::<wasmtime::PoolConcurrencyLimitError>().is_some() {
        return Err(RunError::Instantiate {
            plugin,
            reason: format!("{err:#}; wait for running instances to finish, or raise `max_live_instances`"),
        });
    }
    let trap = match err.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::Interrupt) => {
            return Err(match core.cpu_meter.as_ref().filter(|m| m.exhausted()) {
                Some(m) => RunError::CpuQuota {
                    plugin,
                    function: function.to_string(),
                    used: m.used(),
                    limit: m.limit().unwrap_or(0),
                },
                None => deadline(),
            });
        }
        Some(trap) => trap.to_string(),
        None => format!("{err:#}"),
    };
    // Wasmtime's rendering starts with a heading of its own; the report has one.
    let backtrace = err
        .downcast_ref::<wasmtime::WasmBacktrace>()
        .map(|b| {
            let text = b.to_string();
            text.split_once('\n').map_or(String::new(), |(_, frames)| frames.to_string())
        })
        .unwrap_or_default();
    Err(RunError::Trap { plugin, function: function.to_string(), trap, backtrace, stderr: core.stderr_text() })
}

impl Core {
    /// The signal that stops this store's run, if it is a recorded run.
    pub fn stop_signal(&self) -> Option<Arc<Stop>> {
        self.stop.clone()
    }
}

impl types::Host for Core {}

/// Routes WASI's clocks and randomness through a recorded run's journal.
/// Randomness is one journaled seed per instance (for the secure and the
/// insecure generator, and the insecure seed), not one entry per call: the
/// generators are deterministic given it.
fn journaled_sources(wasi: &mut WasiCtxBuilder, journal: &Arc<crate::journal::Journal>) {
    use rand::SeedableRng;
    let seed: [u8; 32] = journal.read_sync("wasi:random", "seed", || {
        let mut seed = [0u8; 32];
        rand::fill(&mut seed);
        seed
    });
    let mut insecure_seed = [0u8; 16];
    insecure_seed.copy_from_slice(&seed[..16]);
    let mut insecure = seed;
    insecure[0] ^= 0x5a;
    wasi.secure_random(rand::rngs::StdRng::from_seed(seed))
        .insecure_random(rand::rngs::StdRng::from_seed(insecure))
        .insecure_random_seed(u128::from_le_bytes(insecure_seed))
        .wall_clock(JournaledWallClock(journal.clone()))
        .monotonic_clock(JournaledMonotonicClock { journal: journal.clone(), last: Default::default() });
}

struct JournaledWallClock(Arc<crate::journal::Journal>);

impl wasmtime_wasi::HostWallClock for JournaledWallClock {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }

    fn now(&self) -> Duration {
        let nanos: u128 = self.0.read_sync("wasi:clocks", "wall-clock.now", || {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
        });
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

struct JournaledMonotonicClock {
    journal: Arc<crate::journal::Journal>,
    last: std::sync::atomic::AtomicU64,
}

impl wasmtime_wasi::HostMonotonicClock for JournaledMonotonicClock {
    fn resolution(&self) -> u64 {
        1
    }

    // Nanoseconds since the epoch rather than since this process started:
    // a run resumed in another process keeps a clock that never goes back.
    fn now(&self) -> u64 {
        use std::sync::atomic::Ordering;
        let last = self.last.load(Ordering::Relaxed);
        let now = self.journal.read_sync("wasi:clocks", "monotonic-clock.now", || {
            let system = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos());
            u64::try_from(system.unwrap_or(0)).unwrap_or(u64::MAX).max(last)
        });
        self.last.fetch_max(now, Ordering::Relaxed);
        now
    }
}
