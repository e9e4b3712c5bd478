//! Rules for what plugins say about themselves.

use std::path::Path;

use crate::error::LoadError;
use crate::manifest::{Description, PluginKind};

/// Longest description accepted, in characters (as for Agent Skills).
pub const MAX_DESCRIPTION_CHARS: usize = 1024;

/// How many characters of a value an error quotes: a component chooses its
/// manifest's values, so a message must not grow with them.
const QUOTE_CHARS: usize = 120;

/// A value as an error quotes it: its head, in quotes, escapes shown.
fn quoted(value: &str) -> String {
    format!("{:?}", nexo_text::head_chars(value, QUOTE_CHARS))
}

/// A field of a self-description that breaks a rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct Problem {
    /// The field, as the manifest spells it.
    pub field: &'static str,
    /// The rule it breaks, with the value.
    pub problem: String,
}

/// Checks a plugin name: 1–64 characters of lowercase letters, digits and
/// hyphens, with no leading, trailing or doubled hyphen. The error is the
/// rule the name breaks, quoting it.
pub fn name(value: &str) -> Result<(), Problem> {
    name_rule(value).map_err(|problem| Problem { field: "name", problem })
}

fn name_rule(value: &str) -> Result<(), String> {
    if value.is_empty() || value.chars().count() > 64 {
        return Err(format!("{} must be 1 to 64 characters long", quoted(value)));
    }
    if !value.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') {
        return Err(format!("{} may contain only lowercase letters, digits and hyphens", quoted(value)));
    }
    if value.starts_with('-') || value.ends_with('-') || value.contains("--") {
        return Err(format!("{} must not start or end with a hyphen or contain two in a row", quoted(value)));
    }
    Ok(())
}

fn description_text(value: &str) -> Result<(), String> {
    let n = value.trim().chars().count();
    if n == 0 || n > MAX_DESCRIPTION_CHARS {
        return Err(format!("must be 1 to {MAX_DESCRIPTION_CHARS} characters long (it has {n})"));
    }
    Ok(())
}

/// Checks an agent manifest, returning the field and the rule it breaks.
pub fn agent_manifest(m: &crate::manifest::AgentManifest) -> Result<(), Problem> {
    name(&m.name)?;
    description_text(&m.description).map_err(|problem| Problem { field: "description", problem })?;
    agent_rules(m).map_err(|(field, problem)| Problem { field, problem })
}

fn agent_rules(m: &crate::manifest::AgentManifest) -> Result<(), (&'static str, String)> {
    if m.max_turns == Some(0) {
        return Err(("max-turns", "must be at least 1 when set".into()));
    }
    let hosts = nexo_egress::HostList::new(&m.fetch_allow).map_err(|e| ("fetch-allow", e.to_string()))?;
    // An entry covers its subdomains, so a lone label such as `com` would open
    // a whole top-level domain. `localhost` may be listed: the address guard
    // refuses it anyway. Entries are normalized here (no brackets or trailing dot).
    for host in hosts.entries() {
        if !host.contains(['.', ':']) && host != "localhost" {
            return Err((
                "fetch-allow",
                format!(
                    "{} is a single label, which would cover a whole top-level domain; list `example.{}`-style names",
                    quoted(host),
                    nexo_text::head_chars(host, QUOTE_CHARS)
                ),
            ));
        }
    }
    for server in &m.mcp_servers {
        mcp_server_name(server).map_err(|p| ("mcp-servers", p))?;
    }
    for entry in &m.mcp_allow {
        mcp_allow_entry(entry).map_err(|p| ("mcp-allow", p))?;
    }
    let mut seen = std::collections::BTreeSet::new();
    for name in &m.agents {
        crate::children::check_tool_agent_name(name).map_err(|p| ("agents", p))?;
        if !seen.insert(name.as_str()) {
            return Err(("agents", format!("`{name}` is listed twice; list each agent once")));
        }
    }
    Ok(())
}

/// An MCP server's name as the operator configures it (the rule of
/// [`nexo_mcp::is_server_name`]).
pub fn mcp_server_name(value: &str) -> Result<(), String> {
    if nexo_mcp::is_server_name(value) {
        Ok(())
    } else {
        Err(format!("{} is not an MCP server name: use 1 to 32 lowercase letters, digits and hyphens", quoted(value)))
    }
}

/// An `mcp-allow` entry: an exact tool name, or `server/tool`. Patterns are
/// refused outright, so an author who expects a glob learns it does nothing.
pub fn mcp_allow_entry(value: &str) -> Result<(), String> {
    let (server, tool) = match value.split_once('/') {
        Some((server, tool)) => (Some(server), tool),
        None => (None, value),
    };
    if let Some(server) = server {
        mcp_server_name(server)?;
    }
    let ok = !tool.is_empty()
        && tool.len() <= 128
        && tool.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{} is not an exact MCP tool name: write `tool` or `server/tool` (letters, digits, `_`, `-`, `.`); \
             patterns such as `*` are not supported",
            quoted(value)
        ))
    }
}

