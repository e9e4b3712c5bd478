//! The HTTP API under `/v1`: plugins, runs and their events, decisions,
//! usage and the audit log for tenants; tenants and keys for the operator.
//!
//! Every tenant-owned record is looked up through the caller's tenant: a
//! record of another tenant is answered exactly as a missing one (404), so
//! ids reveal nothing.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::Plugin;
use crate::manifest::{Capability, PermissionMode};
use crate::runs::Subject;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use nexo_store::{Decision, PendingCall, Run, RunStatus, StoreError, Tenant};
use serde::Deserialize;
use serde_json::{Value, json};

pub use super::error::{ApiError, ApiResult};
pub use super::state::AppState;

use super::auth::{AdminCaller, KeyedCaller, TenantCaller};
use super::tenants::{self, TenantError};
use crate::data_dir::materialize;
use crate::manifest::SandboxKind;
use crate::policy::{Narrowing, Policy};
use crate::runs::RunSpec;

/// The answer for a record the caller cannot see, whether it exists or not.
fn no_run() -> ApiError {
    ApiError::not_found("there is no such run for this tenant")
}

/// A run as the API shows it.
pub fn run_json(run: &Run, approval: Option<&nexo_store::Approval>) -> Value {
    json!({
        "id": run.id,
        "status": run.status,
        "agent": run.agent,
        "plugin": run.component_sha256,
        "input": run.input,
        "result": run.result,
        "error": run.error,
        "suspend_reason": run.suspend_reason,
        "resume_key": run.resume_key,
        "wake_ms": run.wake_ms,
        "signal_wait": run.signal_wait,
        "parent": run.parent,
        "created_ms": run.created_ms,
        "updated_ms": run.updated_ms,
        // Where its plugin was pulled from (the reference at its digest, and
        // the signature check), as the run recorded it.
        "origin": run.grant.get("origin"),
        "approval": approval.map(|a| json!({
            "capability": a.capability,
            "tool": a.tool,
            "arguments": a.arguments,
            "seq": a.seq,
            "args_hash": a.args_hash,
            "decision": a.decision,
            "created_ms": a.created_ms,
        })),
    })
}

/// The tenant's run `id`, or 404.
pub(crate) async fn own_run(state: &AppState, tenant: &Tenant, id: &str) -> ApiResult<Run> {
    match state.store.run(id).await.map_err(ApiError::store)? {
        Some(run) if run.tenant.as_deref() == Some(tenant.id.as_str()) => Ok(run),
        _ => Err(no_run()),
    }
}

pub(crate) async fn shown(state: &AppState, run: &Run) -> ApiResult<Value> {
    let approval = if run.status == RunStatus::Suspended {
        state.store.approval(&run.id).await.map_err(ApiError::store)?
    } else {
        None
    };
    Ok(run_json(run, approval.as_ref()))
}

pub(crate) async fn audit(state: &AppState, tenant: &Tenant, kind: &str, data: Value) -> ApiResult<()> {
    state.store.append_audit(&tenant.id, kind, &data, nexo_store::now_ms()).await.map_err(ApiError::store)?;
    Ok(())
}

// ---- health ----

/// `GET /healthz`: the process answers.
pub async fn healthz() -> &'static str {
    "ok\n"
}

/// `GET /readyz`: the store answers and the server is not stopping.
pub async fn readyz(State(state): State<AppState>) -> Response {
    if state.stopping.load(Ordering::Relaxed) {
        return (StatusCode::SERVICE_UNAVAILABLE, "stopping\n").into_response();
    }
    match state.store.runs(None, 1).await {
        Ok(_) => (StatusCode::OK, "ready\n").into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("the store does not answer: {e}\n")).into_response(),
    }
}

// ---- plugins ----

/// How long a request waits for a turn to compile before it is told to
/// come back.
pub(super) const COMPILE_WAIT: Duration = Duration::from_secs(60);

/// Compiles (or loads from the compile cache) a component off the API's
/// threads: on a blocking thread of the runs' runtime, which the OS puts
/// after the API's, holding one of `permits`, so that a large upload, or
/// many, cannot take the cores that answer requests. The permit and `held`
/// (a tenant's lock) move into the compile: a client that leaves frees
/// neither before the compile ends.
pub(super) async fn off_api<F, Fut, H>(
    state: &AppState,
    permits: &std::sync::Arc<tokio::sync::Semaphore>,
    held: H,
    load: F,
) -> ApiResult<Result<Plugin, crate::LoadError>>
where
    F: FnOnce(crate::Engine) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<Plugin, crate::LoadError>>,
    H: Send + 'static,
{
    let permit = tokio::time::timeout(COMPILE_WAIT, permits.clone().acquire_owned())
        .await
        .map_err(|_| busy())?
        .map_err(|_| busy())?;
    let engine = state.engine.clone();
    let handle = state.runs_handle.clone();
    let inner = handle.clone();
    handle
        .spawn_blocking(move || {
            let loaded = inner.block_on(load(engine));
            drop((permit, held));
            loaded
        })
        .await
        .map_err(|e| {
            tracing::error!(target: "nexo::server", "a compile task failed: {e}");
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "the component could not be checked; try again",
            )
        })
}

/// The answer to a request that waited [`COMPILE_WAIT`] for a turn to
/// compile.
pub(super) fn busy() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "busy",
        "the server is compiling other components (or this tenant's previous upload); try again in a minute",
    )
}

