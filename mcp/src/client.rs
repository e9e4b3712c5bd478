//! [`Clients`]: the live connections of one run or session.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::config::Server;

/// Why an MCP operation failed. Messages name the server, the cause and the
/// fix; none carries a token.
#[derive(Debug, Clone, thiserror::Error)]
pub enum McpError {
    /// No `[mcp.NAME]` server of that name.
    #[error("no MCP server named `{server}` is configured (configured: {known}); add an [mcp.{server}] table")]
    UnknownServer {
        /// The name asked for.
        server: String,
        /// The configured names.
        known: String,
    },
    /// The server's program could not be started.
    #[error("MCP server `{server}` could not be started: {message}")]
    Spawn {
        /// The server.
        server: String,
        /// The cause and fix.
        message: String,
    },
    /// The connection or MCP handshake failed or timed out.
    #[error("MCP server `{server}` did not connect: {message}{}", tail(.stderr))]
    Connect {
        /// The server.
        server: String,
        /// The cause and fix.
        message: String,
        /// The last lines the server wrote to stderr (stdio servers).
        stderr: String,
    },
    /// The token source failed (the message names the source, never a value).
    #[error("MCP server `{server}`: {message}")]
    Token {
        /// The server.
        server: String,
        /// Which source failed, and how to fix it.
        message: String,
    },
    /// A tool call did not finish within the server's time limit; the
    /// connection stays usable.
    #[error(
        "MCP server `{server}` did not answer the call of `{tool}` within {}s; the call was cancelled. Retry with \
         less work, or raise `timeout` in [mcp.{server}]",
        .limit.as_secs()
    )]
    Timeout {
        /// The server.
        server: String,
        /// The tool.
        tool: String,
        /// The limit.
        limit: Duration,
    },
    /// The server exited or the connection broke mid-call; the next call
    /// reconnects.
    #[error("MCP server `{server}` closed the connection ({message}); the next call starts it again{}", tail(.stderr))]
    Closed {
        /// The server.
        server: String,
        /// What was seen.
        message: String,
        /// The last lines the server wrote to stderr (stdio servers).
        stderr: String,
    },
    /// The server answered with an MCP error (an unknown tool, bad arguments).
    #[error("MCP server `{server}` returned an error: {message}")]
    Server {
        /// The server.
        server: String,
        /// The server's message.
        message: String,
    },
    /// The guarded egress client refused the request.
    #[error("MCP server `{server}` cannot be reached: {message}")]
    Egress {
        /// The server.
        server: String,
        /// The refusal and its fix.
        message: String,
    },
}

fn tail(stderr: &str) -> String {
    if stderr.trim().is_empty() { String::new() } else { format!("; its stderr ended with:\n{}", stderr.trim_end()) }
}

/// One tool as the model sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolInfo {
    /// The tool's own name (not the model-facing one: see [`crate::model_tool_name`]).
    pub name: String,
    /// Its description, or empty.
    pub description: String,
    /// Its JSON schema, normalized: an object with `"type": "object"` and
    /// `"properties"`, without `"$schema"`.
    pub input_schema: serde_json::Value,
}

/// A tool call's result as text for the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallResult {
    /// Every content block rendered: text as is, images, audio and resources
    /// summarized (`[image image/png, 5380 base64 bytes]`), structured content
    /// as JSON when there is no text. Not truncated.
    pub text: String,
    /// The server marked the result as a tool error.
    pub is_error: bool,
}

/// How [`Clients`] starts and reaches servers.
#[derive(Debug, Clone, Default)]
pub struct ClientOptions {
    /// Where stdio children are started through the orphan guard: `Some(exe)`
    /// runs `exe __mcp-guard <our pid> -- <command> <args…>` (the host passes
    /// its own `current_exe()`); `None` spawns the command directly in its
    /// own process group (library tests, embedders).
    pub guard: Option<PathBuf>,
    /// Egress for http servers: the test seam. `None` builds a
    /// `nexo_egress::GuardedClient` per server (exempting the configured host
    /// when `allow-private`). Tests may pass a builder-made client.
    pub http_client: Option<nexo_egress::GuardedClient>,
}

/// The live clients of one run or session: connects lazily, at first use of
/// a server; reuses the connection across calls; `Clone` is cheap.
#[derive(Clone)]
pub struct Clients {
    inner: Arc<Inner>,
}

struct Inner {
    servers: Vec<Server>,
    options: ClientOptions,
}

impl std::fmt::Debug for Clients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clients").field("servers", &self.inner.servers).finish_non_exhaustive()
    }
}

impl Clients {
    /// Clients for `servers`; nothing is started until first use.
    pub fn new(servers: Vec<Server>, options: ClientOptions) -> Clients {
        Clients { inner: Arc::new(Inner { servers, options }) }
    }

    /// The configured servers, in the order given.
    pub fn servers(&self) -> impl Iterator<Item = &Server> {
        self.inner.servers.iter()
    }

    /// The server's tools (connecting first if needed; cached for the
    /// connection's life).
    pub async fn list_tools(&self, server: &str) -> Result<Vec<ToolInfo>, McpError> {
        let _ = (server, &self.inner.options);
        todo!()
    }

    /// Calls one tool, under the server's call time limit.
    pub async fn call_tool(
        &self,
        server: &str,
        tool: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
    ) -> Result<CallResult, McpError> {
        let _ = (server, tool, arguments);
        todo!()
    }

    /// Closes every connection, concurrently, within a bounded total time;
    /// idempotent; a later call reconnects (lazily), which is how a rotated
    /// token takes effect.
    pub async fn close(&self) {
        todo!()
    }
}
