//! The operator's web settings: the search backend (`[search]` in the config
//! file, `--search-backend`, `--search-host`) and its network grant.
//!
//! ```toml
//! [search]
//! backend = "brave.wasm"              # relative to this file
//! hosts = ["api.search.brave.com"]    # what the backend may reach
//! allow-private = []                  # exact private addresses (self-hosted services)
//! settings = { base-url = "https://api.search.brave.com" }
//! api-key = { header = "X-Subscription-Token", env = "BRAVE_API_KEY" }
//! # sent only to https://api.search.brave.com:443; for another port or scheme:
//! # api-key = { header = "…", env = "…", origins = ["https://search.internal:8443"] }
//! ```

use std::path::{Path, PathBuf};

use clap::Args;
use nexo::ConfigError;
use nexo::config::{SearchSetup, SearchTable};

/// Search flags of `run` and `inspect`. They override `[search]`.
#[derive(Args, Debug, Clone, Default)]
pub struct SearchArgs {
    /// The search-backend component behind the `web_search` tool.
    #[arg(long, value_name = "FILE")]
    search_backend: Option<PathBuf>,
    /// Grant the search backend a host (repeatable; adds to `[search] hosts`).
    #[arg(long = "search-host", value_name = "HOST", value_delimiter = ',')]
    search_hosts: Vec<String>,
}

impl SearchArgs {
    /// The `--search-backend` flag.
    pub fn backend(&self) -> Option<&Path> {
        self.search_backend.as_deref()
    }

    /// Sets the `--search-backend` flag: a registry reference's cached file.
    pub fn set_backend(&mut self, file: PathBuf) {
        self.search_backend = Some(file);
    }

    /// The flags laid over `[search]`, with the backend's path made
    /// absolute: what a recorded run keeps. `None` without a backend.
    pub fn merged(&self, table: Option<&SearchTable>, config: Option<&Path>) -> Option<SearchTable> {
        let mut t = table.cloned().unwrap_or_default();
        let backend = match (&self.search_backend, &t.backend) {
            (Some(flag), _) => flag.clone(),
            (None, Some(path)) => match config.and_then(Path::parent) {
                Some(dir) if path.is_relative() => dir.join(path),
                _ => path.clone(),
            },
            (None, None) => return None,
        };
        t.backend = Some(std::path::absolute(&backend).unwrap_or(backend));
        t.hosts.extend(self.search_hosts.iter().cloned());
        Some(t)
    }

    /// Lays the flags over `[search]` (whose relative paths are relative to
    /// the config file). `None` when no backend is configured.
    pub fn resolve(
        &self,
        table: Option<&SearchTable>,
        config: Option<&Path>,
    ) -> Result<Option<SearchSetup>, ConfigError> {
        let mut table = table.cloned().unwrap_or_default();
        if let Some(flag) = &self.search_backend {
            // Relative to here, not to the config file.
            table.backend = Some(std::path::absolute(flag).unwrap_or(flag.clone()));
        }
        table.hosts.extend(self.search_hosts.iter().cloned());
        table.resolve(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> SearchTable {
        #[derive(serde::Deserialize)]
        struct File {
            search: SearchTable,
        }
        toml::from_str::<File>(text).unwrap().search
    }

    fn resolve(text: &str) -> Result<Option<SearchSetup>, String> {
        let args = SearchArgs { search_backend: None, search_hosts: Vec::new() };
        args.resolve(Some(&table(text)), None).map_err(|e| e.to_string())
    }

    // `PATH` stands in for the key variable: always set, and long enough.
    #[test]
    fn key_origins_come_from_the_config_and_show_in_the_key_source() {
        let setup = resolve(
            "[search]\nbackend = \"b.wasm\"\nhosts = [\"api.example.com\"]\n\
             api-key = { header = \"X-Token\", env = \"PATH\" }\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(setup.key_origins, ["https://api.example.com:443"]);
        assert_eq!(
            setup.key_source.as_deref(),
            Some("X-Token header, from $PATH, sent only to https://api.example.com:443")
        );
        let setup = resolve(
            "[search]\nbackend = \"b.wasm\"\nhosts = [\"10.0.0.5\"]\nallow-private = [\"10.0.0.5\"]\n\
             api-key = { header = \"X-Token\", env = \"PATH\", origins = [\"http://10.0.0.5:8888\"] }\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(setup.key_origins, ["http://10.0.0.5:8888"]);
    }

    #[test]
    fn a_bad_key_origin_is_a_search_configuration_error() {
        let err = resolve(
            "[search]\nbackend = \"b.wasm\"\nhosts = [\"api.example.com\"]\n\
             api-key = { header = \"X-Token\", env = \"PATH\", origins = [\"http://api.example.com:8080\"] }\n",
        )
        .unwrap_err();
        assert!(err.starts_with("[search]: the API key for `X-Token`") && err.contains("plain-http"), "{err}");
    }
}
