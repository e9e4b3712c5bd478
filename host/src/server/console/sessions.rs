//! The sessions pages, through the API's own handlers.

use std::fmt::Write as _;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use nexo_store::RunStatus;
use serde_json::Value;

use super::failure::{Failure, Page};
use super::html::{Nav, clip, escape, html, page, pretty, status_badge, time_tag};
use super::who::Console;
use crate::server::api::{ApiError, AppState};
use crate::server::auth::TenantCaller;
use crate::server::sessions;

/// The API's answer for the tenant, or its error as a page.
async fn through_api<T>(result: Result<axum::Json<T>, ApiError>, console: &Console) -> Result<T, Failure> {
    match result {
        Ok(axum::Json(value)) => Ok(value),
        Err(e) => Err(Failure::api(e, console).await),
    }
}

fn text_of(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => pretty(other),
    }
}

/// `GET /sessions`: the tenant's sessions, as `GET /v1/sessions` lists them.
pub(super) async fn sessions_page(State(state): State<AppState>, console: Console) -> Page {
    let listed =
        through_api(sessions::list(State(state), TenantCaller(console.tenant.clone())).await, &console).await?;
    let mut rows = String::new();
    for s in listed["sessions"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let id = escape(s["id"].as_str().unwrap_or(""));
        let _ = write!(
            rows,
            "<tr data-session=\"{id}\"><td><a href=\"/sessions/{id}\"><code>{id}</code></a></td><td>{}</td>\
             <td>{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            escape(s["instance"].as_str().unwrap_or("")),
            escape(s["agent"].as_str().unwrap_or("")),
            s["messages"].as_u64().unwrap_or(0),
            time_tag(s["updated_ms"].as_i64().unwrap_or(0)),
        );
    }
    if rows.is_empty() {
        rows.push_str(
            "<tr><td colspan=\"5\" class=\"muted\">No sessions yet. A prompt over the API opens one: \
             <code>POST /v1/sessions/prompt</code>.</td></tr>",
        );
    }
    let body = format!(
        "<h1>Sessions</h1><p class=\"muted\">Remembering instances of an agent: each prompt is a run that \
         continues the session's thread.</p><table id=\"sessions\"><thead><tr><th>Session</th><th>Name</th>\
         <th>Agent</th><th class=\"num\">Messages</th><th>Updated</th></tr></thead><tbody>{rows}</tbody></table>"
    );
    Ok(html(StatusCode::OK, page("Sessions", Some(&console.who()), Nav::Sessions, &body)))
}

/// `GET /sessions/{id}`: a session's thread and prompts, as
/// `GET /v1/sessions/{id}` shows them (another tenant's is 404).
pub(super) async fn session_page(State(state): State<AppState>, console: Console, Path(id): Path<String>) -> Page {
    let shown =
        through_api(sessions::show(State(state), TenantCaller(console.tenant.clone()), Path(id)).await, &console)
            .await?;
    let mut thread = String::new();
    for message in shown["thread"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let role = message["role"].as_str().unwrap_or("message");
        let content = if message.get("content").is_some() { text_of(&message["content"]) } else { pretty(message) };
        let _ = write!(
            thread,
            "<li><span class=\"kind\">{}</span><pre>{}</pre></li>",
            escape(role),
            escape(&clip(&content, 16 * 1024))
        );
    }
    if thread.is_empty() {
        thread.push_str("<li class=\"muted\">The thread is empty.</li>");
    }
    let mut prompts = String::new();
    for run in shown["runs"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let id = escape(run["id"].as_str().unwrap_or(""));
        let status = run["status"].as_str().and_then(RunStatus::parse).map(|s| status_badge(s, None));
        let _ = write!(
            prompts,
            "<tr><td><a href=\"/runs/{id}\"><code>{id}</code></a></td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&clip(run["input"].as_str().unwrap_or(""), 160)),
            status.unwrap_or_default(),
            time_tag(run["created_ms"].as_i64().unwrap_or(0)),
        );
    }
    let body = format!(
        "<h1>Session <code id=\"session-id\">{id}</code></h1><div class=\"panel\"><dl class=\"facts\">\
         <dt>Name</dt><dd id=\"session-instance\">{instance}</dd><dt>Agent</dt><dd>{agent}</dd>\
         <dt>Created</dt><dd>{created}</dd><dt>Updated</dt><dd>{updated}</dd></dl></div>\
         <h2>Prompts</h2><table><thead><tr><th>Run</th><th>Input</th><th>Status</th><th>Created</th></tr></thead>\
         <tbody>{prompts}</tbody></table><h2>Thread</h2><div class=\"panel\"><ol class=\"events\">{thread}</ol></div>",
        id = escape(shown["id"].as_str().unwrap_or("")),
        instance = escape(shown["instance"].as_str().unwrap_or("")),
        agent = escape(shown["agent"].as_str().unwrap_or("")),
        created = time_tag(shown["created_ms"].as_i64().unwrap_or(0)),
        updated = time_tag(shown["updated_ms"].as_i64().unwrap_or(0)),
    );
    Ok(html(StatusCode::OK, page("Session", Some(&console.who()), Nav::Sessions, &body)))
}
