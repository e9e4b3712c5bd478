//! The grant: what the operator lets a run do, as plain data. The config
//! file and the front end's settings produce it
//! ([`ConfigFile::grant`](crate::config::ConfigFile::grant)), a tenant's
//! policy produces a served run's ([`Policy::grant`](crate::policy::Policy::grant)),
//! a pass and a tenant's policy as it is now narrow it ([`Grant::narrow`],
//! through the one intersection, [`Bounds::intersect`]), and
//! [`Authority`](crate::authority::Authority) consumes it with the agent's
//! manifest. A run records it (it holds no secret), so a resume needs no
//! settings.
//!
//! Each concern has its slice: the capabilities and the permission mode,
//! `fetch`'s hosts, the shell's command rules ([`CommandRules`]), the
//! data-flow guard ([`DataFlow`]), the sandbox ([`SandboxGrant`]) and MCP
//! ([`McpGrant`]).

mod bounds;
mod command_line;
mod commands;
mod flow;
mod mcp;
mod mcp_allow;
mod sandbox;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use nexo_egress::{HostList, NetHosts};
use serde::{Deserialize, Serialize};

pub use bounds::{Bounds, stricter};
pub use command_line::{Unreadable, join as join_argv, split as split_command_line};
pub use commands::{CommandRule, CommandRules, Judgement, RuleDecision, Ruling};
pub use flow::{DataFlow, FlowAction};
pub use mcp::McpGrant;
pub use mcp_allow::McpAllow;
pub use sandbox::{ConfinementSetting, RuntimeSetting, SandboxGrant};

use crate::ConfigError;
use crate::manifest::{Capability, PermissionMode, SandboxKind};

/// The capabilities every grant holds unless it says otherwise, and that
/// pass under every mode unless the allow list is set.
pub const DEFAULT_ALLOW: [Capability; 2] = [Capability::Read, Capability::Glob];

/// What the operator grants a run. The default grants `read` and `glob`,
/// read-only, in memory, with no MCP server: the safe one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "Stored", into = "Stored")]
pub struct Grant {
    /// The capabilities, `read` and `glob` included: an agent gets those
    /// of them it requests.
    pub capabilities: BTreeSet<Capability>,
    /// The permission mode for actions beyond the always-allowed.
    pub mode: PermissionMode,
    /// Hosts the operator lets any agent fetch from. `None`: the operator
    /// set no list, and the agent's own `fetch-allow` list decides. Set, a
    /// URL must be on both lists (subdomain-aware), so the operator can
    /// only narrow; an empty list allows no host. A served run's grant
    /// always sets it.
    pub fetch_hosts: Option<Vec<String>>,
    /// Hosts (`HOST` for ports 80 and 443, or `HOST:PORT`) the local
    /// sandbox's shell commands may reach, through nexo's egress proxy and
    /// nothing else; empty, the default: no network.
    pub net_hosts: Vec<String>,
    /// The rules on the `shell` tool's commands, one layer per party.
    pub commands: CommandRules,
    /// The data-flow guard: what is untrusted or private, and what a send
    /// after it meets.
    pub data_flow: DataFlow,
    /// What the run's context holds from the start: a child run holds
    /// what its parent held when it started it. Never narrowed away.
    pub inherited: crate::flow::Labels,
    /// Where tools act.
    pub sandbox: SandboxGrant,
    /// The MCP servers and tools.
    pub mcp: McpGrant,
}

impl Default for Grant {
    fn default() -> Self {
        Grant::of(DEFAULT_ALLOW)
    }
}

/// Parses a capability name as written in the WIT and in manifests.
pub fn parse_capability(name: &str) -> Result<Capability, String> {
    serde_json::from_value(serde_json::Value::String(name.to_string()))
        .map_err(|_| format!("unknown capability `{name}`: use read, glob, write, shell, fetch or search"))
}

impl Grant {
    /// Grants exactly `caps`, read-only, in memory.
    pub fn of(caps: impl IntoIterator<Item = Capability>) -> Self {
        Grant {
            capabilities: caps.into_iter().collect(),
            mode: PermissionMode::ReadOnly,
            fetch_hosts: None,
            net_hosts: Vec::new(),
            commands: CommandRules::default(),
            data_flow: DataFlow::default(),
            inherited: crate::flow::Labels::NONE,
            sandbox: SandboxGrant::default(),
            mcp: McpGrant::default(),
        }
    }

