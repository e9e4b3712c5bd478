//! One pass of a recorded run: claimed (a resume, a retry, a recovery, or
//! a queued start), its recorded specification narrowed, checked against
//! its tenant's policy as it is now, prepared and run. Every path that
//! continues a run, on the command line, in a worker or in `nexo serve`,
//! comes through [`pass`], so each passes the same checks.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use nexo_store::{Claim, Run, Store, StoreError};

use super::spec::RunSpec;
use super::{ResumeOutcome, RunEnd, Runs, Subject, prepare};
use crate::agent_file::AgentFile;
use crate::config::ConfigFile;
use crate::error::RunError;
use crate::hooks::Owner;
use crate::manifest::{AgentManifest, Capability, PermissionMode, SandboxKind};
use crate::settings::RunOptions;
use crate::{Engine, Plugin};

/// What a pass may take away from the specification a run recorded: a
/// pass can only narrow it.
#[derive(Debug, Clone, Default)]
pub struct Narrowing {
    /// A stricter permission mode.
    pub mode: Option<PermissionMode>,
    /// Capabilities taken out.
    pub revoke: Vec<Capability>,
    /// Go on even though the component changed: by checkpoints only,
    /// without replaying the journal.
    pub allow_changed_component: bool,
}

/// How one pass is made.
pub struct PassSettings<'a> {
    /// How the run is claimed.
    pub how: Claim,
    /// The guest's `resume-input`, as JSON.
    pub input: Option<String>,
    /// What the pass takes away from the recorded specification.
    pub narrowing: &'a Narrowing,
    /// The operator's configuration now: its MCP servers and sandbox view.
    pub config: &'a ConfigFile,
    /// Where that configuration was read from, to name it when it lacks a
    /// server the run used.
    pub config_path: Option<&'a Path>,
    /// For a tenant's run in `nexo serve`: where this node keeps the
    /// component and what the tenant's runs share.
    pub served: Option<&'a Served>,
    /// A job will try the pass again if it fails in a way that may pass,
    /// so such a failure leaves the run queued, not failed.
    pub retry_follows: bool,
    /// What the front end adds to the prepared options: an event sink, a
    /// way to ask the user.
    pub front_end: Option<&'a (dyn Fn(&mut RunOptions) + Send + Sync)>,
    /// What the front end decides of a component that changed since the
    /// run recorded it (a pass goes on with one only under
    /// [`Narrowing::allow_changed_component`]), before it runs: the
    /// operator's acceptance of what the new version asks for. `Err` says
    /// why not, and the run is left as it is.
    pub admit_changed: Option<&'a AdmitChanged>,
}

/// A front end's decision on a changed component: its manifest, its
/// SHA-256 and where it was loaded from.
pub type AdmitChanged = dyn Fn(&AgentManifest, &str, &Path) -> Result<(), String> + Send + Sync;

/// What `nexo serve` adds to a pass of a tenant's run.
pub struct Served {
    /// This node's copy of the component.
    pub source: PathBuf,
    /// The component, loaded: every run of it on this node shares it.
    pub plugin: Plugin,
    /// What the pass draws on: the memory total and CPU share the
    /// tenant's runs hold together on this node, and the meters of its web
    /// bytes, CPU ticks and model tokens, each with what is left of the
    /// tenant's hour and of the run's own budget ([`crate::quota::Meters::budget`]).
    pub budget: crate::quota::RunBudget,
    /// Where the gate's decisions during this pass are held for the
    /// tenant's audit log.
    pub audit: Arc<crate::quota::PassAudit>,
    /// The tenant's workspace on this node: a local sandbox works here,
    /// whichever node recorded the run (workspaces are per node).
    pub workspace: PathBuf,
    /// This node's data directory, where it keeps its copies of tenants'
    /// plugins: the tenant's own hooks load from there.
    pub data_dir: PathBuf,
}

/// How a pass of a recorded run ended.
pub enum Resumed {
    /// The pass ran: the run is done, suspended, failed or cancelled.
    End(Box<RunEnd>),
    /// It could not start, for this reason (already printed for the
    /// operator).
    Refused(String),
    /// The agent failed in a way the run did not record.
    Failed(RunError),
}

