//! Why a plugin could not come from, or go to, a registry: each message
//! names the cause and the fix.

use std::path::PathBuf;

/// A registry operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The argument looked like a reference but does not parse as one.
    #[error(
        "`{reference}` is not a registry reference ({reason}): write HOST[:PORT]/REPOSITORY:TAG or \
         HOST[:PORT]/REPOSITORY@sha256:HEX"
    )]
    BadReference {
        /// The argument as given.
        reference: String,
        /// What the parser said.
        reason: String,
    },
    /// The registry could not be reached, or spoke something other than the registry API.
    #[error(
        "cannot reach the registry {registry} over {scheme} ({reason}): check the address; a registry that \
         serves plain HTTP must be listed as insecure (`[registries] insecure = [\"{registry}\"]` or \
         --insecure-registry {registry})"
    )]
    Unreachable {
        /// The registry's host and port.
        registry: String,
        /// `https` or `http`.
        scheme: &'static str,
        /// The transport's error.
        reason: String,
    },
    /// The registry refused the credentials, or asked for some and got none.
    #[error(
        "the registry {registry} refused access to {reference} ({how}): log in (`docker login {registry}`, \
         which writes $DOCKER_CONFIG/config.json) or set NEXO_REGISTRY_USERNAME and NEXO_REGISTRY_PASSWORD"
    )]
    Unauthorized {
        /// The registry's host and port.
        registry: String,
        /// The reference.
        reference: String,
        /// `anonymously` or `as USER`.
        how: String,
    },
    /// The registry named a token service nexo does not ask (with a password or without).
    #[error(
        "the registry {registry} named the token service {realm} to log in to, and nexo refused ({reason}): a \
         token is asked for over HTTPS, or over plain HTTP only from a host listed as insecure (a password and \
         the token it gets must not cross the network in the clear); if that service is really yours, list its \
         host:port as insecure"
    )]
    UnsafeRealm {
        /// The registry's host and port.
        registry: String,
        /// The realm it named.
        realm: String,
        /// Why it was refused.
        reason: String,
    },
    /// The Docker config file names credentials nexo cannot use.
    #[error("cannot read the credentials for {registry} from the Docker config ({reason}): {fix}")]
    Credentials {
        /// The registry's host and port.
        registry: String,
        /// What went wrong.
        reason: String,
        /// What to do about it.
        fix: &'static str,
    },
    /// No manifest under this tag or digest.
    #[error("{reference} is not in the registry ({reason}): check the repository and the tag or digest")]
    NotFound {
        /// The reference.
        reference: String,
        /// The registry's answer.
        reason: String,
    },
    /// Content whose digest is not the one asked for: a tampered or corrupted blob or manifest.
    #[error(
        "{what} of {reference} does not match its digest (expected {expected}, got {actual}): the registry \
         served altered content, so nothing was cached; push the component again, or pull it from a \
         registry you trust"
    )]
    DigestMismatch {
        /// The manifest or the layer.
        what: &'static str,
        /// The reference.
        reference: String,
        /// The digest it should have.
        expected: String,
        /// The digest it has.
        actual: String,
    },
    /// The artifact is not a wasm component in the wasm OCI layout.
    #[error(
        "{reference} is not a wasm component artifact ({reason}): push it with `nexo push FILE REF` or \
         `wkg oci push`, which write one `application/wasm` layer"
    )]
    NotWasm {
        /// The reference.
        reference: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The layer is larger than nexo loads.
    #[error("{reference}'s component is {size} bytes, over the {cap}-byte cap on plugins: nothing was cached")]
    TooLarge {
        /// The reference.
        reference: String,
        /// The layer's declared size.
        size: i64,
        /// The cap.
        cap: u64,
    },
    /// The file to push is not a component.
    #[error("cannot push {path}: {reason}")]
    NotAComponent {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The registry sent more of a blob than its manifest declared.
    #[error(
        "the registry {registry} sent more than the {declared} bytes the manifest of {reference} declares \
         for its component: the download was stopped and nothing was cached; pull it from a registry you trust"
    )]
    Oversent {
        /// The registry's host and port.
        registry: String,
        /// The reference.
        reference: String,
        /// The size the manifest declared.
        declared: u64,
    },
    /// The local cache could not be read or written.
    #[error("the registry cache at {dir} cannot be used ({source}): set NEXO_CACHE_DIR to a writable directory")]
    Cache {
        /// The cache directory.
        dir: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A trust rule requires a signature by its keys, and none verified.
    #[error(
        "{reference} ({digest}) is not signed by a key trusted for {scope} ({found} signature(s) found, none \
         by {keys}): nothing was run; ask its author to sign it (`nexo sign --key KEY REF` or `cosign sign \
         --key KEY REF`), add their public key to the `[[registries.trust]]` rule for {scope}, or set \
         `require = false` there to run unsigned plugins from it"
    )]
    Unsigned {
        /// The reference.
        reference: String,
        /// The manifest digest checked.
        digest: String,
        /// The rule's scope.
        scope: String,
        /// How many signatures naming the digest were found.
        found: usize,
        /// The rule's keys.
        keys: String,
    },
    /// The signatures stored for a component could not be read.
    #[error("the signatures of {reference} cannot be used ({reason}): nothing was run")]
    BadSignatures {
        /// The reference.
        reference: String,
        /// What is wrong with them.
        reason: String,
    },
    /// A file is named like a reference a trust rule covers.
    #[error(
        "`{path}` is both a file here and a registry reference that a `[[registries.trust]]` rule covers \
         ({reference}): nothing was run; write `./{path}` to run the file, or `oci://{reference}` to pull \
         the signed plugin"
    )]
    Shadowed {
        /// The path as given.
        path: PathBuf,
        /// The reference it also reads as.
        reference: String,
    },
    /// A `[[registries.trust]]` rule is malformed.
    #[error("the `[[registries.trust]]` rule for `{scope}` is not valid: {reason}")]
    BadTrust {
        /// The rule's scope as written.
        scope: String,
        /// What is wrong.
        reason: String,
    },
    /// A trusted key cannot be read.
    #[error(
        "the key {path} of the `[[registries.trust]]` rule for `{scope}` cannot be used ({reason}): give the          path of a PEM public key (cosign's cosign.pub), relative to the config file"
    )]
    BadKey {
        /// The key's path.
        path: PathBuf,
        /// The rule's scope.
        scope: String,
        /// Why.
        reason: String,
    },
    /// A signing key cannot be read or made.
    #[error("the signing key {path} cannot be used: {reason}")]
    SigningKey {
        /// The key's path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// Any other answer of the registry.
    #[error("the registry {registry} failed on {reference}: {reason}")]
    Registry {
        /// The registry's host and port.
        registry: String,
        /// The reference.
        reference: String,
        /// The registry's answer.
        reason: String,
    },
}
