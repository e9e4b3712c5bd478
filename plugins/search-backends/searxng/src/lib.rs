//! A search backend for a SearXNG instance's JSON API
//! (`GET <base-url>/search?q=…&format=json`).
//!
//! Settings: `base-url` (required), for example `https://searx.example.org`.
//! The instance must have the `json` format enabled.

use nexo_sdk::search::{get, setting, Info, SearchBackend, SearchError, SearchHit, SearchOptions};
use serde_json::Value;

struct Searxng;

impl SearchBackend for Searxng {
    fn info() -> Info {
        Info {
            name: "searxng".into(),
            description: "SearXNG metasearch, through an instance's JSON API".into(),
            hosts: vec![],
        }
    }

    fn search(query: String, options: SearchOptions) -> Result<Vec<SearchHit>, SearchError> {
        if query.trim().is_empty() {
            return Err(SearchError::InvalidQuery("the query is empty".into()));
        }
        let base = setting("base-url").ok_or_else(|| {
            SearchError::Unavailable("setting `base-url` is missing: set it to the SearXNG instance's address".into())
        })?;
        let mut params = form_urlencoded::Serializer::new(String::new());
        params.append_pair("q", &query).append_pair("format", "json");
        if let Some(lang) = &options.language {
            params.append_pair("language", lang);
        }
        let url = format!("{}/search?{}", base.trim_end_matches('/'), params.finish());
        let resp = get(&url, &[("accept", "application/json")])?;
        if resp.status != 200 {
            return Err(SearchError::Upstream(format!(
                "SearXNG answered HTTP {}: {}",
                resp.status,
                String::from_utf8_lossy(&resp.body).chars().take(200).collect::<String>()
            )));
        }
        let body: Value = serde_json::from_slice(&resp.body)
            .map_err(|e| SearchError::Upstream(format!("SearXNG sent a body that is not JSON: {e}")))?;
        let results = body
            .get("results")
            .and_then(Value::as_array)
            .ok_or_else(|| SearchError::Upstream("SearXNG's answer has no `results` array".into()))?;
        Ok(results
            .iter()
            .filter_map(|r| {
                Some(SearchHit {
                    title: r.get("title")?.as_str()?.to_string(),
                    url: r.get("url")?.as_str()?.to_string(),
                    snippet: r.get("content").and_then(Value::as_str).unwrap_or("").to_string(),
                })
            })
            .take(options.max_results as usize)
            .collect())
    }
}

nexo_sdk::export_search_backend!(Searxng);
