//! A model turn as a host call: the agent loop's request to its provider
//! enters the one host-call path ([`crate::host_call`]) like any call. In a
//! recorded run the journal holds it: a replay answers it, so no turn is
//! paid for twice, and a provider that could not be reached records
//! nothing, so a resume tries it again. A turn needs no capability
//! ([`Gate::Open`]): the gate lets it through and the audit does not see
//! it, unless the run has a budget in money: then the gate decides on what
//! the turn may cost ([`Gate::Budget`]), and one past the budget suspends
//! the run with a `budget` approval bound to the turn. Its events are the loop's
//! (`turn-started`, `text-delta`), not a tool call's. A live turn commits
//! what the journal holds before it asks the model, so the run's recorded
//! `turn_started` is there to read while the model works.
//!
//! The turn borrows the conversation: its arguments are the request itself,
//! never a copy, and the journal hashes them as they serialize
//! ([`HostCall::journal_hash`]), as the JSON `Value` of
//! `{"max_tokens", "messages", "model", "tools"}` would (a test checks), so
//! journals recorded before turns took this path replay on it.

use nexo_model::{BoxFuture, DeltaSink, Message, ModelError, Provider, Request, Response};

use crate::authority::Gate;
use crate::error::ToolError;
use crate::host_call::{CallContext as _, HostCall, Refusal, ToolContext};
use crate::spend::{Spend, usd};
use crate::telemetry::spans;

/// `complete`: one turn of `provider`'s model, drawing on the run's
/// [`Spend`] when its model is priced. With a budget, the gate decides on
/// what the turn may cost before it is sent
/// ([`Gate::Budget`]); what a live turn used is counted once it answers.
#[derive(Clone, Copy)]
pub struct ModelTurn<'p>(pub &'p dyn Provider, pub Option<&'p Spend>);

/// A turn's arguments: the conversation, borrowed, and where streamed text
/// goes. The journal sees the request only.
#[derive(Clone, Copy)]
pub struct Turn<'r> {
    /// What the model is asked.
    pub request: &'r Request,
    /// Receives streamed text, when the loop streams.
    pub deltas: Option<DeltaSink<'r>>,
}

impl<'p> HostCall for ModelTurn<'p> {
    type Args = Turn<'p>;
    type Output = Response;
    type Error = ModelError;

    fn name(&self) -> &'static str {
        "complete"
    }

    fn interface(&self) -> &'static str {
        crate::manifest::interface::MODEL_TURN
    }

    fn journal_error(&self, error: &ModelError) -> bool {
        // An unreachable provider recorded nothing; a resume tries again.
        !matches!(error, ModelError::Unavailable { .. })
    }

    fn journal_hash(&self, turn: &Turn<'p>) -> String {
        crate::journal::hash_json(turn)
    }

    fn gate<'a>(&'a self, turn: &'a Turn<'p>, _detail: &'a str) -> Gate<'a> {
        match self.1.filter(|spend| spend.limited()) {
            Some(spend) => Gate::Budget { spend, may_cost: spend.may_cost(turn_bytes(turn), turn.request.max_tokens) },
            None => Gate::Open,
        }
    }

    /// What a `budget` approval shows: the turn's size and money, not the
    /// whole conversation (the journal's hash binds the decision to it).
    fn journal_arguments(&self, arguments: serde_json::Value) -> serde_json::Value {
        let Some(spend) = self.1 else { return arguments };
        let bytes = arguments.to_string().len();
        let max_tokens = arguments["max_tokens"].as_u64().and_then(|n| u32::try_from(n).ok()).unwrap_or(u32::MAX);
        serde_json::json!({
            "model": arguments["model"],
            "messages": arguments["messages"].as_array().map_or(0, Vec::len),
            "max_tokens": max_tokens,
            "may_cost_usd": usd(spend.may_cost(bytes, max_tokens)),
            "spent_usd": usd(spend.spent()),
            "budget_usd": spend.budget().map(usd),
            "day_left_usd": spend.pool_left().map(usd),
        })
    }

    fn execute<'a>(&'a self, cx: &'a ToolContext, turn: Turn<'p>) -> BoxFuture<'a, Result<Response, ModelError>> {
        Box::pin(async move {
            // The turn's `turn_started` event reaches the store before the
            // model is asked: a stream of the run shows it while the model works.
            if let Some(journal) = cx.journal() {
                journal.flush().await;
            }
            let span = spans::chat_span(self.0.name(), &turn.request.model, turn.request);
            // Only a call that reaches the provider is measured: a replay
            // never executes.
            let started = std::time::Instant::now();
            let result = if span.is_off() {
                self.0.complete(turn.request, turn.deltas).await
            } else {
                let result = span.under(self.0.complete(turn.request, turn.deltas)).await;
                spans::chat_result(&span, &turn.request.model, &result);
                result
            };
            if let (Some(spend), Ok(response)) = (self.1, &result) {
                spend.add(&response.usage);
            }
            let elapsed = started.elapsed();
            crate::telemetry::metrics::instruments::model_call(self.0.name(), &turn.request.model, elapsed, &result);
            result
        })
    }
}

