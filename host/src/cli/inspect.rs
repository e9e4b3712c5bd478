//! `nexo inspect`: text and JSON descriptions of a plugin.

use std::collections::BTreeSet;

use nexo::Plugin;
use nexo::agent_file::AgentFile;
use nexo::authority::{Authority, Permissions};
use nexo::grant::Grant;
use nexo::manifest::{AgentManifest, Capability, PermissionMode, SandboxKind};
use nexo::plugin::Description;

use nexo::config::SearchSetup;

/// Prints the description of `plugin` to stdout, with what the operator's
/// flags would grant it (and, for a search backend, the network grant of
/// `[search]`).
pub fn print(
    plugin: &Plugin,
    origin: Option<&nexo::runs::Origin>,
    grant: &Grant,
    search: Option<&SearchSetup>,
    json: bool,
) {
    let view = authority(grant, plugin.manifest(), search);
    if json {
        let mut value = serde_json::json!({
            "path": plugin.path(),
            "kind": plugin.kind(),
            "world": plugin.kind().world(),
            "export": plugin.export(),
            "name": plugin.name(),
            "description": plugin.description(),
            "imports": plugin.imports(),
            "exports": plugin.exports(),
            "size": plugin.size(),
            "sha256": plugin.sha256(),
            "cache": plugin.cache_outcome(),
            "origin": origin,
            "search": search.map(|s| serde_json::json!({
                "backend": s.backend,
                "granted-hosts": s.grant.hosts,
                "allow-private": s.grant.allow_private,
                "settings": s.grant.settings,
                "api-key": s.key_source,
                "api-key-origins": s.key_origins,
            })),
        });
        authority_json(&mut value, grant, plugin.manifest(), &view);
        print_json_pretty(&value);
        return;
    }
    outln!("{}  ({}, {})", plugin.name(), plugin.kind(), plugin.export());
    row("file", &format!("{} ({} bytes, sha256 {})", plugin.path().display(), plugin.size(), &plugin.sha256()[..16]));
    if let Some(origin) = origin {
        row("from", &origin.reference);
        row("signature", &origin.signature.to_string());
    }
    match plugin.description() {
        Description::Agent(m) => agent_rows(m, grant, search),
        Description::Skill(s) => {
            row("description", &s.metadata.description);
            if let Some(l) = &s.metadata.license {
                row("license", l);
            }
            if let Some(c) = &s.metadata.compatibility {
                row("compatibility", c);
            }
            row("allowed tools", &list(s.metadata.allowed_tools.iter().map(String::as_str)));
            row("resources", &list(s.resources.iter().map(String::as_str)));
            row("requested", "(none: skills hold no capabilities)");
        }
        Description::SearchBackend(i) => {
            row("description", &i.description);
            let requested = if i.hosts.is_empty() {
                "outbound HTTP (it names no hosts: its settings say where)".to_string()
            } else {
                format!("outbound HTTP to {}", list(i.hosts.iter().map(String::as_str)))
            };
            row("requested", &requested);
            let same =
                |s: &&SearchSetup| std::fs::canonicalize(&s.backend).ok() == std::fs::canonicalize(plugin.path()).ok();
            match search.filter(same) {
                Some(s) => {
                    row("granted", &list(s.grant.hosts.iter().map(String::as_str)));
                    if !s.grant.allow_private.is_empty() {
                        let addrs: Vec<String> = s.grant.allow_private.iter().map(|a| a.to_string()).collect();
                        row("private ok", &list(addrs.iter().map(String::as_str)));
                    }
                    row("api key", s.key_source.as_deref().unwrap_or("(none)"));
                }
                None => row("granted", "(none: every request is refused; grant hosts in [search])"),
            }
        }
        Description::SandboxProvider(i) => {
            row("description", &i.description);
            row("workdir", &i.workdir);
            row("hosts", &list(i.hosts.iter().map(String::as_str)));
            row("requested", "outbound HTTP to its granted hosts only");
        }
        Description::Hook(i) => {
            row("description", &i.description);
            row("asked", &list(i.events.iter().map(|e| e.as_str())));
            row("requested", "(none: hooks hold no capabilities, and can only narrow)");
        }
    }
    let mut imports = plugin.imports().iter();
    row("imports", imports.next().map(String::as_str).unwrap_or("(none)"));
    for i in imports {
        row("", i);
    }
}

/// What the operator grants, and what the agent then gets under this
/// configuration (a search backend set up or not).
struct View {
    granted: Grant,
    /// The capabilities whose tools are offered: the gate's own decision.
    effective: BTreeSet<Capability>,
    /// Requested and granted, but not offered: the gate's refusal of each.
    withheld: Vec<(Capability, String)>,
    /// The stricter of the operator's mode and the agent's own.
    mode: PermissionMode,
}

