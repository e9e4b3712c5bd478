//! `SKILL.md` packages (`nexo-skills`): frontmatter and body.

use std::path::Path;

use nexo_skills::{MAX_DESCRIPTION_LEN, MAX_NAME_LEN, parse_skill_md, parse_skill_md_for_use};

use crate::{assert_short_error, is_plugin_name};

/// Parses arbitrary text as a `SKILL.md`, strictly and for use. Accepted
/// metadata keeps the rules (a valid name, a description of 1–1024
/// characters when strict); a refusal is a short message.
pub fn skill_md(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let file = Path::new("skills/fuzz/SKILL.md");
    match parse_skill_md(file, text) {
        Ok((metadata, body)) => {
            assert!(is_plugin_name(&metadata.name, MAX_NAME_LEN), "accepted the name {:?}", metadata.name);
            let len = metadata.description.chars().count();
            assert!((1..=MAX_DESCRIPTION_LEN).contains(&len), "accepted a description of {len} characters");
            assert_eq!(metadata.description.trim(), metadata.description, "the description is not trimmed");
            assert_eq!(body.trim(), body, "the body is not trimmed");
        }
        Err(e) => assert_short_error("SKILL.md", &e),
    }
    match parse_skill_md_for_use(file, text) {
        Ok((metadata, _, warning)) => {
            assert!(is_plugin_name(&metadata.name, MAX_NAME_LEN), "accepted the name {:?}", metadata.name);
            let len = metadata.description.chars().count();
            assert_eq!(warning.is_some(), len > MAX_DESCRIPTION_LEN, "a long description must come with a warning");
        }
        Err(e) => assert_short_error("SKILL.md (for use)", &e),
    }
}
