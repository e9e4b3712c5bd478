//! Schedules: a run template started at each occurrence of a cron
//! expression, exactly once across every node.
//!
//! The store keeps each schedule's next occurrence (`next_ms`). Firing an
//! occurrence is one transaction that moves `next_ms` on only if it still
//! holds that occurrence, and records the occurrence's run with its start
//! job: of any number of nodes firing at once one wins and the others
//! write nothing, and a node killed mid-way writes nothing at all, so
//! another fires the occurrence. What the occurrences are (the cron
//! expression in its time zone) and what happens to those missed while
//! every node was down is the host's to reckon.

use serde::Serialize;
use serde_json::Value;

use crate::{NewJob, NewRun};

/// What happens to occurrences missed while nothing fired them (every
/// node was down longer than the host's grace).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Missed {
    /// They are skipped: the next run is at the next occurrence to come.
    Skip,
    /// One run stands for all of them, started at once.
    RunOnce,
}

impl Missed {
    /// The name stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Missed::Skip => "skip",
            Missed::RunOnce => "run-once",
        }
    }

    /// Parses a stored or typed name.
    pub fn parse(name: &str) -> Option<Missed> {
        [Missed::Skip, Missed::RunOnce].into_iter().find(|m| m.as_str() == name)
    }
}

/// What each occurrence of a schedule starts: a run of this agent on
/// this input with this specification (the run's recorded grant and
/// settings, never a secret).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunTemplate {
    /// The agent's name.
    pub agent: String,
    /// `component` or `toml`.
    pub kind: String,
    /// The component's path, or the TOML file's.
    pub source: String,
    /// The component's SHA-256.
    pub component_sha256: String,
    /// The input.
    pub input: String,
    /// The run's specification, as a run records it.
    pub grant: Value,
}

/// A new schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct NewSchedule {
    /// Its id (`s…`, [`new_schedule_id`]).
    pub id: String,
    /// The tenant it starts runs for; `None` for the CLI's.
    pub tenant: Option<String>,
    /// The cron expression.
    pub cron: String,
    /// The IANA time zone the expression is read in.
    pub timezone: String,
    /// What happens to missed occurrences.
    pub missed: Missed,
    /// Its first occurrence.
    pub next_ms: i64,
    /// What each occurrence starts.
    pub template: RunTemplate,
    /// When it was made.
    pub created_ms: i64,
}

/// A recorded schedule.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Schedule {
    /// Its id.
    pub id: String,
    /// The tenant it starts runs for; `None` for the CLI's.
    pub tenant: Option<String>,
    /// The cron expression.
    pub cron: String,
    /// The IANA time zone the expression is read in.
    pub timezone: String,
    /// What happens to missed occurrences.
    pub missed: Missed,
    /// Whether it is paused: a paused schedule fires nothing.
    pub paused: bool,
    /// Its next occurrence.
    pub next_ms: i64,
    /// What each occurrence starts.
    pub template: RunTemplate,
    /// When it was made.
    pub created_ms: i64,
    /// When it last changed.
    pub updated_ms: i64,
    /// How many runs it started.
    pub started: i64,
    /// How many occurrences it skipped (missed, or refused by a quota).
    pub skipped: i64,
    /// The run its latest occurrence started.
    pub last_run: Option<String>,
    /// What happened at its latest occurrence, in words.
    pub note: Option<String>,
}

/// What firing one occurrence writes.
#[derive(Debug, Clone, PartialEq)]
pub struct Firing {
    /// The occurrence fired: the schedule's `next_ms` it must still hold.
    pub due_ms: i64,
    /// The occurrence after it, the schedule's new `next_ms`.
    pub next_ms: i64,
    /// The run it starts, with its start job; `None` when it starts none.
    pub run: Option<(NewRun, NewJob)>,
    /// How many occurrences it skips.
    pub skipped: i64,
    /// What happened, in words.
    pub note: String,
}

/// A new schedule id: `s` then 26 characters, sortable by creation time.
pub fn new_schedule_id() -> String {
    crate::ids::new_id('s')
}
