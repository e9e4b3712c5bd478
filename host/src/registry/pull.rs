//! Pulling a component: the manifest (its digest checked by oci-client
//! against the registry's header and any `@sha256:` in the reference), its
//! signatures under a trust rule, then its one layer, fetched by the
//! manifest's digest, never the tag again, and cached only once its own
//! digest checked out.

use std::time::Duration;

use oci_client::manifest::OciImageManifest;
use oci_wasm::{WASM_LAYER_MEDIA_TYPE, WASM_MANIFEST_CONFIG_MEDIA_TYPE, WASM_MANIFEST_MEDIA_TYPE};

use oci_client::RegistryOperation;

use super::auth::authorize;
use super::cache::{BlobCache, Entry, file_sha256, sha256_hex};
use super::capped::Capped;
use super::client::RegistryClient;
use super::credentials::Credentials;
use super::error::RegistryError;
use super::manifest;
use super::reference::PluginReference;
use super::settings::Registries;
use super::signatures::{Signature, check, verify};

/// How long the manifest and the signatures may take in all: the read
/// timeout bounds silence, this bounds a registry that trickles.
const METADATA_DEADLINE: Duration = Duration::from_secs(120);

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

/// A reference by digest that is already in `cache`: what it names, with
/// no request made (and no client needed). Under a trust rule the cache is
/// not taken on its word: the manifest it kept must hash to the digest and
/// name the cached layer, the layer's file must hash to its digest, and the
/// signatures it kept must verify with one of the rule's keys; else `None`,
/// and the registry is asked.
pub fn cached(cache: &BlobCache, reference: &PluginReference, registries: &Registries) -> Option<Pulled> {
    let digest = reference.digest()?;
    let (entry, path) = cache.lookup(digest)?;
    if !entry.repositories.contains(&reference.repository()) {
        return None;
    }
    let signature = match registries.trust.rule_for(reference) {
        None => Signature::NotChecked,
        Some(rule) => {
            let raw = entry.manifest.as_deref()?;
            if sha256_hex(digest)? != hex::encode(<sha2::Sha256 as sha2::Digest>::digest(raw.as_bytes())) {
                return None;
            }
            let manifest: OciImageManifest = serde_json::from_str(raw).ok()?;
            let layer = wasm_layer(&manifest, reference, registries.max_component_bytes).ok()?;
            if layer.digest != entry.layer || file_sha256(&path).ok()? != sha256_hex(&layer.digest)? {
                return None;
            }
            let layers: Vec<_> = entry.signatures.iter().filter_map(|s| s.layer(digest)).collect();
            match verify(&layers, reference, digest, rule) {
                Ok(signed @ Signature::Signed { .. }) => signed,
                _ => return None,
            }
        }
    };
    cache.touch(digest);
    Some(Pulled { path, manifest_digest: digest.to_string(), layer_digest: entry.layer, cached: true, signature })
}

