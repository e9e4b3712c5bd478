//! Command-line parsing and dispatch.
//!
//! Exit codes: 0 success; 1 the plugin ran and failed (trap, deadline,
//! memory cap, or its own error); 2 the plugin could not be loaded or the
//! command was wrong.

mod grant;
mod inspect;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
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
    },
    /// Run an agent on one input and print its answer.
    Run {
        /// The agent's `.wasm` component.
        file: PathBuf,
        /// The input (prompt) for the agent.
        input: String,
        /// Wall-clock limit for the run, in seconds.
        #[arg(long, value_name = "SECS", default_value_t = 300)]
        timeout: u64,
        /// Memory cap for the agent, in MiB.
        #[arg(long, value_name = "MIB", default_value_t = 256)]
        memory: usize,
        /// Print the outcome as one JSON object.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        grant: grant::GrantArgs,
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
        Command::Inspect { file, json, grant } => match (Plugin::load(&engine, file).await, grant.resolve()) {
            (Err(e), _) => fail(&e),
            (Ok(_), Err(e)) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
            (Ok(plugin), Ok(grant)) => {
                inspect::print(&plugin, &grant, *json);
                ExitCode::SUCCESS
            }
        },
        Command::Run { file, input, json, grant, .. } => {
            let options = match grant.resolve().and_then(|g| g.run_options()) {
                Ok(o) => o,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            let plugin = match Plugin::load(&engine, file).await {
                Ok(p) => p,
                Err(e) => return fail(&e),
            };
            let outcome = plugin.run_agent(input, &options).await;
            if let Some(sandbox) = options.sandbox.clone() {
                // The CLI created the sandbox, so it removes it (a container, say).
                let closed = tokio::task::spawn_blocking(move || sandbox.close()).await;
                if let Ok(Err(e)) = closed {
                    eprintln!("warning: closing the sandbox failed: {e}");
                }
            }
            if *json {
                let value = match &outcome {
                    Ok(answer) => serde_json::json!({ "status": "ok", "agent": plugin.name(), "answer": answer }),
                    Err(e) => serde_json::json!({ "status": "error", "agent": plugin.name(), "error": e.to_string() }),
                };
                println!("{value}");
            }
            match outcome {
                Ok(answer) => {
                    if !*json {
                        println!("{answer}");
                    }
                    ExitCode::SUCCESS
                }
                Err(e) if *json => exit_code(&e),
                Err(e) => fail(&e),
            }
        }
        Command::Build { .. } | Command::Wit => unreachable!("handled above"),
    }
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
