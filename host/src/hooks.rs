//! A run's hooks: the operator's components that see each call the gate
//! decides on, before and after it runs, and each prompt before the model
//! reads it (the `hook-plugin` world, loaded by [`crate::world::hook`]).
//!
//! A hook narrows and never widens: `allow` leaves the call to the gate, a
//! rewrite is decided on by the gate like the model's own arguments, and
//! a hook that traps, runs past its deadline or answers what the host
//! cannot use fails closed (the call is refused, its result withheld). The
//! hooks are asked in the order the operator gave them; each sees what the
//! one before it left. In `nexo serve` a tenant may add hooks of its own
//! ([`Owner::Tenant`]): they are asked about a call before the operator's,
//! so the operator's judge the call as it will run (a tenant's rewrite
//! cannot slip past them), and shown a result or a prompt after the
//! operator's, so they never see what the operator's redacted.
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

/// A hook component as a run records it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub struct HookFile {
    /// The component's file.
    pub path: std::path::PathBuf,
    /// Its SHA-256 when the run was recorded (empty: added by a pass, from
    /// the operator's configuration as it was then).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sha256: String,
    /// Whose it is: a tenant's is one of its uploaded plugins, by its
    /// SHA-256, which each node loads from its own copy.
    #[serde(default, skip_serializing_if = "Owner::is_operator")]
    pub owner: Owner,
}

/// Whose a hook is, which decides where in the chain it is asked.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum Owner {
    /// The operator's (the config file, `--hook`, a tenant's policy).
    #[default]
    Operator,
    /// A tenant's own, added by its run request in `nexo serve`: it draws
    /// on the tenant's budgets as its agent does.
    Tenant,
}

impl Owner {
    /// Whether it is the operator's (the default, left out of records).
    pub fn is_operator(&self) -> bool {
        *self == Owner::Operator
    }
}

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

    /// Whose it is.
    fn owner(&self) -> Owner {
        Owner::Operator
    }
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
    /// The hooks that refused or asked, by name (a tenant's as
    /// `tenant/NAME`), for the audit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub by: Vec<String>,
}

/// What the hooks decided before a prompt, as its journal entry records it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct PromptBefore {
    /// The refusal, naming the hook: the turn is not sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub denied: Option<String>,
    /// Each redacting hook's cuts in the conversation, in order: where,
    /// never what, so no redacted string reaches the journal.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cuts: Vec<Cuts>,
    /// Whether a hook failed rather than decided: never recorded.
    #[serde(skip)]
    pub failed: bool,
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

/// A run's hooks: the operator's in the operator's order, then the
/// tenant's in the tenant's.
#[derive(Default)]
pub struct Hooks {
    chain: Vec<Box<dyn HookInstance>>,
    /// Where the tenant's begin in `chain`.
    tenants: usize,
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

impl Hooks {
    /// One run's instances of `components`, the operator's first, each
    /// owner's in the order given; `None` for none.
    pub fn for_run(components: &[Arc<dyn HookComponent>]) -> Option<Arc<Hooks>> {
        if components.is_empty() {
            return None;
        }
        let mut ordered: Vec<&Arc<dyn HookComponent>> = components.iter().collect();
        ordered.sort_by_key(|c| c.owner());
        let tenants = ordered.iter().take_while(|c| c.owner() == Owner::Operator).count();
        Some(Arc::new(Hooks { chain: ordered.iter().map(|c| c.for_run()).collect(), tenants }))
    }

    /// The chain in the order it is asked before a call: the tenant's
    /// hooks first, so a rewrite of theirs meets the operator's.
    fn before_order(&self) -> impl Iterator<Item = &dyn HookInstance> {
        let (operators, tenants) = self.chain.split_at(self.tenants);
        tenants.iter().chain(operators).map(|h| &**h)
    }

    /// Whether some hook wants to be asked about `event`.
    pub fn wants(&self, event: HookEvent) -> bool {
        self.chain.iter().any(|h| h.wants(event))
    }

    /// The hooks' names, in order.
    pub fn names(&self) -> Vec<&str> {
        self.chain.iter().map(|h| h.name()).collect()
    }

