//! A switch that stops recording spans and metrics in this process while
//! their exporters stay installed: what a benchmark needs to measure
//! recording off and on in one run, one after the other.

use std::sync::atomic::{AtomicBool, Ordering};

static PAUSED: AtomicBool = AtomicBool::new(false);

/// Stops (`true`) or restarts (`false`) recording spans and metrics. While
/// paused, every span constructor and metric returns at its first check,
/// as with nothing installed; what was recorded is still exported.
pub fn set_paused(paused: bool) {
    PAUSED.store(paused, Ordering::Relaxed);
}

/// Whether recording is paused.
pub(crate) fn paused() -> bool {
    PAUSED.load(Ordering::Relaxed)
}
