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
use std::sync::{Arc, Mutex, MutexGuard};

use nexo_model::Message;
use nexo_store::{Store, StoreError, ThreadAppend};
use serde_json::Value;

use crate::error::RunError;
use crate::runs::{RunEnd, Runs, Subject};
use crate::settings::RunOptions;

/// An open session: its address, and what its prompts share until it is
/// closed (the run options, with their MCP connections and sandbox).
///
/// ```no_run
/// # async fn demo(runs: nexo::runs::Runs, agent: nexo::agent_file::AgentFile, options: nexo::settings::RunOptions)
/// # -> anyhow::Result<()> {
/// use nexo::runs::Subject;
/// use nexo::session::OpenSession;
///
/// let session = OpenSession::resume(runs, "assistant", "user-42", options, serde_json::json!({})).await?;
/// let end = session.prompt(Subject::File(&agent), "My name is Mac.").await?;
/// println!("{:?}", end.run.result);
/// session.close().await;
/// # Ok(()) }
/// ```
pub struct OpenSession {
    runs: Runs,
    record: nexo_store::Session,
    options: RunOptions,
    grant: Value,
    closed: AtomicBool,
}

impl OpenSession {
    /// Finds or creates the session `(agent, instance)` in the store of
    /// `runs`. Its prompts run with `options` and record `grant` (the
    /// operator's, as recorded: never a secret): the authority of whoever
    /// resumes it now, never of earlier prompts.
    pub async fn resume(
        runs: Runs,
        agent: &str,
        instance: &str,
        options: RunOptions,
        grant: Value,
    ) -> Result<OpenSession, StoreError> {
        check_instance(instance).map_err(|why| StoreError::Conflict(format!("instance id `{instance}` {why}")))?;
        let record = runs.store().open_session(agent, instance, nexo_store::now_ms()).await?;
        Ok(OpenSession::new(runs, record, options, grant))
    }

    /// [`OpenSession::resume`] of a session already opened in the store of
    /// `runs` (`record`, from [`Store::open_session`]).
    pub fn new(runs: Runs, record: nexo_store::Session, options: RunOptions, grant: Value) -> OpenSession {
        OpenSession { runs, record, options, grant, closed: AtomicBool::new(false) }
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
        self.runs.start_in(Some(&self.record.id), subject, input, self.grant.clone(), options).await
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

/// A session's thread as one run sees it: what the store held when the run
/// started, and what its prompts have added since.
#[derive(Debug)]
pub struct Thread {
    session: String,
    /// The thread as stored, shared with every request without a copy.
    stored: Arc<[Message]>,
    /// What this run's prompts added.
    added: Mutex<Vec<Message>>,
}

impl Thread {
    /// The thread of session `session`, holding `history`.
    pub fn new(session: impl Into<String>, history: Vec<Message>) -> Thread {
        Thread { session: session.into(), stored: history.into(), added: Mutex::new(Vec::new()) }
    }

    /// Loads session `id`'s thread from `store`. A stored message this
    /// build cannot read is [`StoreError::Corrupt`], naming it.
    pub async fn load(store: &dyn Store, id: &str) -> Result<Arc<Thread>, StoreError> {
        let stored = store.thread(id).await?;
        let mut history = Vec::with_capacity(stored.len());
        for (i, value) in stored.into_iter().enumerate() {
            let message = serde_json::from_value(value).map_err(|e| StoreError::Corrupt {
                location: store.location(),
                reason: format!("message {i} of session `{id}`'s thread cannot be read: {e}"),
            })?;
            history.push(message);
        }
        Ok(Arc::new(Thread::new(id, history)))
    }

    /// The session's id.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// The conversation so far: the stored thread, then this run's
    /// exchanges. Before the run added any, no message is copied.
    pub fn history(&self) -> Arc<[Message]> {
        let added = self.lock();
        if added.is_empty() {
            return self.stored.clone();
        }
        self.stored.iter().chain(added.iter()).cloned().collect()
    }

    /// How many messages the thread holds now.
    pub fn len(&self) -> usize {
        self.stored.len() + self.lock().len()
    }

    /// Whether the thread is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds a prompt's exchange from its `transcript`: everything after the
    /// instructions (a loop's transcript does not repeat the history).
    pub fn remember(&self, transcript: &[Message]) {
        let new = transcript.iter().skip_while(|m| matches!(m, Message::System { .. })).cloned();
        self.lock().extend(new);
    }

    /// What this run added, for the batch that ends it; `None` when it
    /// added nothing.
    pub fn append(&self) -> Option<ThreadAppend> {
        let added = self.lock();
        if added.is_empty() {
            return None;
        }
        Some(ThreadAppend {
            session: self.session.clone(),
            expected: self.stored.len() as u64,
            messages: added.iter().filter_map(|m| serde_json::to_value(m).ok()).collect(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Message>> {
        self.added.lock().unwrap_or_else(|p| p.into_inner())
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

    fn user(text: &str) -> Message {
        Message::User { text: text.into() }
    }

    fn answer(text: &str) -> Message {
        Message::Assistant { text: text.into(), tool_calls: Vec::new() }
    }

    #[test]
    fn a_prompt_adds_only_its_exchange_and_never_the_instructions() {
        let thread = Thread::new("s1", vec![user("hi"), answer("hello")]);
        let system = Message::System { text: "be brief".into() };
        thread.remember(&[system.clone(), user("again"), answer("yes")]);
        thread.remember(&[system, user("3"), answer("c")]);
        let append = thread.append().expect("two exchanges were added");
        assert_eq!(append.expected, 2);
        assert_eq!(append.messages.len(), 4);
        assert_eq!(append.messages[0]["role"], "user");
        assert!(thread.history().iter().all(|m| !matches!(m, Message::System { .. })));
    }

    #[test]
    fn a_run_that_added_nothing_appends_nothing() {
        assert!(Thread::new("s1", vec![user("hi")]).append().is_none());
    }

    #[test]
    fn retention_periods_are_durations_of_a_minute_or_more() {
        assert_eq!(parse_retention("30d"), Ok(std::time::Duration::from_secs(30 * 86_400)));
        assert!(parse_retention("10s").unwrap_err().contains("at least 1m"));
        assert!(parse_retention("soon").unwrap_err().contains("30d"));
    }
}
