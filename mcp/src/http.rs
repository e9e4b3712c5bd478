//! rmcp's streamable-HTTP client over nexo's guarded egress client.
