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
use nexo::runs::{ResumeOutcome, RunEnd, Runs, Subject};
use nexo::settings::RunOptions;
use nexo::{Engine, EngineConfig, Plugin};
use nexo_store::{Claim, Decision, Location, PendingCall, Run, RunStatus, Store, StoreError};
use serde::{Deserialize, Serialize};

use super::{grant, model, progress, report, web};

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
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
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

/// What a recorded run keeps of the operator's settings, so a resume
/// needs no flags. No field holds a secret: keys are read from the
/// environment each time.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[serde(rename_all = "kebab-case")]
pub struct Recorded {
    /// The grant.
    pub grant: nexo::grant::OperatorGrant,
    /// The model settings.
    pub model: nexo::config::ModelTable,
    /// The search settings.
    pub search: Option<nexo::config::SearchTable>,
    /// The run's wall-clock limit per pass.
    pub timeout_secs: u64,
    /// The memory cap.
    pub memory_mib: u64,
    /// Where skill packages are.
    pub skills_path: PathBuf,
    /// Progressive skills.
    pub progressive_skills: bool,
}

/// The loop a declarative agent names (`loop = …` in its TOML), the
/// default when neither a flag nor the config file chose one. A file that
/// does not load names none; loading it later reports why.
pub fn loop_hint(file: &std::path::Path) -> Option<nexo::manifest::LoopKind> {
    if !report::is_toml(file) {
        return None;
    }
    AgentFile::load(file).ok().and_then(|a| a.manifest().agent_loop)
}

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

/// The run options a recorded run's settings give, with `progress`
/// showing its events.
pub async fn options(
    engine: &Engine,
    rec: &Recorded,
    progress: &Arc<progress::Progress>,
) -> Result<RunOptions, ExitCode> {
    let mut options = rec.grant.run_options().map_err(|e| report::config_failure(&e))?;
    let search =
        web::SearchArgs::default().resolve(rec.search.as_ref(), None).map_err(|e| report::config_failure(&e))?;
    if let Some(setup) = &search {
        options.search = Some(report::search_backend(engine, setup).await.map_err(|e| report::fail(&e))?);
    }
    let resolved = model::ModelArgs::default().resolve(&rec.model).map_err(|e| report::config_failure(&e))?;
    if let Some(provider) = &resolved.provider
        && provider.name() == "scripted"
    {
        errln!("note: scripted provider: replaying {}; no model is called", provider.model());
    }
    options.model = resolved.provider;
    options.loop_limits = resolved.limits;
    if let Some(mut claude) = resolved.agent_loop {
        claude.cwd = rec.grant.local_dir().map(std::path::Path::to_path_buf);
        claude.view = rec.grant.view().clone();
        if claude.builtin_tools && claude.cwd.is_none() {
            return Err(report::config_failure(&nexo::ConfigError::invalid(
                "--claude-builtin-tools",
                "the CLI's own tools act on real files, so they need the local sandbox: add `--sandbox local --cwd \
                 DIR` (nexo confines the CLI to DIR)",
            )));
        }
        claude.check().map_err(|e| report::config_failure(&nexo::ConfigError::invalid("--loop", e.to_string())))?;
        options.agent_loop = Some(Arc::new(claude));
    }
    options.skills_path = Some(rec.skills_path.clone());
    if rec.progressive_skills {
        options.skill_mode = nexo::settings::SkillMode::Progressive;
    }
    options.events = Some(progress.clone());
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
    options.timeout = Some(Duration::from_secs(rec.timeout_secs));
    Ok(options)
}

