//! The operator's grant on the command line: which capabilities, which
//! permission mode, which sandbox.

use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use nexo::ConfigError;
use nexo::authority::{Grant, Permissions};
use nexo::config::{ConfigFile, ConfinementSetting, ModeSetting, RuntimeSetting, SandboxSetting};
use nexo::manifest::{Capability, PermissionMode};
use nexo::settings::RunOptions;
use nexo_sandbox::{Confinement, ContainerConfig, ContainerSandbox, LocalSandbox, Sandbox, ShellPolicy, SystemView};
use serde::{Deserialize, Serialize};

/// Grant flags shared by `run` and `inspect`. Each flag overrides the same
/// setting in the operator's config file; `--allow` adds to its list.
#[derive(Args, Debug, Clone)]
pub struct GrantArgs {
    /// The operator's config file (TOML: `[grant]`, `[model]`, `[search]`, `[mcp.NAME]`, `[worker]`,
    /// `[sessions]`, `[sandbox]`, `store`, `buffer-events`). Flags override it.
    #[arg(long, value_name = "FILE", env = "NEXO_CONFIG")]
    config: Option<PathBuf>,
    /// Grant capabilities beyond the default `read,glob`: write, shell, fetch, search
    /// (comma-separated or repeated). An agent gets only what it also requested.
    #[arg(long = "allow", value_name = "CAP", value_delimiter = ',', value_parser = parse_capability)]
    allow: Vec<Capability>,
    /// Permission mode for actions beyond reading [default: read-only].
    #[arg(long, value_enum)]
    mode: Option<ModeSetting>,
    /// Where tools act: `virtual` (in memory, no host access), `local` (the --cwd
    /// directory) or `container` (a hardened throwaway container; needs --image).
    #[arg(long, value_enum)]
    sandbox: Option<SandboxSetting>,
    /// The image for `--sandbox container`.
    #[arg(long, value_name = "IMAGE")]
    image: Option<String>,
    /// The container CLI for `--sandbox container` [default: docker].
    #[arg(long, value_enum)]
    container_runtime: Option<RuntimeSetting>,
    /// The directory of the local sandbox (default: the current directory).
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// How local shell commands are confined [default: auto]. `none` runs them
    /// unconfined: only for trusted agents, and only when you say so.
    #[arg(long, value_enum)]
    shell_confinement: Option<ConfinementSetting>,
    /// Limit `fetch` to these hosts and their subdomains (repeatable; adds to
    /// `fetch-hosts`). A URL must be on this list and on the agent's `fetch-allow`.
    #[arg(long = "fetch-host", value_name = "HOST", value_delimiter = ',')]
    fetch_hosts: Vec<String>,
    /// Configure an MCP server: `NAME=https://host/mcp` (streamable HTTP) or
    /// `NAME=COMMAND ARGS…` (stdio; shell-style quoting). Repeatable; replaces an
    /// `[mcp.NAME]` table of the config file. Agents reach it only if they request it.
    #[arg(long = "mcp", value_name = "NAME=SERVER")]
    mcp: Vec<String>,
    /// Limit the MCP tools agents may call unasked to these exact names, `tool` or
    /// `server/tool` (repeatable; adds to `mcp-allow`). A tool must be on this list
    /// and on the agent's own `mcp-allow`.
    #[arg(long = "mcp-allow", value_name = "TOOL", value_delimiter = ',')]
    mcp_allow: Vec<String>,
}

/// What [`Resolved::for_tenant`] builds a served run's grant from.
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

impl GrantArgs {
    /// The config file, if one was given.
    pub fn config_path(&self) -> Option<&std::path::Path> {
        self.config.as_deref()
    }

