//! Authority: *what* an agent may do, decided in one place.
//!
//! [`Authority`] is computed once per run from three inputs, and then
//! answers every "may this happen?" question: the gate before each tool
//! call, whether the sandbox directory's WASI preopen is writable, which
//! tools the model is offered, and what `nexo inspect` prints.
//!
//! The inputs:
//!
//! - the **grant**: the capabilities the agent's manifest requested,
//!   intersected with those the operator granted. A plugin can never widen it.
//! - the **permission mode**: `read-only` (the default), `auto`, `ask` or
//!   `approve`. Capabilities on the allow list (by default `read` and `glob`)
//!   pass under every mode; the others follow the mode.
//!
//! - the plugin's own declared **mode**, which can only narrow the
//!   operator's.
//!
//! A denial becomes a recoverable tool error, and `approval required` is its
//! own outcome that a run can turn into a suspension.
//!
//! A `shell` command meets the operator's **command rules** first
//! ([`CommandRules`]): a `deny` rule refuses it under every mode, an `ask`
//! rule (or a command line the rules cannot read) makes someone decide even
//! under `auto`, an `allow` rule spares the asking under `ask` and
//! `approve`; no rule leaves it to the mode. Rules never widen a mode that
//! refuses the shell outright.
//!
//! The **data-flow guard** lies over both ([`DataFlow`]): once the run's
//! context holds untrusted content (a fetched page, search results), a call
//! that can send data out (a fetch, a search, an MCP tool not marked
//! read-only, a shell with network) meets the operator's action for what
//! the run holds: allowed as the mode decides, asked about whatever the
//! mode, or refused. What the run holds is the host-call path's
//! [`Taint`]; which calls bring labels in and which send is decided here.
//!
//! MCP tools are a second, fail-closed axis ([`Gate::Mcp`]): a server is
//! reachable only if the agent requested it and the operator configured it,
//! and a tool on it passes by the agent's exact `mcp-allow` names (narrowed
//! by the operator's), then by the same mode: `read-only` allows only listed
//! names, `ask` asks about the others, `approve` suspends them for a durable
//! decision, `auto` allows all.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use crate::error::ToolError;
use crate::flow::{Labels, Taint};
use crate::grant::{Bounds, CommandRules, DEFAULT_ALLOW, DataFlow, FlowAction, Grant, McpAllow, Ruling, stricter};
use crate::hint::{Fix, Vocabulary};
use crate::manifest::{AgentManifest, CapSet, Capability, PermissionMode};

/// A decision hook for `ask` mode: `(capability, detail) -> allowed?`.
pub type AskHook = Arc<dyn Fn(Capability, &str) -> bool + Send + Sync>;

/// `ask` mode's hook for MCP tools: `(server, tool, arguments) -> allowed?`.
pub type McpAskHook = Arc<dyn Fn(&str, &str, &serde_json::Value) -> bool + Send + Sync>;

/// What the gate decides about one call.
#[derive(Debug, Clone, Copy)]
pub enum Gate<'a> {
    /// Every agent may make the call.
    Open,
    /// The call needs `cap`; `detail` (a path, a command, a URL) goes to the
    /// hooks and into messages.
    Capability(Capability, &'a str),
    /// A call to an MCP server: listing its tools (`tool` is `None`), or
    /// calling one.
    Mcp {
        /// The server's configured name.
        server: &'a str,
        /// The tool, when one is called.
        tool: Option<&'a str>,
        /// The call's arguments, for the `ask` hook.
        arguments: &'a serde_json::Value,
    },
    /// A model turn that may cost `may_cost` nano-dollars of the run's
    /// budget. Whatever the mode, a turn past the budget waits for a
    /// decision: a budget suspends a run, it does not fail it.
    Budget {
        /// The run's spend and budget.
        spend: &'a crate::spend::Spend,
        /// What the turn may cost ([`Spend::may_cost`](crate::spend::Spend::may_cost)).
        may_cost: u64,
    },
}

impl Gate<'_> {
    /// What an approval of this call is recorded under: the capability's
    /// name, or `mcp`.
    pub fn subject(&self) -> &'static str {
        match self {
            Gate::Open => "none",
            Gate::Capability(cap, _) => cap.as_str(),
            Gate::Mcp { .. } => "mcp",
            Gate::Budget { .. } => crate::spend::SUBJECT,
        }
    }
}

/// The outcome of one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Go ahead.
    Allow,
    /// Refused; the message says why and how to change it.
    Deny(String),
    /// Needs a human's approval before it may run.
    ApprovalRequired(String),
}

/// The permission mode with its allow list and hooks.
#[derive(Clone)]
pub struct Permissions {
    mode: PermissionMode,
    allow: CapSet,
    on_ask: Option<AskHook>,
    ask_when: Option<AskHook>,
    on_ask_mcp: Option<McpAskHook>,
    vocabulary: Vocabulary,
}

impl fmt::Debug for Permissions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permissions")
            .field("mode", &self.mode)
            .field("allow", &self.allow.to_set())
            .field("on_ask", &self.on_ask.is_some())
            .field("ask_when", &self.ask_when.is_some())
            .field("on_ask_mcp", &self.on_ask_mcp.is_some())
            .field("vocabulary", &self.vocabulary)
            .finish()
    }
}

impl Default for Permissions {
    /// `read-only` with the default allow list.
    fn default() -> Self {
        Permissions::new(PermissionMode::ReadOnly)
    }
}

impl Permissions {
    /// A mode with the default allow list (`read`, `glob`) and no hooks.
    /// `ask` with no hook denies everything it would ask about.
    pub fn new(mode: PermissionMode) -> Self {
        Permissions {
            mode,
            allow: DEFAULT_ALLOW.into_iter().collect(),
            on_ask: None,
            ask_when: None,
            on_ask_mcp: None,
            vocabulary: Vocabulary::default(),
        }
    }

    /// Replaces the allow list, for example `read`, `glob` and `fetch` in
    /// `read-only` mode.
    pub fn with_allow(mut self, allow: impl IntoIterator<Item = Capability>) -> Self {
        self.allow = allow.into_iter().collect();
        self
    }

    /// Sets the words the gate's refusals use for a fix: the settings' by
    /// default, a front end's flags when it has its own.
    pub fn with_vocabulary(mut self, vocabulary: Vocabulary) -> Self {
        self.vocabulary = vocabulary;
        self
    }

    /// The words the gate's refusals use for a fix.
    pub fn vocabulary(&self) -> Vocabulary {
        self.vocabulary
    }