    /// Asks each hook that wants it about `call`, from the `from`th hook on
    /// (of the chain in the order it is asked before a call, the tenant's
    /// first): a denial ends the asking; asks gather. A rewrite ends
    /// this round too: the answer says which hook rewrote, and the caller
    /// decodes the new arguments and asks the hooks after it about the call
    /// as rewritten. A guest's call cannot be rewritten (its arguments are
    /// typed, not the JSON a hook answers), and a rewrite that is not a JSON
    /// object is refused: both fail closed. Each decision beyond `allow` is
    /// an event.
    pub async fn before(&self, call: &HookCall, from: usize, events: &dyn EventSink) -> (Before, Option<usize>) {
        let mut before = Before::default();
        let mut asks: Vec<String> = Vec::new();
        let label = call.tool.clone().unwrap_or_else(|| call.call.clone());
        let asked = self.before_order().enumerate().skip(from).filter(|(_, h)| h.wants(HookEvent::BeforeToolCall));
        for (at, hook) in asked {
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
                    before.by.push(name.to_string());
                }
                Ok(Answer::Rewrite(text)) => match (call.origin, serde_json::from_str::<Value>(&text)) {
                    (Origin::Model, Ok(arguments @ Value::Object(_))) => {
                        said("rewrite", &text);
                        before.arguments = Some(arguments);
                        before.ask = (!asks.is_empty()).then(|| asks.join("; "));
                        return (before, Some(at));
                    }
                    (Origin::Guest, _) => {
                        said("failed", "it rewrote an agent's own call, which only a model's call allows");
                        before.denied = Some(format!(
                            "the hook `{name}` rewrote the arguments of the agent's own `{}` call, which only a \
                             model's call allows, so the call was refused (hooks fail closed)",
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
                    let why = failure(name, &e);
                    said("failed", why);
                    before.denied =
                        Some(format!("the hook `{name}` failed ({why}), so the call was refused (hooks fail closed)"));
                }
            }
            if before.denied.is_some() {
                before.by.push(name.to_string());
                return (before, None);
            }
        }
        before.ask = (!asks.is_empty()).then(|| asks.join("; "));
        (before, None)
    }

    /// Shows each hook that wants it a prompt (`prompt`, whose `messages`
    /// is `messages` as JSON): a denial ends the asking; each redaction is
    /// made in `messages` (and the view) before the next hook sees it, and
    /// recorded as where it cut, never what.
    pub async fn before_prompt(
        &self,
        prompt: &mut Prompt,
        messages: &mut Value,
        events: &dyn EventSink,
    ) -> PromptBefore {
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
                    let strings: Vec<&str> = strings.iter().map(String::as_str).filter(|s| !s.is_empty()).collect();
                    let found = Cuts::of(messages, &strings);
                    let mut cut = messages.clone();
                    found.apply(&mut cut);
                    // A cut in the conversation's own structure (a role, a
                    // call id) would leave a prompt no model can be sent.
                    if !found.is_empty() && serde_json::from_value::<Vec<nexo_model::Message>>(cut.clone()).is_err() {
                        said("failed", "its redaction would break the conversation's structure");
                        before.denied = Some(format!(
                            "the hook `{name}` redacted part of the conversation's structure (a role, a call id), so \
                             the prompt was not sent (hooks fail closed): redact content only"
                        ));
                        before.failed = true;
                        return before;
                    }
                    said("redact", &format!("{} place(s)", found.len()));
                    if !found.is_empty() {
                        *messages = cut;
                        let mut system = Value::String(std::mem::take(&mut prompt.system));
                        Cuts::of(&system, &strings).apply(&mut system);
                        prompt.system = system.as_str().unwrap_or_default().to_string();
                        prompt.messages = messages.to_string();
                        before.cuts.push(found);
                    }
                }
                Err(e) => {
                    let why = failure(name, &e);
                    said("failed", why);
                    before.denied = Some(format!(
                        "the hook `{name}` failed ({why}), so the prompt was not sent (hooks fail closed)"
                    ));
                    before.failed = true;
                }
            }
            if before.denied.is_some() {
                return before;
            }
        }
        before
    }

    /// Shows each hook that wants it the result of `call` (`output`, its
    /// JSON text; `is_error` for a failed call), each seeing what the one
    /// before it left.
    pub async fn after(&self, call: &HookCall, output: String, is_error: bool, events: &dyn EventSink) -> Outcome {
        let mut outcome = Outcome::Kept;
        // The result as a value only once a hook redacts it.
        let mut text = output;
        let mut current: Option<Value> = None;
        let label = call.tool.clone().unwrap_or_else(|| call.call.clone());
        for hook in self.chain.iter().filter(|h| h.wants(HookEvent::AfterToolCall)) {
            let name = hook.name();
            let said = |decision: &str, detail: &str| {
                decided(events, name, HookEvent::AfterToolCall, &label, decision, detail)
            };
            if let Some(value) = &current {
                text = serde_json::to_string(value).unwrap_or_default();
            }
            let shown = match &outcome {
                Outcome::Replaced(replaced) => replaced.as_str(),
                _ => text.as_str(),
            };
            match hook.after_tool_call(call, shown, is_error).await {
                Ok(After::Pass) => {}
                Ok(After::Redact(strings)) => {
                    let strings: Vec<&str> = strings.iter().map(String::as_str).filter(|s| !s.is_empty()).collect();
                    let places = match &mut outcome {
                        Outcome::Replaced(text) => {
                            let mut value = Value::String(std::mem::take(text));
                            let found = Cuts::of(&value, &strings);
                            found.apply(&mut value);
                            *text = value.as_str().unwrap_or_default().to_string();
                            found.len()
                        }
                        _ => {
                            let value =
                                current.get_or_insert_with(|| serde_json::from_str(&text).unwrap_or(Value::Null));
                            let found = Cuts::of(value, &strings);
                            found.apply(value);
                            found.len()
                        }
                    };
                    said("redact", &format!("{places} place(s)"));
                    if places > 0 && outcome == Outcome::Kept {
                        outcome = Outcome::Redacted(Value::Null);
                    }
                }
                Ok(After::Replace(text)) => {
                    said("replace", &crate::truncate::first_line(&text, 120));
                    outcome = Outcome::Replaced(text);
                }
                Err(e) => {
                    let why = failure(name, &e);
                    said("failed", why);
                    return Outcome::Withheld(format!(
                        "the hook `{name}` failed ({why}), so the result was withheld (hooks fail closed)"
                    ));
                }
            }
        }
        match (outcome, current) {
            (Outcome::Redacted(_), Some(value)) => Outcome::Redacted(value),
            (outcome, _) => outcome,
        }
    }
}

