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
mod manifest;
mod pull;
mod push;
pub mod reference;
mod settings;
mod sign;
mod signatures;
mod trust;

use std::path::{Path, PathBuf};

pub use cache::{BlobCache, Entry, Pruned, default_dir as default_cache_dir, file_sha256, sha256_hex};
pub use client::RegistryClient;
pub use credentials::{Credentials, PASSWORD_VAR, USERNAME_VAR};
pub use error::RegistryError;
pub use pull::{Pulled, pull};
pub use push::{Pushed, push};
pub use reference::{PluginReference, Source, classify, is_reference};
pub use settings::{Registries, RegistriesTable};
pub use sign::{PASSWORD_VAR as SIGNING_PASSWORD_VAR, Signed, SigningKey, sign};
pub use signatures::Signature;
pub use trust::{KeyId, Trust, TrustRule, Trusted, base_dir as trust_base_dir, check_scope, covers};

/// Refuses a file that is named like a reference a trust rule covers: in a
/// directory someone else prepared, `ghcr.io/acme/agent:1` could be their
/// file rather than the signed plugin the operator meant.
pub fn refuse_shadow(path: &Path, registries: &Registries) -> Result<(), RegistryError> {
    match reference::shadowed(path) {
        Some(reference) if registries.trust.rule_for(&reference).is_some() => {
            Err(RegistryError::Shadowed { path: path.to_path_buf(), reference: reference.to_string() })
        }
        _ => Ok(()),
    }
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
/// at `cache_dir`, else the default one, if needed), its signature checked
/// under the trust rule that covers it.
pub async fn resolve(arg: &Path, registries: &Registries, cache_dir: Option<&Path>) -> Result<Resolved, RegistryError> {
    let reference = match classify(arg)? {
        Source::Path(path) => {
            refuse_shadow(&path, registries)?;
            return Ok(Resolved { path, pulled: None });
        }
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
    let pulled = match pull::cached(&cache, &reference, registries) {
        Some(pulled) => pulled,
        None => pull(&RegistryClient::new(&registries.insecure)?, &cache, &reference, registries).await?,
    };
    tracing::info!(
        reference = %reference,
        digest = %pulled.manifest_digest,
        cached = pulled.cached,
        signature = %pulled.signature,
        "plugin from a registry"
    );
    Ok(Resolved { path: pulled.path.clone(), pulled: Some((reference, pulled)) })
}
