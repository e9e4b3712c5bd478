//! A tenant's policy: the operator's ceiling on what the tenant's runs may
//! be granted, and how a run request narrows it.
//!
//! The policy is stored as JSON on the tenant's row and written by the
//! operator (`nexo tenant policy`, or the admin API). A run request can ask
//! for less than the policy allows (fewer capabilities, a stricter mode,
//! fewer fetch hosts, one of the allowed models) and never for more: a
//! request beyond the ceiling is refused with the item that exceeds it.
//! An empty list means nothing, in the policy and in a request alike; the
//! effective grant is the policy ∩ the request ∩ the agent's manifest,
//! computed by [`Bounds::intersect`], the authority's one intersection.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use nexo_egress::HostList;
use serde::{Deserialize, Serialize};

use crate::config::ConfigFile;
use crate::grant::{
    Bounds, CommandRule, CommandRules, DEFAULT_ALLOW, DataFlow, Grant, McpAllow, McpGrant, SandboxGrant,
};
use crate::manifest::{AgentManifest, Capability, PermissionMode, SandboxKind};
use crate::quota::Quotas;

/// The operator's ceiling for one tenant.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Policy {
    /// Capabilities beyond `read` and `glob` (which every run has).
    #[serde(default)]
    pub allow: Vec<Capability>,
    /// The least strict permission mode a run may get. `ask` needs a
    /// terminal, so a served run uses `approve` (durable approvals) instead.
    #[serde(default = "read_only")]
    pub mode: PermissionMode,
    /// The sandboxes a run may ask for; the first is the default.
    #[serde(default = "virtual_only")]
    pub sandboxes: Vec<SandboxKind>,
    /// Hosts `fetch` may reach (the same entries as `--fetch-host`); empty
    /// or left out: none.
    #[serde(default)]
    pub fetch_hosts: Vec<String>,
    /// Hosts (`HOST` for ports 80 and 443, or `HOST:PORT`) the local
    /// sandbox's shell commands may reach through nexo's egress proxy (the
    /// same entries as `--allow-net`); empty or left out: no network.
    #[serde(default)]
    pub net_hosts: Vec<String>,
    /// The operator's models (`[serve.models.NAME]`) the tenant may use;
    /// the first is the default. None: the tenant's agents cannot prompt.
    #[serde(default)]
    pub models: Vec<String>,
    /// The operator's MCP servers (`[mcp.NAME]`) the tenant's runs get.
    #[serde(default)]
    pub mcp_servers: Vec<String>,
    /// The MCP tools that pass unasked (`tool` or `server/tool` names), as
    /// the agent's own `mcp-allow` narrows them; empty or left out: none.
    #[serde(default)]
    pub mcp_allow: Vec<String>,
    /// Ordered rules on the `shell` tool's commands (allow, ask, deny by
    /// argv prefix), laid over the mode; empty or left out: none.
    #[serde(default)]
    pub command_rules: Vec<CommandRule>,
    /// The data-flow guard: what is untrusted or private, and what a call
    /// that can send data out meets once a run has read it; left out: the
    /// default (ask before a send after untrusted and private content).
    #[serde(default)]
    pub data_flow: DataFlow,
    /// The operator's hooks (`[serve.hooks.NAME]`) asked about each of the
    /// tenant's runs' calls and prompts, in this order. A hook only
    /// narrows; a run that goes on meets the policy's hooks as they are then.
    #[serde(default)]
    pub hooks: Vec<String>,
    /// Limits on what the tenant's runs use (`[quotas]`).
    #[serde(default)]
    pub quotas: Quotas,
    /// Where the tenant may pull plugins from (`POST /v1/plugins` with a
    /// `reference`): scopes as `[[registries.trust]]` writes them (a
    /// registry, or a registry and a repository prefix); empty: nowhere.
    /// The operator's `[registries]` (insecure list, trust rules) apply.
    #[serde(default)]
    pub registries: Vec<String>,
    /// Who may accept a new version of a plugin the tenant pulls by
    /// reference when it asks for more authority than the version accepted
    /// before: the operator (the default), or the tenant itself.
    #[serde(default)]
    pub wider_authority: WiderAuthority,
}

/// Who accepts a pulled plugin's wider authority ([`Policy::wider_authority`]).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum WiderAuthority {
    /// The operator (`POST /v1/tenants/{name}/accepted-plugins`).
    #[default]
    Operator,
    /// The tenant, by asking for it (`"accept_authority": true`).
    Tenant,
}

fn read_only() -> PermissionMode {
    PermissionMode::ReadOnly
}

fn virtual_only() -> Vec<SandboxKind> {
    vec![SandboxKind::Virtual]
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            allow: Vec::new(),
            mode: read_only(),
            sandboxes: virtual_only(),
            fetch_hosts: Vec::new(),
            net_hosts: Vec::new(),
            models: Vec::new(),
            mcp_servers: Vec::new(),
            mcp_allow: Vec::new(),
            command_rules: Vec::new(),
            data_flow: DataFlow::default(),
            hooks: Vec::new(),
            quotas: Default::default(),
            registries: Vec::new(),
            wider_authority: WiderAuthority::Operator,
        }
    }
}

impl Policy {
    /// Parses a policy from JSON or TOML text (a file given to `nexo tenant
    /// policy`), and checks it against the operator's configuration.
    pub fn parse(text: &str, config: &ConfigFile) -> Result<Policy, String> {
        let policy: Policy = match serde_json::from_str(text) {
            Ok(p) => p,
            Err(json) => match toml::from_str(text) {
                Ok(p) => p,
                Err(_) if text.trim_start().starts_with('{') => return Err(format!("not a valid policy: {json}")),
                Err(toml) => return Err(format!("not a valid policy: {}", toml.message())),
            },
        };
        policy.check(config)?;
        Ok(policy)
    }

