//! The data-flow slice of a grant: what the operator marks untrusted or
//! private, which MCP tools send nothing out, and what the gate does with
//! a call that can send data out once the run has read such content.

use serde::{Deserialize, Serialize};

use super::mcp_allow::McpAllow;

/// What the gate does with a call that can send data out, once the run's
/// context holds what the operator guards against. From loosest: allow,
/// ask, refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FlowAction {
    /// As the mode decides.
    Allow,
    /// Someone decides, whatever the mode: the terminal under `ask`, a
    /// durable approval otherwise.
    Ask,
    /// Refused, under every mode.
    Refuse,
}

impl FlowAction {
    /// How the operator writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            FlowAction::Allow => "allow",
            FlowAction::Ask => "ask",
            FlowAction::Refuse => "refuse",
        }
    }
}

/// The operator's data-flow guard (`[grant.data-flow]`, a tenant's
/// `data-flow`). The default asks before a run that has read both
/// untrusted and private content sends anything out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct DataFlow {
    /// A send once the run has read untrusted content.
    pub untrusted: FlowAction,
    /// A send once the run has read untrusted and private content (never
    /// looser than `untrusted`).
    pub private: FlowAction,
    /// MCP servers (`server`) or tools (`server/tool`) whose results are
    /// untrusted.
    pub untrusted_mcp: Vec<String>,
    /// MCP servers or tools whose results are private.
    pub private_mcp: Vec<String>,
    /// MCP tools that send nothing out (exact names, as `mcp-allow`
    /// writes them); every other MCP tool call is a send.
    pub read_only_mcp: McpAllow,
    /// The workspace paths whose contents are private, relative to it;
    /// `None`: the whole workspace.
    pub private_paths: Option<Vec<String>>,
}

impl Default for DataFlow {
    fn default() -> Self {
        DataFlow {
            untrusted: FlowAction::Allow,
            private: FlowAction::Ask,
            untrusted_mcp: Vec::new(),
            private_mcp: Vec::new(),
            read_only_mcp: McpAllow::default(),
            private_paths: None,
        }
    }
}

impl DataFlow {
    /// Whether this is the default guard (a grant records only another).
    pub fn is_default(&self) -> bool {
        *self == DataFlow::default()
    }

    /// What both parties' guards require: the stricter actions, everything
    /// either marks untrusted or private, and only the MCP tools both call
    /// read-only.
    pub fn stricter(&self, other: &DataFlow) -> DataFlow {
        fn union(a: &[String], b: &[String]) -> Vec<String> {
            let mut all = a.to_vec();
            all.extend(b.iter().filter(|x| !a.contains(x)).cloned());
            all
        }
        DataFlow {
            untrusted: self.untrusted.max(other.untrusted),
            private: self.private.max(other.private),
            untrusted_mcp: union(&self.untrusted_mcp, &other.untrusted_mcp),
            private_mcp: union(&self.private_mcp, &other.private_mcp),
            read_only_mcp: self.read_only_mcp.intersection(&other.read_only_mcp),
            private_paths: match (&self.private_paths, &other.private_paths) {
                (Some(a), Some(b)) => Some(union(a, b)),
                _ => None,
            },
        }
    }

    /// The action for a send when the run holds untrusted content, and
    /// private content too when `private`.
    pub fn action(&self, private: bool) -> FlowAction {
        if private { self.untrusted.max(self.private) } else { self.untrusted }
    }

    /// Whether the results of `tool` on `server` are untrusted.
    pub fn untrusted_mcp(&self, server: &str, tool: &str) -> bool {
        names(&self.untrusted_mcp, server, tool)
    }

    /// Whether the results of `tool` on `server` are private.
    pub fn private_mcp(&self, server: &str, tool: &str) -> bool {
        names(&self.private_mcp, server, tool)
    }

    /// Whether what a read of `path` (or a glob of that pattern) returns
    /// may be private: under one of the private paths, or any path when
    /// the whole workspace is. A pattern, or a path that climbs (`..`),
    /// is private when it could reach one.
    pub fn private_path(&self, path: &str) -> bool {
        let Some(paths) = &self.private_paths else { return true };
        let parts = |p: &str| p.split('/').filter(|c| !c.is_empty() && *c != ".").map(str::to_string).collect();
        let path: Vec<String> = parts(path);
        if path.iter().any(|c| c == "..") {
            return !paths.is_empty();
        }
        paths.iter().any(|entry| {
            let entry: Vec<String> = parts(entry);
            for (mine, theirs) in path.iter().zip(&entry) {
                if mine.contains(['*', '?', '[', '{']) {
                    return true;
                }
                if mine != theirs {
                    return false;
                }
            }
            true
        })
    }

