//! The durable unit: the `durable` import, a workflow's primitives.
//!
//! - `checkpoint-begin` / `checkpoint-end`: a named result, stored once.
//! - `checkpoint-all`: independent host steps (prompts, tool calls) run
//!   concurrently, each stored as it completes.
//! - `suspend`: the run ends `suspended`; a resume replays the journal up
//!   to this call, which then returns.
//! - `resume-input`: the JSON given at the latest resume.
//! - `sleep` / `sleep-until`: a durable timer; the run ends `suspended`
//!   with a wake job due at its time (no instance, no process held), and
//!   the replayed call returns at once.
//! - `wait-signal`: two journaled steps. The first reckons the wait's
//!   due time once and, if no signal is there yet, ends the run
//!   `suspended` waiting for it; the second, after the wake (the signal,
//!   the timeout, or an operator's resume), takes the next signal of the
//!   name, if any. Which signals a run took is its journal's record.
//!
//! - `run-agent`: a child run and a wait for its end. The first step
//!   records the child (with the entry that names it: a child exists
//!   exactly when the parent's journal says it started one), with the
//!   parent's effective grant narrowed as asked and never wider; then the
//!   parent waits, as `wait-signal` waits, for the signal the child's end
//!   sends it.
//!
//! In a recorded run the values live in the store, beside the journal. A
//! run without a store (an embedding program's, or `--ephemeral`) keeps
//! checkpoints in memory for the run and cannot suspend.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use nexo_model::{BoxFuture, ToolCall};
use serde_json::Value;
use wasmtime::component::Linker;

use crate::bindings::agent::nexo::plugin::durable as wit;
use crate::capability::model::Prompt;
use crate::children::{ChildRequest, ChildRuns};
use crate::error::ToolError;
use crate::flow::Labels;
use crate::grant::{Bounds, Grant, stricter};
use crate::host_call::{CallContext, HostCall, ToolContext};
use crate::journal::{Effect, Halt, RESERVED, unjournaled};
use crate::manifest::interface::DURABLE;
use crate::unit::{AgentHost, Setup, Step, Unit};
use nexo_store::NEVER_MS;

/// How many steps of one `checkpoint-all` run at once.
pub const STEP_CONCURRENCY: usize = 4;

/// The longest checkpoint name, in bytes.
pub const MAX_NAME_BYTES: usize = 200;

/// Per-instance state: the open checkpoint, the values of a run without a
/// store, and what a child run is started from.
#[derive(Debug, Default)]
pub struct DurableState {
    open: Mutex<Option<String>>,
    memory: Mutex<BTreeMap<String, Value>>,
    /// The run's effective grant (what its children are narrowed from),
    /// and who makes a child's record; `None` where no child can start.
    children: Option<(Grant, Arc<dyn ChildRuns>)>,
}

