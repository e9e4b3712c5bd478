//! The authority a plugin asks for, as one normalized value, and the
//! difference between two of them: each new ask named on its own.
//!
//! Every field is a *request*: the operator's grant still bounds each run.
//! What is compared here is what a version of a plugin asks for, so that a
//! new version that asks for more is noticed even under a grant broad
//! enough to give it.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::manifest::{AgentManifest, Capability, Description, PermissionMode, PluginKind, SandboxKind};

/// What one version of a plugin asks for. Sets are sorted and host names
/// lowercased, so that equal asks compare and serialize equal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Requested {
    /// The plugin's world, in kebab-case (`agent`, `search-backend`, ...).
    pub kind: String,
    /// An agent's capabilities.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub capabilities: BTreeSet<Capability>,
    /// An agent's `fetch-allow` hosts.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub fetch_hosts: BTreeSet<String>,
    /// The hosts a search backend or sandbox provider reaches over HTTP.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub hosts: BTreeSet<String>,
    /// An agent's MCP servers, by configured name.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub mcp_servers: BTreeSet<String>,
    /// The MCP tools an agent asks to call without anyone being asked.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub mcp_allow: BTreeSet<String>,
    /// The sandbox an agent asks for (none: the operator's choice).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxKind>,
    /// The permission mode an agent narrows itself to (none: no narrowing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<PermissionMode>,
    /// The skills an agent loads, by name.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub skills: BTreeSet<String>,
    /// The tools a skill lists as allowed.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub allowed_tools: BTreeSet<String>,
}

impl Requested {
    /// What a loaded plugin asks for, from its self-description.
    pub fn of(description: &Description) -> Requested {
        match description {
            Description::Agent(m) => Requested::of_agent(m),
            Description::Skill(s) => Requested {
                allowed_tools: s.metadata.allowed_tools.iter().cloned().collect(),
                ..Requested::empty(PluginKind::Skill)
            },
            Description::SearchBackend(i) => {
                Requested { hosts: hosts(&i.hosts), ..Requested::empty(PluginKind::SearchBackend) }
            }
            Description::SandboxProvider(i) => {
                Requested { hosts: hosts(&i.hosts), ..Requested::empty(PluginKind::SandboxProvider) }
            }
            // A hook asks for nothing: its world imports no authority.
            Description::Hook(_) => Requested::empty(PluginKind::Hook),
        }
    }

    /// What an agent's manifest asks for: a component's or a TOML agent
    /// file's alike.
    pub fn of_agent(m: &AgentManifest) -> Requested {
        Requested {
            capabilities: m.capabilities.iter().copied().collect(),
            fetch_hosts: hosts(&m.fetch_allow),
            mcp_servers: m.mcp_servers.iter().cloned().collect(),
            mcp_allow: m.mcp_allow.iter().cloned().collect(),
            sandbox: m.sandbox,
            mode: m.permissions,
            skills: m.skills.iter().cloned().collect(),
            ..Requested::empty(PluginKind::Agent)
        }
    }

    fn empty(kind: PluginKind) -> Requested {
        Requested {
            kind: kind_name(kind).to_string(),
            capabilities: BTreeSet::new(),
            fetch_hosts: BTreeSet::new(),
            hosts: BTreeSet::new(),
            mcp_servers: BTreeSet::new(),
            mcp_allow: BTreeSet::new(),
            sandbox: None,
            mode: None,
            skills: BTreeSet::new(),
            allowed_tools: BTreeSet::new(),
        }
    }

    /// How `self` differs from the `accepted` authority: what it asks for
    /// beyond it, and what it no longer asks for.
    pub fn diff(&self, accepted: &Requested) -> Diff {
        let mut diff = Diff::default();
        if self.kind != accepted.kind {
            diff.wider.push(Ask::Kind { now: self.kind.clone(), was: accepted.kind.clone() });
        }
        let caps = |c: &BTreeSet<Capability>, o: &BTreeSet<Capability>| {
            c.difference(o).map(|c| Ask::Capability(*c)).collect::<Vec<_>>()
        };
        diff.wider.extend(caps(&self.capabilities, &accepted.capabilities));
        diff.narrower.extend(caps(&accepted.capabilities, &self.capabilities));
        let uncovered = |c: &BTreeSet<String>, o: &BTreeSet<String>| {
            c.iter().filter(|h| !covered(h, o)).cloned().collect::<Vec<_>>()
        };
        diff.wider.extend(uncovered(&self.fetch_hosts, &accepted.fetch_hosts).into_iter().map(Ask::FetchHost));
        diff.narrower.extend(uncovered(&accepted.fetch_hosts, &self.fetch_hosts).into_iter().map(Ask::FetchHost));
        diff.wider.extend(uncovered(&self.hosts, &accepted.hosts).into_iter().map(Ask::Host));
        diff.narrower.extend(uncovered(&accepted.hosts, &self.hosts).into_iter().map(Ask::Host));
        let names = |c: &BTreeSet<String>, o: &BTreeSet<String>, ask: fn(String) -> Ask| {
            c.difference(o).cloned().map(ask).collect::<Vec<_>>()
        };
        for (now, was, ask) in [
            (&self.mcp_servers, &accepted.mcp_servers, Ask::McpServer as fn(String) -> Ask),
            (&self.mcp_allow, &accepted.mcp_allow, Ask::McpTool),
            (&self.skills, &accepted.skills, Ask::Skill),
            (&self.allowed_tools, &accepted.allowed_tools, Ask::AllowedTool),
        ] {
            diff.wider.extend(names(now, was, ask));
            diff.narrower.extend(names(was, now, ask));
        }
        if self.sandbox != accepted.sandbox {
            let change = Ask::Sandbox { now: self.sandbox, was: accepted.sandbox };
            if sandbox_rank(self.sandbox) >= sandbox_rank(accepted.sandbox) {
                diff.wider.push(change);
            } else {
                diff.narrower.push(change);
            }
        }
        if self.mode != accepted.mode {
            let change = Ask::Mode { now: self.mode, was: accepted.mode };
            if mode_rank(self.mode) > mode_rank(accepted.mode) {
                diff.wider.push(change);
            } else {
                diff.narrower.push(change);
            }
        }
        diff
    }
}