    /// The first MCP server the guard's lists name that `known` does not
    /// know, with the list's key: a misspelt name would mark nothing, so it
    /// is refused rather than let fail open.
    pub fn unknown_server(&self, known: impl Fn(&str) -> bool) -> Option<(&'static str, String)> {
        let lists = [
            ("untrusted-mcp", &self.untrusted_mcp[..]),
            ("private-mcp", &self.private_mcp[..]),
            ("read-only-mcp", self.read_only_mcp.entries()),
        ];
        for (key, list) in lists {
            for entry in list {
                // A bare name in `read-only-mcp` is a tool, on any server.
                let server = match entry.split_once('/') {
                    Some((server, _)) => server,
                    None if key == "read-only-mcp" => continue,
                    None => entry.as_str(),
                };
                if !known(server) {
                    return Some((key, server.to_string()));
                }
            }
        }
        None
    }

    /// The `read-only-mcp` entries that cover one of the `networked`
    /// servers (confined ones given network), each with those it covers:
    /// the guard trusts these tools to send nothing out, though their
    /// servers can.
    pub fn read_only_networked<'a>(&'a self, networked: &[&'a str]) -> Vec<(&'a str, Vec<&'a str>)> {
        let mut found = Vec::new();
        for entry in self.read_only_mcp.entries() {
            let covered: Vec<&str> = match entry.split_once('/') {
                Some((name, _)) => networked.iter().copied().filter(|n| *n == name).collect(),
                None => networked.to_vec(),
            };
            if !covered.is_empty() {
                found.push((entry.as_str(), covered));
            }
        }
        found
    }

    /// Whether anything in the workspace is private: what a shell command,
    /// which may read any of it, returns.
    pub fn any_private_path(&self) -> bool {
        self.private_paths.as_ref().is_none_or(|p| !p.is_empty())
    }
}

/// Whether `list` names `server` or `server/tool`.
fn names(list: &[String], server: &str, tool: &str) -> bool {
    list.iter().any(|e| match e.split_once('/') {
        Some((s, t)) => s == server && t == tool,
        None => e == server,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_entries_covering_networked_servers_are_found() {
        let guard =
            DataFlow { read_only_mcp: McpAllow::new(["docs/search", "fs/read_file", "lookup"]), ..DataFlow::default() };
        let found = guard.read_only_networked(&["docs", "web"]);
        assert_eq!(found, [("docs/search", vec!["docs"]), ("lookup", vec!["docs", "web"])]);
        assert!(guard.read_only_networked(&[]).is_empty());
    }

    #[test]
    fn private_paths_cover_what_is_under_them_and_patterns_that_reach_them() {
        let guard = DataFlow { private_paths: Some(vec!["secrets".into(), "./.env".into()]), ..DataFlow::default() };
        for (path, private) in [
            ("secrets/key.txt", true),
            ("/secrets", true),
            ("./secrets//a", true),
            (".env", true),
            ("docs/readme.md", false),
            ("secretsx/a", false),
            ("**/*.txt", true),
            ("docs/*.md", false),
            ("docs/../secrets/key.txt", true),
            ("", true),
        ] {
            assert_eq!(guard.private_path(path), private, "{path}");
        }
        assert!(DataFlow::default().private_path("anything"), "the whole workspace by default");
        let none = DataFlow { private_paths: Some(Vec::new()), ..DataFlow::default() };
        assert!(!none.private_path("../x") && !none.any_private_path());
    }

    #[test]
    fn a_guard_that_names_an_unknown_server_is_found_out() {
        let guard = DataFlow {
            untrusted_mcp: vec!["web".into()],
            read_only_mcp: McpAllow::new(["read_file", "fs/read_file"]),
            ..DataFlow::default()
        };
        assert_eq!(guard.unknown_server(|s| ["web", "fs"].contains(&s)), None);
        assert_eq!(guard.unknown_server(|s| s == "fs"), Some(("untrusted-mcp", "web".to_string())));
        assert_eq!(guard.unknown_server(|s| s == "web"), Some(("read-only-mcp", "fs".to_string())));
    }

    #[test]
    fn a_stricter_guard_only_adds() {
        let operator = DataFlow {
            untrusted: FlowAction::Ask,
            read_only_mcp: McpAllow::new(["fs/read_file", "search"]),
            private_paths: Some(vec!["secrets".into()]),
            ..DataFlow::default()
        };
        let tenant = DataFlow {
            private: FlowAction::Refuse,
            untrusted_mcp: vec!["web".into()],
            read_only_mcp: McpAllow::new(["fs/read_file", "fs/write_file"]),
            private_paths: Some(vec!["keys".into()]),
            ..DataFlow::default()
        };
        let both = operator.stricter(&tenant);
        assert_eq!((both.untrusted, both.private), (FlowAction::Ask, FlowAction::Refuse));
        assert_eq!(both.read_only_mcp, McpAllow::new(["fs/read_file"]));
        assert!(both.untrusted_mcp("web", "get") && !both.untrusted_mcp("fs", "web"));
        assert!(both.private_path("keys/a") && both.private_path("secrets/a"));
        assert_eq!(both.stricter(&DataFlow::default()).private_paths, None, "the whole workspace absorbs");
        // A private action never loosens the untrusted one.
        let odd = DataFlow { untrusted: FlowAction::Refuse, private: FlowAction::Allow, ..DataFlow::default() };
        assert_eq!(odd.action(true), FlowAction::Refuse);
    }
}