impl DurableState {
    fn open(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn memory(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Value>> {
        self.memory.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The durable unit.
#[derive(Debug, Default, Clone, Copy)]
pub struct DurableUnit;

impl Unit for DurableUnit {
    fn name(&self) -> &'static str {
        "durable"
    }

    fn link(&self, linker: &mut Linker<AgentHost>) -> wasmtime::Result<()> {
        let mut durable = linker.instance(DURABLE)?;
        durable.func_wrap_async("checkpoint-begin", |store, (name,): (String,)| {
            let cx = store.data().world.tools.clone();
            Box::new(async move {
                let out = cx.guest_call(&CheckpointBegin, name.clone()).await?;
                // Tracked here, not in the handler: a replayed begin opens
                // the checkpoint too.
                if let (Ok(None), Ok(state)) = (&out, cx.state::<DurableState>()) {
                    *state.open() = Some(name);
                }
                Ok((out,))
            })
        })?;
        durable.func_wrap_async("checkpoint-end", |store, (name, value): (String, String)| {
            let cx = store.data().world.tools.clone();
            Box::new(async move {
                let out = cx.guest_call(&CheckpointEnd, (name.clone(), value)).await?;
                if let Ok(state) = cx.state::<DurableState>() {
                    let mut open = state.open();
                    if open.as_deref() == Some(name.as_str()) {
                        *open = None;
                    }
                }
                Ok((out,))
            })
        })?;
        durable.func_wrap_async("checkpoint-all", |store, (steps,): (Vec<wit::Step>,)| {
            let cx = store.data().world.tools.clone();
            Box::new(async move { Ok((cx.guest_call(&CheckpointAll, steps).await?,)) })
        })?;
        durable.func_wrap_async("suspend", |store, (reason, key): (String, Option<String>)| {
            let cx = store.data().world.tools.clone();
            Box::new(async move { Ok((cx.guest_call(&Suspend, (reason, key)).await?,)) })
        })?;
        for (name, sleep) in [("sleep", Sleep::For), ("sleep-until", Sleep::Until)] {
            durable.func_wrap_async(name, move |store, (n,): (u64,)| {
                let cx = store.data().world.tools.clone();
                Box::new(async move { Ok((cx.guest_call(&sleep, n).await?.map(|_| ()),)) })
            })?;
        }
        durable.func_wrap_async("wait-signal", |store, (name, timeout): (String, Option<u64>)| {
            let cx = store.data().world.tools.clone();
            Box::new(async move {
                if name.starts_with(nexo_store::RESERVED_SIGNAL_PREFIX) {
                    let why = format!(
                        "signal names starting with `{}` are the host's own; wait for a child run with `run-agent`",
                        nexo_store::RESERVED_SIGNAL_PREFIX
                    );
                    return Ok((Err(wit::DurableError::Invalid(why)),));
                }
                if let Err(e) = cx.guest_call(&WaitSignal, (name.clone(), timeout)).await? {
                    return Ok((Err(e),));
                }
                let taken = cx.guest_call(&TakeSignal, name).await?;
                Ok((taken.map(|t| t.map(|t| t.data)),))
            })
        })?;
        durable.func_wrap_async(
            "run-agent",
            |store, (agent, input, narrowing): (String, String, wit::GrantNarrowing)| {
                let cx = store.data().world.tools.clone();
                Box::new(async move {
                    let child = match cx.guest_call(&StartChild, (agent, input, narrowing)).await? {
                        Ok(child) => child,
                        Err(e) => return Ok((Err(e),)),
                    };
                    let end = wait_for_child(&cx, &child).await;
                    cx.unwind_if_halted()?;
                    Ok((end.map(|taken| outcome(&taken.data)),))
                })
            },
        )?;
        durable.func_wrap_async("resume-input", |store, (): ()| {
            let cx = store.data().world.tools.clone();
            Box::new(async move { Ok((cx.guest_call(&ResumeInput, ()).await?.unwrap_or(None),)) })
        })?;
        Ok(())
    }

    fn prepare<'a>(&'a self, setup: &'a mut Setup<'_>) -> Step<'a> {
        // The run's effective grant: the operator's (as this pass narrowed
        // it) within what the agent asked for, under the mode in force.
        let children = setup.options.context.children.clone().map(|starter| {
            let mut grant = setup.options.grant.clone().narrow(&Bounds::of_manifest(setup.manifest));
            grant.mode = stricter(grant.mode, setup.authority.mode());
            (grant, starter)
        });
        setup.state.insert(DurableState { children, ..DurableState::default() });
        Step::ready(Ok(()))
    }
}

/// A durable call's errors are the guest's mistakes, never refusals.
impl crate::host_call::Refusal for wit::DurableError {
    fn refusal(&self) -> Option<&'static str> {
        None
    }
}

impl From<ToolError> for wit::DurableError {
    fn from(e: ToolError) -> Self {
        wit::DurableError::Invalid(e.text())
    }
}

/// A checkpoint name the guest may use, or why not.
fn check_name(name: &str) -> Result<(), wit::DurableError> {
    if name.is_empty() {
        return Err(wit::DurableError::ReservedName("a checkpoint needs a name".into()));
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(wit::DurableError::ReservedName(format!(
            "a checkpoint name is at most {MAX_NAME_BYTES} bytes; this one is {}",
            name.len()
        )));
    }
    if RESERVED.contains(&name) {
        return Err(wit::DurableError::ReservedName(format!(
            "`{name}` is reserved by the host ({}); choose another name",
            RESERVED.join(", ")
        )));
    }
    Ok(())
}

