//! Loading plugins: validate the file, compile it (or load it from the
//! cache), find which world it implements, check its imports against that
//! world, link it once into an `InstancePre`, and read its self-description.

pub mod validate;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use sha2::{Digest, Sha256};
use wasmtime::Store;
use wasmtime::component::Component;

use crate::bindings::agent::AgentPluginPre;
use crate::bindings::provider::SandboxProviderPluginPre;
use crate::bindings::search::SearchBackendPluginPre;
use crate::bindings::skill::SkillPluginPre;
use crate::engine::{CacheOutcome, Engine};
use crate::error::PluginError;
use crate::manifest::{AgentManifest, BackendInfo, ProviderInfo, SkillMetadata};
use crate::state::{HostState, LimitHit, Preopen, RunOptions, new_store};

/// The version of the `nexo:plugin` package this host implements. Any
/// `0.1.x` plugin is accepted.
pub const CONTRACT_VERSION: &str = "0.1.0";

/// Which world a plugin implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PluginKind {
    /// `nexo:plugin/agent-plugin`.
    Agent,
    /// `nexo:plugin/skill-plugin`.
    Skill,
    /// `nexo:plugin/search-backend-plugin`.
    SearchBackend,
    /// `nexo:plugin/sandbox-provider-plugin`.
    SandboxProvider,
}

impl PluginKind {
    /// The interface a plugin of this kind exports, without a version.
    pub fn export_interface(self) -> &'static str {
        match self {
            PluginKind::Agent => "nexo:plugin/agent",
            PluginKind::Skill => "nexo:plugin/skill",
            PluginKind::SearchBackend => "nexo:plugin/search-backend",
            PluginKind::SandboxProvider => "nexo:plugin/sandbox-provider",
        }
    }

    /// The world's name in the WIT package.
    pub fn world(self) -> &'static str {
        match self {
            PluginKind::Agent => "nexo:plugin/agent-plugin",
            PluginKind::Skill => "nexo:plugin/skill-plugin",
            PluginKind::SearchBackend => "nexo:plugin/search-backend-plugin",
            PluginKind::SandboxProvider => "nexo:plugin/sandbox-provider-plugin",
        }
    }

    /// The `nexo:plugin` interfaces this kind may import.
    fn allowed_imports(self) -> &'static [&'static str] {
        match self {
            PluginKind::Agent => &["types", "log", "tools", "model"],
            PluginKind::Skill => &["types"],
            PluginKind::SearchBackend | PluginKind::SandboxProvider => &["types", "log", "outbound-http", "config"],
        }
    }
}

impl PluginKind {
    /// The kind's name with its indefinite article.
    pub fn with_article(self) -> &'static str {
        match self {
            PluginKind::Agent => "an agent",
            PluginKind::Skill => "a skill",
            PluginKind::SearchBackend => "a search backend",
            PluginKind::SandboxProvider => "a sandbox provider",
        }
    }
}

impl fmt::Display for PluginKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PluginKind::Agent => "agent",
            PluginKind::Skill => "skill",
            PluginKind::SearchBackend => "search backend",
            PluginKind::SandboxProvider => "sandbox provider",
        })
    }
}

/// A skill component's self-description.
#[derive(Debug, Clone, Serialize)]
pub struct SkillDescription {
    /// Its metadata.
    pub metadata: SkillMetadata,
    /// Its bundled resource paths.
    pub resources: Vec<String>,
}

/// What a plugin says about itself.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "description")]
pub enum Description {
    /// An agent's manifest.
    Agent(AgentManifest),
    /// A skill's metadata and resources.
    Skill(SkillDescription),
    /// A search backend's info.
    SearchBackend(BackendInfo),
    /// A sandbox provider's info.
    SandboxProvider(ProviderInfo),
}

