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

/// Opens the anchor file in `data_dir`, saying what `open` repaired, and
/// warning when it is new while the store already holds audit entries:
/// those logs were not anchored until now.
pub async fn open(data_dir: &Path, store: &dyn Store) -> Result<Arc<AuditAnchor>, nexo_store::AnchorError> {
    let anchor = AuditAnchor::open(&data_dir.join(FILE))?;
    let path = anchor.path().display().to_string();
    if anchor.repaired() > 0 {
        tracing::warn!(
            target: "nexo::server",
            "the last line of the audit anchor file {path} was cut short by a crash ({} bytes); it was removed",
            anchor.repaired()
        );
    }
    if anchor.created()
        && let Ok(heads) = store.audit_heads().await
        && heads.iter().any(|(_, seq, _)| *seq > 0)
    {
        tracing::warn!(
            target: "nexo::server",
            "the audit anchor file {path} is new, but the store already holds audit entries: a log cut short \
             before now cannot be detected (was the anchor file deleted or the data directory changed?)"
        );
    }
    Ok(Arc::new(anchor))
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
    let (heads, odd): (Vec<_>, Vec<_>) =
        heads.into_iter().partition(|(tenant, _, _)| nexo_store::is_anchorable_tenant(tenant));
    for (tenant, _, _) in odd {
        tracing::warn!(target: "nexo::server", "the tenant id {tenant:?} cannot be written to the audit anchor; skipped");
    }
    let anchor = anchor.clone();
    match tokio::task::spawn_blocking(move || anchor.record(&heads)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::error!(target: "nexo::server", "{e}"),
        Err(e) => tracing::error!(target: "nexo::server", "the audit anchor's writer failed: {e}"),
    }
}
