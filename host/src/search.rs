//! Web search backends: the [`SearchBackend`] trait behind the `web_search`
//! tool, and the normalization every backend's rows go through.
//!
//! A backend is trust-bearing: it receives the raw query, and its rows reach
//! the model as untrusted input. Implement the trait in Rust, or ship a
//! search-backend component (`world::search_backend::ComponentBackend`),
//! which reaches only the hosts its grant lists and never sees the API key
//! the host adds.

use nexo_model::BoxFuture;

/// Why a search failed: the WIT `search-error`. The tool hands it to the
/// model as a tool error.
pub use crate::bindings::SearchError;
/// One search result: the WIT `search-hit`.
pub use crate::bindings::SearchHit;

use crate::truncate::head_chars;

/// The most rows a search returns to the model.
pub const MAX_RESULTS: usize = 8;

/// The longest snippet, in characters.
pub const MAX_SNIPPET_CHARS: usize = 300;

/// The longest title, in characters.
pub const MAX_TITLE_CHARS: usize = 300;

/// The longest URL kept; a row with a longer one is dropped.
pub const MAX_URL_CHARS: usize = 2048;

/// A web-search backend the operator configures. Implement it in Rust, or
/// ship a search-backend component.
pub trait SearchBackend: Send + Sync {
    /// A short name, for logs and messages.
    fn name(&self) -> &str;

    /// Runs one query. Rows are normalized by the caller ([`normalize`]).
    fn search<'a>(&'a self, query: &'a str) -> BoxFuture<'a, Result<Vec<SearchHit>, SearchError>>;
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

/// The error's message, as the model reads it after the backend's name.
pub fn describe(e: &SearchError) -> String {
    match e {
        SearchError::InvalidQuery(m) => format!("invalid query: {m}"),
        SearchError::Unavailable(m) => format!("search service unavailable: {m}"),
        SearchError::Upstream(m) => format!("search service error: {m}"),
    }
}