    /// Sets the `ask` decision hook.
    pub fn on_ask(mut self, hook: impl Fn(Capability, &str) -> bool + Send + Sync + 'static) -> Self {
        self.on_ask = Some(Arc::new(hook));
        self
    }

    /// Sets the `ask` decision hook for MCP tools not on the agent's
    /// `mcp-allow` list. Without one, `ask` denies them.
    pub fn on_ask_mcp(mut self, hook: impl Fn(&str, &str, &serde_json::Value) -> bool + Send + Sync + 'static) -> Self {
        self.on_ask_mcp = Some(Arc::new(hook));
        self
    }

    /// Narrows which actions `ask` asks about: when the predicate answers
    /// false the action is allowed without asking. Unset, everything is asked.
    pub fn ask_when(mut self, predicate: impl Fn(Capability, &str) -> bool + Send + Sync + 'static) -> Self {
        self.ask_when = Some(Arc::new(predicate));
        self
    }

    /// `approve` mode's name for [`Permissions::ask_when`]: only actions the
    /// predicate selects wait for a durable decision; the rest are allowed.
    pub fn approve_when(self, predicate: impl Fn(Capability, &str) -> bool + Send + Sync + 'static) -> Self {
        self.ask_when(predicate)
    }

    /// The same permissions, with the mode narrowed to `mode` if that is
    /// stricter. A plugin's own request can only ever narrow.
    pub fn narrowed_to(mut self, mode: PermissionMode) -> Self {
        self.mode = stricter(self.mode, mode);
        self
    }

    /// The mode.
    pub fn mode(&self) -> PermissionMode {
        self.mode
    }

    /// The allow list.
    pub fn allow(&self) -> BTreeSet<Capability> {
        self.allow.to_set()
    }

    /// Whether `cap` passes without a hook or an approval under this mode.
    pub fn auto_allows(&self, cap: Capability) -> bool {
        self.allow.contains(cap) || self.mode == PermissionMode::Auto
    }

    /// Whether this mode refuses every action that needs `cap`, whatever its
    /// detail (false when some action could pass: at once, by asking, or by
    /// an approval). Part of [`Permissions::check`], and what decides
    /// which tools are offered at all.
    pub fn refuses_outright(&self, cap: Capability) -> bool {
        self.mode == PermissionMode::ReadOnly && !self.allow.contains(cap)
    }

    /// The denial of an action [`Permissions::refuses_outright`].
    fn outright_refusal(&self, cap: Capability) -> String {
        format!(
            "`{}` is not allowed in read-only mode; the operator can choose another mode (for example {})",
            cap.as_str(),
            self.vocabulary.fix(Fix::Modes(&["auto"]))
        )
    }

    /// The end of a refusal for want of anyone to ask: what the operator
    /// can do instead.
    fn nobody_to_ask(&self) -> String {
        format!(
            "run nexo on a terminal, or choose {} (decide later with `nexo runs approve`) or {}",
            self.vocabulary.fix(Fix::Modes(&["approve"])),
            self.vocabulary.fix(Fix::Modes(&["auto"]))
        )
    }

    /// Decides one action. `detail` (a path, a command, a URL) goes to the
    /// hooks and into messages.
    pub fn check(&self, cap: Capability, detail: &str) -> Verdict {
        if self.allow.contains(cap) {
            return Verdict::Allow;
        }
        if self.refuses_outright(cap) {
            return Verdict::Deny(self.outright_refusal(cap));
        }
        let name = cap.as_str();
        match self.mode {
            // Read-only allows only the allow list, both decided above.
            PermissionMode::Auto | PermissionMode::ReadOnly => Verdict::Allow,
            PermissionMode::Ask => {
                if let Some(predicate) = &self.ask_when
                    && !predicate(cap, detail)
                {
                    return Verdict::Allow;
                }
                match &self.on_ask {
                    None => Verdict::Deny(format!(
                        "`{name}` {detail} needs the operator's approval, and no terminal was available to ask on, \
                         so the call was denied: {}",
                        self.nobody_to_ask()
                    )),
                    Some(hook) if hook(cap, detail) => Verdict::Allow,
                    Some(_) => Verdict::Deny(format!("the operator declined `{name}` {detail}")),
                }
            }
            PermissionMode::Approve => match &self.ask_when {
                // `approve_when` narrows which actions wait for a decision.
                Some(predicate) if !predicate(cap, detail) => Verdict::Allow,
                _ => Verdict::ApprovalRequired(format!("`{name}` {detail} waits for an approval")),
            },
        }
    }

    /// Decides an action that someone must decide whatever the mode, for
    /// the reason `why` (a command rule asks about it): asked on the terminal under `ask`,
    /// a durable approval under `approve` and `auto`. Never called for an
    /// action the mode [refuses outright](Permissions::refuses_outright).
    pub fn ask_anyway(&self, cap: Capability, detail: &str, why: &str) -> Verdict {
        let name = cap.as_str();
        match (self.mode, &self.on_ask) {
            (PermissionMode::Ask, Some(hook)) if hook(cap, detail) => Verdict::Allow,
            (PermissionMode::Ask, Some(_)) => Verdict::Deny(format!("the operator declined `{name}` {detail}")),
            (PermissionMode::Ask, None) => Verdict::Deny(format!(
                "`{name}` {detail} needs the operator's decision ({why}), and no terminal was available to ask \
                 on, so the call was denied: {}",
                self.nobody_to_ask()
            )),
            _ => Verdict::ApprovalRequired(format!("`{name}` {detail} waits for an approval: {why}")),
        }
    }
}

impl Permissions {
    /// [`Permissions::ask_anyway`] for an MCP tool call: the `ask` hook for
    /// MCP tools on the terminal, a durable approval otherwise.
    pub fn ask_anyway_mcp(&self, server: &str, tool: &str, arguments: &serde_json::Value, why: &str) -> Verdict {
        let name = format!("{server}/{tool}");
        match (self.mode, &self.on_ask_mcp) {
            (PermissionMode::Ask, Some(hook)) if hook(server, tool, arguments) => Verdict::Allow,
            (PermissionMode::Ask, Some(_)) => Verdict::Deny(format!("the operator declined the MCP tool `{name}`")),
            (PermissionMode::Ask, None) => Verdict::Deny(format!(
                "the MCP tool `{name}` needs the operator's decision ({why}), and no terminal was available to ask \
                 on, so the call was denied: {}",
                self.nobody_to_ask()
            )),
            _ => Verdict::ApprovalRequired(format!("the MCP tool `{name}` waits for an approval: {why}")),
        }
    }

