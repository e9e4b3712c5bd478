//! The local content-addressed cache of pulled components.
//!
//! `blobs/sha256/HEX` holds a component whose SHA-256 is HEX (the layer's
//! digest, and the `component_sha256` a run records); `manifests/sha256/HEX`
//! maps a manifest digest to its layer. A blob is written to a temporary
//! file and renamed into place only after its digest checked out, and a
//! manifest is indexed only after its blob is in place, so a refused or
//! tampered download leaves nothing behind.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::error::RegistryError;

/// The cache directory: `$NEXO_CACHE_DIR/registry` when the compile cache
/// is moved with `NEXO_CACHE_DIR`, else `$XDG_CACHE_HOME/nexo/registry`,
/// else `~/.cache/nexo/registry`.
pub fn default_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("NEXO_CACHE_DIR") {
        return Some(PathBuf::from(dir).join("registry"));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("nexo").join("registry"))
}

/// The hex of a `sha256:HEX` digest, if it is one (64 lowercase hex digits:
/// it becomes a file name).
pub fn sha256_hex(digest: &str) -> Option<&str> {
    let hex = digest.strip_prefix("sha256:")?;
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))).then_some(hex)
}

/// What the index keeps of a pulled manifest.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The component layer's digest (`sha256:…`).
    pub layer: String,
    /// The reference it was pulled as, for people reading the cache.
    pub reference: String,
    /// The manifest as the registry served it (its SHA-256 is the digest):
    /// what ties the digest to the layer when the cache is checked offline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<String>,
    /// The signatures naming the digest found when it was pulled under a
    /// trust rule: a run from the cache verifies them again, with no registry.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signatures: Vec<super::signatures::StoredSignature>,
    /// The repositories that served this manifest
    /// ([`PluginReference::repository`](super::PluginReference::repository)):
    /// the cache answers a reference by digest only for one of them, so a
    /// digest is no way into a repository nobody pulled it from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repositories: Vec<String>,
}

/// What [`BlobCache::prune`] removed (or, in a dry run, would remove).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Pruned {
    /// The SHA-256 of each component removed.
    pub components: Vec<String>,
    /// Their bytes in all.
    pub bytes: u64,
    /// The components kept.
    pub kept: usize,
}

/// How old an entry's time may be before a use writes it again.
const TOUCH_EVERY: Duration = Duration::from_secs(3600);

/// A cache directory.
#[derive(Debug, Clone)]
pub struct BlobCache {
    dir: PathBuf,
}

