//! A durable workflow with a child run, a signal and a timer: a child run
//! of the agent the operator made available as `writer` prepares the
//! release notes; the workflow then waits (up to a day) for the signal
//! `approve`, whose data may set a delay; it sleeps that long, durably,
//! and releases.
//!
//! ```text
//! nexo run release-gate.wasm "nexo 0.2" --config release.toml   # [agents] writer = "…"
//! # … suspended: waiting for child run `r…`; a worker runs it
//! nexo runs signal r… approve --data '{"delay_secs": 60}'
//! # a worker wakes it, it sleeps a minute (no process held), then releases
//! ```
//!
//! While it waits it holds no instance and no process: each wait ends the
//! pass, and the child's end, the signal or the timer wakes it by replay.

use std::time::Duration;

use nexo_sdk::agent::durable::{run_agent, sleep, wait_signal, ChildOutcome, GrantNarrowing};
use nexo_sdk::agent::{Agent, Capability, Manifest, RunError};

/// How long the release waits for its approval.
const APPROVAL_WINDOW: Duration = Duration::from_secs(24 * 3600);

struct ReleaseGate;

/// The delay an approval's data asks for: `{"delay_secs": N}`, else none.
fn delay(data: &str) -> Duration {
    let compact: String = data.chars().filter(|c| !c.is_whitespace()).collect();
    let secs = compact
        .split_once("\"delay_secs\":")
        .map(|(_, rest)| rest.chars().take_while(char::is_ascii_digit).collect::<String>())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    Duration::from_secs(secs)
}

impl Agent for ReleaseGate {
    fn manifest() -> Manifest {
        Manifest::new("release-gate", "Prepares release notes in a child run, waits for approval, then releases")
            .capabilities([Capability::Read])
    }

    fn run(release: String) -> Result<String, RunError> {
        // The writer reads, and may do nothing more, whatever this run holds.
        let read_only =
            GrantNarrowing { allow: Some(vec!["read".into()]), mode: Some("read-only".into()), fetch_hosts: None };
        let notes = match run_agent("writer", &release, &read_only)? {
            ChildOutcome::Done(notes) => notes,
            ChildOutcome::Failed(error) => return Err(RunError::Failed(format!("the writer failed: {error}"))),
            ChildOutcome::Cancelled(why) => return Ok(format!("not released: the writer was cancelled ({why})")),
        };
        let Some(approval) = wait_signal("approve", Some(APPROVAL_WINDOW))? else {
            return Ok(format!("not released: `{release}` was not approved within a day"));
        };
        let delay = delay(&approval);
        if !delay.is_zero() {
            sleep(delay)?;
        }
        Ok(format!("released `{release}` after {}s\n{notes}", delay.as_secs()))
    }
}

nexo_sdk::export_agent!(ReleaseGate);
