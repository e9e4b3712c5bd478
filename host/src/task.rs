//! Spawned tasks that end with their owner.

/// A spawned task, aborted when this handle is dropped: a task that serves
/// one run (its lease renewal, a loopback server) must not outlive the run,
/// even when the run's future is dropped half-way (a deadline, a lost
/// lease).
#[derive(Debug)]
pub(crate) struct AbortOnDrop<T>(pub(crate) tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
