//! Pushing a component in the wasm OCI artifact layout that wkg and the
//! others read: a wasm config and exactly one `application/wasm` layer.

use std::path::Path;

use oci_client::RegistryOperation;
use oci_client::manifest::OciImageManifest;
use oci_wasm::{ToConfig, WASM_MANIFEST_MEDIA_TYPE, WasmConfig};
use sha2::{Digest, Sha256};

use super::auth::authorize;
use super::client::RegistryClient;
use super::credentials::Credentials;
use super::error::RegistryError;
use super::reference::PluginReference;

/// What a push sent.
#[derive(Debug, Clone)]
pub struct Pushed {
    /// The manifest's digest (`sha256:…`): pull `REPO@DIGEST` to get exactly this.
    pub manifest_digest: String,
    /// The component's digest (`sha256:…`).
    pub layer_digest: String,
}

/// Pushes the component at `file` as `reference`. The config's `created` is
/// fixed (the Unix epoch), so the same bytes always give the same manifest
/// digest.
pub async fn push(client: &RegistryClient, file: &Path, reference: &PluginReference) -> Result<Pushed, RegistryError> {
    let refused = |reason: String| RegistryError::NotAComponent { path: file.to_path_buf(), reason };
    let bytes =
        crate::files::read_regular(file, crate::files::MAX_COMPONENT_BYTES).map_err(|e| refused(e.to_string()))?;
    let (mut config, layer) = WasmConfig::from_raw_component(bytes, None)
        .map_err(|e| refused(format!("it is not a WebAssembly component ({e:#}); build it with `nexo build`")))?;
    config.created = chrono::DateTime::UNIX_EPOCH;
    let config = config.to_config().map_err(|e| refused(format!("{e:#}")))?;
    let mut manifest = OciImageManifest::build(std::slice::from_ref(&layer), &config, None);
    manifest.media_type = Some(WASM_MANIFEST_MEDIA_TYPE.to_string());
    let credentials = Credentials::for_registry(reference.registry())?;
    let auth = authorize(client, reference, &credentials, RegistryOperation::Push).await?;
    let oci = client.oci();
    let failed = |e| client.error(e, reference, &credentials);
    oci.store_auth_if_needed(reference.oci().resolve_registry(), &auth).await;
    let layer_digest = layer.sha256_digest();
    oci.push_blob(reference.oci(), layer.data.clone(), &layer_digest).await.map_err(failed)?;
    oci.push_blob(reference.oci(), config.data.clone(), &manifest.config.digest).await.map_err(failed)?;
    // Our bytes, so our digest: no second request to learn it.
    let body = serde_json::to_vec(&manifest).map_err(|e| refused(e.to_string()))?;
    let media_type = http::HeaderValue::from_static(WASM_MANIFEST_MEDIA_TYPE);
    oci.push_manifest_raw(reference.oci(), body.clone(), media_type).await.map_err(failed)?;
    Ok(Pushed { manifest_digest: format!("sha256:{}", hex::encode(Sha256::digest(&body))), layer_digest })
}
