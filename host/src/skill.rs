//! Reading skill components. A skill's instance gets no preopens, no network
//! and no nexo imports; the host only reads its exports.

use crate::error::PluginError;
use crate::plugin::{Plugin, PluginKind, Pre, settle};
use crate::state::RunOptions;

impl Plugin {
    /// Returns the skill's instructions (its `SKILL.md` body).
    pub async fn skill_instructions(&self) -> Result<String, PluginError> {
        let (mut store, bindings, timeout) = self.skill_instance().await?;
        let result = tokio::time::timeout(timeout, bindings.nexo_plugin_skill().call_instructions(&mut store)).await;
        settle(&store, "instructions", timeout, result)
    }

    /// Returns one bundled resource of the skill, or `None` if it has no such
    /// path.
    pub async fn skill_resource(&self, path: &str) -> Result<Option<String>, PluginError> {
        let (mut store, bindings, timeout) = self.skill_instance().await?;
        let result =
            tokio::time::timeout(timeout, bindings.nexo_plugin_skill().call_read_resource(&mut store, path)).await;
        settle(&store, "read-resource", timeout, result)
    }

    async fn skill_instance(
        &self,
    ) -> Result<
        (wasmtime::Store<crate::state::HostState>, crate::bindings::skill::SkillPlugin, std::time::Duration),
        PluginError,
    > {
        self.expect_kind(PluginKind::Skill)?;
        let Pre::Skill(pre) = self.pre() else { unreachable!("a skill plugin always holds a skill InstancePre") };
        let timeout = self.engine().limits().call_timeout;
        let mut store = self.store(&RunOptions::default(), timeout)?;
        let result = tokio::time::timeout(timeout, pre.instantiate_async(&mut store)).await;
        let bindings = settle(&store, "instantiate", timeout, result)?;
        Ok((store, bindings, timeout))
    }
}
