//! Signing a component in a registry as cosign does (`nexo sign`): a
//! "simple signing" payload naming the manifest digest, signed with the
//! author's key, added to the `sha256-HEX.sig` image beside the signatures
//! already there. Key files are cosign's: an encrypted private key
//! (`ENCRYPTED SIGSTORE PRIVATE KEY` or `ENCRYPTED COSIGN PRIVATE KEY`,
//! password in `COSIGN_PASSWORD`) or a plain PKCS#8 one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use oci_client::RegistryOperation;
use oci_client::client::{Config, ImageLayer};
use oci_client::manifest::{OCI_IMAGE_MEDIA_TYPE, OciDescriptor, OciImageManifest, OciManifest};
use sigstore::cosign::verification_constraint::{PublicKeyVerifier, VerificationConstraint};
use sigstore::crypto::SigStoreSigner;
use sigstore::crypto::signing_key::SigStoreKeyPair;
use sigstore::crypto::signing_key::ecdsa::{ECDSAKeys, EllipticCurve};
use zeroize::Zeroizing;

use super::auth::authorize;
use super::client::RegistryClient;
use super::credentials::Credentials;
use super::error::RegistryError;
use super::reference::PluginReference;
use super::signatures::{SIGNATURE_ANNOTATION, SIMPLE_SIGNING, fetch, signature_reference};
use super::trust::{KeyId, key_id};

/// The variable holding a private key's password, as cosign reads it.
pub const PASSWORD_VAR: &str = "COSIGN_PASSWORD";

/// An author's private key, ready to sign.
pub struct SigningKey {
    signer: SigStoreSigner,
    /// "Signed by this key", to find its signatures among those there.
    verifier: Box<dyn VerificationConstraint>,
    /// Its public half's id (the name of its `.pub` file beside it).
    pub id: KeyId,
}

impl SigningKey {
    /// Loads the private key at `path`; an encrypted one needs `password`.
    pub fn load(path: &Path, password: Option<&[u8]>) -> Result<SigningKey, RegistryError> {
        let bad = |reason: String| RegistryError::SigningKey { path: path.to_path_buf(), reason };
        let text = Zeroizing::new(std::fs::read(path).map_err(|e| bad(e.to_string()))?);
        let label = pem::parse(&*text).map_err(|e| bad(format!("not a PEM file: {e}")))?.tag().to_string();
        let pair = if label.starts_with("ENCRYPTED") {
            let Some(password) = password else {
                return Err(bad(format!("it is encrypted: set {PASSWORD_VAR} to its password")));
            };
            SigStoreKeyPair::from_encrypted_pem(&text, password)
                .map_err(|e| bad(format!("cannot decrypt it ({e}): is {PASSWORD_VAR} its password?")))?
        } else if label.contains("PRIVATE KEY") {
            SigStoreKeyPair::from_pem(&text).map_err(|e| bad(e.to_string()))?
        } else {
            return Err(bad(format!("it holds a {label}, not a private key")));
        };
        let signer = match &pair {
            SigStoreKeyPair::ECDSA(keys) => keys.to_sigstore_signer(),
            SigStoreKeyPair::ED25519(_) => pair.to_sigstore_signer(&sigstore::crypto::SigningScheme::ED25519),
            SigStoreKeyPair::RSA(_) => {
                return Err(bad(
                    "RSA keys are not supported: make an ECDSA P-256 key (`nexo sign --generate-key`)".into()
                ));
            }
        }
        .map_err(|e| bad(e.to_string()))?;
        let der = pair.public_key_to_der().map_err(|e| bad(e.to_string()))?;
        let public = pair.public_key_to_pem().map_err(|e| bad(e.to_string()))?;
        let verifier = PublicKeyVerifier::try_from(public.as_bytes()).map_err(|e| bad(e.to_string()))?;
        Ok(SigningKey { signer, verifier: Box::new(verifier), id: key_id(&path.with_extension("pub"), &der) })
    }

    /// Makes a new ECDSA P-256 key pair (cosign's kind): `PREFIX.key`,
    /// encrypted with `password`, and `PREFIX.pub`, the key operators trust.
    /// Refuses to overwrite either.
    pub fn generate(prefix: &Path, password: &[u8]) -> Result<(PathBuf, PathBuf), RegistryError> {
        let private = prefix.with_extension("key");
        let public = prefix.with_extension("pub");
        let bad = |path: &Path, reason: String| RegistryError::SigningKey { path: path.to_path_buf(), reason };
        let pair = ECDSAKeys::new(EllipticCurve::P256)
            .map(SigStoreKeyPair::ECDSA)
            .map_err(|e| bad(&private, e.to_string()))?;
        let encrypted = pair.private_key_to_encrypted_pem(password).map_err(|e| bad(&private, e.to_string()))?;
        let public_pem = pair.public_key_to_pem().map_err(|e| bad(&public, e.to_string()))?;
        write_new(&private, encrypted.as_bytes(), 0o600).map_err(|e| bad(&private, e))?;
        write_new(&public, public_pem.as_bytes(), 0o644).map_err(|e| bad(&public, e))?;
        Ok((private, public))
    }
}

