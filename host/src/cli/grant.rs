//! The operator's grant on the command line: which capabilities, which
//! permission mode, which sandbox; and `ask` mode's question on the terminal.

use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;

use clap::Args;
use nexo::ConfigError;
use nexo::config::{ConfigFile, GrantFlags, GrantTable};
pub use nexo::grant::parse_capability;
use nexo::grant::{CommandRule, ConfinementSetting, Grant, RuntimeSetting};
use nexo::manifest::Capability;
use nexo::manifest::{PermissionMode, SandboxKind};

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
    mode: Option<PermissionMode>,
    /// Where tools act: `virtual` (in memory, no host access), `local` (the --cwd
    /// directory) or `container` (a hardened throwaway container; needs --image).
    #[arg(long, value_enum)]
    sandbox: Option<SandboxKind>,
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
    /// Let the local sandbox's shell commands reach this host, through nexo's egress
    /// proxy only: `HOST` (and its subdomains) on ports 80 and 443, or `HOST:PORT`
    /// (repeatable; adds to `net-hosts`). Commands get HTTP_PROXY and HTTPS_PROXY;
    /// nothing else is reachable, not even DNS.
    #[arg(long = "allow-net", value_name = "HOST[:PORT]", value_delimiter = ',')]
    net_hosts: Vec<String>,
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
    /// A rule on the shell's commands: `allow`, `ask` or `deny`, then an argv
    /// prefix, as in `--command-rule 'deny git push'` (repeatable; after the
    /// config file's `command-rules`). Within the rules, the first match decides.
    #[arg(long = "command-rule", value_name = "RULE", value_parser = str::parse::<CommandRule>)]
    command_rules: Vec<CommandRule>,
    /// A hook component (`.wasm`) asked about each gated call and prompt of the run, after the
    /// config file's `[hooks]` (repeatable). A hook holds no authority and can only narrow.
    #[arg(long = "hook", value_name = "FILE")]
    hooks: Vec<PathBuf>,
}

impl GrantArgs {
    /// The config file, if one was given.
    pub fn config_path(&self) -> Option<&std::path::Path> {
        self.config.as_deref()
    }

    /// The hooks as a run records them: the config file's `[hooks]`, then
    /// `--hook`'s, each loaded (a bad one stops the command before anything
    /// is recorded or queued).
    pub async fn recorded_hooks(
        &self,
        engine: &nexo::Engine,
        file: &ConfigFile,
    ) -> Result<Vec<nexo::runs::HookFile>, nexo::RunError> {
        let mut paths = file.hooks.components(self.config_path());
        paths.extend(self.hooks.iter().map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone())));
        nexo::runs::prepare::hook_files(engine, &paths).await
    }

    /// The config file's `[grant]` table with the flags laid over it.
    pub fn resolve(&self, file: &ConfigFile) -> Result<Grant, ConfigError> {
        let mut mcp = BTreeMap::new();
        for flag in &self.mcp {
            let (name, config) = parse_mcp_flag(flag)?;
            mcp.insert(name, config);
        }
        let listed = |list: &Vec<String>| (!list.is_empty()).then(|| list.clone());
        file.grant(GrantFlags {
            table: GrantTable {
                allow: self.allow.clone(),
                mode: self.mode,
                sandbox: self.sandbox,
                image: self.image.clone(),
                container_runtime: self.container_runtime,
                cwd: self.cwd.clone(),
                shell_confinement: self.shell_confinement,
                fetch_hosts: listed(&self.fetch_hosts),
                net_hosts: listed(&self.net_hosts),
                mcp_allow: listed(&self.mcp_allow),
                command_rules: self.command_rules.clone(),
                data_flow: None,
            },
            mcp,
        })
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
    {
        // Not held while the answer is awaited: another thread's line (a
        // log, what Ctrl-C says) must not wait for the person.
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "Allow {action}? [y/N] ");
        let _ = err.flush();
    }
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
    use nexo::grant::{Bounds, McpAllow};
    use nexo::manifest::AgentManifest;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        grant: GrantArgs,
    }

    fn grant(flags: &[&str], config: &str) -> nexo::grant::Grant {
        let cli = Cli::try_parse_from(std::iter::once("nexo").chain(flags.iter().copied())).unwrap();
        let file = nexo::config::parse(config, std::path::Path::new("nexo.toml")).unwrap();
        cli.grant.resolve(&file).unwrap()
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
        assert_eq!((empty.fetch_hosts.clone(), empty.mcp.allow.clone()), (Some(vec![]), Some(McpAllow::default())));
        let both = empty.bounds().intersect(&Bounds::of_manifest(&agent));
        assert!(both.fetch_hosts.unwrap().is_empty() && both.mcp_tools.unwrap().entries().is_empty());
        // No list at all: the operator of a local run lets the agent's decide.
        let unset = grant(&["--allow", "fetch"], "");
        assert_eq!((unset.fetch_hosts.clone(), unset.mcp.allow.clone()), (None, None));
        let both = unset.bounds().intersect(&Bounds::of_manifest(&agent));
        assert!(both.fetch_hosts.unwrap().matches("docs.rs"));
        // Flags add to the file's list, even an empty one, and only narrow the agent's.
        let flagged = grant(&["--fetch-host", "DOCS.RS."], "[grant]\nfetch-hosts = []\n");
        let both = flagged.bounds().intersect(&Bounds::of_manifest(&agent));
        assert_eq!(both.fetch_hosts.unwrap().entries(), ["docs.rs"]);
    }
}