/// A stored checkpoint: in the run's store when it is recorded, else in
/// the instance's memory.
fn stored(cx: &ToolContext, name: &str) -> Result<Option<Value>, wit::DurableError> {
    Ok(match cx.journal() {
        Some(journal) => journal.checkpoint(name),
        None => cx.state::<DurableState>()?.memory().get(name).cloned(),
    })
}

/// Stores a checkpoint once (a stored one is kept), where [`stored`] looks.
fn keep(cx: &ToolContext, name: &str, value: Value) -> Result<(), wit::DurableError> {
    match cx.journal() {
        Some(journal) => journal.put_checkpoint(name, value),
        None => {
            cx.state::<DurableState>()?.memory().entry(name.to_string()).or_insert(value);
        }
    }
    Ok(())
}

fn parse_json(name: &str, value: &str) -> Result<Value, wit::DurableError> {
    serde_json::from_str(value)
        .map_err(|e| wit::DurableError::Invalid(format!("the value of checkpoint `{name}` is not JSON: {e}")))
}

/// `checkpoint-begin`.
#[derive(Debug, Clone, Copy)]
pub struct CheckpointBegin;

impl HostCall for CheckpointBegin {
    type Args = String;
    type Output = Option<String>;
    type Error = wit::DurableError;

    fn name(&self) -> &'static str {
        "checkpoint-begin"
    }

    fn interface(&self) -> &'static str {
        DURABLE
    }

    fn effect(&self) -> Effect {
        Effect::Read
    }

    fn execute<'a>(
        &'a self,
        cx: &'a ToolContext,
        name: String,
    ) -> BoxFuture<'a, Result<Option<String>, wit::DurableError>> {
        Box::pin(async move {
            check_name(&name)?;
            Ok(stored(cx, &name)?.map(|v| v.to_string()))
        })
    }
}

crate::guest_only!(CheckpointBegin, ToolContext);

/// `checkpoint-end`.
#[derive(Debug, Clone, Copy)]
pub struct CheckpointEnd;

impl HostCall for CheckpointEnd {
    type Args = (String, String);
    type Output = ();
    type Error = wit::DurableError;

    fn name(&self) -> &'static str {
        "checkpoint-end"
    }

    fn interface(&self) -> &'static str {
        DURABLE
    }

    fn arg_bytes(&self, (name, value): &(String, String)) -> usize {
        name.len() + value.len()
    }

    fn execute<'a>(
        &'a self,
        cx: &'a ToolContext,
        (name, value): (String, String),
    ) -> BoxFuture<'a, Result<(), wit::DurableError>> {
        Box::pin(async move {
            check_name(&name)?;
            let value = parse_json(&name, &value)?;
            // Committed with this call's own entry: one transaction.
            keep(cx, &name, value)?;
            Ok(())
        })
    }
}

crate::guest_only!(CheckpointEnd, ToolContext);

/// `checkpoint-all`.
#[derive(Debug, Clone, Copy)]
pub struct CheckpointAll;

impl HostCall for CheckpointAll {
    type Args = Vec<wit::Step>;
    type Output = Vec<(String, String)>;
    type Error = wit::DurableError;

