//! The operator's grant on the command line: which capabilities, which
//! permission mode, which sandbox.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, ValueEnum};
use nexo::ConfigError;
use nexo::authority::{Grant, Permissions};
use nexo::manifest::{Capability, PermissionMode};
use nexo::settings::RunOptions;
use nexo_sandbox::{Confinement, ContainerConfig, ContainerSandbox, LocalSandbox, Sandbox, ShellPolicy};
use serde::{Deserialize, Serialize};

/// Grant flags shared by `run` and `inspect`. Each flag overrides the same
/// setting in the operator's config file; `--allow` adds to its list.
#[derive(Args, Debug, Clone)]
pub struct GrantArgs {
    /// The operator's config file (TOML, a `[grant]` table). Flags override it.
    #[arg(long, value_name = "FILE", env = "NEXO_CONFIG")]
    config: Option<PathBuf>,
    /// Grant capabilities beyond the default `read,glob`: write, shell, fetch, search
    /// (comma-separated or repeated). An agent gets only what it also requested.
    #[arg(long = "allow", value_name = "CAP", value_delimiter = ',', value_parser = parse_capability)]
    allow: Vec<Capability>,
    /// Permission mode for actions beyond reading [default: read-only].
    #[arg(long, value_enum)]
    mode: Option<ModeArg>,
    /// Where tools act: `virtual` (in memory, no host access), `local` (the --cwd
    /// directory) or `container` (a hardened throwaway container; needs --image).
    #[arg(long, value_enum)]
    sandbox: Option<SandboxArg>,
    /// The image for `--sandbox container`.
    #[arg(long, value_name = "IMAGE")]
    image: Option<String>,
    /// The container CLI for `--sandbox container` [default: docker].
    #[arg(long, value_enum)]
    container_runtime: Option<RuntimeArg>,
    /// The directory of the local sandbox (default: the current directory).
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// How local shell commands are confined [default: auto]. `none` runs them
    /// unconfined: only for trusted agents, and only when you say so.
    #[arg(long, value_enum)]
    shell_confinement: Option<ConfinementArg>,
    /// Limit `fetch` to these hosts and their subdomains (repeatable; adds to
    /// `fetch-hosts`). A URL must be on this list and on the agent's `fetch-allow`.
    #[arg(long = "fetch-host", value_name = "HOST", value_delimiter = ',')]
    fetch_hosts: Vec<String>,
}

/// The operator's config file.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    #[serde(default)]
    grant: GrantTable,
    /// The `[model]` table.
    #[serde(default)]
    pub model: super::model::ModelTable,
    /// The `[search]` table.
    pub search: Option<super::web::SearchTable>,
    /// Where runs are recorded: a path, `sqlite://PATH` or `postgres://…`
    /// (`--store` and `NEXO_STORE` win over it).
    pub store: Option<String>,
    /// Keep each run's events in memory and write them once, when it ends
    /// or suspends. The journal is never held back.
    #[serde(default, rename = "buffer-events")]
    pub buffer_events: bool,
}

/// Reads the config file, if any. The CLI reads it once per command.
pub fn read_config(path: Option<&std::path::Path>) -> Result<ConfigFile, ConfigError> {
    match path {
        Some(path) => {
            let text = nexo::files::read_regular_text(path, nexo::files::MAX_TOML_BYTES)
                .map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
            toml::from_str::<ConfigFile>(&text).map_err(|e| ConfigError::Parse {
                path: path.to_path_buf(),
                problem: nexo::files::toml_problem(&text, &e),
            })
        }
        None => Ok(ConfigFile::default()),
    }
}

/// `[grant]` in the config file: the same settings as the flags.
#[derive(Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct GrantTable {
    #[serde(default)]
    allow: Vec<Capability>,
    mode: Option<ModeArg>,
    sandbox: Option<SandboxArg>,
    cwd: Option<PathBuf>,
    image: Option<String>,
    container_runtime: Option<RuntimeArg>,
    shell_confinement: Option<ConfinementArg>,
    fetch_hosts: Option<Vec<String>>,
}

#[derive(ValueEnum, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
enum ModeArg {
    ReadOnly,
    Auto,
    Ask,
    Approve,
}

#[derive(ValueEnum, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
enum SandboxArg {
    Virtual,
    Local,
    Container,
}

#[derive(ValueEnum, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
enum RuntimeArg {
    Docker,
    Apple,
}

#[derive(ValueEnum, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
enum ConfinementArg {
    Auto,
    Bubblewrap,
    Landlock,
    None,
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
        Ok(Resolved {
            fetch_hosts,
            allow,
            mode: self.mode.or(t.mode).unwrap_or(ModeArg::ReadOnly),
            sandbox: self.sandbox.or(t.sandbox).unwrap_or(SandboxArg::Virtual),
            cwd: self.cwd.clone().or(t.cwd),
            image: self.image.clone().or(t.image),
            container_runtime: self.container_runtime.or(t.container_runtime).unwrap_or(RuntimeArg::Docker),
            shell_confinement: self.shell_confinement.or(t.shell_confinement).unwrap_or(ConfinementArg::Auto),
        })
    }
}

/// The operator's grant after merging the config file and the flags. A
/// recorded run keeps it (it holds no secret), so a resume needs no flags.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Resolved {
    fetch_hosts: Option<Vec<String>>,
    allow: Vec<Capability>,
    mode: ModeArg,
    sandbox: SandboxArg,
    cwd: Option<PathBuf>,
    image: Option<String>,
    container_runtime: RuntimeArg,
    shell_confinement: ConfinementArg,
}