// The loop makes its turns; neither the model nor a guest calls `complete`.
crate::guest_only!(for<'p> ModelTurn<'p>, ToolContext);

/// A provider's errors are failures, never refusals of the call.
impl Refusal for ModelError {
    fn refusal(&self) -> Option<&'static str> {
        None
    }
}

/// The path's own errors on a turn are the journal's (the run halted, an
/// entry cannot be read): the gate is open, and a turn's arguments have no
/// size limit.
impl From<ToolError> for ModelError {
    fn from(e: ToolError) -> Self {
        match e {
            // The only refusal a turn meets: a budget the operator would not pass.
            ToolError::Denied(why) => ModelError::Refused(why),
            e => ModelError::Protocol { provider: "journal".into(), message: e.message().to_string() },
        }
    }
}

/// The bytes a turn's request serializes to, counted, not kept.
fn turn_bytes(turn: &Turn<'_>) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, turn);
    count.0
}

/// A turn serializes as the JSON of `{"max_tokens", "messages", "model",
/// "tools"}`, written from the request itself rather than from a
/// `serde_json::Value` copy of the whole conversation. Keys go in sorted
/// order, as a `Value` writes them, so the hash is the one journals have
/// always recorded (a test checks).
impl serde::Serialize for Turn<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let request = self.request;
        let mut map = serializer.serialize_map(Some(4))?;
        map.serialize_entry("max_tokens", &request.max_tokens)?;
        map.serialize_entry("messages", &Sorted(&request.messages[..]))?;
        map.serialize_entry("model", &request.model)?;
        map.serialize_entry("tools", &Sorted(&request.tools[..]))?;
        map.end()
    }
}

/// Model types as their `serde_json::Value` form writes them: keys sorted.
struct Sorted<T>(T);

impl<'a, T> serde::Serialize for Sorted<&'a [T]>
where
    Sorted<&'a T>: serde::Serialize,
{
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(Sorted))
    }
}

impl serde::Serialize for Sorted<&Message> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        // Every field named, so a new one cannot slip past the hash.
        match self.0 {
            Message::System { text } => {
                map.serialize_entry("role", "system")?;
                map.serialize_entry("text", text)?;
            }
            Message::User { text } => {
                map.serialize_entry("role", "user")?;
                map.serialize_entry("text", text)?;
            }
            Message::Assistant { text, tool_calls } => {
                map.serialize_entry("role", "assistant")?;
                map.serialize_entry("text", text)?;
                map.serialize_entry("tool_calls", &Sorted(&tool_calls[..]))?;
            }
            Message::ToolResult { call_id, name, content, is_error } => {
                map.serialize_entry("call_id", call_id)?;
                map.serialize_entry("content", content)?;
                map.serialize_entry("is_error", is_error)?;
                map.serialize_entry("name", name)?;
                map.serialize_entry("role", "tool_result")?;
            }
        }
        map.end()
    }
}

impl serde::Serialize for Sorted<&nexo_model::ToolCall> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let nexo_model::ToolCall { id, name, arguments } = self.0;
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("arguments", arguments)?;
        map.serialize_entry("id", id)?;
        map.serialize_entry("name", name)?;
        map.end()
    }
}

