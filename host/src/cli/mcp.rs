//! `nexo mcp serve`: an agent's gated tools, or the agent itself, as an MCP
//! server (see [`nexo::mcp_server`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Subcommand};
use nexo::agent_file::AgentFile;
use nexo::mcp_server::{AgentRun, McpServer};
use nexo::registry::PluginReference;
use nexo::{Engine, Plugin};

use super::{grant, model, progress, report, runs, web};

/// `nexo mcp …`.
#[derive(Subcommand, Debug)]
pub enum McpCommand {
    /// Serve an agent's tools (read, write, glob, shell, fetch, search: what its grant
    /// offers, under its gate), or with `--agent` the agent itself as one `run` tool,
    /// to an MCP client over stdio (the default) or streamable HTTP.
    Serve(ServeArgs),
}

/// The flags of `nexo mcp serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The agent: a `.wasm` component, or a declarative `.toml` manifest.
    pub(super) file: PathBuf,
    /// Offer the agent itself as one `run` tool (it needs a model) instead of its tools.
    #[arg(long)]
    agent: bool,
    /// Accept the authority a new version of the agent asks for, and record it (as
    /// `nexo plugins accept` does).
    #[arg(long)]
    accept_authority: bool,
    /// Serve streamable HTTP at http://ADDR/mcp instead of stdio. A non-loopback
    /// address needs --token-env.
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// The environment variable holding the bearer token HTTP clients must send.
    #[arg(long, value_name = "VAR")]
    token_env: Option<String>,
    /// Wall-clock limit of one `run` call with --agent, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    timeout: u64,
    /// Memory cap for the agent's linear memory, in MiB: 16 to 4096.
    #[arg(long, value_name = "MIB", default_value_t = 256, value_parser = clap::value_parser!(u64).range(16..=4096))]
    memory: u64,
    #[command(flatten)]
    pub(super) grant: grant::GrantArgs,
    #[command(flatten)]
    pub(super) search: web::SearchArgs,
    #[command(flatten)]
    pub(super) model: model::ModelArgs,
}

/// Runs `nexo mcp …`. `origin` is the registry reference (at its digest)
/// the served plugin was pulled as.
pub async fn command(command: &McpCommand, engine: &Engine, origin: Option<&PluginReference>) -> ExitCode {
    let McpCommand::Serve(args) = command;
    let token = match http_token(args) {
        Ok(t) => t,
        Err(why) => {
            errln!("error: {why}");
            return ExitCode::from(2);
        }
    };
    let file = match nexo::config::read(args.grant.config_path()) {
        Ok(f) => f,
        Err(e) => return report::config_failure(&e),
    };
    let recorded = match (args.grant.resolve(&file), args.model.merged(&file.model)) {
        (Ok(grant), Ok(model_table)) => nexo::runs::RunSpec {
            grant,
            model: model_table.or_agent_loop(runs::loop_hint(&args.file)),
            search: args.search.merged(file.search.as_ref(), args.grant.config_path()),
            timeout_secs: args.timeout,
            memory_mib: args.memory,
            skills_path: std::path::absolute(&args.model.skills_path).unwrap_or(args.model.skills_path.clone()),
            progressive_skills: args.model.progressive_skills,
            skill_components: Vec::new(),
            hooks: Vec::new(),
            origin: None,
            agents: Default::default(),
            depth: 0,
        },
        (Err(e), _) | (_, Err(e)) => return report::config_failure(&e),
    };
    let mut recorded = recorded;
    recorded.skill_components =
        match args.model.recorded_skill_components(engine, &file, args.grant.config_path()).await {
            Ok(files) => files,
            Err(e) => return report::fail(&e),
        };
    recorded.hooks = match args.grant.recorded_hooks(engine, &file).await {
        Ok(files) => files,
        Err(e) => return report::fail(&e),
    };
    // Events go to stderr: stdout may be the protocol.
    let progress = Arc::new(progress::Progress::new(false));
    let options = match runs::options(engine, &recorded, &progress).await {
        Ok(o) => o,
        Err(code) => return code,
    };
    let server = match server(engine, args, &options, origin).await {
        Ok(s) => s,
        Err(code) => {
            nexo::runs::prepare::close(&options).await;
            return code;
        }
    };
    let served = match args.http {
        None => server.serve_stdio().await,
        Some(addr) => match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => {
                let bound = listener.local_addr().map(|a| a.to_string()).unwrap_or_else(|_| addr.to_string());
                errln!("serving MCP at http://{bound}/mcp");
                server.serve_http(listener, token).await
            }
            Err(e) => Err(format!("cannot listen on {addr}: {e}")),
        },
    };
    progress.finish();
    nexo::runs::prepare::close(&options).await;
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            errln!("error: {why}");
            ExitCode::from(1)
        }
    }
}

