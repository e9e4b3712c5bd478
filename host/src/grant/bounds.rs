//! The one intersection: each party's bounds on a run (the operator's
//! grant, a tenant's policy, a run request, an agent's manifest), field by
//! field, and what all of them allow.

use std::collections::BTreeSet;

use nexo_egress::{HostList, NetHosts};

use super::commands::CommandRules;
use super::flow::DataFlow;
use super::mcp_allow::McpAllow;
use crate::manifest::{AgentManifest, Capability, PermissionMode, SandboxKind};

/// One party's bounds on a run, field by field: the operator's (a tenant's
/// policy; `[grant]` and the flags), a run request's, an agent manifest's.
/// `None` is "this party sets no bound on the field"; a list, even an
/// empty one, is all it allows, so an empty list allows nothing. A run's
/// effective grant is the [`Bounds::intersect`] of all of them, and so is
/// never wider than any.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bounds {
    /// The capabilities, `read` and `glob` included.
    pub capabilities: Option<BTreeSet<Capability>>,
    /// The least strict permission mode.
    pub mode: Option<PermissionMode>,
    /// The sandboxes, the preferred first.
    pub sandboxes: Option<Vec<SandboxKind>>,
    /// The hosts `fetch` may reach (subdomain-aware, normalized).
    pub fetch_hosts: Option<HostList>,
    /// The hosts and ports shell commands may reach through the egress
    /// proxy.
    pub net_hosts: Option<NetHosts>,
    /// The rules on the shell's commands: each party's rules only narrow,
    /// so no party's are ever beyond another's.
    pub commands: Option<CommandRules>,
    /// The data-flow guard: each party's only makes it stricter, so no
    /// party's is ever beyond another's.
    pub data_flow: Option<DataFlow>,
    /// The operator's models by name, the preferred first.
    pub models: Option<Vec<String>>,
    /// The MCP servers, by configured name.
    pub mcp_servers: Option<BTreeSet<String>>,
    /// The MCP tools that pass unasked (exact names).
    pub mcp_tools: Option<McpAllow>,
}

impl Bounds {
    /// What an agent's manifest asks for: its capabilities, declared mode
    /// and sandbox, `fetch-allow`, MCP servers and `mcp-allow`. Its model is
    /// a provider's hint, not one of the operator's, so it bounds no model.
    /// A `fetch-allow` that does not parse allows nothing (validation
    /// refuses such a plugin before it runs).
    pub fn of_manifest(manifest: &AgentManifest) -> Bounds {
        Bounds {
            capabilities: Some(manifest.capabilities.iter().copied().collect()),
            mode: manifest.permissions,
            sandboxes: manifest.sandbox.map(|s| vec![s]),
            fetch_hosts: Some(HostList::new(&manifest.fetch_allow).unwrap_or_default()),
            net_hosts: None,
            commands: None,
            data_flow: None,
            models: None,
            mcp_servers: Some(manifest.mcp_servers.iter().cloned().collect()),
            mcp_tools: Some(McpAllow::new(manifest.mcp_allow.iter().cloned())),
        }
    }

    /// What both allow, field by field: the common members of two lists
    /// (in `self`'s order), the stricter mode, the hosts and MCP tools
    /// both lists match. A field only one side bounds keeps that bound.
    pub fn intersect(&self, other: &Bounds) -> Bounds {
        fn both<T: Clone>(a: &Option<T>, b: &Option<T>, f: impl FnOnce(&T, &T) -> T) -> Option<T> {
            match (a, b) {
                (Some(a), Some(b)) => Some(f(a, b)),
                (Some(x), None) | (None, Some(x)) => Some(x.clone()),
                (None, None) => None,
            }
        }
        fn ordered<T: Clone + PartialEq>(a: &[T], b: &[T]) -> Vec<T> {
            a.iter().filter(|x| b.contains(x)).cloned().collect()
        }
        Bounds {
            capabilities: both(&self.capabilities, &other.capabilities, |a, b| a.intersection(b).copied().collect()),
            mode: both(&self.mode, &other.mode, |a, b| stricter(*a, *b)),
            sandboxes: both(&self.sandboxes, &other.sandboxes, |a, b| ordered(a, b)),
            fetch_hosts: both(&self.fetch_hosts, &other.fetch_hosts, HostList::intersection),
            net_hosts: both(&self.net_hosts, &other.net_hosts, NetHosts::intersection),
            commands: both(&self.commands, &other.commands, CommandRules::intersection),
            data_flow: both(&self.data_flow, &other.data_flow, DataFlow::stricter),
            models: both(&self.models, &other.models, |a, b| ordered(a, b)),
            mcp_servers: both(&self.mcp_servers, &other.mcp_servers, |a, b| a.intersection(b).cloned().collect()),
            mcp_tools: both(&self.mcp_tools, &other.mcp_tools, McpAllow::intersection),
        }
    }