impl serde::Serialize for Sorted<&nexo_model::ToolSpec> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let nexo_model::ToolSpec { name, description, parameters } = self.0;
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("description", description)?;
        map.serialize_entry("name", name)?;
        map.serialize_entry("parameters", parameters)?;
        map.end()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use nexo_model::{StopReason, ToolCall, ToolSpec, Usage};
    use nexo_store::{MemoryStore, RunStatus, Store};
    use serde_json::json;

    use super::*;
    use crate::journal::tests::run_r1;
    use crate::journal::{Journal, Replay, hash_json};

    #[test]
    fn a_turn_hashes_as_the_value_it_used_to_be_built_as() {
        let call = |id: &str, arguments| ToolCall { id: id.into(), name: "glob".into(), arguments };
        let messages = vec![
            Message::System { text: "Be brief.".into() },
            Message::User { text: "Quote \"this\"\n and naïve ✓".into() },
            Message::Assistant { text: String::new(), tool_calls: vec![] },
            Message::Assistant {
                text: "Looking.".into(),
                tool_calls: vec![
                    call("c1", json!({"pattern": "*.md", "deep": {"z": 1, "a": [null]}})),
                    call("c2", json!(null)),
                ],
            },
            Message::ToolResult { call_id: "c1".into(), name: "glob".into(), content: "a.md".into(), is_error: false },
            Message::ToolResult { call_id: "c2".into(), name: "glob".into(), content: "bad".into(), is_error: true },
        ];
        let tools = vec![
            ToolSpec { name: "glob".into(), description: "Finds files.".into(), parameters: json!({"type": "object"}) },
            ToolSpec { name: "noop".into(), description: String::new(), parameters: json!(null) },
        ];
        for (messages, tools) in [(messages.clone(), tools.clone()), (messages, vec![]), (vec![], tools)] {
            let request = Request { model: "m".into(), messages, tools, max_tokens: 4096 };
            let value = json!({
                "model": request.model,
                "messages": request.messages,
                "tools": request.tools,
                "max_tokens": request.max_tokens,
            });
            let turn = Turn { request: &request, deltas: None };
            assert_eq!(serde_json::to_string(&turn).unwrap(), value.to_string());
            assert_eq!(ModelTurn(&Answers::new(vec![]), None).journal_hash(&turn), hash_json(&value));
        }
    }

    /// A provider that answers from a list, counting its calls.
    struct Answers {
        answers: std::sync::Mutex<Vec<Result<Response, ModelError>>>,
        calls: AtomicUsize,
    }

    impl Answers {
        fn new(answers: Vec<Result<Response, ModelError>>) -> Self {
            Answers { answers: std::sync::Mutex::new(answers), calls: AtomicUsize::new(0) }
        }
    }

    impl Provider for Answers {
        fn name(&self) -> &str {
            "answers"
        }

        fn model(&self) -> &str {
            "m"
        }

        fn complete<'a>(
            &'a self,
            _request: &'a Request,
            _deltas: Option<DeltaSink<'a>>,
        ) -> BoxFuture<'a, Result<Response, ModelError>> {
            self.calls.fetch_add(1, Ordering::Relaxed);
            let answer = self.answers.lock().unwrap().remove(0);
            Box::pin(std::future::ready(answer))
        }
    }

    fn tools(journal: Journal) -> ToolContext {
        let manifest = crate::manifest::AgentManifest::default();
        let authority = crate::authority::Authority::new(&manifest, &crate::grant::Grant::none(), &Default::default());
        let limits = crate::engine::Limits::default();
        ToolContext::new(authority, crate::events::no_events(), &limits, Vec::new(), Default::default())
            .with_journal(Some(Arc::new(journal)))
    }

    /// A turn is journaled as the loop journaled it before it took the
    /// host-call path (`nexo:model` `complete`, the hash of the request's
    /// `Value`, the result as `Result<Response, ModelError>`), and a resume
    /// answers it from the journal without asking the provider.
    #[tokio::test]
    async fn a_turn_journaled_as_before_replays_without_the_provider() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
        let run = run_r1(&store, RunStatus::Running).await;
        let messages = vec![Message::User { text: "hi".into() }];
        let request = Request { model: "m".into(), messages, tools: vec![], max_tokens: 64 };
        let answer = Response {
            text: "hello".into(),
            tool_calls: vec![],
            stop: StopReason::EndTurn,
            usage: Usage { input_tokens: 3, output_tokens: 1 },
            answered: Default::default(),
        };
        let turn = Turn { request: &request, deltas: None };

        let live = Answers::new(vec![
            Err(ModelError::Unavailable { provider: "answers".into(), message: "down".into() }),
            Ok(answer.clone()),
        ]);
        let first = tools(Journal::open(store.clone(), &run, "o", Replay::New, false).await.unwrap());
        let down = first.call(&ModelTurn(&live, None), turn).await;
        assert!(matches!(down, Err(ModelError::Unavailable { .. })), "{down:?}");
        assert_eq!(store.journal("r1").await.unwrap(), vec![], "an unreachable provider is not journaled");
        let second = tools(Journal::open(store.clone(), &run, "o", Replay::Journal, false).await.unwrap());
        assert_eq!(second.call(&ModelTurn(&live, None), turn).await, Ok(answer.clone()), "a resume tries again");
        let entries = store.journal("r1").await.unwrap();
        assert_eq!(entries.len(), 1, "{entries:?}");
        let value = json!({
            "model": request.model,
            "messages": request.messages,
            "tools": request.tools,
            "max_tokens": request.max_tokens,
        });
        let entry = &entries[0];
        assert_eq!((entry.interface.as_str(), entry.function.as_str()), ("nexo:model", "complete"));
        assert_eq!(entry.args_hash, hash_json(&value));
        assert_eq!(entry.result, serde_json::to_string(&Ok::<_, ModelError>(answer.clone())).unwrap());

        let none = Answers::new(vec![]);
        let journal = Journal::open(store.clone(), &run, "o", Replay::Journal, false).await.unwrap();
        assert_eq!(journal.recorded_turns(), 1);
        let resumed = tools(journal);
        assert_eq!(resumed.call(&ModelTurn(&none, None), turn).await, Ok(answer));
        assert_eq!(none.calls.load(Ordering::Relaxed), 0, "the provider is not asked again");
        assert_eq!(resumed.run_journal().unwrap().replayed(), 1);
    }
}
