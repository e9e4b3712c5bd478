//! [`Policy`]: what one request may reach, and the caller headers it lets
//! through.

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use url::Url;

use crate::allow::HostList;
use crate::error::EgressError;
use crate::headers::{CLIENT_CONTROLLED, POLICY_REFUSED, caller_may_send, is_mcp_header};
use crate::meter::Meter;
use crate::origin::Origin;
use crate::scrub::Redactor;
use crate::secret::SecretHeader;

const DEFAULT_MAX_BODY: usize = 2 * 1024 * 1024;
const DEFAULT_MAX_REDIRECTS: usize = 5;
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
const DEFAULT_STREAM_TIMEOUT: Duration = Duration::from_secs(600);

/// What one request may reach: the hosts, operator narrowing, injected
/// secrets and headers, and limits.
#[derive(Debug, Clone)]
pub struct Policy {
    pub(crate) hosts: HostList,
    pub(crate) within: Vec<HostList>,
    pub(crate) origins: Option<Vec<Origin>>,
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    pub(crate) secrets: Vec<SecretHeader>,
    pub(crate) max_body: usize,
    pub(crate) max_redirects: usize,
    pub(crate) timeout: Duration,
    pub(crate) stream_timeout: Duration,
    /// Callers may send the MCP streamable-HTTP headers ([`Policy::mcp_headers`]).
    mcp_headers: bool,
    /// Callers may send the W3C trace-context headers ([`Policy::trace_context`]).
    trace_context: bool,
    /// Where the bytes of its requests are counted ([`Policy::metered`]).
    pub(crate) meter: Option<Arc<Meter>>,
}

impl Policy {
    /// A policy allowing `hosts`, with the default limits: 2 MiB of body, 5
    /// redirects, 30 seconds per request (redirects included), 10 minutes
    /// for a streamed body.
    pub fn new(hosts: HostList) -> Self {
        Policy {
            hosts,
            within: Vec::new(),
            origins: None,
            headers: Vec::new(),
            secrets: Vec::new(),
            max_body: DEFAULT_MAX_BODY,
            max_redirects: DEFAULT_MAX_REDIRECTS,
            timeout: DEFAULT_TIMEOUT,
            stream_timeout: DEFAULT_STREAM_TIMEOUT,
            mcp_headers: false,
            trace_context: false,
            meter: None,
        }
    }

    /// Lets callers send the headers of MCP's streamable-HTTP transport,
    /// which the client would otherwise drop: `Mcp-Session-Id`,
    /// `MCP-Protocol-Version`, `Last-Event-ID`, `Mcp-Method`, `Mcp-Name` and
    /// `Mcp-Param-*` ([`MCP_HEADERS`]). For the MCP client's policies only:
    /// none of them carries a credential or changes what the scrubber sees.
    ///
    /// [`MCP_HEADERS`]: crate::MCP_HEADERS
    pub fn mcp_headers(mut self) -> Self {
        self.mcp_headers = true;
        self
    }

    /// Lets callers send `traceparent` and `tracestate` ([`TRACE_HEADERS`]):
    /// for the host's own requests to a model provider or an MCP server,
    /// never a component's (which could forge another trace's context).
    ///
    /// [`TRACE_HEADERS`]: crate::TRACE_HEADERS
    pub fn trace_context(mut self) -> Self {
        self.trace_context = true;
        self
    }

    /// Every hop must also have exactly one of these origins (scheme, host
    /// and port; see [`Origin`]), for a client that talks to one service,
    /// such as a model provider: a redirect cannot take it to another port
    /// or scheme of an allowed host. A second call replaces the list; an
    /// empty list allows nothing.
    pub fn within_origins(mut self, origins: impl IntoIterator<Item = Origin>) -> Self {
        self.origins = Some(origins.into_iter().collect());
        self
    }

    /// Adds a header the operator sends with every request of the policy,
    /// such as an API version (`anthropic-version`). It is not a secret: it
    /// is neither redacted nor scrubbed (use [`Policy::inject`] for keys).
    /// Caller headers of the same name are dropped; a later call with the
    /// same name replaces the value. Fails with [`EgressError::Config`] for
    /// an invalid name or value, and for headers the client sets itself,
    /// credentials, and those that could read an echoed key past the
    /// scrubber (`accept-encoding`, `range`).
    pub fn header(mut self, name: &str, value: &str) -> Result<Self, EgressError> {
        let lower = name.to_ascii_lowercase();
        let header = HeaderName::from_bytes(lower.as_bytes())
            .map_err(|_| EgressError::Config(format!("`{name}` is not a valid header name")))?;
        if CLIENT_CONTROLLED.contains(&lower.as_str())
            || POLICY_REFUSED.contains(&lower.as_str())
            || lower.starts_with("proxy-")
        {
            return Err(EgressError::Config(format!(
                "`{lower}` cannot be a policy header: the client sets it, or it carries credentials (give a key as a \
                 SecretHeader)"
            )));
        }
        let value = HeaderValue::from_str(value).map_err(|_| {
            EgressError::Config(format!(
                "the value of header `{lower}` is not a valid header value (no control characters or line breaks)"
            ))
        })?;
        self.headers.retain(|(n, _)| *n != header);
        self.headers.push((header, value));
        Ok(self)
    }

