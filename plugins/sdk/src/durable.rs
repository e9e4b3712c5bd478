//! Durable workflows: checkpoints, parallel host steps, and suspension.
//!
//! A recorded run (every `nexo run` without `--ephemeral`) journals its host
//! calls; a resume replays them, so nothing already paid for runs again.
//! These one-liners add named results, parallel steps and pauses:
//!
//! ```ignore
//! use nexo_sdk::agent::durable::{checkpoint, resume_input, suspend};
//!
//! let draft = checkpoint("draft", || Ok(json_string(&prompt("Draft it")?.text)))?;
//! if !resume_input().is_some_and(|i| i.contains("\"approved\":true")) {
//!     suspend("awaiting approval")?; // returns when an operator resumes the run
//! }
//! ```
//!
//! Values are JSON text; [`json_string`] and [`from_json_string`] handle the
//! common case of plain text.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::agent::bindings::nexo::plugin::durable as wit;
pub use crate::agent::bindings::nexo::plugin::durable::{
    ChildOutcome, DurableError, GrantNarrowing, Step, StepAction, StepFailure, ToolInvocation,
};
use crate::agent::RunError;

impl From<DurableError> for RunError {
    fn from(e: DurableError) -> Self {
        RunError::Failed(match e {
            DurableError::ReservedName(m) => format!("reserved name: {m}"),
            DurableError::InsideCheckpoint(m) => format!("inside a checkpoint: {m}"),
            DurableError::NotDurable(m) => format!("not durable: {m}"),
            DurableError::Invalid(m) => format!("invalid: {m}"),
            DurableError::StepFailed(s) => format!("step `{}` failed: {}", s.name, s.message),
        })
    }
}

/// Runs `work` once per run and stores its JSON value under `name`; when
/// the run already stored it, returns the stored value without running
/// `work`.
pub fn checkpoint(name: &str, work: impl FnOnce() -> Result<String, RunError>) -> Result<String, RunError> {
    if let Some(stored) = wit::checkpoint_begin(name)? {
        return Ok(stored);
    }
    let value = work()?;
    wit::checkpoint_end(name, &value)?;
    Ok(value)
}

/// A step that runs one prompt; its value is the answer as a JSON string.
pub fn prompt_step(name: &str, input: &str) -> Step {
    Step { name: name.to_string(), action: StepAction::Prompt(input.to_string()) }
}

/// A step that calls one tool (`read_file`, `fetch`, …) with JSON
/// arguments; its value is the tool's output as a JSON string.
pub fn tool_step(name: &str, tool: &str, arguments: &str) -> Step {
    let invocation = ToolInvocation { name: tool.to_string(), arguments: arguments.to_string() };
    Step { name: name.to_string(), action: StepAction::Tool(invocation) }
}

/// Runs independent host steps concurrently; each is stored as it
/// completes, and a resume runs only the missing ones. Returns each
/// step's JSON value by name.
pub fn checkpoint_all(steps: &[Step]) -> Result<BTreeMap<String, String>, RunError> {
    Ok(wit::checkpoint_all(steps)?.into_iter().collect())
}

/// Pauses the run (it ends `suspended`). The call returns when an operator
/// resumes the run; [`resume_input`] then has what they passed.
pub fn suspend(reason: &str) -> Result<(), RunError> {
    Ok(wit::suspend(reason, None)?)
}

/// [`suspend`] with a key for the application that resumes the run.
pub fn suspend_with_key(reason: &str, resume_key: &str) -> Result<(), RunError> {
    Ok(wit::suspend(reason, Some(resume_key))?)
}

/// Sleeps for `duration`, durably: a recorded run is suspended until then,
/// holding no instance and no process, and any worker or `nexo serve` node
/// wakes it when due; a replay returns at once. An operator's resume ends
/// it early. Without a store (`--ephemeral`) it waits in place. Refused
/// inside a checkpoint.
pub fn sleep(duration: std::time::Duration) -> Result<(), RunError> {
    Ok(wit::sleep(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))?)
}

/// [`sleep`] until `at`; a time not in the future returns at once.
pub fn sleep_until(at: std::time::SystemTime) -> Result<(), RunError> {
    let ms = at.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
    Ok(wit::sleep_until(u64::try_from(ms).unwrap_or(u64::MAX))?)
}

/// Waits for the signal `name` (`nexo runs signal RUN NAME --data JSON`,
/// or `POST /v1/runs/{id}/signals/{name}`) and returns its data, JSON
/// text; `None` once `timeout` passed without one (`None` waits for as long
/// as it takes). One sent before the wait is kept for it; signals of one
/// name are taken one per wait, in the order sent. A recorded run is
/// suspended while it waits, holding no instance and no process; a replay
/// returns what the first wait returned. Refused inside a checkpoint and
/// without a store (`--ephemeral`).
pub fn wait_signal(name: &str, timeout: Option<std::time::Duration>) -> Result<Option<String>, RunError> {
    let timeout = timeout.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX));
    Ok(wit::wait_signal(name, timeout)?)
}

/// Runs the agent the operator made available as `agent` on `input` as a
/// child run and waits for it to end: `done` with its answer, `failed` or
/// `cancelled` with why. The child's grant is this run's effective grant,
/// narrowed by `narrowing` ([`GrantNarrowing::default`] keeps it; a wider
/// one is refused). A recorded run is suspended while the child runs,
/// holding no instance and no process; the child's end wakes it, and a
/// replay returns the same outcome. Refused inside a checkpoint and
/// without a store (`--ephemeral`).
pub fn run_agent(agent: &str, input: &str, narrowing: &GrantNarrowing) -> Result<ChildOutcome, RunError> {
    Ok(wit::run_agent(agent, input, narrowing)?)
}

impl Default for GrantNarrowing {
    /// Keeps the parent's effective grant.
    fn default() -> Self {
        GrantNarrowing { allow: None, mode: None, fetch_hosts: None }
    }
}

/// The JSON given at the latest resume; `None` before the first.
pub fn resume_input() -> Option<String> {
    wit::resume_input()
}

/// `text` as a JSON string value.
pub fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The text of a JSON string value, or `None` if `json` is not one.
pub fn from_json_string(json: &str) -> Option<String> {
    let inner = json.trim().strip_prefix('"')?.strip_suffix('"')?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'b' => out.push('\u{8}'),
            'f' => out.push('\u{c}'),
            'u' => {
                let hex: String = chars.by_ref().take(4).collect();
                out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
            }
            other => out.push(other),
        }
    }
    Some(out)
}

/// The steps' names, in order, for messages.
pub fn names(steps: &[Step]) -> Vec<&str> {
    steps.iter().map(|s| s.name.as_str()).collect()
}
