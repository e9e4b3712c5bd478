//! A count against an optional allowance: the guarded client counts a
//! run's bytes with it, and the engine counts a guest's CPU ticks (a
//! tenant's quotas in `nexo serve`).

use std::sync::atomic::{AtomicU64, Ordering};

/// A shared count with an optional allowance. For egress, the request
/// bodies sent and the response bodies received by every request of the
/// policies that carry it ([`crate::Policy::metered`]); headers are not
/// counted. With a limit, a request is refused once the count has reached
/// it, and a body being read stops when it passes it
/// ([`crate::EgressError::QuotaExhausted`]).
#[derive(Debug)]
pub struct Meter {
    used: AtomicU64,
    limit: Option<u64>,
}

impl Meter {
    /// A meter at zero that allows `limit` (`None`: no limit, it only
    /// counts).
    pub fn new(limit: Option<u64>) -> Self {
        Meter { used: AtomicU64::new(0), limit }
    }

    /// The bytes counted so far.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// The allowance, if any.
    pub fn limit(&self) -> Option<u64> {
        self.limit
    }

    /// Whether the allowance is used up.
    pub fn exhausted(&self) -> bool {
        self.limit.is_some_and(|limit| self.used() >= limit)
    }

    /// Counts `n`; `false` if the count is now past the allowance.
    pub fn add(&self, n: usize) -> bool {
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        let before = self.used.fetch_add(n, Ordering::Relaxed);
        self.limit.is_none_or(|limit| before.saturating_add(n) <= limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_up_to_the_limit_and_says_when_it_is_passed() {
        let meter = Meter::new(Some(10));
        assert!(meter.add(4) && meter.add(6));
        assert!(meter.exhausted());
        assert!(!meter.add(1));
        assert_eq!(meter.used(), 11);
        let unlimited = Meter::new(None);
        assert!(unlimited.add(usize::MAX) && !unlimited.exhausted());
    }
}