    /// Reads the policy a tenant's row holds (written by this module, so a
    /// failure means the row was edited by hand).
    pub fn from_stored(value: &serde_json::Value) -> Result<Policy, String> {
        serde_json::from_value(value.clone()).map_err(|e| {
            format!("the tenant's stored policy cannot be read ({e}); set it again with `nexo tenant policy`")
        })
    }

    /// Whether the policy names only what the operator configured.
    pub fn check(&self, config: &ConfigFile) -> Result<(), String> {
        if self.mode == PermissionMode::Ask {
            return Err(
                "mode `ask` needs a terminal, which a served run has not; use `approve` (durable approvals)".into()
            );
        }
        if self.sandboxes.is_empty() {
            return Err("`sandboxes` is empty: list at least `virtual`".into());
        }
        if let Some(kind) = self.sandboxes.iter().find(|k| !served(**k)) {
            return Err(format!(
                "`sandboxes` lists `{}`, which a served run cannot work in: list `virtual` and `local` only",
                kind.as_str()
            ));
        }
        nexo_egress::HostList::new(self.fetch_hosts.iter()).map_err(|e| format!("fetch-hosts: {e}"))?;
        nexo_egress::NetHosts::new(self.net_hosts.iter()).map_err(|e| format!("net-hosts: {e}"))?;
        for entry in &self.mcp_allow {
            crate::plugin::validate::mcp_allow_entry(entry).map_err(|e| format!("mcp-allow: {e}"))?;
        }
        for scope in &self.registries {
            crate::registry::check_scope(scope).map_err(|e| format!("registries: `{scope}`: {e}"))?;
            // A tenant's pull is this node's request, with its credentials, to any host `*` names.
            if scope.trim() == "*" {
                return Err("registries: `*` would let the tenant have this node reach any host, with the \
                            node's registry credentials: list the registries (or repository prefixes) instead"
                    .into());
            }
        }
        let dollars = [
            ("usd-per-run", self.quotas.usd_per_run),
            ("usd-per-session", self.quotas.usd_per_session),
            ("usd-per-day", self.quotas.usd_per_day),
        ];
        for (key, usd) in dollars {
            if let Some(usd) = usd
                && (!usd.is_finite() || usd <= 0.0)
            {
                return Err(format!("quotas: {key} is {usd}: it is US dollars, more than zero"));
            }
        }
        let priced = dollars.iter().any(|(_, usd)| usd.is_some());
        for model in &self.models {
            let Some(table) = config.serve.models.get(model) else {
                return Err(format!(
                    "the model `{model}` is not one of the operator's ([serve.models.{model}] in the config file)"
                ));
            };
            if priced && table.price.is_none() {
                return Err(format!(
                    "quotas: a budget in dollars (usd-per-run, usd-per-session, usd-per-day) needs prices, and the \
                     model `{model}` has none: add `price = {{ input = …, output = … }}` (dollars per million \
                     tokens) to [serve.models.{model}]"
                ));
            }
        }
        for hook in &self.hooks {
            if !config.serve.hooks.contains_key(hook) {
                return Err(format!(
                    "the hook `{hook}` is not one of the operator's ([serve.hooks] in the config file)"
                ));
            }
        }
        for server in &self.mcp_servers {
            if !config.mcp.contains_key(server) {
                return Err(format!("the MCP server `{server}` is not configured ([mcp.{server}] in the config file)"));
            }
        }
        if let Some((key, server)) = self.data_flow.unknown_server(|s| self.mcp_servers.iter().any(|m| m == s)) {
            return Err(format!(
                "data-flow: `{key}` names the MCP server `{server}`, which is not among the policy's `mcp-servers`: \
                 fix the name, or add the server"
            ));
        }
        Ok(())
    }
}

/// What a run request asks for, within the policy. Every field is
/// optional: what is left out takes the policy's value; a list, even an
/// empty one, is all the run gets (`"fetch-hosts": []` is no host).
#[derive(Deserialize, Debug, Clone, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Narrowing {
    /// Capabilities beyond `read` and `glob`: a subset of the policy's.
    pub allow: Option<Vec<Capability>>,
    /// A mode at least as strict as the policy's.
    pub mode: Option<PermissionMode>,
    /// One of the policy's sandboxes.
    pub sandbox: Option<SandboxKind>,
    /// Hosts within the policy's fetch hosts (a subdomain of one is).
    pub fetch_hosts: Option<Vec<String>>,
    /// Hosts and ports within the policy's `net-hosts`, for the shell's
    /// commands.
    pub net_hosts: Option<Vec<String>>,
    /// One of the policy's models.
    pub model: Option<String>,
    /// A subset of the policy's MCP servers.
    pub mcp_servers: Option<Vec<String>>,
    /// MCP tools within the policy's `mcp-allow`.
    pub mcp_allow: Option<Vec<String>>,
}

/// A served run as its tenant's policy lets it start: the policy ∩ the
/// request ∩ the agent's manifest ([`Bounds::intersect`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Granted {
    /// The run's grant, as it is recorded.
    pub grant: Grant,
    /// The operator's model it uses, by name.
    pub model: Option<String>,
}

