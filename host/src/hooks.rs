//! A run's hooks: the operator's components that see each call the gate
//! decides on, before and after it runs, and each prompt before the model
//! reads it (the `hook-plugin` world, loaded by [`crate::world::hook`]).
//!
//! A hook narrows and never widens: `allow` leaves the call to the gate, a
//! rewrite is decided on by the gate like the model's own arguments, and
//! a hook that traps, runs past its deadline or answers what the host
//! cannot use fails closed (the call is refused, its result withheld). The
//! hooks are asked in the order the operator gave them; each sees what the
//! one before it left.
//!
//! The host-call path ([`crate::host_call`]) asks them. A recorded run
//! journals the decisions before a call as their own entry ([`Before`]), so
//! a replay does not ask again; what the hooks made of a result is in the
//! call's own entry, which holds the result as they left it.

use std::sync::Arc;

use nexo_model::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::RunError;
use crate::events::{Event, EventSink};
use crate::manifest::HookEvent;

pub use crate::bindings::hook::exports::nexo::plugin::hook::{
    After, Before as Answer, Origin, Prompt, PromptDecision, ToolCall as HookCall,
};

/// What a redacted string becomes.
pub const REDACTED: &str = "[redacted]";

/// One run's instance of a hook, as its chain asks it. The hook world
/// ([`crate::world::hook`]) makes them: each under its limits and deadline,
/// a failed question reported as an error for the chain to fail closed on.
pub trait HookInstance: Send + Sync {
    /// The hook's name.
    fn name(&self) -> &str;

    /// Whether it wants to be asked about `event`.
    fn wants(&self, event: HookEvent) -> bool;

    /// Asks about a call before the gate decides on it.
    fn before_tool_call<'a>(&'a self, call: &'a HookCall) -> BoxFuture<'a, Result<Answer, RunError>>;

    /// Shows it a call's result (as JSON).
    fn after_tool_call<'a>(
        &'a self,
        call: &'a HookCall,
        output: &'a str,
        is_error: bool,
    ) -> BoxFuture<'a, Result<After, RunError>>;

    /// Shows it a prompt before the model reads it.
    fn before_prompt<'a>(&'a self, prompt: &'a Prompt) -> BoxFuture<'a, Result<PromptDecision, RunError>>;
}

/// A loaded hook as a run's options hold it: it makes each run's own
/// instance, so runs never share what a hook keeps in its memory.
pub trait HookComponent: Send + Sync + std::fmt::Debug {
    /// A fresh instance for one run.
    fn for_run(&self) -> Box<dyn HookInstance>;
}

/// What the hooks decided before a call, as its journal entry records it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Before {
    /// The refusal the caller reads, naming the hook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub denied: Option<String>,
    /// Why someone must decide, naming each hook that asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ask: Option<String>,
    /// The arguments the call runs with instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
}

/// What the hooks decided before a prompt, as its journal entry records it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct PromptBefore {
    /// The refusal, naming the hook: the turn is not sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub denied: Option<String>,
    /// The strings replaced with [`REDACTED`] before the prompt is sent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redact: Vec<String>,
}

/// What the hooks made of a call's result.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Left as it was.
    Kept,
    /// Redacted: the result's JSON with the strings replaced.
    Redacted(Value),
    /// Replaced with this text (then redacted by any hook after).
    Replaced(String),
    /// Withheld: a hook failed, and the result is not shown.
    Withheld(String),
}

/// A run's hooks, in the operator's order.
#[derive(Default)]
pub struct Hooks {
    chain: Vec<Box<dyn HookInstance>>,
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

impl Hooks {
    /// One run's instances of `components`, asked in that order; `None`
    /// for none.
    pub fn for_run(components: &[Arc<dyn HookComponent>]) -> Option<Arc<Hooks>> {
        (!components.is_empty()).then(|| Arc::new(Hooks { chain: components.iter().map(|c| c.for_run()).collect() }))
    }

    /// Whether some hook wants to be asked about `event`.
    pub fn wants(&self, event: HookEvent) -> bool {
        self.chain.iter().any(|h| h.wants(event))
    }

    /// The hooks' names, in order.
    pub fn names(&self) -> Vec<&str> {
        self.chain.iter().map(|h| h.name()).collect()
    }

