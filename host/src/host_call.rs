//! The host-call path: every guest import, in every world, every tool call
//! the model makes, and every model turn of the agent loop
//! ([`crate::model_turn`]) enters one function ([`enter`]), which runs the
//! same steps in the same order:
//!
//! ```text
//! decode → authorize → event → execute → truncate → audit → result
//! ```
//!
//! - **decode**: WIT arguments arrive typed, and their size is checked; the
//!   model's arrive as JSON and the call parses them.
//! - **authorize**: the world's context decides: an agent run's one
//!   [`Authority`] (its data-flow guard seeing what the run's context
//!   holds); a search backend's or sandbox provider's egress grant.
//! - **event**: a model's call is reported to the run's [`EventSink`].
//! - **execute**: the call's handler, with its unit's per-instance state.
//! - **truncate**: the call's own cut, through the one truncation routine.
//! - **audit**: each call the gate decided on (a capability or an MCP
//!   server), the guest's and the model's alike, goes to the run's
//!   [`AuditSink`] when it has one (`nexo serve`'s audit log), with its final
//!   verdict: a refusal after the gate (a host list, the address guard, a
//!   quota) is the verdict, not the gate's `allowed` ([`Refusal`]).
//! - **result**: a typed value for the guest, or text (and a result event)
//!   for the model. A result the handler produced (not a refusal), live or
//!   replayed, first marks what it brought into the run's context
//!   ([`Taint`]): the same calls mark the same labels on every pass.
//!
//! A recorded run adds the journal around execute: a call the journal
//! holds is answered from it (the gate, the event and the handler are not
//! run again), and a live call's result is appended before the guest sees
//! it (see [`crate::journal`]).
//! A call is defined once, in its capability unit's file: a [`HostCall`]
//! (and, when the model may call it, a [`Tool`]). A world's per-instance
//! context ([`CallContext`]) is what the steps consult: [`ToolContext`] for
//! agents, `egress::EgressState` for search backends and sandbox providers.

use std::any::{Any, TypeId};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use nexo_model::{BoxFuture, ToolCall, ToolSpec};
use serde_json::Value;

use crate::authority::{Authority, Gate};
use crate::engine::Limits;
use crate::error::ToolError;
use crate::events::{Event, EventSink};
use crate::flow::{Labels, Taint};
use crate::hooks::{Before, HookCall, Hooks, Origin as HookOrigin, Outcome};
use crate::journal::{Begin, Effect, Journal, UNPOSITIONED};
use crate::manifest::{Capability, HookEvent};
use crate::telemetry::{spans, traces};

/// What the path consults for one instance's calls.
pub trait CallContext: Send + Sync + 'static {
    /// The plugin's name, for logs.
    fn plugin(&self) -> &str;

    /// The gate for one call; `ask` is why a hook asks for a decision on it.
    fn authorize(&self, gate: &Gate<'_>, call: &str, ask: Option<&str>) -> Result<(), ToolError>;

    /// The run's hooks, when it has any.
    fn hooks(&self) -> Option<&Hooks> {
        None
    }

    /// Where the gate's decisions are recorded, if anywhere.
    fn audit(&self) -> Option<&dyn AuditSink> {
        None
    }

    /// The most bytes a guest may hand to one call.
    fn arg_limit(&self) -> usize;

    /// Where the model's calls are reported.
    fn events(&self) -> &dyn EventSink;

    /// The instance's log budget.
    fn log(&self) -> &LogBudget;

    /// The run's journal, when the run is recorded.
    fn journal(&self) -> Option<&Journal> {
        None
    }

    /// What the result of the call `gate` describes, which also brings
    /// `brings` of its own ([`HostCall::brings`]), would bring into the
    /// run's context that it does not hold yet: the labels and the
    /// source's name. `None` where no guard watches.
    fn source(&self, _gate: &Gate<'_>, _brings: Labels, _call: &'static str) -> Option<(Labels, String)> {
        None
    }

    /// Marks what a result brought into the run's context.
    fn mark(&self, _labels: Labels, _by: String) {}

    /// The labels the run's context holds now.
    fn held(&self) -> Labels {
        Labels::NONE
    }

    /// Whether the data-flow guard speaks on the call `gate` describes (for
    /// the audit's reason).
    fn guarded(&self, _gate: &Gate<'_>) -> bool {
        false
    }
}

/// One decision of the gate, as an audit log keeps it: what was asked for
/// and the verdict, never the call's arguments or result (a path or a URL
/// can hold a secret).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CapabilityUse {
    /// The capability, or `mcp`.
    pub capability: &'static str,
    /// The import, such as `read-file` or `call-tool`.
    pub call: &'static str,
    /// The model's tool name, when the model made the call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The MCP server, for an MCP call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// The MCP server's tool, for an MCP tool call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_tool: Option<String>,
    /// `model` or `guest`.
    pub origin: &'static str,
    /// `allowed`, or the refusal's kind (`denied`, `approval-required`…).
    pub verdict: &'static str,
    /// What refused or held the call beyond the capability and the mode:
    /// `data-flow` when the data-flow guard did, `hook` when a hook did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guard: Option<&'static str>,
    /// The hooks that refused or asked about the call, by name (a tenant's
    /// as `tenant/NAME`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<String>,
}

/// Whether a call's error is a refusal: what the audit records as the
/// call's verdict when the handler, not the gate, refused it.
pub trait Refusal {
    /// The refusal's kind (`denied`, `security`, `approval-required`), or
    /// `None` when the call failed without being refused.
    fn refusal(&self) -> Option<&'static str>;
}

impl Refusal for ToolError {
    fn refusal(&self) -> Option<&'static str> {
        matches!(self, ToolError::Denied(_) | ToolError::Security(_) | ToolError::ApprovalRequired(_))
            .then(|| self.kind())
    }
}

/// Where a run's [`CapabilityUse`]s go. Called on the host-call path, so
/// it should only take the record and return.
pub trait AuditSink: Send + Sync {
    /// Records one decision.
    fn record(&self, used: CapabilityUse);

    /// Records one connection made through the egress proxy, let through
    /// or refused, by `by`: `shell` (a shell command) or `mcp:NAME` (the
    /// confined MCP server `NAME`). Default: not kept.
    fn connection(&self, by: &str, connection: &nexo_egress::Connection) {
        let _ = (by, connection);
    }
}

/// How many log lines an instance has written, against its limits.
#[derive(Debug)]
pub struct LogBudget {
    written: AtomicUsize,
    /// The most lines kept.
    pub max_lines: usize,
    /// The longest line kept, in bytes.
    pub line_bytes: usize,
}

impl LogBudget {
    /// A fresh budget under `limits`.
    pub fn new(limits: &Limits) -> Self {
        LogBudget { written: AtomicUsize::new(0), max_lines: limits.log_lines, line_bytes: limits.log_line_bytes }
    }

    /// Takes one line from the budget: its number (1-based), or `None` once
    /// the budget is spent.
    pub fn take(&self) -> Option<usize> {
        let n = self.written.fetch_add(1, Ordering::Relaxed) + 1;
        (n <= self.max_lines).then_some(n)
    }
}