    /// The config file's `[grant]` table with the flags laid over it.
    pub fn resolve(&self, file: &ConfigFile) -> Result<Resolved, ConfigError> {
        let t = file.grant.clone();
        let mut allow = t.allow;
        allow.extend(self.allow.iter().copied());
        let mut fetch_hosts = t.fetch_hosts;
        if !self.fetch_hosts.is_empty() {
            fetch_hosts.get_or_insert_default().extend(self.fetch_hosts.iter().cloned());
        }
        if let Some(hosts) = &fetch_hosts {
            nexo_egress::HostList::new(hosts.iter())
                .map_err(|e| ConfigError::invalid("fetch-hosts", format!("fetch-hosts: {e}")))?;
        }
        let mut mcp_allow = t.mcp_allow;
        if !self.mcp_allow.is_empty() {
            mcp_allow.get_or_insert_default().extend(self.mcp_allow.iter().cloned());
        }
        let mut mcp_flags = BTreeMap::new();
        for flag in &self.mcp {
            let (name, config) = parse_mcp_flag(flag)?;
            mcp_flags.insert(name, config);
        }
        let mut mcp_servers: Vec<String> = file.mcp.keys().chain(mcp_flags.keys()).cloned().collect();
        mcp_servers.sort();
        mcp_servers.dedup();
        let resolved = Resolved {
            mcp_servers,
            mcp_flags,
            mcp_file: file.mcp.clone(),
            mcp_allow,
            fetch_hosts,
            allow,
            mode: self.mode.or(t.mode).unwrap_or(ModeSetting::ReadOnly),
            sandbox: self.sandbox.or(t.sandbox).unwrap_or(SandboxSetting::Virtual),
            sandbox_chosen: self.sandbox.or(t.sandbox).is_some(),
            cwd: self.cwd.clone().or(t.cwd),
            image: self.image.clone().or(t.image),
            container_runtime: self.container_runtime.or(t.container_runtime).unwrap_or(RuntimeSetting::Docker),
            shell_confinement: self.shell_confinement.or(t.shell_confinement).unwrap_or(ConfinementSetting::Auto),
            view: file.sandbox.view(),
        };
        resolved.mcp_configs()?;
        Ok(resolved)
    }
}

/// Parses `--mcp NAME=SERVER`: a URL for an HTTP server, else a command line.
fn parse_mcp_flag(flag: &str) -> Result<(String, nexo_mcp::ServerConfig), ConfigError> {
    let bad = |why: String| ConfigError::invalid("--mcp", format!("--mcp {flag:?}: {why}"));
    let Some((name, server)) = flag.split_once('=') else {
        return Err(bad("write NAME=https://host/path or NAME=COMMAND ARGS…".into()));
    };
    let server = server.trim();
    let config = if server.starts_with("http://") || server.starts_with("https://") {
        nexo_mcp::ServerConfig { url: Some(server.to_string()), ..Default::default() }
    } else {
        let words = shlex::split(server).ok_or_else(|| bad("the command line has an unclosed quote".into()))?;
        let Some((command, args)) = words.split_first() else {
            return Err(bad("the command is empty".into()));
        };
        nexo_mcp::ServerConfig { command: Some(command.clone()), args: args.to_vec(), ..Default::default() }
    };
    Ok((name.trim().to_string(), config))
}

/// The operator's grant after merging the config file and the flags. A
/// recorded run keeps it (it holds no secret), so a resume needs no flags.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Resolved {
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
    mode: ModeSetting,
    sandbox: SandboxSetting,
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

