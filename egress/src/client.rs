//! The guarded client: allow-lists, the address guard at connect time,
//! header hygiene, secret injection, redirects and limits.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::Duration;

use reqwest::header::{
    ACCEPT_ENCODING, CONTENT_ENCODING, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, LOCATION, TRANSFER_ENCODING,
};
use tracing::info;
use url::{Host, Url};

use crate::address::check_address;
use crate::allow::HostList;
use crate::meter::Meter;
use crate::origin::Origin;
use crate::resolver::{Resolver, SystemResolver};
use crate::scrub::{Redactor, scrub, scrub_prefix};

/// The `User-Agent` of every request.
pub const USER_AGENT: &str = concat!("nexo/", env!("CARGO_PKG_VERSION"));

const DEFAULT_MAX_BODY: usize = 2 * 1024 * 1024;
const DEFAULT_MAX_REDIRECTS: usize = 5;
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const DEFAULT_STREAM_TIMEOUT: Duration = Duration::from_secs(600);

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

/// A header the client adds to requests for exact origins, such as an API
/// key. By default those are `https://<entry>:443` for each entry of the
/// policy's hosts; [`SecretHeader::for_origins`] names them instead. Its
/// value cannot be read back, and `Debug` redacts it.
#[derive(Clone)]
pub struct SecretHeader {
    name: String,
    value: String,
    /// The key without its prefix (`Bearer `), scrubbed as well.
    bare: Option<String>,
    /// `None`: https on port 443 of the policy's host entries.
    origins: Option<Vec<Origin>>,
    scrubber: Arc<Redactor>,
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

    fn header(&self) -> Result<(HeaderName, HeaderValue), EgressError> {
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

/// What one request may reach: the hosts, operator narrowing, injected
/// secrets and headers, and limits.
#[derive(Debug, Clone)]
pub struct Policy {
    hosts: HostList,
    within: Vec<HostList>,
    origins: Option<Vec<Origin>>,
    headers: Vec<(HeaderName, HeaderValue)>,
    secrets: Vec<SecretHeader>,
    max_body: usize,
    max_redirects: usize,
    timeout: Duration,
    stream_timeout: Duration,
    /// Callers may send the MCP streamable-HTTP headers ([`Policy::mcp_headers`]).
    mcp_headers: bool,
    /// Where the bytes of its requests are counted ([`Policy::metered`]).
    meter: Option<Arc<Meter>>,
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
            meter: None,
        }
    }

    /// Lets callers send the headers of MCP's streamable-HTTP transport,
    /// which the client would otherwise drop: `Mcp-Session-Id`,
    /// `MCP-Protocol-Version`, `Last-Event-ID`, `Mcp-Method`, `Mcp-Name` and
    /// `Mcp-Param-*` ([`MCP_HEADERS`]). For the MCP client's policies only:
    /// none of them carries a credential or changes what the scrubber sees.
    pub fn mcp_headers(mut self) -> Self {
        self.mcp_headers = true;
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
    fn quota_error(meter: &Meter) -> EgressError {
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
    fn sends(&self, secret: &SecretHeader, url: &Url) -> bool {
        match &secret.origins {
            Some(origins) => origins.iter().any(|o| o.matches(url)),
            None => {
                url.scheme() == "https"
                    && url.port_or_known_default() == Some(443)
                    && url.host().is_some_and(|host| self.hosts.is_entry(&host))
            }
        }
    }

    fn scrubbers(&self) -> Vec<&Redactor> {
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

/// The methods the client sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    Get,
    Post,
}

impl Method {
    fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
        }
    }
}

/// What [`GuardedClient::send`] and [`GuardedClient::stream`] send: a GET,
/// or a POST with a JSON body, and caller headers. Caller headers pass the
/// same filter as those of [`GuardedClient::get`]; the client sets
/// `Content-Type` itself. `Debug` shows the method, the URL without its
/// query, and the body's length only.
#[derive(Clone)]
pub struct Request {
    method: Method,
    url: String,
    headers: Vec<(String, String)>,
    /// JSON, for a POST.
    body: Option<bytes::Bytes>,
}

impl Request {
    /// A GET of `url`.
    pub fn get(url: impl Into<String>) -> Self {
        Request { method: Method::Get, url: url.into(), headers: Vec::new(), body: None }
    }

    /// A POST of `body` to `url`, sent with `Content-Type: application/json`.
    ///
    /// A POST follows only 307 and 308 redirects, which keep the method and
    /// body, and checks each hop like the first. It refuses 301, 302 and 303
    /// ([`EgressError::RedirectNotFollowed`]): those turn the request into a
    /// GET without its body, which an API (a model provider's, say) would
    /// answer with something other than what was asked, so the caller should
    /// learn the final URL instead.
    pub fn post_json(url: impl Into<String>, body: impl Into<Vec<u8>>) -> Self {
        Request {
            method: Method::Post,
            url: url.into(),
            headers: Vec::new(),
            body: Some(bytes::Bytes::from(body.into())),
        }
    }

    /// Adds a caller header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Adds caller headers.
    pub fn headers(mut self, headers: &[(String, String)]) -> Self {
        self.headers.extend_from_slice(headers);
        self
    }

    /// `GET` or `POST`.
    pub fn method(&self) -> &'static str {
        self.method.as_str()
    }

    /// The URL, as given.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl fmt::Debug for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("Request")
            .field("method", &self.method.as_str())
            .field("url", &strip_query(&self.url))
            .field("headers", &names)
            .field("body_bytes", &self.body.as_ref().map(bytes::Bytes::len))
            .finish()
    }
}

