//! Agent manifests: declarative TOML agent files (`host/src/agent_file.rs`)
//! and the manifests components return, as the host validates them
//! (`host/src/plugin/validate.rs`).

use nexo::agent_file::AgentFile;
use nexo::manifest::{AgentManifest, Capability};
use nexo::plugin::validate;

use crate::{assert_short_error, is_plugin_name};

/// Parses arbitrary text as a TOML agent file. An accepted file holds a
/// manifest that passes every rule, and its own TOML serialization loads
/// back to the same manifest; a refusal is a short message.
pub fn agent_toml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match AgentFile::parse(text, "fuzz/agent.toml") {
        Ok(file) => {
            check_rules(file.manifest());
            let Ok(again) = toml::to_string(file.manifest()) else {
                panic!("an accepted manifest does not serialize: {:?}", file.manifest())
            };
            match AgentFile::parse(&again, "fuzz/again.toml") {
                Ok(back) => assert_eq!(back.manifest(), file.manifest(), "the manifest changed on a round trip"),
                Err(e) => panic!("an accepted manifest does not load back from {again:?}: {e}"),
            }
        }
        Err(e) => assert_short_error("agent file", &e),
    }
}

/// Builds a manifest as a component could return it, one field per line of
/// the input (a tag byte, then the value), and validates it. The host
/// accepts exactly the manifests that keep the rules, and the same
/// manifest gets the same verdict as a TOML agent file.
pub fn agent_manifest(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let mut m = AgentManifest {
        name: lines.next().unwrap_or_default().to_string(),
        description: lines.next().unwrap_or_default().to_string(),
        ..AgentManifest::default()
    };
    for line in lines {
        let mut chars = line.chars();
        let tag = chars.next();
        let value = chars.as_str().to_string();
        match tag {
            Some('f') => m.fetch_allow.push(value),
            Some('m') => m.mcp_servers.push(value),
            Some('a') => m.mcp_allow.push(value),
            Some('s') => m.skills.push(value),
            Some('i') => m.instructions.push_str(&value),
            Some('t') => m.max_turns = value.parse().ok(),
            Some('c') => m.capabilities.extend(value.parse::<usize>().ok().and_then(capability)),
            Some('p') => m.provider = Some(value),
            _ => {}
        }
    }
    let verdict = validate::agent_manifest(&m);
    match &verdict {
        Ok(()) => check_rules(&m),
        Err(e) => assert_short_error("manifest", e),
    }
    // TOML agent files and component manifests pass the same rules.
    if let Ok(text) = toml::to_string(&m) {
        let file = AgentFile::parse(&text, "fuzz/agent.toml");
        assert_eq!(file.is_ok(), verdict.is_ok(), "a component manifest and its agent file differ: {verdict:?}");
    }
}

fn capability(i: usize) -> Option<Capability> {
    Capability::ALL.get(i % 8).copied()
}

/// The rules, written again without the host's code.
fn check_rules(m: &AgentManifest) {
    assert!(is_plugin_name(&m.name, 64), "accepted the name {:?}", m.name);
    let n = m.description.trim().chars().count();
    assert!((1..=1024).contains(&n), "accepted a description of {n} characters");
    assert_ne!(m.max_turns, Some(0), "accepted max-turns = 0");
    for host in &m.fetch_allow {
        let Ok(list) = nexo_egress::HostList::new([host]) else { panic!("accepted the fetch-allow entry {host:?}") };
        for entry in list.entries() {
            assert!(entry.contains(['.', ':']) || entry == "localhost", "accepted the single label {entry:?}");
        }
    }
    let server_name = |s: &str| {
        (1..=32).contains(&s.len()) && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    for server in &m.mcp_servers {
        assert!(server_name(server), "accepted the MCP server name {server:?}");
    }
    for entry in &m.mcp_allow {
        let (server, tool) = entry.split_once('/').map_or((None, entry.as_str()), |(s, t)| (Some(s), t));
        assert!(server.is_none_or(server_name), "accepted the mcp-allow entry {entry:?}");
        let tool_ok = (1..=128).contains(&tool.len())
            && tool.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        assert!(tool_ok, "accepted the mcp-allow entry {entry:?}");
    }
}
