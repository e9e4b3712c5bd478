//! [`EgressError`]: why a request was refused or failed.

use std::net::IpAddr;

/// Why a request was refused or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EgressError {
    /// The URL is malformed, not http(s), or carries credentials.
    #[error("bad URL: {0}")]
    BadUrl(String),
    /// A caller header is malformed.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The host (of the first URL or of a redirect) is not on an allow-list.
    #[error(
        "host `{host}` is not on the allow-list (allowed: {allowed}); only listed hosts and their subdomains can be reached"
    )]
    HostNotAllowed {
        /// The refused host.
        host: String,
        /// The list that refused it.
        allowed: String,
    },
    /// The host is, or resolves to, an address that is not public.
    #[error("{}", non_public_message(.host, .ip, .reason))]
    NonPublicAddress {
        /// The host as written in the URL.
        host: String,
        /// The refused address.
        ip: IpAddr,
        /// What kind of address it is.
        reason: String,
    },
    /// The host name could not be resolved.
    #[error("cannot resolve `{host}`: {message}; check the host name")]
    Resolve {
        /// The host name.
        host: String,
        /// What the resolver said.
        message: String,
    },
    /// The redirect chain is longer than the policy allows.
    #[error(
        "more than {limit} redirects (the next would go to {last}); fetch the final URL directly or allow more redirects"
    )]
    TooManyRedirects {
        /// The policy's redirect limit.
        limit: usize,
        /// Where the refused redirect pointed (scheme, host and path only).
        last: String,
    },
    /// A hop did not finish in time.
    #[error("timed out: {0}")]
    Timeout(String),
    /// No connection could be made (refused, unreachable, TLS failed).
    #[error("cannot connect to {url}: {message}; check that the server is running and reachable")]
    Connect {
        /// The URL (scheme, host and path only).
        url: String,
        /// What the network stack said.
        message: String,
    },
    /// A network or protocol failure.
    #[error("request failed: {0}")]
    Failed(String),
    /// A POST was answered with a redirect that would turn it into a GET.
    #[error(
        "{method} {from} answered {status}, a redirect to {to}; nexo re-sends a {method} only on 307 or 308, since \
         301, 302 and 303 would turn it into a GET without its body — use the final URL directly"
    )]
    RedirectNotFollowed {
        /// The request's method.
        method: String,
        /// The redirect status.
        status: u16,
        /// The URL that redirected (scheme, host and path only).
        from: String,
        /// Where it pointed (scheme, host and path only).
        to: String,
    },
    /// A hop's scheme, host and port are not among the policy's origins
    /// ([`Policy::within_origins`]).
    ///
    /// [`Policy::within_origins`]: crate::Policy::within_origins
    #[error(
        "{origin} is not one of the origins this request may reach ({allowed}); only that exact scheme, host and \
         port can be reached"
    )]
    OriginNotAllowed {
        /// The refused origin, `scheme://host:port`.
        origin: String,
        /// The policy's origins.
        allowed: String,
    },
    /// A streamed body went past the policy's body limit.
    #[error(
        "{url} sent more than {limit} bytes, the body limit; the rest was not read — allow a larger body if an \
         answer this long is expected"
    )]
    BodyTooLarge {
        /// The URL (scheme, host and path only).
        url: String,
        /// The limit in bytes.
        limit: usize,
    },
    /// The server answered in a content or transfer coding the client did
    /// not ask for. The client asks for `identity` only, since a compressed
    /// body could carry a key past the scrubber.
    #[error(
        "{url} answered with `{header}: {encoding}`, an encoding nexo did not ask for (it sends \
         `Accept-Encoding: identity`); the response is refused because an encoded body cannot be checked for \
         leaked keys — configure the server to answer uncompressed"
    )]
    UnrequestedEncoding {
        /// The URL (scheme, host and path only).
        url: String,
        /// `content-encoding` or `transfer-encoding`.
        header: String,
        /// The header's value, scrubbed.
        encoding: String,
    },
    /// The policy's [`Meter`] has counted its allowance: a tenant's egress
    /// quota for the hour is used up.
    ///
    /// [`Meter`]: crate::Meter
    #[error(
        "the egress quota is used up ({used} of {limit} bytes this hour); no more is sent or read until the quota \
         renews at the top of the hour, or the operator raises it"
    )]
    QuotaExhausted {
        /// The bytes counted.
        used: u64,
        /// The allowance.
        limit: u64,
    },
    /// The client or a secret header is misconfigured.
    #[error("egress configuration: {0}")]
    Config(String),
}

impl EgressError {
    /// Whether this is a policy refusal (the request was not allowed) rather
    /// than a network failure or a configuration error.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            EgressError::BadUrl(_)
                | EgressError::BadRequest(_)
                | EgressError::HostNotAllowed { .. }
                | EgressError::NonPublicAddress { .. }
                | EgressError::TooManyRedirects { .. }
                | EgressError::RedirectNotFollowed { .. }
                | EgressError::OriginNotAllowed { .. }
                | EgressError::QuotaExhausted { .. }
        )
    }
}

fn non_public_message(host: &str, ip: &IpAddr, reason: &str) -> String {
    let what = if host.trim_start_matches('[').trim_end_matches(']') == ip.to_string() {
        format!("{ip} is {reason}")
    } else {
        format!("`{host}` resolves to {ip}, {reason}")
    };
    format!("{what}; nexo never connects to private, loopback or link-local addresses")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_name_cause_and_fix() {
        let e = EgressError::HostNotAllowed { host: "x.org".into(), allowed: "a.com, b.com".into() };
        assert_eq!(
            e.to_string(),
            "host `x.org` is not on the allow-list (allowed: a.com, b.com); only listed hosts and their subdomains can be reached"
        );
        let e = EgressError::NonPublicAddress {
            host: "localhost".into(),
            ip: "127.0.0.1".parse().unwrap(),
            reason: "a loopback address".into(),
        };
        assert_eq!(
            e.to_string(),
            "`localhost` resolves to 127.0.0.1, a loopback address; nexo never connects to private, loopback or link-local addresses"
        );
        assert!(e.is_refusal());
        assert!(!EgressError::Timeout("t".into()).is_refusal());
        assert!(!EgressError::Failed("f".into()).is_refusal());
    }
}
