//! `nexo serve`: hosts many tenants' agents in one process, over HTTP.
//!
//! - `anchor`: every tenant's audit head, anchored in a file outside the
//!   store.
//! - `api`: the `/v1` handlers; every tenant-owned record is found through
//!   the caller's tenant, so another tenant's ids answer 404.
//! - `auth`: bearer keys, resolved to a tenant or to the operator.
//! - `console`: the web console at `/`, for a tenant signed in with a key.
//! - `sessions`: a tenant's sessions, each prompt a run of its thread.
//! - `signin`: the console's sign-ins, kept in the store for every node.
//! - `streams`: the event streams open on this node, per tenant.
//! - `throttle`: failed console sign-ins per client address.
//! - `tenants`: tenants and keys, shared with `nexo tenant`.
//! - `workspace`: a tenant's workspace files: list, upload, download, delete.
//! - `openapi`: the document at `/v1/openapi.json`.
//!
//! A tenant's policy is [`crate::policy`], its quotas and metering
//! [`crate::quota`]. Runs are queued in the store with a start job, and
//! this process's worker ([`crate::runs::worker`], the same one `nexo
//! worker` runs) claims them, so several nodes
//! over one PostgreSQL share the work and any node answers any tenant.

pub mod anchor;
pub mod api;
pub mod auth;
pub mod console;
pub mod error;
pub mod openapi;
pub mod plugins;
pub mod schedules;
pub mod sessions;
pub mod signin;
pub mod state;
pub mod streams;
pub mod tenant_locks;
pub mod tenants;
pub mod throttle;
pub mod workspace;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::runs::Runs;
use crate::telemetry;
use crate::{Engine, EngineConfig};
use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::{delete, get, post, put};
use tokio::sync::Notify;

use crate::runs::{changes, worker};
use state::{AppState, Shared};

/// The address `nexo serve` listens on when nothing says otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8700";

/// Runs one node drives at once when nothing says otherwise.
const DEFAULT_MAX_IN_FLIGHT: u32 = 64;

/// The largest plugin upload when nothing says otherwise (64 MiB).
const DEFAULT_MAX_PLUGIN_BYTES: u64 = 64 << 20;

/// Uploads compiled at once when nothing says otherwise.
const DEFAULT_COMPILE_CONCURRENCY: u32 = 2;

/// How a node serves: what `nexo serve`'s settings give, each `None` taking
/// the config file's `[serve]` value, else the default.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The address to listen on; port 0 picks a free port.
    pub listen: Option<String>,
    /// Where tenants' workspaces and the plugin cache live.
    pub data_dir: Option<PathBuf>,
    /// The most runs this node drives at once.
    pub max_in_flight: Option<u32>,
    /// Of those run slots, how many no tenant may take while it holds all
    /// the others ([`crate::runs::worker::default_reserved`]).
    pub reserved_slots: Option<u32>,
    /// On shutdown, how long runs under way may go on before [`serve`]
    /// returns; a run still going then is left to its lease.
    pub grace: Duration,
    /// How long a node's claim of a run lasts without renewal.
    pub lease: Duration,
    /// Where the configuration was read from, to name it in errors.
    pub config_path: Option<PathBuf>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            listen: None,
            data_dir: None,
            max_in_flight: None,
            reserved_slots: None,
            grace: Duration::from_secs(20),
            lease: Duration::from_secs(30),
            config_path: None,
        }
    }
}

/// Why a node could not serve.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A setting or the machine does not let it start; nothing was served.
    #[error("{0}")]
    Setup(String),
    /// It started, and then the server failed.
    #[error("{0}")]
    Failed(String),
}

/// Raises the soft limit on open files to the hard one: each waiting run
/// holds a connection to its model, and the default soft limit (often
/// 1024) would cap a node at about that many.
fn raise_open_files() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        if let Err(e) = setrlimit(Resource::Nofile, limit) {
            tracing::warn!(target: "nexo::server", "cannot raise the open-file limit: {e}");
        }
    }
}