    fn name(&self) -> &'static str {
        "checkpoint-all"
    }

    fn spans_calls(&self) -> bool {
        true
    }

    fn interface(&self) -> &'static str {
        DURABLE
    }

    fn arg_bytes(&self, steps: &Vec<wit::Step>) -> usize {
        steps
            .iter()
            .map(|s| {
                s.name.len()
                    + match &s.action {
                        wit::StepAction::Prompt(p) => p.len(),
                        wit::StepAction::Tool(t) => t.name.len() + t.arguments.len(),
                    }
            })
            .sum()
    }

    // A failed step is not journaled: a resume runs the missing steps.
    fn journal_error(&self, _error: &wit::DurableError) -> bool {
        false
    }

    fn execute<'a>(
        &'a self,
        cx: &'a ToolContext,
        steps: Vec<wit::Step>,
    ) -> BoxFuture<'a, Result<Vec<(String, String)>, wit::DurableError>> {
        Box::pin(async move {
            // Every name is checked before any step runs.
            let mut seen = std::collections::BTreeSet::new();
            for step in &steps {
                check_name(&step.name)?;
                if !seen.insert(step.name.as_str()) {
                    return Err(wit::DurableError::Invalid(format!("the step name `{}` is given twice", step.name)));
                }
                if let wit::StepAction::Tool(t) = &step.action {
                    parse_json(&step.name, &t.arguments)?;
                }
            }
            let mut pending = Vec::new();
            for step in &steps {
                if stored(cx, &step.name)?.is_none() {
                    pending.push(step);
                }
            }
            let mut failure = None;
            type StepRun<'s> = BoxFuture<'s, (&'s wit::Step, Result<Value, String>)>;
            let runs: Vec<StepRun<'_>> = pending
                .into_iter()
                .map(|step| -> StepRun<'_> { Box::pin(async move { (step, unjournaled(run_step(cx, step)).await) }) })
                .collect();
            let mut runs = futures::stream::iter(runs).buffer_unordered(STEP_CONCURRENCY);
            while let Some((step, result)) = runs.next().await {
                match result {
                    Ok(value) => {
                        keep(cx, &step.name, value)?;
                        // Each step is durable as it completes.
                        if let Some(journal) = cx.journal() {
                            journal.flush().await;
                        }
                    }
                    Err(message) => {
                        // The steps in flight finish and are kept; they were paid for.
                        failure.get_or_insert(wit::StepFailure { name: step.name.clone(), message });
                    }
                }
            }
            if let Some(failure) = failure {
                return Err(wit::DurableError::StepFailed(failure));
            }
            let mut values = Vec::with_capacity(steps.len());
            for step in &steps {
                values.push((step.name.clone(), stored(cx, &step.name)?.map(|v| v.to_string()).unwrap_or_default()));
            }
            Ok(values)
        })
    }
}

crate::guest_only!(CheckpointAll, ToolContext);

/// Runs one step: its value as JSON, or its error.
async fn run_step(cx: &ToolContext, step: &wit::Step) -> Result<Value, String> {
    match &step.action {
        wit::StepAction::Prompt(input) => match cx.call(&Prompt, input.clone()).await {
            Ok(outcome) => Ok(Value::String(outcome.text)),
            Err(e) => Err(crate::capability::model::model_error_text(&e)),
        },
        wit::StepAction::Tool(tool) => {
            let arguments = serde_json::from_str(&tool.arguments).map_err(|e| e.to_string())?;
            let call = ToolCall { id: format!("step-{}", step.name), name: tool.name.clone(), arguments };
            let reply = cx.call_model(0, &call).await;
            if reply.is_error { Err(reply.content) } else { Ok(Value::String(reply.content)) }
        }
    }
}

/// `suspend`.
#[derive(Debug, Clone, Copy)]
pub struct Suspend;

impl HostCall for Suspend {
    type Args = (String, Option<String>);
    type Output = ();
    type Error = wit::DurableError;

    fn name(&self) -> &'static str {
        "suspend"
    }

    fn interface(&self) -> &'static str {
        DURABLE
    }

    fn arg_bytes(&self, (reason, key): &(String, Option<String>)) -> usize {
        reason.len() + key.as_ref().map_or(0, String::len)
    }

    fn execute<'a>(
        &'a self,
        cx: &'a ToolContext,
        (reason, resume_key): (String, Option<String>),
    ) -> BoxFuture<'a, Result<(), wit::DurableError>> {
        Box::pin(async move {
            inside_checkpoint(cx, self.name())?;
            let Some(journal) = cx.journal() else {
                return Err(wit::DurableError::NotDurable(
                    "this run is not recorded, so it cannot be resumed; run it with a store (`nexo run` without \
                     --ephemeral)"
                        .into(),
                ));
            };
            journal.halt_after_this_call(Halt::Suspend {
                reason,
                resume_key,
                approval: None,
                wake_ms: None,
                signal: None,
            });
            Ok(())
        })
    }
}

crate::guest_only!(Suspend, ToolContext);

