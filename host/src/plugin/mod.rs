//! Loading plugins: validate the file, compile it (or load it from the
//! cache), find which world it implements, check its imports against that
//! world, link it once into an `InstancePre`, and read its self-description.

pub mod validate;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};
use wasmtime::component::Component;

use crate::engine::{CacheOutcome, Engine};
pub use crate::error::LoadError;
use crate::error::RunError;
use crate::manifest::AgentManifest;
pub use crate::manifest::{CONTRACT_VERSION, Description, PluginKind, SkillDescription};
use crate::settings::RunOptions;
use crate::world::agent::{Agent, AgentInstance};
use crate::world::hook::Hook;
use crate::world::sandbox_provider::SandboxProviderPlugin;
use crate::world::search_backend::SearchBackendPlugin;
use crate::world::skill::Skill;
use crate::world::{LinkFailure, Meta, agent, hook, sandbox_provider, search_backend, skill};

/// A loaded plugin of any world, with its typed handle. Cheap to clone;
/// instantiate it once per run.
#[derive(Clone)]
pub struct Plugin {
    meta: Arc<Meta>,
    world: World,
    description: Arc<Description>,
}

/// The typed handle of a loaded plugin.
#[derive(Clone, Debug)]
pub enum World {
    /// An agent.
    Agent(Agent),
    /// A skill.
    Skill(Skill),
    /// A search backend.
    SearchBackend(SearchBackendPlugin),
    /// A sandbox provider.
    SandboxProvider(SandboxProviderPlugin),
    /// A hook.
    Hook(Hook),
}

impl fmt::Debug for Plugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plugin")
            .field("path", &self.meta.path)
            .field("name", &self.meta.name)
            .field("kind", &self.meta.kind)
            .finish_non_exhaustive()
    }
}

impl Plugin {
    /// Loads the component at `path`.
    pub async fn load(engine: &Engine, path: impl AsRef<Path>) -> Result<Plugin, LoadError> {
        let path = path.as_ref().to_path_buf();
        let bytes = crate::files::read_regular(&path, crate::files::MAX_COMPONENT_BYTES)
            .map_err(|source| LoadError::Read { path: path.clone(), source })?;
        Plugin::from_bytes(engine, path, &bytes).await
    }

    /// Loads a component from memory; `path` only labels errors.
    pub async fn from_bytes(engine: &Engine, path: PathBuf, bytes: &[u8]) -> Result<Plugin, LoadError> {
        check_header(&path, bytes)?;
        // Checked here, for either allocator: the pooling one would refuse
        // such a component at compile time, the on-demand one only when it
        // first instantiates, with a less helpful error.
        let minimum = declared_memory_minimum(bytes);
        let cap = engine.limits().memory_bytes;
        if minimum > u64::try_from(cap).unwrap_or(u64::MAX) {
            return Err(LoadError::MemoryTooSmall { path, minimum, cap });
        }
        let (component, cache) =
            engine.compile(bytes).map_err(|e| LoadError::Invalid { path: path.clone(), reason: format!("{e:#}") })?;
        let ty = component.component_type();
        let wt = engine.wasmtime();
        let exports: Vec<String> = ty.exports(wt).map(|(n, _)| n.to_string()).collect();
        let imports: Vec<String> = ty.imports(wt).map(|(n, _)| n.to_string()).collect();
        let (kind, export) = detect_kind(&path, &exports)?;
        check_imports(&path, kind, &imports)?;
        let file_name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let label: Arc<str> = Arc::from(file_name.as_str());
        let linked = Linked::new(engine, &path, kind, &component)?;
        let description = linked.describe(engine, label).await?;
        validate::description(&path, kind, &description)?;
        let name: Arc<str> = Arc::from(match &description {
            Description::Agent(m) => m.name.as_str(),
            Description::Skill(s) => s.metadata.name.as_str(),
            Description::SearchBackend(i) => i.name.as_str(),
            Description::SandboxProvider(i) => i.name.as_str(),
            Description::Hook(i) => i.name.as_str(),
        });
        let meta = Arc::new(Meta {
            engine: engine.clone(),
            path,
            name,
            kind,
            export,
            sha256: hex::encode(Sha256::digest(bytes)),
            size: bytes.len(),
            memory_minimum: minimum,
            cache,
            imports,
            exports,
        });
        let world = match (linked, &description) {
            (Linked::Agent(pre), Description::Agent(m)) => World::Agent(Agent::new(meta.clone(), pre, m.clone())),
            (Linked::Skill(pre), Description::Skill(d)) => World::Skill(Skill::new(meta.clone(), pre, d.clone())),
            (Linked::SearchBackend(pre), Description::SearchBackend(i)) => {
                World::SearchBackend(SearchBackendPlugin::new(meta.clone(), pre, i.clone()))
            }
            (Linked::SandboxProvider(pre), Description::SandboxProvider(i)) => {
                World::SandboxProvider(SandboxProviderPlugin::new(meta.clone(), pre, i.clone()))
            }
            (Linked::Hook(pre), Description::Hook(i)) => World::Hook(Hook::new(meta.clone(), pre, i.clone())),
            _ => unreachable!("a world describes itself with its own description"),
        };
        Ok(Plugin { meta, world, description: Arc::new(description) })
    }

