//! Cosign signatures of a component, checked against the operator's keys.
//!
//! cosign keeps the signatures of manifest `sha256:HEX` in the same
//! repository under the tag `sha256-HEX.sig`: an image whose layers are
//! "simple signing" payloads (which name the signed digest), each with its
//! signature in an annotation. nexo fetches them with its own registry
//! client (its timeouts, size caps and login rules), and the sigstore crate
//! checks each payload's signature against each trusted key. Nothing else is
//! consulted: no transparency log, no certificate authority (see
//! docs/plugins.md, "What is verified offline").

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use oci_client::secrets::RegistryAuth;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use sigstore::cosign::SignatureLayer;
use sigstore::cosign::payload::SimpleSigning;

use super::capped::Capped;
use super::client::RegistryClient;
use super::credentials::Credentials;
use super::error::RegistryError;
use super::reference::PluginReference;
use super::trust::{KeyId, Trusted};

/// The media type of a cosign signature payload.
pub const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The layer annotation holding a payload's base64 signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The most signatures read for one component.
pub(super) const MAX_SIGNATURES: usize = 64;
/// The largest payload read (cosign's are a few hundred bytes).
pub(super) const MAX_PAYLOAD: u64 = 64 * 1024;

/// What the signature check of a plugin from a registry found.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum Signature {
    /// No `[[registries.trust]]` rule covers its reference: not checked.
    #[default]
    NotChecked,
    /// A rule that does not require a signature covers it, and no signature
    /// by the rule's keys was found.
    Unsigned {
        /// The rule's scope.
        scope: String,
    },
    /// Signed by these of the rule's keys.
    Signed {
        /// The rule's scope.
        scope: String,
        /// The trusted keys whose signatures verified.
        by: Vec<KeyId>,
    },
}

impl std::fmt::Display for Signature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Signature::NotChecked => write!(f, "not checked (no [[registries.trust]] rule covers it)"),
            Signature::Unsigned { scope } => write!(f, "unsigned (allowed: {scope} does not require a signature)"),
            Signature::Signed { by, .. } => {
                let keys: Vec<String> = by.iter().map(ToString::to_string).collect();
                write!(f, "signed by {}", keys.join(", "))
            }
        }
    }
}

/// The tag cosign keeps the signatures of `digest` under.
pub(super) fn signature_tag(digest: &str) -> String {
    format!("{}.sig", digest.replace(':', "-"))
}

/// The signature image of manifest `digest` in `reference`'s repository.
pub(super) fn signature_reference(reference: &PluginReference, digest: &str) -> oci_client::Reference {
    let oci = reference.oci();
    oci_client::Reference::with_tag(oci.registry().to_string(), oci.repository().to_string(), signature_tag(digest))
}

/// A signature payload and its signature, as the cache keeps them so that a
/// run from the cache can verify them again without the registry.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct StoredSignature {
    /// The payload, base64.
    pub payload: String,
    /// Its signature, base64, as the layer's annotation holds it.
    pub signature: String,
}

impl StoredSignature {
    /// The layer's payload and signature.
    pub(super) fn of(layer: &SignatureLayer) -> Option<StoredSignature> {
        Some(StoredSignature { payload: BASE64.encode(&layer.raw_data), signature: layer.signature.clone()? })
    }

    /// The signature layer again, if its payload names `digest`.
    pub(super) fn layer(&self, digest: &str) -> Option<SignatureLayer> {
        let data = BASE64.decode(&self.payload).ok()?;
        signature_layer(data, digest, self.signature.clone())
    }
}

/// Checks manifest `digest` of `reference` against `rule`: its trusted keys
/// that signed it, or `Unsigned` if none did and the rule allows that; with
/// the signatures found, for the cache.
pub(super) async fn check(
    client: &RegistryClient,
    reference: &PluginReference,
    digest: &str,
    auth: &RegistryAuth,
    credentials: &Credentials,
    rule: &Trusted,
) -> Result<(Signature, Vec<StoredSignature>), RegistryError> {
    let layers = fetch(client, reference, digest, auth, credentials).await?;
    let signature = verify(&layers, reference, digest, rule)?;
    Ok((signature, layers.iter().filter_map(StoredSignature::of).collect()))
}

