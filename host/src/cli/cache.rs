//! `nexo cache prune`: the local cache of pulled components, pruned of
//! what no run that may still go on needs.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Subcommand;
use nexo::registry::{self, BlobCache};
use nexo_store::{RunStatus, Store, StoreError};

/// `nexo cache …`.
#[derive(Subcommand, Debug)]
pub enum CacheCommand {
    /// Remove pulled components that have not been used for a while, except what a run that may
    /// still go on (queued, running, suspended or failed) was started from.
    Prune {
        /// How long unused: a component pulled or run from the cache within it stays (`30d`, `12h`).
        #[arg(long, value_name = "DURATION", default_value = "30d", value_parser = humantime::parse_duration)]
        unused_for: Duration,
        /// Print what would be removed, and remove nothing.
        #[arg(long)]
        dry_run: bool,
        /// The cache directory (default: `$NEXO_CACHE_DIR/registry`, else `~/.cache/nexo/registry`).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        #[command(flatten)]
        store: super::runs::StoreArgs,
    },
}

/// `nexo cache prune`: prints each component removed (its SHA-256), and a
/// summary on stderr.
pub async fn command(command: &CacheCommand, store_flag: Option<&str>) -> ExitCode {
    let CacheCommand::Prune { unused_for, dry_run, dir, store } = command;
    let Some(dir) = dir.clone().or_else(registry::default_cache_dir) else {
        errln!("error: neither HOME nor XDG_CACHE_HOME is set: name the cache with --dir");
        return ExitCode::from(2);
    };
    let store = match super::runs::config_and_store(store, store_flag).await {
        Ok((_, store)) => store,
        Err(code) => return code,
    };
    let keep = match needed(&*store).await {
        Ok(keep) => keep,
        Err(e) => return super::runs::store_error(&e),
    };
    let pruned = match BlobCache::open(&dir).and_then(|cache| cache.prune(&keep, *unused_for, *dry_run)) {
        Ok(pruned) => pruned,
        Err(e) => {
            errln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    for hex in &pruned.components {
        outln!("{hex}");
    }
    let verb = if *dry_run { "would remove" } else { "removed" };
    errln!(
        "{verb} {} components ({} bytes) from {}; kept {}",
        pruned.components.len(),
        pruned.bytes,
        dir.display(),
        pruned.kept
    );
    ExitCode::SUCCESS
}

/// The components the runs that may still go on were started from, by
/// SHA-256 (a cached component's file name): a resume loads the very file,
/// the agent's, its search backend's and its skill components'.
async fn needed(store: &dyn Store) -> Result<BTreeSet<String>, StoreError> {
    let mut keep = BTreeSet::new();
    for status in [RunStatus::Queued, RunStatus::Running, RunStatus::Suspended, RunStatus::Failed] {
        for run in store.runs(Some(status), usize::MAX).await? {
            keep.insert(run.component_sha256.clone());
            let Ok(spec) = nexo::runs::RunSpec::from_record(run.grant.clone()) else { continue };
            let backend = spec.search.and_then(|s| s.backend);
            for file in backend.iter().chain(spec.skill_components.iter().map(|s| &s.path)) {
                if let Some(name) = file.file_name() {
                    keep.insert(name.to_string_lossy().into_owned());
                }
            }
        }
    }
    Ok(keep)
}
