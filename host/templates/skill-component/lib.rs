//! {{name}}: a skill shipped as a component. The `SKILL.md` body and the
//! reference files are compiled in; the skill world imports nothing, so the
//! component can only hand them to the host.
//!
//! `nexo test` checks that it loads, that its instructions are not empty and
//! that every file it lists can be read.

use nexo_sdk::skill::{Metadata, Skill};

struct Plugin;

const SKILL_MD: &str = include_str!("../SKILL.md");

impl Skill for Plugin {
    fn metadata() -> Metadata {
        // Keep the name and description in step with SKILL.md's frontmatter.
        Metadata::new("{{name}}", "Explain what this skill is for and when an agent should use it.")
    }

    fn instructions() -> String {
        // The body is what follows the frontmatter's closing `---`.
        SKILL_MD.splitn(3, "---").nth(2).unwrap_or(SKILL_MD).trim().to_string()
    }

    fn files() -> &'static [(&'static str, &'static str)] {
        &[("references/checklist.md", include_str!("../references/checklist.md"))]
    }
}

nexo_sdk::export_skill!(Plugin);