    /// Decides one MCP tool call that is not on the agent's `mcp-allow`
    /// list (listed calls pass under every mode). `name` is how messages
    /// name the tool (`server/tool`).
    pub fn check_mcp(&self, server: &str, tool: &str, arguments: &serde_json::Value) -> Verdict {
        let name = format!("{server}/{tool}");
        match self.mode {
            PermissionMode::Auto => Verdict::Allow,
            PermissionMode::ReadOnly => Verdict::Deny(format!(
                "the MCP tool `{name}` is not on this agent's `mcp-allow` list, and read-only mode allows only \
                 listed MCP tools: the plugin's author adds the exact name to `mcp-allow`, or the operator chooses \
                 another mode ({})",
                self.vocabulary.fix(Fix::Modes(&["ask", "approve", "auto"]))
            )),
            PermissionMode::Ask => match &self.on_ask_mcp {
                None => Verdict::Deny(format!(
                    "the MCP tool `{name}` needs the operator's approval, and no terminal was available to ask on, \
                     so the call was denied: {}",
                    self.nobody_to_ask()
                )),
                Some(hook) if hook(server, tool, arguments) => Verdict::Allow,
                Some(_) => Verdict::Deny(format!("the operator declined the MCP tool `{name}`")),
            },
            PermissionMode::Approve => {
                Verdict::ApprovalRequired(format!("the MCP tool `{name}` waits for an approval"))
            }
        }
    }
}

/// The authority of one run: requested ∩ granted, under the operator's mode
/// narrowed by the plugin's own. Built once, before the instance; the
/// capability units then note what their configuration cannot serve.
#[derive(Debug, Clone)]
pub struct Authority {
    agent: String,
    requested: CapSet,
    effective: CapSet,
    permissions: Permissions,
    /// Why a capability cannot run here at all (no shell in the sandbox, no
    /// `fetch-allow` list, no search backend), by [`Capability::index`].
    unavailable: [Option<Refusal>; Capability::ALL.len()],
    /// The rules on `shell` commands.
    commands: CommandRules,
    /// The data-flow guard.
    flow: DataFlow,
    /// Whether shell commands reach the network (a send, for the guard).
    shell_network: bool,
    mcp: McpAuthority,
}

/// The MCP axis of an [`Authority`].
#[derive(Debug, Clone, Default)]
struct McpAuthority {
    requested: Vec<String>,
    effective: Vec<String>,
    /// The agent's `mcp-allow` ∩ the operator's, when the operator has one.
    listed: McpAllow,
    /// The operator's `mcp-allow`, when set: the only tools offered or
    /// callable, in every mode (a served run's grant always sets it).
    ceiling: Option<McpAllow>,
}

/// What stops every call that needs one capability: the first of the
/// gate's fixed-order checks that no call can pass.
#[derive(Debug, Clone, Copy)]
enum Obstacle {
    /// Requested, not granted.
    NotGranted,
    /// Not requested.
    NotRequested,
    /// The run's configuration cannot serve it.
    Unavailable(Refusal),
    /// The mode refuses it, whatever the call.
    Mode,
}

/// Why a capability cannot run in this run's configuration, made into the
/// gate's error only when someone asks: most runs never do.
#[derive(Debug, Clone, Copy)]
pub struct Refusal {
    /// Builds the error from the agent's name and `detail`.
    pub make: fn(agent: &str, detail: &'static str) -> ToolError,
    /// What the message needs besides the agent's name (a sandbox's name).
    pub detail: &'static str,
}

impl Authority {
    /// The authority of `manifest` under the operator's `grant` and
    /// `permissions`.
    pub fn new(manifest: &AgentManifest, grant: &Grant, permissions: &Permissions) -> Authority {
        let mut permissions = permissions.clone();
        if let Some(declared) = manifest.permissions {
            permissions = permissions.narrowed_to(declared);
        }
        let requested: CapSet = manifest.capabilities.iter().copied().collect();
        // The one intersection: the operator's grant and the agent's manifest.
        let both = grant.bounds().intersect(&Bounds::of_manifest(manifest));
        let servers = both.mcp_servers.unwrap_or_default();
        Authority {
            agent: manifest.name.clone(),
            requested,
            effective: both.capabilities.unwrap_or_default().into_iter().collect(),
            permissions,
            unavailable: [None; Capability::ALL.len()],
            commands: grant.commands.clone(),
            flow: grant.data_flow.clone(),
            shell_network: true,
            mcp: McpAuthority {
                requested: manifest.mcp_servers.clone(),
                effective: manifest.mcp_servers.iter().filter(|s| servers.contains(*s)).cloned().collect(),
                listed: both.mcp_tools.unwrap_or_default(),
                ceiling: grant.mcp.allow.clone(),
            },
        }
    }

    /// The MCP servers the agent requested, in its manifest's order.
    pub fn mcp_requested(&self) -> &[String] {
        &self.mcp.requested
    }

    /// The MCP servers it reaches: requested ∩ configured.
    pub fn mcp_effective(&self) -> &[String] {
        &self.mcp.effective
    }

    /// Whether `tool` on `server` is on the agent's `mcp-allow` list and,
    /// when the operator has one, on the operator's.
    pub fn mcp_listed(&self, server: &str, tool: &str) -> bool {
        self.mcp.listed.matches(server, tool)
    }

    /// Whether the model is offered `tool` on `server`: the server is
    /// reachable, and the tool could pass the gate (under `read-only` only
    /// listed tools can, so only those are offered).
    pub fn mcp_offers(&self, server: &str, tool: &str) -> bool {
        self.mcp.effective.iter().any(|s| s == server)
            && self.mcp_within_ceiling(server, tool)
            && (self.mode() != PermissionMode::ReadOnly || self.mcp_listed(server, tool))
    }

    /// Whether `tool` on `server` is within the operator's `mcp-allow`,
    /// when the operator set one: outside it, no mode lets a tool through.
    fn mcp_within_ceiling(&self, server: &str, tool: &str) -> bool {
        self.mcp.ceiling.as_ref().is_none_or(|c| c.matches(server, tool))
    }

    /// Notes that `cap` cannot run in this run's configuration: the gate
    /// refuses it with `why`, and its tool is not offered.
    pub fn set_unavailable(&mut self, cap: Capability, why: Refusal) {
        self.unavailable[cap.index()] = Some(why);
    }

    /// Notes whether the sandbox's shell commands reach the network: a
    /// shell without it sends nothing out. Until noted, they do.
    pub fn set_shell_network(&mut self, network: bool) {
        self.shell_network = network;
    }

    /// The data-flow guard.
    pub fn data_flow(&self) -> &DataFlow {
        &self.flow
    }

