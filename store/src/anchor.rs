//! Audit anchors: each tenant's audit head, kept outside the database.
//!
//! The chain ([`crate::verify_audit`]) catches an entry edited, removed
//! from the middle or reordered, but not a log cut short with its head
//! (the tenant row's `audit_seq` and `audit_hash`) set back to match: both
//! live in the same database. An anchor file is an append-only text file,
//! one line per head a server saw, `TENANT SEQ HASH`; every line is a
//! checkpoint the log must still hold ([`verify_anchored`]). Whoever can
//! write the database but not the file (a database account, a restored
//! backup, another node's store credentials) can no longer cut or reset a
//! log unseen; whoever can write both can.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::tenants::{AuditBreak, AuditEntry, is_sha256_hex};

/// One line of an anchor file: a tenant's head as a server saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Anchored {
    /// The tenant's id.
    pub tenant: String,
    /// The head's sequence number.
    pub seq: u64,
    /// The head entry's hash.
    pub hash: String,
}

/// An anchor file that cannot be read: which line, and why.
#[derive(Debug, thiserror::Error)]
pub enum AnchorError {
    /// The file cannot be opened, read or written.
    #[error("cannot use the audit anchor file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line is not `TENANT SEQ HASH`.
    #[error(
        "line {line} of the audit anchor file {path} is not `TENANT SEQ HASH`: the file was edited or damaged, \
         so the logs it anchors cannot be trusted"
    )]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The line's number, from 1.
        line: usize,
    },
}

/// The lines of an anchor file that were written whole.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Anchors {
    /// Every whole line, in order.
    pub lines: Vec<Anchored>,
    /// The bytes of a last line without its `\n` (a write cut short by a
    /// crash), left out: it never was a durable checkpoint.
    pub torn: usize,
}

/// An anchor file, open for appending.
#[derive(Debug)]
pub struct AuditAnchor {
    path: PathBuf,
    file: Mutex<File>,
    /// The newest head written for each tenant, so a head is written once.
    written: Mutex<BTreeMap<String, (u64, String)>>,
    /// Whether `open` created the file.
    created: bool,
    /// The bytes of a torn last line `open` cut off.
    repaired: usize,
}

