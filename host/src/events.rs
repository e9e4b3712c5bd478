//! What a run reports while it happens: one [`Event`] per step, in order,
//! to an [`EventSink`] (the CLI's progress display, `--json` lines, and
//! later the server's event stream and the journal).

use std::sync::Arc;

use serde::Serialize;

/// How a prompt ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case", tag = "status")]
pub enum Status {
    /// The model gave its final answer. Named `done`, as a finished run's
    /// status is (`completed` is still read, from older journals).
    #[serde(rename = "done", alias = "completed")]
    Completed,
    /// The turn cap was reached; the answer is partial.
    TurnLimit,
    /// The token budget was used up; the answer is partial.
    TokenBudget,
    /// An action needs approval before the run can go on.
    ApprovalRequired {
        /// The tool.
        tool: String,
        /// Why, from the gate.
        detail: String,
    },
}

/// One thing that happened during a prompt.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "event")]
pub enum Event {
    /// A model turn begins.
    TurnStarted {
        /// 1-based.
        turn: u32,
    },
    /// The model has worked on a turn this long without answering: said
    /// every [`crate::agent_loop::WAITING_EVERY`], so a slow model is seen
    /// to be slow rather than stuck (for the display: not recorded).
    Waiting {
        /// The turn.
        turn: u32,
        /// Whole seconds since the turn was sent.
        seconds: u64,
    },
    /// Streamed text.
    TextDelta {
        /// The piece of text.
        text: String,
    },
    /// The model called a tool.
    ToolCall {
        /// The turn.
        turn: u32,
        /// The call id.
        id: String,
        /// The tool.
        name: String,
        /// Its arguments.
        arguments: serde_json::Value,
    },
    /// A tool call finished.
    ToolResult {
        /// The turn.
        turn: u32,
        /// The call id.
        id: String,
        /// The tool.
        name: String,
        /// `allowed`, or the error's kind: `denied`, `approval-required`,
        /// `unsupported`, `security`, `not-found`, `invalid-input`, `timeout`
        /// or `failed`. It always names the same kind as the error text.
        verdict: String,
        /// The start of the result or error, for display.
        summary: String,
    },
    /// A hook decided something beyond letting a call or a prompt pass as
    /// it was.
    Hook {
        /// The hook.
        hook: String,
        /// `before-tool-call`, `after-tool-call` or `before-prompt`.
        moment: String,
        /// The call (the model's tool name, or the host call's), or `prompt`.
        call: String,
        /// `deny`, `ask`, `rewrite`, `redact`, `replace`, or `failed` (it
        /// trapped, ran past its deadline or answered what the host cannot
        /// use: the call was refused, or its result withheld).
        decision: String,
        /// What it said: the reason, the new arguments, what it redacted.
        detail: String,
    },
    /// The prompt ended.
    Done {
        /// How.
        #[serde(flatten)]
        status: Status,
        /// Model turns taken.
        turns: u32,
        /// Tokens used.
        input_tokens: u64,
        /// Tokens used.
        output_tokens: u64,
        /// What the prompt cost in US dollars, when the loop knows (the
        /// Claude Code CLI reports it).
        #[serde(skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
        /// The prompt's messages so far, when the turn cap or the token
        /// budget cut it short: the partial transcript, kept with the run's
        /// events (`--json`, `nexo runs show`).
        #[serde(skip_serializing_if = "Option::is_none")]
        transcript: Option<Vec<nexo_model::Message>>,
    },
}

/// Receives events as they happen.
pub trait EventSink: Send + Sync {
    /// Called once per event, in order.
    fn emit(&self, event: &Event);
}

impl<F: Fn(&Event) + Send + Sync> EventSink for F {
    fn emit(&self, event: &Event) {
        self(event)
    }
}

/// The sink that drops every event.
struct Silent;

impl EventSink for Silent {
    fn emit(&self, _event: &Event) {}
}

/// Drops every event, for contexts with no one to tell.
pub static SILENT: &dyn EventSink = &Silent;

/// Drops every event. One shared sink, so a run without one allocates nothing.
pub fn no_events() -> Arc<dyn EventSink> {
    static NONE: std::sync::OnceLock<Arc<dyn EventSink>> = std::sync::OnceLock::new();
    NONE.get_or_init(|| Arc::new(Silent)).clone()
}
