//! Pieces shared by the providers' request bodies, which serialize the
//! conversation straight from the request (borrowing it) instead of building
//! a `serde_json::Value` copy of it first. Their maps write keys in sorted
//! order, as `serde_json::Value` does, so the bytes sent are unchanged.

use std::fmt;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;

/// A JSON string of something's text form, escaped as it is written, with
/// no `String` in between (tool arguments, an `Error: …` result).
pub(crate) struct Display<T>(pub(crate) T);

impl<T: fmt::Display> Serialize for Display<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&self.0)
    }
}

/// A tool's parameter schema; none (`null`) is sent as the empty object
/// schema `{"properties": {}, "type": "object"}`, which the APIs require.
pub(crate) struct Schema<'a>(pub(crate) &'a Value);

impl Serialize for Schema<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if !self.0.is_null() {
            return self.0.serialize(serializer);
        }
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("properties", &Empty)?;
        map.serialize_entry("type", "object")?;
        map.end()
    }
}

/// A slice written as a JSON array, each item in its wire form
/// (`Each(&request.tools, WireTool)`), with no `Vec` of wrappers in between.
pub(crate) struct Each<'a, T, W>(pub(crate) &'a [T], pub(crate) fn(&'a T) -> W);

impl<T, W> Each<'_, T, W> {
    /// Whether there are no items (for `skip_serializing_if`).
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<'a, T, W: Serialize> Serialize for Each<'a, T, W> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(self.1))
    }
}

/// `{}`.
pub(crate) struct Empty;

impl Serialize for Empty {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_map(Some(0))?.end()
    }
}

/// Requests that touch every case of the wire formats, for the tests that
/// check the bodies against a `serde_json::Value` built the plain way.
#[cfg(test)]
pub(crate) fn sample_requests() -> Vec<crate::Request> {
    use serde_json::json;

    use crate::{Message, Request, ToolCall, ToolSpec};
    let call = |id: &str, arguments: Value| ToolCall { id: id.into(), name: "read_file".into(), arguments };
    let result = |id: &str, content: &str, is_error| Message::ToolResult {
        call_id: id.into(),
        name: "read_file".into(),
        content: content.into(),
        is_error,
    };
    let messages = vec![
        Message::System { text: "Be brief.".into() },
        Message::System { text: "  ".into() },
        Message::User { text: "Quote \"this\", a tab\t, a newline\n, \u{1} and naïve café ✓".into() },
        Message::User { text: String::new() },
        Message::Assistant { text: "Let me look.".into(), tool_calls: vec![] },
        Message::Assistant {
            text: String::new(),
            tool_calls: vec![
                call("c1", json!({"path": "a \"b\".md", "lines": [1, 2], "deep": {"z": 1, "a": null}})),
                call("c2", Value::Null),
                call("c3", json!("{\"raw\": true}")),
                call("c4", json!([1, 2])),
            ],
        },
        result("c1", "# Title\n\nbody", false),
        result("c2", "no such file", true),
        result("c3", "", false),
        Message::User { text: "And now?".into() },
        Message::Assistant { text: "Both.".into(), tool_calls: vec![call("c5", json!({}))] },
        result("c5", "ok", false),
        Message::Assistant { text: String::new(), tool_calls: vec![] },
        Message::System { text: "Late instructions.".into() },
        Message::Assistant { text: "Done.".into(), tool_calls: vec![] },
    ];
    let tools = vec![
        ToolSpec {
            name: "read_file".into(),
            description: "Reads a \"file\".".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        },
        ToolSpec { name: "noop".into(), description: String::new(), parameters: Value::Null },
    ];
    let full = Request { model: "m-1".into(), messages, tools, max_tokens: 300 };
    vec![
        full.clone(),
        Request { model: String::new(), max_tokens: 0, tools: vec![], ..full.clone() },
        Request { messages: vec![], ..full.clone() },
        Request { messages: vec![Message::User { text: "hi".into() }], tools: vec![], ..full },
    ]
}
