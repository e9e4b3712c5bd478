//! `[search]` resolved: the search backend a run uses, with its network
//! grant and the API key read from the environment (never recorded).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::ConfigError;
use crate::egress::{ApiKey, EgressGrant};
use serde::{Deserialize, Serialize};

/// `[search]`: the search backend and its network grant. A recorded run
/// keeps the merged table: it names the key's variable, never the key.
#[derive(Serialize, Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct SearchTable {
    /// The backend component, relative to the config file.
    pub backend: Option<PathBuf>,
    /// What the backend may reach.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Exact private addresses it may reach (self-hosted services).
    #[serde(default)]
    pub allow_private: Vec<IpAddr>,
    /// The backend's settings.
    #[serde(default)]
    pub settings: BTreeMap<String, String>,
    /// Where its API key comes from.
    pub api_key: Option<ApiKeyTable>,
    /// Its requests' timeout.
    pub timeout_secs: Option<u64>,
}

/// Where the search backend's API key comes from. The key itself never sits
/// in the config file: it is read from the environment of the host process.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ApiKeyTable {
    /// The header the host puts the key in.
    pub header: String,
    /// The environment variable holding the key.
    pub env: String,
    /// Put before the key, for example `Bearer `.
    #[serde(default)]
    pub prefix: String,
    /// The exact origins the key goes to; by default `https://<host>:443`
    /// for each of `hosts`.
    #[serde(default)]
    pub origins: Vec<String>,
}

/// The search backend the operator chose, with its grant.
#[derive(Debug, Clone)]
pub struct SearchSetup {
    /// The component.
    pub backend: PathBuf,
    /// Its network grant.
    pub grant: EgressGrant,
    /// Where the key comes from and where it goes, for `inspect` (never
    /// the key).
    pub key_source: Option<String>,
    /// The exact origins the key is sent to (`scheme://host:port`).
    pub key_origins: Vec<String>,
}

impl SearchTable {
    /// The backend and its grant, with the key read from the environment;
    /// `config` is the config file the table came from (a relative backend
    /// path is relative to it). `None` when no backend is configured.
    pub fn resolve(&self, config: Option<&Path>) -> Result<Option<SearchSetup>, ConfigError> {
        let table = self.clone();
        let backend = match &table.backend {
            Some(path) => match config.and_then(Path::parent) {
                Some(dir) if path.is_relative() => dir.join(path),
                _ => path.clone(),
            },
            None => {
                if !table.hosts.is_empty() {
                    return Err(ConfigError::invalid(
                        "[search]",
                        "search hosts are granted but no backend is set: add `backend` to `[search]` or pass \
                         --search-backend",
                    ));
                }
                return Ok(None);
            }
        };
        let hosts = table.hosts;
        let (api_key, key_source) = match &table.api_key {
            None => (None, None),
            Some(k) => {
                let value = std::env::var(&k.env).map_err(|_| {
                    ConfigError::invalid(
                        "[search] api-key",
                        format!(
                            "the search backend's API key is read from ${}, which is not set: export it, \
                             or remove `api-key` from `[search]`",
                            k.env
                        ),
                    )
                })?;
                let key =
                    ApiKey { header: k.header.clone(), prefix: k.prefix.clone(), value, origins: k.origins.clone() };
                (Some(key), Some(format!("{} header, from ${}", k.header, k.env)))
            }
        };
        let grant = EgressGrant {
            hosts,
            allow_private: table.allow_private,
            api_key,
            settings: table.settings,
            timeout: table.timeout_secs.map(Duration::from_secs),
            client: None,
        };
        // Check the grant now, so a bad host entry is a configuration error before anything runs.
        grant.egress().map_err(|e| ConfigError::invalid("[search]", format!("[search]: {e}")))?;
        let key_origins = grant.key_origins();
        let key_source = key_source.map(|source| format!("{source}, sent only to {}", key_origins.join(", ")));
        Ok(Some(SearchSetup { backend, grant, key_source, key_origins }))
    }
}
