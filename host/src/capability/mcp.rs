//! The MCP unit: tools of the MCP servers the operator configured, for the
//! model (`mcp__<server>__<tool>`) and for components (the `mcp` WIT
//! interface). An agent reaches the servers its manifest's `mcp-servers`
//! lists *and* the operator configured; each call passes the MCP gate (see
//! [`crate::authority::Gate::Mcp`]) and the journal, like every host call.
//!
//! The live connections are a [`nexo_mcp::Clients`], which the operator
//! hands to the run ([`Providers::mcp`](crate::settings::Providers::mcp)):
//! it connects to a server at its first use and keeps the connection for
//! the runs and prompts that share it, until [`nexo_mcp::Clients::close`].
//! Listing a server's tools is itself a journaled call, so a replayed run
//! sees the tools it saw, and a run that replays only never starts a server.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use nexo_mcp::{CallResult, Clients, McpError, ToolInfo, model_tool_name};
use nexo_model::{BoxFuture, ToolCall, ToolSpec};
use serde_json::{Map, Value, json};
use wasmtime::component::Linker;

use super::network::McpNetwork;
use crate::authority::Gate;
use crate::bindings::agent::nexo::plugin::mcp as wit;
use crate::error::{ConfigError, RunError, ToolError};
use crate::grant::Grant;
use crate::host_call::{DynTool, HostCall, MaybeTool, ModelReply, ToolContext};
use crate::manifest::interface::MCP;
use crate::settings::RunOptions;
use crate::telemetry::spans;
use crate::truncate::{cut_note, head_bytes};
use crate::unit::{AgentHost, Setup, Step, Unit};

/// The most bytes of one MCP result a model or component reads.
pub const MCP_MAX_OUTPUT: usize = 64 * 1024;

/// The longest tool description kept, in characters: a server's
/// descriptions go into every model request.
pub const MCP_MAX_DESCRIPTION: usize = 2_000;

/// The MCP unit.
#[derive(Debug, Default, Clone, Copy)]
pub struct McpUnit;

/// The unit's per-instance state: the clients, and the model-facing names
/// of the tools listed so far.
struct McpState {
    clients: Option<Clients>,
    names: Mutex<BTreeMap<String, (String, String)>>,
}

impl McpState {
    fn clients(&self) -> Result<&Clients, ToolError> {
        self.clients.as_ref().ok_or_else(|| ToolError::Failed("no MCP servers are configured for this run".into()))
    }

    fn names(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, (String, String)>> {
        self.names.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Unit for McpUnit {
    fn name(&self) -> &'static str {
        "mcp"
    }

    fn link(&self, linker: &mut Linker<AgentHost>) -> wasmtime::Result<()> {
        let mut mcp = linker.instance(MCP)?;
        mcp.func_wrap_async("list-tools", |store, (server,): (String,)| {
            let cx = store.data().world.tools.clone();
            Box::new(async move {
                let tools = cx.guest_call(&ListTools, server).await?.map(|tools| {
                    tools
                        .into_iter()
                        .map(|t| wit::McpTool {
                            name: t.name,
                            description: t.description,
                            input_schema: t.input_schema.to_string(),
                        })
                        .collect::<Vec<_>>()
                });
                Ok((tools,))
            })
        })?;
        mcp.func_wrap_async("call-tool", |store, (server, tool, arguments): (String, String, String)| {
            let cx = store.data().world.tools.clone();
            Box::new(async move {
                let parsed = parse_arguments(&tool, &arguments);
                let out = match parsed {
                    Ok(args) => cx.guest_call(&CallTool { server, tool }, args).await?,
                    Err(e) => Err(e),
                };
                Ok((out.and_then(|r| if r.is_error { Err(ToolError::Failed(r.text)) } else { Ok(r.text) }),))
            })
        })?;
        Ok(())
    }

    fn tools(&self) -> &'static [&'static dyn DynTool] {
        &[&McpTools]
    }

    /// The operator's MCP clients from the grant's MCP slice; the run's
    /// grant keeps only the servers whose settings are known, so the
    /// authority reaches no other.
    fn configure(&self, grant: &Grant, options: &mut RunOptions) -> Result<(), ConfigError> {
        let s = &grant.sandbox;
        let servers = grant.mcp.configs()?;
        let mcp = (!servers.is_empty()).then(|| {
            // stdio servers start under this binary's orphan guard, so they
            // end with nexo however it ends.
            let guard = std::env::current_exe().ok();
            // Confined servers get the local shell's mechanism.
            nexo_mcp::Clients::new(servers, nexo_mcp::ClientOptions { guard, ..Default::default() })
                .with_confinement(s.shell_policy().confinement)
                .with_view(s.view.clone())
        });
        options.providers.mcp = mcp;
        let servers = &mut options.grant.mcp.servers;
        servers.retain(|n| grant.mcp.configured(n));
        Ok(())
    }

    fn prepare<'a>(&'a self, setup: &'a mut Setup<'_>) -> Step<'a> {
        let clients = setup.options.providers.mcp.clone();
        let effective = setup.authority.mcp_effective();
        for server in effective {
            if !clients.as_ref().is_some_and(|c| c.servers().any(|s| s.name() == server)) {
                return Step::ready(Err(RunError::Config(ConfigError::invalid(
                    "mcp",
                    format!(
                        "the grant names the MCP server `{server}`, but the run has no settings for it: give its \
                         `[mcp.{server}]` settings in RunOptions.providers.mcp"
                    ),
                ))));
            }
        }
        let requested = setup.authority.mcp_requested();
        let missing: Vec<&str> = requested.iter().filter(|s| !effective.contains(s)).map(String::as_str).collect();
        if !missing.is_empty() {
            tracing::warn!(
                target: "nexo::mcp",
                agent = %setup.manifest.name,
                "the MCP servers {} are requested but not configured, so the agent runs without them",
                missing.join(", ")
            );
        }
        // Servers with `net-hosts` reach them through the egress proxy, metered and audited as this run.
        if let Some(clients) = clients.as_ref().filter(|c| c.needs_network()) {
            clients.with_network(Arc::new(McpNetwork {
                budget: setup.options.budget.clone(),
                audit: setup.options.context.audit.clone(),
            }));
        }
        setup.state.insert(McpState { clients, names: Mutex::default() });
        Step::ready(Ok(()))
    }
}

