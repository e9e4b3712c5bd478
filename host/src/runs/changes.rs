//! Wakes whoever waits on one run when this node's worker ends a pass of
//! it: a `"wait": true` start, an event stream. Waking every waiter on
//! every run's end would have each of them read its run from the store
//! again; at 500 waiting requests that is 500 reads per finished run, and
//! an API request waits behind them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::Notify;

/// The runs someone waits on here, each with its own [`Notify`].
#[derive(Debug, Default)]
pub struct Changes(Mutex<HashMap<String, Weak<Notify>>>);

impl Changes {
    /// What to wait on for `run`; it is woken at the end of each pass of
    /// the run on this node. A run driven by another node wakes nothing
    /// here, so a waiter also looks again now and then.
    pub fn watch(&self, run: &str) -> Arc<Notify> {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(notify) = map.get(run).and_then(Weak::upgrade) {
            return notify;
        }
        // Runs no one waits on any more, dropped as the map doubles.
        if map.len() >= 64 && map.len().is_power_of_two() {
            map.retain(|_, w| w.strong_count() > 0);
        }
        let notify = Arc::new(Notify::new());
        map.insert(run.to_string(), Arc::downgrade(&notify));
        notify
    }

    /// A pass of `run` ended: wakes its waiters.
    pub fn changed(&self, run: &str) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match map.get(run).and_then(Weak::upgrade) {
            Some(notify) => notify.notify_waiters(),
            None => {
                map.remove(run);
            }
        }
    }

    /// How many runs are in the map, waited on or not yet pruned.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn only_the_runs_waiters_wake() {
        let changes = Changes::default();
        let (a, a_too, b) = (changes.watch("a"), changes.watch("a"), changes.watch("b"));
        assert!(Arc::ptr_eq(&a, &a_too), "one notify per run");
        // Created before the change, as a waiter does before it reads.
        let (woken, also, other) = (a.notified(), a_too.notified(), b.notified());
        changes.changed("a");
        let short = Duration::from_millis(50);
        assert!(tokio::time::timeout(short, woken).await.is_ok());
        assert!(tokio::time::timeout(short, also).await.is_ok());
        assert!(tokio::time::timeout(short, other).await.is_err(), "b's waiter sleeps on");
    }

    #[test]
    fn runs_no_one_waits_on_are_forgotten() {
        let changes = Changes::default();
        drop(changes.watch("gone"));
        changes.changed("gone");
        assert_eq!(changes.len(), 0);
        let kept = changes.watch("kept");
        for i in 0..200 {
            drop(changes.watch(&format!("r{i}")));
        }
        assert!(changes.len() < 200, "pruned as it grew: {}", changes.len());
        assert!(Arc::ptr_eq(&kept, &changes.watch("kept")));
    }
}
