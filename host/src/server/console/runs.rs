//! The runs pages: the list, a run with its live state and events, and deciding its approval.

use std::fmt::Write as _;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect};
use nexo_store::{Approval, Decision, Run, RunStatus, StoredEvent};
use serde::Deserialize;
use serde_json::Value;

use super::csrf::Posted;
use super::failure::{Failure, Page};
use super::html::{
    Nav, clip, clock, csrf_field, escape, html, live, page, poll_answer, pretty, status_badge, time_tag,
};
use super::who::Console;
use crate::server::api;
use crate::server::api::{ApiError, AppState};

/// Events shown per page load or poll.
const EVENT_BATCH: usize = 500;

/// Runs shown in a list.
const RUN_LIST: usize = 100;

/// `?status=&v=` of the runs list.
#[derive(Deserialize, Debug, Default)]
pub(super) struct ListQuery {
    pub(super) status: Option<String>,
    pub(super) v: Option<String>,
}

fn runs_table(runs: &[Run], status: Option<RunStatus>) -> String {
    let mut rows = String::new();
    for run in runs {
        let _ = write!(
            rows,
            "<tr data-run=\"{id}\"><td><a href=\"/runs/{id}\"><code>{id}</code></a></td><td>{agent}</td>\
             <td>{status}</td><td>{created}</td></tr>",
            id = escape(&run.id),
            agent = escape(&run.agent),
            status = status_badge(run.status, None),
            created = time_tag(run.created_ms),
        );
    }
    if runs.is_empty() {
        let what = match status {
            Some(s) => format!("No {} runs.", s.as_str()),
            None => "No runs yet. Upload a plugin and start a run over the API: <code>POST /v1/runs</code>.".into(),
        };
        let _ = write!(rows, "<tr><td colspan=\"4\" class=\"muted\">{what}</td></tr>");
    }
    let more = if runs.len() >= RUN_LIST {
        format!("<p class=\"muted\">The newest {RUN_LIST} are shown; <code>GET /v1/runs</code> lists more.</p>")
    } else {
        String::new()
    };
    format!(
        "<table><thead><tr><th>Run</th><th>Agent</th><th>Status</th><th>Created</th></tr></thead>\
         <tbody>{rows}</tbody></table>{more}"
    )
}

fn parse_status(text: Option<&str>) -> Option<RunStatus> {
    text.and_then(RunStatus::parse)
}

fn runs_live_url(status: Option<RunStatus>) -> String {
    match status {
        Some(s) => format!("/runs/live?status={}", s.as_str()),
        None => "/runs/live".into(),
    }
}

pub(super) async fn list(state: &AppState, console: &Console, status: Option<RunStatus>) -> Result<Vec<Run>, Failure> {
    state.store.tenant_runs(&console.tenant.id, status, RUN_LIST).await.map_err(|e| Failure::store(e, Some(console)))
}

/// `GET /runs`: the tenant's runs, newest first, the list kept current.
pub(super) async fn runs_page(State(state): State<AppState>, console: Console, Query(q): Query<ListQuery>) -> Page {
    let status = parse_status(q.status.as_deref());
    let runs = list(&state, &console, status).await?;
    let mut filters = String::from("<div class=\"filters\">");
    let here = |s: Option<RunStatus>| if s == status { " class=\"here\"" } else { "" };
    let _ = write!(filters, "<a href=\"/runs\"{}>all</a>", here(None));
    for s in RunStatus::ALL {
        let _ = write!(filters, "<a href=\"/runs?status={0}\"{1}>{0}</a>", s.as_str(), here(Some(s)));
    }
    filters.push_str("</div>");
    let inner = runs_table(&runs, status);
    let body = format!("<h1>Runs</h1>{filters}{}", live("div", "runs", "", &runs_live_url(status), "2s", true, &inner));
    Ok(html(StatusCode::OK, page("Runs", Some(&console.who()), Nav::Runs, &body)))
}