    /// The plugin's name, from its self-description.
    pub fn name(&self) -> &str {
        &self.meta.name
    }

    /// The world it implements.
    pub fn kind(&self) -> PluginKind {
        self.meta.kind
    }

    /// The file it was loaded from.
    pub fn path(&self) -> &Path {
        &self.meta.path
    }

    /// The exported nexo interface, with its version.
    pub fn export(&self) -> &str {
        &self.meta.export
    }

    /// What the plugin says about itself.
    pub fn description(&self) -> &Description {
        &self.description
    }

    /// The agent manifest, if this is an agent.
    pub fn manifest(&self) -> Option<&AgentManifest> {
        match &*self.description {
            Description::Agent(m) => Some(m),
            _ => None,
        }
    }

    /// Every import of the component, by name.
    pub fn imports(&self) -> &[String] {
        &self.meta.imports
    }

    /// Every export of the component, by name.
    pub fn exports(&self) -> &[String] {
        &self.meta.exports
    }

    /// The SHA-256 of the component, hex-encoded.
    pub fn sha256(&self) -> &str {
        &self.meta.sha256
    }

    /// The component's size in bytes.
    pub fn size(&self) -> usize {
        self.meta.size
    }

    /// Whether the compiled code came from the cache.
    pub fn cache_outcome(&self) -> CacheOutcome {
        self.meta.cache
    }

    /// The engine it was loaded into.
    pub fn engine(&self) -> &Engine {
        &self.meta.engine
    }

    /// The typed handle.
    pub fn world(&self) -> &World {
        &self.world
    }

    /// The agent, or [`LoadError::WrongKind`].
    pub fn agent(&self) -> Result<&Agent, LoadError> {
        match &self.world {
            World::Agent(a) => Ok(a),
            _ => Err(self.wrong_kind(PluginKind::Agent)),
        }
    }

    /// The skill, or [`LoadError::WrongKind`].
    pub fn skill(&self) -> Result<&Skill, LoadError> {
        match &self.world {
            World::Skill(s) => Ok(s),
            _ => Err(self.wrong_kind(PluginKind::Skill)),
        }
    }

    /// The search backend, or [`LoadError::WrongKind`].
    pub fn search_backend(&self) -> Result<&SearchBackendPlugin, LoadError> {
        match &self.world {
            World::SearchBackend(b) => Ok(b),
            _ => Err(self.wrong_kind(PluginKind::SearchBackend)),
        }
    }

    /// The sandbox provider, or [`LoadError::WrongKind`].
    pub fn sandbox_provider(&self) -> Result<&SandboxProviderPlugin, LoadError> {
        match &self.world {
            World::SandboxProvider(p) => Ok(p),
            _ => Err(self.wrong_kind(PluginKind::SandboxProvider)),
        }
    }

    /// The hook, or [`LoadError::WrongKind`].
    pub fn hook(&self) -> Result<&Hook, LoadError> {
        match &self.world {
            World::Hook(h) => Ok(h),
            _ => Err(self.wrong_kind(PluginKind::Hook)),
        }
    }

    /// Instantiates this agent ([`Agent::instantiate`]).
    pub async fn instantiate_agent(&self, options: &RunOptions) -> Result<AgentInstance, RunError> {
        self.agent()?.instantiate(options).await
    }

    /// Runs this agent once on `input` and returns its answer ([`Agent::run`]).
    pub async fn run_agent(&self, input: &str, options: &RunOptions) -> Result<String, RunError> {
        Ok(self.agent()?.run(input, options).await?.answer)
    }

    /// Runs one query through this search backend under `grant`. To serve
    /// many queries, build a
    /// [`ComponentBackend`](crate::world::search_backend::ComponentBackend) once instead.
    pub async fn search(
        &self,
        query: &str,
        language: Option<&str>,
        grant: &crate::egress::EgressGrant,
    ) -> Result<Vec<crate::search::SearchHit>, RunError> {
        let backend = crate::world::search_backend::ComponentBackend::new(self.search_backend()?.clone(), grant)?;
        backend.query(query, language).await
    }

