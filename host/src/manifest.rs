//! What plugins say about themselves, as plain data.
//!
//! The WIT bindings are the wire format; these types are what the rest of the
//! host (and `nexo inspect --json`) works with. Names serialize in kebab-case,
//! as in the WIT.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::bindings;

/// One kind of host authority an agent can ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Capability {
    /// Read files in the sandbox.
    Read,
    /// List files by glob pattern.
    Glob,
    /// Create or overwrite files.
    Write,
    /// Run shell commands.
    Shell,
    /// Fetch allow-listed web pages.
    Fetch,
    /// Query the configured web-search backend.
    Search,
}

impl Capability {
    /// Every capability, in the contract's order.
    pub const ALL: [Capability; 6] = [
        Capability::Read,
        Capability::Glob,
        Capability::Write,
        Capability::Shell,
        Capability::Fetch,
        Capability::Search,
    ];

    /// The capability's position in [`Capability::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The name used in the WIT, in grants and in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::Read => "read",
            Capability::Glob => "glob",
            Capability::Write => "write",
            Capability::Shell => "shell",
            Capability::Fetch => "fetch",
            Capability::Search => "search",
        }
    }
}

/// A set of capabilities as bits, so copying one costs nothing (a run
/// copies several).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct CapSet(u8);

impl CapSet {
    /// Whether `cap` is in the set.
    pub fn contains(self, cap: Capability) -> bool {
        self.0 & (1 << cap.index()) != 0
    }

    /// Adds `cap`.
    pub fn insert(&mut self, cap: Capability) {
        self.0 |= 1 << cap.index();
    }

    /// The capabilities in both sets.
    pub fn intersection(self, other: CapSet) -> CapSet {
        CapSet(self.0 & other.0)
    }

    /// The members, in the contract's order.
    pub fn iter(self) -> impl Iterator<Item = Capability> {
        Capability::ALL.into_iter().filter(move |c| self.contains(*c))
    }

    /// The members as an ordered set.
    pub fn to_set(self) -> std::collections::BTreeSet<Capability> {
        self.iter().collect()
    }
}

impl FromIterator<Capability> for CapSet {
    fn from_iter<I: IntoIterator<Item = Capability>>(iter: I) -> Self {
        let mut set = CapSet::default();
        for cap in iter {
            set.insert(cap);
        }
        set
    }
}

/// Where tools act: what an agent requests, the operator grants and a
/// tenant's policy allows. The one sandbox kind every part of nexo uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxKind {
    /// In-memory files, no host access. The default.
    Virtual,
    /// The operator's working directory.
    Local,
    /// A hardened container.
    Container,
    /// A remote sandbox service (a sandbox-provider component an
    /// embedding program sets; never granted on the command line).
    #[value(skip)]
    Remote,
}

impl SandboxKind {
    /// The name used in the WIT and in configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxKind::Virtual => "virtual",
            SandboxKind::Local => "local",
            SandboxKind::Container => "container",
            SandboxKind::Remote => "remote",
        }
    }
}

/// How the permission gate treats actions beyond reading: the one
/// permission mode every part of nexo uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum PermissionMode {
    /// Only `read` and `glob`. The default.
    ReadOnly,
    /// Everything granted runs without asking.
    Auto,
    /// Each action beyond reading asks the operator.
    Ask,
    /// Each action beyond reading waits for a durable approval.
    Approve,
}

impl PermissionMode {
    /// The name used in the WIT and in configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionMode::ReadOnly => "read-only",
            PermissionMode::Auto => "auto",
            PermissionMode::Ask => "ask",
            PermissionMode::Approve => "approve",
        }
    }
}

/// Which loop drives an agent's prompts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LoopKind {
    /// nexo's own loop: any provider, journaled turn by turn. The default.
    #[default]
    Host,
    /// The Claude Code CLI's loop, with nexo's tools and gate
    /// ([`crate::claude_code`]).
    ClaudeCode,
}

impl LoopKind {
    /// The name used on the command line and in configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            LoopKind::Host => "host",
            LoopKind::ClaudeCode => "claude-code",
        }
    }

    /// Parses a name.
    pub fn parse(name: &str) -> Result<LoopKind, String> {
        match name {
            "host" => Ok(LoopKind::Host),
            "claude-code" => Ok(LoopKind::ClaudeCode),
            other => Err(format!("unknown loop `{other}`: use `host` (nexo's own) or `claude-code`")),
        }
    }
}

