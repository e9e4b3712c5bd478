//! [`SecretHeader`]: a credential the client adds for exact origins, and
//! scrubs from every response.

use std::fmt;
use std::sync::Arc;

use reqwest::header::{HeaderName, HeaderValue};

use crate::error::EgressError;
use crate::headers::{CLIENT_CONTROLLED, CREDENTIALS};
use crate::origin::Origin;
use crate::scrub::Redactor;

/// A header the client adds to requests for exact origins, such as an API
/// key. By default those are `https://<entry>:443` for each entry of the
/// policy's hosts; [`SecretHeader::for_origins`] names them instead. Its
/// value cannot be read back, and `Debug` redacts it.
#[derive(Clone)]
pub struct SecretHeader {
    pub(crate) name: String,
    pub(crate) value: String,
    /// The key without its prefix (`Bearer `), scrubbed as well.
    bare: Option<String>,
    /// `None`: https on port 443 of the policy's host entries.
    pub(crate) origins: Option<Vec<Origin>>,
    pub(crate) scrubber: Arc<Redactor>,
}

impl SecretHeader {
    /// A secret header; fails with [`EgressError::Config`] if `name` or
    /// `value` is not a valid header, or `name` is one the client controls
    /// (`host`, `content-length`, hop-by-hop headers).
    pub fn new(name: impl Into<String>, value: impl Into<String>) -> Result<Self, EgressError> {
        let name = name.into().to_ascii_lowercase();
        let value = value.into();
        if HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(EgressError::Config(format!("`{name}` is not a valid header name for a secret header")));
        }
        if HeaderValue::from_str(&value).is_err() {
            return Err(EgressError::Config(format!(
                "the secret value for header `{name}` is not a valid header value (no control characters or line breaks)"
            )));
        }
        if CLIENT_CONTROLLED.contains(&name.as_str()) && !CREDENTIALS.contains(&name.as_str()) {
            return Err(EgressError::Config(format!("`{name}` is set by the client and cannot be a secret header")));
        }
        if name.starts_with("proxy-") {
            return Err(EgressError::Config(format!("`{name}` is a proxy header; nexo uses no proxy")));
        }
        let scrubber = Arc::new(Redactor::new([value.as_bytes()])?);
        Ok(SecretHeader { name, value, bare: None, origins: None, scrubber })
    }

    /// A secret header whose value is `prefix` followed by `key`, for
    /// example `Authorization: Bearer <key>`. Responses are scrubbed of the
    /// bare key as well as of the whole value.
    pub fn with_prefix(
        name: impl Into<String>,
        prefix: impl Into<String>,
        key: impl Into<String>,
    ) -> Result<Self, EgressError> {
        let key = key.into();
        let mut secret = Self::new(name, format!("{}{key}", prefix.into()))?;
        secret.scrubber = Arc::new(Redactor::new([secret.value.as_bytes(), key.as_bytes()])?);
        secret.bare = Some(key);
        Ok(secret)
    }

    /// Sends the header only to these origins (`scheme://host[:port]`, see
    /// [`Origin::parse`]), instead of `https://<entry>:443` for each entry of
    /// the policy's hosts: for a service on another port, or over plain
    /// http to an address exempted with
    /// [`GuardedClientBuilder::allow_private`]. A plain-http origin is still
    /// refused at request time unless the host resolves to such an address.
    /// Fails with [`EgressError::Config`] for a malformed origin or an empty
    /// list.
    ///
    /// [`GuardedClientBuilder::allow_private`]: crate::GuardedClientBuilder::allow_private
    pub fn for_origins<I, S>(mut self, origins: I) -> Result<Self, EgressError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let origins = origins.into_iter().map(|o| Origin::parse(o.as_ref())).collect::<Result<Vec<_>, _>>()?;
        if origins.is_empty() {
            return Err(EgressError::Config(format!(
                "no origins given for the secret header `{}`; name at least one, or leave the default",
                self.name
            )));
        }
        self.origins = Some(origins);
        Ok(self)
    }

    /// The origins given with [`SecretHeader::for_origins`]; `None` means
    /// the default, `https://<entry>:443` for the policy's host entries.
    pub fn origins(&self) -> Option<&[Origin]> {
        self.origins.as_deref()
    }

    /// The header name, lowercased.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn header(&self) -> Result<(HeaderName, HeaderValue), EgressError> {
        let name = HeaderName::from_bytes(self.name.as_bytes())
            .map_err(|_| EgressError::Config(format!("`{}` is not a valid header name", self.name)))?;
        let mut value = HeaderValue::from_str(&self.value)
            .map_err(|_| EgressError::Config(format!("the secret value for `{}` is not valid", self.name)))?;
        // Keeps it out of hyper's own debug output.
        value.set_sensitive(true);
        Ok((name, value))
    }
}

impl fmt::Debug for SecretHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: <redacted>", self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allow::HostList;
    use crate::policy::Policy;

    #[test]
    fn secret_header_debug_is_redacted() {
        let secret = SecretHeader::new("X-Api-Key", "sk-very-secret-value").unwrap();
        assert_eq!(format!("{secret:?}"), "x-api-key: <redacted>");
        let policy = Policy::new(HostList::new(["example.com"]).unwrap()).inject(secret);
        assert!(!format!("{policy:?}").contains("sk-very-secret-value"));
        assert_eq!(policy.secret_names().collect::<Vec<_>>(), ["x-api-key"]);
    }

    #[test]
    fn secret_header_validation() {
        assert!(matches!(SecretHeader::new("bad name", "v"), Err(EgressError::Config(_))));
        assert!(matches!(SecretHeader::new("x-key", "a\nb"), Err(EgressError::Config(_))));
        assert!(matches!(SecretHeader::new("Host", "evil"), Err(EgressError::Config(_))));
        assert!(matches!(SecretHeader::new("proxy-authorization", "x"), Err(EgressError::Config(_))));
        assert!(SecretHeader::new("Authorization", "Bearer abc").is_ok());
    }
}