/// A response to [`GuardedClient::get`] or [`GuardedClient::send`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The final URL, after redirects.
    pub url: String,
    /// The HTTP status code.
    pub status: u16,
    /// The response headers, in order (values decoded lossily as UTF-8).
    pub headers: Vec<(String, String)>,
    /// The `Content-Type` header, if any.
    pub content_type: Option<String>,
    /// The body, at most the policy's `max_body` bytes.
    pub body: Vec<u8>,
    /// Whether the body was cut at `max_body`.
    pub truncated: bool,
}

/// A response to [`GuardedClient::stream`]: the head, checked and scrubbed
/// like a [`Response`]'s, and a body read piece by piece with
/// [`StreamingResponse::chunk`].
pub struct StreamingResponse {
    /// The final URL, after redirects.
    pub url: String,
    /// The HTTP status code.
    pub status: u16,
    /// The response headers, in order (values decoded lossily as UTF-8).
    pub headers: Vec<(String, String)>,
    /// The `Content-Type` header, if any.
    pub content_type: Option<String>,
    body: BodyStream,
}

impl fmt::Debug for StreamingResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamingResponse")
            .field("url", &self.url)
            .field("status", &self.status)
            .field("headers", &self.headers)
            .field("content_type", &self.content_type)
            .field("received", &self.body.received)
            .finish_non_exhaustive()
    }
}

impl StreamingResponse {
    /// The next piece of the body, scrubbed of the policy's secrets, or
    /// `None` at its end.
    ///
    /// Pieces are released at event boundaries: the bytes up to the last
    /// blank line received (`\n\n`, which ends a server-sent event) are
    /// scrubbed and returned as soon as they arrive, the rest waits for more.
    /// A match is searched in all that has arrived, so it may span such a
    /// boundary; one that has not fully arrived when the bytes before the
    /// boundary go out is caught only in the parts on each side (any 12
    /// characters of the key, see [`Redactor`]). Bytes without a blank line
    /// are held back up to twice the longest possible match and then
    /// released, keeping that much back. Without secrets every piece goes
    /// out as it arrives.
    ///
    /// Errors: [`EgressError::BodyTooLarge`] past the policy's body limit
    /// ([`Policy::max_body`]), [`EgressError::Timeout`] when nothing arrives
    /// within the policy's timeout or the whole request passes its
    /// [`Policy::stream_timeout`], and a network failure as
    /// [`EgressError::Failed`]. After an error the bytes held back are
    /// dropped, and every later call returns the same error.
    pub async fn chunk(&mut self) -> Result<Option<Vec<u8>>, EgressError> {
        self.body.next().await
    }

    /// How many body bytes have been received so far.
    pub fn received(&self) -> usize {
        self.body.received
    }
}

/// The body of a [`StreamingResponse`].
struct BodyStream {
    response: reqwest::Response,
    redactors: Vec<Arc<Redactor>>,
    /// The longest match: held back when no event boundary comes.
    overlap: usize,
    /// Received, not yet released.
    pending: Vec<u8>,
    /// How far `pending` was searched for a blank line, and where the last
    /// one found ends.
    searched: usize,
    boundary: usize,
    received: usize,
    limit: usize,
    idle: Duration,
    end: tokio::time::Instant,
    ended: bool,
    failed: Option<EgressError>,
    method: Method,
    url_shown: String,
    meter: Option<Arc<Meter>>,
}

impl BodyStream {
    async fn next(&mut self) -> Result<Option<Vec<u8>>, EgressError> {
        loop {
            if let Some(error) = &self.failed {
                return Err(error.clone());
            }
            if let Some(piece) = self.release(self.ended) {
                return Ok(Some(piece));
            }
            if self.ended {
                return Ok(None);
            }
            let now = tokio::time::Instant::now();
            let idle_end = now + self.idle;
            let wait = idle_end.min(self.end);
            let read = tokio::time::timeout_at(wait, self.response.chunk()).await;
            match read {
                Err(_) => {
                    let message = if idle_end <= self.end {
                        format!(
                            "{} {}: nothing arrived for {:?}; the server stalled — retry later or allow more time",
                            self.method.as_str(),
                            self.url_shown,
                            self.idle
                        )
                    } else {
                        format!(
                            "{} {}: the streamed body did not end within the request's time limit; allow more \
                             time for streams",
                            self.method.as_str(),
                            self.url_shown
                        )
                    };
                    return Err(self.fail(EgressError::Timeout(message)));
                }
                Ok(Err(e)) => return Err(self.fail(send_error(e, self.method, &self.url_shown))),
                Ok(Ok(None)) => self.ended = true,
                Ok(Ok(Some(bytes))) => {
                    self.received = self.received.saturating_add(bytes.len());
                    if self.received > self.limit {
                        let error = EgressError::BodyTooLarge { url: self.url_shown.clone(), limit: self.limit };
                        return Err(self.fail(error));
                    }
                    if let Some(meter) = &self.meter
                        && !meter.add(bytes.len())
                    {
                        let error = Policy::quota_error(meter);
                        return Err(self.fail(error));
                    }
                    self.pending.extend_from_slice(&bytes);
                }
            }
        }
    }

    fn fail(&mut self, error: EgressError) -> EgressError {
        // The held-back bytes could end in part of a key: never released.
        self.pending.clear();
        self.failed = Some(error.clone());
        info!(target: "nexo::egress", verdict = "failed", url = %self.url_shown, error = %error, "streamed body");
        error
    }

