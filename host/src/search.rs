//! Web search: the [`SearchBackend`] trait behind the `web_search` tool, the
//! normalization every backend's rows go through, and search-backend
//! components ([`ComponentBackend`]) with the host side of their imports.
//!
//! A backend is trust-bearing: it receives the raw query, and its rows reach
//! the model as untrusted input. A component backend reaches only the hosts
//! its [`EgressGrant`] lists, and never sees the API key the host adds.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use nexo_model::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::bindings::search::nexo::plugin::{config, outbound_http};
use crate::bindings::{self, SearchError, SearchOptions};
use crate::error::PluginError;
use crate::plugin::{Plugin, PluginKind, Pre, settle};
use crate::state::{HostState, RunOptions};
use crate::truncate::head_chars;
use crate::web::{Egress, EgressGrant};

/// The most rows a search returns to the model.
pub const MAX_RESULTS: usize = 8;

/// The longest snippet, in characters.
pub const MAX_SNIPPET_CHARS: usize = 300;

/// The longest title, in characters.
pub const MAX_TITLE_CHARS: usize = 300;

/// The longest URL kept; a row with a longer one is dropped.
pub const MAX_URL_CHARS: usize = 2048;

/// One search result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchHit {
    /// The page title.
    pub title: String,
    /// The page address.
    pub url: String,
    /// A short extract.
    pub snippet: String,
}

impl From<bindings::SearchHit> for SearchHit {
    fn from(h: bindings::SearchHit) -> Self {
        SearchHit { title: h.title, url: h.url, snippet: h.snippet }
    }
}

impl From<SearchHit> for bindings::SearchHit {
    fn from(h: SearchHit) -> Self {
        bindings::SearchHit { title: h.title, url: h.url, snippet: h.snippet }
    }
}

/// Why a search failed. The tool hands it to the model as a tool error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SearchFailure {
    /// The query was empty or malformed.
    #[error("invalid query: {0}")]
    InvalidQuery(String),
    /// The service could not be reached, or the host refused the request.
    #[error("search service unavailable: {0}")]
    Unavailable(String),
    /// The service answered with an error or an unreadable body.
    #[error("search service error: {0}")]
    Upstream(String),
}

/// A web-search backend the operator configures. Implement it in Rust, or
/// ship a search-backend component ([`ComponentBackend`]).
pub trait SearchBackend: Send + Sync {
    /// A short name, for logs and messages.
    fn name(&self) -> &str;

    /// Runs one query. Rows are normalized by the caller ([`normalize`]).
    fn search<'a>(&'a self, query: &'a str) -> BoxFuture<'a, Result<Vec<SearchHit>, SearchFailure>>;
}

/// Normalizes a backend's rows: at most [`MAX_RESULTS`], title and snippet
/// cut to their limits, whitespace runs collapsed, rows without an
/// `http(s)` URL dropped.
pub fn normalize(hits: Vec<SearchHit>) -> Vec<SearchHit> {
    hits.into_iter()
        .filter_map(|h| {
            let url = h.url.trim().to_string();
            let scheme_ok = url.starts_with("https://") || url.starts_with("http://");
            if !scheme_ok || url.chars().count() > MAX_URL_CHARS || url.chars().any(char::is_whitespace) {
                return None;
            }
            Some(SearchHit {
                title: head_chars(&collapse(&h.title), MAX_TITLE_CHARS),
                url,
                snippet: head_chars(&collapse(&h.snippet), MAX_SNIPPET_CHARS),
            })
        })
        .take(MAX_RESULTS)
        .collect()
}

fn collapse(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A search-backend component with its operator grant, ready to serve the
/// `web_search` tool. Each query runs in a fresh instance.
pub struct ComponentBackend {
    plugin: Plugin,
    egress: Option<Arc<Egress>>,
    settings: BTreeMap<String, String>,
    timeout: Option<Duration>,
}

impl std::fmt::Debug for ComponentBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComponentBackend")
            .field("plugin", &self.plugin.name())
            .field("egress", &self.egress)
            .field("settings", &self.settings)
            .finish()
    }
}

impl ComponentBackend {
    /// Wraps `plugin`, which must be a search backend, with `grant`.
    pub fn new(plugin: Plugin, grant: &EgressGrant) -> Result<Self, PluginError> {
        plugin.expect_kind(PluginKind::SearchBackend)?;
        let egress =
            grant.egress().map_err(|reason| PluginError::Egress { plugin: plugin.name().to_string(), reason })?;
        Ok(ComponentBackend { plugin, egress, settings: grant.settings.clone(), timeout: grant.timeout })
    }

