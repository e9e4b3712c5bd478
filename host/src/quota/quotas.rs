//! A tenant's quotas: the limits on what its runs use, set in its policy
//! (`[quotas]`).

use serde::{Deserialize, Serialize};

/// A tenant's quotas, part of its policy. Unset means unlimited, except
/// for what the tenant keeps on the server (plugin storage) and holds open
/// (event streams, proxied connections): those have a default cap, so that
/// a tenant nobody thought to limit cannot fill the disk or the node's
/// connections.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Quotas {
    /// Runs that run or may run at once: queued, running, and those whose
    /// resume or retry is queued (each running run is one live instance).
    pub concurrent_runs: Option<u64>,
    /// Runs started per hour.
    pub runs_per_hour: Option<u64>,
    /// Model tokens (input and output) per hour. Each pass of a run gets
    /// what is left of the hour's tokens, one budget for all its prompts.
    pub tokens_per_hour: Option<u64>,
    /// CPU ticks per hour: the engine's epoch ticks (10 ms) at which one of
    /// the tenant's guests was running. A run also gets what is left of
    /// the hour's ticks, and is stopped past it.
    pub cpu_ticks_per_hour: Option<u64>,
    /// CPU ticks for one run over all its passes (a resumed run goes on
    /// from what its earlier passes left): past it, the guest is stopped,
    /// and the run cannot go on.
    pub cpu_ticks_per_run: Option<u64>,
    /// US dollars one run may spend on model turns over all its passes,
    /// at the prices of the operator's models (`[serve.models.NAME] price`,
    /// which every model the policy names then needs). A turn that may pass
    /// it suspends the run with a `budget` approval, which the tenant can
    /// approve only once the operator has raised this quota to cover it.
    pub usd_per_run: Option<f64>,
    /// US dollars one session's prompts (each a run) may spend on model
    /// turns together, at the same prices: a run of the session gets what
    /// the session's other runs left as its budget, and suspends as at
    /// `usd-per-run`.
    pub usd_per_session: Option<f64>,
    /// US dollars all the tenant's runs may spend on model turns in one UTC
    /// day (at the same prices). A start past it is refused until midnight
    /// UTC; a turn that may pass it suspends its run with a `budget`
    /// approval, approvable once the day's spend allows it.
    pub usd_per_day: Option<f64>,
    /// Web bytes per hour: the bodies the tenant's runs send and receive
    /// with the `fetch` tool. A run also gets what is left of the hour's
    /// bytes, and its fetches are refused past it.
    pub egress_bytes_per_hour: Option<u64>,
    /// The linear memory of all the tenant's live instances on one node,
    /// together, in MiB (each instance also has the server's own cap).
    pub memory_mib: Option<u64>,
    /// The CPU all the tenant's running guests on one node may use
    /// together, in cores (0.5 is half a core): past it they are made to
    /// wait at their epoch ticks, so a busy loop cannot crowd out others.
    pub cpu_cores: Option<f64>,
    /// The bytes of all the tenant's stored plugins together; unset:
    /// [`DEFAULT_PLUGIN_BYTES`].
    pub plugin_bytes: Option<u64>,
    /// How many plugins the tenant may store; unset: [`DEFAULT_PLUGINS`].
    pub plugins: Option<u64>,
    /// Event streams the tenant may hold open at once on one node; unset:
    /// [`DEFAULT_OPEN_STREAMS`].
    pub open_streams: Option<u64>,
    /// Connections the tenant's confined commands and MCP servers may hold
    /// open at once through the egress proxy on one node (one more is
    /// answered 503); unset: [`DEFAULT_NET_CONNECTIONS`], an eighth of the
    /// node's 512, so that no tenant's idle tunnels take them all.
    pub net_connections: Option<u64>,
    /// The bytes the tenant's workspace may hold on one node: an upload
    /// (`PUT /v1/workspace/{path}`) past it is refused. Unset: 1 GiB
    /// ([`crate::server::workspace::DEFAULT_WORKSPACE_BYTES`]), not unlimited.
    pub workspace_bytes: Option<u64>,
    /// The files and directories the tenant's workspace may hold on one
    /// node (each costs an inode whatever its size): an upload past it is
    /// refused. Unset: [`DEFAULT_WORKSPACE_FILES`].
    pub workspace_files: Option<u64>,
}

/// A tenant's plugin storage when its policy sets none (1 GiB).
pub const DEFAULT_PLUGIN_BYTES: u64 = 1 << 30;

/// A tenant's plugin count when its policy sets none.
pub const DEFAULT_PLUGINS: u64 = 100;

/// A tenant's open event streams per node when its policy sets none.
pub const DEFAULT_OPEN_STREAMS: u64 = 64;

/// A tenant's egress proxy connections per node when its policy sets none.
pub const DEFAULT_NET_CONNECTIONS: u64 = 64;

/// A tenant's workspace files and directories when its policy sets none.
pub const DEFAULT_WORKSPACE_FILES: u64 = 10_000;

impl Quotas {
    /// The tenant's cap on its workspace's files and directories.
    pub fn workspace_files_cap(&self) -> u64 {
        self.workspace_files.unwrap_or(DEFAULT_WORKSPACE_FILES)
    }

    /// The tenant's plugin storage cap in bytes.
    pub fn plugin_bytes_cap(&self) -> u64 {
        self.plugin_bytes.unwrap_or(DEFAULT_PLUGIN_BYTES)
    }

    /// The tenant's plugin count cap.
    pub fn plugins_cap(&self) -> u64 {
        self.plugins.unwrap_or(DEFAULT_PLUGINS)
    }

    /// The tenant's cap on open event streams per node.
    pub fn open_streams_cap(&self) -> u64 {
        self.open_streams.unwrap_or(DEFAULT_OPEN_STREAMS)
    }

    /// The tenant's cap on egress proxy connections per node.
    pub fn net_connections_cap(&self) -> u64 {
        self.net_connections.unwrap_or(DEFAULT_NET_CONNECTIONS)
    }
}
