//! The hook world: the operator's check on each gated call and each prompt,
//! as one component. Its linker offers WASI with nothing granted and
//! `types` only, as a skill's does: a hook holds no authority, it answers.
//! A run asks a hook through its own instance ([`crate::hooks::HookInstance`]).

use std::sync::Arc;

use wasmtime::Store;
use wasmtime::component::Component;

use super::{LinkFailure, Meta, WorldLinker};
use crate::bindings::hook::{HookPlugin, HookPluginPre};
use crate::engine::Engine;
use crate::error::RunError;
use crate::hooks::{HookCall, HookComponent, Origin, Prompt};
use crate::instance::{Host, Wasi, new_store, settle};
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

async fn instance(engine: &Engine, pre: &Pre, label: Arc<str>) -> Result<(Store<Host<()>>, HookPlugin), RunError> {
    let timeout = engine.limits().call_timeout;
    let mut store = new_store(engine, label, &Wasi::default(), timeout, ())?;
    let result = tokio::time::timeout(timeout, pre.instantiate_async(&mut store)).await;
    let bindings = settle(&store, "instantiate", timeout, result)?;
    Ok((store, bindings))
}

/// Reads a hook's info under the short call deadline.
pub(crate) async fn describe(engine: &Engine, pre: &Pre, label: Arc<str>) -> Result<HookInfo, RunError> {
    let timeout = engine.limits().call_timeout;
    let (mut store, bindings) = instance(engine, pre, label).await?;
    let result = tokio::time::timeout(timeout, bindings.nexo_plugin_hook().call_info(&mut store)).await;
    settle(&store, "info", timeout, result).map(HookInfo::from)
}

/// A loaded hook component.
#[derive(Clone)]
pub struct Hook {
    meta: Arc<Meta>,
    pre: Pre,
    info: Arc<HookInfo>,
}

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hook").field("name", &self.meta.name).field("events", &self.info.events).finish()
    }
}

impl Hook {
    pub(crate) fn new(meta: Arc<Meta>, pre: Pre, info: HookInfo) -> Self {
        Hook { meta, pre, info: Arc::new(info) }
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
    pub fn component(&self) -> HookComponent {
        let meta = &self.meta;
        HookComponent::new(meta.name.clone(), self.info.events.clone(), meta.engine.clone(), self.pre.clone())
    }

    /// Asks a fresh instance about a sample call (a model's `read_file`) at
    /// each moment the hook wants: it must answer, without a trap and
    /// within its deadline (`nexo plugin test`).
    pub async fn sample(&self) -> Result<(), RunError> {
        let instance = self.component().for_run();
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
