//! The operator's grant as plain data: the capabilities, permission mode,
//! sandbox and MCP servers the config file and the front end's settings
//! give a run, recorded with it (it holds no secret) so that a resume needs
//! no settings, narrowed by a resume or a tenant's policy, and turned into a
//! run's sandbox, permissions and MCP clients.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use nexo_sandbox::{Confinement, ContainerConfig, ContainerSandbox, LocalSandbox, Sandbox, ShellPolicy, SystemView};
use serde::{Deserialize, Serialize};

use crate::ConfigError;
use crate::authority::{Grant, Permissions};
use crate::config::{ConfigFile, ConfinementSetting, RuntimeSetting};
use crate::manifest::{Capability, PermissionMode, SandboxKind};
use crate::settings::{Providers, RunOptions};

/// What [`OperatorGrant::for_tenant`] builds a served run's grant from.
pub struct TenantGrant<'a> {
    /// Capabilities beyond `read` and `glob`.
    pub allow: Vec<Capability>,
    /// The permission mode.
    pub mode: PermissionMode,
    /// The tenant's workspace, when the run works in the local sandbox.
    pub local: Option<PathBuf>,
    /// Hosts `fetch` may reach; empty: none.
    pub fetch_hosts: Vec<String>,
    /// The operator's MCP servers the run gets.
    pub mcp_servers: Vec<String>,
    /// The MCP tools that pass unasked; empty: none.
    pub mcp_allow: Vec<String>,
    /// The operator's configuration.
    pub config: &'a ConfigFile,
}

/// Parses a capability name as written in the WIT and in manifests.
pub fn parse_capability(name: &str) -> Result<Capability, String> {
    serde_json::from_value(serde_json::Value::String(name.to_string()))
        .map_err(|_| format!("unknown capability `{name}`: use read, glob, write, shell, fetch or search"))
}

/// The operator's flags, laid over the config file's `[grant]` by
/// [`OperatorGrant::from_config`]: each set value overrides the file's, and
/// the lists add to the file's.
#[derive(Debug, Clone, Default)]
pub struct GrantFlags {
    /// Capabilities beyond `read` and `glob`.
    pub allow: Vec<Capability>,
    /// The permission mode.
    pub mode: Option<PermissionMode>,
    /// The sandbox.
    pub sandbox: Option<SandboxKind>,
    /// The container sandbox's image.
    pub image: Option<String>,
    /// The container CLI.
    pub container_runtime: Option<RuntimeSetting>,
    /// The local sandbox's directory.
    pub cwd: Option<PathBuf>,
    /// How local shell commands are confined.
    pub shell_confinement: Option<ConfinementSetting>,
    /// Hosts `fetch` may reach, added to the file's list.
    pub fetch_hosts: Vec<String>,
    /// MCP servers by name; each replaces the file's table of that name.
    pub mcp: BTreeMap<String, nexo_mcp::ServerConfig>,
    /// MCP tools that pass unasked, added to the file's list.
    pub mcp_allow: Vec<String>,
}

impl Default for OperatorGrant {
    /// Reading and globbing only, read-only, in memory, no MCP server.
    fn default() -> Self {
        OperatorGrant {
            mcp_servers: Vec::new(),
            mcp_flags: BTreeMap::new(),
            mcp_file: BTreeMap::new(),
            mcp_allow: None,
            fetch_hosts: None,
            allow: Vec::new(),
            mode: PermissionMode::ReadOnly,
            sandbox: SandboxKind::Virtual,
            sandbox_chosen: false,
            cwd: None,
            image: None,
            container_runtime: RuntimeSetting::Docker,
            shell_confinement: ConfinementSetting::Auto,
            view: crate::config::SandboxTable::default().view(),
        }
    }
}

