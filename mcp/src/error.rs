//! [`McpError`]: why an MCP operation failed.

use std::time::Duration;

use nexo_egress::EgressError;

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

/// A refusal of the guarded client, with the fix for an MCP server.
pub(crate) fn egress_error(server: &str, refusal: &EgressError) -> McpError {
    let fix = match refusal {
        EgressError::NonPublicAddress { .. } => format!(
            "; if this server runs on your own machine or network, set `allow-private = true` in [mcp.{server}]"
        ),
        EgressError::OriginNotAllowed { .. } | EgressError::HostNotAllowed { .. } => {
            format!("; the server redirected away from its `url`: give its final URL in [mcp.{server}]")
        }
        _ => String::new(),
    };
    McpError::Egress { server: server.to_string(), message: format!("{refusal}{fix}") }
}
