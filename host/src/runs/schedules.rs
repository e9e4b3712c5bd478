//! Schedules: a run of an agent started at each occurrence of a cron
//! expression read in a time zone, exactly once across every node.
//!
//! The store holds each schedule with its next occurrence; any worker or
//! `nexo serve` node that claims jobs also fires the occurrences that are
//! due ([`tick`]). Firing is one transaction that moves the schedule on
//! only if it still holds that occurrence and queues the occurrence's run
//! with its start job, so of several nodes firing at once one wins and a
//! node killed mid-way leaves the occurrence to the next. Occurrences
//! late by less than [`MISSED_GRACE_MS`] (a slow tick, a node's restart)
//! are each fired in turn; older ones were missed (no node fired them in
//! time), and the schedule's [`Missed`] policy says what comes of them. A
//! firing that fails is tried again [`RETRY_MS`] later; a schedule with no
//! occurrence to come fires its last and ends.

use std::str::FromStr as _;

use chrono::TimeZone as _;
use nexo_store::{
    FireOutcome, Firing, JobKind, Missed, NewRun, NewSchedule, RunStatus, RunTemplate, Schedule, Store, StoreError,
};
use serde_json::json;

use super::{RunSpec, Subject, new_job, new_run, record};

/// How late an occurrence may be fired and still count as on time: later
/// than this, it was missed while no node was up.
pub const MISSED_GRACE_MS: i64 = 60_000;

/// How many due schedules one tick fires at most.
const FIRED_PER_TICK: usize = 32;

/// How long after a failed firing (a store or a tenant's record that could
/// not be read) it is tried again: well within [`MISSED_GRACE_MS`].
pub const RETRY_MS: i64 = 10_000;

/// Why a schedule cannot be made or moved on.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// The cron expression does not parse.
    #[error(
        "the cron expression `{expression}` is not valid: {why}; give five fields (minute hour day-of-month month \
         day-of-week, as `0 9 * * MON-FRI`) or six with seconds first (`*/10 * * * * *`)"
    )]
    Cron {
        /// The expression given.
        expression: String,
        /// What the parser said.
        why: String,
    },
    /// The time zone is not an IANA name.
    #[error("`{0}` is not a time zone this nexo knows; give an IANA name such as `UTC` or `Europe/Paris`")]
    TimeZone(String),
    /// The expression has no occurrence to come.
    #[error("the cron expression `{0}` has no occurrence to come")]
    NoOccurrence(String),
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A cron expression in its time zone.
#[derive(Debug, Clone)]
pub struct Cron {
    expression: String,
    cron: croner::Cron,
    zone: chrono_tz::Tz,
}

impl Cron {
    /// Parses `expression` (five fields, or six with seconds first) to be
    /// read in `timezone` (an IANA name).
    pub fn parse(expression: &str, timezone: &str) -> Result<Cron, ScheduleError> {
        // No year field: a schedule that ends is paused or deleted.
        let parser = croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Optional)
            .year(croner::parser::Year::Disallowed)
            .build();
        let cron = parser
            .parse(expression)
            .map_err(|e| ScheduleError::Cron { expression: expression.to_string(), why: e.to_string() })?;
        let zone = chrono_tz::Tz::from_str(timezone).map_err(|_| ScheduleError::TimeZone(timezone.to_string()))?;
        Ok(Cron { expression: expression.to_string(), cron, zone })
    }

    /// Whether it has a seconds field (six fields): it may fire every
    /// second.
    pub fn has_seconds(&self) -> bool {
        self.expression.split_whitespace().count() == 6
    }

    /// The first occurrence strictly after `after_ms` (Unix milliseconds),
    /// on a whole second.
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        // From the whole second: the search keeps what is below it.
        let at = self.zone.timestamp_millis_opt(after_ms - after_ms.rem_euclid(1000)).single()?;
        // Strictly after, in instants: where a local time comes twice (the
        // hour a clock goes back), a search in local time can answer one
        // already past.
        self.cron.iter_after(at).take(64).map(|next| next.timestamp_millis()).find(|&next| next > after_ms)
    }

    /// The first occurrence strictly after `after_ms`, or why there is none.
    fn next_or_err(&self, after_ms: i64) -> Result<i64, ScheduleError> {
        self.next_after(after_ms).ok_or_else(|| ScheduleError::NoOccurrence(self.expression.clone()))
    }
}

