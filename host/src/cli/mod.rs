//! Command-line parsing and dispatch.
//!
//! Exit codes: 0 success; 1 the run failed (a trap, a deadline, the memory
//! cap, a model error, or the agent's own error); 2 nothing ran (a bad file
//! or configuration, or a wrong command line); 3 the turn cap or token budget
//! cut the answer short; 4 the run stopped at an action that needs approval.

mod grant;
mod inspect;
mod model;
mod progress;
mod web;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use nexo::agent_file::AgentFile;
use nexo::agent_loop::Status;
use nexo::state::RunOptions;
use nexo::{Engine, EngineConfig, Plugin, PluginError};

/// The contract plugins are built against, shipped inside the binary.
const WIT: &str = include_str!("../../../wit/nexo.wit");

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
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Describe a plugin: its kind, name, requested capabilities and imports.
    Inspect {
        /// The `.wasm` component.
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
    Run {
        /// The agent: a `.wasm` component, or a declarative `.toml` manifest.
        file: PathBuf,
        /// The input (prompt) for the agent.
        input: String,
        /// Wall-clock limit for the run, in seconds.
        #[arg(long, value_name = "SECS", default_value_t = 300)]
        timeout: u64,
        /// Memory cap for the agent, in MiB.
        #[arg(long, value_name = "MIB", default_value_t = 256)]
        memory: usize,
        /// Print events as JSON lines, then the outcome as one JSON object.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        grant: grant::GrantArgs,
        #[command(flatten)]
        search: web::SearchArgs,
        #[command(flatten)]
        model: model::ModelArgs,
    },
    /// Build a plugin crate into a component and check that nexo can load it.
    Build {
        /// The plugin crate's directory.
        #[arg(default_value = ".")]
        path: PathBuf,
        /// Where cargo puts build output (default: <path>/target).
        #[arg(long, value_name = "DIR")]
        target_dir: Option<PathBuf>,
    },
    /// Print the `nexo:plugin` WIT package this host implements.
    Wit,
    /// Work with skill packages (SKILL.md directories).
    #[command(subcommand)]
    Skill(SkillCommand),
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
    let cli = Cli::parse();
    init_tracing(cli.verbose);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    runtime.block_on(dispatch(cli))
}