/// One thing a version asks for that another does not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "ask")]
pub enum Ask {
    /// A different world altogether.
    Kind {
        /// The new version's kind.
        now: String,
        /// The accepted version's kind.
        was: String,
    },
    /// A capability.
    Capability(Capability),
    /// A host for `fetch`.
    FetchHost(String),
    /// A host a search backend or sandbox provider reaches.
    Host(String),
    /// An MCP server.
    McpServer(String),
    /// An MCP tool called without anyone being asked.
    McpTool(String),
    /// A skill.
    Skill(String),
    /// A tool a skill lists as allowed.
    AllowedTool(String),
    /// A different sandbox.
    Sandbox {
        /// The new version's request (none: the operator's choice).
        now: Option<SandboxKind>,
        /// The accepted version's.
        was: Option<SandboxKind>,
    },
    /// A different declared permission mode (none: no narrowing).
    Mode {
        /// The new version's.
        now: Option<PermissionMode>,
        /// The accepted version's.
        was: Option<PermissionMode>,
    },
}

impl fmt::Display for Ask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sandbox = |s: &Option<SandboxKind>| s.map_or("the operator's choice", SandboxKind::as_str);
        let mode = |m: &Option<PermissionMode>| m.map_or("none", PermissionMode::as_str);
        match self {
            Ask::Kind { now, was } => write!(f, "kind `{now}` (was `{was}`)"),
            Ask::Capability(c) => write!(f, "capability `{}`", c.as_str()),
            Ask::FetchHost(h) => write!(f, "fetch host `{h}`"),
            Ask::Host(h) => write!(f, "outbound host `{h}`"),
            Ask::McpServer(s) => write!(f, "MCP server `{s}`"),
            Ask::McpTool(t) => write!(f, "MCP tool `{t}` without asking"),
            Ask::Skill(s) => write!(f, "skill `{s}`"),
            Ask::AllowedTool(t) => write!(f, "allowed tool `{t}`"),
            Ask::Sandbox { now, was } => write!(f, "sandbox `{}` (was `{}`)", sandbox(now), sandbox(was)),
            Ask::Mode { now, was } => write!(f, "declared mode `{}` (was `{}`)", mode(now), mode(was)),
        }
    }
}

/// How a new version's authority differs from the accepted one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Diff {
    /// What it asks for beyond the accepted authority.
    pub wider: Vec<Ask>,
    /// What the accepted version asked for and it no longer does.
    pub narrower: Vec<Ask>,
}

impl Diff {
    /// Whether the two ask for the same.
    pub fn is_empty(&self) -> bool {
        self.wider.is_empty() && self.narrower.is_empty()
    }
}

/// Names a list of asks: "capability `shell`, MCP server `github`".
pub fn list(asks: &[Ask]) -> String {
    asks.iter().map(Ask::to_string).collect::<Vec<_>>().join(", ")
}

fn kind_name(kind: PluginKind) -> &'static str {
    match kind {
        PluginKind::Agent => "agent",
        PluginKind::Skill => "skill",
        PluginKind::SearchBackend => "search-backend",
        PluginKind::SandboxProvider => "sandbox-provider",
        PluginKind::Hook => "hook",
    }
}

/// Host entries as the egress allow-list reads them: lowercase, no
/// trailing dot.
fn hosts(entries: &[String]) -> BTreeSet<String> {
    entries.iter().map(|h| h.trim().trim_end_matches('.').to_ascii_lowercase()).collect()
}

/// Whether `host` is within `accepted`: an entry covers its name and its
/// subdomains by whole labels, as the egress allow-list does.
fn covered(host: &str, accepted: &BTreeSet<String>) -> bool {
    accepted.iter().any(|a| host == a || host.strip_suffix(a.as_str()).is_some_and(|rest| rest.ends_with('.')))
}

