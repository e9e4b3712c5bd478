//! Signals in SQL: sent in one transaction with the run's row (locked on
//! PostgreSQL) and its wake, read by id.

use super::{Dialect, SqlStore};
use crate::rows::{self, Columns as _};
use crate::signals::{check_signal, child_outcome, child_signal, waits_for};
use crate::{Run, Signal, SignalWait, StoreResult, now_ms, sql};

impl<D: Dialect> SqlStore<D> {
    /// [`crate::Runs::send_signal`] in `conn`'s transaction.
    pub(super) async fn send_signal_in(
        &self,
        conn: &mut D::Conn,
        id: &str,
        name: &str,
        data: &str,
    ) -> StoreResult<Signal> {
        // The run's lock orders this send with the pass that suspends it:
        // either the suspension sees the signal, or this sees the wait.
        let run = self.run_to_write(conn, id).await?;
        let sent = self.one(conn, sql::COUNT_SIGNALS, &[id.into()]).await?;
        let sent = sent.int_at(0).map_err(|e| self.error(&e))?;
        check_signal(&run, name, data, sent)?;
        self.signal_in(conn, &run, name, data).await
    }

    /// Records signal `name` with `data` for `run` (its row locked where
    /// rows are) and, if it waits for it, makes its wake due now; unchecked.
    async fn signal_in(&self, conn: &mut D::Conn, run: &Run, name: &str, data: &str) -> StoreResult<Signal> {
        let id = run.id.as_str();
        let at = now_ms();
        let row = self.one(conn, sql::INSERT_SIGNAL, &[id.into(), name.into(), data.into(), at.into()]).await?;
        let signal_id = row.int_at(0).map_err(|e| self.error(&e))?;
        let event = serde_json::json!({ "name": name, "signal": signal_id }).to_string();
        self.execute(conn, sql::APPEND_EVENT, &[id.into(), "signal".into(), (&event).into(), at.into()]).await?;
        if waits_for(run, name) {
            self.execute(conn, sql::WAKE_NOW, &[id.into(), at.into()]).await?;
            self.notify_jobs_in(conn).await?;
        }
        Ok(Signal { id: signal_id, run: id.to_string(), name: name.to_string(), data: data.to_string(), sent_ms: at })
    }

    /// What a run's end does beyond its own row: a child's end is its
    /// parent's signal (the parent's row locked after the child's, the
    /// order every writer takes them in: see `cancel_in`).
    pub(super) async fn ended_in(&self, conn: &mut D::Conn, run: &Run) -> StoreResult<()> {
        let Some(parent) = &run.parent else { return Ok(()) };
        let parent = match self.run_to_write(conn, parent).await {
            Ok(parent) => parent,
            Err(crate::StoreError::NoRun(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        self.signal_in(conn, &parent, &child_signal(&run.id), &child_outcome(run)).await?;
        Ok(())
    }

    /// Whether a signal `wait` waits for was sent already: then its wake is
    /// due now rather than at its timeout.
    pub(super) async fn signal_came_in(&self, conn: &mut D::Conn, id: &str, wait: &SignalWait) -> StoreResult<bool> {
        let args = &[id.into(), (&wait.name).into(), wait.after.into()];
        Ok(self.optional(conn, sql::NEXT_SIGNAL, args).await?.is_some())
    }

    /// [`crate::Runs::next_signal`].
    pub(super) async fn next_signal_of(&self, id: &str, name: &str, after: i64) -> StoreResult<Option<Signal>> {
        let row = self.read_optional(sql::NEXT_SIGNAL, &[id.into(), name.into(), after.into()]).await?;
        row.map(|row| self.decode(|errors| rows::signal(&row, errors))).transpose()
    }
}
