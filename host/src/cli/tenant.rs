//! `nexo tenant …`, `nexo audit …` and `nexo usage`: the operator's side of
//! `nexo serve`, against the same store the servers use.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use nexo_store::Store;

use super::runs::{self, StoreArgs};
use super::timeline;
use nexo::policy::Policy;
use nexo::server::tenants::{self, TenantError};

/// `nexo tenant …`.
#[derive(Subcommand, Debug)]
pub enum TenantCommand {
    /// Create a tenant and print its first API key (shown once; the store keeps only its hash).
    Create {
        /// The tenant's name: lowercase letters, digits, `-` and `_`.
        name: String,
        /// Its policy: a JSON or TOML file (default: read and glob only, read-only, virtual sandbox).
        #[arg(long, value_name = "FILE")]
        policy: Option<PathBuf>,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// List the tenants.
    List {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Replace a tenant's policy with the one in FILE (JSON or TOML).
    Policy {
        /// The tenant.
        name: String,
        /// The policy file.
        file: PathBuf,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Disable a tenant: its keys are refused until it is enabled again.
    Disable {
        /// The tenant.
        name: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Enable a disabled tenant.
    Enable {
        /// The tenant.
        name: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Make a new API key for a tenant and print it (shown once).
    Key {
        /// The tenant.
        name: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Revoke an API key by its id (`nexo tenant keys NAME` lists them).
    Revoke {
        /// The key's id.
        key: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// List a tenant's keys (ids and dates; never the keys).
    Keys {
        /// The tenant.
        name: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Make an operator (admin) key for the tenant-management API, and print it (shown once).
    AdminKey {
        #[command(flatten)]
        store: StoreArgs,
    },
}

/// `nexo audit …`.
#[derive(Subcommand, Debug)]
pub enum AuditCommand {
    /// Check each tenant's audit chain: an edited, removed or reordered entry is reported, and
    /// the exit code is 1. With --anchor, also a log cut short or reset with its head.
    Verify {
        /// Only this tenant.
        name: Option<String>,
        /// The anchor file a server wrote (DATA/audit-anchor): every head it holds must still
        /// be in its tenant's log, which catches a log whose tail was removed and whose head was
        /// set back to match.
        #[arg(long, value_name = "FILE")]
        anchor: Option<std::path::PathBuf>,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Print a tenant's audit log, oldest first.
    Show {
        /// The tenant.
        name: String,
        /// Print JSON lines.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
}

fn store_args(command: &TenantCommand) -> &StoreArgs {
    match command {
        TenantCommand::Create { store, .. }
        | TenantCommand::List { store }
        | TenantCommand::Policy { store, .. }
        | TenantCommand::Disable { store, .. }
        | TenantCommand::Enable { store, .. }
        | TenantCommand::Key { store, .. }
        | TenantCommand::Revoke { store, .. }
        | TenantCommand::Keys { store, .. }
        | TenantCommand::AdminKey { store } => store,
    }
}

async fn open(
    args: &StoreArgs,
    flag: Option<&str>,
) -> Result<(std::sync::Arc<dyn Store>, nexo::config::ConfigFile), ExitCode> {
    runs::config_and_store(args, flag).await.map(|(file, store)| (store, file))
}

/// The tenant named, or every tenant.
async fn chosen(store: &dyn Store, name: Option<&str>) -> Result<Vec<nexo_store::Tenant>, ExitCode> {
    match name {
        Some(n) => tenants::find(store, n).await.map(|t| vec![t]).map_err(|e| failed(&e)),
        None => store.tenants().await.map_err(|e| runs::store_error(&e)),
    }
}

fn failed(e: &TenantError) -> ExitCode {
    errln!("error: {e}");
    ExitCode::from(2)
}

fn read_policy(
    path: &std::path::Path,
    file: &nexo::config::ConfigFile,
    config: Option<&std::path::Path>,
) -> Result<Policy, ExitCode> {
    let text = nexo::files::read_regular_text(path, nexo::files::MAX_TOML_BYTES).map_err(|e| {
        errln!("error: cannot read the policy {}: {e}", path.display());
        ExitCode::from(2)
    })?;
    let policy = Policy::parse(&text, file).map_err(|e| {
        errln!("error: the policy {} is refused: {e}{}", path.display(), config_note(&text, config));
        ExitCode::from(2)
    })?;
    let networked: Vec<&str> = policy
        .mcp_servers
        .iter()
        .filter(|name| file.mcp.get(*name).is_some_and(|s| s.confined_with_network()))
        .map(String::as_str)
        .collect();
    for (entry, covered) in policy.data_flow.read_only_networked(&networked) {
        errln!("warning: the policy's data-flow {}", nexo::config::read_only_warning(entry, &covered));
    }
    Ok(policy)
}

/// Which config file a policy's models and MCP servers were checked
/// against: a policy that names one needs the file `nexo serve` uses.
fn config_note(text: &str, config: Option<&std::path::Path>) -> String {
    let unchecked: Option<Policy> = serde_json::from_str(text).ok().or_else(|| toml::from_str(text).ok());
    let names_some = unchecked.is_some_and(|p| !p.models.is_empty() || !p.mcp_servers.is_empty());
    match config {
        _ if !names_some => String::new(),
        Some(path) => format!(" (checked against the config file {})", path.display()),
        None => "; the policy names models or MCP servers, which are checked against the operator's config file \
                 ([serve.models.NAME], [mcp.NAME]), and none was given: pass the file `nexo serve` uses with \
                 --config FILE, or set NEXO_CONFIG"
            .to_string(),
    }
}

/// `nexo tenant …`.
pub async fn command(command: &TenantCommand, flag: Option<&str>) -> ExitCode {
    let (store, file) = match open(store_args(command), flag).await {
        Ok(s) => s,
        Err(code) => return code,
    };
    let store = &*store;
    match command {
        TenantCommand::Create { name, policy, .. } => {
            let policy = match policy {
                Some(path) => match read_policy(path, &file, store_args(command).config()) {
                    Ok(p) => p,
                    Err(code) => return code,
                },
                None => Policy::default(),
            };
            match tenants::create(store, name, &policy).await {
                Ok((tenant, key, secret)) => {
                    outln!("{secret}");
                    errln!(
                        "created tenant {} ({}) with key {}; the key above is shown once, so keep it now",
                        tenant.name,
                        tenant.id,
                        key.id
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => failed(&e),
            }
        }
        TenantCommand::List { .. } => match store.tenants().await {
            Ok(all) => {
                for t in all {
                    let state = if t.disabled { "disabled" } else { "enabled" };
                    outln!("{}\t{}\t{}\t{}", t.name, t.id, state, t.policy);
                }
                ExitCode::SUCCESS
            }
            Err(e) => runs::store_error(&e),
        },
        TenantCommand::Policy { name, file: path, .. } => {
            let policy = match read_policy(path, &file, store_args(command).config()) {
                Ok(p) => p,
                Err(code) => return code,
            };
            match async { tenants::set_policy(store, &tenants::find(store, name).await?, &policy).await }.await {
                Ok(t) => {
                    errln!("tenant {}: policy replaced", t.name);
                    ExitCode::SUCCESS
                }
                Err(e) => failed(&e),
            }
        }
        TenantCommand::Disable { name, .. } | TenantCommand::Enable { name, .. } => {
            let disabled = matches!(command, TenantCommand::Disable { .. });
            match async { tenants::set_disabled(store, &tenants::find(store, name).await?, disabled).await }.await {
                Ok(t) => {
                    errln!("tenant {} is {}", t.name, if disabled { "disabled" } else { "enabled" });
                    ExitCode::SUCCESS
                }
                Err(e) => failed(&e),
            }
        }
        TenantCommand::Key { name, .. } => {
            match async { tenants::add_key(store, &tenants::find(store, name).await?).await }.await {
                Ok((key, secret)) => {
                    outln!("{secret}");
                    errln!("new key {} for tenant {name}; it is shown once", key.id);
                    ExitCode::SUCCESS
                }
                Err(e) => failed(&e),
            }
        }
        TenantCommand::Revoke { key, .. } => match tenants::revoke_key(store, key).await {
            Ok(k) => {
                errln!("key {} is revoked", k.id);
                ExitCode::SUCCESS
            }
            Err(e) => failed(&e),
        },
        TenantCommand::Keys { name, .. } => {
            let tenant = match tenants::find(store, name).await {
                Ok(t) => t,
                Err(e) => return failed(&e),
            };
            match store.keys(Some(&tenant.id)).await {
                Ok(keys) => {
                    for k in keys {
                        let state = match k.revoked_ms {
                            Some(at) => format!("revoked {}", timeline::time(at)),
                            None => "active".into(),
                        };
                        outln!("{}\t{}\t{state}", k.id, timeline::time(k.created_ms));
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => runs::store_error(&e),
            }
        }
        TenantCommand::AdminKey { .. } => match tenants::add_admin_key(store).await {
            Ok((key, secret)) => {
                outln!("{secret}");
                errln!("new admin key {}; it is shown once", key.id);
                ExitCode::SUCCESS
            }
            Err(e) => failed(&e),
        },
    }
}

/// `nexo audit …`.
pub async fn audit(command: &AuditCommand, flag: Option<&str>) -> ExitCode {
    let args = match command {
        AuditCommand::Verify { store, .. } | AuditCommand::Show { store, .. } => store,
    };
    let (store, _) = match open(args, flag).await {
        Ok(s) => s,
        Err(code) => return code,
    };
    let store = &*store;
    match command {
        AuditCommand::Show { name, json, .. } => {
            let tenant = match tenants::find(store, name).await {
                Ok(t) => t,
                Err(e) => return failed(&e),
            };
            match all_entries(store, &tenant.id).await {
                Ok(entries) => {
                    for e in entries {
                        if *json {
                            nexo::terminal::print_json(&serde_json::to_value(&e).unwrap_or_default());
                        } else {
                            outln!("{}\t{}\t{}\t{}", e.seq, timeline::time(e.at_ms), e.kind, e.data);
                        }
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => runs::store_error(&e),
            }
        }
        AuditCommand::Verify { name, anchor, .. } => {
            let chosen = match chosen(store, name.as_deref()).await {
                Ok(c) => c,
                Err(code) => return code,
            };
            let anchored = match anchor.as_deref().map(nexo_store::read_anchors).transpose() {
                Ok(a) => {
                    if let (Some(path), Some(a)) = (anchor.as_deref(), &a)
                        && a.torn > 0
                    {
                        errln!(
                            "warning: the last line of {} was cut short ({} bytes without a newline, a write a crash \
                             interrupted); it is left out",
                            path.display(),
                            a.torn
                        );
                    }
                    a.map(|a| a.lines)
                }
                Err(e) => {
                    errln!("error: {e}");
                    return ExitCode::from(1);
                }
            };
            let mut broken = 0;
            for tenant in &chosen {
                let (entries, head) = match (all_entries(store, &tenant.id).await, store.audit_head(&tenant.id).await) {
                    (Ok(e), Ok(h)) => (e, h),
                    (Err(e), _) | (_, Err(e)) => return runs::store_error(&e),
                };
                let heads: Vec<(u64, &str)> = anchored
                    .iter()
                    .flatten()
                    .filter(|a| a.tenant == tenant.id)
                    .map(|a| (a.seq, a.hash.as_str()))
                    .collect();
                let verified = nexo_store::verify_audit(&entries, head.as_ref().map(|(s, h)| (*s, h.as_str())))
                    .and_then(|n| nexo_store::verify_anchored(&entries, &heads).map(|()| n));
                match verified {
                    Ok(n) if anchored.is_some() => {
                        outln!("{}: ok, {n} entries, {} anchored heads found", tenant.name, heads.len())
                    }
                    Ok(n) => outln!("{}: ok, {n} entries", tenant.name),
                    Err(e) => {
                        broken += 1;
                        outln!("{}: BROKEN: {e}", tenant.name);
                    }
                }
            }
            // A tenant the anchor file knows that the store no longer has (when all are checked).
            if name.is_none() {
                let gone: std::collections::BTreeSet<&str> = anchored
                    .iter()
                    .flatten()
                    .filter(|a| !chosen.iter().any(|t| t.id == a.tenant))
                    .map(|a| a.tenant.as_str())
                    .collect();
                for id in gone {
                    broken += 1;
                    outln!(
                        "{id}: BROKEN: the anchor file holds this tenant's audit head, but the store has no such \
                         tenant: it was deleted"
                    );
                }
            }
            if broken > 0 {
                errln!(
                    "error: {broken} audit log(s) do not verify: an entry was edited, removed or reordered, or a log \
                     was cut short"
                );
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
    }
}

async fn all_entries(store: &dyn Store, tenant: &str) -> Result<Vec<nexo_store::AuditEntry>, nexo_store::StoreError> {
    let mut all = Vec::new();
    loop {
        let after = all.last().map_or(0, |e: &nexo_store::AuditEntry| e.seq);
        let batch = store.audit(tenant, after, 1000).await?;
        if batch.is_empty() {
            return Ok(all);
        }
        all.extend(batch);
    }
}

/// `nexo usage [NAME]`: metered usage per tenant.
pub async fn usage(name: Option<&str>, json: bool, args: &StoreArgs, flag: Option<&str>) -> ExitCode {
    let (store, _) = match open(args, flag).await {
        Ok(s) => s,
        Err(code) => return code,
    };
    let store = &*store;
    let chosen = match chosen(store, name).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    for tenant in chosen {
        let periods = match store.usage(&tenant.id, 0).await {
            Ok(p) => p,
            Err(e) => return runs::store_error(&e),
        };
        let shown = nexo::server::api::usage_json(&periods);
        if json {
            nexo::terminal::print_json(&serde_json::json!({"tenant": tenant.name, "usage": shown}));
        } else {
            let t = &shown["total"];
            outln!(
                "{}\truns {}\ttokens {}\tcpu-ticks {}\tegress-bytes {}\tcost-usd {:.6}",
                tenant.name,
                t["runs"],
                t["tokens"],
                t["cpu_ticks"],
                t["egress_bytes"],
                t["cost_usd"].as_f64().unwrap_or(0.0)
            );
        }
    }
    ExitCode::SUCCESS
}
