//! W3C trace context on the requests nexo makes on its own behalf (to a
//! model provider, to an MCP server): the current span's, through the
//! propagator telemetry installs. With tracing off the global propagator
//! is the no-op one, so nothing is added.

use opentelemetry::propagation::Injector;

/// The trace-context headers ([`Policy::trace_context`] lets callers send
/// them).
///
/// [`Policy::trace_context`]: crate::Policy::trace_context
pub const TRACE_HEADERS: &[&str] = &["traceparent", "tracestate"];

/// The current span's `traceparent` (and `tracestate`), when tracing is on.
pub fn trace_headers() -> Vec<(String, String)> {
    let mut carrier = Carrier(Vec::new());
    opentelemetry::global::get_text_map_propagator(|propagator| propagator.inject(&mut carrier));
    carrier.0
}

struct Carrier(Vec<(String, String)>);

impl Injector for Carrier {
    fn set(&mut self, key: &str, value: String) {
        self.0.push((key.to_string(), value));
    }
}
