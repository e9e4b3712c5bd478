//! nexo's MCP test server.
fn main() {}