    /// The labels the result of the call `gate` describes brings into the
    /// run's context: fetched pages and search results are untrusted,
    /// workspace files (or the operator's private paths) private, a shell
    /// command's output both (untrusted only with network), an MCP tool's
    /// as the operator marks it.
    pub fn source(&self, gate: &Gate<'_>) -> Labels {
        let private = |yes: bool| if yes { Labels::PRIVATE } else { Labels::NONE };
        match *gate {
            Gate::Capability(Capability::Fetch | Capability::Search, _) => Labels::UNTRUSTED,
            Gate::Capability(Capability::Read | Capability::Glob, path) => private(self.flow.private_path(path)),
            Gate::Capability(Capability::Shell, _) => {
                let untrusted = if self.shell_network { Labels::UNTRUSTED } else { Labels::NONE };
                private(self.flow.any_private_path()).with(untrusted)
            }
            Gate::Mcp { server, tool: Some(tool), .. } => {
                let untrusted = if self.flow.untrusted_mcp(server, tool) { Labels::UNTRUSTED } else { Labels::NONE };
                private(self.flow.private_mcp(server, tool)).with(untrusted)
            }
            _ => Labels::NONE,
        }
    }

    /// How the guard's reasons name the call `gate` describes as a source.
    pub fn source_name(gate: &Gate<'_>) -> String {
        match *gate {
            Gate::Mcp { server, tool, .. } => format!("the MCP tool `{server}/{}`", tool.unwrap_or("")),
            Gate::Capability(cap, _) => format!("`{}`", cap.as_str()),
            _ => String::new(),
        }
    }

    /// Whether the call `gate` describes can send data out of the run: a
    /// fetch, a search query, an MCP tool not on the operator's
    /// `read-only-mcp`, a shell command with network.
    pub fn sends(&self, gate: &Gate<'_>) -> bool {
        match *gate {
            Gate::Capability(Capability::Fetch | Capability::Search, _) => true,
            Gate::Capability(Capability::Shell, _) => self.shell_network,
            Gate::Mcp { server, tool: Some(tool), .. } => !self.flow.read_only_mcp.matches(server, tool),
            _ => false,
        }
    }

    /// The guard's ruling on a call, given what the run's context holds:
    /// `None` when it has nothing to say (the context holds nothing
    /// untrusted, the call sends nothing, or the operator allows it), else
    /// the action and its reason.
    pub fn guard(&self, gate: &Gate<'_>, taint: &Taint) -> Option<(FlowAction, String)> {
        let held = taint.held();
        if !held.holds(Labels::UNTRUSTED) || !self.sends(gate) {
            return None;
        }
        let private = held.holds(Labels::PRIVATE);
        let action = self.flow.action(private);
        if action == FlowAction::Allow {
            return None;
        }
        let from = |label| taint.first(label).unwrap_or("a call");
        let held = if private {
            format!(
                "untrusted content (from {}) and private content (from {})",
                from(Labels::UNTRUSTED),
                from(Labels::PRIVATE)
            )
        } else {
            format!("untrusted content (from {})", from(Labels::UNTRUSTED))
        };
        Some((
            action,
            format!(
                "the data-flow guard: this run's context holds {held}, and this call can send data out; the operator \
                 sets what it does in `[grant.data-flow]` (for a tenant, its policy's `data-flow`)"
            ),
        ))
    }

    /// The agent's name.
    pub fn agent(&self) -> &str {
        &self.agent
    }

    /// What the plugin requested.
    pub fn requested(&self) -> BTreeSet<Capability> {
        self.requested.to_set()
    }

    /// Requested ∩ granted.
    pub fn effective(&self) -> BTreeSet<Capability> {
        self.effective.to_set()
    }

    /// The mode in force: the operator's, narrowed by the plugin's own.
    pub fn mode(&self) -> PermissionMode {
        self.permissions.mode()
    }

    /// The permissions in force, hooks included.
    pub fn permissions(&self) -> &Permissions {
        &self.permissions
    }

    /// The rules on `shell` commands.
    pub fn command_rules(&self) -> &CommandRules {
        &self.commands
    }

    /// Whether the model is offered `cap`'s tool: some call of it could
    /// pass the gate (at once, by asking, or by an approval). The same
    /// decision as the gate's, made before any call: see
    /// [`Authority::withheld`].
    pub fn offers(&self, cap: Capability) -> bool {
        self.obstacle(cap).is_none()
    }

    /// The capabilities whose tools are offered, in the contract's order:
    /// what `nexo inspect` calls effective.
    pub fn offered(&self) -> Vec<Capability> {
        self.effective.iter().filter(|c| self.offers(*c)).collect()
    }

    /// The requested and granted capabilities whose tools are not offered,
    /// each with the gate's refusal of every call of it: the sandbox cannot
    /// serve it, its configuration is missing, or the mode refuses it.
    pub fn withheld(&self) -> Vec<(Capability, ToolError)> {
        self.effective
            .iter()
            .filter_map(|cap| self.obstacle(cap).map(|o| (cap, self.refusal(o, cap, cap.as_str()))))
            .collect()
    }

    /// What stops every call that needs `cap`, whatever its detail, or
    /// `None` when some call could pass.
    fn obstacle(&self, cap: Capability) -> Option<Obstacle> {
        if !self.effective.contains(cap) {
            return Some(if self.requested.contains(cap) { Obstacle::NotGranted } else { Obstacle::NotRequested });
        }
        if let Some(refusal) = self.unavailable[cap.index()] {
            return Some(Obstacle::Unavailable(refusal));
        }
        self.permissions.refuses_outright(cap).then_some(Obstacle::Mode)
    }

    /// The gate's error for an [`Obstacle`] to a call of `tool`.
    fn refusal(&self, obstacle: Obstacle, cap: Capability, tool: &str) -> ToolError {
        let (name, agent) = (cap.as_str(), &self.agent);
        match obstacle {
            Obstacle::NotGranted => ToolError::Denied(format!(
                "`{tool}` needs the `{name}` capability: `{agent}` requests it, but the operator did not grant \
                 it; grant it with {}",
                self.permissions.vocabulary().fix(Fix::Allow(name))
            )),
            Obstacle::NotRequested => ToolError::Denied(format!(
                "`{tool}` needs the `{name}` capability, which `{agent}` does not request: the plugin's author \
                 adds `{name}` to the manifest's `capabilities`; the operator cannot grant what was not requested"
            )),
            Obstacle::Unavailable(refusal) => (refusal.make)(agent, refusal.detail),
            Obstacle::Mode => ToolError::Denied(self.permissions.outright_refusal(cap)),
        }
    }

