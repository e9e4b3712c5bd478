//! A run's stop signal: what the journal sets when a run is halted and the
//! engine checks at every epoch tick, below both so that neither depends on
//! the other for it.

/// A signal that stops a running guest at its next epoch tick, however it
/// spins and however long it was told to wait for its CPU share: a
/// recorded run's journal sets it when the run is halted (cancelled, its
/// lease lost, its journal unwritable).
#[derive(Debug, Default)]
pub struct Stop {
    set: std::sync::atomic::AtomicBool,
    notify: tokio::sync::Notify,
}

impl Stop {
    /// Stops the guest; it cannot be undone.
    pub fn stop(&self) {
        self.set.store(true, std::sync::atomic::Ordering::Release);
        self.notify.notify_waiters();
    }

    /// Whether [`Stop::stop`] was called.
    pub fn is_stopped(&self) -> bool {
        self.set.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Completes once the guest is to stop.
    pub async fn stopped(&self) {
        loop {
            // Made before the check, so a stop between the two is not missed.
            let woken = self.notify.notified();
            if self.is_stopped() {
                return;
            }
            woken.await;
        }
    }
}
