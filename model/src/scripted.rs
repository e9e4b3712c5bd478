//! The scripted provider: replays a recorded conversation, for tests and
//! offline demos. It never calls a model, and its name says so.

use std::path::Path;
use std::sync::Mutex;

use serde::Deserialize;

use crate::{BoxFuture, DeltaSink, ModelError, Provider, Request, Response, StopReason, ToolCall, Usage};

/// A recorded conversation: the model's turns, in order.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// The turns.
    pub turns: Vec<ScriptedTurn>,
}

/// One recorded model turn.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedTurn {
    /// Its text.
    #[serde(default)]
    pub text: String,
    /// Its tool calls.
    #[serde(default)]
    pub tool_calls: Vec<ScriptedCall>,
}

/// One recorded tool call.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedCall {
    /// The tool's name.
    pub name: String,
    /// Its arguments.
    #[serde(default)]
    pub arguments: serde_json::Value,
}

/// Replays a [`Script`], one turn per call. A resumed run's replay answers
/// the turns its journal holds, so the script goes on from the next one
/// ([`Provider::resume_at`]): no scripted tool call runs twice.
#[derive(Debug)]
pub struct ScriptedProvider {
    label: String,
    turns: Vec<ScriptedTurn>,
    next: Mutex<usize>,
}

impl ScriptedProvider {
    /// A provider replaying `script`; `label` names it in messages.
    pub fn new(label: &str, script: Script) -> Self {
        ScriptedProvider { label: label.into(), turns: script.turns, next: Mutex::new(0) }
    }

    /// Loads a script from a JSON file: `{"turns": [{"text": …, "tool_calls":
    /// [{"name": …, "arguments": {…}}]}, …]}`.
    pub fn from_file(path: &Path) -> Result<Self, ModelError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ModelError::Config(format!("cannot read the script {}: {e}", path.display())))?;
        let script: Script = serde_json::from_str(&text)
            .map_err(|e| ModelError::Config(format!("the script {} is not valid: {e}", path.display())))?;
        if script.turns.is_empty() {
            return Err(ModelError::Config(format!("the script {} has no turns", path.display())));
        }
        Ok(Self::new(&path.display().to_string(), script))
    }
}

impl Provider for ScriptedProvider {
    fn name(&self) -> &str {
        "scripted"
    }

    fn model(&self) -> &str {
        &self.label
    }

    fn resume_at(&self, turns: u64) {
        let turns = usize::try_from(turns).unwrap_or(usize::MAX);
        *self.next.lock().unwrap_or_else(|e| e.into_inner()) = turns;
    }

    fn complete<'a>(
        &'a self,
        request: &'a Request,
        deltas: Option<DeltaSink<'a>>,
    ) -> BoxFuture<'a, Result<Response, ModelError>> {
        Box::pin(async move {
            let index = {
                let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
                let i = *next;
                *next += 1;
                i
            };
            let Some(turn) = self.turns.get(index) else {
                return Err(ModelError::Protocol {
                    provider: "scripted".into(),
                    message: format!("the script {} has only {} turns", self.label, self.turns.len()),
                });
            };
            if let Some(sink) = deltas
                && !turn.text.is_empty()
            {
                sink(&turn.text);
            }
            let tool_calls: Vec<ToolCall> = turn
                .tool_calls
                .iter()
                .enumerate()
                .map(|(i, c)| ToolCall {
                    id: format!("call_{index}_{i}"),
                    name: c.name.clone(),
                    arguments: c.arguments.clone(),
                })
                .collect();
            let stop = if tool_calls.is_empty() { StopReason::EndTurn } else { StopReason::ToolUse };
            // A rough count, so token budgets can be exercised offline.
            let input: usize =
                request.messages.iter().map(|m| serde_json::to_string(m).map(|s| s.len()).unwrap_or(0)).sum();
            let usage = Usage { input_tokens: (input / 4) as u64, output_tokens: (turn.text.len() / 4 + 1) as u64 };
            Ok(Response { text: turn.text.clone(), tool_calls, stop, usage, answered: Default::default() })
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failure should panic
    use super::*;

    fn turn(text: &str) -> ScriptedTurn {
        ScriptedTurn { text: text.into(), tool_calls: Vec::new() }
    }

    #[tokio::test]
    async fn a_resumed_script_goes_on_after_the_journaled_turns() {
        let provider = ScriptedProvider::new("s", Script { turns: vec![turn("one"), turn("two"), turn("three")] });
        let request = Request { model: "s".into(), messages: Vec::new(), tools: Vec::new(), max_tokens: 16 };
        assert_eq!(provider.complete(&request, None).await.unwrap().text, "one");
        // A new process resumes a run whose journal holds two turns.
        let resumed = ScriptedProvider::new("s", Script { turns: vec![turn("one"), turn("two"), turn("three")] });
        resumed.resume_at(2);
        assert_eq!(resumed.complete(&request, None).await.unwrap().text, "three");
        assert!(resumed.complete(&request, None).await.is_err(), "the script has no fourth turn");
    }
}
