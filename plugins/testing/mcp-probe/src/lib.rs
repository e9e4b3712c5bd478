//! Test plugin: calls MCP servers directly through the `mcp` interface and
//! reports each outcome, one line per step. The input is a script, one step
//! per line:
//!
//! - `list SERVER`: the server's tool names;
//! - `call SERVER TOOL JSON`: one tool call;
//! - `prompt TEXT`: one prompt through the host's model loop (which offers
//!   the servers' tools as `mcp__SERVER__TOOL`, and `write_file` when the
//!   grant gives `write`).

use nexo_sdk::agent::{mcp, model, Agent, Capability, Manifest, RunError, ToolError};

struct McpProbe;

fn outcome(result: Result<String, ToolError>) -> String {
    let text = match result {
        Ok(text) => format!("ok {text}"),
        Err(ToolError::Denied(m)) => format!("denied: {m}"),
        Err(ToolError::ApprovalRequired(m)) => format!("approval-required: {m}"),
        Err(ToolError::Timeout(m)) => format!("timeout: {m}"),
        Err(ToolError::Failed(m)) => format!("failed: {m}"),
        Err(e) => format!("other: {e:?}"),
    };
    text.replace('\n', " | ")
}

impl Agent for McpProbe {
    fn manifest() -> Manifest {
        Manifest::new("mcp-probe", "Calls MCP servers directly and reports the outcome (a test plugin)")
            .instructions("Use the MCP tools when asked.")
            .mcp_servers(["tests", "everything"])
            // The model's `write_file`, for a prompt that waits for an
            // approval of a write (the telemetry test).
            .capabilities([Capability::Write])
    }

    fn mcp_allow() -> Vec<String> {
        // `tests/fetch`: the network test of a confined server's `net-hosts`.
        vec!["echo".into(), "tests/image".into(), "tests/fetch".into()]
    }

    // Read from the `agent-children` export (the inspect test).
    fn agents() -> Vec<String> {
        vec!["helper".into()]
    }

    fn run(input: String) -> Result<String, RunError> {
        let mut lines = Vec::new();
        for step in input.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let (op, rest) = step.split_once(' ').unwrap_or((step, ""));
            let line = match op {
                "list" => {
                    let names = mcp::list_tools(rest)
                        .map(|tools| tools.into_iter().map(|t| t.name).collect::<Vec<_>>().join(","));
                    format!("list {rest}: {}", outcome(names))
                }
                "call" => {
                    let mut parts = rest.splitn(3, ' ');
                    let (server, tool) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
                    let args = parts.next().unwrap_or("{}");
                    format!("call {server}/{tool}: {}", outcome(mcp::call_tool(server, tool, args)))
                }
                "prompt" => match model::prompt(rest) {
                    Ok(reply) => format!("prompt: ok {}", reply.text),
                    Err(e) => format!("prompt: {e:?}"),
                },
                other => format!("{other}: unknown step"),
            };
            lines.push(line);
        }
        Ok(lines.join("\n"))
    }
}

nexo_sdk::export_agent!(McpProbe);