fn authority(grant: &Grant, manifest: Option<&AgentManifest>, search: Option<&SearchSetup>) -> View {
    // The same computation a run makes: one authority, asked the same questions.
    let none = AgentManifest::default();
    let authority = nexo::world::agent::authority(
        manifest.unwrap_or(&none),
        grant,
        &Permissions::new(grant.mode),
        nexo::world::agent::Serving::of(grant, search.is_some()),
    );
    View {
        granted: grant.clone(),
        effective: authority.offered().into_iter().collect(),
        withheld: authority.withheld().into_iter().map(|(cap, e)| (cap, e.text())).collect(),
        mode: authority.mode(),
    }
}

/// An agent's MCP servers: requested, configured (with how each is
/// reached; never a token), effective; and its own allow list.
struct McpView {
    requested: Vec<String>,
    configured: Vec<(String, String)>,
    effective: Vec<String>,
    allow: Vec<String>,
}

fn mcp_view(grant: &Grant, m: &AgentManifest) -> McpView {
    let authority = Authority::new(m, grant, &Permissions::new(grant.mode));
    McpView {
        requested: m.mcp_servers.clone(),
        configured: grant.mcp.summary(),
        effective: authority.mcp_effective().to_vec(),
        allow: m.mcp_allow.clone(),
    }
}

/// Adds what was requested, granted and in force to a JSON description.
fn authority_json(value: &mut serde_json::Value, grant: &Grant, manifest: Option<&AgentManifest>, view: &View) {
    let View { granted, effective, withheld, mode } = view;
    let none = AgentManifest::default();
    let manifest = manifest.unwrap_or(&none);
    let requested = &manifest.capabilities;
    let mcp = mcp_view(grant, manifest);
    let fields = serde_json::json!({
        "requested": requested,
        "granted": granted.capabilities,
        "effective": effective,
        "withheld": withheld.iter().map(|(cap, why)| serde_json::json!({"capability": cap, "why": why})).collect::<Vec<_>>(),
        "mode": mode.as_str(),
        "sandbox": grant.sandbox.kind.as_str(),
        "shell": grant.sandbox.shell_summary(effective.contains(&Capability::Shell)),
        "fetch-hosts": granted.fetch_hosts,
        "net-hosts": granted.net_hosts,
        "shell-network": grant.shell_network_summary(),
        "command-rules": granted.commands.layers().iter().map(|l| l.iter().map(|r| r.to_string()).collect::<Vec<_>>()).collect::<Vec<_>>(),
        "data-flow": granted.data_flow,
        "mcp": {
            "requested": mcp.requested,
            "configured": mcp.configured.iter().map(|(name, how)| serde_json::json!({"name": name, "server": how})).collect::<Vec<_>>(),
            "effective": mcp.effective,
            "allow": mcp.allow,
            "operator-allow": granted.mcp.allow.as_ref().map(|a| a.entries().to_vec()),
        },
    });
    if let (Some(out), serde_json::Value::Object(fields)) = (value.as_object_mut(), fields) {
        out.extend(fields);
    }
}

