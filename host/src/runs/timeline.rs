//! A run's timeline: what it did and when, read back from its record, its
//! events and its journal. Its passes (each from its start to where it
//! suspended, failed or finished, with the process that ran it), within
//! them its model turns (tokens, how each ended), its tool calls with
//! their full arguments and their full result as the journal keeps it, its
//! MCP and other host calls; and the waits between passes (an approval,
//! a suspension, the start).
//!
//! It shows only what the store already holds: secrets never reach the
//! journal or the events, so they never reach a timeline either. A
//! journal written before schema version 8 has no times on its entries:
//! its calls are listed without durations.

use std::collections::BTreeMap;

use nexo_store::{Approval, Entry, Run, RunStatus, Store, StoreError, StoredEvent};
use serde::Serialize;
use serde_json::Value;

use crate::manifest::interface;

/// The most characters of one argument list or result a timeline shows;
/// past it the one truncation routine cuts, with its marker. A journal's
/// results are already within the tools' caps, so this cuts nothing a run
/// recorded today.
pub const SHOWN_CHARS: usize = 1 << 20;

/// The most steps (turns and calls) a timeline lists: the first ones;
/// the rest are counted in [`Timeline::left_out`]. A run's journal has
/// no cap, and one request must not make the server build (and a browser
/// draw) a page of every one of a hundred thousand calls.
pub const MAX_STEPS: usize = 5_000;

/// The most characters of arguments and results a timeline shows over all
/// its calls; past it a call's are cut to the truncation marker.
pub const SHOWN_TOTAL_CHARS: usize = 4 << 20;

/// Events read per store query while building a timeline.
const EVENT_PAGE: usize = 1000;

/// A run's timeline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Timeline {
    /// The run's id.
    pub run: String,
    /// Its status now.
    pub status: RunStatus,
    /// When it was created (milliseconds since the Unix epoch).
    pub created_ms: i64,
    /// When it last changed.
    pub updated_ms: i64,
    /// Its passes, in order.
    pub passes: Vec<Pass>,
    /// Where it waited between passes, in order.
    pub waits: Vec<Wait>,
    /// Input and output tokens over all its turns.
    pub input_tokens: u64,
    /// Output tokens over all its turns.
    pub output_tokens: u64,
    /// What its turns cost in US dollars, when its model was priced.
    pub cost_usd: Option<f64>,
    /// How many of its steps are not listed (past [`MAX_STEPS`]).
    pub left_out: usize,
}

/// One pass: a process ran the run from a start or resume until it
/// suspended, failed, finished or was cancelled.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pass {
    /// 1-based.
    pub number: u32,
    /// The process that ran it (`host:pid:nonce`), when recorded.
    pub owner: Option<String>,
    /// When it started.
    pub started_ms: i64,
    /// When it ended; `None` while it runs.
    pub ended_ms: Option<i64>,
    /// `ended_ms - started_ms`.
    pub duration_ms: Option<i64>,
    /// How it ended: `done`, `suspended`, `failed`, `retrying`,
    /// `cancelled`; `stopped` when another pass followed with no word of
    /// its end (its process died, and the run was recovered); `running`
    /// while it runs.
    pub outcome: String,
    /// Its model turns and calls, in the order they started.
    pub steps: Vec<Step>,
}

/// One step of a pass.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Step {
    /// A model turn.
    Turn(Turn),
    /// A tool the model called.
    ToolCall(Call),
    /// A call to an MCP server's tool.
    McpCall(Call),
    /// Any other journaled host call of the guest's (a file read, a fetch,
    /// a checkpoint).
    HostCall(Call),
}

impl Step {
    /// When it started, if known.
    pub fn started_ms(&self) -> Option<i64> {
        match self {
            Step::Turn(t) => t.started_ms,
            Step::ToolCall(c) | Step::McpCall(c) | Step::HostCall(c) => c.started_ms,
        }
    }

