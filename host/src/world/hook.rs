//! The hook world: the operator's check on each gated call and each prompt,
//! as one component. Its linker offers WASI with nothing granted and
//! `types` only, as a skill's does: a hook holds no authority, it answers.
//! A run asks a hook through its own instance ([`HookInstance`]): made at
//! the first question and kept warm for the run's next ones, under the
//! engine's short call deadline and memory cap. A failed question (a trap,
//! the deadline) drops it, and the next question starts a fresh one.

use std::sync::Arc;

use nexo_model::BoxFuture;
use wasmtime::Store;
use wasmtime::component::Component;

use super::{LinkFailure, Meta, WorldLinker};
use crate::bindings::hook::{HookPlugin, HookPluginPre};
use crate::engine::Engine;
use crate::error::RunError;
use crate::hooks::{After, Answer, HookCall, HookComponent, HookInstance, Origin, Owner, Prompt, PromptDecision};
use crate::instance::{Host, Wasi, arm_deadline, new_store, settle};
use crate::manifest::{HookEvent, HookInfo};

type Pre = HookPluginPre<Host<()>>;

fn linker(engine: &Engine) -> wasmtime::Result<Arc<WorldLinker<Host<()>>>> {
    engine.shared(|engine| {
        // As a skill's: WASI granting nothing and `types`; the world's import
        // rules refuse anything else before linking.
        Ok(WorldLinker(crate::instance::base_linker::<()>(engine)?))
    })
}

/// Links `component` as a hook.
pub(crate) fn link(engine: &Engine, component: &Component) -> Result<Pre, LinkFailure> {
    super::link(linker(engine), component, Pre::new)
}

async fn instance(
    engine: &Engine,
    pre: &Pre,
    label: Arc<str>,
    wasi: &Wasi,
) -> Result<(Store<Host<()>>, HookPlugin), RunError> {
    let timeout = engine.limits().call_timeout;
    let mut store = new_store(engine, label, wasi, timeout, ())?;
    let result = tokio::time::timeout(timeout, pre.instantiate_async(&mut store)).await;
    let bindings = settle(&store, "instantiate", timeout, result)?;
    Ok((store, bindings))
}

/// Reads a hook's info under the short call deadline.
pub(crate) async fn describe(engine: &Engine, pre: &Pre, label: Arc<str>) -> Result<HookInfo, RunError> {
    let timeout = engine.limits().call_timeout;
    let (mut store, bindings) = instance(engine, pre, label, &Wasi::default()).await?;
    let result = tokio::time::timeout(timeout, bindings.nexo_plugin_hook().call_info(&mut store)).await;
    settle(&store, "info", timeout, result).map(HookInfo::from)
}

/// A loaded hook component.
#[derive(Clone)]
pub struct Hook {
    meta: Arc<Meta>,
    pre: Pre,
    info: Arc<HookInfo>,
    owner: Owner,
    /// What its instances draw on: a tenant's hook, its tenant's budgets.
    wasi: Wasi,
}

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hook").field("name", &self.meta.name).field("events", &self.info.events).finish()
    }
}

impl Hook {
    pub(crate) fn new(meta: Arc<Meta>, pre: Pre, info: HookInfo) -> Self {
        Hook { meta, pre, info: Arc::new(info), owner: Owner::Operator, wasi: Wasi::default() }
    }

    /// The hook as a tenant's own: asked where a tenant's hooks are
    /// ([`Owner::Tenant`]), named in events as the tenant's (`tenant/NAME`,
    /// a name no plugin can give itself), a fresh instance for each
    /// question, drawing on `budget` (the memory total, CPU share and CPU
    /// meter of the run's tenant) as the run's agent does.
    pub fn tenants(&self, budget: &crate::quota::RunBudget) -> Hook {
        let wasi = Wasi {
            memory: budget.memory.clone(),
            cpu: budget.cpu.clone(),
            cpu_meter: budget.cpu_ticks.clone(),
            ..Wasi::default()
        };
        Hook { owner: Owner::Tenant, wasi, ..self.clone() }
    }

    /// The hook's name.
    pub fn name(&self) -> &str {
        &self.meta.name
    }

    /// What it says about itself.
    pub fn info(&self) -> &HookInfo {
        &self.info
    }

    /// Whether it wants to be asked about `event`.
    pub fn wants(&self, event: HookEvent) -> bool {
        self.info.events.contains(&event)
    }

