//! Command-line parsing and dispatch.
//!
//! Exit codes: 0 success; 1 the run failed (a trap, a deadline, the memory
//! cap, a model error, or the agent's own error); 2 nothing ran (a bad file
//! or configuration, or a wrong command line); 3 the turn cap or token budget
//! cut the answer short; 4 the run is suspended (it waits for an approval,
//! or its agent paused it) or, with `--ephemeral`, stopped at an action that
//! needs approval.

/// Prints to stdout through [`nexo::terminal::print_line`]: escaped on a
/// terminal, and never a panic on a closed pipe.
macro_rules! outln {
    ($($arg:tt)*) => { nexo::terminal::print_line(&format!($($arg)*)) };
}

/// Prints to stderr through [`nexo::terminal::eprint_line`]: always escaped,
/// since diagnostics quote paths, tool arguments and server bodies.
macro_rules! errln {
    ($($arg:tt)*) => { nexo::terminal::eprint_line(&format!($($arg)*)) };
}

mod cache;
mod chat;
pub(crate) mod grant;
mod inspect;
mod mcp;
pub(crate) mod model;
mod plugin_test;
mod plugins;
mod policy;
mod progress;
mod registry;
pub(crate) mod report;
mod run;
pub(crate) mod runs;
mod scaffold;
mod schedule;
mod sdk;
mod serve;
mod sessions;
mod tenant;
mod timeline;
pub(crate) mod web;
mod wit;
pub(crate) mod worker;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use nexo::agent_file::AgentFile;
use nexo::agent_loop::Status;
use nexo::registry::PluginReference;
use nexo::settings::RunOptions;
use nexo::{ConfigError, Engine, EngineConfig, Plugin, RunError};
use report::{config_failure, exit_code, fail, is_toml, report_error};

