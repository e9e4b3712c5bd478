//! Background runs: `nexo run --later` records a run as queued with a job
//! that starts it, and `nexo worker` takes due jobs from the store and runs
//! them, any number of workers side by side.
//!
//! A job's claim holds a lease the worker renews by heartbeat. A worker
//! that loses it (it stalled, or the store says another worker has the job)
//! drops the run at once. The run itself is fenced by its own lease: every
//! write checks its owner, so a worker that lost a run can never append to
//! it, and exactly one worker runs it at a time. When a worker dies, its job
//! lease lapses, another worker claims the job and recovers the run through
//! replay, so nothing journaled runs twice.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use nexo::EngineConfig;
use nexo::runs::worker::{LoopSettings, Worker, claim_loop, default_reserved};
use nexo::runs::{RunSpec, Runs};

use super::runs::StoreArgs;
use super::{report, runs, sessions};

/// Jobs one worker runs at once when nothing says otherwise.
const DEFAULT_MAX_IN_FLIGHT: u32 = 4;

/// The flags of `nexo worker`.
#[derive(Args, Debug)]
pub struct WorkerArgs {
    /// The most jobs this worker runs at once [default: the config file's `[worker] max-in-flight`, else 4].
    #[arg(long, value_name = "N", env = "NEXO_MAX_IN_FLIGHT", value_parser = clap::value_parser!(u32).range(1..=1024))]
    max_in_flight: Option<u32>,
    /// How long a claim of a job, and of its run, lasts without a heartbeat, in seconds; the worker
    /// renews both every third. Another worker takes over a job (and recovers its run) once it ran out.
    #[arg(long, value_name = "SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    lease_secs: u64,
    /// How often an idle worker looks for due jobs, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 250, value_parser = clap::value_parser!(u64).range(10..=60_000))]
    poll_ms: u64,
    /// Stop once the store holds no queued or running job (for scripts and tests), instead of
    /// waiting for more. A job another worker holds, or one waiting for its retry, keeps it going.
    #[arg(long)]
    until_idle: bool,
    /// Find due jobs only by polling (every --poll-ms), not by the store's notification that one
    /// is due (PostgreSQL's `LISTEN`; SQLite has none) [default: the config file's `[worker]
    /// notify`, else on].
    #[arg(long)]
    no_notify: bool,
    /// Delete sessions idle longer than this, such as 30d, at start and every few minutes
    /// [default: the config file's `[sessions] retain`, else keep them].
    #[arg(long, value_name = "PERIOD", value_parser = nexo::session::parse_retention)]
    retain: Option<Duration>,
    /// This worker's address for `/metrics`, instead of `[telemetry.prometheus] listen` (each
    /// node on one host needs its own).
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<std::net::SocketAddr>,
    #[command(flatten)]
    store: StoreArgs,
}

/// `nexo run --later`: records the run as queued, with its start job.
pub async fn queue(runs: &Runs, loaded: &runs::Loaded, input: &str, spec: &RunSpec, json: bool) -> ExitCode {
    match runs.queue(loaded.subject(), input, spec).await {
        Ok((run, job)) => {
            if json {
                nexo::terminal::print_json(&serde_json::json!({"run": run.id, "job": job.id, "status": "queued"}));
            } else {
                outln!("{}", run.id);
            }
            errln!(
                "queued run {} (job {}); `nexo worker` runs it, `nexo runs show {}` follows it",
                run.id,
                job.id,
                run.id
            );
            ExitCode::SUCCESS
        }
        Err(e) => runs::store_error(&e),
    }
}

/// `nexo worker`.
pub async fn command(args: &WorkerArgs, base: &EngineConfig, store_flag: Option<&str>) -> ExitCode {
    let (file, store) = match runs::config_and_store(&args.store, store_flag).await {
        Ok(opened) => opened,
        Err(code) => return code,
    };
    let telemetry = match report::telemetry(&file) {
        Ok(t) => t,
        Err(code) => return code,
    };
    let max = args.max_in_flight.or(file.worker.max_in_flight).unwrap_or(DEFAULT_MAX_IN_FLIGHT).max(1);
    let retain = match sessions::retention(args.retain, &file) {
        Ok(r) => r,
        Err(e) => return report::config_failure(&e),
    };
    // One engine for every job: each pass brings its run's own limits.
    let engine = match nexo::runs::prepare::shared_engine(base) {
        Ok(e) => e,
        Err(e) => return report::fail(&e),
    };
    let notify = !args.no_notify && file.worker.notify.unwrap_or(true);
    let worker = Arc::new(Worker::new(
        // Runs are leased like jobs, so a dead worker's run is free as soon as its job.
        Runs::new(store.clone(), file.buffer_events).with_lease(Duration::from_secs(args.lease_secs)),
        engine,
        file,
        args.store.config().map(Path::to_path_buf),
        i64::try_from(args.lease_secs).unwrap_or(3600) * 1000,
    ));
    let name = worker.runs().owner().to_string();
    // Metrics for the operator, as `nexo serve` keeps them: `/metrics` on
    // its own address when the config file asks, and the queue's gauges.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    match nexo::telemetry::scrape::keep_node_metrics(store.clone(), stop_rx, args.metrics_listen).await {
        Ok(Some(at)) => errln!("worker {name}: metrics on http://{at}/metrics"),
        Ok(None) => {}
        Err(e) => {
            errln!("error: {e}");
            return ExitCode::from(2);
        }
    }
    errln!("worker {name}: up to {max} jobs at once, from {}", store.location());
    let settings = LoopSettings {
        max,
        reserved: default_reserved(max),
        poll: Duration::from_millis(args.poll_ms),
        until_idle: args.until_idle,
        retain,
        notify,
    };
    claim_loop(
        worker,
        settings,
        async {
            let _ = tokio::signal::ctrl_c().await;
        },
        None,
        None,
    )
    .await;
    let _ = stop_tx.send(true);
    telemetry.shutdown().await;
    errln!("worker {name}: stopped");
    ExitCode::SUCCESS
}