/// The longest sleep: past it a due time is surely a mistake.
const LONGEST_SLEEP_MS: i64 = 100 * 365 * 24 * 3600 * 1000;

/// Sleeps shorter than this wait in place: a pass, a claim and a replay for
/// each would cost more than the wait, and a loop of tiny sleeps would turn
/// into a storm of passes.
const SHORTEST_DURABLE_SLEEP_MS: i64 = 1000;

/// `sleep` (for so many milliseconds) and `sleep-until` (a Unix time in
/// milliseconds): a durable timer. Its journaled result is the due time,
/// so a replay answers with it and never reckons it again.
#[derive(Debug, Clone, Copy)]
pub enum Sleep {
    /// `sleep`.
    For,
    /// `sleep-until`.
    Until,
}

impl HostCall for Sleep {
    type Args = u64;
    type Output = i64;
    type Error = wit::DurableError;

    fn name(&self) -> &'static str {
        match self {
            Sleep::For => "sleep",
            Sleep::Until => "sleep-until",
        }
    }

    fn interface(&self) -> &'static str {
        DURABLE
    }

    /// Committed with the next write: a durable sleep's entry goes with the
    /// suspension, and a sleep that returned (its time had come, or it
    /// waited in place) changes nothing if it runs again.
    fn effect(&self) -> Effect {
        Effect::Read
    }

    fn execute<'a>(&'a self, cx: &'a ToolContext, n: u64) -> BoxFuture<'a, Result<i64, wit::DurableError>> {
        Box::pin(async move {
            inside_checkpoint(cx, self.name())?;
            let now = nexo_store::now_ms();
            let n = i64::try_from(n).unwrap_or(i64::MAX);
            let until = match self {
                Sleep::For => now.saturating_add(n),
                Sleep::Until => n,
            };
            if until.saturating_sub(now) > LONGEST_SLEEP_MS {
                return Err(wit::DurableError::Invalid(format!(
                    "`{}` would sleep past 100 years; give a duration in milliseconds (`sleep`) or a Unix time in \
                     milliseconds (`sleep-until`)",
                    self.name()
                )));
            }
            if until <= now {
                return Ok(until);
            }
            match cx.journal() {
                // Not recorded (nothing could wake it later), or short: it waits here.
                None => tokio::time::sleep(std::time::Duration::from_millis((until - now).unsigned_abs())).await,
                Some(_) if until - now < SHORTEST_DURABLE_SLEEP_MS => {
                    tokio::time::sleep(std::time::Duration::from_millis((until - now).unsigned_abs())).await
                }
                Some(journal) => {
                    let reason = format!("sleeping until {}", rfc3339(until));
                    journal.halt_after_this_call(Halt::Suspend {
                        reason,
                        resume_key: None,
                        approval: None,
                        wake_ms: Some(until),
                        signal: None,
                    });
                }
            }
            Ok(until)
        })
    }
}

crate::guest_only!(Sleep, ToolContext);

/// Why a durable call that waits cannot run now: inside an open
/// checkpoint, or in a step of `checkpoint-all` (concurrent, and not
/// journaled, so nothing could find the wait again).
fn inside_checkpoint(cx: &ToolContext, call: &str) -> Result<(), wit::DurableError> {
    if crate::journal::is_unjournaled() {
        return Err(wit::DurableError::InsideCheckpoint(format!(
            "`{call}` was called from a step of `checkpoint-all`, whose steps run concurrently and are not \
             journaled, so it cannot wait there; call it outside `checkpoint-all`"
        )));
    }
    match cx.state::<DurableState>()?.open().as_ref() {
        Some(open) => Err(wit::DurableError::InsideCheckpoint(format!(
            "`{call}` was called inside the checkpoint `{open}`; end the checkpoint first (a checkpoint's work must \
             finish in one pass)"
        ))),
        None => Ok(()),
    }
}

/// Whether a call made here could start a child run and wait for it: the
/// run is recorded and journals this pass, and no checkpoint (nor a step
/// of `checkpoint-all`) is open. Where it could not, the model is offered
/// no agent.
pub fn can_wait_for_child(cx: &ToolContext) -> bool {
    let recording = cx.journal().is_some_and(|j| j.recording());
    recording && cx.state::<DurableState>().is_ok_and(|s| s.children.is_some()) && inside_checkpoint(cx, "").is_ok()
}

