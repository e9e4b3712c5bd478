//! The host-call path: every guest import of the agent world and every tool
//! call the model makes enters [`ToolContext::enter`], which runs the same
//! steps in the same order:
//!
//! ```text
//! decode → authorize → event → execute → truncate → result
//! ```
//!
//! - **decode**: WIT arguments arrive typed, and their size is checked; the
//!   model's arrive as JSON and the call parses them.
//! - **authorize**: the run's one [`Authority`] decides.
//! - **event**: a model's call is reported to the run's [`EventSink`].
//! - **execute**: the call's handler, with its unit's per-instance state.
//! - **truncate**: the call's own cut, through the one truncation routine.
//! - **result**: a typed value for the guest, or text (and a result event)
//!   for the model.
//!
//! The journal, metering and the audit log are each one more step here.
//! A call is defined once, in its capability unit's file: a [`HostCall`]
//! (and, when the model may call it, a [`Tool`]).

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;

use nexo_model::{BoxFuture, ToolCall, ToolSpec};
use serde_json::Value;

use crate::authority::Authority;
use crate::error::ToolError;
use crate::events::{Event, EventSink};
use crate::manifest::Capability;

/// One host call: its name, the capability it needs, and its handler.
pub trait HostCall: Send + Sync + 'static {
    /// The decoded arguments.
    type Args: Send;
    /// What the handler returns.
    type Output: Send;
    /// How the call fails; a refusal of the gate is one such failure.
    type Error: From<ToolError> + Send;

    /// The import's name in the WIT, such as `read-file`; the gate's
    /// messages and log use it.
    fn name(&self) -> &'static str;

    /// The capability the call needs; `None` for calls every agent may make.
    fn capability(&self) -> Option<Capability> {
        None
    }

    /// What the gate and its hooks see of the arguments: a path, a command,
    /// a URL.
    fn detail(&self, _args: &Self::Args) -> String {
        String::new()
    }

    /// The bytes a guest hands over, for the size limit on host arguments.
    fn arg_bytes(&self, _args: &Self::Args) -> usize {
        0
    }

    /// Does the work, after the gate allowed it.
    fn execute<'a>(&'a self, cx: &'a ToolContext, args: Self::Args)
    -> BoxFuture<'a, Result<Self::Output, Self::Error>>;

    /// Caps the output before anyone sees it, through the one truncation
    /// routine ([`crate::truncate`]). Default: as is.
    fn truncate(&self, _cx: &ToolContext, output: Self::Output) -> Self::Output {
        output
    }
}

/// A host call the model may also make, as a tool.
pub trait Tool: HostCall<Error = ToolError> {
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
enum Origin<'a> {
    /// A guest import, with typed arguments.
    Guest,
    /// The model, in turn `turn`.
    Model { turn: u32, call: &'a ToolCall },
}

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
    fn error(e: &ToolError) -> Self {
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

/// A [`Tool`] behind a pointer, so a run can hold tools of every unit.
pub trait DynTool: Send + Sync {
    /// The name the model sees.
    fn model_name(&self) -> &'static str;
    /// Whether it is offered in this run.
    fn offered(&self, cx: &ToolContext) -> bool;
    /// Its spec.
    fn spec(&self, cx: &ToolContext) -> ToolSpec;
    /// Runs one model call through the host-call path.
    fn call_model<'a>(&'a self, cx: &'a ToolContext, turn: u32, call: &'a ToolCall) -> BoxFuture<'a, ModelReply>;
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
        Box::pin(async move {
            match cx.enter(self, None, Origin::Model { turn, call }).await {
                Reply::Model(reply) => reply,
                Reply::Guest(_) => unreachable!("a model call gets a model reply"),
            }
        })
    }
}

/// The result step's two forms.
enum Reply<O, E> {
    Guest(Result<O, E>),
    Model(ModelReply),
}

/// Per-instance state of the capability units, one value per type.
#[derive(Default)]
pub struct UnitState {
    values: HashMap<TypeId, Box<dyn Any + Send + Sync>>,
}

impl UnitState {
    /// Stores a unit's state, replacing one of the same type.
    pub fn insert<T: Send + Sync + 'static>(&mut self, value: T) {
        self.values.insert(TypeId::of::<T>(), Box::new(value));
    }

    /// A unit's state, if the unit prepared one.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.values.get(&TypeId::of::<T>()).and_then(|v| v.downcast_ref())
    }
}

/// Everything a run's host calls need: the authority, where events go, the
/// tools, and each unit's per-instance state.
pub struct ToolContext {
    authority: Arc<Authority>,
    events: Arc<dyn EventSink>,
    arg_limit: usize,
    tools: Vec<Arc<dyn DynTool>>,
    state: UnitState,
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tools: Vec<&str> = self.tools.iter().map(|t| t.model_name()).collect();
        f.debug_struct("ToolContext").field("authority", &self.authority).field("tools", &tools).finish_non_exhaustive()
    }
}

impl ToolContext {
    /// A context from its parts; `arg_limit` caps what a guest hands to one call.
    pub fn new(
        authority: Authority,
        events: Arc<dyn EventSink>,
        arg_limit: usize,
        tools: Vec<Arc<dyn DynTool>>,
        state: UnitState,
    ) -> Self {
        ToolContext { authority: Arc::new(authority), events, arg_limit, tools, state }
    }