impl OperatorGrant {
    /// The config file's `[grant]` table with `flags` laid over it.
    pub fn from_config(file: &ConfigFile, flags: GrantFlags) -> Result<OperatorGrant, ConfigError> {
        let t = file.grant.clone();
        let mut allow = t.allow;
        allow.extend(flags.allow.iter().copied());
        let mut fetch_hosts = t.fetch_hosts;
        if !flags.fetch_hosts.is_empty() {
            fetch_hosts.get_or_insert_default().extend(flags.fetch_hosts.iter().cloned());
        }
        if let Some(hosts) = &fetch_hosts {
            nexo_egress::HostList::new(hosts.iter())
                .map_err(|e| ConfigError::invalid("fetch-hosts", format!("fetch-hosts: {e}")))?;
        }
        let mut mcp_allow = t.mcp_allow;
        if !flags.mcp_allow.is_empty() {
            mcp_allow.get_or_insert_default().extend(flags.mcp_allow.iter().cloned());
        }
        let mcp_flags = flags.mcp;
        let mut mcp_servers: Vec<String> = file.mcp.keys().chain(mcp_flags.keys()).cloned().collect();
        mcp_servers.sort();
        mcp_servers.dedup();
        let resolved = OperatorGrant {
            mcp_servers,
            mcp_flags,
            mcp_file: file.mcp.clone(),
            mcp_allow,
            fetch_hosts,
            allow,
            mode: flags.mode.or(t.mode).unwrap_or(PermissionMode::ReadOnly),
            sandbox: flags.sandbox.or(t.sandbox).unwrap_or(SandboxKind::Virtual),
            sandbox_chosen: flags.sandbox.or(t.sandbox).is_some(),
            cwd: flags.cwd.clone().or(t.cwd),
            image: flags.image.clone().or(t.image),
            container_runtime: flags.container_runtime.or(t.container_runtime).unwrap_or(RuntimeSetting::Docker),
            shell_confinement: flags.shell_confinement.or(t.shell_confinement).unwrap_or(ConfinementSetting::Auto),
            view: file.sandbox.view(),
        };
        resolved.mcp_configs()?;
        Ok(resolved)
    }
}

/// The operator's grant after merging the config file and the flags. A
/// recorded run keeps it (it holds no secret), so a resume needs no flags.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct OperatorGrant {
    /// The MCP servers configured when the run started, by name. A resume
    /// reads their settings again (the config file's may hold a token).
    #[serde(default)]
    mcp_servers: Vec<String>,
    /// Servers given with `--mcp`: recorded whole, as they hold no secret.
    #[serde(default)]
    mcp_flags: BTreeMap<String, nexo_mcp::ServerConfig>,
    /// The config file's `[mcp.NAME]` tables; never recorded.
    #[serde(skip)]
    mcp_file: BTreeMap<String, nexo_mcp::ServerConfig>,
    #[serde(default)]
    mcp_allow: Option<Vec<String>>,
    fetch_hosts: Option<Vec<String>>,
    allow: Vec<Capability>,
    mode: PermissionMode,
    sandbox: SandboxKind,
    /// Whether the operator chose the sandbox (a flag or the config file),
    /// rather than getting the default: an agent's own request for a
    /// sandbox is refused without that choice.
    #[serde(default)]
    sandbox_chosen: bool,
    cwd: Option<PathBuf>,
    image: Option<String>,
    container_runtime: RuntimeSetting,
    shell_confinement: ConfinementSetting,
    /// The config file's `[sandbox]` view; never recorded, read again at
    /// each resume as the operator has it then.
    #[serde(skip)]
    view: SystemView,
}

