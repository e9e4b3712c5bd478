//! Finding the container CLI's executable.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// Finds an executable named `name` in a `PATH`-style list. Empty entries
/// (the current directory) are skipped.
pub fn find_on_path(name: &str, path: &OsStr) -> Option<PathBuf> {
    std::env::split_paths(path).filter(|dir| !dir.as_os_str().is_empty()).map(|dir| dir.join(name)).find(|p| {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        }
        #[cfg(not(unix))]
        {
            p.is_file()
        }
    })
}

/// An explicit `binary`: a path to a file, or a bare name (such as
/// `podman`) looked up in `path`.
pub(crate) fn resolve_override(binary: &Path, path: &OsStr) -> Option<PathBuf> {
    if binary.is_file() {
        return Some(binary.to_path_buf());
    }
    match binary.to_str() {
        Some(name) if binary.components().count() == 1 && !name.contains('/') => find_on_path(name, path),
        _ => None,
    }
}
