//! Model-facing tool names.

use sha2::{Digest, Sha256};

/// The longest tool name providers accept (OpenAI's limit).
pub const MAX_TOOL_NAME: usize = 64;

/// The model-facing name of `tool` on `server`: `mcp__<server>__<tool>`, tool
/// characters outside `[A-Za-z0-9_-]` mapped to `_`, at most
/// [`MAX_TOOL_NAME`] characters. A name that had to be changed (mapped or
/// shortened) ends in a short hash of the original, so two tools whose names
/// differ only in mapped characters, or past the cut, stay distinct.
pub fn model_tool_name(server: &str, tool: &str) -> String {
    let mapped: String =
        tool.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect();
    let full = format!("mcp__{server}__{mapped}");
    if mapped == tool && full.len() <= MAX_TOOL_NAME {
        return full;
    }
    // Hash of the original names: `a.b` and `a_b` map alike but hash apart.
    let digest = Sha256::digest(format!("{server}\0{tool}").as_bytes());
    let suffix = format!("_{}", &hex::encode(digest)[..8]);
    let mut name = full;
    name.truncate(MAX_TOOL_NAME - suffix.len());
    name.push_str(&suffix);
    name
}