    /// When it ended, if known.
    pub fn ended_ms(&self) -> Option<i64> {
        match self {
            Step::Turn(t) => t.ended_ms,
            Step::ToolCall(c) | Step::McpCall(c) | Step::HostCall(c) => c.ended_ms,
        }
    }
}

/// A model turn.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Turn {
    /// 1-based over the whole run.
    pub number: u32,
    /// Its journal entry.
    pub seq: u64,
    /// When it started.
    pub started_ms: Option<i64>,
    /// When its answer was recorded.
    pub ended_ms: Option<i64>,
    /// How long it took.
    pub duration_ms: Option<i64>,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// How it ended: `end_turn`, `tool_use`, `max_tokens`, or what the
    /// provider said.
    pub finish: Option<String>,
    /// How many tools it called.
    pub tool_calls: usize,
    /// The provider's error, when the turn failed.
    pub error: Option<String>,
}

/// A tool call, an MCP call or another host call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Call {
    /// The tool's name as the model called it, or the host function.
    pub name: String,
    /// The interface of its journal entry.
    pub interface: Option<String>,
    /// Its journal entry, when it has one.
    pub seq: Option<u64>,
    /// The model's call id.
    pub id: Option<String>,
    /// The model turn it belongs to (1-based within its prompt).
    pub turn: Option<u32>,
    /// `allowed`, or the kind of error (`denied`, `failed` …).
    pub verdict: Option<String>,
    /// When it started.
    pub started_ms: Option<i64>,
    /// When its result was recorded.
    pub ended_ms: Option<i64>,
    /// How long it took.
    pub duration_ms: Option<i64>,
    /// Its arguments as the model gave them; `None` for a guest's call,
    /// whose journal keeps only their hash.
    pub arguments: Option<Value>,
    /// Its full result as the journal keeps it (JSON text), or the result
    /// event's summary when it has no entry.
    pub result: Option<String>,
    /// Whether the result is an error.
    pub error: bool,
}

impl Call {
    /// Cuts its arguments and result to what is left of `budget`
    /// characters, and takes what they use from it.
    fn fit(&mut self, budget: &mut usize) {
        if let Some(arguments) = self.arguments.take() {
            let text = arguments.to_string();
            let chars = text.chars().count();
            self.arguments = Some(if chars <= *budget {
                *budget -= chars;
                arguments
            } else {
                let cut = crate::truncate::head_chars(&text, *budget);
                *budget = 0;
                Value::String(cut)
            });
        }
        if let Some(result) = self.result.take() {
            let chars = result.chars().count();
            self.result = Some(if chars <= *budget {
                *budget -= chars;
                result
            } else {
                let cut = crate::truncate::head_chars(&result, *budget);
                *budget = 0;
                cut
            });
        }
    }
}

/// Why a run waited between passes.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitKind {
    /// From the run's record to its first pass: in the queue for a
    /// worker, or while the host prepared it.
    Start,
    /// Suspended until an operator decides a call.
    Approval,
    /// Suspended by the guest, or until a retry.
    Suspended,
}

/// A wait between passes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Wait {
    /// Why.
    pub kind: WaitKind,
    /// When it began (an approval: when it was asked).
    pub started_ms: i64,
    /// When it ended (the next pass was claimed, or an approval decided);
    /// `None` while it lasts.
    pub ended_ms: Option<i64>,
    /// How long it lasted.
    pub duration_ms: Option<i64>,
    /// The suspension's reason.
    pub reason: Option<String>,
    /// The tool an approval is for.
    pub tool: Option<String>,
    /// Its capability.
    pub capability: Option<String>,
    /// The call's arguments.
    pub arguments: Option<Value>,
    /// `approved` or `denied`, once decided (as the store last recorded it).
    pub decision: Option<String>,
}

impl Timeline {
    /// The timeline of `run`, read from `store`. A server passes a run it
    /// already checked belongs to the tenant asking.
    pub async fn load(store: &dyn Store, run: &Run) -> Result<Timeline, StoreError> {
        let mut events = Vec::new();
        loop {
            let after = events.last().map_or(0, |e: &StoredEvent| e.id);
            let page = store.events(&run.id, after, EVENT_PAGE).await?;
            let full = page.len() == EVENT_PAGE;
            events.extend(page);
            if !full {
                break;
            }
        }
        let (journal, approval) = tokio::try_join!(store.journal(&run.id), store.approval(&run.id))?;
        Ok(Timeline::build(run, &events, &journal, approval.as_ref()))
    }