    /// The component.
    pub fn plugin(&self) -> &Plugin {
        &self.plugin
    }

    /// Runs one query, reporting failures as [`PluginError`]s (a trap, a
    /// deadline, or the backend's own [`PluginError::SearchFailed`]). Rows
    /// are normalized.
    pub async fn query(&self, query: &str, language: Option<&str>) -> Result<Vec<SearchHit>, PluginError> {
        let plugin = self.plugin.name().to_string();
        match self.call(query, language).await? {
            Ok(hits) => Ok(hits),
            Err(failure) => Err(PluginError::SearchFailed { plugin, reason: failure.to_string() }),
        }
    }

    async fn call(
        &self,
        query: &str,
        language: Option<&str>,
    ) -> Result<Result<Vec<SearchHit>, SearchFailure>, PluginError> {
        let Pre::SearchBackend(pre) = self.plugin.pre() else {
            unreachable!("a search-backend plugin always holds a search-backend InstancePre")
        };
        let timeout = self.timeout.unwrap_or(self.plugin.engine().limits().call_timeout);
        let mut store = self.plugin.store(&RunOptions::default(), timeout)?;
        store.data_mut().settings = self.settings.clone();
        store.data_mut().egress = self.egress.clone();
        let result = tokio::time::timeout(timeout, pre.instantiate_async(&mut store)).await;
        let bindings = settle(&store, "instantiate", timeout, result)?;
        let opts = SearchOptions { max_results: MAX_RESULTS as u32, language: language.map(String::from) };
        let call = bindings.nexo_plugin_search_backend().call_search(&mut store, query, &opts);
        let result = tokio::time::timeout(timeout, call).await;
        let stderr = store.data().stderr_text();
        if !stderr.is_empty() {
            tracing::info!(target: "nexo::plugin", plugin = self.plugin.name(), stream = "stderr", "{stderr}");
        }
        Ok(match settle(&store, "search", timeout, result)? {
            Ok(hits) => Ok(normalize(hits.into_iter().map(SearchHit::from).collect())),
            Err(SearchError::InvalidQuery(m)) => Err(SearchFailure::InvalidQuery(m)),
            Err(SearchError::Unavailable(m)) => Err(SearchFailure::Unavailable(m)),
            Err(SearchError::Upstream(m)) => Err(SearchFailure::Upstream(m)),
        })
    }
}

impl SearchBackend for ComponentBackend {
    fn name(&self) -> &str {
        self.plugin.name()
    }

    fn search<'a>(&'a self, query: &'a str) -> BoxFuture<'a, Result<Vec<SearchHit>, SearchFailure>> {
        Box::pin(async move {
            match self.call(query, None).await {
                Ok(result) => result,
                // A trap or deadline in the backend is the service being unavailable to the agent.
                Err(e) => Err(SearchFailure::Unavailable(e.to_string())),
            }
        })
    }
}

impl Plugin {
    /// Runs one query through this search backend under `grant`. To serve
    /// many queries, build a [`ComponentBackend`] once instead.
    pub async fn search(
        &self,
        query: &str,
        language: Option<&str>,
        grant: &EgressGrant,
    ) -> Result<Vec<SearchHit>, PluginError> {
        ComponentBackend::new(self.clone(), grant)?.query(query, language).await
    }
}

impl config::Host for HostState {
    async fn get(&mut self, key: String) -> wasmtime::Result<Option<String>> {
        Ok(self.settings.get(&key).cloned())
    }
}

impl outbound_http::Host for HostState {
    async fn send(
        &mut self,
        request: outbound_http::Request,
    ) -> wasmtime::Result<Result<outbound_http::Response, outbound_http::HttpError>> {
        let Some(egress) = self.egress.clone() else {
            let host = request.url.split('/').nth(2).unwrap_or("").chars().take(100).collect::<String>();
            tracing::info!(target: "nexo::egress", plugin = &*self.plugin, host, verdict = "denied");
            return Ok(Err(outbound_http::HttpError::Denied(format!(
                "no hosts are granted to `{}`: the operator lists the hosts a component may reach \
                 (`hosts` in its section of the config file)",
                self.plugin
            ))));
        };
        Ok(egress.send(&self.plugin, request).await)
    }
}
