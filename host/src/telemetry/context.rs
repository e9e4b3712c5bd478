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
    ///
    /// What is kept is strict and bounded, since a tenant sends it and it
    /// goes on to the operator's model providers and MCP servers: a
    /// `traceparent` of the W3C form (2, 32, 16 and 2 lowercase hex
    /// digits, more fields only past version 00), and a `tracestate` of
    /// at most [`MAX_TRACESTATE`] bytes, cut as W3C says (members over 128
    /// characters first, then from the end).
    pub fn from_headers(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<TraceParent> {
        let traceparent = traceparent?.trim();
        if !well_formed(traceparent) {
            return None;
        }
        let given = TraceParent {
            traceparent: traceparent.to_string(),
            tracestate: tracestate.map(|s| s.trim().to_string()).filter(|s| !s.is_empty()),
        };
        let span = given.span_context()?;
        Some(TraceParent { traceparent: given.traceparent, tracestate: bounded_state(&span.trace_state().header()) })
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

/// The most bytes of `tracestate` kept (W3C's limit for propagation).
pub const MAX_TRACESTATE: usize = 512;

/// Whether `text` is a W3C `traceparent`: `version-traceid-parentid-flags`
/// in lowercase hex of exactly 2, 32, 16 and 2 digits, version `ff`
/// never, further fields only after a version other than `00`.
fn well_formed(text: &str) -> bool {
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let fields: Vec<&str> = text.split('-').collect();
    match fields.as_slice() {
        [version, trace, parent, flags, rest @ ..] => {
            hex(version, 2)
                && *version != "ff"
                && hex(trace, 32)
                && hex(parent, 16)
                && hex(flags, 2)
                && (rest.is_empty() || *version != "00")
        }
        _ => false,
    }
}

/// A `tracestate` header (already validated, so `key=value` members
/// joined by `,`) within [`MAX_TRACESTATE`] bytes: members longer than 128
/// characters go first, then members from the end; `None` when nothing is
/// left.
fn bounded_state(header: &str) -> Option<String> {
    let mut members: Vec<&str> = header.split(',').filter(|m| !m.is_empty()).collect();
    let size = |members: &[&str]| members.iter().map(|m| m.len() + 1).sum::<usize>().saturating_sub(1);
    while size(&members) > MAX_TRACESTATE {
        match members.iter().rposition(|m| m.len() > 128) {
            Some(long) => members.remove(long),
            None => members.pop().unwrap_or_default(),
        };
    }
    (!members.is_empty()).then(|| members.join(","))
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

    /// What a tenant sends goes on to the operator's providers: a
    /// `traceparent` not of the W3C form is refused outright (the
    /// OpenTelemetry parser takes short or signed hex), and `tracestate`
    /// is cut to 512 bytes, its long members first.
    #[test]
    fn a_tenants_trace_context_is_kept_strict_and_bounded() {
        for bad in [
            "00-1-1-01",
            "00-+f1e2d3c4b5a69788796a5b4c3d2e1f0-1111222233334444-01",
            "00-5f1e2d3c4b5a69788796a5b4c3d2e1f0-1111222233334444-01-extra",
            "ff-5f1e2d3c4b5a69788796a5b4c3d2e1f0-1111222233334444-01",
            "00-5F1E2D3C4B5A69788796A5B4C3D2E1F0-1111222233334444-01",
            "00-5f1e2d3c4b5a69788796a5b4c3d2e1f0-1111222233334444-1",
        ] {
            assert_eq!(TraceParent::from_headers(Some(bad), None), None, "{bad}");
        }
        // A later version may carry more fields.
        let later = "01-5f1e2d3c4b5a69788796a5b4c3d2e1f0-1111222233334444-01-more";
        assert!(TraceParent::from_headers(Some(later), None).is_some());
        // 32 members of 248 bytes each: the first two fit.
        let long: Vec<String> = (0..32).map(|i| format!("k{i}={}", "v".repeat(245))).collect();
        let parent = TraceParent::from_headers(Some(PARENT), Some(&long.join(","))).unwrap();
        assert_eq!(parent.tracestate, Some(long[..2].join(",")));
        // Long members go before short ones.
        let mixed = format!("a=1,{},b=2", long[..3].join(","));
        let parent = TraceParent::from_headers(Some(PARENT), Some(&mixed)).unwrap();
        assert_eq!(parent.tracestate, Some(format!("a=1,{},b=2", long[..2].join(","))));
        let short: Vec<String> = (0..32).map(|i| format!("key{i:02}={}", "v".repeat(20))).collect();
        let parent = TraceParent::from_headers(Some(PARENT), Some(&short.join(","))).unwrap();
        let kept = parent.tracestate.clone().unwrap();
        assert!(kept.len() <= MAX_TRACESTATE && kept.starts_with("key00="), "{kept}");
        assert!(!kept.contains("key31="), "the last members go: {kept}");
        // What is kept is what the propagator hands on.
        assert_eq!(parent.span_context().unwrap().trace_state().header(), kept);
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
