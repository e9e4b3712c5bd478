//! The skill world: a skill package (instructions and reference files) as
//! one component. Its linker offers WASI with nothing granted and `types`
//! only: a skill is data, and holds no authority at all.

use std::sync::Arc;

use wasmtime::Store;
use wasmtime::component::Component;

use super::{LinkFailure, Meta, WorldLinker};
use crate::bindings::skill::{SkillPlugin, SkillPluginPre};
use crate::engine::Engine;
use crate::error::RunError;
use crate::instance::{Host, Wasi, new_store, settle};
use crate::manifest::{SkillDescription, SkillMetadata};

type Pre = SkillPluginPre<Host<()>>;

fn linker(engine: &Engine) -> wasmtime::Result<Arc<WorldLinker<Host<()>>>> {
    engine.shared(|engine| {
        // WASI (granting nothing) and `types`; `log` is linked too, and a
        // skill's import of it is refused before linking by the world's import rules.
        Ok(WorldLinker(crate::instance::base_linker::<()>(engine)?))
    })
}

/// Links `component` as a skill.
pub(crate) fn link(engine: &Engine, component: &Component) -> Result<Pre, LinkFailure> {
    super::link(linker(engine), component, Pre::new)
}

async fn instance(engine: &Engine, pre: &Pre, label: Arc<str>) -> Result<(Store<Host<()>>, SkillPlugin), RunError> {
    let timeout = engine.limits().call_timeout;
    let mut store = new_store(engine, label, &Wasi::default(), timeout, ())?;
    let result = tokio::time::timeout(timeout, pre.instantiate_async(&mut store)).await;
    let bindings = settle(&store, "instantiate", timeout, result)?;
    Ok((store, bindings))
}

/// Reads a skill's metadata and resource list under the short call deadline.
pub(crate) async fn describe(engine: &Engine, pre: &Pre, label: Arc<str>) -> Result<SkillDescription, RunError> {
    let timeout = engine.limits().call_timeout;
    let (mut store, bindings) = instance(engine, pre, label).await?;
    let result = tokio::time::timeout(timeout, async {
        let skill = bindings.nexo_plugin_skill();
        let metadata = skill.call_metadata(&mut store).await?;
        let resources = skill.call_resources(&mut store).await?;
        wasmtime::Result::Ok((metadata, resources))
    })
    .await;
    let (metadata, resources) = settle(&store, "describe", timeout, result)?;
    Ok(SkillDescription { metadata: metadata.into(), resources })
}

/// A loaded skill component.
#[derive(Clone)]
pub struct Skill {
    meta: Arc<Meta>,
    pre: Pre,
    description: Arc<SkillDescription>,
}

impl std::fmt::Debug for Skill {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Skill").field("name", &self.meta.name).finish_non_exhaustive()
    }
}

impl Skill {
    pub(crate) fn new(meta: Arc<Meta>, pre: Pre, description: SkillDescription) -> Self {
        Skill { meta, pre, description: Arc::new(description) }
    }

    /// The skill's name.
    pub fn name(&self) -> &str {
        &self.meta.name
    }

    /// Its metadata.
    pub fn metadata(&self) -> &SkillMetadata {
        &self.description.metadata
    }

    /// Its bundled resource paths.
    pub fn resources(&self) -> &[String] {
        &self.description.resources
    }

    /// Returns the skill's instructions (the SKILL.md body), from a fresh
    /// instance under the short call deadline.
    pub async fn instructions(&self) -> Result<String, RunError> {
        let engine = &self.meta.engine;
        let timeout = engine.limits().call_timeout;
        let (mut store, bindings) = instance(engine, &self.pre, self.meta.name.clone()).await?;
        let result = tokio::time::timeout(timeout, bindings.nexo_plugin_skill().call_instructions(&mut store)).await;
        settle(&store, "instructions", timeout, result)
    }

    /// Returns one bundled resource of the skill, or `None` if it has no such
    /// path.
    pub async fn resource(&self, path: &str) -> Result<Option<String>, RunError> {
        let engine = &self.meta.engine;
        let timeout = engine.limits().call_timeout;
        let (mut store, bindings) = instance(engine, &self.pre, self.meta.name.clone()).await?;
        let result =
            tokio::time::timeout(timeout, bindings.nexo_plugin_skill().call_read_resource(&mut store, path)).await;
        settle(&store, "read-resource", timeout, result)
    }
}

impl crate::settings::SkillComponent for Skill {
    fn name(&self) -> &str {
        Skill::name(self)
    }

    fn metadata(&self) -> &SkillMetadata {
        Skill::metadata(self)
    }

    fn instructions(&self) -> nexo_model::BoxFuture<'_, Result<String, RunError>> {
        Box::pin(Skill::instructions(self))
    }
}
