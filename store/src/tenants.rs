//! Tenants of `nexo serve`: the types and the rules every backend shares.
//!
//! A tenant ([`Tenant`]) is one customer of a serving node: the operator's
//! policy for its runs (JSON the host reads), and whether it is disabled.
//! Around it the store keeps:
//!
//! - its API keys ([`ApiKey`]), as the SHA-256 of the key and never the
//!   key itself, so a copy of the database lets no one in. A key of no
//!   tenant is an operator's admin key. A key is revoked, never deleted;
//! - the plugins it uploaded ([`StoredPlugin`]), content-addressed by
//!   `(tenant, sha256)`: one tenant never sees another's, even with the
//!   same bytes. Their bytes are in the database, so every node sharing a
//!   PostgreSQL store can load them;
//! - its audit log ([`AuditEntry`]), append-only and hash-chained: each
//!   entry's hash covers the previous entry's hash and its own fields
//!   ([`audit_hash`]), and the tenant's row records the last sequence
//!   number and hash (the head). [`verify_audit`] recomputes the chain and
//!   names the first entry that was edited, removed, reordered or relinked,
//!   and a removed tail, which only the head can show;
//! - its usage ([`Usage`]): counters added up per UTC hour.
//!
//! The runs a tenant starts carry its id ([`crate::Run::tenant`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The `prev` of a tenant's first audit entry: 64 zeros, the hash of
/// nothing before it.
pub const AUDIT_GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The length of a usage period: one hour, in milliseconds.
pub const USAGE_PERIOD_MS: i64 = 3_600_000;

/// A tenant of `nexo serve`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tenant {
    /// Its id (see [`new_tenant_id`]).
    pub id: String,
    /// Its name, unique in the store: what the operator types.
    pub name: String,
    /// The operator's policy for its runs, as the host writes it.
    pub policy: Value,
    /// Whether it is disabled: the host then refuses its keys and starts no
    /// run for it (the store records, and refuses nothing for it).
    pub disabled: bool,
    /// When it was created.
    pub created_ms: i64,
    /// When its policy or state last changed.
    pub updated_ms: i64,
}

/// A tenant to create.
#[derive(Debug, Clone, PartialEq)]
pub struct NewTenant {
    /// Its id (see [`new_tenant_id`]).
    pub id: String,
    /// Its name, which no other tenant may have.
    pub name: String,
    /// The operator's policy for its runs.
    pub policy: Value,
    /// When it is created.
    pub created_ms: i64,
}

impl NewTenant {
    /// The tenant as it is first recorded: enabled.
    pub fn into_tenant(self) -> Tenant {
        Tenant {
            id: self.id,
            name: self.name,
            policy: self.policy,
            disabled: false,
            created_ms: self.created_ms,
            updated_ms: self.created_ms,
        }
    }
}

/// An API key as stored: only the SHA-256 (lowercase hex) of the key,
/// never the key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiKey {
    /// Its id (see [`new_key_id`]), which names it in lists and
    /// revocations.
    pub id: String,
    /// The tenant it acts for; `None` for an operator's admin key.
    pub tenant: Option<String>,
    /// The SHA-256 of the key, as lowercase hex ([`sha256_hex`]).
    pub hash: String,
    /// When it was created.
    pub created_ms: i64,
    /// When it was revoked, if it was: a revoked key lets no one in.
    pub revoked_ms: Option<i64>,
}

/// A sign-in to the web console: a browser's session, in the store so that
/// any node of a deployment serves it. Neither the session id (the cookie's
/// value) nor the key is stored: only their SHA-256 ([`sha256_hex`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignIn {
    /// The SHA-256 of the session id.
    pub id_hash: String,
    /// The tenant signed in.
    pub tenant: String,
    /// The SHA-256 of the key signed in with, so that revoking the key ends
    /// the session.
    pub key_hash: String,
    /// When it was opened.
    pub created_ms: i64,
    /// When it ends, unless it is ended sooner.
    pub expires_ms: i64,
}