/// `GET /runs/live`: the runs list's fragment, polled.
pub(super) async fn runs_live(State(state): State<AppState>, console: Console, Query(q): Query<ListQuery>) -> Page {
    let status = parse_status(q.status.as_deref());
    let runs = list(&state, &console, status).await?;
    let inner = runs_table(&runs, status);
    let whole = live("div", "runs", "", &runs_live_url(status), "2s", true, &inner);
    Ok(poll_answer(q.v.as_deref(), &inner, whole))
}

/// The tenant's run `id`; another tenant's, or none, is 404.
async fn own_run(state: &AppState, console: &Console, id: &str) -> Result<Run, Failure> {
    match state.store.run(id).await {
        Ok(Some(run)) if run.tenant.as_deref() == Some(console.tenant.id.as_str()) => Ok(run),
        Ok(_) => Err(Failure::no_run(console)),
        Err(e) => Err(Failure::store(e, Some(console))),
    }
}

/// The pending approval of a suspended run.
pub(super) async fn pending(state: &AppState, console: &Console, run: &Run) -> Result<Option<Approval>, Failure> {
    if run.status != RunStatus::Suspended {
        return Ok(None);
    }
    state.store.approval(&run.id).await.map_err(|e| Failure::store(e, Some(console)))
}

/// An approval with its Approve and Deny forms; `back` is where a decision
/// returns to (the run's page when `None`).
pub(super) fn approval_card(run: &Run, approval: &Approval, csrf: &str, back: Option<&str>) -> String {
    let id = escape(&run.id);
    // On the approvals page, which run it is; on the run's own page, that goes without saying.
    let (which, back) = match back {
        Some(b) => (
            format!("<dt>Run</dt><dd><a href=\"/runs/{id}\"><code>{id}</code></a> ({})</dd>", escape(&run.agent)),
            format!("<input type=\"hidden\" name=\"back\" value=\"{}\">", escape(b)),
        ),
        None => (String::new(), String::new()),
    };
    let facts = format!(
        "<dl class=\"facts\">{which}<dt>Tool</dt><dd><code class=\"approval-tool\">{tool}</code></dd>\
         <dt>Capability</dt><dd><code class=\"approval-capability\">{capability}</code></dd>\
         <dt>Requested</dt><dd>{at}</dd></dl>\
         <h3>Arguments</h3><pre class=\"approval-arguments\">{args}</pre>",
        tool = escape(&approval.tool),
        capability = escape(&approval.capability),
        at = time_tag(approval.created_ms),
        args = escape(&clip(&pretty(&approval.arguments), 64 * 1024)),
    );
    // Each form names the call shown above it: a decision for a call the run
    // no longer waits on decides nothing.
    let call = format!(
        "<input type=\"hidden\" name=\"seq\" value=\"{}\"><input type=\"hidden\" name=\"args-hash\" value=\"{}\">",
        approval.seq,
        escape(&approval.args_hash)
    );
    let actions = match approval.decision {
        None => format!(
            "<div class=\"actions\">\
             <form method=\"post\" action=\"/runs/{id}/approve\">{csrf}{call}{back}\
             <button class=\"approve\" type=\"submit\">Approve</button></form>\
             <form method=\"post\" action=\"/runs/{id}/deny\">{csrf}{call}{back}\
             <button class=\"deny\" type=\"submit\">Deny</button></form></div>",
            csrf = csrf_field(csrf),
        ),
        Some(decision) => {
            let done = if decision == Decision::Approved { "Approved" } else { "Denied" };
            format!("<p class=\"muted decided\">{done}; the run resumes shortly.</p>")
        }
    };
    let title = if approval.decision.is_none() { "Waiting for your approval" } else { "Decided" };
    format!("<section class=\"panel approval\" data-run=\"{id}\"><h2>{title}</h2>{facts}{actions}</section>")
}