    /// The first field `self` bounds to more than `other` allows: the
    /// field's name and the first item beyond it; `None` when every field
    /// `self` bounds is within `other`'s. A field `self` leaves out is not
    /// beyond: intersected, it takes `other`'s bound (how a run request
    /// that omits a field gets the policy's).
    pub fn beyond(&self, other: &Bounds) -> Option<(&'static str, String)> {
        fn list<T: PartialEq>(
            mine: &Option<Vec<T>>,
            theirs: &Option<Vec<T>>,
            show: impl Fn(&T) -> String,
        ) -> Option<String> {
            let (Some(mine), Some(theirs)) = (mine, theirs) else { return None };
            mine.iter().find(|x| !theirs.contains(x)).map(show)
        }
        fn set<T: Ord>(
            mine: &Option<BTreeSet<T>>,
            theirs: &Option<BTreeSet<T>>,
            show: impl Fn(&T) -> String,
        ) -> Option<String> {
            let (Some(mine), Some(theirs)) = (mine, theirs) else { return None };
            mine.difference(theirs).next().map(show)
        }
        if let Some(c) = set(&self.capabilities, &other.capabilities, |c| c.as_str().to_string()) {
            return Some(("capabilities", c));
        }
        if let (Some(mine), Some(theirs)) = (self.mode, other.mode)
            && stricter(mine, theirs) != mine
        {
            return Some(("mode", mine.as_str().into()));
        }
        if let Some(s) = list(&self.sandboxes, &other.sandboxes, |s| s.as_str().to_string()) {
            return Some(("sandboxes", s));
        }
        if let (Some(mine), Some(theirs)) = (&self.fetch_hosts, &other.fetch_hosts)
            && let Some(host) = mine.entries().iter().find(|h| !theirs.matches(h))
        {
            return Some(("fetch-hosts", host.clone()));
        }
        if let (Some(mine), Some(theirs)) = (&self.net_hosts, &other.net_hosts)
            && let Some(host) = mine.first_beyond(theirs)
        {
            return Some(("net-hosts", host.to_string()));
        }
        if let Some(m) = list(&self.models, &other.models, String::clone) {
            return Some(("models", m));
        }
        if let Some(s) = set(&self.mcp_servers, &other.mcp_servers, String::clone) {
            return Some(("mcp-servers", s));
        }
        if let (Some(mine), Some(theirs)) = (&self.mcp_tools, &other.mcp_tools)
            && let Some(tool) = mine.entries().iter().find(|t| !theirs.covers(&McpAllow::new([t.as_str()])))
        {
            return Some(("mcp-allow", tool.clone()));
        }
        None
    }
}

/// The stricter of two modes: a plugin may narrow the operator's mode, never
/// widen it. From strictest: read-only, approve, ask, auto.
pub fn stricter(a: PermissionMode, b: PermissionMode) -> PermissionMode {
    fn rank(m: PermissionMode) -> u8 {
        match m {
            PermissionMode::ReadOnly => 0,
            PermissionMode::Approve => 1,
            PermissionMode::Ask => 2,
            PermissionMode::Auto => 3,
        }
    }
    if rank(a) <= rank(b) { a } else { b }
}
