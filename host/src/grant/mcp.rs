//! The MCP slice of a grant: the operator's servers a run reaches, the
//! tools that pass unasked, and the servers' settings.

use std::collections::{BTreeMap, BTreeSet};

use super::mcp_allow::McpAllow;
use crate::ConfigError;

/// The MCP servers and tools a run is granted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct McpGrant {
    /// The operator's servers by name: an agent reaches those of them it
    /// requests.
    pub servers: BTreeSet<String>,
    /// The operator's own `mcp-allow` list. `None`: the operator set none,
    /// and the agent's list decides. Set, a tool must be on both, so the
    /// operator can only narrow; an empty list lets no tool pass unasked. A
    /// served run's grant always sets it.
    pub allow: Option<McpAllow>,
    /// Servers given on the command line (`--mcp`): recorded whole, as they
    /// hold no secret.
    pub flags: BTreeMap<String, nexo_mcp::ServerConfig>,
    /// The config file's `[mcp.NAME]` tables: never recorded (one may hold
    /// a token), read again at each pass.
    pub tables: BTreeMap<String, nexo_mcp::ServerConfig>,
}

impl McpGrant {
    /// Whether `name`'s settings are known: a flag, or a table read now.
    pub fn configured(&self, name: &str) -> bool {
        self.flags.contains_key(name) || self.tables.contains_key(name)
    }

    /// The servers the run has that neither a recorded `--mcp` flag nor the
    /// config file read now defines: a pass without them would not behave
    /// as the run did.
    pub fn unconfigured(&self) -> Vec<&str> {
        self.servers.iter().filter(|n| !self.configured(n)).map(String::as_str).collect()
    }

    /// The servers, validated: `--mcp` flags over the config file's tables.
    /// A server the run started with that is configured no more is left
    /// out, with a warning.
    pub fn configs(&self) -> Result<Vec<nexo_mcp::Server>, ConfigError> {
        let mut servers = Vec::new();
        for name in &self.servers {
            let Some(config) = self.flags.get(name).or_else(|| self.tables.get(name)) else {
                tracing::warn!(
                    target: "nexo::mcp",
                    "the MCP server `{name}` is no longer configured ([mcp.{name}]), so this run goes on without it"
                );
                continue;
            };
            servers.push(
                nexo_mcp::Server::new(name, config.clone()).map_err(|e| ConfigError::invalid("mcp", e.to_string()))?,
            );
        }
        Ok(servers)
    }

    /// The servers' names and one-line descriptions, for `nexo inspect`.
    pub fn summary(&self) -> Vec<(String, String)> {
        match self.configs() {
            Ok(servers) => servers.iter().map(|s| (s.name().to_string(), s.describe())).collect(),
            Err(e) => vec![("(error)".into(), e.to_string())],
        }
    }
}
