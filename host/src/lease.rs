//! Leases kept alive in bulk.
//!
//! A process holds a lease on every run it drives and, as a worker, on
//! every job it handles. Renewing each on its own timer costs one store
//! write per lease per tick: at 10,000 waiting runs that is thousands of
//! writes a second, more than one SQLite file commits. A [`Keeper`] renews
//! all of its holder's leases in one write per tick (per [`CHUNK`]), and
//! tells a holder whose lease the store no longer answers for that it
//! lost it.
//!
//! The tick runs only while something is held: the first [`Keeper::keep`]
//! starts it, and it ends when the last [`Hold`] is dropped.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use nexo_store::StoreResult;

/// The most leases one write renews: a long write would hold up the
/// store's other writers (SQLite has one at a time).
pub const CHUNK: usize = 1_000;

/// What a holder is told when its lease is gone.
pub type OnLost = Box<dyn FnOnce(Lost) + Send>;

/// Renews the leases named, until the instant given (milliseconds since
/// the epoch), and answers those it renewed.
pub type Renew<K> = Arc<dyn Fn(Vec<K>, i64) -> BoxFuture<'static, StoreResult<Vec<K>>> + Send + Sync>;

/// Why a lease was lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lost {
    /// The store renewed it no more: another holder has it, or what it
    /// leased ended, was cancelled or was deleted.
    Taken,
    /// No renewal reached the store before the lease ran out, so another
    /// holder may have it now. Only a keeper built with
    /// [`Keeper::lapse_on_error`] reports this.
    Lapsed {
        /// The last renewal's error.
        error: String,
    },
}

/// Renews a holder's leases together, every third of their length.
pub struct Keeper<K> {
    state: Arc<Mutex<State<K>>>,
    length: Duration,
    renew: Renew<K>,
    lapse_on_error: bool,
}

impl<K> std::fmt::Debug for Keeper<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keeper").field("length", &self.length).field("lapse_on_error", &self.lapse_on_error).finish()
    }
}

struct State<K> {
    held: HashMap<K, Held>,
    next: u64,
    ticking: bool,
}

struct Held {
    generation: u64,
    /// Until when the store last confirmed the lease.
    until_ms: i64,
    lost: OnLost,
}

/// One lease kept alive; dropping it stops the renewals, so the lease
/// lapses for the next holder.
#[must_use = "the lease is renewed only while the hold lives"]
pub struct Hold<K: Eq + Hash> {
    state: Arc<Mutex<State<K>>>,
    key: K,
    generation: u64,
}

impl<K: Eq + Hash> Drop for Hold<K> {
    fn drop(&mut self) {
        let mut state = lock(&self.state);
        if state.held.get(&self.key).is_some_and(|h| h.generation == self.generation) {
            state.held.remove(&self.key);
        }
    }
}

impl<K> Keeper<K>
where
    K: Eq + Hash + Clone + Send + Sync + std::fmt::Display + 'static,
{
    /// A keeper of leases `length` long, renewed by `renew`. A renewal that
    /// fails is logged and tried again at the next tick.
    pub fn new(length: Duration, renew: Renew<K>) -> Self {
        let state = State { held: HashMap::new(), next: 0, ticking: false };
        Keeper { state: Arc::new(Mutex::new(state)), length, renew, lapse_on_error: false }
    }

    /// The same, reporting [`Lost::Lapsed`] for a lease that ran out while
    /// the renewals failed.
    pub fn lapse_on_error(mut self) -> Self {
        self.lapse_on_error = true;
        self
    }

    /// Keeps the lease on `key`, which the store holds until `until_ms`,
    /// alive until the hold is dropped. `lost` is called, once, if it is
    /// lost first; the hold then renews nothing more.
    pub fn keep(&self, key: K, until_ms: i64, lost: OnLost) -> Hold<K> {
        let mut state = lock(&self.state);
        state.next += 1;
        let generation = state.next;
        state.held.insert(key.clone(), Held { generation, until_ms, lost });
        if !state.ticking {
            state.ticking = true;
            tokio::spawn(tick(self.state.clone(), self.length, self.renew.clone(), self.lapse_on_error));
        }
        Hold { state: self.state.clone(), key, generation }
    }

    /// Tells the holder of `key` at once that its lease is lost, as a tick
    /// would once the store stopped renewing it (a cancel taken on this
    /// node need not wait for the next renewal), and renews it no more.
    /// `false` if nothing here holds it.
    pub fn lose(&self, key: &K, why: Lost) -> bool {
        let held = lock(&self.state).held.remove(key);
        match held {
            Some(held) => {
                (held.lost)(why);
                true
            }
            None => false,
        }
    }

    /// How many leases are held.
    pub fn held(&self) -> usize {
        lock(&self.state).held.len()
    }

    /// The keys whose leases are held now.
    pub fn keys(&self) -> Vec<K> {
        lock(&self.state).held.keys().cloned().collect()
    }
}

