//! Sessions: a remembering instance of an agent, addressed by
//! `(agent name, instance id)`.
//!
//! A session adds memory and an address, never authority. Each prompt of a
//! session is a recorded run (journaled, resumable, recoverable like any
//! other) with the grant of the command that sends it; the session itself
//! keeps only its thread. At the start of a run the thread is loaded into a
//! [`Thread`]; every prompt of the run sees it after the instructions and
//! adds its exchange to it; when the run ends `done`, what it added lands in
//! the store with the run's end, in one transaction ([`Thread::append`]).
//! The instructions are never stored: they are applied afresh to every
//! request, so a thread holds no system message however often it resumes.
//! Tools, skills and MCP servers come from the run's options each time.

use std::sync::atomic::{AtomicBool, Ordering};

use nexo_store::StoreError;

use crate::error::RunError;
use crate::runs::{RunEnd, RunSpec, Runs, Subject};
use crate::settings::RunOptions;

pub use crate::thread;

pub use crate::thread::Thread;

/// An open session: its address, and what its prompts share until it is
/// closed (the run options, with their MCP connections and sandbox).
///
/// ```no_run
/// # async fn demo(runs: nexo::runs::Runs, agent: nexo::agent_file::AgentFile, options: nexo::settings::RunOptions)
/// # -> anyhow::Result<()> {
/// use nexo::runs::{RunSpec, Subject};
/// use nexo::session::OpenSession;
///
/// let session = OpenSession::resume(runs, "assistant", "user-42", options, RunSpec::default()).await?;
/// let end = session.prompt(Subject::File(&agent), "My name is Mac.").await?;
/// println!("{:?}", end.run.result);
/// session.close().await;
/// # Ok(()) }
/// ```
pub struct OpenSession {
    runs: Runs,
    record: nexo_store::Session,
    options: RunOptions,
    spec: RunSpec,
    closed: AtomicBool,
}

impl OpenSession {
    /// Finds or creates the session `(agent, instance)` in the store of
    /// `runs`. Its prompts run with `options` and record `spec` (the
    /// operator's grant and settings: never a secret): the authority of whoever
    /// resumes it now, never of earlier prompts.
    pub async fn resume(
        runs: Runs,
        agent: &str,
        instance: &str,
        options: RunOptions,
        spec: RunSpec,
    ) -> Result<OpenSession, StoreError> {
        check_instance(instance).map_err(|why| StoreError::Conflict(format!("instance id `{instance}` {why}")))?;
        let record = runs.store().open_session(agent, instance, nexo_store::now_ms()).await?;
        Ok(OpenSession::new(runs, record, options, spec))
    }

    /// [`OpenSession::resume`] of a session already opened in the store of
    /// `runs` (`record`, from [`nexo_store::Sessions::open_session`]).
    pub fn new(runs: Runs, record: nexo_store::Session, options: RunOptions, spec: RunSpec) -> OpenSession {
        OpenSession { runs, record, options, spec, closed: AtomicBool::new(false) }
    }

    /// The session as the store held it when it was opened.
    pub fn record(&self) -> &nexo_store::Session {
        &self.record
    }

    /// The options its prompts run with.
    pub fn options(&self) -> &RunOptions {
        &self.options
    }

    /// Sends one prompt: a recorded run that continues the thread. The
    /// subject must be the session's agent.
    pub async fn prompt(&self, subject: Subject<'_>, input: &str) -> Result<RunEnd, RunError> {
        self.prompt_with(subject, input, &self.options).await
    }

    /// [`OpenSession::prompt`] with other options for this prompt (its own
    /// event sink, say); what they hold is still the caller's to close.
    pub async fn prompt_with(
        &self,
        subject: Subject<'_>,
        input: &str,
        options: &RunOptions,
    ) -> Result<RunEnd, RunError> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(RunError::Store(StoreError::Conflict(format!(
                "session `{}` was closed; resume it again to send another prompt",
                self.record.id
            ))));
        }
        if subject.name() != self.record.agent {
            return Err(RunError::Store(StoreError::Conflict(format!(
                "session `{}` belongs to agent `{}`, not `{}`",
                self.record.id,
                self.record.agent,
                subject.name()
            ))));
        }
        self.runs.start_in(Some(&self.record.id), subject, input, &self.spec, options).await
    }

    /// Releases what the session holds (its MCP connections and sandbox).
    /// Idempotent: only the first call closes anything.
    pub async fn close(&self) -> Result<(), String> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.options.close().await
    }
}

/// The longest instance id, in bytes.
pub const MAX_INSTANCE_BYTES: usize = 200;

/// Checks an instance id: 1 to [`MAX_INSTANCE_BYTES`] bytes with no control
/// characters (it is printed, and typed back).
pub fn check_instance(instance: &str) -> Result<(), String> {
    if instance.trim().is_empty() {
        return Err("is empty: give an instance id such as `user-42`".into());
    }
    if instance.len() > MAX_INSTANCE_BYTES {
        return Err(format!("is {} bytes long; an instance id has at most {MAX_INSTANCE_BYTES}", instance.len()));
    }
    if instance.chars().any(char::is_control) {
        return Err("holds a control character; an instance id is printable text".into());
    }
    Ok(())
}

/// Parses a retention period such as `30d`, `12h` or `90m` (any
/// `humantime` duration of at least a minute).
pub fn parse_retention(text: &str) -> Result<std::time::Duration, String> {
    let period = humantime::parse_duration(text.trim())
        .map_err(|e| format!("`{text}` is not a retention period ({e}): use a duration such as 30d, 12h or 90m"))?;
    if period < std::time::Duration::from_secs(60) {
        return Err(format!("`{text}` is shorter than a minute: a retention period is at least 1m"));
    }
    Ok(period)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_periods_are_durations_of_a_minute_or_more() {
        assert_eq!(parse_retention("30d"), Ok(std::time::Duration::from_secs(30 * 86_400)));
        assert!(parse_retention("10s").unwrap_err().contains("at least 1m"));
        assert!(parse_retention("soon").unwrap_err().contains("30d"));
    }
}
