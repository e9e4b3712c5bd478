//! Claude Code's `stream-json` output, one JSON object per line, read into
//! what the loop acts on. Anything this reader does not know is
//! [`Line::Other`]: the CLI adds message kinds between releases.

use serde_json::Value;

/// One line of the stream.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Line {
    /// `system`/`init`: the session started.
    Init {
        /// The model the CLI uses.
        model: String,
        /// The tools it offers the model.
        tools: Vec<String>,
    },
    /// An `assistant` message (or a piece of one: the CLI writes one line
    /// per content block, all with the message's id).
    Assistant {
        /// The message's id.
        id: String,
        /// Its text blocks.
        text: Vec<String>,
        /// Its tool calls.
        tool_uses: Vec<ToolUse>,
    },
    /// A `user` message carrying tool results.
    ToolResults(Vec<ToolResult>),
    /// The `result`: the prompt ended.
    Result(Ending),
    /// Anything else (`system` notices, hook events, partial messages).
    Other,
}

/// A tool call the model made.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ToolUse {
    /// Its id.
    pub(crate) id: String,
    /// The tool, as the CLI names it (`mcp__nexo__read_file`, `Bash`).
    pub(crate) name: String,
    /// Its input.
    pub(crate) input: Value,
}

/// A tool's result, as the CLI reports it to the model.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ToolResult {
    /// The call's id.
    pub(crate) id: String,
    /// The text.
    pub(crate) content: String,
    /// Whether it failed.
    pub(crate) is_error: bool,
}

/// The `result` line.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Ending {
    /// `success`, `error_max_turns`, `error_during_execution`,
    /// `error_max_budget_usd`, …
    pub(crate) subtype: String,
    /// Whether the CLI counts it as an error (a `success` can be one: an
    /// API error ends the session with `is_error`).
    pub(crate) is_error: bool,
    /// The final answer, or the error's text.
    pub(crate) result: Option<String>,
    /// Model turns, as the CLI counts them.
    pub(crate) num_turns: u32,
    /// Input tokens, cached ones included.
    pub(crate) input_tokens: u64,
    /// Output tokens.
    pub(crate) output_tokens: u64,
    /// What the session cost, in US dollars.
    pub(crate) cost_usd: Option<f64>,
    /// The HTTP status of the API error that ended it, if one did.
    pub(crate) api_error_status: Option<u16>,
    /// The CLI's error messages, if it gave any.
    pub(crate) errors: Vec<String>,
}

/// Reads one line. `Err` says why it is not a stream-json message.
pub(crate) fn parse(line: &str) -> Result<Line, String> {
    let value: Value = serde_json::from_str(line).map_err(|e| format!("it is not JSON ({e})"))?;
    let Some(kind) = value.get("type").and_then(Value::as_str) else {
        return Err("it is a JSON value without a string `type`".into());
    };
    Ok(match kind {
        "system" if value.get("subtype").and_then(Value::as_str) == Some("init") => Line::Init {
            model: text(&value, "model"),
            tools: value
                .get("tools")
                .and_then(Value::as_array)
                .map(|t| t.iter().filter_map(Value::as_str).map(str::to_string).collect())
                .unwrap_or_default(),
        },
        "assistant" => {
            let message = value.get("message").ok_or("an `assistant` line has no `message`")?;
            let mut text = Vec::new();
            let mut tool_uses = Vec::new();
            for block in blocks(message) {
                match block.get("type").and_then(Value::as_str) {
                    Some("text") => text.push(self::text(block, "text")),
                    Some("tool_use") => tool_uses.push(ToolUse {
                        id: self::text(block, "id"),
                        name: self::text(block, "name"),
                        input: block.get("input").cloned().unwrap_or(Value::Null),
                    }),
                    _ => {}
                }
            }
            Line::Assistant { id: self::text(message, "id"), text, tool_uses }
        }
        "user" => {
            let results: Vec<ToolResult> = value
                .get("message")
                .map(blocks)
                .unwrap_or_default()
                .into_iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
                .map(|b| ToolResult {
                    id: self::text(b, "tool_use_id"),
                    content: content_text(b.get("content")),
                    is_error: b.get("is_error").and_then(Value::as_bool).unwrap_or(false),
                })
                .collect();
            if results.is_empty() { Line::Other } else { Line::ToolResults(results) }
        }
        "result" => {
            let usage = value.get("usage");
            let count = |key: &str| usage.and_then(|u| u.get(key)).and_then(Value::as_u64).unwrap_or(0);
            Line::Result(Ending {
                subtype: text(&value, "subtype"),
                is_error: value.get("is_error").and_then(Value::as_bool).unwrap_or(false),
                result: value.get("result").and_then(Value::as_str).map(str::to_string),
                num_turns: value.get("num_turns").and_then(Value::as_u64).map_or(0, |n| n.min(u32::MAX.into()) as u32),
                input_tokens: count("input_tokens")
                    + count("cache_creation_input_tokens")
                    + count("cache_read_input_tokens"),
                output_tokens: count("output_tokens"),
                cost_usd: value.get("total_cost_usd").and_then(Value::as_f64),
                api_error_status: value
                    .get("api_error_status")
                    .and_then(Value::as_u64)
                    .and_then(|s| u16::try_from(s).ok()),
                errors: value
                    .get("errors")
                    .and_then(Value::as_array)
                    .map(|e| e.iter().map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string)).collect())
                    .unwrap_or_default(),
            })
        }
        _ => Line::Other,
    })
}