    /// The next piece to release, scrubbed; `all` releases everything.
    fn release(&mut self, all: bool) -> Option<Vec<u8>> {
        if self.pending.is_empty() {
            return None;
        }
        if self.overlap == 0 {
            return Some(std::mem::take(&mut self.pending));
        }
        let len = self.pending.len();
        let cut = if all {
            len
        } else {
            // Only the new bytes (and the two before them) can complete a blank line.
            let from = self.searched.saturating_sub(2);
            if let Some(end) = last_blank_line(&self.pending[from..]) {
                self.boundary = from + end;
            }
            self.searched = len;
            let slack = if len - self.boundary >= 2 * self.overlap { len - self.overlap } else { 0 };
            self.boundary.max(slack)
        };
        if cut == 0 {
            return None;
        }
        let redactors: Vec<&Redactor> = self.redactors.iter().map(|r| &**r).collect();
        let (piece, consumed) = scrub_prefix(&self.pending, &redactors, cut);
        self.pending.drain(..consumed);
        self.searched = self.pending.len();
        self.boundary = 0;
        Some(piece)
    }
}

/// The end of the last blank line (`\n\n` or `\n\r\n`) in `bytes`.
fn last_blank_line(bytes: &[u8]) -> Option<usize> {
    (1..bytes.len())
        .rev()
        .find(|&i| bytes[i] == b'\n' && (bytes[i - 1] == b'\n' || (i >= 2 && bytes[i - 2..i] == *b"\n\r")))
        .map(|i| i + 1)
}

/// Headers the client sets itself or that carry credentials; callers cannot
/// send them. `proxy-*` and `x-forwarded-*` are matched by prefix.
const CLIENT_CONTROLLED: &[&str] = &[
    "host",
    "user-agent",
    "cookie",
    "authorization",
    "proxy-authorization",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "upgrade",
    "content-length",
    "forwarded",
    "expect",
];

/// Controlled headers an operator may still inject as secrets.
const CREDENTIALS: &[&str] = &["authorization", "cookie"];

/// Headers a policy may not set either: the client sets the body's type, and
/// the others could read an echoed key compressed or in pieces.
const POLICY_REFUSED: &[&str] = &["accept-encoding", "content-type", "content-encoding", "range", "if-range"];

/// Standard headers a caller may send. Everything else standard is dropped:
/// `Range` or `Accept-Encoding` could let a component read an echoed key in
/// pieces or compressed, past the scrubber.
const CALLER_STANDARD: &[&str] = &["accept", "accept-language", "cache-control", "if-none-match", "if-modified-since"];

/// `x-` headers a caller may not send: method overrides (GET only means GET
/// only) and client-address or URL-rewrite headers some servers trust.
const CALLER_X_REFUSED: &[&str] = &[
    "x-http-method",
    "x-http-method-override",
    "x-method-override",
    "x-original-url",
    "x-rewrite-url",
    "x-real-ip",
    "x-client-ip",
    "x-original-host",
    "x-host",
];

/// The MCP streamable-HTTP headers [`Policy::mcp_headers`] lets callers
/// send; `mcp-param-` is a prefix (`Mcp-Param-<name>`).
pub const MCP_HEADERS: &[&str] =
    &["mcp-session-id", "mcp-protocol-version", "last-event-id", "mcp-method", "mcp-name", "mcp-param-"];

fn is_mcp_header(lower: &str) -> bool {
    MCP_HEADERS
        .iter()
        .any(|h| if h.ends_with('-') { lower.starts_with(h) && lower.len() > h.len() } else { lower == *h })
}

fn caller_may_send(lower: &str) -> bool {
    if CALLER_STANDARD.contains(&lower) {
        return true;
    }
    lower.starts_with("x-")
        && !lower.starts_with("x-forwarded-")
        && !CALLER_X_REFUSED.contains(&lower)
        && !CLIENT_CONTROLLED.contains(&lower)
}

/// The checks shared by the pre-flight and the connect-time resolver.
struct Guard {
    resolver: Arc<dyn Resolver>,
    exempt: Vec<IpAddr>,
    /// Hosts whose addresses are all exempt (matched exactly, not their
    /// subdomains).
    exempt_hosts: HostList,
    /// Test routes (feature `testing`); always empty otherwise.
    routes: HashMap<IpAddr, SocketAddr>,
}

impl Guard {
    /// Whether `host` is one of the exempted hosts itself.
    fn host_exempt(&self, host: &Host<&str>) -> bool {
        self.exempt_hosts.is_entry(host)
    }

    fn check(&self, host: &str, host_exempt: bool, ip: IpAddr) -> Result<(), EgressError> {
        // An exempted host still never reaches what no exemption may cover
        // (the metadata service among them): `check_address` refuses those.
        if self.exempt.contains(&ip) || (host_exempt && never_exempt(ip).is_none()) {
            return Ok(());
        }
        check_address(ip).map_err(|refused| EgressError::NonPublicAddress {
            host: host.to_string(),
            ip,
            reason: refused.explanation(),
        })
    }

    /// `ip` itself, if it passes [`Guard::check`].
    fn checked(&self, host: &str, host_exempt: bool, ip: IpAddr) -> Result<IpAddr, EgressError> {
        self.check(host, host_exempt, ip).map(|()| ip)
    }

    /// Resolves `name`; every address must pass, or the whole name is refused.
    async fn resolve_checked(&self, name: &str) -> Result<Vec<IpAddr>, EgressError> {
        let addrs = self
            .resolver
            .resolve(name)
            .await
            .map_err(|e| EgressError::Resolve { host: name.to_string(), message: e.to_string() })?;
        if addrs.is_empty() {
            return Err(EgressError::Resolve { host: name.to_string(), message: "no addresses".into() });
        }
        let host_exempt = self.host_exempt(&Host::Domain(name));
        for ip in &addrs {
            self.check(name, host_exempt, *ip)?;
        }
        Ok(addrs)
    }