/// The tenant's stored policy, or 409 if it cannot be read: a policy that
/// does not parse grants nothing, not the defaults.
pub(super) fn policy_of(tenant: &Tenant) -> ApiResult<Policy> {
    Policy::from_stored(&tenant.policy).map_err(|m| ApiError::new(StatusCode::CONFLICT, "policy", m))
}

/// Runs `work` on a blocking thread of the runs' runtime: hashing, copying
/// and writing a large upload must not hold an API thread either.
pub(super) async fn blocking<T: Send + 'static>(
    state: &AppState,
    work: impl FnOnce() -> T + Send + 'static,
) -> ApiResult<T> {
    state.runs_handle.spawn_blocking(work).await.map_err(|e| {
        tracing::error!(target: "nexo::server", "a blocking task failed: {e}");
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "the upload could not be handled; try again")
    })
}

// ---- runs ----

/// The body of `POST /v1/runs`.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RunRequest {
    /// The plugin's id (its SHA-256).
    pub(crate) plugin: String,
    /// The agent's input.
    pub(crate) input: String,
    /// Answer when the run ends or suspends, instead of at once.
    #[serde(default)]
    pub(crate) wait: bool,
    allow: Option<Vec<Capability>>,
    mode: Option<PermissionMode>,
    sandbox: Option<SandboxKind>,
    fetch_hosts: Option<Vec<String>>,
    net_hosts: Option<Vec<String>>,
    model: Option<String>,
    mcp_servers: Option<Vec<String>>,
    mcp_allow: Option<Vec<String>>,
    /// The tenant's plugins the run may start as child runs (`run-agent`),
    /// by the name the workflow asks for: name → plugin id.
    #[serde(default)]
    pub(crate) agents: BTreeMap<String, String>,
    /// The tenant's own hooks for the run, by plugin id: asked besides its
    /// policy's, they only narrow.
    #[serde(default)]
    pub(crate) hooks: Vec<String>,
}

impl RunRequest {
    /// What the request narrows the tenant's policy to.
    pub(crate) fn narrowing(&self) -> Narrowing {
        Narrowing {
            allow: self.allow.clone(),
            mode: self.mode,
            sandbox: self.sandbox,
            fetch_hosts: self.fetch_hosts.clone(),
            net_hosts: self.net_hosts.clone(),
            model: self.model.clone(),
            mcp_servers: self.mcp_servers.clone(),
            mcp_allow: self.mcp_allow.clone(),
        }
    }
}

/// A run ready to be queued: its plugin loaded, its grant recorded.
pub(crate) struct Prepared {
    plugin: Plugin,
    path: PathBuf,
    /// The run's specification, as it is recorded.
    pub(crate) spec: RunSpec,
    granted: crate::policy::Granted,
}

impl Prepared {
    /// The run's subject, for [`Runs`].
    pub(crate) fn subject(&self) -> ApiResult<Subject<'_>> {
        let agent = self
            .plugin
            .agent()
            .map_err(|e| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "not_an_agent", e.to_string()))?;
        Ok(Subject::Component { agent, sha256: self.plugin.sha256(), path: &self.path })
    }

    /// The agent's name.
    pub(crate) fn agent_name(&self) -> String {
        self.plugin.name().to_string()
    }

    /// Adds the tenant's own hooks ([`hooks_of`]) after its policy's.
    pub(crate) fn add_hooks(&mut self, files: Vec<crate::hooks::HookFile>) -> ApiResult<()> {
        self.spec.hooks.extend(files);
        hooks_need_own_loop(&self.spec)
    }
}

/// A run with hooks needs nexo's own loop: the Claude Code CLI sends its
/// prompts where no hook sees them. Refused before the run is queued, not
/// when its pass fails.
fn hooks_need_own_loop(spec: &RunSpec) -> ApiResult<()> {
    if !spec.hooks.is_empty() && spec.model.agent_loop == Some(crate::manifest::LoopKind::ClaudeCode) {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "hooks_need_own_loop",
            "the run has hooks, and its model runs the Claude Code CLI's loop, which sends prompts where no hook \
             sees them: choose a model that runs nexo's own loop",
        ));
    }
    Ok(())
}