/// The part of a run's page that changes: its status, result or error, and
/// its pending approval.
fn run_state_inner(run: &Run, approval: Option<&Approval>, csrf: &str) -> String {
    let mut out = format!(
        "<dl class=\"facts\"><dt>Status</dt><dd>{}</dd><dt>Updated</dt><dd>{}</dd>",
        status_badge(run.status, Some("run-status")),
        time_tag(run.updated_ms)
    );
    if run.status == RunStatus::Suspended
        && let Some(reason) = &run.suspend_reason
    {
        let _ = write!(out, "<dt>Waiting for</dt><dd>{}</dd>", escape(reason));
    }
    if let Some(key) = &run.resume_key {
        let _ = write!(out, "<dt>Resume key</dt><dd><code>{}</code></dd>", escape(key));
    }
    out.push_str("</dl>");
    if let Some(result) = &run.result {
        let _ = write!(out, "<h2>Result</h2><pre id=\"run-result\">{}</pre>", escape(&clip(result, 256 * 1024)));
    }
    if let Some(error) = &run.error {
        let _ = write!(out, "<h2>Error</h2><pre id=\"run-error\">{}</pre>", escape(&clip(error, 64 * 1024)));
    }
    match approval {
        Some(a) => out.push_str(&approval_card(run, a, csrf, None)),
        None if run.status == RunStatus::Suspended && run.signal_wait.is_some() => out.push_str(
            "<p class=\"muted\">The run waits for a signal; send it over the API \
             (<code>POST /v1/runs/{id}/signals/{name}</code>), and it resumes by itself.</p>",
        ),
        None if run.status == RunStatus::Suspended => out.push_str(
            "<p class=\"muted\">The agent suspended itself; resume it over the API \
             (<code>POST /v1/runs/{id}/resume</code>).</p>",
        ),
        None => {}
    }
    out
}

fn run_state_url(run: &Run) -> String {
    format!("/runs/{}/state", run.id)
}

/// One event, its data folded.
fn event_row(e: &StoredEvent) -> String {
    let data = match &e.data {
        Value::Null => String::new(),
        Value::Object(m) if m.is_empty() => String::new(),
        data => format!(
            "<details><summary>{}</summary><pre>{}</pre></details>",
            escape(&clip(&data.to_string(), 160)),
            escape(&clip(&pretty(data), 16 * 1024))
        ),
    };
    format!(
        "<li data-event=\"{}\"><span class=\"kind\">{}</span><time>{}</time>{data}</li>",
        e.id,
        escape(&e.kind),
        clock(e.at_ms)
    )
}

/// The rows of `batch`, then the marker that fetches what comes after
/// them: at once if the batch was full, each second while the run goes on,
/// never once it has ended and every event is shown.
fn event_rows(run: &Run, batch: &[StoredEvent], after: i64, ended: bool) -> String {
    let mut out: String = batch.iter().map(event_row).collect();
    if batch.is_empty() && after == 0 && ended {
        out.push_str("<li class=\"muted\">No events.</li>");
    }
    let last = batch.last().map(|e| e.id).unwrap_or(after);
    let full = batch.len() >= EVENT_BATCH;
    if full || !ended {
        let trigger = if full { "load" } else { "every 1s" };
        let _ = write!(
            out,
            "<li id=\"events-more\" class=\"muted\" hx-get=\"/runs/{}/events?after={last}\" hx-trigger=\"{trigger}\" \
             hx-swap=\"outerHTML\"></li>",
            escape(&run.id)
        );
    }
    out
}

