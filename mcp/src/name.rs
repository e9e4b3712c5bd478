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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_are_kept() {
        assert_eq!(model_tool_name("fs", "list_directory"), "mcp__fs__list_directory");
        assert_eq!(model_tool_name("every", "get-tiny-image"), "mcp__every__get-tiny-image");
    }

    #[test]
    fn other_characters_are_mapped_and_hashed_apart() {
        let dotted = model_tool_name("gh", "repo.list");
        let underscored = model_tool_name("gh", "repo_list");
        assert!(dotted.starts_with("mcp__gh__repo_list_"), "{dotted}");
        assert_eq!(underscored, "mcp__gh__repo_list");
        assert_ne!(dotted, underscored);
        let spaced = model_tool_name("gh", "repo list");
        assert_ne!(spaced, dotted);
        assert!(spaced.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'), "{spaced}");
        assert_eq!(model_tool_name("gh", "repo.list"), dotted, "names are stable");
    }

    #[test]
    fn long_names_are_cut_to_64_and_stay_unique() {
        let a = model_tool_name("server", &format!("{}a", "x".repeat(100)));
        let b = model_tool_name("server", &format!("{}b", "x".repeat(100)));
        assert_eq!(a.len(), MAX_TOOL_NAME);
        assert_eq!(b.len(), MAX_TOOL_NAME);
        assert_ne!(a, b);
        assert!(a.starts_with("mcp__server__xxx"));
        // Exactly 64 is kept as is.
        let tool = "t".repeat(MAX_TOOL_NAME - "mcp__s__".len());
        assert_eq!(model_tool_name("s", &tool), format!("mcp__s__{tool}"));
        let one_more = format!("{tool}t");
        assert_eq!(model_tool_name("s", &one_more).len(), MAX_TOOL_NAME);
    }

    #[test]
    fn unicode_is_mapped_per_character() {
        let name = model_tool_name("s", "héllo");
        assert!(name.starts_with("mcp__s__h_llo_"), "{name}");
        assert!(name.is_ascii());
    }
}