/// Checks a run request against the tenant's policy and quotas, and loads
/// its plugin: everything a run or a session's prompt needs before it is
/// queued.
pub(crate) async fn prepare(
    state: &AppState,
    tenant: &Tenant,
    plugin: &str,
    narrowing: &Narrowing,
) -> ApiResult<Prepared> {
    let policy = policy_of(tenant)?;
    // Refused before the plugin loads; the agent's manifest narrows below.
    policy.admit(narrowing).map_err(|m| ApiError::new(StatusCode::FORBIDDEN, "beyond_policy", m))?;
    admit(state, tenant, &policy, crate::quota::Step::Start).await?;
    let Some(stored) = state.store.plugin(&tenant.id, plugin).await.map_err(ApiError::store)? else {
        return Err(ApiError::not_found("there is no such plugin for this tenant; upload it with POST /v1/plugins"));
    };
    let (path, loaded) = load_stored(state, tenant, plugin).await?;
    let manifest = loaded
        .agent()
        .map_err(|e| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "not_an_agent", e.to_string()))?
        .manifest();
    let workspace = state.data_dir.join("tenants").join(&tenant.id).join("workspace");
    let granted = policy
        .narrow(narrowing, manifest, &workspace, &state.config)
        .map_err(|m| ApiError::new(StatusCode::FORBIDDEN, "beyond_policy", m))?;
    if granted.grant.sandbox.kind == SandboxKind::Local {
        std::fs::create_dir_all(&workspace).map_err(|e| {
            tracing::error!(target: "nexo::server", "cannot create {}: {e}", workspace.display());
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "storage", "the tenant's workspace cannot be created now")
        })?;
    }
    let model = match &granted.model {
        Some(name) => state.config.serve.models.get(name).cloned().ok_or_else(|| {
            ApiError::new(StatusCode::CONFLICT, "policy", format!("the model `{name}` is no longer configured"))
        })?,
        None => crate::config::ModelTable::default(),
    };
    // A served run's budget is its tenant's quota, never the model table's
    // (a policy with one names only priced models).
    let budget_usd = policy.quotas.usd_per_run.filter(|_| model.price.is_some());
    let model = crate::config::ModelTable { budget_usd, ..model };
    let spec = RunSpec {
        grant: granted.grant.clone(),
        model,
        search: None,
        timeout_secs: state.timeout_secs,
        memory_mib: state.memory_mib,
        skills_path: state.data_dir.join("skills"),
        progressive_skills: false,
        skill_components: Vec::new(),
        hooks: policy.hook_files(&state.config).map_err(|m| ApiError::new(StatusCode::CONFLICT, "policy", m))?,
        // Where the plugin was pulled from, recorded with the run.
        origin: stored.origin.as_deref().and_then(|o| serde_json::from_str(o).ok()),
        agents: Default::default(),
        depth: 0,
    };
    hooks_need_own_loop(&spec)?;
    Ok(Prepared { plugin: loaded, path, spec, granted })
}

/// The tenant's stored plugin `id`, loaded from this node's copy (written
/// from the store on first need): its file and the plugin.
async fn load_stored(state: &AppState, tenant: &Tenant, id: &str) -> ApiResult<(PathBuf, Plugin)> {
    let path = materialize(&*state.store, &state.data_dir, &tenant.id, id, &state.runs_handle)
        .await
        .map_err(|m| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "storage", m))?;
    let from = path.clone();
    let loaded = off_api(state, &state.loads, (), move |engine| async move { Plugin::load(&engine, &from).await })
        .await?
        .map_err(|e| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_plugin", e.to_string()))?;
    Ok((path, loaded))
}

/// The tenant's plugins a run may start as children, by name, as the run
/// records them (each by its id, the SHA-256 of its bytes): 422 for a name
/// that cannot be one, 404 for a plugin the tenant does not have.
pub(crate) async fn agents_of(
    state: &AppState,
    tenant: &Tenant,
    agents: &BTreeMap<String, String>,
) -> ApiResult<BTreeMap<String, crate::runs::ChildAgent>> {
    const MOST: usize = 32;
    if agents.len() > MOST {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "too_many_agents",
            format!("a run may be given at most {MOST} agents; it was given {}", agents.len()),
        ));
    }
    let mut out = BTreeMap::new();
    for (name, plugin) in agents {
        crate::children::check_agent_name(name)
            .map_err(|m| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_agent_name", m))?;
        let Some(stored) = state.store.plugin(&tenant.id, plugin).await.map_err(ApiError::store)? else {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("the agent `{name}` names no plugin of this tenant; upload it with POST /v1/plugins"),
            ));
        };
        // The tenant's other plugins are hooks, which run only as hooks.
        if stored.world.starts_with("nexo:plugin/hook@") {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "not_an_agent",
                format!("the agent `{name}` names a hook, not an agent: give it in the run's `hooks`"),
            ));
        }
        let path = crate::data_dir::plugin_path(&state.data_dir, plugin);
        out.insert(name.clone(), crate::runs::ChildAgent { path, sha256: plugin.clone() });
    }
    Ok(out)
}

/// The tenant's own hooks a request adds to its run, by plugin id, as the
/// run records them ([`crate::hooks::Owner::Tenant`]): each loaded now, so a
/// run is refused before it is queued for a plugin that is not a hook (422),
/// one the tenant does not have (404) or one given twice (422). They are
/// added to the policy's and cannot remove one: a hook only narrows.
pub(crate) async fn hooks_of(
    state: &AppState,
    tenant: &Tenant,
    ids: &[String],
) -> ApiResult<Vec<crate::hooks::HookFile>> {
    const MOST: usize = 4;
    if ids.len() > MOST {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "too_many_hooks",
            format!("a run may be given at most {MOST} hooks of the tenant's own; it was given {}", ids.len()),
        ));
    }
    let mut files: Vec<crate::hooks::HookFile> = Vec::with_capacity(ids.len());
    for id in ids {
        if files.iter().any(|f| &f.sha256 == id) {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_hooks",
                format!("the hook {id} is given twice: give each hook once"),
            ));
        }
        if state.store.plugin(&tenant.id, id).await.map_err(ApiError::store)?.is_none() {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("the hook {id} names no plugin of this tenant; upload it with POST /v1/plugins"),
            ));
        }
        let (path, loaded) = load_stored(state, tenant, id).await?;
        loaded.hook().map_err(|e| {
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "not_a_hook", format!("the hook {id}: {e}"))
        })?;
        files.push(crate::hooks::HookFile { path, sha256: id.clone(), owner: crate::hooks::Owner::Tenant });
    }
    Ok(files)
}

