//! Which headers callers and policies may set: the client controls some,
//! others carry credentials or could read an echoed key past the scrubber.

/// Headers the client sets itself or that carry credentials; callers cannot
/// send them. `proxy-*` and `x-forwarded-*` are matched by prefix.
pub(crate) const CLIENT_CONTROLLED: &[&str] = &[
    "host",
    "user-agent",
    "cookie",
    "authorization",
    "proxy-authorization",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "upgrade",
    "content-length",
    "forwarded",
    "expect",
];

/// Controlled headers an operator may still inject as secrets.
pub(crate) const CREDENTIALS: &[&str] = &["authorization", "cookie"];

/// Headers a policy may not set either: the client sets the body's type, and
/// the others could read an echoed key compressed or in pieces.
pub(crate) const POLICY_REFUSED: &[&str] =
    &["accept-encoding", "content-type", "content-encoding", "range", "if-range"];

/// Standard headers a caller may send. Everything else standard is dropped:
/// `Range` or `Accept-Encoding` could let a component read an echoed key in
/// pieces or compressed, past the scrubber.
const CALLER_STANDARD: &[&str] = &["accept", "accept-language", "cache-control", "if-none-match", "if-modified-since"];

/// `x-` headers a caller may not send: method overrides (GET only means GET
/// only) and client-address or URL-rewrite headers some servers trust.
const CALLER_X_REFUSED: &[&str] = &[
    "x-http-method",
    "x-http-method-override",
    "x-method-override",
    "x-original-url",
    "x-rewrite-url",
    "x-real-ip",
    "x-client-ip",
    "x-original-host",
    "x-host",
];

/// The MCP streamable-HTTP headers [`Policy::mcp_headers`] lets callers
/// send; `mcp-param-` is a prefix (`Mcp-Param-<name>`).
///
/// [`Policy::mcp_headers`]: crate::Policy::mcp_headers
pub const MCP_HEADERS: &[&str] =
    &["mcp-session-id", "mcp-protocol-version", "last-event-id", "mcp-method", "mcp-name", "mcp-param-"];

pub(crate) fn is_mcp_header(lower: &str) -> bool {
    MCP_HEADERS
        .iter()
        .any(|h| if h.ends_with('-') { lower.starts_with(h) && lower.len() > h.len() } else { lower == *h })
}

pub(crate) fn caller_may_send(lower: &str) -> bool {
    if CALLER_STANDARD.contains(&lower) {
        return true;
    }
    lower.starts_with("x-")
        && !lower.starts_with("x-forwarded-")
        && !CALLER_X_REFUSED.contains(&lower)
        && !CLIENT_CONTROLLED.contains(&lower)
}