/// An API key to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewApiKey {
    /// Its id (see [`new_key_id`]).
    pub id: String,
    /// The tenant it acts for, which must exist; `None` for an admin key.
    pub tenant: Option<String>,
    /// The SHA-256 of the key, as lowercase hex ([`sha256_hex`]): the
    /// store refuses anything else, so a key is never stored as itself.
    pub hash: String,
    /// When it is created.
    pub created_ms: i64,
}

impl NewApiKey {
    /// The key as it is first recorded: not revoked.
    pub fn into_key(self) -> ApiKey {
        ApiKey { id: self.id, tenant: self.tenant, hash: self.hash, created_ms: self.created_ms, revoked_ms: None }
    }
}

/// A plugin uploaded by a tenant, content-addressed by `(tenant, sha256)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredPlugin {
    /// The tenant that uploaded it.
    pub tenant: String,
    /// The SHA-256 of its bytes, as lowercase hex.
    pub sha256: String,
    /// Its name, as given at its first upload.
    pub name: String,
    /// The WIT world it targets, as given at its first upload.
    pub world: String,
    /// Its size in bytes.
    pub size: u64,
    /// When it was first uploaded.
    pub created_ms: i64,
    /// Where it was pulled from, as the host writes it (JSON); `None` for
    /// bytes uploaded as they are. The first pull's stands.
    pub origin: Option<String>,
}

/// A tenant's acceptance of one version of a plugin it pulls by
/// reference: the digest and the authority that version asks for, which a
/// newer version may not widen without a new acceptance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginAcceptance {
    /// The tenant.
    pub tenant: String,
    /// The plugin's repository, without tag or digest.
    pub reference: String,
    /// The accepted version's digest (`sha256:HEX`).
    pub digest: String,
    /// What that version asks for: JSON text the host writes and reads.
    pub authority: String,
    /// When it was accepted.
    pub accepted_ms: i64,
    /// Who accepted it, as the host names it (`first-use`, `tenant`,
    /// `operator`, `no-wider`).
    pub accepted_by: String,
}

/// A plugin to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewPlugin {
    /// The tenant uploading it, which must exist.
    pub tenant: String,
    /// The SHA-256 of `bytes`, as lowercase hex: the store checks it.
    pub sha256: String,
    /// Its name.
    pub name: String,
    /// The WIT world it targets.
    pub world: String,
    /// The component's bytes.
    pub bytes: Vec<u8>,
    /// When it is uploaded.
    pub created_ms: i64,
    /// Where it was pulled from (JSON), if it was.
    pub origin: Option<String>,
}

impl NewPlugin {
    /// The plugin as it is first recorded (without its bytes).
    pub fn to_stored(&self) -> StoredPlugin {
        StoredPlugin {
            tenant: self.tenant.clone(),
            sha256: self.sha256.clone(),
            name: self.name.clone(),
            world: self.world.clone(),
            size: self.bytes.len() as u64,
            created_ms: self.created_ms,
            origin: self.origin.clone(),
        }
    }
}

/// One entry of a tenant's hash-chained audit log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// The tenant.
    pub tenant: String,
    /// Its position in the tenant's log, from 1, without gaps.
    pub seq: u64,
    /// What happened, as the host names it (such as `run.start`).
    pub kind: String,
    /// The details: JSON text exactly as stored and hashed.
    pub data: String,
    /// When it was appended.
    pub at_ms: i64,
    /// The hash of entry `seq - 1`; [`AUDIT_GENESIS`] for entry 1.
    pub prev: String,
    /// [`audit_hash`] of this entry's fields and `prev`.
    pub hash: String,
}

/// What waits on one tenant's side now ([`Tenants::waiting`](crate::Tenants::waiting)):
/// the operator's gauges of queue depth and pending approvals.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Waiting {
    /// The tenant's id; `""` for the runs of no tenant.
    pub tenant: String,
    /// Its jobs queued (due or not) and not yet claimed.
    pub queued_jobs: u64,
    /// Its runs suspended on an approval no one has decided yet.
    pub pending_approvals: u64,
}

/// Usage counters of one tenant in one period: a UTC hour, starting at
/// `period_ms` (see [`usage_period`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// The tenant.
    pub tenant: String,
    /// The start of the hour.
    pub period_ms: i64,
    /// Runs started.
    pub runs: u64,
    /// Model tokens used.
    pub tokens: u64,
    /// CPU ticks used, as the host counts them.
    pub cpu_ticks: u64,
    /// Bytes sent and received over the network.
    pub egress_bytes: u64,
    /// What model turns cost, in nano-dollars at the operator's prices.
    #[serde(default)]
    pub cost_nanos: u64,
}