    /// The timeline of `run` from what the store holds of it.
    pub fn build(run: &Run, events: &[StoredEvent], journal: &[Entry], approval: Option<&Approval>) -> Timeline {
        let mut passes = pass_bounds(run, events);
        let (calls, results) = linked_events(events);
        let mut turns = 0u32;
        let mut linked = std::collections::BTreeSet::new();
        let mut steps = Vec::new();
        for entry in journal {
            let step = if entry.interface == interface::MODEL_TURN {
                turns += 1;
                Step::Turn(turn(turns, entry))
            } else if noise(&entry.interface) {
                continue;
            } else {
                let mut call = entry_call(entry);
                if let Some(event) = calls.get(&entry.seq) {
                    linked.insert(entry.seq);
                    from_call_event(&mut call, event);
                    call.verdict = results.get(&entry.seq).and_then(|e| text(&e.data, "verdict"));
                    call.started_ms = call.started_ms.or(Some(event.at_ms));
                }
                if [interface::MCP, interface::AGENT_MCP].contains(&entry.interface.as_str()) {
                    Step::McpCall(call)
                } else if call.id.is_some() {
                    Step::ToolCall(call)
                } else {
                    Step::HostCall(call)
                }
            };
            steps.push(step);
        }
        // The model's calls with no entry: refused before they ran, or
        // unjournaled; their events are all there is.
        steps.extend(unlinked_calls(events, &linked));
        steps.sort_by_key(|s| s.started_ms().unwrap_or(i64::MIN));
        let (input_tokens, output_tokens) = steps.iter().fold((0, 0), |(i, o), s| match s {
            Step::Turn(t) => (i + t.input_tokens, o + t.output_tokens),
            _ => (i, o),
        });
        let price = super::spec::RunSpec::from_record(run.grant.clone()).ok().and_then(|spec| spec.model.price);
        let cost_usd = price.map(|p| crate::spend::usd(p.cost(input_tokens, output_tokens)));
        let left_out = steps.len().saturating_sub(MAX_STEPS);
        steps.truncate(MAX_STEPS);
        let mut budget = SHOWN_TOTAL_CHARS;
        for step in &mut steps {
            if let Step::ToolCall(c) | Step::McpCall(c) | Step::HostCall(c) = step {
                c.fit(&mut budget);
            }
        }
        for step in steps {
            let at = step.started_ms();
            let pass = match at {
                Some(at) => passes.iter().rposition(|p| p.started_ms <= at).unwrap_or(0),
                // An entry an older nexo wrote: no time, so the first pass.
                None => 0,
            };
            if let Some(pass) = passes.get_mut(pass) {
                pass.steps.push(step);
            }
        }
        let waits = waits(run, events, &passes, approval);
        Timeline {
            run: run.id.clone(),
            status: run.status,
            created_ms: run.created_ms,
            updated_ms: run.updated_ms,
            passes,
            waits,
            input_tokens,
            output_tokens,
            cost_usd,
            left_out,
        }
    }

    /// What a reader is told of the steps it leaves out, if any.
    pub fn left_out_note(&self) -> Option<String> {
        (self.left_out > 0)
            .then(|| format!("{} more steps not listed: a timeline lists its first {MAX_STEPS}", self.left_out))
    }

    /// When the timeline begins and ends: the run's creation to its last
    /// change (or the latest thing in it), for drawing it to scale.
    pub fn span(&self) -> (i64, i64) {
        let last = self
            .passes
            .iter()
            .flat_map(|p| p.ended_ms.into_iter().chain(p.steps.iter().filter_map(Step::ended_ms)))
            .chain(self.waits.iter().filter_map(|w| w.ended_ms))
            .max()
            .unwrap_or(self.updated_ms);
        (self.created_ms, last.max(self.updated_ms).max(self.created_ms + 1))
    }
}

