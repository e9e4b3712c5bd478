//! Manifests, fetched by nexo itself rather than by oci-client, which reads
//! a registry's answer whole however long it is: here an answer past
//! [`MAX_MANIFEST_BYTES`] is refused as it streams, and the body's digest
//! is checked against what the reference pins and what the registry says.

use oci_client::manifest::{IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE, OciImageManifest};
use oci_client::secrets::RegistryAuth;
use reqwest013::StatusCode;
use sha2::{Digest, Sha256};

use super::client::{RegistryClient, chain};
use super::credentials::Credentials;
use super::error::RegistryError;
use super::reference::PluginReference;

/// The most bytes of a manifest read: the distribution spec's 4 MiB, which
/// registries themselves keep to. A wasm component's manifest is under 1 KiB.
pub(super) const MAX_MANIFEST_BYTES: usize = 4 << 20;

/// The manifest `target` names (in `reference`'s registry; `reference`
/// names it in errors), as `accept` media types, with `auth` as
/// [`super::auth::authorize`] made it; returns its bytes and digest.
pub(super) async fn fetch(
    client: &RegistryClient,
    target: &oci_client::Reference,
    reference: &PluginReference,
    auth: &RegistryAuth,
    credentials: &Credentials,
    accept: &[&str],
) -> Result<(Vec<u8>, String), RegistryError> {
    let registry = reference.registry();
    let name = target.digest().or(target.tag()).unwrap_or("latest");
    let url = format!("{}://{registry}/v2/{}/manifests/{name}", client.scheme(registry), target.repository());
    let mut request = client.http().get(&url).header(reqwest013::header::ACCEPT, accept.join(", "));
    request = match auth {
        RegistryAuth::Anonymous => request,
        RegistryAuth::Basic(user, password) => request.basic_auth(user, Some(password)),
        RegistryAuth::Bearer(token) => request.bearer_auth(token),
    };
    let unreachable = |e: reqwest013::Error| RegistryError::Unreachable {
        registry: registry.to_string(),
        scheme: client.scheme(registry),
        reason: chain(&e),
    };
    let failed = |reason: String| RegistryError::Registry {
        registry: registry.to_string(),
        reference: reference.to_string(),
        reason,
    };
    let mut answer = request.send().await.map_err(unreachable)?;
    let status = answer.status();
    match status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
            return Err(RegistryError::Unauthorized {
                registry: registry.to_string(),
                reference: reference.to_string(),
                how: credentials.describe(),
            });
        }
        StatusCode::NOT_FOUND => {
            return Err(RegistryError::NotFound {
                reference: format!("{registry}/{}:{name}", target.repository()),
                reason: format!("{url} answered {status}"),
            });
        }
        s if s.is_redirection() => {
            let to = answer.headers().get(reqwest013::header::LOCATION).and_then(|h| h.to_str().ok()).unwrap_or("");
            return Err(failed(format!(
                "its manifest at {url} answered {status}, a redirect to `{to}`, which nexo does not follow for a \
                 manifest (credentials must not go where the operator did not name): pull from the registry the \
                 redirect names"
            )));
        }
        s if !s.is_success() => return Err(failed(format!("its manifest at {url} answered {status}"))),
        _ => {}
    }
    let said = answer.headers().get("docker-content-digest").and_then(|h| h.to_str().ok()).map(str::to_string);
    let mut body = Vec::new();
    while let Some(chunk) = answer.chunk().await.map_err(|e| failed(format!("its manifest failed mid-answer ({e})")))? {
        if body.len() + chunk.len() > MAX_MANIFEST_BYTES {
            return Err(failed(format!(
                "its manifest is more than {MAX_MANIFEST_BYTES} bytes (a registry keeps manifests to 4 MiB): pull \
                 from a registry that serves the component's own manifest"
            )));
        }
        body.extend_from_slice(&chunk);
    }
    let digest = format!("sha256:{}", hex::encode(Sha256::digest(&body)));
    let mismatch = |expected: &str| RegistryError::DigestMismatch {
        what: "the manifest",
        reference: reference.to_string(),
        expected: expected.to_string(),
        actual: digest.clone(),
    };
    if let Some(pinned) = target.digest()
        && pinned != digest
    {
        return Err(mismatch(pinned));
    }
    // A registry may name its digest with another algorithm; a sha256 it names must be this one.
    if let Some(said) = said.filter(|s| s.starts_with("sha256:"))
        && said != digest
    {
        return Err(mismatch(&said));
    }
    Ok((body, digest))
}

/// The image manifest `target` names, as [`fetch`] gets it, parsed; an
/// index or anything else is [`RegistryError::NotWasm`] naming `what`.
pub(super) async fn image(
    client: &RegistryClient,
    target: &oci_client::Reference,
    reference: &PluginReference,
    auth: &RegistryAuth,
    credentials: &Credentials,
    what: &str,
) -> Result<(OciImageManifest, String), RegistryError> {
    let accept = [OCI_IMAGE_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE];
    let (raw, digest) = fetch(client, target, reference, auth, credentials, &accept).await?;
    let manifest = serde_json::from_slice(&raw).map_err(|e| RegistryError::NotWasm {
        reference: reference.to_string(),
        reason: format!("{what} is not an image manifest ({e})"),
    })?;
    Ok((manifest, digest))
}