/// Whether the tenant's quotas let a run take `step` now ([`crate::quota::admit`]):
/// a refusal is 429 with `Retry-After`, or 409 for a run that spent its own budget.
async fn admit(state: &AppState, tenant: &Tenant, policy: &Policy, step: crate::quota::Step<'_>) -> ApiResult<()> {
    crate::quota::admit(&*state.store, &tenant.id, &policy.quotas, step, nexo_store::now_ms())
        .await
        .map_err(ApiError::store)?
        .map_err(ApiError::quota)
}

/// Checks that the tenant's run `id` may go on now (a resume, a retry, an
/// approval, a denial): the tenant's quotas and the run's own budget.
/// Refused, nothing is decided or queued and nothing is spent.
pub(crate) async fn may_go_on(state: &AppState, tenant: &Tenant, id: &str) -> ApiResult<()> {
    own_run(state, tenant, id).await?;
    let policy = policy_of(tenant)?;
    admit(state, tenant, &policy, crate::quota::Step::GoOn { run: id }).await
}

/// What follows a run's creation: its usage, its audit entry, the worker
/// woken, and (with `wait`) the answer once it ends or suspends.
pub(crate) async fn started(
    state: &AppState,
    tenant: &Tenant,
    run: &Run,
    prepared: &Prepared,
    wait: bool,
) -> ApiResult<(StatusCode, Value)> {
    let now = nexo_store::now_ms();
    let _ = state.store.add_usage(&tenant.id, now, 1, nexo_store::RunUsage::default()).await;
    let mut detail = json!({ "run": run.id, "plugin": run.component_sha256, "session": run.session });
    if let (Some(detail), Value::Object(granted)) = (detail.as_object_mut(), prepared.granted.to_json()) {
        detail.extend(granted);
    }
    audit(state, tenant, "run.started", detail).await?;
    state.wake.notify_one();
    if wait {
        let run = wait_for(state, &run.id).await?;
        return Ok((StatusCode::OK, shown(state, &run).await?));
    }
    Ok((StatusCode::ACCEPTED, run_json(run, None)))
}

/// `POST /v1/runs`: queues a run of one of the tenant's plugins, within its
/// policy; with `"wait": true`, answers once it ends or suspends.
pub async fn start_run(
    State(state): State<AppState>,
    TenantCaller(tenant): TenantCaller,
    body: Bytes,
) -> ApiResult<Response> {
    let request: RunRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("the body is not a run request: {e}")))?;
    let narrowing = request.narrowing();
    let mut prepared = prepare(&state, &tenant, &request.plugin, &narrowing).await?;
    prepared.spec.agents = agents_of(&state, &tenant, &request.agents).await?;
    prepared.add_hooks(hooks_of(&state, &tenant, &request.hooks).await?)?;
    let (run, _job) = state
        .runs
        .queue_for(Some(&tenant.id), None, prepared.subject()?, &request.input, &prepared.spec)
        .await
        .map_err(ApiError::store)?;
    let (status, body) = started(&state, &tenant, &run, &prepared, request.wait).await?;
    Ok((status, Json(body)).into_response())
}

/// Waits until the run leaves `queued` and `running`, or the run's own
/// limit passes (then answers with the run as it is).
async fn wait_for(state: &AppState, id: &str) -> ApiResult<Run> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(state.timeout_secs + 30);
    let watch = state.changes.watch(id);
    loop {
        // Registered before the read, so a change between the two is not missed.
        let changed = watch.notified();
        let run = state.store.run(id).await.map_err(ApiError::store)?.ok_or_else(no_run)?;
        if !matches!(run.status, RunStatus::Queued | RunStatus::Running) || tokio::time::Instant::now() >= deadline {
            return Ok(run);
        }
        // Another node may drive it: look again now and then.
        let _ = tokio::time::timeout(Duration::from_millis(500), changed).await;
    }
}

/// `?status=&limit=` of `GET /v1/runs`.
#[derive(Deserialize, Debug)]
pub struct ListQuery {
    status: Option<String>,
    limit: Option<usize>,
}

/// `GET /v1/runs`: the tenant's runs, newest first.
pub async fn list_runs(
    State(state): State<AppState>,
    TenantCaller(tenant): TenantCaller,
    Query(q): Query<ListQuery>,
) -> ApiResult<Json<Value>> {
    let status = match q.status.as_deref() {
        Some(s) => Some(RunStatus::parse(s).ok_or_else(|| {
            ApiError::bad_request(format!(
                "`{s}` is not a status: use queued, running, suspended, done, failed or cancelled"
            ))
        })?),
        None => None,
    };
    let limit = q.limit.unwrap_or(100).clamp(1, 1000);
    let runs = state.store.tenant_runs(&tenant.id, status, limit).await.map_err(ApiError::store)?;
    Ok(Json(json!({"runs": runs.iter().map(|r| run_json(r, None)).collect::<Vec<_>>()})))
}

/// `GET /v1/runs/{id}`.
pub async fn get_run(
    State(state): State<AppState>,
    TenantCaller(tenant): TenantCaller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let run = own_run(&state, &tenant, &id).await?;
    let mut body = shown(&state, &run).await?;
    // Its tree below it: children share their parent's tenant.
    let children = crate::runs::children::descendants(&*state.store, &id).await.map_err(ApiError::store)?;
    body["children"] = json!(children);
    Ok(Json(body))
}

