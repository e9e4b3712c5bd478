//! What a store does, one trait per concept, and [`Store`], all of them
//! together: what callers hold (`Arc<dyn Store>`).

mod backend;
mod jobs;
mod ledger;
mod plugins;
mod runs;
mod schedules;
mod sessions;
mod sign_ins;
mod tenants;

pub use backend::Backend;
pub use jobs::Jobs;
pub use ledger::Ledger;
pub use plugins::Plugins;
pub use runs::Runs;
pub use schedules::{FireOutcome, Schedules};
pub use sessions::Sessions;
pub use sign_ins::SignIns;
pub use tenants::Tenants;

/// The store: every concept's trait, as one. Every backend is one through
/// the blanket impl below, and `dyn Store` calls any of their methods
/// without importing them.
pub trait Store: Backend + Runs + Jobs + Sessions + Tenants + Plugins + Ledger + SignIns + Schedules {}

impl<T: Backend + Runs + Jobs + Sessions + Tenants + Plugins + Ledger + SignIns + Schedules> Store for T {}