impl Policy {
    /// The policy's bounds: `read` and `glob` come with every grant.
    /// Hosts that do not parse allow nothing (a stored policy was checked
    /// when it was set).
    pub fn bounds(&self) -> Bounds {
        Bounds {
            capabilities: Some(with_always(&self.allow)),
            mode: Some(self.mode),
            sandboxes: Some(self.sandboxes.clone()),
            fetch_hosts: Some(HostList::new(&self.fetch_hosts).unwrap_or_default()),
            net_hosts: Some(nexo_egress::NetHosts::new(&self.net_hosts).unwrap_or_default()),
            commands: Some(CommandRules::layer(self.command_rules.clone())),
            data_flow: Some(self.data_flow.clone()),
            models: Some(self.models.clone()),
            mcp_servers: Some(self.mcp_servers.iter().cloned().collect()),
            mcp_tools: Some(McpAllow::new(self.mcp_allow.iter().cloned())),
        }
    }

    /// The request's bounds, or the first thing it asks for beyond the
    /// policy: a check that needs no plugin.
    pub fn admit(&self, request: &Narrowing) -> Result<Bounds, String> {
        if request.mode == Some(PermissionMode::Ask) {
            return Err("mode `ask` needs a terminal; use `approve` for durable approvals".into());
        }
        let asked = request.bounds()?;
        match asked.beyond(&self.bounds()) {
            Some((field, item)) => Err(beyond_message(self, field, &item)),
            None => Ok(asked),
        }
    }

    /// The policy narrowed by `request` and by what the agent's `manifest`
    /// asks for, or the first thing the request asks for beyond the policy.
    /// A local sandbox is the tenant's `workspace`, never anything else; the
    /// MCP servers are those of the operator's `config` the run may reach.
    pub fn narrow(
        &self,
        request: &Narrowing,
        manifest: &AgentManifest,
        workspace: &Path,
        config: &ConfigFile,
    ) -> Result<Granted, String> {
        let asked = self.admit(request)?;
        // The one intersection: policy ∩ request ∩ manifest.
        let both = self.bounds().intersect(&asked).intersect(&Bounds::of_manifest(manifest));
        let sandbox =
            both.sandboxes.as_deref().and_then(|s| s.iter().copied().find(|k| served(*k))).ok_or_else(|| {
                format!(
                    "no sandbox is both in the tenant's policy ({}) and what the agent expects ({})",
                    self.sandboxes.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "),
                    manifest.sandbox.map_or("any", |s| s.as_str())
                )
            })?;
        let mode = match both.mode.unwrap_or(PermissionMode::ReadOnly) {
            // No terminal to ask on: the stricter durable approval.
            PermissionMode::Ask => PermissionMode::Approve,
            mode => mode,
        };
        let tables: BTreeMap<_, _> = config
            .mcp
            .iter()
            .filter(|(name, _)| both.mcp_servers.as_ref().is_some_and(|s| s.contains(*name)))
            .map(|(n, c)| (n.clone(), c.clone()))
            .collect();
        let grant = Grant {
            capabilities: both.capabilities.unwrap_or_default(),
            mode,
            // Always set: an empty list is no host and no tool, never "the
            // agent's list decides".
            fetch_hosts: Some(both.fetch_hosts.map(|h| h.entries().to_vec()).unwrap_or_default()),
            net_hosts: both.net_hosts.map(|h| h.entries().to_vec()).unwrap_or_default(),
            commands: both.commands.unwrap_or_default(),
            data_flow: both.data_flow.unwrap_or_default(),
            inherited: crate::flow::Labels::NONE,
            sandbox: SandboxGrant {
                kind: sandbox,
                chosen: true,
                cwd: (sandbox == SandboxKind::Local).then(|| workspace.to_path_buf()),
                view: config.sandbox.view(),
                net_private: config.sandbox.net_allow_private.clone(),
                // The operator's auto-detection confines a granted shell.
                ..SandboxGrant::default()
            },
            mcp: McpGrant {
                servers: tables.keys().cloned().collect(),
                allow: Some(both.mcp_tools.unwrap_or_default()),
                flags: BTreeMap::new(),
                tables,
            },
        };
        Ok(Granted { grant, model: both.models.and_then(|m| m.into_iter().next()) })
    }
}

impl Narrowing {
    /// The request's bounds; an entry that is not a host is refused.
    pub fn bounds(&self) -> Result<Bounds, String> {
        let fetch_hosts = match &self.fetch_hosts {
            Some(hosts) => Some(HostList::new(hosts).map_err(|e| format!("fetch-hosts: {e}"))?),
            None => None,
        };
        let net_hosts = match &self.net_hosts {
            Some(hosts) => Some(nexo_egress::NetHosts::new(hosts).map_err(|e| format!("net-hosts: {e}"))?),
            None => None,
        };
        Ok(Bounds {
            capabilities: self.allow.as_ref().map(|a| with_always(a)),
            mode: self.mode,
            sandboxes: self.sandbox.map(|s| vec![s]),
            fetch_hosts,
            net_hosts,
            commands: None,
            data_flow: None,
            models: self.model.as_ref().map(|m| vec![m.clone()]),
            mcp_servers: self.mcp_servers.as_ref().map(|s| s.iter().cloned().collect()),
            mcp_tools: self.mcp_allow.as_ref().map(|t| McpAllow::new(t.iter().cloned())),
        })
    }
}