/// `GET /runs/{id}`: the run, its approval and its events, kept current.
pub(super) async fn run_page(State(state): State<AppState>, console: Console, Path(id): Path<String>) -> Page {
    let run = own_run(&state, &console, &id).await?;
    let approval = pending(&state, &console, &run).await?;
    let events = state.store.events(&run.id, 0, EVENT_BATCH).await.map_err(|e| Failure::store(e, Some(&console)))?;
    let timeline = crate::runs::timeline::Timeline::load(&*state.store, &run)
        .await
        .map_err(|e| Failure::store(e, Some(&console)))?;
    let below = crate::runs::children::descendants(&*state.store, &run.id)
        .await
        .map_err(|e| Failure::store(e, Some(&console)))?;
    let inner = run_state_inner(&run, approval.as_ref(), &console.csrf);
    let live_state = live("section", "run-state", "panel", &run_state_url(&run), "1s", !run.status.is_final(), &inner);
    let parent = match &run.parent {
        Some(p) => format!(
            "<dt>Parent</dt><dd><a id=\"run-parent\" href=\"/runs/{p}\"><code>{p}</code></a></dd>",
            p = escape(p)
        ),
        None => String::new(),
    };
    let body = format!(
        "<h1>Run <code id=\"run-id\">{id}</code></h1>\
         <div class=\"panel\"><dl class=\"facts\"><dt>Agent</dt><dd id=\"run-agent\">{agent}</dd>\
         <dt>Plugin</dt><dd><code title=\"{plugin}\">{plugin_short}</code></dd>\
         {parent}<dt>Created</dt><dd>{created}</dd><dt>Input</dt><dd><pre id=\"run-input\">{input}</pre></dd></dl></div>\
         {live_state}{tree}<h2>Timeline</h2>{timeline}<h2>Events</h2><div class=\"panel\"><ol id=\"events\" class=\"events\">{events}</ol></div>",
        id = escape(&run.id),
        agent = escape(&run.agent),
        plugin = escape(&run.component_sha256),
        plugin_short = escape(run.component_sha256.get(..12).unwrap_or(&run.component_sha256)),
        created = time_tag(run.created_ms),
        input = escape(&clip(&run.input, 64 * 1024)),
        events = event_rows(&run, &events, 0, run.status.is_final()),
        timeline = super::timeline::timeline_section(&timeline),
        tree = tree_section(&below),
    );
    Ok(html(StatusCode::OK, page(&format!("Run {}", run.id), Some(&console.who()), Nav::Runs, &body)))
}

/// The runs below a run, each indented under the run that started it;
/// nothing for a run that started none.
fn tree_section(below: &[crate::runs::children::Descendant]) -> String {
    if below.is_empty() {
        return String::new();
    }
    let mut rows = String::new();
    for d in below {
        let _ = write!(
            rows,
            "<tr data-child=\"{id}\"><td style=\"padding-left:{indent}em\"><a href=\"/runs/{id}\"><code>{id}</code></a></td>\
             <td>{agent}</td><td>{status}</td></tr>",
            id = escape(&d.id),
            indent = d.depth.saturating_sub(1) * 2,
            agent = escape(&d.agent),
            status = status_badge(d.status, None),
        );
    }
    let more = if below.len() >= crate::runs::children::MOST_SHOWN {
        format!("<p class=\"muted\">The first {} are shown.</p>", crate::runs::children::MOST_SHOWN)
    } else {
        String::new()
    };
    format!(
        "<h2>Child runs</h2><div class=\"panel\"><table id=\"run-children\"><thead><tr><th>Run</th><th>Agent</th>\
         <th>Status</th></tr></thead><tbody>{rows}</tbody></table>{more}</div>"
    )
}

/// `?v=` of a polled fragment.
#[derive(Deserialize, Debug, Default)]
pub(super) struct PollQuery {
    pub(super) v: Option<String>,
}

/// `GET /runs/{id}/state`: the run's status and approval, polled.
pub(super) async fn run_state(
    State(state): State<AppState>,
    console: Console,
    Path(id): Path<String>,
    Query(q): Query<PollQuery>,
) -> Page {
    let run = own_run(&state, &console, &id).await?;
    let approval = pending(&state, &console, &run).await?;
    let inner = run_state_inner(&run, approval.as_ref(), &console.csrf);
    let whole = live("section", "run-state", "panel", &run_state_url(&run), "1s", !run.status.is_final(), &inner);
    Ok(poll_answer(q.v.as_deref(), &inner, whole))
}

/// `?after=` of a run's events fragment.
#[derive(Deserialize, Debug, Default)]
pub(super) struct AfterQuery {
    after: Option<i64>,
}

