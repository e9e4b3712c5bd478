//! Sessions over the API: a tenant's remembering instances of an agent,
//! each prompt a run that continues the session's thread.
//!
//! A session is addressed by `(agent, instance)` in the store; a tenant's
//! instance names live under its own prefix (`<tenant-id>/<name>`), so two
//! tenants' sessions never meet, and a session id of another tenant is
//! answered 404 like a missing one.

use crate::manifest::{Capability, PermissionMode};
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use nexo_store::{Session, Tenant};
use serde::Deserialize;
use serde_json::{Value, json};

use super::api::{self, ApiError, AppState, run_json};
use super::auth::TenantCaller;
use crate::manifest::SandboxKind;
use crate::policy::Narrowing;

/// The prefix of a tenant's instance names in the store.
fn prefix(tenant: &Tenant) -> String {
    format!("{}/", tenant.id)
}

/// The session `id`, if it is the tenant's.
async fn own_session(state: &AppState, tenant: &Tenant, id: &str) -> Result<Session, ApiError> {
    match state.store.session_by_id(id).await.map_err(ApiError::store)? {
        Some(s) if s.instance.starts_with(&prefix(tenant)) => Ok(s),
        _ => Err(ApiError::not_found("there is no such session for this tenant")),
    }
}

fn session_json(tenant: &Tenant, s: &Session) -> Value {
    json!({
        "id": s.id,
        "agent": s.agent,
        "instance": s.instance.strip_prefix(&prefix(tenant)).unwrap_or(&s.instance),
        "messages": s.messages,
        "created_ms": s.created_ms,
        "updated_ms": s.updated_ms,
    })
}

/// The body of `POST /v1/sessions/prompt`.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PromptRequest {
    /// The plugin's id.
    plugin: String,
    /// The session's name among the tenant's sessions of this agent.
    instance: String,
    /// The prompt.
    input: String,
    #[serde(default)]
    wait: bool,
    allow: Option<Vec<Capability>>,
    mode: Option<PermissionMode>,
    sandbox: Option<SandboxKind>,
    fetch_hosts: Option<Vec<String>>,
    net_hosts: Option<Vec<String>>,
    model: Option<String>,
    mcp_servers: Option<Vec<String>>,
    mcp_allow: Option<Vec<String>>,
    /// The tenant's own hooks for the prompt's run, by plugin id.
    #[serde(default)]
    hooks: Vec<String>,
}

/// `POST /v1/sessions/prompt`: opens the session `(agent, instance)` if it
/// is new and queues a prompt of it, a run that continues its thread. The
/// store refuses a second prompt while one is unfinished (409).
pub async fn prompt(
    State(state): State<AppState>,
    TenantCaller(tenant): TenantCaller,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request: PromptRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("the body is not a session prompt: {e}")))?;
    let name = request.instance.trim();
    if name.is_empty() || name.len() > 128 || name.chars().any(char::is_control) {
        return Err(ApiError::bad_request("`instance` must be 1 to 128 printable characters"));
    }
    let narrowing = Narrowing {
        allow: request.allow.clone(),
        mode: request.mode,
        sandbox: request.sandbox,
        fetch_hosts: request.fetch_hosts.clone(),
        net_hosts: request.net_hosts.clone(),
        model: request.model.clone(),
        mcp_servers: request.mcp_servers.clone(),
        mcp_allow: request.mcp_allow.clone(),
    };
    let mut prepared = api::prepare(&state, &tenant, &request.plugin, &narrowing).await?;
    prepared.add_hooks(api::hooks_of(&state, &tenant, &request.hooks).await?)?;
    let instance = format!("{}{name}", prefix(&tenant));
    let session = state
        .store
        .open_session(&prepared.agent_name(), &instance, nexo_store::now_ms())
        .await
        .map_err(ApiError::store)?;
    let (run, _job) = state
        .runs
        .queue_for(Some(&tenant.id), Some(&session.id), prepared.subject()?, &request.input, &prepared.spec)
        .await
        .map_err(ApiError::store)?;
    let (status, run) = api::started(&state, &tenant, &run, &prepared, request.wait).await?;
    let session = own_session(&state, &tenant, &session.id).await?;
    Ok((status, Json(json!({"session": session_json(&tenant, &session), "run": run}))).into_response())
}

/// `GET /v1/sessions`: the tenant's sessions, most recently updated first.
pub async fn list(State(state): State<AppState>, TenantCaller(tenant): TenantCaller) -> Result<Json<Value>, ApiError> {
    // Only the tenant's, read by its prefix in the store's index.
    let own = state.store.sessions_with_prefix(&prefix(&tenant), 10_000).await.map_err(ApiError::store)?;
    let mine: Vec<Value> = own.iter().map(|s| session_json(&tenant, s)).collect();
    Ok(Json(json!({"sessions": mine})))
}

/// `GET /v1/sessions/{id}`: the session, its thread and its prompts.
pub async fn show(
    State(state): State<AppState>,
    TenantCaller(tenant): TenantCaller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let session = own_session(&state, &tenant, &id).await?;
    let thread = state.store.thread(&id).await.map_err(ApiError::store)?;
    let runs = state.store.session_runs(&id).await.map_err(ApiError::store)?;
    let mut body = session_json(&tenant, &session);
    body["thread"] = Value::Array(thread);
    body["runs"] = Value::Array(runs.iter().map(|r| run_json(r, None)).collect());
    Ok(Json(body))
}

/// `DELETE /v1/sessions/{id}`: deletes the session, its thread and its runs.
pub async fn delete(
    State(state): State<AppState>,
    TenantCaller(tenant): TenantCaller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    own_session(&state, &tenant, &id).await?;
    state.store.delete_session(&id).await.map_err(ApiError::store)?;
    api::audit(&state, &tenant, "session.deleted", json!({"session": id})).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
