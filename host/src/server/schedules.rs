//! Schedules over the API: a tenant's run template started at each
//! occurrence of a cron expression, within the tenant's policy and quotas.
//!
//! A schedule is checked as a run request is when it is made (the policy,
//! the plugin, the quotas) and each occurrence's run again as any run is:
//! its start within the tenant's `runs-per-hour` (an occurrence refused is
//! skipped, and `show` says why), each pass within its policy as it is
//! then. Another tenant's schedule is answered 404 like a missing one.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use nexo_store::{Missed, Schedule, Tenant};
use serde::Deserialize;
use serde_json::{Value, json};

use super::api::{self, ApiError, ApiResult, AppState, RunRequest};
use super::auth::TenantCaller;
use crate::runs::schedules::{self, Cron};

/// The most schedules one tenant may hold.
pub const MAX_SCHEDULES_PER_TENANT: usize = 100;

/// The body of `POST /v1/schedules`.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ScheduleRequest {
    /// The cron expression: five fields, or six with seconds first.
    cron: String,
    /// The IANA time zone it is read in (UTC if not given).
    #[serde(default = "utc")]
    timezone: String,
    /// What happens to occurrences missed while no node was up: `skip`
    /// (the default) or `run-once`.
    #[serde(default)]
    missed: Option<String>,
    /// The run each occurrence starts, as `POST /v1/runs` takes it.
    run: RunRequest,
}

fn utc() -> String {
    "UTC".into()
}

/// A schedule as the API shows it.
fn schedule_json(s: &Schedule) -> Value {
    json!({
        "id": s.id,
        "cron": s.cron,
        "timezone": s.timezone,
        "missed": s.missed.as_str(),
        "paused": s.paused,
        "next_ms": s.next_ms,
        "plugin": s.template.component_sha256,
        "agent": s.template.agent,
        "input": s.template.input,
        "started": s.started,
        "skipped": s.skipped,
        "last_run": s.last_run,
        "note": s.note,
        "created_ms": s.created_ms,
    })
}

/// The schedule `id`, if it is the tenant's.
async fn own_schedule(state: &AppState, tenant: &Tenant, id: &str) -> ApiResult<Schedule> {
    match state.store.schedule(id).await.map_err(ApiError::store)? {
        Some(s) if s.tenant.as_deref() == Some(tenant.id.as_str()) => Ok(s),
        _ => Err(ApiError::not_found("there is no such schedule for this tenant")),
    }
}

fn schedule_error(e: schedules::ScheduleError) -> ApiError {
    match e {
        schedules::ScheduleError::Store(e) => ApiError::store(e),
        other => ApiError::bad_request(other.to_string()),
    }
}

/// `POST /v1/schedules`: a run template started at each occurrence.
pub async fn add(
    State(state): State<AppState>,
    TenantCaller(tenant): TenantCaller,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let request: ScheduleRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("the body is not a schedule request: {e}")))?;
    if request.run.wait {
        return Err(ApiError::bad_request("a schedule's run cannot `wait`: nobody is there to answer"));
    }
    let missed = match request.missed.as_deref() {
        None => Missed::Skip,
        Some(m) => Missed::parse(m)
            .ok_or_else(|| ApiError::bad_request(format!("`missed` is `skip` or `run-once`, not `{m}`")))?,
    };
    let cron = Cron::parse(&request.cron, &request.timezone).map_err(schedule_error)?;
    if cron.has_seconds() {
        return Err(ApiError::bad_request(
            "a tenant's schedule fires at most once a minute: give five fields (minute hour day-of-month month \
             day-of-week), without seconds",
        ));
    }
    let held = state.store.schedules(Some(&tenant.id), MAX_SCHEDULES_PER_TENANT).await.map_err(ApiError::store)?;
    if held.len() >= MAX_SCHEDULES_PER_TENANT {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "too_many_schedules",
            format!("a tenant holds at most {MAX_SCHEDULES_PER_TENANT} schedules; delete one first"),
        ));
    }
    // Checked as the run request it is: the policy, the plugin, the quotas.
    let mut prepared = api::prepare(&state, &tenant, &request.run.plugin, &request.run.narrowing()).await?;
    prepared.spec.agents = api::agents_of(&state, &tenant, &request.run.agents).await?;
    prepared.add_hooks(api::hooks_of(&state, &tenant, &request.run.hooks).await?)?;
    let made = (prepared.subject()?, request.run.input.as_str(), &prepared.spec);
    let schedule =
        schedules::add(&*state.store, Some(&tenant.id), made, &cron, missed).await.map_err(schedule_error)?;
    let detail = json!({"schedule": schedule.id, "cron": schedule.cron, "plugin": schedule.template.component_sha256});
    api::audit(&state, &tenant, "schedule.added", detail).await?;
    state.wake.notify_one();
    Ok((StatusCode::CREATED, Json(schedule_json(&schedule))))
}

/// `GET /v1/schedules`: the tenant's schedules, oldest first.
pub async fn list(State(state): State<AppState>, TenantCaller(tenant): TenantCaller) -> ApiResult<Json<Value>> {
    let all = state.store.schedules(Some(&tenant.id), MAX_SCHEDULES_PER_TENANT).await.map_err(ApiError::store)?;
    Ok(Json(json!({"schedules": all.iter().map(schedule_json).collect::<Vec<_>>()})))
}

/// `GET /v1/schedules/{id}`.
pub async fn show(
    State(state): State<AppState>,
    TenantCaller(tenant): TenantCaller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    Ok(Json(schedule_json(&own_schedule(&state, &tenant, &id).await?)))
}

/// `POST /v1/schedules/{id}/pause`.
pub async fn pause(
    State(state): State<AppState>,
    TenantCaller(tenant): TenantCaller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    own_schedule(&state, &tenant, &id).await?;
    let schedule = state.store.set_schedule_paused(&id, true, 0).await.map_err(ApiError::store)?;
    api::audit(&state, &tenant, "schedule.paused", json!({"schedule": id})).await?;
    Ok(Json(schedule_json(&schedule)))
}

/// `POST /v1/schedules/{id}/resume`: at its next occurrence to come.
pub async fn resume(
    State(state): State<AppState>,
    TenantCaller(tenant): TenantCaller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let schedule = own_schedule(&state, &tenant, &id).await?;
    let schedule = schedules::resume(&*state.store, &schedule).await.map_err(schedule_error)?;
    api::audit(&state, &tenant, "schedule.resumed", json!({"schedule": id})).await?;
    state.wake.notify_one();
    Ok(Json(schedule_json(&schedule)))
}

/// `DELETE /v1/schedules/{id}`: the runs it started stay.
pub async fn delete(
    State(state): State<AppState>,
    TenantCaller(tenant): TenantCaller,
    Path(id): Path<String>,
    _: Bytes,
) -> ApiResult<StatusCode> {
    own_schedule(&state, &tenant, &id).await?;
    state.store.delete_schedule(&id).await.map_err(ApiError::store)?;
    api::audit(&state, &tenant, "schedule.deleted", json!({"schedule": id})).await?;
    Ok(StatusCode::NO_CONTENT)
}
