//! `nexo serve`: its flags, over the library's server ([`nexo::server`]).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use nexo::EngineConfig;
use nexo::server::{ServeError, ServeOptions};

use super::{report, runs};

/// The flags of `nexo serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The address to listen on [default: the config file's `[serve] listen`, else 127.0.0.1:8700].
    /// Port 0 picks a free port; the address is printed either way.
    #[arg(long, value_name = "ADDR", env = "NEXO_LISTEN")]
    listen: Option<String>,
    /// Where tenants' workspaces and the plugin cache live [default: the config file's
    /// `[serve] data-dir`, else `serve` beside the default store].
    #[arg(long, value_name = "DIR", env = "NEXO_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// The most runs this node drives at once [default: `[serve] max-in-flight`, else 64].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    max_in_flight: Option<u32>,
    /// Of those run slots, how many no tenant may take while it holds all the others: they are
    /// kept for other tenants' runs, so that one tenant's flood does not make them wait for a slot
    /// [default: `[serve] reserved-slots`, else one in eight, at least one].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=100_000))]
    reserved_slots: Option<u32>,
    /// On SIGTERM, how long runs under way may go on before the process exits; a run still going
    /// then is left to its lease, and another node (or the next start) resumes it by replay.
    #[arg(long, value_name = "SECS", default_value_t = 20)]
    grace_secs: u64,
    /// How long a node's claim of a run lasts without renewal, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    lease_secs: u64,
    #[command(flatten)]
    store: runs::StoreArgs,
}

/// `nexo serve`.
pub async fn command(args: &ServeArgs, base: &EngineConfig, store_flag: Option<&str>) -> ExitCode {
    // Installed now: a SIGTERM right after start-up must not find the
    // default action (death) still in place.
    let stop = shutdown_signal();
    let (file, store) = match runs::config_and_store(&args.store, store_flag).await {
        Ok(opened) => opened,
        Err(code) => return code,
    };
    let telemetry = match report::telemetry(&file) {
        Ok(t) => t,
        Err(code) => return code,
    };
    let options = ServeOptions {
        listen: args.listen.clone(),
        data_dir: args.data_dir.clone(),
        max_in_flight: args.max_in_flight,
        reserved_slots: args.reserved_slots,
        grace: Duration::from_secs(args.grace_secs),
        lease: Duration::from_secs(args.lease_secs),
        config_path: args.store.config().map(std::path::Path::to_path_buf),
    };
    let served = nexo::server::serve(options, base, file, store, stop).await;
    // After the graceful shutdown: the last passes' spans go out too.
    telemetry.shutdown().await;
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            errln!("error: {e}");
            ExitCode::from(match e {
                ServeError::Setup(_) => 2,
                ServeError::Failed(_) => 1,
            })
        }
    }
}

/// SIGTERM or Ctrl-C. The handlers are installed when this is called, not
/// when it is first polled: a SIGTERM right after start-up must not find
/// the default action (death) still in place.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate());
    let interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt());
    async move {
        match (term, interrupt) {
            (Ok(mut term), Ok(mut interrupt)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = interrupt.recv() => {}
                }
            }
            _ => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
}
