//! What the operator sets for registries: the config file's `[registries]`
//! table, and the settings a pull runs under.

use std::path::Path;

use serde::Deserialize;

use super::error::RegistryError;
use super::trust::{Trust, TrustRule};

/// `[registries]` in the config file.
#[derive(Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RegistriesTable {
    /// Registries (`host:port`, as references name them) reached over plain
    /// HTTP; every other registry is reached over HTTPS.
    #[serde(default)]
    pub insecure: Vec<String>,
    /// `[[registries.trust]]`: whose signatures are trusted where, and
    /// whether one is required.
    #[serde(default)]
    pub trust: Vec<TrustRule>,
}

/// What the operator set for registries: which are reached over plain
/// HTTP, whose signatures are trusted where, and how large a component
/// may be pulled.
pub struct Registries {
    /// Registries (`host:port`) reached over plain HTTP.
    pub insecure: Vec<String>,
    /// The trust rules, their keys loaded.
    pub trust: Trust,
    /// The largest component pulled (its layer's declared size, checked
    /// before anything is downloaded): any plugin file's cap, or the
    /// server's upload limit for tenants' pulls.
    pub max_component_bytes: u64,
}

impl Default for Registries {
    fn default() -> Self {
        Registries {
            insecure: Vec::new(),
            trust: Trust::default(),
            max_component_bytes: crate::files::MAX_COMPONENT_BYTES,
        }
    }
}

impl Registries {
    /// The config file's table with `insecure` added; relative key paths
    /// are taken from `base`.
    pub fn new(table: &RegistriesTable, insecure: &[String], base: &Path) -> Result<Registries, RegistryError> {
        Ok(Registries {
            insecure: table.insecure.iter().chain(insecure).cloned().collect(),
            trust: Trust::load(&table.trust, base)?,
            ..Registries::default()
        })
    }
}