/// Whether `id` can be a tenant's id on an anchor line: `[A-Za-z0-9_-]+`
/// (a space or a newline in it would forge a line).
pub fn is_anchorable_tenant(id: &str) -> bool {
    !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl AuditAnchor {
    /// Opens (or creates, mode 0600, its directory synced) the anchor file
    /// at `path` for appending, and reads the heads it holds. A torn last
    /// line (a crash mid-write) is cut off, back to the last `\n`.
    pub fn open(path: &Path) -> Result<AuditAnchor, AnchorError> {
        let io = |source| AnchorError::Io { path: path.to_path_buf(), source };
        let mut written = BTreeMap::new();
        let created = !path.exists();
        let mut repaired = 0;
        if !created {
            let anchors = read_anchors(path)?;
            for a in anchors.lines {
                written.insert(a.tenant, (a.seq, a.hash));
            }
            if anchors.torn > 0 {
                let file = OpenOptions::new().write(true).open(path).map_err(io)?;
                let len = file.metadata().map_err(io)?.len();
                file.set_len(len.saturating_sub(anchors.torn as u64)).map_err(io)?;
                file.sync_data().map_err(io)?;
                repaired = anchors.torn;
            }
        }
        let mut options = OpenOptions::new();
        options.create(true).append(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(path).map_err(io)?;
        file.seek(SeekFrom::End(0)).map_err(io)?;
        if created {
            file.sync_all().map_err(io)?;
            // The new file's name is durable only once its directory is.
            #[cfg(unix)]
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
            }
        }
        Ok(AuditAnchor {
            path: path.to_path_buf(),
            file: Mutex::new(file),
            written: Mutex::new(written),
            created,
            repaired,
        })
    }

    /// Whether `open` created the file: no head was anchored before, so a
    /// log cut short before now cannot be found with it.
    pub fn created(&self) -> bool {
        self.created
    }

    /// The bytes of a torn last line `open` cut off (0: none).
    pub fn repaired(&self) -> usize {
        self.repaired
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends the heads that changed since they were last written, and
    /// makes them durable before it returns. Returns how many it wrote. A
    /// head is known as written only once it is durable, so a failed write
    /// is tried again next time. Tenant ids that are not
    /// [`is_anchorable_tenant`] are skipped (the caller logs them).
    pub fn record(&self, heads: &[(String, u64, String)]) -> Result<usize, AnchorError> {
        let io = |source| AnchorError::Io { path: self.path.clone(), source };
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        let mut text = String::new();
        let mut new = Vec::new();
        for (tenant, seq, hash) in heads {
            if *seq == 0
                || !is_anchorable_tenant(tenant)
                || !is_sha256_hex(hash)
                || written.get(tenant).is_some_and(|(s, h)| s == seq && h == hash)
            {
                continue;
            }
            text.push_str(&format!("{tenant} {seq} {hash}\n"));
            new.push((tenant.clone(), (*seq, hash.clone())));
        }
        if text.is_empty() {
            return Ok(0);
        }
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        file.write_all(text.as_bytes()).map_err(io)?;
        file.sync_data().map_err(io)?;
        let count = new.len();
        written.extend(new);
        Ok(count)
    }
}

/// Every whole line of the anchor file at `path`, in order; a last line
/// without its `\n` is left out ([`Anchors::torn`]).
pub fn read_anchors(path: &Path) -> Result<Anchors, AnchorError> {
    let bytes = std::fs::read(path).map_err(|source| AnchorError::Io { path: path.to_path_buf(), source })?;
    let whole = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let torn = bytes.len() - whole;
    let text = std::str::from_utf8(&bytes[..whole])
        .map_err(|e| AnchorError::Malformed { path: path.to_path_buf(), line: line_of(&bytes, e.valid_up_to()) })?;
    let mut anchors = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let malformed = || AnchorError::Malformed { path: path.to_path_buf(), line: i + 1 };
        let mut words = line.split(' ');
        let (Some(tenant), Some(seq), Some(hash), None) = (words.next(), words.next(), words.next(), words.next())
        else {
            return Err(malformed());
        };
        let seq: u64 = seq.parse().map_err(|_| malformed())?;
        if tenant.is_empty() || seq == 0 || !is_sha256_hex(hash) {
            return Err(malformed());
        }
        anchors.push(Anchored { tenant: tenant.to_string(), seq, hash: hash.to_string() });
    }
    Ok(Anchors { lines: anchors, torn })
}

/// The line, from 1, that byte `at` is on.
fn line_of(bytes: &[u8], at: usize) -> usize {
    bytes[..at].iter().filter(|b| **b == b'\n').count() + 1
}

/// Checks a tenant's whole log (as [`crate::verify_audit`] takes it)
/// against the heads anchored for it: each must still be in the log, with
/// its hash. A log that ends before an anchored head was cut short (its
/// head reset to an older entry, or to none); an entry whose hash differs
/// from the anchored one was rewritten, and the log with it.
pub fn verify_anchored(entries: &[AuditEntry], anchored: &[(u64, &str)]) -> Result<(), AuditBreak> {
    let last_seq = entries.last().map_or(0, |e| e.seq);
    let Some(&(newest, _)) = anchored.iter().max_by_key(|(seq, _)| *seq) else { return Ok(()) };
    if newest > last_seq {
        return Err(AuditBreak::CutShort { anchored_seq: newest, last_seq });
    }
    for &(seq, hash) in anchored {
        // Entries run 1, 2, 3… (verify_audit checks): entry `seq` is at `seq - 1`.
        let found = usize::try_from(seq - 1).ok().and_then(|i| entries.get(i)).filter(|e| e.seq == seq);
        if found.is_none_or(|e| e.hash != hash) {
            return Err(AuditBreak::AnchorMismatch { seq });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::tenants::next_audit_entry;

    fn chain(n: u64) -> Vec<AuditEntry> {
        let mut entries: Vec<AuditEntry> = Vec::new();
        for seq in 1..=n {
            let head = entries.last().map(|e| (e.seq, e.hash.clone()));
            entries.push(next_audit_entry("t1", head, "k", &serde_json::json!({"n": seq}), 1_000));
        }
        entries
    }

    #[test]
    fn an_anchor_file_records_each_new_head_once_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit-anchor");
        let log = chain(3);
        let anchor = AuditAnchor::open(&path).unwrap();
        let head = |i: usize| ("t1".to_string(), log[i].seq, log[i].hash.clone());
        assert_eq!(anchor.record(&[head(0), ("t2".into(), 0, String::new())]).unwrap(), 1, "an empty log: none");
        assert_eq!(anchor.record(&[head(0)]).unwrap(), 0, "unchanged");
        assert_eq!(anchor.record(&[head(2)]).unwrap(), 1);
        drop(anchor);
        // Reopened, it appends after what it holds and knows its heads.
        let anchor = AuditAnchor::open(&path).unwrap();
        assert_eq!(anchor.record(&[head(2)]).unwrap(), 0);
        let read = read_anchors(&path).unwrap().lines;
        assert_eq!(read.iter().map(|a| a.seq).collect::<Vec<_>>(), [1, 3]);
        std::fs::write(&path, "t1 3 nothex\n").unwrap();
        let err = read_anchors(&path).unwrap_err();
        assert!(matches!(err, AnchorError::Malformed { line: 1, .. }), "{err}");
    }

    #[test]
    fn a_torn_last_line_is_left_out_and_cut_off_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit-anchor");
        let log = chain(2);
        let anchor = AuditAnchor::open(&path).unwrap();
        assert!(anchor.created());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        }
        anchor.record(&[("t1".into(), 1, log[0].hash.clone())]).unwrap();
        drop(anchor);
        // A crash mid-write: half of the next line.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(format!("t1 2 {}", &log[1].hash[..20]).as_bytes()).unwrap();
        drop(f);
        let read = read_anchors(&path).unwrap();
        assert_eq!((read.lines.len(), read.torn), (1, 25));
        let anchor = AuditAnchor::open(&path).unwrap();
        assert!(!anchor.created());
        assert_eq!(anchor.repaired(), 25);
        assert_eq!(anchor.record(&[("t1".into(), 2, log[1].hash.clone())]).unwrap(), 1);
        let read = read_anchors(&path).unwrap();
        assert_eq!((read.lines.iter().map(|a| a.seq).collect::<Vec<_>>(), read.torn), (vec![1, 2], 0));
        // A tenant id that would forge a line is not written.
        let forged = "t1 9 x\nt2".to_string();
        assert_eq!(anchor.record(&[(forged, 3, log[1].hash.clone())]).unwrap(), 0);
        assert!(!is_anchorable_tenant("a b") && is_anchorable_tenant("t_1-A"));
    }

    #[test]
    fn a_log_cut_short_or_rewritten_fails_its_anchors() {
        let log = chain(5);
        let anchored: Vec<(u64, &str)> = vec![(2, &log[1].hash), (5, &log[4].hash)];
        assert_eq!(verify_anchored(&log, &anchored), Ok(()));
        assert_eq!(verify_anchored(&log, &[]), Ok(()));
        // The tail removed, the head set back to entry 3 (the chain still verifies).
        assert_eq!(verify_anchored(&log[..3], &anchored), Err(AuditBreak::CutShort { anchored_seq: 5, last_seq: 3 }));
        // Reset to the genesis hash: no entries at all.
        assert_eq!(verify_anchored(&[], &anchored), Err(AuditBreak::CutShort { anchored_seq: 5, last_seq: 0 }));
        // Rewritten from entry 2 on, to the same length.
        let mut other = log[..1].to_vec();
        for _ in 2..=5 {
            let head = other.last().map(|e| (e.seq, e.hash.clone()));
            other.push(next_audit_entry("t1", head, "forged", &serde_json::json!({}), 1_000));
        }
        assert_eq!(verify_anchored(&other, &anchored), Err(AuditBreak::AnchorMismatch { seq: 2 }));
        let err = AuditBreak::CutShort { anchored_seq: 5, last_seq: 3 }.to_string();
        assert!(err.contains("entry 5") && err.contains("ends at entry 3"), "{err}");
    }
}
