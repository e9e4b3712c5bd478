//! What every store is, whatever it keeps: where it is and its connections.

use crate::StoreResult;

/// What every backend answers besides what it keeps: where it is, and
/// its connections opened ahead of use.
#[async_trait::async_trait]
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// Where it is, for messages (a URL without its password).
    fn location(&self) -> String;

    /// Opens now every connection the store would otherwise open on first
    /// use. A long-lived server calls it at start, from one of its own
    /// threads: an SQLite connection is served by a thread of its own,
    /// which takes its priority from the thread that opened it (see
    /// `nexo::priority`), and the store's connections serve the API.
    /// Backends without such threads do nothing.
    async fn connect_all(&self) -> StoreResult<()> {
        Ok(())
    }

    /// Calls `on_due` whenever another process may have made a job due (a
    /// job queued, a signal's wake), until the watch drops: a worker then
    /// claims at once rather than at its next poll, which stays the
    /// backstop (a notification lost while the watch reconnects is found
    /// there). `None` where the backend has no such notification (SQLite,
    /// whose writers are this process's; the memory store).
    async fn watch_jobs(&self, on_due: std::sync::Arc<dyn Fn() + Send + Sync>) -> StoreResult<Option<crate::JobWatch>> {
        let _ = on_due;
        Ok(None)
    }
}
