//! Child runs: the record of a run a workflow starts with `run-agent`.
//! The host-call path asks ([`ChildRuns`]); this makes the child from the
//! parent's recorded specification: an agent the operator made available
//! to the parent (that very file's content), the parent's effective grant
//! narrowed as asked, the parent's tenant, within its quotas.

use std::sync::Arc;

use nexo_model::BoxFuture;
use nexo_store::{JobKind, NewChild, NewRun, RunStatus, Store};
use serde_json::json;

use super::job::new_job;
use super::spec::{ChildAgent, RunSpec};
use crate::children::{ChildRequest, ChildRuns, MAX_CHILDREN, MAX_DEPTH};
use crate::quota;

/// The agents `files` (by name) as a run records them: each file's
/// SHA-256 now, so its children run that content or none. A file that
/// cannot be read stops the command before anything is recorded.
pub fn recorded_agents(
    files: &std::collections::BTreeMap<String, std::path::PathBuf>,
) -> Result<std::collections::BTreeMap<String, ChildAgent>, crate::ConfigError> {
    files
        .iter()
        .map(|(name, path)| {
            let bytes = std::fs::read(path).map_err(|e| crate::ConfigError::Invalid {
                setting: "[agents]",
                problem: format!("the agent `{name}` in [agents] ({}) cannot be read: {e}", path.display()),
            })?;
            let agent = ChildAgent { path: path.clone(), sha256: nexo_store::sha256_hex(&bytes) };
            Ok((name.clone(), agent))
        })
        .collect()
}

/// A run below another in its tree, as `runs show` and the API list it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Descendant {
    /// The run's id.
    pub id: String,
    /// The run that started it.
    pub parent: String,
    /// How many levels below the run asked about (1 for its children).
    pub depth: u32,
    /// The agent's name.
    pub agent: String,
    /// Its status.
    pub status: RunStatus,
}

/// The most runs [`descendants`] lists.
pub const MOST_SHOWN: usize = 1000;

/// The runs below run `id`, depth first, each after its parent, in the
/// order they were started ([`MAX_DEPTH`] levels and [`MOST_SHOWN`] runs
/// at most).
pub async fn descendants(store: &dyn Store, id: &str) -> Result<Vec<Descendant>, nexo_store::StoreError> {
    let node = |parent: &str, depth: u32, c: nexo_store::Run| Descendant {
        id: c.id,
        parent: parent.to_string(),
        depth,
        agent: c.agent,
        status: c.status,
    };
    let mut out = Vec::new();
    let mut stack: Vec<Descendant> = store.children(id).await?.into_iter().rev().map(|c| node(id, 1, c)).collect();
    while let Some(next) = stack.pop() {
        if out.len() >= MOST_SHOWN {
            break;
        }
        if next.depth < MAX_DEPTH {
            let below = store.children(&next.id).await?;
            stack.extend(below.into_iter().rev().map(|c| node(&next.id, next.depth + 1, c)));
        }
        out.push(next);
    }
    Ok(out)
}

/// Makes the children of one recorded run.
#[derive(Debug)]
pub(crate) struct Starter {
    pub(crate) store: Arc<dyn Store>,
    /// The parent's id.
    pub(crate) parent: String,
    /// The parent's tenant, which its children share.
    pub(crate) tenant: Option<String>,
    /// The names of the agents its specification makes available.
    pub(crate) agents: Vec<String>,
}

impl ChildRuns for Starter {
    fn agents(&self) -> &[String] {
        &self.agents
    }