    /// Whether `cap` is effective and passes without asking anyone: the test
    /// for authority that bypasses the gate, such as a writable WASI
    /// preopen, about which nobody can be asked.
    pub fn allows_unasked(&self, cap: Capability) -> bool {
        self.effective.contains(cap) && self.permissions.auto_allows(cap)
    }

    /// The gate for one action that needs `cap`: [`Authority::gate`] with
    /// [`Gate::Capability`].
    pub fn authorize(&self, cap: Capability, tool: &str, detail: &str) -> Result<(), ToolError> {
        self.gate(&Gate::Capability(cap, detail), tool)
    }

    /// The gate for one call, in a fixed order: effective → servable → the
    /// mode's verdict. Every decision is logged: a URL without its query,
    /// an MCP call without its arguments.
    pub fn gate(&self, gate: &Gate<'_>, tool: &str) -> Result<(), ToolError> {
        static CLEAN: Taint = Taint::new();
        self.gate_in(gate, &CLEAN, None, tool)
    }

    /// [`Authority::gate`] in a run whose context holds `taint`: the
    /// data-flow guard sees it. `ask` is why an operator's hook asks for a
    /// decision on the call: it is held like a guarded call (never refused
    /// for it, never let through unasked).
    pub fn gate_in(&self, gate: &Gate<'_>, taint: &Taint, ask: Option<&str>, tool: &str) -> Result<(), ToolError> {
        let held = || match (self.guard(gate, taint), ask) {
            (guard, None) => guard,
            (Some((FlowAction::Refuse, why)), Some(_)) => Some((FlowAction::Refuse, why)),
            (Some((_, why)), Some(ask)) => Some((FlowAction::Ask, format!("{why}; {ask}"))),
            (None, Some(ask)) => Some((FlowAction::Ask, ask.to_string())),
        };
        let outcome = match *gate {
            Gate::Open => return Ok(()),
            Gate::Capability(cap, detail) => self.decide(cap, tool, detail, held()),
            Gate::Mcp { server, tool: mcp_tool, arguments } => self.decide_mcp(server, mcp_tool, arguments, held()),
            Gate::Budget { spend, may_cost } => spend.check(may_cost).map_err(ToolError::ApprovalRequired),
        };
        // The log line is built only when someone keeps it: this runs on every call.
        if tracing::enabled!(target: "nexo::gate", tracing::Level::INFO) {
            let detail = match *gate {
                // A URL's query string can carry tokens: the log keeps what comes before it.
                Gate::Capability(Capability::Fetch, url) => url.split(['?', '#']).next().unwrap_or("").into(),
                Gate::Capability(_, detail) => std::borrow::Cow::Borrowed(detail),
                Gate::Mcp { server, tool: mcp_tool, .. } => format!("{server}/{}", mcp_tool.unwrap_or("(list)")).into(),
                Gate::Open => std::borrow::Cow::Borrowed(""),
                Gate::Budget { may_cost, .. } => format!("may cost ${:.6}", crate::spend::usd(may_cost)).into(),
            };
            let verdict = match &outcome {
                Ok(()) => "allowed",
                Err(ToolError::ApprovalRequired(_)) => "approval-required",
                Err(ToolError::Unsupported(_)) => "unsupported",
                Err(_) => "denied",
            };
            tracing::info!(target: "nexo::gate", agent = %self.agent, tool, detail = &*detail, verdict);
        }
        outcome
    }

    fn decide_mcp(
        &self,
        server: &str,
        tool: Option<&str>,
        arguments: &serde_json::Value,
        guard: Option<(FlowAction, String)>,
    ) -> Result<(), ToolError> {
        let agent = &self.agent;
        if !self.mcp.effective.iter().any(|s| s == server) {
            return Err(ToolError::Denied(if self.mcp.requested.iter().any(|s| s == server) {
                format!(
                    "`{agent}` asks for the MCP server `{server}`, which the operator did not configure: add an \
                     `[mcp.{server}]` table to the config file (or pass `--mcp {server}=…`)"
                )
            } else {
                format!(
                    "`{agent}` does not request the MCP server `{server}`: the plugin's author adds it to the \
                     manifest's `mcp-servers`; the operator cannot grant what was not requested"
                )
            }));
        }
        let Some(tool) = tool else { return Ok(()) };
        if !self.mcp_within_ceiling(server, tool) {
            return Err(ToolError::Denied(format!(
                "the MCP tool `{server}/{tool}` is not on the operator's `mcp-allow` list, which bounds every mode: \
                 the operator adds the exact name to it (a tenant's policy, or `[grant]` / `--mcp-allow`)"
            )));
        }
        let listed = self.mcp_listed(server, tool);
        let verdict = match guard {
            Some((FlowAction::Refuse, why)) => {
                Verdict::Deny(format!("the MCP tool `{server}/{tool}` is refused by {why}"))
            }
            // The guard asks about what the mode would let through, never
            // about what read-only refuses.
            Some((_, why)) if listed || self.mode() != PermissionMode::ReadOnly => {
                self.permissions.ask_anyway_mcp(server, tool, arguments, &why)
            }
            _ if listed => Verdict::Allow,
            _ => self.permissions.check_mcp(server, tool, arguments),
        };
        match verdict {
            Verdict::Allow => Ok(()),
            Verdict::Deny(m) => Err(ToolError::Denied(m)),
            Verdict::ApprovalRequired(m) => Err(ToolError::ApprovalRequired(m)),
        }
    }

