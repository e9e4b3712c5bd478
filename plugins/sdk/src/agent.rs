//! The agent world: implement [`Agent`] and export it with
//! [`export_agent!`](crate::export_agent).

use alloc::string::String;
use alloc::vec::Vec;

/// Raw bindings generated from `wit/` for the `mcp-agent-plugin` world: the
/// agent world plus the `agent-mcp` and `agent-children` exports.
#[allow(missing_docs)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "nexo:plugin/mcp-agent-plugin",
        pub_export_macro: true,
        export_macro_name: "__export_agent_plugin",
        default_bindings_module: "nexo_sdk::agent::bindings",
        runtime_path: "nexo_sdk::__wit_bindgen::rt",
    });
}

pub use bindings::exports::nexo::plugin::agent::{AgentManifest as Manifest, PermissionMode, RunError, SandboxKind};
pub use bindings::nexo::plugin::log::{self, Level};
pub use bindings::nexo::plugin::mcp::{self, McpTool};
pub use bindings::nexo::plugin::model::{self, ModelError, Reply, StopReason};
pub use bindings::nexo::plugin::tools::{self, Page, ShellOutput};
pub use bindings::nexo::plugin::types::{Capability, SearchHit, ToolError};

pub use crate::durable;

/// An agent. Only [`Agent::manifest`] is required; the default
/// [`Agent::run`] sends the input to the model loop as one prompt.
pub trait Agent {
    /// Describes the agent and the authority it asks for. Keep it free of
    /// host calls: the host reads it to inspect the plugin.
    fn manifest() -> Manifest;

    /// The MCP tools the agent asks to call without anyone being asked:
    /// exact names, `tool` (on any of its servers) or `server/tool`. No
    /// patterns. The operator can only narrow the list. Default: none, so
    /// under `read-only` every MCP call is denied.
    fn mcp_allow() -> Vec<String> {
        Vec::new()
    }

    /// The agents the agent asks to have offered to its model as tools
    /// (`agent__NAME`), by the names the operator makes agents available
    /// under (a config file's `[agents]`, a served run's `agents`). Asking
    /// grants nothing. The model's call runs the agent as a child run with
    /// no more authority than this run's; this run waits, suspended, for
    /// its end. Default: none.
    fn agents() -> Vec<String> {
        Vec::new()
    }

    /// Runs the agent on one input and returns its answer.
    fn run(input: String) -> Result<String, RunError> {
        prompt(&input).map(|reply| reply.text)
    }
}

/// Runs one prompt through the host's model loop, with this agent's
/// instructions, tools and limits.
pub fn prompt(input: &str) -> Result<Reply, RunError> {
    model::prompt(input).map_err(RunError::Model)
}

/// Writes an `info` line to the host's log.
pub fn info(message: &str) {
    log::log(Level::Info, message);
}

/// Writes a `warn` line to the host's log.
pub fn warn(message: &str) {
    log::log(Level::Warn, message);
}

impl Manifest {
    /// A manifest with a name and a description and the safe defaults for
    /// everything else: no instructions, no capabilities, no fetch hosts, the
    /// operator's model, sandbox, permission mode and turn cap.
    pub fn new(name: &str, description: &str) -> Self {
        Manifest {
            name: name.into(),
            description: description.into(),
            instructions: String::new(),
            model: None,
            provider: None,
            skills: Vec::new(),
            capabilities: Vec::new(),
            fetch_allow: Vec::new(),
            mcp_servers: Vec::new(),
            max_turns: None,
            sandbox: None,
            permissions: None,
        }
    }

    /// Sets the system instructions.
    pub fn instructions(mut self, text: &str) -> Self {
        self.instructions = text.into();
        self
    }

    /// Sets the model id hint.
    pub fn model(mut self, id: &str) -> Self {
        self.model = Some(id.into());
        self
    }

    /// Sets the provider for the model hint.
    pub fn provider(mut self, name: &str) -> Self {
        self.provider = Some(name.into());
        self
    }

    /// Requests capabilities. The operator decides what is granted.
    pub fn capabilities(mut self, caps: impl IntoIterator<Item = Capability>) -> Self {
        self.capabilities.extend(caps);
        self
    }

    /// Names skills to load.
    pub fn skills<'a>(mut self, names: impl IntoIterator<Item = &'a str>) -> Self {
        self.skills.extend(names.into_iter().map(String::from));
        self
    }

    /// Asks for hosts to fetch from. This grants nothing by itself.
    pub fn fetch_allow<'a>(mut self, hosts: impl IntoIterator<Item = &'a str>) -> Self {
        self.fetch_allow.extend(hosts.into_iter().map(String::from));
        self
    }

    /// Asks for MCP servers, by the names the operator configures them
    /// under (`[mcp.NAME]`). This grants nothing by itself: the agent
    /// reaches those the operator configured, through the MCP gate.
    pub fn mcp_servers<'a>(mut self, names: impl IntoIterator<Item = &'a str>) -> Self {
        self.mcp_servers.extend(names.into_iter().map(String::from));
        self
    }

    /// Sets the turn cap for one prompt.
    pub fn max_turns(mut self, turns: u32) -> Self {
        self.max_turns = Some(turns);
        self
    }

    /// Names the sandbox the agent expects.
    pub fn sandbox(mut self, kind: SandboxKind) -> Self {
        self.sandbox = Some(kind);
        self
    }

    /// Names the permission mode the agent expects.
    pub fn permissions(mut self, mode: PermissionMode) -> Self {
        self.permissions = Some(mode);
        self
    }
}

impl<T: Agent> bindings::exports::nexo::plugin::agent_mcp::Guest for T {
    fn mcp_allow() -> Vec<String> {
        <T as Agent>::mcp_allow()
    }
}

impl<T: Agent> bindings::exports::nexo::plugin::agent_children::Guest for T {
    fn agents() -> Vec<String> {
        <T as Agent>::agents()
    }
}

impl<T: Agent> bindings::exports::nexo::plugin::agent::Guest for T {
    fn manifest() -> Manifest {
        <T as Agent>::manifest()
    }

    fn run(input: String) -> Result<String, RunError> {
        <T as Agent>::run(input)
    }
}

/// Exports a type that implements [`Agent`] as this component's agent.
#[macro_export]
macro_rules! export_agent {
    ($ty:ident) => {
        $crate::agent::bindings::__export_agent_plugin!($ty);
    };
}
