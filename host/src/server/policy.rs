//! A tenant's policy: the operator's ceiling on what the tenant's runs may
//! be granted, and how a run request narrows it.
//!
//! The policy is stored as JSON on the tenant's row and written by the
//! operator (`nexo tenant policy`, or the admin API). A run request can ask
//! for less than the policy allows (fewer capabilities, a stricter mode,
//! fewer fetch hosts, one of the allowed models) and never for more: a
//! request beyond the ceiling is refused with the item that exceeds it.

use std::path::Path;

use nexo::manifest::{Capability, PermissionMode};
use serde::{Deserialize, Serialize};

use crate::cli::grant;

/// Which sandbox a tenant's run works in.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxKind {
    /// In memory: nothing of the host's file system.
    Virtual,
    /// The tenant's own workspace directory on the serving node.
    Local,
}

/// The operator's ceiling for one tenant.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Policy {
    /// Capabilities beyond `read` and `glob` (which every run has).
    #[serde(default)]
    pub allow: Vec<Capability>,
    /// The least strict permission mode a run may get. `ask` needs a
    /// terminal, so a served run uses `approve` (durable approvals) instead.
    #[serde(default = "read_only")]
    pub mode: PermissionMode,
    /// The sandboxes a run may ask for; the first is the default.
    #[serde(default = "virtual_only")]
    pub sandboxes: Vec<SandboxKind>,
    /// Hosts `fetch` may reach (the same entries as `--fetch-host`).
    #[serde(default)]
    pub fetch_hosts: Vec<String>,
    /// The operator's models (`[serve.models.NAME]`) the tenant may use;
    /// the first is the default. None: the tenant's agents cannot prompt.
    #[serde(default)]
    pub models: Vec<String>,
    /// The operator's MCP servers (`[mcp.NAME]`) the tenant's runs get.
    #[serde(default)]
    pub mcp_servers: Vec<String>,
    /// The MCP tools those servers may offer (`server/tool` names).
    #[serde(default)]
    pub mcp_allow: Vec<String>,
    /// Limits on what the tenant's runs use (`[quotas]`).
    #[serde(default)]
    pub quotas: Quotas,
}

fn read_only() -> PermissionMode {
    PermissionMode::ReadOnly
}

fn virtual_only() -> Vec<SandboxKind> {
    vec![SandboxKind::Virtual]
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            allow: Vec::new(),
            mode: read_only(),
            sandboxes: virtual_only(),
            fetch_hosts: Vec::new(),
            models: Vec::new(),
            mcp_servers: Vec::new(),
            mcp_allow: Vec::new(),
            quotas: Default::default(),
        }
    }
}

impl Policy {
    /// Parses a policy from JSON or TOML text (a file given to `nexo tenant
    /// policy`), and checks it against the operator's configuration.
    pub fn parse(text: &str, config: &nexo::config::ConfigFile) -> Result<Policy, String> {
        let policy: Policy = match serde_json::from_str(text) {
            Ok(p) => p,
            Err(json) => match toml::from_str(text) {
                Ok(p) => p,
                Err(_) if text.trim_start().starts_with('{') => return Err(format!("not a valid policy: {json}")),
                Err(toml) => return Err(format!("not a valid policy: {}", toml.message())),
            },
        };
        policy.check(config)?;
        Ok(policy)
    }

    /// Reads the policy a tenant's row holds (written by this module, so a
    /// failure means the row was edited by hand).
    pub fn from_stored(value: &serde_json::Value) -> Result<Policy, String> {
        serde_json::from_value(value.clone()).map_err(|e| {
            format!("the tenant's stored policy cannot be read ({e}); set it again with `nexo tenant policy`")
        })
    }

    /// Whether the policy names only what the operator configured.
    pub fn check(&self, config: &nexo::config::ConfigFile) -> Result<(), String> {
        if self.mode == PermissionMode::Ask {
            return Err(
                "mode `ask` needs a terminal, which a served run has not; use `approve` (durable approvals)".into()
            );
        }
        if self.sandboxes.is_empty() {
            return Err("`sandboxes` is empty: list at least `virtual`".into());
        }
        nexo_egress::HostList::new(self.fetch_hosts.iter()).map_err(|e| format!("fetch-hosts: {e}"))?;
        for model in &self.models {
            if !config.serve.models.contains_key(model) {
                return Err(format!(
                    "the model `{model}` is not one of the operator's ([serve.models.{model}] in the config file)"
                ));
            }
        }
        for server in &self.mcp_servers {
            if !config.mcp.contains_key(server) {
                return Err(format!("the MCP server `{server}` is not configured ([mcp.{server}] in the config file)"));
            }
        }
        Ok(())
    }
}

