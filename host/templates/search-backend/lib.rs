//! {{name}}: a web-search backend. It adapts one search API to nexo's
//! `web_search` tool.
//!
//! Requests go through the host's guarded client: GET only, to the hosts the
//! operator granted (`[search] hosts`). The host adds the API key itself, so a
//! backend never holds one. `nexo test` checks that it loads and that the
//! hosts `info` names are valid grant entries, and runs `tests/query.txt`
//! against a loopback server that serves `tests/response.txt`.
//!
//! This starting point expects an API at the `base-url` setting that answers
//! `GET <base-url>/search?q=…` with one hit per line, `url<TAB>title<TAB>snippet`.
//! Replace `parse` with your API's format (add `serde_json` for a JSON API).

use nexo_sdk::search::{get, setting, Info, SearchBackend, SearchError, SearchHit, SearchOptions};

struct Plugin;

impl SearchBackend for Plugin {
    fn info() -> Info {
        Info {
            name: "{{name}}".into(),
            description: "Searches the web through the example API".into(),
            // The hosts the backend needs; the operator still has to grant them.
            hosts: vec!["api.example.com".into()],
        }
    }

    fn search(query: String, options: SearchOptions) -> Result<Vec<SearchHit>, SearchError> {
        if query.trim().is_empty() {
            return Err(SearchError::InvalidQuery("the query is empty".into()));
        }
        let base = setting("base-url").unwrap_or_else(|| "https://api.example.com".into());
        let url = format!("{}/search?q={}", base.trim_end_matches('/'), encode(&query));
        // A refusal by the host comes back as an error value, never a trap.
        let resp = get(&url, &[("accept", "text/plain")])?;
        if resp.status != 200 {
            return Err(SearchError::Upstream(format!("the API answered HTTP {}", resp.status)));
        }
        let body = String::from_utf8_lossy(&resp.body);
        Ok(parse(&body).into_iter().take(options.max_results as usize).collect())
    }
}

/// One hit per line: `url<TAB>title<TAB>snippet`; other lines are skipped.
fn parse(body: &str) -> Vec<SearchHit> {
    body.lines()
        .filter_map(|line| {
            let mut fields = line.splitn(3, '\t');
            let url = fields.next()?.to_string();
            let title = fields.next()?.to_string();
            let snippet = fields.next().unwrap_or("").to_string();
            Some(SearchHit { title, url, snippet })
        })
        .collect()
}

/// Percent-encodes a query parameter (RFC 3986 unreserved characters stay).
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

nexo_sdk::export_search_backend!(Plugin);
