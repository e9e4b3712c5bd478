//! A search backend for the Brave Search web API
//! (`GET https://api.search.brave.com/res/v1/web/search`).
//!
//! The API key goes in the host's configuration: the host adds the
//! `X-Subscription-Token` header to requests for the granted host, so this
//! component never holds the key. Settings: `base-url` (optional, for tests and
//! proxies; defaults to the public API).

use nexo_sdk::search::{get, setting, Info, SearchBackend, SearchError, SearchHit, SearchOptions};
use serde_json::Value;

struct Brave;

const DEFAULT_BASE: &str = "https://api.search.brave.com";

impl SearchBackend for Brave {
    fn info() -> Info {
        Info {
            name: "brave".into(),
            description: "Brave Search web results".into(),
            hosts: vec!["api.search.brave.com".into()],
        }
    }

    fn search(query: String, options: SearchOptions) -> Result<Vec<SearchHit>, SearchError> {
        if query.trim().is_empty() {
            return Err(SearchError::InvalidQuery("the query is empty".into()));
        }
        let base = setting("base-url").unwrap_or_else(|| DEFAULT_BASE.into());
        let count = options.max_results.clamp(1, 20).to_string();
        let mut params = form_urlencoded::Serializer::new(String::new());
        params.append_pair("q", &query).append_pair("count", &count);
        if let Some(lang) = &options.language {
            params.append_pair("search_lang", lang);
        }
        let url = format!("{}/res/v1/web/search?{}", base.trim_end_matches('/'), params.finish());
        let resp = get(&url, &[("accept", "application/json")])?;
        let body: Option<Value> = serde_json::from_slice(&resp.body).ok();
        if resp.status != 200 {
            let detail = body
                .as_ref()
                .and_then(|b| b.pointer("/error/detail"))
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| String::from_utf8_lossy(&resp.body).chars().take(200).collect());
            return Err(SearchError::Upstream(format!("Brave Search answered HTTP {}: {detail}", resp.status)));
        }
        let body = body.ok_or_else(|| SearchError::Upstream("Brave Search sent a body that is not JSON".into()))?;
        let Some(results) = body.pointer("/web/results").and_then(Value::as_array) else {
            // A query with no web results has no `web` section at all.
            return Ok(vec![]);
        };
        Ok(results
            .iter()
            .filter_map(|r| {
                Some(SearchHit {
                    title: r.get("title")?.as_str()?.to_string(),
                    url: r.get("url")?.as_str()?.to_string(),
                    snippet: r.get("description").and_then(Value::as_str).unwrap_or("").to_string(),
                })
            })
            .take(options.max_results as usize)
            .collect())
    }
}

nexo_sdk::export_search_backend!(Brave);