    /// The same grant, with the operator's MCP servers `names` (their
    /// settings are the run options' clients).
    pub fn with_mcp_servers(mut self, names: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.mcp.servers = names.into_iter().map(Into::into).collect();
        self
    }

    /// Grants nothing.
    pub fn none() -> Self {
        Grant::of([])
    }

    /// Requested ∩ granted.
    pub fn effective(&self, requested: &[Capability]) -> BTreeSet<Capability> {
        requested.iter().copied().filter(|c| self.capabilities.contains(c)).collect()
    }

    /// What this grant allows, as one party's [`Bounds`]. Hosts that do not
    /// parse allow nothing: the front ends refuse them before a run.
    pub fn bounds(&self) -> Bounds {
        Bounds {
            capabilities: Some(self.capabilities.clone()),
            mode: Some(self.mode),
            sandboxes: Some(vec![self.sandbox.kind]),
            fetch_hosts: self.fetch_hosts.as_ref().map(|h| HostList::new(h).unwrap_or_default()),
            net_hosts: Some(NetHosts::new(&self.net_hosts).unwrap_or_default()),
            commands: (!self.commands.is_empty()).then(|| self.commands.clone()),
            data_flow: Some(self.data_flow.clone()),
            models: None,
            mcp_servers: Some(self.mcp.servers.clone()),
            mcp_tools: self.mcp.allow.clone(),
        }
    }

    /// The same grant within `bounds`: what both allow, field by field,
    /// through the one intersection. A grant can only be narrowed. Its
    /// sandbox was chosen when the run started and stays: a narrowing
    /// takes capabilities, hosts, servers and tools away, adds command
    /// rules, and makes the mode stricter.
    pub fn narrow(mut self, bounds: &Bounds) -> Grant {
        let both = self.bounds().intersect(bounds);
        self.capabilities = both.capabilities.unwrap_or_default();
        self.mode = both.mode.unwrap_or(self.mode);
        self.fetch_hosts = both.fetch_hosts.map(|h| h.entries().to_vec());
        self.net_hosts = both.net_hosts.map(|h| h.entries().to_vec()).unwrap_or_default();
        self.commands = both.commands.unwrap_or_default();
        self.data_flow = both.data_flow.unwrap_or_default();
        self.mcp.servers = both.mcp_servers.unwrap_or_default();
        self.mcp.allow = both.mcp_tools;
        let servers = &self.mcp.servers;
        self.mcp.flags.retain(|name, _| servers.contains(name));
        self
    }

    /// The same grant narrowed to `request`, which must ask for nothing
    /// beyond it: a request wider than the grant in any field is refused,
    /// naming the field and the first item beyond (how a child run's grant
    /// comes from its parent's).
    pub fn narrowed_to(self, request: &Bounds) -> Result<Grant, (&'static str, String)> {
        if let Some(beyond) = request.beyond(&self.bounds()) {
            return Err(beyond);
        }
        Ok(self.narrow(request))
    }

    /// The same grant, as a pass narrows it: a stricter `mode`, and `revoke`
    /// taken out.
    pub fn narrowed(self, mode: Option<PermissionMode>, revoke: &[Capability]) -> Grant {
        let capabilities = Capability::ALL.iter().copied().filter(|c| !revoke.contains(c)).collect();
        self.narrow(&Bounds { capabilities: Some(capabilities), mode, ..Bounds::default() })
    }

    /// A served run's grant within its tenant's policy as it is now
    /// (`bounds`), so it goes on with no more than the tenant is allowed
    /// today. A list the run recorded as null is read as empty: a served
    /// grant's lists are always set, and older records wrote an empty one
    /// as null.
    pub fn within(mut self, bounds: &Bounds) -> Grant {
        self.fetch_hosts.get_or_insert_default();
        self.mcp.allow.get_or_insert_default();
        self.narrow(bounds)
    }