/// The refusal of a request that asks for `item` of `field` beyond `policy`.
fn beyond_message(policy: &Policy, field: &str, item: &str) -> String {
    match field {
        "capabilities" => {
            format!("the capability `{item}` is beyond the tenant's policy (it allows: {})", names(&policy.allow))
        }
        "mode" => {
            format!("the mode `{item}` is less strict than the tenant's policy allows (`{}`)", policy.mode.as_str())
        }
        "sandboxes" => format!("the `{item}` sandbox is beyond the tenant's policy"),
        "fetch-hosts" => format!(
            "the fetch host `{item}` is beyond the tenant's policy (it allows: {})",
            list_or_none(&policy.fetch_hosts)
        ),
        "net-hosts" => format!(
            "the network host `{item}` is beyond the tenant's policy (it allows: {})",
            list_or_none(&policy.net_hosts)
        ),
        "models" => format!("the model `{item}` is not one the tenant may use ({})", list_or_none(&policy.models)),
        "mcp-servers" => format!(
            "the MCP server `{item}` is beyond the tenant's policy (it allows: {})",
            list_or_none(&policy.mcp_servers)
        ),
        _ => format!(
            "the MCP tool `{item}` is beyond the tenant's `mcp-allow` (it allows: {})",
            list_or_none(&policy.mcp_allow)
        ),
    }
}

fn list_or_none(items: &[String]) -> String {
    if items.is_empty() { "none".into() } else { items.join(", ") }
}

/// Whether a served run can work in `kind`: in memory or in the tenant's
/// workspace, never in a container or a remote sandbox.
fn served(kind: SandboxKind) -> bool {
    matches!(kind, SandboxKind::Virtual | SandboxKind::Local)
}

impl Policy {
    /// The policy's hooks as a run records them: the operator's files, by
    /// the names the policy gives (a name the config file no longer has is
    /// left out of a new run's; a run that goes on is refused for it, as
    /// hooks fail closed).
    pub fn hook_files(&self, config: &ConfigFile) -> Result<Vec<crate::hooks::HookFile>, String> {
        self.hooks
            .iter()
            .map(|name| match config.serve.hooks.get(name) {
                Some(path) => Ok(crate::hooks::HookFile {
                    path: path.clone(),
                    sha256: String::new(),
                    owner: crate::hooks::Owner::Operator,
                }),
                None => {
                    Err(format!("its tenant's policy names the hook `{name}`, which the operator no longer configures"))
                }
            })
            .collect()
    }
}

impl Granted {
    /// What the run got, as the API shows it: capabilities beyond `read`
    /// and `glob`, mode, sandbox, hosts, model, MCP servers and tools.
    pub fn to_json(&self) -> serde_json::Value {
        let g = &self.grant;
        serde_json::json!({
            "allow": g.capabilities.iter().filter(|c| !is_always(**c)).map(|c| c.as_str()).collect::<Vec<_>>(),
            "mode": g.mode.as_str(),
            "sandbox": g.sandbox.kind.as_str(),
            "fetch_hosts": g.fetch_hosts.as_deref().unwrap_or_default(),
            "net_hosts": g.net_hosts,
            "model": self.model,
            "mcp_servers": g.mcp.servers,
            "mcp_tools": g.mcp.allow.as_ref().map(|t| t.entries()).unwrap_or_default(),
            "command_rules": g.commands.layers().iter().flatten().map(|r| r.to_string()).collect::<Vec<_>>(),
            "data_flow": g.data_flow,
        })
    }
}

/// The capabilities `allow` grants, with `read` and `glob`.
fn with_always(allow: &[Capability]) -> BTreeSet<Capability> {
    allow.iter().copied().chain(DEFAULT_ALLOW).collect()
}

/// `read` and `glob` come with every grant.
fn is_always(c: Capability) -> bool {
    DEFAULT_ALLOW.contains(&c)
}

fn names(caps: &[Capability]) -> String {
    if caps.is_empty() {
        return "read and glob only".into();
    }
    caps.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(", ")
}

