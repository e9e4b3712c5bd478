//! `[skills]`: the skill components the operator gives every run, each a
//! `.wasm` file or a registry reference. A skill component asks for
//! nothing (its world imports nothing from nexo), so giving one widens no
//! run; an agent still names the skills it uses. The command line's runs
//! take them (`nexo run`, `chat`, `mcp serve`, a worker's pass of those);
//! `nexo serve` gives its tenants none.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The `[skills]` table (the command line's runs; not `nexo serve`'s).
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
        // A file beside the config file wins; else the text says whether it
        // is a reference (never a file of the current directory's).
        let place = |c: &PathBuf| match dir {
            Some(dir) if c.is_relative() => {
                let placed = dir.join(c);
                if placed.exists() || !crate::registry::reference::names_registry_text(c) { placed } else { c.clone() }
            }
            _ => c.clone(),
        };
        self.components.iter().map(place).collect()
    }
}