    /// What network the shell's commands get, in one line, truthfully: the
    /// proxy's hosts, none, or the host's own network when they run
    /// unconfined.
    pub fn shell_network_summary(&self) -> String {
        let unconfined = self.sandbox.shell_confinement == ConfinementSetting::None;
        match (self.sandbox.kind, self.net_hosts.is_empty()) {
            (SandboxKind::Local, _) if unconfined => "the host's own network (commands run unconfined)".into(),
            (SandboxKind::Local, true) => "none (grant hosts with --allow-net or `net-hosts`)".into(),
            (SandboxKind::Local, false) => {
                let private = match self.sandbox.net_private.as_slice() {
                    [] => String::new(),
                    ips => format!(
                        "; private addresses allowed: {}",
                        ips.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
                    ),
                };
                format!(
                    "HTTP(S) through nexo's egress proxy to {}{private}; nothing else, not even DNS",
                    self.net_hosts.join(", ")
                )
            }
            _ => "none".into(),
        }
    }

    /// The grant as a run records it: the local sandbox's directory made
    /// absolute, so a resume elsewhere acts in the same place.
    pub fn recorded(&self) -> Result<Grant, ConfigError> {
        let mut r = self.clone();
        if r.sandbox.kind == SandboxKind::Local {
            r.sandbox.cwd = Some(r.sandbox.absolute_cwd()?);
        }
        Ok(r)
    }
}

/// A grant as the store records it. Records written before the grant held
/// `read` and `glob` among its capabilities list only those beyond them,
/// as `allow`; either form reads back.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Stored {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    capabilities: Option<BTreeSet<Capability>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    allow: Vec<Capability>,
    #[serde(default)]
    mcp_servers: BTreeSet<String>,
    #[serde(default)]
    mcp_flags: BTreeMap<String, nexo_mcp::ServerConfig>,
    #[serde(default)]
    mcp_allow: Option<McpAllow>,
    fetch_hosts: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    net_hosts: Vec<String>,
    #[serde(default, skip_serializing_if = "CommandRules::is_empty")]
    command_rules: CommandRules,
    #[serde(default, skip_serializing_if = "DataFlow::is_default")]
    data_flow: DataFlow,
    #[serde(default, skip_serializing_if = "crate::flow::Labels::is_none")]
    inherited: crate::flow::Labels,
    mode: PermissionMode,
    sandbox: SandboxKind,
    #[serde(default)]
    sandbox_chosen: bool,
    cwd: Option<PathBuf>,
    image: Option<String>,
    container_runtime: RuntimeSetting,
    shell_confinement: ConfinementSetting,
}

impl From<Stored> for Grant {
    fn from(s: Stored) -> Grant {
        let capabilities = match s.capabilities {
            Some(caps) => caps,
            None => s.allow.into_iter().chain(DEFAULT_ALLOW).collect(),
        };
        Grant {
            capabilities,
            mode: s.mode,
            fetch_hosts: s.fetch_hosts,
            net_hosts: s.net_hosts,
            commands: s.command_rules,
            data_flow: s.data_flow,
            inherited: s.inherited,
            sandbox: SandboxGrant {
                kind: s.sandbox,
                chosen: s.sandbox_chosen,
                cwd: s.cwd,
                image: s.image,
                container_runtime: s.container_runtime,
                shell_confinement: s.shell_confinement,
                view: Default::default(),
                net_private: Vec::new(),
            },
            mcp: McpGrant { servers: s.mcp_servers, allow: s.mcp_allow, flags: s.mcp_flags, tables: BTreeMap::new() },
        }
    }
}