/// One host call: its name, the capability it needs, and its handler, in
/// the world whose context is `Cx`. A call may borrow: a model turn borrows
/// its provider, and its arguments the conversation.
pub trait HostCall<Cx: CallContext = ToolContext>: Send + Sync {
    /// The decoded arguments; the journal hashes them.
    type Args: Send + serde::Serialize;
    /// What the handler returns; the journal stores it.
    type Output: Send + serde::Serialize + serde::de::DeserializeOwned;
    /// How the call fails; a refusal of the gate is one such failure.
    type Error: From<ToolError> + Refusal + Send + serde::Serialize + serde::de::DeserializeOwned;

    /// The import's name in the WIT, such as `read-file`; the gate's
    /// messages and log use it.
    fn name(&self) -> &'static str;

    /// The interface the call belongs to, for the journal.
    fn interface(&self) -> &'static str {
        crate::manifest::interface::TOOLS
    }

    /// How the journal records the call. Default: a [`Effect::Write`],
    /// durable before the guest sees it.
    fn effect(&self) -> Effect {
        Effect::Write
    }

    /// Whether an error result is journaled. An error that records no
    /// effect (a step that failed and should be retried on resume) is not.
    fn journal_error(&self, _error: &Self::Error) -> bool {
        true
    }

    /// The capability the call needs; `None` for calls every agent may make.
    fn capability(&self) -> Option<Capability> {
        None
    }

    /// Whether the call makes calls of its own that a replay answers with
    /// it, whole (a prompt, a child run, `checkpoint-all`): its entry then
    /// records the labels the run held when it finished, which a replay
    /// marks, since the calls inside are not replayed one by one.
    fn spans_calls(&self) -> bool {
        false
    }

    /// The labels its result brings into the run's context beyond those
    /// the authority reads from its gate ([`Authority::source`]): a signal
    /// (a child run's outcome among them) is untrusted. Default: none.
    fn brings(&self, _args: &Self::Args) -> Labels {
        Labels::NONE
    }

    /// What the gate and its hooks see of the arguments: a path, a command,
    /// a URL.
    fn detail<'a>(&self, _args: &'a Self::Args) -> std::borrow::Cow<'a, str> {
        std::borrow::Cow::Borrowed("")
    }

    /// What the gate decides on: by default the call's capability and
    /// `detail`, or nothing for calls every agent may make.
    fn gate<'a>(&'a self, _args: &'a Self::Args, detail: &'a str) -> Gate<'a> {
        match self.capability() {
            Some(cap) => Gate::Capability(cap, detail),
            None => Gate::Open,
        }
    }

    /// What the journal hashes and an approval shows: the call's arguments
    /// as JSON, plus whatever else tells two calls apart (an MCP call adds
    /// its server and tool).
    fn journal_arguments(&self, arguments: Value) -> Value {
        arguments
    }

    /// The hash the journal records typed arguments under: by default that
    /// of [`HostCall::journal_arguments`]. A call whose arguments are large
    /// and serialize with their keys sorted (a model turn's conversation)
    /// hashes them as they are, with no `Value` copy of them.
    fn journal_hash(&self, args: &Self::Args) -> String {
        crate::journal::hash_json(&journal_value(self, None, args))
    }

    /// The bytes a guest hands over, for the size limit on host arguments.
    fn arg_bytes(&self, _args: &Self::Args) -> usize {
        0
    }

    /// Does the work, after the gate allowed it.
    fn execute<'a>(&'a self, cx: &'a Cx, args: Self::Args) -> BoxFuture<'a, Result<Self::Output, Self::Error>>;

    /// Caps the output before anyone sees it, through the one truncation
    /// routine ([`crate::truncate`]). Default: as is.
    fn truncate(&self, _cx: &Cx, output: Self::Output) -> Self::Output {
        output
    }
}

/// A host call the model may also make, as a tool.
pub trait Tool: HostCall<ToolContext, Error = ToolError> {
    /// The name the model sees, such as `read_file`.
    fn model_name(&self) -> &'static str;

    /// The spec the model sees: description and JSON Schema.
    fn spec(&self, cx: &ToolContext) -> ToolSpec;

    /// Parses the model's JSON arguments.
    fn decode(&self, arguments: &Value) -> Result<Self::Args, ToolError>;

    /// The output as the model reads it.
    fn render(&self, output: &Self::Output) -> String;

    /// Whether the model is offered this tool in this run. Default: when
    /// the authority offers its capability.
    fn offered(&self, cx: &ToolContext) -> bool {
        self.capability().is_none_or(|c| cx.authority().offers(c))
    }
}

/// A string argument of a model's tool call, or the error naming it.
pub fn string_arg<'a>(tool: &str, arguments: &'a Value, key: &str) -> Result<&'a str, ToolError> {
    arguments
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| ToolError::InvalidInput(format!("`{tool}` needs a string argument `{key}`")))
}

/// Where a call comes from.
enum Origin<'a, A> {
    /// A guest import (or the loop's model turn), with its typed arguments.
    Guest(A),
    /// The model, in turn `turn`; the arguments are the call's JSON.
    Model { turn: u32, call: &'a ToolCall },
}

/// The verdict of a model's call the run suspended in, to wait for what
/// it started: no result is shown for it, since the pass that resumes the
/// run gives the call its result.
pub const SUSPENDED: &str = "suspended";

/// What a tool call produced for the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelReply {
    /// The text the model reads.
    pub content: String,
    /// Whether it is an error.
    pub is_error: bool,
    /// `allowed`, or the error's kind.
    pub verdict: &'static str,
    /// The gate's message, when the call waits for an approval.
    pub approval: Option<String>,
}

impl ModelReply {
    /// The reply for a failed call.
    pub fn error(e: &ToolError) -> Self {
        ModelReply {
            content: format!("error: {}", e.text()),
            is_error: true,
            verdict: e.kind(),
            approval: match e {
                ToolError::ApprovalRequired(m) => Some(m.clone()),
                _ => None,
            },
        }
    }
}

/// A [`Tool`] behind a pointer, so a run can hold tools of every unit. A
/// family of tools whose names are learnt at run time (an MCP server's)
/// is one `DynTool` too: it overrides [`DynTool::specs`],
/// [`DynTool::serves`] and [`DynTool::names`].
pub trait DynTool: Send + Sync {
    /// The name the model sees.
    fn model_name(&self) -> &'static str;
    /// Whether it is offered in this run.
    fn offered(&self, cx: &ToolContext) -> bool;
    /// Its spec.
    fn spec(&self, cx: &ToolContext) -> ToolSpec;
    /// Runs one model call through the host-call path.
    fn call_model<'a>(&'a self, cx: &'a ToolContext, turn: u32, call: &'a ToolCall) -> BoxFuture<'a, ModelReply>;

    /// The specs offered to the model in this run. Default: this tool's,
    /// when it is offered.
    fn specs<'a>(&'a self, cx: &'a ToolContext) -> BoxFuture<'a, Vec<ToolSpec>> {
        let specs = if self.offered(cx) { vec![self.spec(cx)] } else { Vec::new() };
        Box::pin(std::future::ready(specs))
    }

    /// Whether the model's call of `name` is for this tool.
    fn serves(&self, cx: &ToolContext, name: &str) -> bool {
        self.model_name() == name && self.offered(cx)
    }

    /// The names it answers to now, for the message about an unknown tool.
    fn names(&self, cx: &ToolContext) -> Vec<String> {
        if self.offered(cx) { vec![self.model_name().to_string()] } else { Vec::new() }
    }
}

