//! Schedules in SQL: an occurrence fires in one transaction that moves the
//! schedule on only if it still holds that occurrence.

use super::{Arg, Dialect, SqlStore, limit};
use crate::rows::{self, Columns as _};
use crate::traits::FireOutcome;
use crate::{Firing, NewSchedule, Schedule, Schedules, StoreError, StoreResult, now_ms, sql};

impl<D: Dialect> SqlStore<D> {
    fn decode_schedules(&self, rows: &[D::Row]) -> StoreResult<Vec<Schedule>> {
        rows.iter().map(|row| self.decode(|errors| rows::schedule(row, errors))).collect()
    }

    async fn fire_in(&self, conn: &mut D::Conn, id: &str, firing: Firing) -> StoreResult<FireOutcome> {
        let started = i64::from(firing.run.is_some());
        let run_id = firing.run.as_ref().map(|(run, _)| run.id.clone());
        let args: &[Arg<'_>] = &[
            id.into(),
            firing.due_ms.into(),
            firing.next_ms.into(),
            started.into(),
            firing.skipped.into(),
            (&run_id).into(),
            (&firing.note).into(),
            now_ms().into(),
        ];
        if self.execute(conn, sql::FIRE_SCHEDULE, args).await? == 0 {
            return Ok(FireOutcome::Passed);
        }
        let Some((new, start)) = firing.run else { return Ok(FireOutcome::Fired(None)) };
        if let Some(tenant) = &new.tenant {
            self.check_tenant(conn, tenant).await?;
        }
        let run = self.create_run_in(conn, new.into_run()).await?;
        self.enqueue_in(conn, start).await?;
        Ok(FireOutcome::Fired(Some(Box::new(run))))
    }
}

#[async_trait::async_trait]
impl<D: Dialect> Schedules for SqlStore<D> {
    async fn add_schedule(&self, new: NewSchedule) -> StoreResult<Schedule> {
        let t = &new.template;
        let grant = t.grant.to_string();
        let args: &[Arg<'_>] = &[
            (&new.id).into(),
            (&new.tenant).into(),
            (&new.cron).into(),
            (&new.timezone).into(),
            new.missed.as_str().into(),
            0i64.into(),
            new.next_ms.into(),
            (&t.agent).into(),
            (&t.kind).into(),
            (&t.source).into(),
            (&t.component_sha256).into(),
            (&t.input).into(),
            (&grant).into(),
            new.created_ms.into(),
            new.created_ms.into(),
            0i64.into(),
            0i64.into(),
            None::<&str>.into(),
            None::<&str>.into(),
        ];
        let mut conn = self.db.single().await?;
        let result = match super::run::<D>(&mut conn, sql::INSERT_SCHEDULE, args).await {
            Ok(0) => Err(StoreError::Conflict(format!("a schedule `{}` exists already", new.id))),
            Ok(_) => Ok(()),
            Err(sqlx::Error::Database(db)) if db.is_foreign_key_violation() => {
                Err(StoreError::NoTenant(new.tenant.clone().unwrap_or_default()))
            }
            Err(e) => Err(self.error(&e)),
        };
        self.db.end(conn, result).await?;
        self.schedule(&new.id).await?.ok_or_else(|| StoreError::NoSchedule(new.id.clone()))
    }

    async fn schedule(&self, id: &str) -> StoreResult<Option<Schedule>> {
        let row = self.read_optional(sql::SELECT_SCHEDULE, &[id.into()]).await?;
        row.map(|row| self.decode(|errors| rows::schedule(&row, errors))).transpose()
    }

    async fn schedules(&self, tenant: Option<&str>, count: usize) -> StoreResult<Vec<Schedule>> {
        let rows = match tenant {
            Some(t) => self.read_all(sql::LIST_TENANT_SCHEDULES, &[t.into(), limit(count).into()]).await?,
            None => self.read_all(sql::LIST_SCHEDULES, &[limit(count).into()]).await?,
        };
        self.decode_schedules(&rows)
    }

    async fn set_schedule_paused(&self, id: &str, paused: bool, next_ms: i64) -> StoreResult<Schedule> {
        let args: &[Arg<'_>] = &[id.into(), i64::from(paused).into(), next_ms.into(), now_ms().into()];
        let mut conn = self.db.single().await?;
        let result = self.execute(&mut conn, sql::SET_SCHEDULE_PAUSED, args).await;
        if self.db.end(conn, result).await? == 0 {
            return Err(StoreError::NoSchedule(id.to_string()));
        }
        self.schedule(id).await?.ok_or_else(|| StoreError::NoSchedule(id.to_string()))
    }

    async fn delete_schedule(&self, id: &str) -> StoreResult<()> {
        let mut conn = self.db.single().await?;
        let result = self.execute(&mut conn, sql::DELETE_SCHEDULE, &[id.into()]).await;
        match self.db.end(conn, result).await? {
            0 => Err(StoreError::NoSchedule(id.to_string())),
            _ => Ok(()),
        }
    }

    async fn due_schedules(&self, now: i64, count: usize) -> StoreResult<Vec<Schedule>> {
        let rows = self.read_all(sql::DUE_SCHEDULES, &[now.into(), limit(count).into()]).await?;
        self.decode_schedules(&rows)
    }

    async fn next_schedule_ms(&self) -> StoreResult<Option<i64>> {
        let mut conn = self.db.read().await?;
        let row = self.one(&mut conn, sql::NEXT_SCHEDULE, &[]).await?;
        row.maybe_int("next").map_err(|e| self.error(&e))
    }

    async fn fire_schedule(&self, id: &str, firing: Firing) -> StoreResult<FireOutcome> {
        let mut tx = self.db.begin().await?;
        let result = self.fire_in(&mut tx, id, firing).await;
        self.db.end(tx, result).await
    }
}