fn lock<K>(state: &Mutex<State<K>>) -> std::sync::MutexGuard<'_, State<K>> {
    // A panic under the lock leaves a map that is still whole.
    state.lock().unwrap_or_else(|p| p.into_inner())
}

async fn tick<K>(state: Arc<Mutex<State<K>>>, length: Duration, renew: Renew<K>, lapse_on_error: bool)
where
    K: Eq + Hash + Clone + Send + Sync + std::fmt::Display + 'static,
{
    let mut every = tokio::time::interval((length / 3).max(Duration::from_millis(1)));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    every.tick().await;
    loop {
        every.tick().await;
        let asked: Vec<(K, u64)> = {
            let mut state = lock(&state);
            if state.held.is_empty() {
                state.ticking = false;
                return;
            }
            state.held.iter().map(|(k, h)| (k.clone(), h.generation)).collect()
        };
        for chunk in asked.chunks(CHUNK) {
            let until_ms = nexo_store::now_ms().saturating_add(length.as_millis() as i64);
            let keys = chunk.iter().map(|(k, _)| k.clone()).collect();
            let renewed = match renew(keys, until_ms).await {
                Ok(renewed) => Ok(renewed.into_iter().collect::<HashSet<K>>()),
                Err(e) => {
                    tracing::warn!(leases = chunk.len(), "could not renew leases: {e}");
                    Err(e.to_string())
                }
            };
            let mut lost = Vec::new();
            {
                let mut state = lock(&state);
                let now = nexo_store::now_ms();
                for (key, generation) in chunk {
                    // Dropped or kept anew since the snapshot: not this tick's.
                    let Some(held) = state.held.get_mut(key).filter(|h| h.generation == *generation) else {
                        continue;
                    };
                    let why = match &renewed {
                        Ok(renewed) if renewed.contains(key) => {
                            held.until_ms = until_ms;
                            continue;
                        }
                        Ok(_) => Lost::Taken,
                        Err(error) if lapse_on_error && held.until_ms < now => Lost::Lapsed { error: error.clone() },
                        Err(_) => continue,
                    };
                    if let Some(held) = state.held.remove(key) {
                        lost.push((held.lost, why));
                    }
                }
            }
            for (tell, why) in lost {
                tell(why);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Ticks every 100 ms.
    const LENGTH: Duration = Duration::from_millis(300);

    /// A store of leases in a set: renews the keys it has, fails on demand,
    /// and notes the size of every write.
    #[derive(Default)]
    struct Leases {
        live: Mutex<HashSet<String>>,
        writes: Mutex<Vec<usize>>,
        failing: AtomicBool,
    }

    impl Leases {
        fn writes(&self) -> Vec<usize> {
            self.writes.lock().unwrap().clone()
        }
    }

    fn keeper(leases: &Arc<Leases>) -> Keeper<String> {
        let leases = leases.clone();
        Keeper::new(
            LENGTH,
            Arc::new(move |keys: Vec<String>, _until| {
                let leases = leases.clone();
                Box::pin(async move {
                    leases.writes.lock().unwrap().push(keys.len());
                    if leases.failing.load(Ordering::SeqCst) {
                        return Err(nexo_store::StoreError::Conflict("the store is away".into()));
                    }
                    let live = leases.live.lock().unwrap();
                    Ok(keys.into_iter().filter(|k| live.contains(k)).collect())
                })
            }),
        )
    }

    fn told() -> (Arc<Mutex<Vec<Lost>>>, impl Fn() -> OnLost) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let make = {
            let seen = seen.clone();
            move || -> OnLost {
                let seen = seen.clone();
                Box::new(move |why| seen.lock().unwrap().push(why))
            }
        };
        (seen, make)
    }

    /// Waits, up to 5 s, for `done`.
    async fn until(what: &str, done: impl Fn() -> bool) {
        let start = std::time::Instant::now();
        while !done() {
            assert!(start.elapsed() < Duration::from_secs(5), "still waiting for {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn one_write_per_chunk_renews_every_lease_held() {
        let leases = Arc::new(Leases::default());
        let keeper = keeper(&leases);
        let n = CHUNK + 500;
        leases.live.lock().unwrap().extend((0..n).map(|i| i.to_string()));
        let (seen, on_lost) = told();
        let holds: Vec<_> = (0..n).map(|i| keeper.keep(i.to_string(), i64::MAX, on_lost())).collect();
        until("three ticks", || leases.writes().len() >= 6).await;
        let writes = leases.writes();
        for tick in writes.chunks(2).take(3) {
            assert_eq!(tick, [CHUNK, 500], "{n} leases in two writes a tick: {writes:?}");
        }
        assert!(seen.lock().unwrap().is_empty());
        assert_eq!(keeper.held(), n);

        drop(holds);
        until("the tick to end", || !lock(&keeper.state).ticking).await;
        let before = leases.writes().len();
        tokio::time::sleep(LENGTH).await;
        assert_eq!(leases.writes().len(), before, "nothing held, nothing written");

        // A new hold starts it again.
        let _again = keeper.keep("0".into(), i64::MAX, on_lost());
        until("a tick", || leases.writes().len() > before).await;
        assert_eq!(leases.writes()[before], 1);
    }

    #[tokio::test]
    async fn a_lease_the_store_no_longer_renews_is_lost_once() {
        let leases = Arc::new(Leases::default());
        let keeper = keeper(&leases);
        leases.live.lock().unwrap().extend(["a".to_string(), "b".to_string()]);
        let (seen, on_lost) = told();
        let _a = keeper.keep("a".into(), i64::MAX, on_lost());
        let _b = keeper.keep("b".into(), i64::MAX, on_lost());
        until("a tick", || !leases.writes().is_empty()).await;
        assert!(seen.lock().unwrap().is_empty());
        leases.live.lock().unwrap().remove("b");
        until("the loss", || !seen.lock().unwrap().is_empty()).await;
        let at = leases.writes().len();
        until("two more ticks", || leases.writes().len() >= at + 2).await;
        assert_eq!(*seen.lock().unwrap(), [Lost::Taken], "told once");
        assert_eq!(keeper.held(), 1);
        assert_eq!(leases.writes().last(), Some(&1), "and no longer renewed");
    }

    #[tokio::test]
    async fn a_lease_lost_here_is_told_at_once_and_renewed_no_more() {
        let leases = Arc::new(Leases::default());
        let keeper = keeper(&leases);
        leases.live.lock().unwrap().extend(["a".to_string(), "b".to_string()]);
        let (seen, on_lost) = told();
        let _a = keeper.keep("a".into(), i64::MAX, on_lost());
        let _b = keeper.keep("b".into(), i64::MAX, on_lost());
        assert!(keeper.lose(&"b".to_string(), Lost::Taken));
        assert_eq!(*seen.lock().unwrap(), [Lost::Taken], "told before any tick");
        assert!(!keeper.lose(&"b".to_string(), Lost::Taken), "once");
        until("a tick", || !leases.writes().is_empty()).await;
        assert_eq!(leases.writes()[0], 1, "only a is renewed");
        assert_eq!(seen.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_dropped_hold_is_not_told_and_a_new_one_is_renewed() {
        let leases = Arc::new(Leases::default());
        let keeper = keeper(&leases);
        let (seen, on_lost) = told();
        // Not live in the store: a hold that lived through a tick would be told.
        let first = keeper.keep("a".into(), i64::MAX, on_lost());
        drop(first);
        leases.live.lock().unwrap().insert("a".into());
        let _second = keeper.keep("a".into(), i64::MAX, on_lost());
        until("three ticks", || leases.writes().len() >= 3).await;
        assert!(seen.lock().unwrap().is_empty());
        assert_eq!(keeper.held(), 1);
    }

    #[tokio::test]
    async fn failed_renewals_lose_a_lease_only_when_it_has_run_out_and_only_if_asked() {
        let leases = Arc::new(Leases::default());
        leases.live.lock().unwrap().insert("a".into());
        leases.failing.store(true, Ordering::SeqCst);
        let (seen, on_lost) = told();
        // A lease that ends at 0 has run out; one that ends at i64::MAX has not.
        let patient = keeper(&leases);
        let _p = patient.keep("a".into(), 0, on_lost());
        let strict = keeper(&leases).lapse_on_error();
        let _s = strict.keep("a".into(), i64::MAX, on_lost());
        until("three ticks of each", || leases.writes().len() >= 6).await;
        assert!(seen.lock().unwrap().is_empty(), "a failed renewal alone loses nothing");
        let _ran_out = strict.keep("b".into(), 0, on_lost());
        until("the loss", || !seen.lock().unwrap().is_empty()).await;
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1);
        assert!(matches!(&seen[0], Lost::Lapsed { error } if error.contains("the store is away")), "{seen:?}");
        assert_eq!((patient.held(), strict.held()), (1, 1));
    }
}
