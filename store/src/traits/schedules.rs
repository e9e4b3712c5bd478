//! Schedules: run templates started at each occurrence, exactly once.

use crate::{Firing, NewSchedule, Run, Schedule, StoreResult};

/// Schedules. Every method is one transaction.
#[async_trait::async_trait]
pub trait Schedules: Send + Sync {
    /// Records a new schedule. A taken id is a
    /// [`StoreError::Conflict`](crate::StoreError::Conflict); a tenant that is not there,
    /// [`StoreError::NoTenant`](crate::StoreError::NoTenant).
    async fn add_schedule(&self, new: NewSchedule) -> StoreResult<Schedule>;

    /// One schedule.
    async fn schedule(&self, id: &str) -> StoreResult<Option<Schedule>>;

    /// Schedules, oldest first, at most `limit`: those of `tenant` when
    /// given, else all.
    async fn schedules(&self, tenant: Option<&str>, limit: usize) -> StoreResult<Vec<Schedule>>;

    /// Pauses (`paused`) or resumes a schedule; a resumed one's next
    /// occurrence is `next_ms`. Answers it as it now is;
    /// [`StoreError::NoSchedule`](crate::StoreError::NoSchedule) if it is not there.
    async fn set_schedule_paused(&self, id: &str, paused: bool, next_ms: i64) -> StoreResult<Schedule>;

    /// Deletes a schedule (the runs it started stay).
    /// [`StoreError::NoSchedule`](crate::StoreError::NoSchedule) if it is not there.
    async fn delete_schedule(&self, id: &str) -> StoreResult<()>;

    /// The schedules not paused whose next occurrence is due by `now_ms`,
    /// the earliest first, at most `limit`.
    async fn due_schedules(&self, now_ms: i64, limit: usize) -> StoreResult<Vec<Schedule>>;

    /// When the next occurrence of any schedule not paused is due.
    async fn next_schedule_ms(&self) -> StoreResult<Option<i64>>;

    /// Fires schedule `id`'s occurrence `firing.due_ms`: moves its next
    /// occurrence to `firing.next_ms` and records `firing.run` with its
    /// start job, in one transaction, only if the schedule still holds
    /// that occurrence and is not paused; otherwise (another node fired it
    /// first, or it was paused or deleted) nothing is written. A run the
    /// store refuses (its tenant is gone) refuses the whole firing.
    async fn fire_schedule(&self, id: &str, firing: Firing) -> StoreResult<FireOutcome>;
}

/// What [`Schedules::fire_schedule`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum FireOutcome {
    /// It fired the occurrence, starting this run (if any).
    Fired(Option<Box<Run>>),
    /// Nothing: the occurrence was fired by another, or the schedule was
    /// paused or deleted.
    Passed,
}
