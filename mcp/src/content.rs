//! Tool results and schemas as the host hands them to the model.

use rmcp::model::{CallToolResult, ContentBlock, JsonObject, ResourceContents};
use serde_json::Value;

/// A tool call's result as text for the model.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CallResult {
    /// Every content block rendered: text as is, images, audio and resources
    /// summarized (`[image image/png, 5380 base64 bytes]`), structured content
    /// as JSON when there is no text. Not truncated.
    pub text: String,
    /// The server marked the result as a tool error.
    pub is_error: bool,
}

/// Every block of `result` as text, in order, one block per paragraph: text
/// as is, an embedded text resource as a header line and its text, anything
/// binary as a one-line summary. Structured content is shown as JSON when no
/// block carries text. Nothing is dropped silently and nothing is cut.
pub(crate) fn render(result: &CallToolResult) -> CallResult {
    let mut parts: Vec<String> = Vec::new();
    let mut has_text = false;
    for block in &result.content {
        let part = match block {
            ContentBlock::Text(t) => {
                has_text = true;
                t.text.clone()
            }
            ContentBlock::Image(i) => format!("[image {}, {} base64 bytes]", i.mime_type, i.data.len()),
            ContentBlock::Audio(a) => format!("[audio {}, {} base64 bytes]", a.mime_type, a.data.len()),
            ContentBlock::Resource(r) => match &r.resource {
                ResourceContents::TextResourceContents { uri, mime_type, text, .. } => {
                    has_text = true;
                    format!("[resource {uri}{}]\n{text}", mime(mime_type.as_deref()))
                }
                ResourceContents::BlobResourceContents { uri, mime_type, blob, .. } => {
                    format!("[resource {uri}{}, {} base64 bytes]", mime(mime_type.as_deref()), blob.len())
                }
                // Newer resource kinds: still say something rather than nothing.
                other => format!("[resource: {}]", kind_of(other)),
            },
            ContentBlock::ResourceLink(l) => {
                let mut line = format!("[resource link {}", l.uri);
                if !l.name.is_empty() && l.name != l.uri {
                    line.push_str(&format!(" ({})", l.name));
                }
                line.push_str(&mime(l.mime_type.as_deref()));
                if let Some(d) = l.description.as_deref().filter(|d| !d.is_empty()) {
                    line.push_str(&format!(": {d}"));
                }
                line.push(']');
                line
            }
            other => format!("[{} content]", kind_of(other)),
        };
        parts.push(part);
    }
    if let Some(structured) = &result.structured_content
        && !has_text
    {
        parts.push(serde_json::to_string_pretty(structured).unwrap_or_else(|_| structured.to_string()));
    }
    let text = if parts.is_empty() { "[no content]".to_string() } else { parts.join("\n\n") };
    CallResult { text, is_error: result.is_error == Some(true) }
}

fn mime(mime: Option<&str>) -> String {
    mime.map(|m| format!(" {m}")).unwrap_or_default()
}

/// The `type` a block serializes with, for kinds this crate does not know.
fn kind_of(value: &impl serde::Serialize) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.get("type").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

/// A tool's schema as providers accept it: an object schema with
/// `properties`, without `$schema`.
pub(crate) fn normalize_schema(schema: &JsonObject) -> Value {
    let mut schema = schema.clone();
    schema.remove("$schema");
    schema.insert("type".into(), Value::String("object".into()));
    if !schema.get("properties").is_some_and(Value::is_object) {
        schema.insert("properties".into(), Value::Object(Default::default()));
    }
    Value::Object(schema)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use rmcp::model::{ContentBlock, Resource, ResourceContents};
    use serde_json::json;

    use super::*;

    #[test]
    fn every_block_is_rendered() {
        let mut result = CallToolResult::success(vec![
            ContentBlock::text("hello"),
            ContentBlock::image("aGVsbG8=", "image/png"),
            ContentBlock::resource(ResourceContents::text("file body", "file:///a.txt")),
            ContentBlock::resource(ResourceContents::BlobResourceContents {
                uri: "file:///b.bin".into(),
                mime_type: Some("application/octet-stream".into()),
                blob: "AAAA".into(),
                meta: None,
            }),
            ContentBlock::resource_link(Resource::new("file:///c.txt", "c.txt")),
        ]);
        result.is_error = Some(true);
        let rendered = render(&result);
        assert!(rendered.is_error);
        assert_eq!(
            rendered.text,
            "hello\n\n[image image/png, 8 base64 bytes]\n\n[resource file:///a.txt text/plain]\nfile body\n\n\
             [resource file:///b.bin application/octet-stream, 4 base64 bytes]\n\n[resource link file:///c.txt (c.txt)]"
        );
    }

    #[test]
    fn structured_content_shows_when_there_is_no_text() {
        let mut result = CallToolResult::success(vec![]);
        result.structured_content = Some(json!({"sum": 3}));
        assert_eq!(render(&result).text, "{\n  \"sum\": 3\n}");
        assert!(!render(&result).is_error);
        let mut with_text = CallToolResult::success(vec![ContentBlock::text("3")]);
        with_text.structured_content = Some(json!({"sum": 3}));
        assert_eq!(render(&with_text).text, "3");
        assert_eq!(render(&CallToolResult::success(vec![])).text, "[no content]");
    }

    #[test]
    fn schemas_are_normalized() {
        let given =
            json!({"$schema": "http://json-schema.org/draft-07/schema#", "properties": {"a": {"type": "string"}}});
        let out = normalize_schema(given.as_object().unwrap());
        assert_eq!(out, json!({"type": "object", "properties": {"a": {"type": "string"}}}));
        let out = normalize_schema(&Default::default());
        assert_eq!(out, json!({"type": "object", "properties": {}}));
    }
}
