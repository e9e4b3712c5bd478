//! `[skills]`: the skill components the operator gives every run, each a
//! `.wasm` file or a registry reference. A skill component asks for
//! nothing (its world imports nothing from nexo), so giving one widens no
//! run; an agent still names the skills it uses.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The `[skills]` table.
#[derive(Serialize, Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct SkillsTable {
    /// Skill components: files (relative to the config file) or registry
    /// references.
    #[serde(default)]
    pub components: Vec<PathBuf>,
}

impl SkillsTable {
    /// The components, a relative file made relative to `config` (the
    /// file the table came from); a registry reference is kept as written.
    pub fn components(&self, config: Option<&Path>) -> Vec<PathBuf> {
        let dir = config.and_then(Path::parent);
        let place = |c: &PathBuf| match dir {
            Some(dir) if c.is_relative() && !crate::registry::is_reference(c) => dir.join(c),
            _ => c.clone(),
        };
        self.components.iter().map(place).collect()
    }
}