/// `GET /v1/runs/{id}/timeline`: the tenant's run as a timeline of its
/// passes, turns, tool calls (with their full arguments and results) and
/// waits.
pub async fn timeline(
    State(state): State<AppState>,
    TenantCaller(tenant): TenantCaller,
    Path(id): Path<String>,
) -> ApiResult<Json<crate::runs::timeline::Timeline>> {
    let run = own_run(&state, &tenant, &id).await?;
    let timeline = crate::runs::timeline::Timeline::load(&*state.store, &run).await.map_err(ApiError::store)?;
    Ok(Json(timeline))
}

/// The body of `POST /v1/runs/{id}/approve` and `/deny`: the call decided,
/// as the run's `approval` showed it. A decision that names no call is
/// refused, so that it can never decide one nobody was shown.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct DecisionRequest {
    /// The call's sequence number (`approval.seq`).
    seq: Option<u64>,
    /// The SHA-256 of the call: its capability, tool and arguments
    /// (`approval.args_hash`).
    #[serde(alias = "args_hash")]
    args_hash: Option<String>,
}

/// The most a decision's body may hold: it names one call.
const MAX_DECISION_BYTES: usize = 4096;

impl DecisionRequest {
    /// A decision from a form's fields.
    pub(crate) fn from_fields(seq: Option<u64>, args_hash: Option<&str>) -> DecisionRequest {
        DecisionRequest { seq, args_hash: args_hash.map(str::to_string) }
    }

    /// The call named, or a 400 that names what is missing.
    pub(crate) fn call(self) -> ApiResult<PendingCall> {
        let missing = |field: &str| {
            ApiError::bad_request(format!(
                "the decision does not name the call it decides (`{field}` is missing): send \
                 {{\"seq\": N, \"args-hash\": \"…\"}} with the `seq` and `args_hash` of the run's `approval` \
                 (GET /v1/runs/{{id}}), the call you were shown"
            ))
        };
        let seq = self.seq.ok_or_else(|| missing("seq"))?;
        let args_hash = self.args_hash.ok_or_else(|| missing("args-hash"))?;
        Ok(PendingCall { seq, args_hash })
    }

    /// Parses a decision's JSON body, at most [`MAX_DECISION_BYTES`].
    fn parse(body: &[u8]) -> ApiResult<PendingCall> {
        if body.len() > MAX_DECISION_BYTES {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!(
                    "a decision's body is at most {MAX_DECISION_BYTES} bytes ({{\"seq\": N, \"args-hash\": \"…\"}}); \
                     this one is {}",
                    body.len()
                ),
            ));
        }
        let request: DecisionRequest = if body.is_empty() {
            DecisionRequest::default()
        } else {
            serde_json::from_slice(body).map_err(|e| {
                ApiError::bad_request(format!("the body is not a decision ({{\"seq\": N, \"args-hash\": \"…\"}}): {e}"))
            })?
        };
        request.call()
    }
}

/// `POST /v1/runs/{id}/approve` and `/deny`: decides the pending approval,
/// if it is still the call the caller names, and queues the resume.
pub(crate) async fn decide(
    state: AppState,
    tenant: Tenant,
    key: &str,
    id: String,
    call: PendingCall,
    decision: Decision,
) -> ApiResult<Json<Value>> {
    may_go_on(&state, &tenant, &id).await?;
    let before = state.store.approval(&id).await.map_err(ApiError::store)?;
    // An approval decides only the call read here, which the budget check
    // below saw: one written since (the run went on) is not decided blind.
    if decision == Decision::Approved && before.as_ref().is_none_or(|a| a.call() != call) {
        let status = own_run(&state, &tenant, &id).await?.status;
        let pending = before.map(Box::new);
        return Err(ApiError::store(nexo_store::StoreError::StaleApproval { run: id, given: call, status, pending }));
    }
    // A served run's budget is the operator's: the tenant may let a turn
    // go on only once the budget covers it.
    if let Some(pending) = before
        .as_ref()
        .filter(|a| decision == Decision::Approved && a.capability == crate::spend::SUBJECT && a.decision.is_none())
    {
        let quotas = policy_of(&tenant)?.quotas;
        let day_left = match quotas.usd_per_day {
            Some(usd) => {
                let spent = crate::quota::spent_today(&*state.store, &tenant.id, nexo_store::now_ms())
                    .await
                    .map_err(ApiError::store)?;
                Some(crate::spend::nanos(usd).saturating_sub(spent))
            }
            None => None,
        };
        let run = own_run(&state, &tenant, &id).await?;
        let budget = crate::quota::run_budget(&*state.store, &run, &quotas).await.map_err(ApiError::store)?;
        crate::spend::approvable(&pending.arguments, budget, day_left)
            .map_err(|why| ApiError::new(StatusCode::CONFLICT, "budget", why))?;
    }
    // The decision and its resume are one write: a node that dies after it
    // leaves a queued resume, never a decided run that nothing takes on.
    let approval = state.runs.decide_and_resume(&id, &call, decision).await.map_err(ApiError::store)?;
    state.wake.notify_one();
    // The same decision again: answered as the first was (its resume is
    // queued again only if none is live).
    if before.is_some_and(|a| a.decision == Some(decision) && a.call() == call) {
        let run = own_run(&state, &tenant, &id).await?;
        return Ok(Json(run_json(&run, None)));
    }
    audit(
        &state,
        &tenant,
        "approval.decided",
        json!({
            "run": id,
            "decision": decision.as_str(),
            "capability": approval.capability,
            "tool": approval.tool,
            "args_hash": approval.args_hash,
            "seq": approval.seq,
            // Which of the tenant's keys decided (its id, never the key).
            "key": key,
        }),
    )
    .await?;
    let run = own_run(&state, &tenant, &id).await?;
    Ok(Json(run_json(&run, None)))
}