impl BlobCache {
    /// Opens (creating if needed) the cache at `dir`.
    pub fn open(dir: &Path) -> Result<BlobCache, RegistryError> {
        let cache = BlobCache { dir: dir.to_path_buf() };
        for sub in [cache.dir.join("blobs/sha256"), cache.dir.join("manifests/sha256"), cache.dir.join("tmp")] {
            // A look first: a run from the cache opens it each time.
            if !sub.is_dir() {
                std::fs::create_dir_all(&sub).map_err(|source| cache.io(source))?;
            }
        }
        Ok(cache)
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the blob of `digest` lives (whether or not it is there).
    pub fn blob_path(&self, hex: &str) -> PathBuf {
        self.dir.join("blobs/sha256").join(hex)
    }

    /// The cached blob of layer `digest`, if present.
    pub fn blob(&self, digest: &str) -> Option<PathBuf> {
        let path = self.blob_path(sha256_hex(digest)?);
        path.is_file().then_some(path)
    }

    /// A temporary file inside the cache, for a download in progress (on
    /// the same file system, so the rename is atomic).
    pub fn temp_file(&self) -> Result<tempfile::NamedTempFile, RegistryError> {
        tempfile::NamedTempFile::new_in(self.dir.join("tmp")).map_err(|source| self.io(source))
    }

    /// Moves `file` into place as the blob of `digest`, if its content has
    /// that digest; otherwise deletes it and says whose digest it had.
    pub fn commit_blob(
        &self,
        file: tempfile::NamedTempFile,
        digest: &str,
        reference: &str,
    ) -> Result<PathBuf, RegistryError> {
        let actual = file_sha256(file.path()).map_err(|source| self.io(source))?;
        let expected = sha256_hex(digest).unwrap_or_default();
        if actual != expected {
            return Err(RegistryError::DigestMismatch {
                what: "the component layer",
                reference: reference.to_string(),
                expected: digest.to_string(),
                actual: format!("sha256:{actual}"),
            });
        }
        let path = self.blob_path(expected);
        file.persist(&path).map_err(|e| self.io(e.error))?;
        Ok(path)
    }

    /// Indexes manifest `digest` as holding `entry`'s layer.
    pub fn record(&self, digest: &str, entry: &Entry) -> Result<(), RegistryError> {
        let Some(hex) = sha256_hex(digest) else { return Ok(()) };
        let mut file = self.temp_file()?;
        serde_json::to_writer(&mut file, entry).map_err(|e| self.io(e.into()))?;
        file.persist(self.dir.join("manifests/sha256").join(hex)).map_err(|e| self.io(e.error))?;
        Ok(())
    }

    /// The indexed layer of manifest `digest`, if its blob is still cached.
    pub fn lookup(&self, digest: &str) -> Option<(Entry, PathBuf)> {
        let hex = sha256_hex(digest)?;
        let text = std::fs::read(self.dir.join("manifests/sha256").join(hex)).ok()?;
        let entry: Entry = serde_json::from_slice(&text).ok()?;
        let blob = self.blob(&entry.layer)?;
        Some((entry, blob))
    }

    /// Marks manifest `digest` as used now (its index entry's time), so
    /// that [`prune`](Self::prune) keeps what runs still use.
    pub fn touch(&self, digest: &str) {
        let Some(hex) = sha256_hex(digest) else { return };
        let entry = self.dir.join("manifests/sha256").join(hex);
        // A use within the hour says nothing new to a prune counted in days,
        // and a look costs a run from the cache less than a write.
        let recent = |t: SystemTime| t.elapsed().is_ok_and(|age| age < TOUCH_EVERY);
        if std::fs::metadata(&entry).and_then(|m| m.modified()).is_ok_and(recent) {
            return;
        }
        if let Ok(file) = std::fs::File::options().append(true).open(entry) {
            let _ = file.set_modified(SystemTime::now());
        }
    }

    /// Removes what has not been used for `unused_for`: manifests' index
    /// entries, the components no remaining entry names, and downloads
    /// left unfinished. A component whose SHA-256 is in `keep` (the runs
    /// that may still go on name theirs) stays, with its entries. With
    /// `dry_run`, nothing is removed, and the answer says what would be.
    pub fn prune(&self, keep: &BTreeSet<String>, unused_for: Duration, dry_run: bool) -> Result<Pruned, RegistryError> {
        let cutoff = SystemTime::now().checked_sub(unused_for).unwrap_or(SystemTime::UNIX_EPOCH);
        let old = |path: &Path| std::fs::metadata(path).and_then(|m| m.modified()).is_ok_and(|t| t < cutoff);
        let remove = |path: &Path| if dry_run { Ok(()) } else { std::fs::remove_file(path) };
        let mut named = BTreeSet::new();
        for path in self.files("manifests/sha256")? {
            let layer = std::fs::read(&path)
                .ok()
                .and_then(|text| serde_json::from_slice::<Entry>(&text).ok())
                .and_then(|entry| sha256_hex(&entry.layer).map(str::to_string));
            match layer {
                Some(hex) if keep.contains(&hex) || !old(&path) => {
                    named.insert(hex);
                }
                _ if old(&path) => remove(&path).map_err(|e| self.io(e))?,
                _ => {}
            }
        }
        let mut pruned = Pruned::default();
        for path in self.files("blobs/sha256")? {
            let hex = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if keep.contains(&hex) || named.contains(&hex) || !old(&path) {
                pruned.kept += 1;
                continue;
            }
            let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            remove(&path).map_err(|e| self.io(e))?;
            pruned.components.push(hex);
            pruned.bytes += size;
        }
        for path in self.files("tmp")?.iter().filter(|p| old(p)) {
            remove(path).map_err(|e| self.io(e))?;
        }
        Ok(pruned)
    }

    /// The files directly in `sub`.
    fn files(&self, sub: &str) -> Result<Vec<PathBuf>, RegistryError> {
        let dir = self.dir.join(sub);
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(self.io(e)),
        };
        let mut files = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| self.io(e))?;
            if entry.file_type().map_err(|e| self.io(e))?.is_file() {
                files.push(entry.path());
            }
        }
        files.sort();
        Ok(files)
    }

    fn io(&self, source: std::io::Error) -> RegistryError {
        RegistryError::Cache { dir: self.dir.clone(), source }
    }
}