fn text(value: &Value, key: &str) -> String {
    value.get(key).and_then(Value::as_str).unwrap_or_default().to_string()
}

fn blocks(message: &Value) -> Vec<&Value> {
    message.get("content").and_then(Value::as_array).map(|b| b.iter().collect()).unwrap_or_default()
}

/// A tool result's content: a string, or text blocks.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n")
        }
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failure should panic

    use super::*;

    #[test]
    fn reads_each_kind() {
        let init = parse(r#"{"type":"system","subtype":"init","model":"m","tools":["mcp__nexo__read_file"]}"#);
        assert_eq!(init.unwrap(), Line::Init { model: "m".into(), tools: vec!["mcp__nexo__read_file".into()] });
        let a = parse(
            r#"{"type":"assistant","message":{"id":"msg_1","content":[{"type":"text","text":"hi"},
               {"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls"}}]}}"#,
        )
        .unwrap();
        let Line::Assistant { id, text, tool_uses } = a else { panic!("not an assistant line: {a:?}") };
        assert_eq!((id.as_str(), text, tool_uses[0].name.as_str()), ("msg_1", vec!["hi".to_string()], "Bash"));
        let u = parse(
            r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1",
               "content":[{"type":"text","text":"a"},{"type":"text","text":"b"}],"is_error":true}]}}"#,
        )
        .unwrap();
        assert_eq!(u, Line::ToolResults(vec![ToolResult { id: "t1".into(), content: "a\nb".into(), is_error: true }]));
        let r = parse(
            r#"{"type":"result","subtype":"error_max_turns","is_error":true,"num_turns":3,"total_cost_usd":0.5,
               "usage":{"input_tokens":10,"cache_read_input_tokens":5,"output_tokens":2}}"#,
        )
        .unwrap();
        let Line::Result(end) = r else { panic!("not a result") };
        assert_eq!(
            (end.subtype.as_str(), end.num_turns, end.input_tokens, end.output_tokens),
            ("error_max_turns", 3, 15, 2)
        );
        assert_eq!(parse(r#"{"type":"system","subtype":"ui_invalidate"}"#).unwrap(), Line::Other);
        assert_eq!(
            parse(r#"{"type":"user","message":{"content":[{"type":"text","text":"x"}]}}"#).unwrap(),
            Line::Other
        );
    }

    #[test]
    fn refuses_what_is_not_a_message() {
        assert!(parse("not json").unwrap_err().contains("not JSON"));
        assert!(parse("[1,2]").unwrap_err().contains("without a string `type`"));
        assert!(parse(r#"{"type":"assistant"}"#).unwrap_err().contains("no `message`"));
    }
}