/// What a run request asks for, within the policy. Every field is
/// optional: what is left out takes the policy's value.
#[derive(Deserialize, Debug, Clone, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Narrowing {
    /// Capabilities beyond `read` and `glob`: a subset of the policy's.
    pub allow: Option<Vec<Capability>>,
    /// A mode at least as strict as the policy's.
    pub mode: Option<PermissionMode>,
    /// One of the policy's sandboxes.
    pub sandbox: Option<SandboxKind>,
    /// A subset of the policy's fetch hosts.
    pub fetch_hosts: Option<Vec<String>>,
    /// One of the policy's models.
    pub model: Option<String>,
}

/// A run's effective settings: the policy narrowed by the request.
#[derive(Debug, Clone, PartialEq)]
pub struct Effective {
    /// Capabilities beyond `read` and `glob`.
    pub allow: Vec<Capability>,
    /// The permission mode.
    pub mode: PermissionMode,
    /// The sandbox.
    pub sandbox: SandboxKind,
    /// Hosts `fetch` may reach.
    pub fetch_hosts: Vec<String>,
    /// The operator's model, by name.
    pub model: Option<String>,
}

impl Policy {
    /// The policy narrowed by `request`, or the first thing it asks for
    /// beyond the policy.
    pub fn narrow(&self, request: &Narrowing) -> Result<Effective, String> {
        let allow = match &request.allow {
            Some(asked) => {
                if let Some(c) = asked.iter().find(|c| !self.allow.contains(c) && !is_always(**c)) {
                    return Err(format!(
                        "the capability `{}` is beyond the tenant's policy (it allows: {})",
                        c.as_str(),
                        names(&self.allow)
                    ));
                }
                asked.iter().copied().filter(|c| !is_always(*c)).collect()
            }
            None => self.allow.clone(),
        };
        let mode = match request.mode {
            Some(PermissionMode::Ask) => {
                return Err("mode `ask` needs a terminal; use `approve` for durable approvals".into());
            }
            Some(asked) if nexo::authority::stricter(asked, self.mode) != asked => {
                return Err(format!(
                    "the mode `{}` is less strict than the tenant's policy allows (`{}`)",
                    asked.as_str(),
                    self.mode.as_str()
                ));
            }
            Some(asked) => asked,
            None => self.mode,
        };
        let sandbox = match request.sandbox {
            Some(s) if !self.sandboxes.contains(&s) => {
                return Err(format!("the `{}` sandbox is beyond the tenant's policy", sandbox_name(s)));
            }
            Some(s) => s,
            None => self.sandboxes[0],
        };
        let fetch_hosts = match &request.fetch_hosts {
            Some(asked) => {
                if let Some(h) = asked.iter().find(|h| !self.fetch_hosts.contains(h)) {
                    return Err(format!("the fetch host `{h}` is beyond the tenant's policy"));
                }
                asked.clone()
            }
            None => self.fetch_hosts.clone(),
        };
        let model = match &request.model {
            Some(m) if !self.models.contains(m) => {
                return Err(format!("the model `{m}` is not one the tenant may use ({})", self.models.join(", ")));
            }
            Some(m) => Some(m.clone()),
            None => self.models.first().cloned(),
        };
        Ok(Effective { allow, mode, sandbox, fetch_hosts, model })
    }
}

impl Effective {
    /// The grant a run records: the CLI's own grant type, so the worker
    /// resumes a served run exactly as it resumes any other. A local
    /// sandbox is the tenant's `workspace`, never anything else.
    pub fn grant(&self, policy: &Policy, workspace: &Path, config: &nexo::config::ConfigFile) -> grant::Resolved {
        let local = (self.sandbox == SandboxKind::Local).then(|| workspace.to_path_buf());
        grant::Resolved::for_tenant(grant::TenantGrant {
            allow: self.allow.clone(),
            mode: self.mode,
            local,
            fetch_hosts: self.fetch_hosts.clone(),
            mcp_servers: policy.mcp_servers.clone(),
            mcp_allow: policy.mcp_allow.clone(),
            config,
        })
    }
}

/// `read` and `glob` come with every grant.
fn is_always(c: Capability) -> bool {
    matches!(c, Capability::Read | Capability::Glob)
}

fn names(caps: &[Capability]) -> String {
    if caps.is_empty() {
        return "read and glob only".into();
    }
    caps.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(", ")
}

/// The sandbox's name, as policies and requests write it.
pub fn sandbox_name(s: SandboxKind) -> &'static str {
    match s {
        SandboxKind::Virtual => "virtual",
        SandboxKind::Local => "local",
    }
}

