//! What a serving node keeps under its data directory: each tenant's
//! workspace (`tenants/<id>/workspace`, the directory its local sandbox
//! works in) and its copies of tenants' plugins (`plugins/<sha256>.wasm`,
//! filled from the store on first need, so any node can run any run).

use std::io;
use std::path::{Path, PathBuf};

use nexo_store::Store;

/// The tenant's workspace directory on this node.
pub fn workspace(data_dir: &Path, tenant: &str) -> PathBuf {
    data_dir.join("tenants").join(tenant).join("workspace")
}

/// The tenant's workspace directory, created if it is not there yet.
pub fn ensure_workspace(data_dir: &Path, tenant: &str) -> io::Result<PathBuf> {
    let path = workspace(data_dir, tenant);
    std::fs::create_dir_all(&path)?;
    Ok(path)
}

/// Where this node keeps a plugin's bytes as a file (plugins load from
/// files, through the compile cache).
pub fn plugin_path(data_dir: &Path, sha256: &str) -> PathBuf {
    data_dir.join("plugins").join(format!("{sha256}.wasm"))
}

/// Writes the plugin's file from the store if this node lacks it (another
/// node took the upload); a file that exists is checked by its hash when
/// it loads. The file's check and write run on a blocking thread of `on`.
pub async fn materialize(
    store: &dyn Store,
    data_dir: &Path,
    tenant: &str,
    sha256: &str,
    on: &tokio::runtime::Handle,
) -> Result<PathBuf, String> {
    let path = plugin_path(data_dir, sha256);
    let lost = |e: tokio::task::JoinError| format!("cannot check the plugin's file {}: {e}", path.display());
    let probe = path.clone();
    if on.spawn_blocking(move || probe.is_file()).await.map_err(lost)? {
        return Ok(path);
    }
    let bytes = store
        .plugin_bytes(tenant, sha256)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("the plugin {sha256} is no longer in the store"))?;
    let to = path.clone();
    on.spawn_blocking(move || write_atomically(&to, &bytes))
        .await
        .map_err(lost)?
        .map_err(|e| format!("cannot write the plugin to {}: {e}", path.display()))?;
    Ok(path)
}

/// Writes `bytes` to `path` whole or not at all (a temporary file, synced, then renamed).
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut tmp, bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