impl<T: Tool> DynTool for T {
    fn model_name(&self) -> &'static str {
        Tool::model_name(self)
    }

    fn offered(&self, cx: &ToolContext) -> bool {
        Tool::offered(self, cx)
    }

    fn spec(&self, cx: &ToolContext) -> ToolSpec {
        Tool::spec(self, cx)
    }

    fn call_model<'a>(&'a self, cx: &'a ToolContext, turn: u32, call: &'a ToolCall) -> BoxFuture<'a, ModelReply> {
        Box::pin(model_call(cx, self, turn, call))
    }
}

/// The result step's two forms.
enum Reply<O, E> {
    Guest(Result<O, E>),
    Model(ModelReply),
}

/// Per-instance state of the capability units, one value per type. A run
/// has a handful, so a short list beats a hash map.
#[derive(Default)]
pub struct UnitState {
    values: Vec<(TypeId, Box<dyn Any + Send + Sync>)>,
}

impl UnitState {
    /// Stores a unit's state, replacing one of the same type.
    pub fn insert<T: Send + Sync + 'static>(&mut self, value: T) {
        let id = TypeId::of::<T>();
        self.values.retain(|(t, _)| *t != id);
        if self.values.capacity() == 0 {
            self.values.reserve(8);
        }
        self.values.push((id, Box::new(value)));
    }

    /// A unit's state, if the unit prepared one.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        let id = TypeId::of::<T>();
        self.values.iter().find(|(t, _)| *t == id).and_then(|(_, v)| v.downcast_ref())
    }
}

/// Everything an agent run's host calls need: the authority, where events
/// go, the tools, and each unit's per-instance state.
pub struct ToolContext {
    authority: Authority,
    events: Arc<dyn EventSink>,
    arg_limit: usize,
    log: LogBudget,
    tools: std::borrow::Cow<'static, [&'static dyn DynTool]>,
    state: UnitState,
    journal: Option<Arc<Journal>>,
    audit: Option<Arc<dyn AuditSink>>,
    taint: Taint,
    hooks: Option<Arc<Hooks>>,
}

impl CallContext for ToolContext {
    fn plugin(&self) -> &str {
        self.authority.agent()
    }

    fn authorize(&self, gate: &Gate<'_>, call: &str, ask: Option<&str>) -> Result<(), ToolError> {
        self.authority.gate_in(gate, &self.taint, ask, call)
    }

    fn hooks(&self) -> Option<&Hooks> {
        self.hooks.as_deref()
    }

    fn source(&self, gate: &Gate<'_>, brings: Labels, call: &'static str) -> Option<(Labels, String)> {
        let by_gate = self.authority.source(gate);
        let (labels, held) = (by_gate.with(brings), self.taint.held());
        (!labels.is_empty() && held.with(labels) != held).then(|| {
            let name = if by_gate.is_empty() { format!("`{call}`") } else { Authority::source_name(gate) };
            (labels, name)
        })
    }

    fn mark(&self, labels: Labels, by: String) {
        self.taint.mark(labels, || by);
    }

    fn held(&self) -> Labels {
        self.taint.held()
    }

    fn guarded(&self, gate: &Gate<'_>) -> bool {
        self.authority.guard(gate, &self.taint).is_some()
    }

    fn audit(&self) -> Option<&dyn AuditSink> {
        self.audit.as_deref()
    }

    fn arg_limit(&self) -> usize {
        self.arg_limit
    }

    fn events(&self) -> &dyn EventSink {
        &*self.events
    }

    fn log(&self) -> &LogBudget {
        &self.log
    }

    fn journal(&self) -> Option<&Journal> {
        self.journal.as_deref()
    }
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tools: Vec<&str> = self.tools.iter().map(|t| t.model_name()).collect();
        f.debug_struct("ToolContext").field("authority", &self.authority).field("tools", &tools).finish_non_exhaustive()
    }
}