fn parse_arguments(tool: &str, text: &str) -> Result<Value, ToolError> {
    match serde_json::from_str::<Value>(if text.trim().is_empty() { "{}" } else { text }) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err(ToolError::InvalidInput(format!("the arguments of MCP tool `{tool}` must be a JSON object"))),
        Err(e) => Err(ToolError::InvalidInput(format!("the arguments of MCP tool `{tool}` are not JSON: {e}"))),
    }
}

/// An MCP client failure as the guest and the model see it.
/// `error.type` for a failed MCP call: its kind, never its message.
fn mcp_error_type(e: &McpError) -> &'static str {
    match e {
        McpError::Timeout { .. } => "timeout",
        McpError::Server { .. } => "tool_error",
        McpError::Closed { .. } => "closed",
        McpError::Egress { .. } => "refused",
        McpError::UnknownServer { .. } => "unknown_server",
        McpError::Spawn { .. } | McpError::Connect { .. } => "connect",
        McpError::Token { .. } => "token",
    }
}

fn tool_error(e: McpError) -> ToolError {
    match e {
        McpError::Timeout { .. } => ToolError::Timeout(e.to_string()),
        McpError::UnknownServer { .. } => ToolError::Denied(e.to_string()),
        McpError::Egress { .. } => ToolError::Denied(e.to_string()),
        e => ToolError::Failed(e.to_string()),
    }
}

/// `mcp.list-tools`: a server's tools, connecting first if need be.
#[derive(Debug, Clone, Copy)]
pub struct ListTools;

impl HostCall for ListTools {
    type Args = String;
    type Output = Vec<ToolInfo>;
    type Error = ToolError;

    fn name(&self) -> &'static str {
        "list-tools"
    }

    fn interface(&self) -> &'static str {
        MCP
    }

    fn effect(&self) -> crate::journal::Effect {
        crate::journal::Effect::Read
    }

    fn gate<'a>(&'a self, server: &'a String, _detail: &'a str) -> Gate<'a> {
        const NONE: Value = Value::Null;
        Gate::Mcp { server, tool: None, arguments: &NONE }
    }

    fn arg_bytes(&self, server: &String) -> usize {
        server.len()
    }

    fn execute<'a>(&'a self, cx: &'a ToolContext, server: String) -> BoxFuture<'a, Result<Vec<ToolInfo>, ToolError>> {
        Box::pin(async move {
            let state = cx.state::<McpState>()?;
            let tools = state.clients()?.list_tools(&server).await.map_err(tool_error)?;
            Ok(tools)
        })
    }

    fn truncate(&self, _cx: &ToolContext, tools: Vec<ToolInfo>) -> Vec<ToolInfo> {
        tools
            .into_iter()
            .map(|t| ToolInfo { description: crate::truncate::head_chars(&t.description, MCP_MAX_DESCRIPTION), ..t })
            .collect()
    }
}

crate::guest_only!(ListTools, ToolContext);

/// `mcp.call-tool`, and the model's `mcp__<server>__<tool>` calls: one
/// tool call on one server.
#[derive(Debug, Clone)]
pub struct CallTool {
    /// The server's configured name.
    pub server: String,
    /// The tool's name on the server.
    pub tool: String,
}

impl HostCall for CallTool {
    /// A JSON object (decoding refuses anything else).
    type Args = Value;
    type Output = CallResult;
    type Error = ToolError;