/// The linked, ready-to-instantiate form of a plugin.
#[derive(Clone)]
pub enum Pre {
    /// An agent.
    Agent(AgentPluginPre<HostState>),
    /// A skill.
    Skill(SkillPluginPre<HostState>),
    /// A search backend.
    SearchBackend(SearchBackendPluginPre<HostState>),
    /// A sandbox provider.
    SandboxProvider(SandboxProviderPluginPre<HostState>),
}

/// A loaded plugin. Cheap to clone; instantiate it once per run.
#[derive(Clone)]
pub struct Plugin {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Engine,
    path: PathBuf,
    name: Arc<str>,
    kind: PluginKind,
    export: String,
    sha256: String,
    size: usize,
    cache: CacheOutcome,
    imports: Vec<String>,
    exports: Vec<String>,
    pre: Pre,
    description: Description,
}

impl fmt::Debug for Plugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plugin")
            .field("path", &self.inner.path)
            .field("name", &self.inner.name)
            .field("kind", &self.inner.kind)
            .finish_non_exhaustive()
    }
}

impl Plugin {
    /// Loads the component at `path`.
    pub async fn load(engine: &Engine, path: impl AsRef<Path>) -> Result<Plugin, PluginError> {
        let path = path.as_ref().to_path_buf();
        let bytes = crate::files::read_regular(&path, crate::files::MAX_COMPONENT_BYTES)
            .map_err(|source| PluginError::Read { path: path.clone(), source })?;
        Plugin::from_bytes(engine, path, &bytes).await
    }

    /// Loads a component from memory; `path` only labels errors.
    pub async fn from_bytes(engine: &Engine, path: PathBuf, bytes: &[u8]) -> Result<Plugin, PluginError> {
        check_header(&path, bytes)?;
        let (component, cache) =
            engine.compile(bytes).map_err(|e| PluginError::Invalid { path: path.clone(), reason: format!("{e:#}") })?;
        let ty = component.component_type();
        let wt = engine.wasmtime();
        let exports: Vec<String> = ty.exports(wt).map(|(n, _)| n.to_string()).collect();
        let imports: Vec<String> = ty.imports(wt).map(|(n, _)| n.to_string()).collect();
        let (kind, export) = detect_kind(&path, &exports)?;
        check_imports(&path, kind, &imports)?;
        let pre = link(engine, &path, kind, &component)?;
        let file_name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let description = describe(engine, &pre, Arc::from(file_name.as_str())).await?;
        validate::description(&path, kind, &description)?;
        let name: Arc<str> = Arc::from(match &description {
            Description::Agent(m) => m.name.as_str(),
            Description::Skill(s) => s.metadata.name.as_str(),
            Description::SearchBackend(i) => i.name.as_str(),
            Description::SandboxProvider(i) => i.name.as_str(),
        });
        Ok(Plugin {
            inner: Arc::new(Inner {
                engine: engine.clone(),
                path,
                name,
                kind,
                export,
                sha256: hex::encode(Sha256::digest(bytes)),
                size: bytes.len(),
                cache,
                imports,
                exports,
                pre,
                description,
            }),
        })
    }

    /// The plugin's name, from its self-description.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The world it implements.
    pub fn kind(&self) -> PluginKind {
        self.inner.kind
    }

    /// The file it was loaded from.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The exported nexo interface, with its version.
    pub fn export(&self) -> &str {
        &self.inner.export
    }

    /// What the plugin says about itself.
    pub fn description(&self) -> &Description {
        &self.inner.description
    }

    /// The agent manifest, if this is an agent.
    pub fn manifest(&self) -> Option<&AgentManifest> {
        match &self.inner.description {
            Description::Agent(m) => Some(m),
            _ => None,
        }
    }

    /// Every import of the component, by name.
    pub fn imports(&self) -> &[String] {
        &self.inner.imports
    }

    /// Every export of the component, by name.
    pub fn exports(&self) -> &[String] {
        &self.inner.exports
    }

    /// The SHA-256 of the component, hex-encoded.
    pub fn sha256(&self) -> &str {
        &self.inner.sha256
    }

    /// The component's size in bytes.
    pub fn size(&self) -> usize {
        self.inner.size
    }

