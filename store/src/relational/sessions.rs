//! [`Sessions`] over SQL: remembering instances and their threads.

use serde_json::Value;

use super::{Dialect, SqlStore, limit};
use crate::rows;
use crate::sessions::{counts, not_appended};
use crate::sql;
use crate::{Run, Session, Sessions, StoreResult, new_session_id};

impl<D: Dialect> SqlStore<D> {
    /// Appends to session `id`'s thread if it holds `expected` messages.
    /// Where rows are locked, the update holds the session's row until the
    /// transaction ends: a racing append waits for it, then finds the new
    /// count and writes nothing.
    pub(super) async fn append_thread_in(
        &self,
        conn: &mut D::Conn,
        id: &str,
        expected: u64,
        messages: Vec<Value>,
        now: i64,
    ) -> StoreResult<Session> {
        let (before, after) = counts(expected, messages.len())?;
        let row =
            self.optional(conn, sql::ADVANCE_THREAD, &[id.into(), before.into(), after.into(), now.into()]).await?;
        let Some(row) = row else { return Err(not_appended(id, expected, self.fetch_session(conn, id).await?)) };
        let session = self.decode_session(&row)?;
        self.db.append_messages(conn, id, before, &messages).await?;
        Ok(session)
    }
}

#[async_trait::async_trait]
impl<D: Dialect> Sessions for SqlStore<D> {
    async fn open_session(&self, agent: &str, instance: &str, now: i64) -> StoreResult<Session> {
        // One upsert: of concurrent opens one inserts, the others wait for
        // its row and then touch it, so all of them return the same session.
        let id = new_session_id();
        let mut conn = self.db.single().await?;
        let row =
            self.one(&mut conn, sql::OPEN_SESSION, &[(&id).into(), agent.into(), instance.into(), now.into()]).await;
        let result = row.and_then(|row| self.decode_session(&row));
        self.db.end(conn, result).await
    }

    async fn session(&self, agent: &str, instance: &str) -> StoreResult<Option<Session>> {
        let row = self.read_optional(sql::SELECT_SESSION, &[agent.into(), instance.into()]).await?;
        row.map(|r| self.decode_session(&r)).transpose()
    }

    async fn session_by_id(&self, id: &str) -> StoreResult<Option<Session>> {
        let mut conn = self.db.read().await?;
        self.fetch_session(&mut conn, id).await
    }

    async fn sessions(&self, agent: Option<&str>, count: usize) -> StoreResult<Vec<Session>> {
        let rows = match agent {
            Some(a) => self.read_all(sql::LIST_SESSIONS_BY_AGENT, &[a.into(), limit(count).into()]).await?,
            None => self.read_all(sql::LIST_SESSIONS, &[limit(count).into()]).await?,
        };
        rows.iter().map(|r| self.decode_session(r)).collect()
    }

    async fn sessions_with_prefix(&self, prefix: &str, count: usize) -> StoreResult<Vec<Session>> {
        let Some(end) = prefix_end(prefix) else { return self.sessions(None, count).await };
        let rows =
            self.read_all(sql::LIST_SESSIONS_IN_RANGE, &[prefix.into(), (&end).into(), limit(count).into()]).await?;
        rows.iter().map(|r| self.decode_session(r)).collect()
    }

    async fn thread(&self, id: &str) -> StoreResult<Vec<Value>> {
        let rows = self.read_all(sql::THREAD, &[id.into()]).await?;
        rows.iter().map(|row| self.decode(|errors| rows::message(id, row, errors))).collect()
    }

    async fn append_thread(&self, id: &str, expected: u64, messages: Vec<Value>, now: i64) -> StoreResult<Session> {
        let mut tx = self.db.begin().await?;
        let result = self.append_thread_in(&mut tx, id, expected, messages, now).await;
        self.db.end(tx, result).await
    }

    async fn session_runs(&self, id: &str) -> StoreResult<Vec<Run>> {
        let rows = self.read_all(sql::SESSION_RUNS, &[id.into()]).await?;
        self.decode_runs(&rows)
    }

    async fn delete_session(&self, id: &str) -> StoreResult<bool> {
        let mut conn = self.db.single().await?;
        let deleted = self.execute(&mut conn, sql::DELETE_SESSION, &[id.into()]).await;
        self.db.end(conn, deleted.map(|rows| rows > 0)).await
    }

    async fn expire_sessions(&self, updated_before_ms: i64) -> StoreResult<Vec<String>> {
        let mut ids = if D::LOCKS_ROWS {
            // Lock the candidates first, as a new prompt or a retry locks its
            // session; the delete, a statement of its own, then sees every
            // run committed before the locks were granted.
            let mut tx = self.db.begin().await?;
            let result = async {
                let candidates =
                    self.texts(&mut tx, sql::EXPIRY_CANDIDATES_LOCKED, &[updated_before_ms.into()]).await?;
                if candidates.is_empty() {
                    return Ok(Vec::new());
                }
                self.texts(&mut tx, sql::EXPIRE_IDLE_AMONG, &[candidates[..].into()]).await
            }
            .await;
            self.db.end(tx, result).await?
        } else {
            // One statement: its check for prompts in progress and its delete
            // run under the same write lock.
            let mut conn = self.db.single().await?;
            let ids = self.texts(&mut conn, sql::EXPIRE_SESSIONS, &[updated_before_ms.into()]).await;
            self.db.end(conn, ids).await?
        };
        ids.sort();
        Ok(ids)
    }
}

/// The first string after every string that starts with `prefix`, in byte
/// order (`"t1/"` gives `"t10"`): the end of a prefix's range in an index.
/// `None` if there is none (an empty prefix, or one of `char::MAX`s).
fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        // The next scalar value, past the surrogates.
        let next = (u32::from(last) + 1..=u32::from(char::MAX)).find_map(char::from_u32);
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_prefix_range_ends_at_the_next_string() {
        assert_eq!(super::prefix_end("t1/").as_deref(), Some("t10"));
        assert_eq!(super::prefix_end("a✓").as_deref(), Some("a✔"));
        assert_eq!(super::prefix_end("a\u{d7ff}").as_deref(), Some("a\u{e000}"), "past the surrogates");
        assert_eq!(super::prefix_end("a\u{10ffff}").as_deref(), Some("b"));
        assert_eq!(super::prefix_end(""), None);
        assert_eq!(super::prefix_end("\u{10ffff}"), None);
    }
}