/// The tenant's quotas now, from its stored policy; `None` if the tenant
/// or its policy cannot be read. A pass reads them once.
pub async fn tenant_quotas(store: &dyn nexo_store::Store, tenant: &str) -> Option<crate::quota::Quotas> {
    let stored = store.tenant(tenant).await.ok().flatten()?;
    Policy::from_stored(&stored.policy).ok().map(|p| p.quotas)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::quota::{DEFAULT_OPEN_STREAMS, DEFAULT_PLUGIN_BYTES, DEFAULT_PLUGINS, DEFAULT_WORKSPACE_FILES};

    /// What a served run got, field by field, as the API shows it.
    #[derive(Debug)]
    struct View {
        allow: Vec<Capability>,
        mode: PermissionMode,
        sandbox: SandboxKind,
        fetch_hosts: Vec<String>,
        model: Option<String>,
        mcp_servers: Vec<String>,
        mcp_tools: Vec<String>,
        grant: Grant,
    }

    /// The operator's configuration: the MCP servers policies name.
    fn config() -> ConfigFile {
        let server = nexo_mcp::ServerConfig { command: Some("true".into()), ..Default::default() };
        let mcp: BTreeMap<String, _> = ["fs", "gmail"].iter().map(|s| (s.to_string(), server.clone())).collect();
        ConfigFile { mcp, ..Default::default() }
    }

    fn narrow(policy: &Policy, request: &Narrowing, manifest: &AgentManifest) -> Result<View, String> {
        let Granted { grant, model } = policy.narrow(request, manifest, Path::new("/nonexistent"), &config())?;
        let json = Granted { grant: grant.clone(), model: model.clone() }.to_json();
        let strings = |key: &str| -> Vec<String> { serde_json::from_value(json[key].clone()).unwrap() };
        Ok(View {
            allow: grant.capabilities.iter().copied().filter(|c| !is_always(*c)).collect(),
            mode: grant.mode,
            sandbox: grant.sandbox.kind,
            fetch_hosts: strings("fetch_hosts"),
            model,
            mcp_servers: strings("mcp_servers"),
            mcp_tools: strings("mcp_tools"),
            grant,
        })
    }

    fn policy() -> Policy {
        Policy {
            allow: vec![Capability::Write, Capability::Fetch],
            mode: PermissionMode::Auto,
            sandboxes: vec![SandboxKind::Virtual, SandboxKind::Local],
            fetch_hosts: vec!["example.com".into(), "docs.rs".into()],
            models: vec!["small".into(), "large".into()],
            mcp_servers: vec!["fs".into()],
            mcp_allow: vec!["fs/read_file".into()],
            ..Policy::default()
        }
    }

    /// An agent that asks for everything.
    fn greedy() -> AgentManifest {
        AgentManifest {
            name: "greedy".into(),
            capabilities: Capability::ALL.to_vec(),
            fetch_allow: vec!["example.com".into(), "docs.rs".into(), "evil.example".into()],
            mcp_servers: vec!["fs".into(), "gmail".into()],
            mcp_allow: vec!["read_file".into(), "write_file".into()],
            ..AgentManifest::default()
        }
    }

    /// A budget in dollars needs every model the policy names to have a
    /// price, and is more than zero.
    #[test]
    fn a_budget_in_dollars_needs_priced_models() {
        let mut config = crate::config::ConfigFile::default();
        config.serve.models.insert("m".into(), crate::config::ModelTable::default());
        let text = r#"{"models": ["m"], "quotas": {"usd-per-day": 5}}"#;
        let err = Policy::parse(text, &config).unwrap_err();
        assert!(err.contains("the model `m` has none") && err.contains("[serve.models.m]"), "{err}");
        let priced = crate::config::ModelTable {
            price: Some(crate::spend::Price { input: 1.0, output: 2.0 }),
            ..crate::config::ModelTable::default()
        };
        config.serve.models.insert("m".into(), priced);
        assert_eq!(Policy::parse(text, &config).unwrap().quotas.usd_per_day, Some(5.0));
        let err = Policy::parse(r#"{"quotas": {"usd-per-run": 0}}"#, &config).unwrap_err();
        assert!(err.contains("usd-per-run is 0"), "{err}");
    }

    #[test]
    fn storage_and_streams_have_a_cap_when_the_policy_sets_none() {
        let unset = Policy::parse("{}", &crate::config::ConfigFile::default()).unwrap().quotas;
        assert_eq!(unset.concurrent_runs, None, "the other quotas stay unlimited");
        assert_eq!(
            (unset.plugin_bytes_cap(), unset.plugins_cap(), unset.open_streams_cap()),
            (DEFAULT_PLUGIN_BYTES, DEFAULT_PLUGINS, DEFAULT_OPEN_STREAMS)
        );
        assert_eq!(unset.workspace_files_cap(), DEFAULT_WORKSPACE_FILES);
        let text = "[quotas]\nplugin-bytes = 1000\nplugins = 2\nopen-streams = 0\nworkspace-files = 5\n";
        let set = Policy::parse(text, &crate::config::ConfigFile::default()).unwrap().quotas;
        assert_eq!((set.plugin_bytes_cap(), set.plugins_cap(), set.open_streams_cap()), (1000, 2, 0));
        assert_eq!(set.workspace_files_cap(), 5);
    }

    #[test]
    fn an_empty_request_gets_the_policy_as_the_agent_narrows_it() {
        let e = narrow(&policy(), &Narrowing::default(), &greedy()).unwrap();
        assert_eq!(e.allow, vec![Capability::Write, Capability::Fetch]);
        assert_eq!(e.mode, PermissionMode::Auto);
        assert_eq!(e.sandbox, SandboxKind::Virtual);
        assert_eq!(e.fetch_hosts, ["example.com", "docs.rs"]);
        assert_eq!(e.model.as_deref(), Some("small"));
        assert_eq!(e.mcp_servers, ["fs"]);
        assert_eq!(e.mcp_tools, ["fs/read_file"]);
        let modest = AgentManifest { name: "modest".into(), capabilities: vec![Capability::Read], ..greedy() };
        let e = narrow(&policy(), &Narrowing::default(), &modest).unwrap();
        assert!(e.allow.is_empty(), "the agent did not ask for write or fetch");
    }

    #[test]
    fn a_request_narrows() {
        let asked = Narrowing {
            allow: Some(vec![Capability::Read, Capability::Write]),
            mode: Some(PermissionMode::Approve),
            sandbox: Some(SandboxKind::Local),
            fetch_hosts: Some(vec!["API.Docs.RS.".into()]),
            net_hosts: None,
            model: Some("large".into()),
            mcp_servers: Some(vec!["fs".into()]),
            mcp_allow: Some(vec![]),
        };
        let e = narrow(&policy(), &asked, &greedy()).unwrap();
        assert_eq!(e.allow, vec![Capability::Write]);
        assert_eq!(e.mode, PermissionMode::Approve);
        assert_eq!(e.sandbox, SandboxKind::Local);
        assert_eq!(e.fetch_hosts, ["api.docs.rs"], "a subdomain of a policy host, normalized");
        assert_eq!(e.model.as_deref(), Some("large"));
        assert!(e.mcp_tools.is_empty());
    }

    /// The shell's network: a request narrows the policy's hosts and ports,
    /// and asking beyond them is refused, naming the entry.
    #[test]
    fn a_request_narrows_the_shells_network() {
        let policy = Policy { net_hosts: vec!["pypi.org".into(), "api.test:8443".into()], ..policy() };
        let e = narrow(&policy, &Narrowing::default(), &greedy()).unwrap();
        assert_eq!(e.grant.net_hosts, ["pypi.org", "api.test:8443"], "left out: the policy's");
        let asked = Narrowing { net_hosts: Some(vec!["files.pypi.org:443".into()]), ..Default::default() };
        assert_eq!(narrow(&policy, &asked, &greedy()).unwrap().grant.net_hosts, ["files.pypi.org:443"]);
        let empty = Narrowing { net_hosts: Some(vec![]), ..Default::default() };
        assert!(narrow(&policy, &empty, &greedy()).unwrap().grant.net_hosts.is_empty());
        for (wider, named) in
            [("api.test", "api.test"), ("evil.example", "evil.example"), ("pypi.org:22", "pypi.org:22")]
        {
            let asked = Narrowing { net_hosts: Some(vec![wider.into()]), ..Default::default() };
            let e = narrow(&policy, &asked, &greedy()).unwrap_err();
            assert!(e.contains(&format!("network host `{named}`")) && e.contains("pypi.org"), "{e}");
        }
        let bad = Narrowing { net_hosts: Some(vec!["pypi.org:0".into()]), ..Default::default() };
        assert!(narrow(&policy, &bad, &greedy()).unwrap_err().contains("net-hosts"));
        assert_eq!(policy.bounds().net_hosts.map(|h| h.entries().to_vec()).unwrap_or_default().len(), 2);
    }

    #[test]
    fn an_empty_list_is_nothing_wherever_it_is_written() {
        let empty = Narrowing {
            allow: Some(vec![]),
            fetch_hosts: Some(vec![]),
            mcp_servers: Some(vec![]),
            mcp_allow: Some(vec![]),
            ..Default::default()
        };
        let e = narrow(&policy(), &empty, &greedy()).unwrap();
        assert!(e.allow.is_empty() && e.fetch_hosts.is_empty() && e.mcp_servers.is_empty() && e.mcp_tools.is_empty());
        let bare = Policy { sandboxes: vec![SandboxKind::Virtual], ..Policy::default() };
        let e = narrow(&bare, &Narrowing::default(), &greedy()).unwrap();
        assert!(e.allow.is_empty() && e.fetch_hosts.is_empty() && e.mcp_servers.is_empty() && e.mcp_tools.is_empty());
        assert_eq!((e.mode, e.model), (PermissionMode::ReadOnly, None));
        let shy = AgentManifest { fetch_allow: vec![], mcp_allow: vec![], ..greedy() };
        let e = narrow(&policy(), &Narrowing::default(), &shy).unwrap();
        assert!(e.fetch_hosts.is_empty() && e.mcp_tools.is_empty(), "{e:?}");
        // And the grant a run records keeps it so: an empty list, not "no list".
        assert_eq!(e.grant.fetch_hosts, Some(vec![]));
        assert_eq!(e.grant.mcp.allow, Some(McpAllow::default()));
    }

    #[test]
    fn a_request_never_widens() {
        let p = Policy { mode: PermissionMode::Approve, sandboxes: vec![SandboxKind::Virtual], ..policy() };
        let cases = [
            (Narrowing { allow: Some(vec![Capability::Shell]), ..Default::default() }, "`shell`"),
            (Narrowing { mode: Some(PermissionMode::Auto), ..Default::default() }, "`auto` is less strict"),
            (Narrowing { mode: Some(PermissionMode::Ask), ..Default::default() }, "needs a terminal"),
            (Narrowing { sandbox: Some(SandboxKind::Local), ..Default::default() }, "`local` sandbox"),
            (Narrowing { fetch_hosts: Some(vec!["evil.example".into()]), ..Default::default() }, "evil.example"),
            (Narrowing { fetch_hosts: Some(vec!["rs".into()]), ..Default::default() }, "`rs`"),
            (Narrowing { fetch_hosts: Some(vec!["docs.rs:443".into()]), ..Default::default() }, "port"),
            (Narrowing { model: Some("gpt-9".into()), ..Default::default() }, "`gpt-9`"),
            (Narrowing { model: Some("Small".into()), ..Default::default() }, "`Small`"),
            (Narrowing { mcp_servers: Some(vec!["gmail".into()]), ..Default::default() }, "`gmail`"),
            (Narrowing { mcp_allow: Some(vec!["read_file".into()]), ..Default::default() }, "`read_file`"),
            (Narrowing { mcp_allow: Some(vec!["FS/read_file".into()]), ..Default::default() }, "`FS/read_file`"),
        ];
        for (asked, needle) in cases {
            let err = narrow(&p, &asked, &greedy()).unwrap_err();
            assert!(err.contains(needle), "{err:?} should name {needle}");
        }
    }

    #[test]
    fn an_agent_that_expects_a_sandbox_the_policy_lacks_is_refused() {
        let local = AgentManifest { sandbox: Some(crate::manifest::SandboxKind::Local), ..greedy() };
        assert_eq!(narrow(&policy(), &Narrowing::default(), &local).unwrap().sandbox, SandboxKind::Local);
        let p = Policy { sandboxes: vec![SandboxKind::Virtual], ..policy() };
        assert!(narrow(&p, &Narrowing::default(), &local).unwrap_err().contains("no sandbox"));
        // A stored policy with no sandbox (edited by hand) refuses, never panics.
        let p = Policy { sandboxes: vec![], ..policy() };
        assert!(narrow(&p, &Narrowing::default(), &greedy()).is_err());
    }

    #[test]
    fn read_only_is_stricter_than_every_mode() {
        let asked = Narrowing { mode: Some(PermissionMode::ReadOnly), ..Default::default() };
        assert_eq!(narrow(&policy(), &asked, &greedy()).unwrap().mode, PermissionMode::ReadOnly);
        let asking = AgentManifest { permissions: Some(PermissionMode::Ask), ..greedy() };
        assert_eq!(narrow(&policy(), &Narrowing::default(), &asking).unwrap().mode, PermissionMode::Approve);
    }

    #[test]
    fn policies_parse_from_json_and_toml_and_are_checked() {
        let config = crate::config::ConfigFile::default();
        let p = Policy::parse(r#"{"allow": ["write"], "mode": "approve"}"#, &config).unwrap();
        assert_eq!(p.allow, vec![Capability::Write]);
        let p = Policy::parse("allow = [\"fetch\"]\nfetch-hosts = [\"example.com\"]\n", &config).unwrap();
        assert_eq!(p.fetch_hosts, vec!["example.com".to_string()]);
        assert!(Policy::parse(r#"{"allow": ["teleport"]}"#, &config).unwrap_err().contains("not a valid policy"));
        assert!(Policy::parse("mode = \"ask\"\n", &config).unwrap_err().contains("needs a terminal"));
        assert!(Policy::parse("models = [\"gpt\"]\n", &config).unwrap_err().contains("[serve.models.gpt]"));
        assert!(Policy::parse("sandboxes = []\n", &config).unwrap_err().contains("empty"));
        // An mcp-allow entry is an exact name, as in a manifest: no pattern, no path.
        for bad in ["*", "a/b/c", "tests/*", "", "/echo"] {
            let text = serde_json::json!({"mcp-allow": [bad]}).to_string();
            let err = Policy::parse(&text, &config).unwrap_err();
            assert!(err.starts_with("mcp-allow:"), "{bad:?}: {err}");
        }
        assert!(Policy::parse(r#"{"mcp-allow": ["echo", "tests/echo.v2"]}"#, &config).is_ok());
    }

    /// Random policies, requests and manifests, written with the aliases
    /// a host or a tool can take: the effective grant, and the grant a
    /// run records and its authority, are never wider than any of the three.
    mod never_wider {
        use crate::authority::{Authority, Permissions};
        use crate::manifest::SandboxKind as Kind;
        use proptest::prelude::*;
        use proptest::sample::subsequence;

        use super::*;

        const HOSTS: &[&str] = &[
            "docs.rs",
            "DOCS.RS.",
            "api.docs.rs",
            "example.com",
            "Example.COM",
            "a.example.com",
            "bücher.example",
            "xn--bcher-kva.example",
            "10.0.0.1",
            "0xa.0.0.1",
            "::1",
            "[::1]",
            "127.0.0.1",
            "2130706433",
        ];
        const NETS: &[&str] = &["docs.rs", "api.docs.rs:8443", "DOCS.RS.:443", "example.com", "x.example.com:80"];
        const NET_PROBES: &[(&str, u16)] =
            &[("docs.rs", 443), ("api.docs.rs", 8443), ("api.docs.rs", 80), ("x.example.com", 80), ("example.com", 22)];
        const PROBES: &[&str] = &[
            "docs.rs",
            "x.api.docs.rs",
            "api.docs.rs",
            "other.docs.rs",
            "example.com",
            "b.example.com",
            "a.example.com",
            "www.bücher.example",
            "10.0.0.1",
            "[::1]",
            "127.0.0.1",
            "evil.example",
            "rs",
        ];
        const MODELS: &[&str] = &["small", "large", "huge"];
        const SERVERS: &[&str] = &["fs", "gmail"];
        const TOOLS: &[&str] = &["read_file", "fs/read_file", "write_file", "fs/write_file", "gmail/send", "send"];
        const CALLS: &[(&str, &str)] =
            &[("fs", "read_file"), ("fs", "write_file"), ("gmail", "send"), ("gmail", "read_file"), ("fs", "send")];
        const MODES: [PermissionMode; 4] =
            [PermissionMode::ReadOnly, PermissionMode::Approve, PermissionMode::Ask, PermissionMode::Auto];

        fn strings(pool: &'static [&'static str]) -> impl Strategy<Value = Vec<String>> {
            subsequence(pool, 0..=pool.len()).prop_map(|v| v.into_iter().map(String::from).collect())
        }

        fn caps() -> impl Strategy<Value = Vec<Capability>> {
            subsequence(Capability::ALL.to_vec(), 0..=Capability::ALL.len())
        }

        fn mode() -> impl Strategy<Value = PermissionMode> {
            proptest::sample::select(MODES.to_vec())
        }

        prop_compose! {
            fn a_policy()(
                allow in caps(),
                mode in mode().prop_filter("ask needs a terminal", |m| *m != PermissionMode::Ask),
                local_first in any::<bool>(), both in any::<bool>(),
                fetch_hosts in strings(HOSTS), models in strings(MODELS),
                mcp_servers in strings(SERVERS), mcp_allow in strings(TOOLS), net_hosts in strings(NETS),
            ) -> Policy {
                let sandboxes = match (local_first, both) {
                    (true, true) => vec![SandboxKind::Local, SandboxKind::Virtual],
                    (false, true) => vec![SandboxKind::Virtual, SandboxKind::Local],
                    (true, false) => vec![SandboxKind::Local],
                    (false, false) => vec![SandboxKind::Virtual],
                };
                Policy { allow, mode, sandboxes, fetch_hosts, net_hosts, models, mcp_servers, mcp_allow, ..Policy::default() }
            }
        }

        prop_compose! {
            fn a_request()(
                allow in proptest::option::of(caps()),
                mode in proptest::option::of(mode()),
                sandbox in proptest::option::of(prop_oneof![Just(SandboxKind::Virtual), Just(SandboxKind::Local)]),
                fetch_hosts in proptest::option::of(strings(HOSTS)),
                model in proptest::option::of(proptest::sample::select(MODELS).prop_map(String::from)),
                mcp_servers in proptest::option::of(strings(SERVERS)),
                mcp_allow in proptest::option::of(strings(TOOLS)),
                net_hosts in proptest::option::of(strings(NETS)),
            ) -> Narrowing {
                Narrowing { allow, mode, sandbox, fetch_hosts, net_hosts, model, mcp_servers, mcp_allow }
            }
        }

        prop_compose! {
            fn a_manifest()(
                capabilities in caps(),
                permissions in proptest::option::of(mode()),
                sandbox in proptest::option::of(proptest::sample::select(
                    vec![Kind::Virtual, Kind::Local, Kind::Container, Kind::Remote])),
                fetch_allow in strings(HOSTS), mcp_servers in strings(SERVERS), mcp_allow in strings(TOOLS),
            ) -> AgentManifest {
                AgentManifest {
                    name: "random".into(), capabilities, permissions, sandbox, fetch_allow, mcp_servers, mcp_allow,
                    ..AgentManifest::default()
                }
            }
        }

        fn hosts(list: &[String]) -> HostList {
            HostList::new(list).unwrap()
        }

        fn at_least_as_strict(mode: PermissionMode, than: PermissionMode) -> bool {
            crate::grant::stricter(mode, than) == mode
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

            #[test]
            fn the_effective_grant_is_never_wider(policy in a_policy(), request in a_request(), manifest in a_manifest()) {
                let Ok(e) = narrow(&policy, &request, &manifest) else {
                    // Refused: the request asked beyond the policy, or no sandbox is common.
                    prop_assert!(request.mode == Some(PermissionMode::Ask)
                        || request.bounds().unwrap().beyond(&policy.bounds()).is_some()
                        || manifest.sandbox.is_some());
                    return Ok(());
                };
                // capabilities
                for c in &e.allow {
                    prop_assert!(policy.allow.contains(c) && manifest.capabilities.contains(c));
                    prop_assert!(request.allow.as_ref().is_none_or(|a| a.contains(c)));
                }
                // mode
                prop_assert!(at_least_as_strict(e.mode, policy.mode));
                prop_assert!(request.mode.is_none_or(|m| at_least_as_strict(e.mode, m)));
                prop_assert!(manifest.permissions.is_none_or(|m| at_least_as_strict(e.mode, m)));
                // sandbox
                prop_assert!(policy.sandboxes.contains(&e.sandbox));
                prop_assert!(request.sandbox.is_none_or(|s| s == e.sandbox));
                prop_assert!(manifest.sandbox.is_none_or(|s| s == e.sandbox));
                // model
                if let Some(m) = &e.model {
                    prop_assert!(policy.models.contains(m));
                    prop_assert!(request.model.as_ref().is_none_or(|r| r == m));
                }
                // MCP servers
                for s in &e.mcp_servers {
                    prop_assert!(policy.mcp_servers.contains(s) && manifest.mcp_servers.contains(s));
                    prop_assert!(request.mcp_servers.as_ref().is_none_or(|r| r.contains(s)));
                }
                // The grant the run records, and the authority the worker builds from it.
                let grant = &e.grant;
                let authority = Authority::new(&manifest, grant, &Permissions::new(e.mode));
                for c in authority.effective() {
                    prop_assert!(with_always(&policy.allow).contains(&c) && manifest.capabilities.contains(&c));
                    prop_assert!(request.allow.as_ref().is_none_or(|a| with_always(a).contains(&c)));
                }
                for s in authority.mcp_effective() {
                    prop_assert!(e.mcp_servers.contains(s));
                }
                // fetch hosts, by the fetch tool's own test: the agent's list within the grant's
                let (policy_hosts, manifest_hosts) = (hosts(&policy.fetch_hosts), hosts(&manifest.fetch_allow));
                prop_assert!(grant.fetch_hosts.is_some(), "a served grant always bounds the hosts");
                let within = hosts(grant.fetch_hosts.as_deref().unwrap_or_default());
                for probe in PROBES {
                    let effective = hosts(&e.fetch_hosts).matches(probe);
                    let fetched = manifest_hosts.matches(probe) && within.matches(probe);
                    for allowed in [effective, fetched] {
                        if allowed {
                            prop_assert!(policy_hosts.matches(probe), "{probe} beyond the policy");
                            prop_assert!(manifest_hosts.matches(probe), "{probe} beyond the manifest");
                            prop_assert!(request.fetch_hosts.as_ref().is_none_or(|r| hosts(r).matches(probe)),
                                "{probe} beyond the request");
                        }
                    }
                }
                // the shell's network, host by host and port by port
                let nets = |list: &[String]| nexo_egress::NetHosts::new(list).unwrap_or_default();
                for (host, port) in NET_PROBES {
                    let probe = nets(&[format!("{host}:{port}")]);
                    let within = |list: &[String]| probe.first_beyond(&nets(list)).is_none();
                    if within(&grant.net_hosts) {
                        prop_assert!(within(&policy.net_hosts), "{host}:{port} beyond the policy");
                        prop_assert!(request.net_hosts.as_ref().is_none_or(|r| within(r)),
                            "{host}:{port} beyond the request");
                    }
                }
                // MCP tools that pass unasked
                let listed = McpAllow::new(e.mcp_tools.iter().cloned());
                for (server, tool) in CALLS {
                    for allowed in [listed.matches(server, tool), authority.mcp_listed(server, tool)] {
                        if allowed {
                            prop_assert!(McpAllow::new(policy.mcp_allow.iter().cloned()).matches(server, tool));
                            prop_assert!(McpAllow::new(manifest.mcp_allow.iter().cloned()).matches(server, tool));
                            prop_assert!(request.mcp_allow.as_ref()
                                .is_none_or(|r| McpAllow::new(r.iter().cloned()).matches(server, tool)));
                        }
                    }
                }
            }
        }
    }
}