/// The HTTP bearer token, if the server needs one: a non-loopback address
/// is never served without one.
fn http_token(args: &ServeArgs) -> Result<Option<String>, String> {
    let token = match &args.token_env {
        None => None,
        Some(var) => match std::env::var(var) {
            Ok(t) if !t.trim().is_empty() => Some(t.trim().to_string()),
            _ => return Err(format!("--token-env {var}: the variable is not set or empty")),
        },
    };
    match args.http {
        None if token.is_some() => Err("--token-env applies to --http only: stdio needs no token".into()),
        Some(addr) if !addr.ip().is_loopback() && token.is_none() => Err(format!(
            "--http {addr} is reachable from other machines: give --token-env VAR so clients must send \
             `Authorization: Bearer $VAR`, or serve on a loopback address such as 127.0.0.1"
        )),
        _ => Ok(token),
    }
}

/// The MCP server for the agent in `args.file`, once the operator's
/// acceptance of its version passes (as for `nexo run`).
async fn server(
    engine: &Engine,
    args: &ServeArgs,
    options: &nexo::settings::RunOptions,
    origin: Option<&PluginReference>,
) -> Result<McpServer, ExitCode> {
    let toml = args.file.extension().is_some_and(|e| e == "toml");
    if toml {
        let agent = AgentFile::load(&args.file).map_err(|e| report::fail(&e.into()))?;
        super::plugins::check_run(agent.manifest(), agent.sha256(), &args.file, origin, args.accept_authority, false)?;
        if args.agent {
            let (agent, options) = (Arc::new(agent), Arc::new(options.clone()));
            let m = agent.manifest().clone();
            let run: AgentRun = Arc::new(move |input| {
                let (agent, options) = (agent.clone(), options.clone());
                Box::pin(async move { agent.run(&input, &options).await.map(|o| o.text).map_err(|e| e.to_string()) })
            });
            return Ok(McpServer::agent(m.name, m.description, run));
        }
        return tools(agent.manifest(), engine, options).await;
    }
    let plugin = Plugin::load(engine, &args.file).await.map_err(|e| report::fail(&e.into()))?;
    let agent = plugin.agent().map_err(|e| report::fail(&e.into()))?.clone();
    super::plugins::check_run(agent.manifest(), plugin.sha256(), &args.file, origin, args.accept_authority, false)?;
    if args.agent {
        let m = agent.manifest().clone();
        let options = Arc::new(options.clone());
        let run: AgentRun = Arc::new(move |input| {
            let (agent, options) = (agent.clone(), options.clone());
            Box::pin(async move { agent.run(&input, &options).await.map(|o| o.answer).map_err(|e| e.to_string()) })
        });
        return Ok(McpServer::agent(m.name, m.description, run));
    }
    tools(agent.manifest(), engine, options).await
}

async fn tools(
    manifest: &nexo::manifest::AgentManifest,
    engine: &Engine,
    options: &nexo::settings::RunOptions,
) -> Result<McpServer, ExitCode> {
    let prepared =
        nexo::world::agent::prepare(manifest, options, &[], engine.limits()).await.map_err(|e| report::fail(&e))?;
    Ok(McpServer::tools(prepared.tools))
}
