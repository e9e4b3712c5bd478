//! The names of nexo's own span attributes, and the conventions' version
//! the spans follow: beneath both the spans and the tracer's labels.

/// The version of the OpenTelemetry semantic conventions the spans follow.
pub const SEMCONV_VERSION: &str = "1.42.0";

/// `nexo.tenant`: the tenant that owns the run (`nexo serve` only).
pub const NEXO_TENANT: &str = "nexo.tenant";
/// `nexo.run.id`: the run.
pub const NEXO_RUN_ID: &str = "nexo.run.id";
/// `nexo.component.digest`: the SHA-256 of the component (or agent file).
pub const NEXO_COMPONENT_DIGEST: &str = "nexo.component.digest";
/// `nexo.tool.verdict`: the gate's and the handler's verdict on a tool
/// call: `allowed`, or the refusal or error's kind.
pub const NEXO_TOOL_VERDICT: &str = "nexo.tool.verdict";
/// `nexo.mcp.server`: the configured name of the MCP server called.
pub const NEXO_MCP_SERVER: &str = "nexo.mcp.server";
/// `nexo.approval.decision`: `approved` or `denied`.
pub const NEXO_APPROVAL_DECISION: &str = "nexo.approval.decision";
/// `nexo.replayed`: the call was answered from the run's journal, not run.
pub const NEXO_REPLAYED: &str = "nexo.replayed";
