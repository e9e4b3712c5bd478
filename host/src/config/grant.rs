//! `[grant]`, and the grant that the config file and a front end's flags
//! produce together.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use crate::ConfigError;
use crate::grant::{
    CommandRule, CommandRules, ConfinementSetting, DataFlow, Grant, McpAllow, RuntimeSetting, SandboxGrant,
};
use crate::manifest::{Capability, PermissionMode, SandboxKind};

/// `[grant]`: the same settings as the grant flags of `nexo run`.
#[derive(Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct GrantTable {
    /// Capabilities beyond `read` and `glob` (`--allow` adds to them).
    #[serde(default)]
    pub allow: Vec<Capability>,
    /// The permission mode (`--mode`).
    pub mode: Option<PermissionMode>,
    /// Where tools act (`--sandbox`).
    pub sandbox: Option<SandboxKind>,
    /// The local sandbox's directory (`--cwd`).
    pub cwd: Option<PathBuf>,
    /// The container sandbox's image (`--image`).
    pub image: Option<String>,
    /// The container CLI (`--container-runtime`).
    pub container_runtime: Option<RuntimeSetting>,
    /// How local shell commands are confined (`--shell-confinement`).
    pub shell_confinement: Option<ConfinementSetting>,
    /// The hosts `fetch` may reach (`--fetch-host` adds to them).
    pub fetch_hosts: Option<Vec<String>>,
    /// The hosts local shell commands may reach through nexo's egress
    /// proxy, `HOST` (ports 80 and 443) or `HOST:PORT` (`--allow-net` adds
    /// to them); left out or empty: no network.
    pub net_hosts: Option<Vec<String>>,
    /// The MCP tools agents may call unasked (`--mcp-allow` adds to them).
    pub mcp_allow: Option<Vec<String>>,
    /// Ordered rules on the `shell` tool's commands: allow, ask or deny by
    /// argv prefix, the first that matches deciding (`--command-rule`
    /// gives rules of its own, which can only narrow these).
    #[serde(default)]
    pub command_rules: Vec<CommandRule>,
    /// The data-flow guard (`[grant.data-flow]`): what is untrusted or
    /// private, and what a call that can send data out meets once the run
    /// has read it. A front end's can only make the file's stricter.
    pub data_flow: Option<DataFlow>,
}

/// A front end's settings, laid over the config file's `[grant]` by
/// [`ConfigFile::grant`]: each set value overrides the file's, and the
/// lists add to the file's.
#[derive(Debug, Clone, Default)]
pub struct GrantFlags {
    /// The `[grant]` settings the front end sets; its lists add to the file's.
    pub table: GrantTable,
    /// MCP servers by name; each replaces the file's table of that name.
    pub mcp: BTreeMap<String, nexo_mcp::ServerConfig>,
}

/// The grant a config file's `[grant]` table `t`, `[mcp.NAME]` tables
/// `mcp`, `[sandbox]` view and private addresses give, with `flags` laid
/// over them.
pub(super) fn grant(
    t: GrantTable,
    mcp: &BTreeMap<String, nexo_mcp::ServerConfig>,
    view: nexo_sandbox::SystemView,
    net_private: Vec<std::net::IpAddr>,
    flags: GrantFlags,
) -> Result<Grant, ConfigError> {
    let f = flags.table;
    let capabilities = t.allow.into_iter().chain(f.allow).chain(crate::grant::DEFAULT_ALLOW).collect();
    let fetch_hosts = added(t.fetch_hosts, f.fetch_hosts);
    if let Some(hosts) = &fetch_hosts {
        nexo_egress::HostList::new(hosts.iter())
            .map_err(|e| ConfigError::invalid("fetch-hosts", format!("fetch-hosts: {e}")))?;
    }
    let net_hosts = added(t.net_hosts, f.net_hosts).unwrap_or_default();
    nexo_egress::NetHosts::new(net_hosts.iter())
        .map_err(|e| ConfigError::invalid("net-hosts", format!("net-hosts: {e}")))?;
    let mcp_allow = added(t.mcp_allow, f.mcp_allow);
    // The flags' rules are a layer of their own: a file's `allow git` cannot shadow `--command-rule 'deny git push'`.
    let commands = CommandRules::layer(t.command_rules).intersection(&CommandRules::layer(f.command_rules));
    let data_flow = match (t.data_flow, f.data_flow) {
        (Some(file), Some(flags)) => file.stricter(&flags),
        (file, flags) => file.or(flags).unwrap_or_default(),
    };
    if let Some((key, server)) = data_flow.unknown_server(|s| mcp.contains_key(s) || flags.mcp.contains_key(s)) {
        return Err(ConfigError::invalid(
            "data-flow",
            format!(
                "[grant.data-flow] `{key}` names the MCP server `{server}`, which is not configured: fix the name, \
                 or add an `[mcp.{server}]` table (or `--mcp {server}=…`)"
            ),
        ));
    }
    let networked: Vec<&str> = mcp
        .iter()
        .filter(|(name, _)| !flags.mcp.contains_key(*name))
        .chain(&flags.mcp)
        .filter(|(_, s)| s.confined_with_network())
        .map(|(name, _)| name.as_str())
        .collect();
    warn_networked_read_only(&data_flow, &networked);
    let servers = mcp.keys().chain(flags.mcp.keys()).cloned().collect();
    let sandbox = f.sandbox.or(t.sandbox);
    let grant = Grant {
        capabilities,
        mode: f.mode.or(t.mode).unwrap_or(PermissionMode::ReadOnly),
        fetch_hosts,
        net_hosts,
        commands,
        data_flow,
        inherited: crate::flow::Labels::NONE,
        sandbox: SandboxGrant {
            kind: sandbox.unwrap_or(SandboxKind::Virtual),
            chosen: sandbox.is_some(),
            cwd: f.cwd.or(t.cwd),
            image: f.image.or(t.image),
            container_runtime: f.container_runtime.or(t.container_runtime).unwrap_or(RuntimeSetting::Docker),
            shell_confinement: f.shell_confinement.or(t.shell_confinement).unwrap_or(ConfinementSetting::Auto),
            view,
            net_private,
        },
        mcp: crate::grant::McpGrant {
            servers,
            allow: mcp_allow.map(McpAllow::new),
            flags: flags.mcp,
            tables: mcp.clone(),
        },
    };
    grant.mcp.configs()?;
    Ok(grant)
}

/// The file's list with the flags' added; the flags' alone set a list.
fn added(file: Option<Vec<String>>, flags: Option<Vec<String>>) -> Option<Vec<String>> {
    match (file, flags) {
        (Some(mut file), Some(flags)) => {
            file.extend(flags);
            Some(file)
        }
        (file, flags) => file.or(flags),
    }
}

/// Warns of each `read-only-mcp` entry that covers a confined server the
/// operator gave network (the `networked` ones); an unconfined server is
/// trusted as a whole, and not warned of.
fn warn_networked_read_only(data_flow: &DataFlow, networked: &[&str]) {
    for (entry, covered) in data_flow.read_only_networked(networked) {
        tracing::warn!(target: "nexo::config", "[grant.data-flow] {}", read_only_warning(entry, &covered));
    }
}

/// What is said of a `read-only-mcp` entry that covers the confined
/// servers with network `covered`.
pub fn read_only_warning(entry: &str, covered: &[&str]) -> String {
    format!(
        "`read-only-mcp` names `{entry}`, a tool of confined MCP servers with network (`network` or `net-hosts`): \
         {}. The data-flow guard trusts that it sends nothing out, though its server can; take it off the list \
         unless the server's code is known not to send what the tool is given",
        covered.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
    )
}