impl From<Grant> for Stored {
    fn from(g: Grant) -> Stored {
        Stored {
            capabilities: Some(g.capabilities),
            allow: Vec::new(),
            mcp_servers: g.mcp.servers,
            mcp_flags: g.mcp.flags,
            mcp_allow: g.mcp.allow,
            fetch_hosts: g.fetch_hosts,
            net_hosts: g.net_hosts,
            command_rules: g.commands,
            data_flow: g.data_flow,
            inherited: g.inherited,
            mode: g.mode,
            sandbox: g.sandbox.kind,
            sandbox_chosen: g.sandbox.chosen,
            cwd: g.sandbox.cwd,
            image: g.sandbox.image,
            container_runtime: g.sandbox.container_runtime,
            shell_confinement: g.sandbox.shell_confinement,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_record_reads_back_with_read_and_glob() {
        let old = serde_json::json!({
            "mcp-servers": ["fs"], "mcp-flags": {}, "mcp-allow": null, "fetch-hosts": null,
            "allow": ["write"], "mode": "auto", "sandbox": "local", "sandbox-chosen": true,
            "cwd": "/srv/w", "image": null, "container-runtime": "docker", "shell-confinement": "auto"
        });
        let grant: Grant = serde_json::from_value(old).unwrap();
        assert_eq!(grant.capabilities, [Capability::Read, Capability::Glob, Capability::Write].into());
        assert_eq!((grant.mode, grant.sandbox.kind), (PermissionMode::Auto, SandboxKind::Local));
        assert_eq!(grant.sandbox.local_dir(), Some(std::path::Path::new("/srv/w")));
        assert_eq!(grant.mcp.servers, ["fs".to_string()].into());
        // What is written reads back the same, even a grant of nothing, and
        // what a child run inherits.
        let mut child = grant.clone();
        child.inherited = crate::flow::Labels::UNTRUSTED.with(crate::flow::Labels::PRIVATE);
        child.data_flow.private = FlowAction::Refuse;
        let written = serde_json::to_value(&child).unwrap();
        assert_eq!(written["inherited"], serde_json::json!(["untrusted", "private"]), "{written}");
        for grant in [grant, Grant::none(), child] {
            let back: Grant = serde_json::from_value(serde_json::to_value(&grant).unwrap()).unwrap();
            assert_eq!(back, grant);
        }
    }

    #[test]
    fn a_narrowing_only_takes_away() {
        let mut grant = Grant::of(Capability::ALL.iter().copied());
        grant.mode = PermissionMode::Auto;
        grant.fetch_hosts = Some(vec!["docs.rs".into(), "example.com".into()]);
        grant.mcp.servers = ["fs".to_string(), "web".to_string()].into();
        let bounds = Bounds {
            capabilities: Some([Capability::Read, Capability::Shell, Capability::Write].into()),
            mode: Some(PermissionMode::Approve),
            fetch_hosts: Some(HostList::new(["api.docs.rs", "evil.example"]).unwrap()),
            mcp_servers: Some(["fs".to_string(), "gmail".to_string()].into()),
            mcp_tools: Some(McpAllow::new(["fs/read"])),
            ..Bounds::default()
        };
        let narrowed = grant.clone().narrow(&bounds);
        assert_eq!(narrowed.capabilities, [Capability::Read, Capability::Shell, Capability::Write].into());
        assert_eq!(narrowed.mode, PermissionMode::Approve);
        assert_eq!(narrowed.fetch_hosts, Some(vec!["api.docs.rs".to_string()]));
        assert_eq!(narrowed.mcp.servers, ["fs".to_string()].into());
        assert_eq!(narrowed.mcp.allow, Some(McpAllow::new(["fs/read"])));
        // A stricter grant is not widened by looser bounds.
        let strict = Grant::of([Capability::Read]).narrow(&Bounds {
            capabilities: Some(Capability::ALL.iter().copied().collect()),
            mode: Some(PermissionMode::Auto),
            ..Bounds::default()
        });
        assert_eq!((strict.capabilities, strict.mode), ([Capability::Read].into(), PermissionMode::ReadOnly));
        // A revoked capability is gone, `read` included.
        let revoked = grant.narrowed(Some(PermissionMode::ReadOnly), &[Capability::Read, Capability::Shell]);
        assert!(
            !revoked.capabilities.contains(&Capability::Read) && !revoked.capabilities.contains(&Capability::Shell)
        );
        assert_eq!(revoked.mode, PermissionMode::ReadOnly);
    }

    #[test]
    fn a_served_record_with_null_lists_stays_without_hosts_or_tools() {
        let grant = Grant::default();
        assert_eq!((&grant.fetch_hosts, &grant.mcp.allow), (&None, &None));
        let policy = Bounds {
            fetch_hosts: Some(HostList::new(["docs.rs"]).unwrap()),
            mcp_tools: Some(McpAllow::new(["read"])),
            ..Bounds::default()
        };
        let within = grant.within(&policy);
        assert_eq!(within.fetch_hosts, Some(vec![]));
        assert_eq!(within.mcp.allow, Some(McpAllow::default()));
    }
}