    /// A second list every hop must also match (the operator narrowing an
    /// agent's list). May be called several times; every list must match.
    pub fn also_within(mut self, list: HostList) -> Self {
        self.within.push(list);
        self
    }

    /// Adds `secret` to every request for its origins: by default
    /// `https://<entry>:443` for each entry of the policy's hosts (exactly
    /// that host: not its subdomains, another port or plain http), or those
    /// of [`SecretHeader::for_origins`]. Caller headers of the same name are
    /// dropped on every request; a later secret with the same name replaces
    /// an earlier one. Should a server echo the value, in its literal or a
    /// common encoded form, it is replaced by `<redacted>` in every response
    /// of the policy: headers, body and redirect targets (values shorter
    /// than 8 bytes are left alone: they occur by chance).
    pub fn inject(mut self, secret: SecretHeader) -> Self {
        self.secrets.retain(|s| s.name != secret.name);
        self.secrets.push(secret);
        self
    }

    /// The most body bytes kept; the rest is not read.
    pub fn max_body(mut self, bytes: usize) -> Self {
        self.max_body = bytes;
        self
    }

    /// Counts the bytes of this policy's requests in `meter`, and refuses
    /// them once its allowance is used up. Clones of the policy share it.
    pub fn metered(mut self, meter: Arc<Meter>) -> Self {
        self.meter = Some(meter);
        self
    }

    /// The error for a used-up meter.
    pub(crate) fn quota_error(meter: &Meter) -> EgressError {
        EgressError::QuotaExhausted { used: meter.used(), limit: meter.limit().unwrap_or(0) }
    }

    /// The most redirects followed.
    pub fn max_redirects(mut self, redirects: usize) -> Self {
        self.max_redirects = redirects;
        self
    }

    /// The time limit for a request, redirects included: resolving,
    /// connecting, and reading the whole (capped) body. For a streamed
    /// request ([`GuardedClient::stream`]), the limit until the response
    /// headers, and then for each wait for the next piece of the body.
    ///
    /// [`GuardedClient::stream`]: crate::GuardedClient::stream
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The time limit for a streamed request in all, from its start to the
    /// end of its body, so a server that trickles bytes cannot hold it open
    /// for ever.
    pub fn stream_timeout(mut self, timeout: Duration) -> Self {
        self.stream_timeout = timeout;
        self
    }

    /// The hosts requests may reach.
    pub fn hosts(&self) -> &HostList {
        &self.hosts
    }

    /// The narrowing lists given with [`Policy::also_within`].
    pub fn narrowed_by(&self) -> &[HostList] {
        &self.within
    }

    /// The origins given with [`Policy::within_origins`], if any.
    pub fn origins_within(&self) -> Option<&[Origin]> {
        self.origins.as_deref()
    }

    /// The names of the injected secret headers.
    pub fn secret_names(&self) -> impl Iterator<Item = &str> {
        self.secrets.iter().map(SecretHeader::name)
    }

