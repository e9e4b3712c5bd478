//! The MCP unit: an agent's `mcp-servers` are the MCP servers it asks to
//! reach, by the names the operator configures them under. This nexo
//! connects to none yet, so an agent that names one fails before it runs,
//! saying so, rather than running without the tools it expects.

use crate::error::{ConfigError, RunError};
use crate::unit::{Setup, Step, Unit};

/// The MCP unit.
#[derive(Debug, Default, Clone, Copy)]
pub struct McpUnit;

impl Unit for McpUnit {
    fn name(&self) -> &'static str {
        "mcp"
    }

    fn prepare<'a>(&'a self, setup: &'a mut Setup<'_>) -> Step<'a> {
        Step::ready((|| {
            let servers = &setup.manifest.mcp_servers;
            if servers.is_empty() {
                return Ok(());
            }
            Err(RunError::Config(ConfigError::invalid(
                "mcp-servers",
                format!(
                    "`{}` asks for the MCP servers {}, and no MCP server is configured for it: this nexo does not \
                     connect to MCP servers yet. Remove `mcp-servers` from the manifest to run it without them",
                    setup.manifest.name,
                    servers.join(", ")
                ),
            )))
        })())
    }
}
