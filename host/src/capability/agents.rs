//! The agents unit: other agents offered to the model as tools, one
//! `agent__NAME` tool each, for the agents the agent's manifest asks for
//! (`agents`) that the operator made available to the run (`[agents]`, a
//! served run's `agents`). Asking grants nothing, and a run that cannot
//! start children (one without the run lifecycle) or whose loop's turns
//! are not replayed (the claude-code CLI) is offered none.
//!
//! A call runs the agent as a child run, as a workflow's `run-agent` does
//! (the same two steps on the one path: the child's record with the
//! parent's effective grant, then the wait for its end), so the parent is
//! suspended while the child runs and a later pass replays the prompt up
//! to the call, which then answers with the child's outcome.

use nexo_model::{BoxFuture, ToolCall, ToolSpec};
use serde_json::{Value, json};

use super::durable::{StartChild, can_wait_for_child, outcome, wait_for_child};
use crate::bindings::agent::nexo::plugin::durable as wit;
use crate::error::ToolError;
use crate::host_call::{DynTool, HostCall, MaybeTool, ModelReply, ToolContext, model_call, string_arg};
use crate::manifest::interface::DURABLE;
use crate::truncate::{Truncation, truncate};
use crate::unit::{Setup, Step, Unit};

pub use crate::children::TOOL_PREFIX;

/// The agents unit.
#[derive(Debug, Default, Clone, Copy)]
pub struct AgentsUnit;

/// The agents offered to the model in this run, by name.
#[derive(Debug, Default)]
struct Offered(Vec<String>);

impl Unit for AgentsUnit {
    fn name(&self) -> &'static str {
        "agents"
    }

    fn tools(&self) -> &'static [&'static dyn DynTool] {
        &[&AgentTools]
    }

    fn prepare<'a>(&'a self, setup: &'a mut Setup<'_>) -> Step<'a> {
        // A loop whose turns the journal does not replay (the claude-code
        // CLI) would ask its model again after the wait: it is offered none.
        let replayable = setup.options.providers.agent_loop.as_ref().is_none_or(|l| l.turns_through_provider());
        let available = match &setup.options.context.children {
            Some(children) if replayable => children.agents(),
            _ => &[],
        };
        let mut offered: Vec<String> =
            setup.manifest.agents.iter().filter(|a| available.contains(a)).cloned().collect();
        offered.sort();
        offered.dedup();
        setup.state.insert(Offered(offered));
        Step::ready(Ok(()))
    }
}

/// The model's view of the offered agents, as one family of tools.
#[derive(Debug, Clone, Copy)]
pub struct AgentTools;

impl AgentTools {
    /// The agents offered now: none where no child could be waited for
    /// (inside a checkpoint, in a pass that journals nothing). Which it is
    /// follows from the component's calls, so a replay offers the same.
    fn offered(cx: &ToolContext) -> &[String] {
        match cx.state::<Offered>() {
            Ok(offered) if can_wait_for_child(cx) => &offered.0,
            _ => &[],
        }
    }

    fn route(cx: &ToolContext, name: &str) -> Option<String> {
        let agent = name.strip_prefix(TOOL_PREFIX)?;
        Self::offered(cx).iter().find(|a| *a == agent).cloned()
    }
}

impl DynTool for AgentTools {
    fn model_name(&self) -> &'static str {
        "agent__*"
    }

    fn offered(&self, cx: &ToolContext) -> bool {
        !Self::offered(cx).is_empty()
    }

    fn spec(&self, _cx: &ToolContext) -> ToolSpec {
        ToolSpec { name: "agent__*".into(), description: String::new(), parameters: json!({"type": "object"}) }
    }

    fn specs<'a>(&'a self, cx: &'a ToolContext) -> BoxFuture<'a, Vec<ToolSpec>> {
        let specs = Self::offered(cx).iter().map(|agent| spec(agent)).collect();
        Box::pin(std::future::ready(specs))
    }

    fn serves(&self, cx: &ToolContext, name: &str) -> bool {
        Self::route(cx, name).is_some()
    }

    fn names(&self, cx: &ToolContext) -> Vec<String> {
        Self::offered(cx).iter().map(|a| format!("{TOOL_PREFIX}{a}")).collect()
    }

    fn call_model<'a>(&'a self, cx: &'a ToolContext, turn: u32, call: &'a ToolCall) -> BoxFuture<'a, ModelReply> {
        Box::pin(async move {
            let agent = Self::route(cx, &call.name).unwrap_or_default();
            model_call(cx, &CallAgent { agent }, turn, call).await
        })
    }
}

