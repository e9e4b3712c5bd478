//! `nexo schedule …`: an agent's run started at each occurrence of a cron
//! expression in a time zone, by whichever `nexo worker` or `nexo serve`
//! claims jobs from the store (exactly once across them).

use std::process::ExitCode;

use clap::Subcommand;
use nexo::runs::schedules::{self, Cron};
use nexo::runs::{RunSpec, Subject};
use nexo_store::{Schedule, Store};

use super::run::{RunArgs, ScheduleFlags};
use super::runs::{StoreArgs, config_and_store, store_error};
use super::timeline::time;

/// `nexo schedule …`.
#[derive(Subcommand, Debug)]
pub enum ScheduleCommand {
    /// Record a schedule: `nexo schedule add CRON FILE INPUT [run flags]` starts `nexo run FILE
    /// INPUT [run flags]` at each occurrence of CRON.
    Add {
        /// The cron expression: five fields (`0 9 * * MON-FRI`), or six with seconds first.
        #[arg(value_name = "CRON")]
        expression: String,
        #[command(flatten)]
        run: Box<RunArgs>,
    },
    /// List the schedules, oldest first.
    List {
        /// Print JSON lines instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Show one schedule: its expression, next occurrence, missed policy and last run.
    Show {
        /// The schedule's id.
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Pause a schedule: it starts nothing until resumed.
    Pause {
        /// The schedule's id.
        id: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Resume a paused schedule at its next occurrence to come.
    Resume {
        /// The schedule's id.
        id: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Delete a schedule (the runs it started stay).
    Delete {
        /// The schedule's id.
        id: String,
        #[command(flatten)]
        store: StoreArgs,
    },
}

/// Records the schedule `flags` ask for, of `subject` on `input` with `spec`.
pub(super) async fn add(
    store: &dyn Store,
    flags: &ScheduleFlags,
    (subject, input, spec): (Subject<'_>, &str, &RunSpec),
    json: bool,
) -> ExitCode {
    let expression = flags.cron.as_deref().unwrap_or_default();
    let cron = match Cron::parse(expression, &flags.tz) {
        Ok(c) => c,
        Err(e) => {
            errln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    match schedules::add(store, None, (subject, input, spec), &cron, flags.missed.into()).await {
        Ok(s) => {
            if json {
                nexo::terminal::print_json(&serde_json::to_value(&s).unwrap_or_default());
            } else {
                outln!("{}", s.id);
            }
            errln!(
                "schedule {} starts `{}` at `{}` ({}), first at {}; `nexo worker` or `nexo serve` on this store starts \
                 its runs",
                s.id,
                s.template.agent,
                s.cron,
                s.timezone,
                time(s.next_ms)
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            errln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// `nexo schedule list|show|pause|resume|delete`.
pub async fn command(command: &ScheduleCommand, store_flag: Option<&str>) -> ExitCode {
    let store_args = match command {
        ScheduleCommand::List { store, .. }
        | ScheduleCommand::Show { store, .. }
        | ScheduleCommand::Pause { store, .. }
        | ScheduleCommand::Resume { store, .. }
        | ScheduleCommand::Delete { store, .. } => store,
        ScheduleCommand::Add { .. } => unreachable!("`schedule add` is a run (into_run)"),
    };
    let store = match config_and_store(store_args, store_flag).await {
        Ok((_, store)) => store,
        Err(code) => return code,
    };
    let found = |id: &str| {
        let store = store.clone();
        let id = id.to_string();
        async move {
            match store.schedule(&id).await {
                Ok(Some(s)) => Ok(s),
                Ok(None) => Err(store_error(&nexo_store::StoreError::NoSchedule(id))),
                Err(e) => Err(store_error(&e)),
            }
        }
    };
    match command {
        ScheduleCommand::List { json, .. } => match store.schedules(None, 1000).await {
            Ok(all) => {
                list(&all, *json);
                ExitCode::SUCCESS
            }
            Err(e) => store_error(&e),
        },
        ScheduleCommand::Show { id, json, .. } => match found(id).await {
            Ok(s) => {
                show(&s, *json);
                ExitCode::SUCCESS
            }
            Err(code) => code,
        },
        ScheduleCommand::Pause { id, .. } => match store.set_schedule_paused(id, true, 0).await {
            Ok(s) => {
                errln!("schedule {} is paused; `nexo schedule resume {}` goes on at its next occurrence", s.id, s.id);
                ExitCode::SUCCESS
            }
            Err(e) => store_error(&e),
        },
        ScheduleCommand::Resume { id, .. } => {
            let schedule = match found(id).await {
                Ok(s) => s,
                Err(code) => return code,
            };
            match schedules::resume(&*store, &schedule).await {
                Ok(s) => {
                    errln!("schedule {} goes on; next at {}", s.id, time(s.next_ms));
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    errln!("error: {e}");
                    ExitCode::from(2)
                }
            }
        }
        ScheduleCommand::Delete { id, .. } => match store.delete_schedule(id).await {
            Ok(()) => {
                errln!("schedule {id} is deleted; the runs it started stay");
                ExitCode::SUCCESS
            }
            Err(e) => store_error(&e),
        },
        ScheduleCommand::Add { .. } => unreachable!("matched above"),
    }
}

/// The schedules as a table, or JSON lines.
fn list(all: &[Schedule], json: bool) {
    if json {
        for s in all {
            outln!("{}", serde_json::to_string(s).unwrap_or_default());
        }
        return;
    }
    if all.is_empty() {
        errln!("no schedules; `nexo schedule add CRON FILE INPUT` makes one");
        return;
    }
    let state = next;
    let cron_width = all.iter().map(|s| s.cron.chars().count()).chain([4]).max().unwrap_or(4);
    let agent_width = all.iter().map(|s| s.template.agent.chars().count()).chain([5]).max().unwrap_or(5);
    outln!("{:<27}  {:<cron_width$}  {:<agent_width$}  {:<20}  RUNS", "SCHEDULE", "CRON", "AGENT", "NEXT");
    for s in all {
        outln!(
            "{:<27}  {:<cron_width$}  {:<agent_width$}  {:<20}  {}",
            s.id,
            s.cron,
            s.template.agent,
            state(s),
            s.started
        );
    }
}

/// When a schedule fires next, in words.
fn next(s: &Schedule) -> String {
    match (s.paused, s.next_ms) {
        (true, _) => "paused".into(),
        (false, nexo_store::NEVER_MS) => "ended".into(),
        (false, at) => time(at),
    }
}

/// One schedule, in full.
fn show(s: &Schedule, json: bool) {
    if json {
        nexo::terminal::print_json(&serde_json::to_value(s).unwrap_or_default());
        return;
    }
    outln!("schedule:  {}", s.id);
    outln!("agent:     {} ({}, {})", s.template.agent, s.template.kind, s.template.source);
    outln!("input:     {}", s.template.input);
    outln!("cron:      {} ({})", s.cron, s.timezone);
    outln!("next:      {}", next(s));
    outln!("missed:    {} (occurrences late by more than a minute, while no worker was up)", s.missed.as_str());
    outln!("started:   {} run(s); skipped {}", s.started, s.skipped);
    if let Some(run) = &s.last_run {
        outln!("last run:  {run}");
    }
    if let Some(note) = &s.note {
        outln!("last:      {note}");
    }
    if let Some(tenant) = &s.tenant {
        outln!("tenant:    {tenant}");
    }
    outln!("created:   {}", time(s.created_ms));
}