    fn prepare(&self, request: ChildRequest) -> BoxFuture<'_, Result<NewChild, String>> {
        Box::pin(async move {
            let unreadable =
                |e: &dyn std::fmt::Display| format!("the run's record cannot be read now ({e}); try again");
            let parent = self.store.run(&self.parent).await.map_err(|e| unreadable(&e))?;
            let parent = parent.ok_or_else(|| format!("run `{}` is not in the store", self.parent))?;
            let spec = RunSpec::from_record(parent.grant).map_err(|e| unreadable(&e))?;
            if spec.depth >= MAX_DEPTH {
                return Err(format!(
                    "this run is {} levels below its root run, the deepest a run that starts children may be",
                    spec.depth
                ));
            }
            let started = self.store.children(&self.parent).await.map_err(|e| unreadable(&e))?.len();
            if started >= MAX_CHILDREN {
                return Err(format!(
                    "this run has started {started} child runs, the most one run may start; split the work over \
                     runs, or have its children start the rest"
                ));
            }
            let Some(agent) = spec.agents.get(&request.agent) else {
                let offered: Vec<&str> = spec.agents.keys().map(String::as_str).collect();
                let how = match self.tenant {
                    Some(_) => "a tenant names the plugins a run may start in its run request's `agents`",
                    None => "the operator names them in the config file's [agents] table (NAME = \"path\")",
                };
                return Err(format!(
                    "no agent `{}` was made available to this run (it has {}); {how}",
                    request.agent,
                    if offered.is_empty() { "none".to_string() } else { offered.join(", ") }
                ));
            };
            // A tenant's agent is its plugin, by id, which every node's
            // worker takes from the store; the operator's is a file here.
            // Where the child's own plugin came from: a tenant's plugin's
            // registry origin, none for the operator's file.
            let mut origin = None;
            let sha256 = match &self.tenant {
                Some(tenant) => match self.store.plugin(tenant, &agent.sha256).await {
                    Ok(Some(plugin)) => {
                        origin = plugin.origin.as_deref().and_then(|o| serde_json::from_str(o).ok());
                        agent.sha256.clone()
                    }
                    Ok(None) => {
                        return Err(format!(
                            "the agent `{}` (plugin {}) was deleted since this run started",
                            request.agent, agent.sha256
                        ));
                    }
                    Err(e) => return Err(unreadable(&e)),
                },
                None => {
                    let bytes = tokio::fs::read(&agent.path).await.map_err(|e| {
                        format!("the agent `{}` ({}) cannot be read: {e}", request.agent, agent.path.display())
                    })?;
                    nexo_store::sha256_hex(&bytes)
                }
            };
            if sha256 != agent.sha256 {
                return Err(format!(
                    "the agent `{}` ({}) has changed since this run was recorded (its SHA-256 was {}, it is now {}); \
                     a run starts the agents it was given or none",
                    request.agent,
                    agent.path.display(),
                    agent.sha256,
                    sha256
                ));
            }
            if let Some(tenant) = &self.tenant {
                let quotas = crate::policy::tenant_quotas(&*self.store, tenant)
                    .await
                    .ok_or_else(|| "the tenant's policy cannot be read now, so its quotas are unknown".to_string())?;
                let now = nexo_store::now_ms();
                quota::admit(&*self.store, tenant, &quotas, quota::Step::Child { parent: &self.parent }, now)
                    .await
                    .map_err(|e| unreadable(&e))?
                    .map_err(|refusal| format!("the tenant's quotas refuse a new run now: {}", refusal.message))?;
                // Counted as the API counts a start; the count is advisory
                // until the child is written, as there.
                let _ = self.store.add_usage(tenant, now, 1, nexo_store::RunUsage::default()).await;
            }
            let kind = if crate::agent_file::is_toml(&agent.path) { "toml" } else { "component" };
            let child = RunSpec { grant: request.grant, depth: spec.depth + 1, origin, ..spec.clone() };
            let run = NewRun {
                id: nexo_store::new_run_id(),
                agent: request.agent.clone(),
                kind: kind.into(),
                source: agent.path.display().to_string(),
                component_sha256: sha256,
                input: request.input,
                grant: child.to_record().map_err(|e| format!("cannot record the child's settings: {e}"))?,
                status: RunStatus::Queued,
                lease: None,
                created_ms: nexo_store::now_ms(),
                session: None,
                tenant: self.tenant.clone(),
            };
            let start = new_job(&run.id, JobKind::Start, json!({"run": run.id, "parent": self.parent}));
            Ok(NewChild { run, start })
        })
    }
}
