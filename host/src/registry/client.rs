//! The registry client: HTTPS everywhere but the registries the operator
//! lists as insecure, and oci-client's errors turned into [`RegistryError`]s.
//!
//! Registry traffic is the operator's (a pull or push the operator asked
//! for, with the operator's credentials), not a guest's, so it does not go
//! through the guarded egress client, whose address guard refuses loopback
//! and private registries the operator may well use.

use std::time::Duration;

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::OciDistributionError;

use super::credentials::Credentials;
use super::error::RegistryError;
use super::reference::PluginReference;

/// How long connecting to a registry may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a registry may go silent mid-answer.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// A client for the registries, with the operator's insecure list.
#[derive(Clone)]
pub struct RegistryClient {
    oci: oci_client::Client,
    /// nexo's own requests (logging in): no redirects, the same timeouts.
    http: reqwest013::Client,
    insecure: Vec<String>,
}

impl RegistryClient {
    /// A client that speaks plain HTTP only to `insecure` (`host:port`
    /// exactly as references name them) and HTTPS to every other registry.
    pub fn new(insecure: &[String]) -> Result<RegistryClient, RegistryError> {
        // reqwest 0.13 is built without a crypto provider (no aws-lc): ring,
        // which the rest of nexo already uses. An Err means one is installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let config = ClientConfig {
            protocol: ClientProtocol::HttpsExcept(insecure.to_vec()),
            // An image index is an error, not "pick linux/amd64".
            platform_resolver: None,
            connect_timeout: Some(CONNECT_TIMEOUT),
            read_timeout: Some(READ_TIMEOUT),
            ..ClientConfig::default()
        };
        let cannot = |e: &dyn std::fmt::Display| RegistryError::Registry {
            registry: String::new(),
            reference: String::new(),
            reason: format!("cannot build the registry client: {e}"),
        };
        // Never `Client::new`: on a bad config it falls back to a default one.
        let oci = oci_client::Client::try_from(config).map_err(|e| cannot(&e))?;
        let http = reqwest013::Client::builder()
            .redirect(reqwest013::redirect::Policy::none())
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
            .user_agent(concat!("nexo/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| cannot(&e))?;
        Ok(RegistryClient { oci, http, insecure: insecure.to_vec() })
    }

    /// The HTTP client for nexo's own requests to registries.
    pub(super) fn http(&self) -> &reqwest013::Client {
        &self.http
    }

    /// `http` for a registry listed as insecure, else `https`.
    pub(super) fn scheme(&self, registry: &str) -> &'static str {
        if self.is_insecure(registry) { "http" } else { "https" }
    }

    /// The oci-client underneath.
    pub(super) fn oci(&self) -> &oci_client::Client {
        &self.oci
    }

    /// Whether `registry` is reached over plain HTTP.
    pub fn is_insecure(&self, registry: &str) -> bool {
        self.insecure.iter().any(|r| r == registry)
    }

    /// `e`, an error of an operation on `reference`, as a [`RegistryError`].
    pub(super) fn error(
        &self,
        e: OciDistributionError,
        reference: &PluginReference,
        credentials: &Credentials,
    ) -> RegistryError {
        let registry = reference.registry().to_string();
        let text = reference.to_string();
        match e {
            OciDistributionError::UnauthorizedError { .. } | OciDistributionError::AuthenticationFailure(_) => {
                RegistryError::Unauthorized { registry, reference: text, how: credentials.describe() }
            }
            OciDistributionError::DigestError(oci_client::errors::DigestError::VerificationError {
                expected,
                actual,
            }) => RegistryError::DigestMismatch { what: "the content", reference: text, expected, actual },
            OciDistributionError::ImageManifestNotFoundError(reason) => {
                RegistryError::NotFound { reference: text, reason }
            }
            OciDistributionError::RegistryError { envelope, .. }
                if envelope.errors.iter().any(|e| {
                    matches!(
                        e.code,
                        oci_client::errors::OciErrorCode::ManifestUnknown
                            | oci_client::errors::OciErrorCode::NameUnknown
                    )
                }) =>
            {
                RegistryError::NotFound { reference: text, reason: format!("{envelope:?}") }
            }
            OciDistributionError::RegistryError { envelope, .. }
                if envelope.errors.iter().any(|e| {
                    matches!(
                        e.code,
                        oci_client::errors::OciErrorCode::Unauthorized | oci_client::errors::OciErrorCode::Denied
                    )
                }) =>
            {
                RegistryError::Unauthorized { registry, reference: text, how: credentials.describe() }
            }
            OciDistributionError::ServerError { code: 401 | 403, .. } => {
                RegistryError::Unauthorized { registry, reference: text, how: credentials.describe() }
            }
            OciDistributionError::ServerError { code: 404, message, .. } => {
                RegistryError::NotFound { reference: text, reason: message }
            }
            OciDistributionError::RequestError(e) => {
                RegistryError::Unreachable { scheme: self.scheme(&registry), registry, reason: chain(&e) }
            }
            other => RegistryError::Registry { registry, reference: text, reason: chain(&other) },
        }
    }
}

/// An error with its sources, as one line.
pub(super) fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
