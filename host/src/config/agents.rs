//! `[agents]`: the agents the operator makes available to child runs (a
//! workflow's `run-agent`, the model's `agent__NAME` tools), each a name and a file (a component, or a declarative
//! agent's TOML), relative to the config file. A run records each file's
//! SHA-256 with it, and a child runs that content or none; a child's grant
//! is its parent's, narrowed. The command line's runs take them (`nexo
//! run`, a worker's pass of those); `nexo serve` gives its tenants none.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::ConfigError;
use crate::children::check_agent_name;

/// The `[agents]` table: `NAME = "path"`.
#[derive(Serialize, Deserialize, Debug, Default, Clone)]
#[serde(transparent)]
pub struct AgentsTable(pub BTreeMap<String, PathBuf>);

impl AgentsTable {
    /// The agents by name, each file made relative to `config` (the file
    /// the table came from) and absolute; a name that is not letters,
    /// digits, `-` and `_` (at most 57) is refused.
    pub fn files(&self, config: Option<&Path>) -> Result<BTreeMap<String, PathBuf>, ConfigError> {
        let dir = config.and_then(Path::parent);
        self.0
            .iter()
            .map(|(name, path)| {
                check_agent_name(name).map_err(|problem| ConfigError::Invalid { setting: "[agents]", problem })?;
                let placed = match dir {
                    Some(dir) if path.is_relative() => dir.join(path),
                    _ => path.clone(),
                };
                Ok((name.clone(), std::path::absolute(&placed).unwrap_or(placed)))
            })
            .collect()
    }
}