/// One pass of run `id`: `settings.how` claims it, its recorded
/// specification (narrowed, and within its tenant's policy as it is now)
/// runs it on `engine`, with its own limits.
pub async fn pass(runs: &Runs, engine: &Engine, id: &str, settings: PassSettings<'_>) -> Resumed {
    let how = settings.how;
    let served = settings.served;
    let refused = |why: String| {
        errln!("error: {why}");
        Resumed::Refused(why)
    };
    let unusable = "its recorded settings cannot be used here; the error above says why";
    let mut run = match runs.store().run(id).await {
        Ok(Some(run)) => run,
        Ok(None) => return refused(StoreError::NoRun(id.to_string()).to_string()),
        Err(e) => return refused(e.to_string()),
    };
    // Taken, not copied: the record stays alive while the run waits.
    let mut spec = match RunSpec::from_record(std::mem::take(&mut run.grant)) {
        Ok(r) => r,
        Err(e) => {
            let why = e.to_string();
            unrecoverable(runs, &run, how, &why).await;
            return Resumed::Refused(why);
        }
    };
    let narrowing = settings.narrowing;
    spec.grant = settings.config.read_into(spec.grant.narrowed(narrowing.mode, &narrowing.revoke));
    // A local run meets the config file's command rules as they are now, as
    // a served run meets its tenant's; rules only narrow.
    if run.tenant.is_none() {
        let now = crate::grant::CommandRules::layer(settings.config.grant.command_rules.clone());
        spec.grant.commands = spec.grant.commands.intersection(&now);
        // And the config file's hooks as they are now: a hook only narrows,
        // and the decisions the journal holds stand.
        for path in settings.config.hooks.components(settings.config_path) {
            if !spec.hooks.iter().any(|h| h.path == path) {
                spec.hooks.push(crate::hooks::HookFile { path, sha256: String::new(), owner: Owner::Operator });
            }
        }
        // And its data-flow guard as it is now: a guard only tightens.
        if let Some(guard) = &settings.config.grant.data_flow {
            spec.grant.data_flow = spec.grant.data_flow.stricter(guard);
        }
        // The operator's price and budget as the config file sets them now:
        // raising `budget-usd` there is how a run waiting on its budget goes on.
        let model = &settings.config.model;
        spec.model.price = model.price.or(spec.model.price);
        spec.model.budget_usd = model.budget_usd.or(spec.model.budget_usd);
    }
    // A served run goes on within its tenant's policy as it is now: an
    // operator's narrowing reaches the runs that wait.
    if let Some(tenant) = &run.tenant {
        match tenant_policy(runs.store(), tenant).await {
            Ok(policy) => {
                let bounds = policy.bounds();
                if let Err(why) = within_policy(&spec, &bounds, settings.config) {
                    return refused(format!("run {} cannot go on: {why}", run.id));
                }
                spec.grant = spec.grant.within(&bounds);
                // And its policy's hooks as they are now: a hook only narrows.
                match policy.hook_files(settings.config) {
                    Ok(files) => {
                        for file in files {
                            if !spec.hooks.iter().any(|h| h.path == file.path) {
                                spec.hooks.push(file);
                            }
                        }
                    }
                    Err(why) => return refused(format!("run {} cannot go on: {why}", run.id)),
                }
                // The budget as the operator sets it now: raising the quota
                // is how a run waiting on its budget goes on.
                let budget = match crate::quota::run_budget(&**runs.store(), &run, &policy.quotas).await {
                    Ok(budget) => budget,
                    Err(e) => return refused(format!("run {} cannot go on: {e}", run.id)),
                };
                spec.model.budget_usd = budget.filter(|_| spec.model.price.is_some());
            }
            Err(why) => return refused(format!("run {} cannot go on: {why}", run.id)),
        }
    }
    // The tenant's own hooks, from this node's copies (filled from the
    // store on first need), as its agent is.
    if let (Some(served), Some(tenant)) = (served, &run.tenant) {
        let on = tokio::runtime::Handle::current();
        for hook in spec.hooks.iter_mut().filter(|h| h.owner == Owner::Tenant) {
            let copy = crate::data_dir::materialize(&**runs.store(), &served.data_dir, tenant, &hook.sha256, &on);
            match copy.await {
                Ok(path) => hook.path = path,
                Err(why) => return refused(format!("run {} cannot go on: its hook {}: {why}", run.id, hook.sha256)),
            }
        }
    }
    // The recorded grant names the workspace of the node that started the
    // run; this pass works in this node's.
    if let Some(served) = served
        && spec.grant.sandbox.kind == SandboxKind::Local
    {
        spec.grant.sandbox.cwd = Some(served.workspace.clone());
    }
    // A pass without a server the run used would not behave as the run did:
    // the run is left as it is until the configuration is given.
    let unconfigured = spec.grant.mcp.unconfigured();
    if !unconfigured.is_empty() {
        return refused(needs_configuration(&run.id, &unconfigured, settings.config_path));
    }
    let budget = served.map(|s| s.budget.clone()).unwrap_or_default();
    let mut options = match prepare::options(engine, &spec, budget).await {
        Ok(o) => o,
        Err(e) => {
            errln!("error: {e}");
            return Resumed::Refused(unusable.into());
        }
    };
    if let Some(front_end) = settings.front_end {
        front_end(&mut options);
    }
    options.context.audit = served.map(|s| s.audit.clone() as Arc<dyn crate::host_call::AuditSink>);
    options.context.retry_follows = settings.retry_follows;
    // `nexo serve` loads a tenant's plugin from its own node's cache.
    let source = served.map_or(Path::new(&run.source), |s| s.source.as_path());
    let allow_changed = narrowing.allow_changed_component;
    let input = settings.input;
    let admit = |manifest: &AgentManifest, sha256: &str| match settings.admit_changed {
        Some(admit) if sha256 != run.component_sha256 => admit(manifest, sha256, source),
        _ => Ok(()),
    };
    let result = if run.kind == "toml" {
        match AgentFile::load(source) {
            Ok(agent) => {
                if let Err(why) = admit(agent.manifest(), agent.sha256()) {
                    prepare::close(&options).await;
                    return refused(why);
                }
                runs.resume(id, how, input, Subject::File(&agent), &options, allow_changed).await
            }
            Err(e) => {
                prepare::close(&options).await;
                unrecoverable(runs, &run, how, &e.to_string()).await;
                return Resumed::Refused(e.to_string());
            }
        }
    } else {
        let plugin = match served {
            Some(s) => Ok(s.plugin.clone()),
            None => Plugin::load(engine, source).await.map_err(|e| e.to_string()),
        };
        let agent = match &plugin {
            Ok(p) => p.agent().map(|a| (p, a)).map_err(|e| e.to_string()),
            Err(why) => Err(why.clone()),
        };
        match agent {
            Ok((plugin, agent)) => {
                if let Err(why) = admit(agent.manifest(), plugin.sha256()) {
                    prepare::close(&options).await;
                    return refused(why);
                }
                let subject = Subject::Component { agent, sha256: plugin.sha256(), path: source };
                runs.resume(id, how, input, subject, &options, allow_changed).await
            }
            Err(why) => {
                prepare::close(&options).await;
                unrecoverable(runs, &run, how, &why).await;
                return Resumed::Refused(why);
            }
        }
    };
    prepare::close(&options).await;
    match result {
        Ok(end) => Resumed::End(Box::new(end)),
        Err(ResumeOutcome::Refused(e)) => refused(e.to_string()),
        Err(ResumeOutcome::Run(e)) => Resumed::Failed(e),
    }
}