/// The rows that describe an agent, from a component or a TOML file alike.
fn agent_rows(m: &AgentManifest, grant: &Grant, search: Option<&SearchSetup>) {
    let View { granted, effective, withheld, mode } = authority(grant, Some(m), search);
    row("description", &m.description);
    row("instructions", &first_line(&m.instructions));
    row(
        "model",
        &match &m.model {
            Some(id) => format!("{id} (a hint: the default when the operator sets no model, if its key is set)"),
            None => "(the operator's choice)".into(),
        },
    );
    if let Some(p) = &m.provider {
        row("provider", p);
    }
    row("requested", &list(m.capabilities.iter().map(|c| c.as_str())));
    row("granted", &list(granted.capabilities.iter().map(|c| c.as_str())));
    row(
        "effective",
        &format!(
            "{} (mode {}, {} sandbox)",
            list(effective.iter().map(|c| c.as_str())),
            mode.as_str(),
            grant.sandbox.kind.as_str()
        ),
    );
    for (i, (cap, why)) in withheld.iter().enumerate() {
        row(if i == 0 { "withheld" } else { "" }, &format!("{}: {why}", cap.as_str()));
    }
    row("fetch allow", &list(m.fetch_allow.iter().map(String::as_str)));
    if let Some(hosts) = &granted.fetch_hosts {
        row("fetch within", &format!("{} (the operator's limit)", list(hosts.iter().map(String::as_str))));
    }
    row(
        "web search",
        &match search {
            Some(s) => format!("through {}", s.backend.display()),
            None => "(no backend configured: no web_search tool)".into(),
        },
    );
    row("skills", &list(m.skills.iter().map(String::as_str)));
    let mcp = mcp_view(grant, m);
    row("mcp requested", &list(m.mcp_servers.iter().map(String::as_str)));
    let configured: Vec<String> = mcp.configured.iter().map(|(name, how)| format!("{name} ({how})")).collect();
    row("mcp configured", &list(configured.iter().map(String::as_str)));
    row("mcp effective", &list(mcp.effective.iter().map(String::as_str)));
    row(
        "mcp allow",
        &match (&m.mcp_allow[..], &granted.mcp.allow) {
            ([], _) if mode != PermissionMode::Auto => {
                "(none: every MCP tool call is asked about, suspended or denied)".into()
            }
            (own, None) => list(own.iter().map(String::as_str)),
            (own, Some(op)) => format!(
                "{} (narrowed by the operator's {})",
                list(own.iter().map(String::as_str)),
                list(op.entries().iter().map(String::as_str))
            ),
        },
    );
    row(
        "agents",
        &match &m.agents[..] {
            [] => "(none)".into(),
            names => format!(
                "{} (a request: each one the operator makes available is offered as `agent__NAME`)",
                list(names.iter().map(String::as_str))
            ),
        },
    );
    row("max turns", &m.max_turns.map(|t| t.to_string()).unwrap_or_else(|| "(the host's default)".into()));
    row(
        "sandbox",
        &match m.sandbox {
            Some(SandboxKind::Virtual) => "virtual (a request: it runs in no less isolated sandbox)".into(),
            Some(kind) => format!(
                "{} (a request: only --sandbox {} grants it; without --sandbox the run is refused)",
                kind.as_str(),
                kind.as_str()
            ),
            None => "(the operator's choice; default virtual)".into(),
        },
    );
    row(
        "permissions",
        m.permissions.map(PermissionMode::as_str).unwrap_or("(the operator's choice; default read-only)"),
    );
    row("shell", &grant.sandbox.shell_summary(effective.contains(&Capability::Shell)));
    // Only where commands could have network: the local sandbox, or a grant of hosts.
    if grant.sandbox.kind == SandboxKind::Local || !grant.net_hosts.is_empty() {
        row("shell network", &grant.shell_network_summary());
    }
    command_rule_rows(&granted.commands, effective.contains(&Capability::Shell));
    row("data flow", &data_flow_summary(&granted.data_flow));
}

/// The data-flow guard in one line: what a send meets after untrusted
/// content, and after private content too.
fn data_flow_summary(flow: &nexo::grant::DataFlow) -> String {
    let private = match &flow.private_paths {
        None => "the workspace".to_string(),
        Some(paths) if paths.is_empty() => "nothing in the workspace".to_string(),
        Some(paths) => paths.join(", "),
    };
    format!(
        "a send after untrusted content: {}; after private content ({private}) too: {}",
        flow.action(false).as_str(),
        flow.action(true).as_str()
    )
}

/// One row per command rule, in order (`nexo policy check` judges a
/// command); none when there are none and no shell to judge.
fn command_rule_rows(rules: &nexo::grant::CommandRules, shell: bool) {
    if rules.is_empty() {
        if shell {
            row("command rules", "(none: the mode decides each command)");
        }
        return;
    }
    let mut first = true;
    for (i, layer) in rules.layers().iter().enumerate() {
        for rule in layer {
            let label = if first { "command rules" } else { "" };
            let reason = rule.reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default();
            let party = if rules.layers().len() > 1 { format!("[{}] ", i + 1) } else { String::new() };
            row(label, &format!("{party}{rule}{reason}"));
            first = false;
        }
    }
}

/// Prints the description of a declarative (TOML) agent.
pub fn print_agent_file(agent: &AgentFile, grant: &Grant, search: Option<&SearchSetup>, json: bool) {
    let m = agent.manifest();
    let view = authority(grant, Some(m), search);
    if json {
        let mut value = serde_json::json!({
            "path": agent.path(),
            "kind": "agent",
            "format": "toml",
            "name": m.name,
            "description": m,
            "search": search.map(|s| s.backend.clone()),
        });
        authority_json(&mut value, grant, Some(m), &view);
        print_json_pretty(&value);
        return;
    }
    outln!("{}  (agent, declarative TOML: run by the host loop, no component)", m.name);
    row("file", &agent.path().display().to_string());
    agent_rows(m, grant, search);
}

fn print_json_pretty(value: &serde_json::Value) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => {
            use std::io::Write as _;
            let _ = writeln!(std::io::stdout().lock(), "{}", nexo::terminal::json_safe(&text));
        }
        Err(e) => errln!("error: cannot encode the description: {e}"),
    }
}

fn row(label: &str, value: &str) {
    outln!("  {label:<14} {value}");
}

fn first_line(text: &str) -> String {
    if text.lines().next().unwrap_or("").is_empty() {
        return "(none)".into();
    }
    nexo::truncate::first_line(text, 100)
}

fn list<'a>(items: impl Iterator<Item = &'a str>) -> String {
    let items: Vec<&str> = items.collect();
    if items.is_empty() { "(none)".into() } else { items.join(", ") }
}