/// Which of `rule`'s keys signed `digest` among `layers` (each already
/// found to name `digest`): `Signed` by them, else `Unsigned` where the
/// rule allows it, else the refusal.
pub(super) fn verify(
    layers: &[SignatureLayer],
    reference: &PluginReference,
    digest: &str,
    rule: &Trusted,
) -> Result<Signature, RegistryError> {
    let by: Vec<KeyId> = rule
        .keys
        .iter()
        .filter(|key| {
            key.verifier().is_some_and(|v| sigstore::cosign::verify_constraints(layers, std::iter::once(&v)).is_ok())
        })
        .map(|key| key.id.clone())
        .collect();
    match (by.is_empty(), rule.require) {
        (false, _) => Ok(Signature::Signed { scope: rule.scope.clone(), by }),
        (true, false) => Ok(Signature::Unsigned { scope: rule.scope.clone() }),
        (true, true) => Err(RegistryError::Unsigned {
            reference: reference.to_string(),
            digest: digest.to_string(),
            scope: rule.scope.clone(),
            found: layers.len(),
            keys: rule.keys.iter().map(|k| k.id.to_string()).collect::<Vec<_>>().join(", "),
        }),
    }
}

/// A payload as a sigstore signature layer, if it is a simple-signing
/// payload naming `digest` (a payload for another digest signs something
/// else).
fn signature_layer(data: Vec<u8>, digest: &str, signature: String) -> Option<SignatureLayer> {
    let simple_signing = serde_json::from_slice::<SimpleSigning>(&data).ok()?;
    if !simple_signing.satisfies_manifest_digest(digest) {
        return None;
    }
    Some(SignatureLayer {
        simple_signing,
        oci_digest: format!("sha256:{}", hex::encode(Sha256::digest(&data))),
        certificate_signature: None,
        bundle: None,
        signature: Some(signature),
        raw_data: data,
    })
}

/// The signature payloads stored for manifest `digest` that name it, with
/// their signatures; none if there is no signature image.
pub(super) async fn fetch(
    client: &RegistryClient,
    reference: &PluginReference,
    digest: &str,
    auth: &RegistryAuth,
    credentials: &Credentials,
) -> Result<Vec<SignatureLayer>, RegistryError> {
    let signatures = signature_reference(reference, digest);
    let what = "its signature image";
    let manifest = match super::manifest::image(client, &signatures, reference, auth, credentials, what).await {
        Ok((manifest, _)) => manifest,
        Err(RegistryError::NotFound { .. }) => return Ok(Vec::new()),
        Err(RegistryError::NotWasm { reason, .. }) => return Err(bad_signatures(reference, &reason)),
        Err(other) => return Err(other),
    };
    if manifest.layers.len() > MAX_SIGNATURES {
        return Err(bad_signatures(
            reference,
            &format!("{} signatures, more than the {MAX_SIGNATURES} nexo reads", manifest.layers.len()),
        ));
    }
    let mut layers = Vec::new();
    for descriptor in &manifest.layers {
        let Some(declared) = u64::try_from(descriptor.size).ok().filter(|s| *s <= MAX_PAYLOAD) else { continue };
        if descriptor.media_type != SIMPLE_SIGNING {
            continue;
        }
        let Some(signature) = descriptor.annotations.as_ref().and_then(|a| a.get(SIGNATURE_ANNOTATION)) else {
            continue;
        };
        let mut writer = Capped::new(Vec::new(), declared);
        let pulled = client.oci().pull_blob(&signatures, descriptor, &mut writer).await;
        if writer.overflowed() {
            return Err(bad_signatures(reference, "a signature payload is longer than its manifest declares"));
        }
        pulled.map_err(|e| client.error(e, reference, credentials))?;
        let data = writer.into_inner();
        // oci-client checks the digest too; the payload is what is signed, so check it here as well.
        if format!("sha256:{}", hex::encode(Sha256::digest(&data))) != descriptor.digest {
            return Err(bad_signatures(reference, "a signature payload does not match its digest"));
        }
        if let Some(layer) = signature_layer(data, digest, signature.clone()) {
            layers.push(layer);
        }
    }
    Ok(layers)
}

fn bad_signatures(reference: &PluginReference, reason: &str) -> RegistryError {
    RegistryError::BadSignatures { reference: reference.to_string(), reason: reason.to_string() }
}