impl OperatorGrant {
    /// A served run's grant: a tenant's policy narrowed by its request
    /// (`server::policy`). The local sandbox is the tenant's workspace, the
    /// shell (if granted) confined as the operator's auto-detection finds.
    pub fn for_tenant(t: TenantGrant<'_>) -> OperatorGrant {
        let mcp_file: BTreeMap<_, _> = t
            .config
            .mcp
            .iter()
            .filter(|(name, _)| t.mcp_servers.contains(name))
            .map(|(n, c)| (n.clone(), c.clone()))
            .collect();
        OperatorGrant {
            mcp_servers: mcp_file.keys().cloned().collect(),
            mcp_flags: BTreeMap::new(),
            mcp_file,
            // Always set: an empty list is no tool and no host, never "the
            // agent's list decides".
            mcp_allow: Some(t.mcp_allow),
            fetch_hosts: Some(t.fetch_hosts),
            allow: t.allow,
            mode: match t.mode {
                // No terminal to ask on: a served run waits for a durable approval.
                PermissionMode::Ask => PermissionMode::Approve,
                mode => mode,
            },
            sandbox: if t.local.is_some() { SandboxKind::Local } else { SandboxKind::Virtual },
            sandbox_chosen: true,
            cwd: t.local,
            image: None,
            container_runtime: RuntimeSetting::Docker,
            shell_confinement: ConfinementSetting::Auto,
            view: t.config.sandbox.view(),
        }
    }

    /// The grant as a run records it: the local sandbox's directory made
    /// absolute, so a resume elsewhere acts in the same place.
    pub fn recorded(&self) -> Result<OperatorGrant, ConfigError> {
        let mut r = self.clone();
        if r.sandbox == SandboxKind::Local {
            let cwd = match &r.cwd {
                Some(dir) => std::path::absolute(dir),
                None => std::env::current_dir(),
            }
            .map_err(|e| ConfigError::invalid("--cwd", format!("cannot read the current directory: {e}")))?;
            r.cwd = Some(cwd);
        }
        Ok(r)
    }

    /// The local sandbox's directory, when the sandbox is local (recorded
    /// grants hold it absolute).
    pub fn local_dir(&self) -> Option<&std::path::Path> {
        match self.sandbox {
            SandboxKind::Local => self.cwd.as_deref(),
            _ => None,
        }
    }

    /// What confined processes may read of the host (`[sandbox]`).
    pub fn view(&self) -> &SystemView {
        &self.view
    }

    /// The same grant, narrowed: a stricter `mode`, and `deny` taken out.
    /// A resume can only narrow what the run started with.
    pub fn narrowed(mut self, mode: Option<PermissionMode>, deny: &[Capability]) -> OperatorGrant {
        if let Some(mode) = mode {
            self.mode = crate::authority::stricter(self.mode, mode);
        }
        self.allow.retain(|c| !deny.contains(c));
        self
    }

    /// The same grant within `bounds` (a tenant's policy as it is now), so a
    /// served run goes on with no more than its tenant is allowed today.
    /// A list the run recorded as null is read as empty: a served grant's
    /// lists are always set, and older records wrote an empty one as null.
    pub fn within(mut self, bounds: &crate::authority::Bounds) -> OperatorGrant {
        if let Some(caps) = &bounds.capabilities {
            self.allow.retain(|c| caps.contains(c));
        }
        if let Some(mode) = bounds.mode {
            self = self.narrowed(Some(mode), &[]);
        }
        let hosts = nexo_egress::HostList::new(self.fetch_hosts.take().unwrap_or_default()).unwrap_or_default();
        let hosts = match &bounds.fetch_hosts {
            Some(policy) => hosts.intersection(policy),
            None => hosts,
        };
        self.fetch_hosts = Some(hosts.entries().to_vec());
        if let Some(servers) = &bounds.mcp_servers {
            self.mcp_servers.retain(|n| servers.contains(n));
            self.mcp_flags.retain(|n, _| servers.contains(n));
        }
        let tools = crate::authority::McpAllow::new(self.mcp_allow.take().unwrap_or_default());
        let tools = match &bounds.mcp_tools {
            Some(policy) => tools.intersection(policy),
            None => tools,
        };
        self.mcp_allow = Some(tools.entries().to_vec());
        self
    }

    /// The same grant with the config file's `[mcp.NAME]` tables, as a
    /// resume reads them: only servers the run started with are kept.
    pub fn with_config_file(mut self, file: &ConfigFile) -> OperatorGrant {
        self.mcp_file = file.mcp.clone();
        self.view = file.sandbox.view();
        self
    }