    fn wrong_kind(&self, expected: PluginKind) -> LoadError {
        let hint = match self.meta.kind {
            PluginKind::Skill => ": skills are loaded by agents, not run on their own",
            PluginKind::SearchBackend => ": search backends serve an agent's web_search tool",
            PluginKind::SandboxProvider => ": sandbox providers host an agent's tools (RunOptions.providers.sandbox)",
            PluginKind::Hook => ": hooks are given to runs by the operator (`--hook`, `[hooks]`)",
            PluginKind::Agent => "",
        };
        LoadError::WrongKind { path: self.meta.path.clone(), expected, found: self.meta.kind, hint }
    }
}

/// A component linked into its world, before it has described itself.
enum Linked {
    Agent(crate::bindings::agent::AgentPluginPre<crate::unit::AgentHost>),
    Skill(crate::bindings::skill::SkillPluginPre<crate::instance::Host<()>>),
    SearchBackend(crate::bindings::search::SearchBackendPluginPre<crate::instance::Host<crate::egress::EgressState>>),
    SandboxProvider(
        crate::bindings::provider::SandboxProviderPluginPre<crate::instance::Host<crate::egress::EgressState>>,
    ),
    Hook(crate::bindings::hook::HookPluginPre<crate::instance::Host<()>>),
}

impl Linked {
    fn new(engine: &Engine, path: &Path, kind: PluginKind, component: &Component) -> Result<Linked, LoadError> {
        let failed = |e: LinkFailure| match e {
            LinkFailure::Imports(e) => LoadError::Link { path: path.to_path_buf(), kind, reason: format!("{e:#}") },
            LinkFailure::Exports(e) => LoadError::MissingExport {
                path: path.to_path_buf(),
                kind,
                world: kind.world(),
                detail: format!("{e:#}"),
            },
        };
        Ok(match kind {
            PluginKind::Agent => Linked::Agent(agent::link(engine, component).map_err(failed)?),
            PluginKind::Skill => Linked::Skill(skill::link(engine, component).map_err(failed)?),
            PluginKind::SearchBackend => {
                Linked::SearchBackend(search_backend::link(engine, component).map_err(failed)?)
            }
            PluginKind::SandboxProvider => {
                Linked::SandboxProvider(sandbox_provider::link(engine, component).map_err(failed)?)
            }
            PluginKind::Hook => Linked::Hook(hook::link(engine, component).map_err(failed)?),
        })
    }

    /// Instantiates the plugin once to read its self-description, under the
    /// short call deadline.
    async fn describe(&self, engine: &Engine, label: Arc<str>) -> Result<Description, LoadError> {
        Ok(match self {
            Linked::Agent(pre) => Description::Agent(agent::describe(engine, pre, label).await?),
            Linked::Skill(pre) => Description::Skill(skill::describe(engine, pre, label).await?),
            Linked::SearchBackend(pre) => {
                Description::SearchBackend(search_backend::describe(engine, pre, label).await?)
            }
            Linked::SandboxProvider(pre) => {
                Description::SandboxProvider(sandbox_provider::describe(engine, pre, label).await?)
            }
            Linked::Hook(pre) => Description::Hook(hook::describe(engine, pre, label).await?),
        })
    }
}

/// The largest minimum size, in bytes, that a linear memory defined in the
/// component's core modules declares. Invalid bytes count as 0: compiling
/// them reports what is wrong.
fn declared_memory_minimum(bytes: &[u8]) -> u64 {
    let mut most = 0u64;
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        match payload {
            Ok(wasmparser::Payload::MemorySection(memories)) => {
                for memory in memories.into_iter().map_while(Result::ok) {
                    let page = 1u64.checked_shl(memory.page_size_log2.unwrap_or(16)).unwrap_or(u64::MAX);
                    most = most.max(memory.initial.saturating_mul(page));
                }
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    most
}

fn check_header(path: &Path, bytes: &[u8]) -> Result<(), LoadError> {
    if wasmtime::Engine::detect_precompiled(bytes).is_some() {
        return Err(LoadError::Precompiled { path: path.to_path_buf() });
    }
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(LoadError::NotWasm { path: path.to_path_buf() });
    }
    match bytes[4..8] {
        [1, 0, 0, 0] => Err(LoadError::CoreModule { path: path.to_path_buf() }),
        [0x0d, 0, 1, 0] => Ok(()),
        _ => Err(LoadError::Invalid {
            path: path.to_path_buf(),
            reason: format!(
                "unknown WebAssembly version and layer {:02x?}; this host reads component-model binaries (0d 00 01 00)",
                &bytes[4..8]
            ),
        }),
    }
}

/// Splits `nexo:plugin/agent@0.1.0` into the interface and the version.
fn split_version(name: &str) -> (&str, Option<&str>) {
    match name.split_once('@') {
        Some((iface, version)) => (iface, Some(version)),
        None => (name, None),
    }
}

fn version_supported(version: Option<&str>) -> bool {
    version.is_some_and(|v| v.starts_with("0.1."))
}

fn detect_kind(path: &Path, exports: &[String]) -> Result<(PluginKind, String), LoadError> {
    let kinds = [
        PluginKind::Agent,
        PluginKind::Skill,
        PluginKind::SearchBackend,
        PluginKind::SandboxProvider,
        PluginKind::Hook,
    ];
    let mut found = Vec::new();
    let mut other_version = None;
    for name in exports {
        let (iface, version) = split_version(name);
        let Some(kind) = kinds.iter().copied().find(|k| k.export_interface() == iface) else {
            continue;
        };
        if version_supported(version) {
            found.push((kind, name.clone()));
        } else {
            other_version.get_or_insert_with(|| name.clone());
        }
    }
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => match other_version {
            Some(found) => Err(LoadError::UnsupportedVersion { path: path.to_path_buf(), found }),
            None => Err(LoadError::UnknownWorld { path: path.to_path_buf(), exports: exports.to_vec() }),
        },
        _ => Err(LoadError::SeveralWorlds {
            path: path.to_path_buf(),
            found: found.into_iter().map(|(_, n)| n).collect(),
        }),
    }
}

