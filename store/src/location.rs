//! Where a store lives: memory, a SQLite file or a PostgreSQL URL.

use std::path::{Path, PathBuf};

use crate::{StoreError, StoreResult};

/// Where a store lives: `--store`, `NEXO_STORE` or the config file's
/// `store` key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// An SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL URL (`postgres://…`).
    Postgres(String),
    /// Nothing on disk: the run is forgotten when the process ends.
    Memory,
}

impl Location {
    /// Parses a path, a `sqlite://PATH` URL or a `postgres://` URL.
    pub fn parse(text: &str) -> StoreResult<Location> {
        let bad = |reason: &str| StoreError::BadLocation { location: text.to_string(), reason: reason.to_string() };
        if text.trim().is_empty() {
            return Err(bad("it is empty; give a file path, `sqlite://PATH` or `postgres://…`"));
        }
        if let Some(path) = text.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err(bad(
                    "`sqlite://` needs a file path after it, for example `sqlite:///var/lib/nexo/nexo.db`",
                ));
            }
            return Ok(Location::Sqlite(PathBuf::from(path)));
        }
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return Ok(Location::Postgres(text.to_string()));
        }
        if let Some((scheme, _)) = text.split_once("://") {
            return Err(bad(&format!(
                "the scheme `{scheme}` is not a store nexo knows; use a file path, `sqlite://PATH` or `postgres://…`"
            )));
        }
        Ok(Location::Sqlite(PathBuf::from(text)))
    }

    /// The default: `nexo.db` in the user's data directory
    /// (`$XDG_DATA_HOME/nexo`, else `~/.local/share/nexo`).
    pub fn default_path() -> StoreResult<PathBuf> {
        let base = match std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
            Some(dir) => PathBuf::from(dir),
            None => match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
                Some(home) => Path::new(&home).join(".local/share"),
                None => {
                    return Err(StoreError::BadLocation {
                        location: "(default)".into(),
                        reason: "neither XDG_DATA_HOME nor HOME is set; pass --store PATH or set NEXO_STORE".into(),
                    });
                }
            },
        };
        Ok(base.join("nexo").join("nexo.db"))
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Sqlite(path) => write!(f, "{}", path.display()),
            // A URL may carry a password: show only what comes after the `@`.
            Location::Postgres(url) => match url.rsplit_once('@') {
                Some((_, host)) => write!(f, "postgres://…@{host}"),
                None => f.write_str(url),
            },
            Location::Memory => f.write_str("(memory)"),
        }
    }
}