    /// The run's authority.
    pub fn authority(&self) -> &Authority {
        &self.authority
    }

    /// Where the run's events go.
    pub fn events(&self) -> &dyn EventSink {
        &*self.events
    }

    /// A unit's per-instance state. Missing state is a host bug, reported
    /// as a failed call rather than a panic.
    pub fn state<T: Send + Sync + 'static>(&self) -> Result<&T, ToolError> {
        self.state
            .get::<T>()
            .ok_or_else(|| ToolError::Failed(format!("the host did not prepare {}", std::any::type_name::<T>())))
    }

    /// The tools offered to the model, in unit order.
    pub fn offered_tools(&self) -> impl Iterator<Item = &Arc<dyn DynTool>> {
        self.tools.iter().filter(|t| t.offered(self))
    }

    /// The specs of the offered tools.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.offered_tools().map(|t| t.spec(self)).collect()
    }

    /// Runs a guest's call through the host-call path.
    pub async fn call<C: MaybeTool>(&self, call: &C, args: C::Args) -> Result<C::Output, C::Error> {
        match self.enter(call, Some(args), Origin::Guest).await {
            Reply::Guest(result) => result,
            Reply::Model(_) => unreachable!("a guest call gets a typed reply"),
        }
    }

    /// Runs one of the model's tool calls: the offered tool of that name, or
    /// an error listing the tools there are.
    pub async fn call_model(&self, turn: u32, call: &ToolCall) -> ModelReply {
        if let Some(tool) = self.offered_tools().find(|t| t.model_name() == call.name) {
            return tool.call_model(self, turn, call).await;
        }
        let names: Vec<&str> = self.offered_tools().map(|t| t.model_name()).collect();
        let e =
            ToolError::InvalidInput(format!("there is no tool `{}`; the tools are: {}", call.name, names.join(", ")));
        self.call_event(turn, call);
        let reply = ModelReply { content: format!("error: {}", e.message()), ..ModelReply::error(&e) };
        self.result_event(turn, call, &reply);
        reply
    }

    /// The path itself. `args` is `None` for a model's call, whose JSON
    /// arguments are in `origin`.
    async fn enter<C: HostCall>(
        &self,
        call: &C,
        args: Option<C::Args>,
        origin: Origin<'_>,
    ) -> Reply<C::Output, C::Error>
    where
        C: MaybeTool,
    {
        // decode
        let decoded = match (&origin, args) {
            (Origin::Guest, Some(args)) => {
                let size = call.arg_bytes(&args);
                if size > self.arg_limit {
                    Err(ToolError::InvalidInput(format!(
                        "the arguments to `{}` are {size} bytes; the limit is {}",
                        call.name(),
                        self.arg_limit
                    )))
                } else {
                    Ok(args)
                }
            }
            (Origin::Model { call: model_call, .. }, _) => call.decode_json(&model_call.arguments),
            (Origin::Guest, None) => Err(ToolError::InvalidInput(format!("`{}` got no arguments", call.name()))),
        };
        // authorize
        let allowed = decoded.and_then(|args| match call.capability() {
            Some(cap) => self.authority.authorize(cap, call.name(), &call.detail(&args)).map(|()| args),
            None => Ok(args),
        });
        // event
        if let Origin::Model { turn, call: model_call } = &origin {
            self.call_event(*turn, model_call);
        }
        // execute, then truncate
        let result = match allowed {
            Ok(args) => call.execute(self, args).await.map(|out| call.truncate(self, out)),
            Err(refusal) => Err(C::Error::from(refusal)),
        };
        // result
        match origin {
            Origin::Guest => Reply::Guest(result),
            Origin::Model { turn, call: model_call } => {
                let reply = call.reply(result);
                self.result_event(turn, model_call, &reply);
                Reply::Model(reply)
            }
        }
    }

    fn call_event(&self, turn: u32, call: &ToolCall) {
        self.events.emit(&Event::ToolCall {
            turn,
            id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        });
    }

    fn result_event(&self, turn: u32, call: &ToolCall, reply: &ModelReply) {
        self.events.emit(&Event::ToolResult {
            turn,
            id: call.id.clone(),
            name: call.name.clone(),
            verdict: reply.verdict.to_string(),
            summary: summary(&reply.content),
        });
    }
}

/// What the path needs of a call only the model makes: JSON decoding and
/// rendering. Every [`Tool`] has it; a guest-only [`HostCall`] gets the
/// refusals below, which the path never reaches for it.
pub trait MaybeTool: HostCall {
    /// Parses the model's arguments.
    fn decode_json(&self, arguments: &Value) -> Result<Self::Args, ToolError>;
    /// The model's reply for a result.
    fn reply(&self, result: Result<Self::Output, Self::Error>) -> ModelReply;
}

impl<T: Tool> MaybeTool for T {
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
    let line = text.lines().next().unwrap_or("");
    if line.chars().count() > 120 || text.lines().nth(1).is_some() {
        format!("{}…", line.chars().take(120).collect::<String>())
    } else {
        line.to_string()
    }
}