/// How often a wait for a signal shorter than a second looks for it.
const SHORT_WAIT_LOOK: std::time::Duration = std::time::Duration::from_millis(50);

/// `wait-signal`'s first step: the wait's due time, reckoned once and
/// journaled ([`NEVER_MS`] with no timeout). With no signal there yet and
/// time left, the run ends `suspended` waiting for one.
#[derive(Debug, Clone, Copy)]
pub struct WaitSignal;

impl HostCall for WaitSignal {
    type Args = (String, Option<u64>);
    type Output = i64;
    type Error = wit::DurableError;

    fn name(&self) -> &'static str {
        "wait-signal"
    }

    fn interface(&self) -> &'static str {
        DURABLE
    }

    fn arg_bytes(&self, (name, _): &(String, Option<u64>)) -> usize {
        name.len()
    }

    /// Committed with the suspension, or with the next write.
    fn effect(&self) -> Effect {
        Effect::Read
    }

    fn execute<'a>(
        &'a self,
        cx: &'a ToolContext,
        (name, timeout): (String, Option<u64>),
    ) -> BoxFuture<'a, Result<i64, wit::DurableError>> {
        Box::pin(async move {
            inside_checkpoint(cx, self.name())?;
            let Some(journal) = cx.journal() else {
                return Err(wit::DurableError::NotDurable(
                    "this run is not recorded, so no signal can reach it; run it with a store (`nexo run` without \
                     --ephemeral)"
                        .into(),
                ));
            };
            nexo_store::check_name_and_data(&name, "null").map_err(|e| wit::DurableError::Invalid(e.to_string()))?;
            let now = nexo_store::now_ms();
            let until = match timeout {
                None => NEVER_MS,
                Some(t) if t > LONGEST_SLEEP_MS.unsigned_abs() => {
                    return Err(wit::DurableError::Invalid(
                        "`wait-signal`'s timeout is past 100 years; give milliseconds, or none to wait for as long \
                         as it takes"
                            .into(),
                    ));
                }
                Some(t) => now.saturating_add(i64::try_from(t).unwrap_or(LONGEST_SLEEP_MS)),
            };
            let mut there = journal.next_signal(&name).await.map_err(|e| unreadable(journal, &e))?;
            // A short wait waits here, looking for the signal now and then:
            // a pass per short wait would cost more than the wait, and a
            // loop of them would be a storm of passes (as for `sleep`).
            while there.is_none() && until - nexo_store::now_ms() > 0 && until - now < SHORTEST_DURABLE_SLEEP_MS {
                tokio::time::sleep(SHORT_WAIT_LOOK).await;
                there = journal.next_signal(&name).await.map_err(|e| unreadable(journal, &e))?;
            }
            if there.is_none() && until > nexo_store::now_ms() {
                let wake_ms = (until != NEVER_MS).then_some(until);
                let child = name.strip_prefix(&nexo_store::child_signal(""));
                let reason = match (child, wake_ms) {
                    (Some(child), _) => format!("waiting for child run `{child}`"),
                    (None, Some(at)) => format!("waiting for signal `{name}` until {}", rfc3339(at)),
                    (None, None) => format!("waiting for signal `{name}`"),
                };
                let signal = Some(Box::new(journal.signal_wait(&name)));
                journal.halt_after_this_call(Halt::Suspend {
                    reason,
                    resume_key: None,
                    approval: None,
                    wake_ms,
                    signal,
                });
            }
            Ok(until)
        })
    }
}

crate::guest_only!(WaitSignal, ToolContext);

/// `run-agent`'s first step: records the child run (with the parent's
/// batch, which the suspension that follows writes) and answers its id,
/// which the journal keeps, so a replay waits for the same child.
#[derive(Debug, Clone, Copy)]
pub struct StartChild;

impl HostCall for StartChild {
    type Args = (String, String, wit::GrantNarrowing);
    type Output = String;
    type Error = wit::DurableError;

