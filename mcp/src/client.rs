//! [`Clients`]: the live connections of one run or session.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use nexo_sandbox::{Confinement, SystemView};
use rmcp::model::{CallToolRequestParams, RequestParamsMeta};
use rmcp::service::{ClientInitializeError, Peer, RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};

use crate::config::{Server, Transport};
use crate::content::{CallResult, normalize_schema, render};
use crate::error::{McpError, egress_error};
use crate::http::{EgressHttp, egress_client, policy};
use crate::network::ServerNetwork;
use crate::stdio::{ServerProcess, StderrTail, start};

/// One tool as the model sees it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ToolInfo {
    /// The tool's own name (not the model-facing one: see [`crate::model_tool_name`]).
    pub name: String,
    /// Its description, or empty.
    pub description: String,
    /// Its JSON schema, normalized: an object with `"type": "object"` and
    /// `"properties"`, without `"$schema"`.
    pub input_schema: serde_json::Value,
}

/// How [`Clients`] starts and reaches servers.
#[derive(Debug, Clone, Default)]
pub struct ClientOptions {
    /// Where stdio children are started through the orphan guard: `Some(exe)`
    /// runs `exe __mcp-guard <our pid> -- <command> <args…>` (the host passes
    /// its own `current_exe()`); `None` spawns the command directly in its
    /// own process group (library tests, embedders): then what a server
    /// detaches from its group (`setsid`) is not ended with it.
    pub guard: Option<PathBuf>,
    /// Egress for http servers: the test seam. `None` builds a
    /// `nexo_egress::GuardedClient` per server (exempting the configured host
    /// when `allow-private`). Tests may pass a builder-made client.
    pub http_client: Option<nexo_egress::GuardedClient>,
}

/// How long [`Clients::close`] waits for rmcp to close a connection (for a
/// stdio server: its stdin), and then for the server to exit by itself.
const CLOSE_GRACE: Duration = Duration::from_secs(1);
/// How long [`Clients::close`] takes at most, for all servers together.
const CLOSE_LIMIT: Duration = Duration::from_secs(8);
/// How long to let a dead server's last stderr lines arrive before showing them.
const STDERR_SETTLE: Duration = Duration::from_millis(100);

/// The live clients of one run or session: connects lazily, at first use of
/// a server; reuses the connection across calls; `Clone` is cheap (the
/// connections are shared).
#[derive(Clone)]
pub struct Clients {
    inner: Arc<Inner>,
}

struct Inner {
    servers: Vec<Server>,
    slots: Vec<tokio::sync::Mutex<Option<Arc<Conn>>>>,
    options: ClientOptions,
    /// The mechanism for `confine = true` servers.
    confinement: Confinement,
    /// What `confine = true` servers may read of the host.
    view: SystemView,
    /// What serves the network of servers with `net-hosts`.
    network: OnceLock<Arc<dyn ServerNetwork>>,
    next_id: AtomicU64,
}

/// One live connection.
struct Conn {
    id: u64,
    peer: Peer<RoleClient>,
    tools: Vec<ToolInfo>,
    stderr: Option<StderrTail>,
    http: Option<EgressHttp>,
    /// Taken by whoever ends the connection.
    parts: Mutex<Option<Parts>>,
}

struct Parts {
    service: RunningService<RoleClient, ()>,
    process: Option<ServerProcess>,
}

impl Conn {
    fn take(&self) -> Option<Parts> {
        self.parts.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    async fn stderr_tail(&self) -> String {
        match &self.stderr {
            Some(tail) => {
                tokio::time::sleep(STDERR_SETTLE).await;
                tail.text()
            }
            None => String::new(),
        }
    }
}

impl Parts {
    /// Closes the connection; a stdio server gets `grace` to exit on its
    /// stdin's end, then it is ended with everything it started.
    async fn close(mut self, grace: Duration) {
        let _ = self.service.close_with_timeout(grace).await;
        if let Some(process) = self.process.take() {
            process.shutdown(grace).await;
        }
    }
}

impl std::fmt::Debug for Clients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clients").field("servers", &self.inner.servers).finish_non_exhaustive()
    }
}

