//! What a run's model turns cost in money, and the budget they draw on.
//!
//! The operator prices a model ([`Price`], US dollars per million input
//! and output tokens) and gives a run a budget in dollars. Before each live
//! model turn the gate checks what the turn may cost
//! ([`Spend::may_cost`]) against what the run has spent
//! ([`Gate::Budget`](crate::authority::Gate::Budget)); a turn that would
//! pass the budget suspends the run with a `budget` approval instead of
//! failing it. What the run spent is read from its journal at each pass
//! (every recorded turn's usage), so a replay pays nothing twice and a
//! resumed run knows what it spent before.
//!
//! Amounts are whole nano-dollars (`u64`), so sums do not drift.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use nexo_egress::Meter;

use nexo_model::Usage;

/// Nano-dollars in one dollar.
const NANOS_PER_USD: f64 = 1e9;

/// The bytes of a request taken for one input token when a turn's cost is
/// reserved: most text is three and a half to four and a half bytes a
/// token, so three errs high. What a turn used is counted as its provider
/// reports it.
const BYTES_PER_TOKEN: u64 = 3;

/// A model's price, in US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Dollars per million input (prompt) tokens.
    pub input: f64,
    /// Dollars per million output (completion) tokens.
    pub output: f64,
}

impl Price {
    /// Checks that both prices are from 0 to a million dollars, naming
    /// `key` (where the price was set) in the error.
    pub fn check(&self, key: &str) -> Result<(), String> {
        for (what, value) in [("input", self.input), ("output", self.output)] {
            // A million dollars a million tokens is past any model's; the
            // bound keeps every cost well inside the store's counters.
            if !value.is_finite() || !(0.0..=1e6).contains(&value) {
                return Err(format!(
                    "`{key}` has {what} = {value}: a price is dollars per million tokens, from 0 to \
                     1000000 (for example `{{ input = 3.0, output = 15.0 }}`)"
                ));
            }
        }
        Ok(())
    }

    /// What `input` and `output` tokens cost, in nano-dollars, rounded up.
    pub fn cost(&self, input: u64, output: u64) -> u64 {
        // A million tokens at `p` dollars is `p * 1e9` nano-dollars: one token is `p * 1e3`.
        let nanos = (input as f64) * self.input * 1e3 + (output as f64) * self.output * 1e3;
        nanos.ceil().min(u64::MAX as f64) as u64
    }
}

/// Dollars as whole nano-dollars, rounded down (a budget is never made larger).
pub fn nanos(usd: f64) -> u64 {
    (usd.max(0.0) * NANOS_PER_USD).floor().min(u64::MAX as f64) as u64
}

/// Nano-dollars as dollars.
pub fn usd(nanos: u64) -> f64 {
    nanos as f64 / NANOS_PER_USD
}

/// What a `budget` approval is recorded under
/// ([`Gate::subject`](crate::authority::Gate::subject)).
pub const SUBJECT: &str = "budget";

/// Whether a `budget` approval showing `shown` (its arguments: what the
/// run had spent and what the turn may cost) may be approved by someone
/// who cannot raise the budget, a tenant of `nexo serve`: only once
/// `budget_usd`, the run's budget now, covers the turn, and the turn fits
/// `day_left` (nano-dollars), what is left of the tenant's day.
pub fn approvable(shown: &serde_json::Value, budget_usd: Option<f64>, day_left: Option<u64>) -> Result<(), String> {
    let amount = |key: &str| shown[key].as_f64().map(nanos).unwrap_or(u64::MAX);
    let need = amount("spent_usd").saturating_add(amount("may_cost_usd"));
    if let Some(left) = day_left
        && amount("may_cost_usd") > left
    {
        return Err(format!(
            "the run waits on its tenant's budget for the day: its next turn may cost ${:.6}, and ${:.6} is left of \
             the `usd-per-day` quota; approve once the day renews (midnight UTC) or the operator raises the quota, or \
             deny to end the prompt here",
            usd(amount("may_cost_usd")),
            usd(left),
        ));
    }
    match budget_usd.map(nanos) {
        None => Ok(()),
        Some(budget) if budget >= need => Ok(()),
        Some(budget) => Err(format!(
            "the run waits on its budget: it has spent ${:.6} and its next turn may cost ${:.6}, past the budget \
             of ${:.6} the operator set (the tenant's `usd-per-run` quota, or what its session's other runs left \
             of `usd-per-session`); the operator raises the quota to at least ${:.6}, or deny to end the prompt \
             here",
            usd(amount("spent_usd")),
            usd(amount("may_cost_usd")),
            usd(budget),
            usd(need),
        )),
    }
}

/// A run's money: the price of its model, its budget, and what it spent.
/// Shared by every prompt of one pass of the run.
#[derive(Debug)]
pub struct Spend {
    price: Price,
    budget: Option<u64>,
    spent: AtomicU64,
    /// What the run's tenant may still spend today, from when this pass
    /// started ([`crate::quota::RunBudget::cost`]).
    pool: Option<Arc<Meter>>,
    /// Held from a turn's check until its cost is counted, so prompts the
    /// run makes at once cannot each pass the check on the same spend.
    turn: tokio::sync::Mutex<()>,
}

impl Spend {
    /// A run's spend at `price`, within `budget_usd` (`None`: it is only
    /// counted), having spent what `recorded` (the usage of the turns its
    /// journal holds) cost.
    pub fn new(price: Price, budget_usd: Option<f64>, recorded: Usage) -> Spend {
        let spent = price.cost(recorded.input_tokens, recorded.output_tokens);
        Spend {
            price,
            budget: budget_usd.map(nanos),
            spent: AtomicU64::new(spent),
            pool: None,
            turn: tokio::sync::Mutex::new(()),
        }
    }

