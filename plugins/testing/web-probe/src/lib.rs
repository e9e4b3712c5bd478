//! Test plugin: asks for `fetch` and `search`, then calls the web tools
//! directly, one per input line (`fetch URL` or `search QUERY`), and reports
//! each outcome on its own line.

use nexo_sdk::agent::{tools, Agent, Capability, Manifest, RunError, ToolError};

struct WebProbe;

/// One line per outcome: newlines in a message become spaces.
fn error(e: ToolError) -> String {
    let text = match e {
        ToolError::Denied(m) => format!("denied: {m}"),
        ToolError::Security(m) => format!("security: {m}"),
        ToolError::Unsupported(m) => format!("unsupported: {m}"),
        ToolError::InvalidInput(m) => format!("invalid-input: {m}"),
        ToolError::Failed(m) => format!("failed: {m}"),
        other => format!("other: {other:?}"),
    };
    text.replace('\n', " ")
}

impl Agent for WebProbe {
    fn manifest() -> Manifest {
        Manifest::new("web-probe", "Calls the web tools and reports the outcome (a test plugin)")
            .capabilities([Capability::Read, Capability::Fetch, Capability::Search])
            .fetch_allow(["news.example", "localhost", "127.0.0.1"])
    }

    fn run(input: String) -> Result<String, RunError> {
        let mut out = Vec::new();
        for line in input.lines().filter(|l| !l.trim().is_empty()) {
            let report = match line.split_once(' ') {
                Some(("fetch", url)) => match tools::fetch(url) {
                    Ok(p) => format!(
                        "ok {} {} {} truncated={} len={} body={}",
                        p.status,
                        p.url,
                        p.content_type.unwrap_or_default(),
                        p.truncated,
                        p.body.len(),
                        p.body.chars().take(40).collect::<String>()
                    ),
                    Err(e) => error(e),
                },
                Some(("search", query)) => match tools::web_search(query) {
                    Ok(hits) => {
                        let rows: Vec<String> = hits
                            .iter()
                            .map(|h| format!("{} | {} | {}", h.title, h.url, h.snippet.chars().count()))
                            .collect();
                        format!("ok {} rows: {}", hits.len(), rows.join(" ; "))
                    }
                    Err(e) => error(e),
                },
                _ => format!("unknown probe `{line}`"),
            };
            out.push(report);
        }
        Ok(out.join("\n"))
    }
}

nexo_sdk::export_agent!(WebProbe);