/// Serves the API, the console and the runs of every tenant in `store`
/// until `shutdown` completes: then no new requests or runs are taken, the
/// runs under way get [`ServeOptions::grace`], and it returns.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
///
/// use nexo::server::{ServeOptions, serve};
///
/// let config = nexo::config::read(None)?;
/// let store = nexo_store::open(&nexo_store::Location::parse("sqlite:///var/lib/nexo/nexo.db")?).await?;
/// let options = ServeOptions { listen: Some("127.0.0.1:8700".into()), ..ServeOptions::default() };
/// let stop = async {
///     let _ = tokio::signal::ctrl_c().await;
/// };
/// serve(options, &nexo::EngineConfig::default(), config, store, stop).await?;
/// # Ok(()) }
/// ```
pub async fn serve(
    args: ServeOptions,
    base: &EngineConfig,
    file: crate::config::ConfigFile,
    store: Arc<dyn nexo_store::Store>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), ServeError> {
    raise_open_files();
    let setup = |why: String| ServeError::Setup(why);
    // From this (an API) thread, so that the store's threads are weighted as
    // the API's, not as the runs' that would otherwise open some of them.
    store.connect_all().await.map_err(|e| setup(e.to_string()))?;
    let data_dir = match args.data_dir.clone().or_else(|| file.serve.data_dir.clone()) {
        Some(dir) => dir,
        None => nexo_store::Location::default_path().map_err(|e| setup(e.to_string()))?.with_file_name("serve"),
    };
    std::fs::create_dir_all(&data_dir).map_err(|e| {
        setup(format!(
            "cannot create the data directory {}: {e} (set another one: `[serve] data-dir`)",
            data_dir.display()
        ))
    })?;
    let data_dir = std::path::absolute(&data_dir).unwrap_or(data_dir);
    let audit_anchor = anchor::open(&data_dir, &*store).await.map_err(|e| setup(e.to_string()))?;
    let listen = args.listen.clone().or_else(|| file.serve.listen.clone()).unwrap_or_else(|| DEFAULT_LISTEN.into());
    let addr: SocketAddr = listen
        .parse()
        .map_err(|e| setup(format!("the listen address {listen:?} is not an address such as 127.0.0.1:8700: {e}")))?;
    // One engine for the uploads and every run this node drives, with the
    // served runs' limits.
    let timeout_secs = file.serve.run_timeout_secs.unwrap_or(300).max(1);
    let memory_mib = file.serve.memory_mib.unwrap_or(256).clamp(16, 4096);
    let max = args.max_in_flight.or(file.serve.max_in_flight).unwrap_or(DEFAULT_MAX_IN_FLIGHT).max(1);
    let reserved = args.reserved_slots.or(file.serve.reserved_slots).unwrap_or_else(|| worker::default_reserved(max));
    let mut config = base.clone();
    config.limits.run_timeout = Duration::from_secs(timeout_secs);
    config.limits.memory_bytes = usize::try_from(memory_mib).unwrap_or(usize::MAX).saturating_mul(1 << 20);
    config.pooling = file.serve.pooling.unwrap_or(true);
    // A compile runs on the (nicer) run thread that asked for it, not on
    // wasmtime's pool of threads at the API's priority.
    config.parallel_compilation = false;
    // Each run's instance, and a few more for uploads being checked.
    config.max_live_instances = max.saturating_add(16);
    let engine = Engine::new(config).map_err(|e| setup(format!("{e:#}")))?;
    let proxies = throttle::TrustedProxies::parse(&file.serve.trusted_proxies).map_err(|e| setup(e.to_string()))?;
    // Runs go on a runtime of their own, on threads the OS puts after the
    // API's: however busy the guests, a request never waits behind hundreds
    // of runnable runs in one queue, nor long for a core. Uploads compile
    // on its blocking threads, which are weighted alike.
    let run_runtime = tokio::runtime::Builder::new_multi_thread()
        .thread_name("nexo-runs")
        .on_thread_start(crate::priority::run_thread)
        .enable_all()
        .build();
    let (runs_handle, _run_runtime) = match run_runtime {
        Ok(rt) => (rt.handle().clone(), Background(Some(rt))),
        Err(e) => return Err(ServeError::Failed(format!("cannot start the runs' runtime: {e}"))),
    };
    let base = crate::registry::trust_base_dir(args.config_path.as_deref());
    let mut registries =
        crate::registry::Registries::new(&file.registries, &[], &base).map_err(|e| setup(e.to_string()))?;
    // A tenant's pull is an upload: the same limit, checked before the download.
    registries.max_component_bytes = file.serve.max_plugin_bytes.unwrap_or(DEFAULT_MAX_PLUGIN_BYTES);
    let file = Arc::new(file);
    let lease = args.lease;
    let wake = Arc::new(Notify::new());
    let changes = Arc::new(changes::Changes::default());
    let compile_concurrency =
        usize::try_from(file.serve.compile_concurrency.unwrap_or(DEFAULT_COMPILE_CONCURRENCY).max(1)).unwrap_or(1);
    // A run request's load is mostly a hit in the compile cache: enough
    // places that starts never queue for them, few enough that a burst of
    // cold compiles cannot take every core.
    let cores = std::thread::available_parallelism().map_or(2, usize::from);
    let load_concurrency = compile_concurrency.max(cores.saturating_mul(4));
    let shared = Arc::new(Shared {
        store: store.clone(),
        runs: Runs::new(store.clone(), file.buffer_events).with_lease(lease).with_changes(changes.clone()),
        engine: engine.clone(),
        config: file.clone(),
        data_dir: data_dir.clone(),
        registries: Arc::new(registries),
        max_plugin_bytes: usize::try_from(file.serve.max_plugin_bytes.unwrap_or(DEFAULT_MAX_PLUGIN_BYTES))
            .unwrap_or(usize::MAX),
        timeout_secs,
        memory_mib,
        wake: wake.clone(),
        changes: changes.clone(),
        stopping: false.into(),
        sign_ins: throttle::SignInThrottle::new(proxies),
        runs_handle: runs_handle.clone(),
        compiles: Arc::new(tokio::sync::Semaphore::new(compile_concurrency)),
        loads: Arc::new(tokio::sync::Semaphore::new(load_concurrency)),
        compiling: Default::default(),
        plugin_admission: Default::default(),
        streams: Default::default(),
    });
    let state = AppState(shared.clone());
    let listener =
        tokio::net::TcpListener::bind(addr).await.map_err(|e| setup(format!("cannot listen on {addr}: {e}")))?;
    let bound = listener.local_addr().unwrap_or(addr);

    // The worker: the same claim loop as `nexo worker`, woken by new runs.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    // The API's own `Runs`: a cancel taken here stops the run this node drives.
    let jobs = worker::Worker::new(
        shared.runs.clone(),
        engine.clone(),
        (*file).clone(),
        args.config_path.clone(),
        i64::try_from(args.lease.as_millis()).unwrap_or(i64::MAX),
    )
    .serving(data_dir.clone());
    let anchor_task = tokio::spawn(anchor::keep(store.clone(), audit_anchor, stop_rx.clone()));
    let mut stop_worker = stop_rx.clone();
    let worker_task = runs_handle.spawn(worker::claim_loop(
        Arc::new(jobs),
        worker::LoopSettings {
            max,
            reserved,
            poll: Duration::from_millis(500),
            until_idle: false,
            retain: None,
            notify: file.worker.notify.unwrap_or(true),
        },
        async move {
            let _ = stop_worker.wait_for(|s| *s).await;
        },
        Some(wake),
        Some(changes),
    ));

    // Metrics, when the front end installed them ([`telemetry::Telemetry`]),
    // on the operator's own address, never on the tenants' router.
    let metrics = telemetry::scrape::keep_node_metrics(store.clone(), stop_rx.clone(), None).await;
    if let Some(at) = metrics.map_err(|e| setup(e.to_string()))? {
        errln!("nexo serve: metrics on http://{at}/metrics");
    }
    errln!("nexo serve: listening on http://{bound} (store {}, data {})", store.location(), data_dir.display());
    tracing::info!(target: "nexo::server", %bound, "listening");
    let mut stop_http = stop_rx.clone();
    // The peer's address, for the sign-in throttle.
    let app = router(state).into_make_service_with_connect_info::<std::net::SocketAddr>();
    let served = axum::serve(listener, app).with_graceful_shutdown(async move {
        let _ = stop_http.wait_for(|s| *s).await;
    });
    let signals = async {
        shutdown.await;
        errln!("nexo serve: stopping: no new requests or runs; runs under way get {} s", args.grace.as_secs());
        shared.stopping.store(true, Ordering::Relaxed);
        let _ = stop_tx.send(true);
    };
    tokio::select! {
        result = served => {
            if let Err(e) = result {
                return Err(ServeError::Failed(format!("the server failed: {e}")));
            }
        }
        _ = signals => {}
    }
    // The server stopped taking requests; runs under way get the grace period.
    let stopped = tokio::time::timeout(args.grace, worker_task).await;
    // The heads the last passes wrote, anchored before the process ends.
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(5), anchor_task).await;
    match stopped {
        Ok(_) => errln!("nexo serve: stopped"),
        Err(_) => errln!(
            "nexo serve: stopped with runs under way; their leases lapse in {} s and another node, or the next \
             start, resumes them by replay",
            args.lease.as_secs()
        ),
    }
    Ok(())
}