    /// Whether `ip` is the operator's exempted private service (or, in tests,
    /// a routed address), where plain http may carry a key. A public address
    /// of an exempted host is not: a key crosses the internet only in TLS.
    fn private_ok(&self, host_exempt: bool, ip: IpAddr) -> bool {
        self.exempt.contains(&ip) || self.routes.contains_key(&ip) || (host_exempt && check_address(ip).is_err())
    }

    fn connect_addr(&self, ip: IpAddr) -> SocketAddr {
        // Port 0: hyper fills in the URL's port.
        self.routes.get(&ip).copied().unwrap_or(SocketAddr::new(ip, 0))
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A guard refusal travelling through reqwest's error chain.
#[derive(Debug)]
struct Refused(EgressError);

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Refused {}

/// reqwest resolves every new connection's host through this, so the guard
/// checks exactly the addresses it connects to: a name that resolves
/// differently at connect time (DNS rebinding) is checked again.
struct ConnectGuard(Arc<Guard>);

impl reqwest::dns::Resolve for ConnectGuard {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let guard = Arc::clone(&self.0);
        let name = name.as_str().to_owned();
        Box::pin(async move {
            // Boxed as the trait object directly: `?` on a `Box<Refused>` would box
            // it again and hide it from the downcast in `send_error`.
            let addrs = guard.resolve_checked(&name).await.map_err(|e| -> BoxError { Box::new(Refused(e)) })?;
            let addrs: Vec<SocketAddr> = addrs.into_iter().map(|ip| guard.connect_addr(ip)).collect();
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// Builds a [`GuardedClient`].
pub struct GuardedClientBuilder {
    resolver: Arc<dyn Resolver>,
    /// Set by [`GuardedClientBuilder::resolver`]: such a client is never shared.
    own_resolver: bool,
    exempt: Vec<IpAddr>,
    exempt_hosts: Vec<String>,
    connect_timeout: Duration,
    routes: HashMap<IpAddr, SocketAddr>,
}

impl Default for GuardedClientBuilder {
    fn default() -> Self {
        GuardedClientBuilder {
            resolver: Arc::new(SystemResolver),
            own_resolver: false,
            exempt: Vec::new(),
            exempt_hosts: Vec::new(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            routes: HashMap::new(),
        }
    }
}

impl fmt::Debug for GuardedClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuardedClientBuilder")
            .field("allow_private", &self.exempt)
            .field("allow_private_host", &self.exempt_hosts)
            .field("connect_timeout", &self.connect_timeout)
            .field("routes", &self.routes)
            .finish_non_exhaustive()
    }
}

impl GuardedClientBuilder {
    /// Resolves host names with `resolver` instead of the system resolver.
    /// The guard checks whatever it returns.
    pub fn resolver(mut self, resolver: Arc<dyn Resolver>) -> Self {
        self.resolver = resolver;
        self.own_resolver = true;
        self
    }

    /// Exempts exactly these addresses from the address guard, for an
    /// operator's self-hosted backend on a private address. Never for the
    /// fetch tool. [`build`](Self::build) refuses unspecified, multicast and
    /// broadcast addresses.
    pub fn allow_private(mut self, addrs: impl IntoIterator<Item = IpAddr>) -> Self {
        self.exempt.extend(addrs);
        self
    }

    /// Exempts whatever `host` resolves to from the address guard, for
    /// requests to exactly that host (a name or an IP literal; not its
    /// subdomains): for a service the operator named, such as a model server
    /// on `localhost` or a private network, whose addresses the operator
    /// does not list. Never for the fetch tool, and never from a plugin:
    /// the host must come from the operator. Loopback and private addresses
    /// pass; unspecified, multicast, broadcast and link-local ones (the
    /// cloud metadata service) are still refused. Plain http may carry a key
    /// to such a host only on a non-public address. [`build`](Self::build)
    /// refuses a malformed host or such an IP literal.
    pub fn allow_private_host(mut self, host: impl Into<String>) -> Self {
        self.exempt_hosts.push(host.into());
        self
    }

    /// How long to wait for a TCP (and TLS) connection; 10 seconds by default.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Tests only: after `checked` has passed the guard, connect to `to`
    /// instead. The guard still runs on `checked`; a route exempts nothing.
    /// Only names resolved at connect time are routed (IP-literal URLs
    /// connect directly), and a port in the URL replaces `to`'s port.
    #[cfg(feature = "testing")]
    pub fn route_for_tests(mut self, checked: IpAddr, to: SocketAddr) -> Self {
        self.routes.insert(checked, to);
        self
    }

    /// Builds the client. Clients built with the same settings (and the
    /// system resolver) share one: one connection pool, one TLS
    /// configuration and session cache, for as long as any of them is alive.
    /// A host that starts one agent run after another, each with its own
    /// model client, then keeps a few kilobytes per run instead of a whole
    /// client, and reuses its connections.
    pub fn build(self) -> Result<GuardedClient, EgressError> {
        for ip in &self.exempt {
            if let Some(what) = never_exempt(*ip) {
                return Err(EgressError::Config(format!(
                    "cannot exempt {ip} from the address guard: it is {what}; give the backend's own unicast address"
                )));
            }
        }
        let exempt_hosts = HostList::new(&self.exempt_hosts).map_err(|e| {
            EgressError::Config(format!("cannot exempt `{}` from the address guard: {}", e.entry, e.reason))
        })?;
        for entry in exempt_hosts.entries() {
            if let Some(what) = entry.parse::<IpAddr>().ok().and_then(never_exempt) {
                return Err(EgressError::Config(format!(
                    "cannot exempt the host {entry} from the address guard: it is {what}; give the service's own \
                     unicast address or name"
                )));
            }
        }
        let mut exempt = self.exempt;
        exempt.sort();
        exempt.dedup();
        let connect_timeout = self.connect_timeout;
        if self.own_resolver || !self.routes.is_empty() {
            let guard = Guard { resolver: self.resolver, exempt, exempt_hosts, routes: self.routes };
            return Ok(GuardedClient { inner: Inner::new(guard, connect_timeout)? });
        }
        let mut hosts = exempt_hosts.entries().to_vec();
        hosts.sort();
        let key = SharedKey { exempt: exempt.clone(), hosts, connect_timeout };
        // Held while building, so that two builds of one key make one client.
        let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(inner) = shared.get(&key).and_then(Weak::upgrade) {
            return Ok(GuardedClient { inner });
        }
        let guard = Guard { resolver: self.resolver, exempt, exempt_hosts, routes: self.routes };
        let inner = Inner::new(guard, connect_timeout)?;
        shared.retain(|_, client| client.strong_count() > 0);
        shared.insert(key, Arc::downgrade(&inner));
        Ok(GuardedClient { inner })
    }
}

impl Inner {
    fn new(guard: Guard, connect_timeout: Duration) -> Result<Arc<Inner>, EgressError> {
        let guard = Arc::new(guard);
        let http = reqwest::Client::builder()
            // Shared clients outlive runs: bound the idle connections they keep.
            .pool_max_idle_per_host(MAX_IDLE_PER_HOST)
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .referer(false)
            .user_agent(USER_AGENT)
            .connect_timeout(connect_timeout)
            .https_only(false)
            .http1_only()
            .dns_resolver(Arc::new(ConnectGuard(Arc::clone(&guard))))
            .build()
            .map_err(|e| EgressError::Config(format!("cannot set up the HTTP client: {}", chain(&e))))?;
        Ok(Arc::new(Inner { http, guard }))
    }
}

/// The settings that make two guarded clients interchangeable.
#[derive(PartialEq, Eq, Hash)]
struct SharedKey {
    exempt: Vec<IpAddr>,
    hosts: Vec<String>,
    connect_timeout: Duration,
}

/// The live shared clients; an entry goes once its last user drops it.
static SHARED: LazyLock<Mutex<HashMap<SharedKey, Weak<Inner>>>> = LazyLock::new(Default::default);

/// How many idle connections a client keeps to one host.
const MAX_IDLE_PER_HOST: usize = 32;

/// The guarded HTTP client. Cloning is cheap and shares one connection pool.
#[derive(Clone)]
pub struct GuardedClient {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    guard: Arc<Guard>,
}

impl fmt::Debug for GuardedClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuardedClient")
            .field("allow_private", &self.inner.guard.exempt)
            .field("allow_private_host", &self.inner.guard.exempt_hosts)
            .finish_non_exhaustive()
    }
}

enum Hop {
    Done(Box<Head>),
    Redirect(Url),
}

/// A final answer whose headers passed: the body is still to be read.
struct Head {
    url: Url,
    url_shown: String,
    status: u16,
    headers: Vec<(String, String)>,
    content_type: Option<String>,
    response: reqwest::Response,
}

impl GuardedClient {
    /// A client with the system resolver and no exemptions.
    pub fn new() -> Result<Self, EgressError> {
        Self::builder().build()
    }

    /// A builder with the defaults of [`GuardedClient::new`].
    pub fn builder() -> GuardedClientBuilder {
        GuardedClientBuilder::default()
    }

    /// Whether this client exempts any address or host from the guard
    /// ([`GuardedClientBuilder::allow_private`],
    /// [`GuardedClientBuilder::allow_private_host`]). The fetch tool refuses
    /// such a client.
    pub fn has_exemptions(&self) -> bool {
        !self.inner.guard.exempt.is_empty() || !self.inner.guard.exempt_hosts.is_empty()
    }

    /// GETs `url` under `policy`, following allowed redirects. Every hop is
    /// checked against the policy's host lists and the address guard.
    pub async fn get(&self, url: &str, headers: &[(String, String)], policy: &Policy) -> Result<Response, EgressError> {
        self.send(Request::get(url).headers(headers), policy).await
    }

    /// Sends `request` under `policy` and reads the whole body, capped at
    /// [`Policy::max_body`] (then `truncated` is set), all within
    /// [`Policy::timeout`]. The same checks as [`GuardedClient::get`] apply
    /// to every hop; a POST follows only 307 and 308 redirects
    /// ([`Request::post_json`]).
    pub async fn send(&self, request: Request, policy: &Policy) -> Result<Response, EgressError> {
        let deadline = tokio::time::Instant::now() + policy.timeout;
        let head = self.follow(&request, policy, deadline).await?;
        let method = request.method;
        let host = head.url.host_str().unwrap_or_default().to_string();
        let url_shown = head.url_shown.clone();
        let read = async {
            let (body, truncated) = read_capped(head.response, policy, method, &head.url_shown).await?;
            Ok(Response {
                url: head.url.to_string(),
                status: head.status,
                headers: head.headers,
                content_type: head.content_type,
                body,
                truncated,
            })
        };
        let result = match tokio::time::timeout_at(deadline, read).await {
            Ok(result) => result,
            Err(_) => Err(timed_out(method, &url_shown, policy)),
        };
        match &result {
            Ok(r) => info!(
                target: "nexo::egress",
                host,
                verdict = "ok",
                method = method.as_str(),
                url = %url_shown,
                status = r.status,
                bytes = r.body.len(),
                truncated = r.truncated
            ),
            Err(e) => log_error(&host, method, &url_shown, e),
        }
        result
    }

    /// Sends `request` under `policy` and returns once the response headers
    /// are in, for a body read piece by piece ([`StreamingResponse::chunk`]),
    /// such as server-sent events. The checks of [`GuardedClient::send`]
    /// apply to every hop, and the body is scrubbed of the policy's secrets
    /// as it is read. Limits: [`Policy::timeout`] until the headers and then
    /// for each wait for the body; [`Policy::stream_timeout`] for the whole
    /// request; [`Policy::max_body`] bytes of body, past which reading fails
    /// ([`EgressError::BodyTooLarge`]) rather than cutting it silently.
    pub async fn stream(&self, request: Request, policy: &Policy) -> Result<StreamingResponse, EgressError> {
        let started = tokio::time::Instant::now();
        let head = self.follow(&request, policy, started + policy.timeout).await?;
        info!(
            target: "nexo::egress",
            host = head.url.host_str().unwrap_or_default(),
            verdict = "ok",
            method = request.method.as_str(),
            url = %head.url_shown,
            status = head.status,
            streamed = true
        );
        let redactors: Vec<Arc<Redactor>> = policy.secrets.iter().map(|s| Arc::clone(&s.scrubber)).collect();
        let overlap = redactors.iter().map(|r| r.max_match()).max().unwrap_or(0);
        let body = BodyStream {
            response: head.response,
            redactors,
            overlap,
            pending: Vec::new(),
            searched: 0,
            boundary: 0,
            received: 0,
            limit: policy.max_body,
            idle: policy.timeout,
            end: started + policy.stream_timeout,
            ended: false,
            failed: None,
            method: request.method,
            url_shown: head.url_shown,
            meter: policy.meter.clone(),
        };
        Ok(StreamingResponse {
            url: head.url.to_string(),
            status: head.status,
            headers: head.headers,
            content_type: head.content_type,
            body,
        })
    }

    /// Sends `request`, following allowed redirects, up to the final
    /// answer's headers. The one path every request takes through the checks.
    ///
    /// It runs in a task of its own. A guest's host call polls its future on
    /// the guest's fiber stack, and every page of that stack it touches
    /// stays resident for as long as the run waits; connecting (lookup, TCP,
    /// TLS) is the deepest part of a request, so it runs on a worker
    /// thread's stack instead. This keeps 40% less of the fiber stack of a
    /// run waiting on its model. Dropping the future aborts the task.
    async fn follow(
        &self,
        request: &Request,
        policy: &Policy,
        deadline: tokio::time::Instant,
    ) -> Result<Head, EgressError> {
        use tracing::Instrument;
        use tracing::instrument::WithSubscriber;
        struct AbortOnDrop(tokio::task::JoinHandle<Result<Head, EgressError>>);
        impl Drop for AbortOnDrop {
            fn drop(&mut self) {
                self.0.abort();
            }
        }
        let (client, owned, policy) = (self.clone(), request.clone(), policy.clone());
        let work = async move { client.follow_here(&owned, &policy, deadline).await };
        let mut task = AbortOnDrop(tokio::spawn(work.in_current_span().with_current_subscriber()));
        match (&mut task.0).await {
            Ok(result) => result,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => Err(EgressError::Failed(format!(
                "{} {}: the request was cancelled because nexo is shutting down",
                request.method.as_str(),
                strip_query(&request.url)
            ))),
        }
    }

    async fn follow_here(
        &self,
        request: &Request,
        policy: &Policy,
        deadline: tokio::time::Instant,
    ) -> Result<Head, EgressError> {
        let caller = caller_headers(&request.headers, policy)?;
        let mut current = Url::parse(&request.url)
            .map_err(|e| EgressError::BadUrl(format!("`{}` is not a valid URL: {e}", strip_query(&request.url))))?;
        let mut followed = 0;
        loop {
            match self.hop(&current, request, &caller, policy, deadline).await? {
                Hop::Done(head) => return Ok(*head),
                Hop::Redirect(next) => {
                    if followed >= policy.max_redirects {
                        return Err(EgressError::TooManyRedirects { limit: policy.max_redirects, last: shown(&next) });
                    }
                    followed += 1;
                    current = next;
                }
            }
        }
    }

    /// One request; redirects and refusals are logged here, final answers
    /// once their body is read (or, streamed, once their headers are in).
    async fn hop(
        &self,
        url: &Url,
        request: &Request,
        caller: &HeaderMap,
        policy: &Policy,
        deadline: tokio::time::Instant,
    ) -> Result<Hop, EgressError> {
        let url_shown = shown(url);
        let host = url.host_str().unwrap_or_default();
        let result = self.hop_unlogged(url, request, caller, policy, &url_shown, deadline).await;
        match &result {
            Ok(Hop::Done(_)) => {}
            Ok(Hop::Redirect(next)) => info!(
                target: "nexo::egress",
                host,
                verdict = "redirect",
                method = request.method.as_str(),
                url = %url_shown,
                to = %shown(next)
            ),
            Err(e) => log_error(host, request.method, &url_shown, e),
        }
        result
    }

    async fn hop_unlogged(
        &self,
        url: &Url,
        request: &Request,
        caller: &HeaderMap,
        policy: &Policy,
        url_shown: &str,
        deadline: tokio::time::Instant,
    ) -> Result<Hop, EgressError> {
        let host = check_url(url, url_shown)?;
        let host_text = host.to_string();
        if !policy.hosts.matches_url_host(&host) {
            return Err(EgressError::HostNotAllowed { host: host_text, allowed: policy.hosts.to_string() });
        }
        for list in &policy.within {
            if !list.matches_url_host(&host) {
                return Err(EgressError::HostNotAllowed {
                    host: host_text,
                    allowed: format!("{list}, as narrowed by the operator"),
                });
            }
        }
        if let Some(origins) = &policy.origins
            && !origins.iter().any(|o| o.matches(url))
        {
            let allowed: Vec<String> = origins.iter().map(Origin::to_string).collect();
            let allowed = if allowed.is_empty() { "none".to_string() } else { allowed.join(", ") };
            return Err(EgressError::OriginNotAllowed { origin: url.origin().ascii_serialization(), allowed });
        }
        if let Some(meter) = &policy.meter
            && meter.exhausted()
        {
            return Err(Policy::quota_error(meter));
        }
        // Only the secrets whose origin this URL has exactly.
        let inject: Vec<&SecretHeader> = policy.secrets.iter().filter(|s| policy.sends(s, url)).collect();
        if inject.len() < policy.secrets.len() {
            // Says why an upstream answers 401, without naming the key.
            let withheld: Vec<&str> =
                policy.secrets.iter().filter(|s| !inject.iter().any(|i| i.name == s.name)).map(|s| s.name()).collect();
            tracing::debug!(target: "nexo::egress", url = %url_shown, ?withheld, "not sending secret headers: this URL is not one of their origins");
        }
        let method = request.method;
        let work = async {
            let guard = &self.inner.guard;
            let host_exempt = guard.host_exempt(&host);
            let addrs = match host {
                // Refuses early with a clear error; the connect-time resolver
                // checks again whatever it connects to.
                Host::Domain(name) => guard.resolve_checked(name).await?,
                Host::Ipv4(ip) => vec![guard.checked(&host_text, host_exempt, IpAddr::V4(ip))?],
                Host::Ipv6(ip) => vec![guard.checked(&host_text, host_exempt, IpAddr::V6(ip))?],
            };
            // A key crosses the network only inside TLS, or to the operator's
            // own exempted service (a test route stands in for TLS).
            if !inject.is_empty()
                && url.scheme() != "https"
                && !addrs.iter().all(|ip| guard.private_ok(host_exempt, *ip))
            {
                return Err(EgressError::BadRequest(format!(
                    "{url_shown} is plain http, and nexo sends this host's API key only over https; use an https URL"
                )));
            }
            let mut headers = caller.clone();
            for (name, value) in &policy.headers {
                headers.insert(name.clone(), value.clone());
            }
            for secret in &inject {
                let (name, value) = secret.header()?;
                headers.insert(name, value);
            }
            // Uncompressed only: the scrubber must see the bytes the caller gets.
            headers.insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
            let mut builder = match method {
                Method::Get => self.inner.http.get(url.clone()),
                Method::Post => self.inner.http.post(url.clone()),
            };
            if let Some(body) = &request.body {
                headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                builder = builder.body(body.clone());
                // Counted as sent: past the allowance, this is the last request.
                if let Some(meter) = &policy.meter {
                    meter.add(body.len());
                }
            }
            let response = builder.headers(headers).send().await.map_err(|e| send_error(e, method, url_shown))?;
            head(url, response, policy, method, url_shown)
        };
        match tokio::time::timeout_at(deadline, work).await {
            Ok(result) => result,
            Err(_) => Err(timed_out(method, url_shown, policy)),
        }
    }
}

fn timed_out(method: Method, url_shown: &str, policy: &Policy) -> EgressError {
    EgressError::Timeout(format!(
        "{} {url_shown} did not finish within {:?} (redirects included); the server is slow or unreachable — \
         retry later or allow more time",
        method.as_str(),
        policy.timeout
    ))
}

fn log_error(host: &str, method: Method, url_shown: &str, e: &EgressError) {
    info!(
        target: "nexo::egress",
        host,
        verdict = if e.is_refusal() { "refused" } else { "failed" },
        method = method.as_str(),
        url = %url_shown,
        error = %e
    );
}

/// A redirect to follow, or the final answer with its headers scrubbed and
/// its codings checked.
fn head(
    url: &Url,
    response: reqwest::Response,
    policy: &Policy,
    method: Method,
    url_shown: &str,
) -> Result<Hop, EgressError> {
    let status = response.status().as_u16();
    // Every secret of the policy, not only those sent on this hop: an
    // earlier hop may have put one into this URL.
    let secrets = policy.scrubbers();
    if matches!(status, 301 | 302 | 303 | 307 | 308)
        && let Some(location) = response.headers().get(LOCATION)
    {
        // Scrubbed too: the next URL shows up in logs and error messages.
        let location = String::from_utf8_lossy(&scrub(location.as_bytes().to_vec(), &secrets)).into_owned();
        let next = url.join(&location).map_err(|e| {
            EgressError::BadUrl(format!(
                "{url_shown} redirected to `{}`, which is not a valid URL: {e}",
                strip_query(&location)
            ))
        })?;
        if method == Method::Post && !matches!(status, 307 | 308) {
            return Err(EgressError::RedirectNotFollowed {
                method: method.as_str().to_string(),
                status,
                from: url_shown.to_string(),
                to: shown(&next),
            });
        }
        return Ok(Hop::Redirect(next));
    }
    let headers: Vec<(String, String)> = response
        .headers()
        .iter()
        .map(|(name, value)| {
            // Names too: a server can echo a key as a header name.
            let name = scrub(name.as_str().as_bytes().to_vec(), &secrets);
            let value = scrub(value.as_bytes().to_vec(), &secrets);
            (String::from_utf8_lossy(&name).into_owned(), String::from_utf8_lossy(&value).into_owned())
        })
        .collect();
    // Refused rather than decoded: decoding would put a decompressor
    // (and its zip-bomb limits) in front of the scrubber, while a server
    // asked for `identity` has no reason to send anything else.
    // Hyper removes chunked framing itself.
    for (header, allowed) in
        [(CONTENT_ENCODING.as_str(), &["identity"][..]), (TRANSFER_ENCODING.as_str(), &["identity", "chunked"][..])]
    {
        for (_, value) in headers.iter().filter(|(name, _)| name == header) {
            let refused = value
                .split(',')
                .map(str::trim)
                .any(|coding| !coding.is_empty() && !allowed.iter().any(|a| coding.eq_ignore_ascii_case(a)));
            if refused {
                return Err(EgressError::UnrequestedEncoding {
                    url: url_shown.to_string(),
                    header: header.to_string(),
                    encoding: value.clone(),
                });
            }
        }
    }
    let content_type = headers.iter().find(|(name, _)| name == CONTENT_TYPE.as_str()).map(|(_, v)| v.clone());
    Ok(Hop::Done(Box::new(Head {
        url: url.clone(),
        url_shown: url_shown.to_string(),
        status,
        headers,
        content_type,
        response,
    })))
}

/// The whole body, scrubbed and cut at the policy's limit.
async fn read_capped(
    mut response: reqwest::Response,
    policy: &Policy,
    method: Method,
    url_shown: &str,
) -> Result<(Vec<u8>, bool), EgressError> {
    let secrets = policy.scrubbers();
    // Read a little past the cap and scrub before cutting, so a key
    // straddling the cap cannot survive in part.
    let overlap = secrets.iter().map(|s| s.max_match()).max().unwrap_or(0);
    let read_cap = policy.max_body.saturating_add(overlap);
    let mut body = Vec::new();
    let mut truncated = false;
    while let Some(chunk) = response.chunk().await.map_err(|e| send_error(e, method, url_shown))? {
        if let Some(meter) = &policy.meter
            && !meter.add(chunk.len())
        {
            return Err(Policy::quota_error(meter));
        }
        let room = read_cap - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            truncated = true;
            break;
        }
        body.extend_from_slice(&chunk);
    }
    let mut body = scrub(body, &secrets);
    if body.len() > policy.max_body {
        body.truncate(policy.max_body);
        truncated = true;
    }
    Ok((body, truncated))
}

fn is_link_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
    }
}

