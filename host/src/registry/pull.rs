//! Pulling a component: the manifest (its digest checked by oci-client
//! against the registry's header and any `@sha256:` in the reference), then
//! its one layer, fetched by the manifest's digest, never the tag again, and
//! cached only once its own digest checked out.

use oci_client::manifest::OciImageManifest;
use oci_wasm::{WASM_LAYER_MEDIA_TYPE, WASM_MANIFEST_CONFIG_MEDIA_TYPE, WASM_MANIFEST_MEDIA_TYPE};

use oci_client::RegistryOperation;

use super::auth::authorize;
use super::cache::{BlobCache, Entry, sha256_hex};
use super::capped::Capped;
use super::client::RegistryClient;
use super::credentials::Credentials;
use super::error::RegistryError;
use super::reference::PluginReference;
use super::signatures::{Signature, check};
use super::trust::{KeyId, Trusted};

/// A component in the cache, and where it came from.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// The cached component: `blobs/sha256/HEX`.
    pub path: std::path::PathBuf,
    /// The manifest's digest (`sha256:…`): what the reference resolved to.
    pub manifest_digest: String,
    /// The component's digest (`sha256:…`), its layer's.
    pub layer_digest: String,
    /// Whether it was already cached (nothing was downloaded).
    pub cached: bool,
    /// What its signature check found.
    pub signature: Signature,
}

/// A reference by digest that is already in `cache`, and already found
/// signed by one of `rule`'s keys if a rule covers it: what it names, with
/// no request made (and no client needed).
pub fn cached(cache: &BlobCache, reference: &PluginReference, rule: Option<&Trusted>) -> Option<Pulled> {
    let digest = reference.digest()?;
    let (entry, path) = cache.lookup(digest)?;
    let signature = match rule {
        None => Signature::NotChecked,
        Some(rule) => {
            let by: Vec<KeyId> =
                rule.keys.iter().filter(|k| entry.signed_by.contains(&k.id)).map(|k| k.id.clone()).collect();
            if by.is_empty() {
                return None;
            }
            Signature::Signed { scope: rule.scope.clone(), by }
        }
    };
    Some(Pulled { path, manifest_digest: digest.to_string(), layer_digest: entry.layer, cached: true, signature })
}

/// Pulls `reference` into `cache`, its signature checked under `rule` (if
/// a rule covers it) before its component is downloaded. A reference by
/// digest that is already cached (and signed, under a rule) is not fetched
/// again; one by tag always asks the registry what the tag names now.
pub async fn pull(
    client: &RegistryClient,
    cache: &BlobCache,
    reference: &PluginReference,
    rule: Option<&Trusted>,
) -> Result<Pulled, RegistryError> {
    if let Some(pulled) = cached(cache, reference, rule) {
        return Ok(pulled);
    }
    let credentials = Credentials::for_registry(reference.registry())?;
    let auth = authorize(client, reference, &credentials, RegistryOperation::Pull).await?;
    let oci = client.oci();
    let (manifest, digest, _config) = oci
        .pull_manifest_and_config(reference.oci(), &auth)
        .await
        .map_err(|e| client.error(e, reference, &credentials))?;
    if let Some(asked) = reference.digest()
        && asked != digest
    {
        return Err(RegistryError::DigestMismatch {
            what: "the manifest",
            reference: reference.to_string(),
            expected: asked.to_string(),
            actual: digest,
        });
    }
    let layer = wasm_layer(&manifest, reference)?;
    let signature = match rule {
        None => Signature::NotChecked,
        Some(rule) => check(client, reference, &digest, &auth, &credentials, rule).await?,
    };
    let signed_by = match &signature {
        Signature::Signed { by, .. } => by.clone(),
        _ => Vec::new(),
    };
    if let Some((mut entry, path)) = cache.lookup(&digest)
        && entry.layer == layer.digest
    {
        if signed_by.iter().any(|k| !entry.signed_by.contains(k)) {
            entry.signed_by.extend(signed_by.into_iter().filter(|k| !entry.signed_by.contains(k)).collect::<Vec<_>>());
            cache.record(&digest, &entry)?;
        }
        return Ok(Pulled { path, manifest_digest: digest, layer_digest: entry.layer, cached: true, signature });
    }
    let pinned = reference.at_digest(&digest);
    let path = match cache.blob(&layer.digest) {
        Some(path) => path,
        None => {
            let file = cache.temp_file()?;
            let writer = tokio::fs::File::from_std(
                file.reopen().map_err(|source| RegistryError::Cache { dir: cache.dir().to_path_buf(), source })?,
            );
            // wasm_layer checked the declared size; this holds the registry to it.
            let declared = u64::try_from(layer.size).unwrap_or(0);
            let mut writer = Capped::new(writer, declared);
            let pulled = oci.pull_blob(pinned.oci(), layer, &mut writer).await;
            if writer.overflowed() {
                return Err(RegistryError::Oversent {
                    registry: reference.registry().to_string(),
                    reference: reference.to_string(),
                    declared,
                });
            }
            pulled.map_err(|e| client.error(e, reference, &credentials))?;
            cache.commit_blob(file, &layer.digest, &reference.to_string())?
        }
    };
    cache.record(&digest, &Entry { layer: layer.digest.clone(), reference: reference.to_string(), signed_by })?;
    Ok(Pulled { path, manifest_digest: digest, layer_digest: layer.digest.clone(), cached: false, signature })
}

/// The manifest's one component layer, if it is a wasm component artifact
/// within the size cap.
pub(super) fn wasm_layer<'m>(
    manifest: &'m OciImageManifest,
    reference: &PluginReference,
) -> Result<&'m oci_client::manifest::OciDescriptor, RegistryError> {
    let not_wasm = |reason: String| RegistryError::NotWasm { reference: reference.to_string(), reason };
    if manifest.media_type.as_deref().is_some_and(|t| t != WASM_MANIFEST_MEDIA_TYPE) {
        return Err(not_wasm(format!("its manifest is {:?}", manifest.media_type)));
    }
    if manifest.config.media_type != WASM_MANIFEST_CONFIG_MEDIA_TYPE {
        return Err(not_wasm(format!(
            "its config is {}, not {WASM_MANIFEST_CONFIG_MEDIA_TYPE}",
            manifest.config.media_type
        )));
    }
    let [layer] = manifest.layers.as_slice() else {
        return Err(not_wasm(format!("it has {} layers, not one", manifest.layers.len())));
    };
    if layer.media_type != WASM_LAYER_MEDIA_TYPE {
        return Err(not_wasm(format!("its layer is {}, not {WASM_LAYER_MEDIA_TYPE}", layer.media_type)));
    }
    if sha256_hex(&layer.digest).is_none() {
        return Err(not_wasm(format!("its layer's digest {} is not a sha256 digest", layer.digest)));
    }
    let cap = crate::files::MAX_COMPONENT_BYTES;
    if u64::try_from(layer.size).map_or(true, |size| size > cap) {
        return Err(RegistryError::TooLarge { reference: reference.to_string(), size: layer.size, cap });
    }
    Ok(layer)
}