    fn decide(
        &self,
        cap: Capability,
        tool: &str,
        detail: &str,
        guard: Option<(FlowAction, String)>,
    ) -> Result<(), ToolError> {
        if let Some(obstacle) = self.obstacle(cap) {
            return Err(self.refusal(obstacle, cap, tool));
        }
        let rule = match cap {
            Capability::Shell => self.commands.rule(detail),
            _ => Ruling::Mode,
        };
        let verdict = match (rule, guard) {
            (Ruling::Deny(why), _) => Verdict::Deny(format!(
                "the command `{detail}` is refused by {why}; the operator changes the `command-rules` of the config \
                 file's `[grant]` (for a tenant, its policy's) to let it run"
            )),
            (_, Some((FlowAction::Refuse, why))) => {
                Verdict::Deny(format!("`{}` {detail} is refused by {why}", cap.as_str()))
            }
            (Ruling::Ask(rule), Some((_, why))) => self.permissions.ask_anyway(cap, detail, &format!("{rule}; {why}")),
            (Ruling::Ask(why), None) | (_, Some((_, why))) => self.permissions.ask_anyway(cap, detail, &why),
            (Ruling::Allow, None) => Verdict::Allow,
            (Ruling::Mode, None) => self.permissions.check(cap, detail),
        };
        match verdict {
            Verdict::Allow => Ok(()),
            Verdict::Deny(m) => Err(ToolError::Denied(m)),
            Verdict::ApprovalRequired(m) => Err(ToolError::ApprovalRequired(m)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_declared_mode_narrows_the_gate_and_the_preopen_alike() {
        let manifest = AgentManifest {
            name: "careful".into(),
            capabilities: vec![Capability::Read, Capability::Write],
            permissions: Some(PermissionMode::ReadOnly),
            ..AgentManifest::default()
        };
        let grant = Grant::of([Capability::Read, Capability::Write]);
        let authority = Authority::new(&manifest, &grant, &Permissions::new(PermissionMode::Auto));
        assert_eq!(authority.mode(), PermissionMode::ReadOnly);
        assert!(!authority.allows_unasked(Capability::Write));
        assert!(matches!(authority.authorize(Capability::Write, "write-file", "a"), Err(ToolError::Denied(_))));
        let bold = AgentManifest { permissions: None, ..manifest };
        let authority = Authority::new(&bold, &grant, &Permissions::new(PermissionMode::Auto));
        assert!(authority.allows_unasked(Capability::Write));
        assert_eq!(authority.authorize(Capability::Write, "write-file", "a"), Ok(()));
    }

    #[test]
    fn effective_is_the_intersection() {
        let grant = Grant::of([Capability::Read, Capability::Write, Capability::Shell]);
        let eff = grant.effective(&[Capability::Read, Capability::Fetch, Capability::Shell]);
        assert_eq!(eff.into_iter().collect::<Vec<_>>(), vec![Capability::Read, Capability::Shell]);
        assert!(Grant::none().effective(&Capability::ALL).is_empty());
    }

    #[test]
    fn a_plugin_can_only_narrow_the_mode() {
        use PermissionMode::*;
        assert_eq!(stricter(Auto, ReadOnly), ReadOnly);
        assert_eq!(stricter(ReadOnly, Auto), ReadOnly);
        assert_eq!(stricter(Ask, Approve), Approve);
        assert_eq!(stricter(Auto, Ask), Ask);
    }

    #[test]
    fn ask_when_narrows_what_is_asked() {
        let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = asked.clone();
        let p = Permissions::new(PermissionMode::Ask)
            .on_ask(move |cap, detail| {
                log.lock().unwrap().push(format!("{} {detail}", cap.as_str()));
                false
            })
            .ask_when(|cap, detail| cap == Capability::Write && detail.starts_with("protected/"));
        assert_eq!(p.check(Capability::Write, "notes.txt"), Verdict::Allow);
        assert!(matches!(p.check(Capability::Write, "protected/x"), Verdict::Deny(_)));
        assert_eq!(p.check(Capability::Shell, "ls"), Verdict::Allow);
        assert_eq!(*asked.lock().unwrap(), vec!["write protected/x".to_string()]);
    }

    #[test]
    fn approve_when_narrows_what_waits_for_a_decision() {
        let p = Permissions::new(PermissionMode::Approve)
            .approve_when(|cap, detail| cap == Capability::Write && detail.starts_with("protected/"));
        assert_eq!(p.check(Capability::Write, "notes.txt"), Verdict::Allow);
        assert!(matches!(p.check(Capability::Write, "protected/a.txt"), Verdict::ApprovalRequired(_)));
        assert!(matches!(
            Permissions::new(PermissionMode::Approve).check(Capability::Write, "notes.txt"),
            Verdict::ApprovalRequired(_)
        ));
    }

    /// A gate's verdict, as the tables write it.
    #[derive(Debug, PartialEq)]
    enum Want {
        Allow,
        Deny,
        Approval,
    }

    impl Want {
        fn of(verdict: Result<(), ToolError>) -> Want {
            match verdict {
                Ok(()) => Want::Allow,
                Err(ToolError::ApprovalRequired(_)) => Want::Approval,
                Err(ToolError::Denied(_)) => Want::Deny,
                Err(e) => panic!("unexpected {e:?}"),
            }
        }
    }

    /// Command rules over the modes: deny refuses under every mode, ask
    /// makes someone decide even under `auto`, allow spares the asking, and
    /// no rule ever widens read-only.
    /// A turn past the run's budget waits for a decision in every mode,
    /// even `auto` and `read-only` (a budget suspends a run, it does not
    /// fail it), and one within it passes in every mode.
    #[test]
    fn a_budget_asks_in_every_mode() {
        use PermissionMode::*;
        let price = crate::spend::Price { input: 1.0, output: 1.0 };
        let spend =
            crate::spend::Spend::new(price, Some(0.001), nexo_model::Usage { input_tokens: 900, output_tokens: 0 });
        let manifest = AgentManifest { name: "a".into(), ..AgentManifest::default() };
        for mode in [Auto, Approve, Ask, ReadOnly] {
            let mut grant = Grant::none();
            grant.mode = mode;
            let authority = Authority::new(&manifest, &grant, &Permissions::new(mode).on_ask(|_, _| true));
            let within = authority.gate(&Gate::Budget { spend: &spend, may_cost: 100_000 }, "complete");
            assert_eq!(Want::of(within), Want::Allow, "{mode:?}");
            let past = authority.gate(&Gate::Budget { spend: &spend, may_cost: 100_001 }, "complete");
            assert_eq!(Want::of(past), Want::Approval, "{mode:?}");
        }
    }

    /// The data-flow guard: a send after untrusted content meets the
    /// operator's action for what the run holds, whatever the mode; other
    /// calls, and sends from a clean context, are the mode's.
    #[test]
    fn the_data_flow_guard_holds_sends_after_untrusted_content() {
        use Capability::*;
        use FlowAction::{Allow as Pass, Ask as Asks, Refuse};
        use PermissionMode::*;
        let manifest = AgentManifest {
            name: "web".into(),
            capabilities: vec![Read, Write, Shell, Fetch, Search],
            mcp_servers: vec!["fs".into()],
            mcp_allow: vec!["read_file".into(), "write_file".into()],
            ..AgentManifest::default()
        };
        let (clean, untrusted, both) = (Taint::new(), Taint::new(), Taint::new());
        untrusted.mark(Labels::UNTRUSTED, || "`fetch`".into());
        both.mark(Labels::UNTRUSTED, || "`search`".into());
        both.mark(Labels::PRIVATE, || "`read`".into());
        let args = serde_json::json!({});
        let fetch = Gate::Capability(Fetch, "https://collector.example/?d=x");
        let write = Gate::Capability(Write, "notes.txt");
        let read_only_tool = Gate::Mcp { server: "fs", tool: Some("read_file"), arguments: &args };
        let sending_tool = Gate::Mcp { server: "fs", tool: Some("write_file"), arguments: &args };
        // (mode, untrusted, private, context, call, verdict)
        let table = [
            (Auto, Pass, Asks, &clean, fetch, Want::Allow),
            (Auto, Pass, Asks, &untrusted, fetch, Want::Allow),
            (Auto, Pass, Asks, &both, fetch, Want::Approval),
            (Auto, Pass, Refuse, &both, fetch, Want::Deny),
            (Auto, Asks, Pass, &untrusted, fetch, Want::Approval),
            (Auto, Refuse, Pass, &both, fetch, Want::Deny),
            (Auto, Pass, Refuse, &both, write, Want::Allow),
            (Auto, Pass, Asks, &both, Gate::Capability(Search, "q"), Want::Approval),
            (Auto, Pass, Asks, &both, Gate::Capability(Shell, "curl x"), Want::Approval),
            (Auto, Pass, Refuse, &both, read_only_tool, Want::Allow),
            (Auto, Pass, Asks, &both, sending_tool, Want::Approval),
            (Auto, Pass, Refuse, &both, sending_tool, Want::Deny),
            (Approve, Pass, Asks, &untrusted, fetch, Want::Approval),
            (Approve, Pass, Asks, &both, fetch, Want::Approval),
            (ReadOnly, Pass, Asks, &both, fetch, Want::Deny),
            (
                ReadOnly,
                Pass,
                Asks,
                &both,
                Gate::Mcp { server: "fs", tool: Some("delete"), arguments: &args },
                Want::Deny,
            ),
            (Ask, Pass, Asks, &both, fetch, Want::Deny),
        ];
        for (mode, on_untrusted, on_private, taint, gate, want) in table {
            let mut grant = Grant::of(Capability::ALL).with_mcp_servers(["fs"]);
            grant.mode = mode;
            grant.data_flow = DataFlow {
                untrusted: on_untrusted,
                private: on_private,
                read_only_mcp: McpAllow::new(["fs/read_file"]),
                ..DataFlow::default()
            };
            let authority = Authority::new(&manifest, &grant, &Permissions::new(mode));
            let got = authority.gate_in(&gate, taint, None, "t");
            let text = got.as_ref().err().map(ToolError::text).unwrap_or_default();
            assert_eq!(Want::of(got), want, "{mode:?} {on_untrusted:?}/{on_private:?} {:?} {gate:?}", taint.held());
            if want != Want::Allow && mode == Auto {
                assert!(text.contains("data-flow guard") && text.contains("untrusted content (from `"), "{text}");
            }
        }
        // A shell without network sends nothing, and brings nothing untrusted in.
        let mut grant = Grant::of(Capability::ALL);
        grant.mode = Auto;
        let mut authority = Authority::new(&manifest, &grant, &Permissions::new(Auto));
        authority.set_shell_network(false);
        assert_eq!(authority.gate_in(&Gate::Capability(Shell, "curl x"), &both, None, "t"), Ok(()));
        assert_eq!(authority.source(&Gate::Capability(Shell, "cat x")), Labels::PRIVATE);
        assert_eq!(authority.source(&Gate::Capability(Fetch, "u")), Labels::UNTRUSTED);
        assert_eq!(authority.source(&write), Labels::NONE);
        // Asked on a terminal, the guard's question is the one asked.
        let asked = Arc::new(std::sync::Mutex::new(0));
        let count = asked.clone();
        grant.mode = Ask;
        let permissions = Permissions::new(Ask).on_ask(move |_, _| {
            *count.lock().unwrap() += 1;
            true
        });
        let authority = Authority::new(&manifest, &grant, &permissions);
        assert_eq!(authority.gate_in(&fetch, &both, None, "t"), Ok(()));
        assert_eq!(*asked.lock().unwrap(), 1, "asked once, not by the mode and again by the guard");
    }

    #[test]
    fn command_rules_lie_over_the_mode() {
        use PermissionMode::*;
        let manifest = AgentManifest {
            name: "dev".into(),
            capabilities: vec![Capability::Shell, Capability::Read],
            ..AgentManifest::default()
        };
        let mut grant = Grant::of([Capability::Shell, Capability::Read]);
        grant.commands = crate::grant::CommandRules::layer(
            ["allow git status", "ask git push", "deny rm"].iter().map(|r| r.parse().unwrap()).collect(),
        );
        // (mode, terminal answer, command, verdict)
        let table = [
            (Auto, None, "git status", Want::Allow),
            (Auto, None, "ls", Want::Allow),
            (Auto, None, "git push", Want::Approval),
            (Auto, None, "git status > x", Want::Approval),
            (Auto, None, "rm -rf /", Want::Deny),
            (Auto, None, "git status && rm x", Want::Deny),
            (Approve, None, "git status", Want::Allow),
            (Approve, None, "ls", Want::Approval),
            (Approve, None, "git push", Want::Approval),
            (Approve, None, "rm x", Want::Deny),
            (Ask, Some(false), "git status", Want::Allow),
            (Ask, Some(true), "git push", Want::Allow),
            (Ask, Some(false), "git push", Want::Deny),
            (Ask, None, "git push", Want::Deny),
            (Ask, Some(true), "rm x", Want::Deny),
            (ReadOnly, None, "git status", Want::Deny),
        ];
        for (mode, answer, command, want) in table {
            let mut permissions = Permissions::new(mode);
            if let Some(answer) = answer {
                permissions = permissions.on_ask(move |_, _| answer);
            }
            grant.mode = mode;
            let authority = Authority::new(&manifest, &grant, &permissions);
            let got = Want::of(authority.authorize(Capability::Shell, "shell", command));
            assert_eq!(got, want, "{mode:?} (terminal answers {answer:?}) {command:?}");
        }
        let authority = Authority::new(&manifest, &grant, &Permissions::new(Auto));
        let err = authority.authorize(Capability::Shell, "shell", "rm x").unwrap_err();
        assert!(err.text().contains("`deny rm`") && err.text().contains("command-rules"), "{err:?}");
        // Other capabilities are not the rules' business.
        assert_eq!(authority.authorize(Capability::Read, "read_file", "rm"), Ok(()));
    }

    #[test]
    fn an_explicit_allow_list_extends_read_only() {
        let p = Permissions::new(PermissionMode::ReadOnly).with_allow([
            Capability::Read,
            Capability::Glob,
            Capability::Fetch,
        ]);
        assert_eq!(p.check(Capability::Fetch, "https://example.com"), Verdict::Allow);
        assert!(matches!(p.check(Capability::Write, "a"), Verdict::Deny(_)));
    }

    /// The MCP axis, mode by mode: which calls pass, which are asked about,
    /// which wait for a durable approval, which are denied.
    #[test]
    fn the_mcp_gate_follows_the_table() {
        use PermissionMode::*;
        let manifest = AgentManifest {
            name: "inbox".into(),
            mcp_servers: vec!["gmail".into(), "fs".into(), "unconfigured".into()],
            mcp_allow: vec!["search_threads".into(), "fs/read_file".into()],
            ..AgentManifest::default()
        };
        let grant = Grant::default().with_mcp_servers(["gmail", "fs", "other"]);
        // (mode, ask hook answer, server, tool, verdict)
        let table = [
            (ReadOnly, None, "gmail", "search_threads", Want::Allow),
            (ReadOnly, None, "gmail", "send_message", Want::Deny),
            (ReadOnly, None, "fs", "read_file", Want::Allow),
            // `fs/read_file` names one server only; exact names, no patterns.
            (ReadOnly, None, "gmail", "read_file", Want::Deny),
            (ReadOnly, None, "gmail", "search_*", Want::Deny),
            (ReadOnly, None, "gmail", "Search_threads", Want::Deny),
            (Ask, Some(true), "gmail", "send_message", Want::Allow),
            (Ask, Some(false), "gmail", "send_message", Want::Deny),
            (Ask, None, "gmail", "send_message", Want::Deny),
            (Ask, Some(false), "gmail", "search_threads", Want::Allow),
            (Approve, None, "gmail", "search_threads", Want::Allow),
            (Approve, None, "gmail", "send_message", Want::Approval),
            (Auto, None, "gmail", "send_message", Want::Allow),
            // Requested but not configured, or configured but not requested:
            // denied under every mode.
            (Auto, None, "unconfigured", "x", Want::Deny),
            (Auto, None, "other", "x", Want::Deny),
        ];
        for (mode, answer, server, tool, want) in table {
            let mut permissions = Permissions::new(mode);
            if let Some(answer) = answer {
                permissions = permissions.on_ask_mcp(move |_, _, _| answer);
            }
            let authority = Authority::new(&manifest, &grant, &permissions);
            let args = serde_json::json!({"q": 1});
            let got = Want::of(authority.gate(&Gate::Mcp { server, tool: Some(tool), arguments: &args }, "mcp"));
            assert_eq!(got, want, "{mode:?} (ask answers {answer:?}) {server}/{tool}");
        }
    }

    #[test]
    fn the_mcp_gate_says_what_to_change() {
        let manifest =
            AgentManifest { name: "a".into(), mcp_servers: vec!["gmail".into()], ..AgentManifest::default() };
        let authority = Authority::new(&manifest, &Grant::default(), &Permissions::default());
        let args = serde_json::Value::Null;
        let err = authority.gate(&Gate::Mcp { server: "gmail", tool: None, arguments: &args }, "list").unwrap_err();
        assert!(err.text().contains("[mcp.gmail]"), "{err:?}");
        let err = authority.gate(&Gate::Mcp { server: "drive", tool: None, arguments: &args }, "list").unwrap_err();
        assert!(err.text().contains("mcp-servers"), "{err:?}");
        let mut grant = Grant::default();
        grant.mcp.servers.insert("gmail".into());
        let authority = Authority::new(&manifest, &grant, &Permissions::default());
        let err =
            authority.gate(&Gate::Mcp { server: "gmail", tool: Some("send"), arguments: &args }, "t").unwrap_err();
        assert!(err.text().contains("mcp-allow") && err.text().contains("gmail/send"), "{err:?}");
        // Listing a reachable server is never gated by tool.
        assert_eq!(authority.gate(&Gate::Mcp { server: "gmail", tool: None, arguments: &args }, "list"), Ok(()));
    }

    #[test]
    fn the_operator_narrows_the_mcp_allow_list() {
        let manifest = AgentManifest {
            name: "a".into(),
            mcp_servers: vec!["fs".into()],
            mcp_allow: vec!["read_file".into(), "write_file".into()],
            ..AgentManifest::default()
        };
        let mut grant = Grant::default();
        grant.mcp.servers.insert("fs".into());
        grant.mcp.allow = Some(McpAllow::new(["fs/read_file", "delete_file"]));
        let authority = Authority::new(&manifest, &grant, &Permissions::default());
        assert!(authority.mcp_listed("fs", "read_file"));
        assert!(!authority.mcp_listed("fs", "write_file"), "not on the operator's list");
        assert!(!authority.mcp_listed("fs", "delete_file"), "the operator cannot add to the agent's list");
        assert!(authority.mcp_offers("fs", "read_file") && !authority.mcp_offers("fs", "write_file"));
    }

    #[test]
    fn the_operators_mcp_allow_bounds_every_mode() {
        let manifest = AgentManifest { name: "a".into(), mcp_servers: vec!["fs".into()], ..AgentManifest::default() };
        let args = serde_json::json!({});
        for list in [vec![], vec!["fs/read_file"]] {
            let mut grant = Grant::default();
            grant.mcp.servers.insert("fs".into());
            grant.mcp.allow = Some(McpAllow::new(list.clone()));
            for mode in [PermissionMode::Auto, PermissionMode::Approve, PermissionMode::ReadOnly] {
                let authority = Authority::new(&manifest, &grant, &Permissions::new(mode));
                assert!(!authority.mcp_offers("fs", "write_file"), "{mode:?} {list:?}");
                let gate = Gate::Mcp { server: "fs", tool: Some("write_file"), arguments: &args };
                let err = authority.gate(&gate, "t").unwrap_err();
                assert!(matches!(err, ToolError::Denied(_)), "{mode:?} {list:?}: {err:?}");
            }
            // Within the list, the mode decides as before.
            let authority = Authority::new(&manifest, &grant, &Permissions::new(PermissionMode::Auto));
            assert_eq!(authority.mcp_offers("fs", "read_file"), !list.is_empty());
        }
        // No operator list (a local run without one): auto lets the tool through.
        let mut grant = Grant::default();
        grant.mcp.servers.insert("fs".into());
        let authority = Authority::new(&manifest, &grant, &Permissions::new(PermissionMode::Auto));
        assert!(authority.mcp_offers("fs", "write_file"));
    }
}