/// What one run has used over all its passes (the per-run budgets of
/// `nexo serve` count from it, so a resumed pass goes on from what is
/// left), or what one pass adds to its tenant's hour.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunUsage {
    /// Model tokens used.
    pub tokens: u64,
    /// CPU ticks used, as the host counts them.
    pub cpu_ticks: u64,
    /// Bytes sent and received over the network.
    pub egress_bytes: u64,
    /// What model turns cost, in nano-dollars at the operator's prices.
    #[serde(default)]
    pub cost_nanos: u64,
}

/// A new tenant id: `t` then 26 characters, sortable by creation time.
pub fn new_tenant_id() -> String {
    crate::ids::new_id('t')
}

/// A new API key id: `k` then 26 characters, sortable by creation time.
pub fn new_key_id() -> String {
    crate::ids::new_id('k')
}

/// The SHA-256 of `bytes`, as lowercase hex: how API keys are stored and
/// plugins are addressed.
pub fn sha256_hex(bytes: impl AsRef<[u8]>) -> String {
    hex::encode(Sha256::digest(bytes.as_ref()))
}

/// Whether `text` looks like [`sha256_hex`]'s output: 64 lowercase hex
/// digits.
pub fn is_sha256_hex(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The start of the usage period (the UTC hour) that holds `at_ms`.
pub fn usage_period(at_ms: i64) -> i64 {
    at_ms.div_euclid(USAGE_PERIOD_MS) * USAGE_PERIOD_MS
}

/// The hash of an audit entry: the SHA-256, as lowercase hex, of its
/// fields joined by newlines, `prev` first:
/// `prev \n seq \n at_ms \n tenant \n kind \n data`, with the numbers in
/// decimal and `data` the JSON text exactly as stored. `prev` chains each
/// entry to the one before it.
pub fn audit_hash(prev: &str, seq: u64, at_ms: i64, tenant: &str, kind: &str, data: &str) -> String {
    sha256_hex(format!("{prev}\n{seq}\n{at_ms}\n{tenant}\n{kind}\n{data}"))
}

/// The entry that follows a log whose head is `head` (`None`: an empty
/// log): the one rule every backend's [`crate::Ledger::append_audit`]
/// applies.
pub(crate) fn next_audit_entry(
    tenant: &str,
    head: Option<(u64, String)>,
    kind: &str,
    data: &Value,
    at_ms: i64,
) -> AuditEntry {
    let (last, prev) = head.unwrap_or_else(|| (0, AUDIT_GENESIS.to_string()));
    let seq = last + 1;
    let data = data.to_string();
    let hash = audit_hash(&prev, seq, at_ms, tenant, kind, &data);
    AuditEntry { tenant: tenant.to_string(), seq, kind: kind.to_string(), data, at_ms, prev, hash }
}

/// How a tenant's audit log fails [`verify_audit`]: the first break found,
/// naming the entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuditBreak {
    /// An entry's hash does not recompute from its fields: the entry was
    /// changed after it was written.
    #[error("audit entry {seq} was changed after it was written: its hash does not match its contents")]
    Edited {
        /// The entry.
        seq: u64,
    },
    /// An entry's `prev` is not the hash of the entry before it (or, for
    /// entry 1, not [`AUDIT_GENESIS`]): one of the two was rewritten, hash
    /// and all.
    #[error(
        "audit entry {seq} is not linked to the entry before it: its `prev` is not that entry's hash, so one of \
         the two was rewritten"
    )]
    Relinked {
        /// The entry whose link is broken.
        seq: u64,
    },
    /// Entries are missing: after entry `expected - 1` comes `found`.
    #[error("audit entry {expected} is missing: the log goes on with entry {found}; entries were removed")]
    Removed {
        /// The sequence number that should come next.
        expected: u64,
        /// The one that does.
        found: u64,
    },
    /// Entries are out of order or repeated: entry `found` is where entry
    /// `expected` should be, and `expected` comes later or was seen before.
    #[error(
        "audit entry {found} is out of place: entry {expected} should come here; entries were reordered or repeated"
    )]
    Reordered {
        /// The sequence number that should come next.
        expected: u64,
        /// The one that does.
        found: u64,
    },
    /// The log ends before the tenant's head: its last entries were
    /// removed.
    #[error(
        "the audit log ends at entry {last_seq}, but the tenant's record says it has {head_seq} entries: the last \
         entries were removed"
    )]
    Truncated {
        /// The last sequence number the tenant's row records.
        head_seq: u64,
        /// The last entry in the log (0: none).
        last_seq: u64,
    },
    /// The log goes on past the tenant's head: entries were added without
    /// the store.
    #[error(
        "the audit log goes on to entry {last_seq}, but the tenant's record says it has {head_seq} entries: \
         entries were added outside the store"
    )]
    Unrecorded {
        /// The last sequence number the tenant's row records (0: none).
        head_seq: u64,
        /// The last entry in the log.
        last_seq: u64,
    },
    /// The last entry's hash is not the one the tenant's head records: the
    /// log was rewritten, hashes and all.
    #[error(
        "audit entry {seq}'s hash is not the one the tenant's record holds for it: the log was rewritten, hashes \
         and all"
    )]
    HeadMismatch {
        /// The last entry.
        seq: u64,
    },
    /// The log ends before a head the anchor file holds: its last entries
    /// were removed and the tenant's head set back to match (to an older
    /// entry, or to none).
    #[error(
        "the audit log ends at entry {last_seq}, but the anchor file holds its head at entry {anchored_seq}: \
         entries {} to {anchored_seq} were removed, and the tenant's head set back to match",
        last_seq + 1
    )]
    CutShort {
        /// The newest head the anchor file holds.
        anchored_seq: u64,
        /// The last entry in the log (0: none).
        last_seq: u64,
    },
    /// An entry's hash is not the one the anchor file holds for it: the log
    /// was rewritten from there, hashes and all.
    #[error(
        "audit entry {seq}'s hash is not the one the anchor file holds for it: the log was rewritten from there, \
         hashes and all"
    )]
    AnchorMismatch {
        /// The entry.
        seq: u64,
    },
}

