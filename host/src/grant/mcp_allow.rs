//! An exact-name list of MCP tools, and what two lists have in common.

use serde::{Deserialize, Serialize};

/// An exact-name list of MCP tools: `tool` matches that tool on any server,
/// `server/tool` only on that server.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct McpAllow(Vec<String>);

impl McpAllow {
    /// The list.
    pub fn new(entries: impl IntoIterator<Item = impl Into<String>>) -> Self {
        McpAllow(entries.into_iter().map(Into::into).collect())
    }

    /// Whether `tool` on `server` is listed. Exact: no patterns.
    pub fn matches(&self, server: &str, tool: &str) -> bool {
        self.0.iter().any(|e| match e.split_once('/') {
            Some((s, t)) => s == server && t == tool,
            None => e == tool,
        })
    }

    /// The entries.
    pub fn entries(&self) -> &[String] {
        &self.0
    }

    /// The names both lists match: `tool` and `server/tool` have
    /// `server/tool` in common, two equal entries themselves.
    pub fn intersection(&self, other: &McpAllow) -> McpAllow {
        let mut both = Vec::new();
        for mine in &self.0 {
            for theirs in &other.0 {
                let common = match (mine.split_once('/'), theirs.split_once('/')) {
                    (None, None) | (Some(_), Some(_)) => (mine == theirs).then_some(mine),
                    (Some((_, tool)), None) => (tool == theirs).then_some(mine),
                    (None, Some((_, tool))) => (tool == mine).then_some(theirs),
                };
                if let Some(entry) = common
                    && !both.contains(entry)
                {
                    both.push(entry.clone());
                }
            }
        }
        McpAllow(both)
    }

    /// Whether every name `other` matches, this list matches too.
    pub fn covers(&self, other: &McpAllow) -> bool {
        other.0.iter().all(|entry| match entry.split_once('/') {
            Some((server, tool)) => self.matches(server, tool),
            None => self.0.contains(entry),
        })
    }
}