pub(super) fn description(path: &Path, kind: PluginKind, d: &Description) -> Result<(), LoadError> {
    let bad = |field: &'static str, problem: String| LoadError::BadManifest {
        path: path.to_path_buf(),
        kind,
        field,
        problem,
    };
    let (n, desc) = match d {
        Description::Agent(m) => (&m.name, &m.description),
        Description::Skill(s) => (&s.metadata.name, &s.metadata.description),
        Description::SearchBackend(i) => (&i.name, &i.description),
        Description::SandboxProvider(i) => (&i.name, &i.description),
        Description::Hook(i) => (&i.name, &i.description),
    };
    name_rule(n).map_err(|p| bad("name", p))?;
    description_text(desc).map_err(|p| bad("description", p))?;
    match d {
        Description::Agent(m) => agent_rules(m).map_err(|(field, problem)| bad(field, problem))?,
        Description::Skill(s) => {
            for r in &s.resources {
                if r.starts_with('/') || r.split('/').any(|seg| seg == ".." || seg.is_empty()) {
                    return Err(bad("resources", format!("{} must be a relative path without `..`", quoted(r))));
                }
            }
        }
        Description::SearchBackend(_) => {}
        Description::Hook(i) => {
            if i.events.is_empty() {
                return Err(bad(
                    "events",
                    "a hook must name at least one moment it wants to be asked about (before-tool-call, \
                     after-tool-call, before-prompt)"
                        .to_string(),
                ));
            }
        }
        Description::SandboxProvider(i) => {
            if !i.workdir.starts_with('/') {
                return Err(bad("workdir", format!("{} must be an absolute path", quoted(&i.workdir))));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::name;

    #[test]
    fn names_follow_the_skill_rules() {
        for ok in ["a", "hello", "code-review", "x1-y2", &"a".repeat(64)] {
            assert!(name(ok).is_ok(), "{ok} should pass");
        }
        for bad in ["", "Hello", "-a", "a-", "a--b", "a b", "a_b", "é", &"a".repeat(65)] {
            assert!(name(bad).is_err(), "{bad} should fail");
        }
    }
}

#[cfg(test)]
mod fetch_allow_tests {
    use super::*;
    use crate::manifest::AgentManifest;

    fn with_hosts(hosts: &[&str]) -> Result<(), Problem> {
        let m = AgentManifest {
            name: "a".into(),
            description: "d".into(),
            fetch_allow: hosts.iter().map(|h| h.to_string()).collect(),
            ..AgentManifest::default()
        };
        agent_manifest(&m)
    }

    #[test]
    fn fetch_allow_takes_bare_hosts_only() {
        for ok in [&["example.com", "news.example.org."][..], &["localhost", "127.0.0.1", "[::1]"]] {
            assert!(with_hosts(ok).is_ok(), "{ok:?}");
        }
        for bad in ["https://example.com", "example.com:443", "*.example.com", "example.com/path", "", "com", "org."] {
            let Problem { field, problem } = with_hosts(&[bad]).unwrap_err();
            assert_eq!(field, "fetch-allow", "{bad}");
            assert!(!problem.is_empty());
        }
    }

    #[test]
    fn errors_quote_only_the_head_of_a_long_value() {
        let label = "a".repeat(5000);
        let Problem { problem, .. } = with_hosts(&[label.as_str()]).unwrap_err();
        assert!(problem.contains("single label") && problem.len() < 600, "{} bytes: {problem}", problem.len());
        let Problem { problem, .. } = name(&"A".repeat(5000)).unwrap_err();
        assert!(problem.contains('…') && problem.len() < 300, "{problem}");
    }
}

#[cfg(test)]
mod agents_tests {
    use super::*;
    use crate::manifest::AgentManifest;

    fn with_agents(agents: &[&str]) -> Result<(), Problem> {
        let agents = agents.iter().map(|a| a.to_string()).collect();
        agent_manifest(&AgentManifest { name: "a".into(), description: "d".into(), agents, ..AgentManifest::default() })
    }

    #[test]
    fn agents_asked_for_as_tools_are_names_that_fit_a_tool_name_each_listed_once() {
        let longest = "w".repeat(crate::children::MAX_TOOL_AGENT_NAME);
        assert!(with_agents(&["writer", "re_view-2", &longest]).is_ok());
        let too_long = format!("{longest}w");
        for (bad, why) in [
            (vec!["writer", "writer"], "listed twice"),
            (vec!["no spaces"], "letters, digits"),
            (vec![""], "letters, digits"),
            (vec![too_long.as_str()], "`agent__NAME` fits"),
        ] {
            let Problem { field, problem } = with_agents(&bad).unwrap_err();
            assert_eq!(field, "agents", "{bad:?}");
            assert!(problem.contains(why), "{bad:?}: {problem}");
        }
    }
}