/// The engine for a recorded run's limits.
fn engine(base: &EngineConfig, rec: &Recorded) -> Result<Engine, ExitCode> {
    let mut config = base.clone();
    config.limits.run_timeout = Duration::from_secs(rec.timeout_secs);
    config.limits.memory_bytes = usize::try_from(rec.memory_mib).unwrap_or(usize::MAX).saturating_mul(1 << 20);
    Engine::new(config).map_err(|e| {
        errln!("error: {e:#}");
        ExitCode::from(2)
    })
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

/// A run's settings as the store records them, or prints why not.
pub fn recorded_grant(rec: &Recorded) -> Result<serde_json::Value, ExitCode> {
    serde_json::to_value(rec).map_err(|e| {
        errln!("error: cannot record the run's settings: {e}");
        ExitCode::from(2)
    })
}

/// `nexo run` of a recorded run: records it, runs it, reports how it ended.
pub async fn start(
    engine: &Engine,
    runs: &Runs,
    file: &std::path::Path,
    input: &str,
    rec: &Recorded,
    options: &RunOptions,
    json: bool,
) -> ExitCode {
    let grant = match recorded_grant(rec) {
        Ok(v) => v,
        Err(code) => return code,
    };
    let loaded = match Loaded::load(engine, file).await {
        Ok(l) => l,
        Err(code) => return code,
    };
    match runs.start(loaded.subject(), input, grant, options).await {
        Ok(end) => report_end(&end, json),
        Err(e) => report::report_error(&e, json),
    }
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
                None => errln!("run {id} is paused: `nexo runs resume {id} --input JSON` continues it"),
            }
            ExitCode::from(4)
        }
        RunStatus::Cancelled => {
            errln!("run {id} was cancelled: {}", run.error.as_deref().unwrap_or_default());
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
        | RunsCommand::Cancel { store, .. } => store,
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
        RunsCommand::Show { run, json, .. } => {
            note_orphans(&runs).await;
            show(&*store, run, *json).await
        }
        RunsCommand::Events { run, follow, .. } => events(&*store, run, *follow).await,
        RunsCommand::Cancel { run, .. } => match store.cancel(run, "cancelled by the operator").await {
            Ok(r) => {
                errln!("run {} is cancelled", r.id);
                ExitCode::SUCCESS
            }
            Err(e) => store_error(&e),
        },
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
            recover_orphans(&runs, base, narrow, &file).await;
            resume(&runs, base, run, how, input.clone(), narrow, &file).await
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
            recover_orphans(&runs, base, narrow, &file).await;
            resume(&runs, base, run, Claim::Resume, None, narrow, &file).await
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

/// How a resume ended, for the CLI and the worker.
pub enum Resumed {
    /// The pass ran: the run is done, suspended, failed or cancelled.
    End(Box<RunEnd>),
    /// It could not start, for this reason (already printed, for the CLI's
    /// exit code).
    Refused(String, ExitCode),
    /// The agent failed in a way the run did not record.
    Failed(nexo::error::RunError),
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
    match resume_run(runs, base, id, how, input, narrow, file, None, false).await {
        Resumed::End(end) => report_end(&end, narrow.json),
        Resumed::Refused(_, code) => code,
        Resumed::Failed(e) => report::report_error(&e, narrow.json),
    }
}

/// One pass of a recorded run: `how` claims it, its recorded settings
/// (narrowed) run it. `served`, for a tenant's run in `nexo serve`, says
/// where this node keeps the component and what memory budget it shares.
/// `retry_follows`: a job will try the pass again if it fails in a way that
/// may pass, so such a failure leaves the run queued, not failed.
#[allow(clippy::too_many_arguments)]
pub async fn resume_run(
    runs: &Runs,
    base: &EngineConfig,
    id: &str,
    how: Claim,
    input: Option<String>,
    narrow: &Narrow,
    file: &nexo::config::ConfigFile,
    served: Option<&Served>,
    retry_follows: bool,
) -> Resumed {
    let settings = "its recorded settings cannot be used here; the error above says why";
    let mut run = match runs.store().run(id).await {
        Ok(Some(run)) => run,
        Ok(None) => {
            let e = StoreError::NoRun(id.to_string());
            return Resumed::Refused(e.to_string(), store_error(&e));
        }
        Err(e) => return Resumed::Refused(e.to_string(), store_error(&e)),
    };
    // Taken, not copied: the record stays alive while the run waits.
    let mut rec: Recorded = match serde_json::from_value(std::mem::take(&mut run.grant)) {
        Ok(r) => r,
        Err(e) => {
            let why = format!("its recorded settings cannot be read by this nexo ({e})");
            let code = unrecoverable(runs, &run, how, &why).await;
            return Resumed::Refused(why, code);
        }
    };
    rec.grant = rec.grant.narrowed(narrow.mode, &narrow.revoke).with_config_file(file);
    // A served run goes on within its tenant's policy as it is now: an
    // operator's narrowing reaches the runs that wait.
    if let Some(tenant) = &run.tenant {
        match tenant_bounds(runs.store(), tenant).await {
            Ok(bounds) => rec.grant = rec.grant.within(&bounds),
            Err(why) => {
                let why = format!("run {} cannot go on: {why}", run.id);
                errln!("error: {why}");
                return Resumed::Refused(why, ExitCode::from(2));
            }
        }
    }
    // A pass without a server the run used would not behave as the run did:
    // the run is left as it is until the configuration is given.
    let unconfigured = rec.grant.unconfigured_mcp_servers();
    if !unconfigured.is_empty() {
        let why = needs_configuration(&run.id, &unconfigured, narrow.store.config());
        errln!("error: {why}");
        return Resumed::Refused(why, ExitCode::from(2));
    }
    let engine = match served {
        Some(s) => s.engine.clone(),
        None => match engine(base, &rec) {
            Ok(e) => e,
            Err(code) => return Resumed::Refused(settings.into(), code),
        },
    };
    let progress = Arc::new(progress::Progress::new(narrow.json));
    let mut options = match options(&engine, &rec, &progress).await {
        Ok(o) => o,
        Err(code) => return Resumed::Refused(settings.into(), code),
    };
    options.memory_budget = served.and_then(|s| s.memory.clone());
    options.cpu_budget = served.and_then(|s| s.cpu.clone());
    options.egress_meter = served.map(|s| s.meters.egress.clone());
    options.cpu_meter = served.map(|s| s.meters.ticks.clone());
    options.token_meter = served.map(|s| s.meters.tokens.clone());
    options.audit = served.map(|s| s.audit.clone() as Arc<dyn nexo::host_call::AuditSink>);
    options.retry_follows = retry_follows;
    // `nexo serve` loads a tenant's plugin from its own node's cache.
    let source = served.map_or(std::path::Path::new(&run.source), |s| s.source.as_path());
    let result = if run.kind == "toml" {
        match AgentFile::load(source) {
            Ok(agent) => {
                runs.resume(id, how, input, Subject::File(&agent), &options, narrow.allow_changed_component).await
            }
            Err(e) => {
                close(&options).await;
                let code = unrecoverable(runs, &run, how, &e.to_string()).await;
                return Resumed::Refused(e.to_string(), code);
            }
        }
    } else {
        let plugin = match served {
            Some(s) => Ok(s.plugin.clone()),
            None => Plugin::load(&engine, source).await.map_err(|e| e.to_string()),
        };
        let agent = match &plugin {
            Ok(p) => p.agent().map(|a| (p, a)).map_err(|e| e.to_string()),
            Err(why) => Err(why.clone()),
        };
        match agent {
            Ok((plugin, agent)) => {
                let subject = Subject::Component { agent, sha256: plugin.sha256(), path: source };
                runs.resume(id, how, input, subject, &options, narrow.allow_changed_component).await
            }
            Err(why) => {
                close(&options).await;
                let code = unrecoverable(runs, &run, how, &why).await;
                return Resumed::Refused(why, code);
            }
        }
    };
    progress.finish();
    close(&options).await;
    match result {
        Ok(end) => Resumed::End(Box::new(end)),
        Err(ResumeOutcome::Refused(e)) => {
            errln!("error: {e}");
            Resumed::Refused(e.to_string(), ExitCode::from(2))
        }
        Err(ResumeOutcome::Run(e)) => Resumed::Failed(e),
    }
}

/// The bounds of `tenant`'s policy as the store holds it now.
async fn tenant_bounds(store: &Arc<dyn Store>, tenant: &str) -> Result<nexo::authority::Bounds, String> {
    match store.tenant(tenant).await {
        Ok(Some(t)) => crate::server::policy::Policy::from_stored(&t.policy).map(|p| p.bounds()),
        Ok(None) => Err(StoreError::NoTenant(tenant.to_string()).to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// Why a run cannot go on here: the MCP servers it used are not defined in
/// this process's configuration. Names them, and how to supply them.
fn needs_configuration(id: &str, servers: &[&str], config: Option<&std::path::Path>) -> String {
    let names = servers.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
    let tables = servers.iter().map(|n| format!("[mcp.{n}]")).collect::<Vec<_>>().join(", ");
    let here = match config {
        Some(path) => format!("{} does not define {tables}", path.display()),
        None => "no config file was given (--config FILE or NEXO_CONFIG)".to_string(),
    };
    format!(
        "run {id} uses the MCP server(s) {names}, which the config file it started with defined, but {here}; \
         the run is left as it is: give the config file that defines {tables} (--config FILE or NEXO_CONFIG) and \
         run the command again"
    )
}

/// What `nexo serve` adds to a pass of a tenant's run.
pub struct Served {
    /// This node's copy of the component.
    pub source: PathBuf,
    /// The component, loaded: every run of it on this node shares it.
    pub plugin: Plugin,
    /// The server's one engine, whose limits every served run has.
    pub engine: Engine,
    /// The memory total the tenant's instances share on this node.
    pub memory: Option<Arc<nexo::instance::MemoryBudget>>,
    /// The CPU share the tenant's runs draw on, on this node.
    pub cpu: Option<Arc<nexo::instance::CpuBudget>>,
    /// Where this pass's web bytes, CPU ticks and model tokens are
    /// counted, each with what is left of the tenant's hour and of the
    /// run's own budget.
    pub meters: crate::server::quota::Meters,
    /// Where the gate's decisions during this pass are held for the
    /// tenant's audit log.
    pub audit: Arc<crate::server::quota::PassAudit>,
}

/// Ends what the CLI started for a run: its MCP servers, and its sandbox
/// (a container, say).
pub async fn close(options: &RunOptions) {
    if let Err(e) = options.close().await {
        errln!("warning: {e}");
    }
}

/// A run that cannot be resumed: reported; an orphan is marked failed so
/// the sweep does not try it forever.
async fn unrecoverable(runs: &Runs, run: &Run, how: Claim, why: &str) -> ExitCode {
    errln!("error: run {} cannot be resumed: {why}", run.id);
    if how == Claim::Recover {
        match runs.fail_orphan(&run.id, &format!("could not be recovered: {why}")).await {
            Ok(()) => errln!("run {} is marked failed", run.id),
            Err(e) => errln!("warning: could not mark run {} failed: {e}", run.id),
        }
    }
    ExitCode::from(2)
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
    for r in &runs {
        let note = r.suspend_reason.as_deref().or(r.error.as_deref()).unwrap_or("");
        outln!("{}  {:<9}  {:<20}  {}  {}", r.id, r.status.as_str(), r.agent, time(r.created_ms), first_line(note));
    }
    ExitCode::SUCCESS
}

async fn show(store: &dyn Store, id: &str, json: bool) -> ExitCode {
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
    if json {
        let state: serde_json::Map<String, serde_json::Value> = checkpoints.iter().cloned().collect();
        let value = serde_json::json!({
            "run": run,
            "approval": approval,
            "checkpoints": names,
            "state": state,
            "events": events,
        });
        nexo::terminal::print_json(&value);
        return ExitCode::SUCCESS;
    }
    outln!("run:       {}", run.id);
    outln!("agent:     {} ({}, {})", run.agent, run.kind, run.source);
    outln!("sha256:    {}", run.component_sha256);
    outln!("status:    {}", run.status);
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

/// A timestamp as UTC, to the second.
pub fn time(ms: i64) -> String {
    let at = std::time::UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_seconds(at).to_string()
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