/// How much a sandbox request reaches: the operator's working directory
/// most, a container or a remote service less, virtual least. Asking for
/// none leaves the operator's choice, which may be the working directory
/// (a tenant policy's first sandbox can be `local`): ranked with it.
fn sandbox_rank(kind: Option<SandboxKind>) -> u8 {
    match kind {
        Some(SandboxKind::Virtual) => 0,
        Some(SandboxKind::Container | SandboxKind::Remote) => 1,
        None | Some(SandboxKind::Local) => 2,
    }
}

/// How little a declared mode narrows: a plugin that declares none leaves
/// the operator's mode as it is, the most it can get.
fn mode_rank(mode: Option<PermissionMode>) -> u8 {
    match mode {
        Some(PermissionMode::ReadOnly) => 0,
        Some(PermissionMode::Approve) => 1,
        Some(PermissionMode::Ask) => 2,
        Some(PermissionMode::Auto) | None => 3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(toml: &str) -> Requested {
        let m: AgentManifest = toml::from_str(toml).unwrap_or_else(|e| panic!("{e}"));
        Requested::of_agent(&m)
    }

    fn wider(new: &str, old: &str) -> Vec<String> {
        agent(new).diff(&agent(old)).wider.iter().map(Ask::to_string).collect()
    }

    #[test]
    fn each_kind_of_new_ask_is_named() {
        let base = "capabilities = [\"read\"]";
        let cases = [
            ("capabilities = [\"read\", \"shell\"]", "capability `shell`"),
            ("fetch-allow = [\"api.example.com\"]", "fetch host `api.example.com`"),
            ("mcp-servers = [\"github\"]", "MCP server `github`"),
            ("mcp-allow = [\"github/create_issue\"]", "MCP tool `github/create_issue` without asking"),
            ("skills = [\"code-review\"]", "skill `code-review`"),
            ("sandbox = \"local\"", "sandbox `local` (was `the operator's choice`)"),
        ];
        for (extra, named) in cases {
            let new = if extra.starts_with("capabilities") { extra.to_string() } else { format!("{base}\n{extra}") };
            assert_eq!(wider(&new, base), [named], "{extra}");
        }
        // Dropping a declared mode lets the operator's wider mode through.
        assert_eq!(wider("permissions = \"auto\"", "permissions = \"ask\""), ["declared mode `auto` (was `ask`)"]);
        assert_eq!(wider("", "permissions = \"read-only\""), ["declared mode `none` (was `read-only`)"]);
        assert_eq!(wider("sandbox = \"local\"", "sandbox = \"container\""), ["sandbox `local` (was `container`)"]);
        // Asking for no sandbox leaves the operator's choice, which may be `local`.
        assert_eq!(wider("", "sandbox = \"container\""), ["sandbox `the operator's choice` (was `container`)"]);
        assert!(wider("sandbox = \"virtual\"", "").is_empty(), "virtual is the least reach");
        let backend = |hosts: &[&str]| {
            Requested::of(&Description::SearchBackend(crate::manifest::BackendInfo {
                name: "b".into(),
                description: String::new(),
                hosts: hosts.iter().map(|h| h.to_string()).collect(),
            }))
        };
        let d = backend(&["api.search.example", "evil.example"]).diff(&backend(&["API.Search.Example."]));
        assert_eq!(list(&d.wider), "outbound host `evil.example`");
        assert_eq!(list(&agent("").diff(&backend(&[])).wider), "kind `agent` (was `search-backend`)");
    }

    #[test]
    fn narrower_or_equal_asks_nothing_new() {
        let old = "capabilities = [\"read\", \"shell\"]\nfetch-allow = [\"example.com\"]\nmcp-servers = [\"github\"]\n\
                   sandbox = \"local\"\nskills = [\"a\"]";
        assert!(agent(old).diff(&agent(old)).is_empty());
        // A subdomain is within its accepted parent; a stricter mode and a less reaching sandbox narrow.
        let new = "capabilities = [\"read\"]\nfetch-allow = [\"api.example.com\"]\nsandbox = \"container\"\n\
                   permissions = \"ask\"";
        let d = agent(new).diff(&agent(old));
        assert_eq!(d.wider, [], "{d:?}");
        assert_eq!(
            list(&d.narrower),
            "capability `shell`, fetch host `example.com`, MCP server `github`, skill `a`, \
             sandbox `container` (was `local`), declared mode `ask` (was `none`)"
        );
        // Only whole labels: `notexample.com` is not within `example.com`.
        assert_eq!(wider("fetch-allow = [\"notexample.com\"]", "fetch-allow = [\"example.com\"]").len(), 1);
    }

    #[test]
    fn the_value_round_trips_through_its_file_form() {
        let r = agent("capabilities = [\"shell\", \"read\"]\nfetch-allow = [\"b.example\", \"a.example\"]");
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(text, r#"{"kind":"agent","capabilities":["read","shell"],"fetch-hosts":["a.example","b.example"]}"#);
        assert_eq!(serde_json::from_str::<Requested>(&text).unwrap(), r);
    }
}
