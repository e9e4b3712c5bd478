//! W3C trace context: what a request hands nexo (`traceparent`,
//! `tracestate`), as it travels with a run's job and with the record of each
//! pass, and what nexo hands on.

use std::collections::HashMap;

use opentelemetry::Context;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanContext, TraceContextExt};
use opentelemetry_sdk::propagation::TraceContextPropagator;

/// A W3C trace context as it travels with a run's job and its record:
/// `traceparent`, and `tracestate` when there is one.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TraceParent {
    /// The `traceparent` header's value.
    pub traceparent: String,
    /// The `tracestate` header's value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
}

impl TraceParent {
    /// The context these headers carry, if they are well formed: a
    /// `traceparent` that does not parse is ignored, as W3C says.
    pub fn from_headers(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<TraceParent> {
        let parent = TraceParent {
            traceparent: traceparent?.trim().to_string(),
            tracestate: tracestate.map(|s| s.trim().to_string()).filter(|s| !s.is_empty()),
        };
        parent.span_context().map(|_| parent)
    }

    /// The remote span this names.
    pub fn span_context(&self) -> Option<SpanContext> {
        let mut carrier = HashMap::new();
        carrier.insert("traceparent".to_string(), self.traceparent.clone());
        if let Some(state) = &self.tracestate {
            carrier.insert("tracestate".to_string(), state.clone());
        }
        let cx = TraceContextPropagator::new().extract(&carrier);
        let span = cx.span().span_context().clone();
        span.is_valid().then_some(span)
    }

    /// The OpenTelemetry context whose parent this names: a pass run under
    /// it (`opentelemetry::trace::FutureExt::with_context`) continues the
    /// trace.
    pub fn context(&self) -> Context {
        match self.span_context() {
            Some(remote) => Context::new().with_remote_span_context(remote),
            None => Context::new(),
        }
    }

    /// The span `cx` names, when it is a valid one.
    pub fn of(cx: &Context) -> Option<TraceParent> {
        if !cx.has_active_span() {
            return None;
        }
        let mut carrier = HashMap::new();
        TraceContextPropagator::new().inject_context(cx, &mut carrier);
        Some(TraceParent { traceparent: carrier.remove("traceparent")?, tracestate: carrier.remove("tracestate") })
    }

    /// The current context's: what a request that starts or continues a
    /// run records with its job, so that the pass continues the caller's
    /// trace. The caller asks only when tracing is on.
    pub fn current() -> Option<TraceParent> {
        TraceParent::of(&Context::current())
    }

    /// The context a job recorded (`"trace"` in its payload).
    pub fn from_job(payload: &serde_json::Value) -> Option<TraceParent> {
        serde_json::from_value(payload.get("trace")?.clone()).ok()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    const PARENT: &str = "00-5f1e2d3c4b5a69788796a5b4c3d2e1f0-1111222233334444-01";

    #[test]
    fn a_well_formed_traceparent_is_kept_and_names_its_span() {
        let parent = TraceParent::from_headers(Some(PARENT), Some(" vendor=kept ")).unwrap();
        assert_eq!(parent.tracestate.as_deref(), Some("vendor=kept"));
        let span = parent.span_context().unwrap();
        assert_eq!(span.trace_id().to_string(), "5f1e2d3c4b5a69788796a5b4c3d2e1f0");
        assert_eq!(span.span_id().to_string(), "1111222233334444");
        assert!(span.is_remote() && span.is_sampled());
        // It travels with a job and comes back the same.
        let payload = serde_json::json!({"run": "r1", "trace": parent});
        assert_eq!(TraceParent::from_job(&payload), Some(parent.clone()));
        assert_eq!(TraceParent::of(&parent.context()), Some(parent));
    }

    #[test]
    fn a_malformed_or_missing_traceparent_is_ignored() {
        for bad in ["", "garbage", "00-00000000000000000000000000000000-1111222233334444-01", "zz-abc"] {
            assert_eq!(TraceParent::from_headers(Some(bad), None), None, "{bad}");
        }
        assert_eq!(TraceParent::from_headers(None, Some("vendor=x")), None);
        assert_eq!(TraceParent::from_job(&serde_json::json!({"run": "r1"})), None);
        assert_eq!(TraceParent::of(&Context::new()), None);
        // Tracing is not installed in unit tests: nothing is handed on.
        assert_eq!(TraceParent::current(), None);
    }
}