/// Checks a tenant's whole audit log, as [`crate::Ledger::audit`] returns it
/// from the start, against the head its row records
/// ([`crate::Ledger::audit_head`]): sequence numbers run 1, 2, 3… without a
/// gap or a repeat, each `prev` is the previous entry's hash
/// ([`AUDIT_GENESIS`] for entry 1), each hash recomputes
/// ([`audit_hash`]), and the last entry is the head (which catches
/// removed last entries). Returns how many entries it verified, or the
/// first break.
pub fn verify_audit(entries: &[AuditEntry], head: Option<(u64, &str)>) -> Result<u64, AuditBreak> {
    let mut prev = AUDIT_GENESIS;
    for (i, entry) in entries.iter().enumerate() {
        let expected = i as u64 + 1;
        if entry.seq != expected {
            // A later entry holding the expected number means it was moved,
            // not removed.
            let later = entries[i + 1..].iter().any(|e| e.seq == expected);
            return Err(if entry.seq > expected && !later {
                AuditBreak::Removed { expected, found: entry.seq }
            } else {
                AuditBreak::Reordered { expected, found: entry.seq }
            });
        }
        if entry.prev != prev {
            return Err(AuditBreak::Relinked { seq: entry.seq });
        }
        if audit_hash(&entry.prev, entry.seq, entry.at_ms, &entry.tenant, &entry.kind, &entry.data) != entry.hash {
            return Err(AuditBreak::Edited { seq: entry.seq });
        }
        prev = &entry.hash;
    }
    let last_seq = entries.len() as u64;
    let head_seq = head.map_or(0, |(seq, _)| seq);
    if head_seq > last_seq {
        return Err(AuditBreak::Truncated { head_seq, last_seq });
    }
    if head_seq < last_seq {
        return Err(AuditBreak::Unrecorded { head_seq, last_seq });
    }
    if let Some((seq, hash)) = head
        && seq > 0
        && hash != prev
    {
        return Err(AuditBreak::HeadMismatch { seq });
    }
    Ok(last_seq)
}

