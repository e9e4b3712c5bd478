//! `nexo chat`: prompts to a session, a remembering instance of an agent
//! addressed by the agent's name and an instance id.
//!
//! Each prompt is a recorded run that continues the session's thread (see
//! [`nexo::session`]). The grant is this command's, whatever earlier
//! prompts had: a session remembers, it never authorizes. The MCP servers
//! and the sandbox this command starts serve every prompt it sends and end
//! with it.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use nexo::runs::Runs;
use nexo::session::OpenSession;
use nexo::{Engine, EngineConfig};
use nexo_store::{Claim, RunStatus, Session};

use super::runs::{Loaded, Narrow, StoreArgs};
use super::{grant, model, progress, report, runs, sessions, web};
use nexo::runs::RunSpec;

/// The flags of `nexo chat`.
#[derive(Args, Debug)]
pub struct ChatArgs {
    /// The agent: a `.wasm` component, or a declarative `.toml` manifest.
    pub file: PathBuf,
    /// The prompt. Without one: an interactive chat on a terminal, else one prompt per line of stdin.
    pub input: Option<String>,
    /// The session's instance id; with the agent's name it addresses the session [default: a new
    /// one, printed on stderr].
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Wall-clock limit for each prompt, in seconds: 1 or more.
    #[arg(long, value_name = "SECS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub timeout: u64,
    /// Memory cap for the agent's linear memory, in MiB: 16 to 4096.
    #[arg(long, value_name = "MIB", default_value_t = 256, value_parser = clap::value_parser!(u64).range(16..=4096))]
    pub memory: u64,
    /// Print events as JSON lines, then each outcome as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Queue the prompt for a worker (`nexo worker`) and print its run id, instead of running it here.
    #[arg(long, requires = "input")]
    pub later: bool,
    /// First delete the sessions idle longer than this, such as 30d or 12h [default: the config
    /// file's `[sessions] retain`, else keep them].
    #[arg(long, value_name = "PERIOD", value_parser = nexo::session::parse_retention)]
    pub retain: Option<Duration>,
    #[command(flatten)]
    pub grant: grant::GrantArgs,
    #[command(flatten)]
    pub search: web::SearchArgs,
    #[command(flatten)]
    pub model: model::ModelArgs,
}

/// Where `nexo chat` keeps what it records, and where its agent came from.
pub struct Place<'a> {
    /// The `--store` flag.
    pub store: Option<&'a str>,
    /// The operator's configuration.
    pub file: &'a nexo::config::ConfigFile,
    /// The registry reference the agent was pulled as, if it was.
    pub origin: Option<&'a nexo::registry::PluginReference>,
}

/// `nexo chat`.
pub async fn command(
    args: &ChatArgs,
    engine: &Engine,
    base: &EngineConfig,
    place: &Place<'_>,
    rec: &RunSpec,
) -> ExitCode {
    let (store_flag, file) = (place.store, place.file);
    // Loaded once, before anything is recorded: what acceptance checks is what runs.
    let loaded = match Loaded::load(engine, &args.file).await {
        Ok(l) => l,
        Err(code) => return code,
    };
    if let Err(code) =
        super::plugins::check_run(loaded.manifest(), loaded.sha256(), &args.file, place.origin, false, false)
    {
        return code;
    }
    let store = match runs::open(store_flag, file).await {
        Ok(s) => s,
        Err(code) => return code,
    };
    let retain = match sessions::retention(args.retain, file) {
        Ok(r) => r,
        Err(e) => return report::config_failure(&e),
    };
    nexo::runs::worker::sweep_sessions(&*store, retain).await;
    let fresh = args.session.is_none();
    let instance = args.session.clone().unwrap_or_else(|| nexo_store::new_session_id()[1..].to_lowercase());
    if let Err(why) = nexo::session::check_instance(&instance) {
        errln!("error: --session {why}");
        return ExitCode::from(2);
    }
    let session = match store.open_session(loaded.name(), &instance, nexo_store::now_ms()).await {
        Ok(s) => s,
        Err(e) => return runs::store_error(&e),
    };
    if fresh {
        errln!("session `{instance}` of `{}`: continue it with --session {instance}", loaded.name());
    }
    let runs = Runs::new(store.clone(), file.buffer_events);
    recover(&runs, base, &session, file).await;
    if args.later {
        let input = args.input.as_deref().unwrap_or_default();
        return match runs.queue_in(Some(&session.id), loaded.subject(), input, rec).await {
            Ok((run, job)) => {
                if args.json {
                    nexo::terminal::print_json(&serde_json::json!({
                        "run": run.id, "job": job.id, "session": session.id, "status": "queued",
                    }));
                } else {
                    outln!("{}", run.id);
                }
                errln!("queued prompt {} of session `{instance}` (job {}); `nexo worker` runs it", run.id, job.id);
                ExitCode::SUCCESS
            }
            Err(e) => runs::store_error(&e),
        };
    }
    let first = Arc::new(progress::Progress::new(args.json));
    let options = match runs::options(engine, rec, &first).await {
        Ok(o) => o,
        Err(code) => return code,
    };
    let open = OpenSession::new(runs.clone(), session, options, rec.clone());
    let chat = Chat { session: &open, runs: &runs, loaded: &loaded, json: args.json };
    let code = match &args.input {
        Some(input) => chat.prompt(input, first).await,
        None => chat.lines().await,
    };
    // This command started the MCP servers and the sandbox, so it ends them.
    if let Err(e) = open.close().await {
        errln!("warning: {e}");
    }
    code
}