/// A runtime shut down without waiting when dropped (a runtime may not be
/// dropped, blocking, inside another).
struct Background(Option<tokio::runtime::Runtime>);

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// The routes: [`openapi::ROUTES`] lists the same ones under `/v1`.
pub fn router(state: AppState) -> Router {
    let limit = state.max_plugin_bytes;
    Router::new()
        .route("/healthz", get(api::healthz))
        .route("/readyz", get(api::readyz))
        .route("/v1/openapi.json", get(|| async { axum::Json(openapi::document()) }))
        .route("/v1/plugins", post(plugins::upload_plugin).get(plugins::list_plugins))
        .route("/v1/plugins/{id}", get(plugins::get_plugin))
        .route("/v1/runs", post(api::start_run).get(api::list_runs))
        .route("/v1/runs/{id}", get(api::get_run))
        .route("/v1/runs/{id}/events", get(api::events))
        .route("/v1/runs/{id}/timeline", get(api::timeline))
        .route("/v1/runs/{id}/approve", post(api::approve))
        .route("/v1/runs/{id}/deny", post(api::deny))
        .route("/v1/runs/{id}/resume", post(api::resume))
        .route("/v1/runs/{id}/cancel", post(api::cancel))
        .route("/v1/runs/{id}/signals/{name}", post(api::signal))
        .route("/v1/schedules", post(schedules::add).get(schedules::list))
        .route("/v1/schedules/{id}", get(schedules::show).delete(schedules::delete))
        .route("/v1/schedules/{id}/pause", post(schedules::pause))
        .route("/v1/schedules/{id}/resume", post(schedules::resume))
        .route("/v1/sessions", get(sessions::list))
        .route("/v1/sessions/prompt", post(sessions::prompt))
        .route("/v1/sessions/{id}", get(sessions::show).delete(sessions::delete))
        .route("/v1/usage", get(api::usage))
        .route("/v1/audit", get(api::audit_log))
        .route("/v1/workspace", get(workspace::list))
        .route("/v1/workspace/{*path}", put(workspace::put).get(workspace::get).delete(workspace::delete))
        .route("/v1/tenants", post(api::create_tenant).get(api::list_tenants))
        .route("/v1/tenants/{name}/policy", put(api::put_policy))
        .route("/v1/tenants/{name}/keys", post(api::create_key))
        .route("/v1/tenants/{name}/accepted-plugins", post(plugins::accept_plugin))
        .route("/v1/tenants/{name}/disable", post(api::disable_tenant))
        .route("/v1/tenants/{name}/enable", post(api::enable_tenant))
        .route("/v1/keys/{id}", delete(api::revoke_key))
        .merge(console::routes())
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn(request_id))
        .layer(axum::middleware::from_fn(trace_context))
        .with_state(state)
}