/// What no exemption may cover, and why: `None` for an address an operator
/// may exempt.
fn never_exempt(ip: IpAddr) -> Option<&'static str> {
    let canonical = ip.to_canonical();
    if canonical.is_unspecified() {
        Some("the unspecified address")
    } else if canonical.is_multicast() {
        Some("a multicast address")
    } else if canonical == IpAddr::from([255, 255, 255, 255]) {
        Some("the broadcast address")
    } else if is_link_local(canonical) {
        Some("a link-local address (the range of cloud metadata services such as 169.254.169.254)")
    } else {
        None
    }
}

/// Scheme, user info and host checks for one hop.
fn check_url<'u>(url: &'u Url, url_shown: &str) -> Result<Host<&'u str>, EgressError> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(EgressError::BadUrl(format!(
            "{url_shown} uses the scheme `{}`; only http and https URLs can be fetched",
            url.scheme()
        )));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(EgressError::BadUrl(format!(
            "{url_shown} carries credentials (`user:password@`); remove them — nexo never sends credentials from URLs"
        )));
    }
    url.host().ok_or_else(|| EgressError::BadUrl(format!("{url_shown} has no host")))
}

/// The caller's headers minus those the client controls, carry credentials,
/// or share a name with a secret header.
fn caller_headers(headers: &[(String, String)], policy: &Policy) -> Result<HeaderMap, EgressError> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| EgressError::BadRequest(format!("`{name}` is not a valid header name")))?;
        let lower = header.as_str();
        let allowed = caller_may_send(lower) || (policy.mcp_headers && is_mcp_header(lower));
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

