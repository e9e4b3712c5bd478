//! The operator's config file (`--config FILE`, `NEXO_CONFIG`): its tables
//! as types, and the one function that parses it.
//!
//! The file is untrusted text with secrets in it (an MCP server's token,
//! headers and environment), so a parse error names the line and the
//! problem and never quotes a value ([`crate::files::toml_problem`]). The
//! `config_file` fuzz target checks that over mutated files.
//!
//! Each table mirrors a group of command-line flags; the CLI lays its flags
//! over the file (flags win), and a recorded run keeps the merged settings.

pub mod agents;
mod grant;
mod hooks;
mod model;
mod search;
mod skills;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::ConfigError;
pub use crate::telemetry::{PrometheusTable, TelemetryTable};
pub use agents::AgentsTable;
pub use grant::{GrantFlags, GrantTable, read_only_warning};
pub use hooks::HooksTable;
pub use model::{ModelSetup, ModelTable};
pub use search::{ApiKeyTable, SearchSetup, SearchTable};
pub use skills::SkillsTable;

/// The operator's config file.
#[derive(Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// The `[grant]` table.
    #[serde(default)]
    pub grant: GrantTable,
    /// The `[model]` table.
    #[serde(default)]
    pub model: ModelTable,
    /// The `[search]` table.
    pub search: Option<SearchTable>,
    /// The `[skills]` table: skill components given to every run.
    #[serde(default)]
    pub skills: SkillsTable,
    /// The `[hooks]` table: hook components asked about every run's calls.
    #[serde(default)]
    pub hooks: HooksTable,
    /// The `[agents]` table: the agents workflows may start as child runs.
    #[serde(default)]
    pub agents: AgentsTable,
    /// Where runs are recorded: a path, `sqlite://PATH` or `postgres://…`
    /// (`--store` and `NEXO_STORE` win over it).
    pub store: Option<String>,
    /// Keep each run's events in memory and write them once, when it ends
    /// or suspends. The journal is never held back.
    #[serde(default, rename = "buffer-events")]
    pub buffer_events: bool,
    /// The `[mcp.NAME]` tables: the MCP servers agents may request.
    #[serde(default)]
    pub mcp: BTreeMap<String, nexo_mcp::ServerConfig>,
    /// The `[worker]` table: how `nexo worker` runs jobs.
    #[serde(default)]
    pub worker: WorkerTable,
    /// The `[sessions]` table: how long sessions are kept.
    #[serde(default)]
    pub sessions: SessionsTable,
    /// The `[serve]` table: how `nexo serve` hosts tenants.
    #[serde(default)]
    pub serve: ServeTable,
    /// The `[sandbox]` table: what confined processes see of the host.
    #[serde(default)]
    pub sandbox: SandboxTable,
    /// The `[telemetry]` table: traces and metrics for the operator.
    #[serde(default)]
    pub telemetry: TelemetryTable,
    /// The `[registries]` table: which registries are reached over plain HTTP.
    #[serde(default)]
    pub registries: crate::registry::RegistriesTable,
}

impl ConfigFile {
    /// The grant this file's `[grant]` and `[mcp.NAME]` tables give, with
    /// `flags` laid over them.
    pub fn grant(&self, flags: GrantFlags) -> Result<crate::grant::Grant, ConfigError> {
        let private = self.sandbox.net_allow_private.clone();
        grant::grant(self.grant.clone(), &self.mcp, self.sandbox.view(), private, flags)
    }

    /// `grant` with this file's `[mcp.NAME]` tables and `[sandbox]` view and
    /// private addresses, as a pass reads them now: none is recorded with a
    /// run.
    pub fn read_into(&self, mut grant: crate::grant::Grant) -> crate::grant::Grant {
        grant.mcp.tables = self.mcp.clone();
        grant.sandbox.view = self.sandbox.view();
        grant.sandbox.net_private = self.sandbox.net_allow_private.clone();
        grant
    }
}

/// Reads the config file, if any. The CLI reads it once per command.
pub fn read(path: Option<&Path>) -> Result<ConfigFile, ConfigError> {
    match path {
        Some(path) => {
            let text = crate::files::read_regular_text(path, crate::files::MAX_TOML_BYTES)
                .map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
            parse(&text, path)
        }
        None => Ok(ConfigFile::default()),
    }
}

/// Parses the text of a config file; `path` only names it in errors.
pub fn parse(text: &str, path: &Path) -> Result<ConfigFile, ConfigError> {
    let mut file = toml::from_str::<ConfigFile>(text)
        .map_err(|e| ConfigError::Parse { path: path.to_path_buf(), problem: crate::files::toml_problem(text, &e) })?;
    // `[serve.hooks]` files are the config file's, wherever a node runs from.
    let dir = path.parent().unwrap_or(Path::new("."));
    for hook in file.serve.hooks.values_mut() {
        let placed = if hook.is_relative() { dir.join(&*hook) } else { hook.clone() };
        *hook = std::path::absolute(&placed).unwrap_or(placed);
    }
    Ok(file)
}