impl ToolContext {
    /// A context from its parts, under the run's `limits` (what a guest may
    /// hand to one call, how much it may log).
    pub fn new(
        authority: Authority,
        events: Arc<dyn EventSink>,
        limits: &Limits,
        tools: impl Into<std::borrow::Cow<'static, [&'static dyn DynTool]>>,
        state: UnitState,
    ) -> Self {
        let tools = tools.into();
        let (arg_limit, log) = (limits.host_arg_bytes, LogBudget::new(limits));
        ToolContext {
            authority,
            events,
            arg_limit,
            log,
            tools,
            state,
            journal: None,
            audit: None,
            taint: Taint::new(),
            hooks: None,
        }
    }

    /// Where the gate's decisions go, for what reports on its own later
    /// (the shell's egress proxy, per connection).
    pub fn audit_sink(&self) -> Option<Arc<dyn AuditSink>> {
        self.audit.clone()
    }

    /// The same context, recording the gate's decisions in `audit`.
    pub fn with_audit(mut self, audit: Option<Arc<dyn AuditSink>>) -> Self {
        self.audit = audit;
        self
    }

    /// The same context, asking `hooks` about its calls (none: no hook).
    pub fn with_hooks(mut self, hooks: Option<Arc<Hooks>>) -> Self {
        self.hooks = hooks;
        self
    }

    /// The same context, holding `labels` from the start (what a child
    /// run inherits from its parent).
    pub fn holding(mut self, labels: Labels) -> Self {
        self.taint = Taint::holding(labels);
        self
    }

    /// The same context, recording its calls in `journal`.
    pub fn with_journal(mut self, journal: Option<Arc<Journal>>) -> Self {
        self.journal = journal;
        self
    }

    /// The run's journal, when the run is recorded.
    pub fn run_journal(&self) -> Option<&Arc<Journal>> {
        self.journal.as_ref()
    }

    /// The run's authority.
    pub fn authority(&self) -> &Authority {
        &self.authority
    }

    /// What the run's context holds, for the data-flow guard.
    pub fn taint(&self) -> &Taint {
        &self.taint
    }

    /// A unit's per-instance state. Missing state is a host bug, reported
    /// as a failed call rather than a panic.
    pub fn state<T: Send + Sync + 'static>(&self) -> Result<&T, ToolError> {
        self.state
            .get::<T>()
            .ok_or_else(|| ToolError::Failed(format!("the host did not prepare {}", std::any::type_name::<T>())))
    }

    /// The specs of the offered tools. A family of run-time tools (MCP)
    /// may connect to learn its own.
    pub async fn specs(&self) -> Vec<ToolSpec> {
        let mut specs = Vec::new();
        for tool in self.tools.iter() {
            specs.extend(tool.specs(self).await);
        }
        specs
    }

    /// Runs a typed call through the host-call path: a guest's, or the
    /// loop's model turn.
    pub async fn call<C: MaybeTool>(&self, call: &C, args: C::Args) -> Result<C::Output, C::Error> {
        guest(self, call, args).await
    }

    /// Runs a guest's import: [`ToolContext::call`], except that once the
    /// run halted (it suspended, or its replay diverged) the guest does not
    /// get an answer: its call traps, which unwinds it.
    pub async fn guest_call<C: MaybeTool>(
        &self,
        call: &C,
        args: C::Args,
    ) -> wasmtime::Result<Result<C::Output, C::Error>> {
        let out = guest(self, call, args).await;
        self.unwind_if_halted()?;
        Ok(out)
    }

    /// The trap that unwinds a guest whose run halted.
    pub fn unwind_if_halted(&self) -> wasmtime::Result<()> {
        match self.halted() {
            Some(why) => Err(wasmtime::Error::new(crate::journal::Halted(why))),
            None => Ok(()),
        }
    }

    /// Why the run halted (it suspended, or its replay diverged), if it
    /// did: no call may then run, and its caller stops.
    pub fn halted(&self) -> Option<String> {
        self.journal.as_ref().and_then(|j| j.halted()).map(|h| h.summary())
    }

    /// hooks, before a prompt: what the run's hooks make of a model turn's
    /// request, journaled as its own entry like a call's. A redaction is
    /// made in `request` itself, so the conversation keeps it; a refusal is
    /// the turn's error, and nothing is sent.
    pub async fn before_prompt(&self, request: &mut nexo_model::Request) -> Result<(), nexo_model::ModelError> {
        let journal = self.journal.as_deref();
        let hooks = self.hooks.as_deref();
        if hooks.is_none() && !journal.is_some_and(|j| j.recorded_next(crate::manifest::interface::HOOK)) {
            return Ok(());
        }
        let mut messages = serde_json::to_value(&request.messages).unwrap_or(Value::Null);
        let arguments = serde_json::json!({"model": request.model, "messages": messages});
        let asks = hooks.is_some_and(|h| h.wants(HookEvent::BeforePrompt));
        let (shown, seen, mut live) = (&mut messages, &*request, false);
        let asked = &mut live;
        let ask = async move {
            let Some(hooks) = hooks.filter(|_| asks) else { return crate::hooks::PromptBefore::default() };
            *asked = true;
            let system = seen.messages.iter().find_map(|m| match m {
                nexo_model::Message::System { text } => Some(text.clone()),
                _ => None,
            });
            let mut prompt = crate::hooks::Prompt {
                agent: self.authority.agent().to_string(),
                model: seen.model.clone(),
                system: system.unwrap_or_default(),
                messages: shown.to_string(),
            };
            hooks.before_prompt(&mut prompt, shown, &*self.events).await
        };
        // A hook that fails before a prompt stops the run unrecorded (its
        // failure may pass: a deadline under load), so a resume asks again.
        let stops = |d: &crate::hooks::PromptBefore| {
            d.failed.then(|| {
                let why = d.denied.clone().unwrap_or_default();
                format!("{why}; the run stopped: fix the hook, then `nexo runs resume` asks it again")
            })
        };
        let journaled = journal.map(|j| (j, &arguments));
        let Some(decided) = hook_decision(journaled, BEFORE_PROMPT, asks, ask, stops).await else {
            return Ok(());
        };
        if let Some(why) = decided.denied {
            return Err(nexo_model::ModelError::Refused(why));
        }
        if decided.cuts.is_empty() {
            return Ok(());
        }
        // Live, the hooks cut `messages` as they went; a replay makes the
        // recorded cuts in the same conversation.
        if !live {
            for cuts in &decided.cuts {
                cuts.apply(&mut messages);
            }
        }
        request.messages = serde_json::from_value(messages).map_err(|e| {
            nexo_model::ModelError::Refused(format!(
                "the hooks' redaction left a prompt the host cannot read ({e}), so it was not sent"
            ))
        })?;
        Ok(())
    }

    /// Runs one of the model's tool calls: the offered tool of that name, or
    /// an error listing the tools there are.
    pub async fn call_model(&self, turn: u32, call: &ToolCall) -> ModelReply {
        if let Some(tool) = self.tools.iter().find(|t| t.serves(self, &call.name)) {
            return tool.call_model(self, turn, call).await;
        }
        let names: Vec<String> = self.tools.iter().flat_map(|t| t.names(self)).collect();
        let mut text = format!("there is no tool `{}`; the tools are: {}", call.name, names.join(", "));
        // A tool the model expected may be one the operator's settings
        // withhold: say so, in the authority's words, rather than leave it
        // guessing.
        for (i, (cap, why)) in self.authority.withheld().into_iter().enumerate() {
            let lead = if i == 0 { "; withheld from this run by the operator's settings:" } else { ";" };
            text.push_str(&format!("{lead} the tools of `{}` ({})", cap.as_str(), why.message()));
        }
        let e = ToolError::InvalidInput(text);
        call_event(self, turn, call);
        let reply = ModelReply { content: format!("error: {}", e.message()), ..ModelReply::error(&e) };
        result_event(self, turn, call, &reply);
        reply
    }
}

/// Runs one of the model's calls through the host-call path with `call`
/// as its handler: for a family of tools (MCP) whose [`DynTool`] picks the
/// handler per call.
pub async fn model_call<C: MaybeTool>(cx: &ToolContext, call: &C, turn: u32, tool_call: &ToolCall) -> ModelReply {
    match enter(cx, call, Origin::Model { turn, call: tool_call }).await {
        Reply::Model(reply) => reply,
        Reply::Guest(_) => unreachable!("a model call gets a model reply"),
    }
}

/// Runs a guest's import through the host-call path, in any world.
pub async fn guest<Cx: CallContext, C: MaybeTool<Cx>>(cx: &Cx, call: &C, args: C::Args) -> Result<C::Output, C::Error> {
    match enter(cx, call, Origin::Guest(args)).await {
        Reply::Guest(result) => result,
        Reply::Model(_) => unreachable!("a guest call gets a typed reply"),
    }
}

/// Runs a guest's import that never waits through the same path, without
/// an async host function: for calls the journal skips whose handler
/// finishes without awaiting (`log`). Linked with `func_wrap`, such an
/// import costs no async call frame per call. A handler that does wait is
/// a host bug, refused rather than blocked on.
pub fn guest_now<Cx: CallContext, C: MaybeTool<Cx>>(cx: &Cx, call: &C, args: C::Args) -> Result<C::Output, C::Error> {
    debug_assert!(call.effect() == Effect::Skip, "`{}` is journaled: link it as an async import", call.name());
    let (decoded, model) = decode(cx, call, Origin::Guest(args));
    let admitted = match admit(cx, call, decoded, model, &Before::default()) {
        Ok(admitted) => admitted,
        Err(Reply::Guest(result)) => return result,
        Err(Reply::Model(_)) => unreachable!("a guest call gets a typed reply"),
    };
    let result = match admitted.allowed {
        Ok(args) => {
            let mut handler = call.execute(cx, args);
            match handler.as_mut().poll(&mut std::task::Context::from_waker(std::task::Waker::noop())) {
                std::task::Poll::Ready(out) => out.map(|out| call.truncate(cx, out)),
                std::task::Poll::Pending => Err(C::Error::from(ToolError::Failed(format!(
                    "the host's `{}` waited, which a synchronous import cannot do",
                    call.name()
                )))),
            }
        }
        Err(refusal) => Err(C::Error::from(refusal)),
    };
    audit(cx, admitted.used, &result);
    mark(cx, admitted.source, &result);
    match conclude(cx, call, None, result) {
        Reply::Guest(result) => result,
        Reply::Model(_) => unreachable!("a guest call gets a typed reply"),
    }
}