impl Clients {
    /// Clients for `servers`; nothing is started until first use.
    pub fn new(servers: Vec<Server>, options: ClientOptions) -> Clients {
        let slots = servers.iter().map(|_| tokio::sync::Mutex::new(None)).collect();
        Clients {
            inner: Arc::new(Inner {
                servers,
                slots,
                options,
                confinement: Confinement::Auto,
                view: SystemView::default(),
                network: OnceLock::new(),
                next_id: AtomicU64::new(1),
            }),
        }
    }

    /// The same servers, fresh connections, with another mechanism and view.
    fn rebuilt(&self, confinement: Confinement, view: SystemView) -> Clients {
        let inner = &self.inner;
        let slots = inner.servers.iter().map(|_| tokio::sync::Mutex::new(None)).collect();
        Clients {
            inner: Arc::new(Inner {
                servers: inner.servers.clone(),
                slots,
                options: inner.options.clone(),
                confinement,
                view,
                network: inner.network.clone(),
                next_id: AtomicU64::new(1),
            }),
        }
    }

    /// Lets `confine = true` servers read `view` of the host (besides
    /// their `cwd` and their own program) rather than the default
    /// [`SystemView`]. Call it before first use, as
    /// [`Clients::with_confinement`].
    pub fn with_view(self, view: SystemView) -> Clients {
        self.rebuilt(self.inner.confinement, view)
    }

    /// Runs `confine = true` servers under `confinement` rather than
    /// [`Confinement::Auto`] (bubblewrap if it works, else Landlock), e.g. to
    /// match the operator's choice for the local shell.
    /// [`Confinement::Unconfined`] disables OS confinement for them. Call it
    /// before first use: clones made earlier keep their own connections.
    pub fn with_confinement(self, confinement: Confinement) -> Clients {
        self.rebuilt(confinement, self.inner.view.clone())
    }

    /// Gives confined servers with `net-hosts` their network: each one's
    /// gateway comes from `network` when it starts. Once only: the first
    /// call wins (clients a session shares keep the first run's), and says
    /// so by returning `true`. Without it, such a server refuses to start.
    pub fn with_network(&self, network: Arc<dyn ServerNetwork>) -> bool {
        self.inner.network.set(network).is_ok()
    }

    /// Whether a configured server has `net-hosts`, so needs
    /// [`Clients::with_network`].
    pub fn needs_network(&self) -> bool {
        self.inner.servers.iter().any(Server::has_net_hosts)
    }

    /// The configured servers, in the order given.
    pub fn servers(&self) -> impl Iterator<Item = &Server> {
        self.inner.servers.iter()
    }

    fn index(&self, server: &str) -> Result<usize, McpError> {
        self.inner.servers.iter().position(|s| s.name == server).ok_or_else(|| McpError::UnknownServer {
            server: server.to_string(),
            known: if self.inner.servers.is_empty() {
                "none".into()
            } else {
                self.inner.servers.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ")
            },
        })
    }

    /// The server's live connection, connecting first if there is none.
    async fn connection(&self, index: usize) -> Result<Arc<Conn>, McpError> {
        let mut slot = self.inner.slots[index].lock().await;
        if let Some(conn) = &*slot {
            return Ok(Arc::clone(conn));
        }
        let conn = Arc::new(self.connect(&self.inner.servers[index]).await?);
        *slot = Some(Arc::clone(&conn));
        Ok(conn)
    }

    /// Forgets connection `id` of server `index` (if it is still the live
    /// one) and ends it in the background.
    async fn drop_connection(&self, index: usize, conn: &Conn) {
        let mut slot = self.inner.slots[index].lock().await;
        if slot.as_ref().is_some_and(|c| c.id == conn.id) {
            *slot = None;
        }
        drop(slot);
        if let Some(parts) = conn.take() {
            tokio::spawn(parts.close(Duration::ZERO));
        }
    }