/// `POST /v1/runs/{id}/approve`.
pub async fn approve(
    State(state): State<AppState>,
    KeyedCaller { tenant, key }: KeyedCaller,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    own_run(&state, &tenant, &id).await?;
    let call = DecisionRequest::parse(&body)?;
    decide(state, tenant, &key, id, call, Decision::Approved).await
}

/// `POST /v1/runs/{id}/deny`.
pub async fn deny(
    State(state): State<AppState>,
    KeyedCaller { tenant, key }: KeyedCaller,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    own_run(&state, &tenant, &id).await?;
    let call = DecisionRequest::parse(&body)?;
    decide(state, tenant, &key, id, call, Decision::Denied).await
}

/// The body of `POST /v1/runs/{id}/resume` (optional).
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct ResumeRequest {
    /// What the run's `resume-input` returns from now on.
    input: Option<Value>,
}

/// `POST /v1/runs/{id}/resume`: queues the resume of a suspended or failed
/// run, with an input for it.
pub async fn resume(
    State(state): State<AppState>,
    TenantCaller(tenant): TenantCaller,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    own_run(&state, &tenant, &id).await?;
    // Asked twice, the second would queue the same pass again: say so
    // before the quota, which counts the first, answers 429.
    if state.store.has_live_job(&id).await.map_err(ApiError::store)? {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "already_queued",
            format!("run `{id}` is already queued to go on; follow its events (GET /v1/runs/{id}/events)"),
        ));
    }
    may_go_on(&state, &tenant, &id).await?;
    let request: ResumeRequest = if body.is_empty() {
        ResumeRequest::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request(format!("the body is not a resume request ({{\"input\": …}}): {e}")))?
    };
    let input = request.input.map(|v| v.to_string());
    state.runs.queue_resume(&id, input).await.map_err(ApiError::store)?;
    audit(&state, &tenant, "run.resumed", json!({"run": id})).await?;
    state.wake.notify_one();
    let run = own_run(&state, &tenant, &id).await?;
    Ok(Json(run_json(&run, None)))
}