/// An agent's manifest: who it is and what it asks for. Every field is a
/// request; the operator's grant decides. The same fields, in TOML, make a
/// declarative agent file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", default, deny_unknown_fields)]
pub struct AgentManifest {
    /// Short identifier.
    pub name: String,
    /// One line on what it does.
    pub description: String,
    /// System instructions for the model.
    pub instructions: String,
    /// Model id hint.
    pub model: Option<String>,
    /// Provider for the model hint.
    pub provider: Option<String>,
    /// Skills to load, by name.
    pub skills: Vec<String>,
    /// Requested capabilities.
    pub capabilities: Vec<Capability>,
    /// Requested fetch hosts.
    pub fetch_allow: Vec<String>,
    /// Requested MCP servers, by configured name.
    pub mcp_servers: Vec<String>,
    /// MCP tools the agent asks to call without anyone being asked: exact
    /// names, `tool` or `server/tool`. The operator's grant can only narrow
    /// it (see [`crate::authority`]).
    pub mcp_allow: Vec<String>,
    /// Agents it asks to have offered to its model as tools
    /// (`agent__NAME`), by the names the operator makes agents available
    /// under. Asking grants nothing: only those the run was given are
    /// offered (see [`crate::capability::agents`]).
    pub agents: Vec<String>,
    /// Turn cap for one prompt.
    pub max_turns: Option<u32>,
    /// Expected sandbox.
    pub sandbox: Option<SandboxKind>,
    /// Expected permission mode.
    pub permissions: Option<PermissionMode>,
    /// The loop a declarative agent's prompts run on by default (`loop =
    /// "claude-code"` in its TOML); the operator's `--loop` wins. A
    /// component's manifest has no such field.
    #[serde(rename = "loop", skip_serializing_if = "Option::is_none")]
    pub agent_loop: Option<LoopKind>,
}

/// The version of the `nexo:plugin` package this host implements. Any
/// `0.1.x` plugin is accepted.
pub const CONTRACT_VERSION: &str = "0.1.4";

/// The versioned names of the `nexo:plugin` interfaces the host serves, as
/// linkers define them. Each ends with [`CONTRACT_VERSION`] (a unit test checks).
pub mod interface {
    /// `nexo:plugin/tools`.
    pub const TOOLS: &str = "nexo:plugin/tools@0.1.4";
    /// `nexo:plugin/model`.
    pub const MODEL: &str = "nexo:plugin/model@0.1.4";
    /// `nexo:plugin/log`.
    pub const LOG: &str = "nexo:plugin/log@0.1.4";
    /// `nexo:plugin/outbound-http`.
    pub const OUTBOUND_HTTP: &str = "nexo:plugin/outbound-http@0.1.4";
    /// `nexo:plugin/config`.
    pub const CONFIG: &str = "nexo:plugin/config@0.1.4";
    /// `nexo:plugin/durable`.
    pub const DURABLE: &str = "nexo:plugin/durable@0.1.4";
    /// `nexo:plugin/mcp`.
    pub const MCP: &str = "nexo:plugin/mcp@0.1.4";
    /// `nexo:plugin/agent-mcp`, the export of `mcp-agent-plugin` agents.
    pub const AGENT_MCP: &str = "nexo:plugin/agent-mcp@0.1.4";
    /// `nexo:plugin/agent-children`, the other export of `mcp-agent-plugin`
    /// agents (since 0.1.3).
    pub const AGENT_CHILDREN: &str = "nexo:plugin/agent-children@0.1.4";
    /// `nexo:plugin/hook`: a recorded run's hook decisions are journaled
    /// under it.
    pub const HOOK: &str = "nexo:plugin/hook@0.1.4";
    /// The agent loop's model turns (`complete`), which no WIT declares:
    /// the host makes them, for the host loop.
    pub const MODEL_TURN: &str = "nexo:model";
}

/// Which world a plugin implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PluginKind {
    /// `nexo:plugin/agent-plugin`.
    Agent,
    /// `nexo:plugin/skill-plugin`.
    Skill,
    /// `nexo:plugin/search-backend-plugin`.
    SearchBackend,
    /// `nexo:plugin/sandbox-provider-plugin`.
    SandboxProvider,
    /// `nexo:plugin/hook-plugin`.
    Hook,
}

