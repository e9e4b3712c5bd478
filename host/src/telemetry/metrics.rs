//! The GenAI client metrics and nexo's own, exported over OTLP and served
//! for Prometheus.