    async fn connect(&self, server: &Server) -> Result<Conn, McpError> {
        let name = server.name.as_str();
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let limit = server.connect_timeout;
        let timed_out = |what: &str| {
            format!(
                "{what} within {}s; check that the server speaks MCP {}, or raise `connect-timeout` in [mcp.{name}]",
                limit.as_secs(),
                if server.is_stdio() { "on stdin/stdout" } else { "(streamable HTTP) at `url`" }
            )
        };
        match &server.transport {
            Transport::Stdio(spec) => {
                // Spawned here, on a runtime thread, never in spawn_blocking.
                let guard = self.inner.options.guard.as_deref();
                let network = self.inner.network.get().map(|n| n.as_ref());
                let started = start(name, spec, guard, self.inner.confinement, &self.inner.view, network)?;
                let stderr = started.stderr.clone();
                let mut process = started.process;
                // A server with `net-hosts` is connected only once its network is served.
                let network = tokio::time::timeout(limit, process.network_ready()).await;
                if let Err(why) = network.unwrap_or_else(|_| Err(timed_out("its network was not set up"))) {
                    tokio::time::sleep(STDERR_SETTLE).await;
                    let message = format!(
                        "its network through nexo's egress proxy could not be set up: {why}{}",
                        process.exit_status().map(|s| format!(" (it exited, {s})")).unwrap_or_default()
                    );
                    return Err(McpError::Connect { server: name.to_string(), message, stderr: stderr.text() });
                }
                let handshake = async {
                    let service = ().serve((started.stdout, started.stdin)).await.map_err(|e| init_error(&e))?;
                    let tools = service.list_all_tools().await.map_err(|e| format!("listing its tools failed: {e}"))?;
                    Ok::<_, String>((service, tools))
                };
                let failed = |message: String, process: &mut ServerProcess| {
                    let status = process.exit_status();
                    match status {
                        Some(status) => format!("it exited ({status}) during the MCP handshake: {message}"),
                        None => message,
                    }
                };
                match tokio::time::timeout(limit, handshake).await {
                    Ok(Ok((service, tools))) => Ok(Conn {
                        id,
                        peer: service.peer().clone(),
                        tools: tools.iter().map(tool_info).collect(),
                        stderr: Some(stderr),
                        http: None,
                        parts: Mutex::new(Some(Parts { service, process: Some(process) })),
                    }),
                    Ok(Err(message)) => {
                        tokio::time::sleep(STDERR_SETTLE).await;
                        let message = failed(message, &mut process);
                        Err(McpError::Connect { server: name.to_string(), message, stderr: stderr.text() })
                    }
                    Err(_) => {
                        let message = failed(timed_out("it did not finish the MCP handshake"), &mut process);
                        Err(McpError::Connect { server: name.to_string(), message, stderr: stderr.text() })
                    }
                }
            }
            Transport::Http(spec) => {
                let token = crate::token::resolve(name, &spec.token).await?;
                let policy = policy(name, spec, token)?;
                let client = egress_client(name, spec, self.inner.options.http_client.as_ref())?;
                let http = EgressHttp::new(client, policy);
                let transport = StreamableHttpClientTransport::with_client(
                    http.clone(),
                    StreamableHttpClientTransportConfig::with_uri(spec.url.as_str()),
                );
                let handshake = async {
                    let service = ().serve(transport).await.map_err(|e| init_error(&e))?;
                    let tools = service.list_all_tools().await.map_err(|e| format!("listing its tools failed: {e}"))?;
                    Ok::<_, String>((service, tools))
                };
                match tokio::time::timeout(limit, handshake).await {
                    Ok(Ok((service, tools))) => Ok(Conn {
                        id,
                        peer: service.peer().clone(),
                        tools: tools.iter().map(tool_info).collect(),
                        stderr: None,
                        http: Some(http),
                        parts: Mutex::new(Some(Parts { service, process: None })),
                    }),
                    Ok(Err(message)) => Err(match http.refusal() {
                        Some(refusal) => egress_error(name, &refusal),
                        None => McpError::Connect { server: name.to_string(), message, stderr: String::new() },
                    }),
                    Err(_) => Err(match http.refusal() {
                        Some(refusal) => egress_error(name, &refusal),
                        None => McpError::Connect {
                            server: name.to_string(),
                            message: timed_out("it did not finish the MCP handshake"),
                            stderr: String::new(),
                        },
                    }),
                }
            }
        }
    }

