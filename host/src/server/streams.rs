//! The event streams open on this node: each tenant's count, held under
//! its cap, and an end for every stream of a key or of a tenant at once
//! (a revoked key, a disabled tenant).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// Open streams on this node, by tenant.
#[derive(Debug, Default)]
pub struct Streams {
    open: Mutex<HashMap<String, HashMap<u64, Open>>>,
    next: AtomicU64,
}

#[derive(Debug)]
struct Open {
    key: String,
    end: Arc<End>,
}

/// Set when a stream must end now.
#[derive(Debug, Default)]
pub struct End {
    ended: AtomicBool,
    notify: Notify,
}

impl End {
    fn fire(&self) {
        self.ended.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    /// Whether the stream must end.
    pub fn is_ended(&self) -> bool {
        self.ended.load(Ordering::SeqCst)
    }

    /// Completes once the stream must end.
    pub async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            if self.is_ended() {
                return;
            }
            notified.await;
        }
    }
}

/// One open stream; dropping it (the client went away, or the stream
/// ended) frees its place under the tenant's cap.
#[derive(Debug)]
pub struct Slot {
    streams: Arc<Streams>,
    tenant: String,
    id: u64,
    /// Fired when the stream must end.
    pub end: Arc<End>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.streams.lock();
        if let Some(mine) = open.get_mut(&self.tenant) {
            mine.remove(&self.id);
            if mine.is_empty() {
                open.remove(&self.tenant);
            }
        }
    }
}

impl Streams {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<u64, Open>>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens a stream of `tenant`'s, by `key`, if the tenant has fewer than
    /// `cap` open here; otherwise the number it has open.
    pub fn open(self: &Arc<Self>, tenant: &str, key: &str, cap: u64) -> Result<Slot, usize> {
        let mut open = self.lock();
        let mine = open.entry(tenant.to_string()).or_default();
        if u64::try_from(mine.len()).unwrap_or(u64::MAX) >= cap {
            return Err(mine.len());
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let end = Arc::new(End::default());
        mine.insert(id, Open { key: key.to_string(), end: end.clone() });
        Ok(Slot { streams: self.clone(), tenant: tenant.to_string(), id, end })
    }

    /// Ends every stream opened with `key`; answers how many.
    pub fn end_key(&self, key: &str) -> usize {
        let open = self.lock();
        let ended = open.values().flat_map(|m| m.values()).filter(|o| o.key == key).inspect(|o| o.end.fire());
        ended.count()
    }

    /// Ends every stream of `tenant`; answers how many.
    pub fn end_tenant(&self, tenant: &str) -> usize {
        let open = self.lock();
        open.get(tenant).map_or(0, |m| m.values().inspect(|o| o.end.fire()).count())
    }

    /// How many streams `tenant` has open here.
    #[cfg(test)]
    fn count(&self, tenant: &str) -> usize {
        self.lock().get(tenant).map_or(0, HashMap::len)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::time::Duration;

    #[test]
    fn a_tenant_opens_up_to_its_cap_and_a_closed_stream_frees_a_place() {
        let streams = Arc::new(Streams::default());
        let a = streams.open("t1", "k1", 2).unwrap();
        let _b = streams.open("t1", "k1", 2).unwrap();
        assert_eq!(streams.open("t1", "k2", 2).unwrap_err(), 2);
        let _other = streams.open("t2", "k3", 2).unwrap();
        drop(a);
        assert_eq!(streams.count("t1"), 1);
        assert!(streams.open("t1", "k2", 2).is_ok());
    }

    #[tokio::test]
    async fn revoking_a_key_ends_its_streams_only() {
        let streams = Arc::new(Streams::default());
        let (a, b, c) = (
            streams.open("t1", "k1", 9).unwrap(),
            streams.open("t1", "k2", 9).unwrap(),
            streams.open("t2", "k3", 9).unwrap(),
        );
        let waiting = tokio::spawn({
            let end = a.end.clone();
            async move { end.wait().await }
        });
        assert_eq!(streams.end_key("k1"), 1);
        tokio::time::timeout(Duration::from_secs(5), waiting).await.unwrap().unwrap();
        assert!(!b.end.is_ended() && !c.end.is_ended());
        assert_eq!(streams.end_tenant("t1"), 2);
        assert!(b.end.is_ended() && !c.end.is_ended());
        // Ended after the fact: a late waiter returns at once.
        tokio::time::timeout(Duration::from_millis(100), b.end.wait()).await.unwrap();
    }
}
