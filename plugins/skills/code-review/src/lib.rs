//! A skill shipped as a component: the `SKILL.md` body and its references are
//! compiled in. The component can do nothing but hand them to the host.

use nexo_sdk::skill::{Metadata, Skill};

struct CodeReview;

const SKILL_MD: &str = include_str!("../SKILL.md");

impl Skill for CodeReview {
    fn metadata() -> Metadata {
        let mut meta = Metadata::new(
            "code-review",
            "Review a change for correctness, safety and clarity, and report findings by severity.",
        );
        meta.license = Some("Apache-2.0".into());
        meta
    }

    fn instructions() -> String {
        // The body is what follows the closing `---` of the frontmatter.
        SKILL_MD.splitn(3, "---").nth(2).unwrap_or(SKILL_MD).trim().to_string()
    }

    fn files() -> &'static [(&'static str, &'static str)] {
        &[("references/severity.md", include_str!("../references/severity.md"))]
    }
}

nexo_sdk::export_skill!(CodeReview);