    /// The server's tools (connecting first if needed; cached for the
    /// connection's life).
    pub async fn list_tools(&self, server: &str) -> Result<Vec<ToolInfo>, McpError> {
        let index = self.index(server)?;
        Ok(self.connection(index).await?.tools.clone())
    }

    /// Calls one tool, under the server's call time limit. A timed-out call
    /// is cancelled and the connection kept; a broken connection is dropped,
    /// so the next call reconnects.
    pub async fn call_tool(
        &self,
        server: &str,
        tool: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
    ) -> Result<CallResult, McpError> {
        let index = self.index(server)?;
        let conn = self.connection(index).await?;
        let limit = self.inner.servers[index].call_timeout;
        let mut params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        // The caller's span goes on at the server, when tracing is on (SEP-414).
        for (name, value) in nexo_egress::trace_headers() {
            match name.as_str() {
                "traceparent" => params.set_traceparent(&value),
                "tracestate" => params.set_tracestate(&value),
                _ => {}
            }
        }
        let error = match tokio::time::timeout(limit, conn.peer.call_tool(params)).await {
            Ok(Ok(result)) => return Ok(render(&result)),
            // Dropping the request future sent `notifications/cancelled`.
            Err(_) => return Err(McpError::Timeout { server: server.to_string(), tool: tool.to_string(), limit }),
            Ok(Err(e)) => e,
        };
        let name = server.to_string();
        match error {
            ServiceError::McpError(data) => {
                Err(McpError::Server { server: name, message: format!("{} (code {})", data.message, data.code.0) })
            }
            ServiceError::Timeout { .. } => Err(McpError::Timeout { server: name, tool: tool.to_string(), limit }),
            // `is_closed()` stays false after a crash: the error says it.
            ServiceError::TransportClosed | ServiceError::TransportSend(_) | ServiceError::Cancelled { .. } => {
                let refusal = conn.http.as_ref().and_then(EgressHttp::refusal);
                let stderr = conn.stderr_tail().await;
                self.drop_connection(index, &conn).await;
                if let Some(refusal) = refusal {
                    return Err(egress_error(server, &refusal));
                }
                let message = match &error {
                    ServiceError::TransportSend(e) => format!("sending the call failed: {}", e.error),
                    ServiceError::Cancelled { .. } => "the connection was closed".to_string(),
                    _ if conn.stderr.is_some() => "the server exited or closed its stdout".to_string(),
                    _ => "the server ended the session".to_string(),
                };
                Err(McpError::Closed { server: name, message, stderr })
            }
            other => Err(McpError::Server { server: name, message: other.to_string() }),
        }
    }

    /// Closes every connection, concurrently, within a bounded total time;
    /// idempotent; a later call reconnects (lazily), which is how a rotated
    /// token takes effect. Stdio servers get a moment to exit on their
    /// stdin's end, then they and everything they started are killed.
    pub async fn close(&self) {
        let mut closing = Vec::new();
        for slot in &self.inner.slots {
            if let Some(conn) = slot.lock().await.take()
                && let Some(parts) = conn.take()
            {
                closing.push(parts.close(CLOSE_GRACE));
            }
        }
        // Past the limit the remaining futures are dropped, which kills their servers.
        let _ = tokio::time::timeout(CLOSE_LIMIT, futures::future::join_all(closing)).await;
    }
}

/// rmcp's handshake error, without the transport's type name.
fn init_error(error: &ClientInitializeError) -> String {
    match error {
        ClientInitializeError::TransportError { error, context } => format!("{} (when {context})", error.error),
        other => other.to_string(),
    }
}

fn tool_info(tool: &rmcp::model::Tool) -> ToolInfo {
    ToolInfo {
        name: tool.name.to_string(),
        description: tool.description.as_deref().unwrap_or_default().to_string(),
        input_schema: normalize_schema(&tool.input_schema),
    }
}