/// What went wrong with a hook, in words that quote nothing it wrote or
/// saw (its stderr can hold what it was shown): the whole error goes to the
/// operator's log.
fn failure(hook: &str, e: &RunError) -> &'static str {
    tracing::warn!(target: "nexo::hooks", hook, error = %e, "a hook failed; the call or prompt it was asked about is refused");
    match e {
        RunError::Deadline { .. } => "it ran past its deadline",
        RunError::MemoryLimit { .. } | RunError::SharedMemoryLimit { .. } => "it passed its memory cap",
        RunError::Trap { .. } => "it trapped",
        RunError::Instantiate { .. } => "it could not start",
        _ => "it could not answer",
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

/// Where a redaction cuts a JSON value: for each string value (keys are
/// left alone, so the value keeps its shape), by its place in a walk of the
/// value (arrays in order, objects by key), the byte ranges that become
/// [`REDACTED`]. It records where, never what: a journal keeps it in place
/// of the strings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cuts(Vec<(usize, Vec<(usize, usize)>)>);

/// Past this many cuts in one string, the whole string is redacted: a
/// redaction must not grow a result without bound.
const MOST_CUTS: usize = 256;

impl Cuts {
    /// Where each of `strings` occurs in `value`'s string values,
    /// overlapping and touching occurrences merged.
    pub fn of(value: &Value, strings: &[&str]) -> Cuts {
        let mut cuts = Vec::new();
        let mut place = 0;
        walk(value, &mut |text| {
            let mut ranges: Vec<(usize, usize)> = Vec::new();
            for s in strings {
                ranges.extend(text.match_indices(s).map(|(at, m)| (at, at + m.len())));
            }
            if !ranges.is_empty() {
                ranges.sort_unstable();
                let mut merged: Vec<(usize, usize)> = Vec::with_capacity(ranges.len());
                for (start, end) in ranges {
                    match merged.last_mut() {
                        Some(last) if start <= last.1 => last.1 = last.1.max(end),
                        _ => merged.push((start, end)),
                    }
                }
                if merged.len() > MOST_CUTS {
                    merged = vec![(0, text.len())];
                }
                cuts.push((place, merged));
            }
            place += 1;
        });
        Cuts(cuts)
    }

    /// How many places it cuts.
    pub fn len(&self) -> usize {
        self.0.iter().map(|(_, r)| r.len()).sum()
    }

    /// Whether it cuts nothing.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Makes the cuts in `value` (the value they were found in, or one
    /// equal to it: a replay's). A cut that does not fit is skipped.
    pub fn apply(&self, value: &mut Value) {
        let mut place = 0;
        let mut next = self.0.iter().peekable();
        walk_mut(value, &mut |text| {
            if let Some((_, ranges)) = next.next_if(|entry| entry.0 == place) {
                let mut out = String::with_capacity(text.len());
                let mut at = 0;
                for &(start, end) in ranges {
                    if start < at || end > text.len() || !text.is_char_boundary(start) || !text.is_char_boundary(end) {
                        continue;
                    }
                    out.push_str(&text[at..start]);
                    out.push_str(REDACTED);
                    at = end;
                }
                out.push_str(&text[at..]);
                *text = out;
            }
            place += 1;
        });
    }
}

/// Calls `f` with each string value of `value`, in a fixed order.
fn walk(value: &Value, f: &mut impl FnMut(&str)) {
    match value {
        Value::String(text) => f(text),
        Value::Array(items) => items.iter().for_each(|v| walk(v, f)),
        Value::Object(fields) => fields.values().for_each(|v| walk(v, f)),
        _ => {}
    }
}

/// [`walk`], each string given to change.
fn walk_mut(value: &mut Value, f: &mut impl FnMut(&mut String)) {
    match value {
        Value::String(text) => f(text),
        Value::Array(items) => items.iter_mut().for_each(|v| walk_mut(v, f)),
        Value::Object(fields) => fields.values_mut().for_each(|v| walk_mut(v, f)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redaction_cuts_every_string_value_and_records_where_not_what() {
        let value = serde_json::json!({"stdout": "key=sk-123 ok", "lines": ["sk-123", 4], "sk-123": true});
        let cuts = Cuts::of(&value, &["sk-123"]);
        assert_eq!(cuts.len(), 2, "keys are left alone");
        let recorded = serde_json::to_string(&cuts).unwrap_or_default();
        assert!(!recorded.contains("sk-123"), "{recorded}");
        let mut again: Value = value.clone();
        serde_json::from_str::<Cuts>(&recorded).unwrap_or_default().apply(&mut again);
        assert_eq!(
            again,
            serde_json::json!({"stdout": "key=[redacted] ok", "lines": ["[redacted]", 4], "sk-123": true})
        );
        // Touching matches merge; too many cut the whole string.
        let mut touching = Value::String("aaab".into());
        Cuts::of(&touching, &["a"]).apply(&mut touching);
        assert_eq!(touching, Value::String("[redacted]b".into()));
        let mut many = Value::String("ab".repeat(1000));
        Cuts::of(&many, &["a"]).apply(&mut many);
        assert_eq!(many, Value::String(REDACTED.into()));
    }

    /// A hook that answers as told and notes what it was shown.
    #[derive(Debug, Clone)]
    struct Fake {
        name: &'static str,
        owner: Owner,
        before: Answer,
        after: After,
        seen: Arc<std::sync::Mutex<Vec<String>>>,
    }

    impl HookComponent for Fake {
        fn for_run(&self) -> Box<dyn HookInstance> {
            Box::new(self.clone())
        }
        fn owner(&self) -> Owner {
            self.owner
        }
    }

    impl HookInstance for Fake {
        fn name(&self) -> &str {
            self.name
        }
        fn wants(&self, _: HookEvent) -> bool {
            true
        }
        fn before_tool_call<'a>(&'a self, call: &'a HookCall) -> BoxFuture<'a, Result<Answer, RunError>> {
            self.seen
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(format!("{} before {}", self.name, call.arguments));
            let answer = self.before.clone();
            Box::pin(async move { Ok(answer) })
        }
        fn after_tool_call<'a>(
            &'a self,
            _: &'a HookCall,
            output: &'a str,
            _: bool,
        ) -> BoxFuture<'a, Result<After, RunError>> {
            self.seen.lock().unwrap_or_else(|p| p.into_inner()).push(format!("{} after {output}", self.name));
            let answer = self.after.clone();
            Box::pin(async move { Ok(answer) })
        }
        fn before_prompt<'a>(&'a self, _: &'a Prompt) -> BoxFuture<'a, Result<PromptDecision, RunError>> {
            Box::pin(async move { Ok(PromptDecision::Pass) })
        }
    }

    #[tokio::test]
    async fn a_tenants_hook_is_asked_before_the_operators_about_a_call_and_after_them_about_a_result() {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        // The tenant's rewrites the call into one the operator's refuses;
        // the operator's redacts a token the tenant's must never see.
        let tenant = Fake {
            name: "tenant/sly",
            owner: Owner::Tenant,
            before: Answer::Rewrite(r#"{"path":"secrets/key"}"#.into()),
            after: After::Pass,
            seen: seen.clone(),
        };
        let operator = Fake {
            name: "rules",
            owner: Owner::Operator,
            before: Answer::Deny("no secrets".into()),
            after: After::Redact(vec!["sk-1".into()]),
            seen: seen.clone(),
        };
        let components: Vec<Arc<dyn HookComponent>> = vec![Arc::new(tenant), Arc::new(operator)];
        let Some(hooks) = Hooks::for_run(&components) else { panic!("two hooks make a chain") };
        assert_eq!(hooks.names(), ["rules", "tenant/sly"], "the operator's first in the chain");
        let mut call = HookCall {
            agent: "a".into(),
            capability: "read".into(),
            call: "read-file".into(),
            tool: Some("read_file".into()),
            detail: "notes.md".into(),
            arguments: r#"{"path":"notes.md"}"#.into(),
            origin: Origin::Model,
            held: Vec::new(),
        };
        let events = crate::events::no_events();
        let (round, rewrote) = hooks.before(&call, 0, &*events).await;
        assert_eq!(rewrote, Some(0), "the tenant's is asked first: {round:?}");
        call.arguments = r#"{"path":"secrets/key"}"#.into();
        let (round, rewrote) = hooks.before(&call, 1, &*events).await;
        assert_eq!((round.denied.as_deref(), rewrote), (Some("the hook `rules` refused the call: no secrets"), None));
        let outcome = hooks.after(&call, r#"{"text":"token sk-1"}"#.into(), false, &*events).await;
        assert_eq!(outcome, Outcome::Redacted(serde_json::json!({"text": "token [redacted]"})));
        let seen = seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
        assert_eq!(
            seen,
            [
                r#"tenant/sly before {"path":"notes.md"}"#,
                r#"rules before {"path":"secrets/key"}"#,
                r#"rules after {"text":"token sk-1"}"#,
                r#"tenant/sly after {"text":"token [redacted]"}"#,
            ]
        );
    }

    #[test]
    fn a_before_record_reads_back_as_written() {
        let before = Before {
            denied: None,
            ask: Some("why".into()),
            arguments: Some(serde_json::json!({"a": 1})),
            by: vec!["tenant/sly".into()],
        };
        let text = serde_json::to_string(&before).unwrap_or_default();
        assert_eq!(serde_json::from_str::<Before>(&text).ok(), Some(before));
        assert_eq!(serde_json::to_string(&Before::default()).unwrap_or_default(), "{}");
    }
}