/// `POST /v1/runs/{id}/signals/{name}`: the body is the signal's data,
/// any JSON (none sends `null`). Kept for the run's next `wait-signal` of
/// the name; a run waiting for it wakes now.
pub async fn signal(
    State(state): State<AppState>,
    TenantCaller(tenant): TenantCaller,
    Path((id, name)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<Value>)> {
    own_run(&state, &tenant, &id).await?;
    let data = if body.is_empty() {
        "null".to_string()
    } else {
        String::from_utf8(body.to_vec()).map_err(|_| ApiError::bad_request("a signal's data must be JSON (UTF-8)"))?
    };
    let signal = state.runs.signal(&id, &name, &data).await.map_err(ApiError::store)?;
    audit(&state, &tenant, "run.signalled", json!({"run": id, "name": name, "signal": signal.id})).await?;
    state.wake.notify_one();
    Ok((StatusCode::ACCEPTED, Json(json!({"run": id, "name": name, "signal": signal.id, "sent_ms": signal.sent_ms}))))
}

/// `POST /v1/runs/{id}/cancel`.
pub async fn cancel(
    State(state): State<AppState>,
    TenantCaller(tenant): TenantCaller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    own_run(&state, &tenant, &id).await?;
    // This node stops its own run of it at once; another node at its next lease renewal.
    let run = state.runs.cancel(&id, "cancelled by the tenant").await.map_err(ApiError::store)?;
    audit(&state, &tenant, "run.cancelled", json!({"run": id})).await?;
    Ok(Json(run_json(&run, None)))
}

/// `?after=` of the events stream (`Last-Event-ID` wins).
#[derive(Deserialize, Debug)]
pub struct EventsQuery {
    after: Option<i64>,
}

/// The first wait of an event stream's fallback read, doubled while
/// nothing new comes, up to [`STREAM_FALLBACK_MAX`].
const STREAM_FALLBACK_MIN: Duration = Duration::from_millis(250);

/// The longest an event stream waits between reads of the store: events
/// written by another node reach the stream within this (this node wakes
/// a stream at each commit of the run's events and at each pass's end).
const STREAM_FALLBACK_MAX: Duration = Duration::from_secs(2);

/// How often an open stream checks its key and tenant again, for a
/// revocation made by the CLI or another node (one made here ends the
/// stream at once).
const STREAM_RECHECK: Duration = Duration::from_secs(5);

/// `GET /v1/runs/{id}/events`: the run's events as server-sent events,
/// from the start or after `Last-Event-ID`; the stream ends when the run
/// does, or at once when its key is revoked or its tenant disabled (with a
/// `closed` event that says why).
///
/// A stream reads the store when this node commits events of the run or
/// ends a pass of it, and otherwise after a wait that starts at 250 ms and doubles up to 2 s
/// while nothing new comes, so an idle stream costs a read every 2 s, not
/// four a second. A tenant holds at most its `open-streams` quota of
/// streams on one node (429 past it).
pub async fn events(
    State(state): State<AppState>,
    KeyedCaller { tenant, key }: KeyedCaller,
    Path(id): Path<String>,
    Query(q): Query<EventsQuery>,
    headers: HeaderMap,
) -> ApiResult<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    own_run(&state, &tenant, &id).await?;
    let cap = policy_of(&tenant)?.quotas.open_streams_cap();
    let slot = state.streams.open(&tenant.id, &key, cap).map_err(|open| {
        ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "quota_exceeded",
            format!(
                "the tenant has {open} event streams open on this server, its quota `open-streams` ({cap}); close one \
                 first, or ask the operator for a higher quota"
            ),
        )
    })?;
    // A revocation made between the caller's admission and the slot's
    // opening ended no slot: look once more now that it is open.
    if !super::auth::still_admitted(&state, &tenant.id, &key).await.map_err(ApiError::store)? {
        return Err(ApiError::unauthorized("the key was revoked or the tenant disabled; ask the operator for a key"));
    }
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<i64>().ok())
        .or(q.after)
        .unwrap_or(0);
    struct Cursor {
        state: AppState,
        watch: std::sync::Arc<tokio::sync::Notify>,
        slot: super::streams::Slot,
        tenant: String,
        key: String,
        id: String,
        after: i64,
        queue: VecDeque<Event>,
        ended: bool,
        closed: bool,
        wait: Duration,
        checked: tokio::time::Instant,
    }
    impl Cursor {
        /// Ends the stream with a `closed` event that says why; what was
        /// read and not yet sent is not sent.
        fn close(&mut self, why: &str) {
            self.ended = true;
            self.closed = true;
            self.queue.clear();
            self.queue.push_back(Event::default().event("closed").data(json!({"reason": why}).to_string()));
        }
    }
    let watch = state.changes.watch(&id);
    let cursor = Cursor {
        state,
        watch,
        slot,
        tenant: tenant.id,
        key,
        id,
        after,
        queue: VecDeque::new(),
        ended: false,
        closed: false,
        wait: STREAM_FALLBACK_MIN,
        checked: tokio::time::Instant::now(),
    };
    let stream = futures::stream::unfold(cursor, |mut c| async move {
        loop {
            // Checked before each event: a revocation stops what is queued
            // too, a final `end` included.
            if !c.closed && c.slot.end.is_ended() {
                c.close("the key was revoked or the tenant disabled");
            }
            if let Some(event) = c.queue.pop_front() {
                return Some((Ok(event), c));
            }
            if c.ended || c.state.stopping.load(Ordering::Relaxed) {
                return None;
            }
            if c.checked.elapsed() >= STREAM_RECHECK {
                c.checked = tokio::time::Instant::now();
                match super::auth::still_admitted(&c.state, &c.tenant, &c.key).await {
                    Ok(true) => {}
                    Ok(false) => {
                        c.close("the key was revoked or the tenant disabled");
                        continue;
                    }
                    Err(_) => return None,
                }
            }
            // Registered before the reads, so a change between them is not missed.
            let changed = c.watch.notified();
            // Read the status first: events written before a final status are all seen below.
            let status = match c.state.store.run(&c.id).await {
                Ok(Some(run)) => run.status,
                _ => return None,
            };
            match c.state.store.events(&c.id, c.after, 256).await {
                Ok(batch) if !batch.is_empty() => {
                    for e in batch {
                        c.after = e.id;
                        let data = json!({"kind": e.kind, "data": e.data, "at_ms": e.at_ms});
                        c.queue.push_back(Event::default().id(e.id.to_string()).event(e.kind).data(data.to_string()));
                    }
                    c.wait = STREAM_FALLBACK_MIN;
                    continue;
                }
                Ok(_) => {}
                Err(_) => return None,
            }
            if status.is_final() {
                c.ended = true;
                c.queue.push_back(Event::default().event("end").data(json!({"status": status}).to_string()));
                continue;
            }
            let end = c.slot.end.clone();
            tokio::select! {
                _ = changed => c.wait = STREAM_FALLBACK_MIN,
                _ = end.wait() => {}
                _ = tokio::time::sleep(c.wait) => c.wait = (c.wait * 2).min(STREAM_FALLBACK_MAX),
            }
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// `?since_ms=` of `GET /v1/usage`.
#[derive(Deserialize, Debug)]
pub struct UsageQuery {
    since_ms: Option<i64>,
}

/// `GET /v1/usage`: the tenant's metered usage per hour, and the totals.
pub async fn usage(
    State(state): State<AppState>,
    TenantCaller(tenant): TenantCaller,
    Query(q): Query<UsageQuery>,
) -> ApiResult<Json<Value>> {
    let since = q.since_ms.unwrap_or(0);
    let periods = state.store.usage(&tenant.id, since).await.map_err(ApiError::store)?;
    Ok(Json(usage_json(&periods)))
}

/// Usage periods and their totals.
pub fn usage_json(periods: &[nexo_store::Usage]) -> Value {
    let total = |f: fn(&nexo_store::Usage) -> u64| periods.iter().map(f).sum::<u64>();
    json!({
        "total": {
            "runs": total(|u| u.runs),
            "tokens": total(|u| u.tokens),
            "cpu_ticks": total(|u| u.cpu_ticks),
            "egress_bytes": total(|u| u.egress_bytes),
            "cost_usd": crate::spend::usd(total(|u| u.cost_nanos)),
        },
        "periods": periods.iter().map(|u| json!({
            "period_ms": u.period_ms, "runs": u.runs, "tokens": u.tokens,
            "cpu_ticks": u.cpu_ticks, "egress_bytes": u.egress_bytes,
            "cost_usd": crate::spend::usd(u.cost_nanos),
        })).collect::<Vec<_>>(),
    })
}

/// `GET /v1/audit`: the tenant's own audit log, oldest first.
pub async fn audit_log(
    State(state): State<AppState>,
    TenantCaller(tenant): TenantCaller,
    Query(q): Query<EventsQuery>,
) -> ApiResult<Json<Value>> {
    let after = u64::try_from(q.after.unwrap_or(0)).unwrap_or(0);
    let entries = state.store.audit(&tenant.id, after, 1000).await.map_err(ApiError::store)?;
    Ok(Json(json!({"entries": entries})))
}

// ---- the operator's API ----

/// The body of `POST /v1/tenants`.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct NewTenantRequest {
    name: String,
    #[serde(default)]
    policy: Option<Value>,
}

fn parse_policy(value: Option<&Value>, config: &crate::config::ConfigFile) -> ApiResult<Policy> {
    match value {
        None => Ok(Policy::default()),
        Some(v) => Policy::parse(&v.to_string(), config)
            .map_err(|m| ApiError::bad_request(format!("the policy is refused: {m}"))),
    }
}

fn tenant_json(t: &Tenant) -> Value {
    json!({"id": t.id, "name": t.name, "policy": t.policy, "disabled": t.disabled, "created_ms": t.created_ms})
}

/// `POST /v1/tenants` (admin): a tenant and its first key, shown once.
pub async fn create_tenant(
    State(state): State<AppState>,
    _: AdminCaller,
    Json(request): Json<NewTenantRequest>,
) -> ApiResult<Response> {
    let policy = parse_policy(request.policy.as_ref(), &state.config)?;
    let (tenant, key, secret) = tenants::create(&*state.store, &request.name, &policy).await?;
    let body = json!({"tenant": tenant_json(&tenant), "key": {"id": key.id, "key": secret}});
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// `GET /v1/tenants` (admin).
pub async fn list_tenants(State(state): State<AppState>, _: AdminCaller) -> ApiResult<Json<Value>> {
    let all = state.store.tenants().await.map_err(ApiError::store)?;
    Ok(Json(json!({"tenants": all.iter().map(tenant_json).collect::<Vec<_>>()})))
}

/// `PUT /v1/tenants/{name}/policy` (admin).
pub async fn put_policy(
    State(state): State<AppState>,
    _: AdminCaller,
    Path(name): Path<String>,
    Json(policy): Json<Value>,
) -> ApiResult<Json<Value>> {
    let tenant = tenants::find(&*state.store, &name).await?;
    let policy = parse_policy(Some(&policy), &state.config)?;
    let tenant = tenants::set_policy(&*state.store, &tenant, &policy).await?;
    Ok(Json(tenant_json(&tenant)))
}

/// `POST /v1/tenants/{name}/keys` (admin): a new key, shown once.
pub async fn create_key(
    State(state): State<AppState>,
    _: AdminCaller,
    Path(name): Path<String>,
) -> ApiResult<Response> {
    let tenant = tenants::find(&*state.store, &name).await?;
    let (key, secret) = tenants::add_key(&*state.store, &tenant).await?;
    Ok((StatusCode::CREATED, Json(json!({"id": key.id, "key": secret}))).into_response())
}

/// `POST /v1/tenants/{name}/disable` and `/enable` (admin).
pub async fn disable_tenant(
    State(state): State<AppState>,
    _: AdminCaller,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    let tenant = tenants::find(&*state.store, &name).await?;
    let disabled = tenants::set_disabled(&*state.store, &tenant, true).await?;
    // Its open streams end now, not at their next check.
    state.streams.end_tenant(&tenant.id);
    Ok(Json(tenant_json(&disabled)))
}

/// `POST /v1/tenants/{name}/enable` (admin).
pub async fn enable_tenant(
    State(state): State<AppState>,
    _: AdminCaller,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    let tenant = tenants::find(&*state.store, &name).await?;
    Ok(Json(tenant_json(&tenants::set_disabled(&*state.store, &tenant, false).await?)))
}

/// `DELETE /v1/keys/{id}` (admin): revokes a key.
pub async fn revoke_key(
    State(state): State<AppState>,
    _: AdminCaller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let key = match tenants::revoke_key(&*state.store, &id).await {
        Err(TenantError::Store(StoreError::NoKey(_))) => return Err(ApiError::not_found("there is no such key")),
        other => other?,
    };
    // Its open streams end now, not at their next check.
    state.streams.end_key(&key.id);
    Ok(Json(json!({"id": key.id, "revoked_ms": key.revoked_ms})))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decision_body_is_small() {
        let call = format!(r#"{{"seq": 4, "args-hash": "{}"}}"#, "ab".repeat(32));
        assert_eq!(DecisionRequest::parse(call.as_bytes()).ok().map(|c| c.seq), Some(4));
        let padded = format!(r#"{{"seq": 4, "args-hash": "{}"}}"#, "a".repeat(MAX_DECISION_BYTES));
        let err = DecisionRequest::parse(padded.as_bytes()).err().map(|e| format!("{e:?}")).unwrap_or_default();
        assert!(err.contains("body_too_large"), "{err}");
    }
}