/// Pulls `reference` into `cache`, its signature checked under `rule` (if
/// a rule covers it) before its component is downloaded. A reference by
/// digest that is already cached (and verifies, under a rule) is not
/// fetched again; one by tag always asks the registry what the tag names now.
pub async fn pull(
    client: &RegistryClient,
    cache: &BlobCache,
    reference: &PluginReference,
    registries: &Registries,
) -> Result<Pulled, RegistryError> {
    if let Some(pulled) = cached(cache, reference, registries) {
        return Ok(pulled);
    }
    let rule = registries.trust.rule_for(reference);
    let credentials = Credentials::for_registry(reference.registry())?;
    let auth = authorize(client, reference, &credentials, RegistryOperation::Pull).await?;
    // Blobs come through oci-client, which keeps what it is to send per registry.
    client.oci().store_auth_if_needed(reference.registry(), &auth).await;
    let metadata = async {
        let (raw, digest) =
            manifest::fetch(client, reference.oci(), reference, &auth, &credentials, &[WASM_MANIFEST_MEDIA_TYPE])
                .await?;
        let signatures = match rule {
            None => (Signature::NotChecked, Vec::new()),
            Some(rule) => check(client, reference, &digest, &auth, &credentials, rule).await?,
        };
        Ok::<_, RegistryError>((raw, digest, signatures))
    };
    let (raw, digest, (signature, signatures)) =
        tokio::time::timeout(METADATA_DEADLINE, metadata).await.map_err(|_| RegistryError::Registry {
            registry: reference.registry().to_string(),
            reference: reference.to_string(),
            reason: format!(
                "its manifest and signatures took more than {} s in all; try again, or pull from a registry \
                 that answers",
                METADATA_DEADLINE.as_secs()
            ),
        })??;
    same_digest(reference, &digest)?;
    let not_wasm = |reason: String| RegistryError::NotWasm { reference: reference.to_string(), reason };
    let text = String::from_utf8(raw).map_err(|_| not_wasm("its manifest is not UTF-8 JSON".into()))?;
    let manifest: OciImageManifest =
        serde_json::from_str(&text).map_err(|e| not_wasm(format!("its manifest is not an image manifest ({e})")))?;
    let layer = wasm_layer(&manifest, reference, registries.max_component_bytes)?;
    let mut repositories = cache.lookup(&digest).map(|(e, _)| e.repositories).unwrap_or_default();
    if !repositories.contains(&reference.repository()) {
        repositories.push(reference.repository());
    }
    let entry = Entry {
        layer: layer.digest.clone(),
        reference: reference.to_string(),
        manifest: Some(text),
        signatures: signatures.clone(),
        repositories,
    };
    // Under a rule, a cached file is used only if it still hashes to its digest.
    let intact =
        |path: &std::path::Path| rule.is_none() || file_sha256(path).ok().as_deref() == sha256_hex(&layer.digest);
    if let Some((_, path)) = cache.lookup(&digest).filter(|(e, p)| e.layer == layer.digest && intact(p)) {
        cache.record(&digest, &entry)?;
        return Ok(Pulled { path, manifest_digest: digest, layer_digest: entry.layer, cached: true, signature });
    }
    let pinned = reference.at_digest(&digest);
    let path = match cache.blob(&layer.digest).filter(|p| intact(p)) {
        Some(path) => path,
        None => {
            let file = cache.temp_file()?;
            let writer = tokio::fs::File::from_std(
                file.reopen().map_err(|source| RegistryError::Cache { dir: cache.dir().to_path_buf(), source })?,
            );
            // wasm_layer checked the declared size; this holds the registry to it.
            let declared = u64::try_from(layer.size).unwrap_or(0);
            let mut writer = Capped::new(writer, declared);
            let pulled = client.oci().pull_blob(pinned.oci(), layer, &mut writer).await;
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
    cache.record(&digest, &entry)?;
    Ok(Pulled { path, manifest_digest: digest, layer_digest: layer.digest.clone(), cached: false, signature })
}

/// The registry's manifest `digest` is the one `reference` pins, if it pins one.
pub(super) fn same_digest(reference: &PluginReference, digest: &str) -> Result<(), RegistryError> {
    match reference.digest() {
        Some(asked) if asked != digest => Err(RegistryError::DigestMismatch {
            what: "the manifest",
            reference: reference.to_string(),
            expected: asked.to_string(),
            actual: digest.to_string(),
        }),
        _ => Ok(()),
    }
}

/// The manifest's one component layer, if it is a wasm component artifact
/// within `cap` bytes.
pub(super) fn wasm_layer<'m>(
    manifest: &'m OciImageManifest,
    reference: &PluginReference,
    cap: u64,
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
    if u64::try_from(layer.size).map_or(true, |size| size > cap) {
        return Err(RegistryError::TooLarge { reference: reference.to_string(), size: layer.size, cap });
    }
    Ok(layer)
}

#[cfg(test)]
mod tests {
    use oci_client::client::{Config, ImageLayer};

    use super::*;

    #[test]
    fn a_layer_over_the_cap_is_refused_by_its_declared_size() {
        let layer = ImageLayer::new(vec![0; 100], WASM_LAYER_MEDIA_TYPE.to_string(), None);
        let config = Config::new(b"{}".to_vec(), WASM_MANIFEST_CONFIG_MEDIA_TYPE.to_string(), None);
        let mut manifest = OciImageManifest::build(&[layer], &config, None);
        manifest.media_type = Some(WASM_MANIFEST_MEDIA_TYPE.to_string());
        let reference = PluginReference::parse("reg.example/acme/agent:1").unwrap();
        assert!(wasm_layer(&manifest, &reference, 100).is_ok());
        let refused = wasm_layer(&manifest, &reference, 99);
        assert!(matches!(refused, Err(RegistryError::TooLarge { size: 100, cap: 99, .. })), "{refused:?}");
    }

    /// A digest pulled from one repository is no way into another: the
    /// cache answers it only for a repository that served it.
    #[test]
    fn the_cache_answers_a_digest_only_for_the_repositories_that_served_it() {
        let dir = tempfile::tempdir().unwrap();
        let cache = BlobCache::open(dir.path()).unwrap();
        let blob = b"\0asm component";
        let layer = format!("sha256:{}", hex::encode(<sha2::Sha256 as sha2::Digest>::digest(blob)));
        std::fs::write(cache.blob_path(sha256_hex(&layer).unwrap()), blob).unwrap();
        let digest = format!("sha256:{}", "ab".repeat(32));
        let entry = Entry {
            layer,
            reference: "Reg.Example:443/acme/agent:1".into(),
            manifest: None,
            signatures: Vec::new(),
            repositories: vec!["reg.example/acme/agent".into()],
        };
        cache.record(&digest, &entry).unwrap();
        let registries = Registries::default();
        let pinned = |repo: &str| PluginReference::parse(&format!("{repo}@{digest}")).unwrap();
        assert!(cached(&cache, &pinned("reg.example/acme/agent"), &registries).is_some());
        assert!(cached(&cache, &pinned("REG.example:443/acme/agent"), &registries).is_some(), "one repository");
        for other in ["reg.example/acme/agent/sub", "reg.example/acme/other", "other.example/acme/agent"] {
            assert!(cached(&cache, &pinned(other), &registries).is_none(), "{other}");
        }
    }
}