    /// The MCP servers the run started with that neither a recorded `--mcp`
    /// flag nor the config file read now defines: a resume without them
    /// would not behave as the run did.
    pub fn unconfigured_mcp_servers(&self) -> Vec<&str> {
        let defined = |n: &String| self.mcp_flags.contains_key(n) || self.mcp_file.contains_key(n);
        self.mcp_servers.iter().filter(|n| !defined(n)).map(String::as_str).collect()
    }

    /// The MCP servers, validated: `--mcp` flags over the config file's
    /// tables. A server the run started with that is configured no more is
    /// left out, with a warning.
    pub fn mcp_configs(&self) -> Result<Vec<nexo_mcp::Server>, ConfigError> {
        let mut servers = Vec::new();
        for name in &self.mcp_servers {
            let Some(config) = self.mcp_flags.get(name).or_else(|| self.mcp_file.get(name)) else {
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

    /// The MCP servers' names and one-line descriptions, for `nexo inspect`.
    pub fn mcp_summary(&self) -> Vec<(String, String)> {
        match self.mcp_configs() {
            Ok(servers) => servers.iter().map(|s| (s.name().to_string(), s.describe())).collect(),
            Err(e) => vec![("(error)".into(), e.to_string())],
        }
    }

    /// The granted capabilities: `read` and `glob`, plus the allow list;
    /// the configured MCP servers and the operator's `mcp-allow`.
    pub fn grant(&self) -> Grant {
        let mut grant = Grant::default();
        grant.capabilities.extend(self.allow.iter().copied());
        grant.fetch_hosts = self.fetch_hosts.clone();
        grant.mcp_servers = self
            .mcp_servers
            .iter()
            .filter(|n| self.mcp_flags.contains_key(*n) || self.mcp_file.contains_key(*n))
            .cloned()
            .collect();
        grant.mcp_allow = self.mcp_allow.as_ref().map(|l| crate::authority::McpAllow::new(l.iter().cloned()));
        grant
    }

    /// The permission mode.
    pub fn mode(&self) -> PermissionMode {
        self.mode
    }

    /// The sandbox's name.
    pub fn sandbox_name(&self) -> &'static str {
        self.sandbox.as_str()
    }

    /// What this grant's sandbox serves, for [`crate::world::agent::authority`].
    pub fn serving(&self, search: bool) -> crate::world::agent::Serving {
        crate::world::agent::Serving {
            sandbox: self.sandbox_name(),
            // As `Sandbox::supports_shell` answers: the virtual sandbox runs no commands.
            sandbox_has_shell: self.sandbox != SandboxKind::Virtual,
            search,
        }
    }

    /// The local sandbox's shell policy.
    fn shell_policy(&self) -> ShellPolicy {
        let confinement = match self.shell_confinement {
            ConfinementSetting::Auto => Confinement::Auto,
            ConfinementSetting::Bubblewrap => Confinement::Bubblewrap,
            ConfinementSetting::Landlock => Confinement::Landlock,
            ConfinementSetting::None => Confinement::Unconfined,
        };
        ShellPolicy { confinement, view: self.view.clone(), ..ShellPolicy::default() }
    }

    /// How shell commands would run under this grant, in one line, truthfully:
    /// the mechanism actually in force, not the one asked for.
    pub fn shell_summary(&self, shell_effective: bool) -> String {
        let how = match self.sandbox {
            SandboxKind::Virtual => return "(none: the virtual sandbox has no shell)".into(),
            SandboxKind::Container => "in the container".to_string(),
            SandboxKind::Remote => "in the remote sandbox".to_string(),
            SandboxKind::Local => self.shell_policy().describe(),
        };
        if shell_effective { how } else { format!("{how} (shell not granted to this agent)") }
    }

    /// Run options for this grant: its sandbox, permissions and MCP servers.
    pub fn run_options(&self) -> Result<RunOptions, ConfigError> {
        let sandbox: Option<Arc<dyn Sandbox>> = match self.sandbox {
            // Chosen, it is the operator's: an agent that asks for another
            // sandbox then runs in memory all the same (or is refused by its floor).
            SandboxKind::Virtual if self.sandbox_chosen => Some(Arc::new(nexo_sandbox::VirtualSandbox::new())),
            SandboxKind::Virtual => None,
            SandboxKind::Local => {
                let cwd = match &self.cwd {
                    Some(dir) => dir.clone(),
                    None => std::env::current_dir().map_err(|e| {
                        ConfigError::invalid("--cwd", format!("cannot read the current directory: {e}"))
                    })?,
                };
                let policy = self.shell_policy();
                log_confinement(&policy);
                Some(Arc::new(
                    LocalSandbox::with_shell(&cwd, policy).map_err(|e| ConfigError::invalid("--cwd", e.to_string()))?,
                ))
            }
            SandboxKind::Container => {
                let Some(image) = &self.image else {
                    return Err(ConfigError::invalid(
                        "--image",
                        "--sandbox container needs --image (there is no default image)",
                    ));
                };
                let config = match self.container_runtime {
                    RuntimeSetting::Docker => ContainerConfig::docker(image),
                    RuntimeSetting::Apple => ContainerConfig::apple(image),
                };
                Some(Arc::new(
                    ContainerSandbox::new(config).map_err(|e| ConfigError::invalid("--sandbox", e.to_string()))?,
                ))
            }
            SandboxKind::Remote => {
                return Err(ConfigError::invalid(
                    "sandbox",
                    "the remote sandbox comes from a sandbox-provider component that an embedding program sets, \
                     not from the grant: grant virtual, local or container",
                ));
            }
        };
        if self.cwd.is_some() && self.sandbox != SandboxKind::Local {
            return Err(ConfigError::invalid(
                "--cwd",
                "--cwd needs --sandbox local (only the local sandbox works in a host directory)",
            ));
        }
        if self.image.is_some() && self.sandbox != SandboxKind::Container {
            return Err(ConfigError::invalid("--image", "--image needs --sandbox container"));
        }
        // No hook to ask with: a front end that can ask adds its own, and
        // without one the gate says that nobody could be asked.
        let permissions = Permissions::new(self.mode());
        let servers = self.mcp_configs()?;
        let mcp = (!servers.is_empty()).then(|| {
            // stdio servers start under this binary's orphan guard, so they
            // end with nexo however it ends.
            let guard = std::env::current_exe().ok();
            // Confined servers get the local shell's mechanism.
            nexo_mcp::Clients::new(servers, nexo_mcp::ClientOptions { guard, ..Default::default() })
                .with_confinement(self.shell_policy().confinement)
                .with_view(self.view.clone())
        });
        Ok(RunOptions {
            permissions,
            grant: self.grant(),
            providers: Providers { sandbox, mcp, ..Providers::default() },
            ..RunOptions::default()
        })
    }
}

/// States the confinement shell commands will run under, at info level,
/// and warns when `auto` could not use bubblewrap.
fn log_confinement(policy: &ShellPolicy) {
    match policy.effective_confinement() {
        Ok(c) => {
            tracing::info!(target: "nexo::sandbox", "{}", policy.describe());
            if policy.confinement == Confinement::Auto && c != Confinement::Bubblewrap {
                let why = ShellPolicy { confinement: Confinement::Bubblewrap, ..policy.clone() }
                    .effective_confinement()
                    .err()
                    .map(|e| e.to_string())
                    .unwrap_or_default();
                tracing::warn!(
                    target: "nexo::sandbox",
                    "bubblewrap is not usable here, so shell commands fall back to Landlock: {why}"
                );
            }
        }
        Err(e) => tracing::info!(target: "nexo::sandbox", "shell commands cannot run: {e}"),
    }
}
