//! `[hooks]`: the operator's hook components, asked about each gated call
//! and prompt of every run the command line starts (`nexo run`, `chat`,
//! `mcp serve`, a worker's pass of those), in the order given. A hook holds
//! no authority and can only narrow, so giving one widens no run; `--hook`
//! adds more after these.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The `[hooks]` table.
#[derive(Serialize, Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct HooksTable {
    /// Hook components: `.wasm` files, relative to the config file.
    #[serde(default)]
    pub components: Vec<PathBuf>,
}

impl HooksTable {
    /// The components as absolute paths, a relative file made relative
    /// to `config` (the file the table came from).
    pub fn components(&self, config: Option<&Path>) -> Vec<PathBuf> {
        let dir = config.and_then(Path::parent);
        let placed = |c: &PathBuf| match dir {
            Some(dir) if c.is_relative() => dir.join(c),
            _ => c.clone(),
        };
        self.components.iter().map(placed).map(|p| std::path::absolute(&p).unwrap_or(p)).collect()
    }
}
