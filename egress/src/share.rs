//! A share of the egress proxy's connections: how many one holder (a
//! tenant on this node) keeps open at once through all its proxies, so
//! that one tenant's commands and servers holding idle tunnels cannot take
//! the node's connections from the others.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A cap on connections open at once, drawn on by every proxy that carries
/// it ([`crate::ProxyPolicy::share`]); a connection past it is answered
/// 503 and never opened upstream.
#[derive(Debug)]
pub struct ConnectionShare {
    cap: AtomicUsize,
    open: AtomicUsize,
}

impl ConnectionShare {
    /// A share of `cap` connections, none open.
    pub fn new(cap: usize) -> Arc<ConnectionShare> {
        Arc::new(ConnectionShare { cap: AtomicUsize::new(cap), open: AtomicUsize::new(0) })
    }

    /// The most open at once.
    pub fn cap(&self) -> usize {
        self.cap.load(Ordering::Acquire)
    }

    /// Changes the most open at once: a lower cap takes no connection
    /// away, but none opens until fewer than it are open.
    pub fn set_cap(&self, cap: usize) {
        self.cap.store(cap, Ordering::Release);
    }

    /// The connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// One connection of the share, given back when the [`Held`] drops;
    /// `None` when all are open.
    pub(crate) fn take(self: &Arc<Self>) -> Option<Held> {
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.cap()).then_some(n + 1))
            .ok()
            .map(|_| Held(Arc::clone(self)))
    }
}

/// One connection of a [`ConnectionShare`], open while this lives.
pub(crate) struct Held(Arc<ConnectionShare>);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_up_to_its_cap_and_gives_back_what_drops() {
        let share = ConnectionShare::new(2);
        let (a, b) = (share.take(), share.take());
        assert!(a.is_some() && b.is_some());
        assert!(share.take().is_none(), "a third past a cap of two");
        assert_eq!(share.open(), 2);
        drop(a);
        assert_eq!(share.open(), 1);
        let again = share.take();
        assert!(again.is_some(), "the one given back is taken again");
        assert!(ConnectionShare::new(0).take().is_none());
        share.set_cap(1);
        drop(again);
        assert!(share.take().is_none(), "lowered, none opens until fewer than the cap are open");
        share.set_cap(3);
        assert!(share.take().is_some(), "raised, one more opens at once");
    }
}