/// Host calls a timeline leaves out: clocks and randomness, many and
/// meaningless to a reader.
fn noise(interface: &str) -> bool {
    interface.starts_with("wasi:")
}

/// The passes' starts, ends and owners, from the run's events. A run
/// recorded before passes were marked starts its first at its creation and
/// each later one at a `resumed` event.
fn pass_bounds(run: &Run, events: &[StoredEvent]) -> Vec<Pass> {
    let marked = events.iter().any(|e| e.kind == "pass");
    let starts: Vec<(usize, Option<String>, i64)> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| if marked { e.kind == "pass" } else { e.kind == "resumed" })
        .map(|(i, e)| (i, if marked { text(&e.data, "owner") } else { None }, e.at_ms))
        .collect();
    let mut starts = starts;
    if !marked && run.status != RunStatus::Queued {
        starts.insert(0, (0, None, run.created_ms));
    }
    let mut passes = Vec::new();
    for (n, (index, owner, started_ms)) in starts.iter().cloned().enumerate() {
        let next = starts.get(n + 1).map(|(i, ..)| *i);
        let within = &events[index..next.unwrap_or(events.len())];
        let end = within.iter().find(|e| matches!(e.kind.as_str(), "suspended" | "failed" | "retrying"));
        let (ended_ms, outcome) = match (end, next) {
            (Some(e), _) => (Some(e.at_ms), e.kind.clone()),
            (None, Some(_)) => (within.last().map(|e| e.at_ms), "stopped".to_string()),
            (None, None) if run.status == RunStatus::Running => (None, "running".to_string()),
            (None, None) => (Some(run.updated_ms), run.status.as_str().to_string()),
        };
        passes.push(Pass {
            number: n as u32 + 1,
            owner,
            started_ms,
            ended_ms,
            duration_ms: ended_ms.map(|e| e - started_ms),
            outcome,
            steps: Vec::new(),
        });
    }
    passes
}

/// The `tool_call` and `tool_result` events that name their journal entry.
fn linked_events(events: &[StoredEvent]) -> (BTreeMap<u64, &StoredEvent>, BTreeMap<u64, &StoredEvent>) {
    let (mut calls, mut results) = (BTreeMap::new(), BTreeMap::new());
    for e in events {
        let Some(seq) = e.data.get("entry").and_then(Value::as_u64) else { continue };
        match e.kind.as_str() {
            "tool_call" => calls.insert(seq, e),
            "tool_result" => results.insert(seq, e),
            _ => None,
        };
    }
    (calls, results)
}

/// The model's calls no journal entry holds, paired call to result by
/// turn and id.
fn unlinked_calls(events: &[StoredEvent], linked: &std::collections::BTreeSet<u64>) -> Vec<Step> {
    let unlinked = |e: &&StoredEvent| e.data.get("entry").and_then(Value::as_u64).is_none_or(|s| !linked.contains(&s));
    let key = |e: &StoredEvent| json_key(&e.data);
    // Where each call's results are, so that pairing is one lookup a call,
    // not a scan of the events after it.
    let mut results: std::collections::HashMap<String, Vec<usize>> = std::collections::HashMap::new();
    for (i, e) in events.iter().enumerate().filter(|(_, e)| e.kind == "tool_result") {
        results.entry(key(e)).or_default().push(i);
    }
    let mut steps = Vec::new();
    for (i, event) in events.iter().enumerate().filter(|(_, e)| e.kind == "tool_call").filter(|(_, e)| unlinked(e)) {
        let result =
            results.get(&key(event)).and_then(|at| at.get(at.partition_point(|&r| r < i))).map(|&r| &events[r]);
        let mut call = Call {
            name: String::new(),
            interface: None,
            seq: None,
            id: None,
            turn: None,
            verdict: result.and_then(|r| text(&r.data, "verdict")),
            started_ms: Some(event.at_ms),
            ended_ms: result.map(|r| r.at_ms),
            duration_ms: result.map(|r| r.at_ms - event.at_ms),
            arguments: None,
            result: result.and_then(|r| text(&r.data, "summary")),
            error: result.and_then(|r| text(&r.data, "verdict")).is_some_and(|v| v != "allowed"),
        };
        from_call_event(&mut call, event);
        steps.push(Step::ToolCall(call));
    }
    steps
}