    /// The same spend, counting live turns on `pool` too, and keeping
    /// within its limit.
    pub fn with_pool(mut self, pool: Option<Arc<Meter>>) -> Spend {
        self.pool = pool;
        self
    }

    /// Whether a turn may be held back: the run has a budget, or its
    /// tenant's day has a limit.
    pub fn limited(&self) -> bool {
        self.budget.is_some() || self.pool_left().is_some()
    }

    /// Waits for the run's other turns to be counted, when a turn may be
    /// held back: the guard is held over the turn's check and its answer.
    pub async fn turn(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        if self.limited() { Some(self.turn.lock().await) } else { None }
    }

    /// What is left of the tenant's day, in nano-dollars, when it has a limit.
    pub fn pool_left(&self) -> Option<u64> {
        let pool = self.pool.as_ref()?;
        pool.limit().map(|limit| limit.saturating_sub(pool.used()))
    }

    /// The model's price.
    pub fn price(&self) -> Price {
        self.price
    }

    /// The budget, in nano-dollars, if there is one.
    pub fn budget(&self) -> Option<u64> {
        self.budget
    }

    /// What the run spent, in nano-dollars.
    pub fn spent(&self) -> u64 {
        self.spent.load(Ordering::Acquire)
    }

    /// What `usage` costs, in nano-dollars.
    pub fn cost(&self, usage: &Usage) -> u64 {
        self.price.cost(usage.input_tokens, usage.output_tokens)
    }

    /// Counts a live turn's `usage` as spent.
    pub fn add(&self, usage: &Usage) {
        let cost = self.cost(usage);
        let _ = self.spent.fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| Some(s.saturating_add(cost)));
        if let Some(pool) = &self.pool {
            pool.add(usize::try_from(cost).unwrap_or(usize::MAX));
        }
    }

    /// The most a turn may cost whose request serializes to
    /// `request_bytes` and which may answer with `max_tokens`: the output at
    /// its cap, the input estimated from its size.
    pub fn may_cost(&self, request_bytes: usize, max_tokens: u32) -> u64 {
        let input = (request_bytes as u64).div_ceil(BYTES_PER_TOKEN);
        self.price.cost(input, u64::from(max_tokens))
    }

    /// Whether a turn that may cost `may_cost` fits what is left of the
    /// budget; if not, why, with what was spent and what would let it go on.
    pub fn check(&self, may_cost: u64) -> Result<(), String> {
        if let Some(left) = self.pool_left()
            && may_cost > left
        {
            return Err(format!(
                "the next model turn may cost up to ${:.6}, and the tenant has ${:.6} left of today's budget (its \
                 `usd-per-day` quota): approve once the operator raises the quota or the day renews (midnight UTC), \
                 or deny to end the prompt here",
                usd(may_cost),
                usd(left),
            ));
        }
        let Some(budget) = self.budget else { return Ok(()) };
        let spent = self.spent();
        let need = spent.saturating_add(may_cost);
        if need <= budget {
            return Ok(());
        }
        // A tenant's run draws on its day (`pool`): its budget is the operator's quota.
        let key = if self.pool.is_some() {
            "the operator's `usd-per-run` or `usd-per-session` quota"
        } else {
            "`[model] budget-usd`"
        };
        Err(format!(
            "the next model turn may cost up to ${:.6}, and the run has spent ${:.6} of its budget of ${:.6}: raise \
             the budget to at least ${:.6} ({key}) and approve, or deny to end the prompt here",
            usd(may_cost),
            usd(spent),
            usd(budget),
            usd(need),
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const PRICE: Price = Price { input: 3.0, output: 15.0 };

    #[test]
    fn costs_are_whole_nano_dollars_per_million_tokens() {
        assert_eq!(PRICE.cost(1_000_000, 0), 3_000_000_000);
        assert_eq!(PRICE.cost(0, 1_000_000), 15_000_000_000);
        assert_eq!(PRICE.cost(1, 1), 18_000);
        // A price below a nano-dollar a token still costs something.
        assert_eq!(Price { input: 0.0001, output: 0.0 }.cost(1, 0), 1);
        assert_eq!(nanos(0.5), 500_000_000);
        assert!(Price { input: -1.0, output: 1.0 }.check("price").unwrap_err().contains("input = -1"));
        assert!(Price { input: 1.0, output: f64::NAN }.check("price").is_err());
    }

    #[test]
    fn a_turn_fits_while_what_it_may_cost_is_left_and_the_journal_counts_as_spent() {
        let recorded = Usage { input_tokens: 100_000, output_tokens: 0 };
        let spend = Spend::new(PRICE, Some(1.0), recorded);
        assert_eq!(spend.spent(), 300_000_000, "$0.30 recorded before this pass");
        // 3,000 bytes: at most 1,000 input tokens; 1,000 output tokens.
        let may = spend.may_cost(3_000, 1_000);
        assert_eq!(may, PRICE.cost(1_000, 1_000));
        assert!(spend.check(may).is_ok());
        spend.add(&Usage { input_tokens: 0, output_tokens: 46_000 });
        assert_eq!(spend.spent(), 990_000_000);
        let why = spend.check(may).unwrap_err();
        assert!(why.contains("$0.990000 of its budget of $1.000000"), "{why}");
        assert!(why.contains("at least $1.008000"), "{why}");
        // Without a budget it only counts.
        assert!(Spend::new(PRICE, None, recorded).check(u64::MAX).is_ok());
    }
}