/// `GET /runs/{id}/events?after=N`: the events after N, as rows to append;
/// 204 while there are none yet.
pub(super) async fn run_events(
    State(state): State<AppState>,
    console: Console,
    Path(id): Path<String>,
    Query(q): Query<AfterQuery>,
) -> Page {
    // The status first: events written before a final status are all read below.
    let run = own_run(&state, &console, &id).await?;
    let after = q.after.unwrap_or(0).max(0);
    let batch = state.store.events(&run.id, after, EVENT_BATCH).await.map_err(|e| Failure::store(e, Some(&console)))?;
    let ended = run.status.is_final();
    if batch.is_empty() && !ended {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    Ok(html(StatusCode::OK, event_rows(&run, &batch, after, ended)))
}

/// `POST /runs/{id}/approve`.
pub(super) async fn approve(State(state): State<AppState>, Path(id): Path<String>, posted: Posted) -> Page {
    decide(state, id, posted, Decision::Approved).await
}

/// `POST /runs/{id}/deny`.
pub(super) async fn deny(State(state): State<AppState>, Path(id): Path<String>, posted: Posted) -> Page {
    decide(state, id, posted, Decision::Denied).await
}

/// Decides through the API's own path (the run looked up through the
/// tenant, the decision audited, the resume queued), then goes back.
async fn decide(state: AppState, id: String, posted: Posted, decision: Decision) -> Page {
    let back =
        if posted.field("back") == Some("/approvals") { "/approvals".to_string() } else { format!("/runs/{id}") };
    let seq = posted.field("seq").map(|s| s.parse::<u64>());
    let call = match seq {
        Some(Err(_)) => Err(ApiError::bad_request("the form's `seq` is not a call's sequence number")),
        seq => api::DecisionRequest::from_fields(seq.and_then(Result::ok), posted.field("args-hash")).call(),
    };
    let console = posted.console;
    // Another tenant's run is 404 whatever the form holds.
    own_run(&state, &console, &id).await?;
    let call = match call {
        Ok(c) => c,
        Err(e) => return Err(Failure::api(e, &console).await),
    };
    match api::decide(state, console.tenant.clone(), &console.key, id, call, decision).await {
        Ok(_) => Ok(Redirect::to(&back).into_response()),
        Err(e) => Err(Failure::api(e, &console).await),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nexo_store::{Approval, Run, RunStatus, StoredEvent};
    use serde_json::json;

    #[test]
    fn untrusted_text_is_escaped_in_every_part_of_a_run_page() {
        let evil = "<img src=x onerror=alert(1)>";
        let run = Run {
            id: "r1".into(),
            agent: evil.into(),
            kind: "component".into(),
            source: String::new(),
            component_sha256: "ab".repeat(32),
            input: evil.into(),
            grant: Value::Null,
            status: RunStatus::Suspended,
            suspend_reason: Some(evil.into()),
            wake_ms: None,
            wake_job: None,
            signal_wait: None,
            resume_key: None,
            resume_input: None,
            result: Some(evil.into()),
            error: Some(evil.into()),
            created_ms: 0,
            updated_ms: 0,
            lease: None,
            session: None,
            tenant: Some("t".into()),
            parent: None,
        };
        let approval = Approval {
            seq: 1,
            capability: evil.into(),
            tool: evil.into(),
            arguments: json!({"path": evil}),
            args_hash: String::new(),
            component_sha256: String::new(),
            decision: None,
            created_ms: 0,
        };
        let html = run_state_inner(&run, Some(&approval), "tok");
        let event =
            event_row(&StoredEvent { id: 1, run: "r1".into(), kind: evil.into(), data: json!({"x": evil}), at_ms: 0 });
        let list = runs_table(std::slice::from_ref(&run), None);
        for text in [html, event, list] {
            assert!(!text.contains("<img"), "{text}");
            assert!(text.contains("&lt;img"), "{text}");
        }
    }
}
