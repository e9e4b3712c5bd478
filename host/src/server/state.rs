//! The state every request handler of `nexo serve` shares.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::Engine;
use crate::runs::Runs;
use nexo_store::Store;
use tokio::sync::Notify;

/// What every request handler shares.
#[derive(Clone)]
pub struct AppState(pub Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// The server's state.
pub struct Shared {
    /// The store every node shares.
    pub store: Arc<dyn Store>,
    /// Runs, owned by this node.
    pub runs: Runs,
    /// The engine uploads are validated and runs are created with.
    pub engine: Engine,
    /// The operator's configuration.
    pub config: Arc<crate::config::ConfigFile>,
    /// Workspaces and the plugin cache.
    pub data_dir: PathBuf,
    /// The operator's registries (`[registries]`: insecure ones, trust
    /// rules), for tenants' pulls.
    pub registries: Arc<crate::registry::Registries>,
    /// The largest upload.
    pub max_plugin_bytes: usize,
    /// Each run's wall-clock limit per pass.
    pub timeout_secs: u64,
    /// Each run's memory cap.
    pub memory_mib: u64,
    /// Woken when a run is queued, so the worker claims it at once.
    pub wake: Arc<Notify>,
    /// Wakes a run's waiters when this node's worker finishes a pass of it.
    pub changes: Arc<crate::runs::changes::Changes>,
    /// Set once the server is stopping: `/readyz` then says 503.
    pub stopping: AtomicBool,
    /// Failed console sign-ins per client address.
    pub sign_ins: super::throttle::SignInThrottle,
    /// The runs' runtime: components compile on its blocking threads, which
    /// the OS puts after the API's.
    pub runs_handle: tokio::runtime::Handle,
    /// Uploads compiling at once (`[serve] compile-concurrency`).
    pub compiles: Arc<tokio::sync::Semaphore>,
    /// Run requests loading their plugin at once (four per core; apart
    /// from the uploads', so a start never waits behind an upload).
    pub loads: Arc<tokio::sync::Semaphore>,
    /// Held by a tenant's upload from its wait for a compile until that
    /// ends: one in flight per tenant, so `compiles` queues at most one
    /// upload of each tenant.
    pub compiling: super::tenant_locks::TenantLocks,
    /// Held while an upload is checked against its tenant's plugin quota and
    /// stored, so that two uploads of a tenant on this node cannot both
    /// pass it.
    pub plugin_admission: super::tenant_locks::TenantLocks,
    /// The event streams open on this node.
    pub streams: Arc<super::streams::Streams>,
}