/// `[worker]`: how `nexo worker` runs jobs.
#[derive(Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct WorkerTable {
    /// How many jobs one worker runs at once (`--max-in-flight`,
    /// `NEXO_MAX_IN_FLIGHT` win).
    pub max_in_flight: Option<u32>,
    /// Listen for the store's notification that a job is due (PostgreSQL's
    /// `LISTEN`), rather than find it only at the next poll (`--no-notify`
    /// wins). Unset: on.
    pub notify: Option<bool>,
}

/// `[sessions]`: how long sessions are kept.
#[derive(Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct SessionsTable {
    /// Delete sessions idle for longer than this, such as `30d` (`--retain`
    /// wins). Unset: sessions are kept until deleted.
    pub retain: Option<String>,
}

/// `[serve]`: how `nexo serve` hosts tenants.
#[derive(Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ServeTable {
    /// The address to listen on (`--listen` wins).
    pub listen: Option<String>,
    /// Where tenants' workspaces and the plugin cache live (`--data-dir` wins).
    pub data_dir: Option<PathBuf>,
    /// How many runs this node drives at once (`--max-in-flight` wins).
    pub max_in_flight: Option<u32>,
    /// Of those run slots, how many a tenant holding all the others may
    /// not take: they wait for other tenants' runs (`--reserved-slots`
    /// wins; default one in eight, at least one).
    pub reserved_slots: Option<u32>,
    /// The largest plugin an upload may carry, in bytes.
    pub max_plugin_bytes: Option<u64>,
    /// How many uploaded plugins are compiled at once (default 2), off the
    /// API's threads; further uploads wait their turn.
    pub compile_concurrency: Option<u32>,
    /// Each run's wall-clock limit per pass, in seconds.
    pub run_timeout_secs: Option<u64>,
    /// Each run's memory cap, in MiB.
    pub memory_mib: Option<u64>,
    /// Use the pooling instance allocator (default: on). Off allocates each
    /// instance on demand: slower to start, but no address space reserved
    /// per slot, for very many concurrent runs.
    pub pooling: Option<bool>,
    /// The operator's models, by name: the `[model]` keys. A tenant's policy
    /// names the ones it may use; their keys stay the operator's.
    #[serde(default)]
    pub models: BTreeMap<String, ModelTable>,
    /// The operator's hooks, by name: `.wasm` files (relative to the config
    /// file). A tenant's policy names the ones its runs are asked about.
    #[serde(default)]
    pub hooks: BTreeMap<String, PathBuf>,
    /// The reverse proxies (IP addresses and CIDR blocks) whose
    /// `X-Forwarded-For` names the client; none by default, so the peer is.
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
}

/// `[sandbox]`: what the local sandbox's shell commands, and the programs
/// nexo confines (MCP servers with `confine`, the Claude Code CLI with its
/// own tools), may read of the host besides their own directory. Applies to
/// `nexo run` and `nexo serve` alike, read again at each resume.
#[derive(Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct SandboxTable {
    /// Absolute paths readable (never writable), each with what is beneath
    /// it. Replaces the default list ([`nexo_sandbox::DEFAULT_SYSTEM_PATHS`]);
    /// `["/"]` is the whole host filesystem.
    #[serde(default, deserialize_with = "system_view")]
    pub system_paths: Option<nexo_sandbox::SystemView>,
    /// Private addresses (a package mirror on the LAN) that shell commands
    /// granted network (`net-hosts`) may reach through the egress proxy,
    /// though the address guard refuses private, loopback and link-local
    /// addresses to everyone else. Empty, the default: none.
    #[serde(default)]
    pub net_allow_private: Vec<std::net::IpAddr>,
}

impl SandboxTable {
    /// The system view: the table's paths, or the default.
    pub fn view(&self) -> nexo_sandbox::SystemView {
        self.system_paths.clone().unwrap_or_default()
    }
}

/// Reads `system-paths`, refusing a relative path or one with `..` where it
/// is written.
fn system_view<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<nexo_sandbox::SystemView>, D::Error> {
    let paths = Vec::<PathBuf>::deserialize(d)?;
    nexo_sandbox::SystemView::new(paths).map(Some).map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sandbox_table_sets_the_system_view() {
        let path = Path::new("nexo.toml");
        let file = parse("", path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(file.sandbox.view(), nexo_sandbox::SystemView::default());
        let file =
            parse("[sandbox]\nsystem-paths = [\"/usr\", \"/opt/tools/\"]\n", path).unwrap_or_else(|e| panic!("{e}"));
        let view = file.sandbox.view();
        let paths: Vec<&Path> = view.paths().iter().map(PathBuf::as_path).collect();
        assert_eq!(paths, [Path::new("/opt/tools"), Path::new("/usr")]);
        for bad in ["\"home/me\"", "\"/usr/../root\""] {
            let text = format!("[sandbox]\nsystem-paths = [{bad}]\n");
            let e = parse(&text, path).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains("line 2") && e.contains("absolute"), "{bad}: {e}");
        }
    }
}