/// The path, in an `execute_tool` span when tracing is on and the call is
/// a tool's: the model's, or a guest's call that needs a capability.
async fn enter<Cx: CallContext, C: MaybeTool<Cx>>(
    cx: &Cx,
    call: &C,
    origin: Origin<'_, C::Args>,
) -> Reply<C::Output, C::Error> {
    let span = tool_span(call, &origin);
    if span.is_off() {
        return steps(cx, call, origin).await;
    }
    let reply = span.under(steps(cx, call, origin)).await;
    match &reply {
        Reply::Model(r) => spans::tool_result(&span, r.verdict, r.is_error.then_some(r.verdict), Some(&r.content)),
        Reply::Guest(Ok(out)) => {
            let shown = traces::capture_content().then(|| serde_json::to_string(out).unwrap_or_default());
            spans::tool_result(&span, "allowed", None, shown.as_deref());
        }
        Reply::Guest(Err(e)) => {
            let kind = e.refusal().unwrap_or("failed");
            spans::tool_result(&span, kind, Some(kind), None);
        }
    }
    reply
}

/// The `execute_tool` span of a call, or a disabled one.
fn tool_span<Cx: CallContext, C: HostCall<Cx>>(call: &C, origin: &Origin<'_, C::Args>) -> spans::Span {
    match origin {
        Origin::Model { call: model_call, .. } => {
            spans::tool_span(&model_call.name, Some(&model_call.id), "function", Some(&model_call.arguments))
        }
        Origin::Guest(args) if call.capability().is_some() || call.interface() == crate::manifest::interface::MCP => {
            let shown = traces::capture_content().then(|| serde_json::to_value(args).unwrap_or(Value::Null));
            spans::tool_span(call.name(), None, "function", shown.as_ref())
        }
        Origin::Guest(_) => spans::Span::off(),
    }
}

/// The path itself: [`admit`], the handler, the journal's record, then
/// [`conclude`]. The two sync steps are shared with [`guest_now`].
async fn steps<Cx: CallContext, C: MaybeTool<Cx>>(
    cx: &Cx,
    call: &C,
    origin: Origin<'_, C::Args>,
) -> Reply<C::Output, C::Error> {
    let (mut decoded, mut model) = decode(cx, call, origin);
    // hooks: asked before the gate; a model's call may come back rewritten
    let (mut before, mut view, mut rewritten) = (Before::default(), None, None::<ToolCall>);
    let seen = decoded.as_ref().ok().and_then(|args| hook_view(cx, call, args, model));
    if let Some((seen, arguments)) = seen
        && let Some((decided, seen)) = hooks_before(cx, call, seen, arguments, model).await
    {
        view = Some(seen);
        if let (Some(arguments), Some((turn, model_call))) = (&decided.arguments, model) {
            let again = ToolCall { arguments: arguments.clone(), ..model_call.clone() };
            decoded = call.decode_json(&again.arguments);
            model = Some((turn, &*rewritten.insert(again)));
            // The hooks see the call's result as the call that ran.
            if let Some((seen, _)) = decoded.as_ref().ok().and_then(|args| hook_view(cx, call, args, model)) {
                view = Some(seen);
            }
        }
        before = decided;
    }
    let Admitted { allowed, model, live, used, source } = match admit(cx, call, decoded, model, &before) {
        Ok(admitted) => admitted,
        Err(reply) => return reply,
    };
    // execute, then truncate; audited even if this future is dropped mid-call
    let audited = Audited { cx, used };
    let result = match allowed {
        Ok(args) => {
            let result = call.execute(cx, args).await;
            // hooks: they see the whole result (a secret cut in two by the
            // truncation would escape a redaction), and what they make of it
            // is what the caller, the journal and the audit see
            let result = match (cx.hooks(), &view) {
                (Some(hooks), Some(view)) if hooks.wants(HookEvent::AfterToolCall) => {
                    hooks_after::<Cx, C>(cx, hooks, view, result).await
                }
                _ => result,
            };
            result.map(|out| call.truncate(cx, out))
        }
        Err(refusal) => Err(C::Error::from(refusal)),
    };
    audited.finish(&result);
    mark(cx, source, &result);
    let record = live
        .filter(|_| result.as_ref().err().is_none_or(|e| call.journal_error(e)))
        .map(|(journal, seq, hash)| (journal, seq, hash, recorded(cx, call, &result)));
    // The result's event is pending before the entry commits, so it commits
    // with it: a replay answers the call without an event, and a process
    // that died after the entry but before the next commit lost it.
    let reply = conclude(cx, call, model, result);
    // journal: the result is recorded before the caller sees it
    if let Some((journal, seq, hash, text)) = record {
        journal.finish(seq, call.interface(), call.name(), &hash, text, call.effect()).await;
    }
    reply
}

