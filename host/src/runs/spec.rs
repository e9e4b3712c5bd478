//! A run's specification: what the operator granted it, its model, search,
//! limits and skills. The store records it with the run (it holds no
//! secret: keys are read from the environment at each pass), so a resume,
//! a retry or a recovery on any node needs nothing else.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::{ModelTable, SearchTable};
use crate::grant::Grant;
pub use crate::hooks::HookFile;
use crate::manifest::LoopKind;

/// A run's wall-clock limit per pass when nothing says otherwise.
pub const DEFAULT_TIMEOUT_SECS: u64 = 300;

/// A run's memory cap when nothing says otherwise.
pub const DEFAULT_MEMORY_MIB: u64 = 256;

/// What a run is granted and how it runs, as the store records it.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[serde(rename_all = "kebab-case")]
pub struct RunSpec {
    /// The grant.
    pub grant: Grant,
    /// The model settings.
    pub model: ModelTable,
    /// The search settings.
    pub search: Option<SearchTable>,
    /// The run's wall-clock limit per pass.
    pub timeout_secs: u64,
    /// The memory cap.
    pub memory_mib: u64,
    /// Where skill packages are.
    pub skills_path: PathBuf,
    /// Progressive skills.
    pub progressive_skills: bool,
    /// The skill components given to the run, each a file (a registry
    /// reference's cached one) with the SHA-256 it had when the run was
    /// recorded: every pass loads that very content or none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skill_components: Vec<SkillFile>,
    /// The operator's hooks, in the order they are asked, each a file with
    /// the SHA-256 it had when the run was recorded. A pass loads the file
    /// as it is then: the decisions the journal holds stand whatever the
    /// hook says now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<HookFile>,
    /// Where the plugin came from, when it came from a registry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
    /// The agents the operator made available to child runs (`run-agent`,
    /// the model's `agent__NAME` tools), by the name asked for, each a file with the SHA-256 it had when the
    /// run was recorded: a child runs that very content or none. A child's
    /// run holds the same.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub agents: BTreeMap<String, ChildAgent>,
    /// How many levels below its root run this run is (0 for a run that no
    /// run started).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub depth: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// An agent made available to `run-agent`, as a run records it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub struct ChildAgent {
    /// The component, or the declarative agent's TOML file.
    pub path: PathBuf,
    /// Its SHA-256 when the run was recorded.
    pub sha256: String,
}

/// A skill component as a run records it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub struct SkillFile {
    /// The component's file.
    pub path: PathBuf,
    /// Its SHA-256 when the run was recorded.
    pub sha256: String,
}

/// A plugin's registry origin, as a run records it: which version it was
/// and who signed it, kept for the run's whole life (a resume loads the
/// same digest from the cache).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub struct Origin {
    /// The reference at the manifest digest it resolved to.
    pub reference: String,
    /// What its signature check found when it was pulled.
    pub signature: crate::registry::Signature,
}

impl Default for RunSpec {
    /// Nothing granted beyond reading, in memory, with no model.
    fn default() -> Self {
        RunSpec {
            grant: Grant::default(),
            model: ModelTable::default(),
            search: None,
            timeout_secs: DEFAULT_TIMEOUT_SECS,
            memory_mib: DEFAULT_MEMORY_MIB,
            skills_path: PathBuf::from("skills"),
            progressive_skills: false,
            skill_components: Vec::new(),
            hooks: Vec::new(),
            origin: None,
            agents: BTreeMap::new(),
            depth: 0,
        }
    }
}

/// Why a recorded specification cannot be used by this build.
#[derive(Debug, thiserror::Error)]
#[error("its recorded settings cannot be read by this nexo ({0})")]
pub struct UnreadableSpec(#[from] serde_json::Error);

impl RunSpec {
    /// The specification as the store records it.
    /// Fails only for a path that is not UTF-8.
    pub fn to_record(&self) -> Result<Value, serde_json::Error> {
        serde_json::to_value(self)
    }

    /// A recorded specification, read back.
    pub fn from_record(value: Value) -> Result<RunSpec, UnreadableSpec> {
        Ok(serde_json::from_value(value)?)
    }

    /// The names of the agents a recorded specification lets its run
    /// start ([`RunSpec::agents`]), read without the rest of it: none for a
    /// run as deep as a tree may grow ([`crate::children::MAX_DEPTH`]).
    pub fn agent_names(record: &Value) -> Vec<String> {
        let depth = record.get("depth").and_then(Value::as_u64).unwrap_or(0);
        if depth >= u64::from(crate::children::MAX_DEPTH) {
            return Vec::new();
        }
        let agents = record.get("agents").and_then(Value::as_object);
        agents.map(|a| a.keys().cloned().collect()).unwrap_or_default()
    }

    /// The pass's wall-clock limit.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_secs)
    }

    /// The memory cap in bytes.
    pub fn memory_bytes(&self) -> usize {
        usize::try_from(self.memory_mib).unwrap_or(usize::MAX).saturating_mul(1 << 20)
    }
}

/// The loop a declarative agent names (`loop = …` in its TOML), the
/// default when neither the front end nor the config file chose one. A
/// file that does not load names none; loading it later reports why.
pub fn loop_hint(file: &std::path::Path) -> Option<LoopKind> {
    if !crate::agent_file::is_toml(file) {
        return None;
    }
    crate::agent_file::AgentFile::load(file).ok().and_then(|a| a.manifest().agent_loop)
}