    /// Asks each hook that wants it about `call`: a denial ends the asking;
    /// asks gather; a rewrite is what the next hook sees. A guest's call
    /// cannot be rewritten (its arguments are typed, not the JSON a hook
    /// answers), and a rewrite that is not a JSON object is refused: both
    /// fail closed. Each decision beyond `allow` is an event.
    pub async fn before(&self, call: &mut HookCall, events: &dyn EventSink) -> Before {
        let mut before = Before::default();
        let mut asks: Vec<String> = Vec::new();
        let label = call.tool.clone().unwrap_or_else(|| call.call.clone());
        for hook in self.chain.iter().filter(|h| h.wants(HookEvent::BeforeToolCall)) {
            let name = hook.name();
            let said = |decision: &str, detail: &str| {
                decided(events, name, HookEvent::BeforeToolCall, &label, decision, detail)
            };
            match hook.before_tool_call(call).await {
                Ok(Answer::Allow) => {}
                Ok(Answer::Deny(reason)) => {
                    said("deny", &reason);
                    before.denied = Some(format!("the hook `{name}` refused the call: {reason}"));
                }
                Ok(Answer::Ask(reason)) => {
                    said("ask", &reason);
                    asks.push(format!("the hook `{name}` asks: {reason}"));
                }
                Ok(Answer::Rewrite(text)) => match (call.origin, serde_json::from_str::<Value>(&text)) {
                    (Origin::Model, Ok(arguments @ Value::Object(_))) => {
                        said("rewrite", &text);
                        call.arguments = text;
                        before.arguments = Some(arguments);
                    }
                    (Origin::Guest, _) => {
                        said("failed", "it rewrote an agent's own call, which only a model's call allows");
                        before.denied = Some(format!(
                            "the hook `{name}` rewrote the arguments of the agent's own `{}` call, which only a \
                             model's call allows, so the call was refused (hooks fail closed): the hook denies \
                             it instead",
                            call.call
                        ));
                    }
                    (Origin::Model, _) => {
                        said("failed", "its rewrite is not a JSON object");
                        before.denied = Some(format!(
                            "the hook `{name}` rewrote the arguments as something that is not a JSON object, so \
                             the call was refused (hooks fail closed)"
                        ));
                    }
                },
                Err(e) => {
                    said("failed", &e.to_string());
                    before.denied =
                        Some(format!("the hook `{name}` failed, so the call was refused (hooks fail closed): {e}"));
                }
            }
            if before.denied.is_some() {
                before.arguments = None;
                return before;
            }
        }
        before.ask = (!asks.is_empty()).then(|| asks.join("; "));
        before
    }

    /// Shows each hook that wants it a prompt: a denial ends the asking;
    /// redactions gather, and the next hook sees the prompt without them.
    pub async fn before_prompt(&self, prompt: &mut Prompt, events: &dyn EventSink) -> PromptBefore {
        let mut before = PromptBefore::default();
        for hook in self.chain.iter().filter(|h| h.wants(HookEvent::BeforePrompt)) {
            let name = hook.name();
            let said = |decision: &str, detail: &str| {
                decided(events, name, HookEvent::BeforePrompt, "prompt", decision, detail)
            };
            match hook.before_prompt(prompt).await {
                Ok(PromptDecision::Pass) => {}
                Ok(PromptDecision::Deny(reason)) => {
                    said("deny", &reason);
                    before.denied = Some(format!("the hook `{name}` refused the prompt: {reason}"));
                }
                Ok(PromptDecision::Redact(strings)) => {
                    let strings: Vec<String> = strings.into_iter().filter(|s| !s.is_empty()).collect();
                    let shown: Vec<&str> = strings.iter().map(String::as_str).collect();
                    let count = redact_text(&mut prompt.system, &shown) + redact_text(&mut prompt.messages, &shown);
                    said("redact", &format!("{count} occurrence(s) of {} string(s)", strings.len()));
                    before.redact.extend(strings);
                }
                Err(e) => {
                    said("failed", &e.to_string());
                    before.denied =
                        Some(format!("the hook `{name}` failed, so the prompt was not sent (hooks fail closed): {e}"));
                }
            }
            if before.denied.is_some() {
                return before;
            }
        }
        before
    }

