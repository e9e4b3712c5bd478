//! Recorded runs on the command line: how `nexo run` records a run, and
//! `nexo runs list|show|events|resume|approve|deny|cancel|recover`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use nexo::agent_file::AgentFile;
use nexo::agent_loop::Status;
use nexo::manifest::{Capability, PermissionMode};
use nexo::runs::pass::{Narrowing, PassSettings, Resumed};
use nexo::runs::{RunEnd, RunSpec, Runs, Subject};
use nexo::settings::RunOptions;
use nexo::{Engine, EngineConfig, Plugin};
use nexo_store::{Claim, Decision, Location, PendingCall, RunStatus, Store, StoreError};

use super::timeline::time;
use super::{grant, progress, report};

/// `nexo runs …`.
#[derive(Subcommand, Debug)]
pub enum RunsCommand {
    /// List recorded runs, newest first.
    List {
        /// Only runs with this status: queued, running, suspended, done, failed or cancelled.
        #[arg(long, value_name = "STATUS", value_parser = parse_status)]
        status: Option<RunStatus>,
        /// The most runs to show.
        #[arg(long, value_name = "N", default_value_t = 50)]
        limit: usize,
        /// Print JSON instead of text.
        #[arg(long, conflicts_with = "quiet")]
        json: bool,
        /// Print only the ids, one per line (for scripts: `nexo runs resume $(nexo runs list -q --status suspended --limit 1)`).
        #[arg(long, short)]
        quiet: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Show one run: status, reason, pending approval, checkpoints and events.
    Show {
        /// The run's id.
        run: String,
        /// Print JSON instead of text, with the run's timeline.
        #[arg(long)]
        json: bool,
        /// Add the run's timeline: its passes, model turns, tool calls and
        /// waits with their durations and tokens, and each tool call's full
        /// arguments and result.
        #[arg(long)]
        full: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Print a run's events as JSON lines.
    Events {
        /// The run's id.
        run: String,
        /// Keep printing new events until the run stops running.
        #[arg(long)]
        follow: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Resume a suspended run (or retry a failed one), replaying its journal.
    Resume {
        /// The run's id.
        run: String,
        /// JSON for the guest's `resume-input`.
        #[arg(long, value_name = "JSON")]
        input: Option<String>,
        /// Queue the resume for a worker (`nexo worker`) instead of resuming here.
        #[arg(long)]
        later: bool,
        #[command(flatten)]
        narrow: Narrow,
    },
    /// Approve the call a suspended run waits on, and resume it.
    Approve {
        /// The run's id.
        run: String,
        #[command(flatten)]
        call: ShownCall,
        /// Record the decision and queue the resume for a worker (`nexo worker`).
        #[arg(long)]
        later: bool,
        #[command(flatten)]
        narrow: Narrow,
    },
    /// Deny the call a suspended run waits on (the model gets a tool error), and resume it.
    Deny {
        /// The run's id.
        run: String,
        #[command(flatten)]
        call: ShownCall,
        /// Record the decision and queue the resume for a worker (`nexo worker`).
        #[arg(long)]
        later: bool,
        #[command(flatten)]
        narrow: Narrow,
    },
    /// Cancel a queued, running or suspended run.
    Cancel {
        /// The run's id.
        run: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Send a run a signal: kept for its next `wait-signal` of the name; a run waiting for it wakes now.
    Signal {
        /// The run's id.
        run: String,
        /// The signal's name.
        name: String,
        /// The signal's data, JSON (`null` if not given).
        #[arg(long, value_name = "JSON")]
        data: Option<String>,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Recover runs left running by a process that died, replaying their journals.
    Recover {
        #[command(flatten)]
        narrow: Narrow,
    },
}

/// The call a decision is for, as it was shown (`nexo runs show`, or the
/// API's `approval`): with it, a decision for a call the run no longer waits
/// on is refused. Without it, the call the run waits on now is decided, and
/// printed.
#[derive(Args, Debug, Clone, Default)]
pub struct ShownCall {
    /// The decided call's sequence number, as shown (`seq`); needs --args-hash.
    #[arg(long, value_name = "N", requires = "args_hash")]
    seq: Option<u64>,
    /// The SHA-256 of the decided call's arguments, as shown (`args-hash`); needs --seq.
    #[arg(long, value_name = "HASH", requires = "seq")]
    args_hash: Option<String>,
}

impl ShownCall {
    fn call(&self) -> Option<PendingCall> {
        Some(PendingCall { seq: self.seq?, args_hash: self.args_hash.clone()? })
    }
}

/// Where the store is, for `nexo runs` commands: `--store` (global, or
/// `NEXO_STORE`), else the config file's `store`, else the default file.
#[derive(Args, Debug, Clone, Default)]
pub struct StoreArgs {
    /// The operator's config file: its `store` and `buffer-events` keys, the MCP servers
    /// (`[mcp.NAME]`) a resumed run uses, and the models and MCP servers a tenant's policy names.
    #[arg(long, value_name = "FILE", env = "NEXO_CONFIG")]
    config: Option<PathBuf>,
}

impl StoreArgs {
    /// The config file, if one was given.
    pub fn config(&self) -> Option<&std::path::Path> {
        self.config.as_deref()
    }
}

/// Flags of a resume. They can only narrow the grant the run started with.
#[derive(Args, Debug, Clone)]
pub struct Narrow {
    /// A stricter permission mode than the run started with (read-only, approve, ask).
    #[arg(long, value_name = "MODE", value_parser = parse_mode)]
    mode: Option<PermissionMode>,
    /// Take capabilities away from the run's grant (comma-separated or repeated).
    #[arg(long, value_name = "CAP", value_delimiter = ',', value_parser = grant::parse_capability)]
    revoke: Vec<Capability>,
    /// Resume even though the component changed: by checkpoints only, without replaying the journal.
    #[arg(long)]
    allow_changed_component: bool,
    /// Print events as JSON lines, then the outcome as one JSON object.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    store: StoreArgs,
}

impl Narrow {
    /// No narrowing: a run goes on with the grant it recorded (a worker's
    /// resumes).
    pub fn none(store: StoreArgs) -> Narrow {
        Narrow { mode: None, revoke: Vec::new(), allow_changed_component: false, json: false, store }
    }
}

fn parse_status(name: &str) -> Result<RunStatus, String> {
    RunStatus::parse(name)
        .ok_or_else(|| format!("unknown status `{name}`: use queued, running, suspended, done, failed or cancelled"))
}

fn parse_mode(name: &str) -> Result<PermissionMode, String> {
    serde_json::from_value(serde_json::Value::String(name.to_string()))
        .map_err(|_| format!("unknown mode `{name}`: use read-only, approve, ask or auto"))
}

/// The loop a declarative agent names: the default when neither a flag
/// nor the config file chose one.
pub use nexo::runs::spec::loop_hint;

/// The store's location, from the flag (or `NEXO_STORE`), the config
/// file, or the default.
pub fn location(flag: Option<&str>, file: &nexo::config::ConfigFile) -> Result<Location, StoreError> {
    match flag.or(file.store.as_deref()) {
        Some(text) => Location::parse(text),
        None => Location::default_path().map(Location::Sqlite),
    }
}

/// Opens the store for a command, or prints why not.
pub async fn open(flag: Option<&str>, file: &nexo::config::ConfigFile) -> Result<Arc<dyn Store>, ExitCode> {
    let location = location(flag, file).map_err(|e| store_error(&e))?;
    nexo_store::open(&location).await.map_err(|e| store_error(&e))
}

/// Reads the config file the store flags name and opens the store, or
/// prints why not: what every command that works on the store starts with.
pub async fn config_and_store(
    args: &StoreArgs,
    flag: Option<&str>,
) -> Result<(nexo::config::ConfigFile, Arc<dyn Store>), ExitCode> {
    let file = nexo::config::read(args.config()).map_err(|e| report::config_failure(&e))?;
    let store = open(flag, &file).await?;
    Ok((file, store))
}

/// Prints a store error; its exit code.
pub fn store_error(e: &StoreError) -> ExitCode {
    errln!("error: {e}");
    ExitCode::from(2)
}

/// The run options a run's specification gives, with `progress` showing
/// its events and, in `ask` mode on a terminal, asking there.
pub async fn options(
    engine: &Engine,
    spec: &RunSpec,
    progress: &Arc<progress::Progress>,
) -> Result<RunOptions, ExitCode> {
    let mut options =
        nexo::runs::prepare::options(engine, spec, Default::default()).await.map_err(|e| report::fail(&e))?;
    note_script(&options);
    on_terminal(&mut options, progress);
    Ok(options)
}

/// Says that a scripted provider stands in for the model.
fn note_script(options: &RunOptions) {
    if let Some(provider) = &options.providers.model
        && provider.name() == "scripted"
    {
        errln!("note: scripted provider: replaying {}; no model is called", provider.model());
    }
}

/// What the terminal adds to a run's options: `progress` shows its events,
/// refusals name the flags, and in `ask` mode the question is asked on the
/// terminal.
fn on_terminal(options: &mut RunOptions, progress: &Arc<progress::Progress>) {
    options.context.events = Some(progress.clone());
    // Refusals name this command line's flags.
    options.permissions = options.permissions.clone().with_vocabulary(nexo::hint::Vocabulary::Flags);
    if options.permissions.mode() == PermissionMode::Ask && grant::can_ask() {
        // The spinner would redraw over the question; hide it while asking.
        let shown = progress.clone();
        let shown_mcp = progress.clone();
        options.permissions = options
            .permissions
            .clone()
            .on_ask(move |cap, detail| shown.suspend(|| grant::ask_on_terminal(cap, detail)))
            .on_ask_mcp(move |server, tool, args| shown_mcp.suspend(|| grant::ask_mcp_on_terminal(server, tool, args)));
    }
}

/// Warns, before a run, of each capability the agent requests and the
/// operator grants (`--allow`, the config file) whose tools the run will
/// not offer: the mode refuses it, or the configuration cannot serve it.
/// The words are the authority's own refusal, which names the fix.
pub fn warn_withheld(manifest: &nexo::manifest::AgentManifest, options: &RunOptions) {
    let serving = nexo::world::agent::Serving::of(&options.grant, options.providers.search.is_some());
    let authority = nexo::world::agent::authority(manifest, &options.grant, &options.permissions, serving);
    for (cap, why) in authority.withheld() {
        errln!("warning: `{}` is granted, but this run withholds its tools: {}", cap.as_str(), why.message());
    }
}

/// An agent loaded for a run: a declarative file, or an agent component.
pub enum Loaded {
    /// A TOML agent.
    File(AgentFile),
    /// An agent component: the agent, its SHA-256, and where it was loaded from.
    Component(nexo::world::agent::Agent, String, PathBuf),
}

impl Loaded {
    /// Loads `file` as an agent, or prints why not: its exit code.
    pub async fn load(engine: &Engine, file: &std::path::Path) -> Result<Loaded, ExitCode> {
        if report::is_toml(file) {
            return AgentFile::load(file).map(Loaded::File).map_err(|e| report::fail(&e.into()));
        }
        let plugin = Plugin::load(engine, file).await.map_err(|e| report::fail(&e.into()))?;
        let agent = plugin.agent().map_err(|e| report::fail(&e.into()))?.clone();
        Ok(Loaded::Component(agent, plugin.sha256().to_string(), file.to_path_buf()))
    }

    /// The agent's manifest.
    pub fn manifest(&self) -> &nexo::manifest::AgentManifest {
        match self {
            Loaded::File(agent) => agent.manifest(),
            Loaded::Component(agent, ..) => agent.manifest(),
        }
    }

    /// The SHA-256 of what was loaded.
    pub fn sha256(&self) -> &str {
        match self {
            Loaded::File(agent) => agent.sha256(),
            Loaded::Component(_, sha256, _) => sha256,
        }
    }

    /// What a run runs.
    pub fn subject(&self) -> Subject<'_> {
        match self {
            Loaded::File(agent) => Subject::File(agent),
            Loaded::Component(agent, sha256, path) => Subject::Component { agent, sha256, path },
        }
    }

    /// The agent's name: a session's address starts with it.
    pub fn name(&self) -> &str {
        match self {
            Loaded::File(agent) => &agent.manifest().name,
            Loaded::Component(agent, ..) => agent.name(),
        }
    }
}

/// `nexo run` of a recorded run: records it, runs it, reports how it ended.
pub async fn start(
    runs: &Runs,
    loaded: &Loaded,
    input: &str,
    spec: &RunSpec,
    options: &RunOptions,
    json: bool,
) -> ExitCode {
    warn_withheld(loaded.manifest(), options);
    match runs.start(loaded.subject(), input, spec, options).await {
        Ok(end) => report_end(&end, json),
        Err(e) => report::report_error(&e, json),
    }
}

/// The exit code of a run interrupted with Ctrl-C (128 + SIGINT, as a shell's).
pub const INTERRUPTED: u8 = 130;

/// Awaits `pass`, a pass this process drives for `runs`, with Ctrl-C
/// cancelling it cleanly: the first cancels the runs it drives, as the
/// server's cancel does ([`Runs::cancel`]), and the pass ends as a
/// cancelled run does, saying so; a second exits at once. The exit code
/// is then 130.
pub async fn cancel_on_ctrl_c(runs: &Runs, pass: impl std::future::Future<Output = ExitCode>) -> ExitCode {
    use std::sync::atomic::{AtomicBool, Ordering};
    let interrupted = Arc::new(AtomicBool::new(false));
    let (outer, heard) = (runs, interrupted.clone());
    let runs = runs.clone();
    // A task of its own: a pass blocked on the terminal (an `ask` question)
    // must not keep Ctrl-C from being heard.
    let watch = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_err() {
            // No handler: Ctrl-C kills the process as it would without one.
            return;
        }
        heard.store(true, Ordering::Relaxed);
        let driven = runs.interrupt("interrupted with Ctrl-C");
        if driven.is_empty() {
            // A run may be created this instant: it cancels itself as it starts.
            errln!("interrupted: a run this command starts now is cancelled (Ctrl-C again exits at once)");
        }
        for id in &driven {
            match runs.cancel(id, "interrupted with Ctrl-C").await {
                Ok(_) => errln!("cancelling run {id} (Ctrl-C again exits at once)"),
                Err(e) => errln!("warning: cannot cancel run {id}: {e}"),
            }
        }
        let _ = tokio::signal::ctrl_c().await;
        // The runs cancelled above, else any driven now.
        let named = if driven.is_empty() { runs.driven() } else { driven };
        match named.as_slice() {
            [] => errln!("exiting at once"),
            driven => errln!("exiting at once; `nexo runs show {}` shows the run", driven.join(" ")),
        }
        std::process::exit(i32::from(INTERRUPTED));
    });
    let code = pass.await;
    watch.abort();
    // Ended before the interrupt is cleared: a Ctrl-C heard as the pass
    // ended must not mark the next pass interrupted.
    let _ = watch.await;
    // The next pass of this process (a chat's next prompt) goes on.
    outer.resume_taking();
    if interrupted.load(Ordering::Relaxed) { ExitCode::from(INTERRUPTED) } else { code }
}

/// Prints how a pass ended; the exit code says it: 0 done, 1 failed or
/// cancelled, 3 done but cut short, 4 suspended.
pub fn report_end(end: &RunEnd, json: bool) -> ExitCode {
    let run = &end.run;
    let approval = end.approval.as_ref();
    if json {
        // The same statuses as an ephemeral run's, plus `suspended` and `cancelled`.
        let status = match (run.status, &end.prompt_status) {
            (RunStatus::Done, Some(Status::TurnLimit)) => "turn-limit",
            (RunStatus::Done, Some(Status::TokenBudget)) => "token-budget",
            (RunStatus::Done, _) => "done",
            (RunStatus::Suspended, _) => "suspended",
            (RunStatus::Cancelled, _) => "cancelled",
            _ => "error",
        };
        let mut value = serde_json::json!({
            "status": status,
            "run": run.id,
            "agent": run.agent,
        });
        if let Some(session) = &run.session {
            value["session"] = session.clone().into();
        }
        match run.status {
            RunStatus::Done => {
                value["answer"] = run.result.clone().unwrap_or_default().into();
            }
            RunStatus::Suspended => {
                value["reason"] = run.suspend_reason.clone().into();
                value["resume_key"] = run.resume_key.clone().into();
                value["approval"] = serde_json::to_value(approval).unwrap_or_default();
            }
            _ => value["error"] = run.error.clone().into(),
        }
        nexo::terminal::print_json(&value);
    }
    let id = &run.id;
    match run.status {
        RunStatus::Done => {
            if !json {
                outln!("{}", run.result.as_deref().unwrap_or_default());
            }
            match &end.prompt_status {
                Some(status @ (Status::TurnLimit | Status::TokenBudget)) => {
                    errln!("{}", report::cut_short(status, run.result.as_deref().unwrap_or_default()));
                    ExitCode::from(3)
                }
                _ => ExitCode::SUCCESS,
            }
        }
        RunStatus::Suspended => {
            errln!("suspended: {}", run.suspend_reason.as_deref().unwrap_or("(no reason given)"));
            match approval {
                Some(a) => errln!(
                    "run {id} waits for a decision on {}: `nexo runs approve {id}` or `nexo runs deny {id}`",
                    nexo::runs::describe_approval(a)
                ),
                None => match &run.signal_wait {
                    Some(name) if name.starts_with(&nexo_store::child_signal("")) => errln!(
                        "run {id} waits for its child run {}: a worker on this store (`nexo worker`, `nexo serve`) \
                         runs the child, then resumes this run",
                        &name[nexo_store::child_signal("").len()..]
                    ),
                    Some(name) => errln!(
                        "run {id} waits for signal `{name}`: `nexo runs signal {id} {name} --data JSON` sends it, and \
                         a worker on this store (`nexo worker`, `nexo serve`) resumes the run"
                    ),
                    None => errln!("run {id} is paused: `nexo runs resume {id} --input JSON` continues it"),
                },
            }
            ExitCode::from(4)
        }
        RunStatus::Cancelled => {
            errln!("run {id} was cancelled: {}", run.error.as_deref().unwrap_or_default());
            errln!("a cancelled run is not resumed; `nexo runs show {id}` shows what it did");
            ExitCode::from(1)
        }
        _ => {
            errln!("error: {}", run.error.as_deref().unwrap_or("the run failed"));
            errln!("run {id} failed; `nexo runs show {id}` has its events");
            ExitCode::from(if end.nothing_ran { 2 } else { 1 })
        }
    }
}

/// `nexo runs …`.
pub async fn command(command: &RunsCommand, base: &EngineConfig, store_flag: Option<&str>) -> ExitCode {
    let store_args = match command {
        RunsCommand::List { store, .. }
        | RunsCommand::Show { store, .. }
        | RunsCommand::Events { store, .. }
        | RunsCommand::Cancel { store, .. }
        | RunsCommand::Signal { store, .. } => store,
        RunsCommand::Resume { narrow, .. }
        | RunsCommand::Approve { narrow, .. }
        | RunsCommand::Deny { narrow, .. }
        | RunsCommand::Recover { narrow } => &narrow.store,
    };
    let file = match nexo::config::read(store_args.config.as_deref()) {
        Ok(f) => f,
        Err(e) => return report::config_failure(&e),
    };
    let store = match open(store_flag, &file).await {
        Ok(s) => s,
        Err(code) => return code,
    };
    let runs = Runs::new(store.clone(), file.buffer_events);
    match command {
        RunsCommand::List { status, limit, json, quiet, .. } => {
            note_orphans(&runs).await;
            list(&*store, *status, *limit, *json, *quiet).await
        }
        RunsCommand::Show { run, json, full, .. } => {
            note_orphans(&runs).await;
            show(&*store, run, *json, *full).await
        }
        RunsCommand::Events { run, follow, .. } => events(&*store, run, *follow).await,
        RunsCommand::Cancel { run, .. } => match store.cancel(run, "cancelled by the operator").await {
            Ok(r) => {
                errln!("run {} is cancelled", r.id);
                ExitCode::SUCCESS
            }
            Err(e) => store_error(&e),
        },
        RunsCommand::Signal { run, name, data, .. } => signal(&runs, run, name, data.as_deref()).await,
        RunsCommand::Resume { run, input, later, narrow } => {
            if let Some(text) = input
                && let Err(e) = serde_json::from_str::<serde_json::Value>(text)
            {
                errln!("error: --input must be JSON (for example '{{\"approved\": true}}'): {e}");
                return ExitCode::from(2);
            }
            if *later {
                return queued_resume(&runs, run, input.clone(), narrow).await;
            }
            let how = match store.run(run).await {
                Ok(Some(r)) if r.status == RunStatus::Failed => Claim::Retry,
                _ => Claim::Resume,
            };
            report::with_telemetry(&file, async {
                recover_orphans(&runs, base, narrow, &file).await;
                resume(&runs, base, run, how, input.clone(), narrow, &file).await
            })
            .await
        }
        RunsCommand::Approve { run, call, later, narrow } | RunsCommand::Deny { run, call, later, narrow } => {
            let decision =
                if matches!(command, RunsCommand::Approve { .. }) { Decision::Approved } else { Decision::Denied };
            let decided = match call.call() {
                Some(shown) => runs.decide(run, &shown, decision).await,
                None => runs.decide_pending(run, decision).await,
            };
            match decided {
                Ok(a) => errln!("{}", decided_line(decision, &a)),
                Err(e) => return store_error(&e),
            }
            if *later {
                return queued_resume(&runs, run, None, narrow).await;
            }
            report::with_telemetry(&file, async {
                recover_orphans(&runs, base, narrow, &file).await;
                resume(&runs, base, run, Claim::Resume, None, narrow, &file).await
            })
            .await
        }
        RunsCommand::Recover { narrow } => {
            let n = recover_orphans(&runs, base, narrow, &file).await;
            if n == 0 {
                errln!("no run needs recovering");
            }
            ExitCode::SUCCESS
        }
    }
}

/// Which call a decision decided: its tool, sequence number and a short
/// summary of its arguments.
fn decided_line(decision: Decision, a: &nexo_store::Approval) -> String {
    let at = match a.seq {
        nexo::journal::UNPOSITIONED => "the call".to_string(),
        seq => format!("call {seq}"),
    };
    // All of it, as the terminal user who decides must see it: no cut, and
    // no control that could hide or reorder a part.
    let shown = |text: &str| nexo::terminal::escape(text, nexo::terminal::Lines::Flatten).into_owned();
    format!(
        "{} {at}: `{}` ({}) with {}",
        decision.as_str(),
        shown(&a.tool),
        a.capability,
        shown(&a.arguments.to_string())
    )
}

/// Sends run `id` the signal `name` and says what comes of it.
async fn signal(runs: &Runs, id: &str, name: &str, data: Option<&str>) -> ExitCode {
    let sent = match runs.signal(id, name, data.unwrap_or("null")).await {
        Ok(sent) => sent,
        Err(e) => return store_error(&e),
    };
    let waits = matches!(runs.store().run(id).await, Ok(Some(r)) if r.signal_wait.as_deref() == Some(name));
    if waits {
        errln!(
            "sent signal `{name}` to run {id} (signal {}); the run waits for it and wakes now: a worker on this store \
             (`nexo worker`, `nexo serve`) resumes it",
            sent.id
        );
    } else {
        errln!(
            "sent signal `{name}` to run {id} (signal {}); it is kept for the run's next wait for `{name}`",
            sent.id
        );
    }
    ExitCode::SUCCESS
}

/// Queues the resume of `id` for a worker and says so.
async fn queued_resume(runs: &Runs, id: &str, input: Option<String>, narrow: &Narrow) -> ExitCode {
    if narrow.mode.is_some() || !narrow.revoke.is_empty() || narrow.allow_changed_component {
        errln!(
            "error: --later queues the resume with the grant the run recorded; --mode, --revoke and \
             --allow-changed-component apply to a resume here (drop --later)"
        );
        return ExitCode::from(2);
    }
    match runs.queue_resume(id, input).await {
        Ok(job) => {
            if narrow.json {
                nexo::terminal::print_json(&serde_json::json!({"run": id, "job": job.id, "status": "queued"}));
            }
            errln!("queued the resume of run {id} (job {}); `nexo worker` runs it", job.id);
            ExitCode::SUCCESS
        }
        Err(e) => store_error(&e),
    }
}

/// Says how many runs were left running by a process that died.
async fn note_orphans(runs: &Runs) {
    if let Ok(orphans) = runs.orphans().await
        && !orphans.is_empty()
    {
        errln!(
            "note: {} run(s) were left running by a process that is gone; `nexo runs recover` replays them",
            orphans.len()
        );
    }
}

/// The start-up sweep: recovers every orphan through replay, or marks it
/// failed when it cannot be replayed. Suspended runs are never touched.
pub async fn recover_orphans(
    runs: &Runs,
    base: &EngineConfig,
    narrow: &Narrow,
    file: &nexo::config::ConfigFile,
) -> usize {
    let orphans = match runs.orphans().await {
        Ok(o) => o,
        Err(e) => {
            errln!("warning: cannot look for interrupted runs: {e}");
            return 0;
        }
    };
    for run in &orphans {
        errln!("recovering run {} ({}), left running by a process that is gone", run.id, run.agent);
        let _ = resume(runs, base, &run.id, Claim::Recover, None, narrow, file).await;
    }
    orphans.len()
}

/// Resumes, retries or recovers `id` with its recorded settings, narrowed.
async fn resume(
    runs: &Runs,
    base: &EngineConfig,
    id: &str,
    how: Claim,
    input: Option<String>,
    narrow: &Narrow,
    file: &nexo::config::ConfigFile,
) -> ExitCode {
    let pass = async {
        match resume_run(runs, base, id, how, input, narrow, file).await {
            Resumed::End(end) => report_end(&end, narrow.json),
            Resumed::Refused(_) => ExitCode::from(2),
            Resumed::Failed(e) => report::report_error(&e, narrow.json),
        }
    };
    cancel_on_ctrl_c(runs, pass).await
}

/// The one engine this process's passes share (each brings its run's own
/// limits), made on first need.
fn pass_engine(base: &EngineConfig) -> Result<&'static Engine, nexo::RunError> {
    static ENGINE: std::sync::OnceLock<Engine> = std::sync::OnceLock::new();
    if let Some(engine) = ENGINE.get() {
        return Ok(engine);
    }
    let engine = nexo::runs::prepare::shared_engine(base)?;
    Ok(ENGINE.get_or_init(|| engine))
}

/// One pass of a recorded run on the terminal ([`nexo::runs::pass::pass`]):
/// its events shown, and in `ask` mode its questions asked here.
pub async fn resume_run(
    runs: &Runs,
    base: &EngineConfig,
    id: &str,
    how: Claim,
    input: Option<String>,
    narrow: &Narrow,
    file: &nexo::config::ConfigFile,
) -> Resumed {
    let progress = Arc::new(progress::Progress::new(narrow.json));
    let shown = progress.clone();
    let front_end = move |options: &mut RunOptions| {
        note_script(options);
        on_terminal(options, &shown);
    };
    let narrowing = Narrowing {
        mode: narrow.mode,
        revoke: narrow.revoke.clone(),
        allow_changed_component: narrow.allow_changed_component,
    };
    // A changed component (under --allow-changed-component) runs only as
    // far as the operator accepted what it asks for, as a new version
    // given to `nexo run` does.
    let admit_changed = |manifest: &nexo::manifest::AgentManifest, sha256: &str, source: &std::path::Path| {
        super::plugins::admit(manifest, sha256, source, None, nexo::acceptance::Consent::Standing)
            .map_err(|e| e.to_string())
    };
    let settings = PassSettings {
        how,
        input,
        narrowing: &narrowing,
        config: file,
        config_path: narrow.store.config(),
        served: None,
        retry_follows: false,
        front_end: Some(&front_end),
        admit_changed: Some(&admit_changed),
    };
    let engine = match pass_engine(base) {
        Ok(e) => e,
        Err(e) => {
            errln!("error: {e}");
            progress.finish();
            return Resumed::Refused(e.to_string());
        }
    };
    let resumed = nexo::runs::pass::pass(runs, engine, id, settings).await;
    progress.finish();
    resumed
}

async fn list(store: &dyn Store, status: Option<RunStatus>, limit: usize, json: bool, quiet: bool) -> ExitCode {
    let runs = match store.runs(status, limit).await {
        Ok(r) => r,
        Err(e) => return store_error(&e),
    };
    if json {
        nexo::terminal::print_json(&serde_json::to_value(&runs).unwrap_or_default());
        return ExitCode::SUCCESS;
    }
    if quiet {
        for r in &runs {
            outln!("{}", r.id);
        }
        return ExitCode::SUCCESS;
    }
    if runs.is_empty() {
        errln!("no runs in {}", store.location());
    }
    // Each column as wide as its widest cell, so the headers stay over their values.
    let widest = |cell: fn(&nexo_store::Run) -> &str, header: &str| {
        runs.iter().map(|r| cell(r).chars().count()).chain([header.chars().count()]).max().unwrap_or(0)
    };
    let (id_width, agent_width) = (widest(|r| &r.id, "RUN"), widest(|r| &r.agent, "AGENT"));
    let row = |id: &str, status: &str, agent: &str, created: &str, note: &str| {
        let line = format!("{id:<id_width$}  {status:<9}  {agent:<agent_width$}  {created:<20}  {note}");
        line.trim_end().to_string()
    };
    if !runs.is_empty() {
        outln!("{}", row("RUN", "STATUS", "AGENT", "CREATED", "NOTE"));
    }
    for r in &runs {
        let note = r.suspend_reason.as_deref().or(r.error.as_deref()).unwrap_or("");
        outln!("{}", row(&r.id, r.status.as_str(), &r.agent, &time(r.created_ms), &first_line(note)));
    }
    ExitCode::SUCCESS
}

async fn show(store: &dyn Store, id: &str, json: bool, full: bool) -> ExitCode {
    let run = match store.run(id).await {
        Ok(Some(r)) => r,
        Ok(None) => return store_error(&StoreError::NoRun(id.to_string())),
        Err(e) => return store_error(&e),
    };
    let (approval, checkpoints, events) =
        match (store.approval(id).await, store.checkpoints(id).await, store.events(id, 0, 10_000).await) {
            (Ok(a), Ok(c), Ok(e)) => (a, c, e),
            (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return store_error(&e),
        };
    let names: Vec<&str> = checkpoints.iter().map(|(n, _)| n.as_str()).collect();
    let children = match nexo::runs::children::descendants(store, id).await {
        Ok(c) => c,
        Err(e) => return store_error(&e),
    };
    let timeline = if json || full {
        match nexo::runs::timeline::Timeline::load(store, &run).await {
            Ok(t) => Some(t),
            Err(e) => return store_error(&e),
        }
    } else {
        None
    };
    if json {
        let state: serde_json::Map<String, serde_json::Value> = checkpoints.iter().cloned().collect();
        let value = serde_json::json!({
            "run": run,
            "approval": approval,
            "checkpoints": names,
            "state": state,
            "events": events,
            "timeline": timeline,
            "children": children,
        });
        nexo::terminal::print_json(&value);
        return ExitCode::SUCCESS;
    }
    outln!("run:       {}", run.id);
    outln!("agent:     {} ({}, {})", run.agent, run.kind, run.source);
    outln!("sha256:    {}", run.component_sha256);
    if let Ok(nexo::runs::RunSpec { origin: Some(origin), .. }) = nexo::runs::RunSpec::from_record(run.grant.clone()) {
        outln!("from:      {}", origin.reference);
        outln!("signature: {}", origin.signature);
    }
    outln!("status:    {}", run.status);
    if let Some(parent) = &run.parent {
        outln!("parent:    {parent}");
    }
    if let Some(reason) = &run.suspend_reason {
        outln!("reason:    {reason}");
    }
    if let Some(key) = &run.resume_key {
        outln!("resume key: {key}");
    }
    if let Some(a) = &approval {
        let decision = a.decision.map_or("undecided", Decision::as_str);
        outln!("approval:  {} ({decision})", nexo::runs::describe_approval(a));
        outln!("  decide:  --seq {} --args-hash {}", a.seq, a.args_hash);
    }
    if let Some(result) = &run.result {
        outln!("result:    {}", first_line(result));
    }
    if let Some(error) = &run.error {
        outln!("error:     {error}");
    }
    outln!("input:     {}", first_line(&run.input));
    outln!("created:   {}", time(run.created_ms));
    if !children.is_empty() {
        outln!("children:");
        for c in &children {
            let indent = "  ".repeat(c.depth as usize);
            outln!("{indent}{}  {}  {}", c.id, c.agent, c.status);
        }
    }
    outln!("checkpoints: {}", if names.is_empty() { "(none)".to_string() } else { names.join(", ") });
    for (name, value) in &checkpoints {
        outln!("  {name} = {}", first_line(&value.to_string()));
    }
    outln!("events:");
    for e in &events {
        outln!("  {:>5}  {}  {:<11}  {}", e.id, time(e.at_ms), e.kind, first_line(&e.data.to_string()));
    }
    // A prompt cut short keeps its partial transcript in its `done` event.
    let cut = events.iter().rev().find_map(|e| e.data.get("transcript").and_then(|t| t.as_array()));
    if let Some(messages) = cut {
        outln!("transcript (cut short; `--json` shows it whole):");
        for m in messages {
            let role = m.get("role").and_then(|r| r.as_str()).unwrap_or("?");
            let mut body = m.clone();
            if let Some(o) = body.as_object_mut() {
                o.remove("role");
            }
            outln!("  {role:<9}  {}", first_line(&body.to_string()));
        }
    }
    if let Some(timeline) = &timeline {
        outln!("{}", super::timeline::text(timeline).trim_end());
    }
    ExitCode::SUCCESS
}

async fn events(store: &dyn Store, id: &str, follow: bool) -> ExitCode {
    let mut after = 0;
    loop {
        let batch = match store.events(id, after, 1000).await {
            Ok(b) => b,
            Err(e) => return store_error(&e),
        };
        for e in &batch {
            nexo::terminal::print_json(&serde_json::to_value(e).unwrap_or_default());
            after = e.id;
        }
        if !batch.is_empty() {
            continue;
        }
        let run = match store.run(id).await {
            Ok(Some(r)) => r,
            Ok(None) => return store_error(&StoreError::NoRun(id.to_string())),
            Err(e) => return store_error(&e),
        };
        if !follow || !matches!(run.status, RunStatus::Running | RunStatus::Queued) {
            return ExitCode::SUCCESS;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn first_line(text: &str) -> String {
    nexo::truncate::first_line(text, 100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_decided_line_shows_all_the_arguments_with_controls_escaped() {
        let long = format!("echo {}\u{202e}txt.exe", "x".repeat(200));
        let approval = nexo_store::Approval {
            seq: 3,
            args_hash: "ab".repeat(32),
            tool: "shell".into(),
            capability: "shell".into(),
            arguments: serde_json::json!({"command": long}),
            component_sha256: String::new(),
            decision: None,
            created_ms: 0,
        };
        let line = decided_line(Decision::Approved, &approval);
        assert!(line.contains(&"x".repeat(200)), "not cut: {line}");
        assert!(line.contains("\\u{202e}txt.exe") && !line.contains('\u{202e}'), "escaped: {line}");
    }
}