impl Resolved {
    /// A served run's grant: a tenant's policy narrowed by its request
    /// (`server::policy`). The local sandbox is the tenant's workspace, the
    /// shell (if granted) confined as the operator's auto-detection finds.
    pub fn for_tenant(t: TenantGrant<'_>) -> Resolved {
        let mcp_file: BTreeMap<_, _> = t
            .config
            .mcp
            .iter()
            .filter(|(name, _)| t.mcp_servers.contains(name))
            .map(|(n, c)| (n.clone(), c.clone()))
            .collect();
        Resolved {
            mcp_servers: mcp_file.keys().cloned().collect(),
            mcp_flags: BTreeMap::new(),
            mcp_file,
            // Always set: an empty list is no tool and no host, never "the
            // agent's list decides".
            mcp_allow: Some(t.mcp_allow),
            fetch_hosts: Some(t.fetch_hosts),
            allow: t.allow,
            mode: match t.mode {
                PermissionMode::ReadOnly => ModeSetting::ReadOnly,
                PermissionMode::Auto => ModeSetting::Auto,
                // No terminal to ask on: a served run waits for a durable approval.
                PermissionMode::Ask | PermissionMode::Approve => ModeSetting::Approve,
            },
            sandbox: if t.local.is_some() { SandboxSetting::Local } else { SandboxSetting::Virtual },
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
    pub fn recorded(&self) -> Result<Resolved, ConfigError> {
        let mut r = self.clone();
        if r.sandbox == SandboxSetting::Local {
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
            SandboxSetting::Local => self.cwd.as_deref(),
            _ => None,
        }
    }

    /// What confined processes may read of the host (`[sandbox]`).
    pub fn view(&self) -> &SystemView {
        &self.view
    }

    /// The same grant, narrowed: a stricter `mode`, and `deny` taken out.
    /// A resume can only narrow what the run started with.
    pub fn narrowed(mut self, mode: Option<PermissionMode>, deny: &[Capability]) -> Resolved {
        if let Some(mode) = mode {
            self.mode = match nexo::authority::stricter(self.mode(), mode) {
                PermissionMode::ReadOnly => ModeSetting::ReadOnly,
                PermissionMode::Auto => ModeSetting::Auto,
                PermissionMode::Ask => ModeSetting::Ask,
                PermissionMode::Approve => ModeSetting::Approve,
            };
        }
        self.allow.retain(|c| !deny.contains(c));
        self
    }

    /// The same grant within `bounds` (a tenant's policy as it is now), so a
    /// served run goes on with no more than its tenant is allowed today.
    /// A list the run recorded as null is read as empty: a served grant's
    /// lists are always set, and older records wrote an empty one as null.
    pub fn within(mut self, bounds: &nexo::authority::Bounds) -> Resolved {
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
        let tools = nexo::authority::McpAllow::new(self.mcp_allow.take().unwrap_or_default());
        let tools = match &bounds.mcp_tools {
            Some(policy) => tools.intersection(policy),
            None => tools,
        };
        self.mcp_allow = Some(tools.entries().to_vec());
        self
    }

    /// The same grant with the config file's `[mcp.NAME]` tables, as a
    /// resume reads them: only servers the run started with are kept.
    pub fn with_config_file(mut self, file: &ConfigFile) -> Resolved {
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
        grant.mcp_allow = self.mcp_allow.as_ref().map(|l| nexo::authority::McpAllow::new(l.iter().cloned()));
        grant
    }

    /// The permission mode.
    pub fn mode(&self) -> PermissionMode {
        match self.mode {
            ModeSetting::ReadOnly => PermissionMode::ReadOnly,
            ModeSetting::Auto => PermissionMode::Auto,
            ModeSetting::Ask => PermissionMode::Ask,
            ModeSetting::Approve => PermissionMode::Approve,
        }
    }

    /// The sandbox's name.
    pub fn sandbox_name(&self) -> &'static str {
        match self.sandbox {
            SandboxSetting::Virtual => "virtual",
            SandboxSetting::Local => "local",
            SandboxSetting::Container => "container",
        }
    }

    /// What this grant's sandbox serves, for [`nexo::world::agent::authority`].
    pub fn serving(&self, search: bool) -> nexo::world::agent::Serving {
        nexo::world::agent::Serving {
            sandbox: self.sandbox_name(),
            // As `Sandbox::supports_shell` answers: the virtual sandbox runs no commands.
            sandbox_has_shell: self.sandbox != SandboxSetting::Virtual,
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
            SandboxSetting::Virtual => return "(none: the virtual sandbox has no shell)".into(),
            SandboxSetting::Container => "in the container".to_string(),
            SandboxSetting::Local => self.shell_policy().describe(),
        };
        if shell_effective { how } else { format!("{how} (shell not granted to this agent)") }
    }

    /// Run options for this grant.
    pub fn run_options(&self) -> Result<RunOptions, ConfigError> {
        let sandbox: Option<Arc<dyn Sandbox>> = match self.sandbox {
            // Chosen, it is the operator's: an agent that asks for another
            // sandbox then runs in memory all the same (or is refused by its floor).
            SandboxSetting::Virtual if self.sandbox_chosen => Some(Arc::new(nexo_sandbox::VirtualSandbox::new())),
            SandboxSetting::Virtual => None,
            SandboxSetting::Local => {
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
            SandboxSetting::Container => {
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
        };
        if self.cwd.is_some() && self.sandbox != SandboxSetting::Local {
            return Err(ConfigError::invalid(
                "--cwd",
                "--cwd needs --sandbox local (only the local sandbox works in a host directory)",
            ));
        }
        if self.image.is_some() && self.sandbox != SandboxSetting::Container {
            return Err(ConfigError::invalid("--image", "--image needs --sandbox container"));
        }
        let mut permissions = Permissions::new(self.mode());
        // Without a terminal nobody can be asked: no hook, and the gate says so.
        if self.mode == ModeSetting::Ask && can_ask() {
            permissions = permissions.on_ask(ask_on_terminal).on_ask_mcp(ask_mcp_on_terminal);
        }
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
        Ok(RunOptions { sandbox, permissions, grant: self.grant(), mcp, ..RunOptions::default() })
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

/// Whether `ask` mode has a terminal to ask on: stdin and stderr both are
/// one. Without it no hook is installed, and the gate's denial says that
/// nobody could be asked.
pub fn can_ask() -> bool {
    std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}

/// `ask` mode's hook: a y/N question on the terminal. Without a terminal
/// nobody can answer, so the answer is no (the CLI installs it only when
/// [`can_ask`]).
///
/// The action comes from the model, so it is shown whole and escaped on one
/// line: no control sequence in it can erase or redraw the question.
pub fn ask_on_terminal(cap: Capability, detail: &str) -> bool {
    ask_on_terminal_text(&format!("`{}` {detail}", cap.as_str()))
}

fn ask_on_terminal_text(action: &str) -> bool {
    if !can_ask() {
        return false;
    }
    let action = nexo::terminal::escape(action, nexo::terminal::Lines::Flatten);
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "Allow {action}? [y/N] ");
    let _ = err.flush();
    let mut answer = String::new();
    if std::io::stdin().lock().read_line(&mut answer).is_err() {
        return false;
    }
    matches!(answer.trim(), "y" | "Y" | "yes" | "Yes")
}

/// `ask` mode's hook for MCP tools: the same question, naming the server,
/// the tool and the arguments.
pub fn ask_mcp_on_terminal(server: &str, tool: &str, arguments: &serde_json::Value) -> bool {
    ask_on_terminal_text(&format!("the MCP tool `{server}/{tool}` with {arguments}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use clap::Parser;
    use nexo::authority::{Bounds, McpAllow};
    use nexo::manifest::AgentManifest;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        grant: GrantArgs,
    }

    fn grant(flags: &[&str], config: &str) -> Grant {
        let cli = Cli::try_parse_from(std::iter::once("nexo").chain(flags.iter().copied())).unwrap();
        let file = nexo::config::parse(config, std::path::Path::new("nexo.toml")).unwrap();
        cli.grant.resolve(&file).unwrap().grant()
    }

    #[test]
    fn an_empty_grant_list_is_nothing_and_a_missing_one_no_operator_list() {
        let agent = AgentManifest {
            fetch_allow: vec!["docs.rs".into()],
            mcp_servers: vec!["fs".into()],
            mcp_allow: vec!["read_file".into()],
            ..AgentManifest::default()
        };
        let empty = grant(&["--allow", "fetch"], "[grant]\nfetch-hosts = []\nmcp-allow = []\n");
        assert_eq!((empty.fetch_hosts.clone(), empty.mcp_allow.clone()), (Some(vec![]), Some(McpAllow::default())));
        let both = Bounds::of_grant(&empty).intersect(&Bounds::of_manifest(&agent));
        assert!(both.fetch_hosts.unwrap().is_empty() && both.mcp_tools.unwrap().entries().is_empty());
        // No list at all: the operator of a local run lets the agent's decide.
        let unset = grant(&["--allow", "fetch"], "");
        assert_eq!((unset.fetch_hosts.clone(), unset.mcp_allow.clone()), (None, None));
        let both = Bounds::of_grant(&unset).intersect(&Bounds::of_manifest(&agent));
        assert!(both.fetch_hosts.unwrap().matches("docs.rs"));
        // Flags add to the file's list, even an empty one, and only narrow the agent's.
        let flagged = grant(&["--fetch-host", "DOCS.RS."], "[grant]\nfetch-hosts = []\n");
        let both = Bounds::of_grant(&flagged).intersect(&Bounds::of_manifest(&agent));
        assert_eq!(both.fetch_hosts.unwrap().entries(), ["docs.rs"]);
    }
}
