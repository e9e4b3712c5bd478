//! The five worlds a plugin can implement, each with a typed handle that
//! holds only what its world needs: [`agent::Agent`], [`skill::Skill`],
//! [`search_backend::SearchBackendPlugin`],
//! [`sandbox_provider::SandboxProviderPlugin`] and [`hook::Hook`]. Each world module owns its
//! store state, its linker (kept in the engine's shared slots, so the engine
//! knows no world), its self-description call and its instances.

pub mod agent;
pub mod hook;
pub mod sandbox_provider;
pub mod search_backend;
pub mod skill;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::engine::{CacheOutcome, Engine};
use crate::manifest::PluginKind;

/// What every loaded plugin has, whatever its world.
#[derive(Debug)]
pub struct Meta {
    /// The engine it was loaded into.
    pub engine: Engine,
    /// The file it was loaded from.
    pub path: PathBuf,
    /// Its name, from its self-description.
    pub name: Arc<str>,
    /// Its world.
    pub kind: PluginKind,
    /// The exported nexo interface, with its version.
    pub export: String,
    /// The SHA-256 of the component, hex-encoded.
    pub sha256: String,
    /// The component's size in bytes.
    pub size: usize,
    /// Whether the compiled code came from the cache.
    pub cache: CacheOutcome,
    /// Every import, by name.
    pub imports: Vec<String>,
    /// Every export, by name.
    pub exports: Vec<String>,
    /// The least linear memory the component declares, in bytes: a run
    /// whose memory cap is below it is refused before it instantiates.
    pub memory_minimum: u64,
}

impl Meta {
    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The plugin's file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Why a component could not be linked into its world.
pub(crate) enum LinkFailure {
    /// Its imports do not match.
    Imports(wasmtime::Error),
    /// It lacks an export, or has one of the wrong type.
    Exports(wasmtime::Error),
}

pub(crate) use crate::instance::WorldLinker;

/// Links `component` with the world's linker (or reports why the linker
/// could not be built), then types it as the world's `InstancePre`.
pub(crate) fn link<T: 'static, P>(
    linker: wasmtime::Result<Arc<WorldLinker<T>>>,
    component: &wasmtime::component::Component,
    typed: impl FnOnce(wasmtime::component::InstancePre<T>) -> wasmtime::Result<P>,
) -> Result<P, LinkFailure> {
    let pre = linker.map_err(LinkFailure::Imports)?.0.instantiate_pre(component).map_err(LinkFailure::Imports)?;
    typed(pre).map_err(LinkFailure::Exports)
}