/// `tenant`'s policy as the store holds it now.
async fn tenant_policy(store: &Arc<dyn Store>, tenant: &str) -> Result<crate::policy::Policy, String> {
    match store.tenant(tenant).await {
        Ok(Some(t)) => crate::policy::Policy::from_stored(&t.policy),
        Ok(None) => Err(StoreError::NoTenant(tenant.to_string()).to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// Whether what a grant cannot narrow is still within the tenant's policy:
/// the run's sandbox, and its model (the provider and model id of one of
/// the operator's models the policy names; where the operator serves it
/// may change). A run recorded (or a schedule made) under a wider policy
/// does not outlive it.
fn within_policy(
    spec: &RunSpec,
    bounds: &crate::grant::Bounds,
    config: &crate::config::ConfigFile,
) -> Result<(), String> {
    let kind = spec.grant.sandbox.kind;
    if bounds.sandboxes.as_ref().is_some_and(|kinds| !kinds.contains(&kind)) {
        return Err(format!("its tenant's policy no longer allows the `{}` sandbox", kind.as_str()));
    }
    let model = |m: &crate::config::ModelTable| (m.provider, m.model.clone());
    let recorded = model(&spec.model);
    let named = |name: &String| config.serve.models.get(name).is_some_and(|m| model(m) == recorded);
    let no_model = recorded == (None, None);
    if let Some(models) = &bounds.models
        && !no_model
        && !models.iter().any(named)
    {
        return Err(
            "its tenant's policy no longer allows its model, or the operator no longer configures it".to_string()
        );
    }
    Ok(())
}

/// Why a run cannot go on here: the MCP servers it used are not defined in
/// this process's configuration. Names them, and how to supply them.
fn needs_configuration(id: &str, servers: &[&str], config: Option<&Path>) -> String {
    let names = servers.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
    let tables = servers.iter().map(|n| format!("[mcp.{n}]")).collect::<Vec<_>>().join(", ");
    let here = match config {
        Some(path) => format!("{} does not define {tables}", path.display()),
        None => "no config file was given (--config FILE or NEXO_CONFIG)".to_string(),
    };
    format!(
        "run {id} uses the MCP server(s) {names}, which the config file it started with defined, but {here}; \
         the run is left as it is: give the config file that defines {tables} (--config FILE or NEXO_CONFIG) and \
         run the command again"
    )
}

/// A run that cannot be resumed: reported; an orphan is marked failed so
/// the sweep does not try it forever.
async fn unrecoverable(runs: &Runs, run: &Run, how: Claim, why: &str) {
    errln!("error: run {} cannot be resumed: {why}", run.id);
    if how == Claim::Recover {
        match runs.fail_orphan(&run.id, &format!("could not be recovered: {why}")).await {
            Ok(()) => errln!("run {} is marked failed", run.id),
            Err(e) => errln!("warning: could not mark run {} failed: {e}", run.id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ConfigFile, ModelTable};
    use crate::grant::Bounds;

    fn table(model: &str) -> ModelTable {
        ModelTable { model: Some(model.into()), base_url: Some("http://models".into()), ..ModelTable::default() }
    }

    #[test]
    fn a_run_goes_on_only_with_a_sandbox_and_a_model_its_tenants_policy_still_allows() {
        let mut config = ConfigFile::default();
        config.serve.models.insert("small".into(), table("s-1"));
        config.serve.models.insert("big".into(), table("b-1"));
        let mut spec = RunSpec { model: table("b-1"), ..RunSpec::default() };
        spec.grant.sandbox.kind = SandboxKind::Local;
        let open = Bounds::default();
        assert_eq!(within_policy(&spec, &open, &config), Ok(()));
        let both = Bounds { models: Some(vec!["small".into(), "big".into()]), ..Bounds::default() };
        assert_eq!(within_policy(&spec, &both, &config), Ok(()));
        let small = Bounds { models: Some(vec!["small".into()]), ..Bounds::default() };
        assert!(within_policy(&spec, &small, &config).unwrap_err().contains("no longer allows its model"));
        // Served elsewhere now: still the same model.
        config.serve.models.insert("big".into(), ModelTable { base_url: Some("http://moved".into()), ..table("b-1") });
        assert_eq!(within_policy(&spec, &both, &config), Ok(()));
        config.serve.models.remove("big");
        assert!(within_policy(&spec, &both, &config).is_err(), "a model no longer configured");
        let virtual_only = Bounds { sandboxes: Some(vec![SandboxKind::Virtual]), ..Bounds::default() };
        assert!(within_policy(&spec, &virtual_only, &config).unwrap_err().contains("`local` sandbox"));
        // A run with no model of the operator's (a scripted one) has none to check.
        let unmodelled = RunSpec { model: ModelTable::default(), ..spec };
        assert_eq!(within_policy(&unmodelled, &small, &config), Ok(()));
    }
}