/// Records a schedule that starts a run of `subject` on `input` with `spec`
/// at each occurrence of `cron` after now, for `tenant` if given.
pub async fn add(
    store: &dyn Store,
    tenant: Option<&str>,
    (subject, input, spec): (Subject<'_>, &str, &RunSpec),
    cron: &Cron,
    missed: Missed,
) -> Result<Schedule, ScheduleError> {
    let now = nexo_store::now_ms();
    let run = new_run(&subject, input, record(spec)?, RunStatus::Queued, None, (None, tenant));
    let template = RunTemplate {
        agent: run.agent,
        kind: run.kind,
        source: run.source,
        component_sha256: run.component_sha256,
        input: run.input,
        grant: run.grant,
    };
    let new = NewSchedule {
        id: nexo_store::new_schedule_id(),
        tenant: tenant.map(str::to_string),
        cron: cron.expression.clone(),
        timezone: cron.zone.name().to_string(),
        missed,
        next_ms: cron.next_or_err(now)?,
        template,
        created_ms: now,
    };
    Ok(store.add_schedule(new).await?)
}

/// Resumes a paused schedule at its next occurrence after now (what it
/// missed while paused is not made up).
pub async fn resume(store: &dyn Store, schedule: &Schedule) -> Result<Schedule, ScheduleError> {
    let cron = Cron::parse(&schedule.cron, &schedule.timezone)?;
    let next = cron.next_or_err(nexo_store::now_ms())?;
    Ok(store.set_schedule_paused(&schedule.id, false, next).await?)
}

/// Whether a tenant's scheduled occurrence may start its run now: the
/// tenant is there and enabled, and its quotas let a new run start, as a
/// `POST /v1/runs` of it would be checked (its policy as it is now bounds
/// each pass, as every run's). `Ok(Err(why))` skips the occurrence; a
/// store that cannot say is an `Err`, and the firing is tried again.
async fn admitted(store: &dyn Store, schedule: &Schedule, now: i64) -> Result<Result<(), String>, StoreError> {
    let Some(tenant) = &schedule.tenant else { return Ok(Ok(())) };
    let Some(stored) = store.tenant(tenant).await? else { return Ok(Err("its tenant is gone".into())) };
    if stored.disabled {
        return Ok(Err("its tenant is disabled".into()));
    }
    let policy = match crate::policy::Policy::from_stored(&stored.policy) {
        Ok(p) => p,
        Err(e) => return Ok(Err(format!("its tenant's policy cannot be read: {e}"))),
    };
    let admitted = crate::quota::admit(store, tenant, &policy.quotas, crate::quota::Step::Start, now).await?;
    Ok(admitted.map_err(|refusal| refusal.message))
}

/// Fires the occurrences due, at most once per `poll` and whenever one
/// falls due, until the task is dropped; `fired` is told when runs were
/// queued. Its own task: a node whose run slots are all taken still fires.
pub async fn keep_firing(
    store: std::sync::Arc<dyn Store>,
    poll: std::time::Duration,
    fired: std::sync::Arc<tokio::sync::Notify>,
) {
    loop {
        if tick(&*store).await > 0 {
            fired.notify_one();
        }
        let next = store.next_schedule_ms().await.ok().flatten();
        let until = next.map_or(poll, |at| {
            let ms = at.saturating_sub(nexo_store::now_ms()).max(10).unsigned_abs();
            poll.min(std::time::Duration::from_millis(ms))
        });
        tokio::time::sleep(until).await;
    }
}

/// Fires the occurrences due by now, each once across every node: at most
/// [`FIRED_PER_TICK`] schedules, one occurrence each (a schedule behind by
/// several is caught up over ticks). Answers how many runs it started.
/// A schedule whose firing fails is left as it is, for the next tick.
pub async fn tick(store: &dyn Store) -> usize {
    let now = nexo_store::now_ms();
    let due = match store.due_schedules(now, FIRED_PER_TICK).await {
        Ok(due) => due,
        Err(e) => {
            tracing::warn!(target: "nexo::schedules", "cannot read the due schedules: {e}");
            return 0;
        }
    };
    let mut started = 0;
    for schedule in due {
        let fired = match fire(store, &schedule, now).await {
            Err(e) => {
                tracing::warn!(target: "nexo::schedules", schedule = %schedule.id, "cannot fire now: {e}");
                // Moved on a little, so a failing schedule neither holds the
                // head of the queue nor is tried at every tick.
                let note = format!("could not fire at {}: {e}; tried again shortly", schedule.next_ms);
                let retry = Firing { due_ms: schedule.next_ms, next_ms: now + RETRY_MS, run: None, skipped: 0, note };
                store.fire_schedule(&schedule.id, retry).await.map_err(ScheduleError::from)
            }
            fired => fired,
        };
        match fired {
            Ok(FireOutcome::Fired(Some(run))) => {
                started += 1;
                tracing::info!(target: "nexo::schedules", schedule = %schedule.id, run = %run.id, "started a scheduled run");
                if let Some(tenant) = &run.tenant {
                    // As a tenant's `POST /v1/runs` counts and audits its run.
                    let _ = store.add_usage(tenant, now, 1, nexo_store::RunUsage::default()).await;
                    let detail = json!({"run": run.id, "plugin": run.component_sha256, "schedule": schedule.id});
                    if let Err(e) = store.append_audit(tenant, "run.started", &detail, now).await {
                        tracing::warn!(target: "nexo::schedules", run = %run.id, "cannot audit the run's start: {e}");
                    }
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(target: "nexo::schedules", schedule = %schedule.id, "cannot fire: {e}"),
        }
    }
    started
}

/// Fires `schedule`'s due occurrence at `now`.
async fn fire(store: &dyn Store, schedule: &Schedule, now: i64) -> Result<FireOutcome, ScheduleError> {
    let cron = Cron::parse(&schedule.cron, &schedule.timezone)?;
    let due = schedule.next_ms;
    let on_time = now - due <= MISSED_GRACE_MS;
    // Late past the grace: every occurrence up to now was missed, and the
    // next is the first to come. With none to come the schedule ends.
    let (next, missed) =
        if on_time { (cron.next_after(due), 0) } else { (cron.next_after(now), count_between(&cron, due, now)) };
    let (run, skipped, note) = match (on_time, schedule.missed) {
        (false, Missed::Skip) => (false, missed, format!("skipped {missed} occurrence(s) missed while no node was up")),
        (false, Missed::RunOnce) => {
            (true, missed.saturating_sub(1), format!("one run for {missed} occurrence(s) missed while no node was up"))
        }
        (true, _) => (true, 0, "started its run".to_string()),
    };
    let (run, skipped, note) = match (run, admitted(store, schedule, now).await?) {
        (true, Err(why)) => (false, skipped + 1, format!("skipped: {why}")),
        (run, _) => (run, skipped, note),
    };
    let (next, note) = match next {
        Some(next) => (next, note),
        None => (nexo_store::NEVER_MS, format!("{note}; the expression has no occurrence to come, so it ended")),
    };
    let run = run.then(|| occurrence_run(schedule, now));
    Ok(store.fire_schedule(&schedule.id, Firing { due_ms: due, next_ms: next, run, skipped, note }).await?)
}

/// How many occurrences of `cron` fall in `from..=to` (at most 10,000:
/// past that the count says "at least").
fn count_between(cron: &Cron, from: i64, to: i64) -> i64 {
    let mut n = 1;
    let mut at = from;
    while let Some(next) = cron.next_after(at).filter(|&t| t <= to) {
        n += 1;
        at = next;
        if n >= 10_000 {
            break;
        }
    }
    n
}

/// The run an occurrence starts from `schedule`'s template, with its
/// start job.
fn occurrence_run(schedule: &Schedule, now: i64) -> (NewRun, nexo_store::NewJob) {
    let t = &schedule.template;
    let run = NewRun {
        id: nexo_store::new_run_id(),
        agent: t.agent.clone(),
        kind: t.kind.clone(),
        source: t.source.clone(),
        component_sha256: t.component_sha256.clone(),
        input: t.input.clone(),
        grant: t.grant.clone(),
        status: RunStatus::Queued,
        lease: None,
        created_ms: now,
        session: None,
        tenant: schedule.tenant.clone(),
    };
    let payload = json!({"run": run.id, "schedule": schedule.id, "occurrence": schedule.next_ms});
    let start = new_job(&run.id, JobKind::Start, payload);
    (run, start)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nexo_store::{Runs as _, Schedules as _};

    #[test]
    fn a_cron_expression_is_read_in_its_time_zone() {
        // 2026-03-29 is when Paris moves to summer time (UTC+2).
        let cron = Cron::parse("0 9 * * *", "Europe/Paris").unwrap();
        let before = chrono::Utc.with_ymd_and_hms(2026, 3, 28, 12, 0, 0).unwrap().timestamp_millis();
        let next = cron.next_after(before).unwrap();
        assert_eq!(next, chrono::Utc.with_ymd_and_hms(2026, 3, 29, 7, 0, 0).unwrap().timestamp_millis());
        let every_second = Cron::parse("* * * * * *", "UTC").unwrap();
        assert_eq!(every_second.next_after(1_000), Some(2_000));
        assert_eq!(count_between(&every_second, 1_000, 10_000), 10);
    }

    /// A schedule every minute whose next occurrence was due `late_ms` ago.
    async fn behind(store: &nexo_store::MemoryStore, missed: Missed, late_ms: i64) -> Schedule {
        let now = nexo_store::now_ms();
        let new = NewSchedule {
            id: nexo_store::new_schedule_id(),
            tenant: None,
            cron: "* * * * *".into(),
            timezone: "UTC".into(),
            missed,
            next_ms: now,
            template: RunTemplate {
                agent: "a".into(),
                kind: "component".into(),
                source: "a.wasm".into(),
                component_sha256: "ab".repeat(32),
                input: "go".into(),
                grant: json!({}),
            },
            created_ms: now,
        };
        let s = store.add_schedule(new).await.unwrap();
        // Resumed at a time long past: as if every node was down since.
        store.set_schedule_paused(&s.id, false, now - late_ms).await.unwrap()
    }

    #[tokio::test]
    async fn occurrences_missed_while_no_node_was_up_are_skipped_or_run_once_as_the_schedule_says() {
        let store = nexo_store::MemoryStore::new();
        let skip = behind(&store, Missed::Skip, 10 * 60_000).await;
        let once = behind(&store, Missed::RunOnce, 10 * 60_000).await;
        let on_time = behind(&store, Missed::Skip, 5_000).await;
        assert_eq!(tick(&store).await, 2, "one run for `run-once`, one for the occurrence on time");
        let now = nexo_store::now_ms();
        let skip = store.schedule(&skip.id).await.unwrap().unwrap();
        assert_eq!((skip.started, skip.last_run.as_deref()), (0, None));
        assert!(skip.skipped >= 10 && skip.next_ms > now, "{skip:?}");
        assert!(skip.note.as_deref().is_some_and(|n| n.starts_with("skipped")), "{skip:?}");
        let once = store.schedule(&once.id).await.unwrap().unwrap();
        assert_eq!(once.started, 1);
        assert!(once.skipped >= 9 && once.next_ms > now, "one run stands for all: {once:?}");
        let run = store.run(once.last_run.as_deref().unwrap()).await.unwrap().unwrap();
        assert_eq!((run.status, run.input.as_str()), (RunStatus::Queued, "go"));
        // On time (late by less than the grace): fired as it was due, and the
        // next is the occurrence after it, even if that too is past.
        let on_time = store.schedule(&on_time.id).await.unwrap().unwrap();
        assert_eq!((on_time.started, on_time.skipped), (1, 0));
        assert!(on_time.next_ms <= now + 60_000, "{on_time:?}");
    }

    #[test]
    fn the_next_occurrence_is_strictly_later_on_a_whole_second_even_when_a_clock_goes_back() {
        let every_ten = Cron::parse("*/10 * * * *", "Europe/Paris").unwrap();
        // 2026-10-25 01:05 UTC is 02:05 in Paris the second time round.
        let at = chrono::Utc.with_ymd_and_hms(2026, 10, 25, 1, 5, 0).unwrap().timestamp_millis() + 789;
        let next = every_ten.next_after(at).unwrap();
        assert!(next > at, "{next} is not after {at}");
        assert_eq!(next, chrono::Utc.with_ymd_and_hms(2026, 10, 25, 1, 10, 0).unwrap().timestamp_millis());
        let daily = Cron::parse("0 9 * * *", "UTC").unwrap();
        assert_eq!(daily.next_after(at).unwrap() % 1000, 0, "on a whole second");
        // A year field would let a schedule end unseen.
        assert!(Cron::parse("0 0 9 * * * 2026", "UTC").is_err());
    }

    #[test]
    fn a_bad_expression_or_zone_says_what_would_do() {
        let e = Cron::parse("every day", "UTC").unwrap_err().to_string();
        assert!(e.contains("`every day` is not valid") && e.contains("five fields"), "{e}");
        let e = Cron::parse("0 9 * * *", "Mars/Olympus").unwrap_err().to_string();
        assert!(e.contains("`Mars/Olympus`") && e.contains("IANA"), "{e}");
    }
}
