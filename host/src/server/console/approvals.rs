//! The pending approvals of the tenant's runs.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use nexo_store::RunStatus;

use super::failure::{Failure, Page};
use super::html::{Nav, html, live, page, poll_answer};
use super::runs::{PollQuery, approval_card, list, pending};
use super::who::Console;
use crate::server::api::AppState;

async fn approvals_inner(state: &AppState, console: &Console) -> Result<String, Failure> {
    let suspended = list(state, console, Some(RunStatus::Suspended)).await?;
    let mut out = String::new();
    for run in &suspended {
        if let Some(a) = pending(state, console, run).await? {
            out.push_str(&approval_card(run, &a, &console.csrf, Some("/approvals")));
        }
    }
    if out.is_empty() {
        out.push_str("<p class=\"muted\">Nothing is waiting for an approval.</p>");
    }
    Ok(out)
}

/// `GET /approvals`: every pending approval of the tenant's runs.
pub(super) async fn approvals_page(State(state): State<AppState>, console: Console) -> Page {
    let inner = approvals_inner(&state, &console).await?;
    let body = format!(
        "<h1>Approvals</h1><p class=\"muted\">Tool calls your policy holds for a person to decide. \
         A decision is audited, and the run resumes.</p>{}",
        live("div", "approvals", "", "/approvals/live", "2s", true, &inner)
    );
    Ok(html(StatusCode::OK, page("Approvals", Some(&console.who()), Nav::Approvals, &body)))
}

/// `GET /approvals/live`: the approvals list, polled.
pub(super) async fn approvals_live(
    State(state): State<AppState>,
    console: Console,
    Query(q): Query<PollQuery>,
) -> Page {
    let inner = approvals_inner(&state, &console).await?;
    let whole = live("div", "approvals", "", "/approvals/live", "2s", true, &inner);
    Ok(poll_answer(q.v.as_deref(), &inner, whole))
}