/// What the path's first steps let through to the handler.
struct Admitted<'c, A> {
    /// The arguments, or the refusal the handler is not called for.
    allowed: Result<A, ToolError>,
    /// The model's turn and call, when the model made it.
    model: Option<(u32, &'c ToolCall)>,
    /// The journal entry the result goes to: journal, position, hash.
    live: Option<(&'c Journal, u64, String)>,
    /// The gate's decision, audited once the call has its final verdict.
    used: Option<CapabilityUse>,
    /// What the call's result brings into the run's context.
    source: Option<(Labels, String)>,
}

/// A result as the journal records it: a call that spans calls
/// ([`HostCall::spans_calls`]) records the labels the run holds with it.
fn recorded<Cx: CallContext, C: HostCall<Cx>>(cx: &Cx, call: &C, result: &Result<C::Output, C::Error>) -> String {
    if call.spans_calls() {
        serde_json::to_string(&serde_json::json!({"held": cx.held(), "result": result})).unwrap_or_default()
    } else {
        serde_json::to_string(result).unwrap_or_default()
    }
}

/// A recorded result, read back, with the labels its entry recorded (none
/// for a call that spans none, or an entry written before entries held
/// them).
fn replayed<O: serde::de::DeserializeOwned, E: serde::de::DeserializeOwned>(
    spans: bool,
    text: &str,
) -> (serde_json::Result<Result<O, E>>, Labels) {
    #[derive(serde::Deserialize)]
    struct Spanned<R> {
        held: Labels,
        result: R,
    }
    if spans && let Ok(Spanned { held, result }) = serde_json::from_str::<Spanned<Result<O, E>>>(text) {
        return (Ok(result), held);
    }
    (serde_json::from_str(text), Labels::NONE)
}

/// Marks what a result brought into the run's context: any result the
/// handler produced, an error included (it may quote what it read), but
/// not a refusal, for which nothing was read.
fn mark<Cx: CallContext, O, E: Refusal>(cx: &Cx, source: Option<(Labels, String)>, result: &Result<O, E>) {
    if let Some((labels, by)) = source
        && result.as_ref().err().is_none_or(|e| e.refusal().is_none())
    {
        cx.mark(labels, by);
    }
}

/// The most of a hook's replacement text a failed call's error carries.
const REPLACED_CHARS: usize = 16_000;

/// The journal's function for what the hooks decided before a call.
const BEFORE_TOOL_CALL: &str = "before-tool-call";

/// The journal's function for what the hooks decided before a prompt.
const BEFORE_PROMPT: &str = "before-prompt";

/// hooks, before the gate: what the run's hooks decide about a call the
/// gate decides on, and the call as they saw it; `None` when no hook is
/// asked and none decided before. A hook that rewrites the model's call
/// ends a round: the new arguments are decoded, and the hooks after it see
/// the call as rewritten (its detail too), each hook asked once.
async fn hooks_before<Cx: CallContext, C: MaybeTool<Cx>>(
    cx: &Cx,
    call: &C,
    mut view: HookCall,
    arguments: Option<Value>,
    model: Option<(u32, &ToolCall)>,
) -> Option<(Before, HookCall)> {
    let hooks = cx.hooks();
    let journal = cx.journal().filter(|_| call.effect() != Effect::Skip);
    let asks = hooks.is_some_and(|h| h.wants(HookEvent::BeforeToolCall));
    let seen = &mut view;
    let ask = async move {
        let Some(hooks) = hooks.filter(|_| asks) else { return Before::default() };
        let (mut from, mut asked, mut arguments, mut by) = (0, Vec::new(), None, Vec::new());
        loop {
            let (round, rewrote) = hooks.before(seen, from, cx.events()).await;
            asked.extend(round.ask);
            by.extend(round.by);
            let decided = |denied: Option<String>, arguments: Option<Value>| Before {
                denied,
                ask: (!asked.is_empty()).then(|| asked.join("; ")),
                arguments,
                by: by.clone(),
            };
            let (Some(at), Some(rewritten), Some((turn, model_call))) = (rewrote, round.arguments, model) else {
                return decided(round.denied, arguments);
            };
            let again = ToolCall { arguments: rewritten.clone(), ..model_call.clone() };
            match call.decode_json(&again.arguments) {
                Ok(args) => {
                    if let Some((next, _)) = hook_view(cx, call, &args, Some((turn, &again))) {
                        *seen = next;
                    }
                }
                Err(e) => {
                    let why = format!(
                        "a hook rewrote the call into arguments `{}` cannot take, so it was refused (hooks fail \
                         closed): {}",
                        call.name(),
                        e.message()
                    );
                    return decided(Some(why), None);
                }
            }
            arguments = Some(rewritten);
            from = at + 1;
        }
    };
    let journaled = journal.zip(arguments.as_ref());
    // A hook that fails before a call refuses it, and the refusal stands
    // like any other: the model reads it and goes on.
    let decided = hook_decision(journaled, BEFORE_TOOL_CALL, asks, ask, |_| None).await;
    if decided.is_none() && hooks.is_none() {
        return None;
    }
    Some((decided.unwrap_or_default(), view))
}

/// A hook decision at the run's next position, journaled as its own entry
/// (`nexo:plugin/hook`, `function`, hashed over `arguments`): read back
/// when the journal holds one there, so a replay asks no hook and a changed
/// hook cannot change the past; else made live by `ask` when some hook
/// `asks`, and journaled. `None` when there is neither: a call recorded
/// with no hook decision before it stands as it was.
async fn hook_decision<T, F>(
    journal: Option<(&Journal, &Value)>,
    function: &'static str,
    asks: bool,
    ask: F,
    stops: fn(&T) -> Option<String>,
) -> Option<T>
where
    T: serde::Serialize + serde::de::DeserializeOwned + Default,
    F: std::future::Future<Output = T>,
{
    let hook = crate::manifest::interface::HOOK;
    let (journal, arguments) = (journal.map(|(j, _)| j), journal.map(|(_, a)| a));
    let begin = match (journal, arguments) {
        (Some(j), Some(arguments)) if j.recorded_next(hook) || (asks && !j.replaying_next()) => {
            j.begin(hook, function, &crate::journal::hash_json(arguments))
        }
        (Some(_), _) => return None,
        (None, _) if asks => Begin::Unjournaled,
        (None, _) => return None,
    };
    match begin {
        Begin::Replay(text) => Some(serde_json::from_str(&text).unwrap_or_else(|e| {
            // The run halts: the call's own entry reports it.
            if let Some(j) = journal {
                let why = format!("the journal's entry for the hooks' `{function}` decision cannot be read: {e}");
                j.halt(crate::journal::Halt::Failed(why));
            }
            T::default()
        })),
        Begin::Halted(_) => None,
        Begin::Live(seq) => {
            let decided = ask.await;
            // A decision that stops the run is not recorded: the run's next
            // pass asks again, at the journal's end.
            if let (Some(j), Some(why)) = (journal, stops(&decided)) {
                j.halt(crate::journal::Halt::Failed(why));
                return Some(decided);
            }
            if let (Some(j), Some(arguments)) = (journal, arguments) {
                let text = serde_json::to_string(&decided).unwrap_or_default();
                j.finish(seq, hook, function, &crate::journal::hash_json(arguments), text, Effect::Read).await;
            }
            Some(decided)
        }
        Begin::Unjournaled => Some(ask.await),
    }
}

/// The call as the hooks see it, with its arguments as the journal hashes
/// them: `None` when no hook asks and no decision is to be replayed (the
/// common case costs one lookup), or for a call the gate does not decide
/// on.
fn hook_view<Cx: CallContext, C: MaybeTool<Cx>>(
    cx: &Cx,
    call: &C,
    args: &C::Args,
    model: Option<(u32, &ToolCall)>,
) -> Option<(HookCall, Option<Value>)> {
    let journal = cx.journal().filter(|_| call.effect() != Effect::Skip);
    if cx.hooks().is_none() && !journal.is_some_and(|j| j.recorded_next(crate::manifest::interface::HOOK)) {
        return None;
    }
    let detail = call.detail(args);
    let (capability, detail) = match call.gate(args, &detail) {
        Gate::Capability(cap, detail) => (cap.as_str(), detail.to_string()),
        Gate::Mcp { server, tool: Some(tool), .. } => ("mcp", format!("{server}/{tool}")),
        // Listing a server's tools acts on nothing: hooks see the calls.
        Gate::Mcp { tool: None, .. } | Gate::Open | Gate::Budget { .. } => return None,
    };
    // What a journal hashes the decision under, when there is one.
    let arguments = journal.map(|_| journal_value(call, model.map(|(_, c)| c), args));
    // What the hook sees is what a rewrite replaces: the model's own
    // arguments, not the journal's wrapping of them.
    let shown = match model {
        Some((_, c)) => c.arguments.to_string(),
        None => serde_json::to_string(args).unwrap_or_default(),
    };
    let view = HookCall {
        agent: cx.plugin().to_string(),
        capability: capability.to_string(),
        call: call.name().to_string(),
        tool: model.map(|(_, c)| c.name.clone()),
        detail,
        arguments: shown,
        // Turn 0 is no model's: a `checkpoint-all` step, the agent's own call.
        origin: match model {
            Some((turn, _)) if turn > 0 => HookOrigin::Model,
            _ => HookOrigin::Guest,
        },
        held: cx.held().names().into_iter().map(str::to_string).collect(),
    };
    Some((view, arguments))
}

/// hooks, after the handler: what the run's hooks make of a call's result.
/// A redaction keeps the result's shape; a replacement is the output when
/// the text can be one (a tool whose output is text), else the call fails
/// with it; a hook that failed withholds the result.
async fn hooks_after<Cx: CallContext, C: MaybeTool<Cx>>(
    cx: &Cx,
    hooks: &Hooks,
    view: &HookCall,
    result: Result<C::Output, C::Error>,
) -> Result<C::Output, C::Error> {
    let (output, is_error) = match &result {
        Ok(out) => (serde_json::to_string(out), false),
        Err(e) => (serde_json::to_string(e), true),
    };
    let output = output.unwrap_or_default();
    let unreadable = |name: &str| {
        C::Error::from(ToolError::Denied(format!(
            "the hooks' redaction left a result `{name}` cannot give back, so it was withheld"
        )))
    };
    match hooks.after(view, output, is_error, cx.events()).await {
        Outcome::Kept => result,
        Outcome::Redacted(value) if is_error => {
            Err(serde_json::from_value::<C::Error>(value).unwrap_or_else(|_| unreadable(&view.call)))
        }
        Outcome::Redacted(value) => serde_json::from_value::<C::Output>(value).map_err(|_| unreadable(&view.call)),
        // Text the output cannot be is given as a failure, not a refusal:
        // it reaches the model, so the call still brings in what it read
        // (a hook cannot wash a page's label off), cut as a page is.
        Outcome::Replaced(text) => serde_json::from_value::<C::Output>(Value::String(text.clone()))
            .or_else(|_| serde_json::from_str::<C::Output>(&text))
            .map_err(|_| {
                let text = crate::truncate::head_chars(&text, REPLACED_CHARS);
                C::Error::from(ToolError::Failed(format!("a hook replaced the result: {text}")))
            }),
        Outcome::Withheld(why) => Err(C::Error::from(ToolError::Denied(why))),
    }
}

/// decode: WIT arguments are checked for size, the model's JSON parsed.
#[allow(clippy::type_complexity)]
fn decode<'c, Cx: CallContext, C: MaybeTool<Cx>>(
    cx: &Cx,
    call: &C,
    origin: Origin<'c, C::Args>,
) -> (Result<C::Args, ToolError>, Option<(u32, &'c ToolCall)>) {
    match origin {
        Origin::Guest(args) => {
            let size = call.arg_bytes(&args);
            let decoded = if size > cx.arg_limit() {
                Err(ToolError::InvalidInput(format!(
                    "the arguments to `{}` are {size} bytes; the limit is {}",
                    call.name(),
                    cx.arg_limit()
                )))
            } else {
                Ok(args)
            };
            (decoded, None)
        }
        Origin::Model { turn, call: model_call } => (call.decode_json(&model_call.arguments), Some((turn, model_call))),
    }
}

/// journal (a recorded call is answered from it), authorize (after what
/// the hooks decided, `before`), event. `Err` is the reply when the call
/// ends here.
#[allow(clippy::type_complexity)]
fn admit<'c, Cx: CallContext, C: MaybeTool<Cx>>(
    cx: &'c Cx,
    call: &C,
    decoded: Result<C::Args, ToolError>,
    model: Option<(u32, &'c ToolCall)>,
    before: &Before,
) -> Result<Admitted<'c, C::Args>, Reply<C::Output, C::Error>> {
    // journal: a recorded call is answered from the journal
    let (mut live, mut unpositioned) = (None, None);
    if let (Some(journal), Ok(args)) = (cx.journal().filter(|_| call.effect() != Effect::Skip), &decoded) {
        let hash = match model {
            Some((_, model_call)) => crate::journal::hash_json(&journal_value(call, Some(model_call), args)),
            None => call.journal_hash(args),
        };
        match journal.begin(call.interface(), call.name(), &hash) {
            Begin::Replay(text) => {
                spans::replayed();
                let (result, held) = replayed::<C::Output, C::Error>(call.spans_calls(), &text);
                let result = result.unwrap_or_else(|e| {
                    let why = format!("the journal's entry for `{}` cannot be read: {e}", call.name());
                    journal.halt(crate::journal::Halt::Failed(why.clone()));
                    Err(C::Error::from(ToolError::Failed(why)))
                });
                if !held.is_empty() {
                    cx.mark(held, format!("`{}`, replayed", call.name()));
                }
                // The replayed result brings in what the live one did.
                let detail = call.detail(args);
                mark(cx, cx.source(&call.gate(args, &detail), call.brings(args), call.name()), &result);
                return Err(match model {
                    None => Reply::Guest(result),
                    Some(_) => Reply::Model(call.reply(result)),
                });
            }
            Begin::Live(seq) => live = Some((journal, seq, hash)),
            Begin::Unjournaled => unpositioned = Some((journal, hash)),
            Begin::Halted(why) => {
                let e = C::Error::from(ToolError::Failed(why));
                return Err(match model {
                    None => Reply::Guest(Err(e)),
                    Some(_) => Reply::Model(call.reply(Err(e))),
                });
            }
        }
    }
    // authorize; under `approve`, a recorded run asks its journal for the
    // operator's decision on exactly this call
    let (mut used, mut source) = (None, None);
    let allowed = decoded.and_then(|args| {
        let detail = call.detail(&args);
        let gate = call.gate(&args, &detail);
        let authorized = match &before.denied {
            Some(why) => Err(ToolError::Denied(why.clone())),
            None => cx.authorize(&gate, call.name(), before.ask.as_deref()),
        };
        let verdict = match authorized {
            Err(ToolError::ApprovalRequired(message)) => match (&live, &unpositioned) {
                (Some((journal, seq, hash)), _) => {
                    let arguments = journal_value(call, model.map(|(_, c)| c), &args);
                    journal.approval(*seq, gate.subject(), call.name(), &arguments, hash, message)
                }
                // An unjournaled call has no position: its approval binds to
                // the call itself wherever it comes again.
                (None, Some((journal, hash))) => {
                    let arguments = journal_value(call, model.map(|(_, c)| c), &args);
                    journal.approval(UNPOSITIONED, gate.subject(), call.name(), &arguments, hash, message)
                }
                (None, None) => Err(ToolError::ApprovalRequired(message)),
            },
            verdict => verdict,
        };
        // kept for the audit, which waits for the final verdict
        if cx.audit().is_some() {
            // A hook's ask shows in the refusal it led to; a refusal of the
            // gate's own (a capability not granted, a command rule) is not the hook's.
            let hook_asked = |e: &ToolError| before.ask.as_deref().is_some_and(|ask| e.message().contains(ask));
            // The guard's own hold stays the guard's when a hook asked too.
            let guard = match &verdict {
                Ok(()) => None,
                Err(_) if before.denied.is_some() => Some("hook"),
                Err(_) if cx.guarded(&gate) => Some("data-flow"),
                Err(e) if hook_asked(e) => Some("hook"),
                Err(_) => None,
            };
            used = capability_use(&gate, call.name(), model.map(|(_, c)| c), &verdict, guard);
            if let Some(used) = used.as_mut().filter(|_| verdict.is_err()) {
                used.hooks.clone_from(&before.by);
            }
        }
        if verdict.is_ok() {
            source = cx.source(&gate, call.brings(&args), call.name());
        }
        verdict.map(|()| args)
    });
    // event
    if let Some((turn, model_call)) = model {
        if let Some((journal, seq, _)) = &live {
            journal.link_call(turn, &model_call.id, *seq);
        }
        call_event(cx, turn, model_call);
    }
    Ok(Admitted { allowed, model, live, used, source })
}