impl Resolved {
    /// The grant as a run records it: the local sandbox's directory made
    /// absolute, so a resume elsewhere acts in the same place.
    pub fn recorded(&self) -> Result<Resolved, ConfigError> {
        let mut r = self.clone();
        if r.sandbox == SandboxArg::Local {
            let cwd = match &r.cwd {
                Some(dir) => std::path::absolute(dir),
                None => std::env::current_dir(),
            }
            .map_err(|e| ConfigError::invalid("--cwd", format!("cannot read the current directory: {e}")))?;
            r.cwd = Some(cwd);
        }
        Ok(r)
    }

    /// The same grant, narrowed: a stricter `mode`, and `deny` taken out.
    /// A resume can only narrow what the run started with.
    pub fn narrowed(mut self, mode: Option<PermissionMode>, deny: &[Capability]) -> Resolved {
        if let Some(mode) = mode {
            self.mode = match nexo::authority::stricter(self.mode(), mode) {
                PermissionMode::ReadOnly => ModeArg::ReadOnly,
                PermissionMode::Auto => ModeArg::Auto,
                PermissionMode::Ask => ModeArg::Ask,
                PermissionMode::Approve => ModeArg::Approve,
            };
        }
        self.allow.retain(|c| !deny.contains(c));
        self
    }

    /// The granted capabilities: `read` and `glob`, plus the allow list.
    pub fn grant(&self) -> Grant {
        let mut grant = Grant::default();
        grant.capabilities.extend(self.allow.iter().copied());
        grant.fetch_hosts = self.fetch_hosts.clone();
        grant
    }

    /// The permission mode.
    pub fn mode(&self) -> PermissionMode {
        match self.mode {
            ModeArg::ReadOnly => PermissionMode::ReadOnly,
            ModeArg::Auto => PermissionMode::Auto,
            ModeArg::Ask => PermissionMode::Ask,
            ModeArg::Approve => PermissionMode::Approve,
        }
    }

    /// The sandbox's name.
    pub fn sandbox_name(&self) -> &'static str {
        match self.sandbox {
            SandboxArg::Virtual => "virtual",
            SandboxArg::Local => "local",
            SandboxArg::Container => "container",
        }
    }

    /// The local sandbox's shell policy.
    fn shell_policy(&self) -> ShellPolicy {
        let confinement = match self.shell_confinement {
            ConfinementArg::Auto => Confinement::Auto,
            ConfinementArg::Bubblewrap => Confinement::Bubblewrap,
            ConfinementArg::Landlock => Confinement::Landlock,
            ConfinementArg::None => Confinement::Unconfined,
        };
        ShellPolicy { confinement, ..ShellPolicy::default() }
    }

    /// How shell commands would run under this grant, in one line, truthfully:
    /// the mechanism actually in force, not the one asked for.
    pub fn shell_summary(&self, shell_effective: bool) -> String {
        let how = match self.sandbox {
            SandboxArg::Virtual => return "(none: the virtual sandbox has no shell)".into(),
            SandboxArg::Container => "in the container".to_string(),
            SandboxArg::Local => self.shell_policy().describe(),
        };
        if shell_effective { how } else { format!("{how} (shell not granted to this agent)") }
    }

    /// Run options for this grant.
    pub fn run_options(&self) -> Result<RunOptions, ConfigError> {
        let sandbox: Option<Arc<dyn Sandbox>> = match self.sandbox {
            SandboxArg::Virtual => None,
            SandboxArg::Local => {
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
            SandboxArg::Container => {
                let Some(image) = &self.image else {
                    return Err(ConfigError::invalid(
                        "--image",
                        "--sandbox container needs --image (there is no default image)",
                    ));
                };
                let config = match self.container_runtime {
                    RuntimeArg::Docker => ContainerConfig::docker(image),
                    RuntimeArg::Apple => ContainerConfig::apple(image),
                };
                Some(Arc::new(
                    ContainerSandbox::new(config).map_err(|e| ConfigError::invalid("--sandbox", e.to_string()))?,
                ))
            }
        };
        if self.cwd.is_some() && self.sandbox != SandboxArg::Local {
            return Err(ConfigError::invalid(
                "--cwd",
                "--cwd needs --sandbox local (only the local sandbox works in a host directory)",
            ));
        }
        if self.image.is_some() && self.sandbox != SandboxArg::Container {
            return Err(ConfigError::invalid("--image", "--image needs --sandbox container"));
        }
        let mut permissions = Permissions::new(self.mode());
        if self.mode == ModeArg::Ask {
            permissions = permissions.on_ask(ask_on_terminal);
        }
        Ok(RunOptions { sandbox, permissions, grant: self.grant(), ..RunOptions::default() })
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

/// `ask` mode's hook: a y/N question on the terminal. Without a terminal
/// nobody can answer, so the answer is no.
///
/// The action comes from the model, so it is shown whole and escaped on one
/// line: no control sequence in it can erase or redraw the question.
pub fn ask_on_terminal(cap: Capability, detail: &str) -> bool {
    if !std::io::stdin().is_terminal() || !std::io::stderr().is_terminal() {
        return false;
    }
    let detail = nexo::terminal::escape(detail, nexo::terminal::Lines::Flatten);
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "Allow `{}` {detail}? [y/N] ", cap.as_str());
    let _ = err.flush();
    let mut answer = String::new();
    if std::io::stdin().lock().read_line(&mut answer).is_err() {
        return false;
    }
    matches!(answer.trim(), "y" | "Y" | "yes" | "Yes")
}
