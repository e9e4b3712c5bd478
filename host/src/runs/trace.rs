//! A pass's span: `invoke_agent`, under the trace of the request that
//! started or continued the run (the caller attached it), linked to the
//! run's earlier passes, which the store keeps for any process or node
//! that takes the run up later. A pass that resumes after a decision
//! records the wait for it first.

use std::sync::Arc;

use nexo_store::{Run, Store};

use crate::journal::Replay;
pub(super) use crate::telemetry::context::TraceParent;
use crate::telemetry::spans::{self, Span};
use crate::telemetry::traces::{self, RunLabels};

/// How many earlier passes a pass links to: the latest ones.
const LINKED_PASSES: usize = 32;

/// The caller's trace context, when tracing is on, for the job to carry.
pub(super) fn caller() -> Option<TraceParent> {
    if traces::enabled() { TraceParent::current() } else { None }
}

/// The span of a pass of `run`, recorded with the run for the passes after
/// it; a disabled span when tracing is off (nothing is read or written).
pub(super) async fn pass_span(store: &Arc<dyn Store>, run: &Run, agent: &str, replay: Replay) -> Span {
    if !traces::enabled() {
        return Span::off();
    }
    let earlier: Vec<TraceParent> = match store.pass_traces(&run.id, LINKED_PASSES).await {
        Ok(texts) => texts.iter().filter_map(|t| serde_json::from_str(t).ok()).collect(),
        Err(e) => {
            tracing::debug!(target: "nexo::runs", run = %run.id, "no links to earlier passes: {e}");
            Vec::new()
        }
    };
    let labels = RunLabels::new(run.tenant.as_deref(), &run.id, &run.component_sha256);
    let span = spans::pass_span(agent, labels, &earlier);
    if replay != Replay::New
        && let Ok(Some(approval)) = store.approval(&run.id).await
        && let Some(decision) = approval.decision
    {
        let now = nexo_store::now_ms();
        spans::approval_wait(&span, &approval.tool, decision.as_str(), approval.created_ms, now, earlier.last());
    }
    let own = span.context().and_then(TraceParent::of);
    if let Some(text) = own.and_then(|o| serde_json::to_string(&o).ok())
        && let Err(e) = store.add_pass_trace(&run.id, &text, nexo_store::now_ms()).await
    {
        tracing::debug!(target: "nexo::runs", run = %run.id, "the pass's trace context is not kept: {e}");
    }
    span
}