    /// The names of the secret headers a request for `url` would carry
    /// (its host must still pass the allow-lists and the guard).
    pub fn secrets_for(&self, url: &str) -> Vec<&str> {
        match Url::parse(url) {
            Ok(url) => self.secrets.iter().filter(|s| self.sends(s, &url)).map(SecretHeader::name).collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Whether `secret` goes to `url`'s exact origin.
    pub(crate) fn sends(&self, secret: &SecretHeader, url: &Url) -> bool {
        match &secret.origins {
            Some(origins) => origins.iter().any(|o| o.matches(url)),
            None => {
                url.scheme() == "https"
                    && url.port_or_known_default() == Some(443)
                    && url.host().is_some_and(|host| self.hosts.is_entry(&host))
            }
        }
    }

    pub(crate) fn scrubbers(&self) -> Vec<&Redactor> {
        self.secrets.iter().map(|s| &*s.scrubber).collect()
    }

    /// Whether a caller header named `lower` is replaced by one of the policy's.
    fn sets_header(&self, lower: &str) -> bool {
        self.secrets.iter().any(|s| s.name == lower) || self.headers.iter().any(|(n, _)| n.as_str() == lower)
    }

    /// The body limit in bytes.
    pub fn body_limit(&self) -> usize {
        self.max_body
    }

    /// The redirect limit.
    pub fn redirect_limit(&self) -> usize {
        self.max_redirects
    }

    /// The time limit per request ([`Policy::timeout`]).
    pub fn time_limit(&self) -> Duration {
        self.timeout
    }

    /// The time limit for a streamed request in all ([`Policy::stream_timeout`]).
    pub fn stream_time_limit(&self) -> Duration {
        self.stream_timeout
    }
}

/// The caller's headers minus those the client controls, carry credentials,
/// or share a name with a secret header.
pub(crate) fn caller_headers(headers: &[(String, String)], policy: &Policy) -> Result<HeaderMap, EgressError> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| EgressError::BadRequest(format!("`{name}` is not a valid header name")))?;
        let lower = header.as_str();
        let allowed = caller_may_send(lower)
            || (policy.mcp_headers && is_mcp_header(lower))
            || (policy.trace_context && crate::TRACE_HEADERS.contains(&lower));
        if !allowed || policy.sets_header(lower) {
            tracing::debug!(target: "nexo::egress", header = %lower, "dropped a caller header");
            continue;
        }
        let value = HeaderValue::from_str(value).map_err(|_| {
            EgressError::BadRequest(format!(
                "the value of header `{name}` is not a valid header value (no control characters or line breaks)"
            ))
        })?;
        map.append(header, value);
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caller_headers_are_filtered() {
        let policy = Policy::new(HostList::default()).inject(SecretHeader::new("x-api-key", "secret-value").unwrap());
        let given: Vec<(String, String)> = [
            "Host",
            "User-Agent",
            "Cookie",
            "Authorization",
            "Proxy-Authorization",
            "Proxy-Foo",
            "Connection",
            "Keep-Alive",
            "Transfer-Encoding",
            "TE",
            "Upgrade",
            "Content-Length",
            "Forwarded",
            "X-Forwarded-For",
            "X-API-KEY",
            "Accept",
            "X-Custom",
        ]
        .iter()
        .map(|n| (n.to_string(), "v".to_string()))
        .collect();
        let map = caller_headers(&given, &policy).unwrap();
        let names: Vec<&str> = map.keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["accept", "x-custom"]);
        let bad = caller_headers(&[("bad name".into(), "v".into())], &policy).unwrap_err();
        assert!(matches!(bad, EgressError::BadRequest(_)), "{bad}");
        let bad = caller_headers(&[("x-ok".into(), "a\r\nb".into())], &policy).unwrap_err();
        assert!(matches!(bad, EgressError::BadRequest(_)), "{bad}");
    }

    #[test]
    fn mcp_headers_pass_only_when_the_policy_allows_them() {
        let given: Vec<(String, String)> =
            ["Mcp-Session-Id", "MCP-Protocol-Version", "Last-Event-ID", "Mcp-Method", "Mcp-Name", "Mcp-Param-Region"]
                .iter()
                .chain(["Mcp-Param-", "Mcp-Other", "Authorization", "Cookie"].iter())
                .map(|n| (n.to_string(), "v".to_string()))
                .collect();
        let plain = caller_headers(&given, &Policy::new(HostList::default())).unwrap();
        assert!(plain.is_empty(), "{plain:?}");
        let mcp = caller_headers(&given, &Policy::new(HostList::default()).mcp_headers()).unwrap();
        let names: Vec<&str> = mcp.keys().map(HeaderName::as_str).collect();
        assert_eq!(
            names,
            ["mcp-session-id", "mcp-protocol-version", "last-event-id", "mcp-method", "mcp-name", "mcp-param-region"]
        );
        // A policy header of the same name still wins.
        let policy = Policy::new(HostList::default()).mcp_headers().header("mcp-name", "ours").unwrap();
        let map = caller_headers(&given, &policy).unwrap();
        assert!(!map.contains_key("mcp-name"));
    }

    #[test]
    fn trace_context_passes_only_when_the_policy_allows_it() {
        let given: Vec<(String, String)> =
            ["traceparent", "TraceState", "baggage"].iter().map(|n| (n.to_string(), "v".to_string())).collect();
        let plain = caller_headers(&given, &Policy::new(HostList::default()).mcp_headers()).unwrap();
        assert!(plain.is_empty(), "{plain:?}");
        let traced = caller_headers(&given, &Policy::new(HostList::default()).trace_context()).unwrap();
        let names: Vec<&str> = traced.keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["traceparent", "tracestate"]);
    }
}