    fn name(&self) -> &'static str {
        "run-agent"
    }

    fn interface(&self) -> &'static str {
        DURABLE
    }

    fn arg_bytes(&self, (agent, input, narrowing): &Self::Args) -> usize {
        let list = |l: &Option<Vec<String>>| l.iter().flatten().map(String::len).sum::<usize>();
        agent.len()
            + input.len()
            + list(&narrowing.allow)
            + list(&narrowing.fetch_hosts)
            + narrowing.mode.as_ref().map_or(0, String::len)
    }

    /// Committed with the child it names: both go with the suspension
    /// that follows, or neither does.
    fn effect(&self) -> Effect {
        Effect::Read
    }

    fn execute<'a>(
        &'a self,
        cx: &'a ToolContext,
        (agent, input, narrowing): Self::Args,
    ) -> BoxFuture<'a, Result<String, wit::DurableError>> {
        Box::pin(async move {
            inside_checkpoint(cx, self.name())?;
            let Some(journal) = cx.journal() else {
                return Err(wit::DurableError::NotDurable(
                    "this run is not recorded, so it cannot wait for a child run; run it with a store (`nexo run` \
                     without --ephemeral)"
                        .into(),
                ));
            };
            if !journal.recording() {
                // No entry would name the child, so no later pass could find it.
                return Err(wit::DurableError::NotDurable(
                    "this pass re-enters a changed component by checkpoints only, and journals nothing, so a child \
                     run it started could not be waited for; start children from a run of the component it \
                     recorded"
                        .into(),
                ));
            }
            let Some((grant, starter)) = &cx.state::<DurableState>()?.children else {
                return Err(wit::DurableError::NotDurable(
                    "this host starts no child runs (it drives runs without the run lifecycle)".into(),
                ));
            };
            let request = requested(&narrowing)?;
            let mut grant = grant.clone().narrowed_to(&request).map_err(|(field, item)| {
                wit::DurableError::Invalid(format!(
                    "the child's grant asks for {field} `{item}`, which this run's effective grant does not hold; a \
                     child's authority is never wider than its parent's (narrow it, or leave the field out to keep \
                     the parent's)"
                ))
            })?;
            // Its prompt may carry what this run read: the child holds it too.
            grant.inherited = grant.inherited.with(cx.taint().held());
            let child =
                starter.prepare(ChildRequest { agent, input, grant }).await.map_err(wit::DurableError::Invalid)?;
            let id = child.run.id.clone();
            journal.start_child(child);
            Ok(id)
        })
    }
}

crate::guest_only!(StartChild, ToolContext);

/// Waits, as `wait-signal` does, for the signal only the end of child run
/// `child` sends, and takes it; an operator's early resume waits again.
/// Each step is a call of its own on the one path, so a replay answers
/// them. A run that halted (it now waits, suspended) gets an error here;
/// its caller unwinds.
pub async fn wait_for_child(cx: &ToolContext, child: &str) -> Result<Taken, wit::DurableError> {
    let name = nexo_store::child_signal(child);
    loop {
        cx.call(&WaitSignal, (name.clone(), None)).await?;
        if let Some(why) = cx.halted() {
            return Err(wit::DurableError::NotDurable(why));
        }
        if let Some(taken) = cx.call(&TakeSignal, name.clone()).await? {
            return Ok(taken);
        }
    }
}

/// What a `grant-narrowing` asks for, as [`Bounds`]; a name that does not
/// parse is the guest's mistake.
fn requested(narrowing: &wit::GrantNarrowing) -> Result<Bounds, wit::DurableError> {
    let capabilities = match &narrowing.allow {
        Some(names) => Some(
            names
                .iter()
                .map(|n| crate::grant::parse_capability(n))
                .collect::<Result<_, _>>()
                .map_err(wit::DurableError::Invalid)?,
        ),
        None => None,
    };
    let mode = match &narrowing.mode {
        Some(m) => Some(serde_json::from_value(Value::String(m.clone())).map_err(|_| {
            wit::DurableError::Invalid(format!("unknown permission mode `{m}`: use read-only, approve, ask or auto"))
        })?),
        None => None,
    };
    let fetch_hosts = match &narrowing.fetch_hosts {
        Some(hosts) => Some(
            nexo_egress::HostList::new(hosts)
                .map_err(|e| wit::DurableError::Invalid(format!("the child's fetch hosts do not parse: {e}")))?,
        ),
        None => None,
    };
    Ok(Bounds { capabilities, mode, fetch_hosts, ..Bounds::default() })
}

