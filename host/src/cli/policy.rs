//! `nexo policy check`: how the operator's command rules and mode judge a
//! shell command, under the config file's grant or a tenant's policy file,
//! without running anything.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use nexo::authority::{Authority, Permissions};
use nexo::error::ToolError;
use nexo::grant::{Grant, Ruling};
use nexo::manifest::{AgentManifest, Capability, PermissionMode};
use nexo::policy::{Narrowing, Policy};

use super::grant::GrantArgs;
use super::report::config_failure;

/// `nexo policy …`.
#[derive(Subcommand, Debug)]
pub enum PolicyCommand {
    /// Show how the command rules and the mode judge a shell command: each plain command in it,
    /// the rule that matched it, and whether it would run, be asked about, or be refused.
    /// Exits 0 when it would run unasked, 1 when not.
    Check(CheckArgs),
}

/// `nexo policy check`'s arguments.
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The command line, as the model would write it (quote it as one argument, or after `--`).
    #[arg(required = true, num_args = 1.., allow_hyphen_values = true)]
    command: Vec<String>,
    /// Judge it under this tenant policy file (JSON or TOML, as `nexo tenant policy` takes)
    /// instead of the config file's `[grant]` and the flags.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    grant: GrantArgs,
}

/// Runs `nexo policy …`.
pub fn command(command: &PolicyCommand) -> ExitCode {
    let PolicyCommand::Check(args) = command;
    let file = match nexo::config::read(args.grant.config_path()) {
        Ok(file) => file,
        Err(e) => return config_failure(&e),
    };
    // An agent that asks for the shell and declares no mode of its own.
    let agent =
        AgentManifest { name: "agent".into(), capabilities: vec![Capability::Shell], ..AgentManifest::default() };
    let grant = match &args.policy {
        Some(path) => match tenant_grant(path, &file, &agent) {
            Ok(grant) => grant,
            Err(why) => {
                errln!("error: {why}");
                return ExitCode::from(2);
            }
        },
        None => match args.grant.resolve(&file) {
            Ok(grant) => grant,
            Err(e) => return config_failure(&e),
        },
    };
    let line = args.command.join(" ");
    let asked = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut permissions = Permissions::new(grant.mode);
    if args.policy.is_none() {
        permissions = permissions.with_vocabulary(nexo::hint::Vocabulary::Flags);
    }
    if grant.mode == PermissionMode::Ask {
        // The terminal would ask; here the question is only noted.
        let noted = asked.clone();
        permissions = permissions.on_ask(move |_, _| {
            noted.store(true, std::sync::atomic::Ordering::Relaxed);
            false
        });
    }
    let authority = Authority::new(&agent, &grant, &permissions);
    let judgement = authority.command_rules().judge(&line);
    let outcome = authority.authorize(Capability::Shell, "shell", &line);
    let (verdict, message) = match &outcome {
        Ok(()) => ("allowed", None),
        Err(_) if asked.load(std::sync::atomic::Ordering::Relaxed) => ("asked", None),
        Err(e @ ToolError::ApprovalRequired(_)) => ("approval-required", Some(e.message())),
        Err(e) => ("denied", Some(e.message())),
    };
    let ruling = match &judgement.ruling {
        Ruling::Mode => ("mode", None),
        Ruling::Allow => ("allow", None),
        Ruling::Ask(why) => ("ask", Some(why.as_str())),
        Ruling::Deny(why) => ("deny", Some(why.as_str())),
    };
    if args.json {
        let commands: Vec<_> = judgement
            .commands
            .iter()
            .map(|(argv, rules)| {
                serde_json::json!({"argv": argv, "rules": rules.iter().map(|r| r.map(|r| r.to_string())).collect::<Vec<_>>()})
            })
            .collect();
        let value = serde_json::json!({
            "command": line,
            "mode": grant.mode.as_str(),
            "commands": commands,
            "unreadable": judgement.unreadable.as_ref().map(|u| u.0),
            "ruling": ruling.0,
            "verdict": verdict,
            "message": message,
        });
        outln!("{value}");
    } else {
        outln!("mode: {}", grant.mode.as_str());
        if authority.command_rules().is_empty() {
            outln!("command rules: none (the mode decides each command)");
        }
        for (i, layer) in authority.command_rules().layers().iter().enumerate() {
            outln!(
                "command rules{}:",
                if authority.command_rules().layers().len() > 1 { format!(" [{}]", i + 1) } else { String::new() }
            );
            for (n, rule) in layer.iter().enumerate() {
                let reason = rule.reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default();
                outln!("  {}. {rule}{reason}", n + 1);
            }
        }
        for (argv, rules) in &judgement.commands {
            let said: Vec<String> =
                rules.iter().map(|r| r.map_or("no rule (the mode decides)".to_string(), |r| r.to_string())).collect();
            outln!("{}: {}", nexo::grant::join_argv(argv), said.join("; "));
        }
        if let Some(why) = &judgement.unreadable {
            outln!("unreadable: the command has {why}; no rule vouches for it");
        }
        match ruling.1 {
            Some(why) => outln!("ruling: {}: {why}", ruling.0),
            None => outln!("ruling: {}", ruling.0),
        }
        match message {
            Some(m) => outln!("verdict: {verdict}: {m}"),
            None => outln!("verdict: {verdict}"),
        }
    }
    if outcome.is_ok() { ExitCode::SUCCESS } else { ExitCode::from(1) }
}

/// The grant a run of `agent` would get under the tenant policy at `path`.
fn tenant_grant(path: &Path, file: &nexo::config::ConfigFile, agent: &AgentManifest) -> Result<Grant, String> {
    let text = nexo::files::read_regular_text(path, nexo::files::MAX_TOML_BYTES)
        .map_err(|e| format!("cannot read the policy {}: {e}", path.display()))?;
    let policy = Policy::parse(&text, file).map_err(|e| format!("the policy {} is refused: {e}", path.display()))?;
    let granted = policy.narrow(&Narrowing::default(), agent, Path::new("/"), file)?;
    Ok(granted.grant)
}