/// What pairs a call's events with its result's: its turn and id.
fn json_key(data: &Value) -> String {
    Value::Array(vec![data.get("turn").cloned().unwrap_or(Value::Null), data.get("id").cloned().unwrap_or(Value::Null)])
        .to_string()
}

fn from_call_event(call: &mut Call, event: &StoredEvent) {
    if let Some(name) = text(&event.data, "name") {
        call.name = name;
    }
    call.id = text(&event.data, "id");
    call.turn = event.data.get("turn").and_then(Value::as_u64).map(|t| t as u32);
    call.arguments = event.data.get("arguments").cloned().map(cap_value);
}

/// A journal entry as a call: its result in full, as JSON text (the
/// handler's value, or its error).
fn entry_call(entry: &Entry) -> Call {
    let (result, error) = match serde_json::from_str::<Value>(&entry.result) {
        Ok(Value::Object(mut o)) if o.len() == 1 && (o.contains_key("Ok") || o.contains_key("Err")) => {
            let error = o.contains_key("Err");
            let value = o.remove("Ok").or_else(|| o.remove("Err")).unwrap_or(Value::Null);
            (shown(&value), error)
        }
        Ok(value) => (shown(&value), false),
        Err(_) => (crate::truncate::head_chars(&entry.result, SHOWN_CHARS), false),
    };
    Call {
        name: entry.function.clone(),
        interface: Some(entry.interface.clone()),
        seq: Some(entry.seq),
        id: None,
        turn: None,
        verdict: None,
        started_ms: entry.started_ms,
        ended_ms: entry.ended_ms,
        duration_ms: duration(entry),
        arguments: None,
        result: Some(result),
        error,
    }
}

/// A value as a reader sees it: a string as its text, anything else as
/// pretty JSON; cut by the truncation routine past [`SHOWN_CHARS`].
fn shown(value: &Value) -> String {
    let text = match value {
        Value::String(s) => s.clone(),
        other => serde_json::to_string_pretty(other).unwrap_or_default(),
    };
    crate::truncate::head_chars(&text, SHOWN_CHARS)
}

/// Arguments too large to show whole become their cut text.
fn cap_value(value: Value) -> Value {
    let text = value.to_string();
    if text.chars().count() <= SHOWN_CHARS {
        value
    } else {
        Value::String(crate::truncate::head_chars(&text, SHOWN_CHARS))
    }
}

fn duration(entry: &Entry) -> Option<i64> {
    Some(entry.ended_ms? - entry.started_ms?)
}

/// A model turn from its journal entry: the provider's answer, with its
/// tokens and why it stopped, or its error.
fn turn(number: u32, entry: &Entry) -> Turn {
    let mut turn = Turn {
        number,
        seq: entry.seq,
        started_ms: entry.started_ms,
        ended_ms: entry.ended_ms,
        duration_ms: duration(entry),
        input_tokens: 0,
        output_tokens: 0,
        finish: None,
        tool_calls: 0,
        error: None,
    };
    match serde_json::from_str::<Result<nexo_model::Response, nexo_model::ModelError>>(&entry.result) {
        Ok(Ok(response)) => {
            turn.input_tokens = response.usage.input_tokens;
            turn.output_tokens = response.usage.output_tokens;
            turn.tool_calls = response.tool_calls.len();
            turn.finish = Some(match response.stop {
                nexo_model::StopReason::Other(why) => why,
                stop => {
                    serde_json::to_value(&stop).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
                }
            });
        }
        Ok(Err(e)) => turn.error = Some(e.to_string()),
        Err(e) => turn.error = Some(format!("the journal's entry cannot be read: {e}")),
    }
    turn
}

