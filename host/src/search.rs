//! Running search-backend components, and the host side of their imports.
//!
//! `config` serves the operator's plain settings for the backend.
//! `outbound-http` refuses every request for now: no hosts can be granted to a
//! backend until the guarded HTTP client lands, and default deny holds until
//! then.

use crate::bindings::search::nexo::plugin::{config, outbound_http};
use crate::bindings::{SearchError, SearchHit, SearchOptions};
use crate::error::PluginError;
use crate::plugin::{Plugin, PluginKind, Pre, settle};
use crate::state::{HostState, RunOptions};

/// The most rows a search returns.
pub const MAX_RESULTS: u32 = 8;

impl Plugin {
    /// Runs one query through this search backend.
    pub async fn search(
        &self,
        query: &str,
        language: Option<&str>,
        options: &RunOptions,
    ) -> Result<Vec<SearchHit>, PluginError> {
        self.expect_kind(PluginKind::SearchBackend)?;
        let Pre::SearchBackend(pre) = self.pre() else {
            unreachable!("a search-backend plugin always holds a search-backend InstancePre")
        };
        let timeout = options.timeout.unwrap_or(self.engine().limits().call_timeout);
        let mut store = self.store(options, timeout)?;
        let result = tokio::time::timeout(timeout, pre.instantiate_async(&mut store)).await;
        let bindings = settle(&store, "instantiate", timeout, result)?;
        let opts = SearchOptions { max_results: MAX_RESULTS, language: language.map(String::from) };
        let call = bindings.nexo_plugin_search_backend().call_search(&mut store, query, &opts);
        let result = tokio::time::timeout(timeout, call).await;
        let plugin = self.name().to_string();
        match settle(&store, "search", timeout, result)? {
            Ok(hits) => Ok(hits),
            Err(err) => Err(PluginError::SearchFailed {
                plugin,
                reason: match err {
                    SearchError::InvalidQuery(m) => format!("invalid query: {m}"),
                    SearchError::Unavailable(m) => format!("service unavailable: {m}"),
                    SearchError::Upstream(m) => format!("service error: {m}"),
                },
            }),
        }
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
        let url: String = request.url.chars().take(200).collect();
        tracing::info!(target: "nexo::egress", plugin = &*self.plugin, url, verdict = "denied");
        Ok(Err(outbound_http::HttpError::Denied(format!(
            "request to {url} refused: no hosts are granted to search backend `{}`",
            self.plugin
        ))))
    }
}