/// One command's prompts to one session.
struct Chat<'a> {
    session: &'a OpenSession,
    /// The session's runs, as this process drives them: what Ctrl-C cancels.
    runs: &'a Runs,
    loaded: &'a Loaded,
    json: bool,
}

impl Chat<'_> {
    /// Sends one prompt, showing its events on `progress`; how it ended.
    /// Ctrl-C cancels the prompt's run, as it does `nexo run`'s; the session
    /// stays, and an interactive chat asks for the next prompt.
    async fn prompt(&self, input: &str, progress: Arc<progress::Progress>) -> ExitCode {
        let mut options = self.session.options().clone();
        options.context.events = Some(progress.clone());
        let pass = async {
            let end = self.session.prompt_with(self.loaded.subject(), input, &options).await;
            progress.finish();
            match end {
                Ok(end) => runs::report_end(&end, self.json),
                Err(e) => report::report_error(&e, self.json),
            }
        };
        runs::cancel_on_ctrl_c(self.runs, pass).await
    }

    /// Prompts from stdin, one per line, until end of input, `/exit` or
    /// Ctrl-C at the prompt: with a `you>` marker on a terminal.
    async fn lines(&self) -> ExitCode {
        let terminal = std::io::stdin().is_terminal();
        if terminal {
            errln!("chatting with `{}`; an empty line is skipped, /exit or Ctrl-D ends", self.loaded.name());
        }
        let mut code = ExitCode::SUCCESS;
        loop {
            if terminal {
                let mut err = std::io::stderr().lock();
                let _ = write!(err, "you> ");
                let _ = err.flush();
            }
            // Ctrl-C at the prompt ends the chat (during a prompt it cancels that prompt's run).
            let read = tokio::select! {
                read = tokio::task::spawn_blocking(read_line) => read.map_err(std::io::Error::other).flatten(),
                _ = tokio::signal::ctrl_c() => {
                    let instance = &self.session.record().instance;
                    errln!("\ninterrupted; `--session {instance}` goes on with this session");
                    return ExitCode::from(runs::INTERRUPTED);
                }
            };
            let line = match read {
                Ok(Some(line)) => line,
                Ok(None) => break,
                Err(e) => {
                    errln!("error: cannot read the prompt: {e}");
                    return ExitCode::from(2);
                }
            };
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            if line == "/exit" || line == "/quit" {
                break;
            }
            code = self.prompt(line, Arc::new(progress::Progress::new(self.json))).await;
        }
        code
    }
}

/// One line of stdin without its newline; `None` at end of input.
fn read_line() -> std::io::Result<Option<String>> {
    let mut line = String::new();
    match std::io::stdin().lock().read_line(&mut line)? {
        0 => Ok(None),
        _ => Ok(Some(line)),
    }
}

/// Recovers the session's prompt that a process left running when it died,
/// so the session can go on: it replays to where it was.
async fn recover(runs: &Runs, base: &EngineConfig, session: &Session, file: &nexo::config::ConfigFile) {
    let Ok(orphans) = runs.orphans().await else { return };
    let Ok(prompts) = runs.store().session_runs(&session.id).await else { return };
    for run in prompts.iter().filter(|r| r.status == RunStatus::Running) {
        if !orphans.iter().any(|o| o.id == run.id) {
            continue;
        }
        errln!("recovering prompt {} of this session, left running by a process that is gone", run.id);
        let narrow = Narrow::none(StoreArgs::default());
        let _ = runs::resume_run(runs, base, &run.id, Claim::Recover, None, &narrow, file).await;
    }
}
