//! The on-disk compile cache.
//!
//! Compiling a component takes tens of milliseconds to seconds; loading a
//! compiled artifact takes well under one. Artifacts are stored as
//! `<sha256 of the component>-<engine key>.cwasm`, where the engine key hashes
//! wasmtime's own compatibility hash (version, target, and every setting that
//! changes the generated code). A changed engine simply misses the cache.

use std::hash::Hasher;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use sha2::{Digest, Sha256};
use wasmtime::component::Component;

/// Whether a component came from the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CacheOutcome {
    /// Loaded a cached artifact.
    Hit,
    /// Compiled, and stored the artifact.
    Miss,
    /// Compiled; caching is turned off.
    Disabled,
}

/// A directory of compiled components.
#[derive(Debug, Clone)]
pub struct ComponentCache {
    dir: PathBuf,
    engine_key: String,
}

/// The default cache directory, if a home or cache directory is known.
pub fn default_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("NEXO_CACHE_DIR") {
        return Some(PathBuf::from(dir));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("nexo").join("components"))
}

/// Feeds `Hash` output into SHA-256, so the key is stable across processes.
struct ShaHasher(Sha256);

impl Hasher for ShaHasher {
    fn finish(&self) -> u64 {
        0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

impl ComponentCache {
    /// Opens (creating if needed) the cache at `dir` for `engine`.
    pub fn open(dir: &Path, engine: &wasmtime::Engine) -> anyhow::Result<ComponentCache> {
        create_private_dir(dir).with_context(|| {
            format!("cannot create the compile cache at {}; set NEXO_CACHE_DIR or pass --no-cache", dir.display())
        })?;
        let mut hasher = ShaHasher(Sha256::new());
        std::hash::Hash::hash(&engine.precompile_compatibility_hash(), &mut hasher);
        let engine_key = hex::encode(&hasher.0.finalize()[..8]);
        Ok(ComponentCache { dir: dir.to_path_buf(), engine_key })
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the artifact for `bytes` lives.
    pub fn path_for(&self, bytes: &[u8]) -> PathBuf {
        let digest = hex::encode(Sha256::digest(bytes));
        self.dir.join(format!("{digest}-{}.cwasm", self.engine_key))
    }

    /// Loads the cached artifact for `bytes`, or compiles and stores it
    /// (calling `compiling` first). A damaged or incompatible artifact is
    /// replaced.
    pub fn load_or_compile(
        &self,
        engine: &wasmtime::Engine,
        bytes: &[u8],
        compiling: impl FnOnce(),
    ) -> anyhow::Result<(Component, CacheOutcome)> {
        let path = self.path_for(bytes);
        if path.is_file() {
            match load_artifact(engine, &path) {
                Ok(component) => return Ok((component, CacheOutcome::Hit)),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "discarding an unusable cached component");
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        compiling();
        let component = Component::new(engine, bytes)?;
        if let Err(e) = store_artifact(&component, &path) {
            // A read-only or full cache must not fail the load.
            tracing::warn!(path = %path.display(), error = %e, "cannot write to the compile cache");
        }
        Ok((component, CacheOutcome::Miss))
    }
}

#[allow(unsafe_code)]
fn load_artifact(engine: &wasmtime::Engine, path: &Path) -> anyhow::Result<Component> {
    // Read into memory rather than map the file: a mapped file that someone
    // truncates or rewrites in place would crash the process with SIGBUS.
    let bytes = std::fs::read(path)?;
    // SAFETY: the artifact was written by `store_artifact` into a directory
    // only the operator can write (created 0700), named after the hash of its
    // source and of this engine's settings; wasmtime re-checks its header and
    // compatibility before use.
    unsafe { Ok(Component::deserialize(engine, &bytes)?) }
}

fn store_artifact(component: &Component, path: &Path) -> anyhow::Result<()> {
    let bytes = component.serialize()?;
    let dir = path.parent().context("cache path has no parent")?;
    // Write to a temporary file and rename, so readers never see half a file.
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(&bytes)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let meta = std::fs::metadata(dir)?;
        if meta.permissions().mode() & 0o022 != 0 {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
    }
    Ok(())
}