/// Continues the caller's trace (W3C `traceparent`, `tracestate`) when
/// tracing is on: a run this request starts or continues records it with
/// its job, and the pass that takes the job up is its child.
async fn trace_context(request: Request, next: Next) -> Response {
    use opentelemetry::trace::FutureExt;
    let parent = crate::telemetry::traces::enabled()
        .then(|| {
            let header = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok());
            crate::telemetry::context::TraceParent::from_headers(header("traceparent"), header("tracestate"))
        })
        .flatten();
    match parent {
        Some(parent) => next.run(request).with_context(parent.context()).await,
        None => next.run(request).await,
    }
}

/// Gives every request an id (the caller's `x-request-id` if it is a short
/// token, else a new one), logs it with the outcome, and returns it.
async fn request_id(request: Request, next: Next) -> Response {
    let given = request.headers().get("x-request-id").and_then(|v| v.to_str().ok()).filter(|v| {
        !v.is_empty() && v.len() <= 64 && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    });
    let id = given.map(str::to_string).unwrap_or_else(|| nexo_store::new_run_id().replacen('r', "q", 1));
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let started = Instant::now();
    let span = tracing::info_span!(target: "nexo::server", "request", id = %id, %method, %path);
    let mut response = {
        use tracing::Instrument;
        next.run(request).instrument(span.clone()).await
    };
    span.in_scope(|| {
        tracing::info!(
            target: "nexo::server",
            status = response.status().as_u16(),
            ms = started.elapsed().as_millis() as u64,
            "answered"
        );
    });
    if let Ok(v) = HeaderValue::from_str(&id) {
        response.headers_mut().insert("x-request-id", v);
    }
    response
}
