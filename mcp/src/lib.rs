//! nexo's MCP client: the live connections to the `[mcp.NAME]` servers of a
//! run or session.
//!
//! - **stdio** servers are started with only their configured environment
//!   (plus `PATH`), their own process group, stderr drained into a capped
//!   tail, and none of the host's descriptors; through the orphan guard
//!   ([`guard_main`]) they and everything they start die with the host, even
//!   when it is SIGKILLed. With `confine = true` they run under the local
//!   shell's confinement (bubblewrap, else Landlock): of the host filesystem
//!   only the system view ([`Clients::with_view`]) and the server's own
//!   program readable, only `cwd` writable, no network unless `network = true`
//!   (the host's) or `net-hosts` (those hosts only, through the gateway the
//!   host gives: [`ServerNetwork`]).
//! - **streamable HTTP** servers are reached through
//!   [`nexo_egress::GuardedClient`] only: the address guard (loopback and
//!   private hosts need `allow-private`), the configured origin alone, and the
//!   bearer token injected as a secret header, scrubbed from answers and never
//!   shown.
//!
//! [`Clients`] connects lazily at first use of a server, reuses the
//! connection, reconnects after a crash or [`Clients::close`], and renders
//! results as text for the model ([`CallResult`]).

mod client;
mod config;
mod content;
mod error;
mod guard;
mod http;
mod name;
mod network;
mod stdio;
mod token;

pub use client::{ClientOptions, Clients, ToolInfo};
pub use config::{ConfigError, DEFAULT_CALL_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, Server, ServerConfig, is_server_name};
pub use content::CallResult;
pub use error::McpError;
pub use guard::{GUARD_SUBCOMMAND, guard_main};
pub use name::{MAX_TOOL_NAME, model_tool_name};
pub use network::ServerNetwork;
/// The confinement mechanisms, for [`Clients::with_confinement`].
pub use nexo_sandbox::Confinement;