fn init_tracing(verbose: u8) {
    let default = match verbose {
        0 => "warn,nexo::plugin=info",
        1 => "info",
        _ => "debug,cranelift_codegen=info,wasmtime_cranelift=info",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("NEXO_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
}

fn engine_config(cli: &Cli) -> EngineConfig {
    let mut config = EngineConfig::default();
    if cli.no_cache {
        config.cache_dir = None;
    } else if let Some(dir) = &cli.cache_dir {
        config.cache_dir = Some(dir.clone());
    }
    if let Command::Run { timeout, memory, .. } = &cli.command {
        config.limits.run_timeout = Duration::from_secs(*timeout);
        config.limits.memory_bytes = memory.saturating_mul(1 << 20);
    }
    config
}

async fn dispatch(cli: Cli) -> ExitCode {
    if let Command::Wit = cli.command {
        print!("{WIT}");
        return ExitCode::SUCCESS;
    }
    if let Command::Skill(command) = &cli.command {
        return skill(command);
    }
    if let Command::Build { path, target_dir } = &cli.command {
        return build(&cli, path, target_dir.as_deref()).await;
    }
    let engine = match Engine::new(engine_config(&cli)) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    match &cli.command {
        Command::Inspect { file, json, grant, search } => {
            let setup = grant.resolve().and_then(|g| Ok((g, search_setup(grant, search)?)));
            match (Plugin::load(&engine, file).await, setup) {
                (Err(e), _) => fail(&e),
                (Ok(_), Err(e)) => {
                    eprintln!("error: {e}");
                    ExitCode::from(2)
                }
                (Ok(plugin), Ok((grant, search))) => {
                    inspect::print(&plugin, &grant, search.as_ref(), *json);
                    ExitCode::SUCCESS
                }
            }
        }
        Command::Run { file, input, json, grant, search, model, .. } => {
            let mut options = match grant.resolve().and_then(|g| g.run_options()) {
                Ok(o) => o,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            match search_setup(grant, search) {
                Ok(None) => {}
                Ok(Some(setup)) => match search_backend(&engine, &setup).await {
                    Ok(backend) => options.search = Some(backend),
                    Err(e) => return fail(&e),
                },
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            }
            match model.resolve(grant.config_path()) {
                Ok(resolved) => {
                    if let Some(provider) = &resolved.provider
                        && provider.name() == "scripted"
                    {
                        eprintln!("note: scripted provider: replaying {}; no model is called", provider.model());
                    }
                    options.model = resolved.provider;
                    options.loop_limits = resolved.limits;
                    options.skills_path = Some(model.skills_path.clone());
                    if model.progressive_skills {
                        options.skill_mode = nexo::state::SkillMode::Progressive;
                    }
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            }
            let progress = std::sync::Arc::new(progress::Progress::new(*json));
            options.events = Some(progress.clone());
            let result = run_agent(&engine, file, input, &options).await;
            progress.finish();
            if let Some(sandbox) = options.sandbox.clone() {
                // The CLI created the sandbox, so it removes it (a container, say).
                let closed = tokio::task::spawn_blocking(move || sandbox.close()).await;
                if let Ok(Err(e)) = closed {
                    eprintln!("warning: closing the sandbox failed: {e}");
                }
            }
            report(result, *json)
        }
        Command::Build { .. } | Command::Wit | Command::Skill(_) => unreachable!("handled above"),
    }
}

/// The search backend from the config file's `[search]` and the flags.
fn search_setup(grant: &grant::GrantArgs, search: &web::SearchArgs) -> Result<Option<web::SearchSetup>, String> {
    let file = grant::read_config(grant.config_path())?;
    search.resolve(file.search.as_ref(), grant.config_path())
}

/// Loads the configured search backend; it must be a search-backend component.
async fn search_backend(
    engine: &Engine,
    setup: &web::SearchSetup,
) -> Result<std::sync::Arc<dyn nexo::search::SearchBackend>, PluginError> {
    let plugin = Plugin::load(engine, &setup.backend).await?;
    Ok(std::sync::Arc::new(nexo::search::ComponentBackend::new(plugin, &setup.grant)?))
}

fn skill(command: &SkillCommand) -> ExitCode {
    match command {
        SkillCommand::New { name, path } => match nexo_skills::scaffold(path, name) {
            Ok(dir) => {
                println!("{}", dir.display());
                eprintln!("created skill `{name}`: edit its description and instructions in SKILL.md");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        },
        SkillCommand::Check { path } => {
            let result = if path.join(nexo_skills::SKILL_FILE).is_file() {
                nexo_skills::load_skill(path).map(|s| vec![s])
            } else if path.is_dir() {
                nexo_skills::SkillSet::load(path).map(|set| set.iter().cloned().collect())
            } else {
                eprintln!("error: {} is neither a skill directory nor a skills directory", path.display());
                return ExitCode::from(2);
            };
            match result {
                Ok(skills) if skills.is_empty() => {
                    eprintln!("error: no skill packages in {}", path.display());
                    ExitCode::from(2)
                }
                Ok(skills) => {
                    for s in skills {
                        println!("ok  {}  ({} resources)  {}", s.name(), s.resources.len(), s.metadata.description);
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
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
    answer: Result<String, PluginError>,
    status: Option<Status>,
}

async fn run_agent(
    engine: &Engine,
    file: &std::path::Path,
    input: &str,
    options: &RunOptions,
) -> Result<RunResult, PluginError> {
    if file.extension().is_some_and(|e| e == "toml") {
        let agent = AgentFile::load(file)?;
        let name = agent.manifest().name.clone();
        return Ok(match agent.run(input, options).await {
            Ok(outcome) => RunResult { agent: name, answer: Ok(outcome.text), status: Some(outcome.status) },
            Err(e) => RunResult { agent: name, answer: Err(e), status: None },
        });
    }
    let plugin = Plugin::load(engine, file).await?;
    let mut instance = plugin.instantiate_agent(options).await?;
    let answer = instance.run(input).await;
    let status = instance.last_outcome().map(|o| o.status.clone());
    Ok(RunResult { agent: plugin.name().to_string(), answer, status })
}

fn report(result: Result<RunResult, PluginError>, json: bool) -> ExitCode {
    let run = match result {
        Ok(run) => run,
        Err(e) => {
            if json {
                println!("{}", serde_json::json!({ "status": "error", "error": e.to_string() }));
            }
            return fail(&e);
        }
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
        (Ok(_), _) => "ok",
    };
    if json {
        let value = match &run.answer {
            Ok(answer) => serde_json::json!({ "status": status, "agent": run.agent, "answer": answer }),
            Err(e) => serde_json::json!({ "status": status, "agent": run.agent, "error": e.to_string() }),
        };
        println!("{value}");
        return code;
    }
    match &run.answer {
        Ok(answer) => {
            println!("{answer}");
            match &run.status {
                Some(Status::TurnLimit) => eprintln!("stopped: turn limit reached; the answer above is partial"),
                Some(Status::TokenBudget) => eprintln!("stopped: token budget used up; the answer above is partial"),
                Some(Status::ApprovalRequired { tool, detail }) => {
                    eprintln!("stopped: `{tool}` needs approval: {detail}")
                }
                _ => {}
            }
        }
        Err(e) => eprintln!("error: {e}"),
    }
    code
}

async fn build(cli: &Cli, path: &std::path::Path, target_dir: Option<&std::path::Path>) -> ExitCode {
    let manifest = path.join("Cargo.toml");
    let Some(package) = nexo_toolchain::package_name(&manifest) else {
        eprintln!(
            "error: {} has no `[package] name`: point `nexo build` at a plugin crate's directory",
            manifest.display()
        );
        return ExitCode::from(2);
    };
    let toolchain = match nexo_toolchain::Toolchain::detect() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let target_dir = target_dir.map(PathBuf::from).unwrap_or_else(|| path.join("target"));
    eprintln!("building `{package}` for {} with the {toolchain:?} toolchain", nexo_toolchain::TARGET);
    let artifact = match nexo_toolchain::build_package(&toolchain, &manifest, Some(&package), &target_dir) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let engine = match Engine::new(engine_config(cli)) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    match Plugin::load(&engine, &artifact).await {
        Ok(plugin) => {
            println!("{}", artifact.display());
            eprintln!("built {} `{}` ({} bytes)", plugin.kind(), plugin.name(), plugin.size());
            ExitCode::SUCCESS
        }
        Err(e) => fail(&e),
    }
}

fn exit_code(e: &PluginError) -> ExitCode {
    match e {
        PluginError::Trap { .. }
        | PluginError::Deadline { .. }
        | PluginError::MemoryLimit { .. }
        | PluginError::AgentFailed { .. }
        | PluginError::SearchFailed { .. }
        | PluginError::Instantiate { .. } => ExitCode::from(1),
        _ => ExitCode::from(2),
    }
}

fn fail(e: &PluginError) -> ExitCode {
    eprintln!("error: {e}");
    exit_code(e)
}