    /// Whether the compiled code came from the cache.
    pub fn cache_outcome(&self) -> CacheOutcome {
        self.inner.cache
    }

    /// The linked plugin.
    pub fn pre(&self) -> &Pre {
        &self.inner.pre
    }

    /// The engine it was loaded into.
    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// A fresh store for one instance of this plugin.
    pub(crate) fn store(&self, options: &RunOptions, timeout: Duration) -> Result<Store<HostState>, PluginError> {
        self.store_with(options, None, timeout)
    }

    /// A fresh store, with one more preopen (an agent's sandbox directory).
    pub(crate) fn store_with(
        &self,
        options: &RunOptions,
        extra: Option<&Preopen>,
        timeout: Duration,
    ) -> Result<Store<HostState>, PluginError> {
        new_store(&self.inner.engine, self.inner.name.clone(), options, extra, timeout)
            .map_err(|e| PluginError::Instantiate { plugin: self.inner.name.to_string(), reason: format!("{e:#}") })
    }

    /// Fails with [`PluginError::WrongKind`] unless this plugin is `expected`.
    pub fn expect_kind(&self, expected: PluginKind) -> Result<(), PluginError> {
        if self.inner.kind == expected {
            return Ok(());
        }
        let hint = match self.inner.kind {
            PluginKind::Skill => ": skills are loaded by agents, not run on their own",
            PluginKind::SearchBackend => ": search backends serve an agent's web_search tool",
            PluginKind::SandboxProvider => ": sandbox providers host an agent's tools (RunOptions::sandbox)",
            PluginKind::Agent => "",
        };
        Err(PluginError::WrongKind { path: self.inner.path.clone(), expected, found: self.inner.kind, hint })
    }
}

fn check_header(path: &Path, bytes: &[u8]) -> Result<(), PluginError> {
    if wasmtime::Engine::detect_precompiled(bytes).is_some() {
        return Err(PluginError::Precompiled { path: path.to_path_buf() });
    }
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(PluginError::NotWasm { path: path.to_path_buf() });
    }
    match bytes[4..8] {
        [1, 0, 0, 0] => Err(PluginError::CoreModule { path: path.to_path_buf() }),
        [0x0d, 0, 1, 0] => Ok(()),
        _ => Err(PluginError::Invalid {
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

fn detect_kind(path: &Path, exports: &[String]) -> Result<(PluginKind, String), PluginError> {
    let kinds = [PluginKind::Agent, PluginKind::Skill, PluginKind::SearchBackend, PluginKind::SandboxProvider];
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
            Some(found) => Err(PluginError::UnsupportedVersion { path: path.to_path_buf(), found }),
            None => Err(PluginError::UnknownWorld { path: path.to_path_buf(), exports: exports.to_vec() }),
        },
        _ => Err(PluginError::SeveralWorlds {
            path: path.to_path_buf(),
            found: found.into_iter().map(|(_, n)| n).collect(),
        }),
    }
}

/// The WASI 0.2 packages every plugin's linker provides
/// (`wasmtime_wasi::p2::add_to_linker_async`).
const WASI_PACKAGES: &[&str] = &["io", "clocks", "random", "cli", "filesystem", "sockets"];

fn check_imports(path: &Path, kind: PluginKind, imports: &[String]) -> Result<(), PluginError> {
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
        return Err(PluginError::ForbiddenImport { path: path.to_path_buf(), kind, import: import.clone(), why });
    }
    Ok(())
}