/// A call's arguments as the journal hashes them and an approval shows
/// them: the model's JSON as it came, or the typed arguments' JSON.
fn journal_value<Cx: CallContext, C: HostCall<Cx> + ?Sized>(
    call: &C,
    model: Option<&ToolCall>,
    args: &C::Args,
) -> Value {
    call.journal_arguments(match model {
        Some(model_call) => model_call.arguments.clone(),
        None => serde_json::to_value(args).unwrap_or(Value::Null),
    })
}

/// The gate's decision on a call, as the audit keeps it; `None` for a
/// call the gate does not decide on.
fn capability_use(
    gate: &Gate<'_>,
    call: &'static str,
    model: Option<&ToolCall>,
    verdict: &Result<(), ToolError>,
    guard: Option<&'static str>,
) -> Option<CapabilityUse> {
    let (server, server_tool) = match gate {
        Gate::Open => return None,
        Gate::Capability(..) | Gate::Budget { .. } => (None, None),
        Gate::Mcp { server, tool, .. } => (Some(server.to_string()), tool.map(str::to_string)),
    };
    Some(CapabilityUse {
        capability: gate.subject(),
        call,
        tool: model.map(|c| c.name.clone()),
        server,
        server_tool,
        origin: if model.is_some() { "model" } else { "guest" },
        verdict: verdict.as_ref().err().map_or("allowed", ToolError::kind),
        guard,
        hooks: Vec::new(),
    })
}