    fn name(&self) -> &'static str {
        "call-tool"
    }

    fn interface(&self) -> &'static str {
        MCP
    }

    fn gate<'a>(&'a self, args: &'a Self::Args, _detail: &'a str) -> Gate<'a> {
        Gate::Mcp { server: &self.server, tool: Some(&self.tool), arguments: args }
    }

    fn journal_arguments(&self, arguments: Value) -> Value {
        json!({"server": self.server, "tool": self.tool, "arguments": arguments})
    }

    fn arg_bytes(&self, args: &Self::Args) -> usize {
        serde_json::to_string(args).map(|s| s.len()).unwrap_or(usize::MAX)
    }

    fn execute<'a>(&'a self, cx: &'a ToolContext, args: Self::Args) -> BoxFuture<'a, Result<CallResult, ToolError>> {
        Box::pin(async move {
            let state = cx.state::<McpState>()?;
            let Value::Object(args) = args else {
                return Err(ToolError::InvalidInput("MCP tool arguments must be a JSON object".into()));
            };
            let clients = state.clients()?;
            let stdio = clients.servers().any(|s| s.name() == self.server && s.is_stdio());
            let span = spans::mcp_span("tools/call", &self.server, &self.tool, if stdio { "pipe" } else { "tcp" });
            let result = span.under(clients.call_tool(&self.server, &self.tool, args)).await;
            if let Err(e) = &result {
                spans::mcp_failed(&span, mcp_error_type(e));
            }
            result.map_err(tool_error)
        })
    }

    fn truncate(&self, _cx: &ToolContext, result: CallResult) -> CallResult {
        let (mut text, cut) = head_bytes(result.text.as_bytes(), MCP_MAX_OUTPUT);
        if cut {
            text.push_str(&cut_note("output", MCP_MAX_OUTPUT));
        }
        CallResult { text, ..result }
    }
}

impl MaybeTool for CallTool {
    fn decode_json(&self, arguments: &Value) -> Result<Self::Args, ToolError> {
        match arguments {
            Value::Object(_) => Ok(arguments.clone()),
            Value::Null => Ok(Value::Object(Map::new())),
            _ => Err(ToolError::InvalidInput(format!(
                "the arguments of `{}` must be a JSON object",
                model_tool_name(&self.server, &self.tool)
            ))),
        }
    }

    fn reply(&self, result: Result<CallResult, ToolError>) -> ModelReply {
        match result {
            Ok(r) if r.is_error => ModelReply {
                content: format!("error: the MCP tool reported an error: {}", r.text),
                is_error: true,
                verdict: "failed",
                approval: None,
            },
            Ok(r) => ModelReply { content: r.text, is_error: false, verdict: "allowed", approval: None },
            Err(e) => ModelReply::error(&e),
        }
    }
}

/// The model's view of every reachable server's tools, as one family.
#[derive(Debug, Clone, Copy)]
pub struct McpTools;

impl McpTools {
    fn route(cx: &ToolContext, name: &str) -> Option<(String, String)> {
        cx.state::<McpState>().ok()?.names().get(name).cloned()
    }
}

impl DynTool for McpTools {
    fn model_name(&self) -> &'static str {
        "mcp__*"
    }

    fn offered(&self, cx: &ToolContext) -> bool {
        !cx.authority().mcp_effective().is_empty()
    }

    fn spec(&self, _cx: &ToolContext) -> ToolSpec {
        ToolSpec { name: "mcp__*".into(), description: String::new(), parameters: json!({"type": "object"}) }
    }

    fn specs<'a>(&'a self, cx: &'a ToolContext) -> BoxFuture<'a, Vec<ToolSpec>> {
        Box::pin(async move {
            let Ok(state) = cx.state::<McpState>() else { return Vec::new() };
            let mut specs = Vec::new();
            for server in cx.authority().mcp_effective() {
                // A server that cannot be listed costs the model its tools,
                // not the run: the failure is logged and the prompt goes on.
                let tools = match crate::host_call::guest(cx, &ListTools, server.clone()).await {
                    Ok(tools) => tools,
                    Err(e) => {
                        tracing::warn!(target: "nexo::mcp", server, "the MCP server's tools are not offered: {}", e.text());
                        continue;
                    }
                };
                let mut names = state.names();
                for tool in tools {
                    let name = model_tool_name(server, &tool.name);
                    names.insert(name.clone(), (server.clone(), tool.name.clone()));
                    if cx.authority().mcp_offers(server, &tool.name) {
                        specs.push(ToolSpec {
                            name,
                            description: format!("[MCP server `{server}`] {}", tool.description),
                            parameters: tool.input_schema,
                        });
                    }
                }
            }
            specs
        })
    }

    fn serves(&self, cx: &ToolContext, name: &str) -> bool {
        Self::route(cx, name).is_some()
    }

    fn names(&self, cx: &ToolContext) -> Vec<String> {
        let Ok(state) = cx.state::<McpState>() else { return Vec::new() };
        state
            .names()
            .iter()
            .filter(|(_, (server, tool))| cx.authority().mcp_offers(server, tool))
            .map(|(name, _)| name.clone())
            .collect()
    }

    fn call_model<'a>(&'a self, cx: &'a ToolContext, turn: u32, call: &'a ToolCall) -> BoxFuture<'a, ModelReply> {
        Box::pin(async move {
            let (server, tool) = Self::route(cx, &call.name).unwrap_or_default();
            crate::host_call::model_call(cx, &CallTool { server, tool }, turn, call).await
        })
    }
}