impl PluginKind {
    /// The interface a plugin of this kind exports, without a version.
    pub fn export_interface(self) -> &'static str {
        match self {
            PluginKind::Agent => "nexo:plugin/agent",
            PluginKind::Skill => "nexo:plugin/skill",
            PluginKind::SearchBackend => "nexo:plugin/search-backend",
            PluginKind::SandboxProvider => "nexo:plugin/sandbox-provider",
            PluginKind::Hook => "nexo:plugin/hook",
        }
    }

    /// The world's name in the WIT package.
    pub fn world(self) -> &'static str {
        match self {
            PluginKind::Agent => "nexo:plugin/agent-plugin",
            PluginKind::Skill => "nexo:plugin/skill-plugin",
            PluginKind::SearchBackend => "nexo:plugin/search-backend-plugin",
            PluginKind::SandboxProvider => "nexo:plugin/sandbox-provider-plugin",
            PluginKind::Hook => "nexo:plugin/hook-plugin",
        }
    }

    /// The `nexo:plugin` interfaces this kind may import.
    pub(crate) fn allowed_imports(self) -> &'static [&'static str] {
        match self {
            PluginKind::Agent => &["types", "log", "tools", "model", "durable", "mcp"],
            PluginKind::Skill | PluginKind::Hook => &["types"],
            PluginKind::SearchBackend | PluginKind::SandboxProvider => &["types", "log", "outbound-http", "config"],
        }
    }
}

impl PluginKind {
    /// The kind's name with its indefinite article.
    pub fn with_article(self) -> &'static str {
        match self {
            PluginKind::Agent => "an agent",
            PluginKind::Skill => "a skill",
            PluginKind::SearchBackend => "a search backend",
            PluginKind::SandboxProvider => "a sandbox provider",
            PluginKind::Hook => "a hook",
        }
    }
}

impl fmt::Display for PluginKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PluginKind::Agent => "agent",
            PluginKind::Skill => "skill",
            PluginKind::SearchBackend => "search backend",
            PluginKind::SandboxProvider => "sandbox provider",
            PluginKind::Hook => "hook",
        })
    }
}

/// A skill component's self-description.
#[derive(Debug, Clone, Serialize)]
pub struct SkillDescription {
    /// Its metadata.
    pub metadata: SkillMetadata,
    /// Its bundled resource paths.
    pub resources: Vec<String>,
}

/// What a plugin says about itself.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "description")]
pub enum Description {
    /// An agent's manifest.
    Agent(AgentManifest),
    /// A skill's metadata and resources.
    Skill(SkillDescription),
    /// A search backend's info.
    SearchBackend(BackendInfo),
    /// A sandbox provider's info.
    SandboxProvider(ProviderInfo),
    /// A hook's info.
    Hook(HookInfo),
}

/// A skill's metadata: one type for SKILL.md packages and skill components.
pub use nexo_skills::SkillMetadata;

/// A search backend's self-description.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct BackendInfo {
    /// Short identifier.
    pub name: String,
    /// The service it adapts.
    pub description: String,
    /// Hosts it asks to reach.
    pub hosts: Vec<String>,
}

/// A sandbox provider's self-description.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ProviderInfo {
    /// Short identifier.
    pub name: String,
    /// The service it adapts.
    pub description: String,
    /// Hosts it asks to reach.
    pub hosts: Vec<String>,
    /// The working directory inside the remote environment.
    pub workdir: String,
}

/// A hook's self-description.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct HookInfo {
    /// Short identifier.
    pub name: String,
    /// What it checks.
    pub description: String,
    /// The moments it is asked about.
    pub events: Vec<HookEvent>,
}

/// A moment a hook can be asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HookEvent {
    /// Before a gated call runs.
    BeforeToolCall,
    /// After it ran.
    AfterToolCall,
    /// Before a prompt goes to the model.
    BeforePrompt,
}

impl HookEvent {
    /// Its name in the WIT.
    pub fn as_str(self) -> &'static str {
        match self {
            HookEvent::BeforeToolCall => "before-tool-call",
            HookEvent::AfterToolCall => "after-tool-call",
            HookEvent::BeforePrompt => "before-prompt",
        }
    }
}