/// audit: the gate's decision with the call's final verdict. A call the
/// gate allowed and its handler refused (a host off the list, a private
/// address, a spent quota) is recorded as refused; one that merely failed
/// stays `allowed`, which is what the authority decided.
fn audit<Cx: CallContext, O, E: Refusal>(cx: &Cx, used: Option<CapabilityUse>, result: &Result<O, E>) {
    let (Some(sink), Some(mut used)) = (cx.audit(), used) else { return };
    if used.verdict == "allowed"
        && let Err(e) = result
        && let Some(refused) = e.refusal()
    {
        used.verdict = refused;
    }
    sink.record(used);
}

/// The gate's decision, audited exactly once: with the call's final
/// verdict when it returns, or as the gate decided it when the call's
/// future is dropped mid-call (cancel, timeout, kill), for the call may
/// have happened.
struct Audited<'c, Cx: CallContext> {
    cx: &'c Cx,
    used: Option<CapabilityUse>,
}

impl<Cx: CallContext> Audited<'_, Cx> {
    /// Audits the decision with the call's final verdict.
    fn finish<O, E: Refusal>(mut self, result: &Result<O, E>) {
        audit(self.cx, self.used.take(), result);
    }
}

impl<Cx: CallContext> Drop for Audited<'_, Cx> {
    fn drop(&mut self) {
        if let (Some(sink), Some(used)) = (self.cx.audit(), self.used.take()) {
            sink.record(used);
        }
    }
}

/// result: the typed result for a guest, the rendered reply (and its
/// event) for the model.
fn conclude<Cx: CallContext, C: MaybeTool<Cx>>(
    cx: &Cx,
    call: &C,
    model: Option<(u32, &ToolCall)>,
    result: Result<C::Output, C::Error>,
) -> Reply<C::Output, C::Error> {
    match model {
        None => Reply::Guest(result),
        Some((turn, model_call)) => {
            let reply = call.reply(result);
            // A call the run suspended in (it waits for a child run) has
            // no result yet: the pass that resumes it gives one.
            if reply.verdict != SUSPENDED {
                result_event(cx, turn, model_call, &reply);
            }
            Reply::Model(reply)
        }
    }
}

fn call_event<Cx: CallContext>(cx: &Cx, turn: u32, call: &ToolCall) {
    cx.events().emit(&Event::ToolCall {
        turn,
        id: call.id.clone(),
        name: call.name.clone(),
        arguments: call.arguments.clone(),
    });
}

fn result_event<Cx: CallContext>(cx: &Cx, turn: u32, call: &ToolCall, reply: &ModelReply) {
    cx.events().emit(&Event::ToolResult {
        turn,
        id: call.id.clone(),
        name: call.name.clone(),
        verdict: reply.verdict.to_string(),
        summary: summary(&reply.content),
    });
}

/// What the path needs of a call only the model makes: JSON decoding and
/// rendering. Every [`Tool`] has it; a guest-only [`HostCall`] implements it
/// with refusals the path never reaches (see [`guest_only!`](crate::guest_only)).
pub trait MaybeTool<Cx: CallContext = ToolContext>: HostCall<Cx> {
    /// Parses the model's arguments.
    fn decode_json(&self, arguments: &Value) -> Result<Self::Args, ToolError>;
    /// The model's reply for a result.
    fn reply(&self, result: Result<Self::Output, Self::Error>) -> ModelReply;
}

impl<T: Tool> MaybeTool<ToolContext> for T {
    fn decode_json(&self, arguments: &Value) -> Result<Self::Args, ToolError> {
        self.decode(arguments)
    }

    fn reply(&self, result: Result<Self::Output, ToolError>) -> ModelReply {
        match result {
            Ok(out) => ModelReply { content: self.render(&out), is_error: false, verdict: "allowed", approval: None },
            Err(e) => ModelReply::error(&e),
        }
    }
}

/// The first line of a result, for progress displays.
fn summary(text: &str) -> String {
    crate::truncate::first_line(text, 120)
}

/// Implements [`MaybeTool`] for a host call the model does not make (a
/// guest's import, the loop's model turn), in context `$cx` (or, with
/// `for<Cx: Bound>` first, in every context of that bound; with `for<'a>`,
/// for a call that borrows).
#[macro_export]
macro_rules! guest_only {
    (for<$g:ident: $bound:path> $call:ty, $cx:ty) => {
        $crate::guest_only!(@impl [$g: $bound] $call, $cx);
    };
    (for<$l:lifetime> $call:ty, $cx:ty) => {
        $crate::guest_only!(@impl [$l] $call, $cx);
    };
    ($call:ty, $cx:ty) => {
        $crate::guest_only!(@impl [] $call, $cx);
    };
    (@impl [$($generics:tt)*] $call:ty, $cx:ty) => {
        impl<$($generics)*> $crate::host_call::MaybeTool<$cx> for $call {
            fn decode_json(&self, _arguments: &serde_json::Value) -> Result<Self::Args, $crate::error::ToolError> {
                Err($crate::error::ToolError::Unsupported(format!(
                    "`{}` is not a model tool",
                    $crate::host_call::HostCall::<$cx>::name(self)
                )))
            }

            fn reply(&self, _result: Result<Self::Output, Self::Error>) -> $crate::host_call::ModelReply {
                $crate::host_call::ModelReply {
                    content: "error: not a model tool".into(),
                    is_error: true,
                    verdict: "invalid-input",
                    approval: None,
                }
            }
        }
    };
}
