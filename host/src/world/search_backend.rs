//! The search-backend world: adapters for web-search services. A backend's
//! only way out is `outbound-http`, limited to the hosts the operator
//! granted ([`EgressGrant`]), with the API key added by the host; it never
//! sees the key.

use std::sync::Arc;
use std::time::Duration;

use nexo_model::BoxFuture;
use wasmtime::component::Component;

use super::{LinkFailure, Meta};
use crate::bindings::search::SearchBackendPluginPre;
use crate::bindings::{SearchError, SearchOptions};
use crate::egress::{EgressGrant, EgressState};
use crate::engine::Engine;
use crate::error::{ConfigError, RunError};
use crate::instance::{Host, Wasi, new_store, settle};
use crate::manifest::BackendInfo;
use crate::search::{MAX_RESULTS, SearchBackend, SearchHit, describe as describe_error, normalize};

type Pre = SearchBackendPluginPre<Host<EgressState>>;

/// Links `component` as a search backend.
pub(crate) fn link(engine: &Engine, component: &Component) -> Result<Pre, LinkFailure> {
    super::link(EgressState::linker(engine), component, Pre::new)
}

/// Reads a backend's info under the short call deadline, with no egress.
pub(crate) async fn describe(engine: &Engine, pre: &Pre, label: Arc<str>) -> Result<BackendInfo, RunError> {
    let timeout = engine.limits().call_timeout;
    let mut store =
        new_store(engine, label.clone(), &Wasi::default(), timeout, EgressState::nothing(&label, engine.limits()))?;
    let result = tokio::time::timeout(timeout, async {
        let bindings = pre.instantiate_async(&mut store).await?;
        bindings.nexo_plugin_search_backend().call_info(&mut store).await
    })
    .await;
    settle(&store, "describe", timeout, result).map(BackendInfo::from)
}

/// A loaded search-backend component.
#[derive(Clone)]
pub struct SearchBackendPlugin {
    meta: Arc<Meta>,
    pre: Pre,
    info: BackendInfo,
}

impl std::fmt::Debug for SearchBackendPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchBackendPlugin").field("name", &self.meta.name).finish_non_exhaustive()
    }
}

impl SearchBackendPlugin {
    pub(crate) fn new(meta: Arc<Meta>, pre: Pre, info: BackendInfo) -> Self {
        SearchBackendPlugin { meta, pre, info }
    }

    /// The backend's name.
    pub fn name(&self) -> &str {
        &self.meta.name
    }

    /// What it says about itself.
    pub fn info(&self) -> &BackendInfo {
        &self.info
    }
}

/// A search-backend component with its operator grant, ready to serve the
/// `web_search` tool. Each query runs in a fresh instance.
pub struct ComponentBackend {
    plugin: SearchBackendPlugin,
    grant: EgressGrant,
    timeout: Option<Duration>,
}

impl std::fmt::Debug for ComponentBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComponentBackend").field("plugin", &self.plugin.name()).field("grant", &self.grant).finish()
    }
}

impl ComponentBackend {
    /// Wraps `plugin` with `grant`, which is checked now.
    pub fn new(plugin: SearchBackendPlugin, grant: &EgressGrant) -> Result<Self, ConfigError> {
        EgressState::new(plugin.name(), grant, &crate::Limits::default())?;
        Ok(ComponentBackend { plugin, grant: grant.clone(), timeout: grant.timeout })
    }

    /// The component.
    pub fn plugin(&self) -> &SearchBackendPlugin {
        &self.plugin
    }

    /// Runs one query, reporting failures as [`RunError`]s (a trap, a
    /// deadline, or the backend's own [`RunError::SearchFailed`]). Rows are
    /// normalized.
    pub async fn query(&self, query: &str, language: Option<&str>) -> Result<Vec<SearchHit>, RunError> {
        let plugin = self.plugin.name().to_string();
        match self.call(query, language).await? {
            Ok(hits) => Ok(hits),
            Err(failure) => Err(RunError::SearchFailed { plugin, reason: describe_error(&failure) }),
        }
    }

    async fn call(&self, query: &str, language: Option<&str>) -> Result<Result<Vec<SearchHit>, SearchError>, RunError> {
        let engine = &self.plugin.meta.engine;
        let timeout = self.timeout.unwrap_or(engine.limits().call_timeout);
        let state = EgressState::new(self.plugin.name(), &self.grant, engine.limits())?;
        let mut store = new_store(engine, self.plugin.meta.name.clone(), &Wasi::default(), timeout, state)?;
        let result = tokio::time::timeout(timeout, self.plugin.pre.instantiate_async(&mut store)).await;
        let bindings = settle(&store, "instantiate", timeout, result)?;
        let opts = SearchOptions { max_results: MAX_RESULTS as u32, language: language.map(String::from) };
        let call = bindings.nexo_plugin_search_backend().call_search(&mut store, query, &opts);
        let result = tokio::time::timeout(timeout, call).await;
        let stderr = store.data().core.stderr_text();
        if !stderr.is_empty() {
            tracing::info!(target: "nexo::plugin", plugin = self.plugin.name(), stream = "stderr", "{stderr}");
        }
        Ok(settle(&store, "search", timeout, result)?.map(normalize))
    }
}

impl SearchBackend for ComponentBackend {
    fn name(&self) -> &str {
        self.plugin.name()
    }

    fn search<'a>(&'a self, query: &'a str) -> BoxFuture<'a, Result<Vec<SearchHit>, SearchError>> {
        Box::pin(async move {
            match self.call(query, None).await {
                Ok(result) => result,
                // A trap or deadline in the backend is the service being unavailable to the agent.
                Err(e) => Err(SearchError::Unavailable(e.to_string())),
            }
        })
    }
}
