//! A search backend written in Rust, through the `SearchBackend` trait: its
//! rows are normalized, its errors become tool errors, and the model loop
//! hands the rows to the model as untrusted data.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::sync::{Arc, Mutex};

mod toolbox;

use nexo::ToolError;
use nexo::agent_loop::{Event, HostLoop, Loop, LoopContext, LoopLimits};
use nexo::authority::Permissions;
use nexo::grant::Grant;
use nexo::manifest::{Capability, PermissionMode};
use nexo::search::{MAX_RESULTS, MAX_SNIPPET_CHARS, SearchBackend, SearchError, SearchHit};
use nexo_model::BoxFuture;
use nexo_model::ScriptedProvider;
use nexo_model::scripted::Script;
use nexo_sandbox::VirtualSandbox;
use serde_json::json;
use toolbox::{Setup, Toolbox};

/// An in-process index: every query gets 12 rows with long, ragged text; a
/// query of `!` is invalid and `down` fails. It records the queries it saw.
#[derive(Default)]
struct Index {
    queries: Mutex<Vec<String>>,
}

impl SearchBackend for Index {
    fn name(&self) -> &str {
        "index"
    }

    fn search<'a>(&'a self, query: &'a str) -> BoxFuture<'a, Result<Vec<SearchHit>, SearchError>> {
        Box::pin(async move {
            self.queries.lock().unwrap().push(query.to_string());
            match query {
                "!" => return Err(SearchError::InvalidQuery("a bare `!` is not a query".into())),
                "down" => return Err(SearchError::Unavailable("the index is rebuilding".into())),
                _ => {}
            }
            let mut rows: Vec<SearchHit> = (1..=12)
                .map(|i| SearchHit {
                    title: format!("  Row\n{i}  "),
                    url: format!("https://index.example/{i}"),
                    snippet: "word ".repeat(200),
                })
                .collect();
            rows.insert(
                0,
                SearchHit { title: "bad".into(), url: "javascript:alert(1)".into(), snippet: String::new() },
            );
            Ok(rows)
        })
    }
}

async fn toolbox(index: Arc<Index>, mode: PermissionMode) -> Toolbox {
    Setup {
        agent: "researcher",
        requested: vec![Capability::Search],
        grant: Grant::of(Capability::ALL),
        search: Some(index),
        ..Setup::all(Arc::new(VirtualSandbox::new()), Permissions::new(mode))
    }
    .build()
    .await
}

#[tokio::test]
async fn a_rust_backend_s_rows_are_normalized() {
    let index = Arc::new(Index::default());
    let tb = toolbox(index.clone(), PermissionMode::Auto).await;
    assert_eq!(tb.offered(), [Capability::Search]);
    let hits = tb.web_search("wasm").await.unwrap();
    assert_eq!(hits.len(), MAX_RESULTS);
    assert_eq!(hits[0].title, "Row 1", "whitespace collapsed; the javascript: row dropped");
    assert!(hits.iter().all(|h| h.snippet.chars().count() == MAX_SNIPPET_CHARS && h.snippet.ends_with('…')));
    // The backend's errors are tool errors the agent can read.
    assert!(matches!(tb.web_search("!").await, Err(ToolError::InvalidInput(m)) if m.contains("not a query")));
    assert!(matches!(tb.web_search("down").await, Err(ToolError::Failed(m)) if m.contains("rebuilding")));
    assert!(matches!(tb.web_search("  ").await, Err(ToolError::InvalidInput(_))));
    // Read-only mode denies search before the backend sees anything.
    let denied = toolbox(index.clone(), PermissionMode::ReadOnly).await;
    assert!(matches!(denied.web_search("secret plans").await, Err(ToolError::Denied(_))));
    assert_eq!(*index.queries.lock().unwrap(), ["wasm", "!", "down"]);
}

#[tokio::test]
async fn the_model_gets_rows_as_untrusted_json() {
    let script: Script = serde_json::from_value(json!({"turns": [
        {"tool_calls": [{"name": "web_search", "arguments": {"query": "wasm"}}]},
        {"text": "done"}
    ]}))
    .unwrap();
    let provider = ScriptedProvider::new("test", script);
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = {
        let events = events.clone();
        move |e: &Event| events.lock().unwrap().push(e.clone())
    };
    let tb = Setup {
        agent: "researcher",
        requested: vec![Capability::Search],
        grant: Grant::of(Capability::ALL),
        search: Some(Arc::new(Index::default())),
        ..Setup::all(Arc::new(VirtualSandbox::new()), Permissions::new(PermissionMode::Auto))
    }
    .build_with_events(Arc::new(sink))
    .await;
    let ctx = LoopContext {
        provider: Some(&provider),
        tools: &tb.0,
        instructions: &[],
        history: &[],
        limits: LoopLimits::default(),
        spend: None,
    };
    let outcome = HostLoop.run(ctx, "go").await.unwrap();
    assert_eq!(outcome.text, "done");
    let result = events
        .lock()
        .unwrap()
        .iter()
        .find_map(|e| match e {
            Event::ToolResult { verdict, summary, .. } => Some((verdict.clone(), summary.clone())),
            _ => None,
        })
        .unwrap();
    assert_eq!(result.0, "allowed");
    assert!(result.1.starts_with("[untrusted search results"), "{}", result.1);
}