    /// Shows each hook that wants it the result of `call` (`output`, its
    /// JSON; `is_error` for a failed call), each seeing what the one before
    /// it left.
    pub async fn after(&self, call: &HookCall, output: Value, is_error: bool, events: &dyn EventSink) -> Outcome {
        let mut outcome = Outcome::Kept;
        let mut current = output;
        let label = call.tool.clone().unwrap_or_else(|| call.call.clone());
        for hook in self.chain.iter().filter(|h| h.wants(HookEvent::AfterToolCall)) {
            let name = hook.name();
            let said = |decision: &str, detail: &str| {
                decided(events, name, HookEvent::AfterToolCall, &label, decision, detail)
            };
            let text = match &outcome {
                Outcome::Replaced(text) => text.clone(),
                _ => serde_json::to_string(&current).unwrap_or_default(),
            };
            match hook.after_tool_call(call, &text, is_error).await {
                Ok(After::Pass) => {}
                Ok(After::Redact(strings)) => {
                    let strings: Vec<&str> = strings.iter().map(String::as_str).filter(|s| !s.is_empty()).collect();
                    let count = match &mut outcome {
                        Outcome::Replaced(text) => redact_text(text, &strings),
                        _ => redact(&mut current, &strings),
                    };
                    said("redact", &format!("{count} occurrence(s) of {} string(s)", strings.len()));
                    if count > 0 && outcome == Outcome::Kept {
                        outcome = Outcome::Redacted(Value::Null);
                    }
                }
                Ok(After::Replace(text)) => {
                    said("replace", &crate::truncate::first_line(&text, 120));
                    outcome = Outcome::Replaced(text);
                }
                Err(e) => {
                    said("failed", &e.to_string());
                    return Outcome::Withheld(format!(
                        "the hook `{name}` failed, so the result was withheld (hooks fail closed): {e}"
                    ));
                }
            }
        }
        match outcome {
            Outcome::Redacted(_) => Outcome::Redacted(current),
            other => other,
        }
    }
}

/// Reports one hook decision beyond `allow` and `pass`.
fn decided(events: &dyn EventSink, hook: &str, moment: HookEvent, call: &str, decision: &str, detail: &str) {
    events.emit(&Event::Hook {
        hook: hook.to_string(),
        moment: moment.as_str().to_string(),
        call: call.to_string(),
        decision: decision.to_string(),
        detail: crate::truncate::first_line(detail, 200),
    });
}

/// Replaces each of `strings` in every string of `value` (keys included),
/// and returns how many occurrences were replaced.
pub fn redact(value: &mut Value, strings: &[&str]) -> usize {
    match value {
        Value::String(text) => redact_text(text, strings),
        Value::Array(items) => items.iter_mut().map(|v| redact(v, strings)).sum(),
        Value::Object(fields) => {
            let mut count = 0;
            let taken = std::mem::take(fields);
            for (mut key, mut v) in taken {
                count += redact_text(&mut key, strings) + redact(&mut v, strings);
                fields.insert(key, v);
            }
            count
        }
        _ => 0,
    }
}

/// Replaces each of `strings` in `text`, and returns how many occurrences
/// were replaced.
pub fn redact_text(text: &mut String, strings: &[&str]) -> usize {
    let mut count = 0;
    for s in strings {
        let n = text.matches(s).count();
        if n > 0 {
            *text = text.replace(s, REDACTED);
            count += n;
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_reaches_every_string_of_a_result() {
        let mut value = serde_json::json!({"stdout": "key=sk-123 ok", "lines": ["sk-123", 4], "sk-123": true});
        assert_eq!(redact(&mut value, &["sk-123"]), 3);
        assert_eq!(
            value,
            serde_json::json!({"stdout": "key=[redacted] ok", "lines": ["[redacted]", 4], "[redacted]": true})
        );
        let mut text = "nothing here".to_string();
        assert_eq!(redact_text(&mut text, &["sk-123"]), 0);
    }

    #[test]
    fn a_before_record_reads_back_as_written() {
        let before = Before { denied: None, ask: Some("why".into()), arguments: Some(serde_json::json!({"a": 1})) };
        let text = serde_json::to_string(&before).unwrap_or_default();
        assert_eq!(serde_json::from_str::<Before>(&text).ok(), Some(before));
        assert_eq!(serde_json::to_string(&Before::default()).unwrap_or_default(), "{}");
    }
}
