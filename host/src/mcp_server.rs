//! nexo as an MCP server (`nexo mcp serve`): an agent's gated tools, or
//! the agent itself as one `run` tool, offered to any MCP client (Claude
//! Code, Codex, an IDE) over stdio or streamable HTTP.
//!
//! Nothing here decides anything: a served tool call is a model tool call
//! of a run prepared from the operator's grant, so it takes the one
//! host-call path (the gate, the sandbox, the truncation) exactly as the
//! agent's own model would. A client is one more model.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use nexo_model::{BoxFuture, ToolCall, ToolSpec};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, JsonObject, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};

use crate::host_call::{ModelReply, ToolContext};

/// How the agent behind the `run` tool answers one input.
pub type AgentRun = Arc<dyn Fn(String) -> BoxFuture<'static, Result<String, String>> + Send + Sync>;

/// One call a bridged server hands to its owner, with where the answer goes.
#[derive(Debug)]
pub struct Bridged {
    /// The call: a tool's name (without any client prefix) and arguments.
    pub call: ToolCall,
    /// Where the owner sends the reply.
    pub reply: tokio::sync::oneshot::Sender<ModelReply>,
}

/// What a server offers.
#[derive(Clone)]
enum Offer {
    /// A prepared run's tools, as its model would see them.
    Tools(Arc<ToolContext>),
    /// The agent, as one `run` tool.
    Agent { name: String, description: String, run: AgentRun },
    /// Tools whose calls go to the owner of the receiving end, which runs
    /// them on its own (borrowed) run context: a loop backend that drives
    /// another program.
    Bridge { specs: Arc<[ToolSpec]>, calls: tokio::sync::mpsc::Sender<Bridged> },
}

/// An MCP server over one agent.
#[derive(Clone)]
pub struct McpServer {
    offer: Offer,
    calls: Arc<AtomicU32>,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.offer {
            Offer::Tools(tools) => f.debug_struct("McpServer").field("tools", tools).finish(),
            Offer::Agent { name, .. } => f.debug_struct("McpServer").field("agent", name).finish(),
            Offer::Bridge { specs, .. } => f.debug_struct("McpServer").field("bridged_tools", &specs.len()).finish(),
        }
    }
}

/// The name of the tool that runs the agent.
pub const RUN_TOOL: &str = "run";

impl McpServer {
    /// Offers the tools of a prepared run (see
    /// [`crate::world::agent::prepare`]): those its authority offers, under
    /// its gate.
    pub fn tools(tools: Arc<ToolContext>) -> Self {
        McpServer { offer: Offer::Tools(tools), calls: Arc::default() }
    }

    /// Offers the agent itself as one `run` tool taking `{"input": …}`.
    pub fn agent(name: impl Into<String>, description: impl Into<String>, run: AgentRun) -> Self {
        McpServer {
            offer: Offer::Agent { name: name.into(), description: description.into(), run },
            calls: Arc::default(),
        }
    }

    /// Offers `specs`; each call is sent to `calls` and answered by whoever
    /// holds the receiver (see [`Bridged`]). A call the receiver no longer
    /// takes is an error result.
    pub fn bridge(specs: Vec<ToolSpec>, calls: tokio::sync::mpsc::Sender<Bridged>) -> Self {
        McpServer { offer: Offer::Bridge { specs: specs.into(), calls }, calls: Arc::default() }
    }

    /// Serves one client on stdin and stdout until it closes stdin.
    /// Nothing else may write to stdout meanwhile: it is the protocol.
    pub async fn serve_stdio(self) -> Result<(), String> {
        let running =
            self.serve(rmcp::transport::stdio()).await.map_err(|e| format!("the MCP handshake failed: {e}"))?;
        running.waiting().await.map_err(|e| format!("the MCP session ended with an error: {e}"))?;
        Ok(())
    }