/// Why a new key cannot be recorded, if it cannot: its hash is not a
/// SHA-256 in lowercase hex (perhaps the key itself).
pub(crate) fn check_new_key(key: &NewApiKey) -> Option<String> {
    (!is_sha256_hex(&key.hash)).then(|| crate::refusal::not_a_key_hash(&key.id))
}

/// Why a plugin cannot be stored, if it cannot: its bytes do not hash to
/// its address.
pub(crate) fn check_new_plugin(plugin: &NewPlugin) -> Option<String> {
    let actual = sha256_hex(&plugin.bytes);
    (actual != plugin.sha256).then(|| crate::refusal::plugin_hash_mismatch(&plugin.sha256, &actual))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A valid chain of `n` entries for tenant `t1`, and its head.
    fn chain(n: u64) -> (Vec<AuditEntry>, (u64, String)) {
        let mut entries: Vec<AuditEntry> = Vec::new();
        for seq in 1..=n {
            let head = entries.last().map(|e| (e.seq, e.hash.clone()));
            let data = serde_json::json!({"n": seq, "who": "alice ✓"});
            entries.push(next_audit_entry("t1", head, "run.start", &data, 1_000 + seq as i64));
        }
        let head = entries.last().map_or((0, AUDIT_GENESIS.to_string()), |e| (e.seq, e.hash.clone()));
        (entries, head)
    }

    fn verify(entries: &[AuditEntry], head: &(u64, String)) -> Result<u64, AuditBreak> {
        verify_audit(entries, Some((head.0, head.1.as_str())))
    }

    #[test]
    fn the_hash_covers_every_field_in_a_fixed_layout() {
        let hash = audit_hash(AUDIT_GENESIS, 1, 5, "t1", "k", "{}");
        assert_eq!(hash, sha256_hex(format!("{AUDIT_GENESIS}\n1\n5\nt1\nk\n{{}}")));
        assert!(is_sha256_hex(&hash));
        // The separators keep fields from sliding into each other.
        assert_ne!(audit_hash("a", 1, 5, "t1", "k", "{}"), audit_hash("a", 15, 5, "t1", "k", "{}"));
        assert_ne!(audit_hash("a", 1, 5, "t1", "kx", "{}"), audit_hash("a", 1, 5, "t1", "k", "x{}"));
        assert_eq!(sha256_hex(b""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    }

    #[test]
    fn a_valid_chain_verifies() {
        let (entries, head) = chain(5);
        assert_eq!(verify(&entries, &head), Ok(5));
        assert_eq!(entries[0].prev, AUDIT_GENESIS);
        assert_eq!(entries[1].prev, entries[0].hash);
        assert_eq!(verify_audit(&[], None), Ok(0));
        assert_eq!(verify_audit(&[], Some((0, AUDIT_GENESIS))), Ok(0));
    }

    #[test]
    fn edited_data_is_caught() {
        let (mut entries, head) = chain(5);
        entries[2].data = r#"{"n":3,"who":"mallory"}"#.into();
        assert_eq!(verify(&entries, &head), Err(AuditBreak::Edited { seq: 3 }));
        let message = AuditBreak::Edited { seq: 3 }.to_string();
        assert!(message.contains("audit entry 3 was changed"), "{message}");
    }

    #[test]
    fn an_edited_kind_or_time_is_caught() {
        let (mut entries, head) = chain(5);
        entries[1].kind = "run.cancel".into();
        assert_eq!(verify(&entries, &head), Err(AuditBreak::Edited { seq: 2 }));
        let (mut entries, head) = chain(5);
        entries[4].at_ms += 1;
        assert_eq!(verify(&entries, &head), Err(AuditBreak::Edited { seq: 5 }));
        let (mut entries, head) = chain(5);
        entries[0].tenant = "t2".into();
        assert_eq!(verify(&entries, &head), Err(AuditBreak::Edited { seq: 1 }));
    }

    #[test]
    fn an_edit_with_a_recomputed_hash_breaks_the_next_link() {
        let (mut entries, head) = chain(5);
        let e = &mut entries[1];
        e.data = r#"{"n":2,"who":"mallory"}"#.into();
        e.hash = audit_hash(&e.prev, e.seq, e.at_ms, &e.tenant, &e.kind, &e.data);
        assert_eq!(verify(&entries, &head), Err(AuditBreak::Relinked { seq: 3 }));
        // And a first entry that does not start from the genesis.
        let (mut entries, head) = chain(2);
        entries[0].prev = "1".repeat(64);
        assert_eq!(verify(&entries, &head), Err(AuditBreak::Relinked { seq: 1 }));
    }

    #[test]
    fn a_removed_middle_entry_is_caught() {
        let (mut entries, head) = chain(5);
        entries.remove(2);
        assert_eq!(verify(&entries, &head), Err(AuditBreak::Removed { expected: 3, found: 4 }));
        let (mut entries, head) = chain(5);
        entries.remove(0);
        assert_eq!(verify(&entries, &head), Err(AuditBreak::Removed { expected: 1, found: 2 }));
    }

    #[test]
    fn a_removed_last_entry_is_caught_by_the_head_only() {
        let (mut entries, head) = chain(5);
        entries.pop();
        // The shorter chain is valid in itself…
        let shorter = (4, entries[3].hash.clone());
        assert_eq!(verify(&entries, &shorter), Ok(4));
        // …but not against the head the tenant's row records.
        assert_eq!(verify(&entries, &head), Err(AuditBreak::Truncated { head_seq: 5, last_seq: 4 }));
        assert_eq!(verify(&[], &head), Err(AuditBreak::Truncated { head_seq: 5, last_seq: 0 }));
    }

    #[test]
    fn swapped_entries_are_caught() {
        // Moved: entry 3 where entry 2 should be.
        let (mut entries, head) = chain(5);
        entries.swap(1, 2);
        assert_eq!(verify(&entries, &head), Err(AuditBreak::Reordered { expected: 2, found: 3 }));
        // Their contents swapped under their numbers.
        let (mut entries, head) = chain(5);
        let (two, three) = (entries[1].clone(), entries[2].clone());
        entries[1] = AuditEntry { seq: 2, ..three };
        entries[2] = AuditEntry { seq: 3, ..two };
        assert_eq!(verify(&entries, &head), Err(AuditBreak::Relinked { seq: 2 }));
        // A repeat.
        let (mut entries, head) = chain(3);
        entries.insert(2, entries[1].clone());
        assert_eq!(verify(&entries, &head), Err(AuditBreak::Reordered { expected: 3, found: 2 }));
    }

    #[test]
    fn the_head_must_match_the_last_entry() {
        let (entries, head) = chain(3);
        assert_eq!(verify_audit(&entries, None), Err(AuditBreak::Unrecorded { head_seq: 0, last_seq: 3 }));
        assert_eq!(
            verify(&entries, &(2, entries[1].hash.clone())),
            Err(AuditBreak::Unrecorded { head_seq: 2, last_seq: 3 })
        );
        // The whole log rewritten from some entry on, hashes and all: each
        // link holds, but the head remembers the old last hash.
        let mut rewritten = entries.clone();
        rewritten.truncate(1);
        for _ in 2..=3 {
            let head = rewritten.last().map(|e| (e.seq, e.hash.clone()));
            rewritten.push(next_audit_entry("t1", head, "run.start", &serde_json::json!({"n": 0}), 1));
        }
        assert_eq!(verify(&rewritten, &head), Err(AuditBreak::HeadMismatch { seq: 3 }));
        assert_eq!(verify(&entries, &head), Ok(3));
    }

    #[test]
    fn hashes_of_keys_and_usage_periods() {
        assert!(is_sha256_hex(&sha256_hex("nexo_key")));
        assert!(!is_sha256_hex("nexo_key"));
        assert!(!is_sha256_hex(&sha256_hex("k").to_uppercase()));
        assert_eq!(usage_period(0), 0);
        assert_eq!(usage_period(3_599_999), 0);
        assert_eq!(usage_period(3_600_000), 3_600_000);
        assert_eq!(usage_period(-1), -3_600_000);
        let id = new_tenant_id();
        assert!(id.starts_with('t') && id.len() == 27, "{id}");
        assert!(new_key_id().starts_with('k'));
    }
}
