//! Plugins from OCI registries: references, pulling into a local
//! content-addressed cache, and pushing, in the wasm OCI artifact layout
//! (one `application/wasm` layer) that wkg, wasmCloud and Spin use.
//!
//! [`resolve`] is the one place a plugin argument becomes a file: a path
//! stays a path; a registry reference ([`reference`] has the rule) is pulled
//! (or found in the cache) and becomes the cached component's path,
//! `…/blobs/sha256/HEX`. A run records that path and the component's
//! SHA-256, so a resume loads the very digest it started with, whatever the
//! tag names by then.

mod auth;
mod cache;
mod capped;
mod client;
mod credentials;
mod error;
mod pull;
mod push;
pub mod reference;

use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use cache::{BlobCache, Entry, default_dir as default_cache_dir, file_sha256, sha256_hex};
pub use client::RegistryClient;
pub use credentials::{Credentials, PASSWORD_VAR, USERNAME_VAR};
pub use error::RegistryError;
pub use pull::{Pulled, pull};
pub use push::{Pushed, push};
pub use reference::{PluginReference, Source, classify, is_reference};

/// `[registries]` in the config file.
#[derive(Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RegistriesTable {
    /// Registries (`host:port`, as references name them) reached over plain
    /// HTTP; every other registry is reached over HTTPS.
    #[serde(default)]
    pub insecure: Vec<String>,
}

/// A plugin argument made a local file.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The file to load.
    pub path: PathBuf,
    /// The reference and what it was pulled as, when it came from a registry.
    pub pulled: Option<(PluginReference, Pulled)>,
}

/// The file `arg` names: itself if it is a path; if it is a registry
/// reference, the cached component it resolves to (pulled into the cache
/// at `cache_dir`, else the default one, if needed). `insecure` lists the
/// registries reached over plain HTTP.
pub async fn resolve(arg: &Path, insecure: &[String], cache_dir: Option<&Path>) -> Result<Resolved, RegistryError> {
    let reference = match classify(arg)? {
        Source::Path(path) => return Ok(Resolved { path, pulled: None }),
        Source::Registry(reference) => reference,
    };
    let dir = match cache_dir.map(Path::to_path_buf).or_else(default_cache_dir) {
        Some(dir) => dir,
        None => {
            return Err(RegistryError::Cache {
                dir: PathBuf::from("~/.cache/nexo/registry"),
                source: std::io::Error::other("neither HOME nor XDG_CACHE_HOME is set"),
            });
        }
    };
    let cache = BlobCache::open(&dir)?;
    // A cached digest needs no client: building one loads the system's
    // certificates, which costs a run from the cache milliseconds.
    let pulled = match pull::cached(&cache, &reference) {
        Some(pulled) => pulled,
        None => pull(&RegistryClient::new(insecure)?, &cache, &reference).await?,
    };
    tracing::info!(
        reference = %reference,
        digest = %pulled.manifest_digest,
        cached = pulled.cached,
        "plugin from a registry"
    );
    Ok(Resolved { path: pulled.path.clone(), pulled: Some((reference, pulled)) })
}