/// The tool the model sees for `agent`.
fn spec(agent: &str) -> ToolSpec {
    ToolSpec {
        name: format!("{TOOL_PREFIX}{agent}"),
        description: format!(
            "Hand a task to the agent `{agent}` and wait for its answer. It runs as a run of its own, with no more \
             authority than this one."
        ),
        parameters: json!({
            "type": "object",
            "properties": {"input": {"type": "string", "description": "The task, as the agent's input"}},
            "required": ["input"],
            "additionalProperties": false
        }),
    }
}

/// The status of a call whose run suspended to wait for its child.
const WAITING: &str = "waiting";

/// How a child run the model started ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChildEnd {
    /// The child run's id.
    pub run: String,
    /// `done`, `failed` or `cancelled` (`waiting` while the run is
    /// suspended for it, which is never journaled).
    pub status: String,
    /// Its answer, or why it did not finish; truncated.
    pub text: String,
}

/// The model's `agent__NAME` call: one child run of `agent`, and the wait
/// for its end.
#[derive(Debug, Clone)]
pub struct CallAgent {
    /// The name the operator made the agent available as.
    pub agent: String,
}

impl HostCall for CallAgent {
    /// The child's input.
    type Args = String;
    type Output = ChildEnd;
    type Error = ToolError;

    fn name(&self) -> &'static str {
        "call-agent"
    }

    fn interface(&self) -> &'static str {
        DURABLE
    }

    fn journal_arguments(&self, arguments: Value) -> Value {
        json!({"agent": self.agent, "arguments": arguments})
    }

    fn spans_calls(&self) -> bool {
        true
    }

    fn detail<'a>(&self, input: &'a String) -> std::borrow::Cow<'a, str> {
        std::borrow::Cow::Borrowed(input)
    }

    fn arg_bytes(&self, input: &String) -> usize {
        input.len()
    }

    /// Committed with the next write: its steps are calls of their own,
    /// and the child it names is written with the suspension.
    fn effect(&self) -> crate::journal::Effect {
        crate::journal::Effect::Read
    }

    fn execute<'a>(&'a self, cx: &'a ToolContext, input: String) -> BoxFuture<'a, Result<ChildEnd, ToolError>> {
        Box::pin(async move {
            // The parent's effective grant, not narrowed: the model cannot
            // ask for more, and the operator's grant of the agent is all.
            let narrowing = wit::GrantNarrowing { allow: None, mode: None, fetch_hosts: None };
            let run = cx.call(&StartChild, (self.agent.clone(), input, narrowing)).await.map_err(tool_error)?;
            let taken = match wait_for_child(cx, &run).await {
                Ok(taken) => taken,
                // The run now waits, suspended, for the child: the call has
                // no result yet (the pass that resumes it gives one).
                Err(_) if cx.halted().is_some() => {
                    return Ok(ChildEnd { run, status: WAITING.into(), text: String::new() });
                }
                Err(e) => return Err(tool_error(e)),
            };
            let (status, text) = match outcome(&taken.data) {
                wit::ChildOutcome::Done(answer) => ("done", answer),
                wit::ChildOutcome::Failed(why) => ("failed", why),
                wit::ChildOutcome::Cancelled(why) => ("cancelled", why),
            };
            Ok(ChildEnd { run, status: status.to_string(), text })
        })
    }

    fn truncate(&self, _cx: &ToolContext, end: ChildEnd) -> ChildEnd {
        ChildEnd { text: truncate(&end.text, Truncation::default()), ..end }
    }
}

impl MaybeTool for CallAgent {
    fn decode_json(&self, arguments: &Value) -> Result<String, ToolError> {
        Ok(string_arg(&format!("{TOOL_PREFIX}{}", self.agent), arguments, "input")?.to_string())
    }

    fn reply(&self, result: Result<ChildEnd, ToolError>) -> ModelReply {
        match result {
            Ok(end) if end.status == "done" => {
                ModelReply { content: end.text, is_error: false, verdict: "allowed", approval: None }
            }
            Ok(end) if end.status == WAITING => ModelReply {
                content: format!("waiting for child run {}", end.run),
                is_error: false,
                verdict: crate::host_call::SUSPENDED,
                approval: None,
            },
            Ok(end) => ModelReply {
                content: format!("error: the agent `{}` (run {}) {}: {}", self.agent, end.run, end.status, end.text),
                is_error: true,
                verdict: "failed",
                approval: None,
            },
            Err(e) => ModelReply::error(&e),
        }
    }
}

/// A durable step's error as the model reads it.
fn tool_error(e: wit::DurableError) -> ToolError {
    match e {
        wit::DurableError::Invalid(m) | wit::DurableError::InsideCheckpoint(m) | wit::DurableError::ReservedName(m) => {
            ToolError::InvalidInput(m)
        }
        wit::DurableError::NotDurable(m) => ToolError::Unsupported(m),
        wit::DurableError::StepFailed(f) => ToolError::Failed(f.message),
    }
}