/// The WASI 0.2 packages every plugin's linker provides
/// (`wasmtime_wasi::p2::add_to_linker_async`).
const WASI_PACKAGES: &[&str] = &["io", "clocks", "random", "cli", "filesystem", "sockets"];

fn check_imports(path: &Path, kind: PluginKind, imports: &[String]) -> Result<(), LoadError> {
    for import in imports {
        let (iface, version) = split_version(import);
        let why = if let Some(package) = iface.strip_prefix("wasi:").and_then(|i| i.split('/').next()) {
            if WASI_PACKAGES.contains(&package) {
                // The linker holds these WASI 0.2 packages with nothing
                // granted; it rejects versions it lacks.
                continue;
            }
            let mut why = format!(
                "nexo does not provide: of WASI it offers only {} (with nothing granted)",
                WASI_PACKAGES.join(", ")
            );
            if package == "http" {
                why.push_str(
                    "; web access goes through the host's `fetch` tool. ComponentizeJS adds wasi:http \
                     unless told not to: build with `-d http -d fetch-event`",
                );
            }
            why
        } else if let Some(name) = iface.strip_prefix("nexo:plugin/") {
            if !kind.allowed_imports().contains(&name) {
                match kind {
                    PluginKind::Skill => "the skill world does not offer: a skill is data and holds no authority \
                        (no tools, model or network)"
                        .to_string(),
                    PluginKind::Hook => "the hook world does not offer: a hook only answers, and holds no \
                        authority (no tools, model, network or log)"
                        .to_string(),
                    _ => format!("the `{}` world does not offer", kind.world()),
                }
            } else if !version_supported(version) {
                format!(
                    "this host does not provide (it implements nexo:plugin@{CONTRACT_VERSION}); rebuild against its WIT"
                )
            } else {
                continue;
            }
        } else {
            "nexo does not provide: a plugin may import only WASI 0.2 and its world's `nexo:plugin` interfaces"
                .to_string()
        };
        return Err(LoadError::ForbiddenImport { path: path.to_path_buf(), kind, import: import.clone(), why });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wasi_imports_beyond_the_linkers_packages_are_named_with_the_fix() {
        let path = Path::new("js_agent.wasm");
        let ok =
            ["wasi:io/streams@0.2.9", "wasi:cli/stdout@0.2.10", "wasi:sockets/tcp@0.2.0", "nexo:plugin/tools@0.1.0"];
        let ok: Vec<String> = ok.iter().map(|s| s.to_string()).collect();
        assert!(check_imports(path, PluginKind::Agent, &ok).is_ok());

        let http = vec!["wasi:io/poll@0.2.10".to_string(), "wasi:http/types@0.2.10".to_string()];
        let err = check_imports(path, PluginKind::Agent, &http).unwrap_err().to_string();
        assert!(err.contains("imports `wasi:http/types@0.2.10`, which nexo does not provide"), "{err}");
        assert!(err.contains("build with `-d http -d fetch-event`"), "{err}");

        let nn = vec!["wasi:nn/inference@0.2.0-rc".to_string()];
        let err = check_imports(path, PluginKind::Agent, &nn).unwrap_err().to_string();
        assert!(err.contains("offers only io, clocks, random, cli, filesystem, sockets"), "{err}");
        assert!(!err.contains("fetch-event"), "{err}");
    }
}