    /// Serves streamable HTTP at `/mcp` on `listener` until the process
    /// ends. With `token`, a request must carry `Authorization: Bearer
    /// <token>`, or it is refused with 401.
    pub async fn serve_http(self, listener: tokio::net::TcpListener, token: Option<String>) -> Result<(), String> {
        use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
        use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
        let server = self.clone();
        let service = StreamableHttpService::new(
            move || Ok(server.clone()),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default(),
        );
        let token = token.map(|t| Arc::<str>::from(format!("Bearer {t}")));
        let router = axum::Router::new().nest_service("/mcp", service).layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let token = token.clone();
                async move {
                    let sent = request.headers().get(http::header::AUTHORIZATION).map(|v| v.as_bytes());
                    match &token {
                        // Compared whole; a timing side channel on a loopback
                        // token is not the weak point here.
                        Some(want) if sent != Some(want.as_bytes()) => unauthorized(),
                        _ => next.run(request).await,
                    }
                }
            },
        ));
        axum::serve(listener, router).await.map_err(|e| format!("the MCP HTTP server stopped: {e}"))
    }

    async fn specs(&self) -> Vec<Tool> {
        match &self.offer {
            Offer::Tools(tools) => tools.specs().await.into_iter().map(tool).collect(),
            Offer::Bridge { specs, .. } => specs.iter().cloned().map(tool).collect(),
            Offer::Agent { name, description, .. } => vec![Tool::new(
                RUN_TOOL,
                format!("Runs the nexo agent `{name}` on one input and returns its answer. {description}"),
                schema(json!({
                    "type": "object",
                    "properties": {"input": {"type": "string", "description": "The task for the agent"}},
                    "required": ["input"]
                })),
            )],
        }
    }
}

fn tool(spec: ToolSpec) -> Tool {
    Tool::new(spec.name, spec.description, schema(spec.parameters))
}

fn unauthorized() -> axum::response::Response {
    use axum::response::IntoResponse;
    let challenge = [(http::header::WWW_AUTHENTICATE, "Bearer")];
    (http::StatusCode::UNAUTHORIZED, challenge, "a bearer token is required\n").into_response()
}

fn schema(value: Value) -> Arc<JsonObject> {
    Arc::new(match value {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    })
}

fn result(reply: ModelReply) -> CallToolResult {
    if reply.is_error {
        CallToolResult::error(vec![ContentBlock::text(reply.content)])
    } else {
        CallToolResult::success(vec![ContentBlock::text(reply.content)])
    }
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        let instructions = match &self.offer {
            Offer::Tools(tools) => format!(
                "The tools of the nexo agent `{}`, under its operator's grant (mode {}). A refused call is an \
                 error result that says why.",
                tools.authority().agent(),
                tools.authority().mode().as_str()
            ),
            Offer::Agent { name, .. } => format!("Runs the nexo agent `{name}` with the `{RUN_TOOL}` tool."),
            Offer::Bridge { .. } => "The tools of a nexo run, under its operator's grant. A refused call is an error \
                                     result that says why."
                .to_string(),
        };
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("nexo", env!("CARGO_PKG_VERSION")))
            .with_instructions(instructions)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult { tools: self.specs().await, ..Default::default() })
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let n = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        let result = match &self.offer {
            Offer::Tools(tools) => {
                let call = ToolCall { id: format!("mcp-{n}"), name: request.name.to_string(), arguments };
                result(tools.call_model(n, &call).await)
            }
            Offer::Bridge { calls, .. } => {
                let call = ToolCall { id: format!("mcp-{n}"), name: request.name.to_string(), arguments };
                let (reply, answer) = tokio::sync::oneshot::channel();
                let gone =
                    || CallToolResult::error(vec![ContentBlock::text("error: the run this tool belongs to has ended")]);
                if calls.send(Bridged { call, reply }).await.is_err() {
                    gone()
                } else {
                    answer.await.map(result).unwrap_or_else(|_| gone())
                }
            }
            Offer::Agent { run, .. } => {
                if request.name != RUN_TOOL {
                    return Err(ErrorData::invalid_params(
                        format!("there is no tool `{}`; the one tool is `{RUN_TOOL}`", request.name),
                        None,
                    ));
                }
                let Some(input) = arguments.get("input").and_then(Value::as_str) else {
                    return Err(ErrorData::invalid_params("`run` needs a string argument `input`", None));
                };
                match run(input.to_string()).await {
                    Ok(answer) => CallToolResult::success(vec![ContentBlock::text(answer)]),
                    Err(e) => CallToolResult::error(vec![ContentBlock::text(format!("error: {e}"))]),
                }
            }
        };
        Ok(result.into())
    }
}
