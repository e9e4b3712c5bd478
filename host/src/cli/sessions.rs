//! `nexo sessions`: list, show and delete sessions, and enforce retention.
//!
//! Retention is a period of idleness: a session not prompted for longer is
//! deleted with its thread, runs, events and journal. It is set by
//! `--retain` or the config file's `[sessions] retain`, and enforced by a
//! sweep that `nexo chat` and `nexo worker` run (the worker every few
//! minutes) and `nexo sessions sweep` runs on demand. A session with a
//! prompt still queued, running or suspended is kept whatever its age.

use std::process::ExitCode;
use std::time::Duration;

use clap::Subcommand;
use nexo::ConfigError;
use nexo_store::{RunStatus, Session, Store, StoreError};

use super::runs::{StoreArgs, store_error};
use super::{report, runs, timeline};

/// `nexo sessions …`.
#[derive(Subcommand, Debug)]
pub enum SessionsCommand {
    /// List sessions, most recently used first.
    List {
        /// Only this agent's sessions.
        #[arg(long, value_name = "NAME")]
        agent: Option<String>,
        /// The most sessions to show.
        #[arg(long, value_name = "N", default_value_t = 50)]
        limit: usize,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Show a session: its address, its prompts (runs) and its thread.
    Show {
        /// The session: its id (`s…`), or AGENT/INSTANCE.
        session: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Delete sessions with their threads, runs, events and journals.
    Delete {
        /// The sessions: ids (`s…`), or AGENT/INSTANCE.
        #[arg(required = true)]
        sessions: Vec<String>,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Delete the sessions idle longer than the retention period, now.
    Sweep {
        /// The period, such as 30d or 12h [default: the config file's `[sessions] retain`].
        #[arg(long, value_name = "PERIOD", value_parser = nexo::session::parse_retention)]
        retain: Option<Duration>,
        #[command(flatten)]
        store: StoreArgs,
    },
}

/// The retention period: the flag, else the config file's, else none.
pub fn retention(flag: Option<Duration>, file: &nexo::config::ConfigFile) -> Result<Option<Duration>, ConfigError> {
    if flag.is_some() {
        return Ok(flag);
    }
    match &file.sessions.retain {
        None => Ok(None),
        Some(text) => {
            nexo::session::parse_retention(text).map(Some).map_err(|why| ConfigError::invalid("[sessions] retain", why))
        }
    }
}

/// `nexo sessions …`.
pub async fn command(command: &SessionsCommand, store_flag: Option<&str>) -> ExitCode {
    let store_args = match command {
        SessionsCommand::List { store, .. }
        | SessionsCommand::Show { store, .. }
        | SessionsCommand::Delete { store, .. }
        | SessionsCommand::Sweep { store, .. } => store,
    };
    let file = match nexo::config::read(store_args.config()) {
        Ok(f) => f,
        Err(e) => return report::config_failure(&e),
    };
    let store = match runs::open(store_flag, &file).await {
        Ok(s) => s,
        Err(code) => return code,
    };
    match command {
        SessionsCommand::List { agent, limit, json, .. } => list(&*store, agent.as_deref(), *limit, *json).await,
        SessionsCommand::Show { session, json, .. } => show(&*store, session, *json).await,
        SessionsCommand::Delete { sessions, .. } => delete(&*store, sessions).await,
        SessionsCommand::Sweep { retain, .. } => {
            let retain = match retention(*retain, &file) {
                Ok(Some(r)) => r,
                Ok(None) => {
                    errln!("error: no retention period: pass --retain PERIOD (such as 30d) or set `[sessions] retain`");
                    return ExitCode::from(2);
                }
                Err(e) => return report::config_failure(&e),
            };
            match nexo::runs::worker::sweep_sessions(&*store, Some(retain)).await {
                Some(ids) => {
                    for id in &ids {
                        outln!("{id}");
                    }
                    errln!(
                        "deleted {} session(s) idle for more than {}",
                        ids.len(),
                        humantime::format_duration(retain)
                    );
                    ExitCode::SUCCESS
                }
                None => ExitCode::from(1),
            }
        }
    }
}

/// Finds a session by id, or by `AGENT/INSTANCE`.
async fn find(store: &dyn Store, name: &str) -> Result<Session, StoreError> {
    let found = match store.session_by_id(name).await? {
        Some(s) => Some(s),
        None => match name.split_once('/') {
            Some((agent, instance)) => store.session(agent, instance).await?,
            None => None,
        },
    };
    found.ok_or_else(|| StoreError::NoSession(name.to_string()))
}

async fn list(store: &dyn Store, agent: Option<&str>, limit: usize, json: bool) -> ExitCode {
    let sessions = match store.sessions(agent, limit).await {
        Ok(s) => s,
        Err(e) => return store_error(&e),
    };
    if json {
        nexo::terminal::print_json(&serde_json::to_value(&sessions).unwrap_or_default());
        return ExitCode::SUCCESS;
    }
    if sessions.is_empty() {
        errln!("no sessions in {}", store.location());
    }
    for s in &sessions {
        outln!(
            "{}  {:<20}  {:<24}  {:>5} msgs  {}",
            s.id,
            s.agent,
            s.instance,
            s.messages,
            timeline::time(s.updated_ms)
        );
    }
    ExitCode::SUCCESS
}

async fn show(store: &dyn Store, name: &str, json: bool) -> ExitCode {
    let session = match find(store, name).await {
        Ok(s) => s,
        Err(e) => return store_error(&e),
    };
    let (prompts, thread) = match (store.session_runs(&session.id).await, store.thread(&session.id).await) {
        (Ok(r), Ok(t)) => (r, t),
        (Err(e), _) | (_, Err(e)) => return store_error(&e),
    };
    if json {
        let value = serde_json::json!({ "session": session, "runs": prompts, "thread": thread });
        nexo::terminal::print_json(&value);
        return ExitCode::SUCCESS;
    }
    outln!("session:   {}", session.id);
    outln!("agent:     {}", session.agent);
    outln!("instance:  {}", session.instance);
    outln!("created:   {}", timeline::time(session.created_ms));
    outln!("updated:   {}", timeline::time(session.updated_ms));
    outln!("prompts:   {}", prompts.len());
    for r in &prompts {
        outln!("  {}  {:<9}  {}", r.id, r.status.as_str(), nexo::truncate::first_line(&r.input, 80));
    }
    outln!("thread:    {} message(s)", thread.len());
    for message in &thread {
        let role = message.get("role").and_then(|r| r.as_str()).unwrap_or("?");
        let text = match role {
            "tool_result" => format!(
                "{}: {}",
                message.get("name").and_then(|n| n.as_str()).unwrap_or("?"),
                message.get("content").and_then(|c| c.as_str()).unwrap_or_default()
            ),
            _ => {
                let said = message.get("text").and_then(|t| t.as_str()).unwrap_or_default().to_string();
                let calls = message.get("tool_calls").and_then(|c| c.as_array()).map_or(0, Vec::len);
                if calls > 0 { format!("{said} [{calls} tool call(s)]") } else { said }
            }
        };
        outln!("  {role:<11}  {}", nexo::truncate::first_line(&text, 100));
    }
    ExitCode::SUCCESS
}

async fn delete(store: &dyn Store, names: &[String]) -> ExitCode {
    let mut code = ExitCode::SUCCESS;
    for name in names {
        let session = match find(store, name).await {
            Ok(s) => s,
            Err(e) => {
                code = store_error(&e);
                continue;
            }
        };
        let prompts = match store.session_runs(&session.id).await {
            Ok(r) => r,
            Err(e) => {
                code = store_error(&e);
                continue;
            }
        };
        // Deleting under a live prompt would pull its record from under it.
        if let Some(run) = prompts.iter().find(|r| r.status == RunStatus::Running) {
            errln!(
                "error: session {} has a prompt running (run {}); wait for it, or cancel it first (`nexo runs cancel {}`)",
                session.id,
                run.id,
                run.id
            );
            code = ExitCode::from(2);
            continue;
        }
        match store.delete_session(&session.id).await {
            Ok(true) => errln!(
                "deleted session {} ({}/{}): {} message(s), {} run(s) with their events and journals",
                session.id,
                session.agent,
                session.instance,
                session.messages,
                prompts.len()
            ),
            Ok(false) => {
                code = store_error(&StoreError::NoSession(session.id.clone()));
            }
            Err(e) => code = store_error(&e),
        }
    }
    code
}
