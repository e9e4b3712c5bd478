//! The audit anchor: every tenant's audit head, written by `nexo serve` to
//! an append-only file next to its data (`DATA/audit-anchor`), outside the
//! database, so that `nexo audit verify --anchor FILE` finds a log cut
//! short with its head set back to match ([`nexo_store::AuditAnchor`]).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use nexo_store::{AuditAnchor, Store};
use tokio::sync::watch;

/// How often the heads are read and new ones anchored: an entry is
/// protected at most this long after it is written.
pub const EVERY: Duration = Duration::from_secs(1);

/// The anchor file's name in the data directory.
pub const FILE: &str = "audit-anchor";

/// Opens the anchor file in `data_dir`.
pub fn open(data_dir: &Path) -> Result<Arc<AuditAnchor>, nexo_store::AnchorError> {
    AuditAnchor::open(&data_dir.join(FILE)).map(Arc::new)
}

/// Anchors the heads every [`EVERY`] until `stop` is set, then once more.
pub async fn keep(store: Arc<dyn Store>, anchor: Arc<AuditAnchor>, mut stop: watch::Receiver<bool>) {
    loop {
        anchor_once(&*store, &anchor).await;
        if *stop.borrow() {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(EVERY) => {}
            _ = stop.changed() => {}
        }
    }
}

/// Reads every tenant's head and appends the new ones, durably (on a
/// blocking thread: the file is synced). A failure is logged: the next
/// round tries again.
pub async fn anchor_once(store: &dyn Store, anchor: &Arc<AuditAnchor>) {
    let heads = match store.audit_heads().await {
        Ok(heads) => heads,
        Err(e) => {
            tracing::warn!(target: "nexo::server", "cannot read the audit heads to anchor them: {e}");
            return;
        }
    };
    let anchor = anchor.clone();
    match tokio::task::spawn_blocking(move || anchor.record(&heads)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::error!(target: "nexo::server", "{e}"),
        Err(e) => tracing::error!(target: "nexo::server", "the audit anchor's writer failed: {e}"),
    }
}