impl From<bindings::hook::exports::nexo::plugin::hook::HookInfo> for HookInfo {
    fn from(i: bindings::hook::exports::nexo::plugin::hook::HookInfo) -> Self {
        use bindings::hook::exports::nexo::plugin::hook::Event;
        let mut events: Vec<HookEvent> = i
            .events
            .into_iter()
            .map(|e| match e {
                Event::BeforeToolCall => HookEvent::BeforeToolCall,
                Event::AfterToolCall => HookEvent::AfterToolCall,
                Event::BeforePrompt => HookEvent::BeforePrompt,
            })
            .collect();
        events.sort_by_key(|e| *e as u8);
        events.dedup();
        HookInfo { name: i.name, description: i.description, events }
    }
}

impl From<bindings::provider::exports::nexo::plugin::sandbox_provider::ProviderInfo> for ProviderInfo {
    fn from(i: bindings::provider::exports::nexo::plugin::sandbox_provider::ProviderInfo) -> Self {
        ProviderInfo { name: i.name, description: i.description, hosts: i.hosts, workdir: i.workdir }
    }
}

impl From<bindings::Capability> for Capability {
    fn from(c: bindings::Capability) -> Self {
        match c {
            bindings::Capability::Read => Capability::Read,
            bindings::Capability::Glob => Capability::Glob,
            bindings::Capability::Write => Capability::Write,
            bindings::Capability::Shell => Capability::Shell,
            bindings::Capability::Fetch => Capability::Fetch,
            bindings::Capability::Search => Capability::Search,
        }
    }
}

impl From<bindings::SandboxKind> for SandboxKind {
    fn from(s: bindings::SandboxKind) -> Self {
        match s {
            bindings::SandboxKind::Virtual => SandboxKind::Virtual,
            bindings::SandboxKind::Local => SandboxKind::Local,
            bindings::SandboxKind::Container => SandboxKind::Container,
            bindings::SandboxKind::Remote => SandboxKind::Remote,
        }
    }
}

impl From<bindings::PermissionMode> for PermissionMode {
    fn from(m: bindings::PermissionMode) -> Self {
        match m {
            bindings::PermissionMode::ReadOnly => PermissionMode::ReadOnly,
            bindings::PermissionMode::Auto => PermissionMode::Auto,
            bindings::PermissionMode::Ask => PermissionMode::Ask,
            bindings::PermissionMode::Approve => PermissionMode::Approve,
        }
    }
}

impl From<bindings::AgentManifest> for AgentManifest {
    fn from(m: bindings::AgentManifest) -> Self {
        AgentManifest {
            name: m.name,
            description: m.description,
            instructions: m.instructions,
            model: m.model,
            provider: m.provider,
            skills: m.skills,
            capabilities: m.capabilities.into_iter().map(Capability::from).collect(),
            fetch_allow: m.fetch_allow,
            mcp_servers: m.mcp_servers,
            mcp_allow: Vec::new(),
            agents: Vec::new(),
            max_turns: m.max_turns,
            sandbox: m.sandbox.map(SandboxKind::from),
            permissions: m.permissions.map(PermissionMode::from),
            agent_loop: None,
        }
    }
}

impl From<bindings::SkillMetadata> for SkillMetadata {
    fn from(m: bindings::SkillMetadata) -> Self {
        SkillMetadata {
            name: m.name,
            description: m.description,
            license: m.license,
            compatibility: m.compatibility,
            allowed_tools: m.allowed_tools,
            extra: m.extra.into_iter().collect(),
        }
    }
}

impl From<bindings::BackendInfo> for BackendInfo {
    fn from(i: bindings::BackendInfo) -> Self {
        BackendInfo { name: i.name, description: i.description, hosts: i.hosts }
    }
}

#[cfg(test)]
mod tests {
    use super::{CONTRACT_VERSION, interface};

    #[test]
    fn interface_names_carry_the_contract_version() {
        for name in [
            interface::TOOLS,
            interface::MODEL,
            interface::LOG,
            interface::OUTBOUND_HTTP,
            interface::CONFIG,
            interface::DURABLE,
            interface::MCP,
            interface::AGENT_MCP,
            interface::HOOK,
            interface::AGENT_CHILDREN,
        ] {
            assert!(name.starts_with("nexo:plugin/") && name.ends_with(&format!("@{CONTRACT_VERSION}")), "{name}");
        }
    }
}