/// A child's end, as its signal carries it ([`nexo_store::child_outcome`]).
pub fn outcome(data: &str) -> wit::ChildOutcome {
    let end: Value = serde_json::from_str(data).unwrap_or_default();
    let text = |key: &str| end.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
    match end.get("status").and_then(Value::as_str) {
        Some("done") => wit::ChildOutcome::Done(text("result")),
        Some("cancelled") => wit::ChildOutcome::Cancelled(text("error")),
        _ => wit::ChildOutcome::Failed(text("error")),
    }
}

/// A signal `wait-signal` took: its id (which the journal keeps, so a
/// replay takes the same one) and its data.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Taken {
    /// The signal's id.
    pub id: i64,
    /// Its data, JSON text.
    pub data: String,
}

/// `wait-signal`'s second step: takes the next signal of the name, if
/// one came; `None` when the wait ended without one.
#[derive(Debug, Clone, Copy)]
pub struct TakeSignal;

impl HostCall for TakeSignal {
    type Args = String;
    type Output = Option<Taken>;
    type Error = wit::DurableError;

    /// A signal's data comes from outside the run; a child run's outcome
    /// may carry anything the child read, private content too.
    fn brings(&self, name: &String) -> Labels {
        let child = nexo_store::child_signal("");
        if name.starts_with(&child) { Labels::UNTRUSTED.with(Labels::PRIVATE) } else { Labels::UNTRUSTED }
    }

    fn name(&self) -> &'static str {
        crate::journal::TAKE_SIGNAL
    }

    fn interface(&self) -> &'static str {
        DURABLE
    }

    fn arg_bytes(&self, name: &String) -> usize {
        name.len()
    }

    /// Committed with the next write: a pass that dies before it takes the
    /// same signal again, since no entry says it was taken.
    fn effect(&self) -> Effect {
        Effect::Read
    }

    fn execute<'a>(
        &'a self,
        cx: &'a ToolContext,
        name: String,
    ) -> BoxFuture<'a, Result<Option<Taken>, wit::DurableError>> {
        Box::pin(async move {
            let Some(journal) = cx.journal() else { return Ok(None) };
            let signal = journal.next_signal(&name).await.map_err(|e| unreadable(journal, &e))?;
            Ok(signal.map(|s| {
                journal.took_signal(&s);
                Taken { id: s.id, data: s.data }
            }))
        })
    }
}

crate::guest_only!(TakeSignal, ToolContext);

/// A store that cannot say which signals came halts the run (it fails,
/// and may be retried): an answer a replay could not give again must not
/// reach the guest.
fn unreadable(journal: &crate::journal::Journal, e: &nexo_store::StoreError) -> wit::DurableError {
    let why = format!("the run's signals could not be read: {e}");
    journal.halt(Halt::Failed(why.clone()));
    wit::DurableError::Invalid(why)
}

/// A Unix time in milliseconds as RFC 3339, to the second.
fn rfc3339(ms: i64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.unsigned_abs());
    humantime::format_rfc3339_seconds(at).to_string()
}

/// `resume-input`.
#[derive(Debug, Clone, Copy)]
pub struct ResumeInput;

impl HostCall for ResumeInput {
    type Args = ();
    type Output = Option<String>;
    type Error = ToolError;

    fn name(&self) -> &'static str {
        "resume-input"
    }

    fn interface(&self) -> &'static str {
        DURABLE
    }

    fn effect(&self) -> Effect {
        Effect::Read
    }

    fn execute<'a>(&'a self, cx: &'a ToolContext, (): ()) -> BoxFuture<'a, Result<Option<String>, ToolError>> {
        Box::pin(async move { Ok(cx.journal().and_then(|j| j.resume_input())) })
    }
}

crate::guest_only!(ResumeInput, ToolContext);