/// nexo hosts AI agents, skills and search backends as WebAssembly components.
#[derive(Parser, Debug)]
#[command(name = "nexo", version, about)]
struct Cli {
    /// Cache compiled components here (default: $NEXO_CACHE_DIR, else ~/.cache/nexo/components).
    #[arg(long, global = true, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Do not read or write the compile cache.
    #[arg(long, global = true)]
    no_cache: bool,
    /// More log output (-v: host info, -vv: debug). `NEXO_LOG` overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Where runs are recorded: a file, `sqlite://PATH` or `postgres://…` (default: the config
    /// file's `store`, else nexo.db in $XDG_DATA_HOME/nexo or ~/.local/share/nexo).
    #[arg(long, global = true, value_name = "PATH|URL", env = "NEXO_STORE")]
    store: Option<String>,
    #[command(flatten)]
    registries: registry::RegistryArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Describe a plugin or a TOML agent: its kind, name, requested and granted capabilities.
    Inspect {
        /// The `.wasm` component, a registry reference (HOST[:PORT]/REPO:TAG or @sha256:…), or a
        /// declarative `.toml` agent.
        file: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        grant: grant::GrantArgs,
        #[command(flatten)]
        search: web::SearchArgs,
    },
    /// Run an agent on one input and print its answer.
    Run(Box<run::RunArgs>),
    /// Send a prompt to a session: a remembering instance of an agent, whose thread each prompt
    /// continues (interactive on a terminal when no prompt is given).
    Chat(chat::ChatArgs),
    /// Work with sessions: list, show, delete, sweep (retention).
    #[command(subcommand)]
    Sessions(sessions::SessionsCommand),
    /// Work with recorded runs: list, show, follow, resume, approve, deny, cancel, recover.
    #[command(subcommand)]
    Runs(runs::RunsCommand),
    /// Start an agent's run at each occurrence of a cron expression: add, list, show, pause,
    /// resume, delete (any `nexo worker` or `nexo serve` on the store starts them).
    #[command(subcommand)]
    Schedule(schedule::ScheduleCommand),
    /// Run queued jobs (`nexo run --later`, `nexo runs resume --later`) from the store, with any
    /// number of other workers on this machine or others sharing it.
    Worker(worker::WorkerArgs),
    /// Host many tenants' agents over HTTP: plugins, runs, events, approvals, usage and an audit
    /// log, with a worker that runs the queued runs (any number of nodes can share one store).
    Serve(serve::ServeArgs),
    /// Manage the tenants of `nexo serve`: create, list, policy, disable, enable, keys.
    #[command(subcommand)]
    Tenant(tenant::TenantCommand),
    /// Check or show the tenants' hash-chained audit logs.
    #[command(subcommand)]
    Audit(tenant::AuditCommand),
    /// Show the tenants' metered usage.
    Usage {
        /// Only this tenant.
        name: Option<String>,
        /// Print JSON lines.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        store: runs::StoreArgs,
    },
    /// The plugin versions, and the authority each asks for, that the operator accepted.
    #[command(subcommand)]
    Plugins(plugins::PluginsCommand),
    /// Check the operator's policy: how the command rules and the mode judge a shell command.
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
    /// Serve an agent's gated tools, or the agent itself, to MCP clients.
    #[command(subcommand)]
    Mcp(mcp::McpCommand),
    /// Build a plugin crate into a component and check that nexo can load it.
    Build {
        /// The plugin crate's directory.
        #[arg(default_value = ".")]
        path: PathBuf,
        /// Where cargo puts build output (default: $CARGO_TARGET_DIR, else <path>/target).
        #[arg(long, value_name = "DIR")]
        target_dir: Option<PathBuf>,
    },
    /// Build a plugin crate and check it in an in-process host (an agent runs its scripted test).
    Test {
        /// The plugin crate's directory.
        #[arg(default_value = ".")]
        path: PathBuf,
        /// Where cargo puts build output (default: $CARGO_TARGET_DIR, else <path>/target).
        #[arg(long, value_name = "DIR")]
        target_dir: Option<PathBuf>,
    },
    /// Write a new plugin crate NAME/ that builds anywhere (the SDK comes from this binary).
    New {
        /// What to make.
        #[arg(value_enum)]
        kind: scaffold::NewKind,
        /// The plugin's name, and its directory: lowercase letters, digits and single hyphens.
        name: PathBuf,
    },
    /// Write an operator project: a commented nexo.toml, skills/, agents/ and .gitignore.
    Init {
        /// The project's directory (created if missing).
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
    /// Print the `nexo:plugin` WIT package this host implements (or write its files with --out).
    Wit {
        /// Write the package's files into this directory instead of printing them.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Work with skill packages (SKILL.md directories).
    #[command(subcommand)]
    Skill(SkillCommand),
    /// The local cache of components pulled from registries.
    #[command(subcommand)]
    Cache(cache::CacheCommand),
    /// Pull a component from a registry into the local cache; print its manifest digest and file.
    Pull {
        /// HOST[:PORT]/REPOSITORY:TAG, or HOST[:PORT]/REPOSITORY@sha256:HEX.
        reference: String,
        #[command(flatten)]
        config: registry::ConfigArgs,
    },
    /// Push a component to a registry (the wasm OCI layout wkg reads); print its manifest digest.
    Push {
        /// The `.wasm` component.
        file: PathBuf,
        /// HOST[:PORT]/REPOSITORY:TAG.
        reference: String,
        #[command(flatten)]
        config: registry::ConfigArgs,
    },
    /// Sign a component in a registry with your key, as cosign does (or make a key pair).
    Sign(registry::SignArgs),
}

#[derive(Subcommand, Debug)]
enum SkillCommand {
    /// Create a valid skill package: `<path>/<name>/SKILL.md` and `references/`.
    New {
        /// The skill's name: lowercase letters, digits and single hyphens.
        name: String,
        /// The skills directory.
        #[arg(long, default_value = "skills")]
        path: PathBuf,
    },
    /// Validate a skill package directory (or every package in a skills directory).
    Check {
        /// A skill's directory, or a skills directory holding several.
        path: PathBuf,
    },
}

/// Runs the CLI and returns the process exit code.
pub fn main() -> ExitCode {
    // The orphan guard of an MCP server: before any runtime, thread or
    // tracing, so it stays a small single-threaded process.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == nexo_mcp::GUARD_SUBCOMMAND) {
        let code = nexo_mcp::guard_main(&args[2..]);
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    let cli = Cli::parse();
    init_tracing(cli.verbose);
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if matches!(cli.command, Command::Serve(_)) {
        // This runtime serves the API; the runs get one of their own.
        nexo::priority::api_thread();
        builder.on_thread_start(nexo::priority::api_thread);
    }
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            errln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let code = runtime.block_on(dispatch(cli));
    // A host call may still be blocked in I/O past the deadline (a component
    // reading a FIFO); its thread must not hold the process open.
    runtime.shutdown_background();
    code
}

fn init_tracing(verbose: u8) {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let default = match verbose {
        0 => "warn,nexo::plugin=info,nexo::model=info",
        1 => "info",
        _ => "debug,cranelift_codegen=info,wasmtime_cranelift=info",
    };
    let mut filter = tracing_subscriber::EnvFilter::try_from_env("NEXO_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // oci-client logs registry token responses at debug: never below info, whatever was asked.
    if let Ok(cap) = "oci_client=info".parse() {
        filter = filter.add_directive(cap);
    }
    let log = tracing_subscriber::fmt::layer()
        .with_writer(|| LogWriter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .with_filter(filter);
    tracing_subscriber::registry().with(log).init();
}

/// stderr for log records, each escaped by [`nexo::terminal::escape_log_record`];
/// a closed stderr is ignored.
struct LogWriter;

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().lock().write_all(&nexo::terminal::escape_log_record(buf));
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

fn engine_config(cli: &Cli) -> EngineConfig {
    // Reserving the instance pool costs a one-shot command more start-up
    // time (about a thousand mprotect calls) than its few instantiations
    // win back; the long-lived commands keep it.
    let pooling = matches!(cli.command, Command::Worker(_) | Command::Mcp(_) | Command::Serve(_));
    let mut config = EngineConfig { pooling, ..EngineConfig::default() };
    // The long-lived commands log instead.
    if !matches!(cli.command, Command::Worker(_) | Command::Serve(_)) {
        config.on_compile = progress::compile_notice(cli.verbose);
    }
    if cli.no_cache {
        config.cache_dir = None;
    } else if let Some(dir) = &cli.cache_dir {
        config.cache_dir = Some(dir.clone());
    }
    let limits = match &cli.command {
        Command::Run(args) => Some((args.timeout, args.memory)),
        Command::Chat(args) => Some((args.timeout, args.memory)),
        _ => None,
    };
    if let Some((timeout, memory)) = limits {
        config.limits.run_timeout = Duration::from_secs(timeout);
        config.limits.memory_bytes = usize::try_from(memory).unwrap_or(usize::MAX).saturating_mul(1 << 20);
    }
    config
}

/// `nexo schedule add CRON …` as the `nexo run … --schedule CRON` it is.
fn into_run(mut cli: Cli) -> Result<Cli, ExitCode> {
    if let Command::Schedule(schedule::ScheduleCommand::Add { expression, run }) = cli.command {
        if run.schedule.cron.is_some() || run.later || run.ephemeral {
            errln!(
                "error: `nexo schedule add CRON FILE INPUT` records a schedule: give the expression once, without \
                 --schedule, --later or --ephemeral"
            );
            return Err(ExitCode::from(2));
        }
        let mut run = run;
        run.schedule.cron = Some(expression);
        cli.command = Command::Run(run);
    }
    Ok(cli)
}

async fn dispatch(cli: Cli) -> ExitCode {
    // `nexo schedule add CRON FILE INPUT …` is `nexo run FILE INPUT --schedule CRON …`.
    let cli = match into_run(cli) {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    if let Command::Wit { out } = &cli.command {
        let Some(dir) = out else {
            wit::print();
            return ExitCode::SUCCESS;
        };
        return match wit::write(dir) {
            Ok(()) => {
                errln!("wrote {} WIT files to {}", wit::FILES.len(), dir.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                errln!("error: cannot write the WIT files to {}: {e}", dir.display());
                ExitCode::from(2)
            }
        };
    }
    if let Command::Policy(command) = &cli.command {
        return policy::command(command);
    }
    if let Command::Skill(command) = &cli.command {
        return skill(command);
    }
    if let Command::Build { path, target_dir } = &cli.command {
        return match build(&cli, path, target_dir.as_deref()).await {
            Ok((plugin, artifact)) => {
                outln!("{}", artifact.display());
                errln!("built {} `{}` ({} bytes)", plugin.kind(), plugin.name(), plugin.size());
                ExitCode::SUCCESS
            }
            Err(code) => code,
        };
    }
    if let Command::Test { path, target_dir } = &cli.command {
        return test(&cli, path, target_dir.as_deref()).await;
    }
    if let Command::New { kind, name } = &cli.command {
        return new(*kind, name);
    }
    if let Command::Init { dir } = &cli.command {
        return init(dir);
    }
    if let Command::Runs(command) = &cli.command {
        return runs::command(command, &engine_config(&cli), cli.store.as_deref()).await;
    }
    if let Command::Schedule(command) = &cli.command {
        return schedule::command(command, cli.store.as_deref()).await;
    }
    if let Command::Worker(args) = &cli.command {
        return worker::command(args, &engine_config(&cli), cli.store.as_deref()).await;
    }
    if let Command::Sessions(command) = &cli.command {
        return sessions::command(command, cli.store.as_deref()).await;
    }
    if let Command::Serve(args) = &cli.command {
        return serve::command(args, &engine_config(&cli), cli.store.as_deref()).await;
    }
    if let Command::Tenant(command) = &cli.command {
        return tenant::command(command, cli.store.as_deref()).await;
    }
    if let Command::Audit(command) = &cli.command {
        return tenant::audit(command, cli.store.as_deref()).await;
    }
    if let Command::Usage { name, json, store } = &cli.command {
        return tenant::usage(name.as_deref(), *json, store, cli.store.as_deref()).await;
    }
    if let Command::Cache(command) = &cli.command {
        return cache::command(command, cli.store.as_deref()).await;
    }
    if let Command::Pull { config, .. }
    | Command::Push { config, .. }
    | Command::Sign(registry::SignArgs { config, .. }) = &cli.command
    {
        let registries = match nexo::config::read(config.config()) {
            Ok(file) => match cli.registries.registries(&file, config.config()) {
                Ok(r) => r,
                Err(code) => return code,
            },
            Err(e) => return config_failure(&e),
        };
        return match &cli.command {
            Command::Push { file, reference, .. } => registry::push(file, reference, &registries.insecure).await,
            Command::Sign(args) => registry::sign(args, &registries).await,
            Command::Pull { reference, .. } => registry::pull(reference, &registries).await,
            _ => unreachable!("matched above"),
        };
    }
    let mut cli = cli;
    let (pulled_as, backend_pulled) = match plugin_from_registry(&mut cli).await {
        Ok(both) => both,
        Err(code) => return code,
    };
    let engine = match Engine::new(engine_config(&cli)) {
        Ok(e) => e,
        Err(e) => {
            errln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    // A search backend from a registry is accepted as an agent is, by what
    // it asks for; `inspect` shows what is to be accepted, so it checks nothing.
    if let Some((file, reference)) = backend_pulled.filter(|_| !matches!(cli.command, Command::Inspect { .. })) {
        let accept = matches!(&cli.command, Command::Run(args) if args.accept_authority);
        if let Err(code) = plugins::admit_backend(&engine, &file, &reference, accept).await {
            return code;
        }
    }
    match &cli.command {
        Command::Inspect { file, json, grant, search } => {
            let setup = settings(grant, search);
            if is_toml(file) {
                return match (AgentFile::load(file), setup) {
                    (Err(e), _) => fail(&e.into()),
                    (Ok(_), Err(e)) => config_failure(&e),
                    (Ok(agent), Ok(settings)) => {
                        inspect::print_agent_file(&agent, &settings.grant, settings.search.as_ref(), *json);
                        ExitCode::SUCCESS
                    }
                };
            }
            match (Plugin::load(&engine, file).await, setup) {
                (Err(e), _) => fail(&e.into()),
                (Ok(_), Err(e)) => config_failure(&e),
                (Ok(plugin), Ok(settings)) => {
                    let origin = origin(pulled_as.as_ref());
                    inspect::print(&plugin, origin.as_ref(), &settings.grant, settings.search.as_ref(), *json);
                    ExitCode::SUCCESS
                }
            }
        }
        Command::Run(args) => {
            let run::RunArgs {
                file,
                input,
                json,
                grant,
                search,
                model,
                timeout,
                memory,
                ephemeral,
                later,
                accept_authority,
                schedule,
            } = &**args;
            let (settings, mut recorded) = match recorded(&cli, file, grant, search, model, *timeout, *memory) {
                Ok(both) => both,
                Err(code) => return code,
            };
            // Loaded once: what acceptance checks is what runs.
            let loaded = match runs::Loaded::load(&engine, file).await {
                Ok(l) => l,
                Err(code) => return code,
            };
            if let Err(code) = plugins::check_run(
                loaded.manifest(),
                loaded.sha256(),
                file,
                pulled_as.as_ref().map(|(r, _)| r),
                *accept_authority,
                *json,
            ) {
                return code;
            }
            recorded.origin = origin(pulled_as.as_ref());
            recorded.skill_components =
                match model.recorded_skill_components(&engine, &settings.file, grant.config_path()).await {
                    Ok(files) => files,
                    Err(e) => return fail(&e),
                };
            recorded.hooks = match grant.recorded_hooks(&engine, &settings.file).await {
                Ok(files) => files,
                Err(e) => return fail(&e),
            };
            if *later || schedule.cron.is_some() {
                let store = match runs::open(cli.store.as_deref(), &settings.file).await {
                    Ok(s) => s,
                    Err(code) => return code,
                };
                if schedule.cron.is_some() {
                    return schedule::add(&*store, schedule, (loaded.subject(), input, &recorded), *json).await;
                }
                let recorder = nexo::runs::Runs::new(store, settings.file.buffer_events);
                return worker::queue(&recorder, &loaded, input, &recorded, *json).await;
            }
            let telemetry = match report::telemetry(&settings.file) {
                Ok(t) => t,
                Err(code) => return code,
            };
            let progress = std::sync::Arc::new(progress::Progress::new(*json));
            let options = match runs::options(&engine, &recorded, &progress).await {
                Ok(o) => o,
                Err(code) => return code,
            };
            let code = if *ephemeral {
                let result = Ok(run_agent(&loaded, input, &options).await);
                progress.finish();
                report(result, *json)
            } else {
                let store = match runs::open(cli.store.as_deref(), &settings.file).await {
                    Ok(s) => s,
                    Err(code) => return code,
                };
                let recorder = nexo::runs::Runs::new(store, settings.file.buffer_events);
                let pass = runs::start(&recorder, &loaded, input, &recorded, &options, *json);
                let code = runs::cancel_on_ctrl_c(&recorder, pass).await;
                progress.finish();
                code
            };
            // The CLI started the MCP servers and the sandbox, so it ends them.
            nexo::runs::prepare::close(&options).await;
            telemetry.shutdown().await;
            code
        }
        Command::Chat(args) => {
            let (settings, mut recorded) =
                match recorded(&cli, &args.file, &args.grant, &args.search, &args.model, args.timeout, args.memory) {
                    Ok(both) => both,
                    Err(code) => return code,
                };
            recorded.origin = origin(pulled_as.as_ref());
            let (model, config) = (&args.model, args.grant.config_path());
            recorded.skill_components = match model.recorded_skill_components(&engine, &settings.file, config).await {
                Ok(files) => files,
                Err(e) => return fail(&e),
            };
            recorded.hooks = match args.grant.recorded_hooks(&engine, &settings.file).await {
                Ok(files) => files,
                Err(e) => return fail(&e),
            };
            let place = chat::Place {
                store: cli.store.as_deref(),
                file: &settings.file,
                origin: pulled_as.as_ref().map(|(r, _)| r),
            };
            chat::command(args, &engine, &engine_config(&cli), &place, &recorded).await
        }
        Command::Mcp(command) => mcp::command(command, &engine, pulled_as.as_ref().map(|(r, _)| r)).await,
        Command::Plugins(command) => {
            // Accepting pulls what it accepts: under the same trust rules as a run.
            let config = match command {
                plugins::PluginsCommand::Accept { config, .. } => config.config(),
                plugins::PluginsCommand::List { .. } => None,
            };
            let registries = match nexo::config::read(config) {
                Ok(file) => match cli.registries.registries(&file, config) {
                    Ok(r) => r,
                    Err(code) => return code,
                },
                Err(e) => return config_failure(&e),
            };
            plugins::command(command, &engine, &registries).await
        }
        Command::Build { .. }
        | Command::Test { .. }
        | Command::New { .. }
        | Command::Init { .. }
        | Command::Wit { .. }
        | Command::Runs(_)
        | Command::Schedule(_)
        | Command::Worker(_)
        | Command::Sessions(_)
        | Command::Serve(_)
        | Command::Tenant(_)
        | Command::Audit(_)
        | Command::Usage { .. }
        | Command::Pull { .. }
        | Command::Cache(_)
        | Command::Push { .. }
        | Command::Sign(_)
        | Command::Policy(_)
        | Command::Skill(_) => unreachable!("handled above"),
    }
}

/// The one place a command's plugin arguments (its component, and the
/// search backend of its flags or config file) become local files: a
/// registry reference is pulled into the cache, or found there, and the
/// command goes on with the cached file, whose path names its digest.
/// Returns the registry reference the command's plugin was given as, at
/// its digest, and what its signature check found; and the search
/// backend's cached file with its reference, if it came from a registry.
async fn plugin_from_registry(cli: &mut Cli) -> Result<(Pulled, Option<(PathBuf, PluginReference)>), ExitCode> {
    let (file, grant, search, model) = match &mut cli.command {
        Command::Run(args) => (&mut args.file, &mut args.grant, &mut args.search, Some(&mut args.model)),
        Command::Inspect { file, grant, search, .. } => (file, grant, search, None),
        Command::Chat(args) => (&mut args.file, &mut args.grant, &mut args.search, Some(&mut args.model)),
        Command::Mcp(mcp::McpCommand::Serve(args)) => {
            (&mut args.file, &mut args.grant, &mut args.search, Some(&mut args.model))
        }
        _ => return Ok((None, None)),
    };
    // A bad config file is reported by the command itself, as before.
    let Ok(config) = nexo::config::read(grant.config_path()) else { return Ok((None, None)) };
    let backend = search.backend().map(Path::to_path_buf).or_else(|| config.search.as_ref()?.backend.clone());
    let backend = backend.filter(|b| nexo::registry::is_reference(b));
    let skills = model.as_ref().map(|m| m.skill_components(&config, grant.config_path())).unwrap_or_default();
    let skills_pulled = skills.iter().any(|s| nexo::registry::is_reference(s));
    if !nexo::registry::is_reference(file) && backend.is_none() && !skills_pulled && config.registries.trust.is_empty()
    {
        return Ok((None, None));
    }
    let registries = cli.registries.registries(&config, grant.config_path())?;
    let reference = registry::resolve(&mut *file, &registries).await?;
    // A skill component asks for nothing, so there is nothing to accept:
    // its digest (the cached file's name) and signature check are all.
    if let Some(model) = model
        && (skills_pulled || !config.registries.trust.is_empty())
    {
        let mut files = Vec::with_capacity(skills.len());
        for mut skill in skills {
            registry::resolve(&mut skill, &registries).await?;
            files.push(skill);
        }
        model.set_skill_components(files);
    }
    let mut backend_pulled = None;
    if let Some(mut backend) = backend {
        let pulled = registry::resolve(&mut backend, &registries).await?;
        backend_pulled = pulled.map(|(reference, _)| (backend.clone(), reference));
        // The flag wins over `[search] backend`: the cached file stands in for both.
        search.set_backend(backend);
    }
    Ok((reference, backend_pulled))
}

/// The registry reference a command's plugin was pulled as, at its
/// digest, and its signature check.
type Pulled = Option<(PluginReference, nexo::registry::Signature)>;

/// What a run records of its plugin's registry origin.
fn origin(pulled_as: Option<&(PluginReference, nexo::registry::Signature)>) -> Option<nexo::runs::Origin> {
    pulled_as.map(|(reference, signature)| nexo::runs::Origin {
        reference: reference.to_string(),
        signature: signature.clone(),
    })
}

/// The settings a run records: the grant, model, search and limits from
/// the flags over the config file.
fn recorded(
    cli: &Cli,
    file: &std::path::Path,
    grant: &grant::GrantArgs,
    search: &web::SearchArgs,
    model: &model::ModelArgs,
    timeout: u64,
    memory: u64,
) -> Result<(Settings, nexo::runs::RunSpec), ExitCode> {
    let settings = settings(grant, search).map_err(|e| config_failure(&e))?;
    let agents =
        settings.file.agents.files(grant.config_path()).and_then(|f| nexo::runs::children::recorded_agents(&f));
    let agents = agents.map_err(|e| config_failure(&e))?;
    let recorded = match (settings.grant.recorded(), model.merged(&settings.file.model)) {
        (Ok(grant), Ok(model_table)) => nexo::runs::RunSpec {
            grant,
            model: model_table.or_agent_loop(runs::loop_hint(file)),
            search: search.merged(settings.file.search.as_ref(), grant_config(cli)),
            timeout_secs: timeout,
            memory_mib: memory,
            skills_path: std::path::absolute(&model.skills_path).unwrap_or(model.skills_path.clone()),
            progressive_skills: model.progressive_skills,
            // Loaded and recorded by the caller, which has the engine.
            skill_components: Vec::new(),
            hooks: Vec::new(),
            origin: None,
            agents,
            depth: 0,
        },
        (Err(e), _) | (_, Err(e)) => return Err(config_failure(&e)),
    };
    Ok((settings, recorded))
}

/// The operator's settings for one command: the config file, read once,
/// with the flags laid over it.
struct Settings {
    file: nexo::config::ConfigFile,
    grant: nexo::grant::Grant,
    search: Option<nexo::config::SearchSetup>,
}

fn settings(grant: &grant::GrantArgs, search: &web::SearchArgs) -> Result<Settings, ConfigError> {
    let file = nexo::config::read(grant.config_path())?;
    let resolved = grant.resolve(&file)?;
    let search = search.resolve(file.search.as_ref(), grant.config_path())?;
    Ok(Settings { file, grant: resolved, search })
}

fn skill(command: &SkillCommand) -> ExitCode {
    match command {
        SkillCommand::New { name, path } => match nexo_skills::scaffold(path, name) {
            Ok(dir) => {
                outln!("{}", dir.display());
                errln!("created skill `{name}`: edit its description and instructions in SKILL.md");
                ExitCode::SUCCESS
            }
            Err(e) => {
                errln!("error: {e}");
                ExitCode::from(2)
            }
        },
        SkillCommand::Check { path } => {
            let result = if path.join(nexo_skills::SKILL_FILE).is_file() {
                nexo_skills::load_skill(path).map(|s| vec![s])
            } else if path.is_dir() {
                nexo_skills::SkillSet::load(path).map(|set| set.iter().cloned().collect())
            } else {
                errln!("error: {} is neither a skill directory nor a skills directory", path.display());
                return ExitCode::from(2);
            };
            match result {
                Ok(skills) if skills.is_empty() => {
                    errln!("error: no skill packages in {}", path.display());
                    ExitCode::from(2)
                }
                Ok(skills) => {
                    for s in skills {
                        outln!("ok  {}  ({} resources)  {}", s.name(), s.resources.len(), s.metadata.description);
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    errln!("error: {e}");
                    ExitCode::from(1)
                }
            }
        }
    }
}

/// What a run produced: the agent's name, its answer, and how its last
/// prompt ended (if it prompted).
struct RunResult {
    agent: String,
    answer: Result<String, RunError>,
    status: Option<Status>,
}

async fn run_agent(loaded: &runs::Loaded, input: &str, options: &RunOptions) -> RunResult {
    runs::warn_withheld(loaded.manifest(), options);
    let name = loaded.name().to_string();
    match loaded {
        runs::Loaded::File(agent) => match agent.run(input, options).await {
            Ok(outcome) => RunResult { agent: name, answer: Ok(outcome.text), status: Some(outcome.status) },
            Err(e) => RunResult { agent: name, answer: Err(e), status: None },
        },
        runs::Loaded::Component(agent, ..) => match agent.run(input, options).await {
            Ok(outcome) => {
                RunResult { agent: name, answer: Ok(outcome.answer), status: outcome.last_prompt.map(|o| o.status) }
            }
            Err(e) => RunResult { agent: name, answer: Err(e), status: None },
        },
    }
}

/// The config file `nexo run` was given, if any.
fn grant_config(cli: &Cli) -> Option<&std::path::Path> {
    match &cli.command {
        Command::Run(args) => args.grant.config_path(),
        Command::Inspect { grant, .. } => grant.config_path(),
        Command::Chat(args) => args.grant.config_path(),
        _ => None,
    }
}

fn report(result: Result<RunResult, RunError>, json: bool) -> ExitCode {
    let run = match result {
        Ok(run) => run,
        Err(e) => return report_error(&e, json),
    };
    let code = match (&run.answer, &run.status) {
        (Err(e), _) => exit_code(e),
        (Ok(_), Some(Status::TurnLimit | Status::TokenBudget)) => ExitCode::from(3),
        (Ok(_), Some(Status::ApprovalRequired { .. })) => ExitCode::from(4),
        (Ok(_), _) => ExitCode::SUCCESS,
    };
    let status = match (&run.answer, &run.status) {
        (Err(_), _) => "error",
        (Ok(_), Some(Status::TurnLimit)) => "turn-limit",
        (Ok(_), Some(Status::TokenBudget)) => "token-budget",
        (Ok(_), Some(Status::ApprovalRequired { .. })) => "approval-required",
        (Ok(_), _) => "done",
    };
    if json {
        let value = match &run.answer {
            Ok(answer) => serde_json::json!({ "status": status, "agent": run.agent, "answer": answer }),
            Err(e) => serde_json::json!({ "status": status, "agent": run.agent, "error": e.to_string() }),
        };
        nexo::terminal::print_json(&value);
        return code;
    }
    match &run.answer {
        Ok(answer) => {
            outln!("{answer}");
            match &run.status {
                Some(status @ (Status::TurnLimit | Status::TokenBudget)) => {
                    errln!("{}", report::cut_short(status, answer))
                }
                Some(Status::ApprovalRequired { tool, detail }) => {
                    errln!("stopped: `{tool}` needs approval: {detail}")
                }
                _ => {}
            }
        }
        // With the command line's own fix (`--memory`, `--timeout`).
        Err(e) => {
            fail(e);
        }
    }
    code
}

/// Builds the plugin crate at `path` and loads the component; on failure the
/// error is printed and the exit code returned.
async fn build(
    cli: &Cli,
    path: &std::path::Path,
    target_dir: Option<&std::path::Path>,
) -> Result<(Plugin, PathBuf), ExitCode> {
    let manifest = path.join("Cargo.toml");
    let Some(package) = nexo_toolchain::package_name(&manifest) else {
        errln!(
            "error: {} has no `[package] name`: point `nexo build` at a plugin crate's directory",
            manifest.display()
        );
        return Err(ExitCode::from(2));
    };
    let toolchain = nexo_toolchain::Toolchain::detect().map_err(|e| {
        errln!("error: {e}");
        ExitCode::from(2)
    })?;
    // As cargo does: the flag, else $CARGO_TARGET_DIR, else the crate's own target/.
    let target_dir = target_dir
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()).map(PathBuf::from))
        .unwrap_or_else(|| path.join("target"));
    errln!("building `{package}` for {} with the {toolchain:?} toolchain", nexo_toolchain::TARGET);
    if toolchain.builds_std_in(&target_dir) && progress::tells_long_steps(cli.verbose) {
        errln!(
            "first build in {}: the standard library is built from source too (minutes, once; later builds reuse it)",
            target_dir.display()
        );
    }
    let artifact = nexo_toolchain::build_package(&toolchain, &manifest, Some(&package), &target_dir).map_err(|e| {
        errln!("error: {e}");
        ExitCode::from(2)
    })?;
    let engine = Engine::new(engine_config(cli)).map_err(|e| {
        errln!("error: {e:#}");
        ExitCode::from(2)
    })?;
    match Plugin::load(&engine, &artifact).await {
        Ok(plugin) => Ok((plugin, artifact)),
        Err(e) => Err(fail(&e.into())),
    }
}

/// `nexo test`: build, then the checks of [`plugin_test`]; exit 0 if all pass, 1 if not.
async fn test(cli: &Cli, path: &std::path::Path, target_dir: Option<&std::path::Path>) -> ExitCode {
    let (plugin, artifact) = match build(cli, path, target_dir).await {
        Ok(built) => built,
        Err(code) => return code,
    };
    errln!("testing {}", artifact.display());
    let checks = plugin_test::run(&plugin, path).await;
    let failed = checks.iter().filter(|c| c.result.is_err()).count();
    for c in &checks {
        match &c.result {
            Ok(()) => outln!("ok    {}", c.what),
            Err(reason) => outln!("FAIL  {}: {reason}", c.what),
        }
    }
    if failed == 0 {
        outln!("test result: ok ({} checks passed)", checks.len());
        ExitCode::SUCCESS
    } else {
        outln!("test result: FAILED ({failed} of {} checks failed)", checks.len());
        ExitCode::from(1)
    }
}

fn new(kind: scaffold::NewKind, name: &std::path::Path) -> ExitCode {
    let sdk_dir = match sdk::default_dir() {
        Ok(d) => d,
        Err(e) => {
            errln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    match scaffold::new_plugin(kind, name, &sdk_dir) {
        Ok(_) => {
            outln!("{}", name.display());
            errln!("created {} crate {} (SDK in {})", kind.label(), name.display(), sdk_dir.display());
            errln!("next: nexo build {0}    then: nexo test {0}", name.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            errln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn init(dir: &std::path::Path) -> ExitCode {
    match scaffold::init(dir) {
        Ok(written) => {
            for path in written {
                outln!("{}", path.display());
            }
            errln!(
                "next: nexo inspect {} --config {}",
                dir.join("agents/example.toml").display(),
                dir.join("nexo.toml").display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            errln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
