//! Origins: the exact scheme, host and port a secret header may go to.

use std::fmt;
use std::net::IpAddr;

use url::{Host, Url};

use crate::error::EgressError;

/// A scheme (`http` or `https`), host and port, such as
/// `https://api.example.com` (port 443) or `https://10.0.0.5:8443`. A secret
/// header restricted to origins ([`SecretHeader::for_origins`]) is sent to a
/// URL only if the URL has exactly one of them: another port, scheme or
/// subdomain of the same host does not get it.
///
/// [`SecretHeader::for_origins`]: crate::SecretHeader::for_origins
#[derive(Clone, PartialEq, Eq)]
pub struct Origin(url::Origin);

impl Origin {
    /// Parses `scheme://host[:port]`; a trailing `/` is accepted. Fails with
    /// [`EgressError::Config`] for other schemes, user info, paths, queries
    /// and fragments.
    pub fn parse(text: &str) -> Result<Origin, EgressError> {
        let bad = |why: &str| {
            EgressError::Config(format!(
                "`{text}` is not an origin: {why}; write scheme://host[:port], for example `https://search.internal:8443`"
            ))
        };
        let url = Url::parse(text).map_err(|e| bad(&e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(bad(&format!("the scheme `{}` is not http or https", url.scheme())));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(bad("it has user info (`user@`)"));
        }
        if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
            return Err(bad("it has a path, query or fragment"));
        }
        if url.host().is_none() {
            return Err(bad("it has no host"));
        }
        Ok(Origin(url.origin()))
    }

    /// Whether `url` has exactly this scheme, host and port.
    pub(crate) fn matches(&self, url: &Url) -> bool {
        url.origin() == self.0
    }

    /// `http` or `https`.
    pub fn scheme(&self) -> &str {
        match &self.0 {
            url::Origin::Tuple(scheme, _, _) => scheme,
            url::Origin::Opaque(_) => "",
        }
    }

    /// Whether the scheme is `https`.
    pub fn is_https(&self) -> bool {
        self.scheme() == "https"
    }

    /// The host: a lowercase name (punycode) or an IP address.
    pub fn host(&self) -> String {
        match &self.0 {
            url::Origin::Tuple(_, host, _) => host.to_string(),
            url::Origin::Opaque(_) => String::new(),
        }
    }

    /// The host, if it is an IP address.
    pub fn ip(&self) -> Option<IpAddr> {
        match &self.0 {
            url::Origin::Tuple(_, Host::Ipv4(ip), _) => Some(IpAddr::V4(*ip)),
            url::Origin::Tuple(_, Host::Ipv6(ip), _) => Some(IpAddr::V6(*ip)),
            _ => None,
        }
    }

    /// The port, explicit or the scheme's default.
    pub fn port(&self) -> u16 {
        match &self.0 {
            url::Origin::Tuple(_, _, port) => *port,
            url::Origin::Opaque(_) => 0,
        }
    }
}

impl fmt::Display for Origin {
    /// `scheme://host:port`, with the port always written.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            url::Origin::Tuple(scheme, Host::Ipv6(ip), port) => write!(f, "{scheme}://[{ip}]:{port}"),
            url::Origin::Tuple(scheme, host, port) => write!(f, "{scheme}://{host}:{port}"),
            url::Origin::Opaque(_) => f.write_str("null"),
        }
    }
}

impl fmt::Debug for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Origin({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_parse_with_their_default_ports() {
        let o = Origin::parse("https://API.Example.com").unwrap();
        assert_eq!(o.to_string(), "https://api.example.com:443");
        assert_eq!((o.scheme(), o.host().as_str(), o.port(), o.is_https()), ("https", "api.example.com", 443, true));
        assert_eq!(Origin::parse("http://10.0.0.5:8888/").unwrap().to_string(), "http://10.0.0.5:8888");
        assert_eq!(Origin::parse("http://10.0.0.5:8888").unwrap().ip(), Some("10.0.0.5".parse().unwrap()));
        assert_eq!(Origin::parse("https://[::1]:8443").unwrap().to_string(), "https://[::1]:8443");
        assert_eq!(Origin::parse("https://a.example:443").unwrap(), Origin::parse("https://a.example").unwrap());
    }

    #[test]
    fn origins_refuse_what_is_not_an_origin() {
        for bad in [
            "api.example.com",
            "ftp://a.example",
            "https://u:p@a.example",
            "https://a.example/v1",
            "https://a.example/?q",
        ] {
            let err = Origin::parse(bad).unwrap_err();
            assert!(matches!(&err, EgressError::Config(m) if m.contains(bad) && m.contains("scheme://host")), "{err}");
        }
    }

    #[test]
    fn an_origin_matches_only_its_exact_scheme_host_and_port() {
        let o = Origin::parse("https://api.example.com").unwrap();
        for yes in ["https://api.example.com/v1?q=1", "https://API.example.com:443/"] {
            assert!(o.matches(&Url::parse(yes).unwrap()), "{yes}");
        }
        for no in ["http://api.example.com/", "https://api.example.com:8443/", "https://www.api.example.com/"] {
            assert!(!o.matches(&Url::parse(no).unwrap()), "{no}");
        }
    }
}