/// The waits: in the queue before the first pass, and after each pass that
/// suspended or was queued for a retry, until the next began.
fn waits(run: &Run, events: &[StoredEvent], passes: &[Pass], approval: Option<&Approval>) -> Vec<Wait> {
    let mut waits = Vec::new();
    let wait = |kind, started_ms: i64, ended_ms: Option<i64>| Wait {
        kind,
        started_ms,
        ended_ms,
        duration_ms: ended_ms.map(|e| e - started_ms),
        reason: None,
        tool: None,
        capability: None,
        arguments: None,
        decision: None,
    };
    match passes.first() {
        Some(first) if first.started_ms > run.created_ms => {
            waits.push(wait(WaitKind::Start, run.created_ms, Some(first.started_ms)))
        }
        None if run.status == RunStatus::Queued => waits.push(wait(WaitKind::Start, run.created_ms, None)),
        _ => {}
    }
    for (n, pass) in passes.iter().enumerate() {
        let Some(ended) = pass.ended_ms.filter(|_| matches!(pass.outcome.as_str(), "suspended" | "retrying")) else {
            continue;
        };
        // The wait ends when the next pass is claimed (its `resumed`
        // event), or when it starts.
        let next = passes.get(n + 1);
        let resumed = events.iter().find(|e| e.kind == "resumed" && e.at_ms >= ended).map(|e| e.at_ms);
        let ended_ms = match next {
            Some(next) => Some(resumed.unwrap_or(next.started_ms).min(next.started_ms)),
            None if run.status.is_final() => Some(run.updated_ms),
            None => None,
        };
        let suspended = events.iter().find(|e| e.kind == "suspended" && e.at_ms == ended);
        let asked = suspended.and_then(|e| e.data.get("approval")).filter(|a| !a.is_null());
        let mut w = wait(if asked.is_some() { WaitKind::Approval } else { WaitKind::Suspended }, ended, ended_ms);
        w.reason = suspended.and_then(|e| text(&e.data, "reason")).or_else(|| {
            events.iter().find(|e| e.kind == "retrying" && e.at_ms == ended).and_then(|e| text(&e.data, "error"))
        });
        if let Some(asked) = asked {
            w.tool = text(asked, "tool");
            w.capability = text(asked, "capability");
            w.arguments = asked.get("arguments").cloned().map(cap_value);
            // The next pass names the decision it went on with; while it
            // waits, the store's approval has it.
            let same = |seq: Option<u64>, hash: Option<&str>| {
                asked.get("seq").and_then(Value::as_u64) == seq && text(asked, "args_hash").as_deref() == hash
            };
            let carried = events
                .iter()
                .find(|e| e.kind == "pass" && e.at_ms >= ended)
                .and_then(|e| e.data.get("decided").filter(|d| !d.is_null()))
                .filter(|d| same(d.get("seq").and_then(Value::as_u64), d.get("args_hash").and_then(Value::as_str)))
                .and_then(|d| text(d, "decision"));
            let stored = approval
                .filter(|a| same(Some(a.seq), Some(&a.args_hash)))
                .and_then(|a| a.decision)
                .map(|d| d.as_str().to_string());
            w.decision = carried.or(stored);
        }
        waits.push(w);
    }
    waits
}

/// A duration as people read it: `820 ms`, `4.2 s`, `3 min 5 s`.
pub fn human_duration(ms: i64) -> String {
    match ms {
        ..1_000 => format!("{} ms", ms.max(0)),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        _ => format!("{} min {} s", ms / 60_000, (ms % 60_000) / 1000),
    }
}