    /// What a run's options hold of it, to make the run's instance.
    pub fn component(&self) -> Arc<dyn HookComponent> {
        Arc::new(self.clone())
    }

    /// Asks a fresh instance about a sample call (a model's `read_file`) at
    /// each moment the hook wants: it must answer, without a trap and
    /// within its deadline (`nexo plugin test`).
    pub async fn sample(&self) -> Result<(), RunError> {
        let instance = self.for_run();
        let call = HookCall {
            agent: "sample".into(),
            capability: "read".into(),
            call: "read-file".into(),
            tool: Some("read_file".into()),
            detail: "README.md".into(),
            arguments: r#"{"path":"README.md"}"#.into(),
            origin: Origin::Model,
            held: Vec::new(),
        };
        if self.wants(HookEvent::BeforeToolCall) {
            instance.before_tool_call(&call).await?;
        }
        if self.wants(HookEvent::AfterToolCall) {
            instance.after_tool_call(&call, r#""sample contents""#, false).await?;
        }
        if self.wants(HookEvent::BeforePrompt) {
            let prompt = Prompt {
                agent: "sample".into(),
                model: "sample".into(),
                system: "You are a sample.".into(),
                messages: r#"[{"role":"user","content":"hello"}]"#.into(),
            };
            instance.before_prompt(&prompt).await?;
        }
        Ok(())
    }
}

impl HookComponent for Hook {
    fn for_run(&self) -> Box<dyn HookInstance> {
        let name = match self.owner {
            Owner::Operator => self.meta.name.clone(),
            Owner::Tenant => Arc::from(format!("tenant/{}", self.meta.name)),
        };
        Box::new(Warm { hook: self.clone(), name, warm: tokio::sync::Mutex::new(None) })
    }

    fn owner(&self) -> Owner {
        self.owner
    }
}

/// One run's instance of a hook, instantiated at its first question.
struct Warm {
    hook: Hook,
    /// Its name in events and refusals.
    name: Arc<str>,
    warm: tokio::sync::Mutex<Option<(Store<Host<()>>, HookPlugin)>>,
}

/// Asks one question of the warm instance under a fresh deadline; a failed
/// question drops the instance, whose state may be broken, as does any
/// question to a tenant's hook.
macro_rules! ask {
    ($self:ident, $function:literal, |$hook:ident, $store:ident| $call:expr) => {
        Box::pin(async move {
            let timeout = $self.hook.meta.engine.limits().call_timeout;
            let mut warm = $self.warm.lock().await;
            if warm.is_none() {
                let hook = &$self.hook;
                *warm = Some(instance(&hook.meta.engine, &hook.pre, $self.name.clone(), &hook.wasi).await?);
            }
            let answer = match warm.as_mut() {
                Some(($store, bindings)) => {
                    arm_deadline($store, timeout);
                    let $hook = bindings.nexo_plugin_hook();
                    let result = tokio::time::timeout(timeout, $call).await;
                    settle($store, $function, timeout, result)
                }
                None => unreachable!("made above"),
            };
            // A tenant's hook keeps nothing between questions: it holds a
            // pool slot only while it answers, and cannot carry what one
            // question showed it into its answer to the next.
            if answer.is_err() || $self.hook.owner == Owner::Tenant {
                *warm = None;
            }
            answer
        })
    };
}

impl HookInstance for Warm {
    fn name(&self) -> &str {
        &self.name
    }

    fn wants(&self, event: HookEvent) -> bool {
        self.hook.wants(event)
    }

    fn before_tool_call<'a>(&'a self, call: &'a HookCall) -> BoxFuture<'a, Result<Answer, RunError>> {
        ask!(self, "before-tool-call", |hook, store| hook.call_before_tool_call(&mut *store, call))
    }

    fn after_tool_call<'a>(
        &'a self,
        call: &'a HookCall,
        output: &'a str,
        is_error: bool,
    ) -> BoxFuture<'a, Result<After, RunError>> {
        ask!(self, "after-tool-call", |hook, store| hook.call_after_tool_call(&mut *store, call, output, is_error))
    }

    fn before_prompt<'a>(&'a self, prompt: &'a Prompt) -> BoxFuture<'a, Result<PromptDecision, RunError>> {
        ask!(self, "before-prompt", |hook, store| hook.call_before_prompt(&mut *store, prompt))
    }
}