/// A tenant's quotas, part of its policy. Unset means unlimited.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Quotas {
    /// Runs that run or may run at once: queued, running, and those whose
    /// resume or retry is queued (each running run is one live instance).
    pub concurrent_runs: Option<u64>,
    /// Runs started per hour.
    pub runs_per_hour: Option<u64>,
    /// Model tokens (input and output) per hour. Each pass of a run gets
    /// what is left of the hour's tokens, one budget for all its prompts.
    pub tokens_per_hour: Option<u64>,
    /// CPU ticks per hour: the engine's epoch ticks (10 ms) at which one of
    /// the tenant's guests was running. A run also gets what is left of
    /// the hour's ticks, and is stopped past it.
    pub cpu_ticks_per_hour: Option<u64>,
    /// CPU ticks for one run over all its passes (a resumed run goes on
    /// from what its earlier passes left): past it, the guest is stopped,
    /// and the run cannot go on.
    pub cpu_ticks_per_run: Option<u64>,
    /// Web bytes per hour: the bodies the tenant's runs send and receive
    /// with the `fetch` tool. A run also gets what is left of the hour's
    /// bytes, and its fetches are refused past it.
    pub egress_bytes_per_hour: Option<u64>,
    /// The linear memory of all the tenant's live instances on one node,
    /// together, in MiB (each instance also has the server's own cap).
    pub memory_mib: Option<u64>,
    /// The CPU all the tenant's running guests on one node may use
    /// together, in cores (0.5 is half a core): past it they are made to
    /// wait at their epoch ticks, so a busy loop cannot crowd out others.
    pub cpu_cores: Option<f64>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn policy() -> Policy {
        Policy {
            allow: vec![Capability::Write, Capability::Fetch],
            mode: PermissionMode::Auto,
            sandboxes: vec![SandboxKind::Virtual, SandboxKind::Local],
            fetch_hosts: vec!["example.com".into(), "docs.rs".into()],
            models: vec!["small".into(), "large".into()],
            ..Policy::default()
        }
    }

    #[test]
    fn an_empty_request_gets_the_policy() {
        let e = policy().narrow(&Narrowing::default()).unwrap();
        assert_eq!(e.allow, vec![Capability::Write, Capability::Fetch]);
        assert_eq!(e.mode, PermissionMode::Auto);
        assert_eq!(e.sandbox, SandboxKind::Virtual);
        assert_eq!(e.model.as_deref(), Some("small"));
    }

    #[test]
    fn a_request_narrows() {
        let asked = Narrowing {
            allow: Some(vec![Capability::Read, Capability::Write]),
            mode: Some(PermissionMode::Approve),
            sandbox: Some(SandboxKind::Local),
            fetch_hosts: Some(vec!["docs.rs".into()]),
            model: Some("large".into()),
        };
        let e = policy().narrow(&asked).unwrap();
        assert_eq!(e.allow, vec![Capability::Write]);
        assert_eq!(e.mode, PermissionMode::Approve);
        assert_eq!(e.sandbox, SandboxKind::Local);
        assert_eq!(e.fetch_hosts, vec!["docs.rs".to_string()]);
        assert_eq!(e.model.as_deref(), Some("large"));
    }

    #[test]
    fn a_request_never_widens() {
        let p = Policy { mode: PermissionMode::Approve, sandboxes: vec![SandboxKind::Virtual], ..policy() };
        let cases = [
            (Narrowing { allow: Some(vec![Capability::Shell]), ..Default::default() }, "`shell`"),
            (Narrowing { mode: Some(PermissionMode::Auto), ..Default::default() }, "`auto` is less strict"),
            (Narrowing { mode: Some(PermissionMode::Ask), ..Default::default() }, "needs a terminal"),
            (Narrowing { sandbox: Some(SandboxKind::Local), ..Default::default() }, "`local` sandbox"),
            (Narrowing { fetch_hosts: Some(vec!["evil.example".into()]), ..Default::default() }, "evil.example"),
            (Narrowing { model: Some("gpt-9".into()), ..Default::default() }, "`gpt-9`"),
        ];
        for (asked, needle) in cases {
            let err = p.narrow(&asked).unwrap_err();
            assert!(err.contains(needle), "{err:?} should name {needle}");
        }
    }

    #[test]
    fn read_only_is_stricter_than_every_mode() {
        let asked = Narrowing { mode: Some(PermissionMode::ReadOnly), ..Default::default() };
        assert_eq!(policy().narrow(&asked).unwrap().mode, PermissionMode::ReadOnly);
    }

    #[test]
    fn policies_parse_from_json_and_toml_and_are_checked() {
        let config = nexo::config::ConfigFile::default();
        let p = Policy::parse(r#"{"allow": ["write"], "mode": "approve"}"#, &config).unwrap();
        assert_eq!(p.allow, vec![Capability::Write]);
        let p = Policy::parse("allow = [\"fetch\"]\nfetch-hosts = [\"example.com\"]\n", &config).unwrap();
        assert_eq!(p.fetch_hosts, vec!["example.com".to_string()]);
        assert!(Policy::parse(r#"{"allow": ["teleport"]}"#, &config).unwrap_err().contains("not a valid policy"));
        assert!(Policy::parse("mode = \"ask\"\n", &config).unwrap_err().contains("needs a terminal"));
        assert!(Policy::parse("models = [\"gpt\"]\n", &config).unwrap_err().contains("[serve.models.gpt]"));
        assert!(Policy::parse("sandboxes = []\n", &config).unwrap_err().contains("empty"));
    }
}
