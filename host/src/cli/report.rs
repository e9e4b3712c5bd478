//! How a command ends: errors printed, and the exit code that says what
//! kind of failure it was.

use std::process::ExitCode;

use nexo::{ConfigError, RunError};

pub fn config_failure(e: &ConfigError) -> ExitCode {
    errln!("error: {e}");
    ExitCode::from(2)
}

/// Whether `file` names a declarative agent rather than a component.
pub fn is_toml(file: &std::path::Path) -> bool {
    nexo::agent_file::is_toml(file)
}

/// Prints an error that ended a run before it produced an outcome.
pub fn report_error(e: &RunError, json: bool) -> ExitCode {
    if json {
        nexo::terminal::print_json(&serde_json::json!({ "status": "error", "error": e.to_string() }));
    }
    fail(e)
}

/// 1 when the plugin ran and failed; 2 when nothing could run.
pub fn exit_code(e: &RunError) -> ExitCode {
    match e {
        RunError::Trap { .. }
        | RunError::Deadline { .. }
        | RunError::MemoryLimit { .. }
        | RunError::SharedMemoryLimit { .. }
        | RunError::CpuQuota { .. }
        | RunError::AgentFailed { .. }
        | RunError::SearchFailed { .. }
        | RunError::Instantiate { .. } => ExitCode::from(1),
        RunError::Skill { .. } | RunError::Load(_) | RunError::Config(_) | RunError::Store(_) => ExitCode::from(2),
    }
}

pub fn fail(e: &RunError) -> ExitCode {
    errln!("error: {e}");
    // The library names the setting; the command line's is a flag.
    if let Some(mib) = e.memory_needed_mib() {
        errln!("hint: raise `--memory` to at least {mib}");
    } else if matches!(e, RunError::MemoryLimit { .. }) {
        errln!("hint: raise `--memory` if it needs more");
    } else if matches!(e, RunError::Deadline { .. }) {
        errln!("hint: raise `--timeout` if the work is legitimate");
    }
    exit_code(e)
}

/// What the CLI says when the turn cap or the token budget cut a prompt
/// short, given the answer it printed (which may be empty).
pub fn cut_short(status: &nexo::agent_loop::Status, answer: &str) -> String {
    let why = match status {
        nexo::agent_loop::Status::TokenBudget => "token budget used up",
        _ => "turn limit reached",
    };
    if answer.trim().is_empty() {
        format!("stopped: {why} before the model gave any answer (raise --max-turns or --token-budget)")
    } else {
        format!("stopped: {why}; the answer above is partial")
    }
}

/// Installs the telemetry the config file and the `OTEL_*` variables ask
/// for, or prints why it cannot be: a receiver the operator named must work.
pub fn telemetry(file: &nexo::config::ConfigFile) -> Result<nexo::telemetry::Telemetry, ExitCode> {
    nexo::telemetry::Telemetry::install(&file.telemetry).map_err(|e| {
        errln!("error: {e}");
        ExitCode::from(2)
    })
}

/// Runs `work` with telemetry installed ([`telemetry`]), and shuts it down
/// after, sending what is buffered.
pub async fn with_telemetry(file: &nexo::config::ConfigFile, work: impl Future<Output = ExitCode>) -> ExitCode {
    let telemetry = match telemetry(file) {
        Ok(t) => t,
        Err(code) => return code,
    };
    let code = work.await;
    telemetry.shutdown().await;
    code
}