fn text(value: &Value, key: &str) -> Option<String> {
    value.get(key).and_then(Value::as_str).map(str::to_string)
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used)]

    use nexo_store::Decision;
    use serde_json::json;

    use super::*;

    /// Run `r1`, of `status`, created and last changed then.
    pub(crate) fn run(status: RunStatus, created_ms: i64, updated_ms: i64) -> Run {
        Run {
            id: "r1".into(),
            agent: "a".into(),
            kind: "component".into(),
            source: String::new(),
            component_sha256: String::new(),
            input: String::new(),
            grant: Value::Null,
            status,
            suspend_reason: None,
            wake_ms: None,
            wake_job: None,
            signal_wait: None,
            resume_key: None,
            resume_input: None,
            result: None,
            error: None,
            created_ms,
            updated_ms,
            lease: None,
            session: None,
            tenant: None,
            parent: None,
        }
    }

    /// Event `id` of run `r1`.
    pub(crate) fn event(id: i64, kind: &str, data: Value, at_ms: i64) -> StoredEvent {
        StoredEvent { id, run: "r1".into(), kind: kind.into(), data, at_ms }
    }

    fn entry(seq: u64, interface: &str, result: Value, times: Option<(i64, i64)>) -> Entry {
        Entry {
            seq,
            end: seq + 1,
            interface: interface.into(),
            function: "f".into(),
            args_hash: String::new(),
            result: result.to_string(),
            started_ms: times.map(|t| t.0),
            ended_ms: times.map(|t| t.1),
        }
    }

    /// A run an older nexo recorded has no `pass` events and no times on
    /// its entries: its passes come from its creation and `resumed`
    /// events, its calls are listed in the first pass without durations,
    /// and its approval's decision is the store's.
    #[test]
    fn a_run_an_older_nexo_recorded_reads_from_its_resumed_events() {
        let asked =
            json!({"seq": 3, "args_hash": "h", "tool": "write-file", "capability": "write", "arguments": {"p": 1}});
        let events = [
            event(1, "suspended", json!({"reason": "approval: write", "approval": asked}), 2_000),
            event(2, "resumed", json!({}), 3_000),
        ];
        let turn = json!({"Ok": {"text": "", "tool_calls": [], "stop": "end_turn", "usage": {"input_tokens": 7, "output_tokens": 2}}});
        let journal = [entry(0, interface::MODEL_TURN, turn, None), entry(1, "wasi:clocks", json!(1), None)];
        let approval = Approval {
            seq: 3,
            capability: "write".into(),
            tool: "write-file".into(),
            arguments: json!({"p": 1}),
            args_hash: "h".into(),
            component_sha256: String::new(),
            decision: Some(Decision::Approved),
            created_ms: 2_000,
        };
        let timeline = Timeline::build(&run(RunStatus::Done, 1_000, 4_000), &events, &journal, Some(&approval));
        let bounds: Vec<_> = timeline.passes.iter().map(|p| (p.started_ms, p.ended_ms, p.outcome.as_str())).collect();
        assert_eq!(bounds, [(1_000, Some(2_000), "suspended"), (3_000, Some(4_000), "done")]);
        let Step::Turn(turn) = &timeline.passes[0].steps[0] else { panic!("{timeline:?}") };
        assert_eq!((turn.input_tokens, turn.output_tokens, turn.duration_ms), (7, 2, None));
        assert_eq!(turn.finish.as_deref(), Some("end_turn"));
        assert_eq!(timeline.passes[0].steps.len(), 1, "clocks are left out");
        let [wait] = timeline.waits.as_slice() else { panic!("{timeline:?}") };
        assert_eq!((wait.kind.clone(), wait.started_ms, wait.ended_ms), (WaitKind::Approval, 2_000, Some(3_000)));
        assert_eq!((wait.tool.as_deref(), wait.decision.as_deref()), (Some("write-file"), Some("approved")));
    }

    /// A model's call that no entry holds (refused before it ran) is listed
    /// from its events; a tool's error result is marked an error.
    #[test]
    fn calls_come_from_their_entries_and_events() {
        let events = [
            event(1, "pass", json!({"owner": "h:1:n", "decided": null}), 1_000),
            event(2, "tool_call", json!({"turn": 1, "id": "a", "name": "nope", "arguments": {}}), 1_100),
            event(
                3,
                "tool_result",
                json!({"turn": 1, "id": "a", "verdict": "invalid-input", "summary": "no tool"}),
                1_101,
            ),
            event(
                4,
                "tool_call",
                json!({"turn": 1, "id": "b", "name": "read_file", "arguments": {"path": "x"}, "entry": 2}),
                1_200,
            ),
            event(5, "tool_result", json!({"turn": 1, "id": "b", "verdict": "not-found", "entry": 2}), 1_300),
        ];
        let journal =
            [entry(2, interface::TOOLS, json!({"Err": {"NotFound": "x is not there"}}), Some((1_200, 1_300)))];
        let timeline = Timeline::build(&run(RunStatus::Done, 1_000, 2_000), &events, &journal, None);
        let calls: Vec<&Call> = timeline.passes[0]
            .steps
            .iter()
            .map(|s| match s {
                Step::ToolCall(c) => c,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(calls.len(), 2, "{timeline:?}");
        assert_eq!(
            (calls[0].name.as_str(), calls[0].result.as_deref(), calls[0].error),
            ("nope", Some("no tool"), true)
        );
        assert_eq!((calls[1].name.as_str(), calls[1].duration_ms, calls[1].error), ("read_file", Some(100), true));
        assert!(calls[1].result.as_deref().unwrap().contains("x is not there"), "{:?}", calls[1]);
        assert_eq!(calls[1].arguments, Some(json!({"path": "x"})));
        assert_eq!(timeline.passes[0].owner.as_deref(), Some("h:1:n"));
    }

    /// A run of a hundred thousand host calls with large results (its
    /// journal has no cap) lists its first [`MAX_STEPS`] steps, says how
    /// many more there are, and shows at most [`SHOWN_TOTAL_CHARS`] of
    /// results: one request cannot make the server build, or a browser
    /// draw, a page of every call. Its tokens still count every turn.
    #[test]
    fn a_huge_run_lists_its_first_steps_within_a_bound() {
        let events = [event(1, "pass", json!({"owner": "h:1:n", "decided": null}), 1_000)];
        let result = json!({"Ok": "x".repeat(4096)});
        let calls = 100_000u64;
        let mut journal: Vec<Entry> = (0..calls)
            .map(|seq| entry(seq, "nexo:agent/files", result.clone(), Some((2_000 + seq as i64, 2_001 + seq as i64))))
            .collect();
        let turn = json!({"Ok": {"text": "", "tool_calls": [], "stop": "end_turn", "usage": {"input_tokens": 7, "output_tokens": 2}}});
        journal.push(entry(calls, interface::MODEL_TURN, turn, Some((500_000, 500_001))));
        let timeline = Timeline::build(&run(RunStatus::Done, 1_000, 600_000), &events, &journal, None);
        let steps = &timeline.passes[0].steps;
        assert_eq!(steps.len(), MAX_STEPS);
        assert_eq!(timeline.left_out, calls as usize + 1 - MAX_STEPS);
        assert_eq!((timeline.input_tokens, timeline.output_tokens), (7, 2), "the turn left out still counts");
        let Step::HostCall(first) = &steps[0] else { panic!("{:?}", steps[0]) };
        assert_eq!(first.result.as_deref().map(str::len), Some(4096), "the first calls are shown whole");
        let shown: usize = steps
            .iter()
            .filter_map(|s| match s {
                Step::HostCall(c) => c.result.as_ref().map(|r| r.chars().count()),
                _ => None,
            })
            .sum();
        assert!(shown <= SHOWN_TOTAL_CHARS + MAX_STEPS * 128, "{shown} characters of results shown");
        let bytes = serde_json::to_vec(&timeline).unwrap().len();
        assert!(bytes < SHOWN_TOTAL_CHARS + MAX_STEPS * 512, "a timeline of {bytes} bytes");
    }

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(
            [0, 999, 1_000, 4_240, 59_900, 185_000].map(human_duration),
            ["0 ms", "999 ms", "1.0 s", "4.2 s", "59.9 s", "3 min 5 s"]
        );
    }
}