/// The SHA-256 of a file's content, in hex.
pub fn file_sha256(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blob_is_kept_only_under_its_own_digest() {
        let dir = tempfile::tempdir().unwrap();
        let cache = BlobCache::open(dir.path()).unwrap();
        let bytes = b"component bytes";
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(bytes)));
        let other = format!("sha256:{}", hex::encode(Sha256::digest(b"something else")));
        let mut wrong = cache.temp_file().unwrap();
        std::io::Write::write_all(&mut wrong, bytes).unwrap();
        let refused = cache.commit_blob(wrong, &other, "r").unwrap_err();
        assert!(matches!(refused, RegistryError::DigestMismatch { .. }), "{refused}");
        assert!(cache.blob(&other).is_none() && cache.blob(&digest).is_none());
        assert_eq!(std::fs::read_dir(dir.path().join("tmp")).unwrap().count(), 0, "the refused file is deleted");
        let mut right = cache.temp_file().unwrap();
        std::io::Write::write_all(&mut right, bytes).unwrap();
        let path = cache.commit_blob(right, &digest, "r").unwrap();
        assert_eq!(std::fs::read(path).unwrap(), bytes);
        assert!(sha256_hex("sha256:../../etc").is_none());
    }

    /// Prune removes what is unused, and never what a run may still need or
    /// a recent pull named.
    #[test]
    fn prune_removes_only_the_unused() {
        let dir = tempfile::tempdir().unwrap();
        let cache = BlobCache::open(dir.path()).unwrap();
        let long_ago = SystemTime::now() - Duration::from_secs(7200);
        let aged = |path: &Path| {
            std::fs::File::options().append(true).open(path).unwrap().set_modified(long_ago).unwrap();
        };
        let blob = |bytes: &[u8]| {
            let hex = hex::encode(Sha256::digest(bytes));
            let path = cache.blob_path(&hex);
            std::fs::write(&path, bytes).unwrap();
            aged(&path);
            hex
        };
        let entry = |layer: &str, digest: &str, old: bool| {
            let layer = format!("sha256:{layer}");
            let entry = Entry {
                layer,
                reference: "r".into(),
                manifest: None,
                signatures: Vec::new(),
                repositories: Vec::new(),
            };
            cache.record(digest, &entry).unwrap();
            if old {
                aged(&dir.path().join("manifests/sha256").join(sha256_hex(digest).unwrap()));
            }
        };
        let (kept_by_run, recently_pulled, orphan, stale) =
            (blob(b"a run's"), blob(b"recent"), blob(b"orphan"), blob(b"stale"));
        let (recent, old) = (format!("sha256:{}", "1".repeat(64)), format!("sha256:{}", "2".repeat(64)));
        entry(&recently_pulled, &recent, false);
        entry(&stale, &old, true);
        let download = dir.path().join("tmp/left-over");
        std::fs::write(&download, b"partial").unwrap();
        aged(&download);
        let keep = BTreeSet::from([kept_by_run.clone()]);
        let hour = Duration::from_secs(3600);

        let mut expected = vec![orphan.clone(), stale.clone()];
        expected.sort();
        let dry = cache.prune(&keep, hour, true).unwrap();
        assert_eq!((dry.components.clone(), dry.kept), (expected.clone(), 2));
        assert!(cache.blob_path(&orphan).exists() && download.exists(), "a dry run removes nothing");

        let pruned = cache.prune(&keep, hour, false).unwrap();
        assert_eq!(pruned, dry);
        assert_eq!(pruned.bytes, (b"orphan".len() + b"stale".len()) as u64);
        for hex in [&kept_by_run, &recently_pulled] {
            assert!(cache.blob_path(hex).exists(), "{hex} is kept");
        }
        assert!(!cache.blob_path(&orphan).exists() && !cache.blob_path(&stale).exists());
        assert!(cache.lookup(&recent).is_some() && cache.lookup(&old).is_none());
        assert!(!download.exists(), "an unfinished download is removed");
        // Used now, an old entry is no longer unused; a run that ended keeps nothing.
        entry(&recently_pulled, &old, true);
        cache.touch(&old);
        std::fs::remove_file(dir.path().join("manifests/sha256").join(sha256_hex(&recent).unwrap())).unwrap();
        assert_eq!(cache.prune(&BTreeSet::new(), hour, false).unwrap().components, vec![kept_by_run]);
    }
}
