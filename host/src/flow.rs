//! What a run's context holds: the labels its calls' results carried in.
//!
//! The host-call path marks a run's [`Taint`] after every result, live or
//! answered from the journal, so a replay holds what the first pass held;
//! the authority reads it when a call can send data out (see
//! [`crate::grant::DataFlow`]). A label is never taken away: once a run has
//! read a page, the page is in its context for good.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, Ordering};

/// A set of labels, as bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Labels(u8);

impl Labels {
    /// No label.
    pub const NONE: Labels = Labels(0);
    /// Content someone other than the operator and the user wrote: a
    /// fetched page, search results, an untrusted MCP tool's output.
    pub const UNTRUSTED: Labels = Labels(1);
    /// Content the operator keeps private: workspace files.
    pub const PRIVATE: Labels = Labels(2);

    /// Both sets' labels.
    pub const fn with(self, other: Labels) -> Labels {
        Labels(self.0 | other.0)
    }

    /// Whether every label of `other` is in the set.
    pub const fn holds(self, other: Labels) -> bool {
        self.0 & other.0 == other.0 && other.0 != 0
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// [`Labels::is_empty`] by reference, for serde's `skip_serializing_if`.
    pub fn is_none(&self) -> bool {
        self.is_empty()
    }

    /// The labels' names, as a grant records them.
    pub fn names(self) -> Vec<&'static str> {
        [(Labels::UNTRUSTED, "untrusted"), (Labels::PRIVATE, "private")]
            .into_iter()
            .filter(|(l, _)| self.holds(*l))
            .map(|(_, n)| n)
            .collect()
    }
}

impl serde::Serialize for Labels {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serde::Serialize::serialize(&self.names(), s)
    }
}

impl<'de> serde::Deserialize<'de> for Labels {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Labels, D::Error> {
        let names: Vec<String> = serde::Deserialize::deserialize(d)?;
        names.iter().try_fold(Labels::NONE, |all, name| match name.as_str() {
            "untrusted" => Ok(all.with(Labels::UNTRUSTED)),
            "private" => Ok(all.with(Labels::PRIVATE)),
            other => Err(serde::de::Error::custom(format!("unknown label `{other}`: use untrusted or private"))),
        })
    }
}

/// The labels one run's context holds, and the call that first brought
/// each in (for the reason a guarded call shows).
#[derive(Debug, Default)]
pub struct Taint {
    held: AtomicU8,
    untrusted_from: OnceLock<String>,
    private_from: OnceLock<String>,
}

impl Taint {
    /// A clean context.
    pub const fn new() -> Taint {
        Taint { held: AtomicU8::new(0), untrusted_from: OnceLock::new(), private_from: OnceLock::new() }
    }

    /// A context that holds `labels` from the start (a child run holds
    /// what its parent held when it started it).
    pub fn holding(labels: Labels) -> Taint {
        let taint = Taint::new();
        taint.mark(labels, || "the parent run".into());
        taint
    }

    /// The labels held now.
    pub fn held(&self) -> Labels {
        Labels(self.held.load(Ordering::Acquire))
    }

    /// Adds `labels`, brought in by the call `by` names (called only for
    /// a label not yet held).
    pub fn mark(&self, labels: Labels, by: impl FnOnce() -> String) {
        let fresh = Labels(labels.0 & !self.held().0);
        if fresh.is_empty() {
            return;
        }
        let by = by();
        if fresh.holds(Labels::UNTRUSTED) {
            let _ = self.untrusted_from.set(by.clone());
        }
        if fresh.holds(Labels::PRIVATE) {
            let _ = self.private_from.set(by);
        }
        self.held.fetch_or(labels.0, Ordering::AcqRel);
    }

    /// What first brought `label` in, if it is held.
    pub fn first(&self, label: Labels) -> Option<&str> {
        if label == Labels::UNTRUSTED {
            self.untrusted_from.get().map(String::as_str)
        } else if label == Labels::PRIVATE {
            self.private_from.get().map(String::as_str)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taint_keeps_its_labels_and_the_first_source_of_each() {
        let taint = Taint::new();
        assert!(taint.held().is_empty());
        taint.mark(Labels::NONE, || unreachable!("nothing to name"));
        taint.mark(Labels::UNTRUSTED, || "fetch".into());
        taint.mark(Labels::UNTRUSTED, || panic!("already held: not named again"));
        taint.mark(Labels::UNTRUSTED.with(Labels::PRIVATE), || "shell".into());
        assert!(taint.held().holds(Labels::UNTRUSTED.with(Labels::PRIVATE)));
        assert_eq!((taint.first(Labels::UNTRUSTED), taint.first(Labels::PRIVATE)), (Some("fetch"), Some("shell")));
        assert!(!Labels::PRIVATE.holds(Labels::NONE), "an empty set is never held");
    }
}
