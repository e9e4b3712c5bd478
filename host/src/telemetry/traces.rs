//! Spans for runs, passes, model calls, tool calls, MCP calls and approval
//! waits, with the GenAI semantic conventions; W3C trace context in and out.