/// A reqwest error as an [`EgressError`], keeping a guard refusal from the
/// connect-time resolver as it was.
fn send_error(error: reqwest::Error, method: Method, url_shown: &str) -> EgressError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
    while let Some(err) = source {
        if let Some(Refused(refusal)) = err.downcast_ref::<Refused>() {
            return refusal.clone();
        }
        source = err.source();
    }
    let error = error.without_url();
    let method = method.as_str();
    if error.is_timeout() {
        EgressError::Timeout(format!("{method} {url_shown}: {}; the server is slow or unreachable", chain(&error)))
    } else if error.is_connect() {
        // reqwest's own message ("error sending request") says nothing; its sources hold the cause.
        let message = std::error::Error::source(&error).map_or_else(|| chain(&error), chain);
        EgressError::Connect { url: url_shown.to_string(), message }
    } else {
        EgressError::Failed(format!("{method} {url_shown}: {}", chain(&error)))
    }
}

/// An error and its sources, joined with ": ".
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(err) = source {
        let next = err.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = err.source();
    }
    text
}

/// Scheme, host, port and path: query strings and fragments can hold
/// secrets, and so can matrix parameters (`/v1;jsessionid=…`), shown as
/// `;<redacted>`.
fn shown(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default();
    let path = url.path();
    let path = if path.contains(';') {
        let segments: Vec<String> = path
            .split('/')
            .map(|segment| match segment.split_once(';') {
                Some((name, _)) => format!("{name};<redacted>"),
                None => segment.to_string(),
            })
            .collect();
        segments.join("/")
    } else {
        path.to_string()
    };
    match url.port() {
        Some(port) => format!("{}://{host}:{port}{path}", url.scheme()),
        None => format!("{}://{host}{path}", url.scheme()),
    }
}

fn strip_query(url: &str) -> &str {
    url.split(['?', '#']).next().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn shown_urls_drop_query_and_userinfo() {
        let url = Url::parse("https://u:p@example.com:8443/a/b?token=secret#frag").unwrap();
        assert_eq!(shown(&url), "https://example.com:8443/a/b");
        let url = Url::parse("http://h/v1;jsessionid=secret/chat").unwrap();
        assert_eq!(shown(&url), "http://h/v1;<redacted>/chat");
    }

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