/// Writes a file that must not exist yet, with `mode`.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), String> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|e| format!("{e} (nexo never overwrites a key)"))?;
    file.write_all(bytes).map_err(|e| e.to_string())
}

/// What `sign` did.
#[derive(Debug, Clone)]
pub struct Signed {
    /// The manifest digest signed.
    pub digest: String,
    /// Whether this key had signed it already (nothing was pushed).
    pub already: bool,
    /// How many signatures the digest has now.
    pub signatures: usize,
}

/// Signs what `reference` names (a tag is resolved to its digest once, and
/// the digest is what is signed) with `key`, keeping the signatures
/// already there.
pub async fn sign(
    client: &RegistryClient,
    reference: &PluginReference,
    key: &SigningKey,
) -> Result<Signed, RegistryError> {
    let credentials = Credentials::for_registry(reference.registry())?;
    let auth = authorize(client, reference, &credentials, RegistryOperation::Push).await?;
    let oci = client.oci();
    oci.store_auth_if_needed(reference.registry(), &auth).await;
    let failed = |e| client.error(e, reference, &credentials);
    let (manifest, digest) =
        super::manifest::image(client, reference.oci(), reference, &auth, &credentials, "its manifest").await?;
    super::pull::same_digest(reference, &digest)?;
    super::pull::wasm_layer(&manifest, reference, crate::files::MAX_COMPONENT_BYTES)?;
    let existing = fetch(client, reference, &digest, &auth, &credentials).await?;
    let target = signature_reference(reference, &digest);
    // The signature image as it is, every layer and annotation kept (other
    // signers' certificates and bundles too): ours is appended.
    let what = "its signature image";
    let image = match super::manifest::image(client, &target, reference, &auth, &credentials, what).await {
        Ok((image, _)) => Some(image),
        Err(RegistryError::NotFound { .. }) => None,
        Err(other) => return Err(other),
    };
    let count = image.as_ref().map_or(0, |i| i.layers.len());
    if sigstore::cosign::verify_constraints(&existing, std::iter::once(&key.verifier)).is_ok() {
        return Ok(Signed { digest, already: true, signatures: count });
    }
    let payload = serde_json::to_vec(&serde_json::json!({
        "critical": {
            "identity": {"docker-reference": reference.repository()},
            "image": {"docker-manifest-digest": digest},
            "type": "cosign container image signature",
        },
        "optional": null,
    }))
    .map_err(|e| signing(reference, &e))?;
    let signature = key.signer.sign(&payload).map_err(|e| signing(reference, &e))?;
    let layer = layer(payload, Some(base64::engine::general_purpose::STANDARD.encode(signature)));
    let mut image = match image {
        Some(image) => image,
        None => {
            let config = Config::oci_v1(b"{}".to_vec(), None);
            oci.push_blob(&target, config.data.clone(), &config.sha256_digest()).await.map_err(failed)?;
            let mut image = OciImageManifest::build(&[], &config, None);
            image.media_type = Some(OCI_IMAGE_MEDIA_TYPE.to_string());
            image
        }
    };
    let layer_digest = layer.sha256_digest();
    oci.push_blob(&target, layer.data.clone(), &layer_digest).await.map_err(failed)?;
    image.layers.push(OciDescriptor {
        media_type: layer.media_type.clone(),
        digest: layer_digest,
        size: i64::try_from(layer.data.len()).unwrap_or(i64::MAX),
        annotations: layer.annotations.clone(),
        ..OciDescriptor::default()
    });
    oci.push_manifest(&target, &OciManifest::Image(image)).await.map_err(failed)?;
    Ok(Signed { digest, already: false, signatures: count + 1 })
}

fn layer(payload: Vec<u8>, signature: Option<String>) -> ImageLayer {
    let annotations = signature.map(|s| BTreeMap::from([(SIGNATURE_ANNOTATION.to_string(), s)]));
    ImageLayer::new(payload, SIMPLE_SIGNING.to_string(), annotations)
}

fn signing(reference: &PluginReference, e: &dyn std::fmt::Display) -> RegistryError {
    RegistryError::BadSignatures { reference: reference.to_string(), reason: format!("cannot sign: {e}") }
}
