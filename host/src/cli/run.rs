//! The flags of `nexo run`, which `nexo schedule add` takes too.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use nexo_store::Missed;

use super::{grant, model, web};

/// The flags of `nexo run` (and `nexo schedule add`).
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The agent: a `.wasm` component, a registry reference (HOST[:PORT]/REPO:TAG or
    /// @sha256:…), or a declarative `.toml` manifest.
    pub file: PathBuf,
    /// The input (prompt) for the agent.
    pub input: String,
    /// Wall-clock limit for the whole run (every turn, tool call and host call), in seconds: 1 or more.
    #[arg(long, value_name = "SECS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub timeout: u64,
    /// Memory cap for the agent's linear memory, in MiB: 16 to 4096.
    #[arg(long, value_name = "MIB", default_value_t = 256, value_parser = clap::value_parser!(u64).range(16..=4096))]
    pub memory: u64,
    /// Print events as JSON lines, then the outcome as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Record nothing: no run, events, checkpoints or journal (the run cannot suspend or be resumed).
    #[arg(long, conflicts_with_all = ["later", "cron"])]
    pub ephemeral: bool,
    /// Accept the authority this version of the plugin asks for, though it asks for more than
    /// the version accepted before, and record it (as `nexo plugins accept FILE` does).
    #[arg(long)]
    pub accept_authority: bool,
    /// Record the run as queued for a worker (`nexo worker`) and print its id, instead of running it here.
    #[arg(long, conflicts_with = "cron")]
    pub later: bool,
    #[command(flatten)]
    pub grant: grant::GrantArgs,
    #[command(flatten)]
    pub search: web::SearchArgs,
    #[command(flatten)]
    pub model: model::ModelArgs,
    #[command(flatten)]
    pub schedule: ScheduleFlags,
}

/// What happens to occurrences missed while no node was up.
#[derive(ValueEnum, Debug, Clone, Copy, Default)]
pub enum MissedArg {
    /// Skip them: the next run is at the next occurrence to come.
    #[default]
    Skip,
    /// Start one run for all of them, at once.
    RunOnce,
}

impl From<MissedArg> for Missed {
    fn from(m: MissedArg) -> Missed {
        match m {
            MissedArg::Skip => Missed::Skip,
            MissedArg::RunOnce => Missed::RunOnce,
        }
    }
}

/// `nexo run … --schedule CRON`: record a schedule instead of a run.
#[derive(Args, Debug, Default)]
pub struct ScheduleFlags {
    /// Record a schedule that starts this run at each occurrence of CRON (five fields, or six with
    /// seconds first), instead of running it now; `nexo worker` or `nexo serve` starts them.
    #[arg(long = "schedule", id = "cron", value_name = "CRON")]
    pub cron: Option<String>,
    /// With a schedule: the IANA time zone its cron expression is read in.
    #[arg(long, value_name = "ZONE", default_value = "UTC")]
    pub tz: String,
    /// With a schedule: what happens to occurrences missed while no worker was up (late by more
    /// than a minute).
    #[arg(long, value_enum, default_value_t)]
    pub missed: MissedArg,
}