fn link(engine: &Engine, path: &Path, kind: PluginKind, component: &Component) -> Result<Pre, PluginError> {
    let instance_pre = engine.linker(kind).instantiate_pre(component).map_err(|e| PluginError::Link {
        path: path.to_path_buf(),
        kind,
        reason: format!("{e:#}"),
    })?;
    let missing = |e: wasmtime::Error| PluginError::MissingExport {
        path: path.to_path_buf(),
        kind,
        world: kind.world(),
        detail: format!("{e:#}"),
    };
    Ok(match kind {
        PluginKind::Agent => Pre::Agent(AgentPluginPre::new(instance_pre).map_err(missing)?),
        PluginKind::Skill => Pre::Skill(SkillPluginPre::new(instance_pre).map_err(missing)?),
        PluginKind::SearchBackend => Pre::SearchBackend(SearchBackendPluginPre::new(instance_pre).map_err(missing)?),
        PluginKind::SandboxProvider => {
            Pre::SandboxProvider(SandboxProviderPluginPre::new(instance_pre).map_err(missing)?)
        }
    })
}

/// Instantiates the plugin once to read its self-description, under the
/// short call deadline.
async fn describe(engine: &Engine, pre: &Pre, label: Arc<str>) -> Result<Description, PluginError> {
    let timeout = engine.limits().call_timeout;
    let mut store = new_store(engine, label.clone(), &RunOptions::default(), None, timeout)
        .map_err(|e| PluginError::Instantiate { plugin: label.to_string(), reason: format!("{e:#}") })?;
    let result = tokio::time::timeout(timeout, async {
        wasmtime::Result::Ok(match pre {
            Pre::Agent(pre) => {
                let bindings = pre.instantiate_async(&mut store).await?;
                Description::Agent(bindings.nexo_plugin_agent().call_manifest(&mut store).await?.into())
            }
            Pre::Skill(pre) => {
                let bindings = pre.instantiate_async(&mut store).await?;
                let skill = bindings.nexo_plugin_skill();
                let metadata = skill.call_metadata(&mut store).await?.into();
                let resources = skill.call_resources(&mut store).await?;
                Description::Skill(SkillDescription { metadata, resources })
            }
            Pre::SearchBackend(pre) => {
                let bindings = pre.instantiate_async(&mut store).await?;
                Description::SearchBackend(bindings.nexo_plugin_search_backend().call_info(&mut store).await?.into())
            }
            Pre::SandboxProvider(pre) => {
                let bindings = pre.instantiate_async(&mut store).await?;
                Description::SandboxProvider(
                    bindings.nexo_plugin_sandbox_provider().call_info(&mut store).await?.into(),
                )
            }
        })
    })
    .await;
    settle(&store, "describe", timeout, result)
}

/// Turns the outcome of a guarded call into a typed error: the wall-clock
/// timeout and epoch interruption become [`PluginError::Deadline`], a refused
/// memory growth [`PluginError::MemoryLimit`], anything else a
/// [`PluginError::Trap`] with the plugin's stderr.
pub(crate) fn settle<T>(
    store: &Store<HostState>,
    function: &str,
    timeout: Duration,
    result: Result<wasmtime::Result<T>, tokio::time::error::Elapsed>,
) -> Result<T, PluginError> {
    let state = store.data();
    let plugin = state.plugin.to_string();
    let deadline = || PluginError::Deadline { plugin: plugin.clone(), function: function.to_string(), limit: timeout };
    let err = match result {
        Ok(Ok(value)) => return Ok(value),
        Ok(Err(err)) => err,
        Err(_) => return Err(deadline()),
    };
    if let Some(LimitHit::Memory { requested, cap }) = state.limiter.hit {
        return Err(PluginError::MemoryLimit { plugin, function: function.to_string(), requested, cap });
    }
    if err.downcast_ref::<wasmtime::PoolConcurrencyLimitError>().is_some() {
        return Err(PluginError::Instantiate {
            plugin,
            reason: format!("{err:#}; wait for running instances to finish, or raise `max_live_instances`"),
        });
    }
    let trap = match err.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::Interrupt) => return Err(deadline()),
        Some(trap) => trap.to_string(),
        None => format!("{err:#}"),
    };
    let backtrace = err.downcast_ref::<wasmtime::WasmBacktrace>().map(|b| b.to_string()).unwrap_or_default();
    Err(PluginError::Trap { plugin, function: function.to_string(), trap, backtrace, stderr: state.stderr_text() })
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
